//! One UE in or out of this MME, with no signalling (issue 13 item 2):
//! [`Mme::export_ue`] writes its context as a record
//! ([`crate::context_codec`]), [`Mme::import_ue`] rebuilds a context from
//! one with its indexes (S1 connection, IMSI, M-TMSIs) and its timers, and
//! [`Mme::evict_ue`] drops it from memory as if this host had never held
//! it. The store layer ([`crate::stored`]) moves records between hosts;
//! this module is its sans-I/O half, and [`Changes`] tells it which UEs
//! the events touched.
//!
//! What an imported UE keeps: its MME-UE-S1AP-ID (also its S11 TEID, which
//! the S-GW knows), its UeRef generation (so that an S6a or S11 answer to
//! a request of the previous host is taken, once something routes it
//! here), its S1 connection on the same association. What it does not:
//! the previous host's count of S6a requests in flight, which bounds only
//! the requests each host sends itself.

use crate::context::*;
use crate::context_codec::{self, DecodeError, TimeBase};
use crate::mme::{Mme, MmeAction};
use mobicore_common::s11::{DeleteSessionRequest, ModifyBearerRequest, S11Request};
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ebi, Imsi};
use std::cmp::Reverse;
use std::collections::HashSet;

/// How a UE is named when it is exported or evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UeKey {
    MmeUeS1apId(u32),
    Imsi(Imsi),
    /// The M-TMSI of its GUTI, or an older one that still names it.
    MTmsi(u32),
}

/// Why a record was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("MME-UE-S1AP-ID {0} names another UE here")]
    IdInUse(u32),
    #[error("the IMSI names another UE here")]
    ImsiInUse,
    #[error("M-TMSI {0:#010x} names another UE here")]
    MTmsiInUse(u32),
    /// The UE's S1 connection (or its handover target) is on an
    /// association that is no set-up eNB here.
    #[error("association {0:?} is no eNB of this MME")]
    UnknownEnb(AssocId),
    #[error("this MME holds max_ues UEs")]
    Full,
}

/// What events did to UE contexts since the last [`Mme::take_changes`].
#[derive(Debug, Default)]
pub struct Changes {
    /// UEs a message, answer or timer acted on (a superset of the changed).
    pub touched: HashSet<u32>,
    /// UEs the MME forgot (detach, abort, reject): their records go too.
    pub removed: Vec<Removed>,
}

/// A UE the MME forgot, by the names its record is kept under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub id: u32,
    pub imsi: Option<Imsi>,
    pub mtmsis: Vec<u32>,
}

impl Removed {
    pub(crate) fn of(ue: &UeContext) -> Removed {
        Removed { id: ue.id, imsi: ue.imsi.clone(), mtmsis: mtmsis(ue) }
    }
}

/// The M-TMSIs that name `ue`: its GUTI's, and older ones still valid.
pub(crate) fn mtmsis(ue: &UeContext) -> Vec<u32> {
    let tau_old = match ue.step {
        Step::TauAccept { old_mtmsi, .. } => old_mtmsi,
        _ => None,
    };
    let mut v: Vec<u32> = ue.guti.map(|g| g.m_tmsi.0).into_iter().chain(ue.old_mtmsi).chain(tau_old).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A UE's procedure state as the store layer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UeSummary {
    pub id: u32,
    pub imsi: Option<Imsi>,
    pub mtmsis: Vec<u32>,
    /// No procedure runs: the UE is registered and its step is idle (what
    /// cold replication waits for, seed 004 4.3).
    pub settled: bool,
}

/// Whether a procedure runs for the UE: an EMM or ESM step, a paging, a
/// handover.
fn running(ue: &UeContext) -> bool {
    ue.step != Step::Idle || ue.esm.is_some() || ue.paging.is_some() || ue.handover.is_some()
}

impl Mme {
    /// Keep (or stop keeping) the journal of [`Changes`].
    pub fn track_changes(&mut self, on: bool) {
        self.changes = on.then(Changes::default);
    }

    /// The journal since the last call (empty unless tracked).
    pub fn take_changes(&mut self) -> Changes {
        match &mut self.changes {
            Some(c) => std::mem::take(c),
            None => Changes::default(),
        }
    }

    /// The UEs touched since the journal was last taken (none unless
    /// tracked), in no order.
    pub fn touched(&self) -> impl Iterator<Item = u32> + '_ {
        self.changes.iter().flat_map(|c| c.touched.iter().copied())
    }

    /// Take UE `id` out of the journal: as it stands here it is its
    /// stored record (just read again), nothing to write.
    pub fn untouch(&mut self, id: u32) {
        if let Some(c) = &mut self.changes {
            c.touched.remove(&id);
        }
    }

    pub(crate) fn touch(&mut self, id: u32) {
        if let Some(c) = &mut self.changes {
            c.touched.insert(id);
        }
    }

    /// The MME-UE-S1AP-ID of the UE `key` names here.
    pub fn find_ue(&self, key: &UeKey) -> Option<u32> {
        let id = match key {
            UeKey::MmeUeS1apId(id) => *id,
            UeKey::Imsi(i) => *self.by_imsi.get(i)?,
            UeKey::MTmsi(m) => *self.by_mtmsi.get(m)?,
        };
        self.ues.contains_key(&id).then_some(id)
    }

    /// The summary of UE `id`, if it is here.
    pub fn ue_summary(&self, id: u32) -> Option<UeSummary> {
        let ue = self.ues.get(&id)?;
        Some(UeSummary {
            id,
            imsi: ue.imsi.clone(),
            mtmsis: mtmsis(ue),
            settled: ue.emm == EmmState::Registered && ue.step == Step::Idle && ue.esm.is_none(),
        })
    }

    /// The M-TMSI of UE `id`'s GUTI, if it is here and has one.
    pub fn ue_mtmsi(&self, id: u32) -> Option<u32> {
        Some(self.ues.get(&id)?.guti?.m_tmsi.0)
    }

    /// Whether UE `id` (if here) is at rest: registered, ECM-IDLE (no S1
    /// connection, its release completed), no procedure running (no EMM or
    /// ESM step, paging or handover) and no S11 answer awaited. A host a
    /// UE visited for a procedure lets it go then.
    pub fn ue_at_rest(&self, id: u32) -> Option<bool> {
        let ue = self.ues.get(&id)?;
        let awaiting = ue.releasing.is_some() || self.s11_awaited.contains_key(&id);
        Some(ue.emm == EmmState::Registered && ue.s1.is_none() && !awaiting && !running(ue))
    }

    /// How many UEs here have a procedure running (an EMM or ESM step,
    /// a paging, a handover): what a host being drained waits for before
    /// its UEs are handed on (seed 004 5.2 "Scaling").
    pub fn busy_ues(&self) -> usize {
        self.ues.values().filter(|ue| running(ue)).count()
    }

    /// The record of the UE `key` names, its deadlines on the wall clock of
    /// `time` (`time.now` is this MME's clock). `None` if no UE has that
    /// name here, or its record would be too long.
    pub fn export_ue(&self, key: &UeKey, time: TimeBase) -> Option<Vec<u8>> {
        let ue = self.ues.get(&self.find_ue(key)?)?;
        let record = context_codec::encode(ue, time);
        if record.is_none() {
            self.counters.incr("ue_export_too_long");
        }
        record
    }

    /// Take the UE of `record`: its context, its indexes, its timers
    /// (re-armed at their written deadlines; one that is past fires at the
    /// next [`Mme::handle_timeout`]). An older copy of the same UE (same
    /// MME-UE-S1AP-ID and IMSI) is replaced. Returns its MME-UE-S1AP-ID.
    pub fn import_ue(&mut self, record: &[u8], time: TimeBase) -> Result<u32, ImportError> {
        let mut ue = context_codec::decode(record, time)?;
        let id = ue.id;
        if let Some(old) = self.ues.get(&id) {
            if old.imsi.is_none() || old.imsi != ue.imsi {
                return Err(ImportError::IdInUse(id));
            }
        } else if self.ues.len() >= self.cfg.max_ues {
            return Err(ImportError::Full);
        }
        if let Some(i) = &ue.imsi {
            if self.by_imsi.get(i).is_some_and(|&o| o != id && self.ues.contains_key(&o)) {
                return Err(ImportError::ImsiInUse);
            }
        }
        for m in mtmsis(&ue) {
            if self.by_mtmsi.get(&m).is_some_and(|&o| o != id && self.ues.contains_key(&o)) {
                return Err(ImportError::MTmsiInUse(m));
            }
        }
        let conns: Vec<S1Conn> = ue.s1.into_iter().chain(ue.handover.as_ref().and_then(|h| h.target)).collect();
        let assocs = conns.iter().map(|c| c.assoc).chain(ue.handover.as_ref().map(|h| h.target_assoc));
        for assoc in assocs {
            if !self.enbs.get(&assoc).is_some_and(|e| e.setup) {
                return Err(ImportError::UnknownEnb(assoc));
            }
        }
        // A stream this association does not have (TS 36.412 7): another.
        let enbs = &mut self.enbs;
        let mut restream = |s: &mut S1Conn| {
            if let Some(e) = enbs.get_mut(&s.assoc).filter(|e| s.stream >= e.outbound_streams.max(1)) {
                s.stream = e.pick_stream();
            }
        };
        ue.s1.iter_mut().for_each(&mut restream);
        if let Some(h) = ue.handover.as_mut() {
            h.target.iter_mut().for_each(&mut restream);
            if let Some(e) = self.enbs.get_mut(&h.target_assoc).filter(|e| h.target_stream >= e.outbound_streams.max(1))
            {
                h.target_stream = e.pick_stream();
            }
        }
        let conns: Vec<S1Conn> = ue.s1.into_iter().chain(ue.handover.as_ref().and_then(|h| h.target)).collect();
        self.forget_ue(id);
        self.now = self.now.max(time.now);
        self.set_next_generation(ue.generation + 1);
        for s1 in conns {
            match self.by_enb_ue.insert((s1.assoc, s1.enb_ue_s1ap_id), id) {
                // Another context had that S1 connection: it is this UE's now.
                Some(old) if old != id => {
                    if let Some(u) = self.ues.get_mut(&old) {
                        u.s1 = u.s1.filter(|s| *s != s1);
                    }
                }
                Some(_) => {}
                None => {
                    if let Some(e) = self.enbs.get_mut(&s1.assoc) {
                        e.s1_ues += 1;
                    }
                }
            }
        }
        if let Some(i) = &ue.imsi {
            self.by_imsi.insert(i.clone(), id);
        }
        for m in mtmsis(&ue) {
            self.by_mtmsi.insert(m, id);
            self.implicitly_detached.remove(m);
        }
        if ue.paging.is_some() && ue.guards.iter().any(|g| g.kind == GuardKind::T3413) {
            self.paged.insert(id);
        }
        // Fresh sequence numbers on this MME's timer heap.
        let mut deadlines = Vec::new();
        if let Some(t) = &mut ue.timer {
            t.seq = self.take_timer_seq();
            deadlines.push((t.deadline, t.seq));
        }
        for g in &mut ue.guards {
            g.seq = self.take_timer_seq();
            deadlines.push((g.deadline, g.seq));
        }
        self.ues.insert(id, Box::new(ue));
        for (deadline, seq) in deadlines {
            self.timers.push(Reverse((deadline, id, seq)));
        }
        self.counters.incr("ue_imported");
        self.touch(id);
        Ok(id)
    }

    /// [`Mme::import_ue`], where the record is the UE's newest state: the
    /// copy held of the same MME-UE-S1AP-ID is replaced whatever it is (a
    /// UE with no IMSI yet too), and another context of the same IMSI (a
    /// UE that attached again) is forgotten as a removed UE (its record
    /// goes at the next sync). What an elastic MME host's forwarder does
    /// with the record an NF instance returns.
    pub fn replace_ue(&mut self, record: &[u8], time: TimeBase) -> Result<u32, ImportError> {
        let ue = context_codec::decode(record, time)?;
        let other = ue.imsi.as_ref().and_then(|i| self.by_imsi.get(i)).copied().filter(|&o| o != ue.id);
        if let Some(o) = other.filter(|o| self.ues.contains_key(o)) {
            if let Some(old) = self.forget_ue(o) {
                if let Some(c) = &mut self.changes {
                    c.removed.push(Removed::of(&old));
                }
                self.counters.incr("ue_superseded_by_import");
            }
        }
        if self.ues.contains_key(&ue.id) {
            self.forget_ue(ue.id);
        }
        self.import_ue(record, time)
    }

    /// Forget UE `id` as the MME forgets a detached or rejected UE (its
    /// record goes at the next sync), sending nothing: an NF instance of an
    /// elastic MME host forgot it. Whether it was here.
    pub fn drop_ue(&mut self, id: u32) -> bool {
        let Some(old) = self.forget_ue(id) else { return false };
        if let Some(c) = &mut self.changes {
            c.removed.push(Removed::of(&old));
        }
        true
    }

    /// UE `id` was just taken over from a host that is gone (its heir
    /// loaded the record): the S6a or S11 request the record's step awaits
    /// the answer to is sent again from here (that answer went to the dead
    /// host's S6a link or, routed by sequence number, to the dead host).
    /// By step:
    /// - AuthInfo: the AIR (TS 29.272 5.2.3.1; a re-synchronisation's
    ///   AUTS is not in the record, so the UE may fail synch once more and
    ///   resynchronise, TS 33.102 6.3.5);
    /// - UpdateLocation: the ULR (TS 29.272 5.2.1.1);
    /// - CreateSession: the attach's Create Session Request (TS 29.274
    ///   7.2.1: the S-GW takes one colliding with an existing PDN
    ///   connection as a new session);
    /// - ReleaseAccessBearers: its request (TS 29.274 7.2.21);
    /// - DetachDeleteSession: the sessions left the context when the
    ///   Delete Sessions went out, so the detach ends here as after their
    ///   answers (counted: the S-GW may hold them until it ages them out);
    /// - a connected UE with no procedure running: the Modify Bearer of
    ///   each PDN connection the eNB has a tunnel for (TS 29.274 7.2.7),
    ///   which the MME sends after an Initial Context Setup Response
    ///   without waiting in a step (so the record cannot say whether the
    ///   S-GW heard it); the same F-TEID again changes nothing there;
    /// - a handover's last step (an X2 path switch, or an S1 handover
    ///   after its Handover Notify): those Modify Bearers to the target's
    ///   tunnels, the answers awaited counted again from them (TS 23.401
    ///   5.5.1.1.2 step 3, 5.5.1.2.2 step 15);
    /// - an S1 handover awaiting its indirect forwarding tunnel: the Create
    ///   Indirect Data Forwarding Tunnel Request (TS 23.401 5.5.1.2.2 step
    ///   8; a repeated one replaces the S-GW's tunnel);
    /// - a stand-alone ESM procedure awaiting the S-GW: PDN connectivity's
    ///   Create Session Request (TS 24.301 6.5.1.2, as at attach), PDN
    ///   disconnect's Delete Session Request (6.5.2.2; a session already
    ///   gone is answered Context Not Found, and the bearers go as after
    ///   any answer).
    ///
    /// Returns whether something was sent.
    pub fn resume_taken_over(&mut self, id: u32) -> bool {
        use crate::s1_handover::Phase;
        let Some(ue) = self.ues.get(&id) else { return false };
        match (&ue.handover, ue.step, &ue.esm) {
            (_, _, Some(esm)) => {
                if !self.esm_request_again(id, esm.clone()) {
                    return false;
                }
            }
            (Some(h), _, _) if h.phase == Phase::CreateForwarding => {
                if !self.request_forwarding_tunnel(id) {
                    return false;
                }
            }
            (Some(h), _, _) if matches!(h.phase, Phase::PathSwitch | Phase::Completion { .. }) => {
                // After an S1 handover's notify, the source's release command
                // too, its COMPLETE not in (TS 23.401 5.5.1.2.2 step 19).
                if let Phase::Completion { source, released: false } = h.phase {
                    use oxirush_s1ap::s1ap::{Cause, CauseRadioNetwork};
                    let cause = Cause::radioNetwork(CauseRadioNetwork::successful_handover);
                    let data = crate::s1ap_build::ue_context_release_command(id, source.enb_ue_s1ap_id, cause);
                    self.push_s1(source.assoc, source.stream, data);
                }
                let n = self.modify_bearers_again(id);
                if n == 0 {
                    return false;
                }
                if let Some(h) = self.ues.get_mut(&id).and_then(|u| u.handover.as_mut()) {
                    h.pending = n.min(u8::MAX as usize) as u8;
                }
            }
            (Some(_), _, _) => return false,
            (None, Step::AuthInfo, _) => self.start_authentication(id, None),
            (None, Step::UpdateLocation, _) => self.start_update_location(id),
            (None, Step::CreateSession, _) => self.start_create_session(id),
            (None, Step::ReleaseAccessBearers, _) => self.start_s1_release(id),
            (None, Step::DetachDeleteSession { switch_off, .. }, _) => {
                self.counters.incr("ue_resumed_detach_finished");
                let s1 = ue.s1;
                self.finish_detach(id, switch_off);
                self.note_resumed_ended(s1);
            }
            // The bearers requested back: the same INITIAL CONTEXT SETUP
            // REQUEST again (its KeNB from the same uplink NAS COUNT).
            (None, Step::ServiceRequest, _) if ue.s1.is_some() => {
                if !self.reestablish_bearers(id) {
                    return false;
                }
            }
            // The release commanded: the command again (TS 36.413 8.3.3).
            (None, Step::Idle, _) if ue.s1.is_none() && ue.releasing.is_some() => {
                let Some(r) = ue.releasing.clone() else { return false };
                self.push(MmeAction::S1Send { assoc: r.s1.assoc, stream: r.s1.stream, data: r.command });
            }
            (None, Step::Idle, _) if ue.s1.is_some() => {
                if self.modify_bearers_again(id) == 0 {
                    return false;
                }
            }
            _ => return false,
        }
        self.counters.incr("ue_resumed_request");
        true
    }

    /// The S11 request the ESM procedure `esm` of UE `id` awaits the
    /// answer to, sent again; whether it went. A PDN connectivity whose
    /// request cannot be built again is rejected with the ESM cause that
    /// says why (TS 24.301 6.5.1.4).
    fn esm_request_again(&mut self, id: u32, esm: EsmProcedure) -> bool {
        match esm {
            EsmProcedure::CreateSession { req, ebi, .. } => {
                let csr = self
                    .select_apn(id, req.apn.as_deref())
                    .and_then(|c| self.create_session_request(id, &c, &req, ebi));
                match csr {
                    Ok(csr) => self.request_s11(id, S11Request::CreateSession(csr)),
                    Err(cause) => {
                        if let Some(ue) = self.ues.get_mut(&id) {
                            ue.esm = None;
                        }
                        self.reject_pdn_connectivity(id, req.pti, cause);
                        return false;
                    }
                }
            }
            EsmProcedure::DeleteSession { ebi, .. } => {
                let Some(s) = self.ues.get(&id).and_then(|u| u.sessions.iter().find(|s| s.ebi == ebi)) else {
                    return false;
                };
                let req = DeleteSessionRequest { sgw_teid: s.sgw_s11.teid, linked_ebi: Ebi(ebi) };
                self.request_s11(id, S11Request::DeleteSession(req));
            }
            // Awaiting the UE or the eNB, under T3485 / T3495.
            EsmProcedure::ActivateDefault { .. } | EsmProcedure::Deactivate { .. } => return false,
        }
        true
    }

    /// A Modify Bearer Request for each PDN connection of UE `id` the eNB
    /// has a tunnel for (TS 29.274 7.2.7); how many went.
    fn modify_bearers_again(&mut self, id: u32) -> usize {
        let Some(ue) = self.ues.get(&id) else { return 0 };
        let requests: Vec<ModifyBearerRequest> = ue
            .sessions
            .iter()
            .filter_map(|s| {
                let fteid = s.enb_s1u?;
                Some(ModifyBearerRequest { sgw_teid: s.sgw_s11.teid, ebi: Ebi(s.ebi), s1u_enb_fteid: fteid })
            })
            .collect();
        let n = requests.len();
        for req in requests {
            self.request_s11(id, S11Request::ModifyBearer(req));
        }
        n
    }

    /// Withdraw what this MME was about to send for UE `id` (its S1AP,
    /// S6a and S11 requests not yet polled); how many. For a copy that
    /// turned out stale (another host wrote the UE's record meanwhile):
    /// write-ahead, nothing an event produced has gone out before the
    /// store took its record.
    pub fn withdraw_actions(&mut self, id: u32) -> usize {
        let before = self.actions.len();
        self.actions.retain(|a| action_ue(a) != Some(id));
        before - self.actions.len()
    }

    /// Drop the UE `key` names from memory, sending nothing and keeping
    /// no trace of it (another host carries on with it). Returns its
    /// context, or `None` if it was not here.
    pub fn evict_ue(&mut self, key: &UeKey) -> Option<UeContext> {
        let id = self.find_ue(key)?;
        let ue = self.forget_ue(id)?;
        self.counters.incr("ue_evicted");
        Some(ue)
    }
}

/// The MME-UE-S1AP-ID of the UE an action is for: an S6a or S11
/// request's, or a UE-associated S1AP PDU's (TS 36.413 9.2.3.3, or in the
/// UE S1AP IDs of a UE CONTEXT RELEASE COMMAND, 9.2.3.18); `None` for the
/// rest.
pub fn action_ue(a: &MmeAction) -> Option<u32> {
    use oxirush_s1ap::s1ap::{UES1APIDs, S1AP_PDU};
    match a {
        MmeAction::S6a { ue, .. } | MmeAction::S11 { ue, .. } => Some(ue.mme_ue_s1ap_id),
        MmeAction::S1Send { data, .. } => {
            let pdu = S1AP_PDU::decode_borrowed(data).ok()?;
            if let Some(Ok(id)) = pdu.ie::<oxirush_s1ap::ie::MME_UE_S1AP_ID>() {
                return Some(id.0);
            }
            match pdu.ie::<oxirush_s1ap::ie::UE_S1AP_IDs>()?.ok()? {
                UES1APIDs::uE_S1AP_ID_pair(p) => Some(p.mme_ue_s1ap_id.0),
                UES1APIDs::mME_UE_S1AP_ID(m) => Some(m.0),
                _ => None,
            }
        }
        _ => None,
    }
}
