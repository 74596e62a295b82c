//! The S1AP messages an eNB sends (TS 36.413 9.1), built with oxirush-s1ap.

use std::net::Ipv4Addr;

use oxirush_s1ap::helpers::{eutran_cgi, global_enb_id, tai, EnbKind};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{build_s1ap, build_s1ap_ie, BitString, Error};

/// The identity of an eNB and its one cell, as S1AP writes them.
#[derive(Clone)]
pub struct CellIdentity {
    pub plmn: PLMNidentity,
    pub enb_id: u32,
    pub cell: u16,
    pub tac: [u8; 2],
}

impl CellIdentity {
    pub fn new(plmn: mobicore_common::Plmn, enb_id: u32, tac: u16) -> Result<Self, Error> {
        let plmn = oxirush_s1ap::helpers::plmn(&plmn.mcc(), &plmn.mnc())?;
        // Check once that the eNB ID fits a macro eNB ID.
        global_enb_id(plmn, EnbKind::Macro, enb_id)?;
        Ok(CellIdentity { plmn, enb_id, cell: 1, tac: tac.to_be_bytes() })
    }
    fn tai(&self) -> TAI {
        tai(self.plmn, self.tac)
    }
    fn ecgi(&self) -> Result<EUTRANCGI, Error> {
        eutran_cgi(self.plmn, EnbKind::Macro, self.enb_id, self.cell)
    }
}

fn encode(pdu: S1AP_PDU) -> Result<Vec<u8>, Error> {
    Ok(pdu.encode()?.to_vec())
}

/// S1 SETUP REQUEST (9.1.8.4).
pub fn s1_setup_request(cell: &CellIdentity, name: &str) -> Result<Vec<u8>, Error> {
    let enb = global_enb_id(cell.plmn, EnbKind::Macro, cell.enb_id)?;
    let area = SupportedTAsItem::new(TAC(cell.tac), BPLMNs(vec![cell.plmn]), None);
    encode(build_s1ap!(
        InitiatingMessage,
        S1Setup,
        S1SetupRequest,
        Global_ENB_ID(enb),
        eNBname(name.to_string()),
        SupportedTAs(SupportedTAs(vec![area])),
        DefaultPagingDRX(PagingDRX::v128),
    )?)
}

/// E-RAB SETUP RESPONSE (9.1.3.2): the eNB's S1-U F-TEID of each E-RAB.
pub fn erab_setup_response(mme_ue_id: u32, enb_ue_id: u32, erabs: &[ErabSetup]) -> Result<Vec<u8>, Error> {
    let items = erabs
        .iter()
        .map(|e| {
            let item = ERABSetupItemBearerSURes::new(
                ERABID(e.e_rab_id.into()),
                TransportLayerAddress(BitString::from(e.address.octets())),
                GTPTEID(e.teid.to_be_bytes()),
                None,
            );
            build_s1ap_ie!(IGNORE E_RABSetupItemBearerSURes(item))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    encode(build_s1ap!(
        SuccessfulOutcome,
        E_RABSetup,
        ERABSetupResponse,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        E_RABSetupListBearerSURes(ERABSetupListBearerSURes(items)),
    )?)
}

/// E-RAB RELEASE RESPONSE (9.1.3.6) of the E-RABs released.
pub fn erab_release_response(mme_ue_id: u32, enb_ue_id: u32, e_rab_ids: &[u8]) -> Result<Vec<u8>, Error> {
    let items = e_rab_ids
        .iter()
        .map(|&id| {
            let item = ERABReleaseItemBearerRelComp::new(ERABID(id.into()), None);
            build_s1ap_ie!(IGNORE E_RABReleaseItemBearerRelComp(item))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    encode(build_s1ap!(
        SuccessfulOutcome,
        E_RABRelease,
        ERABReleaseResponse,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        E_RABReleaseListBearerRelComp(ERABReleaseListBearerRelComp(items)),
    )?)
}

/// RESET of the whole S1 interface (9.1.8.1): the eNB lost its
/// UE-associated logical S1-connections (TS 36.413 8.7.1.2.2).
pub fn reset_all(cause: CauseRadioNetwork) -> Result<Vec<u8>, Error> {
    encode(build_s1ap!(
        InitiatingMessage,
        Reset,
        Reset,
        Cause(Cause::radioNetwork(cause)),
        ResetType(ResetType::s1_Interface(ResetAll::reset_all)),
    )?)
}

/// INITIAL UE MESSAGE (9.1.7.1), with the RRC establishment cause and the
/// S-TMSI (MMEC, M-TMSI) the UE gave, if any.
pub fn initial_ue_message(
    cell: &CellIdentity,
    enb_ue_id: u32,
    nas: Vec<u8>,
    cause: RRCEstablishmentCause,
    s_tmsi: Option<(u8, u32)>,
) -> Result<Vec<u8>, Error> {
    let pdu = match s_tmsi {
        None => build_s1ap!(
            InitiatingMessage,
            initialUEMessage,
            InitialUEMessage,
            eNB_UE_S1AP_ID(enb_ue_id),
            NAS_PDU(nas),
            TAI(cell.tai()),
            EUTRAN_CGI(cell.ecgi()?),
            RRC_Establishment_Cause(cause),
        )?,
        Some((mmec, m_tmsi)) => build_s1ap!(
            InitiatingMessage,
            initialUEMessage,
            InitialUEMessage,
            eNB_UE_S1AP_ID(enb_ue_id),
            NAS_PDU(nas),
            TAI(cell.tai()),
            EUTRAN_CGI(cell.ecgi()?),
            RRC_Establishment_Cause(cause),
            S_TMSI(STMSI::new(MMECode([mmec]), MTMSI(m_tmsi.to_be_bytes()), None)),
        )?,
    };
    encode(pdu)
}

/// UPLINK NAS TRANSPORT (9.1.7.3).
pub fn uplink_nas_transport(
    cell: &CellIdentity,
    mme_ue_id: u32,
    enb_ue_id: u32,
    nas: Vec<u8>,
) -> Result<Vec<u8>, Error> {
    encode(build_s1ap!(
        InitiatingMessage,
        uplinkNASTransport,
        UplinkNASTransport,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        NAS_PDU(nas),
        EUTRAN_CGI(cell.ecgi()?),
        TAI(cell.tai()),
    )?)
}

/// One E-RAB the eNB set up: its ID and the eNB's S1-U F-TEID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErabSetup {
    pub e_rab_id: u8,
    pub address: Ipv4Addr,
    pub teid: u32,
}

/// INITIAL CONTEXT SETUP RESPONSE (9.1.4.2).
pub fn initial_context_setup_response(mme_ue_id: u32, enb_ue_id: u32, erabs: &[ErabSetup]) -> Result<Vec<u8>, Error> {
    let items = erabs
        .iter()
        .map(|e| {
            let item = ERABSetupItemCtxtSURes::new(
                ERABID(e.e_rab_id.into()),
                TransportLayerAddress(BitString::from(e.address.octets())),
                GTPTEID(e.teid.to_be_bytes()),
                None,
            );
            build_s1ap_ie!(IGNORE E_RABSetupItemCtxtSURes(item))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    encode(build_s1ap!(
        SuccessfulOutcome,
        InitialContextSetup,
        InitialContextSetupResponse,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        E_RABSetupListCtxtSURes(ERABSetupListCtxtSURes(items)),
    )?)
}

/// INITIAL CONTEXT SETUP FAILURE (9.1.4.3).
pub fn initial_context_setup_failure(mme_ue_id: u32, enb_ue_id: u32, cause: Cause) -> Result<Vec<u8>, Error> {
    encode(build_s1ap!(
        UnsuccessfulOutcome,
        InitialContextSetup,
        InitialContextSetupFailure,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        Cause(cause),
    )?)
}

/// UE CONTEXT RELEASE REQUEST (9.1.4.5).
pub fn ue_context_release_request(mme_ue_id: u32, enb_ue_id: u32, cause: Cause) -> Result<Vec<u8>, Error> {
    encode(build_s1ap!(
        InitiatingMessage,
        UEContextReleaseRequest,
        UEContextReleaseRequest,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        Cause(cause),
    )?)
}

/// UE CONTEXT RELEASE COMPLETE (9.1.4.7).
pub fn ue_context_release_complete(mme_ue_id: u32, enb_ue_id: u32) -> Result<Vec<u8>, Error> {
    encode(build_s1ap!(
        SuccessfulOutcome,
        UEContextRelease,
        UEContextReleaseComplete,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
    )?)
}

/// ERROR INDICATION (9.1.2.1), with the UE's IDs where known.
pub fn error_indication(mme_ue_id: Option<u32>, enb_ue_id: Option<u32>, cause: Cause) -> Result<Vec<u8>, Error> {
    let pdu = match (mme_ue_id, enb_ue_id) {
        (Some(m), Some(e)) => build_s1ap!(
            InitiatingMessage,
            ErrorIndication,
            ErrorIndication,
            MME_UE_S1AP_ID(m),
            eNB_UE_S1AP_ID(e),
            Cause(cause),
        )?,
        (Some(m), None) => {
            build_s1ap!(InitiatingMessage, ErrorIndication, ErrorIndication, MME_UE_S1AP_ID(m), Cause(cause),)?
        }
        (None, Some(e)) => {
            build_s1ap!(InitiatingMessage, ErrorIndication, ErrorIndication, eNB_UE_S1AP_ID(e), Cause(cause),)?
        }
        (None, None) => build_s1ap!(InitiatingMessage, ErrorIndication, ErrorIndication, Cause(cause),)?,
    };
    encode(pdu)
}
