//! The tokio shell: one task owns the S11 and PFCP sockets and drives
//! [`SpgwcCore`]. A [`SpgwcControl`] reaches the running task for the
//! full-state dump ([`crate::dump`]); [`Spgwc::restore`] fills a bound,
//! not yet running one from a dump.

use crate::config::SpgwcConfig;
use crate::core::{Interface, SpgwcCore};
use crate::dump::{DumpError, RestoreError, SpgwcDump};
use mobicore_common::counters::Counters;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Instant, SystemTime};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};

#[derive(Debug, thiserror::Error)]
pub enum SpgwcError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
}

/// A bound S/P-GW-C, not yet running. Bind with port 0 to let the OS pick,
/// then read [`Spgwc::s11_addr`] / [`Spgwc::pfcp_addr`] and call
/// [`Spgwc::run`].
pub struct Spgwc {
    s11: UdpSocket,
    pfcp: UdpSocket,
    core: SpgwcCore,
    control: (mpsc::Sender<Control>, mpsc::Receiver<Control>),
    pub s11_addr: SocketAddr,
    pub pfcp_addr: SocketAddr,
    pub counters: Counters,
}

/// Binds the S11 and PFCP sockets of `cfg`.
pub async fn bind(cfg: SpgwcConfig) -> Result<Spgwc, SpgwcError> {
    let s11 = mobicore_gtp::udp::bind_udp(cfg.s11)?;
    let pfcp = mobicore_gtp::udp::bind_udp(cfg.pfcp)?;
    let s11_addr = s11.local_addr()?;
    let pfcp_addr = pfcp.local_addr()?;
    let s11_ip = match s11_addr.ip() {
        IpAddr::V4(a) if !a.is_unspecified() => a,
        _ => Ipv4Addr::LOCALHOST,
    };
    let counters = Counters::new();
    let core = SpgwcCore::new(cfg, s11_ip, SystemTime::now(), counters.clone());
    Ok(Spgwc { s11, pfcp, core, control: mpsc::channel(8), s11_addr, pfcp_addr, counters })
}

/// What a [`SpgwcControl`] asks of the running task.
enum Control {
    Freeze(oneshot::Sender<Result<(), DumpError>>),
    Dump(oneshot::Sender<Result<Vec<u8>, DumpError>>),
    Thaw,
}

/// Why a control request failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("the S/P-GW-C is not running")]
    Stopped,
    #[error(transparent)]
    Dump(#[from] DumpError),
}

/// A handle on a running S/P-GW-C for its full-state dump.
#[derive(Clone)]
pub struct SpgwcControl {
    tx: mpsc::Sender<Control>,
}

impl SpgwcControl {
    async fn ask<T>(&self, c: impl FnOnce(oneshot::Sender<T>) -> Control) -> Result<T, ControlError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(c(tx)).await.map_err(|_| ControlError::Stopped)?;
        rx.await.map_err(|_| ControlError::Stopped)
    }

    /// Stops reading S11 (requests wait in the socket, as in a frozen
    /// process) and answers once no procedure is in flight; if none ends
    /// within the PFCP retransmission time (T1 x (N1 + 1)), thaws again and
    /// answers [`DumpError::Busy`].
    pub async fn freeze(&self) -> Result<(), ControlError> {
        Ok(self.ask(Control::Freeze).await??)
    }

    /// The whole state as a framed [`SpgwcDump`]; frozen for as long as
    /// that takes when not frozen already.
    pub async fn dump(&self) -> Result<Vec<u8>, ControlError> {
        Ok(self.ask(Control::Dump).await??)
    }

    /// Reads S11 again after [`Self::freeze`].
    pub async fn thaw(&self) -> Result<(), ControlError> {
        self.tx.send(Control::Thaw).await.map_err(|_| ControlError::Stopped)
    }
}

/// Control requests waiting for nothing to be in flight.
#[derive(Default)]
struct Waiting {
    freezes: Vec<oneshot::Sender<Result<(), DumpError>>>,
    dumps: Vec<oneshot::Sender<Result<Vec<u8>, DumpError>>>,
    /// When they are answered [`DumpError::Busy`] if still waiting.
    deadline: Option<tokio::time::Instant>,
}

impl Waiting {
    fn is_empty(&self) -> bool {
        self.freezes.is_empty() && self.dumps.is_empty()
    }

    /// Answers the waiting requests once nothing is in flight, or with
    /// the reason past the deadline; a freeze that succeeds sets `frozen`.
    fn settle(&mut self, core: &SpgwcCore, frozen: &mut bool) {
        if self.is_empty() {
            return;
        }
        let expired = self.deadline.is_some_and(|d| d <= tokio::time::Instant::now());
        if !expired && !core.quiescent() {
            return;
        }
        let ready = core.ready_to_dump();
        for tx in self.freezes.drain(..) {
            *frozen |= ready.is_ok();
            let _ = tx.send(ready.clone());
        }
        if !self.dumps.is_empty() {
            let bytes = core.dump(Instant::now()).map(|d| d.to_bytes());
            for tx in self.dumps.drain(..) {
                let _ = tx.send(bytes.clone());
            }
        }
        self.deadline = None;
    }
}

impl Spgwc {
    /// A handle for the full-state dump of this S/P-GW-C once it runs.
    pub fn control(&self) -> SpgwcControl {
        SpgwcControl { tx: self.control.0.clone() }
    }

    /// Takes over the state of a dump ([`SpgwcCore::restore`]) before
    /// running; returns the number of sessions restored.
    pub fn restore(&mut self, dump: &[u8]) -> Result<usize, RestoreError> {
        let d = SpgwcDump::from_bytes(dump)?;
        self.core.restore(Instant::now(), d)?;
        Ok(self.core.sessions().len())
    }

    /// Serves S11 and PFCP until `shutdown` turns true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<(), SpgwcError> {
        let Spgwc { s11, pfcp, mut core, control: (_control_tx, mut control), .. } = self;
        let mut b1 = vec![0u8; 65536];
        let mut b2 = vec![0u8; 65536];
        core.start(std::time::Instant::now());
        // S11 is not read while frozen, nor while a dump waits for the
        // procedures in flight to end.
        let mut frozen = false;
        let mut waiting = Waiting::default();
        let freeze_limit = core.cfg.t1 * (core.cfg.n1 + 1);
        loop {
            flush(&mut core, &s11, &pfcp).await;
            waiting.settle(&core, &mut frozen);
            let deadline =
                [core.poll_timeout().map(tokio::time::Instant::from_std), waiting.deadline].into_iter().flatten().min();
            tokio::select! {
                c = control.recv() => {
                    let wait_until = tokio::time::Instant::now() + freeze_limit;
                    match c {
                        Some(Control::Freeze(tx)) => waiting.freezes.push(tx),
                        Some(Control::Dump(tx)) => waiting.dumps.push(tx),
                        Some(Control::Thaw) | None => frozen = false,
                    }
                    if !waiting.is_empty() {
                        waiting.deadline.get_or_insert(wait_until);
                    }
                }
                r = s11.recv_from(&mut b1), if !frozen && waiting.is_empty() => {
                    if let Ok((n, from)) = r {
                        core.handle_s11(std::time::Instant::now(), from, &b1[..n]);
                    }
                    while let Ok((n, from)) = s11.try_recv_from(&mut b1) {
                        core.handle_s11(std::time::Instant::now(), from, &b1[..n]);
                    }
                }
                r = pfcp.recv_from(&mut b2) => {
                    if let Ok((n, from)) = r {
                        core.handle_pfcp(std::time::Instant::now(), from, &b2[..n]);
                    }
                    while let Ok((n, from)) = pfcp.try_recv_from(&mut b2) {
                        core.handle_pfcp(std::time::Instant::now(), from, &b2[..n]);
                    }
                }
                _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                    core.handle_timeout(std::time::Instant::now());
                }
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { return Ok(()); }
                }
            }
        }
    }
}

async fn flush(core: &mut SpgwcCore, s11: &UdpSocket, pfcp: &UdpSocket) {
    while let Some(t) = core.poll_transmit() {
        let sock = match t.interface {
            Interface::S11 => s11,
            Interface::Pfcp => pfcp,
        };
        if sock.send_to(&t.bytes, t.dst).await.is_err() {
            core.counters.incr("send_error");
        }
    }
}

/// Runs the S/P-GW-C on `cfg.s11` and `cfg.pfcp` until `shutdown`.
pub async fn run(cfg: SpgwcConfig, shutdown: watch::Receiver<bool>) -> Result<(), SpgwcError> {
    bind(cfg).await?.run(shutdown).await
}
