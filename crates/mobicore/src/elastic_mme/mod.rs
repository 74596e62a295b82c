//! The elastic MME as real processes (issue 13 items 1, 2, 6): a front end
//! (`mobicore mme-frontend`, [`frontend`]) that the eNBs see as their MME,
//! and MME hosts (`mobicore mme-host`, [`host`]), each a process running
//! the MME core for the UEs routed to it, their contexts in a store shared
//! through Redis or in its own store replicated to its replica host
//! ([`replica`]). The routing itself is sans-I/O
//! ([`mobicore_elastic::router`]); [`mobicore_mme::routing`] reads what it needs of S1AP;
//! [`wire`] is the front end <-> host link; [`load`] what a host reports
//! for the balancer, [`cgroup`] its CPU budget; [`scaling`] the EPS
//! controller's shell (the operator's API, the hosts' processes);
//! [`launch`] the processes' command lines on loopback (tests, bench). See ARCHITECTURE.md ("The
//! elastic MME") for what runs and what does not yet.

pub mod cgroup;
pub mod frontend;
pub mod host;
pub mod inbox;
pub mod launch;
pub mod link;
pub mod load;
pub mod nf;
pub mod replica;
pub mod scaling;
pub mod wire;

#[cfg(test)]
mod samples;

use crate::allinone::{check_privileges, endpoint_config, transport};
use crate::cli::SctpTransport;
use crate::config;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use mobicore_common::counters::Counters;
use mobicore_elastic::balancer::{Estimation, Loads};
use mobicore_elastic::{Frontend, Profiles, Scheme};
use mobicore_mme::stored::{Replication, StoredUes};
use mobicore_store::Store;
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio::sync::watch;

#[derive(Args, Debug)]
pub struct FrontendArgs {
    /// TOML config file ([mme] for S1 Setup, the S1-MME address, sgw and
    /// s11_local; [sctp]).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// S1-MME address (overrides [mme] s1ap).
    #[arg(long)]
    pub s1ap: Option<SocketAddr>,
    /// How S1-MME SCTP is carried (overrides [sctp] transport).
    #[arg(long, value_enum)]
    pub sctp: Option<SctpTransport>,
    /// With --sctp udp: the UDP port of the encapsulation (0: any, printed).
    #[arg(long)]
    pub udp_port: Option<u16>,
    /// Where MME hosts connect: a loopback TCP address (the link is not
    /// authenticated: any local user may connect), or `unix:/path`, a Unix
    /// socket only this user may use.
    #[arg(long, default_value = "127.0.0.1:36420")]
    pub hosts: link::LinkAddr,
    /// The balancer placing new UEs on hosts: sk-ch (by the hosts' load
    /// reports, seed 004 Algorithm 1), ch, rr or maglev.
    #[arg(long, default_value = "ch")]
    pub scheme: Scheme,
    /// What the balancer places: `attach` (a UE stays on the host it
    /// attached at) or `procedure` (every procedure, as seed 004 places
    /// them: a UE's procedure may run on another host, which reads its
    /// context from the store; only with hosts on one shared store,
    /// `--store redis://...`).
    #[arg(long, value_enum, default_value = "attach")]
    pub placement: Placement,
    /// Host failures a host's records survive with host-local stores
    /// (`--store local`): 1, each host replicating each replica group to
    /// its heir-to-be; 2, also to every host that would serve the group's
    /// UEs if that heir went too (two or three replica hosts per group),
    /// so that a host and its heir going together lose none of its UEs
    /// (seed 004 4.3 keeps two replicas).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub replicas: u8,
    /// Every procedure class's SLO (T_SLO of seed 004 Eq. 1, by which
    /// skewed consistent hashing finds viable hosts) times this: 1 for
    /// attach 40 ms, service request 10 ms, TAU, handover and detach 20.
    #[arg(long, default_value_t = 1.0, value_parser = positive)]
    pub slo_scale: f64,
    /// The MME's S11 address, the one the S/P-GW-C sees: the hosts' S11
    /// goes through it, relayed from and to their links (overrides [mme]
    /// s11_local; port 0: any, printed).
    #[arg(long)]
    pub s11: Option<SocketAddr>,
    /// The S/P-GW-C's S11 address (overrides [mme] sgw).
    #[arg(long)]
    pub sgw: Option<SocketAddr>,
    /// Serve the operator's scaling API here (HTTP, JSON; loopback only,
    /// refused elsewhere: it is not authenticated; port 0: any, printed): GET /v1/hosts, POST /v1/hosts
    /// (start a host), POST /v1/hosts/N/drain (drain host N, then stop it).
    #[arg(long)]
    pub admin: Option<SocketAddr>,
    /// Serve Prometheus metrics (the front end's counters: routing, hosts'
    /// queues, S11 relay, SCTP) on this address (port 0: any, printed).
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// The EPS controller starts and drains hosts by itself: a host more
    /// after --scale-window-s of SLO violations (sk-ch) or of every host
    /// over 80% CPU, one less (the least loaded) after as long with
    /// --spare-cores over all hosts; within --min-hosts..--max-hosts.
    /// Needs the host arguments after --.
    #[arg(long)]
    pub autoscale: bool,
    /// With --autoscale: the fewest hosts it drains down to.
    #[arg(long, default_value_t = 1)]
    pub min_hosts: usize,
    /// With --autoscale: the most hosts it starts up to.
    #[arg(long, default_value_t = 8)]
    pub max_hosts: usize,
    /// With --autoscale: the CPU left over all hosts, cores (each host's
    /// budget less its use), with which one may go.
    #[arg(long, default_value_t = 1.5)]
    pub spare_cores: f64,
    /// With --autoscale: how long a load must last before a host is
    /// started or drained (hysteresis).
    #[arg(long, default_value_t = 10)]
    pub scale_window_s: u64,
    /// How long a draining host may take to finish the procedures it runs
    /// before it is stopped as it stands (its UEs' new procedures wait
    /// meanwhile).
    #[arg(long, default_value_t = 3000)]
    pub drain_within_ms: u64,
    /// Arguments of every mme-host the front end starts (besides --id,
    /// --frontend, --frontend-s11, which it gives): e.g. -- --config
    /// host.toml --store redis://127.0.0.1:6379 --replication cold, or
    /// --store local --replication hot (host-local replicated stores).
    #[arg(last = true)]
    pub host_args: Vec<String>,
}

/// UEs the front end follows at most with per-procedure placement (and
/// procedures its balancer tracks).
const MAX_HELD: usize = 1 << 20;

/// What the front end's balancer places (`mme-frontend --placement`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The attach: a UE's later procedures go where its identifiers name.
    Attach,
    /// Every procedure (seed 004 Algorithm 1); with host-local stores,
    /// service requests, TAUs and detaches among the hosts holding the
    /// UE's record.
    Procedure,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationArg {
    /// A UE's record is written when its procedure completes.
    Cold,
    /// After every message.
    Hot,
}

#[derive(Args, Debug)]
pub struct HostArgs {
    /// TOML config file ([mme]: core settings, hss, s11_local; sgw names
    /// the P-GW unless [mme] pgw does).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// This host's number, 1..=254: the top octet of every MME-UE-S1AP-ID
    /// and M-TMSI it allocates. Never reuse the number of a host that died.
    #[arg(long)]
    pub id: u8,
    /// The front end's host address (its --hosts: address:port or unix:/path).
    #[arg(long)]
    pub frontend: link::LinkAddr,
    /// The front end's S11 address (its --s11): this host's S11 requests go
    /// there and the S-GW's come from there, both over the link to the
    /// front end; its IP is the one of the host's Sender F-TEID for
    /// Control Plane.
    #[arg(long)]
    pub frontend_s11: SocketAddr,
    /// The S-GW's S11 address: this host's requests other than Create
    /// Session (Modify Bearer, Release Access Bearers, Delete Session...)
    /// go straight there from its own socket and their responses straight
    /// back, not through the front end. The Create Session still goes
    /// through the front end, whose address the S-GW keeps for the
    /// session's own requests (DDN). Needs an S-GW that takes a session's
    /// requests from this host's IP (hosts on the front end's machine).
    #[arg(long)]
    pub s11_direct: Option<SocketAddr>,
    /// With --s11-direct, the Create Session too: for an S-GW that sends
    /// its requests to the Sender F-TEID's IP at the front end's S11 port
    /// (`[spgwc] mme_s11_port`, TS 29.274 4.2.1) rather than to where the
    /// Create Session came from. The front end then relays none of this
    /// host's requests.
    #[arg(long, requires = "s11_direct")]
    pub create_session_direct: bool,
    /// The UE context store: "local" (this host's own embedded store,
    /// replicated through the front end to the host that would take its
    /// UEs over if it died, seed 004 4.3: that host serves them on from
    /// its copy), a Redis URL (redis://HOST:PORT, redis+unix:///PATH)
    /// shared by every host, or "memory" (this host alone: nothing
    /// survives it). --replication says when records are written (and so
    /// replicated).
    #[arg(long)]
    pub store: String,
    /// With --store local: the copies of other hosts' records this host
    /// keeps hold at most this many MiB together (beyond: dropped, counted
    /// in replica_over_bound).
    #[arg(long, default_value_t = 256)]
    pub replica_max_mib: usize,
    /// Keys in the Redis store under this namespace (the same for every host).
    #[arg(long, default_value = "mobicore")]
    pub namespace: String,
    /// When a UE's record is written to the store (with --store local,
    /// also when it is replicated): cold or hot.
    #[arg(long, value_enum, default_value = "cold")]
    pub replication: ReplicationArg,
    /// Serve Prometheus metrics (the host's counters) on this address (port 0: any, printed).
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Send the front end a load report (queue length and CPU use, moving
    /// averages) every this many milliseconds.
    #[arg(long, default_value_t = 100)]
    pub load_every_ms: u64,
    /// Bound the host to this fraction of a core (0.5: half a core) in a
    /// cgroup of its own, <cpu hierarchy>/mobicore-hosts/host<id>-<pid>
    /// (removed at exit): cgroup v2's cpu.max at /sys/fs/cgroup, else
    /// cgroup v1's CFS quota at /sys/fs/cgroup/cpu. Its load reports are
    /// of this budget. Needs root.
    #[arg(long)]
    pub cpu_max: Option<f64>,
    /// Every procedure class's SLO times this, by which an NF kind's
    /// priority is bumped at each violation (seed 004 5.3; as
    /// mme-frontend --slo-scale).
    #[arg(long, default_value_t = 1.0, value_parser = positive)]
    pub slo_scale: f64,
    /// Run the host's procedures in this many NF instances
    /// (`mobicore mme-nf` child processes, seed 004 5.2): this process
    /// becomes their forwarder; an instance that dies is replaced and the
    /// events it held are taken over by another. 0: the host's own core
    /// runs them.
    #[arg(long, default_value_t = 0)]
    pub nf_instances: usize,
    /// NF instances per procedure kind, each taking only its kind (seed
    /// 004 5.2's per-procedure services; with --nf-instances too, those
    /// take every kind): `attach=1,service-request=1,tau=1,handover=1,
    /// detach=1`. A procedure's first message goes to an instance of its
    /// kind by least Q/C (Algorithm 2, Eqs. 3-4, P = SLO_min/SLO); a
    /// message that starts nothing known to the UE's last procedure's
    /// instance, else any. Their cgroups'
    /// CPU weights follow P (cgroup v2 cpu.weight, v1 cpu.shares; needs
    /// root, else they run unweighted). A kind whose procedures exceed
    /// their SLO 3 times in a row has its P raised by 0.01 (seed 004 5.3),
    /// unless --nf-priority fixes it.
    #[arg(long, value_parser = nf::parse_kinds)]
    pub nf: Option<nf::NfKinds>,
    /// Fix P per kind instead of the profiles' SLO_min/SLO (seed 004 Fig.
    /// 9's prioritization): `handover=1,service-request=0.25`, P in (0, 1].
    /// It sets the kind's instances' cgroup CPU weights (v2 cpu.weight =
    /// 1000 P, v1 cpu.shares = 1024 P) and the P of the forwarder's Q/C
    /// placement (Eq. 4). An every-kind instance (--nf-instances) keeps P 1.
    #[arg(long, value_parser = nf::parse_priorities)]
    pub nf_priority: Option<nf::NfPriorities>,
    /// (Tests) the first instance holds the first S6a answer it is sent
    /// forever, so that it can be killed mid-attach.
    #[arg(long, hide = true)]
    pub nf_stall_first: bool,
    /// (Tests) this slot's first instance holds the first Modify Bearer
    /// Response it is sent forever (killed mid-service-request).
    #[arg(long, hide = true)]
    pub nf_stall_mbr: Option<usize>,
    /// (Tests) every instance sleeps this long after each event.
    #[arg(long, hide = true)]
    pub nf_slow_ms: Option<u64>,
    /// Idle NF instances started beside --nf's (seed 004 5.2's idle pool):
    /// the host's NF controller gives one to a kind whose instances hold
    /// more than 4 events each at 3 load ticks in a row (a persistent
    /// backlog), and takes one back from a kind beyond its --nf count whose
    /// instances hold at most 0.5 each for 30 ticks
    /// (`mobicore_elastic::nf_scaling`); its CPU weight follows its kind's P.
    #[arg(long, default_value_t = 0)]
    pub nf_pool: usize,
    /// NF instances at most, the pool's included: with more than --nf's
    /// and --nf-pool's, an instance given to a kind is replaced in the
    /// pool by a new one (a process started), and one given back beyond
    /// --nf-pool is stopped (0: no more than at the start).
    #[arg(long, default_value_t = 0)]
    pub nf_max: usize,
}

/// `mobicore mme-nf` (started by an mme-host with --nf-instances): one NF
/// instance of the host, linked to its forwarder.
#[derive(Args, Debug)]
pub struct NfInstanceArgs {
    /// The host's config file (its [mme] core settings).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// The host's number.
    #[arg(long)]
    pub id: u8,
    /// The front end's S11 address (the IP of the MME's F-TEIDs).
    #[arg(long)]
    pub frontend_s11: SocketAddr,
    /// The forwarder's address for its instances.
    #[arg(long)]
    pub forwarder: SocketAddr,
    /// This instance's slot at the forwarder.
    #[arg(long)]
    pub slot: usize,
    /// Its life in the slot (0, then one more at each replacement).
    #[arg(long, default_value_t = 0)]
    pub life: u64,
    #[arg(long, hide = true)]
    pub stall_on_s6a: bool,
    #[arg(long, hide = true)]
    pub stall_on_mbr: bool,
    /// (Tests) sleep this long after each event: a slow instance.
    #[arg(long, hide = true)]
    pub slow_ms: Option<u64>,
}

/// The MME core settings of host `id` (its prefix, its F-TEIDs' IP).
fn host_core_config(cfg: &config::Config, id: u8, frontend_s11: SocketAddr) -> Result<mobicore_mme::MmeConfig> {
    let std::net::IpAddr::V4(s11_ip) = frontend_s11.ip() else {
        bail!("--frontend-s11 {frontend_s11}: an IPv4 address (the F-TEID's)");
    };
    let mut core_cfg = cfg.mme.core.clone();
    core_cfg.host_prefix = Some(id);
    core_cfg.s11_local_ip = s11_ip;
    if let (None, std::net::IpAddr::V4(ip)) = (core_cfg.pgw, cfg.mme.sgw.ip()) {
        core_cfg.pgw = Some(ip);
    }
    core_cfg.validate().map_err(anyhow::Error::msg)?;
    Ok(core_cfg)
}

/// `mobicore mme-nf`.
pub async fn run_nf_instance(a: NfInstanceArgs) -> Result<()> {
    let cfg = config::load(a.config.as_deref())?;
    let mut core_cfg = host_core_config(&cfg, a.id, a.frontend_s11)?;
    // Its S6a answers may come back to another instance: the forwarder's
    // Peers bound the requests in flight.
    core_cfg.max_s6a_in_flight = usize::MAX;
    let core = mobicore_mme::Mme::new(core_cfg);
    tokio::select! {
        r = nf::run_instance(core, a.forwarder, a.id, a.slot, a.life, nf::Faults {
            stall_on_s6a: a.stall_on_s6a,
            stall_on_mbr: a.stall_on_mbr,
            slow: a.slow_ms.map(std::time::Duration::from_millis),
        }) => r,
        _ = crate::procs::interrupted() => Ok(()),
    }
}

/// `mobicore mme-frontend`.
pub async fn run_frontend(a: FrontendArgs) -> Result<()> {
    let mut cfg = config::load(a.config.as_deref())?;
    if let Some(s) = a.s1ap {
        cfg.mme.s1ap = s;
    }
    let t = transport(a.sctp.unwrap_or(cfg.sctp.transport), a.udp_port.unwrap_or(cfg.sctp.udp_port));
    check_privileges(t)?;
    let counters = Counters::new();
    let mut ep = endpoint_config(&cfg, cfg.mme.s1ap, t, 0);
    ep.counters = counters.clone();
    let bound = mobicore_sctp::bind_with_info(ep)
        .await
        .with_context(|| format!("opening the SCTP endpoint on {} ({t:?})", cfg.mme.s1ap))?;
    let listener = link::LinkListener::bind(&a.hosts).await.with_context(|| format!("opening --hosts {}", a.hosts))?;
    let hosts = listener.local_addr()?;
    let s11_addr = a.s11.unwrap_or(cfg.mme.s11_local);
    if s11_addr.ip().is_unspecified() {
        bail!("--s11 {s11_addr}: the hosts name its IP in their F-TEID, so give one");
    }
    let s11 = mobicore_gtp::udp::bind_udp(s11_addr).with_context(|| format!("opening the S11 address {s11_addr}"))?;
    let s11_addr = s11.local_addr()?;
    let s11 = frontend::S11Front { socket: s11, sgw: a.sgw.unwrap_or(cfg.mme.sgw) };
    // Under sk-ch the attach too is placed by the hosts' load reports
    // (Eq. 1), not on the ring's primary: with --placement attach it is
    // the one choice made for a UE.
    let balancer: Box<dyn mobicore_elastic::Balancer> = match a.scheme {
        Scheme::SkewedCh => Box::new(
            mobicore_elastic::balancer::SkewedCh::new(mobicore_elastic::ring::Ring::DEFAULT_VNODES, 2)
                .placing_attaches(),
        ),
        s => s.balancer(2),
    };
    // Hosts' queues miss the time a CPU quota throttles them: at 90% of
    // its budget a host is not viable (see `Estimation::cpu_ceiling`).
    let estimation = Estimation { cpu_ceiling: 0.9, ..Estimation::default() };
    // Procedures tracked at most: those placed away from their owner's
    // host, each until it is released (a UE held there connected stays).
    let profiles = Profiles::default().with_slos_scaled(a.slo_scale);
    let fe = Frontend::new(balancer, Loads::new(profiles, estimation), MAX_HELD);
    let router = mobicore_elastic::router::Router::new(fe).with_replicas(usize::from(a.replicas));
    let router = match a.placement {
        Placement::Attach => router,
        // Every UE held in a procedure or an S1 connection (connected UEs
        // stay held): beyond, a UE is not followed and may be placed anew.
        Placement::Procedure => router.placing_procedures(MAX_HELD),
    };
    let scaling = frontend_scaling(&a, hosts.clone(), s11_addr).await?;
    let admin = scaling.1.map_or("none".to_string(), |a| a.to_string());
    let mut metrics = None;
    if let Some(addr) = a.metrics {
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("metrics address {addr}"))?;
        metrics = Some(listener.local_addr()?);
        tokio::spawn(crate::allinone::serve_metrics(listener, vec![("mme", counters.clone())]));
    }
    println!(
        "mme-frontend ready: s1ap={} udp_port={} hosts={hosts} s11={s11_addr} scheme={} placement={:?} admin={admin} metrics={}",
        bound.handle.local,
        bound.udp_port.unwrap_or(0),
        a.scheme,
        a.placement,
        metrics.map_or("none".into(), |m| m.to_string())
    );
    // Not spawned: the balancer is not Send; this task is the front end.
    let (_tx, rx) = watch::channel(false);
    tokio::select! {
        r = frontend::run(cfg.mme.core.clone(), router, bound.handle, listener, s11, scaling.0, counters, rx) => r,
        _ = crate::procs::interrupted() => Ok(()),
    }
}

/// The front end's scaling from its arguments, and the operator API's address.
async fn frontend_scaling(
    a: &FrontendArgs,
    hosts: link::LinkAddr,
    s11: SocketAddr,
) -> Result<(frontend::Scaling, Option<SocketAddr>)> {
    let mut scaling = frontend::Scaling::none();
    scaling.drain_within = std::time::Duration::from_millis(a.drain_within_ms);
    if !a.host_args.is_empty() {
        let exe = std::env::current_exe().context("finding the mobicore binary to start hosts with")?;
        scaling.launcher = Some(scaling::Launcher::new(exe, a.host_args.clone(), hosts, s11));
    }
    if a.autoscale {
        if scaling.launcher.is_none() {
            bail!("--autoscale starts hosts: give mme-host's arguments after -- (--config, --store, ...)");
        }
        if a.min_hosts == 0 || a.min_hosts > a.max_hosts {
            bail!("--min-hosts {} --max-hosts {}: 1 <= min <= max", a.min_hosts, a.max_hosts);
        }
        let cfg = mobicore_elastic::controller::ControllerConfig {
            min_hosts: a.min_hosts,
            max_hosts: a.max_hosts,
            window: std::time::Duration::from_secs(a.scale_window_s.max(1)),
            spare_cpu: a.spare_cores,
            violations_above_cpu: 0.5,
            ..Default::default()
        };
        scaling.controller = Some(mobicore_elastic::controller::EpsController::new(cfg));
    }
    let mut admin = None;
    if let Some(addr) = a.admin {
        loopback_only(addr, "--admin", "the scaling API")?;
        let listener =
            tokio::net::TcpListener::bind(addr).await.with_context(|| format!("opening the admin address {addr}"))?;
        admin = Some(listener.local_addr()?);
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(scaling::serve_admin(listener, tx));
        scaling.requests = Some(rx);
    }
    Ok((scaling, admin))
}

/// A positive, finite factor (`--slo-scale`).
pub(crate) fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        _ => Err(format!("{s:?}: a positive number, e.g. 0.25")),
    }
}

/// An unauthenticated listener: only this machine's own processes may
/// use it, so it binds to loopback or not at all.
fn loopback_only(addr: SocketAddr, flag: &str, what: &str) -> Result<()> {
    if !addr.ip().is_loopback() {
        anyhow::bail!("{flag} {addr}: {what} has no authentication and binds to loopback only");
    }
    Ok(())
}

/// `mobicore mme-host`.
pub async fn run_host(a: HostArgs) -> Result<()> {
    if !(1..=254).contains(&a.id) {
        bail!("--id {} (1..=254)", a.id);
    }
    let cfg = config::load(a.config.as_deref())?;
    let core_cfg = host_core_config(&cfg, a.id, a.frontend_s11)?;
    // Before anything runs: every thread in the budget. Removed at return.
    let _cgroup = match a.cpu_max {
        Some(f) => Some(cgroup::HostCgroup::enter_self(a.id, f)?),
        None => None,
    };
    let store = match a.store.as_str() {
        "memory" => Store::memory(),
        "local" => Store::memory_with_feed(),
        url => {
            Store::connect_redis(url, &a.namespace).await.with_context(|| format!("connecting to the store {url}"))?
        }
    };
    let mut s6a_cfg = mobicore_diameter::S6aClientConfig::new(&cfg.mme.origin_host, &cfg.mme.origin_realm);
    s6a_cfg.peer = cfg.mme.hss;
    let s6a_counters = s6a_cfg.counters.clone();
    let s6a = mobicore_diameter::connect_s6a_link(s6a_cfg)
        .await
        .with_context(|| format!("connecting S6a to the HSS at {}", cfg.mme.hss))?;
    // Through the front end, over the link to it, under the front end's
    // S11 address; numbered from the whole 24-bit space (the front end
    // renumbers what it relays and keeps the host's number for 20 s); the
    // socket is for `--s11-direct`.
    let (s11_over_link, via) = host::S11OverLink::new();
    let s11_cfg = mobicore_gtp::client::S11ClientConfig {
        local: cfg.mme.s11_local,
        peer: a.frontend_s11,
        direct: a.s11_direct,
        create_session_direct: a.create_session_direct,
        ..Default::default()
    };
    let (s11_link, s11) =
        mobicore_gtp::client::s11_client_via(s11_cfg, Some(via)).await.context("opening the host's S11 socket")?;
    let mut core = mobicore_mme::Mme::new(core_cfg);
    let counters = core.counters().clone();
    let mode = match a.replication {
        ReplicationArg::Cold => Replication::Cold,
        ReplicationArg::Hot => Replication::Hot,
    };
    let stored = StoredUes::new(store.clone(), mode, &mut core);
    let replica = (a.store == "local")
        .then(|| replica::LocalReplica::new(a.id, store.clone(), a.replica_max_mib << 20, counters.clone()));
    let fe =
        link::connect(&a.frontend).await.with_context(|| format!("connecting to the front end at {}", a.frontend))?;
    let mut metrics = None;
    if let Some(addr) = a.metrics {
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("metrics address {addr}"))?;
        metrics = Some(listener.local_addr()?);
        let all = vec![
            ("mme", counters.clone()),
            ("s6a_client", s6a_counters),
            ("s11_client", s11.counters.clone()),
            ("store", store.counters().clone()),
        ];
        tokio::spawn(crate::allinone::serve_metrics(listener, all));
    }
    println!(
        "mme-host {} ready: s11={} store={} replication={:?} metrics={} cpu_max={}",
        a.id,
        s11.local_addr,
        if a.store.contains("://") { "redis" } else { a.store.as_str() },
        a.replication,
        metrics.map_or("none".into(), |m| m.to_string()),
        a.cpu_max.map_or("none".into(), |f| f.to_string())
    );
    let (tx, rx) = watch::channel(false);
    let load =
        host::LoadReporting { every: std::time::Duration::from_millis(a.load_every_ms.max(1)), budget: a.cpu_max };
    let kinds: Vec<_> = std::iter::repeat_n(None, a.nf_instances)
        .chain(a.nf.iter().flat_map(|k| k.0.iter().copied().map(Some)))
        .collect();
    let nf = if !kinds.is_empty() {
        let mut args = vec!["mme-nf".to_string(), "--id".into(), a.id.to_string()];
        args.extend(["--frontend-s11".into(), a.frontend_s11.to_string()]);
        if let Some(c) = &a.config {
            args.extend(["--config".into(), c.display().to_string()]);
        }
        let exe = std::env::current_exe().context("finding the mobicore binary to start NF instances with")?;
        let launch =
            nf::NfLaunch { exe, args, stall_first: a.nf_stall_first, stall_mbr: a.nf_stall_mbr, slow_ms: a.nf_slow_ms };
        let host_cgroup = _cgroup.as_ref().map(|c| c.dir().to_path_buf());
        let slos = Profiles::default().with_slos_scaled(a.slo_scale);
        // Fixed priorities are not bumped.
        let bumps = a.nf_priority.is_none().then(|| slos.clone());
        let p = a.nf_priority.unwrap_or_default().over(nf::priorities(&slos));
        let cg = host_cgroup.as_deref();
        let priorities = nf::Priorities { p, bumps };
        Some(nf::NfPool::start(a.id, &kinds, a.nf_pool, a.nf_max, launch, counters.clone(), cg, priorities).await?)
    } else {
        None
    };
    let task =
        tokio::spawn(host::run(a.id, core, stored, replica, fe, s6a, s11_link, s11_over_link, load, counters, nf, rx));
    tokio::select! {
        r = task => r?,
        _ = crate::procs::interrupted() => {
            let _ = tx.send(true);
            Ok(())
        }
    }
}
