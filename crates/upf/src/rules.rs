//! The rules a PFCP session installs (TS 29.244 5.2): PDR, FAR, QER, URR,
//! BAR as plain values, read from rs-pfcp's IEs, and the
//! [`ForwardingPlane`] that holds them (an in-memory one here; the data path
//! implements the same trait later).

pub use crate::dataplane::flow::FlowFilter;
pub use crate::urr::{UrrTriggers, UsageCounts, UsageMeasurement, UsageTrigger};
pub use mobicore_pfcp::mec::MecSession;
pub use mobicore_pfcp::steering::Diversion;
use rs_pfcp::error::PfcpError;
use rs_pfcp::ie::apply_action::ApplyAction;
use rs_pfcp::ie::create_bar::CreateBar;
use rs_pfcp::ie::create_far::CreateFar;
use rs_pfcp::ie::create_pdr::CreatePdr;
use rs_pfcp::ie::create_qer::CreateQer;
use rs_pfcp::ie::create_urr::CreateUrr;
use rs_pfcp::ie::destination_interface::DestinationInterface;
use rs_pfcp::ie::forwarding_policy::ForwardingPolicy;
use rs_pfcp::ie::gate_status::GateStatusValue;
use rs_pfcp::ie::network_instance::NetworkInstance;
use rs_pfcp::ie::outer_header_creation::OuterHeaderCreation;
use rs_pfcp::ie::pdi::Pdi;
use rs_pfcp::ie::{IeIterator, IeType};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// Source Interface values (TS 29.244 8.2.2).
pub const INTERFACE_ACCESS: u8 = 0;
pub const INTERFACE_CORE: u8 = 1;

/// Network Instance, accepted as DNS labels or as plain text (TS 29.244
/// 8.2.4 allows both encodings); kept as dotted text.
pub fn network_instance_text(raw: &[u8]) -> String {
    let mut out = Vec::new();
    let mut rest = raw;
    let mut labels = true;
    while let Some((&l, tail)) = rest.split_first() {
        let l = l as usize;
        if l == 0 || l > 63 || tail.len() < l || !tail[..l].iter().all(|c| c.is_ascii_graphic() && *c != b'.') {
            labels = false;
            break;
        }
        if !out.is_empty() {
            out.push(b'.');
        }
        out.extend_from_slice(&tail[..l]);
        rest = &tail[l..];
    }
    if labels && !raw.is_empty() {
        String::from_utf8_lossy(&out).into_owned()
    } else {
        String::from_utf8_lossy(raw).into_owned()
    }
}

fn ni(n: &Option<NetworkInstance>) -> Option<String> {
    n.as_ref().map(|n| network_instance_text(n.instance.as_bytes()))
}

/// Packet Detection Information (TS 29.244 7.5.2.2-2), the parts we match on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketDetection {
    pub source_interface: u8,
    /// Local F-TEID: TEID and IPv4 address.
    pub local_fteid: Option<(u32, Ipv4Addr)>,
    /// Requested CHOOSE: the UP function allocates the F-TEID.
    pub choose_fteid: bool,
    pub ue_ipv4: Option<Ipv4Addr>,
    /// The UE's IPv6 address; its /64 is the PDN connection's prefix (TS
    /// 29.244 8.2.62: no prefix length given means /64).
    #[serde(default)]
    pub ue_ipv6: Option<Ipv6Addr>,
    pub network_instance: Option<String>,
    pub sdf_filters: usize,
    /// The SDF filters' flow descriptions that we could read (TS 29.244
    /// 8.2.5); a PDR with an unreadable one never matches.
    #[serde(with = "crate::dump::flows")]
    pub flows: Vec<FlowFilter>,
}

impl PacketDetection {
    pub fn from_pdi(p: &Pdi) -> Self {
        PacketDetection {
            source_interface: p.source_interface.value as u8,
            local_fteid: p.f_teid.as_ref().and_then(|f| f.ipv4_address.map(|a| (u32::from(f.teid), a))),
            choose_fteid: p.f_teid.as_ref().is_some_and(|f| f.ch),
            ue_ipv4: p.ue_ip_addresses.iter().find_map(|u| u.ipv4_address),
            ue_ipv6: p.ue_ip_addresses.iter().find_map(|u| u.ipv6_address),
            network_instance: ni(&p.network_instance),
            sdf_filters: p.sdf_filters.len(),
            flows: p
                .sdf_filters
                .iter()
                .map(|f| FlowFilter::parse(&f.flow_description).unwrap_or(FlowFilter::NEVER))
                .collect(),
        }
    }
}

/// Packet Detection Rule (TS 29.244 7.5.2.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pdr {
    pub id: u16,
    pub precedence: u32,
    pub pdi: PacketDetection,
    /// Outer Header Removal description (0 = GTP-U/UDP/IPv4).
    pub outer_header_removal: Option<u8>,
    pub far_id: Option<u32>,
    pub qer_ids: Vec<u32>,
    pub urr_ids: Vec<u32>,
}

impl Pdr {
    pub fn from_ie(c: &CreatePdr) -> Self {
        Pdr {
            id: c.pdr_id.value,
            precedence: c.precedence.value,
            pdi: PacketDetection::from_pdi(&c.pdi),
            outer_header_removal: c.outer_header_removal.map(|o| o.description),
            far_id: c.far_id.map(|f| f.value),
            qer_ids: c.qer_ids.iter().map(|q| q.value).collect(),
            urr_ids: c.urr_ids.iter().map(|u| u.id).collect(),
        }
    }
}

/// Outer Header Creation with GTP-U/UDP/IPv4 (TS 29.244 8.2.56).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GtpuTunnel {
    pub teid: u32,
    pub ipv4: Ipv4Addr,
}

/// Apply Action flags (TS 29.244 8.2.26) we act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Action {
    pub drop: bool,
    pub forw: bool,
    pub buff: bool,
    pub nocp: bool,
    pub dupl: bool,
}

impl Action {
    pub fn from_ie(a: &ApplyAction) -> Self {
        Action {
            drop: a.contains(ApplyAction::DROP),
            forw: a.contains(ApplyAction::FORW),
            buff: a.contains(ApplyAction::BUFF),
            nocp: a.contains(ApplyAction::NOCP),
            dupl: a.contains(ApplyAction::DUPL),
        }
    }
    /// Exactly one of DROP, FORW, BUFF must be set (TS 29.244 8.2.26).
    pub fn is_valid(&self) -> bool {
        [self.drop, self.forw, self.buff].iter().filter(|b| **b).count() == 1
    }
}

/// Forwarding Action Rule (TS 29.244 7.5.2.3).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Far {
    pub id: u32,
    pub action: Action,
    pub destination_interface: Option<u8>,
    pub network_instance: Option<String>,
    pub outer_header_creation: Option<GtpuTunnel>,
    pub bar_id: Option<u8>,
    /// Duplicating Parameters, one per destination of copies (TS 29.244
    /// 7.5.2.3-3); needed when the action has DUPL.
    pub duplicating: Vec<Duplicate>,
}

/// One Duplicating Parameters IE of a FAR (TS 29.244 Table 7.5.2.3-3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Duplicate {
    pub destination_interface: u8,
    /// Where copies go in GTP-U/UDP/IPv4 (8.2.56); without it copies go
    /// unencapsulated, which only a Core destination can take.
    pub outer_header_creation: Option<GtpuTunnel>,
    /// ToS of the copies' outer IPv4 header from Transport Level Marking
    /// (8.2.12: ToS octet masked, ECN bits left to the stack).
    pub tos: Option<u8>,
    /// Kept, not applied: no forwarding policies are configured here.
    pub forwarding_policy: Option<String>,
}

/// A Duplicating Parameters IE we cannot act on (an outer header other
/// than GTP-U/UDP/IPv4): a rule error of its FAR.
#[derive(Debug, Clone, PartialEq)]
pub enum DuplicateError {
    Decode(PfcpError),
    Unsupported,
}

impl From<PfcpError> for DuplicateError {
    fn from(e: PfcpError) -> Self {
        DuplicateError::Decode(e)
    }
}

/// The child IEs of type `t` in a grouped IE's value.
fn children(group: &[u8], t: IeType) -> Result<Vec<Vec<u8>>, PfcpError> {
    let mut v = vec![];
    for ie in IeIterator::new(group) {
        let ie = ie?;
        if ie.ie_type == t {
            v.push(ie.payload);
        }
    }
    Ok(v)
}

impl Duplicate {
    /// Applies the children of a Duplicating Parameters (TS 29.244
    /// 7.5.2.3-3) or Update Duplicating Parameters (7.5.4.3-3) value to
    /// `self`: the IEs present replace the values held.
    fn apply(&mut self, group: &[u8]) -> Result<(), DuplicateError> {
        if let Some(d) = children(group, IeType::DestinationInterface)?.first() {
            self.destination_interface = DestinationInterface::unmarshal(d)?.interface as u8;
        }
        if let Some(o) = children(group, IeType::OuterHeaderCreation)?.first() {
            self.outer_header_creation =
                Some(gtpu_tunnel(&OuterHeaderCreation::unmarshal(o)?).ok_or(DuplicateError::Unsupported)?);
        }
        if let Some(t) = children(group, IeType::TransportLevelMarking)?.first() {
            // 8.2.12: ToS/Traffic Class octet, then its mask (0xFC).
            let [tos, mask, ..] = t[..] else {
                return Err(PfcpError::invalid_length(
                    "Transport Level Marking",
                    IeType::TransportLevelMarking,
                    2,
                    t.len(),
                )
                .into());
            };
            self.tos = Some(tos & if mask == 0 { 0xfc } else { mask & 0xfc });
        }
        if let Some(f) = children(group, IeType::ForwardingPolicy)?.first() {
            self.forwarding_policy = Some(ForwardingPolicy::unmarshal(f)?.identifier);
        }
        Ok(())
    }

    /// Every Duplicating Parameters IE in the value of a Create FAR (or an
    /// Update FAR), in order.
    pub fn all_in(far: &[u8]) -> Result<Vec<Duplicate>, DuplicateError> {
        children(far, IeType::DuplicatingParameters)?
            .iter()
            .map(|g| {
                if children(g, IeType::DestinationInterface)?.is_empty() {
                    return Err(PfcpError::missing_ie_in_grouped(
                        IeType::DestinationInterface,
                        IeType::DuplicatingParameters,
                    )
                    .into());
                }
                let mut d = Duplicate {
                    destination_interface: 0,
                    outer_header_creation: None,
                    tos: None,
                    forwarding_policy: None,
                };
                d.apply(g)?;
                Ok(d)
            })
            .collect()
    }

    /// Applies the Update Duplicating Parameters IEs of an Update FAR value
    /// (TS 29.244 7.5.4.3-3). The IE carries no identifier: the n-th one
    /// updates the FAR's n-th Duplicating Parameters; one beyond those adds
    /// a destination and needs its Destination Interface. Duplicating
    /// Parameters IEs in an Update FAR (sent by some CP functions) replace
    /// the whole list.
    pub fn update_in(far: &[u8], list: &mut Vec<Duplicate>) -> Result<(), DuplicateError> {
        let full = Duplicate::all_in(far)?;
        if !full.is_empty() {
            *list = full;
        }
        for (i, g) in children(far, IeType::UpdateDuplicatingParameters)?.iter().enumerate() {
            if i >= list.len() {
                if children(g, IeType::DestinationInterface)?.is_empty() {
                    return Err(PfcpError::missing_ie_in_grouped(
                        IeType::DestinationInterface,
                        IeType::UpdateDuplicatingParameters,
                    )
                    .into());
                }
                list.push(Duplicate {
                    destination_interface: 0,
                    outer_header_creation: None,
                    tos: None,
                    forwarding_policy: None,
                });
            }
            list[i].apply(g)?;
        }
        Ok(())
    }
}

pub(crate) fn gtpu_tunnel(o: &OuterHeaderCreation) -> Option<GtpuTunnel> {
    match (o.description.gtpu_udp_ipv4, o.teid, o.ipv4_address) {
        (true, Some(t), Some(a)) => Some(GtpuTunnel { teid: t.into(), ipv4: a }),
        _ => None,
    }
}

impl Far {
    pub fn from_ie(c: &CreateFar) -> Self {
        let fp = c.forwarding_parameters.as_ref();
        Far {
            id: c.far_id.value,
            action: Action::from_ie(&c.apply_action),
            destination_interface: fp.map(|f| f.destination_interface.interface as u8),
            network_instance: fp.and_then(|f| ni(&f.network_instance)),
            outer_header_creation: fp.and_then(|f| f.outer_header_creation.as_ref()).and_then(gtpu_tunnel),
            bar_id: c.bar_id.as_ref().map(|b| b.id),
            duplicating: vec![],
        }
    }
}

/// QoS Enforcement Rule (TS 29.244 7.5.2.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Qer {
    pub id: u32,
    pub gate_ul_open: bool,
    pub gate_dl_open: bool,
    /// MBR uplink, downlink in kbit/s.
    pub mbr: Option<(u64, u64)>,
    pub qfi: Option<u8>,
}

impl Qer {
    pub fn from_ie(c: &CreateQer) -> Self {
        Qer {
            id: c.qer_id.value,
            gate_ul_open: c.gate_status.is_none_or(|g| g.uplink_gate == GateStatusValue::Open),
            gate_dl_open: c.gate_status.is_none_or(|g| g.downlink_gate == GateStatusValue::Open),
            mbr: c.mbr.as_ref().map(|m| (m.uplink, m.downlink)),
            qfi: c.qfi.as_ref().map(|q| q.value()),
        }
    }
}

/// Volume limits of a URR in octets (TS 29.244 8.2.13, 8.2.50).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct VolumeLimit {
    pub total: Option<u64>,
    pub uplink: Option<u64>,
    pub downlink: Option<u64>,
}

impl VolumeLimit {
    /// Whether (ul, dl) octets reach any of the limits.
    pub fn reached(&self, ul: u64, dl: u64) -> bool {
        self.total.is_some_and(|t| ul.saturating_add(dl) >= t)
            || self.uplink.is_some_and(|t| ul >= t)
            || self.downlink.is_some_and(|t| dl >= t)
    }
}

/// Usage Reporting Rule (TS 29.244 7.5.2.4). Times are in seconds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Urr {
    pub id: u32,
    /// Measurement Method VOLUM and DURAT (TS 29.244 8.2.40).
    pub measure_volume: bool,
    pub measure_duration: bool,
    /// Reporting Triggers (TS 29.244 8.2.19) we act on.
    pub triggers: UrrTriggers,
    pub volume_threshold: Option<VolumeLimit>,
    pub volume_quota: Option<VolumeLimit>,
    pub time_threshold: Option<u32>,
    pub time_quota: Option<u32>,
    pub measurement_period: Option<u32>,
    pub inactivity_detection_time: Option<u32>,
    pub quota_holding_time: Option<u32>,
}

impl Urr {
    /// A Create URR; Quota Holding Time is read only by
    /// [`crate::urr::pfcp::urr_from_create`], which has the raw payload.
    pub fn from_ie(c: &CreateUrr) -> Self {
        crate::urr::pfcp::urr_from_create(c, &[])
    }
}

/// Buffering Action Rule (TS 29.244 7.5.2.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bar {
    pub id: u8,
    pub suggested_buffering_packets_count: Option<u16>,
}

impl Bar {
    pub fn from_ie(c: &CreateBar) -> Self {
        Bar {
            id: c.bar_id.id,
            suggested_buffering_packets_count: c.suggested_buffering_packets_count.as_ref().map(|s| s.count),
        }
    }
}

/// All the rules of one PFCP session (serializable for the full-state
/// dump, [`crate::dump`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRules {
    pub pdrs: BTreeMap<u16, Pdr>,
    pub fars: BTreeMap<u32, Far>,
    pub qers: BTreeMap<u32, Qer>,
    pub urrs: BTreeMap<u32, Urr>,
    pub bars: BTreeMap<u8, Bar>,
}

/// Which rule a check failed on (for the Failed Rule ID IE, TS 29.244 8.2.80).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleRef {
    Pdr(u16),
    Far(u32),
    Qer(u32),
    Urr(u32),
    Bar(u8),
}

impl SessionRules {
    /// Cross-references between rules hold (TS 29.244 5.2.1): each PDR has a
    /// FAR that exists, its QERs and URRs exist, a FAR's BAR exists, and a
    /// FAR's apply action is coherent. A PDR with an SDF filter we cannot
    /// read fails too: installed, it would never match and its traffic
    /// would silently meet the next PDR's rules.
    pub fn check(&self) -> Result<(), RuleError> {
        for p in self.pdrs.values() {
            if p.pdi.flows.iter().any(|f| f.never) {
                return Err(RuleError::Rule(RuleRef::Pdr(p.id)));
            }
            match p.far_id {
                Some(f) if self.fars.contains_key(&f) => {}
                _ => return Err(RuleError::Rule(RuleRef::Pdr(p.id))),
            }
            if p.qer_ids.iter().any(|q| !self.qers.contains_key(q))
                || p.urr_ids.iter().any(|u| !self.urrs.contains_key(u))
            {
                return Err(RuleError::Rule(RuleRef::Pdr(p.id)));
            }
        }
        for f in self.fars.values() {
            if !f.action.is_valid() || f.bar_id.is_some_and(|b| !self.bars.contains_key(&b)) {
                return Err(RuleError::Rule(RuleRef::Far(f.id)));
            }
            // TS 29.244 7.5.2.3-1: Forwarding Parameters "shall be present
            // when the Apply Action requests the packets to be forwarded",
            // Duplicating Parameters "... to be duplicated": conditional
            // IEs (cause 67 with the Offending IE, 8.2.1).
            if f.action.forw && f.destination_interface.is_none() {
                return Err(RuleError::ConditionalIeMissing(rs_pfcp::ie::IeType::ForwardingParameters as u16));
            }
            if f.action.dupl && f.duplicating.is_empty() {
                return Err(RuleError::ConditionalIeMissing(rs_pfcp::ie::IeType::DuplicatingParameters as u16));
            }
            // A copy needs a GTP-U tunnel unless it goes to the core.
            let deliverable =
                |d: &Duplicate| d.outer_header_creation.is_some() || d.destination_interface == INTERFACE_CORE;
            if f.action.dupl && !f.duplicating.iter().all(deliverable) {
                return Err(RuleError::Rule(RuleRef::Far(f.id)));
            }
        }
        Ok(())
    }
}

/// Why a session's rules cannot be installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    /// Cause 73, Rule creation/modification Failure, with this Failed Rule ID.
    Rule(RuleRef),
    /// Cause 67, Conditional IE missing, with this Offending IE type.
    ConditionalIeMissing(u16),
}

/// Why the forwarding plane refused rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaneError {
    #[error("session {0:#x} already installed")]
    Exists(u64),
    #[error("session {0:#x} not installed")]
    NotFound(u64),
    #[error("forwarding plane: {0}")]
    Other(String),
    /// A diversion (steering role) on a data path that cannot steer.
    #[error("this data path cannot steer: diversions need the XDP data path in the steering role")]
    SteeringUnsupported,
    /// A MEC rule or UE tunnel on a data path that is not the MEC router's.
    #[error("this data path cannot route MEC traffic: it needs the XDP data path in the MEC role")]
    MecUnsupported,
}

/// Something the data path tells the PFCP node, which turns it into a
/// PFCP Session Report Request (TS 29.244 7.5.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaneReport {
    /// The first downlink packet was buffered for a FAR with NOCP: a
    /// Downlink Data Report (report type DLDR) naming the PDR.
    DownlinkData { up_seid: u64, pdr_id: u16 },
    /// A Usage Report (USAR). The usage engine makes these now (see
    /// [`crate::urr`]); a plane may still send its own.
    Usage { up_seid: u64, usage: UsageMeasurement },
}

/// Where a session's rules go (the eUPF-style `ForwardingPlaneController`).
pub trait ForwardingPlane: Send {
    fn install(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError>;
    fn update(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError>;
    fn remove(&mut self, up_seid: u64) -> Result<(), PlaneError>;
    /// [`Self::install`] of rules the PFCP node keeps too: a plane that
    /// keeps a copy may share this one instead.
    fn install_shared(&mut self, up_seid: u64, rules: &Arc<SessionRules>) -> Result<(), PlaneError> {
        self.install(up_seid, rules)
    }
    /// [`Self::update`] of rules the PFCP node keeps too.
    fn update_shared(&mut self, up_seid: u64, rules: &Arc<SessionRules>) -> Result<(), PlaneError> {
        self.update(up_seid, rules)
    }
    /// The next report for the CP function, if any (planes that never
    /// report keep the default).
    fn poll_report(&mut self) -> Option<PlaneReport> {
        None
    }
    /// The cumulative counts of a URR: what this plane forwarded for the
    /// PDRs using it since the URR was installed (planes that do not
    /// count keep the default). The usage engine reads it.
    fn usage(&self, _up_seid: u64, _urr_id: u32) -> Option<UsageCounts> {
        None
    }
    /// The neighbours the data path's interfaces currently resolve (the
    /// whole set each time): a fast path keeps its next-hop cache to them.
    fn set_neighbours(&mut self, _neighbours: &[Neighbour]) {}
    /// When [`Self::maintain`] has work (a fast path moving entries back
    /// into their home slots, say); None: nothing to do.
    fn poll_maintenance(&self) -> Option<std::time::Instant> {
        None
    }
    /// Housekeeping of the plane's tables at `now`.
    fn maintain(&mut self, _now: std::time::Instant) {}
    /// Installs, or replaces, the diversion of a steering session
    /// (`crate::steering`); only a plane that steers implements it.
    fn install_diversion(&mut self, _up_seid: u64, _d: &Diversion) -> Result<(), PlaneError> {
        Err(PlaneError::SteeringUnsupported)
    }
    fn remove_diversion(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        Err(PlaneError::NotFound(up_seid))
    }
    /// Installs, or replaces, a MEC session's rule or UE tunnel
    /// (`crate::mec`); only the MEC router's plane implements it.
    fn install_mec(&mut self, _up_seid: u64, _s: &MecSession) -> Result<(), PlaneError> {
        Err(PlaneError::MecUnsupported)
    }
    fn remove_mec(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        Err(PlaneError::NotFound(up_seid))
    }
}

/// A resolved IPv4 neighbour on one of the data path's interfaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    pub addr: Ipv4Addr,
    pub ifindex: u32,
    pub mac: [u8; 6],
    /// The MAC address of our interface towards it.
    pub local_mac: [u8; 6],
}

/// An in-memory forwarding plane; clones share the same table, so a test
/// can inspect what the PFCP node installed. Rules installed through
/// [`ForwardingPlane::install_shared`] are shared, not copied.
#[derive(Clone, Default)]
pub struct MemoryPlane {
    table: Arc<Mutex<HashMap<u64, Arc<SessionRules>>>>,
    /// URR counts a test sets ([`MemoryPlane::set_usage`]).
    counts: Arc<Mutex<HashMap<(u64, u32), UsageCounts>>>,
    diversions: Arc<Mutex<HashMap<u64, Diversion>>>,
    mec: Arc<Mutex<HashMap<u64, MecSession>>>,
}

impl MemoryPlane {
    pub fn new() -> Self {
        Self::default()
    }
    /// A copy of every installed session's rules, keyed by UP SEID.
    pub fn sessions(&self) -> HashMap<u64, SessionRules> {
        self.table.lock().unwrap().iter().map(|(k, v)| (*k, SessionRules::clone(v))).collect()
    }
    pub fn len(&self) -> usize {
        self.table.lock().unwrap().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn get(&self, up_seid: u64) -> Option<SessionRules> {
        self.table.lock().unwrap().get(&up_seid).map(|r| SessionRules::clone(r))
    }
    /// The installed diversions (steering sessions), keyed by UP SEID.
    pub fn diversions(&self) -> HashMap<u64, Diversion> {
        self.diversions.lock().unwrap().clone()
    }
    /// The installed MEC sessions (MEC role), keyed by UP SEID.
    pub fn mec(&self) -> HashMap<u64, MecSession> {
        self.mec.lock().unwrap().clone()
    }
    /// Sets the cumulative counts [`ForwardingPlane::usage`] returns for
    /// a URR (tests stand in for a data path with it).
    pub fn set_usage(&self, up_seid: u64, urr_id: u32, counts: UsageCounts) {
        self.counts.lock().unwrap().insert((up_seid, urr_id), counts);
    }
}

impl ForwardingPlane for MemoryPlane {
    fn install(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.install_shared(up_seid, &Arc::new(rules.clone()))
    }
    fn update(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.update_shared(up_seid, &Arc::new(rules.clone()))
    }
    fn remove(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        self.table.lock().unwrap().remove(&up_seid).map(|_| ()).ok_or(PlaneError::NotFound(up_seid))
    }
    fn usage(&self, up_seid: u64, urr_id: u32) -> Option<UsageCounts> {
        self.counts.lock().unwrap().get(&(up_seid, urr_id)).copied()
    }
    fn install_diversion(&mut self, up_seid: u64, d: &Diversion) -> Result<(), PlaneError> {
        self.diversions.lock().unwrap().insert(up_seid, *d);
        Ok(())
    }
    fn remove_diversion(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        self.diversions.lock().unwrap().remove(&up_seid).map(|_| ()).ok_or(PlaneError::NotFound(up_seid))
    }
    fn install_mec(&mut self, up_seid: u64, s: &MecSession) -> Result<(), PlaneError> {
        self.mec.lock().unwrap().insert(up_seid, s.clone());
        Ok(())
    }
    fn remove_mec(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        self.mec.lock().unwrap().remove(&up_seid).map(|_| ()).ok_or(PlaneError::NotFound(up_seid))
    }
    fn install_shared(&mut self, up_seid: u64, rules: &Arc<SessionRules>) -> Result<(), PlaneError> {
        match self.table.lock().unwrap().entry(up_seid) {
            std::collections::hash_map::Entry::Occupied(_) => Err(PlaneError::Exists(up_seid)),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(rules.clone());
                Ok(())
            }
        }
    }
    fn update_shared(&mut self, up_seid: u64, rules: &Arc<SessionRules>) -> Result<(), PlaneError> {
        match self.table.lock().unwrap().get_mut(&up_seid) {
            Some(r) => {
                *r = rules.clone();
                Ok(())
            }
            None => Err(PlaneError::NotFound(up_seid)),
        }
    }
}

/// The offending IE type of a decoding error, if it names one.
pub fn offending_ie(e: &PfcpError) -> Option<u16> {
    match e {
        PfcpError::MissingMandatoryIe { ie_type, .. } => Some(*ie_type as u16),
        PfcpError::IeParseError { ie_type, .. } => Some(*ie_type as u16),
        PfcpError::InvalidLength { ie_type, .. } => Some(*ie_type as u16),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_instance_both_encodings() {
        assert_eq!(network_instance_text(b"\x08internet"), "internet");
        assert_eq!(network_instance_text(b"\x03ims\x03mnc"), "ims.mnc");
        assert_eq!(network_instance_text(b"internet"), "internet");
        assert_eq!(network_instance_text(b"edge.local"), "edge.local");
    }
}
