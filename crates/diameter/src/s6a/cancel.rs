//! Cancel-Location (TS 29.272 5.2.1.2): the request the HSS sends the MME
//! (CLR, 7.2.7) and its answer (CLA, 7.2.8), both directions.

use super::request::{imsi_of, required, unsupported_avp, RequestContext, RequestError};
use super::{u32_of, NO_STATE_MAINTAINED};
use crate::base::{copy_proxy_info, s6a_vendor_specific_application_id, LocalIdentity};
use crate::dict::{app, avp, cmd, grammar, result};
use crate::header::HeaderRepr;
use crate::message::Message;
use mobicore_common::s6a::{CancelLocationRequest, CancellationType, S6aError, S6aIncomingAnswer, S6aIncomingRequest};

/// Encodes a CLR (TS 29.272 7.2.7). Destination-Host is required: the
/// request goes to the one MME the HSS has registered.
pub fn encode_cancel_location(r: &CancelLocationRequest, ctx: &RequestContext<'_>) -> Message {
    let mut m = Message::new(HeaderRepr {
        request: true,
        proxiable: true,
        command_code: cmd::CANCEL_LOCATION,
        application_id: app::S6A,
        hop_by_hop: ctx.hop_by_hop,
        end_to_end: ctx.end_to_end,
        ..Default::default()
    });
    m.push(avp::SESSION_ID.utf8(ctx.session_id));
    m.push(s6a_vendor_specific_application_id());
    m.push(avp::AUTH_SESSION_STATE.u32(NO_STATE_MAINTAINED));
    m.push(avp::ORIGIN_HOST.utf8(&ctx.local.origin_host));
    m.push(avp::ORIGIN_REALM.utf8(&ctx.local.origin_realm));
    m.push(avp::DESTINATION_HOST.utf8(ctx.destination_host.unwrap_or_default()));
    m.push(avp::DESTINATION_REALM.utf8(ctx.destination_realm));
    m.push(avp::USER_NAME.utf8(r.imsi.as_str()));
    m.push(avp::CANCELLATION_TYPE.u32(r.cancellation_type.code()));
    if r.flags != 0 {
        m.push(avp::CLR_FLAGS.u32(r.flags));
    }
    m
}

/// Decodes a request the HSS sends the MME, with the checks of RFC 6733
/// 6.1 as [`super::decode_request`] does them: only CLR is served (any
/// other command is DIAMETER_COMMAND_UNSUPPORTED); an unknown
/// Cancellation-Type is DIAMETER_INVALID_AVP_VALUE.
pub fn decode_incoming_request(m: &Message) -> Result<S6aIncomingRequest, RequestError> {
    if m.header.command_code != cmd::CANCEL_LOCATION {
        return Err(RequestError { result_code: result::DIAMETER_COMMAND_UNSUPPORTED, failed_avp: None });
    }
    if let Some(a) = unsupported_avp(&m.avps, grammar::command(cmd::CANCEL_LOCATION, true)) {
        return Err(RequestError { result_code: result::DIAMETER_AVP_UNSUPPORTED, failed_avp: Some(a) });
    }
    let avps = &m.avps[..];
    required(avps, avp::SESSION_ID, 0)?;
    required(avps, avp::ORIGIN_HOST, 0)?;
    required(avps, avp::ORIGIN_REALM, 0)?;
    required(avps, avp::DESTINATION_HOST, 0)?;
    required(avps, avp::DESTINATION_REALM, 0)?;
    required(avps, avp::AUTH_SESSION_STATE, 4)?;
    let imsi = imsi_of(avps)?;
    let ct = required(avps, avp::CANCELLATION_TYPE, 4)?;
    let cancellation_type =
        ct.as_u32().ok().and_then(CancellationType::from_code).ok_or_else(|| RequestError::invalid(ct))?;
    let flags = u32_of(avps, avp::CLR_FLAGS).ok().flatten().unwrap_or(0);
    Ok(S6aIncomingRequest::CancelLocation(CancelLocationRequest { imsi, cancellation_type, flags }))
}

/// Encodes the MME's answer to `req` (CLA, TS 29.272 7.2.8).
pub fn encode_incoming_answer(req: &Message, ans: &S6aIncomingAnswer, local: &LocalIdentity) -> Message {
    let mut m = Message::new(req.header.answer());
    if let Some(s) = req.find(avp::SESSION_ID) {
        m.push(s.clone());
    }
    m.push(s6a_vendor_specific_application_id());
    let S6aIncomingAnswer::CancelLocation(r) = ans;
    m.push(super::answer::result_avp(r.err()));
    m.push(avp::AUTH_SESSION_STATE.u32(NO_STATE_MAINTAINED));
    m.push(avp::ORIGIN_HOST.utf8(&local.origin_host));
    m.push(avp::ORIGIN_REALM.utf8(&local.origin_realm));
    copy_proxy_info(&req.avps, &mut m);
    m
}

/// Decodes a CLA: `Ok(())` for DIAMETER_SUCCESS, the error otherwise;
/// `None` when it carries no result at all.
pub fn decode_cancel_location_answer(m: &Message) -> Option<S6aIncomingAnswer> {
    if m.header.command_code != cmd::CANCEL_LOCATION || m.header.request {
        return None;
    }
    let code = m.result_code()?;
    let r = if code == result::DIAMETER_SUCCESS { Ok(()) } else { Err(S6aError::from_code(code)) };
    Some(S6aIncomingAnswer::CancelLocation(r))
}
