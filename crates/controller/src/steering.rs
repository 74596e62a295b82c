//! The controller's PFCP CP side towards one steering switch (a UPF node
//! in the steering role, issue 11), sans-I/O: it turns "divert relocation
//! N" into one PFCP session per moved PDN connection
//! ([`mobicore_pfcp::steering`]) and "undivert" into their deletion.
//!
//! - The PFCP association (setup, heartbeats both ways, retransmission
//!   every T1 up to N1 times, a restarted switch noticed) is
//!   [`crate::association`]'s.
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
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_pfcp::steering::{deletion_request, establishment_request, modification_request};
/// What a diversion is, as the switch reads it.
pub use mobicore_pfcp::steering::{Diversion, FlowFilter};
use mobicore_pfcp::{msg, IeRef};
use serde::{Deserialize, Serialize};

use crate::association::{
    cause_text, up_seid, Answer, Association, CounterNames, PeerConfig, ACCEPTED, SESSION_CONTEXT_NOT_FOUND,
};
use crate::context::Mode;
use crate::core::{FlowSpec, Relocation};

/// How the client reaches its switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteeringClientConfig {
    pub pfcp: PeerConfig,
    /// Divert / undivert requests waiting (for the association, or for an
    /// earlier request of the same UE) at most.
    pub max_waiting: usize,
}

const NAMES: CounterNames = CounterNames {
    association_up: "steering_association_up",
    association_rejected: "steering_association_rejected",
    association_lost: "steering_association_lost",
    timeout: "steering_timeout",
    from_unknown_peer: "steering_from_unknown_peer",
    malformed: "steering_malformed",
    unmatched_response: "steering_unmatched_response",
    unsupported_message: "steering_unsupported_message",
};

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

/// A request awaiting its response (the transaction layer's token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Step `step` of job `job`.
    Step { job: u64, step: usize },
    /// A rollback request of job `job`.
    Undo { job: u64 },
    /// Re-establishing session `cp_seid` of `relocation` on a restarted switch.
    Reinstall { relocation: u64, cp_seid: u64 },
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
    counters: Counters,
    assoc: Association<Op>,
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
            assoc: Association::new(cfg.pfcp, NAMES, recovery, counters.clone()),
            cfg,
            counters,
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
        self.assoc.is_up()
    }

    /// The sessions each relocation has on the switch.
    pub fn installed(&self) -> &BTreeMap<u64, Vec<Installed>> {
        &self.installed
    }

    /// Sets up the association (TS 29.244 6.2.6.2.1).
    pub fn start(&mut self, now: Instant) {
        self.assoc.start(now);
    }

    fn send(&mut self, now: Instant, op: Op, bytes: impl FnOnce(u32) -> Vec<u8>) {
        self.assoc.send(now, op, bytes);
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
        let deadline = now + self.cfg.pfcp.give_up_after();
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
        if !self.assoc.is_up() {
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
            let (node, me) = (self.cfg.pfcp.node_id, self.cfg.pfcp.node_id);
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
        match self.assoc.handle_datagram(now, from, bytes) {
            None => {}
            Some(Answer::Up { restarted }) => self.association_up(now, restarted),
            Some(Answer::Response { op, msg_type, cause, ies }) => match op {
                Op::Step { job, step } => {
                    let outcome = self.step_outcome(job, step, msg_type, cause, &ies);
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
            },
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

    /// The association is up: a restarted switch gets its sessions
    /// again, orphans are deleted, waiting requests run.
    fn association_up(&mut self, now: Instant, restarted: bool) {
        if restarted {
            self.reinstall(now);
        }
        for s in std::mem::take(&mut self.orphans) {
            self.send(now, Op::Cleanup, |seq| deletion_request(seq, s.up_seid));
        }
        self.run_waiting(now);
    }

    /// The switch lost its sessions: establish every installed one again.
    fn reinstall(&mut self, now: Instant) {
        self.counters.incr("steering_switch_restarted");
        let all: Vec<(u64, Installed)> =
            self.installed.iter().flat_map(|(r, v)| v.iter().map(move |s| (*r, *s))).collect();
        for (relocation, s) in all {
            let (node, cp_seid, d) = (self.cfg.pfcp.node_id, s.cp_seid, s.diversion);
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
        for op in self.assoc.handle_timeout(now) {
            let why = format!("the steering switch at {} did not answer (T1 x N1)", self.cfg.pfcp.peer);
            match op {
                Op::Step { job, step } => self.step_done(now, job, step, Err(why)),
                Op::Undo { job } => self.undo_done(now, job, false),
                Op::Reinstall { relocation, cp_seid } => self.reinstalled(relocation, cp_seid, None, 0),
                Op::Cleanup => self.counters.incr("steering_cleanup_failed"),
            }
        }
        if !self.assoc.is_up() {
            self.expire_waiting(now);
        }
    }

    fn expire_waiting(&mut self, now: Instant) {
        let (late, keep): (VecDeque<_>, VecDeque<_>) =
            std::mem::take(&mut self.waiting).into_iter().partition(|w| w.deadline <= now);
        self.waiting = keep;
        for w in late {
            self.counters.incr("steering_waiting_expired");
            let why = format!("no PFCP association with the steering switch at {} (T1 x N1)", self.cfg.pfcp.peer);
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
        let waiting = match self.assoc.is_up() {
            true => None,
            false => self.waiting.iter().map(|w| w.deadline).min(),
        };
        [self.assoc.poll_timeout(), waiting].into_iter().flatten().min()
    }

    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        self.assoc.poll_transmit()
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<SteeringEvent> {
        self.events.pop_front()
    }
}

impl crate::association::NodeClient for SteeringClient {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        SteeringClient::handle_datagram(self, now, from, bytes)
    }
    fn handle_timeout(&mut self, now: Instant) {
        SteeringClient::handle_timeout(self, now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        SteeringClient::poll_timeout(self)
    }
    fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        SteeringClient::poll_transmit(self)
    }
}

#[cfg(test)]
mod tests;
