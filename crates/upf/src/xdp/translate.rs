//! SessionRules (TS 29.244 PDR/FAR/QER/URR) to map entries, and the SDF
//! flow-description parser (TS 29.244 8.2.5, IPFilterRule of RFC 6733).

use super::maps::*;
use crate::rules::{Far, Pdr, Qer, SessionRules, INTERFACE_ACCESS, INTERFACE_CORE};
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// SDF filters per PDR id, oriented as the packet travels (for an uplink
/// PDR the UE is the source). A PDR with no entry matches every packet.
pub type SdfTable = HashMap<u16, Vec<SdfFilter>>;

/// Map slot of each rule id of one session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSlots {
    pub far: HashMap<u32, u32>,
    pub qer: HashMap<u32, u32>,
    pub urr: HashMap<u32, u32>,
}

/// Fixed-capacity index allocator for the array maps.
#[derive(Debug, Clone)]
pub struct Slots {
    free: Vec<u32>,
    next: u32,
    cap: u32,
}

impl Slots {
    pub fn new(cap: u32) -> Self {
        Slots { free: Vec::new(), next: 0, cap }
    }
    pub fn alloc(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        (self.next < self.cap).then(|| {
            self.next += 1;
            self.next - 1
        })
    }
    pub fn release(&mut self, i: u32) {
        self.free.push(i);
    }
    pub fn in_use(&self) -> usize {
        self.next as usize - self.free.len()
    }
}

pub fn far_entry(f: &Far) -> FarEntry {
    let a = &f.action;
    let mut action = 0;
    for (on, bit) in [(a.forw, FAR_FORW), (a.drop, FAR_DROP), (a.buff, FAR_BUFF), (a.nocp, FAR_NOCP), (a.dupl, FAR_DUPL)] {
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
            urr_idx: idx(&slots.urr, p.urr_ids.first()),
            pdr_id: p.id,
            flags: if p.outer_header_removal == Some(0) { PDR_F_OHR } else { 0 },
            ..Default::default()
        };
        let entry = by_key.entry(key).or_insert((0, Vec::new()));
        if let (PdrKey::Teid(_), Some(ue)) = (key, p.pdi.ue_ipv4) {
            entry.0 = be_addr(ue);
        }
        match sdf.get(&p.id) {
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

/// Parses an IPFilterRule flow description as used in SDF filters:
/// `permit out <proto> from <addr>[/len] [ports] to <addr>[/len] [ports]`,
/// `<proto>` `ip` or a number, `<addr>` also `any` or `assigned` (the UE:
/// any here, since the PDR lookup already fixed the UE), ports `p` or
/// `lo-hi`. Returned as written (from = source); reverse it for uplink.
pub fn parse_flow_description(s: &str) -> Result<SdfFilter, String> {
    let t: Vec<&str> = s.split_whitespace().collect();
    if t.len() < 6 || t[0] != "permit" || !(t[1] == "out" || t[1] == "in") {
        return Err(format!("not a permit rule: {s:?}"));
    }
    let mut f = SdfFilter::any();
    f.proto = match t[2] {
        "ip" => 0,
        p => p.parse().map_err(|_| format!("bad protocol {p:?}"))?,
    };
    if t[3] != "from" {
        return Err(format!("expected from: {s:?}"));
    }
    let mut i = 4;
    let (sa, sm, sp, j) = endpoint(&t, i)?;
    i = j;
    if t.get(i) != Some(&"to") {
        return Err(format!("expected to: {s:?}"));
    }
    let (da, dm, dp, j) = endpoint(&t, i + 1)?;
    if j != t.len() {
        return Err(format!("trailing options unsupported: {s:?}"));
    }
    (f.src_addr, f.src_mask, f.dst_addr, f.dst_mask) = (sa, sm, da, dm);
    (f.sport_lo, f.sport_hi) = sp;
    (f.dport_lo, f.dport_hi) = dp;
    Ok(f)
}

type Endpoint = (u32, u32, (u16, u16), usize);

fn endpoint(t: &[&str], i: usize) -> Result<Endpoint, String> {
    let a = t.get(i).ok_or("missing address")?;
    let (addr, mask) = match *a {
        "any" | "assigned" => (0, 0),
        a => {
            let (ip, len) = match a.split_once('/') {
                Some((ip, l)) => (ip, l.parse::<u8>().map_err(|_| format!("bad prefix {a:?}"))?),
                None => (a, 32),
            };
            let ip: Ipv4Addr = ip.parse().map_err(|_| format!("bad address {a:?}"))?;
            if len > 32 {
                return Err(format!("bad prefix {a:?}"));
            }
            let f = SdfFilter::any().with_src(ip, len);
            (f.src_addr, f.src_mask)
        }
    };
    let mut ports = (0, u16::MAX);
    let mut next = i + 1;
    if let Some(p) = t.get(next).filter(|p| p.starts_with(|c: char| c.is_ascii_digit())) {
        let bad = || format!("bad port {p:?}");
        ports = match p.split_once('-') {
            Some((lo, hi)) => (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?),
            None => {
                let v = p.parse().map_err(|_| bad())?;
                (v, v)
            }
        };
        if ports.0 > ports.1 {
            return Err(bad());
        }
        next += 1;
    }
    Ok((addr, mask, ports, next))
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
