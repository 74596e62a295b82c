//! The dictionary: command codes, application ids, Result-Codes and AVP
//! definitions of the Diameter base protocol (RFC 6733) and of S6a
//! (TS 29.272 7), with the flag rules of their tables (RFC 6733 4.5,
//! TS 29.272 table 7.3.1).

use crate::avp::AvpRepr;

/// 3GPP vendor id (TS 29.272 7.3).
pub const VENDOR_3GPP: u32 = 10415;

/// Application ids (RFC 6733 2.4, TS 29.272 7.1.8).
pub mod app {
    pub const COMMON: u32 = 0;
    pub const S6A: u32 = 16777251;
    pub const RELAY: u32 = 0xffff_ffff;
}

/// Command codes (RFC 6733 3.1, TS 29.272 7.2.1).
pub mod cmd {
    pub const CAPABILITIES_EXCHANGE: u32 = 257;
    pub const DEVICE_WATCHDOG: u32 = 280;
    pub const DISCONNECT_PEER: u32 = 282;
    pub const UPDATE_LOCATION: u32 = 316;
    pub const CANCEL_LOCATION: u32 = 317;
    pub const AUTHENTICATION_INFORMATION: u32 = 318;
    pub const INSERT_SUBSCRIBER_DATA: u32 = 319;
    pub const DELETE_SUBSCRIBER_DATA: u32 = 320;
    pub const PURGE_UE: u32 = 321;
    pub const RESET: u32 = 322;
    pub const NOTIFY: u32 = 323;
}

/// Result-Code values (RFC 6733 7.1) and the S6a Experimental-Result-Codes
/// (TS 29.272 7.4.3, 7.4.4).
pub mod result {
    pub const DIAMETER_SUCCESS: u32 = 2001;
    pub const DIAMETER_COMMAND_UNSUPPORTED: u32 = 3001;
    pub const DIAMETER_UNABLE_TO_DELIVER: u32 = 3002;
    pub const DIAMETER_REALM_NOT_SERVED: u32 = 3003;
    pub const DIAMETER_TOO_BUSY: u32 = 3004;
    pub const DIAMETER_LOOP_DETECTED: u32 = 3005;
    pub const DIAMETER_APPLICATION_UNSUPPORTED: u32 = 3007;
    pub const DIAMETER_INVALID_HDR_BITS: u32 = 3008;
    pub const DIAMETER_INVALID_AVP_BITS: u32 = 3009;
    pub const DIAMETER_UNKNOWN_PEER: u32 = 3010;
    pub const DIAMETER_AVP_UNSUPPORTED: u32 = 5001;
    pub const DIAMETER_INVALID_AVP_VALUE: u32 = 5004;
    pub const DIAMETER_MISSING_AVP: u32 = 5005;
    pub const DIAMETER_NO_COMMON_APPLICATION: u32 = 5010;
    pub const DIAMETER_UNSUPPORTED_VERSION: u32 = 5011;
    pub const DIAMETER_UNABLE_TO_COMPLY: u32 = 5012;
    pub const DIAMETER_INVALID_AVP_LENGTH: u32 = 5014;
    pub const DIAMETER_INVALID_MESSAGE_LENGTH: u32 = 5015;

    /// Whether a Result-Code is a protocol error, answered with the E-bit
    /// set in the answer-message format (RFC 6733 7.1.3, 7.2).
    pub fn is_protocol_error(code: u32) -> bool {
        (3000..4000).contains(&code)
    }
}

/// An AVP definition: code, vendor and the flag rule of its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AvpDef {
    pub name: &'static str,
    pub code: u32,
    /// `Some(10415)` for 3GPP AVPs: V-bit set and Vendor-ID present.
    pub vendor_id: Option<u32>,
    /// Whether we set the M-bit when we send it (the "must" column of
    /// the flag rules; "must not" and "may" AVPs are sent without it).
    pub mandatory: bool,
    pub ty: AvpType,
}

/// The Diameter basic data types (RFC 6733 4.2, 4.3) an AVP carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvpType {
    OctetString,
    Integer32,
    Unsigned32,
    Unsigned64,
    Enumerated,
    Utf8String,
    DiameterIdentity,
    Address,
    Time,
    Grouped,
}

macro_rules! avps {
    ($($(#[$m:meta])* $id:ident = $name:literal, $code:literal, $vendor:expr, $mand:literal, $ty:ident;)*) => {
        $( $(#[$m])* pub const $id: AvpDef = AvpDef {
            name: $name, code: $code, vendor_id: $vendor, mandatory: $mand, ty: AvpType::$ty,
        }; )*
        /// Every AVP this dictionary knows.
        pub const ALL: &[AvpDef] = &[$($id),*];
    };
}

const V: Option<u32> = Some(VENDOR_3GPP);

pub mod avp;
pub mod grammar;

impl AvpDef {
    fn make(&self, data: Vec<u8>) -> AvpRepr {
        AvpRepr { code: self.code, vendor_id: self.vendor_id, mandatory: self.mandatory, protected: false, data }
    }
    /// Unsigned32 / Enumerated / AppId / VendorId (RFC 6733 4.2, 4.3).
    pub fn u32(&self, v: u32) -> AvpRepr {
        self.make(v.to_be_bytes().to_vec())
    }
    /// OctetString.
    pub fn octets(&self, v: &[u8]) -> AvpRepr {
        self.make(v.to_vec())
    }
    /// UTF8String / DiameterIdentity.
    pub fn utf8(&self, v: &str) -> AvpRepr {
        self.make(v.as_bytes().to_vec())
    }
    /// Address (RFC 6733 4.3.1): AddressType (1 IPv4, 2 IPv6) then octets.
    pub fn address(&self, ip: std::net::IpAddr) -> AvpRepr {
        let mut d = Vec::with_capacity(18);
        match ip {
            std::net::IpAddr::V4(a) => {
                d.extend_from_slice(&1u16.to_be_bytes());
                d.extend_from_slice(&a.octets());
            }
            std::net::IpAddr::V6(a) => {
                d.extend_from_slice(&2u16.to_be_bytes());
                d.extend_from_slice(&a.octets());
            }
        }
        self.make(d)
    }
    /// Grouped (RFC 6733 4.4): the children emitted back to back.
    pub fn grouped(&self, children: &[AvpRepr]) -> AvpRepr {
        let mut d = Vec::with_capacity(children.iter().map(|c| c.buffer_len()).sum());
        for c in children {
            c.emit_into(&mut d);
        }
        self.make(d)
    }
    /// Whether `avp` is an instance of this definition.
    pub fn matches(&self, avp: &AvpRepr) -> bool {
        avp.code == self.code && avp.vendor_id == self.vendor_id
    }
}
