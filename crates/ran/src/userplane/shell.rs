//! The tokio shell of the eNB user plane: one task owns the TUN device, the
//! S1-U UDP socket and the [`Tunnels`] table.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Instant;

use mobicore_common::{Fteid, Teid};

use mobicore_netns::{ip_batch, run_in, Tun};
use tokio::io::unix::AsyncFd;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::follow::TunnelOp;
use super::tunnels::{
    uplink_header, Downlink, Event, HandoverError, HoldConfig, Transmit, Tunnels, UeTunnel, Uplink, UserPlaneStats,
};

/// Where and how the eNB user plane runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserPlaneConfig {
    /// Network namespace of the RAN (the TUN device and the S1-U socket).
    pub netns: String,
    /// Name of the TUN device holding the UE addresses.
    pub tun_name: String,
    /// The eNB's S1-U address (must be an address of `netns`); the same
    /// as `RanConfig::s1u_addr`, so the F-TEIDs the eNB hands out match.
    pub s1u_addr: Ipv4Addr,
    /// GTP-U port, 2152 (TS 29.281 4.4.2).
    pub port: u16,
    /// The UE pool: traffic from it is routed into the TUN device.
    pub ue_pool: (Ipv4Addr, u8),
    /// Routing table and rule priority of that policy route.
    pub route_table: u32,
    pub rule_priority: u32,
    /// MTU of the S1-U link; the TUN gets this minus the GTP-U overhead so
    /// that nothing needs fragmenting.
    pub link_mtu: u32,
    /// Send G-PDUs with the S flag and a sequence number.
    pub sequence_numbers: bool,
    /// Tag uplink G-PDUs with a PDU Session Container extension header
    /// carrying this QFI (as an N3 access node does).
    pub pdu_session_qfi: Option<u8>,
    /// Bounds of what is held for idle UEs and during handovers.
    pub hold: HoldConfig,
    /// Packets the TUN device queues for the task (its txqueuelen): while
    /// a loaded host keeps the task from running, the UEs' packets wait
    /// here; past it they are dropped ([`UserPlane::tun_dropped`]).
    pub tun_queue: u32,
}

impl UserPlaneConfig {
    /// Defaults for namespace `netns` with eNB S1-U address `s1u_addr`.
    pub fn new(netns: &str, s1u_addr: Ipv4Addr) -> Self {
        UserPlaneConfig {
            netns: netns.into(),
            tun_name: "ue0".into(),
            s1u_addr,
            port: mobicore_gtp::gtpu::PORT,
            ue_pool: (Ipv4Addr::new(10, 44, 0, 0), 14),
            route_table: 145,
            rule_priority: 100,
            link_mtu: 1500,
            sequence_numbers: false,
            pdu_session_qfi: None,
            hold: HoldConfig::default(),
            tun_queue: 16_384,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UserPlaneError {
    #[error("namespace setup: {0}")]
    Netns(#[from] mobicore_netns::NetnsError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the user-plane task has stopped")]
    Stopped,
    #[error("{0}")]
    Handover(#[from] HandoverError),
}

enum Cmd {
    Add(Vec<UeTunnel>),
    Remove(Vec<Ipv4Addr>),
    Release(Vec<Ipv4Addr>),
    AcceptForwarding(Ipv4Addr, Teid, oneshot::Sender<Result<(), HandoverError>>),
    StartHandover(Ipv4Addr, Fteid, oneshot::Sender<Result<(), HandoverError>>),
    CompleteHandover(UeTunnel, oneshot::Sender<Result<(), HandoverError>>),
    Subscribe(mpsc::UnboundedSender<Event>),
    Link(mpsc::UnboundedReceiver<Vec<TunnelOp>>, mpsc::UnboundedSender<Event>),
    Stats(oneshot::Sender<UserPlaneStats>),
    Stop,
}

/// A running eNB user plane. [`UserPlane::stop`] ends it and returns the
/// counters; dropping it aborts the task (the TUN device goes with it).
pub struct UserPlane {
    cfg: UserPlaneConfig,
    cmds: mpsc::Sender<Cmd>,
    task: Option<JoinHandle<Tunnels>>,
}

/// A RAN driver's end of [`UserPlane::link`]: the table's changes go in
/// order on `ops` (applied before any packet read after them), its events
/// come back on `events`. Unbounded: a change per procedure of a followed
/// UE, an event per idle period or activity interval of one.
pub struct UserPlaneLink {
    pub ops: mpsc::UnboundedSender<Vec<TunnelOp>>,
    pub events: mpsc::UnboundedReceiver<Event>,
}

/// Receive and send buffer of the S1-U socket: bursts of a TCP window
/// must not overflow it.
const SOCKET_BUFFER: usize = 64 << 20;

/// Packets read from the TUN per readiness event before yielding.
const BATCH: usize = 64;

impl UserPlane {
    /// Create the TUN device and the S1-U socket in `cfg.netns`, route the
    /// UE pool into the TUN, give it the addresses of `tunnels` and start
    /// the task. Needs a tokio runtime and root.
    pub async fn start(cfg: UserPlaneConfig, tunnels: Vec<UeTunnel>) -> Result<UserPlane, UserPlaneError> {
        let (name, addr) = (cfg.tun_name.clone(), SocketAddrV4::new(cfg.s1u_addr, cfg.port));
        let (tun, sock) = run_in(&cfg.netns, move || -> std::io::Result<_> {
            let tun = Tun::create(&name)?;
            let sock = mobicore_netns::sock::udp_bind(addr, SOCKET_BUFFER)?;
            sock.set_nonblocking(true)?;
            Ok((tun, sock))
        })??;
        let c = cfg.clone();
        let ips: Vec<Ipv4Addr> = tunnels.iter().map(|t| t.ue_ip).collect();
        tokio::task::spawn_blocking(move || setup_routing(&c, &ips)).await.map_err(|_| UserPlaneError::Stopped)??;
        // `Tun` owns its fd and the AsyncFd owns the `Tun`, so the fd stays
        // valid for as long as it is registered.
        #[allow(deprecated)]
        let tun = AsyncFd::new(tun)?;
        let sock = UdpSocket::from_std(sock)?;
        let mut table = Tunnels::new(cfg.s1u_addr, cfg.sequence_numbers).with_hold(cfg.hold);
        if let Some(q) = cfg.pdu_session_qfi {
            table = table.with_pdu_session_container(q);
        }
        for t in tunnels {
            table.insert(t);
        }
        let (tx, rx) = mpsc::channel(16);
        let task = tokio::spawn(run(table, tun, sock, rx));
        Ok(UserPlane { cfg, cmds: tx, task: Some(task) })
    }

    pub fn config(&self) -> &UserPlaneConfig {
        &self.cfg
    }

    /// Add UEs (e.g. attached later): their addresses and tunnels. Returns
    /// once the task has taken them, so that the UEs' first packets find
    /// their tunnels.
    pub async fn add(&self, tunnels: Vec<UeTunnel>) -> Result<(), UserPlaneError> {
        let lines = tunnels
            .iter()
            .map(|t| format!("addr replace {}/32 dev {}", t.ue_ip, self.cfg.tun_name))
            .collect::<Vec<_>>();
        let ns = self.cfg.netns.clone();
        tokio::task::spawn_blocking(move || ip_batch(&ns, &lines)).await.map_err(|_| UserPlaneError::Stopped)??;
        self.cmds.send(Cmd::Add(tunnels)).await.map_err(|_| UserPlaneError::Stopped)?;
        // Commands are taken in order: the answer to this one comes after
        // the Add is done.
        self.stats().await.map(|_| ())
    }

    /// Remove UEs (detached): their tunnels and addresses.
    pub async fn remove(&self, ue_ips: Vec<Ipv4Addr>) -> Result<(), UserPlaneError> {
        let lines = ue_ips.iter().map(|ip| format!("addr del {ip}/32 dev {}", self.cfg.tun_name)).collect::<Vec<_>>();
        self.cmds.send(Cmd::Remove(ue_ips)).await.map_err(|_| UserPlaneError::Stopped)?;
        let ns = self.cfg.netns.clone();
        tokio::task::spawn_blocking(move || ip_batch(&ns, &lines)).await.map_err(|_| UserPlaneError::Stopped)??;
        Ok(())
    }

    /// UEs released to ECM-IDLE (TS 23.401 5.3.5): they keep their
    /// addresses; their uplink is held until [`UserPlane::add`] gives them
    /// a tunnel again.
    pub async fn release(&self, ue_ips: Vec<Ipv4Addr>) -> Result<(), UserPlaneError> {
        self.cmds.send(Cmd::Release(ue_ips)).await.map_err(|_| UserPlaneError::Stopped)
    }

    /// Handover target: G-PDUs on `teid` are `ue_ip`'s forwarded downlink
    /// ([`Tunnels::accept_forwarding`]).
    pub async fn accept_forwarding(&self, ue_ip: Ipv4Addr, teid: Teid) -> Result<(), UserPlaneError> {
        self.ask(|tx| Cmd::AcceptForwarding(ue_ip, teid, tx)).await
    }

    /// Handover source: forward `ue_ip`'s downlink and the End Marker to
    /// `forward_to` ([`Tunnels::start_handover`]).
    pub async fn start_handover(&self, ue_ip: Ipv4Addr, forward_to: Fteid) -> Result<(), UserPlaneError> {
        self.ask(|tx| Cmd::StartHandover(ue_ip, forward_to, tx)).await
    }

    /// Handover target: the UE is there with tunnel `new`
    /// ([`Tunnels::complete_handover`]).
    pub async fn complete_handover(&self, new: UeTunnel) -> Result<(), UserPlaneError> {
        self.ask(|tx| Cmd::CompleteHandover(new, tx)).await
    }

    async fn ask(
        &self,
        cmd: impl FnOnce(oneshot::Sender<Result<(), HandoverError>>) -> Cmd,
    ) -> Result<(), UserPlaneError> {
        let (tx, rx) = oneshot::channel();
        self.cmds.send(cmd(tx)).await.map_err(|_| UserPlaneError::Stopped)?;
        Ok(rx.await.map_err(|_| UserPlaneError::Stopped)??)
    }

    /// The table's [`Event`]s from now on (idle uplink, throttled
    /// activity, handover ends); a later call replaces the receiver.
    pub async fn subscribe(&self) -> Result<mpsc::UnboundedReceiver<Event>, UserPlaneError> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.cmds.send(Cmd::Subscribe(tx)).await.map_err(|_| UserPlaneError::Stopped)?;
        Ok(rx)
    }

    /// The link a RAN driver keeps the table in step with its eNBs over
    /// ([`crate::shell::Ran::follow`]): changes in, events out. It
    /// replaces an earlier subscription.
    pub async fn link(&self) -> Result<UserPlaneLink, UserPlaneError> {
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let (tx, events) = mpsc::unbounded_channel();
        self.cmds.send(Cmd::Link(ops_rx, tx)).await.map_err(|_| UserPlaneError::Stopped)?;
        // Taken once the answer to a later command comes.
        self.stats().await?;
        Ok(UserPlaneLink { ops, events })
    }

    /// The counters so far, once every change sent on the link before
    /// is applied.
    pub async fn stats(&self) -> Result<UserPlaneStats, UserPlaneError> {
        let (tx, rx) = oneshot::channel();
        self.cmds.send(Cmd::Stats(tx)).await.map_err(|_| UserPlaneError::Stopped)?;
        rx.await.map_err(|_| UserPlaneError::Stopped)
    }

    /// UE packets the TUN device dropped because the task did not read
    /// them in time: the emulator's own loss, not the network's.
    pub async fn tun_dropped(&self) -> Result<u64, UserPlaneError> {
        let (ns, dev) = (self.cfg.netns.clone(), self.cfg.tun_name.clone());
        let r = tokio::task::spawn_blocking(move || mobicore_netns::link_stat(&ns, &dev, "tx_dropped")).await;
        Ok(r.map_err(|_| UserPlaneError::Stopped)??)
    }

    /// Stop the task, remove the TUN device and the policy rule, and
    /// return the final counters.
    pub async fn stop(mut self) -> Result<UserPlaneStats, UserPlaneError> {
        let _ = self.cmds.send(Cmd::Stop).await;
        let task = self.task.take().ok_or(UserPlaneError::Stopped)?;
        let table = task.await.map_err(|_| UserPlaneError::Stopped)?;
        let cfg = self.cfg.clone();
        let _ = tokio::task::spawn_blocking(move || remove_rule(&cfg)).await;
        Ok(table.stats)
    }
}

impl Drop for UserPlane {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            remove_rule(&self.cfg);
        }
    }
}

fn setup_routing(cfg: &UserPlaneConfig, ips: &[Ipv4Addr]) -> Result<(), mobicore_netns::NetnsError> {
    let dev = &cfg.tun_name;
    // Outer IPv4 and UDP, and the G-PDU header with its optional fields and
    // extension headers (TS 29.281 5.1): without them in the budget,
    // full-size UE packets would be fragmented on S1-U.
    let gtpu = uplink_header(cfg.sequence_numbers, cfg.pdu_session_qfi).header_len();
    let mtu = (cfg.link_mtu as usize).saturating_sub(20 + 8 + gtpu);
    let mut lines = vec![
        format!("link set {dev} up mtu {mtu} txqueuelen {}", cfg.tun_queue),
        format!("route replace default dev {dev} table {}", cfg.route_table),
        format!(
            "rule add from {}/{} lookup {} pref {}",
            cfg.ue_pool.0, cfg.ue_pool.1, cfg.route_table, cfg.rule_priority
        ),
    ];
    lines.extend(ips.iter().map(|ip| format!("addr replace {ip}/32 dev {dev}")));
    // Best effort, before the link is up: no IPv6 chatter (router
    // solicitations) into the tunnels.
    let _ = mobicore_netns::topology::sysctl(&cfg.netns, &format!("net/ipv6/conf/{dev}/disable_ipv6"), "1");
    ip_batch(&cfg.netns, &lines)?;
    Ok(())
}

fn remove_rule(cfg: &UserPlaneConfig) {
    let pool = format!("{}/{}", cfg.ue_pool.0, cfg.ue_pool.1);
    let _ = mobicore_netns::ip(&[
        "-n",
        &cfg.netns,
        "rule",
        "del",
        "from",
        &pool,
        "lookup",
        &cfg.route_table.to_string(),
        "pref",
        &cfg.rule_priority.to_string(),
    ]);
}

async fn run(mut t: Tunnels, tun: AsyncFd<Tun>, sock: UdpSocket, mut cmds: mpsc::Receiver<Cmd>) -> Tunnels {
    let mut rx = vec![0u8; 65536];
    let mut pkt = vec![0u8; 65536];
    let mut out = Vec::with_capacity(65536);
    let mut events: Option<mpsc::UnboundedSender<Event>> = None;
    let mut ops: Option<mpsc::UnboundedReceiver<Vec<TunnelOp>>> = None;
    loop {
        // Changes first: a packet read after one was sent sees it (also
        // applied right before each packet read below: the select! may
        // take a packet ready at the same time as the change).
        apply_pending(&mut ops, &mut t);
        let wake = t.poll_timeout().map(tokio::time::Instant::from_std);
        tokio::select! {
            got = recv_ops(&mut ops) => match got {
                Some(v) => apply(v, &mut t),
                None => ops = None,
            },
            cmd = cmds.recv() => match cmd {
                None | Some(Cmd::Stop) => break,
                Some(Cmd::Add(v)) => v.into_iter().for_each(|x| t.insert(x)),
                Some(Cmd::Remove(v)) => v.into_iter().for_each(|ip| { t.remove(ip); }),
                Some(Cmd::Release(v)) => v.into_iter().for_each(|ip| { t.release(ip); }),
                Some(Cmd::AcceptForwarding(ip, teid, reply)) => { let _ = reply.send(t.accept_forwarding(ip, teid)); }
                Some(Cmd::StartHandover(ip, to, reply)) => { let _ = reply.send(t.start_handover(ip, to)); }
                Some(Cmd::CompleteHandover(new, reply)) => {
                    let _ = reply.send(t.complete_handover(Instant::now(), new.ue_ip, new));
                }
                Some(Cmd::Subscribe(tx)) => events = Some(tx),
                Some(Cmd::Link(rx, tx)) => (ops, events) = (Some(rx), Some(tx)),
                Some(Cmd::Stats(reply)) => {
                    // Answered after every change sent before it.
                    apply_pending(&mut ops, &mut t);
                    let _ = reply.send(t.stats.clone());
                }
            },
            _ = sleep_until(wake) => t.handle_timeout(Instant::now()),
            ready = tun.readable() => {
                let Ok(mut guard) = ready else { break };
                for _ in 0..BATCH {
                    match guard.try_io(|inner| inner.get_ref().recv(&mut pkt)) {
                        Ok(Ok(n)) => {
                            apply_pending(&mut ops, &mut t);
                            if let Uplink::Send(dst) = t.uplink(Instant::now(), &pkt[..n], &mut out) {
                                if let Err(e) = sock.send_to(&out, dst).await {
                                    t.stats.send_errors += 1;
                                    tracing::debug!(error = %e, "S1-U send failed");
                                }
                            }
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "TUN read failed");
                            break;
                        }
                        Err(_would_block) => break,
                    }
                }
            }
            got = sock.recv_from(&mut rx) => {
                let Ok((n, SocketAddr::V4(from))) = got else { continue };
                // A change sent before this datagram was read is applied
                // first: the tunnel of an INITIAL CONTEXT SETUP RESPONSE,
                // which the core answers with the buffered downlink at once.
                apply_pending(&mut ops, &mut t);
                match t.downlink(Instant::now(), &rx[..n], from, &mut out) {
                    Downlink::Deliver(ip) => {
                        if let Err(e) = tun.get_ref().send(ip) {
                            t.stats.tun_write_errors += 1;
                            tracing::debug!(error = %e, "TUN write failed");
                        }
                    }
                    Downlink::Send(to) => {
                        if sock.send_to(&out, to).await.is_err() {
                            t.stats.send_errors += 1;
                        }
                    }
                    Downlink::Reply(m) => {
                        if sock.send_to(&m, from).await.is_err() {
                            t.stats.send_errors += 1;
                        }
                    }
                    Downlink::Held | Downlink::Drop(_) => {}
                }
            }
        }
        // Held packets go out before anything else is read, in order.
        while let Some(x) = t.poll_transmit() {
            match x {
                Transmit::ToUe(ip) => {
                    if tun.get_ref().send(&ip).is_err() {
                        t.stats.tun_write_errors += 1;
                    }
                }
                Transmit::Gtpu { to, bytes } => {
                    if sock.send_to(&bytes, to).await.is_err() {
                        t.stats.send_errors += 1;
                    }
                }
            }
        }
        while let Some(e) = t.poll_event() {
            if events.as_ref().is_some_and(|tx| tx.send(e).is_err()) {
                events = None;
            }
        }
    }
    t
}

fn apply(ops: Vec<TunnelOp>, t: &mut Tunnels) {
    let now = Instant::now();
    for op in ops {
        if let Err(e) = op.apply(now, t) {
            tracing::debug!(error = %e, ?op, "tunnel change refused");
        }
    }
}

/// Every change already sent.
fn apply_pending(ops: &mut Option<mpsc::UnboundedReceiver<Vec<TunnelOp>>>, t: &mut Tunnels) {
    while let Some(v) = ops.as_mut().and_then(|rx| rx.try_recv().ok()) {
        apply(v, t);
    }
}

/// The next batch of changes, or pending forever without a link.
async fn recv_ops(ops: &mut Option<mpsc::UnboundedReceiver<Vec<TunnelOp>>>) -> Option<Vec<TunnelOp>> {
    match ops {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`, or forever without a deadline.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
