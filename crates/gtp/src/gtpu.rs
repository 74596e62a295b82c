//! GTP-U (TS 29.281): a zero-copy wire view of the header and its
//! extension header chain, and plain `Repr`s for the header and for the
//! messages a user-plane node exchanges: Echo Request/Response, Error
//! Indication, End Marker and G-PDU.
//!
//! This is the one G-PDU builder of the workspace (TS 29.281 5.1): a
//! [`HeaderRepr`] (TEID, optional sequence number, N-PDU number, extension
//! headers such as the PDU Session Container) emitted with its payload by
//! [`Repr::emit`] into a caller's buffer of [`Repr::buffer_len`] octets, or
//! by [`HeaderRepr::emit_with_payload`] from a header the caller keeps (no
//! allocation per packet); [`gpdu`] is the plain case as a `Vec`.
//!
//! The fast path only needs [`Packet::new_checked`] and
//! [`Packet::payload_offset`] (no allocation).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The registered GTP-U UDP port (TS 29.281 4.4.2).
pub const PORT: u16 = 2152;

/// Message types (TS 29.281 6.1).
pub mod msg {
    pub const ECHO_REQUEST: u8 = 1;
    pub const ECHO_RESPONSE: u8 = 2;
    pub const ERROR_INDICATION: u8 = 26;
    pub const SUPPORTED_EXTENSION_HEADERS_NOTIFICATION: u8 = 31;
    pub const END_MARKER: u8 = 254;
    pub const G_PDU: u8 = 255;
}

/// Extension header types (TS 29.281 5.2.1-3).
pub mod ext {
    pub const NO_MORE: u8 = 0x00;
    pub const SERVICE_CLASS_INDICATOR: u8 = 0x20;
    pub const UDP_PORT: u8 = 0x40;
    pub const RAN_CONTAINER: u8 = 0x81;
    pub const LONG_PDCP_PDU_NUMBER: u8 = 0x82;
    pub const NR_RAN_CONTAINER: u8 = 0x84;
    pub const PDU_SESSION_CONTAINER: u8 = 0x85;
    pub const PDCP_PDU_NUMBER: u8 = 0xc0;
}

/// Information element types (TS 29.281 8).
pub mod ie {
    pub const RECOVERY: u8 = 14;
    pub const TEID_DATA_I: u8 = 16;
    pub const GTPU_PEER_ADDRESS: u8 = 133;
    pub const EXTENSION_HEADER_TYPE_LIST: u8 = 141;
    pub const PRIVATE_EXTENSION: u8 = 255;
}

/// Why octets could not be read as GTP-U.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("truncated")]
    Truncated,
    #[error("not GTP-U: version {0}")]
    Version(u8),
    #[error("protocol type is GTP' (PT=0)")]
    ProtocolType,
    #[error("length field disagrees with the datagram")]
    Length,
    #[error("extension header with length 0")]
    ExtensionLength,
    #[error("missing mandatory IE {0}")]
    MissingIe(u8),
    #[error("invalid IE {0}")]
    InvalidIe(u8),
}

pub type Result<T> = core::result::Result<T, Error>;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const FLAGS: usize = 0;
    pub const MSG_TYPE: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const TEID: Field = 4..8;
    pub const SEQ: Field = 8..10;
    pub const NPDU: usize = 10;
    pub const NEXT_EXT: usize = 11;
}

/// Flags octet (TS 29.281 5.1): version 3 bits, PT, spare, E, S, PN.
const FLAG_PT: u8 = 0x10;
const FLAG_E: u8 = 0x04;
const FLAG_S: u8 = 0x02;
const FLAG_PN: u8 = 0x01;
pub const VERSION: u8 = 1;
/// The mandatory part of the header.
pub const HEADER_LEN: usize = 8;

/// Wire view over one GTP-U message (header, extensions, payload).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Checks version, PT, the length field and the extension header chain,
    /// so every accessor afterwards is in bounds.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != VERSION {
            return Err(Error::Version(self.version()));
        }
        if b[field::FLAGS] & FLAG_PT == 0 {
            return Err(Error::ProtocolType);
        }
        if self.total_len() > b.len() {
            return Err(Error::Length);
        }
        if self.has_optional() && self.total_len() < 12 {
            return Err(Error::Length);
        }
        self.walk_extensions().map(|_| ())
    }

    /// Walks the extension header chain; returns the payload offset.
    fn walk_extensions(&self) -> Result<usize> {
        let b = &self.buffer.as_ref()[..self.total_len()];
        if !self.has_optional() {
            return Ok(HEADER_LEN);
        }
        let mut next = if self.e_flag() { b[field::NEXT_EXT] } else { ext::NO_MORE };
        let mut off = 12;
        while next != ext::NO_MORE {
            let len = *b.get(off).ok_or(Error::Truncated)? as usize * 4;
            if len == 0 {
                return Err(Error::ExtensionLength);
            }
            if off + len > b.len() {
                return Err(Error::Truncated);
            }
            next = b[off + len - 1];
            off += len;
        }
        Ok(off)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] >> 5
    }
    pub fn e_flag(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_E != 0
    }
    pub fn s_flag(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_S != 0
    }
    pub fn pn_flag(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_PN != 0
    }
    /// Octets 9-12 are present when any of E, S, PN is set (TS 29.281 5.1).
    pub fn has_optional(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & (FLAG_E | FLAG_S | FLAG_PN) != 0
    }
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::MSG_TYPE]
    }
    /// Octets after the mandatory 8-octet header.
    pub fn length(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.length() as usize
    }
    pub fn teid(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::TEID];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    /// The sequence number, if the S flag says it is meaningful.
    pub fn seq(&self) -> Option<u16> {
        self.s_flag().then(|| {
            let b = &self.buffer.as_ref()[field::SEQ];
            u16::from_be_bytes([b[0], b[1]])
        })
    }
    pub fn npdu(&self) -> Option<u8> {
        self.pn_flag().then(|| self.buffer.as_ref()[field::NPDU])
    }
    /// Where the T-PDU or the IEs start (after all extension headers).
    /// Only valid on a checked packet.
    pub fn payload_offset(&self) -> usize {
        self.walk_extensions().unwrap_or(HEADER_LEN)
    }
    pub fn payload(&self) -> &[u8] {
        let (o, e) = (self.payload_offset(), self.total_len());
        &self.buffer.as_ref()[o..e]
    }
    /// The extension headers as (type, content) pairs, content without the
    /// length and next-type octets.
    pub fn extensions(&self) -> Extensions<'_> {
        let b = &self.buffer.as_ref()[..self.total_len()];
        let next = if self.has_optional() && self.e_flag() { b[field::NEXT_EXT] } else { ext::NO_MORE };
        Extensions { b, off: 12, next }
    }
}

/// Iterator over the extension header chain of a checked packet.
pub struct Extensions<'a> {
    b: &'a [u8],
    off: usize,
    next: u8,
}

impl<'a> Iterator for Extensions<'a> {
    type Item = (u8, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        if self.next == ext::NO_MORE {
            return None;
        }
        let len = *self.b.get(self.off)? as usize * 4;
        if len == 0 || self.off + len > self.b.len() {
            return None;
        }
        let kind = self.next;
        let content = &self.b[self.off + 1..self.off + len - 1];
        self.next = self.b[self.off + len - 1];
        self.off += len;
        Some((kind, content))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_teid(&mut self, teid: u32) {
        self.buffer.as_mut()[field::TEID].copy_from_slice(&teid.to_be_bytes());
    }
    pub fn set_length(&mut self, l: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&l.to_be_bytes());
    }
}

/// One extension header (TS 29.281 5.2.1): its type and content. The
/// content is padded to 4n-2 octets when emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    pub kind: u8,
    pub content: Vec<u8>,
}

impl Extension {
    /// PDU Session Container (TS 38.415 5.5.2): UL PDU SESSION INFORMATION
    /// (PDU type 1) or DL (PDU type 0) with the QFI.
    pub fn pdu_session_container(uplink: bool, qfi: u8) -> Self {
        let pdu_type = if uplink { 1 } else { 0 };
        Extension { kind: ext::PDU_SESSION_CONTAINER, content: vec![pdu_type << 4, qfi & 0x3f] }
    }
    /// UDP Port extension header (TS 29.281 5.2.2.1), sent with Error Indication.
    pub fn udp_port(port: u16) -> Self {
        Extension { kind: ext::UDP_PORT, content: port.to_be_bytes().to_vec() }
    }
    /// The QFI of a PDU Session Container.
    pub fn qfi(&self) -> Option<u8> {
        (self.kind == ext::PDU_SESSION_CONTAINER).then(|| self.content.get(1).map(|q| q & 0x3f)).flatten()
    }
    /// Octets on the wire: length, content padded, next type.
    pub fn wire_len(&self) -> usize {
        (self.content.len() + 2).div_ceil(4).max(1) * 4
    }
}

/// The header of a GTP-U message as plain values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeaderRepr {
    pub msg_type: u8,
    pub teid: u32,
    pub seq: Option<u16>,
    pub npdu: Option<u8>,
    pub extensions: Vec<Extension>,
}

impl HeaderRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        let extensions = p.extensions().map(|(kind, c)| Extension { kind, content: c.to_vec() }).collect();
        Ok(HeaderRepr { msg_type: p.msg_type(), teid: p.teid(), seq: p.seq(), npdu: p.npdu(), extensions })
    }

    /// A G-PDU header for a tunnel.
    pub fn gpdu(teid: u32) -> Self {
        HeaderRepr { msg_type: msg::G_PDU, teid, ..Default::default() }
    }

    /// With a sequence number (S flag, TS 29.281 5.1).
    pub fn with_seq(mut self, seq: u16) -> Self {
        self.seq = Some(seq);
        self
    }

    /// With one more extension header, after those already there.
    pub fn with_extension(mut self, e: Extension) -> Self {
        self.extensions.push(e);
        self
    }

    fn has_optional(&self) -> bool {
        self.seq.is_some() || self.npdu.is_some() || !self.extensions.is_empty()
    }

    pub fn header_len(&self) -> usize {
        if self.has_optional() {
            12 + self.extensions.iter().map(Extension::wire_len).sum::<usize>()
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header and `payload` after it into `buf`, which must be
    /// at least `header_len() + payload.len()` long; returns the octets
    /// written. A whole message from a header the caller keeps.
    pub fn emit_with_payload(&self, buf: &mut [u8], payload: &[u8]) -> usize {
        let n = self.header_len();
        self.emit(buf, payload.len());
        buf[n..n + payload.len()].copy_from_slice(payload);
        n + payload.len()
    }

    /// Writes the header for `payload_len` octets of payload; `buf` must be
    /// at least `header_len()` long.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) {
        let mut flags = (VERSION << 5) | FLAG_PT;
        if !self.extensions.is_empty() {
            flags |= FLAG_E;
        }
        if self.seq.is_some() {
            flags |= FLAG_S;
        }
        if self.npdu.is_some() {
            flags |= FLAG_PN;
        }
        buf[field::FLAGS] = flags;
        buf[field::MSG_TYPE] = self.msg_type;
        let len = (self.header_len() - HEADER_LEN + payload_len) as u16;
        buf[field::LENGTH].copy_from_slice(&len.to_be_bytes());
        buf[field::TEID].copy_from_slice(&self.teid.to_be_bytes());
        if !self.has_optional() {
            return;
        }
        buf[field::SEQ].copy_from_slice(&self.seq.unwrap_or(0).to_be_bytes());
        buf[field::NPDU] = self.npdu.unwrap_or(0);
        buf[field::NEXT_EXT] = self.extensions.first().map_or(ext::NO_MORE, |e| e.kind);
        let mut off = 12;
        for (i, e) in self.extensions.iter().enumerate() {
            let n = e.wire_len();
            let out = &mut buf[off..off + n];
            out.fill(0);
            out[0] = (n / 4) as u8;
            out[1..1 + e.content.len()].copy_from_slice(&e.content);
            out[n - 1] = self.extensions.get(i + 1).map_or(ext::NO_MORE, |e| e.kind);
            off += n;
        }
    }
}

/// A GTP-U message body as plain values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body<'a> {
    /// TS 29.281 7.2.1.
    EchoRequest,
    /// TS 29.281 7.2.2: Recovery (restart counter, 0 on send).
    EchoResponse { recovery: u8 },
    /// TS 29.281 7.3.1: the TEID of the unknown tunnel and our address.
    ErrorIndication { teid_data_i: u32, peer: IpAddr },
    /// TS 29.281 7.3.2.
    EndMarker,
    /// A T-PDU (TS 29.281 6.1).
    GPdu(&'a [u8]),
    /// Any other message, IEs uninterpreted.
    Other(&'a [u8]),
}

/// One GTP-U message: header and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr<'a> {
    pub header: HeaderRepr,
    pub body: Body<'a>,
}

/// Finds a TV/TLV IE in an IE list (TS 29.281 8.1: types < 128 are TV with
/// a fixed length, others TLV with a 2-octet length).
fn find_ie(mut b: &[u8], want: u8) -> Result<Option<&[u8]>> {
    while let Some((&t, rest)) = b.split_first() {
        let (value, tail) = if t < 128 {
            let n = match t {
                ie::RECOVERY => 1,
                ie::TEID_DATA_I => 4,
                _ => return Ok(None), // unknown TV: cannot skip it
            };
            if rest.len() < n {
                return Err(Error::InvalidIe(t));
            }
            rest.split_at(n)
        } else {
            if rest.len() < 2 {
                return Err(Error::InvalidIe(t));
            }
            let n = u16::from_be_bytes([rest[0], rest[1]]) as usize;
            if rest.len() < 2 + n {
                return Err(Error::InvalidIe(t));
            }
            rest[2..].split_at(n)
        };
        if t == want {
            return Ok(Some(value));
        }
        b = tail;
    }
    Ok(None)
}

impl<'a> Repr<'a> {
    /// Parses untrusted octets (same as [`parse`]).
    pub fn parse(b: &'a [u8]) -> Result<Self> {
        parse(b)
    }

    fn body_len(&self) -> usize {
        match &self.body {
            Body::EchoRequest | Body::EndMarker => 0,
            Body::EchoResponse { .. } => 2,
            Body::ErrorIndication { peer, .. } => 5 + 3 + if peer.is_ipv4() { 4 } else { 16 },
            Body::GPdu(b) | Body::Other(b) => b.len(),
        }
    }

    pub fn buffer_len(&self) -> usize {
        self.header.header_len() + self.body_len()
    }

    /// Writes the message into `buf[..buffer_len()]`.
    pub fn emit(&self, buf: &mut [u8]) {
        let n = self.body_len();
        self.header.emit(buf, n);
        let o = self.header.header_len();
        let out = &mut buf[o..o + n];
        match &self.body {
            Body::EchoRequest | Body::EndMarker => {}
            Body::EchoResponse { recovery } => out.copy_from_slice(&[ie::RECOVERY, *recovery]),
            Body::ErrorIndication { teid_data_i, peer } => {
                out[0] = ie::TEID_DATA_I;
                out[1..5].copy_from_slice(&teid_data_i.to_be_bytes());
                out[5] = ie::GTPU_PEER_ADDRESS;
                match peer {
                    IpAddr::V4(a) => {
                        out[6..8].copy_from_slice(&4u16.to_be_bytes());
                        out[8..12].copy_from_slice(&a.octets());
                    }
                    IpAddr::V6(a) => {
                        out[6..8].copy_from_slice(&16u16.to_be_bytes());
                        out[8..24].copy_from_slice(&a.octets());
                    }
                }
            }
            Body::GPdu(b) | Body::Other(b) => out.copy_from_slice(b),
        }
    }

    /// Writes the message into `out`, replacing what it held (a buffer
    /// the caller reuses: no allocation once it is large enough).
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.resize(self.buffer_len(), 0);
        self.emit(out);
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.emit_into(&mut v);
        v
    }
}

/// A G-PDU carrying `payload` on tunnel `teid`, without optional fields
/// (TS 29.281 5.1): flags 0x30, type 255, length, TEID, payload.
pub fn gpdu(teid: u32, payload: &[u8]) -> Vec<u8> {
    Repr { header: HeaderRepr::gpdu(teid), body: Body::GPdu(payload) }.to_vec()
}

/// Parses untrusted octets into a message.
pub fn parse(b: &[u8]) -> Result<Repr<'_>> {
    let p = Packet::new_checked(b)?;
    let header = HeaderRepr::parse(&p)?;
    let o = p.payload_offset();
    let payload = &b[o..p.total_len()];
    let body = match p.msg_type() {
        msg::ECHO_REQUEST => Body::EchoRequest,
        msg::ECHO_RESPONSE => {
            let r = find_ie(payload, ie::RECOVERY)?.ok_or(Error::MissingIe(ie::RECOVERY))?;
            Body::EchoResponse { recovery: r[0] }
        }
        msg::ERROR_INDICATION => {
            let t = find_ie(payload, ie::TEID_DATA_I)?.ok_or(Error::MissingIe(ie::TEID_DATA_I))?;
            let a = find_ie(payload, ie::GTPU_PEER_ADDRESS)?.ok_or(Error::MissingIe(ie::GTPU_PEER_ADDRESS))?;
            let peer = match a.len() {
                4 => IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
                16 => {
                    let mut o = [0u8; 16];
                    o.copy_from_slice(a);
                    IpAddr::V6(Ipv6Addr::from(o))
                }
                _ => return Err(Error::InvalidIe(ie::GTPU_PEER_ADDRESS)),
            };
            Body::ErrorIndication { teid_data_i: u32::from_be_bytes([t[0], t[1], t[2], t[3]]), peer }
        }
        msg::END_MARKER => Body::EndMarker,
        msg::G_PDU => Body::GPdu(payload),
        _ => Body::Other(payload),
    };
    Ok(Repr { header, body })
}

/// An Echo Response to an Echo Request (TS 29.281 7.2.2): same sequence
/// number, Recovery 0 (TS 29.281 8.2).
pub fn echo_response(request_seq: Option<u16>) -> Vec<u8> {
    Repr {
        header: HeaderRepr {
            msg_type: msg::ECHO_RESPONSE,
            teid: 0,
            seq: Some(request_seq.unwrap_or(0)),
            ..Default::default()
        },
        body: Body::EchoResponse { recovery: 0 },
    }
    .to_vec()
}

/// An Error Indication for an unknown `teid` (TS 29.281 7.3.1): TEID 0,
/// S flag set, the UDP Port extension header with the source port of the
/// offending G-PDU (TS 29.281 5.2.2.1), `local` as GTP-U Peer Address.
pub fn error_indication(seq: u16, teid: u32, local: IpAddr, src_port: Option<u16>) -> Vec<u8> {
    let extensions = src_port.map(Extension::udp_port).into_iter().collect();
    Repr {
        header: HeaderRepr { msg_type: msg::ERROR_INDICATION, teid: 0, seq: Some(seq), npdu: None, extensions },
        body: Body::ErrorIndication { teid_data_i: teid, peer: local },
    }
    .to_vec()
}

/// An End Marker on tunnel `teid` (TS 29.281 7.3.2).
pub fn end_marker(teid: u32) -> Vec<u8> {
    Repr { header: HeaderRepr { msg_type: msg::END_MARKER, teid, ..Default::default() }, body: Body::EndMarker }
        .to_vec()
}

#[cfg(test)]
mod tests;
