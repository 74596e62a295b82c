//! Decoding of the S1AP messages an MME sends to an eNB into typed events
//! (TS 36.413 9.1). Nothing here panics on any input.

use std::net::Ipv4Addr;

use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{extract_s1ap_ies, ie, S1apPduKind};

use super::handover as ho;

/// A received S1AP message, as the eNB needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Downlink {
    S1SetupResponse {
        mme_name: Option<String>,
        relative_capacity: u8,
    },
    S1SetupFailure {
        cause: String,
    },
    DownlinkNas {
        mme_ue_id: u32,
        enb_ue_id: u32,
        nas: Vec<u8>,
    },
    InitialContextSetup(IcsRequest),
    UeContextReleaseCommand {
        mme_ue_id: u32,
        enb_ue_id: Option<u32>,
        cause: String,
    },
    ErrorIndication {
        mme_ue_id: Option<u32>,
        enb_ue_id: Option<u32>,
        cause: Option<String>,
    },
    Paging(PagingRequest),
    /// RESET ACKNOWLEDGE (9.1.8.2).
    ResetAcknowledge,
    /// E-RAB SETUP REQUEST (9.1.3.1): the bearer of a new PDN connection.
    ErabSetup {
        mme_ue_id: u32,
        enb_ue_id: u32,
        /// The UE-AMBR with the new PDN connection, uplink and downlink.
        ambr: Option<(u64, u64)>,
        erabs: Vec<ErabToSetup>,
    },
    /// E-RAB RELEASE COMMAND (9.1.3.5), with the NAS PDU for the UE.
    ErabRelease {
        mme_ue_id: u32,
        enb_ue_id: u32,
        ambr: Option<(u64, u64)>,
        e_rab_ids: Vec<u8>,
        nas: Option<Vec<u8>>,
    },
    /// A message of the handover procedures (TS 36.413 8.4).
    Handover(super::handover::HandoverMessage),
    /// A message the emulated eNB does not handle, by name.
    Other(String),
}

/// INITIAL CONTEXT SETUP REQUEST, the parts the eNB keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcsRequest {
    pub mme_ue_id: u32,
    pub enb_ue_id: u32,
    pub kenb: [u8; 32],
    pub ambr: Option<(u64, u64)>,
    pub erabs: Vec<ErabToSetup>,
}

/// S1AP PAGING (TS 36.413 9.1.6), the parts the eNB uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagingRequest {
    pub identity: PagingIdentity,
    /// The TAIs to page in: PLMN identity and TAC.
    pub tais: Vec<(PLMNidentity, u16)>,
}

/// The UE Paging Identity (TS 36.413 9.2.3.13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PagingIdentity {
    STmsi {
        mmec: u8,
        m_tmsi: u32,
    },
    /// The IMSI's digits.
    Imsi(String),
}

/// One item of the E-RAB To Be Setup List.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErabToSetup {
    pub e_rab_id: u8,
    pub qci: u8,
    /// The S-GW's S1-U address (the IPv4 part of the transport address).
    pub sgw_address: Option<Ipv4Addr>,
    pub sgw_teid: u32,
    pub nas: Option<Vec<u8>>,
}

/// Why a received PDU could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum S1apError {
    /// The PDU itself does not decode (answered with transfer-syntax-error).
    #[error("undecodable S1AP PDU: {0}")]
    Pdu(String),
    /// A message whose IEs are missing or do not decode.
    #[error("malformed {message}: {reason}")]
    Ies { message: &'static str, reason: String, mme_ue_id: Option<u32>, enb_ue_id: Option<u32> },
}

/// Decode one S1AP PDU received from the MME.
pub fn decode(data: &[u8]) -> Result<Downlink, S1apError> {
    let pdu = S1AP_PDU::decode(data).map_err(|e| S1apError::Pdu(e.to_string()))?;
    let ids = || {
        let mme = pdu.ie::<ie::MME_UE_S1AP_ID>().and_then(Result::ok).map(|i| i.0);
        let enb = pdu.ie::<ie::ENB_UE_S1AP_ID>().and_then(Result::ok).map(|i| i.0);
        (mme, enb)
    };
    let ies_error = |message: &'static str, e: oxirush_s1ap::Error| {
        let (mme_ue_id, enb_ue_id) = ids();
        S1apError::Ies { message, reason: e.to_string(), mme_ue_id, enb_ue_id }
    };
    let handover = |r: Result<ho::HandoverMessage, oxirush_s1ap::Error>, message| {
        r.map(Downlink::Handover).map_err(|e| ies_error(message, e))
    };
    match pdu.kind() {
        S1apPduKind::Successful_S1Setup => s1_setup_response(&pdu).map_err(|e| ies_error("S1SetupResponse", e)),
        S1apPduKind::Unsuccessful_S1Setup => s1_setup_failure(&pdu).map_err(|e| ies_error("S1SetupFailure", e)),
        S1apPduKind::Initiating_downlinkNASTransport => {
            downlink_nas(&pdu).map_err(|e| ies_error("DownlinkNASTransport", e))
        }
        S1apPduKind::Initiating_InitialContextSetup => {
            ics_request(&pdu).map_err(|e| ies_error("InitialContextSetupRequest", e))
        }
        S1apPduKind::Initiating_UEContextRelease => {
            release_command(&pdu).map_err(|e| ies_error("UEContextReleaseCommand", e))
        }
        S1apPduKind::Initiating_ErrorIndication => Ok(error_indication(&pdu)),
        S1apPduKind::Initiating_Paging => paging(&pdu).map_err(|e| ies_error("Paging", e)),
        S1apPduKind::Successful_Reset => Ok(Downlink::ResetAcknowledge),
        S1apPduKind::Initiating_E_RABSetup => erab_setup(&pdu).map_err(|e| ies_error("E-RABSetupRequest", e)),
        S1apPduKind::Initiating_E_RABRelease => erab_release(&pdu).map_err(|e| ies_error("E-RABReleaseCommand", e)),
        S1apPduKind::Successful_HandoverPreparation => handover(ho::decode_command(&pdu), "HandoverCommand"),
        S1apPduKind::Unsuccessful_HandoverPreparation => {
            handover(ho::decode_preparation_failure(&pdu), "HandoverPreparationFailure")
        }
        S1apPduKind::Initiating_HandoverResourceAllocation => handover(ho::decode_request(&pdu), "HandoverRequest"),
        S1apPduKind::Initiating_MMEStatusTransfer => {
            handover(ho::decode_mme_status_transfer(&pdu), "MMEStatusTransfer")
        }
        S1apPduKind::Successful_PathSwitchRequest => {
            handover(ho::decode_path_switch_ack(&pdu), "PathSwitchRequestAcknowledge")
        }
        S1apPduKind::Unsuccessful_PathSwitchRequest => {
            handover(ho::decode_path_switch_failure(&pdu), "PathSwitchRequestFailure")
        }
        S1apPduKind::Successful_HandoverCancel => handover(ho::decode_cancel_ack(&pdu), "HandoverCancelAcknowledge"),
        _ => Ok(Downlink::Other(format!("{} ({})", pdu.procedure_name(), pdu.direction()))),
    }
}

type R<T> = Result<T, oxirush_s1ap::Error>;

fn s1_setup_response(pdu: &S1AP_PDU) -> R<Downlink> {
    extract_s1ap_ies!(pdu, S1SetupResponse,
        lax mme_name: String = MMEname(n) => n.0.to_string(),
        req relative_capacity: u8 = RelativeMMECapacity(c) => c.0,
    );
    Ok(Downlink::S1SetupResponse { mme_name, relative_capacity })
}

fn s1_setup_failure(pdu: &S1AP_PDU) -> R<Downlink> {
    extract_s1ap_ies!(pdu, S1SetupFailure,
        req cause: String = Cause(c) => cause_text(&c),
    );
    Ok(Downlink::S1SetupFailure { cause })
}

fn downlink_nas(pdu: &S1AP_PDU) -> R<Downlink> {
    extract_s1ap_ies!(pdu, DownlinkNASTransport,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        req nas: Vec<u8> = NAS_PDU(n) => n.0.to_vec(),
    );
    Ok(Downlink::DownlinkNas { mme_ue_id, enb_ue_id, nas })
}

fn ics_request(pdu: &S1AP_PDU) -> R<Downlink> {
    extract_s1ap_ies!(pdu, InitialContextSetupRequest,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        req key: Vec<u8> = SecurityKey(k) => k.0.as_octets().to_vec(),
        lax ambr: (u64, u64) = uEaggregateMaximumBitrate(a) => ue_ambr(&a),
    );
    let mut kenb = [0; 32];
    if key.len() != 32 {
        return Err(oxirush_s1ap::Error::argument(format!("SecurityKey of {} octets", key.len())));
    }
    kenb.copy_from_slice(&key);
    let mut erabs = Vec::new();
    for item in pdu.items::<ie::E_RABToBeSetupListCtxtSUReq>() {
        let i = item?;
        let nas = i.nas_pdu.as_ref().map(|n| n.0.to_vec());
        erabs.push(erab(&i.e_rab_id, &i.e_rab_level_qos_parameters, &i.transport_layer_address, &i.gtp_teid, nas));
    }
    Ok(Downlink::InitialContextSetup(IcsRequest { mme_ue_id, enb_ue_id, kenb, ambr, erabs }))
}

/// An E-RAB to set up, of INITIAL CONTEXT SETUP or E-RAB SETUP REQUEST.
fn erab(
    id: &ERABID,
    qos: &ERABLevelQoSParameters,
    address: &TransportLayerAddress,
    teid: &GTPTEID,
    nas: Option<Vec<u8>>,
) -> ErabToSetup {
    ErabToSetup {
        e_rab_id: u8::try_from(id.0).unwrap_or(u8::MAX),
        qci: qos.qci.0,
        sgw_address: ipv4_of(address),
        sgw_teid: u32::from_be_bytes(teid.0),
        nas,
    }
}

/// UE Aggregate Maximum Bit Rate (TS 36.413 9.2.1.20): uplink, downlink.
pub(super) fn ue_ambr(a: &UEAggregateMaximumBitrate) -> (u64, u64) {
    (a.ue_aggregate_maximum_bit_rate_ul.0, a.ue_aggregate_maximum_bit_rate_dl.0)
}

/// The IPv4 part of a Transport Layer Address (TS 36.414 5.3: 32 bits
/// IPv4, 128 IPv6, 160 both with IPv4 first).
fn ipv4_of(a: &TransportLayerAddress) -> Option<Ipv4Addr> {
    let o = a.0.as_octets();
    matches!(o.len(), 4 | 20).then(|| Ipv4Addr::new(o[0], o[1], o[2], o[3]))
}

fn erab_setup(pdu: &S1AP_PDU) -> R<Downlink> {
    extract_s1ap_ies!(pdu, ERABSetupRequest,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        lax ambr: (u64, u64) = uEaggregateMaximumBitrate(a) => ue_ambr(&a),
    );
    let mut erabs = Vec::new();
    for item in pdu.items::<ie::E_RABToBeSetupListBearerSUReq>() {
        let i = item?;
        let nas = Some(i.nas_pdu.0.to_vec());
        erabs.push(erab(&i.e_rab_id, &i.e_rab_level_qos_parameters, &i.transport_layer_address, &i.gtp_teid, nas));
    }
    Ok(Downlink::ErabSetup { mme_ue_id, enb_ue_id, ambr, erabs })
}

fn erab_release(pdu: &S1AP_PDU) -> R<Downlink> {
    extract_s1ap_ies!(pdu, ERABReleaseCommand,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        lax ambr: (u64, u64) = uEaggregateMaximumBitrate(a) => ue_ambr(&a),
        lax nas: Vec<u8> = NAS_PDU(n) => n.0.to_vec(),
    );
    let mut e_rab_ids = Vec::new();
    for item in pdu.items::<ie::E_RABToBeReleasedList>() {
        e_rab_ids.push(u8::try_from(item?.e_rab_id.0).unwrap_or(u8::MAX));
    }
    Ok(Downlink::ErabRelease { mme_ue_id, enb_ue_id, ambr, e_rab_ids, nas })
}

fn paging(pdu: &S1AP_PDU) -> R<Downlink> {
    extract_s1ap_ies!(pdu, Paging,
        req id: UEPagingID<'static> = UEPagingID(p) => p.into_owned(),
    );
    let identity = match id {
        UEPagingID::s_TMSI(s) => PagingIdentity::STmsi { mmec: s.mmec.0[0], m_tmsi: u32::from_be_bytes(s.m_tmsi.0) },
        UEPagingID::iMSI(i) => match mobicore_common::Imsi::from_tbcd(i.0.as_ref()) {
            Ok(imsi) => PagingIdentity::Imsi(imsi.as_str().to_string()),
            Err(e) => return Err(oxirush_s1ap::Error::argument(format!("IMSI: {e}"))),
        },
        _ => return Err(oxirush_s1ap::Error::argument("UEPagingID of an unknown kind".to_string())),
    };
    let mut tais = Vec::new();
    for item in pdu.items::<ie::TAIList>() {
        let item = item?;
        tais.push((item.tai.plmn_identity, u16::from_be_bytes(item.tai.tac.0)));
    }
    Ok(Downlink::Paging(PagingRequest { identity, tais }))
}

fn release_command(pdu: &S1AP_PDU) -> R<Downlink> {
    extract_s1ap_ies!(pdu, UEContextReleaseCommand,
        req ids: UES1APIDs = UE_S1AP_IDs(i) => i,
        req cause: String = Cause(c) => cause_text(&c),
    );
    let (mme_ue_id, enb_ue_id) = match ids {
        UES1APIDs::uE_S1AP_ID_pair(p) => (p.mme_ue_s1ap_id.0, Some(p.enb_ue_s1ap_id.0)),
        UES1APIDs::mME_UE_S1AP_ID(m) => (m.0, None),
        _ => return Err(oxirush_s1ap::Error::argument("UE-S1AP-IDs of an unknown kind".to_string())),
    };
    Ok(Downlink::UeContextReleaseCommand { mme_ue_id, enb_ue_id, cause })
}

fn error_indication(pdu: &S1AP_PDU) -> Downlink {
    extract_s1ap_ies!(pdu, ErrorIndication,
        lax mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        lax enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        lax cause: String = Cause(c) => cause_text(&c),
    );
    Downlink::ErrorIndication { mme_ue_id, enb_ue_id, cause }
}

/// A cause as "group/value", e.g. "nas/normal_release".
pub fn cause_text(cause: &Cause) -> String {
    match cause {
        Cause::radioNetwork(c) => format!("radioNetwork/{c:?}"),
        Cause::transport(c) => format!("transport/{c:?}"),
        Cause::nas(c) => format!("nas/{c:?}"),
        Cause::protocol(c) => format!("protocol/{c:?}"),
        Cause::misc(c) => format!("misc/{c:?}"),
        _ => "unknown cause".to_string(),
    }
}
