//! The MEC router's program (`mec_xdp`, bpf/mec.h) with `BPF_PROG_RUN` on
//! crafted frames (skipped with a note when not root), and its rule table
//! over [`mec::MemoryMecMaps`] (run everywhere). `BPF_PROG_RUN` runs on
//! `lo` (ifindex 1): the slices' interface `s1u0` resolves to it.

use super::maps::Counter;
use super::mec::{MecTable, MemoryMecMaps, Resolver, MEC_SET_MAX, MEC_SLICE_LPM};
use super::tests::{eth, ipv4, is_root, udp, XDP_PASS, XDP_TX};
use super::*;
use crate::rules::{ForwardingPlane, MecSession};
use mobicore_common::inet::checksum;
use mobicore_pfcp::mec::{Application, MecRule, RuleAction, Slice, TrafficFilter, Tunnel, UeTunnel};

const XDP_DROP: u32 = 1;
const XDP_REDIRECT: u32 = 4;
const NODE: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const ENB: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
const CORE: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 2);
const EDGE: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 2);
const UE: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 2);
const APP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const APP_MAC: [u8; 6] = [2, 0, 0, 0, 0xa, 0x99];
const APP_IF_MAC: [u8; 6] = [2, 0, 0, 0, 0xa, 0x01];
const NH_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xd];
const TEID: u32 = 0x100;
const ENB_TEID: u32 = 0x2000;

macro_rules! need_root {
    () => {
        if !is_root() {
            eprintln!("note: skipped, BPF_PROG_RUN needs root");
            return;
        }
    };
}

/// `s1u0` is `lo` (the BPF_PROG_RUN ingress), `app0` an interface of
/// index 7, `app1` one of index 1 (out the way it came: XDP_TX).
fn resolver() -> Resolver {
    Box::new(|n| match n {
        "s1u0" => Some((1, [0; 6])),
        "app0" => Some((7, APP_IF_MAC)),
        "app1" => Some((1, APP_IF_MAC)),
        _ => None,
    })
}

fn plane() -> XdpPlane {
    let cfg = XdpConfig { s1u_addr: NODE, mtu: 1500, no_fib: true, sizes: MapSizes::small() };
    let mut p = XdpPlane::load_mec(cfg).expect("load mec_xdp");
    if let Some((t, _)) = p.mec.as_mut() {
        t.resolve = resolver();
    }
    for a in [ENB, CORE, EDGE] {
        p.set_next_hop(a, NextHop { ifindex: 1, dmac: NH_MAC, smac: [2, 0, 0, 0, 0, 5] }).unwrap();
    }
    p
}

fn run(p: &XdpPlane, pkt: &[u8]) -> (u32, Vec<u8>) {
    p.program().unwrap().test_run(pkt).expect("BPF_PROG_RUN")
}

fn slice(vlan: u16) -> Slice {
    Slice { interface: "s1u0".into(), vlan }
}

fn app(interface: &str) -> Application {
    Application { mac: APP_MAC, interface: interface.into() }
}

/// A rule of slice `vlan` with one filter.
fn rule(vlan: u16, priority: u8, f: TrafficFilter, action: RuleAction) -> MecSession {
    MecSession::Rule(MecRule { slice: slice(vlan), flow: false, priority, filters: vec![f], action })
}

fn to_app() -> TrafficFilter {
    TrafficFilter { dst: Some((APP, 32)), ..TrafficFilter::default() }
}

/// A TCP-like inner packet (UDP header shape, protocol `proto`).
fn inner(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, sport: u16, dport: u16, tos: u8) -> Vec<u8> {
    let mut p = ipv4(src, dst, proto, &udp(sport, dport, b"mec payload"));
    p[1] = tos;
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

fn up(sport: u16, dport: u16) -> Vec<u8> {
    inner(UE, APP, 17, sport, dport, 0)
}

/// An Ethernet frame (tagged with `vlan` unless 0) of a G-PDU from the
/// eNB to the core on `teid`.
fn gpdu_frame(vlan: u16, src: Ipv4Addr, teid: u32, t_pdu: &[u8]) -> Vec<u8> {
    let g = mobicore_gtp::gtpu::gpdu(teid, t_pdu);
    tagged(vlan, &eth(&ipv4(src, CORE, 17, &udp(2152, 2152, &g))))
}

fn tagged(vlan: u16, frame: &[u8]) -> Vec<u8> {
    if vlan == 0 {
        return frame.to_vec();
    }
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&[0x81, 0x00]);
    f.extend_from_slice(&vlan.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

fn ul(t_pdu: &[u8]) -> Vec<u8> {
    gpdu_frame(0, ENB, TEID, t_pdu)
}

/// Forwarded as a router: next hop's MACs, TTL - 1, the rest unchanged.
fn assert_routed(out: &[u8], frame: &[u8]) {
    assert_eq!(&out[..6], &NH_MAC);
    assert_eq!(out.len(), frame.len());
    assert_eq!(out[14 + 8], frame[14 + 8] - 1, "TTL");
    assert_eq!(checksum(&out[14..34]), 0);
    assert_eq!(&out[14 + 12..], &frame[14 + 12..], "addresses and payload untouched");
}

/// Decapsulated to the application: its MAC, our MAC on its interface,
/// the inner packet with TTL - 1 and a good header checksum.
fn assert_decap(out: &[u8], t_pdu: &[u8]) {
    assert_eq!((&out[..6], &out[6..12], &out[12..14]), (&APP_MAC[..], &APP_IF_MAC[..], &[8u8, 0][..]));
    let ip = &out[14..];
    assert_eq!(ip.len(), t_pdu.len());
    assert_eq!(ip[8], t_pdu[8] - 1);
    assert_eq!(checksum(&ip[..20]), 0);
    assert_eq!(&ip[12..], &t_pdu[12..]);
}

/// The FLOW rule taking the UE's traffic to the application (and its
/// answers back into the tunnel).
fn app_flow() -> MecRule {
    MecRule {
        slice: slice(0),
        flow: true,
        priority: 10,
        filters: vec![to_app()],
        action: RuleAction::ForwardDecapsulated(app("app0")),
    }
}

fn install(p: &mut XdpPlane, seid: u64, s: &MecSession) {
    p.install_mec(seid, s).expect("install");
}

#[test]
fn every_action_on_uplink_gpdus() {
    need_root!();
    let mut p = plane();
    let port = |d: u16| TrafficFilter { dst_ports: Some((d, d)), protocol: Some(17), ..to_app() };
    install(&mut p, 1, &rule(0, 10, port(1), RuleAction::Drop));
    install(&mut p, 2, &rule(0, 10, port(2), RuleAction::ForwardDecapsulated(app("app0"))));
    install(&mut p, 3, &rule(0, 10, port(3), RuleAction::ForwardEncapsulated(Tunnel { addr: EDGE, teid: 0x77 })));
    install(&mut p, 4, &rule(0, 10, port(4), RuleAction::Passthrough));
    install(&mut p, 5, &rule(0, 10, port(5), RuleAction::ForwardDecapsulated(app("app1"))));

    assert_eq!(run(&p, &ul(&up(40000, 1))).0, XDP_DROP);
    assert_eq!(p.counter(Counter::MecDrop).unwrap(), 1);
    let t = up(40000, 2);
    let (v, out) = run(&p, &ul(&t));
    assert_eq!(v, XDP_REDIRECT, "out of the application's interface");
    assert_decap(&out, &t);
    let t = up(40000, 5);
    let (v, out) = run(&p, &ul(&t));
    assert_eq!(v, XDP_TX, "the application behind the ingress interface");
    assert_decap(&out, &t);
    assert_eq!(p.counter(Counter::MecDecap).unwrap(), 2);
    // Re-tunnelled: outer destination and TEID the rule's, outer source
    // (the eNB) and T-PDU kept, checksum right, UDP checksum none.
    let t = up(40000, 3);
    let f = ul(&t);
    let (v, out) = run(&p, &f);
    assert_eq!(v, XDP_TX);
    assert_eq!(&out[14 + 12..14 + 20], &[ENB.octets(), EDGE.octets()].concat()[..]);
    assert_eq!(checksum(&out[14..34]), 0);
    assert_eq!(&out[40..42], &[0, 0]);
    assert_eq!(u32::from_be_bytes(out[46..50].try_into().unwrap()), 0x77);
    assert_eq!(&out[50..], &t[..]);
    assert_eq!(p.counter(Counter::MecRetunnel).unwrap(), 1);
    // TEID 0: the G-PDU's kept.
    install(&mut p, 3, &rule(0, 10, port(3), RuleAction::ForwardEncapsulated(Tunnel { addr: EDGE, teid: 0 })));
    let (v, out) = run(&p, &f);
    assert_eq!((v, u32::from_be_bytes(out[46..50].try_into().unwrap())), (XDP_TX, TEID));
    // PASSTHROUGH and no rule at all: routed untouched.
    for d in [4, 6] {
        let f = ul(&up(40000, d));
        let (v, out) = run(&p, &f);
        assert_eq!(v, XDP_TX);
        assert_routed(&out, &f);
    }
    assert_eq!(p.counter(Counter::MecPass).unwrap(), 2);
    // Gone with its session: DROP no more.
    p.remove_mec(1).unwrap();
    assert_eq!(run(&p, &ul(&up(40000, 1))).0, XDP_TX);
    // DUPLICATE_*: the G-PDU routed as it goes on, broadcast to mec_dup,
    // the metadata in front telling its clones their ways out and the
    // copy's rewrite (BPF_PROG_RUN gives the metadata before the frame).
    install(&mut p, 9, &rule(0, 10, port(9), RuleAction::DuplicateDecapsulated(app("app0"))));
    install(&mut p, 8, &rule(0, 10, port(8), RuleAction::DuplicateEncapsulated(Tunnel { addr: EDGE, teid: 0x78 })));
    let meta = |out: &[u8], f: &[u8]| -> Vec<u32> {
        assert_eq!(out.len(), f.len() + 32, "32 octets of metadata");
        assert_routed(&out[32..], f);
        out[..32].chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect()
    };
    let f = ul(&up(40000, 9));
    let (v, out) = run(&p, &f);
    assert_eq!(v, XDP_REDIRECT);
    let m = meta(&out, &f);
    assert_eq!((m[0], m[1]), (1, 7), "the original's way out, the copy's (app0)");
    assert_eq!(&out[8..20], &[APP_MAC, APP_IF_MAC].concat()[..]);
    assert_eq!((m[5], m[6]), (0, 0), "decapsulated");
    let seq = m[7];
    let f = ul(&up(40000, 8));
    let (v, out) = run(&p, &f);
    assert_eq!(v, XDP_REDIRECT);
    let m = meta(&out, &f);
    assert_eq!((m[0], m[1]), (1, 1), "both by the next hops");
    assert_eq!(&out[8..14], &NH_MAC);
    assert_eq!((m[5], m[6]), (u32::from_ne_bytes(EDGE.octets()), 0x78));
    assert_ne!(m[7], seq, "each packet numbered");
    assert_eq!(p.counter(Counter::MecDupl).unwrap(), 2);
    assert_eq!(p.counter(Counter::MecNoCopy).unwrap(), 0);
}

/// The whole 5-tuple of the UE's UDP flow 40000 -> APP:80 (an exact rule).
fn exact_flow() -> TrafficFilter {
    TrafficFilter {
        src: Some((UE, 32)),
        dst: Some((APP, 32)),
        src_ports: Some((40000, 40000)),
        dst_ports: Some((80, 80)),
        protocol: Some(17),
        ..TrafficFilter::default()
    }
}

/// A flow's exact rule is remembered per CPU (bpf/maps.h `mec_memo`): a
/// rule added, changed or removed under a running flow takes effect on
/// the flow's next packet, in both directions.
#[test]
fn exact_rules_changed_under_a_flow_take_effect_at_once() {
    need_root!();
    let mut p = plane();
    install(&mut p, 50, &MecSession::Ue(UeTunnel { ue: UE, enb: ENB, teid: ENB_TEID, origin: CORE }));
    let exact = exact_flow();
    let flow = |action| MecRule { slice: slice(0), flow: true, priority: 10, filters: vec![exact], action };
    let up_frame = ul(&inner(UE, APP, 17, 40000, 80, 0));
    let down_frame = eth(&inner(APP, UE, 17, 80, 40000, 0));
    // No rule of the flow yet (remembered as none), another one makes the
    // slice: routed, and the answer too.
    let other = TrafficFilter { dst_ports: Some((81, 81)), ..exact };
    install(&mut p, 2, &MecSession::Rule(MecRule { filters: vec![other], ..flow(RuleAction::Drop) }));
    assert_eq!(run(&p, &up_frame).0, XDP_TX);
    assert_eq!(run(&p, &down_frame).0, XDP_PASS);
    install(&mut p, 1, &MecSession::Rule(flow(RuleAction::Drop)));
    assert_eq!(run(&p, &up_frame).0, XDP_DROP);
    install(&mut p, 1, &MecSession::Rule(flow(RuleAction::ForwardDecapsulated(app("app0")))));
    assert_eq!(run(&p, &up_frame).0, XDP_REDIRECT);
    assert_eq!(run(&p, &down_frame).0, XDP_TX, "the answer into the UE's tunnel");
    p.remove_mec(1).unwrap();
    assert_eq!(run(&p, &up_frame).0, XDP_TX, "routed again");
    assert_eq!(run(&p, &down_frame).0, XDP_PASS);
    assert_eq!(p.counter(Counter::MecDrop).unwrap(), 1);
}

/// A FLOW rule of DUPLICATE_*: both directions of the flow are G-PDUs
/// copied to the application (the reverse is installed on the tunnel
/// side), and the application's own packets are not put into the tunnel.
#[test]
fn duplicate_flow_rules_copy_both_directions() {
    need_root!();
    let mut p = plane();
    let f = TrafficFilter { dst_ports: Some((7, 7)), protocol: Some(17), ..to_app() };
    let r = MecRule {
        slice: slice(0),
        flow: true,
        priority: 10,
        filters: vec![f],
        action: RuleAction::DuplicateDecapsulated(app("app0")),
    };
    install(&mut p, 1, &MecSession::Rule(r));
    install(&mut p, 2, &MecSession::Ue(UeTunnel { ue: UE, enb: ENB, teid: ENB_TEID, origin: CORE }));
    assert_eq!(run(&p, &ul(&up(40000, 7))).0, XDP_REDIRECT, "the uplink");
    let g = mobicore_gtp::gtpu::gpdu(ENB_TEID, &inner(APP, UE, 17, 7, 40000, 0));
    let dl = eth(&ipv4(CORE, ENB, 17, &udp(2152, 2152, &g)));
    let (v, out) = run(&p, &dl);
    assert_eq!(v, XDP_REDIRECT, "the downlink");
    assert_routed(&out[32..], &dl);
    assert_eq!(p.counter(Counter::MecDupl).unwrap(), 2);
    // The application's packet to the UE: routed as it is.
    run(&p, &eth(&inner(APP, UE, 17, 7, 40000, 0)));
    assert_eq!(p.counter(Counter::MecEncap).unwrap(), 0);
    // Other flows of the UE: not copied.
    assert_eq!(run(&p, &ul(&up(40000, 8))).0, XDP_TX);
    assert_eq!(p.counter(Counter::MecDupl).unwrap(), 2);
}

#[test]
fn every_filter_field_matches_and_misses() {
    need_root!();
    let mut p = plane();
    let base = inner(UE, APP, 6, 40000, 80, 46 << 2);
    let other = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut x = base.clone();
        f(&mut x);
        x[10..12].copy_from_slice(&[0, 0]);
        let c = checksum(&x[..20]);
        x[10..12].copy_from_slice(&c.to_be_bytes());
        x
    };
    let d = TrafficFilter::default();
    let cases: Vec<(&str, TrafficFilter, Vec<u8>)> = vec![
        ("source prefix", TrafficFilter { src: Some((Ipv4Addr::new(10, 45, 0, 0), 16)), ..d }, other(&|x| x[12] = 11)),
        ("destination", TrafficFilter { dst: Some((APP, 32)), ..d }, other(&|x| x[19] = 11)),
        ("protocol", TrafficFilter { protocol: Some(6), ..d }, other(&|x| x[9] = 17)),
        ("source port", TrafficFilter { src_ports: Some((39000, 41000)), ..d }, other(&|x| x[20] = 0x10)),
        ("destination port", TrafficFilter { dst_ports: Some((80, 80)), ..d }, other(&|x| x[23] = 81)),
        ("DSCP", TrafficFilter { dscp: Some(46), ..d }, other(&|x| x[1] = 0)),
    ];
    for (i, (what, f, miss)) in cases.into_iter().enumerate() {
        let seid = 100 + i as u64;
        install(&mut p, seid, &rule(0, 1, f, RuleAction::Drop));
        assert_eq!(run(&p, &ul(&base)).0, XDP_DROP, "{what}: matches");
        assert_eq!(run(&p, &ul(&miss)).0, XDP_TX, "{what}: another value passes");
        p.remove_mec(seid).unwrap();
    }
    // The outer TEID and the eNB (outer source).
    install(&mut p, 1, &rule(0, 1, TrafficFilter { teid: Some(TEID), ..d }, RuleAction::Drop));
    assert_eq!(run(&p, &ul(&base)).0, XDP_DROP);
    assert_eq!(run(&p, &gpdu_frame(0, ENB, TEID + 1, &base)).0, XDP_TX);
    install(&mut p, 1, &rule(0, 1, TrafficFilter { enb: Some(ENB), ..d }, RuleAction::Drop));
    assert_eq!(run(&p, &ul(&base)).0, XDP_DROP);
    assert_eq!(run(&p, &gpdu_frame(0, Ipv4Addr::new(10, 1, 0, 3), TEID, &base)).0, XDP_TX);
    // A fully specified rule is an exact entry: it matches its 5-tuple only.
    let exact = TrafficFilter {
        src: Some((UE, 32)),
        dst: Some((APP, 32)),
        protocol: Some(6),
        src_ports: Some((40000, 40000)),
        dst_ports: Some((80, 80)),
        ..d
    };
    install(&mut p, 1, &rule(0, 1, exact, RuleAction::Drop));
    assert_eq!(p.mec.as_ref().map(|(t, _)| t.rules()), Some(1));
    assert_eq!(run(&p, &ul(&base)).0, XDP_DROP);
    assert_eq!(run(&p, &ul(&other(&|x| x[21] = 0x41))).0, XDP_TX);
}

#[test]
fn the_highest_priority_of_overlapping_rules_wins() {
    need_root!();
    let mut p = plane();
    let t = up(40000, 80);
    let net = TrafficFilter { dst: Some((Ipv4Addr::new(192, 0, 2, 0), 24)), ..TrafficFilter::default() };
    let exact = TrafficFilter {
        src: Some((UE, 32)),
        protocol: Some(17),
        src_ports: Some((40000, 40000)),
        dst_ports: Some((80, 80)),
        ..to_app()
    };
    // A /32 at 20 against a /24 at 5: the /24 (priority 5) wins.
    install(&mut p, 1, &rule(0, 20, to_app(), RuleAction::ForwardDecapsulated(app("app0"))));
    install(&mut p, 2, &rule(0, 5, net, RuleAction::Drop));
    assert_eq!(run(&p, &ul(&t)).0, XDP_DROP);
    install(&mut p, 2, &rule(0, 30, net, RuleAction::Drop));
    assert_eq!(run(&p, &ul(&t)).0, XDP_REDIRECT, "now the /32 is first");
    // An exact entry against the sets: by priority too.
    install(&mut p, 3, &rule(0, 25, exact, RuleAction::Passthrough));
    assert_eq!(run(&p, &ul(&t)).0, XDP_REDIRECT, "priority 20 before 25");
    install(&mut p, 3, &rule(0, 2, exact, RuleAction::Drop));
    assert_eq!(run(&p, &ul(&t)).0, XDP_DROP, "priority 2 first");
    // Another address of the /24: only the /24's rule.
    let (v, out) = run(&p, &ul(&inner(UE, Ipv4Addr::new(192, 0, 2, 77), 17, 1, 2, 0)));
    assert_eq!(v, XDP_DROP, "{out:?}");
}

#[test]
fn vlan_slices_keep_their_own_rules() {
    need_root!();
    let mut p = plane();
    install(&mut p, 1, &rule(100, 10, to_app(), RuleAction::Drop));
    install(&mut p, 2, &rule(200, 10, to_app(), RuleAction::ForwardDecapsulated(app("app0"))));
    install(&mut p, 3, &rule(0, 10, to_app(), RuleAction::Passthrough));
    let t = up(40000, 80);
    assert_eq!(run(&p, &gpdu_frame(100, ENB, TEID, &t)).0, XDP_DROP, "VLAN 100");
    let (v, out) = run(&p, &gpdu_frame(200, ENB, TEID, &t));
    assert_eq!(v, XDP_REDIRECT, "VLAN 200");
    assert_decap(&out, &t);
    // Untagged: the untagged slice, routed; the tag of a routed frame goes.
    let f = gpdu_frame(0, ENB, TEID, &t);
    let (v, out) = run(&p, &f);
    assert_eq!(v, XDP_TX);
    assert_routed(&out, &f);
    // A VLAN of no slice is the host's, untouched.
    let f = gpdu_frame(300, ENB, TEID, &t);
    assert_eq!(run(&p, &f), (XDP_PASS, f));
    assert_eq!(p.counter(Counter::MecNoSlice).unwrap(), 1);
    // Removing the slice's last rule removes the slice.
    p.remove_mec(1).unwrap();
    assert_eq!(run(&p, &gpdu_frame(100, ENB, TEID, &t)).0, XDP_PASS);
}

/// A G-PDU the program made: outer IPv4 from `src` to `dst` with a good
/// checksum and length, UDP 2152 to 2152 (checksum none, allowed over
/// IPv4), a G-PDU header on `teid` whose length is the T-PDU's.
fn assert_gpdu(out: &[u8], src: Ipv4Addr, dst: Ipv4Addr, teid: u32, t_pdu: &[u8]) {
    let ip = &out[14..];
    assert_eq!(&out[12..14], &[8, 0]);
    assert_eq!(checksum(&ip[..20]), 0, "outer IPv4 checksum");
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, ip.len());
    assert_eq!((ip[9], &ip[12..16], &ip[16..20]), (17, &src.octets()[..], &dst.octets()[..]));
    let u = &ip[20..];
    assert_eq!(&u[..4], &[0x08, 0x68, 0x08, 0x68]);
    assert_eq!(u16::from_be_bytes([u[4], u[5]]) as usize, u.len());
    assert_eq!(&u[6..8], &[0, 0]);
    let g = mobicore_gtp::gtpu::parse(&u[8..]).expect("a G-PDU");
    assert_eq!(g.header.teid, teid);
    match g.body {
        mobicore_gtp::gtpu::Body::GPdu(b) => {
            assert_eq!(b.len(), t_pdu.len());
            assert_eq!(b[8], t_pdu[8] - 1, "inner TTL");
            assert_eq!(checksum(&b[..20]), 0, "inner IPv4 checksum");
            assert_eq!(&b[12..], &t_pdu[12..]);
        }
        _ => panic!("not a G-PDU"),
    }
}

#[test]
fn application_answers_go_into_the_ue_tunnel_for_flow_rules() {
    need_root!();
    let mut p = plane();
    let ue = UeTunnel { ue: UE, enb: ENB, teid: ENB_TEID, origin: CORE };
    install(&mut p, 50, &MecSession::Ue(ue));
    let answer = inner(APP, UE, 17, 80, 40000, 0);
    let plain = eth(&answer);
    // No rule: an application's packet is routed as it is.
    let (v, out) = run(&p, &plain);
    assert_eq!(v, XDP_PASS, "no route to the UE's address: the kernel's");
    assert_eq!(out, plain);
    // FLOW: the reverse of UE -> application is the answer: encapsulated.
    let flow = app_flow();
    install(&mut p, 1, &MecSession::Rule(flow.clone()));
    let (v, out) = run(&p, &plain);
    assert_eq!(v, XDP_TX, "to the eNB's next hop");
    assert_eq!(&out[..6], &NH_MAC);
    assert_gpdu(&out, CORE, ENB, ENB_TEID, &answer);
    assert_eq!(p.counter(Counter::MecEncap).unwrap(), 1);
    // PACKET: only the direction written; the answer is not the rule's.
    install(&mut p, 1, &MecSession::Rule(MecRule { flow: false, ..flow.clone() }));
    assert_eq!(run(&p, &plain).0, XDP_PASS);
    // A PACKET rule written for the answers takes them.
    let back = TrafficFilter { src: Some((APP, 32)), ..TrafficFilter::default() };
    install(&mut p, 2, &rule(0, 10, back, RuleAction::ForwardDecapsulated(app("app0"))));
    let (v, out) = run(&p, &plain);
    assert_eq!(v, XDP_TX);
    assert_gpdu(&out, CORE, ENB, ENB_TEID, &answer);
    // A UE without a tunnel: routed, counted.
    let stranger = eth(&inner(APP, Ipv4Addr::new(10, 45, 0, 9), 17, 80, 40000, 0));
    assert_eq!(run(&p, &stranger).0, XDP_PASS);
    assert_eq!(p.counter(Counter::MecNoUe).unwrap(), 1);
    // The tunnel follows its session (an eNB change is a modification).
    install(&mut p, 50, &MecSession::Ue(UeTunnel { enb: EDGE, teid: 9, ..ue }));
    let (_, out) = run(&p, &plain);
    assert_gpdu(&out, CORE, EDGE, 9, &answer);
    p.remove_mec(50).unwrap();
    assert_eq!(run(&p, &plain).0, XDP_PASS);
}

/// A flow's downlink answer is remembered per CPU with the eNB's next hop
/// (bpf/maps.h `mec_dl_memo`): the next packets skip the rule, tunnel and
/// next-hop lookups (the next-hop counter counts only the first), yet a
/// next hop changed under the flow takes effect on its next packet, and a
/// packet of another DSCP is classified on its own.
#[test]
fn a_flows_downlink_follows_its_next_hop_and_dscp_at_once() {
    need_root!();
    let mut p = plane();
    install(&mut p, 50, &MecSession::Ue(UeTunnel { ue: UE, enb: ENB, teid: ENB_TEID, origin: CORE }));
    let flow = app_flow();
    install(&mut p, 1, &MecSession::Rule(flow));
    // Expedited forwarding (DSCP 46) from the application: dropped by a
    // rule of higher priority.
    let ef = TrafficFilter { src: Some((APP, 32)), dscp: Some(46), ..TrafficFilter::default() };
    install(&mut p, 2, &rule(0, 5, ef, RuleAction::Drop));
    let answer = inner(APP, UE, 17, 80, 40000, 0);
    let plain = eth(&answer);
    let hits = p.counter(Counter::NhCacheHit).unwrap();
    for _ in 0..3 {
        let (v, out) = run(&p, &plain);
        assert_eq!(v, XDP_TX);
        assert_eq!(&out[..6], &NH_MAC);
        assert_gpdu(&out, CORE, ENB, ENB_TEID, &answer);
    }
    assert_eq!(p.counter(Counter::MecEncap).unwrap(), 3);
    assert_eq!(p.counter(Counter::NhCacheHit).unwrap(), hits + 1, "one next-hop lookup for the flow");
    // The same 5-tuple with DSCP 46: its own answer.
    let ef_answer = inner(APP, UE, 17, 80, 40000, 46 << 2);
    assert_eq!(run(&p, &eth(&ef_answer)).0, XDP_DROP);
    assert_eq!(run(&p, &plain).0, XDP_TX, "the DSCP 0 packets still go into the tunnel");
    // The eNB's next hop moves: the flow's next packet follows it.
    let moved = [2, 0, 0, 0, 0, 0x7e];
    p.set_next_hop(ENB, NextHop { ifindex: 1, dmac: moved, smac: [2, 0, 0, 0, 0, 5] }).unwrap();
    let (v, out) = run(&p, &plain);
    assert_eq!(v, XDP_TX);
    assert_eq!(&out[..6], &moved);
    assert_gpdu(&out, CORE, ENB, ENB_TEID, &answer);
    // No next hop cached: left to the FIB, which this plane does not use.
    p.remove_next_hop(ENB).unwrap();
    assert_eq!(run(&p, &plain).0, XDP_PASS);
    assert_eq!(p.counter(Counter::MecDrop).unwrap(), 1);
}

/// tshark reads both sides of the router as the program leaves them: the
/// G-PDU in, the decapsulated packet out, the re-tunnelled G-PDU, and the
/// application's answer encapsulated; no malformed packet, no expert error.
#[test]
fn tshark_reads_both_sides_of_the_router() {
    need_root!();
    let mut p = plane();
    let port = |d: u16| TrafficFilter { dst_ports: Some((d, d)), protocol: Some(17), ..to_app() };
    let app0 = RuleAction::ForwardDecapsulated(app("app0"));
    let flow = MecRule { slice: slice(0), flow: true, priority: 10, filters: vec![port(2)], action: app0 };
    install(&mut p, 1, &MecSession::Rule(flow));
    install(&mut p, 2, &rule(0, 10, port(3), RuleAction::ForwardEncapsulated(Tunnel { addr: EDGE, teid: 0x77 })));
    install(&mut p, 3, &MecSession::Ue(UeTunnel { ue: UE, enb: ENB, teid: ENB_TEID, origin: CORE }));
    let mut packets = vec![];
    for (frame, want) in [
        (ul(&up(40000, 2)), XDP_REDIRECT),
        (ul(&up(40000, 3)), XDP_TX),
        (eth(&inner(APP, UE, 17, 2, 40000, 0)), XDP_TX),
    ] {
        let (v, out) = run(&p, &frame);
        assert_eq!(v, want);
        packets.push(frame[14..].to_vec());
        packets.push(out[14..].to_vec());
    }
    if let Some(text) = crate::dataplane::tests_netns::tshark_raw(&packets) {
        for s in ["GPRS Tunneling Protocol", &format!("TEID: 0x{ENB_TEID:08x}"), "TEID: 0x00000077"] {
            assert!(text.contains(s), "{s} not in:\n{text}");
        }
    }
}

// ---- the rule table, no kernel -------------------------------------------

fn table() -> (MecTable, MemoryMecMaps) {
    (MecTable::new(resolver()), MemoryMecMaps::default())
}

#[test]
fn wildcard_sets_hold_the_covering_rules_and_are_bounded() {
    let (mut t, mut m) = table();
    let net = |len: u8| TrafficFilter { dst: Some((Ipv4Addr::new(192, 0, 2, 0), len)), ..TrafficFilter::default() };
    let r = |prio, f| match rule(0, prio, f, RuleAction::Drop) {
        MecSession::Rule(r) => r,
        _ => unreachable!(),
    };
    t.set_rule(&mut m, 1, Some(&r(10, net(24)))).unwrap();
    t.set_rule(&mut m, 2, Some(&r(5, net(16)))).unwrap();
    t.set_rule(&mut m, 3, Some(&r(7, to_app()))).unwrap();
    // Tunnel and plain side (PACKET as written) for each of 3 prefixes.
    assert_eq!(m.prefixes.len(), 6);
    let at = |m: &MemoryMecMaps, len: u32| {
        let (_, s) = m.prefixes.iter().find(|((l, d), _)| *l == 32 + len && d.slice_side == 0).unwrap();
        s.rules[..s.count as usize].iter().map(|e| e.priority).collect::<Vec<_>>()
    };
    assert_eq!(at(&m, 32), [5, 7, 10], "the /32 holds the /24 and /16, by priority");
    assert_eq!(at(&m, 24), [5, 10]);
    t.set_rule(&mut m, 2, None).unwrap();
    assert_eq!(at(&m, 32), [7, 10]);
    // A set beyond MEC_SET_MAX is refused, and nothing changes.
    for i in 0..(MEC_SET_MAX as u64 - 2) {
        t.set_rule(&mut m, 10 + i, Some(&r(20 + i as u8, net(8)))).unwrap();
    }
    let before = m.prefixes.clone();
    assert!(t.set_rule(&mut m, 99, Some(&r(99, net(8)))).is_err());
    assert_eq!(m.prefixes, before);
}

#[test]
fn a_slice_says_which_sides_have_prefix_sets() {
    let (mut t, mut m) = table();
    let r = |prio, f| match rule(0, prio, f, RuleAction::Drop) {
        MecSession::Rule(r) => r,
        _ => unreachable!(),
    };
    let exact = TrafficFilter {
        src: Some((UE, 32)),
        dst: Some((APP, 32)),
        protocol: Some(17),
        src_ports: Some((5000, 5000)),
        dst_ports: Some((9000, 9000)),
        ..TrafficFilter::default()
    };
    let lpm_bits = |m: &MemoryMecMaps| m.slices.values().map(|v| v >> MEC_SLICE_LPM).collect::<Vec<_>>();
    t.set_rule(&mut m, 1, Some(&r(10, exact))).unwrap();
    assert_eq!(lpm_bits(&m), [0]);
    t.set_rule(&mut m, 2, Some(&r(5, to_app()))).unwrap();
    assert_eq!(lpm_bits(&m), [0b11], "PACKET as written on both sides");
    t.set_rule(&mut m, 2, None).unwrap();
    assert_eq!(lpm_bits(&m), [0], "the last prefix set gone");
    assert_eq!(m.slices.values().map(|v| v & 0xffff).collect::<Vec<_>>(), [0], "the id kept");
}

#[test]
fn one_hundred_twenty_thousand_exact_rules_fit() {
    let (mut t, mut m) = table();
    for i in 0..120_000u32 {
        let f = TrafficFilter {
            src: Some((Ipv4Addr::from(0x0a2d_0000 + i), 32)),
            dst: Some((APP, 32)),
            protocol: Some(17),
            src_ports: Some((5000, 5000)),
            dst_ports: Some((9000, 9000)),
            ..TrafficFilter::default()
        };
        let MecSession::Rule(r) = rule(0, (i % 256) as u8, f, RuleAction::ForwardDecapsulated(app("app0"))) else {
            unreachable!()
        };
        t.set_rule(&mut m, u64::from(i), Some(&r)).unwrap();
    }
    assert_eq!((t.rules(), m.exact.len(), m.prefixes.len()), (120_000, 240_000, 0));
    assert_eq!(m.slices.len(), 2, "the ingress and the application's interface");
    assert!(m.slices.values().all(|v| v >> MEC_SLICE_LPM == 0), "no prefix set: the program skips the LPM lookup");
    for i in 0..120_000u64 {
        t.set_rule(&mut m, i, None).unwrap();
    }
    assert!(m.exact.is_empty() && m.slices.is_empty());
}

// ---- real packets through veths ------------------------------------------

/// Namespace test: enb --veth-- mec (XDP `mec_xdp`, programmed by PFCP
/// through the sans-I/O node) --veth-- core, and mec --veth-- app (an edge
/// application). Real G-PDUs and datagrams from sockets; every check waits
/// for its packet with a multi-second limit.
#[test]
fn an_application_is_reached_by_breakout_and_answers_through_the_tunnel() {
    use super::tests_netns::in_ns;
    use super::tests_steer::{checksums_ok, deliver_to, gpdu, inner as udp_inner, open, router_topology};
    use crate::config::{UpfConfig, UpfRole};
    use crate::node::UpfCore;
    use crate::pfcp::{decode, encode, first, msg};
    use crate::rules::{PlaneError, SessionRules};
    use mobicore_pfcp::mec::establishment_request;
    use rs_pfcp::ie::fseid::Fseid;
    use rs_pfcp::ie::IeType;
    use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
    use std::sync::{Arc, Mutex};
    use std::time::{Instant, SystemTime};

    if !is_root() {
        eprintln!("note: skipped, network namespaces need root");
        return;
    }
    const MEC: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
    const APP_ADDR: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 2);
    const CP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
    let (guard, [e, s, c, x]) = router_topology("mcm", ["enb", "mec", "core", "app"]);
    let mut ends = vec![];
    for (ns, dev, addr, port) in [(&e, "ve0", ENB, 2152), (&c, "vc0", CORE, 2152), (&x, "vx0", APP_ADDR, 9000)] {
        let dev = dev.to_string();
        ends.push(in_ns(ns, move || {
            mobicore_netns::set_tx_checksum(&dev, false).expect("tx checksum off");
            let mut pass = baseline::load_pass().expect("load pass");
            pass.attach(&dev, AttachMode::Native).expect("attach pass");
            (pass, UdpSocket::bind(SocketAddrV4::new(addr, port)).unwrap())
        }));
    }
    let plane = in_ns(&s, || {
        let cfg = XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(MEC) };
        let mut p = XdpPlane::load_mec(cfg).expect("load mec_xdp");
        for dev in ["vs0", "vs1", "vs2"] {
            p.attach(dev, AttachMode::Native).expect("attach mec_xdp");
        }
        Arc::new(Mutex::new(p))
    });
    let (enb, core, app) = (&ends[0].1, &ends[1].1, &ends[2].1);

    /// The plane shared between the node and the test.
    struct Shared(Arc<Mutex<XdpPlane>>);
    impl ForwardingPlane for Shared {
        fn install(&mut self, _: u64, _: &SessionRules) -> Result<(), PlaneError> {
            Ok(())
        }
        fn update(&mut self, _: u64, _: &SessionRules) -> Result<(), PlaneError> {
            Ok(())
        }
        fn remove(&mut self, _: u64) -> Result<(), PlaneError> {
            Ok(())
        }
        fn install_mec(&mut self, seid: u64, m: &MecSession) -> Result<(), PlaneError> {
            self.0.lock().unwrap().install_mec(seid, m)
        }
        fn remove_mec(&mut self, seid: u64) -> Result<(), PlaneError> {
            self.0.lock().unwrap().remove_mec(seid)
        }
    }
    let cfg = UpfConfig { role: UpfRole::Mec, s1u_addr: MEC, ..UpfConfig::default() };
    let mut node = UpfCore::new(cfg, Box::new(Shared(plane.clone())), SystemTime::now(), Default::default());
    let mut seq = 0;
    let mut request = |node: &mut UpfCore, b: &dyn Fn(u32) -> Vec<u8>| {
        seq += 1;
        node.handle_datagram(Instant::now(), SocketAddr::from(SocketAddrV4::new(CP, 8805)), &b(seq));
        let (_, out) = node.poll_transmit().expect("an answer");
        let (_, ies) = decode(&out).unwrap();
        let cause = first(&ies, IeType::Cause).map(|c| c.payload[0]).unwrap();
        (cause, first(&ies, IeType::Fseid).map(|f| u64::from(Fseid::unmarshal(&f.payload).unwrap().seid)))
    };
    let setup = |seq| {
        use rs_pfcp::ie::{node_id::NodeId, recovery_time_stamp::RecoveryTimeStamp};
        encode(
            msg::ASSOCIATION_SETUP_REQUEST,
            None,
            seq,
            &[NodeId::new_ipv4(CP).to_ie(), RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH).to_ie()],
        )
    };
    assert_eq!(request(&mut node, &setup).0, 1);

    let to_app = udp_inner(UE, APP_ADDR, 40000, 9000, b"to the edge");
    let ul = gpdu(TEID, &to_app);
    let core_addr = SocketAddrV4::new(CORE, 2152);
    // 1. No rule: the G-PDU reaches the core untouched.
    deliver_to(enb, core_addr, &ul, core, |b, _| b == &ul[..]).expect("pass-through to the core");

    // 2. A FLOW rule: to the application, decapsulated.
    let flow_rule = MecRule {
        slice: Slice { interface: "vs0".into(), vlan: 0 },
        flow: true,
        priority: 10,
        filters: vec![TrafficFilter {
            dst: Some((APP_ADDR, 32)),
            protocol: Some(17),
            dst_ports: Some((9000, 9000)),
            ..TrafficFilter::default()
        }],
        action: RuleAction::ForwardDecapsulated(Application { mac: [2, 0, 0, 0, 3, 2], interface: "vs2".into() }),
    };
    let rule = MecSession::Rule(flow_rule.clone());
    let tunnel = MecSession::Ue(UeTunnel { ue: UE, enb: ENB, teid: ENB_TEID, origin: CORE });
    for m in [&rule, &tunnel] {
        assert_eq!(request(&mut node, &|q| establishment_request(q, CP, u64::from(q), CP, m)).0, 1);
    }
    let (b, from) = deliver_to(enb, core_addr, &ul, app, |b, _| b == b"to the edge").expect("breakout to the app");
    assert_eq!((b.as_slice(), from), (&b"to the edge"[..], SocketAddr::from(SocketAddrV4::new(UE, 40000))));
    // Another flow still goes to the core.
    let other = gpdu(TEID, &udp_inner(UE, APP_ADDR, 40000, 9001, b"another flow"));
    deliver_to(enb, core_addr, &other, core, |b, _| b == &other[..]).expect("another flow to the core");

    // 3. The application's answer reaches the eNB in the UE's tunnel, as
    // from the anchor.
    let (g, from) = deliver_to(app, SocketAddrV4::new(UE, 40000), b"answer", enb, |b, _| {
        mobicore_gtp::gtpu::parse(b).is_ok() && open(b).1.ends_with(b"answer")
    })
    .expect("the answer in the tunnel");
    assert_eq!(from, SocketAddr::from(SocketAddrV4::new(CORE, 2152)), "outer source: the anchor's");
    let (teid, t) = open(&g);
    assert_eq!(teid, ENB_TEID);
    assert!(checksums_ok(&t), "inner checksums");
    assert_eq!((&t[12..16], &t[16..20]), (&APP_ADDR.octets()[..], &UE.octets()[..]));

    // 4. DUPLICATE_DECAPSULATED over it (a higher priority): the G-PDU
    // still reaches the core, and a decapsulated copy the application.
    let arrives = |rx: &UdpSocket, want: &dyn Fn(&[u8]) -> bool| {
        rx.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        let mut buf = [0u8; 2048];
        while Instant::now() < deadline {
            if let Ok((n, _)) = rx.recv_from(&mut buf) {
                if want(&buf[..n]) {
                    return true;
                }
            }
        }
        false
    };
    let app_mac = Application { mac: [2, 0, 0, 0, 3, 2], interface: "vs2".into() };
    let dup = MecRule { priority: 5, action: RuleAction::DuplicateDecapsulated(app_mac), ..flow_rule };
    let dup = MecSession::Rule(dup);
    assert_eq!(request(&mut node, &|q| establishment_request(q, CP, u64::from(q), CP, &dup)).0, 1);
    let watched = gpdu(TEID, &udp_inner(UE, APP_ADDR, 40000, 9000, b"watched"));
    deliver_to(enb, core_addr, &watched, app, |b, _| b == b"watched").expect("the copy at the application");
    assert!(arrives(core, &|b| b == &watched[..]), "the original at the core, untouched");

    // 5. DUPLICATE_ENCAPSULATED of another flow: the copy re-tunnelled to
    // the rule's tunnel end (TEID set, outer source the eNB's), the
    // original on to the core.
    let end = in_ns(&x, || UdpSocket::bind(SocketAddrV4::new(APP_ADDR, 2152)).unwrap());
    let retunnel = MecSession::Rule(MecRule {
        slice: Slice { interface: "vs0".into(), vlan: 0 },
        flow: false,
        priority: 5,
        filters: vec![TrafficFilter { dst: Some((APP_ADDR, 32)), dst_ports: Some((9001, 9001)), ..Default::default() }],
        action: RuleAction::DuplicateEncapsulated(Tunnel { addr: APP_ADDR, teid: 0x78 }),
    });
    assert_eq!(request(&mut node, &|q| establishment_request(q, CP, u64::from(q), CP, &retunnel)).0, 1);
    let copied = gpdu(TEID, &udp_inner(UE, APP_ADDR, 40000, 9001, b"copied on"));
    let is_copy = |b: &[u8], _| mobicore_gtp::gtpu::parse(b).is_ok() && open(b).1.ends_with(b"copied on");
    let (g, from) = deliver_to(enb, core_addr, &copied, &end, is_copy).expect("the re-tunnelled copy");
    assert_eq!((open(&g).0, from), (0x78, SocketAddr::from(SocketAddrV4::new(ENB, 2152))));
    assert!(arrives(core, &|b| b == &copied[..]), "the original at the core, untouched");

    let x = plane.lock().unwrap();
    assert!(x.counter(Counter::MecDecap).unwrap() >= 2 && x.counter(Counter::MecEncap).unwrap() >= 1);
    assert!(x.counter(Counter::MecDupl).unwrap() >= 2 && x.counter(Counter::MecRetunnel).unwrap() >= 1);
    assert_eq!(x.counter(Counter::MecNoCopy).unwrap(), 0);
    assert_eq!(x.counter(Counter::PassNoRoute).unwrap(), 0, "nothing left through the kernel");
    drop(x);
    drop(node);
    drop(plane);
    drop(ends);
    drop(guard);
}

/// The cost of classifying a G-PDU (parse, slice, rule selection) by
/// `BPF_PROG_RUN`, against a bare XDP_PASS program: a probe for tuning, not
/// an assertion of speed (`mobicore bench breakout` measures rates). Run
/// with `--ignored --nocapture`. A repeated run goes on the packet the
/// previous run left, so only a verdict that leaves it as it came (DROP)
/// times the same work each time.
#[test]
#[ignore = "a probe that prints run times"]
fn classification_cost_probe() {
    need_root!();
    let repeat: u32 = std::env::var("PROBE_REPEAT").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000_000);
    let mut p = plane();
    let exact = exact_flow();
    let drop = MecRule { slice: slice(0), flow: true, priority: 10, filters: vec![exact], action: RuleAction::Drop };
    install(&mut p, 1, &MecSession::Rule(drop));
    let frame = ul(&inner(UE, APP, 17, 40000, 80, 0));
    assert_eq!(run(&p, &frame).0, XDP_DROP);
    let pass = baseline::load_pass().unwrap();
    for round in 0..3 {
        let t = p.program().unwrap().time_run(&frame, repeat).unwrap();
        let floor = pass.time_run(&frame, repeat).unwrap();
        println!(
            "round {round}: G-PDU classified and dropped {} ns (XDP_PASS alone {} ns)",
            t.as_nanos(),
            floor.as_nanos()
        );
    }
}
