//! Diameter S6a requests to the typed core and back (TS 29.272 5.2, 7.2).

use crate::config::HssConfig;
use crate::hss::Hss;
use mobicore_diameter::base::{error_answer_for, LocalIdentity};
use mobicore_diameter::dict::{avp, result};
use mobicore_diameter::s6a::{decode_request, encode_answer};
use mobicore_diameter::Message;

/// The answer to one S6a request: a decoding failure gets its Result-Code
/// and Failed-AVP (RFC 6733 7.5), a request for another host
/// DIAMETER_UNABLE_TO_DELIVER (RFC 6733 6.1.5), another realm (when strict)
/// DIAMETER_REALM_NOT_SERVED. Every answer carries the request's
/// Proxy-Info back (RFC 6733 6.2).
///
/// Route-Record (RFC 6733 6.7.1) is what relays on the way added: the
/// server neither needs nor copies it, and it never stands in for the
/// peer's identity (requests still carry the Origin-Host of the CER, see
/// `mobicore_diameter::peer`). A request whose Route-Record already names
/// us has been round a loop: DIAMETER_LOOP_DETECTED (RFC 6733 6.1.3, 7.1.3).
pub fn handle_request(hss: &mut Hss, cfg: &HssConfig, local: &LocalIdentity, m: &Message) -> Message {
    let looped =
        m.find_all(avp::ROUTE_RECORD).any(|a| a.as_str().is_ok_and(|h| h.eq_ignore_ascii_case(&local.origin_host)));
    if looped {
        hss.counters().incr("diameter_loop_detected");
        return error_answer_for(local, m, result::DIAMETER_LOOP_DETECTED, None);
    }
    if let Some(h) = m.find(avp::DESTINATION_HOST).and_then(|a| a.as_str().ok()) {
        if !h.eq_ignore_ascii_case(&local.origin_host) {
            hss.counters().incr("diameter_unable_to_deliver");
            return error_answer_for(local, m, result::DIAMETER_UNABLE_TO_DELIVER, None);
        }
    }
    if cfg.strict_realm {
        if let Some(r) = m.find(avp::DESTINATION_REALM).and_then(|a| a.as_str().ok()) {
            if !r.eq_ignore_ascii_case(&local.origin_realm) {
                hss.counters().incr("diameter_realm_not_served");
                return error_answer_for(local, m, result::DIAMETER_REALM_NOT_SERVED, None);
            }
        }
    }
    match decode_request(m) {
        Ok(req) => encode_answer(m, &hss.handle(req), local),
        Err(e) => {
            hss.counters().incr("diameter_bad_request");
            if e.result_code == result::DIAMETER_AVP_UNSUPPORTED {
                hss.counters().incr("diameter_avp_unsupported");
            }
            error_answer_for(local, m, e.result_code, e.failed_avp)
        }
    }
}
