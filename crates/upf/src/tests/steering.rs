//! Steering sessions on the PFCP node (sans-I/O, the memory plane): one
//! diversion per session, established / modified / deleted; bad input
//! gets the cause TS 29.244 7.2.2.4.2 gives and changes nothing.

use super::*;
use crate::config::UpfRole;
use crate::rules::{ForwardingPlane, PlaneError, SessionRules};
use mobicore_pfcp::steering::{
    create_ies, deletion_request, establishment_request, modification_request, Diversion, FlowFilter,
};
use rs_pfcp::ie::failed_rule_id::FailedRuleId;

const CP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn steering() -> UpfConfig {
    UpfConfig { role: UpfRole::Steering, ..UpfConfig::default() }
}

fn naive(ue: u8) -> Diversion {
    Diversion {
        ue: Ipv4Addr::new(10, 45, 0, ue),
        flow: None,
        anchor: Ipv4Addr::new(198, 51, 100, 7),
        anchor_teid: None,
        anchor_ue: None,
        origin: Ipv4Addr::new(203, 0, 113, 1),
    }
}

fn flow_of(ue: u8) -> Diversion {
    let flow = FlowFilter { protocol: Some(17), remote: None, ue_ports: None, remote_ports: Some((9000, 9000)) };
    Diversion { flow: Some(flow), anchor_teid: Some(0x77), anchor_ue: Some(Ipv4Addr::new(10, 99, 0, ue)), ..naive(ue) }
}

impl Harness {
    fn next_seq(&mut self) -> u32 {
        self.seq += 1;
        self.seq
    }
    fn establish_diversion(&mut self, cp_seid: u64, d: &Diversion) -> Vec<Ie> {
        let seq = self.next_seq();
        let (h, ies) = self.raw(&establishment_request(seq, CP, cp_seid, CP, d)).expect("an answer");
        assert_eq!((h.msg_type, h.seid), (msg::SESSION_ESTABLISHMENT_RESPONSE, Some(cp_seid)));
        ies
    }
}

fn failed_rule(ies: &[Ie]) -> Option<FailedRuleId> {
    first(ies, IeType::FailedRuleId).map(|f| FailedRuleId::unmarshal(&f.payload).unwrap())
}

#[test]
fn diversions_are_established_modified_and_deleted() {
    let mut h = Harness::with(steering());
    h.associate();
    let a = h.establish_diversion(1, &naive(2));
    assert_eq!(cause(&a), 1);
    let sa = up_seid(&a);
    // A flow of the same UE, to the same anchor: more specific, allowed.
    let b = h.establish_diversion(2, &flow_of(2));
    assert_eq!(cause(&b), 1);
    let sb = up_seid(&b);
    assert_eq!(h.plane.diversions(), [(sa, naive(2)), (sb, flow_of(2))].into_iter().collect());
    assert!(h.plane.is_empty(), "no anchor rules");
    // Edge to edge: a new anchor replaces the diversion.
    let moved = Diversion { anchor: Ipv4Addr::new(198, 51, 100, 8), ..naive(2) };
    let seq = h.next_seq();
    let (hdr, ies) = h.raw(&modification_request(seq, sa, &moved)).unwrap();
    assert_eq!((hdr.msg_type, hdr.seid, cause(&ies)), (msg::SESSION_MODIFICATION_RESPONSE, Some(1), 1));
    assert_eq!(h.plane.diversions()[&sa], moved);
    assert_eq!(h.core.sessions()[&sa].diversion, Some(moved));
    let seq = h.next_seq();
    let (hdr, ies) = h.raw(&deletion_request(seq, sa)).unwrap();
    assert_eq!((hdr.msg_type, hdr.seid, cause(&ies)), (msg::SESSION_DELETION_RESPONSE, Some(1), 1));
    assert_eq!(h.plane.diversions(), [(sb, flow_of(2))].into_iter().collect());
    // The first diversion's match is free again.
    assert_eq!(cause(&h.establish_diversion(3, &naive(2))), 1);
    let c = &h.core.counters;
    assert_eq!(c.value("pfcp_steering_diversions_established"), 3);
    assert_eq!(c.value("pfcp_steering_diversions_modified"), 1);
    // Releasing the association removes them from the plane.
    let (_, ies) = h.request(msg::ASSOCIATION_RELEASE_REQUEST, None, &[node_ie()]);
    assert_eq!(cause(&ies), 1);
    assert!(h.plane.diversions().is_empty() && h.core.sessions().is_empty());
}

#[test]
fn bad_diversions_get_their_cause_and_change_nothing() {
    let mut h = Harness::with(steering());
    h.associate();
    let ok = h.establish_diversion(1, &flow_of(2));
    let s = up_seid(&ok);
    let before = h.plane.diversions();
    let send = |h: &mut Harness, ies: Vec<Ie>| {
        let mut all = vec![node_ie(), fseid_ie(9)];
        all.extend(ies);
        h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &all).1
    };
    // The downlink PDR missing.
    let mut v = create_ies(&naive(3));
    v.remove(1);
    let r = send(&mut h, v);
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::CreatePdr as u16)));
    // The downlink PDR for another UE address than the replica's.
    let mut v = create_ies(&flow_of(3));
    v[1] = create_ies(&naive(3))[1].clone();
    let r = send(&mut h, v);
    assert_eq!((cause(&r), offending(&r)), (69, Some(IeType::UeIpAddress as u16)));
    // The same UE and flow as a diversion in place: a rule creation failure.
    let r = h.establish_diversion(4, &Diversion { anchor: Ipv4Addr::new(192, 0, 2, 99), ..flow_of(2) });
    assert_eq!(cause(&r), 73);
    assert_eq!(failed_rule(&r).map(|f| f.rule_id()), Some(1));
    // Another UE whose downlink would take the same (anchor, address).
    let clash = Diversion { ue: Ipv4Addr::new(10, 45, 0, 5), ..flow_of(2) };
    let r = h.establish_diversion(5, &clash);
    assert_eq!((cause(&r), failed_rule(&r).map(|f| f.rule_id())), (73, Some(2)));
    // A bad modification leaves the diversion as it was.
    let mut v = create_ies(&naive(2));
    v.truncate(3);
    let seq = h.next_seq();
    let m = encode(msg::SESSION_MODIFICATION_REQUEST, Some(s), seq, &v);
    let (_, r) = h.raw(&m).unwrap();
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::CreateFar as u16)));
    assert_eq!(h.plane.diversions(), before);
    assert_eq!(h.core.sessions().len(), 1);
    assert_eq!(h.core.counters.value("pfcp_steering_bad_diversion"), 3);
    assert_eq!(h.core.counters.value("pfcp_steering_overlapping_diversion"), 2);
}

#[test]
fn the_number_of_diversions_is_bounded() {
    let mut h = Harness::with(UpfConfig { max_diversions: 2, ..steering() });
    h.associate();
    assert_eq!(cause(&h.establish_diversion(1, &naive(1))), 1);
    assert_eq!(cause(&h.establish_diversion(2, &naive(2))), 1);
    assert_eq!(cause(&h.establish_diversion(3, &naive(3))), 75);
    assert_eq!(h.core.counters.value("pfcp_steering_over_max_diversions"), 1);
    assert_eq!(h.plane.diversions().len(), 2);
    // A modification is no new diversion.
    let s = *h.plane.diversions().keys().next().unwrap();
    let seq = h.next_seq();
    let d = Diversion { anchor: Ipv4Addr::new(198, 51, 100, 9), ..h.plane.diversions()[&s] };
    assert_eq!(cause(&h.raw(&modification_request(seq, s, &d)).unwrap().1), 1);
}

#[test]
fn anchor_role_and_planes_that_cannot_steer_refuse() {
    let mut h = Harness::new();
    h.associate();
    assert_eq!(cause(&h.establish_diversion(1, &naive(1))), 76);
    assert_eq!(h.core.counters.value("pfcp_steering_refused_anchor_role"), 1);
    assert!(h.plane.diversions().is_empty() && h.core.sessions().is_empty());

    /// A plane without steering (as the user-space data path).
    struct NoSteering;
    impl ForwardingPlane for NoSteering {
        fn install(&mut self, _: u64, _: &SessionRules) -> Result<(), PlaneError> {
            Ok(())
        }
        fn update(&mut self, _: u64, _: &SessionRules) -> Result<(), PlaneError> {
            Ok(())
        }
        fn remove(&mut self, _: u64) -> Result<(), PlaneError> {
            Ok(())
        }
    }
    let mut h = Harness::with(steering());
    h.core.plane = Box::new(NoSteering);
    h.associate();
    assert_eq!(cause(&h.establish_diversion(1, &naive(1))), 76);
    assert_eq!(h.core.counters.value("pfcp_steering_unsupported_datapath"), 1);
    assert!(h.core.sessions().is_empty());
}

/// tshark dissects the steering requests we emit: no malformed packet, no
/// expert error (the enterprise IEs show as such).
#[test]
fn tshark_dissects_steering_requests() {
    let sel = flow_of(2);
    let msgs = [
        establishment_request(1, CP, 7, CP, &sel),
        establishment_request(2, CP, 8, CP, &naive(3)),
        modification_request(3, 0x1234, &sel),
        deletion_request(4, 0x1234),
    ];
    let packets: Vec<Vec<u8>> =
        msgs.iter().map(|b| crate::dataplane::ipv4::udp_packet(CP, Ipv4Addr::LOCALHOST, 8805, 8805, b)).collect();
    if let Some(text) = crate::dataplane::tests_netns::tshark_raw(&packets) {
        for s in [
            "Session Establishment Request",
            "Session Modification Request",
            "Session Deletion Request",
            "Create PDR",
            "Remove PDR",
            "SDF Filter",
            "permit out 17 from any 9000 to assigned",
            "Outer Header Creation",
            "UE IP Address",
            "Enterprise ID",
        ] {
            assert!(text.contains(s), "{s} not in:\n{text}");
        }
    }
}
