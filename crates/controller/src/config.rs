//! `[controller]`: where the relay and the REST API listen, where the
//! original S/P-GW-C is, the bounds, the store and the anchors known at
//! start.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use mobicore_common::peers::PeerFilter;
use mobicore_store::StoreConfig;
use serde::{Deserialize, Serialize};

use crate::association::PeerConfig;
use crate::context::Anchor;
use crate::mec::MecClientConfig;
use crate::relay::RelayLimits;
use crate::steering::SteeringClientConfig;

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
    /// The virtual MEC routers whose traffic rules the controller keeps
    /// (`/v1/mec/routers/{router}/traffic-rules`), each a slice of the
    /// MEC router node.
    pub mec_routers: Vec<MecRouterConfig>,
    /// The MEC router node (a UPF node with `role = "mec"`) the rules are
    /// applied to over PFCP, and every relayed UE's downlink tunnel (for
    /// the edge applications' answers). Absent: rules are kept, not applied.
    pub mec: Option<PfcpNodeConfig>,
    /// Traffic rules per MEC router (seed 001's Tofino holds 120,000).
    pub max_mec_rules: usize,
    /// The steering switch the controller programs over PFCP (a UPF node
    /// with `role = "steering"`), e.g. `steering = { pfcp =
    /// "10.0.2.1:8805", local = "10.0.2.2:0", node_id = "10.0.2.2" }`.
    /// Absent: no switch, relocations move the sessions' state only
    /// (`diverted: false`).
    pub steering: Option<PfcpNodeConfig>,
    /// Sites where an anchor is started on demand (`mobicore upf` and
    /// `mobicore spgwc` processes): the first relocation naming a site
    /// that runs nothing starts it ([`crate::site`]).
    pub sites: Vec<crate::site::SiteConfig>,
}

/// `[[controller.mec_routers]]`: one virtual MEC router, a slice of the
/// MEC router node (issue 12 item 3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MecRouterConfig {
    pub name: String,
    /// The node's ingress interface of the slice (the S1-U side).
    pub interface: String,
    /// Its 802.1Q VLAN (0: untagged).
    pub vlan: u16,
    /// The interface its edge applications are reached through.
    pub app_interface: String,
}

impl Default for MecRouterConfig {
    fn default() -> Self {
        MecRouterConfig { name: "mec1".into(), interface: "s1u".into(), vlan: 0, app_interface: "mec".into() }
    }
}

impl MecRouterConfig {
    pub fn slice(&self) -> mobicore_pfcp::mec::Slice {
        mobicore_pfcp::mec::Slice { interface: self.interface.clone(), vlan: self.vlan }
    }
}

/// How the controller reaches a user-plane node it programs over PFCP
/// (`[controller.steering]`, `[controller.mec]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PfcpNodeConfig {
    /// The node's PFCP address.
    pub pfcp: SocketAddr,
    /// The controller's PFCP socket towards it (port 0: any).
    pub local: SocketAddr,
    /// The controller's PFCP Node ID, also the address of its CP F-SEIDs:
    /// the node's `cp_peers` must allow it (and `local`'s address).
    pub node_id: Ipv4Addr,
    /// PFCP T1 (ms) and N1 (TS 29.244 6.4).
    pub t1_ms: u64,
    pub n1: u32,
    /// Heartbeat Requests to the node every this many ms (6.2.2).
    pub heartbeat_interval_ms: u64,
    /// Requests that may wait (for the association, or behind another
    /// request for the same UE or rule); beyond, refused.
    pub max_waiting: usize,
}

impl Default for PfcpNodeConfig {
    fn default() -> Self {
        PfcpNodeConfig {
            pfcp: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8805),
            local: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            node_id: Ipv4Addr::LOCALHOST,
            t1_ms: 3000,
            n1: 3,
            heartbeat_interval_ms: 10_000,
            max_waiting: 4096,
        }
    }
}

impl PfcpNodeConfig {
    pub fn peer(&self) -> PeerConfig {
        PeerConfig {
            peer: self.pfcp,
            node_id: self.node_id,
            t1: Duration::from_millis(self.t1_ms.max(1)),
            n1: self.n1,
            heartbeat_interval: Duration::from_millis(self.heartbeat_interval_ms.max(1)),
        }
    }

    pub fn client(&self) -> SteeringClientConfig {
        SteeringClientConfig { pfcp: self.peer(), max_waiting: self.max_waiting }
    }

    pub fn mec_client(&self) -> MecClientConfig {
        MecClientConfig { pfcp: self.peer(), max_waiting: self.max_waiting }
    }
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
            mec_routers: vec![MecRouterConfig::default()],
            mec: None,
            max_mec_rules: 120_000,
            steering: None,
            sites: Vec::new(),
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
