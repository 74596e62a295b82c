//! One URR's measurement (TS 29.244 5.2.2): volume since the last report
//! and since the quota grant, duration with inactivity detection, and what
//! is due at a given instant. No clock: every method takes `now`, and a
//! `now` earlier than one already seen is treated as no time passing.

use super::{UsageCounts, UsageMeasurement, UsageTrigger};
use crate::rules::Urr;
use mobicore_common::state_dump::{at, since};
use std::time::{Duration, Instant};

/// Which quotas an Update URR granted anew (TS 29.244 7.5.4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Regrant {
    pub volume: bool,
    pub time: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Meter {
    pub urr: Urr,
    /// The last cumulative counts read from the plane.
    last: UsageCounts,
    /// Since the last report.
    measured: UsageCounts,
    /// Since the volume quota was granted.
    quota_used: UsageCounts,
    /// Start of the current measurement (Start Time of the next report).
    start: Instant,
    /// When the quota was last granted (the idle reference of the Quota
    /// Holding Time before any traffic).
    grant: Instant,
    /// Settled duration since the last report and since the time quota grant.
    dur_report: Duration,
    dur_grant: Duration,
    /// Time is settled into the two durations up to here.
    mark: Instant,
    last_activity: Option<Instant>,
    pub seqn: u32,
    pub vol_exhausted: bool,
    pub time_exhausted: bool,
    qht_reported: bool,
    next_period: Option<Instant>,
    /// The deadline this meter is filed under in the engine.
    pub timer: Option<Instant>,
}

/// A URR's measurement in progress in a full-state dump ([`crate::dump`]):
/// what a [`Meter`] holds but its parameters (the session's URR) and the
/// plane's counts; instants as signed microseconds from the dump.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MeterState {
    pub urr_id: u32,
    pub measured: UsageCounts,
    pub quota_used: UsageCounts,
    pub start_us: i64,
    pub grant_us: i64,
    pub mark_us: i64,
    pub last_activity_us: Option<i64>,
    pub next_period_us: Option<i64>,
    pub dur_report_us: u64,
    pub dur_grant_us: u64,
    pub seqn: u32,
    pub vol_exhausted: bool,
    pub time_exhausted: bool,
    pub qht_reported: bool,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn secs(s: u32) -> Duration {
    Duration::from_secs(u64::from(s))
}

fn later(a: Instant, b: Instant) -> Instant {
    if b > a {
        b
    } else {
        a
    }
}

impl Meter {
    pub fn new(urr: &Urr, now: Instant, counts: Option<UsageCounts>) -> Self {
        let mut m = Meter {
            urr: urr.clone(),
            last: counts.unwrap_or_default(),
            measured: UsageCounts::default(),
            quota_used: UsageCounts::default(),
            start: now,
            grant: now,
            dur_report: Duration::ZERO,
            dur_grant: Duration::ZERO,
            mark: now,
            last_activity: None,
            seqn: 0,
            vol_exhausted: false,
            time_exhausted: false,
            qht_reported: false,
            next_period: None,
            timer: None,
        };
        m.arm_period(now);
        m
    }

    /// The measurement in progress at `now`, for a dump.
    pub fn state(&self, now: Instant) -> MeterState {
        MeterState {
            urr_id: self.urr.id,
            measured: self.measured,
            quota_used: self.quota_used,
            start_us: since(self.start, now),
            grant_us: since(self.grant, now),
            mark_us: since(self.mark, now),
            last_activity_us: self.last_activity.map(|t| since(t, now)),
            next_period_us: self.next_period.map(|t| since(t, now)),
            dur_report_us: micros(self.dur_report),
            dur_grant_us: micros(self.dur_grant),
            seqn: self.seqn,
            vol_exhausted: self.vol_exhausted,
            time_exhausted: self.time_exhausted,
            qht_reported: self.qht_reported,
        }
    }

    /// The meter of `urr` carrying on the measurement of a dump at `now`,
    /// from the plane's current counts (`None`: zero).
    pub fn from_state(urr: &Urr, s: &MeterState, now: Instant, counts: Option<UsageCounts>) -> Self {
        Meter {
            urr: urr.clone(),
            last: counts.unwrap_or_default(),
            measured: s.measured,
            quota_used: s.quota_used,
            start: at(s.start_us, now),
            grant: at(s.grant_us, now),
            dur_report: Duration::from_micros(s.dur_report_us),
            dur_grant: Duration::from_micros(s.dur_grant_us),
            mark: at(s.mark_us, now),
            last_activity: s.last_activity_us.map(|t| at(t, now)),
            seqn: s.seqn,
            vol_exhausted: s.vol_exhausted,
            time_exhausted: s.time_exhausted,
            qht_reported: s.qht_reported,
            next_period: s.next_period_us.map(|t| at(t, now)),
            timer: None,
        }
    }

    fn arm_period(&mut self, now: Instant) {
        self.next_period = match self.urr.measurement_period {
            Some(p) if p > 0 && self.urr.triggers.perio => Some(now + secs(p)),
            _ => None,
        };
    }

    pub fn exhausted(&self) -> bool {
        self.vol_exhausted || self.time_exhausted
    }

    /// Whether the plane's counts must be read every sampling tick.
    pub fn needs_sampling(&self) -> bool {
        let u = &self.urr;
        (u.triggers.volth && u.volume_threshold.is_some())
            || u.volume_quota.is_some()
            || u.inactivity_detection_time.is_some()
            || (u.triggers.quhti && u.quota_holding_time.is_some())
    }

    /// New cumulative counts: what grew since the last read is measured,
    /// and traffic counts as activity at `now`.
    pub fn observe(&mut self, now: Instant, counts: UsageCounts) {
        let delta = counts.since(self.last);
        self.last = counts;
        if delta.is_zero() {
            return;
        }
        self.measured = self.measured.saturating_sum(delta);
        self.quota_used = self.quota_used.saturating_sum(delta);
        if let Some(t) = self.urr.inactivity_detection_time {
            // TS 29.244 5.2.2.3.1: a gap longer than the Inactivity
            // Detection Time is not counted.
            if let Some(a) = self.last_activity {
                if now.saturating_duration_since(a) <= secs(t) {
                    let inc = now.saturating_duration_since(later(a, self.mark));
                    self.dur_report += inc;
                    self.dur_grant += inc;
                }
            }
            self.mark = later(self.mark, now);
        }
        self.last_activity = Some(later(self.last_activity.unwrap_or(now), now));
        self.qht_reported = false;
    }

    /// Time not yet settled that counts as measured duration at `now`.
    fn tentative(&self, now: Instant) -> Duration {
        match self.urr.inactivity_detection_time {
            None => now.saturating_duration_since(self.mark),
            Some(t) => match self.last_activity {
                Some(a) if now.saturating_duration_since(a) <= secs(t) => {
                    now.saturating_duration_since(later(a, self.mark))
                }
                _ => Duration::ZERO,
            },
        }
    }

    /// Whether the duration is running at `now`.
    fn running(&self, now: Instant) -> bool {
        match (self.urr.inactivity_detection_time, self.last_activity) {
            (None, _) => true,
            (Some(t), Some(a)) => now.saturating_duration_since(a) <= secs(t),
            (Some(_), None) => false,
        }
    }

    fn settle(&mut self, now: Instant) {
        let t = self.tentative(now);
        self.dur_report += t;
        self.dur_grant += t;
        self.mark = later(self.mark, now);
    }

    pub fn duration_since_report(&self, now: Instant) -> Duration {
        self.dur_report + self.tentative(now)
    }

    fn duration_since_grant(&self, now: Instant) -> Duration {
        self.dur_grant + self.tentative(now)
    }

    /// What is due at `now`: the report triggers (only those the CP
    /// function enabled), and whether the quota state changed. Marks
    /// quotas exhausted and moves the periodic and holding-time clocks.
    pub fn evaluate(&mut self, now: Instant) -> (UsageTrigger, bool) {
        let u = &self.urr;
        let mut t = UsageTrigger::default();
        let mut changed = false;
        if u.triggers.volth
            && !self.measured.is_zero()
            && u.volume_threshold.is_some_and(|v| v.reached(self.measured.ul_octets, self.measured.dl_octets))
        {
            t.insert(UsageTrigger::VOLTH);
        }
        if !self.vol_exhausted
            && u.volume_quota.is_some_and(|q| q.reached(self.quota_used.ul_octets, self.quota_used.dl_octets))
        {
            self.vol_exhausted = true;
            changed = true;
            if u.triggers.volqu {
                t.insert(UsageTrigger::VOLQU);
            }
        }
        if u.triggers.timth && u.time_threshold.is_some_and(|s| s > 0 && self.duration_since_report(now) >= secs(s)) {
            t.insert(UsageTrigger::TIMTH);
        }
        if !self.time_exhausted && u.time_quota.is_some_and(|s| self.duration_since_grant(now) >= secs(s)) {
            self.time_exhausted = true;
            changed = true;
            if u.triggers.timqu {
                t.insert(UsageTrigger::TIMQU);
            }
        }
        if let (Some(p), Some(period)) = (self.next_period, self.urr.measurement_period) {
            if p <= now {
                t.insert(UsageTrigger::PERIO);
                // The next boundary after `now` on the same grid.
                let period = secs(period.max(1));
                // Checked: a period and a gap from the peer never overflow.
                let behind = now.saturating_duration_since(p).as_nanos() / period.as_nanos();
                let steps = u32::try_from(behind.saturating_add(1)).unwrap_or(u32::MAX);
                let next = period.checked_mul(steps).and_then(|d| p.checked_add(d));
                self.next_period = Some(
                    next.filter(|n| *n > now).unwrap_or_else(|| later(now, now.checked_add(period).unwrap_or(now))),
                );
            }
        }
        if let (true, Some(q), false) = (self.urr.triggers.quhti, self.urr.quota_holding_time, self.qht_reported) {
            let idle_since = self.last_activity.unwrap_or(self.grant);
            if q > 0 && now.saturating_duration_since(idle_since) >= secs(q) {
                self.qht_reported = true;
                t.insert(UsageTrigger::QUHTI);
            }
        }
        (t, changed)
    }

    /// Closes the measurement with a report; the next one starts at `now`
    /// from zero with the next UR-SEQN (TS 29.244 5.2.2.3.1).
    pub fn report(&mut self, now: Instant, trigger: UsageTrigger) -> UsageMeasurement {
        self.settle(now);
        let m = &self.measured;
        let r = UsageMeasurement {
            urr_id: self.urr.id,
            seqn: self.seqn,
            trigger,
            volume: self.urr.measure_volume,
            duration: self.urr.measure_duration,
            uplink_octets: m.ul_octets,
            downlink_octets: m.dl_octets,
            uplink_packets: m.ul_packets,
            downlink_packets: m.dl_packets,
            duration_secs: u32::try_from(self.dur_report.as_secs()).unwrap_or(u32::MAX),
            start: self.start,
            end: later(self.start, now),
            query_reference: None,
        };
        self.seqn = self.seqn.wrapping_add(1);
        self.measured = UsageCounts::default();
        self.dur_report = Duration::ZERO;
        self.start = later(self.start, now);
        r
    }

    /// New parameters from an Update URR (TS 29.244 7.5.4.4); returns
    /// whether the quota state changed.
    pub fn update(&mut self, now: Instant, urr: &Urr, regrant: Regrant) -> bool {
        self.settle(now);
        let was = self.exhausted();
        let period_changed =
            (urr.measurement_period, urr.triggers.perio) != (self.urr.measurement_period, self.urr.triggers.perio);
        self.urr = urr.clone();
        if period_changed {
            self.arm_period(now);
        }
        if regrant.volume {
            self.quota_used = UsageCounts::default();
            self.vol_exhausted = false;
        }
        if regrant.time {
            self.dur_grant = Duration::ZERO;
            self.time_exhausted = false;
        }
        if regrant.volume || regrant.time {
            self.grant = later(self.grant, now);
            self.qht_reported = false;
        }
        // A quota the URR no longer has cannot stay exhausted.
        if self.urr.volume_quota.is_none() {
            self.vol_exhausted = false;
        }
        if self.urr.time_quota.is_none() {
            self.time_exhausted = false;
        }
        was != self.exhausted()
    }

    /// The next instant something may become due without new traffic
    /// (traffic itself is seen by sampling).
    pub fn deadline(&self, now: Instant) -> Option<Instant> {
        let u = &self.urr;
        let mut d: Option<Instant> = None;
        let mut at = |t: Instant| d = Some(d.map_or(t, |x| x.min(t)));
        if let Some(p) = self.next_period {
            at(p);
        }
        if self.running(now) {
            if let (true, Some(s)) = (u.triggers.timth, u.time_threshold.filter(|s| *s > 0)) {
                at(now + secs(s).saturating_sub(self.duration_since_report(now)));
            }
            if let (false, Some(s)) = (self.time_exhausted, u.time_quota) {
                at(now + secs(s).saturating_sub(self.duration_since_grant(now)));
            }
        }
        if let (true, Some(q), false) = (u.triggers.quhti, u.quota_holding_time.filter(|q| *q > 0), self.qht_reported) {
            at(self.last_activity.unwrap_or(self.grant) + secs(q));
        }
        d
    }
}
