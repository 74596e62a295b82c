//! The MEC router role's maps (bpf/mec.h, bpf/maps.h "MEC router role"):
//! `#[repr(C)]` mirrors, the [`MecStore`] trait (aya-backed [`AyaMecMaps`],
//! in-memory [`MemoryMecMaps`]) and [`MecTable`], which turns the rules and
//! UE tunnels of the PFCP sessions into map entries.
//!
//! Each filter of a rule is installed per side (tunnel: the inner header
//! of a G-PDU; plain: an application's packet): PACKET as written on both
//! sides (the plain copy without TEID or eNB conditions, which a plain
//! packet cannot meet, and none when the filter has one), FLOW also
//! reversed on the plain side; a DUPLICATE_* rule only on the tunnel side,
//! a FLOW one reversed there too (the application watches both directions
//! and answers nothing). A fully specified filter (both addresses
//! /32, the protocol, single ports for TCP and UDP and none for others, no
//! DSCP, TEID or eNB) is one `mec_exact` entry; any other goes into the
//! set of its destination prefix in `mec_lpm`, and every set holds the
//! entries of the shorter prefixes that cover it, in priority order, at
//! most [`MEC_SET_MAX`]. A change computes every value it touches first and
//! is refused before any write when a set would overflow or a table is
//! full; then it writes each touched key whole.

use super::maps::{be_addr, MapError, SdfFilter};
use crate::rules::PlaneError;
use mobicore_pfcp::mec::{MecRule, RuleAction, TrafficFilter, UeTunnel};
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

pub const MEC_MAX_SLICES: u32 = 256;
/// `mec_slices` value: the slice id, and bit `MEC_SLICE_LPM + side` when
/// that side of the slice has prefix sets (else the program skips the
/// LPM lookup).
pub const MEC_SLICE_LPM: u32 = 16;
/// `mec_port`: the untagged slice of ports with an index below this, the
/// `mec_slices` value with [`MEC_PORT_VALID`] (an array the program reads
/// before the hash).
pub const MEC_PORT_SLOTS: u32 = 4096;
pub const MEC_PORT_VALID: u32 = 1 << 31;
pub const MEC_MAX_EXACT: u32 = 262_144;
pub const MEC_MAX_PREFIXES: u32 = 16_384;
pub const MEC_SET_MAX: usize = 16;
pub const MEC_MAX_UES: u32 = 65_536;
pub const SIDE_TUNNEL: u32 = 0;
pub const SIDE_PLAIN: u32 = 1;

pub const MEC_DROP: u8 = 1;
pub const MEC_FORWARD_DECAPSULATED: u8 = 2;
pub const MEC_FORWARD_ENCAPSULATED: u8 = 3;
pub const MEC_PASSTHROUGH: u8 = 4;
pub const MEC_DUPLICATE_DECAPSULATED: u8 = 5;
pub const MEC_DUPLICATE_ENCAPSULATED: u8 = 6;
/// Overlapping rules of one priority are the node's to refuse
/// (`crate::mec`); here the lower session wins a tie.
pub const MEC_F_DSCP: u8 = 1 << 0;
pub const MEC_F_TEID: u8 = 1 << 1;
pub const MEC_F_ENB: u8 = 1 << 2;

/// Key of `mec_slices`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MecSliceKey {
    pub ifindex: u32,
    pub vlan: u16,
    pub pad: u16,
}

/// One rule as the program matches it (bpf/maps.h struct mec_rule).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MecRuleEntry {
    pub sdf: SdfFilter,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    pub ifindex: u32,
    pub tun_dst: u32,
    pub tun_teid: u32,
    pub teid: u32,
    pub enb: u32,
    pub priority: u16,
    pub action: u8,
    pub flags: u8,
    pub dscp: u8,
    pub pad: [u8; 3],
}

/// Value of `mec_lpm`: rules by ascending priority value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MecSet {
    pub count: u32,
    pub rules: [MecRuleEntry; MEC_SET_MAX],
}

/// Key of `mec_exact`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MecExactKey {
    pub slice_side: u32,
    pub saddr: u32,
    pub daddr: u32,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// The data of a `mec_lpm` key (after its prefix length): the slice and
/// side in network order, then the destination.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MecLpmData {
    pub slice_side: u32,
    pub addr: u32,
}

/// Value of `mec_ue` (key: the UE's address, network order).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MecUe {
    pub enb: u32,
    pub teid: u32,
    pub origin: u32,
}

const _: () = assert!(std::mem::size_of::<MecRuleEntry>() == 68);
const _: () = assert!(std::mem::size_of::<MecSet>() == 4 + 68 * MEC_SET_MAX);
const _: () = assert!(std::mem::size_of::<MecExactKey>() == 20 && std::mem::size_of::<MecLpmData>() == 8);
const _: () = assert!(std::mem::size_of::<MecSliceKey>() == 8 && std::mem::size_of::<MecUe>() == 12);

// SAFETY: plain #[repr(C)] structs of integers with explicit padding fields.
unsafe impl aya::Pod for MecSliceKey {}
unsafe impl aya::Pod for MecRuleEntry {}
unsafe impl aya::Pod for MecSet {}
unsafe impl aya::Pod for MecExactKey {}
unsafe impl aya::Pod for MecLpmData {}
unsafe impl aya::Pod for MecUe {}

/// Where the MEC tables go.
pub trait MecStore: Send + Sync {
    fn put_slice(&mut self, k: MecSliceKey, id: u32) -> Result<(), MapError>;
    fn del_slice(&mut self, k: MecSliceKey) -> Result<(), MapError>;
    fn put_exact(&mut self, k: MecExactKey, r: &MecRuleEntry) -> Result<(), MapError>;
    fn del_exact(&mut self, k: MecExactKey) -> Result<(), MapError>;
    /// `len`: 32 + the destination prefix length.
    fn put_prefix(&mut self, len: u32, d: MecLpmData, s: &MecSet) -> Result<(), MapError>;
    fn del_prefix(&mut self, len: u32, d: MecLpmData) -> Result<(), MapError>;
    fn put_ue(&mut self, ue: u32, v: &MecUe) -> Result<(), MapError>;
    fn del_ue(&mut self, ue: u32) -> Result<(), MapError>;
    /// A port DUPLICATE_* copies may leave by (`mec_dup`, twice).
    fn add_dup_port(&mut self, ifindex: u32) -> Result<(), MapError>;
}

/// The MEC maps in memory (tests).
#[derive(Debug, Default)]
pub struct MemoryMecMaps {
    pub slices: HashMap<MecSliceKey, u32>,
    pub exact: HashMap<MecExactKey, MecRuleEntry>,
    pub prefixes: HashMap<(u32, MecLpmData), MecSet>,
    pub ues: HashMap<u32, MecUe>,
    pub dup_ports: std::collections::BTreeSet<u32>,
}

impl MecStore for MemoryMecMaps {
    fn put_slice(&mut self, k: MecSliceKey, id: u32) -> Result<(), MapError> {
        self.slices.insert(k, id);
        Ok(())
    }
    fn del_slice(&mut self, k: MecSliceKey) -> Result<(), MapError> {
        self.slices.remove(&k);
        Ok(())
    }
    fn put_exact(&mut self, k: MecExactKey, r: &MecRuleEntry) -> Result<(), MapError> {
        self.exact.insert(k, *r);
        Ok(())
    }
    fn del_exact(&mut self, k: MecExactKey) -> Result<(), MapError> {
        self.exact.remove(&k);
        Ok(())
    }
    fn put_prefix(&mut self, len: u32, d: MecLpmData, s: &MecSet) -> Result<(), MapError> {
        self.prefixes.insert((len, d), *s);
        Ok(())
    }
    fn del_prefix(&mut self, len: u32, d: MecLpmData) -> Result<(), MapError> {
        self.prefixes.remove(&(len, d));
        Ok(())
    }
    fn put_ue(&mut self, ue: u32, v: &MecUe) -> Result<(), MapError> {
        self.ues.insert(ue, *v);
        Ok(())
    }
    fn del_ue(&mut self, ue: u32) -> Result<(), MapError> {
        self.ues.remove(&ue);
        Ok(())
    }
    fn add_dup_port(&mut self, ifindex: u32) -> Result<(), MapError> {
        self.dup_ports.insert(ifindex);
        Ok(())
    }
}

/// The MEC maps of the loaded `upf.o`, taken out of the Ebpf object.
pub struct AyaMecMaps {
    slices: aya::maps::HashMap<aya::maps::MapData, MecSliceKey, u32>,
    exact: aya::maps::HashMap<aya::maps::MapData, MecExactKey, MecRuleEntry>,
    lpm: aya::maps::LpmTrie<aya::maps::MapData, MecLpmData, MecSet>,
    ues: aya::maps::HashMap<aya::maps::MapData, u32, MecUe>,
    ports: aya::maps::Array<aya::maps::MapData, u32>,
    dup: aya::maps::DevMapHash<aya::maps::MapData>,
    dup_egress: aya::programs::ProgramFd,
}

fn me(map: &'static str) -> impl Fn(aya::maps::MapError) -> MapError {
    move |e| MapError { map, msg: format!("{e}") }
}

/// A delete of a key that is not there is no error.
fn gone(map: &'static str, r: Result<(), aya::maps::MapError>) -> Result<(), MapError> {
    match r {
        Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        Err(e) => Err(me(map)(e)),
    }
}

impl AyaMecMaps {
    /// The maps, and the devmap program of DUPLICATE_* loaded.
    pub(crate) fn take(p: &mut super::LoadedProgram) -> Result<Self, super::XdpError> {
        Ok(AyaMecMaps {
            dup_egress: p.load_also("mec_dup_egress")?,
            dup: p.take_map("mec_dup")?.try_into().map_err(me("mec_dup"))?,
            ports: p.take_map("mec_port")?.try_into().map_err(me("mec_port"))?,
            slices: p.take_map("mec_slices")?.try_into().map_err(me("mec_slices"))?,
            exact: p.take_map("mec_exact")?.try_into().map_err(me("mec_exact"))?,
            lpm: p.take_map("mec_lpm")?.try_into().map_err(me("mec_lpm"))?,
            ues: p.take_map("mec_ue")?.try_into().map_err(me("mec_ue"))?,
        })
    }
}

impl MecStore for AyaMecMaps {
    fn put_slice(&mut self, k: MecSliceKey, id: u32) -> Result<(), MapError> {
        self.slices.insert(k, id, 0).map_err(me("mec_slices"))?;
        if k.vlan == 0 && k.ifindex < MEC_PORT_SLOTS {
            self.ports.set(k.ifindex, id | MEC_PORT_VALID, 0).map_err(me("mec_port"))?;
        }
        Ok(())
    }
    fn del_slice(&mut self, k: MecSliceKey) -> Result<(), MapError> {
        if k.vlan == 0 && k.ifindex < MEC_PORT_SLOTS {
            self.ports.set(k.ifindex, 0, 0).map_err(me("mec_port"))?;
        }
        gone("mec_slices", self.slices.remove(&k))
    }
    fn put_exact(&mut self, k: MecExactKey, r: &MecRuleEntry) -> Result<(), MapError> {
        self.exact.insert(k, r, 0).map_err(me("mec_exact"))
    }
    fn del_exact(&mut self, k: MecExactKey) -> Result<(), MapError> {
        gone("mec_exact", self.exact.remove(&k))
    }
    fn put_prefix(&mut self, len: u32, d: MecLpmData, s: &MecSet) -> Result<(), MapError> {
        self.lpm.insert(&aya::maps::lpm_trie::Key::new(len, d), s, 0).map_err(me("mec_lpm"))
    }
    fn del_prefix(&mut self, len: u32, d: MecLpmData) -> Result<(), MapError> {
        gone("mec_lpm", self.lpm.remove(&aya::maps::lpm_trie::Key::new(len, d)))
    }
    fn put_ue(&mut self, ue: u32, v: &MecUe) -> Result<(), MapError> {
        self.ues.insert(ue, v, 0).map_err(me("mec_ue"))
    }
    fn del_ue(&mut self, ue: u32) -> Result<(), MapError> {
        gone("mec_ue", self.ues.remove(&ue))
    }
    fn add_dup_port(&mut self, ifindex: u32) -> Result<(), MapError> {
        let err = |e: aya::maps::xdp::XdpMapError| MapError { map: "mec_dup", msg: e.to_string() };
        for k in [ifindex << 1, (ifindex << 1) | 1] {
            self.dup.insert(k, ifindex, Some(&self.dup_egress), 0).map_err(err)?;
        }
        Ok(())
    }
}

/// An interface's index and MAC address, by name (in the data path's
/// namespace); tests give their own.
pub type Resolver = Box<dyn Fn(&str) -> Option<(u32, [u8; 6])> + Send + Sync>;

/// The kernel's view: `if_nametoindex` and `SIOCGIFHWADDR`.
pub fn kernel_resolver() -> Resolver {
    Box::new(|name| {
        let idx = super::ifindex(name).ok()?;
        let mac = hwaddr(name)?;
        Some((idx, mac))
    })
}

/// An interface's MAC address (`SIOCGIFHWADDR`, in the caller's namespace).
fn hwaddr(name: &str) -> Option<[u8; 6]> {
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        return None;
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    // SAFETY: a plain socket call; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: SIOCGIFHWADDR reads the NUL-terminated name and writes the
    // ifreq it is given.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut req) };
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return None;
    }
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Some(mac)
}

/// A prefix entry's place: (slice << 1 | side, prefix length, address in
/// host order, masked).
type PrefixKey = (u32, u8, u32);

/// One compiled filter of one rule.
#[derive(Debug, Clone, Copy)]
struct Cand {
    seid: u64,
    entry: MecRuleEntry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Exact(MecExactKey),
    Prefix(PrefixKey),
}

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

fn host(a: Ipv4Addr) -> u32 {
    u32::from(a)
}

/// A session's rule, its slice's keys (ingress, application) and its entries.
type Installed = (MecRule, Vec<MecSliceKey>, Vec<(Place, Cand)>);

/// The rules of the MEC sessions and the UE tunnels, and what they make
/// of the maps.
pub struct MecTable {
    pub(crate) resolve: Resolver,
    /// The interfaces the program is attached to, learnt in the data
    /// path's namespace (the PFCP task may run in another).
    known: HashMap<String, (u32, [u8; 6])>,
    rules: BTreeMap<u64, Installed>,
    /// Rules per slice key: a key without rules goes.
    slice_rules: HashMap<MecSliceKey, usize>,
    ues: BTreeMap<u64, UeTunnel>,
    slices: BTreeMap<MecSliceKey, u32>,
    exact: HashMap<MecExactKey, Vec<Cand>>,
    prefixes: BTreeMap<PrefixKey, Vec<Cand>>,
}

impl std::fmt::Debug for MecTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MecTable").field("rules", &self.rules.len()).field("ues", &self.ues.len()).finish()
    }
}

impl MecTable {
    pub fn new(resolve: Resolver) -> Self {
        MecTable {
            resolve,
            known: HashMap::new(),
            rules: BTreeMap::new(),
            ues: BTreeMap::new(),
            slices: BTreeMap::new(),
            slice_rules: HashMap::new(),
            exact: HashMap::new(),
            prefixes: BTreeMap::new(),
        }
    }

    /// Learns an interface the program is attached to (call it in the
    /// data path's namespace).
    pub fn learn(&mut self, name: &str, ifindex: u32) {
        if let Some(mac) = hwaddr(name) {
            self.known.insert(name.to_string(), (ifindex, mac));
        }
    }

    fn lookup(&self, name: &str) -> Option<(u32, [u8; 6])> {
        self.known.get(name).copied().or_else(|| (self.resolve)(name))
    }

    pub fn contains(&self, seid: u64) -> bool {
        self.rules.contains_key(&seid) || self.ues.contains_key(&seid)
    }

    /// The slice key of a rule's slice (its interface resolved).
    fn slice_key(&self, r: &MecRule) -> Result<MecSliceKey, PlaneError> {
        let (ifindex, _) = self
            .lookup(&r.slice.interface)
            .ok_or_else(|| PlaneError::Other(format!("no interface {}", r.slice.interface)))?;
        Ok(MecSliceKey { ifindex, vlan: r.slice.vlan, pad: 0 })
    }

    /// The program's view of a rule's action.
    fn action_entry(&self, a: &RuleAction) -> Result<MecRuleEntry, PlaneError> {
        let mut e = MecRuleEntry::default();
        match a {
            RuleAction::Drop => e.action = MEC_DROP,
            RuleAction::Passthrough => e.action = MEC_PASSTHROUGH,
            RuleAction::ForwardDecapsulated(app) | RuleAction::DuplicateDecapsulated(app) => {
                let (ifindex, mac) = self
                    .lookup(&app.interface)
                    .ok_or_else(|| PlaneError::Other(format!("no interface {}", app.interface)))?;
                (e.ifindex, e.dmac, e.smac) = (ifindex, app.mac, mac);
                e.action = match a {
                    RuleAction::ForwardDecapsulated(_) => MEC_FORWARD_DECAPSULATED,
                    _ => MEC_DUPLICATE_DECAPSULATED,
                };
            }
            RuleAction::ForwardEncapsulated(t) | RuleAction::DuplicateEncapsulated(t) => {
                (e.tun_dst, e.tun_teid) = (be_addr(t.addr), t.teid);
                e.action = match a {
                    RuleAction::ForwardEncapsulated(_) => MEC_FORWARD_ENCAPSULATED,
                    _ => MEC_DUPLICATE_ENCAPSULATED,
                };
            }
        }
        Ok(e)
    }

    /// The entries of one filter on one side.
    fn compile(f: &TrafficFilter, slice: u32, side: u32, reversed: bool, base: &MecRuleEntry) -> (Place, MecRuleEntry) {
        let (src, dst, sp, dp) = match reversed {
            false => (f.src, f.dst, f.src_ports, f.dst_ports),
            true => (f.dst, f.src, f.dst_ports, f.src_ports),
        };
        let any = (Ipv4Addr::UNSPECIFIED, 0);
        let (s, d) = (src.unwrap_or(any), dst.unwrap_or(any));
        let (sp, dp) = (sp.unwrap_or((0, u16::MAX)), dp.unwrap_or((0, u16::MAX)));
        let mut e = *base;
        e.sdf = SdfFilter::any()
            .with_src(s.0, s.1)
            .with_dst(d.0, d.1)
            .with_proto(f.protocol.unwrap_or(0))
            .with_sports(sp.0, sp.1)
            .with_dports(dp.0, dp.1);
        if let Some(x) = f.dscp {
            (e.flags, e.dscp) = (e.flags | MEC_F_DSCP, x);
        }
        if side == SIDE_TUNNEL {
            if let Some(t) = f.teid {
                (e.flags, e.teid) = (e.flags | MEC_F_TEID, t);
            }
            if let Some(a) = f.enb {
                (e.flags, e.enb) = (e.flags | MEC_F_ENB, be_addr(a));
            }
        }
        let slice_side = (slice << 1) | side;
        let l4 = matches!(f.protocol, Some(6 | 17));
        let single = |p: (u16, u16)| p.0 == p.1;
        let full_ports = if l4 { single(sp) && single(dp) } else { sp == (0, u16::MAX) && dp == (0, u16::MAX) };
        if s.1 == 32 && d.1 == 32 && f.protocol.is_some() && full_ports && e.flags == 0 {
            let (sport, dport) = if l4 { (sp.0, dp.0) } else { (0, 0) };
            let k = MecExactKey {
                slice_side,
                saddr: be_addr(s.0),
                daddr: be_addr(d.0),
                sport,
                dport,
                proto: f.protocol.unwrap_or(0),
                pad: [0; 3],
            };
            return (Place::Exact(k), e);
        }
        (Place::Prefix((slice_side, d.1, host(d.0) & mask(d.1))), e)
    }

    /// Every entry of `r` on slice `slice`.
    fn entries(&self, seid: u64, r: &MecRule, slice: u32) -> Result<Vec<(Place, Cand)>, PlaneError> {
        let mut base = self.action_entry(&r.action)?;
        let duplicate = matches!(r.action, RuleAction::DuplicateDecapsulated(_) | RuleAction::DuplicateEncapsulated(_));
        base.priority = r.priority.into();
        let mut out = Vec::new();
        for f in &r.filters {
            let mut put = |side, rev| {
                let (p, entry) = Self::compile(f, slice, side, rev, &base);
                out.push((p, Cand { seid, entry }));
            };
            put(SIDE_TUNNEL, false);
            if duplicate {
                // The application only watches: both directions of a FLOW
                // are G-PDUs copied to it, and it sends nothing back.
                if r.flow && f.teid.is_none() && f.enb.is_none() {
                    put(SIDE_TUNNEL, true);
                }
            } else if r.flow {
                put(SIDE_PLAIN, true);
            } else if f.teid.is_none() && f.enb.is_none() {
                put(SIDE_PLAIN, false);
            }
        }
        Ok(out)
    }

    /// The `mec_lpm` value of prefix `p`: the entries of every prefix of
    /// its slice and side that covers it, by priority (then session).
    fn set_of(&self, p: PrefixKey) -> Result<Option<MecSet>, PlaneError> {
        let (ss, len, addr) = p;
        let mut all: Vec<&Cand> =
            (0..=len).filter_map(|l| self.prefixes.get(&(ss, l, addr & mask(l)))).flatten().collect();
        if !self.prefixes.contains_key(&p) {
            return Ok(None);
        }
        if all.len() > MEC_SET_MAX {
            return Err(PlaneError::Other(format!(
                "more than {MEC_SET_MAX} rules cover {}/{len} in one slice",
                Ipv4Addr::from(addr)
            )));
        }
        all.sort_by_key(|c| (c.entry.priority, c.seid));
        let mut s = MecSet { count: all.len() as u32, ..Default::default() };
        for (i, c) in all.iter().enumerate() {
            s.rules[i] = c.entry;
        }
        Ok(Some(s))
    }

    /// Sets (or with None removes) the rule of session `seid`: refused
    /// before any write when a set would overflow or a table is full.
    pub fn set_rule<M: MecStore + ?Sized>(
        &mut self,
        maps: &mut M,
        seid: u64,
        r: Option<&MecRule>,
    ) -> Result<(), PlaneError> {
        // The slice: an existing id, or the lowest free one.
        let new = match r {
            None => None,
            Some(r) => {
                let sk = self.slice_key(r)?;
                let id = match self.slices.get(&sk) {
                    Some(id) => *id,
                    None => (0..MEC_MAX_SLICES)
                        .find(|i| !self.slices.values().any(|v| v == i))
                        .ok_or_else(|| PlaneError::Other(format!("more than {MEC_MAX_SLICES} slices")))?,
                };
                // The application's interface is a port of the slice too:
                // its answers arrive there (FLOW, and PACKET rules written
                // for them).
                let mut keys = vec![sk];
                if let RuleAction::ForwardDecapsulated(app) = &r.action {
                    let (ifindex, _) = self
                        .lookup(&app.interface)
                        .ok_or_else(|| PlaneError::Other(format!("no interface {}", app.interface)))?;
                    let ak = MecSliceKey { ifindex, vlan: 0, pad: 0 };
                    match self.slices.get(&ak) {
                        Some(other) if *other != id => {
                            return Err(PlaneError::Other(format!("{} serves another MEC slice", app.interface)))
                        }
                        _ if ak != sk => keys.push(ak),
                        _ => {}
                    }
                }
                Some((keys, id, r.clone(), self.entries(seid, r, id)?))
            }
        };
        let old = self.rules.remove(&seid);
        let mut touched_exact: Vec<MecExactKey> = Vec::new();
        let mut touched_prefix: Vec<PrefixKey> = Vec::new();
        let places = old.iter().flat_map(|(_, _, v)| v).chain(new.iter().flat_map(|n| &n.3));
        for (p, _) in places {
            match p {
                Place::Exact(k) => touched_exact.push(*k),
                Place::Prefix(k) => touched_prefix.push(*k),
            }
        }
        self.unindex(seid, old.as_ref().map(|o| &o.2[..]).unwrap_or(&[]));
        if let Some((_, _, _, e)) = &new {
            self.index(e);
        }
        // Every prefix at or under a touched one gets a new set.
        let mut sets: BTreeMap<PrefixKey, Option<MecSet>> = BTreeMap::new();
        let under = |t: &PrefixKey, p: &PrefixKey| p.0 == t.0 && p.1 >= t.1 && p.2 & mask(t.1) == t.2;
        let keys: Vec<PrefixKey> = self.prefixes.keys().copied().collect();
        let res = (|| {
            for t in &touched_prefix {
                sets.insert(*t, self.set_of(*t)?);
                for p in keys.iter().filter(|p| under(t, p)) {
                    sets.insert(*p, self.set_of(*p)?);
                }
            }
            if self.prefixes.len() > MEC_MAX_PREFIXES as usize || self.exact.len() > MEC_MAX_EXACT as usize {
                return Err(PlaneError::Other("the MEC rule tables are full".into()));
            }
            Ok(())
        })();
        if let Err(e) = res {
            // Back as it was.
            if let Some((_, _, _, e)) = &new {
                self.unindex(seid, e);
            }
            if let Some(o) = old {
                self.index(&o.2);
                self.rules.insert(seid, o);
            }
            return Err(e);
        }
        let map_err = |e: MapError| PlaneError::Other(e.to_string());
        if let Some((keys, id, _, _)) = &new {
            for sk in keys {
                if self.slices.insert(*sk, *id).is_none() {
                    maps.put_slice(*sk, self.slice_value(*id)).map_err(map_err)?;
                }
            }
        }
        for k in touched_exact {
            let best = self.exact.get(&k).and_then(|v| v.iter().min_by_key(|c| (c.entry.priority, c.seid)));
            match best {
                Some(c) => maps.put_exact(k, &c.entry).map_err(map_err)?,
                None => maps.del_exact(k).map_err(map_err)?,
            }
        }
        for ((ss, len, addr), s) in sets {
            let d = MecLpmData { slice_side: ss.to_be(), addr: addr.to_be() };
            match s {
                Some(s) => maps.put_prefix(32 + u32::from(len), d, &s).map_err(map_err)?,
                None => maps.del_prefix(32 + u32::from(len), d).map_err(map_err)?,
            }
        }
        // The slices whose prefix sets changed: their LPM bits after the
        // sets (a set written before its bit is merely not read yet).
        let mut ids: Vec<u32> = touched_prefix.iter().map(|(ss, _, _)| ss >> 1).collect();
        ids.dedup();
        for id in ids {
            let v = self.slice_value(id);
            for (sk, _) in self.slices.iter().filter(|(_, i)| **i == id) {
                maps.put_slice(*sk, v).map_err(map_err)?;
            }
        }
        if let Some((keys, _, r, e)) = new {
            for sk in &keys {
                *self.slice_rules.entry(*sk).or_default() += 1;
            }
            self.rules.insert(seid, (r, keys, e));
        }
        for sk in old.map(|(_, keys, _)| keys).unwrap_or_default() {
            let n = self.slice_rules.entry(sk).or_default();
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.slice_rules.remove(&sk);
                self.slices.remove(&sk);
                maps.del_slice(sk).map_err(map_err)?;
            }
        }
        Ok(())
    }

    /// The `mec_slices` value of slice `id`: with the LPM bit of each
    /// side that has prefix sets.
    fn slice_value(&self, id: u32) -> u32 {
        [SIDE_TUNNEL, SIDE_PLAIN].into_iter().fold(id, |v, side| {
            let ss = (id << 1) | side;
            let sets = self.prefixes.range((ss, 0, 0)..=(ss, u8::MAX, u32::MAX)).next().is_some();
            v | (u32::from(sets) << (MEC_SLICE_LPM + side))
        })
    }

    fn index(&mut self, e: &[(Place, Cand)]) {
        for (p, c) in e {
            match p {
                Place::Exact(k) => self.exact.entry(*k).or_default().push(*c),
                Place::Prefix(k) => self.prefixes.entry(*k).or_default().push(*c),
            }
        }
    }

    fn unindex(&mut self, seid: u64, e: &[(Place, Cand)]) {
        for (p, _) in e {
            match p {
                Place::Exact(k) => {
                    if let Some(v) = self.exact.get_mut(k) {
                        v.retain(|c| c.seid != seid);
                        if v.is_empty() {
                            self.exact.remove(k);
                        }
                    }
                }
                Place::Prefix(k) => {
                    if let Some(v) = self.prefixes.get_mut(k) {
                        v.retain(|c| c.seid != seid);
                        if v.is_empty() {
                            self.prefixes.remove(k);
                        }
                    }
                }
            }
        }
    }

    /// Sets (or with None removes) a UE's downlink tunnel.
    pub fn set_ue<M: MecStore + ?Sized>(
        &mut self,
        maps: &mut M,
        seid: u64,
        u: Option<&UeTunnel>,
    ) -> Result<(), PlaneError> {
        let map_err = |e: MapError| PlaneError::Other(e.to_string());
        if let Some(old) = self.ues.remove(&seid) {
            maps.del_ue(be_addr(old.ue)).map_err(map_err)?;
        }
        if let Some(u) = u {
            let v = MecUe { enb: be_addr(u.enb), teid: u.teid, origin: be_addr(u.origin) };
            maps.put_ue(be_addr(u.ue), &v).map_err(map_err)?;
            self.ues.insert(seid, *u);
        }
        Ok(())
    }

    /// Rules in place (sessions).
    pub fn rules(&self) -> usize {
        self.rules.len()
    }
}
