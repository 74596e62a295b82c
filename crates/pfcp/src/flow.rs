//! SDF filters: the IPFilterRule subset of a Flow Description (TS 29.244
//! 8.2.5, TS 29.212 5.4.2, RFC 6733 4.3):
//! `permit out <proto|ip> from <addr[/len]|any> [ports] to <addr|assigned|any> [ports]`.
//! The description is written for the downlink direction: `from` is the
//! remote end, `to` the UE.

use std::net::Ipv4Addr;

/// An address term of a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrMatch {
    Any,
    /// `assigned`: the UE's address (matched by the PDR's UE IP).
    Assigned,
    Prefix(Ipv4Addr, u8),
}

impl AddrMatch {
    fn matches(&self, a: Ipv4Addr) -> bool {
        match *self {
            AddrMatch::Any | AddrMatch::Assigned => true,
            AddrMatch::Prefix(_, 0) => true,
            AddrMatch::Prefix(p, l) => {
                let mask = u32::MAX << (32 - l.min(32) as u32);
                u32::from(a) & mask == u32::from(p) & mask
            }
        }
    }
}

/// One parsed flow description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowFilter {
    /// IP protocol number, `None` for `ip` (any).
    pub proto: Option<u8>,
    pub remote: AddrMatch,
    pub remote_ports: Option<(u16, u16)>,
    pub ue: AddrMatch,
    pub ue_ports: Option<(u16, u16)>,
    /// A filter we could not read: it never matches.
    pub never: bool,
}

/// The five-tuple a filter looks at, oriented UE / remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey {
    pub proto: u8,
    pub ue: Ipv4Addr,
    pub remote: Ipv4Addr,
    /// Ports, `None` when not available (a non-first fragment, or no ports).
    pub ue_port: Option<u16>,
    pub remote_port: Option<u16>,
}

fn ports(s: &str) -> Option<(u16, u16)> {
    match s.split_once('-') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => {
            let p = s.parse().ok()?;
            Some((p, p))
        }
    }
}

fn addr(s: &str) -> Option<AddrMatch> {
    match s {
        "any" => Some(AddrMatch::Any),
        "assigned" => Some(AddrMatch::Assigned),
        _ => {
            let (a, l) = s.split_once('/').unwrap_or((s, "32"));
            let l: u8 = l.parse().ok()?;
            (l <= 32).then_some(AddrMatch::Prefix(a.parse().ok()?, l))
        }
    }
}

/// RFC 6733 4.3.3 gives the protocol by number; CP functions in the field
/// also write the names of ipfw, which IPFilterRule comes from (the IANA
/// protocol names).
fn proto_number(p: &str) -> Option<u8> {
    Some(match p {
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "gre" => 47,
        "esp" => 50,
        "ipv6-icmp" | "icmpv6" => 58,
        "sctp" => 132,
        _ => p.parse().ok()?,
    })
}

fn port_ok(range: Option<(u16, u16)>, p: Option<u16>) -> bool {
    match (range, p) {
        (None, _) => true,
        (Some((lo, hi)), Some(p)) => lo <= p && p <= hi,
        (Some(_), None) => false,
    }
}

impl FlowFilter {
    pub const NEVER: FlowFilter = FlowFilter {
        proto: None,
        remote: AddrMatch::Any,
        remote_ports: None,
        ue: AddrMatch::Any,
        ue_ports: None,
        never: true,
    };

    /// Parses a flow description; `None` when it is not one we understand.
    pub fn parse(s: &str) -> Option<FlowFilter> {
        let mut t = s.split_whitespace().peekable();
        if t.next()? != "permit" {
            return None;
        }
        let dir = t.next()?;
        let proto = match t.next()? {
            "ip" => None,
            p => Some(proto_number(p)?),
        };
        if t.next()? != "from" {
            return None;
        }
        let a = addr(t.next()?)?;
        let a_ports = match t.peek() {
            Some(&"to") => None,
            Some(p) => {
                let r = ports(p)?;
                t.next();
                Some(r)
            }
            None => return None,
        };
        if t.next()? != "to" {
            return None;
        }
        let b = addr(t.next()?)?;
        let b_ports = match t.next() {
            Some(p) => Some(ports(p)?),
            None => None,
        };
        // `out` is downlink: from = remote, to = UE; `in` is the reverse.
        let f = match dir {
            "out" => FlowFilter { proto, remote: a, remote_ports: a_ports, ue: b, ue_ports: b_ports, never: false },
            "in" => FlowFilter { proto, remote: b, remote_ports: b_ports, ue: a, ue_ports: a_ports, never: false },
            _ => return None,
        };
        Some(f)
    }

    /// Whether a port term makes this filter need the L4 header.
    pub fn needs_ports(&self) -> bool {
        self.remote_ports.is_some() || self.ue_ports.is_some()
    }

    /// Whether this filter matches an IPv6 packet with these protocol and
    /// ports: only its protocol and ports can; an IPv4 prefix on either
    /// side never matches one (`assigned` and `any` do).
    pub fn matches_ipv6(&self, proto: u8, ue_port: Option<u16>, remote_port: Option<u16>) -> bool {
        let v6 = |a: &AddrMatch| matches!(a, AddrMatch::Any | AddrMatch::Assigned | AddrMatch::Prefix(_, 0));
        !self.never
            && self.proto.is_none_or(|p| p == proto)
            && v6(&self.remote)
            && v6(&self.ue)
            && port_ok(self.remote_ports, remote_port)
            && port_ok(self.ue_ports, ue_port)
    }

    pub fn matches(&self, k: &FlowKey) -> bool {
        !self.never
            && self.proto.is_none_or(|p| p == k.proto)
            && self.remote.matches(k.remote)
            && self.ue.matches(k.ue)
            && port_ok(self.remote_ports, k.remote_port)
            && port_ok(self.ue_ports, k.ue_port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(proto: u8, remote: [u8; 4], rp: u16, up: u16) -> FlowKey {
        FlowKey {
            proto,
            ue: Ipv4Addr::new(10, 45, 0, 2),
            remote: remote.into(),
            ue_port: Some(up),
            remote_port: Some(rp),
        }
    }

    #[test]
    fn parses_and_matches() {
        let f = FlowFilter::parse("permit out 17 from 192.0.2.0/24 5000-5010 to assigned").unwrap();
        assert!(f.matches(&key(17, [192, 0, 2, 9], 5005, 1)));
        assert!(!f.matches(&key(17, [192, 0, 2, 9], 5011, 1)));
        assert!(!f.matches(&key(6, [192, 0, 2, 9], 5005, 1)));
        assert!(!f.matches(&key(17, [192, 0, 3, 9], 5005, 1)));
        let any = FlowFilter::parse("permit out ip from any to assigned").unwrap();
        assert!(any.matches(&key(1, [8, 8, 8, 8], 0, 0)));
        assert!(!any.needs_ports());
        let f = FlowFilter::parse("permit out 6 from any to 10.45.0.2 80").unwrap();
        assert!(f.matches(&key(6, [1, 1, 1, 1], 999, 80)));
        assert!(!f.matches(&FlowKey { ue_port: None, ..key(6, [1, 1, 1, 1], 999, 80) }));
    }

    #[test]
    fn protocols_by_name_as_cp_functions_write_them() {
        // SD-Core's pfcpsim: ports after `to assigned` are the UE's.
        let f = FlowFilter::parse("permit out udp from 192.0.2.10/32 to assigned 40000-40999").unwrap();
        assert_eq!(f.proto, Some(17));
        assert!(f.matches(&key(17, [192, 0, 2, 10], 7, 40000)));
        assert!(!f.matches(&key(17, [192, 0, 2, 10], 7, 39999)));
        for (name, n) in [("icmp", 1), ("tcp", 6), ("gre", 47), ("esp", 50), ("ipv6-icmp", 58), ("sctp", 132)] {
            let f = FlowFilter::parse(&format!("permit out {name} from any to assigned")).unwrap();
            assert_eq!(f.proto, Some(n), "{name}");
        }
        assert_eq!(FlowFilter::parse("permit out udpx from any to assigned"), None);
    }

    #[test]
    fn ipv6_packets_match_by_protocol_and_ports_never_by_an_ipv4_prefix() {
        let any = FlowFilter::parse("permit out ip from any to assigned").unwrap();
        assert!(any.matches_ipv6(58, None, None));
        let udp = FlowFilter::parse("permit out 17 from any 53 to assigned").unwrap();
        assert!(udp.matches_ipv6(17, Some(4000), Some(53)));
        assert!(!udp.matches_ipv6(17, Some(4000), Some(54)));
        assert!(!udp.matches_ipv6(6, Some(4000), Some(53)));
        let v4 = FlowFilter::parse("permit out ip from 192.0.2.0/24 to assigned").unwrap();
        assert!(!v4.matches_ipv6(17, Some(1), Some(2)));
        assert!(!FlowFilter::NEVER.matches_ipv6(17, None, None));
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "deny out ip from any to any",
            "permit out ip from nowhere to any",
            "permit out 999 from any to any",
            "permit out ip from 1.2.3.4/40 to any",
        ] {
            assert_eq!(FlowFilter::parse(s), None, "{s}");
        }
    }
}
