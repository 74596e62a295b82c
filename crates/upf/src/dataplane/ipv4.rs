//! The few IPv4 header fields the user-space data path reads (RFC 791),
//! checked before use: no panic on any input.

use std::net::Ipv4Addr;

/// What rule matching needs from an inner IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Info {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    /// Source and destination ports, for the first (or only) fragment of
    /// TCP, UDP and SCTP.
    pub ports: Option<(u16, u16)>,
    /// MF set or a non-zero fragment offset.
    pub fragment: bool,
}

pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_SCTP: u8 = 132;

/// Reads an IPv4 header; `None` if it is not a well-formed IPv4 packet
/// that fits `b`.
pub fn parse(b: &[u8]) -> Option<Ipv4Info> {
    if b.len() < 20 || b[0] >> 4 != 4 {
        return None;
    }
    let ihl = (b[0] & 0x0f) as usize * 4;
    let total = u16::from_be_bytes([b[2], b[3]]) as usize;
    if ihl < 20 || total < ihl || total > b.len() {
        return None;
    }
    let frag = u16::from_be_bytes([b[6], b[7]]);
    let offset = frag & 0x1fff;
    let fragment = frag & 0x2000 != 0 || offset != 0;
    let proto = b[9];
    let ports = match proto {
        PROTO_TCP | PROTO_UDP | PROTO_SCTP if offset == 0 && total >= ihl + 4 => {
            Some((u16::from_be_bytes([b[ihl], b[ihl + 1]]), u16::from_be_bytes([b[ihl + 2], b[ihl + 3]])))
        }
        _ => None,
    };
    Some(Ipv4Info {
        src: Ipv4Addr::new(b[12], b[13], b[14], b[15]),
        dst: Ipv4Addr::new(b[16], b[17], b[18], b[19]),
        proto,
        ports,
        fragment,
    })
}

/// RFC 1071 checksum over `b`.
pub fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Builds an IPv4/UDP packet (tests and tools): header checksum set, UDP
/// checksum 0.
pub fn udp_packet(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = PROTO_UDP;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_udp_and_fragments() {
        let mut p = udp_packet([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 1000, 2000, b"hi");
        assert_eq!(checksum(&p[..20]), 0);
        let i = parse(&p).unwrap();
        assert_eq!((i.src, i.dst, i.proto, i.ports, i.fragment), ([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 17, Some((1000, 2000)), false));
        p[6] = 0x00;
        p[7] = 0x10; // offset 16 * 8
        let i = parse(&p).unwrap();
        assert!(i.fragment);
        assert_eq!(i.ports, None);
        assert_eq!(parse(&p[..10]), None);
        assert_eq!(parse(&[0x60; 40]), None);
    }
}
