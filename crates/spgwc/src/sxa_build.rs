//! Building the PFCP requests of the SGW-C/PGW-C (TS 29.244 7.4, 7.5) with
//! rs-pfcp's IE types, and reading the answers' header and IEs (framing
//! from [`mobicore_pfcp`]).

use mobicore_common::Ambr;
use rs_pfcp::ie::apply_action::ApplyAction;
use rs_pfcp::ie::bar_id::BarId;
use rs_pfcp::ie::create_bar::CreateBar;
use rs_pfcp::ie::create_far::CreateFar;
use rs_pfcp::ie::create_pdr::CreatePdr;
use rs_pfcp::ie::create_qer::CreateQer;
use rs_pfcp::ie::create_urr::CreateUrr;
use rs_pfcp::ie::destination_interface::{DestinationInterface, Interface};
use rs_pfcp::ie::f_teid::Fteid;
use rs_pfcp::ie::far_id::FarId;
use rs_pfcp::ie::forwarding_parameters::ForwardingParameters;
use rs_pfcp::ie::fseid::Fseid;
use rs_pfcp::ie::gate_status::{GateStatus, GateStatusValue};
use rs_pfcp::ie::mbr::Mbr;
use rs_pfcp::ie::measurement_method::MeasurementMethod;
use rs_pfcp::ie::measurement_period::MeasurementPeriod;
use rs_pfcp::ie::network_instance::NetworkInstance;
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::outer_header_creation::OuterHeaderCreation;
use rs_pfcp::ie::outer_header_removal::OuterHeaderRemoval;
use rs_pfcp::ie::pdi::Pdi;
use rs_pfcp::ie::pdr_id::PdrId;
use rs_pfcp::ie::pfcpsm_req_flags::PfcpsmReqFlags;
use rs_pfcp::ie::precedence::Precedence;
use rs_pfcp::ie::qer_id::QerId;
use rs_pfcp::ie::recovery_time_stamp::RecoveryTimeStamp;
use rs_pfcp::ie::reporting_triggers::ReportingTriggers;
use rs_pfcp::ie::source_interface::{SourceInterface, SourceInterfaceValue};
use rs_pfcp::ie::suggested_buffering_packets_count::SuggestedBufferingPacketsCount;
use rs_pfcp::ie::ue_ip_address::UeIpAddress;
use rs_pfcp::ie::update_bar::UpdateBar;
use rs_pfcp::ie::update_far::UpdateFar;
use rs_pfcp::ie::update_forwarding_parameters::UpdateForwardingParameters;
use rs_pfcp::ie::urr_id::UrrId;
use rs_pfcp::ie::usage_report::UsageReport;
use rs_pfcp::ie::{Ie, IeType};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::SystemTime;

/// Message types (TS 29.244 Table 7.3-1), shared with the UPF.
pub use mobicore_pfcp::msg;
/// The PFCP header fields (TS 29.244 7.2.2) and the message builder, shared
/// with the UPF.
pub use mobicore_pfcp::{encode, PfcpHeader};

/// Rule IDs of the default bearer's rules.
pub const PDR_UPLINK: u16 = 1;
pub const PDR_DOWNLINK: u16 = 2;
pub const FAR_UPLINK: u32 = 1;
pub const FAR_DOWNLINK: u32 = 2;
pub const BAR_DOWNLINK: u8 = 1;
/// The session's URR, on both PDRs: what the PDN connection carried.
pub const URR_SESSION: u32 = 1;
/// The session's QER, on both PDRs: the APN-AMBR as MBR.
pub const QER_APN_AMBR: u32 = 1;
/// PFCP Session Report Request / Response (TS 29.244 7.5.8, 7.5.9).
pub const SESSION_REPORT_REQUEST: u8 = 56;
pub const SESSION_REPORT_RESPONSE: u8 = 57;
/// Outer Header Removal "GTP-U/UDP/IPv4" (TS 29.244 8.2.64).
pub const OHR_GTPU_UDP_IPV4: u8 = 0;

/// Reads the header and the top-level IEs; `None` if unreadable.
pub fn decode(b: &[u8]) -> Option<(PfcpHeader, Vec<Ie>)> {
    mobicore_pfcp::decode(b).ok()
}

/// The Cause value of an answer (TS 29.244 8.2.1), 0 if absent.
pub fn cause_of(ies: &[Ie]) -> u8 {
    ies.iter().find(|i| i.ie_type == IeType::Cause).and_then(|i| i.payload.first().copied()).unwrap_or(0)
}

/// The UP F-SEID of a Session Establishment Response.
pub fn up_seid_of(ies: &[Ie]) -> Option<u64> {
    ies.iter()
        .find(|i| i.ie_type == IeType::Fseid)
        .and_then(|i| Fseid::unmarshal(&i.payload).ok())
        .map(|f| f.seid.into())
}

/// Network Instance as DNS labels, like an APN (TS 29.244 8.2.4, TS 23.003 9.1).
pub fn network_instance(apn: &str) -> NetworkInstance {
    let mut s = String::new();
    for l in apn.split('.').filter(|l| !l.is_empty()) {
        s.push(l.len().min(63) as u8 as char);
        s.push_str(&l[..l.len().min(63)]);
    }
    NetworkInstance { instance: s }
}

pub fn association_setup_request(node_id: Ipv4Addr, recovery: SystemTime) -> Vec<Ie> {
    vec![NodeId::new_ipv4(node_id).to_ie(), RecoveryTimeStamp::new(recovery).to_ie()]
}

pub fn heartbeat_request(recovery: SystemTime) -> Vec<Ie> {
    vec![RecoveryTimeStamp::new(recovery).to_ie()]
}

/// What a default bearer's session needs on the UPF.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    pub node_id: Ipv4Addr,
    pub cp_seid: u64,
    pub apn: String,
    pub s1u_teid: u32,
    pub s1u_addr: Ipv4Addr,
    pub ue_ipv4: Option<Ipv4Addr>,
    /// The UE's IPv6 address (in its /64), also in the downlink PDI.
    pub ue_ipv6: Option<Ipv6Addr>,
    /// APN-AMBR, enforced by a QER with this MBR on both PDRs
    /// (TS 29.244 5.4, TS 23.401 4.7.3); `None`: no QER.
    pub apn_ambr: Option<Ambr>,
    /// Periodic usage reports every this many seconds (PERIO); `None`:
    /// usage comes with the Session Deletion Response only.
    pub usage_period: Option<u32>,
}

/// Session Establishment Request IEs (TS 29.244 7.5.2): uplink PDR
/// (Access, local F-TEID, outer header removal) -> FAR FORW to Core;
/// downlink PDR (Core, UE IP as destination) -> FAR BUFF with a BAR until
/// the eNB F-TEID is known; with an APN-AMBR, a QER with that MBR on both.
pub fn session_establishment(s: &SessionSpec) -> Vec<Ie> {
    let ni = network_instance(&s.apn);
    let mut ul_pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Access));
    ul_pdi.f_teid = Some(Fteid::new(true, false, s.s1u_teid, Some(s.s1u_addr), None, 0));
    ul_pdi.network_instance = Some(ni.clone());
    let mut ul = CreatePdr::new(PdrId::new(PDR_UPLINK), Precedence::new(255), ul_pdi);
    ul.outer_header_removal = Some(OuterHeaderRemoval::new(OHR_GTPU_UDP_IPV4));
    ul.far_id = Some(FarId::new(FAR_UPLINK));

    let mut dl_pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Core));
    dl_pdi.network_instance = Some(ni.clone());
    let mut ue = UeIpAddress::new(s.ue_ipv4, s.ue_ipv6);
    ue.source_destination = true; // S/D = destination (TS 29.244 8.2.62)
    dl_pdi.ue_ip_addresses = vec![ue];
    let mut dl = CreatePdr::new(PdrId::new(PDR_DOWNLINK), Precedence::new(255), dl_pdi);
    dl.far_id = Some(FarId::new(FAR_DOWNLINK));
    ul.urr_ids = vec![UrrId::new(URR_SESSION)];
    dl.urr_ids = vec![UrrId::new(URR_SESSION)];
    let qer = s.apn_ambr.map(apn_ambr_qer);
    if qer.is_some() {
        ul.qer_ids = vec![QerId::new(QER_APN_AMBR)];
        dl.qer_ids = vec![QerId::new(QER_APN_AMBR)];
    }

    let mut ul_far = CreateFar::new(FarId::new(FAR_UPLINK), ApplyAction::new(0));
    ul_far.apply_action.insert(ApplyAction::FORW);
    let mut fp = ForwardingParameters::new(DestinationInterface::new(Interface::Core));
    fp.network_instance = Some(ni);
    ul_far.forwarding_parameters = Some(fp);

    let mut dl_far = CreateFar::new(FarId::new(FAR_DOWNLINK), ApplyAction::new(0));
    dl_far.apply_action.insert(ApplyAction::BUFF);
    dl_far.bar_id = Some(BarId::new(BAR_DOWNLINK));

    let mut ies = vec![
        NodeId::new_ipv4(s.node_id).to_ie(),
        Ie::new(IeType::Fseid, Fseid::new(s.cp_seid, Some(s.node_id), None).marshal()),
        ul.to_ie(),
        dl.to_ie(),
        ul_far.to_ie(),
        dl_far.to_ie(),
        CreateBar::new(BarId::new(BAR_DOWNLINK), None).to_ie(),
        session_urr(s.usage_period).to_ie(),
    ];
    ies.extend(qer.map(|q| q.to_ie()));
    ies
}

/// The APN-AMBR as a QER (TS 29.244 7.5.2.5): gates open, MBR in kbit/s
/// (8.2.8); a direction without a limit (0) gets the largest MBR.
fn apn_ambr_qer(a: Ambr) -> CreateQer {
    const UNLIMITED_KBPS: u64 = 0xff_ffff_ffff;
    let kbps = |b: u64| if b == 0 { UNLIMITED_KBPS } else { b.div_ceil(1000).min(UNLIMITED_KBPS) };
    let mut q = CreateQer::new(QerId::new(QER_APN_AMBR));
    q.gate_status = Some(GateStatus::new(GateStatusValue::Open, GateStatusValue::Open));
    q.mbr = Some(Mbr::new(kbps(a.uplink), kbps(a.downlink)));
    q
}

/// The session's URR (TS 29.244 7.5.2.4): volume and duration, reported
/// every `period` seconds if given (PERIO) and at deletion in any case.
fn session_urr(period: Option<u32>) -> CreateUrr {
    let mut triggers = ReportingTriggers::new();
    if period.is_some() {
        triggers.insert(ReportingTriggers::PERIO);
    }
    let mut u = CreateUrr::new(
        UrrId::new(URR_SESSION),
        MeasurementMethod::new(true, true, false),
        triggers,
        None,
        None,
        None,
        None,
        None,
        None,
    );
    u.measurement_period = period.map(MeasurementPeriod::new);
    u
}

/// What Usage Reports (TS 29.244 7.5.5.2, 7.5.7.2, 7.5.8.3) said, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub reports: u64,
    pub uplink_octets: u64,
    pub downlink_octets: u64,
    pub uplink_packets: u64,
    pub downlink_packets: u64,
    pub duration_secs: u64,
}

impl Usage {
    /// Adds `o`, saturating: the values are the UPF's and may be anything
    /// (no silent wrap).
    pub fn add(&mut self, o: &Usage) {
        self.reports = self.reports.saturating_add(o.reports);
        self.uplink_octets = self.uplink_octets.saturating_add(o.uplink_octets);
        self.downlink_octets = self.downlink_octets.saturating_add(o.downlink_octets);
        self.uplink_packets = self.uplink_packets.saturating_add(o.uplink_packets);
        self.downlink_packets = self.downlink_packets.saturating_add(o.downlink_packets);
        self.duration_secs = self.duration_secs.saturating_add(o.duration_secs);
    }
}

/// Sums the Usage Report IEs of a Session Modification Response (IE 78),
/// Deletion Response (79) or Report Request (80); `Err` if one does not
/// decode.
pub fn usage_reports(ies: &[Ie]) -> Result<Usage, rs_pfcp::error::PfcpError> {
    let mut u = Usage::default();
    for ie in ies.iter().filter(|i| {
        matches!(
            i.ie_type,
            IeType::UsageReportWithinSessionModificationResponse
                | IeType::UsageReportWithinSessionDeletionResponse
                | IeType::UsageReportWithinSessionReportRequest
        )
    }) {
        let r = UsageReport::unmarshal(&ie.payload)?;
        let mut one = Usage { reports: 1, ..Usage::default() };
        if let Some(v) = &r.volume_measurement {
            one.uplink_octets = v.uplink_volume.unwrap_or(0);
            one.downlink_octets = v.downlink_volume.unwrap_or(0);
            one.uplink_packets = v.uplink_packets.unwrap_or(0);
            one.downlink_packets = v.downlink_packets.unwrap_or(0);
        }
        if let Some(d) = &r.duration_measurement {
            one.duration_secs = u64::from(d.duration_seconds);
        }
        u.add(&one);
    }
    Ok(u)
}

/// Session Modification after Modify Bearer: the downlink FAR forwards to
/// the eNB with Outer Header Creation GTP-U/UDP/IPv4 (TS 29.244 7.5.4).
/// `end_marker`: the FAR forwarded to another eNB before (X2 / S1
/// handover), so the UPF is asked to send End Marker packets on the old
/// path first (PFCPSMReq-Flags SNDEM, TS 29.244 8.2.58; TS 23.401
/// 5.5.1.1.2 step 4, TS 29.281 7.3.2).
pub fn forward_downlink(enb_teid: u32, enb_ipv4: Ipv4Addr, end_marker: bool) -> Vec<Ie> {
    let mut fp = UpdateForwardingParameters::new();
    fp.destination_interface = Some(DestinationInterface::new(Interface::Access));
    fp.outer_header_creation = Some(OuterHeaderCreation::gtpu_ipv4(enb_teid, enb_ipv4));
    let mut a = ApplyAction::new(0);
    a.insert(ApplyAction::FORW);
    let mut ies = vec![UpdateFar::new(FarId::new(FAR_DOWNLINK), Some(a), Some(fp), None, None).to_ie()];
    if end_marker {
        ies.push(Ie::new(IeType::PfcpsmReqFlags, PfcpsmReqFlags::SNDEM.marshal().to_vec()));
    }
    ies
}

/// Session Modification discarding the buffered downlink (TS 23.401
/// 5.3.4.3 step 5: paging failed): the downlink FAR drops, which discards
/// what the UPF holds; [`buffer_downlink`] then buffers and notifies again.
pub fn discard_downlink() -> Vec<Ie> {
    let mut a = ApplyAction::new(0);
    a.insert(ApplyAction::DROP);
    vec![UpdateFar::new(FarId::new(FAR_DOWNLINK), Some(a), None, None, None).to_ie()]
}

/// Session Modification after a DDN Acknowledge with a DL Buffering
/// Suggested Packet Count (TS 23.401 5.3.4.3): the BAR's Suggested
/// Buffering Packets Count (TS 29.244 7.5.4.14, 8.2.107).
pub fn update_bar(packets: u16) -> Vec<Ie> {
    vec![UpdateBar::new(BarId::new(BAR_DOWNLINK), Some(SuggestedBufferingPacketsCount::new(packets))).to_ie()]
}

/// Rule IDs of the indirect data forwarding tunnel (one per session: the
/// default bearer's).
pub const PDR_FORWARDING: u16 = 3;
pub const FAR_FORWARDING: u32 = 3;

/// Session Modification for Create Indirect Data Forwarding Tunnel
/// (TS 23.401 5.5.1.2.2 step 8): a PDR on the Access side with our F-TEID
/// for DL data forwarding (the source eNB forwards to it), whose FAR
/// forwards with Outer Header Creation to the target eNB's F-TEID.
pub fn create_forwarding(teid: u32, addr: Ipv4Addr, target_teid: u32, target: Ipv4Addr) -> Vec<Ie> {
    let mut pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Access));
    pdi.f_teid = Some(Fteid::new(true, false, teid, Some(addr), None, 0));
    let mut pdr = CreatePdr::new(PdrId::new(PDR_FORWARDING), Precedence::new(255), pdi);
    pdr.outer_header_removal = Some(OuterHeaderRemoval::new(OHR_GTPU_UDP_IPV4));
    pdr.far_id = Some(FarId::new(FAR_FORWARDING));
    let mut far = CreateFar::new(FarId::new(FAR_FORWARDING), ApplyAction::new(0));
    far.apply_action.insert(ApplyAction::FORW);
    let mut fp = ForwardingParameters::new(DestinationInterface::new(Interface::Access));
    fp.outer_header_creation = Some(OuterHeaderCreation::gtpu_ipv4(target_teid, target));
    far.forwarding_parameters = Some(fp);
    vec![pdr.to_ie(), far.to_ie()]
}

/// Session Modification for Delete Indirect Data Forwarding Tunnel
/// (TS 23.401 5.5.1.2.2 step 19): its PDR and FAR removed.
pub fn remove_forwarding() -> Vec<Ie> {
    // Grouped IEs holding the rule's ID (TS 29.244 7.5.4.6, 7.5.4.7);
    // rs-pfcp's own encoding leaves out the inner IE header.
    let grouped = |t: IeType, inner: Ie| Ie::new(t, inner.marshal());
    vec![
        grouped(IeType::RemovePdr, PdrId::new(PDR_FORWARDING).to_ie()),
        grouped(IeType::RemoveFar, FarId::new(FAR_FORWARDING).to_ie()),
    ]
}

/// Session Modification after Release Access Bearers: buffer downlink and
/// notify the CP function of the first packet (BUFF + NOCP).
pub fn buffer_downlink() -> Vec<Ie> {
    let mut a = ApplyAction::new(0);
    a.insert(ApplyAction::BUFF);
    a.insert(ApplyAction::NOCP);
    let mut u = UpdateFar::new(FarId::new(FAR_DOWNLINK), Some(a), None, None, None);
    u.bar_id = Some(BarId::new(BAR_DOWNLINK));
    vec![u.to_ie()]
}
