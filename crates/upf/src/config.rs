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
            icmp_source: None,
            frag_session_bytes: 64 * 1024,
            frag_total_bytes: 4 * 1024 * 1024,
            frag_timeout_ms: 2000,
            buffer_afxdp: true,
        }
    }
}

impl UpfConfig {
    /// The values no data path can work with, as one clear error.
    pub fn validate(&self) -> Result<(), String> {
        let mut bad = Vec::new();
        if !(576..=65535).contains(&self.s1u_mtu) {
            bad.push(format!("s1u_mtu = {} (576..=65535)", self.s1u_mtu));
        }
        for (name, per, total) in [("buffer", self.buffer_session_bytes, self.buffer_total_bytes), ("frag", self.frag_session_bytes, self.frag_total_bytes)] {
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
        let c = UpfConfig { s1u_mtu: 100, frag_session_bytes: 10, frag_total_bytes: 5, urr_poll_ms: 0, ..UpfConfig::default() };
        let e = c.validate().unwrap_err();
        assert!(e.contains("s1u_mtu = 100") && e.contains("frag_session_bytes = 10 exceeds") && e.contains("urr_poll_ms"), "{e}");
        assert!(!e.contains("buffer_session_bytes"), "{e}");
    }
}
