use super::*;
use crate::context::EmmState;
use crate::{MmeAction, MmeEvent};
use mobicore_common::requester::TransportError;
use mobicore_common::s11::*;
use mobicore_common::sctp_api::AssocId;
use oxirush_nas::nas_eps::*;
use oxirush_s1ap::s1ap::{Cause, CauseMisc, CauseNas, CauseProtocol, CauseRadioNetwork};
use oxirush_s1ap::S1apPduKind;

#[test]
fn s1_setup_fails_for_unknown_plmn() {
    let mut h = Harness::default();
    h.mme.handle(h.now, MmeEvent::S1Up { assoc: AssocId(5), peer: [127, 0, 0, 1].into(), outbound_streams: 2 });
    h.s1_on(AssocId(5), 0, s1_setup_request("208", "93", 5));
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Unsuccessful_S1Setup);
    assert_eq!(d.cause, Some(Cause::misc(CauseMisc::unknown_PLMN)));
    assert_eq!(h.mme.stats().enbs, 1, "only the harness eNB is set up");
    // A UE of the failed eNB is not served.
    let ue = TestUe::new("001010000000031", 1);
    h.s1_on(AssocId(5), 1, initial_ue_message(1, ue.attach_request()));
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_ErrorIndication);
    assert_eq!(h.mme.stats().ues, 0);
}

#[test]
fn garbage_s1ap_gets_error_indication() {
    let mut h = Harness::default();
    h.s1(vec![0xff, 0x00, 0x13, 0x37]);
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_ErrorIndication);
    assert_eq!(d.cause, Some(Cause::protocol(CauseProtocol::transfer_syntax_error)));
    assert_eq!(h.mme.counters().value("s1ap_malformed"), 1);
}

#[test]
fn unknown_mme_ue_s1ap_id_gets_error_indication() {
    let mut h = Harness::default();
    h.s1(uplink_nas(4242, 1, vec![0x07, 0x5d]));
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_ErrorIndication);
    assert_eq!(d.cause, Some(Cause::radioNetwork(CauseRadioNetwork::unknown_mme_ue_s1ap_id)));
    assert_eq!((d.mme_id, d.enb_id), (Some(4242), Some(1)));
}

#[test]
fn another_enb_cannot_touch_a_ue() {
    let mut h = Harness::default();
    let mut ue = h.attach("001010000000032", 32);
    h.enb_up(AssocId(2));
    let detach = ue.detach_request(true);
    h.s1_on(AssocId(2), 1, uplink_nas(ue.mme_ue_id.unwrap(), ue.enb_ue_id, detach));
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_ErrorIndication);
    assert_eq!(h.mme.stats().attached, 1);
}

#[test]
fn detach_normal_deletes_session_accepts_and_releases() {
    let mut h = Harness::default();
    let mut ue = h.attach("001010000000033", 33);
    let d = ue.detach_request(false);
    h.up(&ue, d);
    let (r, req) = expect_s11(&h.drain());
    let S11Request::DeleteSession(ds) = req else { panic!() };
    assert_eq!(ds.sgw_teid, SGW_S11.teid);
    assert_eq!(ds.linked_ebi.0, 5);
    h.s11(r, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    let out = h.drain();
    assert_eq!(out.len(), 2);
    let acc = read_down(&s1_data(&out[0]).2);
    assert!(matches!(ue.receive(&acc.nas.unwrap()), NasEmmMessage::DetachAccept(_)));
    let rel = read_down(&s1_data(&out[1]).2);
    assert_eq!(rel.kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!(rel.cause, Some(Cause::nas(CauseNas::detach)));
    assert_eq!(h.mme.stats().ues, 0);
}

#[test]
fn detach_switch_off_sends_no_accept() {
    let mut h = Harness::default();
    let mut ue = h.attach("001010000000034", 34);
    let d = ue.detach_request(true);
    h.up(&ue, d);
    let (r, req) = expect_s11(&h.drain());
    assert!(matches!(req, S11Request::DeleteSession(_)));
    h.s11(r, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!(h.mme.stats().ues, 0);
    assert_eq!(h.mme.counters().value("detach_switch_off"), 1);
}

/// UE `imsi` attached at eNB UE `enb_id`, its eNB asks for its release:
/// its MME-UE-S1AP-ID and the Release Access Bearers request sent.
fn release_asked(h: &mut Harness, imsi: &str, enb_id: u32) -> (u32, crate::UeRef) {
    let id = h.attach(imsi, enb_id).mme_ue_id.unwrap();
    h.s1(release_request(id, enb_id));
    let (r, req) = expect_s11(&h.drain());
    assert!(matches!(req, S11Request::ReleaseAccessBearers(_)));
    (id, r)
}

#[test]
fn release_request_releases_access_bearers_and_keeps_ue_registered() {
    let mut h = Harness::default();
    let (id, r) = release_asked(&mut h, "001010000000035", 35);
    h.s11(r, S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED));
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!((d.mme_id, d.enb_id), (Some(id), Some(35)));
    let ctx = &h.mme.ues[&id];
    assert_eq!(ctx.emm, EmmState::Registered);
    assert!(ctx.s1.is_none());
    assert_eq!(h.mme.stats().attached, 1);
}

/// The eNB asks again while the release runs (TS 36.413 8.3.2; or an
/// elastic MME host took the first and died, and its heir gets it again):
/// the release under way answers both, the UE stays registered.
#[test]
fn a_release_request_repeated_while_the_release_runs_is_answered_by_it() {
    let mut h = Harness::default();
    let (id, r) = release_asked(&mut h, "001010000000036", 36);
    h.s1(release_request(id, 36));
    assert!(h.drain().is_empty(), "nothing new for the repeat");
    assert_eq!(h.mme.counters().value("release_request_repeated"), 1);
    h.s11(r, S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED));
    assert_eq!(h.one_down().kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!(h.mme.ues[&id].emm, EmmState::Registered);
    assert_eq!(h.mme.stats().attached, 1);
}

/// A message of the eNB's that crossed the UE CONTEXT RELEASE COMMAND
/// (here a second release request) names a connection the MME released:
/// the release answers it, with no ERROR INDICATION; after the COMPLETE,
/// the connection is unknown, as any other.
#[test]
fn a_message_crossing_the_release_command_gets_no_error_indication() {
    let mut h = Harness::default();
    let (id, r) = release_asked(&mut h, "001010000000037", 37);
    h.s11(r, S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED));
    assert_eq!(h.one_down().kind, S1apPduKind::Initiating_UEContextRelease);
    h.s1(release_request(id, 37));
    assert!(h.drain().is_empty(), "nothing for it");
    assert_eq!(h.mme.counters().value("s1ap_after_release_command"), 1);
    h.s1(release_complete(id, 37));
    h.s1(release_request(id, 37));
    assert_eq!(h.one_down().kind, S1apPduKind::Initiating_ErrorIndication);
    assert_eq!(h.mme.stats().attached, 1);
}

/// An elastic MME host lets a UE go once it is at rest: registered, no
/// procedure, ECM-IDLE with its UE CONTEXT RELEASE COMPLETE in (TS 36.413
/// 8.3.3), or its eNB gone (no COMPLETE will come).
#[test]
fn a_ue_is_at_rest_once_its_release_is_complete_or_its_enb_gone() {
    let mut h = Harness::default();
    let mut ids = Vec::new();
    for (imsi, enb_id) in [("001010000000031", 31), ("001010000000032", 32)] {
        let ue = h.attach(imsi, enb_id);
        let id = ue.mme_ue_id.unwrap();
        assert_eq!(h.mme.ue_at_rest(id), Some(false), "connected");
        h.s1(release_request(id, enb_id));
        let (r, _) = expect_s11(&h.drain());
        assert_eq!(h.mme.ue_at_rest(id), Some(false), "releasing access bearers");
        h.s11(r, S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED));
        assert_eq!(h.one_down().kind, S1apPduKind::Initiating_UEContextRelease);
        assert_eq!(h.mme.ue_at_rest(id), Some(false), "the COMPLETE not in");
        ids.push((id, enb_id));
    }
    let (a, enb_a) = ids[0];
    h.s1(release_complete(a, enb_a));
    assert_eq!(h.mme.ue_at_rest(a), Some(true));
    h.mme.take_changes();
    h.mme.handle(h.now, MmeEvent::S1Down { assoc: AssocId(1) });
    let b = ids[1].0;
    assert_eq!(h.mme.ue_at_rest(b), Some(true), "its eNB gone");
    assert!(h.mme.touched().any(|id| id == b), "looked at again");
    assert_eq!(h.mme.ue_at_rest(0x7fff_ffff), None);
}

/// A UE whose S11 request awaits its answer is not at rest, though no
/// step runs: the deletion of an S1 handover's forwarding tunnel, which
/// its guard sends after the handover (TS 23.401 5.5.1.2.2 step 21). An
/// elastic MME host holds it until the answer, or a transport error, is in.
#[test]
fn a_ue_awaiting_an_s11_answer_is_not_at_rest() {
    let mut h = Harness::default();
    let ue = h.attach("001010000000035", 35);
    let id = ue.mme_ue_id.unwrap();
    super::stored::release_to_idle(&mut h, &ue);
    h.s1(release_complete(id, 35));
    assert_eq!(h.mme.ue_at_rest(id), Some(true));
    for answer in [Ok(S11Response::DeleteIndirectForwarding(GtpCause::REQUEST_ACCEPTED)), Err(TransportError::Timeout)]
    {
        let sgw_teid = h.mme.ues[&id].sessions[0].sgw_s11.teid;
        h.mme.request_s11(id, S11Request::DeleteIndirectForwarding(DeleteIndirectForwardingRequest { sgw_teid }));
        let (r, _) = expect_s11(&h.drain());
        assert_eq!(h.mme.ue_at_rest(id), Some(false), "its answer awaited");
        h.mme.handle(h.now, MmeEvent::S11 { ue: r, response: answer });
        assert_eq!(h.mme.ue_at_rest(id), Some(true), "its answer in");
    }
}

/// A stopped timer's heap entry (the ATTACH ACCEPT's T3450, stopped by
/// the ATTACH COMPLETE) changes nothing when its deadline passes, so the
/// UE is not touched: an elastic MME host would otherwise write the
/// record of a copy another host may be serving (a lost compare-and-set
/// there, the UE's S1 connection unknown to the record).
#[test]
fn a_stopped_timers_deadline_does_not_touch_the_ue() {
    let mut h = Harness::default();
    // B's T3460 runs (AUTHENTICATION REQUEST unanswered) and comes first
    // on the heap, so A's stopped T3450 stays under it.
    let (mut b_ue, r) = h.start_attach("001010000000034", 34);
    h.challenge(&mut b_ue, r, 32);
    let b = b_ue.mme_ue_id.unwrap();
    h.now += std::time::Duration::from_secs(1);
    let a = h.attach("001010000000033", 33).mme_ue_id.unwrap();
    assert!(h.mme.ues[&a].timer.is_none(), "T3450 stopped");
    h.mme.take_changes();
    h.mme.handle_timeout(h.now + std::time::Duration::from_secs(60));
    let touched: Vec<u32> = h.mme.touched().collect();
    assert_eq!(touched, [b], "B's T3460 fired, A's stale entry touched nothing");
    assert!(h.mme.poll_timeout().is_some(), "B's T3460 runs again");
}

#[test]
fn enb_down_cleans_only_its_ues() {
    let mut h = Harness::default();
    h.enb_up(AssocId(2));
    // eNB 1: a registered UE and a UE in the middle of its attach.
    let a = h.attach("001010000000036", 36);
    let (_, _r) = h.start_attach("001010000000037", 37);
    // eNB 2: a registered UE.
    h.assoc = AssocId(2);
    let b = h.attach("001010000000038", 38);
    h.assoc = AssocId(1);
    assert_eq!(h.mme.stats().ues, 3);
    h.mme.handle(h.now, MmeEvent::S1Down { assoc: AssocId(1) });
    let out = h.drain();
    // Nothing goes to the lost association; the S-GW hears of it.
    assert!(out.iter().all(|a| !matches!(a, MmeAction::S1Send { .. })));
    let s = h.mme.stats();
    assert_eq!((s.ues, s.enbs, s.attached), (2, 1, 2));
    assert!(h.mme.ues[&a.mme_ue_id.unwrap()].s1.is_none(), "ECM-IDLE");
    let other = &h.mme.ues[&b.mme_ue_id.unwrap()];
    assert_eq!(other.s1.map(|s| s.assoc), Some(AssocId(2)));
    assert_eq!(other.emm, EmmState::Registered);
}

#[test]
fn late_s11_answer_for_released_ue_is_ignored() {
    let mut h = Harness::default();
    let mut ue = h.attach("001010000000039", 39);
    let d = ue.detach_request(true);
    h.up(&ue, d);
    let (r, _) = expect_s11(&h.drain());
    h.s11(r, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    let _ = h.drain();
    h.s11(r, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.counters().value("s11_stale_response"), 1);
}
