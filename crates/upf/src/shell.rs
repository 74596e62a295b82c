//! The tokio shell: one task owns the PFCP socket and drives [`UpfCore`].

use crate::config::UpfConfig;
use crate::node::UpfCore;
use crate::rules::MemoryPlane;
use mobicore_common::counters::Counters;
use std::net::SocketAddr;
use std::time::SystemTime;
use tokio::net::UdpSocket;
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum UpfError {
    #[error("PFCP socket: {0}")]
    Io(#[from] std::io::Error),
}

/// A bound UPF, not yet running: its address, counters and rule table.
pub struct Upf {
    socket: UdpSocket,
    core: UpfCore,
    plane: MemoryPlane,
    pub counters: Counters,
}

impl Upf {
    /// Binds `cfg.pfcp` (port 0 is fine) with an in-memory forwarding plane.
    pub async fn bind(cfg: UpfConfig) -> Result<Upf, UpfError> {
        let socket = mobicore_gtp::udp::bind_udp(cfg.pfcp)?;
        let plane = MemoryPlane::new();
        let counters = Counters::new();
        let core = UpfCore::new(cfg, Box::new(plane.clone()), SystemTime::now(), counters.clone());
        Ok(Upf { socket, core, plane, counters })
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
        let Upf { socket, mut core, .. } = self;
        let mut buf = vec![0u8; 65536];
        loop {
            let deadline = core.poll_timeout().map(tokio::time::Instant::from_std);
            tokio::select! {
                r = socket.recv_from(&mut buf) => {
                    let (n, from) = r?;
                    core.handle_datagram(std::time::Instant::now(), from, &buf[..n]);
                    while let Ok((n, from)) = socket.try_recv_from(&mut buf) {
                        core.handle_datagram(std::time::Instant::now(), from, &buf[..n]);
                    }
                }
                _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                    core.handle_timeout(std::time::Instant::now());
                }
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { return Ok(()); }
                }
            }
            while let Some((to, b)) = core.poll_transmit() {
                if socket.send_to(&b, to).await.is_err() {
                    core.counters.incr("pfcp_send_error");
                }
            }
        }
    }
}

/// Runs a UPF PFCP node on `cfg.pfcp` until `shutdown`.
pub async fn run(cfg: UpfConfig, shutdown: watch::Receiver<bool>) -> Result<(), UpfError> {
    Upf::bind(cfg).await?.run(shutdown).await
}
