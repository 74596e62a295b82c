use super::*;
use crate::config::{Eea, Eia};
use crate::context::EmmState;
use crate::MmeConfig;
use mobicore_common::s6a::*;
use mobicore_common::sctp_api::AssocId;
use oxirush_nas::nas_eps::*;
use oxirush_s1ap::S1apPduKind;

#[test]
fn full_attach_by_imsi() {
    let mut h = Harness::default();
    let ue = h.attach("001010000000001", 7);
    let s = h.mme.stats();
    assert_eq!((s.ues, s.enbs, s.attached), (1, 1, 1));
    let ctx = &h.mme.ues[&ue.mme_ue_id.unwrap()];
    assert_eq!(ctx.emm, EmmState::Registered);
    let guti = ue.guti.expect("a GUTI in the Attach Accept");
    assert_eq!((guti.mme_group_id(), guti.mme_code()), (1, 1));
    assert_eq!(h.mme.poll_timeout(), None, "T3450 stopped");
    assert_eq!(h.mme.counters().value("attach_complete"), 1);
}

#[test]
fn ue_signalling_uses_nonzero_streams_and_setup_uses_zero() {
    let mut h = Harness::default();
    let ue = TestUe::new("001010000000001", 7);
    h.s1(initial_ue_message(7, ue.attach_request()));
    let (r, _) = expect_s6a(&h.drain());
    h.s6a(r, S6aAnswer::AuthenticationInformation(Ok(vec![hss_vector(32, 1)])));
    let out = h.drain();
    let (_, stream, _) = s1_data(&out[0]);
    assert!((1..4).contains(&stream), "UE stream {stream}");
    // S1 Setup of a second eNB is answered on stream 0.
    h.mme.handle(h.now, crate::MmeEvent::S1Up { assoc: AssocId(9), peer: [127, 0, 0, 1].into(), outbound_streams: 2 });
    h.s1_on(AssocId(9), 0, s1_setup_request("001", "01", 99));
    let out = h.drain();
    let (assoc, stream, data) = s1_data(&out[0]);
    assert_eq!((assoc, stream), (AssocId(9), 0));
    assert_eq!(read_down(&data).kind, S1apPduKind::Successful_S1Setup);
}

#[test]
fn guti_of_each_attach_is_unique() {
    let mut h = Harness::default();
    let a = h.attach("001010000000001", 1);
    let b = h.attach("001010000000002", 2);
    assert_ne!(a.guti.unwrap().m_tmsi(), b.guti.unwrap().m_tmsi());
    assert_eq!(h.mme.stats().attached, 2);
}

#[test]
fn attach_by_unknown_guti_asks_identity() {
    let mut h = Harness::default();
    let mut ue = TestUe::new("001010000000003", 3);
    let plmn = oxirush_nas::nas_eps::Plmn::new("001", "01").unwrap();
    let foreign = oxirush_nas::nas_eps::Guti::new(plmn, 1, 1, 0xdead_beef);
    h.s1(initial_ue_message(3, ue.attach_request_with(NasEpsMobileIdentity::from_guti(foreign))));
    let d = h.one_down();
    ue.mme_ue_id = d.mme_id;
    let NasEmmMessage::IdentityRequest(req) = plain_emm(&d.nas.unwrap()) else { panic!() };
    assert_eq!(req.identity_type.identity_type(), IdentityType::Imsi);
    assert!(h.mme.poll_timeout().is_some(), "T3470 runs");
    let resp = NasIdentityResponse::new(NasMobileIdentity::from_imsi(&ue.imsi).unwrap());
    h.up(&ue, NasEpsMessage::new_emm(resp).encode().unwrap());
    let (r, req) = expect_s6a(&h.drain());
    let S6aRequest::AuthenticationInformation(air) = req else { panic!() };
    assert_eq!(air.imsi.as_str(), "001010000000003");
    h.finish_attach(&mut ue, r);
    assert_eq!(h.mme.stats().attached, 1);
}

#[test]
fn attach_by_known_guti_reuses_identity_and_replaces_old_context() {
    let mut h = Harness::default();
    let first = h.attach("001010000000004", 4);
    let old_id = first.mme_ue_id.unwrap();
    let mut ue = TestUe::new("001010000000004", 40);
    h.s1(initial_ue_message(40, ue.attach_request_with(NasEpsMobileIdentity::from_guti(first.guti.unwrap()))));
    // AKA starts for the IMSI; the old context stays until the new one has
    // passed security mode (trust.rs has that step).
    let (r, air) = expect_s6a(&h.drain());
    let S6aRequest::AuthenticationInformation(air) = air else { panic!() };
    assert_eq!(air.imsi.as_str(), "001010000000004");
    assert!(h.mme.ues.contains_key(&old_id));
    h.finish_attach(&mut ue, r);
    assert!(!h.mme.ues.contains_key(&old_id));
    assert_eq!(h.mme.stats().attached, 1);
    assert_eq!(h.mme.stats().ues, 1);
}

fn smc_for(cfg: MmeConfig, eea: u8, eia: u8) -> Option<(CipheringAlgorithm, IntegrityAlgorithm)> {
    let mut h = Harness::new(cfg);
    let mut ue = TestUe::new("001010000000005", 5);
    (ue.eea, ue.eia) = (eea, eia);
    h.s1(initial_ue_message(5, ue.attach_request()));
    let (r, _) = expect_s6a(&h.drain());
    let a = h.challenge(&mut ue, r, 32);
    let resp = ue.authenticate(&a);
    h.up(&ue, resp);
    let out = h.drain();
    let nas = read_down(&s1_data(&out[0]).2).nas.unwrap();
    if nas[0] >> 4 == 0 {
        assert_eq!(out.len(), 2, "reject and release");
        let NasEmmMessage::AttachReject(rej) = plain_emm(&nas) else { panic!() };
        assert_eq!(rej.emm_cause.cause(), Some(EmmCause::UeSecurityCapabilitiesMismatch));
        return None;
    }
    let algs = smc_algorithms(&nas);
    // The UE verifies and completes with the selected algorithms.
    let complete = ue.security_mode_complete(&nas);
    h.up(&ue, complete);
    assert!(matches!(expect_s6a(&h.drain()).1, S6aRequest::UpdateLocation(_)));
    Some(algs)
}

#[test]
fn algorithms_follow_priority_and_capability() {
    let cfg = MmeConfig::default();
    // UE supports all: EIA2 first, EEA0 first (default order).
    assert_eq!(smc_for(cfg.clone(), 0xf0, 0xf0), Some((CipheringAlgorithm::EEA0, IntegrityAlgorithm::EIA2)));
    // UE without EIA2: EIA1.
    assert_eq!(smc_for(cfg.clone(), 0xf0, 0xd0), Some((CipheringAlgorithm::EEA0, IntegrityAlgorithm::EIA1)));
    // UE with EIA3 only.
    assert_eq!(smc_for(cfg.clone(), 0xf0, 0x90), Some((CipheringAlgorithm::EEA0, IntegrityAlgorithm::EIA3)));
    // Ciphering preferred EEA2 then EEA1 then EEA3.
    let ciph = MmeConfig { ciphering_order: vec![Eea::Eea2, Eea::Eea1, Eea::Eea3], ..cfg.clone() };
    assert_eq!(smc_for(ciph.clone(), 0xf0, 0xf0), Some((CipheringAlgorithm::EEA2, IntegrityAlgorithm::EIA2)));
    assert_eq!(smc_for(ciph.clone(), 0xd0, 0xf0), Some((CipheringAlgorithm::EEA1, IntegrityAlgorithm::EIA2)));
    assert_eq!(smc_for(ciph, 0x90, 0xf0), Some((CipheringAlgorithm::EEA3, IntegrityAlgorithm::EIA2)));
    let eia3 = MmeConfig { integrity_order: vec![Eia::Eia3, Eia::Eia2], ..cfg.clone() };
    assert_eq!(smc_for(eia3, 0xf0, 0xf0), Some((CipheringAlgorithm::EEA0, IntegrityAlgorithm::EIA3)));
    // A UE with EIA0 only is never given EIA0.
    assert_eq!(smc_for(cfg, 0xf0, 0x80), None);
}

#[test]
fn create_session_transport_error_rejects_with_network_failure() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000006", 6);
    let a = h.challenge(&mut ue, r, 32);
    let resp = ue.authenticate(&a);
    h.up(&ue, resp);
    let smc = h.one_down().nas.unwrap();
    let c = ue.security_mode_complete(&smc);
    h.up(&ue, c);
    let _ = h.drain();
    h.s6a(r, S6aAnswer::UpdateLocation(Ok(subscription())));
    let (r, _) = expect_s11(&h.drain());
    h.mme.handle(
        h.now,
        crate::MmeEvent::S11 { ue: r, response: Err(mobicore_common::requester::TransportError::Timeout) },
    );
    let out = h.drain();
    assert_eq!(out.len(), 2);
    let rej = read_down(&s1_data(&out[0]).2);
    let NasEmmMessage::AttachReject(rej) = ue.receive(&rej.nas.unwrap()) else { panic!() };
    assert_eq!(rej.emm_cause.cause(), Some(EmmCause::NetworkFailure));
    assert_eq!(read_down(&s1_data(&out[1]).2).kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!(h.mme.stats().ues, 0);
}

/// Not a timing assertion: prints how many attaches per second the core
/// and the scripted UE/eNB/HSS together run on one core.
#[test]
#[ignore]
fn attach_rate() {
    let mut h = Harness::default();
    let n = 5000u32;
    let t = std::time::Instant::now();
    for i in 0..n {
        let imsi = format!("00101{:010}", i);
        let _ = h.attach(&imsi, i);
        h.s1(release_request(h.mme.ues.keys().copied().max().unwrap(), i));
        let _ = h.drain();
    }
    let dt = t.elapsed();
    eprintln!("{n} attaches in {dt:?}: {:.0}/s (core + test UE)", n as f64 / dt.as_secs_f64());
    assert_eq!(h.mme.stats().attached, n as usize);
}

#[test]
fn the_imeisv_asked_in_security_mode_goes_to_the_ulr_and_the_create_session_request() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000007", 8);
    ue.imeisv = Some("3560920407930123".into());
    let a = h.challenge(&mut ue, r, 32);
    let resp = ue.authenticate(&a);
    h.up(&ue, resp);
    let smc = h.one_down().nas.unwrap();
    let c = ue.security_mode_complete(&smc);
    h.up(&ue, c);
    let (_, ulr) = expect_s6a(&h.drain());
    let S6aRequest::UpdateLocation(ulr) = ulr else { panic!() };
    // TS 29.272 7.3.3: IMEI is TAC || SNR, the Software-Version the SVN.
    let ti = ulr.terminal_information.expect("Terminal-Information");
    assert_eq!((ti.imei.as_deref(), ti.software_version.as_deref()), (Some("35609204079301"), Some("23")));
    h.s6a(r, S6aAnswer::UpdateLocation(Ok(subscription())));
    let (_, csr) = expect_s11(&h.drain());
    let mobicore_common::s11::S11Request::CreateSession(csr) = csr else { panic!() };
    assert_eq!(csr.mei.as_deref(), Some("3560920407930123"), "TS 29.274 7.2.1: MEI if available");
}
