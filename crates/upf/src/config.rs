//! UPF configuration (one TOML section `[upf]`).

use mobicore_common::peers::{PeerFilter, Prefix};
use rs_pfcp::ie::node_id::NodeId;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct UpfConfig {
    /// PFCP (Sxa/Sxb/N4) listen address; port 0 picks a free port. The
    /// default 127.0.0.2:8805 keeps the standard port without colliding
    /// with the S/P-GW-C's own PFCP socket on 127.0.0.1:8805.
    pub pfcp: SocketAddr,
    /// Our PFCP Node ID (an IPv4 address).
    pub node_id: Ipv4Addr,
    /// The GTP-U (S1-U/N3) address the SGW-C puts in F-TEIDs.
    pub s1u_addr: Ipv4Addr,
    /// How long an answered request is kept for duplicate detection
    /// (T1 x N1, TS 29.244 6.4).
    pub t1: Duration,
    pub n1: u32,
    /// Which data path carries user traffic: "none" (PFCP only, rules
    /// kept in memory), "userspace" (UDP socket on S1-U + TUN device),
    /// "xdp" (the XDP fast path), or "auto" (XDP if it loads, else
    /// userspace).
    pub datapath: DatapathKind,
    /// GTP-U UDP port on the S1-U address (TS 29.281: 2152).
    pub s1u_port: u16,
    /// Network namespace (under /var/run/netns) of the access (S1-U) side;
    /// empty = the current one.
    pub access_netns: Option<String>,
    /// Network namespace of the core (SGi/N6) side, where the TUN device
    /// and the UE pool routes go; empty = the current one.
    pub core_netns: Option<String>,
    /// Interface names for the XDP fast path (access and core side).
    pub access_interface: Option<String>,
    pub core_interface: Option<String>,
    /// Name of the core-side TUN device of the user-space data path.
    pub tun_name: String,
    /// UE address pools routed to the data path, e.g. ["10.44.0.0/14"];
    /// an IPv6 one ("2001:db8:44::/48") turns IPv6 on the TUN device.
    pub ue_pools: Vec<String>,
    /// Downlink buffering budget per session and in total, in octets.
    pub buffer_session_bytes: usize,
    pub buffer_total_bytes: usize,
    /// Error Indications sent per second at most (ICMP Fragmentation
    /// Needed, likewise).
    pub error_indications_per_sec: u32,
    /// Path MTU of the GTP-U paths (towards the eNBs on S1-U, and of
    /// uplink forwarding with Outer Header Creation), in octets of outer
    /// IPv4. A packet that would exceed it once encapsulated (36 octets of
    /// GTP-U/UDP/IPv4) is split into inner IPv4 fragments, or, when it has
    /// DF set, dropped and answered with ICMP Fragmentation Needed
    /// (next-hop MTU `s1u_mtu - 36`) towards its source (the UE, through
    /// its downlink tunnel, for an uplink packet). 576..=65535.
    pub s1u_mtu: usize,
    /// Source address of the ICMP errors the UPF sends; absent: `s1u_addr`.
    pub icmp_source: Option<Ipv4Addr>,
    /// Out-of-order inner fragments (sessions whose SDF filters look at
    /// ports) wait for their first fragment under these budgets, octets per
    /// session and in total, for at most `frag_timeout_ms`.
    pub frag_session_bytes: usize,
    pub frag_total_bytes: usize,
    pub frag_timeout_ms: u64,
    /// XDP mode: the downlink packets of a buffering session (FAR
    /// BUFF/NOCP) reach the slow path through AF_XDP copy-mode sockets on
    /// every receive queue of `core_interface` (measured faster, see
    /// `mobicore bench slowpath`); false, or when the sockets cannot be
    /// bound (logged, counter `upf_afxdp_fallback`): XDP_PASS and the UE
    /// pool route into the TUN device.
    pub buffer_afxdp: bool,
    /// How often the counts of URRs with volume triggers, quotas or
    /// inactivity detection are read from the data path, in ms (a
    /// threshold or quota is seen at most this late; `crate::urr`).
    pub urr_poll_ms: u64,
    /// The CP functions (S/P-GW-C, SMF) that may set up a PFCP association:
    /// each a Node ID pattern and the addresses it may send from
    /// (TS 29.244 6.2.6.2.2). A setup matching none is refused with cause
    /// "Request rejected" (`pfcp_association_setup_from_unknown_peer`).
    /// Default: any IPv4 Node ID in 127.0.0.0/8 from loopback (the
    /// S/P-GW-C that `mobicore demo` starts).
    pub cp_peers: Vec<CpPeer>,
    /// PFCP associations held at once; a setup for one more is refused
    /// with "No resources available" (`pfcp_association_setup_over_max_associations`).
    pub max_associations: usize,
    /// Sessions one association may hold; an establishment beyond it is
    /// refused with "No resources available"
    /// (`pfcp_session_establishment_over_max_sessions`).
    pub max_sessions_per_association: usize,
    /// The Precedence of a Create PDR that has none. TS 29.244 7.5.2.2
    /// makes Precedence mandatory, but SGW-Cs in the field leave it out
    /// on Sxa, where a session has one PDR per direction and nothing to
    /// order. Lower values match first (8.2.11), so the default 4294967295
    /// (0xFFFFFFFF, the lowest precedence) lets such a PDR never override
    /// one whose precedence was given; each such PDR is counted
    /// (`pfcp_pdr_without_precedence`).
    pub default_pdr_precedence: u32,
    /// How often we send a Heartbeat Request to each associated CP
    /// function (TS 29.244 6.2.2), in ms; retransmitted every `t1` up to
    /// `n1` times (6.4), after which the peer is declared dead
    /// (`pfcp_peer_dead`) and `peer_dead_grace_ms` starts.
    pub heartbeat_interval_ms: u64,
    /// How long the sessions of a dead CP function are kept (still
    /// forwarding, heartbeats still sent) before they and the association
    /// are deleted, in ms; 0 deletes them at once. A peer that answers a
    /// heartbeat or sets up the association again with the same Recovery
    /// Time Stamp in the meantime keeps its sessions (it was a path
    /// failure, TS 23.007); with a new one it restarted and they are
    /// deleted.
    /// Default 60 s: a short loss of the CP path does not cut the UEs'
    /// traffic, a CP function that is gone does not leave sessions behind.
    pub peer_dead_grace_ms: u64,
    /// Whether a heartbeat (request or response) whose Recovery Time Stamp
    /// differs from the one the CP function gave before means it restarted
    /// (TS 29.244 19A, TS 23.007 16.1.1: its sessions are deleted). Some
    /// CP functions put the time of sending there instead of their start
    /// time (TS 29.244 8.2.65); with `false` only a new Association Setup
    /// with a new stamp deletes sessions, and a changed stamp in a
    /// heartbeat is counted (`pfcp_heartbeat_recovery_changed`). Default
    /// true.
    pub restart_from_heartbeats: bool,
    /// The node's role (issue 11): "anchor" (the S/P-GW-U: sessions are
    /// bearers) or "steering" (a switch beside the eNB on S1-U: every
    /// packet, GTP-U included, is forwarded as a router would; a PFCP
    /// session diverts one UE's or one flow's G-PDUs to another anchor,
    /// `mobicore_pfcp::steering`). Steering needs `datapath = "xdp"`: the
    /// XDP program `steer_xdp` replaces `upf_xdp` on `access_interface`
    /// and `core_interface` (and `steer_interfaces`), and the node's
    /// namespace needs `net.ipv4.ip_forward = 1` for what XDP hands to the
    /// kernel. Any other data path refuses steering sessions with "Service
    /// not supported" (`pfcp_steering_unsupported_datapath`), the anchor
    /// role likewise (`pfcp_steering_refused_anchor_role`).
    pub role: UpfRole,
    /// Further interfaces the steering program is attached to (e.g. the
    /// link to an edge site), beside `access_interface` and `core_interface`.
    pub steer_interfaces: Vec<String>,
    /// Diversions held at once in the steering role; one more is refused
    /// with "No resources available" (`pfcp_steering_over_max_diversions`).
    /// Also the size of the XDP steering maps. Default 65,536.
    pub max_diversions: usize,
    /// MEC sessions (traffic rules and UE tunnels) held at once in the MEC
    /// role; one more is refused with "No resources available"
    /// (`pfcp_mec_over_max_sessions`). Default 131,072 (the XDP exact-match
    /// table's size).
    pub max_mec_sessions: usize,
}

/// The `role` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpfRole {
    #[default]
    Anchor,
    Steering,
    /// The MEC router (issue 12): `mec_xdp` on `access_interface`,
    /// `core_interface` and `steer_interfaces` (the edge applications'
    /// links); PFCP sessions carry traffic rules and UE downlink tunnels
    /// (`mobicore_pfcp::mec`), at most `max_mec_sessions`.
    Mec,
}

/// A CP function allowed to associate: its Node ID and where it sends from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpPeer {
    /// An IP address, an address prefix ("127.0.0.0/8": any IP Node ID in
    /// it) or an FQDN (compared without regard to case).
    pub node_id: NodeIdPattern,
    /// The addresses its PFCP messages may come from (and its F-SEIDs may
    /// name), e.g. ["10.1.2.3"].
    pub addrs: PeerFilter,
}

impl CpPeer {
    pub fn permits(&self, node: &NodeId, from: IpAddr) -> bool {
        self.node_id.matches(node) && self.addrs.permits(from)
    }
}

/// The Node IDs (TS 29.244 8.2.38) a [`CpPeer`] entry stands for: IP Node
/// IDs in a prefix, or one FQDN. Written as one string in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeIdPattern {
    Ip(Prefix),
    Fqdn(String),
}

impl NodeIdPattern {
    pub fn matches(&self, n: &NodeId) -> bool {
        match (self, n) {
            (NodeIdPattern::Ip(p), NodeId::IPv4(a)) => p.contains(IpAddr::V4(*a)),
            (NodeIdPattern::Ip(p), NodeId::IPv6(a)) => p.contains(IpAddr::V6(*a)),
            (NodeIdPattern::Fqdn(f), NodeId::FQDN(g)) => f.eq_ignore_ascii_case(g),
            _ => false,
        }
    }
}

impl std::str::FromStr for NodeIdPattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(p) = s.parse::<Prefix>() {
            return Ok(NodeIdPattern::Ip(p));
        }
        // An FQDN: labels of letters, digits and hyphens (RFC 1035 2.3.1).
        let label_ok =
            |l: &str| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        match !s.is_empty()
            && s.len() <= 255
            && s.split('.').all(label_ok)
            && s.contains(|c: char| c.is_ascii_alphabetic())
        {
            true => Ok(NodeIdPattern::Fqdn(s.to_string())),
            false => Err(format!("{s:?} is not a Node ID: an address, address/prefix-length or FQDN")),
        }
    }
}

impl std::fmt::Display for NodeIdPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeIdPattern::Ip(p) => write!(f, "{p}"),
            NodeIdPattern::Fqdn(n) => f.write_str(n),
        }
    }
}

impl Serialize for NodeIdPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NodeIdPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// The `datapath` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatapathKind {
    Auto,
    Xdp,
    Userspace,
    #[default]
    None,
}

impl Default for UpfConfig {
    fn default() -> Self {
        UpfConfig {
            pfcp: "127.0.0.2:8805".parse().unwrap(),
            node_id: Ipv4Addr::new(127, 0, 0, 2),
            s1u_addr: Ipv4Addr::LOCALHOST,
            t1: Duration::from_secs(3),
            n1: 3,
            datapath: DatapathKind::None,
            s1u_port: 2152,
            access_netns: None,
            core_netns: None,
            access_interface: None,
            core_interface: None,
            tun_name: "mcupf0".into(),
            ue_pools: vec!["10.44.0.0/14".into()],
            buffer_session_bytes: 256 * 1024,
            buffer_total_bytes: 64 * 1024 * 1024,
            error_indications_per_sec: 100,
            urr_poll_ms: 1000,
            s1u_mtu: 1500,
            icmp_source: None,
            frag_session_bytes: 64 * 1024,
            frag_total_bytes: 4 * 1024 * 1024,
            frag_timeout_ms: 2000,
            buffer_afxdp: true,
            cp_peers: vec![CpPeer {
                node_id: NodeIdPattern::Ip("127.0.0.0/8".parse().expect("prefix")),
                addrs: PeerFilter::loopback(),
            }],
            max_associations: 16,
            // Two FARs per default bearer in the XDP maps' 262,144: what
            // the fast path holds, above `bench attach`'s 100,000 UEs.
            max_sessions_per_association: 131_072,
            default_pdr_precedence: u32::MAX,
            heartbeat_interval_ms: 10_000,
            peer_dead_grace_ms: 60_000,
            restart_from_heartbeats: true,
            role: UpfRole::Anchor,
            steer_interfaces: Vec::new(),
            max_diversions: 65_536,
            max_mec_sessions: 131_072,
        }
    }
}

impl UpfConfig {
    /// Whether some CP peer entry lets any address in (for `mobicore
    /// config check`).
    pub fn pfcp_accepts_anyone(&self) -> bool {
        self.cp_peers.iter().any(|p| p.addrs.accepts_anyone())
    }

    /// The values no data path can work with, as one clear error.
    pub fn validate(&self) -> Result<(), String> {
        let mut bad = Vec::new();
        if !(576..=65535).contains(&self.s1u_mtu) {
            bad.push(format!("s1u_mtu = {} (576..=65535)", self.s1u_mtu));
        }
        for (name, per, total) in [
            ("buffer", self.buffer_session_bytes, self.buffer_total_bytes),
            ("frag", self.frag_session_bytes, self.frag_total_bytes),
        ] {
            if per > total {
                bad.push(format!("{name}_session_bytes = {per} exceeds {name}_total_bytes = {total}"));
            }
        }
        if self.frag_timeout_ms == 0 {
            bad.push("frag_timeout_ms = 0 (> 0)".into());
        }
        if self.urr_poll_ms == 0 {
            bad.push("urr_poll_ms = 0 (> 0)".into());
        }
        if self.max_associations == 0 || self.max_sessions_per_association == 0 {
            bad.push("max_associations and max_sessions_per_association must be > 0".into());
        }
        if !(1..=1 << 24).contains(&self.max_diversions) {
            bad.push(format!("max_diversions = {} (1..=16777216)", self.max_diversions));
        }
        if !(1..=1 << 24).contains(&self.max_mec_sessions) {
            bad.push(format!("max_mec_sessions = {} (1..=16777216)", self.max_mec_sessions));
        }
        if self.heartbeat_interval_ms == 0 {
            bad.push("heartbeat_interval_ms = 0 (> 0)".into());
        }
        if self.n1 == 0 || self.t1.is_zero() {
            bad.push("t1 and n1 must be > 0".into());
        }
        match bad.is_empty() {
            true => Ok(()),
            false => Err(format!("[upf]: {}", bad.join("; "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        assert_eq!(UpfConfig::default().validate(), Ok(()));
        let c = UpfConfig {
            s1u_mtu: 100,
            frag_session_bytes: 10,
            frag_total_bytes: 5,
            urr_poll_ms: 0,
            ..UpfConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert!(
            e.contains("s1u_mtu = 100") && e.contains("frag_session_bytes = 10 exceeds") && e.contains("urr_poll_ms"),
            "{e}"
        );
        assert!(!e.contains("buffer_session_bytes"), "{e}");
    }

    #[test]
    fn node_id_patterns() {
        let p: NodeIdPattern = "127.0.0.0/8".parse().unwrap();
        assert!(p.matches(&NodeId::new_ipv4(Ipv4Addr::new(127, 0, 0, 2))));
        assert!(!p.matches(&NodeId::new_ipv4(Ipv4Addr::new(10, 0, 0, 1))));
        assert!(!p.matches(&NodeId::new_fqdn("127.0.0.1")), "an FQDN is not an IP Node ID");
        let f: NodeIdPattern = "SMF1.example.org".parse().unwrap();
        assert!(f.matches(&NodeId::new_fqdn("smf1.EXAMPLE.org")) && !f.matches(&NodeId::new_fqdn("smf2.example.org")));
        assert!("smf 1".parse::<NodeIdPattern>().is_err() && "".parse::<NodeIdPattern>().is_err());
        let d = UpfConfig::default();
        assert!(d.cp_peers[0].permits(&NodeId::new_ipv4(Ipv4Addr::LOCALHOST), "127.0.0.1".parse().unwrap()));
        assert!(!d.cp_peers[0].permits(&NodeId::new_ipv4(Ipv4Addr::LOCALHOST), "10.0.0.1".parse().unwrap()));
        assert!(!d.pfcp_accepts_anyone());
    }
}
