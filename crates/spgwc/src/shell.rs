//! The tokio shell: one task owns the S11 and PFCP sockets and drives
//! [`SpgwcCore`].

use crate::config::SpgwcConfig;
use crate::core::{Interface, SpgwcCore};
use mobicore_common::counters::Counters;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::SystemTime;
use tokio::net::UdpSocket;
use tokio::sync::watch;

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
    Ok(Spgwc { s11, pfcp, core, s11_addr, pfcp_addr, counters })
}

impl Spgwc {
    /// Serves S11 and PFCP until `shutdown` turns true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<(), SpgwcError> {
        let Spgwc { s11, pfcp, mut core, .. } = self;
        let mut b1 = vec![0u8; 65536];
        let mut b2 = vec![0u8; 65536];
        core.start(std::time::Instant::now());
        loop {
            flush(&mut core, &s11, &pfcp).await;
            let deadline = core.poll_timeout().map(tokio::time::Instant::from_std);
            tokio::select! {
                r = s11.recv_from(&mut b1) => {
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
