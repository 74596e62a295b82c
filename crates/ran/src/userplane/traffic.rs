//! The traffic driver: ICMP echo, UDP echo and TCP bulk transfers between
//! UE addresses (sockets opened in the RAN namespace, bound to the UE
//! address, so they go through the eNB user plane) and servers it starts
//! in the data-network namespace and stops afterwards.
//!
//! Blocking sockets on plain threads (one per UE and kind), each opened in
//! its namespace by [`mobicore_netns::run_in`]; the async entry point
//! waits for them on the blocking pool.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mobicore_netns::{run_in, sock, spawn_in, NetnsError};
use serde::Serialize;

use super::icmp;
use crate::report::LatencySummary;

/// What traffic to run.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficConfig {
    /// Namespace where the UE addresses live (the RAN).
    pub ran_ns: String,
    /// Namespace and address of the servers (the data network).
    pub dn_ns: String,
    pub dn_addr: Ipv4Addr,
    /// ICMP echo requests per UE (0: none), their payload, and the gap.
    pub icmp_count: u32,
    pub icmp_payload: usize,
    pub icmp_interval: Duration,
    /// UDP echo datagrams per UE (0: none) and their payload size.
    pub udp_count: u32,
    pub udp_payload: usize,
    pub udp_port: u16,
    /// TCP bytes each UE sends (uplink) and receives (downlink); 0: none.
    pub tcp_bytes: u64,
    pub tcp_port: u16,
    /// How long one echo reply is awaited before it counts as lost, and
    /// the guard time of a TCP transfer.
    pub reply_timeout: Duration,
    pub tcp_timeout: Duration,
}

impl TrafficConfig {
    pub fn new(ran_ns: &str, dn_ns: &str, dn_addr: Ipv4Addr) -> Self {
        TrafficConfig {
            ran_ns: ran_ns.into(),
            dn_ns: dn_ns.into(),
            dn_addr,
            icmp_count: 20,
            icmp_payload: 56,
            icmp_interval: Duration::from_millis(10),
            udp_count: 100,
            udp_payload: 512,
            udp_port: 7001,
            tcp_bytes: 8 << 20,
            tcp_port: 7002,
            reply_timeout: Duration::from_secs(1),
            tcp_timeout: Duration::from_secs(30),
        }
    }
}

/// Request/response results of one kind (ICMP or UDP), all UEs together.
/// Round-trip times in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EchoReport {
    pub sent: u64,
    pub received: u64,
    /// Lost fraction, 0.0..=1.0.
    pub loss: f64,
    pub rtt_us: LatencySummary,
}

impl EchoReport {
    fn of(sent: u64, rtts: &[u64]) -> Self {
        let received = rtts.len() as u64;
        let loss = if sent == 0 { 0.0 } else { 1.0 - received as f64 / sent as f64 };
        EchoReport { sent, received, loss, rtt_us: LatencySummary::of(rtts) }
    }
}

/// TCP bulk transfer results of one direction, all UEs at once.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TcpReport {
    /// Transfers that completed out of those started (one per UE).
    pub completed: u64,
    pub started: u64,
    /// Octets moved by the completed transfers.
    pub bytes: u64,
    /// From the first start to the last end.
    pub elapsed: Duration,
    /// bytes * 8 / elapsed, in Mbit/s.
    pub mbit_s: f64,
}

/// Everything [`run_traffic`] measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TrafficReport {
    pub ues: usize,
    pub icmp: EchoReport,
    pub udp: EchoReport,
    pub tcp_uplink: TcpReport,
    pub tcp_downlink: TcpReport,
    /// Failures (socket errors, transfers that did not complete).
    pub errors: Vec<String>,
}

/// Run ICMP echo, then UDP echo, then TCP uplink and downlink bulk
/// transfers, each for all `ue_ips` at once, against servers started in
/// `cfg.dn_ns`. The UE addresses must be assigned and tunnelled (a running
/// [`super::UserPlane`]). Setup failures (namespace, server bind) are
/// errors; lost traffic is in the report.
pub async fn run_traffic(cfg: TrafficConfig, ue_ips: Vec<Ipv4Addr>) -> Result<TrafficReport, NetnsError> {
    tokio::task::spawn_blocking(move || run_blocking(&cfg, &ue_ips))
        .await
        .map_err(|_| NetnsError::Panicked("traffic driver".into()))?
}

fn run_blocking(cfg: &TrafficConfig, ues: &[Ipv4Addr]) -> Result<TrafficReport, NetnsError> {
    let mut report = TrafficReport { ues: ues.len(), ..Default::default() };
    let servers = Servers::start(cfg)?;
    if cfg.icmp_count > 0 {
        let (sent, rtts) = per_ue(cfg, ues, &mut report.errors, icmp_client);
        report.icmp = EchoReport::of(sent, &rtts);
    }
    if cfg.udp_count > 0 {
        let (sent, rtts) = per_ue(cfg, ues, &mut report.errors, udp_client);
        report.udp = EchoReport::of(sent, &rtts);
    }
    if cfg.tcp_bytes > 0 {
        report.tcp_uplink = tcp_round(cfg, ues, true, &mut report.errors);
        report.tcp_downlink = tcp_round(cfg, ues, false, &mut report.errors);
    }
    servers.stop();
    Ok(report)
}

type EchoFn = fn(&TrafficConfig, Ipv4Addr, u16) -> std::io::Result<(u64, Vec<u64>)>;

/// One thread per UE in the RAN namespace; the sent count and every RTT.
fn per_ue(cfg: &TrafficConfig, ues: &[Ipv4Addr], errors: &mut Vec<String>, f: EchoFn) -> (u64, Vec<u64>) {
    let handles: Vec<_> = ues
        .iter()
        .enumerate()
        .map(|(i, &ue)| {
            let c = cfg.clone();
            let id = (std::process::id() as u16).wrapping_add(i as u16);
            (ue, spawn_in(&cfg.ran_ns, "ue-echo", move || f(&c, ue, id)))
        })
        .collect();
    let (mut sent, mut rtts) = (0, Vec::new());
    for (ue, h) in handles {
        match h
            .map_err(NetnsError::from)
            .and_then(|h| h.join().map_err(|_| NetnsError::Panicked(cfg.ran_ns.clone()))?)
        {
            Ok(Ok((s, r))) => {
                sent += s;
                rtts.extend(r);
            }
            Ok(Err(e)) => errors.push(format!("{ue}: {e}")),
            Err(e) => errors.push(format!("{ue}: {e}")),
        }
    }
    (sent, rtts)
}

/// Stop-and-wait ICMP echo from `ue` over a raw socket.
fn icmp_client(cfg: &TrafficConfig, ue: Ipv4Addr, id: u16) -> std::io::Result<(u64, Vec<u64>)> {
    let s = sock::icmp_raw(ue)?;
    let to = SocketAddrV4::new(cfg.dn_addr, 0).into();
    let mut rtts = Vec::new();
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
    for seq in 0..cfg.icmp_count {
        let seq = seq as u16;
        let start = Instant::now();
        s.send_to(&icmp::echo_request(id, seq, cfg.icmp_payload), &to)?;
        let deadline = start + cfg.reply_timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
            s.set_read_timeout(Some(left))?;
            let n = match s.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
                Err(e) => return Err(e),
            };
            // SAFETY: recv initialised the first n octets.
            let got: Vec<u8> = buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
            if icmp::parse_echo_reply(&got) == Some((cfg.dn_addr, id, seq)) {
                rtts.push(start.elapsed().as_micros() as u64);
                break;
            }
        }
        std::thread::sleep(cfg.icmp_interval);
    }
    Ok((u64::from(cfg.icmp_count), rtts))
}

/// Stop-and-wait UDP echo from `ue`: the payload starts with the sequence
/// number, so late replies are not mistaken for the current one.
fn udp_client(cfg: &TrafficConfig, ue: Ipv4Addr, _id: u16) -> std::io::Result<(u64, Vec<u64>)> {
    let s = UdpSocket::bind((ue, 0))?;
    s.connect((cfg.dn_addr, cfg.udp_port))?;
    s.set_read_timeout(Some(cfg.reply_timeout))?;
    let mut msg = vec![0xa5u8; cfg.udp_payload.max(4)];
    let mut buf = vec![0u8; msg.len() + 64];
    let mut rtts = Vec::new();
    for seq in 0..cfg.udp_count {
        msg[..4].copy_from_slice(&seq.to_be_bytes());
        let start = Instant::now();
        s.send(&msg)?;
        loop {
            match s.recv(&mut buf) {
                Ok(n) if buf[..n] == msg[..] => {
                    rtts.push(start.elapsed().as_micros() as u64);
                    break;
                }
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
                Err(e) => return Err(e),
            }
        }
    }
    Ok((u64::from(cfg.udp_count), rtts))
}

/// All UEs transfer `tcp_bytes` at once, up or down.
fn tcp_round(cfg: &TrafficConfig, ues: &[Ipv4Addr], uplink: bool, errors: &mut Vec<String>) -> TcpReport {
    let start = Instant::now();
    let handles: Vec<_> = ues
        .iter()
        .map(|&ue| {
            let c = cfg.clone();
            (ue, spawn_in(&cfg.ran_ns, "ue-tcp", move || tcp_client(&c, ue, uplink)))
        })
        .collect();
    let mut r = TcpReport { started: ues.len() as u64, ..Default::default() };
    let mut last = start;
    for (ue, h) in handles {
        let res =
            h.map_err(NetnsError::from).and_then(|h| h.join().map_err(|_| NetnsError::Panicked(cfg.ran_ns.clone()))?);
        match res {
            Ok(Ok((bytes, end))) => {
                r.completed += 1;
                r.bytes += bytes;
                last = last.max(end);
            }
            Ok(Err(e)) => errors.push(format!("{ue}: TCP {}: {e}", if uplink { "uplink" } else { "downlink" })),
            Err(e) => errors.push(format!("{ue}: {e}")),
        }
    }
    r.elapsed = last.duration_since(start);
    if r.elapsed > Duration::ZERO {
        r.mbit_s = r.bytes as f64 * 8.0 / r.elapsed.as_secs_f64() / 1e6;
    }
    r
}

/// One transfer: a 9-octet request (direction, length), then the data;
/// uplink ends with the server's 8-octet count of what it received.
fn tcp_client(cfg: &TrafficConfig, ue: Ipv4Addr, uplink: bool) -> std::io::Result<(u64, Instant)> {
    let mut c = sock::tcp_connect_from(
        SocketAddrV4::new(ue, 0),
        SocketAddrV4::new(cfg.dn_addr, cfg.tcp_port),
        cfg.tcp_timeout,
    )?;
    c.set_read_timeout(Some(cfg.tcp_timeout))?;
    c.set_write_timeout(Some(cfg.tcp_timeout))?;
    let mut req = [0u8; 9];
    req[0] = u8::from(uplink);
    req[1..].copy_from_slice(&cfg.tcp_bytes.to_be_bytes());
    c.write_all(&req)?;
    if uplink {
        write_n(&mut c, cfg.tcp_bytes)?;
        c.shutdown(Shutdown::Write)?;
        let mut ack = [0u8; 8];
        c.read_exact(&mut ack)?;
        let got = u64::from_be_bytes(ack);
        if got != cfg.tcp_bytes {
            return Err(std::io::Error::other(format!("server received {got} of {} octets", cfg.tcp_bytes)));
        }
        Ok((got, Instant::now()))
    } else {
        let got = std::io::copy(&mut c, &mut std::io::sink())?;
        if got != cfg.tcp_bytes {
            return Err(std::io::Error::other(format!("received {got} of {} octets", cfg.tcp_bytes)));
        }
        Ok((got, Instant::now()))
    }
}

fn write_n(c: &mut TcpStream, mut n: u64) -> std::io::Result<()> {
    let chunk = vec![0x5au8; 64 * 1024];
    while n > 0 {
        let k = chunk.len().min(n as usize);
        c.write_all(&chunk[..k])?;
        n -= k as u64;
    }
    Ok(())
}

/// The UDP echo and TCP servers in the data network.
struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<(), NetnsError>>>,
}

const POLL: Duration = Duration::from_millis(50);

impl Servers {
    fn start(cfg: &TrafficConfig) -> Result<Servers, NetnsError> {
        let (dn, up, tp) = (cfg.dn_addr, cfg.udp_port, cfg.tcp_port);
        let (udp, tcp) = run_in(&cfg.dn_ns, move || -> std::io::Result<_> {
            let u = UdpSocket::bind((dn, up))?;
            u.set_read_timeout(Some(POLL))?;
            let t = TcpListener::bind((dn, tp))?;
            t.set_nonblocking(true)?;
            Ok((u, t))
        })??;
        let stop = Arc::new(AtomicBool::new(false));
        let s1 = stop.clone();
        let udp_thread = std::thread::Builder::new().name("dn-udp-echo".into()).spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !s1.load(Ordering::Relaxed) {
                if let Ok((n, from)) = udp.recv_from(&mut buf) {
                    let _ = udp.send_to(&buf[..n], from);
                }
            }
            Ok(())
        })?;
        let s2 = stop.clone();
        let tcp_thread = std::thread::Builder::new().name("dn-tcp".into()).spawn(move || {
            let mut conns = Vec::new();
            while !s2.load(Ordering::Relaxed) {
                match tcp.accept() {
                    Ok((c, _)) => conns.push(std::thread::spawn(move || serve_tcp(c))),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for c in conns {
                let _ = c.join();
            }
            Ok(())
        })?;
        Ok(Servers { stop, threads: vec![udp_thread, tcp_thread] })
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn serve_tcp(mut c: TcpStream) -> std::io::Result<()> {
    c.set_nonblocking(false)?;
    c.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut req = [0u8; 9];
    c.read_exact(&mut req)?;
    let n = u64::from_be_bytes(req[1..].try_into().expect("8 octets"));
    if req[0] == 1 {
        let got = std::io::copy(&mut c, &mut std::io::sink())?;
        c.write_all(&got.to_be_bytes())?;
    } else {
        write_n(&mut c, n)?;
        c.shutdown(Shutdown::Write)?;
    }
    Ok(())
}
