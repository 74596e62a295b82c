//! The user plane in memory: the UPF's real user-space data path (the
//! sans-I/O [`mobicore_upf::dataplane::UserPlane`] the PFCP node
//! programs, beside the rule table tests inspect), numbered downlink
//! packets from the data network, GTP-U on S1-U as bytes, and what each
//! eNB received per UE, so a scenario can count loss, duplicates and
//! reordering through idle mode, paging and handovers.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use mobicore_common::inet::checksum;
use mobicore_gtp::gtpu::{self, HeaderRepr, Packet};
use mobicore_upf::dataplane::{DatapathConfig, Transmit, UserspacePlane};
use mobicore_upf::rules::{ForwardingPlane, Neighbour, PlaneError, PlaneReport, SessionRules};
use mobicore_upf::urr::UsageCounts;
use mobicore_upf::MemoryPlane;

use crate::network::{Network, Report};
use mobicore_ran::enb::handover::{HandoverAction, HandoverError};
use mobicore_ran::userplane::tunnels::{Downlink, DropReason, Event, Transmit as TunnelTransmit};

/// The data network's server address (source of downlink packets).
pub const DN_SERVER: Ipv4Addr = Ipv4Addr::new(10, 200, 2, 2);
/// UDP port the numbered packets go to.
pub const DN_PORT: u16 = 5001;

/// The UPF's forwarding plane in the harness: every rule goes both to the
/// table tests inspect and to the user-space data path that forwards.
#[derive(Clone)]
pub struct HarnessPlane {
    pub table: MemoryPlane,
    pub user: UserspacePlane,
}

impl HarnessPlane {
    pub fn new(cfg: DatapathConfig) -> Self {
        HarnessPlane { table: MemoryPlane::new(), user: UserspacePlane::new(cfg, Default::default()) }
    }
}

impl ForwardingPlane for HarnessPlane {
    fn install(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.table.install(up_seid, rules)?;
        self.user.install(up_seid, rules)
    }
    fn update(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.table.update(up_seid, rules)?;
        self.user.update(up_seid, rules)
    }
    fn remove(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        let _ = self.user.remove(up_seid);
        self.table.remove(up_seid)
    }
    fn install_shared(&mut self, up_seid: u64, rules: &Arc<SessionRules>) -> Result<(), PlaneError> {
        self.install(up_seid, rules)
    }
    fn update_shared(&mut self, up_seid: u64, rules: &Arc<SessionRules>) -> Result<(), PlaneError> {
        self.update(up_seid, rules)
    }
    fn poll_report(&mut self) -> Option<PlaneReport> {
        self.user.poll_report()
    }
    fn usage(&self, up_seid: u64, urr_id: u32) -> Option<UsageCounts> {
        self.user.usage(up_seid, urr_id)
    }
    fn set_neighbours(&mut self, _neighbours: &[Neighbour]) {}
}

/// What arrived at the eNBs on S1-U.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct S1uLog {
    /// Per UE, the numbers of the downlink packets it received, in order.
    pub received: HashMap<u64, Vec<u32>>,
    /// End Markers received, per eNB and TEID.
    pub end_markers: Vec<(usize, u32)>,
    /// G-PDUs no UE of the addressed eNB had the TEID of: (eNB, TEID, number).
    pub unknown_teid: Vec<(usize, u32, u32)>,
    /// GTP-U to an address that is no eNB's.
    pub unknown_enb: u64,
    /// Uplink packets the UPF sent to the data network.
    pub to_core: u64,
    /// End Markers a handover source forwarded on to its target.
    pub end_markers_forwarded: u64,
    /// Handovers whose target delivers the new path directly now.
    pub handovers_done: u64,
    /// ... of which stopped waiting for the End Marker.
    pub end_marker_timeouts: u64,
    /// G-PDUs a handover source sent on (X2-U, or to the S-GW's
    /// forwarding tunnel).
    pub forwarded: u64,
    /// Which UE has which address (learnt from the eNBs' contexts).
    pub ue_by_ip: HashMap<Ipv4Addr, u64>,
}

/// Loss, duplicates and reordering of one UE's numbered stream (the
/// emulator's own check).
pub use mobicore_ran::userplane::numbered::StreamCheck;

/// An IPv4/UDP packet from the data network to `dst` carrying `seq`.
pub fn numbered_packet(dst: Ipv4Addr, seq: u32) -> Vec<u8> {
    let payload = seq.to_be_bytes();
    let total = 20 + 8 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&DN_SERVER.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&DN_PORT.to_be_bytes());
    p[22..24].copy_from_slice(&DN_PORT.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(&payload);
    p
}

/// The number a packet made by [`numbered_packet`] carries.
fn seq_of(inner: &[u8]) -> Option<u32> {
    let b: [u8; 4] = inner.get(28..32)?.try_into().ok()?;
    (inner.get(9) == Some(&17)).then(|| u32::from_be_bytes(b))
}

impl Network {
    /// A downlink packet numbered `seq` from the data network to UE `ue`'s
    /// address arrives at the UPF (N6/SGi).
    pub fn send_downlink(&mut self, ue: u64, seq: u32) {
        let ip = self.ipv4(ue).expect("the UE has an address");
        let now = self.now;
        let _ = self.plane.user.lock().downlink(now, &numbered_packet(ip, seq));
    }

    /// GTP-U the UPF's data path has sent, queued as S1-U messages; the
    /// data path's reports go to the PFCP node.
    pub(crate) fn collect_user_plane(&mut self) {
        let out: Vec<Transmit> = {
            let mut up = self.plane.user.lock();
            std::iter::from_fn(|| up.poll_transmit()).collect()
        };
        for t in out {
            match t {
                Transmit::Gtpu { to, bytes } | Transmit::GtpuMarked { to, bytes, .. } => {
                    self.queue.push_back(crate::fault::Msg::S1uDownlink { to, bytes: bytes.into() })
                }
                Transmit::Core(_) => self.s1u.to_core += 1,
            }
        }
        self.upf.poll_plane_reports(self.now);
    }

    /// A GTP-U message reaches the eNB at `to` (from the UPF, or forwarded
    /// by another eNB): the eNB's S1-U side is the emulator's own tunnel
    /// table ([`Tunnels`]), which also holds and orders a handover's
    /// forwarded and new-path downlink.
    pub(crate) fn s1u_to_enb(&mut self, to: SocketAddrV4, from: SocketAddrV4, bytes: &[u8]) {
        let Some(enb) = self.enbs.iter().position(|e| e.config().s1u_addr == *to.ip()) else {
            self.s1u.unknown_enb += 1;
            return;
        };
        if let Ok(p) = Packet::new_checked(bytes) {
            if p.msg_type() == gtpu::msg::END_MARKER {
                if let Ok(h) = HeaderRepr::parse(&p) {
                    self.s1u.end_markers.push((enb, h.teid));
                }
            }
        }
        let mut out = Vec::new();
        let now = self.now;
        match self.enb_tunnels[enb].downlink(now, bytes, from, &mut out) {
            Downlink::Deliver(inner) => {
                let inner = inner.to_vec();
                self.deliver_to_ue(&inner);
            }
            Downlink::Send(dst) => {
                self.s1u.forwarded +=
                    u64::from(Packet::new_checked(&out[..]).is_ok_and(|p| p.msg_type() == gtpu::msg::G_PDU));
                self.queue.push_back(crate::fault::Msg::X2u { from: enb, to: dst, bytes: out.into() })
            }
            Downlink::Drop(DropReason::UnknownTeid) | Downlink::Reply(_) => {
                let teid = Packet::new_checked(bytes).ok().and_then(|p| HeaderRepr::parse(&p).ok()).map(|h| h.teid);
                let seq = Packet::new_checked(bytes).ok().and_then(|p| seq_of(p.payload())).unwrap_or(u32::MAX);
                if let Some(teid) = teid.filter(|_| seq != u32::MAX) {
                    self.s1u.unknown_teid.push((enb, teid, seq));
                }
            }
            Downlink::Held | Downlink::Drop(_) => {}
        }
        self.drain_tunnels(enb);
    }

    /// A packet an eNB delivers over the radio: the UE of its destination.
    fn deliver_to_ue(&mut self, inner: &[u8]) {
        let Some(dst) = inner.get(16..20).map(|d| Ipv4Addr::new(d[0], d[1], d[2], d[3])) else { return };
        let seq = seq_of(inner).unwrap_or(u32::MAX);
        let owner = self.s1u.ue_by_ip.get(&dst).copied();
        match owner {
            Some(u) => self.s1u.received.entry(u).or_default().push(seq),
            None => self.s1u.unknown_teid.push((usize::MAX, 0, seq)),
        }
    }

    /// UE `ue`'s address, wherever it is (None for one taken out of every eNB).
    fn ue_ip(&self, ue: u64) -> Option<Ipv4Addr> {
        self.enbs.iter().find_map(|e| e.ue(ue)).and_then(|c| c.ue.ipv4())
    }

    /// What eNB `enb`'s tunnel table released (held packets, forwarding)
    /// and its events.
    pub(crate) fn drain_tunnels(&mut self, enb: usize) {
        while let Some(t) = self.enb_tunnels[enb].poll_transmit() {
            match t {
                TunnelTransmit::ToUe(ip) => self.deliver_to_ue(&ip),
                TunnelTransmit::Gtpu { to, bytes } => {
                    self.queue.push_back(crate::fault::Msg::X2u { from: enb, to, bytes: bytes.into() })
                }
            }
        }
        while let Some(ev) = self.enb_tunnels[enb].poll_event() {
            match ev {
                Event::EndMarkerForwarded { .. } => self.s1u.end_markers_forwarded += 1,
                Event::HandoverDone { timed_out, .. } => {
                    self.s1u.handovers_done += 1;
                    if timed_out {
                        self.s1u.end_marker_timeouts += 1;
                    }
                }
                Event::UplinkWhileIdle { .. } | Event::Activity { .. } => {
                    let now = self.now;
                    self.follower.on_event(now, &mut self.enbs, ev);
                }
            }
        }
    }

    /// Keep each eNB's tunnel table in step with its UE contexts (the
    /// emulator's [`mobicore_ran::userplane::Follower`]): a UE whose bearer is up has its tunnel,
    /// one released to idle has none.
    pub(crate) fn sync_tunnels(&mut self) {
        for enb in &self.enbs {
            for (index, ctx) in enb.ues() {
                if let Some(ue_ip) = ctx.ue.ipv4() {
                    self.s1u.ue_by_ip.insert(ue_ip, index);
                }
            }
        }
        self.follower.sync(&self.enbs);
        self.apply_tunnel_ops();
    }

    /// The follower's changes, applied to the eNBs' tables in order.
    fn apply_tunnel_ops(&mut self) {
        let now = self.now;
        while let Some((table, op)) = self.follower.poll_op() {
            if let Err(e) = op.apply(now, &mut self.enb_tunnels[table]) {
                self.reports.push(Report::Anomaly { enb: table, what: format!("tunnel table: {e}") });
            }
        }
        for i in 0..self.enbs.len() {
            self.drain_tunnels(i);
        }
    }

    /// An X2 handover of connected UE `ue` to eNB `target` (TS 23.401
    /// 5.5.1.1.2), as the radio and X2AP would carry it: the UE leaves the
    /// source and arrives at the target at once, the target sends PATH
    /// SWITCH REQUEST (delivered by [`Network::drive`]), and the source
    /// forwards the downlink that still reaches it, then the End Marker,
    /// to the target's DL forwarding F-TEID.
    pub fn x2_handover(&mut self, ue: u64, target: usize) -> Result<(), HandoverError> {
        let now = self.now;
        let source = self.enbs.iter().position(|e| e.ue(ue).is_some()).ok_or(HandoverError::UnknownUe(ue))?;
        self.ue_ip(ue).ok_or(HandoverError::NotConnected(ue))?;
        let cell = self.enbs[target].cell();
        let ho = self.enbs[source].x2_handover_out(now, ue, cell)?;
        let forwarding = self.enbs[target].x2_handover_in(now, ho)?;
        self.enbs[source].x2_forwarding_to(ue, &forwarding);
        self.follower.x2_handover(&self.enbs, ue, source, target, &forwarding);
        self.apply_tunnel_ops();
        Ok(())
    }

    /// The handover steps eNBs ask their driver for.
    pub(crate) fn on_handover_action(&mut self, enb: usize, h: HandoverAction) {
        self.follower.on_handover(enb, &h);
        match &h {
            HandoverAction::X2Release { ue, source_enb_id, .. } => {
                if let Some(s) = self.enbs.iter_mut().find(|e| e.config().enb_id == *source_enb_id) {
                    s.x2_release(*ue);
                }
            }
            HandoverAction::S1HandoverExecute { ue, target_enb_id, .. } => {
                let Some(target) = self.enbs.iter().position(|e| e.config().enb_id == *target_enb_id) else { return };
                let now = self.now;
                let arrived =
                    self.enbs[enb].s1_handover_depart(*ue).and_then(|d| self.enbs[target].s1_handover_arrive(now, d));
                if let Err(e) = arrived {
                    self.reports.push(Report::Anomaly { enb: target, what: format!("S1 arrival: {e}") });
                }
            }
            HandoverAction::S1HandoverArrived { .. } => {}
        }
        self.follower.handover_done(&self.enbs, enb, &h);
        self.apply_tunnel_ops();
    }

    /// The downlink numbers UE `ue` received so far, in order.
    pub fn downlink_received(&self, ue: u64) -> &[u32] {
        self.s1u.received.get(&ue).map_or(&[], |v| v.as_slice())
    }
}
