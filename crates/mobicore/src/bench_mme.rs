//! `mobicore bench mme <figure>`: seed 004 side by side with its
//! baselines, in the same run.
//!
//! - Figs. 6 and 7 on real processes on this machine (`real`): the
//!   elastic MME (front end, hosts, Redis) beside the stateful baseline
//!   (today's monolithic MME); throughput against offered load, and a
//!   host failure's latency timeline (`timeline`, no I/O).
//! - Fig. 8 on real processes (`ramp`): the T2 ramp against the front
//!   end's EPS controller scaling hosts bounded by a CPU budget out and in,
//!   beside the stateful MME bounded to one host's budget and to the most.
//! - Fig. 10 on real processes (`balance`): each balancer in front of
//!   hosts bounded by a CPU budget (a cgroup), uniform and skewed load.
//! - Fig. 11 on real processes (`bursts`): the hosts each balancer needs
//!   under the load model's Pareto bursts, hosts bounded the same way.
//! - Both play the load model's arrivals (T1-T4, a procedure mix) at the
//!   emulated RAN (`arrivals`) and give SLO violations per class.
//! - Fig. 9 on real processes (`decompose`): service request and
//!   handover latency on one host bounded by a CPU budget, its NF
//!   instances unified, one per procedure, and prioritized either way.
//! - Fig. 9 (`fig9`), the same from the simulator, and Figs. 10 and
//!   11, from the elastic MME's discrete-event simulator
//!   (`mobicore_elastic::sim`, `--sim`), which runs the balancers and
//!   forwarders of the real front end and hosts: skewed consistent
//!   hashing beside round robin, consistent hashing and Maglev on the
//!   same seeded load, to 160 hosts; Fig. 11's hosts time-averaged
//!   under the EPS controller's scaling, as seed 004 measures them, with
//!   the fixed count beside.

mod arrivals;
mod balance;
mod bursts;
mod decompose;
mod fig9;
mod ramp;
mod real;
pub mod timeline;

pub use real::{elastic_demo, Deployment, ElasticDemo};

use crate::plot::{Chart, Series};
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use mobicore_elastic::load::{LoadConfig, Mix, Pattern, Skew};
use mobicore_elastic::sim::{self, SimConfig, SimResult};
use mobicore_elastic::{ProcedureKind, Profiles, Scheme};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Fig. 9's one host's CPU budget on real processes (cores), by default.
const CPU_MAX_FIG9: f64 = 1.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MmeFigure {
    /// Procedure throughput against offered load: the elastic MME with
    /// Redis beside the stateful MME (real processes).
    Fig6,
    /// Latency timeline, failed procedures and re-attaches around a host
    /// killed mid-run, hot and cold, beside the stateful MME killed and
    /// restarted (real processes).
    Fig7,
    /// Latency and hosts over time under the T2 ramp, the front end's EPS
    /// controller starting and draining hosts (real processes).
    Fig8,
    /// Service request and handover latency on one host at 1,000
    /// procedures/s: one NF instance for every kind (unified), one per
    /// procedure kind weighted by the SLOs' priorities (decomposed), and
    /// each prioritized over the other (h-over-s, s-over-h) (real
    /// processes, one host with a CPU budget; --sim: simulated, with one
    /// NF each sharing the core equally too).
    Fig9,
    /// CPU standard deviation across hosts and SLO violations per scheme,
    /// uniform and skewed load, against the number of hosts (real
    /// processes with CPU budgets; --sim: simulated).
    Fig10,
    /// Hosts needed for at most 5% SLO violations under skewed Pareto
    /// bursts, alpha 1, 2 and 3 (real processes with CPU budgets, a fixed
    /// count; --sim: simulated, time-averaged under the EPS controller's
    /// scaling, and a fixed count beside).
    Fig11,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LoadPattern {
    /// Constant rate (Poisson arrivals).
    T1,
    /// Ramp up to 1.8x the mean and down again.
    T2,
    /// Markov-modulated Poisson per UE.
    T3,
    /// Pareto bursts (of the first --alpha).
    T4,
}

#[derive(Args, Debug, Clone)]
pub struct MmeArgs {
    #[arg(value_enum)]
    pub figure: MmeFigure,
    /// Simulate the cluster (Figs. 9, 10 and 11; Figs. 6, 7 and 8 run
    /// real processes only).
    #[arg(long)]
    pub sim: bool,
    /// Figs. 6 and 7: what is compared (default: fig6
    /// local-cold,redis,stateful; fig7
    /// local-hot,local-hot-nf,local-cold,redis-hot,redis-cold,stateful).
    /// Figs. 10 and 11 (real): the hosts' store, one of redis (default),
    /// local-cold, local-hot. Fig. 8: without `stateful`, no stateful
    /// baseline beside.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub deployments: Option<Vec<Deployment>>,
    /// Figs. 6, 7 and 8: the front end's load balancer.
    #[arg(long, default_value = "sk-ch")]
    pub balancer: Scheme,
    /// Fig. 6: offered loads, procedures/s (the emulated RAN's arrival
    /// rate), up to saturation.
    #[arg(long, value_delimiter = ',', default_value = "500,1000,2000,4000,8000")]
    pub loads: Vec<f64>,
    /// Figs. 6 and 9 (real): rounds of every deployment (Fig. 9: NF
    /// arrangement), in alternating order (A B B A); each point is the
    /// median over them (default: Fig. 6 1, Fig. 9 2). Fig. 11 (real):
    /// runs of each host count tried, one after the other; the count
    /// meets the target if their median run does (default 1).
    #[arg(long)]
    pub rounds: Option<u32>,

    /// Fig. 7: when the host (or the stateful MME, or with local-hot-nf
    /// one NF instance of host 1) is killed, seconds into the measured run.
    #[arg(long, default_value_t = 3.0)]
    pub kill_at_s: f64,
    /// Figs. 7 and 8: the timeline's bin.
    #[arg(long, default_value_t = 100.0)]
    pub bin_ms: f64,
    /// Figs. 6 and 7: how long a UE's procedure may take before the eNB
    /// gives up on it (seed 004: a UE retries for up to 5 s, then attaches
    /// again).
    #[arg(long, default_value_t = 5000)]
    pub procedure_timeout_ms: u64,
    /// Real processes: every S11 request of the hosts goes through the
    /// front end (default: only the Create Session; the others go straight
    /// to the S-GW, `mme-host --s11-direct`, as hosts on one machine can).
    #[arg(long)]
    pub s11_via_frontend: bool,
    /// Figs. 6 and 7: the hosts send the Create Session straight to the
    /// S-GW too (`mme-host --create-session-direct`), whose requests go to
    /// the front end's S11 port at the F-TEID's IP (`[spgwc]
    /// mme_s11_port`): the front end relays no S11 request.
    #[arg(long, conflicts_with = "s11_via_frontend")]
    pub create_session_direct: bool,
    /// Real processes: what the front end's
    /// balancer places (mme-frontend --placement): every procedure, as
    /// seed 004 does (default for Figs. 10 and 11), or the attach only, a
    /// UE staying on the host it attached at (default for Figs. 6-9).
    #[arg(long, value_enum)]
    pub placement: Option<crate::elastic_mme::Placement>,
    /// Figs. 10 and 11 over host-local stores: replica hosts per host
    /// (mme-frontend --replicas), so a UE's procedure has 1 + N
    /// candidates (seed 004 uses 2).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub replicas: u8,
    /// Figs. 6 and 7: print the processes' output.
    #[arg(long)]
    pub verbose: bool,
    /// Figs. 10 and 11: the balancers compared.
    #[arg(long, value_delimiter = ',', default_value = "sk-ch,ch,rr,maglev")]
    pub schemes: Vec<Scheme>,
    /// Fig. 10: host counts (default 3,4,6,9,12; real processes 2,3,4).
    /// Simulated, the offered load is the same for all: the first count's
    /// capacity times --utilization; real, --rate.
    /// Figs. 6 and 7: MME hosts behind the front end (default 3). Fig. 8:
    /// the most hosts the EPS controller may run (default 3).
    #[arg(long, value_delimiter = ',')]
    pub hosts: Option<Vec<u32>>,
    /// Fig. 10: offered load over the capacity of the first host count.
    /// Fig. 9: over the one host's capacity.
    #[arg(long, default_value_t = 0.95)]
    pub utilization: f64,
    /// Fig. 10: the traffic pattern.
    #[arg(long, value_enum, default_value = "t1")]
    pub pattern: LoadPattern,
    /// Figs. 10 and 11: the procedure mix, `iot` (attach 5%, service
    /// request 50%, TAU 20%, handover 20%, detach 5%) or weights such as
    /// `sr=3,tau=1` (attach, sr, tau, ho, detach). Default: simulated
    /// iot; real, service requests only. On real processes an arrival
    /// runs at the RAN from and back to idle: a service request and a
    /// release; a handover, a service request, an S1 handover and a
    /// release; a TAU; an attach or a detach, a detach and an attach
    /// again and a release (--rate counts each).
    #[arg(long, value_parser = parse_mix)]
    pub mix: Option<Mix>,
    /// Fig. 11: Pareto shape of the bursts, one search each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub alpha: Vec<f64>,
    /// Fig. 11: the most hosts a search tries, and simulated, the most
    /// the EPS controller may run (default 160 simulated, 4 real).
    #[arg(long)]
    pub max_hosts: Option<u32>,
    /// Fig. 11: offered procedures per second (simulated, default: what
    /// 50 hosts serve at full CPU, seed 004 Fig. 11b's scale; real, default 200, the
    /// RAN's procedures of the --mix). Fig. 7: the constant rate of
    /// service requests and releases (default 400); Fig. 10 on real
    /// processes: the mean of --pattern (default 300); Fig. 8: the T2 ramp's mean
    /// (default 300; from 0.2 to 1.8 times it). Fig. 9: service requests
    /// and handovers (default 1000).
    #[arg(long)]
    pub rate: Option<f64>,
    /// UEs (default: 60 for Fig. 8, 300 for Fig. 10, 120 for Figs. 10 and 11 on
    /// real processes, 40 per host's worth of --rate for Fig. 11, 200 for Fig. 7, 600 for
    /// Fig. 9 on real processes; Fig. 6: per offered load, default load x
    /// --seconds).
    #[arg(long)]
    pub ues: Option<u32>,
    /// Skewed load: this fraction of the UEs carries --hot-share of it.
    #[arg(long, default_value_t = 0.2)]
    pub hot_fraction: f64,
    #[arg(long, default_value_t = 0.8)]
    pub hot_share: f64,
    /// Seconds of load per run: simulated (default 5); Fig. 6: of each
    /// phase at each offered load (default 1); Fig. 7: the measured run
    /// (default 10); Figs. 10 and 11 on real processes: the measured run
    /// after the attaches (default 5); Fig. 8: the ramp (default 40); Fig.
    /// 9 on real processes: each arrangement's measured run (default 5).
    #[arg(long)]
    pub seconds: Option<f64>,
    #[arg(long, default_value_t = 11)]
    pub seed: u64,
    /// Fig. 9 on real processes: the CPU the host and its NF instances
    /// are pinned to, so that they take turns on it by their cgroups'
    /// weights (default: the last).
    #[arg(long)]
    pub pin_cpu: Option<usize>,
    /// Figs. 8, 9, 10 and 11 on real processes: each host's CPU budget,
    /// cores (its cgroup's CFS quota over the period: mme-host
    /// --cpu-max; default 0.1, Fig. 9 1: a whole core, pinned). Figs. 6
    /// and 7: the elastic MME's hosts', only if given (the stateful MME
    /// has none).
    #[arg(long)]
    pub cpu_max: Option<f64>,
    /// Fig. 8: the EPS controller's window (--scale-window-s of
    /// mme-frontend).
    #[arg(long, default_value_t = 2)]
    pub scale_window_s: u64,
    /// Figs. 10 and 11 on real processes: every procedure's SLO, ms, as
    /// counted (default: its class's in the simulator's profiles, by
    /// --slo-scale, a release's a service request's: 10). The front end
    /// still places by the profiles' SLOs.
    #[arg(long)]
    pub slo_ms: Option<f64>,
    /// Figs. 10 and 11: every class's SLO times this, simulated and on
    /// real processes (the SLOs counted, and the front end's Eq. 1,
    /// mme-frontend --slo-scale). The simulator's SLOs are 6 to 14 times
    /// a procedure's completion time alone; seed 004's sit near it (a
    /// service request under 10 ms alone, SLOs of 1-10 ms): 0.25 puts
    /// ours at 1.4 to 3.6 times it (a service request's 2.5 ms, a
    /// handover's 5 ms). Default 1, and 0.25 for Fig. 11 simulated.
    #[arg(long, value_parser = crate::elastic_mme::positive)]
    pub slo_scale: Option<f64>,
    /// SLO violations allowed when counting the hosts needed (Fig. 11).
    #[arg(long, default_value_t = 5.0)]
    pub target_pct: f64,
    /// Write one JSON object per point (figure, mode "sim" or "real",
    /// scheme, hosts, load in procedures/s, and what the figure measures:
    /// Fig. 6 procedures_per_s, attach_per_s, latency_ms_p50/p99,
    /// failed_procedures, cpu_us_per_attach (by role: bench, frontend,
    /// hosts, mme, redis, and mme_side, their sum without the bench) (per
    /// round: the RAN's failures and the processes' counters of trouble if
    /// any failed); Fig. 7 failed_procedures, reattaches,
    /// recovery_ms, latency_ms_p50/p99 and the timeline's bins; Fig. 10
    /// slo_violation_pct, cpu_stddev_pct, procedures_per_s,
    /// latency_ms_p50/p99, failed_procedures, and real, pattern, mix,
    /// not_run, classes (per RAN procedure: procedures, slo_ms,
    /// slo_violation_pct, p50/p99, failed), failures (by reason) and
    /// failed (ue, procedure, start_ms); Fig. 11 alpha, hosts_needed
    /// (a fixed count; null: more than --max-hosts), slo_violation_pct of
    /// the run with `hosts` hosts, and real, the host counts tried;
    /// simulated, hosts_time_avg (null: no run met the target) and
    /// autoscaled, its run: hosts_start, hosts_max, the controller's
    /// spare_cpu, slo_violation_pct, hosts_timeline; Fig. 9 real, a
    /// point per arrangement and class: class, procedures,
    /// procedures_per_s, latency_ms_p50/p99, failed_procedures, cpu_pct,
    /// nf_cpu_weights).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the figure as SVG into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

pub async fn run(a: MmeArgs) -> Result<()> {
    let points = match a.figure {
        MmeFigure::Fig6 | MmeFigure::Fig7 => {
            if a.sim {
                bail!("Figs. 6 and 7 run on real processes only: drop --sim");
            }
            until_interrupted(real::run(&a)).await?
        }
        MmeFigure::Fig8 => until_interrupted(ramp::run(&a)).await?,
        MmeFigure::Fig10 if !a.sim => until_interrupted(balance::run(&a)).await?,
        MmeFigure::Fig11 if !a.sim => until_interrupted(bursts::run(&a)).await?,
        MmeFigure::Fig9 if !a.sim => until_interrupted(decompose::run(&a)).await?,
        MmeFigure::Fig9 | MmeFigure::Fig10 | MmeFigure::Fig11 => sim_points(a.clone()).await?,
    };
    if points.is_empty() {
        bail!("no point was measured");
    }
    if let Some(p) = &a.json {
        crate::demo::write_json(p, &Value::Array(points.clone()))?;
    }
    if let Some(dir) = &a.plot {
        plot(dir, a.figure, &points)?;
    }
    Ok(())
}

/// `--mix`: `iot`, or `kind=weight` pairs.
fn parse_mix(s: &str) -> Result<Mix, String> {
    if s == "iot" {
        return Ok(Mix::default());
    }
    let mut mix = Mix([0.0; ProcedureKind::COUNT]);
    for part in s.split(',') {
        let (k, w) = part.split_once('=').ok_or_else(|| format!("{part:?}: kind=weight (or the mix `iot`)"))?;
        let kind = match k.trim() {
            "attach" => ProcedureKind::Attach,
            "sr" | "service_request" => ProcedureKind::ServiceRequest,
            "tau" => ProcedureKind::Tau,
            "ho" | "handover" => ProcedureKind::Handover,
            "detach" => ProcedureKind::Detach,
            other => return Err(format!("{other:?}: one of attach, sr, tau, ho, detach")),
        };
        let w: f64 = w.trim().parse().map_err(|e| format!("{part:?}: {e}"))?;
        if !(w >= 0.0 && w.is_finite()) {
            return Err(format!("{part:?}: a weight of 0 or more"));
        }
        mix.0[kind.index()] += w;
    }
    if mix.0.iter().sum::<f64>() <= 0.0 {
        return Err(format!("{s:?}: some weight above 0"));
    }
    Ok(mix)
}

impl MmeArgs {
    /// `--pattern` for the load model.
    fn load_pattern(&self) -> Pattern {
        match self.pattern {
            LoadPattern::T1 => Pattern::Constant,
            LoadPattern::T2 => Pattern::Ramp { peak_factor: 1.8 },
            LoadPattern::T3 => Pattern::mmpp(),
            LoadPattern::T4 => Pattern::pareto(self.alpha.first().copied().unwrap_or(1.0)),
        }
    }

    /// The mix on real processes: `--mix`, else service requests only.
    fn real_mix(&self) -> Mix {
        self.mix.unwrap_or_else(|| parse_mix("sr=1").expect("a valid mix"))
    }

    fn sim_hosts(&self) -> Vec<u32> {
        self.hosts.clone().unwrap_or_else(|| vec![3, 4, 6, 9, 12])
    }

    /// The simulator's profiles, SLOs by --slo-scale (also the SLOs a
    /// real run counts and its front end places by).
    pub(crate) fn profiles(&self) -> Profiles {
        Profiles::default().with_slos_scaled(self.slo_scale())
    }

    /// --slo-scale, by default the seed's SLO regime for Fig. 11
    /// simulated ([`FIG11_SIM_SLO_SCALE`]), else 1.
    pub(crate) fn slo_scale(&self) -> f64 {
        let fig11_sim = self.figure == MmeFigure::Fig11 && self.sim;
        self.slo_scale.unwrap_or(if fig11_sim { FIG11_SIM_SLO_SCALE } else { 1.0 })
    }

    fn sim_seconds(&self) -> f64 {
        self.seconds.unwrap_or(5.0)
    }

    /// A host's CPU budget on real processes, cores.
    fn cpu_max(&self) -> f64 {
        self.cpu_max.unwrap_or(if self.figure == MmeFigure::Fig9 { CPU_MAX_FIG9 } else { 0.1 })
    }
}

async fn sim_points(a: MmeArgs) -> Result<Vec<Value>> {
    if a.schemes.is_empty()
        || a.hosts.as_ref().is_some_and(|h| h.is_empty() || h.contains(&0))
        || a.max_hosts == Some(0)
    {
        bail!("--schemes, --hosts and --max-hosts need at least one scheme and one host");
    }
    if !(a.seconds.is_none_or(|s| s > 0.0) && a.utilization > 0.0 && a.alpha.iter().all(|&x| x > 0.0)) {
        bail!("--seconds, --utilization and --alpha must be positive");
    }
    Ok(tokio::task::spawn_blocking(move || match a.figure {
        MmeFigure::Fig9 => fig9::fig9(&a),
        MmeFigure::Fig11 => fig11(&a),
        _ => fig10(&a),
    })
    .await?)
}

/// A run on real processes, dropped at Ctrl-C or SIGTERM: every process
/// it started is killed.
async fn until_interrupted(run: impl std::future::Future<Output = Result<Vec<Value>>>) -> Result<Vec<Value>> {
    tokio::select! {
        r = run => r,
        _ = crate::procs::interrupted() => bail!("interrupted (every process the bench started is stopped)"),
    }
}

fn skews(a: &MmeArgs) -> [(&'static str, Skew); 2] {
    [("uniform", Skew::UNIFORM), ("skewed", Skew { hot_fraction: a.hot_fraction, hot_share: a.hot_share })]
}

fn bar(len: u64) -> ProgressBar {
    let b = ProgressBar::new(len);
    if let Ok(s) = ProgressStyle::with_template("{bar:40} {pos}/{len} runs {msg}") {
        b.set_style(s);
    }
    b
}

/// The run is over: clear the progress bar and print the table.
fn finish(b: ProgressBar, headers: &[&str], rows: &[Vec<String>]) {
    b.finish_and_clear();
    print!("{}", crate::report::table(headers, rows));
}

/// "SLOs attach 40 ms, service_request 10 ms, ...".
fn describe_slos(p: &Profiles) -> String {
    let per: Vec<String> =
        ProcedureKind::ALL.iter().map(|&k| format!("{} {} ms", k.name(), 1e3 * p.get(k).slo_s)).collect();
    format!("SLOs {}", per.join(", "))
}

/// Each class's SLO, ms, for a point's JSON.
fn slos_json(p: &Profiles) -> Value {
    ProcedureKind::ALL
        .iter()
        .map(|&k| (k.name().to_string(), json!(1e3 * p.get(k).slo_s)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn point(figure: u32, r: &SimResult, rate: f64) -> Value {
    let per_class: serde_json::Map<String, Value> = ProcedureKind::ALL
        .iter()
        .map(|k| (k.name().to_string(), json!(r.per_class[k.index()].violation_pct())))
        .collect();
    json!({
        "figure": figure,
        "mode": "sim",
        "scheme": r.scheme.name(),
        "hosts": r.hosts,
        "load": rate,
        "procedures_per_s": r.procedures_per_s,
        "latency_ms_p50": r.latency_ms_p50,
        "latency_ms_p99": r.latency_ms_p99,
        "slo_violation_pct": r.slo_violation_pct(),
        "slo_violation_pct_per_class": per_class,
        "cpu_stddev_pct": r.cpu_stddev_pct(),
        "failed_procedures": r.failed,
        "balancer_reported_violations": r.balancer_violations,
    })
}

fn fig10(a: &MmeArgs) -> Vec<Value> {
    let profiles = a.profiles();
    let mix = a.mix.unwrap_or_default();
    let capacity = sim::host_capacity(&profiles, &mix, 1.0);
    let host_counts = a.sim_hosts();
    let rate = a.utilization * f64::from(host_counts[0]) * capacity;
    let pattern = a.load_pattern();
    println!(
        "Fig. 10 (simulated): {rate:.0} procedures/s ({:.0}% of {} hosts at {capacity:.0}/s each), {} UEs, {}, {}, {} s \
         per run; {}",
        100.0 * a.utilization,
        host_counts[0],
        a.ues.unwrap_or(300),
        pattern.name(),
        arrivals::describe_mix(&mix),
        a.sim_seconds(),
        describe_slos(&profiles)
    );
    let b = bar((2 * host_counts.len() * a.schemes.len()) as u64);
    let mut points = Vec::new();
    let mut rows = Vec::new();
    for (skew_name, skew) in skews(a) {
        for &hosts in &host_counts {
            for &scheme in &a.schemes {
                b.set_message(format!("{skew_name}, {hosts} hosts, {scheme}"));
                let cfg = SimConfig {
                    hosts,
                    scheme,
                    profiles: profiles.clone(),
                    load: LoadConfig {
                        ues: a.ues.unwrap_or(300),
                        rate,
                        duration_s: a.sim_seconds(),
                        pattern,
                        skew,
                        mix,
                        seed: a.seed,
                    },
                    ..Default::default()
                };
                let r = sim::run(&cfg);
                let mut p = point(10, &r, rate);
                p["slo_ms"] = slos_json(&profiles);
                p["skew"] = json!(skew_name);
                p["pattern"] = json!(pattern.name());
                p["utilization"] = json!(rate / (f64::from(hosts) * capacity));
                rows.push(vec![
                    skew_name.to_string(),
                    hosts.to_string(),
                    scheme.to_string(),
                    format!("{:.2}", r.slo_violation_pct()),
                    format!("{:.1}", r.cpu_stddev_pct()),
                    format!("{:.2}", r.latency_ms_p50),
                    format!("{:.2}", r.latency_ms_p99),
                    format!("{:.0}", r.procedures_per_s),
                ]);
                points.push(p);
                b.inc(1);
            }
        }
    }
    finish(b, &["load", "hosts", "scheme", "SLO viol. %", "CPU sd %", "p50 ms", "p99 ms", "proc/s"], &rows);
    points
}

/// Fig. 11 simulated, by default: SLOs near a procedure's completion time
/// alone, as seed 004's (a service request under 10 ms alone, SLOs of
/// 1-10 ms); ours at 1 are 6 to 14 times it.
const FIG11_SIM_SLO_SCALE: f64 = 0.25;
/// Fig. 11 simulated, by default: the load, in hosts' worth at full CPU
/// (seed 004 Fig. 11b simulates 100 hosts).
const FIG11_SIM_HOSTS_OF_LOAD: f64 = 50.0;
/// Fig. 11 simulated, by default: UEs per host's worth of load. Each hot
/// UE then carries a tenth of a host, and how unevenly hashing spreads
/// them decides what consistent hashing needs: with more UEs it needs
/// fewer hosts, while skewed CH needs about as many (its floor is the
/// bursts), so the saving shrinks (seed 004 does not give its UE count).
const FIG11_SIM_UES_PER_HOST_OF_LOAD: f64 = 40.0;

fn fig11(a: &MmeArgs) -> Vec<Value> {
    let profiles = a.profiles();
    let mix = a.mix.unwrap_or_default();
    let capacity = sim::host_capacity(&profiles, &mix, 1.0);
    let max_hosts = a.max_hosts.unwrap_or(160);
    let rate = a.rate.unwrap_or(FIG11_SIM_HOSTS_OF_LOAD * capacity);
    let ues = a.ues.unwrap_or((FIG11_SIM_UES_PER_HOST_OF_LOAD * rate / capacity).round().max(1.0) as u32);
    let skew = skews(a)[1].1;
    let hot_ue = skew.weights(ues).first().copied().unwrap_or(0.0) * rate / capacity;
    println!(
        "Fig. 11 (simulated): {rate:.0} procedures/s in Pareto bursts, {ues} UEs, {:.0}% of them carrying {:.0}% of the load \
         (a hot UE {:.1}% of a host's capacity), at most {} hosts at {capacity:.0}/s each, {} s per run; hosts needed for \
         <= {}% SLO violations: time-averaged under the EPS controller (the least over spare-CPU settings {:?} of the \
         starting hosts' cores and starting counts), and a fixed count; {}",
        100.0 * a.hot_fraction,
        100.0 * a.hot_share,
        100.0 * hot_ue,
        max_hosts,
        a.sim_seconds(),
        a.target_pct,
        sim::SPARE_CPU_FRACTIONS,
        describe_slos(&profiles)
    );
    let b = bar((a.alpha.len() * a.schemes.len()) as u64);
    let mut points = Vec::new();
    let mut rows = Vec::new();
    for &alpha in &a.alpha {
        let mut found = Vec::new();
        for &scheme in &a.schemes {
            b.set_message(format!("alpha {alpha}, {scheme}"));
            let cfg = SimConfig {
                scheme,
                profiles: profiles.clone(),
                load: LoadConfig {
                    ues,
                    rate,
                    duration_s: a.sim_seconds(),
                    pattern: Pattern::pareto(alpha),
                    skew,
                    mix,
                    seed: a.seed,
                },
                ..Default::default()
            };
            let (n, r) = match sim::hosts_needed(&cfg, max_hosts, a.target_pct) {
                Some((n, r)) => (Some(n), r),
                None => (None, sim::run(&SimConfig { hosts: max_hosts, ..cfg.clone() })),
            };
            let scaled = sim::time_avg_hosts_needed(&cfg, max_hosts, a.target_pct, n.unwrap_or(max_hosts));
            let mut p = point(11, &r, rate);
            p["slo_ms"] = slos_json(&profiles);
            p["alpha"] = json!(alpha);
            p["ues"] = json!(ues);
            p["pattern"] = json!("T4");
            p["hosts_needed"] = json!(n);
            p["target_pct"] = json!(a.target_pct);
            p["hosts_time_avg"] = json!(scaled.as_ref().map(|(_, s)| s.hosts_time_avg));
            p["autoscaled"] = scaled.as_ref().map_or(Value::Null, |(c, s)| {
                json!({
                    "hosts_start": s.hosts,
                    "hosts_max": s.hosts_max,
                    "spare_cpu": c.controller.spare_cpu,
                    "slo_violation_pct": s.slo_violation_pct(),
                    "hosts_timeline": s.hosts_timeline.iter().map(|&(t, n)| json!({"t_s": t, "hosts": n})).collect::<Vec<_>>(),
                })
            });
            let avg = scaled.map(|(_, s)| (s.hosts_time_avg, s.slo_violation_pct()));
            found.push((scheme, avg, n, r.slo_violation_pct()));
            points.push(p);
            b.inc(1);
        }
        let ch = found.iter().find(|f| f.0 == Scheme::ConsistentHashing);
        let (ch_avg, ch_fixed) = (ch.map(|f| f.1.map(|x| x.0)), ch.map(|f| f.2.map(f64::from)));
        for &(scheme, avg, n, viol) in &found {
            rows.push(vec![
                format!("{alpha}"),
                scheme.to_string(),
                avg.map_or(format!("> {max_hosts}"), |(h, _)| format!("{h:.1}")),
                avg.map_or("-".into(), |(_, v)| format!("{v:.2}")),
                fewer_than_ch(avg.map(|x| x.0), ch_avg, max_hosts),
                n.map_or(format!("> {max_hosts}"), |n| n.to_string()),
                format!("{viol:.2}"),
                fewer_than_ch(n.map(f64::from), ch_fixed, max_hosts),
            ]);
        }
    }
    finish(
        b,
        &[
            "alpha",
            "scheme",
            "hosts (time avg)",
            "SLO viol. %",
            "fewer than ch",
            "fixed hosts",
            "SLO viol. %",
            "fewer than ch",
        ],
        &rows,
    );
    points
}

/// How many fewer hosts `x` needs than consistent hashing, `ch` (none:
/// no CH in the run; `Some(None)`: CH needs more than `max` hosts, so the
/// saving is a lower bound).
fn fewer_than_ch(x: Option<f64>, ch: Option<Option<f64>>, max: u32) -> String {
    match (x, ch) {
        (Some(x), Some(Some(c))) if c > 0.0 => format!("{:.0}%", 100.0 * (1.0 - x / c)),
        (Some(x), Some(None)) if max > 0 => format!("> {:.0}%", 100.0 * (1.0 - x / f64::from(max))),
        _ => "-".into(),
    }
}

/// One series per point of the run (each scheme's): its `key` array's
/// `metric` against `t_ms`, in seconds from the start.
fn timeline(points: &[Value], key: &str, metric: &str) -> Vec<Series> {
    points
        .iter()
        .map(|p| Series {
            name: p["scheme"].as_str().unwrap_or("?").to_string(),
            points: p[key]
                .as_array()
                .map(|bins| {
                    bins.iter().filter_map(|b| Some((b["t_ms"].as_f64()? / 1e3, b[metric].as_f64()?))).collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

fn plot(dir: &Path, figure: MmeFigure, points: &[Value]) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    // One series per scheme, in the order they ran.
    let mut schemes: Vec<String> = Vec::new();
    for s in points.iter().filter_map(|p| p["scheme"].as_str()) {
        if !schemes.iter().any(|x| x == s) {
            schemes.push(s.to_string());
        }
    }
    let series = |filter: &dyn Fn(&Value) -> bool, x: &str, y: &str| -> Vec<Series> {
        schemes
            .iter()
            .map(|s| Series {
                name: s.clone(),
                points: points
                    .iter()
                    .filter(|p| p["scheme"] == s.as_str() && filter(p))
                    .filter_map(|p| Some((p[x].as_f64()?, p[y].as_f64()?)))
                    .collect(),
            })
            .collect()
    };
    let mut files = Vec::new();
    let mut draw = |file: &str, chart: Chart| -> Result<()> {
        std::fs::write(dir.join(file), chart.svg())?;
        files.push(file.to_string());
        Ok(())
    };
    match figure {
        MmeFigure::Fig6 => {
            for (metric, label, file) in [
                ("procedures_per_s", "procedures/s (attach, service request, release)", "fig6_throughput.svg"),
                ("attach_per_s", "attaches/s", "fig6_attach.svg"),
                ("latency_ms_p99", "p99 latency (ms)", "fig6_latency_p99.svg"),
            ] {
                let title = format!("Fig. 6 (real processes): {label}");
                let chart = Chart {
                    title: &title,
                    x_label: "offered load (procedures/s)",
                    y_label: label,
                    log_x: false,
                    log_y: metric.starts_with("latency"),
                    series: series(&|_| true, "load", metric),
                };
                draw(file, chart)?;
            }
        }
        MmeFigure::Fig7 => {
            let timeline = |metric: &str| timeline(points, "timeline", metric);
            for (metric, label, log_y, file) in [
                ("latency_ms_p50", "p50 latency (ms)", true, "fig7_latency_p50.svg"),
                ("latency_ms_p99", "p99 latency (ms)", true, "fig7_latency_p99.svg"),
                ("failed", "failed procedures per bin", false, "fig7_failed.svg"),
            ] {
                let title = format!("Fig. 7 (real processes): {label}, a host killed");
                let chart = Chart {
                    title: &title,
                    x_label: "time (s, by procedure start)",
                    y_label: label,
                    log_x: false,
                    log_y,
                    series: timeline(metric),
                };
                draw(file, chart)?;
            }
        }
        MmeFigure::Fig9 => {
            // One bar group per arrangement: p50 and p99 of each procedure.
            // Simulated, a point per arrangement holds each class; real, a
            // point per arrangement and class.
            let mode = if points.iter().any(|p| p["mode"] == "real") { "real processes" } else { "simulated" };
            let latency = |p: &Value, class: &str, q: &str| -> Option<f64> {
                let key = format!("latency_ms_{q}");
                match p["class"].as_str() {
                    Some(c) => (c == class).then(|| p[&key].as_f64()).flatten(),
                    None => p[class][&key].as_f64(),
                }
            };
            for (class, label) in [("service_request", "service request"), ("handover", "handover")] {
                let title = format!("Fig. 9 ({mode}): {label} latency per NF arrangement");
                let per = |q: &str| Series {
                    name: format!("{label} {q}"),
                    points: points
                        .iter()
                        .filter_map(|p| {
                            let i = schemes.iter().position(|s| p["scheme"] == s.as_str())?;
                            Some((i as f64, latency(p, class, q)?))
                        })
                        .collect(),
                };
                let chart = Chart {
                    title: &title,
                    x_label: &format!("NF arrangement ({})", schemes.join(", ")),
                    y_label: "latency (ms)",
                    log_x: false,
                    log_y: true,
                    series: vec![per("p50"), per("p99")],
                };
                draw(&format!("fig9_{class}.svg"), chart)?;
            }
        }
        MmeFigure::Fig10 => {
            let mode = if points.iter().any(|p| p["mode"] == "real") { "real processes" } else { "simulated" };
            for skew in ["uniform", "skewed"] {
                for (metric, label, name) in [
                    ("slo_violation_pct", "SLO violations (%)", "slo_violations"),
                    ("cpu_stddev_pct", "CPU std. dev. across hosts (%)", "cpu_stddev"),
                ] {
                    let title = format!("Fig. 10 ({mode}): {label}, {skew} load");
                    let chart = Chart {
                        title: &title,
                        x_label: "MME hosts",
                        y_label: label,
                        log_x: false,
                        log_y: false,
                        series: series(&|p| p["skew"] == skew, "hosts", metric),
                    };
                    draw(&format!("fig10_{name}_{skew}.svg"), chart)?;
                }
            }
        }
        MmeFigure::Fig8 => {
            for (key, metric, label, log_y, file) in [
                ("timeline", "latency_ms_p50", "p50 latency (ms)", true, "fig8_latency_p50.svg"),
                ("timeline", "latency_ms_p99", "p99 latency (ms)", true, "fig8_latency_p99.svg"),
                ("hosts_timeline", "hosts", "MME hosts serving", false, "fig8_hosts.svg"),
                ("offered", "procedures_per_s", "offered procedures/s", false, "fig8_offered.svg"),
            ] {
                let title = format!("Fig. 8 (real processes): {label}, T2 ramp");
                let chart = Chart {
                    title: &title,
                    x_label: "time (s)",
                    y_label: label,
                    log_x: false,
                    log_y,
                    series: timeline(points, key, metric),
                };
                draw(file, chart)?;
            }
        }
        MmeFigure::Fig11 => {
            let mode = if points.iter().any(|p| p["mode"] == "real") { "real processes" } else { "simulated" };
            let target = points.first().and_then(|p| p["target_pct"].as_f64()).unwrap_or(5.0);
            // Simulated, the time-averaged hosts under the EPS controller
            // (seed 004's measure), and the fixed count beside; real, the
            // fixed count.
            let averaged = points.iter().any(|p| p["hosts_time_avg"].is_number());
            let charts: &[(&str, &str, &str)] = if averaged {
                &[
                    ("hosts_time_avg", "hosts needed (time-averaged, autoscaled)", "fig11_hosts_needed.svg"),
                    ("hosts_needed", "hosts needed (fixed count)", "fig11_hosts_fixed.svg"),
                ]
            } else {
                &[("hosts_needed", "hosts needed", "fig11_hosts_needed.svg")]
            };
            for &(metric, label, file) in charts {
                let title = format!("Fig. 11 ({mode}): {label} for <= {target}% SLO violations");
                let chart = Chart {
                    title: &title,
                    x_label: "Pareto alpha",
                    y_label: label,
                    log_x: false,
                    log_y: false,
                    series: series(&|p| p[metric].is_number(), "alpha", metric),
                };
                draw(file, chart)?;
            }
        }
    }
    println!("plots in {}: {}", dir.display(), files.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MmeArgs,
    }

    fn args(line: &str) -> MmeArgs {
        Cli::try_parse_from(std::iter::once("mme").chain(line.split_whitespace())).unwrap().args
    }

    #[test]
    fn fig11_simulated_defaults_to_the_seeds_slo_regime_and_the_rest_to_ours() {
        assert_eq!(args("fig11 --sim").slo_scale(), FIG11_SIM_SLO_SCALE);
        assert_eq!(args("fig11 --sim").profiles(), Profiles::default().with_slos_scaled(FIG11_SIM_SLO_SCALE));
        for line in ["fig11", "fig10 --sim", "fig10", "fig9 --sim"] {
            assert_eq!(args(line).slo_scale(), 1.0, "{line}");
        }
        assert_eq!(args("fig11 --sim --slo-scale 1").slo_scale(), 1.0);
        assert!(Cli::try_parse_from(["mme", "fig11", "--sim", "--slo-scale", "0"]).is_err());
    }

    #[test]
    fn the_saving_against_ch_is_a_lower_bound_when_ch_needs_more_than_the_most_hosts() {
        assert_eq!(fewer_than_ch(Some(80.0), Some(Some(116.0)), 160), "31%");
        assert_eq!(fewer_than_ch(Some(80.0), Some(None), 100), "> 20%");
        assert_eq!(fewer_than_ch(None, Some(None), 100), "-", "neither met the target");
        assert_eq!(fewer_than_ch(Some(80.0), None, 100), "-", "no CH in the run");
    }

    #[test]
    fn a_mix_is_iot_or_weights_and_anything_else_a_clear_error() {
        assert_eq!(args("fig10 --mix iot").mix, Some(Mix::default()));
        let m = args("fig10 --mix sr=3,tau=1,sr=1").mix.unwrap();
        assert_eq!(m.0, [0.0, 4.0, 1.0, 0.0, 0.0]);
        assert_eq!(args("fig10").mix, None);
        assert_eq!(args("fig10").real_mix().0, [0.0, 1.0, 0.0, 0.0, 0.0], "real: service requests");
        for (bad, why) in [
            ("x=1", "one of attach"),
            ("sr", "kind=weight"),
            ("sr=-1", "0 or more"),
            ("sr=NaN", "0 or more"),
            ("sr=0,ho=0", "above 0"),
            ("ho=one", "invalid float"),
        ] {
            let err = Cli::try_parse_from(["mme", "fig10", "--mix", bad]).err().unwrap().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn fig10_points_and_plots() {
        let a = args("fig10 --sim --hosts 3,4 --seconds 0.5 --schemes sk-ch,ch");
        let points = fig10(&a);
        assert_eq!(points.len(), 2 * 2 * 2);
        for p in &points {
            for key in ["figure", "mode", "scheme", "hosts", "load", "slo_violation_pct", "cpu_stddev_pct"] {
                assert!(!p[key].is_null(), "{key} in {p}");
            }
            assert_eq!(p["mode"], "sim");
            assert_eq!(p["figure"], 10);
        }
        let dir = std::env::temp_dir().join(format!("mobicore-bench-mme-{}", std::process::id()));
        plot(&dir, MmeFigure::Fig10, &points).unwrap();
        let svg = std::fs::read_to_string(dir.join("fig10_slo_violations_skewed.svg")).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// One chart shape for Fig. 9 from the simulator (a point per
    /// arrangement, each class inside) and from real processes (a point
    /// per arrangement and class).
    #[test]
    fn fig9_plots_simulated_and_real_points_alike() {
        let sim = fig9::fig9(&args("fig9 --sim --seconds 0.2"));
        let real: Vec<Value> = ["unified", "decomposed", "h-over-s", "s-over-h"]
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                ["service_request", "handover"].map(|c| {
                    json!({"figure": 9, "mode": "real", "scheme": s, "class": c,
                        "latency_ms_p50": 1.0 + i as f64, "latency_ms_p99": 10.0 + i as f64})
                })
            })
            .collect();
        for (name, points, n) in [("sim", sim, fig9::Arrangement::ALL.len()), ("real", real, 4)] {
            let dir = std::env::temp_dir().join(format!("mobicore-bench-mme-fig9-{name}-{}", std::process::id()));
            plot(&dir, MmeFigure::Fig9, &points).unwrap();
            for class in ["service_request", "handover"] {
                let svg = std::fs::read_to_string(dir.join(format!("fig9_{class}.svg"))).unwrap();
                assert_eq!(svg.matches("<polyline").count(), 2, "{name}: p50 and p99");
                assert_eq!(svg.matches("<circle").count(), 2 * n, "{name}: a mark per arrangement and percentile");
                assert!(svg.contains(if name == "real" { "real processes" } else { "simulated" }));
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn fig11_points() {
        let a = args(
            "fig11 --sim --max-hosts 4 --rate 1500 --ues 300 --alpha 2 --seconds 0.5 --schemes sk-ch,ch --slo-scale 2",
        );
        let points = fig11(&a);
        assert_eq!(points.len(), 2);
        for p in &points {
            assert_eq!(p["figure"], 11);
            // The profiles' SLOs, doubled.
            assert_eq!((&p["slo_ms"]["service_request"], &p["slo_ms"]["attach"]), (&20.0.into(), &80.0.into()), "{p}");
            for key in ["scheme", "hosts", "load", "slo_violation_pct"] {
                assert!(!p[key].is_null(), "{key} in {p}");
            }
            assert!(p["hosts_needed"].is_u64() || p["hosts_needed"].is_null());
            assert_eq!(p["alpha"], 2.0);
            match p["hosts_time_avg"].as_f64() {
                Some(avg) => {
                    let s = &p["autoscaled"];
                    assert!(s["slo_violation_pct"].as_f64().unwrap() <= 5.0, "{p}");
                    assert!((0.0..=s["hosts_max"].as_f64().unwrap()).contains(&avg), "{p}");
                }
                None => assert!(p["autoscaled"].is_null()),
            }
        }
        let dir = std::env::temp_dir().join(format!("mobicore-bench-mme-fig11-{}", std::process::id()));
        plot(&dir, MmeFigure::Fig11, &points).unwrap();
        for file in ["fig11_hosts_needed.svg", "fig11_hosts_fixed.svg"] {
            assert!(dir.join(file).exists(), "{file}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
