//! Type-length-value lists: INIT/INIT ACK parameters (RFC 9260 3.2.1) and
//! error causes (RFC 9260 3.3.10) share this layout, padded to 4 bytes.

use super::{be16, pad4, WireError};

/// INIT parameter types (RFC 9260 3.3.2.1, 3.3.3.1).
pub mod param {
    pub const HEARTBEAT_INFO: u16 = 1;
    pub const IPV4_ADDRESS: u16 = 5;
    pub const IPV6_ADDRESS: u16 = 6;
    pub const STATE_COOKIE: u16 = 7;
    pub const UNRECOGNIZED_PARAMETER: u16 = 8;
    pub const COOKIE_PRESERVATIVE: u16 = 9;
    pub const HOST_NAME_ADDRESS: u16 = 11;
    pub const SUPPORTED_ADDRESS_TYPES: u16 = 12;
    pub const ECN_CAPABLE: u16 = 0x8000;
    pub const FORWARD_TSN_SUPPORTED: u16 = 0xc000;
}

/// Error cause codes (RFC 9260 3.3.10).
pub mod cause {
    pub const INVALID_STREAM_IDENTIFIER: u16 = 1;
    pub const MISSING_MANDATORY_PARAMETER: u16 = 2;
    pub const STALE_COOKIE: u16 = 3;
    pub const OUT_OF_RESOURCE: u16 = 4;
    pub const UNRECOGNIZED_CHUNK_TYPE: u16 = 6;
    pub const INVALID_MANDATORY_PARAMETER: u16 = 7;
    pub const UNRECOGNIZED_PARAMETERS: u16 = 8;
    pub const NO_USER_DATA: u16 = 9;
    pub const COOKIE_WHILE_SHUTTING_DOWN: u16 = 10;
    pub const USER_INITIATED_ABORT: u16 = 12;
    pub const PROTOCOL_VIOLATION: u16 = 13;

    /// A human name for logs and Down reasons.
    pub fn name(code: u16) -> &'static str {
        match code {
            1 => "invalid stream identifier",
            2 => "missing mandatory parameter",
            3 => "stale cookie",
            4 => "out of resource",
            5 => "unresolvable address",
            6 => "unrecognized chunk type",
            7 => "invalid mandatory parameter",
            8 => "unrecognized parameters",
            9 => "no user data",
            10 => "cookie received while shutting down",
            11 => "restart with new addresses",
            12 => "user-initiated abort",
            13 => "protocol violation",
            _ => "unknown cause",
        }
    }
}

/// One TLV: its type and value (without padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    pub ty: u16,
    pub value: &'a [u8],
}

impl<'a> Tlv<'a> {
    pub fn buffer_len(&self) -> usize {
        pad4(4 + self.value.len())
    }
    /// Write type, length, value and zero padding; `buf` must be `buffer_len()` long at least.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let len = 4 + self.value.len();
        buf[0..2].copy_from_slice(&self.ty.to_be_bytes());
        buf[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        buf[4..len].copy_from_slice(self.value);
        let padded = pad4(len);
        buf[len..padded].fill(0);
        padded
    }
    /// Append to a vector.
    pub fn push(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + self.buffer_len(), 0);
        self.emit(&mut out[at..]);
    }
}

/// Iterator over a TLV list; yields an error (once) on a malformed rest.
#[derive(Debug, Clone)]
pub struct Tlvs<'a> {
    rest: &'a [u8],
}

impl<'a> Tlvs<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Tlvs { rest: bytes }
    }
    /// Check the whole list is well formed.
    pub fn validate(bytes: &'a [u8]) -> Result<(), WireError> {
        Tlvs::new(bytes).try_for_each(|t| t.map(|_| ()))
    }
}

impl<'a> Iterator for Tlvs<'a> {
    type Item = Result<Tlv<'a>, WireError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let r = self.rest;
        if r.len() < 4 {
            self.rest = &[];
            return Some(Err(WireError::Truncated));
        }
        let ty = be16(r, 0);
        let len = be16(r, 2) as usize;
        if len < 4 || len > r.len() {
            self.rest = &[];
            return Some(Err(WireError::BadLength));
        }
        let value = &r[4..len];
        self.rest = &r[pad4(len).min(r.len())..];
        Some(Ok(Tlv { ty, value }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tlv_round_trip_with_padding() {
        let mut out = Vec::new();
        Tlv { ty: param::STATE_COOKIE, value: &[1, 2, 3, 4, 5] }.push(&mut out);
        Tlv { ty: param::SUPPORTED_ADDRESS_TYPES, value: &[0, 5] }.push(&mut out);
        assert_eq!(out.len(), 12 + 8);
        assert_eq!(&out[..10], &[0, 7, 0, 9, 1, 2, 3, 4, 5, 0]);
        let v: Vec<_> = Tlvs::new(&out).map(|t| t.unwrap()).collect();
        assert_eq!(v[0], Tlv { ty: 7, value: &[1, 2, 3, 4, 5] });
        assert_eq!(v[1], Tlv { ty: 12, value: &[0, 5] });
    }

    #[test]
    fn bad_length_is_an_error() {
        assert!(Tlvs::validate(&[0, 7, 0, 3]).is_err());
        assert!(Tlvs::validate(&[0, 7, 0, 9, 1]).is_err());
        assert!(Tlvs::validate(&[0, 7]).is_err());
    }
}
