//! Idle mode and mobility against bad input and races, through the whole
//! core in memory: a Service Request with a wrong short MAC, a Path Switch
//! Request for an unknown UE and a Handover Notify without preparation
//! (each from another eNB, each leaving the real UE alone), a TAU that
//! crosses a paging, a handover cancelled after the Handover Command, and
//! the operator's detach of an idle UE (paged first).

use bytes::Bytes;
use mobicore_harness::fault::{FaultAction, Link, Msg};
use mobicore_harness::userplane::StreamCheck;
use mobicore_harness::{Network, NetworkConfig};
use mobicore_ran::enb::s1ap_build::{initial_ue_message, CellIdentity};
use mobicore_ran::ue::Procedure;
use oxirush_s1ap::s1ap::{RRCEstablishmentCause, S1AP_PDU};
use oxirush_s1ap::S1apPduKind;

fn attached(n_enbs: usize, n_ues: u64) -> Network {
    Network::all_attached(n_enbs, n_ues, NetworkConfig::default())
}

fn release(net: &mut Network, ue: u64) {
    let k = net.enb_of(ue);
    net.enbs[k].release_inactive(ue).unwrap();
    net.drive();
    assert!(net.enbs[k].ue(ue).unwrap().s1.is_none());
}

fn mme_id_of(net: &Network, ue: u64) -> u32 {
    net.ue(ue).s1.and_then(|s| s.mme_ue_id).expect("connected")
}

/// A downlink packet reaches UE `ue` now (it is connected and its path works).
fn downlink_works(net: &mut Network, ue: u64, seq: u32) {
    net.send_downlink(ue, seq);
    net.drive();
    assert_eq!(net.downlink_received(ue).last(), Some(&seq), "UE {ue}");
}

#[test]
fn service_request_with_a_wrong_short_mac_from_another_enb_changes_nothing() {
    let mut net = attached(2, 2);
    release(&mut net, 0);
    let s_tmsi = net.ue(0).ue.s_tmsi();
    assert!(s_tmsi.is_some());
    // SERVICE REQUEST (TS 24.301 8.2.25): KSI 0, sequence number 3, a short
    // MAC that is not the UE's, from eNB 1 where the UE is not.
    let nas = vec![0xc7, 0x03, 0xde, 0xad];
    let cell = CellIdentity::new(NetworkConfig::default().plan.plmn, 2, 1).unwrap();
    let pdu = initial_ue_message(&cell, 4242, nas, RRCEstablishmentCause::mo_Data, s_tmsi).unwrap();
    net.inject(Msg::S1Uplink { enb: 1, stream: 1, pdu: Bytes::from(pdu) });
    net.drive();
    let m = net.mme.counters();
    assert_eq!((m.value("service_request_mac_failure"), m.value("service_reject_identity")), (1, 1));
    // The stored UE is untouched: still registered and idle, paged by its
    // own S-TMSI, and its own service request works.
    assert_eq!(net.mme.stats().attached, 2);
    let now = net.now;
    net.enbs[0].start_service_request(now, 0).unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::ServiceRequest), Some(Ok(())));
    downlink_works(&mut net, 0, 0);
}

#[test]
fn path_switch_for_an_unknown_ue_and_notify_without_preparation_touch_no_ue() {
    let mut net = attached(2, 2);
    let live = mme_id_of(&net, 0);
    let erabs = net.ue(0).erabs.clone();
    let cell = net.enbs[1].cell();
    let caps = mobicore_ran::enb::handover::ue_security_capability_octets();
    // PATH SWITCH REQUEST naming an MME-UE-S1AP-ID no UE has.
    let unknown = live.wrapping_add(1).max(1);
    let ps = mobicore_ran::enb::handover::path_switch_request(77, unknown, &erabs, &cell, caps).unwrap();
    net.inject(Msg::S1Uplink { enb: 1, stream: 1, pdu: Bytes::from(ps) });
    // HANDOVER NOTIFY for the live UE, with no handover prepared.
    let notify = mobicore_ran::enb::handover::handover_notify(live, 78, &cell).unwrap();
    net.inject(Msg::S1Uplink { enb: 1, stream: 1, pdu: Bytes::from(notify) });
    net.drive();
    let m = net.mme.counters();
    assert_eq!((m.value("path_switch_unknown_ue"), m.value("handover_notify_unexpected")), (1, 1));
    // Answers to eNB 1 only: PATH SWITCH REQUEST FAILURE, ERROR INDICATION.
    let to_enb1: Vec<S1apPduKind> = net
        .s1_downlink_log(1)
        .iter()
        .filter_map(|p| S1AP_PDU::decode(p).ok().map(|p| p.kind()))
        .filter(|k| matches!(k, S1apPduKind::Unsuccessful_PathSwitchRequest | S1apPduKind::Initiating_ErrorIndication))
        .collect();
    assert_eq!(to_enb1.len(), 2, "{to_enb1:?}");
    // The live UE still has its connection at eNB 0 and its downlink path.
    assert_eq!(mme_id_of(&net, 0), live);
    assert_eq!(net.enb_of(0), 0);
    downlink_works(&mut net, 0, 0);
    downlink_works(&mut net, 1, 0);
}

#[test]
fn a_tau_crossing_a_paging_brings_the_bearers_up_and_delivers_the_buffer() {
    let mut net = attached(1, 1);
    release(&mut net, 0);
    // The paging never reaches the UE; it makes a TAU (no active flag) of
    // its own meanwhile.
    let is_paging = |m: &Msg| match m {
        Msg::S1Downlink { pdu, .. } => S1AP_PDU::decode(pdu).is_ok_and(|p| p.kind() == S1apPduKind::Initiating_Paging),
        _ => false,
    };
    net.fault(Link::S1Downlink, FaultAction::Drop, 10, Some(Box::new(is_paging)));
    for seq in 0..5 {
        net.send_downlink(0, seq);
    }
    net.drive();
    assert!(net.mme.counters().value("paging_sent") >= 1);
    let now = net.now;
    net.enbs[0].start_tau(now, 0, false).unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::Tau), Some(Ok(())), "{:?}", net.outcomes(0));
    assert_eq!(net.mme.counters().value("tau_answers_paging"), 1);
    let c = StreamCheck::of(net.downlink_received(0), 5);
    assert!(c.clean() && c.received == 5, "{c:?}");
}

#[test]
fn s1_handover_cancelled_after_the_handover_command_keeps_the_ue_at_the_source() {
    let mut net = attached(2, 1);
    let now = net.now;
    let cell = net.enbs[1].cell();
    net.enbs[0].start_s1_handover(now, 0, cell, false).unwrap();
    // Up to the HANDOVER COMMAND at the source, before the UE leaves.
    let is_command = |m: &Msg| match m {
        Msg::S1Downlink { pdu, .. } => {
            S1AP_PDU::decode(pdu).is_ok_and(|p| p.kind() == S1apPduKind::Successful_HandoverPreparation)
        }
        _ => false,
    };
    net.fault(Link::S1Downlink, FaultAction::Hold, 1, Some(Box::new(is_command)));
    net.drive();
    assert_eq!(net.held().len(), 1, "the HANDOVER COMMAND is held");
    // The source decides otherwise: HANDOVER CANCEL; the command comes late.
    let now = net.now;
    net.enbs[0].cancel_s1_handover(now, 0).unwrap();
    net.drive();
    net.release_held();
    net.drive();
    assert_eq!(net.enb_of(0), 0, "the UE stays at the source");
    let m = net.mme.counters();
    assert_eq!(m.value("s1_handover_completed"), 0);
    assert!(net.sgw_session(0).unwrap().forwarding.is_none(), "the forwarding tunnel is gone");
    downlink_works(&mut net, 0, 0);
    // And a handover after it works.
    let now = net.now;
    net.enbs[0].start_s1_handover(now, 0, cell, true).unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::S1Handover), Some(Ok(())), "{:?}", net.outcomes(0));
    downlink_works(&mut net, 0, 1);
}

#[test]
fn operator_detach_of_an_idle_ue_pages_it_first() {
    let mut net = attached(1, 2);
    release(&mut net, 0);
    let imsi = net.imsi(0);
    let now = net.now;
    let command = mobicore_mme::OperatorCommand::Detach { imsi, reattach_required: false };
    net.mme.handle(now, mobicore_mme::MmeEvent::Operator { txn: 1, command });
    net.drive();
    let outcome = mobicore_mme::OperatorOutcome::DetachStarted { paged: true };
    assert!(net.reports.contains(&mobicore_harness::Report::OperatorAnswer { txn: 1, outcome }));
    let m = net.mme.counters();
    assert_eq!((m.value("paging_sent"), m.value("network_detach_accepted")), (1, 1));
    assert!(net.sgw_session(0).is_none(), "its PDN connection is deleted");
    assert_eq!(net.mme.stats().attached, 1, "the other UE stays");
    downlink_works(&mut net, 1, 0);
}

#[test]
fn an_operator_detach_while_one_runs_is_not_started_again() {
    use mobicore_mme::{MmeEvent, OperatorCommand, OperatorOutcome};
    let mut net = attached(1, 2);
    let imsi = net.imsi(0);
    let now = net.now;
    for txn in [1, 2] {
        let command = OperatorCommand::Detach { imsi: imsi.clone(), reattach_required: false };
        net.mme.handle(now, MmeEvent::Operator { txn, command });
    }
    net.drive();
    let answers: Vec<_> = net
        .reports
        .iter()
        .filter_map(|r| match r {
            mobicore_harness::Report::OperatorAnswer { txn, outcome } => Some((*txn, *outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(answers, [(1, OperatorOutcome::DetachStarted { paged: false }), (2, OperatorOutcome::DetachInProgress)]);
    let m = net.mme.counters();
    assert_eq!((m.value("network_detach"), m.value("network_detach_accepted")), (1, 1), "one DETACH REQUEST");
    assert!(net.sgw_session(0).is_none());
    // Once gone, the UE is unknown; the other one stays.
    let command = OperatorCommand::Detach { imsi, reattach_required: false };
    net.mme.handle(net.now, MmeEvent::Operator { txn: 3, command });
    let unknown = mobicore_harness::Report::OperatorAnswer { txn: 3, outcome: OperatorOutcome::UnknownImsi };
    net.drive();
    assert!(net.reports.contains(&unknown));
    downlink_works(&mut net, 1, 0);
}

#[test]
fn downlink_during_a_tau_from_idle_brings_the_bearers_up() {
    let mut net = attached(1, 1);
    release(&mut net, 0);
    let now = net.now;
    net.enbs[0].start_tau(now, 0, false).unwrap();
    // Up to the TAU ACCEPT being on its way: the MME waits for the COMPLETE.
    let is_accept_sent = |n: &Network| n.mme.counters().value("tau_request") == 1;
    while !is_accept_sent(&net) {
        assert!(net.deliver_one());
    }
    // The TAU COMPLETE is late; the downlink comes first.
    let is_uplink = |m: &Msg| matches!(m, Msg::S1Uplink { .. });
    net.fault(Link::S1Uplink, FaultAction::Hold, 1, Some(Box::new(is_uplink)));
    for seq in 0..3 {
        net.send_downlink(0, seq);
    }
    net.drive();
    assert_eq!(net.held().len(), 1);
    net.release_held();
    net.drive();
    assert_eq!(net.mme.counters().value("ddn_during_tau"), 1);
    assert_eq!(net.last_result(0, Procedure::Tau), Some(Ok(())), "{:?}", net.outcomes(0));
    let c = StreamCheck::of(net.downlink_received(0), 3);
    assert!(c.clean() && c.received == 3, "{c:?}");
}

#[test]
fn a_ddn_overtaking_the_release_access_bearers_response_pages_the_ue_after_the_release() {
    let mut net = attached(1, 1);
    // The S-GW buffers from its Release Access Bearers on; the downlink's
    // DDN reaches the MME before the response does (TS 23.401 5.3.5).
    let is_rab_response = |m: &Msg| matches!(m, Msg::S11ToMme(b) if b.get(1) == Some(&171));
    net.fault(Link::S11ToMme, FaultAction::Hold, 1, Some(Box::new(is_rab_response)));
    net.enbs[0].release_inactive(0).unwrap();
    net.drive();
    assert_eq!(net.held().len(), 1, "the Release Access Bearers Response");
    for seq in 0..3 {
        net.send_downlink(0, seq);
    }
    net.drive();
    assert_eq!(net.mme.counters().value("ddn_during_release"), 1);
    assert_eq!(net.mme.counters().value("paging_sent"), 0, "not while the UE is still connected");
    net.release_held();
    net.drive();
    // Released, then paged: the UE comes back and gets every packet.
    assert_eq!(net.mme.counters().value("paging_sent"), 1);
    assert_eq!(net.mme.counters().value("paging_answered"), 1);
    let c = StreamCheck::of(net.downlink_received(0), 3);
    assert!(c.clean() && c.received == 3, "{c:?}");
}

#[test]
fn periodic_tau_at_t3412_expiry_keeps_an_idle_ue_reachable() {
    let mut cfg = NetworkConfig::default();
    cfg.mme.t3412_seconds = 360;
    cfg.mme.mobile_reachable_seconds = Some(400);
    cfg.mme.implicit_detach_seconds = 60;
    let mut net = Network::new(1, 1, cfg);
    net.s1_setup_all();
    net.attach(0);
    net.drive();
    release(&mut net, 0);
    // Three T3412 periods: the UE updates each time by itself, so the
    // mobile reachable timer (400 s) never runs out.
    net.advance(std::time::Duration::from_secs(3 * 360 + 10));
    let tau_ok = net.outcomes(0).iter().filter(|o| o.procedure == Procedure::PeriodicTau && o.result.is_ok()).count();
    assert_eq!(tau_ok, 3, "{:?}", net.outcomes(0));
    assert_eq!(net.mme.counters().value("implicit_detach"), 0);
    assert_eq!(net.mme.stats().attached, 1);
    downlink_works(&mut net, 0, 0);
}

/// The HSS's Cancel Location (TS 29.272 5.2.1.2) reaches the MME.
fn cancel_location(net: &mut Network, ue: u64, cancellation_type: mobicore_common::s6a::CancellationType) {
    use mobicore_common::s6a::{CancelLocationRequest, S6aIncomingRequest};
    let request =
        S6aIncomingRequest::CancelLocation(CancelLocationRequest { imsi: net.imsi(ue), cancellation_type, flags: 0 });
    let now = net.now;
    net.mme.handle(now, mobicore_mme::MmeEvent::S6aIncoming { txn: 1, request });
    net.drive();
}

#[test]
fn cancel_location_withdrawal_detaches_the_ue_and_mme_update_removes_it_silently() {
    use mobicore_common::s6a::{CancellationType, S6aIncomingAnswer};
    use mobicore_harness::Report;
    let mut net = attached(1, 3);
    // Subscription withdrawn: network detach, the UE answers DETACH ACCEPT.
    cancel_location(&mut net, 0, CancellationType::SubscriptionWithdrawal);
    assert_eq!(net.mme.counters().value("network_detach_accepted"), 1);
    assert!(net.sgw_session(0).is_none());
    // The UE registered at another MME: its context goes without NAS.
    release(&mut net, 1);
    cancel_location(&mut net, 1, CancellationType::MmeUpdateProcedure);
    assert_eq!(net.mme.counters().value("s6a_cancel_location_mme_update"), 1);
    assert!(net.sgw_session(1).is_none());
    assert_eq!(net.mme.counters().value("paging_sent"), 0, "no NAS, so no paging");
    // Every CLR is answered DIAMETER_SUCCESS, the UE untouched by them keeps working.
    let answers = net
        .reports
        .iter()
        .filter(|r| matches!(r, Report::S6aAnswer { answer: S6aIncomingAnswer::CancelLocation(Ok(())) }))
        .count();
    assert_eq!(answers, 2);
    assert_eq!(net.mme.stats().attached, 1);
    downlink_works(&mut net, 2, 0);
}

#[test]
fn an_enb_status_transfer_after_the_handover_notify_is_taken_quietly() {
    // The source's ENB STATUS TRANSFER and the target's HANDOVER NOTIFY go
    // on different associations: the notify may come first. The late
    // transfer is for a connection the MME is releasing: no Error
    // Indication (it had answered one, TS 36.413 10.6, to every such race).
    let mut net = attached(2, 1);
    let now = net.now;
    let cell = net.enbs[1].cell();
    net.enbs[0].start_s1_handover(now, 0, cell, true).unwrap();
    let is_status_transfer = |m: &Msg| match m {
        Msg::S1Uplink { pdu, .. } => {
            S1AP_PDU::decode(pdu).is_ok_and(|p| p.kind() == S1apPduKind::Initiating_eNBStatusTransfer)
        }
        _ => false,
    };
    net.fault(Link::S1Uplink, FaultAction::Hold, 1, Some(Box::new(is_status_transfer)));
    // Up to the notify: the MME completes the handover and releases the source.
    while net.mme.counters().value("s1_handover_notify") == 0 {
        assert!(net.deliver_one(), "the handover stalled");
    }
    assert_eq!(net.held().len(), 1, "the ENB STATUS TRANSFER held");
    net.release_held();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::S1Handover), Some(Ok(())), "{:?}", net.outcomes(0));
    let m = net.mme.counters();
    assert_eq!((m.value("status_transfer_after_handover"), m.value("s1ap_unknown_ue")), (1, 0));
    assert!(net.anomalies().is_empty(), "{:?}", net.anomalies());
    downlink_works(&mut net, 0, 0);
}
