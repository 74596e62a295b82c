//! Which Diameter peers may exchange capabilities with us: an allowlist of
//! identities (Origin-Host, Origin-Realm) and the addresses each may connect
//! from. RFC 6733 5.3: a CER from a peer that local policy does not know is
//! answered with DIAMETER_UNKNOWN_PEER (3010, RFC 6733 7.1.3) and the
//! connection is closed.

use mobicore_common::peers::PeerFilter;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// One allowed Diameter peer, or a whole realm.
///
/// In TOML: `{ origin_host = "mme.mobicore.local", origin_realm = "mobicore.local", addrs = ["127.0.0.0/8"] }`;
/// without `origin_host`, any host of the realm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedPeer {
    /// The Origin-Host its CER must carry; absent: any host of `origin_realm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_host: Option<String>,
    /// The Origin-Realm its CER must carry.
    pub origin_realm: String,
    /// The addresses it may connect from (default: loopback only).
    #[serde(default = "PeerFilter::loopback")]
    pub addrs: PeerFilter,
}

impl AllowedPeer {
    /// Whether a CER with this identity, on a connection from `ip`, is this
    /// peer. DiameterIdentity is an FQDN: compared without case.
    pub fn matches(&self, ip: IpAddr, origin_host: &str, origin_realm: &str) -> bool {
        self.addrs.permits(ip)
            && self.origin_realm.eq_ignore_ascii_case(origin_realm)
            && self.origin_host.as_deref().is_none_or(|h| h.eq_ignore_ascii_case(origin_host))
    }
}

/// The allowed peers of an interface. An empty list allows nobody.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AllowedPeers(pub Vec<AllowedPeer>);

impl AllowedPeers {
    /// Whether some peer may connect from `ip` (checked before anything is
    /// read from the connection).
    pub fn permits_address(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|p| p.addrs.permits(ip))
    }

    /// Whether a CER with this identity on a connection from `ip` is allowed.
    pub fn permits(&self, ip: IpAddr, origin_host: &str, origin_realm: &str) -> bool {
        self.0.iter().any(|p| p.matches(ip, origin_host, origin_realm))
    }

    /// Whether any address may connect (`mobicore config check` reports
    /// it); the identity is still checked in the CER.
    pub fn accepts_any_address(&self) -> bool {
        self.0.iter().any(|p| p.addrs.accepts_anyone())
    }
}

/// Who a responder accepts in a CER.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Admission {
    /// Any identity (a peer we dialled ourselves, or tests).
    #[default]
    Anyone,
    /// Only listed identities, for a connection from `from`.
    Listed { peers: AllowedPeers, from: IpAddr },
}

impl Admission {
    pub fn admits(&self, origin_host: &str, origin_realm: &str) -> bool {
        match self {
            Admission::Anyone => true,
            Admission::Listed { peers, from } => peers.permits(*from, origin_host, origin_realm),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> AllowedPeers {
        AllowedPeers(vec![
            AllowedPeer {
                origin_host: Some("mme.mobicore.local".into()),
                origin_realm: "mobicore.local".into(),
                addrs: PeerFilter::hosts(["127.0.0.1".parse().unwrap()]),
            },
            AllowedPeer { origin_host: None, origin_realm: "edge.example".into(), addrs: PeerFilter::loopback() },
        ])
    }

    #[test]
    fn identity_and_address_must_both_match() {
        let l = list();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let lo2: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(l.permits(lo, "MME.mobicore.local", "mobicore.LOCAL"));
        assert!(!l.permits(lo2, "mme.mobicore.local", "mobicore.local"), "allowed host, wrong address");
        assert!(!l.permits(lo, "other.mobicore.local", "mobicore.local"));
        assert!(!l.permits(lo, "mme.mobicore.local", "other.realm"));
        assert!(l.permits(lo2, "anything.edge.example", "edge.example"), "realm-wide entry");
        assert!(l.permits_address(lo2));
        assert!(!l.permits_address("10.0.0.1".parse().unwrap()));
        assert!(!l.accepts_any_address());
        assert!(!AllowedPeers::default().permits_address(lo), "empty: nobody");
    }
}
