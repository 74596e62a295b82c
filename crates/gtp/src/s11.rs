//! Mapping between GTPv2-C messages and the typed S11 procedures of
//! [`mobicore_common::s11`] (TS 29.274 7.2).

use crate::message::{self as m, GtpMessage, Message, MessageError};
use crate::wire::ie::{ie_type, interface_type, BearerQos, CauseIe, FteidIe, Paa, Uli, INDICATION_DAF};
use mobicore_common::s11::*;
use mobicore_common::{Ebi, Fteid, PdnType, Teid};
use std::net::{Ipv4Addr, Ipv6Addr};

/// RAT Type EUTRAN (TS 29.274 8.17).
pub const RAT_TYPE_EUTRAN: u8 = 6;

fn fteid_ie(interface_type: u8, f: &Fteid) -> FteidIe {
    FteidIe::v4(interface_type, f.teid.0, f.ipv4)
}

/// The PAA of a Create Session Request (TS 29.274 8.14): the static
/// address, or 0.0.0.0 / ::/64 where the PDN GW allocates one.
fn request_paa(pdn_type: PdnType, static_ipv4: Option<Ipv4Addr>) -> Paa {
    let v4 = matches!(pdn_type, PdnType::Ipv4 | PdnType::Ipv4v6).then(|| static_ipv4.unwrap_or(Ipv4Addr::UNSPECIFIED));
    let v6 = matches!(pdn_type, PdnType::Ipv6 | PdnType::Ipv4v6).then_some((64, Ipv6Addr::UNSPECIFIED));
    Paa { pdn_type, ipv4: v4, ipv6: v6 }
}

/// The PAA of a Create Session Response: the PDN type granted and its
/// addresses (an IPv6 prefix travels with its length first on the wire).
fn response_paa(r: &CreateSessionResponse) -> Option<Paa> {
    let ipv6 = r.ipv6_prefix.map(|(a, l)| (l, a));
    let derived = match (r.paa, ipv6) {
        (Some(_), Some(_)) => PdnType::Ipv4v6,
        (None, Some(_)) => PdnType::Ipv6,
        (Some(_), None) => PdnType::Ipv4,
        (None, None) => return None,
    };
    Some(Paa { pdn_type: r.pdn_type.unwrap_or(derived), ipv4: r.paa, ipv6 })
}

/// What a Create Session Request says beyond [`CreateSessionRequest`]
/// that the PDN GW acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CreateSessionFlags {
    /// Indication DAF (TS 29.274 8.12): dual address bearers allowed, so
    /// an IPv4v6 request may get both addresses (TS 23.401 5.3.1.1).
    pub dual_address_bearer: bool,
    /// The UE's options came as ePCO (TS 29.274 8.128): answer in ePCO.
    pub epco: bool,
}

/// The [`CreateSessionFlags`] of a Create Session Request (`None` for any
/// other message).
pub fn create_session_flags(msg: &GtpMessage) -> Option<CreateSessionFlags> {
    let Message::CreateSessionRequest(r) = &msg.body else { return None };
    Some(CreateSessionFlags {
        dual_address_bearer: r.indication.as_ref().and_then(|i| i.first()).is_some_and(|f| f & INDICATION_DAF != 0),
        epco: r.pco.is_none() && r.epco.is_some(),
    })
}

/// Moves the PCO of a Create Session Response into the ePCO IE, for a UE
/// that sent ePCO (TS 29.274 7.2.2).
pub fn pco_as_epco(msg: &mut GtpMessage) {
    if let Message::CreateSessionResponse(r) = &mut msg.body {
        if let Some(p) = r.pco.take() {
            r.epco = Some(p);
        }
    }
}

/// An F-TEID we use must carry an IPv4 address.
fn fteid_of(ie: &FteidIe, ie_type: u8, instance: u8) -> Result<Fteid, MessageError> {
    let ipv4 = ie.ipv4.ok_or(MessageError::IncorrectIe { ie_type, instance })?;
    Ok(Fteid { teid: Teid(ie.teid), ipv4 })
}

/// The header TEID a request is sent with: 0 for Create Session (the SGW
/// has no context yet, TS 29.274 5.5.2), else the SGW's S11 TEID.
pub fn request_teid(req: &S11Request) -> u32 {
    match req {
        S11Request::CreateSession(_) => 0,
        S11Request::ModifyBearer(r) => r.sgw_teid.0,
        S11Request::DeleteSession(r) => r.sgw_teid.0,
        S11Request::ReleaseAccessBearers(r) => r.sgw_teid.0,
        S11Request::CreateIndirectForwarding(r) => r.sgw_teid.0,
        S11Request::DeleteIndirectForwarding(r) => r.sgw_teid.0,
    }
}

/// MME side: the GTPv2-C request for a typed S11 request.
pub fn encode_request(req: &S11Request, seq: u32) -> GtpMessage {
    let body = match req {
        S11Request::CreateSession(r) => Message::CreateSessionRequest(m::CreateSessionRequest {
            imsi: Some(r.imsi.clone()),
            msisdn: r.msisdn.clone(),
            mei: r.mei.clone(),
            uli: Some(Uli { tai: Some(r.tai), ecgi: Some(r.ecgi) }),
            serving_network: Some(r.serving_network),
            rat_type: RAT_TYPE_EUTRAN,
            // DAF for an IPv4v6 request: we allow dual address bearers
            // (TS 29.274 8.12; Rel-8 length, 3 octets).
            indication: (r.pdn_type == PdnType::Ipv4v6).then(|| vec![INDICATION_DAF, 0, 0]),
            sender_fteid: fteid_ie(interface_type::S11_MME_GTPC, &r.sender_fteid),
            // PGW S5/S8 Address for Control Plane: TEID 0 (Table 7.2.1-1).
            pgw_s5s8_fteid: r.pgw_s5s8_c.map(|a| FteidIe::v4(interface_type::S5S8_PGW_GTPC, 0, a)),
            apn: r.apn.clone(),
            selection_mode: Some(0),
            pdn_type: Some(r.pdn_type),
            paa: Some(request_paa(r.pdn_type, r.static_ipv4)),
            apn_restriction: Some(0),
            apn_ambr: Some(r.apn_ambr),
            pco: r.pco.clone(),
            bearer_contexts: vec![m::BearerContextToCreate {
                ebi: r.bearer.ebi,
                bearer_qos: BearerQos::new(r.bearer.qci, r.bearer.arp),
                s1u_enb_fteid: None,
            }],
            recovery: None,
            epco: None,
        }),
        S11Request::ModifyBearer(r) => Message::ModifyBearerRequest(m::ModifyBearerRequest {
            indication: None,
            uli: None,
            serving_network: None,
            rat_type: None,
            sender_fteid: None,
            bearer_contexts: vec![m::BearerContextToModify {
                ebi: r.ebi,
                s1u_enb_fteid: Some(fteid_ie(interface_type::S1U_ENB_GTPU, &r.s1u_enb_fteid)),
            }],
            recovery: None,
        }),
        S11Request::DeleteSession(r) => Message::DeleteSessionRequest(m::DeleteSessionRequest {
            linked_ebi: Some(r.linked_ebi),
            uli: None,
            indication: None,
        }),
        S11Request::ReleaseAccessBearers(_) => {
            Message::ReleaseAccessBearersRequest(m::ReleaseAccessBearersRequest::default())
        }
        // TS 29.274 7.2.18: per bearer the target eNB's F-TEID for DL data
        // forwarding (Table 7.2.18-2, instance 0, interface type 19).
        S11Request::CreateIndirectForwarding(r) => {
            Message::CreateIndirectDataForwardingTunnelRequest(m::CreateIndirectDataForwardingTunnelRequest {
                sender_fteid: None,
                bearer_contexts: r
                    .bearers
                    .iter()
                    .map(|b| m::ForwardingBearerContext {
                        ebi: b.ebi,
                        cause: None,
                        enb_dl_fteid: Some(fteid_ie(interface_type::ENB_GTPU_DL_FORWARDING, &b.fteid)),
                        sgw_dl_fteid: None,
                    })
                    .collect(),
                recovery: None,
            })
        }
        S11Request::DeleteIndirectForwarding(_) => Message::DeleteIndirectDataForwardingTunnelRequest,
    };
    GtpMessage { teid: Some(request_teid(req)), seq, body }
}

/// SGW side: the typed request in a GTPv2-C request. The IEs the MME sends
/// as conditional on E-UTRAN initial attach (IMSI, Serving Network, ULI with
/// TAI and ECGI) are required here and reported missing otherwise.
pub fn decode_request(msg: &GtpMessage) -> Result<S11Request, MessageError> {
    let teid = Teid(msg.teid.unwrap_or(0));
    let missing = |ie_type, instance| MessageError::MissingIe { ie_type, instance };
    Ok(match &msg.body {
        Message::CreateSessionRequest(r) => {
            let bc = r.bearer_contexts.first().ok_or(missing(ie_type::BEARER_CONTEXT, 0))?;
            let uli = r.uli.ok_or(missing(ie_type::ULI, 0))?;
            S11Request::CreateSession(CreateSessionRequest {
                imsi: r.imsi.clone().ok_or(missing(ie_type::IMSI, 0))?,
                msisdn: r.msisdn.clone(),
                serving_network: r.serving_network.ok_or(missing(ie_type::SERVING_NETWORK, 0))?,
                tai: uli.tai.ok_or(missing(ie_type::ULI, 0))?,
                ecgi: uli.ecgi.ok_or(missing(ie_type::ULI, 0))?,
                sender_fteid: fteid_of(&r.sender_fteid, ie_type::FTEID, 0)?,
                apn: r.apn.clone(),
                pdn_type: r.pdn_type.or(r.paa.map(|p| p.pdn_type)).unwrap_or_default(),
                apn_ambr: r.apn_ambr.unwrap_or_default(),
                bearer: BearerContextToCreate { ebi: bc.ebi, qci: bc.bearer_qos.qci, arp: bc.bearer_qos.arp },
                pgw_s5s8_c: r.pgw_s5s8_fteid.and_then(|f| f.ipv4),
                // A static address in the PAA (TS 29.274 7.2.1); 0.0.0.0
                // asks for a dynamic one.
                static_ipv4: r.paa.and_then(|p| p.ipv4).filter(|a| !a.is_unspecified()),
                pco: r.pco.clone().or_else(|| r.epco.clone()),
                mei: r.mei.clone(),
            })
        }
        Message::ModifyBearerRequest(r) => {
            let bc = r.bearer_contexts.first().ok_or(missing(ie_type::BEARER_CONTEXT, 0))?;
            let f = bc.s1u_enb_fteid.as_ref().ok_or(missing(ie_type::FTEID, 0))?;
            S11Request::ModifyBearer(ModifyBearerRequest {
                sgw_teid: teid,
                ebi: bc.ebi,
                s1u_enb_fteid: fteid_of(f, ie_type::FTEID, 0)?,
            })
        }
        Message::DeleteSessionRequest(r) => S11Request::DeleteSession(DeleteSessionRequest {
            sgw_teid: teid,
            // Ebi(0), never a bearer's, when the request names none.
            linked_ebi: r.linked_ebi.unwrap_or(Ebi(0)),
        }),
        Message::ReleaseAccessBearersRequest(_) => {
            S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid: teid })
        }
        Message::CreateIndirectDataForwardingTunnelRequest(r) => {
            // Each bearer names the eNB F-TEID for DL data forwarding
            // (Table 7.2.18-2): without it there is nothing to forward to.
            let bearers = r
                .bearer_contexts
                .iter()
                .map(|bc| {
                    let f = bc.enb_dl_fteid.as_ref().ok_or(missing(ie_type::FTEID, 0))?;
                    Ok(ForwardingBearer { ebi: bc.ebi, fteid: fteid_of(f, ie_type::FTEID, 0)? })
                })
                .collect::<Result<Vec<_>, MessageError>>()?;
            S11Request::CreateIndirectForwarding(CreateIndirectForwardingRequest { sgw_teid: teid, bearers })
        }
        Message::DeleteIndirectDataForwardingTunnelRequest => {
            S11Request::DeleteIndirectForwarding(DeleteIndirectForwardingRequest { sgw_teid: teid })
        }
        other => return Err(MessageError::UnknownMessage(other.msg_type())),
    })
}

/// SGW side: the GTPv2-C response, sent to the MME's TEID `teid`.
pub fn encode_response(resp: &S11Response, teid: u32, seq: u32, recovery: Option<u8>) -> GtpMessage {
    let body = match resp {
        S11Response::CreateSession(r) => Message::CreateSessionResponse(m::CreateSessionResponse {
            cause: CauseIe::new(r.cause.0),
            sender_fteid: r.sgw_fteid.as_ref().map(|f| fteid_ie(interface_type::S11S4_SGW_GTPC, f)),
            pgw_s5s8_fteid: r.pgw_s5s8_c_fteid.as_ref().map(|f| fteid_ie(interface_type::S5S8_PGW_GTPC, f)),
            paa: response_paa(r),
            apn_restriction: r.cause.is_accepted().then_some(0),
            apn_ambr: r.apn_ambr,
            pco: r.pco.clone(),
            bearer_contexts: if r.cause.is_accepted() || r.s1u_sgw_fteid.is_some() {
                vec![m::BearerContextCreated {
                    ebi: r.bearer_ebi,
                    cause: CauseIe::new(r.bearer_cause.0),
                    s1u_sgw_fteid: r.s1u_sgw_fteid.as_ref().map(|f| fteid_ie(interface_type::S1U_SGW_GTPU, f)),
                    s5s8_pgw_fteid: None,
                    bearer_qos: None,
                    charging_id: r.charging_id,
                }]
            } else {
                vec![]
            },
            recovery,
            epco: None,
        }),
        S11Response::ModifyBearer(r) => Message::ModifyBearerResponse(m::ModifyBearerResponse {
            cause: CauseIe::new(r.cause.0),
            msisdn: None,
            bearer_contexts: vec![],
            recovery,
        }),
        S11Response::DeleteSession(c) => {
            Message::DeleteSessionResponse(m::CauseOnlyResponse { cause: CauseIe::new(c.0), recovery })
        }
        S11Response::ReleaseAccessBearers(c) => {
            Message::ReleaseAccessBearersResponse(m::CauseOnlyResponse { cause: CauseIe::new(c.0), recovery })
        }
        // TS 29.274 7.2.19: per bearer its Cause and the S-GW's F-TEID for
        // DL data forwarding (Table 7.2.19-2, instance 1, interface type 23).
        S11Response::CreateIndirectForwarding(r) => {
            Message::CreateIndirectDataForwardingTunnelResponse(m::CreateIndirectDataForwardingTunnelResponse {
                cause: CauseIe::new(r.cause.0),
                sender_fteid: None,
                bearer_contexts: r
                    .bearers
                    .iter()
                    .map(|b| m::ForwardingBearerContext {
                        ebi: b.ebi,
                        cause: Some(CauseIe::new(r.cause.0)),
                        enb_dl_fteid: None,
                        sgw_dl_fteid: Some(fteid_ie(interface_type::SGW_GTPU_DL_FORWARDING, &b.fteid)),
                    })
                    .collect(),
                recovery,
            })
        }
        S11Response::DeleteIndirectForwarding(c) => {
            Message::DeleteIndirectDataForwardingTunnelResponse(m::CauseOnlyResponse {
                cause: CauseIe::new(c.0),
                recovery,
            })
        }
    };
    GtpMessage { teid: Some(teid), seq, body }
}

/// Modify Bearer Response with the bearer it modified (TS 29.274 7.2.8).
pub fn modify_bearer_response(teid: u32, seq: u32, cause: GtpCause, ebi: Ebi, s1u_sgw: Option<Fteid>) -> GtpMessage {
    let mut msg = encode_response(
        &S11Response::ModifyBearer(ModifyBearerResponse { cause, bearer_cause: Some(cause) }),
        teid,
        seq,
        None,
    );
    if let Message::ModifyBearerResponse(r) = &mut msg.body {
        r.bearer_contexts.push(m::BearerContextModified {
            ebi,
            cause: CauseIe::new(cause.0),
            s1u_sgw_fteid: s1u_sgw.as_ref().map(|f| fteid_ie(interface_type::S1U_SGW_GTPU, f)),
        });
    }
    msg
}

/// MME side: the typed response in a GTPv2-C response. `request_ebi` fills
/// the bearer EBI of a rejection that carried no Bearer Context.
pub fn decode_response(msg: &GtpMessage, request_ebi: Ebi) -> Result<S11Response, MessageError> {
    Ok(match &msg.body {
        Message::CreateSessionResponse(r) => {
            let cause = GtpCause(r.cause.value);
            let bc = r.bearer_contexts.first();
            let sgw_fteid = match &r.sender_fteid {
                Some(f) => Some(fteid_of(f, ie_type::FTEID, 0)?),
                None => None,
            };
            let s1u = match bc.and_then(|b| b.s1u_sgw_fteid.as_ref()) {
                Some(f) => Some(fteid_of(f, ie_type::FTEID, 0)?),
                None => None,
            };
            S11Response::CreateSession(CreateSessionResponse {
                cause,
                sgw_fteid,
                paa: r.paa.and_then(|p| p.ipv4),
                apn_ambr: r.apn_ambr,
                bearer_ebi: bc.map_or(request_ebi, |b| b.ebi),
                bearer_cause: bc.map_or(cause, |b| GtpCause(b.cause.value)),
                s1u_sgw_fteid: s1u,
                // Conditional: one without an IPv4 address is not ours to use.
                pgw_s5s8_c_fteid: r.pgw_s5s8_fteid.as_ref().and_then(|f| fteid_of(f, ie_type::FTEID, 1).ok()),
                charging_id: bc.and_then(|b| b.charging_id),
                pdn_type: r.paa.map(|p| p.pdn_type),
                ipv6_prefix: r.paa.and_then(|p| p.ipv6).map(|(l, a)| (a, l)),
                pco: r.pco.clone().or_else(|| r.epco.clone()),
            })
        }
        Message::ModifyBearerResponse(r) => S11Response::ModifyBearer(ModifyBearerResponse {
            cause: GtpCause(r.cause.value),
            bearer_cause: r.bearer_contexts.first().map(|b| GtpCause(b.cause.value)),
        }),
        Message::DeleteSessionResponse(r) => S11Response::DeleteSession(GtpCause(r.cause.value)),
        Message::ReleaseAccessBearersResponse(r) => S11Response::ReleaseAccessBearers(GtpCause(r.cause.value)),
        Message::CreateIndirectDataForwardingTunnelResponse(r) => {
            S11Response::CreateIndirectForwarding(CreateIndirectForwardingResponse {
                cause: GtpCause(r.cause.value),
                // The bearers the S-GW accepted, each with its F-TEID for DL
                // data forwarding (instance 1; instance 0 read too).
                bearers: r
                    .bearer_contexts
                    .iter()
                    .filter(|bc| bc.cause.is_none_or(|c| GtpCause(c.value).is_accepted()))
                    .filter_map(|bc| {
                        let f = bc.sgw_dl_fteid.or(bc.enb_dl_fteid)?;
                        Some(ForwardingBearer { ebi: bc.ebi, fteid: fteid_of(&f, ie_type::FTEID, 1).ok()? })
                    })
                    .collect(),
            })
        }
        Message::DeleteIndirectDataForwardingTunnelResponse(r) => {
            S11Response::DeleteIndirectForwarding(GtpCause(r.cause.value))
        }
        other => return Err(MessageError::UnknownMessage(other.msg_type())),
    })
}

/// The EBI a request concerns, for [`decode_response`].
pub fn request_ebi(req: &S11Request) -> Ebi {
    match req {
        S11Request::CreateSession(r) => r.bearer.ebi,
        S11Request::ModifyBearer(r) => r.ebi,
        S11Request::DeleteSession(r) => r.linked_ebi,
        S11Request::ReleaseAccessBearers(_) => Ebi(5),
        S11Request::CreateIndirectForwarding(r) => r.bearers.first().map_or(Ebi(5), |b| b.ebi),
        S11Request::DeleteIndirectForwarding(_) => Ebi(5),
    }
}

// ---- S-GW -> MME requests (Downlink Data Notification) and MME -> S-GW
// messages without response (Downlink Data Notification Failure Indication)

/// Data Notification Delay (TS 29.274 8.27): units of 50 ms.
const DELAY_UNIT_MS: u32 = 50;

/// SGW side: the Downlink Data Notification (TS 29.274 7.2.11.1) for a
/// typed S-GW request, sent to the MME's S11 TEID; `sgw` is the S-GW's S11
/// F-TEID of the UE (Sender F-TEID for Control Plane), which the MME
/// answers to.
pub fn encode_incoming_request(req: &S11IncomingRequest, sgw: Option<Fteid>, seq: u32) -> GtpMessage {
    match req {
        S11IncomingRequest::DownlinkDataNotification(r) => GtpMessage {
            teid: Some(r.mme_teid.0),
            seq,
            body: Message::DownlinkDataNotification(m::DownlinkDataNotification {
                cause: None,
                ebi: r.ebi,
                arp: r.arp,
                sender_fteid: sgw.as_ref().map(|f| fteid_ie(interface_type::S11S4_SGW_GTPC, f)),
            }),
        },
    }
}

/// MME side: the typed S-GW request in a GTPv2-C request (a Downlink Data
/// Notification, TS 29.274 7.2.11.1), and the TEID to answer to (the
/// S-GW's Sender F-TEID, 0 when absent).
pub fn decode_incoming_request(msg: &GtpMessage) -> Result<(S11IncomingRequest, u32), MessageError> {
    match &msg.body {
        Message::DownlinkDataNotification(r) => Ok((
            S11IncomingRequest::DownlinkDataNotification(DownlinkDataNotification {
                mme_teid: Teid(msg.teid.unwrap_or(0)),
                ebi: r.ebi,
                arp: r.arp,
            }),
            r.sender_fteid.map_or(0, |f| f.teid),
        )),
        other => Err(MessageError::UnknownMessage(other.msg_type())),
    }
}

/// MME side: the answer (Downlink Data Notification Acknowledge, TS 29.274
/// 7.2.11.2) to the S-GW's TEID `teid` with the request's sequence number.
pub fn encode_incoming_answer(answer: &S11IncomingAnswer, teid: u32, seq: u32) -> GtpMessage {
    match answer {
        S11IncomingAnswer::DownlinkDataNotificationAck(a) => GtpMessage {
            teid: Some(teid),
            seq,
            body: Message::DownlinkDataNotificationAck(m::DownlinkDataNotificationAck {
                cause: CauseIe::new(a.cause.0),
                delay: a.data_notification_delay_ms.map(|ms| (ms / DELAY_UNIT_MS).min(255) as u8),
                recovery: None,
                dl_buffering_duration: a.dl_buffering_duration_s.map(|s| {
                    if s == u32::MAX {
                        0xe0
                    } else {
                        m::epc_timer_octet(s)
                    }
                }),
                dl_buffering_suggested_packets: a.dl_buffering_suggested_packets,
                throttling: a.throttling.map(|t| m::ThrottlingIe::new(t.delay_s, t.factor_percent.min(100))),
            }),
        },
    }
}

/// SGW side: the MME's typed answer in a GTPv2-C response. An "infinite"
/// DL Buffering Duration reads as `u32::MAX` seconds.
pub fn decode_incoming_answer(msg: &GtpMessage) -> Result<S11IncomingAnswer, MessageError> {
    match &msg.body {
        Message::DownlinkDataNotificationAck(a) => {
            Ok(S11IncomingAnswer::DownlinkDataNotificationAck(DownlinkDataNotificationAck {
                cause: GtpCause(a.cause.value),
                data_notification_delay_ms: a.delay.map(|d| u32::from(d) * DELAY_UNIT_MS),
                dl_buffering_duration_s: a.dl_buffering_duration.map(|o| m::epc_timer_seconds(o).unwrap_or(u32::MAX)),
                dl_buffering_suggested_packets: a.dl_buffering_suggested_packets,
                // A deactivated Throttling Delay ends throttling, as a zero one.
                throttling: a.throttling.map(|t| DdnThrottling {
                    delay_s: t.delay_seconds().unwrap_or(0),
                    factor_percent: t.factor_percent(),
                }),
            }))
        }
        other => Err(MessageError::UnknownMessage(other.msg_type())),
    }
}

/// MME side: a message that has no response (Downlink Data Notification
/// Failure Indication, TS 29.274 7.2.11.3), to the S-GW's S11 TEID.
pub fn encode_notification(n: &S11Notification, seq: u32) -> GtpMessage {
    match n {
        S11Notification::DownlinkDataNotificationFailure(f) => GtpMessage {
            teid: Some(f.sgw_teid.0),
            seq,
            body: Message::DownlinkDataNotificationFailureIndication(m::DownlinkDataNotificationFailureIndication {
                cause: CauseIe::new(f.cause.0),
            }),
        },
    }
}

/// SGW side: the typed message in a GTPv2-C message without response.
pub fn decode_notification(msg: &GtpMessage) -> Result<S11Notification, MessageError> {
    match &msg.body {
        Message::DownlinkDataNotificationFailureIndication(f) => {
            Ok(S11Notification::DownlinkDataNotificationFailure(DownlinkDataNotificationFailure {
                sgw_teid: Teid(msg.teid.unwrap_or(0)),
                cause: GtpCause(f.cause.value),
            }))
        }
        other => Err(MessageError::UnknownMessage(other.msg_type())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use mobicore_common::{Ambr, Arp, Ecgi, PdnType, Plmn, Tai};
    use proptest::prelude::*;

    fn fteid() -> impl Strategy<Value = Fteid> {
        (any::<u32>(), any::<u32>()).prop_map(|(t, a)| Fteid { teid: Teid(t), ipv4: Ipv4Addr::from(a) })
    }
    fn cause() -> impl Strategy<Value = GtpCause> {
        any::<u8>().prop_map(GtpCause)
    }

    fn request() -> impl Strategy<Value = S11Request> {
        let plmn = ("[0-9]{3}", "[0-9]{2,3}").prop_map(|(a, b)| Plmn::new(&a, &b).unwrap());
        let csr = (
            "[0-9]{6,15}",
            proptest::option::of("[0-9]{1,15}"),
            plmn,
            any::<u16>(),
            0u32..1 << 28,
            fteid(),
            "[a-z]{1,10}(\\.[a-z0-9]{1,6}){0,2}",
            prop_oneof![Just(PdnType::Ipv4), Just(PdnType::Ipv6), Just(PdnType::Ipv4v6)],
            (any::<u32>(), any::<u32>()),
            (0u8..16, any::<u8>(), 0u8..16, any::<bool>(), any::<bool>()),
            (
                proptest::option::of(any::<u32>()),
                proptest::option::of(1u32..),
                proptest::option::of(proptest::collection::vec(any::<u8>(), 1..40)),
            ),
        )
            .prop_map(
                |(imsi, msisdn, plmn, tac, eci, f, apn, pdn, (ul, dl), (ebi, qci, pl, c, v), (pgw, st, pco))| {
                    S11Request::CreateSession(CreateSessionRequest {
                        imsi: imsi.parse().unwrap(),
                        msisdn,
                        serving_network: plmn,
                        tai: Tai { plmn, tac },
                        ecgi: Ecgi { plmn, eci },
                        sender_fteid: f,
                        apn,
                        pdn_type: pdn,
                        apn_ambr: Ambr { uplink: ul as u64 * 1000, downlink: dl as u64 * 1000 },
                        bearer: BearerContextToCreate {
                            ebi: Ebi(ebi),
                            qci,
                            arp: Arp { priority_level: pl, pre_emption_capability: c, pre_emption_vulnerability: v },
                        },
                        pgw_s5s8_c: pgw.map(Ipv4Addr::from),
                        // A static IPv4 address only where the PDN type has one.
                        static_ipv4: st.map(Ipv4Addr::from).filter(|_| pdn != PdnType::Ipv6),
                        pco,
                        mei: None,
                    })
                },
            );
        prop_oneof![
            csr,
            (any::<u32>(), 0u8..16, fteid()).prop_map(|(t, e, f)| S11Request::ModifyBearer(ModifyBearerRequest {
                sgw_teid: Teid(t),
                ebi: Ebi(e),
                s1u_enb_fteid: f
            })),
            (any::<u32>(), 0u8..16).prop_map(|(t, e)| S11Request::DeleteSession(DeleteSessionRequest {
                sgw_teid: Teid(t),
                linked_ebi: Ebi(e)
            })),
            any::<u32>()
                .prop_map(|t| S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid: Teid(t) })),
            (any::<u32>(), proptest::collection::vec(bearer(), 1..4)).prop_map(|(t, bearers)| {
                S11Request::CreateIndirectForwarding(CreateIndirectForwardingRequest { sgw_teid: Teid(t), bearers })
            }),
            any::<u32>().prop_map(|t| S11Request::DeleteIndirectForwarding(DeleteIndirectForwardingRequest {
                sgw_teid: Teid(t)
            })),
        ]
    }

    fn bearer() -> impl Strategy<Value = ForwardingBearer> {
        (0u8..16, fteid()).prop_map(|(e, fteid)| ForwardingBearer { ebi: Ebi(e), fteid })
    }

    fn arp() -> impl Strategy<Value = Arp> {
        (0u8..16, any::<bool>(), any::<bool>()).prop_map(|(pl, c, v)| Arp {
            priority_level: pl,
            pre_emption_capability: c,
            pre_emption_vulnerability: v,
        })
    }

    /// Values the wire can carry exactly: delays in units of 50 ms, EPC
    /// Timer values of one of its units (or infinite).
    fn ack() -> impl Strategy<Value = DownlinkDataNotificationAck> {
        let duration = prop_oneof![
            Just(u32::MAX),
            (0u32..32, prop_oneof![Just(2u32), Just(60), Just(600), Just(3600), Just(36_000)]).prop_map(|(v, u)| v * u),
        ];
        let timer = (0u32..32, prop_oneof![Just(2u32), Just(60), Just(600), Just(3600), Just(36_000)]);
        let throttling = (timer.prop_map(|(v, u)| v * u), 0u8..=100)
            .prop_map(|(delay_s, factor_percent)| DdnThrottling { delay_s, factor_percent });
        (
            cause(),
            proptest::option::of((0u32..256).prop_map(|d| d * 50)),
            proptest::option::of(duration),
            proptest::option::of(any::<u16>()),
            proptest::option::of(throttling),
        )
            .prop_map(|(cause, delay, dur, n, throttling)| DownlinkDataNotificationAck {
                cause,
                data_notification_delay_ms: delay,
                dl_buffering_duration_s: dur,
                dl_buffering_suggested_packets: n,
                throttling,
            })
    }

    fn response() -> impl Strategy<Value = S11Response> {
        prop_oneof![
            (
                (
                    proptest::option::of(fteid()),
                    proptest::option::of(any::<u32>()),
                    proptest::option::of(any::<u128>())
                ),
                proptest::option::of((any::<u32>(), any::<u32>())),
                0u8..16,
                cause(),
                proptest::option::of(fteid()),
                (
                    proptest::option::of(fteid()),
                    proptest::option::of(any::<u32>()),
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 1..40)),
                ),
            )
                .prop_map(|((sgw, paa, v6), ambr, ebi, bc, s1u, (pgw, charging_id, pco))| {
                    let pdn_type = match (paa, v6) {
                        (Some(_), Some(_)) => Some(PdnType::Ipv4v6),
                        (None, Some(_)) => Some(PdnType::Ipv6),
                        (Some(_), None) => Some(PdnType::Ipv4),
                        (None, None) => None,
                    };
                    S11Response::CreateSession(CreateSessionResponse {
                        // Accepted, so the bearer context is always sent.
                        cause: GtpCause::REQUEST_ACCEPTED,
                        sgw_fteid: sgw,
                        paa: paa.map(Ipv4Addr::from),
                        apn_ambr: ambr.map(|(u, d)| Ambr { uplink: u as u64 * 1000, downlink: d as u64 * 1000 }),
                        bearer_ebi: Ebi(ebi),
                        bearer_cause: bc,
                        s1u_sgw_fteid: s1u,
                        pgw_s5s8_c_fteid: pgw,
                        charging_id,
                        pdn_type,
                        ipv6_prefix: v6.map(|a| (Ipv6Addr::from(a), 64)),
                        pco,
                    })
                }),
            cause().prop_map(S11Response::DeleteSession),
            cause().prop_map(S11Response::ReleaseAccessBearers),
            cause().prop_map(|c| S11Response::ModifyBearer(ModifyBearerResponse { cause: c, bearer_cause: None })),
            // Accepted: the bearers a rejection names are not the S-GW's to forward.
            proptest::collection::vec(bearer(), 0..4).prop_map(|bearers| S11Response::CreateIndirectForwarding(
                CreateIndirectForwardingResponse { cause: GtpCause::REQUEST_ACCEPTED, bearers }
            )),
            cause().prop_map(S11Response::DeleteIndirectForwarding),
        ]
    }

    proptest! {
        #[test]
        fn typed_request_round_trips_through_the_wire(req in request(), seq in 0u32..1 << 24) {
            let bytes = encode_request(&req, seq).to_bytes();
            let m = GtpMessage::parse(&bytes).map_err(|e| e.1).unwrap();
            prop_assert_eq!(m.seq, seq);
            prop_assert_eq!(decode_request(&m).unwrap(), req);
        }

        #[test]
        fn typed_response_round_trips_through_the_wire(resp in response(), teid in any::<u32>(), seq in 0u32..1 << 24) {
            let bytes = encode_response(&resp, teid, seq, None).to_bytes();
            let m = GtpMessage::parse(&bytes).map_err(|e| e.1).unwrap();
            prop_assert_eq!(m.teid, Some(teid));
            prop_assert_eq!(decode_response(&m, Ebi(5)).unwrap(), resp);
        }

        #[test]
        fn downlink_data_notification_round_trips(
            mme in any::<u32>(), ebi in proptest::option::of(0u8..16), arp in proptest::option::of(arp()),
            sgw in proptest::option::of(fteid()), seq in 0u32..1 << 24,
        ) {
            let req = S11IncomingRequest::DownlinkDataNotification(DownlinkDataNotification {
                mme_teid: Teid(mme), ebi: ebi.map(Ebi), arp,
            });
            let bytes = encode_incoming_request(&req, sgw, seq).to_bytes();
            let m = GtpMessage::parse(&bytes).map_err(|e| e.1).unwrap();
            prop_assert_eq!(m.seq, seq);
            prop_assert_eq!(decode_incoming_request(&m).unwrap(), (req, sgw.map_or(0, |f| f.teid.0)));
        }

        #[test]
        fn downlink_data_notification_ack_round_trips(a in ack(), teid in any::<u32>(), seq in 0u32..1 << 24) {
            let answer = S11IncomingAnswer::DownlinkDataNotificationAck(a);
            let m = GtpMessage::parse(&encode_incoming_answer(&answer, teid, seq).to_bytes()).map_err(|e| e.1).unwrap();
            prop_assert_eq!((m.teid, m.seq), (Some(teid), seq));
            prop_assert_eq!(decode_incoming_answer(&m).unwrap(), answer);
        }

        #[test]
        fn failure_indication_round_trips(teid in any::<u32>(), c in cause(), seq in 0u32..1 << 24) {
            let n = S11Notification::DownlinkDataNotificationFailure(DownlinkDataNotificationFailure {
                sgw_teid: Teid(teid), cause: c,
            });
            let m = GtpMessage::parse(&encode_notification(&n, seq).to_bytes()).map_err(|e| e.1).unwrap();
            prop_assert!(crate::message::msg_type::is_unanswered(m.body.msg_type()));
            prop_assert_eq!(decode_notification(&m).unwrap(), n);
        }
    }

    #[test]
    fn indirect_forwarding_ies_are_where_ts_29_274_puts_them() {
        use crate::wire::ie::IeIter;
        let f = Fteid { teid: Teid(0x0a0b0c0d), ipv4: Ipv4Addr::new(10, 0, 0, 7) };
        let req = S11Request::CreateIndirectForwarding(CreateIndirectForwardingRequest {
            sgw_teid: Teid(9),
            bearers: vec![ForwardingBearer { ebi: Ebi(5), fteid: f }],
        });
        let b = encode_request(&req, 1).to_bytes();
        assert_eq!(b[1], 166);
        let ies: Vec<_> = IeIter::new(&b[12..]).map(Result::unwrap).collect();
        let bc: Vec<_> = IeIter::new(ies[0].value).map(Result::unwrap).collect();
        // eNodeB F-TEID for DL data forwarding: instance 0, interface type 19.
        let ft = bc.iter().find(|e| e.ie_type == ie_type::FTEID).unwrap();
        assert_eq!((ft.instance, ft.value[0]), (0, 0x80 | 19));
        // A request whose bearer has no eNB F-TEID is refused with the IE named.
        let mut m = GtpMessage::parse(&b).unwrap();
        if let Message::CreateIndirectDataForwardingTunnelRequest(r) = &mut m.body {
            r.bearer_contexts[0].enb_dl_fteid = None;
        }
        let m = GtpMessage::parse(&m.to_bytes()).unwrap();
        assert_eq!(decode_request(&m), Err(MessageError::MissingIe { ie_type: ie_type::FTEID, instance: 0 }));

        let resp = S11Response::CreateIndirectForwarding(CreateIndirectForwardingResponse {
            cause: GtpCause::REQUEST_ACCEPTED,
            bearers: vec![ForwardingBearer { ebi: Ebi(5), fteid: f }],
        });
        let b = encode_response(&resp, 3, 1, None).to_bytes();
        let ies: Vec<_> = IeIter::new(&b[12..]).map(Result::unwrap).collect();
        let bc = ies.iter().find(|e| e.ie_type == ie_type::BEARER_CONTEXT).unwrap();
        let bc: Vec<_> = IeIter::new(bc.value).map(Result::unwrap).collect();
        // S-GW F-TEID for DL data forwarding: instance 1, interface type 23; a bearer Cause.
        let ft = bc.iter().find(|e| e.ie_type == ie_type::FTEID).unwrap();
        assert_eq!((ft.instance, ft.value[0]), (1, 0x80 | 23));
        assert!(bc.iter().any(|e| e.ie_type == ie_type::CAUSE && e.value[0] == 16));
        // A delete request has no IE; a rejection of one carries the cause.
        let b = encode_request(
            &S11Request::DeleteIndirectForwarding(DeleteIndirectForwardingRequest { sgw_teid: Teid(9) }),
            2,
        )
        .to_bytes();
        assert_eq!((b[1], b.len()), (168, 12));
        let r = crate::message::reject(168, 1, 2, GtpCause::CONTEXT_NOT_FOUND.0, None).unwrap();
        assert_eq!(
            decode_response(&GtpMessage::parse(&r.to_bytes()).unwrap(), Ebi(5)).unwrap(),
            S11Response::DeleteIndirectForwarding(GtpCause::CONTEXT_NOT_FOUND)
        );
    }

    #[test]
    fn ddn_ack_timers_on_the_wire() {
        let a = S11IncomingAnswer::DownlinkDataNotificationAck(DownlinkDataNotificationAck {
            cause: GtpCause::REQUEST_ACCEPTED,
            data_notification_delay_ms: Some(1000),
            dl_buffering_duration_s: Some(120),
            dl_buffering_suggested_packets: Some(300),
            throttling: None,
        });
        let m = encode_incoming_answer(&a, 1, 1);
        let Message::DownlinkDataNotificationAck(w) = &m.body else { panic!() };
        // 20 x 50 ms; 2 minutes as unit 001 (1 minute) value 2; 300 in two octets.
        assert_eq!(
            (w.delay, w.dl_buffering_duration, w.dl_buffering_suggested_packets),
            (Some(20), Some(0x22), Some(300))
        );
        assert_eq!(crate::message::epc_timer_seconds(0xe0), None);
        assert_eq!(crate::message::epc_timer_seconds(0xa3), Some(180), "an undefined unit reads as 1 minute");
    }

    #[test]
    fn ddn_ack_throttling_on_the_wire() {
        let t = DdnThrottling { delay_s: 90, factor_percent: 40 };
        let a = DownlinkDataNotificationAck {
            cause: GtpCause::REQUEST_ACCEPTED,
            data_notification_delay_ms: None,
            dl_buffering_duration_s: None,
            dl_buffering_suggested_packets: None,
            throttling: Some(t),
        };
        let bytes = encode_incoming_answer(&S11IncomingAnswer::DownlinkDataNotificationAck(a.clone()), 1, 1).to_bytes();
        // Type 154, length 2: 90 s as unit 001 (1 minute) value 2, rounded up; 40 percent.
        let ies: Vec<_> = crate::wire::ie::IeIter::new(&bytes[12..]).map(Result::unwrap).collect();
        let ie = ies.iter().find(|e| e.ie_type == ie_type::THROTTLING).unwrap();
        assert_eq!((ie.instance, ie.value), (0, &[0x22, 40][..]));
        let back = decode_incoming_answer(&GtpMessage::parse(&bytes).unwrap()).unwrap();
        let S11IncomingAnswer::DownlinkDataNotificationAck(back) = back;
        assert_eq!(back.throttling, Some(DdnThrottling { delay_s: 120, factor_percent: 40 }));
        // A deactivated delay ends throttling; a factor above 100 is 0.
        let mut m = GtpMessage::parse(&bytes).unwrap();
        let Message::DownlinkDataNotificationAck(w) = &mut m.body else { panic!() };
        w.throttling = Some(m::ThrottlingIe { delay_unit: 7, delay_value: 1, factor: 200 });
        let S11IncomingAnswer::DownlinkDataNotificationAck(back) = decode_incoming_answer(&m).unwrap();
        assert_eq!(back.throttling, Some(DdnThrottling { delay_s: 0, factor_percent: 0 }));
    }

    #[test]
    fn interop_ies_are_where_ts_29_274_puts_them() {
        use crate::wire::ie::IeIter;
        let plmn = Plmn::new("001", "01").unwrap();
        let req = S11Request::CreateSession(CreateSessionRequest {
            imsi: "001010000000001".parse().unwrap(),
            msisdn: None,
            serving_network: plmn,
            tai: Tai { plmn, tac: 1 },
            ecgi: Ecgi { plmn, eci: 1 },
            sender_fteid: Fteid { teid: Teid(1), ipv4: Ipv4Addr::LOCALHOST },
            apn: "internet".into(),
            pdn_type: PdnType::Ipv4v6,
            apn_ambr: Ambr::default(),
            bearer: BearerContextToCreate { ebi: Ebi(5), qci: 9, arp: Arp::default() },
            pgw_s5s8_c: Some(Ipv4Addr::new(10, 0, 0, 9)),
            static_ipv4: Some(Ipv4Addr::new(10, 45, 9, 9)),
            pco: Some(vec![0x80, 0x00, 0x0d, 0x00]),
            mei: None,
        });
        let b = encode_request(&req, 1).to_bytes();
        let ies: Vec<_> = IeIter::new(&b[12..]).map(Result::unwrap).collect();
        let find = |t: u8, i: u8| ies.iter().find(|e| e.ie_type == t && e.instance == i).unwrap().value;
        // F-TEID instance 1: V4, interface type 7, TEID 0.
        assert_eq!(find(ie_type::FTEID, 1), [0x87, 0, 0, 0, 0, 10, 0, 0, 9]);
        // PAA IPv4v6: type 3, prefix length, IPv6 (unspecified), static IPv4.
        let paa = find(ie_type::PAA, 0);
        assert_eq!((paa[0], paa[1], paa.len()), (3, 64, 22));
        assert_eq!(&paa[18..], [10, 45, 9, 9]);
        assert_eq!(find(ie_type::PCO, 0), [0x80, 0x00, 0x0d, 0x00]);
        assert_eq!(find(ie_type::INDICATION, 0)[0] & INDICATION_DAF, INDICATION_DAF);
        let m = GtpMessage::parse(&b).unwrap();
        assert_eq!(create_session_flags(&m), Some(CreateSessionFlags { dual_address_bearer: true, epco: false }));

        let prefix: Ipv6Addr = "2001:db8:0:5::1".parse().unwrap();
        let resp = CreateSessionResponse {
            cause: GtpCause::REQUEST_ACCEPTED,
            sgw_fteid: Some(Fteid { teid: Teid(7), ipv4: Ipv4Addr::LOCALHOST }),
            paa: None,
            apn_ambr: None,
            bearer_ebi: Ebi(5),
            bearer_cause: GtpCause::REQUEST_ACCEPTED,
            s1u_sgw_fteid: Some(Fteid { teid: Teid(8), ipv4: Ipv4Addr::LOCALHOST }),
            pgw_s5s8_c_fteid: Some(Fteid { teid: Teid(7), ipv4: Ipv4Addr::LOCALHOST }),
            charging_id: Some(0x01020304),
            pdn_type: Some(PdnType::Ipv6),
            ipv6_prefix: Some((prefix, 64)),
            pco: Some(vec![0x80, 0x00, 0x10, 0x02, 0x05, 0x78]),
        };
        let mut m = encode_response(&S11Response::CreateSession(resp.clone()), 1, 1, Some(3));
        let b = m.to_bytes();
        let ies: Vec<_> = IeIter::new(&b[12..]).map(Result::unwrap).collect();
        let find = |t: u8, i: u8| ies.iter().find(|e| e.ie_type == t && e.instance == i).unwrap().value;
        assert_eq!(find(ie_type::FTEID, 1)[0], 0x80 | interface_type::S5S8_PGW_GTPC);
        assert_eq!(find(ie_type::PAA, 0)[..2], [2, 64]);
        assert_eq!(find(ie_type::PAA, 0)[2..], prefix.octets());
        assert_eq!(find(ie_type::RECOVERY, 0), [3]);
        let bc: Vec<_> = IeIter::new(find(ie_type::BEARER_CONTEXT, 0)).map(Result::unwrap).collect();
        assert!(bc.iter().any(|e| e.ie_type == ie_type::CHARGING_ID && e.value == [1, 2, 3, 4]));
        assert_eq!(
            decode_response(&GtpMessage::parse(&b).unwrap(), Ebi(5)).unwrap(),
            S11Response::CreateSession(resp.clone())
        );
        // ePCO for a UE that sent ePCO: the same contents in IE 197.
        pco_as_epco(&mut m);
        let b = m.to_bytes();
        assert!(IeIter::new(&b[12..]).map(Result::unwrap).all(|e| e.ie_type != ie_type::PCO));
        assert_eq!(decode_response(&GtpMessage::parse(&b).unwrap(), Ebi(5)).unwrap(), S11Response::CreateSession(resp));
    }

    #[test]
    fn rejected_create_session_keeps_the_request_ebi() {
        let resp = S11Response::CreateSession(CreateSessionResponse {
            cause: GtpCause::MISSING_OR_UNKNOWN_APN,
            sgw_fteid: None,
            paa: None,
            apn_ambr: None,
            bearer_ebi: Ebi(6),
            bearer_cause: GtpCause::MISSING_OR_UNKNOWN_APN,
            s1u_sgw_fteid: None,
            pgw_s5s8_c_fteid: None,
            charging_id: None,
            pdn_type: None,
            ipv6_prefix: None,
            pco: None,
        });
        let m = GtpMessage::parse(&encode_response(&resp, 1, 1, None).to_bytes()).unwrap();
        assert_eq!(decode_response(&m, Ebi(6)).unwrap(), resp);
    }

    #[test]
    fn modify_bearer_response_carries_the_bearer() {
        let f = Fteid { teid: Teid(9), ipv4: Ipv4Addr::LOCALHOST };
        let m = modify_bearer_response(3, 4, GtpCause::REQUEST_ACCEPTED, Ebi(5), Some(f));
        let m = GtpMessage::parse(&m.to_bytes()).unwrap();
        assert_eq!(
            decode_response(&m, Ebi(5)).unwrap(),
            S11Response::ModifyBearer(ModifyBearerResponse {
                cause: GtpCause::REQUEST_ACCEPTED,
                bearer_cause: Some(GtpCause::REQUEST_ACCEPTED)
            })
        );
    }
}
