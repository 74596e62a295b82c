//! The command grammars (CCF, RFC 6733 3.2) of the S6a commands we take or
//! send (TS 29.272 7.2.3 to 7.2.8, 7.2.13, 7.2.14), and of the Grouped AVPs
//! we read. Each lists the AVPs the command may carry, so that "part of the
//! command" is a fact of the dictionary: every S6a command ends in
//! `*[ AVP ]`, so an AVP the dictionary knows is never refused, and one it
//! does not know is refused only when its M-bit is set (RFC 6733 6.1.8,
//! 7.5, DIAMETER_AVP_UNSUPPORTED).

use super::avp::*;
use super::{cmd, AvpDef};

/// How often an AVP occurs in a grammar (RFC 6733 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occurs {
    /// `< AVP >`: required, at a fixed position.
    Fixed,
    /// `{ AVP }`: required once.
    Required,
    /// `[ AVP ]`: at most once.
    Optional,
    /// `*[ AVP ]` (or `*n[ AVP ]`): any number.
    Many,
}

/// A command or Grouped AVP grammar.
#[derive(Debug)]
pub struct Grammar {
    pub name: &'static str,
    pub rules: &'static [(AvpDef, Occurs)],
    /// Ends in `*[ AVP ]`: AVPs not named may follow.
    pub any_avp: bool,
}

impl Grammar {
    /// Whether `def` is named by this grammar.
    pub fn names(&self, def: &AvpDef) -> bool {
        self.rules.iter().any(|(d, _)| d == def)
    }
    /// The AVPs that must be present (`< >` and `{ }`).
    pub fn required(&self) -> impl Iterator<Item = &AvpDef> {
        self.rules.iter().filter(|(_, o)| matches!(o, Occurs::Fixed | Occurs::Required)).map(|(d, _)| d)
    }
}

use Occurs::*;

macro_rules! grammar {
    ($id:ident, $name:literal, [$($def:ident: $o:ident),* $(,)?], $any:literal) => {
        pub const $id: Grammar = Grammar { name: $name, rules: &[$(($def, $o)),*], any_avp: $any };
    };
}

// TS 29.272 7.2.3
grammar!(ULR, "Update-Location-Request", [
    SESSION_ID: Fixed, DRMP: Optional, VENDOR_SPECIFIC_APPLICATION_ID: Optional, AUTH_SESSION_STATE: Required,
    ORIGIN_HOST: Required, ORIGIN_REALM: Required, DESTINATION_HOST: Optional, DESTINATION_REALM: Required,
    USER_NAME: Required, OC_SUPPORTED_FEATURES: Optional, SUPPORTED_FEATURES: Many, TERMINAL_INFORMATION: Optional,
    RAT_TYPE: Required, ULR_FLAGS: Required, UE_SRVCC_CAPABILITY: Optional, VISITED_PLMN_ID: Required,
    SGSN_NUMBER: Optional, HOMOGENEOUS_SUPPORT_OF_IMS_VOICE_OVER_PS_SESSIONS: Optional, GMLC_ADDRESS: Optional,
    ACTIVE_APN: Many, EQUIVALENT_PLMN_LIST: Optional, MME_NUMBER_FOR_MT_SMS: Optional, SMS_REGISTER_REQUEST: Optional,
    SGS_MME_IDENTITY: Optional, COUPLED_NODE_DIAMETER_ID: Optional, ADJACENT_PLMNS: Optional,
    SUPPORTED_SERVICES: Optional, PROXY_INFO: Many, ROUTE_RECORD: Many,
], true);

// TS 29.272 7.2.4
grammar!(ULA, "Update-Location-Answer", [
    SESSION_ID: Fixed, DRMP: Optional, VENDOR_SPECIFIC_APPLICATION_ID: Optional, RESULT_CODE: Optional,
    EXPERIMENTAL_RESULT: Optional, ERROR_DIAGNOSTIC: Optional, AUTH_SESSION_STATE: Required, ORIGIN_HOST: Required,
    ORIGIN_REALM: Required, OC_SUPPORTED_FEATURES: Optional, OC_OLR: Optional, LOAD: Many, SUPPORTED_FEATURES: Many,
    ULA_FLAGS: Optional, SUBSCRIPTION_DATA: Optional, RESET_ID: Many, FAILED_AVP: Optional, PROXY_INFO: Many,
    ROUTE_RECORD: Many,
], true);

// TS 29.272 7.2.5
grammar!(AIR, "Authentication-Information-Request", [
    SESSION_ID: Fixed, DRMP: Optional, VENDOR_SPECIFIC_APPLICATION_ID: Optional, AUTH_SESSION_STATE: Required,
    ORIGIN_HOST: Required, ORIGIN_REALM: Required, DESTINATION_HOST: Optional, DESTINATION_REALM: Required,
    USER_NAME: Required, OC_SUPPORTED_FEATURES: Optional, SUPPORTED_FEATURES: Many,
    REQUESTED_EUTRAN_AUTHENTICATION_INFO: Optional, REQUESTED_UTRAN_GERAN_AUTHENTICATION_INFO: Optional,
    VISITED_PLMN_ID: Required, AIR_FLAGS: Optional, PROXY_INFO: Many, ROUTE_RECORD: Many,
], true);

// TS 29.272 7.2.6
grammar!(AIA, "Authentication-Information-Answer", [
    SESSION_ID: Fixed, DRMP: Optional, VENDOR_SPECIFIC_APPLICATION_ID: Optional, RESULT_CODE: Optional,
    EXPERIMENTAL_RESULT: Optional, ERROR_DIAGNOSTIC: Optional, AUTH_SESSION_STATE: Required, ORIGIN_HOST: Required,
    ORIGIN_REALM: Required, OC_SUPPORTED_FEATURES: Optional, OC_OLR: Optional, LOAD: Many, SUPPORTED_FEATURES: Many,
    AUTHENTICATION_INFO: Optional, UE_USAGE_TYPE: Optional, FAILED_AVP: Optional, PROXY_INFO: Many,
    ROUTE_RECORD: Many,
], true);

// TS 29.272 7.2.7
grammar!(CLR, "Cancel-Location-Request", [
    SESSION_ID: Fixed, DRMP: Optional, VENDOR_SPECIFIC_APPLICATION_ID: Optional, AUTH_SESSION_STATE: Required,
    ORIGIN_HOST: Required, ORIGIN_REALM: Required, DESTINATION_HOST: Required, DESTINATION_REALM: Required,
    USER_NAME: Required, SUPPORTED_FEATURES: Many, CANCELLATION_TYPE: Required, CLR_FLAGS: Optional,
    PROXY_INFO: Many, ROUTE_RECORD: Many,
], true);

// TS 29.272 7.2.8
grammar!(CLA, "Cancel-Location-Answer", [
    SESSION_ID: Fixed, DRMP: Optional, VENDOR_SPECIFIC_APPLICATION_ID: Optional, SUPPORTED_FEATURES: Many,
    RESULT_CODE: Optional, EXPERIMENTAL_RESULT: Optional, AUTH_SESSION_STATE: Required, ORIGIN_HOST: Required,
    ORIGIN_REALM: Required, FAILED_AVP: Optional, PROXY_INFO: Many, ROUTE_RECORD: Many,
], true);

// TS 29.272 7.2.13
grammar!(PUR, "Purge-UE-Request", [
    SESSION_ID: Fixed, DRMP: Optional, VENDOR_SPECIFIC_APPLICATION_ID: Optional, AUTH_SESSION_STATE: Required,
    ORIGIN_HOST: Required, ORIGIN_REALM: Required, DESTINATION_HOST: Optional, DESTINATION_REALM: Required,
    USER_NAME: Required, OC_SUPPORTED_FEATURES: Optional, PUR_FLAGS: Optional, SUPPORTED_FEATURES: Many,
    EPS_LOCATION_INFORMATION: Optional, PROXY_INFO: Many, ROUTE_RECORD: Many,
], true);

// TS 29.272 7.2.14
grammar!(PUA, "Purge-UE-Answer", [
    SESSION_ID: Fixed, DRMP: Optional, VENDOR_SPECIFIC_APPLICATION_ID: Optional, SUPPORTED_FEATURES: Many,
    RESULT_CODE: Optional, EXPERIMENTAL_RESULT: Optional, AUTH_SESSION_STATE: Required, ORIGIN_HOST: Required,
    ORIGIN_REALM: Required, OC_SUPPORTED_FEATURES: Optional, OC_OLR: Optional, LOAD: Many, PUA_FLAGS: Optional,
    FAILED_AVP: Optional, PROXY_INFO: Many, ROUTE_RECORD: Many,
], true);

// Grouped AVPs we build or read.
// RFC 6733 6.11
grammar!(G_VENDOR_SPECIFIC_APPLICATION_ID, "Vendor-Specific-Application-Id", [
    VENDOR_ID: Required, AUTH_APPLICATION_ID: Optional, ACCT_APPLICATION_ID: Optional,
], false);
// RFC 6733 6.7.2
grammar!(G_PROXY_INFO, "Proxy-Info", [PROXY_HOST: Required, PROXY_STATE: Required], true);
// RFC 6733 7.6
grammar!(G_EXPERIMENTAL_RESULT, "Experimental-Result", [VENDOR_ID: Required, EXPERIMENTAL_RESULT_CODE: Required], false);
// TS 29.229 6.3.29
grammar!(G_SUPPORTED_FEATURES, "Supported-Features", [
    VENDOR_ID: Required, FEATURE_LIST_ID: Required, FEATURE_LIST: Required,
], true);
// TS 29.272 7.3.3
grammar!(G_TERMINAL_INFORMATION, "Terminal-Information", [
    IMEI: Optional, TGPP2_MEID: Optional, SOFTWARE_VERSION: Optional,
], true);
// TS 29.272 7.3.11
grammar!(G_REQUESTED_EUTRAN_AUTHENTICATION_INFO, "Requested-EUTRAN-Authentication-Info", [
    NUMBER_OF_REQUESTED_VECTORS: Optional, IMMEDIATE_RESPONSE_PREFERRED: Optional, RE_SYNCHRONIZATION_INFO: Optional,
], true);
// TS 29.272 7.3.18
grammar!(G_E_UTRAN_VECTOR, "E-UTRAN-Vector", [
    ITEM_NUMBER: Optional, RAND: Required, XRES: Required, AUTN: Required, KASME: Required,
], true);
// TS 29.272 7.3.34
grammar!(G_APN_CONFIGURATION_PROFILE, "APN-Configuration-Profile", [
    CONTEXT_IDENTIFIER: Required, ADDITIONAL_CONTEXT_IDENTIFIER: Optional,
    ALL_APN_CONFIGURATIONS_INCLUDED_INDICATOR: Required, APN_CONFIGURATION: Many,
], true);
// TS 29.272 7.3.35
grammar!(G_APN_CONFIGURATION, "APN-Configuration", [
    CONTEXT_IDENTIFIER: Required, SERVED_PARTY_IP_ADDRESS: Many, PDN_TYPE: Required, SERVICE_SELECTION: Required,
    EPS_SUBSCRIBED_QOS_PROFILE: Optional, VPLMN_DYNAMIC_ADDRESS_ALLOWED: Optional, MIP6_AGENT_INFO: Optional,
    VISITED_NETWORK_IDENTIFIER: Optional, PDN_GW_ALLOCATION_TYPE: Optional, TGPP_CHARGING_CHARACTERISTICS: Optional,
    AMBR: Optional, SPECIFIC_APN_INFO: Many, APN_OI_REPLACEMENT: Optional, SIPTO_PERMISSION: Optional,
    LIPA_PERMISSION: Optional, RESTORATION_PRIORITY: Optional, SIPTO_LOCAL_NETWORK_PERMISSION: Optional,
    WLAN_OFFLOADABILITY: Optional, NON_IP_PDN_TYPE_INDICATOR: Optional, NON_IP_DATA_DELIVERY_MECHANISM: Optional,
    SCEF_REALM: Optional, PREFERRED_DATA_MODE: Optional, PDN_CONNECTION_CONTINUITY: Optional,
    RDS_INDICATOR: Optional, INTERWORKING_5GS_INDICATOR: Optional, ETHERNET_PDN_TYPE_INDICATOR: Optional,
], true);
// RFC 5447 4.2.1
grammar!(G_MIP6_AGENT_INFO, "MIP6-Agent-Info", [
    MIP_HOME_AGENT_ADDRESS: Many, MIP_HOME_AGENT_HOST: Optional, MIP6_HOME_LINK_PREFIX: Optional,
], true);
// RFC 4004 7.4
grammar!(G_MIP_HOME_AGENT_HOST, "MIP-Home-Agent-Host", [DESTINATION_REALM: Required, DESTINATION_HOST: Required], true);

/// The grammar of an S6a command, request or answer.
pub fn command(command_code: u32, request: bool) -> Option<&'static Grammar> {
    Some(match (command_code, request) {
        (cmd::UPDATE_LOCATION, true) => &ULR,
        (cmd::UPDATE_LOCATION, false) => &ULA,
        (cmd::AUTHENTICATION_INFORMATION, true) => &AIR,
        (cmd::AUTHENTICATION_INFORMATION, false) => &AIA,
        (cmd::CANCEL_LOCATION, true) => &CLR,
        (cmd::CANCEL_LOCATION, false) => &CLA,
        (cmd::PURGE_UE, true) => &PUR,
        (cmd::PURGE_UE, false) => &PUA,
        _ => return None,
    })
}

/// Every grammar above (commands first), for checks over all of them.
pub const ALL: &[&Grammar] = &[
    &ULR,
    &ULA,
    &AIR,
    &AIA,
    &CLR,
    &CLA,
    &PUR,
    &PUA,
    &G_VENDOR_SPECIFIC_APPLICATION_ID,
    &G_PROXY_INFO,
    &G_EXPERIMENTAL_RESULT,
    &G_SUPPORTED_FEATURES,
    &G_TERMINAL_INFORMATION,
    &G_REQUESTED_EUTRAN_AUTHENTICATION_INFO,
    &G_E_UTRAN_VECTOR,
    &G_APN_CONFIGURATION_PROFILE,
    &G_APN_CONFIGURATION,
    &G_MIP6_AGENT_INFO,
    &G_MIP_HOME_AGENT_HOST,
];

/// The grammar of a Grouped AVP, where we have one.
pub fn grouped(def: &AvpDef) -> Option<&'static Grammar> {
    ALL.iter().skip(8).find(|g| g.name == def.name).copied()
}
