//! Building the E-RAB management PDUs of the UE-requested PDN procedures
//! (TS 36.413 9.1.3): E-RAB SETUP REQUEST with the ACTIVATE DEFAULT EPS
//! BEARER CONTEXT REQUEST of a new PDN connection (8.2.1), E-RAB RELEASE
//! COMMAND with the DEACTIVATE EPS BEARER CONTEXT REQUEST of a PDN
//! disconnect (8.2.3). Each returns the APER octets, or `None`.

use crate::s1ap_build::{arp_ie, ue_ambr_ie};
use mobicore_common::{Ambr, Arp, Fteid};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{build_s1ap, build_s1ap_ie, BitString};

fn encode(pdu: Result<S1APPDU<'_>, oxirush_s1ap::Error>) -> Option<Vec<u8>> {
    pdu.ok()?.encode().ok().map(|b| b.to_vec())
}

/// The E-RAB of a new default bearer.
pub struct ErabToSetup {
    pub ebi: u8,
    pub qci: u8,
    pub arp: Arp,
    pub sgw_s1u: Fteid,
    /// The protected ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST.
    pub nas: Vec<u8>,
}

/// E-RAB SETUP REQUEST (TS 36.413 9.1.3.1), with the UE-AMBR the new PDN
/// connection makes (TS 23.401 4.7.3).
pub fn erab_setup_request(mme_ue_id: u32, enb_ue_id: u32, ue_ambr: Ambr, e: ErabToSetup) -> Option<Vec<u8>> {
    let item = ERABToBeSetupItemBearerSUReq::new(
        ERABID(e.ebi as u64),
        ERABLevelQoSParameters::new(QCI(e.qci), arp_ie(&e.arp), None, None),
        TransportLayerAddress(BitString::from(e.sgw_s1u.ipv4.octets())),
        GTPTEID(e.sgw_s1u.teid.0.to_be_bytes()),
        NASPDU::from(e.nas),
        None,
    );
    let item = build_s1ap_ie!(REJECT E_RABToBeSetupItemBearerSUReq(item)).ok()?;
    encode(build_s1ap!(
        InitiatingMessage,
        E_RABSetup,
        ERABSetupRequest,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        uEaggregateMaximumBitrate(ue_ambr_ie(ue_ambr)),
        E_RABToBeSetupListBearerSUReq(ERABToBeSetupListBearerSUReq(vec![item])),
    ))
}

/// E-RAB RELEASE COMMAND (TS 36.413 9.1.3.5) of E-RAB `ebi`, with the
/// UE-AMBR of the PDN connections left and the NAS PDU for the UE if there
/// is one.
pub fn erab_release_command(
    mme_ue_id: u32,
    enb_ue_id: u32,
    ue_ambr: Ambr,
    ebi: u8,
    cause: Cause,
    nas: Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let item = build_s1ap_ie!(IGNORE E_RABItem(ERABItem::new(ERABID(ebi as u64), cause, None))).ok()?;
    let list = ERABList(vec![item]);
    let pdu = match nas {
        Some(nas) => build_s1ap!(
            InitiatingMessage,
            E_RABRelease,
            ERABReleaseCommand,
            MME_UE_S1AP_ID(mme_ue_id),
            eNB_UE_S1AP_ID(enb_ue_id),
            uEaggregateMaximumBitrate(ue_ambr_ie(ue_ambr)),
            E_RABToBeReleasedList(list),
            NAS_PDU(nas),
        ),
        None => build_s1ap!(
            InitiatingMessage,
            E_RABRelease,
            ERABReleaseCommand,
            MME_UE_S1AP_ID(mme_ue_id),
            eNB_UE_S1AP_ID(enb_ue_id),
            uEaggregateMaximumBitrate(ue_ambr_ie(ue_ambr)),
            E_RABToBeReleasedList(list),
        ),
    };
    encode(pdu)
}
