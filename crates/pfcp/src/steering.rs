//! A steering switch's diversion (issue 11; seed 000 IV.B, V.B) as a PFCP
//! session (TS 29.244): the controller encodes it, the user-plane node in
//! the steering role decodes it ([`decode_diversion`]).
//!
//! One session per diversion, two PDRs and two FARs, standard IEs where
//! the standard has them:
//!
//! - PDR 1, uplink: PDI with Source Interface Access, UE IP Address (S/D 0:
//!   the UE's address is the source, 8.2.62), an SDF Filter whose Flow
//!   Description narrows it to one flow (8.2.5), and [`IE_TRANSIT_MATCH`];
//!   FAR 1: Apply Action FORW, Forwarding Parameters with Destination
//!   Interface Core and Outer Header Creation GTP-U/UDP/IPv4 (8.2.56)
//!   naming the new anchor and its TEID, and [`IE_TRANSIT_REWRITE`] when the
//!   TEID is kept or the UE's address translated.
//! - PDR 2, downlink: PDI with Source Interface Core, UE IP Address (S/D 1:
//!   destination) = the UE's address at the anchor, and
//!   [`IE_TRANSIT_MATCH`] with the anchor as outer source; FAR 2: FORW,
//!   Destination Interface Access and [`IE_TRANSIT_REWRITE`] (outer source
//!   = the original anchor, inner destination = the UE's address).
//!
//! Enterprise-specific IEs (8.1.1: type 32768 and up, then an Enterprise
//! ID) carry what the standard has no IE for. Enterprise ID
//! [`ENTERPRISE_ID`] = 32473, the IANA Private Enterprise Number reserved
//! for documentation (RFC 5612); a deployment would use its own.
//!
//! - [`IE_TRANSIT_MATCH`] (32769), in a PDI: the PDR matches G-PDUs in
//!   transit (outer destination not this node) by their inner header.
//!   Value: flags (bit 1 OSRC), then the outer source IPv4 if OSRC.
//! - [`IE_TRANSIT_REWRITE`] (32770), in Forwarding Parameters: how a
//!   matched G-PDU is rewritten. Value: flags (bit 1 KTEID: keep the
//!   G-PDU's TEID, the Outer Header Creation's is unused; bit 2 ISRC, bit 3
//!   IDST, bit 4 OSRC: set the inner source, inner destination, outer
//!   source), then one IPv4 address per address flag, in bit order.
//!
//! A modification ([`modification_request`]) removes PDR 1-2 and FAR 1-2
//! and creates them anew (TS 29.244 7.5.4.1: removals are applied before
//! creations), so that the UPF reads a replaced diversion exactly as an
//! established one.

use crate::flow::{self, AddrMatch};
use crate::{encode, msg, raw_ies, IeRef, RawIe};
use rs_pfcp::ie::cause::CauseValue;
use rs_pfcp::ie::{Ie, IeType};
use std::net::Ipv4Addr;

/// IANA Private Enterprise Number for documentation use (RFC 5612).
pub const ENTERPRISE_ID: u16 = 32473;
/// Enterprise IE "Transit GTP-U Match" (in a PDI).
pub const IE_TRANSIT_MATCH: u16 = 0x8001;
/// Enterprise IE "Transit GTP-U Rewrite" (in Forwarding Parameters).
pub const IE_TRANSIT_REWRITE: u16 = 0x8002;

const MATCH_OSRC: u8 = 1 << 0;
const REWRITE_KTEID: u8 = 1 << 0;
const REWRITE_ISRC: u8 = 1 << 1;
const REWRITE_IDST: u8 = 1 << 2;
const REWRITE_OSRC: u8 = 1 << 3;

const UPLINK_PDR: u16 = 1;
const DOWNLINK_PDR: u16 = 2;
const UPLINK_FAR: u32 = 1;
const DOWNLINK_FAR: u32 = 2;
/// Precedence of a flow diversion's PDRs and of a whole UE's (8.2.11:
/// lower first); the node orders diversions of one UE the same way.
pub const FLOW_PRECEDENCE: u32 = 100;
pub const UE_PRECEDENCE: u32 = 200;

/// Interface values (8.2.2, 8.2.24).
const ACCESS: u8 = 0;
const CORE: u8 = 1;

/// One flow of a UE (an inner 5-tuple filter; `None` = any).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FlowFilter {
    pub protocol: Option<u8>,
    /// The remote end's address or prefix.
    pub remote: Option<(Ipv4Addr, u8)>,
    pub ue_ports: Option<(u16, u16)>,
    pub remote_ports: Option<(u16, u16)>,
}

impl FlowFilter {
    /// The Flow Description (8.2.5; TS 29.212 5.4.2, written for the
    /// downlink: from the remote end to the UE, `assigned`).
    pub fn description(&self) -> String {
        let proto = self.protocol.map_or("ip".to_string(), |p| p.to_string());
        let remote = self.remote.map_or("any".to_string(), |(a, l)| format!("{a}/{l}"));
        let ports = |p: Option<(u16, u16)>| match p {
            None => String::new(),
            Some((lo, hi)) if lo == hi => format!(" {lo}"),
            Some((lo, hi)) => format!(" {lo}-{hi}"),
        };
        format!("permit out {proto} from {remote}{} to assigned{}", ports(self.remote_ports), ports(self.ue_ports))
    }

    /// Reads a Flow Description whose UE side is `assigned` (or `any`).
    pub fn from_description(s: &str) -> Option<FlowFilter> {
        let f = flow::FlowFilter::parse(s)?;
        let remote = match f.remote {
            AddrMatch::Any => None,
            AddrMatch::Prefix(a, l) => Some((a, l)),
            AddrMatch::Assigned => return None,
        };
        match f.ue {
            AddrMatch::Any | AddrMatch::Assigned => {}
            AddrMatch::Prefix(..) => return None,
        }
        Some(FlowFilter { protocol: f.proto, remote, ue_ports: f.ue_ports, remote_ports: f.remote_ports })
    }
}

/// One diversion: a UE's (or one of its flows') G-PDUs re-encapsulated
/// to a new anchor, and the anchor's answers rewritten back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Diversion {
    /// The UE's address as the eNB and the original anchor know it.
    pub ue: Ipv4Addr,
    /// None = every packet of the UE.
    pub flow: Option<FlowFilter>,
    /// The new anchor's S1-U (GTP-U) address.
    pub anchor: Ipv4Addr,
    /// Selective replication: the replica's S1-U TEID for the uplink;
    /// None = keep the TEID (naive).
    pub anchor_teid: Option<u32>,
    /// Selective replication: the UE's address at the replica; None = no
    /// translation.
    pub anchor_ue: Option<Ipv4Addr>,
    /// The original anchor's S1-U address (outer source of the diverted
    /// downlink, so that the eNB keeps seeing one peer).
    pub origin: Ipv4Addr,
}

impl Diversion {
    /// The inner destination of the anchor's downlink.
    pub fn downlink_ue(&self) -> Ipv4Addr {
        self.anchor_ue.unwrap_or(self.ue)
    }
}

/// Why a request does not carry a usable diversion: the IE to name as
/// Offending IE (TS 29.244 8.2.22), missing or incorrect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadIe {
    pub missing: bool,
    pub ie_type: u16,
}

impl BadIe {
    pub(crate) fn missing(t: impl Into<u16>) -> Self {
        BadIe { missing: true, ie_type: t.into() }
    }
    pub(crate) fn incorrect(t: impl Into<u16>) -> Self {
        BadIe { missing: false, ie_type: t.into() }
    }
    /// The cause of the rejection (TS 29.244 7.2.2.4.2).
    pub fn cause(&self) -> CauseValue {
        match self.missing {
            true => CauseValue::MandatoryIeMissing,
            false => CauseValue::MandatoryIeIncorrect,
        }
    }
}

pub(crate) fn t(x: IeType) -> u16 {
    x as u16
}

pub(crate) fn group(ty: IeType, children: &[Ie]) -> Ie {
    let mut p = Vec::new();
    for c in children {
        c.marshal_into(&mut p);
    }
    Ie::new(ty, p)
}

pub(crate) fn vendor(ty: u16, value: Vec<u8>) -> Ie {
    Ie::new_vendor_specific(ty, ENTERPRISE_ID, value).expect("an enterprise IE type")
}

fn rewrite_ie(flags: u8, addrs: &[Ipv4Addr]) -> Ie {
    let mut v = vec![flags];
    for a in addrs {
        v.extend_from_slice(&a.octets());
    }
    vendor(IE_TRANSIT_REWRITE, v)
}

fn ue_ip_ie(a: Ipv4Addr, destination: bool) -> Ie {
    // 8.2.62: V4 (bit 2), S/D (bit 3: 1 = destination).
    let flags = 0x02 | if destination { 0x04 } else { 0 };
    Ie::new(IeType::UeIpAddress, [&[flags][..], &a.octets()].concat())
}

fn sdf_ie(f: &FlowFilter) -> Ie {
    // 8.2.5: FD flag, spare octet, length of the Flow Description, the text.
    let d = f.description();
    let mut v = vec![0x01, 0];
    v.extend_from_slice(&(d.len() as u16).to_be_bytes());
    v.extend_from_slice(d.as_bytes());
    Ie::new(IeType::SdfFilter, v)
}

/// Create PDR 1-2 and Create FAR 1-2 of `d`.
pub fn create_ies(d: &Diversion) -> Vec<Ie> {
    let precedence = if d.flow.is_some() { FLOW_PRECEDENCE } else { UE_PRECEDENCE };
    let pdr = |id: u16, far: u32, pdi: Vec<Ie>| {
        group(
            IeType::CreatePdr,
            &[
                Ie::new(IeType::PdrId, id.to_be_bytes().to_vec()),
                Ie::new(IeType::Precedence, precedence.to_be_bytes().to_vec()),
                group(IeType::Pdi, &pdi),
                Ie::new(IeType::FarId, far.to_be_bytes().to_vec()),
            ],
        )
    };
    let mut ul_pdi = vec![Ie::new(IeType::SourceInterface, vec![ACCESS]), ue_ip_ie(d.ue, false)];
    ul_pdi.extend(d.flow.as_ref().map(sdf_ie));
    ul_pdi.push(vendor(IE_TRANSIT_MATCH, vec![0]));
    let dl_pdi = vec![
        Ie::new(IeType::SourceInterface, vec![CORE]),
        ue_ip_ie(d.downlink_ue(), true),
        vendor(IE_TRANSIT_MATCH, [&[MATCH_OSRC][..], &d.anchor.octets()].concat()),
    ];
    // 8.2.56: GTP-U/UDP/IPv4 (octet 5 bit 1), TEID, IPv4 address.
    let mut ohc = vec![0x01, 0];
    ohc.extend_from_slice(&d.anchor_teid.unwrap_or(0).to_be_bytes());
    ohc.extend_from_slice(&d.anchor.octets());
    let mut ul_fp = vec![Ie::new(IeType::DestinationInterface, vec![CORE]), Ie::new(IeType::OuterHeaderCreation, ohc)];
    let ul_flags = if d.anchor_teid.is_none() { REWRITE_KTEID } else { 0 } | d.anchor_ue.map_or(0, |_| REWRITE_ISRC);
    if ul_flags != 0 {
        ul_fp.push(rewrite_ie(ul_flags, &d.anchor_ue.into_iter().collect::<Vec<_>>()));
    }
    let dl_rewrite = match d.anchor_ue {
        Some(_) => rewrite_ie(REWRITE_IDST | REWRITE_OSRC, &[d.ue, d.origin]),
        None => rewrite_ie(REWRITE_OSRC, &[d.origin]),
    };
    let dl_fp = vec![Ie::new(IeType::DestinationInterface, vec![ACCESS]), dl_rewrite];
    // 8.2.26: FORW (octet 5 bit 2), octet 6 zero.
    let far = |id: u32, fp: Vec<Ie>| {
        group(
            IeType::CreateFar,
            &[
                Ie::new(IeType::FarId, id.to_be_bytes().to_vec()),
                Ie::new(IeType::ApplyAction, vec![0x02, 0]),
                group(IeType::ForwardingParameters, &fp),
            ],
        )
    };
    vec![
        pdr(UPLINK_PDR, UPLINK_FAR, ul_pdi),
        pdr(DOWNLINK_PDR, DOWNLINK_FAR, dl_pdi),
        far(UPLINK_FAR, ul_fp),
        far(DOWNLINK_FAR, dl_fp),
    ]
}

/// A PFCP Session Establishment Request (TS 29.244 7.5.2) carrying `d`,
/// from CP node `node_id` (an IPv4 Node ID) with CP F-SEID (cp_seid, cp_addr).
pub fn establishment_request(seq: u32, node_id: Ipv4Addr, cp_seid: u64, cp_addr: Ipv4Addr, d: &Diversion) -> Vec<u8> {
    // 8.2.38: Node ID type 0 (IPv4); 8.2.37: F-SEID with V4.
    let mut fseid = vec![0x02];
    fseid.extend_from_slice(&cp_seid.to_be_bytes());
    fseid.extend_from_slice(&cp_addr.octets());
    let mut ies =
        vec![Ie::new(IeType::NodeId, [&[0u8][..], &node_id.octets()].concat()), Ie::new(IeType::Fseid, fseid)];
    ies.extend(create_ies(d));
    // 7.2.2.4.2: the SEID of an establishment request is 0.
    encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), seq, &ies)
}

/// A Session Modification Request (TS 29.244 7.5.4) replacing the
/// session's diversion with `d` (e.g. a new anchor: edge to edge).
pub fn modification_request(seq: u32, up_seid: u64, d: &Diversion) -> Vec<u8> {
    // 7.5.4.6-7: Remove PDR / Remove FAR, each a group with the rule's ID.
    let mut ies = vec![];
    for id in [UPLINK_PDR, DOWNLINK_PDR] {
        ies.push(group(IeType::RemovePdr, &[Ie::new(IeType::PdrId, id.to_be_bytes().to_vec())]));
    }
    for id in [UPLINK_FAR, DOWNLINK_FAR] {
        ies.push(group(IeType::RemoveFar, &[Ie::new(IeType::FarId, id.to_be_bytes().to_vec())]));
    }
    ies.extend(create_ies(d));
    encode(msg::SESSION_MODIFICATION_REQUEST, Some(up_seid), seq, &ies)
}

/// A Session Deletion Request (TS 29.244 7.5.6).
pub fn deletion_request(seq: u32, up_seid: u64) -> Vec<u8> {
    encode(msg::SESSION_DELETION_REQUEST, Some(up_seid), seq, &[])
}

/// Whether a session request carries a steering session: a Create PDR
/// whose PDI has our [`IE_TRANSIT_MATCH`].
pub fn is_steering(ies: &[IeRef]) -> bool {
    ies.iter().filter(|i| i.ie_type == IeType::CreatePdr).any(|pdr| {
        let pdi = raw_ies(pdr.payload).and_then(|c| c.into_iter().find(|c| c.ie_type == t(IeType::Pdi)));
        pdi.and_then(|p| raw_ies(p.payload)).is_some_and(|c| c.iter().any(|c| ours(c, IE_TRANSIT_MATCH)))
    })
}

pub(crate) fn ours(c: &RawIe, ty: u16) -> bool {
    c.ie_type == ty && c.enterprise == Some(ENTERPRISE_ID)
}

pub(crate) fn only<'a>(ies: &[RawIe<'a>], ty: u16) -> Result<Option<&'a [u8]>, BadIe> {
    let mut it = ies.iter().filter(|c| c.ie_type == ty && (ty & 0x8000 == 0 || c.enterprise == Some(ENTERPRISE_ID)));
    match (it.next(), it.next()) {
        (None, _) => Ok(None),
        (Some(c), None) => Ok(Some(c.payload)),
        (Some(_), Some(_)) => Err(BadIe::incorrect(ty)),
    }
}

pub(crate) fn need<'a>(ies: &[RawIe<'a>], ty: u16) -> Result<&'a [u8], BadIe> {
    only(ies, ty)?.ok_or(BadIe::missing(ty))
}

pub(crate) fn v4(b: &[u8], at: usize) -> Option<Ipv4Addr> {
    let o: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(o.into())
}

pub(crate) fn uint(b: &[u8], width: usize, ty: u16) -> Result<u32, BadIe> {
    match b.len() == width {
        true => Ok(b.iter().fold(0u32, |v, x| (v << 8) | u32::from(*x))),
        false => Err(BadIe::incorrect(ty)),
    }
}

/// The parts of a PDR a diversion uses.
struct PdrParts {
    far_id: u32,
    source_interface: u8,
    /// UE IP Address and its S/D flag (true: destination).
    ue_ip: (Ipv4Addr, bool),
    flow: Option<FlowFilter>,
    /// [`IE_TRANSIT_MATCH`]'s outer source.
    outer_source: Option<Ipv4Addr>,
}

fn read_pdr(payload: &[u8]) -> Result<PdrParts, BadIe> {
    let c = raw_ies(payload).ok_or(BadIe::incorrect(t(IeType::CreatePdr)))?;
    uint(need(&c, t(IeType::PdrId))?, 2, t(IeType::PdrId))?;
    let far_id = uint(need(&c, t(IeType::FarId))?, 4, t(IeType::FarId))?;
    let pdi = raw_ies(need(&c, t(IeType::Pdi))?).ok_or(BadIe::incorrect(t(IeType::Pdi)))?;
    let si = need(&pdi, t(IeType::SourceInterface))?;
    let source_interface = match si.first() {
        Some(v) if *v & 0x0f <= CORE => *v & 0x0f,
        _ => return Err(BadIe::incorrect(t(IeType::SourceInterface))),
    };
    let ue = need(&pdi, t(IeType::UeIpAddress))?;
    let bad_ue = BadIe::incorrect(t(IeType::UeIpAddress));
    let flags = *ue.first().ok_or(bad_ue)?;
    let addr = if flags & 0x02 != 0 { v4(ue, 1) } else { None };
    let ue_ip = (addr.ok_or(bad_ue)?, flags & 0x04 != 0);
    let flow = match only(&pdi, t(IeType::SdfFilter))? {
        None => None,
        Some(s) => Some(sdf_flow(s).ok_or(BadIe::incorrect(t(IeType::SdfFilter)))?),
    };
    let m = need(&pdi, IE_TRANSIT_MATCH)?;
    let outer_source = match m.first() {
        Some(&f) if f & MATCH_OSRC != 0 => Some(v4(m, 1).ok_or(BadIe::incorrect(IE_TRANSIT_MATCH))?),
        Some(_) => None,
        None => return Err(BadIe::incorrect(IE_TRANSIT_MATCH)),
    };
    Ok(PdrParts { far_id, source_interface, ue_ip, flow, outer_source })
}

fn sdf_flow(s: &[u8]) -> Option<FlowFilter> {
    // FD only: no ToS, SPI, Flow Label or filter ID to honour.
    if *s.first()? != 0x01 {
        return None;
    }
    let len = u16::from_be_bytes([*s.get(2)?, *s.get(3)?]) as usize;
    FlowFilter::from_description(std::str::from_utf8(s.get(4..4 + len)?).ok()?)
}

/// The parts of a FAR a diversion uses.
struct FarParts {
    destination_interface: u8,
    /// Outer Header Creation GTP-U/UDP/IPv4: TEID and address.
    ohc: Option<(u32, Ipv4Addr)>,
    /// [`IE_TRANSIT_REWRITE`]: flags and the addresses of its flags.
    rewrite: (u8, [Option<Ipv4Addr>; 3]),
}

fn read_far(payload: &[u8]) -> Result<(u32, FarParts), BadIe> {
    let c = raw_ies(payload).ok_or(BadIe::incorrect(t(IeType::CreateFar)))?;
    let id = uint(need(&c, t(IeType::FarId))?, 4, t(IeType::FarId))?;
    // FORW and nothing else of DROP, FORW, BUFF, NOCP, DUPL.
    if need(&c, t(IeType::ApplyAction))?.first().map(|a| a & 0x1f) != Some(0x02) {
        return Err(BadIe::incorrect(t(IeType::ApplyAction)));
    }
    let fp =
        raw_ies(need(&c, t(IeType::ForwardingParameters))?).ok_or(BadIe::incorrect(t(IeType::ForwardingParameters)))?;
    let di = need(&fp, t(IeType::DestinationInterface))?;
    let destination_interface =
        *di.first().filter(|v| **v & 0x0f <= CORE).ok_or(BadIe::incorrect(t(IeType::DestinationInterface)))? & 0x0f;
    let ohc = match only(&fp, t(IeType::OuterHeaderCreation))? {
        None => None,
        Some(o) => {
            let bad = BadIe::incorrect(t(IeType::OuterHeaderCreation));
            // Only GTP-U/UDP/IPv4 (octet 5 bit 1), nothing else of octets 5-6.
            if o.len() != 10 || o[0] != 0x01 || o[1] != 0 {
                return Err(bad);
            }
            Some((uint(&o[2..6], 4, 0)?, v4(o, 6).ok_or(bad)?))
        }
    };
    let rewrite = match only(&fp, IE_TRANSIT_REWRITE)? {
        None => (0, [None; 3]),
        Some(r) => {
            let bad = BadIe::incorrect(IE_TRANSIT_REWRITE);
            let flags = *r.first().ok_or(bad)?;
            if flags & !(REWRITE_KTEID | REWRITE_ISRC | REWRITE_IDST | REWRITE_OSRC) != 0 {
                return Err(bad);
            }
            let mut addrs = [None; 3];
            let mut at = 1;
            for (i, f) in [REWRITE_ISRC, REWRITE_IDST, REWRITE_OSRC].into_iter().enumerate() {
                if flags & f != 0 {
                    addrs[i] = Some(v4(r, at).ok_or(bad)?);
                    at += 4;
                }
            }
            if at != r.len() {
                return Err(bad);
            }
            (flags, addrs)
        }
    };
    Ok((id, FarParts { destination_interface, ohc, rewrite }))
}

/// Reads a diversion back from a session request's Create PDR / Create FAR
/// IEs (what the UPF does): the IE to name as Offending IE for anything
/// missing or inconsistent. Never panics.
pub fn decode_diversion(ies: &[IeRef]) -> Result<Diversion, BadIe> {
    let mut ul = None;
    let mut dl = None;
    let mut pdrs = 0;
    for ie in ies.iter().filter(|i| i.ie_type == IeType::CreatePdr) {
        pdrs += 1;
        let p = read_pdr(ie.payload)?;
        let slot = if p.source_interface == ACCESS { &mut ul } else { &mut dl };
        if slot.replace(p).is_some() || pdrs > 2 {
            return Err(BadIe::incorrect(t(IeType::CreatePdr)));
        }
    }
    let (Some(ul), Some(dl)) = (ul, dl) else { return Err(BadIe::missing(t(IeType::CreatePdr))) };
    let mut fars = Vec::new();
    for ie in ies.iter().filter(|i| i.ie_type == IeType::CreateFar) {
        fars.push(read_far(ie.payload)?);
    }
    if fars.len() > 2 {
        return Err(BadIe::incorrect(t(IeType::CreateFar)));
    }
    let far_of =
        |id: u32| fars.iter().find(|(i, _)| *i == id).map(|(_, f)| f).ok_or(BadIe::missing(t(IeType::CreateFar)));
    let (ulf, dlf) = (far_of(ul.far_id)?, far_of(dl.far_id)?);
    if ul.far_id == dl.far_id {
        return Err(BadIe::incorrect(t(IeType::FarId)));
    }
    // Uplink: the UE's address as source, no outer source to match.
    let bad_ue = BadIe::incorrect(t(IeType::UeIpAddress));
    if ul.ue_ip.1 || ul.outer_source.is_some() {
        return Err(if ul.ue_ip.1 { bad_ue } else { BadIe::incorrect(IE_TRANSIT_MATCH) });
    }
    if ulf.destination_interface != CORE {
        return Err(BadIe::incorrect(t(IeType::DestinationInterface)));
    }
    let (teid, anchor) = ulf.ohc.ok_or(BadIe::missing(t(IeType::OuterHeaderCreation)))?;
    let (flags, [isrc, ..]) = ulf.rewrite;
    if flags & (REWRITE_IDST | REWRITE_OSRC) != 0 {
        return Err(BadIe::incorrect(IE_TRANSIT_REWRITE));
    }
    let anchor_teid = (flags & REWRITE_KTEID == 0).then_some(teid);
    let d = Diversion { ue: ul.ue_ip.0, flow: ul.flow, anchor, anchor_teid, anchor_ue: isrc, origin: anchor };
    // Downlink: the UE's address at the anchor as destination, from the anchor.
    if !dl.ue_ip.1 || dl.ue_ip.0 != d.downlink_ue() {
        return Err(bad_ue);
    }
    if dl.flow.is_some() {
        return Err(BadIe::incorrect(t(IeType::SdfFilter)));
    }
    if dl.outer_source != Some(anchor) {
        return Err(BadIe::incorrect(IE_TRANSIT_MATCH));
    }
    if dlf.destination_interface != ACCESS {
        return Err(BadIe::incorrect(t(IeType::DestinationInterface)));
    }
    if dlf.ohc.is_some() {
        return Err(BadIe::incorrect(t(IeType::OuterHeaderCreation)));
    }
    let (flags, [_, idst, osrc]) = dlf.rewrite;
    if flags == 0 {
        return Err(BadIe::missing(IE_TRANSIT_REWRITE));
    }
    let idst_ok = match d.anchor_ue {
        Some(_) => idst == Some(d.ue),
        None => idst.is_none_or(|a| a == d.ue),
    };
    if flags & (REWRITE_KTEID | REWRITE_ISRC) != 0 || !idst_ok {
        return Err(BadIe::incorrect(IE_TRANSIT_REWRITE));
    }
    let origin = osrc.ok_or(BadIe::incorrect(IE_TRANSIT_REWRITE))?;
    Ok(Diversion { origin, ..d })
}

#[cfg(test)]
mod tests;
