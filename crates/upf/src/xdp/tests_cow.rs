//! Copy-on-write slots ([`super::slots`], [`super::index`]): over a map
//! store that checks every slot write against when the slot was last
//! reachable by a packet (no root needed), and with `BPF_PROG_RUN` on the
//! loaded program (root). Also the DUPL verdict.

use super::maps::*;
use super::slots::GRACE;
use super::tests::{eth, inner_udp, is_root, ul_frame, DN, S1U};
use super::*;
use crate::rules::{Action, Far, GtpuTunnel, PacketDetection, Pdr, Qer, Urr, INTERFACE_ACCESS, INTERFACE_CORE};
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const MS: Duration = Duration::from_millis(1);

// ---- sessions ------------------------------------------------------------

/// One bearer: uplink PDR by `teid`, downlink PDR by `ue` (optionally with
/// an SDF filter, which moves it to a PDR set), FARs, one QER, one URR.
#[derive(Debug, Clone, Copy)]
struct Bearer {
    ue: Ipv4Addr,
    teid: u32,
    enb: Ipv4Addr,
    enb_teid: u32,
    dl: Action,
    ul_dupl: bool,
    mbr: Option<(u64, u64)>,
    sdf: bool,
    /// URRs 1..=urrs on both PDRs (a list from 2, the slow path above 4).
    urrs: u8,
}

fn forw() -> Action {
    Action { forw: true, ..Default::default() }
}

fn buff() -> Action {
    Action { buff: true, nocp: true, ..Default::default() }
}

impl Bearer {
    fn new(n: u8) -> Self {
        Bearer {
            ue: Ipv4Addr::new(10, 45, 0, n),
            teid: 0x100 + u32::from(n),
            enb: Ipv4Addr::new(172, 16, 0, 2),
            enb_teid: 0x2000 + u32::from(n),
            dl: forw(),
            ul_dupl: false,
            mbr: None,
            sdf: false,
            urrs: 1,
        }
    }

    fn rules(&self) -> SessionRules {
        let pdi = |iface, teid: Option<u32>, flows: &[&str]| PacketDetection {
            source_interface: iface,
            local_fteid: teid.map(|t| (t, S1U)),
            choose_fteid: false,
            ue_ipv4: Some(self.ue),
            ue_ipv6: None,
            network_instance: None,
            sdf_filters: flows.len(),
            flows: flows.iter().map(|f| crate::rules::FlowFilter::parse(f).unwrap()).collect(),
        };
        let mut r = SessionRules::default();
        let urr_ids: Vec<u32> = (1..=u32::from(self.urrs)).collect();
        r.pdrs.insert(
            1,
            Pdr {
                id: 1,
                precedence: 100,
                pdi: pdi(INTERFACE_ACCESS, Some(self.teid), &[]),
                outer_header_removal: Some(0),
                far_id: Some(1),
                qer_ids: vec![1],
                urr_ids: urr_ids.clone(),
            },
        );
        r.pdrs.insert(
            2,
            Pdr {
                id: 2,
                precedence: 100,
                pdi: pdi(INTERFACE_CORE, None, &[]),
                outer_header_removal: None,
                far_id: Some(2),
                qer_ids: vec![1],
                urr_ids,
            },
        );
        if self.sdf {
            let flows = ["permit out 17 from any to assigned 5000"];
            r.pdrs.insert(
                3,
                Pdr {
                    id: 3,
                    precedence: 10,
                    pdi: pdi(INTERFACE_CORE, None, &flows),
                    outer_header_removal: None,
                    far_id: Some(2),
                    qer_ids: vec![],
                    urr_ids: vec![],
                },
            );
        }
        let ul = Action { dupl: self.ul_dupl, ..forw() };
        r.fars.insert(1, Far { id: 1, action: ul, destination_interface: Some(INTERFACE_CORE), ..Default::default() });
        let tunnel = self.dl.forw.then_some(GtpuTunnel { teid: self.enb_teid, ipv4: self.enb });
        r.fars.insert(
            2,
            Far {
                id: 2,
                action: self.dl,
                destination_interface: Some(INTERFACE_ACCESS),
                outer_header_creation: tunnel,
                ..Default::default()
            },
        );
        r.qers.insert(1, Qer { id: 1, gate_ul_open: true, gate_dl_open: true, mbr: self.mbr, qfi: None });
        for id in 1..=u32::from(self.urrs) {
            r.urrs.insert(id, Urr { id, measure_volume: true, ..Default::default() });
        }
        r
    }
}

// ---- a map store that checks copy on write --------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Table {
    Fast(Dir),
    Far,
    Qer,
    Urr,
    UrrList,
    Set,
}

/// The `urrs` and `urr_lists` slots a PDR's `urr_idx` reaches.
fn urr_reach(m: &MemoryMaps, r: &mut HashSet<(Table, u32)>, idx: u32) {
    if idx == IDX_NONE || idx == URR_IDX_SLOW {
        return;
    }
    if idx & URR_IDX_LIST == 0 {
        r.insert((Table::Urr, idx));
        return;
    }
    let n = idx & !URR_IDX_LIST;
    r.insert((Table::UrrList, n));
    for u in m.urr_lists.get(&n).map(|l| l.idx).unwrap_or([IDX_NONE; URR_LIST_MAX]) {
        if u != IDX_NONE {
            r.insert((Table::Urr, u));
        }
    }
}

/// [`MemoryMaps`] that records, for every array slot, the last time a
/// packet could reach it (through a reference, the fast entry it names, a
/// PDR set or a URR list), and flags a write to a slot reachable less than
/// [`GRACE`] ago, and an overflow hash element naming an empty reference.
struct CowCheck {
    m: MemoryMaps,
    clock: Arc<Mutex<Instant>>,
    seen: HashMap<(Table, u32), Instant>,
    violations: Vec<String>,
}

impl CowCheck {
    fn new(clock: Arc<Mutex<Instant>>) -> Self {
        CowCheck { m: MemoryMaps::default(), clock, seen: HashMap::new(), violations: Vec::new() }
    }

    fn now(&self) -> Instant {
        *self.clock.lock().unwrap()
    }

    fn reachable(&self) -> HashSet<(Table, u32)> {
        let mut r = HashSet::new();
        for ((d, _), slot) in &self.m.fast_ref {
            r.insert((Table::Fast(*d), *slot));
            let Some(e) = self.m.fast_idx.get(&(*d, *slot)) else { continue };
            let Some(i) = e.set_idx() else {
                r.insert((Table::Qer, e.qer_idx));
                urr_reach(&self.m, &mut r, e.urr_idx);
                continue;
            };
            r.insert((Table::Set, i));
            let Some(s) = self.m.pdr_sets.get(&i) else { continue };
            for rule in &s.rules[..s.count as usize] {
                r.insert((Table::Far, rule.far_idx));
                r.insert((Table::Qer, rule.qer_idx));
                urr_reach(&self.m, &mut r, rule.urr_idx);
            }
        }
        r
    }

    fn observe(&mut self) {
        let now = self.now();
        for k in self.reachable() {
            self.seen.insert(k, now);
        }
    }

    fn check_write(&mut self, t: Table, slot: u32) {
        self.observe();
        let now = self.now();
        if let Some(last) = self.seen.get(&(t, slot)) {
            if now < *last + GRACE {
                self.violations
                    .push(format!("{t:?} slot {slot} written {:?} after it was last reachable", now - *last));
            }
        }
    }

    fn after<T>(&mut self, r: Result<T, MapError>) -> Result<T, MapError> {
        self.observe();
        r
    }
}

impl MapStore for CowCheck {
    fn set_config(&mut self, c: &UpfConfigEntry) -> Result<(), MapError> {
        self.m.set_config(c)
    }
    fn put_fast_slot(&mut self, dir: Dir, slot: u32, e: &FastEntry) -> Result<(), MapError> {
        self.check_write(Table::Fast(dir), slot);
        let r = self.m.put_fast_slot(dir, slot, e);
        self.after(r)
    }
    fn set_fast_ref(&mut self, dir: Dir, pos: u32, slot: u32) -> Result<(), MapError> {
        self.observe();
        let r = self.m.set_fast_ref(dir, pos, slot);
        self.after(r)
    }
    fn put_pdr_set(&mut self, idx: u32, st: &PdrSet) -> Result<(), MapError> {
        self.check_write(Table::Set, idx);
        let r = self.m.put_pdr_set(idx, st);
        self.after(r)
    }
    fn put_fast_ovf(&mut self, dir: Dir, key: u32, pos: u32) -> Result<(), MapError> {
        self.observe();
        if !self.m.fast_ref.contains_key(&(dir, pos)) {
            self.violations
                .push(format!("{dir:?} key {key:#x}: hash element names position {pos} before its reference is set"));
        }
        let r = self.m.put_fast_ovf(dir, key, pos);
        self.after(r)
    }
    fn del_fast_ovf(&mut self, dir: Dir, key: u32) -> Result<(), MapError> {
        self.observe();
        let r = self.m.del_fast_ovf(dir, key);
        self.after(r)
    }
    fn put_far(&mut self, idx: u32, f: &FarEntry) -> Result<(), MapError> {
        self.check_write(Table::Far, idx);
        let r = self.m.put_far(idx, f);
        self.after(r)
    }
    fn put_qer(&mut self, idx: u32, q: &QerEntry) -> Result<(), MapError> {
        self.check_write(Table::Qer, idx);
        let r = self.m.put_qer(idx, q);
        self.after(r)
    }
    fn put_urr_list(&mut self, idx: u32, l: &UrrList) -> Result<(), MapError> {
        self.check_write(Table::UrrList, idx);
        let r = self.m.put_urr_list(idx, l);
        self.after(r)
    }
    fn reset_urr(&mut self, idx: u32) -> Result<(), MapError> {
        self.check_write(Table::Urr, idx);
        let r = self.m.reset_urr(idx);
        self.after(r)
    }
    fn urr(&self, idx: u32) -> Result<UrrCounts, MapError> {
        self.m.urr(idx)
    }
    fn put_nexthop(&mut self, dst: u32, n: &NextHop) -> Result<(), MapError> {
        self.m.put_nexthop(dst, n)
    }
    fn del_nexthop(&mut self, dst: u32) -> Result<(), MapError> {
        self.m.del_nexthop(dst)
    }
    fn add_port(&mut self, ifindex: u32) -> Result<(), MapError> {
        self.m.add_port(ifindex)
    }
    fn counter(&self, c: Counter) -> Result<u64, MapError> {
        self.m.counter(c)
    }
    fn put_steer_ul(&mut self, ue: u32, s: &SteerUlSet) -> Result<(), MapError> {
        self.m.put_steer_ul(ue, s)
    }
    fn del_steer_ul(&mut self, ue: u32) -> Result<(), MapError> {
        self.m.del_steer_ul(ue)
    }
    fn put_steer_dl(&mut self, k: SteerDlKey, v: &SteerDl) -> Result<(), MapError> {
        self.m.put_steer_dl(k, v)
    }
    fn del_steer_dl(&mut self, k: SteerDlKey) -> Result<(), MapError> {
        self.m.del_steer_dl(k)
    }
}

fn small() -> XdpConfig {
    XdpConfig { s1u_addr: S1U, mtu: 1500, no_fib: true, sizes: MapSizes { tunnels: 64, fars: 10, qers: 6, urrs: 6 } }
}

fn checked_plane(clock: &Arc<Mutex<Instant>>, index_pool: u32) -> XdpPlane<CowCheck> {
    let mut p = XdpPlane::with_maps(CowCheck::new(clock.clone()), small()).unwrap();
    p.shrink_index_pools(index_pool);
    p
}

/// Applies at time `t`, telling the checking store the time too.
fn apply(p: &mut XdpPlane<CowCheck>, seid: u64, b: &Bearer, t: Instant) -> Result<(), PlaneError> {
    *p.maps().clock.lock().unwrap() = t;
    p.apply_at(seid, &b.rules(), &SdfTable::new(), t)
}

/// Every reference is at its key's position (direct, or the overflow
/// position the hash names), names a slot holding its key, and a set entry
/// names a written PDR set; every hash element names its key's reference.
fn assert_index_current(m: &MemoryMaps) {
    for ((d, pos), slot) in &m.fast_ref {
        let e = m.fast_idx[&(*d, *slot)];
        assert_ne!(e.flags & FAST_F_IDX, 0);
        let host = match d {
            Dir::Ul => e.key,
            Dir::Dl => u32::from_be(e.key),
        };
        if *pos < FAST_IDX_SIZE {
            assert_eq!(host & FAST_IDX_MASK, *pos, "reference at the key's position");
        } else {
            assert_eq!(m.fast_ovf.get(&(*d, e.key)), Some(pos), "overflow position in the hash");
        }
        assert!(m.fast(*d, e.key).is_some());
        if let Some(i) = e.set_idx() {
            assert!(m.pdr_sets.contains_key(&i), "{d:?} slot {slot}: set {i} written");
        }
    }
    for ((d, key), pos) in &m.fast_ovf {
        let slot = m.fast_ref[&(*d, *pos)];
        assert_eq!(m.fast_idx[&(*d, slot)].key, *key);
    }
}

#[test]
fn the_checker_flags_an_in_place_write() {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let mut m = CowCheck::new(clock.clone());
    m.set_fast_ref(Dir::Dl, 5, 3).unwrap();
    m.put_fast_slot(Dir::Dl, 3, &FastEntry::default()).unwrap();
    assert_eq!(m.violations.len(), 1);
    m.set_fast_ref(Dir::Dl, 5, FAST_REF_NONE).unwrap();
    *clock.lock().unwrap() = t0 + GRACE - MS;
    m.put_fast_slot(Dir::Dl, 3, &FastEntry::default()).unwrap();
    assert_eq!(m.violations.len(), 2, "still within the grace period");
    *clock.lock().unwrap() = t0 + GRACE;
    m.put_fast_slot(Dir::Dl, 3, &FastEntry::default()).unwrap();
    assert_eq!(m.violations.len(), 2);
}

#[test]
fn update_writes_a_fresh_slot_and_switches_the_reference() {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let mut p = checked_plane(&clock, 8);
    let mut b = Bearer { dl: buff(), ..Bearer::new(1) };
    apply(&mut p, 1, &b, t0).unwrap();
    let (ul0, dl0) = (p.fast_slot(PdrKey::Teid(b.teid)).unwrap(), p.fast_slot(PdrKey::UeAddr(b.ue)).unwrap());
    let old_entry = p.maps().m.fast_idx[&(Dir::Dl, dl0)];
    assert_eq!(old_entry.action, FAR_BUFF | FAR_NOCP);
    b.dl = forw();
    apply(&mut p, 1, &b, t0 + MS).unwrap();
    let dl1 = p.fast_slot(PdrKey::UeAddr(b.ue)).unwrap();
    assert_ne!(dl1, dl0, "a changed entry moves to a fresh slot");
    assert_eq!(p.fast_slot(PdrKey::Teid(b.teid)), Some(ul0), "an unchanged entry stays where it is");
    let m = &p.maps().m;
    assert_eq!(m.fast_ref[&(Dir::Dl, u32::from(b.ue) & FAST_IDX_MASK)], dl1);
    assert_eq!(m.fast_idx[&(Dir::Dl, dl1)].teid, b.enb_teid);
    assert_eq!(m.fast_idx[&(Dir::Dl, dl0)], old_entry, "the replaced slot is left as it was");
    assert_index_current(m);
    assert_eq!(p.slot_pools()[4].quarantined(), 1);
    assert!(p.maps().violations.is_empty(), "{:?}", p.maps().violations);
}

/// Full-size entry pools: every reference position has its home slot.
fn homed_plane(clock: &Arc<Mutex<Instant>>) -> XdpPlane<CowCheck> {
    XdpPlane::with_maps(CowCheck::new(clock.clone()), small()).unwrap()
}

#[test]
fn an_updated_entry_goes_back_to_its_home_slot_after_the_grace_period() {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let mut p = homed_plane(&clock);
    let mut b = Bearer { dl: buff(), ..Bearer::new(1) };
    apply(&mut p, 1, &b, t0).unwrap();
    let (ul, dl) = (PdrKey::Teid(b.teid), PdrKey::UeAddr(b.ue));
    for k in [ul, dl] {
        assert_eq!(p.fast_slot(k), p.fast_position(k), "{k:?} installed in its home slot");
    }
    assert_eq!((p.away_from_home(), ForwardingPlane::poll_maintenance(&p)), (0, None));
    // BUFF -> FORW: the home slot holds the entry being replaced.
    b.dl = forw();
    apply(&mut p, 1, &b, t0 + MS).unwrap();
    let home = p.fast_position(dl).unwrap();
    let away = p.fast_slot(dl).unwrap();
    assert_ne!(away, home);
    assert!(away >= FAST_IDX_SIZE, "away slots come from the top of the pool");
    assert_eq!(p.away_from_home(), 1);
    let due = ForwardingPlane::poll_maintenance(&p).expect("a move is due");
    assert_eq!(due, t0 + MS + GRACE);
    // Not before the old entry's grace period is over.
    *clock.lock().unwrap() = t0 + GRACE;
    assert_eq!(p.rehome(t0 + GRACE).unwrap(), 0);
    assert_eq!(p.fast_slot(dl), Some(away));
    let want = p.maps().m.fast(Dir::Dl, be_addr(b.ue)).unwrap();
    assert_eq!((want.action, want.teid), (FAR_FORW, b.enb_teid));
    // Then through the plane's maintenance hook, as the PFCP node calls it.
    let t = ForwardingPlane::poll_maintenance(&p).unwrap();
    assert!(t > t0 + GRACE && t <= t0 + MS + 2 * GRACE);
    *clock.lock().unwrap() = t0 + MS + GRACE;
    ForwardingPlane::maintain(&mut p, t0 + MS + GRACE);
    assert_eq!(p.fast_slot(dl), Some(home));
    assert_eq!(p.away_from_home(), 0);
    assert_eq!(ForwardingPlane::poll_maintenance(&p), None);
    assert_eq!(p.maps().m.fast(Dir::Dl, be_addr(b.ue)), Some(want), "the same entry, now at home");
    assert_eq!(p.fast_slot(ul), p.fast_position(ul), "the unchanged uplink entry never moved");
    assert_index_current(&p.maps().m);
    assert!(p.maps().violations.is_empty(), "{:?}", p.maps().violations);
    // The away slot waits out its grace period like any replaced slot.
    assert_eq!(p.slot_pools()[4].quarantined(), 1);
}

#[test]
fn an_update_before_the_move_claims_the_home_slot_first() {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let mut p = homed_plane(&clock);
    let mut b = Bearer::new(1);
    apply(&mut p, 1, &b, t0).unwrap();
    b.enb_teid += 1;
    apply(&mut p, 1, &b, t0 + MS).unwrap();
    let dl = PdrKey::UeAddr(b.ue);
    assert_ne!(p.fast_slot(dl), p.fast_position(dl));
    // A later update of another session finds the move due and makes it
    // before it allocates.
    apply(&mut p, 2, &Bearer::new(2), t0 + MS + GRACE).unwrap();
    assert_eq!(p.fast_slot(dl), p.fast_position(dl));
    assert_eq!(p.away_from_home(), 0);
    assert_index_current(&p.maps().m);
    assert!(p.maps().violations.is_empty(), "{:?}", p.maps().violations);
}

#[test]
fn exhaustion_is_a_clear_error_and_keeps_the_installed_rules() {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let mut cfg = small();
    cfg.sizes.fars = 3;
    let mut p = XdpPlane::with_maps(CowCheck::new(clock.clone()), cfg).unwrap();
    let mut b = Bearer::new(1);
    apply(&mut p, 1, &b, t0).unwrap();
    b.enb_teid = 0x3001;
    apply(&mut p, 1, &b, t0 + MS).unwrap();
    // The third FAR slot is taken, the replaced one waits for its grace period.
    b.enb_teid = 0x3002;
    let err = apply(&mut p, 1, &b, t0 + 10 * MS).unwrap_err();
    assert_eq!(
        err,
        PlaneError::Other("fast-path FAR table full: 3 slots, 1 of them waiting 100 ms for in-flight packets".into())
    );
    assert_eq!(p.maps().m.fast(Dir::Dl, be_addr(b.ue)).unwrap().teid, 0x3001, "the previous rules stay");
    assert_index_current(&p.maps().m);
    // After the grace period the replaced slot is reused.
    apply(&mut p, 1, &b, t0 + MS + GRACE).unwrap();
    assert_eq!(p.maps().m.fast(Dir::Dl, be_addr(b.ue)).unwrap().teid, 0x3002);
    assert!(p.maps().violations.is_empty(), "{:?}", p.maps().violations);
}

#[test]
fn index_pool_exhaustion_refuses_the_update_whole() {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let mut p = checked_plane(&clock, 2);
    let mut b = Bearer::new(1);
    apply(&mut p, 1, &b, t0).unwrap();
    b.enb_teid = 0x3001;
    // Uplink and downlink pools are separate: the downlink one now holds
    // the new entry and the replaced one in quarantine.
    apply(&mut p, 1, &b, t0 + MS).unwrap();
    let slot = p.fast_slot(PdrKey::UeAddr(b.ue));
    b.enb_teid = 0x3002;
    b.mbr = Some((1000, 2000)); // a new QER slot too: given back on refusal
    let err = apply(&mut p, 1, &b, t0 + 2 * MS).unwrap_err();
    assert_eq!(
        err,
        PlaneError::Other(
            "fast-path fast_dl_lines table full: 2 slots, 1 of them waiting 100 ms for in-flight packets".into()
        )
    );
    assert_eq!(p.fast_slot(PdrKey::UeAddr(b.ue)), slot, "nothing written");
    assert_eq!(p.maps().m.fast(Dir::Dl, be_addr(b.ue)).unwrap().teid, 0x3001, "the previous rules stay");
    assert_eq!(p.slot_pools()[1].in_use(), 1, "the fresh QER slot went back");
    assert_index_current(&p.maps().m);
    apply(&mut p, 1, &b, t0 + MS + GRACE).unwrap();
    assert_eq!(p.maps().m.fast(Dir::Dl, be_addr(b.ue)).unwrap().teid, 0x3002);
    assert_index_current(&p.maps().m);
    assert!(p.maps().violations.is_empty(), "{:?}", p.maps().violations);
}

#[test]
fn sets_and_colliding_keys_are_copy_on_write() {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let mut p = checked_plane(&clock, 64);
    let a = Bearer { sdf: true, ..Bearer::new(1) };
    // Session 2's TEID shares session 1's direct uplink position.
    let mut c = Bearer { sdf: true, ..Bearer::new(2) };
    c.teid = a.teid ^ (1 << FAST_IDX_BITS);
    apply(&mut p, 1, &a, t0).unwrap();
    apply(&mut p, 2, &c, t0).unwrap();
    let m = &p.maps().m;
    let pos = p.fast_position(PdrKey::Teid(c.teid)).unwrap();
    assert!(pos >= FAST_IDX_SIZE);
    assert_eq!(m.fast_ovf[&(Dir::Ul, c.teid)], pos);
    let set0 = m.fast(Dir::Dl, be_addr(a.ue)).unwrap().set_idx().unwrap();
    assert_eq!(m.set_of(Dir::Dl, be_addr(a.ue)).unwrap().count, 2);
    // A changed set moves to a fresh slot; the colliding key keeps its
    // overflow position (the hash element is never rewritten).
    for (i, enb_teid) in [0x3001, 0x3002, 0x3003].into_iter().enumerate() {
        let t = t0 + (i as u32 + 1) * MS;
        apply(&mut p, 1, &Bearer { enb_teid, ..a }, t).unwrap();
        apply(&mut p, 2, &Bearer { enb_teid, ..c }, t).unwrap();
        assert_eq!(p.fast_position(PdrKey::Teid(c.teid)), Some(pos));
    }
    let set1 = p.maps().m.fast(Dir::Dl, be_addr(a.ue)).unwrap().set_idx().unwrap();
    assert_ne!(set1, set0);
    assert_eq!(p.maps().m.pdr_sets[&set1].rules[1].far_idx, p.sessions[&1].slots.far[&2]);
    assert_index_current(&p.maps().m);
    // The first key goes: the colliding one stays on its overflow position.
    p.remove_at(1, t0 + 10 * MS).unwrap();
    assert_eq!(p.fast_position(PdrKey::Teid(c.teid)), Some(pos));
    assert!(p.maps().m.fast(Dir::Ul, c.teid).is_some());
    p.remove_at(2, t0 + 11 * MS).unwrap();
    assert!(p.maps().m.fast_ovf.is_empty() && p.maps().m.fast_ref.is_empty());
    assert!(p.maps().violations.is_empty(), "{:?}", p.maps().violations);
}

#[test]
fn removed_session_slots_wait_before_another_session_gets_them() {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let mut p = checked_plane(&clock, 64);
    let a = Bearer::new(1);
    apply(&mut p, 1, &a, t0).unwrap();
    *p.maps().clock.lock().unwrap() = t0 + MS;
    p.remove_at(1, t0 + MS).unwrap();
    let pools = p.slot_pools();
    assert_eq!(pools.iter().map(|s| s.in_use()).sum::<usize>(), 0);
    // FAR 2 of 10, QER 1 of 6, URR 1 of 6, one fast entry each way.
    assert_eq!(pools.iter().map(|s| s.quarantined()).collect::<Vec<_>>(), vec![2, 1, 1, 1, 1, 0, 0]);
    let b = Bearer::new(2);
    apply(&mut p, 2, &b, t0 + 2 * MS).unwrap();
    assert!(p.maps().violations.is_empty(), "{:?}", p.maps().violations);
    apply(&mut p, 3, &Bearer::new(3), t0 + MS + GRACE).unwrap();
    assert_eq!(p.slot_pools()[1].quarantined(), 0, "reclaimed");
    assert!(p.maps().violations.is_empty(), "{:?}", p.maps().violations);
}

#[derive(Debug, Clone)]
enum Op {
    Apply { seid: u8, dl: u8, enb_teid: u8, mbr: bool, sdf: bool, urrs: u8 },
    Remove(u8),
    Advance(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..5, 0u8..3, 0u8..3, any::<bool>(), any::<bool>(), 1u8..6).prop_map(|(seid, dl, enb_teid, mbr, sdf, urrs)| Op::Apply { seid, dl, enb_teid, mbr, sdf, urrs }),
        1 => (1u8..5).prop_map(Op::Remove),
        2 => (0u8..80).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Any sequence of installs, updates and removals at any pace: no slot
    /// is written within the grace period of its last reachability, every
    /// reference serves its key's current entry, and a failed update
    /// leaves the session as it was.
    #[test]
    fn no_slot_is_written_within_its_grace_period(ops in proptest::collection::vec(op(), 1..60), homed: bool) {
        let t0 = Instant::now();
        let clock = Arc::new(Mutex::new(t0));
        // A pool of 6 sees slots reused; a full one, entries moving home.
        let mut p = if homed { homed_plane(&clock) } else { checked_plane(&clock, 6) };
        let mut now = t0;
        for op in ops {
            match op {
                Op::Advance(ms) => {
                    now += u32::from(ms) * MS;
                    *clock.lock().unwrap() = now;
                    if ForwardingPlane::poll_maintenance(&p).is_some_and(|t| t <= now) {
                        ForwardingPlane::maintain(&mut p, now);
                    }
                }
                Op::Remove(seid) => {
                    *clock.lock().unwrap() = now;
                    let _ = p.remove_at(u64::from(seid), now);
                }
                Op::Apply { seid, dl, enb_teid, mbr, sdf, urrs } => {
                    *clock.lock().unwrap() = now;
                    let mut b = Bearer::new(seid);
                    if seid == 4 {
                        b.teid = Bearer::new(1).teid ^ (1 << FAST_IDX_BITS); // shares session 1's uplink position
                    }
                    b.dl = [forw(), buff(), Action { dupl: true, ..forw() }][dl as usize];
                    b.enb_teid += u32::from(enb_teid) << 12;
                    b.mbr = mbr.then_some((1000, 2000));
                    b.sdf = sdf;
                    b.urrs = urrs;
                    let view = |p: &XdpPlane<CowCheck>| {
                        let m = &p.maps().m;
                        (m.fast(Dir::Dl, be_addr(b.ue)), m.set_of(Dir::Dl, be_addr(b.ue)), m.fast(Dir::Ul, b.teid))
                    };
                    let before = view(&p);
                    if p.apply_at(u64::from(seid), &b.rules(), &SdfTable::new(), now).is_err() {
                        prop_assert_eq!(view(&p), before);
                    } else {
                        // What a packet finds is the session's new rules.
                        let (dl, set, ul) = view(&p);
                        let (dl, ul) = (dl.unwrap(), ul.unwrap());
                        prop_assert_eq!(set.map(|s| s.count), sdf.then_some(2));
                        prop_assert_eq!(dl.set_idx().is_some(), sdf);
                        if !sdf {
                            prop_assert_eq!((dl.teid, dl.action), (if dl.action & FAR_FORW != 0 { b.enb_teid } else { 0 }, translate::far_entry(&b.rules().fars[&2]).action));
                        }
                        let u = ul.urr_idx;
                        let kind = match urrs {
                            1 => u & URR_IDX_LIST == 0,
                            2..=4 => u != URR_IDX_SLOW && u & URR_IDX_LIST != 0,
                            _ => u == URR_IDX_SLOW,
                        };
                        prop_assert!(kind, "{} URRs: urr_idx {:#x}", urrs, u);
                    }
                }
            }
            assert_index_current(&p.maps().m);
        }
        prop_assert!(p.maps().violations.is_empty(), "{:?}", p.maps().violations);
        if homed {
            // Quiet: every entry is back home after a grace period, or a
            // few when a key re-installed soon after its removal found its
            // home slot lent to another key's update.
            for _ in 0..4 {
                now += GRACE;
                *clock.lock().unwrap() = now;
                p.rehome(now).unwrap();
            }
            prop_assert_eq!(p.away_from_home(), 0);
            prop_assert_eq!(ForwardingPlane::poll_maintenance(&p), None);
            prop_assert!(p.maps().violations.is_empty(), "{:?}", p.maps().violations);
        }
    }
}

// ---- BPF_PROG_RUN -------------------------------------------------------------

macro_rules! need_root {
    () => {
        if !is_root() {
            eprintln!("note: skipped, BPF_PROG_RUN needs root");
            return;
        }
    };
}

const ENB2: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 3);

fn loaded(sizes: MapSizes) -> XdpPlane {
    let mut p = XdpPlane::load(XdpConfig { s1u_addr: S1U, mtu: 1500, no_fib: true, sizes }).expect("load upf_xdp");
    // ifindex 1 is lo in every namespace: the BPF_PROG_RUN ingress, so XDP_TX.
    for dst in [DN, Bearer::new(1).enb, ENB2] {
        p.set_next_hop(dst, NextHop { ifindex: 1, dmac: [2, 0, 0, 0, 0, 0xd], smac: [2, 0, 0, 0, 0, 5] }).unwrap();
    }
    p
}

/// (verdict, TEID, outer destination) of a downlink packet to `ue`.
fn downlink(prog: &LoadedProgram, ue: Ipv4Addr) -> (u32, u32, Ipv4Addr) {
    let (v, out) = prog.test_run(&eth(&inner_udp(DN, ue, 5000, 20))).expect("BPF_PROG_RUN");
    if v != XDP_TX {
        return (v, 0, Ipv4Addr::UNSPECIFIED);
    }
    let ip = &out[14..];
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let teid = u32::from_be_bytes([ip[32], ip[33], ip[34], ip[35]]);
    (v, teid, dst)
}

#[test]
fn program_sees_the_whole_new_entry_and_a_reused_slot_serves_its_new_owner() {
    need_root!();
    let mut p = loaded(MapSizes::small());
    p.shrink_index_pools(2);
    let t0 = Instant::now();
    let mut a = Bearer::new(1);
    p.apply_at(1, &a.rules(), &SdfTable::new(), t0).unwrap();
    let s0 = p.fast_slot(PdrKey::UeAddr(a.ue)).unwrap();
    assert_eq!(downlink(p.program().unwrap(), a.ue), (XDP_TX, a.enb_teid, a.enb));
    // New TEID and new peer: both change together.
    (a.enb_teid, a.enb) = (0x7777, ENB2);
    p.apply_at(1, &a.rules(), &SdfTable::new(), t0 + MS).unwrap();
    assert_ne!(p.fast_slot(PdrKey::UeAddr(a.ue)), Some(s0));
    assert_eq!(downlink(p.program().unwrap(), a.ue), (XDP_TX, 0x7777, ENB2));
    // Within the grace period the old slot is not handed out: a second
    // session finds the pool empty and is refused whole.
    let b = Bearer::new(2);
    assert!(p.apply_at(2, &b.rules(), &SdfTable::new(), t0 + 2 * MS).is_err());
    assert_eq!(p.fast_slot(PdrKey::UeAddr(b.ue)), None);
    assert_eq!(downlink(p.program().unwrap(), b.ue).0, XDP_PASS);
    // After it, a third session gets the old slot: its own entry is served,
    // and the first session still sees its new entry.
    let c = Bearer::new(3);
    p.apply_at(3, &c.rules(), &SdfTable::new(), t0 + MS + GRACE).unwrap();
    assert_eq!(p.fast_slot(PdrKey::UeAddr(c.ue)), Some(s0), "the replaced slot is reused");
    assert_eq!(downlink(p.program().unwrap(), c.ue), (XDP_TX, c.enb_teid, c.enb));
    assert_eq!(downlink(p.program().unwrap(), a.ue), (XDP_TX, 0x7777, ENB2));
    // Uplink through the index too.
    let inner = inner_udp(a.ue, DN, 53, 10);
    assert_eq!(p.program().unwrap().test_run(&ul_frame(a.teid, &inner)).unwrap().0, XDP_TX);
    p.remove_at(3, t0 + 2 * GRACE).unwrap();
    assert_eq!(downlink(p.program().unwrap(), c.ue).0, XDP_PASS);
    assert_eq!(downlink(p.program().unwrap(), a.ue), (XDP_TX, 0x7777, ENB2));
}

#[test]
fn program_follows_an_entry_away_from_home_and_back() {
    need_root!();
    let mut p = loaded(MapSizes::small());
    let t0 = Instant::now();
    let mut a = Bearer { dl: buff(), ..Bearer::new(1) };
    p.apply_at(1, &a.rules(), &SdfTable::new(), t0).unwrap();
    let key = PdrKey::UeAddr(a.ue);
    assert_eq!(p.fast_slot(key), p.fast_position(key));
    assert_eq!(downlink(p.program().unwrap(), a.ue).0, XDP_PASS, "buffered: to the slow path");
    a.dl = forw();
    p.apply_at(1, &a.rules(), &SdfTable::new(), t0 + MS).unwrap();
    assert_ne!(p.fast_slot(key), p.fast_position(key));
    assert_eq!(
        downlink(p.program().unwrap(), a.ue),
        (XDP_TX, a.enb_teid, a.enb),
        "read through the reference, away from home"
    );
    assert_eq!(p.rehome(t0 + MS + GRACE).unwrap(), 1);
    assert_eq!(p.fast_slot(key), p.fast_position(key));
    assert_eq!(downlink(p.program().unwrap(), a.ue), (XDP_TX, a.enb_teid, a.enb), "at home again");
    let inner = inner_udp(a.ue, DN, 53, 10);
    assert_eq!(p.program().unwrap().test_run(&ul_frame(a.teid, &inner)).unwrap().0, XDP_TX);
}

/// A reader on another thread runs the program while the session flips
/// between two tunnels (TEID and peer together) as fast as it can, with
/// the real clock, long enough that replaced slots are reused: every
/// packet leaves with one tunnel whole, never a TEID of one with the
/// peer of the other.
#[test]
fn concurrent_updates_never_show_a_mixed_entry() {
    need_root!();
    flip_tunnels(false);
}

/// The same through a PDR set (an SDF PDR for the packets' port): the
/// set, its FAR and the fast entry naming the set all move.
#[test]
fn concurrent_updates_of_a_pdr_set_never_show_a_mixed_entry() {
    need_root!();
    flip_tunnels(true);
}

fn flip_tunnels(sdf: bool) {
    let mut p = loaded(MapSizes { tunnels: 64, fars: 1 << 16, qers: 16, urrs: 16 });
    let prog = p.take_program().expect("loaded");
    let mut s = Bearer { sdf, ..Bearer::new(1) };
    let tunnels = [(0x1111_1111, s.enb), (0x2222_2222, ENB2)];
    (s.enb_teid, s.enb) = tunnels[0];
    p.install(1, &s.rules()).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut bad = Vec::new();
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                let (v, teid, dst) = downlink(&prog, s.ue);
                n += 1;
                if v != XDP_TX || !tunnels.contains(&(teid, dst)) {
                    bad.push((v, teid, dst));
                }
            }
            (n, bad)
        })
    };
    let start = Instant::now();
    let mut slots = HashSet::new();
    let mut sets = HashSet::new();
    let mut updates = 0u32;
    while start.elapsed() < 3 * GRACE {
        (s.enb_teid, s.enb) = tunnels[(updates % 2 + 1) as usize % 2];
        p.update(1, &s.rules()).unwrap();
        slots.extend(p.fast_slot(PdrKey::UeAddr(s.ue)));
        sets.extend(p.sessions[&1].sets.values().map(|(_, i)| *i));
        updates += 1;
    }
    done.store(true, Ordering::Relaxed);
    let (n, bad) = reader.join().unwrap();
    assert!(
        bad.is_empty(),
        "{} of {n} packets saw a mixed or missing entry: {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
    assert!(n > 0);
    assert!((slots.len() as u32) < updates, "slots were reused ({} slots for {updates} updates)", slots.len());
    assert_eq!(sets.len() > 1, sdf, "sets moved");
}

#[test]
fn dupl_far_goes_to_the_slow_path() {
    need_root!();
    let mut p = loaded(MapSizes::small());
    let b = Bearer { dl: Action { dupl: true, ..forw() }, ul_dupl: true, ..Bearer::new(1) };
    p.install(1, &b.rules()).unwrap();
    assert_eq!(downlink(p.program().unwrap(), b.ue).0, XDP_PASS);
    let inner = inner_udp(b.ue, DN, 53, 10);
    assert_eq!(p.program().unwrap().test_run(&ul_frame(b.teid, &inner)).unwrap().0, XDP_PASS);
    assert_eq!(p.counter(Counter::PassDupl).unwrap(), 2);
    assert_eq!(p.counter(Counter::UlFwd).unwrap() + p.counter(Counter::DlFwd).unwrap(), 0);
    // Through a PDR set (SDF filter) as well.
    let s = Bearer { sdf: true, ..b };
    p.update(1, &s.rules()).unwrap();
    assert_eq!(downlink(p.program().unwrap(), s.ue).0, XDP_PASS);
    assert_eq!(p.counter(Counter::PassDupl).unwrap(), 3);
    // DUPL off again: forwarded.
    p.update(1, &Bearer::new(1).rules()).unwrap();
    assert_eq!(downlink(p.program().unwrap(), b.ue).0, XDP_TX);
}

#[test]
fn mtu_follows_the_interfaces_and_the_cap() {
    let mut p = XdpPlane::with_maps(MemoryMaps::default(), XdpConfig { mtu: 0, ..small() }).unwrap();
    assert_eq!(p.mtu(), 1500, "nothing known yet");
    p.attach("lo", AttachMode::Native).unwrap();
    let lo = p.mtu();
    assert!(lo >= 1280);
    assert_eq!(p.maps().config.mtu, lo);
    let mut capped = XdpPlane::with_maps(MemoryMaps::default(), XdpConfig { mtu: 1400, ..small() }).unwrap();
    capped.attach("lo", AttachMode::Native).unwrap();
    assert_eq!(capped.maps().config.mtu, 1400.min(lo));
}
