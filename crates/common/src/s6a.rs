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

// ---- HSS -> MME requests (TS 29.272 5.2.1.2) ----

/// Cancellation-Type (TS 29.272 7.3.24): why the HSS cancels a location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancellationType {
    /// The UE registered at another MME (TS 23.401 5.3.3.1 step 8).
    MmeUpdateProcedure,
    SgsnUpdateProcedure,
    /// The subscription was withdrawn (TS 23.401 5.3.8.4).
    SubscriptionWithdrawal,
    UpdateProcedureIwf,
    /// The UE attached at another MME (TS 23.401 5.3.2.1 step 8).
    InitialAttachProcedure,
}

impl CancellationType {
    /// The Enumerated value on the wire.
    pub fn code(&self) -> u32 {
        match self {
            CancellationType::MmeUpdateProcedure => 0,
            CancellationType::SgsnUpdateProcedure => 1,
            CancellationType::SubscriptionWithdrawal => 2,
            CancellationType::UpdateProcedureIwf => 3,
            CancellationType::InitialAttachProcedure => 4,
        }
    }
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            0 => CancellationType::MmeUpdateProcedure,
            1 => CancellationType::SgsnUpdateProcedure,
            2 => CancellationType::SubscriptionWithdrawal,
            3 => CancellationType::UpdateProcedureIwf,
            4 => CancellationType::InitialAttachProcedure,
            _ => return None,
        })
    }
}

/// Cancel-Location-Request (TS 29.272 5.2.1.2, 7.2.7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelLocationRequest {
    pub imsi: Imsi,
    pub cancellation_type: CancellationType,
    /// CLR-Flags (TS 29.272 7.3.152), 0 when absent.
    #[serde(default)]
    pub flags: u32,
}

/// A request the HSS sends the MME.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S6aIncomingRequest {
    CancelLocation(CancelLocationRequest),
}

/// The MME's answer to an [`S6aIncomingRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S6aIncomingAnswer {
    /// Cancel-Location-Answer (TS 29.272 7.2.8): DIAMETER_SUCCESS or the error.
    CancelLocation(Result<(), S6aError>),
}

/// A request from the HSS and where its answer goes (like
/// [`crate::s11::IncomingS11`]); dropping `reply` answers
/// DIAMETER_UNABLE_TO_COMPLY.
#[derive(Debug)]
pub struct S6aIncoming {
    pub request: S6aIncomingRequest,
    pub reply: tokio::sync::oneshot::Sender<S6aIncomingAnswer>,
}

/// The MME's end of its S6a client task: requests it sends (and their
/// answers) and requests the HSS sends it.
pub struct S6aLink {
    pub requests: crate::requester::Requester<S6aRequest, S6aAnswer>,
    pub incoming: tokio::sync::mpsc::Receiver<S6aIncoming>,
}

/// The client task's end of an [`S6aLink`].
pub struct S6aLinkTask {
    pub requests: tokio::sync::mpsc::Receiver<crate::requester::Pending<S6aRequest, S6aAnswer>>,
    pub incoming: tokio::sync::mpsc::Sender<S6aIncoming>,
}

impl S6aLink {
    /// Both ends, each channel holding up to `capacity` messages.
    pub fn channel(capacity: usize) -> (S6aLink, S6aLinkTask) {
        let (requests, requests_rx) = crate::requester::Requester::channel(capacity);
        let (incoming_tx, incoming) = tokio::sync::mpsc::channel(capacity);
        (S6aLink { requests, incoming }, S6aLinkTask { requests: requests_rx, incoming: incoming_tx })
    }
}
