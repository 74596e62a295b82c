//! Trust boundaries of the MME (issue: nothing about a UE changes before
//! the message that changes it is authenticated; everything a peer can
//! make us hold is bounded).

use super::*;
use crate::context::EmmState;
use crate::{MmeAction, MmeConfig, MmeEvent};
use bytes::Bytes;
use mobicore_common::s11::*;
use mobicore_common::s6a::*;
use mobicore_common::sctp_api::AssocId;
use oxirush_nas::nas_eps::*;
use oxirush_s1ap::S1apPduKind;

/// Everything of UE `id` that an attacker must not be able to change.
fn snapshot(h: &Harness, id: u32) -> String {
    let u = &h.mme.ues[&id];
    let counts =
        u.security.as_ref().map(|s| (s.ctx.nas_count(Direction::Uplink), s.ctx.nas_count(Direction::Downlink)));
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {:?}",
        u.emm,
        u.step,
        u.s1,
        u.guti,
        counts,
        u.sessions.iter().map(|s| (s.sgw_s11, s.enb_s1u)).collect::<Vec<_>>(),
        h.mme.by_imsi.get(u.imsi.as_ref().unwrap())
    )
}

fn no_s11(out: &[MmeAction]) -> bool {
    !out.iter().any(|a| matches!(a, MmeAction::S11 { .. }))
}

/// A second eNB.
fn second_enb(h: &mut Harness) -> AssocId {
    let other = AssocId(2);
    assert_eq!(h.enb_up(other), S1apPduKind::Successful_S1Setup);
    other
}

/// The registered UE still works: it detaches, with its session deleted.
fn detach_succeeds(h: &mut Harness, ue: &mut TestUe) {
    h.assoc = AssocId(1);
    let d = ue.detach_request(false);
    h.up(ue, d);
    let (r, req) = expect_s11(&h.drain());
    assert!(matches!(req, S11Request::DeleteSession(_)));
    h.s11(r, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    let out = h.drain();
    let accept = read_down(&s1_data(&out[0]).2);
    assert!(matches!(ue.receive(&accept.nas.unwrap()), NasEmmMessage::DetachAccept(_)));
    assert_eq!(h.mme.stats().attached, 0);
}

#[test]
fn attach_with_a_registered_imsi_that_fails_authentication_leaves_the_ue_alone() {
    let mut h = Harness::default();
    let mut ue = h.attach("001010000000061", 61);
    let id = ue.mme_ue_id.unwrap();
    let before = snapshot(&h, id);
    let other = second_enb(&mut h);
    // The impostor sends a plain Attach Request with the UE's IMSI.
    h.assoc = other;
    let mut impostor = TestUe::new("001010000000061", 900);
    h.s1(initial_ue_message(900, impostor.attach_request()));
    let out = h.drain();
    assert!(no_s11(&out), "no Delete Session before authentication: {out:?}");
    let (r, _) = expect_s6a(&out);
    assert_eq!(snapshot(&h, id), before);
    let a = h.challenge(&mut impostor, r, 64);
    let _ = impostor.authenticate(&a);
    // It cannot compute RES: it answers with a wrong one.
    let bad = NasAuthenticationResponseParameter::from_res(&[0u8; 8]).unwrap();
    h.up(&impostor, NasEpsMessage::new_emm(NasAuthenticationResponse::new(bad)).encode().unwrap());
    let out = h.drain();
    assert!(no_s11(&out), "{out:?}");
    assert_eq!(snapshot(&h, id), before, "the registered UE is untouched");
    assert_eq!(h.mme.stats().attached, 1);
    detach_succeeds(&mut h, &mut ue);
}

#[test]
fn attach_by_known_guti_that_stops_at_security_mode_leaves_the_ue_alone() {
    let mut h = Harness::default();
    let mut ue = h.attach("001010000000062", 62);
    let id = ue.mme_ue_id.unwrap();
    let before = snapshot(&h, id);
    let other = second_enb(&mut h);
    h.assoc = other;
    let mut again = TestUe::new("001010000000062", 901);
    h.s1(initial_ue_message(901, again.attach_request_with(NasEpsMobileIdentity::from_guti(ue.guti.unwrap()))));
    let (r, _) = expect_s6a(&h.drain());
    let a = h.challenge(&mut again, r, 64);
    let resp = again.authenticate(&a);
    h.up(&again, resp);
    let smc = h.one_down().nas.unwrap();
    assert!(smc[0] >> 4 != 0, "a Security Mode Command");
    // No SECURITY MODE COMPLETE: the old context is still the UE's.
    assert_eq!(snapshot(&h, id), before);
    // The new attempt times out (T3460, five expiries) and goes.
    for _ in 0..5 {
        h.advance(std::time::Duration::from_secs(7));
    }
    let _ = h.drain();
    assert_eq!(snapshot(&h, id), before);
    assert_eq!(h.mme.stats().ues, 1);
    detach_succeeds(&mut h, &mut ue);
}

#[test]
fn a_new_attach_replaces_the_old_context_only_after_security_mode() {
    let mut h = Harness::default();
    let first = h.attach("001010000000063", 63);
    let old = first.mme_ue_id.unwrap();
    let other = second_enb(&mut h);
    h.assoc = other;
    let mut ue = TestUe::new("001010000000063", 902);
    h.s1(initial_ue_message(902, ue.attach_request()));
    let (r, _) = expect_s6a(&h.drain());
    let a = h.challenge(&mut ue, r, 64);
    let resp = ue.authenticate(&a);
    h.up(&ue, resp);
    let smc = h.one_down().nas.unwrap();
    assert!(h.mme.ues.contains_key(&old), "the old context stays until the SMC completes");
    let complete = ue.security_mode_complete(&smc);
    h.up(&ue, complete);
    let out = h.drain();
    // Now the old one goes: its session deleted, its S1 released; ULR for the new one.
    assert!(out.iter().any(|a| matches!(a, MmeAction::S11 { request: S11Request::DeleteSession(_), .. })));
    assert!(out.iter().any(|a| matches!(a, MmeAction::S6a { request: S6aRequest::UpdateLocation(_), .. })));
    assert!(!h.mme.ues.contains_key(&old));
    assert_eq!(h.mme.counters().value("ue_context_replaced"), 1);
    assert_eq!(h.mme.by_imsi.get(&"001010000000063".parse().unwrap()), ue.mme_ue_id.as_ref());
}

fn s1_setup_with_id(enb: u32) -> Vec<u8> {
    s1_setup_request("001", "01", enb)
}

#[test]
fn s1_setup_with_a_global_enb_id_in_use_elsewhere_fails_and_the_live_enb_keeps_its_ues() {
    let mut h = Harness::default();
    let ue = h.attach("001010000000064", 64);
    let id = ue.mme_ue_id.unwrap();
    let before = snapshot(&h, id);
    // The harness's eNB on association 1 has eNB ID 2 (association + 1).
    for _ in 0..2 {
        h.mme.handle(h.now, MmeEvent::S1Up { assoc: AssocId(5), peer: [127, 0, 0, 1].into(), outbound_streams: 4 });
        h.s1_on(AssocId(5), 0, s1_setup_with_id(2));
        let out = h.drain();
        assert_eq!(out.len(), 1);
        let (assoc, _, data) = s1_data(&out[0]);
        assert_eq!((assoc, read_down(&data).kind), (AssocId(5), S1apPduKind::Unsuccessful_S1Setup));
    }
    assert_eq!(h.mme.counters().value("s1_setup_duplicate_global_enb_id"), 2);
    assert_eq!(snapshot(&h, id), before);
    assert_eq!(h.mme.stats().enbs, 1);
    // The live eNB may set up again on its own association (8.7.3.2).
    h.s1_on(AssocId(1), 0, s1_setup_with_id(2));
    let out = h.drain();
    let setup = out.iter().find(|a| matches!(a, MmeAction::S1Send { .. })).expect("an answer");
    assert_eq!(read_down(&s1_data(setup).2).kind, S1apPduKind::Successful_S1Setup);
    // Once it is gone, its ID is free.
    h.mme.handle(h.now, MmeEvent::S1Down { assoc: AssocId(1) });
    h.s1_on(AssocId(5), 0, s1_setup_with_id(2));
    assert_eq!(read_down(&s1_data(&h.drain()[0]).2).kind, S1apPduKind::Successful_S1Setup);
}

/// The EMM cause of an ATTACH REJECT among the actions, if any.
fn reject_cause(out: &[MmeAction]) -> Option<EmmCause> {
    out.iter().find_map(|a| {
        let MmeAction::S1Send { data, .. } = a else {
            return None;
        };
        let nas = read_down(data).nas?;
        match plain_emm(&nas) {
            NasEmmMessage::AttachReject(r) => r.emm_cause.cause(),
            _ => None,
        }
    })
}

#[test]
fn a_flood_of_new_imsis_stays_within_the_per_enb_and_total_bounds() {
    let cfg = MmeConfig { mtmsi_seed: Some(1), max_ues_per_enb: 20, max_ues: 30, ..MmeConfig::default() };
    let mut h = Harness::new(cfg);
    let mut rejected = 0;
    for i in 0..200u32 {
        let ue = TestUe::new(&format!("0010100000{:05}", i), 1000 + i);
        h.s1(initial_ue_message(1000 + i, ue.attach_request()));
        let out = h.drain();
        if reject_cause(&out) == Some(EmmCause::Congestion) {
            rejected += 1;
        }
        assert!(h.mme.stats().ues <= 20, "{} contexts", h.mme.stats().ues);
    }
    assert_eq!(rejected, 180);
    assert_eq!(h.mme.counters().value("ue_context_limit"), 180);
    // A second eNB gets the rest of the total, no more.
    h.enb_up(AssocId(2));
    h.assoc = AssocId(2);
    for i in 0..50u32 {
        let ue = TestUe::new(&format!("0010100001{:05}", i), i);
        h.s1(initial_ue_message(i, ue.attach_request()));
        let _ = h.drain();
        assert!(h.mme.stats().ues <= 30);
    }
    assert_eq!(h.mme.stats().ues, 30);
}

#[test]
fn s6a_requests_in_flight_are_bounded() {
    let cfg = MmeConfig { mtmsi_seed: Some(1), max_s6a_in_flight: 3, ..MmeConfig::default() };
    let mut h = Harness::new(cfg);
    let mut pending = Vec::new();
    let mut congested = 0;
    for i in 0..10u32 {
        let ue = TestUe::new(&format!("0010100002{:05}", i), i);
        h.s1(initial_ue_message(i, ue.attach_request()));
        let out = h.drain();
        match &out[..] {
            [MmeAction::S6a { ue, .. }] => pending.push(*ue),
            other => {
                assert_eq!(reject_cause(other), Some(EmmCause::Congestion));
                congested += 1;
            }
        }
    }
    assert_eq!((pending.len(), congested), (3, 7));
    assert_eq!(h.mme.counters().value("s6a_in_flight_limit"), 7);
    // An answer (here: a transport error) frees a place.
    h.mme.handle(
        h.now,
        MmeEvent::S6a { ue: pending[0], answer: Err(mobicore_common::requester::TransportError::Timeout) },
    );
    let _ = h.drain();
    let ue = TestUe::new("001010000300000", 77);
    h.s1(initial_ue_message(77, ue.attach_request()));
    assert!(matches!(&h.drain()[..], [MmeAction::S6a { .. }]));
}

#[test]
fn m_tmsis_and_mme_ue_s1ap_ids_are_not_sequential() {
    let mut h = Harness::default();
    let (mut prev, mut prev_id): (Option<u32>, Option<u32>) = (None, None);
    let mut steps_of_one = 0;
    for i in 0..20u32 {
        let ue = h.attach(&format!("0010100003{:05}", i), i + 1);
        let (m, id) = (ue.guti.unwrap().m_tmsi(), ue.mme_ue_id.unwrap());
        // The MME-UE-S1AP-ID is the MME's S11 TEID too (esm.rs).
        if prev.is_some_and(|p| p.wrapping_add(1) == m) || prev_id.is_some_and(|p| p.wrapping_add(1) == id) {
            steps_of_one += 1;
        }
        (prev, prev_id) = (Some(m), Some(id));
    }
    assert_eq!(steps_of_one, 0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// Any NAS in an Initial UE Message from another eNB (plain, protected,
    /// a service request header, an attach naming the UE) never touches the
    /// registered UE.
    #[test]
    fn any_initial_nas_from_another_enb_leaves_a_registered_ue_alone(
        tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
        header in 0u8..16,
    ) {
        let mut h = Harness::default();
        let ue = h.attach("001010000000065", 65);
        let id = ue.mme_ue_id.unwrap();
        let before = snapshot(&h, id);
        h.enb_up(AssocId(2));
        h.assoc = AssocId(2);
        // An Attach Request naming the UE, then arbitrary octets; or arbitrary octets alone.
        // Header 12 is a SERVICE REQUEST (TS 24.301 9.3.1); 5 stands for an attach here.
        let mut nas = if header == 5 { TestUe::new("001010000000065", 3).attach_request() } else { vec![(header << 4) | 0x07] };
        nas.extend_from_slice(&tail);
        h.mme.handle(h.now, MmeEvent::S1Data { assoc: AssocId(2), stream: 1, data: Bytes::from(initial_ue_message(3, nas)) });
        let _ = h.drain();
        proptest::prop_assert_eq!(snapshot(&h, id), before);
        proptest::prop_assert_eq!(h.mme.ues[&id].emm, EmmState::Registered);
    }
}

#[test]
fn an_association_from_an_address_not_in_enb_peers_is_aborted_and_ignored() {
    let mut h = Harness::default();
    let ue = h.attach("001010000000066", 66);
    let before = snapshot(&h, ue.mme_ue_id.unwrap());
    let rogue = AssocId(7);
    h.mme.handle(h.now, MmeEvent::S1Up { assoc: rogue, peer: [192, 0, 2, 9].into(), outbound_streams: 4 });
    assert_eq!(h.drain(), vec![MmeAction::S1Abort { assoc: rogue }]);
    // Whatever it manages to send before the ABORT lands is ignored.
    h.s1_on(rogue, 0, s1_setup_request("001", "01", 40));
    let attach = TestUe::new("001010000000066", 5).attach_request();
    h.s1_on(rogue, 1, initial_ue_message(5, attach));
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.counters().value("s1_association_from_unknown_peer"), 1);
    assert_eq!(h.mme.counters().value("s1ap_from_unknown_peer"), 2);
    assert_eq!(h.mme.stats().enbs, 1);
    assert_eq!(snapshot(&h, ue.mme_ue_id.unwrap()), before);
    // Once gone, the association id may be reused by an allowed eNB.
    h.mme.handle(h.now, MmeEvent::S1Down { assoc: rogue });
    assert_eq!(h.enb_up(rogue), S1apPduKind::Successful_S1Setup);
}
