//! Idle mode through the whole core in memory, under the virtual clock:
//! the eNB's inactivity release (TS 23.401 5.3.5), downlink buffering on
//! the UPF with the Downlink Data Report, DDN on S11 and paging
//! (network-triggered service request, 5.3.4.3), the UE-triggered service
//! request (5.3.4.1), paging failure and the DDN Failure Indication,
//! periodic TAU from idle (TS 24.301 5.5.3), implicit detach and the
//! Service Reject #10 that makes the UE attach again (5.3.7, 5.6.1.5);
//! an eNB's S1 Reset (TS 36.413 8.7.1.2.2) leaving its UEs idle.

use mobicore_harness::userplane::StreamCheck;
use mobicore_harness::{Network, NetworkConfig};
use mobicore_ran::ue::Procedure;
use std::time::Duration;

const INACTIVITY: Duration = Duration::from_secs(10);

fn attached(n_ues: u64, cfg: NetworkConfig) -> Network {
    Network::all_attached(1, n_ues, NetworkConfig { inactivity_timeout: Some(INACTIVITY), ..cfg })
}

/// Whether UE `ue` has an S1 connection at its eNB (ECM-CONNECTED).
fn connected(net: &Network, ue: u64) -> bool {
    net.enbs.iter().any(|e| e.ue(ue).is_some_and(|c| c.s1.is_some()))
}

fn go_idle(net: &mut Network, ue: u64) {
    net.advance(INACTIVITY + Duration::from_secs(1));
    assert!(!connected(net, ue), "UE {ue} still connected after the inactivity time");
}

#[test]
fn inactivity_release_keeps_the_ue_registered_and_the_upf_buffering() {
    let mut net = attached(2, NetworkConfig::default());
    go_idle(&mut net, 0);
    let c = net.mme.counters();
    assert_eq!(c.value("ue_idle"), 2, "both UEs released for inactivity");
    assert_eq!(net.mme.stats().attached, 2, "still EMM-REGISTERED");
    // The S/P-GW-C forgot the eNB's F-TEID: the downlink FAR buffers.
    assert!(net.sgw_session(0).unwrap().s1u_enb.is_none());
}

#[test]
fn downlink_for_an_idle_ue_pages_it_and_every_buffered_packet_arrives_in_order() {
    let mut net = attached(2, NetworkConfig::default());
    for seq in 0..5 {
        net.send_downlink(0, seq);
    }
    net.drive();
    go_idle(&mut net, 0);
    // Twenty packets while idle: the first is reported, all are held.
    for seq in 5..25 {
        net.send_downlink(0, seq);
    }
    net.drive();
    assert!(connected(&net, 0), "the paged UE came back");
    assert!(!connected(&net, 1), "UE 1 was not paged");
    let c = StreamCheck::of(net.downlink_received(0), 25);
    assert!(c.clean() && c.received == 25, "{c:?}");
    assert_eq!(net.last_result(0, Procedure::PagingResponse), Some(Ok(())));
    let m = net.mme.counters();
    assert_eq!((m.value("ddn_received"), m.value("paging_answered")), (1, 1));
    let s = &net.spgwc.counters;
    assert_eq!((s.value("ddn_sent"), s.value("ddn_acknowledged")), (1, 1));
    // Reachable again: more downlink goes straight through, no new paging.
    net.send_downlink(0, 25);
    net.drive();
    assert_eq!(net.downlink_received(0).last(), Some(&25));
    assert_eq!(net.spgwc.counters.value("ddn_sent"), 1);
}

#[test]
fn ue_triggered_service_request_resumes_forwarding() {
    let mut net = attached(1, NetworkConfig::default());
    go_idle(&mut net, 0);
    let now = net.now;
    net.enbs[0].start_service_request(now, 0).unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::ServiceRequest), Some(Ok(())));
    assert!(connected(&net, 0));
    assert!(net.sgw_session(0).unwrap().s1u_enb.is_some(), "Modify Bearer gave the S-GW the eNB's F-TEID");
    net.send_downlink(0, 0);
    net.drive();
    assert_eq!(net.downlink_received(0), &[0]);
    assert_eq!(net.spgwc.counters.value("ddn_sent"), 0, "nobody was paged");
}

#[test]
fn paging_failure_discards_the_buffer_and_the_next_packet_pages_again() {
    let mut net = attached(1, NetworkConfig::default());
    go_idle(&mut net, 0);
    for seq in 0..3 {
        net.send_downlink(0, seq);
    }
    // The UE is out of coverage: nobody answers the paging.
    let ue = net.enbs[0].take_idle_ue(0).expect("an idle UE");
    // T3413 with its repetitions (4 s, twice) runs out.
    net.advance(Duration::from_secs(20));
    assert_eq!(net.mme.counters().value("paging_failed"), 1);
    assert_eq!(net.spgwc.counters.value("ddn_failure_indication"), 1);
    assert_eq!(net.spgwc.counters.value("downlink_buffer_discarded"), 1);
    // Back in coverage: a new packet pages it again and only that arrives.
    net.enbs[0].add_ue(0, ue);
    net.send_downlink(0, 3);
    net.drive();
    assert_eq!(net.downlink_received(0), &[3], "the discarded packets never arrive");
    assert_eq!(net.spgwc.counters.value("ddn_sent"), 2);
}

#[test]
fn periodic_tau_from_idle_gives_a_new_guti_and_the_ue_is_paged_by_it() {
    let mut net = attached(1, NetworkConfig::default());
    go_idle(&mut net, 0);
    let before = net.enbs[0].ue(0).unwrap().ue.guti();
    let now = net.now;
    net.enbs[0].start_tau(now, 0, false).unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::Tau), Some(Ok(())));
    let after = net.enbs[0].ue(0).unwrap().ue.guti();
    assert_ne!(before, after, "TAU ACCEPT gave a new GUTI");
    assert_eq!(net.mme.counters().value("tau_complete"), 1);
    assert!(!connected(&net, 0), "no active flag: the S1 connection is released");
    // Paged by the new S-TMSI.
    net.send_downlink(0, 0);
    net.drive();
    assert_eq!(net.downlink_received(0), &[0]);
}

#[test]
fn tau_with_the_active_flag_brings_the_bearers_back() {
    let mut net = attached(1, NetworkConfig::default());
    go_idle(&mut net, 0);
    let now = net.now;
    net.enbs[0].start_tau(now, 0, true).unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::Tau), Some(Ok(())));
    assert!(connected(&net, 0));
    net.send_downlink(0, 0);
    net.drive();
    assert_eq!(net.downlink_received(0), &[0]);
    assert_eq!(net.spgwc.counters.value("ddn_sent"), 0);
}

#[test]
fn implicit_detach_then_service_reject_10_and_the_ue_attaches_again() {
    let mut cfg = NetworkConfig::default();
    cfg.mme.mobile_reachable_seconds = Some(30);
    cfg.mme.implicit_detach_seconds = 30;
    let mut net = attached(1, cfg);
    go_idle(&mut net, 0);
    net.advance(Duration::from_secs(61));
    assert_eq!(net.mme.counters().value("implicit_detach"), 1);
    assert_eq!(net.mme.stats().attached, 0);
    assert!(net.sgw_session(0).is_none(), "the PDN connection was deleted");
    let now = net.now;
    net.enbs[0].start_service_request(now, 0).unwrap();
    net.drive();
    assert!(matches!(net.last_result(0, Procedure::ServiceRequest), Some(Err(_))));
    assert_eq!(net.mme.counters().value("service_reject_implicitly_detached"), 1);
    // TS 24.301 5.6.1.5 #10: the UE attaches again, by itself.
    assert!(net.attached(0), "{:?}", net.outcomes(0));
    assert_eq!(net.mme.stats().attached, 1);
}

#[test]
fn an_enbs_s1_reset_leaves_its_ues_idle_and_registered_and_downlink_pages_them_back() {
    let mut net = attached(3, NetworkConfig::default());
    let now = net.now;
    assert_eq!(net.enbs[0].reset_s1(now), Ok(3), "three connections dropped");
    net.drive();
    assert_eq!(net.enbs[0].resets_acknowledged(), 1, "RESET ACKNOWLEDGE came back");
    let m = net.mme.counters();
    // The RESET reaches each core once (a decomposed MME's front end and
    // every host); each UE's connection is released once, by its host.
    assert_eq!((m.value("s1_reset_all"), m.value("s1_reset_ue")), (net.mme.enb_wide_cores(), 3));
    assert_eq!(net.mme.stats().attached, 3, "still EMM-REGISTERED");
    for ue in 0..3 {
        assert!(!connected(&net, ue), "UE {ue} still connected");
        assert!(net.sgw_session(ue).unwrap().s1u_enb.is_none(), "UE {ue}'s S1-U bearer still at the S-GW");
    }
    // Downlink data pages UE 1 back; UE 2 comes back by itself.
    net.send_downlink(1, 0);
    net.drive();
    assert_eq!(net.last_result(1, Procedure::PagingResponse), Some(Ok(())), "{:?}", net.outcomes(1));
    assert_eq!(net.downlink_received(1), &[0]);
    let now = net.now;
    net.enbs[0].start_service_request(now, 2).unwrap();
    net.drive();
    assert_eq!(net.last_result(2, Procedure::ServiceRequest), Some(Ok(())), "{:?}", net.outcomes(2));
    assert!(connected(&net, 1) && connected(&net, 2) && !connected(&net, 0));
    assert_eq!(net.mme.counters().value("attach_complete"), 3, "no UE attached again");
}
