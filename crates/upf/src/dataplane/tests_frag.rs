//! Sans-I/O tests of fragments (the fragment table for port-based SDF
//! filters), the S1-U MTU (inner fragmentation, ICMP Fragmentation
//! Needed) and DUPL copies in the data path.

use super::ipv4::{self, udp_packet};
use super::tests::{pd, pdr, ENB, S1U};
use super::*;
use crate::rules::{Action, Duplicate, Far};
use mobicore_common::inet::checksum;
use mobicore_gtp::gtpu::{self, Body};
use proptest::prelude::*;
use std::time::Duration;

const UE: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 2);
const UE2: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 3);
const DN: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const LI: Ipv4Addr = Ipv4Addr::new(172, 16, 9, 9);
const FORW: Action = Action { drop: false, forw: true, buff: false, nocp: false, dupl: false };

fn far_to(id: u32, action: Action, teid: u32) -> Far {
    Far {
        id,
        action,
        destination_interface: Some(INTERFACE_ACCESS),
        outer_header_creation: Some(GtpuTunnel { teid, ipv4: ENB }),
        ..Far::default()
    }
}

/// Downlink: PDR 10 (precedence 10) for UDP from port 5000 -> TEID
/// `base + 0xA`; PDR 20 (precedence 100, no filter) -> TEID `base + 0xB`.
/// Uplink: TEID `ul_teid`, PDR 30 for UDP to port 5000 -> core copy TEID
/// `base + 0xC` (via GTP-U, so it can be told apart), PDR 40 otherwise to
/// the core.
fn filtered(ue: Ipv4Addr, ul_teid: u32, base: u32) -> SessionRules {
    let mut r = SessionRules::default();
    r.pdrs.insert(10, pdr(10, 10, pd(INTERFACE_CORE, None, ue, &["permit out 17 from any 5000 to assigned"]), 10));
    r.pdrs.insert(20, pdr(20, 100, pd(INTERFACE_CORE, None, ue, &[]), 20));
    r.pdrs.insert(
        30,
        pdr(30, 10, pd(INTERFACE_ACCESS, Some(ul_teid), ue, &["permit out 17 from any 5000 to assigned"]), 30),
    );
    r.pdrs.insert(40, pdr(40, 100, pd(INTERFACE_ACCESS, Some(ul_teid), ue, &[]), 40));
    r.fars.insert(10, far_to(10, FORW, base + 0xA));
    r.fars.insert(20, far_to(20, FORW, base + 0xB));
    r.fars.insert(30, far_to(30, FORW, base + 0xC));
    r.fars.insert(40, Far { id: 40, action: FORW, destination_interface: Some(INTERFACE_CORE), ..Far::default() });
    r
}

fn plane_with(cfg: DatapathConfig) -> UserPlane {
    UserPlane::new(DatapathConfig { s1u_addr: S1U, ..cfg }, Counters::new())
}

fn drain(p: &mut UserPlane) -> Vec<Transmit> {
    std::iter::from_fn(|| p.poll_transmit()).collect()
}

/// (TEID, inner packet) of each G-PDU sent.
fn gpdus(out: &[Transmit]) -> Vec<(u32, Vec<u8>)> {
    out.iter()
        .map(|t| {
            let (Transmit::Gtpu { bytes, .. } | Transmit::GtpuMarked { bytes, .. }) = t else { panic!("{t:?}") };
            let r = gtpu::parse(bytes).unwrap();
            let Body::GPdu(ip) = r.body else { panic!() };
            (r.header.teid, ip.to_vec())
        })
        .collect()
}

/// A UDP packet with Identification `id`, cut into fragments of at most
/// `mtu` octets.
fn fragments(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    id: u16,
    payload: &[u8],
    mtu: usize,
) -> Vec<Vec<u8>> {
    let mut p = udp_packet(src, dst, sport, dport, payload);
    p[4..6].copy_from_slice(&id.to_be_bytes());
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    ipv4::fragment(&p, mtu).unwrap()
}

#[test]
fn later_fragments_follow_the_first_ones_pdr_in_any_order() {
    let now = Instant::now();
    let mut p = plane_with(DatapathConfig::default());
    p.install(1, &filtered(UE, 0x100, 0x1000)).unwrap();
    let f = fragments(DN, UE, 5000, 4000, 7, &[0x5a; 1000], 300);
    assert_eq!(f.len(), 4);
    // Without the table the later fragments would match PDR 20 (no ports).
    for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]] {
        let mut p = plane_with(DatapathConfig::default());
        p.install(1, &filtered(UE, 0x100, 0x1000)).unwrap();
        for i in order {
            p.downlink(now, &f[i]);
        }
        let out = gpdus(&drain(&mut p));
        assert_eq!(out.len(), 4, "{order:?}");
        assert!(out.iter().all(|(t, _)| *t == 0x100A), "{order:?}");
        // The first fragment goes first, then the held ones in arrival order.
        let first = order.iter().position(|&i| i == 0).unwrap();
        let mut expect: Vec<usize> = vec![0];
        expect.extend(order[..first].iter().copied());
        expect.extend(order[first + 1..].iter().copied());
        let got: Vec<Vec<u8>> = out.into_iter().map(|(_, b)| b).collect();
        assert_eq!(got, expect.iter().map(|&i| f[i].clone()).collect::<Vec<_>>(), "unchanged, {order:?}");
        assert_eq!(p.fragments_held(1).0, defrag::ENTRY_COST, "only the decision is left");
    }
    // Another port: the whole packet goes to PDR 20.
    let g = fragments(DN, UE, 6000, 4000, 8, &[1; 1000], 300);
    for x in g.iter().rev() {
        p.downlink(now, x);
    }
    assert!(gpdus(&drain(&mut p)).iter().all(|(t, _)| *t == 0x100B));
}

#[test]
fn uplink_fragments_follow_the_first_one_too() {
    let now = Instant::now();
    let mut p = plane_with(DatapathConfig::default());
    p.install(1, &filtered(UE, 0x100, 0x1000)).unwrap();
    let f = fragments(UE, DN, 4000, 5000, 9, &[3; 600], 300);
    for x in f.iter().rev() {
        let g = gtpu::gpdu(0x100, x);
        p.uplink(now, SocketAddrV4::new(ENB, 2152), &g);
    }
    let out = gpdus(&drain(&mut p));
    assert_eq!(out.len(), f.len());
    assert!(out.iter().all(|(t, _)| *t == 0x100C), "{out:?}");
}

#[test]
fn held_fragments_time_out_and_sessions_without_port_filters_skip_the_table() {
    let t0 = Instant::now();
    let mut p = plane_with(DatapathConfig::default());
    p.install(1, &filtered(UE, 0x100, 0x1000)).unwrap();
    let f = fragments(DN, UE, 5000, 4000, 7, &[0x5a; 1000], 300);
    assert_eq!(p.downlink(t0, &f[2]), Verdict::Held);
    assert_eq!(p.poll_timeout(), Some(t0 + Duration::from_secs(2)));
    p.handle_timeout(t0 + Duration::from_millis(1999));
    assert_eq!(p.counters.value("upf_frag_timeout"), 0);
    p.handle_timeout(t0 + Duration::from_secs(2));
    assert_eq!(p.counters.value("upf_frag_timeout"), 1);
    assert_eq!(p.fragments_held(1), (0, 0));
    assert!(drain(&mut p).is_empty());
    // Removing a session drops what it held.
    assert_eq!(p.downlink(t0, &f[2]), Verdict::Held);
    p.remove(1).unwrap();
    assert_eq!((p.fragments_held(1), p.counters.value("upf_frag_discarded")), ((0, 0), 1));
    // No port filter: fragments are forwarded at once, no table.
    let mut r = filtered(UE, 0x100, 0x1000);
    r.pdrs.retain(|id, _| *id == 20 || *id == 40);
    p.install(2, &r).unwrap();
    assert_eq!(p.downlink(t0, &f[3]), Verdict::Forwarded);
    assert_eq!(p.fragments_held(2), (0, 0));
}

/// `f` moved to fragment offset `offset` (in 8-octet units), header
/// checksum recomputed.
fn at_offset(f: &[u8], offset: u16) -> Vec<u8> {
    let mut p = f.to_vec();
    p[6..8].copy_from_slice(&(0x2000 | offset).to_be_bytes());
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

#[test]
fn fragments_that_would_end_beyond_65535_octets_are_dropped_without_port_filters_too() {
    let now = Instant::now();
    let mut p = plane_with(DatapathConfig::default());
    let mut r = filtered(UE, 0x100, 0x1000);
    r.pdrs.retain(|id, _| *id == 20 || *id == 40);
    p.install(1, &r).unwrap();
    let dl = fragments(DN, UE, 5000, 4000, 7, &[0x5a; 1000], 300);
    let ul = fragments(UE, DN, 4000, 5000, 8, &[0x5a; 1000], 300);
    // The last data octet of offset 8189 x 8 with 280 octets lies past 65535.
    let (dl_bad, ul_bad) = (at_offset(&dl[1], 8189), at_offset(&ul[1], 8189));
    assert_eq!(p.downlink(now, &dl_bad), Verdict::Dropped(DropReason::FragOutOfRange));
    let enb = SocketAddrV4::new(ENB, 2152);
    assert_eq!(p.uplink(now, enb, &gtpu::gpdu(0x100, &ul_bad)), Verdict::Dropped(DropReason::FragOutOfRange));
    assert_eq!(p.counters.value("upf_frag_offset_out_of_range"), 2);
    assert!(drain(&mut p).is_empty());
    // In range, the same fragments go through.
    assert_eq!(p.downlink(now, &at_offset(&dl[1], 100)), Verdict::Forwarded);
    assert_eq!(p.uplink(now, enb, &gtpu::gpdu(0x100, &at_offset(&ul[1], 100))), Verdict::Forwarded);
}

#[test]
fn a_flood_of_orphan_fragments_stays_within_budget() {
    let now = Instant::now();
    let cfg = DatapathConfig { frag_session_bytes: 4000, frag_total_bytes: 6000, ..DatapathConfig::default() };
    let mut p = plane_with(cfg);
    p.install(1, &filtered(UE, 0x100, 0x1000)).unwrap();
    p.install(2, &filtered(UE2, 0x200, 0x2000)).unwrap();
    for id in 0..500u16 {
        for (ue, _) in [(UE, 1), (UE2, 2)] {
            let f = fragments(DN, ue, 5000, 4000, id, &[0; 400], 300);
            p.downlink(now, &f[1]);
            assert!(p.fragments_held(1).0 <= 4000 && p.fragments_held(2).0 <= 4000);
            assert!(p.fragments_held(1).1 <= 6000);
        }
    }
    assert!(p.counters.value("upf_frag_overflow") > 900);
    assert!(p.counters.value("upf_frag_held") > 0);
    // What session 2 held before the budget ran out still goes out with
    // its first fragment, under session 2's PDR.
    let f = fragments(DN, UE2, 5000, 4000, 0, &[0; 400], 300);
    assert_eq!(p.downlink(now, &f[0]), Verdict::Forwarded);
    assert_eq!(gpdus(&drain(&mut p)), vec![(0x200A, f[0].clone()), (0x200A, f[1].clone())]);
}

/// Every order of a packet's fragments, interleaved with another
/// session's, is forwarded under the PDR the whole packet matches, and
/// nothing crosses sessions.
fn check_orders(order1: &[usize], order2: &[usize], sport: u16, len: usize) {
    let now = Instant::now();
    let mut p = plane_with(DatapathConfig::default());
    p.install(1, &filtered(UE, 0x100, 0x1000)).unwrap();
    p.install(2, &filtered(UE2, 0x200, 0x2000)).unwrap();
    // The unfragmented packet's PDR, seen through its TEID.
    p.downlink(now, &udp_packet(DN, UE, sport, 4000, &vec![1; len]));
    let whole = gpdus(&drain(&mut p))[0].0;
    // Same key (src, dst differ per session, same ID) in both sessions.
    let f1 = fragments(DN, UE, sport, 4000, 42, &vec![1; len], 200);
    let f2 = fragments(DN, UE2, 5000, 4000, 42, &vec![2; len], 200);
    let (mut a, mut b) = (order1.iter().map(|i| i % f1.len()), order2.iter().map(|i| i % f2.len()));
    let mut sent = (vec![], vec![]);
    loop {
        let (x, y) = (a.next(), b.next());
        if x.is_none() && y.is_none() {
            break;
        }
        if let Some(i) = x.filter(|i| !sent.0.contains(i)) {
            p.downlink(now, &f1[i]);
            sent.0.push(i);
        }
        if let Some(i) = y.filter(|i| !sent.1.contains(i)) {
            p.downlink(now, &f2[i]);
            sent.1.push(i);
        }
    }
    let out = gpdus(&drain(&mut p));
    let s1: Vec<_> = out.iter().filter(|(_, b)| f1.contains(b)).collect();
    let s2: Vec<_> = out.iter().filter(|(_, b)| f2.contains(b)).collect();
    assert_eq!(s1.len() + s2.len(), out.len());
    let first_sent = |s: &Vec<usize>| s.contains(&0);
    if first_sent(&sent.0) {
        assert_eq!(s1.len(), sent.0.len());
        assert!(s1.iter().all(|(t, _)| *t == whole), "{s1:?} vs {whole:#x}");
    } else {
        assert!(s1.is_empty(), "held until the first fragment");
    }
    if first_sent(&sent.1) {
        assert_eq!(s2.len(), sent.1.len());
        assert!(s2.iter().all(|(t, _)| *t == 0x200A));
    } else {
        assert!(s2.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn fragment_orders_keep_the_pdr_and_the_session(
        order1 in proptest::collection::vec(0usize..16, 0..20),
        order2 in proptest::collection::vec(0usize..16, 0..20),
        sport in prop_oneof![Just(5000u16), Just(6000u16)],
        len in 200usize..1500,
    ) {
        check_orders(&order1, &order2, sport, len);
    }

    #[test]
    fn fragment_never_panics_and_fragments_fit(b in proptest::collection::vec(any::<u8>(), 0..200), mtu in 0usize..200) {
        if let Some(fs) = ipv4::fragment(&b, mtu) {
            for f in fs {
                prop_assert!(f.len() <= mtu.max(28));
                prop_assert_eq!(checksum(&f[..((f[0] & 0x0f) as usize * 4)]), 0);
            }
        }
        let _ = ipv4::icmp_frag_needed(S1U, &b, 1400);
    }
}

/// A downlink packet of `len` octets with DF set or clear.
fn big(len: usize, df: bool) -> Vec<u8> {
    big_from(DN, UE, len, df)
}

fn big_from(src: Ipv4Addr, dst: Ipv4Addr, len: usize, df: bool) -> Vec<u8> {
    let mut p = udp_packet(src, dst, 5000, 4000, &(0..len - 28).map(|i| i as u8).collect::<Vec<_>>());
    p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    p[6] = if df { 0x40 } else { 0 };
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

fn one_bearer() -> SessionRules {
    let mut r = SessionRules::default();
    r.pdrs.insert(2, pdr(2, 100, pd(INTERFACE_CORE, None, UE, &[]), 2));
    r.fars.insert(2, far_to(2, FORW, 0x900));
    r
}

#[test]
fn oversize_downlink_is_fragmented_inside_the_tunnel() {
    let now = Instant::now();
    let mut p = plane_with(DatapathConfig { s1u_mtu: 600, ..DatapathConfig::default() });
    p.install(1, &one_bearer()).unwrap();
    // 564 octets fit exactly (600 - 36): not fragmented.
    p.downlink(now, &big(564, false));
    assert_eq!(gpdus(&drain(&mut p)).len(), 1);
    let orig = big(1400, false);
    assert_eq!(p.downlink(now, &orig), Verdict::Forwarded);
    let out = drain(&mut p);
    for t in &out {
        let Transmit::Gtpu { bytes, .. } = t else { panic!() };
        assert!(bytes.len() + 28 <= 600, "outer packet within the MTU");
    }
    let frags: Vec<Vec<u8>> = gpdus(&out)
        .into_iter()
        .map(|(t, f)| {
            assert_eq!(t, 0x900);
            f
        })
        .collect();
    // (564 - 20) / 8 * 8 = 544 data octets per fragment: 1380 = 544 + 544 + 292.
    assert_eq!(frags.iter().map(|f| f.len()).collect::<Vec<_>>(), vec![564, 564, 312]);
    let mut data = vec![];
    for (i, f) in frags.iter().enumerate() {
        assert_eq!(checksum(&f[..20]), 0, "header checksum of fragment {i}");
        assert_eq!(u16::from_be_bytes([f[2], f[3]]) as usize, f.len(), "total length");
        assert_eq!(f[4..6], orig[4..6], "same Identification");
        let word = u16::from_be_bytes([f[6], f[7]]);
        assert_eq!((word & 0x1fff) as usize * 8, i * 544, "offset");
        assert_eq!(word & 0x2000 != 0, i < 2, "MF on all but the last");
        assert_eq!(word & 0x4000, 0);
        assert_eq!((f[9], &f[12..20]), (orig[9], &orig[12..20]));
        data.extend_from_slice(&f[20..]);
    }
    assert_eq!(data, orig[20..], "the fragments carry the packet");
    assert_eq!(p.counters.value("upf_dl_fragmented"), 1);
}

#[test]
fn fragments_copy_only_copied_options() {
    // IHL 7: Record Route (7, not copied, 7 octets) + Security-like copied
    // option 0x82 len 4 + End of List padding... kept in 8 octets.
    let mut p = vec![0u8; 28 + 100];
    p[0] = 0x47;
    p[2..4].copy_from_slice(&128u16.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&DN.octets());
    p[16..20].copy_from_slice(&UE.octets());
    p[20..28].copy_from_slice(&[0x82, 4, 0xaa, 0xbb, 0x07, 3, 4, 0]);
    let c = checksum(&p[..28]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let f = ipv4::fragment(&p, 28 + 48).unwrap();
    assert_eq!(f[0][0], 0x47);
    assert_eq!(&f[0][20..28], &p[20..28]);
    assert_eq!(f[1][0], 0x46, "IHL 6: the copied option alone");
    assert_eq!(&f[1][20..24], &[0x82, 4, 0xaa, 0xbb]);
    let data: Vec<u8> = f.iter().enumerate().flat_map(|(i, x)| x[if i == 0 { 28 } else { 24 }..].to_vec()).collect();
    assert_eq!(data, p[28..]);
    for x in &f {
        let ihl = (x[0] & 0x0f) as usize * 4;
        assert_eq!(checksum(&x[..ihl]), 0);
    }
}

#[test]
fn oversize_with_df_gets_icmp_fragmentation_needed_rate_limited() {
    let now = Instant::now();
    let mut p = plane_with(DatapathConfig { s1u_mtu: 600, error_indications_per_sec: 2, ..DatapathConfig::default() });
    p.install(1, &one_bearer()).unwrap();
    let orig = big(1000, true);
    assert_eq!(p.downlink(now, &orig), Verdict::Dropped(DropReason::TooBig));
    let out = drain(&mut p);
    let [Transmit::Core(icmp)] = &out[..] else { panic!("{out:?}") };
    assert_eq!(icmp.len(), 20 + 8 + 28);
    assert_eq!(checksum(&icmp[..20]), 0, "IPv4 header checksum");
    assert_eq!(u16::from_be_bytes([icmp[2], icmp[3]]) as usize, icmp.len());
    assert_eq!((icmp[9], &icmp[12..16], &icmp[16..20]), (1, &S1U.octets()[..], &DN.octets()[..]));
    assert_eq!((icmp[20], icmp[21]), (3, 4), "Destination Unreachable, Fragmentation Needed");
    assert_eq!(checksum(&icmp[20..]), 0, "ICMP checksum");
    assert_eq!(u16::from_be_bytes([icmp[26], icmp[27]]), 564, "next-hop MTU");
    assert_eq!(&icmp[28..], &orig[..28], "quoted IP header and 64 bits of data");
    assert_eq!(p.counters.value("upf_icmp_frag_needed"), 1);
    // Rate limit: the bucket holds 2.
    p.downlink(now, &orig);
    p.downlink(now, &orig);
    assert_eq!(drain(&mut p).len(), 1);
    assert_eq!((p.counters.value("upf_icmp_frag_needed"), p.counters.value("upf_icmp_suppressed")), (2, 1));
    assert_eq!(p.counters.value("upf_too_big"), 3);
    // No ICMP about an ICMP error.
    let err = ipv4::icmp_frag_needed(S1U, &orig, 500).unwrap();
    assert_eq!(ipv4::icmp_frag_needed(S1U, &err, 500), None);
}

#[test]
fn dupl_copies_forwarded_dropped_and_buffered_packets_once() {
    let now = Instant::now();
    let mut p = plane_with(DatapathConfig::default());
    let copy = Duplicate {
        destination_interface: 4,
        outer_header_creation: Some(GtpuTunnel { teid: 0x77, ipv4: LI }),
        tos: Some(0xb8),
        forwarding_policy: None,
    };
    let mut r = one_bearer();
    r.fars.get_mut(&2).unwrap().action.dupl = true;
    r.fars.get_mut(&2).unwrap().duplicating = vec![copy.clone()];
    assert_eq!(r.check(), Ok(()));
    p.install(1, &r).unwrap();
    let pkt = udp_packet(DN, UE, 5000, 4000, b"x");
    assert_eq!(p.downlink(now, &pkt), Verdict::Forwarded);
    let out = drain(&mut p);
    assert!(
        matches!(&out[..], [Transmit::GtpuMarked { to, tos: 0xb8, .. }, Transmit::Gtpu { .. }] if *to.ip() == LI),
        "{out:?}"
    );
    assert_eq!(gpdus(&out), vec![(0x77, pkt.clone()), (0x900, pkt.clone())]);
    // DROP + DUPL: the copy only.
    r.fars.get_mut(&2).unwrap().action = Action { drop: true, dupl: true, ..Action::default() };
    p.update(now, 1, &r).unwrap();
    drain(&mut p);
    assert_eq!(p.downlink(now, &pkt), Verdict::Dropped(DropReason::FarDrop));
    assert_eq!(gpdus(&drain(&mut p)), vec![(0x77, pkt.clone())]);
    // BUFF + DUPL: copied on arrival, not again on release.
    r.fars.get_mut(&2).unwrap().action = Action { buff: true, dupl: true, ..Action::default() };
    p.update(now, 1, &r).unwrap();
    assert_eq!(p.downlink(now, &pkt), Verdict::Buffered);
    assert_eq!(gpdus(&drain(&mut p)), vec![(0x77, pkt.clone())]);
    r.fars.get_mut(&2).unwrap().action = FORW;
    p.update(now, 1, &r).unwrap();
    assert_eq!(gpdus(&drain(&mut p)), vec![(0x900, pkt.clone())]);
    assert_eq!(p.counters.value("upf_duplicated"), 3);
    // DUPL without Duplicating Parameters is a rule error of the FAR.
    r.fars.get_mut(&2).unwrap().action.dupl = true;
    r.fars.get_mut(&2).unwrap().duplicating.clear();
    assert_eq!(
        r.check(),
        Err(crate::rules::RuleError::ConditionalIeMissing(rs_pfcp::ie::IeType::DuplicatingParameters as u16))
    );
}

/// Uplink forwarded in GTP-U (an N9/S5-U peer, as in local breakout to an
/// edge gateway): the GTP-U MTU holds too. A non-DF packet is fragmented
/// inside the tunnel; a DF one is answered with ICMP Fragmentation Needed
/// to the UE, through the session's downlink tunnel.
#[test]
fn oversize_uplink_is_fragmented_or_answered_to_the_ue() {
    let now = Instant::now();
    let peer = Ipv4Addr::new(172, 16, 7, 7);
    let mut p = plane_with(DatapathConfig { s1u_mtu: 600, ..DatapathConfig::default() });
    let mut r = one_bearer();
    r.pdrs.insert(1, pdr(1, 100, pd(INTERFACE_ACCESS, Some(0x100), UE, &[]), 1));
    r.fars.insert(
        1,
        Far {
            id: 1,
            action: FORW,
            destination_interface: Some(INTERFACE_CORE),
            outer_header_creation: Some(GtpuTunnel { teid: 0x700, ipv4: peer }),
            ..Far::default()
        },
    );
    p.install(1, &r).unwrap();
    let up = |df: bool| big_from(UE, DN, 1000, df);
    let enb = SocketAddrV4::new(ENB, gtpu::PORT);
    assert_eq!(p.uplink(now, enb, &gtpu::gpdu(0x100, &up(false))), Verdict::Forwarded);
    let out = drain(&mut p);
    assert!(
        out.iter().all(|t| matches!(t, Transmit::Gtpu { to, bytes } if *to.ip() == peer && bytes.len() + 28 <= 600)),
        "{out:?}"
    );
    let frags = gpdus(&out);
    assert_eq!(frags.len(), 2);
    assert_eq!(frags.iter().map(|f| f.1.len() - 20).sum::<usize>(), 980, "every octet of the payload");
    assert_eq!(p.counters.value("upf_ul_fragmented"), 1);

    let orig = up(true);
    assert_eq!(p.uplink(now, enb, &gtpu::gpdu(0x100, &orig)), Verdict::Dropped(DropReason::TooBig));
    let out = drain(&mut p);
    let [Transmit::Gtpu { to, .. }] = &out[..] else { panic!("{out:?}") };
    assert_eq!(*to.ip(), ENB, "back through the downlink tunnel");
    let [(0x900, icmp)] = &gpdus(&out)[..] else { panic!("{out:?}") };
    assert_eq!((&icmp[12..16], &icmp[16..20]), (&S1U.octets()[..], &UE.octets()[..]));
    assert_eq!((icmp[20], icmp[21], u16::from_be_bytes([icmp[26], icmp[27]])), (3, 4, 564));
    assert_eq!(&icmp[28..], &orig[..28]);
    assert_eq!(p.counters.value("upf_icmp_frag_needed"), 1);
}

/// An oversize copy: in inner fragments within the MTU, each marked like
/// the copy; with DF set it goes whole (a copy is not refused back).
#[test]
fn dupl_copies_keep_to_the_gtpu_mtu() {
    let now = Instant::now();
    let mut p = plane_with(DatapathConfig { s1u_mtu: 600, ..DatapathConfig::default() });
    let copy = Duplicate {
        destination_interface: 4,
        outer_header_creation: Some(GtpuTunnel { teid: 0x77, ipv4: LI }),
        tos: Some(0xb8),
        forwarding_policy: None,
    };
    let mut r = one_bearer();
    r.fars.get_mut(&2).unwrap().action = Action { drop: true, dupl: true, ..Action::default() };
    r.fars.get_mut(&2).unwrap().duplicating = vec![copy];
    p.install(1, &r).unwrap();
    let orig = big(1400, false);
    assert_eq!(p.downlink(now, &orig), Verdict::Dropped(DropReason::FarDrop));
    let out = drain(&mut p);
    assert!(
        out.iter().all(
            |t| matches!(t, Transmit::GtpuMarked { to, tos: 0xb8, bytes } if *to.ip() == LI && bytes.len() + 28 <= 600)
        ),
        "{out:?}"
    );
    let frags = gpdus(&out);
    assert_eq!(frags.len(), 3);
    assert_eq!(frags.iter().map(|f| f.1.len() - 20).sum::<usize>(), 1380);
    let df = big(1400, true);
    p.downlink(now, &df);
    assert_eq!(gpdus(&drain(&mut p)), vec![(0x77, df)]);
    assert_eq!((p.counters.value("upf_duplicated"), p.counters.value("upf_dupl_outer_fragmented")), (2, 1));
    assert_eq!(p.counters.value("upf_icmp_frag_needed"), 0, "no ICMP about a copy");
}
