//! The HSS's tokio shell: a TCP listener, one task per Diameter peer (each
//! driving a `mobicore_diameter::peer::Peer`), the periodic flush of the
//! subscriber store, and an orderly shutdown (DPR to every peer, then a
//! last flush).

use crate::config::HssConfig;
use crate::hss::Hss;
use crate::s6a_handler::handle_request;
use crate::store::{StoreError, SubscriberStore};
use mobicore_common::counters::Counters;
use mobicore_diameter::base::LocalIdentity;
use mobicore_diameter::framing::FrameDecoder;
use mobicore_diameter::peer::{Peer, PeerConfig, PeerEvent};
use mobicore_diameter::transport::{self, ReadOutcome};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum HssError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("accept failed: {0}")]
    Accept(std::io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Runs the HSS until `shutdown` becomes true (or its sender is dropped).
pub async fn run(cfg: HssConfig, store: SubscriberStore, shutdown: watch::Receiver<bool>) -> Result<(), HssError> {
    let (_, serve) = bind(cfg, store, Counters::new(), shutdown).await?;
    serve.await
}

/// Binds the listener and returns its address (useful with port 0) and the
/// server future, which runs until `shutdown` becomes true. The counters
/// collect dropped and rejected input (`diameter_*`, `hss_*`).
///
/// ```no_run
/// # async fn f() -> Result<(), mobicore_hss::HssError> {
/// use mobicore_hss::{bind, HssConfig, SubscriberStore};
/// let (tx, rx) = tokio::sync::watch::channel(false);
/// let cfg = HssConfig { listen: "127.0.0.1:0".parse().unwrap(), ..Default::default() };
/// let (addr, server) = bind(cfg, SubscriberStore::in_memory(), Default::default(), rx).await?;
/// let task = tokio::spawn(server);
/// // ... connect an S6a client to `addr` ...
/// tx.send(true).unwrap();
/// task.await.unwrap()?;
/// # Ok(()) }
/// ```
pub async fn bind(
    cfg: HssConfig,
    store: SubscriberStore,
    counters: Counters,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, impl Future<Output = Result<(), HssError>> + Send + 'static), HssError> {
    let listener = TcpListener::bind(cfg.listen).await.map_err(|source| HssError::Bind { addr: cfg.listen, source })?;
    let addr = listener.local_addr().map_err(|source| HssError::Bind { addr: cfg.listen, source })?;
    tracing::info!(%addr, "HSS listening for S6a");
    Ok((addr, serve(listener, cfg, store, counters, shutdown)))
}

fn local_identity(cfg: &HssConfig, addr: SocketAddr) -> LocalIdentity {
    let mut id = LocalIdentity::new(&cfg.origin_host, &cfg.origin_realm);
    id.host_ip = addr.ip();
    id.product_name = "mobicore-hss".into();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    id.origin_state_id = now.as_secs() as u32;
    id
}

async fn serve(
    listener: TcpListener,
    cfg: HssConfig,
    store: SubscriberStore,
    counters: Counters,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), HssError> {
    let cfg = Arc::new(cfg);
    let mut hss = Hss::new(store.clone(), counters.clone());
    let mut flush = tokio::time::interval(cfg.flush_interval());
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = tokio::task::JoinSet::new();
    let mut seed: u32 = std::process::id();
    loop {
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, remote)) => {
                    seed = seed.wrapping_mul(2654435761).wrapping_add(1);
                    let local = listener.local_addr().unwrap_or(cfg.listen);
                    let conn = Conn { cfg: cfg.clone(), hss: hss.fork(), local: local_identity(&cfg, local), seed };
                    tasks.spawn(conn.run(stream, remote, shutdown.clone()));
                }
                Err(e) => {
                    // Out of descriptors and the like: count, pause, go on.
                    counters.incr("hss_accept_errors");
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = flush.tick() => {
                if let Err(e) = store.flush() {
                    tracing::error!(error = %e, "flushing the subscriber store failed");
                }
            }
            r = shutdown.changed() => if r.is_err() { break },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    // Each connection sends DPR and waits briefly for DPA.
    let _ = tokio::time::timeout(Duration::from_secs(3), async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
    store.flush()?;
    Ok(())
}

struct Conn {
    cfg: Arc<HssConfig>,
    hss: Hss,
    local: LocalIdentity,
    seed: u32,
}

impl Conn {
    async fn run(mut self, stream: TcpStream, remote: SocketAddr, mut shutdown: watch::Receiver<bool>) {
        let _ = stream.set_nodelay(true);
        let (mut rd, wr) = stream.into_split();
        let wr = transport::spawn_writer(wr);
        let mut pc = PeerConfig::s6a(self.local.clone());
        pc.watchdog_interval = self.cfg.watchdog_interval();
        pc.id_seed = self.seed;
        let mut peer = Peer::responder(pc, Instant::now(), self.hss.counters().clone());
        let mut decoder = FrameDecoder::default();
        let mut watching = true;
        if *shutdown.borrow() {
            return;
        }
        loop {
            tokio::select! {
                r = transport::read_into(&mut rd, &mut decoder) => {
                    if r == ReadOutcome::Closed {
                        tracing::debug!(%remote, "S6a peer closed the connection");
                        return;
                    }
                    transport::feed(&mut peer, &mut decoder, Instant::now());
                }
                r = shutdown.changed(), if watching => {
                    if r.is_err() || *shutdown.borrow() {
                        watching = false;
                        peer.close(Instant::now());
                    }
                }
                _ = transport::sleep_until(peer.poll_timeout()) => peer.handle_timeout(Instant::now()),
            }
            while let Some(ev) = peer.poll_event() {
                match ev {
                    PeerEvent::Request(m) => {
                        let a = handle_request(&mut self.hss, &self.cfg, &self.local, &m);
                        peer.send(&a);
                    }
                    PeerEvent::Up { origin_host, .. } => tracing::info!(%remote, %origin_host, "S6a peer up"),
                    PeerEvent::Down(why) => tracing::info!(%remote, %why, "S6a peer down"),
                    PeerEvent::Answer(_) | PeerEvent::MalformedAnswer { .. } => {
                        self.hss.counters().incr("diameter_unexpected_answer")
                    }
                }
            }
            if let Some(b) = peer.poll_transmit() {
                let _ = wr.send(b);
            }
            if peer.is_closed() {
                // Dropping the writer flushes the last answers and closes.
                return;
            }
        }
    }
}
