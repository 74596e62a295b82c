//! Diameter S6a requests to the typed core and back (TS 29.272 5.2, 7.2).

use crate::config::HssConfig;
use crate::hss::Hss;
use mobicore_diameter::base::{error_answer, LocalIdentity};
use mobicore_diameter::dict::{avp, result};
use mobicore_diameter::s6a::{decode_request, encode_answer};
use mobicore_diameter::Message;

/// The answer to one S6a request: a decoding failure gets its Result-Code
/// and Failed-AVP (RFC 6733 7.5), a request for another host
/// DIAMETER_UNABLE_TO_DELIVER (RFC 6733 6.1.5), another realm (when strict)
/// DIAMETER_REALM_NOT_SERVED.
pub fn handle_request(hss: &mut Hss, cfg: &HssConfig, local: &LocalIdentity, m: &Message) -> Message {
    let sid = m.session_id();
    if let Some(h) = m.find(avp::DESTINATION_HOST).and_then(|a| a.as_str().ok()) {
        if !h.eq_ignore_ascii_case(&local.origin_host) {
            hss.counters().incr("diameter_unable_to_deliver");
            return error_answer(local, &m.header, sid, result::DIAMETER_UNABLE_TO_DELIVER, None);
        }
    }
    if cfg.strict_realm {
        if let Some(r) = m.find(avp::DESTINATION_REALM).and_then(|a| a.as_str().ok()) {
            if !r.eq_ignore_ascii_case(&local.origin_realm) {
                hss.counters().incr("diameter_realm_not_served");
                return error_answer(local, &m.header, sid, result::DIAMETER_REALM_NOT_SERVED, None);
            }
        }
    }
    match decode_request(m) {
        Ok(req) => encode_answer(m, &hss.handle(req), local),
        Err(e) => {
            hss.counters().incr("diameter_bad_request");
            error_answer(local, &m.header, sid, e.result_code, e.failed_avp)
        }
    }
}
