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
    pub const AUTHENTICATION_INFORMATION: u32 = 318;
    pub const PURGE_UE: u32 = 321;
}

/// Result-Code values (RFC 6733 7.1) and the S6a Experimental-Result-Codes
/// (TS 29.272 7.4.3, 7.4.4).
pub mod result {
    pub const DIAMETER_SUCCESS: u32 = 2001;
    pub const DIAMETER_COMMAND_UNSUPPORTED: u32 = 3001;
    pub const DIAMETER_UNABLE_TO_DELIVER: u32 = 3002;
    pub const DIAMETER_REALM_NOT_SERVED: u32 = 3003;
    pub const DIAMETER_TOO_BUSY: u32 = 3004;
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
    /// Whether the M-bit "must" be set.
    pub mandatory: bool,
}

macro_rules! avps {
    ($($(#[$m:meta])* $id:ident = $name:literal, $code:literal, $vendor:expr, $mand:literal;)*) => {
        $( $(#[$m])* pub const $id: AvpDef = AvpDef { name: $name, code: $code, vendor_id: $vendor, mandatory: $mand }; )*
        /// Every AVP this dictionary knows.
        pub const ALL: &[AvpDef] = &[$($id),*];
    };
}

const V: Option<u32> = Some(VENDOR_3GPP);

/// AVP definitions, after RFC 6733 4.5 and TS 29.272 table 7.3.1.
pub mod avp {
    use super::*;
    avps! {
        USER_NAME = "User-Name", 1, None, true;
        HOST_IP_ADDRESS = "Host-IP-Address", 257, None, true;
        AUTH_APPLICATION_ID = "Auth-Application-Id", 258, None, true;
        ACCT_APPLICATION_ID = "Acct-Application-Id", 259, None, true;
        VENDOR_SPECIFIC_APPLICATION_ID = "Vendor-Specific-Application-Id", 260, None, true;
        SESSION_ID = "Session-Id", 263, None, true;
        ORIGIN_HOST = "Origin-Host", 264, None, true;
        SUPPORTED_VENDOR_ID = "Supported-Vendor-Id", 265, None, true;
        VENDOR_ID = "Vendor-Id", 266, None, true;
        FIRMWARE_REVISION = "Firmware-Revision", 267, None, false;
        RESULT_CODE = "Result-Code", 268, None, true;
        PRODUCT_NAME = "Product-Name", 269, None, false;
        DISCONNECT_CAUSE = "Disconnect-Cause", 273, None, true;
        AUTH_SESSION_STATE = "Auth-Session-State", 277, None, true;
        ORIGIN_STATE_ID = "Origin-State-Id", 278, None, true;
        FAILED_AVP = "Failed-AVP", 279, None, true;
        ERROR_MESSAGE = "Error-Message", 281, None, false;
        DESTINATION_REALM = "Destination-Realm", 283, None, true;
        DESTINATION_HOST = "Destination-Host", 293, None, true;
        ORIGIN_REALM = "Origin-Realm", 296, None, true;
        EXPERIMENTAL_RESULT = "Experimental-Result", 297, None, true;
        EXPERIMENTAL_RESULT_CODE = "Experimental-Result-Code", 298, None, true;
        INBAND_SECURITY_ID = "Inband-Security-Id", 299, None, true;
        SERVICE_SELECTION = "Service-Selection", 493, None, true;
        MAX_REQUESTED_BANDWIDTH_DL = "Max-Requested-Bandwidth-DL", 515, V, true;
        MAX_REQUESTED_BANDWIDTH_UL = "Max-Requested-Bandwidth-UL", 516, V, true;
        SUPPORTED_FEATURES = "Supported-Features", 628, V, true;
        FEATURE_LIST_ID = "Feature-List-ID", 629, V, true;
        FEATURE_LIST = "Feature-List", 630, V, true;
        MSISDN = "MSISDN", 701, V, true;
        QOS_CLASS_IDENTIFIER = "QoS-Class-Identifier", 1028, V, true;
        /// TS 29.212 5.3.31: M-bit not set.
        RAT_TYPE = "RAT-Type", 1032, V, false;
        ALLOCATION_RETENTION_PRIORITY = "Allocation-Retention-Priority", 1034, V, true;
        PRIORITY_LEVEL = "Priority-Level", 1046, V, true;
        PRE_EMPTION_CAPABILITY = "Pre-emption-Capability", 1047, V, true;
        PRE_EMPTION_VULNERABILITY = "Pre-emption-Vulnerability", 1048, V, true;
        SUBSCRIPTION_DATA = "Subscription-Data", 1400, V, true;
        ULR_FLAGS = "ULR-Flags", 1405, V, true;
        ULA_FLAGS = "ULA-Flags", 1406, V, true;
        VISITED_PLMN_ID = "Visited-PLMN-Id", 1407, V, true;
        REQUESTED_EUTRAN_AUTHENTICATION_INFO = "Requested-EUTRAN-Authentication-Info", 1408, V, true;
        NUMBER_OF_REQUESTED_VECTORS = "Number-Of-Requested-Vectors", 1410, V, true;
        RE_SYNCHRONIZATION_INFO = "Re-Synchronization-Info", 1411, V, true;
        IMMEDIATE_RESPONSE_PREFERRED = "Immediate-Response-Preferred", 1412, V, true;
        AUTHENTICATION_INFO = "Authentication-Info", 1413, V, true;
        E_UTRAN_VECTOR = "E-UTRAN-Vector", 1414, V, true;
        NETWORK_ACCESS_MODE = "Network-Access-Mode", 1417, V, true;
        ITEM_NUMBER = "Item-Number", 1419, V, true;
        CONTEXT_IDENTIFIER = "Context-Identifier", 1423, V, true;
        SUBSCRIBER_STATUS = "Subscriber-Status", 1424, V, true;
        ALL_APN_CONFIGURATIONS_INCLUDED_INDICATOR = "All-APN-Configurations-Included-Indicator", 1428, V, true;
        APN_CONFIGURATION_PROFILE = "APN-Configuration-Profile", 1429, V, true;
        APN_CONFIGURATION = "APN-Configuration", 1430, V, true;
        EPS_SUBSCRIBED_QOS_PROFILE = "EPS-Subscribed-QoS-Profile", 1431, V, true;
        AMBR = "AMBR", 1435, V, true;
        PUA_FLAGS = "PUA-Flags", 1442, V, true;
        RAND = "RAND", 1447, V, true;
        XRES = "XRES", 1448, V, true;
        AUTN = "AUTN", 1449, V, true;
        KASME = "KASME", 1450, V, true;
        PDN_TYPE = "PDN-Type", 1456, V, true;
        /// TS 29.272 7.3.149: M-bit not set.
        PUR_FLAGS = "PUR-Flags", 1635, V, false;
    }

    /// The definition of an AVP code and vendor, if this dictionary knows it.
    pub fn lookup(code: u32, vendor_id: Option<u32>) -> Option<&'static AvpDef> {
        ALL.iter().find(|d| d.code == code && d.vendor_id == vendor_id)
    }
}

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
