//! Tests of the tunnel table: encapsulation, idle UEs, handovers.

use super::*;
use proptest::prelude::*;

const ENB: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 1);
const SGW: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 2);
const PEER: SocketAddrV4 = SocketAddrV4::new(SGW, 2152);

fn now() -> Instant {
    use std::sync::OnceLock;
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

fn tunnel(i: u8) -> UeTunnel {
    UeTunnel {
        ue_ip: Ipv4Addr::new(10, 45, 0, i),
        sgw: Fteid { teid: Teid(0x1000 + u32::from(i)), ipv4: SGW },
        enb: Fteid { teid: Teid(0x9000 + u32::from(i)), ipv4: ENB },
    }
}

fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    let len = p.len() as u16;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    p
}

#[test]
fn uplink_encapsulates_on_the_sgw_teid() {
    let mut t = Tunnels::new(ENB, false);
    t.insert(tunnel(2));
    let ip = ipv4(Ipv4Addr::new(10, 45, 0, 2), Ipv4Addr::new(10, 200, 2, 2), b"data");
    let mut out = Vec::new();
    assert_eq!(t.uplink(now(), &ip, &mut out), Uplink::Send(PEER));
    assert_eq!(&out[..8], &[0x30, 255, 0, ip.len() as u8, 0, 0, 0x10, 0x02]);
    assert_eq!(&out[8..], &ip[..]);
    let m = gtpu::parse(&out).unwrap();
    assert_eq!(m.body, Body::GPdu(&ip));
    assert_eq!(t.stats.uplink_packets, 1);
    assert_eq!(t.stats.uplink_bytes, ip.len() as u64);
}

#[test]
fn uplink_with_pdu_session_container_tags_the_qfi() {
    let mut t = Tunnels::new(ENB, true).with_pdu_session_container(9);
    t.insert(tunnel(2));
    let ip = ipv4(Ipv4Addr::new(10, 45, 0, 2), Ipv4Addr::new(10, 200, 2, 2), b"data");
    let mut out = Vec::new();
    assert!(matches!(t.uplink(now(), &ip, &mut out), Uplink::Send(_)));
    // E and S flags; 4 optional octets, then one 4-octet extension:
    // length 1, PDU type 1 (UL) in the high nibble, QFI 9, next type 0.
    assert_eq!(out[0], 0x36);
    assert_eq!(out[11], 0x85);
    assert_eq!(&out[12..16], &[1, 0x10, 9, 0]);
    assert_eq!(&out[16..], &ip[..]);
    let p = gtpu::Packet::new_checked(&out[..]).unwrap();
    let qfis: Vec<_> = p.extensions().map(|(kind, c)| Extension { kind, content: c.to_vec() }.qfi()).collect();
    assert_eq!(qfis, vec![Some(9)]);
    assert_eq!(p.payload(), &ip[..]);
}

#[test]
fn uplink_header_len_is_what_gtpu_adds() {
    // The TUN MTU budget (shell::setup_routing) is the emitted header.
    for (seq, qfi, len) in [(false, None, 8), (true, None, 12), (false, Some(9), 16), (true, Some(9), 16)] {
        let mut t = Tunnels::new(ENB, seq);
        if let Some(q) = qfi {
            t = t.with_pdu_session_container(q);
        }
        t.insert(tunnel(2));
        let ip = ipv4(Ipv4Addr::new(10, 45, 0, 2), Ipv4Addr::new(8, 8, 8, 8), b"x");
        let mut out = vec![0xee; 3000];
        assert!(matches!(t.uplink(now(), &ip, &mut out), Uplink::Send(_)));
        assert_eq!(uplink_header(seq, qfi).header_len(), len);
        assert_eq!(out.len() - ip.len(), len, "seq {seq} qfi {qfi:?}");
    }
}

#[test]
fn uplink_with_sequence_numbers_counts_per_tunnel() {
    let mut t = Tunnels::new(ENB, true);
    t.insert(tunnel(2));
    let ip = ipv4(Ipv4Addr::new(10, 45, 0, 2), Ipv4Addr::new(8, 8, 8, 8), b"x");
    let mut out = Vec::new();
    for want in 0..3u16 {
        assert!(matches!(t.uplink(now(), &ip, &mut out), Uplink::Send(_)));
        let m = gtpu::parse(&out).unwrap();
        assert_eq!(m.header.seq, Some(want));
        assert_eq!(m.body, Body::GPdu(&ip));
    }
}

#[test]
fn uplink_from_unknown_source_or_non_ipv4_is_dropped() {
    let mut t = Tunnels::new(ENB, false);
    t.insert(tunnel(2));
    let mut out = Vec::new();
    let spoofed = ipv4(Ipv4Addr::new(10, 45, 0, 3), Ipv4Addr::new(8, 8, 8, 8), b"x");
    assert_eq!(t.uplink(now(), &spoofed, &mut out), Uplink::Drop(DropReason::UnknownUe));
    assert_eq!(t.uplink(now(), &[0x60; 40], &mut out), Uplink::Drop(DropReason::NotIpv4));
    assert_eq!(t.uplink(now(), &[0x45; 3], &mut out), Uplink::Drop(DropReason::NotIpv4));
    assert_eq!(t.stats.dropped(), 3);
    assert_eq!(t.stats.uplink_packets, 0);
}

#[test]
fn downlink_by_teid_delivers_the_inner_packet() {
    let mut t = Tunnels::new(ENB, false);
    t.insert(tunnel(2));
    t.insert(tunnel(3));
    let ip = ipv4(Ipv4Addr::new(10, 200, 2, 2), Ipv4Addr::new(10, 45, 0, 3), b"reply");
    let mut g = gtpu::gpdu(0x9003, &ip);
    assert_eq!(t.downlink(now(), &g, PEER, &mut Vec::new()), Downlink::Deliver(&ip));
    // The same packet on UE 2's TEID is not UE 2's.
    g[4..8].copy_from_slice(&0x9002u32.to_be_bytes());
    assert_eq!(t.downlink(now(), &g, PEER, &mut Vec::new()), Downlink::Drop(DropReason::WrongDestination));
    assert_eq!(t.stats.downlink_packets, 1);
}

#[test]
fn downlink_on_unknown_teid_answers_error_indication() {
    let mut t = Tunnels::new(ENB, false);
    let ip = ipv4(Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::new(10, 45, 0, 9), b"");
    let g = gtpu::gpdu(0x4242, &ip);
    let Downlink::Reply(r) = t.downlink(now(), &g, PEER, &mut Vec::new()) else { panic!("no reply") };
    let m = gtpu::parse(&r).unwrap();
    assert_eq!(m.body, Body::ErrorIndication { teid_data_i: 0x4242, peer: IpAddr::V4(ENB) });
    assert_eq!(t.stats.error_indications_sent, 1);
}

#[test]
fn echo_request_is_answered_with_its_sequence_number() {
    let mut t = Tunnels::new(ENB, false);
    let req = gtpu::Repr {
        header: HeaderRepr { msg_type: gtpu::msg::ECHO_REQUEST, teid: 0, seq: Some(77), ..Default::default() },
        body: Body::EchoRequest,
    }
    .to_vec();
    let Downlink::Reply(r) = t.downlink(now(), &req, PEER, &mut Vec::new()) else { panic!("no reply") };
    let m = gtpu::parse(&r).unwrap();
    assert_eq!(m.header.seq, Some(77));
    assert_eq!(m.body, Body::EchoResponse { recovery: 0 });
}

#[test]
fn replacing_a_tunnel_forgets_the_old_teid() {
    let mut t = Tunnels::new(ENB, false);
    t.insert(tunnel(2));
    let mut moved = tunnel(2);
    moved.enb.teid = Teid(0x7777);
    t.insert(moved);
    assert_eq!(t.len(), 1);
    assert!(!t.by_teid.contains_key(&Teid(0x9002)));
    assert_eq!(t.remove(moved.ue_ip), Some(moved));
    assert!(t.is_empty() && t.by_teid.is_empty());
}

proptest! {
    #[test]
    fn downlink_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut t = Tunnels::new(ENB, false);
        t.insert(tunnel(2));
        let _ = t.downlink(now(), &bytes, PEER, &mut Vec::new());
    }

    #[test]
    fn uplink_then_downlink_round_trips(payload in proptest::collection::vec(any::<u8>(), 0..1400), seq in any::<bool>(), qfi in proptest::option::of(0u8..64)) {
        let mut t = Tunnels::new(ENB, seq);
        if let Some(q) = qfi {
            t = t.with_pdu_session_container(q);
        }
        let tun = tunnel(2);
        t.insert(tun);
        let ip = ipv4(tun.ue_ip, tun.ue_ip, &payload);
        let mut out = Vec::new();
        assert!(matches!(t.uplink(now(), &ip, &mut out), Uplink::Send(_)));
        // Reflect: same packet on the eNB's TEID.
        out[4..8].copy_from_slice(&tun.enb.teid.0.to_be_bytes());
        prop_assert_eq!(t.downlink(now(), &out, PEER, &mut Vec::new()), Downlink::Deliver(&ip));
    }
}

// ---- idle UEs -------------------------------------------------------------

const UE: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 2);
const DN: Ipv4Addr = Ipv4Addr::new(10, 200, 2, 2);

fn drain(t: &mut Tunnels) -> Vec<Transmit> {
    std::iter::from_fn(|| t.poll_transmit()).collect()
}

fn events(t: &mut Tunnels) -> Vec<Event> {
    std::iter::from_fn(|| t.poll_event()).collect()
}

#[test]
fn an_idle_ue_keeps_its_uplink_and_reports_it_once() {
    let hold = HoldConfig { idle_uplink_packets: 3, ..Default::default() };
    let mut t = Tunnels::new(ENB, true).with_hold(hold);
    t.insert(tunnel(2));
    assert!(t.release(UE));
    assert!(t.is_idle(UE) && t.get(UE).is_none() && t.len() == 1);
    let mut out = Vec::new();
    for i in 0..5u8 {
        assert_eq!(t.uplink(now(), &ipv4(UE, DN, &[i]), &mut out), Uplink::Held);
    }
    // One report for the whole idle period.
    assert_eq!(events(&mut t), vec![Event::UplinkWhileIdle { ue_ip: UE }]);
    assert_eq!(t.stats.drops.get("IdleQueueFull"), Some(&2));
    assert_eq!(t.stats.idle_uplink_held, 5);
    assert!(drain(&mut t).is_empty());
    // Downlink sent before the release, still arriving on the released
    // TEID, reaches the UE.
    let g = gtpu::gpdu(0x9002, &ipv4(DN, UE, b"x"));
    assert!(matches!(t.downlink(now(), &g, PEER, &mut out), Downlink::Deliver(_)));

    // Service Request: a new tunnel; the 3 newest go first, in order.
    let mut back = tunnel(2);
    back.sgw.teid = Teid(0x2222);
    back.enb.teid = Teid(0x3333);
    t.insert(back);
    let sent: Vec<_> = drain(&mut t)
        .into_iter()
        .map(|x| {
            let Transmit::Gtpu { to, bytes } = x else { panic!("{x:?}") };
            assert_eq!(to, PEER);
            let m = gtpu::parse(&bytes).unwrap();
            assert_eq!(m.header.teid, 0x2222);
            let Body::GPdu(ip) = m.body else { panic!() };
            (m.header.seq, ip[20])
        })
        .collect();
    assert_eq!(sent, vec![(Some(0), 2), (Some(1), 3), (Some(2), 4)]);
    // With the new tunnel the released TEID is unknown.
    assert!(matches!(t.downlink(now(), &g, PEER, &mut out), Downlink::Reply(_)));
    assert!(matches!(t.uplink(now(), &ipv4(UE, DN, b"n"), &mut out), Uplink::Send(PEER)));
    // Idle again: reported again.
    t.release(UE);
    assert_eq!(t.uplink(now(), &ipv4(UE, DN, b"z"), &mut out), Uplink::Held);
    assert!(events(&mut t).contains(&Event::UplinkWhileIdle { ue_ip: UE }));
}

#[test]
fn activity_is_reported_at_most_once_per_interval() {
    let mut t = Tunnels::new(ENB, false);
    t.insert(tunnel(2));
    let (up, down) = (ipv4(UE, DN, b"u"), gtpu::gpdu(0x9002, &ipv4(DN, UE, b"d")));
    let mut out = Vec::new();
    let t0 = now();
    t.uplink(t0, &up, &mut out);
    t.downlink(t0 + Duration::from_millis(10), &down, PEER, &mut out);
    t.uplink(t0 + Duration::from_millis(999), &up, &mut out);
    assert_eq!(events(&mut t), vec![Event::Activity { ue_ip: UE }]);
    t.downlink(t0 + Duration::from_millis(1000), &down, PEER, &mut out);
    assert_eq!(events(&mut t), vec![Event::Activity { ue_ip: UE }]);
    // Idle UEs' held packets are no activity.
    t.release(UE);
    t.uplink(t0 + Duration::from_secs(5), &up, &mut out);
    assert_eq!(events(&mut t), vec![Event::UplinkWhileIdle { ue_ip: UE }]);
}

// ---- handovers --------------------------------------------------------------

/// UE 2 on TEID 0x9002 (source); the target allocates forwarding TEID
/// 0xf002 and downlink TEID 0xb002.
const FWD: Teid = Teid(0xf002);

fn target_tunnel() -> UeTunnel {
    UeTunnel { ue_ip: UE, sgw: Fteid { teid: Teid(0x5002), ipv4: SGW }, enb: Fteid { teid: Teid(0xb002), ipv4: ENB } }
}

fn numbered(seq: u32) -> Vec<u8> {
    ipv4(DN, UE, &seq.to_be_bytes())
}

fn seq_of(ip: &[u8]) -> u32 {
    u32::from_be_bytes(ip[20..24].try_into().unwrap())
}

/// One table with both eNBs, X2 forwarding to itself.
fn handover_table() -> Tunnels {
    let mut t = Tunnels::new(ENB, false);
    t.insert(tunnel(2));
    t.accept_forwarding(UE, FWD).unwrap();
    t.start_handover(UE, Fteid { teid: FWD, ipv4: ENB }).unwrap();
    t
}

#[test]
fn x2_handover_forwards_then_holds_the_new_path_until_the_end_marker() {
    let mut t = handover_table();
    let mut out = Vec::new();
    let mut delivered = Vec::new();
    // Downlink still on the source TEID goes on to the target.
    let g0 = gtpu::gpdu(0x9002, &numbered(0));
    let d = t.downlink(now(), &g0, PEER, &mut out);
    assert_eq!(d, Downlink::Send(SocketAddrV4::new(ENB, 2152)));
    let fwd0 = out.clone();
    assert_eq!(gtpu::parse(&fwd0).unwrap().header.teid, FWD.0);
    // The target holds it: the UE is not there yet.
    assert_eq!(t.downlink(now(), &fwd0, PEER, &mut out), Downlink::Held);
    t.downlink(now(), &gtpu::gpdu(0x9002, &numbered(1)), PEER, &mut out);
    let fwd1 = out.clone();
    // The UE arrives: the forwarded packet goes first; uplink switches.
    t.complete_handover(now(), UE, target_tunnel()).unwrap();
    for x in drain(&mut t) {
        let Transmit::ToUe(ip) = x else { panic!("{x:?}") };
        delivered.push(seq_of(&ip));
    }
    let up = t.uplink(now(), &ipv4(UE, DN, b"u"), &mut out);
    assert_eq!((up, gtpu::parse(&out).unwrap().header.teid), (Uplink::Send(PEER), 0x5002));
    // The new path is held until the End Marker...
    assert_eq!(t.downlink(now(), &gtpu::gpdu(0xb002, &numbered(2)), PEER, &mut out), Downlink::Held);
    // ...while forwarded packets keep going to the UE directly.
    let Downlink::Deliver(ip) = t.downlink(now(), &fwd1, PEER, &mut out) else { panic!() };
    delivered.push(seq_of(ip));
    // The S-GW's End Marker on the old path: the source sends it on and
    // forgets its TEID.
    let em_old = gtpu::end_marker(0x9002);
    let d = t.downlink(now(), &em_old, PEER, &mut out);
    assert_eq!(d, Downlink::Send(SocketAddrV4::new(ENB, 2152)));
    assert_eq!(gtpu::parse(&out).unwrap().body, Body::EndMarker);
    assert_eq!(gtpu::parse(&out).unwrap().header.teid, FWD.0);
    let em = out.clone();
    assert!(matches!(t.downlink(now(), &gtpu::gpdu(0x9002, &numbered(9)), PEER, &mut out), Downlink::Reply(_)));
    // The target gets it: the held new path goes to the UE.
    assert_eq!(t.downlink(now(), &em, PEER, &mut out), Downlink::Held);
    for x in drain(&mut t) {
        let Transmit::ToUe(ip) = x else { panic!("{x:?}") };
        delivered.push(seq_of(&ip));
    }
    let g3 = gtpu::gpdu(0xb002, &numbered(3));
    let Downlink::Deliver(ip) = t.downlink(now(), &g3, PEER, &mut out) else { panic!() };
    delivered.push(seq_of(ip));
    assert_eq!(delivered, vec![0, 1, 2, 3]);
    assert_eq!(
        events(&mut t).into_iter().filter(|e| !matches!(e, Event::Activity { .. })).collect::<Vec<_>>(),
        vec![Event::EndMarkerForwarded { ue_ip: UE }, Event::HandoverDone { ue_ip: UE, timed_out: false }]
    );
    assert_eq!((t.stats.forwarded, t.stats.end_markers_forwarded, t.stats.end_markers_received), (2, 1, 1));
    assert_eq!(t.stats.end_marker_timeouts, 0);
    assert_eq!(t.poll_timeout(), Some(now() + Duration::from_millis(1000)));
    t.handle_timeout(now() + Duration::from_secs(2));
    assert_eq!(t.stats.end_marker_timeouts, 0, "a stale deadline does nothing");
    // Every TEID but the new one is forgotten.
    assert_eq!(t.by_teid.len(), 1);
}

#[test]
fn without_an_end_marker_the_target_gives_up_after_the_timeout() {
    let mut t = handover_table();
    let mut out = Vec::new();
    t.complete_handover(now(), UE, target_tunnel()).unwrap();
    assert_eq!(t.downlink(now(), &gtpu::gpdu(0xb002, &numbered(5)), PEER, &mut out), Downlink::Held);
    let at = t.poll_timeout().unwrap();
    t.handle_timeout(at - Duration::from_millis(1));
    assert!(drain(&mut t).is_empty());
    t.handle_timeout(at);
    assert_eq!(drain(&mut t), vec![Transmit::ToUe(numbered(5))]);
    assert_eq!(t.stats.end_marker_timeouts, 1);
    assert!(events(&mut t).contains(&Event::HandoverDone { ue_ip: UE, timed_out: true }));
    // A late forwarded packet still reaches the UE, counted.
    let late = gtpu::gpdu(FWD.0, &numbered(4));
    assert_eq!(t.downlink(now(), &late, PEER, &mut out), Downlink::Deliver(&numbered(4)[..]));
    assert_eq!(t.stats.late_forwarded, 1);
    // The source keeps forwarding until the End Marker.
    assert!(matches!(t.downlink(now(), &gtpu::gpdu(0x9002, &numbered(6)), PEER, &mut out), Downlink::Send(_)));
}

#[test]
fn the_target_holds_at_most_the_configured_count() {
    let hold = HoldConfig { end_marker_hold_packets: 3, forwarded_packets: 2, ..Default::default() };
    let mut t = Tunnels::new(ENB, false).with_hold(hold);
    t.insert(tunnel(2));
    t.accept_forwarding(UE, FWD).unwrap();
    let mut out = Vec::new();
    for s in 0..3 {
        t.downlink(now(), &gtpu::gpdu(FWD.0, &numbered(s)), PEER, &mut out);
    }
    assert_eq!(t.stats.drops.get("ForwardingQueueFull"), Some(&1));
    t.complete_handover(now(), UE, target_tunnel()).unwrap();
    assert_eq!(drain(&mut t).len(), 2);
    for s in 10..13 {
        assert_eq!(t.downlink(now(), &gtpu::gpdu(0xb002, &numbered(s)), PEER, &mut out), Downlink::Held);
    }
    let got: Vec<_> = drain(&mut t)
        .into_iter()
        .map(|x| match x {
            Transmit::ToUe(ip) => seq_of(&ip),
            o => panic!("{o:?}"),
        })
        .collect();
    assert_eq!(got, vec![10, 11, 12]);
    assert_eq!(t.stats.end_marker_timeouts, 1);
}

#[test]
fn handover_steps_for_unknown_or_idle_ues_are_refused() {
    let mut t = Tunnels::new(ENB, false);
    let f = Fteid { teid: FWD, ipv4: ENB };
    assert_eq!(t.start_handover(UE, f), Err(HandoverError::UnknownUe(UE)));
    assert_eq!(t.accept_forwarding(UE, FWD), Err(HandoverError::UnknownUe(UE)));
    t.insert(tunnel(2));
    t.insert(tunnel(3));
    // Another UE's TEID cannot become this one's forwarding tunnel.
    assert_eq!(t.accept_forwarding(UE, Teid(0x9003)), Err(HandoverError::TeidInUse(Teid(0x9003))));
    t.start_handover(UE, f).unwrap();
    assert_eq!(t.start_handover(UE, f), Err(HandoverError::AlreadyForwarding(UE)));
    t.release(UE);
    assert_eq!(t.start_handover(UE, f), Err(HandoverError::Idle(UE)));
    // UE 3 untouched throughout.
    assert_eq!(t.get(Ipv4Addr::new(10, 45, 0, 3)), Some(&tunnel(3)));
    t.remove(UE);
    t.remove(Ipv4Addr::new(10, 45, 0, 3));
    assert!(t.by_teid.is_empty());
}

/// One step of the proptest below, chosen among those the spec allows at
/// that point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The S-GW's next packet on the old path (then its End Marker).
    Old,
    /// The S-GW's next packet on the new path (after the path switch).
    New,
    /// The next forwarded message reaches the target (FIFO).
    Forwarded,
    StartHandover,
    CompleteHandover,
    Timeout,
}

/// Drives a handover in one table: `old` packets on the old path then the
/// End Marker, `new` packets on the new path once the UE is at the target,
/// forwarded messages looping back in order (through an S-GW relay for
/// indirect forwarding), in the order `choices` picks. Returns what the
/// UE got.
fn drive(old: u32, new: u32, indirect: bool, choices: &[u8], timeout: bool) -> (Vec<u32>, Tunnels) {
    let mut t = Tunnels::new(ENB, false);
    t.insert(tunnel(2));
    t.accept_forwarding(UE, FWD).unwrap();
    // Indirect: the source forwards to the S-GW's forwarding F-TEID, the
    // S-GW relays to the target's (TS 23.401 5.5.1.2.2 step 8a).
    let sgw_fwd = Fteid { teid: Teid(0x7000), ipv4: SGW };
    let forward_to = if indirect { sgw_fwd } else { Fteid { teid: FWD, ipv4: ENB } };
    let (mut next_old, mut next_new, mut em_sent) = (0u32, old, false);
    let mut fifo: VecDeque<Vec<u8>> = VecDeque::new();
    let (mut started, mut completed) = (false, false);
    let mut got = Vec::new();
    let mut out = Vec::new();
    let mut clock = now();
    let mut timeouts = 0;
    let mut pick = choices.iter().copied().cycle();
    loop {
        let mut steps = Vec::new();
        // The S-GW switches the path (and sends the End Marker on the old
        // one) once the target has the UE: TS 23.401 5.5.1.1.2 step 4.
        if next_old < old || (completed && !em_sent) {
            steps.push(Step::Old);
        }
        if em_sent && next_new < old + new {
            steps.push(Step::New);
        }
        if !fifo.is_empty() {
            steps.push(Step::Forwarded);
        }
        if !started {
            steps.push(Step::StartHandover);
        } else if !completed {
            steps.push(Step::CompleteHandover);
        }
        if timeout && completed && timeouts < 8 {
            steps.push(Step::Timeout);
        }
        if steps.is_empty() || (steps == [Step::Timeout] && got.len() as u32 == old + new && t.by_teid.len() == 1) {
            break;
        }
        let step = steps[usize::from(pick.next().unwrap_or(0)) % steps.len()];
        let mut datagram = None;
        match step {
            Step::Old if next_old < old => {
                datagram = Some(gtpu::gpdu(0x9002, &numbered(next_old)));
                next_old += 1;
            }
            Step::Old => {
                datagram = Some(gtpu::end_marker(0x9002));
                em_sent = true;
            }
            Step::New => {
                datagram = Some(gtpu::gpdu(0xb002, &numbered(next_new)));
                next_new += 1;
            }
            Step::Forwarded => {
                let mut m = fifo.pop_front().unwrap();
                if indirect {
                    assert_eq!(gtpu::parse(&m).unwrap().header.teid, sgw_fwd.teid.0);
                    m[4..8].copy_from_slice(&FWD.0.to_be_bytes());
                }
                datagram = Some(m);
            }
            Step::StartHandover => {
                t.start_handover(UE, forward_to).unwrap();
                started = true;
            }
            Step::CompleteHandover => {
                t.complete_handover(clock, UE, target_tunnel()).unwrap();
                completed = true;
            }
            Step::Timeout => {
                timeouts += 1;
                clock += Duration::from_millis(400);
                t.handle_timeout(clock);
            }
        }
        if let Some(d) = datagram {
            match t.downlink(clock, &d, PEER, &mut out) {
                Downlink::Deliver(ip) => got.push(seq_of(ip)),
                Downlink::Send(to) => {
                    assert_eq!(to.ip(), &forward_to.ipv4);
                    fifo.push_back(out.clone());
                }
                Downlink::Held => {}
                other => panic!("{step:?}: {other:?}"),
            }
        }
        for x in drain(&mut t) {
            match x {
                Transmit::ToUe(ip) => got.push(seq_of(&ip)),
                Transmit::Gtpu { bytes, .. } => fifo.push_back(bytes),
            }
        }
    }
    (got, t)
}

proptest! {
    #[test]
    fn handover_delivers_in_order_without_loss_or_duplicates(
        old in 0u32..12,
        new in 0u32..12,
        indirect in any::<bool>(),
        choices in proptest::collection::vec(any::<u8>(), 1..64),
    ) {
        let (got, t) = drive(old, new, indirect, &choices, false);
        prop_assert_eq!(got, (0..old + new).collect::<Vec<_>>());
        prop_assert_eq!(t.stats.end_marker_timeouts, 0);
        prop_assert_eq!(t.stats.dropped(), 0);
        // Only the new tunnel is left.
        prop_assert_eq!(t.by_teid.len(), 1);
    }

    #[test]
    fn with_timeouts_nothing_is_lost_or_duplicated(
        old in 0u32..12,
        new in 0u32..12,
        choices in proptest::collection::vec(any::<u8>(), 1..64),
    ) {
        // Giving up early may reorder (counted), never lose or duplicate.
        let (mut got, t) = drive(old, new, false, &choices, true);
        if t.stats.end_marker_timeouts == 0 {
            prop_assert_eq!(&got, &(0..old + new).collect::<Vec<_>>());
        }
        got.sort_unstable();
        prop_assert_eq!(got, (0..old + new).collect::<Vec<_>>());
    }
}
