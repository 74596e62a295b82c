//! Building the S1AP PDUs the MME sends (TS 36.413 9.1). Each returns the
//! APER octets, or `None` if encoding failed (counted by the caller).

use crate::config::MmeConfig;
use mobicore_common::{Ambr, Arp, Fteid, Plmn};
use oxirush_s1ap::helpers::{plmn, ue_security_capabilities};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{build_s1ap, build_s1ap_ie, BitString};

/// The IEs a builder may add at the end of a message (in the order of its
/// object set, which has these last).
type Extra<'a> = Vec<Result<ProtocolIEField<'a>, oxirush_s1ap::Error>>;

/// The S1AP PLMN identity of ours (TS 36.413 9.2.3.8).
pub fn plmn_identity(p: &Plmn) -> Option<PLMNidentity> {
    plmn(&p.mcc(), &p.mnc()).ok()
}

fn encode(pdu: Result<S1APPDU<'_>, oxirush_s1ap::Error>) -> Option<Vec<u8>> {
    encode_with(pdu, Vec::new())
}

/// Encode `pdu` with the IEs of `extra` appended to its message.
fn encode_with(pdu: Result<S1APPDU<'_>, oxirush_s1ap::Error>, extra: Extra<'_>) -> Option<Vec<u8>> {
    let mut pdu = pdu.ok()?;
    if !extra.is_empty() {
        let mut ies = pdu.protocol_ies().ok()?.into_owned();
        for ie in extra {
            ies.0.push(ie.ok()?.into_owned());
        }
        pdu.set_protocol_ies(ies).ok()?;
    }
    pdu.encode().ok().map(|b| b.to_vec())
}

/// S1 SETUP RESPONSE (TS 36.413 9.1.8.5) with our served GUMMEI.
pub fn s1_setup_response(cfg: &MmeConfig) -> Option<Vec<u8>> {
    s1_setup_response_with(cfg, None)
}

/// S1 SETUP RESPONSE with the Criticality Diagnostics of IEs that were
/// ignored and are to be notified (TS 36.413 10.3.4.2, 10.3.5).
pub fn s1_setup_response_with(cfg: &MmeConfig, cd: Option<CriticalityDiagnostics>) -> Option<Vec<u8>> {
    let served = ServedGUMMEIsItem::new(
        ServedPLMNs(vec![plmn_identity(&cfg.plmn)?]),
        ServedGroupIDs(vec![MMEGroupID(cfg.mme_group_id.to_be_bytes())]),
        ServedMMECs(vec![MMECode([cfg.mme_code])]),
        None,
    );
    let extra = cd.map(|cd| build_s1ap_ie!(S1SetupResponse, CriticalityDiagnostics(cd))).into_iter().collect();
    encode_with(
        build_s1ap!(
            SuccessfulOutcome,
            S1Setup,
            S1SetupResponse,
            MMEname(cfg.mme_name.as_str()),
            ServedGUMMEIs(ServedGUMMEIs(vec![served])),
            RelativeMMECapacity(RelativeMMECapacity(cfg.relative_capacity)),
        ),
        extra,
    )
}

/// S1 SETUP FAILURE (TS 36.413 9.1.8.6).
pub fn s1_setup_failure(cause: Cause) -> Option<Vec<u8>> {
    s1_setup_failure_with(cause, None)
}

/// S1 SETUP FAILURE with Criticality Diagnostics (TS 36.413 10.3.4.2).
pub fn s1_setup_failure_with(cause: Cause, cd: Option<CriticalityDiagnostics>) -> Option<Vec<u8>> {
    let extra = cd.map(|cd| build_s1ap_ie!(S1SetupFailure, CriticalityDiagnostics(cd))).into_iter().collect();
    encode_with(build_s1ap!(UnsuccessfulOutcome, S1Setup, S1SetupFailure, Cause(cause),), extra)
}

/// One UE-associated logical S1-connection of a RESET (TS 36.413 9.1.8.1):
/// the MME-UE-S1AP-ID and the eNB-UE-S1AP-ID, either or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct S1ConnectionItem {
    pub mme_ue_id: Option<u32>,
    pub enb_ue_id: Option<u32>,
}

/// RESET ACKNOWLEDGE (TS 36.413 9.1.8.2): for a partial reset, the
/// connections of the RESET echoed in its order (8.7.1.2.1); nothing for a
/// reset of the whole interface.
pub fn reset_acknowledge(items: Option<&[S1ConnectionItem]>, cd: Option<CriticalityDiagnostics>) -> Option<Vec<u8>> {
    let mut extra: Extra<'_> = Vec::new();
    if let Some(items) = items.filter(|i| !i.is_empty()) {
        // 9.1.8.2: one to 256 items, each of criticality ignore.
        let list: Option<Vec<ProtocolIEField<'_>>> = items
            .iter()
            .take(256)
            .map(|i| {
                let item = UEAssociatedLogicalS1ConnectionItem::new(
                    i.mme_ue_id.map(MMEUES1APID),
                    i.enb_ue_id.map(ENBUES1APID),
                    None,
                );
                build_s1ap_ie!(IGNORE UE_associatedLogicalS1_ConnectionItem(item)).ok()
            })
            .collect();
        let list = UEAssociatedLogicalS1ConnectionListResAck(list?);
        extra.push(build_s1ap_ie!(ResetAcknowledge, UE_associatedLogicalS1_ConnectionListResAck(list)));
    }
    if let Some(cd) = cd {
        extra.push(build_s1ap_ie!(ResetAcknowledge, CriticalityDiagnostics(cd)));
    }
    let pdu = S1AP_PDU::of_message(&ResetAcknowledge::new(ProtocolIEContainer(Vec::new())), Criticality::reject);
    encode_with(pdu, extra)
}

/// ENB CONFIGURATION UPDATE ACKNOWLEDGE (TS 36.413 9.1.8.8).
pub fn enb_configuration_update_acknowledge(cd: Option<CriticalityDiagnostics>) -> Option<Vec<u8>> {
    let extra = cd
        .map(|cd| build_s1ap_ie!(ENBConfigurationUpdateAcknowledge, CriticalityDiagnostics(cd)))
        .into_iter()
        .collect();
    let empty = ENBConfigurationUpdateAcknowledge::new(ProtocolIEContainer(Vec::new()));
    encode_with(S1AP_PDU::of_message(&empty, Criticality::reject), extra)
}

/// ENB CONFIGURATION UPDATE FAILURE (TS 36.413 9.1.8.9).
pub fn enb_configuration_update_failure(cause: Cause, cd: Option<CriticalityDiagnostics>) -> Option<Vec<u8>> {
    let extra =
        cd.map(|cd| build_s1ap_ie!(ENBConfigurationUpdateFailure, CriticalityDiagnostics(cd))).into_iter().collect();
    encode_with(
        build_s1ap!(UnsuccessfulOutcome, ENBConfigurationUpdate, ENBConfigurationUpdateFailure, Cause(cause),),
        extra,
    )
}

/// DOWNLINK NAS TRANSPORT (TS 36.413 9.1.7.2).
pub fn downlink_nas_transport(mme_ue_id: u32, enb_ue_id: u32, nas: Vec<u8>) -> Option<Vec<u8>> {
    encode(build_s1ap!(
        InitiatingMessage,
        downlinkNASTransport,
        DownlinkNASTransport,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        NAS_PDU(nas),
    ))
}

/// What the INITIAL CONTEXT SETUP REQUEST carries.
pub struct InitialContextSetup<'a> {
    pub mme_ue_id: u32,
    pub enb_ue_id: u32,
    pub ue_ambr: Ambr,
    pub ebi: u8,
    pub qci: u8,
    pub arp: Arp,
    pub sgw_s1u: Fteid,
    pub nas: Vec<u8>,
    /// S1AP bitmaps' first octets (128-EEA1 / 128-EIA1 leading).
    pub eea: u8,
    pub eia: u8,
    pub kenb: &'a [u8; 32],
}

/// 9.2.1.60 Allocation and Retention Priority from the typed ARP.
pub fn arp_ie(arp: &Arp) -> AllocationAndRetentionPriority {
    AllocationAndRetentionPriority::new(
        PriorityLevel(arp.priority_level.min(15)),
        match arp.pre_emption_capability {
            true => PreEmptionCapability::may_trigger_pre_emption,
            false => PreEmptionCapability::shall_not_trigger_pre_emption,
        },
        match arp.pre_emption_vulnerability {
            true => PreEmptionVulnerability::pre_emptable,
            false => PreEmptionVulnerability::not_pre_emptable,
        },
        None,
    )
}

/// INITIAL CONTEXT SETUP REQUEST (TS 36.413 9.1.4.1).
pub fn initial_context_setup_request(ics: InitialContextSetup<'_>) -> Option<Vec<u8>> {
    initial_context_setup_request_with(ics, None)
}

/// INITIAL CONTEXT SETUP REQUEST with the UE Radio Capability the eNB gave
/// in a UE CAPABILITY INFO INDICATION (9.1.4.1, 9.2.1.27).
pub fn initial_context_setup_request_with(
    ics: InitialContextSetup<'_>,
    ue_radio_capability: Option<&[u8]>,
) -> Option<Vec<u8>> {
    let erab = IcsErab { ebi: ics.ebi, qci: ics.qci, arp: ics.arp, sgw_s1u: ics.sgw_s1u, nas: Some(ics.nas) };
    let ues = IcsUe {
        mme_ue_id: ics.mme_ue_id,
        enb_ue_id: ics.enb_ue_id,
        ue_ambr: ics.ue_ambr,
        eea: ics.eea,
        eia: ics.eia,
        kenb: ics.kenb,
    };
    initial_context_setup_request_erabs(&ues, vec![erab], ue_radio_capability)
}

/// The UE part of an INITIAL CONTEXT SETUP REQUEST (9.1.4.1).
pub struct IcsUe<'a> {
    pub mme_ue_id: u32,
    pub enb_ue_id: u32,
    pub ue_ambr: Ambr,
    pub eea: u8,
    pub eia: u8,
    pub kenb: &'a [u8; 32],
}

/// One E-RAB of an INITIAL CONTEXT SETUP REQUEST (9.1.4.1): a default
/// bearer, with the NAS PDU of the attach or none (service request).
pub struct IcsErab {
    pub ebi: u8,
    pub qci: u8,
    pub arp: Arp,
    pub sgw_s1u: Fteid,
    pub nas: Option<Vec<u8>>,
}

/// INITIAL CONTEXT SETUP REQUEST (9.1.4.1) with every E-RAB of `erabs`.
pub fn initial_context_setup_request_erabs(
    ue: &IcsUe<'_>,
    erabs: Vec<IcsErab>,
    ue_radio_capability: Option<&[u8]>,
) -> Option<Vec<u8>> {
    let mut items = Vec::with_capacity(erabs.len());
    for e in erabs {
        let bearer = ERABToBeSetupItemCtxtSUReq::new(
            ERABID(e.ebi as u64),
            ERABLevelQoSParameters::new(QCI(e.qci), arp_ie(&e.arp), None, None),
            TransportLayerAddress(BitString::from(e.sgw_s1u.ipv4.octets())),
            GTPTEID(e.sgw_s1u.teid.0.to_be_bytes()),
            e.nas.map(NASPDU::from),
            None,
        );
        items.push(build_s1ap_ie!(REJECT E_RABToBeSetupItemCtxtSUReq(bearer)).ok()?);
    }
    let ambr = ue_ambr_ie(ue.ue_ambr);
    // The UE Radio Capability (IE 74) comes after the Security Key (73).
    let extra = ue_radio_capability
        .map(|c| build_s1ap_ie!(InitialContextSetupRequest, UERadioCapability(UERadioCapability::from(c.to_vec()))))
        .into_iter()
        .collect();
    encode_with(
        build_s1ap!(
            InitiatingMessage,
            InitialContextSetup,
            InitialContextSetupRequest,
            MME_UE_S1AP_ID(ue.mme_ue_id),
            eNB_UE_S1AP_ID(ue.enb_ue_id),
            uEaggregateMaximumBitrate(ambr),
            E_RABToBeSetupListCtxtSUReq(ERABToBeSetupListCtxtSUReq(items)),
            UESecurityCapabilities(ue_security_capabilities(ue.eea, ue.eia)),
            SecurityKey(*ue.kenb),
        ),
        extra,
    )
}

/// The UE Aggregate Maximum Bit Rate IE (TS 36.413 9.2.1.20: bit rates
/// up to 10^10 bit/s).
pub fn ue_ambr_ie(a: Ambr) -> UEAggregateMaximumBitrate {
    let rate = |r: u64| BitRate(r.min(10_000_000_000));
    UEAggregateMaximumBitrate::new(rate(a.downlink), rate(a.uplink), None)
}

/// UE CONTEXT RELEASE COMMAND (TS 36.413 9.1.4.6).
pub fn ue_context_release_command(mme_ue_id: u32, enb_ue_id: u32, cause: Cause) -> Option<Vec<u8>> {
    let ids = UES1APIDs::uE_S1AP_ID_pair(UES1APIDPair::new(MMEUES1APID(mme_ue_id), ENBUES1APID(enb_ue_id), None));
    encode(build_s1ap!(InitiatingMessage, UEContextRelease, UEContextReleaseCommand, UE_S1AP_IDs(ids), Cause(cause),))
}

/// ERROR INDICATION (TS 36.413 9.1.3.7), with the UE ids when known.
pub fn error_indication(mme_ue_id: Option<u32>, enb_ue_id: Option<u32>, cause: Cause) -> Option<Vec<u8>> {
    error_indication_with(mme_ue_id, enb_ue_id, cause, None)
}

/// ERROR INDICATION with the Criticality Diagnostics of the message it
/// answers (TS 36.413 10.3.4.1, 10.3.4.2, 10.3.5, 10.3.6).
pub fn error_indication_with(
    mme_ue_id: Option<u32>,
    enb_ue_id: Option<u32>,
    cause: Cause,
    cd: Option<CriticalityDiagnostics>,
) -> Option<Vec<u8>> {
    let pdu = match (mme_ue_id, enb_ue_id) {
        (Some(m), Some(e)) => build_s1ap!(
            InitiatingMessage,
            ErrorIndication,
            ErrorIndication,
            MME_UE_S1AP_ID(m),
            eNB_UE_S1AP_ID(e),
            Cause(cause),
        ),
        (Some(m), None) => {
            build_s1ap!(InitiatingMessage, ErrorIndication, ErrorIndication, MME_UE_S1AP_ID(m), Cause(cause),)
        }
        (None, Some(e)) => {
            build_s1ap!(InitiatingMessage, ErrorIndication, ErrorIndication, eNB_UE_S1AP_ID(e), Cause(cause),)
        }
        (None, None) => build_s1ap!(InitiatingMessage, ErrorIndication, ErrorIndication, Cause(cause),),
    };
    let extra = cd.map(|cd| build_s1ap_ie!(ErrorIndication, CriticalityDiagnostics(cd))).into_iter().collect();
    encode_with(pdu, extra)
}

// ---- handovers (TS 36.413 8.4) ----

/// The S1-U address of an F-TEID (TS 36.413 9.2.2.1) and its TEID (9.2.2.2).
fn tunnel(f: &Fteid) -> (TransportLayerAddress<'static>, GTPTEID) {
    (TransportLayerAddress(BitString::from(f.ipv4.octets().to_vec())), GTPTEID(f.teid.0.to_be_bytes()))
}

/// PATH SWITCH REQUEST ACKNOWLEDGE (TS 36.413 9.1.5.9): the E-RABs to be
/// released (those the request did not name), the Security Context {NCC,
/// NH} (TS 33.401 7.2.8.4.3) and, after a mismatch, the UE security
/// capabilities the MME holds (TS 33.401 7.2.4.2.2).
pub fn path_switch_request_acknowledge(
    mme_ue_id: u32,
    enb_ue_id: u32,
    released: &[u8],
    ncc: u8,
    nh: &[u8; 32],
    ue_security: Option<(u8, u8)>,
) -> Option<Vec<u8>> {
    let mut ies: Extra<'_> = vec![
        build_s1ap_ie!(PathSwitchRequestAcknowledge, MME_UE_S1AP_ID(mme_ue_id)),
        build_s1ap_ie!(PathSwitchRequestAcknowledge, eNB_UE_S1AP_ID(enb_ue_id)),
    ];
    if !released.is_empty() {
        ies.push(
            erab_list(released, Cause::radioNetwork(CauseRadioNetwork::unspecified))
                .and_then(|l| build_s1ap_ie!(PathSwitchRequestAcknowledge, E_RABToBeReleasedList(l))),
        );
    }
    let sc = SecurityContext::new(ncc, SecurityKey::from(*nh), None);
    ies.push(build_s1ap_ie!(PathSwitchRequestAcknowledge, SecurityContext(sc)));
    if let Some((eea, eia)) = ue_security {
        ies.push(build_s1ap_ie!(
            PathSwitchRequestAcknowledge,
            UESecurityCapabilities(ue_security_capabilities(eea, eia))
        ));
    }
    let empty = PathSwitchRequestAcknowledge::new(ProtocolIEContainer(Vec::new()));
    encode_with(S1AP_PDU::of_message(&empty, Criticality::reject), ies)
}

/// An E-RAB list (TS 36.413 9.2.1.36) of `ebis`, each with `cause`.
fn erab_list(ebis: &[u8], cause: Cause) -> Result<ERABList<'static>, oxirush_s1ap::Error> {
    let items: Result<Vec<_>, _> = ebis
        .iter()
        .map(|e| {
            build_s1ap_ie!(IGNORE E_RABItem(ERABItem::new(ERABID(*e as u64), cause.clone(), None)))
                .map(|i| i.into_owned())
        })
        .collect();
    Ok(ERABList(items?))
}

/// PATH SWITCH REQUEST FAILURE (TS 36.413 9.1.5.10).
pub fn path_switch_request_failure(mme_ue_id: u32, enb_ue_id: u32, cause: Cause) -> Option<Vec<u8>> {
    encode(build_s1ap!(
        UnsuccessfulOutcome,
        PathSwitchRequest,
        PathSwitchRequestFailure,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        Cause(cause),
    ))
}

/// One E-RAB of a HANDOVER REQUEST: the S-GW's S1-U F-TEID and its QoS.
pub struct HandoverErab {
    pub ebi: u8,
    pub qci: u8,
    pub arp: Arp,
    pub sgw_s1u: Fteid,
}

/// What the HANDOVER REQUEST carries (TS 36.413 9.1.5.4).
pub struct HandoverRequestData<'a> {
    pub mme_ue_id: u32,
    pub cause: Cause,
    pub ue_ambr: Ambr,
    pub erabs: &'a [HandoverErab],
    /// The Source to Target Transparent Container, as the source gave it.
    pub container: &'a [u8],
    pub eea: u8,
    pub eia: u8,
    pub ncc: u8,
    pub nh: &'a [u8; 32],
}

/// HANDOVER REQUEST (TS 36.413 9.1.5.4), intra-LTE, with the Security
/// Context {NCC, NH} of TS 33.401 7.2.8.4.4.
pub fn handover_request(r: HandoverRequestData<'_>) -> Option<Vec<u8>> {
    let items: Option<Vec<ProtocolIEField<'_>>> = r
        .erabs
        .iter()
        .map(|e| {
            let (addr, teid) = tunnel(&e.sgw_s1u);
            let qos = ERABLevelQoSParameters::new(QCI(e.qci), arp_ie(&e.arp), None, None);
            let item = ERABToBeSetupItemHOReq::new(ERABID(e.ebi as u64), addr, teid, qos, None);
            build_s1ap_ie!(REJECT E_RABToBeSetupItemHOReq(item)).ok()
        })
        .collect();
    let ambr = ue_ambr_ie(r.ue_ambr);
    encode(build_s1ap!(
        InitiatingMessage,
        HandoverResourceAllocation,
        HandoverRequest,
        MME_UE_S1AP_ID(r.mme_ue_id),
        HandoverType(HandoverType::intralte),
        Cause(r.cause),
        uEaggregateMaximumBitrate(ambr),
        E_RABToBeSetupListHOReq(ERABToBeSetupListHOReq(items?)),
        Source_ToTarget_TransparentContainer(SourceToTargetTransparentContainer::from(r.container.to_vec())),
        UESecurityCapabilities(ue_security_capabilities(r.eea, r.eia)),
        SecurityContext(SecurityContext::new(r.ncc, SecurityKey::from(*r.nh), None)),
    ))
}

/// HANDOVER COMMAND (TS 36.413 9.1.5.2): the E-RABs subject to data
/// forwarding with the DL forwarding F-TEID (the S-GW's for indirect
/// forwarding, the target eNB's for direct), the E-RABs the target did not
/// admit, and the Target to Source Transparent Container as the target
/// gave it.
pub fn handover_command(
    mme_ue_id: u32,
    enb_ue_id: u32,
    forwarding: &[(u8, Fteid)],
    released: &[u8],
    container: &[u8],
) -> Option<Vec<u8>> {
    let mut ies: Extra<'_> = vec![
        build_s1ap_ie!(HandoverCommand, MME_UE_S1AP_ID(mme_ue_id)),
        build_s1ap_ie!(HandoverCommand, eNB_UE_S1AP_ID(enb_ue_id)),
        build_s1ap_ie!(HandoverCommand, HandoverType(HandoverType::intralte)),
    ];
    if !forwarding.is_empty() {
        let items: Option<Vec<ProtocolIEField<'_>>> = forwarding
            .iter()
            .map(|(ebi, f)| {
                let (addr, teid) = tunnel(f);
                let item = ERABDataForwardingItem::new(ERABID(*ebi as u64), Some(addr), Some(teid), None, None, None);
                build_s1ap_ie!(IGNORE E_RABDataForwardingItem(item)).ok()
            })
            .collect();
        ies.push(build_s1ap_ie!(
            HandoverCommand,
            E_RABSubjecttoDataForwardingList(ERABSubjecttoDataForwardingList(items?))
        ));
    }
    if !released.is_empty() {
        let cause = Cause::radioNetwork(CauseRadioNetwork::unspecified);
        ies.push(erab_list(released, cause).and_then(|l| build_s1ap_ie!(HandoverCommand, E_RABtoReleaseListHOCmd(l))));
    }
    let container = TargetToSourceTransparentContainer::from(container.to_vec());
    ies.push(build_s1ap_ie!(HandoverCommand, Target_ToSource_TransparentContainer(container)));
    let empty = HandoverCommand::new(ProtocolIEContainer(Vec::new()));
    encode_with(S1AP_PDU::of_message(&empty, Criticality::reject), ies)
}

/// HANDOVER PREPARATION FAILURE (TS 36.413 9.1.5.3).
pub fn handover_preparation_failure(mme_ue_id: u32, enb_ue_id: u32, cause: Cause) -> Option<Vec<u8>> {
    encode(build_s1ap!(
        UnsuccessfulOutcome,
        HandoverPreparation,
        HandoverPreparationFailure,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        Cause(cause),
    ))
}

/// HANDOVER CANCEL ACKNOWLEDGE (TS 36.413 9.1.5.11).
pub fn handover_cancel_acknowledge(mme_ue_id: u32, enb_ue_id: u32) -> Option<Vec<u8>> {
    encode(build_s1ap!(
        SuccessfulOutcome,
        HandoverCancel,
        HandoverCancelAcknowledge,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
    ))
}

/// MME STATUS TRANSFER (TS 36.413 9.1.10): the source's eNB Status
/// Transfer Transparent Container, as it came.
pub fn mme_status_transfer(
    mme_ue_id: u32,
    enb_ue_id: u32,
    container: ENBStatusTransferTransparentContainer<'_>,
) -> Option<Vec<u8>> {
    encode(build_s1ap!(
        InitiatingMessage,
        MMEStatusTransfer,
        MMEStatusTransfer,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        eNB_StatusTransfer_TransparentContainer(container),
    ))
}

/// What a PAGING carries (TS 36.413 9.1.6).
pub struct PagingData<'a> {
    /// IMSI mod 1024 (TS 36.304 7.1), 10 bits.
    pub ue_identity_index: u16,
    /// The S-TMSI: MMEC and M-TMSI (TS 23.003 2.9).
    pub mmec: u8,
    pub m_tmsi: u32,
    pub plmn: Plmn,
    /// The TACs of the UE's TAI list, in `plmn`.
    pub tacs: &'a [u16],
}

/// PAGING (TS 36.413 9.1.6): UE Identity Index Value, UE Paging Identity
/// (S-TMSI), CN Domain PS and the TAI list.
pub fn paging(p: &PagingData<'_>) -> Option<Vec<u8>> {
    let plmn_id = plmn_identity(&p.plmn)?;
    let mut tais = Vec::with_capacity(p.tacs.len());
    for tac in p.tacs {
        let tai = TAI::new(plmn_id, TAC(tac.to_be_bytes()), None);
        tais.push(build_s1ap_ie!(IGNORE TAIItem(TAIItem::new(tai, None))).ok()?);
    }
    let index = oxirush_s1ap::Bits::new(u64::from(p.ue_identity_index & 0x3ff), 10).ok()?;
    let s_tmsi = STMSI::new(MMECode([p.mmec]), MTMSI(p.m_tmsi.to_be_bytes()), None);
    encode(build_s1ap!(
        InitiatingMessage,
        Paging,
        Paging,
        UEIdentityIndexValue(UEIdentityIndexValue(index)),
        UEPagingID(UEPagingID::s_TMSI(s_tmsi)),
        CNDomain(CNDomain::ps),
        TAIList(TAIList(tais)),
    ))
}
