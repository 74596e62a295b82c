//! S6a answers: ULA (TS 29.272 7.2.4), AIA (7.2.6), PUA (7.2.14).

use super::*;
use crate::avp::AvpRepr;
use crate::base::{copy_proxy_info, s6a_vendor_specific_application_id, LocalIdentity};
use crate::dict::{avp, cmd, result, VENDOR_3GPP};
use crate::message::{find, Message};
use mobicore_common::s6a::*;
use mobicore_common::{tbcd_decode, tbcd_encode, Ambr, Arp, PdnType};

pub(super) fn result_avp(err: Option<S6aError>) -> AvpRepr {
    match err {
        None => avp::RESULT_CODE.u32(result::DIAMETER_SUCCESS),
        Some(e) if e.is_experimental() => avp::EXPERIMENTAL_RESULT
            .grouped(&[avp::VENDOR_ID.u32(VENDOR_3GPP), avp::EXPERIMENTAL_RESULT_CODE.u32(e.code())]),
        Some(e) => avp::RESULT_CODE.u32(e.code()),
    }
}

fn clamp32(v: u64) -> u32 {
    v.min(u64::from(u32::MAX)) as u32
}

fn ambr_avp(a: &Ambr) -> AvpRepr {
    avp::AMBR.grouped(&[
        avp::MAX_REQUESTED_BANDWIDTH_UL.u32(clamp32(a.uplink)),
        avp::MAX_REQUESTED_BANDWIDTH_DL.u32(clamp32(a.downlink)),
    ])
}

fn pdn_type_code(p: PdnType) -> u32 {
    match p {
        PdnType::Ipv4 => 0,
        PdnType::Ipv6 => 1,
        PdnType::Ipv4v6 => 2,
    }
}

/// PDN-GW-Allocation-Type STATIC (TS 29.272 7.3.44): the PDN GW named in
/// MIP6-Agent-Info is the one to use.
pub const PDN_GW_ALLOCATION_STATIC: u32 = 0;

/// APN-Configuration (TS 29.272 7.3.35), in the order of its grammar.
fn apn_avp(a: &ApnConfiguration) -> AvpRepr {
    // TS 29.212 5.3.46/47: 0 = ENABLED, 1 = DISABLED.
    let arp = avp::ALLOCATION_RETENTION_PRIORITY.grouped(&[
        avp::PRIORITY_LEVEL.u32(a.arp.priority_level.into()),
        avp::PRE_EMPTION_CAPABILITY.u32(u32::from(!a.arp.pre_emption_capability)),
        avp::PRE_EMPTION_VULNERABILITY.u32(u32::from(!a.arp.pre_emption_vulnerability)),
    ]);
    let qos = avp::EPS_SUBSCRIBED_QOS_PROFILE.grouped(&[avp::QOS_CLASS_IDENTIFIER.u32(a.qci.into()), arp]);
    let mut c = Vec::with_capacity(8);
    c.push(avp::CONTEXT_IDENTIFIER.u32(a.context_identifier));
    if let Some(ip) = a.served_party_ipv4 {
        // TS 29.272 7.3.44: the static UE address.
        c.push(avp::SERVED_PARTY_IP_ADDRESS.address(ip.into()));
    }
    c.push(avp::PDN_TYPE.u32(pdn_type_code(a.pdn_type)));
    c.push(avp::SERVICE_SELECTION.utf8(&a.service_selection));
    c.push(qos);
    if let Some(gw) = a.pdn_gw {
        // TS 29.272 7.3.45, RFC 5447 4.2.1: the PDN GW by its address.
        c.push(avp::MIP6_AGENT_INFO.grouped(&[avp::MIP_HOME_AGENT_ADDRESS.address(gw)]));
        c.push(avp::PDN_GW_ALLOCATION_TYPE.u32(PDN_GW_ALLOCATION_STATIC));
    }
    c.push(ambr_avp(&a.ambr));
    avp::APN_CONFIGURATION.grouped(&c)
}

/// Features of TS 29.272 7.3.10 (Feature-List-ID 1 and 2) this HSS
/// supports: none of the optional ones.
pub const HSS_FEATURES: &[(u32, u32)] = &[(1, 0), (2, 0)];

/// The Supported-Features of an answer (TS 29.229 7.2.1, as TS 29.272
/// 7.3.10 asks): for each 3GPP Feature-List-ID the request announced, the
/// features both sides support, in the order they came; none when the
/// request announced none. Sent with the M-bit cleared.
pub fn supported_features_answer(request_avps: &[AvpRepr]) -> Vec<AvpRepr> {
    let mut out = Vec::new();
    for sf in request_avps.iter().filter(|a| avp::SUPPORTED_FEATURES.matches(a)) {
        let Ok(c) = sf.grouped() else { continue };
        let (Ok(Some(VENDOR_3GPP)), Ok(Some(id)), Ok(Some(list))) =
            (u32_of(&c, avp::VENDOR_ID), u32_of(&c, avp::FEATURE_LIST_ID), u32_of(&c, avp::FEATURE_LIST))
        else {
            continue;
        };
        if out.len() >= HSS_FEATURES.len() {
            break;
        }
        let ours = HSS_FEATURES.iter().find(|(i, _)| *i == id).map_or(0, |(_, f)| *f);
        out.push(avp::SUPPORTED_FEATURES.grouped(&[
            avp::VENDOR_ID.u32(VENDOR_3GPP),
            avp::FEATURE_LIST_ID.u32(id),
            avp::FEATURE_LIST.u32(list & ours),
        ]));
    }
    out
}

/// Subscription-Data (TS 29.272 7.3.2).
fn subscription_data_avp(s: &SubscriptionData) -> AvpRepr {
    let mut c = Vec::with_capacity(6);
    if let Some(msisdn) = &s.msisdn {
        // TS 29.329 6.3.2: E.164 number in TBCD.
        c.push(avp::MSISDN.octets(&tbcd_encode(msisdn)));
    }
    c.push(avp::NETWORK_ACCESS_MODE.u32(NETWORK_ACCESS_MODE_ONLY_PACKET));
    c.push(avp::SUBSCRIBER_STATUS.u32(SUBSCRIBER_STATUS_SERVICE_GRANTED));
    c.push(ambr_avp(&s.ue_ambr));
    let mut profile = vec![
        avp::CONTEXT_IDENTIFIER.u32(s.default_context_identifier),
        avp::ALL_APN_CONFIGURATIONS_INCLUDED_INDICATOR.u32(0),
    ];
    profile.extend(s.apns.iter().map(apn_avp));
    c.push(avp::APN_CONFIGURATION_PROFILE.grouped(&profile));
    avp::SUBSCRIPTION_DATA.grouped(&c)
}

/// Encodes the answer to `req` (whose header and Session-Id it takes).
pub fn encode_answer(req: &Message, ans: &S6aAnswer, local: &LocalIdentity) -> Message {
    let mut m = Message::new(req.header.answer());
    m.avps.reserve(10);
    if let Some(s) = req.find(avp::SESSION_ID) {
        m.push(s.clone());
    }
    m.push(s6a_vendor_specific_application_id());
    let err = match ans {
        S6aAnswer::AuthenticationInformation(r) => r.as_ref().err().copied(),
        S6aAnswer::UpdateLocation(r) => r.as_ref().err().copied(),
        S6aAnswer::PurgeUe(r) => r.as_ref().err().copied(),
    };
    m.push(result_avp(err));
    m.push(avp::AUTH_SESSION_STATE.u32(NO_STATE_MAINTAINED));
    m.push(avp::ORIGIN_HOST.utf8(&local.origin_host));
    m.push(avp::ORIGIN_REALM.utf8(&local.origin_realm));
    m.avps.extend(supported_features_answer(&req.avps));
    match ans {
        S6aAnswer::AuthenticationInformation(Ok(vectors)) => {
            let v: Vec<AvpRepr> = vectors
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    avp::E_UTRAN_VECTOR.grouped(&[
                        avp::ITEM_NUMBER.u32(i as u32 + 1),
                        avp::RAND.octets(&v.rand),
                        avp::XRES.octets(&v.xres),
                        avp::AUTN.octets(&v.autn),
                        avp::KASME.octets(&v.kasme),
                    ])
                })
                .collect();
            m.push(avp::AUTHENTICATION_INFO.grouped(&v));
        }
        S6aAnswer::UpdateLocation(Ok(sd)) => {
            m.push(avp::ULA_FLAGS.u32(ULA_FLAG_SEPARATION_INDICATION));
            m.push(subscription_data_avp(sd));
        }
        S6aAnswer::PurgeUe(Ok(())) => {
            m.push(avp::PUA_FLAGS.u32(0));
        }
        _ => {}
    }
    copy_proxy_info(&req.avps, &mut m);
    m
}

/// Why an answer could not be mapped to a typed answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed S6a answer: {0}")]
pub struct AnswerError(pub String);

fn bad(what: &str) -> AnswerError {
    AnswerError(what.to_string())
}

fn grouped(a: &AvpRepr) -> Result<Vec<AvpRepr>, AnswerError> {
    a.grouped().map_err(|e| AnswerError(e.to_string()))
}

fn ambr_of(a: Option<&AvpRepr>) -> Result<Ambr, AnswerError> {
    let Some(a) = a else {
        return Ok(Ambr::default());
    };
    let c = grouped(a)?;
    let e = |_| bad("AMBR");
    Ok(Ambr {
        uplink: u32_of(&c, avp::MAX_REQUESTED_BANDWIDTH_UL).map_err(e)?.unwrap_or(0).into(),
        downlink: u32_of(&c, avp::MAX_REQUESTED_BANDWIDTH_DL).map_err(e)?.unwrap_or(0).into(),
    })
}

fn apn_of(a: &AvpRepr) -> Result<ApnConfiguration, AnswerError> {
    let c = grouped(a)?;
    let e = |_| bad("APN-Configuration");
    let context_identifier =
        u32_of(&c, avp::CONTEXT_IDENTIFIER).map_err(e)?.ok_or_else(|| bad("Context-Identifier"))?;
    let service_selection = find(&c, avp::SERVICE_SELECTION)
        .and_then(|a| a.as_str().ok())
        .ok_or_else(|| bad("Service-Selection"))?
        .to_string();
    let pdn_type = match u32_of(&c, avp::PDN_TYPE).map_err(e)? {
        Some(1) => PdnType::Ipv6,
        Some(2) | Some(3) => PdnType::Ipv4v6,
        _ => PdnType::Ipv4,
    };
    let qos = grouped(find(&c, avp::EPS_SUBSCRIBED_QOS_PROFILE).ok_or_else(|| bad("EPS-Subscribed-QoS-Profile"))?)?;
    let qci = u32_of(&qos, avp::QOS_CLASS_IDENTIFIER).map_err(e)?.ok_or_else(|| bad("QCI"))?;
    let mut arp = Arp::default();
    if let Some(a) = find(&qos, avp::ALLOCATION_RETENTION_PRIORITY) {
        let g = grouped(a)?;
        if let Some(p) = u32_of(&g, avp::PRIORITY_LEVEL).map_err(e)? {
            arp.priority_level = p.min(15) as u8;
        }
        if let Some(p) = u32_of(&g, avp::PRE_EMPTION_CAPABILITY).map_err(e)? {
            arp.pre_emption_capability = p == 0;
        }
        if let Some(p) = u32_of(&g, avp::PRE_EMPTION_VULNERABILITY).map_err(e)? {
            arp.pre_emption_vulnerability = p == 0;
        }
    }
    // TS 29.272 7.3.44: up to two Served-Party-IP-Address, one per family.
    let served_party_ipv4 = c
        .iter()
        .filter(|a| avp::SERVED_PARTY_IP_ADDRESS.matches(a))
        .map(|a| a.as_address().map_err(|_| bad("Served-Party-IP-Address")))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .find_map(|ip| match ip {
            std::net::IpAddr::V4(v4) => Some(v4),
            std::net::IpAddr::V6(_) => None,
        });
    // TS 29.272 7.3.45: the PDN GW's address in MIP6-Agent-Info.
    let pdn_gw = match find(&c, avp::MIP6_AGENT_INFO) {
        Some(mip) => {
            let g = grouped(mip)?;
            find(&g, avp::MIP_HOME_AGENT_ADDRESS)
                .map(|a| a.as_address().map_err(|_| bad("MIP-Home-Agent-Address")))
                .transpose()?
        }
        None => None,
    };
    Ok(ApnConfiguration {
        context_identifier,
        service_selection,
        pdn_type,
        qci: qci.min(255) as u8,
        arp,
        ambr: ambr_of(find(&c, avp::AMBR))?,
        pdn_gw,
        served_party_ipv4,
    })
}

fn subscription_data_of(a: &AvpRepr) -> Result<SubscriptionData, AnswerError> {
    let c = grouped(a)?;
    let msisdn = find(&c, avp::MSISDN).map(|a| tbcd_decode(&a.data).ok_or_else(|| bad("MSISDN"))).transpose()?;
    let ue_ambr = ambr_of(find(&c, avp::AMBR))?;
    let (mut default_context_identifier, mut apns) = (0, Vec::new());
    if let Some(p) = find(&c, avp::APN_CONFIGURATION_PROFILE) {
        let p = grouped(p)?;
        default_context_identifier =
            u32_of(&p, avp::CONTEXT_IDENTIFIER).map_err(|_| bad("Context-Identifier"))?.unwrap_or(0);
        for a in p.iter().filter(|a| avp::APN_CONFIGURATION.matches(a)) {
            apns.push(apn_of(a)?);
        }
    }
    Ok(SubscriptionData { msisdn, ue_ambr, default_context_identifier, apns })
}

fn vector_of(a: &AvpRepr) -> Result<EutranVector, AnswerError> {
    let c = grouped(a)?;
    let get = |d| find(&c, d).ok_or_else(|| bad("E-UTRAN-Vector"));
    let e = |_| bad("E-UTRAN-Vector");
    Ok(EutranVector {
        rand: fixed(get(avp::RAND)?).map_err(e)?,
        xres: get(avp::XRES)?.data.clone(),
        autn: fixed(get(avp::AUTN)?).map_err(e)?,
        kasme: fixed(get(avp::KASME)?).map_err(e)?,
    })
}

/// Decodes an answer to a typed answer. A failure Result-Code or
/// Experimental-Result becomes the `Err` of the typed answer; a message that
/// says success but lacks its content is an [`AnswerError`].
pub fn decode_answer(m: &Message) -> Result<S6aAnswer, AnswerError> {
    let code = m.result_code().ok_or_else(|| bad("no Result-Code or Experimental-Result"))?;
    let err = (code != result::DIAMETER_SUCCESS).then(|| S6aError::from_code(code));
    match m.header.command_code {
        cmd::AUTHENTICATION_INFORMATION => Ok(S6aAnswer::AuthenticationInformation(match err {
            Some(e) => Err(e),
            None => {
                let info = m.find(avp::AUTHENTICATION_INFO).ok_or_else(|| bad("no Authentication-Info"))?;
                let c = grouped(info)?;
                let v = c.iter().filter(|a| avp::E_UTRAN_VECTOR.matches(a)).map(vector_of);
                Ok(v.collect::<Result<Vec<_>, _>>()?)
            }
        })),
        cmd::UPDATE_LOCATION => Ok(S6aAnswer::UpdateLocation(match err {
            Some(e) => Err(e),
            None => {
                let sd = m.find(avp::SUBSCRIPTION_DATA).ok_or_else(|| bad("no Subscription-Data"))?;
                Ok(subscription_data_of(sd)?)
            }
        })),
        cmd::PURGE_UE => Ok(S6aAnswer::PurgeUe(match err {
            Some(e) => Err(e),
            None => Ok(()),
        })),
        c => Err(AnswerError(format!("unexpected command {c}"))),
    }
}
