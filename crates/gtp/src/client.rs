//! The S11 client task the MME shell talks to through a
//! [`Requester<S11Request, S11Response>`]: one UDP socket, one task, many
//! requests in flight, each numbered and matched by sequence number, resent
//! on T3 and failed after N3 (TS 29.274 7.6).

use crate::message::{msg_type, Echo, GtpMessage, Message};
use crate::s11::{decode_response, encode_request, request_ebi};
use crate::transaction::{TransactionConfig, Transactions};
use crate::GtpError;
use mobicore_common::counters::Counters;
use mobicore_common::requester::{Pending, Requester, TransportError};
use mobicore_common::s11::{S11Request, S11Response};
use mobicore_common::Ebi;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Where the S11 client listens and whom it talks to.
#[derive(Debug, Clone)]
pub struct S11ClientConfig {
    /// Local address, `127.0.0.1:0` for any port or `:2123`.
    pub local: SocketAddr,
    /// The SGW-C, by default 127.0.0.1:2123.
    pub peer: SocketAddr,
    pub t3: Duration,
    pub n3: u32,
}

impl Default for S11ClientConfig {
    fn default() -> Self {
        S11ClientConfig {
            local: "127.0.0.1:0".parse().unwrap(),
            peer: "127.0.0.1:2123".parse().unwrap(),
            t3: Duration::from_secs(3),
            n3: 3,
        }
    }
}

/// A running S11 client: its handle, the bound address (the IP to put in
/// the MME's Sender F-TEID) and its counters.
#[derive(Clone)]
pub struct S11Client {
    pub requester: Requester<S11Request, S11Response>,
    pub local_addr: SocketAddr,
    pub counters: Counters,
}

impl S11Client {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

/// Starts the S11 client task and returns its handle.
pub async fn s11_client(cfg: S11ClientConfig) -> Result<Requester<S11Request, S11Response>, GtpError> {
    Ok(s11_client_bound(cfg).await?.requester)
}

/// Like [`s11_client`], also returning the bound address and counters.
pub async fn s11_client_bound(cfg: S11ClientConfig) -> Result<S11Client, GtpError> {
    let socket = crate::udp::bind_udp(cfg.local)?;
    let local_addr = socket.local_addr()?;
    let (requester, rx) = Requester::channel(4096);
    let counters = Counters::new();
    let task = ClientTask {
        socket,
        peer: cfg.peer,
        tx: Transactions::with_first_seq(TransactionConfig { t3: cfg.t3, n3: cfg.n3 }, 1),
        counters: counters.clone(),
        recovery: 0,
    };
    tokio::spawn(task.run(rx));
    Ok(S11Client { requester, local_addr, counters })
}

struct InFlight {
    reply: oneshot::Sender<Result<S11Response, TransportError>>,
    ebi: Ebi,
}

struct ClientTask {
    socket: UdpSocket,
    peer: SocketAddr,
    tx: Transactions<SocketAddr, InFlight>,
    counters: Counters,
    recovery: u8,
}

impl ClientTask {
    async fn run(mut self, mut rx: mpsc::Receiver<Pending<S11Request, S11Response>>) {
        let start = Instant::now();
        let std_start = std::time::Instant::now();
        let now = move || std_start + (Instant::now() - start);
        let mut buf = vec![0u8; 65536];
        let mut open = true;
        loop {
            if !open && self.tx.outstanding() == 0 {
                return;
            }
            let deadline = self.tx.poll_timeout().map(|d| start + (d - std_start));
            tokio::select! {
                p = rx.recv(), if open => match p {
                    Some(p) => {
                        self.submit(now(), p);
                        while let Ok(p) = rx.try_recv() {
                            self.submit(now(), p);
                        }
                    }
                    None => open = false,
                },
                r = self.socket.recv_from(&mut buf) => match r {
                    Ok((n, from)) => {
                        self.on_datagram(&buf[..n], from);
                        // Drain what is already queued without waiting.
                        while let Ok((n, from)) = self.socket.try_recv_from(&mut buf) {
                            self.on_datagram(&buf[..n], from);
                        }
                    }
                    Err(e) => tracing::debug!("S11 client recv: {e}"),
                },
                _ = sleep_until_opt(deadline) => {
                    self.tx.handle_timeout(now());
                    while let Some((_, f)) = self.tx.poll_timed_out() {
                        self.counters.incr("s11_timeout");
                        let _ = f.reply.send(Err(TransportError::Timeout));
                    }
                }
            }
            self.flush().await;
        }
    }

    fn submit(&mut self, now: std::time::Instant, p: Pending<S11Request, S11Response>) {
        let seq = self.tx.next_seq();
        let bytes = encode_request(&p.request, seq).to_bytes();
        let ebi = request_ebi(&p.request);
        self.tx.send_request(now, self.peer, seq, bytes, InFlight { reply: p.reply, ebi });
    }

    fn on_datagram(&mut self, bytes: &[u8], from: SocketAddr) {
        let msg = match GtpMessage::parse(bytes) {
            Ok(m) => m,
            Err((h, e)) => {
                self.counters.incr("gtp_malformed");
                // A response we cannot read still ends its transaction.
                if let Some(h) = h.filter(|h| !msg_type::is_request(h.msg_type)) {
                    if let Some(f) = self.tx.on_response(from, h.seq) {
                        let _ = f.reply.send(Err(TransportError::Malformed(e.to_string())));
                    }
                }
                return;
            }
        };
        match &msg.body {
            Message::EchoRequest(_) => {
                // TS 29.274 7.1.2: answer with our Recovery.
                let resp = GtpMessage {
                    teid: None,
                    seq: msg.seq,
                    body: Message::EchoResponse(Echo { recovery: self.recovery }),
                };
                let _ = self.socket.try_send_to(&resp.to_bytes(), from);
            }
            Message::EchoResponse(_) => {}
            body if !msg_type::is_request(body.msg_type()) => {
                let Some(f) = self.tx.on_response(from, msg.seq) else {
                    self.counters.incr("s11_unmatched_response");
                    return;
                };
                let r = decode_response(&msg, f.ebi).map_err(|e| TransportError::Malformed(e.to_string()));
                let _ = f.reply.send(r);
            }
            _ => self.counters.incr("s11_unexpected_request"),
        }
    }

    async fn flush(&mut self) {
        while let Some((to, bytes)) = self.tx.poll_transmit() {
            if let Err(e) = self.socket.send_to(&bytes, to).await {
                self.counters.incr("s11_send_error");
                tracing::debug!("S11 client send: {e}");
            }
        }
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
