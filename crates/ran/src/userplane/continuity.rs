//! Flow continuity (issue 11 item 5): long-running flows between UE
//! addresses and a server in the data network, checked for loss,
//! duplication and reordering while the network moves them.
//!
//! - UDP: every UE sends numbered datagrams at a fixed interval to an echo
//!   server, which notes per source what arrives out of order and echoes
//!   each back; the UE notes the same of the echoes. Lost = sent but never
//!   echoed back.
//! - TCP: every UE writes numbered records at a fixed interval on one
//!   connection, the server echoes them; the bytes must come back intact
//!   and in order, and the kernel's own counters of both ends
//!   (`tcpi_total_retrans`, `tcpi_rcv_ooopack`: segments retransmitted,
//!   segments received out of order) say whether the path lost or
//!   reordered any segment underneath.
//!
//! Sockets are opened in their namespaces ([`run_in`]) and driven by
//! tokio; [`Streams::stop`] stops sending, waits for what is in flight
//! (up to `drain`), and reports every flow.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mobicore_netns::{run_in, sock};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The flows to run.
#[derive(Debug, Clone, PartialEq)]
pub struct ContinuityConfig {
    pub ran_ns: String,
    pub dn_ns: String,
    /// The server's address in the data network.
    pub dn_addr: Ipv4Addr,
    pub udp_port: u16,
    pub tcp_port: u16,
    /// One datagram per UE per interval, of this many octets (>= 8).
    pub udp_interval: Duration,
    pub udp_payload: usize,
    /// One record per TCP flow per interval, of this many octets (>= 8).
    pub tcp_interval: Duration,
    pub tcp_record: usize,
    /// Longest wait, after sending stops, for what is in flight.
    pub drain: Duration,
}

impl ContinuityConfig {
    pub fn new(ran_ns: &str, dn_ns: &str, dn_addr: Ipv4Addr) -> Self {
        ContinuityConfig {
            ran_ns: ran_ns.into(),
            dn_ns: dn_ns.into(),
            dn_addr,
            udp_port: 7101,
            tcp_port: 7102,
            udp_interval: Duration::from_millis(20),
            udp_payload: 64,
            tcp_interval: Duration::from_millis(10),
            tcp_record: 512,
            drain: Duration::from_secs(5),
        }
    }
}

/// What one flow saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowReport {
    pub ue: Ipv4Addr,
    /// "udp" or "tcp".
    pub kind: &'static str,
    /// Datagrams or records sent, and echoed back intact.
    pub sent: u64,
    pub received: u64,
    /// UDP: sent and never echoed back.
    pub lost: u64,
    /// UDP: the first sequence numbers never echoed back (at most 16; the
    /// n-th was sent about n intervals after the flows started).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<u64>,
    /// UDP: datagrams the server received: below `sent` when the uplink
    /// lost some, else what was lost was lost on the downlink.
    pub server_received: u64,
    pub duplicated: u64,
    /// Arrived after a later one: at the server (uplink), at the UE (downlink).
    pub reordered_uplink: u64,
    pub reordered_downlink: u64,
    /// TCP: segments retransmitted by either end (a loss underneath).
    pub retransmitted: u64,
    /// The address the server saw the flow come from.
    pub seen_as: Option<Ipv4Addr>,
    pub error: Option<String>,
    /// The UE end's port: how the server's notes are matched to the flow.
    #[serde(skip)]
    local_port: u16,
}

impl FlowReport {
    fn new(ue: Ipv4Addr, kind: &'static str) -> Self {
        FlowReport {
            ue,
            kind,
            sent: 0,
            received: 0,
            lost: 0,
            missing: Vec::new(),
            server_received: 0,
            duplicated: 0,
            reordered_uplink: 0,
            reordered_downlink: 0,
            retransmitted: 0,
            seen_as: None,
            error: None,
            local_port: 0,
        }
    }

    fn failed(why: String) -> Self {
        FlowReport { error: Some(why), ..FlowReport::new(Ipv4Addr::UNSPECIFIED, "") }
    }

    /// Nothing lost, duplicated or reordered, nothing failed, something went through.
    pub fn intact(&self) -> bool {
        self.error.is_none()
            && self.sent > 0
            && self.received == self.sent
            && self.lost == 0
            && self.duplicated == 0
            && self.reordered_uplink == 0
            && self.reordered_downlink == 0
            && self.retransmitted == 0
            && self.seen_as == Some(self.ue)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ContinuityReport {
    pub flows: Vec<FlowReport>,
}

impl ContinuityReport {
    /// The flows that are not [`FlowReport::intact`].
    pub fn broken(&self) -> Vec<&FlowReport> {
        self.flows.iter().filter(|f| !f.intact()).collect()
    }
}

/// What the server saw of one source.
#[derive(Debug, Default, Clone, Copy)]
struct SeenBy {
    last: Option<u64>,
    reordered: u64,
    /// UDP: datagrams received.
    count: u64,
    /// TCP: the server end's retransmissions and out-of-order segments.
    retransmitted: u64,
}

type Seen = Arc<Mutex<HashMap<SocketAddrV4, SeenBy>>>;

/// Running flows; [`Streams::stop`] ends them and reports.
pub struct Streams {
    drain: Duration,
    stop: watch::Sender<bool>,
    clients: Vec<JoinHandle<FlowReport>>,
    servers: Vec<JoinHandle<()>>,
    seen: Seen,
    received: Arc<std::sync::atomic::AtomicU64>,
}

fn bad(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl Streams {
    /// Starts the servers in `dn_ns`, then a UDP flow from each of
    /// `udp_ues` and a TCP flow from each of `tcp_ues` (addresses held by
    /// the eNB user plane in `ran_ns`).
    pub async fn start(cfg: &ContinuityConfig, udp_ues: &[Ipv4Addr], tcp_ues: &[Ipv4Addr]) -> std::io::Result<Streams> {
        assert!(cfg.udp_payload >= 8 && cfg.tcp_record >= 8);
        let seen: Seen = Arc::default();
        let received = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (stop, stop_rx) = watch::channel(false);
        let udp_addr = SocketAddrV4::new(cfg.dn_addr, cfg.udp_port);
        let tcp_addr = SocketAddrV4::new(cfg.dn_addr, cfg.tcp_port);
        let (u, t) = run_in(&cfg.dn_ns, move || -> std::io::Result<_> {
            let u = sock::udp_bind(udp_addr, 64 << 20)?;
            u.set_nonblocking(true)?;
            let t = std::net::TcpListener::bind(tcp_addr)?;
            t.set_nonblocking(true)?;
            Ok((u, t))
        })
        .map_err(bad)??;
        let servers = vec![
            tokio::spawn(udp_server(UdpSocket::from_std(u)?, seen.clone())),
            tokio::spawn(tcp_server(TcpListener::from_std(t)?, seen.clone())),
        ];
        let mut clients = Vec::new();
        for &ue in udp_ues {
            let s = run_in(&cfg.ran_ns, move || -> std::io::Result<_> {
                let s = sock::udp_bind(SocketAddrV4::new(ue, 0), 1 << 20)?;
                s.connect(udp_addr)?;
                s.set_nonblocking(true)?;
                Ok(s)
            })
            .map_err(bad)??;
            let (s, c, r) = (UdpSocket::from_std(s)?, cfg.clone(), received.clone());
            clients.push(tokio::spawn(udp_client(s, ue, c, stop_rx.clone(), r)));
        }
        for &ue in tcp_ues {
            let s = run_in(&cfg.ran_ns, move || {
                let s = sock::tcp_connect_from(SocketAddrV4::new(ue, 0), tcp_addr, Duration::from_secs(10))?;
                s.set_nonblocking(true)?;
                s.set_nodelay(true)?;
                Ok::<_, std::io::Error>(s)
            })
            .map_err(bad)??;
            let (s, c, r) = (TcpStream::from_std(s)?, cfg.clone(), received.clone());
            clients.push(tokio::spawn(tcp_client(s, ue, c, stop_rx.clone(), r)));
        }
        Ok(Streams { drain: cfg.drain, stop, clients, servers, seen, received })
    }

    /// Datagrams and records echoed back so far, all flows together.
    pub fn received(&self) -> u64 {
        self.received.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The echo counter behind [`Self::received`].
    pub fn counter(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.received.clone()
    }

    /// Waits until `more` further echoes arrived (the flows are moving),
    /// or `limit`; false on the limit.
    pub async fn wait_for_progress(&self, more: u64, limit: Duration) -> bool {
        Self::wait_until(&self.received, self.received() + more, limit).await
    }

    /// Waits until `counter` reaches `target`, or `limit`; false on the limit.
    pub async fn wait_until(counter: &std::sync::atomic::AtomicU64, target: u64, limit: Duration) -> bool {
        let end = tokio::time::Instant::now() + limit;
        while counter.load(std::sync::atomic::Ordering::Relaxed) < target {
            if tokio::time::Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// Stops sending, waits for what is in flight, reports every flow.
    pub async fn stop(self) -> ContinuityReport {
        let _ = self.stop.send(true);
        let mut flows = Vec::new();
        for c in self.clients {
            match tokio::time::timeout(self.drain + Duration::from_secs(5), c).await {
                Ok(Ok(f)) => flows.push(f),
                Ok(Err(e)) => flows.push(FlowReport::failed(format!("flow task: {e}"))),
                Err(_) => flows.push(FlowReport::failed("flow did not end".into())),
            }
        }
        // The server ends of TCP flows note their counters at EOF.
        tokio::time::sleep(Duration::from_millis(100)).await;
        for s in self.servers {
            s.abort();
        }
        let seen = self.seen.lock().expect("not poisoned").clone();
        for f in &mut flows {
            // The server saw the flow from the UE's own address, or (when
            // translated on the way) from another with the UE end's port.
            let own = SocketAddrV4::new(f.ue, f.local_port);
            let found = seen.get_key_value(&own).or_else(|| seen.iter().find(|(a, _)| f.port_of(a)));
            if let Some((a, s)) = found {
                f.seen_as = Some(*a.ip());
                f.reordered_uplink = s.reordered;
                f.retransmitted += s.retransmitted;
                f.server_received = s.count;
            }
        }
        ContinuityReport { flows }
    }
}

impl FlowReport {
    /// Whether the server's source `a` is this flow (by the UE end's port;
    /// its address may be translated on the way).
    fn port_of(&self, a: &SocketAddrV4) -> bool {
        self.local_port != 0 && a.port() == self.local_port
    }
}

async fn udp_server(s: UdpSocket, seen: Seen) {
    let mut buf = vec![0u8; 65_536];
    while let Ok((n, from)) = s.recv_from(&mut buf).await {
        let (SocketAddr::V4(from), true) = (from, n >= 8) else { continue };
        let seq = u64::from_be_bytes(buf[..8].try_into().expect("8 octets"));
        note(&seen, from, seq);
        let _ = s.send_to(&buf[..n], from).await;
    }
}

/// Notes `seq` from `from`: out of order when not above the last one.
fn note(seen: &Seen, from: SocketAddrV4, seq: u64) {
    let mut m = seen.lock().expect("not poisoned");
    let e = m.entry(from).or_default();
    e.count += 1;
    if e.last.is_some_and(|l| seq <= l) {
        e.reordered += 1;
    } else {
        e.last = Some(seq);
    }
}

async fn tcp_server(l: TcpListener, seen: Seen) {
    while let Ok((mut c, SocketAddr::V4(from))) = l.accept().await {
        let seen = seen.clone();
        seen.lock().expect("not poisoned").entry(from).or_default();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            loop {
                match c.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if c.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            }
            let (retrans, ooo) = tcp_counters(&c);
            let mut m = seen.lock().expect("not poisoned");
            let e = m.entry(from).or_default();
            e.retransmitted += retrans;
            e.reordered += ooo;
        });
    }
}

/// Segments a connection retransmitted that the peer did not report as
/// duplicates (`tcpi_total_retrans` - `tcpi_dsack_dups`: a tail-loss probe
/// or early timer on a busy host resends what arrived, and the peer's
/// D-SACK says so), and segments it received out of order
/// (`tcpi_rcv_ooopack`). struct tcp_info, include/uapi/linux/tcp.h:
/// offsets 100, 216 and 224 (Linux 5.4 and later; 0 before).
fn tcp_counters(s: &impl AsRawFd) -> (u64, u64) {
    let mut info = [0u8; 232];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` octets into `info`.
    let r = unsafe {
        libc::getsockopt(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &mut len)
    };
    if r != 0 {
        return (0, 0);
    }
    let at = |o: usize| {
        if (len as usize) >= o + 4 {
            u64::from(u32::from_ne_bytes(info[o..o + 4].try_into().expect("4 octets")))
        } else {
            0
        }
    };
    (at(100).saturating_sub(at(216)), at(224))
}

async fn udp_client(
    s: UdpSocket,
    ue: Ipv4Addr,
    cfg: ContinuityConfig,
    mut stop: watch::Receiver<bool>,
    total: Arc<std::sync::atomic::AtomicU64>,
) -> FlowReport {
    let mut f = FlowReport::new(ue, "udp");
    f.local_port = s.local_addr().map_or(0, |a| a.port());
    let mut got = vec![false; 1 << 16];
    let mut last: Option<u64> = None;
    let mut tick = tokio::time::interval(cfg.udp_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut out = vec![0u8; cfg.udp_payload];
    let mut buf = vec![0u8; 65_536];
    let mut draining: Option<tokio::time::Instant> = None;
    loop {
        if draining.is_some_and(|d| tokio::time::Instant::now() >= d) || (draining.is_some() && f.received >= f.sent) {
            break;
        }
        let drain_end = draining.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = tick.tick(), if draining.is_none() => {
                out[..8].copy_from_slice(&f.sent.to_be_bytes());
                if let Err(e) = s.send(&out).await {
                    f.error.get_or_insert(format!("send: {e}"));
                }
                f.sent += 1;
                if f.sent as usize > got.len() {
                    got.resize(got.len() * 2, false);
                }
            }
            r = s.recv(&mut buf) => match r {
                Ok(n) if n >= 8 => {
                    let seq = u64::from_be_bytes(buf[..8].try_into().expect("8 octets"));
                    match got.get_mut(seq as usize) {
                        Some(g) if *g => f.duplicated += 1,
                        Some(g) => {
                            *g = true;
                            f.received += 1;
                            total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        None => f.duplicated += 1,
                    }
                    if last.is_some_and(|l| seq <= l) {
                        f.reordered_downlink += 1;
                    } else {
                        last = Some(seq);
                    }
                }
                Ok(_) => {}
                Err(e) => { f.error.get_or_insert(format!("recv: {e}")); }
            },
            _ = stop.changed(), if draining.is_none() => draining = Some(tokio::time::Instant::now() + cfg.drain),
            _ = tokio::time::sleep_until(drain_end), if draining.is_some() => {}
        }
    }
    f.lost = f.sent - f.received;
    f.missing = (0..f.sent).filter(|&q| !got.get(q as usize).copied().unwrap_or(false)).take(16).collect();
    f
}

async fn tcp_client(
    s: TcpStream,
    ue: Ipv4Addr,
    cfg: ContinuityConfig,
    mut stop: watch::Receiver<bool>,
    total: Arc<std::sync::atomic::AtomicU64>,
) -> FlowReport {
    let mut f = FlowReport::new(ue, "tcp");
    f.local_port = s.local_addr().map_or(0, |a| a.port());
    // The fd stays open while either half lives (`wr` lives to the end).
    let fd = s.as_raw_fd();
    let (mut rd, mut wr) = s.into_split();
    let record = cfg.tcp_record;
    let echoed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let echoed_r = echoed.clone();
    let reader = tokio::spawn(async move {
        // Every record echoed back, whole and in order.
        let mut rec = vec![0u8; record];
        let (mut n, mut bad) = (0u64, None);
        while rd.read_exact(&mut rec).await.is_ok() {
            let seq = u64::from_be_bytes(rec[..8].try_into().expect("8 octets"));
            if seq != n || rec[8..].iter().any(|&b| b != (seq as u8)) {
                bad.get_or_insert(format!("record {n} came back as {seq}"));
            }
            n += 1;
            echoed_r.store(n, std::sync::atomic::Ordering::Relaxed);
            total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        (n, bad)
    });
    let mut tick = tokio::time::interval(cfg.tcp_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rec = vec![0u8; record];
    loop {
        tokio::select! {
            _ = tick.tick() => {
                rec[..8].copy_from_slice(&f.sent.to_be_bytes());
                rec[8..].fill(f.sent as u8);
                if let Err(e) = wr.write_all(&rec).await {
                    f.error.get_or_insert(format!("write: {e}"));
                    break;
                }
                f.sent += 1;
            }
            _ = stop.changed() => break,
        }
    }
    // Every record echoed, then a quiet spell so that a tail-loss probe
    // and the peer's D-SACK for it are both done; the counters are read
    // before the FIN (whose own retransmission is not the path's doing).
    Streams::wait_until(&echoed, f.sent, cfg.drain).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // SAFETY: `fd` is the stream's, open while `wr` lives.
    let (retrans, ooo) = tcp_counters(&unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) });
    f.retransmitted += retrans;
    f.reordered_downlink += ooo;
    let _ = wr.shutdown().await;
    match tokio::time::timeout(cfg.drain, reader).await {
        Ok(Ok((n, bad))) => {
            f.received = n;
            if let Some(b) = bad {
                f.error.get_or_insert(b);
            }
        }
        Ok(Err(e)) => f.error = Some(format!("reader: {e}")),
        Err(_) => f.error = Some(format!("the echoes of {} records did not all come back in time", f.sent)),
    }
    f
}

/// The median of `n` UDP round trips from `ue` (a socket in `ran_ns`) to
/// the flows' echo server; None when no echo came back. Blocking.
pub fn udp_rtt(ran_ns: &str, ue: Ipv4Addr, server: SocketAddrV4, n: u32) -> std::io::Result<Option<Duration>> {
    let s = run_in(ran_ns, move || sock::udp_bind(SocketAddrV4::new(ue, 0), 1 << 16)).map_err(bad)??;
    s.connect(server)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut rtts = Vec::new();
    let mut buf = [0u8; 64];
    for seq in 0..u64::from(n) {
        let t0 = std::time::Instant::now();
        s.send(&seq.to_be_bytes())?;
        // Late echoes of earlier probes are skipped.
        while let Ok(k) = s.recv(&mut buf) {
            if k >= 8 && u64::from_be_bytes(buf[..8].try_into().expect("8 octets")) == seq {
                rtts.push(t0.elapsed());
                break;
            }
        }
    }
    rtts.sort();
    Ok(rtts.get(rtts.len() / 2).copied())
}
