//! Lost messages, NAS timers, authentication failures, races and eNB loss.

use std::time::Duration;

use mobicore_harness::inspect::{downlink_nas, emm, gtp_type, gtpv2, pfcp, pfcp_type};
use mobicore_harness::{FaultAction, Link, Network, NetworkConfig};
use mobicore_ran::ue::{EmmState, Procedure};
use mobicore_ran::{usim_for, SubscriberPlan};

fn ready(n_enbs: usize, n_ues: u64, cfg: NetworkConfig) -> Network {
    let mut net = Network::new(n_enbs, n_ues, cfg);
    net.s1_setup_all();
    net
}

#[test]
fn dropped_authentication_request_is_retransmitted_on_t3460() {
    let mut net = ready(1, 1, NetworkConfig::default());
    net.fault(Link::S1Downlink, FaultAction::Drop, 1, Some(downlink_nas(emm::AUTHENTICATION_REQUEST)));
    net.attach(0);
    net.drive();
    assert_eq!(net.dropped().len(), 1, "the Authentication Request was dropped");
    assert_eq!(net.last_result(0, Procedure::Attach), None, "attach still running");
    assert_eq!(net.mme_counter("nas_retransmission"), 0);
    let t0 = net.now;
    // Nothing happens before T3460 (6 s) runs out.
    net.advance(Duration::from_millis(5_999));
    assert_eq!(net.mme_counter("nas_retransmission"), 0);
    assert_eq!(net.last_result(0, Procedure::Attach), None);
    net.advance(Duration::from_millis(1));
    assert_eq!(net.now - t0, Duration::from_secs(6));
    assert_eq!(net.mme_counter("nas_retransmission"), 1);
    assert!(net.attached(0), "{:?}", net.outcomes(0));
    assert_eq!(net.mme_stats().attached, 1);
    assert!(net.upf_rules(0).is_some());
}

#[test]
fn all_five_authentication_requests_dropped_abort_the_attach() {
    let mut net = ready(1, 1, NetworkConfig::default());
    net.fault(Link::S1Downlink, FaultAction::Drop, 5, Some(downlink_nas(emm::AUTHENTICATION_REQUEST)));
    net.attach(0);
    let t0 = net.now;
    assert!(net.run_until(50, |n| n.last_result(0, Procedure::Attach).is_some()));
    assert_eq!(net.dropped().len(), 5, "the first send and 4 retransmissions");
    assert_eq!(net.mme_counter("nas_retransmission"), 4);
    assert_eq!(net.mme_counter("t3460_abort"), 1);
    // The fifth expiry is at 5 x 6 s.
    assert!(net.now - t0 >= Duration::from_secs(30));
    assert!(matches!(net.last_result(0, Procedure::Attach), Some(Err(_))));
    assert_eq!(net.mme_stats().ues, 0, "the MME holds no context");
    assert!(net.spgwc.sessions().is_empty());
    assert!(net.plane.table.is_empty());
    assert_eq!(net.ue(0).ue.emm_state(), EmmState::Deregistered);
}

#[test]
fn sqn_ahead_of_the_hss_resynchronises() {
    // The USIM's highest SEQ is 1000 on IND 1; the HSS starts at 0, so its
    // first vector (SEQ 1, IND 1) is stale to the USIM.
    let plan = SubscriberPlan { sqn: (1000 << 5) | 1, ..SubscriberPlan::default() };
    let mut net = ready(1, 1, NetworkConfig { plan, hss_sqn: Some(0), ..NetworkConfig::default() });
    net.attach(0);
    net.drive();
    assert!(net.attached(0), "{:?}", net.outcomes(0));
    assert_eq!(net.mme_counter("authentication_resync"), 1);
    assert_eq!(net.hss.counters().value("hss_resync"), 1);
    let sqn_he = net.hss.store().get(&net.imsi(0)).unwrap().sqn;
    assert!(sqn_he >> 5 > 1000, "the HSS moved past the USIM's SQN: {sqn_he:#x}");
    assert_eq!(net.ue(0).ue.usim.sqn, sqn_he, "the USIM accepted the HSS's new SQN");
}

#[test]
fn wrong_key_is_rejected_while_others_attach() {
    let n = 6;
    let mut net = ready(2, n, NetworkConfig::default());
    let mut usim = usim_for(3, &net.plan);
    usim.k[0] ^= 0x01;
    net.replace_ue(3, usim);
    for ue in 0..n {
        net.attach(ue);
    }
    net.drive();
    let r = net.last_result(3, Procedure::Attach).expect("UE 3's attach ended");
    assert!(r.is_err(), "{r:?}");
    assert_eq!(net.mme_counter("authentication_mac_failure"), 1);
    assert_eq!(net.mme_counter("authentication_reject"), 1);
    assert_eq!(net.ue(3).ue.emm_state(), EmmState::Deregistered);
    assert!(net.ipv4(3).is_none());
    for ue in (0..n).filter(|u| *u != 3) {
        assert!(net.attached(ue), "UE {ue}: {:?}", net.outcomes(ue));
    }
    assert_eq!(net.mme_stats().ues, n as usize - 1);
    assert_eq!(net.mme_stats().attached, n as usize - 1);
    assert_eq!(net.spgwc.sessions().len(), n as usize - 1);
    assert!(net.sgw_session(3).is_none());
}

fn assert_no_state(net: &Network) {
    assert_eq!(net.mme_stats().ues, 0, "MME context left");
    assert!(net.spgwc.sessions().is_empty(), "SGW-C sessions left: {:?}", net.spgwc.sessions());
    assert!(net.upf.sessions().is_empty(), "UPF sessions left");
    assert!(net.plane.table.is_empty(), "forwarding rules left");
}

#[test]
fn detach_while_the_modify_bearer_response_is_held() {
    for switch_off in [false, true] {
        let mut net = ready(1, 1, NetworkConfig::default());
        net.fault(Link::S11ToMme, FaultAction::Hold, 1, Some(gtp_type(gtpv2::MODIFY_BEARER_RESPONSE)));
        net.attach(0);
        net.drive();
        assert!(net.attached(0));
        assert_eq!(net.held().len(), 1, "Modify Bearer Response held");
        net.detach(0, switch_off);
        net.drive();
        assert_eq!(net.last_result(0, Procedure::Detach), Some(Ok(())), "{:?}", net.outcomes(0));
        net.release_held();
        net.drive();
        assert_eq!(net.mme_counter("s11_stale_response"), 1, "the late response found no UE");
        assert_no_state(&net);
    }
}

/// Before 7719362 the SGW-C rejected the Delete Session with cause 94
/// (another procedure of the session in flight), the MME forgot the UE
/// and the session leaked on the SGW-C and the UPF.
#[test]
fn detach_while_the_modify_bearer_is_in_flight_at_the_sgw() {
    let mut net = ready(1, 1, NetworkConfig::default());
    // Modify Bearer reached the SGW-C, whose PFCP modification is unanswered.
    net.fault(Link::PfcpToCp, FaultAction::Hold, 1, Some(pfcp_type(pfcp::SESSION_MODIFICATION_RESPONSE)));
    net.attach(0);
    net.drive();
    assert!(net.attached(0));
    assert_eq!(net.held().len(), 1);
    net.detach(0, false);
    net.drive();
    assert_eq!(net.spgwc.counters.value("s11_queued_busy"), 1, "Delete Session met the Modify Bearer in flight");
    assert_eq!(net.last_result(0, Procedure::Detach), None, "detach waits for Delete Session");
    assert!(net.sgw_session(0).is_some());
    net.release_held();
    net.drive();
    // Let every retransmission and timer run out.
    net.advance(Duration::from_secs(60));
    assert_eq!(net.last_result(0, Procedure::Detach), Some(Ok(())));
    assert_eq!(net.mme_counter("s11_delete_session_failed"), 0, "Delete Session was not accepted");
    assert_no_state(&net);
}

#[test]
fn enb_disconnected_mid_attach() {
    let n = 9;
    let mut net = ready(3, n, NetworkConfig::default());
    for ue in 0..n {
        net.attach(ue);
    }
    // Part of the way: every UE is past its Initial UE Message, none done.
    for _ in 0..40 {
        assert!(net.deliver_one());
    }
    assert!((0..n).all(|u| net.last_result(u, Procedure::Attach).is_none()));
    assert!(net.mme_stats().ues > 0);
    net.disconnect_enb(1);
    net.drive();
    // Any S11 leftovers (Delete Session of aborted UEs) settle.
    net.advance(Duration::from_secs(10));
    for ue in 0..n {
        if net.enb_of(ue) == 1 {
            assert!(matches!(net.last_result(ue, Procedure::Attach), Some(Err(_))), "UE {ue}: {:?}", net.outcomes(ue));
            assert!(net.sgw_session(ue).is_none(), "UE {ue}: session left at the SGW-C");
        } else {
            assert!(net.attached(ue), "UE {ue}: {:?}", net.outcomes(ue));
        }
    }
    assert_eq!(net.mme_stats().enbs, 2);
    assert_eq!(net.mme_stats().ues, 6, "only the other eNBs' UEs have contexts");
    assert_eq!(net.mme_stats().attached, 6);
    assert_eq!(net.spgwc.sessions().len(), 6);
    assert_eq!(net.plane.table.len(), 6);
}

#[test]
fn lost_create_session_request_is_resent_on_t3() {
    let mut net = ready(1, 1, NetworkConfig::default());
    net.drop_next(Link::S11ToSgw, 1);
    net.attach(0);
    net.drive();
    assert_eq!(net.last_result(0, Procedure::Attach), None);
    assert!(net.spgwc.sessions().is_empty(), "the request never arrived");
    let t0 = net.now;
    assert!(net.run_until(10, |n| n.attached(0)));
    // T3 is 3 s; the NAS timers (6 s) did not have to fire.
    assert_eq!(net.now - t0, Duration::from_secs(3));
    assert_eq!(net.mme_counter("nas_retransmission"), 0);
    assert_eq!(net.spgwc.sessions().len(), 1);
    assert_eq!(net.spgwc.counters.value("s11_duplicate_request"), 0);
}

#[test]
fn lost_create_session_response_is_replayed_from_the_sgw_cache() {
    let mut net = ready(1, 1, NetworkConfig::default());
    net.drop_next(Link::S11ToMme, 1);
    net.attach(0);
    net.drive();
    assert_eq!(net.spgwc.sessions().len(), 1, "the session exists, its response was lost");
    assert!(net.run_until(10, |n| n.attached(0)), "{:?}", net.outcomes(0));
    // The retransmitted request is a duplicate: answered from the cache,
    // no second session, no second address.
    assert_eq!(net.spgwc.counters.value("s11_duplicate_request"), 1);
    assert_eq!(net.spgwc.sessions().len(), 1);
    assert_eq!(net.plane.table.len(), 1);
    assert_eq!(net.spgwc.counters.value("sessions_created"), 1);
}

#[test]
fn corrupted_create_session_request_is_rejected_then_attach_again_works() {
    let mut net = ready(1, 1, NetworkConfig::default());
    // Octet 16: the first octet of the IMSI's value (12-octet header,
    // 4-octet IE header), a mandatory IE whatever else the request carries.
    net.corrupt_next(Link::S11ToSgw, 1, 16);
    net.attach(0);
    net.drive();
    // TS 29.274 7.7.3: the SGW-C rejects naming the IE; the MME rejects
    // the PDN connection and with it the attach (ESM failure, #19).
    assert_eq!(net.spgwc.counters.value("s11_rejected_ie"), 1);
    assert_eq!(net.mme_counter("s11_create_session_rejected"), 1);
    let r = net.last_result(0, Procedure::Attach).expect("attach ended");
    assert!(r.as_ref().is_err_and(|e| e.contains("#19")), "{r:?}");
    assert_eq!(net.mme_stats().ues, 0);
    assert!(net.spgwc.sessions().is_empty());
    assert!(net.plane.table.is_empty());
    net.attach(0);
    net.drive();
    assert!(net.attached(0), "{:?}", net.outcomes(0));
    assert_eq!(net.spgwc.sessions().len(), 1);
    assert_eq!(net.plane.table.len(), 1);
}
