//! Sans-I/O tests of the user-space data path: no sockets, no sleeps.

use super::ipv4::udp_packet;
use super::*;
use crate::rules::{Action, Bar, Far, FlowFilter, PacketDetection, Pdr, Qer, Urr, VolumeLimit};
use mobicore_gtp::gtpu::{self, Body, Extension, HeaderRepr, Repr};
use proptest::prelude::*;
use std::time::Duration;

const UE: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 2);
const UE2: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 3);
const DN: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
pub(super) const S1U: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 1);
pub(super) const ENB: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 2);
const ENB2: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 3);

fn enb() -> SocketAddrV4 {
    SocketAddrV4::new(ENB, 2152)
}

pub(super) fn pd(iface: u8, teid: Option<u32>, ue: Ipv4Addr, flows: &[&str]) -> PacketDetection {
    PacketDetection {
        source_interface: iface,
        local_fteid: teid.map(|t| (t, S1U)),
        choose_fteid: false,
        ue_ipv4: Some(ue),
        ue_ipv6: None,
        network_instance: None,
        sdf_filters: flows.len(),
        flows: flows.iter().map(|f| FlowFilter::parse(f).unwrap()).collect(),
    }
}

pub(super) fn pdr(id: u16, precedence: u32, pdi: PacketDetection, far: u32) -> Pdr {
    Pdr { id, precedence, pdi, outer_header_removal: None, far_id: Some(far), qer_ids: vec![], urr_ids: vec![] }
}

fn far(id: u32, action: Action, tunnel: Option<(u32, Ipv4Addr)>) -> Far {
    Far {
        id,
        action,
        destination_interface: Some(if tunnel.is_some() { INTERFACE_ACCESS } else { INTERFACE_CORE }),
        network_instance: None,
        outer_header_creation: tunnel.map(|(teid, ipv4)| GtpuTunnel { teid, ipv4 }),
        bar_id: None,
        duplicating: vec![],
    }
}

const FORW: Action = Action { drop: false, forw: true, buff: false, nocp: false, dupl: false };
const BUFF_NOCP: Action = Action { drop: false, forw: false, buff: true, nocp: true, dupl: false };
const DROP: Action = Action { drop: true, forw: false, buff: false, nocp: false, dupl: false };

/// One bearer: uplink TEID `teid` to the core, downlink to the eNB TEID
/// `enb_teid` with `dl` action.
fn bearer(ue: Ipv4Addr, teid: u32, enb_teid: u32, dl: Action) -> SessionRules {
    let mut r = SessionRules::default();
    r.pdrs.insert(1, pdr(1, 100, pd(INTERFACE_ACCESS, Some(teid), ue, &[]), 1));
    r.pdrs.insert(2, pdr(2, 100, pd(INTERFACE_CORE, None, ue, &[]), 2));
    r.fars.insert(1, far(1, FORW, None));
    r.fars.insert(2, far(2, dl, if dl.forw { Some((enb_teid, ENB)) } else { None }));
    if dl.buff {
        r.fars.get_mut(&2).unwrap().destination_interface = Some(INTERFACE_ACCESS);
    }
    r
}

fn plane() -> UserPlane {
    UserPlane::new(
        DatapathConfig {
            s1u_addr: S1U,
            buffer_session_bytes: 10_000,
            buffer_total_bytes: 15_000,
            error_indications_per_sec: 2,
            ..DatapathConfig::default()
        },
        Counters::new(),
    )
}

fn ul_packet(src: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    udp_packet(src, DN, 4000, 5000, payload)
}

fn dl_packet(dst: Ipv4Addr, sport: u16, payload: &[u8]) -> Vec<u8> {
    udp_packet(DN, dst, sport, 4000, payload)
}

fn drain(p: &mut UserPlane) -> Vec<Transmit> {
    std::iter::from_fn(|| p.poll_transmit()).collect()
}

#[test]
fn uplink_decapsulates_to_core() {
    let mut p = plane();
    p.install(1, &bearer(UE, 0x100, 0x900, FORW)).unwrap();
    let inner = ul_packet(UE, b"hello");
    let now = Instant::now();
    assert_eq!(p.uplink(now, enb(), &gtpu::gpdu(0x100, &inner)), Verdict::Forwarded);
    assert_eq!(drain(&mut p), vec![Transmit::Core(inner.clone())]);
    // With S flag and a PDU Session Container the payload is found past them.
    let h = HeaderRepr::gpdu(0x100).with_seq(9).with_extension(Extension::pdu_session_container(true, 5));
    let b = Repr { header: h, body: Body::GPdu(&inner) }.to_vec();
    assert_eq!(p.uplink(now, enb(), &b), Verdict::Forwarded);
    assert_eq!(drain(&mut p), vec![Transmit::Core(inner)]);
    assert_eq!(p.counters.value("upf_ul_forwarded"), 2);
}

#[test]
fn downlink_encapsulates_to_enb() {
    let mut p = plane();
    p.install(1, &bearer(UE, 0x100, 0x900, FORW)).unwrap();
    let inner = dl_packet(UE, 5000, b"reply");
    assert_eq!(p.downlink(Instant::now(), &inner), Verdict::Forwarded);
    let out = drain(&mut p);
    let [Transmit::Gtpu { to, bytes }] = &out[..] else { panic!("{out:?}") };
    assert_eq!(*to, SocketAddrV4::new(ENB, 2152));
    let r = gtpu::parse(bytes).unwrap();
    assert_eq!(r.header.teid, 0x900);
    assert_eq!(r.body, Body::GPdu(&inner));
    assert_eq!(p.downlink(Instant::now(), &dl_packet(UE2, 1, b"x")), Verdict::Dropped(DropReason::NoSession));
}

#[test]
fn spoofed_source_is_dropped_and_counted() {
    let mut p = plane();
    p.install(1, &bearer(UE, 0x100, 0x900, FORW)).unwrap();
    p.install(2, &bearer(UE2, 0x200, 0x901, FORW)).unwrap();
    let v = p.uplink(Instant::now(), enb(), &gtpu::gpdu(0x100, &ul_packet(UE2, b"spoof")));
    assert_eq!(v, Verdict::Dropped(DropReason::Spoofed));
    assert_eq!(p.counters.value("upf_ul_spoofed"), 1);
    assert!(drain(&mut p).is_empty());
}

#[test]
fn sdf_filters_by_precedence() {
    let mut p = plane();
    let mut r = bearer(UE, 0x100, 0x900, FORW);
    // A dedicated bearer for UDP from port 5000, precedence 10 (higher).
    r.pdrs
        .insert(3, pdr(3, 10, pd(INTERFACE_CORE, None, UE, &["permit out 17 from 192.0.2.0/24 5000 to assigned"]), 3));
    r.fars.insert(3, far(3, FORW, Some((0x777, ENB))));
    p.install(1, &r).unwrap();
    let teid_of = |p: &mut UserPlane, pkt: &[u8]| {
        assert_eq!(p.downlink(Instant::now(), pkt), Verdict::Forwarded);
        match drain(p).pop() {
            Some(Transmit::Gtpu { bytes, .. }) => gtpu::parse(&bytes).unwrap().header.teid,
            o => panic!("{o:?}"),
        }
    };
    assert_eq!(teid_of(&mut p, &dl_packet(UE, 5000, b"a")), 0x777);
    assert_eq!(teid_of(&mut p, &dl_packet(UE, 5001, b"a")), 0x900);
    // A non-first fragment has no ports: it waits for its first fragment
    // (the fragment table, see tests_frag), then follows its PDR.
    let mut frag = dl_packet(UE, 5000, b"frag");
    frag[7] = 1;
    assert_eq!(p.downlink(Instant::now(), &frag), Verdict::Held);
    let mut first = dl_packet(UE, 5000, b"first");
    first[6] = 0x20; // MF
    assert_eq!(teid_of(&mut p, &first), 0x777);
}

#[test]
fn qer_gate_and_mbr() {
    let mut p = plane();
    let mut r = bearer(UE, 0x100, 0x900, FORW);
    r.qers.insert(1, Qer { id: 1, gate_ul_open: false, gate_dl_open: true, mbr: Some((0, 8)), qfi: None });
    r.pdrs.get_mut(&1).unwrap().qer_ids = vec![1];
    r.pdrs.get_mut(&2).unwrap().qer_ids = vec![1];
    p.install(1, &r).unwrap();
    let now = Instant::now();
    assert_eq!(
        p.uplink(now, enb(), &gtpu::gpdu(0x100, &ul_packet(UE, b"x"))),
        Verdict::Dropped(DropReason::GateClosed)
    );
    // 8 kbit/s = 1000 octets/s with a 16000-octet bucket: 1000-octet
    // packets pass 16 times, then the 17th is over the rate.
    let big = dl_packet(UE, 1, &[0u8; 972]);
    assert_eq!(big.len(), 1000);
    for _ in 0..16 {
        assert_eq!(p.downlink(now, &big), Verdict::Forwarded);
    }
    assert_eq!(p.downlink(now, &big), Verdict::Dropped(DropReason::MbrExceeded));
    // One second later, one more fits.
    assert_eq!(p.downlink(now + Duration::from_secs(1), &big), Verdict::Forwarded);
    assert_eq!(p.counters.value("upf_mbr_exceeded"), 1);
}

#[test]
fn urr_counts_what_is_forwarded() {
    // The data path only counts (cumulative, per URR); thresholds, quotas
    // and reports are the usage engine's (crate::urr), for every data path.
    let mut p = plane();
    let mut r = bearer(UE, 0x100, 0x900, FORW);
    r.urrs.insert(
        7,
        Urr {
            id: 7,
            measure_volume: true,
            volume_threshold: Some(VolumeLimit { total: Some(1), ..Default::default() }),
            ..Default::default()
        },
    );
    r.pdrs.get_mut(&1).unwrap().urr_ids = vec![7];
    r.pdrs.get_mut(&2).unwrap().urr_ids = vec![7];
    p.install(1, &r).unwrap();
    let now = Instant::now();
    let ul = gtpu::gpdu(0x100, &ul_packet(UE, &[0; 32])); // 60-octet inner
    assert_eq!(p.uplink(now, enb(), &ul), Verdict::Forwarded);
    assert_eq!(p.uplink(now, enb(), &ul), Verdict::Forwarded);
    assert_eq!(p.downlink(now, &dl_packet(UE, 1, &[0; 32])), Verdict::Forwarded);
    assert_eq!(
        p.urr_counts(1, 7),
        Some(crate::urr::UsageCounts { ul_octets: 120, ul_packets: 2, dl_octets: 60, dl_packets: 1 })
    );
    assert_eq!(p.usage(1, 7), Some((120, 60)));
    assert_eq!(p.poll_report(), None, "no usage report from the data path itself");
    // Counts survive a rule update; a DROP FAR (as for an exhausted quota)
    // forwards nothing and counts nothing.
    let mut dropped = r.clone();
    dropped.fars.get_mut(&1).unwrap().action = DROP;
    p.update(now, 1, &dropped).unwrap();
    assert_eq!(p.uplink(now, enb(), &ul), Verdict::Dropped(DropReason::FarDrop));
    assert_eq!(p.usage(1, 7), Some((120, 60)));
}

#[test]
fn buffering_budget_in_order_release_and_first_packet_report() {
    let mut p = plane();
    p.install(1, &bearer(UE, 0x100, 0x900, BUFF_NOCP)).unwrap();
    p.install(2, &bearer(UE2, 0x200, 0x901, BUFF_NOCP)).unwrap();
    let now = Instant::now();
    let pkt = |i: u16| dl_packet(UE, 6000 + i, &[i as u8; 972]);
    // 10 packets of 1000 octets fill the 10000-octet session budget.
    for i in 0..12 {
        let v = p.downlink(now, &pkt(i));
        assert_eq!(v, if i < 10 { Verdict::Buffered } else { Verdict::Dropped(DropReason::BufferFull) }, "{i}");
    }
    assert_eq!(p.poll_report(), Some(PlaneReport::DownlinkData { up_seid: 1, pdr_id: 2 }));
    assert_eq!(p.poll_report(), None, "only the first buffered packet is reported");
    // The total budget (15000) stops the second session after 5.
    let mut n2 = 0;
    for i in 0..8 {
        if p.downlink(now, &dl_packet(UE2, i, &[0; 972])) == Verdict::Buffered {
            n2 += 1;
        }
    }
    assert_eq!(n2, 5);
    assert_eq!(p.buffered(1), (10_000, 15_000));
    assert_eq!(p.counters.value("upf_buffer_overflow"), 5);
    assert!(drain(&mut p).is_empty());
    // FAR turns to FORW: the ten come out in order, with the new tunnel.
    p.update(now, 1, &bearer(UE, 0x100, 0x900, FORW)).unwrap();
    let out = drain(&mut p);
    assert_eq!(out.len(), 10);
    for (i, t) in out.iter().enumerate() {
        let Transmit::Gtpu { bytes, .. } = t else { panic!() };
        assert_eq!(gtpu::parse(bytes).unwrap().body, Body::GPdu(&pkt(i as u16)));
    }
    assert_eq!(p.buffered(1), (0, 5_000));
    assert_eq!(p.buffered(2).0, 5_000, "the other session's buffer is untouched");
}

#[test]
fn buffer_dropped_on_far_drop_and_on_removal() {
    let mut p = plane();
    p.install(1, &bearer(UE, 0x100, 0x900, BUFF_NOCP)).unwrap();
    let now = Instant::now();
    assert_eq!(p.downlink(now, &dl_packet(UE, 1, b"a")), Verdict::Buffered);
    p.update(now, 1, &bearer(UE, 0x100, 0x900, DROP)).unwrap();
    assert!(drain(&mut p).is_empty());
    assert_eq!(p.buffered(1), (0, 0));
    p.update(now, 1, &bearer(UE, 0x100, 0x900, BUFF_NOCP)).unwrap();
    assert_eq!(p.downlink(now, &dl_packet(UE, 1, b"a")), Verdict::Buffered);
    // A new buffering episode reports again.
    assert!(matches!(p.poll_report(), Some(PlaneReport::DownlinkData { .. })));
    p.remove(1).unwrap();
    assert_eq!(p.buffered(1), (0, 0));
}

#[test]
fn bar_packet_count_caps_the_buffer() {
    let mut p = plane();
    let mut r = bearer(UE, 0x100, 0x900, BUFF_NOCP);
    r.bars.insert(1, Bar { id: 1, suggested_buffering_packets_count: Some(2) });
    r.fars.get_mut(&2).unwrap().bar_id = Some(1);
    p.install(1, &r).unwrap();
    let v: Vec<_> = (0..3).map(|_| p.downlink(Instant::now(), &dl_packet(UE, 1, b"a"))).collect();
    assert_eq!(v[..2], [Verdict::Buffered, Verdict::Buffered]);
    assert_eq!(v[2], Verdict::Dropped(DropReason::BufferFull));
}

#[test]
fn unknown_teid_gets_rate_limited_error_indication() {
    let mut p = plane();
    let now = Instant::now();
    let from = SocketAddrV4::new(ENB, 40000);
    for _ in 0..5 {
        assert_eq!(
            p.uplink(now, from, &gtpu::gpdu(0xdead, &ul_packet(UE, b"x"))),
            Verdict::Dropped(DropReason::UnknownTeid)
        );
    }
    let out = drain(&mut p);
    assert_eq!(out.len(), 2, "2 per second");
    let Transmit::Gtpu { to, bytes } = &out[0] else { panic!() };
    assert_eq!(*to, SocketAddrV4::new(ENB, 2152));
    let r = gtpu::parse(bytes).unwrap();
    assert_eq!(r.body, Body::ErrorIndication { teid_data_i: 0xdead, peer: S1U.into() });
    assert_eq!(r.header.extensions, vec![Extension::udp_port(40000)]);
    assert_eq!(p.counters.value("gtpu_error_indication_suppressed"), 3);
    assert_eq!(p.counters.value("gtpu_unknown_teid"), 5);
}

#[test]
fn echo_request_is_answered() {
    let mut p = plane();
    let from = SocketAddrV4::new(ENB, 2152);
    let req = Repr {
        header: HeaderRepr { msg_type: gtpu::msg::ECHO_REQUEST, seq: Some(77), ..Default::default() },
        body: Body::EchoRequest,
    }
    .to_vec();
    assert_eq!(p.uplink(Instant::now(), from, &req), Verdict::Control);
    let out = drain(&mut p);
    let [Transmit::Gtpu { to, bytes }] = &out[..] else { panic!() };
    assert_eq!(*to, from);
    let r = gtpu::parse(bytes).unwrap();
    assert_eq!((r.header.seq, r.body), (Some(77), Body::EchoResponse { recovery: 0 }));
}

#[test]
fn an_end_marker_on_no_forwarding_tunnel_is_counted_not_relayed() {
    let mut p = plane();
    p.install(1, &bearer(UE, 0x100, 0x900, FORW)).unwrap();
    let now = Instant::now();
    // On a bearer's uplink TEID, and on one no session has (a forwarding
    // tunnel deleted before the source's End Marker came back).
    for teid in [0x100, 0x555] {
        assert_eq!(p.uplink(now, enb(), &gtpu::end_marker(teid)), Verdict::Control);
    }
    assert!(drain(&mut p).is_empty());
    assert_eq!(p.counters.value("gtpu_end_marker_not_relayed"), 2);
}

#[test]
fn end_marker_on_the_old_path_when_the_tunnel_changes() {
    let mut p = plane();
    p.install(1, &bearer(UE, 0x100, 0x900, FORW)).unwrap();
    let now = Instant::now();
    let mut moved = bearer(UE, 0x100, 0x901, FORW);
    moved.fars.get_mut(&2).unwrap().outer_header_creation = Some(GtpuTunnel { teid: 0x901, ipv4: ENB2 });
    p.update(now, 1, &moved).unwrap();
    let out = drain(&mut p);
    assert_eq!(out, vec![Transmit::Gtpu { to: SocketAddrV4::new(ENB, 2152), bytes: gtpu::end_marker(0x900) }]);
    // Same tunnel again: no End Marker.
    p.update(now, 1, &moved).unwrap();
    assert!(drain(&mut p).is_empty());
    assert_eq!(p.downlink(now, &dl_packet(UE, 1, b"a")), Verdict::Forwarded);
    assert!(matches!(&drain(&mut p)[..], [Transmit::Gtpu { to, .. }] if *to.ip() == ENB2));
}

#[test]
fn teid_and_ue_address_cannot_be_taken_from_another_session() {
    let mut p = plane();
    p.install(1, &bearer(UE, 0x100, 0x900, FORW)).unwrap();
    assert!(p.install(2, &bearer(UE2, 0x100, 0x901, FORW)).is_err());
    assert!(p.install(2, &bearer(UE, 0x200, 0x901, FORW)).is_err());
    assert_eq!(p.install(1, &bearer(UE, 0x100, 0x900, FORW)), Err(PlaneError::Exists(1)));
    p.install(2, &bearer(UE2, 0x200, 0x901, FORW)).unwrap();
    assert!(p.update(Instant::now(), 2, &bearer(UE2, 0x100, 0x901, FORW)).is_err());
}

fn arb_datagram() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..80),
        // A plausible G-PDU for a known or unknown TEID with arbitrary inner bytes.
        (prop_oneof![Just(0x100u32), Just(0x200), any::<u32>()], proptest::collection::vec(any::<u8>(), 0..60))
            .prop_map(|(t, b)| gtpu::gpdu(t, &b)),
        // A well-formed inner packet from an arbitrary source.
        (any::<[u8; 4]>(), proptest::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(s, b)| gtpu::gpdu(0x100, &ul_packet(s.into(), &b))),
    ]
}

proptest! {
    #[test]
    fn arbitrary_packets_never_panic_nor_touch_another_session(ul in proptest::collection::vec(arb_datagram(), 1..20), dl in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..60), 0..10)) {
        let mut p = plane();
        let mut r1 = bearer(UE, 0x100, 0x900, FORW);
        let mut r2 = bearer(UE2, 0x200, 0x901, FORW);
        for r in [&mut r1, &mut r2] {
            r.urrs.insert(1, Urr { id: 1, measure_volume: true, ..Default::default() });
            for pdr in r.pdrs.values_mut() { pdr.urr_ids = vec![1]; }
        }
        p.install(1, &r1).unwrap();
        p.install(2, &r2).unwrap();
        let now = Instant::now();
        for d in &ul {
            let _ = p.uplink(now, enb(), d);
        }
        for d in &dl {
            let _ = p.downlink(now, d);
        }
        // Nothing addressed to session 1's TEID or UE (or garbage) counts on session 2.
        prop_assert_eq!(p.usage(2, 1), Some((0, 0)));
        // Whatever session 1 forwarded uplink came from its UE address.
        while let Some(t) = p.poll_transmit() {
            if let Transmit::Core(b) = t {
                prop_assert_eq!(ipv4::parse(&b).unwrap().src, UE);
            }
        }
    }
}

// ---- IPv6 (PDN type IPv6 / IPv4v6: TS 23.401 5.3.1.2.2) ----

const UE6: &str = "2001:db8:0:7:1111:2222:3333:4444";
const DN6: &str = "2001:db8:ffff::10";

/// A dual-stack bearer: UE addresses `UE` and `UE6` (its /64 the PDN
/// connection's prefix) in both PDIs, as the S/P-GW-C sends them.
fn dual_bearer(dl: Action) -> SessionRules {
    let mut r = bearer(UE, 0x100, 0x900, dl);
    for p in r.pdrs.values_mut() {
        p.pdi.ue_ipv6 = Some(UE6.parse().unwrap());
    }
    r
}

fn v6(a: &str) -> std::net::Ipv6Addr {
    a.parse().unwrap()
}

#[test]
fn ipv6_goes_up_to_the_core_and_down_the_tunnel_by_the_ues_prefix() {
    let mut p = plane();
    p.install(1, &dual_bearer(FORW)).unwrap();
    let now = Instant::now();
    let up = super::ipv6::udp_packet(v6(UE6), v6(DN6), 4000, 53, b"query");
    assert_eq!(p.uplink(now, enb(), &gtpu::gpdu(0x100, &up)), Verdict::Forwarded);
    assert_eq!(drain(&mut p), vec![Transmit::Core(up)]);
    // Any address of the /64 is the UE's (SLAAC picks the interface ID).
    let down = super::ipv6::udp_packet(v6(DN6), v6("2001:db8:0:7::99"), 53, 4000, b"answer");
    assert_eq!(p.downlink(now, &down), Verdict::Forwarded);
    let out = drain(&mut p);
    let [Transmit::Gtpu { to, bytes }] = &out[..] else { panic!("{out:?}") };
    assert_eq!((*to, gtpu::parse(bytes).unwrap().header.teid), (enb(), 0x900));
    assert_eq!(gtpu::parse(bytes).unwrap().body, Body::GPdu(&down));
    // IPv4 still works beside it; another /64 has no session.
    assert_eq!(p.downlink(now, &dl_packet(UE, 5000, b"v4")), Verdict::Forwarded);
    let other = super::ipv6::udp_packet(v6(DN6), v6("2001:db8:0:8::1"), 53, 4000, b"x");
    assert_eq!(p.downlink(now, &other), Verdict::Dropped(DropReason::NoSession));
    // Removed with the session.
    p.remove(1).unwrap();
    assert_eq!(p.downlink(now, &down), Verdict::Dropped(DropReason::NoSession));
}

#[test]
fn ipv6_from_outside_the_prefix_or_on_an_ipv4_only_bearer_is_dropped() {
    let mut p = plane();
    p.install(1, &dual_bearer(FORW)).unwrap();
    p.install(2, &bearer(UE2, 0x200, 0x901, FORW)).unwrap();
    let now = Instant::now();
    let spoofed = super::ipv6::udp_packet(v6("2001:db8:0:8::1"), v6(DN6), 4000, 53, b"x");
    assert_eq!(p.uplink(now, enb(), &gtpu::gpdu(0x100, &spoofed)), Verdict::Dropped(DropReason::Spoofed));
    let on_v4 = super::ipv6::udp_packet(v6(UE6), v6(DN6), 4000, 53, b"x");
    assert_eq!(p.uplink(now, enb(), &gtpu::gpdu(0x200, &on_v4)), Verdict::Dropped(DropReason::NoPdr));
    let cut = &on_v4[..30];
    assert_eq!(p.uplink(now, enb(), &gtpu::gpdu(0x100, cut)), Verdict::Dropped(DropReason::Malformed));
    assert!(drain(&mut p).is_empty());
}

#[test]
fn ipv6_filters_match_by_protocol_and_ports() {
    let mut p = plane();
    let mut r = dual_bearer(FORW);
    // Only UDP to port 53 goes up; an IPv4 prefix filter never takes IPv6.
    r.pdrs.get_mut(&1).unwrap().pdi.flows = vec![
        FlowFilter::parse("permit out 17 from any 53 to assigned").unwrap(),
        FlowFilter::parse("permit out ip from 192.0.2.0/24 to assigned").unwrap(),
    ];
    p.install(1, &r).unwrap();
    let now = Instant::now();
    let dns = super::ipv6::udp_packet(v6(UE6), v6(DN6), 4000, 53, b"q");
    assert_eq!(p.uplink(now, enb(), &gtpu::gpdu(0x100, &dns)), Verdict::Forwarded);
    let other = super::ipv6::udp_packet(v6(UE6), v6(DN6), 4000, 80, b"q");
    assert_eq!(p.uplink(now, enb(), &gtpu::gpdu(0x100, &other)), Verdict::Dropped(DropReason::NoPdr));
}

#[test]
fn a_router_solicitation_is_answered_with_the_prefix_down_the_tunnel() {
    let mut p = plane();
    p.install(1, &dual_bearer(FORW)).unwrap();
    let now = Instant::now();
    let ll = v6("fe80::1111:2222:3333:4444");
    let rs = super::ipv6::router_solicitation(ll);
    assert_eq!(p.uplink(now, enb(), &gtpu::gpdu(0x100, &rs)), Verdict::Control);
    let out = drain(&mut p);
    let [Transmit::Gtpu { to, bytes }] = &out[..] else { panic!("{out:?}") };
    let g = gtpu::parse(bytes).unwrap();
    assert_eq!((*to, g.header.teid), (enb(), 0x900));
    let Body::GPdu(ra) = g.body else { panic!("not a G-PDU") };
    let i = super::ipv6::parse(ra).unwrap();
    assert_eq!((i.src, i.dst, i.next_header, ra[40]), (super::ipv6::GATEWAY_LINK_LOCAL, ll, 58, 134));
    assert_eq!(&ra[72..80], &v6(UE6).octets()[..8], "the /64");
    assert_eq!(&ra[80..88], &[0; 8]);
    assert_eq!(p.counters.value("upf_ipv6_router_advertisement"), 1);
    // Idle (the downlink FAR buffers): nothing can go down.
    let mut q = plane();
    q.install(1, &dual_bearer(BUFF_NOCP)).unwrap();
    assert_eq!(q.uplink(now, enb(), &gtpu::gpdu(0x100, &rs)), Verdict::Dropped(DropReason::NoDestination));
}

#[test]
fn buffered_ipv6_downlink_is_released_in_order() {
    let mut p = plane();
    p.install(1, &dual_bearer(BUFF_NOCP)).unwrap();
    let now = Instant::now();
    let pkts: Vec<Vec<u8>> = (0..3u8).map(|i| super::ipv6::udp_packet(v6(DN6), v6(UE6), 53, 4000, &[i])).collect();
    for pk in &pkts {
        assert_eq!(p.downlink(now, pk), Verdict::Buffered);
    }
    p.update(now, 1, &dual_bearer(FORW)).unwrap();
    let out = drain(&mut p);
    let got: Vec<Vec<u8>> = out
        .iter()
        .map(|t| match t {
            Transmit::Gtpu { bytes, .. } => match gtpu::parse(bytes).unwrap().body {
                Body::GPdu(b) => b.to_vec(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, pkts);
}
