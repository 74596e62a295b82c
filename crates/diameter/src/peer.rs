//! The peer state machine without I/O (RFC 6733 5.6, simplified to one
//! connection per peer): capabilities exchange, the watchdog of RFC 3539,
//! disconnect, and the answers to bad input. The shell feeds it frames and
//! timer expiries and sends what [`Peer::poll_transmit`] returns.
//!
//! Trust boundary: nothing but CER is taken before the capabilities
//! exchange succeeded; a responder admits only the identities of its
//! [`Admission`] (others get DIAMETER_UNKNOWN_PEER, RFC 6733 5.3), and once
//! open every request must carry the Origin-Host of the CER.

use crate::allowlist::Admission;
use crate::base::{self, LocalIdentity};
use crate::dict::{app, avp, cmd, result};
use crate::framing::FramingError;
use crate::message::Message;
use mobicore_common::counters::Counters;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Default watchdog interval Tw (RFC 3539 3.4.1: 30 s).
pub const DEFAULT_TW: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct PeerConfig {
    pub local: LocalIdentity,
    /// Tw: a DWR after this long without traffic; the connection fails after
    /// a second Tw without answer (RFC 3539 3.4).
    pub watchdog_interval: Duration,
    /// How long a responder waits for the CER (or an initiator for the CEA)
    /// before it closes the connection: what a connection that never
    /// exchanges capabilities may hold (default Tw).
    pub cer_timeout: Duration,
    /// Applications and their command codes served above this peer.
    pub applications: Vec<(u32, Vec<u32>)>,
    /// Seed of hop-by-hop and end-to-end identifiers (RFC 6733 3).
    pub id_seed: u32,
    /// Which identities a responder accepts in a CER.
    pub admission: Admission,
}

impl PeerConfig {
    /// A peer that speaks S6a (ULR, AIR, PUR).
    pub fn s6a(local: LocalIdentity) -> Self {
        PeerConfig {
            local,
            watchdog_interval: DEFAULT_TW,
            cer_timeout: DEFAULT_TW,
            applications: vec![(app::S6A, vec![cmd::UPDATE_LOCATION, cmd::AUTHENTICATION_INFORMATION, cmd::PURGE_UE])],
            id_seed: 1,
            admission: Admission::Anyone,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Initiator: CER sent.
    WaitCea,
    /// Responder: connection accepted, waiting for CER.
    WaitCer,
    Open,
    /// DPR sent, waiting for DPA.
    Closing,
    /// The shell flushes what is left to send, then closes the connection.
    Closed,
}

/// The reason of [`PeerEvent::Down`] when the peer closed in order: a
/// Disconnect-Peer-Request (RFC 6733 5.4), answered.
pub const DPR_RECEIVED: &str = "DPR received";

#[derive(Debug, Clone, PartialEq)]
pub enum PeerEvent {
    /// Capabilities exchanged; the remote identity.
    Up { origin_host: String, origin_realm: String },
    /// The connection must close (or has been closed by DPR/DPA).
    Down(String),
    /// An application request (the application answers with [`Peer::send`]).
    Request(Message),
    /// An application answer, matched by the application by hop-by-hop id.
    Answer(Message),
    /// An answer that could not be parsed, for the request of this id.
    MalformedAnswer { hop_by_hop: u32 },
}

pub struct Peer {
    cfg: PeerConfig,
    state: PeerState,
    tx: Vec<u8>,
    events: VecDeque<PeerEvent>,
    next_hop_by_hop: u32,
    next_end_to_end: u32,
    deadline: Option<Instant>,
    dwr_outstanding: bool,
    /// The Origin-Host of the capabilities exchange, once open.
    remote_host: Option<String>,
    counters: Counters,
}

impl Peer {
    fn new(cfg: PeerConfig, state: PeerState, now: Instant, counters: Counters) -> Self {
        let seed = cfg.id_seed;
        let deadline = Some(now + cfg.cer_timeout);
        Peer {
            state,
            tx: Vec::with_capacity(4 * 1024),
            events: VecDeque::new(),
            next_hop_by_hop: seed,
            // RFC 6733 3: high 12 bits from the clock, low 20 random.
            next_end_to_end: seed.rotate_left(20),
            deadline,
            dwr_outstanding: false,
            remote_host: None,
            counters,
            cfg,
        }
    }

    /// The connecting side: sends CER at once.
    pub fn initiator(cfg: PeerConfig, now: Instant, counters: Counters) -> Self {
        let mut p = Self::new(cfg, PeerState::WaitCea, now, counters);
        let (h, e) = p.next_ids();
        let m = base::cer(&p.cfg.local, h, e);
        p.send(&m);
        p
    }

    /// The accepting side: waits for CER.
    pub fn responder(cfg: PeerConfig, now: Instant, counters: Counters) -> Self {
        Self::new(cfg, PeerState::WaitCer, now, counters)
    }

    pub fn state(&self) -> PeerState {
        self.state
    }
    pub fn is_open(&self) -> bool {
        self.state == PeerState::Open
    }
    pub fn is_closed(&self) -> bool {
        self.state == PeerState::Closed
    }
    pub fn local(&self) -> &LocalIdentity {
        &self.cfg.local
    }
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// The peer's Origin-Host from the capabilities exchange, once open.
    pub fn remote_host(&self) -> Option<&str> {
        self.remote_host.as_deref()
    }

    /// Fresh hop-by-hop and end-to-end identifiers.
    pub fn next_ids(&mut self) -> (u32, u32) {
        let ids = (self.next_hop_by_hop, self.next_end_to_end);
        self.next_hop_by_hop = self.next_hop_by_hop.wrapping_add(1);
        self.next_end_to_end = self.next_end_to_end.wrapping_add(1);
        ids
    }

    /// Queues a message for the peer.
    pub fn send(&mut self, m: &Message) {
        m.emit_into(&mut self.tx);
    }

    /// Everything queued since the last call, as one write.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        if self.tx.is_empty() {
            None
        } else {
            Some(std::mem::replace(&mut self.tx, Vec::with_capacity(4 * 1024)))
        }
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<PeerEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    fn down(&mut self, reason: impl Into<String>) {
        if self.state != PeerState::Closed {
            self.state = PeerState::Closed;
            self.deadline = None;
            self.events.push_back(PeerEvent::Down(reason.into()));
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        match self.deadline {
            Some(d) if d <= now => {}
            _ => return,
        }
        let tw = self.cfg.watchdog_interval;
        match self.state {
            PeerState::WaitCea => self.down("no CEA"),
            PeerState::WaitCer => {
                self.counters.incr("diameter_no_cer_in_time");
                self.down("no CER")
            }
            PeerState::Closing => self.down("no DPA"),
            PeerState::Closed => self.deadline = None,
            PeerState::Open if self.dwr_outstanding => {
                // RFC 3539 3.4.1: no DWA within Tw after the DWR.
                self.counters.incr("diameter_watchdog_failures");
                self.down("watchdog: no DWA");
            }
            PeerState::Open => {
                let (h, e) = self.next_ids();
                let m = base::dwr(&self.cfg.local, h, e);
                self.send(&m);
                self.dwr_outstanding = true;
                self.deadline = Some(now + tw);
            }
        }
    }

    /// Sends DPR (RFC 6733 5.4) and waits for DPA.
    pub fn close(&mut self, now: Instant) {
        match self.state {
            PeerState::Open => {
                let (h, e) = self.next_ids();
                let m = base::dpr(&self.cfg.local, h, e, base::disconnect_cause::REBOOTING);
                self.send(&m);
                self.state = PeerState::Closing;
                self.deadline = Some(now + self.cfg.watchdog_interval);
            }
            PeerState::Closing | PeerState::Closed => {}
            _ => self.down("closed before capabilities exchange"),
        }
    }

    /// The stream cannot be framed: answer if the header is known
    /// (DIAMETER_INVALID_MESSAGE_LENGTH), then close.
    pub fn handle_framing_error(&mut self, e: FramingError) {
        self.counters.incr("diameter_invalid_message_length");
        if let Some(h) = e.header.filter(|h| h.request) {
            let m = base::error_answer(&self.cfg.local, &h, None, e.error.result_code(), None);
            self.send(&m);
        }
        self.down(format!("framing: {}", e.error));
    }

    /// One whole frame from the stream.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        let m = match Message::parse(frame) {
            Ok(m) => m,
            Err(e) => {
                self.counters.incr("diameter_malformed");
                match e.header {
                    Some(h) if h.request => {
                        let sid = e.avps.iter().find(|a| avp::SESSION_ID.matches(a));
                        let sid = sid.and_then(|a| a.as_str().ok().map(str::to_string));
                        let failed = match e.error {
                            crate::error::WireError::AvpLength { .. } => e.failed_avp,
                            _ => None,
                        };
                        let rc = e.error.result_code();
                        let mut a = base::error_answer(&self.cfg.local, &h, sid.as_deref(), rc, failed);
                        base::copy_proxy_info(&e.avps, &mut a);
                        self.send(&a);
                    }
                    Some(h) if h.application_id != app::COMMON => {
                        self.events.push_back(PeerEvent::MalformedAnswer { hop_by_hop: h.hop_by_hop })
                    }
                    _ => {}
                }
                if self.state == PeerState::WaitCer {
                    self.down("malformed message before CER");
                }
                return;
            }
        };
        self.handle_message(now, m);
    }

    /// One parsed message.
    pub fn handle_message(&mut self, now: Instant, m: Message) {
        // RFC 3539 3.4.1: any traffic shows the peer is alive.
        if matches!(self.state, PeerState::Open) && !self.dwr_outstanding {
            self.deadline = Some(now + self.cfg.watchdog_interval);
        }
        let h = m.header;
        if h.request && h.error {
            // RFC 6733 3: the E-bit is never set in a request.
            self.counters.incr("diameter_invalid_hdr_bits");
            let a = base::error_answer_for(&self.cfg.local, &m, result::DIAMETER_INVALID_HDR_BITS, None);
            self.send(&a);
            return;
        }
        match self.state {
            PeerState::WaitCer => self.wait_cer(now, m),
            PeerState::WaitCea => self.wait_cea(now, m),
            PeerState::Open | PeerState::Closing => self.open(now, m),
            PeerState::Closed => self.counters.incr("diameter_after_close"),
        }
    }

    fn remote_identity(m: &Message) -> Option<(String, String)> {
        let host = m.find(avp::ORIGIN_HOST)?.as_str().ok()?.to_string();
        let realm = m.find(avp::ORIGIN_REALM)?.as_str().ok()?.to_string();
        Some((host, realm))
    }

    fn common_application(&self, m: &Message) -> bool {
        let ours = |id: u32| id == app::RELAY || self.cfg.applications.iter().any(|(a, _)| *a == id);
        let direct = m.find_all(avp::AUTH_APPLICATION_ID).filter_map(|a| a.as_u32().ok()).any(ours);
        let vendor = m.find_all(avp::VENDOR_SPECIFIC_APPLICATION_ID).filter_map(|a| a.grouped().ok()).any(|g| {
            g.iter().filter(|a| avp::AUTH_APPLICATION_ID.matches(a)).filter_map(|a| a.as_u32().ok()).any(ours)
        });
        direct || vendor
    }

    /// Whether a request carries the Origin-Host of the capabilities
    /// exchange (one connection per peer, no relays: RFC 6733 2.1, 6.3). A
    /// request without it gets DIAMETER_MISSING_AVP (RFC 6733 7.1.5), one
    /// with another DIAMETER_UNABLE_TO_COMPLY; both are counted and never
    /// reach the application.
    fn same_origin_host(&mut self, m: &Message) -> bool {
        let local = &self.cfg.local;
        let got = m.find(avp::ORIGIN_HOST).and_then(|a| a.as_str().ok());
        let (rc, failed) = match (got, self.remote_host.as_deref()) {
            (Some(got), Some(cer)) if got.eq_ignore_ascii_case(cer) => return true,
            (None, _) => {
                self.counters.incr("diameter_request_without_origin_host");
                (result::DIAMETER_MISSING_AVP, Some(avp::ORIGIN_HOST.utf8("")))
            }
            _ => {
                self.counters.incr("diameter_request_from_other_origin_host");
                (result::DIAMETER_UNABLE_TO_COMPLY, None)
            }
        };
        let a = base::error_answer_for(local, m, rc, failed);
        self.send(&a);
        false
    }

    fn wait_cer(&mut self, now: Instant, m: Message) {
        let h = m.header;
        if !(h.request && h.command_code == cmd::CAPABILITIES_EXCHANGE) {
            // RFC 6733 5.6: only CER is taken before the exchange.
            self.counters.incr("diameter_before_cer");
            self.down("message before CER");
            return;
        }
        let Some((host, realm)) = Self::remote_identity(&m) else {
            self.counters.incr("diameter_missing_avp");
            let failed = avp::ORIGIN_HOST.utf8("");
            let a = base::error_answer(&self.cfg.local, &h, None, result::DIAMETER_MISSING_AVP, Some(failed));
            self.send(&a);
            self.down("CER without Origin-Host/Realm");
            return;
        };
        if !self.cfg.admission.admits(&host, &realm) {
            // RFC 6733 5.3, 7.1.3: a CER from a peer local policy does not
            // know; the answer is a protocol error (E-bit, 7.2), then close.
            self.counters.incr("diameter_cer_from_unknown_peer");
            let mut a = base::cea(&self.cfg.local, &h, result::DIAMETER_UNKNOWN_PEER);
            a.header.error = true;
            self.send(&a);
            self.down(format!("unknown peer {host} (realm {realm})"));
            return;
        }
        if !self.common_application(&m) {
            let a = base::cea(&self.cfg.local, &h, result::DIAMETER_NO_COMMON_APPLICATION);
            self.send(&a);
            self.down("no common application");
            return;
        }
        let a = base::cea(&self.cfg.local, &h, result::DIAMETER_SUCCESS);
        self.send(&a);
        self.remote_host = Some(host.clone());
        self.state = PeerState::Open;
        self.deadline = Some(now + self.cfg.watchdog_interval);
        self.events.push_back(PeerEvent::Up { origin_host: host, origin_realm: realm });
    }

    fn wait_cea(&mut self, now: Instant, m: Message) {
        let h = m.header;
        if h.request || h.command_code != cmd::CAPABILITIES_EXCHANGE {
            self.counters.incr("diameter_before_cea");
            self.down("message before CEA");
            return;
        }
        match m.result_code() {
            Some(result::DIAMETER_SUCCESS) => {
                let (host, realm) = Self::remote_identity(&m).unwrap_or_default();
                self.remote_host = Some(host.clone());
                self.state = PeerState::Open;
                self.deadline = Some(now + self.cfg.watchdog_interval);
                self.events.push_back(PeerEvent::Up { origin_host: host, origin_realm: realm });
            }
            rc => self.down(format!("CEA with Result-Code {rc:?}")),
        }
    }

    fn open(&mut self, now: Instant, m: Message) {
        let h = m.header;
        if !h.request {
            match h.command_code {
                cmd::DEVICE_WATCHDOG if h.application_id == app::COMMON => {
                    self.dwr_outstanding = false;
                    self.deadline = Some(now + self.cfg.watchdog_interval);
                }
                cmd::DISCONNECT_PEER if h.application_id == app::COMMON => self.down("DPA received"),
                cmd::CAPABILITIES_EXCHANGE if h.application_id == app::COMMON => {}
                _ => self.events.push_back(PeerEvent::Answer(m)),
            }
            return;
        }
        if !self.same_origin_host(&m) {
            return;
        }
        let local = &self.cfg.local;
        if h.application_id == app::COMMON {
            let a = match h.command_code {
                cmd::DEVICE_WATCHDOG => base::dwa(local, &h),
                cmd::CAPABILITIES_EXCHANGE => base::cea(local, &h, result::DIAMETER_SUCCESS),
                cmd::DISCONNECT_PEER => {
                    let a = base::dpa(local, &h);
                    self.send(&a);
                    self.down(DPR_RECEIVED);
                    return;
                }
                _ => {
                    self.counters.incr("diameter_command_unsupported");
                    base::error_answer_for(local, &m, result::DIAMETER_COMMAND_UNSUPPORTED, None)
                }
            };
            self.send(&a);
            return;
        }
        let Some((_, commands)) = self.cfg.applications.iter().find(|(a, _)| *a == h.application_id) else {
            self.counters.incr("diameter_application_unsupported");
            let a = base::error_answer_for(local, &m, result::DIAMETER_APPLICATION_UNSUPPORTED, None);
            self.send(&a);
            return;
        };
        if !commands.contains(&h.command_code) {
            self.counters.incr("diameter_command_unsupported");
            let a = base::error_answer_for(local, &m, result::DIAMETER_COMMAND_UNSUPPORTED, None);
            self.send(&a);
            return;
        }
        if self.state == PeerState::Closing {
            // RFC 6733 5.4: we are leaving; tell the peer to go elsewhere.
            let a = base::error_answer_for(local, &m, result::DIAMETER_UNABLE_TO_DELIVER, None);
            self.send(&a);
            return;
        }
        self.events.push_back(PeerEvent::Request(m));
    }
}
