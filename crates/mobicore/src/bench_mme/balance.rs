//! `bench mme fig10` on real processes (seed 004 7.3 "Load Distribution
//! and SLOs", Fig. 10; issue 13 item 8): for each balancer and host
//! count, a front end and H `mme-host`s over Redis (or host-local stores,
//! `--deployments local-cold`), each host bounded by
//! `--cpu-max` (a cgroup's CFS quota) so that its capacity is the
//! bottleneck, and the load model's arrivals (`--pattern`, `--mix`,
//! default T1 service requests and releases; [`super::arrivals`]) spread
//! over the UEs uniformly or skewed ([`Skew`] of the load model: the hot
//! fraction of the UEs carries the hot share of the procedures).
//! Measured per point: each host's CPU use over the run (from
//! /proc/<pid>/stat, of its budget), their standard deviation, and the
//! procedures over their SLO, failed or not run, in all and per class.
//!
//! The front end places every procedure (`--placement procedure`, the
//! default here, as seed 004 does); with `--placement attach` a UE stays
//! on the host it attached at and a balancer acts only when UEs attach.
//! They attach in waves, each followed by a round of the attached UEs'
//! load, so that skewed consistent hashing places the later waves by the
//! hosts' load reports (the others by count or hash). The hot UEs are
//! a seeded random set, not the first ones attached (round robin would
//! spread those evenly by construction).

use super::arrivals::{self, Arrivals, Slo};
use super::real::{Deployment, Plan, Rig};
use super::{bar, finish, skews, MmeArgs};
use crate::elastic_mme::cgroup;
use crate::elastic_mme::Placement;
use anyhow::{bail, Context, Result};
use mobicore_elastic::hash::hash64;
use mobicore_elastic::load::{LoadConfig, Skew};
use mobicore_ran::{OutcomeRecord, Phase};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// Attach waves before the measured run.
const WAVES: u64 = 4;

/// utime + stime in clock ticks from a /proc/<pid>/stat line (fields 14
/// and 15, counted past the command name, which may hold spaces).
pub fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (the state).
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Process `pid`'s CPU time so far, every thread.
pub(super) fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("/proc/{pid}/stat"))?;
    let ticks = stat_ticks(&stat).with_context(|| format!("/proc/{pid}/stat: {stat:?}"))?;
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    Ok(Duration::from_secs_f64(ticks as f64 / hz as f64))
}

/// Population standard deviation.
pub fn stddev(x: &[f64]) -> f64 {
    let n = x.len().max(1) as f64;
    let m = x.iter().sum::<f64>() / n;
    (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n).sqrt()
}

/// The UEs' load: UE `ue` runs a procedure pair in a round with a
/// probability proportional to its share of the load ([`Skew::weights`]),
/// the hot ones in every round. Which UEs are hot is drawn from the seed.
pub struct Spread {
    /// By RAN UE index: the probability of taking part in a round.
    p: Vec<f64>,
    seed: u64,
}

impl Spread {
    pub fn new(skew: Skew, ues: u64, seed: u64) -> Spread {
        let w = skew.weights(ues as u32);
        let max = w.iter().copied().fold(0.0, f64::max).max(f64::MIN_POSITIVE);
        let mut p = vec![0.0; ues as usize];
        for (i, &ue) in hot_order(ues, seed).iter().enumerate() {
            p[ue as usize] = w[i] / max;
        }
        Spread { p, seed }
    }

    /// Round `round`'s UEs among `ues`, in order.
    pub fn round(&self, round: u64, ues: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let key = hash64(self.seed, round);
        ues.into_iter()
            .filter(|&u| (hash64(key, u) as f64 / u64::MAX as f64) < self.p.get(u as usize).copied().unwrap_or(0.0))
            .collect()
    }
}

/// The RAN's UEs in the order of the load model's (hot ones first): a
/// seeded permutation.
pub fn hot_order(ues: u64, seed: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (0..ues).collect();
    order.sort_by_key(|&u| hash64(seed, u));
    order
}

/// One round: service requests of the round's UEs, then their releases.
/// The hosts' store of Figs. 10 and 11 on real processes (`--deployments`
/// of one: `redis`, the default, `local-cold` or `local-hot`).
pub(super) fn store_of(a: &MmeArgs) -> Result<Deployment> {
    match a.deployments.as_deref() {
        None => Ok(Deployment::Redis),
        Some([d @ (Deployment::Redis | Deployment::LocalCold | Deployment::LocalHot)]) => Ok(*d),
        Some(other) => {
            bail!("figs. 10 and 11 take one of redis, local-cold, local-hot as --deployments, not {other:?}")
        }
    }
}

/// Figs. 10 and 11 on real processes: `hosts` hosts of --cpu-max cores
/// each behind `scheme`, over the store of [`store_of`].
pub(super) fn budgeted_plan(a: &MmeArgs, scheme: mobicore_elastic::Scheme, hosts: u32) -> Result<Plan> {
    Ok(Plan {
        program: std::env::current_exe().context("the mobicore binary")?,
        deployments: vec![store_of(a)?],
        hosts,
        balancer: scheme.to_string(),
        echo: a.verbose,
        procedure_timeout_ms: a.procedure_timeout_ms,
        host_args: vec!["--cpu-max".into(), a.cpu_max().to_string(), "--slo-scale".into(), a.slo_scale().to_string()],
        frontend_args: vec![
            "--replicas".into(),
            a.replicas.to_string(),
            "--slo-scale".into(),
            a.slo_scale().to_string(),
        ],
        s11_direct: !a.s11_via_frontend,
        create_session_direct: false,
        placement: a.placement.unwrap_or(Placement::Procedure),
    })
}

pub(super) async fn round(rig: &mut Rig, ues: &[u64]) -> Result<()> {
    if !ues.is_empty() {
        rig.ran.phase_of(Phase::ServiceRequest, ues).await?;
        rig.ran.phase_of(Phase::Release, ues).await?;
    }
    Ok(())
}

/// UEs attach in [`WAVES`], each followed by a round of the attached
/// UEs' load, so that the balancers place the later waves by the hosts'
/// load; the UEs are idle after. The next round's number.
pub(super) async fn attach_in_waves(rig: &mut Rig, ues: u64, spread: &Spread) -> Result<u64> {
    for w in 0..WAVES {
        let wave: Vec<u64> = (w * ues / WAVES..(w + 1) * ues / WAVES).collect();
        rig.ran.attach_some(wave[0]..wave[0] + wave.len() as u64).await?;
        rig.ran.phase_of(Phase::Release, &wave).await?;
        round(rig, &spread.round(w, 0..(w + 1) * ues / WAVES)).await?;
    }
    rig.ran.settle_idle().await?;
    Ok(WAVES)
}

/// The pids of hosts 1..=`hosts`.
pub(super) fn host_pids(rig: &Rig, hosts: u32) -> Result<Vec<u32>> {
    (1..=hosts).map(|id| rig.procs.pid(&format!("host{id}")).context("a host's process")).collect()
}

/// A run of the load model's arrivals on budgeted hosts.
pub(super) struct Played {
    pub log: Vec<OutcomeRecord>,
    pub not_run: usize,
    pub t0: Instant,
    pub wall_s: f64,
    /// Each host's CPU over the run, percent of its budget.
    pub cpu_pct: Vec<f64>,
}

/// `load` played on `rig` ([`arrivals::play`]), with the CPU of hosts
/// 1..=`hosts` over it against their budget of `cpu_max` cores each.
pub(super) async fn play_on_hosts(
    rig: &mut Rig,
    hosts: u32,
    load: &mut Arrivals,
    seconds: f64,
    cpu_max: f64,
) -> Result<Played> {
    let pids = host_pids(rig, hosts)?;
    let cpu0: Vec<Duration> = pids.iter().map(|&p| cpu_time(p)).collect::<Result<_>>()?;
    let t0 = Instant::now();
    let (log, not_run) = arrivals::play(rig, load, seconds).await?;
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu1: Vec<Duration> = pids.iter().map(|&p| cpu_time(p)).collect::<Result<_>>()?;
    let cpu_pct = cpu0
        .iter()
        .zip(&cpu1)
        .map(|(c0, c1)| 100.0 * c1.saturating_sub(*c0).as_secs_f64() / wall_s / cpu_max)
        .collect();
    Ok(Played { log, not_run, t0, wall_s, cpu_pct })
}

pub async fn run(a: &MmeArgs) -> Result<Vec<Value>> {
    let host_counts = a.hosts.clone().unwrap_or_else(|| vec![2, 3, 4]);
    let ues = u64::from(a.ues.unwrap_or(120));
    let rate = a.rate.unwrap_or(300.0);
    let seconds = a.seconds.unwrap_or(5.0);
    let cpu_max = a.cpu_max();
    let slos = arrivals::slos_of(a)?;
    let (pattern, mix) = (a.load_pattern(), a.real_mix());
    if a.schemes.is_empty() || host_counts.is_empty() || host_counts.contains(&0) || ues < WAVES {
        bail!("fig10 needs schemes, host counts above 0 and at least {WAVES} UEs");
    }
    if !(rate > 0.0 && seconds > 0.0 && cpu_max > 0.0) {
        bail!("--rate, --seconds and --cpu-max must be positive");
    }
    // The hosts' budgets: fail here, not in every host.
    cgroup::available(Path::new(cgroup::ROOT), Path::new(cgroup::V1_ROOT))?;
    println!(
        "Fig. 10 (real processes): {ues} UEs, {rate} procedures/s ({}, {}) for {seconds} s per run, uniform and skewed \
         ({:.0}% of the UEs carrying {:.0}%); hosts bounded to {cpu_max} core each (cgroup CFS quota), store {}; SLO \
         {}; seed {}",
        pattern.name(),
        arrivals::describe_mix(&mix),
        100.0 * a.hot_fraction,
        100.0 * a.hot_share,
        store_of(a)?.name(),
        slos.describe(),
        a.seed
    );
    let b = bar((2 * host_counts.len() * a.schemes.len()) as u64);
    let (mut points, mut rows) = (Vec::new(), Vec::new());
    for (skew_name, skew) in skews(a) {
        let spread = Spread::new(skew, ues, a.seed);
        for &hosts in &host_counts {
            for &scheme in &a.schemes {
                b.set_message(format!("{skew_name}, {hosts} hosts, {scheme}: starting"));
                let plan = budgeted_plan(a, scheme, hosts)?;
                let mut rig = Rig::start(&plan, plan.deployments[0], ues, Some(rate)).await?;
                b.set_message(format!("{skew_name}, {hosts} hosts, {scheme}: attaching"));
                attach_in_waves(&mut rig, ues, &spread).await?;
                b.set_message(format!("{skew_name}, {hosts} hosts, {scheme}: running"));
                let mut load = Arrivals::new(LoadConfig {
                    ues: ues as u32,
                    rate,
                    duration_s: seconds,
                    pattern,
                    skew,
                    mix,
                    seed: a.seed,
                });
                let Played { log, not_run, t0, wall_s: wall, cpu_pct } =
                    play_on_hosts(&mut rig, hosts, &mut load, seconds, cpu_max).await?;
                let reasons = rig.ran.report().failures.clone();
                // Which UE, which procedure, when: to find a failure again.
                let failed: Vec<Value> = log
                    .iter()
                    .filter(|o| !o.ok)
                    .map(|o| json!({"ue": o.ue, "procedure": o.procedure, "start_ms": o.started.saturating_duration_since(t0).as_secs_f64() * 1e3}))
                    .collect();
                let slo = Slo::of(&log, &slos, not_run);
                let classes = Slo::per_class(&log, &slos);
                let sd = stddev(&cpu_pct);
                let per_s = (slo.procedures - slo.failed) as f64 / wall;
                rows.push(vec![
                    skew_name.to_string(),
                    hosts.to_string(),
                    scheme.to_string(),
                    format!("{:.2}", slo.viol),
                    format!("{sd:.1}"),
                    cpu_pct.iter().map(|c| format!("{c:.0}")).collect::<Vec<_>>().join("/"),
                    slo.p50.map_or("-".into(), |v| format!("{v:.2}")),
                    slo.p99.map_or("-".into(), |v| format!("{v:.2}")),
                    format!("{per_s:.0}"),
                    slo.failed.to_string(),
                    arrivals::classes_cell(&classes),
                ]);
                points.push(json!({
                    "figure": 10,
                    "mode": "real",
                    "scheme": scheme.name(),
                    "store": plan.deployments[0].name(),
                    "replicas": a.replicas,
                    "hosts": hosts,
                    "load": rate,
                    "skew": skew_name,
                    "pattern": pattern.name(),
                    "mix": arrivals::mix_json(&mix),
                    "ues": ues,
                    "cpu_max": cpu_max,
                    "slo_ms": slos.all_ms,
                    "run_s": wall,
                    "procedures": slo.procedures,
                    "not_run": not_run,
                    "procedures_per_s": per_s,
                    "latency_ms_p50": slo.p50,
                    "latency_ms_p99": slo.p99,
                    "slo_violation_pct": slo.viol,
                    "classes": arrivals::classes_json(&classes, &slos),
                    "cpu_pct": cpu_pct,
                    "cpu_stddev_pct": sd,
                    "failed_procedures": slo.failed,
                    "failures": reasons,
                    "failed": failed,
                }));
                rig.stop().await?;
                b.inc(1);
            }
        }
    }
    finish(
        b,
        &[
            "load",
            "hosts",
            "scheme",
            "SLO viol. %",
            "CPU sd %",
            "CPU % of budget",
            "p50 ms",
            "p99 ms",
            "proc/s",
            "failed",
            "viol. % by class",
        ],
        &rows,
    );
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_of_a_stat_line() {
        // A command name with spaces and parentheses; utime 1234, stime 56.
        let stat = "4242 (mo bi) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 9 0 100 0 0";
        assert_eq!(stat_ticks(stat), Some(1290));
        assert_eq!(stat_ticks("4242 (short) S 1"), None);
        assert_eq!(stat_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap()).map(|_| ()), Some(()));
    }

    #[test]
    fn stddev_is_the_populations() {
        assert_eq!(stddev(&[50.0, 50.0]), 0.0);
        assert!((stddev(&[40.0, 60.0]) - 10.0).abs() < 1e-12);
    }

    #[test]
    fn the_skew_is_followed_by_seeded_random_hot_ues() {
        let skew = Skew { hot_fraction: 0.2, hot_share: 0.8 };
        let s = Spread::new(skew, 1000, 7);
        let hot: Vec<u64> = (0..1000).filter(|&u| s.p[u as usize] == 1.0).collect();
        assert_eq!(hot.len(), 200);
        assert!(hot.iter().any(|&u| u >= 200), "not the first ones");
        // Over many rounds, the hot UEs carry about 80% of the procedures.
        let (mut all, mut on_hot) = (0usize, 0usize);
        for r in 0..50 {
            let round = s.round(r, 0..1000);
            on_hot += round.iter().filter(|u| hot.contains(u)).count();
            all += round.len();
        }
        let share = on_hot as f64 / all as f64;
        assert!((share - 0.8).abs() < 0.02, "{share}");
        assert_eq!(s.round(3, 0..1000), Spread::new(skew, 1000, 7).round(3, 0..1000), "seeded");
        // Uniform: everyone every round.
        assert_eq!(Spread::new(Skew::UNIFORM, 10, 7).round(0, 0..10).len(), 10);
    }
}
