//! The controller of seed 000 in the harness: its S11 relay between the
//! MME and the original SGW-C, and edge anchors (an SGW-C with its UPF
//! each) it replicates sessions into. Enable it before the first attach:
//! the relay records only what it sees.
//!
//! ```text
//! let mut net = Network::new(1, 20, NetworkConfig::default());
//! net.enable_controller();
//! let edge = net.add_edge(Network::edge_spgwc_config(0, "10.60.0.0"));
//! net.s1_setup_all(); ... attach ...
//! let id = net.controller().relocate(now, imsi, None, "edge0", Mode::Selective)?;
//! net.drive();
//! ```
//!
//! With a steering switch ([`Network::enable_controller_with_switch`]) the
//! controller programs a UPF node in the steering role over PFCP; the
//! scenario holds the switch and carries its PFCP with
//! [`Network::drive_switch`] (instead of `drive`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime};

use mobicore_common::counters::Counters;
use mobicore_controller::association::PeerConfig;
use mobicore_controller::core::Transmit as CoreTransmit;
use mobicore_controller::relay::{Peer, RelayLimits};
use mobicore_controller::{Anchor, ControllerCore, SteeringClient, SteeringClientConfig};
use mobicore_gtp::TransactionConfig;
use mobicore_spgwc::{ApnConfig, Interface, SpgwcConfig, SpgwcCore, UpfPeerConfig};
use mobicore_upf::config::{UpfConfig, UpfRole};
use mobicore_upf::node::UpfCore;
use mobicore_upf::MemoryPlane;

use crate::fault::Msg;
use crate::network::{Network, MME_S11};
use crate::userplane::HarnessPlane;

/// The relay's socket towards the original SGW-C.
pub const RELAY_UP: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 2125);
/// The controller's socket towards edge anchors.
pub const CONTROLLER_S11: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 2126);

/// The steering switch's PFCP address (and Node ID).
pub const SWITCH_PFCP: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 3, 1)), 8805);
/// The controller's PFCP socket towards the switch.
pub const CONTROLLER_PFCP: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 8806);

/// A UPF node in the steering role beside the eNBs, with its in-memory
/// plane (which holds the diversions).
pub struct SteeringSwitch {
    pub node: UpfCore,
    pub plane: MemoryPlane,
}

/// An edge anchor: an SGW-C and its UPF.
pub struct Edge {
    pub name: String,
    pub spgwc: SpgwcCore,
    pub upf: UpfCore,
    pub plane: HarnessPlane,
}

impl Edge {
    pub fn s11(i: usize) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 1, i as u8 + 1)), 2123)
    }
    fn sgw_pfcp(i: usize) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 1, i as u8 + 1)), 8805)
    }
    fn upf_pfcp(i: usize) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 2, i as u8 + 1)), 8805)
    }
    pub fn s1u(i: usize) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 2, i as u8 + 1)
    }
}

impl Network {
    /// Puts the controller's relay between the MME and the SGW-C.
    pub fn enable_controller(&mut self) {
        let t = TransactionConfig::default();
        let peers = mobicore_common::peers::PeerFilter::hosts([MME_S11.ip()]);
        self.controller = Some(ControllerCore::new(peers, RelayLimits::default(), t, false, Counters::new()));
    }

    /// [`Network::enable_controller`] with a steering switch the
    /// controller programs over PFCP (associated on return). The network
    /// has no slot for the switch: the caller holds it and carries its
    /// messages with [`Network::drive_switch`].
    pub fn enable_controller_with_switch(&mut self) -> SteeringSwitch {
        self.enable_controller();
        let plane = MemoryPlane::new();
        let ip = Ipv4Addr::new(127, 0, 3, 1);
        let cfg = UpfConfig { role: UpfRole::Steering, node_id: ip, pfcp: SWITCH_PFCP, ..UpfConfig::default() };
        let node = UpfCore::new(cfg, Box::new(plane.clone()), SystemTime::UNIX_EPOCH, Counters::new());
        let client = SteeringClient::new(
            SteeringClientConfig {
                pfcp: PeerConfig {
                    peer: SWITCH_PFCP,
                    node_id: Ipv4Addr::LOCALHOST,
                    t1: Duration::from_secs(3),
                    n1: 3,
                    heartbeat_interval: Duration::from_secs(10),
                },
                max_waiting: 256,
            },
            SystemTime::UNIX_EPOCH + Duration::from_secs(1),
            Counters::new(),
        );
        let now = self.now;
        self.controller().attach_switch(now, client);
        let mut sw = SteeringSwitch { node, plane };
        self.drive_switch(&mut sw);
        assert!(self.controller().switch().is_some_and(SteeringClient::associated), "switch associated");
        sw
    }

    /// [`Network::drive`], and PFCP between the controller and the switch,
    /// until neither has anything more to say.
    pub fn drive_switch(&mut self, sw: &mut SteeringSwitch) {
        loop {
            self.drive();
            let now = self.now;
            let mut moved = false;
            if sw.node.poll_timeout().is_some_and(|t| t <= now) {
                sw.node.handle_timeout(now);
            }
            while let Some((_, b)) = self.controller().poll_switch_transmit() {
                sw.node.handle_datagram(now, CONTROLLER_PFCP, &b);
                moved = true;
            }
            while let Some((_, b)) = sw.node.poll_transmit() {
                self.controller().handle_from_switch(now, SWITCH_PFCP, &b);
                moved = true;
            }
            if !moved {
                return;
            }
        }
    }

    pub fn controller(&mut self) -> &mut ControllerCore {
        self.controller.as_mut().expect("enable_controller first")
    }

    /// The original SGW-C's configuration.
    pub fn spgwc_config(&self) -> &SpgwcConfig {
        &self.spgwc_config
    }

    /// An edge SGW-C's configuration: edge `i`'s addresses, the default
    /// APN with the pool at `pool` (the original's pool for naive
    /// replication, another for selective).
    pub fn edge_spgwc_config(&self, i: usize, pool: Ipv4Addr) -> SpgwcConfig {
        let mut cfg = SpgwcConfig { s11: Edge::s11(i), pfcp: Edge::sgw_pfcp(i), ..self.spgwc_config.clone() };
        cfg.upfs = vec![UpfPeerConfig { pfcp: Edge::upf_pfcp(i), s1u_addr: Edge::s1u(i), ..UpfPeerConfig::default() }];
        for apn in &mut cfg.apns {
            *apn = ApnConfig { pool: Some(pool), ..apn.clone() };
        }
        cfg
    }

    /// Adds edge anchor `edge{i}` with this SGW-C configuration and
    /// registers it with the controller; returns its index.
    pub fn add_edge(&mut self, cfg: SpgwcConfig) -> usize {
        let i = self.edges.len();
        let plane =
            HarnessPlane::new(mobicore_upf::dataplane::DatapathConfig { s1u_addr: Edge::s1u(i), ..Default::default() });
        let upf_cfg = UpfConfig { pfcp: Edge::upf_pfcp(i), s1u_addr: Edge::s1u(i), ..self.upf_config.clone() };
        let upf = UpfCore::new(upf_cfg, Box::new(plane.clone()), SystemTime::UNIX_EPOCH, Counters::new());
        let mut spgwc =
            SpgwcCore::new(cfg, Ipv4Addr::new(127, 0, 1, i as u8 + 1), SystemTime::UNIX_EPOCH, Counters::new());
        spgwc.start(self.now);
        let name = format!("edge{i}");
        self.edges.push(Edge { name: name.clone(), spgwc, upf, plane });
        self.controller().add_anchor(Anchor { name, s11: Edge::s11(i) }).expect("new anchor");
        self.drive();
        assert!(self.edges[i].spgwc.upf_associated(0), "edge SGW-C associated with its UPF");
        i
    }

    /// Collects what the controller and the edges want to send.
    pub(crate) fn collect_edges(&mut self) {
        if let Some(c) = self.controller.as_mut() {
            while let Some(t) = c.poll_transmit() {
                self.queue.push_back(match t {
                    CoreTransmit::Relay(t) => match t.to {
                        Peer::Sgw { .. } => Msg::RelayToSgw(t.bytes),
                        Peer::Mme(_) => Msg::S11ToMme(t.bytes),
                    },
                    CoreTransmit::Anchor { to, bytes } => {
                        let Some(edge) = (0..self.edges.len()).find(|&i| Edge::s11(i) == to) else { continue };
                        Msg::ToEdge { edge, bytes }
                    }
                });
            }
        }
        for (edge, e) in self.edges.iter_mut().enumerate() {
            while let Some(t) = e.spgwc.poll_transmit() {
                self.queue.push_back(match t.interface {
                    Interface::S11 => Msg::FromEdge { edge, bytes: t.bytes },
                    Interface::Pfcp => Msg::EdgePfcp { edge, to_upf: true, bytes: t.bytes },
                });
            }
            while let Some((_, bytes)) = e.upf.poll_transmit() {
                self.queue.push_back(Msg::EdgePfcp { edge, to_upf: false, bytes });
            }
        }
    }

    /// Delivers a message of the controller or an edge.
    pub(crate) fn deliver_edge(&mut self, m: Msg) {
        let now = self.now;
        match m {
            Msg::RelayToSgw(b) => self.spgwc.handle_s11(now, RELAY_UP, &b),
            Msg::SgwToRelay(b) => self.controller().handle_from_sgw(now, MME_S11, &b),
            Msg::ToEdge { edge, bytes } => self.edges[edge].spgwc.handle_s11(now, CONTROLLER_S11, &bytes),
            Msg::FromEdge { edge, bytes } => self.controller().handle_from_anchor(now, Edge::s11(edge), &bytes),
            Msg::EdgePfcp { edge, to_upf: true, bytes } => {
                self.edges[edge].upf.handle_datagram(now, Edge::sgw_pfcp(edge), &bytes)
            }
            Msg::EdgePfcp { edge, to_upf: false, bytes } => {
                self.edges[edge].spgwc.handle_pfcp(now, Edge::upf_pfcp(edge), &bytes)
            }
            _ => unreachable!("not a controller or edge message"),
        }
    }

    /// The earliest deadline of the controller and the edges.
    pub(crate) fn edge_deadline(&self) -> Option<std::time::Instant> {
        let c = self.controller.as_ref().and_then(ControllerCore::poll_timeout);
        let e = self.edges.iter().flat_map(|e| [e.spgwc.poll_timeout(), e.upf.poll_timeout()]);
        e.chain([c]).flatten().min()
    }

    pub(crate) fn fire_edges(&mut self) {
        let now = self.now;
        if let Some(c) = self.controller.as_mut() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
        for e in &mut self.edges {
            if e.spgwc.poll_timeout().is_some_and(|t| t <= now) {
                e.spgwc.handle_timeout(now);
            }
            if e.upf.poll_timeout().is_some_and(|t| t <= now) {
                e.upf.handle_timeout(now);
            }
        }
    }
}
