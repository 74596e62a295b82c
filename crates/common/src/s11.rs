//! S11 procedures as typed values (TS 29.274 7.2), independent of GTPv2-C.
//! The MME core emits [`S11Request`]s and consumes [`S11Response`]s; the
//! GTPv2-C client in `mobicore-gtp` encodes them, numbers them and
//! retransmits them (T3/N3).

use crate::{Ambr, Arp, Ebi, Ecgi, Fteid, Imsi, PdnType, Plmn, Tai, Teid};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, Ipv6Addr};

/// GTPv2-C Cause values used on S11 (TS 29.274 8.4, Table 8.4-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GtpCause(pub u8);

impl GtpCause {
    pub const REQUEST_ACCEPTED: Self = Self(16);
    pub const CONTEXT_NOT_FOUND: Self = Self(64);
    pub const INVALID_MESSAGE_FORMAT: Self = Self(65);
    pub const INVALID_LENGTH: Self = Self(67);
    pub const MANDATORY_IE_INCORRECT: Self = Self(69);
    pub const MANDATORY_IE_MISSING: Self = Self(70);
    pub const SYSTEM_FAILURE: Self = Self(72);
    pub const NO_RESOURCES_AVAILABLE: Self = Self(73);
    pub const MISSING_OR_UNKNOWN_APN: Self = Self(78);
    pub const ALL_DYNAMIC_ADDRESSES_OCCUPIED: Self = Self(84);
    pub const REQUEST_REJECTED: Self = Self(94);

    pub fn is_accepted(&self) -> bool {
        (16..=63).contains(&self.0)
    }
}

/// Bearer Context to be created (TS 29.274 Table 7.2.1-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BearerContextToCreate {
    pub ebi: Ebi,
    pub qci: u8,
    pub arp: Arp,
}

/// Create Session Request (TS 29.274 7.2.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateSessionRequest {
    pub imsi: Imsi,
    pub msisdn: Option<String>,
    pub serving_network: Plmn,
    pub tai: Tai,
    pub ecgi: Ecgi,
    /// Sender F-TEID for Control Plane: the MME's S11 F-TEID.
    pub sender_fteid: Fteid,
    pub apn: String,
    pub pdn_type: PdnType,
    pub apn_ambr: Ambr,
    pub bearer: BearerContextToCreate,
    /// PGW S5/S8 Address for Control Plane (F-TEID IE instance 1, TEID 0;
    /// TS 29.274 Table 7.2.1-1: sent on S11), the PGW chosen for the APN.
    pub pgw_s5s8_c: Option<Ipv4Addr>,
    /// A static UE address (the PAA of the request, TS 29.274 8.14) from
    /// the subscription (Served-Party-IP-Address, TS 29.272 7.3.44).
    pub static_ipv4: Option<Ipv4Addr>,
    /// Protocol Configuration Options from the UE (TS 24.008 10.5.6.3),
    /// the value octets, relayed as the PCO (or ePCO) IE.
    pub pco: Option<Vec<u8>>,
    /// MEI (TS 29.274 8.10): the IMEISV digits, sent "if available".
    pub mei: Option<String>,
}

/// Create Session Response (TS 29.274 7.2.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateSessionResponse {
    pub cause: GtpCause,
    /// The SGW's S11 F-TEID; absent on rejection.
    pub sgw_fteid: Option<Fteid>,
    pub paa: Option<Ipv4Addr>,
    pub apn_ambr: Option<Ambr>,
    pub bearer_ebi: Ebi,
    pub bearer_cause: GtpCause,
    /// S1-U SGW F-TEID of the default bearer.
    pub s1u_sgw_fteid: Option<Fteid>,
    /// PGW S5/S8-C F-TEID (TS 29.274 Table 7.2.2-1, instance 1).
    pub pgw_s5s8_c_fteid: Option<Fteid>,
    pub charging_id: Option<u32>,
    /// The PDN type granted (with `paa` and/or `ipv6_prefix`).
    pub pdn_type: Option<PdnType>,
    /// The IPv6 prefix granted (TS 29.274 8.14: /64 for a UE).
    pub ipv6_prefix: Option<(Ipv6Addr, u8)>,
    /// PCO for the UE (DNS servers, IPv4 link MTU), the value octets.
    pub pco: Option<Vec<u8>>,
}

/// Modify Bearer Request (TS 29.274 7.2.7) after Initial Context Setup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModifyBearerRequest {
    pub sgw_teid: Teid,
    pub ebi: Ebi,
    pub s1u_enb_fteid: Fteid,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModifyBearerResponse {
    pub cause: GtpCause,
    pub bearer_cause: Option<GtpCause>,
}

/// Delete Session Request (TS 29.274 7.2.9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteSessionRequest {
    pub sgw_teid: Teid,
    /// The PDN connection's default bearer; Ebi(0) (no bearer's) when a
    /// received request carried no Linked EBI.
    pub linked_ebi: Ebi,
}

/// Release Access Bearers Request (TS 29.274 7.2.21).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseAccessBearersRequest {
    pub sgw_teid: Teid,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S11Request {
    CreateSession(CreateSessionRequest),
    ModifyBearer(ModifyBearerRequest),
    DeleteSession(DeleteSessionRequest),
    ReleaseAccessBearers(ReleaseAccessBearersRequest),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S11Response {
    CreateSession(CreateSessionResponse),
    ModifyBearer(ModifyBearerResponse),
    /// Delete Session Response carries only a Cause.
    DeleteSession(GtpCause),
    /// Release Access Bearers Response carries only a Cause.
    ReleaseAccessBearers(GtpCause),
}
