//! Building the plain EPS NAS messages the MME sends (TS 24.301 8.2, 8.3).
//! Each returns the plain octets, which the caller protects per the UE's
//! security state; `None` if a value could not be encoded.

use mobicore_common::{Ambr, Guti, Plmn};
use oxirush_nas::nas_eps::*;

/// The NAS PLMN of ours (TS 24.008 10.5.1.13 order).
pub fn nas_plmn(p: &Plmn) -> Option<oxirush_nas::nas_eps::Plmn> {
    oxirush_nas::nas_eps::Plmn::new(&p.mcc(), &p.mnc()).ok()
}

fn emm(m: impl Into<NasEmmMessage>) -> Option<Vec<u8>> {
    NasEpsMessage::new_emm(m).encode().ok()
}

fn ksi_ie(ksi: u8) -> Option<NasKeySetIdentifier> {
    NasKeySetIdentifier::from_key_set_identifier(KeySetIdentifier::Native(ksi & 7)).ok()
}

/// IDENTITY REQUEST for the IMSI (8.2.18).
pub fn identity_request_imsi() -> Option<Vec<u8>> {
    emm(NasIdentityRequest::new(NasIdentityType2::from_identity_type(IdentityType::Imsi).ok()?))
}

/// AUTHENTICATION REQUEST (8.2.7).
pub fn authentication_request(ksi: u8, rand: [u8; 16], autn: [u8; 16]) -> Option<Vec<u8>> {
    emm(NasAuthenticationRequest::new(
        ksi_ie(ksi)?,
        NasAuthenticationParameterRand::from_rand(rand),
        NasAuthenticationParameterAutn::from_autn(autn),
    ))
}

/// AUTHENTICATION REJECT (8.2.6).
pub fn authentication_reject() -> Option<Vec<u8>> {
    emm(NasAuthenticationReject::new())
}

/// SECURITY MODE COMMAND (8.2.20) with the replayed UE security capability.
pub fn security_mode_command(
    eea: CipheringAlgorithm,
    eia: IntegrityAlgorithm,
    ksi: u8,
    capability: &NasUeNetworkCapability,
) -> Option<Vec<u8>> {
    let mut cmd = NasSecurityModeCommand::new(
        NasSecurityAlgorithms::from_algorithms(eea, eia),
        ksi_ie(ksi)?,
        NasUeSecurityCapability::from_ue_network_capability(capability),
    );
    // 5.4.3.2: the IMEISV, for the MEI on S11 (TS 29.274 7.2.1) and the
    // Terminal-Information of the ULR (TS 29.272 7.3.3).
    cmd.imeisv_request = Some(NasImeisvRequest::from_requested(true));
    emm(cmd)
}

/// What the default bearer of the attach carries (TS 24.301 8.3.6).
pub struct DefaultBearer<'a> {
    pub ebi: u8,
    pub pti: u8,
    pub qci: u8,
    pub apn: &'a str,
    pub ipv4: [u8; 4],
    pub apn_ambr: Ambr,
    pub esm_cause: Option<EsmCause>,
}

/// ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST (8.3.6), as an ESM PDU,
/// with an IPv4 PDN address.
pub fn activate_default_bearer_request(b: &DefaultBearer<'_>) -> Option<NasEpsMessage> {
    default_bearer_request(b, NasPdnAddress::from_ipv4(b.ipv4), None)
}

/// ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST (8.3.6) with the PDN
/// address granted (9.9.4.9: IPv4, IPv6 interface identifier, or both) and
/// the network's PCO value octets, as a PCO or (`true`) an ePCO (6.5.1.3).
pub fn default_bearer_request(
    b: &DefaultBearer<'_>,
    address: NasPdnAddress,
    pco: Option<(&[u8], bool)>,
) -> Option<NasEpsMessage> {
    let qos = NasEpsQualityOfService::from_qos(EpsQos::new(b.qci, None, None, None)).ok()?;
    // 9.9.4.2: APN-AMBR in kbit/s; at least 1 kbit/s where a rate is set,
    // rounded down to a rate the IE codes.
    let kbps = |bps: u64| if bps == 0 { 0 } else { codable_kbps(bps / 1000) };
    let mut msg =
        NasActivateDefaultEpsBearerContextRequest::new(qos, NasAccessPointName::from_string(b.apn).ok()?, address);
    if b.apn_ambr.downlink > 0 || b.apn_ambr.uplink > 0 {
        let ambr = NasApnAggregateMaximumBitRate::from_kbps(kbps(b.apn_ambr.downlink), kbps(b.apn_ambr.uplink)).ok()?;
        msg = msg.with_apn_ambr(ambr);
    }
    if let Some(c) = b.esm_cause {
        msg = msg.with_esm_cause(NasEsmCause::from_cause(c));
    }
    match pco {
        Some((p, true)) => {
            msg = msg.with_extended_protocol_configuration_options(NasExtendedProtocolConfigurationOptions::new(p))
        }
        // TS 24.008 10.5.6.3: a PCO holds at most 251 octets.
        Some((p, false)) if p.len() <= 251 => {
            msg = msg.with_protocol_configuration_options(NasProtocolConfigurationOptions::new(p))
        }
        _ => {}
    }
    Some(NasEpsMessage::new_esm(msg, b.ebi, b.pti))
}

/// The largest rate that the APN-AMBR IE codes exactly (TS 24.301 9.9.4.2,
/// TS 24.008 10.5.6.5: 1 kbit/s steps to 63, 8 to 568, 64 to 8640, 100 to
/// 16000, 1000 to 128000, 2000 to 256000, then 256000 x n plus 8640 or
/// more of those) not
/// above `kbps`, and at least 1.
pub fn codable_kbps(kbps: u64) -> u64 {
    const LADDER: [(u64, u64, u64); 6] =
        [(1, 63, 1), (64, 568, 8), (576, 8640, 64), (8700, 16000, 100), (17000, 128000, 1000), (130000, 256000, 2000)];
    if kbps > 256_000 {
        let high = (kbps / 256_000).min(254);
        // The part above n x 256000 is coded by the extended octet alone:
        // 8640, or 8700 and more (9.9.4.2).
        let low = (kbps - high * 256_000).min(256_000);
        return high * 256_000
            + match low {
                0..=8639 => 0,
                8640..=8699 => 8640,
                _ => codable_kbps(low),
            };
    }
    LADDER
        .iter()
        .rev()
        .find(|(lo, _, _)| kbps >= *lo)
        .map_or(1, |&(lo, hi, step)| lo + (kbps.min(hi) - lo) / step * step)
}

/// ESM INFORMATION REQUEST (8.3.13), for the PTI of the attach's PDN
/// CONNECTIVITY REQUEST.
pub fn esm_information_request(pti: u8) -> Option<Vec<u8>> {
    NasEpsMessage::new_esm(NasEsmInformationRequest::new(), 0, pti).encode().ok()
}

/// PDN DISCONNECT REJECT (8.3.21).
pub fn pdn_disconnect_reject(pti: u8, cause: EsmCause) -> Option<Vec<u8>> {
    NasEpsMessage::new_esm(NasPdnDisconnectReject::new(NasEsmCause::from_cause(cause)), 0, pti).encode().ok()
}

/// DEACTIVATE EPS BEARER CONTEXT REQUEST (8.3.12) of bearer `ebi`, with
/// the PTI of the UE's request (0 if the network started it).
pub fn deactivate_bearer_request(ebi: u8, pti: u8, cause: EsmCause) -> Option<Vec<u8>> {
    let msg = NasDeactivateEpsBearerContextRequest::new(NasEsmCause::from_cause(cause));
    NasEpsMessage::new_esm(msg, ebi, pti).encode().ok()
}

/// ESM STATUS (8.3.15).
pub fn esm_status(ebi: u8, pti: u8, cause: EsmCause) -> Option<Vec<u8>> {
    NasEpsMessage::new_esm(NasEsmStatus::new(NasEsmCause::from_cause(cause)), ebi, pti).encode().ok()
}

/// PDN CONNECTIVITY REJECT (8.3.19), as an ESM PDU.
pub fn pdn_connectivity_reject(pti: u8, cause: EsmCause) -> Option<Vec<u8>> {
    NasEpsMessage::new_esm(NasPdnConnectivityReject::new(NasEsmCause::from_cause(cause)), 0, pti).encode().ok()
}

/// The EPS mobile identity of a GUTI (9.9.3.12).
pub fn guti_identity(g: &Guti) -> Option<NasEpsMobileIdentity> {
    let plmn = nas_plmn(&g.gummei.plmn)?;
    Some(NasEpsMobileIdentity::from_guti(oxirush_nas::nas_eps::Guti::new(
        plmn,
        g.gummei.mme_group_id,
        g.gummei.mme_code,
        g.m_tmsi.0,
    )))
}

/// ATTACH ACCEPT (8.2.1) with the default bearer in its ESM container.
pub fn attach_accept(
    plmn: &Plmn,
    tacs: &[u16],
    t3412_seconds: u64,
    guti: &Guti,
    esm: &NasEpsMessage,
) -> Option<Vec<u8>> {
    let nas_plmn = nas_plmn(plmn)?;
    let t3412 = NasT3412Value::from_seconds(t3412_seconds)
        .or_else(|_| NasT3412Value::from_seconds(t3412_seconds / 360 * 360))
        .ok()?;
    let accept = NasAttachAccept::new(
        NasEpsAttachResult::from_attach_result(AttachResult::EpsOnly),
        t3412,
        NasTrackingAreaIdentityList::from_plmn_tacs(&nas_plmn, tacs).ok()?,
        NasEsmMessageContainer::from_esm_message(esm).ok()?,
    )
    .with_guti(guti_identity(guti)?);
    emm(accept)
}

/// ATTACH REJECT (8.2.3), with an ESM container for cause #19.
pub fn attach_reject(cause: EmmCause, esm: Option<Vec<u8>>) -> Option<Vec<u8>> {
    let mut reject = NasAttachReject::new(NasEmmCause::from_cause(cause));
    if let Some(e) = esm {
        reject = reject.with_esm_message_container(NasEsmMessageContainer::new(e));
    }
    emm(reject)
}

/// DETACH ACCEPT (8.2.10.1), network to UE.
pub fn detach_accept() -> Option<Vec<u8>> {
    emm(NasDetachAccept::new())
}

/// EMM STATUS (8.2.14).
pub fn emm_status(cause: EmmCause) -> Option<Vec<u8>> {
    emm(NasEmmStatus::new(NasEmmCause::from_cause(cause)))
}

/// SERVICE REJECT (8.2.24).
pub fn service_reject(cause: EmmCause) -> Option<Vec<u8>> {
    emm(NasServiceReject::new(NasEmmCause::from_cause(cause)))
}

/// The T3412 value IE of `seconds` (9.9.3.16), rounded down to what it codes.
fn t3412_value(seconds: u64) -> Option<NasT3412Value> {
    NasT3412Value::from_seconds(seconds).or_else(|_| NasT3412Value::from_seconds(seconds / 360 * 360)).ok()
}

/// TRACKING AREA UPDATE ACCEPT (8.2.26): TA updated, T3412, the new GUTI
/// (none: the UE keeps its own), the TAI list and the EPS bearer context
/// status of `ebis` (9.9.2.1).
pub fn tau_accept(plmn: &Plmn, tacs: &[u16], t3412_seconds: u64, guti: Option<&Guti>, ebis: &[u8]) -> Option<Vec<u8>> {
    let nas_plmn = nas_plmn(plmn)?;
    let mut accept = NasTrackingAreaUpdateAccept::new(NasEpsUpdateResult::from_update_result(UpdateResult::TaUpdated));
    accept.t3412_value = Some(t3412_value(t3412_seconds)?);
    accept.guti = match guti {
        Some(g) => Some(guti_identity(g)?),
        None => None,
    };
    accept.tai_list = Some(NasTrackingAreaIdentityList::from_plmn_tacs(&nas_plmn, tacs).ok()?);
    accept.eps_bearer_context_status = Some(NasEpsBearerContextStatus::from_bearers(ebis).ok()?);
    emm(accept)
}

/// TRACKING AREA UPDATE REJECT (8.2.28).
pub fn tau_reject(cause: EmmCause) -> Option<Vec<u8>> {
    emm(NasTrackingAreaUpdateReject::new(NasEmmCause::from_cause(cause)))
}

/// DETACH REQUEST, network to UE (8.2.11.2): re-attach required or not.
pub fn detach_request_network(reattach_required: bool) -> Option<Vec<u8>> {
    let kind = match reattach_required {
        true => NetworkDetachKind::ReattachRequired,
        false => NetworkDetachKind::ReattachNotRequired,
    };
    emm(NasDetachRequestUeTerminated::new(NasDetachType::from_network_detach_kind(kind)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_decode_back() {
        let plmn: Plmn = "00101".parse().unwrap();
        let b = DefaultBearer {
            ebi: 5,
            pti: 1,
            qci: 9,
            apn: "internet",
            ipv4: [10, 45, 0, 2],
            apn_ambr: Ambr { uplink: 50_000_000, downlink: 100_000_000 },
            esm_cause: None,
        };
        let esm = activate_default_bearer_request(&b).unwrap();
        let guti = Guti {
            gummei: mobicore_common::Gummei { plmn, mme_group_id: 1, mme_code: 1 },
            m_tmsi: mobicore_common::MTmsi(0x1234_5678),
        };
        let accept = attach_accept(&plmn, &[1, 2], 3240, &guti, &esm).unwrap();
        let NasEpsMessage::Emm(_, NasEmmMessage::AttachAccept(a)) = NasEpsMessage::decode(&accept).unwrap() else {
            panic!("not an attach accept")
        };
        let g = a.guti.as_ref().unwrap().as_guti().unwrap();
        assert_eq!(g.m_tmsi(), 0x1234_5678);
        let NasEpsMessage::Esm(h, NasEsmMessage::ActivateDefaultEpsBearerContextRequest(r)) =
            a.esm_message_container.decode_as_esm_message().unwrap()
        else {
            panic!("not a default bearer request")
        };
        assert_eq!((h.eps_bearer_identity, h.procedure_transaction_identity), (5, 1));
        assert_eq!(r.pdn_address.ipv4(), Some([10, 45, 0, 2]));
        assert_eq!(r.access_point_name.as_string().as_deref(), Some("internet"));
        assert!(identity_request_imsi().is_some());
        assert_eq!(attach_reject(EmmCause::IllegalUe, None).unwrap(), vec![0x07, 0x44, 0x03]);
    }

    #[test]
    fn every_apn_ambr_rate_is_coded_rounded_down() {
        let samples = (1..20_000u64).chain((20_000..70_000_000).step_by(9_973)).chain([256_000, 512_000, 65_280_000]);
        for k in samples {
            let c = codable_kbps(k);
            assert!(c <= k && c >= 1, "{k} -> {c}");
            assert!(NasApnAggregateMaximumBitRate::from_kbps(c, c).is_ok(), "{k} -> {c} not codable");
        }
        assert_eq!((codable_kbps(1000), codable_kbps(20_000), codable_kbps(570)), (960, 20_000, 568));
    }
}
