//! XDP fast path: C programs in `crates/upf/bpf/` (built by `build.rs`),
//! loaded with aya and programmed through a typed map layer (issue 3).
//!
//! - [`maps`]: `#[repr(C)]` mirrors of `bpf/maps.h` and the [`MapStore`]
//!   trait (aya-backed [`AyaMaps`], in-memory [`MemoryMaps`]).
//! - [`translate`]: SessionRules to map entries; SDF flow descriptions.
//! - [`loader`]: load / attach (native, generic fallback) / detach on drop;
//!   `BPF_PROG_RUN`.
//! - [`baseline`]: the minimal programs the benchmark compares against.
//! - [`slots`]: array slot allocation with a grace period; [`index`]: the
//!   session lookup (references and entry pool in one array of cache
//!   lines, each reference beside its key's home slot; overflow positions;
//!   entries an update moved away go home after the grace period,
//!   [`XdpPlane::rehome`]).
//!
//! Updates are copy-on-write, so a program running on another CPU never
//! reads an entry half old, half new: a FAR, QER, URR list, PDR set or
//! fast entry whose content changes gets a fresh array slot, written before
//! the reference to it (a PDR rule's `far_idx`, a fast entry's `set_idx` /
//! `qer_idx` / `urr_idx`, a `fast_*_lines` reference) is switched
//! atomically; the replaced slot is reused only after [`slots::GRACE`]
//! (100 ms, measured with the `Instant`s passed to [`XdpPlane::apply_at`] /
//! [`XdpPlane::remove_at`]; XDP programs run in one RCU read-side section
//! of microseconds). No session data lives in a hash map any more: the only
//! hashes on the packet path (`fast_ul` / `fast_dl`, keys whose direct
//! reference position is taken) hold a position written once per key and
//! checked through the entry's key ([`index`]), so the kernel recycling a
//! hash element under a reader cannot show it a torn or foreign entry. An
//! unchanged rule keeps its slot and is not rewritten (URR counters and QER
//! token buckets carry over). An update that would not find its slots (any
//! table, including the fast-entry pools and overflow positions) is refused
//! before anything is written, the installed rules staying; a failed map
//! write leaks the slots involved rather than risk a reuse while
//! referenced.
//!
//! Slow path contract: every packet the fast path cannot finish (unknown
//! TEID, GTP-U other than G-PDU, fragments, BUFF/NOCP, DUPL, oversized
//! after encapsulation, no route) is returned with XDP_PASS to the kernel
//! stack, where the user-space slow path reads it (UDP socket on 2152 for
//! GTP-U); so are the packets of a PDR with more than four URRs.
//! Exception: downlink BUFF/NOCP packets go to the AF_XDP socket of their
//! receive queue when one is registered ([`XdpPlane::register_xsk`],
//! `crate::afxdp`), else XDP_PASS too.
//!
//! URRs: a PDR's packets are counted into every URR of the PDR. One URR
//! is a `urrs` slot in the fast entry / PDR rule; 2 to 4 (e.g. one for the
//! session and one per rating group) are a `urr_lists` slot naming them
//! (copy-on-write like a FAR slot, shared by the PDRs of a session with the
//! same URRs); a PDR with more sends its packets to the slow path, counted
//! as `xdp_pass_many_urrs` (bpf/maps.h "Several URRs on one PDR").
//! [`XdpPlane::urr_usage`] reads one URR's slot whatever list it is in.
//!
//! MTU: a downlink packet that would exceed the egress MTU after
//! encapsulation goes to the slow path. The MTU is the smallest of the
//! interfaces the plane is attached to or redirects to (read from the
//! kernel when they are added, and again on every neighbour refresh, about
//! once a second), capped by [`XdpConfig::mtu`] when that is not 0.

pub mod baseline;
pub mod index;
pub mod loader;
pub mod maps;
pub mod mec;
mod mtu;
pub mod order;
pub mod slots;
mod steer;
pub mod translate;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cow;
#[cfg(test)]
mod tests_mec;
#[cfg(test)]
mod tests_netns;
#[cfg(test)]
mod tests_steer;
#[cfg(test)]
mod tests_urr;
#[cfg(test)]
mod tests_usage;

pub use loader::{ifindex, AttachMode, AyaMaps, LoadedProgram, MapSizes, XdpError};
pub use maps::{Counter, MapError, MapStore, MemoryMaps, NextHop, SdfFilter, UrrCounts};
pub use translate::{sdf_from_flow, PdrKey, RuleSlots, SdfTable};

use crate::rules::{ForwardingPlane, PlaneError, SessionRules};
use index::FastIndex;
use maps::{be_addr, Dir, UpfConfigEntry, CFG_F_NO_FIB};
use slots::{Slots, SlotsFull};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Instant;

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
    /// Cap on the egress MTU (0 = none): a packet larger after
    /// encapsulation than this or the MTU of any interface the plane uses
    /// goes to the slow path.
    pub mtu: u32,
    /// No `bpf_fib_lookup` on a next-hop cache miss (slow path instead).
    pub no_fib: bool,
    pub sizes: MapSizes,
}

impl XdpConfig {
    pub fn new(s1u_addr: Ipv4Addr) -> Self {
        XdpConfig { s1u_addr, mtu: 0, no_fib: false, sizes: MapSizes::default() }
    }
}

/// MTU when neither a cap nor an interface is known.
const DEFAULT_MTU: u32 = 1500;

#[derive(Debug, Default)]
struct Installed {
    slots: RuleSlots,
    /// What the FAR and QER slots hold, per rule id (an unchanged rule
    /// keeps its slot).
    fars: HashMap<u32, FarEntry>,
    qers: HashMap<u32, QerEntry>,
    keys: Vec<PdrKey>,
    /// The PDR set (content, `pdr_sets` slot) behind each key that has one.
    sets: HashMap<PdrKey, (PdrSet, u32)>,
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
    /// `urr_lists` slots (PDRs with several URRs).
    list_slots: Slots,
    /// `pdr_sets` slots (both directions).
    set_slots: Slots,
    ul_index: FastIndex,
    dl_index: FastIndex,
    /// The interfaces whose MTU bounds `config.mtu`, and the cap.
    mtu: mtu::MtuWatch,
    /// The next hops written from the neighbour tables (see `set_neighbours`).
    neighbours: HashMap<Ipv4Addr, NextHop>,
    /// Steering role: the diversions (None: the anchor role, which
    /// refuses them).
    steer: Option<steer::SteerTable>,
    /// MEC router role: the rules and UE tunnels and their maps (None:
    /// another role, which refuses them).
    mec: Option<(mec::MecTable, Box<dyn mec::MecStore>)>,
}

impl XdpPlane<AyaMaps> {
    /// Loads the fast path (not yet attached to any interface).
    pub fn load(cfg: XdpConfig) -> Result<Self, XdpError> {
        Self::load_role(cfg, None)
    }

    /// Loads the fast path of a role: the anchor's `upf_xdp` (`steering`
    /// None), or the steering role's `steer_xdp` (bpf/steer.h) with room
    /// for `steering` diversions. One object, two programs on the same
    /// maps: the anchor's program is the same either way.
    pub fn load_role(cfg: XdpConfig, steering: Option<u32>) -> Result<Self, XdpError> {
        let name = if steering.is_some() { "steer_xdp" } else { "upf_xdp" };
        let mut prog = LoadedProgram::load_with(loader::UPF_OBJ, name, Some(cfg.sizes), steering)?;
        let maps = AyaMaps::take(&mut prog)?;
        let mut plane = XdpPlane::with_maps(maps, cfg)?;
        plane.program = Some(prog);
        if steering.is_some() {
            plane.steer = Some(steer::SteerTable::default());
        }
        Ok(plane)
    }
}

impl XdpPlane<AyaMaps> {
    /// Loads the MEC router role's `mec_xdp` (bpf/mec.h), on the same
    /// maps as the other roles' programs, with its own rule maps.
    pub fn load_mec(cfg: XdpConfig) -> Result<Self, XdpError> {
        let mut prog = LoadedProgram::load_with(loader::UPF_OBJ, "mec_xdp", Some(cfg.sizes), None)?;
        let maps = AyaMaps::take(&mut prog)?;
        let mec_maps = mec::AyaMecMaps::take(&mut prog)?;
        let mut plane = XdpPlane::with_maps(maps, cfg)?;
        plane.program = Some(prog);
        plane.mec = Some((mec::MecTable::new(mec::kernel_resolver()), Box::new(mec_maps)));
        Ok(plane)
    }
}

impl<M: MapStore> XdpPlane<M> {
    /// The MEC role on given rule maps and interface names (tests).
    pub fn enable_mec(&mut self, table: mec::MecTable, maps: Box<dyn mec::MecStore>) {
        self.mec = Some((table, maps));
    }

    /// A plane over any map store (for tests: [`MemoryMaps`]).
    pub fn with_maps(mut maps: M, cfg: XdpConfig) -> Result<Self, XdpError> {
        let flags = if cfg.no_fib { CFG_F_NO_FIB } else { 0 };
        let mtu = mtu::MtuWatch::new(cfg.mtu);
        let config = UpfConfigEntry {
            s1u_addr: be_addr(cfg.s1u_addr),
            mtu: mtu.effective().unwrap_or(DEFAULT_MTU),
            flags,
            memo_gen: 0,
        };
        maps.set_config(&config)?;
        Ok(XdpPlane {
            maps,
            config,
            program: None,
            sessions: HashMap::new(),
            owners: HashMap::new(),
            far_slots: Slots::new("FAR", cfg.sizes.fars),
            qer_slots: Slots::new("QER", cfg.sizes.qers),
            urr_slots: Slots::new("URR", cfg.sizes.urrs),
            list_slots: Slots::new("URR list", maps::MAX_URR_LISTS),
            set_slots: Slots::new("PDR set", maps::MAX_PDR_SETS),
            ul_index: FastIndex::new(Dir::Ul, cfg.sizes.overflow()),
            dl_index: FastIndex::new(Dir::Dl, cfg.sizes.overflow()),
            mtu,
            neighbours: HashMap::new(),
            steer: None,
            mec: None,
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

    /// The program's counts of downlink packets in the AF_XDP slow path
    /// ([`order::SlowOrder`]), mapped; taken once (None after that, or
    /// without a loaded program).
    pub fn take_slow_order(&mut self) -> Option<Result<order::SlowOrder, XdpError>> {
        let p = self.program.as_mut()?;
        Some(p.take_map("slow_order").and_then(order::SlowOrder::new).map_err(XdpError::from))
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
        self.add_port(idx)?;
        if let Some(p) = self.program.as_mut() {
            p.attach(iface, mode)?;
        }
        if let Some((t, _)) = self.mec.as_mut() {
            t.learn(iface, idx);
        }
        self.mtu.watch(idx);
        self.refresh_mtu()
    }

    /// A redirect target (`tx_ports`; in the MEC role also `mec_dup`).
    fn add_port(&mut self, ifindex: u32) -> Result<(), XdpError> {
        self.maps.add_port(ifindex)?;
        if let Some((_, m)) = self.mec.as_mut() {
            m.add_dup_port(ifindex)?;
        }
        Ok(())
    }

    /// Detaches the program from every interface; the maps and sessions
    /// stay, and [`XdpPlane::attach`] puts it back.
    pub fn detach_all(&mut self) {
        if let Some(p) = self.program.as_mut() {
            p.detach_all();
        }
    }

    /// Adds an interface as a redirect target without attaching to it
    /// (its veth peer then needs an XDP program: [`baseline::load_pass`]).
    /// Call it from a thread inside the data path's namespace.
    pub fn add_egress(&mut self, ifindex: u32) -> Result<(), XdpError> {
        self.add_port(ifindex)?;
        self.mtu.watch(ifindex);
        self.refresh_mtu()
    }

    /// Re-reads the MTU of the interfaces in use (in the namespace they
    /// were added from, whatever the calling thread's) and programs the
    /// smallest, capped by [`XdpConfig::mtu`].
    pub fn refresh_mtu(&mut self) -> Result<(), XdpError> {
        let mtu = self.mtu.effective().unwrap_or(DEFAULT_MTU);
        if mtu != self.config.mtu {
            self.config.mtu = mtu;
            self.maps.set_config(&self.config)?;
        }
        Ok(())
    }

    /// The egress MTU the program checks encapsulated packets against.
    pub fn mtu(&self) -> u32 {
        self.config.mtu
    }

    /// Next-hop cache entry for a destination (kept current by the control
    /// side). Call it from a thread inside the data path's namespace: the
    /// DEVMAP resolves `nh.ifindex` in the caller's namespace.
    pub fn set_next_hop(&mut self, dst: Ipv4Addr, nh: NextHop) -> Result<(), XdpError> {
        self.add_port(nh.ifindex)?;
        self.maps.put_nexthop(be_addr(dst), &nh)?;
        self.mtu.watch(nh.ifindex);
        self.refresh_mtu()?;
        self.memos_changed()
    }

    pub fn remove_next_hop(&mut self, dst: Ipv4Addr) -> Result<(), XdpError> {
        self.maps.del_nexthop(be_addr(dst))?;
        self.memos_changed()
    }

    /// Invalidates the program's per-CPU memos (after `nexthops` or a MEC
    /// table changed, so a memo refill sees the new entry).
    fn memos_changed(&mut self) -> Result<(), XdpError> {
        self.config.memo_gen = self.config.memo_gen.wrapping_add(1);
        Ok(self.maps.set_config(&self.config)?)
    }

    /// After the MEC tables were written (`set`, their outcome): the
    /// program's per-CPU memos of them are invalidated (bpf/maps.h
    /// `mec_memo`), so the next packet of a flow sees the change.
    fn mec_changed(&mut self, set: Result<(), PlaneError>) -> Result<(), PlaneError> {
        let bumped = self.memos_changed().map_err(|e| PlaneError::Other(e.to_string()));
        set.and(bumped)
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
        self.apply_at(up_seid, rules, sdf, Instant::now())
    }

    /// [`XdpPlane::apply`] at time `now` (slots released now are reused
    /// only [`slots::GRACE`] later).
    pub fn apply_at(
        &mut self,
        up_seid: u64,
        rules: &SessionRules,
        sdf: &SdfTable,
        now: Instant,
    ) -> Result<(), PlaneError> {
        // Entries waiting for their home slots take them before this
        // update's allocations could.
        if self.rehome_due().is_some_and(|t| t <= now) {
            let _ = self.rehome(now);
        }
        let existed = self.sessions.contains_key(&up_seid);
        let old = self.sessions.remove(&up_seid).unwrap_or_default();
        let other = |m: &Self, k: &PdrKey| m.owners.get(k).is_some_and(|s| *s != up_seid);
        let far_vals: HashMap<u32, FarEntry> =
            rules.fars.iter().map(|(id, f)| (*id, translate::far_entry(f))).collect();
        let qer_vals: HashMap<u32, QerEntry> =
            rules.qers.iter().map(|(id, q)| (*id, translate::qer_entry(q))).collect();
        // Slots: a rule that stays unchanged keeps its slot (URR counters
        // always, a QER's token bucket while its parameters stay); a new
        // or changed rule gets a fresh slot (copy on write).
        let mut slots = RuleSlots::default();
        let mut fresh = RuleSlots::default();
        let res = (|| -> Result<(), SlotsFull> {
            for (id, v) in &far_vals {
                let keep = old.slots.far.get(id).filter(|_| old.fars.get(id) == Some(v));
                assign(&mut self.far_slots, *id, keep, &mut slots.far, &mut fresh.far, now)?;
            }
            for (id, v) in &qer_vals {
                let keep = old.slots.qer.get(id).filter(|_| old.qers.get(id) == Some(v));
                assign(&mut self.qer_slots, *id, keep, &mut slots.qer, &mut fresh.qer, now)?;
            }
            for id in rules.urrs.keys() {
                assign(&mut self.urr_slots, *id, old.slots.urr.get(id), &mut slots.urr, &mut fresh.urr, now)?;
            }
            // PDRs with several URRs: a list slot per distinct list,
            // kept while the list stays (its URRs keep their slots).
            for p in rules.pdrs.values() {
                let l = translate::urr_slot_list(&slots, &p.urr_ids);
                if (2..=URR_LIST_MAX).contains(&l.len()) && !slots.urr_lists.contains_key(&l) {
                    let keep = old.slots.urr_lists.get(&l).copied();
                    assign(&mut self.list_slots, l, keep.as_ref(), &mut slots.urr_lists, &mut fresh.urr_lists, now)?;
                }
            }
            Ok(())
        })();
        let sets = match (res, translate::pdr_sets(rules, &slots, sdf)) {
            (Ok(()), Ok(s)) if !s.iter().any(|(k, _)| other(self, k)) => s,
            (f, r) => {
                let msg = match (f, r) {
                    (Err(f), _) => f.to_string(),
                    (_, Err(e)) => e,
                    _ => "a TEID or UE address of this session belongs to another session".into(),
                };
                return Err(self.refuse(up_seid, existed, old, &fresh, &[], msg));
            }
        };
        let fars: HashMap<u32, FarEntry> = far_vals.iter().map(|(id, f)| (slots.far[id], *f)).collect();
        // PDR sets: an unchanged set keeps its pdr_sets slot, a new or
        // changed one gets a fresh slot, named by the key's fast entry.
        let mut split: Vec<(PdrKey, FastEntry)> = Vec::new();
        let mut new_sets: HashMap<PdrKey, (PdrSet, u32)> = HashMap::new();
        let mut fresh_sets: Vec<(u32, PdrSet)> = Vec::new();
        for (k, set) in &sets {
            let (mut fast, set) = translate::fast_split(set, &fars);
            if let Some(set) = set {
                let slot = match old.sets.get(k).filter(|(s, _)| *s == set) {
                    Some((_, i)) => *i,
                    None => match self.set_slots.alloc(now) {
                        Ok(i) => {
                            fresh_sets.push((i, set));
                            i
                        }
                        Err(f) => return Err(self.refuse(up_seid, existed, old, &fresh, &fresh_sets, f.to_string())),
                    },
                };
                fast.teid = slot; // set_idx
                new_sets.insert(*k, (set, slot));
            }
            split.push((*k, fast));
        }
        let ul = split.iter().filter_map(|(k, e)| if let PdrKey::Teid(t) = k { Some((*t, e)) } else { None });
        let dl =
            split.iter().filter_map(|(k, e)| if let PdrKey::UeAddr(a) = k { Some((be_addr(*a), e)) } else { None });
        if let Err(f) = self.ul_index.check(ul, now).and_then(|()| self.dl_index.check(dl, now)) {
            return Err(self.refuse(up_seid, existed, old, &fresh, &fresh_sets, f.to_string()));
        }
        let res = self.write(&fresh, &qer_vals, &fars, &fresh_sets, &split, &old.keys, now);
        let keys: Vec<PdrKey> = sets.iter().map(|(k, _)| *k).collect();
        for k in &keys {
            self.owners.insert(*k, up_seid);
        }
        for k in old.keys.iter().filter(|k| !keys.contains(k)) {
            self.owners.remove(k);
        }
        if res.is_ok() {
            self.release_unused(&slots, &old.slots, now);
            for (k, (_, i)) in &old.sets {
                if new_sets.get(k).map(|(_, n)| n) != Some(i) {
                    self.set_slots.release(*i, now);
                }
            }
        } else {
            tracing::warn!(up_seid, "XDP map write failed: the session's replaced slots are not reused");
        }
        let qers = rules.qers.keys().map(|id| (*id, qer_vals[id])).collect();
        self.sessions.insert(up_seid, Installed { slots, fars: far_vals, qers, keys, sets: new_sets });
        res.map_err(|e| PlaneError::Other(e.to_string()))
    }

    /// Refuses an update before anything was written: the fresh slots go
    /// back at once and the installed session stays as it was.
    fn refuse(
        &mut self,
        up_seid: u64,
        existed: bool,
        old: Installed,
        fresh: &RuleSlots,
        fresh_sets: &[(u32, PdrSet)],
        msg: String,
    ) -> PlaneError {
        self.cancel(fresh);
        for (i, _) in fresh_sets {
            self.set_slots.cancel(*i);
        }
        if existed {
            self.sessions.insert(up_seid, old);
        }
        PlaneError::Other(msg)
    }

    /// Returns never-written slots.
    fn cancel(&mut self, fresh: &RuleSlots) {
        for (m, pool) in
            [(&fresh.far, &mut self.far_slots), (&fresh.qer, &mut self.qer_slots), (&fresh.urr, &mut self.urr_slots)]
        {
            for i in m.values() {
                pool.cancel(*i);
            }
        }
        for i in fresh.urr_lists.values() {
            self.list_slots.cancel(*i);
        }
    }

    /// Releases (into the quarantine) the slots of `old` that `new` does
    /// not use.
    fn release_unused(&mut self, new: &RuleSlots, old: &RuleSlots, now: Instant) {
        for (om, nm, pool) in [
            (&old.far, &new.far, &mut self.far_slots),
            (&old.qer, &new.qer, &mut self.qer_slots),
            (&old.urr, &new.urr, &mut self.urr_slots),
        ] {
            for (id, i) in om {
                if nm.get(id) != Some(i) {
                    pool.release(*i, now);
                }
            }
        }
        for (l, i) in &old.urr_lists {
            if new.urr_lists.get(l) != Some(i) {
                self.list_slots.release(*i, now);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        fresh: &RuleSlots,
        qers: &HashMap<u32, QerEntry>,
        fars: &HashMap<u32, FarEntry>,
        fresh_sets: &[(u32, PdrSet)],
        split: &[(PdrKey, FastEntry)],
        old_keys: &[PdrKey],
        now: Instant,
    ) -> Result<(), MapError> {
        // Targets first (fresh slots only: a published slot is never
        // rewritten), then the fast entries that point at them (each a
        // fresh pool slot behind a reference switch), then stale keys.
        for i in fresh.far.values() {
            self.maps.put_far(*i, &fars[i])?;
        }
        for (id, i) in &fresh.qer {
            self.maps.put_qer(*i, &qers[id])?;
        }
        for i in fresh.urr.values() {
            self.maps.reset_urr(*i)?;
        }
        for (l, i) in &fresh.urr_lists {
            self.maps.put_urr_list(*i, &UrrList::new(l))?;
        }
        for (i, s) in fresh_sets {
            self.maps.put_pdr_set(*i, s)?;
        }
        for (k, fast) in split {
            match k {
                PdrKey::Teid(t) => self.ul_index.put(&mut self.maps, *t, fast, now)?,
                PdrKey::UeAddr(a) => self.dl_index.put(&mut self.maps, be_addr(*a), fast, now)?,
            }
        }
        for k in old_keys.iter().filter(|k| !split.iter().any(|(n, _)| n == *k)) {
            self.del_key(k, now)?;
        }
        Ok(())
    }

    /// Unpublishes a key's fast entry.
    fn del_key(&mut self, k: &PdrKey, now: Instant) -> Result<(), MapError> {
        match k {
            PdrKey::Teid(t) => self.ul_index.del(&mut self.maps, *t, now),
            PdrKey::UeAddr(a) => self.dl_index.del(&mut self.maps, be_addr(*a), now),
        }
    }

    /// Removes a session at time `now` (its slots are reused only
    /// [`slots::GRACE`] later).
    pub fn remove_at(&mut self, up_seid: u64, now: Instant) -> Result<(), PlaneError> {
        let s = self.sessions.remove(&up_seid).ok_or(PlaneError::NotFound(up_seid))?;
        let mut err = None;
        for k in &s.keys {
            self.owners.remove(k);
            if let Err(e) = self.del_key(k, now) {
                err = Some(e);
            }
        }
        match err {
            None => {
                self.release_unused(&RuleSlots::default(), &s.slots, now);
                for (_, i) in s.sets.values() {
                    self.set_slots.release(*i, now);
                }
                Ok(())
            }
            Some(e) => {
                tracing::warn!(up_seid, "XDP map delete failed: the session's slots are not reused");
                Err(PlaneError::Other(e.to_string()))
            }
        }
    }

    /// Moves fast entries that an update left away from their home slot
    /// back into it where the home slot's grace period is over (see
    /// [`index`]); returns how many moved.
    pub fn rehome(&mut self, now: Instant) -> Result<usize, MapError> {
        let ul = self.ul_index.rehome(&mut self.maps, now, index::REHOME_BUDGET)?;
        Ok(ul + self.dl_index.rehome(&mut self.maps, now, index::REHOME_BUDGET)?)
    }

    /// When [`XdpPlane::rehome`] has entries to move.
    pub fn rehome_due(&self) -> Option<Instant> {
        [self.ul_index.rehome_due(), self.dl_index.rehome_due()].into_iter().flatten().min()
    }

    /// Fast entries away from their home slot, both directions.
    pub fn away_from_home(&self) -> usize {
        self.ul_index.away() + self.dl_index.away()
    }

    /// The fast-path tables' slot pools (for tests and diagnostics):
    /// FAR, QER, URR, uplink and downlink fast entries, URR lists, PDR sets.
    pub fn slot_pools(&self) -> [&Slots; 7] {
        [
            &self.far_slots,
            &self.qer_slots,
            &self.urr_slots,
            self.ul_index.pool(),
            self.dl_index.pool(),
            &self.list_slots,
            &self.set_slots,
        ]
    }

    /// Test hooks: smaller fast-entry pools (to see slots reused), and the
    /// program moved out (for a reader thread).
    #[cfg(test)]
    pub(crate) fn shrink_index_pools(&mut self, n: u32) {
        let take = |i: &mut FastIndex| std::mem::replace(i, FastIndex::new(Dir::Ul, 0));
        self.ul_index = take(&mut self.ul_index).with_pool(Slots::new("fast_ul_lines", n));
        self.dl_index = take(&mut self.dl_index).with_pool(Slots::new("fast_dl_lines", n));
    }
    #[cfg(test)]
    pub(crate) fn take_program(&mut self) -> Option<LoadedProgram> {
        self.program.take()
    }

    /// The pool slot a key's fast entry is published in, if any.
    pub fn fast_slot(&self, key: PdrKey) -> Option<u32> {
        match key {
            PdrKey::Teid(t) => self.ul_index.slot_of(t),
            PdrKey::UeAddr(a) => self.dl_index.slot_of(be_addr(a)),
        }
    }

    /// The reference position of a key's fast entry (direct, or overflow
    /// from [`maps::FAST_IDX_SIZE`]), if any.
    pub fn fast_position(&self, key: PdrKey) -> Option<u32> {
        match key {
            PdrKey::Teid(t) => self.ul_index.position_of(t),
            PdrKey::UeAddr(a) => self.dl_index.position_of(be_addr(a)),
        }
    }

    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Steering role on a map store of a test's ([`MemoryMaps`]).
    #[cfg(test)]
    pub(crate) fn enable_steering(&mut self) {
        self.steer = Some(steer::SteerTable::default());
    }
}

use maps::{FarEntry, FastEntry, PdrSet, QerEntry, UrrList, URR_LIST_MAX};

/// The slot of rule `id`: `keep` (its current one) or a fresh one.
fn assign<K: std::hash::Hash + Eq + Clone>(
    pool: &mut Slots,
    id: K,
    keep: Option<&u32>,
    out: &mut HashMap<K, u32>,
    fresh: &mut HashMap<K, u32>,
    now: Instant,
) -> Result<(), SlotsFull> {
    let i = match keep {
        Some(i) => *i,
        None => {
            let i = pool.alloc(now)?;
            fresh.insert(id.clone(), i);
            i
        }
    };
    out.insert(id, i);
    Ok(())
}

impl<M: MapStore> ForwardingPlane for XdpPlane<M> {
    /// Keeps the `nexthops` cache equal to the resolved neighbours:
    /// added or changed entries are written, vanished ones removed; a
    /// destination that is not a neighbour falls back to bpf_fib_lookup.
    fn set_neighbours(&mut self, neighbours: &[crate::rules::Neighbour]) {
        let want: HashMap<Ipv4Addr, NextHop> = neighbours
            .iter()
            .map(|n| (n.addr, NextHop { ifindex: n.ifindex, dmac: n.mac, smac: n.local_mac }))
            .collect();
        // The same tick follows MTU changes of the interfaces in use.
        let _ = self.refresh_mtu();
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
            if self.maps.put_nexthop(be_addr(a), &nh).is_ok() && self.memos_changed().is_ok() {
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
        self.remove_at(up_seid, Instant::now())
    }
    fn poll_maintenance(&self) -> Option<Instant> {
        self.rehome_due()
    }
    fn install_diversion(&mut self, up_seid: u64, d: &crate::rules::Diversion) -> Result<(), PlaneError> {
        let t = self.steer.as_mut().ok_or(PlaneError::SteeringUnsupported)?;
        t.set(&mut self.maps, up_seid, Some(d))
    }
    fn remove_diversion(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        match self.steer.as_mut() {
            Some(t) if t.contains(up_seid) => t.set(&mut self.maps, up_seid, None),
            _ => Err(PlaneError::NotFound(up_seid)),
        }
    }
    fn install_mec(&mut self, up_seid: u64, s: &crate::rules::MecSession) -> Result<(), PlaneError> {
        let (t, m) = self.mec.as_mut().ok_or(PlaneError::MecUnsupported)?;
        let set = match s {
            crate::rules::MecSession::Rule(r) => t.set_rule(m.as_mut(), up_seid, Some(r)),
            crate::rules::MecSession::Ue(u) => t.set_ue(m.as_mut(), up_seid, Some(u)),
        };
        // Also after a failure: whatever was written must be seen.
        self.mec_changed(set)
    }
    fn remove_mec(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        let set = match self.mec.as_mut() {
            Some((t, m)) if t.contains(up_seid) => {
                t.set_rule(m.as_mut(), up_seid, None).and_then(|_| t.set_ue(m.as_mut(), up_seid, None))
            }
            _ => return Err(PlaneError::NotFound(up_seid)),
        };
        self.mec_changed(set)
    }
    fn maintain(&mut self, now: Instant) {
        if let Err(e) = self.rehome(now) {
            tracing::warn!(error = %e, "XDP: moving fast entries back to their home slots");
        }
    }
    /// The per-CPU URR counters, summed (read by the usage engine).
    fn usage(&self, up_seid: u64, urr_id: u32) -> Option<crate::urr::UsageCounts> {
        self.urr_usage(up_seid, urr_id).map(|c| crate::urr::UsageCounts {
            ul_octets: c.ul_bytes,
            dl_octets: c.dl_bytes,
            ul_packets: c.ul_pkts,
            dl_packets: c.dl_pkts,
        })
    }
}

impl<M: MapStore> Drop for XdpPlane<M> {
    fn drop(&mut self) {
        if let Some(p) = self.program.as_mut() {
            p.detach_all();
        }
    }
}
