//! The controller's sans-I/O core: the S11 [`Relay`], the [`Replicator`],
//! the anchors and the relocations (seed 000 IV: replicate, then divert;
//! move back; edge to edge).
//!
//! A relocation goes Replicating -> Diverting -> Active; DELETE takes it
//! MovingBack -> Reverted. Diverting and moving back are the steering
//! switch's part: the core asks for them with [`CoreEvent::Divert`] /
//! [`CoreEvent::Undivert`] and is told the outcome with
//! [`ControllerCore::handle_diverted`]. With a [`SteeringClient`]
//! attached ([`ControllerCore::attach_switch`]) the core does that itself
//! over PFCP: the events never leave it, the switch's datagrams go through
//! [`ControllerCore::handle_from_switch`] /
//! [`ControllerCore::poll_switch_transmit`]. Without a steering switch the
//! core moves state only and says so in the relocation.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;

use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_common::peers::PeerFilter;
use mobicore_gtp::message::msg_type;
use mobicore_gtp::TransactionConfig;
use serde::{Deserialize, Serialize};

use crate::context::{Anchor, LoggedMessage, Mode, ReplicaSession, SessionRecord};
use crate::relay::{self, Relay, RelayEvent, RelayLimits};
use crate::replication::{JobId, Replicator, ReplicatorEvent, Step};
use crate::steering::{diversions_of, SteeringClient, SteeringEvent};

/// An inner 5-tuple narrowing a relocation to one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    /// IP protocol number (6 TCP, 17 UDP).
    pub protocol: Option<u8>,
    /// The remote end's address.
    #[schema(value_type = Option<String>)]
    pub remote: Option<Ipv4Addr>,
    /// The remote end's prefix length (32 when absent).
    pub remote_prefix: Option<u8>,
    pub ue_port: Option<u16>,
    pub remote_port: Option<u16>,
}

/// Where a relocation is: `"active"`, or `{"failed": "why"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RelocationState {
    Replicating,
    Diverting,
    Active,
    MovingBack,
    Reverted,
    Failed(String),
}

/// How long each part took, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Timing {
    /// Waiting for a request of the UE's sessions that the original
    /// S/P-GW had not answered yet, before the replay started.
    #[serde(default)]
    pub waited_ms: f64,
    pub replication_ms: f64,
    pub rule_install_ms: f64,
    pub total_ms: f64,
}

/// One moved PDN connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MovedSession {
    /// The original S/P-GW's S11 TEID.
    pub sgw_s11_teid: u32,
    #[schema(value_type = Option<String>)]
    pub ue_ipv4: Option<Ipv4Addr>,
    /// The original anchor's S1-U F-TEID.
    #[schema(value_type = Option<(u32, String)>)]
    pub origin_s1u: Option<(u32, Ipv4Addr)>,
    pub replica: Option<ReplicaSession>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Relocation {
    pub id: u64,
    pub imsi: String,
    pub flow: Option<FlowSpec>,
    /// The anchor's name.
    pub anchor: String,
    pub mode: Mode,
    pub state: RelocationState,
    pub sessions: Vec<MovedSession>,
    pub timing: Timing,
    /// GTP-C messages and octets sent to replicate.
    pub replicated_messages: usize,
    pub replicated_bytes: usize,
    /// False when no steering switch is configured: state moved, traffic not.
    pub diverted: bool,
    /// A selective replay asks the replica for the UE's own address.
    #[serde(default = "yes")]
    pub keep_address: bool,
}

fn yes() -> bool {
    true
}

/// Why a request to the core cannot be done (the REST layer maps these to
/// 4xx answers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    #[error("no recorded session for UE {0}")]
    UnknownUe(String),
    #[error("no anchor named {0}")]
    UnknownAnchor(String),
    #[error("no relocation {0}")]
    UnknownRelocation(u64),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    /// An anchor that should have been started on demand could not be.
    #[error("{0}")]
    Unavailable(String),
}

/// What the shell must do or know.
#[derive(Debug, Clone, PartialEq)]
pub enum CoreEvent {
    /// Persist (or, when `None`, forget) a session record.
    Session {
        sgw_s11_teid: u32,
        record: Option<SessionRecord>,
    },
    Logged(LoggedMessage),
    /// A relocation changed: persist it, and answer whoever waits for it.
    Relocation(Relocation),
    /// Install the diversion of these sessions towards the anchor.
    Divert {
        relocation: Relocation,
    },
    /// Remove the diversion of a relocation.
    Undivert {
        relocation: Relocation,
    },
}

/// Datagrams out of the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    Relay(relay::Transmit),
    /// To a replica anchor's S/P-GW-C, from the controller's own socket.
    Anchor {
        to: SocketAddr,
        bytes: Bytes,
    },
}

pub struct ControllerCore {
    relay: Relay,
    replicator: Replicator,
    counters: Counters,
    anchors: BTreeMap<String, Anchor>,
    relocations: BTreeMap<u64, Relocation>,
    next_id: u64,
    steering: bool,
    /// Relocation being replicated by each running job.
    jobs: HashMap<JobId, u64>,
    started: HashMap<u64, (Instant, Option<Instant>)>,
    /// Anchors that got a naive replication: every later accepted request
    /// goes there too, from this index of the log on.
    naive: HashMap<SocketAddr, usize>,
    /// Naive jobs in progress, per anchor: new log entries join the job.
    naive_jobs: HashMap<SocketAddr, JobId>,
    events: VecDeque<CoreEvent>,
    /// The steering switch the core programs itself, if any.
    switch: Option<SteeringClient>,
    /// Divert / Undivert for the switch, handed over at the next pump.
    to_switch: VecDeque<CoreEvent>,
    /// Relocations in force waiting for their anchor to run again, by anchor.
    orphans: BTreeMap<String, Vec<u64>>,
    /// Relocations whose replay waits for the original S/P-GW to answer
    /// a request of their sessions ([`Self::start_replication`]).
    deferred: BTreeSet<u64>,
}

impl ControllerCore {
    /// `steering`: whether a steering switch carries out diversions.
    pub fn new(mme_peers: PeerFilter, limits: RelayLimits, t: TransactionConfig, steering: bool, c: Counters) -> Self {
        ControllerCore {
            relay: Relay::new(mme_peers, limits, c.clone()),
            replicator: Replicator::new(t, c.clone()),
            counters: c,
            anchors: BTreeMap::new(),
            relocations: BTreeMap::new(),
            next_id: 1,
            steering,
            jobs: HashMap::new(),
            started: HashMap::new(),
            naive: HashMap::new(),
            naive_jobs: HashMap::new(),
            events: VecDeque::new(),
            switch: None,
            to_switch: VecDeque::new(),
            orphans: BTreeMap::new(),
            deferred: BTreeSet::new(),
        }
    }

    /// Programs the steering switch through `client` from now on (and
    /// starts its association): diversions are installed and removed over
    /// PFCP instead of being asked for with [`CoreEvent::Divert`] /
    /// [`CoreEvent::Undivert`].
    pub fn attach_switch(&mut self, now: Instant, mut client: SteeringClient) {
        client.start(now);
        self.steering = true;
        self.switch = Some(client);
        self.pump(now);
    }

    pub fn switch(&self) -> Option<&SteeringClient> {
        self.switch.as_ref()
    }

    /// A PFCP datagram from the steering switch's address.
    pub fn handle_from_switch(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        if let Some(s) = self.switch.as_mut() {
            s.handle_datagram(now, from, bytes);
        }
        self.pump(now);
    }

    /// The next PFCP datagram for the steering switch.
    pub fn poll_switch_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        self.switch.as_mut()?.poll_transmit()
    }

    /// A Divert / Undivert: to the attached switch, or to the shell.
    fn steer(&mut self, e: CoreEvent) {
        match self.switch {
            Some(_) => self.to_switch.push_back(e),
            None => self.events.push_back(e),
        }
    }

    /// Hands the switch what the core decided and the core what the switch
    /// answered, until neither has more.
    fn pump_switch(&mut self, now: Instant) {
        let Some(_) = self.switch else { return };
        loop {
            let mut moved = false;
            while let Some(e) = self.to_switch.pop_front() {
                moved = true;
                let Some(s) = self.switch.as_mut() else { return };
                match e {
                    CoreEvent::Divert { relocation } => match diversions_of(&relocation) {
                        Ok(ds) => s.divert(now, relocation.id, ds),
                        Err(why) => self.handle_diverted(now, relocation.id, Err(why)),
                    },
                    CoreEvent::Undivert { relocation } => s.undivert(now, relocation.id),
                    other => self.events.push_back(other),
                }
            }
            while let Some(e) = self.switch.as_mut().and_then(SteeringClient::poll_event) {
                moved = true;
                match e {
                    SteeringEvent::Diverted { relocation, result }
                    | SteeringEvent::Undiverted { relocation, result } => self.handle_diverted(now, relocation, result),
                }
            }
            if !moved {
                return;
            }
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn relay(&self) -> &Relay {
        &self.relay
    }

    pub fn replicator(&self) -> &Replicator {
        &self.replicator
    }

    /// Puts back what the store kept: sessions, the naive log, anchors and
    /// relocations (their replicas with them). Relocations that were in
    /// force are diverted again (the steering switch drops a restarted
    /// controller's sessions, TS 29.244 6.2.6.2.2); one still diverting is
    /// completed; one still replicating fails (its replay was cut short);
    /// one moving back is finished; one whose anchor is not known any more
    /// waits for it ([`Self::awaited_anchors`]), its UE served meanwhile by
    /// its original anchor.
    pub fn restore(
        &mut self,
        now: Instant,
        sessions: Vec<SessionRecord>,
        log: Vec<LoggedMessage>,
        anchors: Vec<Anchor>,
        relocations: Vec<Relocation>,
    ) {
        self.relay.restore(sessions, log);
        for a in anchors {
            self.anchors.insert(a.name.clone(), a);
        }
        for mut r in relocations {
            let id = r.id;
            self.next_id = self.next_id.max(id + 1);
            let anchor = self.anchors.get(&r.anchor).map(|a| a.s11);
            if let Some(s11) = anchor {
                for s in &r.sessions {
                    if let Some(rep) = s.replica {
                        self.replicator.restore(s11, s.sgw_s11_teid, rep);
                    }
                }
            }
            let state = r.state.clone();
            match (state, anchor) {
                (RelocationState::Replicating, _) => {
                    self.relocations.insert(id, r);
                    self.rollback(now, id, "a controller restart cut its replication short".into());
                    continue;
                }
                (RelocationState::Active | RelocationState::Diverting, None) => {
                    // Its replicas went with the anchor's processes.
                    r.diverted = false;
                    r.sessions.iter_mut().for_each(|s| s.replica = None);
                    self.orphans.entry(r.anchor.clone()).or_default().push(id);
                    self.events.push_back(CoreEvent::Relocation(r.clone()));
                }
                (RelocationState::Active, Some(_)) if r.diverted => {
                    // With a switch attached, handed over at the next handle_* call.
                    self.steer(CoreEvent::Divert { relocation: r.clone() });
                }
                (RelocationState::Diverting, Some(_)) if self.steering => {
                    self.steer(CoreEvent::Divert { relocation: r.clone() });
                }
                (RelocationState::Diverting, Some(_)) => r.state = RelocationState::Active,
                (RelocationState::MovingBack, _) => {
                    self.relocations.insert(id, r);
                    self.finish_move_back(now, id);
                    continue;
                }
                _ => {}
            }
            self.relocations.insert(id, r);
        }
    }

    pub fn anchors(&self) -> impl Iterator<Item = &Anchor> {
        self.anchors.values()
    }

    pub fn add_anchor(&mut self, a: Anchor) -> Result<(), CoreError> {
        if self.anchors.contains_key(&a.name) {
            return Err(CoreError::Conflict(format!("anchor {} exists", a.name)));
        }
        if self.anchors.values().any(|b| b.s11 == a.s11) {
            return Err(CoreError::Conflict(format!("an anchor already has S11 address {}", a.s11)));
        }
        self.anchors.insert(a.name.clone(), a);
        Ok(())
    }

    pub fn relocations(&self) -> impl Iterator<Item = &Relocation> {
        self.relocations.values()
    }

    pub fn relocation(&self, id: u64) -> Option<&Relocation> {
        self.relocations.get(&id)
    }

    /// Moves a UE (all its PDN connections, or one flow) to `anchor`:
    /// replicate first; divert once the replica holds the state. Selective
    /// replay asks the replica for the UE's own address ([`Self::relocate_with`]).
    pub fn relocate(
        &mut self,
        now: Instant,
        ue: &str,
        flow: Option<FlowSpec>,
        anchor: &str,
        mode: Mode,
    ) -> Result<u64, CoreError> {
        self.relocate_with(now, ue, flow, anchor, mode, true)
    }

    /// [`Self::relocate`]; with `keep_address`, the replayed Create Session
    /// Request of a selective move asks the replica for the UE's address
    /// (a static address, TS 29.274 8.14), so that servers see the same
    /// address and their connections survive; without it, or when the
    /// replica gives another, the steering switch translates (seed 000 V.B 2).
    pub fn relocate_with(
        &mut self,
        now: Instant,
        ue: &str,
        flow: Option<FlowSpec>,
        anchor: &str,
        mode: Mode,
        keep_address: bool,
    ) -> Result<u64, CoreError> {
        if !self.anchors.contains_key(anchor) {
            return Err(CoreError::UnknownAnchor(anchor.into()));
        }
        let sessions: Vec<SessionRecord> = match ue.parse::<Ipv4Addr>() {
            Ok(ip) => self.relay.session_by_ipv4(ip).into_iter().cloned().collect(),
            Err(_) => self.relay.sessions_of(ue).into_iter().cloned().collect(),
        };
        let Some(first) = sessions.first() else { return Err(CoreError::UnknownUe(ue.into())) };
        let imsi = first.imsi.clone();
        if let Some(r) = self.in_force(&imsi, flow) {
            if r.anchor == anchor {
                return Err(CoreError::Conflict(format!("UE {imsi} is already at {anchor} (relocation {})", r.id)));
            }
        }
        if mode == Mode::Naive && self.relay.log().is_none() {
            return Err(CoreError::Conflict(NAIVE_LOG_FULL.into()));
        }
        let id = self.next_id;
        self.next_id += 1;
        let moved = sessions
            .iter()
            .map(|s| MovedSession {
                sgw_s11_teid: s.sgw_s11_teid,
                ue_ipv4: s.ue_ipv4,
                origin_s1u: s.s1u_sgw,
                replica: None,
            })
            .collect();
        let r = Relocation {
            id,
            imsi,
            flow,
            anchor: anchor.into(),
            mode,
            state: RelocationState::Replicating,
            sessions: moved,
            timing: Timing::default(),
            replicated_messages: 0,
            replicated_bytes: 0,
            diverted: false,
            keep_address,
        };
        self.relocations.insert(id, r.clone());
        self.events.push_back(CoreEvent::Relocation(r));
        self.counters.incr("relocations_started");
        self.started.insert(id, (now, None));
        self.start_replication(now, id);
        self.pump(now);
        Ok(id)
    }

    /// Starts the replay of relocation `id` (Replicating) into its anchor
    /// from its sessions' records as they are now, unless the original
    /// S/P-GW has a request of one of them unanswered (a Modify Bearer
    /// during the attach or a handover, say): a replay without it would
    /// give the replica a session the request has not finished (no eNB
    /// F-TEID yet: its downlink buffered until the request is mirrored,
    /// and lost if the UE moves back first). Then it waits, and is tried
    /// again at each answer and expiry ([`Self::pump`]). Sessions the MME
    /// ended meanwhile are left out; with none left, the relocation is
    /// reverted (nothing moved).
    fn start_replication(&mut self, now: Instant, id: u64) {
        let Some(r) = self.relocations.get_mut(&id) else {
            self.deferred.remove(&id);
            return;
        };
        let records: Vec<SessionRecord> =
            r.sessions.iter().filter_map(|s| self.relay.session(s.sgw_s11_teid).cloned()).collect();
        r.sessions.retain(|s| records.iter().any(|x| x.sgw_s11_teid == s.sgw_s11_teid));
        if r.sessions.is_empty() {
            self.deferred.remove(&id);
            self.started.remove(&id);
            r.state = RelocationState::Reverted;
            let r = r.clone();
            self.events.push_back(CoreEvent::Relocation(r));
            return;
        }
        if records.iter().any(|x| self.relay.in_progress(x.sgw_s11_teid)) {
            if self.deferred.insert(id) {
                self.counters.incr("relocations_deferred");
            }
            return;
        }
        let t0 = self.started.get(&id).map_or(now, |s| s.0);
        if self.deferred.remove(&id) {
            r.timing.waited_ms = ms(now - t0);
        }
        let (mode, keep_address, anchor) = (r.mode, r.keep_address, r.anchor.clone());
        let Some(a) = self.anchors.get(&anchor).cloned() else {
            return self.rollback(now, id, format!("its anchor {anchor} is gone"));
        };
        let steps: Vec<Step> = match mode {
            Mode::Selective => records.iter().flat_map(|s| selective_steps(s, keep_address)).collect(),
            Mode::Naive => {
                let Some(log) = self.relay.log() else { return self.rollback(now, id, NAIVE_LOG_FULL.into()) };
                // A naive replica already follows every request.
                let from = if self.naive.contains_key(&a.s11) { log.len() } else { 0 };
                log[from..].iter().filter_map(naive_step).collect()
            }
        };
        self.replicate(now, id, a.s11, mode, steps);
    }

    /// Starts the replication job of relocation `id` into the anchor at `s11`.
    fn replicate(&mut self, now: Instant, id: u64, s11: SocketAddr, mode: Mode, steps: Vec<Step>) {
        self.started.entry(id).or_insert((now, None));
        let job = self.replicator.start(now, s11, steps);
        if mode == Mode::Naive {
            let len = self.relay.log().map_or(0, <[_]>::len);
            self.naive.insert(s11, len);
            self.naive_jobs.insert(s11, job);
        }
        self.jobs.insert(job, id);
    }

    /// The anchors that relocations in force wait for: anchors this
    /// controller started at its sites before it restarted (a started
    /// site's anchor is not kept in the store; its processes ended with
    /// the controller). Start each again, then [`Self::reestablish`], or
    /// [`Self::abandon`] it.
    pub fn awaited_anchors(&self) -> Vec<String> {
        self.orphans.keys().cloned().collect()
    }

    /// `anchor` runs again ([`Self::add_anchor`] first): the relocations
    /// that waited for it are replicated into it again from what the relay
    /// holds now, then diverted (make-before-break, as at first).
    pub fn reestablish(&mut self, now: Instant, anchor: &str) {
        let Some(ids) = self.orphans.remove(anchor) else { return };
        if !self.anchors.contains_key(anchor) {
            return self.fail_all(now, ids, format!("its anchor {anchor} is gone"));
        }
        for id in ids {
            let Some(r) = self.relocations.get_mut(&id) else { continue };
            for s in &mut r.sessions {
                s.replica = None;
            }
            r.state = RelocationState::Replicating;
            let r = r.clone();
            self.events.push_back(CoreEvent::Relocation(r));
            self.started.insert(id, (now, None));
            self.start_replication(now, id);
            if self.relocation(id).is_some_and(|r| r.state == RelocationState::Replicating) {
                self.counters.incr("relocations_reestablished");
            }
        }
        self.pump(now);
    }

    /// `anchor` cannot run again: the relocations that waited for it fail
    /// (their UEs stay at their original anchors, which never lost them).
    pub fn abandon(&mut self, now: Instant, anchor: &str, why: &str) {
        if let Some(ids) = self.orphans.remove(anchor) {
            self.fail_all(now, ids, format!("its anchor {anchor} could not be started again: {why}"));
        }
    }

    fn fail_all(&mut self, now: Instant, ids: Vec<u64>, why: String) {
        for id in ids {
            self.rollback(now, id, why.clone());
        }
    }

    /// Moves a relocated UE back to its original anchor: the diversion
    /// goes first, then (selective) the replica sessions.
    pub fn move_back(&mut self, now: Instant, id: u64) -> Result<(), CoreError> {
        let r = self.relocations.get_mut(&id).ok_or(CoreError::UnknownRelocation(id))?;
        match r.state {
            RelocationState::Active => {}
            RelocationState::Reverted | RelocationState::Failed(_) => return Ok(()),
            _ => return Err(CoreError::Conflict(format!("relocation {id} is {:?}", r.state))),
        }
        r.state = RelocationState::MovingBack;
        self.started.insert(id, (now, None));
        let r = r.clone();
        if r.diverted {
            self.steer(CoreEvent::Undivert { relocation: r.clone() });
            self.events.push_back(CoreEvent::Relocation(r));
            self.pump_switch(now);
        } else {
            self.finish_move_back(now, id);
        }
        Ok(())
    }

    /// The steering switch's answer to [`CoreEvent::Divert`] or
    /// [`CoreEvent::Undivert`].
    pub fn handle_diverted(&mut self, now: Instant, id: u64, result: Result<(), String>) {
        let Some(r) = self.relocations.get_mut(&id) else { return };
        match (&r.state, result) {
            (RelocationState::Diverting, Ok(())) => {
                r.diverted = true;
                self.activate(now, id);
            }
            (RelocationState::Diverting, Err(why)) => {
                self.rollback(now, id, format!("the steering switch refused the diversion: {why}"));
            }
            (RelocationState::MovingBack, res) => {
                if let Err(why) = res {
                    tracing::warn!(id, %why, "removing a diversion failed");
                    self.counters.incr("undivert_failed");
                }
                self.finish_move_back(now, id);
            }
            (RelocationState::Active, Err(why)) => {
                // Diverting again after a restart failed.
                tracing::warn!(id, %why, "re-installing a diversion failed");
                self.counters.incr("redivert_failed");
            }
            _ => {}
        }
    }

    fn finish_move_back(&mut self, now: Instant, id: u64) {
        let Some(r) = self.relocations.get_mut(&id) else { return };
        r.state = RelocationState::Reverted;
        r.diverted = false;
        let r = r.clone();
        if let (Mode::Selective, Some(a)) = (r.mode, self.anchors.get(&r.anchor)) {
            if !self.shared_replica(&r) {
                for s in &r.sessions {
                    self.replicator.delete(now, a.s11, s.sgw_s11_teid);
                }
            }
        }
        self.counters.incr("relocations_reverted");
        self.events.push_back(CoreEvent::Relocation(r));
        self.pump(now);
    }

    /// Another relocation in force still uses this one's replicas (two
    /// flows of one UE moved to one anchor).
    fn shared_replica(&self, r: &Relocation) -> bool {
        self.relocations
            .values()
            .any(|o| o.id != r.id && o.imsi == r.imsi && o.anchor == r.anchor && o.state == RelocationState::Active)
    }

    /// The relocation in force for this UE and flow.
    fn in_force(&self, imsi: &str, flow: Option<FlowSpec>) -> Option<&Relocation> {
        self.relocations.values().find(|r| {
            r.imsi == imsi
                && r.flow == flow
                && matches!(
                    r.state,
                    RelocationState::Active | RelocationState::Replicating | RelocationState::Diverting
                )
        })
    }

    fn activate(&mut self, now: Instant, id: u64) {
        let (t0, t1) = self.started.remove(&id).unwrap_or((now, None));
        let Some(r) = self.relocations.get_mut(&id) else { return };
        let t1 = t1.unwrap_or(now);
        r.timing.rule_install_ms = ms(now - t1);
        r.timing.total_ms = ms(now - t0);
        r.state = RelocationState::Active;
        let r = r.clone();
        self.counters.incr("relocations_active");
        // Edge to edge: the relocation this one supersedes ends once the
        // new one is in force (make-before-break).
        let older: Vec<u64> = (self.relocations.values())
            .filter(|o| o.id != id && o.imsi == r.imsi && o.flow == r.flow && o.state == RelocationState::Active)
            .map(|o| o.id)
            .collect();
        self.events.push_back(CoreEvent::Relocation(r));
        for o in older {
            if let Some(old) = self.relocations.get_mut(&o) {
                // The new diversion replaced the old one on the switch (an
                // attached switch took over its sessions; the Undivert
                // removes whatever of it is left).
                if old.diverted && self.switch.is_some() {
                    let old = old.clone();
                    self.steer(CoreEvent::Undivert { relocation: old });
                }
                let old = self.relocations.get_mut(&o).expect("present");
                old.diverted = false;
                old.state = RelocationState::MovingBack;
            }
            self.finish_move_back(now, o);
        }
    }

    fn rollback(&mut self, now: Instant, id: u64, why: String) {
        let Some(r) = self.relocations.get_mut(&id) else { return };
        r.state = RelocationState::Failed(why);
        let r = r.clone();
        self.started.remove(&id);
        self.deferred.remove(&id);
        if let (Mode::Selective, Some(a)) = (r.mode, self.anchors.get(&r.anchor)) {
            if !self.shared_replica(&r) {
                for s in &r.sessions {
                    self.replicator.delete(now, a.s11, s.sgw_s11_teid);
                }
            }
        }
        self.counters.incr("relocations_failed");
        self.events.push_back(CoreEvent::Relocation(r));
    }

    pub fn handle_from_mme(&mut self, now: Instant, mme: SocketAddr, bytes: &[u8]) {
        self.relay.handle_from_mme(now, mme, bytes);
        self.pump(now);
    }

    pub fn handle_from_sgw(&mut self, now: Instant, mme: SocketAddr, bytes: &[u8]) {
        self.relay.handle_from_sgw(now, mme, bytes);
        self.pump(now);
    }

    pub fn handle_from_anchor(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.replicator.handle_datagram(now, from, bytes);
        self.pump(now);
    }

    /// Timers of the relay, the replicator and the switch; also hands the
    /// switch what [`Self::restore`] queued.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.relay.handle_timeout(now);
        self.replicator.handle_timeout(now);
        if let Some(s) = self.switch.as_mut() {
            s.handle_timeout(now);
        }
        self.pump(now);
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let switch = self.switch.as_ref().and_then(SteeringClient::poll_timeout);
        [self.relay.poll_timeout(), self.replicator.poll_timeout(), switch].into_iter().flatten().min()
    }

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        if let Some(t) = self.relay.poll_transmit() {
            return Some(Transmit::Relay(t));
        }
        self.replicator.poll_transmit().map(|(to, bytes)| Transmit::Anchor { to, bytes })
    }

    pub fn poll_event(&mut self) -> Option<CoreEvent> {
        self.events.pop_front()
    }

    /// Carries the relay's and the replicator's events into relocations.
    fn pump(&mut self, now: Instant) {
        while let Some(e) = self.relay.poll_event() {
            match e {
                RelayEvent::Recorded(s) => {
                    let sgw_s11_teid = s.sgw_s11_teid;
                    self.events.push_back(CoreEvent::Session { sgw_s11_teid, record: Some(s) });
                }
                RelayEvent::Deleted { sgw_s11_teid } => {
                    self.events.push_back(CoreEvent::Session { sgw_s11_teid, record: None });
                    self.session_gone(now, sgw_s11_teid);
                }
                RelayEvent::Logged(m) => {
                    self.follow_naive(now, &m);
                    self.events.push_back(CoreEvent::Logged(m));
                }
                RelayEvent::Accepted { sgw_s11_teid, msg_type: _, bytes } => {
                    self.follow_selective(now, sgw_s11_teid, bytes);
                }
                RelayEvent::PeerRestarted { .. } => {}
            }
        }
        while let Some(e) = self.replicator.poll_event() {
            match e {
                ReplicatorEvent::JobDone { job, result } => self.job_done(now, job, result),
                ReplicatorEvent::MirrorFailed { anchor, orig_teid, why } => {
                    tracing::warn!(%anchor, orig_teid, %why, "a replica missed a mirrored request");
                }
            }
        }
        // Replays waiting for an answer: those the relay has now had (or
        // forgotten) start.
        let waiting: Vec<u64> = self.deferred.iter().copied().collect();
        for id in waiting {
            self.start_replication(now, id);
        }
        self.pump_switch(now);
    }

    /// A naive replica gets every accepted request (seed 000 IV.A: "from
    /// this moment on, all GTP-C messages ... are sent to the new S/P-GWs
    /// as well").
    fn follow_naive(&mut self, now: Instant, m: &LoggedMessage) {
        let Some(step) = naive_step(m) else { return };
        let anchors: Vec<SocketAddr> = self.naive.keys().copied().collect();
        for a in anchors {
            let in_job = self.naive_jobs.get(&a).is_some_and(|&job| self.replicator.extend(job, step.clone()));
            if !in_job {
                self.replicator.mirror(now, a, step.clone());
            }
        }
    }

    /// A selective replica gets every later accepted request of its
    /// session; during its replication the request joins the job.
    fn follow_selective(&mut self, now: Instant, teid: u32, bytes: Bytes) {
        let step = Step { orig_teid: teid, bytes };
        let mut targets: HashSet<SocketAddr> = HashSet::new();
        for r in self.relocations.values() {
            if r.mode != Mode::Selective || !r.sessions.iter().any(|s| s.sgw_s11_teid == teid) {
                continue;
            }
            let Some(a) = self.anchors.get(&r.anchor) else { continue };
            match r.state {
                RelocationState::Replicating => {
                    if let Some((&job, _)) = self.jobs.iter().find(|(_, &rid)| rid == r.id) {
                        self.replicator.extend(job, step.clone());
                    }
                }
                RelocationState::Diverting | RelocationState::Active => {
                    targets.insert(a.s11);
                }
                _ => {}
            }
        }
        for a in targets {
            if !self.naive.contains_key(&a) {
                self.replicator.mirror(now, a, step.clone());
            }
        }
    }

    /// The MME deleted a moved session: its relocation ends (the replica
    /// got the Delete Session by mirroring).
    fn session_gone(&mut self, now: Instant, teid: u32) {
        let ids: Vec<u64> = (self.relocations.values())
            .filter(|r| r.state == RelocationState::Active && r.sessions.iter().any(|s| s.sgw_s11_teid == teid))
            .map(|r| r.id)
            .collect();
        for id in ids {
            let Some(r) = self.relocations.get_mut(&id) else { continue };
            r.sessions.retain(|s| s.sgw_s11_teid != teid);
            if r.sessions.is_empty() {
                r.state = RelocationState::Reverted;
                let r = r.clone();
                if r.diverted {
                    self.steer(CoreEvent::Undivert { relocation: r.clone() });
                }
                self.counters.incr("relocations_ended_by_detach");
                self.events.push_back(CoreEvent::Relocation(r));
                let _ = now;
            }
        }
    }

    fn job_done(&mut self, now: Instant, job: JobId, result: Result<crate::replication::JobReport, String>) {
        let Some(id) = self.jobs.remove(&job) else { return };
        self.naive_jobs.retain(|_, j| *j != job);
        let report = match result {
            Ok(r) => r,
            Err(why) => {
                if let Some(r) = self.relocations.get(&id) {
                    if r.mode == Mode::Naive {
                        if let Some(a) = self.anchors.get(&r.anchor) {
                            self.naive.remove(&a.s11);
                        }
                    }
                }
                return self.rollback(now, id, why);
            }
        };
        let Some(r) = self.relocations.get_mut(&id) else { return };
        let Some(a) = self.anchors.get(&r.anchor) else { return };
        for s in &mut r.sessions {
            s.replica = self.replicator.replica(a.s11, s.sgw_s11_teid).copied();
        }
        if let Some(s) = r.sessions.iter().find(|s| s.replica.is_none()) {
            let why = format!("the replica holds no session for S11 TEID {:#x}", s.sgw_s11_teid);
            return self.rollback(now, id, why);
        }
        r.replicated_messages = report.messages;
        r.replicated_bytes = report.sent_bytes;
        let t0 = self.started.get(&id).map_or(now, |s| s.0);
        r.timing.replication_ms = ms(now - t0) - r.timing.waited_ms;
        self.started.insert(id, (t0, Some(now)));
        if self.steering {
            r.state = RelocationState::Diverting;
            let r = r.clone();
            self.steer(CoreEvent::Divert { relocation: r.clone() });
            self.events.push_back(CoreEvent::Relocation(r));
        } else {
            self.activate(now, id);
        }
    }
}

/// The selective replay of one session: Create Session (asking for the
/// UE's address with `keep_address`), the latest Modify Bearer, and
/// Release Access Bearers if the UE is idle.
fn selective_steps(s: &SessionRecord, keep_address: bool) -> Vec<Step> {
    let teid = s.sgw_s11_teid;
    let csr = match s.ue_ipv4.filter(|_| keep_address) {
        Some(ip) => relay::with_static_ipv4(&s.csr, ip).unwrap_or_else(|| s.csr.clone()),
        None => s.csr.clone(),
    };
    let mut v = vec![Step { orig_teid: teid, bytes: Bytes::from(csr) }];
    v.extend(s.mbr.iter().chain(s.rab.iter()).map(|b| Step { orig_teid: teid, bytes: Bytes::from(b.clone()) }));
    v
}

/// A log entry as a replay step: a Create Session is known by the TEID the
/// original gave it, any other request by its header TEID.
fn naive_step(m: &LoggedMessage) -> Option<Step> {
    let h = relay::header(&m.bytes)?;
    let orig_teid = match h.msg_type {
        msg_type::CREATE_SESSION_REQUEST => m.created_teid?,
        _ => h.teid?,
    };
    Some(Step { orig_teid, bytes: Bytes::from(m.bytes.clone()) })
}

const NAIVE_LOG_FULL: &str = "the naive log overflowed its bound; use selective";

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests;
