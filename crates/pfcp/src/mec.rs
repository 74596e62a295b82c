//! A MEC router's traffic rule (issue 12; seed 001; ETSI GS MEC 011
//! TrafficRule) and a UE's downlink tunnel as PFCP sessions (TS 29.244):
//! the controller encodes them, the user-plane node in the MEC role decodes
//! them ([`decode_mec`]). Standard IEs where the standard has them:
//!
//! - a rule: one Create PDR per trafficFilter (PDR ID 1..), each with
//!   Precedence = the rule's priority (8.2.11: lower first, as MEC 011's 0
//!   is the highest), a PDI with Source Interface Access, Network Instance
//!   = the slice's ingress interface, an SDF Filter (8.2.5) whose Flow
//!   Description is the filter as the packet travels (`permit in <proto>
//!   from <src> [ports] to <dst> [ports]`, `in` naming the access side
//!   first) and whose ToS Traffic Class is the DSCP, and [`IE_MEC_MATCH`];
//!   Outer Header Removal GTP-U/UDP/IPv4 (8.2.64) for
//!   FORWARD_DECAPSULATED. One Create FAR (FAR ID 1) whose Apply Action
//!   (8.2.26) is DROP (DROP), FORW (PASSTHROUGH, FORWARD_*) or FORW|DUPL
//!   (DUPLICATE_*): Forwarding Parameters with Destination Interface Core
//!   for what continues to the core, SGi-LAN/N6-LAN for what goes to the
//!   application, with Outer Header Creation GTP-U/UDP/IPv4 (8.2.56) for a
//!   tunnel end (FORWARD_ENCAPSULATED) or [`IE_MEC_DESTINATION`] for the
//!   application's MAC and interface (FORWARD_DECAPSULATED); DUPLICATE_*
//!   put the latter two in Duplicating Parameters.
//! - a UE's downlink tunnel: one Create PDR (PDR ID 1, Source Interface
//!   SGi-LAN/N6-LAN, UE IP Address S/D 1: the destination, and
//!   [`IE_MEC_MATCH`] with the UE flag) and one FAR FORW to Access, with
//!   Outer Header Creation (the eNB's TEID and address) and the steering
//!   role's [`steering::IE_TRANSIT_REWRITE`] with its outer source (the
//!   anchor's S1-U address, so that the eNB keeps one peer).
//!
//! Enterprise-specific IEs (8.1.1, Enterprise ID [`steering::ENTERPRISE_ID`]):
//!
//! - [`IE_MEC_MATCH`] (32771), in a PDI: flags (bit 1 FLOW: the rule's
//!   filterType is FLOW; bit 2 TEID; bit 3 ENB: match the G-PDU's TEID /
//!   outer source; bit 4 UE: a UE tunnel), the slice's 802.1Q VLAN id (2
//!   octets, 0 = untagged), then the TEID (4 octets) and the eNB's IPv4
//!   address if flagged.
//! - [`IE_MEC_DESTINATION`] (32772), in Forwarding / Duplicating
//!   Parameters: the application's MAC (6 octets) and the name of the
//!   interface it is reached through (1 to 15 octets of text): the
//!   standard has no destination MAC, and Network Instance names a
//!   network, not a port.
//!
//! A modification ([`modification_request`]) removes every PDR and the FAR
//! and creates them anew (7.5.4.1: removals first).

use crate::steering::{self, group, need, only, ours, t, uint, v4, vendor, BadIe};
use crate::{encode, msg, raw_ies, IeRef};
use rs_pfcp::ie::{Ie, IeType};
use std::net::Ipv4Addr;

/// Enterprise IE "MEC Match" (in a PDI).
pub const IE_MEC_MATCH: u16 = 0x8003;
/// Enterprise IE "MEC Destination" (in Forwarding / Duplicating Parameters).
pub const IE_MEC_DESTINATION: u16 = 0x8004;

const MATCH_FLOW: u8 = 1 << 0;
const MATCH_TEID: u8 = 1 << 1;
const MATCH_ENB: u8 = 1 << 2;
const MATCH_UE: u8 = 1 << 3;

/// trafficFilters per rule (one PDR each).
pub const MAX_FILTERS: usize = 16;
/// Interface names: Linux's IFNAMSIZ less the NUL.
pub const MAX_IFNAME: usize = 15;

/// Interface values (8.2.2, 8.2.24).
const ACCESS: u8 = 0;
const CORE: u8 = 1;
const SGI_LAN: u8 = 2;

/// Apply Action bits (8.2.26, octet 5).
const DROP: u8 = 0x01;
const FORW: u8 = 0x02;
const DUPL: u8 = 0x10;

/// A virtual MEC router: its ingress interface and 802.1Q VLAN id (seed
/// 001: port and VLAN based slicing).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Slice {
    pub interface: String,
    /// 1..=4094, or 0 for untagged frames.
    pub vlan: u16,
}

/// One MEC 011 trafficFilter (IPv4), as the packet travels; `None` = any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct TrafficFilter {
    pub src: Option<(Ipv4Addr, u8)>,
    pub dst: Option<(Ipv4Addr, u8)>,
    pub src_ports: Option<(u16, u16)>,
    pub dst_ports: Option<(u16, u16)>,
    pub protocol: Option<u8>,
    /// The inner DSCP (0..=63).
    pub dscp: Option<u8>,
    /// The G-PDU's TEID (MEC 011 tunnelInfo in a trafficFilter).
    pub teid: Option<u32>,
    /// The G-PDU's outer source: the eNB.
    pub enb: Option<Ipv4Addr>,
}

/// Where FORWARD_DECAPSULATED / DUPLICATE_DECAPSULATED deliver: the
/// application's MAC (MEC 011 dstInterface.dstMacAddress) through an
/// interface of the node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Application {
    pub mac: [u8; 6],
    pub interface: String,
}

/// A GTP-U tunnel end (MEC 011 dstInterface.tunnelInfo); TEID 0 (which
/// no tunnel uses, TS 29.281 5.1) keeps the G-PDU's TEID, as MEC 011's
/// tunnelInfo has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Tunnel {
    pub addr: Ipv4Addr,
    pub teid: u32,
}

/// MEC 011 TrafficRule.action with its destination.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum RuleAction {
    Drop,
    ForwardDecapsulated(Application),
    ForwardEncapsulated(Tunnel),
    Passthrough,
    DuplicateDecapsulated(Application),
    DuplicateEncapsulated(Tunnel),
}

/// One active traffic rule of one slice.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct MecRule {
    pub slice: Slice,
    /// filterType FLOW (true): the reverse direction too; PACKET: only
    /// packets as the filters are written.
    pub flow: bool,
    /// 0 (highest) ..= 255.
    pub priority: u8,
    /// 1..=[`MAX_FILTERS`], any of which matches.
    pub filters: Vec<TrafficFilter>,
    pub action: RuleAction,
}

/// A UE's downlink tunnel, for an application's packets to the UE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct UeTunnel {
    pub ue: Ipv4Addr,
    pub enb: Ipv4Addr,
    /// The eNB's downlink TEID.
    pub teid: u32,
    /// The anchor's S1-U address: the outer source.
    pub origin: Ipv4Addr,
}

/// What one MEC session carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MecSession {
    Rule(MecRule),
    Ue(UeTunnel),
}

fn prefix(p: Option<(Ipv4Addr, u8)>) -> String {
    p.map_or("any".into(), |(a, l)| format!("{a}/{l}"))
}

fn ports(p: Option<(u16, u16)>) -> String {
    match p {
        None => String::new(),
        Some((lo, hi)) if lo == hi => format!(" {lo}"),
        Some((lo, hi)) => format!(" {lo}-{hi}"),
    }
}

impl TrafficFilter {
    /// The Flow Description (8.2.5; TS 29.212 5.4.2), as the packet travels.
    pub fn description(&self) -> String {
        let proto = self.protocol.map_or("ip".to_string(), |p| p.to_string());
        format!(
            "permit in {proto} from {}{} to {}{}",
            prefix(self.src),
            ports(self.src_ports),
            prefix(self.dst),
            ports(self.dst_ports)
        )
    }
}

fn sdf_ie(f: &TrafficFilter) -> Ie {
    // 8.2.5: flags (FD, TTC), spare, FD length and text, ToS value and mask.
    let d = f.description();
    let mut v = vec![0x01 | if f.dscp.is_some() { 0x02 } else { 0 }, 0];
    v.extend_from_slice(&(d.len() as u16).to_be_bytes());
    v.extend_from_slice(d.as_bytes());
    if let Some(dscp) = f.dscp {
        v.extend_from_slice(&[dscp << 2, 0xfc]);
    }
    Ie::new(IeType::SdfFilter, v)
}

fn match_ie(flags: u8, vlan: u16, teid: Option<u32>, enb: Option<Ipv4Addr>) -> Ie {
    let mut v = vec![flags];
    v.extend_from_slice(&vlan.to_be_bytes());
    if let Some(t) = teid {
        v.extend_from_slice(&t.to_be_bytes());
    }
    if let Some(a) = enb {
        v.extend_from_slice(&a.octets());
    }
    vendor(IE_MEC_MATCH, v)
}

fn ohc_ie(tun: &Tunnel) -> Ie {
    // 8.2.56: GTP-U/UDP/IPv4 (octet 5 bit 1), TEID, IPv4 address.
    let mut o = vec![0x01, 0];
    o.extend_from_slice(&tun.teid.to_be_bytes());
    o.extend_from_slice(&tun.addr.octets());
    Ie::new(IeType::OuterHeaderCreation, o)
}

fn app_ie(a: &Application) -> Ie {
    vendor(IE_MEC_DESTINATION, [&a.mac[..], a.interface.as_bytes()].concat())
}

fn iface(v: u8) -> Ie {
    Ie::new(IeType::DestinationInterface, vec![v])
}

/// Where the rule's packets go: a tunnel end or an application.
fn to_app(a: &RuleAction) -> Vec<Ie> {
    match a {
        RuleAction::ForwardEncapsulated(t) | RuleAction::DuplicateEncapsulated(t) => vec![iface(SGI_LAN), ohc_ie(t)],
        RuleAction::ForwardDecapsulated(a) | RuleAction::DuplicateDecapsulated(a) => vec![iface(SGI_LAN), app_ie(a)],
        RuleAction::Drop | RuleAction::Passthrough => vec![],
    }
}

fn far(apply: u8, fp: Vec<Ie>, dupl: Vec<Ie>) -> Ie {
    let mut kids =
        vec![Ie::new(IeType::FarId, 1u32.to_be_bytes().to_vec()), Ie::new(IeType::ApplyAction, vec![apply, 0])];
    if !fp.is_empty() {
        kids.push(group(IeType::ForwardingParameters, &fp));
    }
    if !dupl.is_empty() {
        kids.push(group(IeType::DuplicatingParameters, &dupl));
    }
    group(IeType::CreateFar, &kids)
}

fn pdr(id: u16, precedence: u32, pdi: Vec<Ie>, ohr: bool) -> Ie {
    let mut kids = vec![
        Ie::new(IeType::PdrId, id.to_be_bytes().to_vec()),
        Ie::new(IeType::Precedence, precedence.to_be_bytes().to_vec()),
        group(IeType::Pdi, &pdi),
    ];
    if ohr {
        // 8.2.64: 0 = GTP-U/UDP/IPv4.
        kids.push(Ie::new(IeType::OuterHeaderRemoval, vec![0]));
    }
    kids.push(Ie::new(IeType::FarId, 1u32.to_be_bytes().to_vec()));
    group(IeType::CreatePdr, &kids)
}

/// The Create PDR / Create FAR IEs of a session.
pub fn create_ies(s: &MecSession) -> Vec<Ie> {
    match s {
        MecSession::Rule(r) => rule_ies(r),
        MecSession::Ue(u) => {
            let pdi = vec![
                Ie::new(IeType::SourceInterface, vec![SGI_LAN]),
                // 8.2.62: V4, S/D 1 (destination).
                Ie::new(IeType::UeIpAddress, [&[0x06][..], &u.ue.octets()].concat()),
                match_ie(MATCH_UE, 0, None, None),
            ];
            let mut rewrite = vec![1 << 3]; // steering's OSRC
            rewrite.extend_from_slice(&u.origin.octets());
            let fp = vec![
                iface(ACCESS),
                ohc_ie(&Tunnel { addr: u.enb, teid: u.teid }),
                vendor(steering::IE_TRANSIT_REWRITE, rewrite),
            ];
            vec![pdr(1, 0, pdi, false), far(FORW, fp, vec![])]
        }
    }
}

fn rule_ies(r: &MecRule) -> Vec<Ie> {
    let decap = matches!(r.action, RuleAction::ForwardDecapsulated(_));
    let mut ies = Vec::new();
    for (i, f) in r.filters.iter().enumerate() {
        let mut flags = if r.flow { MATCH_FLOW } else { 0 };
        flags |= if f.teid.is_some() { MATCH_TEID } else { 0 } | if f.enb.is_some() { MATCH_ENB } else { 0 };
        let pdi = vec![
            Ie::new(IeType::SourceInterface, vec![ACCESS]),
            Ie::new(IeType::NetworkInstance, r.slice.interface.as_bytes().to_vec()),
            sdf_ie(f),
            match_ie(flags, r.slice.vlan, f.teid, f.enb),
        ];
        ies.push(pdr(i as u16 + 1, u32::from(r.priority), pdi, decap));
    }
    let core = vec![iface(CORE)];
    ies.push(match &r.action {
        RuleAction::Drop => far(DROP, vec![], vec![]),
        RuleAction::Passthrough => far(FORW, core, vec![]),
        a @ (RuleAction::ForwardDecapsulated(_) | RuleAction::ForwardEncapsulated(_)) => far(FORW, to_app(a), vec![]),
        a => far(FORW | DUPL, core, to_app(a)),
    });
    ies
}

fn fseid_ies(node_id: Ipv4Addr, cp_seid: u64, cp_addr: Ipv4Addr) -> Vec<Ie> {
    // 8.2.38: Node ID type 0 (IPv4); 8.2.37: F-SEID with V4.
    let mut fseid = vec![0x02];
    fseid.extend_from_slice(&cp_seid.to_be_bytes());
    fseid.extend_from_slice(&cp_addr.octets());
    vec![Ie::new(IeType::NodeId, [&[0u8][..], &node_id.octets()].concat()), Ie::new(IeType::Fseid, fseid)]
}

/// A PFCP Session Establishment Request (TS 29.244 7.5.2) carrying `s`.
pub fn establishment_request(seq: u32, node_id: Ipv4Addr, cp_seid: u64, cp_addr: Ipv4Addr, s: &MecSession) -> Vec<u8> {
    let mut ies = fseid_ies(node_id, cp_seid, cp_addr);
    ies.extend(create_ies(s));
    encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), seq, &ies)
}

/// A Session Modification Request (TS 29.244 7.5.4) replacing the
/// session's content with `s`; `old_pdrs` is how many PDRs it has.
pub fn modification_request(seq: u32, up_seid: u64, old_pdrs: usize, s: &MecSession) -> Vec<u8> {
    let mut ies = vec![];
    for id in 1..=old_pdrs as u16 {
        ies.push(group(IeType::RemovePdr, &[Ie::new(IeType::PdrId, id.to_be_bytes().to_vec())]));
    }
    ies.push(group(IeType::RemoveFar, &[Ie::new(IeType::FarId, 1u32.to_be_bytes().to_vec())]));
    ies.extend(create_ies(s));
    encode(msg::SESSION_MODIFICATION_REQUEST, Some(up_seid), seq, &ies)
}

/// A Session Deletion Request (TS 29.244 7.5.6).
pub fn deletion_request(seq: u32, up_seid: u64) -> Vec<u8> {
    steering::deletion_request(seq, up_seid)
}

/// The PDRs a session of `s` has (for [`modification_request`]).
pub fn pdr_count(s: &MecSession) -> usize {
    match s {
        MecSession::Rule(r) => r.filters.len(),
        MecSession::Ue(_) => 1,
    }
}

/// Whether a session request carries a MEC session: a Create PDR whose
/// PDI has our [`IE_MEC_MATCH`].
pub fn is_mec(ies: &[IeRef]) -> bool {
    ies.iter().filter(|i| i.ie_type == IeType::CreatePdr).any(|pdr| {
        let pdi = raw_ies(pdr.payload).and_then(|c| c.into_iter().find(|c| c.ie_type == t(IeType::Pdi)));
        pdi.and_then(|p| raw_ies(p.payload)).is_some_and(|c| c.iter().any(|c| ours(c, IE_MEC_MATCH)))
    })
}

fn ifname(b: &[u8], ty: u16) -> Result<String, BadIe> {
    match std::str::from_utf8(b) {
        Ok(s) if (1..=MAX_IFNAME).contains(&s.len()) && !s.contains(['/', '\0', ' ']) => Ok(s.to_string()),
        _ => Err(BadIe::incorrect(ty)),
    }
}

/// [`IE_MEC_MATCH`]: flags, VLAN, TEID, eNB.
type Match = (u8, u16, Option<u32>, Option<Ipv4Addr>);

fn read_match(m: &[u8]) -> Result<Match, BadIe> {
    let bad = BadIe::incorrect(IE_MEC_MATCH);
    let flags = *m.first().ok_or(bad)?;
    if flags & !(MATCH_FLOW | MATCH_TEID | MATCH_ENB | MATCH_UE) != 0 || m.len() < 3 {
        return Err(bad);
    }
    let vlan = u16::from_be_bytes([m[1], m[2]]);
    if vlan > 4094 {
        return Err(bad);
    }
    let mut at = 3;
    let teid = match flags & MATCH_TEID {
        0 => None,
        _ => {
            at += 4;
            Some(uint(m.get(at - 4..at).ok_or(bad)?, 4, IE_MEC_MATCH)?)
        }
    };
    let enb = match flags & MATCH_ENB {
        0 => None,
        _ => {
            at += 4;
            Some(v4(m, at - 4).ok_or(bad)?)
        }
    };
    if at != m.len() {
        return Err(bad);
    }
    Ok((flags, vlan, teid, enb))
}

/// The filter of an SDF Filter IE written by [`sdf_ie`]: a Flow
/// Description `permit in` with prefixes on both sides, and a ToS Traffic
/// Class with mask 0xfc (the DSCP).
fn read_sdf(s: &[u8]) -> Option<TrafficFilter> {
    let flags = *s.first()?;
    if flags & !0x03 != 0 || flags & 0x01 == 0 {
        return None;
    }
    let len = u16::from_be_bytes([*s.get(2)?, *s.get(3)?]) as usize;
    let text = std::str::from_utf8(s.get(4..4 + len)?).ok()?;
    if !text.starts_with("permit in ") {
        return None;
    }
    let f = crate::flow::FlowFilter::parse(text)?;
    let side = |a: crate::flow::AddrMatch| match a {
        crate::flow::AddrMatch::Any => Some(None),
        crate::flow::AddrMatch::Prefix(a, l) => Some(Some((a, l))),
        crate::flow::AddrMatch::Assigned => None,
    };
    // `in`: the flow parser reads the first address as the UE's (the source).
    let mut tf = TrafficFilter {
        src: side(f.ue)?,
        dst: side(f.remote)?,
        src_ports: f.ue_ports,
        dst_ports: f.remote_ports,
        protocol: f.proto,
        ..TrafficFilter::default()
    };
    let rest = &s[4 + len..];
    match (flags & 0x02 != 0, rest) {
        (false, []) => {}
        (true, [tos, 0xfc]) if tos & 0x03 == 0 => tf.dscp = Some(tos >> 2),
        _ => return None,
    }
    if [tf.src_ports, tf.dst_ports].iter().flatten().any(|(lo, hi)| lo > hi) {
        return None;
    }
    Some(tf)
}

struct PdrParts {
    id: u16,
    precedence: u32,
    source_interface: u8,
    network_instance: Option<String>,
    ue_ip: Option<Ipv4Addr>,
    filter: Option<TrafficFilter>,
    ohr: bool,
    m: Match,
}

fn read_pdr(payload: &[u8]) -> Result<PdrParts, BadIe> {
    let c = raw_ies(payload).ok_or(BadIe::incorrect(t(IeType::CreatePdr)))?;
    let id = uint(need(&c, t(IeType::PdrId))?, 2, t(IeType::PdrId))? as u16;
    let precedence = uint(need(&c, t(IeType::Precedence))?, 4, t(IeType::Precedence))?;
    if uint(need(&c, t(IeType::FarId))?, 4, t(IeType::FarId))? != 1 {
        return Err(BadIe::incorrect(t(IeType::FarId)));
    }
    let ohr = match only(&c, t(IeType::OuterHeaderRemoval))? {
        None => false,
        Some([0]) | Some([0, _]) => true,
        Some(_) => return Err(BadIe::incorrect(t(IeType::OuterHeaderRemoval))),
    };
    let pdi = raw_ies(need(&c, t(IeType::Pdi))?).ok_or(BadIe::incorrect(t(IeType::Pdi)))?;
    let source_interface = match need(&pdi, t(IeType::SourceInterface))?.first() {
        Some(v) if *v & 0x0f <= SGI_LAN => *v & 0x0f,
        _ => return Err(BadIe::incorrect(t(IeType::SourceInterface))),
    };
    let ni = t(IeType::NetworkInstance);
    let network_instance = only(&pdi, ni)?.map(|b| ifname(b, ni)).transpose()?;
    let ue_ip = match only(&pdi, t(IeType::UeIpAddress))? {
        None => None,
        // V4 and S/D (destination) only.
        Some(u) if u.len() == 5 && u[0] == 0x06 => v4(u, 1),
        Some(_) => return Err(BadIe::incorrect(t(IeType::UeIpAddress))),
    };
    let filter = match only(&pdi, t(IeType::SdfFilter))? {
        None => None,
        Some(s) => Some(read_sdf(s).ok_or(BadIe::incorrect(t(IeType::SdfFilter)))?),
    };
    let m = read_match(need(&pdi, IE_MEC_MATCH)?)?;
    Ok(PdrParts { id, precedence, source_interface, network_instance, ue_ip, filter, ohr, m })
}

/// Forwarding or Duplicating Parameters: destination interface, OHC,
/// MEC destination, outer source rewrite.
struct Params {
    interface: u8,
    tunnel: Option<Tunnel>,
    app: Option<Application>,
    origin: Option<Ipv4Addr>,
}

fn read_params(b: &[u8], ty: IeType) -> Result<Params, BadIe> {
    let c = raw_ies(b).ok_or(BadIe::incorrect(t(ty)))?;
    let di = need(&c, t(IeType::DestinationInterface))?;
    let interface = match di.first() {
        Some(v) if *v & 0x0f <= SGI_LAN => *v & 0x0f,
        _ => return Err(BadIe::incorrect(t(IeType::DestinationInterface))),
    };
    let tunnel = match only(&c, t(IeType::OuterHeaderCreation))? {
        None => None,
        Some(o) if o.len() == 10 && o[0] == 0x01 && o[1] == 0 => {
            Some(Tunnel { teid: uint(&o[2..6], 4, 0)?, addr: v4(o, 6).expect("10 octets") })
        }
        Some(_) => return Err(BadIe::incorrect(t(IeType::OuterHeaderCreation))),
    };
    let app = match only(&c, IE_MEC_DESTINATION)? {
        None => None,
        Some(a) if a.len() > 6 => {
            let mac: [u8; 6] = a[..6].try_into().expect("6 octets");
            Some(Application { mac, interface: ifname(&a[6..], IE_MEC_DESTINATION)? })
        }
        Some(_) => return Err(BadIe::incorrect(IE_MEC_DESTINATION)),
    };
    let origin = match only(&c, steering::IE_TRANSIT_REWRITE)? {
        None => None,
        Some(r) if r.len() == 5 && r[0] == 1 << 3 => v4(r, 1),
        Some(_) => return Err(BadIe::incorrect(steering::IE_TRANSIT_REWRITE)),
    };
    Ok(Params { interface, tunnel, app, origin })
}

/// The FAR: Apply Action, Forwarding and Duplicating Parameters.
fn read_far(payload: &[u8]) -> Result<(u8, Option<Params>, Option<Params>), BadIe> {
    let c = raw_ies(payload).ok_or(BadIe::incorrect(t(IeType::CreateFar)))?;
    if uint(need(&c, t(IeType::FarId))?, 4, t(IeType::FarId))? != 1 {
        return Err(BadIe::incorrect(t(IeType::FarId)));
    }
    let apply = *need(&c, t(IeType::ApplyAction))?.first().ok_or(BadIe::incorrect(t(IeType::ApplyAction)))?;
    let fp =
        only(&c, t(IeType::ForwardingParameters))?.map(|b| read_params(b, IeType::ForwardingParameters)).transpose()?;
    let dp = only(&c, t(IeType::DuplicatingParameters))?
        .map(|b| read_params(b, IeType::DuplicatingParameters))
        .transpose()?;
    Ok((apply, fp, dp))
}

/// The destination of a FAR's parameters towards the application: a
/// tunnel end or an application, exactly one, to SGi-LAN.
fn app_side(p: Params, ty: IeType) -> Result<Result<Application, Tunnel>, BadIe> {
    if p.interface != SGI_LAN {
        return Err(BadIe::incorrect(t(IeType::DestinationInterface)));
    }
    match (p.app, p.tunnel, p.origin) {
        (Some(a), None, None) => Ok(Ok(a)),
        (None, Some(t), None) => Ok(Err(t)),
        (None, None, None) => Err(BadIe::missing(t(IeType::OuterHeaderCreation))),
        _ => Err(BadIe::incorrect(t(ty))),
    }
}

fn core_only(p: Option<Params>) -> Result<(), BadIe> {
    let p = p.ok_or(BadIe::missing(t(IeType::ForwardingParameters)))?;
    if p.interface != CORE {
        return Err(BadIe::incorrect(t(IeType::DestinationInterface)));
    }
    match (p.app, p.tunnel, p.origin) {
        (None, None, None) => Ok(()),
        _ => Err(BadIe::incorrect(t(IeType::ForwardingParameters))),
    }
}

/// Reads a MEC session back from a request's Create PDR / Create FAR IEs:
/// the IE to name as Offending IE for anything missing or inconsistent.
/// Never panics.
pub fn decode_mec(ies: &[IeRef]) -> Result<MecSession, BadIe> {
    let mut pdrs = Vec::new();
    for ie in ies.iter().filter(|i| i.ie_type == IeType::CreatePdr) {
        if pdrs.len() == MAX_FILTERS {
            return Err(BadIe::incorrect(t(IeType::CreatePdr)));
        }
        pdrs.push(read_pdr(ie.payload)?);
    }
    let first = pdrs.first().ok_or(BadIe::missing(t(IeType::CreatePdr)))?;
    let mut fars = ies.iter().filter(|i| i.ie_type == IeType::CreateFar);
    let far = fars.next().ok_or(BadIe::missing(t(IeType::CreateFar)))?;
    if fars.next().is_some() {
        return Err(BadIe::incorrect(t(IeType::CreateFar)));
    }
    let (apply, fp, dp) = read_far(far.payload)?;
    let bad_pdr = BadIe::incorrect(t(IeType::CreatePdr));
    if first.m.0 & MATCH_UE != 0 {
        // A UE's downlink tunnel.
        let p = &pdrs[0];
        let ue = p.ue_ip.ok_or(BadIe::missing(t(IeType::UeIpAddress)))?;
        if pdrs.len() != 1
            || p.source_interface != SGI_LAN
            || p.filter.is_some()
            || p.ohr
            || p.m != (MATCH_UE, 0, None, None)
        {
            return Err(bad_pdr);
        }
        if apply != FORW || dp.is_some() {
            return Err(BadIe::incorrect(t(IeType::ApplyAction)));
        }
        let fp = fp.ok_or(BadIe::missing(t(IeType::ForwardingParameters)))?;
        if fp.interface != ACCESS || fp.app.is_some() {
            return Err(BadIe::incorrect(t(IeType::ForwardingParameters)));
        }
        let tun = fp.tunnel.ok_or(BadIe::missing(t(IeType::OuterHeaderCreation)))?;
        let origin = fp.origin.ok_or(BadIe::missing(steering::IE_TRANSIT_REWRITE))?;
        return Ok(MecSession::Ue(UeTunnel { ue, enb: tun.addr, teid: tun.teid, origin }));
    }
    // A traffic rule: every PDR of one slice, priority and filterType.
    let priority = u8::try_from(first.precedence).map_err(|_| BadIe::incorrect(t(IeType::Precedence)))?;
    let slice_if = first.network_instance.clone().ok_or(BadIe::missing(t(IeType::NetworkInstance)))?;
    let slice = Slice { interface: slice_if, vlan: first.m.1 };
    let flow = first.m.0 & MATCH_FLOW != 0;
    let mut filters = Vec::new();
    for (i, p) in pdrs.iter().enumerate() {
        if p.id as usize != i + 1 || p.source_interface != ACCESS || p.ue_ip.is_some() || p.m.0 & MATCH_UE != 0 {
            return Err(bad_pdr);
        }
        if p.precedence != first.precedence {
            return Err(BadIe::incorrect(t(IeType::Precedence)));
        }
        if p.network_instance.as_ref() != Some(&slice.interface)
            || p.m.1 != slice.vlan
            || (p.m.0 & MATCH_FLOW != 0) != flow
        {
            return Err(BadIe::incorrect(IE_MEC_MATCH));
        }
        let f = p.filter.ok_or(BadIe::missing(t(IeType::SdfFilter)))?;
        filters.push(TrafficFilter { teid: p.m.2, enb: p.m.3, ..f });
    }
    let bad_apply = BadIe::incorrect(t(IeType::ApplyAction));
    let action = match apply {
        DROP if fp.is_none() && dp.is_none() => RuleAction::Drop,
        FORW if dp.is_none() => match fp.as_ref().map(|p| p.interface) {
            Some(CORE) => {
                core_only(fp)?;
                RuleAction::Passthrough
            }
            _ => match app_side(
                fp.ok_or(BadIe::missing(t(IeType::ForwardingParameters)))?,
                IeType::ForwardingParameters,
            )? {
                Ok(a) => RuleAction::ForwardDecapsulated(a),
                Err(t) => RuleAction::ForwardEncapsulated(t),
            },
        },
        a if a == FORW | DUPL => {
            core_only(fp)?;
            let dp = dp.ok_or(BadIe::missing(t(IeType::DuplicatingParameters)))?;
            match app_side(dp, IeType::DuplicatingParameters)? {
                Ok(a) => RuleAction::DuplicateDecapsulated(a),
                Err(t) => RuleAction::DuplicateEncapsulated(t),
            }
        }
        _ => return Err(bad_apply),
    };
    // Outer Header Removal exactly when the packet goes out decapsulated.
    let decap = matches!(action, RuleAction::ForwardDecapsulated(_));
    if pdrs.iter().any(|p| p.ohr != decap) {
        return Err(BadIe::incorrect(t(IeType::OuterHeaderRemoval)));
    }
    Ok(MecSession::Rule(MecRule { slice, flow, priority, filters, action }))
}

#[cfg(test)]
mod tests;
