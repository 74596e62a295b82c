//! One SCTP association without I/O (RFC 9260 4-9): the state machine, its
//! timers (T1-init, T2-shutdown, T3-rtx, delayed SACK, heartbeat) and packet
//! assembly. The endpoint demultiplexes packets to it after checking the
//! verification tag, and asks it for packets to send.
//!
//! - [`tx`]: sending, retransmission, congestion control.
//! - [`rx`]: receiving, reassembly, ordered delivery, SACK contents.

pub(crate) mod rx;
pub(crate) mod tx;

use bytes::Bytes;
use mobicore_common::sctp_api::{AssocId, SctpEvent};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::config::EndpointConfig;
use crate::cookie::Cookie;
use crate::wire::packet::HEADER_LEN;
use crate::wire::tlv::{cause, param, Tlv, Tlvs};
use crate::wire::{ChunkRepr, CommonHeader, InitRepr, Packet, SackRepr};
use rx::{DataOutcome, Receiver};
use tx::Sender;

/// Association states (RFC 9260 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    CookieWait,
    CookieEchoed,
    Established,
    ShutdownPending,
    ShutdownSent,
    ShutdownReceived,
    ShutdownAckSent,
    Closed,
}

/// What an association's receiving half holds (RFC 9260 6.2: bounded by the window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveQueue {
    /// Bytes of fragments waiting for reassembly and messages waiting for an earlier SSN.
    pub queued_bytes: usize,
    /// The receive window advertised to the peer; `queued_bytes` never exceeds it.
    pub window: usize,
    /// TSNs received above the cumulative TSN; at most min(window, 2^18).
    pub tsns_above_cum: usize,
}

/// Why a user message was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("no such association")]
    UnknownAssociation,
    #[error("association is not established")]
    NotEstablished,
    #[error("stream {0} is not an outbound stream of this association")]
    InvalidStream(u16),
    #[error("empty user message")]
    Empty,
}

/// The smallest window we advertise: one packet of 1500 bytes (RFC 9260 6.2).
const MIN_RECEIVE_WINDOW: u32 = 1500;

/// Most ERROR and HEARTBEAT ACK chunks queued in answer to a peer; more are not sent.
const MAX_QUEUED_REPORTS: usize = 64;

/// The per-association parameters taken from the endpoint configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    pub rto_initial: Duration,
    pub rto_min: Duration,
    pub rto_max: Duration,
    pub hb_interval: Duration,
    pub path_max_retrans: u32,
    pub max_init_retrans: u32,
    pub outbound_streams: u16,
    pub max_inbound_streams: u16,
    pub mtu: usize,
    pub sack_delay: Duration,
    pub receive_window: u32,
}

impl Params {
    pub fn from_config(c: &EndpointConfig) -> Self {
        Params {
            rto_initial: c.rto_initial,
            rto_min: c.rto_min,
            rto_max: c.rto_max,
            hb_interval: c.heartbeat_interval,
            path_max_retrans: c.path_max_retrans,
            max_init_retrans: c.max_init_retrans,
            outbound_streams: c.outbound_streams.max(1),
            max_inbound_streams: c.max_inbound_streams.max(1),
            mtu: c.mtu.clamp(256, 65_000),
            sack_delay: c.sack_delay,
            receive_window: c.receive_window.max(MIN_RECEIVE_WINDOW),
        }
    }
}

/// A control chunk waiting to be sent; `vtag` set means it goes alone with that tag.
struct Ctrl {
    bytes: Vec<u8>,
    vtag: Option<u32>,
}

pub(crate) struct Association {
    pub id: AssocId,
    pub peer: SocketAddr,
    pub local_port: u16,
    pub state: State,
    pub local_tag: u32,
    pub peer_tag: u32,
    local_initial_tsn: u32,
    p: Params,
    tx: Sender,
    rx: Option<Receiver>,
    in_streams: u16,
    ctrl: VecDeque<Ctrl>,
    rto: Duration,
    srtt: Option<Duration>,
    rttvar: Duration,
    error_count: u32,
    t1: Option<Instant>,
    t1_chunk: Vec<u8>,
    init_count: u32,
    t2: Option<Instant>,
    t3: Option<Instant>,
    sack_deadline: Option<Instant>,
    sack_now: bool,
    ack_owed: bool,
    unacked_packets: u32,
    data_in_packet: bool,
    hb_deadline: Option<Instant>,
    hb_pending: Option<(u64, Instant)>,
    hb_nonce: u64,
    last_activity: Instant,
    pub events: Vec<SctpEvent>,
    delivered: Vec<rx::Delivered>,
    /// The endpoint keeps this association in its transmit queue.
    pub in_tx_queue: bool,
    reports_dropped: u64,
}

impl Association {
    fn blank(
        id: AssocId,
        peer: SocketAddr,
        local_port: u16,
        p: Params,
        local_tag: u32,
        local_tsn: u32,
        now: Instant,
    ) -> Self {
        Association {
            id,
            peer,
            local_port,
            state: State::Closed,
            local_tag,
            peer_tag: 0,
            local_initial_tsn: local_tsn,
            p,
            tx: Sender::new(local_tsn, p.outbound_streams, p.receive_window, p.mtu),
            rx: None,
            in_streams: 0,
            ctrl: VecDeque::new(),
            rto: p.rto_initial,
            srtt: None,
            rttvar: Duration::ZERO,
            error_count: 0,
            t1: None,
            t1_chunk: Vec::new(),
            init_count: 0,
            t2: None,
            t3: None,
            sack_deadline: None,
            sack_now: false,
            ack_owed: false,
            unacked_packets: 0,
            data_in_packet: false,
            hb_deadline: None,
            hb_pending: None,
            hb_nonce: local_tag as u64,
            last_activity: now,
            events: Vec::new(),
            delivered: Vec::new(),
            in_tx_queue: false,
            reports_dropped: 0,
        }
    }

    /// Active open: send INIT and wait for INIT ACK (RFC 9260 5.1 A).
    pub fn connect(
        id: AssocId,
        peer: SocketAddr,
        local_port: u16,
        p: Params,
        local_tag: u32,
        local_tsn: u32,
        now: Instant,
    ) -> Self {
        let mut a = Self::blank(id, peer, local_port, p, local_tag, local_tsn, now);
        let mut params = Vec::new();
        Tlv { ty: param::SUPPORTED_ADDRESS_TYPES, value: &[0, 5] }.push(&mut params);
        let init = ChunkRepr::Init(InitRepr {
            initiate_tag: local_tag,
            a_rwnd: p.receive_window,
            outbound_streams: p.outbound_streams,
            inbound_streams: p.max_inbound_streams,
            initial_tsn: local_tsn,
            params: &params,
        });
        a.t1_chunk = encode(&init);
        a.ctrl.push_back(Ctrl { bytes: a.t1_chunk.clone(), vtag: Some(0) });
        a.state = State::CookieWait;
        a.t1 = Some(now + a.rto);
        a
    }

    /// Passive open from a valid COOKIE ECHO (RFC 9260 5.1 D).
    pub fn from_cookie(id: AssocId, local_port: u16, p: Params, c: &Cookie, now: Instant) -> Self {
        let mut a = Self::blank(id, c.peer, local_port, p, c.local_tag, c.local_initial_tsn, now);
        a.adopt_peer(c.peer_tag, c.peer_initial_tsn, c.peer_a_rwnd, c.outbound_streams, c.inbound_streams);
        a.push_ctrl(&ChunkRepr::CookieAck);
        a.established(now);
        a
    }

    fn adopt_peer(&mut self, peer_tag: u32, peer_tsn: u32, a_rwnd: u32, out_streams: u16, in_streams: u16) {
        self.peer_tag = peer_tag;
        self.in_streams = in_streams;
        self.tx.set_peer(out_streams, a_rwnd);
        self.rx = Some(Receiver::new(peer_tsn, in_streams, self.p.receive_window as usize));
    }

    fn established(&mut self, now: Instant) {
        self.state = State::Established;
        self.t1 = None;
        self.t1_chunk = Vec::new();
        self.error_count = 0;
        self.last_activity = now;
        self.hb_deadline = Some(now + self.p.hb_interval + self.rto);
        self.events.push(SctpEvent::Up {
            assoc: self.id,
            peer: self.peer,
            inbound_streams: self.in_streams,
            outbound_streams: self.tx.out_streams(),
        });
    }

    fn push_ctrl(&mut self, c: &ChunkRepr<'_>) {
        self.ctrl.push_back(Ctrl { bytes: encode(c), vtag: None });
    }

    /// Queue an answer the peer provoked (ERROR, HEARTBEAT ACK), bounded so
    /// that a flood between two transmit rounds cannot grow the queue.
    fn push_report(&mut self, c: &ChunkRepr<'_>) {
        if self.ctrl.len() >= MAX_QUEUED_REPORTS {
            self.reports_dropped += 1;
            return;
        }
        self.push_ctrl(c);
    }

    /// Fragments reneged (RFC 9260 6.2) since the last call.
    pub fn take_reneged(&mut self) -> u64 {
        self.rx.as_mut().map_or(0, Receiver::take_reneged)
    }

    /// Reports not queued since the last call.
    pub fn take_reports_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.reports_dropped)
    }

    fn close(&mut self, reason: String) {
        if self.state == State::Closed {
            return;
        }
        self.state = State::Closed;
        self.t1 = None;
        self.t2 = None;
        self.t3 = None;
        self.sack_deadline = None;
        self.hb_deadline = None;
        self.events.push(SctpEvent::Down { assoc: self.id, reason });
    }

    /// Closed and nothing left to send: the endpoint may forget it.
    pub fn is_finished(&self) -> bool {
        self.state == State::Closed && self.ctrl.is_empty()
    }

    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    fn abort_with(&mut self, cause_code: u16, info: &[u8], reason: String) {
        self.ctrl.clear();
        // Before the INIT ACK we do not know the peer's tag: nothing to send.
        if self.peer_tag != 0 {
            let mut causes = Vec::new();
            Tlv { ty: cause_code, value: info }.push(&mut causes);
            self.push_ctrl(&ChunkRepr::Abort { t: false, causes: &causes });
        }
        self.close(reason);
    }

    // ---- user calls ----

    pub fn send(&mut self, stream: u16, ppid: u32, data: Bytes) -> Result<(), SendError> {
        if !matches!(self.state, State::Established) {
            return Err(SendError::NotEstablished);
        }
        if stream >= self.tx.out_streams() {
            return Err(SendError::InvalidStream(stream));
        }
        if data.is_empty() {
            return Err(SendError::Empty);
        }
        self.tx.enqueue(stream, ppid, data);
        Ok(())
    }

    /// Graceful shutdown (RFC 9260 9.2).
    pub fn shutdown(&mut self, now: Instant) {
        match self.state {
            State::Established => {
                self.state = State::ShutdownPending;
                self.progress_shutdown(now);
            }
            State::CookieWait | State::CookieEchoed => {
                self.abort_with(cause::USER_INITIATED_ABORT, &[], "shut down before it was up".into())
            }
            _ => {}
        }
    }

    pub fn abort(&mut self) {
        if self.state != State::Closed {
            self.abort_with(cause::USER_INITIATED_ABORT, &[], "aborted by the user".into());
        }
    }

    fn progress_shutdown(&mut self, now: Instant) {
        if !self.tx.is_empty() {
            return;
        }
        match self.state {
            State::ShutdownPending => {
                self.send_shutdown();
                self.state = State::ShutdownSent;
                self.t2 = Some(now + self.rto);
                self.error_count = 0;
            }
            State::ShutdownReceived => {
                self.push_ctrl(&ChunkRepr::ShutdownAck);
                self.state = State::ShutdownAckSent;
                self.t2 = Some(now + self.rto);
                self.error_count = 0;
            }
            _ => {}
        }
    }

    fn send_shutdown(&mut self) {
        let cum = self.rx.as_ref().map_or(0, |r| r.cum_tsn());
        self.push_ctrl(&ChunkRepr::Shutdown { cum_tsn_ack: cum });
    }

    // ---- chunk handlers (the endpoint checked the verification tag) ----

    /// INIT ACK in COOKIE-WAIT (RFC 9260 5.1 C).
    pub fn on_init_ack(&mut self, now: Instant, init: &InitRepr<'_>) {
        if self.state != State::CookieWait {
            return; // RFC 9260 5.2.3: discard.
        }
        if init.initiate_tag == 0 || init.outbound_streams == 0 || init.inbound_streams == 0 {
            self.abort_with(cause::INVALID_MANDATORY_PARAMETER, &[], "peer sent an invalid INIT ACK".into());
            return;
        }
        let cookie = Tlvs::new(init.params).flatten().find(|t| t.ty == param::STATE_COOKIE);
        let Some(cookie) = cookie else {
            let mut info = Vec::new();
            info.extend_from_slice(&1u32.to_be_bytes());
            info.extend_from_slice(&param::STATE_COOKIE.to_be_bytes());
            info.extend_from_slice(&[0, 0]);
            self.abort_with(cause::MISSING_MANDATORY_PARAMETER, &info[..6], "INIT ACK without a State Cookie".into());
            return;
        };
        let out = self.p.outbound_streams.min(init.inbound_streams);
        let inb = self.p.max_inbound_streams.min(init.outbound_streams);
        self.adopt_peer(init.initiate_tag, init.initial_tsn, init.a_rwnd, out, inb);
        self.t1_chunk = encode(&ChunkRepr::CookieEcho { cookie: cookie.value });
        self.ctrl.push_back(Ctrl { bytes: self.t1_chunk.clone(), vtag: None });
        self.state = State::CookieEchoed;
        self.init_count = 0;
        self.t1 = Some(now + self.rto);
    }

    /// COOKIE ACK in COOKIE-ECHOED (RFC 9260 5.1 E).
    pub fn on_cookie_ack(&mut self, now: Instant) {
        if self.state == State::CookieEchoed {
            self.established(now);
        }
    }

    /// A COOKIE ECHO for this association whose tags match (RFC 9260 5.2.4 D), or
    /// an INIT collision where our tag matches (5.2.4 B): answer COOKIE ACK.
    pub fn on_matching_cookie(&mut self, now: Instant, c: &Cookie) {
        if matches!(self.state, State::CookieWait | State::CookieEchoed) {
            self.adopt_peer(c.peer_tag, c.peer_initial_tsn, c.peer_a_rwnd, c.outbound_streams, c.inbound_streams);
            self.established(now);
        }
        self.push_ctrl(&ChunkRepr::CookieAck);
    }

    pub fn can_receive_data(&self) -> bool {
        matches!(self.state, State::Established | State::ShutdownPending | State::ShutdownSent)
    }

    /// One DATA chunk; `None` when the association takes no data in its state.
    pub fn on_data(&mut self, d: &crate::wire::DataRepr<'_>) -> Option<DataOutcome> {
        if !self.can_receive_data() {
            return None;
        }
        let rx = self.rx.as_mut()?;
        let outcome = rx.on_data(d, &mut self.delivered);
        self.data_in_packet = true;
        match outcome {
            DataOutcome::Accepted => {}
            DataOutcome::Duplicate => self.sack_now = true,
            DataOutcome::QueueFull | DataOutcome::TsnBeyondWindow => return Some(outcome),
            DataOutcome::InvalidStream => {
                // RFC 9260 6.5: acknowledge and report.
                let mut info = [0u8; 4];
                info[..2].copy_from_slice(&d.stream_id.to_be_bytes());
                let mut causes = Vec::new();
                Tlv { ty: cause::INVALID_STREAM_IDENTIFIER, value: &info }.push(&mut causes);
                self.push_report(&ChunkRepr::Error { causes: &causes });
                self.sack_now = true;
            }
        }
        self.ack_owed = true;
        for m in self.delivered.drain(..) {
            self.events.push(SctpEvent::Data { assoc: self.id, stream: m.stream, ppid: m.ppid, data: m.data });
        }
        Some(outcome)
    }

    pub fn receive_queue(&self) -> ReceiveQueue {
        ReceiveQueue {
            queued_bytes: self.rx.as_ref().map_or(0, Receiver::queued_bytes),
            window: self.p.receive_window as usize,
            tsns_above_cum: self.rx.as_ref().map_or(0, Receiver::tsns_above_cum),
        }
    }

    /// A DATA chunk without user data: ABORT with "No User Data" (RFC 9260 6.2).
    pub fn on_empty_data(&mut self, tsn: u32) {
        self.abort_with(cause::NO_USER_DATA, &tsn.to_be_bytes(), "peer sent DATA without user data".into());
    }

    /// Called once all chunks of a packet were handled: decide when to SACK (RFC 9260 6.2).
    pub fn end_of_packet(&mut self, now: Instant) {
        if !std::mem::take(&mut self.data_in_packet) {
            return;
        }
        self.last_activity = now;
        self.unacked_packets += 1;
        let gaps = self.rx.as_ref().is_some_and(|r| r.has_gaps());
        if self.unacked_packets >= 2 || gaps || self.state != State::Established {
            self.sack_now = true;
        } else if self.sack_deadline.is_none() {
            self.sack_deadline = Some(now + self.p.sack_delay);
        }
    }

    pub fn on_sack(&mut self, now: Instant, s: &SackRepr) {
        if matches!(self.state, State::CookieWait | State::CookieEchoed | State::Closed) {
            return;
        }
        let Some(o) = self.tx.on_sack(now, s) else { return };
        if let Some(rtt) = o.rtt {
            self.update_rto(rtt);
        }
        if o.cum_advanced {
            self.error_count = 0;
            self.last_activity = now;
        }
        if !self.tx.has_outstanding() {
            self.t3 = None;
        } else if o.cum_advanced {
            self.t3 = Some(now + self.rto);
        }
        self.progress_shutdown(now);
    }

    /// RFC 9260 6.3.1.
    fn update_rto(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + diff / 4;
                self.srtt = Some(srtt * 7 / 8 + r / 8);
            }
        }
        let g = Duration::from_millis(1);
        self.rto = (self.srtt.unwrap_or(r) + (self.rttvar * 4).max(g)).clamp(self.p.rto_min, self.p.rto_max);
    }

    fn back_off(&mut self) {
        self.rto = (self.rto * 2).min(self.p.rto_max);
    }

    pub fn on_heartbeat(&mut self, info: &[u8]) {
        if self.state != State::Closed {
            self.push_report(&ChunkRepr::HeartbeatAck { info });
        }
    }

    pub fn on_heartbeat_ack(&mut self, now: Instant, info: &[u8]) {
        let Some(Ok(t)) = Tlvs::new(info).next() else { return };
        if t.ty != param::HEARTBEAT_INFO || t.value.len() != 8 {
            return;
        }
        let nonce = u64::from_be_bytes(t.value.try_into().expect("8 bytes"));
        if let Some((n, sent)) = self.hb_pending {
            if n == nonce {
                self.hb_pending = None;
                self.error_count = 0;
                self.update_rto(now.saturating_duration_since(sent));
                self.hb_deadline = Some(now + self.p.hb_interval + self.rto);
            }
        }
    }

    pub fn on_abort(&mut self, causes: &[u8]) {
        let names: Vec<&str> = Tlvs::new(causes).flatten().map(|c| cause::name(c.ty)).collect();
        self.ctrl.clear();
        self.close(if names.is_empty() {
            "aborted by the peer".into()
        } else {
            format!("aborted by the peer: {}", names.join(", "))
        });
    }

    /// SHUTDOWN (RFC 9260 9.2).
    pub fn on_shutdown(&mut self, now: Instant, cum_tsn_ack: u32) {
        match self.state {
            State::Established | State::ShutdownPending | State::ShutdownReceived => {
                self.tx.on_shutdown_cum_ack(now, cum_tsn_ack);
                self.state = State::ShutdownReceived;
                self.progress_shutdown(now);
            }
            State::ShutdownSent => {
                self.push_ctrl(&ChunkRepr::ShutdownAck);
                self.state = State::ShutdownAckSent;
                self.t2 = Some(now + self.rto);
            }
            _ => {}
        }
    }

    pub fn on_shutdown_ack(&mut self) {
        if matches!(self.state, State::ShutdownSent | State::ShutdownAckSent) {
            self.push_ctrl(&ChunkRepr::ShutdownComplete { t: false });
            self.close("shutdown".into());
        }
    }

    pub fn on_shutdown_complete(&mut self) {
        if self.state == State::ShutdownAckSent {
            self.close("shutdown".into());
        }
    }

    pub fn on_error(&mut self, causes: &[u8]) {
        let stale = Tlvs::new(causes).flatten().any(|c| c.ty == cause::STALE_COOKIE);
        if stale && self.state == State::CookieEchoed {
            self.close("peer reported a stale cookie".into());
        }
    }

    /// Queue an ERROR chunk (e.g. unrecognized chunk types).
    pub fn report_error(&mut self, code: u16, info: &[u8]) {
        let mut causes = Vec::new();
        Tlv { ty: code, value: info }.push(&mut causes);
        self.push_report(&ChunkRepr::Error { causes: &causes });
    }

    // ---- timers ----

    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.t1, self.t2, self.t3, self.sack_deadline, self.hb_deadline].into_iter().flatten().min()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        if self.sack_deadline.is_some_and(|d| d <= now) {
            self.sack_deadline = None;
            self.sack_now = true;
        }
        if self.t1.is_some_and(|d| d <= now) {
            // RFC 9260 5.1 T1-init / T1-cookie expiry.
            self.init_count += 1;
            if self.init_count > self.p.max_init_retrans {
                self.close(match self.state {
                    State::CookieWait => "no answer to INIT".into(),
                    _ => "no answer to COOKIE ECHO".into(),
                });
                return;
            }
            self.back_off();
            let vtag = (self.state == State::CookieWait).then_some(0);
            self.ctrl.push_back(Ctrl { bytes: self.t1_chunk.clone(), vtag });
            self.t1 = Some(now + self.rto);
        }
        if self.t2.is_some_and(|d| d <= now) {
            // RFC 9260 9.2 T2-shutdown expiry.
            self.error_count += 1;
            if self.error_count > self.p.path_max_retrans {
                self.abort_with(cause::PROTOCOL_VIOLATION, &[], "shutdown not answered".into());
                return;
            }
            self.back_off();
            match self.state {
                State::ShutdownSent => self.send_shutdown(),
                State::ShutdownAckSent => self.push_ctrl(&ChunkRepr::ShutdownAck),
                _ => {}
            }
            self.t2 = Some(now + self.rto);
        }
        if self.t3.is_some_and(|d| d <= now) {
            // RFC 9260 6.3.3 T3-rtx expiry.
            self.error_count += 1;
            if self.error_count > self.p.path_max_retrans {
                self.close("peer unreachable: retransmissions exhausted".into());
                return;
            }
            self.back_off();
            self.tx.on_t3_expiry();
            self.t3 = Some(now + self.rto);
        }
        if self.hb_deadline.is_some_and(|d| d <= now) {
            self.heartbeat_timer(now);
        }
    }

    /// RFC 9260 8.3: probe an idle path; an unanswered HEARTBEAT counts as an error.
    fn heartbeat_timer(&mut self, now: Instant) {
        if self.hb_pending.is_some() {
            self.error_count += 1;
            if self.error_count > self.p.path_max_retrans {
                self.close("peer unreachable: heartbeats not answered".into());
                return;
            }
            self.back_off();
        } else {
            let idle_since = self.last_activity + self.p.hb_interval;
            if idle_since > now || self.tx.has_outstanding() {
                self.hb_deadline = Some(idle_since.max(now + self.rto));
                return;
            }
        }
        self.hb_nonce = self.hb_nonce.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut info = Vec::with_capacity(12);
        Tlv { ty: param::HEARTBEAT_INFO, value: &self.hb_nonce.to_be_bytes() }.push(&mut info);
        self.push_ctrl(&ChunkRepr::Heartbeat { info: &info });
        self.hb_pending = Some((self.hb_nonce, now));
        self.hb_deadline = Some(now + self.rto);
    }

    // ---- output ----

    /// Something to send now (the endpoint keeps this association queued while true).
    pub fn wants_transmit(&self) -> bool {
        !self.ctrl.is_empty()
            || (self.sack_now && self.ack_owed)
            || (matches!(self.state, State::Established | State::ShutdownPending | State::ShutdownReceived)
                && self.tx.has_sendable())
    }

    /// Build the next packet into `buf`; false if there is nothing to send.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        buf.resize(HEADER_LEN, 0);
        let mut vtag = self.peer_tag;
        let mut alone = false;
        while let Some(c) = self.ctrl.front() {
            if let Some(v) = c.vtag {
                if buf.len() > HEADER_LEN {
                    break;
                }
                vtag = v;
                alone = true;
            } else if buf.len() > HEADER_LEN && buf.len() + c.bytes.len() > self.p.mtu {
                break;
            }
            let c = self.ctrl.pop_front().expect("front");
            buf.extend_from_slice(&c.bytes);
            if alone {
                break;
            }
        }
        if !alone && self.state != State::Closed {
            let data_ok = matches!(self.state, State::Established | State::ShutdownPending | State::ShutdownReceived);
            let data_waiting = data_ok && self.tx.has_sendable();
            if self.ack_owed && (self.sack_now || data_waiting) {
                if let Some(rx) = self.rx.as_mut() {
                    let room = self.p.mtu.saturating_sub(buf.len() + 16 + 16 * 4) / 4;
                    let sack = rx.build_sack(room.clamp(1, 64));
                    push_chunk(buf, &ChunkRepr::Sack(sack));
                }
                self.ack_owed = false;
                self.sack_now = false;
                self.sack_deadline = None;
                self.unacked_packets = 0;
            }
            if data_waiting && self.tx.fill(now, buf) > 0 {
                self.last_activity = now;
                if self.t3.is_none() {
                    self.t3 = Some(now + self.rto);
                }
            }
        }
        self.sack_now &= self.ack_owed;
        if buf.len() == HEADER_LEN {
            return false;
        }
        let mut p = Packet::new_unchecked(&mut buf[..]);
        CommonHeader { src_port: self.local_port, dst_port: self.peer.port(), verification_tag: vtag }.emit(&mut p);
        p.fill_checksum();
        true
    }

    pub fn local_initial_tsn(&self) -> u32 {
        self.local_initial_tsn
    }
}

fn push_chunk(buf: &mut Vec<u8>, c: &ChunkRepr<'_>) {
    let at = buf.len();
    buf.resize(at + c.buffer_len(), 0);
    c.emit(&mut buf[at..]);
}

pub(crate) fn encode(c: &ChunkRepr<'_>) -> Vec<u8> {
    let mut v = vec![0; c.buffer_len()];
    c.emit(&mut v);
    v
}
