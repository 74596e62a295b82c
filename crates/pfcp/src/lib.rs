//! mobicore-pfcp: the one PFCP framing of the workspace, glue over rs-pfcp
//! (TS 29.244 7.2): a checked header read, the top-level IE list (copied
//! with [`decode`] or viewed in place with [`decode_view`]), and building a
//! message from IEs ([`encode`]); grouped IEs viewed in place
//! ([`group_view`], [`grouped_id`]); a request without the IEs rs-pfcp does
//! not know, at any level ([`without_unknown_ies`], TS 29.244 7.6); the IEs
//! of a group with their raw types, enterprise-specific ones included
//! ([`raw_ies`]). The UPF's PFCP node and the S/P-GW-C's Sxa/Sxb side both
//! use it.
//!
//! - [`flow`]: the Flow Description (SDF filter) parser, TS 29.244 8.2.5.
//! - [`steering`]: a steering switch's diversion as a PFCP session (the
//!   controller encodes it, the UPF decodes it).
//! - [`mec`]: a MEC router's traffic rule (ETSI GS MEC 011) and a UE's
//!   downlink tunnel as PFCP sessions.

pub mod flow;
pub mod mec;
pub mod steering;

use rs_pfcp::error::PfcpError;
use rs_pfcp::ie::cause::{Cause, CauseValue};
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::offending_ie::OffendingIe;
use rs_pfcp::ie::{Ie, IeType};

/// The header fields we use (TS 29.244 7.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcpHeader {
    pub version: u8,
    pub msg_type: u8,
    pub seid: Option<u64>,
    pub seq: u32,
}

/// Why a datagram is not a usable PFCP message.
#[derive(Debug, Clone, PartialEq)]
pub enum FrameError {
    /// Not even a header: dropped and counted.
    Header,
    /// The header is fine but the IEs are not (answered with `cause`).
    Ies(PfcpHeader, PfcpError),
}

/// Reads the header and splits the top-level IEs.
pub fn decode(b: &[u8]) -> Result<(PfcpHeader, Vec<Ie>), FrameError> {
    let (h, hlen, total) = header(b)?;
    let mut ies = Vec::new();
    let mut off = hlen;
    while off < total {
        let ie = match empty_unknown(&b[off..total]) {
            Some(raw) => Ie::new_unknown(raw, vec![]).map_err(|e| FrameError::Ies(h, e))?,
            None => Ie::unmarshal(&b[off..total]).map_err(|e| FrameError::Ies(h, e))?,
        };
        off += ie.len() as usize;
        ies.push(ie);
    }
    Ok((h, ies))
}

/// The header, its length and the message's length.
fn header(b: &[u8]) -> Result<(PfcpHeader, usize, usize), FrameError> {
    if b.len() < 8 {
        return Err(FrameError::Header);
    }
    let has_seid = b[0] & 0x01 != 0;
    let hlen = if has_seid { 16 } else { 8 };
    let total = 4 + u16::from_be_bytes([b[2], b[3]]) as usize;
    if b.len() < hlen || total < hlen || total > b.len() {
        return Err(FrameError::Header);
    }
    let seid = has_seid.then(|| u64::from_be_bytes(b[4..12].try_into().unwrap()));
    let o = hlen - 4;
    let h =
        PfcpHeader { version: b[0] >> 5, msg_type: b[1], seid, seq: u32::from_be_bytes([0, b[o], b[o + 1], b[o + 2]]) };
    Ok((h, hlen, total))
}

/// A top-level IE read in place: its type and value (TS 29.244 8.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IeRef<'a> {
    pub ie_type: IeType,
    pub payload: &'a [u8],
}

/// What [`first`] and [`all`] look at: an IE's type.
pub trait TypedIe {
    fn typ(&self) -> IeType;
}

impl TypedIe for Ie {
    fn typ(&self) -> IeType {
        self.ie_type
    }
}

impl TypedIe for IeRef<'_> {
    fn typ(&self) -> IeType {
        self.ie_type
    }
}

/// Whether rs-pfcp knows IE type `raw` (TS 29.244 8.1.2): not an
/// enterprise-specific type (8.1.1, top bit set) and not a type it reads
/// as `Unknown`.
pub fn is_known_ie_type(raw: u16) -> bool {
    raw & 0x8000 == 0 && IeType::from(raw) != IeType::Unknown
}

/// An empty IE of a type rs-pfcp does not know (it refuses empty IEs but
/// for a few types); TS 29.244 7.6 has the receiver ignore it like any
/// other unknown IE, so it is read, not refused.
fn empty_unknown(b: &[u8]) -> Option<u16> {
    let raw = u16::from_be_bytes([*b.first()?, *b.get(1)?]);
    let len = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
    (len == 0 && raw & 0x8000 == 0 && !is_known_ie_type(raw)).then_some(raw)
}

/// The IE at the start of `b` and its encoded length. The common case is
/// read in place; vendor-specific and empty IEs, and every error, go
/// through rs-pfcp so that they are judged exactly as [`decode`] does.
fn ie_at(b: &[u8]) -> Result<(IeRef<'_>, usize), PfcpError> {
    if b.len() >= 4 {
        let raw = u16::from_be_bytes([b[0], b[1]]);
        let len = u16::from_be_bytes([b[2], b[3]]) as usize;
        if raw & 0x8000 == 0 && len != 0 && b.len() >= 4 + len {
            return Ok((IeRef { ie_type: IeType::from(raw), payload: &b[4..4 + len] }, 4 + len));
        }
    }
    if empty_unknown(b).is_some() {
        return Ok((IeRef { ie_type: IeType::Unknown, payload: &[] }, 4));
    }
    let ie = Ie::unmarshal(b)?;
    let start = if b[0] & 0x80 != 0 { 6 } else { 4 };
    let end = ie.len() as usize;
    Ok((IeRef { ie_type: ie.ie_type, payload: &b[start..end] }, end))
}

/// [`decode`] without copying: the IEs are views into `b`.
pub fn decode_view(b: &[u8]) -> Result<(PfcpHeader, Vec<IeRef<'_>>), FrameError> {
    let (h, hlen, total) = header(b)?;
    let mut ies = Vec::with_capacity(8);
    let mut off = hlen;
    while off < total {
        let (ie, n) = ie_at(&b[off..total]).map_err(|e| FrameError::Ies(h, e))?;
        off += n;
        ies.push(ie);
    }
    Ok((h, ies))
}

/// The IEs of a grouped IE's value (TS 29.244 8.1.1), viewed in place.
pub fn group_view(payload: &[u8]) -> Result<Vec<IeRef<'_>>, PfcpError> {
    let mut ies = Vec::new();
    let mut off = 0;
    while off < payload.len() {
        let (ie, n) = ie_at(&payload[off..])?;
        off += n;
        ies.push(ie);
    }
    Ok(ies)
}

/// The grouped IEs whose children the UP function reads, and so where
/// [`without_unknown_ies`] looks for unknown ones. Remove PDR/FAR/QER/URR/BAR
/// and Query URR are left alone: their one child is read with
/// [`grouped_id`], which skips anything else, and rs-pfcp writes them
/// without the child's header.
const GROUPED: &[IeType] = &[
    IeType::CreatePdr,
    IeType::Pdi,
    IeType::CreateFar,
    IeType::ForwardingParameters,
    IeType::DuplicatingParameters,
    IeType::CreateUrr,
    IeType::CreateQer,
    IeType::CreateBar,
    IeType::UpdatePdr,
    IeType::UpdateFar,
    IeType::UpdateForwardingParameters,
    IeType::UpdateDuplicatingParameters,
    IeType::UpdateUrr,
    IeType::UpdateQer,
    IeType::UpdateBar,
];

/// An IE the receiver does not know is ignored (TS 29.244 7.6, error
/// handling), at the top level and inside grouped IEs. This copies a message without the IEs rs-pfcp does not
/// know (types it reads as `Unknown`, enterprise-specific IEs, 8.1.1), in
/// the grouped IEs of [`GROUPED`] too, so that no decoder downstream can
/// trip on them; the message itself when it has none (no copy). What is
/// not well-formed is left as it is, to be judged (and answered) by the
/// decoders as before. The count is how many IEs were left out.
pub fn without_unknown_ies(b: &[u8]) -> (std::borrow::Cow<'_, [u8]>, usize) {
    let Ok((_, hlen, total)) = header(b) else { return (b.into(), 0) };
    let mut dropped = 0;
    match strip(&b[hlen..total], &mut dropped) {
        Some(body) if dropped > 0 => {
            let mut m = Vec::with_capacity(hlen + body.len());
            m.extend_from_slice(&b[..hlen]);
            m.extend_from_slice(&body);
            let len = (m.len() - 4) as u16;
            m[2..4].copy_from_slice(&len.to_be_bytes());
            (m.into(), dropped)
        }
        _ => (b.into(), 0),
    }
}

/// `ies` without unknown IEs (recursively in [`GROUPED`]); `None` when
/// some IE does not read (then nothing is changed).
fn strip(ies: &[u8], dropped: &mut usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(ies.len());
    let mut off = 0;
    while off < ies.len() {
        let b = &ies[off..];
        let raw = u16::from_be_bytes([b[0], *b.get(1)?]);
        let (ie, n) = ie_at(b).ok()?;
        off += n;
        if !is_known_ie_type(raw) {
            *dropped += 1;
            continue;
        }
        let start = out.len();
        out.extend_from_slice(&b[..4]);
        match GROUPED.contains(&ie.ie_type) {
            true => out.extend_from_slice(&strip(ie.payload, dropped)?),
            false => out.extend_from_slice(ie.payload),
        }
        let len = u16::try_from(out.len() - start - 4).ok()?;
        out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
    }
    Some(out)
}

/// The value of the `child` IE inside a grouped IE such as Remove PDR
/// (TS 29.244 7.5.4.6: a group holding a PDR ID IE), skipping any other
/// IE; also the bare value of `width` octets that rs-pfcp 0.5 writes for
/// these groups (an IE-encoded one is at least 4 octets longer, so the two
/// cannot be mistaken for one another).
pub fn grouped_id(payload: &[u8], child: IeType, width: usize) -> Option<&[u8]> {
    if payload.len() == width {
        return Some(payload);
    }
    let ies = group_view(payload).ok()?;
    first(&ies, child).and_then(|i| i.payload.get(..width))
}

/// An IE read in place with its raw type (TS 29.244 8.1.1): unlike
/// [`IeRef`], an enterprise-specific IE (type 32768 and up) keeps its type
/// and Enterprise ID (`payload` is what follows the Enterprise ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawIe<'a> {
    pub ie_type: u16,
    pub enterprise: Option<u16>,
    pub payload: &'a [u8],
}

/// The IEs of `b` (a grouped IE's value, or a message body) with their
/// raw types; `None` when one does not fit in `b`.
pub fn raw_ies(b: &[u8]) -> Option<Vec<RawIe<'_>>> {
    let mut v = Vec::new();
    let mut off = 0;
    while off < b.len() {
        let h = b.get(off..off + 4)?;
        let ie_type = u16::from_be_bytes([h[0], h[1]]);
        let len = u16::from_be_bytes([h[2], h[3]]) as usize;
        let body = b.get(off + 4..off + 4 + len)?;
        let (enterprise, payload) = match ie_type & 0x8000 {
            0 => (None, body),
            _ => (Some(u16::from_be_bytes([*body.first()?, *body.get(1)?])), &body[2..]),
        };
        v.push(RawIe { ie_type, enterprise, payload });
        off += 4 + len;
    }
    Some(v)
}

/// Builds a PFCP message (version 1) from its IEs.
pub fn encode(msg_type: u8, seid: Option<u64>, seq: u32, ies: &[Ie]) -> Vec<u8> {
    let hlen = if seid.is_some() { 16 } else { 8 };
    let mut b = vec![0u8; hlen];
    for ie in ies {
        ie.marshal_into(&mut b);
    }
    b[0] = (1 << 5) | seid.is_some() as u8;
    b[1] = msg_type;
    let len = (b.len() - 4) as u16;
    b[2..4].copy_from_slice(&len.to_be_bytes());
    let mut o = 4;
    if let Some(s) = seid {
        b[4..12].copy_from_slice(&s.to_be_bytes());
        o = 12;
    }
    b[o..o + 3].copy_from_slice(&seq.to_be_bytes()[1..]);
    b
}

pub fn first<T: TypedIe>(ies: &[T], t: IeType) -> Option<&T> {
    ies.iter().find(|i| i.typ() == t)
}

pub fn all<T: TypedIe>(ies: &[T], t: IeType) -> impl Iterator<Item = &T> {
    ies.iter().filter(move |i| i.typ() == t)
}

pub fn cause_ie(c: CauseValue) -> Ie {
    Ie::new(IeType::Cause, Cause::new(c).marshal().to_vec())
}

pub fn offending_ie_ie(t: u16) -> Ie {
    Ie::new(IeType::OffendingIe, OffendingIe::new(t).marshal().to_vec())
}

/// Node ID as text: the IPv4/IPv6 address or the FQDN.
pub fn node_id_text(n: &NodeId) -> String {
    match n {
        NodeId::IPv4(a) => a.to_string(),
        NodeId::IPv6(a) => a.to_string(),
        NodeId::FQDN(f) => f.clone(),
    }
}

/// Message types (TS 29.244 Table 7.3-1).
pub mod msg {
    pub const HEARTBEAT_REQUEST: u8 = 1;
    pub const HEARTBEAT_RESPONSE: u8 = 2;
    pub const ASSOCIATION_SETUP_REQUEST: u8 = 5;
    pub const ASSOCIATION_SETUP_RESPONSE: u8 = 6;
    pub const ASSOCIATION_UPDATE_REQUEST: u8 = 7;
    pub const ASSOCIATION_UPDATE_RESPONSE: u8 = 8;
    pub const ASSOCIATION_RELEASE_REQUEST: u8 = 9;
    pub const ASSOCIATION_RELEASE_RESPONSE: u8 = 10;
    pub const VERSION_NOT_SUPPORTED_RESPONSE: u8 = 11;
    pub const SESSION_ESTABLISHMENT_REQUEST: u8 = 50;
    pub const SESSION_ESTABLISHMENT_RESPONSE: u8 = 51;
    pub const SESSION_MODIFICATION_REQUEST: u8 = 52;
    pub const SESSION_MODIFICATION_RESPONSE: u8 = 53;
    pub const SESSION_DELETION_REQUEST: u8 = 54;
    pub const SESSION_DELETION_RESPONSE: u8 = 55;

    /// Requests are odd in the node range and even in the session range.
    pub fn is_request(t: u8) -> bool {
        if t < 50 {
            t % 2 == 1 && t != 11
        } else {
            t.is_multiple_of(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encode_decode_round_trip() {
        let ies = vec![cause_ie(CauseValue::RequestAccepted), offending_ie_ie(60)];
        let b = encode(msg::SESSION_DELETION_RESPONSE, Some(0x1122), 0x030201, &ies);
        let (h, got) = decode(&b).unwrap();
        assert_eq!(h, PfcpHeader { version: 1, msg_type: 55, seid: Some(0x1122), seq: 0x030201 });
        assert_eq!(got, ies);
        // rs-pfcp reads what we write.
        let m = rs_pfcp::message::parse(&b).unwrap();
        assert_eq!(*m.sequence(), 0x030201);
    }

    /// A Create PDR holding a PDI, each with an IE of type 400 (unknown to
    /// rs-pfcp) and an enterprise-specific IE (TS 29.244 8.1.1), plus an
    /// empty unknown IE at the top level.
    fn with_unknown_ies() -> (Vec<u8>, Vec<u8>) {
        let t400 = Ie::new_unknown(400, vec![1, 2, 3]).unwrap();
        let vendor = Ie::new_vendor_specific(0x8001, 18681, vec![9, 9]).unwrap();
        let si = Ie::new(IeType::SourceInterface, vec![0]);
        let pdi = Ie::new_grouped(IeType::Pdi, vec![si.clone(), t400.clone(), vendor.clone()]);
        let pdr_id = Ie::new(IeType::PdrId, vec![0, 1]);
        let pdr = Ie::new_grouped(IeType::CreatePdr, vec![pdr_id.clone(), t400.clone(), pdi, vendor.clone()]);
        let empty = Ie::new_unknown(401, vec![]).unwrap();
        let cause = cause_ie(CauseValue::RequestAccepted);
        let m = encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 9, &[t400, pdr, empty, vendor, cause.clone()]);
        let clean_pdi = Ie::new_grouped(IeType::Pdi, vec![si]);
        let clean_pdr = Ie::new_grouped(IeType::CreatePdr, vec![pdr_id, clean_pdi]);
        (m, encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 9, &[clean_pdr, cause]))
    }

    #[test]
    fn unknown_ies_are_read_and_left_out_at_every_level() {
        let (m, clean) = with_unknown_ies();
        let (_, ies) = decode_view(&m).unwrap();
        assert_eq!(ies.len(), 5, "the empty unknown IE is read, not refused");
        assert_eq!(decode(&m).unwrap().1.len(), 5);
        let (out, n) = without_unknown_ies(&m);
        assert_eq!((&out[..], n), (&clean[..], 7));
        // A message without unknown IEs is not copied.
        let (same, n) = without_unknown_ies(&clean);
        assert!(matches!(same, std::borrow::Cow::Borrowed(_)) && n == 0);
        // Not well formed: left for the decoders to judge.
        let mut bad = clean.clone();
        bad[19] = 0xff;
        assert_eq!(&without_unknown_ies(&bad).0[..], &bad[..]);
    }

    #[test]
    fn grouped_ids_in_either_encoding() {
        let ie = [&[0u8, 250, 0, 1, 7][..], &[0, 56, 0, 2, 0, 9]].concat();
        assert_eq!(grouped_id(&ie, IeType::PdrId, 2), Some(&[0u8, 9][..]));
        assert_eq!(grouped_id(&[0, 9], IeType::PdrId, 2), Some(&[0u8, 9][..]));
        assert_eq!(grouped_id(&[0, 0, 0, 4], IeType::FarId, 4), Some(&[0u8, 0, 0, 4][..]));
        assert_eq!(grouped_id(&[0, 250, 0, 1, 7], IeType::PdrId, 2), None);
    }

    proptest! {
        /// Leaving out unknown IEs never panics and is idempotent.
        #[test]
        fn without_unknown_ies_is_idempotent(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut m = encode(50, Some(1), 7, &[]);
            m.extend_from_slice(&b);
            let len = (m.len() - 4) as u16;
            m[2..4].copy_from_slice(&len.to_be_bytes());
            let (once, _) = without_unknown_ies(&m);
            let (twice, n) = without_unknown_ies(&once);
            prop_assert_eq!(&once[..], &twice[..]);
            prop_assert_eq!(n, 0);
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&b);
        }

        /// The in-place reading agrees with rs-pfcp's on every input.
        #[test]
        fn decode_view_agrees_with_decode(b in proptest::collection::vec(any::<u8>(), 0..200), t in any::<u8>(), vendor in any::<bool>()) {
            // Also well-formed messages with random IEs after a real header.
            let mut m = encode(50 + (t % 8), Some(1), 7, &[]);
            m.extend_from_slice(&b);
            if vendor && m.len() > 16 { m[16] |= 0x80; }
            let len = (m.len() - 4) as u16;
            m[2..4].copy_from_slice(&len.to_be_bytes());
            for input in [&b[..], &m[..]] {
                match (decode(input), decode_view(input)) {
                    (Ok((h1, a)), Ok((h2, v))) => {
                        prop_assert_eq!(h1, h2);
                        prop_assert_eq!(a.len(), v.len());
                        for (x, y) in a.iter().zip(&v) {
                            prop_assert_eq!(x.ie_type, y.ie_type);
                            prop_assert_eq!(&x.payload[..], y.payload);
                        }
                    }
                    (Err(e1), Err(e2)) => prop_assert_eq!(e1, e2),
                    (x, y) => prop_assert!(false, "{:?} vs {:?}", x.is_ok(), y.is_ok()),
                }
            }
        }
    }
}
