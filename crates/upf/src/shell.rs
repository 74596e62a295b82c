//! The tokio shell: one task owns the PFCP socket and drives [`UpfCore`].

use crate::afxdp::XskSocket;
use crate::config::{DatapathKind, UpfConfig};
use crate::dataplane::handover::Handover;
use crate::dataplane::io::{DatapathIo, IoConfig};
use crate::dataplane::{DatapathConfig, UserspacePlane};
use crate::node::UpfCore;
use crate::rules::{ForwardingPlane, MemoryPlane, PlaneError, PlaneReport, SessionRules};
use mobicore_common::counters::Counters;
use std::net::SocketAddr;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;
use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::sync::{mpsc, oneshot, watch};

#[derive(Debug, thiserror::Error)]
pub enum UpfError {
    #[error("PFCP socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("user-space data path: {0} (it needs root for the TUN device and port 2152 free on the S1-U address)")]
    Datapath(std::io::Error),
    #[error("XDP data path: {0}")]
    Xdp(String),
}

/// The PFCP node's view of the installed rules ([`MemoryPlane`], always)
/// mirrored into the data path: the user-space one (the whole data path,
/// or the slow path behind XDP) and the XDP fast path when loaded.
struct Tee {
    memory: MemoryPlane,
    user: UserspacePlane,
    xdp: Option<Box<dyn ForwardingPlane>>,
    /// BUFF -> FORW: the fast path switches after the release is sent.
    handover: Handover,
}

impl Tee {
    /// The fast path first, then the slow path, which releases buffered
    /// packets and queues the End Markers (sent after a grace period); a
    /// FAR that buffered switches in the fast path once the release is
    /// sent ([`Handover`]).
    fn update_planes(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        match self.xdp.as_mut() {
            Some(x) => self.handover.update(&mut self.user, x.as_mut(), up_seid, rules),
            None => self.user.update(up_seid, rules),
        }
    }
}

impl ForwardingPlane for Tee {
    fn install(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.install_shared(up_seid, &Arc::new(rules.clone()))
    }
    /// All planes or none: a plane that refuses undoes the others, so a
    /// refused establishment leaves nothing installed anywhere.
    fn install_shared(&mut self, up_seid: u64, rules: &Arc<SessionRules>) -> Result<(), PlaneError> {
        self.user.install(up_seid, rules)?;
        if let Some(x) = self.xdp.as_mut() {
            if let Err(e) = x.install(up_seid, rules) {
                let _ = self.user.remove(up_seid);
                return Err(e);
            }
        }
        self.memory.install_shared(up_seid, rules).inspect_err(|_| {
            let _ = self.user.remove(up_seid);
            if let Some(x) = self.xdp.as_mut() {
                let _ = x.remove(up_seid);
            }
        })
    }
    fn update_shared(&mut self, up_seid: u64, rules: &Arc<SessionRules>) -> Result<(), PlaneError> {
        self.update_planes(up_seid, rules)?;
        self.memory.update_shared(up_seid, rules)
    }
    fn update(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.update_planes(up_seid, rules)?;
        self.memory.update(up_seid, rules)
    }
    /// Diversions (steering role) live in the fast path alone.
    fn install_diversion(&mut self, up_seid: u64, d: &crate::rules::Diversion) -> Result<(), PlaneError> {
        let x = self.xdp.as_mut().ok_or(PlaneError::SteeringUnsupported)?;
        x.install_diversion(up_seid, d)?;
        self.memory.install_diversion(up_seid, d)
    }
    fn remove_diversion(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        if let Some(x) = self.xdp.as_mut() {
            let _ = x.remove_diversion(up_seid);
        }
        self.memory.remove_diversion(up_seid)
    }
    /// MEC rules and UE tunnels (MEC role) live in the fast path alone.
    fn install_mec(&mut self, up_seid: u64, s: &crate::rules::MecSession) -> Result<(), PlaneError> {
        let x = self.xdp.as_mut().ok_or(PlaneError::MecUnsupported)?;
        x.install_mec(up_seid, s)?;
        self.memory.install_mec(up_seid, s)
    }
    fn remove_mec(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        if let Some(x) = self.xdp.as_mut() {
            let _ = x.remove_mec(up_seid);
        }
        self.memory.remove_mec(up_seid)
    }
    fn remove(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        self.handover.remove(up_seid);
        if let Some(x) = self.xdp.as_mut() {
            let _ = x.remove(up_seid);
        }
        let _ = self.user.remove(up_seid);
        self.memory.remove(up_seid)
    }
    fn poll_report(&mut self) -> Option<PlaneReport> {
        // Woken (also) when the slow path has sent a release.
        if let Some(x) = self.xdp.as_mut() {
            if self.handover.pending() > 0 {
                self.handover.poll(&self.user, x.as_mut());
            }
        }
        self.user.poll_report()
    }
    /// A URR's counts: the slow path's plus the fast path's (each counts
    /// only the packets it forwarded).
    fn usage(&self, up_seid: u64, urr_id: u32) -> Option<crate::urr::UsageCounts> {
        let fast = self.xdp.as_ref().and_then(|x| x.usage(up_seid, urr_id));
        match (self.user.usage(up_seid, urr_id), fast) {
            (Some(a), Some(b)) => Some(a.saturating_sum(b)),
            (a, b) => a.or(b),
        }
    }
    fn set_neighbours(&mut self, neighbours: &[crate::rules::Neighbour]) {
        if let Some(x) = self.xdp.as_mut() {
            x.set_neighbours(neighbours);
        }
    }
    fn poll_maintenance(&self) -> Option<std::time::Instant> {
        self.xdp.as_ref().and_then(|x| x.poll_maintenance())
    }
    fn maintain(&mut self, now: std::time::Instant) {
        if let Some(x) = self.xdp.as_mut() {
            x.maintain(now);
        }
    }
}

/// A running data path: the user-space plane (always: whole path or slow
/// path), its I/O, and the XDP fast path if loaded.
struct Datapath {
    user: UserspacePlane,
    io: DatapathIo,
    xdp: Option<Box<dyn ForwardingPlane>>,
}

/// The fast path, and the AF_XDP sockets for buffered downlink packets or
/// why there are none.
/// AF_XDP sockets for buffered downlink and the program's counts of what
/// it hands them ([`crate::xdp::order`]).
type BufferSockets = (Vec<XskSocket>, crate::xdp::order::SlowOrder);
type OpenedXdp = (Box<dyn ForwardingPlane>, Result<BufferSockets, String>);

/// Loads the XDP fast path and attaches it to the configured interfaces,
/// from inside the access namespace (interface names and netlink are per
/// namespace; the program and maps are not).
/// Also the AF_XDP sockets for buffered downlink packets, or why there are none.
fn open_xdp(cfg: &UpfConfig) -> Result<OpenedXdp, String> {
    let c = cfg.clone();
    crate::dataplane::io::in_netns(cfg.access_netns.as_deref(), move || {
        open_xdp_here(&c).map_err(std::io::Error::other)
    })
    .map_err(|e| e.to_string())
}

/// AF_XDP copy-mode sockets on every receive queue of the core interface,
/// registered in the program (crate::afxdp), for the downlink packets of
/// buffering sessions; Err: they arrive on the TUN device instead.
fn open_buffer_sockets(x: &mut crate::xdp::XdpPlane, cfg: &UpfConfig) -> Result<BufferSockets, String> {
    if !cfg.buffer_afxdp {
        return Err("buffer_afxdp = false".into());
    }
    let core = cfg.core_interface.as_deref().ok_or("core_interface is not set")?;
    crate::afxdp::open_for_plane(x, core, crate::afxdp::DEFAULT_FRAMES)
}

fn open_xdp_here(cfg: &UpfConfig) -> Result<OpenedXdp, String> {
    crate::xdp::xdp_available()?;
    let access = cfg.access_interface.as_deref().ok_or("access_interface is not set")?;
    let steering = cfg.role == crate::config::UpfRole::Steering;
    let xcfg = crate::xdp::XdpConfig {
        mtu: u32::try_from(cfg.s1u_mtu).unwrap_or(u32::MAX),
        ..crate::xdp::XdpConfig::new(cfg.s1u_addr)
    };
    let max = steering.then(|| u32::try_from(cfg.max_diversions).unwrap_or(u32::MAX));
    let mec = cfg.role == crate::config::UpfRole::Mec;
    let mut x = match mec {
        true => crate::xdp::XdpPlane::load_mec(xcfg),
        false => crate::xdp::XdpPlane::load_role(xcfg, max),
    }
    .map_err(|e| e.to_string())?;
    let extra = cfg.steer_interfaces.iter().map(String::as_str).filter(|_| steering || mec);
    for iface in std::iter::once(access).chain(cfg.core_interface.as_deref()).chain(extra) {
        x.attach(iface, crate::xdp::AttachMode::Native)
            .or_else(|_| x.attach(iface, crate::xdp::AttachMode::Generic))
            .map_err(|e| format!("attaching to {iface}: {e}"))?;
    }
    if let Some(core) = cfg.core_interface.as_deref() {
        // A downlink packet XDP encapsulated for an eNB whose neighbour
        // entry is not resolved yet goes to the kernel to forward (which
        // resolves it, holding the packet meanwhile); its outer source is
        // our own S1-U address, a martian the kernel drops silently
        // without accept_local: every downlink before the eNB's first
        // uplink was lost.
        let path = format!("/proc/sys/net/ipv4/conf/{core}/accept_local");
        std::fs::write(&path, "1").map_err(|e| format!("{path}: {e}"))?;
    }
    let xsks = open_buffer_sockets(&mut x, cfg);
    Ok((Box::new(x), xsks))
}

/// The data path `cfg.datapath` asks for, opened: `auto` takes XDP when it
/// loads and attaches, else the user-space data path alone.
fn open_datapath(cfg: &UpfConfig, counters: &Counters) -> Result<Option<Datapath>, UpfError> {
    let (xdp, xsks) = match cfg.datapath {
        DatapathKind::None => return Ok(None),
        DatapathKind::Userspace => (None, None),
        DatapathKind::Xdp => {
            let (x, s) = open_xdp(cfg).map_err(UpfError::Xdp)?;
            (Some(x), Some(s))
        }
        DatapathKind::Auto => match open_xdp(cfg) {
            Ok((x, s)) => (Some(x), Some(s)),
            Err(e) => {
                tracing::info!("XDP not used ({e}): user-space data path");
                counters.incr("upf_xdp_fallback");
                (None, None)
            }
        },
    };
    let xsks = match xsks {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            tracing::warn!("AF_XDP not used for buffered downlink packets ({e}): they arrive on the TUN device");
            counters.incr("upf_afxdp_fallback");
            None
        }
    };
    let dp = DatapathConfig {
        s1u_addr: cfg.s1u_addr,
        buffer_session_bytes: cfg.buffer_session_bytes,
        buffer_total_bytes: cfg.buffer_total_bytes,
        error_indications_per_sec: cfg.error_indications_per_sec,
        s1u_mtu: cfg.s1u_mtu,
        icmp_source: cfg.icmp_source,
        frag_session_bytes: cfg.frag_session_bytes,
        frag_total_bytes: cfg.frag_total_bytes,
        frag_timeout: Duration::from_millis(cfg.frag_timeout_ms),
    };
    let user = UserspacePlane::new(dp, counters.clone());
    let io = IoConfig {
        s1u: SocketAddrV4::new(cfg.s1u_addr, cfg.s1u_port),
        access_netns: cfg.access_netns.clone(),
        core_netns: cfg.core_netns.clone(),
        tun_name: cfg.tun_name.clone(),
        ue_pools: cfg.ue_pools.clone(),
    };
    let io = DatapathIo::open(&io, user.clone())
        .and_then(|io| match xsks {
            Some((socks, order)) => io.with_afxdp(socks, std::sync::Arc::new(order)),
            None => Ok(io),
        })
        .map_err(UpfError::Datapath)?;
    if io.afxdp_sockets() > 0 {
        tracing::info!(sockets = io.afxdp_sockets(), "buffered downlink packets over AF_XDP (copy mode)");
    }
    Ok(Some(Datapath { user, io, xdp }))
}

/// A request for the full-state dump: where the framed dump goes.
type DumpRequest = oneshot::Sender<Vec<u8>>;

/// A handle on a running UPF for its full-state dump ([`crate::dump`]).
#[derive(Clone)]
pub struct UpfControl {
    tx: mpsc::Sender<DumpRequest>,
}

impl UpfControl {
    /// The whole state as a framed [`crate::dump::UpfDump`], taken between
    /// two PFCP messages; `None` when the UPF no longer runs.
    pub async fn dump(&self) -> Option<Vec<u8>> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(tx).await.ok()?;
        rx.await.ok()
    }
}

/// A bound UPF, not yet running: its address, counters and rule table.
pub struct Upf {
    socket: UdpSocket,
    core: UpfCore,
    control: (mpsc::Sender<DumpRequest>, mpsc::Receiver<DumpRequest>),
    plane: MemoryPlane,
    datapath: Option<Datapath>,
    xdp_loaded: bool,
    /// Where the XDP program's interfaces live, to watch their neighbours.
    neighbour_scope: (Option<String>, Vec<String>),
    pub counters: Counters,
}

impl Upf {
    /// Binds `cfg.pfcp` (port 0 is fine) and opens the data path of
    /// `cfg.datapath` (none: rules are only kept in memory).
    pub async fn bind(cfg: UpfConfig) -> Result<Upf, UpfError> {
        let socket = mobicore_gtp::udp::bind_udp(cfg.pfcp)?;
        let plane = MemoryPlane::new();
        let counters = Counters::new();
        let mut datapath = open_datapath(&cfg, &counters)?;
        let xdp_loaded = datapath.as_ref().is_some_and(|d| d.xdp.is_some());
        let fp: Box<dyn ForwardingPlane> = match datapath.as_mut() {
            Some(d) => Box::new({
                d.user.set_fast_path(d.xdp.is_some());
                Tee { memory: plane.clone(), user: d.user.clone(), xdp: d.xdp.take(), handover: Handover::new() }
            }),
            None => Box::new(plane.clone()),
        };
        let neighbour_scope =
            (cfg.access_netns.clone(), cfg.access_interface.iter().chain(&cfg.core_interface).cloned().collect());
        let core = UpfCore::new(cfg, fp, SystemTime::now(), counters.clone());
        Ok(Upf { socket, core, control: mpsc::channel(8), plane, datapath, xdp_loaded, neighbour_scope, counters })
    }

    /// A handle for the full-state dump of this UPF once it runs.
    pub fn control(&self) -> UpfControl {
        UpfControl { tx: self.control.0.clone() }
    }

    /// Takes over the state of a dump ([`UpfCore::restore`]) before
    /// running; returns the number of sessions restored.
    pub fn restore(&mut self, dump: &[u8]) -> Result<usize, crate::dump::RestoreError> {
        let d = crate::dump::UpfDump::from_bytes(dump)?;
        self.core.restore(std::time::Instant::now(), d)?;
        Ok(self.core.sessions().len())
    }

    /// The user-space data path's handle, when one runs.
    pub fn userspace_plane(&self) -> Option<UserspacePlane> {
        self.datapath.as_ref().map(|d| d.user.clone())
    }

    /// Whether the XDP fast path is loaded and attached.
    pub fn xdp_loaded(&self) -> bool {
        self.xdp_loaded
    }

    pub fn pfcp_addr(&self) -> SocketAddr {
        self.socket.local_addr().expect("bound socket")
    }

    /// A handle on the installed rules that stays valid while running.
    pub fn plane(&self) -> MemoryPlane {
        self.plane.clone()
    }

    /// Serves PFCP until `shutdown` turns true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<(), UpfError> {
        let Upf {
            socket, mut core, control: (_control_tx, mut control), datapath, xdp_loaded, neighbour_scope, ..
        } = self;
        // The XDP next-hop cache follows the neighbour tables, read every second.
        let (nb_tx, mut nb_rx) = tokio::sync::mpsc::channel::<Vec<crate::rules::Neighbour>>(1);
        if xdp_loaded {
            let mut sd = shutdown.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = sd.changed() => return,
                    }
                    let (ns, ifs) = neighbour_scope.clone();
                    let read = tokio::task::spawn_blocking(move || crate::neighbours::read(ns.as_deref(), &ifs)).await;
                    if let Ok(Ok(n)) = read {
                        if nb_tx.send(n).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
        let reports: Arc<Notify> = match datapath {
            Some(Datapath { user, io, .. }) => {
                let r = user.reports_ready();
                let sd = shutdown.clone();
                tokio::spawn(async move {
                    if let Err(e) = io.run(sd).await {
                        tracing::error!("user-space data path stopped: {e}");
                    }
                });
                r
            }
            None => Arc::new(Notify::new()),
        };
        let mut rx = mobicore_common::mmsg::RecvBatch::new();
        let mut out: Vec<(SocketAddr, bytes::Bytes)> = Vec::new();
        // One timer, moved when the core's next deadline changes.
        let far = tokio::time::Instant::now() + std::time::Duration::from_secs(86400 * 365);
        let timer = tokio::time::sleep_until(far);
        tokio::pin!(timer);
        let mut armed: Option<tokio::time::Instant> = None;
        loop {
            let deadline = core.poll_timeout().map(tokio::time::Instant::from_std);
            if deadline != armed {
                timer.as_mut().reset(deadline.unwrap_or(far));
                armed = deadline;
            }
            tokio::select! {
                r = socket.readable() => {
                    r?;
                    // Every ready datagram is handled before the answers go out.
                    for _ in 0..8 {
                        match rx.recv(&socket) {
                            Ok(n) => {
                                let now = std::time::Instant::now();
                                for (from, b) in rx.iter() {
                                    core.handle_datagram(now, from, b);
                                }
                                if n < mobicore_common::mmsg::BATCH {
                                    break;
                                }
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                            // ICMP errors of earlier sends surface here on Linux.
                            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                _ = &mut timer, if armed.is_some() => {
                    core.handle_timeout(std::time::Instant::now());
                }
                _ = reports.notified() => {
                    core.poll_plane_reports(std::time::Instant::now());
                }
                Some(n) = nb_rx.recv() => {
                    core.plane.set_neighbours(&n);
                }
                Some(reply) = control.recv() => {
                    let _ = reply.send(core.dump(std::time::Instant::now()).to_bytes());
                }
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { return Ok(()); }
                }
            }
            out.extend(std::iter::from_fn(|| core.poll_transmit()));
            if !out.is_empty() {
                for _ in 0..mobicore_common::mmsg::send_all(&socket, &out).await {
                    core.counters.incr("pfcp_send_error");
                }
                out.clear();
            }
        }
    }
}

/// Runs a UPF PFCP node on `cfg.pfcp` until `shutdown`.
pub async fn run(cfg: UpfConfig, shutdown: watch::Receiver<bool>) -> Result<(), UpfError> {
    Upf::bind(cfg).await?.run(shutdown).await
}
