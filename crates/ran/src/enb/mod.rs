//! The emulated eNB: S1AP per TS 36.413 without I/O, owning its UEs.
//!
//! Input: [`Enb::handle_s1ap`] (a PDU from the MME), [`Enb::start_s1_setup`],
//! [`Enb::start_attach`], [`Enb::start_detach`], [`Enb::handle_timeout`];
//! output: [`EnbAction`]s from [`Enb::poll_action`] and the next deadline
//! from [`Enb::poll_timeout`].
//!
//! - [`context`]: configuration, S1 state, per-UE context, actions.
//! - [`s1ap_build`]: the messages the eNB sends.
//! - [`s1ap_handler`]: decoding what the MME sends into [`s1ap_handler::Downlink`].
//! - `erab`: E-RAB setup and release of PDN connections after attach.

pub mod context;
mod erab;
pub mod handover;
pub mod idle;
pub mod s1ap_build;
pub mod s1ap_handler;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Instant;

use oxirush_s1ap::s1ap::{Cause, CauseProtocol, CauseRadioNetwork};

pub use context::{EnbAction, EnbConfig, EnbError, Erab, Outcome, S1Connection, S1State, UeContext};
pub use idle::{reselect, reselect_among, Reselection};
use s1ap_build::CellIdentity;
use s1ap_handler::{Downlink, IcsRequest, S1apError};

use crate::ue::{Ue, UeAction};

/// eNB-UE-S1AP-IDs are 24 bits (TS 36.413 9.2.3.4).
pub const ENB_UE_ID_SPACE: u32 = 1 << 24;

pub struct Enb {
    cfg: EnbConfig,
    cell: CellIdentity,
    s1: S1State,
    outbound_streams: u16,
    /// Boxed: a UE's context is large, and a table of them rehashed as
    /// it grows copied every one into fresh (zeroed) pages.
    ues: HashMap<u64, Box<UeContext>>,
    by_enb_ue_id: HashMap<u32, u64>,
    /// Connections a UE left that the MME has not released yet:
    /// eNB-UE-S1AP-ID to MME-UE-S1AP-ID and stream.
    stale: HashMap<u32, (u32, u16)>,
    next_enb_ue_id: u32,
    next_teid: u32,
    timers: BinaryHeap<Reverse<(Instant, u64, u64)>>,
    generation: u64,
    actions: VecDeque<EnbAction>,
    /// Handovers in progress and forwarding states (handover.rs).
    ho: handover::Handovers,
    /// Idle-mode deadlines and the paging index (idle.rs).
    idle: idle::IdleTimers,
    /// An S1 RESET sent and not yet acknowledged; and how many were.
    reset_pending: bool,
    resets_acknowledged: u32,
}

impl Enb {
    pub fn new(cfg: EnbConfig) -> Result<Self, EnbError> {
        let cell = CellIdentity::new(cfg.plmn, cfg.enb_id, cfg.tac).map_err(|e| EnbError::Identity(e.to_string()))?;
        Ok(Enb {
            cfg,
            cell,
            s1: S1State::Down,
            outbound_streams: 1,
            ues: HashMap::new(),
            by_enb_ue_id: HashMap::new(),
            stale: HashMap::new(),
            next_enb_ue_id: 1,
            next_teid: 1,
            timers: BinaryHeap::new(),
            generation: 0,
            actions: VecDeque::new(),
            ho: handover::Handovers::default(),
            idle: idle::IdleTimers::default(),
            reset_pending: false,
            resets_acknowledged: 0,
        })
    }

    pub fn config(&self) -> &EnbConfig {
        &self.cfg
    }
    pub fn s1_state(&self) -> &S1State {
        &self.s1
    }
    pub fn is_ready(&self) -> bool {
        matches!(self.s1, S1State::Ready { .. })
    }
    pub fn ue(&self, index: u64) -> Option<&UeContext> {
        self.ues.get(&index).map(|c| &**c)
    }
    pub fn ues(&self) -> impl Iterator<Item = (u64, &UeContext)> {
        self.ues.iter().map(|(i, c)| (*i, &**c))
    }

    #[must_use]
    pub fn poll_action(&mut self) -> Option<EnbAction> {
        self.actions.pop_front()
    }

    /// The earliest deadline the eNB wants to be woken at.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let s1 = match self.s1 {
            S1State::SetupPending { deadline } => Some(deadline),
            _ => None,
        };
        let ue = self.timers.peek().map(|Reverse((t, _, _))| *t);
        let ue = match (ue, self.ho.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let ue = match (ue, self.idle.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match (s1, ue) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The association is up: send S1 SETUP REQUEST (TS 36.413 8.7.3.2).
    pub fn start_s1_setup(&mut self, now: Instant, outbound_streams: u16) {
        self.outbound_streams = outbound_streams.max(1);
        match s1ap_build::s1_setup_request(&self.cell, &self.cfg.name) {
            Ok(pdu) => {
                self.actions.push_back(EnbAction::Send { stream: 0, pdu });
                self.s1 = S1State::SetupPending { deadline: now + self.cfg.s1_setup_timeout };
            }
            Err(e) => self.s1_failed(format!("cannot build S1 SETUP REQUEST: {e}")),
        }
    }

    fn s1_failed(&mut self, reason: String) {
        self.s1 = S1State::Failed(reason.clone());
        self.actions.push_back(EnbAction::S1Setup(Err(reason)));
    }

    /// Put a UE in this eNB's cell.
    pub fn add_ue(&mut self, index: u64, ue: Ue) {
        self.ues.insert(index, Box::new(UeContext::new(ue)));
        self.settle_ue(index);
    }

    /// Attach UE `index` (added before with [`Enb::add_ue`]).
    pub fn start_attach(&mut self, now: Instant, index: u64) -> Result<(), EnbError> {
        if !self.is_ready() {
            return Err(EnbError::NotReady);
        }
        let ctx = self.ues.get_mut(&index).ok_or(EnbError::UnknownUe(index))?;
        ctx.ue.start_attach(now)?;
        ctx.erabs.clear();
        ctx.kenb = None;
        // An attach opens a new NAS signalling connection.
        self.retire_connection(index);
        self.begin_procedure(now, index);
        Ok(())
    }

    /// Detach UE `index`, on its S1 connection if it has one, else as an
    /// initial NAS message on a new one.
    pub fn start_detach(&mut self, now: Instant, index: u64, switch_off: bool) -> Result<(), EnbError> {
        if !self.is_ready() {
            return Err(EnbError::NotReady);
        }
        let ctx = self.ues.get_mut(&index).ok_or(EnbError::UnknownUe(index))?;
        let connected = ctx.s1.is_some_and(|s| s.mme_ue_id.is_some() && !s.release_requested);
        ctx.ue.start_detach(now, switch_off, connected)?;
        self.begin_procedure(now, index);
        Ok(())
    }

    fn begin_procedure(&mut self, now: Instant, index: u64) {
        self.generation += 1;
        let deadline = now + self.cfg.procedure_timeout;
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.deadline = Some((deadline, self.generation));
            self.timers.push(Reverse((deadline, index, self.generation)));
        }
        self.drive(index);
    }

    /// Give every action the UE queued to the S1 side.
    fn drive(&mut self, index: u64) {
        loop {
            let Some(ctx) = self.ues.get_mut(&index) else { return };
            let Some(action) = ctx.ue.poll_action() else { return self.reindex(index) };
            match action {
                UeAction::Uplink(nas) => self.send_uplink(index, nas),
                UeAction::Finished(o) => {
                    ctx.deadline = None;
                    let latency = o.finished.saturating_duration_since(o.started);
                    let outcome = Outcome { ue: index, procedure: o.procedure, latency, result: o.result };
                    self.actions.push_back(EnbAction::Outcome(outcome));
                }
                UeAction::Anomaly(a) => self.actions.push_back(EnbAction::Anomaly(a)),
            }
        }
    }

    /// An uplink NAS PDU: INITIAL UE MESSAGE on a new S1 connection, else
    /// UPLINK NAS TRANSPORT.
    fn send_uplink(&mut self, index: u64, nas: Vec<u8>) {
        let existing = self.ues.get(&index).and_then(|c| c.s1).filter(|s| !s.release_requested);
        let conn = match existing {
            Some(s) => s,
            None => {
                let Some(s) = self.new_connection(index) else { return };
                s
            }
        };
        let built = match conn.mme_ue_id {
            None => self.initial_ue_message_of(index, conn.enb_ue_id, nas),
            Some(mme) => s1ap_build::uplink_nas_transport(&self.cell, mme, conn.enb_ue_id, nas),
        };
        self.push_pdu(conn.stream, built);
    }

    fn push_pdu(&mut self, stream: u16, built: Result<Vec<u8>, oxirush_s1ap::Error>) {
        match built {
            Ok(pdu) => self.actions.push_back(EnbAction::Send { stream, pdu }),
            Err(e) => self.actions.push_back(EnbAction::Anomaly(format!("S1AP encoding failed: {e}"))),
        }
    }

    /// Allocate an eNB-UE-S1AP-ID and a stream for a new connection.
    fn new_connection(&mut self, index: u64) -> Option<S1Connection> {
        let (id, stream) = self.allocate_enb_ue_id()?;
        let conn = S1Connection { enb_ue_id: id, mme_ue_id: None, stream, release_requested: false };
        self.retire_connection(index);
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.s1 = Some(conn);
            ctx.ue.connection_established();
        }
        self.by_enb_ue_id.insert(id, index);
        Some(conn)
    }

    /// An unused eNB-UE-S1AP-ID and its stream.
    fn allocate_enb_ue_id(&mut self) -> Option<(u32, u16)> {
        if (self.by_enb_ue_id.len() + self.stale.len() + self.ho.len()) as u32 >= ENB_UE_ID_SPACE - 1 {
            self.actions.push_back(EnbAction::Anomaly("eNB-UE-S1AP-IDs exhausted".into()));
            return None;
        }
        let mut id = self.next_enb_ue_id;
        while self.by_enb_ue_id.contains_key(&id) || self.stale.contains_key(&id) || self.ho.holds(id) {
            id = (id + 1) % ENB_UE_ID_SPACE;
        }
        self.next_enb_ue_id = (id + 1) % ENB_UE_ID_SPACE;
        // UE-associated signalling on a non-zero stream where there is one
        // (TS 36.412 7).
        let stream = if self.outbound_streams > 1 { 1 + (id % (self.outbound_streams as u32 - 1)) as u16 } else { 0 };
        Some((id, stream))
    }

    /// Leave a UE's connection for a new one: one the MME knows stays
    /// until the MME releases it, apart from the UE.
    fn retire_connection(&mut self, index: u64) {
        let Some(old) = self.ues.get_mut(&index).and_then(|c| c.s1.take()) else { return };
        self.by_enb_ue_id.remove(&old.enb_ue_id);
        if let Some(mme) = old.mme_ue_id {
            self.stale.insert(old.enb_ue_id, (mme, old.stream));
        }
    }

    fn drop_connection(&mut self, index: u64) {
        if let Some(ctx) = self.ues.get_mut(&index) {
            if let Some(old) = ctx.s1.take() {
                self.by_enb_ue_id.remove(&old.enb_ue_id);
            }
        }
    }

    /// Guard timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let S1State::SetupPending { deadline } = self.s1 {
            if deadline <= now {
                self.s1_failed("S1 SETUP RESPONSE not received in time".into());
            }
        }
        while let Some(Reverse((deadline, index, generation))) = self.timers.peek().copied() {
            if deadline > now {
                break;
            }
            self.timers.pop();
            let Some(ctx) = self.ues.get_mut(&index) else { continue };
            if ctx.deadline != Some((deadline, generation)) {
                continue;
            }
            ctx.deadline = None;
            ctx.ue.abort(now, "timeout");
            self.release_after_failure(index);
            self.drive(index);
        }
        self.handover_timeout(now);
        self.idle_timeout(now);
    }

    /// After a procedure the eNB gave up on: ask the MME to release the
    /// UE's context (TS 36.413 8.3.2), or forget a connection it never saw.
    fn release_after_failure(&mut self, index: u64) {
        self.request_release(index, CauseRadioNetwork::release_due_to_eutran_generated_reason);
    }

    /// The eNB lost every UE-associated logical S1-connection (a restart of
    /// its UE part): each UE with one is released to ECM-IDLE here, its
    /// procedure in progress failed, and RESET of the whole interface asks
    /// the MME to release them too (TS 36.413 8.7.1.2.2; TS 23.401 5.3.5:
    /// the UEs stay registered, downlink data pages them). Returns how many
    /// connections were dropped.
    pub fn reset_s1(&mut self, now: Instant) -> Result<usize, EnbError> {
        if !self.is_ready() {
            return Err(EnbError::NotReady);
        }
        let connected: Vec<u64> = self.ues.iter().filter(|(_, c)| c.s1.is_some()).map(|(i, _)| *i).collect();
        for &index in &connected {
            self.drop_connection(index);
            if let Some(ctx) = self.ues.get_mut(&index) {
                ctx.deadline = None;
                ctx.ue.abort(now, "S1 reset");
                ctx.ue.connection_released(now);
            }
            self.drive(index);
            self.released_to_idle(now, index);
        }
        self.stale.clear();
        self.reset_pending = true;
        let built = s1ap_build::reset_all(CauseRadioNetwork::unspecified);
        self.push_pdu(0, built);
        Ok(connected.len())
    }

    /// The RESET ACKNOWLEDGEs received for this eNB's RESETs.
    pub fn resets_acknowledged(&self) -> u32 {
        self.resets_acknowledged
    }

    /// The SCTP association went down: every procedure in progress fails.
    pub fn association_lost(&mut self, now: Instant, reason: &str) {
        if matches!(self.s1, S1State::SetupPending { .. }) {
            self.s1_failed(format!("association lost: {reason}"));
        } else {
            self.s1 = S1State::Failed(format!("association lost: {reason}"));
        }
        let indices: Vec<u64> = self.ues.keys().copied().collect();
        for index in indices {
            self.drop_connection(index);
            if let Some(ctx) = self.ues.get_mut(&index) {
                ctx.deadline = None;
                ctx.ue.abort(now, "SCTP association lost");
                // Without S1 the eNB releases the UE's RRC connection too:
                // the UE is ECM-IDLE, its next procedure starts anew.
                if ctx.ue.is_connected() {
                    ctx.ue.connection_released(now);
                    ctx.erabs.clear();
                    ctx.kenb = None;
                    ctx.ambr = None;
                }
            }
            self.drive(index);
        }
        self.timers.clear();
        self.stale.clear();
    }

    /// A PDU from the MME.
    pub fn handle_s1ap(&mut self, now: Instant, _stream: u16, data: &[u8]) {
        let message = match s1ap_handler::decode(data) {
            Ok(m) => m,
            Err(e) => return self.malformed(now, e),
        };
        match message {
            Downlink::S1SetupResponse { mme_name, .. } => {
                if matches!(self.s1, S1State::SetupPending { .. }) {
                    self.s1 = S1State::Ready { mme_name };
                    self.actions.push_back(EnbAction::S1Setup(Ok(())));
                } else {
                    self.anomaly("S1 SETUP RESPONSE without a pending setup");
                }
            }
            Downlink::S1SetupFailure { cause } => {
                if matches!(self.s1, S1State::SetupPending { .. }) {
                    self.s1_failed(format!("S1 SETUP FAILURE ({cause})"));
                } else {
                    self.anomaly("S1 SETUP FAILURE without a pending setup");
                }
            }
            Downlink::DownlinkNas { mme_ue_id, enb_ue_id, nas } => {
                let Some(index) = self.associate(mme_ue_id, enb_ue_id) else { return };
                if let Some(ctx) = self.ues.get_mut(&index) {
                    ctx.ue.handle_downlink(now, &nas);
                }
                self.drive(index);
            }
            Downlink::InitialContextSetup(req) => self.initial_context_setup(now, req),
            Downlink::UeContextReleaseCommand { mme_ue_id, enb_ue_id, cause } => {
                self.release_command(now, mme_ue_id, enb_ue_id, &cause)
            }
            Downlink::ErrorIndication { enb_ue_id, cause, .. } => {
                let cause = cause.unwrap_or_else(|| "no cause".into());
                self.actions.push_back(EnbAction::Anomaly(format!("ERROR INDICATION received ({cause})")));
                if let Some(index) = enb_ue_id.and_then(|id| self.by_enb_ue_id.get(&id).copied()) {
                    if let Some(ctx) = self.ues.get_mut(&index) {
                        ctx.deadline = None;
                        ctx.ue.abort(now, &format!("ERROR INDICATION ({cause})"));
                    }
                    self.drive(index);
                }
            }
            Downlink::Paging(p) => self.paging(now, p),
            Downlink::ErabSetup { mme_ue_id, enb_ue_id, ambr, erabs } => {
                self.erab_setup(now, mme_ue_id, enb_ue_id, ambr, erabs)
            }
            Downlink::ErabRelease { mme_ue_id, enb_ue_id, ambr, e_rab_ids, nas } => {
                self.erab_release(now, mme_ue_id, enb_ue_id, ambr, e_rab_ids, nas)
            }
            Downlink::ResetAcknowledge => {
                if std::mem::take(&mut self.reset_pending) {
                    self.resets_acknowledged += 1;
                } else {
                    self.anomaly("RESET ACKNOWLEDGE without a RESET");
                }
            }
            Downlink::Handover(m) => self.handle_handover(now, m),
            Downlink::Other(name) => {
                self.actions.push_back(EnbAction::Anomaly(format!("unhandled S1AP {name}")));
            }
        }
    }

    fn anomaly(&mut self, what: &str) {
        self.actions.push_back(EnbAction::Anomaly(what.to_string()));
    }

    /// Answer an undecodable or malformed message with ERROR INDICATION
    /// (TS 36.413 10.3, 10.5), and fail the UE's procedure it was for.
    fn malformed(&mut self, now: Instant, e: S1apError) {
        let (mme, enb, cause) = match &e {
            S1apError::Pdu(_) => (None, None, CauseProtocol::transfer_syntax_error),
            S1apError::Ies { mme_ue_id, enb_ue_id, .. } => {
                (*mme_ue_id, *enb_ue_id, CauseProtocol::abstract_syntax_error_falsely_constructed_message)
            }
        };
        let reason = match &e {
            S1apError::Pdu(_) => "undecodable S1AP PDU".to_string(),
            S1apError::Ies { message, .. } => format!("malformed {message}"),
        };
        self.actions.push_back(EnbAction::Anomaly(reason.clone()));
        let built = s1ap_build::error_indication(mme, enb, Cause::protocol(cause));
        self.push_pdu(0, built);
        if let Some(index) = enb.and_then(|id| self.by_enb_ue_id.get(&id).copied()) {
            if let Some(ctx) = self.ues.get_mut(&index) {
                ctx.deadline = None;
                ctx.ue.abort(now, &reason);
            }
            self.drive(index);
        }
    }

    /// The UE of a UE-associated message; learns the MME-UE-S1AP-ID on the
    /// first one (TS 36.413 8.6.2.1), answers ERROR INDICATION for an
    /// unknown or inconsistent pair (10.6).
    fn associate(&mut self, mme_ue_id: u32, enb_ue_id: u32) -> Option<u64> {
        if self.stale.contains_key(&enb_ue_id) {
            self.anomaly("UE-associated message on a connection the UE left");
            return None;
        }
        let index = self.by_enb_ue_id.get(&enb_ue_id).copied();
        let conn = index.and_then(|i| self.ues.get_mut(&i)).and_then(|c| c.s1.as_mut());
        let cause = match conn {
            None => CauseRadioNetwork::unknown_enb_ue_s1ap_id,
            Some(c) => match c.mme_ue_id {
                None => {
                    c.mme_ue_id = Some(mme_ue_id);
                    return index;
                }
                Some(m) if m == mme_ue_id => return index,
                Some(_) => CauseRadioNetwork::unknown_pair_ue_s1ap_id,
            },
        };
        self.actions.push_back(EnbAction::Anomaly(format!("UE-associated message with {cause:?}")));
        let built = s1ap_build::error_indication(Some(mme_ue_id), Some(enb_ue_id), Cause::radioNetwork(cause));
        self.push_pdu(0, built);
        None
    }

    /// INITIAL CONTEXT SETUP (TS 36.413 8.3.1): keep KeNB and the S-GW
    /// F-TEIDs, answer with the eNB's F-TEIDs, then give the NAS PDU (the
    /// ATTACH ACCEPT) to the UE, whose answer follows the response.
    fn initial_context_setup(&mut self, now: Instant, req: IcsRequest) {
        let Some(index) = self.associate(req.mme_ue_id, req.enb_ue_id) else { return };
        let stream = self.ues.get(&index).and_then(|c| c.s1).map_or(0, |s| s.stream);
        let failure = |cause: CauseRadioNetwork| {
            s1ap_build::initial_context_setup_failure(req.mme_ue_id, req.enb_ue_id, Cause::radioNetwork(cause))
        };
        if req.erabs.is_empty() {
            self.push_pdu(stream, failure(CauseRadioNetwork::unspecified));
            return self.fail_ue(now, index, "INITIAL CONTEXT SETUP REQUEST without E-RABs");
        }
        let ue_kenb = self.ues.get(&index).and_then(|c| c.ue.kenb());
        if ue_kenb.is_some_and(|k| k != req.kenb) {
            // The UE would fail AS security mode: the bearers cannot be set up.
            self.push_pdu(stream, failure(CauseRadioNetwork::failure_in_radio_interface_procedure));
            return self.fail_ue(now, index, "KeNB of the MME differs from the UE's");
        }
        if let Some(setup) = self.repeated_ics(index, &req.kenb, &req.erabs) {
            let built = s1ap_build::initial_context_setup_response(req.mme_ue_id, req.enb_ue_id, &setup);
            return self.push_pdu(stream, built);
        }
        let (erabs, setup) = self.set_up_erabs(&req.erabs);
        let built = s1ap_build::initial_context_setup_response(req.mme_ue_id, req.enb_ue_id, &setup);
        self.push_pdu(stream, built);
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.kenb = Some(req.kenb);
            ctx.ambr = req.ambr;
            ctx.erabs = erabs;
            for nas in req.erabs.iter().filter_map(|e| e.nas.as_deref()) {
                ctx.ue.handle_downlink(now, nas);
            }
            ctx.ue.context_setup(now);
        }
        self.arm_inactivity(now, index);
        self.drive(index);
    }

    fn fail_ue(&mut self, now: Instant, index: u64, reason: &str) {
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.deadline = None;
            ctx.ue.abort(now, reason);
        }
        self.drive(index);
    }

    /// A per-eNB unique S1-U TEID: the low 12 bits of the eNB ID, then a
    /// 20-bit counter that skips 0.
    fn allocate_teid(&mut self) -> u32 {
        let counter = self.next_teid & 0xF_FFFF;
        self.next_teid = if counter == 0xF_FFFF { 1 } else { counter + 1 };
        ((self.cfg.enb_id & 0xFFF) << 20) | counter.max(1)
    }

    /// UE CONTEXT RELEASE COMMAND (TS 36.413 8.3.3): always answered with
    /// UE CONTEXT RELEASE COMPLETE.
    fn release_command(&mut self, now: Instant, mme_ue_id: u32, enb_ue_id: Option<u32>, _cause: &str) {
        if self.handover_release(now, mme_ue_id, enb_ue_id) {
            return;
        }
        let index = match enb_ue_id {
            // The pair must match (TS 36.413 9.2.3.18): a command repeated
            // late must not release a newer connection under the same id.
            Some(id) => self.by_enb_ue_id.get(&id).copied().filter(|i| {
                self.ues.get(i).and_then(|c| c.s1).is_none_or(|s| s.mme_ue_id.is_none_or(|m| m == mme_ue_id))
            }),
            None => {
                self.ues.iter().find(|(_, c)| c.s1.is_some_and(|s| s.mme_ue_id == Some(mme_ue_id))).map(|(i, _)| *i)
            }
        };
        if let Some((mme, stream)) = enb_ue_id.and_then(|id| self.stale.get(&id).copied()) {
            let enb = enb_ue_id.unwrap_or_default();
            self.stale.remove(&enb);
            return self.push_pdu(stream, s1ap_build::ue_context_release_complete(mme, enb));
        }
        let Some(index) = index else {
            self.actions.push_back(EnbAction::Anomaly("UE CONTEXT RELEASE COMMAND for an unknown UE".into()));
            let built = match enb_ue_id {
                Some(enb) => s1ap_build::ue_context_release_complete(mme_ue_id, enb),
                None => s1ap_build::error_indication(
                    Some(mme_ue_id),
                    None,
                    Cause::radioNetwork(CauseRadioNetwork::unknown_mme_ue_s1ap_id),
                ),
            };
            return self.push_pdu(0, built);
        };
        let conn = self.ues.get(&index).and_then(|c| c.s1).expect("indexed UEs have a connection");
        let built = s1ap_build::ue_context_release_complete(mme_ue_id, conn.enb_ue_id);
        self.push_pdu(conn.stream, built);
        self.drop_connection(index);
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.ue.connection_released(now);
        }
        self.drive(index);
        self.released_to_idle(now, index);
    }
}
