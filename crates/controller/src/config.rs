//! `[controller]`: where the relay and the REST API listen, where the
//! original S/P-GW-C is, the bounds, the store and the anchors known at
//! start.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use mobicore_common::peers::PeerFilter;
use mobicore_store::StoreConfig;
use serde::{Deserialize, Serialize};

use crate::context::Anchor;
use crate::relay::RelayLimits;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControllerConfig {
    /// The relay's S11 address: configure it as the MME's S-GW.
    pub s11: SocketAddr,
    /// The original S/P-GW-C's S11 address.
    pub sgw: SocketAddr,
    /// Local address of the sockets towards the S/P-GW-C (one per MME,
    /// ephemeral ports); the `s11` address's IP when unset.
    pub upstream_ip: Option<IpAddr>,
    /// The MMEs that may use the relay.
    pub mme_peers: PeerFilter,
    /// Most MMEs relayed at once (each costs a socket).
    pub max_mmes: usize,
    /// The controller's GTP-C socket towards replica anchors (port 0: any).
    pub anchor_bind: SocketAddr,
    /// REST API (`/v1/...`, `/v1/openapi.json`, `/metrics`).
    pub rest: SocketAddr,
    /// Bearer token every write must carry; when unset, one is drawn at
    /// start and printed.
    pub token: Option<String>,
    /// Largest request body the REST API reads.
    pub max_body_bytes: usize,
    /// Requests awaiting the S/P-GW's answer that the relay tracks.
    pub max_pending: usize,
    /// Sessions recorded for selective replication.
    pub max_sessions: usize,
    /// Octets of the naive log (beyond it naive replication is refused).
    pub max_log_bytes: usize,
    /// GTP-C T3 (ms) and N3 towards replica anchors.
    pub t3_ms: u64,
    pub n3: u32,
    /// Longest a REST call waits for a relocation to finish.
    pub relocation_timeout_ms: u64,
    /// Where the recorded messages, anchors and relocations live.
    pub store: StoreConfig,
    /// Anchors registered at start (more can be added over REST).
    pub anchors: Vec<Anchor>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        let limits = RelayLimits::default();
        ControllerConfig {
            s11: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)), 2123),
            sgw: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 2123),
            upstream_ip: None,
            mme_peers: PeerFilter::loopback(),
            max_mmes: 64,
            anchor_bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)), 0),
            rest: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7080),
            token: None,
            max_body_bytes: 64 << 10,
            max_pending: limits.max_pending,
            max_sessions: limits.max_sessions,
            max_log_bytes: limits.max_log_bytes,
            t3_ms: 3000,
            n3: 3,
            relocation_timeout_ms: 30_000,
            store: StoreConfig::default(),
            anchors: Vec::new(),
        }
    }
}

impl ControllerConfig {
    pub fn limits(&self) -> RelayLimits {
        RelayLimits {
            max_pending: self.max_pending,
            max_sessions: self.max_sessions,
            max_log_bytes: self.max_log_bytes,
            pending_timeout: Duration::from_millis(self.t3_ms * u64::from(self.n3 + 1) + 3000),
        }
    }
}
