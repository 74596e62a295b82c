//! PFCP framing glue over rs-pfcp (TS 29.244 7.2): a checked header read,
//! the top-level IE list, and building a message from IEs.

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
    let h = PfcpHeader { version: b[0] >> 5, msg_type: b[1], seid, seq: u32::from_be_bytes([0, b[o], b[o + 1], b[o + 2]]) };
    let mut ies = Vec::new();
    let mut off = hlen;
    while off < total {
        let ie = Ie::unmarshal(&b[off..total]).map_err(|e| FrameError::Ies(h, e))?;
        off += ie.len() as usize;
        ies.push(ie);
    }
    Ok((h, ies))
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

pub fn first(ies: &[Ie], t: IeType) -> Option<&Ie> {
    ies.iter().find(|i| i.ie_type == t)
}

pub fn all(ies: &[Ie], t: IeType) -> impl Iterator<Item = &Ie> {
    ies.iter().filter(move |i| i.ie_type == t)
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

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&b);
        }
    }
}
