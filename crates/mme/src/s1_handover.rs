//! S1-based handover, intra-MME, no S-GW change (TS 23.401 5.5.1.2.2,
//! TS 36.413 8.4): Handover Required, Handover Request / Acknowledge,
//! Handover Command, eNB / MME Status Transfer, Handover Notify, Handover
//! Preparation Failure and Handover Cancel, with direct or indirect data
//! forwarding.

use crate::context::S1Conn;
use crate::mme::Mme;
use mobicore_common::sctp_api::AssocId;
use mobicore_common::Fteid;

/// A handover that runs, kept in the UE context (with `Step::Handover`).
#[derive(Debug, Clone)]
pub struct Handover {
    pub phase: Phase,
    /// The target eNB's association and the stream the MME uses there.
    pub target_assoc: AssocId,
    pub target_stream: u16,
    /// The target's S1 connection, once its eNB-UE-S1AP-ID is known (it is
    /// in `by_enb_ue` then, so that the target's messages find the UE).
    pub target: Option<S1Conn>,
    /// S1: the source said a direct forwarding path is available.
    pub direct: bool,
    /// The E-RABs the target admitted.
    pub admitted: Vec<Admitted>,
    /// The Target to Source Transparent Container, for the Handover Command.
    pub target_to_source: Vec<u8>,
    /// An indirect data forwarding tunnel exists at the S-GW.
    pub tunnel: bool,
    /// Modify Bearer requests in flight, and whether one failed.
    pub pending: u8,
    pub failed: bool,
}

/// Where a handover is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// X2 (TS 23.401 5.5.1.1.2): the Path Switch Request moved the S1
    /// connection; the Modify Bearers are in flight.
    PathSwitch,
    /// S1: HANDOVER REQUEST sent to the target (TS1RELOCprep runs).
    Preparation,
    /// S1: Create Indirect Data Forwarding Tunnel in flight.
    CreateForwarding,
    /// S1: HANDOVER COMMAND sent to the source (TS1RELOCoverall runs).
    Execution,
    /// S1: HANDOVER NOTIFY came, the Modify Bearers are in flight and the
    /// source's release is commanded; `source` awaits its completion.
    Completion { source: S1Conn, released: bool },
}

/// One E-RAB the target admitted (TS 36.413 9.1.5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub ebi: u8,
    pub s1u: Fteid,
    pub dl_forwarding: Option<Fteid>,
}

impl Mme {
    pub(crate) fn on_reloc_prep_expiry(&mut self, _id: u32) {}

    pub(crate) fn on_reloc_overall_expiry(&mut self, _id: u32) {}
}
