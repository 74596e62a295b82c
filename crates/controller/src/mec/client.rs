//! The controller's PFCP CP side towards the node in the MEC router role
//! (`[upf] role = "mec"`), sans-I/O: "make rule R of router M this
//! session (or none)" and "UE U's downlink tunnel is this" become PFCP
//! sessions on the node ([`mobicore_pfcp::mec`]), one per rule or UE.
//!
//! - The association is [`crate::association`]'s.
//! - [`MecClient::apply`] establishes, modifies (the new rule replaces the
//!   old in one step on the node: no moment with neither) or deletes the
//!   key's session, and answers with [`MecEvent`]. Changes of one key run
//!   one after the other; changes of different keys run in parallel.
//! - While the association is not up, changes wait, at most
//!   `max_waiting`, and fail after T1 x N1 with the reason; a change that
//!   failed changed nothing the client knows of (a request the node
//!   never answered may still have taken effect there: the owner applies
//!   the key again).
//! - A restarted node (new Recovery Time Stamp) lost every session: they
//!   are established again. A restarted controller has a new Recovery
//!   Time Stamp, so the node drops the old controller's sessions and the
//!   owner applies its rules again.
//!
//! Counter names: `mec_association_up`, `mec_association_rejected`,
//! `mec_association_lost`, `mec_timeout`, `mec_from_unknown_peer`,
//! `mec_malformed`, `mec_unmatched_response`, `mec_unsupported_message`,
//! `mec_sessions_established`, `mec_sessions_modified`,
//! `mec_sessions_deleted`, `mec_refused`, `mec_waiting_full`,
//! `mec_waiting_expired`, `mec_node_restarted`, `mec_reinstall_failed`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_pfcp::mec::{deletion_request, establishment_request, modification_request, pdr_count, MecSession};
use mobicore_pfcp::msg;

use crate::association::{
    cause_text, up_seid, Answer, Association, CounterNames, PeerConfig, ACCEPTED, SESSION_CONTEXT_NOT_FOUND,
};

const NAMES: CounterNames = CounterNames {
    association_up: "mec_association_up",
    association_rejected: "mec_association_rejected",
    association_lost: "mec_association_lost",
    timeout: "mec_timeout",
    from_unknown_peer: "mec_from_unknown_peer",
    malformed: "mec_malformed",
    unmatched_response: "mec_unmatched_response",
    unsupported_message: "mec_unsupported_message",
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MecClientConfig {
    pub pfcp: PeerConfig,
    /// Changes waiting (for the association, or behind another change of
    /// the same key) at most.
    pub max_waiting: usize,
}

/// What one session on the node is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MecKey {
    Rule { router: String, id: String },
    Ue(Ipv4Addr),
}

/// The answer to [`MecClient::apply`] number `request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MecEvent {
    pub request: u64,
    pub key: MecKey,
    pub result: Result<(), MecError>,
}

/// Why a change did not take effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MecError {
    /// The node answered no (its cause).
    #[error("the MEC router node refused: {0}")]
    Refused(String),
    /// No answer, or no association.
    #[error("{0}")]
    Unreachable(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Installed {
    cp_seid: u64,
    up_seid: u64,
    session: MecSession,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Apply { request: u64 },
    Reinstall { cp_seid: u64 },
}

#[derive(Debug)]
struct Change {
    request: u64,
    key: MecKey,
    session: Option<MecSession>,
    /// Failed at this time if the association is still not up.
    deadline: Instant,
}

/// A change sent: what the node's answer completes.
#[derive(Debug)]
struct InFlight {
    key: MecKey,
    step: Step,
}

#[derive(Debug)]
enum Step {
    Establish { cp_seid: u64, session: MecSession },
    Modify { session: MecSession },
    Delete,
}

pub struct MecClient {
    cfg: MecClientConfig,
    counters: Counters,
    assoc: Association<Op>,
    next_cp_seid: u64,
    next_request: u64,
    installed: BTreeMap<MecKey, Installed>,
    by_cp_seid: HashMap<u64, MecKey>,
    in_flight: HashMap<u64, InFlight>,
    /// Keys with a change in flight.
    busy: HashSet<MecKey>,
    waiting: VecDeque<Change>,
    events: VecDeque<MecEvent>,
}

impl MecClient {
    /// `recovery`: our start time, sent as Recovery Time Stamp.
    pub fn new(cfg: MecClientConfig, recovery: SystemTime, counters: Counters) -> Self {
        MecClient {
            assoc: Association::new(cfg.pfcp, NAMES, recovery, counters.clone()),
            cfg,
            counters,
            next_cp_seid: 1,
            next_request: 1,
            installed: BTreeMap::new(),
            by_cp_seid: HashMap::new(),
            in_flight: HashMap::new(),
            busy: HashSet::new(),
            waiting: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Whether the PFCP association with the node is up.
    pub fn associated(&self) -> bool {
        self.assoc.is_up()
    }

    /// The session of `key` on the node, as last accepted.
    pub fn installed(&self, key: &MecKey) -> Option<&MecSession> {
        self.installed.get(key).map(|i| &i.session)
    }

    pub fn installed_len(&self) -> usize {
        self.installed.len()
    }

    /// Sets up the association (TS 29.244 6.2.6.2.1).
    pub fn start(&mut self, now: Instant) {
        self.assoc.start(now);
    }

    /// Makes `key`'s session on the node `session` (none: deleted);
    /// returns the request number its [`MecEvent`] carries.
    pub fn apply(&mut self, now: Instant, key: MecKey, session: Option<MecSession>) -> u64 {
        let request = self.next_request;
        self.next_request += 1;
        if self.waiting.len() >= self.cfg.max_waiting {
            self.counters.incr("mec_waiting_full");
            let why = format!("{} changes already wait for the MEC router node", self.waiting.len());
            self.events.push_back(MecEvent { request, key, result: Err(MecError::Unreachable(why)) });
            return request;
        }
        let deadline = now + self.cfg.pfcp.give_up_after();
        self.waiting.push_back(Change { request, key, session, deadline });
        self.run_waiting(now);
        request
    }

    /// Starts every waiting change whose key has none in flight (one key's
    /// changes keep their order).
    fn run_waiting(&mut self, now: Instant) {
        if !self.assoc.is_up() {
            return;
        }
        let mut blocked = HashSet::new();
        let mut keep = VecDeque::new();
        while let Some(c) = self.waiting.pop_front() {
            if self.busy.contains(&c.key) || blocked.contains(&c.key) {
                blocked.insert(c.key.clone());
                keep.push_back(c);
            } else {
                self.start_change(now, c);
            }
        }
        self.waiting = keep;
    }

    fn start_change(&mut self, now: Instant, c: Change) {
        let node = self.cfg.pfcp.node_id;
        let op = Op::Apply { request: c.request };
        let step = match (self.installed.get(&c.key), c.session) {
            (Some(i), Some(s)) if i.session == s => return self.done(c.request, c.key, Ok(())),
            (None, None) => return self.done(c.request, c.key, Ok(())),
            (None, Some(session)) => {
                let cp_seid = self.next_cp_seid;
                self.next_cp_seid += 1;
                self.assoc.send(now, op, |seq| establishment_request(seq, node, cp_seid, node, &session));
                Step::Establish { cp_seid, session }
            }
            (Some(i), Some(session)) => {
                let (up, old) = (i.up_seid, pdr_count(&i.session));
                self.assoc.send(now, op, |seq| modification_request(seq, up, old, &session));
                Step::Modify { session }
            }
            (Some(i), None) => {
                let up = i.up_seid;
                self.assoc.send(now, op, |seq| deletion_request(seq, up));
                Step::Delete
            }
        };
        self.busy.insert(c.key.clone());
        self.in_flight.insert(c.request, InFlight { key: c.key, step });
    }

    fn done(&mut self, request: u64, key: MecKey, result: Result<(), MecError>) {
        self.events.push_back(MecEvent { request, key, result });
    }

    /// The node's answer to change `request` (`None`: none came).
    fn answered(&mut self, now: Instant, request: u64, answer: Option<(u8, u8, Option<u64>, String)>) {
        let Some(f) = self.in_flight.remove(&request) else { return };
        self.busy.remove(&f.key);
        let result = match (f.step, answer) {
            (
                Step::Establish { cp_seid, session },
                Some((msg::SESSION_ESTABLISHMENT_RESPONSE, ACCEPTED, Some(up), _)),
            ) => {
                self.counters.incr("mec_sessions_established");
                self.by_cp_seid.insert(cp_seid, f.key.clone());
                self.installed.insert(f.key.clone(), Installed { cp_seid, up_seid: up, session });
                Ok(())
            }
            (Step::Modify { session }, Some((msg::SESSION_MODIFICATION_RESPONSE, ACCEPTED, _, _))) => {
                self.counters.incr("mec_sessions_modified");
                if let Some(i) = self.installed.get_mut(&f.key) {
                    i.session = session;
                }
                Ok(())
            }
            (Step::Delete, Some((msg::SESSION_DELETION_RESPONSE, ACCEPTED | SESSION_CONTEXT_NOT_FOUND, _, _))) => {
                self.counters.incr("mec_sessions_deleted");
                if let Some(i) = self.installed.remove(&f.key) {
                    self.by_cp_seid.remove(&i.cp_seid);
                }
                Ok(())
            }
            (_, Some((_, _, _, text))) => {
                self.counters.incr("mec_refused");
                Err(MecError::Refused(text))
            }
            (_, None) => Err(MecError::Unreachable(format!(
                "the MEC router node at {} did not answer (T1 x N1)",
                self.cfg.pfcp.peer
            ))),
        };
        self.done(request, f.key, result);
        self.run_waiting(now);
    }

    /// One datagram from `from`; only the node's address is heard.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        match self.assoc.handle_datagram(now, from, bytes) {
            None => {}
            Some(Answer::Up { restarted }) => {
                if restarted {
                    self.reinstall(now);
                }
                self.run_waiting(now);
            }
            Some(Answer::Response { op, msg_type, cause, ies }) => match op {
                Op::Apply { request } => {
                    let up = up_seid(&ies);
                    self.answered(now, request, Some((msg_type, cause, up, cause_text(cause, &ies))));
                }
                Op::Reinstall { cp_seid } => {
                    let up = (cause == ACCEPTED).then(|| up_seid(&ies)).flatten();
                    self.reinstalled(cp_seid, up, cause);
                }
            },
        }
    }

    /// The node lost its sessions: establish every installed one again.
    fn reinstall(&mut self, now: Instant) {
        self.counters.incr("mec_node_restarted");
        let node = self.cfg.pfcp.node_id;
        let all: Vec<(u64, MecSession)> = self.installed.values().map(|i| (i.cp_seid, i.session.clone())).collect();
        for (cp_seid, s) in all {
            self.assoc.send(now, Op::Reinstall { cp_seid }, |seq| establishment_request(seq, node, cp_seid, node, &s));
        }
    }

    fn reinstalled(&mut self, cp_seid: u64, up: Option<u64>, cause: u8) {
        let Some(key) = self.by_cp_seid.get(&cp_seid).cloned() else { return };
        match up {
            Some(up_seid) => {
                if let Some(i) = self.installed.get_mut(&key) {
                    i.up_seid = up_seid;
                }
            }
            None => {
                self.counters.incr("mec_reinstall_failed");
                tracing::warn!(?key, cause, "re-installing a MEC session on the restarted node failed");
                self.installed.remove(&key);
                self.by_cp_seid.remove(&cp_seid);
            }
        }
    }

    /// Retransmissions, changes given up after T1 x N1, heartbeats,
    /// association retries, changes that waited too long for the association.
    pub fn handle_timeout(&mut self, now: Instant) {
        for op in self.assoc.handle_timeout(now) {
            match op {
                Op::Apply { request } => self.answered(now, request, None),
                Op::Reinstall { cp_seid } => self.reinstalled(cp_seid, None, 0),
            }
        }
        if self.assoc.is_up() {
            return;
        }
        let (late, keep): (VecDeque<_>, VecDeque<_>) =
            std::mem::take(&mut self.waiting).into_iter().partition(|c| c.deadline <= now);
        self.waiting = keep;
        for c in late {
            self.counters.incr("mec_waiting_expired");
            let why = format!("no PFCP association with the MEC router node at {} (T1 x N1)", self.cfg.pfcp.peer);
            self.done(c.request, c.key, Err(MecError::Unreachable(why)));
        }
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let waiting = match self.assoc.is_up() {
            true => None,
            false => self.waiting.iter().map(|c| c.deadline).min(),
        };
        [self.assoc.poll_timeout(), waiting].into_iter().flatten().min()
    }

    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        self.assoc.poll_transmit()
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<MecEvent> {
        self.events.pop_front()
    }
}

impl crate::association::NodeClient for MecClient {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        MecClient::handle_datagram(self, now, from, bytes)
    }
    fn handle_timeout(&mut self, now: Instant) {
        MecClient::handle_timeout(self, now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        MecClient::poll_timeout(self)
    }
    fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        MecClient::poll_transmit(self)
    }
}

#[cfg(test)]
mod tests;
