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
}

impl Default for UpfConfig {
    fn default() -> Self {
        UpfConfig {
            pfcp: "127.0.0.2:8805".parse().unwrap(),
            node_id: Ipv4Addr::new(127, 0, 0, 2),
            s1u_addr: Ipv4Addr::LOCALHOST,
            t1: Duration::from_secs(3),
            n1: 3,
        }
    }
}
