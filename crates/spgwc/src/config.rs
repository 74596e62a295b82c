//! S/P-GW-C configuration (one TOML section `[spgwc]`).

use mobicore_common::peers::PeerFilter;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// One APN: its UE address pools and what the UE is told in PCO.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ApnConfig {
    /// APN Network Identifier, e.g. "internet" (matched case-insensitively;
    /// an Operator Identifier suffix ".mncXXX.mccYYY.gprs" is ignored).
    pub name: String,
    /// First address of the IPv4 pool, e.g. 10.45.0.0; absent: the APN
    /// serves no IPv4 (an IPv4 request gets "Preferred PDN type not
    /// supported", an IPv4v6 one IPv6 only).
    #[serde(default)]
    pub pool: Option<Ipv4Addr>,
    /// Prefix length of the IPv4 pool, e.g. 16.
    #[serde(default = "default_prefix_len")]
    pub prefix_len: u8,
    /// IPv6 pool, e.g. "2001:db8:45::/48": each PDN connection gets a /64
    /// of it (TS 23.401 5.3.1.2.2). Absent (the default): no IPv6, an IPv6
    /// request gets "Preferred PDN type not supported" (TS 29.274 8.4), an
    /// IPv4v6 one IPv4 only.
    #[serde(default)]
    pub ipv6_pool: Option<Ipv6Pool>,
    /// DNS servers a UE asking in PCO is told of (TS 24.008 10.5.6.3:
    /// IPv4 ones for container 0x000D, IPv6 ones for 0x0003).
    #[serde(default = "default_dns")]
    pub dns: Vec<IpAddr>,
    /// IPv4 link MTU a UE asking in PCO is told (container 0x0010); 0:
    /// not sent. 1400 leaves room for GTP-U/UDP/IP over a 1500 transport.
    #[serde(default = "default_mtu")]
    pub mtu: u16,
}

fn default_prefix_len() -> u8 {
    16
}
fn default_dns() -> Vec<IpAddr> {
    vec![IpAddr::V4(Ipv4Addr::new(8, 8, 8, 8)), IpAddr::V4(Ipv4Addr::new(8, 8, 4, 4))]
}
fn default_mtu() -> u16 {
    1400
}

impl ApnConfig {
    /// An APN with an IPv4 pool and the default DNS servers and MTU.
    pub fn ipv4(name: &str, pool: Ipv4Addr, prefix_len: u8) -> Self {
        ApnConfig {
            name: name.into(),
            pool: Some(pool),
            prefix_len,
            ipv6_pool: None,
            dns: default_dns(),
            mtu: default_mtu(),
        }
    }
}

/// An IPv6 pool of /64 prefixes, written "2001:db8:45::/48" (prefix
/// length at most 64).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(try_from = "String", into = "String")]
pub struct Ipv6Pool {
    pub prefix: Ipv6Addr,
    pub len: u8,
}

impl TryFrom<String> for Ipv6Pool {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let (a, l) = s.split_once('/').ok_or_else(|| format!("IPv6 pool {s:?}: expected address/length"))?;
        let prefix: Ipv6Addr = a.parse().map_err(|e| format!("IPv6 pool {s:?}: {e}"))?;
        let len: u8 = l.parse().map_err(|e| format!("IPv6 pool {s:?}: {e}"))?;
        if len > 64 {
            return Err(format!("IPv6 pool {s:?}: /64 prefixes are handed out, so at most /64"));
        }
        Ok(Ipv6Pool { prefix, len })
    }
}

impl From<Ipv6Pool> for String {
    fn from(p: Ipv6Pool) -> String {
        format!("{}/{}", p.prefix, p.len)
    }
}

/// A user-plane node we program over PFCP.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UpfPeerConfig {
    /// Its PFCP address.
    pub pfcp: SocketAddr,
    /// Its S1-U (N3) GTP-U address, put in the S1-U SGW F-TEID.
    pub s1u_addr: Ipv4Addr,
    /// The S1-U TEIDs we hand out for this node: [teid_base, teid_base + teid_count).
    pub teid_base: u32,
    pub teid_count: u32,
}

impl Default for UpfPeerConfig {
    fn default() -> Self {
        UpfPeerConfig {
            // mobicore-upf's default PFCP address.
            pfcp: "127.0.0.2:8805".parse().unwrap(),
            s1u_addr: Ipv4Addr::LOCALHOST,
            teid_base: 0x0001_0000,
            teid_count: 0x00ff_0000,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct SpgwcConfig {
    /// S11 GTP-C listen address (port 2123 by default; 0 picks one).
    pub s11: SocketAddr,
    /// PFCP listen address (port 8805 by default; 0 picks one).
    pub pfcp: SocketAddr,
    /// Our PFCP Node ID and the address in our CP F-SEIDs.
    pub node_id: Ipv4Addr,
    pub apns: Vec<ApnConfig>,
    pub upfs: Vec<UpfPeerConfig>,
    /// GTP-C T3 / N3 (TS 29.274 7.6).
    pub t3: Duration,
    pub n3: u32,
    /// PFCP T1 / N1 (TS 29.244 6.4).
    pub t1: Duration,
    pub n1: u32,
    /// Interval of PFCP Heartbeat Requests to associated UPFs.
    pub heartbeat_interval: Duration,
    /// The guard of a Downlink Data Notification the MME turned down for
    /// a handover or TAU in progress (TS 23.401 5.3.4.3: "locally
    /// configured guard timer"): the buffered downlink is discarded if no
    /// Modify Bearer Request came by then.
    pub ddn_guard: Duration,
    /// DL low priority traffic throttling (TS 23.401 4.3.7.4.1a): a bearer
    /// whose ARP priority level is above this (numerically: a lower
    /// priority) is low priority, and while its MME asks for throttling
    /// (the Throttling IE of a DDN Acknowledge) that share of its
    /// notifications is dropped with the buffered data; other bearers are
    /// never throttled. 8: levels 9-15 are low priority, 1-8 being kept
    /// for services authorized for prioritized treatment (TS 23.203
    /// 6.1.7.3).
    pub ddn_low_priority_arp_above: u8,
    /// Our GTP-C Recovery restart counter (TS 29.274 8.5).
    pub recovery: u8,
    /// Each session's URR asks the UPF for a usage report every this many
    /// seconds (PERIO, TS 29.244 5.2.2.2); 0: only the final one, in the
    /// Session Deletion Response.
    pub usage_period_secs: u32,
    /// The MMEs whose S11 requests we serve (address prefixes). Anything
    /// from another address is dropped and counted
    /// (`s11_request_from_unknown_peer`). Default: loopback, where
    /// `mobicore demo` runs its MME.
    pub mme_peers: PeerFilter,
    /// S11 requests a session holds while one of its procedures is in
    /// flight; more are refused with "No resources available"
    /// (TS 29.274 8.4) and counted (`s11_request_queue_full`). An MME has
    /// at most a few outstanding per PDN connection (e.g. Modify Bearer
    /// then Delete Session), so 8 is ample.
    pub max_queued_per_session: usize,
    /// Entries of the S11 duplicate-detection cache (TS 29.274 7.6) at
    /// most; the oldest are evicted first (`s11_duplicate_cache_evicted`).
    /// 131072 keeps T3 covered at 30,000 requests/s in tens of MB.
    pub s11_duplicate_cache: usize,
    /// Entries of the PFCP duplicate-detection cache (Session Report
    /// Requests, TS 29.244 6.4) at most, oldest evicted first
    /// (`pfcp_duplicate_cache_evicted`).
    pub pfcp_duplicate_cache: usize,
    /// Seed of the draws of S11 TEIDs, S1-U TEIDs and CP SEIDs, for runs
    /// that must repeat (tests, replay). Absent (the default): seeded
    /// from the OS, so no identifier is predictable from another.
    pub id_seed: Option<u64>,
    /// The UDP port our requests to an MME (Downlink Data Notification)
    /// go to, at the IP of the Sender F-TEID for Control Plane of the
    /// session's Create Session Request: 2123, the GTP-C port, in a
    /// network (TS 29.274 4.2.1); then the MME may send its requests from
    /// any port (an elastic MME's hosts, each from its own). Absent (the
    /// default): they go to the address the Create Session Request came
    /// from, which serves an MME on any port of one machine.
    pub mme_s11_port: Option<u16>,
}

impl Default for SpgwcConfig {
    fn default() -> Self {
        SpgwcConfig {
            s11: "127.0.0.1:2123".parse().unwrap(),
            pfcp: "127.0.0.1:8805".parse().unwrap(),
            node_id: Ipv4Addr::LOCALHOST,
            apns: vec![ApnConfig::ipv4("internet", Ipv4Addr::new(10, 44, 0, 0), 14)],
            upfs: vec![UpfPeerConfig::default()],
            t3: Duration::from_secs(3),
            n3: 3,
            t1: Duration::from_secs(3),
            n1: 3,
            heartbeat_interval: Duration::from_secs(10),
            ddn_guard: Duration::from_secs(10),
            ddn_low_priority_arp_above: 8,
            recovery: 0,
            usage_period_secs: 0,
            mme_peers: PeerFilter::default(),
            max_queued_per_session: 8,
            s11_duplicate_cache: mobicore_gtp::transaction::DEFAULT_MAX_CACHED,
            pfcp_duplicate_cache: mobicore_gtp::transaction::DEFAULT_MAX_CACHED,
            id_seed: None,
            mme_s11_port: None,
        }
    }
}
