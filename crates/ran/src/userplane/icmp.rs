//! ICMP echo (RFC 792) as the traffic driver sends and reads it, no I/O.

use mobicore_common::inet::checksum;
use std::net::Ipv4Addr;

const ECHO_REPLY: u8 = 0;
const ECHO_REQUEST: u8 = 8;

/// An ICMP Echo Request message (without IP header).
pub fn echo_request(id: u16, seq: u16, payload_len: usize) -> Vec<u8> {
    let mut m = vec![ECHO_REQUEST, 0, 0, 0];
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend((0..payload_len).map(|i| i as u8));
    let c = checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// An Echo Reply in an IPv4 packet (as a raw socket reads it): source,
/// identifier and sequence number. `None` for anything else, including a
/// bad checksum.
pub fn parse_echo_reply(ip: &[u8]) -> Option<(Ipv4Addr, u16, u16)> {
    let ihl = usize::from(*ip.first()? & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip.len() < ihl + 8 || ip[9] != 1 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]])).min(ip.len());
    let m = ip.get(ihl..total)?;
    if m.len() < 8 || m[0] != ECHO_REPLY || m[1] != 0 || checksum(m) != 0 {
        return None;
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    Some((src, u16::from_be_bytes([m[4], m[5]]), u16::from_be_bytes([m[6], m[7]])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn wrap_reply(mut m: Vec<u8>, src: Ipv4Addr) -> Vec<u8> {
        m[0] = ECHO_REPLY;
        m[2..4].fill(0);
        let c = checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0];
        ip.extend_from_slice(&src.octets());
        ip.extend_from_slice(&[10, 45, 0, 2]);
        let len = (20 + m.len()) as u16;
        ip[2..4].copy_from_slice(&len.to_be_bytes());
        ip.extend_from_slice(&m);
        ip
    }

    #[test]
    fn request_checksum_verifies_and_reply_parses() {
        let m = echo_request(0x1234, 7, 56);
        assert_eq!(m.len(), 64);
        assert_eq!(checksum(&m), 0);
        let src = Ipv4Addr::new(10, 200, 2, 2);
        assert_eq!(parse_echo_reply(&wrap_reply(m.clone(), src)), Some((src, 0x1234, 7)));
        let mut bad = wrap_reply(m, src);
        bad[30] ^= 1;
        assert_eq!(parse_echo_reply(&bad), None);
    }

    #[test]
    fn odd_length_request_verifies() {
        let m = echo_request(1, 1, 3);
        assert_eq!(checksum(&m), 0);
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = parse_echo_reply(&bytes);
        }
    }
}
