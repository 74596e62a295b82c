//! S6a procedures as typed values (TS 29.272 5.2), independent of Diameter.
//! The MME core emits [`S6aRequest`]s and consumes [`S6aAnswer`]s; the
//! Diameter client in `mobicore-diameter` encodes them.

use crate::{Ambr, Arp, Imsi, PdnType, Plmn};
use serde::{Deserialize, Serialize};

/// One E-UTRAN authentication vector (TS 33.401 6.1.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EutranVector {
    pub rand: [u8; 16],
    pub xres: Vec<u8>,
    pub autn: [u8; 16],
    pub kasme: [u8; 32],
}

/// Re-synchronisation-Info AVP content: RAND || AUTS (TS 29.272 7.3.15).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResyncInfo {
    pub rand: [u8; 16],
    pub auts: [u8; 14],
}

/// Authentication-Information-Request (TS 29.272 5.2.3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthInfoRequest {
    pub imsi: Imsi,
    pub visited_plmn: Plmn,
    pub num_vectors: u32,
    pub resync: Option<ResyncInfo>,
}

/// Terminal-Information (TS 29.272 7.3.3): the identity of the ME the MME
/// learned (IMEISV from Security Mode Complete or Identity Response).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalInformation {
    /// IMEI (7.3.4): the 14 digits TAC || SNR (TS 23.003 6.2.1), without
    /// the check digit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imei: Option<String>,
    /// Software-Version (7.3.5): the 2 SVN digits (TS 23.003 6.2.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software_version: Option<String>,
    /// 3GPP2-MEID (7.3.6), as received (3GPP2 terminals only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meid: Option<Vec<u8>>,
}

/// Update-Location-Request (TS 29.272 5.2.1.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateLocationRequest {
    pub imsi: Imsi,
    pub visited_plmn: Plmn,
    /// ULR-Flags (TS 29.272 7.3.7); bit 1 S6a/S6d indicator.
    pub flags: u32,
    /// Terminal-Information (TS 29.272 7.3.3), sent by the MME when it
    /// knows the IMEI(SV); the HSS stores it.
    #[serde(default)]
    pub terminal_information: Option<TerminalInformation>,
}

/// Purge-UE-Request (TS 29.272 5.2.1.3); sent on detach where configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeUeRequest {
    pub imsi: Imsi,
}

/// APN-Configuration (TS 29.272 7.3.35).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApnConfiguration {
    pub context_identifier: u32,
    pub service_selection: String,
    pub pdn_type: PdnType,
    pub qci: u8,
    pub arp: Arp,
    pub ambr: Ambr,
    /// The PDN GW allocated to this APN (MIP6-Agent-Info /
    /// MIP-Home-Agent-Address, TS 29.272 7.3.45), if the HSS names one.
    #[serde(default)]
    pub pdn_gw: Option<std::net::IpAddr>,
    /// A static UE IPv4 address (Served-Party-IP-Address, TS 29.272 7.3.44).
    #[serde(default)]
    pub served_party_ipv4: Option<std::net::Ipv4Addr>,
}

/// Subscription-Data of an Update-Location-Answer (TS 29.272 7.3.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionData {
    pub msisdn: Option<String>,
    pub ue_ambr: Ambr,
    pub default_context_identifier: u32,
    pub apns: Vec<ApnConfiguration>,
}

impl SubscriptionData {
    pub fn default_apn(&self) -> Option<&ApnConfiguration> {
        self.apns.iter().find(|a| a.context_identifier == self.default_context_identifier).or_else(|| self.apns.first())
    }
}

/// The failure a Diameter answer carries: Result-Code or
/// Experimental-Result-Code (TS 29.272 7.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum S6aError {
    #[error("DIAMETER_ERROR_USER_UNKNOWN (5001)")]
    UserUnknown,
    #[error("DIAMETER_ERROR_ROAMING_NOT_ALLOWED (5004)")]
    RoamingNotAllowed,
    #[error("DIAMETER_ERROR_UNKNOWN_EPS_SUBSCRIPTION (5420)")]
    UnknownEpsSubscription,
    #[error("DIAMETER_ERROR_RAT_NOT_ALLOWED (5421)")]
    RatNotAllowed,
    #[error("DIAMETER_AUTHENTICATION_DATA_UNAVAILABLE (4181)")]
    AuthenticationDataUnavailable,
    #[error("DIAMETER_UNABLE_TO_COMPLY (5012)")]
    UnableToComply,
    #[error("Diameter result code {0}")]
    Other(u32),
}

impl S6aError {
    /// The (Experimental-)Result-Code value on the wire.
    pub fn code(&self) -> u32 {
        match self {
            S6aError::UserUnknown => 5001,
            S6aError::RoamingNotAllowed => 5004,
            S6aError::UnknownEpsSubscription => 5420,
            S6aError::RatNotAllowed => 5421,
            S6aError::AuthenticationDataUnavailable => 4181,
            S6aError::UnableToComply => 5012,
            S6aError::Other(c) => *c,
        }
    }
    /// Whether the code travels in Experimental-Result (3GPP-specific codes).
    pub fn is_experimental(&self) -> bool {
        matches!(
            self,
            S6aError::UserUnknown
                | S6aError::RoamingNotAllowed
                | S6aError::UnknownEpsSubscription
                | S6aError::RatNotAllowed
                | S6aError::AuthenticationDataUnavailable
        )
    }
    pub fn from_code(code: u32) -> Self {
        match code {
            5001 => S6aError::UserUnknown,
            5004 => S6aError::RoamingNotAllowed,
            5420 => S6aError::UnknownEpsSubscription,
            5421 => S6aError::RatNotAllowed,
            4181 => S6aError::AuthenticationDataUnavailable,
            5012 => S6aError::UnableToComply,
            c => S6aError::Other(c),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S6aRequest {
    AuthenticationInformation(AuthInfoRequest),
    UpdateLocation(UpdateLocationRequest),
    PurgeUe(PurgeUeRequest),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S6aAnswer {
    AuthenticationInformation(Result<Vec<EutranVector>, S6aError>),
    UpdateLocation(Result<SubscriptionData, S6aError>),
    PurgeUe(Result<(), S6aError>),
}
