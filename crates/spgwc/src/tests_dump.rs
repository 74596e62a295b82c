//! The full-state dump ([`crate::dump`]) of an S/P-GW-C and its UPF,
//! restored into a fresh pair: the same sessions, the same rules, and the
//! restored pair serves them. In memory, virtual clock, no sockets.

use crate::config::{ApnConfig, SpgwcConfig};
use crate::core::SpgwcCore;
use crate::dump::{DumpError, RestoreError, SpgwcDump};
use crate::tests::{a, created, csr, Net, MME, S1U};
use mobicore_common::counters::Counters;
use mobicore_common::s11::*;
use mobicore_common::state_dump::FrameError;
use mobicore_common::{Ebi, Fteid, PdnType, Teid};
use mobicore_upf::dump::UpfDump;
use mobicore_upf::{MemoryPlane, UpfConfig, UpfCore};
use proptest::prelude::*;
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime};

/// A dual-stack APN, so that IPv6 prefixes are dumped too.
fn cfg() -> SpgwcConfig {
    let mut apn = ApnConfig::ipv4("internet", Ipv4Addr::new(10, 44, 0, 0), 16);
    apn.ipv6_pool = Some("2001:db8:45::/48".to_string().try_into().unwrap());
    SpgwcConfig { apns: vec![apn], ..Net::cfg() }
}

/// A pair built like [`Net::with_upf`] but neither restored nor started,
/// with another PFCP Recovery Time Stamp than the source's (the dump's
/// must win, or the UPF would drop the sessions at association).
fn fresh(cfg: SpgwcConfig) -> Net {
    let plane = MemoryPlane::new();
    let upf = UpfCore::new(
        UpfConfig { s1u_addr: S1U, ..UpfConfig::default() },
        Box::new(plane.clone()),
        SystemTime::UNIX_EPOCH,
        Counters::new(),
    );
    let later = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let gw = SpgwcCore::new(cfg, Ipv4Addr::LOCALHOST, later, Counters::new());
    Net {
        gw,
        upf,
        plane,
        now: std::time::Instant::now(),
        s11_out: vec![],
        s11_dst: vec![],
        pfcp_log: vec![],
        upf_up: true,
        seq: 0,
    }
}

/// Both dumps of `n`, through their octets.
fn dump(n: &Net) -> (SpgwcDump, UpfDump) {
    let g = SpgwcDump::from_bytes(&n.gw.dump(n.now).expect("quiescent").to_bytes()).unwrap();
    let u = UpfDump::from_bytes(&n.upf.dump(n.now).to_bytes()).unwrap();
    (g, u)
}

/// A fresh pair at `src`'s time with `src`'s state, started and associated.
fn restored(src: &Net) -> Net {
    let (g, u) = dump(src);
    let mut n = fresh(src.gw.cfg.clone());
    n.now = src.now;
    n.upf.restore(n.now, u).expect("UPF restored");
    n.gw.restore(n.now, g).expect("S/P-GW-C restored");
    n.gw.start(n.now);
    n.drive();
    assert!(n.gw.upf_associated(0));
    n
}

/// The state both pairs must agree on.
fn assert_same(src: &Net, dst: &Net) {
    assert_eq!(dst.gw.sessions(), src.gw.sessions(), "S/P-GW-C sessions");
    let held = |n: &Net| {
        let h = n.gw.held();
        (h.sessions, h.by_imsi, h.by_seid, h.pool_addresses, h.s1u_teids, h.draining_seids)
    };
    assert_eq!(held(dst), held(src), "addresses, TEIDs, SEIDs held");
    assert_eq!(dst.plane.sessions(), src.plane.sessions(), "rules in the forwarding plane");
    let ups = |n: &Net| {
        let mut v: Vec<_> =
            n.upf.sessions().values().map(|s| (s.up_seid, s.cp_seid, s.node.clone(), s.rules.clone())).collect();
        v.sort_by_key(|s| s.0);
        v
    };
    assert_eq!(ups(dst), ups(src), "UPF sessions");
    let (g1, u1) = dump(src);
    let (g2, u2) = dump(dst);
    assert_eq!(g2, g1, "the restored S/P-GW-C dumps as the source");
    assert_eq!(u2.sessions, u1.sessions, "the restored UPF's sessions dump as the source's");
}

fn attach(n: &mut Net, i: u32, pdn: PdnType) -> Teid {
    let mut req = csr(i);
    req.pdn_type = pdn;
    let r = created(n.s11(&S11Request::CreateSession(req)));
    assert_eq!(r.cause, GtpCause::REQUEST_ACCEPTED);
    let sgw_teid = r.sgw_fteid.unwrap().teid;
    let enb = Fteid { teid: Teid(0xe000 + i), ipv4: Ipv4Addr::new(127, 0, 0, 9) };
    let m = n.s11(&S11Request::ModifyBearer(ModifyBearerRequest { sgw_teid, ebi: Ebi(5), s1u_enb_fteid: enb }));
    assert!(matches!(
        m,
        Some(S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, .. }))
    ));
    sgw_teid
}

#[test]
fn a_restored_pair_holds_the_same_sessions_and_serves_them() {
    let mut src = Net::new(cfg());
    let teids: Vec<Teid> =
        (1..=6).map(|i| attach(&mut src, i, if i % 2 == 0 { PdnType::Ipv4v6 } else { PdnType::Ipv4 })).collect();
    // One idle UE (downlink buffered) and one gone.
    let rab = src.s11(&S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid: teids[1] }));
    assert_eq!(rab, Some(S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED)));
    let del = src.s11(&S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: teids[2], linked_ebi: Ebi(5) }));
    assert_eq!(del, Some(S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED)));
    assert_eq!(src.gw.sessions().len(), 5);

    let mut dst = restored(&src);
    assert_same(&src, &dst);
    assert_eq!(dst.gw.counters.get("sessions_restored").load(std::sync::atomic::Ordering::Relaxed), 5);

    // The restored pair serves its sessions: the idle UE comes back...
    let enb = Fteid { teid: Teid(0xbeef), ipv4: Ipv4Addr::new(127, 0, 0, 10) };
    let m =
        dst.s11(&S11Request::ModifyBearer(ModifyBearerRequest { sgw_teid: teids[1], ebi: Ebi(5), s1u_enb_fteid: enb }));
    assert!(matches!(
        m,
        Some(S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, .. }))
    ));
    let up = dst.gw.session(teids[1]).unwrap().up_seid.unwrap();
    let far = &dst.plane.get(up).unwrap().fars[&crate::sxa_build::FAR_DOWNLINK];
    assert_eq!(far.outer_header_creation.map(|t| t.teid), Some(0xbeef));
    // ...another detaches...
    let del = dst.s11(&S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: teids[0], linked_ebi: Ebi(5) }));
    assert_eq!(del, Some(S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED)));
    assert_eq!((dst.gw.sessions().len(), dst.plane.len()), (4, 4));
    // ...and a new UE gets the address the source would have given next.
    let next_src = created(src.s11(&S11Request::CreateSession(csr(40)))).paa;
    let next_dst = created(dst.s11(&S11Request::CreateSession(csr(40)))).paa;
    assert_eq!(next_dst, next_src);
    let held: std::collections::HashSet<_> = dst.gw.sessions().values().map(|s| s.sgw_s11.teid).collect();
    assert_eq!(held.len(), 5, "no TEID handed out twice");
}

#[test]
fn a_dump_waits_for_procedures_in_flight() {
    let mut n = Net::new(cfg());
    attach(&mut n, 1, PdnType::Ipv4);
    n.upf_up = false;
    n.gw.handle_s11(
        n.now,
        a(MME),
        &mobicore_gtp::s11::encode_request(&S11Request::CreateSession(csr(2)), 99).to_bytes(),
    );
    n.drive();
    assert!(matches!(n.gw.dump(n.now), Err(DumpError::Busy { pfcp: 1, sessions: 1, .. })));
    assert!(!n.gw.quiescent());
    // The Create Session fails after N1 retransmissions: quiescent again.
    while !n.gw.quiescent() {
        n.step();
    }
    assert_eq!(n.gw.dump(n.now).unwrap().sessions.len(), 1);
}

#[test]
fn restore_refuses_what_does_not_fit_and_changes_nothing() {
    let mut src = Net::new(cfg());
    attach(&mut src, 1, PdnType::Ipv4);
    attach(&mut src, 2, PdnType::Ipv4);
    let (g, u) = dump(&src);

    let refused = |d: SpgwcDump, cfg: SpgwcConfig| {
        let mut n = fresh(cfg);
        let e = n.gw.restore(n.now, d).expect_err("refused");
        let h = n.gw.held();
        assert_eq!((h.sessions, h.by_seid, h.pool_addresses, h.s1u_teids), (0, 0, 0, 0), "nothing changed");
        e
    };
    let other_node = SpgwcConfig { node_id: Ipv4Addr::new(127, 0, 0, 99), ..cfg() };
    assert!(matches!(refused(g.clone(), other_node), RestoreError::NodeId { .. }));
    let mut d = g.clone();
    d.sessions[1].apn = "ims".into();
    assert!(matches!(refused(d, cfg()), RestoreError::UnknownApn { .. }));
    let mut d = g.clone();
    d.sessions[1].ue_ipv4 = d.sessions[0].ue_ipv4;
    assert!(matches!(refused(d, cfg()), RestoreError::Duplicate { what: "the UE IPv4 address", .. }));
    let mut d = g.clone();
    d.sessions[1].cp_seid = d.sessions[0].cp_seid;
    assert!(matches!(refused(d, cfg()), RestoreError::Duplicate { what: "the CP SEID", .. }));
    let mut d = g.clone();
    d.sessions[1].upf = 3;
    assert!(matches!(refused(d, cfg()), RestoreError::UnknownUpf { upf: 3, .. }));
    let mut d = g.clone();
    d.sessions[0].state = crate::context::SessionState::Busy;
    assert!(matches!(refused(d, cfg()), RestoreError::InFlight { .. }));
    let mut d = g.clone();
    d.pool_cursors.insert("internet".into(), (Some(u32::MAX), None));
    assert!(matches!(refused(d, cfg()), RestoreError::Cursor(_)));
    let mut d = g.clone();
    d.holds.push((0xdead, 5));
    assert!(matches!(refused(d, cfg()), RestoreError::Hold(0xdead)));

    // Only a fresh gateway that has not started.
    let mut n = fresh(cfg());
    n.gw.start(n.now);
    assert_eq!(n.gw.restore(n.now, g.clone()), Err(RestoreError::Started));
    let mut n = fresh(cfg());
    n.gw.restore(n.now, g.clone()).unwrap();
    assert_eq!(n.gw.restore(n.now, g.clone()), Err(RestoreError::NotFresh(2)));

    // The UPF too: another Node ID, a CP function it does not allow, twice.
    let mut n = fresh(cfg());
    let mut d = u.clone();
    d.node_id = Ipv4Addr::new(127, 0, 0, 98);
    assert!(matches!(n.upf.restore(n.now, d), Err(mobicore_upf::dump::RestoreError::NodeId { .. })));
    let mut d = u.clone();
    d.associations[0].peer = "192.0.2.1:8805".parse().unwrap();
    assert!(matches!(n.upf.restore(n.now, d), Err(mobicore_upf::dump::RestoreError::UnknownPeer(_))));
    let mut d = u.clone();
    d.sessions[1].up_seid = d.sessions[0].up_seid;
    assert!(matches!(n.upf.restore(n.now, d), Err(mobicore_upf::dump::RestoreError::Seid(_))));
    assert!(n.upf.sessions().is_empty() && n.upf.associations().is_empty() && n.plane.is_empty());
    n.upf.restore(n.now, u.clone()).unwrap();
    assert!(matches!(n.upf.restore(n.now, u), Err(mobicore_upf::dump::RestoreError::NotFresh { .. })));
}

#[test]
fn damaged_dumps_are_refused_with_a_reason() {
    let mut src = Net::new(cfg());
    attach(&mut src, 1, PdnType::Ipv4v6);
    let g = src.gw.dump(src.now).unwrap().to_bytes();
    let u = src.upf.dump(src.now).to_bytes();
    for n in 0..g.len() {
        assert!(SpgwcDump::from_bytes(&g[..n]).is_err(), "truncated to {n}");
    }
    for n in 0..u.len() {
        assert!(UpfDump::from_bytes(&u[..n]).is_err(), "truncated to {n}");
    }
    assert!(matches!(SpgwcDump::from_bytes(&u), Err(FrameError::Kind { .. })), "a UPF dump is not an S/P-GW-C dump");
    let mut bad = g.clone();
    let last = bad.len() - 2;
    bad[last] ^= 0x20;
    assert!(matches!(SpgwcDump::from_bytes(&bad), Err(FrameError::Checksum { .. })));
    assert_eq!(
        SpgwcDump::from_bytes(b"MCSD").unwrap_err().to_string(),
        "dump truncated: 4 octets, the header needs 16"
    );
}

/// Random bytes, and random damage to a real dump, never panic the decoders.
mod damage {
    use super::*;
    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(0x64756d70), ..ProptestConfig::default() })]
        #[test]
        fn any_octets_decode_or_fail_cleanly(b in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = SpgwcDump::from_bytes(&b);
            let _ = UpfDump::from_bytes(&b);
            let mut framed = mobicore_common::state_dump::MAGIC.to_vec();
            framed.extend_from_slice(&b);
            let _ = SpgwcDump::from_bytes(&framed);
        }
    }
}

/// What a proptest case does to the source pair before it is dumped.
#[derive(Debug, Clone)]
enum Step {
    Attach(PdnType),
    Idle(usize),
    Detach(usize),
    Handover(usize),
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => prop_oneof![Just(PdnType::Ipv4), Just(PdnType::Ipv4v6), Just(PdnType::Ipv6)].prop_map(Step::Attach),
        1 => any::<usize>().prop_map(Step::Idle),
        1 => any::<usize>().prop_map(Step::Detach),
        1 => any::<usize>().prop_map(Step::Handover),
        1 => (0u64..120).prop_map(Step::Wait),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, rng_seed: proptest::test_runner::RngSeed::Fixed(0x52414d), ..ProptestConfig::default() })]
    /// Any state the procedures reach dumps, restores into a fresh pair,
    /// and dumps again identically.
    #[test]
    fn dump_restore_round_trip(steps in proptest::collection::vec(step(), 1..24)) {
        let mut src = Net::new(SpgwcConfig { usage_period_secs: 30, ..cfg() });
        let mut ues: Vec<Teid> = vec![];
        for (i, s) in steps.into_iter().enumerate() {
            let pick = |k: usize, ues: &[Teid]| (!ues.is_empty()).then(|| ues[k % ues.len()]);
            match s {
                Step::Attach(pdn) => ues.push(attach(&mut src, 100 + i as u32, pdn)),
                Step::Idle(k) => if let Some(t) = pick(k, &ues) {
                    src.s11(&S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid: t }));
                },
                Step::Detach(k) => if let Some(t) = pick(k, &ues) {
                    src.s11(&S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: t, linked_ebi: Ebi(5) }));
                    ues.retain(|u| *u != t);
                },
                Step::Handover(k) => if let Some(t) = pick(k, &ues) {
                    let enb = Fteid { teid: Teid(0x7000 + i as u32), ipv4: Ipv4Addr::new(127, 0, 0, 11) };
                    src.s11(&S11Request::ModifyBearer(ModifyBearerRequest { sgw_teid: t, ebi: Ebi(5), s1u_enb_fteid: enb }));
                },
                Step::Wait(secs) => {
                    let until = src.now + Duration::from_secs(secs);
                    while src.gw.poll_timeout().is_some_and(|t| t <= until) || src.upf.poll_timeout().is_some_and(|t| t <= until) {
                        let t = [src.gw.poll_timeout(), src.upf.poll_timeout()].into_iter().flatten().min().unwrap();
                        src.now = t;
                        src.gw.handle_timeout(t);
                        src.upf.handle_timeout(t);
                        src.drive();
                    }
                    src.now = until;
                }
            }
        }
        prop_assume!(src.gw.quiescent());
        let dst = restored(&src);
        assert_same(&src, &dst);
    }
}
