//! The EPS controller's host scaling (seed 004 5.2 "Scaling"), sans-I/O:
//! it takes the hosts' load reports and the balancer's SLO violations and
//! says when to start a host and which host to drain. The front end's
//! shell does what it says (starts an `mme-host` process, drains one).
//!
//! # Decisions
//! At every [`EpsController::poll`] the controller takes one sample of the
//! serving hosts (live and not draining):
//! - *hot*: SLO violations since the last sample ("persistent SLO
//!   violations", seed 004 5.2), or every serving host's CPU use at least
//!   `high_cpu` ("the load on all existing hosts is high");
//! - *cold*: the CPU left over the serving hosts, `sum(c_i (1 - u_i))`
//!   (`u_i` is of the host's budget `c_i`), at
//!   least `spare_cpu` cores ("the total available CPU across MME hosts is
//!   high, say significantly greater than 100%").
//!
//! Hysteresis: a decision needs every sample of the last `window` to
//! agree (hot: start a host, below `max_hosts`; cold: drain the least
//! loaded host, above `min_hosts`). After a decision, and while a host
//! is starting or draining, the samples start over, so the next decision
//! is taken on a full window of the new membership.

use crate::procedure::HostId;
use crate::report::HostReport;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// What the controller decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start a new host (a new host number).
    StartHost,
    /// Stop placing new UEs on this host, hand its UEs to the others, stop it.
    Drain(HostId),
}

/// The controller's thresholds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ControllerConfig {
    pub min_hosts: usize,
    pub max_hosts: usize,
    /// How long a condition must hold before a decision.
    pub window: Duration,
    /// CPU use (of a host's budget) over which every host counts as loaded.
    pub high_cpu: f64,
    /// Spare cores over all serving hosts over which one may go.
    pub spare_cpu: f64,
    /// The balancer's violations make a sample hot only while some serving
    /// host uses at least this share of its budget. 0: always (the
    /// simulator, whose queues are exact). Real hosts' queues come from
    /// reports a period old, and the balancer's between-reports
    /// correction counts every procedure placed since as queued (as it
    /// must, against bursts), so it predicts violations at any load: at a
    /// fifth of their budgets `bench mme fig8`'s hosts were scaled out and
    /// never in.
    pub violations_above_cpu: f64,
    /// How long a started host may take to come up before the controller
    /// may decide again.
    pub start_within: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            min_hosts: 1,
            max_hosts: 8,
            window: Duration::from_secs(10),
            high_cpu: 0.8,
            spare_cpu: 1.5,
            violations_above_cpu: 0.0,
            start_within: Duration::from_secs(30),
        }
    }
}

/// One look at the serving hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sample {
    Hot,
    Cold,
    Neither,
}

#[derive(Clone, Debug, Default)]
struct Host {
    report: Option<HostReport>,
    draining: bool,
}

/// The controller's state.
pub struct EpsController {
    cfg: ControllerConfig,
    hosts: BTreeMap<HostId, Host>,
    samples: VecDeque<(Instant, Sample)>,
    /// Violations not sampled yet.
    violations: u64,
    /// A host asked for and not up yet, since when.
    starting: Option<Instant>,
}

impl EpsController {
    pub fn new(cfg: ControllerConfig) -> EpsController {
        EpsController { cfg, hosts: BTreeMap::new(), samples: VecDeque::new(), violations: 0, starting: None }
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.cfg
    }

    /// A host is up (it serves new UEs).
    pub fn host_up(&mut self, host: HostId) {
        self.hosts.entry(host).or_default();
        self.starting = None;
        self.samples.clear();
    }

    /// A host is draining (no new UEs; it leaves when its UEs are handed on).
    pub fn draining(&mut self, host: HostId) {
        if let Some(h) = self.hosts.get_mut(&host) {
            h.draining = true;
        }
        self.samples.clear();
    }

    /// A host is gone (drained, stopped, failed).
    pub fn host_down(&mut self, host: HostId) {
        self.hosts.remove(&host);
        self.samples.clear();
    }

    /// A host's load report.
    pub fn report(&mut self, host: HostId, report: HostReport) {
        if let Some(h) = self.hosts.get_mut(&host) {
            h.report = Some(report);
        }
    }

    /// SLO violations the balancer reported (seed 004 Algorithm 1: no
    /// viable host for a new procedure).
    pub fn violations(&mut self, n: u64) {
        self.violations += n;
    }

    /// The hosts serving new UEs.
    pub fn serving(&self) -> usize {
        self.hosts.values().filter(|h| !h.draining).count()
    }

    /// Samples the hosts at `now` and says what to do, if anything. The
    /// caller does it (and tells [`Self::host_up`] / [`Self::draining`]).
    #[must_use]
    pub fn poll(&mut self, now: Instant) -> Option<Decision> {
        let violations = std::mem::take(&mut self.violations);
        if self.starting.is_some_and(|at| now.saturating_duration_since(at) < self.cfg.start_within) {
            return None;
        }
        self.starting = None;
        if self.hosts.values().any(|h| h.draining) {
            self.samples.clear();
            return None;
        }
        let sample = self.sample(violations);
        self.samples.push_back((now, sample));
        let window = self.cfg.window;
        while self.samples.len() > 1 && now.saturating_duration_since(self.samples[1].0) >= window {
            self.samples.pop_front();
        }
        let (first, _) = *self.samples.front()?;
        if now.saturating_duration_since(first) < window || self.samples.iter().any(|&(_, s)| s != sample) {
            return None;
        }
        let decision = match sample {
            Sample::Hot if self.serving() < self.cfg.max_hosts => {
                self.starting = Some(now);
                Decision::StartHost
            }
            Sample::Cold if self.serving() > self.cfg.min_hosts => Decision::Drain(self.least_loaded()?),
            _ => return None,
        };
        self.samples.clear();
        Some(decision)
    }

    fn sample(&self, violations: u64) -> Sample {
        let serving: Vec<&Host> = self.hosts.values().filter(|h| !h.draining).collect();
        if serving.is_empty() {
            return Sample::Neither;
        }
        let cpu = |h: &Host| h.report.as_ref().map_or(0.0, |r| r.cpu);
        let violating = violations > 0 && serving.iter().any(|h| cpu(h) >= self.cfg.violations_above_cpu);
        if violating || serving.iter().all(|h| cpu(h) >= self.cfg.high_cpu) {
            return Sample::Hot;
        }
        // A host's CPU use is of its budget, c_i: c_i (1 - u_i) cores left.
        let spare: f64 = serving.iter().map(|h| capacity(h.report.as_ref()) * (1.0 - cpu(h))).sum();
        if spare >= self.cfg.spare_cpu {
            Sample::Cold
        } else {
            Sample::Neither
        }
    }

    /// The serving host using least CPU; of equals, the newest (highest number).
    fn least_loaded(&self) -> Option<HostId> {
        let cpu = |h: &Host| h.report.as_ref().map_or(0.0, |r| r.cpu);
        self.hosts
            .iter()
            .filter(|(_, h)| !h.draining)
            .min_by(|(a, x), (b, y)| cpu(x).total_cmp(&cpu(y)).then(b.cmp(a)))
            .map(|(&id, _)| id)
    }
}

/// A host's cores (its NFs' largest share; 1 until it reports).
fn capacity(r: Option<&HostReport>) -> f64 {
    r.and_then(|r| r.nfs.iter().map(|n| n.c).reduce(f64::max)).unwrap_or(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procedure::ProcedureKind;
    use crate::report::NfLoad;

    fn load(cpu: f64) -> HostReport {
        let nfs = ProcedureKind::ALL.iter().map(|&kind| NfLoad { kind, q: 0.0, c: 1.0 }).collect();
        HostReport { cpu, nfs }
    }

    fn controller(hosts: &[u32]) -> EpsController {
        let cfg = ControllerConfig {
            min_hosts: 1,
            max_hosts: 3,
            window: Duration::from_secs(5),
            start_within: Duration::from_secs(30),
            ..ControllerConfig::default()
        };
        let mut c = EpsController::new(cfg);
        for &h in hosts {
            c.host_up(HostId(h));
        }
        c
    }

    #[test]
    fn spare_cores_are_of_each_hosts_budget() {
        // Three hosts of 0.1 core at 20% of it: 0.24 cores left, not
        // 3 x (0.1 - 0.2) < 0.
        let mut c = EpsController::new(ControllerConfig { spare_cpu: 0.2, ..ControllerConfig::default() });
        for h in 1..=3 {
            c.host_up(HostId(h));
            let nfs = ProcedureKind::ALL.iter().map(|&kind| NfLoad { kind, q: 0.0, c: 0.1 }).collect();
            c.report(HostId(h), HostReport { cpu: 0.2, nfs });
        }
        assert_eq!(c.sample(0), Sample::Cold);
        c.cfg.spare_cpu = 0.25;
        assert_eq!(c.sample(0), Sample::Neither);
    }

    /// Every host reports `cpus[i]` each second from `from` for `secs`;
    /// the decisions, with the second each came at.
    fn run(c: &mut EpsController, t0: Instant, from: u64, secs: u64, cpus: &[f64]) -> Vec<(u64, Decision)> {
        let mut out = Vec::new();
        for s in from..from + secs {
            let hosts: Vec<HostId> = c.hosts.keys().copied().collect();
            for (h, &cpu) in hosts.iter().zip(cpus.iter().cycle()) {
                c.report(*h, load(cpu));
            }
            if let Some(d) = c.poll(t0 + Duration::from_secs(s)) {
                out.push((s, d));
            }
        }
        out
    }

    #[test]
    fn persistent_high_load_starts_one_host_after_the_window() {
        let t0 = Instant::now();
        let mut c = controller(&[1, 2]);
        // Busy for 4 s, a dip, then busy again: the window starts over.
        assert!(run(&mut c, t0, 0, 4, &[0.9, 0.95]).is_empty());
        assert!(run(&mut c, t0, 4, 1, &[0.9, 0.5]).is_empty(), "one host below: not every host is loaded");
        assert_eq!(run(&mut c, t0, 5, 6, &[0.9]), vec![(10, Decision::StartHost)]);
        // While it starts (up to start_within), nothing more.
        assert!(run(&mut c, t0, 11, 19, &[0.9]).is_empty());
        // It came up: a full window of the three hosts, loaded, is needed,
        // and max_hosts (3) stops it.
        c.host_up(HostId(3));
        assert!(run(&mut c, t0, 30, 30, &[0.9]).is_empty(), "at max_hosts");
    }

    #[test]
    fn violations_count_as_load() {
        let t0 = Instant::now();
        let mut c = controller(&[1, 2]);
        let mut decided = Vec::new();
        for s in 0..10 {
            c.violations(1);
            if let Some(d) = c.poll(t0 + Duration::from_secs(s)) {
                decided.push((s, d));
            }
        }
        assert_eq!(decided, vec![(5, Decision::StartHost)]);
    }

    #[test]
    fn violations_count_only_while_a_host_is_busy_enough_if_so_configured() {
        let t0 = Instant::now();
        let mut c = controller(&[1, 2]);
        c.cfg.violations_above_cpu = 0.5;
        // Never enough spare for one to go.
        c.cfg.spare_cpu = 10.0;
        let mut decided = Vec::new();
        for s in 0..20 {
            // Idle for 10 s, then host 2 at 60% of its budget.
            let cpu = if s < 10 { 0.2 } else { 0.6 };
            c.report(HostId(2), HostReport { cpu, nfs: vec![] });
            c.violations(1);
            if let Some(d) = c.poll(t0 + Duration::from_secs(s)) {
                decided.push((s, d));
            }
        }
        assert_eq!(decided, vec![(15, Decision::StartHost)], "a full window of busy samples");
    }

    #[test]
    fn a_host_that_does_not_come_up_is_asked_for_again_later() {
        let t0 = Instant::now();
        let mut c = controller(&[1]);
        let d = run(&mut c, t0, 0, 60, &[0.9]);
        assert_eq!(d, vec![(5, Decision::StartHost), (40, Decision::StartHost)], "after start_within, a new window");
    }

    #[test]
    fn persistent_spare_cpu_drains_the_least_loaded_host_down_to_the_minimum() {
        let t0 = Instant::now();
        let mut c = controller(&[1, 2, 3]);
        // 3 cores, 0.6 used: 2.4 spare (>= 1.5). Host 2 is least loaded.
        assert_eq!(run(&mut c, t0, 0, 6, &[0.3, 0.1, 0.2]), vec![(5, Decision::Drain(HostId(2)))]);
        // Nothing while it drains.
        c.draining(HostId(2));
        assert!(run(&mut c, t0, 6, 20, &[0.3, 0.1, 0.2]).is_empty());
        c.host_down(HostId(2));
        // Hosts 1 and 3: 2 cores, 0.4 used, 1.6 spare: equals, the newest goes.
        assert_eq!(run(&mut c, t0, 26, 6, &[0.2]), vec![(31, Decision::Drain(HostId(3)))]);
        c.host_down(HostId(3));
        // One host left: the minimum.
        assert!(run(&mut c, t0, 32, 30, &[0.0]).is_empty());
    }

    #[test]
    fn between_the_thresholds_nothing_happens() {
        let t0 = Instant::now();
        let mut c = controller(&[1, 2]);
        // 2 cores, 0.6 and 0.7 used: 0.7 spare, not all over 0.8.
        assert!(run(&mut c, t0, 0, 60, &[0.6, 0.7]).is_empty());
        // Alternating hot and cold never holds for a window.
        let mut decided = Vec::new();
        for s in 60..120 {
            let cpu = if s % 2 == 0 { 0.9 } else { 0.0 };
            decided.extend(run(&mut c, t0, s, 1, &[cpu]));
        }
        assert!(decided.is_empty(), "{decided:?}");
    }

    #[test]
    fn hosts_that_never_reported_count_as_idle_cores() {
        let t0 = Instant::now();
        let mut c = controller(&[1, 2]);
        let mut decided = Vec::new();
        for s in 0..6 {
            decided.extend(c.poll(t0 + Duration::from_secs(s)).map(|d| (s, d)));
        }
        assert_eq!(decided, vec![(5, Decision::Drain(HostId(2)))]);
    }
}
