//! Building the S1AP PDUs the MME sends (TS 36.413 9.1). Each returns the
//! APER octets, or `None` if encoding failed (counted by the caller).

use crate::config::MmeConfig;
use mobicore_common::{Ambr, Arp, Fteid, Plmn};
use oxirush_s1ap::helpers::{plmn, ue_security_capabilities};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{build_s1ap, build_s1ap_ie, BitString};

/// The S1AP PLMN identity of ours (TS 36.413 9.2.3.8).
pub fn plmn_identity(p: &Plmn) -> Option<PLMNidentity> {
    plmn(&p.mcc(), &p.mnc()).ok()
}

fn encode(pdu: Result<S1APPDU<'_>, oxirush_s1ap::Error>) -> Option<Vec<u8>> {
    pdu.ok()?.encode().ok().map(|b| b.to_vec())
}

/// S1 SETUP RESPONSE (TS 36.413 9.1.8.5) with our served GUMMEI.
pub fn s1_setup_response(cfg: &MmeConfig) -> Option<Vec<u8>> {
    let served = ServedGUMMEIsItem::new(
        ServedPLMNs(vec![plmn_identity(&cfg.plmn)?]),
        ServedGroupIDs(vec![MMEGroupID(cfg.mme_group_id.to_be_bytes())]),
        ServedMMECs(vec![MMECode([cfg.mme_code])]),
        None,
    );
    encode(build_s1ap!(
        SuccessfulOutcome,
        S1Setup,
        S1SetupResponse,
        MMEname(cfg.mme_name.as_str()),
        ServedGUMMEIs(ServedGUMMEIs(vec![served])),
        RelativeMMECapacity(RelativeMMECapacity(cfg.relative_capacity)),
    ))
}

/// S1 SETUP FAILURE (TS 36.413 9.1.8.6).
pub fn s1_setup_failure(cause: Cause) -> Option<Vec<u8>> {
    encode(build_s1ap!(UnsuccessfulOutcome, S1Setup, S1SetupFailure, Cause(cause),))
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
    let bearer = ERABToBeSetupItemCtxtSUReq::new(
        ERABID(ics.ebi as u64),
        ERABLevelQoSParameters::new(QCI(ics.qci), arp_ie(&ics.arp), None, None),
        TransportLayerAddress(BitString::from(ics.sgw_s1u.ipv4.octets())),
        GTPTEID(ics.sgw_s1u.teid.0.to_be_bytes()),
        Some(NASPDU::from(ics.nas)),
        None,
    );
    let item = build_s1ap_ie!(REJECT E_RABToBeSetupItemCtxtSUReq(bearer)).ok()?;
    // TS 36.413 9.2.1.20: bit rates are up to 10^10 bit/s.
    let rate = |r: u64| BitRate(r.min(10_000_000_000));
    let ambr = UEAggregateMaximumBitrate::new(rate(ics.ue_ambr.downlink), rate(ics.ue_ambr.uplink), None);
    encode(build_s1ap!(
        InitiatingMessage,
        InitialContextSetup,
        InitialContextSetupRequest,
        MME_UE_S1AP_ID(ics.mme_ue_id),
        eNB_UE_S1AP_ID(ics.enb_ue_id),
        uEaggregateMaximumBitrate(ambr),
        E_RABToBeSetupListCtxtSUReq(ERABToBeSetupListCtxtSUReq(vec![item])),
        UESecurityCapabilities(ue_security_capabilities(ics.eea, ics.eia)),
        SecurityKey(*ics.kenb),
    ))
}

/// UE CONTEXT RELEASE COMMAND (TS 36.413 9.1.4.6).
pub fn ue_context_release_command(mme_ue_id: u32, enb_ue_id: u32, cause: Cause) -> Option<Vec<u8>> {
    let ids = UES1APIDs::uE_S1AP_ID_pair(UES1APIDPair::new(MMEUES1APID(mme_ue_id), ENBUES1APID(enb_ue_id), None));
    encode(build_s1ap!(InitiatingMessage, UEContextRelease, UEContextReleaseCommand, UE_S1AP_IDs(ids), Cause(cause),))
}

/// ERROR INDICATION (TS 36.413 9.1.3.7), with the UE ids when known.
pub fn error_indication(mme_ue_id: Option<u32>, enb_ue_id: Option<u32>, cause: Cause) -> Option<Vec<u8>> {
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
    encode(pdu)
}
