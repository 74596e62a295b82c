//! The S6a client task (MME side): connects TCP, exchanges capabilities,
//! then serves many requests in flight, matched by hop-by-hop id, each with
//! its own Session-Id; answers DWR, sends DWR when idle, times requests out
//! and reconnects with backoff when the connection drops.
//!
//! The HSS's requests on the same connection (Cancel-Location, TS 29.272
//! 5.2.1.2) go to the MME through [`S6aLink::incoming`] and are answered
//! with what it replies ([`connect_s6a_link`]). Trust boundary: only the
//! HSS of the capabilities exchange may send them (a request with another
//! Origin-Host is refused by the peer, RFC 6733 6.3), one for another
//! Destination-Host gets DIAMETER_UNABLE_TO_DELIVER (RFC 6733 6.1.5), and
//! at most `max_incoming_in_flight` wait for the MME (beyond that
//! DIAMETER_TOO_BUSY, RFC 6733 7.1.3); each refusal is counted.
//!
//! ```no_run
//! # async fn f() -> Result<(), mobicore_diameter::DiameterError> {
//! use mobicore_diameter::{connect_s6a, S6aClientConfig};
//! let s6a = connect_s6a(S6aClientConfig::new("mme.mobicore.local", "mobicore.local")).await?;
//! // s6a.request(S6aRequest::AuthenticationInformation(..)).await
//! # Ok(()) }
//! ```

use crate::base::error_answer_for;
use crate::base::LocalIdentity;
use crate::dict::{app, avp, cmd, result};
use crate::error::DiameterError;
use crate::framing::FrameDecoder;
use crate::message::Message;
use crate::peer::{Peer, PeerConfig, PeerEvent, DEFAULT_TW};
use crate::s6a::{self, RequestContext};
use crate::transport::{self, ReadOutcome};
use mobicore_common::counters::Counters;
use mobicore_common::requester::{Pending, Requester, TransportError};
use mobicore_common::s6a::{S6aAnswer, S6aIncoming, S6aIncomingAnswer, S6aLink, S6aLinkTask, S6aRequest};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Configuration of the S6a client.
#[derive(Clone)]
pub struct S6aClientConfig {
    /// The HSS (default 127.0.0.1:3868).
    pub peer: SocketAddr,
    pub origin_host: String,
    pub origin_realm: String,
    pub destination_realm: String,
    /// Destination-Host, if the HSS is to be named.
    pub destination_host: Option<String>,
    /// No answer after this long is [`TransportError::Timeout`].
    pub request_timeout: Duration,
    /// Tw of the watchdog (RFC 3539), default 30 s.
    pub watchdog_interval: Duration,
    /// Reconnect after the connection drops, with backoff up to this delay
    /// (`None`: the task stops and requests get [`TransportError::Closed`]).
    pub reconnect_max_backoff: Option<Duration>,
    /// Requests queued between the NF and the task.
    pub channel_depth: usize,
    /// The HSS's requests (CLR) handed to the MME and not answered yet;
    /// beyond this DIAMETER_TOO_BUSY.
    pub max_incoming_in_flight: usize,
    /// Counters of dropped / malformed input.
    pub counters: Counters,
}

impl S6aClientConfig {
    /// Defaults: peer 127.0.0.1:3868, destination realm = our realm,
    /// 5 s request timeout, Tw 30 s, reconnect with backoff up to 5 s.
    pub fn new(origin_host: &str, origin_realm: &str) -> Self {
        S6aClientConfig {
            peer: SocketAddr::from(([127, 0, 0, 1], 3868)),
            origin_host: origin_host.to_string(),
            origin_realm: origin_realm.to_string(),
            destination_realm: origin_realm.to_string(),
            destination_host: None,
            request_timeout: Duration::from_secs(5),
            watchdog_interval: DEFAULT_TW,
            reconnect_max_backoff: Some(Duration::from_secs(5)),
            channel_depth: 4096,
            max_incoming_in_flight: 1024,
            counters: Counters::new(),
        }
    }

    fn peer_config(&self) -> PeerConfig {
        let mut local = LocalIdentity::new(&self.origin_host, &self.origin_realm);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        local.origin_state_id = now.as_secs() as u32;
        let mut cfg = PeerConfig::s6a(local);
        // The MME serves the HSS's Cancel-Location (TS 29.272 5.2.1.2).
        cfg.applications = vec![(app::S6A, vec![cmd::CANCEL_LOCATION])];
        cfg.watchdog_interval = self.watchdog_interval;
        cfg.cer_timeout = self.watchdog_interval;
        cfg.id_seed = (now.as_secs() as u32) << 20 ^ now.subsec_nanos();
        cfg
    }
}

impl std::fmt::Debug for S6aClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S6aClientConfig")
            .field("peer", &self.peer)
            .field("origin_host", &self.origin_host)
            .field("origin_realm", &self.origin_realm)
            .field("destination_realm", &self.destination_realm)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl Default for S6aClientConfig {
    fn default() -> Self {
        Self::new("mme.mobicore.local", "mobicore.local")
    }
}

type Reply = oneshot::Sender<Result<S6aAnswer, TransportError>>;

/// The requests in flight, without I/O: hop-by-hop id -> reply, and the
/// deadlines in the order they were set (all requests share one timeout,
/// so the queue is sorted).
pub struct InFlight {
    pending: HashMap<u32, Reply>,
    deadlines: VecDeque<(Instant, u32)>,
    timeout: Duration,
    session_prefix: String,
    session_seq: u64,
}

impl InFlight {
    pub fn new(origin_host: &str, timeout: Duration, boot: u32) -> Self {
        InFlight {
            pending: HashMap::with_capacity(1024),
            deadlines: VecDeque::with_capacity(1024),
            timeout,
            session_prefix: format!("{origin_host};{boot};"),
            session_seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Encodes a request with a fresh Session-Id and ids, queues it on the peer.
    pub fn start(&mut self, now: Instant, peer: &mut Peer, cfg: &S6aClientConfig, p: Pending<S6aRequest, S6aAnswer>) {
        let (hop_by_hop, end_to_end) = peer.next_ids();
        self.session_seq += 1;
        // RFC 6733 8.8: <DiameterIdentity>;<high 32 bits>;<low 32 bits>
        let session_id = format!("{}{}", self.session_prefix, self.session_seq);
        let ctx = RequestContext {
            session_id: &session_id,
            local: peer.local(),
            destination_realm: &cfg.destination_realm,
            destination_host: cfg.destination_host.as_deref(),
            hop_by_hop,
            end_to_end,
        };
        let m = s6a::encode_request(&p.request, &ctx);
        peer.send(&m);
        self.pending.insert(hop_by_hop, p.reply);
        self.deadlines.push_back((now + self.timeout, hop_by_hop));
    }

    /// An answer from the peer.
    pub fn answer(&mut self, m: &Message, counters: &Counters) {
        let Some(reply) = self.pending.remove(&m.header.hop_by_hop) else {
            counters.incr("diameter_unexpected_answer");
            return;
        };
        let r = s6a::decode_answer(m).map_err(|e| {
            counters.incr("diameter_malformed_answer");
            TransportError::Malformed(e.to_string())
        });
        let _ = reply.send(r);
    }

    pub fn malformed(&mut self, hop_by_hop: u32) {
        if let Some(reply) = self.pending.remove(&hop_by_hop) {
            let _ = reply.send(Err(TransportError::Malformed("undecodable answer".into())));
        }
    }

    /// The earliest deadline of a request still pending.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(&(_, id)) = self.deadlines.front() {
            if self.pending.contains_key(&id) {
                break;
            }
            self.deadlines.pop_front();
        }
        self.deadlines.front().map(|d| d.0)
    }

    /// Fails the requests whose deadline passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(d, id)) = self.deadlines.front() {
            if d > now {
                break;
            }
            self.deadlines.pop_front();
            if let Some(reply) = self.pending.remove(&id) {
                let _ = reply.send(Err(TransportError::Timeout));
            }
        }
    }

    /// Fails everything in flight (connection lost).
    pub fn fail_all(&mut self, e: TransportError) {
        for (_, reply) in self.pending.drain() {
            let _ = reply.send(Err(e.clone()));
        }
        self.deadlines.clear();
    }
}

struct Connection {
    rd: tokio::net::tcp::OwnedReadHalf,
    wr: mpsc::UnboundedSender<Vec<u8>>,
    decoder: FrameDecoder,
    peer: Peer,
}

impl Connection {
    fn flush(&mut self) {
        if let Some(b) = self.peer.poll_transmit() {
            let _ = self.wr.send(b);
        }
    }
}

/// Connects, sends CER and waits for a successful CEA.
async fn open(cfg: &S6aClientConfig) -> Result<Connection, DiameterError> {
    let stream = tokio::time::timeout(cfg.request_timeout, TcpStream::connect(cfg.peer))
        .await
        .map_err(|_| DiameterError::Timeout)??;
    stream.set_nodelay(true)?;
    let (rd, wr) = stream.into_split();
    let mut c = Connection {
        rd,
        wr: transport::spawn_writer(wr),
        decoder: FrameDecoder::default(),
        peer: Peer::initiator(cfg.peer_config(), Instant::now(), cfg.counters.clone()),
    };
    c.flush();
    let give_up = Instant::now() + cfg.request_timeout;
    loop {
        tokio::select! {
            r = transport::read_into(&mut c.rd, &mut c.decoder) => {
                if r == ReadOutcome::Closed {
                    return Err(DiameterError::Closed);
                }
                transport::feed(&mut c.peer, &mut c.decoder, Instant::now());
            }
            _ = transport::sleep_until(Some(give_up)) => return Err(DiameterError::Timeout),
        }
        c.flush();
        while let Some(ev) = c.peer.poll_event() {
            match ev {
                PeerEvent::Up { .. } => return Ok(c),
                PeerEvent::Down(why) => return Err(DiameterError::CapabilitiesExchange(why)),
                _ => {}
            }
        }
    }
}

/// Connects to the HSS, exchanges capabilities, and returns the handle the
/// MME uses. The first connection must succeed; later drops are retried
/// with backoff when `reconnect_max_backoff` is set (requests meanwhile get
/// [`TransportError::Down`]).
///
/// The HSS's requests are answered DIAMETER_UNABLE_TO_COMPLY: use
/// [`connect_s6a_link`] to serve them.
pub async fn connect_s6a(cfg: S6aClientConfig) -> Result<Requester<S6aRequest, S6aAnswer>, DiameterError> {
    connect_s6a_link(cfg).await.map(|l| l.requests)
}

/// As [`connect_s6a`], and the HSS's requests (CLR) come out of
/// [`S6aLink::incoming`], each answered with what its `reply` carries.
pub async fn connect_s6a_link(cfg: S6aClientConfig) -> Result<S6aLink, DiameterError> {
    let conn = open(&cfg).await?;
    let (link, task) = S6aLink::channel(cfg.channel_depth);
    tokio::spawn(run(cfg, conn, task));
    Ok(link)
}

/// The HSS's requests handed to the MME, waiting for its answer.
struct Incoming {
    to_mme: mpsc::Sender<S6aIncoming>,
    /// (connection generation, request, answer) once the MME replied.
    replies_tx: mpsc::UnboundedSender<(u64, Message, Option<S6aIncomingAnswer>)>,
    replies: mpsc::UnboundedReceiver<(u64, Message, Option<S6aIncomingAnswer>)>,
    in_flight: usize,
    generation: u64,
}

impl Incoming {
    /// A request from the (already admitted) HSS: refused, or handed on.
    fn request(&mut self, cfg: &S6aClientConfig, peer: &mut Peer, m: Message) {
        let c = &cfg.counters;
        let local = peer.local().clone();
        if let Some(h) = m.find(avp::DESTINATION_HOST).and_then(|a| a.as_str().ok()) {
            if !h.eq_ignore_ascii_case(&local.origin_host) {
                // RFC 6733 6.1.5: not for us, and we relay nothing.
                c.incr("s6a_request_for_other_host");
                peer.send(&error_answer_for(&local, &m, result::DIAMETER_UNABLE_TO_DELIVER, None));
                return;
            }
        }
        let request = match s6a::decode_incoming_request(&m) {
            Ok(r) => r,
            Err(e) => {
                c.incr("s6a_bad_incoming_request");
                peer.send(&error_answer_for(&local, &m, e.result_code, e.failed_avp));
                return;
            }
        };
        if self.in_flight >= cfg.max_incoming_in_flight {
            // RFC 6733 7.1.3: DIAMETER_TOO_BUSY, the HSS may retry.
            c.incr("s6a_incoming_over_limit");
            peer.send(&error_answer_for(&local, &m, result::DIAMETER_TOO_BUSY, None));
            return;
        }
        let (reply, answer) = oneshot::channel();
        match self.to_mme.try_send(S6aIncoming { request, reply }) {
            Ok(()) => {
                c.incr("s6a_clr_received");
                self.in_flight += 1;
                let (tx, generation) = (self.replies_tx.clone(), self.generation);
                tokio::spawn(async move {
                    let _ = tx.send((generation, m, answer.await.ok()));
                });
            }
            Err(e) => {
                let full = matches!(e, mpsc::error::TrySendError::Full(_));
                c.incr(if full { "s6a_incoming_over_limit" } else { "s6a_incoming_no_consumer" });
                let rc = if full { result::DIAMETER_TOO_BUSY } else { result::DIAMETER_UNABLE_TO_COMPLY };
                peer.send(&error_answer_for(&local, &m, rc, None));
            }
        }
    }

    /// The MME's answer: sent, unless the connection it came on is gone.
    fn reply(&mut self, cfg: &S6aClientConfig, peer: &mut Peer, r: (u64, Message, Option<S6aIncomingAnswer>)) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let (generation, m, answer) = r;
        if generation != self.generation {
            cfg.counters.incr("s6a_incoming_answer_after_reconnect");
            return;
        }
        let local = peer.local().clone();
        let a = match answer {
            Some(a) => s6a::encode_incoming_answer(&m, &a, &local),
            None => error_answer_for(&local, &m, result::DIAMETER_UNABLE_TO_COMPLY, None),
        };
        cfg.counters.incr("s6a_cla_sent");
        peer.send(&a);
    }
}

enum Exit {
    /// Every handle dropped and the peer closed.
    Done,
    /// The connection failed.
    Down(String),
}

async fn run(cfg: S6aClientConfig, conn: Connection, task: S6aLinkTask) {
    let S6aLinkTask { requests: mut rx, incoming: to_mme } = task;
    let (replies_tx, replies) = mpsc::unbounded_channel();
    let mut incoming = Incoming { to_mme, replies_tx, replies, in_flight: 0, generation: 0 };
    let boot = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() as u32;
    let mut inflight = InFlight::new(&cfg.origin_host, cfg.request_timeout, boot);
    let mut conn = conn;
    loop {
        incoming.generation += 1;
        match serve(&cfg, &mut conn, &mut rx, &mut inflight, &mut incoming).await {
            Exit::Done => return,
            Exit::Down(why) => {
                // A peer that says goodbye (DPR) is no failure.
                if why == crate::peer::DPR_RECEIVED {
                    tracing::info!(peer = %cfg.peer, %why, "S6a connection down");
                } else {
                    tracing::warn!(peer = %cfg.peer, %why, "S6a connection down");
                }
                inflight.fail_all(TransportError::Down(why));
            }
        }
        let Some(max) = cfg.reconnect_max_backoff else {
            return;
        };
        let mut backoff = Duration::from_millis(100);
        conn = loop {
            // Requests while down fail at once.
            let wake = tokio::time::sleep(backoff);
            tokio::pin!(wake);
            loop {
                tokio::select! {
                    _ = &mut wake => break,
                    p = rx.recv() => match p {
                        Some(p) => { let _ = p.reply.send(Err(TransportError::Down("reconnecting".into()))); }
                        None => return,
                    }
                }
            }
            match open(&cfg).await {
                Ok(c) => break c,
                Err(e) => tracing::debug!(error = %e, "S6a reconnect failed"),
            }
            backoff = (backoff * 2).min(max);
        };
    }
}

/// Drives one open connection until it fails or every handle is dropped.
async fn serve(
    cfg: &S6aClientConfig,
    c: &mut Connection,
    rx: &mut mpsc::Receiver<Pending<S6aRequest, S6aAnswer>>,
    inflight: &mut InFlight,
    incoming: &mut Incoming,
) -> Exit {
    let mut handles_gone = false;
    loop {
        let deadline = match (c.peer.poll_timeout(), inflight.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            r = transport::read_into(&mut c.rd, &mut c.decoder) => {
                if r == ReadOutcome::Closed {
                    return Exit::Down("connection closed by the peer".into());
                }
                transport::feed(&mut c.peer, &mut c.decoder, Instant::now());
            }
            p = rx.recv(), if !handles_gone => match p {
                Some(p) => {
                    let now = Instant::now();
                    inflight.start(now, &mut c.peer, cfg, p);
                    // Batch: take everything queued, send it in one write.
                    for _ in 0..4096 {
                        match rx.try_recv() {
                            Ok(p) => inflight.start(now, &mut c.peer, cfg, p),
                            Err(_) => break,
                        }
                    }
                }
                None => {
                    handles_gone = true;
                    c.peer.close(Instant::now());
                }
            },
            Some(r) = incoming.replies.recv() => incoming.reply(cfg, &mut c.peer, r),
            _ = transport::sleep_until(deadline) => {
                let now = Instant::now();
                c.peer.handle_timeout(now);
                inflight.handle_timeout(now);
            }
        }
        c.flush();
        while let Some(ev) = c.peer.poll_event() {
            match ev {
                PeerEvent::Answer(m) => inflight.answer(&m, &cfg.counters),
                PeerEvent::MalformedAnswer { hop_by_hop } => inflight.malformed(hop_by_hop),
                PeerEvent::Request(m) => incoming.request(cfg, &mut c.peer, m),
                PeerEvent::Up { .. } => {}
                PeerEvent::Down(why) => {
                    c.flush();
                    if handles_gone {
                        inflight.fail_all(TransportError::Closed);
                        return Exit::Done;
                    }
                    return Exit::Down(why);
                }
            }
        }
    }
}
