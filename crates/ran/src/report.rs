//! What a RAN run measured: per-procedure latencies with percentiles, and
//! failures counted by reason.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The phases of a run, for progress bars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Phase {
    Connect,
    S1Setup,
    Attach,
    Detach,
    /// Second attach round, with the GUTI.
    Reattach,
    /// Detach after the second round.
    Redetach,
    /// Connected UEs released to ECM-IDLE (user inactivity).
    Release,
    /// UE-triggered service requests of idle UEs.
    ServiceRequest,
    /// X2 handovers of connected UEs to the next eNB.
    X2Handover,
    /// S1 handovers of connected UEs to the next eNB (direct forwarding
    /// for even UE indices, indirect through the S-GW for odd ones).
    S1Handover,
    /// Tracking area updates of idle UEs.
    Tau,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Connect => "connect",
            Phase::S1Setup => "s1-setup",
            Phase::Attach => "attach",
            Phase::Detach => "detach",
            Phase::Reattach => "reattach",
            Phase::Redetach => "redetach",
            Phase::Release => "release",
            Phase::ServiceRequest => "service-request",
            Phase::X2Handover => "x2-handover",
            Phase::S1Handover => "s1-handover",
            Phase::Tau => "tau",
        }
    }
}

/// Progress of the current phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub phase: Phase,
    /// Procedures ended (succeeded or failed).
    pub done: u64,
    pub failed: u64,
    pub total: u64,
}

/// Latency figures of one procedure, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

impl LatencySummary {
    pub fn of(values: &[u64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let mut v = values.to_vec();
        v.sort_unstable();
        LatencySummary {
            count: v.len() as u64,
            min: v[0],
            mean: v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64,
            p50: nearest_rank(&v, 50.0),
            p90: nearest_rank(&v, 90.0),
            p99: nearest_rank(&v, 99.0),
            max: v[v.len() - 1],
        }
    }
}

/// Nearest-rank percentile of sorted values; 0 for none.
fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The `p`th percentile (0..=100, nearest rank) of unsorted values.
pub fn percentile(values: &[u64], p: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    Some(nearest_rank(&v, p))
}

/// One measured phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    pub succeeded: u64,
    pub failed: u64,
    pub latencies_us: Vec<u64>,
    pub elapsed: Duration,
}

impl PhaseReport {
    pub fn record(&mut self, latency: Duration, ok: bool) {
        if ok {
            self.succeeded += 1;
            self.latencies_us.push(latency.as_micros() as u64);
        } else {
            self.failed += 1;
        }
    }
    /// Successful procedures per second of the phase.
    pub fn per_second(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.succeeded as f64 / s
        } else {
            0.0
        }
    }
    pub fn summary(&self) -> LatencySummary {
        LatencySummary::of(&self.latencies_us)
    }
}

/// What happened while the mobility model moved UEs
/// ([`crate::Ran::moving`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MovingReport {
    /// The model's handovers by "x2-handover" / "s1-handover".
    pub handovers: BTreeMap<String, PhaseReport>,
    /// Other procedures meanwhile, by procedure name: normal TAUs ("tau",
    /// after a reselection or a handover out of the TAI list), periodic
    /// TAUs at T3412 expiry ("periodic_tau"), service requests, answers to
    /// paging.
    pub other: BTreeMap<String, PhaseReport>,
    /// Moves the model asked for, by handover type (an idle UE's move is
    /// a reselection, whatever its type).
    pub moves: BTreeMap<String, u64>,
    /// Idle UEs that reselected the target's cell (TS 36.304 5.2.4).
    #[serde(default)]
    pub reselections: u64,
    /// Of those, the ones whose new cell was outside their TAI list: each
    /// started a normal TAU (its outcome under `other["tau"]`).
    #[serde(default)]
    pub reselection_taus: u64,
    /// Moves not started, by "type: reason" (the UE was busy; or
    /// "reselection: reason").
    pub skipped: BTreeMap<String, u64>,
    /// Handovers started that had not ended when the run stopped waiting.
    pub unfinished: u64,
}

/// The result of [`crate::run`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RanReport {
    pub ues: u64,
    pub enbs: u32,
    pub attached: u64,
    /// Failed attaches.
    pub failed: u64,
    pub attach_latencies_us: Vec<u64>,
    pub elapsed_attach: Duration,
    pub attach_per_s: f64,
    pub detached: u64,
    pub detach_failed: u64,
    pub detach_latencies_us: Vec<u64>,
    pub elapsed_detach: Duration,
    pub detach_per_s: f64,
    /// Second round (attach with GUTI, then detach), when configured.
    pub reattach: Option<PhaseReport>,
    pub redetach: Option<PhaseReport>,
    /// The mobility phases ([`crate::config::RanConfig::mobility`]), in
    /// the order they ran.
    #[serde(default)]
    pub mobility: Vec<(Phase, PhaseReport)>,
    /// Procedures no phase started, by procedure name: service requests
    /// of idle UEs with uplink data, answers to paging.
    #[serde(default)]
    pub unsolicited: BTreeMap<String, PhaseReport>,
    /// The mobility model's runs ([`crate::Ran::moving`]), in order.
    #[serde(default)]
    pub moving: Vec<MovingReport>,
    /// S1AP messages the driver could not hand to its SCTP endpoint (the
    /// endpoint task was gone): counted, not silently dropped.
    #[serde(default)]
    pub send_errors: u64,
    /// Failed procedures by "procedure: reason".
    pub failures: BTreeMap<String, u64>,
    /// Odd events that failed no procedure (dropped messages, resyncs ...).
    pub anomalies: BTreeMap<String, u64>,
}

impl RanReport {
    pub fn attach_summary(&self) -> LatencySummary {
        LatencySummary::of(&self.attach_latencies_us)
    }
    pub fn detach_summary(&self) -> LatencySummary {
        LatencySummary::of(&self.detach_latencies_us)
    }
    pub fn attach_p50(&self) -> Option<u64> {
        percentile(&self.attach_latencies_us, 50.0)
    }
    pub fn attach_p90(&self) -> Option<u64> {
        percentile(&self.attach_latencies_us, 90.0)
    }
    pub fn attach_p99(&self) -> Option<u64> {
        percentile(&self.attach_latencies_us, 99.0)
    }
    pub fn detach_p50(&self) -> Option<u64> {
        percentile(&self.detach_latencies_us, 50.0)
    }
    pub fn detach_p90(&self) -> Option<u64> {
        percentile(&self.detach_latencies_us, 90.0)
    }
    pub fn detach_p99(&self) -> Option<u64> {
        percentile(&self.detach_latencies_us, 99.0)
    }

    pub(crate) fn set_attach(&mut self, p: PhaseReport) {
        self.attached = p.succeeded;
        self.failed = p.failed;
        self.attach_per_s = p.per_second();
        self.elapsed_attach = p.elapsed;
        self.attach_latencies_us = p.latencies_us;
    }

    /// A further attach round's results, added to the run's.
    pub(crate) fn add_attach(&mut self, p: &PhaseReport) {
        self.attached += p.succeeded;
        self.failed += p.failed;
        self.elapsed_attach += p.elapsed;
        self.attach_latencies_us.extend_from_slice(&p.latencies_us);
        let s = self.elapsed_attach.as_secs_f64();
        self.attach_per_s = if s > 0.0 { self.attached as f64 / s } else { 0.0 };
    }

    pub(crate) fn set_detach(&mut self, p: PhaseReport) {
        self.detached = p.succeeded;
        self.detach_failed = p.failed;
        self.detach_per_s = p.per_second();
        self.elapsed_detach = p.elapsed;
        self.detach_latencies_us = p.latencies_us;
    }

    /// A human table of the run.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "UEs {} on {} eNB(s)", self.ues, self.enbs);
        let _ = writeln!(
            out,
            "{:<15} {:>8} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}",
            "procedure", "ok", "failed", "per s", "p50 ms", "p90 ms", "p99 ms", "max ms"
        );
        let mut row = |name: &str, ok: u64, failed: u64, per_s: f64, s: LatencySummary| {
            let ms = |us: u64| us as f64 / 1000.0;
            let _ = writeln!(
                out,
                "{name:<15} {ok:>8} {failed:>7} {per_s:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                ms(s.p50),
                ms(s.p90),
                ms(s.p99),
                ms(s.max)
            );
        };
        row("attach", self.attached, self.failed, self.attach_per_s, self.attach_summary());
        if self.detached + self.detach_failed > 0 {
            row("detach", self.detached, self.detach_failed, self.detach_per_s, self.detach_summary());
        }
        for (name, p) in [("reattach", &self.reattach), ("redetach", &self.redetach)] {
            if let Some(p) = p {
                row(name, p.succeeded, p.failed, p.per_second(), p.summary());
            }
        }
        for (phase, p) in &self.mobility {
            row(phase.name(), p.succeeded, p.failed, p.per_second(), p.summary());
        }
        for (title, map) in [("failures", &self.failures), ("anomalies", &self.anomalies)] {
            if !map.is_empty() {
                let _ = writeln!(out, "{title}:");
                for (reason, n) in map {
                    let _ = writeln!(out, "  {n:>8}  {reason}");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 90.0), Some(90));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[], 50.0), None);
        let s = LatencySummary::of(&[5, 1, 3]);
        assert_eq!((s.count, s.min, s.p50, s.max), (3, 1, 3, 5));
        assert_eq!(s.mean, 3.0);
    }

    #[test]
    fn phase_rates_and_report_fields() {
        let mut p = PhaseReport::default();
        p.record(Duration::from_micros(1500), true);
        p.record(Duration::from_micros(500), true);
        p.record(Duration::from_secs(10), false);
        p.elapsed = Duration::from_millis(500);
        assert_eq!(p.per_second(), 4.0);
        let mut r = RanReport { ues: 3, enbs: 1, ..Default::default() };
        r.set_attach(p);
        assert_eq!((r.attached, r.failed), (2, 1));
        assert_eq!(r.attach_p50(), Some(500));
        assert_eq!(r.attach_p99(), Some(1500));
        r.failures.insert("attach: timeout".into(), 1);
        let t = r.table();
        assert!(t.contains("attach") && t.contains("timeout"), "{t}");
    }
}
