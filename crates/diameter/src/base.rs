//! Building the base protocol messages (RFC 6733 5.3, 5.4, 5.5) and the
//! answers to bad requests (RFC 6733 7).

use crate::avp::AvpRepr;
use crate::dict::{app, avp, cmd, result, VENDOR_3GPP};
use crate::header::HeaderRepr;
use crate::message::Message;
use std::net::IpAddr;

/// Who we are on the Diameter network (RFC 6733 5.3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalIdentity {
    pub origin_host: String,
    pub origin_realm: String,
    pub host_ip: IpAddr,
    /// Our IANA vendor id (0: none).
    pub vendor_id: u32,
    pub product_name: String,
    /// Origin-State-Id (RFC 6733 8.16): increases on each restart.
    pub origin_state_id: u32,
}

impl LocalIdentity {
    pub fn new(origin_host: &str, origin_realm: &str) -> Self {
        LocalIdentity {
            origin_host: origin_host.to_string(),
            origin_realm: origin_realm.to_string(),
            host_ip: IpAddr::from([127, 0, 0, 1]),
            vendor_id: 0,
            product_name: "mobicore".to_string(),
            origin_state_id: 1,
        }
    }
    fn origin(&self) -> [AvpRepr; 2] {
        [avp::ORIGIN_HOST.utf8(&self.origin_host), avp::ORIGIN_REALM.utf8(&self.origin_realm)]
    }
}

/// Vendor-Specific-Application-Id for S6a (TS 29.272 7.1.8).
pub fn s6a_vendor_specific_application_id() -> AvpRepr {
    avp::VENDOR_SPECIFIC_APPLICATION_ID
        .grouped(&[avp::VENDOR_ID.u32(VENDOR_3GPP), avp::AUTH_APPLICATION_ID.u32(app::S6A)])
}

fn request_header(command_code: u32, hop_by_hop: u32, end_to_end: u32) -> HeaderRepr {
    HeaderRepr {
        request: true,
        command_code,
        application_id: app::COMMON,
        hop_by_hop,
        end_to_end,
        ..Default::default()
    }
}

/// The CER/CEA body: identity, address, vendor, product, applications.
fn capabilities(id: &LocalIdentity, m: &mut Message) {
    for a in id.origin() {
        m.push(a);
    }
    m.push(avp::HOST_IP_ADDRESS.address(id.host_ip));
    m.push(avp::VENDOR_ID.u32(id.vendor_id));
    m.push(avp::PRODUCT_NAME.utf8(&id.product_name));
    m.push(avp::ORIGIN_STATE_ID.u32(id.origin_state_id));
    m.push(avp::SUPPORTED_VENDOR_ID.u32(VENDOR_3GPP));
    m.push(avp::AUTH_APPLICATION_ID.u32(app::S6A));
    m.push(s6a_vendor_specific_application_id());
}

/// Capabilities-Exchange-Request (RFC 6733 5.3.1).
pub fn cer(id: &LocalIdentity, hop_by_hop: u32, end_to_end: u32) -> Message {
    let mut m = Message::new(request_header(cmd::CAPABILITIES_EXCHANGE, hop_by_hop, end_to_end));
    capabilities(id, &mut m);
    m
}

/// Capabilities-Exchange-Answer (RFC 6733 5.3.2).
pub fn cea(id: &LocalIdentity, req: &HeaderRepr, result_code: u32) -> Message {
    let mut m = Message::new(req.answer());
    m.push(avp::RESULT_CODE.u32(result_code));
    capabilities(id, &mut m);
    m
}

/// Device-Watchdog-Request (RFC 6733 5.5.1).
pub fn dwr(id: &LocalIdentity, hop_by_hop: u32, end_to_end: u32) -> Message {
    let mut m = Message::new(request_header(cmd::DEVICE_WATCHDOG, hop_by_hop, end_to_end));
    m.avps.extend(id.origin());
    m.push(avp::ORIGIN_STATE_ID.u32(id.origin_state_id));
    m
}

/// Device-Watchdog-Answer (RFC 6733 5.5.2).
pub fn dwa(id: &LocalIdentity, req: &HeaderRepr) -> Message {
    let mut m = Message::new(req.answer());
    m.push(avp::RESULT_CODE.u32(result::DIAMETER_SUCCESS));
    m.avps.extend(id.origin());
    m.push(avp::ORIGIN_STATE_ID.u32(id.origin_state_id));
    m
}

/// Disconnect-Cause values (RFC 6733 5.4.3).
pub mod disconnect_cause {
    pub const REBOOTING: u32 = 0;
    pub const BUSY: u32 = 1;
    pub const DO_NOT_WANT_TO_TALK_TO_YOU: u32 = 2;
}

/// Disconnect-Peer-Request (RFC 6733 5.4.1).
pub fn dpr(id: &LocalIdentity, hop_by_hop: u32, end_to_end: u32, cause: u32) -> Message {
    let mut m = Message::new(request_header(cmd::DISCONNECT_PEER, hop_by_hop, end_to_end));
    m.avps.extend(id.origin());
    m.push(avp::DISCONNECT_CAUSE.u32(cause));
    m
}

/// Disconnect-Peer-Answer (RFC 6733 5.4.2).
pub fn dpa(id: &LocalIdentity, req: &HeaderRepr) -> Message {
    let mut m = Message::new(req.answer());
    m.push(avp::RESULT_CODE.u32(result::DIAMETER_SUCCESS));
    m.avps.extend(id.origin());
    m
}

/// The answer to a request that failed (RFC 6733 7): protocol errors (3xxx)
/// in the answer-message format with the E-bit (7.2); other failures in the
/// command's own answer, with Vendor-Specific-Application-Id and
/// Auth-Session-State for S6a commands (TS 29.272 7.2). Failed-AVP carries
/// the offending AVP where RFC 6733 7.5 asks for it.
pub fn error_answer(
    id: &LocalIdentity,
    req: &HeaderRepr,
    session_id: Option<&str>,
    result_code: u32,
    failed_avp: Option<AvpRepr>,
) -> Message {
    let mut h = req.answer();
    let protocol = result::is_protocol_error(result_code);
    h.error = protocol;
    let mut m = Message::new(h);
    if let Some(s) = session_id {
        m.push(avp::SESSION_ID.utf8(s));
    }
    if !protocol && req.application_id == app::S6A {
        m.push(s6a_vendor_specific_application_id());
        m.push(avp::AUTH_SESSION_STATE.u32(1));
    }
    m.avps.extend(id.origin());
    m.push(avp::RESULT_CODE.u32(result_code));
    if let Some(f) = failed_avp {
        m.push(avp::FAILED_AVP.grouped(&[f]));
    }
    m
}

/// Appends the Proxy-Info AVPs of a request to its answer, unchanged and in
/// the order they came (RFC 6733 6.2, 6.7.2): the proxies on the way back
/// find the state they left.
pub fn copy_proxy_info(request_avps: &[AvpRepr], answer: &mut Message) {
    answer.avps.extend(request_avps.iter().filter(|a| avp::PROXY_INFO.matches(a)).cloned());
}

/// [`error_answer`] to a parsed request: its Session-Id, and its
/// Proxy-Info copied back (RFC 6733 6.2).
pub fn error_answer_for(id: &LocalIdentity, req: &Message, result_code: u32, failed_avp: Option<AvpRepr>) -> Message {
    let mut m = error_answer(id, &req.header, req.session_id(), result_code, failed_avp);
    copy_proxy_info(&req.avps, &mut m);
    m
}
