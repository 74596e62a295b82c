//! `bench mme fig8` on real processes (seed 004 7.2 "Scaling", Fig. 8):
//! the T2 ramp (`load::ramp_factor`: the rate rises to 1.8 times its mean
//! at half time and falls back as far) against a front end whose EPS
//! controller (`--autoscale`) starts and drains hosts by their load
//! reports, each host bounded by `--cpu-max` so that a host's capacity is
//! what the ramp outgrows. Measured: the latency timeline and the hosts
//! serving over time (from the front end's "up" and "draining" lines,
//! read between the RAN's phases, so late by at most one phase).
//!
//! Beside it, the stateful MME (`mobicore mme`, moved into a cgroup of
//! its own) under the same ramp, once with one host's budget and once
//! with the most the elastic MME may use: the monolith cannot scale out
//! (seed 004's stateful baseline rebalances by TAU across MMEs, which
//! mobicore's single MME has no peer for), so it is either short at the
//! peak or holds the peak's cores throughout (`core_seconds`).
//!
//! A UE stays on the host it attached at, so a host started for the load
//! only takes new UEs: the UEs churn, a quarter of them detaching and
//! attaching again each round (placed by the balancer among the hosts
//! serving then), besides every UE's service request and release.

use super::real::{Deployment, Mme, Plan, Rig};
use super::timeline::{self, Outcome};
use super::{bar, finish, MmeArgs};
use crate::elastic_mme::cgroup;
use crate::elastic_mme::Placement;
use anyhow::{bail, Context, Result};
use mobicore_elastic::load::ramp_factor;
use mobicore_ran::Phase;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// T2's peak over its mean (as the simulator's Fig. 10 T2).
const PEAK: f64 = 1.8;
/// Cohorts of UEs: one detaches and attaches again each round.
const COHORTS: u64 = 4;
/// How long a host the front end started may take to exit once the front
/// end is gone (it exits when its link closes), before it is killed.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

/// What the front end's lines say of its hosts.
#[derive(Debug, Default)]
pub struct Hosts {
    pub serving: BTreeSet<u32>,
    /// Process ids of the hosts the front end started.
    pub started: Vec<u32>,
    pub scale_outs: u32,
    pub scale_ins: u32,
}

impl Hosts {
    /// Take one line of the front end's output; whether the count changed.
    pub fn line(&mut self, l: &str) -> bool {
        let Some(rest) = l.strip_prefix("mme-frontend: ") else { return false };
        let host = |s: &str| s.strip_prefix("host")?.parse::<u32>().ok();
        let mut words = rest.split_whitespace();
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some(h), Some("up"), None, _) => host(h).is_some_and(|h| self.serving.insert(h)),
            (Some(h), Some("down"), _, _) => host(h).is_some_and(|h| self.serving.remove(&h)),
            (Some(h), Some("draining"), None, _) => {
                self.scale_ins += 1;
                host(h).is_some_and(|h| self.serving.remove(&h))
            }
            (Some("starting"), Some(_), Some("(pid"), Some(pid)) => {
                self.scale_outs += 1;
                if let Ok(pid) = pid.trim_end_matches(')').parse() {
                    self.started.push(pid);
                }
                false
            }
            _ => false,
        }
    }
}

/// A process that is not this one's child is gone (or a zombie).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')))
}

/// The hosts the front end started, once it is gone: they exit when their
/// link closes; killed if not within a bound; their cgroups removed.
async fn reap(pids: &[u32]) {
    let end = Instant::now() + EXIT_WITHIN;
    while Instant::now() < end && !pids.iter().all(|&p| gone(p)) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for &p in pids {
        if !gone(p) {
            // SAFETY: a signal to a process id this run started.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
        cgroup::remove_leftovers(p);
    }
}

/// One deployment's run under the ramp.
struct Ramped {
    outcomes: Vec<Outcome>,
    reasons: std::collections::BTreeMap<String, u64>,
    run_ms: f64,
    /// Hosts serving over time: (ms, count).
    count: Vec<(f64, usize)>,
    offered: Vec<(f64, f64)>,
    hosts: Hosts,
}

/// Attach every UE, then the T2 ramp round by round until `seconds`; an
/// elastic deployment's hosts followed from its front end's lines.
async fn ramp(mut rig: Rig, ues: u64, rate: f64, seconds: f64, b: &indicatif::ProgressBar) -> Result<Ramped> {
    let all: Vec<u64> = (0..ues).collect();
    b.set_message("attaching");
    rig.ran.attach_some(0..ues).await?;
    rig.ran.phase_of(Phase::Release, &all).await?;
    rig.ran.settle_idle().await?;
    let mut hosts = Hosts { serving: BTreeSet::from([1]), ..Hosts::default() };
    b.set_message("ramp");
    rig.ran.log_outcomes();
    let t0 = Instant::now();
    let ms = |t: Instant| t.saturating_duration_since(t0).as_secs_f64() * 1e3;
    let mut count = vec![(0.0, 1usize)];
    let mut offered = Vec::new();
    let mut r = 0;
    let result: Result<()> = async {
        while t0.elapsed().as_secs_f64() < seconds {
            let now = rate * ramp_factor(t0.elapsed().as_secs_f64() / seconds, PEAK);
            offered.push((ms(Instant::now()), now));
            rig.ran.set_rate(Some(now))?;
            let k = r % COHORTS;
            let cohort: Vec<u64> = (k * ues / COHORTS..(k + 1) * ues / COHORTS).collect();
            let phases: [(Phase, &[u64]); 5] = [
                (Phase::Detach, &cohort),
                (Phase::Attach, &cohort),
                (Phase::Release, &cohort),
                (Phase::ServiceRequest, &all),
                (Phase::Release, &all),
            ];
            for (phase, group) in phases {
                match phase {
                    Phase::Attach => rig.ran.attach_some(group[0]..group[0] + group.len() as u64).await?,
                    _ => rig.ran.phase_of(phase, group).await?,
                };
                if let Mme::Elastic { fe, .. } = &rig.mme {
                    while let Ok(l) = fe.try_recv() {
                        if hosts.line(&l) {
                            count.push((ms(Instant::now()), hosts.serving.len()));
                        }
                    }
                }
            }
            r += 1;
        }
        Ok(())
    }
    .await;
    let run_ms = ms(Instant::now());
    let log = rig.ran.take_outcomes();
    let reasons = rig.ran.report().failures.clone();
    rig.stop().await?;
    reap(&hosts.started).await;
    result?;
    let outcomes = log
        .iter()
        .map(|o| Outcome { start_ms: ms(o.started), latency_ms: o.latency.as_secs_f64() * 1e3, ok: o.ok })
        .collect();
    Ok(Ramped { outcomes, reasons, run_ms, count, offered, hosts })
}

/// Host-seconds: the hosts serving integrated over the run.
fn host_seconds(count: &[(f64, usize)], run_ms: f64) -> f64 {
    let ends = count.iter().skip(1).map(|c| c.0).chain([run_ms]);
    count.iter().zip(ends).map(|(&(t, n), end)| (end.min(run_ms) - t).max(0.0) * n as f64).sum::<f64>() / 1e3
}

pub async fn run(a: &MmeArgs) -> Result<Vec<Value>> {
    if a.sim {
        bail!("Fig. 8 runs on real processes only: drop --sim");
    }
    let max_hosts = match a.hosts.as_deref() {
        None => 3,
        Some([n]) if *n > 0 => *n,
        Some(_) => bail!("--hosts: Fig. 8 takes one count, the most hosts the controller may start"),
    };
    let ues = u64::from(a.ues.unwrap_or(60));
    // At its peak (540/s) past what one host of 0.1 core serves.
    let rate = a.rate.unwrap_or(300.0);
    let seconds = a.seconds.unwrap_or(40.0);
    let (cpu_max, bin_ms, window) = (a.cpu_max(), a.bin_ms, a.scale_window_s);
    if !(rate > 0.0 && seconds > 0.0 && cpu_max > 0.0 && bin_ms > 0.0 && window > 0) || ues < COHORTS {
        bail!("fig8 needs --rate, --seconds, --cpu-max, --bin-ms and --scale-window-s positive and {COHORTS} UEs");
    }
    cgroup::available(Path::new(cgroup::ROOT), Path::new(cgroup::V1_ROOT))?;
    // One host may go when more than one host's budget is unused (seed
    // 004 5.2: "significantly greater than 100%").
    let spare = 1.2 * cpu_max;
    // The stateful MME cannot scale out: once with one host's budget, once
    // with the most the elastic MME may use, provisioned for the peak.
    let stateful: Vec<f64> = if a.deployments.as_deref().is_some_and(|d| !d.contains(&Deployment::Stateful)) {
        Vec::new()
    } else {
        vec![cpu_max, cpu_max * f64::from(max_hosts)]
    };
    println!(
        "Fig. 8 (real processes): T2 ramp of {rate} procedures/s on average ({:.0} to {:.0}) over {seconds} s, {ues} UEs \
         ({}: service request and release each per round, a quarter detaching and attaching again); the front end's EPS \
         controller scales 1..{max_hosts} hosts of {cpu_max} core (window {window} s, one drained with {spare:.2} cores \
         spare){}; latency per {bin_ms} ms bin by start",
        rate * (2.0 - PEAK),
        rate * PEAK,
        a.balancer,
        if stateful.is_empty() {
            String::new()
        } else {
            format!("; beside, the stateful MME with {} cores", stateful.iter().map(|c| format!("{c:.2}")).collect::<Vec<_>>().join(" and "))
        }
    );
    let b = bar(1 + stateful.len() as u64);
    let plan = Plan {
        program: std::env::current_exe().context("the mobicore binary")?,
        deployments: vec![Deployment::Redis],
        hosts: 1,
        balancer: a.balancer.to_string(),
        echo: a.verbose,
        procedure_timeout_ms: a.procedure_timeout_ms,
        host_args: vec!["--cpu-max".into(), cpu_max.to_string()],
        frontend_args: [
            "--autoscale",
            "--min-hosts",
            "1",
            "--max-hosts",
            &max_hosts.to_string(),
            "--scale-window-s",
            &window.to_string(),
            "--spare-cores",
            &spare.to_string(),
        ]
        .map(String::from)
        .to_vec(),
        s11_direct: !a.s11_via_frontend,
        create_session_direct: false,
        placement: a.placement.unwrap_or(Placement::Attach),
    };
    let low = Some(rate * (2.0 - PEAK));
    b.set_message("elastic: starting");
    let elastic = ramp(Rig::start(&plan, Deployment::Redis, ues, low).await?, ues, rate, seconds, &b).await?;
    b.inc(1);
    let mut runs = vec![(a.balancer.name().to_string(), cpu_max, elastic)];
    for &cores in &stateful {
        b.set_message(format!("stateful, {cores:.2} cores: starting"));
        let rig = Rig::start(&plan, Deployment::Stateful, ues, low).await?;
        let pid = rig.procs.pid("mme").context("the stateful MME's process")?;
        // Every thread in the budget before the first UE; the cgroup goes
        // after the process (`Procs` removes it when it reaps the MME).
        let cg = cgroup::HostCgroup::enter_child(0, pid, cores)?;
        let r = ramp(rig, ues, rate, seconds, &b).await;
        drop(cg);
        runs.push((format!("stateful-{cores:.2}"), cores, r?));
        b.inc(1);
    }
    let mut rows = Vec::new();
    let mut points = Vec::new();
    for (scheme, cores, run) in runs {
        let Ramped { outcomes, reasons, run_ms, count, offered, hosts } = run;
        let bins = timeline::bins(&outcomes, bin_ms, run_ms);
        let failed = outcomes.iter().filter(|o| !o.ok).count();
        let (p50, p99) = timeline::p50_p99(&outcomes);
        let most = count.iter().map(|c| c.1).max().unwrap_or(1);
        // The cores held over the run: a host's budget per host serving.
        let core_seconds = host_seconds(&count, run_ms) * cores;
        rows.push(vec![
            scheme.clone(),
            most.to_string(),
            format!("{cores:.2}"),
            format!("{core_seconds:.1}"),
            hosts.scale_outs.to_string(),
            hosts.scale_ins.to_string(),
            outcomes.len().to_string(),
            failed.to_string(),
            p50.map_or("-".into(), |v| format!("{v:.2}")),
            p99.map_or("-".into(), |v| format!("{v:.1}")),
        ]);
        if failed > 0 {
            println!("{scheme} failures: {reasons:?}");
        }
        let count_json: Vec<Value> = count.iter().map(|(t, n)| json!({"t_ms": t, "hosts": n})).collect();
        let offered_json: Vec<Value> = offered.iter().map(|(t, r)| json!({"t_ms": t, "procedures_per_s": r})).collect();
        points.push(json!({
            "figure": 8,
            "mode": "real",
            "scheme": scheme,
            "hosts": most,
            "load": rate,
            "pattern": "T2",
            "ues": ues,
            "cpu_max": cores,
            "core_seconds": core_seconds,
            "run_ms": run_ms,
            "bin_ms": bin_ms,
            "procedures": outcomes.len(),
            "procedures_per_s": (outcomes.len() - failed) as f64 / (run_ms / 1e3).max(1e-9),
            "failed_procedures": failed,
            "failure_reasons": reasons,
            "latency_ms_p50": p50,
            "latency_ms_p99": p99,
            "scale_outs": hosts.scale_outs,
            "scale_ins": hosts.scale_ins,
            "hosts_timeline": count_json,
            "offered": offered_json,
            "timeline": timeline::bins_json(&bins),
        }));
    }
    let head = [
        "scheme",
        "most hosts",
        "cores each",
        "core-s held",
        "scale-outs",
        "scale-ins",
        "procedures",
        "failed",
        "p50 ms",
        "p99 ms",
    ];
    finish(b, &head, &rows);
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_seconds_integrate_the_hosts_serving_over_the_run() {
        // 1 host for 2 s, 3 for 1 s, 2 for the last 0.5 s.
        let count = [(0.0, 1), (2000.0, 3), (3000.0, 2)];
        assert!((host_seconds(&count, 3500.0) - 6.0).abs() < 1e-9);
        assert!((host_seconds(&[(0.0, 1)], 4000.0) - 4.0).abs() < 1e-9);
        // A change read after the run's end counts nothing past it.
        assert!((host_seconds(&[(0.0, 1), (5000.0, 2)], 4000.0) - 4.0).abs() < 1e-9);
    }

    #[test]
    fn the_front_ends_lines_count_hosts() {
        let mut h = Hosts { serving: BTreeSet::from([1]), ..Hosts::default() };
        assert!(!h.line("mme-frontend: controller: start a host"));
        assert!(!h.line("mme-frontend: starting host2 (pid 4242)"));
        assert!(h.line("mme-frontend: host2 up"));
        assert!(!h.line("mme-frontend: host2 reports load"));
        assert!(!h.line("mme-frontend: host2 up"), "already counted");
        assert!(h.line("mme-frontend: host1 draining"));
        assert!(!h.line("mme-frontend: host1 drained (heir host2, 0 held)"));
        assert!(!h.line("mme-frontend: host1 down (heir host2)"), "no more");
        assert_eq!((h.serving, h.started, h.scale_outs, h.scale_ins), (BTreeSet::from([2]), vec![4242], 1, 1));
    }
}
