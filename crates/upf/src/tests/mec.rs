//! MEC router sessions on the PFCP node (sans-I/O, the memory plane):
//! traffic rules and UE tunnels established / modified / deleted; bad
//! input gets the cause TS 29.244 7.2.2.4.2 gives and changes nothing.

use super::*;
use crate::config::UpfRole;
use crate::{ForwardingPlane, SessionRules};
use mobicore_pfcp::mec::{
    create_ies, deletion_request, establishment_request, modification_request, pdr_count, Application, MecRule,
    MecSession, RuleAction, Slice, TrafficFilter, UeTunnel,
};
use rs_pfcp::ie::failed_rule_id::FailedRuleId;

const CP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn mec() -> UpfConfig {
    UpfConfig { role: UpfRole::Mec, ..UpfConfig::default() }
}

fn rule(priority: u8, dst: Ipv4Addr, action: RuleAction) -> MecSession {
    MecSession::Rule(MecRule {
        slice: Slice { interface: "s1u0".into(), vlan: 100 },
        flow: true,
        priority,
        filters: vec![TrafficFilter { dst: Some((dst, 32)), protocol: Some(6), ..TrafficFilter::default() }],
        action,
    })
}

fn decap(priority: u8, dst: u8) -> MecSession {
    let app = Application { mac: [2, 0, 0, 0, 0, 9], interface: "mec0".into() };
    rule(priority, Ipv4Addr::new(192, 0, 2, dst), RuleAction::ForwardDecapsulated(app))
}

fn ue(n: u8) -> MecSession {
    MecSession::Ue(UeTunnel {
        ue: Ipv4Addr::new(10, 45, 0, n),
        enb: Ipv4Addr::new(10, 1, 0, 2),
        teid: 0x2000 + u32::from(n),
        origin: Ipv4Addr::new(10, 2, 0, 2),
    })
}

impl Harness {
    fn mec_seq(&mut self) -> u32 {
        self.seq += 1;
        self.seq
    }
    fn establish_mec(&mut self, cp_seid: u64, s: &MecSession) -> Vec<Ie> {
        let seq = self.mec_seq();
        let (h, ies) = self.raw(&establishment_request(seq, CP, cp_seid, CP, s)).expect("an answer");
        assert_eq!((h.msg_type, h.seid), (msg::SESSION_ESTABLISHMENT_RESPONSE, Some(cp_seid)));
        ies
    }
    fn modify_mec(&mut self, up_seid: u64, old: &MecSession, s: &MecSession) -> Vec<Ie> {
        let seq = self.mec_seq();
        self.raw(&modification_request(seq, up_seid, pdr_count(old), s)).expect("an answer").1
    }
}

fn failed_rule(ies: &[Ie]) -> Option<u32> {
    first(ies, IeType::FailedRuleId).map(|f| FailedRuleId::unmarshal(&f.payload).unwrap().rule_id())
}

#[test]
fn mec_sessions_are_established_modified_and_deleted() {
    let mut h = Harness::with(mec());
    h.associate();
    let a = h.establish_mec(1, &decap(10, 10));
    assert_eq!(cause(&a), 1);
    let sa = up_seid(&a);
    // Overlapping, at another priority: allowed (the priority decides).
    let b = h.establish_mec(2, &rule(20, Ipv4Addr::new(192, 0, 2, 10), RuleAction::Drop));
    assert_eq!(cause(&b), 1);
    let t = h.establish_mec(3, &ue(2));
    assert_eq!(cause(&t), 1);
    let st = up_seid(&t);
    assert_eq!(h.plane.mec().len(), 3);
    assert!(h.plane.is_empty(), "no anchor rules");
    // A modification replaces the rule.
    let moved = decap(10, 11);
    assert_eq!(cause(&h.modify_mec(sa, &decap(10, 10), &moved)), 1);
    assert_eq!(h.plane.mec()[&sa], moved);
    // The UE's eNB changes (an S11 Modify Bearer the controller relayed).
    let MecSession::Ue(u) = ue(2) else { unreachable!() };
    let handed = MecSession::Ue(UeTunnel { enb: Ipv4Addr::new(10, 1, 0, 3), ..u });
    assert_eq!(cause(&h.modify_mec(st, &ue(2), &handed)), 1);
    assert_eq!(h.plane.mec()[&st], handed);
    let seq = h.mec_seq();
    let (hdr, ies) = h.raw(&deletion_request(seq, sa)).unwrap();
    assert_eq!((hdr.msg_type, hdr.seid, cause(&ies)), (msg::SESSION_DELETION_RESPONSE, Some(1), 1));
    assert_eq!(h.plane.mec().len(), 2);
    // Its match is free again.
    assert_eq!(cause(&h.establish_mec(4, &decap(10, 10))), 1);
    let c = &h.core.counters;
    assert_eq!(c.value("pfcp_mec_sessions_established"), 4);
    assert_eq!(c.value("pfcp_mec_sessions_modified"), 2);
    let (_, ies) = h.request(msg::ASSOCIATION_RELEASE_REQUEST, None, &[node_ie()]);
    assert_eq!(cause(&ies), 1);
    assert!(h.plane.mec().is_empty() && h.core.sessions().is_empty());
}

#[test]
fn bad_mec_sessions_get_their_cause_and_change_nothing() {
    let mut h = Harness::with(mec());
    h.associate();
    let ok = h.establish_mec(1, &decap(10, 10));
    let s = up_seid(&ok);
    assert_eq!(cause(&h.establish_mec(2, &ue(2))), 1);
    let send = |h: &mut Harness, ies: Vec<Ie>| {
        let mut all = vec![node_ie(), fseid_ie(9)];
        all.extend(ies);
        h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &all).1
    };
    // The FAR missing (found by the checks of every establishment, 7.5.2).
    let mut v = create_ies(&decap(10, 12));
    v.pop();
    let r = send(&mut h, v);
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::CreateFar as u16)));
    // The same priority, an overlapping filter: a rule creation failure.
    let r = h.establish_mec(3, &rule(10, Ipv4Addr::new(192, 0, 2, 10), RuleAction::Drop));
    assert_eq!((cause(&r), failed_rule(&r)), (73, Some(1)));
    // A second tunnel for one UE.
    let r = h.establish_mec(4, &ue(2));
    assert_eq!((cause(&r), failed_rule(&r)), (73, Some(1)));
    // DUPLICATE_* is taken like any rule (the fast path copies).
    let app = Application { mac: [2, 0, 0, 0, 0, 9], interface: "mec0".into() };
    let r = h.establish_mec(5, &rule(1, Ipv4Addr::new(192, 0, 2, 99), RuleAction::DuplicateDecapsulated(app)));
    assert_eq!(cause(&r), 1);
    let before = h.plane.mec();
    // A bad modification leaves the rule as it was.
    let mut v = create_ies(&decap(10, 10));
    v.pop();
    let seq = h.mec_seq();
    let m = encode(msg::SESSION_MODIFICATION_REQUEST, Some(s), seq, &v);
    let (_, r) = h.raw(&m).unwrap();
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::CreateFar as u16)));
    assert_eq!(h.plane.mec(), before);
    assert_eq!(h.core.sessions().len(), 3);
    assert_eq!(h.core.counters.value("pfcp_mec_bad_session"), 1, "the modification");
    assert_eq!(h.core.counters.value("pfcp_mec_overlapping_rule"), 2);
}

#[test]
fn the_number_of_mec_sessions_is_bounded() {
    let mut h = Harness::with(UpfConfig { max_mec_sessions: 2, ..mec() });
    h.associate();
    assert_eq!(cause(&h.establish_mec(1, &decap(1, 1))), 1);
    assert_eq!(cause(&h.establish_mec(2, &ue(1))), 1);
    assert_eq!(cause(&h.establish_mec(3, &decap(2, 2))), 75);
    assert_eq!(h.core.counters.value("pfcp_mec_over_max_sessions"), 1);
    assert_eq!(h.plane.mec().len(), 2);
}

#[test]
fn other_roles_and_planes_refuse_mec_sessions() {
    let mut h = Harness::new();
    h.associate();
    assert_eq!(cause(&h.establish_mec(1, &decap(1, 1))), 76);
    assert_eq!(h.core.counters.value("pfcp_mec_refused_role"), 1);
    let mut h = Harness::with(UpfConfig { role: UpfRole::Steering, ..UpfConfig::default() });
    h.associate();
    assert_eq!(cause(&h.establish_mec(1, &ue(1))), 76);
    assert!(h.plane.mec().is_empty() && h.core.sessions().is_empty());

    /// A plane without the MEC program (as the user-space data path).
    struct NoMec;
    impl ForwardingPlane for NoMec {
        fn install(&mut self, _: u64, _: &SessionRules) -> Result<(), crate::rules::PlaneError> {
            Ok(())
        }
        fn update(&mut self, _: u64, _: &SessionRules) -> Result<(), crate::rules::PlaneError> {
            Ok(())
        }
        fn remove(&mut self, _: u64) -> Result<(), crate::rules::PlaneError> {
            Ok(())
        }
    }
    let mut h = Harness::with(mec());
    h.core.plane = Box::new(NoMec);
    h.associate();
    assert_eq!(cause(&h.establish_mec(1, &decap(1, 1))), 76);
    assert_eq!(h.core.counters.value("pfcp_mec_unsupported_datapath"), 1);
    assert!(h.core.sessions().is_empty());
}

/// tshark dissects the MEC requests we emit: no malformed packet.
#[test]
fn tshark_dissects_mec_requests() {
    let msgs = [
        establishment_request(1, CP, 7, CP, &decap(3, 10)),
        establishment_request(2, CP, 8, CP, &ue(2)),
        modification_request(3, 0x1234, 1, &decap(4, 10)),
    ];
    let packets: Vec<Vec<u8>> =
        msgs.iter().map(|b| crate::dataplane::ipv4::udp_packet(CP, Ipv4Addr::LOCALHOST, 8805, 8805, b)).collect();
    if let Some(text) = crate::dataplane::tests_netns::tshark_raw(&packets) {
        for s in [
            "Session Establishment Request",
            "SDF Filter",
            "permit in 6 from any to 192.0.2.10/32",
            "Network Instance",
            "Outer Header Removal",
            "Enterprise ID",
        ] {
            assert!(text.contains(s), "{s} not in:\n{text}");
        }
        assert!(!text.contains("Malformed"), "{text}");
    }
}

/// A state dump carries the MEC sessions: a fresh node restored from it
/// holds the same rules and tunnels and answers for them.
#[test]
fn mec_sessions_survive_a_dump_and_restore() {
    let mut h = Harness::with(mec());
    h.associate();
    let a = up_seid(&h.establish_mec(1, &decap(10, 10)));
    assert_eq!(cause(&h.establish_mec(2, &ue(2))), 1);
    let plane = crate::MemoryPlane::new();
    let mut core = UpfCore::new(mec(), Box::new(plane.clone()), SystemTime::now(), Default::default());
    let d = crate::dump::UpfDump::from_bytes(&h.core.dump(h.now).to_bytes()).expect("reads back");
    core.restore(h.now, d).expect("restored");
    assert_eq!(plane.mec(), h.plane.mec());
    assert_eq!(core.mec_sessions(), h.core.mec_sessions());
    let mut r = Harness { core, plane, now: h.now, seq: 100 };
    // The restored rule still holds its match, and is modified as before.
    assert_eq!(cause(&r.establish_mec(3, &rule(10, Ipv4Addr::new(192, 0, 2, 10), RuleAction::Drop))), 73);
    assert_eq!(cause(&r.modify_mec(a, &decap(10, 10), &decap(10, 11))), 1);
}

#[test]
fn a_node_holds_120000_rules_at_one_priority() {
    // Seed 001's Tofino figure, all at one priority of one slice: each new
    // rule is checked against its own destination's rules and the wide ones.
    let mut h = Harness::with(mec());
    h.associate();
    let to = |i: u32| Ipv4Addr::from(0x0a80_0000 + i);
    for i in 0..120_000u32 {
        assert_eq!(cause(&h.establish_mec(u64::from(i) + 1, &rule(5, to(i), RuleAction::Drop))), 1, "rule {i}");
    }
    assert_eq!(h.plane.mec().len(), 120_000);
    // The same destination at the same priority is refused; so is a prefix
    // over it; elsewhere, or at another priority, they fit.
    let again = h.establish_mec(200_001, &rule(5, to(7), RuleAction::Passthrough));
    assert_eq!((cause(&again), failed_rule(&again)), (73, Some(1)));
    let mut wide = rule(5, to(0), RuleAction::Drop);
    if let MecSession::Rule(r) = &mut wide {
        r.filters[0].dst = Some((to(0), 24));
    }
    assert_eq!(cause(&h.establish_mec(200_002, &wide)), 73);
    if let MecSession::Rule(r) = &mut wide {
        r.priority = 4;
    }
    assert_eq!(cause(&h.establish_mec(200_003, &wide)), 1);
    assert_eq!(cause(&h.establish_mec(200_004, &rule(5, Ipv4Addr::new(10, 200, 0, 1), RuleAction::Drop))), 1);
    assert_eq!(h.plane.mec().len(), 120_002);
}
