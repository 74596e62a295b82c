//! Starting network functions: all of them in this process on loopback
//! (`demo`, `bench`), or one per process (`mobicore mme|hss|spgwc|upf`).

use crate::cli::{RanArgs, SctpTransport};
use crate::config::{self, Config};
use anyhow::{bail, Context, Result};
use mobicore_common::counters::Counters;
use mobicore_common::sctp_api::SctpHandle;
use mobicore_hss::{SubscriberStore, SubscriberTemplate};
use mobicore_netns::Topology;
use mobicore_sctp::{EndpointConfig, Transport};
use mobicore_upf::config::{DatapathKind, UpfRole};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The SCTP transport actually used for `choice`.
pub fn transport(choice: SctpTransport, udp_port: u16) -> Transport {
    match choice {
        SctpTransport::Auto => match Transport::auto() {
            Transport::Udp { .. } => Transport::Udp { port: udp_port },
            t => t,
        },
        SctpTransport::Raw => Transport::RawIp,
        SctpTransport::Udp => Transport::Udp { port: udp_port },
        SctpTransport::Kernel => Transport::Kernel,
    }
}

/// Raw IP sockets need root; say so before anything starts.
/// What every all-in-one run (demo, benches) starts from: the config
/// (`path` or the defaults), the S1-MME transport (`sctp` or the config's),
/// checked for the privileges it needs, and the RAN workload of `ues` UEs
/// on `enbs` eNBs towards the MME, detaching at the end.
pub fn run_setup(
    path: Option<&std::path::Path>,
    sctp: Option<SctpTransport>,
    ues: u64,
    enbs: u32,
) -> Result<(Config, Transport, mobicore_ran::RanConfig)> {
    let cfg = config::load(path)?;
    let t = transport(sctp.unwrap_or(cfg.sctp.transport), cfg.sctp.udp_port);
    check_privileges(t)?;
    let mut ran = cfg.ran.core.clone();
    ran.mme = cfg.mme.s1ap;
    ran.ues = ues;
    ran.enbs = enbs;
    ran.detach = true;
    Ok((cfg, t, ran))
}

pub fn check_privileges(t: Transport) -> Result<()> {
    if t == Transport::RawIp && unsafe { libc::geteuid() } != 0 {
        bail!("SCTP over raw IP needs root (CAP_NET_RAW): run as root, or use --sctp udp");
    }
    Ok(())
}

/// The configuration of an SCTP endpoint with the `[sctp]` settings.
pub fn endpoint_config(cfg: &Config, local: SocketAddr, t: Transport, remote_udp: u16) -> EndpointConfig {
    let mut ep = EndpointConfig::new(local, t);
    ep.heartbeat_interval = Duration::from_secs(cfg.sctp.heartbeat_interval_secs);
    ep.outbound_streams = cfg.sctp.outbound_streams;
    ep.udp_remote_port = remote_udp;
    ep.receive_window = cfg.sctp.receive_window_bytes;
    ep.max_associations = cfg.sctp.max_associations;
    ep.max_queued_replies = cfg.sctp.max_queued_replies;
    ep
}

/// An SCTP endpoint with the `[sctp]` settings.
pub async fn sctp_endpoint(cfg: &Config, local: SocketAddr, t: Transport, remote_udp: u16) -> Result<SctpHandle> {
    let ep = endpoint_config(cfg, local, t, remote_udp);
    mobicore_sctp::bind(ep).await.with_context(|| format!("opening the SCTP endpoint on {local} ({t:?})"))
}

/// Every core network function running in this process.
pub struct AllInOne {
    /// Which user-plane data path runs.
    pub datapath: &'static str,
    /// Whether that includes the XDP fast path (loaded and attached).
    pub xdp: bool,
    /// The MME's S1-MME address as bound (the config's port 0: the one chosen).
    pub s1ap: SocketAddr,
    /// The MME's admin endpoint, if `[mme] admin` is set.
    pub mme_admin: Option<SocketAddr>,
    pub hss: SocketAddr,
    pub sgw_s11: SocketAddr,
    pub pfcp: (SocketAddr, SocketAddr),
    /// With an edge topology: the controller between the MME and the
    /// S/P-GW-C, programming the steering switch in `steer`.
    pub edge: Option<EdgeControl>,
    pub counters: Vec<(&'static str, Counters)>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<(&'static str, JoinHandle<Result<()>>)>,
}

/// How to reach the controller of an edge run.
#[derive(Debug, Clone)]
pub struct EdgeControl {
    /// REST base, e.g. `127.0.0.1:41234` (`/v1/relocations`).
    pub rest: SocketAddr,
    pub token: String,
    /// The relay's S11 address (the MME's S-GW) and the switch's PFCP.
    pub s11: SocketAddr,
    pub switch_pfcp: SocketAddr,
}

/// The sites of an edge topology as the controller starts them: site `i`
/// (0-based) on loopback 127.(80+i).h.l (S/P-GW-C) and the next address
/// (UPF), where h.l is twice this process's id (pids below 32,768 here):
/// two runs at once (two demo tests) never share an anchor's addresses.
/// Its data path in the site's namespace, pool 10.(61+i).0.0/16.
/// `program`: the `mobicore` executable (this one when `None`).
pub fn edge_sites(topo: &Topology, program: Option<&std::path::Path>) -> Vec<mobicore_controller::SiteConfig> {
    let id = (std::process::id() % 32_768) * 2;
    topo.sites
        .iter()
        .enumerate()
        .map(|(i, s)| mobicore_controller::SiteConfig {
            name: s.name.clone(),
            program: program.map(Into::into),
            loopback: std::net::Ipv4Addr::new(127, 80 + i as u8, (id >> 8) as u8, id as u8),
            netns: Some(s.ns.clone()),
            s1u_addr: s.s1u,
            access_interface: mobicore_netns::topology::S1U_IF.into(),
            core_interface: mobicore_netns::topology::SGI_IF.into(),
            ue_pool: std::net::Ipv4Addr::new(10, 61 + i as u8, 0, 0),
            ue_pool_prefix: 16,
            ..Default::default()
        })
        .collect()
}

/// What the core should answer on, for the all-in-one run: the MME on its
/// S1-MME port, everything else on ephemeral loopback ports so that a demo
/// never collides with a standalone NF.
pub async fn start(cfg: &Config, store: SubscriberStore, t: Transport) -> Result<AllInOne> {
    start_with(cfg, store, t, None).await
}

/// Like [`start`]; with a topology, the UPF's data path runs in its `core`
/// namespace (S1-U towards `ran`, SGi towards `dn`) and the S/P-GW-C hands
/// out its S1-U address.
pub async fn start_with(
    cfg: &Config,
    store: SubscriberStore,
    t: Transport,
    topo: Option<&Topology>,
) -> Result<AllInOne> {
    start_edge(cfg, store, t, topo, None).await
}

/// Like [`start_with`]; with an edge topology (`topo.steer`), also the
/// steering switch (a UPF node in the steering role, XDP in `steer`) and
/// the controller on S11 between the MME and the S/P-GW-C, which starts
/// anchors at the topology's sites on demand with `program`.
pub async fn start_edge(
    cfg: &Config,
    store: SubscriberStore,
    t: Transport,
    topo: Option<&Topology>,
    program: Option<&std::path::Path>,
) -> Result<AllInOne> {
    start_edge_as(cfg, store, t, topo, program, UpfRole::Steering).await
}

/// [`start_edge`] with the node in `steer` in `role`: the steering switch,
/// or the MEC router ([`UpfRole::Mec`]: the controller keeps the traffic
/// rules of router `mec1`, the slice on `steer`'s S1-U link, whose edge
/// applications are reached through the link to the first site).
pub async fn start_edge_as(
    cfg: &Config,
    store: SubscriberStore,
    t: Transport,
    topo: Option<&Topology>,
    program: Option<&std::path::Path>,
    role: UpfRole,
) -> Result<AllInOne> {
    let (shutdown, rx) = watch::channel(false);
    let mut tasks: Vec<(&'static str, JoinHandle<Result<()>>)> = Vec::new();
    let mut counters = Vec::new();

    let mut hss_cfg = cfg.hss.core.clone();
    hss_cfg.listen = "127.0.0.1:0".parse()?;
    let hss_counters = Counters::new();
    let (hss, serve) =
        mobicore_hss::bind(hss_cfg, store, hss_counters.clone(), rx.clone()).await.context("starting the HSS")?;
    tasks.push(("hss", tokio::spawn(async move { serve.await.map_err(Into::into) })));
    counters.push(("hss", hss_counters));

    let mut upf_cfg = cfg.upf.clone();
    upf_cfg.pfcp = "127.0.0.1:0".parse()?;
    if let Some(topo) = topo {
        if upf_cfg.datapath == DatapathKind::None {
            upf_cfg.datapath = DatapathKind::Auto;
        }
        upf_cfg.access_netns = Some(topo.core.clone());
        upf_cfg.core_netns = Some(topo.core.clone());
        upf_cfg.access_interface = Some(mobicore_netns::topology::S1U_IF.into());
        upf_cfg.core_interface = Some(mobicore_netns::topology::SGI_IF.into());
        upf_cfg.s1u_addr = topo.addr.core_s1u;
        upf_cfg.ue_pools = vec![format!("{}/{}", topo.addr.ue_pool, topo.addr.ue_pool_prefix)];
    }
    let upf = mobicore_upf::Upf::bind(upf_cfg.clone()).await.context("starting the UPF's PFCP node")?;
    let upf_pfcp = upf.pfcp_addr();
    let xdp = upf.xdp_loaded();
    let datapath = match (upf_cfg.datapath, xdp) {
        (DatapathKind::None, _) => "none (PFCP only)",
        (_, true) => "XDP fast path + user-space slow path",
        (_, false) => "user space",
    };
    counters.push(("upf", upf.counters.clone()));
    let r = rx.clone();
    tasks.push(("upf", tokio::spawn(async move { upf.run(r).await.map_err(Into::into) })));

    let mut sgw_cfg = cfg.spgwc.clone();
    sgw_cfg.s11 = "127.0.0.1:0".parse()?;
    sgw_cfg.pfcp = "127.0.0.1:0".parse()?;
    let mut peer = sgw_cfg.upfs.first().cloned().unwrap_or_default();
    peer.pfcp = upf_pfcp;
    peer.s1u_addr = upf_cfg.s1u_addr;
    sgw_cfg.upfs = vec![peer];
    let sgw = mobicore_spgwc::bind(sgw_cfg).await.context("starting the S/P-GW-C")?;
    let (sgw_s11, sgw_pfcp) = (sgw.s11_addr, sgw.pfcp_addr);
    let sgw_counters = sgw.counters.clone();
    counters.push(("spgwc", sgw.counters.clone()));
    let r = rx.clone();
    tasks.push(("spgwc", tokio::spawn(async move { sgw.run(r).await.map_err(Into::into) })));
    // Ready once the S/P-GW-C has its UPF: a Create Session before the
    // PFCP association is refused (no UPF, cause 73), so the first
    // attaches of a loaded machine would fail.
    let associated = async {
        while sgw_counters.value("pfcp_associations_set_up") == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), associated)
        .await
        .context("the S/P-GW-C did not associate with the UPF within 30 s")?;

    let mut edge = None;
    let mut mme_s11_peer = sgw_s11;
    if let Some(topo) = topo.filter(|t| t.steer.is_some()) {
        let (control, c) = start_controller(cfg, topo, sgw_s11, program, role, &rx, &mut tasks).await?;
        counters.extend(c);
        mme_s11_peer = control.s11;
        edge = Some(control);
    }
    let mme = start_mme(cfg, hss, mme_s11_peer, t, rx.clone()).await?;
    counters.extend(mme.counters);
    tasks.push(("mme", mme.task));

    Ok(AllInOne {
        datapath,
        xdp,
        s1ap: mme.s1ap,
        mme_admin: mme.admin,
        hss,
        sgw_s11,
        pfcp: (sgw_pfcp, upf_pfcp),
        edge,
        counters,
        shutdown,
        tasks,
    })
}

/// The steering switch in `topo.steer` and the controller that programs
/// it, relaying S11 to `sgw`.
async fn start_controller(
    cfg: &Config,
    topo: &Topology,
    sgw: SocketAddr,
    program: Option<&std::path::Path>,
    role: UpfRole,
    rx: &watch::Receiver<bool>,
    tasks: &mut Vec<(&'static str, JoinHandle<Result<()>>)>,
) -> Result<(EdgeControl, Vec<(&'static str, Counters)>)> {
    let steer = topo.steer.clone().expect("an edge topology");
    let mut sw = cfg.upf.clone();
    sw.pfcp = "127.0.0.1:0".parse()?;
    sw.role = role;
    sw.datapath = DatapathKind::Xdp;
    sw.access_netns = Some(steer.clone());
    sw.core_netns = Some(steer);
    sw.access_interface = Some(mobicore_netns::topology::S1U_IF.into());
    sw.core_interface = Some("core".into());
    sw.steer_interfaces = topo.sites.iter().map(|s| s.steer_if.clone()).collect();
    sw.s1u_addr = topo.addr.steer_ran;
    sw.ue_pools = Vec::new();
    let switch =
        mobicore_upf::Upf::bind(sw).await.with_context(|| format!("starting the {role:?} node (XDP in steer)"))?;
    let switch_pfcp = switch.pfcp_addr();
    let switch_counters = switch.counters.clone();
    let r = rx.clone();
    tasks.push(("steering", tokio::spawn(async move { switch.run(r).await.map_err(Into::into) })));

    let mut cc = cfg.controller.clone();
    cc.s11 = "127.0.0.1:0".parse()?;
    cc.sgw = sgw;
    cc.anchor_bind = "127.0.0.1:0".parse()?;
    cc.rest = "127.0.0.1:0".parse()?;
    cc.store = Default::default(); // in memory: the demo keeps nothing
    let node = mobicore_controller::config::PfcpNodeConfig {
        pfcp: switch_pfcp,
        local: "127.0.0.1:0".parse()?,
        node_id: std::net::Ipv4Addr::LOCALHOST,
        ..Default::default()
    };
    match role {
        UpfRole::Mec => {
            cc.mec = Some(node);
            cc.mec_routers = vec![mobicore_controller::config::MecRouterConfig {
                name: "mec1".into(),
                interface: mobicore_netns::topology::S1U_IF.into(),
                vlan: 0,
                app_interface: topo.sites.first().map(|s| s.steer_if.clone()).unwrap_or_default(),
            }];
        }
        _ => cc.steering = Some(node),
    }
    cc.sites = edge_sites(topo, program);
    let c = mobicore_controller::bind(cc).await.context("starting the controller")?;
    let control = EdgeControl { rest: c.rest_addr, token: c.token.clone(), s11: c.s11_addr, switch_pfcp };
    let node_name = if role == UpfRole::Mec { "mec" } else { "steering" };
    let counters = vec![("controller", c.counters.clone()), (node_name, switch_counters)];
    let r = rx.clone();
    tasks.push(("controller", tokio::spawn(async move { c.run(r).await.map_err(Into::into) })));
    Ok((control, counters))
}

/// The MME with its S6a and S11 clients, its SCTP endpoint and, when
/// configured, its admin endpoint.
async fn start_mme(
    cfg: &Config,
    hss: SocketAddr,
    sgw: SocketAddr,
    t: Transport,
    shutdown: watch::Receiver<bool>,
) -> Result<StartedMme> {
    let mut s6a_cfg = mobicore_diameter::S6aClientConfig::new(&cfg.mme.origin_host, &cfg.mme.origin_realm);
    s6a_cfg.peer = hss;
    let s6a_counters = s6a_cfg.counters.clone();
    let s6a = mobicore_diameter::connect_s6a_link(s6a_cfg)
        .await
        .with_context(|| format!("connecting S6a to the HSS at {hss}"))?;
    let (link, s11) = mobicore_gtp::client::s11_client_link(mobicore_gtp::client::S11ClientConfig {
        local: cfg.mme.s11_local,
        peer: sgw,
        ..Default::default()
    })
    .await
    .context("opening the MME's S11 socket")?;
    let mut core_cfg = cfg.mme.core.clone();
    if let std::net::IpAddr::V4(ip) = s11.local_addr.ip() {
        core_cfg.s11_local_ip = ip;
    }
    if let (None, std::net::IpAddr::V4(ip)) = (core_cfg.pgw, sgw.ip()) {
        core_cfg.pgw = Some(ip); // no PGW configured: the combined S/P-GW-C's own address
    }
    let core = mobicore_mme::Mme::new(core_cfg);
    let mme_counters = core.counters().clone();
    // The S1-MME endpoint's counters (sctp_*) are exported with the MME's.
    let mut ep = endpoint_config(cfg, cfg.mme.s1ap, t, 0);
    ep.counters = mme_counters.clone();
    let sctp = mobicore_sctp::bind(ep)
        .await
        .with_context(|| format!("opening the SCTP endpoint on {} ({t:?})", cfg.mme.s1ap))?;
    let s1ap = sctp.local;
    let (operator, operator_rx) = tokio::sync::mpsc::channel(64);
    let mut admin = None;
    if let (Some(addr), Some(token)) = (cfg.mme.admin, cfg.mme.admin_token.as_deref()) {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("opening the MME's admin endpoint on {addr} ([mme] admin)"))?;
        admin = Some(listener.local_addr()?);
        let router = mobicore_mme::admin::router(operator.clone(), token, mme_counters.clone());
        let stop = shutdown.clone();
        tokio::spawn(mobicore_mme::admin::serve(listener, router, stop));
    }
    drop(operator); // the admin endpoint holds the senders it needs
    let task = tokio::spawn(async move {
        mobicore_mme::run(core, sctp, s6a, link, operator_rx, shutdown).await.map(|_| ()).map_err(Into::into)
    });
    let counters = vec![("mme", mme_counters), ("s6a_client", s6a_counters), ("s11_client", s11.counters)];
    Ok(StartedMme { task, counters, admin, s1ap })
}

struct StartedMme {
    task: JoinHandle<Result<()>>,
    /// The S1-MME address bound (port 0 in the config: the one chosen).
    s1ap: SocketAddr,
    counters: Vec<(&'static str, Counters)>,
    /// Where the admin endpoint listens, if it runs.
    admin: Option<SocketAddr>,
}

impl AllInOne {
    /// The ports a capture of this core's signalling decodes by
    /// ([`crate::capture::analyze`]): S6a, S11 (and the controller's S11
    /// relay), PFCP (and the steering switch's).
    pub fn capture_ports(&self) -> crate::capture::Ports {
        let mut p = crate::capture::Ports {
            diameter: vec![self.hss.port()],
            gtpv2: vec![self.sgw_s11.port()],
            pfcp: vec![self.pfcp.0.port(), self.pfcp.1.port()],
            sctp_udp: Vec::new(),
        };
        if let Some(e) = &self.edge {
            p.gtpv2.push(e.s11.port());
            p.pfcp.push(e.switch_pfcp.port());
        }
        p
    }

    /// Stops every task and waits for them (a task stuck for 5 s is aborted).
    pub async fn stop(mut self) -> Result<()> {
        let _ = self.shutdown.send(true);
        let mut errors = Vec::new();
        for (name, mut task) in std::mem::take(&mut self.tasks) {
            match tokio::time::timeout(Duration::from_secs(5), &mut task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => errors.push(format!("{name}: {e:#}")),
                Ok(Err(e)) => errors.push(format!("{name}: {e}")),
                Err(_) => {
                    task.abort();
                    errors.push(format!("{name}: did not stop within 5 s"));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            bail!("shutdown: {}", errors.join("; "))
        }
    }
}

/// Dropped without [`AllInOne::stop`] (a caller that failed after starting
/// it, as a bench's start tried again): its tasks are told to stop and
/// aborted, so that nothing of it keeps running or holds its ports.
impl Drop for AllInOne {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for (_, task) in &self.tasks {
            task.abort();
        }
    }
}

/// The subscription every subscriber of the RAN's plan gets.
pub fn subscriber_template(plan: &mobicore_ran::SubscriberPlan) -> SubscriberTemplate {
    SubscriberTemplate { amf: plan.amf, sqn: plan.sqn, ..Default::default() }
}

/// Provisions the subscribers of the RAN's plan for `ues` UEs.
pub fn provision(store: &SubscriberStore, plan: &mobicore_ran::SubscriberPlan, ues: u64) -> Result<()> {
    let first = mobicore_ran::imsi_for(0, plan);
    let template = subscriber_template(plan);
    store.import_range(&first, ues, plan.k, plan.opc, &template).context("provisioning subscribers")?;
    Ok(())
}

/// Runs the emulated RAN (its own SCTP endpoint) and reports progress.
pub async fn run_ran_workload(
    cfg: &Config,
    ran: mobicore_ran::RanConfig,
    t: Transport,
    progress: Option<tokio::sync::mpsc::UnboundedSender<mobicore_ran::Progress>>,
) -> Result<mobicore_ran::RanReport> {
    Ok(run_ran_workload_with(cfg, ran, t, progress, |_| async {}).await?.0)
}

/// Like [`run_ran_workload`], awaiting `while_attached` with the attached
/// UEs' tunnels between the attach and the detach phases.
pub async fn run_ran_workload_with<F, Fut>(
    cfg: &Config,
    ran: mobicore_ran::RanConfig,
    t: Transport,
    progress: Option<tokio::sync::mpsc::UnboundedSender<mobicore_ran::Progress>>,
    while_attached: F,
) -> Result<(mobicore_ran::RanReport, Fut::Output)>
where
    F: FnOnce(Vec<mobicore_ran::AttachedUe>) -> Fut,
    Fut: std::future::Future,
{
    let sctp = ran_endpoint(cfg, t).await?;
    mobicore_ran::run_with(ran, sctp, progress, while_attached).await.context("running the emulated RAN")
}

/// The emulated RAN's SCTP endpoint towards the MME's transport `t`
/// (over UDP: its own ephemeral port, the MME's as the remote one).
async fn ran_endpoint(cfg: &Config, t: Transport) -> Result<SctpHandle> {
    let (ran_t, remote_udp) = match t {
        Transport::Udp { port } => (Transport::Udp { port: 0 }, port),
        t => (t, 0),
    };
    let mut ep = endpoint_config(cfg, cfg.ran.local, ran_t, remote_udp);
    ep.counters = ran_sctp_counters();
    mobicore_sctp::bind(ep).await.with_context(|| format!("opening the SCTP endpoint on {} ({t:?})", cfg.ran.local))
}

/// The counters of the emulated RAN's SCTP endpoints in this process
/// (`sctp_send_refused`, `sctp_send_failed`, ...), for its reports.
pub fn ran_sctp_counters() -> Counters {
    static C: std::sync::OnceLock<Counters> = std::sync::OnceLock::new();
    C.get_or_init(Counters::new).clone()
}

/// The emulated RAN (its own SCTP endpoint) connected and set up, to be
/// driven phase by phase ([`mobicore_ran::Ran`]).
pub async fn ran_session(
    cfg: &Config,
    ran: mobicore_ran::RanConfig,
    t: Transport,
    progress: Option<tokio::sync::mpsc::UnboundedSender<mobicore_ran::Progress>>,
) -> Result<mobicore_ran::Ran> {
    let sctp = ran_endpoint(cfg, t).await?;
    mobicore_ran::Ran::connect(ran, sctp, progress).await.context("connecting the emulated RAN")
}

/// `mobicore mme|hss|spgwc|upf`: one network function in this process.
pub async fn run_nf(nf: &str, args: crate::cli::NfArgs) -> Result<()> {
    let cfg = config::load(args.config.as_deref())?;
    let (tx, rx) = watch::channel(false);
    let mut counters: Vec<(&'static str, Counters)> = Vec::new();
    let task: JoinHandle<Result<()>> = match nf {
        "hss" => {
            let store = match &cfg.hss.store {
                Some(p) => SubscriberStore::open(p),
                None => SubscriberStore::open_default(),
            }
            .context("opening the subscriber store (set [hss] store or MOBICORE_DATA_DIR)")?;
            let n = store.len();
            let c = Counters::new();
            counters.push(("hss", c.clone()));
            let (addr, serve) = mobicore_hss::bind(cfg.hss.core.clone(), store, c, rx).await?;
            eprintln!("hss: S6a on {addr} ({n} subscribers)");
            tokio::spawn(async move { serve.await.map_err(Into::into) })
        }
        "spgwc" => {
            let s = mobicore_spgwc::bind(cfg.spgwc.clone()).await?;
            eprintln!("spgwc: S11 on {}, PFCP on {}", s.s11_addr, s.pfcp_addr);
            counters.push(("spgwc", s.counters.clone()));
            tokio::spawn(async move { s.run(rx).await.map_err(Into::into) })
        }
        "upf" => {
            let u = mobicore_upf::Upf::bind(cfg.upf.clone()).await?;
            eprintln!(
                "upf: PFCP on {} (data path {:?}{})",
                u.pfcp_addr(),
                cfg.upf.datapath,
                if u.xdp_loaded() { ", XDP loaded" } else { "" }
            );
            counters.push(("upf", u.counters.clone()));
            tokio::spawn(async move { u.run(rx).await.map_err(Into::into) })
        }
        "controller" => {
            let c = mobicore_controller::bind(cfg.controller.clone()).await?;
            eprintln!(
                "controller: S11 relay on {} to the S/P-GW-C at {}, anchors via {}, REST on http://{}/v1 (token {})",
                c.s11_addr,
                cfg.controller.sgw,
                c.anchor_addr,
                c.rest_addr,
                if cfg.controller.token.is_some() { "from the config".to_string() } else { c.token.clone() }
            );
            counters.push(("controller", c.counters.clone()));
            tokio::spawn(async move { c.run(rx).await.map_err(Into::into) })
        }
        "mme" => {
            let t = transport(cfg.sctp.transport, cfg.sctp.udp_port);
            check_privileges(t)?;
            let mme = start_mme(&cfg, cfg.mme.hss, cfg.mme.sgw, t, rx).await?;
            counters.extend(mme.counters);
            eprintln!("mme: S1-MME on {} ({t:?})", mme.s1ap);
            if let Some(a) = mme.admin {
                eprintln!("mme: admin endpoint on http://{a}/v1 (bearer token from [mme] admin_token)");
            }
            mme.task
        }
        other => bail!("unknown network function {other}"),
    };
    if let Some(addr) = args.metrics {
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("metrics address {addr}"))?;
        eprintln!("{nf}: Prometheus metrics on http://{addr}/metrics");
        tokio::spawn(serve_metrics(listener, counters));
    }
    tokio::select! {
        r = task => return r?,
        _ = crate::procs::interrupted() => {}
    }
    let _ = tx.send(true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

/// Answers every HTTP request with the counters in Prometheus text format.
pub(crate) async fn serve_metrics(listener: tokio::net::TcpListener, counters: Vec<(&'static str, Counters)>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    while let Ok((mut conn, _)) = listener.accept().await {
        let body: String = counters.iter().map(|(nf, c)| c.prometheus(nf)).collect();
        tokio::spawn(async move {
            let mut req = [0u8; 1024];
            let _ = conn.read(&mut req).await;
            let head = format!(
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
        });
    }
}

/// `mobicore ran`: the emulated RAN against a running MME.
pub async fn run_ran(a: RanArgs) -> Result<()> {
    let cfg = config::load(a.config.as_deref())?;
    let mut ran = cfg.ran.core.clone();
    ran.mme = cfg.mme.s1ap;
    if let Some(n) = a.ues {
        ran.ues = n;
    }
    if let Some(n) = a.enbs {
        ran.enbs = n;
    }
    if a.rate.is_some() {
        ran.rate = a.rate;
    }
    a.moving.apply(&mut ran);
    let t = transport(cfg.sctp.transport, cfg.sctp.udp_port);
    check_privileges(t)?;
    let report = run_ran_workload(&cfg, ran, t, None).await?;
    crate::demo::print_report(&report);
    if let Some(path) = a.json {
        crate::demo::write_json(&path, &crate::demo::summary_json(&report))?;
    }
    Ok(())
}
