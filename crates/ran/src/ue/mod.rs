//! The emulated UE: EMM and ESM per TS 24.301, without I/O.
//!
//! The eNB feeds it downlink NAS PDUs ([`Ue::handle_downlink`]) and starts
//! procedures ([`Ue::start_attach`], [`Ue::start_detach`]); the UE answers
//! with [`UeAction`]s taken by [`Ue::poll_action`]: uplink NAS PDUs and the
//! end of each procedure, with its outcome.
//!
//! - [`attach`]: ATTACH REQUEST / ACCEPT / COMPLETE / REJECT (5.5.1)
//! - [`authentication`]: identification and EPS AKA (5.4.2, 5.4.4)
//! - [`security_mode`]: SECURITY MODE COMMAND (5.4.3)
//! - [`detach`]: UE-initiated and network-initiated detach (5.5.2)
//! - [`security`]: NAS protection with the current EPS security context
//! - [`idle`]: ECM-IDLE: the connection, T3412, the cell, a pending attach
//! - [`service_request`]: SERVICE REQUEST / REJECT, paging response (5.6.1, 5.6.2)
//! - [`tau`]: tracking area updating, periodic and normal (5.5.3)
//! - [`pdn`]: PDN connections after attach, made and given up (6.5.1, 6.5.2)

pub mod attach;
pub mod authentication;
pub mod detach;
pub mod handover;
pub mod idle;
pub mod pdn;
pub mod security;
pub mod security_mode;
pub mod service_request;
pub mod tau;

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::Instant;

use oxirush_nas::nas_eps::{Direction, Guti, NasEmmMessage, NasEpsMessage, NasEsmInformationResponse, NasEsmMessage};

use crate::usim::Usim;
use security::{EpsSecurity, PendingKasme};

/// The procedures whose latency is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Procedure {
    Attach,
    Detach,
    /// X2 handover, from the source's decision to PATH SWITCH REQUEST ACKNOWLEDGE.
    X2Handover,
    /// S1 handover, from HANDOVER REQUIRED to HANDOVER NOTIFY.
    S1Handover,
    /// UE-triggered service request, from SERVICE REQUEST to the end of the
    /// INITIAL CONTEXT SETUP.
    ServiceRequest,
    /// From the S1AP PAGING to the end of the INITIAL CONTEXT SETUP of the
    /// UE's answer.
    PagingResponse,
    /// Normal tracking area update ("TA updating", TS 24.301 5.5.3.2),
    /// from the REQUEST to the ACCEPT (with the active flag, to the end of
    /// the INITIAL CONTEXT SETUP).
    Tau,
    /// Periodic tracking area update at T3412 expiry (5.3.5), measured
    /// as [`Procedure::Tau`].
    PeriodicTau,
    /// S1 release to ECM-IDLE, from the eNB's UE CONTEXT RELEASE REQUEST
    /// to the UE CONTEXT RELEASE COMMAND (measured by the driver).
    Release,
    /// UE-requested PDN connectivity after attach, from the REQUEST to the
    /// ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST.
    PdnConnectivity,
    /// UE-requested PDN disconnect, from the REQUEST to the DEACTIVATE EPS
    /// BEARER CONTEXT REQUEST.
    PdnDisconnect,
}

impl Procedure {
    pub fn name(self) -> &'static str {
        match self {
            Procedure::Attach => "attach",
            Procedure::Detach => "detach",
            Procedure::X2Handover => "x2_handover",
            Procedure::S1Handover => "s1_handover",
            Procedure::ServiceRequest => "service_request",
            Procedure::PagingResponse => "paging_response",
            Procedure::Tau => "tau",
            Procedure::PeriodicTau => "periodic_tau",
            Procedure::Release => "release",
            Procedure::PdnConnectivity => "pdn_connectivity",
            Procedure::PdnDisconnect => "pdn_disconnect",
        }
    }
}

/// How a procedure ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcedureOutcome {
    pub procedure: Procedure,
    pub started: Instant,
    pub finished: Instant,
    /// `Err(reason)` for a failed procedure.
    pub result: Result<(), String>,
}

/// What the UE asks of the eNB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UeAction {
    /// A NAS PDU to send uplink.
    Uplink(Vec<u8>),
    /// A procedure ended.
    Finished(ProcedureOutcome),
    /// Something odd outside any procedure (dropped message, resync, ...),
    /// counted but not a failure of the UE.
    Anomaly(String),
}

/// EMM main states (TS 24.301 5.1.3.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmmState {
    Deregistered,
    RegisteredInitiated,
    Registered,
    DeregisteredInitiated,
}

/// What the UE is waiting for inside a procedure; used in failure reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Authentication Request, Identity Request, SMC or Attach Accept.
    AttachProgress,
    AttachAccept,
    DetachAccept,
    /// Switch-off detach: the release of the S1 connection.
    Release,
    /// The INITIAL CONTEXT SETUP of a service request or an active TAU.
    Bearers,
    TauAccept,
    /// TAU ACCEPT of a TAU with the active flag.
    TauAcceptActive,
    /// The network's answer to a PDN CONNECTIVITY or DISCONNECT REQUEST.
    EsmAnswer,
}

struct Running {
    procedure: Procedure,
    started: Instant,
    waiting: Waiting,
    /// Notes gathered on the way (MAC failure reported, ...), put in the
    /// failure reason if the procedure fails.
    notes: Vec<&'static str>,
}

/// The default EPS bearer of the PDN connection made at attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultBearer {
    pub ebi: u8,
    pub ipv4: Option<Ipv4Addr>,
}

/// One UE: its USIM, EMM state, security context and what attach gave it.
pub struct Ue {
    pub usim: Usim,
    /// The serving network, as broadcast by the cell (for KASME).
    serving: oxirush_security::Plmn,
    emm: EmmState,
    running: Option<Running>,
    pending: Option<PendingKasme>,
    security: Option<EpsSecurity>,
    /// Set once a SECURITY MODE COMMAND was taken on this NAS signalling
    /// connection: from then on plain messages are refused (4.4.4.2).
    secured_connection: bool,
    guti: Option<Guti>,
    tais: Vec<oxirush_nas::nas_eps::Tai>,
    bearer: Option<DefaultBearer>,
    kenb: Option<[u8; 32]>,
    /// The NH chain of `kenb` (handover.rs).
    as_keys: Option<handover::AsKeyChain>,
    idle: idle::IdleState,
    /// PDN connections made after attach, the last PTI used and the ESM
    /// procedure waiting for its answer (pdn.rs).
    pdns: Vec<pdn::PdnConnection>,
    pti: u8,
    esm: Option<pdn::EsmPending>,
    actions: VecDeque<UeAction>,
}

/// PTI of the PDN CONNECTIVITY REQUEST sent at attach.
pub const ATTACH_PTI: u8 = 1;

impl Ue {
    /// A switched-on, deregistered UE in a cell of `serving`.
    pub fn new(usim: Usim, serving: mobicore_common::Plmn) -> Self {
        let serving = oxirush_security::Plmn::new(&serving.mcc(), &serving.mnc()).expect("valid PLMN digits");
        Ue {
            usim,
            serving,
            emm: EmmState::Deregistered,
            running: None,
            pending: None,
            security: None,
            secured_connection: false,
            guti: None,
            tais: Vec::new(),
            bearer: None,
            kenb: None,
            as_keys: None,
            idle: idle::IdleState::default(),
            pdns: Vec::new(),
            pti: ATTACH_PTI,
            esm: None,
            actions: VecDeque::new(),
        }
    }

    pub fn emm_state(&self) -> EmmState {
        self.emm
    }
    pub fn guti(&self) -> Option<Guti> {
        self.guti
    }
    pub fn tai_list(&self) -> &[oxirush_nas::nas_eps::Tai] {
        &self.tais
    }
    pub fn default_bearer(&self) -> Option<DefaultBearer> {
        self.bearer
    }
    /// The PDN address given at attach.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.bearer.and_then(|b| b.ipv4)
    }
    /// KeNB as the UE derived it after the SECURITY MODE COMMAND.
    pub fn kenb(&self) -> Option<[u8; 32]> {
        self.kenb
    }
    pub fn has_security_context(&self) -> bool {
        self.security.is_some()
    }
    /// The procedure in progress, if any.
    pub fn procedure(&self) -> Option<Procedure> {
        self.running.as_ref().map(|r| r.procedure)
    }

    /// The next action, if any.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<UeAction> {
        self.actions.pop_front()
    }

    /// A downlink NAS PDU from the network.
    pub fn handle_downlink(&mut self, now: Instant, pdu: &[u8]) {
        let Some(sht) = security::header_type(pdu) else {
            return self.problem(now, "downlink NAS PDU with unknown protocol discriminator".into());
        };
        let message = match sht {
            0 => match NasEpsMessage::decode_with_direction(pdu, Direction::Downlink) {
                Ok(m) => {
                    if self.secured_connection && !plain_allowed(&m) {
                        return self.problem(now, format!("plain {} after security activation dropped", name(&m)));
                    }
                    m
                }
                Err(e) => return self.problem(now, format!("undecodable downlink NAS: {e}")),
            },
            3 => return self.handle_security_mode_command(now, pdu),
            1 | 2 => {
                let Some(sec) = self.security.as_mut() else {
                    return self.problem(now, "protected downlink NAS without a security context".into());
                };
                match sec.unprotect(pdu) {
                    // The network uses the current context on this
                    // connection (e.g. after an integrity protected GUTI
                    // attach that needed no new authentication).
                    Ok(m) => {
                        self.secured_connection = true;
                        m
                    }
                    Err(oxirush_nas::NasError::IntegrityCheckFailed) => {
                        return self.problem(now, "downlink NAS MAC failure".into())
                    }
                    Err(e) => return self.problem(now, format!("downlink NAS refused: {e}")),
                }
            }
            other => return self.problem(now, format!("downlink NAS with security header type {other}")),
        };
        self.dispatch(now, message);
    }

    fn dispatch(&mut self, now: Instant, message: NasEpsMessage) {
        match message {
            NasEpsMessage::Emm(_, emm) => match emm {
                NasEmmMessage::IdentityRequest(m) => self.handle_identity_request(now, &m),
                NasEmmMessage::AuthenticationRequest(m) => self.handle_authentication_request(now, &m),
                NasEmmMessage::AuthenticationReject(_) => self.handle_authentication_reject(now),
                NasEmmMessage::AttachAccept(m) => self.handle_attach_accept(now, &m),
                NasEmmMessage::AttachReject(m) => self.handle_attach_reject(now, &m),
                NasEmmMessage::DetachAccept(_) => self.handle_detach_accept(now),
                NasEmmMessage::DetachRequestUeTerminated(m) => self.handle_network_detach(now, &m),
                NasEmmMessage::GutiReallocationCommand(m) => self.handle_guti_reallocation(now, &m),
                NasEmmMessage::ServiceReject(m) => self.handle_service_reject(now, &m),
                NasEmmMessage::TrackingAreaUpdateAccept(m) => self.handle_tau_accept(now, &m),
                NasEmmMessage::TrackingAreaUpdateReject(m) => self.handle_tau_reject(now, &m),
                NasEmmMessage::EmmInformation(_) => {}
                NasEmmMessage::EmmStatus(m) => {
                    self.anomaly(format!("EMM STATUS #{} received", m.emm_cause.cause_raw()))
                }
                NasEmmMessage::SecurityModeCommand(_) => {
                    self.problem(now, "SECURITY MODE COMMAND without header type 3".into())
                }
                other => self.problem(now, format!("unexpected downlink {:?}", other.message_type())),
            },
            NasEpsMessage::Esm(h, NasEsmMessage::ActivateDefaultEpsBearerContextRequest(act)) => {
                self.handle_activate_default(now, h.procedure_transaction_identity, h.eps_bearer_identity, &act)
            }
            NasEpsMessage::Esm(h, NasEsmMessage::DeactivateEpsBearerContextRequest(_)) => {
                self.handle_deactivate(now, h.eps_bearer_identity)
            }
            NasEpsMessage::Esm(h, NasEsmMessage::PdnConnectivityReject(r)) => {
                self.handle_esm_reject(now, h.procedure_transaction_identity, "PDN CONNECTIVITY REJECT", &r.esm_cause)
            }
            NasEpsMessage::Esm(h, NasEsmMessage::PdnDisconnectReject(r)) => {
                self.handle_esm_reject(now, h.procedure_transaction_identity, "PDN DISCONNECT REJECT", &r.esm_cause)
            }
            NasEpsMessage::Esm(header, NasEsmMessage::EsmInformationRequest(_)) => {
                // TS 24.301 6.6.1.2.3: answer with what the UE has (nothing).
                let reply =
                    NasEpsMessage::new_esm(NasEsmInformationResponse::new(), 0, header.procedure_transaction_identity);
                self.send(now, &reply, false);
            }
            other => self.problem(now, format!("unexpected downlink {}", name(&other))),
        }
    }

    /// Protect (when a context is in use) and queue an uplink message.
    /// `initial` marks an initial NAS message (integrity only).
    fn send(&mut self, now: Instant, msg: &NasEpsMessage, initial: bool) {
        let encoded = match self.security.as_mut() {
            Some(sec) if self.secured_connection || initial => {
                if initial && !self.secured_connection {
                    // TS 33.401 7.2.6.2: without a new SECURITY MODE
                    // COMMAND, KeNB comes from the uplink NAS COUNT of
                    // the initial NAS message.
                    if let Some(count) = sec.next_uplink_count() {
                        self.kenb = Some(sec.kenb(count));
                    }
                }
                sec.protect(msg, initial)
            }
            _ => msg.encode(),
        };
        match encoded {
            Ok(pdu) => self.actions.push_back(UeAction::Uplink(pdu)),
            Err(e) => self.fail(now, format!("cannot encode uplink {}: {e}", name(msg))),
        }
    }

    /// Queue a message without protection (SECURITY MODE REJECT, and the
    /// messages of 4.4.4.2 sent before a context is in use).
    fn send_plain(&mut self, now: Instant, msg: &NasEpsMessage) {
        match msg.encode() {
            Ok(pdu) => self.actions.push_back(UeAction::Uplink(pdu)),
            Err(e) => self.fail(now, format!("cannot encode uplink {}: {e}", name(msg))),
        }
    }

    fn begin(&mut self, now: Instant, procedure: Procedure, waiting: Waiting) {
        self.running = Some(Running { procedure, started: now, waiting, notes: Vec::new() });
    }

    fn waiting(&self) -> Option<(Procedure, Waiting)> {
        self.running.as_ref().map(|r| (r.procedure, r.waiting))
    }

    fn set_waiting(&mut self, waiting: Waiting) {
        if let Some(r) = self.running.as_mut() {
            r.waiting = waiting;
        }
    }

    fn note(&mut self, note: &'static str) {
        if let Some(r) = self.running.as_mut() {
            r.notes.push(note);
        }
    }

    fn finish(&mut self, now: Instant, result: Result<(), String>) {
        if let Some(r) = self.running.take() {
            if matches!(r.procedure, Procedure::PdnConnectivity | Procedure::PdnDisconnect) {
                self.esm = None;
            }
            let result = result.map_err(|reason| {
                if r.notes.is_empty() {
                    reason
                } else {
                    format!("{reason} (after {})", r.notes.join(", "))
                }
            });
            self.actions.push_back(UeAction::Finished(ProcedureOutcome {
                procedure: r.procedure,
                started: r.started,
                finished: now,
                result,
            }));
        }
    }

    /// End the running procedure as failed; outside a procedure, count an
    /// anomaly.
    pub(crate) fn fail(&mut self, now: Instant, reason: String) {
        if self.running.is_some() {
            self.finish(now, Err(reason));
        } else {
            self.anomaly(reason);
        }
    }

    /// An unexpected or broken downlink message: it fails the procedure in
    /// progress, or is counted as an anomaly outside one.
    fn problem(&mut self, now: Instant, reason: String) {
        if let Some((p, _)) = self.waiting() {
            if p == Procedure::Attach {
                self.emm = EmmState::Deregistered;
            }
        }
        self.fail(now, reason)
    }

    fn anomaly(&mut self, reason: String) {
        self.actions.push_back(UeAction::Anomaly(reason));
    }

    /// The eNB gave up on the procedure (guard timer), with a reason.
    pub fn abort(&mut self, now: Instant, reason: &str) {
        if let Some(r) = &self.running {
            let what = format!("{reason} in {} waiting for {:?}", r.procedure.name(), r.waiting);
            if r.procedure == Procedure::Attach {
                self.emm = EmmState::Deregistered;
            }
            self.finish(now, Err(what));
        }
    }

    /// The NAS signalling connection was released (UE Context Release):
    /// ECM-IDLE.
    pub fn connection_released(&mut self, now: Instant) {
        self.secured_connection = false;
        self.pending = None;
        match self.waiting() {
            Some((Procedure::Detach, Waiting::Release)) => self.finish(now, Ok(())),
            Some((p, _)) => {
                if p == Procedure::Attach {
                    self.emm = EmmState::Deregistered;
                }
                self.finish(now, Err(format!("S1 connection released during {}", p.name())))
            }
            None => {}
        }
        self.released_to_idle(now);
    }
}

/// TS 24.301 4.4.4.2: the EMM messages a UE takes without integrity
/// protection once security is active.
fn plain_allowed(m: &NasEpsMessage) -> bool {
    matches!(
        m,
        NasEpsMessage::Emm(
            _,
            NasEmmMessage::IdentityRequest(_)
                | NasEmmMessage::AuthenticationRequest(_)
                | NasEmmMessage::AuthenticationReject(_)
                | NasEmmMessage::AttachReject(_)
                | NasEmmMessage::DetachAccept(_)
                | NasEmmMessage::TrackingAreaUpdateReject(_)
                | NasEmmMessage::ServiceReject(_)
        )
    )
}

/// A short name of a message for reasons.
pub(crate) fn name(m: &NasEpsMessage) -> String {
    match m {
        NasEpsMessage::Emm(_, e) => format!("{:?}", e.message_type()),
        NasEpsMessage::Esm(_, e) => format!("{:?}", e.message_type()),
        NasEpsMessage::SecurityProtected(..) => "protected message".into(),
        NasEpsMessage::ServiceRequest(_) => "ServiceRequest".into(),
        NasEpsMessage::EmmTransport(_) => "EmmTransport".into(),
        _ => "opaque message".into(),
    }
}
