//! Two sans-I/O endpoints wired together in memory under a virtual clock.

use bytes::Bytes;
use mobicore_common::sctp_api::{AssocId, SctpEvent, PPID_S1AP};
use mobicore_sctp::wire::{Chunk, ChunkRepr, ChunkType, CommonHeader, DataRepr, InitRepr, Packet};
use mobicore_sctp::{Endpoint, EndpointConfig, State, Transport};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const A_PORT: u16 = 50_000;
const B_PORT: u16 = 36_412;

fn ip() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

fn cfg(port: u16) -> EndpointConfig {
    EndpointConfig::new(SocketAddr::new(ip(), port), Transport::RawIp)
}

/// Which packets reach the other side: (from_a, packet) -> deliver?
type Filter = Box<dyn FnMut(bool, &[u8]) -> bool>;

struct Pair {
    a: Endpoint,
    b: Endpoint,
    now: Instant,
    filter: Filter,
    ev_a: Vec<SctpEvent>,
    ev_b: Vec<SctpEvent>,
    /// Every packet put on the wire: (from_a, bytes).
    wire: Vec<(bool, Vec<u8>)>,
}

impl Pair {
    fn new() -> Self {
        Self::with(cfg(A_PORT), cfg(B_PORT))
    }
    fn with(ca: EndpointConfig, cb: EndpointConfig) -> Self {
        let now = Instant::now();
        Pair {
            a: Endpoint::new(&ca, A_PORT, 1, now),
            b: Endpoint::new(&cb, B_PORT, 2, now),
            now,
            filter: Box::new(|_, _| true),
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            wire: Vec::new(),
        }
    }
    fn b_addr() -> SocketAddr {
        SocketAddr::new(ip(), B_PORT)
    }

    /// Exchange packets until both sides are quiet; bounded.
    fn drive(&mut self) {
        let mut buf = Vec::new();
        for _ in 0..100_000 {
            let mut moved = false;
            while let Some(dst) = self.a.poll_transmit(self.now, &mut buf) {
                assert_eq!(dst.port(), B_PORT);
                moved = true;
                self.wire.push((true, buf.clone()));
                if (self.filter)(true, &buf) {
                    self.b.handle_packet(self.now, ip(), &buf);
                }
            }
            while let Some(dst) = self.b.poll_transmit(self.now, &mut buf) {
                assert!(dst.port() == A_PORT || dst.port() >= 49152);
                moved = true;
                self.wire.push((false, buf.clone()));
                if (self.filter)(false, &buf) {
                    self.a.handle_packet(self.now, ip(), &buf);
                }
            }
            while let Some(e) = self.a.poll_event() {
                self.ev_a.push(e);
            }
            while let Some(e) = self.b.poll_event() {
                self.ev_b.push(e);
            }
            if !moved {
                return;
            }
        }
        panic!("endless exchange");
    }

    /// Jump to the next timer and fire it; false when no timer is armed.
    fn step(&mut self) -> bool {
        let t = [self.a.poll_timeout(), self.b.poll_timeout()].into_iter().flatten().min();
        let Some(t) = t else { return false };
        self.now = self.now.max(t);
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        self.drive();
        true
    }

    fn run_until(&mut self, mut done: impl FnMut(&Pair) -> bool) {
        self.drive();
        for _ in 0..10_000 {
            if done(self) {
                return;
            }
            assert!(self.step(), "no timer armed and condition not met");
        }
        panic!("condition not met");
    }

    fn connect(&mut self) -> (AssocId, AssocId) {
        let id = self.a.connect(self.now, Self::b_addr()).unwrap();
        self.drive();
        let up_b = self.ev_b.iter().find_map(|e| match e {
            SctpEvent::Up { assoc, .. } => Some(*assoc),
            _ => None,
        });
        assert!(self.ev_a.iter().any(|e| matches!(e, SctpEvent::Up { assoc, .. } if *assoc == id)));
        self.ev_a.clear();
        self.ev_b.clear();
        (id, up_b.expect("server side up"))
    }

    fn data_b(&self) -> Vec<(u16, u32, Bytes)> {
        data_of(&self.ev_b)
    }
}

fn data_of(evs: &[SctpEvent]) -> Vec<(u16, u32, Bytes)> {
    evs.iter()
        .filter_map(|e| match e {
            SctpEvent::Data { stream, ppid, data, .. } => Some((*stream, *ppid, data.clone())),
            _ => None,
        })
        .collect()
}

fn down_reason(evs: &[SctpEvent]) -> Option<String> {
    evs.iter().find_map(|e| match e {
        SctpEvent::Down { reason, .. } => Some(reason.clone()),
        _ => None,
    })
}

fn chunk_types(pkt: &[u8]) -> Vec<ChunkType> {
    Packet::new_checked(pkt).unwrap().chunks().map(|c| c.unwrap().chunk_type()).collect()
}

fn has_data(pkt: &[u8]) -> bool {
    chunk_types(pkt).contains(&ChunkType::DATA)
}

#[test]
fn handshake_brings_both_sides_up_with_negotiated_streams() {
    let mut p = Pair::with(cfg(A_PORT), {
        let mut c = cfg(B_PORT);
        c.outbound_streams = 4;
        c
    });
    let id = p.a.connect(p.now, Pair::b_addr()).unwrap();
    p.drive();
    let up = |evs: &[SctpEvent]| {
        evs.iter().find_map(|e| match e {
            SctpEvent::Up { inbound_streams, outbound_streams, peer, .. } => {
                Some((*inbound_streams, *outbound_streams, *peer))
            }
            _ => None,
        })
    };
    assert_eq!(up(&p.ev_a), Some((4, 16, Pair::b_addr())));
    assert_eq!(up(&p.ev_b), Some((16, 4, SocketAddr::new(ip(), A_PORT))));
    assert_eq!(p.a.state(id), Some(State::Established));
    // INIT, INIT ACK, COOKIE ECHO, COOKIE ACK.
    let types: Vec<_> = p.wire.iter().map(|(_, b)| chunk_types(b)[0]).collect();
    assert_eq!(types, [ChunkType::INIT, ChunkType::INIT_ACK, ChunkType::COOKIE_ECHO, ChunkType::COOKIE_ACK]);
    assert_eq!(Packet::new_checked(&p.wire[0].1[..]).unwrap().verification_tag(), 0);
    // A second association to the same peer gets its own local port.
    let id2 = p.a.connect(p.now, Pair::b_addr()).unwrap();
    p.drive();
    assert_eq!(p.a.state(id2), Some(State::Established));
    assert_eq!(p.a.local_ports().len(), 2);
    assert_eq!(p.b.association_count(), 2);
    p.a.abort(id2);
    p.drive();
    assert_eq!(p.a.local_ports(), [A_PORT]);
}

#[test]
fn data_both_ways_is_delivered_in_order_per_stream() {
    let mut p = Pair::new();
    let (ia, ib) = p.connect();
    for i in 0..200u32 {
        let stream = (i % 5) as u16;
        p.a.send(ia, stream, PPID_S1AP, Bytes::from(format!("a{i}"))).unwrap();
        p.b.send(ib, stream, PPID_S1AP, Bytes::from(format!("b{i}"))).unwrap();
    }
    p.drive();
    p.run_until(|p| p.a.poll_timeout().is_none_or(|t| t > p.now + Duration::from_secs(5)));
    for (evs, tag) in [(&p.ev_b, "a"), (&p.ev_a, "b")] {
        let got = data_of(evs);
        assert_eq!(got.len(), 200);
        for s in 0..5u16 {
            let seq: Vec<String> = got
                .iter()
                .filter(|(st, ..)| *st == s)
                .map(|(_, _, d)| String::from_utf8(d.to_vec()).unwrap())
                .collect();
            let want: Vec<String> = (0..200u32).filter(|i| i % 5 == s as u32).map(|i| format!("{tag}{i}")).collect();
            assert_eq!(seq, want);
        }
        assert!(got.iter().all(|(_, ppid, _)| *ppid == PPID_S1AP));
    }
    // Bundling: 200 small messages went in far fewer packets.
    let data_packets = p.wire.iter().filter(|(from_a, b)| *from_a && has_data(b)).count();
    assert!(data_packets < 50, "{data_packets} packets for 200 messages");
    assert!(p.wire.iter().all(|(_, b)| b.len() <= 1400));
}

#[test]
fn a_5000_byte_message_is_fragmented_and_reassembled() {
    let mut p = Pair::new();
    let (ia, _) = p.connect();
    let msg: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    p.a.send(ia, 3, PPID_S1AP, Bytes::from(msg.clone())).unwrap();
    p.drive();
    let got = p.data_b();
    assert_eq!(got, vec![(3, PPID_S1AP, Bytes::from(msg))]);
    let frags = p.wire.iter().filter(|(a, b)| *a && has_data(b)).count();
    assert_eq!(frags, 4, "5000 bytes in 1372-byte fragments");
}

#[test]
fn a_lost_packet_is_retransmitted_after_t3() {
    let mut p = Pair::new();
    let (ia, _) = p.connect();
    let mut dropped = false;
    p.filter = Box::new(move |from_a, b| {
        if from_a && has_data(b) && !dropped {
            dropped = true;
            return false;
        }
        true
    });
    p.a.send(ia, 0, PPID_S1AP, Bytes::from_static(b"lost once")).unwrap();
    p.drive();
    assert!(p.data_b().is_empty());
    let t0 = p.now;
    p.run_until(|p| !p.data_b().is_empty());
    assert_eq!(p.data_b()[0].2, Bytes::from_static(b"lost once"));
    assert!(p.now - t0 >= Duration::from_secs(1), "retransmitted on T3 (RTO.Initial)");
}

#[test]
fn a_gap_triggers_fast_retransmit_and_order_is_kept() {
    let mut p = Pair::new();
    let (ia, _) = p.connect();
    // Grow cwnd first so that many packets are in flight at once.
    for i in 0..2000u32 {
        p.a.send(ia, 0, PPID_S1AP, Bytes::from(vec![(i % 200) as u8; 300])).unwrap();
    }
    let mut n = 0;
    p.filter = Box::new(move |from_a, b| {
        if from_a && has_data(b) {
            n += 1;
            return n != 30;
        }
        true
    });
    let t0 = p.now;
    p.run_until(|p| p.data_b().len() == 2000);
    let got = p.data_b();
    assert!(got.iter().enumerate().all(|(i, (_, _, d))| d[0] == (i % 200) as u8 && d.len() == 300));
    assert!(p.now - t0 < Duration::from_secs(1), "recovered by fast retransmit, not T3");
}

#[test]
fn unanswered_heartbeats_take_the_association_down() {
    let mut ca = cfg(A_PORT);
    ca.heartbeat_interval = Duration::from_secs(2);
    ca.path_max_retrans = 3;
    let mut p = Pair::with(ca, cfg(B_PORT));
    let (ia, _) = p.connect();
    // An idle association keeps answering heartbeats and stays up.
    for _ in 0..5 {
        p.step();
    }
    assert!(down_reason(&p.ev_a).is_none());
    assert!(p.wire.iter().any(|(_, b)| chunk_types(b).contains(&ChunkType::HEARTBEAT_ACK)));
    // Now the peer vanishes.
    p.filter = Box::new(|_, _| false);
    p.run_until(|p| down_reason(&p.ev_a).is_some());
    assert!(down_reason(&p.ev_a).unwrap().contains("heartbeat"), "{:?}", down_reason(&p.ev_a));
    assert_eq!(p.a.state(ia), None);
    assert_eq!(p.a.association_count(), 0);
}

#[test]
fn retransmissions_exhausted_take_the_association_down() {
    let mut p = Pair::new();
    let (ia, _) = p.connect();
    p.filter = Box::new(|_, _| false);
    p.a.send(ia, 0, PPID_S1AP, Bytes::from_static(b"x")).unwrap();
    p.run_until(|p| down_reason(&p.ev_a).is_some());
    assert!(down_reason(&p.ev_a).unwrap().contains("retransmissions"));
}

#[test]
fn init_without_answer_gives_up() {
    let mut p = Pair::new();
    p.filter = Box::new(|_, _| false);
    let id = p.a.connect(p.now, Pair::b_addr()).unwrap();
    p.run_until(|p| down_reason(&p.ev_a).is_some());
    assert_eq!(down_reason(&p.ev_a).unwrap(), "no answer to INIT");
    let inits = p.wire.iter().filter(|(a, b)| *a && chunk_types(b) == [ChunkType::INIT]).count();
    assert_eq!(inits, 9, "first INIT and Max.Init.Retransmits = 8");
    assert_eq!(p.a.state(id), None);
}

#[test]
fn abort_reaches_the_peer() {
    let mut p = Pair::new();
    let (ia, ib) = p.connect();
    p.a.abort(ia);
    p.drive();
    assert_eq!(down_reason(&p.ev_a).unwrap(), "aborted by the user");
    assert_eq!(down_reason(&p.ev_b).unwrap(), "aborted by the peer: user-initiated abort");
    assert_eq!(p.b.state(ib), None);
    assert_eq!((p.a.association_count(), p.b.association_count()), (0, 0));
}

#[test]
fn shutdown_delivers_queued_data_then_closes_both() {
    let mut p = Pair::new();
    let (ia, _) = p.connect();
    for i in 0..10u8 {
        p.a.send(ia, 1, PPID_S1AP, Bytes::from(vec![i; 2000])).unwrap();
    }
    p.a.shutdown(p.now, ia);
    assert!(p.a.send(ia, 1, PPID_S1AP, Bytes::from_static(b"late")).is_err());
    p.run_until(|p| down_reason(&p.ev_a).is_some() && down_reason(&p.ev_b).is_some());
    assert_eq!(p.data_b().len(), 10);
    assert_eq!(down_reason(&p.ev_a).unwrap(), "shutdown");
    assert_eq!(down_reason(&p.ev_b).unwrap(), "shutdown");
    let seq: Vec<ChunkType> =
        p.wire.iter().flat_map(|(_, b)| chunk_types(b)).filter(|t| matches!(t.0, 7 | 8 | 14)).collect();
    assert_eq!(seq, [ChunkType::SHUTDOWN, ChunkType::SHUTDOWN_ACK, ChunkType::SHUTDOWN_COMPLETE]);
    assert_eq!((p.a.association_count(), p.b.association_count()), (0, 0));
}

#[test]
fn delayed_sack_goes_out_within_the_delay() {
    let mut p = Pair::new();
    let (ia, _) = p.connect();
    p.a.send(ia, 0, PPID_S1AP, Bytes::from_static(b"one")).unwrap();
    p.drive();
    assert!(!p.wire.iter().any(|(a, b)| !*a && chunk_types(b).contains(&ChunkType::SACK)));
    let t0 = p.now;
    p.step();
    assert_eq!(p.now - t0, Duration::from_millis(10));
    assert!(p.wire.iter().any(|(a, b)| !*a && chunk_types(b).contains(&ChunkType::SACK)));
}

#[test]
fn sack_is_bundled_with_the_answer() {
    let mut p = Pair::new();
    let (ia, ib) = p.connect();
    p.a.send(ia, 0, PPID_S1AP, Bytes::from_static(b"request")).unwrap();
    // Deliver a's packet, then let b answer before its SACK timer fires.
    let mut buf = Vec::new();
    p.a.poll_transmit(p.now, &mut buf).unwrap();
    p.b.handle_packet(p.now, ip(), &buf);
    p.b.send(ib, 0, PPID_S1AP, Bytes::from_static(b"response")).unwrap();
    p.b.poll_transmit(p.now, &mut buf).unwrap();
    assert_eq!(chunk_types(&buf), [ChunkType::SACK, ChunkType::DATA]);
}

#[test]
fn peer_restart_replaces_the_association() {
    let mut p = Pair::new();
    let (_, ib) = p.connect();
    // The client loses its state and connects again from the same port.
    p.a = Endpoint::new(&cfg(A_PORT), A_PORT, 99, p.now);
    let ia2 = p.a.connect(p.now, Pair::b_addr()).unwrap();
    p.drive();
    assert_eq!(down_reason(&p.ev_b).unwrap(), "peer restarted");
    let new_b = p.ev_b.iter().find_map(|e| match e {
        SctpEvent::Up { assoc, .. } => Some(*assoc),
        _ => None,
    });
    assert!(new_b.is_some_and(|n| n != ib));
    assert_eq!(p.a.state(ia2), Some(State::Established));
    assert_eq!(p.b.association_count(), 1);
}

fn resign(pkt: &mut [u8]) {
    Packet::new_unchecked(&mut pkt[..]).fill_checksum();
}

#[test]
fn bad_input_is_counted_and_answered_per_rfc() {
    let mut p = Pair::new();
    let (ia, _) = p.connect();
    p.a.send(ia, 0, PPID_S1AP, Bytes::from_static(b"x")).unwrap();
    let mut buf = Vec::new();
    p.a.poll_transmit(p.now, &mut buf).unwrap();

    let mut bad = buf.clone();
    *bad.last_mut().unwrap() ^= 0xff;
    p.b.handle_packet(p.now, ip(), &bad);
    assert_eq!(p.b.stats.bad_checksum, 1);

    let mut other = buf.clone();
    other[2..4].copy_from_slice(&9999u16.to_be_bytes());
    resign(&mut other);
    p.b.handle_packet(p.now, ip(), &other);
    assert_eq!(p.b.stats.foreign_port, 1);

    let mut wrong_tag = buf.clone();
    wrong_tag[4] ^= 1;
    resign(&mut wrong_tag);
    p.b.handle_packet(p.now, ip(), &wrong_tag);
    assert_eq!(p.b.stats.bad_vtag, 1);
    assert!(p.data_b().is_empty());

    // Out of the blue: DATA from an unknown peer port gets ABORT with the T bit.
    let mut ootb = buf.clone();
    ootb[0..2].copy_from_slice(&4242u16.to_be_bytes());
    resign(&mut ootb);
    p.b.handle_packet(p.now, ip(), &ootb);
    assert_eq!(p.b.stats.out_of_the_blue, 1);
    let dst = p.b.poll_transmit(p.now, &mut buf).unwrap();
    assert_eq!(dst.port(), 4242);
    let pkt = Packet::new_checked(&buf[..]).unwrap();
    let c = pkt.chunks().next().unwrap().unwrap();
    assert_eq!((c.chunk_type(), c.flags()), (ChunkType::ABORT, 1));

    // Truncated garbage.
    p.b.handle_packet(p.now, ip(), &[1, 2, 3]);
    assert_eq!(p.b.stats.malformed, 1);
}

#[test]
fn invalid_stream_and_unknown_chunks_are_reported() {
    let mut p = Pair::with(cfg(A_PORT), {
        let mut c = cfg(B_PORT);
        c.max_inbound_streams = 2;
        c
    });
    let (ia, _) = p.connect();
    // a may only use 2 streams: the endpoint refuses stream 5 locally.
    assert!(p.a.send(ia, 5, PPID_S1AP, Bytes::from_static(b"x")).is_err());
    // Forge a DATA chunk on stream 5 plus an unknown chunk 0x7f (upper bits 01: report).
    p.a.send(ia, 1, PPID_S1AP, Bytes::from_static(b"x")).unwrap();
    let mut buf = Vec::new();
    p.a.poll_transmit(p.now, &mut buf).unwrap();
    let data_at = 12;
    assert_eq!(buf[data_at], 0);
    buf[data_at + 8..data_at + 10].copy_from_slice(&5u16.to_be_bytes());
    buf.extend_from_slice(&[0x7f, 0, 0, 4]);
    resign(&mut buf);
    p.b.handle_packet(p.now, ip(), &buf);
    assert_eq!(p.b.stats.unknown_chunks, 1);
    let mut out = Vec::new();
    p.b.poll_transmit(p.now, &mut out).unwrap();
    let causes: Vec<u16> = Packet::new_checked(&out[..])
        .unwrap()
        .chunks()
        .filter_map(|c| {
            let c = c.unwrap();
            match ChunkRepr::parse(&Chunk::new_unchecked(c.raw())).unwrap() {
                ChunkRepr::Error { causes } => Some(u16::from_be_bytes([causes[0], causes[1]])),
                _ => None,
            }
        })
        .collect();
    assert_eq!(causes, [1, 6], "invalid stream identifier, unrecognized chunk type");
    assert!(p.data_b().is_empty());
}

#[test]
fn forged_and_stale_cookies_are_refused() {
    let mut p = Pair::new();
    p.a.connect(p.now, Pair::b_addr()).unwrap();
    let mut buf = Vec::new();
    p.a.poll_transmit(p.now, &mut buf).unwrap(); // INIT
    p.b.handle_packet(p.now, ip(), &buf);
    p.b.poll_transmit(p.now, &mut buf).unwrap(); // INIT ACK
    p.a.handle_packet(p.now, ip(), &buf);
    p.a.poll_transmit(p.now, &mut buf).unwrap(); // COOKIE ECHO
    let mut forged = buf.clone();
    forged[20] ^= 1;
    resign(&mut forged);
    p.b.handle_packet(p.now, ip(), &forged);
    assert_eq!(p.b.stats.bad_cookie, 1);
    assert_eq!(p.b.association_count(), 0);
    // The genuine one, too late.
    let later = p.now + Duration::from_secs(61);
    p.b.handle_packet(later, ip(), &buf);
    assert_eq!(p.b.stats.stale_cookie, 1);
    let mut out = Vec::new();
    p.b.poll_transmit(later, &mut out).unwrap();
    assert_eq!(chunk_types(&out), [ChunkType::ERROR]);
    // In time it works.
    p.b.handle_packet(p.now, ip(), &buf);
    assert_eq!(p.b.association_count(), 1);
}

// ---- bounds: what a peer can make an endpoint hold (RFC 9260 5.1.3, 6.2, 6.9) ----

/// A packet from `src_port` to `dst_port` with these chunks, checksummed.
fn packet(src_port: u16, dst_port: u16, vtag: u32, chunks: &[ChunkRepr<'_>]) -> Vec<u8> {
    let mut buf = vec![0u8; 12];
    for c in chunks {
        let at = buf.len();
        buf.resize(at + c.buffer_len(), 0);
        c.emit(&mut buf[at..]);
    }
    let mut p = Packet::new_unchecked(&mut buf[..]);
    CommonHeader { src_port, dst_port, verification_tag: vtag }.emit(&mut p);
    p.fill_checksum();
    buf
}

/// What a forging peer on a's side of an established pair needs: the tag b
/// expects and the first TSN a will use.
fn forge_context(p: &Pair) -> (u32, u32) {
    let vtag = p
        .wire
        .iter()
        .rev()
        .find(|(from_a, _)| *from_a)
        .map(|(_, b)| Packet::new_checked(&b[..]).unwrap().verification_tag());
    let init = Packet::new_checked(&p.wire[0].1[..]).unwrap();
    let c = init.chunks().next().unwrap().unwrap();
    let tsn = match ChunkRepr::parse(&c).unwrap() {
        ChunkRepr::Init(i) => i.initial_tsn,
        other => panic!("first packet is not an INIT: {other:?}"),
    };
    (vtag.unwrap(), tsn)
}

fn data(tsn: u32, stream: u16, ssn: u16, (begin, end): (bool, bool), payload: &[u8]) -> ChunkRepr<'_> {
    ChunkRepr::Data(DataRepr {
        unordered: false,
        begin,
        end,
        tsn,
        stream_id: stream,
        ssn,
        ppid: PPID_S1AP,
        data: payload,
    })
}

fn small_window(port: u16, window: u32) -> EndpointConfig {
    let mut c = cfg(port);
    c.receive_window = window;
    c
}

#[test]
fn out_of_order_fragment_flood_stays_within_the_window_and_delivery_goes_on() {
    const WINDOW: usize = 16 << 10;
    let mut p = Pair::with(cfg(A_PORT), small_window(B_PORT, WINDOW as u32));
    let (ia, ib) = p.connect();
    let (vtag, tsn0) = forge_context(&p);
    let junk = [0xa5u8; 500];
    // First fragments of messages that never complete, far above the cumulative
    // TSN but inside the window: 100 kB offered to a 16 kB window.
    for k in 0..200u32 {
        let pkt = packet(A_PORT, B_PORT, vtag, &[data(tsn0.wrapping_add(100 + 2 * k), 1, 5, (true, false), &junk)]);
        p.b.handle_packet(p.now, ip(), &pkt);
        let q = p.b.receive_queue(ib).unwrap();
        assert!(q.queued_bytes <= q.window, "{q:?}");
        assert_eq!(q.window, WINDOW);
    }
    assert!(p.b.stats.data_beyond_receive_window > 0);
    // TSNs far beyond the window are not kept at all.
    let before = p.b.receive_queue(ib).unwrap();
    for k in 0..100u32 {
        let pkt = packet(A_PORT, B_PORT, vtag, &[data(tsn0.wrapping_add(1_000_000 + k), 1, 6, (true, true), b"far")]);
        p.b.handle_packet(p.now, ip(), &pkt);
    }
    assert_eq!(p.b.stats.data_tsn_beyond_window, 100);
    assert_eq!(p.b.receive_queue(ib).unwrap(), before);
    assert!(before.tsns_above_cum <= WINDOW);
    p.drive();
    // The real sender's data, below the junk, still gets through: small
    // messages at once, a fragmented one in place of the highest junk (reneged).
    let big: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    p.a.send(ia, 0, PPID_S1AP, Bytes::from_static(b"first")).unwrap();
    p.a.send(ia, 0, PPID_S1AP, Bytes::from(big.clone())).unwrap();
    p.a.send(ia, 0, PPID_S1AP, Bytes::from_static(b"last")).unwrap();
    p.run_until(|p| p.data_b().len() == 3 || down_reason(&p.ev_a).is_some());
    let got: Vec<Bytes> = p.data_b().into_iter().map(|(_, _, d)| d).collect();
    assert_eq!(got, [Bytes::from_static(b"first"), Bytes::from(big), Bytes::from_static(b"last")]);
    assert!(p.b.stats.data_reneged > 0);
    let q = p.b.receive_queue(ib).unwrap();
    assert!(q.queued_bytes <= q.window, "{q:?}");
}

#[test]
fn endless_fragments_of_one_message_are_bounded_and_later_messages_still_arrive() {
    const WINDOW: usize = 8 << 10;
    let mut p = Pair::with(cfg(A_PORT), small_window(B_PORT, WINDOW as u32));
    let (_, ib) = p.connect();
    let (vtag, tsn0) = forge_context(&p);
    let junk = [0x5au8; 1000];
    // In order, so every accepted one is cumulatively acked; it never ends.
    let mut next = tsn0;
    for k in 0..64u32 {
        let flags = (k == 0, false);
        let pkt = packet(A_PORT, B_PORT, vtag, &[data(next, 2, 0, flags, &junk)]);
        p.b.handle_packet(p.now, ip(), &pkt);
        let q = p.b.receive_queue(ib).unwrap();
        assert!(q.queued_bytes <= WINDOW, "{q:?}");
        if p.b.stats.data_beyond_receive_window == 0 {
            next = next.wrapping_add(1);
        }
    }
    assert_eq!(p.b.receive_queue(ib).unwrap().queued_bytes, WINDOW / 1000 * 1000);
    assert_eq!(p.b.stats.data_beyond_receive_window, 64 - (WINDOW / 1000) as u64);
    // The next TSN with a whole message on another stream is delivered at once.
    let pkt = packet(A_PORT, B_PORT, vtag, &[data(next, 3, 0, (true, true), b"still here")]);
    p.b.handle_packet(p.now, ip(), &pkt);
    p.drive();
    assert_eq!(p.data_b(), [(3, PPID_S1AP, Bytes::from_static(b"still here"))]);
}

/// Several endpoints on loopback, packets routed by destination port.
struct Net {
    eps: Vec<Endpoint>,
    events: Vec<Vec<SctpEvent>>,
    now: Instant,
}

impl Net {
    fn new(cfgs: Vec<EndpointConfig>) -> Self {
        let now = Instant::now();
        let eps: Vec<Endpoint> =
            cfgs.iter().enumerate().map(|(i, c)| Endpoint::new(c, c.local.port(), 10 + i as u64, now)).collect();
        let events = eps.iter().map(|_| Vec::new()).collect();
        Net { eps, events, now }
    }
    fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::new(ip(), self.eps[i].local_port())
    }
    /// Send everything every endpoint has until all are quiet; bounded.
    fn drive(&mut self) {
        let mut buf = Vec::new();
        for _ in 0..10_000 {
            let mut moved = false;
            for i in 0..self.eps.len() {
                while let Some(dst) = self.eps[i].poll_transmit(self.now, &mut buf) {
                    moved = true;
                    if let Some(j) = self.eps.iter().position(|e| e.local_ports().contains(&dst.port())) {
                        self.eps[j].handle_packet(self.now, ip(), &buf);
                    }
                }
                while let Some(e) = self.eps[i].poll_event() {
                    self.events[i].push(e);
                }
            }
            if !moved {
                return;
            }
        }
        panic!("endless exchange");
    }
}

#[test]
fn init_beyond_max_associations_is_aborted_and_the_existing_one_keeps_working() {
    let mut server = cfg(B_PORT);
    server.max_associations = 1;
    let mut n = Net::new(vec![server, cfg(A_PORT), cfg(A_PORT + 1), cfg(A_PORT + 2)]);
    let b = n.addr(0);
    let first = n.eps[1].connect(n.now, b).unwrap();
    n.drive();
    assert_eq!(n.eps[1].state(first), Some(State::Established));
    // A second peer: its INIT gets ABORT "Out of Resource" (RFC 9260 5.1, 3.3.10.4).
    let second = n.eps[2].connect(n.now, b).unwrap();
    n.drive();
    assert_eq!(down_reason(&n.events[2]).as_deref(), Some("aborted by the peer: out of resource"));
    assert_eq!(n.eps[2].state(second), None);
    assert_eq!(n.eps[0].stats.init_beyond_max_associations, 1);
    assert_eq!(n.eps[0].association_count(), 1);
    // The existing association is unaffected.
    n.eps[1].send(first, 0, PPID_S1AP, Bytes::from_static(b"after")).unwrap();
    n.drive();
    assert_eq!(data_of(&n.events[0]), [(0, PPID_S1AP, Bytes::from_static(b"after"))]);
    assert!(down_reason(&n.events[0]).is_none());
    // A cookie issued before the limit was reached is refused too.
    n.eps[1].abort(first);
    n.drive();
    assert_eq!(n.eps[0].association_count(), 0);
    let (c3, c1) = (n.eps[3].connect(n.now, b).unwrap(), n.eps[1].connect(n.now, b).unwrap());
    let mut buf = Vec::new();
    let mut init_acks = Vec::new();
    for i in [3, 1] {
        n.eps[i].poll_transmit(n.now, &mut buf).unwrap(); // INIT
        n.eps[0].handle_packet(n.now, ip(), &buf);
        n.eps[0].poll_transmit(n.now, &mut buf).unwrap(); // INIT ACK, no state
        init_acks.push((i, buf.clone()));
    }
    assert_eq!(n.eps[0].held().associations, 0);
    for (i, ack) in init_acks {
        n.eps[i].handle_packet(n.now, ip(), &ack);
    }
    n.drive();
    assert_eq!(n.eps[0].stats.cookie_beyond_max_associations, 1);
    assert_eq!(n.eps[0].association_count(), 1);
    let up = [n.eps[3].state(c3), n.eps[1].state(c1)];
    assert!(up.contains(&Some(State::Established)) && up.contains(&None), "{up:?}");
}

fn init(tag: u32) -> ChunkRepr<'static> {
    ChunkRepr::Init(InitRepr {
        initiate_tag: tag,
        a_rwnd: 65_536,
        outbound_streams: 4,
        inbound_streams: 4,
        initial_tsn: tag,
        params: &[],
    })
}

#[test]
fn a_flood_of_inits_creates_no_state() {
    let mut server = cfg(B_PORT);
    server.max_queued_replies = 100;
    let mut p = Pair::with(cfg(A_PORT), server);
    let mut buf = Vec::new();
    // Answered as they come (the shell sends after every receive batch): INIT ACKs, nothing held.
    for k in 1..=10_000u32 {
        let src = SocketAddr::new(IpAddr::from([127, 0, (k >> 8) as u8, k as u8]), 1024 + (k % 50_000) as u16);
        let pkt = packet(src.port(), B_PORT, 0, &[init(k)]);
        p.b.handle_packet(p.now, src.ip(), &pkt);
        let dst = p.b.poll_transmit(p.now, &mut buf).unwrap();
        assert_eq!((dst, chunk_types(&buf)), (src, vec![ChunkType::INIT_ACK]));
    }
    assert_eq!(p.b.held(), mobicore_sctp::Held::default());
    assert_eq!((p.b.stats.init_received, p.b.stats.half_open_inits), (10_000, 10_000));
    // Not sent in between: the reply queue stays at its bound.
    for k in 1..=5_000u32 {
        p.b.handle_packet(p.now, ip(), &packet(2000, B_PORT, 0, &[init(k)]));
    }
    assert_eq!(p.b.held().queued_replies, 100);
    assert_eq!(p.b.held().associations, 0);
    assert_eq!(p.b.stats.replies_dropped, 4_900);
    while p.b.poll_transmit(p.now, &mut buf).is_some() {}
    // A real peer still gets in.
    let (ia, _) = p.connect();
    p.a.send(ia, 0, PPID_S1AP, Bytes::from_static(b"in")).unwrap();
    p.drive();
    assert_eq!(p.data_b(), [(0, PPID_S1AP, Bytes::from_static(b"in"))]);
}

mod bounds {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Forged {
        /// DATA at this offset from the first TSN, with flags (B, E, U).
        Data { off: u32, stream: u16, ssn: u16, flags: (bool, bool, bool), len: usize },
        /// Any chunk at all: type, flags, value.
        Raw { ty: u8, flags: u8, value: Vec<u8> },
    }

    fn forged() -> impl Strategy<Value = Forged> {
        prop_oneof![
            4 => (prop_oneof![0u32..64, 0u32..20_000, any::<u32>()], 0u16..4, 0u16..6, any::<(bool, bool, bool)>(), 1usize..3000)
                .prop_map(|(off, stream, ssn, flags, len)| Forged::Data { off, stream, ssn, flags, len }),
            1 => (any::<u8>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..64))
                .prop_map(|(ty, flags, value)| Forged::Raw { ty, flags, value }),
        ]
    }

    proptest! {
        /// Whatever chunks a peer sends with the right tag, the receive queue stays
        /// within the window, the gap set within the window, and nothing panics.
        #[test]
        fn arbitrary_chunks_never_exceed_the_window(window in 1500u32..20_000, chunks in proptest::collection::vec(proptest::collection::vec(forged(), 1..4), 1..120)) {
            let mut p = Pair::with(cfg(A_PORT), small_window(B_PORT, window));
            let (_, ib) = p.connect();
            let (vtag, tsn0) = forge_context(&p);
            let payload = vec![0x42u8; 3000];
            let mut buf = Vec::new();
            for bundle in &chunks {
                let reprs: Vec<ChunkRepr<'_>> = bundle
                    .iter()
                    .map(|f| match f {
                        Forged::Data { off, stream, ssn, flags: (b, e, u), len } => ChunkRepr::Data(DataRepr {
                            unordered: *u,
                            begin: *b,
                            end: *e,
                            tsn: tsn0.wrapping_add(*off),
                            stream_id: *stream,
                            ssn: *ssn,
                            ppid: PPID_S1AP,
                            data: &payload[..*len],
                        }),
                        Forged::Raw { ty, flags, value } => ChunkRepr::Unknown { ty: *ty, flags: *flags, value },
                    })
                    .collect();
                p.b.handle_packet(p.now, ip(), &packet(A_PORT, B_PORT, vtag, &reprs));
                if let Some(q) = p.b.receive_queue(ib) {
                    prop_assert!(q.queued_bytes <= q.window, "{:?}", q);
                    prop_assert!(q.tsns_above_cum <= q.window, "{:?}", q);
                }
                let held = p.b.held();
                prop_assert!(held.associations <= 1 && held.queued_replies <= 1024, "{:?}", held);
                while p.b.poll_transmit(p.now, &mut buf).is_some() {}
                while p.b.poll_event().is_some() {}
            }
        }
    }
}

mod lossy {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Random loss and duplication both ways: every message still arrives
        /// exactly once, intact and in order. Giving up after Path.Max.Retrans
        /// is `retransmissions_exhausted_take_the_association_down`'s concern:
        /// here the limit is far above what independent loss of up to 30% both
        /// ways reaches (six lost rounds in a row at 20% did happen in CI).
        #[test]
        fn everything_arrives_in_order_despite_loss(seed: u64, loss in 0u32..30, sizes in proptest::collection::vec(1usize..4000, 1..60)) {
            let patient = |port| {
                let mut c = cfg(port);
                c.path_max_retrans = 48;
                c
            };
            let mut p = Pair::with(patient(A_PORT), patient(B_PORT));
            let (ia, _) = p.connect();
            let mut x = seed | 1;
            p.filter = Box::new(move |_, _| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 100) as u32 >= loss
            });
            let msgs: Vec<Bytes> = sizes.iter().enumerate().map(|(i, &n)| Bytes::from(vec![i as u8; n])).collect();
            for m in &msgs {
                p.a.send(ia, 2, PPID_S1AP, m.clone()).unwrap();
            }
            let n = msgs.len();
            p.run_until(|p| p.data_b().len() == n || down_reason(&p.ev_a).is_some());
            prop_assert!(down_reason(&p.ev_a).is_none(), "down at {loss}% loss: {:?}", down_reason(&p.ev_a));
            let got: Vec<Bytes> = p.data_b().into_iter().map(|(_, _, d)| d).collect();
            prop_assert_eq!(got, msgs);
        }
    }
}
