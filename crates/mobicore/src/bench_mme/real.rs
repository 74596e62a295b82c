//! `bench mme fig6|fig7` on real processes on this machine: the elastic
//! MME as `mobicore mme-frontend` + `mobicore mme-host`s over a real
//! `redis-server`, beside the stateful baseline (today's monolithic
//! `mobicore mme`), in the same run. The HSS and S/P-GW-C run in this
//! process (as the elastic system tests run them), the emulated RAN is
//! the load generator. Everything is on loopback; every port is chosen by
//! the kernel, except the baseline's SCTP-over-UDP port, which a restart
//! must find again (a free one is picked). Every process started is
//! killed when its deployment ends, on error and on Ctrl-C too
//! ([`Procs`]).
//!
//! - Fig. 6 (seed 004 7.1): procedure throughput against offered load.
//!   Per load, fresh UEs attach at that arrival rate, are released, then
//!   a service request and a release each at that rate; procedures/s is
//!   what succeeded over the phases' time.
//! - Fig. 7 (seed 004 7.2, "Fault Tolerance"): rounds of service requests
//!   and releases at a constant rate (T1); one MME host is killed with
//!   SIGKILL mid-run (the stateful MME is killed and started again, and
//!   the eNBs reconnect). Latency per bin by start time, failed
//!   procedures, re-attaches, and the time until latency is back to its
//!   level before the failure ([`timeline`]).

use super::timeline::{self, Outcome, Threshold};
use super::{bar, finish, MmeArgs, MmeFigure};
use crate::allinone;
use crate::config::Config;
use crate::elastic_mme::{launch, Placement};
use crate::procs::{field, next_line, wait_line, Procs, TempDir};
use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use mobicore_hss::SubscriberStore;
use mobicore_ran::{Phase, PhaseReport, Ran, RanConfig};
use mobicore_sctp::Transport;
use mobicore_store::redis_server::RedisServer;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a process may take to say it is ready (a bound for a loaded
/// machine, not a measure).
const READY: Duration = Duration::from_secs(30);

/// What a real-process figure compares (the JSON's `scheme`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Deployment {
    /// Front end + hosts, UE contexts in Redis written when a procedure
    /// completes (cold): seed 004's centralized store (MME-RC).
    Redis,
    /// The same, the context written after every message (hot).
    RedisHot,
    /// The same as `redis`, named for Fig. 7's hot/cold pair.
    RedisCold,
    /// Today's monolithic MME (`mobicore mme`): the stateful baseline.
    Stateful,
    /// Host-local stores, each replicated to its replica hosts (per
    /// replica group, the heir it would have), after every message (seed
    /// 004 4.3; no Redis).
    LocalHot,
    /// The same, when a procedure completes.
    LocalCold,
    /// `local-hot` with two NF instances per host (`--nf-instances 2`);
    /// Fig. 7 kills one instance of host 1, not the host (seed 004 Fig.
    /// 7 left, "NF failure").
    LocalHotNf,
}

impl Deployment {
    pub fn name(self) -> &'static str {
        match self {
            Deployment::Redis => "redis",
            Deployment::RedisHot => "redis-hot",
            Deployment::RedisCold => "redis-cold",
            Deployment::Stateful => "stateful",
            Deployment::LocalHot => "local-hot",
            Deployment::LocalCold => "local-cold",
            Deployment::LocalHotNf => "local-hot-nf",
        }
    }

    /// Whether its hosts share a `redis-server`.
    fn uses_redis(self) -> bool {
        matches!(self, Deployment::Redis | Deployment::RedisHot | Deployment::RedisCold)
    }

    /// The `mme-host` arguments of its store, given Redis's URL; none for
    /// the stateful MME.
    fn host_store(self, redis: &str) -> Option<Vec<String>> {
        let store = |store: &str, replication: &str| {
            Some(["--store", store, "--replication", replication].map(String::from).to_vec())
        };
        match self {
            Deployment::Redis | Deployment::RedisCold => store(redis, "cold"),
            Deployment::RedisHot => store(redis, "hot"),
            Deployment::LocalHot => store("local", "hot"),
            Deployment::LocalHotNf => {
                Some(["--store", "local", "--replication", "hot", "--nf-instances", "2"].map(String::from).to_vec())
            }
            Deployment::LocalCold => store("local", "cold"),
            Deployment::Stateful => None,
        }
    }

    fn hosts(self, hosts: u32) -> u32 {
        if self == Deployment::Stateful {
            1
        } else {
            hosts
        }
    }
}

/// What the real-process figures run with, from the command line.
pub(super) struct Plan {
    pub(super) program: PathBuf,
    pub(super) deployments: Vec<Deployment>,
    pub(super) hosts: u32,
    pub(super) balancer: String,
    pub(super) echo: bool,
    pub(super) procedure_timeout_ms: u64,
    /// More arguments of every host (e.g. --cpu-max).
    pub(super) host_args: Vec<String>,
    /// More arguments of the front end (e.g. --autoscale); if any, it
    /// gets the hosts' arguments after `--` to start hosts itself.
    pub(super) frontend_args: Vec<String>,
    /// Hosts send S11 requests but Create Session straight to the S-GW.
    pub(super) s11_direct: bool,
    /// With `s11_direct`, the Create Session too; the S-GW sends its
    /// requests to the front end's S11 port.
    pub(super) create_session_direct: bool,
    /// What the front end places, with hosts over Redis (host-local
    /// stores: the attach only).
    pub(super) placement: Placement,
}

pub async fn run(a: &MmeArgs) -> Result<Vec<Value>> {
    // Seed 004 Figs 6-7: local replication, the centralized store (Redis)
    // and the stateful MME.
    let deployments = a.deployments.clone().unwrap_or_else(|| match a.figure {
        MmeFigure::Fig7 => vec![
            Deployment::LocalHot,
            Deployment::LocalHotNf,
            Deployment::LocalCold,
            Deployment::RedisHot,
            Deployment::RedisCold,
            Deployment::Stateful,
        ],
        _ => vec![Deployment::LocalCold, Deployment::Redis, Deployment::Stateful],
    });
    let hosts = match a.hosts.as_deref() {
        None => 3,
        Some([n]) if *n > 0 => *n,
        Some(_) => bail!("--hosts: Figs. 6 and 7 take one host count (at least 1)"),
    };
    let plan = Plan {
        program: std::env::current_exe().context("the mobicore binary")?,
        deployments,
        hosts,
        balancer: a.balancer.to_string(),
        echo: a.verbose,
        procedure_timeout_ms: a.procedure_timeout_ms,
        // A CPU budget only if asked for (the stateful MME has none).
        host_args: a.cpu_max.map(|c| vec!["--cpu-max".into(), c.to_string()]).unwrap_or_default(),
        frontend_args: Vec::new(),
        s11_direct: !a.s11_via_frontend,
        create_session_direct: a.create_session_direct,
        placement: a.placement.unwrap_or(Placement::Attach),
    };
    match a.figure {
        MmeFigure::Fig6 => fig6(a, &plan).await,
        MmeFigure::Fig7 => fig7(a, &plan).await,
        MmeFigure::Fig8 | MmeFigure::Fig9 | MmeFigure::Fig10 | MmeFigure::Fig11 => {
            unreachable!("figures of their own modules")
        }
    }
}

/// One deployment started: its processes, the core's other NFs here, and
/// the RAN connected to it.
pub(super) struct Rig {
    // Dropped first: the processes.
    pub(super) procs: Procs,
    pub(super) ran: Ran,
    core: allinone::AllInOne,
    pub(super) mme: Mme,
    hosts: u32,
    /// The front end's and hosts' metrics addresses, by process name.
    metrics: Vec<(String, SocketAddr)>,
    _redis: Option<RedisServer>,
    _dir: TempDir,
}

pub(super) enum Mme {
    Elastic {
        fe: mpsc::Receiver<String>,
        /// With NF instances: host 1's output and its instance 0's pid.
        nf: Option<(mpsc::Receiver<String>, i32)>,
    },
    /// The monolith's arguments, to start it again.
    Stateful { args: Vec<String> },
}

/// CPU time of a run's processes by role ([`Rig::cpu_by_role`]).
type CpuByRole = BTreeMap<&'static str, Duration>;

/// The role of one of a run's child processes, by its name there.
fn role_of(name: &str) -> &'static str {
    match name {
        "frontend" => "frontend",
        "mme" => "mme",
        n if n.starts_with("host") => "hosts",
        _ => "other",
    }
}

/// Microseconds of CPU per procedure of each role between `before` and
/// `after`, `done` procedures; with `mme_side`, the front end's, hosts',
/// stateful MME's and Redis's together.
fn cpu_us_per(before: &CpuByRole, after: &CpuByRole, done: u64) -> BTreeMap<String, f64> {
    let mut per: BTreeMap<String, f64> = after
        .iter()
        .map(|(role, t)| {
            let used = t.saturating_sub(before.get(role).copied().unwrap_or_default());
            (role.to_string(), used.as_secs_f64() * 1e6 / done.max(1) as f64)
        })
        .collect();
    let side: f64 = per.iter().filter(|(r, _)| r.as_str() != "bench").map(|(_, v)| v).sum();
    per.insert("mme_side".to_string(), side);
    per
}

impl Plan {
    /// Whether `d`'s hosts send the Create Session straight to the S-GW,
    /// which then sends its requests to the front end's S11 port.
    fn sends_create_session(&self, d: Deployment) -> bool {
        self.s11_direct && self.create_session_direct && d.host_store("").is_some()
    }
}

impl Rig {
    /// CPU time so far of this process (the bench: RAN, HSS, S/P-GW-C,
    /// UPF), of the front end, the hosts (summed; not their NF instance
    /// processes), the stateful MME and Redis. A process gone is left out.
    fn cpu_by_role(&self) -> CpuByRole {
        let mut by = CpuByRole::new();
        let mut add = |role: &'static str, pid: u32| {
            if let Ok(t) = super::balance::cpu_time(pid) {
                *by.entry(role).or_default() += t;
            }
        };
        add("bench", std::process::id());
        for (name, pid) in self.procs.pids() {
            add(role_of(name), pid);
        }
        if let Some(r) = &self._redis {
            add("redis", r.pid());
        }
        by
    }

    pub(super) async fn start(plan: &Plan, d: Deployment, ues: u64, rate: Option<f64>) -> Result<Rig> {
        // The front end's S11 port is chosen here before the S-GW starts
        // (it sends its requests there): another process could bind it
        // first, so a failed start is tried again with another (at most
        // three times, as the stateful MME's restart does).
        let tries = match plan.sends_create_session(d) {
            true => 3,
            false => 1,
        };
        let mut attempt = 1;
        loop {
            match Self::start_once(plan, d, ues, rate).await {
                Err(e) if attempt < tries => {
                    eprintln!("bench mme: starting {} failed ({e:#}); again with another S11 port", d.name());
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    async fn start_once(plan: &Plan, d: Deployment, ues: u64, rate: Option<f64>) -> Result<Rig> {
        let redis = match d.uses_redis() {
            false => None,
            true => Some(RedisServer::start().context("starting redis-server (apt-get install redis-server)")?),
        };
        let mut procs = Procs::new(&plan.program, plan.echo);
        let mut cfg = Config::default();
        cfg.mme.s1ap = "127.0.0.1:0".parse()?;
        let subscribers = SubscriberStore::in_memory();
        let mut ran_cfg: RanConfig = cfg.ran.core.clone();
        ran_cfg.ues = ues;
        ran_cfg.enbs = 2;
        ran_cfg.detach = false;
        ran_cfg.procedure_timeout_ms = plan.procedure_timeout_ms;
        ran_cfg.rate = rate;
        allinone::provision(&subscribers, &ran_cfg.plan, ues)?;
        // The front end's S11 port, which the S-GW sends its requests to
        // when the hosts send even the Create Session themselves.
        let fe_s11 = match plan.sends_create_session(d) {
            true => {
                let port = crate::procs::spare_port()?;
                cfg.spgwc.mme_s11_port = Some(port);
                format!("127.0.0.1:{port}")
            }
            false => "127.0.0.1:0".to_string(),
        };
        // HSS, UPF (PFCP only) and S/P-GW-C here; the MME `start` brings
        // too stays idle on its own ephemeral port.
        let core = allinone::start(&cfg, subscribers, Transport::Udp { port: 0 }).await?;
        let dir = TempDir::new(&format!("mobicore-bench-mme-{}", d.name()))?;
        let toml = dir.0.join("mme.toml");
        let mut metrics = Vec::new();
        let (mme, s1ap, udp) = match d.host_store(&redis.as_ref().map(RedisServer::url).unwrap_or_default()) {
            Some(mut store) => {
                std::fs::write(&toml, launch::host_config(core.hss, core.sgw_s11))?;
                let sgw = core.sgw_s11.to_string();
                if plan.s11_direct {
                    store.extend(["--s11-direct".to_string(), sgw.clone()]);
                }
                // Hosts on this machine: a Unix socket only this user may use.
                let link = format!("unix:{}", dir.0.join("hosts.sock").display());
                let mut fe_args = launch::frontend_args(&sgw, &plan.balancer, &link);
                if let Some(i) = fe_args.iter().position(|a| *a == "--s11") {
                    fe_args[i + 1] = &fe_s11;
                }
                if plan.sends_create_session(d) {
                    store.push("--create-session-direct".to_string());
                }
                fe_args.extend(["--metrics", "127.0.0.1:0"]);
                // Over Redis and over host-local stores alike (there, among
                // the hosts holding the UE's record).
                if plan.placement == Placement::Procedure {
                    fe_args.extend(["--placement", "procedure"]);
                }
                if !plan.frontend_args.is_empty() {
                    fe_args.extend(plan.frontend_args.iter().map(String::as_str));
                    fe_args.extend(["--", "--threads", "1", "--config", path_str(&toml)?]);
                    fe_args.extend(store.iter().chain(&plan.host_args).map(String::as_str));
                }
                let fe = procs.start("frontend", &fe_args)?;
                let ready = wait(&fe, "the front end", |l| l.starts_with("mme-frontend ready").then(|| l.to_string()))?;
                let get = |k: &str| field(&ready, k).ok_or_else(|| anyhow!("no {k}= in {ready:?}"));
                let s1ap: SocketAddr = get("s1ap")?.parse()?;
                let udp: u16 = get("udp_port")?.parse()?;
                let (hosts_addr, s11) = (get("hosts")?.to_string(), get("s11")?.to_string());
                metrics.push(("frontend".to_string(), get("metrics")?.parse()?));
                let mut nf = None;
                for id in 1..=plan.hosts {
                    let id_s = id.to_string();
                    let mut args = vec!["mme-host", "--threads", "1", "--config", path_str(&toml)?, "--id", &id_s];
                    args.extend(["--frontend", &hosts_addr, "--frontend-s11", &s11]);
                    args.extend(store.iter().chain(&plan.host_args).map(String::as_str));
                    args.extend(["--metrics", "127.0.0.1:0"]);
                    let out = procs.start(&format!("host{id}"), &args)?;
                    let ready = format!("mme-host {id} ready");
                    let m =
                        wait(&out, "a host", |l| l.starts_with(&ready).then(|| field(l, "metrics")?.parse().ok())?)?;
                    metrics.push((format!("host{id}"), m));
                    let up = format!("mme-frontend: host{id} up");
                    wait(&fe, "a host's connection", |l| (l == up).then_some(()))?;
                    if d == Deployment::LocalHotNf && id == 1 {
                        let pid = wait(&out, "host 1's NF instance 0", |l| {
                            l.strip_prefix("mme-host 1: nf 0 pid ")?.trim().parse::<i32>().ok()
                        })?;
                        nf = Some((out, pid));
                    }
                }
                (Mme::Elastic { fe, nf }, s1ap, udp)
            }
            None => {
                // The restarted MME binds its SCTP and UDP ports again:
                // spare ones, others if another process took them first.
                let mut tries = 0;
                let (args, udp) = loop {
                    let udp = crate::procs::spare_port()?;
                    let body = format!(
                        "[mme]\ns1ap = \"127.0.0.1:{udp}\"\nhss = \"{}\"\nsgw = \"{}\"\ns11_local = \"127.0.0.1:0\"\n\
                         [sctp]\ntransport = \"udp\"\nudp_port = {udp}\n",
                        core.hss, core.sgw_s11
                    );
                    std::fs::write(&toml, body)?;
                    let args = vec!["mme".to_string(), "--config".into(), path_str(&toml)?.to_string()];
                    match start_stateful(&mut procs, &args) {
                        Ok(_) => break (args, udp),
                        Err(_) if tries < 3 => {
                            tries += 1;
                            procs.kill("mme")?;
                        }
                        Err(e) => return Err(e),
                    }
                };
                let s1ap = SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, udp));
                (Mme::Stateful { args }, s1ap, udp)
            }
        };
        ran_cfg.mme = s1ap;
        let ran = allinone::ran_session(&cfg, ran_cfg, Transport::Udp { port: udp }, None).await?;
        let hosts = d.hosts(plan.hosts);
        Ok(Rig { procs, ran, core, mme, hosts, metrics, _redis: redis, _dir: dir })
    }

    /// The counters of every process of the deployment (its front end and
    /// hosts, by their metrics; the NFs here) that count something gone
    /// wrong, by process: what to read after a failed procedure.
    pub(super) async fn trouble(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        let mut all = BTreeMap::new();
        for (process, addr) in &self.metrics {
            let counters = match mobicore_controller::site::http_get(*addr, "/metrics").await {
                Ok(text) => troubled(text.lines().filter_map(|l| {
                    let (name, v) = l.split_once(' ')?;
                    Some((name.strip_prefix("mobicore_")?, v.trim().parse().ok()?))
                })),
                Err(e) => [(format!("metrics unreadable: {e}"), 0)].into(),
            };
            all.insert(process.clone(), counters);
        }
        for (nf, c) in &self.core.counters {
            all.insert(nf.to_string(), troubled(c.snapshot()));
        }
        all
    }

    /// Counter `name` (without its `mobicore_` prefix) of each process
    /// that serves its metrics and has it, by process name.
    pub(super) async fn counter_of_each(&self, name: &str) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (process, addr) in &self.metrics {
            let Ok(text) = mobicore_controller::site::http_get(*addr, "/metrics").await else { continue };
            let value = text.lines().find_map(|l| {
                let (n, v) = l.split_once(' ')?;
                (n.strip_prefix("mobicore_")? == name).then(|| v.trim().parse().ok())?
            });
            if let Some(v) = value {
                out.insert(process.clone(), v);
            }
        }
        out
    }

    /// The UEs of dead host `victim` each live host took over when told it
    /// inherits them (the heir of their replica groups), by host number.
    pub(super) async fn ues_by_heir(&self, victim: u32) -> BTreeMap<u32, u64> {
        self.counter_of_each("mme_host_ues_adopted")
            .await
            .into_iter()
            .filter_map(|(p, n)| Some((p.strip_prefix("host")?.parse::<u32>().ok()?, n)))
            .filter(|&(h, n)| h != victim && n > 0)
            .collect()
    }

    /// Stop the deployment: the processes, the RAN, the NFs here.
    pub(super) async fn stop(self) -> Result<()> {
        let Rig { procs, ran, core, .. } = self;
        drop(procs);
        drop(ran);
        core.stop().await
    }
}

fn start_stateful(procs: &mut Procs, args: &[String]) -> Result<mpsc::Receiver<String>> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = procs.start("mme", &args)?;
    wait(&out, "the stateful MME", |l| l.starts_with("mme: S1-MME on").then_some(()))?;
    Ok(out)
}

fn wait<T>(rx: &mpsc::Receiver<String>, what: &str, pick: impl FnMut(&str) -> Option<T>) -> Result<T> {
    wait_line(rx, what, READY, pick).map_err(|e| anyhow!("{e} (run with --verbose to see its output)"))
}

/// The counters among `counters` that count something gone wrong (by
/// their names), if not zero.
fn troubled<'a>(counters: impl IntoIterator<Item = (&'a str, u64)>) -> BTreeMap<String, u64> {
    const WORDS: [&str; 15] = [
        "fail",
        "duplicate",
        "mismatch",
        "reused",
        "queue_full",
        "unknown",
        "conflict",
        "lost",
        "drop",
        "bounce",
        "error",
        "timeout",
        "retrans",
        "stale",
        "reject",
    ];
    counters
        .into_iter()
        .filter(|(n, v)| *v > 0 && WORDS.iter().any(|w| n.contains(w)))
        .map(|(n, v)| (n.to_string(), v))
        .collect()
}

fn path_str(p: &std::path::Path) -> Result<&str> {
    p.to_str().ok_or_else(|| anyhow!("a non-UTF-8 temporary path: {}", p.display()))
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// p50 and p99 in ms of the phases' successful procedures.
fn percentiles(phases: &[&PhaseReport]) -> (f64, f64) {
    let all: Vec<u64> = phases.iter().flat_map(|p| p.latencies_us.iter().copied()).collect();
    let p = |q| mobicore_ran::percentile(&all, q).map_or(0.0, ms);
    (p(50.0), p(99.0))
}

fn per_second(phases: &[&PhaseReport]) -> f64 {
    let ok: u64 = phases.iter().map(|p| p.succeeded).sum();
    let s: f64 = phases.iter().map(|p| p.elapsed.as_secs_f64()).sum();
    if s > 0.0 {
        ok as f64 / s
    } else {
        0.0
    }
}

/// Seed 004 Fig. 6: throughput against offered load, each deployment on
/// the same loads.
async fn fig6(a: &MmeArgs, plan: &Plan) -> Result<Vec<Value>> {
    let seconds = a.seconds.unwrap_or(1.0);
    let per_point = |load: f64| a.ues.map_or(((load * seconds).round() as u64).max(20), u64::from);
    let total: u64 = a.loads.iter().map(|&l| per_point(l)).sum();
    if a.loads.is_empty() || a.loads.iter().any(|l| !(l.is_finite() && *l > 0.0)) || seconds <= 0.0 {
        bail!("--loads must be positive procedures/s, --seconds positive");
    }
    println!(
        "Fig. 6 (real processes): procedures/s against offered load ({} procedures/s); per load, {} UEs attach at that rate, \
         then a service request and a release each; {} hosts behind the front end ({}), one stateful MME",
        a.loads.iter().map(|l| format!("{l}")).collect::<Vec<_>>().join(", "),
        a.ues.map_or(format!("load x {seconds} s"), |n| n.to_string()),
        plan.hosts,
        plan.balancer
    );
    let rounds = a.rounds.unwrap_or(1).max(1) as usize;
    let b = bar((rounds * plan.deployments.len() * a.loads.len()) as u64);
    // Each round runs every deployment, in reverse order every other round
    // (A B B A ...), so that what the machine does meanwhile falls on each
    // alike; a point is the median over the rounds.
    let mut measured: Vec<Vec<Vec<Value>>> = vec![vec![Vec::new(); a.loads.len()]; plan.deployments.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..plan.deployments.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for di in order {
            let d = plan.deployments[di];
            b.set_message(format!("round {}, {}: starting", round + 1, d.name()));
            let mut rig = Rig::start(plan, d, total, None).await?;
            let mut first = 0u64;
            for (li, &load) in a.loads.iter().enumerate() {
                b.set_message(format!("round {}, {}, {load} procedures/s", round + 1, d.name()));
                let n = per_point(load);
                let ues: Vec<u64> = (first..first + n).collect();
                first += n;
                rig.ran.set_rate(Some(load))?;
                let cpu_before = rig.cpu_by_role();
                let attach = rig.ran.attach_some(ues[0]..ues[0] + n).await?;
                let cpu = cpu_us_per(&cpu_before, &rig.cpu_by_role(), attach.succeeded);
                rig.ran.phase_of(Phase::Release, &ues).await?;
                let sr = rig.ran.phase_of(Phase::ServiceRequest, &ues).await?;
                let release = rig.ran.phase_of(Phase::Release, &ues).await?;
                let all = [&attach, &sr, &release];
                let (p50, p99) = percentiles(&all);
                let failed: u64 = all.iter().map(|p| p.failed).sum();
                let (mut reasons, mut trouble) = (BTreeMap::new(), BTreeMap::new());
                if failed > 0 {
                    let r = rig.ran.report();
                    reasons = r.failures.clone();
                    trouble = rig.trouble().await;
                    // Printed even when the bar is hidden (standard error not a terminal).
                    b.suspend(|| eprintln!(
                        "{} at {load}/s: failed attach {}, service request {}, release {}; failures {:?}, anomalies {:?}; \
                         counters {:?}",
                        d.name(),
                        attach.failed,
                        sr.failed,
                        release.failed,
                        r.failures,
                        r.anomalies,
                        trouble
                    ));
                }
                measured[di][li].push(json!({
                    "hosts": rig.hosts,
                    "ues": n,
                    "procedures_per_s": per_second(&all),
                    "attach_per_s": per_second(&[&attach]),
                    "service_request_release_per_s": per_second(&[&sr, &release]),
                    "latency_ms_p50": p50,
                    "latency_ms_p99": p99,
                    "attach_latency_ms_p50": mobicore_ran::percentile(&attach.latencies_us, 50.0).map_or(0.0, ms),
                    "attach_latency_ms_p99": mobicore_ran::percentile(&attach.latencies_us, 99.0).map_or(0.0, ms),
                    "failed_procedures": failed,
                    "failures": reasons,
                    "counters": trouble,
                    "cpu_us_per_attach": cpu,
                }));
                b.inc(1);
            }
            rig.stop().await?;
        }
    }
    let (mut points, mut rows) = (Vec::new(), Vec::new());
    for (di, &d) in plan.deployments.iter().enumerate() {
        for (li, &load) in a.loads.iter().enumerate() {
            let runs = &measured[di][li];
            let med = |k: &str| mobicore_dpbench::rig::median(runs.iter().filter_map(|r| r[k].as_f64()).collect());
            let failed: u64 = runs.iter().filter_map(|r| r["failed_procedures"].as_u64()).sum();
            let mut p = json!({
                "figure": 6,
                "mode": "real",
                "scheme": d.name(),
                "hosts": runs[0]["hosts"],
                "load": load,
                "ues": runs[0]["ues"],
                "failed_procedures": failed,
                "rounds": runs,
            });
            let roles: std::collections::BTreeSet<String> = runs
                .iter()
                .filter_map(|r| r["cpu_us_per_attach"].as_object())
                .flat_map(|o| o.keys().cloned())
                .collect();
            let cpu: BTreeMap<String, f64> = roles
                .into_iter()
                .map(|role| {
                    let v = runs.iter().filter_map(|r| r["cpu_us_per_attach"][&role].as_f64()).collect();
                    (role, mobicore_dpbench::rig::median(v))
                })
                .collect();
            p["cpu_us_per_attach"] = json!(cpu);
            for k in [
                "procedures_per_s",
                "attach_per_s",
                "service_request_release_per_s",
                "latency_ms_p50",
                "latency_ms_p99",
                "attach_latency_ms_p50",
                "attach_latency_ms_p99",
            ] {
                p[k] = json!(med(k));
            }
            rows.push(vec![
                d.name().to_string(),
                p["hosts"].to_string(),
                format!("{load}"),
                format!("{:.0}", med("procedures_per_s")),
                format!("{:.0}", med("attach_per_s")),
                format!("{:.0}", med("service_request_release_per_s")),
                format!("{:.2}", med("latency_ms_p50")),
                format!("{:.2}", med("latency_ms_p99")),
                failed.to_string(),
            ]);
            points.push(p);
        }
    }
    finish(b, &["scheme", "hosts", "offered/s", "proc/s", "attach/s", "SR+rel/s", "p50 ms", "p99 ms", "failed"], &rows);
    // What an attach costs each process, at the lowest load (below every
    // deployment's peak, where the machine is not yet saturated).
    println!("CPU per attach at {}/s, microseconds (median of the rounds):", a.loads[0]);
    for d in &plan.deployments {
        let Some(p) = points.iter().find(|p| p["scheme"] == d.name()) else { continue };
        let Some(cpu) = p["cpu_us_per_attach"].as_object() else { continue };
        let shown: Vec<String> = cpu.iter().map(|(r, v)| format!("{r} {:.0}", v.as_f64().unwrap_or(0.0))).collect();
        println!("  {}: {}", d.name(), shown.join(", "));
    }
    // The target: each elastic deployment's peak attach rate against
    // the stateful MME's, in the same run.
    let peak = |name: &str| {
        points.iter().filter(|p| p["scheme"] == name).filter_map(|p| p["attach_per_s"].as_f64()).fold(0.0, f64::max)
    };
    let stateful = peak(Deployment::Stateful.name());
    if stateful > 0.0 {
        for d in plan.deployments.iter().filter(|d| **d != Deployment::Stateful) {
            let x = peak(d.name());
            println!(
                "peak attach/s: {} {x:.0} = {:.2} of the stateful MME's {stateful:.0} (median of {rounds} round(s) per point)",
                d.name(),
                x / stateful
            );
            // The same ratio in each round (the deployments run side by
            // side there): how far the machine's noise moves it.
            let si = plan.deployments.iter().position(|d| *d == Deployment::Stateful);
            let di = plan.deployments.iter().position(|e| e == d);
            if let (Some(si), Some(di), true) = (si, di, rounds > 1) {
                let ratios = round_ratios(&measured[di], &measured[si]);
                let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
                println!("  per round: {}", shown.join(", "));
            }
        }
    }
    Ok(points)
}

/// Per round, the peak attach rate over the loads of `x` against that of
/// `base`: `runs[load][round]` each.
fn round_ratios(x: &[Vec<Value>], base: &[Vec<Value>]) -> Vec<f64> {
    let peak = |runs: &[Vec<Value>], round: usize| {
        runs.iter().filter_map(|l| l.get(round)?["attach_per_s"].as_f64()).fold(0.0, f64::max)
    };
    let rounds = x.iter().chain(base).map(Vec::len).min().unwrap_or(0);
    (0..rounds).filter(|&r| peak(base, r) > 0.0).map(|r| peak(x, r) / peak(base, r)).collect()
}

/// Seed 004 Fig. 7: a host failure under constant load.
async fn fig7(a: &MmeArgs, plan: &Plan) -> Result<Vec<Value>> {
    let ues = u64::from(a.ues.unwrap_or(200));
    let rate = a.rate.unwrap_or(400.0);
    let seconds = a.seconds.unwrap_or(10.0);
    let (kill_at, bin_ms) = (a.kill_at_s, a.bin_ms);
    if !(rate > 0.0 && seconds > kill_at && kill_at > 0.0 && bin_ms > 0.0) || ues == 0 {
        bail!("fig7 needs --rate > 0, 0 < --kill-at-s < --seconds, --bin-ms > 0 and UEs");
    }
    println!(
        "Fig. 7 (real processes): {ues} UEs in rounds of service requests and releases at {rate} procedures/s for {seconds} s; \
         at {kill_at} s one MME host is killed (kill -9; the stateful MME is killed and started again); latency per \
         {bin_ms} ms bin by start, procedure timeout {} ms",
        plan.procedure_timeout_ms
    );
    let b = bar(plan.deployments.len() as u64);
    let (mut points, mut rows) = (Vec::new(), Vec::new());
    for &d in &plan.deployments {
        b.set_message(format!("{}: starting", d.name()));
        let mut rig = Rig::start(plan, d, ues, Some(rate)).await?;
        b.set_message(format!("{}: attaching", d.name()));
        let all: Vec<u64> = (0..ues).collect();
        rig.ran.attach_some(0..ues).await?;
        rig.ran.phase_of(Phase::Release, &all).await?;
        rig.ran.settle_idle().await?;
        b.set_message(format!("{}: running, a host fails at {kill_at} s", d.name()));
        let run = failure_under_load(&mut rig, d, 1, &all, seconds, kill_at).await?;
        let FailureRun { fail_ms, run_ms, ref outcomes, reattaches, ref reasons } = run;
        let bins = timeline::bins(outcomes, bin_ms, run_ms);
        let r = timeline::recovery(&bins, bin_ms, fail_ms, Threshold::default());
        let failed = run.failed();
        let (p50, p99) = timeline::p50_p99(outcomes);
        let bins_json = timeline::bins_json(&bins);
        // Host 1's UEs (idle, loaded at the inheritance) by heir.
        let heirs = match d {
            Deployment::Stateful | Deployment::LocalHotNf => BTreeMap::new(),
            _ => rig.ues_by_heir(1).await,
        };
        let heirs_text: Vec<String> = heirs.iter().map(|(h, n)| format!("host{h} {n}")).collect();
        rows.push(vec![
            d.name().to_string(),
            d.hosts(plan.hosts).to_string(),
            outcomes.len().to_string(),
            failed.to_string(),
            reattaches.to_string(),
            r.level_ms.map_or("-".into(), |v| format!("{v:.2}")),
            p99.map_or("-".into(), |v| format!("{v:.1}")),
            r.recovery_ms.map_or(format!("> {:.0}", run_ms - fail_ms), |v| format!("{v:.0}")),
            if heirs_text.is_empty() { "-".to_string() } else { heirs_text.join(", ") },
        ]);
        points.push(json!({
            "figure": 7,
            "mode": "real",
            "scheme": d.name(),
            "hosts": d.hosts(plan.hosts),
            "load": rate,
            "ues": ues,
            "failure": match d {
                Deployment::Stateful => "mme killed and restarted",
                Deployment::LocalHotNf => "NF instance killed",
                _ => "host killed",
            },
            "fail_at_ms": fail_ms,
            "run_ms": run_ms,
            "bin_ms": bin_ms,
            "procedures": outcomes.len(),
            "failed_procedures": failed,
            "reattaches": reattaches,
            "latency_ms_p50": p50,
            "latency_ms_p99": p99,
            "level_ms": r.level_ms,
            "recovery_ms": r.recovery_ms,
            "ues_by_heir": heirs,
            "failure_reasons": reasons,
            "timeline": bins_json,
        }));
        rig.stop().await?;
        b.inc(1);
    }
    finish(
        b,
        &[
            "scheme",
            "hosts",
            "procedures",
            "failed",
            "re-attaches",
            "level p50 ms",
            "p99 ms",
            "recovery ms",
            "UEs taken over by",
        ],
        &rows,
    );
    Ok(points)
}

/// What a failure under load did ([`failure_under_load`]).
pub(super) struct FailureRun {
    /// When the failure came and the run ended, from its start.
    fail_ms: f64,
    run_ms: f64,
    /// Every procedure the RAN ran, by start from the run's start.
    outcomes: Vec<Outcome>,
    /// Attaches among them: UEs that had to attach again.
    reattaches: usize,
    /// The RAN's failures by reason.
    reasons: BTreeMap<String, u64>,
}

impl FailureRun {
    fn failed(&self) -> usize {
        self.outcomes.iter().filter(|o| !o.ok).count()
    }
}

/// Seed 004 Fig. 7's run: rounds of a service request and a release of
/// every UE of `ues` (idle, attached) at the RAN's rate for `seconds`;
/// `kill_at` s in, `d`'s failure: host `victim` killed (kill -9), or with
/// NF instances host 1's instance 0, or the stateful MME killed and
/// started again at once (it knows no UE then).
async fn failure_under_load(
    rig: &mut Rig,
    d: Deployment,
    victim: u32,
    ues: &[u64],
    seconds: f64,
    kill_at: f64,
) -> Result<FailureRun> {
    if d == Deployment::Stateful {
        rig.ran.reconnect_after_loss(Duration::from_millis(200));
    }
    rig.ran.log_outcomes();
    let Rig { procs, ran, mme, .. } = rig;
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(seconds);
    let load = async {
        while Instant::now() < end {
            ran.phase_of(Phase::ServiceRequest, ues).await?;
            ran.phase_of(Phase::Release, ues).await?;
        }
        anyhow::Ok(())
    };
    let fail = async {
        tokio::time::sleep_until((t0 + Duration::from_secs_f64(kill_at)).into()).await;
        let killed = Instant::now();
        match mme {
            Mme::Elastic { nf: Some((out, pid)), .. } => {
                // SAFETY: kill(2) of host 1's child, whose pid it printed.
                if unsafe { libc::kill(*pid, libc::SIGKILL) } != 0 {
                    bail!("kill -9 {pid}: {}", std::io::Error::last_os_error());
                }
                next_line(out, "host 1 to see its NF instance 0 gone", READY, |l| {
                    l.starts_with("mme-host 1: nf 0 gone").then_some(())
                })
                .await
                .map_err(|e| anyhow!(e))?;
            }
            Mme::Elastic { fe, nf: None } => {
                procs.kill(&format!("host{victim}"))?;
                let down = format!("mme-frontend: host{victim} down");
                next_line(fe, &format!("the front end to see host {victim} gone"), READY, |l| {
                    l.starts_with(&down).then_some(())
                })
                .await
                .map_err(|e| anyhow!(e))?;
            }
            Mme::Stateful { args } => {
                procs.kill("mme")?;
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = procs.start("mme", &args)?;
                next_line(&out, "the stateful MME again", READY, |l| l.starts_with("mme: S1-MME on").then_some(()))
                    .await
                    .map_err(|e| anyhow!(e))?;
            }
        }
        anyhow::Ok(killed)
    };
    let (l, f) = tokio::join!(load, fail);
    l?;
    let fail_ms = f?.saturating_duration_since(t0).as_secs_f64() * 1e3;
    let run_ms = t0.elapsed().as_secs_f64() * 1e3;
    let log = ran.take_outcomes();
    let reattaches = log.iter().filter(|o| o.procedure == "attach").count();
    let outcomes = log
        .iter()
        .map(|o| Outcome {
            start_ms: o.started.saturating_duration_since(t0).as_secs_f64() * 1e3,
            latency_ms: o.latency.as_secs_f64() * 1e3,
            ok: o.ok,
        })
        .collect();
    Ok(FailureRun { fail_ms, run_ms, outcomes, reattaches, reasons: ran.report().failures.clone() })
}

/// How many keys of `before` `after` holds with the same value.
fn kept<K: Ord, V: PartialEq>(before: &BTreeMap<K, V>, after: &BTreeMap<K, V>) -> u64 {
    before.iter().filter(|(k, v)| after.get(k) == Some(v)).count() as u64
}

/// What `mobicore demo` shows of the elastic MME ([`elastic_demo`]).
#[derive(Debug, serde::Serialize)]
pub struct ElasticDemo {
    pub hosts: u32,
    pub ues: u64,
    /// UEs by the host their GUTI names (the top octet of the M-TMSI),
    /// as attached.
    pub ues_by_host: BTreeMap<u32, u64>,
    pub killed_host: u32,
    /// The killed host's UEs each live host took over (its heir for their
    /// replica groups): the UEs it loaded when told it inherits them.
    pub ues_by_heir: BTreeMap<u32, u64>,
    pub kill_at_ms: f64,
    pub run_ms: f64,
    /// Service requests and releases during the run, and after it one
    /// service request of every UE.
    pub procedures: usize,
    pub failed_procedures: usize,
    pub reattaches: usize,
    pub failure_reasons: BTreeMap<String, u64>,
    /// UEs whose GUTI, and whose PDN session (their address and the
    /// S-GW's S1-U F-TEID), are those they attached with.
    pub gutis_kept: u64,
    pub sessions_kept: u64,
    pub latency_ms_p50: Option<f64>,
    pub latency_ms_p99: Option<f64>,
    pub recovery_ms: Option<f64>,
    /// When something failed: the processes' counters of trouble.
    pub trouble: BTreeMap<String, BTreeMap<String, u64>>,
}

impl ElasticDemo {
    /// Every procedure succeeded, none attached again, and every UE kept
    /// its GUTI and session.
    pub fn ok(&self) -> bool {
        self.failed_procedures == 0
            && self.reattaches == 0
            && self.gutis_kept == self.ues
            && self.sessions_kept == self.ues
    }
}

/// The elastic MME's story in short, for `mobicore demo`: a front end and
/// three MME hosts as processes (host-local stores replicated hot, seed
/// 004 4.3), `ues` UEs attached through the front end and idle; rounds of
/// service requests and releases for 3 s at 400/s with the host holding
/// the most UEs killed (kill -9) 1 s in; then every UE's service request
/// once more, which must find its GUTI and session kept, with no
/// re-attach.
pub async fn elastic_demo(ues: u64, verbose: bool) -> Result<ElasticDemo> {
    const HOSTS: u32 = 3;
    let (seconds, kill_at, bin_ms) = (3.0, 1.0, 100.0);
    let d = Deployment::LocalHot;
    let plan = Plan {
        program: std::env::current_exe().context("the mobicore binary")?,
        deployments: vec![d],
        hosts: HOSTS,
        balancer: "sk-ch".to_string(),
        echo: verbose,
        procedure_timeout_ms: 5_000,
        host_args: Vec::new(),
        frontend_args: Vec::new(),
        s11_direct: true,
        create_session_direct: false,
        placement: Placement::Attach,
    };
    let mut rig = Rig::start(&plan, d, ues, Some(400.0)).await?;
    let all: Vec<u64> = (0..ues).collect();
    rig.ran.attach_some(0..ues).await?;
    // The session each UE attached with: its address and the S-GW's F-TEID.
    let sessions = |rig: &Rig| -> BTreeMap<u64, _> {
        rig.ran.attached_ues().into_iter().map(|u| (u.index, (u.tunnel.ue_ip, u.tunnel.sgw))).collect()
    };
    let attached = sessions(&rig);
    let gutis_of = |rig: &Rig| -> BTreeMap<u64, _> {
        rig.ran.gutis().into_iter().filter_map(|(ue, guti)| Some((ue, guti?))).collect()
    };
    let gutis = gutis_of(&rig);
    let mut ues_by_host = BTreeMap::new();
    for g in gutis.values() {
        *ues_by_host.entry(g.m_tmsi() >> 24).or_insert(0u64) += 1;
    }
    let victim = ues_by_host.iter().max_by_key(|(h, n)| (**n, std::cmp::Reverse(**h))).map_or(1, |(h, _)| *h);
    rig.ran.phase_of(Phase::Release, &all).await?;
    rig.ran.settle_idle().await?;
    let mut run = failure_under_load(&mut rig, d, victim, &all, seconds, kill_at).await?;
    // Every UE once more, now that the host is gone.
    rig.ran.log_outcomes();
    rig.ran.phase_of(Phase::ServiceRequest, &all).await?;
    let after = sessions(&rig);
    let gutis_after = gutis_of(&rig);
    rig.ran.phase_of(Phase::Release, &all).await?;
    let last = rig.ran.take_outcomes();
    run.reattaches += last.iter().filter(|o| o.procedure == "attach").count();
    let last_failed = last.iter().filter(|o| !o.ok).count();
    let ues_by_heir = rig.ues_by_heir(victim).await;
    let bins = timeline::bins(&run.outcomes, bin_ms, run.run_ms);
    let recovery = timeline::recovery(&bins, bin_ms, run.fail_ms, Threshold::default());
    let (p50, p99) = timeline::p50_p99(&run.outcomes);
    let mut demo = ElasticDemo {
        hosts: HOSTS,
        ues,
        ues_by_host,
        killed_host: victim,
        ues_by_heir,
        kill_at_ms: run.fail_ms,
        run_ms: run.run_ms,
        procedures: run.outcomes.len() + last.len(),
        failed_procedures: run.failed() + last_failed,
        reattaches: run.reattaches,
        failure_reasons: rig.ran.report().failures.clone(),
        gutis_kept: kept(&gutis, &gutis_after),
        sessions_kept: kept(&attached, &after),
        latency_ms_p50: p50,
        latency_ms_p99: p99,
        recovery_ms: recovery.recovery_ms,
        trouble: BTreeMap::new(),
    };
    if !demo.ok() {
        demo.trouble = rig.trouble().await;
    }
    rig.stop().await?;
    Ok(demo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rounds_peak_against_the_baselines_in_that_round() {
        let runs = |v: &[[f64; 2]]| -> Vec<Vec<Value>> {
            v.iter().map(|l| l.iter().map(|a| json!({ "attach_per_s": a })).collect()).collect()
        };
        // Two loads, two rounds each: round 1 peaks at 8 and 10, round 2 at 9 and 12.
        let x = runs(&[[8.0, 9.0], [7.0, 6.0]]);
        let base = runs(&[[10.0, 12.0], [9.0, 11.0]]);
        assert_eq!(round_ratios(&x, &base), vec![0.8, 0.75]);
    }

    #[test]
    fn cpu_per_attach_is_each_roles_time_over_the_attaches() {
        let ms = Duration::from_millis;
        let before: CpuByRole = [("bench", ms(1_000)), ("frontend", ms(200)), ("hosts", ms(300))].into();
        let after: CpuByRole =
            [("bench", ms(2_000)), ("frontend", ms(500)), ("hosts", ms(1_100)), ("redis", ms(100))].into();
        let per = cpu_us_per(&before, &after, 10_000);
        let want = [("bench", 100.0), ("frontend", 30.0), ("hosts", 80.0), ("redis", 10.0), ("mme_side", 120.0)];
        for (role, us) in want {
            assert!((per[role] - us).abs() < 1e-9, "{role}: {} != {us}", per[role]);
        }
        assert_eq!((role_of("host12"), role_of("frontend"), role_of("mme")), ("hosts", "frontend", "mme"));
    }

    #[test]
    fn trouble_is_what_counts_something_gone_wrong() {
        let page = [("frontend_host_queue_full", 3), ("frontend_uplink_routed", 900), ("store_cas_conflict", 0)];
        let t = troubled(page);
        assert_eq!(t, [("frontend_host_queue_full".to_string(), 3)].into());
    }
}
