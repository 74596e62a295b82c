//! Idle UEs that move (issue 10 item 8) through the whole core in memory,
//! under the virtual clock: three eNBs in three tracking areas (TACs 1, 2,
//! 3; the MME serves TAC 1, so a UE's TAI list is TAC 1 and the TAC of the
//! cell it registered in). An idle UE reselects another eNB's cell (TS
//! 36.304 5.2.4): inside its TAI list nothing is signalled and paging
//! still finds it there (the MME pages the list it gave, TS 23.401 5.3.4.3);
//! outside, it makes a normal TAU from idle through the new eNB (TS 24.301
//! 5.5.3.2.2) and is paged in its new list; a TAU crossing a paging brings
//! the bearers back; a handover out of the list ends in a TAU once idle.

use mobicore_harness::{Network, NetworkConfig};
use mobicore_ran::ue::Procedure;
use mobicore_ran::Reselection;
use std::time::Duration;

const INACTIVITY: Duration = Duration::from_secs(10);

/// Three eNBs, one TA each; UE `u` attaches at eNB `u % 3`.
fn network(n_ues: u64) -> Network {
    let cfg = NetworkConfig { inactivity_timeout: Some(INACTIVITY), enbs_per_tac: Some(1), ..Default::default() };
    Network::all_attached(3, n_ues, cfg)
}

fn connected(net: &Network, ue: u64) -> bool {
    net.enbs.iter().any(|e| e.ue(ue).is_some_and(|c| c.s1.is_some()))
}

fn go_idle(net: &mut Network) {
    net.advance(INACTIVITY + Duration::from_secs(1));
    for ue in 0..net.n_ues() {
        assert!(!connected(net, ue), "UE {ue} still connected after the inactivity time");
    }
}

/// The TACs of UE `ue`'s TAI list, as the UE holds it.
fn tai_list(net: &Network, ue: u64) -> Vec<u16> {
    let e = net.enb_of(ue);
    net.enbs[e].ue(ue).unwrap().ue.tai_list().iter().map(|t| t.tac()).collect()
}

#[test]
fn the_enbs_have_one_tac_each_and_the_lists_hold_the_registration_cell() {
    let net = network(3);
    let tacs: Vec<u16> = net.enbs.iter().map(|e| e.cell().tac).collect();
    assert_eq!(tacs, [1, 2, 3]);
    assert_eq!(tai_list(&net, 0), [1]);
    assert_eq!(tai_list(&net, 1), [1, 2]);
    assert_eq!(tai_list(&net, 2), [1, 3]);
}

#[test]
fn an_idle_ue_moved_within_its_tai_list_signals_nothing_and_is_paged_at_the_new_enb() {
    let mut net = network(2);
    go_idle(&mut net);
    // UE 1 registered at eNB 1 (TAC 2): its list is TACs 1 and 2.
    let s1ap_before = net.s1_downlink.len();
    let delivered = net.delivered;
    assert_eq!(net.reselect(1, 0), Ok(Reselection::InTaiList));
    net.drive();
    assert_eq!((net.s1_downlink.len(), net.delivered), (s1ap_before, delivered), "no signalling");
    assert_eq!(net.enb_of(1), 0);
    // It comes back by a service request through eNB 0, in TAC 1 (the MME
    // keeps the list it gave), goes idle again and moves back to eNB 1.
    let now = net.now;
    net.enbs[0].start_service_request(now, 1).unwrap();
    net.drive();
    assert_eq!(net.last_result(1, Procedure::ServiceRequest), Some(Ok(())));
    go_idle(&mut net);
    assert_eq!(net.reselect(1, 1), Ok(Reselection::InTaiList));
    // Downlink pages it in TACs 1 and 2: it answers through eNB 1.
    let paging_before = net.mme.counters().value("paging_sent");
    net.send_downlink(1, 0);
    net.drive();
    assert_eq!(net.last_result(1, Procedure::PagingResponse), Some(Ok(())), "{:?}", net.outcomes(1));
    assert_eq!(net.mme.counters().value("paging_sent") - paging_before, 2, "eNBs 0 and 1, not eNB 2");
    assert!(net.enbs[1].ue(1).is_some_and(|c| c.s1.is_some()), "connected at eNB 1");
    assert_eq!(net.downlink_received(1), &[0]);
    assert_eq!(net.mme.counters().value("tau_request"), 0);
}

#[test]
fn an_idle_ue_moved_out_of_its_tai_list_updates_through_the_new_enb() {
    let mut net = network(1);
    go_idle(&mut net);
    let guti = net.enbs[0].ue(0).unwrap().ue.guti();
    // UE 0 registered at eNB 0 (TAC 1): eNB 2 (TAC 3) is outside its list.
    assert_eq!(net.reselect(0, 2), Ok(Reselection::TauStarted));
    net.drive();
    assert_eq!(net.last_result(0, Procedure::Tau), Some(Ok(())), "{:?}", net.outcomes(0));
    let m = net.mme.counters();
    assert_eq!((m.value("tau_request"), m.value("tau_complete")), (1, 1));
    assert_eq!(tai_list(&net, 0), [1, 3]);
    assert_ne!(net.enbs[2].ue(0).unwrap().ue.guti(), guti, "a new GUTI");
    assert!(!connected(&net, 0), "no active flag: released after the TAU");
    // Every message of the TAU went through eNB 2.
    assert!(net.s1_downlink.iter().rev().take(2).all(|(e, _)| *e == 2), "TAU ACCEPT, release");
    // Paged in TACs 1 and 3, it answers through eNB 2.
    let paging_before = net.mme.counters().value("paging_sent");
    net.send_downlink(0, 0);
    net.drive();
    assert_eq!(net.last_result(0, Procedure::PagingResponse), Some(Ok(())));
    assert_eq!(net.mme.counters().value("paging_sent") - paging_before, 2, "eNBs 0 and 2");
    assert_eq!(net.downlink_received(0), &[0]);
    // Back into TAC 1, still in the list: no TAU.
    go_idle(&mut net);
    assert_eq!(net.reselect(0, 0), Ok(Reselection::InTaiList));
    net.drive();
    assert_eq!(net.mme.counters().value("tau_request"), 1);
}

#[test]
fn a_tau_crossing_a_paging_brings_the_bearers_back_and_loses_nothing() {
    let mut net = network(1);
    go_idle(&mut net);
    // Downlink for the idle UE and its TAU from a new TA at once: the
    // paging goes to TAC 1, where the UE no longer is; its TAU answers it.
    for seq in 0..3 {
        net.send_downlink(0, seq);
    }
    assert_eq!(net.reselect(0, 2), Ok(Reselection::TauStarted));
    net.drive();
    assert_eq!(net.last_result(0, Procedure::Tau), Some(Ok(())), "{:?}", net.outcomes(0));
    let m = net.mme.counters();
    assert_eq!(m.value("ddn_received") + m.value("ddn_during_tau"), 1, "one DDN");
    assert!(connected(&net, 0), "the bearers came back on the TAU's connection");
    assert!(net.enbs[2].ue(0).is_some_and(|c| !c.erabs.is_empty()));
    assert_eq!(net.downlink_received(0), &[0, 1, 2]);
    assert_eq!(tai_list(&net, 0), [1, 3]);
}

#[test]
fn a_ue_handed_over_out_of_its_tai_list_updates_once_idle() {
    let mut net = network(1);
    // Connected at eNB 0 (TAC 1, list [1]): X2 handover to eNB 1 (TAC 2).
    net.x2_handover(0, 1).unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::X2Handover), Some(Ok(())));
    assert_eq!(net.mme.counters().value("tau_request"), 0, "no TAU while connected");
    // Released for inactivity: a normal TAU from idle through eNB 1.
    net.advance(INACTIVITY + Duration::from_secs(1));
    assert_eq!(net.last_result(0, Procedure::Tau), Some(Ok(())), "{:?}", net.outcomes(0));
    assert_eq!(tai_list(&net, 0), [1, 2]);
    assert!(!connected(&net, 0));
    // Paged in the new list at eNB 1.
    net.send_downlink(0, 0);
    net.drive();
    assert_eq!(net.downlink_received(0), &[0]);
    assert_eq!(net.last_result(0, Procedure::PagingResponse), Some(Ok(())));
}

#[test]
fn a_connected_ue_handed_over_out_of_its_tai_list_updates_on_its_connection() {
    let mut net = network(1);
    net.x2_handover(0, 1).unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::X2Handover), Some(Ok(())));
    let before = net.enbs[1].ue(0).unwrap().ue.guti();
    // Still connected at eNB 1 (TAC 2, outside [1]): a normal TAU on the
    // connection (TS 24.301 5.5.3.2.2 a), no active flag needed.
    let now = net.now;
    net.enbs[1].start_tau(now, 0, false).unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::Tau), Some(Ok(())), "{:?}", net.outcomes(0));
    assert_eq!(tai_list(&net, 0), [1, 2]);
    assert_ne!(net.enbs[1].ue(0).unwrap().ue.guti(), before, "TAU ACCEPT gave a new GUTI");
    assert!(connected(&net, 0), "a TAU on a connection keeps it (TS 24.301 5.5.3.2.4)");
    assert_eq!(net.mme.counters().value("tau_complete"), 1);
    // The bearers were never touched: downlink goes straight through.
    net.send_downlink(0, 0);
    net.drive();
    assert_eq!(net.downlink_received(0), &[0]);
    assert_eq!(net.spgwc.counters.value("ddn_sent"), 0);
}
