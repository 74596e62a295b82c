//! S6a requests: ULR (TS 29.272 7.2.3), AIR (7.2.5), PUR (7.2.13).

use super::{fixed, u32_of, NO_STATE_MAINTAINED, RAT_TYPE_EUTRAN};
use crate::avp::AvpRepr;
use crate::base::{s6a_vendor_specific_application_id, LocalIdentity};
use crate::dict::grammar::{self, Grammar};
use crate::dict::{app, avp, cmd, result, AvpDef, AvpType};
use crate::header::HeaderRepr;
use crate::message::{find, Message};
use mobicore_common::s6a::*;
use mobicore_common::{Imsi, Plmn};

/// What a request needs besides its typed content.
#[derive(Debug, Clone, Copy)]
pub struct RequestContext<'a> {
    /// Unique per request (RFC 6733 8.8): `<host>;<hi>;<lo>`.
    pub session_id: &'a str,
    pub local: &'a LocalIdentity,
    pub destination_realm: &'a str,
    pub destination_host: Option<&'a str>,
    pub hop_by_hop: u32,
    pub end_to_end: u32,
}

/// Encodes a typed S6a request.
pub fn encode_request(req: &S6aRequest, ctx: &RequestContext<'_>) -> Message {
    let command_code = match req {
        S6aRequest::AuthenticationInformation(_) => cmd::AUTHENTICATION_INFORMATION,
        S6aRequest::UpdateLocation(_) => cmd::UPDATE_LOCATION,
        S6aRequest::PurgeUe(_) => cmd::PURGE_UE,
    };
    let mut m = Message::new(HeaderRepr {
        request: true,
        proxiable: true,
        command_code,
        application_id: app::S6A,
        hop_by_hop: ctx.hop_by_hop,
        end_to_end: ctx.end_to_end,
        ..Default::default()
    });
    m.avps.reserve(12);
    m.push(avp::SESSION_ID.utf8(ctx.session_id));
    m.push(s6a_vendor_specific_application_id());
    m.push(avp::AUTH_SESSION_STATE.u32(NO_STATE_MAINTAINED));
    m.push(avp::ORIGIN_HOST.utf8(&ctx.local.origin_host));
    m.push(avp::ORIGIN_REALM.utf8(&ctx.local.origin_realm));
    if let Some(h) = ctx.destination_host {
        m.push(avp::DESTINATION_HOST.utf8(h));
    }
    m.push(avp::DESTINATION_REALM.utf8(ctx.destination_realm));
    match req {
        S6aRequest::AuthenticationInformation(r) => {
            m.push(avp::USER_NAME.utf8(r.imsi.as_str()));
            let mut info = vec![avp::NUMBER_OF_REQUESTED_VECTORS.u32(r.num_vectors)];
            info.push(avp::IMMEDIATE_RESPONSE_PREFERRED.u32(0));
            if let Some(rs) = &r.resync {
                let mut v = rs.rand.to_vec();
                v.extend_from_slice(&rs.auts);
                info.push(avp::RE_SYNCHRONIZATION_INFO.octets(&v));
            }
            m.push(avp::REQUESTED_EUTRAN_AUTHENTICATION_INFO.grouped(&info));
            m.push(avp::VISITED_PLMN_ID.octets(&r.visited_plmn.to_octets()));
        }
        S6aRequest::UpdateLocation(r) => {
            m.push(avp::USER_NAME.utf8(r.imsi.as_str()));
            if let Some(t) = &r.terminal_information {
                m.push(terminal_information_avp(t));
            }
            m.push(avp::RAT_TYPE.u32(RAT_TYPE_EUTRAN));
            m.push(avp::ULR_FLAGS.u32(r.flags));
            m.push(avp::VISITED_PLMN_ID.octets(&r.visited_plmn.to_octets()));
        }
        S6aRequest::PurgeUe(r) => {
            m.push(avp::USER_NAME.utf8(r.imsi.as_str()));
        }
    }
    m
}

/// Why a request gets a failure answer instead of a typed request: the
/// Result-Code and the Failed-AVP of RFC 6733 7.5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    pub result_code: u32,
    pub failed_avp: Option<AvpRepr>,
}

impl RequestError {
    /// DIAMETER_MISSING_AVP with an example of the missing AVP, its value
    /// of minimum length and zeros (RFC 6733 7.5).
    pub(super) fn missing(def: AvpDef, min_len: usize) -> Self {
        RequestError { result_code: result::DIAMETER_MISSING_AVP, failed_avp: Some(def.octets(&vec![0; min_len])) }
    }
    pub(super) fn invalid(a: &AvpRepr) -> Self {
        RequestError { result_code: result::DIAMETER_INVALID_AVP_VALUE, failed_avp: Some(a.clone()) }
    }
}

pub(super) fn required(m: &[AvpRepr], def: AvpDef, min_len: usize) -> Result<&AvpRepr, RequestError> {
    find(m, def).ok_or_else(|| RequestError::missing(def, min_len))
}

pub(super) fn imsi_of(m: &[AvpRepr]) -> Result<Imsi, RequestError> {
    let a = required(m, avp::USER_NAME, 0)?;
    a.as_str().ok().and_then(|s| s.parse().ok()).ok_or_else(|| RequestError::invalid(a))
}

fn plmn_of(m: &[AvpRepr]) -> Result<Plmn, RequestError> {
    let a = required(m, avp::VISITED_PLMN_ID, 3)?;
    if a.data.len() != 3 {
        return Err(RequestError::invalid(a));
    }
    Plmn::from_octets(&a.data).map_err(|_| RequestError::invalid(a))
}

/// How deep [`unsupported_avp`] looks into Grouped AVPs (an S6a message
/// nests five deep at most; deeper nesting is not followed, so that no
/// input can make the check recurse without bound).
pub const MAX_GROUPED_DEPTH: usize = 8;

/// The AVP that makes a message unsupported (RFC 6733 6.1.8, 7.5): one with
/// the M-bit set that is not part of the command, that is, unknown to the
/// dictionary, or known but neither named by `grammar` nor admitted by its
/// `*[ AVP ]`. Grouped AVPs the dictionary knows are looked into, with the
/// grammar of their own where we have one; an offending AVP inside one is
/// returned wrapped in its parents, each holding only it (RFC 6733 7.5:
/// "the Failed-AVP MAY contain the grouped AVP, which in turn contains the
/// single offending AVP"). An AVP without the M-bit is never refused, nor
/// is a Grouped AVP whose content does not parse (its own checks say what
/// is wrong with it where it matters).
pub fn unsupported_avp(avps: &[AvpRepr], grammar: Option<&Grammar>) -> Option<AvpRepr> {
    unsupported_at(avps, grammar, 0)
}

fn unsupported_at(avps: &[AvpRepr], grammar: Option<&Grammar>, depth: usize) -> Option<AvpRepr> {
    for a in avps {
        let Some(def) = avp::lookup(a.code, a.vendor_id) else {
            if a.mandatory {
                return Some(a.clone());
            }
            continue;
        };
        if a.mandatory && grammar.is_some_and(|g| !g.any_avp && !g.names(def)) {
            return Some(a.clone());
        }
        if def.ty != AvpType::Grouped || depth + 1 >= MAX_GROUPED_DEPTH {
            continue;
        }
        let Ok(children) = a.grouped() else { continue };
        if let Some(bad) = unsupported_at(&children, grammar::grouped(def), depth + 1) {
            return Some(AvpRepr { data: bad.to_vec(), ..a.clone() });
        }
    }
    None
}

/// Terminal-Information (TS 29.272 7.3.3): IMEI of 14 or 15 digits (7.3.4,
/// TS 23.003 6.2.1), Software-Version of 2 digits (7.3.5), 3GPP2-MEID as
/// sent (7.3.6). Any other value is DIAMETER_INVALID_AVP_VALUE.
fn terminal_information_of(m: &[AvpRepr]) -> Result<Option<TerminalInformation>, RequestError> {
    let Some(ti) = find(m, avp::TERMINAL_INFORMATION) else { return Ok(None) };
    let c = ti.grouped().map_err(|_| RequestError::invalid(ti))?;
    let digits = |def: AvpDef, lens: &[usize]| -> Result<Option<String>, RequestError> {
        let Some(a) = find(&c, def) else { return Ok(None) };
        match a.as_str() {
            Ok(s) if lens.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(s.to_string())),
            _ => Err(RequestError::invalid(&avp::TERMINAL_INFORMATION.grouped(std::slice::from_ref(a)))),
        }
    };
    Ok(Some(TerminalInformation {
        imei: digits(avp::IMEI, &[14, 15])?,
        software_version: digits(avp::SOFTWARE_VERSION, &[2])?,
        meid: find(&c, avp::TGPP2_MEID).map(|a| a.data.clone()),
    }))
}

/// Terminal-Information for a ULR (TS 29.272 7.3.3).
pub fn terminal_information_avp(t: &TerminalInformation) -> AvpRepr {
    let mut c = Vec::with_capacity(3);
    if let Some(imei) = &t.imei {
        c.push(avp::IMEI.utf8(imei));
    }
    if let Some(meid) = &t.meid {
        c.push(avp::TGPP2_MEID.octets(meid));
    }
    if let Some(sv) = &t.software_version {
        c.push(avp::SOFTWARE_VERSION.utf8(sv));
    }
    avp::TERMINAL_INFORMATION.grouped(&c)
}

/// Decodes an S6a request, checking it as RFC 6733 6.1 and TS 29.272 ask:
/// an AVP with the M-bit that is not part of the command
/// ([`unsupported_avp`]) is DIAMETER_AVP_UNSUPPORTED, a missing required
/// AVP DIAMETER_MISSING_AVP, a bad value DIAMETER_INVALID_AVP_VALUE, an
/// unknown command DIAMETER_COMMAND_UNSUPPORTED. Every optional AVP of the
/// command's grammar is taken (and ignored where we have no use for it).
pub fn decode_request(m: &Message) -> Result<S6aRequest, RequestError> {
    let grammar = grammar::command(m.header.command_code, true);
    if let Some(a) = unsupported_avp(&m.avps, grammar) {
        return Err(RequestError { result_code: result::DIAMETER_AVP_UNSUPPORTED, failed_avp: Some(a) });
    }
    let avps = &m.avps[..];
    required(avps, avp::SESSION_ID, 0)?;
    required(avps, avp::ORIGIN_HOST, 0)?;
    required(avps, avp::ORIGIN_REALM, 0)?;
    required(avps, avp::DESTINATION_REALM, 0)?;
    required(avps, avp::AUTH_SESSION_STATE, 4)?;
    match m.header.command_code {
        cmd::AUTHENTICATION_INFORMATION => {
            let imsi = imsi_of(avps)?;
            let visited_plmn = plmn_of(avps)?;
            let (mut num_vectors, mut resync) = (1, None);
            if let Some(info) = find(avps, avp::REQUESTED_EUTRAN_AUTHENTICATION_INFO) {
                let children = info.grouped().map_err(|_| RequestError::invalid(info))?;
                if let Ok(Some(n)) = u32_of(&children, avp::NUMBER_OF_REQUESTED_VECTORS) {
                    num_vectors = n;
                }
                if let Some(rs) = find(&children, avp::RE_SYNCHRONIZATION_INFO) {
                    // TS 29.272 7.3.15: RAND (16) || AUTS (14).
                    let v: [u8; 30] = fixed(rs).map_err(|_| RequestError::invalid(rs))?;
                    let mut rand = [0; 16];
                    let mut auts = [0; 14];
                    rand.copy_from_slice(&v[..16]);
                    auts.copy_from_slice(&v[16..]);
                    resync = Some(ResyncInfo { rand, auts });
                }
            }
            Ok(S6aRequest::AuthenticationInformation(AuthInfoRequest { imsi, visited_plmn, num_vectors, resync }))
        }
        cmd::UPDATE_LOCATION => {
            let imsi = imsi_of(avps)?;
            let visited_plmn = plmn_of(avps)?;
            required(avps, avp::RAT_TYPE, 4)?;
            let fl = required(avps, avp::ULR_FLAGS, 4)?;
            let flags = fl.as_u32().map_err(|_| RequestError::invalid(fl))?;
            let terminal_information = terminal_information_of(avps)?;
            Ok(S6aRequest::UpdateLocation(UpdateLocationRequest { imsi, visited_plmn, flags, terminal_information }))
        }
        cmd::PURGE_UE => Ok(S6aRequest::PurgeUe(PurgeUeRequest { imsi: imsi_of(avps)? })),
        _ => Err(RequestError { result_code: result::DIAMETER_COMMAND_UNSUPPORTED, failed_avp: None }),
    }
}
