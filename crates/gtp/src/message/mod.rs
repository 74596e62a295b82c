//! GTPv2-C message `Repr`s for S11 (TS 29.274 7.1, 7.2).
//!
//! [`GtpMessage::parse`] reads a datagram; [`GtpMessage::emit`] writes one.
//! A body that lacks a mandatory IE parses to [`MessageError::MissingIe`]
//! so the responder can answer with Cause 70 and the offending IE (7.7.3).

mod bearer;
mod fields;
mod mobility;
mod session;

pub use bearer::*;
pub use fields::Fields;
pub use mobility::*;
pub use session::*;

use crate::wire::ie::{ie_type, put_ie};
use crate::wire::{self, HeaderRepr, Packet};

/// Message type values (TS 29.274 Table 6.1-1).
pub mod msg_type {
    pub const ECHO_REQUEST: u8 = 1;
    pub const ECHO_RESPONSE: u8 = 2;
    pub const VERSION_NOT_SUPPORTED_INDICATION: u8 = 3;
    pub const CREATE_SESSION_REQUEST: u8 = 32;
    pub const CREATE_SESSION_RESPONSE: u8 = 33;
    pub const MODIFY_BEARER_REQUEST: u8 = 34;
    pub const MODIFY_BEARER_RESPONSE: u8 = 35;
    pub const DELETE_SESSION_REQUEST: u8 = 36;
    pub const DELETE_SESSION_RESPONSE: u8 = 37;
    /// Downlink Data Notification Failure Indication: no response exists.
    pub const DOWNLINK_DATA_NOTIFICATION_FAILURE_INDICATION: u8 = 70;
    pub const CREATE_INDIRECT_DATA_FORWARDING_TUNNEL_REQUEST: u8 = 166;
    pub const CREATE_INDIRECT_DATA_FORWARDING_TUNNEL_RESPONSE: u8 = 167;
    pub const DELETE_INDIRECT_DATA_FORWARDING_TUNNEL_REQUEST: u8 = 168;
    pub const DELETE_INDIRECT_DATA_FORWARDING_TUNNEL_RESPONSE: u8 = 169;
    pub const RELEASE_ACCESS_BEARERS_REQUEST: u8 = 170;
    pub const RELEASE_ACCESS_BEARERS_RESPONSE: u8 = 171;
    pub const DOWNLINK_DATA_NOTIFICATION: u8 = 176;
    pub const DOWNLINK_DATA_NOTIFICATION_ACKNOWLEDGE: u8 = 177;

    /// True for the request types we know (the responder side).
    pub fn is_request(t: u8) -> bool {
        matches!(
            t,
            ECHO_REQUEST
                | CREATE_SESSION_REQUEST
                | MODIFY_BEARER_REQUEST
                | DELETE_SESSION_REQUEST
                | RELEASE_ACCESS_BEARERS_REQUEST
                | CREATE_INDIRECT_DATA_FORWARDING_TUNNEL_REQUEST
                | DELETE_INDIRECT_DATA_FORWARDING_TUNNEL_REQUEST
                | DOWNLINK_DATA_NOTIFICATION
        )
    }
    /// True for messages that are neither a request nor a response: no
    /// response exists (TS 29.274 7.2.11.3).
    pub fn is_unanswered(t: u8) -> bool {
        t == DOWNLINK_DATA_NOTIFICATION_FAILURE_INDICATION
    }
    /// The response type answering request type `t`.
    pub fn response_to(t: u8) -> Option<u8> {
        is_request(t).then_some(t + 1)
    }
}

/// What is wrong with a received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Header or TLV structure unreadable: the message is dropped and counted.
    #[error("malformed: {0}")]
    Malformed(wire::Error),
    /// A message type we do not handle on S11: dropped and counted.
    #[error("unexpected message type {0}")]
    UnknownMessage(u8),
    /// An IE whose length runs past the message or its grouped IE
    /// (TS 29.274 7.7.7): a request is rejected with "Invalid length".
    #[error("IE {ie_type} instance {instance} runs past the message")]
    InvalidLength { ie_type: u8, instance: u8 },
    #[error("mandatory IE {ie_type} instance {instance} missing")]
    MissingIe { ie_type: u8, instance: u8 },
    #[error("mandatory IE {ie_type} instance {instance} incorrect")]
    IncorrectIe { ie_type: u8, instance: u8 },
}

impl MessageError {
    /// The Cause a request with this error is rejected with, if answered (7.7).
    pub fn cause(&self) -> Option<mobicore_common::s11::GtpCause> {
        use mobicore_common::s11::GtpCause;
        match self {
            MessageError::MissingIe { .. } => Some(GtpCause::MANDATORY_IE_MISSING),
            MessageError::IncorrectIe { .. } => Some(GtpCause::MANDATORY_IE_INCORRECT),
            MessageError::InvalidLength { .. } => Some(GtpCause::INVALID_LENGTH),
            _ => None,
        }
    }
    /// The offending IE to put in the Cause IE.
    pub fn offending_ie(&self) -> Option<(u8, u8)> {
        match *self {
            MessageError::MissingIe { ie_type, instance }
            | MessageError::IncorrectIe { ie_type, instance }
            | MessageError::InvalidLength { ie_type, instance } => Some((ie_type, instance)),
            _ => None,
        }
    }
}

/// The body of an S11 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    EchoRequest(Echo),
    EchoResponse(Echo),
    /// Version Not Supported Indication (TS 29.274 7.9.1): a header only.
    VersionNotSupported,
    CreateSessionRequest(CreateSessionRequest),
    CreateSessionResponse(CreateSessionResponse),
    ModifyBearerRequest(ModifyBearerRequest),
    ModifyBearerResponse(ModifyBearerResponse),
    DeleteSessionRequest(DeleteSessionRequest),
    DeleteSessionResponse(CauseOnlyResponse),
    ReleaseAccessBearersRequest(ReleaseAccessBearersRequest),
    ReleaseAccessBearersResponse(CauseOnlyResponse),
    CreateIndirectDataForwardingTunnelRequest(CreateIndirectDataForwardingTunnelRequest),
    CreateIndirectDataForwardingTunnelResponse(CreateIndirectDataForwardingTunnelResponse),
    /// Delete Indirect Data Forwarding Tunnel Request (TS 29.274 7.2.27):
    /// no IE but the header TEID.
    DeleteIndirectDataForwardingTunnelRequest,
    DeleteIndirectDataForwardingTunnelResponse(CauseOnlyResponse),
    DownlinkDataNotification(DownlinkDataNotification),
    DownlinkDataNotificationAck(DownlinkDataNotificationAck),
    DownlinkDataNotificationFailureIndication(DownlinkDataNotificationFailureIndication),
}

impl Message {
    pub fn msg_type(&self) -> u8 {
        use msg_type::*;
        match self {
            Message::EchoRequest(_) => ECHO_REQUEST,
            Message::EchoResponse(_) => ECHO_RESPONSE,
            Message::VersionNotSupported => VERSION_NOT_SUPPORTED_INDICATION,
            Message::CreateSessionRequest(_) => CREATE_SESSION_REQUEST,
            Message::CreateSessionResponse(_) => CREATE_SESSION_RESPONSE,
            Message::ModifyBearerRequest(_) => MODIFY_BEARER_REQUEST,
            Message::ModifyBearerResponse(_) => MODIFY_BEARER_RESPONSE,
            Message::DeleteSessionRequest(_) => DELETE_SESSION_REQUEST,
            Message::DeleteSessionResponse(_) => DELETE_SESSION_RESPONSE,
            Message::ReleaseAccessBearersRequest(_) => RELEASE_ACCESS_BEARERS_REQUEST,
            Message::ReleaseAccessBearersResponse(_) => RELEASE_ACCESS_BEARERS_RESPONSE,
            Message::CreateIndirectDataForwardingTunnelRequest(_) => CREATE_INDIRECT_DATA_FORWARDING_TUNNEL_REQUEST,
            Message::CreateIndirectDataForwardingTunnelResponse(_) => CREATE_INDIRECT_DATA_FORWARDING_TUNNEL_RESPONSE,
            Message::DeleteIndirectDataForwardingTunnelRequest => DELETE_INDIRECT_DATA_FORWARDING_TUNNEL_REQUEST,
            Message::DeleteIndirectDataForwardingTunnelResponse(_) => DELETE_INDIRECT_DATA_FORWARDING_TUNNEL_RESPONSE,
            Message::DownlinkDataNotification(_) => DOWNLINK_DATA_NOTIFICATION,
            Message::DownlinkDataNotificationAck(_) => DOWNLINK_DATA_NOTIFICATION_ACKNOWLEDGE,
            Message::DownlinkDataNotificationFailureIndication(_) => DOWNLINK_DATA_NOTIFICATION_FAILURE_INDICATION,
        }
    }

    /// Decodes the IEs of a body of type `t`.
    pub fn parse(t: u8, body: &[u8]) -> Result<Self, MessageError> {
        use msg_type::*;
        let f = Fields::new(body)?;
        Ok(match t {
            ECHO_REQUEST => Message::EchoRequest(Echo::parse(&f)?),
            ECHO_RESPONSE => Message::EchoResponse(Echo::parse(&f)?),
            VERSION_NOT_SUPPORTED_INDICATION => Message::VersionNotSupported,
            CREATE_SESSION_REQUEST => Message::CreateSessionRequest(CreateSessionRequest::parse(&f)?),
            CREATE_SESSION_RESPONSE => Message::CreateSessionResponse(CreateSessionResponse::parse(&f)?),
            MODIFY_BEARER_REQUEST => Message::ModifyBearerRequest(ModifyBearerRequest::parse(&f)?),
            MODIFY_BEARER_RESPONSE => Message::ModifyBearerResponse(ModifyBearerResponse::parse(&f)?),
            DELETE_SESSION_REQUEST => Message::DeleteSessionRequest(DeleteSessionRequest::parse(&f)?),
            DELETE_SESSION_RESPONSE => Message::DeleteSessionResponse(CauseOnlyResponse::parse(&f)?),
            RELEASE_ACCESS_BEARERS_REQUEST => {
                Message::ReleaseAccessBearersRequest(ReleaseAccessBearersRequest::parse(&f)?)
            }
            RELEASE_ACCESS_BEARERS_RESPONSE => Message::ReleaseAccessBearersResponse(CauseOnlyResponse::parse(&f)?),
            CREATE_INDIRECT_DATA_FORWARDING_TUNNEL_REQUEST => Message::CreateIndirectDataForwardingTunnelRequest(
                CreateIndirectDataForwardingTunnelRequest::parse(&f)?,
            ),
            CREATE_INDIRECT_DATA_FORWARDING_TUNNEL_RESPONSE => Message::CreateIndirectDataForwardingTunnelResponse(
                CreateIndirectDataForwardingTunnelResponse::parse(&f)?,
            ),
            DELETE_INDIRECT_DATA_FORWARDING_TUNNEL_REQUEST => Message::DeleteIndirectDataForwardingTunnelRequest,
            DELETE_INDIRECT_DATA_FORWARDING_TUNNEL_RESPONSE => {
                Message::DeleteIndirectDataForwardingTunnelResponse(CauseOnlyResponse::parse(&f)?)
            }
            DOWNLINK_DATA_NOTIFICATION => Message::DownlinkDataNotification(DownlinkDataNotification::parse(&f)?),
            DOWNLINK_DATA_NOTIFICATION_ACKNOWLEDGE => {
                Message::DownlinkDataNotificationAck(DownlinkDataNotificationAck::parse(&f)?)
            }
            DOWNLINK_DATA_NOTIFICATION_FAILURE_INDICATION => Message::DownlinkDataNotificationFailureIndication(
                DownlinkDataNotificationFailureIndication::parse(&f)?,
            ),
            other => return Err(MessageError::UnknownMessage(other)),
        })
    }

    /// Appends the IEs of this body.
    pub fn emit_ies(&self, buf: &mut Vec<u8>) {
        match self {
            Message::EchoRequest(m) | Message::EchoResponse(m) => m.emit(buf),
            Message::VersionNotSupported => {}
            Message::CreateSessionRequest(m) => m.emit(buf),
            Message::CreateSessionResponse(m) => m.emit(buf),
            Message::ModifyBearerRequest(m) => m.emit(buf),
            Message::ModifyBearerResponse(m) => m.emit(buf),
            Message::DeleteSessionRequest(m) => m.emit(buf),
            Message::ReleaseAccessBearersRequest(m) => m.emit(buf),
            Message::DeleteSessionResponse(m)
            | Message::ReleaseAccessBearersResponse(m)
            | Message::DeleteIndirectDataForwardingTunnelResponse(m) => m.emit(buf),
            Message::CreateIndirectDataForwardingTunnelRequest(m) => m.emit(buf),
            Message::CreateIndirectDataForwardingTunnelResponse(m) => m.emit(buf),
            Message::DeleteIndirectDataForwardingTunnelRequest => {}
            Message::DownlinkDataNotification(m) => m.emit(buf),
            Message::DownlinkDataNotificationAck(m) => m.emit(buf),
            Message::DownlinkDataNotificationFailureIndication(m) => m.emit(buf),
        }
    }
}

/// A whole GTPv2-C message: TEID (absent for Echo), sequence number, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GtpMessage {
    pub teid: Option<u32>,
    pub seq: u32,
    pub body: Message,
}

impl GtpMessage {
    /// Reads the header, then the body. The header is returned alongside
    /// any body error so that the responder can answer it.
    pub fn parse(buf: &[u8]) -> Result<GtpMessage, (Option<HeaderRepr>, MessageError)> {
        let p = Packet::new_checked(buf).map_err(|e| (None, MessageError::Malformed(e)))?;
        let h = HeaderRepr::parse(&p).map_err(|e| (None, MessageError::Malformed(e)))?;
        let body = Message::parse(h.msg_type, p.payload()).map_err(|e| (Some(h), e))?;
        Ok(GtpMessage { teid: h.teid, seq: h.seq, body })
    }

    pub fn header(&self) -> HeaderRepr {
        HeaderRepr { msg_type: self.body.msg_type(), teid: self.teid, seq: self.seq }
    }

    /// Appends the encoded message to `buf`.
    pub fn emit(&self, buf: &mut Vec<u8>) {
        let h = self.header();
        let start = buf.len();
        buf.resize(start + h.header_len(), 0);
        self.body.emit_ies(buf);
        let payload_len = buf.len() - start - h.header_len();
        h.emit(&mut Packet::new_unchecked(&mut buf[start..]), payload_len);
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(256);
        self.emit(&mut b);
        b
    }

    pub fn buffer_len(&self) -> usize {
        self.to_bytes().len()
    }
}

/// The Version Not Supported Indication owed to `buf`, a message of
/// another GTP version (TS 29.274 7.7.2, 7.9.1): a GTPv2-C header without
/// TEID carrying the sequence number of the message (the 16-bit one of a
/// GTPv1 header, TS 29.060 6). `None` for GTPv2-C, for anything shorter
/// than a GTP header (TS 29.274 7.7.3: discarded) and for a Version Not
/// Supported Indication itself (never answered, or two peers would loop).
pub fn version_not_supported(buf: &[u8]) -> Option<GtpMessage> {
    if buf.len() < 8 {
        return None;
    }
    let version = buf[0] >> 5;
    if version == wire::header::VERSION || buf[1] == msg_type::VERSION_NOT_SUPPORTED_INDICATION {
        return None;
    }
    let seq = match version {
        // GTPv1-C: the sequence number follows the TEID when one of the
        // E, S, PN flags is set.
        1 if buf[0] & 0x07 != 0 && buf.len() >= 10 => u32::from(u16::from_be_bytes([buf[8], buf[9]])),
        1 => 0,
        // A later version: read as a GTPv2-C header is laid out.
        _ => {
            let o = if buf[0] & 0x08 != 0 { 8 } else { 4 };
            match buf.get(o..o + 3) {
                Some(b) => u32::from_be_bytes([0, b[0], b[1], b[2]]),
                None => 0,
            }
        }
    };
    Some(GtpMessage { teid: None, seq, body: Message::VersionNotSupported })
}

/// Echo Request / Response (TS 29.274 7.1.1, 7.1.2): Recovery is mandatory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    pub recovery: u8,
}

impl Echo {
    fn parse(f: &Fields) -> Result<Self, MessageError> {
        Ok(Echo { recovery: f.mandatory(ie_type::RECOVERY, 0, crate::wire::ie::parse_u8)? })
    }
    fn emit(&self, buf: &mut Vec<u8>) {
        put_ie(buf, ie_type::RECOVERY, 0, |b| b.push(self.recovery));
    }
}

/// Builds the rejection of a request whose body could not be accepted:
/// the response type with Cause and, for 7.7.3, the offending IE.
pub fn reject(request_type: u8, teid: u32, seq: u32, cause: u8, offending: Option<(u8, u8)>) -> Option<GtpMessage> {
    use crate::wire::ie::CauseIe;
    let c = CauseIe { value: cause, flags: 0, offending };
    let body = match request_type {
        msg_type::CREATE_SESSION_REQUEST => Message::CreateSessionResponse(CreateSessionResponse::rejected(c)),
        msg_type::MODIFY_BEARER_REQUEST => Message::ModifyBearerResponse(ModifyBearerResponse::rejected(c)),
        msg_type::DELETE_SESSION_REQUEST => {
            Message::DeleteSessionResponse(CauseOnlyResponse { cause: c, recovery: None })
        }
        msg_type::RELEASE_ACCESS_BEARERS_REQUEST => {
            Message::ReleaseAccessBearersResponse(CauseOnlyResponse { cause: c, recovery: None })
        }
        msg_type::CREATE_INDIRECT_DATA_FORWARDING_TUNNEL_REQUEST => {
            Message::CreateIndirectDataForwardingTunnelResponse(CreateIndirectDataForwardingTunnelResponse::rejected(c))
        }
        msg_type::DELETE_INDIRECT_DATA_FORWARDING_TUNNEL_REQUEST => {
            Message::DeleteIndirectDataForwardingTunnelResponse(CauseOnlyResponse { cause: c, recovery: None })
        }
        msg_type::DOWNLINK_DATA_NOTIFICATION => {
            Message::DownlinkDataNotificationAck(DownlinkDataNotificationAck::rejected(c))
        }
        _ => return None,
    };
    Some(GtpMessage { teid: Some(teid), seq, body })
}

#[cfg(test)]
mod tests;
