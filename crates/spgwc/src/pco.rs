//! Protocol Configuration Options the PDN GW answers (TS 24.008
//! 10.5.6.3, TS 29.274 8.13; ePCO, TS 24.301 9.9.4.26, has the same
//! contents): the DNS server addresses and the IPv4 link MTU of the APN,
//! each only when the UE asked for it.
//!
//! The octets here are the IE's value: the configuration protocol octet
//! (octet 3), then containers of identifier (2 octets), length (1) and
//! contents.

use std::net::IpAddr;

/// Container identifiers, UE to network (requests) and network to UE
/// (answers) alike (TS 24.008 10.5.6.3).
pub mod container {
    pub const DNS_SERVER_IPV6: u16 = 0x0003;
    pub const DNS_SERVER_IPV4: u16 = 0x000D;
    pub const IPV4_LINK_MTU: u16 = 0x0010;
}

/// Octet 3: extension bit set, configuration protocol 0 (PPP).
const CONFIG_PROTOCOL_PPP: u8 = 0x80;

/// The container identifiers in the UE's PCO, in order. A container
/// running past the end ends the list (what came before still counts).
pub fn requested(pco: &[u8]) -> Vec<u16> {
    let mut ids = vec![];
    let mut rest = pco.get(1..).unwrap_or(&[]);
    while rest.len() >= 3 {
        let id = u16::from_be_bytes([rest[0], rest[1]]);
        let len = rest[2] as usize;
        if rest.len() < 3 + len {
            break;
        }
        ids.push(id);
        rest = &rest[3 + len..];
    }
    ids
}

/// The PCO answering `requested` for an APN with DNS servers `dns` and
/// IPv4 link MTU `mtu` (0: none configured).
pub fn answer(requested: &[u16], dns: &[IpAddr], mtu: u16) -> Vec<u8> {
    let mut out = vec![CONFIG_PROTOCOL_PPP];
    let mut put = |id: u16, v: &[u8]| {
        out.extend_from_slice(&id.to_be_bytes());
        out.push(v.len() as u8);
        out.extend_from_slice(v);
    };
    let mut seen = vec![];
    for &id in requested {
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        match id {
            container::DNS_SERVER_IPV4 => {
                for a in dns.iter().filter_map(|a| match a {
                    IpAddr::V4(a) => Some(a),
                    IpAddr::V6(_) => None,
                }) {
                    put(id, &a.octets());
                }
            }
            container::DNS_SERVER_IPV6 => {
                for a in dns.iter().filter_map(|a| match a {
                    IpAddr::V6(a) => Some(a),
                    IpAddr::V4(_) => None,
                }) {
                    put(id, &a.octets());
                }
            }
            container::IPV4_LINK_MTU if mtu > 0 => put(id, &mtu.to_be_bytes()),
            // Anything else (IPCP, P-CSCF, address allocation via NAS...)
            // is not answered: the UE treats it as not provided.
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dns_and_mtu_answered_only_when_asked() {
        // A UE asking for IPv4 DNS, IPv4 link MTU and IPCP (0x8021, with content).
        let ue = [0x80, 0x00, 0x0d, 0x00, 0x00, 0x10, 0x00, 0x80, 0x21, 0x02, 0x01, 0x00];
        assert_eq!(requested(&ue), vec![0x000d, 0x0010, 0x8021]);
        let dns: Vec<IpAddr> = vec!["10.0.0.53".parse().unwrap(), "2001:db8::53".parse().unwrap()];
        let a = answer(&requested(&ue), &dns, 1400);
        assert_eq!(a, [0x80, 0x00, 0x0d, 4, 10, 0, 0, 53, 0x00, 0x10, 2, 0x05, 0x78]);
        let v6 = answer(&[container::DNS_SERVER_IPV6], &dns, 1400);
        assert_eq!(&v6[1..4], [0x00, 0x03, 16]);
        assert_eq!(v6.len(), 1 + 3 + 16);
        assert_eq!(answer(&[container::IPV4_LINK_MTU], &dns, 0), [0x80], "no MTU configured");
    }

    proptest! {
        #[test]
        fn requested_never_panics_and_answers_parse_back(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let ids = requested(&b);
            let a = answer(&ids, &["8.8.8.8".parse().unwrap(), "::1".parse().unwrap()], 1500);
            // Every answer container is one the UE asked for.
            prop_assert!(requested(&a).iter().all(|id| ids.contains(id)));
        }
    }
}
