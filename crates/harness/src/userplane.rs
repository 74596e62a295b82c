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
use mobicore_ran::enb::handover::{ErabForwarding, HandoverAction, HandoverError};
use mobicore_ran::userplane::tunnels::{Downlink, DropReason, Event, Transmit as TunnelTransmit, UeTunnel};

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

/// Loss, duplicates and reordering of one UE's numbered stream `0..sent`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StreamCheck {
    pub received: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub reordered: usize,
}

impl StreamCheck {
    pub fn of(seqs: &[u32], sent: u32) -> Self {
        let mut seen = std::collections::HashSet::new();
        let (mut duplicated, mut reordered, mut highest) = (0, 0, None::<u32>);
        for &s in seqs {
            if !seen.insert(s) {
                duplicated += 1;
                continue;
            }
            if highest.is_some_and(|h| s < h) {
                reordered += 1;
            }
            highest = highest.max(Some(s));
        }
        let lost = (0..sent).filter(|s| !seen.contains(s)).count();
        StreamCheck { received: seqs.len(), lost, duplicated, reordered }
    }
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.reordered == 0
    }
}

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
                Event::UplinkWhileIdle { .. } | Event::Activity { .. } => {}
            }
        }
    }

    /// Keep each eNB's tunnel table in step with its UE contexts: a UE
    /// whose bearer is up has its tunnel, one released to idle has none.
    pub(crate) fn sync_tunnels(&mut self) {
        for (i, enb) in self.enbs.iter().enumerate() {
            let tunnels = &mut self.enb_tunnels[i];
            for (index, ctx) in enb.ues() {
                let Some(ue_ip) = ctx.ue.ipv4() else { continue };
                self.s1u.ue_by_ip.insert(ue_ip, index);
                let want =
                    ctx.s1.and(ctx.erabs.first()).and_then(|e| Some(UeTunnel { ue_ip, sgw: e.sgw?, enb: e.enb }));
                match want {
                    Some(t) if tunnels.get(ue_ip) != Some(&t) => tunnels.insert(t),
                    None if tunnels.get(ue_ip).is_some() => {
                        tunnels.release(ue_ip);
                    }
                    _ => {}
                }
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
        let ue_ip = self.ue_ip(ue).ok_or(HandoverError::NotConnected(ue))?;
        let cell = self.enbs[target].cell();
        let ho = self.enbs[source].x2_handover_out(now, ue, cell)?;
        let forwarding = self.enbs[target].x2_handover_in(now, ho)?;
        self.enbs[source].x2_forwarding_to(ue, &forwarding);
        self.data_forwarding(source, target, ue_ip, &forwarding);
        Ok(())
    }

    /// The tunnels of a handover: the target accepts the forwarded
    /// downlink and has the UE's new tunnel; the source forwards to
    /// `forward_to` (the target's F-TEID, or the S-GW's when indirect).
    fn data_forwarding(&mut self, source: usize, target: usize, ue_ip: Ipv4Addr, forwarding: &[ErabForwarding]) {
        let Some(f) = forwarding.first() else { return };
        self.arrive(target, ue_ip, f);
        if let Some(fwd) = f.forwarding {
            let _ = self.enb_tunnels[source].start_handover(ue_ip, fwd);
        }
        self.drain_tunnels(source);
        self.drain_tunnels(target);
    }

    /// The UE arrives at eNB `target` with the E-RAB `f`: its new tunnel,
    /// and the forwarded downlink accepted on the target's DL forwarding
    /// F-TEID (the target's table holds the UE from now on; one table per
    /// eNB here, where the emulator's shell has one for all).
    fn arrive(&mut self, target: usize, ue_ip: Ipv4Addr, f: &ErabForwarding) {
        let (Some(enb), Some(sgw)) = (f.target_enb, f.sgw) else { return };
        let new = UeTunnel { ue_ip, sgw, enb };
        let tunnels = &mut self.enb_tunnels[target];
        if tunnels.get(ue_ip).is_none() {
            tunnels.insert(new);
        }
        let local = self.enbs[target].config().s1u_addr;
        if let Some(fwd) = f.forwarding.filter(|f| f.ipv4 == local) {
            let _ = tunnels.accept_forwarding(ue_ip, fwd.teid);
        }
        let _ = tunnels.complete_handover(self.now, ue_ip, new);
    }

    /// The handover steps eNBs ask their driver for.
    pub(crate) fn on_handover_action(&mut self, enb: usize, h: HandoverAction) {
        match h {
            HandoverAction::X2Release { ue, source_enb_id, .. } => {
                if let Some(s) = self.enbs.iter_mut().find(|e| e.config().enb_id == source_enb_id) {
                    s.x2_release(ue);
                }
            }
            HandoverAction::S1HandoverExecute { ue, target_enb_id, forwarding } => {
                let Some(target) = self.enbs.iter().position(|e| e.config().enb_id == target_enb_id) else { return };
                let Some(ue_ip) = self.ue_ip(ue) else { return };
                if let Some(fwd) = forwarding.first().and_then(|f| f.forwarding) {
                    let _ = self.enb_tunnels[enb].start_handover(ue_ip, fwd);
                }
                let now = self.now;
                let arrived =
                    self.enbs[enb].s1_handover_depart(ue).and_then(|d| self.enbs[target].s1_handover_arrive(now, d));
                if let Err(e) = arrived {
                    self.reports.push(Report::Anomaly { enb: target, what: format!("S1 arrival: {e}") });
                }
                self.drain_tunnels(enb);
            }
            HandoverAction::S1HandoverArrived { ue, forwarding } => {
                let Some(ue_ip) = self.ue_ip(ue) else { return };
                if let Some(f) = forwarding.first() {
                    self.arrive(enb, ue_ip, f);
                }
                self.drain_tunnels(enb);
            }
        }
    }

    /// The downlink numbers UE `ue` received so far, in order.
    pub fn downlink_received(&self, ue: u64) -> &[u32] {
        self.s1u.received.get(&ue).map_or(&[], |v| v.as_slice())
    }
}
