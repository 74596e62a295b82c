//! The S11 client task the MME shell talks to through an [`S11Link`]: one
//! UDP socket, one task, many requests in flight, each numbered and matched
//! by sequence number, resent on T3 and failed after N3 (TS 29.274 7.6).
//!
//! The same task serves the S-GW's requests that arrive on the socket (a
//! Downlink Data Notification, TS 29.274 7.2.11.1): only from the
//! configured S-GW's address (others dropped and counted), handed to the
//! MME as [`IncomingS11`] and answered with the request's sequence number;
//! a retransmission is answered again from the bounded duplicate cache
//! without reaching the MME twice; at most `max_incoming` wait for the
//! MME's answer (beyond, dropped and counted). Messages without response
//! ([`S11Notification`]) are sent once.
//!
//! An elastic MME host's client reaches its `peer`, the front end, over
//! the host's link to it instead of the socket ([`s11_client_via`]).

use crate::message::{self as gm, msg_type, Echo, GtpMessage, Message};
use crate::s11::{decode_incoming_request, decode_response, encode_incoming_answer, encode_notification};
use crate::s11::{encode_request, request_ebi};
use crate::transaction::{Incoming, TransactionConfig, Transactions};
use crate::GtpError;
use mobicore_common::counters::Counters;
use mobicore_common::requester::{Pending, Requester, TransportError};
use mobicore_common::s11::{IncomingS11, S11IncomingAnswer, S11Link, S11LinkTask, S11Notification};
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
    /// The S-GW's requests waiting for the MME's answer at most; one
    /// beyond is dropped and counted (`s11_incoming_queue_full`), and the
    /// S-GW's retransmission tries again. Default 4096.
    pub max_incoming: usize,
    /// Entries of the duplicate cache of the S-GW's requests answered
    /// (each kept T3 x N3). Default 16384.
    pub duplicate_cache: usize,
    /// Requests other than Create Session go straight to this address (the
    /// S-GW) instead of `peer`, and their responses come back from it
    /// (TS 29.274 4.2.2.2: a response goes to where its request came from). An elastic MME
    /// host's: its front end (`peer`) relays the Create Session, whose
    /// source the S-GW keeps for its own requests, and the S-GW's requests.
    pub direct: Option<SocketAddr>,
    /// The Create Session too goes to `direct`: the S-GW sends its own
    /// requests to the Sender F-TEID's IP at the port of `peer` (its
    /// `[spgwc] mme_s11_port`, TS 29.274 4.2.1), not to where the Create
    /// Session came from, so `peer` need relay nothing.
    pub create_session_direct: bool,
}

impl Default for S11ClientConfig {
    fn default() -> Self {
        S11ClientConfig {
            local: "127.0.0.1:0".parse().unwrap(),
            peer: "127.0.0.1:2123".parse().unwrap(),
            t3: Duration::from_secs(3),
            n3: 3,
            max_incoming: 4096,
            duplicate_cache: 16_384,
            direct: None,
            create_session_direct: false,
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
/// Requests the S-GW sends are not served (see [`s11_client_link`]).
pub async fn s11_client_bound(cfg: S11ClientConfig) -> Result<S11Client, GtpError> {
    Ok(s11_client_link(cfg).await?.1)
}

/// Starts the S11 client task serving a whole [`S11Link`]: the MME's
/// requests, the S-GW's requests (handed out on `S11Link::incoming`) and
/// the messages without response (`S11Link::notify`). Returns the MME's
/// end of the link and the client's handle (bound address, counters).
pub async fn s11_client_link(cfg: S11ClientConfig) -> Result<(S11Link, S11Client), GtpError> {
    s11_client_via(cfg, None).await
}

/// How the messages of `peer` travel when not over the client's socket:
/// an elastic MME host's front end (`peer`, the MME's S11 address) is
/// reached over the host's link to it, which carries them as they are.
pub struct PeerVia {
    /// Sends a message to `peer`; false if it could not be queued.
    pub send: Box<dyn Fn(bytes::Bytes) -> bool + Send>,
    /// The messages from `peer`.
    pub recv: mpsc::Receiver<bytes::Bytes>,
}

/// [`s11_client_link`], what goes to and comes from `cfg.peer` through
/// `via` if given; the socket serves `direct` (and the bound address).
pub async fn s11_client_via(cfg: S11ClientConfig, via: Option<PeerVia>) -> Result<(S11Link, S11Client), GtpError> {
    let socket = crate::udp::bind_udp(cfg.local)?;
    let local_addr = socket.local_addr()?;
    let (link, link_task) = S11Link::channel(4096);
    let counters = Counters::new();
    let (answers_tx, answers) = mpsc::unbounded_channel();
    let tx = Transactions::with_first_seq(TransactionConfig { t3: cfg.t3, n3: cfg.n3 }, 1)
        .with_max_cached(cfg.duplicate_cache);
    let (via_send, via_recv) = match via {
        Some(v) => (Some(v.send), Some(v.recv)),
        None => (None, None),
    };
    let task = ClientTask {
        socket,
        via: via_send,
        peer: cfg.peer,
        direct: cfg.direct,
        create_session_direct: cfg.create_session_direct,
        tx,
        counters: counters.clone(),
        recovery: 0,
        incoming: link_task.incoming.clone(),
        answers_tx,
        waiting: 0,
        max_incoming: cfg.max_incoming,
        seen: crate::TransactionStats::default(),
    };
    let requester = link.requests.clone();
    tokio::spawn(task.run(link_task, answers, via_recv));
    Ok((link, S11Client { requester, local_addr, counters }))
}

struct InFlight {
    reply: oneshot::Sender<Result<S11Response, TransportError>>,
    ebi: Ebi,
}

/// The MME's answer to an S-GW request: (from, seq, TEID to answer to, the
/// answer or `None` when the MME dropped the request).
type Answered = (SocketAddr, u32, u32, Option<S11IncomingAnswer>);

struct ClientTask {
    socket: UdpSocket,
    /// What goes to `peer`, when not over `socket` ([`PeerVia`]).
    via: Option<Box<dyn Fn(bytes::Bytes) -> bool + Send>>,
    peer: SocketAddr,
    direct: Option<SocketAddr>,
    create_session_direct: bool,
    tx: Transactions<SocketAddr, InFlight>,
    counters: Counters,
    recovery: u8,
    incoming: mpsc::Sender<IncomingS11>,
    answers_tx: mpsc::UnboundedSender<Answered>,
    /// S-GW requests handed to the MME and not answered yet.
    waiting: usize,
    max_incoming: usize,
    /// The transaction layer's stats already counted.
    seen: crate::TransactionStats,
}

impl ClientTask {
    async fn run(
        mut self,
        link: S11LinkTask,
        mut answers: mpsc::UnboundedReceiver<Answered>,
        mut via: Option<mpsc::Receiver<bytes::Bytes>>,
    ) {
        let S11LinkTask { requests: mut rx, mut notify, .. } = link;
        let start = Instant::now();
        let std_start = std::time::Instant::now();
        let now = move || std_start + (Instant::now() - start);
        let mut buf = vec![0u8; 65536];
        let (mut open, mut notify_open) = (true, true);
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
                n = notify.recv(), if notify_open => match n {
                    Some(n) => self.notify(&n),
                    None => notify_open = false,
                },
                Some(a) = answers.recv() => self.on_answer(now(), a),
                b = recv_via(&mut via) => match b {
                    Some(b) => {
                        let peer = self.peer;
                        self.on_datagram(now(), &b, peer);
                        while let Some(b) = via.as_mut().and_then(|v| v.try_recv().ok()) {
                            self.on_datagram(now(), &b, peer);
                        }
                    }
                    None => via = None,
                },
                r = self.socket.recv_from(&mut buf) => match r {
                    Ok((n, from)) => {
                        self.on_datagram(now(), &buf[..n], from);
                        // Drain what is already queued without waiting.
                        while let Ok((n, from)) = self.socket.try_recv_from(&mut buf) {
                            self.on_datagram(now(), &buf[..n], from);
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
            self.tx.stats.count_since(&mut self.seen, &self.counters, &crate::S11_STATS);
        }
    }

    fn submit(&mut self, now: std::time::Instant, p: Pending<S11Request, S11Response>) {
        let to = match (&p.request, self.direct) {
            (_, None) => self.peer,
            (S11Request::CreateSession(_), Some(_)) if !self.create_session_direct => self.peer,
            (_, Some(direct)) => direct,
        };
        let seq = self.tx.next_seq();
        let bytes = encode_request(&p.request, seq).to_bytes();
        let ebi = request_ebi(&p.request);
        self.tx.send_request(now, to, seq, bytes, InFlight { reply: p.reply, ebi });
    }

    /// A message without response (TS 29.274 7.2.11.3): sent once.
    fn notify(&mut self, n: &S11Notification) {
        let seq = self.tx.next_seq();
        let bytes = encode_notification(n, seq).to_bytes();
        self.counters.incr("s11_notification_sent");
        let to = self.peer;
        self.send_now(bytes, to);
    }

    /// Sends without waiting: through `via` to `peer`, else on the socket.
    fn send_now(&mut self, bytes: Vec<u8>, to: SocketAddr) {
        let sent = match &self.via {
            Some(via) if to == self.peer => via(bytes.into()),
            _ => self.socket.try_send_to(&bytes, to).map_err(|e| tracing::debug!("S11 client send: {e}")).is_ok(),
        };
        if !sent {
            self.counters.incr("s11_send_error");
        }
    }

    /// The MME answered an S-GW request (or dropped it).
    fn on_answer(&mut self, now: std::time::Instant, (from, seq, teid, answer): Answered) {
        self.waiting = self.waiting.saturating_sub(1);
        match answer {
            Some(a) => self.tx.answer(now, from, seq, encode_incoming_answer(&a, teid, seq).to_bytes()),
            None => {
                self.counters.incr("s11_incoming_unanswered");
                self.tx.abandon(from, seq);
            }
        }
    }

    /// An S-GW request: only from the configured S-GW's address; a
    /// retransmission is answered from the cache; a new one goes to the MME.
    fn on_request(&mut self, now: std::time::Instant, msg: GtpMessage, bytes: &[u8], from: SocketAddr) {
        if from.ip() != self.peer.ip() {
            self.counters.incr("s11_request_from_unknown_peer");
            return;
        }
        let Ok((request, teid)) = decode_incoming_request(&msg) else {
            self.counters.incr("s11_unexpected_request");
            return;
        };
        match self.tx.on_request(now, from, msg.seq, bytes) {
            Incoming::New => {}
            Incoming::Duplicate => return self.counters.incr("s11_incoming_duplicate_answered"),
            Incoming::InProgress => return self.counters.incr("s11_incoming_duplicate_in_progress"),
        }
        if self.waiting >= self.max_incoming {
            self.counters.incr("s11_incoming_queue_full");
            return self.tx.abandon(from, msg.seq);
        }
        let (reply, answer) = oneshot::channel();
        match self.incoming.try_send(IncomingS11 { request, reply }) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.counters.incr("s11_incoming_queue_full");
                return self.tx.abandon(from, msg.seq);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.counters.incr("s11_incoming_unserved");
                return self.tx.abandon(from, msg.seq);
            }
        }
        self.waiting += 1;
        self.counters.incr("s11_incoming_request");
        let (done, seq) = (self.answers_tx.clone(), msg.seq);
        tokio::spawn(async move {
            let _ = done.send((from, seq, teid, answer.await.ok()));
        });
    }

    fn on_datagram(&mut self, now: std::time::Instant, bytes: &[u8], from: SocketAddr) {
        let msg = match GtpMessage::parse(bytes) {
            Ok(m) => m,
            Err((h, e)) => {
                self.counters.incr("gtp_malformed");
                // An S-GW request with a bad IE is rejected naming it
                // (TS 29.274 7.7.3, 7.7.7), once per sequence number.
                if let (Some(h), Some(cause)) = (h.filter(|h| msg_type::is_request(h.msg_type)), e.cause()) {
                    if from.ip() == self.peer.ip() && self.tx.on_request(now, from, h.seq, bytes) == Incoming::New {
                        if let Some(r) = gm::reject(h.msg_type, 0, h.seq, cause.0, e.offending_ie()) {
                            self.tx.answer(now, from, h.seq, r.to_bytes());
                        }
                    }
                    return;
                }
                // A response we cannot read still ends its transaction.
                if let Some(h) = h.filter(|h| !msg_type::is_request(h.msg_type) && !msg_type::is_unanswered(h.msg_type))
                {
                    if let Some(f) = self.tx.on_response(from, h.seq, h.msg_type) {
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
                self.send_now(resp.to_bytes(), from);
            }
            Message::EchoResponse(_) => {}
            body if !msg_type::is_request(body.msg_type()) && !msg_type::is_unanswered(body.msg_type()) => {
                let Some(f) = self.tx.on_response(from, msg.seq, msg.body.msg_type()) else {
                    self.counters.incr("s11_unmatched_response");
                    return;
                };
                let r = decode_response(&msg, f.ebi).map_err(|e| TransportError::Malformed(e.to_string()));
                let _ = f.reply.send(r);
            }
            body if msg_type::is_unanswered(body.msg_type()) => self.counters.incr("s11_unexpected_request"),
            _ => self.on_request(now, msg, bytes, from),
        }
    }

    async fn flush(&mut self) {
        while let Some((to, bytes)) = self.tx.poll_transmit() {
            if let Some(via) = self.via.as_ref().filter(|_| to == self.peer) {
                if !via(bytes) {
                    self.counters.incr("s11_send_error");
                }
                continue;
            }
            if let Err(e) = self.socket.send_to(&bytes, to).await {
                self.counters.incr("s11_send_error");
                tracing::debug!("S11 client send: {e}");
            }
        }
    }
}

async fn recv_via(via: &mut Option<mpsc::Receiver<bytes::Bytes>>) -> Option<bytes::Bytes> {
    match via {
        Some(v) => v.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
