//! The MME core: sans-I/O. Events go in through [`Mme::handle`] with the
//! current time, actions come out of [`Mme::poll_action`], NAS timers are
//! deadlines that [`Mme::poll_timeout`] reports and [`Mme::handle_timeout`]
//! fires. Procedures live in their own modules as `impl Mme` blocks; this
//! file has the dispatch and the helpers they share.

use crate::config::{MmeConfig, NasTimerConfig};
use crate::context::*;
use crate::{routing, s1ap_build};
use bytes::Bytes;
use mobicore_common::alloc::IdDraw;
use mobicore_common::counters::Counters;
use mobicore_common::requester::TransportError;
use mobicore_common::s11::{
    DeleteSessionRequest, S11IncomingAnswer, S11IncomingRequest, S11Notification, S11Request, S11Response,
};
use mobicore_common::s6a::{S6aAnswer, S6aIncomingAnswer, S6aIncomingRequest, S6aRequest};
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ebi, Groups, Gummei, Guti, Imsi, MTmsi};
use mobicore_elastic::router::{imsi_group, replica_group};
use oxirush_nas::nas_eps::{Direction, NasEpsSecurityHeaderType};
use oxirush_s1ap::s1ap::{Cause, CauseNas};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

/// What the shell feeds the core.
#[derive(Debug)]
pub enum MmeEvent {
    /// An S1 association is up (an eNB connected from `peer`).
    S1Up { assoc: AssocId, peer: IpAddr, outbound_streams: u16 },
    /// An S1AP PDU arrived.
    S1Data { assoc: AssocId, stream: u16, data: Bytes },
    /// The association is gone.
    S1Down { assoc: AssocId },
    /// The answer (or the transport failure) of an S6a request.
    S6a { ue: UeRef, answer: Result<S6aAnswer, TransportError> },
    /// The response (or the transport failure) of an S11 request.
    S11 { ue: UeRef, response: Result<S11Response, TransportError> },
    /// A request from the S-GW (Downlink Data Notification); the shell
    /// keeps what it needs to answer and names it `txn`.
    S11Incoming { txn: u64, request: S11IncomingRequest },
    /// A request from the HSS (Cancel Location); the shell keeps its reply
    /// and names it `txn`.
    S6aIncoming { txn: u64, request: S6aIncomingRequest },
    /// A command of the operator (CLI, admin endpoint); answered by
    /// [`MmeAction::OperatorAnswer`] with the same `txn`.
    Operator { txn: u64, command: OperatorCommand },
}

/// What an operator may ask of the MME.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorCommand {
    /// Network-initiated detach of the UE with this IMSI (TS 24.301
    /// 5.5.2.3), re-attach required or not.
    Detach { imsi: Imsi, reattach_required: bool },
}

/// How an [`OperatorCommand`] was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorOutcome {
    /// The network detach started: DETACH REQUEST sent to the connected
    /// UE, or the idle UE paged first (`paged`).
    DetachStarted { paged: bool },
    /// The UE was still attaching: its attach ended.
    AttachAborted,
    /// A detach of the UE runs already (network DETACH REQUEST sent, or
    /// its PDN connections being deleted); nothing more is done.
    DetachInProgress,
    /// No UE context has this IMSI.
    UnknownImsi,
}

/// What the core asks the shell to do.
#[derive(Debug, Clone, PartialEq)]
pub enum MmeAction {
    /// Send an S1AP PDU (PPID 18) on a stream of an association.
    S1Send { assoc: AssocId, stream: u16, data: Bytes },
    /// ABORT an association (a peer that may not use S1-MME).
    S1Abort { assoc: AssocId },
    /// Send an S6a request; its answer comes back as [`MmeEvent::S6a`].
    S6a { ue: UeRef, request: S6aRequest },
    /// Send an S11 request; its response comes back as [`MmeEvent::S11`].
    S11 { ue: UeRef, request: S11Request },
    /// Answer the S-GW's request `txn` of [`MmeEvent::S11Incoming`].
    S11Answer { txn: u64, answer: S11IncomingAnswer },
    /// Answer the HSS's request `txn` of [`MmeEvent::S6aIncoming`].
    S6aAnswer { txn: u64, answer: S6aIncomingAnswer },
    /// Send an S11 message that has no response (sent once).
    S11Notify { notification: S11Notification },
    /// Answer the operator's command `txn` of [`MmeEvent::Operator`].
    OperatorAnswer { txn: u64, outcome: OperatorOutcome },
}

/// A table keyed by an identifier this MME drew (MME-UE-S1AP-ID, M-TMSI):
/// foldhash, seeded per process, is cheaper than SipHash, and no peer
/// chooses the keys. Tables keyed by what a peer sends (IMSI, eNB-UE-S1AP-ID)
/// keep SipHash.
pub(crate) type IdMap<V> = HashMap<u32, V, foldhash::fast::RandomState>;

/// Connections [`Mme::taken_over_initial`] remembers of UEs gone at their
/// takeover: far more than a dead host's unhandled messages.
const RESUMED_ENDED_MAX: usize = 1024;

/// The MME state machine.
pub struct Mme {
    pub(crate) cfg: MmeConfig,
    pub(crate) enbs: HashMap<AssocId, EnbContext>,
    /// Associations from peers that `enb_peers` does not allow, aborted and
    /// ignored until they are gone.
    pub(crate) refused: HashSet<AssocId>,
    /// Boxed: a context is 900-odd octets, and a table of them rehashed
    /// as it grows copied every one into fresh (zeroed) pages.
    pub(crate) ues: IdMap<Box<UeContext>>,
    pub(crate) by_enb_ue: HashMap<(AssocId, u32), u32>,
    pub(crate) by_mtmsi: IdMap<u32>,
    pub(crate) by_imsi: HashMap<Imsi, u32>,
    /// MME-UE-S1AP-IDs, which are also the MME's S11 TEIDs: drawn at
    /// random (never 0, the TEID no one may use), never one in use.
    ue_ids: IdDraw,
    next_generation: u64,
    mtmsi: IdDraw,
    /// The MME-UE-S1AP-ID and M-TMSI the next new UE and GUTI take, handed
    /// out by an elastic MME host's forwarder ([`Mme::pin_next_ids`]).
    pinned: (Option<u32>, Option<u32>),
    /// Host numbers besides `host_prefix` whose identifiers of some
    /// replica groups are this MME's own: the hosts whose UEs of those
    /// groups it took over ([`Mme::adopt_prefix`]).
    adopted_prefixes: HashMap<u8, Groups>,
    /// S6a requests sent whose answer has not come back (bounded by
    /// `max_s6a_in_flight`; every request yields one answer or error).
    s6a_in_flight: usize,
    /// S11 requests sent per UE whose answer (or transport error) has not
    /// come: such a UE is not at rest ([`Mme::ue_at_rest`]; a guard's
    /// request, say the forwarding tunnel's deletion, runs with no step).
    pub(crate) s11_awaited: IdMap<u16>,
    next_timer_seq: u64,
    /// UEs with a paging running (T3413): the MME's load for DDN
    /// throttling (paging.rs).
    pub(crate) paged: HashSet<u32>,
    /// M-TMSIs of UEs detached implicitly (TS 24.301 5.3.7), bounded.
    pub(crate) implicitly_detached: crate::idle::DetachedMemory,
    /// The S1 connections of taken-over UEs whose procedure their
    /// resumption ended (a detach), the newest [`RESUMED_ENDED_MAX`]: an
    /// INITIAL UE MESSAGE on one sent again is the dead host's
    /// ([`Mme::taken_over_initial`]).
    pub(crate) resumed_ended: std::collections::VecDeque<(AssocId, u32)>,
    pub(crate) timers: BinaryHeap<Reverse<(Instant, u32, u64)>>,
    pub(crate) actions: VecDeque<MmeAction>,
    pub(crate) counters: Counters,
    pub(crate) now: Instant,
    /// The UEs that events touched since [`Mme::take_changes`], kept only
    /// once [`Mme::track_changes`] asked for it (the store layer's journal;
    /// the monolithic MME keeps none).
    pub(crate) changes: Option<crate::transfer::Changes>,
}

impl Mme {
    pub fn new(cfg: MmeConfig) -> Self {
        let mtmsi = IdDraw::new(cfg.mtmsi_seed.map(u64::from));
        let ue_ids = IdDraw::new(cfg.mtmsi_seed.map(|s| u64::from(s) ^ 0x5eed_0001));
        Mme {
            cfg,
            enbs: HashMap::new(),
            refused: HashSet::new(),
            ues: IdMap::default(),
            by_enb_ue: HashMap::new(),
            by_mtmsi: IdMap::default(),
            by_imsi: HashMap::new(),
            ue_ids,
            next_generation: 1,
            mtmsi,
            pinned: (None, None),
            adopted_prefixes: HashMap::new(),
            s6a_in_flight: 0,
            s11_awaited: IdMap::default(),
            next_timer_seq: 1,
            paged: HashSet::new(),
            implicitly_detached: crate::idle::DetachedMemory::default(),
            resumed_ended: std::collections::VecDeque::new(),
            timers: BinaryHeap::new(),
            actions: VecDeque::new(),
            counters: Counters::new(),
            now: Instant::now(),
            changes: None,
        }
    }

    /// An MME counting in `counters` (shared with other cores: the cores of
    /// one decomposed MME in the harness count as one MME).
    pub fn with_counters(cfg: MmeConfig, counters: Counters) -> Self {
        Mme { counters, ..Mme::new(cfg) }
    }

    pub fn config(&self) -> &MmeConfig {
        &self.cfg
    }

    /// Generations from `next` on only (an imported context brought its own).
    pub(crate) fn set_next_generation(&mut self, next: u64) {
        self.next_generation = self.next_generation.max(next);
    }

    pub(crate) fn take_timer_seq(&mut self) -> u64 {
        self.next_timer_seq += 1;
        self.next_timer_seq - 1
    }

    /// A taken-over UE's S1 connection, whose procedure its resumption
    /// ended (see `resumed_ended`).
    pub(crate) fn note_resumed_ended(&mut self, s1: Option<S1Conn>) {
        let Some(s1) = s1 else { return };
        if self.resumed_ended.len() >= RESUMED_ENDED_MAX {
            self.resumed_ended.pop_front();
        }
        self.resumed_ended.push_back((s1.assoc, s1.enb_ue_s1ap_id));
    }

    /// Whether S1AP PDU `data` of `assoc`, an uplink an elastic MME host
    /// took before it died and the front end sends again to the host
    /// serving its UE now, is an INITIAL UE MESSAGE whose S1 connection a UE here holds: the dead
    /// host handled it and wrote the UE's record, which this host took
    /// over, so the UE's procedure goes on from there (the requests it was
    /// awaiting asked again, its NAS timers running). Handled again, it
    /// would start a second context for the connection (TS 36.413 8.6.2.1:
    /// a new S1 connection) and the two would collide in the store.
    pub fn taken_over_initial(&self, assoc: AssocId, data: &[u8]) -> bool {
        match crate::routing::uplink(assoc.0, data) {
            crate::routing::Uplink::Ue(mobicore_elastic::router::UeName::Initial { enb_ue_s1ap_id, .. }) => {
                let conn = (assoc, enb_ue_s1ap_id);
                self.by_enb_ue.get(&conn).is_some_and(|id| self.ues.contains_key(id))
                    || self.resumed_ended.contains(&conn)
            }
            _ => false,
        }
    }

    pub fn handle(&mut self, now: Instant, ev: MmeEvent) {
        self.now = now;
        match ev {
            MmeEvent::S1Up { assoc, peer, outbound_streams } => self.on_s1_up_from(assoc, peer, outbound_streams),
            MmeEvent::S1Data { assoc, stream, data } => self.on_s1_data(assoc, stream, &data),
            MmeEvent::S1Down { assoc } => self.on_s1_down(assoc),
            MmeEvent::S6a { ue, answer } => self.on_s6a(ue, answer),
            MmeEvent::S11 { ue, response } => self.on_s11(ue, response),
            MmeEvent::S11Incoming { txn, request } => self.on_s11_incoming(txn, request),
            MmeEvent::S6aIncoming { txn, request } => self.on_s6a_incoming(txn, request),
            MmeEvent::Operator { txn, command } => {
                let outcome = self.on_operator(command);
                self.push(MmeAction::OperatorAnswer { txn, outcome });
            }
        }
        self.prune_timers();
    }

    #[must_use]
    pub fn poll_action(&mut self) -> Option<MmeAction> {
        self.actions.pop_front()
    }

    /// The earliest NAS timer deadline.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        while let Some(&Reverse((deadline, id, seq))) = self.timers.peek() {
            if deadline > now {
                break;
            }
            self.timers.pop();
            // A stopped timer's entry changes nothing: the UE is not
            // touched (an elastic MME host would write its record, a
            // copy that another host may be serving meanwhile).
            if self.timer_is_live(id, seq) {
                tracing::debug!(id, "NAS timer expired");
                self.touch(id);
                self.on_nas_timer_expiry(id);
            } else if let Some(g) = self.take_guard_seq(id, seq) {
                tracing::debug!(id, kind = ?g.kind, "guard timer expired");
                self.touch(id);
                self.on_guard_expiry(id, g);
            }
        }
        self.prune_timers();
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn stats(&self) -> MmeStats {
        MmeStats {
            ues: self.ues.len(),
            enbs: self.enbs.values().filter(|e| e.setup).count(),
            attached: self.ues.values().filter(|u| u.emm == EmmState::Registered).count(),
        }
    }

    /// The UE's context, if `ue` still names it.
    pub(crate) fn live(&self, ue: UeRef) -> bool {
        self.ues.get(&ue.mme_ue_s1ap_id).is_some_and(|u| u.generation == ue.generation)
    }

    fn on_s6a(&mut self, ue: UeRef, answer: Result<S6aAnswer, TransportError>) {
        self.s6a_in_flight = self.s6a_in_flight.saturating_sub(1);
        if !self.live(ue) {
            self.counters.incr("s6a_stale_answer");
            return;
        }
        let id = ue.mme_ue_s1ap_id;
        self.touch(id);
        let step = self.ues[&id].step;
        match (step, answer) {
            (Step::AuthInfo, Ok(S6aAnswer::AuthenticationInformation(r))) => self.on_auth_info(id, r),
            (Step::UpdateLocation, Ok(S6aAnswer::UpdateLocation(r))) => self.on_update_location(id, r),
            (Step::AuthInfo | Step::UpdateLocation, Err(_)) => {
                // TS 24.301 5.5.1.2.5, TS 29.272 Annex A: no answer from the HSS.
                self.counters.incr("s6a_transport_error");
                self.reject_attach(id, oxirush_nas::nas_eps::EmmCause::NetworkFailure, None);
            }
            _ => self.counters.incr("s6a_unexpected_answer"),
        }
    }

    fn on_s11(&mut self, ue: UeRef, response: Result<S11Response, TransportError>) {
        if !self.live(ue) {
            self.counters.incr("s11_stale_response");
            return;
        }
        let id = ue.mme_ue_s1ap_id;
        self.touch(id);
        if let Some(n) = self.s11_awaited.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                self.s11_awaited.remove(&id);
            }
        }
        let step = self.ues[&id].step;
        if self.esm_awaits_s11(id, step, &response) {
            self.on_esm_s11(id, response);
            return;
        }
        match (step, response) {
            (Step::CreateSession, Ok(S11Response::CreateSession(r))) => self.on_create_session(id, r),
            (Step::CreateSession, Err(_)) => {
                self.counters.incr("s11_transport_error");
                self.reject_attach(id, oxirush_nas::nas_eps::EmmCause::NetworkFailure, None);
            }
            (Step::Handover, r) => self.on_handover_s11(id, r),
            (_, r @ Ok(S11Response::CreateIndirectForwarding(_) | S11Response::DeleteIndirectForwarding(_))) => {
                self.on_handover_s11(id, r)
            }
            (_, Ok(S11Response::ModifyBearer(r))) => self.on_modify_bearer(id, r),
            (Step::DetachDeleteSession { switch_off, pending }, r) => {
                if !matches!(r, Ok(S11Response::DeleteSession(c)) if c.is_accepted()) {
                    self.counters.incr("s11_delete_session_failed");
                }
                self.on_detach_delete_session(id, switch_off, pending);
            }
            (Step::ReleaseAccessBearers, r) => {
                if !matches!(r, Ok(S11Response::ReleaseAccessBearers(c)) if c.is_accepted()) {
                    self.counters.incr("s11_release_access_bearers_failed");
                }
                self.finish_s1_release(id);
            }
            // Answers to requests sent without waiting (S1 loss, aborts).
            (_, Ok(S11Response::ReleaseAccessBearers(_) | S11Response::DeleteSession(_))) => {}
            (_, Err(_)) => self.counters.incr("s11_transport_error"),
            _ => self.counters.incr("s11_unexpected_response"),
        }
    }

    // ---- helpers shared by the procedures ----

    pub(crate) fn push(&mut self, action: MmeAction) {
        self.actions.push_back(action);
    }

    pub(crate) fn push_s1(&mut self, assoc: AssocId, stream: u16, data: Option<Vec<u8>>) {
        match data {
            Some(d) => self.push(MmeAction::S1Send { assoc, stream, data: Bytes::from(d) }),
            None => self.counters.incr("s1ap_encode_error"),
        }
    }

    pub(crate) fn request_s6a(&mut self, id: u32, request: S6aRequest) {
        self.touch(id);
        if let Some(ue) = self.ues.get(&id) {
            let ue = ue.ue_ref();
            self.s6a_in_flight += 1;
            self.push(MmeAction::S6a { ue, request });
        }
    }

    /// Whether one more S6a request may go out; if not, the attach of `id`
    /// is rejected with #22 congestion (TS 24.301 5.5.1.2.5) and `false`.
    pub(crate) fn s6a_room(&mut self, id: u32) -> bool {
        if self.s6a_in_flight < self.cfg.max_s6a_in_flight {
            return true;
        }
        self.counters.incr("s6a_in_flight_limit");
        self.reject_attach(id, oxirush_nas::nas_eps::EmmCause::Congestion, None);
        false
    }

    pub(crate) fn request_s11(&mut self, id: u32, request: S11Request) {
        self.touch(id);
        if let Some(ue) = self.ues.get(&id) {
            let ue = ue.ue_ref();
            *self.s11_awaited.entry(id).or_default() += 1;
            self.push(MmeAction::S11 { ue, request });
        }
    }

    /// A fresh UE context on an S1 connection; returns its MME-UE-S1AP-ID.
    pub(crate) fn new_ue(&mut self, s1: S1Conn, group: u8) -> u32 {
        let ues = &self.ues;
        // `max_ues` keeps the table far from full: a draw always succeeds.
        let range = self.id_range(1..=u32::MAX, group);
        let id = match self.pinned.0.take().filter(|id| !ues.contains_key(id)) {
            Some(id) => id,
            None => self.ue_ids.draw_u32(range, |id| ues.contains_key(&id)).unwrap_or(u32::MAX),
        };
        let generation = self.next_generation;
        self.next_generation += 1;
        self.ues.insert(id, Box::new(UeContext::new(id, generation, s1)));
        self.touch(id);
        match self.by_enb_ue.insert((s1.assoc, s1.enb_ue_s1ap_id), id) {
            // The eNB reused its UE id: the old S1 connection is gone.
            Some(old) => {
                if let Some(u) = self.ues.get_mut(&old) {
                    u.s1 = None;
                }
            }
            None => {
                if let Some(e) = self.enbs.get_mut(&s1.assoc) {
                    e.s1_ues += 1;
                }
            }
        }
        id
    }

    /// Forget the S1 connection `s1` of UE `id` in the eNB's table, if it
    /// is still the UE's.
    pub(crate) fn unlink_s1(&mut self, id: u32, s1: S1Conn) {
        self.touch(id);
        if self.by_enb_ue.get(&(s1.assoc, s1.enb_ue_s1ap_id)) == Some(&id) {
            self.by_enb_ue.remove(&(s1.assoc, s1.enb_ue_s1ap_id));
            if let Some(e) = self.enbs.get_mut(&s1.assoc) {
                e.s1_ues = e.s1_ues.saturating_sub(1);
            }
        }
    }

    /// A GUTI with an M-TMSI unique in this MME (TS 23.003 2.8), drawn at
    /// random so that it says nothing of the GUTIs handed out before it
    /// (TS 33.401 6.2: the GUTI is a temporary identity). `max_ues` keeps
    /// the table far from full, so a draw always finds a free value.
    pub(crate) fn alloc_guti(&mut self, id: u32) -> Guti {
        let range = self.id_range(0..=u32::MAX - 1, self.ue_group(id));
        let by_mtmsi = &self.by_mtmsi;
        let m = match self.pinned.1.take().filter(|m| !by_mtmsi.contains_key(m)) {
            Some(m) => m,
            None => self.mtmsi.draw_u32(range, |m| by_mtmsi.contains_key(&m)).unwrap_or(0),
        };
        self.by_mtmsi.insert(m, id);
        self.implicitly_detached.remove(m);
        Guti { gummei: self.gummei(), m_tmsi: MTmsi(m) }
    }

    /// The next new UE context takes MME-UE-S1AP-ID `ue_id` and the next
    /// GUTI M-TMSI `m_tmsi` (each if not in use here), not random draws:
    /// an NF instance of an elastic MME host holds no UEs between events,
    /// so its forwarder, which holds them all, hands these out
    /// ([`Mme::draw_free_ids`]). Both are forgotten at the next pin.
    pub fn pin_next_ids(&mut self, ue_id: u32, m_tmsi: u32) {
        self.pinned = (Some(ue_id), Some(m_tmsi));
    }

    /// An MME-UE-S1AP-ID and an M-TMSI under this host's prefix and
    /// replica group `group` ([`Mme::group_for`]) that no UE here has and
    /// `taken` does not name (the forwarder's ids handed out to events
    /// still at an instance), for [`Mme::pin_next_ids`].
    pub fn draw_free_ids(&mut self, group: u8, taken: impl Fn(u32) -> bool) -> (u32, u32) {
        let (ues, by_mtmsi) = (&self.ues, &self.by_mtmsi);
        let id = self
            .ue_ids
            .draw_u32(self.id_range(1..=u32::MAX, group), |id| ues.contains_key(&id) || taken(id))
            .unwrap_or(u32::MAX);
        let m = self
            .mtmsi
            .draw_u32(self.id_range(0..=u32::MAX - 1, group), |m| by_mtmsi.contains_key(&m) || taken(m))
            .unwrap_or(0);
        (id, m)
    }

    /// The identifiers of host `prefix` in replica groups `groups` are
    /// this MME's own from now on (an elastic MME host that took those
    /// UEs of that host over).
    pub fn adopt_prefix(&mut self, prefix: u8, groups: Groups) {
        let all = self.adopted_prefixes.entry(prefix).or_default();
        for g in groups.iter() {
            all.insert(g);
        }
    }

    /// Whether this MME allocated identifier `m` (an M-TMSI or an
    /// MME-UE-S1AP-ID), or the host whose UEs of its group it took over
    /// did. Not so: a UE another elastic MME host placed here for one
    /// procedure (a visitor), which keeps its GUTI (see `tau`).
    pub fn owns_identifier(&self, m: u32) -> bool {
        let p = (m >> 24) as u8;
        self.cfg
            .host_prefix
            .is_none_or(|own| own == p || self.adopted_prefixes.get(&p).is_some_and(|g| g.contains(replica_group(m))))
    }

    /// The replica group of UE `id`'s identifiers (see
    /// [`mobicore_common::Groups`]): its IMSI's, or, before it is known
    /// (an attach by a GUTI of another MME), its MME-UE-S1AP-ID's.
    pub(crate) fn ue_group(&self, id: u32) -> u8 {
        match self.ues.get(&id).and_then(|u| u.imsi.as_ref()) {
            Some(imsi) => imsi_group(imsi.as_str()),
            None => replica_group(id),
        }
    }

    /// The GUMMEI as a GUTI carries it in NAS, for [`routing::initial_group`].
    pub(crate) fn own_gummei(&self) -> routing::OwnGummei {
        (self.cfg.plmn.to_octets(), self.cfg.mme_group_id, self.cfg.mme_code)
    }

    /// The replica group of the identifiers an event may allocate: the
    /// group of its UE `ue` if this MME holds it, else of the INITIAL UE
    /// MESSAGE `s1` if it is one ([`routing::initial_ue_group`]); else 0.
    pub fn group_for(&self, ue: Option<u32>, s1: Option<&[u8]>) -> u8 {
        match ue.filter(|id| self.ues.contains_key(id)) {
            Some(id) => self.ue_group(id),
            None => s1.and_then(|d| routing::initial_ue_group(d, self.own_gummei())).unwrap_or(0),
        }
    }

    /// `whole`, or the part of it under this host's prefix
    /// ([`MmeConfig::host_prefix`]) and replica group `group`.
    fn id_range(&self, whole: std::ops::RangeInclusive<u32>, group: u8) -> std::ops::RangeInclusive<u32> {
        match self.cfg.host_prefix {
            Some(p) => {
                let base = u32::from(p) << 24 | u32::from(group) << 16;
                base.max(*whole.start())..=(base | 0xffff).min(*whole.end())
            }
            None => whole,
        }
    }

    pub(crate) fn gummei(&self) -> Gummei {
        Gummei { plmn: self.cfg.plmn, mme_group_id: self.cfg.mme_group_id, mme_code: self.cfg.mme_code }
    }

    /// The header a downlink message goes under in the UE's current state.
    pub(crate) fn dl_header(&self, id: u32) -> NasEpsSecurityHeaderType {
        match self.ues.get(&id).is_some_and(|u| u.security_active()) {
            true => NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered,
            false => NasEpsSecurityHeaderType::PlainNasMessageNotSecurityProtected,
        }
    }

    /// Protect `plain` under `header` with the UE's NAS security context.
    pub(crate) fn protect_dl(&mut self, id: u32, plain: &[u8], header: NasEpsSecurityHeaderType) -> Option<Vec<u8>> {
        if header == NasEpsSecurityHeaderType::PlainNasMessageNotSecurityProtected {
            return Some(plain.to_vec());
        }
        let sec = self.ues.get_mut(&id)?.security.as_mut()?;
        match sec.ctx.protect_bytes(plain.to_vec(), header, Direction::Downlink) {
            Ok(p) => Some(p),
            Err(_) => {
                self.counters.incr("nas_protect_error");
                None
            }
        }
    }

    /// Send a NAS message in a DOWNLINK NAS TRANSPORT (TS 36.413 8.6.2.1).
    pub(crate) fn send_dl_nas(&mut self, id: u32, plain: &[u8], header: NasEpsSecurityHeaderType) {
        self.touch(id);
        let Some(s1) = self.ues.get(&id).and_then(|u| u.s1) else {
            return;
        };
        let Some(pdu) = self.protect_dl(id, plain, header) else {
            return;
        };
        let data = s1ap_build::downlink_nas_transport(id, s1.enb_ue_s1ap_id, pdu);
        self.push_s1(s1.assoc, s1.stream, data);
    }

    /// Send a NAS message and start the timer that retransmits it.
    pub(crate) fn send_dl_nas_timed(
        &mut self,
        id: u32,
        kind: NasTimerKind,
        plain: Vec<u8>,
        header: NasEpsSecurityHeaderType,
    ) {
        self.send_dl_nas(id, &plain, header);
        self.start_timer(id, kind, Bytes::from(plain), header);
    }

    fn timer_config(&self, kind: NasTimerKind) -> NasTimerConfig {
        match kind {
            NasTimerKind::T3450 => self.cfg.t3450,
            NasTimerKind::T3460 => self.cfg.t3460,
            NasTimerKind::T3470 => self.cfg.t3470,
            NasTimerKind::T3489 => self.cfg.t3489,
            NasTimerKind::T3485 => self.cfg.t3485,
            NasTimerKind::T3495 => self.cfg.t3495,
            NasTimerKind::T3422 => self.cfg.t3422,
        }
    }

    pub(crate) fn start_timer(
        &mut self,
        id: u32,
        kind: NasTimerKind,
        message: Bytes,
        header: NasEpsSecurityHeaderType,
    ) {
        self.arm_timer(id, NasTimer { kind, seq: 0, deadline: self.now, expiries: 0, message, header });
    }

    fn arm_timer(&mut self, id: u32, mut timer: NasTimer) {
        self.touch(id);
        let seq = self.next_timer_seq;
        self.next_timer_seq += 1;
        timer.seq = seq;
        timer.deadline = self.now + self.timer_config(timer.kind).period();
        let deadline = timer.deadline;
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.timer = Some(timer);
            self.timers.push(Reverse((deadline, id, seq)));
        }
    }

    pub(crate) fn stop_timer(&mut self, id: u32) {
        self.touch(id);
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.timer = None;
        }
    }

    fn timer_is_live(&self, id: u32, seq: u64) -> bool {
        self.ues.get(&id).and_then(|u| u.timer.as_ref()).is_some_and(|t| t.seq == seq)
    }

    /// Start (or restart) the UE's guard timer `kind`, to fire `after` from
    /// now with `count` as its firing count so far.
    pub(crate) fn start_guard(&mut self, id: u32, kind: GuardKind, after: std::time::Duration, count: u8) {
        self.touch(id);
        let seq = self.next_timer_seq;
        let deadline = self.now + after;
        let Some(ue) = self.ues.get_mut(&id) else { return };
        self.next_timer_seq += 1;
        ue.guards.retain(|g| g.kind != kind);
        ue.guards.push(GuardTimer { kind, seq, deadline, count });
        self.timers.push(Reverse((deadline, id, seq)));
    }

    pub(crate) fn stop_guard(&mut self, id: u32, kind: GuardKind) {
        self.touch(id);
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.guards.retain(|g| g.kind != kind);
        }
    }

    fn guard_is_live(&self, id: u32, seq: u64) -> bool {
        self.ues.get(&id).is_some_and(|u| u.guards.iter().any(|g| g.seq == seq))
    }

    /// The guard timer `seq` of UE `id`, removed, if it still runs.
    fn take_guard_seq(&mut self, id: u32, seq: u64) -> Option<GuardTimer> {
        let ue = self.ues.get_mut(&id)?;
        let i = ue.guards.iter().position(|g| g.seq == seq)?;
        Some(ue.guards.swap_remove(i))
    }

    /// A guard timer fired; each kind belongs to its procedure's module.
    fn on_guard_expiry(&mut self, id: u32, g: GuardTimer) {
        match g.kind {
            GuardKind::MobileReachable => self.on_mobile_reachable_expiry(id),
            GuardKind::ImplicitDetach => self.on_implicit_detach_expiry(id),
            GuardKind::T3413 => self.on_t3413_expiry(id, g.count),
            GuardKind::TS1RelocPrep => self.on_reloc_prep_expiry(id),
            GuardKind::TS1RelocOverall => self.on_reloc_overall_expiry(id),
            GuardKind::IndirectForwarding => self.on_indirect_forwarding_expiry(id),
        }
    }

    /// Drop stale heap heads so that `poll_timeout` is exact.
    fn prune_timers(&mut self) {
        while let Some(&Reverse((_, id, seq))) = self.timers.peek() {
            if self.timer_is_live(id, seq) || self.guard_is_live(id, seq) {
                break;
            }
            self.timers.pop();
        }
    }

    /// TS 24.301 5.4.2.7 (T3460), 5.4.3.7 (T3460), 5.4.4.6 (T3470),
    /// 5.5.1.2.7 (T3450), 6.4.1.6 (T3485), 6.4.4.6 (T3495): retransmit;
    /// abort on the fifth expiry (the third for T3489, 6.6.1.2.6).
    fn on_nas_timer_expiry(&mut self, id: u32) {
        let Some(timer) = self.ues.get_mut(&id).and_then(|u| u.timer.take()) else {
            return;
        };
        if timer.expiries >= self.timer_config(timer.kind).max_retransmissions {
            self.counters.incr(match timer.kind {
                NasTimerKind::T3450 => "t3450_abort",
                NasTimerKind::T3460 => "t3460_abort",
                NasTimerKind::T3470 => "t3470_abort",
                NasTimerKind::T3489 => "t3489_abort",
                NasTimerKind::T3485 => "t3485_abort",
                NasTimerKind::T3495 => "t3495_abort",
                NasTimerKind::T3422 => "t3422_abort",
            });
            let step = self.ues.get(&id).map(|u| u.step);
            if let (NasTimerKind::T3450, Some(Step::TauAccept { old_mtmsi, .. })) = (timer.kind, step) {
                self.on_tau_accept_abort(id, old_mtmsi);
                return;
            }
            match timer.kind {
                NasTimerKind::T3489 => self.on_t3489_abort(id),
                NasTimerKind::T3485 | NasTimerKind::T3495 => self.on_esm_timer_abort(id),
                _ => self.abort_ue(id, CauseNas::unspecified),
            }
            return;
        }
        self.counters.incr("nas_retransmission");
        self.send_dl_nas(id, &timer.message.clone(), timer.header);
        let next = NasTimer { expiries: timer.expiries + 1, ..timer };
        self.arm_timer(id, next);
    }

    /// A KeNB for an Initial Context Setup (TS 33.401 A.3: from KASME and
    /// the uplink NAS COUNT of the latest verified message); it restarts
    /// the NH chain with NCC 0 (7.2.8.4.1).
    pub(crate) fn fresh_kenb(&mut self, id: u32) -> Option<[u8; 32]> {
        let sec = self.ues.get_mut(&id)?.security.as_mut()?;
        let count =
            oxirush_nas::nas_eps::NasCount::new(sec.last_ul_count).unwrap_or(oxirush_nas::nas_eps::NasCount::ZERO);
        let kenb = *oxirush_security::nas_eps::derive_kenb(&sec.kasme, count).as_octets();
        sec.nh = kenb;
        sec.ncc = 0;
        Some(kenb)
    }

    /// The next {NCC, NH} pair for a handover (TS 33.401 7.2.8.4.2-3, A.4:
    /// NH from KASME and the NH (or KeNB) before it; NCC counts modulo 8).
    pub(crate) fn next_nh(&mut self, id: u32) -> Option<(u8, [u8; 32])> {
        let sec = self.ues.get_mut(&id)?.security.as_mut()?;
        let prev = oxirush_security::nas_eps::Nh::new(&sec.nh);
        sec.nh = *oxirush_security::nas_eps::derive_nh(&sec.kasme, &prev).as_octets();
        sec.ncc = (sec.ncc + 1) % 8;
        Some((sec.ncc, sec.nh))
    }

    /// Send UE CONTEXT RELEASE COMMAND (TS 36.413 8.3.3) if the UE has an S1
    /// connection, and forget the connection.
    pub(crate) fn release_s1(&mut self, id: u32, cause: Cause) {
        self.touch(id);
        let Some(s1) = self.ues.get_mut(&id).and_then(|u| u.s1.take()) else {
            return;
        };
        self.unlink_s1(id, s1);
        let Some(command) = s1ap_build::ue_context_release_command(id, s1.enb_ue_s1ap_id, cause).map(Bytes::from)
        else {
            self.counters.incr("s1ap_encode_error");
            return;
        };
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.releasing = Some(Releasing { s1, command: command.clone() });
        }
        self.push(MmeAction::S1Send { assoc: s1.assoc, stream: s1.stream, data: command });
    }

    /// Forget a UE entirely: its S1 connection, its GUTI, its context.
    pub(crate) fn remove_ue(&mut self, id: u32) {
        self.drop_handover(id);
        if let Some(ue) = self.forget_ue(id) {
            if let Some(c) = &mut self.changes {
                c.removed.push(crate::transfer::Removed::of(&ue));
            }
        }
    }

    /// Take the UE's context out of this MME with its indexes, sending
    /// nothing (a handover target it still links is unlinked silently).
    pub(crate) fn forget_ue(&mut self, id: u32) -> Option<UeContext> {
        self.paged.remove(&id);
        self.s11_awaited.remove(&id);
        let ue = *self.ues.remove(&id)?;
        if let Some(c) = &mut self.changes {
            c.touched.remove(&id);
        }
        for s1 in ue.s1.into_iter().chain(ue.handover.as_ref().and_then(|h| h.target)) {
            if self.by_enb_ue.get(&(s1.assoc, s1.enb_ue_s1ap_id)) == Some(&id) {
                self.by_enb_ue.remove(&(s1.assoc, s1.enb_ue_s1ap_id));
                if let Some(e) = self.enbs.get_mut(&s1.assoc) {
                    e.s1_ues = e.s1_ues.saturating_sub(1);
                }
            }
        }
        if let Some(i) = ue.imsi.as_ref() {
            if self.by_imsi.get(i) == Some(&id) {
                self.by_imsi.remove(i);
            }
        }
        for m in ue.guti.map(|g| g.m_tmsi.0).into_iter().chain(ue.old_mtmsi) {
            if self.by_mtmsi.get(&m) == Some(&id) {
                self.by_mtmsi.remove(&m);
            }
        }
        if let Step::TauAccept { old_mtmsi: Some(m), .. } = ue.step {
            if self.by_mtmsi.get(&m) == Some(&id) {
                self.by_mtmsi.remove(&m);
            }
        }
        Some(ue)
    }

    /// Delete the UE's PDN connections at the S-GW, if it has any, without
    /// waiting for the answers.
    pub(crate) fn delete_session_detached(&mut self, id: u32) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        ue.esm = None;
        for s in std::mem::take(&mut ue.sessions) {
            let req = DeleteSessionRequest { sgw_teid: s.sgw_s11.teid, linked_ebi: Ebi(s.ebi) };
            self.request_s11(id, S11Request::DeleteSession(req));
        }
    }

    /// Abort whatever the UE is doing: delete its session, release its S1
    /// connection and forget it.
    pub(crate) fn abort_ue(&mut self, id: u32, cause: CauseNas) {
        self.delete_session_detached(id);
        self.release_s1(id, Cause::nas(cause));
        self.remove_ue(id);
    }
}
