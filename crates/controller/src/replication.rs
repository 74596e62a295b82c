//! Replication by GTP-C replay (seed 000 IV.A, V.A-B): recorded requests
//! are sent to a replica anchor's S/P-GW-C as an MME would send them, each
//! after the previous one's response; the replica's answers never reach
//! the MME. A replica answers with its own S11 TEID, S1-U F-TEID and UE
//! address; later requests for the session are rewritten to its TEID.
//!
//! Sans-I/O like the relay: [`Replicator::start`] and
//! [`Replicator::mirror`] queue requests, [`Replicator::handle_datagram`]
//! takes the replicas' answers, [`Replicator::poll_transmit`] /
//! [`Replicator::poll_event`] give what to send and what finished. T3/N3
//! retransmission is the workspace's [`Transactions`].

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_common::Ebi;
use mobicore_gtp::message::{msg_type, DeleteSessionRequest, Message};
use mobicore_gtp::{GtpMessage, TransactionConfig, Transactions};

use crate::context::ReplicaSession;
use crate::relay::{cause_of, rewrite};

pub type JobId = u64;

/// One request to replay: the recorded bytes and the original S/P-GW's
/// S11 TEID of its session (the header TEID, or for a Create Session the
/// TEID the original gave it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub orig_teid: u32,
    pub bytes: Bytes,
}

/// What a finished job did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobReport {
    pub messages: usize,
    pub sent_bytes: usize,
    /// Replica sessions the job created, by the original's S11 TEID.
    pub created: Vec<(u32, ReplicaSession)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicatorEvent {
    JobDone {
        job: JobId,
        result: Result<JobReport, String>,
    },
    /// A mirrored request was refused or unanswered: the replica of this
    /// session is stale.
    MirrorFailed {
        anchor: SocketAddr,
        orig_teid: u32,
        why: String,
    },
}

struct Job {
    anchor: SocketAddr,
    steps: VecDeque<Step>,
    current: Option<(u8, Step)>,
    report: JobReport,
}

#[derive(Debug)]
enum Token {
    Job(JobId),
    Mirror { anchor: SocketAddr, orig_teid: u32, msg_type: u8 },
    Rollback,
}

pub struct Replicator {
    counters: Counters,
    tx: Transactions<SocketAddr, Token>,
    jobs: HashMap<JobId, Job>,
    next_job: JobId,
    /// (replica anchor, original S11 TEID) -> the replica's session.
    replicas: HashMap<(SocketAddr, u32), ReplicaSession>,
    events: VecDeque<ReplicatorEvent>,
}

impl Replicator {
    pub fn new(cfg: TransactionConfig, counters: Counters) -> Self {
        Replicator {
            counters,
            tx: Transactions::new(cfg),
            jobs: HashMap::new(),
            next_job: 1,
            replicas: HashMap::new(),
            events: VecDeque::new(),
        }
    }

    /// Puts back replicas the store kept.
    pub fn restore(&mut self, anchor: SocketAddr, orig_teid: u32, r: ReplicaSession) {
        self.replicas.insert((anchor, orig_teid), r);
    }

    pub fn replica(&self, anchor: SocketAddr, orig_teid: u32) -> Option<&ReplicaSession> {
        self.replicas.get(&(anchor, orig_teid))
    }

    pub fn replicas(&self) -> impl Iterator<Item = (&(SocketAddr, u32), &ReplicaSession)> {
        self.replicas.iter()
    }

    /// Replays `steps` into the S/P-GW-C at `anchor`, one at a time.
    pub fn start(&mut self, now: Instant, anchor: SocketAddr, steps: Vec<Step>) -> JobId {
        let job = self.next_job;
        self.next_job += 1;
        let report = JobReport::default();
        self.jobs.insert(job, Job { anchor, steps: steps.into(), current: None, report });
        self.next_step(now, job);
        job
    }

    /// Appends a step to a running job (a request the original accepted
    /// while the job ran); false when the job is over.
    pub fn extend(&mut self, job: JobId, step: Step) -> bool {
        match self.jobs.get_mut(&job) {
            Some(j) => {
                j.steps.push_back(step);
                true
            }
            None => false,
        }
    }

    /// Sends an accepted request of a replicated session to its replica
    /// too, so the replica never goes stale. A Create Session (naive
    /// mirroring of a new session) creates the replica entry on success.
    pub fn mirror(&mut self, now: Instant, anchor: SocketAddr, step: Step) {
        let Some(h) = crate::relay::header(&step.bytes) else { return };
        let teid = match h.msg_type {
            msg_type::CREATE_SESSION_REQUEST => None,
            _ => match self.replicas.get(&(anchor, step.orig_teid)) {
                Some(r) => Some(r.sgw_s11_teid),
                None => return,
            },
        };
        let seq = self.tx.next_seq();
        let Some(bytes) = rewrite(&step.bytes, teid, seq) else { return };
        self.counters.incr("replica_mirrored");
        let token = Token::Mirror { anchor, orig_teid: step.orig_teid, msg_type: h.msg_type };
        self.tx.send_request(now, anchor, seq, bytes, token);
    }

    /// Deletes a replica session (move back, or a relocation rolled back).
    pub fn delete(&mut self, now: Instant, anchor: SocketAddr, orig_teid: u32) {
        let Some(r) = self.replicas.remove(&(anchor, orig_teid)) else { return };
        let seq = self.tx.next_seq();
        let body = Message::DeleteSessionRequest(DeleteSessionRequest {
            linked_ebi: Some(Ebi(r.ebi)),
            uli: None,
            indication: None,
        });
        let m = GtpMessage { teid: Some(r.sgw_s11_teid), seq, body };
        self.tx.send_request(now, anchor, seq, m.to_bytes(), Token::Rollback);
    }

    /// A datagram from a replica's S/P-GW-C.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        let m = match GtpMessage::parse(bytes) {
            Ok(m) => m,
            Err(_) => {
                self.counters.incr("replica_malformed");
                return;
            }
        };
        let Some(token) = self.tx.on_response(from, m.seq, m.body.msg_type()) else {
            // Its requests (a Downlink Data Notification) are not for us:
            // the original S/P-GW pages through the MME.
            self.counters.incr("replica_unsolicited");
            return;
        };
        let cause = cause_of(&m.body).unwrap_or(0);
        let accepted = (16..64).contains(&cause);
        match token {
            Token::Job(job) => self.on_job_answer(now, job, from, cause, &m),
            Token::Mirror { orig_teid, msg_type, .. } => {
                if !accepted {
                    self.mirror_failed(from, orig_teid, format!("cause {cause}"));
                } else if msg_type == msg_type::DELETE_SESSION_REQUEST {
                    self.replicas.remove(&(from, orig_teid));
                } else if let Message::CreateSessionResponse(_) = &m.body {
                    if let Some(r) = replica_session(&m.body) {
                        self.replicas.insert((from, orig_teid), r);
                    }
                }
            }
            Token::Rollback => {}
        }
    }

    fn mirror_failed(&mut self, anchor: SocketAddr, orig_teid: u32, why: String) {
        self.counters.incr("replica_mirror_failed");
        self.events.push_back(ReplicatorEvent::MirrorFailed { anchor, orig_teid, why });
    }

    fn on_job_answer(&mut self, now: Instant, job: JobId, from: SocketAddr, cause: u8, m: &GtpMessage) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let Some((t, step)) = j.current.take() else { return };
        if !(16..64).contains(&cause) {
            let why = format!("the replica at {from} refused a replayed message type {t} with cause {cause}");
            return self.fail(now, job, why);
        }
        if t == msg_type::CREATE_SESSION_REQUEST {
            match replica_session(&m.body) {
                Some(r) => {
                    self.replicas.insert((from, step.orig_teid), r);
                    j.report.created.push((step.orig_teid, r));
                }
                None => return self.fail(now, job, "the replica's Create Session Response has no S11 F-TEID".into()),
            }
        }
        if t == msg_type::DELETE_SESSION_REQUEST {
            self.replicas.remove(&(from, step.orig_teid));
        }
        self.next_step(now, job);
    }

    fn next_step(&mut self, now: Instant, job: JobId) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let Some(step) = j.steps.pop_front() else {
            let j = self.jobs.remove(&job).expect("job present");
            self.counters.incr("replication_done");
            self.events.push_back(ReplicatorEvent::JobDone { job, result: Ok(j.report) });
            return;
        };
        let Some(h) = crate::relay::header(&step.bytes) else {
            return self.fail(now, job, "a recorded message is unreadable".into());
        };
        let teid = match h.msg_type {
            msg_type::CREATE_SESSION_REQUEST => None,
            _ => match self.replicas.get(&(j.anchor, step.orig_teid)) {
                Some(r) => Some(r.sgw_s11_teid),
                // A message of a session the replica never had (naive log
                // of a session created before the log began): skipped.
                None => {
                    self.counters.incr("replication_skipped");
                    return self.next_step(now, job);
                }
            },
        };
        let seq = self.tx.next_seq();
        let Some(bytes) = rewrite(&step.bytes, teid, seq) else {
            return self.fail(now, job, "a recorded message cannot be rewritten".into());
        };
        j.report.messages += 1;
        j.report.sent_bytes += bytes.len();
        j.current = Some((h.msg_type, step));
        self.tx.send_request(now, j.anchor, seq, bytes, Token::Job(job));
    }

    /// A job failed: the replica sessions it created are deleted again, so
    /// a failed relocation leaves nothing behind (make-before-break).
    fn fail(&mut self, now: Instant, job: JobId, why: String) {
        let Some(j) = self.jobs.remove(&job) else { return };
        self.counters.incr("replication_failed");
        for (orig, _) in &j.report.created {
            self.delete(now, j.anchor, *orig);
        }
        self.events.push_back(ReplicatorEvent::JobDone { job, result: Err(why) });
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.tx.handle_timeout(now);
        while let Some((_, token)) = self.tx.poll_timed_out() {
            match token {
                Token::Job(job) => {
                    let anchor = self.jobs.get(&job).map(|j| j.anchor);
                    let why = format!("the replica at {anchor:?} did not answer (T3 x N3)");
                    self.fail(now, job, why);
                }
                Token::Mirror { anchor, orig_teid, .. } => {
                    self.mirror_failed(anchor, orig_teid, "no answer (T3 x N3)".into());
                }
                Token::Rollback => self.counters.incr("replica_delete_timeout"),
            }
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.tx.poll_timeout()
    }

    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        self.tx.poll_transmit()
    }

    pub fn poll_event(&mut self) -> Option<ReplicatorEvent> {
        self.events.pop_front()
    }
}

/// The replica's identifiers from its Create Session Response.
fn replica_session(m: &Message) -> Option<ReplicaSession> {
    let Message::CreateSessionResponse(r) = m else { return None };
    let bearer = r.bearer_contexts.first()?;
    let s1u = bearer.s1u_sgw_fteid.as_ref();
    Some(ReplicaSession {
        ebi: bearer.ebi.0,
        sgw_s11_teid: r.sender_fteid.as_ref()?.teid,
        s1u: s1u.and_then(|f| Some((f.teid, f.ipv4?))),
        ue_ipv4: r.paa.as_ref().and_then(|p| p.ipv4),
    })
}
