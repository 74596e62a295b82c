//! Detach, normal and switch-off, after a scripted attach; then a second
//! attach with the GUTI under the kept security context.

use std::time::{Duration, Instant};

use oxirush_nas::nas_eps::*;
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::S1apPduKind;

use super::mme::*;
use crate::enb::EnbAction;
use crate::ue::{EmmState, Procedure};

fn detach_request(mme: &mut FakeMme, nas: &[u8]) -> NasDetachRequestUeOriginating {
    let NasEpsMessage::Emm(_, NasEmmMessage::DetachRequestUeOriginating(req)) = mme.unprotect(nas) else {
        panic!("not a DETACH REQUEST")
    };
    *req
}

fn expect_release_complete(pdu: &[u8]) {
    let pdu = S1AP_PDU::decode(pdu).unwrap();
    assert_eq!(pdu.kind(), S1apPduKind::Successful_UEContextRelease);
    assert!(pdu.check().unwrap().is_empty());
}

#[test]
fn normal_detach_waits_for_detach_accept() {
    let now = Instant::now();
    let mut enb = ready_enb(now);
    let mut mme = FakeMme::new();
    let enb_ue_id = attach(&mut enb, &mut mme, now);

    enb.start_detach(now, 0, false).unwrap();
    let sent = sends(&mut enb);
    let pdu = S1AP_PDU::decode(&sent[0].1).unwrap();
    assert_eq!(pdu.kind(), S1apPduKind::Initiating_uplinkNASTransport);
    let (_, nas) = uplink_nas(&sent[0].1);
    assert_eq!(nas[0] >> 4, 2, "ciphered on the existing connection");
    let req = detach_request(&mut mme, &nas);
    assert!(!req.detach_type.is_switch_off());
    assert_eq!(req.eps_mobile_identity.as_guti().unwrap().m_tmsi(), M_TMSI);
    assert_eq!(enb.ue(0).unwrap().ue.emm_state(), EmmState::DeregisteredInitiated);

    let accept = mme.protect(NasEpsMessage::new_emm(NasDetachAccept::new()));
    enb.handle_s1ap(now + Duration::from_millis(2), 1, &downlink_nas(enb_ue_id, accept));
    let o = outcomes(&drain(&mut enb));
    assert_eq!((o[0].procedure, o[0].result.clone()), (Procedure::Detach, Ok(())));
    assert_eq!(o[0].latency, Duration::from_millis(2));
    assert_eq!(enb.ue(0).unwrap().ue.emm_state(), EmmState::Deregistered);

    enb.handle_s1ap(now, 1, &release_command(enb_ue_id));
    let actions = drain(&mut enb);
    assert_eq!(actions.len(), 1, "{actions:?}");
    let EnbAction::Send { pdu, .. } = &actions[0] else { panic!() };
    expect_release_complete(pdu);
    assert!(enb.ue(0).unwrap().s1.is_none());
}

#[test]
fn switch_off_detach_ends_with_the_release() {
    let now = Instant::now();
    let mut enb = ready_enb(now);
    let mut mme = FakeMme::new();
    let enb_ue_id = attach(&mut enb, &mut mme, now);

    enb.start_detach(now, 0, true).unwrap();
    let (_, nas) = uplink_nas(&sends(&mut enb)[0].1);
    assert!(detach_request(&mut mme, &nas).detach_type.is_switch_off());
    assert_eq!(enb.ue(0).unwrap().ue.emm_state(), EmmState::Deregistered);
    assert!(outcomes(&drain(&mut enb)).is_empty());

    enb.handle_s1ap(now + Duration::from_millis(5), 1, &release_command(enb_ue_id));
    let actions = drain(&mut enb);
    let EnbAction::Send { pdu, .. } = &actions[0] else { panic!("{actions:?}") };
    expect_release_complete(pdu);
    let o = outcomes(&actions);
    assert_eq!((o[0].procedure, o[0].result.clone()), (Procedure::Detach, Ok(())));
    assert_eq!(o[0].latency, Duration::from_millis(5));
}

#[test]
fn detach_from_idle_is_an_initial_message_and_reattach_uses_guti() {
    let now = Instant::now();
    let mut enb = ready_enb(now);
    let mut mme = FakeMme::new();
    let enb_ue_id = attach(&mut enb, &mut mme, now);
    // The MME releases the connection after attach: the UE is idle.
    enb.handle_s1ap(now, 1, &release_command(enb_ue_id));
    let _ = drain(&mut enb);

    enb.start_detach(now, 0, false).unwrap();
    let sent = sends(&mut enb);
    let pdu = S1AP_PDU::decode(&sent[0].1).unwrap();
    assert_eq!(pdu.kind(), S1apPduKind::Initiating_initialUEMessage);
    let (new_id, nas) = uplink_nas(&sent[0].1);
    assert_ne!(new_id, enb_ue_id);
    assert_eq!(nas[0] >> 4, 1, "initial NAS message: integrity protected, not ciphered");
    detach_request(&mut mme, &nas);
    let accept = NasEpsMessage::new_emm(NasDetachAccept::new()).encode().unwrap();
    enb.handle_s1ap(now, 1, &downlink_nas(new_id, accept));
    assert_eq!(outcomes(&drain(&mut enb))[0].result, Ok(()));

    // Attach again: GUTI, KSI 0, integrity protected with the kept context.
    enb.handle_s1ap(now, 1, &release_command(new_id));
    let _ = drain(&mut enb);
    enb.start_attach(now, 0).unwrap();
    let (_, nas) = uplink_nas(&sends(&mut enb)[0].1);
    assert_eq!(nas[0] >> 4, 1);
    let NasEpsMessage::Emm(_, NasEmmMessage::AttachRequest(req)) = mme.unprotect(&nas) else {
        panic!("not an ATTACH REQUEST")
    };
    assert_eq!(req.eps_mobile_identity.as_guti().unwrap().m_tmsi(), M_TMSI);
    assert_eq!(req.nas_key_set_identifier.ksi(), 0);

    // The MME takes the context as it is (no AKA, no SMC): ATTACH ACCEPT
    // under it, and KeNB of the ATTACH REQUEST's uplink COUNT, the fourth
    // uplink message of the context (TS 33.401 7.2.6.2).
    let id = enb.ue(0).unwrap().s1.unwrap().enb_ue_id;
    let kenb = *oxirush_security::nas_eps::derive_kenb(mme.kasme.as_ref().unwrap(), NasCount::try_from(3u32).unwrap())
        .as_octets();
    let accept = mme.attach_accept();
    enb.handle_s1ap(now, 1, &ics_request(id, accept, kenb));
    let o = outcomes(&drain(&mut enb));
    assert_eq!(o[0].result, Ok(()), "{o:?}");
    assert_eq!(enb.ue(0).unwrap().ue.emm_state(), EmmState::Registered);
}

#[test]
fn identity_request_is_answered_with_the_imsi() {
    let now = Instant::now();
    let mut enb = ready_enb(now);
    enb.start_attach(now, 0).unwrap();
    let (id, _) = uplink_nas(&sends(&mut enb)[0].1);
    let req = NasIdentityRequest::new(NasIdentityType2::from_identity_type(IdentityType::Imsi).unwrap());
    enb.handle_s1ap(now, 1, &downlink_nas(id, NasEpsMessage::new_emm(req).encode().unwrap()));
    let (_, nas) = uplink_nas(&sends(&mut enb)[0].1);
    let NasEpsMessage::Emm(_, NasEmmMessage::IdentityResponse(r)) = NasEpsMessage::decode(&nas).unwrap() else {
        panic!("no IDENTITY RESPONSE")
    };
    assert_eq!(r.mobile_identity.as_imsi().unwrap().to_string(), "001010000000001");
}

#[test]
fn reattach_before_the_release_leaves_the_old_connection_to_the_mme() {
    let now = Instant::now();
    let mut enb = ready_enb(now);
    let mut mme = FakeMme::new();
    let old_id = attach(&mut enb, &mut mme, now);
    enb.start_detach(now, 0, false).unwrap();
    let (_, nas) = uplink_nas(&sends(&mut enb)[0].1);
    detach_request(&mut mme, &nas);
    let accept = mme.protect(NasEpsMessage::new_emm(NasDetachAccept::new()));
    enb.handle_s1ap(now, 1, &downlink_nas(old_id, accept));
    let _ = drain(&mut enb);

    // Attach again at once, on a new connection.
    enb.start_attach(now, 0).unwrap();
    let sent = sends(&mut enb);
    assert_eq!(S1AP_PDU::decode(&sent[0].1).unwrap().kind(), S1apPduKind::Initiating_initialUEMessage);
    let (new_id, _) = uplink_nas(&sent[0].1);
    assert_ne!(new_id, old_id);

    // The release of the old connection is completed and touches nothing.
    enb.handle_s1ap(now, 1, &release_command(old_id));
    let actions = drain(&mut enb);
    assert_eq!(actions.len(), 1, "{actions:?}");
    let EnbAction::Send { pdu, .. } = &actions[0] else { panic!() };
    expect_release_complete(pdu);
    assert_eq!(enb.ue(0).unwrap().s1.unwrap().enb_ue_id, new_id);
    assert_eq!(enb.ue(0).unwrap().ue.procedure(), Some(Procedure::Attach));
}
