//! The SCTP common header (RFC 9260 3.1) and its CRC32c checksum (Appendix A).

use super::{be16, be32, chunk::Chunk, WireError};

mod field {
    use std::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const VTAG: Range<usize> = 4..8;
    pub const CHECKSUM: Range<usize> = 8..12;
    pub const CHUNKS: usize = 12;
}

/// Length of the common header.
pub const HEADER_LEN: usize = field::CHUNKS;

/// A view of an SCTP packet (common header followed by chunks).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view that has at least a whole common header.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Packet { buffer })
    }

    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }
    pub fn verification_tag(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VTAG.start)
    }
    /// The checksum as stored: CRC32c in little-endian byte order
    /// (RFC 9260 Appendix A; what Linux and usrsctp put on the wire).
    pub fn checksum(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::CHECKSUM];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// CRC32c over the packet with the checksum field taken as zero.
    pub fn compute_checksum(&self) -> u32 {
        let b = self.buffer.as_ref();
        let crc = crc32c::crc32c(&b[..field::CHECKSUM.start]);
        let crc = crc32c::crc32c_append(crc, &[0; 4]);
        crc32c::crc32c_append(crc, &b[field::CHUNKS..])
    }

    pub fn verify_checksum(&self) -> bool {
        self.checksum() == self.compute_checksum()
    }

    /// The bytes after the common header.
    pub fn chunk_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[field::CHUNKS..]
    }

    /// The chunks of the packet; an item is an error if the rest is malformed.
    pub fn chunks(&self) -> Chunks<'_> {
        Chunks { rest: self.chunk_bytes() }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_verification_tag(&mut self, v: u32) {
        self.buffer.as_mut()[field::VTAG].copy_from_slice(&v.to_be_bytes());
    }
    /// Compute and store the checksum; call last.
    pub fn fill_checksum(&mut self) {
        let c = self.compute_checksum();
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_le_bytes());
    }
}

/// Iterator over the chunks of a packet.
pub struct Chunks<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Result<Chunk<&'a [u8]>, WireError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match Chunk::new_checked(self.rest) {
            Ok(c) => {
                let len = c.padded_len().min(self.rest.len());
                let (this, rest) = self.rest.split_at(len);
                self.rest = rest;
                Some(Ok(Chunk::new_unchecked(this)))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// The common header as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonHeader {
    pub src_port: u16,
    pub dst_port: u16,
    pub verification_tag: u32,
}

impl CommonHeader {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        CommonHeader { src_port: p.src_port(), dst_port: p.dst_port(), verification_tag: p.verification_tag() }
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write the header (checksum zeroed; fill it once the chunks are in).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_verification_tag(self.verification_tag);
        p.buffer.as_mut()[field::CHECKSUM].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_checksum() {
        let mut buf = vec![0u8; 16];
        buf[12..].copy_from_slice(&[11, 0, 0, 4]); // COOKIE ACK
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        let h = CommonHeader { src_port: 36412, dst_port: 50000, verification_tag: 0xdead_beef };
        h.emit(&mut p);
        p.fill_checksum();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(CommonHeader::parse(&p), h);
        assert!(p.verify_checksum());
        let mut bad = buf.clone();
        bad[13] ^= 1;
        assert!(!Packet::new_checked(&bad[..]).unwrap().verify_checksum());
    }

    #[test]
    fn crc32c_matches_rfc3720_vector() {
        // RFC 3720 B.4: 32 bytes of zeros -> 0x8a9136aa.
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8a91_36aa);
    }

    #[test]
    fn too_short_is_an_error() {
        assert_eq!(Packet::new_checked(&[0u8; 11][..]).unwrap_err(), WireError::Truncated);
    }
}
