//! The HSS's tokio shell: a TCP listener, one task per Diameter peer (each
//! driving a sans-I/O [`Connection`]), the periodic flush of the
//! subscriber store, and an orderly shutdown (DPR to every peer, then a
//! last flush).
//!
//! Trust boundary: a connection from an address no allowed peer may use
//! ([`HssConfig::peers`]) is closed before anything is read
//! (`s6a_connection_from_unknown_address`); beyond `max_connections` a new
//! one is closed at once (`s6a_connection_over_limit`). The gauges
//! `s6a_connections`, `s6a_buffered_octets` and `s6a_buffered_octets_peak`
//! show what the peers make the HSS hold.

use crate::config::HssConfig;
use crate::connection::Connection;
use crate::hss::Hss;
use crate::store::{StoreError, SubscriberStore};
use mobicore_common::counters::Counters;
use mobicore_diameter::base::LocalIdentity;
use mobicore_diameter::transport;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Refusals of the S6a interface, registered at zero so that the metrics
/// show them before the first one.
pub const REFUSAL_COUNTERS: &[&str] = &[
    "s6a_connection_from_unknown_address",
    "s6a_connection_over_limit",
    "s6a_message_over_max_length",
    "s6a_requests_held_for_unread_answers",
    "diameter_cer_from_unknown_peer",
    "diameter_before_cer",
    "diameter_no_cer_in_time",
    "diameter_request_from_other_origin_host",
    "diameter_request_without_origin_host",
    "diameter_invalid_message_length",
];

/// How long a closing connection may take to write its last answers.
const LAST_WRITE: Duration = Duration::from_secs(2);

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
    for name in REFUSAL_COUNTERS {
        counters.get(name);
    }
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
                    if !cfg.peers.permits_address(remote.ip()) {
                        // Closed before anything is read.
                        counters.incr("s6a_connection_from_unknown_address");
                        tracing::info!(%remote, "S6a connection from an address no allowed peer uses: closed");
                        continue;
                    }
                    while tasks.try_join_next().is_some() {}
                    if tasks.len() >= cfg.max_connections {
                        counters.incr("s6a_connection_over_limit");
                        tracing::warn!(%remote, max = cfg.max_connections, "S6a connection over max_connections: closed");
                        continue;
                    }
                    seed = seed.wrapping_mul(2654435761).wrapping_add(1);
                    let local = listener.local_addr().unwrap_or(cfg.listen);
                    let conn = Connection::new(cfg.clone(), hss.fork(), local_identity(&cfg, local), remote, seed, Instant::now());
                    let gauges = Gauges::new(&counters);
                    tasks.spawn(run_connection(conn, stream, gauges, shutdown.clone()));
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

/// The connection and buffer gauges of the metrics.
struct Gauges {
    connections: Arc<AtomicU64>,
    buffered: Arc<AtomicU64>,
    peak: Arc<AtomicU64>,
    /// What this connection added to `buffered`.
    mine: u64,
}

impl Gauges {
    fn new(c: &Counters) -> Self {
        let g = Gauges {
            connections: c.get("s6a_connections"),
            buffered: c.get("s6a_buffered_octets"),
            peak: c.get("s6a_buffered_octets_peak"),
            mine: 0,
        };
        g.connections.fetch_add(1, Ordering::Relaxed);
        g
    }

    fn set(&mut self, now: usize) {
        let now = now as u64;
        if now > self.mine {
            let total = self.buffered.fetch_add(now - self.mine, Ordering::Relaxed) + (now - self.mine);
            self.peak.fetch_max(total, Ordering::Relaxed);
        } else {
            self.buffered.fetch_sub(self.mine - now, Ordering::Relaxed);
        }
        self.mine = now;
    }
}

impl Drop for Gauges {
    fn drop(&mut self) {
        self.set(0);
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What woke a connection's task.
enum Io {
    Read(std::io::Result<usize>),
    Wrote(std::io::Result<usize>),
    Shutdown(bool),
    Timeout,
}

/// Drives one connection: reads while it has room, writes its answers,
/// passes timer expiries and shutdown.
async fn run_connection(
    mut conn: Connection,
    stream: TcpStream,
    mut gauges: Gauges,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let mut watching = true;
    if *shutdown.borrow() {
        return;
    }
    loop {
        let reading = conn.read_room() > 0;
        let deadline = conn.poll_timeout();
        let (mut rx, tx) = conn.io();
        let writing = !tx.is_empty();
        // Both I/O branches are cancel-safe: a lost race reads or writes nothing.
        let ev = tokio::select! {
            r = rd.read_buf(&mut rx), if reading => Io::Read(r),
            r = wr.write(tx), if writing => Io::Wrote(r),
            r = shutdown.changed(), if watching => Io::Shutdown(r.is_err() || *shutdown.borrow()),
            _ = transport::sleep_until(deadline) => Io::Timeout,
        };
        match ev {
            Io::Read(Ok(0) | Err(_)) => {
                tracing::debug!(peer = ?conn.peer().remote_host(), "S6a peer closed the connection");
                return;
            }
            Io::Read(Ok(_)) => {}
            Io::Wrote(Ok(n)) if n > 0 => conn.advance_transmit(n),
            Io::Wrote(_) => return,
            Io::Shutdown(stop) => {
                if stop {
                    watching = false;
                    conn.close(Instant::now());
                }
            }
            Io::Timeout => conn.handle_timeout(Instant::now()),
        }
        conn.process(Instant::now());
        gauges.set(conn.buffered());
        if conn.is_closed() {
            // The last answers (a CEA with the refusal, a DPA), then close.
            let _ = tokio::time::timeout(LAST_WRITE, wr.write_all(conn.transmit())).await;
            let _ = wr.shutdown().await;
            return;
        }
    }
}
