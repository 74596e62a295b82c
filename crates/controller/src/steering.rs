//! The controller's PFCP CP side towards one steering switch (a UPF node
//! in the steering role, issue 11), sans-I/O: it turns "divert relocation
//! N" into one PFCP session per moved PDN connection
//! ([`mobicore_pfcp::steering`]) and "undivert" into their deletion.
//!
//! - Association Setup at [`SteeringClient::start`] with our Node ID and
//!   Recovery Time Stamp (TS 29.244 6.2.6.2.1), again after a rejection, a
//!   timeout, a dead peer or cause "No established PFCP Association".
//! - Heartbeats both ways (6.2.2); ours every `heartbeat_interval`, an
//!   unanswered one (T1 x N1) takes the association down.
//! - Every request is retransmitted every T1 up to N1 times by the one
//!   transaction layer, [`mobicore_gtp::Transactions`] (6.4).
//! - All sessions of a relocation are installed, or none: when one is
//!   refused, the ones already in place are deleted (or modified back)
//!   and the result is the refusal's cause.
//! - Edge to edge: a new relocation of the same UE and flow takes over
//!   the sessions of the one it supersedes by a Session Modification (the
//!   switch refuses two sessions with the same match, cause 73, and a
//!   modification swaps the rules in one step: make-before-break with no
//!   window where the UE's traffic goes to neither anchor); sessions of
//!   the superseded relocation that were not taken over are deleted once
//!   the new ones are in force.
//! - Requests of one UE run one after the other (a relocation's requests
//!   run in parallel); while the association is not up they wait, at most
//!   `max_waiting` of them, and fail after T1 x N1 with the reason.
//! - The switch restarting (a new Recovery Time Stamp at Association
//!   Setup) lost every session: they are established again from
//!   [`SteeringClient::installed`]. A restarted controller gets a new
//!   Recovery Time Stamp, so the switch drops the old controller's
//!   sessions itself and [`crate::ControllerCore::restore`] diverts the
//!   relocations in force again.
//!
//! Counter names: `steering_association_up`, `steering_association_rejected`,
//! `steering_association_lost`, `steering_switch_restarted`,
//! `steering_timeout`, `steering_from_unknown_peer`, `steering_malformed`,
//! `steering_unmatched_response`, `steering_unsupported_message`,
//! `steering_sessions_established`, `steering_sessions_modified`,
//! `steering_sessions_deleted`, `steering_refused`, `steering_rollback`,
//! `steering_waiting_full`, `steering_waiting_expired`,
//! `steering_reinstall_failed`, `steering_cleanup_failed`.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_gtp::transaction::{Incoming, TransactionConfig, Transactions};
use mobicore_pfcp::steering::{deletion_request, establishment_request, modification_request};
/// What a diversion is, as the switch reads it.
pub use mobicore_pfcp::steering::{Diversion, FlowFilter};
use mobicore_pfcp::{decode_view, encode, first, msg, IeRef};
use rs_pfcp::ie::cause::CauseValue;
use rs_pfcp::ie::fseid::Fseid;
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::recovery_time_stamp::RecoveryTimeStamp;
use rs_pfcp::ie::IeType;
use serde::{Deserialize, Serialize};

use crate::context::Mode;
use crate::core::{FlowSpec, Relocation};

/// PFCP causes we act on (TS 29.244 8.2.1).
const ACCEPTED: u8 = 1;
const SESSION_CONTEXT_NOT_FOUND: u8 = 65;
const NO_ASSOCIATION: u8 = 72;

/// How the client reaches its switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteeringClientConfig {
    /// The switch's PFCP address.
    pub peer: SocketAddr,
    /// Our Node ID, also the address of our CP F-SEIDs.
    pub node_id: Ipv4Addr,
    /// T1 and N1 (TS 29.244 6.4).
    pub t1: Duration,
    pub n1: u32,
    pub heartbeat_interval: Duration,
    /// Divert / undivert requests waiting (for the association, or for an
    /// earlier request of the same UE) at most.
    pub max_waiting: usize,
}

/// What the client tells its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SteeringEvent {
    Diverted { relocation: u64, result: Result<(), String> },
    Undiverted { relocation: u64, result: Result<(), String> },
}

/// One PFCP session on the switch: our SEID, the switch's, what it diverts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Installed {
    pub cp_seid: u64,
    pub up_seid: u64,
    pub diversion: Diversion,
}

/// The diversions of a relocation, one per moved session: the UE's
/// address and the original anchor's S1-U address as the eNB knows them,
/// the replica's S1-U as the new anchor; selective replication translates
/// the TEID and the UE's address to the replica's, naive keeps the TEID
/// and translates the address only where the replica's differs.
pub fn diversions_of(r: &Relocation) -> Result<Vec<Diversion>, String> {
    let flow = r.flow.as_ref().map(flow_filter);
    let mut v = Vec::with_capacity(r.sessions.len());
    for s in &r.sessions {
        let teid = s.sgw_s11_teid;
        let ue = s.ue_ipv4.ok_or_else(|| format!("session {teid:#x} has no IPv4 address to divert"))?;
        let (_, origin) = s.origin_s1u.ok_or_else(|| format!("session {teid:#x} has no original S1-U F-TEID"))?;
        let rep = s.replica.ok_or_else(|| format!("session {teid:#x} has no replica"))?;
        let (rep_teid, anchor) =
            rep.s1u.ok_or_else(|| format!("the replica of session {teid:#x} has no S1-U F-TEID"))?;
        let (anchor_teid, anchor_ue) = match r.mode {
            Mode::Selective => {
                let at = rep.ue_ipv4.ok_or_else(|| format!("the replica of session {teid:#x} has no UE address"))?;
                (Some(rep_teid), Some(at))
            }
            Mode::Naive => (None, rep.ue_ipv4.filter(|a| *a != ue)),
        };
        v.push(Diversion { ue, flow, anchor, anchor_teid, anchor_ue, origin });
    }
    Ok(v)
}

/// A relocation's flow as the switch's filter.
pub fn flow_filter(f: &FlowSpec) -> FlowFilter {
    FlowFilter {
        protocol: f.protocol,
        remote: f.remote.map(|a| (a, f.remote_prefix.unwrap_or(32))),
        ue_ports: f.ue_port.map(|p| (p, p)),
        remote_ports: f.remote_port.map(|p| (p, p)),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Association {
    Down,
    SettingUp,
    Up,
}

/// A request awaiting its response (the transaction layer's token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Setup,
    Heartbeat,
    /// Step `step` of job `job`.
    Step {
        job: u64,
        step: usize,
    },
    /// A rollback request of job `job`.
    Undo {
        job: u64,
    },
    /// Re-establishing session `cp_seid` of `relocation` on a restarted switch.
    Reinstall {
        relocation: u64,
        cp_seid: u64,
    },
    /// Deleting a session no relocation holds any more.
    Cleanup,
}

#[derive(Debug, Clone)]
enum Request {
    Divert(Vec<Diversion>),
    Undivert,
}

/// A divert or undivert waiting to run.
#[derive(Debug, Clone)]
struct Waiting {
    relocation: u64,
    request: Request,
    /// Failed at this time if the association is still not up.
    deadline: Instant,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Establish {
        cp_seid: u64,
        d: Diversion,
    },
    /// Replace the diversion of session `s`, held by relocation `owner`.
    Modify {
        owner: u64,
        s: Installed,
        d: Diversion,
    },
    /// Already in place as asked.
    Keep {
        s: Installed,
    },
    Delete {
        s: Installed,
    },
}

struct Job {
    relocation: u64,
    divert: bool,
    ues: HashSet<Ipv4Addr>,
    steps: Vec<(Step, Option<Result<u64, String>>)>,
    /// Requests still unanswered (steps, then rollback requests).
    pending: usize,
    /// Why the job failed: set when rolling back.
    failed: Option<String>,
}

pub struct SteeringClient {
    cfg: SteeringClientConfig,
    recovery: SystemTime,
    counters: Counters,
    tx: Transactions<SocketAddr, Op>,
    association: Association,
    /// The switch's Recovery Time Stamp at the last Association Setup.
    peer_recovery: Option<SystemTime>,
    /// When to try Association Setup again (association down).
    retry_at: Option<Instant>,
    next_heartbeat: Option<Instant>,
    heartbeat_outstanding: bool,
    next_cp_seid: u64,
    next_job: u64,
    /// What each relocation has on the switch.
    installed: BTreeMap<u64, Vec<Installed>>,
    /// Sessions to delete once the association is up.
    orphans: Vec<Installed>,
    jobs: BTreeMap<u64, Job>,
    waiting: VecDeque<Waiting>,
    events: VecDeque<SteeringEvent>,
}

impl SteeringClient {
    /// `recovery`: our start time, sent as Recovery Time Stamp.
    pub fn new(cfg: SteeringClientConfig, recovery: SystemTime, counters: Counters) -> Self {
        SteeringClient {
            tx: Transactions::with_first_seq(TransactionConfig { t3: cfg.t1, n3: cfg.n1 }, first_seq(recovery)),
            cfg,
            recovery,
            counters,
            association: Association::Down,
            peer_recovery: None,
            retry_at: None,
            next_heartbeat: None,
            heartbeat_outstanding: false,
            next_cp_seid: 1,
            next_job: 1,
            installed: BTreeMap::new(),
            orphans: Vec::new(),
            jobs: BTreeMap::new(),
            waiting: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    pub fn config(&self) -> &SteeringClientConfig {
        &self.cfg
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Whether the PFCP association with the switch is up.
    pub fn associated(&self) -> bool {
        self.association == Association::Up
    }

    /// The sessions each relocation has on the switch.
    pub fn installed(&self) -> &BTreeMap<u64, Vec<Installed>> {
        &self.installed
    }

    /// Sets up the association (TS 29.244 6.2.6.2.1).
    pub fn start(&mut self, now: Instant) {
        if self.association == Association::Down {
            self.setup(now);
        }
    }

    fn setup(&mut self, now: Instant) {
        self.association = Association::SettingUp;
        self.retry_at = None;
        let ies = [NodeId::new_ipv4(self.cfg.node_id).to_ie(), RecoveryTimeStamp::new(self.recovery).to_ie()];
        self.request(now, msg::ASSOCIATION_SETUP_REQUEST, None, &ies, Op::Setup);
    }

    fn request(&mut self, now: Instant, t: u8, seid: Option<u64>, ies: &[rs_pfcp::ie::Ie], op: Op) {
        let seq = self.tx.next_seq();
        self.tx.send_request(now, self.cfg.peer, seq, encode(t, seid, seq, ies), op);
    }

    fn send(&mut self, now: Instant, op: Op, bytes: impl FnOnce(u32) -> Vec<u8>) {
        let seq = self.tx.next_seq();
        self.tx.send_request(now, self.cfg.peer, seq, bytes(seq), op);
    }

    /// Installs the diversions of `relocation` (one PFCP session each);
    /// answered by [`SteeringEvent::Diverted`].
    pub fn divert(&mut self, now: Instant, relocation: u64, diversions: Vec<Diversion>) {
        self.enqueue(now, relocation, Request::Divert(diversions));
    }

    /// Removes the diversions of `relocation`; answered by
    /// [`SteeringEvent::Undiverted`] (at once when it has none).
    pub fn undivert(&mut self, now: Instant, relocation: u64) {
        self.enqueue(now, relocation, Request::Undivert);
    }

    fn enqueue(&mut self, now: Instant, relocation: u64, request: Request) {
        if self.waiting.len() >= self.cfg.max_waiting {
            self.counters.incr("steering_waiting_full");
            let why = format!("{} requests already wait for the steering switch", self.waiting.len());
            self.report(matches!(request, Request::Divert(_)), relocation, Err(why));
            return;
        }
        let deadline = now + self.cfg.t1 * self.cfg.n1.max(1);
        self.waiting.push_back(Waiting { relocation, request, deadline });
        self.run_waiting(now);
    }

    fn report(&mut self, divert: bool, relocation: u64, result: Result<(), String>) {
        self.events.push_back(match divert {
            true => SteeringEvent::Diverted { relocation, result },
            false => SteeringEvent::Undiverted { relocation, result },
        });
    }

    fn ues_of(&self, w: &Waiting) -> HashSet<Ipv4Addr> {
        match &w.request {
            Request::Divert(ds) => ds.iter().map(|d| d.ue).collect(),
            Request::Undivert => {
                self.installed.get(&w.relocation).into_iter().flatten().map(|s| s.diversion.ue).collect()
            }
        }
    }

    /// Starts every waiting request that touches no UE of a running job
    /// or of an earlier waiting request (one UE's requests keep their order).
    fn run_waiting(&mut self, now: Instant) {
        if self.association != Association::Up {
            return;
        }
        let mut busy: HashSet<Ipv4Addr> = self.jobs.values().flat_map(|j| j.ues.iter().copied()).collect();
        let mut keep = VecDeque::new();
        while let Some(w) = self.waiting.pop_front() {
            let ues = self.ues_of(&w);
            let free = ues.is_disjoint(&busy);
            busy.extend(ues.iter().copied());
            match free {
                true => self.start_job(now, w, ues),
                false => keep.push_back(w),
            }
        }
        self.waiting = keep;
    }

    /// The installed session whose uplink match (UE, flow) is `d`'s.
    fn holder_of(&self, d: &Diversion) -> Option<(u64, Installed)> {
        self.installed.iter().find_map(|(&r, v)| {
            v.iter().find(|s| s.diversion.ue == d.ue && s.diversion.flow == d.flow).map(|s| (r, *s))
        })
    }

    fn start_job(&mut self, now: Instant, w: Waiting, ues: HashSet<Ipv4Addr>) {
        let divert = matches!(w.request, Request::Divert(_));
        let steps: Vec<Step> = match w.request {
            Request::Divert(ds) => ds
                .into_iter()
                .map(|d| match self.holder_of(&d) {
                    Some((owner, s)) if owner == w.relocation && s.diversion == d => Step::Keep { s },
                    Some((owner, s)) => Step::Modify { owner, s, d },
                    None => {
                        let cp_seid = self.next_cp_seid;
                        self.next_cp_seid += 1;
                        Step::Establish { cp_seid, d }
                    }
                })
                .collect(),
            Request::Undivert => self
                .installed
                .remove(&w.relocation)
                .unwrap_or_default()
                .into_iter()
                .map(|s| Step::Delete { s })
                .collect(),
        };
        let id = self.next_job;
        self.next_job += 1;
        let mut job = Job { relocation: w.relocation, divert, ues, steps: Vec::new(), pending: 0, failed: None };
        for (i, step) in steps.into_iter().enumerate() {
            let op = Op::Step { job: id, step: i };
            let (node, me) = (self.cfg.node_id, self.cfg.node_id);
            let done = match step {
                Step::Establish { cp_seid, d } => {
                    self.send(now, op, |seq| establishment_request(seq, node, cp_seid, me, &d));
                    None
                }
                Step::Modify { s, d, .. } => {
                    self.send(now, op, |seq| modification_request(seq, s.up_seid, &d));
                    None
                }
                Step::Delete { s } => {
                    self.send(now, op, |seq| deletion_request(seq, s.up_seid));
                    None
                }
                Step::Keep { s } => Some(Ok(s.up_seid)),
            };
            job.pending += usize::from(done.is_none());
            job.steps.push((step, done));
        }
        self.jobs.insert(id, job);
        self.settle(now, id);
    }

    /// The outcome of step `step` of job `id`: the UP SEID, or why not.
    fn step_done(&mut self, now: Instant, id: u64, step: usize, outcome: Result<u64, String>) {
        let Some(job) = self.jobs.get_mut(&id) else { return };
        let Some(slot) = job.steps.get_mut(step) else { return };
        if slot.1.is_some() || job.failed.is_some() {
            return;
        }
        slot.1 = Some(outcome);
        job.pending = job.pending.saturating_sub(1);
        self.settle(now, id);
    }

    /// A rollback request of job `id` answered (or given up).
    fn undo_done(&mut self, now: Instant, id: u64, ok: bool) {
        if !ok {
            self.counters.incr("steering_cleanup_failed");
        }
        let Some(job) = self.jobs.get_mut(&id) else { return };
        job.pending = job.pending.saturating_sub(1);
        self.settle(now, id);
    }

    /// Finishes job `id` once nothing of it is outstanding: commits it, or
    /// rolls back what is in place and then reports the failure.
    fn settle(&mut self, now: Instant, id: u64) {
        let Some(job) = self.jobs.get(&id) else { return };
        if job.pending > 0 {
            return;
        }
        let Some(job) = self.jobs.remove(&id) else { return };
        if let Some(why) = job.failed {
            self.report(job.divert, job.relocation, Err(why));
            return self.run_waiting(now);
        }
        let why = job.steps.iter().find_map(|(_, o)| o.as_ref().and_then(|o| o.as_ref().err())).cloned();
        match (job.divert, why) {
            (false, why) => {
                self.report(false, job.relocation, why.map_or(Ok(()), Err));
            }
            (true, None) => self.commit(now, &job),
            (true, Some(why)) => {
                // Undo what is in place, then report.
                let mut undo = 0;
                for (step, outcome) in &job.steps {
                    let Some(Ok(up_seid)) = outcome else { continue };
                    match *step {
                        Step::Establish { .. } => {
                            self.send(now, Op::Undo { job: id }, |seq| deletion_request(seq, *up_seid));
                            undo += 1;
                        }
                        Step::Modify { s, .. } => {
                            self.send(now, Op::Undo { job: id }, |seq| {
                                modification_request(seq, s.up_seid, &s.diversion)
                            });
                            undo += 1;
                        }
                        Step::Keep { .. } | Step::Delete { .. } => {}
                    }
                }
                if undo > 0 {
                    self.counters.incr("steering_rollback");
                }
                let job = Job { pending: undo, failed: Some(why), ..job };
                self.jobs.insert(id, job);
                return self.settle(now, id);
            }
        }
        self.run_waiting(now);
    }

    /// A diversion job whose every step succeeded: the relocation now holds
    /// its sessions; those it took over leave their former relocation, and
    /// what a superseded relocation (or this one's earlier diversion) still
    /// holds is deleted: the new diversion is in force first.
    fn commit(&mut self, now: Instant, job: &Job) {
        let mut now_held = Vec::new();
        let mut superseded = HashSet::new();
        let mut reused = HashSet::new();
        for (step, outcome) in &job.steps {
            let Some(Ok(up_seid)) = outcome else { continue };
            match *step {
                Step::Establish { cp_seid, d } => now_held.push(Installed { cp_seid, up_seid: *up_seid, diversion: d }),
                Step::Modify { owner, s, d } => {
                    if let Some(v) = self.installed.get_mut(&owner) {
                        v.retain(|o| o.up_seid != s.up_seid);
                    }
                    if owner != job.relocation {
                        superseded.insert(owner);
                    }
                    reused.insert(s.up_seid);
                    now_held.push(Installed { diversion: d, ..s });
                }
                Step::Keep { s } => {
                    reused.insert(s.up_seid);
                    now_held.push(s);
                }
                Step::Delete { .. } => {}
            }
        }
        let mut gone: Vec<Installed> = self.installed.remove(&job.relocation).unwrap_or_default();
        for o in superseded {
            gone.extend(self.installed.remove(&o).unwrap_or_default());
        }
        for s in gone.into_iter().filter(|s| !reused.contains(&s.up_seid)) {
            self.send(now, Op::Cleanup, |seq| deletion_request(seq, s.up_seid));
        }
        self.installed.insert(job.relocation, now_held);
        self.report(true, job.relocation, Ok(()));
    }

    /// One datagram from `from`; only the switch's address is heard.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        if from.ip() != self.cfg.peer.ip() {
            self.counters.incr("steering_from_unknown_peer");
            return;
        }
        let Ok((h, ies)) = decode_view(bytes) else {
            self.counters.incr("steering_malformed");
            return;
        };
        if h.version != 1 {
            self.counters.incr("steering_malformed");
            return;
        }
        if h.msg_type == msg::HEARTBEAT_REQUEST {
            // TS 29.244 6.2.2: answered with our Recovery Time Stamp.
            if self.tx.on_request(now, from, h.seq) == Incoming::New {
                let b = encode(msg::HEARTBEAT_RESPONSE, None, h.seq, &[RecoveryTimeStamp::new(self.recovery).to_ie()]);
                self.tx.answer(now, from, h.seq, b);
                self.check_recovery(now, &ies);
            }
            return;
        }
        if msg::is_request(h.msg_type) {
            self.counters.incr("steering_unsupported_message");
            return;
        }
        let Some(op) = self.tx.on_response(from, h.seq) else {
            self.counters.incr("steering_unmatched_response");
            return;
        };
        let cause = first(&ies, IeType::Cause).and_then(|c| c.payload.first().copied()).unwrap_or(0);
        if cause == NO_ASSOCIATION {
            self.association_lost(now);
        }
        match op {
            Op::Setup => self.setup_answered(now, cause, &ies),
            Op::Heartbeat => {
                self.heartbeat_outstanding = false;
                self.check_recovery(now, &ies);
            }
            Op::Step { job, step } => {
                let outcome = self.step_outcome(job, step, h.msg_type, cause, &ies);
                self.step_done(now, job, step, outcome);
            }
            Op::Undo { job } => self.undo_done(now, job, cause == ACCEPTED),
            Op::Reinstall { relocation, cp_seid } => {
                let up = (cause == ACCEPTED).then(|| up_seid(&ies)).flatten();
                self.reinstalled(relocation, cp_seid, up, cause);
            }
            Op::Cleanup => {
                if cause != ACCEPTED && cause != SESSION_CONTEXT_NOT_FOUND {
                    self.counters.incr("steering_cleanup_failed");
                } else {
                    self.counters.incr("steering_sessions_deleted");
                }
            }
        }
    }

    fn step_outcome(&self, job: u64, step: usize, t: u8, cause: u8, ies: &[IeRef]) -> Result<u64, String> {
        let Some((step, _)) = self.jobs.get(&job).and_then(|j| j.steps.get(step)) else {
            return Err("stale".into());
        };
        let ue = match step {
            Step::Establish { d, .. } | Step::Modify { d, .. } => d.ue,
            Step::Keep { s } | Step::Delete { s } => s.diversion.ue,
        };
        match (*step, t, cause) {
            (Step::Establish { .. }, msg::SESSION_ESTABLISHMENT_RESPONSE, ACCEPTED) => {
                self.counters.incr("steering_sessions_established");
                up_seid(ies).ok_or_else(|| format!("the steering switch gave no F-SEID for UE {ue}"))
            }
            (Step::Modify { s, .. }, msg::SESSION_MODIFICATION_RESPONSE, ACCEPTED) => {
                self.counters.incr("steering_sessions_modified");
                Ok(s.up_seid)
            }
            (Step::Delete { s }, msg::SESSION_DELETION_RESPONSE, ACCEPTED | SESSION_CONTEXT_NOT_FOUND) => {
                self.counters.incr("steering_sessions_deleted");
                Ok(s.up_seid)
            }
            _ => {
                self.counters.incr("steering_refused");
                Err(format!("the steering switch refused UE {ue}'s session: {}", cause_text(cause, ies)))
            }
        }
    }

    fn setup_answered(&mut self, now: Instant, cause: u8, ies: &[IeRef]) {
        if cause != ACCEPTED {
            self.counters.incr("steering_association_rejected");
            tracing::warn!(switch = %self.cfg.peer, cause, "steering switch rejected the PFCP association");
            self.association = Association::Down;
            self.retry_at = Some(now + self.cfg.heartbeat_interval);
            return;
        }
        let theirs = recovery_in(ies);
        let restarted = self.peer_recovery.is_some() && theirs.is_some() && theirs != self.peer_recovery;
        self.peer_recovery = theirs.or(self.peer_recovery);
        self.association = Association::Up;
        self.retry_at = None;
        self.heartbeat_outstanding = false;
        self.next_heartbeat = Some(now + self.cfg.heartbeat_interval);
        self.counters.incr("steering_association_up");
        tracing::info!(switch = %self.cfg.peer, "PFCP association with the steering switch up");
        if restarted {
            self.reinstall(now);
        }
        for s in std::mem::take(&mut self.orphans) {
            self.send(now, Op::Cleanup, |seq| deletion_request(seq, s.up_seid));
        }
        self.run_waiting(now);
    }

    /// A Recovery Time Stamp other than the one of our association: the
    /// switch restarted and holds neither it nor our sessions; set up again
    /// (and re-install at the answer).
    fn check_recovery(&mut self, now: Instant, ies: &[IeRef]) {
        let theirs = recovery_in(ies);
        if self.association == Association::Up && theirs.is_some() && theirs != self.peer_recovery {
            self.association_lost(now);
        }
    }

    fn association_lost(&mut self, now: Instant) {
        if self.association == Association::Up {
            self.counters.incr("steering_association_lost");
            tracing::warn!(switch = %self.cfg.peer, "PFCP association with the steering switch lost");
            self.association = Association::Down;
            self.next_heartbeat = None;
            self.setup(now);
        }
    }

    /// The switch lost its sessions: establish every installed one again.
    fn reinstall(&mut self, now: Instant) {
        self.counters.incr("steering_switch_restarted");
        let all: Vec<(u64, Installed)> =
            self.installed.iter().flat_map(|(r, v)| v.iter().map(move |s| (*r, *s))).collect();
        for (relocation, s) in all {
            let (node, cp_seid, d) = (self.cfg.node_id, s.cp_seid, s.diversion);
            self.send(now, Op::Reinstall { relocation, cp_seid }, |seq| {
                establishment_request(seq, node, cp_seid, node, &d)
            });
        }
    }

    fn reinstalled(&mut self, relocation: u64, cp_seid: u64, up: Option<u64>, cause: u8) {
        let Some(v) = self.installed.get_mut(&relocation) else { return };
        match up {
            Some(up_seid) => {
                for s in v.iter_mut().filter(|s| s.cp_seid == cp_seid) {
                    s.up_seid = up_seid;
                }
            }
            None => {
                self.counters.incr("steering_reinstall_failed");
                tracing::warn!(relocation, cause, "re-installing a diversion on the restarted switch failed");
                v.retain(|s| s.cp_seid != cp_seid);
            }
        }
    }

    /// Retransmissions, failures after N1, heartbeats, association retries,
    /// requests that waited too long for the association.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tx.handle_timeout(now);
        while let Some((_, op)) = self.tx.poll_timed_out() {
            self.counters.incr("steering_timeout");
            let why = format!("the steering switch at {} did not answer (T1 x N1)", self.cfg.peer);
            match op {
                Op::Setup => {
                    self.association = Association::Down;
                    self.retry_at = Some(now + self.cfg.t1);
                }
                Op::Heartbeat => {
                    // TS 29.244 6.2.2: the peer is considered down.
                    self.heartbeat_outstanding = false;
                    self.association_lost(now);
                }
                Op::Step { job, step } => self.step_done(now, job, step, Err(why)),
                Op::Undo { job } => self.undo_done(now, job, false),
                Op::Reinstall { relocation, cp_seid } => self.reinstalled(relocation, cp_seid, None, 0),
                Op::Cleanup => self.counters.incr("steering_cleanup_failed"),
            }
        }
        if self.association == Association::Down && self.retry_at.is_some_and(|t| t <= now) {
            self.setup(now);
        }
        if self.association == Association::Up
            && !self.heartbeat_outstanding
            && self.next_heartbeat.is_some_and(|t| t <= now)
        {
            self.heartbeat_outstanding = true;
            self.next_heartbeat = Some(now + self.cfg.heartbeat_interval);
            let ies = [RecoveryTimeStamp::new(self.recovery).to_ie()];
            self.request(now, msg::HEARTBEAT_REQUEST, None, &ies, Op::Heartbeat);
        }
        if self.association != Association::Up {
            self.expire_waiting(now);
        }
    }

    fn expire_waiting(&mut self, now: Instant) {
        let (late, keep): (VecDeque<_>, VecDeque<_>) =
            std::mem::take(&mut self.waiting).into_iter().partition(|w| w.deadline <= now);
        self.waiting = keep;
        for w in late {
            self.counters.incr("steering_waiting_expired");
            let why = format!("no PFCP association with the steering switch at {} (T1 x N1)", self.cfg.peer);
            match w.request {
                Request::Divert(_) => self.report(true, w.relocation, Err(why)),
                Request::Undivert => {
                    // Deleted when the association is up again.
                    self.orphans.extend(self.installed.remove(&w.relocation).unwrap_or_default());
                    self.report(false, w.relocation, Err(why));
                }
            }
        }
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let heartbeat = match (self.association, self.heartbeat_outstanding) {
            (Association::Up, false) => self.next_heartbeat,
            _ => None,
        };
        let waiting = match self.association {
            Association::Up => None,
            _ => self.waiting.iter().map(|w| w.deadline).min(),
        };
        let retry = match self.association {
            Association::Down => self.retry_at,
            _ => None,
        };
        [self.tx.poll_timeout(), heartbeat, waiting, retry].into_iter().flatten().min()
    }

    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        self.tx.poll_transmit()
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<SteeringEvent> {
        self.events.pop_front()
    }
}

/// Our first sequence number, drawn from our Recovery Time Stamp: a
/// restarted controller on the same address and port must not have its
/// first requests taken for retransmissions of its predecessor's (the
/// switch keeps answers T1 x N1 for duplicates, TS 29.244 6.4).
fn first_seq(recovery: SystemTime) -> u32 {
    let t = recovery.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let x = t.as_secs().wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(t.subsec_nanos());
    ((x >> 40) as u32).max(1)
}

fn up_seid(ies: &[IeRef]) -> Option<u64> {
    first(ies, IeType::Fseid).and_then(|f| Fseid::unmarshal(f.payload).ok()).map(|f| f.seid.into())
}

fn recovery_in(ies: &[IeRef]) -> Option<SystemTime> {
    first(ies, IeType::RecoveryTimeStamp)
        .and_then(|r| RecoveryTimeStamp::unmarshal(r.payload).ok())
        .map(|r| r.timestamp)
}

/// "cause 73 (RuleCreationModificationFailure), offending IE 56, failed rule PDR 1".
fn cause_text(cause: u8, ies: &[IeRef]) -> String {
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

#[cfg(test)]
mod tests;
