//! SessionRules (TS 29.244 PDR/FAR/QER/URR) to map entries; SDF filters
//! (TS 29.244 8.2.5) as the program's 5-tuple match.

use super::maps::*;
use crate::dataplane::flow::{AddrMatch, FlowFilter};
use crate::rules::{Far, Pdr, Qer, SessionRules, INTERFACE_ACCESS, INTERFACE_CORE};
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// SDF filters per PDR id, oriented as the packet travels (for an uplink
/// PDR the UE is the source), overriding the PDR's own flow descriptions
/// (`pdi.flows`). A PDR with neither matches every packet.
pub type SdfTable = HashMap<u16, Vec<SdfFilter>>;

/// Map slot of each rule id of one session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSlots {
    pub far: HashMap<u32, u32>,
    pub qer: HashMap<u32, u32>,
    pub urr: HashMap<u32, u32>,
    /// `urr_lists` slot of each list of `urrs` slots (PDRs with 2 to
    /// [`URR_LIST_MAX`] URRs; PDRs with the same URRs share one).
    pub urr_lists: HashMap<Vec<u32>, u32>,
}

/// The `urrs` slots of a PDR's URRs, in order, each once (URRs without a
/// slot left out).
pub fn urr_slot_list(slots: &RuleSlots, ids: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for s in ids.iter().filter_map(|id| slots.urr.get(id)) {
        if !out.contains(s) {
            out.push(*s);
        }
    }
    out
}

/// A PDR's `urr_idx` (see [`URR_IDX_LIST`]): none, one slot, a list, or
/// the slow path when the PDR has more URRs than a list holds.
pub fn urr_ref(slots: &RuleSlots, ids: &[u32]) -> u32 {
    let l = urr_slot_list(slots, ids);
    match l.len() {
        0 => IDX_NONE,
        1 => l[0],
        n if n <= URR_LIST_MAX => slots.urr_lists.get(&l).map_or(URR_IDX_SLOW, |i| URR_IDX_LIST | i),
        _ => URR_IDX_SLOW,
    }
}

pub fn far_entry(f: &Far) -> FarEntry {
    let a = &f.action;
    let mut action = 0;
    for (on, bit) in
        [(a.forw, FAR_FORW), (a.drop, FAR_DROP), (a.buff, FAR_BUFF), (a.nocp, FAR_NOCP), (a.dupl, FAR_DUPL)]
    {
        if on {
            action |= bit;
        }
    }
    let mut e = FarEntry { action, dst_iface: f.destination_interface.unwrap_or(0), ..Default::default() };
    if let Some(t) = f.outer_header_creation {
        e.flags |= FAR_F_OHC;
        e.teid = t.teid;
        e.peer_addr = be_addr(t.ipv4);
    }
    e
}

pub fn qer_entry(q: &Qer) -> QerEntry {
    let (ul, dl) = q.mbr.unwrap_or((0, 0));
    let (ul, dl) = (ps_per_byte(ul), ps_per_byte(dl));
    QerEntry {
        gate_ul: q.gate_ul_open as u8,
        gate_dl: q.gate_dl_open as u8,
        ul_ps_per_byte: ul,
        dl_ps_per_byte: dl,
        ul_burst_ns: burst_ns(ul),
        dl_burst_ns: burst_ns(dl),
        ..Default::default()
    }
}

/// Where a PDR is looked up in XDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PdrKey {
    /// Uplink, by local TEID.
    Teid(u32),
    /// Downlink, by UE address.
    UeAddr(Ipv4Addr),
}

pub fn pdr_key(p: &Pdr) -> Option<PdrKey> {
    match p.pdi.source_interface {
        INTERFACE_ACCESS => p.pdi.local_fteid.map(|(t, _)| PdrKey::Teid(t)),
        INTERFACE_CORE => p.pdi.ue_ipv4.map(PdrKey::UeAddr),
        _ => None,
    }
}

/// The PDR sets of a session per lookup key, rules sorted by precedence.
/// PDRs the fast path cannot express (no TEID/UE address, other source
/// interfaces) are left out: their packets take the slow path.
pub fn pdr_sets(rules: &SessionRules, slots: &RuleSlots, sdf: &SdfTable) -> Result<Vec<(PdrKey, PdrSet)>, String> {
    let mut by_key: HashMap<PdrKey, (u32, Vec<PdrRule>)> = HashMap::new();
    for p in rules.pdrs.values() {
        let Some(key) = pdr_key(p) else { continue };
        let idx = |m: &HashMap<u32, u32>, id: Option<&u32>| id.and_then(|i| m.get(i)).copied().unwrap_or(IDX_NONE);
        let base = PdrRule {
            precedence: p.precedence,
            far_idx: idx(&slots.far, p.far_id.as_ref()),
            qer_idx: idx(&slots.qer, p.qer_ids.first()),
            urr_idx: urr_ref(slots, &p.urr_ids),
            pdr_id: p.id,
            flags: if p.outer_header_removal == Some(0) { PDR_F_OHR } else { 0 },
            ..Default::default()
        };
        let entry = by_key.entry(key).or_insert((0, Vec::new()));
        if let (PdrKey::Teid(_), Some(ue)) = (key, p.pdi.ue_ipv4) {
            entry.0 = be_addr(ue);
        }
        let uplink = matches!(key, PdrKey::Teid(_));
        let own: Vec<SdfFilter> = p.pdi.flows.iter().map(|f| sdf_from_flow(f, uplink)).collect();
        match sdf.get(&p.id).or(Some(&own)) {
            Some(fs) if !fs.is_empty() => {
                for f in fs {
                    entry.1.push(PdrRule { flags: base.flags | PDR_F_SDF, sdf: *f, ..base });
                }
            }
            _ => entry.1.push(base),
        }
    }
    let mut out = Vec::new();
    for (key, (ue_addr, mut list)) in by_key {
        if list.len() > PDR_SET_MAX {
            return Err(format!("{key:?}: {} PDR/SDF entries, the fast path holds {PDR_SET_MAX}", list.len()));
        }
        list.sort_by_key(|r| (r.precedence, r.pdr_id));
        let mut set = PdrSet { ue_addr, count: list.len() as u32, ..Default::default() };
        set.rules[..list.len()].copy_from_slice(&list);
        out.push((key, set));
    }
    out.sort_by_key(|(k, _)| *k);
    Ok(out)
}

/// A PDR's SDF filter (oriented UE / remote) as the 5-tuple match of the
/// program (oriented as the packet travels): uplink source = UE.
pub fn sdf_from_flow(f: &FlowFilter, uplink: bool) -> SdfFilter {
    if f.never {
        // lo > hi: matches no packet.
        return SdfFilter { sport_lo: 1, sport_hi: 0, ..SdfFilter::any() };
    }
    let addr = |m: AddrMatch| match m {
        AddrMatch::Any | AddrMatch::Assigned => (0, 0),
        AddrMatch::Prefix(a, l) => {
            let f = SdfFilter::any().with_src(a, l);
            (f.src_addr, f.src_mask)
        }
    };
    let ports = |p: Option<(u16, u16)>| p.unwrap_or((0, u16::MAX));
    let (ue, remote) = (addr(f.ue), addr(f.remote));
    let (ue_p, remote_p) = (ports(f.ue_ports), ports(f.remote_ports));
    let mut s = SdfFilter { proto: f.proto.unwrap_or(0), ..SdfFilter::any() };
    (s.src_addr, s.src_mask, s.dst_addr, s.dst_mask) = (remote.0, remote.1, ue.0, ue.1);
    (s.sport_lo, s.sport_hi, s.dport_lo, s.dport_hi) = (remote_p.0, remote_p.1, ue_p.0, ue_p.1);
    if uplink {
        s.reversed()
    } else {
        s
    }
}

impl SdfFilter {
    /// The same filter for the opposite direction (source and destination swapped).
    pub fn reversed(&self) -> SdfFilter {
        SdfFilter {
            src_addr: self.dst_addr,
            src_mask: self.dst_mask,
            dst_addr: self.src_addr,
            dst_mask: self.src_mask,
            sport_lo: self.dport_lo,
            sport_hi: self.dport_hi,
            dport_lo: self.sport_lo,
            dport_hi: self.sport_hi,
            ..*self
        }
    }
}

/// What goes into the maps for one lookup key: its fast entry, and the PDR
/// set behind it when the fast entry cannot hold the rule (several PDRs, an
/// SDF filter, or a FAR without a slot, which the set path reports); the
/// caller puts the set's `pdr_sets` slot into the entry (`teid`, C
/// `set_idx`).
pub fn fast_split(set: &PdrSet, fars: &HashMap<u32, FarEntry>) -> (FastEntry, Option<PdrSet>) {
    let r = &set.rules[0];
    match fars.get(&r.far_idx) {
        Some(f) if set.count == 1 && r.flags & PDR_F_SDF == 0 => {
            let e = FastEntry {
                ue_addr: set.ue_addr,
                qer_idx: r.qer_idx,
                urr_idx: r.urr_idx,
                teid: f.teid,
                peer_addr: f.peer_addr,
                local_addr: f.local_addr,
                action: f.action,
                far_flags: f.flags,
                pdr_flags: r.flags,
                ..Default::default()
            };
            (e, None)
        }
        _ => (FastEntry { ue_addr: set.ue_addr, flags: FAST_F_SET, ..Default::default() }, Some(*set)),
    }
}
