//! UPF configuration (one TOML section `[upf]`).

use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr};
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
    /// UE address pools routed to the data path, e.g. ["10.45.0.0/16"].
    pub ue_pools: Vec<String>,
    /// Downlink buffering budget per session and in total, in octets.
    pub buffer_session_bytes: usize,
    pub buffer_total_bytes: usize,
    /// Error Indications sent per second at most (ICMP Fragmentation
    /// Needed, likewise).
    pub error_indications_per_sec: u32,
    /// Path MTU towards the eNBs (S1-U), in octets of outer IPv4. A
    /// downlink packet that would exceed it once encapsulated (36 octets
    /// of GTP-U/UDP/IPv4) is split into inner IPv4 fragments, or, when it
    /// has DF set, dropped and answered with ICMP Fragmentation Needed
    /// (next-hop MTU `s1u_mtu - 36`) towards its source.
    pub s1u_mtu: usize,
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
            ue_pools: vec!["10.45.0.0/16".into()],
            buffer_session_bytes: 256 * 1024,
            buffer_total_bytes: 64 * 1024 * 1024,
            error_indications_per_sec: 100,
            urr_poll_ms: 1000,
            s1u_mtu: 1500,
            buffer_afxdp: true,
        }
    }
}
