//! ESM as a real UE uses it (TS 24.301 6): the ESM information transfer
//! flag, PCO both ways, a second PDN connection after attach and its
//! disconnect, the PDN types, the PGW and static address in the Create
//! Session Request, and the GTP cause -> ESM cause table. Every message is
//! built from the specification and travels as S1AP and NAS octets.

use crate::context::EmmState;
use crate::esm::{esm_cause_for, interface_identifier, PDN_IPV4, PDN_IPV4V6, PDN_IPV6};
use crate::test_ue::*;
use crate::MmeAction;
use crate::{MmeConfig, UeRef};
use mobicore_common::s11::*;
use mobicore_common::s6a::*;
use mobicore_common::{Ebi, Fteid, PdnType, Teid};
use oxirush_nas::nas_eps::*;
use oxirush_nas::nas_eps::{PcoDirection, PcoEntry};
use oxirush_s1ap::S1apPduKind;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// The PCO a UE sends asking for DNS server IPv4 addresses (000DH) and the
/// IPv4 link MTU (0010H), TS 24.008 10.5.6.3, as value octets.
fn ue_pco() -> Vec<u8> {
    let pco = oxirush_nas::nas_eps::Pco::new(
        0,
        vec![PcoEntry { identifier: 0x000d, contents: vec![] }, PcoEntry { identifier: 0x0010, contents: vec![] }],
    );
    NasProtocolConfigurationOptions::from_pco(&pco, PcoDirection::Uplink).unwrap().value.to_vec()
}

/// The PGW's answer: DNS 8.8.8.8 and an MTU of 1400.
fn pgw_pco() -> Vec<u8> {
    let pco = oxirush_nas::nas_eps::Pco::new(
        0,
        vec![
            PcoEntry { identifier: 0x000d, contents: vec![8, 8, 8, 8] },
            PcoEntry { identifier: 0x0010, contents: 1400u16.to_be_bytes().to_vec() },
        ],
    );
    NasProtocolConfigurationOptions::from_pco(&pco, PcoDirection::Downlink).unwrap().value.to_vec()
}

/// Attach with `pdn` in the ATTACH REQUEST up to and with the SECURITY
/// MODE COMPLETE; returns what the MME did next.
fn attach_to_smc(h: &mut Harness, ue: &mut TestUe, pdn: NasPdnConnectivityRequest) -> (UeRef, Vec<MmeAction>) {
    let imsi = NasEpsMobileIdentity::from_imsi(&ue.imsi).unwrap();
    h.s1(initial_ue_message(ue.enb_ue_id, ue.attach_request_pdn(imsi, pdn)));
    let (r, _) = expect_s6a(&h.drain());
    let a = h.challenge(ue, r, 32);
    let resp = ue.authenticate(&a);
    h.up(ue, resp);
    let smc = h.one_down().nas.unwrap();
    let complete = ue.security_mode_complete(&smc);
    h.up(ue, complete);
    (r, h.drain())
}

/// From the Update Location Request to the Create Session Request.
fn ulr_to_csr(h: &mut Harness, r: UeRef, out: &[MmeAction], sub: SubscriptionData) -> CreateSessionRequest {
    assert!(matches!(expect_s6a(out).1, S6aRequest::UpdateLocation(_)), "{out:?}");
    h.s6a(r, S6aAnswer::UpdateLocation(Ok(sub)));
    match expect_s11(&h.drain()) {
        (_, S11Request::CreateSession(c)) => c,
        other => panic!("{other:?}"),
    }
}

fn csr_ok(ebi: u8) -> CreateSessionResponse {
    let S11Response::CreateSession(mut r) = create_session_ok() else { unreachable!() };
    r.bearer_ebi = Ebi(ebi);
    r
}

/// The default bearer request inside the ATTACH ACCEPT of an ICS.
fn accepted_bearer(ue: &mut TestUe, ics: Down) -> NasActivateDefaultEpsBearerContextRequest {
    assert_eq!(ics.kind, S1apPduKind::Initiating_InitialContextSetup);
    let NasEmmMessage::AttachAccept(acc) = ue.receive(&ics.nas.unwrap()) else { panic!("not an attach accept") };
    match acc.esm_message_container.decode_as_esm_message().unwrap() {
        NasEpsMessage::Esm(_, NasEsmMessage::ActivateDefaultEpsBearerContextRequest(r)) => *r,
        other => panic!("{other:?}"),
    }
}

/// The ATTACH REJECT's cause and the ESM cause of its PDN CONNECTIVITY REJECT.
fn attach_reject_causes(ue: &mut TestUe, out: &[MmeAction]) -> (Option<EmmCause>, Option<EsmCause>) {
    let d = read_down(&s1_data(&out[0]).2);
    let NasEmmMessage::AttachReject(rej) = ue.receive(&d.nas.unwrap()) else { panic!("not an attach reject") };
    let esm = rej.esm_message_container.as_ref().map(|c| match c.decode_as_esm_message().unwrap() {
        NasEpsMessage::Esm(_, NasEsmMessage::PdnConnectivityReject(p)) => p.esm_cause.cause().unwrap(),
        other => panic!("{other:?}"),
    });
    (rej.emm_cause.cause(), esm)
}

#[test]
fn esm_information_transfer_flag_gets_apn_and_pco_after_security_mode() {
    let mut h = Harness::default();
    let mut ue = TestUe::new("001010000000101", 101);
    let pdn = pdn_connectivity_request(PdnType4::Ipv4)
        .with_esm_information_transfer_flag(NasEsmInformationTransferFlag::from_required(true));
    let (r, out) = attach_to_smc(&mut h, &mut ue, pdn);
    // TS 24.301 6.6.1.2.2: ESM INFORMATION REQUEST, ciphered, before the ULR.
    assert_eq!(out.len(), 1, "{out:?}");
    let (ebi, pti, msg) = ue.receive_esm(&read_down(&s1_data(&out[0]).2).nas.unwrap());
    assert!(matches!(msg, NasEsmMessage::EsmInformationRequest(_)), "{msg:?}");
    assert_eq!((ebi, pti), (0, 1));
    assert!(h.mme.poll_timeout().is_some(), "T3489 runs");
    let resp = NasEsmInformationResponse::new()
        .with_access_point_name(NasAccessPointName::from_string("ims").unwrap())
        .with_protocol_configuration_options(NasProtocolConfigurationOptions::new(ue_pco()));
    let resp = ue.protect(&NasEpsMessage::new_esm(resp, 0, 1));
    h.up(&ue, resp);
    let out = h.drain();
    let csr = ulr_to_csr(&mut h, r, &out, subscription());
    assert_eq!(csr.apn, "ims", "the APN of the ESM INFORMATION RESPONSE");
    assert_eq!(csr.pco, Some(ue_pco()));
    assert_eq!(h.mme.counters().value("esm_information_response"), 1);
}

/// A whole attach with the ESM information transfer flag and PCO (the
/// APN "ims" named only in the ESM INFORMATION RESPONSE).
pub(super) fn attach_with_esm_information(h: &mut Harness, imsi: &str, enb_ue_id: u32) -> TestUe {
    let mut ue = TestUe::new(imsi, enb_ue_id);
    let pdn = pdn_connectivity_request(PdnType4::Ipv4)
        .with_esm_information_transfer_flag(NasEsmInformationTransferFlag::from_required(true));
    let (r, out) = attach_to_smc(h, &mut ue, pdn);
    let _ = ue.receive_esm(&read_down(&s1_data(&out[0]).2).nas.unwrap());
    let resp = NasEsmInformationResponse::new()
        .with_access_point_name(NasAccessPointName::from_string("ims").unwrap())
        .with_protocol_configuration_options(NasProtocolConfigurationOptions::new(ue_pco()));
    let resp = ue.protect(&NasEpsMessage::new_esm(resp, 0, 1));
    h.up(&ue, resp);
    let out = h.drain();
    let csr = ulr_to_csr(h, r, &out, subscription());
    assert_eq!(csr.apn, "ims");
    let mut resp = csr_ok(5);
    resp.pco = Some(pgw_pco());
    h.s11(r, S11Response::CreateSession(resp));
    let ics = h.one_down();
    // TS 23.401 4.7.3: the ims APN-AMBR (1/1 Mbit/s) under the subscribed 50/100.
    assert_eq!(ics.ue_ambr, Some((1_000_000, 1_000_000)));
    let bearer = accepted_bearer(&mut ue, ics);
    assert!(bearer.protocol_configuration_options.is_some());
    h.s1(ics_response(ue.mme_ue_id.unwrap(), enb_ue_id, 0xabc));
    assert!(matches!(expect_s11(&h.drain()).1, S11Request::ModifyBearer(_)));
    let complete = ue.attach_complete();
    h.up(&ue, complete);
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.ues[&ue.mme_ue_id.unwrap()].emm, EmmState::Registered);
    ue
}

#[test]
fn esm_information_attach_completes() {
    let mut h = Harness::default();
    attach_with_esm_information(&mut h, "001010000000100", 100);
}

#[test]
fn esm_information_apn_not_subscribed_is_rejected_with_27() {
    let mut h = Harness::default();
    let mut ue = TestUe::new("001010000000102", 102);
    let pdn = pdn_connectivity_request(PdnType4::Ipv4)
        .with_esm_information_transfer_flag(NasEsmInformationTransferFlag::from_required(true));
    let (r, out) = attach_to_smc(&mut h, &mut ue, pdn);
    let _ = ue.receive_esm(&read_down(&s1_data(&out[0]).2).nas.unwrap());
    let resp =
        NasEsmInformationResponse::new().with_access_point_name(NasAccessPointName::from_string("corporate").unwrap());
    let resp = ue.protect(&NasEpsMessage::new_esm(resp, 0, 1));
    h.up(&ue, resp);
    let out = h.drain();
    assert!(matches!(expect_s6a(&out).1, S6aRequest::UpdateLocation(_)));
    h.s6a(r, S6aAnswer::UpdateLocation(Ok(subscription())));
    let out = h.drain();
    // TS 24.301 6.5.1.4: #27 missing or unknown APN, in an ATTACH REJECT #19.
    assert_eq!(attach_reject_causes(&mut ue, &out), (Some(EmmCause::EsmFailure), Some(EsmCause::MissingOrUnknownApn)));
    assert_eq!(h.mme.stats().ues, 0);
}

#[test]
fn t3489_retransmits_twice_then_rejects_with_53() {
    let mut h = Harness::default();
    let mut ue = TestUe::new("001010000000103", 103);
    let pdn = pdn_connectivity_request(PdnType4::Ipv4)
        .with_esm_information_transfer_flag(NasEsmInformationTransferFlag::from_required(true));
    let (_, out) = attach_to_smc(&mut h, &mut ue, pdn);
    assert_eq!(out.len(), 1);
    for _ in 0..2 {
        h.advance(Duration::from_secs(4));
        let d = h.one_down();
        let (_, _, msg) = ue.receive_esm(&d.nas.unwrap());
        assert!(matches!(msg, NasEsmMessage::EsmInformationRequest(_)));
    }
    // 6.6.1.2.6 b: the third expiry rejects the attach.
    h.advance(Duration::from_secs(4));
    let out = h.drain();
    assert_eq!(
        attach_reject_causes(&mut ue, &out),
        (Some(EmmCause::EsmFailure), Some(EsmCause::EsmInformationNotReceived))
    );
    assert_eq!(h.mme.counters().value("t3489_abort"), 1);
}

#[test]
fn pco_asking_dns_and_mtu_goes_to_the_csr_and_the_answer_to_the_ue() {
    let mut h = Harness::default();
    let mut ue = TestUe::new("001010000000104", 104);
    let pdn = pdn_connectivity_request(PdnType4::Ipv4)
        .with_protocol_configuration_options(NasProtocolConfigurationOptions::new(ue_pco()));
    let (r, out) = attach_to_smc(&mut h, &mut ue, pdn);
    let csr = ulr_to_csr(&mut h, r, &out, subscription());
    assert_eq!(csr.pco, Some(ue_pco()), "TS 24.301 6.5.1.2: the UE's PCO to the PGW");
    let mut resp = csr_ok(5);
    resp.pco = Some(pgw_pco());
    h.s11(r, S11Response::CreateSession(resp));
    let bearer = accepted_bearer(&mut ue, h.one_down());
    let pco = bearer.protocol_configuration_options.expect("the PGW's PCO in the accept");
    assert_eq!(pco.value.to_vec(), pgw_pco());
    let parsed = pco.pco(PcoDirection::Downlink).unwrap();
    assert_eq!(parsed.entry(0x000d).unwrap().contents, vec![8, 8, 8, 8]);
}

#[test]
fn epco_is_answered_in_an_epco() {
    let mut h = Harness::default();
    let mut ue = TestUe::new("001010000000105", 105);
    let pdn = pdn_connectivity_request(PdnType4::Ipv4)
        .with_extended_protocol_configuration_options(NasExtendedProtocolConfigurationOptions::new(ue_pco()));
    let (r, out) = attach_to_smc(&mut h, &mut ue, pdn);
    let csr = ulr_to_csr(&mut h, r, &out, subscription());
    assert_eq!(csr.pco, Some(ue_pco()));
    let mut resp = csr_ok(5);
    resp.pco = Some(pgw_pco());
    h.s11(r, S11Response::CreateSession(resp));
    let bearer = accepted_bearer(&mut ue, h.one_down());
    assert!(bearer.protocol_configuration_options.is_none());
    assert_eq!(bearer.extended_protocol_configuration_options.unwrap().value.to_vec(), pgw_pco());
}

/// An attached UE (default bearer 5 on "internet") asks for "ims" (PTI 2):
/// the full S11 and E-RAB exchange. Returns the UE.
fn second_pdn(h: &mut Harness, imsi: &str, enb_ue_id: u32) -> TestUe {
    let mut ue = h.attach(imsi, enb_ue_id);
    let id = ue.mme_ue_id.unwrap();
    let req = pdn_connectivity_request(PdnType4::Ipv4)
        .with_access_point_name(NasAccessPointName::from_string("ims").unwrap())
        .with_protocol_configuration_options(NasProtocolConfigurationOptions::new(ue_pco()));
    let up = ue.protect(&NasEpsMessage::new_esm(req, 0, 2));
    h.up(&ue, up);
    let (r, req) = expect_s11(&h.drain());
    let S11Request::CreateSession(csr) = req else { panic!("{req:?}") };
    // TS 23.401 5.10.2: the same MME S11 F-TEID, a new EBI.
    assert_eq!(csr.sender_fteid, Fteid { teid: Teid(id), ipv4: h.mme.config().s11_local_ip });
    assert_eq!((csr.apn.as_str(), csr.bearer.ebi, csr.bearer.qci), ("ims", Ebi(6), 5));
    assert_eq!(csr.pdn_type, PdnType::Ipv4);
    assert_eq!(csr.pgw_s5s8_c, Some(Ipv4Addr::LOCALHOST));
    assert_eq!(csr.pco, Some(ue_pco()));
    let mut resp = csr_ok(6);
    resp.paa = Some(Ipv4Addr::new(10, 46, 0, 7));
    resp.s1u_sgw_fteid = Some(Fteid { teid: Teid(0x7000_0002), ipv4: Ipv4Addr::new(127, 0, 0, 7) });
    resp.pco = Some(pgw_pco());
    h.s11(r, S11Response::CreateSession(resp));
    // TS 36.413 8.2.1: E-RAB SETUP REQUEST carrying the default bearer request.
    let setup = h.one_down();
    assert_eq!(setup.kind, S1apPduKind::Initiating_E_RABSetup);
    // TS 23.401 4.7.3: the UE-AMBR is now the sum of both APN-AMBRs
    // (internet 10/20 Mbit/s, ims 1/1), under the subscribed 50/100.
    assert_eq!(setup.ue_ambr, Some((11_000_000, 21_000_000)));
    let (ebi, pti, msg) = ue.receive_esm(&setup.nas.unwrap());
    let NasEsmMessage::ActivateDefaultEpsBearerContextRequest(b) = msg else { panic!("{msg:?}") };
    assert_eq!((ebi, pti), (6, 2));
    assert_eq!(b.access_point_name.as_string().as_deref(), Some("ims"));
    assert_eq!(b.pdn_address.ipv4(), Some([10, 46, 0, 7]));
    assert_eq!(b.protocol_configuration_options.unwrap().value.to_vec(), pgw_pco());
    assert!(h.mme.poll_timeout().is_some(), "T3485 runs");
    h.s1(erab_setup_response(id, enb_ue_id, 6, 0xdef));
    let (_, req) = expect_s11(&h.drain());
    let S11Request::ModifyBearer(mb) = req else { panic!("{req:?}") };
    assert_eq!(mb.ebi, Ebi(6));
    assert_eq!(mb.s1u_enb_fteid, Fteid { teid: Teid(0xdef), ipv4: Ipv4Addr::new(127, 0, 0, 9) });
    h.s11(r, S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, bearer_cause: None }));
    let accept = ue.protect(&NasEpsMessage::new_esm(NasActivateDefaultEpsBearerContextAccept::new(), 6, 0));
    h.up(&ue, accept);
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.counters().value("pdn_connectivity_complete"), 1);
    assert_eq!(h.mme.poll_timeout(), None, "T3485 stopped");
    let ctx = &h.mme.ues[&id];
    assert_eq!(ctx.sessions.iter().map(|s| s.ebi).collect::<Vec<_>>(), vec![5, 6]);
    assert!(ctx.esm.is_none());
    ue
}

#[test]
fn pdn_connectivity_after_attach_for_ims() {
    let mut h = Harness::default();
    second_pdn(&mut h, "001010000000106", 106);
}

#[test]
fn pdn_connectivity_accept_before_erab_response_completes_too() {
    let mut h = Harness::default();
    let mut ue = h.attach("001010000000107", 107);
    let id = ue.mme_ue_id.unwrap();
    let req = pdn_connectivity_request(PdnType4::Ipv4)
        .with_access_point_name(NasAccessPointName::from_string("ims").unwrap());
    let up = ue.protect(&NasEpsMessage::new_esm(req, 0, 3));
    h.up(&ue, up);
    let (r, _) = expect_s11(&h.drain());
    h.s11(r, S11Response::CreateSession(csr_ok(6)));
    let _ = h.one_down();
    let accept = ue.protect(&NasEpsMessage::new_esm(NasActivateDefaultEpsBearerContextAccept::new(), 6, 0));
    h.up(&ue, accept);
    assert_eq!(h.mme.counters().value("pdn_connectivity_complete"), 0);
    h.s1(erab_setup_response(id, 107, 6, 0xdef));
    assert!(matches!(expect_s11(&h.drain()).1, S11Request::ModifyBearer(_)));
    assert_eq!(h.mme.counters().value("pdn_connectivity_complete"), 1);
}

#[test]
fn pdn_connectivity_rejections_carry_the_right_cause() {
    let mut h = Harness::default();
    let mut ue = h.attach("001010000000108", 108);
    let ask = |h: &mut Harness, ue: &mut TestUe, apn: Option<&str>, pti: u8| {
        let mut req = pdn_connectivity_request(PdnType4::Ipv4);
        if let Some(a) = apn {
            req = req.with_access_point_name(NasAccessPointName::from_string(a).unwrap());
        }
        let up = ue.protect(&NasEpsMessage::new_esm(req, 0, pti));
        h.up(ue, up);
        let d = h.one_down();
        match ue.receive_esm(&d.nas.unwrap()) {
            (0, p, NasEsmMessage::PdnConnectivityReject(r)) if p == pti => r.esm_cause.cause().unwrap(),
            other => panic!("{other:?}"),
        }
    };
    // 6.5.1.4: not subscribed (#27); the default APN again (#55).
    assert_eq!(ask(&mut h, &mut ue, Some("corporate"), 2), EsmCause::MissingOrUnknownApn);
    assert_eq!(ask(&mut h, &mut ue, Some("internet"), 3), EsmCause::MultiplePdnConnectionsForAGivenApnNotAllowed);
    assert_eq!(ask(&mut h, &mut ue, None, 4), EsmCause::MultiplePdnConnectionsForAGivenApnNotAllowed);
    // The S-GW refuses: its cause, mapped (TS 29.274 78 -> #27).
    let req = pdn_connectivity_request(PdnType4::Ipv4)
        .with_access_point_name(NasAccessPointName::from_string("ims").unwrap());
    let up = ue.protect(&NasEpsMessage::new_esm(req, 0, 5));
    h.up(&ue, up);
    let (r, _) = expect_s11(&h.drain());
    let mut resp = csr_ok(6);
    resp.cause = GtpCause(103);
    resp.sgw_fteid = None;
    h.s11(r, S11Response::CreateSession(resp));
    let d = h.one_down();
    let (_, _, NasEsmMessage::PdnConnectivityReject(rej)) = ue.receive_esm(&d.nas.unwrap()) else { panic!() };
    assert_eq!(rej.esm_cause.cause(), Some(EsmCause::NetworkFailure), "GTP 103 -> #38, not #26");
    assert_eq!(h.mme.ues[&ue.mme_ue_id.unwrap()].sessions.len(), 1);
    assert_eq!(h.mme.ues[&ue.mme_ue_id.unwrap()].emm, EmmState::Registered);
}

#[test]
fn unprotected_pdn_connectivity_request_is_discarded() {
    let mut h = Harness::default();
    let ue = h.attach("001010000000109", 109);
    let req = pdn_connectivity_request(PdnType4::Ipv4)
        .with_access_point_name(NasAccessPointName::from_string("ims").unwrap());
    let plain = NasEpsMessage::new_esm(req, 0, 2).encode().unwrap();
    h.up(&ue, plain);
    assert!(h.drain().is_empty(), "TS 24.301 4.4.4.3: no ESM without integrity");
}

/// The PDN DISCONNECT REQUEST of PDN `ebi` (PTI `pti`), protected.
fn disconnect(ue: &mut TestUe, ebi: u8, pti: u8) -> Vec<u8> {
    let r = NasPdnDisconnectRequest::new(NasLinkedEpsBearerIdentity::from_bearer_identity(ebi).unwrap());
    ue.protect(&NasEpsMessage::new_esm(r, 0, pti))
}

/// The UE disconnects its "ims" PDN (default bearer 6): the whole exchange.
fn disconnect_ims(h: &mut Harness, ue: &mut TestUe, pti: u8) {
    let id = ue.mme_ue_id.unwrap();
    let before = h.mme.counters().value("pdn_disconnect_complete");
    let up = disconnect(ue, 6, pti);
    h.up(ue, up);
    let (r, req) = expect_s11(&h.drain());
    assert_eq!(req, S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: SGW_S11.teid, linked_ebi: Ebi(6) }));
    h.s11(r, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    // TS 36.413 8.2.3: E-RAB RELEASE COMMAND with the deactivation.
    let rel = h.one_down();
    assert_eq!(rel.kind, S1apPduKind::Initiating_E_RABRelease);
    assert_eq!(rel.ue_ambr, Some((10_000_000, 20_000_000)), "the internet PDN's APN-AMBR alone");
    let (ebi, got_pti, msg) = ue.receive_esm(&rel.nas.unwrap());
    let NasEsmMessage::DeactivateEpsBearerContextRequest(d) = msg else { panic!("{msg:?}") };
    assert_eq!((ebi, got_pti, d.esm_cause.cause()), (6, pti, Some(EsmCause::RegularDeactivation)));
    assert!(h.mme.poll_timeout().is_some(), "T3495 runs");
    h.s1(erab_release_response(id, ue.enb_ue_id, 6));
    let accept = ue.protect(&NasEpsMessage::new_esm(NasDeactivateEpsBearerContextAccept::new(), 6, pti));
    h.up(ue, accept);
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.counters().value("pdn_disconnect_complete"), before + 1);
    assert_eq!(h.mme.poll_timeout(), None);
}

/// A second PDN connection and its disconnect.
pub(super) fn second_pdn_and_disconnect(h: &mut Harness, imsi: &str, enb_ue_id: u32) {
    let mut ue = second_pdn(h, imsi, enb_ue_id);
    disconnect_ims(h, &mut ue, 8);
}

#[test]
fn pdn_disconnect_deletes_the_pdn_and_the_last_one_stays() {
    let mut h = Harness::default();
    let mut ue = second_pdn(&mut h, "001010000000110", 110);
    let id = ue.mme_ue_id.unwrap();
    // No PDN with default bearer 9: #43 (6.5.2.4).
    let up = disconnect(&mut ue, 9, 7);
    h.up(&ue, up);
    let (_, _, NasEsmMessage::PdnDisconnectReject(rej)) = ue.receive_esm(&h.one_down().nas.unwrap()) else { panic!() };
    assert_eq!(rej.esm_cause.cause(), Some(EsmCause::InvalidEpsBearerIdentity));
    disconnect_ims(&mut h, &mut ue, 8);
    assert_eq!(h.mme.ues[&id].sessions.iter().map(|s| s.ebi).collect::<Vec<_>>(), vec![5]);
    // The last PDN connection: #49.
    let up = disconnect(&mut ue, 5, 9);
    h.up(&ue, up);
    let (_, _, NasEsmMessage::PdnDisconnectReject(rej)) = ue.receive_esm(&h.one_down().nas.unwrap()) else { panic!() };
    assert_eq!(rej.esm_cause.cause(), Some(EsmCause::LastPdnDisconnectionNotAllowed));
}

#[test]
fn t3495_retransmits_then_deactivates_locally() {
    let mut h = Harness::default();
    let mut ue = second_pdn(&mut h, "001010000000111", 111);
    let r = NasPdnDisconnectRequest::new(NasLinkedEpsBearerIdentity::from_bearer_identity(6).unwrap());
    let up = ue.protect(&NasEpsMessage::new_esm(r, 0, 4));
    h.up(&ue, up);
    let (r, _) = expect_s11(&h.drain());
    h.s11(r, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    let _ = h.one_down();
    for _ in 0..4 {
        h.advance(Duration::from_secs(8));
        let (_, _, msg) = ue.receive_esm(&h.one_down().nas.unwrap());
        assert!(matches!(msg, NasEsmMessage::DeactivateEpsBearerContextRequest(_)));
    }
    h.advance(Duration::from_secs(8));
    assert!(h.drain().is_empty());
    let ctx = &h.mme.ues[&ue.mme_ue_id.unwrap()];
    assert!(ctx.esm.is_none());
    assert_eq!(ctx.emm, EmmState::Registered, "the UE stays attached");
}

#[test]
fn detach_deletes_every_pdn_connection() {
    let mut h = Harness::default();
    let mut ue = second_pdn(&mut h, "001010000000112", 112);
    let d = ue.detach_request(false);
    h.up(&ue, d);
    let out = h.drain();
    let dsrs: Vec<_> = out
        .iter()
        .map(|a| match a {
            MmeAction::S11 { ue, request: S11Request::DeleteSession(d) } => (*ue, d.linked_ebi),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(dsrs.iter().map(|d| d.1).collect::<Vec<_>>(), vec![Ebi(5), Ebi(6)]);
    h.s11(dsrs[0].0, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    assert!(h.drain().is_empty(), "the detach waits for both");
    h.s11(dsrs[1].0, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    let out = h.drain();
    assert_eq!(out.len(), 2, "DETACH ACCEPT and the release");
    assert_eq!(h.mme.stats().ues, 0);
}

/// The PDN address type code and ESM cause of the accept, or the ESM
/// cause of the reject.
type PdnOutcome = Result<(u8, Option<EsmCause>), Option<EsmCause>>;

/// What an attach asking for PDN type `requested`, subscribed `subscribed`,
/// granted `grant` (type, GTP cause) gives: the CSR's PDN type, and the PDN
/// address type and ESM cause of the accept, or the reject's ESM cause.
fn pdn_type_case(
    requested: PdnType4,
    subscribed: PdnType,
    grant: Option<(PdnType, u8)>,
) -> (Option<PdnType>, PdnOutcome) {
    let mut h = Harness::default();
    let mut ue = TestUe::new("001010000000120", 120);
    let (r, out) = attach_to_smc(&mut h, &mut ue, pdn_connectivity_request(requested));
    let mut sub = subscription();
    sub.apns[0].pdn_type = subscribed;
    assert!(matches!(expect_s6a(&out).1, S6aRequest::UpdateLocation(_)));
    h.s6a(r, S6aAnswer::UpdateLocation(Ok(sub)));
    let out = h.drain();
    let csr = match out.as_slice() {
        [MmeAction::S11 { request: S11Request::CreateSession(c), .. }] => c.clone(),
        _ => return (None, Err(attach_reject_causes(&mut ue, &out).1)),
    };
    let (t, cause) = grant.unwrap();
    let mut resp = csr_ok(5);
    resp.cause = GtpCause(cause);
    resp.pdn_type = Some(t);
    let prefix: Ipv6Addr = "2001:db8:0:1::".parse().unwrap();
    resp.paa = matches!(t, PdnType::Ipv4 | PdnType::Ipv4v6).then_some(PAA);
    resp.ipv6_prefix = matches!(t, PdnType::Ipv6 | PdnType::Ipv4v6).then_some((prefix, 64));
    h.s11(r, S11Response::CreateSession(resp));
    // A session granted but refused to the UE is deleted at the S-GW.
    let (out, s11): (Vec<MmeAction>, Vec<MmeAction>) =
        h.drain().into_iter().partition(|a| matches!(a, MmeAction::S1Send { .. }));
    let d = read_down(&s1_data(&out[0]).2);
    if d.kind != S1apPduKind::Initiating_InitialContextSetup {
        assert!(matches!(s11.as_slice(), [MmeAction::S11 { request: S11Request::DeleteSession(_), .. }]));
        return (Some(csr.pdn_type), Err(attach_reject_causes(&mut ue, &out).1));
    }
    assert!(s11.is_empty());
    let b = accepted_bearer(&mut ue, d);
    let address = b.pdn_address.pdn_type_raw().unwrap();
    match t {
        PdnType::Ipv4 => assert_eq!(b.pdn_address.ipv4(), Some(PAA.octets())),
        _ => assert!(matches!(
            b.pdn_address.pdn_address(),
            Some(PdnAddress::Ipv6InterfaceId(iid) | PdnAddress::Ipv4v6 { ipv6_interface_id: iid, .. })
                if iid == interface_identifier(prefix)
        )),
    }
    (Some(csr.pdn_type), Ok((address, b.esm_cause.and_then(|c| c.cause()))))
}

#[test]
fn pdn_types_are_answered_per_ts_24_301_6_5_1_3() {
    use PdnType::*;
    // IPv6 asked, IPv6 granted: the interface identifier.
    assert_eq!(pdn_type_case(PdnType4::Ipv6, Ipv4v6, Some((Ipv6, 16))), (Some(Ipv6), Ok((PDN_IPV6, None))));
    // IPv4v6 asked and granted: both.
    assert_eq!(pdn_type_case(PdnType4::Ipv4v6, Ipv4v6, Some((Ipv4v6, 16))), (Some(Ipv4v6), Ok((PDN_IPV4V6, None))));
    // IPv4v6 asked, one type granted by network preference (cause 18): #50 / #51.
    let v4 = pdn_type_case(PdnType4::Ipv4v6, Ipv4v6, Some((Ipv4, 18)));
    assert_eq!(v4, (Some(Ipv4v6), Ok((PDN_IPV4, Some(EsmCause::PdnTypeIpv4OnlyAllowed)))));
    let v6 = pdn_type_case(PdnType4::Ipv4v6, Ipv4v6, Some((Ipv6, 18)));
    assert_eq!(v6, (Some(Ipv4v6), Ok((PDN_IPV6, Some(EsmCause::PdnTypeIpv6OnlyAllowed)))));
    // ... single address bearers only (cause 19): #52.
    let single = pdn_type_case(PdnType4::Ipv4v6, Ipv4v6, Some((Ipv4, 19)));
    assert_eq!(single, (Some(Ipv4v6), Ok((PDN_IPV4, Some(EsmCause::SingleAddressBearersOnlyAllowed)))));
    // TS 23.401 5.3.1.1: IPv4v6 asked, IPv4 subscribed: IPv4 asked of the PGW, #50.
    let sub_v4 = pdn_type_case(PdnType4::Ipv4v6, Ipv4, Some((Ipv4, 16)));
    assert_eq!(sub_v4, (Some(Ipv4), Ok((PDN_IPV4, Some(EsmCause::PdnTypeIpv4OnlyAllowed)))));
    // IPv6 asked, IPv4 only subscribed: rejected with #50, no CSR.
    assert_eq!(pdn_type_case(PdnType4::Ipv6, Ipv4, None), (None, Err(Some(EsmCause::PdnTypeIpv4OnlyAllowed))));
    assert_eq!(pdn_type_case(PdnType4::Ipv4, Ipv6, None), (None, Err(Some(EsmCause::PdnTypeIpv6OnlyAllowed))));
    // Never "accepted" with a type the UE did not ask for.
    let wrong = pdn_type_case(PdnType4::Ipv4, Ipv4v6, Some((Ipv6, 16)));
    assert_eq!(wrong, (Some(Ipv4), Err(Some(EsmCause::RequestRejectedByServingGwOrPdnGw))));
}

#[test]
fn pgw_and_static_address_come_from_subscription_then_config() {
    let cfg = MmeConfig {
        mtmsi_seed: Some(1),
        pgw: Some(Ipv4Addr::new(192, 0, 2, 1)),
        pgw_by_apn: [("IMS".to_string(), Ipv4Addr::new(192, 0, 2, 2))].into_iter().collect(),
        ..MmeConfig::default()
    };
    let csr_for = |sub: SubscriptionData, apn: Option<&str>| {
        let mut h = Harness::new(cfg.clone());
        let mut ue = TestUe::new("001010000000121", 121);
        let mut pdn = pdn_connectivity_request(PdnType4::Ipv4);
        if let Some(a) = apn {
            pdn = pdn.with_access_point_name(NasAccessPointName::from_string(a).unwrap());
        }
        let (r, out) = attach_to_smc(&mut h, &mut ue, pdn);
        ulr_to_csr(&mut h, r, &out, sub)
    };
    // `pgw` for an APN without its own.
    let c = csr_for(subscription(), None);
    assert_eq!((c.pgw_s5s8_c, c.static_ipv4), (Some(Ipv4Addr::new(192, 0, 2, 1)), None));
    // `pgw_by_apn`, case-insensitive.
    assert_eq!(csr_for(subscription(), Some("ims")).pgw_s5s8_c, Some(Ipv4Addr::new(192, 0, 2, 2)));
    // TS 23.401 4.3.8.1: the subscription's PDN GW first; its static address.
    let mut sub = subscription();
    sub.apns[0].pdn_gw = Some(Ipv4Addr::new(198, 51, 100, 1).into());
    sub.apns[0].served_party_ipv4 = Some(Ipv4Addr::new(10, 45, 9, 9));
    let c = csr_for(sub, None);
    assert_eq!(c.pgw_s5s8_c, Some(Ipv4Addr::new(198, 51, 100, 1)));
    assert_eq!(c.static_ipv4, Some(Ipv4Addr::new(10, 45, 9, 9)));
    // APN-AMBR of the subscription, as before.
    assert_eq!(c.apn_ambr, subscription().apns[0].ambr);
    // Without any configuration: loopback (the demo's combined S/P-GW-C).
    assert_eq!(MmeConfig::default().pgw_for("internet", None), Ipv4Addr::LOCALHOST);
}

/// One row per GTP cause (TS 29.274 Table 8.4-1 -> TS 24.301 6.5.1.4).
#[test]
fn gtp_causes_map_to_esm_causes() {
    let rows: &[(u8, u8, EsmCause)] = &[
        (78, PDN_IPV4, EsmCause::MissingOrUnknownApn),
        (73, PDN_IPV4, EsmCause::InsufficientResources),
        (84, PDN_IPV4, EsmCause::InsufficientResources),
        (91, PDN_IPV4, EsmCause::InsufficientResources),
        (113, PDN_IPV4, EsmCause::InsufficientResources),
        (120, PDN_IPV4, EsmCause::InsufficientResources),
        (83, PDN_IPV6, EsmCause::PdnTypeIpv4OnlyAllowed),
        (83, PDN_IPV4, EsmCause::PdnTypeIpv6OnlyAllowed),
        (83, PDN_IPV4V6, EsmCause::UnknownPdnType),
        (92, PDN_IPV4, EsmCause::UserAuthenticationOrAuthorizationFailed),
        (93, PDN_IPV4, EsmCause::RequestedServiceOptionNotSubscribed),
        (94, PDN_IPV4, EsmCause::RequestRejectedUnspecified),
        (116, PDN_IPV4, EsmCause::MultiplePdnConnectionsForAGivenApnNotAllowed),
        (64, PDN_IPV4, EsmCause::NetworkFailure),
        (65, PDN_IPV4, EsmCause::NetworkFailure),
        (67, PDN_IPV4, EsmCause::NetworkFailure),
        (69, PDN_IPV4, EsmCause::NetworkFailure),
        (70, PDN_IPV4, EsmCause::NetworkFailure),
        (72, PDN_IPV4, EsmCause::NetworkFailure),
        (100, PDN_IPV4, EsmCause::NetworkFailure),
        (103, PDN_IPV4, EsmCause::NetworkFailure),
        (107, PDN_IPV4, EsmCause::NetworkFailure),
        (89, PDN_IPV4, EsmCause::RequestRejectedByServingGwOrPdnGw),
        (82, PDN_IPV4, EsmCause::RequestRejectedByServingGwOrPdnGw),
    ];
    for &(gtp, requested, esm) in rows {
        assert_eq!(esm_cause_for(GtpCause(gtp), requested), esm, "GTP cause {gtp}");
    }
}

/// The table end to end: a rejected Create Session Request of the attach
/// gives the UE the mapped ESM cause in the PDN CONNECTIVITY REJECT.
#[test]
fn attach_create_session_rejections_reach_the_ue_with_their_cause() {
    for (gtp, esm) in [
        (78, EsmCause::MissingOrUnknownApn),
        (84, EsmCause::InsufficientResources),
        (92, EsmCause::UserAuthenticationOrAuthorizationFailed),
        (94, EsmCause::RequestRejectedUnspecified),
        (103, EsmCause::NetworkFailure),
    ] {
        let mut h = Harness::default();
        let mut ue = TestUe::new("001010000000122", 122);
        let (r, out) = attach_to_smc(&mut h, &mut ue, pdn_connectivity_request(PdnType4::Ipv4));
        ulr_to_csr(&mut h, r, &out, subscription());
        let resp = CreateSessionResponse {
            cause: GtpCause(gtp),
            sgw_fteid: None,
            paa: None,
            s1u_sgw_fteid: None,
            ..csr_ok(5)
        };
        h.s11(r, S11Response::CreateSession(resp));
        let out = h.drain();
        assert_eq!(attach_reject_causes(&mut ue, &out), (Some(EmmCause::EsmFailure), Some(esm)), "GTP cause {gtp}");
    }
}
