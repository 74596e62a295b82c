use super::*;
use crate::context::EmmState;
use crate::MmeEvent;
use mobicore_common::s6a::*;
use oxirush_nas::nas_eps::*;
use oxirush_s1ap::s1ap::{Cause, CauseNas};
use oxirush_s1ap::S1apPduKind;
use oxirush_security::milenage::Sqn;
use oxirush_security::Rand;
use std::time::Duration;

/// The two actions of a rejection: the NAS message, then the release.
fn reject_and_release(h: &mut Harness) -> (Vec<u8>, Option<Cause>) {
    let out = h.drain();
    assert_eq!(out.len(), 2, "{out:?}");
    let nas = read_down(&s1_data(&out[0]).2).nas.unwrap();
    let rel = read_down(&s1_data(&out[1]).2);
    assert_eq!(rel.kind, S1apPduKind::Initiating_UEContextRelease);
    (nas, rel.cause)
}

#[test]
fn aka_mac_failure_rejects_authentication() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000011", 11);
    let _ = h.challenge(&mut ue, r, 32);
    let fail = NasAuthenticationFailure::new(NasEmmCause::from_cause(EmmCause::MacFailure));
    h.up(&ue, NasEpsMessage::new_emm(fail).encode().unwrap());
    let (nas, cause) = reject_and_release(&mut h);
    assert!(matches!(plain_emm(&nas), NasEmmMessage::AuthenticationReject(_)));
    assert_eq!(cause, Some(Cause::nas(CauseNas::authentication_failure)));
    assert_eq!(h.mme.stats().ues, 0);
}

#[test]
fn synch_failure_resynchronises_and_attach_completes() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000012", 12);
    let a = h.challenge(&mut ue, r, 32);
    // The USIM is ahead: it answers with AUTS of its SQN_MS.
    let rand = *a.authentication_parameter_rand.rand().unwrap();
    let auts = milenage().auts(&Rand::new(&rand), &Sqn::try_from(1000).unwrap());
    let param = NasAuthenticationFailureParameter::from_auts(*auts.as_octets());
    let fail = NasAuthenticationFailure::new(NasEmmCause::from_cause(EmmCause::SynchFailure))
        .with_authentication_failure_parameter(param);
    h.up(&ue, NasEpsMessage::new_emm(fail).encode().unwrap());
    let (r2, req) = expect_s6a(&h.drain());
    let S6aRequest::AuthenticationInformation(air) = req else { panic!() };
    let resync = air.resync.expect("Re-Synchronization-Info");
    assert_eq!(resync.rand, rand);
    assert_eq!(resync.auts, *auts.as_octets());
    // The HSS checks AUTS (TS 33.102 6.3.5) and answers with a new vector.
    let sqn_ms =
        milenage().verify_auts(&Rand::new(&resync.rand), &oxirush_security::milenage::Auts::new(&resync.auts)).unwrap();
    assert_eq!(sqn_ms.get(), 1000);
    h.s6a(r2, S6aAnswer::AuthenticationInformation(Ok(vec![hss_vector(1032, 0x42)])));
    let d = h.one_down();
    let NasEmmMessage::AuthenticationRequest(a2) = ue.receive(&d.nas.unwrap()) else { panic!() };
    assert_ne!(a2.nas_key_set_identifier_asme.ksi(), a.nas_key_set_identifier_asme.ksi());
    let resp = ue.authenticate(&a2);
    h.up(&ue, resp);
    let smc = h.one_down().nas.unwrap();
    assert_eq!(smc[0] >> 4, 3, "integrity protected with new context");
    assert_eq!(h.mme.counters().value("authentication_resync"), 1);
}

#[test]
fn second_synch_failure_rejects() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000013", 13);
    let synch = |ue: &TestUe| {
        let fail = NasAuthenticationFailure::new(NasEmmCause::from_cause(EmmCause::SynchFailure))
            .with_authentication_failure_parameter(NasAuthenticationFailureParameter::from_auts([7; 14]));
        let _ = ue;
        NasEpsMessage::new_emm(fail).encode().unwrap()
    };
    let _ = h.challenge(&mut ue, r, 32);
    h.up(&ue, synch(&ue));
    let (r2, _) = expect_s6a(&h.drain());
    let _ = h.challenge(&mut ue, r2, 64);
    h.up(&ue, synch(&ue));
    let (nas, _) = reject_and_release(&mut h);
    assert!(matches!(plain_emm(&nas), NasEmmMessage::AuthenticationReject(_)));
}

#[test]
fn res_mismatch_rejects_authentication() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000014", 14);
    let _ = h.challenge(&mut ue, r, 32);
    let bad = NasAuthenticationResponseParameter::from_res(&[0u8; 8]).unwrap();
    h.up(&ue, NasEpsMessage::new_emm(NasAuthenticationResponse::new(bad)).encode().unwrap());
    let (nas, _) = reject_and_release(&mut h);
    assert!(matches!(plain_emm(&nas), NasEmmMessage::AuthenticationReject(_)));
    assert_eq!(h.mme.counters().value("authentication_res_mismatch"), 1);
}

#[test]
fn hss_unknown_imsi_rejects_attach() {
    let mut h = Harness::default();
    let (_, r) = h.start_attach("001010000000015", 15);
    h.s6a(r, S6aAnswer::AuthenticationInformation(Err(S6aError::UserUnknown)));
    let (nas, _) = reject_and_release(&mut h);
    let NasEmmMessage::AttachReject(rej) = plain_emm(&nas) else { panic!() };
    assert_eq!(rej.emm_cause.cause(), Some(EmmCause::EpsServicesAndNonEpsServicesNotAllowed));
    assert_eq!(h.mme.stats().ues, 0);
}

#[test]
fn s6a_transport_failure_rejects_with_network_failure() {
    let mut h = Harness::default();
    let (_, r) = h.start_attach("001010000000016", 16);
    let err = Err(mobicore_common::requester::TransportError::Timeout);
    h.mme.handle(h.now, MmeEvent::S6a { ue: r, answer: err });
    let (nas, _) = reject_and_release(&mut h);
    let NasEmmMessage::AttachReject(rej) = plain_emm(&nas) else { panic!() };
    assert_eq!(rej.emm_cause.cause(), Some(EmmCause::NetworkFailure));
}

#[test]
fn t3460_retransmits_four_times_then_aborts() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000017", 17);
    let first = h.challenge(&mut ue, r, 32);
    for n in 1..=4 {
        assert_eq!(h.mme.poll_timeout(), Some(h.now + Duration::from_secs(6)));
        h.advance(Duration::from_secs(6));
        let d = h.one_down();
        let NasEmmMessage::AuthenticationRequest(again) = plain_emm(&d.nas.unwrap()) else { panic!() };
        assert_eq!(again.authentication_parameter_rand, first.authentication_parameter_rand, "retransmission {n}");
    }
    assert_eq!(h.mme.counters().value("nas_retransmission"), 4);
    h.advance(Duration::from_secs(6));
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!(h.mme.counters().value("t3460_abort"), 1);
    assert_eq!(h.mme.stats().ues, 0);
    assert_eq!(h.mme.poll_timeout(), None);
    // A late AIA for the released UE is ignored.
    h.s6a(r, S6aAnswer::AuthenticationInformation(Ok(vec![hss_vector(32, 1)])));
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.counters().value("s6a_stale_answer"), 1);
}

#[test]
fn smc_retransmission_uses_fresh_count() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000018", 18);
    let a = h.challenge(&mut ue, r, 32);
    let resp = ue.authenticate(&a);
    h.up(&ue, resp);
    let smc1 = h.one_down().nas.unwrap();
    h.advance(Duration::from_secs(6));
    let smc2 = h.one_down().nas.unwrap();
    assert_eq!((smc1[5], smc2[5]), (0, 1), "NAS sequence numbers");
    // The UE may answer the retransmission: it verifies with COUNT 1.
    let complete = ue.security_mode_complete(&smc1);
    ue.ctx.as_mut().unwrap().unprotect(&smc2, Direction::Downlink).expect("retransmission verifies");
    h.up(&ue, complete);
    assert!(matches!(expect_s6a(&h.drain()).1, S6aRequest::UpdateLocation(_)));
}

#[test]
fn replayed_and_bad_mac_uplink_nas_are_discarded() {
    let mut h = Harness::default();
    let mut ue = h.attach("001010000000019", 19);
    let id = ue.mme_ue_id.unwrap();
    // A valid EMM STATUS, then the same octets again (an old COUNT).
    let status = NasEmmStatus::new(NasEmmCause::from_cause(EmmCause::ProtocolErrorUnspecified));
    let once = ue.protect(&NasEpsMessage::new_emm(status));
    h.up(&ue, once.clone());
    assert_eq!(h.mme.counters().value("nas_emm_status_received"), 1);
    h.up(&ue, once);
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.counters().value("nas_emm_status_received"), 1);
    assert_eq!(h.mme.counters().value("nas_mac_failure"), 1);
    // A detach request with one bit flipped.
    let mut bad = ue.detach_request(false);
    let n = bad.len() - 1;
    bad[n] ^= 0x01;
    h.up(&ue, bad);
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.counters().value("nas_mac_failure"), 2);
    // An unprotected detach once security is on.
    let plain = NasDetachRequestUeOriginating::new(
        NasDetachType::from_ue_detach_kind(UeDetachKind::EpsDetach, true),
        NasKeySetIdentifier::new(0),
        NasEpsMobileIdentity::from_guti(ue.guti.unwrap()),
    );
    h.up(&ue, NasEpsMessage::new_emm(plain).encode().unwrap());
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.ues[&id].emm, EmmState::Registered);
    assert_eq!(h.mme.counters().value("nas_unprotected_dropped"), 1);
}

#[test]
fn undecodable_attach_request_is_rejected_with_96() {
    let mut h = Harness::default();
    // ATTACH REQUEST cut inside its mandatory IEs.
    let ue = TestUe::new("001010000000020", 20);
    let mut nas = ue.attach_request();
    nas.truncate(6);
    h.s1(initial_ue_message(20, nas));
    let (nas, _) = reject_and_release(&mut h);
    let NasEmmMessage::AttachReject(rej) = plain_emm(&nas) else { panic!() };
    assert_eq!(rej.emm_cause.cause(), Some(EmmCause::InvalidMandatoryInformation));
    assert_eq!(h.mme.stats().ues, 0);
}

#[test]
fn unknown_message_type_gets_emm_status_97() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000021", 21);
    let _ = h.challenge(&mut ue, r, 32);
    h.up(&ue, vec![0x07, 0x3f]);
    let d = h.one_down();
    let NasEmmMessage::EmmStatus(st) = plain_emm(&d.nas.unwrap()) else { panic!() };
    assert_eq!(st.emm_cause.cause(), Some(EmmCause::MessageTypeNonExistentOrNotImplemented));
    assert_eq!(h.mme.counters().value("nas_malformed"), 1);
}

#[test]
fn t3470_aborts_after_four_identity_retransmissions() {
    let mut h = Harness::default();
    let ue = TestUe::new("001010000000022", 22);
    let plmn = oxirush_nas::nas_eps::Plmn::new("001", "01").unwrap();
    let foreign = oxirush_nas::nas_eps::Guti::new(plmn, 9, 9, 1);
    h.s1(initial_ue_message(22, ue.attach_request_with(NasEpsMobileIdentity::from_guti(foreign))));
    assert!(matches!(plain_emm(&h.one_down().nas.unwrap()), NasEmmMessage::IdentityRequest(_)));
    for _ in 0..4 {
        h.advance(Duration::from_secs(6));
        assert!(matches!(plain_emm(&h.one_down().nas.unwrap()), NasEmmMessage::IdentityRequest(_)));
    }
    h.advance(Duration::from_secs(6));
    assert_eq!(h.one_down().kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!(h.mme.counters().value("t3470_abort"), 1);
    assert_eq!(h.mme.stats().ues, 0);
}

#[test]
fn t3450_retransmits_attach_accept_protected_with_new_counts() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000023", 23);
    let a = h.challenge(&mut ue, r, 32);
    let resp = ue.authenticate(&a);
    h.up(&ue, resp);
    let smc = h.one_down().nas.unwrap();
    let c = ue.security_mode_complete(&smc);
    h.up(&ue, c);
    let _ = h.drain();
    h.s6a(r, S6aAnswer::UpdateLocation(Ok(subscription())));
    let (r, _) = expect_s11(&h.drain());
    h.s11(r, create_session_ok());
    let ics = h.one_down();
    assert!(matches!(ue.receive(&ics.nas.unwrap()), NasEmmMessage::AttachAccept(_)));
    h.advance(Duration::from_secs(6));
    let again = h.one_down();
    assert_eq!(again.kind, S1apPduKind::Initiating_downlinkNASTransport);
    // The UE verifies the retransmission (a fresh downlink COUNT) and completes.
    assert!(matches!(ue.receive(&again.nas.unwrap()), NasEmmMessage::AttachAccept(_)));
    let complete = ue.attach_complete();
    h.up(&ue, complete);
    assert_eq!(h.mme.stats().attached, 1);
    assert_eq!(h.mme.poll_timeout(), None);
}

#[test]
fn release_request_mid_attach_aborts_it() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000024", 24);
    let _ = h.challenge(&mut ue, r, 32);
    h.s1(release_request(ue.mme_ue_id.unwrap(), 24));
    assert_eq!(h.one_down().kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!(h.mme.stats().ues, 0);
    assert_eq!(h.mme.poll_timeout(), None);
}
