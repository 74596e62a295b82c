//! `bench mme fig11` on real processes (seed 004 7.3 "Resource
//! Utilization", Fig. 11a; issue 13 item 9): per Pareto alpha and
//! balancer, the fewest hosts (each bounded by `--cpu-max`, as in
//! [`super::balance`]) whose run keeps SLO violations at or under
//! `--target-pct`, found by [`HostSearch`] over 1..=`--max-hosts`.
//!
//! The load is the load model's T4 ([`Pattern::pareto`]: bursts of
//! Pareto(alpha) service requests at Poisson times, skewed over the UEs),
//! each arrival a service request and its release. The RAN takes the
//! arrivals in rounds of [`SLOT_S`]: a round's UEs (a UE at most once; its
//! later arrivals wait for the next round) are spread over the slot, so
//! the rate of each round follows the bursts. A round that ends late makes
//! the next one take every arrival due by then; arrivals still waiting
//! after twice the run's time count as violations.

use super::balance::{attach_in_waves, budgeted_plan, cpu_time, host_pids, hot_order, round, Slo, Spread};
use super::real::Rig;
use super::{bar, finish, skews, MmeArgs};
use crate::elastic_mme::cgroup;
use anyhow::{bail, Context, Result};
use mobicore_elastic::load::{LoadConfig, LoadGen, Mix, Pattern, Skew};
use mobicore_elastic::sim::HostSearch;
use mobicore_elastic::{ProcedureKind, Profiles, Scheme};
use serde_json::{json, Value};
use std::collections::{HashSet, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

/// A round of the RAN's load, seconds.
pub const SLOT_S: f64 = 0.05;

/// A run's service requests in time order: (seconds from the start, RAN UE).
pub struct Bursts {
    pending: VecDeque<(f64, u64)>,
}

impl Bursts {
    /// T4 at `rate` procedures/s (a service request and a release per
    /// arrival) over `seconds`; the load model's hot UEs are the seeded
    /// [`hot_order`] of the RAN's, as in Fig. 10.
    pub fn new(alpha: f64, skew: Skew, ues: u64, rate: f64, seconds: f64, seed: u64) -> Bursts {
        let mut mix = Mix([0.0; ProcedureKind::COUNT]);
        mix.0[ProcedureKind::ServiceRequest.index()] = 1.0;
        let cfg = LoadConfig {
            ues: ues as u32,
            rate: rate / 2.0,
            duration_s: seconds,
            pattern: Pattern::pareto(alpha),
            skew,
            mix,
            seed,
        };
        let order = hot_order(ues, seed);
        Bursts { pending: LoadGen::new(cfg).map(|a| (a.at_ns as f64 / 1e9, order[a.ue as usize])).collect() }
    }

    /// The arrivals before `t_s`, a UE at most once (its later ones stay).
    pub fn due(&mut self, t_s: f64) -> Vec<u64> {
        let (mut taken, mut seen, mut kept) = (Vec::new(), HashSet::new(), Vec::new());
        while let Some(&(at, ue)) = self.pending.front() {
            if at >= t_s {
                break;
            }
            self.pending.pop_front();
            if seen.insert(ue) {
                taken.push(ue);
            } else {
                kept.push((at, ue));
            }
        }
        for k in kept.into_iter().rev() {
            self.pending.push_front(k);
        }
        taken
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// One run's measure.
struct Run {
    hosts: u32,
    slo: Slo,
    /// Failed, over the SLO or never run, percent.
    viol: f64,
    procedures: usize,
    not_run: usize,
    cpu_pct: Vec<f64>,
    wall_s: f64,
}

pub async fn run(a: &MmeArgs) -> Result<Vec<Value>> {
    let max_hosts = a.max_hosts.unwrap_or(4);
    let ues = u64::from(a.ues.unwrap_or(120));
    let rate = a.rate.unwrap_or(200.0);
    let seconds = a.seconds.unwrap_or(5.0);
    let slo_ms = a.slo_ms.unwrap_or(1e3 * Profiles::default().get(ProcedureKind::ServiceRequest).slo_s);
    if a.schemes.is_empty() || max_hosts == 0 || ues < 4 {
        bail!("fig11 needs schemes, --max-hosts of at least 1 and at least 4 UEs");
    }
    if !(rate > 0.0 && seconds > 0.0 && a.cpu_max() > 0.0 && slo_ms > 0.0 && a.alpha.iter().all(|&x| x > 0.0)) {
        bail!("--rate, --seconds, --cpu-max, --slo-ms and --alpha must be positive");
    }
    cgroup::available(Path::new(cgroup::ROOT), Path::new(cgroup::V1_ROOT))?;
    let skew = skews(a)[1].1;
    println!(
        "Fig. 11 (real processes): {rate} procedures/s in Pareto bursts (service requests and releases, rounds of {} ms), \
         {ues} UEs, {:.0}% of them carrying {:.0}% of the load, {seconds} s per run; hosts of {} core each (cgroup CFS \
         quota), store {}; hosts needed (1..={max_hosts}) for <= {}% of procedures over the SLO of {slo_ms} ms; seed {}",
        SLOT_S * 1e3,
        100.0 * a.hot_fraction,
        100.0 * a.hot_share,
        a.cpu_max(),
        super::balance::store_of(a)?.name(),
        a.target_pct,
        a.seed
    );
    // The most runs: the top, then ceil(log2(max)) of bisection.
    let runs_each = 1 + u64::from(u32::BITS - (max_hosts - 1).leading_zeros());
    let b = bar(a.alpha.len() as u64 * a.schemes.len() as u64 * runs_each);
    let (mut points, mut rows) = (Vec::new(), Vec::new());
    for &alpha in &a.alpha {
        for &scheme in &a.schemes {
            let mut search = HostSearch::new(max_hosts);
            let mut tried: Vec<Run> = Vec::new();
            while let Some(hosts) = search.next() {
                b.set_message(format!("alpha {alpha}, {scheme}, {hosts} hosts"));
                let r = one(a, scheme, hosts, alpha, skew, (ues, rate, seconds, slo_ms)).await?;
                search.record(hosts, r.viol <= a.target_pct);
                tried.push(r);
                b.inc(1);
            }
            let needed = search.found();
            // The run reported: the fewest hosts that met the target, else the most.
            let shown = needed.unwrap_or(max_hosts);
            let r = tried.iter().rfind(|r| r.hosts == shown).context("the search ran its answer")?;
            rows.push(vec![
                format!("{alpha}"),
                scheme.to_string(),
                needed.map_or(format!("> {max_hosts}"), |n| n.to_string()),
                format!("{:.2}", r.viol),
                tried.iter().map(|r| format!("{}:{:.1}", r.hosts, r.viol)).collect::<Vec<_>>().join(" "),
                r.cpu_pct.iter().map(|c| format!("{c:.0}")).collect::<Vec<_>>().join("/"),
                r.slo.p99.map_or("-".into(), |v| format!("{v:.2}")),
            ]);
            points.push(json!({
                "figure": 11,
                "mode": "real",
                "scheme": scheme.name(),
                "store": super::balance::store_of(a)?.name(),
                "alpha": alpha,
                "pattern": "T4",
                "hosts_needed": needed,
                "hosts": r.hosts,
                "load": rate,
                "ues": ues,
                "cpu_max": a.cpu_max(),
                "slo_ms": slo_ms,
                "target_pct": a.target_pct,
                "seed": a.seed,
                "run_s": r.wall_s,
                "procedures": r.procedures,
                "not_run": r.not_run,
                "slo_violation_pct": r.viol,
                "latency_ms_p50": r.slo.p50,
                "latency_ms_p99": r.slo.p99,
                "failed_procedures": r.slo.failed,
                "cpu_pct": r.cpu_pct,
                "tried": tried.iter().map(|r| json!({"hosts": r.hosts, "slo_violation_pct": r.viol})).collect::<Vec<_>>(),
            }));
        }
    }
    finish(
        b,
        &["alpha", "scheme", "hosts needed", "SLO viol. %", "hosts:viol. % tried", "CPU % of budget", "p99 ms"],
        &rows,
    );
    Ok(points)
}

/// One run: `hosts` hosts behind `scheme`, the UEs attached in waves,
/// then the bursts.
async fn one(
    a: &MmeArgs,
    scheme: Scheme,
    hosts: u32,
    alpha: f64,
    skew: Skew,
    (ues, rate, seconds, slo_ms): (u64, f64, f64, f64),
) -> Result<Run> {
    let plan = budgeted_plan(a, scheme, hosts)?;
    let mut rig = Rig::start(&plan, plan.deployments[0], ues, Some(rate)).await?;
    attach_in_waves(&mut rig, ues, &Spread::new(skew, ues, a.seed)).await?;
    let mut bursts = Bursts::new(alpha, skew, ues, rate, seconds, a.seed);
    let pids = host_pids(&rig, hosts)?;
    let cpu0: Vec<Duration> = pids.iter().map(|&p| cpu_time(p)).collect::<Result<_>>()?;
    rig.ran.log_outcomes();
    let t0 = Instant::now();
    let mut slot = 0u64;
    while !bursts.is_empty() && t0.elapsed().as_secs_f64() < 2.0 * seconds {
        let start = t0 + Duration::from_secs_f64(slot as f64 * SLOT_S);
        tokio::time::sleep_until(start.into()).await;
        let ues = bursts.due((slot + 1) as f64 * SLOT_S);
        if !ues.is_empty() {
            // The round's service requests and releases spread over the slot.
            rig.ran.set_rate(Some(2.0 * ues.len() as f64 / SLOT_S))?;
            round(&mut rig, &ues).await?;
        }
        slot = (slot + 1).max((t0.elapsed().as_secs_f64() / SLOT_S) as u64);
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu1: Vec<Duration> = pids.iter().map(|&p| cpu_time(p)).collect::<Result<_>>()?;
    let log = rig.ran.take_outcomes();
    rig.stop().await?;
    let cpu_pct = cpu0
        .iter()
        .zip(&cpu1)
        .map(|(c0, c1)| 100.0 * c1.saturating_sub(*c0).as_secs_f64() / wall_s / a.cpu_max())
        .collect();
    let slo = Slo::of(&log, slo_ms);
    // Each arrival never run: its service request and release.
    let not_run = 2 * bursts.len();
    let all = log.len() + not_run;
    let viol = if all == 0 { 0.0 } else { (slo.viol * log.len() as f64 / 100.0 + not_run as f64) * 100.0 / all as f64 };
    Ok(Run { hosts, slo, viol, procedures: log.len(), not_run, cpu_pct, wall_s })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_follow_the_load_model_and_take_a_ue_once_per_round() {
        let skew = Skew { hot_fraction: 0.2, hot_share: 0.8 };
        let mut b = Bursts::new(1.0, skew, 100, 400.0, 5.0, 7);
        // About 200 arrivals/s (each two procedures) over 5 s.
        let n = b.len();
        assert!((500..1500).contains(&n), "{n}");
        let (mut rounds, mut taken) = (Vec::new(), 0);
        for slot in 1..=200 {
            let r = b.due(slot as f64 * SLOT_S);
            assert_eq!(r.iter().collect::<HashSet<_>>().len(), r.len(), "a UE once per round");
            assert!(r.iter().all(|&u| u < 100));
            taken += r.len();
            rounds.push(r.len());
        }
        // What was left is a UE's later arrivals.
        assert_eq!(taken + b.len(), n);
        // Bursty: some rounds far above the mean, some empty.
        let mean = taken as f64 / rounds.len() as f64;
        assert!(rounds.iter().any(|&r| r as f64 > 3.0 * mean) && rounds.contains(&0), "{rounds:?}");
        let again: Vec<u64> = Bursts::new(1.0, skew, 100, 400.0, 5.0, 7).due(1.0);
        assert_eq!(again, Bursts::new(1.0, skew, 100, 400.0, 5.0, 7).due(1.0), "seeded");
    }
}
