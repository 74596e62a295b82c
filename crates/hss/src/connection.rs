//! One S6a connection without I/O: octets read in, answers out, time passed
//! in. It owns the Diameter [`Peer`] (capabilities exchange with the
//! allowlist of [`HssConfig::peers`], watchdog, disconnect), the frame
//! decoder and the answers not yet written, and keeps both within the
//! configured bounds:
//!
//! - what it reads: at most `max_message_octets` (a message announcing more
//!   gets DIAMETER_INVALID_MESSAGE_LENGTH, RFC 6733 7.1.5, and closes);
//! - what it answers: once `max_unsent_answer_octets` wait for the peer to
//!   read them, no further request is taken (nor read) until it does.
//!
//! Requests are answered one at a time, in order: none is ever in flight
//! inside the HSS. The shell ([`crate::shell`]) reads while [`read_room`](Connection::read_room)
//! is not zero and writes [`transmit`](Connection::transmit) (both through
//! [`io`](Connection::io)), and calls
//! [`process`](Connection::process) after each of them.

use crate::config::HssConfig;
use crate::hss::Hss;
use crate::s6a_handler::handle_request;
use bytes::buf::Limit;
use bytes::{Buf, BytesMut};
use mobicore_diameter::allowlist::Admission;
use mobicore_diameter::base::LocalIdentity;
use mobicore_diameter::framing::FrameDecoder;
use mobicore_diameter::peer::{Peer, PeerConfig, PeerEvent};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

pub struct Connection {
    cfg: Arc<HssConfig>,
    hss: Hss,
    local: LocalIdentity,
    remote: SocketAddr,
    peer: Peer,
    decoder: FrameDecoder,
    /// Answers not written yet.
    tx: BytesMut,
    /// Reading is held back for unsent answers (counted once per hold).
    held: bool,
}

impl Connection {
    /// A connection accepted from `remote` (whose address the shell has
    /// already checked against the allowlist).
    pub fn new(
        cfg: Arc<HssConfig>,
        hss: Hss,
        local: LocalIdentity,
        remote: SocketAddr,
        id_seed: u32,
        now: Instant,
    ) -> Self {
        let mut pc = PeerConfig::s6a(local.clone());
        pc.watchdog_interval = cfg.watchdog_interval();
        pc.cer_timeout = cfg.cer_timeout();
        pc.id_seed = id_seed;
        pc.admission = Admission::Listed { peers: cfg.peers.clone(), from: remote.ip() };
        let peer = Peer::responder(pc, now, hss.counters().clone());
        let decoder = FrameDecoder::new(cfg.max_message_octets);
        Connection { cfg, hss, local, remote, peer, decoder, tx: BytesMut::new(), held: false }
    }

    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// Whether the connection is done: the shell writes what is left of
    /// [`transmit`](Self::transmit), then closes it.
    pub fn is_closed(&self) -> bool {
        self.peer.is_closed()
    }

    /// Octets held for this peer: read and not yet a whole message, plus
    /// answers not yet written.
    pub fn buffered(&self) -> usize {
        self.decoder.buffered() + self.tx.len()
    }

    /// How many octets may be read now; zero while answers wait for the
    /// peer to read them or once the connection is closed.
    pub fn read_room(&self) -> usize {
        if self.peer.is_closed() || self.tx.len() >= self.cfg.max_unsent_answer_octets {
            0
        } else {
            self.decoder.room()
        }
    }

    /// The buffer to read into (at most [`read_room`](Self::read_room)
    /// octets; read only when that is not zero) and the answers to write,
    /// together so that a shell can wait on both.
    pub fn io(&mut self) -> (Limit<&mut BytesMut>, &[u8]) {
        (self.decoder.read_buf(), &self.tx)
    }

    /// Octets from the peer (for callers without a stream, e.g. tests):
    /// takes at most [`read_room`](Self::read_room) of them, processes
    /// them, and returns how many it took.
    pub fn input(&mut self, now: Instant, data: &[u8]) -> usize {
        let n = data.len().min(self.read_room());
        self.decoder.push(&data[..n]);
        self.process(now);
        n
    }

    /// The answers to write.
    pub fn transmit(&self) -> &[u8] {
        &self.tx
    }

    /// `n` octets of [`transmit`](Self::transmit) were written.
    pub fn advance_transmit(&mut self, n: usize) {
        self.tx.advance(n.min(self.tx.len()));
    }

    /// Takes the whole messages read so far, as long as the unsent answers
    /// stay below their bound.
    pub fn process(&mut self, now: Instant) {
        loop {
            self.drain_peer();
            if self.peer.is_closed() {
                return;
            }
            if self.tx.len() >= self.cfg.max_unsent_answer_octets {
                if !self.held {
                    self.held = true;
                    self.hss.counters().incr("s6a_requests_held_for_unread_answers");
                    tracing::debug!(remote = %self.remote, "S6a peer does not read its answers: reading held");
                }
                return;
            }
            self.held = false;
            match self.decoder.next_frame() {
                Ok(Some(frame)) => self.peer.handle_frame(now, &frame),
                Ok(None) => return,
                Err(e) => {
                    // RFC 6733 7.1.5: DIAMETER_INVALID_MESSAGE_LENGTH, then close.
                    if matches!(e.error, mobicore_diameter::WireError::MessageLength(n) if n as usize > self.decoder.max_len())
                    {
                        self.hss.counters().incr("s6a_message_over_max_length");
                    }
                    tracing::info!(remote = %self.remote, error = %e, "S6a stream cut off");
                    self.peer.handle_framing_error(e);
                }
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.peer.poll_timeout()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.peer.handle_timeout(now);
        self.drain_peer();
    }

    /// Orderly close (DPR, RFC 6733 5.4), e.g. at shutdown.
    pub fn close(&mut self, now: Instant) {
        self.peer.close(now);
        self.drain_peer();
    }

    /// Hands the peer's requests to the HSS and queues what it sends.
    fn drain_peer(&mut self) {
        while let Some(ev) = self.peer.poll_event() {
            match ev {
                PeerEvent::Request(m) => {
                    let a = handle_request(&mut self.hss, &self.cfg, &self.local, &m);
                    self.peer.send(&a);
                }
                PeerEvent::Up { origin_host, origin_realm } => {
                    tracing::info!(remote = %self.remote, %origin_host, %origin_realm, "S6a peer up")
                }
                PeerEvent::Down(why) => tracing::info!(remote = %self.remote, %why, "S6a peer down"),
                PeerEvent::Answer(_) | PeerEvent::MalformedAnswer { .. } => {
                    self.hss.counters().incr("diameter_unexpected_answer")
                }
            }
        }
        if let Some(b) = self.peer.poll_transmit() {
            self.tx.extend_from_slice(&b);
        }
    }
}
