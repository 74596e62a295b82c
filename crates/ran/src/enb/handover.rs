//! Handovers between emulated eNBs: X2 with Path Switch (TS 23.401
//! 5.5.1.1.2, TS 36.413 8.4.4) and intra-MME S1 (TS 23.401 5.5.1.2.2,
//! TS 36.413 8.4.1-8.4.8), without I/O.
//!
//! The eNBs of one emulated RAN live in one process, so X2 is emulated: no
//! X2AP on the wire. The driver (shell, harness) moves values between two
//! [`Enb`]s:
//!
//! X2: `source.x2_handover_out(now, ue, target.cell())` gives an
//! [`X2Handover`] (what X2AP HANDOVER REQUEST carries, and the [`Ue`]
//! itself); the source keeps a forwarding state
//! ([`Enb::forwarding_source`]). `target.x2_handover_in(now, ho)` sends PATH
//! SWITCH REQUEST and returns the [`ErabForwarding`] per E-RAB (old and new
//! eNB F-TEIDs, the target's DL forwarding F-TEID). On PATH SWITCH REQUEST
//! ACKNOWLEDGE (or FAILURE) the target asks, with
//! [`HandoverAction::X2Release`], that the driver call
//! `source.x2_release(ue)`.
//!
//! S1: `source.start_s1_handover(now, ue, target.cell(), direct)` sends
//! HANDOVER REQUIRED; the target answers the MME's HANDOVER REQUEST itself;
//! on HANDOVER COMMAND the source sends ENB STATUS TRANSFER and asks, with
//! [`HandoverAction::S1HandoverExecute`], that the driver move the UE:
//! `target.s1_handover_arrive(now, source.s1_handover_depart(ue)?)`, which
//! sends HANDOVER NOTIFY. The MME then releases the source's context.
//!
//! Keys (TS 33.401 7.2.8.4): an eNB keeps the NCC of its KeNB and the unused
//! {NCC, NH} the MME gave it last; X2 derives KeNB* vertically from an unused
//! NH, else horizontally from KeNB; S1 derives it from the NH of HANDOVER
//! REQUEST. The UE derives its own ([`Ue::handover_kenb`]) and every key is
//! checked against it: a mismatch is a failed handover.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Instant;

use mobicore_common::{Fteid, Plmn, Teid};
use oxirush_s1ap::helpers::{eutran_cgi, global_enb_id, tai, ue_security_capabilities, EnbKind};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{build_s1ap, build_s1ap_ie, extract_s1ap_ies, ie, BitString, Error};
use oxirush_security::nas_eps::{derive_kenb_star, KEnb, Nh};

use super::context::{EnbAction, Erab, Outcome, S1Connection, UeContext};
use super::s1ap_handler::cause_text;
use super::Enb;
use crate::ue::handover::{rrc_handover_command, rrc_handover_preparation_information};
use crate::ue::security::{UE_EEA, UE_EIA};
use crate::ue::{Procedure, Ue};

/// The downlink carrier of every emulated cell (band 3), for KeNB*
/// (TS 33.401 A.5).
pub const EARFCN_DL: u32 = 1575;

/// The cell of an eNB as a handover source needs it: its Global eNB ID and
/// TAI (S1 Target ID), its PCI and EARFCN-DL (KeNB*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetCell {
    pub plmn: Plmn,
    pub enb_id: u32,
    pub tac: u16,
    pub pci: u16,
    pub earfcn_dl: u32,
}

/// One E-RAB of a moved UE, for the user plane: the S-GW's S1-U F-TEID, the
/// source's and the target's eNB F-TEIDs, and the F-TEID the source forwards
/// downlink to (X2: the target's DL forwarding F-TEID; S1: the one of the
/// HANDOVER COMMAND, the target's for direct forwarding, the S-GW's for
/// indirect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErabForwarding {
    pub e_rab_id: u8,
    pub sgw: Option<Fteid>,
    pub source_enb: Option<Fteid>,
    pub target_enb: Option<Fteid>,
    pub forwarding: Option<Fteid>,
}

/// What an eNB asks of its driver in a handover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoverAction {
    /// The target is done with the X2 handover of UE `ue` (switched, or
    /// PATH SWITCH REQUEST FAILURE): call `x2_release(ue)` at eNB
    /// `source_enb_id`.
    X2Release { ue: u64, source_enb_id: u32, switched: bool },
    /// HANDOVER COMMAND received: move UE `ue` to eNB `target_enb_id` with
    /// `target.s1_handover_arrive(now, source.s1_handover_depart(ue))`;
    /// downlink is forwarded per E-RAB as `forwarding` says.
    S1HandoverExecute { ue: u64, target_enb_id: u32, forwarding: Vec<ErabForwarding> },
    /// UE `ue` arrived at the target of an S1 handover: the new eNB
    /// F-TEIDs (and the target's DL forwarding F-TEIDs) per E-RAB.
    S1HandoverArrived { ue: u64, forwarding: Vec<ErabForwarding> },
}

/// Why a handover could not start or complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandoverError {
    #[error("S1 interface not ready")]
    NotReady,
    #[error("no UE {0} at this eNB")]
    UnknownUe(u64),
    #[error("UE {0} has no S1 connection the MME knows with E-RABs and a KeNB")]
    NotConnected(u64),
    #[error("UE {0} is busy with another procedure or handover")]
    Busy(u64),
    #[error("no S1 handover of UE {0} to cancel")]
    NothingToCancel(u64),
    #[error("no S1 handover was prepared at this eNB for MME-UE-S1AP-ID {0}")]
    NotPrepared(u32),
    #[error("KeNB*: {0}")]
    Keys(String),
    #[error("S1AP: {0}")]
    Encoding(String),
    #[error("eNB-UE-S1AP-IDs exhausted")]
    NoIds,
}

/// What X2AP HANDOVER REQUEST would carry (TS 36.423 9.1.1.1), and the UE.
pub struct X2Handover {
    pub ue_index: u64,
    pub ue: Ue,
    pub source_enb_id: u32,
    pub mme_ue_id: u32,
    /// The E-RABs with the S-GW F-TEIDs and the source's F-TEIDs.
    pub erabs: Vec<Erab>,
    /// AS Security Information: KeNB* for the target cell and its NCC.
    pub kenb_star: [u8; 32],
    pub ncc: u8,
    /// UE Security Capabilities (encryption, integrity: the first octet of
    /// each 16-bit map of TS 36.413 9.2.1.40).
    pub security_capabilities: (u8, u8),
    pub ambr: Option<(u64, u64)>,
    /// When the source decided (Procedure::X2Handover starts).
    pub started: Instant,
}

impl std::fmt::Debug for X2Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X2Handover")
            .field("ue_index", &self.ue_index)
            .field("source_enb_id", &self.source_enb_id)
            .field("mme_ue_id", &self.mme_ue_id)
            .field("erabs", &self.erabs)
            .field("ncc", &self.ncc)
            .finish_non_exhaustive()
    }
}

/// A UE leaving the source of an S1 handover (what RRC and the radio carry).
pub struct S1Departure {
    pub ue_index: u64,
    pub ue: Ue,
    pub mme_ue_id: u32,
    /// The RRC HandoverCommand of the Target to Source Transparent Container.
    pub rrc_command: Vec<u8>,
    /// When HANDOVER REQUIRED was sent (Procedure::S1Handover starts).
    pub started: Instant,
}

/// A UE's handover keys and its handover in progress at this eNB.
#[derive(Debug, Clone, Default)]
pub struct Mobility {
    /// The KeNB `ncc` and `next_hop` belong to: a new KeNB (Initial Context
    /// Setup) restarts at NCC 0 with no NH.
    kenb_of: Option<[u8; 32]>,
    ncc: u8,
    /// An unused {NCC, NH} from PATH SWITCH REQUEST ACKNOWLEDGE.
    next_hop: Option<(u8, [u8; 32])>,
    state: Option<State>,
}

impl Mobility {
    /// The unused {NCC, NH} the eNB holds for the UE's next handover.
    pub fn next_hop(&self) -> Option<(u8, [u8; 32])> {
        self.next_hop
    }
    /// Whether a handover of the UE is in progress here.
    pub fn in_progress(&self) -> bool {
        self.state.is_some()
    }
}

#[derive(Debug, Clone)]
enum State {
    /// Target of an X2 handover, PATH SWITCH REQUEST sent.
    X2PathSwitch { started: Instant, source_enb_id: u32, generation: u64 },
    /// Source of an S1 handover, HANDOVER REQUIRED sent (TS1RELOCprep runs).
    S1Preparing { started: Instant, target: TargetCell, generation: u64 },
    /// Source, HANDOVER COMMAND received: the UE may leave.
    S1Executing { started: Instant, rrc_command: Vec<u8>, forwarding: Vec<ErabForwarding> },
    /// Source, HANDOVER CANCEL sent.
    S1Cancelling,
}

/// A context prepared by HANDOVER REQUEST, waiting for its UE.
#[derive(Debug, Clone)]
struct Incoming {
    enb_ue_id: u32,
    stream: u16,
    erabs: Vec<Erab>,
    forwarding: Vec<ErabForwarding>,
    kenb: [u8; 32],
    ncc: u8,
    ambr: Option<(u64, u64)>,
}

/// A UE that left: its old connection and E-RABs, kept for forwarding until
/// it is released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceForwarding {
    pub enb_ue_id: u32,
    pub erabs: Vec<ErabForwarding>,
}

/// The handover state of an eNB beside its UEs.
#[derive(Default)]
pub struct Handovers {
    /// Prepared S1 handovers by MME-UE-S1AP-ID.
    incoming: HashMap<u32, Incoming>,
    /// Their eNB-UE-S1AP-IDs.
    reserved: HashSet<u32>,
    /// Sources of X2 (until x2_release) and S1 (until UE CONTEXT RELEASE
    /// COMMAND) handovers, by UE.
    sources: HashMap<u64, SourceForwarding>,
    timers: BinaryHeap<Reverse<(Instant, u64, u64)>>,
    generation: u64,
}

impl Handovers {
    /// Whether an eNB-UE-S1AP-ID is held by a prepared handover.
    pub(super) fn holds(&self, enb_ue_id: u32) -> bool {
        self.reserved.contains(&enb_ue_id)
    }
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }
    /// The MME-UE-S1AP-ID of the prepared handover whose KeNB is `kenb`.
    fn incoming_by_kenb(&self, kenb: &[u8; 32]) -> Option<u32> {
        self.incoming.iter().find(|(_, i)| &i.kenb == kenb).map(|(m, _)| *m)
    }
    fn take_incoming(&mut self, mme_ue_id: u32) -> Option<Incoming> {
        let i = self.incoming.remove(&mme_ue_id)?;
        self.reserved.remove(&i.enb_ue_id);
        Some(i)
    }
    /// eNB-UE-S1AP-IDs held by prepared handovers.
    pub(super) fn len(&self) -> usize {
        self.reserved.len()
    }
}

/// One S1AP message of the handover procedures, from the MME.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoverMessage {
    /// HANDOVER COMMAND (9.1.5.2).
    Command { mme_ue_id: u32, enb_ue_id: u32, forwarding: Vec<(u8, Option<Fteid>)>, target_to_source: Vec<u8> },
    /// HANDOVER PREPARATION FAILURE (9.1.5.3).
    PreparationFailure { mme_ue_id: u32, enb_ue_id: u32, cause: String },
    /// HANDOVER REQUEST (9.1.5.4).
    Request(HandoverRequest),
    /// MME STATUS TRANSFER (9.1.5.14).
    MmeStatusTransfer { mme_ue_id: u32, enb_ue_id: u32 },
    /// PATH SWITCH REQUEST ACKNOWLEDGE (9.1.5.9).
    PathSwitchAcknowledge { mme_ue_id: u32, enb_ue_id: u32, ncc: u8, nh: Vec<u8>, uplink: Vec<(u8, Option<Fteid>)> },
    /// PATH SWITCH REQUEST FAILURE (9.1.5.10).
    PathSwitchFailure { mme_ue_id: u32, enb_ue_id: u32, cause: String },
    /// HANDOVER CANCEL ACKNOWLEDGE (9.1.5.11).
    CancelAcknowledge { mme_ue_id: u32, enb_ue_id: u32 },
}

/// HANDOVER REQUEST, the parts the target keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoverRequest {
    pub mme_ue_id: u32,
    pub intra_lte: bool,
    pub ambr: (u64, u64),
    /// E-RAB ID, QCI, S-GW S1-U F-TEID.
    pub erabs: Vec<(u8, u8, Option<Fteid>)>,
    pub ncc: u8,
    pub nh: Vec<u8>,
}

fn fteid(address: &TransportLayerAddress, teid: &GTPTEID) -> Option<Fteid> {
    let a = address.0.as_octets();
    // TS 36.414 5.3: 32 bits IPv4, 160 both (IPv4 first).
    match a.len() {
        4 | 20 => Some(Fteid { teid: Teid(u32::from_be_bytes(teid.0)), ipv4: Ipv4Addr::new(a[0], a[1], a[2], a[3]) }),
        _ => None,
    }
}

fn erab_id(id: &ERABID) -> u8 {
    u8::try_from(id.0).unwrap_or(u8::MAX)
}

type R<T> = Result<T, Error>;

/// HANDOVER COMMAND.
pub(super) fn decode_command(pdu: &S1AP_PDU) -> R<HandoverMessage> {
    extract_s1ap_ies!(pdu, HandoverCommand,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        req target_to_source: Vec<u8> = Target_ToSource_TransparentContainer(c) => c.0.to_vec(),
    );
    let mut forwarding = Vec::new();
    for item in pdu.items::<ie::E_RABSubjecttoDataForwardingList>() {
        let item = item?;
        let dl = match (&item.dl_transport_layer_address, &item.dl_gtp_teid) {
            (Some(a), Some(t)) => fteid(a, t),
            _ => None,
        };
        forwarding.push((erab_id(&item.e_rab_id), dl));
    }
    Ok(HandoverMessage::Command { mme_ue_id, enb_ue_id, forwarding, target_to_source })
}

/// HANDOVER PREPARATION FAILURE.
pub(super) fn decode_preparation_failure(pdu: &S1AP_PDU) -> R<HandoverMessage> {
    extract_s1ap_ies!(pdu, HandoverPreparationFailure,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        req cause: String = Cause(c) => cause_text(&c),
    );
    Ok(HandoverMessage::PreparationFailure { mme_ue_id, enb_ue_id, cause })
}

/// HANDOVER REQUEST.
pub(super) fn decode_request(pdu: &S1AP_PDU) -> R<HandoverMessage> {
    extract_s1ap_ies!(pdu, HandoverRequest,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req handover_type: HandoverType = HandoverType(t) => t,
        req ambr: (u64, u64) = uEaggregateMaximumBitrate(a) => super::s1ap_handler::ue_ambr(&a),
        req security: (u8, Vec<u8>) = SecurityContext(s) =>
            (s.next_hop_chaining_count, s.next_hop_parameter.0.as_octets().to_vec()),
    );
    let mut erabs = Vec::new();
    for item in pdu.items::<ie::E_RABToBeSetupListHOReq>() {
        let item = item?;
        let sgw = fteid(&item.transport_layer_address, &item.gtp_teid);
        erabs.push((erab_id(&item.e_rab_id), item.e_rab_level_qos_parameters.qci.0, sgw));
    }
    Ok(HandoverMessage::Request(HandoverRequest {
        mme_ue_id,
        intra_lte: handover_type == HandoverType::intralte,
        ambr,
        erabs,
        ncc: security.0,
        nh: security.1,
    }))
}

/// MME STATUS TRANSFER.
pub(super) fn decode_mme_status_transfer(pdu: &S1AP_PDU) -> R<HandoverMessage> {
    extract_s1ap_ies!(pdu, MMEStatusTransfer,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
    );
    Ok(HandoverMessage::MmeStatusTransfer { mme_ue_id, enb_ue_id })
}

/// PATH SWITCH REQUEST ACKNOWLEDGE.
pub(super) fn decode_path_switch_ack(pdu: &S1AP_PDU) -> R<HandoverMessage> {
    extract_s1ap_ies!(pdu, PathSwitchRequestAcknowledge,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        req security: (u8, Vec<u8>) = SecurityContext(s) =>
            (s.next_hop_chaining_count, s.next_hop_parameter.0.as_octets().to_vec()),
    );
    let mut uplink = Vec::new();
    for item in pdu.items::<ie::E_RABToBeSwitchedULList>() {
        let item = item?;
        uplink.push((erab_id(&item.e_rab_id), fteid(&item.transport_layer_address, &item.gtp_teid)));
    }
    Ok(HandoverMessage::PathSwitchAcknowledge { mme_ue_id, enb_ue_id, ncc: security.0, nh: security.1, uplink })
}

/// PATH SWITCH REQUEST FAILURE.
pub(super) fn decode_path_switch_failure(pdu: &S1AP_PDU) -> R<HandoverMessage> {
    extract_s1ap_ies!(pdu, PathSwitchRequestFailure,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
        req cause: String = Cause(c) => cause_text(&c),
    );
    Ok(HandoverMessage::PathSwitchFailure { mme_ue_id, enb_ue_id, cause })
}

/// HANDOVER CANCEL ACKNOWLEDGE.
pub(super) fn decode_cancel_ack(pdu: &S1AP_PDU) -> R<HandoverMessage> {
    extract_s1ap_ies!(pdu, HandoverCancelAcknowledge,
        req mme_ue_id: u32 = MME_UE_S1AP_ID(id),
        req enb_ue_id: u32 = eNB_UE_S1AP_ID(id),
    );
    Ok(HandoverMessage::CancelAcknowledge { mme_ue_id, enb_ue_id })
}

fn encode(pdu: S1AP_PDU) -> R<Vec<u8>> {
    Ok(pdu.encode()?.to_vec())
}

fn address(ip: Ipv4Addr) -> TransportLayerAddress<'static> {
    TransportLayerAddress(BitString::from(ip.octets()))
}

/// The S1AP bitmaps of the emulated UE's algorithms (TS 36.413 9.2.1.40:
/// 128-EEA1/EIA1 first; the NAS capability of TS 24.301 9.9.3.34 starts at
/// EEA0/EIA0).
pub fn ue_security_capability_octets() -> (u8, u8) {
    (UE_EEA << 1, UE_EIA << 1)
}

impl TargetCell {
    fn global_enb_id(&self) -> R<GlobalENBID> {
        let plmn = oxirush_s1ap::helpers::plmn(&self.plmn.mcc(), &self.plmn.mnc())?;
        global_enb_id(plmn, EnbKind::Macro, self.enb_id)
    }
    fn tai(&self) -> R<TAI> {
        let plmn = oxirush_s1ap::helpers::plmn(&self.plmn.mcc(), &self.plmn.mnc())?;
        Ok(tai(plmn, self.tac.to_be_bytes()))
    }
    fn ecgi(&self) -> R<EUTRANCGI> {
        let plmn = oxirush_s1ap::helpers::plmn(&self.plmn.mcc(), &self.plmn.mnc())?;
        eutran_cgi(plmn, EnbKind::Macro, self.enb_id, 1)
    }
}

/// HANDOVER REQUIRED (9.1.5.1), intra-LTE, handover desirable for radio
/// reasons, with a Source eNB to Target eNB Transparent Container (9.2.1.56)
/// around an RRC HandoverPreparationInformation.
pub fn handover_required(
    mme_ue_id: u32,
    enb_ue_id: u32,
    source: &TargetCell,
    target: &TargetCell,
    direct_forwarding: bool,
) -> R<Vec<u8>> {
    let visited = LastVisitedEUTRANCellInformation::new(
        source.ecgi()?,
        CellType::new(CellSize::small, None),
        TimeUEStayedInCell(0),
        None,
    );
    let container = SourceeNBToTargeteNBTransparentContainer::new(
        RRCContainer::from(rrc_handover_preparation_information()),
        None,
        target.ecgi()?,
        None,
        UEHistoryInformation(vec![LastVisitedCellItem::e_UTRAN_Cell(visited)]),
        None,
    );
    let container = SourceToTargetTransparentContainer::from(encode_open_type(&container)?);
    let target_id = TargetID::targeteNB_ID(TargeteNBID::new(target.global_enb_id()?, target.tai()?, None));
    let cause = Cause::radioNetwork(CauseRadioNetwork::handover_desirable_for_radio_reason);
    let pdu = if direct_forwarding {
        build_s1ap!(
            InitiatingMessage,
            HandoverPreparation,
            HandoverRequired,
            MME_UE_S1AP_ID(mme_ue_id),
            eNB_UE_S1AP_ID(enb_ue_id),
            HandoverType(HandoverType::intralte),
            Cause(cause),
            TargetID(target_id),
            Direct_Forwarding_Path_Availability(DirectForwardingPathAvailability::directPathAvailable),
            Source_ToTarget_TransparentContainer(container),
        )?
    } else {
        build_s1ap!(
            InitiatingMessage,
            HandoverPreparation,
            HandoverRequired,
            MME_UE_S1AP_ID(mme_ue_id),
            eNB_UE_S1AP_ID(enb_ue_id),
            HandoverType(HandoverType::intralte),
            Cause(cause),
            TargetID(target_id),
            Source_ToTarget_TransparentContainer(container),
        )?
    };
    encode(pdu)
}

/// HANDOVER REQUEST ACKNOWLEDGE (9.1.5.5): each E-RAB admitted with the
/// target's S1-U F-TEID and its DL forwarding F-TEID, and the Target eNB to
/// Source eNB Transparent Container (9.2.1.57) with the RRC HandoverCommand.
pub fn handover_request_acknowledge(
    mme_ue_id: u32,
    enb_ue_id: u32,
    admitted: &[ErabForwarding],
    ncc: u8,
) -> R<Vec<u8>> {
    let items = admitted
        .iter()
        .filter_map(|e| e.target_enb.map(|t| (e, t)))
        .map(|(e, t)| {
            let (dl_address, dl_teid) = match e.forwarding {
                Some(f) => (Some(address(f.ipv4)), Some(GTPTEID(f.teid.0.to_be_bytes()))),
                None => (None, None),
            };
            let item = ERABAdmittedItem::new(
                ERABID(e.e_rab_id.into()),
                address(t.ipv4),
                GTPTEID(t.teid.0.to_be_bytes()),
                dl_address,
                dl_teid,
                None,
                None,
                None,
            );
            build_s1ap_ie!(IGNORE E_RABAdmittedItem(item))
        })
        .collect::<R<Vec<_>>>()?;
    let container = TargeteNBToSourceeNBTransparentContainer::new(RRCContainer::from(rrc_handover_command(ncc)), None);
    let container = TargetToSourceTransparentContainer::from(encode_open_type(&container)?.to_vec());
    encode(build_s1ap!(
        SuccessfulOutcome,
        HandoverResourceAllocation,
        HandoverRequestAcknowledge,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        E_RABAdmittedList(ERABAdmittedList(items)),
        Target_ToSource_TransparentContainer(container),
    )?)
}

/// HANDOVER FAILURE (9.1.5.6).
pub fn handover_failure(mme_ue_id: u32, cause: CauseRadioNetwork) -> R<Vec<u8>> {
    encode(build_s1ap!(
        UnsuccessfulOutcome,
        HandoverResourceAllocation,
        HandoverFailure,
        MME_UE_S1AP_ID(mme_ue_id),
        Cause(Cause::radioNetwork(cause)),
    )?)
}

/// ENB STATUS TRANSFER (9.1.5.13): the PDCP COUNTs of each E-RAB (the
/// emulated radio keeps no PDCP, so they start at 0).
pub fn enb_status_transfer(mme_ue_id: u32, enb_ue_id: u32, erabs: &[u8]) -> R<Vec<u8>> {
    let items = erabs
        .iter()
        .map(|id| {
            let count = || COUNTvalue::new(PDCPSN(0), HFN(0), None);
            let item = BearersSubjectToStatusTransferItem::new(ERABID((*id).into()), count(), count(), None, None);
            build_s1ap_ie!(IGNORE Bearers_SubjectToStatusTransfer_Item(item))
        })
        .collect::<R<Vec<_>>>()?;
    let container = ENBStatusTransferTransparentContainer::new(BearersSubjectToStatusTransferList(items), None);
    encode(build_s1ap!(
        InitiatingMessage,
        eNBStatusTransfer,
        ENBStatusTransfer,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        eNB_StatusTransfer_TransparentContainer(container),
    )?)
}

/// HANDOVER NOTIFY (9.1.5.7).
pub fn handover_notify(mme_ue_id: u32, enb_ue_id: u32, cell: &TargetCell) -> R<Vec<u8>> {
    encode(build_s1ap!(
        InitiatingMessage,
        HandoverNotification,
        HandoverNotify,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        EUTRAN_CGI(cell.ecgi()?),
        TAI(cell.tai()?),
    )?)
}

/// HANDOVER CANCEL (9.1.5.15).
pub fn handover_cancel(mme_ue_id: u32, enb_ue_id: u32, cause: CauseRadioNetwork) -> R<Vec<u8>> {
    encode(build_s1ap!(
        InitiatingMessage,
        HandoverCancel,
        HandoverCancel,
        MME_UE_S1AP_ID(mme_ue_id),
        eNB_UE_S1AP_ID(enb_ue_id),
        Cause(Cause::radioNetwork(cause)),
    )?)
}

/// PATH SWITCH REQUEST (9.1.5.8): the E-RABs to be switched in downlink with
/// the target's F-TEIDs, the source MME-UE-S1AP-ID, the cell and the UE's
/// security capabilities.
pub fn path_switch_request(
    enb_ue_id: u32,
    source_mme_ue_id: u32,
    erabs: &[Erab],
    cell: &TargetCell,
    capabilities: (u8, u8),
) -> R<Vec<u8>> {
    let items = erabs
        .iter()
        .map(|e| {
            let item = ERABToBeSwitchedDLItem::new(
                ERABID(e.e_rab_id.into()),
                address(e.enb.ipv4),
                GTPTEID(e.enb.teid.0.to_be_bytes()),
                None,
            );
            build_s1ap_ie!(REJECT E_RABToBeSwitchedDLItem(item))
        })
        .collect::<R<Vec<_>>>()?;
    encode(build_s1ap!(
        InitiatingMessage,
        PathSwitchRequest,
        PathSwitchRequest,
        eNB_UE_S1AP_ID(enb_ue_id),
        E_RABToBeSwitchedDLList(ERABToBeSwitchedDLList(items)),
        SourceMME_UE_S1AP_ID(source_mme_ue_id),
        EUTRAN_CGI(cell.ecgi()?),
        TAI(cell.tai()?),
        UESecurityCapabilities(ue_security_capabilities(capabilities.0, capabilities.1)),
    )?)
}

/// KeNB* for a target cell from KeNB or NH (TS 33.401 A.5).
fn kenb_star(base: &[u8; 32], vertical: bool, cell: &TargetCell) -> Result<[u8; 32], HandoverError> {
    let star = if vertical {
        derive_kenb_star(&Nh::new(base), cell.pci, cell.earfcn_dl)
    } else {
        derive_kenb_star(&KEnb::new(base), cell.pci, cell.earfcn_dl)
    };
    star.map(|k| *k.as_octets()).map_err(|e| HandoverError::Keys(e.to_string()))
}

impl Enb {
    /// This eNB's cell as a handover target.
    pub fn cell(&self) -> TargetCell {
        TargetCell {
            plmn: self.cfg.plmn,
            enb_id: self.cfg.enb_id,
            tac: self.cfg.tac,
            // The PCI is the eNB ID modulo the 504 PCIs (TS 36.211 6.11).
            pci: (self.cfg.enb_id % 504) as u16,
            earfcn_dl: EARFCN_DL,
        }
    }

    /// The forwarding state a UE that left this eNB left behind.
    pub fn forwarding_source(&self, index: u64) -> Option<&SourceForwarding> {
        self.ho.sources.get(&index)
    }

    /// The mobility state of UE `index` here.
    fn mobility(ctx: &mut UeContext) -> &mut Mobility {
        if ctx.mobility.kenb_of != ctx.kenb {
            // A new KeNB (Initial Context Setup): NCC 0, no NH (7.2.8.4.1).
            ctx.mobility = Mobility { kenb_of: ctx.kenb, state: ctx.mobility.state.take(), ..Mobility::default() };
        }
        &mut ctx.mobility
    }

    /// A connected UE that a handover can take: its connection and KeNB.
    fn handover_candidate(&mut self, index: u64) -> Result<(S1Connection, u32, [u8; 32]), HandoverError> {
        if !self.is_ready() {
            return Err(HandoverError::NotReady);
        }
        let ctx = self.ues.get_mut(&index).ok_or(HandoverError::UnknownUe(index))?;
        let conn = ctx.s1.filter(|c| !c.release_requested).ok_or(HandoverError::NotConnected(index))?;
        let mme = conn.mme_ue_id.ok_or(HandoverError::NotConnected(index))?;
        let kenb = ctx.kenb.ok_or(HandoverError::NotConnected(index))?;
        if ctx.erabs.is_empty() {
            return Err(HandoverError::NotConnected(index));
        }
        if ctx.ue.procedure().is_some() || Self::mobility(ctx).state.is_some() {
            return Err(HandoverError::Busy(index));
        }
        Ok((conn, mme, kenb))
    }

    fn handover_outcome(
        &mut self,
        index: u64,
        procedure: Procedure,
        started: Instant,
        now: Instant,
        result: Result<(), String>,
    ) {
        let latency = now.saturating_duration_since(started);
        self.actions.push_back(EnbAction::Outcome(Outcome { ue: index, procedure, latency, result }));
    }

    fn handover_guard(&mut self, now: Instant, index: u64) -> u64 {
        self.ho.generation += 1;
        let generation = self.ho.generation;
        self.ho.timers.push(Reverse((now + self.cfg.procedure_timeout, index, generation)));
        generation
    }

    // ---- X2 ----

    /// Take connected UE `index` out of this (source) eNB for an X2
    /// handover to `target` (TS 23.401 5.5.1.1.2): KeNB* from an unused NH,
    /// else from KeNB (TS 33.401 7.2.8.4.3). The source keeps the old
    /// connection and a forwarding state until [`Enb::x2_release`].
    pub fn x2_handover_out(
        &mut self,
        now: Instant,
        index: u64,
        target: TargetCell,
    ) -> Result<X2Handover, HandoverError> {
        let (conn, mme_ue_id, kenb) = self.handover_candidate(index)?;
        let mobility = self.ues.get_mut(&index).map(|c| Self::mobility(c)).cloned().unwrap_or_default();
        let (ncc, star) = match mobility.next_hop {
            Some((ncc, nh)) => (ncc, kenb_star(&nh, true, &target)?),
            None => (mobility.ncc, kenb_star(&kenb, false, &target)?),
        };
        self.retire_connection(index);
        let ctx = self.ues.remove(&index).ok_or(HandoverError::UnknownUe(index))?;
        let erabs = ctx.erabs.clone();
        let forwarding = erabs
            .iter()
            .map(|e| ErabForwarding {
                e_rab_id: e.e_rab_id,
                sgw: e.sgw,
                source_enb: Some(e.enb),
                target_enb: None,
                forwarding: None,
            })
            .collect();
        self.ho.sources.insert(index, SourceForwarding { enb_ue_id: conn.enb_ue_id, erabs: forwarding });
        Ok(X2Handover {
            ue_index: index,
            ue: ctx.ue,
            source_enb_id: self.cfg.enb_id,
            mme_ue_id,
            erabs,
            kenb_star: star,
            ncc,
            security_capabilities: ue_security_capability_octets(),
            ambr: ctx.ambr,
            started: now,
        })
    }

    /// The target's answer reaches the source (X2AP HANDOVER REQUEST
    /// ACKNOWLEDGE, TS 36.423 8.2.1.2: per E-RAB the DL forwarding GTP
    /// tunnel endpoint): the source's forwarding state takes the E-RABs
    /// [`Enb::x2_handover_in`] returned. False if UE `index` did not leave
    /// from here.
    pub fn x2_forwarding_to(&mut self, index: u64, erabs: &[ErabForwarding]) -> bool {
        let Some(source) = self.ho.sources.get_mut(&index) else { return false };
        source.erabs = erabs.to_vec();
        true
    }

    /// The source forgets a UE that left by X2 (X2AP UE CONTEXT RELEASE,
    /// TS 36.423 8.2.3): its old connection and forwarding state go, no S1AP
    /// message is sent.
    pub fn x2_release(&mut self, index: u64) -> bool {
        let Some(source) = self.ho.sources.remove(&index) else { return false };
        self.stale.remove(&source.enb_ue_id);
        true
    }

    /// The UE of an X2 handover arrives at this (target) eNB: a new
    /// connection and S1-U F-TEIDs, a DL forwarding F-TEID per E-RAB, and
    /// PATH SWITCH REQUEST (TS 36.413 8.4.4.2). The returned E-RABs are what
    /// the user plane needs. On an error the UE stays here idle (its RRC
    /// connection failed), the failure is reported and the source released.
    pub fn x2_handover_in(&mut self, now: Instant, ho: X2Handover) -> Result<Vec<ErabForwarding>, HandoverError> {
        let X2Handover { ue_index: index, mut ue, source_enb_id, mme_ue_id, erabs, kenb_star, ncc, .. } = ho;
        // The UE takes the RRC HandoverCommand the target prepared (sent
        // through the source, TS 36.300 10.1.2.1.1) with the source's NCC.
        let cell = self.cell();
        let ue_kenb = ue.take_handover_command(&rrc_handover_command(ncc), cell.pci, cell.earfcn_dl);
        self.ues.insert(index, Box::new(UeContext::new(ue)));
        self.arrived_by_handover(index);
        let fail = |enb: &mut Enb, error: HandoverError| {
            if let Some(ctx) = enb.ues.get_mut(&index) {
                ctx.ue.connection_released(now);
            }
            // Idle here: its T3412 runs here.
            enb.settle_ue(index);
            enb.handover_outcome(index, Procedure::X2Handover, ho.started, now, Err(error.to_string()));
            enb.actions.push_back(EnbAction::Handover(HandoverAction::X2Release {
                ue: index,
                source_enb_id,
                switched: false,
            }));
            enb.drive(index);
            Err(error)
        };
        if !self.is_ready() {
            return fail(self, HandoverError::NotReady);
        }
        match ue_kenb {
            Ok(k) if k == kenb_star => {}
            Ok(_) => return fail(self, HandoverError::Keys("the UE's KeNB* differs from the source's".into())),
            Err(e) => return fail(self, HandoverError::Keys(e.to_string())),
        }
        let Some(conn) = self.new_connection(index) else { return fail(self, HandoverError::NoIds) };
        let mut moved = Vec::with_capacity(erabs.len());
        let mut forwarding = Vec::with_capacity(erabs.len());
        for e in &erabs {
            let enb = Fteid { teid: Teid(self.allocate_teid()), ipv4: self.cfg.s1u_addr };
            let fwd = Fteid { teid: Teid(self.allocate_teid()), ipv4: self.cfg.s1u_addr };
            moved.push(Erab { enb, ..*e });
            forwarding.push(ErabForwarding {
                e_rab_id: e.e_rab_id,
                sgw: e.sgw,
                source_enb: Some(e.enb),
                target_enb: Some(enb),
                forwarding: Some(fwd),
            });
        }
        let built = path_switch_request(conn.enb_ue_id, mme_ue_id, &moved, &cell, ho.security_capabilities);
        if let Err(e) = built {
            self.drop_connection(index);
            return fail(self, HandoverError::Encoding(e.to_string()));
        }
        let generation = self.handover_guard(now, index);
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.erabs = moved;
            ctx.kenb = Some(kenb_star);
            ctx.ambr = ho.ambr;
            ctx.mobility = Mobility {
                kenb_of: Some(kenb_star),
                ncc,
                next_hop: None,
                state: Some(State::X2PathSwitch { started: ho.started, source_enb_id, generation }),
            };
        }
        self.push_pdu(conn.stream, built);
        if let Some(source) = self.ho.sources.get_mut(&index) {
            source.erabs.clone_from(&forwarding);
        }
        // The UE is connected here now: its inactivity timer runs here.
        self.arm_inactivity(now, index);
        Ok(forwarding)
    }

    fn path_switch_ack(
        &mut self,
        now: Instant,
        mme_ue_id: u32,
        enb_ue_id: u32,
        ncc: u8,
        nh: &[u8],
        uplink: &[(u8, Option<Fteid>)],
    ) {
        let Some(index) = self.by_enb_ue_id.get(&enb_ue_id).copied() else {
            return self.unknown_ue(mme_ue_id, enb_ue_id);
        };
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        let Some(State::X2PathSwitch { started, source_enb_id, .. }) = ctx.mobility.state.clone() else {
            return self.anomaly("PATH SWITCH REQUEST ACKNOWLEDGE without a path switch");
        };
        if let Some(conn) = ctx.s1.as_mut() {
            // TS 36.413 8.4.4.2: the MME-UE-S1AP-ID of the acknowledge.
            conn.mme_ue_id = Some(mme_ue_id);
        }
        ctx.mobility.state = None;
        for (id, sgw) in uplink {
            if let Some(e) = ctx.erabs.iter_mut().find(|e| e.e_rab_id == *id) {
                e.sgw = sgw.or(e.sgw);
            }
        }
        // TS 33.401 7.2.8.4.3: the target keeps {NCC, NH} for the next
        // handover; it must be the UE's own NH of that NCC.
        let ue_nh = ctx.ue.next_hop(ncc);
        let result = match <[u8; 32]>::try_from(nh) {
            Ok(nh) if ue_nh == Some(nh) => {
                ctx.mobility.next_hop = Some((ncc, nh));
                Ok(())
            }
            Ok(_) => Err(format!("NH of NCC {ncc} from the MME differs from the UE's")),
            Err(_) => Err(format!("NH of {} octets", nh.len())),
        };
        self.actions.push_back(EnbAction::Handover(HandoverAction::X2Release {
            ue: index,
            source_enb_id,
            switched: true,
        }));
        self.handover_outcome(index, Procedure::X2Handover, started, now, result);
    }

    fn path_switch_failure(&mut self, now: Instant, mme_ue_id: u32, enb_ue_id: u32, cause: &str) {
        let Some(index) = self.by_enb_ue_id.get(&enb_ue_id).copied() else {
            return self.unknown_ue(mme_ue_id, enb_ue_id);
        };
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        let Some(State::X2PathSwitch { started, source_enb_id, .. }) = ctx.mobility.state.take() else {
            return self.anomaly("PATH SWITCH REQUEST FAILURE without a path switch");
        };
        // TS 36.413 8.4.4.3: the target releases the UE; the UE goes idle.
        self.drop_connection(index);
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.erabs.clear();
            ctx.kenb = None;
            ctx.ue.connection_released(now);
        }
        self.settle_ue(index);
        let reason = format!("PATH SWITCH REQUEST FAILURE ({cause})");
        self.actions.push_back(EnbAction::Handover(HandoverAction::X2Release {
            ue: index,
            source_enb_id,
            switched: false,
        }));
        self.handover_outcome(index, Procedure::X2Handover, started, now, Err(reason));
        self.drive(index);
    }

    // ---- S1, source ----

    /// Start an S1 handover of connected UE `index` to `target` (TS 36.413
    /// 8.4.1.2): HANDOVER REQUIRED, and TS1RELOCprep (the procedure timeout)
    /// runs until HANDOVER COMMAND or PREPARATION FAILURE.
    pub fn start_s1_handover(
        &mut self,
        now: Instant,
        index: u64,
        target: TargetCell,
        direct_forwarding: bool,
    ) -> Result<(), HandoverError> {
        let (conn, mme_ue_id, _) = self.handover_candidate(index)?;
        let built = handover_required(mme_ue_id, conn.enb_ue_id, &self.cell(), &target, direct_forwarding)
            .map_err(|e| HandoverError::Encoding(e.to_string()))?;
        let generation = self.handover_guard(now, index);
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.mobility.state = Some(State::S1Preparing { started: now, target, generation });
        }
        self.push_pdu(conn.stream, Ok(built));
        Ok(())
    }

    /// Cancel the S1 handover of UE `index` before it left (TS 36.413
    /// 8.4.5): HANDOVER CANCEL; the UE stays.
    pub fn cancel_s1_handover(&mut self, now: Instant, index: u64) -> Result<(), HandoverError> {
        self.s1_cancel(now, index, CauseRadioNetwork::handover_cancelled, "handover cancelled")
    }

    fn s1_cancel(
        &mut self,
        now: Instant,
        index: u64,
        cause: CauseRadioNetwork,
        reason: &str,
    ) -> Result<(), HandoverError> {
        let ctx = self.ues.get_mut(&index).ok_or(HandoverError::UnknownUe(index))?;
        let started = match &ctx.mobility.state {
            Some(State::S1Preparing { started, .. } | State::S1Executing { started, .. }) => *started,
            _ => return Err(HandoverError::NothingToCancel(index)),
        };
        let conn = ctx.s1.ok_or(HandoverError::NotConnected(index))?;
        let mme = conn.mme_ue_id.ok_or(HandoverError::NotConnected(index))?;
        ctx.mobility.state = Some(State::S1Cancelling);
        self.push_pdu(conn.stream, handover_cancel(mme, conn.enb_ue_id, cause));
        self.handover_outcome(index, Procedure::S1Handover, started, now, Err(reason.to_string()));
        Ok(())
    }

    fn handover_command(
        &mut self,
        mme_ue_id: u32,
        enb_ue_id: u32,
        forwarding: &[(u8, Option<Fteid>)],
        target_to_source: &[u8],
    ) {
        let Some(index) = self.associate(mme_ue_id, enb_ue_id) else { return };
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        let Some(State::S1Preparing { started, target, .. }) = ctx.mobility.state.clone() else {
            // A command crossing our HANDOVER CANCEL, or for no handover.
            return self.anomaly("HANDOVER COMMAND without a handover in preparation");
        };
        let rrc_command = match decode_open_type::<TargeteNBToSourceeNBTransparentContainer>(target_to_source) {
            Ok(c) => c.rrc_container.0.to_vec(),
            Err(_) => {
                let _ = self.s1_cancel(
                    started,
                    index,
                    CauseRadioNetwork::unspecified,
                    "undecodable Target to Source Transparent Container",
                );
                return;
            }
        };
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        let forwarding: Vec<ErabForwarding> = ctx
            .erabs
            .iter()
            .map(|e| ErabForwarding {
                e_rab_id: e.e_rab_id,
                sgw: e.sgw,
                source_enb: Some(e.enb),
                target_enb: None,
                forwarding: forwarding.iter().find(|(id, _)| *id == e.e_rab_id).and_then(|(_, f)| *f),
            })
            .collect();
        let ids: Vec<u8> = ctx.erabs.iter().map(|e| e.e_rab_id).collect();
        ctx.mobility.state = Some(State::S1Executing { started, rrc_command, forwarding: forwarding.clone() });
        let stream = ctx.s1.map_or(0, |c| c.stream);
        // TS 36.413 8.4.6: the PDCP status before the UE leaves.
        self.push_pdu(stream, enb_status_transfer(mme_ue_id, enb_ue_id, &ids));
        self.actions.push_back(EnbAction::Handover(HandoverAction::S1HandoverExecute {
            ue: index,
            target_enb_id: target.enb_id,
            forwarding,
        }));
    }

    /// The UE of an executing S1 handover leaves this source: the driver
    /// hands the departure to the target's [`Enb::s1_handover_arrive`]. The
    /// old connection stays until the MME's UE CONTEXT RELEASE COMMAND.
    pub fn s1_handover_depart(&mut self, index: u64) -> Result<S1Departure, HandoverError> {
        let ctx = self.ues.get_mut(&index).ok_or(HandoverError::UnknownUe(index))?;
        let Some(State::S1Executing { started, rrc_command, forwarding }) = ctx.mobility.state.clone() else {
            return Err(HandoverError::NothingToCancel(index));
        };
        let conn = ctx.s1.ok_or(HandoverError::NotConnected(index))?;
        let mme_ue_id = conn.mme_ue_id.ok_or(HandoverError::NotConnected(index))?;
        self.retire_connection(index);
        let ctx = self.ues.remove(&index).ok_or(HandoverError::UnknownUe(index))?;
        self.ho.sources.insert(index, SourceForwarding { enb_ue_id: conn.enb_ue_id, erabs: forwarding });
        Ok(S1Departure { ue_index: index, ue: ctx.ue, mme_ue_id, rrc_command, started })
    }

    fn preparation_failure(&mut self, now: Instant, mme_ue_id: u32, enb_ue_id: u32, cause: &str) {
        let Some(index) = self.associate(mme_ue_id, enb_ue_id) else { return };
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        let Some(State::S1Preparing { started, .. }) = ctx.mobility.state else {
            return self.anomaly("HANDOVER PREPARATION FAILURE without a handover in preparation");
        };
        // TS 36.413 8.4.1.3: the UE stays at the source.
        ctx.mobility.state = None;
        self.handover_outcome(
            index,
            Procedure::S1Handover,
            started,
            now,
            Err(format!("HANDOVER PREPARATION FAILURE ({cause})")),
        );
    }

    fn cancel_acknowledge(&mut self, mme_ue_id: u32, enb_ue_id: u32) {
        let Some(index) = self.associate(mme_ue_id, enb_ue_id) else { return };
        let Some(ctx) = self.ues.get_mut(&index) else { return };
        if matches!(ctx.mobility.state, Some(State::S1Cancelling)) {
            ctx.mobility.state = None;
        } else {
            self.anomaly("HANDOVER CANCEL ACKNOWLEDGE without a cancel");
        }
    }

    // ---- S1, target ----

    /// HANDOVER REQUEST (TS 36.413 8.4.2.2): reserve an eNB-UE-S1AP-ID,
    /// admit every E-RAB with new S1-U and DL forwarding F-TEIDs, take KeNB
    /// from NH (vertical, TS 33.401 7.2.8.4.3), answer HANDOVER REQUEST
    /// ACKNOWLEDGE, or HANDOVER FAILURE.
    fn handover_request(&mut self, req: HandoverRequest) {
        let refuse = |enb: &mut Enb, cause: CauseRadioNetwork, why: &str| {
            enb.anomaly(&format!("HANDOVER REQUEST refused: {why}"));
            enb.push_pdu(0, handover_failure(req.mme_ue_id, cause));
        };
        if !req.intra_lte {
            return refuse(self, CauseRadioNetwork::ho_target_not_allowed, "not intra-LTE");
        }
        if req.erabs.is_empty() || req.erabs.iter().any(|e| e.2.is_none()) {
            return refuse(self, CauseRadioNetwork::unspecified, "no E-RAB with an IPv4 S-GW F-TEID");
        }
        let Ok(nh) = <[u8; 32]>::try_from(req.nh.as_slice()) else {
            return refuse(self, CauseRadioNetwork::unspecified, "NH is not 256 bits");
        };
        if req.ncc > 7 {
            return refuse(self, CauseRadioNetwork::unspecified, "NCC above 7");
        }
        if self.ho.incoming.contains_key(&req.mme_ue_id) {
            return refuse(self, CauseRadioNetwork::unspecified, "a handover of this UE is already prepared");
        }
        let cell = self.cell();
        let Ok(kenb) = kenb_star(&nh, true, &cell) else {
            return refuse(self, CauseRadioNetwork::unspecified, "KeNB* derivation");
        };
        let Some((enb_ue_id, stream)) = self.allocate_enb_ue_id() else {
            return refuse(self, CauseRadioNetwork::no_radio_resources_available_in_target_cell, "IDs exhausted");
        };
        let mut erabs = Vec::new();
        let mut forwarding = Vec::new();
        for (e_rab_id, qci, sgw) in &req.erabs {
            let enb = Fteid { teid: Teid(self.allocate_teid()), ipv4: self.cfg.s1u_addr };
            let fwd = Fteid { teid: Teid(self.allocate_teid()), ipv4: self.cfg.s1u_addr };
            erabs.push(Erab { e_rab_id: *e_rab_id, qci: *qci, sgw: *sgw, enb });
            forwarding.push(ErabForwarding {
                e_rab_id: *e_rab_id,
                sgw: *sgw,
                source_enb: None,
                target_enb: Some(enb),
                forwarding: Some(fwd),
            });
        }
        let built = handover_request_acknowledge(req.mme_ue_id, enb_ue_id, &forwarding, req.ncc);
        self.push_pdu(stream, built);
        let incoming = Incoming { enb_ue_id, stream, erabs, forwarding, kenb, ncc: req.ncc, ambr: Some(req.ambr) };
        self.ho.reserved.insert(enb_ue_id);
        self.ho.incoming.insert(req.mme_ue_id, incoming);
    }

    fn mme_status_transfer(&mut self, mme_ue_id: u32, enb_ue_id: u32) {
        // TS 36.413 8.4.7: before or after the UE arrived.
        if self.ho.incoming.get(&mme_ue_id).is_some_and(|i| i.enb_ue_id == enb_ue_id) {
            return;
        }
        let _ = self.associate(mme_ue_id, enb_ue_id);
    }

    /// The UE of an S1 handover arrives at this (target) eNB: it takes the
    /// RRC HandoverCommand (KeNB from the NCC it carries), which must give
    /// the KeNB this eNB took from NH; then HANDOVER NOTIFY (TS 36.413
    /// 8.4.3.2). On an error the UE stays here idle and the failure is
    /// reported.
    pub fn s1_handover_arrive(&mut self, now: Instant, d: S1Departure) -> Result<Vec<ErabForwarding>, HandoverError> {
        let S1Departure { ue_index: index, mut ue, mme_ue_id, rrc_command, started } = d;
        let cell = self.cell();
        let ue_kenb = ue.take_handover_command(&rrc_command, cell.pci, cell.earfcn_dl);
        self.ues.insert(index, Box::new(UeContext::new(ue)));
        self.arrived_by_handover(index);
        // The prepared context: the one the MME named with the source's
        // MME-UE-S1AP-ID (an MME that keeps the ID), else the one whose KeNB
        // the UE derived (an MME that gives the target connection a new ID;
        // over the air the UE proves itself with these keys, TS 36.331
        // 5.3.5.4).
        let prepared = match self.ho.incoming.contains_key(&mme_ue_id) {
            true => Some(mme_ue_id),
            false => ue_kenb.as_ref().ok().and_then(|k| self.ho.incoming_by_kenb(k)),
        };
        let Some(incoming) = prepared.and_then(|m| self.ho.take_incoming(m)) else {
            let error = HandoverError::NotPrepared(mme_ue_id);
            return self.s1_arrival_failed(now, index, started, error);
        };
        // The target connection's MME-UE-S1AP-ID from here on.
        let mme_ue_id = prepared.unwrap_or(mme_ue_id);
        if ue_kenb.as_ref().ok() != Some(&incoming.kenb) {
            // The UE cannot complete RRC reconfiguration: ask the MME to
            // release the prepared context (TS 36.413 8.3.2).
            self.stale.insert(incoming.enb_ue_id, (mme_ue_id, incoming.stream));
            let cause = Cause::radioNetwork(CauseRadioNetwork::failure_in_radio_interface_procedure);
            let built = super::s1ap_build::ue_context_release_request(mme_ue_id, incoming.enb_ue_id, cause);
            self.push_pdu(incoming.stream, built);
            let error = HandoverError::Keys(match ue_kenb {
                Ok(_) => "the UE's KeNB differs from the one the target took from NH".into(),
                Err(e) => e.to_string(),
            });
            return self.s1_arrival_failed(now, index, started, error);
        }
        let conn = S1Connection {
            enb_ue_id: incoming.enb_ue_id,
            mme_ue_id: Some(mme_ue_id),
            stream: incoming.stream,
            release_requested: false,
        };
        self.by_enb_ue_id.insert(conn.enb_ue_id, index);
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.s1 = Some(conn);
            ctx.erabs = incoming.erabs;
            ctx.kenb = Some(incoming.kenb);
            ctx.ambr = incoming.ambr;
            ctx.mobility = Mobility { kenb_of: Some(incoming.kenb), ncc: incoming.ncc, next_hop: None, state: None };
        }
        self.push_pdu(conn.stream, handover_notify(mme_ue_id, conn.enb_ue_id, &cell));
        self.actions.push_back(EnbAction::Handover(HandoverAction::S1HandoverArrived {
            ue: index,
            forwarding: incoming.forwarding.clone(),
        }));
        self.handover_outcome(index, Procedure::S1Handover, started, now, Ok(()));
        self.arm_inactivity(now, index);
        Ok(incoming.forwarding)
    }

    fn s1_arrival_failed(
        &mut self,
        now: Instant,
        index: u64,
        started: Instant,
        error: HandoverError,
    ) -> Result<Vec<ErabForwarding>, HandoverError> {
        if let Some(ctx) = self.ues.get_mut(&index) {
            ctx.ue.connection_released(now);
        }
        self.settle_ue(index);
        self.handover_outcome(index, Procedure::S1Handover, started, now, Err(error.to_string()));
        self.drive(index);
        Err(error)
    }

    // ---- shared ----

    /// A handover message from the MME.
    pub(super) fn handle_handover(&mut self, now: Instant, message: HandoverMessage) {
        match message {
            HandoverMessage::Command { mme_ue_id, enb_ue_id, forwarding, target_to_source } => {
                self.handover_command(mme_ue_id, enb_ue_id, &forwarding, &target_to_source)
            }
            HandoverMessage::PreparationFailure { mme_ue_id, enb_ue_id, cause } => {
                self.preparation_failure(now, mme_ue_id, enb_ue_id, &cause)
            }
            HandoverMessage::Request(req) => self.handover_request(req),
            HandoverMessage::MmeStatusTransfer { mme_ue_id, enb_ue_id } => {
                self.mme_status_transfer(mme_ue_id, enb_ue_id)
            }
            HandoverMessage::PathSwitchAcknowledge { mme_ue_id, enb_ue_id, ncc, nh, uplink } => {
                self.path_switch_ack(now, mme_ue_id, enb_ue_id, ncc, &nh, &uplink)
            }
            HandoverMessage::PathSwitchFailure { mme_ue_id, enb_ue_id, cause } => {
                self.path_switch_failure(now, mme_ue_id, enb_ue_id, &cause)
            }
            HandoverMessage::CancelAcknowledge { mme_ue_id, enb_ue_id } => {
                self.cancel_acknowledge(mme_ue_id, enb_ue_id)
            }
        }
    }

    /// ERROR INDICATION for an unknown eNB-UE-S1AP-ID (TS 36.413 10.6).
    fn unknown_ue(&mut self, mme_ue_id: u32, enb_ue_id: u32) {
        let cause = CauseRadioNetwork::unknown_enb_ue_s1ap_id;
        self.anomaly(&format!("UE-associated message with {cause:?}"));
        let built = super::s1ap_build::error_indication(Some(mme_ue_id), Some(enb_ue_id), Cause::radioNetwork(cause));
        self.push_pdu(0, built);
    }

    /// UE CONTEXT RELEASE COMMAND for a handover context: a prepared one
    /// that never got its UE (cancelled at the target) is answered here
    /// (returns true); a source's forwarding state goes with its old
    /// connection.
    pub(super) fn handover_release(&mut self, now: Instant, mme_ue_id: u32, enb_ue_id: Option<u32>) -> bool {
        let Some(enb) = enb_ue_id else { return false };
        // A UE released in the middle of its handover: the handover failed.
        if let Some(index) = self.by_enb_ue_id.get(&enb).copied() {
            let state = self.ues.get_mut(&index).and_then(|c| c.mobility.state.take());
            let started = match state {
                Some(State::S1Preparing { started, .. } | State::S1Executing { started, .. }) => {
                    Some((Procedure::S1Handover, started))
                }
                Some(State::X2PathSwitch { started, .. }) => Some((Procedure::X2Handover, started)),
                _ => None,
            };
            if let Some((procedure, started)) = started {
                self.handover_outcome(
                    index,
                    procedure,
                    started,
                    now,
                    Err("UE context released during handover".into()),
                );
            }
        }
        if self.ho.incoming.get(&mme_ue_id).is_some_and(|i| i.enb_ue_id == enb) {
            if let Some(i) = self.ho.take_incoming(mme_ue_id) {
                self.push_pdu(i.stream, super::s1ap_build::ue_context_release_complete(mme_ue_id, enb));
            }
            return true;
        }
        if self.stale.contains_key(&enb) {
            self.ho.sources.retain(|_, s| s.enb_ue_id != enb);
        }
        false
    }

    /// Handover guards: TS1RELOCprep at an S1 source (HANDOVER CANCEL,
    /// TS 36.413 8.4.1.2), the path switch at an X2 target (the UE is
    /// dropped as on failure).
    pub(super) fn handover_timeout(&mut self, now: Instant) {
        while let Some(Reverse((deadline, index, generation))) = self.ho.timers.peek().copied() {
            if deadline > now {
                break;
            }
            self.ho.timers.pop();
            let Some(ctx) = self.ues.get(&index) else { continue };
            match ctx.mobility.state {
                Some(State::S1Preparing { generation: g, .. }) if g == generation => {
                    let _ = self.s1_cancel(now, index, CauseRadioNetwork::tS1relocprep_expiry, "TS1RELOCprep expired");
                }
                Some(State::X2PathSwitch { generation: g, .. }) if g == generation => {
                    let (mme, enb) = match ctx.s1 {
                        Some(c) => (c.mme_ue_id.unwrap_or_default(), c.enb_ue_id),
                        None => continue,
                    };
                    self.path_switch_failure(now, mme, enb, "no answer to PATH SWITCH REQUEST");
                }
                _ => {}
            }
        }
    }
}
