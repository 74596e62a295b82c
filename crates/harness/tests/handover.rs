//! Handovers through the whole core in memory, with numbered downlink
//! flowing all the time: X2 (TS 23.401 5.5.1.1.2: Path Switch, Modify
//! Bearer, End Marker from the UPF, data forwarding source -> target) and
//! S1 (5.5.1.2.2: Handover Required / Request / Command / Notify), each
//! checked for loss, duplicates and reordering at the UE.

use mobicore_harness::userplane::StreamCheck;
use mobicore_harness::{Network, NetworkConfig};
use mobicore_ran::ue::Procedure;
use std::time::Duration;

fn enb_of_ue(net: &Network, ue: u64) -> usize {
    net.enbs.iter().position(|e| e.ue(ue).is_some()).expect("the UE is at an eNB")
}

/// Deliver messages one at a time until `done` holds (the S-GW still
/// sends downlink the old way at that moment).
fn deliver_until(net: &mut Network, done: impl Fn(&Network) -> bool) {
    while !done(net) {
        assert!(net.deliver_one(), "nothing left to deliver before the condition held");
    }
}

/// Ten packets queued towards the UE's current eNB, not delivered yet.
fn in_flight(net: &mut Network, ue: u64, from: u32) -> u32 {
    for seq in from..from + 10 {
        net.send_downlink(ue, seq);
    }
    from + 10
}

#[test]
fn x2_handover_with_data_in_flight_loses_duplicates_and_reorders_nothing() {
    let mut net = Network::all_attached(2, 1, NetworkConfig::default());
    let mut seq = in_flight(&mut net, 0, 0);
    net.drive();
    // Packets still on their way to the source when the UE leaves, and
    // more sent before the path is switched.
    seq = in_flight(&mut net, 0, seq);
    net.x2_handover(0, 1).unwrap();
    seq = in_flight(&mut net, 0, seq);
    net.drive();
    assert_eq!(net.last_result(0, Procedure::X2Handover), Some(Ok(())), "{:?}", net.outcomes(0));
    assert_eq!(enb_of_ue(&net, 0), 1);
    // After the switch, straight to the target.
    seq = in_flight(&mut net, 0, seq);
    net.drive();
    let c = StreamCheck::of(net.downlink_received(0), seq);
    assert!(c.clean() && c.received == seq as usize, "{c:?}");
    // The UPF sent the End Marker to the source (SNDEM), which passed it on.
    assert_eq!(net.s1u.end_markers.iter().filter(|(e, _)| *e == 0).count(), 1);
    assert_eq!(net.s1u.end_markers_forwarded, 1);
    assert_eq!((net.s1u.handovers_done, net.s1u.end_marker_timeouts), (1, 0));
    assert!(net.s1u.forwarded >= 10, "{}", net.s1u.forwarded);
    assert_eq!(net.mme.counters().value("x2_handover_completed"), 1);
    // The S-GW's downlink goes to the target's F-TEID.
    assert_eq!(net.sgw_session(0).unwrap().s1u_enb, net.enbs[1].ue(0).unwrap().erabs.first().map(|e| e.enb));
}

#[test]
fn x2_there_and_back_then_idle_and_paged_loses_nothing() {
    let mut net = Network::new(
        2,
        1,
        NetworkConfig { inactivity_timeout: Some(Duration::from_secs(10)), ..NetworkConfig::default() },
    );
    net.s1_setup_all();
    net.attach(0);
    net.drive();
    let mut seq = in_flight(&mut net, 0, 0);
    net.x2_handover(0, 1).unwrap();
    seq = in_flight(&mut net, 0, seq);
    net.drive();
    seq = in_flight(&mut net, 0, seq);
    net.x2_handover(0, 0).unwrap();
    seq = in_flight(&mut net, 0, seq);
    net.drive();
    assert_eq!(enb_of_ue(&net, 0), 0);
    // Released to idle with nothing in flight, then paged for more.
    net.advance(Duration::from_secs(11));
    assert!(net.enbs[0].ue(0).unwrap().s1.is_none(), "released for inactivity");
    seq = in_flight(&mut net, 0, seq);
    net.drive();
    let c = StreamCheck::of(net.downlink_received(0), seq);
    assert!(c.clean() && c.received == seq as usize, "{c:?}");
    assert_eq!(net.mme.counters().value("x2_handover_completed"), 2);
    assert_eq!(net.spgwc.counters.value("ddn_sent"), 1);
}

#[test]
fn s1_handover_with_direct_forwarding_loses_nothing() {
    let mut net = Network::all_attached(2, 1, NetworkConfig::default());
    let mut seq = in_flight(&mut net, 0, 0);
    net.drive();
    seq = in_flight(&mut net, 0, seq);
    let now = net.now;
    let cell = net.enbs[1].cell();
    net.enbs[0].start_s1_handover(now, 0, cell, true).unwrap();
    // Up to the moment the UE is at the target: the S-GW still sends to
    // the source, which forwards to the target.
    deliver_until(&mut net, |n| n.enbs[1].ue(0).is_some());
    seq = in_flight(&mut net, 0, seq);
    net.drive();
    assert_eq!(net.last_result(0, Procedure::S1Handover), Some(Ok(())), "{:?}", net.outcomes(0));
    assert_eq!(enb_of_ue(&net, 0), 1);
    seq = in_flight(&mut net, 0, seq);
    net.drive();
    let c = StreamCheck::of(net.downlink_received(0), seq);
    assert!(c.clean() && c.received == seq as usize, "{c:?} {:?}", net.anomalies());
    // Packets did go source -> target, and the End Marker after them.
    assert_eq!((net.s1u.end_markers_forwarded, net.s1u.handovers_done, net.s1u.end_marker_timeouts), (1, 1, 0));
    assert!(net.s1u.forwarded >= 10, "{}", net.s1u.forwarded);
    assert_eq!(net.sgw_session(0).unwrap().s1u_enb, net.enbs[1].ue(0).unwrap().erabs.first().map(|e| e.enb));
}

#[test]
fn s1_handover_with_indirect_forwarding_through_the_upf_loses_nothing() {
    let mut net = Network::all_attached(2, 1, NetworkConfig::default());
    let mut seq = in_flight(&mut net, 0, 0);
    net.drive();
    seq = in_flight(&mut net, 0, seq);
    let now = net.now;
    let cell = net.enbs[1].cell();
    net.enbs[0].start_s1_handover(now, 0, cell, false).unwrap();
    deliver_until(&mut net, |n| n.enbs[1].ue(0).is_some());
    // Forwarding tunnel of the S/P-GW on the UPF, towards the target.
    assert!(net.sgw_session(0).unwrap().forwarding.is_some());
    seq = in_flight(&mut net, 0, seq);
    net.drive();
    assert_eq!(net.last_result(0, Procedure::S1Handover), Some(Ok(())), "{:?}", net.outcomes(0));
    seq = in_flight(&mut net, 0, seq);
    net.drive();
    let c = StreamCheck::of(net.downlink_received(0), seq);
    assert!(c.clean() && c.received == seq as usize, "{c:?} {:?}", net.anomalies());
    // Source -> UPF -> target, End Marker included; the tunnel is gone after.
    assert_eq!((net.s1u.end_markers_forwarded, net.s1u.handovers_done, net.s1u.end_marker_timeouts), (1, 1, 0));
    assert_eq!(net.upf_counter("gtpu_end_marker_relayed"), 1);
    assert!(net.s1u.forwarded >= 10, "{}", net.s1u.forwarded);
    // The tunnel outlives the handover (what the source still forwards
    // goes through it), then goes (TS 23.401 5.5.1.2.2 step 21).
    assert!(net.sgw_session(0).unwrap().forwarding.is_some(), "kept after the handover");
    let hold = net.mme.config().indirect_forwarding_hold_ms;
    net.advance(Duration::from_millis(hold));
    assert!(net.sgw_session(0).unwrap().forwarding.is_none(), "Delete Indirect Data Forwarding Tunnel");
    let s = &net.spgwc.counters;
    assert_eq!(s.value("s11_create_indirect_forwarding"), 1);
}

#[test]
fn x2_handover_of_one_ue_leaves_the_others_alone() {
    let mut net = Network::all_attached(2, 4, NetworkConfig::default());
    let mut seq = 0;
    for ue in 0..4 {
        in_flight(&mut net, ue, 0);
    }
    seq += 10;
    net.x2_handover(0, 1).unwrap();
    for ue in 0..4 {
        in_flight(&mut net, ue, seq);
    }
    seq += 10;
    net.drive();
    for ue in 0..4 {
        let c = StreamCheck::of(net.downlink_received(ue), seq);
        assert!(c.clean() && c.received == seq as usize, "UE {ue}: {c:?}");
    }
    assert!(net.s1u.unknown_teid.is_empty(), "{:?}", net.s1u.unknown_teid);
}

#[test]
fn tau_from_idle_after_x2_and_s1_handovers() {
    let mut net = Network::all_attached(2, 2, NetworkConfig::default());
    for ue in 0..2u64 {
        let k = enb_of_ue(&net, ue);
        net.enbs[k].release_inactive(ue).unwrap();
    }
    net.drive();
    for ue in 0..2u64 {
        let k = enb_of_ue(&net, ue);
        let now = net.now;
        net.enbs[k].start_service_request(now, ue).unwrap();
    }
    net.drive();
    for ue in 0..2u64 {
        net.x2_handover(ue, 1 - enb_of_ue(&net, ue)).unwrap();
        net.drive();
    }
    for ue in 0..2u64 {
        let k = enb_of_ue(&net, ue);
        let now = net.now;
        let cell = net.enbs[1 - k].cell();
        net.enbs[k].start_s1_handover(now, ue, cell, ue.is_multiple_of(2)).unwrap();
        net.drive();
        assert_eq!(net.last_result(ue, Procedure::S1Handover), Some(Ok(())), "{:?}", net.outcomes(ue));
    }
    for ue in 0..2u64 {
        let k = enb_of_ue(&net, ue);
        net.enbs[k].release_inactive(ue).unwrap();
    }
    net.drive();
    for ue in 0..2u64 {
        let k = enb_of_ue(&net, ue);
        let now = net.now;
        net.enbs[k].start_tau(now, ue, false).unwrap();
        net.drive();
        assert_eq!(
            net.last_result(ue, Procedure::Tau),
            Some(Ok(())),
            "UE {ue}: {:?} {:?}",
            net.outcomes(ue),
            net.mme.counters().snapshot()
        );
    }
}

#[test]
fn release_right_after_handover_notify_leaves_the_ue_registered_and_idle() {
    for direct in [true, false] {
        let mut net = Network::all_attached(2, 1, NetworkConfig::default());
        let now = net.now;
        let cell = net.enbs[1].cell();
        net.enbs[0].start_s1_handover(now, 0, cell, direct).unwrap();
        // The target has sent HANDOVER NOTIFY: the eNB releases the UE at
        // once, while the MME still completes the handover.
        deliver_until(&mut net, |n| n.last_result(0, Procedure::S1Handover).is_some());
        net.enbs[1].release_inactive(0).unwrap();
        net.drive();
        let m = net.mme.counters().snapshot();
        assert_eq!(net.mme.stats().attached, 1, "direct {direct}: {m:?}");
        assert!(net.enbs[1].ue(0).unwrap().s1.is_none(), "released");
        let now = net.now;
        net.enbs[1].start_tau(now, 0, false).unwrap();
        net.drive();
        assert_eq!(net.last_result(0, Procedure::Tau), Some(Ok(())), "direct {direct}: {m:?}");
    }
}
