//! A sans-I/O SCTP endpoint: one local IP and port, any number of
//! associations. It demultiplexes packets by destination port, peer address
//! and verification tag (RFC 9260 8.5), answers INITs statelessly with a
//! State Cookie (RFC 9260 5.1), handles out-of-the-blue packets (RFC 9260 8.4)
//! and round-robins packet output over its associations.
//!
//! Raw IP sockets see every SCTP packet of the host, so packets for other
//! ports are expected and are only counted.
//!
//! What peers can make it hold is bounded: no state per INIT (the cookie
//! carries it), at most `max_associations` associations, `max_queued_replies`
//! stateless replies, and per association the receive window (see
//! [`Endpoint::held`], [`Endpoint::receive_queue`]). Every refusal is counted in [`Stats`].

use bytes::Bytes;
use mobicore_common::sctp_api::{AssocId, SctpEvent};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::assoc::rx::DataOutcome;
use crate::assoc::{encode, Association, Params, ReceiveQueue, SendError, State};
use crate::config::EndpointConfig;
use crate::cookie::{Cookie, CookieKey};
use crate::wire::packet::HEADER_LEN;
use crate::wire::tlv::{cause, param, Tlv, Tlvs};
use crate::wire::{ChunkRepr, ChunkType, CommonHeader, InitRepr, Packet};

/// Counts of what the endpoint saw; bad input is counted, never fatal.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub rx_packets: u64,
    pub tx_packets: u64,
    /// Packets for another SCTP port of this host (normal with raw sockets).
    pub foreign_port: u64,
    pub bad_checksum: u64,
    pub malformed: u64,
    pub bad_vtag: u64,
    pub out_of_the_blue: u64,
    pub bad_cookie: u64,
    pub stale_cookie: u64,
    pub unknown_chunks: u64,
    /// INIT chunks received (well formed or not).
    pub init_received: u64,
    /// INITs answered with an INIT ACK and a State Cookie: half-open
    /// associations, which hold no state here until a valid COOKIE ECHO (RFC 9260 5.1.3).
    pub half_open_inits: u64,
    /// INITs answered with ABORT "Out of Resource": `max_associations` reached.
    pub init_beyond_max_associations: u64,
    /// Valid COOKIE ECHOs answered with ABORT "Out of Resource": `max_associations` reached.
    pub cookie_beyond_max_associations: u64,
    /// DATA dropped unacknowledged: queuing it would exceed the receive window (RFC 9260 6.2).
    pub data_beyond_receive_window: u64,
    /// DATA dropped unacknowledged: its TSN is further ahead than the receive window.
    pub data_tsn_beyond_window: u64,
    /// Fragments held for reordering given up for a lower TSN when the window was full (RFC 9260 6.2).
    pub data_reneged: u64,
    /// Replies to packets without an association not sent: `max_queued_replies` reached.
    pub replies_dropped: u64,
    /// ERROR / HEARTBEAT ACK chunks not sent: an association's report queue was full.
    pub reports_dropped: u64,
}

/// What an endpoint holds at the moment, for bounds checks and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Associations in any state (an INIT creates none: RFC 9260 5.1.3).
    pub associations: usize,
    /// Replies waiting to be sent to peers without an association.
    pub queued_replies: usize,
    /// Events waiting for the user.
    pub events: usize,
    /// Bytes held for reassembly and ordered delivery, over all associations.
    pub receive_queued_bytes: usize,
}

/// Why an association could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error("no free local port for another association with {0}")]
    NoFreePort(SocketAddr),
}

/// Hands out local SCTP ports for extra associations. The shell's allocator
/// reserves each port host-wide so that endpoints of other processes do not
/// pick it too (raw sockets have no kernel port binding).
pub trait PortAllocator: Send {
    fn allocate(&mut self) -> Option<u16>;
    fn release(&mut self, port: u16);
}

pub struct Endpoint {
    p: Params,
    local_port: u16,
    /// Extra local ports opened for further associations to a peer we are
    /// already associated with (SCTP allows one association per port pair).
    extra_ports: HashSet<u16>,
    ports_changed: bool,
    ports: Option<Box<dyn PortAllocator>>,
    cookie_lifetime: Duration,
    key: CookieKey,
    rng: StdRng,
    epoch: Instant,
    assocs: HashMap<AssocId, Association>,
    by_peer: HashMap<(u16, SocketAddr), AssocId>,
    next_id: u64,
    tx_queue: VecDeque<AssocId>,
    ootb: VecDeque<(SocketAddr, Vec<u8>)>,
    max_queued_replies: usize,
    max_associations: usize,
    events: VecDeque<SctpEvent>,
    pub stats: Stats,
}

impl Endpoint {
    /// `seed` drives tags, initial TSNs and the cookie key (random in the shell, fixed in tests).
    pub fn new(cfg: &EndpointConfig, local_port: u16, seed: u64, now: Instant) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let key = CookieKey(rng.random(), rng.random());
        Endpoint {
            p: Params::from_config(cfg),
            local_port,
            extra_ports: HashSet::new(),
            ports_changed: false,
            ports: None,
            cookie_lifetime: cfg.cookie_lifetime,
            key,
            rng,
            epoch: now,
            assocs: HashMap::new(),
            by_peer: HashMap::new(),
            next_id: 1,
            tx_queue: VecDeque::new(),
            ootb: VecDeque::new(),
            max_queued_replies: cfg.max_queued_replies,
            max_associations: cfg.max_associations,
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    pub fn local_port(&self) -> u16 {
        self.local_port
    }

    /// Every local SCTP port in use: the endpoint's own and the extra ones.
    pub fn local_ports(&self) -> Vec<u16> {
        let mut v: Vec<u16> = std::iter::once(self.local_port).chain(self.extra_ports.iter().copied()).collect();
        v.sort_unstable();
        v
    }

    /// True once after the set of local ports changed (the shell re-filters its socket).
    pub fn take_ports_changed(&mut self) -> bool {
        std::mem::take(&mut self.ports_changed)
    }

    fn owns_port(&self, port: u16) -> bool {
        port == self.local_port || self.extra_ports.contains(&port)
    }

    pub fn association_ids(&self) -> Vec<AssocId> {
        self.assocs.keys().copied().collect()
    }

    pub fn association_count(&self) -> usize {
        self.assocs.len()
    }

    /// What the endpoint holds now (its state size).
    pub fn held(&self) -> Held {
        Held {
            associations: self.assocs.len(),
            queued_replies: self.ootb.len(),
            events: self.events.len(),
            receive_queued_bytes: self.assocs.values().map(|a| a.receive_queue().queued_bytes).sum(),
        }
    }

    /// What an association holds for reassembly and ordered delivery, and the
    /// receive window that bounds it (RFC 9260 6.2).
    pub fn receive_queue(&self, id: AssocId) -> Option<ReceiveQueue> {
        self.assocs.get(&id).map(Association::receive_queue)
    }

    /// The state of an association, if it exists.
    pub fn state(&self, id: AssocId) -> Option<State> {
        self.assocs.get(&id).map(|a| a.state)
    }

    fn nonzero_tag(&mut self) -> u32 {
        loop {
            let t: u32 = self.rng.random();
            if t != 0 {
                return t;
            }
        }
    }

    fn new_id(&mut self) -> AssocId {
        let id = AssocId(self.next_id);
        self.next_id += 1;
        id
    }

    /// Open an association to `remote`; `SctpEvent::Up` follows when it is established.
    ///
    /// SCTP allows one association per pair of ports; a further association to
    /// the same remote gets an extra ephemeral local port of this endpoint.
    pub fn connect(&mut self, now: Instant, remote: SocketAddr) -> Result<AssocId, ConnectError> {
        let mut lport = self.local_port;
        if let Some(&old) = self.by_peer.get(&(lport, remote)) {
            if self.assocs.get(&old).is_some_and(|a| !a.is_closed()) {
                lport = self.extra_port().ok_or(ConnectError::NoFreePort(remote))?;
            } else {
                self.forget(old);
            }
        }
        let id = self.new_id();
        let (tag, tsn) = (self.nonzero_tag(), self.rng.random());
        let a = Association::connect(id, remote, lport, self.p, tag, tsn, now);
        self.assocs.insert(id, a);
        self.by_peer.insert((lport, remote), id);
        self.after(id);
        Ok(id)
    }

    fn extra_port(&mut self) -> Option<u16> {
        for _ in 0..64 {
            let p = match self.ports.as_mut() {
                Some(a) => a.allocate()?,
                None => self.rng.random_range(49152..=65535),
            };
            if !self.owns_port(p) {
                self.extra_ports.insert(p);
                self.ports_changed = true;
                return Some(p);
            }
            if let Some(a) = self.ports.as_mut() {
                a.release(p);
            }
        }
        None
    }

    /// Where extra local ports come from (default: random ephemeral ports).
    pub fn set_port_allocator(&mut self, a: Box<dyn PortAllocator>) {
        self.ports = Some(a);
    }

    /// Queue a user message.
    pub fn send(&mut self, assoc: AssocId, stream: u16, ppid: u32, data: Bytes) -> Result<(), SendError> {
        let a = self.assocs.get_mut(&assoc).ok_or(SendError::UnknownAssociation)?;
        a.send(stream, ppid, data)?;
        self.after(assoc);
        Ok(())
    }

    pub fn shutdown(&mut self, now: Instant, assoc: AssocId) {
        if let Some(a) = self.assocs.get_mut(&assoc) {
            a.shutdown(now);
            self.after(assoc);
        }
    }

    pub fn abort(&mut self, assoc: AssocId) {
        if let Some(a) = self.assocs.get_mut(&assoc) {
            a.abort();
            self.after(assoc);
        }
    }

    pub fn poll_event(&mut self) -> Option<SctpEvent> {
        self.events.pop_front()
    }

    /// Collect an association's events, queue it for output, forget it when finished.
    fn after(&mut self, id: AssocId) {
        let Some(a) = self.assocs.get_mut(&id) else { return };
        self.events.extend(a.events.drain(..));
        self.stats.reports_dropped += a.take_reports_dropped();
        self.stats.data_reneged += a.take_reneged();
        if !a.in_tx_queue && a.wants_transmit() {
            a.in_tx_queue = true;
            self.tx_queue.push_back(id);
        }
        if a.is_finished() && !a.in_tx_queue {
            self.forget(id);
        }
    }

    fn forget(&mut self, id: AssocId) {
        if let Some(a) = self.assocs.remove(&id) {
            let key = (a.local_port, a.peer);
            if self.by_peer.get(&key) == Some(&id) {
                self.by_peer.remove(&key);
            }
            if a.local_port != self.local_port && !self.by_peer.keys().any(|(p, _)| *p == a.local_port) {
                self.extra_ports.remove(&a.local_port);
                self.ports_changed = true;
                if let Some(alloc) = self.ports.as_mut() {
                    alloc.release(a.local_port);
                }
            }
        }
    }

    /// One received SCTP packet (common header onwards) from `src`.
    pub fn handle_packet(&mut self, now: Instant, src: IpAddr, bytes: &[u8]) {
        self.stats.rx_packets += 1;
        let Ok(p) = Packet::new_checked(bytes) else {
            self.stats.malformed += 1;
            return;
        };
        let lport = p.dst_port();
        if !self.owns_port(lport) {
            self.stats.foreign_port += 1;
            return;
        }
        if !p.verify_checksum() {
            self.stats.bad_checksum += 1;
            return;
        }
        let peer = SocketAddr::new(src, p.src_port());
        let vtag = p.verification_tag();
        let mut n = 0;
        let mut first = None;
        let mut has_init = false;
        for c in p.chunks() {
            let Ok(c) = c else {
                self.stats.malformed += 1;
                return;
            };
            n += 1;
            first.get_or_insert((c.chunk_type(), c.flags()));
            has_init |= c.chunk_type() == ChunkType::INIT;
        }
        let Some((first_type, first_flags)) = first else {
            self.stats.malformed += 1;
            return;
        };
        if has_init {
            self.stats.init_received += 1;
            // RFC 9260 3.3.2 / 8.5.1 A: INIT travels alone with tag 0.
            let c = p.chunks().next().and_then(Result::ok);
            let init = c.as_ref().map(ChunkRepr::parse);
            match init {
                Some(Ok(ChunkRepr::Init(i))) if n == 1 && vtag == 0 && i.initiate_tag != 0 => {
                    self.on_init(now, lport, peer, &i)
                }
                _ => self.stats.malformed += 1,
            }
            return;
        }
        let mut skip = 0;
        let id = if first_type == ChunkType::COOKIE_ECHO {
            skip = 1;
            let c = p.chunks().next().and_then(Result::ok).expect("validated");
            match self.on_cookie_echo(now, lport, peer, vtag, c.value()) {
                Some(id) => id,
                None => return,
            }
        } else if let Some(&id) = self.by_peer.get(&(lport, peer)) {
            let a = &self.assocs[&id];
            // RFC 9260 8.5.1 B/C: ABORT and SHUTDOWN COMPLETE may reflect the tag (T bit).
            let reflect = matches!(first_type, ChunkType::ABORT | ChunkType::SHUTDOWN_COMPLETE) && first_flags & 1 != 0;
            let expected = if reflect { a.peer_tag } else { a.local_tag };
            if vtag != expected || a.is_closed() {
                self.stats.bad_vtag += 1;
                return;
            }
            id
        } else {
            self.out_of_the_blue(lport, peer, vtag, &p);
            return;
        };
        self.dispatch(now, id, &p, skip);
    }

    fn dispatch(&mut self, now: Instant, id: AssocId, p: &Packet<&[u8]>, skip: usize) {
        let Some(a) = self.assocs.get_mut(&id) else { return };
        for c in p.chunks().skip(skip).flatten() {
            if c.chunk_type() == ChunkType::DATA && c.len() == 16 {
                let tsn = u32::from_be_bytes([c.value()[0], c.value()[1], c.value()[2], c.value()[3]]);
                a.on_empty_data(tsn);
                break;
            }
            let repr = match ChunkRepr::parse(&c) {
                Ok(r) => r,
                Err(_) => {
                    self.stats.malformed += 1;
                    a.report_error(cause::PROTOCOL_VIOLATION, b"malformed chunk");
                    break;
                }
            };
            match repr {
                ChunkRepr::Data(d) => match a.on_data(&d) {
                    Some(DataOutcome::QueueFull) => self.stats.data_beyond_receive_window += 1,
                    Some(DataOutcome::TsnBeyondWindow) => self.stats.data_tsn_beyond_window += 1,
                    _ => {}
                },
                ChunkRepr::InitAck(i) => a.on_init_ack(now, &i),
                ChunkRepr::Sack(s) => a.on_sack(now, &s),
                ChunkRepr::Heartbeat { info } => a.on_heartbeat(info),
                ChunkRepr::HeartbeatAck { info } => a.on_heartbeat_ack(now, info),
                ChunkRepr::Abort { causes, .. } => {
                    a.on_abort(causes);
                    break;
                }
                ChunkRepr::Shutdown { cum_tsn_ack } => a.on_shutdown(now, cum_tsn_ack),
                ChunkRepr::ShutdownAck => a.on_shutdown_ack(),
                ChunkRepr::Error { causes } => a.on_error(causes),
                ChunkRepr::CookieAck => a.on_cookie_ack(now),
                ChunkRepr::ShutdownComplete { .. } => a.on_shutdown_complete(),
                ChunkRepr::Init(_) | ChunkRepr::CookieEcho { .. } => {}
                ChunkRepr::Unknown { ty, .. } => {
                    // RFC 9260 3.2: the upper two bits say what to do.
                    self.stats.unknown_chunks += 1;
                    match ty >> 6 {
                        0 => break,
                        1 => {
                            a.report_error(cause::UNRECOGNIZED_CHUNK_TYPE, c.raw());
                            break;
                        }
                        2 => {}
                        _ => a.report_error(cause::UNRECOGNIZED_CHUNK_TYPE, c.raw()),
                    }
                }
            }
            if a.is_closed() {
                break;
            }
        }
        a.end_of_packet(now);
        self.after(id);
    }

    /// Queue a packet for a peer without an association, within `max_queued_replies`.
    fn reply(&mut self, peer: SocketAddr, pkt: Vec<u8>) {
        if self.ootb.len() >= self.max_queued_replies {
            self.stats.replies_dropped += 1;
            return;
        }
        self.ootb.push_back((peer, pkt));
    }

    /// ABORT with one error cause, to a peer without an association (`vtag`: its tag).
    fn abort_reply(&mut self, lport: u16, peer: SocketAddr, vtag: u32, code: u16) {
        let mut causes = Vec::new();
        Tlv { ty: code, value: &[] }.push(&mut causes);
        let pkt = Self::single_chunk_packet(lport, peer.port(), vtag, &ChunkRepr::Abort { t: false, causes: &causes });
        self.reply(peer, pkt);
    }

    fn single_chunk_packet(src_port: u16, dst_port: u16, vtag: u32, c: &ChunkRepr<'_>) -> Vec<u8> {
        let mut buf = vec![0u8; HEADER_LEN];
        buf.extend_from_slice(&encode(c));
        let mut p = Packet::new_unchecked(&mut buf[..]);
        CommonHeader { src_port, dst_port, verification_tag: vtag }.emit(&mut p);
        p.fill_checksum();
        buf
    }

    /// INIT: answer with INIT ACK and a State Cookie, keeping no state (RFC 9260 5.1 B, 5.2).
    fn on_init(&mut self, now: Instant, lport: u16, peer: SocketAddr, init: &InitRepr<'_>) {
        if init.outbound_streams == 0 || init.inbound_streams == 0 {
            self.abort_reply(lport, peer, init.initiate_tag, cause::INVALID_MANDATORY_PARAMETER);
            return;
        }
        let existing = self.by_peer.get(&(lport, peer)).and_then(|id| self.assocs.get(id));
        if existing.is_none_or(Association::is_closed) && self.assocs.len() >= self.max_associations {
            // RFC 9260 5.1 / 3.3.10.4: no resources for another association.
            self.stats.init_beyond_max_associations += 1;
            self.abort_reply(lport, peer, init.initiate_tag, cause::OUT_OF_RESOURCE);
            return;
        }
        // Unrecognized parameters: the upper two bits of the type say what to do (RFC 9260 3.2.1).
        let mut params = Vec::new();
        for t in Tlvs::new(init.params).flatten() {
            let known = matches!(
                t.ty,
                param::IPV4_ADDRESS
                    | param::IPV6_ADDRESS
                    | param::COOKIE_PRESERVATIVE
                    | param::HOST_NAME_ADDRESS
                    | param::SUPPORTED_ADDRESS_TYPES
                    | param::ECN_CAPABLE
            );
            if known {
                continue;
            }
            if (t.ty >> 14) & 1 == 1 {
                let mut raw = Vec::new();
                t.push(&mut raw);
                Tlv { ty: param::UNRECOGNIZED_PARAMETER, value: &raw[..4 + t.value.len()] }.push(&mut params);
            }
            if t.ty >> 15 == 0 {
                break;
            }
        }
        let (local_tag, local_tsn, tie) =
            match existing.map(|a| (a.state, a.local_tag, a.peer_tag, a.local_initial_tsn())) {
                // RFC 9260 5.2.1: INIT in COOKIE-WAIT/ECHOED answers with our existing tag.
                Some((State::CookieWait | State::CookieEchoed, lt, _, tsn)) => (lt, tsn, (0, 0)),
                Some((State::Closed, ..)) | None => (self.nonzero_tag(), self.rng.random(), (0, 0)),
                // RFC 9260 5.2.2: a new tag, with the existing tags as tie-tags.
                Some((_, lt, pt, _)) => (self.nonzero_tag(), self.rng.random(), (lt, pt)),
            };
        let cookie = Cookie {
            local_tag,
            peer_tag: init.initiate_tag,
            local_initial_tsn: local_tsn,
            peer_initial_tsn: init.initial_tsn,
            peer_a_rwnd: init.a_rwnd,
            outbound_streams: self.p.outbound_streams.min(init.inbound_streams),
            inbound_streams: self.p.max_inbound_streams.min(init.outbound_streams),
            created_ms: now.saturating_duration_since(self.epoch).as_millis() as u64,
            peer,
            tie_local_tag: tie.0,
            tie_peer_tag: tie.1,
            local_port: lport,
        };
        let mut all = Vec::new();
        Tlv { ty: param::STATE_COOKIE, value: &cookie.encode(&self.key) }.push(&mut all);
        all.extend_from_slice(&params);
        let ack = ChunkRepr::InitAck(InitRepr {
            initiate_tag: local_tag,
            a_rwnd: self.p.receive_window,
            outbound_streams: self.p.outbound_streams,
            inbound_streams: self.p.max_inbound_streams,
            initial_tsn: local_tsn,
            params: &all,
        });
        let pkt = Self::single_chunk_packet(lport, peer.port(), init.initiate_tag, &ack);
        self.stats.half_open_inits += 1;
        self.reply(peer, pkt);
    }

    /// COOKIE ECHO (RFC 9260 5.1 D, 5.1.5, 5.2.4); returns the association that continues with the packet.
    fn on_cookie_echo(
        &mut self,
        now: Instant,
        lport: u16,
        peer: SocketAddr,
        vtag: u32,
        bytes: &[u8],
    ) -> Option<AssocId> {
        let Some(c) = Cookie::decode(bytes, &self.key) else {
            self.stats.bad_cookie += 1;
            return None;
        };
        if c.peer != peer || c.local_port != lport || vtag != c.local_tag {
            self.stats.bad_cookie += 1;
            return None;
        }
        let created = self.epoch + Duration::from_millis(c.created_ms);
        let age = now.saturating_duration_since(created);
        if age > self.cookie_lifetime {
            self.stats.stale_cookie += 1;
            let staleness = ((age - self.cookie_lifetime).as_micros().min(u32::MAX as u128) as u32).to_be_bytes();
            let mut causes = Vec::new();
            Tlv { ty: cause::STALE_COOKIE, value: &staleness }.push(&mut causes);
            let pkt = Self::single_chunk_packet(lport, peer.port(), c.peer_tag, &ChunkRepr::Error { causes: &causes });
            self.reply(peer, pkt);
            return None;
        }
        if let Some(&id) = self.by_peer.get(&(lport, peer)) {
            let a = self.assocs.get_mut(&id).expect("indexed");
            if !a.is_closed() {
                let early = matches!(a.state, State::CookieWait | State::CookieEchoed);
                if a.local_tag == c.local_tag && (a.peer_tag == c.peer_tag || early) {
                    a.on_matching_cookie(now, &c); // cases D and B
                    self.after(id);
                    return Some(id);
                }
                if c.tie_local_tag == a.local_tag && c.tie_peer_tag == a.peer_tag && a.peer_tag != c.peer_tag {
                    // Case A: the peer restarted. Report the old association down.
                    self.events.extend(a.events.drain(..));
                    self.events.push_back(SctpEvent::Down { assoc: id, reason: "peer restarted".into() });
                    self.forget(id);
                } else {
                    self.stats.bad_cookie += 1;
                    return None;
                }
            } else {
                self.forget(id);
            }
        }
        if self.assocs.len() >= self.max_associations {
            // Cookies issued before the limit was reached, or replayed ones.
            self.stats.cookie_beyond_max_associations += 1;
            self.abort_reply(lport, peer, c.peer_tag, cause::OUT_OF_RESOURCE);
            return None;
        }
        let id = self.new_id();
        let a = Association::from_cookie(id, lport, self.p, &c, now);
        self.assocs.insert(id, a);
        self.by_peer.insert((lport, peer), id);
        self.after(id);
        Some(id)
    }

    /// RFC 9260 8.4: packets that belong to no association.
    fn out_of_the_blue(&mut self, lport: u16, peer: SocketAddr, vtag: u32, p: &Packet<&[u8]>) {
        self.stats.out_of_the_blue += 1;
        let mut shutdown_ack = false;
        for c in p.chunks().flatten() {
            match c.chunk_type() {
                ChunkType::ABORT | ChunkType::SHUTDOWN_COMPLETE | ChunkType::COOKIE_ACK | ChunkType::ERROR => return,
                ChunkType::SHUTDOWN_ACK => shutdown_ack = true,
                _ => {}
            }
        }
        let reply = if shutdown_ack {
            ChunkRepr::ShutdownComplete { t: true }
        } else {
            ChunkRepr::Abort { t: true, causes: &[] }
        };
        let pkt = Self::single_chunk_packet(lport, peer.port(), vtag, &reply);
        self.reply(peer, pkt);
    }

    /// The next packet to send, written to `buf`; returns its destination (IP and SCTP port).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        if let Some((dst, pkt)) = self.ootb.pop_front() {
            buf.clear();
            buf.extend_from_slice(&pkt);
            self.stats.tx_packets += 1;
            return Some(dst);
        }
        while let Some(id) = self.tx_queue.pop_front() {
            let Some(a) = self.assocs.get_mut(&id) else { continue };
            if a.poll_transmit(now, buf) {
                let dst = a.peer;
                if a.wants_transmit() {
                    self.tx_queue.push_back(id);
                } else {
                    a.in_tx_queue = false;
                    if a.is_finished() {
                        self.forget(id);
                    }
                }
                self.stats.tx_packets += 1;
                return Some(dst);
            }
            a.in_tx_queue = false;
            if a.is_finished() {
                self.forget(id);
            }
        }
        None
    }

    /// The earliest timer deadline of any association.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.assocs.values().filter_map(Association::poll_timeout).min()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<AssocId> =
            self.assocs.iter().filter(|(_, a)| a.poll_timeout().is_some_and(|t| t <= now)).map(|(id, _)| *id).collect();
        for id in due {
            if let Some(a) = self.assocs.get_mut(&id) {
                a.handle_timeout(now);
            }
            self.after(id);
        }
    }
}
