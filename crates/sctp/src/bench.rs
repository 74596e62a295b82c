//! A loopback throughput measurement: one client endpoint opens `assocs`
//! associations to one server endpoint on 127.0.0.1 and sends `messages`
//! user messages of `size` bytes (PPID 18, spread over streams); the figure is
//! messages per second until the server has all of them.

use bytes::Bytes;
use mobicore_common::sctp_api::{SctpCommand, SctpEvent, PPID_S1AP};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

use crate::config::{EndpointConfig, Transport};
use crate::shell::bind_with_info;

/// What [`bench`] measured.
#[derive(Debug, Clone, Default)]
pub struct BenchResult {
    pub transport: String,
    pub assocs: usize,
    pub messages: usize,
    pub size: usize,
    /// Messages the server received.
    pub delivered: usize,
    pub elapsed: Duration,
    pub msgs_per_s: f64,
    pub mbit_per_s: f64,
    /// SCTP packets the client and the server sent (DATA bundles, SACKs, control).
    pub client_packets: u64,
    pub server_packets: u64,
    /// Set when the run could not complete (bind failure, timeout).
    pub error: Option<String>,
}

/// Run the measurement (uses 127.0.0.1; raw IP needs root).
pub async fn bench(transport: Transport, assocs: usize, messages: usize, size: usize) -> BenchResult {
    let mut r =
        BenchResult { transport: format!("{transport:?}"), assocs, messages, size: size.max(1), ..Default::default() };
    if let Err(e) = run(transport, assocs.max(1), messages, size.max(1), &mut r).await {
        r.error = Some(e);
    }
    r
}

async fn run(
    transport: Transport,
    assocs: usize,
    messages: usize,
    size: usize,
    r: &mut BenchResult,
) -> Result<(), String> {
    let lo: SocketAddr = "127.0.0.1:0".parse().expect("address");
    let (server_tr, client_tr) = match transport {
        Transport::Udp { .. } => (Transport::Udp { port: 0 }, Transport::Udp { port: 0 }),
        t => (t, t),
    };
    let mut scfg = EndpointConfig::new(lo, server_tr);
    scfg.max_associations = scfg.max_associations.max(assocs);
    let server_counters = scfg.counters.clone();
    let server = bind_with_info(scfg).await.map_err(|e| e.to_string())?;
    let mut ccfg = EndpointConfig::new(lo, client_tr);
    let client_counters = ccfg.counters.clone();
    if let Some(p) = server.udp_port {
        ccfg.udp_remote_port = p;
    }
    let client = bind_with_info(ccfg).await.map_err(|e| e.to_string())?.handle;
    let mut server = server.handle;
    let mut ids = Vec::new();
    for _ in 0..assocs {
        let (tx, rx) = oneshot::channel();
        client
            .commands
            .send(SctpCommand::Connect { remote: server.local, reply: tx })
            .await
            .map_err(|e| e.to_string())?;
        ids.push(rx.await.map_err(|e| e.to_string())??);
    }
    let payload = Bytes::from(vec![0x5a; size]);
    let cmds = client.commands.clone();
    let start = Instant::now();
    let sender = tokio::spawn(async move {
        for i in 0..messages {
            let assoc = ids[i % ids.len()];
            let cmd = SctpCommand::Send {
                assoc,
                stream: (i / ids.len() % 16) as u16,
                ppid: PPID_S1AP,
                data: payload.clone(),
            };
            if cmds.send(cmd).await.is_err() {
                return;
            }
        }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while r.delivered < messages {
        match tokio::time::timeout_at(deadline, server.events.recv()).await {
            Ok(Some(SctpEvent::Data { .. })) => r.delivered += 1,
            Ok(Some(_)) => {}
            Ok(None) => return Err("server endpoint stopped".into()),
            Err(_) => {
                sender.abort();
                return Err(format!("timed out with {} of {messages} delivered", r.delivered));
            }
        }
    }
    r.elapsed = start.elapsed();
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    r.msgs_per_s = messages as f64 / secs;
    r.mbit_per_s = (messages * size * 8) as f64 / secs / 1e6;
    let _ = sender.await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    r.client_packets = client_counters.value("sctp_tx_packets");
    r.server_packets = server_counters.value("sctp_tx_packets");
    Ok(())
}
