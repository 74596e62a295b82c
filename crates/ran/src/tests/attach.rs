//! An eNB and its UE against canned MME messages, through attach.

use std::time::{Duration, Instant};

use oxirush_nas::nas_eps::*;
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{extract_s1ap_ies, ie, S1apPduKind};
use oxirush_security::milenage::{Auts, Sqn};
use oxirush_security::Rand;

use super::mme::*;
use crate::enb::EnbAction;
use crate::ue::{EmmState, Procedure};

#[test]
fn attach_runs_to_attach_complete_with_every_step_checked() {
    let now = Instant::now();
    let mut enb = ready_enb(now);
    let mut mme = FakeMme::new();

    enb.start_attach(now, 0).unwrap();
    let sent = sends(&mut enb);
    assert_eq!(sent.len(), 1);
    let pdu = S1AP_PDU::decode(&sent[0].1).unwrap();
    assert_eq!(pdu.kind(), S1apPduKind::Initiating_initialUEMessage);
    let (enb_ue_id, nas) = uplink_nas(&sent[0].1);
    let req = mme.attach_request(&nas);
    assert_eq!(req.eps_mobile_identity.to_string(), "imsi-001010000000001");
    assert!(req.nas_key_set_identifier.no_key_available());
    for a in 0..4 {
        assert!(req.ue_network_capability.supports_eea(a), "EEA{a}");
    }
    assert!(!req.ue_network_capability.supports_eia(0));
    for a in 1..4 {
        assert!(req.ue_network_capability.supports_eia(a), "EIA{a}");
    }
    let NasEpsMessage::Esm(h, NasEsmMessage::PdnConnectivityRequest(pdn)) =
        req.esm_message_container.decode_as_esm_message().unwrap()
    else {
        panic!("no PDN CONNECTIVITY REQUEST")
    };
    assert_eq!((h.eps_bearer_identity, h.procedure_transaction_identity), (0, 1));
    assert_eq!(pdn.pdn_type.pdn_type(), Some(PdnType::Ipv4));

    // Authentication: RES must match XRES.
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, mme.authentication_request(64)));
    let sent = sends(&mut enb);
    let (id, nas) = uplink_nas(&sent[0].1);
    assert_eq!(id, enb_ue_id);
    mme.authentication_response(&nas);

    // Security mode: the complete is ciphered and its MAC verifies at the MME.
    let replayed = mme.replayed();
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, mme.security_mode_command(replayed)));
    let (_, nas) = uplink_nas(&sends(&mut enb)[0].1);
    assert_eq!(nas[0] >> 4, 4, "SECURITY MODE COMPLETE under header type 4");
    assert!(matches!(mme.unprotect(&nas), NasEpsMessage::Emm(_, NasEmmMessage::SecurityModeComplete(_))));

    // INITIAL CONTEXT SETUP with the ATTACH ACCEPT.
    let accept = mme.attach_accept();
    enb.handle_s1ap(now + Duration::from_millis(3), 1, &mme.ics_request(enb_ue_id, accept));
    let actions = drain(&mut enb);
    let pdus: Vec<&Vec<u8>> =
        actions.iter().filter_map(|a| if let EnbAction::Send { pdu, .. } = a { Some(pdu) } else { None }).collect();
    assert_eq!(pdus.len(), 2, "{actions:?}");
    let response = S1AP_PDU::decode(pdus[0]).unwrap();
    assert_eq!(response.kind(), S1apPduKind::Successful_InitialContextSetup);
    assert!(response.check().unwrap().is_empty());
    let items: Vec<_> = response.items::<ie::E_RABSetupListCtxtSURes>().map(Result::unwrap).collect();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].e_rab_id.0, 5);
    assert_eq!(items[0].transport_layer_address.0.as_octets(), &[127, 0, 0, 1]);
    let enb_teid = u32::from_be_bytes(items[0].gtp_teid.0);
    assert_ne!(enb_teid, 0);

    // ATTACH COMPLETE with the bearer's accept, after the response.
    let (_, nas) = uplink_nas(pdus[1]);
    let NasEpsMessage::Emm(_, NasEmmMessage::AttachComplete(complete)) = mme.unprotect(&nas) else {
        panic!("not an ATTACH COMPLETE")
    };
    let NasEpsMessage::Esm(h, NasEsmMessage::ActivateDefaultEpsBearerContextAccept(_)) =
        complete.esm_message_container.decode_as_esm_message().unwrap()
    else {
        panic!("no ACTIVATE DEFAULT EPS BEARER CONTEXT ACCEPT")
    };
    assert_eq!(h.eps_bearer_identity, 5);

    let o = outcomes(&actions);
    assert_eq!(o.len(), 1);
    assert_eq!((o[0].ue, o[0].procedure, o[0].result.clone()), (0, Procedure::Attach, Ok(())));
    assert_eq!(o[0].latency, Duration::from_millis(3));

    let ctx = enb.ue(0).unwrap();
    assert_eq!(ctx.ue.emm_state(), EmmState::Registered);
    assert_eq!(ctx.ue.ipv4(), Some(UE_IP.into()));
    assert_eq!(ctx.ue.guti().unwrap().m_tmsi(), M_TMSI);
    assert_eq!(ctx.ue.tai_list().len(), 1);
    assert_eq!(ctx.kenb, Some(mme.kenb()));
    assert_eq!(ctx.ue.kenb(), Some(mme.kenb()));
    let erab = ctx.erabs[0];
    assert_eq!(erab.sgw.unwrap().ipv4, SGW);
    assert_eq!(erab.sgw.unwrap().teid.0, SGW_TEID);
    assert_eq!(erab.enb.teid.0, enb_teid);
}

#[test]
fn mac_failure_then_authentication_reject_is_recorded() {
    let now = Instant::now();
    let mut enb = ready_enb(now);
    enb.start_attach(now, 0).unwrap();
    let (enb_ue_id, _) = uplink_nas(&sends(&mut enb)[0].1);
    // A vector of another subscriber key: MAC-A does not verify.
    let other = oxirush_security::milenage::Milenage::new(
        &oxirush_security::milenage::K::new(&[0x11; 16]),
        &oxirush_security::milenage::Opc::new(&[0x22; 16]),
    );
    let v = other.authentication_vector(
        &Rand::new(&[1; 16]),
        &Sqn::try_from(64).unwrap(),
        &oxirush_security::milenage::Amf::new(&[0x80, 0]),
    );
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, auth_request_for(&v)));
    let (_, nas) = uplink_nas(&sends(&mut enb)[0].1);
    let NasEpsMessage::Emm(_, NasEmmMessage::AuthenticationFailure(f)) = NasEpsMessage::decode(&nas).unwrap() else {
        panic!("no AUTHENTICATION FAILURE")
    };
    assert_eq!(f.emm_cause.cause(), Some(EmmCause::MacFailure));
    assert!(f.authentication_failure_parameter.is_none());

    let reject = NasEpsMessage::new_emm(NasAuthenticationReject::new()).encode().unwrap();
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, reject));
    let o = outcomes(&drain(&mut enb));
    assert_eq!(o[0].result, Err("authentication reject (after MAC failure #20)".to_string()));
    assert_eq!(enb.ue(0).unwrap().ue.emm_state(), EmmState::Deregistered);
}

#[test]
fn synch_failure_sends_auts_the_hss_accepts_then_attach_completes() {
    let now = Instant::now();
    let mut enb = ready_enb(now);
    let mut mme = FakeMme::new();
    enb.start_attach(now, 0).unwrap();
    let (enb_ue_id, nas) = uplink_nas(&sends(&mut enb)[0].1);
    mme.attach_request(&nas);
    // First a good challenge so that the USIM's SQN moves to 5 << 5.
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, mme.authentication_request(5 << 5)));
    let (_, nas) = uplink_nas(&sends(&mut enb)[0].1);
    mme.authentication_response(&nas);
    // Then a replay of an older SQN: synch failure with AUTS of SQN_MS.
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, mme.authentication_request(4 << 5)));
    let actions = drain(&mut enb);
    assert!(actions.contains(&EnbAction::Anomaly("synch failure #21 sent (SQN resynchronisation)".into())));
    let EnbAction::Send { pdu, .. } = actions.iter().find(|a| matches!(a, EnbAction::Send { .. })).unwrap() else {
        unreachable!()
    };
    let (_, nas) = uplink_nas(pdu);
    let NasEpsMessage::Emm(_, NasEmmMessage::AuthenticationFailure(f)) = NasEpsMessage::decode(&nas).unwrap() else {
        panic!("no AUTHENTICATION FAILURE")
    };
    assert_eq!(f.emm_cause.cause(), Some(EmmCause::SynchFailure));
    let auts = *f.authentication_failure_parameter.unwrap().auts().unwrap();
    let sqn_ms = mme.milenage.verify_auts(&Rand::new(&[0x23; 16]), &Auts::new(&auts)).unwrap();
    assert_eq!(sqn_ms.get(), 5 << 5);
    // The network resynchronises and the attach goes on.
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, mme.authentication_request(sqn_ms.get() + 32)));
    let (_, nas) = uplink_nas(&sends(&mut enb)[0].1);
    mme.authentication_response(&nas);
    let replayed = mme.replayed();
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, mme.security_mode_command(replayed)));
    let _ = sends(&mut enb);
    let accept = mme.attach_accept();
    enb.handle_s1ap(now, 1, &mme.ics_request(enb_ue_id, accept));
    let actions = drain(&mut enb);
    assert_eq!(outcomes(&actions)[0].result, Ok(()));
}

#[test]
fn security_mode_command_with_bad_mac_or_capabilities_is_rejected() {
    for (bad_mac, cause) in
        [(true, EmmCause::SecurityModeRejectedUnspecified), (false, EmmCause::UeSecurityCapabilitiesMismatch)]
    {
        let now = Instant::now();
        let mut enb = ready_enb(now);
        let mut mme = FakeMme::new();
        enb.start_attach(now, 0).unwrap();
        let (enb_ue_id, nas) = uplink_nas(&sends(&mut enb)[0].1);
        mme.attach_request(&nas);
        enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, mme.authentication_request(64)));
        let (_, nas) = uplink_nas(&sends(&mut enb)[0].1);
        mme.authentication_response(&nas);
        let replayed = if bad_mac { mme.replayed() } else { NasUeSecurityCapability::from_eea_eia(0xE0, 0xE0) };
        let mut smc = mme.security_mode_command(replayed);
        if bad_mac {
            smc[2] ^= 0x40;
        }
        enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, smc));
        let actions = drain(&mut enb);
        let EnbAction::Send { pdu, .. } = &actions[0] else { panic!("{actions:?}") };
        let (_, nas) = uplink_nas(pdu);
        let NasEpsMessage::Emm(_, NasEmmMessage::SecurityModeReject(r)) = NasEpsMessage::decode(&nas).unwrap() else {
            panic!("no SECURITY MODE REJECT")
        };
        assert_eq!(r.emm_cause.cause(), Some(cause));
        let o = outcomes(&actions);
        assert!(o[0].result.as_ref().unwrap_err().starts_with("security mode reject"), "{o:?}");
        assert!(!enb.ue(0).unwrap().ue.has_security_context());
    }
}

#[test]
fn attach_reject_and_protected_message_with_bad_mac() {
    let now = Instant::now();
    let mut enb = ready_enb(now);
    let mut mme = FakeMme::new();
    let enb_ue_id = attach(&mut enb, &mut mme, now);

    // A second UE gets an ATTACH REJECT #15.
    enb.add_ue(1, crate::ue::Ue::new(crate::usim_for(1, &crate::SubscriberPlan::default()), serving()));
    enb.start_attach(now, 1).unwrap();
    let (id1, _) = uplink_nas(&sends(&mut enb)[0].1);
    let reject = NasAttachReject::new(NasEmmCause::from_cause(EmmCause::NoSuitableCellsInTrackingArea));
    enb.handle_s1ap(now, 1, &downlink_nas(id1, NasEpsMessage::new_emm(reject).encode().unwrap()));
    let o = outcomes(&drain(&mut enb));
    assert!(o[0].result.as_ref().unwrap_err().starts_with("attach reject #15"), "{o:?}");
    assert_eq!(o[0].ue, 1);

    // UE 0 drops a downlink message whose MAC was changed, and counts it.
    let mut info = mme.protect(NasEpsMessage::new_emm(NasEmmInformation::new()));
    info[3] ^= 1;
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, info));
    assert_eq!(drain(&mut enb), vec![EnbAction::Anomaly("downlink NAS MAC failure".into())]);
}

#[test]
fn timeout_fails_attach_and_unknown_ue_gets_error_indication() {
    let now = Instant::now();
    let mut enb = ready_enb(now);
    enb.start_attach(now, 0).unwrap();
    let (enb_ue_id, _) = uplink_nas(&sends(&mut enb)[0].1);
    assert_eq!(enb.poll_timeout(), Some(now + Duration::from_secs(10)));
    enb.handle_timeout(now + Duration::from_secs(9));
    assert!(drain(&mut enb).is_empty());
    enb.handle_timeout(now + Duration::from_secs(10));
    let actions = drain(&mut enb);
    let o = outcomes(&actions);
    assert_eq!(o[0].result, Err("timeout in attach waiting for AttachProgress".to_string()));
    assert_eq!(enb.poll_timeout(), None);

    // The connection is gone: a downlink message for it is answered with
    // ERROR INDICATION, unknown eNB UE S1AP ID.
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, vec![0x07, 0x55, 0x01]));
    let sent = sends(&mut enb);
    let pdu = S1AP_PDU::decode(&sent[0].1).unwrap();
    assert_eq!(pdu.kind(), S1apPduKind::Initiating_ErrorIndication);
    extract_s1ap_ies!(pdu, ErrorIndication,
        lax cause: Cause = Cause(c) => c,
    );
    assert_eq!(cause, Some(Cause::radioNetwork(CauseRadioNetwork::unknown_enb_ue_s1ap_id)));
}

/// Rough cost of the RAN side of one attach (eNB + UE), the scripted MME's
/// work excluded. Run with `--ignored --nocapture`; asserts nothing on time.
#[test]
#[ignore]
fn ran_side_cost_of_attach() {
    use std::time::Duration as D;
    let n = 2000u64;
    let now = Instant::now();
    let mut enb = ready_enb(now);
    let mut ran = D::ZERO;
    for i in 1..=n {
        enb.add_ue(i, crate::ue::Ue::new(crate::usim_for(i, &crate::SubscriberPlan::default()), serving()));
        let mut mme = FakeMme::new();
        let t = Instant::now();
        enb.start_attach(now, i).unwrap();
        let sent = sends(&mut enb);
        ran += t.elapsed();
        let (id, nas) = uplink_nas(&sent[0].1);
        mme.attach_request(&nas);
        let m = downlink_nas(id, mme.authentication_request(64));
        let t = Instant::now();
        enb.handle_s1ap(now, 1, &m);
        let sent = sends(&mut enb);
        ran += t.elapsed();
        mme.authentication_response(&uplink_nas(&sent[0].1).1);
        let r = mme.replayed();
        let m = downlink_nas(id, mme.security_mode_command(r));
        let t = Instant::now();
        enb.handle_s1ap(now, 1, &m);
        let _ = sends(&mut enb);
        ran += t.elapsed();
        let a = mme.attach_accept();
        let m = mme.ics_request(id, a);
        let t = Instant::now();
        enb.handle_s1ap(now, 1, &m);
        let _ = drain(&mut enb);
        ran += t.elapsed();
    }
    println!("RAN side: {:?} per attach", ran / n as u32);
}

#[test]
fn enb_ue_s1ap_ids_follow_first_enb_ue_s1ap_id_for_attaches_in_index_order() {
    // eNB 0 of 3 holds UEs 0, 3, 6, 9; attached in index order, their new
    // connections get the IDs a pre-building responder expects.
    let now = Instant::now();
    let mut enb = ready_enb(now);
    let plan = crate::SubscriberPlan::default();
    let ues: Vec<u64> = (0..12).filter(|i| crate::enb_of(*i, 3) == 0).collect();
    assert_eq!(ues, vec![0, 3, 6, 9]);
    for &i in &ues[1..] {
        enb.add_ue(i, crate::ue::Ue::new(crate::usim_for(i, &plan), serving()));
    }
    for &i in &ues {
        enb.start_attach(now, i).unwrap();
        let (enb_ue_id, _) = uplink_nas(&sends(&mut enb)[0].1);
        assert_eq!(enb_ue_id, crate::first_enb_ue_s1ap_id(i, 3), "UE {i}");
    }
}
