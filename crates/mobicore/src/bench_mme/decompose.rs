//! `bench mme fig9` on real processes (seed 004 7.1 "Functional
//! Decomposition & NF Prioritization", Fig. 9; issue 13 item 9): service
//! request and handover latency on ONE `mme-host` bounded by `--cpu-max`
//! (a cgroup's CFS quota), behind a front end, the UE contexts in the
//! host's own store, in four arrangements of its NF instances:
//!
//! - `unified`: one instance takes every kind (`--nf-instances 1`);
//! - `decomposed`: an instance per procedure kind (`--nf attach=1,
//!   service-request=1,handover=1,tau=1`), P from the profiles
//!   (`SLO_min / SLO`);
//! - `h-over-s`, `s-over-h`: decomposed with P fixed
//!   (`--nf-priority`), the handover's above the service request's and
//!   the reverse, ten to one as in the simulator's arrangements
//!   ([`super::fig9::LOW_PRIORITY`]).
//!
//! The host and its instances are pinned to one CPU (`--pin-cpu`, default
//! the last) and share its budget there by their cgroups' weights (1000 P
//! or 1024 P), which is where P acts: the budget is the bottleneck, as in
//! seed 004's one host at 1,000 procedures/s.
//!
//! UEs attach first (not measured). A third of them (H) are then kept
//! connected and hand over to the other eNB in every round (S1 handover,
//! TS 23.401 5.5.1.2.2, seed 004's "handover request"); the other two thirds
//! (`s[0]`, `s[1]`) alternate: in
//! each round one half makes a service request from idle while the
//! other half is released (a service request needs an idle UE; the
//! releases are load too, not measured). Each round starts its
//! procedures interleaved (service request, handover, release, ...) at
//! 1.5 times `--rate`, so that service requests and handovers together
//! arrive at `--rate`, half each. Arrangements run in A B C D D C B A
//! order over `--rounds`; a point is the median over them.

use super::balance::cpu_time;
use super::balance::stddev;
use super::real::{Deployment, Plan, Rig};
use super::timeline::{self, Outcome};
use super::{bar, finish, MmeArgs};
use crate::elastic_mme::cgroup;
use crate::elastic_mme::Placement;
use anyhow::{bail, Context, Result};
use mobicore_ran::{OutcomeRecord, Phase};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// How a host's NF instances are arranged (the JSON's `scheme`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrangement {
    Unified,
    Decomposed,
    HOverS,
    SOverH,
}

/// The instances of a decomposed host: the measured kinds, and those the
/// warm-up's attaches and a handed-over UE's tracking area update take.
const DECOMPOSED: &str = "attach=1,service-request=1,handover=1,tau=1";

impl Arrangement {
    pub const ALL: [Arrangement; 4] =
        [Arrangement::Unified, Arrangement::Decomposed, Arrangement::HOverS, Arrangement::SOverH];

    pub fn name(self) -> &'static str {
        match self {
            Arrangement::Unified => "unified",
            Arrangement::Decomposed => "decomposed",
            Arrangement::HOverS => "h-over-s",
            Arrangement::SOverH => "s-over-h",
        }
    }

    /// `--nf-priority` of the fixed arrangements.
    pub fn nf_priority(self) -> Option<String> {
        let low = super::fig9::LOW_PRIORITY;
        match self {
            Arrangement::Unified | Arrangement::Decomposed => None,
            Arrangement::HOverS => Some(format!("handover=1,service-request={low}")),
            Arrangement::SOverH => Some(format!("service-request=1,handover={low}")),
        }
    }

    /// The host's NF arguments.
    pub fn host_args(self) -> Vec<String> {
        let mut v: Vec<String> = match self {
            Arrangement::Unified => vec!["--nf-instances".into(), "1".into()],
            _ => vec!["--nf".into(), DECOMPOSED.into()],
        };
        if let Some(p) = self.nf_priority() {
            v.extend(["--nf-priority".into(), p]);
        }
        v
    }
}

/// The UEs' roles: `h` hand over every round; `s[0]` and `s[1]` take
/// turns at a service request and a release.
#[derive(Debug, Clone, PartialEq)]
pub struct Roles {
    pub h: Vec<u64>,
    pub s: [Vec<u64>; 2],
}

impl Roles {
    /// UEs `0..ues` in thirds, each third spread over the eNBs alike.
    pub fn new(ues: u64) -> Roles {
        let mut r = Roles { h: Vec::new(), s: [Vec::new(), Vec::new()] };
        let n = ues / 3;
        for u in 0..3 * n {
            match u % 3 {
                0 => r.h.push(u),
                1 => r.s[0].push(u),
                _ => r.s[1].push(u),
            }
        }
        r
    }

    /// The UEs connected before the first round: the handover ones and
    /// the ones released in it.
    pub fn connected_first(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.h.iter().chain(&self.s[1]).copied().collect();
        v.sort_unstable();
        v
    }

    /// Round `round`'s procedures, interleaved: a service request of an
    /// idle UE, a handover, a release of a connected one, and so on.
    pub fn round(&self, round: u64, handover: Phase) -> Vec<(Phase, u64)> {
        let (sr, rel) = if round.is_multiple_of(2) { (&self.s[0], &self.s[1]) } else { (&self.s[1], &self.s[0]) };
        let mut v = Vec::with_capacity(3 * self.h.len());
        for i in 0..self.h.len().max(sr.len()).max(rel.len()) {
            v.extend(sr.get(i).map(|&u| (Phase::ServiceRequest, u)));
            v.extend(self.h.get(i).map(|&u| (handover, u)));
            v.extend(rel.get(i).map(|&u| (Phase::Release, u)));
        }
        v
    }
}

/// The measured classes (the JSON's `class`, as the simulator's keys).
pub const CLASSES: [&str; 2] = ["service_request", "handover"];

/// A run's outcomes of one class.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassRun {
    pub procedures: usize,
    pub failed: usize,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// The class of a RAN procedure's outcome: 0 service request, 1
/// handover, none for the rest.
fn class_of(procedure: &str) -> Option<usize> {
    match procedure {
        "service_request" => Some(0),
        "x2_handover" | "s1_handover" => Some(1),
        _ => None,
    }
}

/// Per class, the outcomes' count, failures and percentiles; and the
/// failures of the rest (releases, anything unsolicited).
pub fn classes(log: &[OutcomeRecord]) -> ([ClassRun; 2], usize) {
    let of = |c: usize| {
        let outcomes: Vec<Outcome> = log
            .iter()
            .filter(|o| class_of(o.procedure) == Some(c))
            .map(|o| Outcome { start_ms: 0.0, latency_ms: o.latency.as_secs_f64() * 1e3, ok: o.ok })
            .collect();
        let (p50, p99) = timeline::p50_p99(&outcomes);
        ClassRun { procedures: outcomes.len(), failed: outcomes.iter().filter(|o| !o.ok).count(), p50, p99 }
    };
    let others_failed = log.iter().filter(|o| class_of(o.procedure).is_none() && !o.ok).count();
    ([of(0), of(1)], others_failed)
}

/// The processes in a cgroup and its descendants.
fn cgroup_pids(dir: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            pids.extend(cgroup_pids(&e.path()));
        }
    }
    pids
}

/// Every thread of processes `pids` onto CPU `cpu` (threads they start
/// later inherit it): the host's instances then take turns on one core,
/// as seed 004's NFs sharing a core, and their cgroups' weights decide
/// whose turn it is (a CFS quota alone lets them run side by side on
/// two cores until it is spent, whatever their weights).
fn pin(pids: &[u32], cpu: usize) -> Result<()> {
    for &pid in pids {
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))?.flatten() {
            let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() else { continue };
            // SAFETY: a zeroed cpu_set_t with one CPU set, passed by pointer
            // with its size; sched_setaffinity only reads it.
            let r = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
            };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                // A thread that has just ended.
                if e.raw_os_error() != Some(libc::ESRCH) {
                    bail!("pinning thread {tid} of {pid} to CPU {cpu}: {e}");
                }
            }
        }
    }
    Ok(())
}

/// The CPU weights of the host's NF instances' cgroups (`nf<slot>`:
/// cgroup v2 cpu.weight or v1 cpu.shares), by slot.
fn nf_weights(host_dir: &Path) -> BTreeMap<String, u64> {
    let mut w = BTreeMap::new();
    for e in std::fs::read_dir(host_dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with("nf") {
            continue;
        }
        let read = |f: &str| std::fs::read_to_string(e.path().join(f)).ok()?.trim().parse().ok();
        if let Some(v) = read("cpu.weight").or_else(|| read("cpu.shares")) {
            w.insert(name, v);
        }
    }
    w
}

/// One arrangement's run: its processes started, the UEs attached and
/// placed in their roles, `seconds` of rounds, each class's outcomes and
/// the host's CPU use of its budget.
async fn run_one(a: &MmeArgs, arr: Arrangement, ues: u64, rate: f64, seconds: f64) -> Result<Value> {
    let cpu_max = a.cpu_max();
    let mut host_args = vec!["--cpu-max".to_string(), cpu_max.to_string()];
    host_args.extend(arr.host_args());
    let plan = Plan {
        program: std::env::current_exe().context("the mobicore binary")?,
        deployments: vec![Deployment::LocalCold],
        hosts: 1,
        balancer: "rr".into(),
        echo: a.verbose,
        procedure_timeout_ms: a.procedure_timeout_ms,
        host_args,
        frontend_args: Vec::new(),
        s11_direct: !a.s11_via_frontend,
        create_session_direct: false,
        placement: a.placement.unwrap_or(Placement::Attach),
    };
    // The warm-up at a quarter of the rate, at most 100/s: attaches cost
    // the most, and one that times out leaves its UE out of the run.
    let mut rig = Rig::start(&plan, Deployment::LocalCold, ues, Some((rate / 4.0).min(100.0))).await?;
    // The host and its instances, all in its cgroup, on one core.
    let host_pid = rig.procs.pid("host1").context("the host's process")?;
    let host_dir = [cgroup::ROOT, cgroup::V1_ROOT]
        .iter()
        .find_map(|r| cgroup::host_dir(Path::new(r), host_pid))
        .context("the host's cgroup")?;
    let pids = cgroup_pids(&host_dir);
    let cpu = a.pin_cpu.unwrap_or_else(|| std::thread::available_parallelism().map_or(0, |n| n.get() - 1));
    pin(&pids, cpu)?;
    let roles = Roles::new(ues);
    let all: Vec<u64> = (0..ues).collect();
    let attach = rig.ran.attach_some(0..ues).await?;
    if attach.failed > 0 {
        println!("{}: {} of {ues} attaches failed (warm-up: those UEs sit the run out)", arr.name(), attach.failed);
    }
    rig.ran.phase_of(Phase::Release, &all).await?;
    rig.ran.settle_idle().await?;
    rig.ran.phase_of(Phase::ServiceRequest, &roles.connected_first()).await?;
    let weights = nf_weights(&host_dir);
    let cpu0: Duration = pids.iter().filter_map(|&p| cpu_time(p).ok()).sum();
    rig.ran.set_rate(Some(1.5 * rate))?;
    rig.ran.log_outcomes();
    let t0 = Instant::now();
    let mut round = 0;
    while t0.elapsed().as_secs_f64() < seconds {
        rig.ran.mix_of(&roles.round(round, Phase::S1Handover)).await?;
        round += 1;
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu1: Duration = pids.iter().filter_map(|&p| cpu_time(p).ok()).sum();
    let log = rig.ran.take_outcomes();
    let (runs, others_failed) = classes(&log);
    if others_failed > 0 || runs.iter().any(|r| r.failed > 0) {
        let r = rig.ran.report();
        println!("{}: failures {:?}, anomalies {:?}", arr.name(), r.failures, r.anomalies);
    }
    let cpu_pct = 100.0 * cpu1.saturating_sub(cpu0).as_secs_f64() / wall / cpu_max;
    rig.stop().await?;
    let per_class: Vec<Value> = runs
        .iter()
        .map(|r| {
            json!({
                "procedures": r.procedures,
                "procedures_per_s": (r.procedures - r.failed) as f64 / wall,
                "failed_procedures": r.failed,
                "latency_ms_p50": r.p50,
                "latency_ms_p99": r.p99,
            })
        })
        .collect();
    Ok(json!({
        "run_s": wall,
        "rounds": round,
        "cpu_pct": cpu_pct,
        "host_processes": pids.len(),
        "host_cpu": cpu,
        "nf_cpu_weights": weights,
        "other_failed": others_failed,
        "classes": per_class,
    }))
}

pub async fn run(a: &MmeArgs) -> Result<Vec<Value>> {
    let rate = a.rate.unwrap_or(1000.0);
    let ues = u64::from(a.ues.unwrap_or(600));
    let seconds = a.seconds.unwrap_or(5.0);
    let rounds = a.rounds.unwrap_or(2).max(1) as usize;
    let cpu_max = a.cpu_max();
    if !(rate > 0.0 && seconds > 0.0 && cpu_max > 0.0) || ues < 3 {
        bail!("fig9 needs --rate, --seconds and --cpu-max positive and at least 3 UEs");
    }
    // The host's budget: fail here, not in the host.
    cgroup::available(Path::new(cgroup::ROOT), Path::new(cgroup::V1_ROOT))?;
    let scaled = if rate < 1000.0 { " (seed 004: 1,000/s; scaled down with --rate)" } else { "" };
    println!(
        "Fig. 9 (real processes): {rate} procedures/s{scaled}, half service requests and half S1 handovers \
         (a third of {ues} UEs each round, T1), plus a release of as many UEs (not measured), for {seconds} s per run; \
         one mme-host bounded to {cpu_max} core (cgroup CFS quota) and pinned to one CPU, its NF instances unified \
         or per procedure weighted by P (h-over-s, s-over-h: P fixed {} to 1); {rounds} round(s) in A B B A order, \
         medians",
        super::fig9::LOW_PRIORITY
    );
    let b = bar((rounds * Arrangement::ALL.len()) as u64);
    let mut measured: Vec<Vec<Value>> = vec![Vec::new(); Arrangement::ALL.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..Arrangement::ALL.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let arr = Arrangement::ALL[i];
            b.set_message(format!("round {}, {}", round + 1, arr.name()));
            measured[i].push(run_one(a, arr, ues, rate, seconds).await?);
            b.inc(1);
        }
    }
    let (mut points, mut rows) = (Vec::new(), Vec::new());
    for (i, arr) in Arrangement::ALL.into_iter().enumerate() {
        let runs = &measured[i];
        let cpu: Vec<f64> = runs.iter().filter_map(|r| r["cpu_pct"].as_f64()).collect();
        let cpu_pct = mobicore_dpbench::rig::median(cpu.clone());
        let mut row = vec![arr.name().to_string()];
        let mut failed_all = 0;
        for (c, class) in CLASSES.iter().enumerate() {
            let med = |k: &str| {
                let v: Vec<f64> = runs.iter().filter_map(|r| r["classes"][c][k].as_f64()).collect();
                (!v.is_empty()).then(|| mobicore_dpbench::rig::median(v))
            };
            let sum = |k: &str| runs.iter().filter_map(|r| r["classes"][c][k].as_u64()).sum::<u64>();
            let failed = sum("failed_procedures");
            failed_all += failed;
            let (p50, p99, per_s) = (med("latency_ms_p50"), med("latency_ms_p99"), med("procedures_per_s"));
            row.extend([p50, p99].map(|v| v.map_or("-".into(), |v| format!("{v:.2}"))));
            row.push(format!("{:.0}", per_s.unwrap_or(0.0)));
            points.push(json!({
                "figure": 9,
                "mode": "real",
                "scheme": arr.name(),
                "class": class,
                "hosts": 1,
                "load": rate,
                "ues": ues,
                "handover": "s1",
                "cpu_max": cpu_max,
                "nf_priority": arr.nf_priority(),
                "procedures": sum("procedures"),
                "procedures_per_s": per_s,
                "latency_ms_p50": p50,
                "latency_ms_p99": p99,
                "failed_procedures": failed,
                "cpu_pct": cpu_pct,
                "nf_cpu_weights": runs[0]["nf_cpu_weights"],
                "rounds": runs.iter().map(|r| {
                    json!({"run_s": r["run_s"], "cpu_pct": r["cpu_pct"], "class": r["classes"][c]})
                }).collect::<Vec<_>>(),
            }));
        }
        let other: u64 = runs.iter().filter_map(|r| r["other_failed"].as_u64()).sum();
        row.push(format!("{failed_all}/{other}"));
        row.push(format!("{cpu_pct:.0} (sd {:.0})", stddev(&cpu)));
        rows.push(row);
    }
    finish(
        b,
        &[
            "scheme",
            "SR p50 ms",
            "SR p99 ms",
            "SR/s",
            "HO p50 ms",
            "HO p99 ms",
            "HO/s",
            "failed (SR+HO/other)",
            "host CPU % of budget",
        ],
        &rows,
    );
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arrangements_host_arguments() {
        assert_eq!(Arrangement::Unified.host_args(), ["--nf-instances", "1"]);
        assert_eq!(Arrangement::Decomposed.host_args(), ["--nf", DECOMPOSED]);
        let h = Arrangement::HOverS.host_args();
        assert_eq!(h[2..], ["--nf-priority".to_string(), "handover=1,service-request=0.1".to_string()]);
        // What the host parses.
        for arr in Arrangement::ALL {
            if let Some(p) = arr.nf_priority() {
                crate::elastic_mme::nf::parse_priorities(&p).unwrap();
            }
        }
        crate::elastic_mme::nf::parse_kinds(DECOMPOSED).unwrap();
    }

    #[test]
    fn each_round_has_as_many_service_requests_as_handovers_and_a_ue_once() {
        let r = Roles::new(10);
        assert_eq!((r.h.len(), r.s[0].len(), r.s[1].len()), (3, 3, 3));
        let connected = r.connected_first();
        for round in 0..4 {
            let steps = r.round(round, Phase::X2Handover);
            let count = |p: Phase| steps.iter().filter(|s| s.0 == p).count();
            assert_eq!((count(Phase::ServiceRequest), count(Phase::X2Handover), count(Phase::Release)), (3, 3, 3));
            let mut ues: Vec<u64> = steps.iter().map(|s| s.1).collect();
            ues.sort_unstable();
            ues.dedup();
            assert_eq!(ues.len(), 9, "a UE once");
            // Interleaved, not one kind after the other.
            assert_eq!(
                steps[..3].iter().map(|s| s.0).collect::<Vec<_>>(),
                [Phase::ServiceRequest, Phase::X2Handover, Phase::Release]
            );
            // Round 0's service requests are of the idle UEs; its releases
            // of the connected ones; the next round the other way round.
            let sr: Vec<u64> = steps.iter().filter(|s| s.0 == Phase::ServiceRequest).map(|s| s.1).collect();
            assert_eq!(sr.iter().any(|u| connected.contains(u)), round % 2 == 1);
        }
    }

    #[test]
    fn outcomes_by_class() {
        let now = Instant::now();
        let o = |procedure: &'static str, ms: u64, ok: bool| OutcomeRecord {
            ue: 1,
            procedure,
            started: now,
            latency: Duration::from_millis(ms),
            ok,
        };
        let log = [
            o("service_request", 2, true),
            o("service_request", 4, true),
            o("x2_handover", 8, true),
            o("s1_handover", 9, false),
            o("release", 1, false),
            o("release", 1, true),
        ];
        let ([sr, ho], others) = classes(&log);
        assert_eq!((sr.procedures, sr.failed, sr.p50, sr.p99), (2, 0, Some(2.0), Some(4.0)));
        assert_eq!((ho.procedures, ho.failed, ho.p50), (2, 1, Some(8.0)));
        assert_eq!(others, 1);
    }
}
