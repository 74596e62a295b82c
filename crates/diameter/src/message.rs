//! A whole Diameter message: header and top-level AVPs.

use crate::avp::{AvpIter, AvpRepr};
use crate::dict::AvpDef;
use crate::error::WireError;
use crate::header::{HeaderRepr, Packet, HEADER_LEN};

/// A Diameter message as plain values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub header: HeaderRepr,
    pub avps: Vec<AvpRepr>,
}

/// Why a message could not be parsed, with what was read before the
/// failure so that the answer RFC 6733 7 asks for can still be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub error: WireError,
    /// The header, when the 20 octets were there (even with a bad version
    /// or length, the identifiers are needed for the answer).
    pub header: Option<HeaderRepr>,
    /// The AVPs read before the bad one.
    pub avps: Vec<AvpRepr>,
    /// The offending AVP as far as it could be read (for Failed-AVP).
    pub failed_avp: Option<AvpRepr>,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}
impl std::error::Error for ParseError {}

fn raw_header(buf: &[u8]) -> Option<HeaderRepr> {
    if buf.len() < HEADER_LEN {
        return None;
    }
    let p = Packet::new_unchecked(buf);
    let f = p.flags();
    use crate::header::flags::*;
    Some(HeaderRepr {
        request: f & REQUEST != 0,
        proxiable: f & PROXIABLE != 0,
        error: f & ERROR != 0,
        retransmit: f & RETRANSMIT != 0,
        command_code: p.command_code(),
        application_id: p.application_id(),
        hop_by_hop: p.hop_by_hop(),
        end_to_end: p.end_to_end(),
    })
}

/// The offending AVP for Failed-AVP (RFC 6733 7.5): its code, flags and
/// vendor, with the data that was there, re-encoded so that the answer
/// itself is well formed.
fn failed_avp_at(buf: &[u8]) -> Option<AvpRepr> {
    if buf.len() < 8 {
        return None;
    }
    let code = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let f = buf[4];
    let vendor = f & crate::avp::flags::VENDOR != 0;
    let vendor_id = if vendor { buf.get(8..12).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])) } else { None };
    let hl = if vendor_id.is_some() { 12 } else { 8 };
    let declared = ((buf[5] as usize) << 16) | ((buf[6] as usize) << 8) | buf[7] as usize;
    let end = declared.clamp(hl, buf.len().max(hl)).min(buf.len());
    Some(AvpRepr {
        code,
        vendor_id,
        mandatory: f & crate::avp::flags::MANDATORY != 0,
        protected: false,
        data: buf.get(hl..end).unwrap_or_default().to_vec(),
    })
}

impl Message {
    pub fn new(header: HeaderRepr) -> Self {
        Message { header, avps: Vec::new() }
    }

    /// Parses one whole message (exactly the octets of its Message Length,
    /// or more: trailing octets are ignored).
    pub fn parse(buf: &[u8]) -> Result<Message, ParseError> {
        let fail = |error, header, avps, failed_avp| ParseError { error, header, avps, failed_avp };
        let p = match Packet::new_checked(buf) {
            Ok(p) => p,
            Err(e) => return Err(fail(e, raw_header(buf), Vec::new(), None)),
        };
        let header = match HeaderRepr::parse(&p) {
            Ok(h) => h,
            Err(e) => return Err(fail(e, raw_header(buf), Vec::new(), None)),
        };
        let payload = p.payload();
        let mut avps = Vec::with_capacity(16);
        for a in AvpIter::new(payload) {
            match a {
                Ok(a) => avps.push(AvpRepr::parse(&a)),
                Err(e) => {
                    let off = match e {
                        WireError::AvpLength { offset, .. } => offset,
                        _ => payload.len(),
                    };
                    let failed = failed_avp_at(&payload[off.min(payload.len())..]);
                    return Err(fail(e, Some(header), avps, failed));
                }
            }
        }
        Ok(Message { header, avps })
    }

    /// Octets on the wire.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.avps.iter().map(|a| a.buffer_len()).sum::<usize>()
    }

    /// Emits into a buffer of at least [`buffer_len`](Self::buffer_len).
    pub fn emit(&self, buf: &mut [u8]) {
        let len = self.buffer_len();
        let mut p = Packet::new_unchecked(&mut buf[..len]);
        self.header.emit(&mut p, len as u32);
        let mut off = HEADER_LEN;
        for a in &self.avps {
            a.emit(&mut buf[off..]);
            off += a.buffer_len();
        }
    }

    /// Appends the encoded message to `out` (batching writes).
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + self.buffer_len(), 0);
        self.emit(&mut out[start..]);
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.buffer_len());
        self.emit_into(&mut v);
        v
    }

    pub fn push(&mut self, avp: AvpRepr) -> &mut Self {
        self.avps.push(avp);
        self
    }

    /// The first top-level AVP of this definition.
    pub fn find(&self, def: AvpDef) -> Option<&AvpRepr> {
        self.avps.iter().find(|a| def.matches(a))
    }

    pub fn find_all(&self, def: AvpDef) -> impl Iterator<Item = &AvpRepr> {
        self.avps.iter().filter(move |a| def.matches(a))
    }

    /// Session-Id, when present (RFC 6733 8.8).
    pub fn session_id(&self) -> Option<&str> {
        self.find(crate::dict::avp::SESSION_ID).and_then(|a| a.as_str().ok())
    }

    /// The Result-Code, or the Experimental-Result-Code of an
    /// Experimental-Result (RFC 6733 7.6).
    pub fn result_code(&self) -> Option<u32> {
        use crate::dict::avp::*;
        if let Some(rc) = self.find(RESULT_CODE).and_then(|a| a.as_u32().ok()) {
            return Some(rc);
        }
        let er = self.find(EXPERIMENTAL_RESULT)?.grouped().ok()?;
        er.iter().find(|a| EXPERIMENTAL_RESULT_CODE.matches(a)).and_then(|a| a.as_u32().ok())
    }
}

/// First AVP of a definition within a list (children of a Grouped AVP).
pub fn find(avps: &[AvpRepr], def: AvpDef) -> Option<&AvpRepr> {
    avps.iter().find(|a| def.matches(a))
}
