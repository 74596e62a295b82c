//! The eNB's idle-mode procedures (sans-I/O, like the rest of [`Enb`]):
//!
//! - inactivity release: [`Enb::ue_activity`] (the user plane calls it when
//!   a UE sends or receives data) restarts the UE's inactivity deadline
//!   ([`EnbConfig::inactivity_timeout`]); at expiry UE CONTEXT RELEASE
//!   REQUEST, cause user-inactivity (TS 36.413 8.3.2, TS 23.401 5.3.5);
//!   [`Enb::radio_link_failure`] asks the same with
//!   radio-connection-with-UE-lost. After the UE CONTEXT RELEASE COMMAND
//!   the eNB drops the E-RABs and KeNB; the UE stays EMM-REGISTERED with its
//!   GUTI, security context and bearers' EBIs (ECM-IDLE);
//! - [`Enb::start_service_request`]: SERVICE REQUEST in an INITIAL UE
//!   MESSAGE with the S-TMSI and RRC cause mo-Data (TS 24.301 5.6.1);
//! - S1AP PAGING (TS 36.413 8.5): the idle UE of the paged S-TMSI answers
//!   with a SERVICE REQUEST (mt-Access, TS 24.301 5.6.2.2.1); a paging with
//!   the IMSI makes it attach again (5.6.2.2.2);
//! - [`Enb::start_tau`] and the periodic TAU at T3412 expiry (TS 24.301
//!   5.5.3), woken through [`Enb::poll_timeout`];
//! - idle-mode cell reselection ([`reselect`], TS 36.304 5.2.4, emulated):
//!   an idle UE leaves one eNB's cell ([`Enb::take_idle_ue`]) and camps on
//!   another's ([`Enb::add_ue`]); outside its TAI list it starts a normal
//!   TAU from idle there (TS 24.301 5.5.3.2.2 a). A connected UE that a
//!   handover took out of its TAI list updates once it is idle again (a
//!   real UE updates at once, connected; the emulated one waits for the
//!   release so that its TAU never meets the handover's completion).
//!
//! All the per-UE deadlines of idle mode live in one heap with at most one
//! entry per UE and kind: an entry that fires early (the UE was active
//! since) is pushed again at the UE's current deadline.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

use oxirush_s1ap::s1ap::{Cause, CauseRadioNetwork};

use super::s1ap_build;
use super::s1ap_handler::{PagingIdentity, PagingRequest};
use super::{Enb, EnbAction, EnbError};
use crate::ue::idle::RrcCause;
use crate::ue::tau::TauKind;
use crate::ue::Ue;

/// The kinds of idle-mode deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// The eNB's inactivity timer of a connected UE.
    Inactivity,
    /// The UE's T3412 in ECM-IDLE.
    T3412,
}

/// The eNB's idle-mode state: deadlines and the S-TMSI index for paging.
#[derive(Debug, Default)]
pub struct IdleTimers {
    heap: BinaryHeap<Reverse<(Instant, u64, Kind)>>,
    /// M-TMSI of each UE's GUTI to the UE (paging by S-TMSI).
    by_m_tmsi: HashMap<u32, u64>,
}

impl IdleTimers {
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }
}

/// Per-UE idle-mode state at the eNB.
#[derive(Debug, Clone, Default)]
pub struct UeIdle {
    /// The last user-plane activity of a connected UE whose inactivity
    /// timer runs.
    last_activity: Option<Instant>,
    /// An inactivity entry is in the heap.
    inactivity_queued: bool,
    /// A T3412 entry is in the heap.
    t3412_queued: bool,
    /// The M-TMSI this UE is indexed under.
    m_tmsi: Option<u32>,
    /// The UE came here connected, by handover: at its release it checks
    /// its TAI list against this cell.
    pub(super) arrived_connected: bool,
}

/// How an idle UE's reselection ended ([`reselect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reselection {
    /// The new cell's TAI is in the UE's TAI list: no signalling.
    InTaiList,
    /// It is not: a normal TAU from idle started at the new eNB
    /// ([`crate::ue::Procedure::Tau`]).
    TauStarted,
}

/// [`reselect`] of idle UE `index` from `enbs[from]` to `enbs[to]`
/// (positions among the run's eNBs); `from == to` or a position past the
/// end names no eNB to move to ([`EnbError::UnknownUe`]).
pub fn reselect_among(
    now: Instant,
    enbs: &mut [Enb],
    from: usize,
    to: usize,
    index: u64,
) -> Result<Reselection, EnbError> {
    if from == to || from >= enbs.len() || to >= enbs.len() {
        return Err(EnbError::UnknownUe(index));
    }
    let (source, target) = if from < to {
        let (a, b) = enbs.split_at_mut(to);
        (&mut a[from], &mut b[0])
    } else {
        let (a, b) = enbs.split_at_mut(from);
        (&mut b[0], &mut a[to])
    };
    reselect(now, source, target, index)
}

/// Idle-mode cell reselection, emulated (TS 36.304 5.2.4): idle UE
/// `index` leaves `source`'s cell and camps on `target`'s from `now` on,
/// so that its next service request or answer to paging goes through
/// `target`; if `target`'s TAI is outside its TAI list it starts a normal
/// tracking area update from idle there (TS 24.301 5.5.3.2.2 a, EPS update
/// type "TA updating"). Only a UE in ECM-IDLE with no procedure running
/// moves; a TAU needs `target`'s S1 to be up.
pub fn reselect(now: Instant, source: &mut Enb, target: &mut Enb, index: u64) -> Result<Reselection, EnbError> {
    let ctx = source.ues.get(&index).ok_or(EnbError::UnknownUe(index))?;
    if !ctx.ue.is_idle() {
        return Err(EnbError::NotIdle(index));
    }
    let tau = ctx.ue.needs_tau(target.cfg.tac);
    if tau && !target.is_ready() {
        return Err(EnbError::NotReady);
    }
    let ue = source.take_idle_ue(index).ok_or(EnbError::NotIdle(index))?;
    target.add_ue(index, ue);
    if !tau {
        return Ok(Reselection::InTaiList);
    }
    target.start_tau(now, index, false)?;
    Ok(Reselection::TauStarted)
}

fn rrc_cause(cause: RrcCause) -> oxirush_s1ap::s1ap::RRCEstablishmentCause {
    use oxirush_s1ap::s1ap::RRCEstablishmentCause as C;
    match cause {
        RrcCause::MoSignalling => C::mo_Signalling,
        RrcCause::MoData => C::mo_Data,
        RrcCause::MtAccess => C::mt_Access,
    }
}

impl Enb {
    /// The INITIAL UE MESSAGE of UE `index` on its new connection `enb_ue_id`:
    /// the RRC establishment cause and S-TMSI the UE gives (TS 36.413
    /// 9.1.7.1).
    pub(super) fn initial_ue_message_of(
        &self,
        index: u64,
        enb_ue_id: u32,
        nas: Vec<u8>,
    ) -> Result<Vec<u8>, oxirush_s1ap::Error> {
        let (cause, s_tmsi) =
            self.ues.get(&index).map(|c| (c.ue.establishment_cause(), c.ue.s_tmsi())).unwrap_or_default();
        s1ap_build::initial_ue_message(&self.cell, enb_ue_id, nas, rrc_cause(cause), s_tmsi)
    }

    /// User-plane activity of UE `index` (data sent or received): its
    /// inactivity deadline moves to `now` + the inactivity time. Cheap; the
    /// user plane may call it for every packet, or throttled.
    pub fn ue_activity(&mut self, now: Instant, index: u64) {
        if let Some(ctx) = self.ues.get_mut(&index) {
            if ctx.idle.last_activity.is_some_and(|t| t < now) {
                ctx.idle.last_activity = Some(now);
            }
        }
    }

    /// The inactivity deadline of UE `index`, if its timer runs.
    pub fn inactivity_deadline(&self, index: u64) -> Option<Instant> {
        let t = self.cfg.inactivity_timeout?;
        self.ues.get(&index)?.idle.last_activity.map(|a| a + t)
    }

    /// The bearers of UE `index` are up: its inactivity timer starts.
    pub(super) fn arm_inactivity(&mut self, now: Instant, index: u64) {
        let Some(t) = self.cfg.inactivity_timeout else { return };
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        ctx.idle.last_activity = Some(now);
        if !ctx.idle.inactivity_queued {
            ctx.idle.inactivity_queued = true;
            self.idle.heap.push(Reverse((now + t, index, Kind::Inactivity)));
        }
    }

    /// The radio link to UE `index` failed: UE CONTEXT RELEASE REQUEST
    /// with cause radio-connection-with-UE-lost (TS 36.413 8.3.2).
    pub fn radio_link_failure(&mut self, now: Instant, index: u64) -> Result<(), EnbError> {
        let _ = now;
        let ctx = self.ues.get(&index).ok_or(EnbError::UnknownUe(index))?;
        if !ctx.s1.is_some_and(|s| s.mme_ue_id.is_some() && !s.release_requested) {
            return Err(EnbError::NotConnected(index));
        }
        self.request_release(index, CauseRadioNetwork::radio_connection_with_ue_lost);
        Ok(())
    }

    /// Release connected UE `index` for user inactivity now, as its
    /// inactivity timer would (UE CONTEXT RELEASE REQUEST, cause
    /// user-inactivity, TS 36.413 8.3.2): for drivers that decide when.
    pub fn release_inactive(&mut self, index: u64) -> Result<(), EnbError> {
        let ctx = self.ues.get(&index).ok_or(EnbError::UnknownUe(index))?;
        match ctx.s1 {
            Some(s) if s.release_requested => return Err(EnbError::ReleaseRequested(index)),
            Some(s) if s.mme_ue_id.is_some() => {}
            _ => return Err(EnbError::NotConnected(index)),
        }
        if ctx.ue.procedure().is_some() {
            return Err(EnbError::Busy(index));
        }
        self.request_release(index, CauseRadioNetwork::user_inactivity);
        Ok(())
    }

    /// Ask the MME to release UE `index`'s context (TS 36.413 8.3.2), once;
    /// a connection the MME never saw is forgotten.
    pub(super) fn request_release(&mut self, index: u64, cause: CauseRadioNetwork) {
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        ctx.idle.last_activity = None;
        let Some(conn) = ctx.s1 else { return };
        match conn.mme_ue_id {
            Some(mme) if !conn.release_requested => {
                let built = s1ap_build::ue_context_release_request(mme, conn.enb_ue_id, Cause::radioNetwork(cause));
                self.push_pdu(conn.stream, built);
                if let Some(s) = self.ues.get_mut(&index).and_then(|c| c.s1.as_mut()) {
                    s.release_requested = true;
                }
            }
            Some(_) => {}
            None => self.drop_connection(index),
        }
    }

    /// After UE CONTEXT RELEASE COMPLETE: the eNB forgets the UE's E-RABs,
    /// KeNB and UE-AMBR (the UE is ECM-IDLE), the UE's T3412 runs, and an
    /// attach the UE owes the network starts.
    pub(super) fn released_to_idle(&mut self, now: Instant, index: u64) {
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        ctx.erabs.clear();
        ctx.kenb = None;
        ctx.ambr = None;
        ctx.idle.last_activity = None;
        let reattach = ctx.ue.take_reattach();
        // Once per handover: a TAU the network rejects does not repeat.
        let moved = std::mem::take(&mut ctx.idle.arrived_connected);
        let tau = moved && ctx.ue.needs_tau(self.cfg.tac);
        self.queue_t3412(index);
        if reattach {
            if let Err(e) = self.start_attach(now, index) {
                self.actions.push_back(EnbAction::Anomaly(format!("attach after release not started: {e}")));
            }
        } else if tau {
            // TS 24.301 5.5.3.2.2 a: a handover brought the UE into a TA
            // outside its TAI list.
            if let Err(e) = self.start_tau(now, index, false) {
                self.actions.push_back(EnbAction::Anomaly(format!("TAU after release not started: {e}")));
            }
        }
    }

    /// Queue the UE's T3412 deadline, if it runs and none is queued.
    fn queue_t3412(&mut self, index: u64) {
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        if let Some(deadline) = ctx.ue.t3412_deadline() {
            if !ctx.idle.t3412_queued {
                ctx.idle.t3412_queued = true;
                self.idle.heap.push(Reverse((deadline, index, Kind::T3412)));
            }
        }
    }

    /// A UE arrives in this eNB's cell (a new UE, an idle one moved here,
    /// one that came by handover): it camps on the cell, is indexed for
    /// paging, its T3412 runs on (if it is idle).
    pub(super) fn settle_ue(&mut self, index: u64) {
        let tai = oxirush_nas::nas_eps::Tai::new(self.nas_plmn(), self.cfg.tac);
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.ue.camp(tai);
        }
        self.reindex(index);
        self.queue_t3412(index);
    }

    /// UE `index` arrived here connected, by handover: it camps on this
    /// cell, and checks its TAI list when it is released.
    pub(super) fn arrived_by_handover(&mut self, index: u64) {
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.idle.arrived_connected = true;
        }
        self.settle_ue(index);
    }

    fn nas_plmn(&self) -> oxirush_nas::nas_eps::Plmn {
        let p = self.cfg.plmn;
        oxirush_nas::nas_eps::Plmn::new(&p.mcc(), &p.mnc()).expect("a configured PLMN has valid digits")
    }

    /// Keep the paging index in step with the UE's GUTI.
    pub(super) fn reindex(&mut self, index: u64) {
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        let now = ctx.ue.guti().map(|g| g.m_tmsi());
        if now == ctx.idle.m_tmsi {
            return;
        }
        let old = std::mem::replace(&mut ctx.idle.m_tmsi, now);
        if let Some(old) = old {
            if self.idle.by_m_tmsi.get(&old) == Some(&index) {
                self.idle.by_m_tmsi.remove(&old);
            }
        }
        if let Some(new) = now {
            self.idle.by_m_tmsi.insert(new, index);
        }
    }

    /// Take idle UE `index` out of this eNB (to add it to another with
    /// [`Enb::add_ue`]): only an ECM-IDLE UE with no procedure running and
    /// no S1 connection (registered or not) can leave.
    pub fn take_idle_ue(&mut self, index: u64) -> Option<Ue> {
        let ctx = self.ues.get(&index)?;
        if ctx.s1.is_some() || ctx.ue.procedure().is_some() || ctx.ue.is_connected() {
            return None;
        }
        let ctx = self.ues.remove(&index)?;
        if let Some(m) = ctx.idle.m_tmsi {
            if self.idle.by_m_tmsi.get(&m) == Some(&index) {
                self.idle.by_m_tmsi.remove(&m);
            }
        }
        Some(ctx.ue)
    }

    /// UE-triggered service request of idle UE `index` (uplink data waits,
    /// TS 24.301 5.6.1.1): [`crate::ue::Procedure::ServiceRequest`].
    pub fn start_service_request(&mut self, now: Instant, index: u64) -> Result<(), EnbError> {
        if !self.is_ready() {
            return Err(EnbError::NotReady);
        }
        let ctx = self.ues.get_mut(&index).ok_or(EnbError::UnknownUe(index))?;
        if ctx.s1.is_some() {
            return Err(EnbError::NotIdle(index));
        }
        ctx.ue.start_service_request(now, false)?;
        self.begin_procedure(now, index);
        Ok(())
    }

    /// A normal tracking area update of UE `index` (TS 24.301 5.5.3.2),
    /// from ECM-IDLE (a new connection) or on its connection; `active`
    /// asks for the bearers to be set up (the MME follows the TAU ACCEPT
    /// with an INITIAL CONTEXT SETUP). [`crate::ue::Procedure::Tau`].
    pub fn start_tau(&mut self, now: Instant, index: u64, active: bool) -> Result<(), EnbError> {
        self.start_tau_of(now, index, TauKind::TaChange, active)
    }

    fn start_tau_of(&mut self, now: Instant, index: u64, kind: TauKind, active: bool) -> Result<(), EnbError> {
        if !self.is_ready() {
            return Err(EnbError::NotReady);
        }
        let ctx = self.ues.get_mut(&index).ok_or(EnbError::UnknownUe(index))?;
        if ctx.s1.is_some_and(|s| s.release_requested) {
            return Err(EnbError::NotIdle(index));
        }
        ctx.ue.start_tau(now, kind, active)?;
        self.begin_procedure(now, index);
        Ok(())
    }

    /// Idle-mode deadlines due at `now`.
    pub(super) fn idle_timeout(&mut self, now: Instant) {
        while let Some(Reverse((deadline, index, kind))) = self.idle.heap.peek().copied() {
            if deadline > now {
                break;
            }
            self.idle.heap.pop();
            match kind {
                Kind::Inactivity => self.inactivity_expiry(now, index),
                Kind::T3412 => self.t3412_expiry(now, index),
            }
        }
    }

    fn inactivity_expiry(&mut self, now: Instant, index: u64) {
        let Some(t) = self.cfg.inactivity_timeout else { return };
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        ctx.idle.inactivity_queued = false;
        let Some(last) = ctx.idle.last_activity else { return };
        if last + t > now {
            ctx.idle.inactivity_queued = true;
            self.idle.heap.push(Reverse((last + t, index, Kind::Inactivity)));
            return;
        }
        // TS 23.401 5.3.5: the eNB releases a UE without activity.
        self.request_release(index, CauseRadioNetwork::user_inactivity);
    }

    fn t3412_expiry(&mut self, now: Instant, index: u64) {
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        ctx.idle.t3412_queued = false;
        let Some(deadline) = ctx.ue.t3412_deadline() else { return };
        if deadline > now {
            return self.queue_t3412(index);
        }
        // TS 24.301 5.3.5: periodic tracking area updating at T3412 expiry.
        // A UE busy with another procedure is connected, which stops T3412.
        if let Err(e) = self.start_tau_of(now, index, TauKind::Periodic, false) {
            self.actions.push_back(EnbAction::Anomaly(format!("periodic TAU not started: {e}")));
        }
    }

    /// S1AP PAGING (TS 36.413 8.5): for this eNB only if its TAI is in the
    /// paging's TAI list; the idle UE of the S-TMSI answers with a SERVICE
    /// REQUEST ([`crate::ue::Procedure::PagingResponse`], from `now`); with
    /// the IMSI it detaches locally and attaches (TS 24.301 5.6.2.2.2).
    /// Anything else is ignored and counted.
    pub(super) fn paging(&mut self, now: Instant, p: PagingRequest) {
        if !p.tais.iter().any(|(plmn, tac)| *plmn == self.cell.plmn && *tac == self.cfg.tac) {
            return self.anomaly("PAGING with a TAI list without this eNB's TAI");
        }
        let index = match &p.identity {
            PagingIdentity::STmsi { mmec, m_tmsi } => self.idle.by_m_tmsi.get(m_tmsi).copied().filter(|i| {
                self.ues
                    .get(i)
                    .and_then(|c| c.ue.guti())
                    .is_some_and(|g| g.mme_code() == *mmec && g.m_tmsi() == *m_tmsi)
            }),
            PagingIdentity::Imsi(digits) => {
                self.ues.iter().find(|(_, c)| c.ue.usim.imsi.as_str() == digits.as_str()).map(|(i, _)| *i)
            }
        };
        let Some(index) = index else { return self.anomaly("PAGING for a UE not in this cell") };
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        if ctx.s1.is_some() || ctx.ue.is_connected() {
            // Already connected (or connecting): the MME reaches it there.
            return self.anomaly("PAGING for a connected UE");
        }
        if ctx.ue.procedure().is_some() {
            return self.anomaly("PAGING for a UE in a procedure");
        }
        match p.identity {
            PagingIdentity::STmsi { .. } => match ctx.ue.start_service_request(now, true) {
                Ok(()) => self.begin_procedure(now, index),
                Err(e) => self.actions.push_back(EnbAction::Anomaly(format!("PAGING not answered: {e}"))),
            },
            PagingIdentity::Imsi(_) => {
                ctx.ue.paged_with_imsi();
                ctx.ue.take_reattach();
                if let Err(e) = self.start_attach(now, index) {
                    self.actions.push_back(EnbAction::Anomaly(format!("attach after PAGING with IMSI: {e}")));
                }
            }
        }
    }
}
