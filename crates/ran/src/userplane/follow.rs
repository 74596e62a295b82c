//! The eNBs' S1-U tunnel tables kept in step with their UE contexts,
//! without I/O: one implementation for every driver of emulated eNBs (the
//! real shell, with one [`Tunnels`] for all its eNBs, and the in-memory
//! harness, with one per eNB).
//!
//! A [`Follower`] reads the eNBs and queues [`TunnelOp`]s for the table
//! of an eNB ([`Follower::poll_op`]); the driver applies them in order
//! ([`TunnelOp::apply`], or sends them to the task owning the table):
//!
//! - [`Follower::sync`]: a UE whose default bearer is up (INITIAL CONTEXT
//!   SETUP after attach, service request or paging) gets its tunnel with
//!   the eNB's S1-U F-TEID of that setup; one released to ECM-IDLE (TS
//!   23.401 5.3.5) loses it and its uplink is held from then on;
//! - [`Follower::x2_handover`] (TS 23.401 5.5.1.1.2, TS 36.300
//!   10.1.2.1): the target accepts the forwarded downlink on its DL
//!   forwarding F-TEID, the source forwards what still reaches it and
//!   then the End Marker there (the emulated X2-U path), the UE arrives
//!   at the target: uplink to the S-GW at once, forwarded downlink first,
//!   the new path's after the End Marker;
//! - [`Follower::on_handover`]: the same for an S1 handover (TS 23.401
//!   5.5.1.2.2), forwarding to the target (direct) or to the S-GW's
//!   indirect forwarding F-TEID;
//! - [`Follower::on_event`]: the table's events back to the eNBs: an idle
//!   UE's uplink starts its SERVICE REQUEST (TS 23.401 5.3.4.1), traffic
//!   feeds the inactivity timer.
//!
//! The follower remembers what it told each table, so the driver needs
//! no look into a table another task may own.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::Ipv4Addr;
use std::time::Instant;

use mobicore_common::{Fteid, Teid};

use super::tunnels::{Event, HandoverError, Tunnels, UeTunnel};
use crate::enb::handover::{ErabForwarding, HandoverAction};
use crate::enb::{Enb, UeContext};

/// One change to an eNB's tunnel table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelOp {
    /// [`Tunnels::insert`].
    Insert(UeTunnel),
    /// [`Tunnels::release`].
    Release(Ipv4Addr),
    /// [`Tunnels::accept_forwarding`].
    AcceptForwarding { ue_ip: Ipv4Addr, teid: Teid },
    /// [`Tunnels::start_handover`].
    StartHandover { ue_ip: Ipv4Addr, forward_to: Fteid },
    /// [`Tunnels::complete_handover`].
    CompleteHandover(UeTunnel),
}

impl TunnelOp {
    pub fn apply(&self, now: Instant, t: &mut Tunnels) -> Result<(), HandoverError> {
        match *self {
            TunnelOp::Insert(tunnel) => t.insert(tunnel),
            TunnelOp::Release(ue_ip) => {
                t.release(ue_ip);
            }
            TunnelOp::AcceptForwarding { ue_ip, teid } => t.accept_forwarding(ue_ip, teid)?,
            TunnelOp::StartHandover { ue_ip, forward_to } => t.start_handover(ue_ip, forward_to)?,
            TunnelOp::CompleteHandover(new) => t.complete_handover(now, new.ue_ip, new)?,
        }
        Ok(())
    }
}

/// The tunnel UE context `ctx` wants: its default bearer's, while it has
/// an S1 connection and the bearer is set up.
fn wanted(ctx: &UeContext) -> Option<UeTunnel> {
    let e = ctx.s1.and(ctx.erabs.first())?;
    Some(UeTunnel { ue_ip: ctx.ue.ipv4()?, sgw: e.sgw?, enb: e.enb })
}

/// Keeps tunnel tables in step with eNBs (see the module doc).
#[derive(Debug, Default)]
pub struct Follower {
    /// One table for every eNB (the shell's) rather than one each.
    shared: bool,
    /// Only these UEs (None: every UE of every eNB), with the eNB each
    /// was found at last.
    followed: Option<HashMap<u64, usize>>,
    /// What each table was told: (table, UE address) -> tunnel.
    told: HashMap<(usize, Ipv4Addr), UeTunnel>,
    ip_of: HashMap<u64, Ipv4Addr>,
    ue_of: HashMap<Ipv4Addr, u64>,
    ops: VecDeque<(usize, TunnelOp)>,
    /// Idle UEs with uplink data whose service request could not start
    /// yet (another procedure ran): tried again at every sync.
    uplink_waiting: HashSet<u64>,
}

impl Follower {
    /// One table per eNB; table `i` is eNB `i`'s. Follows every UE.
    pub fn per_enb() -> Self {
        Follower::default()
    }

    /// One table for all eNBs (table 0), following the UEs of `ues`
    /// (UE index, address, the tunnel the table already has).
    pub fn shared(ues: impl IntoIterator<Item = (u64, UeTunnel)>) -> Self {
        let mut f = Follower { shared: true, followed: Some(HashMap::new()), ..Default::default() };
        for (index, t) in ues {
            f.followed.as_mut().map(|m| m.insert(index, 0));
            f.ip_of.insert(index, t.ue_ip);
            f.ue_of.insert(t.ue_ip, index);
            f.told.insert((0, t.ue_ip), t);
        }
        f
    }

    fn table(&self, enb: usize) -> usize {
        if self.shared {
            0
        } else {
            enb
        }
    }

    fn push(&mut self, enb: usize, op: TunnelOp) {
        let table = self.table(enb);
        match op {
            TunnelOp::Insert(t) | TunnelOp::CompleteHandover(t) => {
                self.told.insert((table, t.ue_ip), t);
            }
            TunnelOp::Release(ip) => {
                self.told.remove(&(table, ip));
            }
            TunnelOp::AcceptForwarding { .. } | TunnelOp::StartHandover { .. } => {}
        }
        self.ops.push_back((table, op));
    }

    /// The next change, for table `.0`, in order.
    pub fn poll_op(&mut self) -> Option<(usize, TunnelOp)> {
        self.ops.pop_front()
    }

    /// The UE of an address the follower has seen.
    pub fn ue_of(&self, ue_ip: Ipv4Addr) -> Option<u64> {
        self.ue_of.get(&ue_ip).copied()
    }

    /// Whether UE `index` is followed.
    pub fn follows(&self, index: u64) -> bool {
        self.followed.as_ref().is_none_or(|m| m.contains_key(&index))
    }

    /// Compare every followed UE's context with what its table was told:
    /// insert the tunnel of a bearer set up, release that of a UE gone idle.
    pub fn sync(&mut self, enbs: &[Enb]) {
        match self.followed.take() {
            None => {
                let found: Vec<(usize, u64)> =
                    enbs.iter().enumerate().flat_map(|(k, e)| e.ues().map(move |(i, _)| (k, i))).collect();
                for (k, index) in found {
                    self.sync_ue(enbs, k, index);
                }
            }
            Some(mut followed) => {
                for (&index, at) in followed.iter_mut() {
                    if enbs.get(*at).is_none_or(|e| e.ue(index).is_none()) {
                        match enbs.iter().position(|e| e.ue(index).is_some()) {
                            Some(k) => *at = k,
                            None => continue,
                        }
                    }
                    self.sync_ue(enbs, *at, index);
                }
                self.followed = Some(followed);
            }
        }
    }

    fn sync_ue(&mut self, enbs: &[Enb], k: usize, index: u64) {
        let Some(ctx) = enbs[k].ue(index) else { return };
        let Some(ue_ip) = ctx.ue.ipv4() else { return };
        if self.ip_of.insert(index, ue_ip) != Some(ue_ip) {
            self.ue_of.insert(ue_ip, index);
        }
        let have = self.told.get(&(self.table(k), ue_ip)).copied();
        match wanted(ctx) {
            Some(t) if have != Some(t) => self.push(k, TunnelOp::Insert(t)),
            None if have.is_some() => self.push(k, TunnelOp::Release(ue_ip)),
            _ => {}
        }
    }

    /// UE `index` arrives at eNB `target` with E-RAB `f` (TS 36.300
    /// 10.1.2.1.1 steps 7-8): the target takes the forwarded downlink on
    /// its DL forwarding F-TEID; `source`, when given, forwards there from
    /// now on; the UE's new tunnel is in place.
    fn arrive(
        &mut self,
        enbs: &[Enb],
        source: Option<(usize, Fteid)>,
        target: usize,
        ue_ip: Ipv4Addr,
        f: &ErabForwarding,
    ) {
        let (Some(enb), Some(sgw)) = (f.target_enb, f.sgw) else { return };
        let new = UeTunnel { ue_ip, sgw, enb };
        if !self.told.contains_key(&(self.table(target), ue_ip)) {
            self.push(target, TunnelOp::Insert(new));
        }
        let local = enbs[target].config().s1u_addr;
        if let Some(fwd) = f.forwarding.filter(|f| f.ipv4 == local) {
            self.push(target, TunnelOp::AcceptForwarding { ue_ip, teid: fwd.teid });
        }
        // The source moves its old TEID to forwarding before the new
        // tunnel replaces it (in a shared table they are the same UE's).
        if let Some((source, forward_to)) = source {
            self.push(source, TunnelOp::StartHandover { ue_ip, forward_to });
        }
        self.push(target, TunnelOp::CompleteHandover(new));
    }

    /// An X2 handover of UE `index` from eNB `source` to eNB `target`,
    /// `forwarding` being what `target.x2_handover_in` returned.
    pub fn x2_handover(
        &mut self,
        enbs: &[Enb],
        index: u64,
        source: usize,
        target: usize,
        forwarding: &[ErabForwarding],
    ) {
        let (Some(&ue_ip), Some(f)) = (self.ip_of.get(&index), forwarding.first()) else { return };
        if !self.follows(index) {
            return;
        }
        let fwd = f.forwarding.map(|to| (source, to));
        self.arrive(enbs, fwd, target, ue_ip, f);
    }

    /// The user-plane side of an eNB's [`HandoverAction`], before the
    /// driver carries it out (call it with the eNBs as they are then).
    pub fn on_handover(&mut self, enb: usize, h: &HandoverAction) {
        if let HandoverAction::S1HandoverExecute { ue, forwarding, .. } = h {
            let Some(&ue_ip) = self.ip_of.get(ue).filter(|_| self.follows(*ue)) else { return };
            if let Some(to) = forwarding.first().and_then(|f| f.forwarding) {
                self.push(enb, TunnelOp::StartHandover { ue_ip, forward_to: to });
            }
        }
    }

    /// The user-plane side of an eNB's [`HandoverAction`] after the
    /// driver carried it out: a UE that arrived by S1 gets its tunnel.
    pub fn handover_done(&mut self, enbs: &[Enb], enb: usize, h: &HandoverAction) {
        if let HandoverAction::S1HandoverArrived { ue, forwarding } = h {
            let Some(&ue_ip) = self.ip_of.get(ue).filter(|_| self.follows(*ue)) else { return };
            if let Some(f) = forwarding.first() {
                self.arrive(enbs, None, enb, ue_ip, f);
            }
        }
    }

    /// A table's event for its eNBs: an idle UE's uplink starts its
    /// SERVICE REQUEST at the eNB it camps on (TS 23.401 5.3.4.1;
    /// refused while another procedure runs, which brings it back anyway);
    /// activity restarts its inactivity timer. Returns the UE whose
    /// service request started.
    pub fn on_event(&mut self, now: Instant, enbs: &mut [Enb], ev: Event) -> Option<u64> {
        let (Event::UplinkWhileIdle { ue_ip } | Event::Activity { ue_ip }) = ev else { return None };
        let index = self.ue_of(ue_ip)?;
        let k = enbs.iter().position(|e| e.ue(index).is_some())?;
        match ev {
            Event::UplinkWhileIdle { .. } => match enbs[k].start_service_request(now, index) {
                Ok(()) => Some(index),
                Err(_) => {
                    self.uplink_waiting.insert(index);
                    None
                }
            },
            _ => {
                enbs[k].ue_activity(now, index);
                None
            }
        }
    }

    /// Service requests of idle UEs with uplink data that could not start
    /// before: tried again; a UE with a bearer again needs none.
    pub fn retry(&mut self, now: Instant, enbs: &mut [Enb]) {
        if self.uplink_waiting.is_empty() {
            return;
        }
        let waiting: Vec<u64> = self.uplink_waiting.iter().copied().collect();
        for index in waiting {
            let Some(k) = enbs.iter().position(|e| e.ue(index).is_some()) else {
                self.uplink_waiting.remove(&index);
                continue;
            };
            let ctx = enbs[k].ue(index).expect("found above");
            if wanted(ctx).is_some() || ctx.ue.procedure().is_some() {
                if wanted(ctx).is_some() {
                    self.uplink_waiting.remove(&index);
                }
                continue;
            }
            if enbs[k].start_service_request(now, index).is_ok() {
                self.uplink_waiting.remove(&index);
            }
        }
    }

    /// UEs followed, by index.
    pub fn followed(&self) -> HashSet<u64> {
        match &self.followed {
            Some(m) => m.keys().copied().collect(),
            None => self.ip_of.keys().copied().collect(),
        }
    }
}
