//! The Internet checksum (RFC 1071), the one every crate uses (IPv4
//! headers, RFC 791; ICMP, RFC 792).
//!
//! [`Sum`] accumulates 16-bit one's complement words over any number of
//! slices (a header, then a payload) without copying them;
//! [`checksum`] is the common case of one slice. A packet with its checksum
//! field filled in sums to zero: `checksum(packet) == 0` verifies it.

/// A running one's complement sum of 16-bit big-endian words (RFC 1071 4.1).
/// Slices are summed as if concatenated: an odd-length slice carries its
/// last octet over to the next one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sum {
    acc: u64,
    /// The high octet of a word an odd-length slice left unfinished.
    pending: Option<u8>,
}

impl Sum {
    pub fn new() -> Self {
        Sum::default()
    }

    /// Adds `data`, continuing a word an earlier odd-length slice began.
    pub fn feed(mut self, mut data: &[u8]) -> Self {
        if let Some(hi) = self.pending.take() {
            match data.split_first() {
                Some((&lo, rest)) => {
                    self.acc += u64::from(u16::from_be_bytes([hi, lo]));
                    data = rest;
                }
                None => {
                    self.pending = Some(hi);
                    return self;
                }
            }
        }
        let mut words = data.chunks_exact(2);
        for w in &mut words {
            self.acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
        self.pending = words.remainder().first().copied();
        self
    }

    /// The folded 16-bit one's complement sum (not yet complemented); an
    /// unfinished odd octet is padded with zero (RFC 1071 4.1).
    pub fn fold(self) -> u16 {
        let mut s = self.acc + self.pending.map_or(0, |hi| u64::from(hi) << 8);
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    /// The checksum to put in the packet: the complement of [`Sum::fold`].
    pub fn finish(self) -> u16 {
        !self.fold()
    }
}

/// The Internet checksum of `data` (RFC 1071): what goes in the checksum
/// field when the field is zero in `data`, and 0 when `data` carries a
/// correct checksum.
pub fn checksum(data: &[u8]) -> u16 {
    Sum::new().feed(data).finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 1071 3's worked example: words 0001 f203 f4f5 f6f7 sum to ddf2.
    #[test]
    fn rfc1071_example() {
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(Sum::new().feed(&d).fold(), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn ipv4_header_of_a_known_packet() {
        // A captured header (checksum 0xb861 at octets 10-11).
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
            0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0);
        h[10..12].fill(0);
        assert_eq!(checksum(&h), 0xb861);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(checksum(&[0xff]), !0xff00);
        assert_eq!(checksum(&[]), 0xffff);
        assert_eq!(checksum(&[0x12, 0x34, 0x56]), !(0x1234u16 + 0x5600));
    }

    proptest! {
        #[test]
        fn a_packet_with_its_checksum_sums_to_zero(mut data in proptest::collection::vec(any::<u8>(), 2..200), at in any::<prop::sample::Index>()) {
            // Any 16-bit aligned place can hold the checksum field.
            let at = at.index(data.len() / 2) * 2;
            data[at..at + 2].fill(0);
            let c = checksum(&data);
            data[at..at + 2].copy_from_slice(&c.to_be_bytes());
            prop_assert_eq!(checksum(&data), 0);
        }

        #[test]
        fn slices_sum_as_if_concatenated(data in proptest::collection::vec(any::<u8>(), 0..200), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4)) {
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(data.len() + 1)).collect();
            cuts.sort_unstable();
            let mut s = Sum::new();
            let mut from = 0;
            for c in cuts.into_iter().chain([data.len()]) {
                s = s.feed(&data[from..c]);
                from = c;
            }
            prop_assert_eq!(s.finish(), checksum(&data));
        }

        #[test]
        fn matches_the_definition(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            // RFC 1071 4.1: 32-bit accumulator, odd octet padded, carries folded.
            let mut sum: u32 = 0;
            for c in data.chunks(2) {
                sum += u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]));
            }
            while sum >> 16 != 0 {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            prop_assert_eq!(checksum(&data), !(sum as u16));
        }
    }
}
