//! What the elastic MME's front end and hosts read of an S1AP PDU to route
//! it: the class of its procedure and the identifiers that name its UE.
//! Sans-I/O; here rather than in the `mobicore` binary so that the
//! harness's decomposed MME routes exactly as the real front end does.

use crate::transfer::UeKey;
use mobicore_elastic::procedure::ProcedureKind;
use mobicore_elastic::router::UeName;
use oxirush_s1ap::s1ap::{S1APPDU, S1AP_PDU};
use oxirush_s1ap::S1apPduKind;

/// An uplink PDU as the front end routes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uplink {
    /// S1 Setup, eNB Configuration Update, Reset: answered by the front
    /// end and given to every host too (each keeps the eNB's context).
    EnbWide,
    /// Another message that names no UE (an ERROR INDICATION without ids,
    /// a procedure the MME does not implement): the front end's.
    NonUe,
    /// A UE-associated message (`enb_ue_s1ap_id` of an INITIAL UE MESSAGE
    /// is filled in by the caller's association).
    Ue(UeName),
    /// Not decodable: the front end's core answers it (TS 36.413 10.2).
    Malformed,
}

impl Uplink {
    /// The name a host finds (or loads) the message's UE by: its
    /// MME-UE-S1AP-ID, or the M-TMSI of an INITIAL UE MESSAGE's S-TMSI;
    /// none for a new UE or a message of no UE.
    pub fn ue_key(&self) -> Option<UeKey> {
        match *self {
            Uplink::Ue(UeName::MmeUeS1apId(id)) => Some(UeKey::MmeUeS1apId(id)),
            Uplink::Ue(UeName::Initial { m_tmsi: Some(m), .. }) => Some(UeKey::MTmsi(m)),
            _ => None,
        }
    }
}

/// Classify an uplink PDU of the eNB on association `enb`.
pub fn uplink(enb: u64, data: &[u8]) -> Uplink {
    match S1AP_PDU::decode_borrowed(data) {
        Ok(pdu) => uplink_of(enb, &pdu),
        Err(_) => Uplink::Malformed,
    }
}

/// [`uplink`] and [`starts`] of one PDU, decoded once.
pub fn uplink_and_start(enb: u64, data: &[u8]) -> (Uplink, Option<ProcedureKind>) {
    match S1AP_PDU::decode_borrowed(data) {
        Ok(pdu) => (uplink_of(enb, &pdu), starts_of(&pdu)),
        Err(_) => (Uplink::Malformed, None),
    }
}

fn uplink_of(enb: u64, pdu: &S1APPDU<'_>) -> Uplink {
    let kind = pdu.kind();
    match kind {
        S1apPduKind::Initiating_S1Setup
        | S1apPduKind::Initiating_ENBConfigurationUpdate
        | S1apPduKind::Initiating_Reset => return Uplink::EnbWide,
        _ => {}
    }
    if let Some(Ok(id)) = pdu.ie::<oxirush_s1ap::ie::MME_UE_S1AP_ID>() {
        return Uplink::Ue(UeName::MmeUeS1apId(id.0));
    }
    // A PATH SWITCH REQUEST (X2 handover) names the UE by the Source MME
    // UE S1AP ID, the one it had at the source eNB (TS 36.413 9.1.5.8).
    if kind == S1apPduKind::Initiating_PathSwitchRequest {
        return match pdu.ie::<oxirush_s1ap::ie::SourceMME_UE_S1AP_ID>() {
            Some(Ok(id)) => Uplink::Ue(UeName::MmeUeS1apId(id.0)),
            _ => Uplink::NonUe,
        };
    }
    if kind == S1apPduKind::Initiating_initialUEMessage {
        let Some(Ok(enb_ue)) = pdu.ie::<oxirush_s1ap::ie::ENB_UE_S1AP_ID>() else { return Uplink::NonUe };
        let m_tmsi = pdu.ie::<oxirush_s1ap::ie::S_TMSI>().and_then(|r| r.ok()).map(|t| u32::from_be_bytes(t.m_tmsi.0));
        return Uplink::Ue(UeName::Initial { enb, enb_ue_s1ap_id: enb_ue.0, m_tmsi });
    }
    Uplink::NonUe
}

/// The procedure an uplink PDU starts, for a host's forwarder to pick an
/// instance of that kind (seed 004 5.2: one service per procedure). The
/// NAS of an INITIAL UE MESSAGE or an UPLINK NAS TRANSPORT (Attach, TAU,
/// Service Request, Extended Service Request, Detach Request), a HANDOVER
/// REQUIRED or PATH SWITCH REQUEST; `None` for the rest (a procedure's
/// later message, or one that starts nothing known, or garbage).
pub fn starts(data: &[u8]) -> Option<ProcedureKind> {
    starts_of(&S1AP_PDU::decode_borrowed(data).ok()?)
}

fn starts_of(pdu: &S1APPDU<'_>) -> Option<ProcedureKind> {
    match pdu.kind() {
        S1apPduKind::Initiating_HandoverPreparation | S1apPduKind::Initiating_PathSwitchRequest => {
            Some(ProcedureKind::Handover)
        }
        S1apPduKind::Initiating_initialUEMessage | S1apPduKind::Initiating_uplinkNASTransport => {
            let nas = pdu.ie::<oxirush_s1ap::ie::NAS_PDU>()?.ok()?;
            nas_starts(&nas.0)
        }
        _ => None,
    }
}

/// The procedure an EPS mobility management message starts (TS 24.301
/// 9.3.1: a plain header, or a security-protected one of six octets around
/// a plain message; header type 12 is the short SERVICE REQUEST).
pub fn nas_starts(nas: &[u8]) -> Option<ProcedureKind> {
    let first = *nas.first()?;
    if first & 0x0f != 7 {
        return None; // not EMM
    }
    let plain = match first >> 4 {
        0 => nas,
        12 => return Some(ProcedureKind::ServiceRequest),
        1..=4 => nas.get(6..)?,
        _ => return None,
    };
    if plain.first()? & 0x0f != 7 || plain[0] >> 4 != 0 {
        return None;
    }
    match plain.get(1)? {
        0x41 => Some(ProcedureKind::Attach),
        0x45 => Some(ProcedureKind::Detach),
        0x48 => Some(ProcedureKind::Tau),
        0x4c => Some(ProcedureKind::ServiceRequest),
        _ => None,
    }
}

/// Whether a host's downlink PDU is its answer to an eNB-wide message the
/// front end answered already (dropped, not sent twice).
pub fn is_enb_wide_answer(data: &[u8]) -> bool {
    let Ok(pdu) = S1AP_PDU::decode_borrowed(data) else { return false };
    matches!(
        pdu.kind(),
        S1apPduKind::Successful_S1Setup
            | S1apPduKind::Unsuccessful_S1Setup
            | S1apPduKind::Successful_ENBConfigurationUpdate
            | S1apPduKind::Unsuccessful_ENBConfigurationUpdate
            | S1apPduKind::Successful_Reset
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxirush_s1ap::build_s1ap;
    use oxirush_s1ap::helpers::{eutran_cgi, plmn, tai, EnbKind};
    use oxirush_s1ap::s1ap::*;

    fn initial(stmsi: Option<u32>) -> Vec<u8> {
        let p = plmn("001", "01").unwrap();
        let pdu = match stmsi {
            Some(m) => build_s1ap!(
                InitiatingMessage,
                initialUEMessage,
                InitialUEMessage,
                eNB_UE_S1AP_ID(17u32),
                NAS_PDU(vec![7u8, 0x45]),
                TAI(tai(p, [0, 1])),
                EUTRAN_CGI(eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap()),
                RRC_Establishment_Cause(RRCEstablishmentCause::mo_Signalling),
                S_TMSI(STMSI::new(MMECode([1]), MTMSI(m.to_be_bytes()), None)),
            ),
            None => build_s1ap!(
                InitiatingMessage,
                initialUEMessage,
                InitialUEMessage,
                eNB_UE_S1AP_ID(17u32),
                NAS_PDU(vec![7u8, 0x41]),
                TAI(tai(p, [0, 1])),
                EUTRAN_CGI(eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap()),
                RRC_Establishment_Cause(RRCEstablishmentCause::mo_Signalling),
            ),
        };
        pdu.unwrap().encode().unwrap().to_vec()
    }

    #[test]
    fn initial_ue_messages_name_their_ue_by_s_tmsi_or_connection() {
        assert_eq!(
            uplink(3, &initial(Some(0x0201_0203))),
            Uplink::Ue(UeName::Initial { enb: 3, enb_ue_s1ap_id: 17, m_tmsi: Some(0x0201_0203) })
        );
        assert_eq!(uplink(3, &initial(None)), Uplink::Ue(UeName::Initial { enb: 3, enb_ue_s1ap_id: 17, m_tmsi: None }));
    }

    #[test]
    fn ue_associated_messages_name_their_mme_ue_s1ap_id() {
        let pdu = build_s1ap!(
            InitiatingMessage,
            uplinkNASTransport,
            UplinkNASTransport,
            MME_UE_S1AP_ID(0x0300_0042u32),
            eNB_UE_S1AP_ID(5u32),
            NAS_PDU(vec![7u8, 0x43]),
            EUTRAN_CGI(eutran_cgi(plmn("001", "01").unwrap(), EnbKind::Macro, 0x12345, 1).unwrap()),
            TAI(tai(plmn("001", "01").unwrap(), [0, 1])),
        )
        .unwrap()
        .encode()
        .unwrap()
        .to_vec();
        assert_eq!(uplink(1, &pdu), Uplink::Ue(UeName::MmeUeS1apId(0x0300_0042)));
    }

    #[test]
    fn a_path_switch_request_names_its_ue_by_the_source_mme_ue_s1ap_id() {
        let p = plmn("001", "01").unwrap();
        let pdu = build_s1ap!(
            InitiatingMessage,
            PathSwitchRequest,
            PathSwitchRequest,
            eNB_UE_S1AP_ID(9u32),
            E_RABToBeSwitchedDLList(ERABToBeSwitchedDLList(vec![oxirush_s1ap::build_s1ap_ie!(
                REJECT E_RABToBeSwitchedDLItem(ERABToBeSwitchedDLItem::new(
                    ERABID(5),
                    TransportLayerAddress(oxirush_s1ap::BitString::from([10, 0, 1, 2])),
                    GTPTEID([0, 0, 0, 1]),
                    None,
                ))
            )
            .unwrap()])),
            SourceMME_UE_S1AP_ID(0x0200_0017u32),
            EUTRAN_CGI(eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap()),
            TAI(tai(p, [0, 1])),
            UESecurityCapabilities(oxirush_s1ap::helpers::ue_security_capabilities(0xe0, 0xe0)),
        )
        .unwrap()
        .encode()
        .unwrap()
        .to_vec();
        assert_eq!(uplink(2, &pdu), Uplink::Ue(UeName::MmeUeS1apId(0x0200_0017)));
    }

    #[test]
    fn the_procedure_a_message_starts_is_read_from_its_nas() {
        use ProcedureKind::*;
        // Initial UE messages: Attach Request (0x41), Detach Request (0x45).
        assert_eq!(starts(&initial(None)), Some(Attach));
        assert_eq!(starts(&initial(Some(1))), Some(Detach));
        assert_eq!(nas_starts(&[0x07, 0x48, 0]), Some(Tau));
        assert_eq!(nas_starts(&[0xc7, 0, 0, 0]), Some(ServiceRequest));
        // Integrity protected around an Extended Service Request.
        assert_eq!(nas_starts(&[0x17, 1, 2, 3, 4, 5, 0x07, 0x4c, 0]), Some(ServiceRequest));
        // Attach Complete, an ESM message, truncated, garbage: none.
        assert_eq!(nas_starts(&[0x07, 0x43]), None);
        assert_eq!(nas_starts(&[0x02, 0x41]), None);
        assert_eq!(nas_starts(&[0x27, 1, 2]), None);
        assert_eq!(nas_starts(&[]), None);
        assert_eq!(starts(&[0xff; 40]), None);
        // Both from one decoding, as each alone.
        for pdu in [initial(None), initial(Some(0x0201_0203)), vec![0xff; 40], vec![]] {
            assert_eq!(uplink_and_start(3, &pdu), (uplink(3, &pdu), starts(&pdu)));
        }
    }

    #[test]
    fn garbage_is_malformed_not_a_crash() {
        assert_eq!(uplink(1, &[]), Uplink::Malformed);
        assert_eq!(uplink(1, &[0xff; 40]), Uplink::Malformed);
        assert!(!is_enb_wide_answer(&[1, 2, 3]));
    }
}
