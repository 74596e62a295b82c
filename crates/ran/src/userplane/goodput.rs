//! TCP goodput of UEs: a server in the data network streams to every UE
//! that connects (downlink bulk, optionally paced), and a window measures
//! the octets each UE's application reads in a given time. Sockets bound
//! to the UE addresses in the RAN namespace, so that every segment goes
//! through the eNB user plane, the core's UPF and whatever the UEs do
//! meanwhile (handovers, idle mode). Blocking sockets on plain threads.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mobicore_netns::{run_in, sock, spawn_in, NetnsError};

/// Where the streams run.
#[derive(Debug, Clone)]
pub struct GoodputConfig {
    pub ran_ns: String,
    pub dn_ns: String,
    pub dn_addr: Ipv4Addr,
    pub port: u16,
    /// Each stream's sending rate cap, in Mbit/s; `None`: as fast as TCP
    /// goes.
    pub mbit_per_ue: Option<f64>,
    /// Guard time of the connection and of each read.
    pub timeout: Duration,
}

impl GoodputConfig {
    pub fn new(ran_ns: &str, dn_ns: &str, dn_addr: Ipv4Addr) -> Self {
        GoodputConfig {
            ran_ns: ran_ns.into(),
            dn_ns: dn_ns.into(),
            dn_addr,
            port: 7003,
            mbit_per_ue: None,
            timeout: Duration::from_secs(30),
        }
    }
}

/// The server in the data network: every connection gets an endless
/// stream until the UE closes it.
pub struct GoodputServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const CHUNK: usize = 16 * 1024;

impl GoodputServer {
    pub fn start(cfg: &GoodputConfig) -> Result<GoodputServer, NetnsError> {
        let (dn, port) = (cfg.dn_addr, cfg.port);
        let listener = run_in(&cfg.dn_ns, move || -> std::io::Result<_> {
            let t = TcpListener::bind((dn, port))?;
            t.set_nonblocking(true)?;
            Ok(t)
        })??;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let rate = cfg.mbit_per_ue.filter(|r| *r > 0.0).map(|r| r * 1e6 / 8.0);
        let thread = std::thread::Builder::new().name("dn-goodput".into()).spawn(move || {
            let mut conns = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        let s = s.clone();
                        conns.push(std::thread::spawn(move || {
                            let _ = stream_to(c, rate, &s);
                        }))
                    }
                    // Polling accept: the stop flag is checked between.
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for c in conns {
                let _ = c.join();
            }
        })?;
        Ok(GoodputServer { stop, thread: Some(thread) })
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for GoodputServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Write to `c` until it fails (the UE closed) or `stop`, at most `rate`
/// octets per second on average.
fn stream_to(mut c: TcpStream, rate: Option<f64>, stop: &AtomicBool) -> std::io::Result<()> {
    c.set_nonblocking(false)?;
    c.set_write_timeout(Some(Duration::from_millis(200)))?;
    if let Some(r) = rate {
        // The kernel paces the segments too (TCP internal pacing): a
        // catch-up after a stall leaves at twice the rate, not at once, so
        // the stream stays inside the UE's AMBR with the numbered
        // datagrams beside it.
        let bytes_per_s = (2.0 * r).min(u32::MAX as f64) as u32;
        mobicore_netns::sock::set_max_pacing_rate(&c, bytes_per_s)?;
    }
    let chunk = vec![0xa5u8; CHUNK];
    let mut start = Instant::now();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(r) = rate {
            // Pacing: the next chunk leaves when the average allows it; a
            // stall (a loaded host, a handover) is made up for at most
            // MAX_DEBT's worth.
            let due = start + Duration::from_secs_f64(sent as f64 / r);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            } else if now - due > MAX_DEBT {
                start += now - due - MAX_DEBT;
            }
        }
        match c.write(&chunk) {
            Ok(0) => break,
            Ok(n) => sent += n as u64,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// How far a paced stream catches up after a stall.
const MAX_DEBT: Duration = Duration::from_millis(50);

/// One UE's window: octets read and the time they were read over.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Goodput {
    pub ue: Option<Ipv4Addr>,
    pub octets: u64,
    pub elapsed: Duration,
}

impl Goodput {
    pub fn mbit_s(&self) -> f64 {
        if self.elapsed.is_zero() {
            return 0.0;
        }
        self.octets as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// One UE's reader thread (spawned in the RAN namespace), or why it
/// could not start.
type Reader = std::io::Result<JoinHandle<Result<std::io::Result<Goodput>, NetnsError>>>;

/// Running windows, one connection per UE; [`Window::join`] waits for
/// them.
pub struct Window {
    handles: Vec<(Ipv4Addr, Reader)>,
}

/// Every UE of `ues` connects to the server and reads for `window` (from
/// its connection's establishment on).
pub fn start_window(cfg: &GoodputConfig, ues: &[Ipv4Addr], window: Duration) -> Window {
    let handles = ues
        .iter()
        .map(|&ue| {
            let c = cfg.clone();
            (ue, spawn_in(&cfg.ran_ns, "ue-goodput", move || read_for(&c, ue, window)))
        })
        .collect();
    Window { handles }
}

impl Window {
    /// Each UE's goodput, or why it has none.
    pub fn join(self) -> Vec<Result<Goodput, String>> {
        self.handles
            .into_iter()
            .map(|(ue, h)| {
                let h = h.map_err(|e| format!("{ue}: {e}"))?;
                match h.join() {
                    Ok(Ok(Ok(g))) => Ok(g),
                    Ok(Ok(Err(e))) => Err(format!("{ue}: {e}")),
                    Ok(Err(e)) => Err(format!("{ue}: {e}")),
                    Err(_) => Err(format!("{ue}: reader panicked")),
                }
            })
            .collect()
    }
}

fn read_for(cfg: &GoodputConfig, ue: Ipv4Addr, window: Duration) -> std::io::Result<Goodput> {
    let mut c =
        sock::tcp_connect_from(SocketAddrV4::new(ue, 0), SocketAddrV4::new(cfg.dn_addr, cfg.port), cfg.timeout)?;
    let start = Instant::now();
    let end = start + window;
    let mut buf = vec![0u8; 64 * 1024];
    let mut octets = 0u64;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        // Reads wake at the window's end at the latest.
        c.set_read_timeout(Some((end - now).max(Duration::from_millis(1))))?;
        match c.read(&mut buf) {
            Ok(0) => return Err(std::io::Error::other("the server closed the stream")),
            Ok(n) => octets += n as u64,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
    }
    let elapsed = start.elapsed();
    let _ = c.shutdown(std::net::Shutdown::Both);
    Ok(Goodput { ue: Some(ue), octets, elapsed })
}

/// The ratio of two goodputs (moving / not moving), 0 without a baseline.
pub fn ratio(moving: f64, still: f64) -> f64 {
    if still > 0.0 {
        moving / still
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goodput_and_ratio() {
        let g = Goodput { ue: None, octets: 1_250_000, elapsed: Duration::from_secs(1) };
        assert!((g.mbit_s() - 10.0).abs() < 1e-9);
        assert_eq!(Goodput::default().mbit_s(), 0.0);
        assert_eq!(ratio(9.5, 10.0), 0.95);
        assert_eq!(ratio(1.0, 0.0), 0.0);
    }
}
