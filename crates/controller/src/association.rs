//! The controller's side of one PFCP association with a user-plane node
//! (TS 29.244 6.2.6), sans-I/O, shared by the clients that program a node
//! over it: [`crate::steering::SteeringClient`] (the steering switch) and
//! [`crate::mec::MecClient`] (the MEC router).
//!
//! - Association Setup at [`Association::start`] with our Node ID and
//!   Recovery Time Stamp (6.2.6.2.1), again after a rejection, a timeout,
//!   a dead peer or cause "No established PFCP Association" (72).
//! - Heartbeats both ways (6.2.2); ours every `heartbeat_interval`, an
//!   unanswered one (T1 x N1) takes the association down.
//! - Every request is retransmitted every T1 up to N1 times by the one
//!   transaction layer, [`mobicore_gtp::Transactions`] (6.4).
//! - Only the node's address is heard; requests other than Heartbeat are
//!   not ours to answer and are counted.
//! - A new Recovery Time Stamp from the node (at setup or in a heartbeat)
//!   means it restarted and lost every session: the owner is told
//!   ([`Answer::Up`] with `restarted`) to establish them again.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_gtp::transaction::{Incoming, TransactionConfig, Transactions};
use mobicore_pfcp::{decode_view, encode, first, msg, IeRef};
use rs_pfcp::ie::cause::CauseValue;
use rs_pfcp::ie::fseid::Fseid;
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::recovery_time_stamp::RecoveryTimeStamp;
use rs_pfcp::ie::IeType;

/// PFCP causes the clients act on (TS 29.244 8.2.1).
pub const ACCEPTED: u8 = 1;
pub const SESSION_CONTEXT_NOT_FOUND: u8 = 65;
pub const NO_ASSOCIATION: u8 = 72;

/// How the controller reaches one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerConfig {
    /// The node's PFCP address.
    pub peer: SocketAddr,
    /// Our Node ID, also the address of our CP F-SEIDs.
    pub node_id: Ipv4Addr,
    /// T1 and N1 (TS 29.244 6.4).
    pub t1: Duration,
    pub n1: u32,
    pub heartbeat_interval: Duration,
}

impl PeerConfig {
    /// How long a request is tried: T1 x N1.
    pub fn give_up_after(&self) -> Duration {
        self.t1 * self.n1.max(1)
    }
}

/// The counters of one client, under its own names
/// (`steering_association_up`, `mec_association_up`, ...).
#[derive(Debug, Clone, Copy)]
pub struct CounterNames {
    pub association_up: &'static str,
    pub association_rejected: &'static str,
    pub association_lost: &'static str,
    pub timeout: &'static str,
    pub from_unknown_peer: &'static str,
    pub malformed: &'static str,
    pub unmatched_response: &'static str,
    pub unsupported_message: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Down,
    SettingUp,
    Up,
}

/// What a request awaits: ours, or the owner's `Op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<Op> {
    Setup,
    Heartbeat,
    Op(Op),
}

/// What a datagram meant for the owner.
#[derive(Debug)]
pub enum Answer<'a, Op> {
    /// The association is up; `restarted`: the node lost what it held.
    Up { restarted: bool },
    /// The response to the owner's request `op`.
    Response { op: Op, msg_type: u8, cause: u8, ies: Vec<IeRef<'a>> },
}

pub struct Association<Op> {
    cfg: PeerConfig,
    names: CounterNames,
    recovery: SystemTime,
    counters: Counters,
    tx: Transactions<SocketAddr, Token<Op>>,
    state: State,
    /// The node's Recovery Time Stamp at the last Association Setup.
    peer_recovery: Option<SystemTime>,
    /// When to try Association Setup again (association down).
    retry_at: Option<Instant>,
    next_heartbeat: Option<Instant>,
    heartbeat_outstanding: bool,
}

impl<Op: Copy> Association<Op> {
    /// `recovery`: our start time, sent as Recovery Time Stamp.
    pub fn new(cfg: PeerConfig, names: CounterNames, recovery: SystemTime, counters: Counters) -> Self {
        Association {
            tx: Transactions::with_first_seq(TransactionConfig { t3: cfg.t1, n3: cfg.n1 }, first_seq(recovery)),
            cfg,
            names,
            recovery,
            counters,
            state: State::Down,
            peer_recovery: None,
            retry_at: None,
            next_heartbeat: None,
            heartbeat_outstanding: false,
        }
    }

    pub fn config(&self) -> &PeerConfig {
        &self.cfg
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn is_up(&self) -> bool {
        self.state == State::Up
    }

    /// Sets up the association unless it is up or being set up.
    pub fn start(&mut self, now: Instant) {
        if self.state == State::Down {
            self.setup(now);
        }
    }

    fn setup(&mut self, now: Instant) {
        self.state = State::SettingUp;
        self.retry_at = None;
        let ies = [NodeId::new_ipv4(self.cfg.node_id).to_ie(), RecoveryTimeStamp::new(self.recovery).to_ie()];
        self.request(now, msg::ASSOCIATION_SETUP_REQUEST, &ies, Token::Setup);
    }

    fn request(&mut self, now: Instant, t: u8, ies: &[rs_pfcp::ie::Ie], token: Token<Op>) {
        let seq = self.tx.next_seq();
        self.tx.send_request(now, self.cfg.peer, seq, encode(t, None, seq, ies), token);
    }

    /// Sends the owner's request `bytes(seq)`, answered by
    /// [`Answer::Response`] or given up in [`Association::handle_timeout`].
    pub fn send(&mut self, now: Instant, op: Op, bytes: impl FnOnce(u32) -> Vec<u8>) {
        let seq = self.tx.next_seq();
        self.tx.send_request(now, self.cfg.peer, seq, bytes(seq), Token::Op(op));
    }

    /// One datagram from `from`.
    pub fn handle_datagram<'a>(&mut self, now: Instant, from: SocketAddr, bytes: &'a [u8]) -> Option<Answer<'a, Op>> {
        let n = self.names;
        if from.ip() != self.cfg.peer.ip() {
            self.counters.incr(n.from_unknown_peer);
            return None;
        }
        let Ok((h, ies)) = decode_view(bytes) else {
            self.counters.incr(n.malformed);
            return None;
        };
        if h.version != 1 {
            self.counters.incr(n.malformed);
            return None;
        }
        if h.msg_type == msg::HEARTBEAT_REQUEST {
            // TS 29.244 6.2.2: answered with our Recovery Time Stamp.
            if self.tx.on_request(now, from, h.seq, bytes) == Incoming::New {
                let b = encode(msg::HEARTBEAT_RESPONSE, None, h.seq, &[RecoveryTimeStamp::new(self.recovery).to_ie()]);
                self.tx.answer(now, from, h.seq, b);
                self.check_recovery(now, &ies);
            }
            return None;
        }
        if msg::is_request(h.msg_type) {
            self.counters.incr(n.unsupported_message);
            return None;
        }
        let Some(token) = self.tx.on_response(from, h.seq, h.msg_type) else {
            self.counters.incr(n.unmatched_response);
            return None;
        };
        let cause = first(&ies, IeType::Cause).and_then(|c| c.payload.first().copied()).unwrap_or(0);
        if cause == NO_ASSOCIATION {
            self.lost(now);
        }
        match token {
            Token::Setup => self.setup_answered(now, cause, &ies),
            Token::Heartbeat => {
                self.heartbeat_outstanding = false;
                self.check_recovery(now, &ies);
                None
            }
            Token::Op(op) => Some(Answer::Response { op, msg_type: h.msg_type, cause, ies }),
        }
    }

    fn setup_answered<'a>(&mut self, now: Instant, cause: u8, ies: &[IeRef]) -> Option<Answer<'a, Op>> {
        if cause != ACCEPTED {
            self.counters.incr(self.names.association_rejected);
            tracing::warn!(node = %self.cfg.peer, cause, "the node rejected the PFCP association");
            self.state = State::Down;
            self.retry_at = Some(now + self.cfg.heartbeat_interval);
            return None;
        }
        let theirs = recovery_in(ies);
        let restarted = self.peer_recovery.is_some() && theirs.is_some() && theirs != self.peer_recovery;
        self.peer_recovery = theirs.or(self.peer_recovery);
        self.state = State::Up;
        self.retry_at = None;
        self.heartbeat_outstanding = false;
        self.next_heartbeat = Some(now + self.cfg.heartbeat_interval);
        self.counters.incr(self.names.association_up);
        tracing::info!(node = %self.cfg.peer, "PFCP association up");
        Some(Answer::Up { restarted })
    }

    /// A Recovery Time Stamp other than the one of our association: the
    /// node restarted and holds neither it nor our sessions; set up again.
    fn check_recovery(&mut self, now: Instant, ies: &[IeRef]) {
        let theirs = recovery_in(ies);
        if self.state == State::Up && theirs.is_some() && theirs != self.peer_recovery {
            self.lost(now);
        }
    }

    fn lost(&mut self, now: Instant) {
        if self.state == State::Up {
            self.counters.incr(self.names.association_lost);
            tracing::warn!(node = %self.cfg.peer, "PFCP association lost");
            self.state = State::Down;
            self.next_heartbeat = None;
            self.setup(now);
        }
    }

    /// Retransmissions, heartbeats, setup retries; returns the owner's
    /// requests given up after T1 x N1.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Op> {
        self.tx.handle_timeout(now);
        let mut given_up = Vec::new();
        while let Some((_, token)) = self.tx.poll_timed_out() {
            self.counters.incr(self.names.timeout);
            match token {
                Token::Setup => {
                    self.state = State::Down;
                    self.retry_at = Some(now + self.cfg.t1);
                }
                Token::Heartbeat => {
                    // TS 29.244 6.2.2: the peer is considered down.
                    self.heartbeat_outstanding = false;
                    self.lost(now);
                }
                Token::Op(op) => given_up.push(op),
            }
        }
        if self.state == State::Down && self.retry_at.is_some_and(|t| t <= now) {
            self.setup(now);
        }
        if self.state == State::Up && !self.heartbeat_outstanding && self.next_heartbeat.is_some_and(|t| t <= now) {
            self.heartbeat_outstanding = true;
            self.next_heartbeat = Some(now + self.cfg.heartbeat_interval);
            let ies = [RecoveryTimeStamp::new(self.recovery).to_ie()];
            self.request(now, msg::HEARTBEAT_REQUEST, &ies, Token::Heartbeat);
        }
        given_up
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let heartbeat = match (self.state, self.heartbeat_outstanding) {
            (State::Up, false) => self.next_heartbeat,
            _ => None,
        };
        let retry = match self.state {
            State::Down => self.retry_at,
            _ => None,
        };
        [self.tx.poll_timeout(), heartbeat, retry].into_iter().flatten().min()
    }

    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        self.tx.poll_transmit()
    }
}

/// Our first sequence number, drawn from our Recovery Time Stamp: a
/// restarted controller on the same address and port must not have its
/// first requests taken for retransmissions of its predecessor's (the
/// node keeps answers T1 x N1 for duplicates, TS 29.244 6.4).
fn first_seq(recovery: SystemTime) -> u32 {
    let t = recovery.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let x = t.as_secs().wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(t.subsec_nanos());
    ((x >> 40) as u32).max(1)
}

/// The node's SEID in the F-SEID of an establishment answer.
pub fn up_seid(ies: &[IeRef]) -> Option<u64> {
    first(ies, IeType::Fseid).and_then(|f| Fseid::unmarshal(f.payload).ok()).map(|f| f.seid.into())
}

fn recovery_in(ies: &[IeRef]) -> Option<SystemTime> {
    first(ies, IeType::RecoveryTimeStamp)
        .and_then(|r| RecoveryTimeStamp::unmarshal(r.payload).ok())
        .map(|r| r.timestamp)
}

/// "cause 73 (RuleCreationModificationFailure), offending IE 56, failed rule PDR 1".
pub fn cause_text(cause: u8, ies: &[IeRef]) -> String {
    let mut s = format!("cause {cause} ({:?})", CauseValue::from(cause));
    if let Some(o) = first(ies, IeType::OffendingIe).and_then(|o| o.payload.get(..2)) {
        s.push_str(&format!(", offending IE {}", u16::from_be_bytes([o[0], o[1]])));
    }
    if let Some(f) = first(ies, IeType::FailedRuleId)
        .and_then(|f| rs_pfcp::ie::failed_rule_id::FailedRuleId::unmarshal(f.payload).ok())
    {
        s.push_str(&format!(", failed rule {}", f.rule_id()));
    }
    s
}

/// What drives a client of one node: the shell's loop, or the tests'
/// [`testing::Link`].
pub trait NodeClient {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]);
    fn handle_timeout(&mut self, now: Instant);
    fn poll_timeout(&self) -> Option<Instant>;
    fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)>;
}

#[cfg(test)]
pub(crate) mod testing {
    use super::NodeClient;
    use mobicore_common::counters::Counters;
    use mobicore_upf::config::UpfConfig;
    use mobicore_upf::{MemoryPlane, UpfCore};
    use std::net::SocketAddr;
    use std::time::{Duration, Instant, SystemTime};

    /// A Recovery Time Stamp `s` seconds into the tests' epoch.
    pub(crate) fn epoch(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(3_900_000_000 - 2_208_988_800 + s)
    }

    /// A client and the real sans-I/O node (memory plane) under a virtual
    /// clock, and what is lost on the way: no sockets, no sleeps.
    pub(crate) struct Link<C> {
        pub client: C,
        pub node: UpfCore,
        pub plane: MemoryPlane,
        pub now: Instant,
        pub node_addr: SocketAddr,
        pub me: SocketAddr,
        /// Datagrams to the node / to the client still to lose.
        pub lose_to_node: usize,
        pub lose_to_client: usize,
        /// Every datagram the client sent.
        pub sent: Vec<Vec<u8>>,
    }

    impl<C: NodeClient> Link<C> {
        pub(crate) fn with(client: C, cfg: UpfConfig, me: SocketAddr) -> Self {
            let plane = MemoryPlane::new();
            let node_addr = cfg.pfcp;
            let node = UpfCore::new(cfg, Box::new(plane.clone()), epoch(0), Counters::new());
            let (now, sent) = (Instant::now(), Vec::new());
            Link { client, node, plane, now, node_addr, me, lose_to_node: 0, lose_to_client: 0, sent }
        }

        /// Carries datagrams both ways until neither side sends.
        pub(crate) fn drive(&mut self) {
            for _ in 0..1000 {
                let mut moved = false;
                while let Some((to, b)) = self.client.poll_transmit() {
                    assert_eq!(to, self.node_addr);
                    moved = true;
                    self.sent.push(b.to_vec());
                    if self.lose_to_node > 0 {
                        self.lose_to_node -= 1;
                        continue;
                    }
                    self.node.handle_datagram(self.now, self.me, &b);
                }
                while let Some((to, b)) = self.node.poll_transmit() {
                    assert_eq!(to, self.me);
                    moved = true;
                    if self.lose_to_client > 0 {
                        self.lose_to_client -= 1;
                        continue;
                    }
                    self.client.handle_datagram(self.now, self.node_addr, &b);
                }
                if !moved {
                    return;
                }
            }
            panic!("endless exchange");
        }

        /// Jumps to the next deadline of either side, fires it, drives.
        pub(crate) fn step(&mut self) {
            let next = [self.client.poll_timeout(), self.node.poll_timeout()].into_iter().flatten().min();
            self.now = self.now.max(next.expect("a deadline"));
            self.client.handle_timeout(self.now);
            self.node.handle_timeout(self.now);
            self.drive();
        }

        /// A new node in place of the old (a restart), Recovery Time
        /// Stamp `recovery`.
        pub(crate) fn restart_node(&mut self, cfg: UpfConfig, recovery: SystemTime) {
            self.plane = MemoryPlane::new();
            self.node = UpfCore::new(cfg, Box::new(self.plane.clone()), recovery, Counters::new());
        }
    }
}
