//! Which peers may use an interface: a list of address prefixes, parsed from
//! config at load (`"127.0.0.0/8"`, `"10.0.0.7"`, `"::1/128"`, `"0.0.0.0/0"`).
//!
//! Every interface of every NF has one. The defaults allow loopback only,
//! which is where the NFs that `mobicore demo` starts itself talk to each
//! other; a deployment names its peers. A list holding `0.0.0.0/0` or
//! `::/0` accepts anyone, which `mobicore config check` reports; an empty
//! list accepts nobody. HTTP interfaces (the controller's REST API, the
//! MME's admin endpoint) also want a bearer token: [`bearer_token_matches`].

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An address prefix: an address and how many leading bits must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    /// `addr` alone (/32 or /128).
    pub fn host(addr: IpAddr) -> Self {
        let len = if addr.is_ipv4() { 32 } else { 128 };
        Prefix { addr, len }
    }

    /// Whether `ip` lies in the prefix. An IPv4-mapped IPv6 address (as a
    /// dual-stack socket reports an IPv4 peer) matches as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(p), IpAddr::V4(a)) => mask_eq(&p.octets(), &a.octets(), self.len),
            (IpAddr::V6(p), IpAddr::V6(a)) => mask_eq(&p.octets(), &a.octets(), self.len),
            _ => false,
        }
    }

    /// Whether the prefix covers every address of its family.
    pub fn is_everything(&self) -> bool {
        self.len == 0
    }
}

/// Whether the first `len` bits of `a` and `b` are equal.
fn mask_eq(a: &[u8], b: &[u8], len: u8) -> bool {
    let full = usize::from(len / 8);
    let rest = len % 8;
    if a[..full] != b[..full] {
        return false;
    }
    rest == 0 || (a[full] ^ b[full]) & (0xffu8 << (8 - rest)) == 0
}

/// Why a prefix did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an address or address/prefix-length (e.g. 127.0.0.1, 10.0.0.0/8, ::1/128)")]
pub struct PrefixError(pub String);

impl FromStr for Prefix {
    type Err = PrefixError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || PrefixError(s.to_string());
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| err())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            Some(l) => l.trim().parse::<u8>().ok().filter(|l| *l <= max).ok_or_else(err)?,
            None => max,
        };
        Ok(Prefix { addr, len })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for Prefix {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The peers an interface accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PeerFilter(pub Vec<Prefix>);

impl PeerFilter {
    /// Loopback only (127.0.0.0/8 and ::1): the default of every interface.
    pub fn loopback() -> Self {
        PeerFilter(vec![
            Prefix { addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), len: 8 },
            Prefix::host(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        ])
    }

    /// Anyone, IPv4 or IPv6.
    pub fn anyone() -> Self {
        PeerFilter(vec![
            Prefix { addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED), len: 0 },
            Prefix { addr: IpAddr::V6(Ipv6Addr::UNSPECIFIED), len: 0 },
        ])
    }

    /// Exactly these addresses.
    pub fn hosts(addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        PeerFilter(addrs.into_iter().map(Prefix::host).collect())
    }

    pub fn permits(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|p| p.contains(ip))
    }

    /// Whether some prefix covers a whole address family: the interface
    /// accepts anyone (`mobicore config check` says so).
    pub fn accepts_anyone(&self) -> bool {
        self.0.iter().any(Prefix::is_everything)
    }
}

impl Default for PeerFilter {
    fn default() -> Self {
        Self::loopback()
    }
}

impl fmt::Display for PeerFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v: Vec<String> = self.0.iter().map(Prefix::to_string).collect();
        write!(f, "[{}]", v.join(", "))
    }
}

/// Whether an HTTP `Authorization` header value is `Bearer <token>`
/// (RFC 6750 2.1), compared without stopping at the first difference.
pub fn bearer_token_matches(authorization: Option<&str>, token: &str) -> bool {
    let Some(given) = authorization.and_then(|v| v.strip_prefix("Bearer ")) else { return false };
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn prefixes_match_by_leading_bits() {
        let p: Prefix = "10.1.0.0/15".parse().unwrap();
        assert!(p.contains(ip("10.0.0.1")));
        assert!(p.contains(ip("10.1.255.255")));
        assert!(!p.contains(ip("10.2.0.0")));
        assert!(!p.contains(ip("::1")));
        let h: Prefix = "192.0.2.7".parse().unwrap();
        assert_eq!(h.len, 32);
        assert!(h.contains(ip("192.0.2.7")) && !h.contains(ip("192.0.2.6")));
        assert!(h.contains(ip("::ffff:192.0.2.7")), "IPv4-mapped peers match as IPv4");
        let v6: Prefix = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:1::9")) && !v6.contains(ip("2001:db9::")));
    }

    #[test]
    fn bad_prefixes_are_refused_with_a_message() {
        for s in ["", "10.0.0.0/33", "::/129", "10.0.0/8", "host", "10.0.0.1/-1"] {
            let e = s.parse::<Prefix>().unwrap_err();
            assert!(e.to_string().contains("address/prefix-length"), "{s}: {e}");
        }
    }

    #[test]
    fn defaults_are_loopback_and_anyone_is_reported() {
        let d = PeerFilter::default();
        assert!(d.permits(ip("127.0.0.1")) && d.permits(ip("127.9.9.9")) && d.permits(ip("::1")));
        assert!(!d.permits(ip("10.0.0.1")) && !d.accepts_anyone());
        assert!(PeerFilter::anyone().accepts_anyone() && PeerFilter::anyone().permits(ip("203.0.113.1")));
        assert!(!PeerFilter(vec![]).permits(ip("127.0.0.1")));
        let f: PeerFilter =
            toml::from_str::<std::collections::BTreeMap<String, PeerFilter>>("p = [\"10.0.0.0/8\", \"::1\"]")
                .unwrap()
                .remove("p")
                .unwrap();
        assert!(f.permits(ip("10.3.3.3")) && f.permits(ip("::1")) && !f.permits(ip("11.0.0.1")));
    }

    proptest! {
        /// A prefix holds exactly the addresses whose leading bits equal its own.
        #[test]
        fn contains_agrees_with_integer_masks(a in any::<u32>(), b in any::<u32>(), len in 0u8..=32) {
            let p = Prefix { addr: IpAddr::V4(Ipv4Addr::from(a)), len };
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            prop_assert_eq!(p.contains(IpAddr::V4(Ipv4Addr::from(b))), a & mask == b & mask);
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = s.parse::<Prefix>();
        }
    }

    #[test]
    fn bearer_token_is_the_whole_value_after_bearer() {
        assert!(bearer_token_matches(Some("Bearer s3cret"), "s3cret"));
        for bad in
            [None, Some("s3cret"), Some("Bearer s3cre"), Some("Bearer s3cret2"), Some("bearer s3cret"), Some("Bearer ")]
        {
            assert!(!bearer_token_matches(bad, "s3cret"), "{bad:?}");
        }
    }
}
