//! The eNB's state: its S1 interface and one context per UE.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use mobicore_common::{Fteid, Plmn};

use crate::ue::{Procedure, Ue};

/// One eNB's configuration.
#[derive(Debug, Clone)]
pub struct EnbConfig {
    /// 20-bit macro eNB ID.
    pub enb_id: u32,
    pub name: String,
    pub plmn: Plmn,
    pub tac: u16,
    /// The eNB's S1-U address.
    pub s1u_addr: Ipv4Addr,
    pub procedure_timeout: Duration,
    pub s1_setup_timeout: Duration,
    /// How long a connected UE may go without user-plane activity
    /// ([`super::Enb::ue_activity`]) before the eNB asks the MME to release
    /// it (UE CONTEXT RELEASE REQUEST, user-inactivity); `None`: never.
    pub inactivity_timeout: Option<Duration>,
}

/// The S1 interface of the eNB (TS 36.413 8.7.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum S1State {
    /// No S1 Setup sent yet.
    Down,
    SetupPending {
        deadline: Instant,
    },
    Ready {
        mme_name: Option<String>,
    },
    Failed(String),
}

/// A UE-associated logical S1 connection (TS 36.401 6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct S1Connection {
    pub enb_ue_id: u32,
    /// Known once the MME has answered on the connection.
    pub mme_ue_id: Option<u32>,
    pub stream: u16,
    /// A UE CONTEXT RELEASE REQUEST was sent and the command is awaited.
    pub release_requested: bool,
}

/// An E-RAB set up by INITIAL CONTEXT SETUP: the S-GW's and the eNB's
/// S1-U F-TEIDs, kept for GTP-U.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Erab {
    pub e_rab_id: u8,
    pub qci: u8,
    pub sgw: Option<Fteid>,
    pub enb: Fteid,
}

/// What the eNB knows of one UE, and the UE itself.
pub struct UeContext {
    pub ue: Ue,
    pub s1: Option<S1Connection>,
    pub erabs: Vec<Erab>,
    /// KeNB from the INITIAL CONTEXT SETUP REQUEST.
    pub kenb: Option<[u8; 32]>,
    /// UE-AMBR, uplink and downlink, in bit/s.
    pub ambr: Option<(u64, u64)>,
    /// Guard deadline of the running procedure and its generation.
    pub(super) deadline: Option<(Instant, u64)>,
    /// Handover keys and the handover in progress (handover.rs).
    pub mobility: super::handover::Mobility,
    /// Inactivity timer and paging index (idle.rs).
    pub(super) idle: super::idle::UeIdle,
}

impl UeContext {
    pub fn new(ue: Ue) -> Self {
        UeContext {
            ue,
            s1: None,
            erabs: Vec::new(),
            kenb: None,
            ambr: None,
            deadline: None,
            mobility: Default::default(),
            idle: Default::default(),
        }
    }
}

/// What an eNB asks of its shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnbAction {
    /// An S1AP PDU for the MME on a stream of the association.
    Send { stream: u16, pdu: Vec<u8> },
    /// The S1 Setup ended.
    S1Setup(Result<(), String>),
    /// A UE's procedure ended.
    Outcome(Outcome),
    /// Something odd that is not a UE's failure (counted by reason).
    Anomaly(String),
    /// A handover step the driver carries between eNBs (handover.rs).
    Handover(super::handover::HandoverAction),
}

/// The end of a measured procedure of UE `ue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub ue: u64,
    pub procedure: Procedure,
    pub latency: Duration,
    pub result: Result<(), String>,
}

/// Why the eNB could not start something.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnbError {
    #[error("invalid eNB identity: {0}")]
    Identity(String),
    #[error("S1 interface not ready")]
    NotReady,
    #[error("no UE {0} at this eNB")]
    UnknownUe(u64),
    #[error("UE {0} has no S1 connection")]
    NotConnected(u64),
    #[error("UE {0}'s release is requested already")]
    ReleaseRequested(u64),
    #[error("UE {0} runs a procedure")]
    Busy(u64),
    #[error("UE {0} is not idle")]
    NotIdle(u64),
    #[error(transparent)]
    Start(#[from] crate::ue::attach::StartError),
}
