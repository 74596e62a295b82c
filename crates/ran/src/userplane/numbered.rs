//! Numbered streams through idle mode, paging and handovers (issue 10):
//! the data network sends every UE a numbered UDP datagram per interval
//! whatever the UE's state, and notes when it sent each; the UE end notes
//! each number and when it came. Uplink goes in numbered bursts
//! ([`Numbered::uplink`]) to the same server, which notes them per UE.
//!
//! [`StreamCheck`] counts loss, duplicates and reordering of a stream;
//! [`Numbered::report`] gives per UE the downlink's arrivals, from which
//! [`DownlinkLog::largest_gap`] (a handover's interruption) and
//! [`DownlinkLog::largest_delay`] (a paged UE's first buffered packet)
//! are read.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mobicore_netns::{run_in, sock};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Loss, duplicates and reordering of one UE's numbered stream `0..sent`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StreamCheck {
    pub received: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub reordered: usize,
}

impl StreamCheck {
    pub fn of(seqs: &[u32], sent: u32) -> Self {
        let mut seen = HashSet::new();
        let (mut duplicated, mut reordered, mut highest) = (0, 0, None::<u32>);
        for &s in seqs {
            if !seen.insert(s) {
                duplicated += 1;
                continue;
            }
            if highest.is_some_and(|h| s < h) {
                reordered += 1;
            }
            highest = highest.max(Some(s));
        }
        let lost = (0..sent).filter(|s| !seen.contains(s)).count();
        StreamCheck { received: seqs.len(), lost, duplicated, reordered }
    }

    pub fn clean(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.reordered == 0
    }
}

/// Where the streams run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberedConfig {
    pub ran_ns: String,
    pub dn_ns: String,
    /// The server's address in the data network.
    pub dn_addr: Ipv4Addr,
    pub port: u16,
    /// One downlink datagram per UE per interval.
    pub interval: Duration,
}

impl NumberedConfig {
    pub fn new(ran_ns: &str, dn_ns: &str, dn_addr: Ipv4Addr) -> Self {
        NumberedConfig {
            ran_ns: ran_ns.into(),
            dn_ns: dn_ns.into(),
            dn_addr,
            port: 7201,
            interval: Duration::from_millis(5),
        }
    }
}

/// One UE's downlink as it arrived: (number, arrival) in arrival order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DownlinkLog {
    pub arrivals: Vec<(u32, Instant)>,
}

impl DownlinkLog {
    /// The numbers in arrival order.
    pub fn seqs(&self) -> Vec<u32> {
        self.arrivals.iter().map(|a| a.0).collect()
    }

    /// The longest time without a datagram between two arrivals within
    /// `from..to` (the interruption a handover made).
    pub fn largest_gap(&self, from: Instant, to: Instant) -> Option<Duration> {
        let inside: Vec<Instant> = self.arrivals.iter().map(|a| a.1).filter(|t| *t >= from && *t <= to).collect();
        inside.windows(2).map(|w| w[1].saturating_duration_since(w[0])).max()
    }

    /// The longest a datagram sent within `from..to` took to arrive (for a
    /// UE paged then, its first buffered packet), by the send times `sent`.
    pub fn largest_delay(&self, sent: &[Instant], from: Instant, to: Instant) -> Option<Duration> {
        self.arrivals
            .iter()
            .filter_map(|&(seq, at)| Some((*sent.get(seq as usize)?, at)))
            .filter(|(s, _)| *s >= from && *s <= to)
            .map(|(s, at)| at.saturating_duration_since(s))
            .max()
    }
}

type Arrivals = Arc<Mutex<HashMap<Ipv4Addr, DownlinkLog>>>;

/// Running streams (see the module doc).
pub struct Numbered {
    ues: Vec<Ipv4Addr>,
    server: SocketAddrV4,
    stop: watch::Sender<bool>,
    go: watch::Sender<bool>,
    /// The downlink's task, until it is stopped.
    sender: Option<JoinHandle<()>>,
    tasks: Vec<JoinHandle<()>>,
    ue_socks: Vec<Arc<UdpSocket>>,
    /// When downlink number n was sent (to every UE).
    sent: Arc<Mutex<Vec<Instant>>>,
    arrivals: Arrivals,
    uplink_sent: Vec<u32>,
    uplink_seen: Arc<Mutex<HashMap<Ipv4Addr, Vec<u32>>>>,
}

fn bad(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl Numbered {
    /// The server in `dn_ns` and a socket per UE address of `ues` (held
    /// by the eNB user plane in `ran_ns`); the downlink starts with
    /// [`Numbered::start_downlink`].
    pub async fn start(cfg: &NumberedConfig, ues: &[Ipv4Addr]) -> std::io::Result<Numbered> {
        let server = SocketAddrV4::new(cfg.dn_addr, cfg.port);
        let dn = run_in(&cfg.dn_ns, move || -> std::io::Result<_> {
            let s = sock::udp_bind(server, 16 << 20)?;
            s.set_nonblocking(true)?;
            Ok(s)
        })
        .map_err(bad)??;
        let dn = Arc::new(UdpSocket::from_std(dn)?);
        let arrivals: Arrivals = Arc::default();
        let uplink_seen: Arc<Mutex<HashMap<Ipv4Addr, Vec<u32>>>> = Arc::default();
        let sent: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let (stop, stop_rx) = watch::channel(false);
        let (go, mut go_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let mut ue_socks = Vec::new();
        for &ue in ues {
            let port = cfg.port;
            let s = run_in(&cfg.ran_ns, move || -> std::io::Result<_> {
                let s = sock::udp_bind(SocketAddrV4::new(ue, port), 4 << 20)?;
                s.set_nonblocking(true)?;
                Ok(s)
            })
            .map_err(bad)??;
            let s = Arc::new(UdpSocket::from_std(s)?);
            ue_socks.push(s.clone());
            let arrivals = arrivals.clone();
            arrivals.lock().expect("not poisoned").entry(ue).or_default();
            tasks.push(tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                while let Ok(n) = s.recv(&mut buf).await {
                    let Some(b) = buf.get(..4).filter(|_| n >= 4) else { continue };
                    let seq = u32::from_be_bytes(b.try_into().expect("4 octets"));
                    let mut a = arrivals.lock().expect("not poisoned");
                    a.entry(ue).or_default().arrivals.push((seq, Instant::now()));
                }
            }));
        }
        // The server: uplink noted per UE.
        let (rx, seen) = (dn.clone(), uplink_seen.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = rx.recv_from(&mut buf).await {
                let (SocketAddr::V4(from), true) = (from, n >= 4) else { continue };
                let seq = u32::from_be_bytes(buf[..4].try_into().expect("4 octets"));
                seen.lock().expect("not poisoned").entry(*from.ip()).or_default().push(seq);
            }
        }));
        // The downlink: number n to every UE at the n-th tick.
        let (targets, times, interval, port) = (ues.to_vec(), sent.clone(), cfg.interval, cfg.port);
        let sender = tokio::spawn(async move {
            let mut stop_rx = stop_rx;
            tokio::select! {
                go = go_rx.wait_for(|go| *go) => if go.is_err() { return },
                _ = stop_rx.wait_for(|stop| *stop) => return,
            }
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut payload = [0u8; 64];
            for seq in 0u32.. {
                tick.tick().await;
                if *stop_rx.borrow() {
                    break;
                }
                payload[..4].copy_from_slice(&seq.to_be_bytes());
                times.lock().expect("not poisoned").push(Instant::now());
                for ue in &targets {
                    let _ = dn.send_to(&payload, SocketAddrV4::new(*ue, port)).await;
                }
            }
        });
        Ok(Numbered {
            ues: ues.to_vec(),
            server,
            stop,
            go,
            sender: Some(sender),
            tasks,
            ue_socks,
            sent,
            arrivals,
            uplink_sent: vec![0; ues.len()],
            uplink_seen,
        })
    }

    /// The downlink starts: a numbered datagram to every UE per interval.
    pub fn start_downlink(&self) {
        let _ = self.go.send(true);
    }

    /// Downlink numbers sent so far (to every UE).
    pub fn sent(&self) -> u32 {
        self.sent.lock().expect("not poisoned").len() as u32
    }

    /// Whether every UE has received a downlink number at least `seq`.
    pub fn every_ue_reached(&self, seq: u32) -> bool {
        let a = self.arrivals.lock().expect("not poisoned");
        self.ues.iter().all(|ue| a.get(ue).is_some_and(|l| l.arrivals.iter().any(|x| x.0 >= seq)))
    }

    /// Waits until every UE has received a downlink number at least
    /// `seq`, or `limit`; false on the limit.
    pub async fn wait_reached(&self, seq: u32, limit: Duration) -> bool {
        let end = tokio::time::Instant::now() + limit;
        while !self.every_ue_reached(seq) {
            if tokio::time::Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// Every UE sends `count` numbered datagrams to the server now.
    pub async fn uplink(&mut self, count: u32) -> std::io::Result<()> {
        let mut payload = [0u8; 64];
        for (i, s) in self.ue_socks.iter().enumerate() {
            for _ in 0..count {
                payload[..4].copy_from_slice(&self.uplink_sent[i].to_be_bytes());
                s.send_to(&payload, self.server).await?;
                self.uplink_sent[i] += 1;
            }
        }
        Ok(())
    }

    /// Waits until the server has every uplink datagram sent so far, or
    /// `limit`; false on the limit.
    pub async fn wait_uplink(&self, limit: Duration) -> bool {
        let end = tokio::time::Instant::now() + limit;
        loop {
            let done = {
                let seen = self.uplink_seen.lock().expect("not poisoned");
                self.ues.iter().zip(&self.uplink_sent).all(|(ue, &n)| {
                    let got: HashSet<u32> = seen.get(ue).map(|v| v.iter().copied().collect()).unwrap_or_default();
                    (0..n).all(|s| got.contains(&s))
                })
            };
            if done {
                return true;
            }
            if tokio::time::Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops the downlink and returns once nothing more is sent (what is
    /// in flight still counts).
    pub async fn stop_sending(&mut self) {
        let _ = self.stop.send(true);
        if let Some(sender) = self.sender.take() {
            let _ = sender.await;
        }
    }

    /// When each downlink number was sent.
    pub fn send_times(&self) -> Vec<Instant> {
        self.sent.lock().expect("not poisoned").clone()
    }

    /// Per UE: its downlink so far, the check of its downlink against
    /// what was sent, and the check of its uplink at the server.
    pub fn report(&self) -> Vec<UeStreams> {
        let sent = self.sent();
        let a = self.arrivals.lock().expect("not poisoned");
        let up = self.uplink_seen.lock().expect("not poisoned");
        self.ues
            .iter()
            .zip(&self.uplink_sent)
            .map(|(ue, &up_sent)| {
                let log = a.get(ue).cloned().unwrap_or_default();
                let downlink = StreamCheck::of(&log.seqs(), sent);
                let uplink = StreamCheck::of(up.get(ue).map_or(&[][..], |v| v.as_slice()), up_sent);
                UeStreams { ue: *ue, log, downlink, uplink }
            })
            .collect()
    }

    /// Ends every task.
    pub fn close(self) {
        let _ = self.stop.send(true);
        for t in self.tasks.into_iter().chain(self.sender) {
            t.abort();
        }
    }
}

/// What one UE's streams did.
#[derive(Debug, Clone)]
pub struct UeStreams {
    pub ue: Ipv4Addr,
    pub log: DownlinkLog,
    pub downlink: StreamCheck,
    pub uplink: StreamCheck,
}
