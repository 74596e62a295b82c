//! Tests of the XDP programs with `BPF_PROG_RUN` on crafted packets (no
//! network needed; skipped with a note when not root), and of the rule
//! translation over [`MemoryMaps`] (run everywhere).

use super::maps::*;
use super::*;
use crate::rules::{Action, Far, GtpuTunnel, PacketDetection, Pdr, Qer, Urr, INTERFACE_ACCESS, INTERFACE_CORE};
use mobicore_common::inet::checksum;
use mobicore_gtp::gtpu::{ext, Body, Extension, HeaderRepr, Repr};
use proptest::prelude::*;

pub(crate) const S1U: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 1);
pub(crate) const ENB: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 2);
pub(crate) const UE: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 2);
pub(crate) const DN: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
pub(super) const TEID: u32 = 0x1000;
const ENB_TEID: u32 = 0x2000;
const NH_DMAC: [u8; 6] = [2, 0, 0, 0, 0, 0xd];
const NH_SMAC: [u8; 6] = [2, 0, 0, 0, 0, 0x5];

const XDP_ABORTED: u32 = 0;
const XDP_DROP: u32 = 1;
pub(super) const XDP_PASS: u32 = 2;
pub(super) const XDP_TX: u32 = 3;

pub(crate) fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

macro_rules! need_root {
    () => {
        if !is_root() {
            eprintln!("note: skipped, BPF_PROG_RUN needs root");
            return;
        }
    };
}

// ---- packet builders -------------------------------------------------

pub(crate) fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let len = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0];
    h[2..4].copy_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let c = checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

pub(crate) fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

pub(crate) fn eth(ip: &[u8]) -> Vec<u8> {
    let mut e = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    e.extend_from_slice(ip);
    e
}

pub(crate) fn inner_udp(src: Ipv4Addr, dst: Ipv4Addr, dport: u16, len: usize) -> Vec<u8> {
    ipv4(src, dst, 17, &udp(40000, dport, &vec![0xab; len]))
}

/// An uplink frame from the eNB to S1-U: a GTP-U message with `header`
/// (G-PDU, its optional fields and extension headers) carrying `inner`.
pub(crate) fn ul_frame_with(header: HeaderRepr, inner: &[u8]) -> Vec<u8> {
    eth(&ipv4(ENB, S1U, 17, &udp(2152, 2152, &Repr { header, body: Body::GPdu(inner) }.to_vec())))
}

/// An uplink frame with a plain G-PDU (no optional fields) on `teid`.
pub(crate) fn ul_frame(teid: u32, inner: &[u8]) -> Vec<u8> {
    ul_frame_with(HeaderRepr::gpdu(teid), inner)
}

/// Offset of the first extension header in an uplink frame: Ethernet,
/// IPv4, UDP, the GTP-U header with its optional octets.
const UL_FIRST_EXT: usize = 14 + 20 + 8 + 12;

// ---- rules -------------------------------------------------------------

pub(super) const FORW: Action = Action { drop: false, forw: true, buff: false, nocp: false, dupl: false };
const BUFF: Action = Action { drop: false, forw: false, buff: true, nocp: true, dupl: false };

pub(super) fn pd(iface: u8, teid: Option<u32>, flows: &[&str]) -> PacketDetection {
    PacketDetection {
        source_interface: iface,
        local_fteid: teid.map(|t| (t, S1U)),
        choose_fteid: false,
        ue_ipv4: Some(UE),
        ue_ipv6: None,
        network_instance: None,
        sdf_filters: flows.len(),
        flows: flows.iter().map(|f| crate::rules::FlowFilter::parse(f).unwrap()).collect(),
    }
}

pub(super) fn far(id: u32, action: Action, tunnel: Option<u32>) -> Far {
    Far {
        id,
        action,
        destination_interface: Some(if tunnel.is_some() { INTERFACE_ACCESS } else { INTERFACE_CORE }),
        network_instance: None,
        outer_header_creation: tunnel.map(|teid| GtpuTunnel { teid, ipv4: ENB }),
        bar_id: None,
        ..Default::default()
    }
}

pub(super) fn urr(id: u32) -> Urr {
    Urr { id, measure_volume: true, ..Default::default() }
}

/// One bearer as the S/P-GW-C installs it: uplink by TEID with outer header
/// removal, downlink by UE address with outer header creation; QER 1 and
/// URR 1 on both PDRs.
pub(crate) fn bearer(dl: Action, qer: Qer) -> SessionRules {
    let mut r = SessionRules::default();
    r.pdrs.insert(
        1,
        Pdr {
            id: 1,
            precedence: 100,
            pdi: pd(INTERFACE_ACCESS, Some(TEID), &[]),
            outer_header_removal: Some(0),
            far_id: Some(1),
            qer_ids: vec![1],
            urr_ids: vec![1],
        },
    );
    r.pdrs.insert(
        2,
        Pdr {
            id: 2,
            precedence: 100,
            pdi: pd(INTERFACE_CORE, None, &[]),
            outer_header_removal: None,
            far_id: Some(2),
            qer_ids: vec![1],
            urr_ids: vec![1],
        },
    );
    r.fars.insert(1, far(1, FORW, None));
    r.fars.insert(2, far(2, dl, dl.forw.then_some(ENB_TEID)));
    r.qers.insert(1, qer);
    r.urrs.insert(1, urr(1));
    r
}

pub(super) fn open_qer() -> Qer {
    Qer { id: 1, gate_ul_open: true, gate_dl_open: true, mbr: None, qfi: None }
}

fn nexthop() -> NextHop {
    NextHop { ifindex: 1, dmac: NH_DMAC, smac: NH_SMAC } // lo: the BPF_PROG_RUN ingress, so XDP_TX
}

fn cfg() -> XdpConfig {
    XdpConfig { s1u_addr: S1U, mtu: 1500, no_fib: true, sizes: MapSizes::small() }
}

pub(super) fn plane(rules: &SessionRules) -> XdpPlane {
    let mut p = XdpPlane::load(cfg()).expect("load upf_xdp");
    p.set_next_hop(DN, nexthop()).unwrap();
    p.set_next_hop(ENB, nexthop()).unwrap();
    p.install(7, rules).unwrap();
    p
}

pub(super) fn run(p: &XdpPlane, pkt: &[u8]) -> (u32, Vec<u8>) {
    p.program().unwrap().test_run(pkt).expect("BPF_PROG_RUN")
}

fn assert_ip_ok(ip: &[u8]) {
    assert_eq!(checksum(&ip[..20]), 0, "IPv4 header checksum");
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, ip.len(), "total length");
}

/// Decapsulated output: next-hop MACs, then the inner packet with TTL - 1.
fn assert_decap(out: &[u8], inner: &[u8]) {
    assert_eq!(&out[..6], &NH_DMAC);
    assert_eq!(&out[6..12], &NH_SMAC);
    assert_eq!(&out[12..14], &[0x08, 0x00]);
    let ip = &out[14..];
    assert_eq!(ip.len(), inner.len());
    assert_eq!(ip[8], inner[8] - 1, "TTL decremented");
    assert_ip_ok(ip);
    assert_eq!(&ip[12..], &inner[12..], "addresses and payload unchanged");
}

// ---- uplink ------------------------------------------------------------

#[test]
fn uplink_plain_gpdu_is_decapsulated() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let inner = inner_udp(UE, DN, 53, 40);
    let (v, out) = run(&p, &ul_frame(TEID, &inner));
    assert_eq!(v, XDP_TX);
    assert_decap(&out, &inner);
    assert_eq!(p.counter(Counter::UlFwd).unwrap(), 1);
    assert_eq!(p.counter(Counter::NhCacheHit).unwrap(), 1);
}

#[test]
fn uplink_with_sequence_number_is_decapsulated() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let inner = inner_udp(UE, DN, 53, 10);
    let (v, out) = run(&p, &ul_frame_with(HeaderRepr::gpdu(TEID).with_seq(0x1234), &inner));
    assert_eq!(v, XDP_TX);
    assert_decap(&out, &inner);
}

#[test]
fn uplink_with_pdu_session_container_and_chain_is_decapsulated() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let inner = inner_udp(UE, DN, 53, 10);
    // PDU session container (0x85, UL PDU type 1, QFI 9) -> UDP port ext (0x40) -> end.
    let h = HeaderRepr::gpdu(TEID)
        .with_extension(Extension::pdu_session_container(true, 9))
        .with_extension(Extension::udp_port(2152));
    let (v, out) = run(&p, &ul_frame_with(h, &inner));
    assert_eq!(v, XDP_TX);
    assert_decap(&out, &inner);
    // A two-unit container works too.
    let two_units = Extension { kind: ext::PDU_SESSION_CONTAINER, content: vec![0x10, 9, 0, 0, 0, 0] };
    let f = ul_frame_with(HeaderRepr::gpdu(TEID).with_seq(7).with_extension(two_units), &inner);
    assert_eq!(f[UL_FIRST_EXT], 2, "two 4-octet units");
    let (v, out) = run(&p, &f);
    assert_eq!(v, XDP_TX);
    assert_decap(&out, &inner);
}

#[test]
fn uplink_unknown_teid_goes_to_slow_path() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let (v, _) = run(&p, &ul_frame(0xdead, &inner_udp(UE, DN, 53, 10)));
    assert_eq!(v, XDP_PASS);
    assert_eq!(p.counter(Counter::PassUnknownTeid).unwrap(), 1);
}

#[test]
fn uplink_spoofed_source_is_dropped() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let (v, _) = run(&p, &ul_frame(TEID, &inner_udp(Ipv4Addr::new(10, 45, 0, 99), DN, 53, 10)));
    assert_eq!(v, XDP_DROP);
    assert_eq!(p.counter(Counter::DropSpoofed).unwrap(), 1);
}

#[test]
fn gtpu_control_messages_go_to_slow_path() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    for msg in [1u8, 2, 26, 254] {
        // Echo Request / Response, Error Indication, End Marker
        let g = Repr {
            header: HeaderRepr { msg_type: msg, teid: TEID, seq: Some(1), ..Default::default() },
            body: Body::Other(&[]),
        };
        let f = eth(&ipv4(ENB, S1U, 17, &udp(2152, 2152, &g.to_vec())));
        assert_eq!(run(&p, &f).0, XDP_PASS);
    }
    assert_eq!(p.counter(Counter::PassGtpControl).unwrap(), 4);
}

#[test]
fn malformed_extension_length_is_dropped() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let inner = inner_udp(UE, DN, 53, 10);
    let mut f = ul_frame_with(HeaderRepr::gpdu(TEID).with_extension(Extension::pdu_session_container(true, 9)), &inner);
    f[UL_FIRST_EXT] = 0; // extension length 0 (TS 29.281 5.2.1: at least 1)
    let (v, _) = run(&p, &f);
    assert_eq!(v, XDP_DROP);
    assert_eq!(p.counter(Counter::DropMalformed).unwrap(), 1);
}

#[test]
fn fragments_go_to_slow_path() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let mut f = ul_frame(TEID, &inner_udp(UE, DN, 53, 10));
    f[14 + 6] = 0x20; // MF
    assert_eq!(run(&p, &f).0, XDP_PASS);
    assert_eq!(p.counter(Counter::PassFragment).unwrap(), 1);
}

// ---- downlink ----------------------------------------------------------

/// Checks an encapsulated frame and returns (TEID, inner packet).
fn parse_encap(out: &[u8]) -> (u32, Vec<u8>) {
    assert_eq!(&out[..6], &NH_DMAC);
    assert_eq!(&out[6..12], &NH_SMAC);
    assert_eq!(&out[12..14], &[0x08, 0x00]);
    let ip = &out[14..];
    assert_ip_ok(ip);
    // version 4, IHL 5, TOS 0; id 0, no fragmentation; TTL 64, UDP
    assert_eq!((ip[0], ip[1]), (0x45, 0));
    assert_eq!(&ip[4..8], &[0, 0, 0, 0]);
    assert_eq!((ip[8], ip[9]), (64, 17));
    assert_eq!(&ip[12..16], &S1U.octets());
    assert_eq!(&ip[16..20], &ENB.octets());
    let u = &ip[20..];
    assert_eq!(u16::from_be_bytes([u[0], u[1]]), 2152);
    assert_eq!(u16::from_be_bytes([u[2], u[3]]), 2152);
    assert_eq!(u16::from_be_bytes([u[4], u[5]]) as usize, u.len());
    assert_eq!(&u[6..8], &[0, 0], "UDP checksum 0 over IPv4");
    let g = &u[8..];
    assert_eq!((g[0], g[1]), (0x30, 255));
    assert_eq!(u16::from_be_bytes([g[2], g[3]]) as usize, g.len() - 8);
    (u32::from_be_bytes([g[4], g[5], g[6], g[7]]), g[8..].to_vec())
}

#[test]
fn downlink_is_encapsulated_to_the_enb_fteid() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let inner = inner_udp(DN, UE, 5000, 64);
    let (v, out) = run(&p, &eth(&inner));
    assert_eq!(v, XDP_TX);
    let (teid, got) = parse_encap(&out);
    assert_eq!(teid, ENB_TEID);
    assert_eq!(got.len(), inner.len());
    assert_eq!(got[8], inner[8] - 1);
    assert_ip_ok(&got);
    assert_eq!(p.counter(Counter::DlFwd).unwrap(), 1);
}

#[test]
fn next_hop_changes_take_effect_at_once() {
    need_root!();
    let mut p = plane(&bearer(FORW, open_qer()));
    let pkt = eth(&inner_udp(DN, UE, 5000, 64));
    for _ in 0..3 {
        assert_eq!(&run(&p, &pkt).1[..6], &NH_DMAC); // fills the per-CPU memo
    }
    let other = NextHop { ifindex: 1, dmac: [2, 0, 0, 0, 0, 0xee], smac: [2, 0, 0, 0, 0, 0xef] };
    p.set_next_hop(ENB, other).unwrap();
    let (v, out) = run(&p, &pkt);
    assert_eq!(v, XDP_TX);
    assert_eq!((&out[..6], &out[6..12]), (&other.dmac[..], &other.smac[..]));
    p.remove_next_hop(ENB).unwrap();
    let (v, out) = run(&p, &pkt);
    assert_eq!(v, XDP_PASS, "no next hop and no FIB: slow path");
    assert_eq!(&out[..12], &pkt[..12], "handed back with the MACs it arrived with");
    assert_eq!(p.counter(Counter::PassNoRoute).unwrap(), 1);
}

#[test]
fn sdf_precedence_selects_the_pdr() {
    need_root!();
    let mut r = bearer(FORW, open_qer());
    // PDR 3, precedence 10 (checked before PDR 2 at 100): UDP to UE ports 5000-5010 -> FAR 3.
    r.pdrs.insert(
        3,
        Pdr {
            id: 3,
            precedence: 10,
            pdi: pd(INTERFACE_CORE, None, &["permit out 17 from any to assigned 5000-5010"]),
            outer_header_removal: None,
            far_id: Some(3),
            qer_ids: vec![],
            urr_ids: vec![],
        },
    );
    r.fars.insert(3, far(3, FORW, Some(0x3333)));
    let p = plane(&r);
    let (v, out) = run(&p, &eth(&inner_udp(DN, UE, 5005, 10)));
    assert_eq!(v, XDP_TX);
    assert_eq!(parse_encap(&out).0, 0x3333);
    let (_, out) = run(&p, &eth(&inner_udp(DN, UE, 80, 10)));
    assert_eq!(parse_encap(&out).0, ENB_TEID);
    let tcp = eth(&ipv4(DN, UE, 6, &[0x13, 0x88, 0x13, 0x8d, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0, 0, 0, 0, 0, 0, 0]));
    assert_eq!(parse_encap(&run(&p, &tcp).1).0, ENB_TEID, "protocol must match too");
}

#[test]
fn buffering_far_goes_to_slow_path() {
    need_root!();
    let p = plane(&bearer(BUFF, open_qer()));
    assert_eq!(run(&p, &eth(&inner_udp(DN, UE, 5000, 10))).0, XDP_PASS);
    assert_eq!(p.counter(Counter::PassBuffer).unwrap(), 1);
}

#[test]
fn oversized_after_encapsulation_goes_to_slow_path() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let (v, _) = run(&p, &eth(&inner_udp(DN, UE, 5000, 1500 - 28 - 20)));
    assert_eq!(v, XDP_PASS);
    assert_eq!(p.counter(Counter::PassOversize).unwrap(), 1);
    // 1464 + 36 = 1500 exactly still fits.
    assert_eq!(run(&p, &eth(&inner_udp(DN, UE, 5000, 1464 - 28))).0, XDP_TX);
}

/// An indirect data forwarding tunnel as the S/P-GW-C installs it (TS
/// 23.401 5.5.1.2.2 step 8: an Access PDR on its own TEID, outer header
/// removal, a FAR creating the target eNB's tunnel): the source eNB's
/// G-PDUs are re-tunnelled in XDP, extension headers (a PDCP PDU number)
/// dropped, the T-PDU as it came (no TTL step), one too big for the
/// tunnel left to the slow path, an End Marker too.
#[test]
fn forwarding_tunnel_g_pdus_are_retunnelled_in_xdp() {
    need_root!();
    const FWD_TEID: u32 = 0x3000;
    const TARGET_TEID: u32 = 0x4000;
    let mut rules = bearer(FORW, open_qer());
    rules.pdrs.insert(
        3,
        Pdr {
            id: 3,
            precedence: 255,
            pdi: PacketDetection { ue_ipv4: None, ..pd(INTERFACE_ACCESS, Some(FWD_TEID), &[]) },
            outer_header_removal: Some(0),
            far_id: Some(3),
            qer_ids: vec![],
            urr_ids: vec![],
        },
    );
    rules.fars.insert(3, far(3, FORW, Some(TARGET_TEID)));
    let p = plane(&rules);
    let inner = inner_udp(DN, UE, 5000, 64);
    let pdcp = Extension { kind: 0xc0, content: vec![0x12, 0x34] };
    for h in [HeaderRepr::gpdu(FWD_TEID), HeaderRepr::gpdu(FWD_TEID).with_extension(pdcp)] {
        let (v, out) = run(&p, &ul_frame_with(h, &inner));
        assert_eq!(v, XDP_TX);
        let (teid, got) = parse_encap(&out);
        assert_eq!(teid, TARGET_TEID);
        assert_eq!(got, inner, "the T-PDU as it came");
    }
    assert_eq!(p.counter(Counter::UlFwd).unwrap(), 2);
    assert_eq!(p.counter(Counter::PassUnsupported).unwrap(), 0);
    let big = inner_udp(DN, UE, 5000, 1500 - 28 - 20);
    assert_eq!(run(&p, &ul_frame(FWD_TEID, &big)).0, XDP_PASS);
    assert_eq!(p.counter(Counter::PassOversize).unwrap(), 1);
    let em = eth(&ipv4(ENB, S1U, 17, &udp(2152, 2152, &mobicore_gtp::gtpu::end_marker(FWD_TEID))));
    assert_eq!(run(&p, &em).0, XDP_PASS, "End Markers are the slow path's");
    // The bearer's own uplink still decapsulates.
    let up = inner_udp(UE, DN, 53, 10);
    let (v, out) = run(&p, &ul_frame(TEID, &up));
    assert_eq!(v, XDP_TX);
    assert_decap(&out, &up);
}

#[test]
fn not_a_ue_goes_to_the_kernel() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    assert_eq!(run(&p, &eth(&inner_udp(DN, Ipv4Addr::new(10, 45, 0, 77), 5000, 10))).0, XDP_PASS);
    assert_eq!(p.counter(Counter::PassNotUe).unwrap(), 1);
}

#[test]
fn ipv6_goes_to_the_slow_path_both_ways() {
    // PDN types IPv6 and IPv4v6 are forwarded by the user-space data path.
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let (ue, dn) = ("2001:db8:0:7::1".parse().unwrap(), "2001:db8:ffff::10".parse().unwrap());
    let up = crate::dataplane::ipv6::udp_packet(ue, dn, 4000, 53, b"q");
    assert_eq!(run(&p, &ul_frame(TEID, &up)).0, XDP_PASS);
    let mut down = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
    down.extend_from_slice(&crate::dataplane::ipv6::udp_packet(dn, ue, 53, 4000, b"a"));
    assert_eq!(run(&p, &down).0, XDP_PASS);
    assert_eq!(p.counter(Counter::PassNotIpv4).unwrap(), 2);
}

// ---- QER / URR -----------------------------------------------------------

#[test]
fn closed_gate_drops() {
    need_root!();
    let p = plane(&bearer(FORW, Qer { gate_ul_open: false, gate_dl_open: false, ..open_qer() }));
    assert_eq!(run(&p, &eth(&inner_udp(DN, UE, 5000, 10))).0, XDP_DROP);
    assert_eq!(run(&p, &ul_frame(TEID, &inner_udp(UE, DN, 53, 10))).0, XDP_DROP);
    assert_eq!(p.counter(Counter::DropGate).unwrap(), 2);
}

#[test]
fn mbr_exceeded_drops() {
    need_root!();
    // 8 kbit/s = 1 octet/ms; burst tolerance 3 s = 3000 octets.
    let p = plane(&bearer(FORW, Qer { mbr: Some((8, 8)), ..open_qer() }));
    let pkt = eth(&inner_udp(DN, UE, 5000, 1000 - 28));
    let verdicts: Vec<u32> = (0..10).map(|_| run(&p, &pkt).0).collect();
    assert_eq!(verdicts[0], XDP_TX);
    assert_eq!(verdicts.iter().filter(|v| **v == XDP_TX).count(), 4, "{verdicts:?}");
    assert_eq!(p.counter(Counter::DropMbr).unwrap(), 6);
}

#[test]
fn urr_counts_bytes_and_packets() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let ul = inner_udp(UE, DN, 53, 100);
    let dl = inner_udp(DN, UE, 5000, 200);
    for _ in 0..3 {
        run(&p, &ul_frame(TEID, &ul));
    }
    run(&p, &eth(&dl));
    let u = p.urr_usage(7, 1).unwrap();
    assert_eq!(u, UrrCounts { ul_bytes: 3 * ul.len() as u64, ul_pkts: 3, dl_bytes: dl.len() as u64, dl_pkts: 1 });
}

#[test]
fn update_keeps_usage_and_remove_unprograms() {
    need_root!();
    let mut p = plane(&bearer(BUFF, open_qer()));
    run(&p, &ul_frame(TEID, &inner_udp(UE, DN, 53, 10)));
    assert_eq!(run(&p, &eth(&inner_udp(DN, UE, 5000, 10))).0, XDP_PASS);
    p.update(7, &bearer(FORW, open_qer())).unwrap();
    assert_eq!(run(&p, &eth(&inner_udp(DN, UE, 5000, 10))).0, XDP_TX);
    assert_eq!(p.urr_usage(7, 1).unwrap().ul_pkts, 1);
    p.remove(7).unwrap();
    assert_eq!(run(&p, &ul_frame(TEID, &inner_udp(UE, DN, 53, 10))).0, XDP_PASS);
    assert_eq!(run(&p, &eth(&inner_udp(DN, UE, 5000, 10))).0, XDP_PASS);
}

/// Two TEIDs on one direct reference position: the first is served there,
/// the other through an overflow position named by the hash, and either
/// goes away without the other.
#[test]
fn colliding_keys_are_served_through_an_overflow_position() {
    need_root!();
    let teid2 = TEID ^ (1 << FAST_IDX_BITS);
    let mut p = plane(&bearer(FORW, open_qer()));
    let mut r = SessionRules::default();
    r.pdrs.insert(
        1,
        Pdr {
            id: 1,
            precedence: 100,
            pdi: pd(INTERFACE_ACCESS, Some(teid2), &[]),
            outer_header_removal: Some(0),
            far_id: Some(1),
            qer_ids: vec![],
            urr_ids: vec![],
        },
    );
    r.fars.insert(1, far(1, FORW, None));
    p.install(8, &r).unwrap();
    assert_eq!(p.fast_position(PdrKey::Teid(TEID)), Some(TEID));
    assert!(p.fast_position(PdrKey::Teid(teid2)).unwrap() >= FAST_IDX_SIZE);
    let inner = inner_udp(UE, DN, 53, 10);
    for t in [TEID, teid2] {
        let (v, out) = run(&p, &ul_frame(t, &inner));
        assert_eq!(v, XDP_TX, "teid {t:#x}");
        assert_decap(&out, &inner);
    }
    p.remove(7).unwrap();
    assert_eq!(run(&p, &ul_frame(TEID, &inner)).0, XDP_PASS);
    assert_eq!(run(&p, &ul_frame(teid2, &inner)).0, XDP_TX);
    p.install(7, &bearer(FORW, open_qer())).unwrap();
    p.remove(8).unwrap();
    assert_eq!(run(&p, &ul_frame(teid2, &inner)).0, XDP_PASS);
    assert_eq!(run(&p, &ul_frame(TEID, &inner)).0, XDP_TX);
}

// ---- robustness ------------------------------------------------------------

#[test]
fn truncations_never_abort() {
    need_root!();
    let p = plane(&bearer(FORW, open_qer()));
    let with_container = HeaderRepr::gpdu(TEID).with_extension(Extension::pdu_session_container(true, 9));
    let frames = [
        ul_frame_with(with_container, &inner_udp(UE, DN, 53, 20)),
        ul_frame(TEID, &inner_udp(UE, DN, 53, 20)),
        eth(&inner_udp(DN, UE, 5000, 20)),
    ];
    for f in &frames {
        for n in 14..f.len() {
            let (v, _) = run(&p, &f[..n]);
            assert!(v != XDP_ABORTED && v <= 4, "len {n}: verdict {v}");
            if n < f.len() {
                assert_ne!(v, XDP_TX, "a truncated frame {n}/{} was forwarded", f.len());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn arbitrary_gtpu_payloads_never_abort(flags in any::<u8>(), msg in any::<u8>(), body in proptest::collection::vec(any::<u8>(), 0..80)) {
        if is_root() {
            let p = plane(&bearer(FORW, open_qer()));
            let mut g = vec![flags, msg];
            g.extend_from_slice(&(body.len() as u16).to_be_bytes());
            g.extend_from_slice(&TEID.to_be_bytes());
            g.extend_from_slice(&body);
            let f = eth(&ipv4(ENB, S1U, 17, &udp(2152, 2152, &g)));
            let (v, _) = run(&p, &f);
            prop_assert!(v != XDP_ABORTED && v <= 4);
        }
    }
}

// ---- translation over MemoryMaps (no root needed) ---------------------------

#[test]
fn translation_programs_the_maps() {
    let mut p = XdpPlane::with_maps(MemoryMaps::default(), cfg()).unwrap();
    p.install(7, &bearer(FORW, Qer { mbr: Some((1000, 2000)), ..open_qer() })).unwrap();
    let m = p.maps();
    assert_eq!(m.config.s1u_addr, be_addr(S1U));
    // One PDR without SDF filter per key: the fast entries hold everything.
    assert!(m.pdr_sets.is_empty());
    let ul = m.fast(Dir::Ul, TEID).unwrap();
    assert_eq!((ul.ue_addr, ul.flags, ul.pdr_flags), (be_addr(UE), 0, PDR_F_OHR));
    assert_eq!((ul.action, ul.far_flags), (FAR_FORW, 0));
    let dl = m.fast(Dir::Dl, be_addr(UE)).unwrap();
    assert_eq!((dl.action, dl.far_flags, dl.teid, dl.peer_addr), (FAR_FORW, FAR_F_OHC, ENB_TEID, be_addr(ENB)));
    let q = m.qers[&dl.qer_idx];
    assert_eq!((q.ul_ps_per_byte, q.dl_ps_per_byte), (8_000_000, 4_000_000));
    assert_eq!(ul.urr_idx, dl.urr_idx);
    // Another session may not take the same TEID.
    assert!(p.install(8, &bearer(FORW, open_qer())).is_err());
    assert_eq!(p.install(7, &bearer(FORW, open_qer())), Err(PlaneError::Exists(7)));
    p.remove(7).unwrap();
    assert!(p.maps().fast(Dir::Ul, TEID).is_none() && p.maps().fast(Dir::Dl, be_addr(UE)).is_none());
    assert!(p.maps().fast_ref.is_empty());
    p.install(8, &bearer(FORW, open_qer())).unwrap();
    assert_eq!(p.remove(9), Err(PlaneError::NotFound(9)));
}

#[test]
fn too_many_pdrs_per_key_is_refused_and_leaves_the_old_rules() {
    let mut p = XdpPlane::with_maps(MemoryMaps::default(), cfg()).unwrap();
    let good = bearer(FORW, open_qer());
    p.install(7, &good).unwrap();
    let mut bad = good.clone();
    for i in 10..15u16 {
        bad.pdrs.insert(
            i,
            Pdr {
                id: i,
                precedence: i as u32,
                pdi: pd(INTERFACE_CORE, None, &[]),
                outer_header_removal: None,
                far_id: Some(2),
                qer_ids: vec![],
                urr_ids: vec![],
            },
        );
    }
    assert!(p.update(7, &bad).is_err());
    assert_eq!(p.maps().fast(Dir::Dl, be_addr(UE)).unwrap().flags, 0, "still the one-rule fast entry");
}

#[test]
fn sdf_filters_move_a_key_to_its_pdr_set_and_back() {
    let mut p = XdpPlane::with_maps(MemoryMaps::default(), cfg()).unwrap();
    let plain = bearer(FORW, open_qer());
    p.install(7, &plain).unwrap();
    let mut sdf = plain.clone();
    sdf.pdrs.insert(
        3,
        Pdr {
            id: 3,
            precedence: 10,
            pdi: pd(INTERFACE_CORE, None, &["permit out 17 from any to assigned 5000"]),
            outer_header_removal: None,
            far_id: Some(2),
            qer_ids: vec![],
            urr_ids: vec![],
        },
    );
    p.update(7, &sdf).unwrap();
    let m = p.maps();
    assert_eq!(m.fast(Dir::Dl, be_addr(UE)).unwrap().flags, FAST_F_SET);
    assert_eq!(m.set_of(Dir::Dl, be_addr(UE)).unwrap().count, 2);
    assert_eq!(m.fast(Dir::Ul, TEID).unwrap().flags, 0, "the uplink key stays on the fast entry");
    let set_slot = m.fast(Dir::Dl, be_addr(UE)).unwrap().set_idx().unwrap();
    // An unchanged set keeps its slot.
    p.update(7, &sdf).unwrap();
    assert_eq!(p.maps().fast(Dir::Dl, be_addr(UE)).unwrap().set_idx(), Some(set_slot));
    p.update(7, &plain).unwrap();
    assert_eq!(p.maps().set_of(Dir::Dl, be_addr(UE)), None);
    assert_eq!(p.maps().fast(Dir::Dl, be_addr(UE)).unwrap().flags, 0);
    assert_eq!(
        (p.slot_pools()[6].in_use(), p.slot_pools()[6].quarantined()),
        (0, 1),
        "the set slot waits for its grace period"
    );
    p.update(7, &sdf).unwrap();
    p.remove(7).unwrap();
    let m = p.maps();
    assert!(m.fast(Dir::Dl, be_addr(UE)).is_none() && m.fast(Dir::Ul, TEID).is_none() && m.fast_ref.is_empty());
}

#[test]
fn uplink_sdf_is_oriented_ue_first() {
    let f = crate::rules::FlowFilter::parse("permit out 17 from 192.0.2.0/24 80 to assigned 1000-2000").unwrap();
    let ul = translate::sdf_from_flow(&f, true);
    assert_eq!((ul.src_addr, ul.src_mask), (0, 0));
    assert_eq!(
        (ul.dst_addr, ul.dst_mask),
        (be_addr(Ipv4Addr::new(192, 0, 2, 0)), be_addr(Ipv4Addr::new(255, 255, 255, 0)))
    );
    assert_eq!((ul.sport_lo, ul.sport_hi, ul.dport_lo, ul.dport_hi, ul.proto), (1000, 2000, 80, 80, 17));
    assert_eq!(translate::sdf_from_flow(&f, false), ul.reversed());
}

// ---- baselines ---------------------------------------------------------------

#[test]
fn baselines_decap_encap_redirect_pass() {
    need_root!();
    let t = baseline::FixedTunnel { teid: TEID, src: S1U, dst: ENB, ifindex: 1, dmac: NH_DMAC, smac: NH_SMAC };
    let inner = inner_udp(UE, DN, 53, 30);
    let d = baseline::load_decap_min(&t).unwrap();
    let (v, out) = d.program.test_run(&ul_frame(TEID, &inner)).unwrap();
    assert_eq!(v, XDP_TX);
    assert_eq!(&out[14..], &inner[..]);
    assert_eq!(d.program.test_run(&ul_frame(TEID + 1, &inner)).unwrap().0, XDP_PASS);
    let e = baseline::load_encap_min(&t).unwrap();
    let (v, out) = e.program.test_run(&eth(&inner)).unwrap();
    assert_eq!(v, XDP_TX);
    let (teid, got) = parse_encap(&out);
    assert_eq!((teid, got), (TEID, inner.clone()));
    let r = baseline::load_redirect(&t).unwrap();
    let (v, out) = r.program.test_run(&eth(&inner)).unwrap();
    assert_eq!((v, &out[..6]), (XDP_TX, &NH_DMAC[..]));
    assert_eq!(baseline::load_pass().unwrap().test_run(&eth(&inner)).unwrap().0, XDP_PASS);
}

#[test]
fn xdp_available_probe() {
    let r = xdp_available();
    if is_root() {
        assert_eq!(r, Ok(()));
    } else {
        assert!(r.is_err());
    }
}

#[test]
fn neighbour_tables_keep_the_next_hop_cache_current() {
    use crate::rules::Neighbour;
    let mut p = XdpPlane::with_maps(MemoryMaps::default(), cfg()).unwrap();
    let enb = Neighbour { addr: ENB, ifindex: 2, mac: [2, 0, 0, 0, 0, 1], local_mac: [2, 0, 0, 0, 0, 9] };
    let dn = Neighbour {
        addr: "10.200.2.2".parse().unwrap(),
        ifindex: 3,
        mac: [2, 0, 0, 0, 0, 2],
        local_mac: [2, 0, 0, 0, 0, 8],
    };
    let gen0 = p.maps().config.memo_gen;
    p.set_neighbours(&[enb, dn]);
    let nh = p.maps().nexthops[&be_addr(ENB)];
    assert_eq!((nh.ifindex, nh.dmac, nh.smac), (2, enb.mac, enb.local_mac));
    assert_eq!(p.maps().nexthops.len(), 2);
    // The DEVMAP is left to attach(), which runs inside the data path's
    // namespace: an insert from the watcher's thread would resolve the
    // ifindex in the wrong namespace.
    assert!(p.maps().ports.is_empty());
    // The eNB's MAC changes and the DN host vanishes.
    let moved = Neighbour { mac: [2, 0, 0, 0, 0, 7], ..enb };
    p.set_neighbours(&[moved]);
    assert_eq!(p.maps().nexthops[&be_addr(ENB)].dmac, moved.mac);
    assert_eq!(p.maps().nexthops.len(), 1);
    assert!(p.maps().config.memo_gen > gen0, "per-CPU memos are invalidated");
    // Unchanged tables write nothing.
    let gen1 = p.maps().config.memo_gen;
    p.set_neighbours(&[moved]);
    assert_eq!(p.maps().config.memo_gen, gen1);
}
