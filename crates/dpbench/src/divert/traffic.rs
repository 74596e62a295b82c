//! The traffic of `bench divert`, all of it from real sockets in the UE's
//! and the server's namespaces (created there, then driven from ordinary
//! threads): a paced TCP transfer (what iperf3 does for seed 000 Figs
//! 12-15), a paced, sequence-numbered UDP stream whose losses are counted
//! (Fig. 16), and UDP echo round trips (Figs 10-11).

use super::topo::{SERVER, UE};
use mobicore_netns::run_in;
use mobicore_netns::sock::{tcp_connect_from, udp_bind};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const ECHO_PORT: u16 = 7;
pub const TCP_PORT: u16 = 5201;
pub const UDP_PORT: u16 = 5202;
/// UDP payload: a 1400-octet inner packet (the traffic ends' MTU).
pub const UDP_PAYLOAD: usize = 1400 - 28;
/// How long a probe waits for its echo.
const PROBE_WAIT: Duration = Duration::from_millis(50);
const IO_WAIT: Duration = Duration::from_secs(5);

/// Which way the measured traffic flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// UE to server (eNB to anchor).
    Uplink,
    /// Server to UE.
    Downlink,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Uplink => "uplink",
            Direction::Downlink => "downlink",
        }
    }
}

/// Real-time priorities (SCHED_FIFO) of the traffic ends: below the NAPI
/// threads, echo and probes (50, [`crate::cpus::realtime`]), receivers
/// above senders, so that a shared host's other processes take no share of
/// the measured path and a sender beyond saturation starves nobody of
/// ours. A failure leaves the thread as it was.
const SENDER_PRIORITY: i32 = 5;
const RECEIVER_PRIORITY: i32 = 20;

/// Puts the calling thread at real-time `priority`.
fn fifo(priority: i32) {
    let p = libc::sched_param { sched_priority: priority };
    // SAFETY: a valid sched_param for the calling thread (0).
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "traffic thread stays SCHED_OTHER");
    }
}

/// Sends at `bps` bits per second (None: as fast as the path takes) for
/// `dur` in writes of at most `chunk` octets; `send` returns the octets it
/// took. The octets sent.
fn paced(
    bps: Option<f64>,
    dur: Duration,
    chunk: usize,
    mut send: impl FnMut(usize) -> std::io::Result<usize>,
) -> std::io::Result<u64> {
    let t0 = Instant::now();
    let mut sent = 0u64;
    loop {
        let now = t0.elapsed();
        if now >= dur {
            return Ok(sent);
        }
        let due = bps.map_or(f64::INFINITY, |b| b / 8.0 * now.as_secs_f64()) - sent as f64;
        if due < chunk as f64 {
            // The next chunk is due in (chunk - due) octets' time.
            let wait = bps.map_or(0.0, |b| (chunk as f64 - due) * 8.0 / b);
            std::thread::sleep(Duration::from_secs_f64(wait.min(0.001)));
            continue;
        }
        sent += send(chunk)? as u64;
    }
}

/// One TCP transfer: what the receiver got, over its first-to-last-octet
/// time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transfer {
    pub octets: u64,
    pub elapsed: Duration,
}

impl Transfer {
    pub fn mbps(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.octets as f64 * 8.0 / s / 1e6
        } else {
            0.0
        }
    }
}

/// A TCP connection from the UE (in `ue_ns`) to the server (in `srv_ns`),
/// then `dur` of data in `dir` paced at `bps`.
pub fn tcp(ue_ns: &str, srv_ns: &str, dir: Direction, bps: Option<f64>, dur: Duration) -> std::io::Result<Transfer> {
    let listener = run_in(srv_ns, || TcpListener::bind(SocketAddrV4::new(SERVER, TCP_PORT))).map_err(netns)??;
    let client =
        run_in(ue_ns, || tcp_connect_from(SocketAddrV4::new(UE, 0), SocketAddrV4::new(SERVER, TCP_PORT), IO_WAIT))
            .map_err(netns)??;
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + IO_WAIT;
    let server = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(e),
        }
    };
    server.set_nonblocking(false)?;
    let (mut tx, mut rx) = match dir {
        Direction::Uplink => (client, server),
        Direction::Downlink => (server, client),
    };
    tx.set_write_timeout(Some(IO_WAIT))?;
    rx.set_read_timeout(Some(IO_WAIT))?;
    std::thread::scope(|s| {
        let reader = s.spawn(move || {
            fifo(RECEIVER_PRIORITY);
            receive(&mut rx)
        });
        let sender = s.spawn(move || {
            fifo(SENDER_PRIORITY);
            let buf = vec![0x5au8; 64 * 1024];
            let sent = paced(bps, dur, 16 * 1024, |n| tx.write(&buf[..n]));
            let _ = tx.shutdown(Shutdown::Write);
            sent
        });
        sender.join().map_err(|_| std::io::Error::other("TCP sender panicked"))??;
        reader.join().map_err(|_| std::io::Error::other("TCP receiver panicked"))?
    })
}

fn receive(rx: &mut TcpStream) -> std::io::Result<Transfer> {
    let mut buf = vec![0u8; 256 * 1024];
    let (mut first, mut last, mut octets) = (None, Instant::now(), 0u64);
    loop {
        let n = rx.read(&mut buf)?;
        if n == 0 {
            break;
        }
        last = Instant::now();
        first.get_or_insert(last);
        octets += n as u64;
    }
    Ok(Transfer { octets, elapsed: first.map_or(Duration::ZERO, |f| last - f) })
}

/// One UDP stream: datagrams sent and received, the sender's rate, and
/// the round trips of the probes that ran beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    pub sent: u64,
    pub received: u64,
    pub sent_mbps: f64,
    pub rtts_us: Vec<f64>,
}

impl Stream {
    pub fn loss_pct(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        100.0 * self.sent.saturating_sub(self.received) as f64 / self.sent as f64
    }
}

/// A sequence-numbered UDP stream for `dur` in `dir` at `bps`, between the
/// UE and the server; the server sends to `ue_at_server` (the UE's address
/// as the anchor behind it knows it). Round-trip probes (one per
/// millisecond, from a real-time thread) run beside it. `run` tags this stream's datagrams.
pub fn udp(
    ue_ns: &str,
    srv_ns: &str,
    dir: Direction,
    bps: f64,
    dur: Duration,
    ue_at_server: Ipv4Addr,
    run: u32,
) -> std::io::Result<Stream> {
    let big = 8 << 20;
    let ue = run_in(ue_ns, || udp_bind(SocketAddrV4::new(UE, UDP_PORT), big)).map_err(netns)??;
    let srv = run_in(srv_ns, || udp_bind(SocketAddrV4::new(SERVER, UDP_PORT), big)).map_err(netns)??;
    let probe = prober(ue_ns)?;
    let (tx, rx, to) = match dir {
        Direction::Uplink => (ue, srv, SocketAddrV4::new(SERVER, UDP_PORT)),
        Direction::Downlink => (srv, ue, SocketAddrV4::new(ue_at_server, UDP_PORT)),
    };
    rx.set_read_timeout(Some(Duration::from_millis(20)))?;
    tx.connect(to)?;
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let counter = s.spawn(|| {
            fifo(RECEIVER_PRIORITY);
            let mut buf = [0u8; 2048];
            let mut got = 0u64;
            loop {
                match rx.recv(&mut buf) {
                    Ok(n) if n >= 12 && buf[..4] == run.to_be_bytes() => got += 1,
                    Ok(_) => {}
                    Err(_) if stop.load(Ordering::Relaxed) => return got,
                    Err(_) => {}
                }
            }
        });
        let prober = s.spawn(|| {
            crate::cpus::realtime(0);
            let mut rtts = Vec::new();
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                seq += 1;
                if let Some(us) = probe.once(seq) {
                    rtts.push(us);
                }
                std::thread::sleep(Duration::from_millis(1).saturating_sub(t.elapsed()));
            }
            rtts
        });
        let sender = s.spawn(|| {
            fifo(SENDER_PRIORITY);
            let mut bufs = vec![[0u8; UDP_PAYLOAD]; BATCH];
            for b in &mut bufs {
                b[..4].copy_from_slice(&run.to_be_bytes());
            }
            let mut seq = 0u64;
            let sent = paced(Some(bps), dur, UDP_PAYLOAD * BATCH, |_| {
                for (i, b) in bufs.iter_mut().enumerate() {
                    b[4..12].copy_from_slice(&(seq + i as u64).to_be_bytes());
                }
                // A full queue on the way out is a loss like any other.
                let n = match send_batch(&tx, &bufs) {
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) => BATCH,
                    Err(e) => return Err(e),
                };
                seq += n as u64;
                Ok(n * UDP_PAYLOAD)
            });
            (sent, seq)
        });
        let (sent, seq) = sender.join().map_err(|_| std::io::Error::other("UDP sender panicked"))?;
        let elapsed = t0.elapsed();
        // What is still on its way arrives within this.
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        let received = counter.join().map_err(|_| std::io::Error::other("UDP receiver panicked"))?;
        let rtts_us = prober.join().map_err(|_| std::io::Error::other("prober panicked"))?;
        sent?;
        Ok(Stream {
            sent: seq,
            received,
            sent_mbps: seq as f64 * UDP_PAYLOAD as f64 * 8.0 / elapsed.as_secs_f64() / 1e6,
            rtts_us,
        })
    })
}

/// Datagrams per `sendmmsg(2)` of the UDP stream.
const BATCH: usize = 32;

/// Sends `bufs` on connected `sock` with one system call; how many went.
fn send_batch(sock: &UdpSocket, bufs: &[[u8; UDP_PAYLOAD]]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut iov: Vec<libc::iovec> =
        bufs.iter().map(|b| libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() }).collect();
    // SAFETY: a zeroed mmsghdr is valid (no address, no control data).
    let mut hdrs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
            h
        })
        .collect();
    // SAFETY: every header points at one iovec of a live buffer; the kernel
    // only reads them (and writes msg_len) during the call.
    let n = unsafe { libc::sendmmsg(sock.as_raw_fd(), hdrs.as_mut_ptr(), hdrs.len() as libc::c_uint, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// A UDP socket of the UE that sends probes to the server's echo.
pub struct Prober {
    sock: UdpSocket,
}

/// A prober in the UE's namespace.
pub fn prober(ue_ns: &str) -> std::io::Result<Prober> {
    let sock = run_in(ue_ns, || UdpSocket::bind(SocketAddrV4::new(UE, 0))).map_err(netns)??;
    sock.set_read_timeout(Some(PROBE_WAIT))?;
    Ok(Prober { sock })
}

impl Prober {
    /// One round trip, us (None: no echo of `seq` within the wait; late
    /// echoes of earlier probes are skipped by their sequence number).
    pub fn once(&self, seq: u64) -> Option<f64> {
        let mut buf = [0u8; 64];
        let t = Instant::now();
        self.sock.send_to(&seq.to_be_bytes(), SocketAddrV4::new(SERVER, ECHO_PORT)).ok()?;
        while t.elapsed() < PROBE_WAIT {
            match self.sock.recv(&mut buf) {
                Ok(8) if buf[..8] == seq.to_be_bytes() => return Some(t.elapsed().as_secs_f64() * 1e6),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// `n` probes back to back from a real-time thread; the round trips
    /// that came back, in order.
    pub fn block(&self, first_seq: u64, n: usize) -> Vec<f64> {
        std::thread::scope(|s| {
            s.spawn(|| {
                crate::cpus::realtime(0);
                (0..n as u64).filter_map(|i| self.once(first_seq + i)).collect()
            })
            .join()
            .unwrap_or_default()
        })
    }
}

/// A UDP echo server on [`SERVER`]:[`ECHO_PORT`] in a namespace, on a
/// real-time thread (as the probes are: a round trip should not wait
/// behind a shared host's other processes); stopped and joined on drop.
pub struct Echo {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), mobicore_netns::NetnsError>>>,
}

impl Echo {
    pub fn start(ns: &str) -> std::io::Result<Echo> {
        let sock = run_in(ns, || UdpSocket::bind(SocketAddrV4::new(SERVER, ECHO_PORT))).map_err(netns)??;
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new().name("divert-echo".into()).spawn(move || {
            crate::cpus::realtime(0);
            let mut buf = [0u8; 2048];
            while !s.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(&buf[..n], from);
                }
            }
            Ok(())
        })?;
        Ok(Echo { stop, thread: Some(thread) })
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn netns(e: mobicore_netns::NetnsError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_sends_what_is_due() {
        // 80 Mbit/s for 50 ms is 500,000 octets, in 10,000-octet chunks.
        let mut chunks = 0;
        let sent = paced(Some(80e6), Duration::from_millis(50), 10_000, |n| {
            chunks += 1;
            Ok(n)
        })
        .unwrap();
        assert!(sent <= 510_000, "never ahead of the rate by more than a chunk: {sent}");
        assert_eq!(sent, chunks * 10_000);
    }

    #[test]
    fn loss_counts_what_did_not_arrive() {
        let s = Stream { sent: 200, received: 150, sent_mbps: 1.0, rtts_us: vec![] };
        assert_eq!(s.loss_pct(), 25.0);
        assert_eq!(Stream { sent: 0, ..s }.loss_pct(), 0.0);
    }
}
