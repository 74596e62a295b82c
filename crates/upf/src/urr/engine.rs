//! [`UsageEngine`]: every URR of the node, keyed by (UP SEID, URR ID).
//! Sans-I/O: the caller passes `now` and a reader of the forwarding plane's
//! cumulative counts; reports and quota changes come out of
//! [`UsageEngine::poll_event`] (or are returned, for the responses that
//! carry them), and [`UsageEngine::poll_timeout`] says when to call
//! [`UsageEngine::handle_timeout`] next.
//!
//! Cost: a URR that needs no sampling (no volume threshold or quota, no
//! inactivity or holding time) is never read until it reports or goes; a
//! session without URRs costs nothing.

use super::meter::{Meter, MeterState, Regrant};
use super::{UsageCounts, UsageMeasurement, UsageTrigger};
use crate::rules::Urr;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

/// What the engine tells the PFCP node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageEvent {
    /// A Usage Report for a Session Report Request (TS 29.244 7.5.8.3).
    Report { up_seid: u64, usage: UsageMeasurement },
    /// A URR's quota became exhausted, or available again: the session's
    /// effective rules change (see [`super::effective_rules`]).
    Quota { up_seid: u64, urr_id: u32, exhausted: bool },
}

type Key = (u64, u32);

pub struct UsageEngine {
    meters: BTreeMap<Key, Meter>,
    /// The URRs read every tick.
    sampled: BTreeSet<Key>,
    /// Time-trigger deadlines.
    timers: BTreeSet<(Instant, u64, u32)>,
    interval: Duration,
    next_sample: Option<Instant>,
    events: VecDeque<UsageEvent>,
}

/// The least a deadline moves forward, so a deadline that is due again at
/// once cannot spin the caller.
const MIN_STEP: Duration = Duration::from_millis(1);

impl UsageEngine {
    /// `interval`: how often the counts of URRs with volume or activity
    /// triggers are read.
    pub fn new(interval: Duration) -> Self {
        UsageEngine {
            meters: BTreeMap::new(),
            sampled: BTreeSet::new(),
            timers: BTreeSet::new(),
            interval: interval.max(MIN_STEP),
            next_sample: None,
            events: VecDeque::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.meters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.meters.is_empty()
    }

    /// How many URRs are read each tick.
    pub fn sampled(&self) -> usize {
        self.sampled.len()
    }

    /// A new URR (Create URR): its measurement starts now, from the
    /// plane's current counts (`None`: zero).
    pub fn install(&mut self, now: Instant, up_seid: u64, urr: &Urr, counts: Option<UsageCounts>) {
        let key = (up_seid, urr.id);
        self.forget(key);
        self.meters.insert(key, Meter::new(urr, now, counts));
        self.refile(key, now);
    }

    /// A URR carrying on the measurement of a full-state dump taken at
    /// `now` ([`crate::dump`]), from the plane's current counts.
    pub fn restore(&mut self, now: Instant, up_seid: u64, urr: &Urr, s: &MeterState, counts: Option<UsageCounts>) {
        let key = (up_seid, urr.id);
        self.forget(key);
        self.meters.insert(key, Meter::from_state(urr, s, now, counts));
        self.refile(key, now);
    }

    /// The measurements in progress of a session's URRs at `now`, by URR ID.
    pub fn states(&self, up_seid: u64, now: Instant) -> Vec<MeterState> {
        self.meters.range((up_seid, 0)..=(up_seid, u32::MAX)).map(|(_, m)| m.state(now)).collect()
    }

    /// New parameters for a URR (Update URR). Usage up to now counts under
    /// the old ones; a granted quota starts from zero. An unknown URR is
    /// installed.
    pub fn update(&mut self, now: Instant, up_seid: u64, urr: &Urr, regrant: Regrant, counts: Option<UsageCounts>) {
        let key = (up_seid, urr.id);
        let Some(m) = self.meters.get_mut(&key) else {
            return self.install(now, up_seid, urr, counts);
        };
        if let Some(c) = counts {
            m.observe(now, c);
        }
        if m.update(now, urr, regrant) {
            self.events.push_back(UsageEvent::Quota { up_seid, urr_id: urr.id, exhausted: m.exhausted() });
        }
        self.refile(key, now);
    }

    /// An immediate report (Query URR, TS 29.244 7.5.4.10): IMMER, plus any
    /// trigger due at the same time; the measurement restarts.
    pub fn query(
        &mut self,
        now: Instant,
        up_seid: u64,
        urr_id: u32,
        counts: Option<UsageCounts>,
        reference: Option<u32>,
    ) -> Option<UsageMeasurement> {
        let key = (up_seid, urr_id);
        let mut r = self.step(key, now, counts, UsageTrigger::IMMER)?;
        r.query_reference = reference;
        Some(r)
    }

    /// The final report of a removed URR (TERMR), from its last counts.
    pub fn remove(
        &mut self,
        now: Instant,
        up_seid: u64,
        urr_id: u32,
        counts: Option<UsageCounts>,
    ) -> Option<UsageMeasurement> {
        let key = (up_seid, urr_id);
        let r = self.step(key, now, counts, UsageTrigger::TERMR);
        self.forget(key);
        r
    }

    /// The final reports of every URR of a deleted session (TERMR, TS
    /// 29.244 7.5.7), `read` giving each URR's last counts.
    pub fn remove_session(
        &mut self,
        now: Instant,
        up_seid: u64,
        mut read: impl FnMut(u32) -> Option<UsageCounts>,
    ) -> Vec<UsageMeasurement> {
        let ids: Vec<u32> = self.meters.range((up_seid, 0)..=(up_seid, u32::MAX)).map(|(k, _)| k.1).collect();
        ids.into_iter().filter_map(|id| self.remove(now, up_seid, id, read(id))).collect()
    }

    /// Drops a session's URRs without reports (its association went).
    pub fn forget_session(&mut self, up_seid: u64) {
        let keys: Vec<Key> = self.meters.range((up_seid, 0)..=(up_seid, u32::MAX)).map(|(k, _)| *k).collect();
        for k in keys {
            self.forget(k);
        }
    }

    /// The session's URRs whose quota is exhausted.
    pub fn exhausted(&self, up_seid: u64) -> Vec<u32> {
        self.meters.range((up_seid, 0)..=(up_seid, u32::MAX)).filter(|(_, m)| m.exhausted()).map(|(k, _)| k.1).collect()
    }

    /// Whether a URR is known, and its next UR-SEQN.
    pub fn next_seqn(&self, up_seid: u64, urr_id: u32) -> Option<u32> {
        self.meters.get(&(up_seid, urr_id)).map(|m| m.seqn)
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let sample = self.next_sample.filter(|_| !self.sampled.is_empty());
        let timer = self.timers.first().map(|t| t.0);
        match (sample, timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<UsageEvent> {
        self.events.pop_front()
    }

    /// Reads the sampled URRs if their tick is due, and runs the due time
    /// triggers. `read` gives a URR's cumulative counts in the plane.
    pub fn handle_timeout(&mut self, now: Instant, mut read: impl FnMut(u64, u32) -> Option<UsageCounts>) {
        let mut due: BTreeSet<Key> = BTreeSet::new();
        if self.next_sample.is_some_and(|t| t <= now) {
            due.extend(self.sampled.iter().copied());
            self.next_sample = Some(now + self.interval);
        }
        while let Some(&(t, s, u)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            if let Some(m) = self.meters.get_mut(&(s, u)) {
                m.timer = None;
            }
            due.insert((s, u));
        }
        for key in due {
            let counts = read(key.0, key.1);
            if let Some(r) = self.step(key, now, counts, UsageTrigger::default()) {
                self.events.push_back(UsageEvent::Report { up_seid: key.0, usage: r });
            }
        }
    }

    /// Feeds counts, evaluates, reports if anything is due or `forced` is
    /// set, and refiles the URR's deadline.
    fn step(
        &mut self,
        key: Key,
        now: Instant,
        counts: Option<UsageCounts>,
        forced: UsageTrigger,
    ) -> Option<UsageMeasurement> {
        let m = self.meters.get_mut(&key)?;
        if let Some(c) = counts {
            m.observe(now, c);
        }
        let (due, changed) = m.evaluate(now);
        if changed {
            self.events.push_back(UsageEvent::Quota { up_seid: key.0, urr_id: key.1, exhausted: m.exhausted() });
        }
        let trigger = due | forced;
        let r = (!trigger.is_empty()).then(|| m.report(now, trigger));
        self.refile(key, now);
        r
    }

    /// Files a URR under its current deadline and sampling need.
    fn refile(&mut self, key: Key, now: Instant) {
        let Some(m) = self.meters.get_mut(&key) else { return };
        if let Some(t) = m.timer.take() {
            self.timers.remove(&(t, key.0, key.1));
        }
        if let Some(d) = m.deadline(now) {
            let d = d.max(now + MIN_STEP);
            m.timer = Some(d);
            self.timers.insert((d, key.0, key.1));
        }
        if m.needs_sampling() {
            self.sampled.insert(key);
            if self.next_sample.is_none() {
                self.next_sample = Some(now + self.interval);
            }
        } else {
            self.sampled.remove(&key);
        }
    }

    fn forget(&mut self, key: Key) {
        if let Some(m) = self.meters.remove(&key) {
            if let Some(t) = m.timer {
                self.timers.remove(&(t, key.0, key.1));
            }
        }
        self.sampled.remove(&key);
    }
}
