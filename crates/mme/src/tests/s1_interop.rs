//! S1AP as a real eNB uses it (TS 36.413): S1 Reset, eNB Configuration
//! Update, Initial Context Setup Failure, UE Capability Info Indication, NAS
//! Non Delivery Indication, procedures this MME does not implement and IEs
//! it does not comprehend, each PDU built from the specification with the
//! oxirush-s1ap builders as an eNB sends it.

use super::*;
use crate::context::EmmState;
use crate::{MmeAction, MmeEvent, UeRef};
use mobicore_common::s11::*;
use mobicore_common::s6a::*;
use mobicore_common::sctp_api::AssocId;
use oxirush_nas::nas_eps::NasEmmMessage;
use oxirush_s1ap::helpers::{eutran_cgi, global_enb_id, plmn, tai, EnbKind};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{build_s1ap, build_s1ap_ie, ie, Bits};
use std::time::Duration;

// ---- what the eNB sends ----

pub(super) fn encode(pdu: Result<S1AP_PDU, oxirush_s1ap::Error>) -> Vec<u8> {
    pdu.unwrap().encode().unwrap().to_vec()
}

/// RESET of the whole S1 interface (TS 36.413 9.1.8.1).
pub(super) fn reset_all() -> Vec<u8> {
    encode(build_s1ap!(
        InitiatingMessage,
        Reset,
        Reset,
        Cause(Cause::radioNetwork(CauseRadioNetwork::unspecified)),
        ResetType(ResetType::s1_Interface(ResetAll::reset_all)),
    ))
}

/// RESET of the listed UE-associated logical S1-connections.
pub(super) fn reset_part(items: &[(Option<u32>, Option<u32>)]) -> Vec<u8> {
    let list = items
        .iter()
        .map(|(m, e)| {
            let item = UEAssociatedLogicalS1ConnectionItem::new(m.map(MMEUES1APID), e.map(ENBUES1APID), None);
            build_s1ap_ie!(REJECT UE_associatedLogicalS1_ConnectionItem(item)).unwrap()
        })
        .collect();
    encode(build_s1ap!(
        InitiatingMessage,
        Reset,
        Reset,
        Cause(Cause::transport(CauseTransport::transport_resource_unavailable)),
        ResetType(ResetType::partOfS1_Interface(UEAssociatedLogicalS1ConnectionListRes(list))),
    ))
}

/// ENB CONFIGURATION UPDATE (9.1.8.7) with a name, one TA and a paging DRX.
pub(super) fn enb_configuration_update(mcc: &str, mnc: &str, tac: u16) -> Vec<u8> {
    let p = plmn(mcc, mnc).unwrap();
    let area = SupportedTAsItem::new(TAC(tac.to_be_bytes()), BPLMNs(vec![p]), None);
    encode(build_s1ap!(
        InitiatingMessage,
        ENBConfigurationUpdate,
        ENBConfigurationUpdate,
        eNBname("renamed-enb"),
        SupportedTAs(SupportedTAs(vec![area])),
        DefaultPagingDRX(PagingDRX::v64),
    ))
}

/// INITIAL CONTEXT SETUP FAILURE (9.1.4.3).
pub(super) fn ics_failure(mme_id: u32, enb_id: u32) -> Vec<u8> {
    encode(build_s1ap!(
        UnsuccessfulOutcome,
        InitialContextSetup,
        InitialContextSetupFailure,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
        Cause(Cause::radioNetwork(CauseRadioNetwork::radio_resources_not_available)),
    ))
}

/// A UERadioAccessCapabilityInformation (TS 36.331) in UPER: its
/// criticalExtensionsFuture, the one value that needs no UE capability.
pub(super) const UE_RADIO_CAPABILITY: [u8; 1] = [0x80];

/// UE CAPABILITY INFO INDICATION (9.1.10).
pub(super) fn ue_capability_info(mme_id: u32, enb_id: u32, capability: &[u8]) -> Vec<u8> {
    encode(build_s1ap!(
        InitiatingMessage,
        UECapabilityInfoIndication,
        UECapabilityInfoIndication,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
        UERadioCapability(UERadioCapability::from(capability.to_vec())),
    ))
}

/// NAS NON DELIVERY INDICATION (9.1.7.4).
pub(super) fn nas_non_delivery(mme_id: u32, enb_id: u32, nas: Vec<u8>) -> Vec<u8> {
    encode(build_s1ap!(
        InitiatingMessage,
        NASNonDeliveryIndication,
        NASNonDeliveryIndication,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
        NAS_PDU(nas),
        Cause(Cause::radioNetwork(CauseRadioNetwork::radio_connection_with_ue_lost)),
    ))
}

/// HANDOVER REQUIRED (9.1.5.1): an S1 handover, which this MME does not do.
pub(super) fn handover_required(mme_id: u32, enb_id: u32) -> Vec<u8> {
    let p = plmn("001", "01").unwrap();
    let target = TargeteNBID::new(global_enb_id(p, EnbKind::Macro, 0x54321).unwrap(), tai(p, [0, 1]), None);
    // The Source eNB to Target eNB Transparent Container (9.2.1.56): an RRC
    // HandoverPreparationInformation, the target cell, one visited cell.
    let cgi = eutran_cgi(p, EnbKind::Macro, 0x54321, 1).unwrap();
    let visited = LastVisitedEUTRANCellInformation::new(
        eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap(),
        CellType::new(CellSize::small, None),
        TimeUEStayedInCell(10),
        None,
    );
    let source = SourceeNBToTargeteNBTransparentContainer::new(
        RRCContainer::from(vec![0x01, 0x02]),
        None,
        cgi,
        None,
        UEHistoryInformation(vec![LastVisitedCellItem::e_UTRAN_Cell(visited)]),
        None,
    );
    let container = encode_open_type(&source).unwrap().to_vec();
    encode(build_s1ap!(
        InitiatingMessage,
        HandoverPreparation,
        HandoverRequired,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
        HandoverType(HandoverType::intralte),
        Cause(Cause::radioNetwork(CauseRadioNetwork::handover_desirable_for_radio_reason)),
        TargetID(TargetID::targeteNB_ID(target)),
        Source_ToTarget_TransparentContainer(SourceToTargetTransparentContainer::from(container)),
    ))
}

/// WRITE-REPLACE WARNING RESPONSE (9.1.13.2), to a request never sent.
pub(super) fn write_replace_warning_response() -> Vec<u8> {
    encode(build_s1ap!(
        SuccessfulOutcome,
        WriteReplaceWarning,
        WriteReplaceWarningResponse,
        MessageIdentifier(MessageIdentifier(Bits::new(0x1112, 16).unwrap())),
        SerialNumber(SerialNumber(Bits::new(0x3001, 16).unwrap())),
    ))
}

/// LOCATION REPORT (9.1.14.2), a class 2 procedure of criticality ignore.
pub(super) fn location_report(mme_id: u32, enb_id: u32) -> Vec<u8> {
    let p = plmn("001", "01").unwrap();
    encode(build_s1ap!(
        InitiatingMessage,
        LocationReport,
        LocationReport,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
        EUTRAN_CGI(eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap()),
        TAI(tai(p, [0, 1])),
        RequestType(RequestType::new(EventType::direct, ReportArea::ecgi, None)),
    ))
}

/// A PDU of a procedure code no release has, with the criticality `crit`
/// (the second octet of an S1AP PDU is its procedure code, the third its
/// criticality, TS 36.413 9.3 in aligned PER).
pub(super) fn unknown_procedure(crit: u8) -> Vec<u8> {
    let mut pdu = release_request(1, 1);
    pdu[1] = 200;
    pdu[2] = crit;
    pdu
}

/// A UE CONTEXT RELEASE REQUEST with an IE of no release, of criticality
/// `crit` (TS 36.413 10.3.4.2).
pub(super) fn release_request_with_unknown_ie(mme_id: u32, enb_id: u32, crit: Criticality) -> Vec<u8> {
    let mut pdu = S1AP_PDU::decode(&release_request(mme_id, enb_id)).unwrap();
    let mut ies = pdu.protocol_ies().unwrap().into_owned();
    ies.0.push(ProtocolIEField::new(ProtocolIEID(65000), crit, oxirush_s1ap::Octets::from(vec![0x2a])));
    pdu.set_protocol_ies(ies).unwrap();
    pdu.encode().unwrap().to_vec()
}

// ---- the harness ----

/// The S1AP PDUs among the actions, each with its association.
fn s1_out(out: &[MmeAction]) -> Vec<(AssocId, S1AP_PDU)> {
    out.iter()
        .filter_map(|a| match a {
            MmeAction::S1Send { assoc, data, .. } => Some((*assoc, S1AP_PDU::decode(data).unwrap())),
            _ => None,
        })
        .collect()
}

fn s11_out(out: &[MmeAction]) -> Vec<S11Request> {
    out.iter()
        .filter_map(|a| match a {
            MmeAction::S11 { request, .. } => Some(request.clone()),
            _ => None,
        })
        .collect()
}

/// A UE attached on the harness's current eNB.
fn attach_on(h: &mut Harness, assoc: AssocId, imsi: &str, enb_ue_id: u32) -> (TestUe, u32) {
    let before = h.assoc;
    h.assoc = assoc;
    let ue = h.attach(imsi, enb_ue_id);
    h.assoc = before;
    let id = ue.mme_ue_id.unwrap();
    (ue, id)
}

/// An attach up to the INITIAL CONTEXT SETUP REQUEST with the Attach
/// Accept, not answered yet.
fn attach_until_ics(h: &mut Harness, imsi: &str, enb_ue_id: u32) -> (TestUe, UeRef) {
    let (mut ue, r) = h.start_attach(imsi, enb_ue_id);
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
    assert_eq!(ics.kind, S1apPduKind::Initiating_InitialContextSetup);
    assert!(matches!(ue.receive(&ics.nas.unwrap()), NasEmmMessage::AttachAccept(_)));
    (ue, r)
}

/// The (MME-UE-S1AP-ID, eNB-UE-S1AP-ID) items of a RESET ACKNOWLEDGE.
fn ack_items(pdu: &S1AP_PDU) -> Vec<(Option<u32>, Option<u32>)> {
    pdu.items::<ie::UE_associatedLogicalS1_ConnectionListResAck>()
        .map(|i| {
            let i = i.unwrap();
            (i.mme_ue_s1ap_id.map(|v| v.0), i.enb_ue_s1ap_id.map(|v| v.0))
        })
        .collect()
}

fn cd_of(pdu: &S1AP_PDU) -> CriticalityDiagnostics {
    pdu.ie::<ie::CriticalityDiagnostics>().expect("Criticality Diagnostics").unwrap()
}

// ---- S1 Reset (TS 36.413 8.7.1) ----

#[test]
fn reset_of_whole_interface_releases_that_enbs_ues_only() {
    let mut h = Harness::default();
    h.enb_up(AssocId(2));
    let (_, a) = attach_on(&mut h, AssocId(1), "001010000000101", 101);
    let (_, _mid) = h.start_attach("001010000000102", 102);
    // eNB 2 uses the same eNB-UE-S1AP-ID as a UE of eNB 1.
    let (_, c) = attach_on(&mut h, AssocId(2), "001010000000103", 101);
    assert_eq!(h.mme.stats().ues, 3);
    h.s1_on(AssocId(1), 0, reset_all());
    let out = h.drain();
    // The registered UE's S1-U bearers are released at the S-GW.
    let s11 = s11_out(&out);
    assert_eq!(s11.len(), 1, "{s11:?}");
    assert!(matches!(&s11[0], S11Request::ReleaseAccessBearers(r) if r.sgw_teid == SGW_S11.teid));
    // The eNB gets RESET ACKNOWLEDGE and nothing else (its contexts are gone).
    let s1 = s1_out(&out);
    assert_eq!(s1.len(), 1);
    assert_eq!(s1[0].0, AssocId(1));
    assert_eq!(s1[0].1.kind(), S1apPduKind::Successful_Reset);
    assert!(ack_items(&s1[0].1).is_empty());
    assert!(s1[0].1.check().unwrap().is_empty());
    // a: ECM-IDLE, registered; the attach in progress: aborted; c: untouched.
    let ua = &h.mme.ues[&a];
    assert!(ua.s1.is_none());
    assert_eq!(ua.emm, EmmState::Registered);
    assert_eq!(h.mme.stats().ues, 2);
    let uc = &h.mme.ues[&c];
    assert_eq!(uc.s1.map(|s| (s.assoc, s.enb_ue_s1ap_id)), Some((AssocId(2), 101)));
    assert!(uc.sessions[0].enb_s1u.is_some());
    assert_eq!(h.mme.counters().value("s1_reset_all"), 1);
    assert_eq!(h.mme.counters().value("ue_aborted_reset"), 1);
    // The freed eNB-UE-S1AP-ID serves a new UE of eNB 1, c still untouched.
    let ue = TestUe::new("001010000000104", 101);
    h.s1_on(AssocId(1), 1, initial_ue_message(101, ue.attach_request()));
    let _ = expect_s6a(&h.drain());
    assert_eq!(h.mme.ues[&c].s1.map(|s| s.assoc), Some(AssocId(2)));
}

#[test]
fn partial_reset_echoes_its_list_and_releases_the_named_ues_of_that_enb() {
    let mut h = Harness::default();
    h.enb_up(AssocId(2));
    let (_, a) = attach_on(&mut h, AssocId(1), "001010000000111", 111);
    let (_, b) = attach_on(&mut h, AssocId(1), "001010000000112", 112);
    let (_, k) = attach_on(&mut h, AssocId(1), "001010000000113", 113);
    let (_, c) = attach_on(&mut h, AssocId(2), "001010000000114", 111);
    let items = [
        (Some(a), Some(111)), // both ids
        (None, Some(112)),    // eNB id only: b
        (Some(c), None),      // a UE of eNB 2: not this eNB's, echoed only
        (None, None),         // empty: ignored, left out (8.7.1.3.1)
        (None, Some(999)),    // unknown: echoed
    ];
    h.s1_on(AssocId(1), 0, reset_part(&items));
    let out = h.drain();
    let s11 = s11_out(&out);
    assert_eq!(s11.len(), 2, "{s11:?}");
    assert!(s11.iter().all(|r| matches!(r, S11Request::ReleaseAccessBearers(_))));
    let s1 = s1_out(&out);
    assert_eq!(s1.len(), 1);
    let ack = &s1[0].1;
    assert_eq!(ack.kind(), S1apPduKind::Successful_Reset);
    assert!(ack.check().unwrap().is_empty());
    assert_eq!(ack_items(ack), vec![(Some(a), Some(111)), (None, Some(112)), (Some(c), None), (None, Some(999))]);
    assert!(h.mme.ues[&a].s1.is_none() && h.mme.ues[&b].s1.is_none());
    assert_eq!(h.mme.ues[&k].s1.map(|s| s.enb_ue_s1ap_id), Some(113), "not named: kept");
    assert_eq!(h.mme.ues[&c].s1.map(|s| s.assoc), Some(AssocId(2)), "another eNB's: kept");
    assert_eq!(h.mme.stats().attached, 4);
    assert_eq!(h.mme.counters().value("s1_reset_ue"), 2);
}

#[test]
fn reset_aborts_an_attach_waiting_for_its_initial_context_setup() {
    let mut h = Harness::default();
    let (ue, _) = attach_until_ics(&mut h, "001010000000121", 121);
    h.s1_on(AssocId(1), 0, reset_part(&[(ue.mme_ue_id, Some(121))]));
    let out = h.drain();
    let s11 = s11_out(&out);
    assert!(matches!(&s11[..], [S11Request::DeleteSession(d)] if d.sgw_teid == SGW_S11.teid), "{s11:?}");
    let s1 = s1_out(&out);
    assert_eq!(s1.len(), 1, "no UE CONTEXT RELEASE COMMAND after a reset");
    assert_eq!(s1[0].1.kind(), S1apPduKind::Successful_Reset);
    assert_eq!(h.mme.stats().ues, 0);
    assert_eq!(h.mme.poll_timeout(), None, "T3450 stopped");
}

#[test]
fn reset_before_s1_setup_gets_error_indication() {
    let mut h = Harness::default();
    h.mme.handle(h.now, MmeEvent::S1Up { assoc: AssocId(7), peer: [127, 0, 0, 1].into(), outbound_streams: 2 });
    h.s1_on(AssocId(7), 0, reset_all());
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_ErrorIndication);
    assert_eq!(d.cause, Some(Cause::protocol(CauseProtocol::message_not_compatible_with_receiver_state)));
}

// ---- eNB Configuration Update (TS 36.413 8.7.4) ----

#[test]
fn enb_configuration_update_is_acknowledged_and_kept() {
    let mut h = Harness::default();
    h.s1_on(AssocId(1), 0, enb_configuration_update("001", "01", 7));
    let out = h.drain();
    let s1 = s1_out(&out);
    assert_eq!(s1.len(), 1);
    assert_eq!(s1[0].1.kind(), S1apPduKind::Successful_ENBConfigurationUpdate);
    assert!(s1[0].1.check().unwrap().is_empty());
    let enb = &h.mme.enbs[&AssocId(1)];
    assert_eq!(enb.name.as_deref(), Some("renamed-enb"));
    assert_eq!(enb.tacs, vec![7]);
    assert_eq!(enb.default_paging_drx, Some(64));
    assert_eq!(h.mme.counters().value("enb_configuration_update"), 1);
}

#[test]
fn enb_configuration_update_to_no_plmn_of_ours_fails_and_keeps_the_old_one() {
    let mut h = Harness::default();
    assert_eq!(h.mme.enbs[&AssocId(1)].default_paging_drx, Some(128), "from S1 Setup");
    h.s1_on(AssocId(1), 0, enb_configuration_update("208", "93", 7));
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Unsuccessful_ENBConfigurationUpdate);
    assert_eq!(d.cause, Some(Cause::misc(CauseMisc::unknown_PLMN)));
    let enb = &h.mme.enbs[&AssocId(1)];
    assert_eq!((enb.name.as_deref(), &enb.tacs[..], enb.default_paging_drx), (Some("test-enb"), &[1][..], Some(128)));
    // Before S1 Setup: the failure too (8.7.3.1, 10.4).
    h.mme.handle(h.now, MmeEvent::S1Up { assoc: AssocId(8), peer: [127, 0, 0, 1].into(), outbound_streams: 2 });
    h.s1_on(AssocId(8), 0, enb_configuration_update("001", "01", 7));
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Unsuccessful_ENBConfigurationUpdate);
    assert_eq!(d.cause, Some(Cause::protocol(CauseProtocol::message_not_compatible_with_receiver_state)));
}

// ---- Initial Context Setup Failure (TS 36.413 8.3.1.3, TS 23.401 5.3.2.1) ----

#[test]
fn ics_failure_after_attach_accept_deletes_the_session_and_releases() {
    let mut h = Harness::default();
    let (ue, _) = attach_until_ics(&mut h, "001010000000131", 131);
    let id = ue.mme_ue_id.unwrap();
    h.s1(ics_failure(id, 131));
    let out = h.drain();
    let s11 = s11_out(&out);
    assert!(matches!(&s11[..], [S11Request::DeleteSession(d)] if d.sgw_teid == SGW_S11.teid), "{s11:?}");
    let s1 = s1_out(&out);
    assert_eq!(s1.len(), 1);
    let rel = read_down(&s1[0].1.encode().unwrap());
    assert_eq!(rel.kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!((rel.mme_id, rel.enb_id), (Some(id), Some(131)));
    assert_eq!(h.mme.stats().ues, 0);
    assert_eq!(h.mme.poll_timeout(), None, "T3450 stopped");
    assert_eq!(h.mme.counters().value("initial_context_setup_failure"), 1);
}

// ---- UE Capability Info Indication (TS 36.413 8.9) ----

#[test]
fn ue_capability_is_kept_given_back_in_initial_context_setup_and_dropped_with_the_ue() {
    let mut h = Harness::default();
    h.enb_up(AssocId(2));
    let (mut ue, id) = attach_on(&mut h, AssocId(1), "001010000000141", 141);
    h.s1(ue_capability_info(id, 141, &UE_RADIO_CAPABILITY));
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.ues[&id].ue_radio_capability.as_deref(), Some(&UE_RADIO_CAPABILITY[..]));
    // Another eNB cannot overwrite it.
    h.s1_on(AssocId(2), 1, ue_capability_info(id, 141, &[0x80, 0x00]));
    assert_eq!(h.one_down().kind, S1apPduKind::Initiating_ErrorIndication);
    assert_eq!(h.mme.ues[&id].ue_radio_capability.as_deref(), Some(&UE_RADIO_CAPABILITY[..]));
    // A later INITIAL CONTEXT SETUP REQUEST carries it (9.1.4.1).
    let pdu = ics_of_registered_ue(&mut h, id);
    let cap = pdu.ie::<ie::UERadioCapability>().expect("UE Radio Capability").unwrap();
    assert_eq!(&cap.0[..], &UE_RADIO_CAPABILITY[..]);
    assert!(pdu.check().unwrap().is_empty());
    // Dropped with the UE context.
    let d = ue.detach_request(true);
    h.up(&ue, d);
    let (r, _) = expect_s11(&h.drain());
    h.s11(r, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    let _ = h.drain();
    assert!(!h.mme.ues.contains_key(&id));
}

/// The INITIAL CONTEXT SETUP REQUEST the MME builds for a registered UE
/// (as a service request will).
pub(super) fn ics_of_registered_ue(h: &mut Harness, id: u32) -> S1AP_PDU {
    let s = h.mme.ues[&id].sessions[0].clone();
    let ics = crate::s1ap_build::InitialContextSetup {
        mme_ue_id: id,
        enb_ue_id: 1,
        ue_ambr: subscription().ue_ambr,
        ebi: s.ebi,
        qci: s.qci,
        arp: s.arp,
        sgw_s1u: s.sgw_s1u,
        nas: vec![],
        eea: 0xe0,
        eia: 0xe0,
        kenb: &[7; 32],
    };
    let data = h.mme.initial_context_setup_request(id, ics).unwrap();
    h.log.push(data.clone());
    S1AP_PDU::decode(&data).unwrap()
}

#[test]
fn attach_initial_context_setup_carries_no_stored_capability() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000142", 142);
    let a = h.challenge(&mut ue, r, 32);
    let resp = ue.authenticate(&a);
    h.up(&ue, resp);
    let smc = h.one_down().nas.unwrap();
    // A capability before the attach's ICS (TS 23.401 5.11.2: an attach
    // deletes it, and its ICS carries none).
    h.s1(ue_capability_info(ue.mme_ue_id.unwrap(), 142, &UE_RADIO_CAPABILITY));
    let c = ue.security_mode_complete(&smc);
    h.up(&ue, c);
    let _ = h.drain();
    h.s6a(r, S6aAnswer::UpdateLocation(Ok(subscription())));
    let (r, _) = expect_s11(&h.drain());
    h.s11(r, create_session_ok());
    let out = h.drain();
    let s1 = s1_out(&out);
    assert_eq!(s1[0].1.kind(), S1apPduKind::Initiating_InitialContextSetup);
    assert!(s1[0].1.ie::<ie::UERadioCapability>().is_none());
    assert!(h.mme.ues[&ue.mme_ue_id.unwrap()].ue_radio_capability.is_none());
}

// ---- NAS Non Delivery Indication (TS 36.413 8.6.2.4) ----

#[test]
fn nas_non_delivery_is_counted_and_the_timer_sends_again() {
    let mut h = Harness::default();
    let (mut ue, r) = h.start_attach("001010000000151", 151);
    let first = h.challenge(&mut ue, r, 32);
    let id = ue.mme_ue_id.unwrap();
    h.s1(nas_non_delivery(id, 151, vec![0x07, 0x52]));
    assert!(h.drain().is_empty());
    assert_eq!(h.mme.counters().value("nas_non_delivery_indication"), 1);
    h.advance(Duration::from_secs(6));
    let d = h.one_down();
    let NasEmmMessage::AuthenticationRequest(again) = plain_emm(&d.nas.unwrap()) else { panic!() };
    assert_eq!(again.authentication_parameter_rand, first.authentication_parameter_rand);
}

// ---- procedures this MME does not implement (TS 36.413 10.3.4.1) ----

#[test]
fn unimplemented_procedures_are_answered_by_their_criticality() {
    let mut h = Harness::default();
    let (_, id) = attach_on(&mut h, AssocId(1), "001010000000161", 161);
    // HANDOVER REQUIRED is implemented now (s1_handover): towards an eNB the
    // MME does not know it gets HANDOVER PREPARATION FAILURE (TS 36.413
    // 8.4.1.3), the UE left as it was.
    h.s1(handover_required(id, 161));
    let out = h.drain();
    let s1 = s1_out(&out);
    assert_eq!(s1.len(), 1);
    assert_eq!(s1[0].1.kind(), S1apPduKind::Unsuccessful_HandoverPreparation);
    assert!(s1[0].1.check().unwrap().is_empty());
    assert_eq!(h.mme.ues[&id].s1.map(|s| s.enb_ue_s1ap_id), Some(161));
    // WRITE-REPLACE WARNING RESPONSE (successful outcome, reject).
    h.s1_on(AssocId(1), 0, write_replace_warning_response());
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_ErrorIndication);
    assert_eq!(d.cause, Some(Cause::protocol(CauseProtocol::abstract_syntax_error_reject)));
    let out = h.log.last().unwrap().clone();
    let cd = cd_of(&S1AP_PDU::decode(&out).unwrap());
    assert_eq!(cd.procedure_code, Some(ProcedureCode(36)));
    assert_eq!(cd.triggering_message, Some(TriggeringMessage::successful_outcome));
    // LOCATION REPORT: criticality ignore -> nothing.
    h.s1(location_report(id, 161));
    assert!(h.drain().is_empty());
    // A procedure code of no release: notify -> ERROR INDICATION; ignore -> nothing.
    h.s1_on(AssocId(1), 0, unknown_procedure(0x80));
    let d = h.one_down();
    assert_eq!(d.cause, Some(Cause::protocol(CauseProtocol::abstract_syntax_error_ignore_and_notify)));
    h.s1_on(AssocId(1), 0, unknown_procedure(0x40));
    assert!(h.drain().is_empty());
    let c = h.mme.counters();
    assert_eq!(c.value("s1ap_unsupported_procedure"), 4);
    assert_eq!(c.value("s1ap_unsupported_rejected"), 1);
    assert_eq!(c.value("s1ap_unsupported_notified"), 1);
    assert_eq!(c.value("s1ap_unsupported_ignored"), 2);
}

// ---- IEs not comprehended or missing (TS 36.413 10.3.4.2, 10.3.5) ----

#[test]
fn unknown_ies_are_handled_by_their_criticality() {
    let mut h = Harness::default();
    let (_, id) = attach_on(&mut h, AssocId(1), "001010000000171", 171);
    // reject: the release is not executed, ERROR INDICATION names the IE.
    h.s1(release_request_with_unknown_ie(id, 171, Criticality::reject));
    let out = h.drain();
    assert!(s11_out(&out).is_empty());
    let s1 = s1_out(&out);
    assert_eq!(s1.len(), 1);
    let d = read_down(&s1[0].1.encode().unwrap());
    assert_eq!(d.cause, Some(Cause::protocol(CauseProtocol::abstract_syntax_error_reject)));
    let items = cd_of(&s1[0].1).ies_criticality_diagnostics.unwrap();
    assert_eq!((items.0[0].ie_id, items.0[0].type_of_error), (ProtocolIEID(65000), TypeOfError::not_understood));
    // ignore: executed as if it were not there.
    h.s1(release_request_with_unknown_ie(id, 171, Criticality::ignore));
    let (r, req) = expect_s11(&h.drain());
    assert!(matches!(req, S11Request::ReleaseAccessBearers(_)));
    h.s11(r, S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED));
    assert_eq!(h.one_down().kind, S1apPduKind::Initiating_UEContextRelease);
    // notify (class 2): executed, and an ERROR INDICATION reports the IE.
    let (_, id2) = attach_on(&mut h, AssocId(1), "001010000000172", 172);
    h.s1(release_request_with_unknown_ie(id2, 172, Criticality::notify));
    let out = h.drain();
    assert_eq!(s11_out(&out).len(), 1);
    let s1 = s1_out(&out);
    let d = read_down(&s1[0].1.encode().unwrap());
    assert_eq!(d.cause, Some(Cause::protocol(CauseProtocol::abstract_syntax_error_ignore_and_notify)));
}

#[test]
fn s1_setup_with_an_unknown_reject_ie_fails_with_criticality_diagnostics() {
    let mut h = Harness::default();
    h.mme.handle(h.now, MmeEvent::S1Up { assoc: AssocId(9), peer: [127, 0, 0, 1].into(), outbound_streams: 2 });
    let mut pdu = S1AP_PDU::decode(&s1_setup_request("001", "01", 9)).unwrap();
    let mut ies = pdu.protocol_ies().unwrap().into_owned();
    ies.0.push(ProtocolIEField::new(ProtocolIEID(65001), Criticality::reject, oxirush_s1ap::Octets::from(vec![1])));
    pdu.set_protocol_ies(ies).unwrap();
    h.s1_on(AssocId(9), 0, pdu.encode().unwrap().to_vec());
    let out = h.drain();
    let s1 = s1_out(&out);
    assert_eq!(s1[0].1.kind(), S1apPduKind::Unsuccessful_S1Setup);
    let d = read_down(&s1[0].1.encode().unwrap());
    assert_eq!(d.cause, Some(Cause::protocol(CauseProtocol::abstract_syntax_error_reject)));
    let cd = cd_of(&s1[0].1);
    assert_eq!(cd.procedure_code, None, "9.2.1.21: not in a response");
    assert_eq!(cd.ies_criticality_diagnostics.unwrap().0[0].ie_id, ProtocolIEID(65001));
    assert!(!h.mme.enbs[&AssocId(9)].setup);
    // With the IE ignore-and-notify instead: set up, reported in the response.
    let mut pdu = S1AP_PDU::decode(&s1_setup_request("001", "01", 9)).unwrap();
    let mut ies = pdu.protocol_ies().unwrap().into_owned();
    ies.0.push(ProtocolIEField::new(ProtocolIEID(65001), Criticality::notify, oxirush_s1ap::Octets::from(vec![1])));
    pdu.set_protocol_ies(ies).unwrap();
    h.s1_on(AssocId(9), 0, pdu.encode().unwrap().to_vec());
    let out = h.drain();
    let s1 = s1_out(&out);
    assert_eq!(s1.len(), 1);
    assert_eq!(s1[0].1.kind(), S1apPduKind::Successful_S1Setup);
    assert_eq!(cd_of(&s1[0].1).ies_criticality_diagnostics.unwrap().0[0].ie_id, ProtocolIEID(65001));
    assert!(h.mme.enbs[&AssocId(9)].setup);
}

#[test]
fn missing_reject_ie_rejects_and_missing_ignore_ie_is_tolerated() {
    let mut h = Harness::default();
    let (_, id) = attach_on(&mut h, AssocId(1), "001010000000181", 181);
    // UE CONTEXT RELEASE REQUEST without its eNB-UE-S1AP-ID (reject).
    let pdu = encode(build_s1ap!(
        InitiatingMessage,
        UEContextReleaseRequest,
        UEContextReleaseRequest,
        MME_UE_S1AP_ID(id),
        Cause(Cause::radioNetwork(CauseRadioNetwork::user_inactivity)),
    ));
    h.s1(pdu);
    let out = h.drain();
    assert!(s11_out(&out).is_empty());
    let s1 = s1_out(&out);
    let items = cd_of(&s1[0].1).ies_criticality_diagnostics.unwrap();
    assert_eq!((items.0[0].ie_id, items.0[0].type_of_error), (ProtocolIEID(8), TypeOfError::missing));
    // INITIAL UE MESSAGE without its E-UTRAN CGI (ignore): served.
    let ue = TestUe::new("001010000000182", 182);
    let pdu = encode(build_s1ap!(
        InitiatingMessage,
        initialUEMessage,
        InitialUEMessage,
        eNB_UE_S1AP_ID(182u32),
        NAS_PDU(ue.attach_request()),
        TAI(tai(plmn("001", "01").unwrap(), [0, 1])),
        RRC_Establishment_Cause(RRCEstablishmentCause::mo_Signalling),
    ));
    h.s1(pdu);
    let _ = expect_s6a(&h.drain());
    // Without its TAI (reject): not served, ERROR INDICATION.
    let ue = TestUe::new("001010000000183", 183);
    let pdu = encode(build_s1ap!(
        InitiatingMessage,
        initialUEMessage,
        InitialUEMessage,
        eNB_UE_S1AP_ID(183u32),
        NAS_PDU(ue.attach_request()),
        EUTRAN_CGI(eutran_cgi(plmn("001", "01").unwrap(), EnbKind::Macro, 0x12345, 1).unwrap()),
        RRC_Establishment_Cause(RRCEstablishmentCause::mo_Signalling),
    ));
    h.s1(pdu);
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_ErrorIndication);
    assert_eq!((d.mme_id, d.enb_id), (None, Some(183)));
    assert_eq!(h.mme.stats().ues, 2);
}

#[test]
fn an_error_indication_is_never_answered() {
    let mut h = Harness::default();
    let ei = crate::s1ap_build::error_indication(None, None, Cause::misc(CauseMisc::unspecified)).unwrap();
    let mut pdu = S1AP_PDU::decode(&ei).unwrap();
    let mut ies = pdu.protocol_ies().unwrap().into_owned();
    ies.0.push(ProtocolIEField::new(ProtocolIEID(65002), Criticality::reject, oxirush_s1ap::Octets::from(vec![1])));
    pdu.set_protocol_ies(ies).unwrap();
    h.s1_on(AssocId(1), 0, pdu.encode().unwrap().to_vec());
    assert!(h.drain().is_empty());
}
