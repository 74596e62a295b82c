//! XDP fast path: C programs in `crates/upf/bpf/` (built by `build.rs`),
//! loaded with aya and programmed through a typed map layer (issue 3).
//!
//! - [`maps`]: `#[repr(C)]` mirrors of `bpf/maps.h` and the [`MapStore`]
//!   trait (aya-backed [`AyaMaps`], in-memory [`MemoryMaps`]).
//! - [`translate`]: SessionRules to map entries; SDF flow descriptions.
//! - [`loader`]: load / attach (native, generic fallback) / detach on drop;
//!   `BPF_PROG_RUN`.
//! - [`baseline`]: the minimal programs the benchmark compares against.
//!
//! Slow path contract: every packet the fast path cannot finish (unknown
//! TEID, GTP-U other than G-PDU, fragments, BUFF/NOCP, oversized after
//! encapsulation, no route) is returned with XDP_PASS to the kernel stack,
//! where the user-space slow path reads it (UDP socket on 2152 for GTP-U).

pub mod baseline;
pub mod loader;
pub mod maps;
pub mod translate;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_netns;

pub use loader::{ifindex, AttachMode, AyaMaps, LoadedProgram, MapSizes, XdpError};
pub use maps::{Counter, MapError, MapStore, MemoryMaps, NextHop, SdfFilter, UrrCounts};
pub use translate::{sdf_from_flow, PdrKey, RuleSlots, SdfTable};

use crate::rules::{ForwardingPlane, PlaneError, SessionRules};
use maps::{be_addr, UpfConfigEntry, CFG_F_NO_FIB};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use translate::Slots;

/// Probes whether an XDP program can be loaded here (root or CAP_BPF, a
/// kernel with XDP, our verifier-accepted object); Err with the reason, for
/// the automatic fallback to the user-space data path.
pub fn xdp_available() -> Result<(), String> {
    LoadedProgram::load(loader::UPF_OBJ, "upf_xdp", Some(MapSizes { tunnels: 4, fars: 4, qers: 4, urrs: 4 }))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Fast-path settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpConfig {
    /// Our S1-U address: uplink GTP-U is recognised by it, downlink outer
    /// headers carry it as source.
    pub s1u_addr: Ipv4Addr,
    /// Egress MTU: larger packets after encapsulation go to the slow path.
    pub mtu: u32,
    /// No `bpf_fib_lookup` on a next-hop cache miss (slow path instead).
    pub no_fib: bool,
    pub sizes: MapSizes,
}

impl XdpConfig {
    pub fn new(s1u_addr: Ipv4Addr) -> Self {
        XdpConfig { s1u_addr, mtu: 1500, no_fib: false, sizes: MapSizes::default() }
    }
}

#[derive(Debug, Default)]
struct Installed {
    slots: RuleSlots,
    keys: Vec<PdrKey>,
    /// The keys that have a PDR set behind their fast entry.
    sets: Vec<PdrKey>,
}

/// The XDP forwarding plane: a loaded `upf_xdp` program (absent with a mock
/// map store) and the session table that maps PFCP rules to map slots.
/// Dropping it detaches the program from every interface.
pub struct XdpPlane<M: MapStore = AyaMaps> {
    maps: M,
    /// What the `config` map holds.
    config: UpfConfigEntry,
    program: Option<LoadedProgram>,
    sessions: HashMap<u64, Installed>,
    owners: HashMap<PdrKey, u64>,
    far_slots: Slots,
    qer_slots: Slots,
    urr_slots: Slots,
    /// The next hops written from the neighbour tables (see `set_neighbours`).
    neighbours: HashMap<Ipv4Addr, NextHop>,
}

impl XdpPlane<AyaMaps> {
    /// Loads the fast path (not yet attached to any interface).
    pub fn load(cfg: XdpConfig) -> Result<Self, XdpError> {
        let mut prog = LoadedProgram::load(loader::UPF_OBJ, "upf_xdp", Some(cfg.sizes))?;
        let maps = AyaMaps::take(&mut prog)?;
        let mut plane = XdpPlane::with_maps(maps, cfg)?;
        plane.program = Some(prog);
        Ok(plane)
    }
}

impl<M: MapStore> XdpPlane<M> {
    /// A plane over any map store (for tests: [`MemoryMaps`]).
    pub fn with_maps(mut maps: M, cfg: XdpConfig) -> Result<Self, XdpError> {
        let flags = if cfg.no_fib { CFG_F_NO_FIB } else { 0 };
        let config = UpfConfigEntry { s1u_addr: be_addr(cfg.s1u_addr), mtu: cfg.mtu, flags, nexthop_gen: 0 };
        maps.set_config(&config)?;
        Ok(XdpPlane {
            maps,
            config,
            program: None,
            sessions: HashMap::new(),
            owners: HashMap::new(),
            far_slots: Slots::new(cfg.sizes.fars),
            qer_slots: Slots::new(cfg.sizes.qers),
            urr_slots: Slots::new(cfg.sizes.urrs),
            neighbours: HashMap::new(),
        })
    }

    pub fn maps(&self) -> &M {
        &self.maps
    }

    /// The loaded program (for `BPF_PROG_RUN`, e.g. a live-frames generator).
    pub fn program(&self) -> Option<&LoadedProgram> {
        self.program.as_ref()
    }

    /// Registers an AF_XDP socket for the buffered downlink packets of
    /// queue `queue` of `ifindex` ([`LoadedProgram::register_xsk`]); a
    /// plane without a loaded program ignores it.
    pub fn register_xsk(&mut self, ifindex: u32, queue: u32, fd: std::os::fd::BorrowedFd<'_>) -> Result<(), XdpError> {
        match self.program.as_mut() {
            Some(p) => Ok(p.register_xsk(ifindex, queue, fd)?),
            None => Ok(()),
        }
    }

    /// Buffered downlink packets go up the stack (XDP_PASS) again; the
    /// sockets stay open ([`LoadedProgram::suspend_xsks`]).
    pub fn suspend_xsks(&mut self) -> Result<(), XdpError> {
        match self.program.as_mut() {
            Some(p) => Ok(p.suspend_xsks()?),
            None => Ok(()),
        }
    }

    /// Attaches the fast path to an interface (native mode, or generic).
    pub fn attach(&mut self, iface: &str, mode: AttachMode) -> Result<(), XdpError> {
        let idx = ifindex(iface)?;
        self.maps.add_port(idx)?;
        match self.program.as_mut() {
            Some(p) => p.attach(iface, mode),
            None => Ok(()),
        }
    }

    /// Adds an interface as a redirect target without attaching to it
    /// (its veth peer then needs an XDP program: [`baseline::load_pass`]).
    pub fn add_egress(&mut self, ifindex: u32) -> Result<(), XdpError> {
        Ok(self.maps.add_port(ifindex)?)
    }

    /// Next-hop cache entry for a destination (kept current by the control
    /// side). Call it from a thread inside the data path's namespace: the
    /// DEVMAP resolves `nh.ifindex` in the caller's namespace.
    pub fn set_next_hop(&mut self, dst: Ipv4Addr, nh: NextHop) -> Result<(), XdpError> {
        self.maps.add_port(nh.ifindex)?;
        self.maps.put_nexthop(be_addr(dst), &nh)?;
        self.next_hops_changed()
    }

    pub fn remove_next_hop(&mut self, dst: Ipv4Addr) -> Result<(), XdpError> {
        self.maps.del_nexthop(be_addr(dst))?;
        self.next_hops_changed()
    }

    /// Invalidates the program's per-CPU next-hop memo (after the
    /// `nexthops` map changed, so a memo refill sees the new entry).
    fn next_hops_changed(&mut self) -> Result<(), XdpError> {
        self.config.nexthop_gen = self.config.nexthop_gen.wrapping_add(1);
        Ok(self.maps.set_config(&self.config)?)
    }

    /// All counters, summed over CPUs.
    pub fn counters(&self) -> Result<Vec<(Counter, u64)>, XdpError> {
        Counter::ALL.iter().map(|c| Ok((*c, self.maps.counter(*c)?))).collect()
    }

    pub fn counter(&self, c: Counter) -> Result<u64, XdpError> {
        Ok(self.maps.counter(c)?)
    }

    /// Volume measured for a session's URR (both directions, all CPUs).
    pub fn urr_usage(&self, up_seid: u64, urr_id: u32) -> Option<UrrCounts> {
        let idx = *self.sessions.get(&up_seid)?.slots.urr.get(&urr_id)?;
        self.maps.urr(idx).ok()
    }

    /// Installs or replaces a session with explicit SDF filters per PDR
    /// (oriented as the packet travels; see [`translate::SdfTable`]).
    pub fn apply(&mut self, up_seid: u64, rules: &SessionRules, sdf: &SdfTable) -> Result<(), PlaneError> {
        let existed = self.sessions.contains_key(&up_seid);
        let old = self.sessions.remove(&up_seid).unwrap_or_default();
        let other = |m: &Self, k: &PdrKey| m.owners.get(k).is_some_and(|s| *s != up_seid);
        // Slots: keep the slot of a rule id that stays (URR counters and
        // QER state carry over), allocate new ones, free the rest later.
        let mut slots = RuleSlots::default();
        let mut fail = None;
        for (ids, old_m, new_m, pool) in [
            (rules.fars.keys().copied().collect::<Vec<_>>(), &old.slots.far, &mut slots.far, &mut self.far_slots),
            (rules.qers.keys().copied().collect(), &old.slots.qer, &mut slots.qer, &mut self.qer_slots),
            (rules.urrs.keys().copied().collect(), &old.slots.urr, &mut slots.urr, &mut self.urr_slots),
        ] {
            for id in ids {
                match old_m.get(&id).copied().or_else(|| pool.alloc()) {
                    Some(i) => {
                        new_m.insert(id, i);
                    }
                    None => fail = Some("fast-path rule table full"),
                }
            }
        }
        let sets = match (fail, translate::pdr_sets(rules, &slots, sdf)) {
            (None, Ok(s)) if !s.iter().any(|(k, _)| other(self, k)) => s,
            (f, r) => {
                self.release_new(&old.slots, &slots);
                if existed {
                    self.sessions.insert(up_seid, old);
                }
                return Err(PlaneError::Other(match (f, r) {
                    (Some(f), _) => f.to_string(),
                    (_, Err(e)) => e,
                    _ => "a TEID or UE address of this session belongs to another session".into(),
                }));
            }
        };
        let fars: HashMap<u32, FarEntry> = rules.fars.iter().map(|(id, f)| (slots.far[id], translate::far_entry(f))).collect();
        let split: Vec<_> = sets.iter().map(|(k, s)| (*k, translate::fast_split(s, &fars))).collect();
        let res = self.write(rules, &slots, &old, &fars, &split);
        let keys: Vec<PdrKey> = sets.iter().map(|(k, _)| *k).collect();
        let with_set: Vec<PdrKey> = split.iter().filter(|(_, (_, s))| s.is_some()).map(|(k, _)| *k).collect();
        for k in &keys {
            self.owners.insert(*k, up_seid);
        }
        for k in old.keys.iter().filter(|k| !keys.contains(k)) {
            self.owners.remove(k);
        }
        self.release_new(&slots, &old.slots);
        self.sessions.insert(up_seid, Installed { slots, keys, sets: with_set });
        res.map_err(|e| PlaneError::Other(e.to_string()))
    }

    /// Frees the slots of `a` that `b` does not use.
    fn release_new(&mut self, b: &RuleSlots, a: &RuleSlots) {
        for (am, bm, pool) in [(&a.far, &b.far, &mut self.far_slots), (&a.qer, &b.qer, &mut self.qer_slots), (&a.urr, &b.urr, &mut self.urr_slots)] {
            for (id, i) in am {
                if bm.get(id) != Some(i) {
                    pool.release(*i);
                }
            }
        }
    }

    fn write(
        &mut self,
        rules: &SessionRules,
        slots: &RuleSlots,
        old: &Installed,
        fars: &HashMap<u32, FarEntry>,
        split: &[(PdrKey, (FastEntry, Option<PdrSet>))],
    ) -> Result<(), MapError> {
        // Targets first, then the PDRs that point at them, then stale keys.
        for (i, f) in fars {
            self.maps.put_far(*i, f)?;
        }
        for (id, q) in &rules.qers {
            self.maps.put_qer(slots.qer[id], &translate::qer_entry(q))?;
        }
        for (id, i) in &slots.urr {
            if old.slots.urr.get(id) != Some(i) {
                self.maps.reset_urr(*i)?;
            }
        }
        // A set is written before the fast entry that sends packets to it,
        // and removed after the fast entry that no longer does.
        for (k, (fast, set)) in split {
            if let Some(s) = set {
                match k {
                    PdrKey::Teid(t) => self.maps.put_pdr_ul(*t, s)?,
                    PdrKey::UeAddr(a) => self.maps.put_pdr_dl(be_addr(*a), s)?,
                }
            }
            match k {
                PdrKey::Teid(t) => self.maps.put_fast_ul(*t, fast)?,
                PdrKey::UeAddr(a) => self.maps.put_fast_dl(be_addr(*a), fast)?,
            }
            if set.is_none() && old.sets.contains(k) {
                self.del_set(k)?;
            }
        }
        for k in old.keys.iter().filter(|k| !split.iter().any(|(n, _)| n == *k)) {
            self.del_key(k, old.sets.contains(k))?;
        }
        Ok(())
    }

    fn del_set(&mut self, k: &PdrKey) -> Result<(), MapError> {
        match k {
            PdrKey::Teid(t) => self.maps.del_pdr_ul(*t),
            PdrKey::UeAddr(a) => self.maps.del_pdr_dl(be_addr(*a)),
        }
    }

    /// Removes a key's fast entry, then its set if it has one.
    fn del_key(&mut self, k: &PdrKey, has_set: bool) -> Result<(), MapError> {
        match k {
            PdrKey::Teid(t) => self.maps.del_fast_ul(*t)?,
            PdrKey::UeAddr(a) => self.maps.del_fast_dl(be_addr(*a))?,
        }
        if has_set {
            self.del_set(k)?;
        }
        Ok(())
    }

    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }
}

use maps::{FarEntry, FastEntry, PdrSet};

impl<M: MapStore> ForwardingPlane for XdpPlane<M> {
    /// Keeps the `nexthops` cache equal to the resolved neighbours:
    /// added or changed entries are written, vanished ones removed; a
    /// destination that is not a neighbour falls back to bpf_fib_lookup.
    fn set_neighbours(&mut self, neighbours: &[crate::rules::Neighbour]) {
        let want: HashMap<Ipv4Addr, NextHop> = neighbours
            .iter()
            .map(|n| (n.addr, NextHop { ifindex: n.ifindex, dmac: n.mac, smac: n.local_mac }))
            .collect();
        let gone: Vec<Ipv4Addr> = self.neighbours.keys().filter(|a| !want.contains_key(a)).copied().collect();
        for a in gone {
            if self.remove_next_hop(a).is_ok() {
                self.neighbours.remove(&a);
            }
        }
        for (a, nh) in want {
            // Not set_next_hop: its DEVMAP insert would resolve the ifindex
            // in the namespace of the calling thread (the PFCP task's, not
            // the data path's). The attached interfaces are in the DEVMAP
            // already, and only their neighbours are given here.
            if self.neighbours.get(&a) == Some(&nh) {
                continue;
            }
            if self.maps.put_nexthop(be_addr(a), &nh).is_ok() && self.next_hops_changed().is_ok() {
                self.neighbours.insert(a, nh);
            }
        }
    }

    fn install(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        if self.sessions.contains_key(&up_seid) {
            return Err(PlaneError::Exists(up_seid));
        }
        self.apply(up_seid, rules, &SdfTable::new())
    }
    fn update(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        if !self.sessions.contains_key(&up_seid) {
            return Err(PlaneError::NotFound(up_seid));
        }
        self.apply(up_seid, rules, &SdfTable::new())
    }
    fn remove(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        let s = self.sessions.remove(&up_seid).ok_or(PlaneError::NotFound(up_seid))?;
        let mut err = None;
        for k in &s.keys {
            self.owners.remove(k);
            if let Err(e) = self.del_key(k, s.sets.contains(k)) {
                err = Some(e);
            }
        }
        self.release_new(&RuleSlots::default(), &s.slots);
        err.map_or(Ok(()), |e| Err(PlaneError::Other(e.to_string())))
    }
}

impl<M: MapStore> Drop for XdpPlane<M> {
    fn drop(&mut self) {
        if let Some(p) = self.program.as_mut() {
            p.detach_all();
        }
    }
}
