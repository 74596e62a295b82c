//! The thin tokio shell: one task per endpoint owns the socket and the
//! sans-I/O [`Endpoint`], feeds it packets, commands and timer expiries, and
//! sends what it emits, batching syscalls and draining commands before
//! building packets so that chunks bundle.

pub(crate) mod kernel;
mod ports;
mod socket;

use mobicore_common::counters::Counters;
use mobicore_common::sctp_api::{AssocId, SctpCommand, SctpEvent, SctpHandle};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

use crate::config::{EndpointConfig, Transport};
use crate::endpoint::{Endpoint, Stats};
use socket::{Batcher, PacketSocket, BATCH};
use std::os::fd::{AsRawFd, RawFd};

/// Why an endpoint could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum SctpError {
    #[error("raw sockets need root (CAP_NET_RAW): run as root, or use the udp transport")]
    NeedRoot,
    #[error(
        "SCTP port {port} is in use by another endpoint or connection on this host: stop it, or choose another port (0: one the kernel picks)"
    )]
    SctpPortInUse { port: u16 },
    #[error("UDP port {port} is in use: stop what holds it, or choose another port (0: one the kernel picks)")]
    PortInUse { port: u16 },
    #[error("cannot bind {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("kernel SCTP is not available on this host; use the raw or udp transport")]
    KernelUnavailable,
    #[error("the kernel SCTP transport is not implemented yet; use the udp transport on hosts with kernel SCTP")]
    KernelNotImplemented,
    #[error("{0} is not supported")]
    Unsupported(&'static str),
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
}

/// A bound endpoint with what `SctpHandle` does not say.
pub struct Bound {
    pub handle: SctpHandle,
    /// The local UDP port with `Transport::Udp` (resolved when 0 was asked for).
    pub udp_port: Option<u16>,
}

const CHANNEL: usize = 65_536;
/// Commands taken per wakeup before packets are built (bundling).
const COMMANDS_PER_ROUND: usize = 1024;
/// A round with at least this many commands means load: yield once to gather more.
const COALESCE_MIN: usize = 8;
/// Receive batches per wakeup before output is flushed.
const RECV_ROUNDS: usize = 8;
/// Stop reading the network while this many events wait for the user.
const EVENT_BACKLOG: usize = 200_000;

/// Bind an endpoint and start its task.
pub async fn bind(cfg: EndpointConfig) -> Result<SctpHandle, SctpError> {
    bind_with_info(cfg).await.map(|b| b.handle)
}

/// Like [`bind`], also telling the UDP port bound.
pub async fn bind_with_info(cfg: EndpointConfig) -> Result<Bound, SctpError> {
    let (reservation, port) = ports::reserve(cfg.local.ip(), cfg.local.port()).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            SctpError::SctpPortInUse { port: cfg.local.port() }
        } else {
            SctpError::Bind { addr: cfg.local, source: e }
        }
    })?;
    let sock = match cfg.transport {
        Transport::RawIp => PacketSocket::raw(cfg.local, port)?,
        Transport::Udp { port: udp } => PacketSocket::udp(cfg.local, udp, cfg.udp_remote_port)?,
        Transport::Kernel if kernel::available() => return Err(SctpError::KernelNotImplemented),
        Transport::Kernel => return Err(SctpError::KernelUnavailable),
    };
    let udp_port = sock.local_udp_port();
    let local = SocketAddr::new(cfg.local.ip(), port);
    let mut ep = Endpoint::new(&cfg, port, rand::random(), Instant::now());
    ep.set_port_allocator(Box::new(ports::ReservedPorts::new(cfg.local.ip())));
    let (cmd_tx, cmd_rx) = mpsc::channel(CHANNEL);
    let (ev_tx, ev_rx) = mpsc::channel(CHANNEL);
    let task = Task {
        ep,
        sock,
        cmd_rx,
        ev_tx,
        connects: HashMap::new(),
        events: VecDeque::new(),
        out: Vec::with_capacity(BATCH),
        spare: Vec::new(),
        counters: StatCounters::new(&cfg.counters),
        send_refused: cfg.counters.get("sctp_send_refused"),
        send_failed: cfg.counters.get("sctp_send_failed"),
        _reservation: reservation,
    };
    tokio::spawn(task.run());
    Ok(Bound { handle: SctpHandle { commands: cmd_tx, events: ev_rx, local }, udp_port })
}

/// Read until the socket is empty, bounded so that output keeps flowing.
/// True when the socket was drained (readiness may be cleared).
fn receive(ep: &mut Endpoint, io: &mut Batcher, fd: RawFd) -> bool {
    let now = Instant::now();
    for _ in 0..RECV_ROUNDS {
        match io.recv_batch(fd, |src, pkt| ep.handle_packet(now, src, pkt)) {
            Ok(n) if n == BATCH => continue,
            // Fewer than asked for: drained (another call would only find
            // it empty); the caller clears the readiness.
            Ok(_) => return true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("sctp receive error: {e}");
                return false;
            }
        }
    }
    false
}

type StatField = fn(&Stats) -> u64;

struct StatCounters(Vec<(StatField, Arc<AtomicU64>)>);

impl StatCounters {
    fn new(c: &Counters) -> Self {
        // Named after what was refused or dropped (exported as `mobicore_<nf>_sctp_*`).
        let fields: [(&'static str, StatField); 19] = [
            ("sctp_rx_packets", |s| s.rx_packets),
            ("sctp_tx_packets", |s| s.tx_packets),
            ("sctp_foreign_port", |s| s.foreign_port),
            ("sctp_bad_checksum", |s| s.bad_checksum),
            ("sctp_malformed", |s| s.malformed),
            ("sctp_bad_vtag", |s| s.bad_vtag),
            ("sctp_out_of_the_blue", |s| s.out_of_the_blue),
            ("sctp_bad_cookie", |s| s.bad_cookie),
            ("sctp_stale_cookie", |s| s.stale_cookie),
            ("sctp_unknown_chunks", |s| s.unknown_chunks),
            ("sctp_init_received", |s| s.init_received),
            ("sctp_half_open_init", |s| s.half_open_inits),
            ("sctp_init_beyond_max_associations", |s| s.init_beyond_max_associations),
            ("sctp_cookie_beyond_max_associations", |s| s.cookie_beyond_max_associations),
            ("sctp_data_beyond_receive_window", |s| s.data_beyond_receive_window),
            ("sctp_data_tsn_beyond_window", |s| s.data_tsn_beyond_window),
            ("sctp_data_reneged", |s| s.data_reneged),
            ("sctp_reply_queue_full", |s| s.replies_dropped),
            ("sctp_report_queue_full", |s| s.reports_dropped),
        ];
        StatCounters(fields.into_iter().map(|(n, f)| (f, c.get(n))).collect())
    }
    fn publish(&self, s: &Stats) {
        for (f, c) in &self.0 {
            c.store(f(s), Ordering::Relaxed);
        }
    }
}

enum Wake {
    Command(Option<SctpCommand>),
    Timer,
    Done,
}

struct Task {
    ep: Endpoint,
    sock: PacketSocket,
    cmd_rx: mpsc::Receiver<SctpCommand>,
    ev_tx: mpsc::Sender<SctpEvent>,
    connects: HashMap<AssocId, oneshot::Sender<Result<AssocId, String>>>,
    events: VecDeque<SctpEvent>,
    out: Vec<(SocketAddr, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
    counters: StatCounters,
    /// Sends the endpoint refused (unknown or closed association, full
    /// queue) and datagrams the socket failed to send: counted, not only
    /// logged.
    send_refused: Arc<AtomicU64>,
    send_failed: Arc<AtomicU64>,
    /// Holds our SCTP port number host-wide while the task lives.
    _reservation: socket2::Socket,
}

impl Task {
    async fn run(mut self) {
        let far = tokio::time::Instant::now() + Duration::from_secs(86_400);
        let sleep = tokio::time::sleep_until(far);
        tokio::pin!(sleep);
        let mut armed: Option<Instant> = None;
        loop {
            if self.ep.take_ports_changed() {
                if let Err(e) = self.sock.set_ports(&self.ep.local_ports()) {
                    tracing::warn!("sctp: cannot update the socket's port filter: {e}");
                }
            }
            self.collect_events();
            self.flush_events();
            self.flush_output().await;
            self.counters.publish(&self.ep.stats);
            let deadline = self.ep.poll_timeout();
            if deadline != armed {
                armed = deadline;
                let at = deadline.map_or(far, tokio::time::Instant::from_std);
                sleep.as_mut().reset(at);
            }
            let read_ok = self.events.len() < EVENT_BACKLOG;
            let wake = tokio::select! {
                biased;
                cmd = self.cmd_rx.recv() => Wake::Command(cmd),
                guard = self.sock.fd.readable(), if read_ok => {
                    match guard {
                        Ok(mut guard) => {
                            let fd = guard.get_inner().as_raw_fd();
                            if receive(&mut self.ep, &mut self.sock.io, fd) {
                                guard.clear_ready();
                            }
                        }
                        Err(e) => tracing::warn!("sctp socket error: {e}"),
                    }
                    Wake::Done
                },
                _ = &mut sleep, if armed.is_some() => Wake::Timer,
                permit = self.ev_tx.reserve(), if !self.events.is_empty() => {
                    match (permit, self.events.pop_front()) {
                        (Ok(p), Some(ev)) => p.send(ev),
                        _ => self.events.clear(), // the user dropped the receiver
                    }
                    Wake::Done
                },
            };
            match wake {
                Wake::Command(Some(cmd)) => {
                    self.command(cmd);
                    let mut n = 1;
                    while n < COMMANDS_PER_ROUND {
                        match self.cmd_rx.try_recv() {
                            Ok(cmd) => self.command(cmd),
                            Err(_) => break,
                        }
                        n += 1;
                    }
                    if (COALESCE_MIN..COMMANDS_PER_ROUND).contains(&n) {
                        // Busy: let the producers add more before packets are built (bundling).
                        tokio::task::yield_now().await;
                        while n < COMMANDS_PER_ROUND {
                            match self.cmd_rx.try_recv() {
                                Ok(cmd) => self.command(cmd),
                                Err(_) => break,
                            }
                            n += 1;
                        }
                    }
                }
                Wake::Command(None) => return self.close().await,
                Wake::Timer => {
                    armed = None;
                    sleep.as_mut().reset(far);
                    self.ep.handle_timeout(Instant::now());
                }
                Wake::Done => {}
            }
        }
    }

    fn command(&mut self, cmd: SctpCommand) {
        let now = Instant::now();
        match cmd {
            SctpCommand::Send { assoc, stream, ppid, data } => {
                if let Err(e) = self.ep.send(assoc, stream, ppid, data) {
                    self.send_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("sctp send on {assoc:?} refused: {e}");
                }
            }
            SctpCommand::Connect { remote, reply } => match self.ep.connect(now, remote) {
                Ok(id) => {
                    self.connects.insert(id, reply);
                }
                Err(e) => {
                    let _ = reply.send(Err(e.to_string()));
                }
            },
            SctpCommand::Shutdown { assoc } => self.ep.shutdown(now, assoc),
            SctpCommand::Abort { assoc } => self.ep.abort(assoc),
        }
    }

    fn collect_events(&mut self) {
        while let Some(ev) = self.ep.poll_event() {
            match &ev {
                SctpEvent::Up { assoc, .. } => {
                    if let Some(reply) = self.connects.remove(assoc) {
                        let _ = reply.send(Ok(*assoc));
                    }
                }
                SctpEvent::Down { assoc, reason } => {
                    if let Some(reply) = self.connects.remove(assoc) {
                        let _ = reply.send(Err(reason.clone()));
                        continue; // the user never saw this association
                    }
                }
                SctpEvent::Data { .. } => {}
            }
            self.events.push_back(ev);
        }
    }

    fn flush_events(&mut self) {
        while let Some(ev) = self.events.pop_front() {
            match self.ev_tx.try_send(ev) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(ev)) => {
                    self.events.push_front(ev);
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
    }

    /// Build every packet the endpoint has and send them in batches.
    async fn flush_output(&mut self) {
        let now = Instant::now();
        loop {
            while self.out.len() < BATCH {
                let mut buf = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(2048));
                match self.ep.poll_transmit(now, &mut buf) {
                    Some(dst) => self.out.push((dst, buf)),
                    None => {
                        self.spare.push(buf);
                        break;
                    }
                }
            }
            if self.out.is_empty() {
                return;
            }
            let full = self.out.len() == BATCH;
            self.send_out().await;
            if !full {
                return;
            }
        }
    }

    async fn send_out(&mut self) {
        while !self.out.is_empty() {
            match self.sock.io.send_batch(self.sock.fd.get_ref().as_raw_fd(), &self.out) {
                Ok(n) => {
                    let n = n.max(1).min(self.out.len());
                    self.spare.extend(self.out.drain(..n).map(|(_, b)| b));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Ok(mut g) = self.sock.fd.writable().await {
                        g.clear_ready();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // e.g. no route: drop the first packet; SCTP retransmits what matters.
                    self.send_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("sctp send to {} failed: {e}", self.out[0].0);
                    let (_, b) = self.out.remove(0);
                    self.spare.push(b);
                }
            }
        }
    }

    /// The user dropped the handle: abort what is left and stop.
    async fn close(mut self) {
        let ids: Vec<AssocId> = self.ep_assoc_ids();
        for id in ids {
            self.ep.abort(id);
        }
        self.flush_output().await;
    }

    fn ep_assoc_ids(&self) -> Vec<AssocId> {
        self.ep.association_ids()
    }
}
