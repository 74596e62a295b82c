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
    pub const UE_NOT_RESPONDING: Self = Self(87);
    pub const SERVICE_DENIED: Self = Self(89);
    pub const UNABLE_TO_PAGE_UE: Self = Self(90);
    pub const REQUEST_REJECTED: Self = Self(94);
    /// "Temporarily rejected due to handover/TAU/RAU procedure in progress".
    pub const TEMPORARILY_REJECTED_MOBILITY: Self = Self(110);

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

impl CreateSessionRequest {
    /// What an MME sends at attach for `imsi` in PLMN 001-01 (TAC 1),
    /// with its S11 F-TEID `sender`: APN `internet`, IPv4, default bearer
    /// EBI 5 with QCI 9; nothing optional. The requests of tests and
    /// benches that play an MME.
    pub fn attach(imsi: Imsi, sender: Fteid) -> Self {
        let plmn = Plmn::new("001", "01").expect("a valid PLMN");
        CreateSessionRequest {
            imsi,
            msisdn: None,
            serving_network: plmn,
            tai: Tai { plmn, tac: 1 },
            ecgi: Ecgi { plmn, eci: 0x100 },
            sender_fteid: sender,
            apn: "internet".into(),
            pdn_type: PdnType::Ipv4,
            apn_ambr: Ambr { uplink: 100_000_000, downlink: 200_000_000 },
            bearer: BearerContextToCreate { ebi: Ebi(5), qci: 9, arp: Arp::default() },
            pgw_s5s8_c: None,
            static_ipv4: None,
            pco: None,
            mei: None,
        }
    }
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

/// Create Indirect Data Forwarding Tunnel Request (TS 29.274 7.2.18), S1
/// handover with indirect forwarding and no S-GW change (TS 23.401
/// 5.5.1.2.2 step 8): per bearer, the target eNB's F-TEID for DL data
/// forwarding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateIndirectForwardingRequest {
    pub sgw_teid: Teid,
    pub bearers: Vec<ForwardingBearer>,
}

/// One bearer of an indirect forwarding tunnel: its EBI and the F-TEID of
/// the far end (the target eNB's in the request, the S-GW's in the answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardingBearer {
    pub ebi: Ebi,
    pub fteid: Fteid,
}

/// Create Indirect Data Forwarding Tunnel Response (TS 29.274 7.2.19):
/// per bearer, the S-GW's F-TEID for DL data forwarding (which the source
/// eNB forwards to).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateIndirectForwardingResponse {
    pub cause: GtpCause,
    pub bearers: Vec<ForwardingBearer>,
}

/// Delete Indirect Data Forwarding Tunnel Request (TS 29.274 7.2.27): no
/// IE but the header TEID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteIndirectForwardingRequest {
    pub sgw_teid: Teid,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S11Request {
    CreateSession(CreateSessionRequest),
    ModifyBearer(ModifyBearerRequest),
    DeleteSession(DeleteSessionRequest),
    ReleaseAccessBearers(ReleaseAccessBearersRequest),
    CreateIndirectForwarding(CreateIndirectForwardingRequest),
    DeleteIndirectForwarding(DeleteIndirectForwardingRequest),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S11Response {
    CreateSession(CreateSessionResponse),
    ModifyBearer(ModifyBearerResponse),
    /// Delete Session Response carries only a Cause.
    DeleteSession(GtpCause),
    /// Release Access Bearers Response carries only a Cause.
    ReleaseAccessBearers(GtpCause),
    CreateIndirectForwarding(CreateIndirectForwardingResponse),
    /// Delete Indirect Data Forwarding Tunnel Response: a Cause.
    DeleteIndirectForwarding(GtpCause),
}

impl S11Response {
    /// The message's Cause.
    pub fn cause(&self) -> GtpCause {
        match self {
            S11Response::CreateSession(r) => r.cause,
            S11Response::ModifyBearer(r) => r.cause,
            S11Response::CreateIndirectForwarding(r) => r.cause,
            S11Response::DeleteSession(c)
            | S11Response::ReleaseAccessBearers(c)
            | S11Response::DeleteIndirectForwarding(c) => *c,
        }
    }
}

// ---- S-GW -> MME (the MME answers) ----

/// Downlink Data Notification (TS 29.274 7.2.11.1), sent by the S-GW to
/// the MME's S11 TEID when downlink data arrives for an idle UE (TS 23.401
/// 5.3.4.3 step 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownlinkDataNotification {
    /// The header TEID: the MME's S11 TEID of the UE.
    pub mme_teid: Teid,
    /// The bearer the data arrived on (EBI IE), if the S-GW names it.
    pub ebi: Option<Ebi>,
    /// ARP of that bearer (paging priority, TS 23.401 5.3.4.3).
    pub arp: Option<Arp>,
}

/// Downlink Data Notification Acknowledge (TS 29.274 7.2.11.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownlinkDataNotificationAck {
    pub cause: GtpCause,
    /// Data Notification Delay (8.27) in milliseconds (sent in units of
    /// 50 ms): the S-GW delays the next DDN by this much (TS 23.401
    /// 5.3.4.2).
    pub data_notification_delay_ms: Option<u32>,
    /// DL Buffering Duration (an EPC Timer, 8.87) in seconds: the S-GW buffers and does
    /// not notify for this long (a UE in a power saving state).
    pub dl_buffering_duration_s: Option<u32>,
    /// DL Buffering Suggested Packet Count (an Integer Number, 8.115).
    pub dl_buffering_suggested_packets: Option<u16>,
    /// DL low priority traffic Throttling (8.85): the MME asks the S-GW
    /// to send fewer DDNs for low-priority bearers (TS 23.401 4.3.7.4.1a).
    pub throttling: Option<DdnThrottling>,
}

/// The Throttling IE of a DDN Acknowledge (TS 29.274 8.85): for
/// `delay_s` seconds the S-GW drops `factor_percent` percent of the
/// downlink data of its low-priority bearers that would have been
/// notified (TS 23.401 4.3.7.4.1a). A delay of 0 (or a deactivated timer
/// on the wire) ends throttling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DdnThrottling {
    pub delay_s: u32,
    /// 0..=100.
    pub factor_percent: u8,
}

/// Requests the S-GW sends to the MME.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S11IncomingRequest {
    DownlinkDataNotification(DownlinkDataNotification),
}

/// The MME's answers to them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S11IncomingAnswer {
    DownlinkDataNotificationAck(DownlinkDataNotificationAck),
}

/// An S-GW request as the S11 client task hands it to the MME shell: the
/// shell answers through `reply` (the task encodes the answer with the
/// request's sequence number; a retransmitted request gets the same answer
/// again without reaching the MME).
#[derive(Debug)]
pub struct IncomingS11 {
    pub request: S11IncomingRequest,
    pub reply: tokio::sync::oneshot::Sender<S11IncomingAnswer>,
}

// ---- MME -> S-GW messages that have no response ----

/// Downlink Data Notification Failure Indication (TS 29.274 7.2.11.3):
/// paging failed (TS 23.401 5.3.4.3 step 5); the S-GW drops the buffered
/// packets. No response message exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownlinkDataNotificationFailure {
    pub sgw_teid: Teid,
    /// UE not responding (87), Service denied (89), Unable to page UE (90).
    pub cause: GtpCause,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum S11Notification {
    DownlinkDataNotificationFailure(DownlinkDataNotificationFailure),
}

/// The MME's end of its S11 client task: requests it sends (and their
/// responses), requests the S-GW sends it, and messages with no response.
pub struct S11Link {
    pub requests: crate::requester::Requester<S11Request, S11Response>,
    pub incoming: tokio::sync::mpsc::Receiver<IncomingS11>,
    pub notify: tokio::sync::mpsc::Sender<S11Notification>,
}

/// The client task's end of an [`S11Link`].
pub struct S11LinkTask {
    pub requests: tokio::sync::mpsc::Receiver<crate::requester::Pending<S11Request, S11Response>>,
    pub incoming: tokio::sync::mpsc::Sender<IncomingS11>,
    pub notify: tokio::sync::mpsc::Receiver<S11Notification>,
}

impl S11Link {
    /// Both ends, each channel holding up to `capacity` messages.
    pub fn channel(capacity: usize) -> (S11Link, S11LinkTask) {
        let (requests, requests_rx) = crate::requester::Requester::channel(capacity);
        let (incoming_tx, incoming) = tokio::sync::mpsc::channel(capacity);
        let (notify, notify_rx) = tokio::sync::mpsc::channel(capacity);
        (
            S11Link { requests, incoming, notify },
            S11LinkTask { requests: requests_rx, incoming: incoming_tx, notify: notify_rx },
        )
    }
}
