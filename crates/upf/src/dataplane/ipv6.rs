//! IPv6 as the user-space data path needs it (RFC 8200): the fixed
//! header's addresses, next header and hop limit, and the ports of TCP,
//! UDP and SCTP right behind it; checked before use, no panic on any
//! input. And the Router Advertisement that answers a UE's Router
//! Solicitation with its /64 prefix (TS 29.061 11.2.1.3.2; RFC 4861
//! 6.2.3), which makes the UE's stateless address autoconfiguration work.

use mobicore_common::inet::Sum;
use std::net::Ipv6Addr;

/// What rule matching needs from an inner IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Info {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    /// The next header of the fixed header (no extension header is
    /// walked: a packet with one carries no ports for the filters).
    pub next_header: u8,
    pub hop_limit: u8,
    /// Source and destination ports of TCP, UDP and SCTP.
    pub ports: Option<(u16, u16)>,
}

pub const NEXT_ICMPV6: u8 = 58;
const ROUTER_SOLICITATION: u8 = 133;
const ROUTER_ADVERTISEMENT: u8 = 134;

/// Reads an IPv6 header; `None` if `b` is not a whole IPv6 packet.
pub fn parse(b: &[u8]) -> Option<Ipv6Info> {
    if b.len() < 40 || b[0] >> 4 != 6 {
        return None;
    }
    let payload = usize::from(u16::from_be_bytes([b[4], b[5]]));
    if 40 + payload > b.len() {
        return None;
    }
    let addr = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&b[at..at + 16]).expect("16 octets"));
    let next_header = b[6];
    let ports = match next_header {
        6 | 17 | 132 if payload >= 4 => Some((u16::from_be_bytes([b[40], b[41]]), u16::from_be_bytes([b[42], b[43]]))),
        _ => None,
    };
    Some(Ipv6Info { src: addr(8), dst: addr(24), next_header, hop_limit: b[7], ports })
}

/// The /64 prefix of an address, the key of a UE's session (TS 23.401
/// 5.3.1.2.2: each PDN connection gets a /64).
pub fn prefix64(a: Ipv6Addr) -> u64 {
    (u128::from(a) >> 64) as u64
}

/// Whether `b` (parsed as `ip`) is a Router Solicitation (RFC 4861 4.1:
/// ICMPv6 type 133, code 0, hop limit 255).
pub fn is_router_solicitation(ip: &Ipv6Info, b: &[u8]) -> bool {
    ip.next_header == NEXT_ICMPV6
        && ip.hop_limit == 255
        && b.get(40) == Some(&ROUTER_SOLICITATION)
        && b.get(41) == Some(&0)
}

/// The link-local address the gateway advertises from (RFC 4861 6.1.2: a
/// Router Advertisement's source is link-local).
pub const GATEWAY_LINK_LOCAL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

/// A Router Advertisement to `dst` with one Prefix Information option for
/// `prefix`/64, autonomous, not on-link, lifetimes infinite (TS 29.061
/// 11.2.1.3.4: the PDN connection's prefix; the UE sends everything to the
/// gateway), and an MTU option when `mtu` is given.
pub fn router_advertisement(dst: Ipv6Addr, prefix: Ipv6Addr, mtu: Option<u32>) -> Vec<u8> {
    let mut icmp = vec![
        ROUTER_ADVERTISEMENT,
        0,
        0,
        0,    // checksum, below
        64,   // Cur Hop Limit
        0,    // M and O clear: addresses by SLAAC, DNS from the PCO (TS 24.008 10.5.6.3)
        0x07, // Router Lifetime 1800 s
        0x08,
        0,
        0,
        0,
        0, // Reachable Time: unspecified
        0,
        0,
        0,
        0, // Retrans Timer: unspecified
    ];
    // Prefix Information (RFC 4861 4.6.2): type 3, length 4 (32 octets).
    icmp.extend_from_slice(&[3, 4, 64, 0x40]); // prefix length 64; A set, L clear
    icmp.extend_from_slice(&u32::MAX.to_be_bytes()); // Valid Lifetime: infinity
    icmp.extend_from_slice(&u32::MAX.to_be_bytes()); // Preferred Lifetime: infinity
    icmp.extend_from_slice(&[0; 4]);
    let net = u128::from(prefix) & !((1u128 << 64) - 1);
    icmp.extend_from_slice(&net.to_be_bytes());
    if let Some(mtu) = mtu {
        // MTU (RFC 4861 4.6.4): type 5, length 1.
        icmp.extend_from_slice(&[5, 1, 0, 0]);
        icmp.extend_from_slice(&mtu.to_be_bytes());
    }
    let src = GATEWAY_LINK_LOCAL;
    let len = icmp.len() as u32;
    // RFC 8200 8.1: the checksum covers a pseudo-header of both addresses,
    // the upper-layer length and the next header.
    let sum = Sum::new()
        .feed(&src.octets())
        .feed(&dst.octets())
        .feed(&len.to_be_bytes())
        .feed(&[0, 0, 0, NEXT_ICMPV6])
        .feed(&icmp)
        .finish();
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut p = Vec::with_capacity(40 + icmp.len());
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    p.extend_from_slice(&[NEXT_ICMPV6, 255]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&icmp);
    p
}

/// An IPv6/UDP packet (RFC 768, RFC 8200 8.1), for tests.
#[cfg(test)]
pub fn udp_packet(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let len = 8 + payload.len();
    let mut udp = Vec::with_capacity(len);
    udp.extend_from_slice(&sport.to_be_bytes());
    udp.extend_from_slice(&dport.to_be_bytes());
    udp.extend_from_slice(&(len as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let sum = Sum::new()
        .feed(&src.octets())
        .feed(&dst.octets())
        .feed(&(len as u32).to_be_bytes())
        .feed(&[0, 0, 0, 17])
        .feed(&udp)
        .finish();
    udp[6..8].copy_from_slice(&(if sum == 0 { 0xffff } else { sum }).to_be_bytes());
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(len as u16).to_be_bytes());
    p.extend_from_slice(&[17, 64]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&udp);
    p
}

/// A Router Solicitation from `src` to all routers (RFC 4861 4.1), for tests.
#[cfg(test)]
pub fn router_solicitation(src: Ipv6Addr) -> Vec<u8> {
    let dst: Ipv6Addr = "ff02::2".parse().unwrap();
    let mut icmp = vec![ROUTER_SOLICITATION, 0, 0, 0, 0, 0, 0, 0];
    let sum = Sum::new()
        .feed(&src.octets())
        .feed(&dst.octets())
        .feed(&8u32.to_be_bytes())
        .feed(&[0, 0, 0, NEXT_ICMPV6])
        .feed(&icmp)
        .finish();
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut p = vec![0x60, 0, 0, 0, 0, 8, NEXT_ICMPV6, 255];
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&icmp);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_addresses_and_ports_and_refuses_short_or_other_versions() {
        let (a, b): (Ipv6Addr, Ipv6Addr) = ("2001:db8:1:2::7".parse().unwrap(), "2001:db8:ff::1".parse().unwrap());
        let p = udp_packet(a, b, 4000, 53, b"q");
        let i = parse(&p).unwrap();
        assert_eq!((i.src, i.dst, i.next_header, i.ports), (a, b, 17, Some((4000, 53))));
        assert_eq!(prefix64(a), 0x2001_0db8_0001_0002);
        assert!(parse(&p[..39]).is_none());
        assert!(parse(&p[..p.len() - 1]).is_none(), "payload length past the end");
        let mut v4 = p.clone();
        v4[0] = 0x45;
        assert!(parse(&v4).is_none());
        for n in 0..p.len() {
            let _ = parse(&p[..n]);
        }
    }

    #[test]
    fn a_router_advertisement_carries_the_prefix_and_a_correct_checksum() {
        let ue_ll: Ipv6Addr = "fe80::1234:5678:9abc:def0".parse().unwrap();
        let rs = router_solicitation(ue_ll);
        assert!(is_router_solicitation(&parse(&rs).unwrap(), &rs));
        let prefix: Ipv6Addr = "2001:db8:0:42::".parse().unwrap();
        let ra = router_advertisement(ue_ll, prefix, Some(1400));
        let i = parse(&ra).unwrap();
        assert_eq!((i.src, i.dst, i.next_header, i.hop_limit), (GATEWAY_LINK_LOCAL, ue_ll, 58, 255));
        assert_eq!(ra[40], ROUTER_ADVERTISEMENT);
        // The checksum verifies: the sum over pseudo-header and message is 0.
        let icmp = &ra[40..];
        let check = Sum::new()
            .feed(&i.src.octets())
            .feed(&i.dst.octets())
            .feed(&(icmp.len() as u32).to_be_bytes())
            .feed(&[0, 0, 0, 58])
            .feed(icmp)
            .finish();
        assert_eq!(check, 0);
        // Prefix Information: /64, A set, the prefix.
        assert_eq!(&icmp[16..20], &[3, 4, 64, 0x40]);
        assert_eq!(&icmp[32..48], &prefix.octets());
        assert_eq!(&icmp[48..56], &[5, 1, 0, 0, 0, 0, 0x05, 0x78]);
    }
}
