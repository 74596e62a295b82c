//! X2 and S1 handovers between two or three eNBs against the scripted MME,
//! under a virtual clock; every key is checked against one computed here
//! with oxirush-security.

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

use mobicore_common::{tools, Fteid, Teid};
use oxirush_s1ap::helpers::{eutran_cgi, global_enb_id, plmn, tai, ue_security_capabilities, EnbKind};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{build_s1ap, build_s1ap_ie, extract_s1ap_ies, ie, BitString, S1apPduKind};
use oxirush_security::nas_eps::{derive_kenb_star, derive_nh, KEnb, Nh};
use proptest::prelude::*;

use super::mme::*;
use crate::enb::handover::{ErabForwarding, HandoverAction, HandoverError, TargetCell, EARFCN_DL};
use crate::enb::{Enb, EnbAction, EnbConfig};
use crate::ue::handover::rrc_handover_command_ncc;
use crate::ue::Procedure;

type Res<T> = Result<T, oxirush_s1ap::Error>;

const TARGET_MME_UE_ID: u32 = 300;
const NEW_SGW_TEID: u32 = 0x9999;
const SGW_FWD_TEID: u32 = 0x7777;

/// A second (or third) eNB with S1 up and no UE.
fn other_enb(now: Instant, enb_id: u32) -> Enb {
    let cfg = EnbConfig {
        enb_id,
        name: format!("enb-{enb_id}"),
        s1u_addr: Ipv4Addr::new(127, 0, 0, enb_id as u8),
        ..enb_config()
    };
    enb_up(now, cfg)
}

fn decoded(pdu: &[u8], kind: S1apPduKind) -> S1AP_PDU {
    let pdu = S1AP_PDU::decode(pdu).unwrap();
    assert_eq!(pdu.kind(), kind);
    assert!(pdu.check().unwrap().is_empty(), "{pdu} deviates from the ASN.1");
    pdu
}

fn only_send(actions: &[EnbAction]) -> Vec<Vec<u8>> {
    actions.iter().filter_map(|a| if let EnbAction::Send { pdu, .. } = a { Some(pdu.clone()) } else { None }).collect()
}

fn handover_actions(actions: &[EnbAction]) -> Vec<HandoverAction> {
    actions.iter().filter_map(|a| if let EnbAction::Handover(h) = a { Some(h.clone()) } else { None }).collect()
}

fn kenb_star_of(base: &[u8; 32], vertical: bool, cell: &TargetCell) -> [u8; 32] {
    let k = if vertical {
        derive_kenb_star(&Nh::new(base), cell.pci, cell.earfcn_dl)
    } else {
        derive_kenb_star(&KEnb::new(base), cell.pci, cell.earfcn_dl)
    };
    *k.unwrap().as_octets()
}

/// NH of NCC 1 from the MME's KASME and the KeNB of Initial Context Setup,
/// then each next one (TS 33.401 A.4).
fn nh_chain(mme: &FakeMme, count: usize) -> Vec<[u8; 32]> {
    let kasme = mme.kasme.as_ref().unwrap();
    let mut chain = vec![*derive_nh(kasme, &KEnb::new(&mme.kenb())).as_octets()];
    while chain.len() < count {
        let next = *derive_nh(kasme, &Nh::new(chain.last().unwrap())).as_octets();
        chain.push(next);
    }
    chain
}

fn encoded(pdu: S1AP_PDU) -> Vec<u8> {
    pdu.encode().unwrap().to_vec()
}

fn path_switch_ack(mme_ue_id: u32, enb_ue_id: u32, ncc: u8, nh: [u8; 32]) -> Vec<u8> {
    let item = ERABToBeSwitchedULItem::new(
        ERABID(5),
        TransportLayerAddress(BitString::from(SGW.octets())),
        GTPTEID(NEW_SGW_TEID.to_be_bytes()),
        None,
    );
    let items = vec![build_s1ap_ie!(IGNORE E_RABToBeSwitchedULItem(item)).unwrap()];
    encoded(
        build_s1ap!(
            SuccessfulOutcome,
            PathSwitchRequest,
            PathSwitchRequestAcknowledge,
            MME_UE_S1AP_ID(mme_ue_id),
            eNB_UE_S1AP_ID(enb_ue_id),
            E_RABToBeSwitchedULList(ERABToBeSwitchedULList(items)),
            SecurityContext(SecurityContext::new(ncc, SecurityKey(BitString::from(nh)), None)),
        )
        .unwrap(),
    )
}

fn path_switch_failure(mme_ue_id: u32, enb_ue_id: u32) -> Vec<u8> {
    encoded(
        build_s1ap!(
            UnsuccessfulOutcome,
            PathSwitchRequest,
            PathSwitchRequestFailure,
            MME_UE_S1AP_ID(mme_ue_id),
            eNB_UE_S1AP_ID(enb_ue_id),
            Cause(Cause::radioNetwork(CauseRadioNetwork::unknown_enb_ue_s1ap_id)),
        )
        .unwrap(),
    )
}

fn handover_request(source_to_target: Vec<u8>, ncc: u8, nh: [u8; 32]) -> Vec<u8> {
    let priority = AllocationAndRetentionPriority::new(
        PriorityLevel(8),
        PreEmptionCapability::shall_not_trigger_pre_emption,
        PreEmptionVulnerability::not_pre_emptable,
        None,
    );
    let bearer = ERABToBeSetupItemHOReq::new(
        ERABID(5),
        TransportLayerAddress(BitString::from(SGW.octets())),
        GTPTEID(SGW_TEID.to_be_bytes()),
        ERABLevelQoSParameters::new(QCI(9), priority, None, None),
        None,
    );
    let bearers = vec![build_s1ap_ie!(REJECT E_RABToBeSetupItemHOReq(bearer)).unwrap()];
    let rates = UEAggregateMaximumBitrate::new(BitRate(100_000_000), BitRate(50_000_000), None);
    encoded(
        build_s1ap!(
            InitiatingMessage,
            HandoverResourceAllocation,
            HandoverRequest,
            MME_UE_S1AP_ID(TARGET_MME_UE_ID),
            HandoverType(HandoverType::intralte),
            Cause(Cause::radioNetwork(CauseRadioNetwork::handover_desirable_for_radio_reason)),
            uEaggregateMaximumBitrate(rates),
            E_RABToBeSetupListHOReq(ERABToBeSetupListHOReq(bearers)),
            Source_ToTarget_TransparentContainer(SourceToTargetTransparentContainer::from(source_to_target)),
            UESecurityCapabilities(ue_security_capabilities(0xe0, 0xe0)),
            SecurityContext(SecurityContext::new(ncc, SecurityKey(BitString::from(nh)), None)),
        )
        .unwrap(),
    )
}

fn handover_command(enb_ue_id: u32, forwarding: Option<Fteid>, target_to_source: Vec<u8>) -> Vec<u8> {
    let ids = (MME_UE_ID, enb_ue_id);
    let container = TargetToSourceTransparentContainer::from(target_to_source);
    let pdu = match forwarding {
        Some(f) => {
            let item = ERABDataForwardingItem::new(
                ERABID(5),
                Some(TransportLayerAddress(BitString::from(f.ipv4.octets()))),
                Some(GTPTEID(f.teid.0.to_be_bytes())),
                None,
                None,
                None,
            );
            let items = vec![build_s1ap_ie!(IGNORE E_RABDataForwardingItem(item)).unwrap()];
            build_s1ap!(
                SuccessfulOutcome,
                HandoverPreparation,
                HandoverCommand,
                MME_UE_S1AP_ID(ids.0),
                eNB_UE_S1AP_ID(ids.1),
                HandoverType(HandoverType::intralte),
                E_RABSubjecttoDataForwardingList(ERABSubjecttoDataForwardingList(items)),
                Target_ToSource_TransparentContainer(container),
            )
        }
        None => build_s1ap!(
            SuccessfulOutcome,
            HandoverPreparation,
            HandoverCommand,
            MME_UE_S1AP_ID(ids.0),
            eNB_UE_S1AP_ID(ids.1),
            HandoverType(HandoverType::intralte),
            Target_ToSource_TransparentContainer(container),
        ),
    };
    encoded(pdu.unwrap())
}

fn preparation_failure(enb_ue_id: u32) -> Vec<u8> {
    encoded(
        build_s1ap!(
            UnsuccessfulOutcome,
            HandoverPreparation,
            HandoverPreparationFailure,
            MME_UE_S1AP_ID(MME_UE_ID),
            eNB_UE_S1AP_ID(enb_ue_id),
            Cause(Cause::radioNetwork(CauseRadioNetwork::ho_target_not_allowed)),
        )
        .unwrap(),
    )
}

fn cancel_acknowledge(enb_ue_id: u32) -> Vec<u8> {
    encoded(
        build_s1ap!(
            SuccessfulOutcome,
            HandoverCancel,
            HandoverCancelAcknowledge,
            MME_UE_S1AP_ID(MME_UE_ID),
            eNB_UE_S1AP_ID(enb_ue_id),
        )
        .unwrap(),
    )
}

fn mme_status_transfer(enb_ue_id: u32) -> Vec<u8> {
    let count = || COUNTvalue::new(PDCPSN(0), HFN(0), None);
    let item = BearersSubjectToStatusTransferItem::new(ERABID(5), count(), count(), None, None);
    let items = vec![build_s1ap_ie!(IGNORE Bearers_SubjectToStatusTransfer_Item(item)).unwrap()];
    let container = ENBStatusTransferTransparentContainer::new(BearersSubjectToStatusTransferList(items), None);
    encoded(
        build_s1ap!(
            InitiatingMessage,
            MMEStatusTransfer,
            MMEStatusTransfer,
            MME_UE_S1AP_ID(TARGET_MME_UE_ID),
            eNB_UE_S1AP_ID(enb_ue_id),
            eNB_StatusTransfer_TransparentContainer(container),
        )
        .unwrap(),
    )
}

fn release_command_for(mme_ue_id: u32, enb_ue_id: u32, cause: CauseRadioNetwork) -> Vec<u8> {
    let ids = UES1APIDs::uE_S1AP_ID_pair(UES1APIDPair::new(MMEUES1APID(mme_ue_id), ENBUES1APID(enb_ue_id), None));
    encoded(
        build_s1ap!(
            InitiatingMessage,
            UEContextRelease,
            UEContextReleaseCommand,
            UE_S1AP_IDs(ids),
            Cause(Cause::radioNetwork(cause)),
        )
        .unwrap(),
    )
}

/// eNB 1 with UE 0 attached, eNB 2 empty.
fn two_enbs(now: Instant) -> (Enb, Enb, FakeMme, u32) {
    let mut source = ready_enb(now);
    let mut mme = FakeMme::new();
    let enb_ue_id = attach(&mut source, &mut mme, now);
    let _ = drain(&mut source);
    (source, other_enb(now, 2), mme, enb_ue_id)
}

/// X2 out of `source` and into `target`; returns the PATH SWITCH REQUEST's
/// eNB-UE-S1AP-ID and the E-RABs of the target.
fn x2_to(now: Instant, source: &mut Enb, target: &mut Enb) -> Res<(u32, Vec<ErabForwarding>)> {
    let ho = source.x2_handover_out(now, 0, target.cell()).unwrap();
    let forwarding = target.x2_handover_in(now, ho).unwrap();
    let sent = only_send(&drain(target));
    assert_eq!(sent.len(), 1);
    let pdu = decoded(&sent[0], S1apPduKind::Initiating_PathSwitchRequest);
    extract_s1ap_ies!(pdu, PathSwitchRequest,
        req enb: u32 = eNB_UE_S1AP_ID(id),
        req source_mme: u32 = SourceMME_UE_S1AP_ID(id),
        req ecgi: EUTRANCGI = EUTRAN_CGI(c) => c,
        req tai_: TAI = TAI(t) => t,
    );
    let network = plmn("001", "01").unwrap();
    let cell = target.cell();
    assert_eq!(ecgi, eutran_cgi(network, EnbKind::Macro, cell.enb_id, 1).unwrap());
    assert_eq!(tai_, tai(network, cell.tac.to_be_bytes()));
    let items: Vec<_> = pdu.items::<ie::E_RABToBeSwitchedDLList>().map(Result::unwrap).collect();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].e_rab_id.0, 5);
    let target_enb = forwarding[0].target_enb.unwrap();
    assert_eq!(u32::from_be_bytes(items[0].gtp_teid.0), target_enb.teid.0);
    assert_eq!(items[0].transport_layer_address.0.as_octets(), &target_enb.ipv4.octets());
    let _ = source_mme;
    Ok((enb, forwarding))
}

#[test]
fn x2_handover_switches_path_and_takes_next_hop_then_hands_over_again_vertically() -> Res<()> {
    let t0 = Instant::now();
    let (mut enb1, mut enb2, mme, _) = two_enbs(t0);
    let kenb0 = mme.kenb();
    let source_fteid = enb1.ue(0).unwrap().erabs[0].enb;

    // Out of eNB 1: horizontal KeNB* (no unused NH yet), NCC 0.
    let ho = enb1.x2_handover_out(t0, 0, enb2.cell()).unwrap();
    assert_eq!(ho.kenb_star, kenb_star_of(&kenb0, false, &enb2.cell()));
    assert_eq!(ho.ncc, 0);
    assert_eq!(ho.mme_ue_id, MME_UE_ID);
    assert_eq!(ho.erabs[0].sgw, Some(Fteid { teid: Teid(SGW_TEID), ipv4: SGW }));
    assert!(enb1.ue(0).is_none(), "the UE left the source");
    assert_eq!(enb1.forwarding_source(0).unwrap().erabs[0].source_enb, Some(source_fteid));

    // Into eNB 2: PATH SWITCH REQUEST with its own F-TEIDs.
    let forwarding = enb2.x2_handover_in(t0 + Duration::from_millis(1), ho).unwrap();
    assert_eq!(forwarding.len(), 1);
    let f = forwarding[0];
    assert_eq!(f.source_enb, Some(source_fteid));
    assert_eq!(f.target_enb.unwrap().ipv4, Ipv4Addr::new(127, 0, 0, 2));
    assert_ne!(f.forwarding.unwrap().teid, f.target_enb.unwrap().teid);
    assert!(enb1.x2_forwarding_to(0, &forwarding));
    assert_eq!(enb1.forwarding_source(0).unwrap().erabs, forwarding, "the source learns where to forward");
    assert!(!enb2.x2_forwarding_to(0, &forwarding), "the UE did not leave eNB 2");
    let sent = only_send(&drain(&mut enb2));
    let pdu = decoded(&sent[0], S1apPduKind::Initiating_PathSwitchRequest);
    extract_s1ap_ies!(pdu, PathSwitchRequest,
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        req source_mme: u32 = SourceMME_UE_S1AP_ID(id),
    );
    assert_eq!(source_mme, MME_UE_ID);
    let ctx = enb2.ue(0).unwrap();
    assert_eq!(ctx.kenb, ctx.ue.kenb(), "the UE took the same KeNB* from the handover command");

    // PATH SWITCH REQUEST ACKNOWLEDGE with {NCC 1, NH 1}.
    let nh = nh_chain(&mme, 2);
    enb2.handle_s1ap(t0 + Duration::from_millis(8), 1, &path_switch_ack(TARGET_MME_UE_ID, enb_ue_id, 1, nh[0]));
    let actions = drain(&mut enb2);
    assert_eq!(handover_actions(&actions), vec![HandoverAction::X2Release { ue: 0, source_enb_id: 1, switched: true }]);
    let o = outcomes(&actions);
    assert_eq!((o[0].procedure, o[0].result.clone()), (Procedure::X2Handover, Ok(())), "{actions:?}");
    assert_eq!(o[0].latency, Duration::from_millis(8));
    let ctx = enb2.ue(0).unwrap();
    assert_eq!(ctx.mobility.next_hop(), Some((1, nh[0])));
    assert_eq!(ctx.erabs[0].sgw.unwrap().teid, Teid(NEW_SGW_TEID), "uplink to the S-GW F-TEID of the ACK");
    assert_eq!(ctx.s1.unwrap().mme_ue_id, Some(TARGET_MME_UE_ID));
    assert!(enb1.x2_release(0));
    assert!(enb1.forwarding_source(0).is_none());
    assert!(!enb1.x2_release(0));

    // Back to eNB 1: vertical from the unused NH, NCC 1; then NCC 2.
    let ho = enb2.x2_handover_out(t0, 0, enb1.cell()).unwrap();
    assert_eq!((ho.ncc, ho.kenb_star), (1, kenb_star_of(&nh[0], true, &enb1.cell())));
    enb1.x2_handover_in(t0, ho).unwrap();
    let sent = only_send(&drain(&mut enb1));
    let pdu = decoded(&sent[0], S1apPduKind::Initiating_PathSwitchRequest);
    extract_s1ap_ies!(pdu, PathSwitchRequest, req id: u32 = eNB_UE_S1AP_ID(id),);
    enb1.handle_s1ap(t0, 1, &path_switch_ack(TARGET_MME_UE_ID, id, 2, nh[1]));
    let o = outcomes(&drain(&mut enb1));
    assert_eq!(o[0].result, Ok(()));
    assert_eq!(enb1.ue(0).unwrap().mobility.next_hop(), Some((2, nh[1])));
    assert!(enb2.x2_release(0));
    Ok(())
}

#[test]
fn x2_path_switch_with_a_wrong_nh_is_a_failure() {
    let t0 = Instant::now();
    let (mut enb1, mut enb2, _mme, _) = two_enbs(t0);
    let (id, _) = x2_to(t0, &mut enb1, &mut enb2).unwrap();
    enb2.handle_s1ap(t0, 1, &path_switch_ack(TARGET_MME_UE_ID, id, 1, [7; 32]));
    let actions = drain(&mut enb2);
    let o = outcomes(&actions);
    assert!(o[0].result.as_ref().unwrap_err().contains("differs from the UE's"), "{o:?}");
    assert_eq!(enb2.ue(0).unwrap().mobility.next_hop(), None);
    assert_eq!(handover_actions(&actions).len(), 1, "the source is released all the same");
}

#[test]
fn x2_path_switch_failure_drops_the_ue_to_idle_and_releases_the_source() {
    let t0 = Instant::now();
    let (mut enb1, mut enb2, _mme, _) = two_enbs(t0);
    let (id, _) = x2_to(t0, &mut enb1, &mut enb2).unwrap();
    enb2.handle_s1ap(t0 + Duration::from_millis(3), 1, &path_switch_failure(MME_UE_ID, id));
    let actions = drain(&mut enb2);
    assert_eq!(
        handover_actions(&actions),
        vec![HandoverAction::X2Release { ue: 0, source_enb_id: 1, switched: false }]
    );
    let o = outcomes(&actions);
    assert_eq!(o[0].procedure, Procedure::X2Handover);
    assert!(o[0].result.as_ref().unwrap_err().contains("PATH SWITCH REQUEST FAILURE"));
    let ctx = enb2.ue(0).unwrap();
    assert!(ctx.s1.is_none() && ctx.erabs.is_empty(), "idle in the target cell");
    assert!(enb1.x2_release(0));
    // An acknowledge now finds no UE: ERROR INDICATION.
    enb2.handle_s1ap(t0, 1, &path_switch_ack(MME_UE_ID, id, 1, [0; 32]));
    let sent = only_send(&drain(&mut enb2));
    decoded(&sent[0], S1apPduKind::Initiating_ErrorIndication);
}

#[test]
fn x2_path_switch_without_answer_fails_at_the_guard() {
    let t0 = Instant::now();
    let (mut enb1, mut enb2, _mme, _) = two_enbs(t0);
    x2_to(t0, &mut enb1, &mut enb2).unwrap();
    let deadline = enb2.poll_timeout().unwrap();
    assert_eq!(deadline, t0 + enb_config().procedure_timeout);
    enb2.handle_timeout(deadline - Duration::from_millis(1));
    assert!(drain(&mut enb2).is_empty());
    enb2.handle_timeout(deadline);
    let actions = drain(&mut enb2);
    assert!(outcomes(&actions)[0].result.is_err());
    assert!(matches!(handover_actions(&actions)[..], [HandoverAction::X2Release { switched: false, .. }]));
}

#[test]
fn x2_handover_needs_a_connected_idle_procedure_ue() {
    let t0 = Instant::now();
    let mut enb1 = ready_enb(t0);
    let enb2 = other_enb(t0, 2);
    assert_eq!(enb1.x2_handover_out(t0, 0, enb2.cell()).unwrap_err(), HandoverError::NotConnected(0));
    assert_eq!(enb1.x2_handover_out(t0, 9, enb2.cell()).unwrap_err(), HandoverError::UnknownUe(9));
    assert!(enb1.ue(0).is_some());
}

/// The target's eNB-UE-S1AP-ID, DL forwarding F-TEID, Target to Source
/// Transparent Container, and the PDUs seen.
type Prepared = (u32, Fteid, Vec<u8>, Vec<Vec<u8>>);

/// HANDOVER REQUIRED from eNB 1, HANDOVER REQUEST at eNB 2; returns the
/// target's eNB-UE-S1AP-ID, its DL forwarding F-TEID and the Target to
/// Source Transparent Container, and the PDUs seen.
fn s1_prepare(t0: Instant, enb1: &mut Enb, enb2: &mut Enb, fake: &FakeMme, direct: bool) -> Res<Prepared> {
    let mut pdus = Vec::new();
    enb1.start_s1_handover(t0, 0, enb2.cell(), direct).unwrap();
    let sent = only_send(&drain(enb1));
    assert_eq!(sent.len(), 1);
    pdus.push(sent[0].clone());
    let pdu = decoded(&sent[0], S1apPduKind::Initiating_HandoverPreparation);
    extract_s1ap_ies!(pdu, HandoverRequired,
        req mme: u32 = MME_UE_S1AP_ID(id),
        req handover_type: HandoverType = HandoverType(t) => t,
        req cause: Cause = Cause(c) => c,
        req target: TargetID = TargetID(t) => t,
        opt direct_path: DirectForwardingPathAvailability = Direct_Forwarding_Path_Availability(d) => d,
        req container: Vec<u8> = Source_ToTarget_TransparentContainer(c) => c.0.to_vec(),
    );
    assert_eq!(mme, MME_UE_ID);
    assert_eq!(handover_type, HandoverType::intralte);
    assert_eq!(cause, Cause::radioNetwork(CauseRadioNetwork::handover_desirable_for_radio_reason));
    let network = plmn("001", "01").unwrap();
    let TargetID::targeteNB_ID(target) = target else { panic!("not an eNB target") };
    assert_eq!(target.global_enb_id, global_enb_id(network, EnbKind::Macro, 2).unwrap());
    assert_eq!(direct_path.is_some(), direct);
    let carried: SourceeNBToTargeteNBTransparentContainer = decode_open_type(&container).unwrap();
    assert_eq!(carried.target_cell_id, eutran_cgi(network, EnbKind::Macro, 2, 1).unwrap());

    // The MME's next NH (NCC 1) goes to the target.
    let nh = nh_chain(fake, 1)[0];
    let request = handover_request(container, 1, nh);
    pdus.push(request.clone());
    enb2.handle_s1ap(t0, 1, &request);
    let sent = only_send(&drain(enb2));
    assert_eq!(sent.len(), 1);
    pdus.push(sent[0].clone());
    let pdu = decoded(&sent[0], S1apPduKind::Successful_HandoverResourceAllocation);
    extract_s1ap_ies!(pdu, HandoverRequestAcknowledge,
        req mme: u32 = MME_UE_S1AP_ID(id),
        req enb: u32 = eNB_UE_S1AP_ID(id),
        req back: Vec<u8> = Target_ToSource_TransparentContainer(c) => c.0.to_vec(),
    );
    assert_eq!(mme, TARGET_MME_UE_ID);
    let items: Vec<_> = pdu.items::<ie::E_RABAdmittedList>().map(Result::unwrap).collect();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].transport_layer_address.0.as_octets(), &[127, 0, 0, 2]);
    let dl = items[0].dl_gtp_teid.unwrap();
    let fwd = Fteid { teid: Teid(u32::from_be_bytes(dl.0)), ipv4: Ipv4Addr::new(127, 0, 0, 2) };
    let rrc: TargeteNBToSourceeNBTransparentContainer = decode_open_type(&back).unwrap();
    assert_eq!(rrc_handover_command_ncc(&rrc.rrc_container.0), Some(1), "the RRC HandoverCommand carries NCC 1");
    Ok((enb, fwd, back, pdus))
}

/// A whole S1 handover; MME STATUS TRANSFER before or after the UE arrives.
fn s1_handover(status_before_arrival: bool, direct: bool) -> Res<Vec<Vec<u8>>> {
    let t0 = Instant::now();
    let (mut enb1, mut enb2, fake, source_id) = two_enbs(t0);
    let (target_id, target_fwd, back, mut pdus) = s1_prepare(t0, &mut enb1, &mut enb2, &fake, direct)?;
    // Direct forwarding to the target, indirect through the S-GW.
    let fwd = if direct { target_fwd } else { Fteid { teid: Teid(SGW_FWD_TEID), ipv4: SGW } };
    let command = handover_command(source_id, Some(fwd), back);
    pdus.push(command.clone());
    enb1.handle_s1ap(t0 + Duration::from_millis(5), 1, &command);
    let actions = drain(&mut enb1);
    let sent = only_send(&actions);
    assert_eq!(sent.len(), 1);
    pdus.push(sent[0].clone());
    let pdu = decoded(&sent[0], S1apPduKind::Initiating_eNBStatusTransfer);
    extract_s1ap_ies!(pdu, ENBStatusTransfer, req enb: u32 = eNB_UE_S1AP_ID(id),);
    assert_eq!(enb, source_id);
    let source_fteid = enb1.ue(0).unwrap().erabs[0].enb;
    let [HandoverAction::S1HandoverExecute { ue: 0, target_enb_id: 2, forwarding }] = &handover_actions(&actions)[..]
    else {
        panic!("{actions:?}")
    };
    assert_eq!(forwarding[0].forwarding, Some(fwd));
    assert_eq!(forwarding[0].source_enb, Some(source_fteid));

    let status = mme_status_transfer(target_id);
    if status_before_arrival {
        enb2.handle_s1ap(t0, 1, &status);
        assert!(drain(&mut enb2).is_empty(), "MME STATUS TRANSFER before the UE is taken");
    }
    let departure = enb1.s1_handover_depart(0).unwrap();
    assert!(enb1.ue(0).is_none());
    let arrived = enb2.s1_handover_arrive(t0 + Duration::from_millis(20), departure).unwrap();
    let actions = drain(&mut enb2);
    let sent = only_send(&actions);
    assert_eq!(sent.len(), 1);
    pdus.push(sent[0].clone());
    let pdu = decoded(&sent[0], S1apPduKind::Initiating_HandoverNotification);
    extract_s1ap_ies!(pdu, HandoverNotify, req mme: u32 = MME_UE_S1AP_ID(id), req enb: u32 = eNB_UE_S1AP_ID(id),);
    assert_eq!((mme, enb), (TARGET_MME_UE_ID, target_id));
    assert_eq!(
        handover_actions(&actions),
        vec![HandoverAction::S1HandoverArrived { ue: 0, forwarding: arrived.clone() }]
    );
    assert_eq!(arrived[0].forwarding, Some(target_fwd));
    let o = outcomes(&actions);
    assert_eq!((o[0].procedure, o[0].result.clone()), (Procedure::S1Handover, Ok(())), "{actions:?}");
    assert_eq!(o[0].latency, Duration::from_millis(20));
    // KeNB from NH of NCC 1 for eNB 2's cell, the same at the UE.
    let ctx = enb2.ue(0).unwrap();
    let expected = kenb_star_of(&nh_chain(&fake, 1)[0], true, &enb2.cell());
    assert_eq!(ctx.kenb, Some(expected));
    assert_eq!(ctx.ue.kenb(), Some(expected));
    assert_eq!(ctx.erabs[0].sgw.unwrap().teid, Teid(SGW_TEID));
    if !status_before_arrival {
        enb2.handle_s1ap(t0, 1, &status);
        assert!(drain(&mut enb2).is_empty(), "MME STATUS TRANSFER after the UE arrived");
    }

    // The source is released (successful handover) and forgets the UE.
    assert!(enb1.forwarding_source(0).is_some());
    enb1.handle_s1ap(t0, 1, &release_command_for(MME_UE_ID, source_id, CauseRadioNetwork::successful_handover));
    let sent = only_send(&drain(&mut enb1));
    decoded(&sent[0], S1apPduKind::Successful_UEContextRelease);
    assert!(enb1.forwarding_source(0).is_none());
    Ok(pdus)
}

#[test]
fn s1_handover_with_direct_forwarding_status_transfer_before_arrival() {
    s1_handover(true, true).unwrap();
}

#[test]
fn s1_handover_with_indirect_forwarding_status_transfer_after_arrival() {
    s1_handover(false, false).unwrap();
}

#[test]
fn s1_preparation_failure_keeps_the_ue_at_the_source() {
    let t0 = Instant::now();
    let (mut enb1, enb2, _mme, id) = two_enbs(t0);
    enb1.start_s1_handover(t0, 0, enb2.cell(), false).unwrap();
    let _ = drain(&mut enb1);
    assert_eq!(enb1.start_s1_handover(t0, 0, enb2.cell(), false).unwrap_err(), HandoverError::Busy(0));
    enb1.handle_s1ap(t0 + Duration::from_millis(4), 1, &preparation_failure(id));
    let actions = drain(&mut enb1);
    let o = outcomes(&actions);
    assert_eq!(o[0].procedure, Procedure::S1Handover);
    assert!(o[0].result.as_ref().unwrap_err().contains("HANDOVER PREPARATION FAILURE"), "{o:?}");
    assert!(only_send(&actions).is_empty());
    assert!(enb1.ue(0).unwrap().s1.is_some(), "still connected at the source");
    // A new handover may start.
    enb1.start_s1_handover(t0, 0, enb2.cell(), false).unwrap();
}

#[test]
fn s1_cancel_before_and_after_the_handover_command() -> Res<()> {
    let t0 = Instant::now();
    let (mut enb1, mut enb2, mme, id) = two_enbs(t0);
    enb1.start_s1_handover(t0, 0, enb2.cell(), false).unwrap();
    let _ = drain(&mut enb1);
    assert_eq!(enb1.cancel_s1_handover(t0, 1).unwrap_err(), HandoverError::UnknownUe(1));
    enb1.cancel_s1_handover(t0 + Duration::from_millis(2), 0).unwrap();
    let actions = drain(&mut enb1);
    let pdu = decoded(&only_send(&actions)[0], S1apPduKind::Initiating_HandoverCancel);
    extract_s1ap_ies!(pdu, HandoverCancel, req cause: Cause = Cause(c) => c,);
    assert_eq!(cause, Cause::radioNetwork(CauseRadioNetwork::handover_cancelled));
    assert_eq!(outcomes(&actions)[0].result, Err("handover cancelled".into()));
    // A HANDOVER COMMAND crossing the cancel is not executed.
    let back = rrc_container_for(1);
    enb1.handle_s1ap(t0, 1, &handover_command(id, None, back));
    let actions = drain(&mut enb1);
    assert!(handover_actions(&actions).is_empty() && only_send(&actions).is_empty(), "{actions:?}");
    enb1.handle_s1ap(t0, 1, &cancel_acknowledge(id));
    assert!(drain(&mut enb1).is_empty());
    assert_eq!(enb1.cancel_s1_handover(t0, 0).unwrap_err(), HandoverError::NothingToCancel(0));

    // Cancelled after the HANDOVER COMMAND, before the UE left.
    let (target_id, _, back, _) = s1_prepare(t0, &mut enb1, &mut enb2, &mme, true).unwrap();
    enb1.handle_s1ap(t0, 1, &handover_command(id, None, back));
    assert_eq!(handover_actions(&drain(&mut enb1)).len(), 1);
    enb1.cancel_s1_handover(t0, 0).unwrap();
    let actions = drain(&mut enb1);
    decoded(&only_send(&actions)[0], S1apPduKind::Initiating_HandoverCancel);
    assert!(enb1.s1_handover_depart(0).is_err(), "the UE stays");
    assert!(enb1.ue(0).unwrap().s1.is_some());
    // The MME releases the prepared context at the target.
    enb2.handle_s1ap(t0, 1, &release_command_for(TARGET_MME_UE_ID, target_id, CauseRadioNetwork::handover_cancelled));
    let actions = drain(&mut enb2);
    decoded(&only_send(&actions)[0], S1apPduKind::Successful_UEContextRelease);
    assert!(!actions.iter().any(|a| matches!(a, EnbAction::Anomaly(_))), "{actions:?}");
    Ok(())
}

fn rrc_container_for(ncc: u8) -> Vec<u8> {
    let c = TargeteNBToSourceeNBTransparentContainer::new(
        RRCContainer::from(crate::ue::handover::rrc_handover_command(ncc)),
        None,
    );
    encode_open_type(&c).unwrap().to_vec()
}

#[test]
fn ts1relocprep_expiry_cancels_and_the_ue_stays() -> Res<()> {
    let t0 = Instant::now();
    let (mut enb1, enb2, _mme, _) = two_enbs(t0);
    enb1.start_s1_handover(t0, 0, enb2.cell(), true).unwrap();
    let _ = drain(&mut enb1);
    let deadline = enb1.poll_timeout().unwrap();
    assert_eq!(deadline, t0 + enb_config().procedure_timeout);
    enb1.handle_timeout(deadline - Duration::from_millis(1));
    assert!(drain(&mut enb1).is_empty());
    enb1.handle_timeout(deadline);
    let actions = drain(&mut enb1);
    let pdu = decoded(&only_send(&actions)[0], S1apPduKind::Initiating_HandoverCancel);
    extract_s1ap_ies!(pdu, HandoverCancel, req cause: Cause = Cause(c) => c,);
    assert_eq!(cause, Cause::radioNetwork(CauseRadioNetwork::tS1relocprep_expiry));
    assert_eq!(outcomes(&actions)[0].result, Err("TS1RELOCprep expired".into()));
    assert!(enb1.ue(0).unwrap().s1.is_some());
    Ok(())
}

#[test]
fn handover_command_for_a_ue_that_has_gone_gets_error_indication() -> Res<()> {
    let t0 = Instant::now();
    let (mut enb1, enb2, _mme, id) = two_enbs(t0);
    enb1.start_s1_handover(t0, 0, enb2.cell(), false).unwrap();
    let _ = drain(&mut enb1);
    // The MME releases the UE meanwhile: the handover fails with it.
    enb1.handle_s1ap(t0, 1, &release_command(id));
    let actions = drain(&mut enb1);
    assert!(outcomes(&actions).iter().any(|o| o.procedure == Procedure::S1Handover && o.result.is_err()));
    enb1.handle_s1ap(t0, 1, &handover_command(id, None, rrc_container_for(1)));
    let actions = drain(&mut enb1);
    assert!(handover_actions(&actions).is_empty());
    let sent = only_send(&actions);
    let pdu = decoded(&sent[0], S1apPduKind::Initiating_ErrorIndication);
    extract_s1ap_ies!(pdu, ErrorIndication, req cause: Cause = Cause(c) => c,);
    assert_eq!(cause, Cause::radioNetwork(CauseRadioNetwork::unknown_enb_ue_s1ap_id));
    // Nothing of the handover is left running: no guard fires a cancel
    // later (the idle UE's own tracking area update may go).
    enb1.handle_timeout(t0 + Duration::from_secs(60));
    for p in only_send(&drain(&mut enb1)) {
        let kind = S1AP_PDU::decode(&p).unwrap().kind();
        assert_ne!(kind, S1apPduKind::Initiating_HandoverCancel);
    }
    Ok(())
}

#[test]
fn handover_request_without_e_rabs_gets_handover_failure_and_arrival_unprepared_fails() {
    let t0 = Instant::now();
    let (mut enb1, mut enb2, _mme, _) = two_enbs(t0);
    // No E-RAB list (mandatory; an empty one does not encode, 1..256).
    let bad = build_s1ap!(
        InitiatingMessage,
        HandoverResourceAllocation,
        HandoverRequest,
        MME_UE_S1AP_ID(TARGET_MME_UE_ID),
        HandoverType(HandoverType::intralte),
        Cause(Cause::radioNetwork(CauseRadioNetwork::handover_desirable_for_radio_reason)),
        uEaggregateMaximumBitrate(UEAggregateMaximumBitrate::new(BitRate(1), BitRate(1), None)),
        Source_ToTarget_TransparentContainer(SourceToTargetTransparentContainer::from(vec![0u8])),
        UESecurityCapabilities(ue_security_capabilities(0xe0, 0xe0)),
        SecurityContext(SecurityContext::new(1, SecurityKey(BitString::from([1u8; 32])), None)),
    )
    .unwrap();
    enb2.handle_s1ap(t0, 1, &encoded(bad));
    let sent = only_send(&drain(&mut enb2));
    decoded(&sent[0], S1apPduKind::Unsuccessful_HandoverResourceAllocation);

    // A UE arriving where nothing was prepared stays idle there.
    enb1.start_s1_handover(t0, 0, enb2.cell(), false).unwrap();
    let source_id = enb1.ue(0).unwrap().s1.unwrap().enb_ue_id;
    let _ = drain(&mut enb1);
    enb1.handle_s1ap(t0, 1, &handover_command(source_id, None, rrc_container_for(1)));
    let _ = drain(&mut enb1);
    let d = enb1.s1_handover_depart(0).unwrap();
    assert_eq!(enb2.s1_handover_arrive(t0, d).unwrap_err(), HandoverError::NotPrepared(MME_UE_ID));
    let actions = drain(&mut enb2);
    assert!(only_send(&actions).is_empty());
    assert!(outcomes(&actions)[0].result.is_err());
    assert!(enb2.ue(0).unwrap().s1.is_none());
}

#[test]
fn three_enbs_x2_then_s1_then_x2_keep_the_keys_in_step() -> Res<()> {
    let t0 = Instant::now();
    let (mut enb1, mut enb2, mme, _) = two_enbs(t0);
    let mut enb3 = other_enb(t0, 3);
    let nh = nh_chain(&mme, 3);
    // X2 1 -> 2: NCC 1 comes back.
    let (id, _) = x2_to(t0, &mut enb1, &mut enb2).unwrap();
    enb2.handle_s1ap(t0, 1, &path_switch_ack(TARGET_MME_UE_ID, id, 1, nh[0]));
    assert_eq!(outcomes(&drain(&mut enb2))[0].result, Ok(()));
    enb1.x2_release(0);
    // S1 2 -> 3 with NCC 2 from the MME.
    enb2.start_s1_handover(t0, 0, enb3.cell(), true).unwrap();
    let required = only_send(&drain(&mut enb2)).remove(0);
    let pdu = S1AP_PDU::decode(&required).unwrap();
    extract_s1ap_ies!(pdu, HandoverRequired,
        req source_id: u32 = eNB_UE_S1AP_ID(id),
        req container: Vec<u8> = Source_ToTarget_TransparentContainer(c) => c.0.to_vec(),
    );
    enb3.handle_s1ap(t0, 1, &handover_request(container, 2, nh[1]));
    let ack = only_send(&drain(&mut enb3)).remove(0);
    let pdu = S1AP_PDU::decode(&ack).unwrap();
    extract_s1ap_ies!(pdu, HandoverRequestAcknowledge,
        req back: Vec<u8> = Target_ToSource_TransparentContainer(c) => c.0.to_vec(),
    );
    let command = handover_command(source_id, None, back);
    let pdu = S1AP_PDU::decode(&command).unwrap();
    assert_eq!(pdu.kind(), S1apPduKind::Successful_HandoverPreparation);
    // The source's MME-UE-S1AP-ID is now the path switch's.
    let command = {
        let ids = (TARGET_MME_UE_ID, source_id);
        let container: Vec<u8> = {
            extract_s1ap_ies!(pdu, HandoverCommand, req c: Vec<u8> = Target_ToSource_TransparentContainer(c) => c.0.to_vec(),);
            c
        };
        encoded(
            build_s1ap!(
                SuccessfulOutcome,
                HandoverPreparation,
                HandoverCommand,
                MME_UE_S1AP_ID(ids.0),
                eNB_UE_S1AP_ID(ids.1),
                HandoverType(HandoverType::intralte),
                Target_ToSource_TransparentContainer(TargetToSourceTransparentContainer::from(container)),
            )
            .unwrap(),
        )
    };
    enb2.handle_s1ap(t0, 1, &command);
    let _ = drain(&mut enb2);
    let d = enb2.s1_handover_depart(0).unwrap();
    enb3.s1_handover_arrive(t0, d).unwrap();
    assert_eq!(outcomes(&drain(&mut enb3))[0].result, Ok(()));
    assert_eq!(enb3.ue(0).unwrap().kenb, Some(kenb_star_of(&nh[1], true, &enb3.cell())));
    // X2 3 -> 1: the S1 NH is used, so KeNB* is horizontal with NCC 2.
    let ho = enb3.x2_handover_out(t0, 0, enb1.cell()).unwrap();
    assert_eq!(ho.ncc, 2);
    let k3 = kenb_star_of(&nh[1], true, &enb3.cell());
    assert_eq!(ho.kenb_star, kenb_star_of(&k3, false, &enb1.cell()));
    enb1.x2_handover_in(t0, ho).unwrap();
    let sent = only_send(&drain(&mut enb1));
    let pdu = S1AP_PDU::decode(&sent[0]).unwrap();
    extract_s1ap_ies!(pdu, PathSwitchRequest, req id: u32 = eNB_UE_S1AP_ID(id),);
    enb1.handle_s1ap(t0, 1, &path_switch_ack(TARGET_MME_UE_ID, id, 3, nh[2]));
    assert_eq!(outcomes(&drain(&mut enb1))[0].result, Ok(()));
    assert_eq!(EARFCN_DL, enb1.cell().earfcn_dl);
    Ok(())
}

/// Every handover message the eNBs send, through tshark.
#[test]
fn tshark_dissects_the_handover_messages_without_error() {
    if !tools::require(&["tshark", "text2pcap"]) {
        return;
    }
    let mut pdus = s1_handover(true, true).unwrap();
    let t0 = Instant::now();
    let (mut enb1, mut enb2, _mme, _) = two_enbs(t0);
    let ho = enb1.x2_handover_out(t0, 0, enb2.cell()).unwrap();
    enb2.x2_handover_in(t0, ho).unwrap();
    pdus.extend(only_send(&drain(&mut enb2)));
    let (mut enb1, enb2, _mme, _) = two_enbs(t0);
    enb1.start_s1_handover(t0, 0, enb2.cell(), false).unwrap();
    let _ = drain(&mut enb1);
    enb1.cancel_s1_handover(t0, 0).unwrap();
    pdus.extend(only_send(&drain(&mut enb1)));

    let dir = std::env::temp_dir().join(format!("mobicore-ran-handover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (txt, pcap) = (dir.join("s1ap.txt"), dir.join("s1ap.pcap"));
    std::fs::write(&txt, super::wire::hexdump(&pdus)).unwrap();
    let t2p = tools::run(Command::new("text2pcap").args(["-q", "-S", "36412,36412,18"]).arg(&txt).arg(&pcap));
    let out = t2p.and_then(|_| tools::run(Command::new("tshark").arg("-r").arg(&pcap).arg("-V")));
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.expect("text2pcap and tshark -r");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Malformed"), "{text}");
    assert!(!text.contains("[Expert Info (Error"), "{text}");
    for expected in [
        "HandoverRequired",
        "HandoverPreparationInformation",
        "HandoverRequestAcknowledge",
        "nextHopChainingCount: 1",
        "ENBStatusTransfer",
        "HandoverNotify",
        "PathSwitchRequest",
        "HandoverCancel",
    ] {
        assert!(text.contains(expected), "no {expected} in the dissection");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

    /// Arbitrary octets, and real handover messages with one bit flipped,
    /// never panic a source in preparation or a target in path switch.
    #[test]
    fn arbitrary_s1ap_never_panics_an_enb_mid_handover(
        pdus in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..160), 1..5),
        flips in proptest::collection::vec((any::<usize>(), 0u8..8), 1..4),
    ) {
        let t0 = Instant::now();
        let (mut enb1, mut enb2, mme, id) = two_enbs(t0);
        let (mut enb3, mut enb4, _, _) = two_enbs(t0);
        let (x2_id, _) = x2_to(t0, &mut enb3, &mut enb4).unwrap();
        enb1.start_s1_handover(t0, 0, enb2.cell(), true).unwrap();
        let _ = drain(&mut enb1);
        let nh = nh_chain(&mme, 1)[0];
        let mut real = [
            handover_command(id, Some(Fteid { teid: Teid(1), ipv4: SGW }), rrc_container_for(1)),
            handover_request(vec![0; 8], 1, nh),
            preparation_failure(id),
            cancel_acknowledge(id),
            mme_status_transfer(1),
            path_switch_ack(MME_UE_ID, x2_id, 1, nh),
            path_switch_failure(MME_UE_ID, x2_id),
        ];
        for (i, (at, bit)) in flips.iter().enumerate() {
            let p = &mut real[i % 7];
            let at = at % p.len();
            p[at] ^= 1 << bit;
        }
        for p in pdus.iter().chain(real.iter()) {
            for enb in [&mut enb1, &mut enb2, &mut enb4] {
                enb.handle_s1ap(t0, 1, p);
                let _ = drain(enb);
            }
        }
        for enb in [&mut enb1, &mut enb2, &mut enb4] {
            enb.handle_timeout(t0 + Duration::from_secs(60));
            let _ = drain(enb);
        }
    }
}
