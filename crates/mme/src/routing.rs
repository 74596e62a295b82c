//! What the elastic MME's front end and hosts read of an S1AP PDU to route
//! it: the class of its procedure and the identifiers that name its UE.
//! Sans-I/O; here rather than in the `mobicore` binary so that the
//! harness's decomposed MME routes exactly as the real front end does.

use crate::transfer::UeKey;
use mobicore_elastic::procedure::ProcedureKind;
use mobicore_elastic::router::{imsi_group, replica_group, UeName};
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

/// The MME's own GUMMEI as NAS carries it in a GUTI (TS 24.301 9.9.3.12):
/// PLMN octets, MME Group ID, MME Code.
pub type OwnGummei = ([u8; 3], u16, u8);

/// The replica group (see [`mobicore_common::Groups`]) that a new S1
/// connection's MME-UE-S1AP-ID takes at an elastic MME host, from what its
/// INITIAL UE MESSAGE names: the M-TMSI of an S-TMSI of ours, else the
/// ATTACH REQUEST's IMSI ([`imsi_group`]) or GUTI of ours.
/// `None`: none of these (a foreign GUTI, a TAU without S-TMSI); any group
/// will do.
pub fn initial_group(nas: &[u8], s_tmsi: Option<(u8, u32)>, ours: OwnGummei) -> Option<u8> {
    if let Some((mmec, m)) = s_tmsi {
        return (mmec == ours.2).then(|| replica_group(m));
    }
    attach_identity_group(nas, ours)
}

/// [`initial_group`] of an encoded INITIAL UE MESSAGE.
pub fn initial_ue_group(data: &[u8], ours: OwnGummei) -> Option<u8> {
    let pdu = S1AP_PDU::decode_borrowed(data).ok()?;
    if pdu.kind() != S1apPduKind::Initiating_initialUEMessage {
        return None;
    }
    let nas = pdu.ie::<oxirush_s1ap::ie::NAS_PDU>()?.ok()?;
    let s_tmsi = pdu
        .ie::<oxirush_s1ap::ie::S_TMSI>()
        .and_then(|r| r.ok())
        .map(|t| (t.mmec.0[0], u32::from_be_bytes(t.m_tmsi.0)));
    initial_group(&nas.0, s_tmsi, ours)
}

/// The replica group of the identity an ATTACH REQUEST names (TS 24.301
/// 8.2.4: plain, or integrity protected under a six-octet header), read
/// without decoding the rest: EPS mobile identity (9.9.3.12) after the
/// message type and the NAS key set identifier; an IMSI's digits in TBCD
/// (digit 1 in the first octet's high nibble, odd/even in bit 4), a
/// GUTI's M-TMSI in its last four octets if the GUMMEI is `ours`.
fn attach_identity_group(nas: &[u8], ours: OwnGummei) -> Option<u8> {
    let plain = match nas.first()? >> 4 {
        0 => nas,
        1 => nas.get(6..)?,
        _ => return None,
    };
    if *plain.first()? != 0x07 || *plain.get(1)? != 0x41 {
        return None;
    }
    let len = usize::from(*plain.get(3)?);
    let id = plain.get(4..4 + len)?;
    match id.first()? & 0x07 {
        1 => {
            let mut digits = [0u8; 16];
            let mut n = 0;
            let odd = id[0] & 0x08 != 0;
            let mut push = |d: u8| {
                if d <= 9 && n < 15 {
                    digits[n] = b'0' + d;
                    n += 1;
                }
            };
            push(id[0] >> 4);
            for (i, &o) in id[1..].iter().enumerate() {
                push(o & 0x0f);
                let last = i + 2 == id.len();
                if !last || odd {
                    push(o >> 4);
                }
            }
            Some(imsi_group(std::str::from_utf8(&digits[..n]).ok()?))
        }
        6 if len == 11 => {
            let gummei = ([id[1], id[2], id[3]], u16::from_be_bytes([id[4], id[5]]), id[6]);
            (gummei == ours).then(|| replica_group(u32::from_be_bytes([id[7], id[8], id[9], id[10]])))
        }
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

    const OURS: OwnGummei = ([0x00, 0xf1, 0x10], 1, 1);

    /// ATTACH REQUEST header and identity octets (TS 24.301 8.2.4).
    fn attach(identity: &[u8]) -> Vec<u8> {
        let mut v = vec![0x07, 0x41, 0x71, identity.len() as u8];
        v.extend_from_slice(identity);
        v.extend_from_slice(&[0x02, 0xe0, 0x60]);
        v
    }

    #[test]
    fn a_new_connection_takes_the_group_of_the_identity_its_initial_message_names() {
        let g = imsi_group;
        // IMSI 001010123456789 (odd) and 00101012345678 (even, 0xf filler).
        let odd = attach(&[0x09, 0x10, 0x10, 0x10, 0x32, 0x54, 0x76, 0x98]);
        assert_eq!(initial_group(&odd, None, OURS), Some(g("001010123456789")));
        let even = attach(&[0x01, 0x10, 0x10, 0x10, 0x32, 0x54, 0x76, 0xf8]);
        assert_eq!(initial_group(&even, None, OURS), Some(g("00101012345678")));
        // Integrity protected (header type 1, six octets) around it.
        let mut protected = vec![0x17, 1, 2, 3, 4, 0];
        protected.extend_from_slice(&odd);
        assert_eq!(initial_group(&protected, None, OURS), Some(g("001010123456789")));
        // A GUTI of ours: its M-TMSI's second octet; another MME's: none.
        let guti = |code: u8| attach(&[0xf6, 0x00, 0xf1, 0x10, 0x00, 0x01, code, 0x07, 0x2a, 0x00, 0x01]);
        assert_eq!(initial_group(&guti(1), None, OURS), Some(0x2a));
        assert_eq!(initial_group(&guti(9), None, OURS), None);
        // An S-TMSI of ours wins; of another MME code, none.
        assert_eq!(initial_group(&odd, Some((1, 0x0733_0001)), OURS), Some(0x33));
        assert_eq!(initial_group(&odd, Some((2, 0x0733_0001)), OURS), None);
        // Not an ATTACH REQUEST, or cut short.
        assert_eq!(initial_group(&[0x07, 0x45, 0x00], None, OURS), None);
        assert_eq!(initial_group(&odd[..6], None, OURS), None);
        // The same through an INITIAL UE MESSAGE.
        assert_eq!(initial_ue_group(&initial(Some(0x0201_0203)), ([0; 3], 0, 1)), Some(0x01));
        assert_eq!(initial_ue_group(&initial(None), OURS), None, "no identity in its NAS");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 2048,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x6772_6f75),
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Any octets after an ATTACH REQUEST's header: a group or none,
        /// never a panic.
        #[test]
        fn any_attach_identity_reads_without_panic(
            plain in proptest::prelude::any::<bool>(),
            rest in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
        ) {
            let mut nas = if plain { vec![0x07, 0x41] } else { vec![0x17, 0, 0, 0, 0, 0, 0x07, 0x41] };
            nas.extend_from_slice(&rest);
            let _ = initial_group(&nas, None, OURS);
            let _ = initial_group(&rest, None, OURS);
        }
    }
}
