//! Session lookup entries (bpf/maps.h, "Session lookup"): an entry pool of
//! every key's fast entry and references (slot numbers) into it, both in
//! the line arrays `fast_ul_lines` / `fast_dl_lines`, kept copy-on-write.
//! A key's reference sits at its direct position (TEID or UE address
//! masked to [`FAST_IDX_BITS`]) when it was the first key there, else at an overflow position that the hash `fast_ul` / `fast_dl`
//! names (allocated when the key is inserted, kept until it is removed).
//!
//! Why a program never sees a torn entry:
//! - a pool slot is written only when it is free: never published, or
//!   released at least [`super::slots::GRACE`] earlier (no program that
//!   loaded a reference to it can still be running);
//! - a reference switches with one aligned 32-bit store (through mmap,
//!   [`MapStore::set_fast_ref`]), after the slot's entry is complete; the
//!   program loads the reference once and the entry through it (an address
//!   dependency), so it sees the old entry or the new one, whole;
//! - a hash element is written once, when its key is inserted (after the
//!   reference at its overflow position is valid), and removed with the
//!   key, never updated in place; the kernel may recycle a removed element
//!   at once, so a program may read another key's position there, but the
//!   entry it then reaches names another key and fails the key check (the
//!   packet takes the slow path, as for a key being removed);
//! - nothing caches a slot number across packets (the program's only
//!   per-CPU memo holds next hops, invalidated by a generation).
//!
//! Reference position i and pool slot i share a cache line (bpf/maps.h
//! `fast_line`). A key's entry goes to its home slot (the slot numbered as
//! its reference position) when that slot is free; an update finds it
//! taken by the entry it replaces, so the new entry goes elsewhere (a
//! freed slot that is no installed key's home, else one never used, from
//! the top down) and [`FastIndex::rehome`] moves it back once the home
//! slot's grace period is over (the same copy on write: a free slot
//! written, then the reference switched). A packet of a key at home reads
//! one cache line.
//!
//! Capacity: [`FastIndex::check`] tells beforehand whether a batch of puts
//! finds the pool slots and overflow positions it needs, so that a session
//! update is refused whole (the installed rules stay) rather than half
//! written.
//!
//! [`FAST_IDX_BITS`]: super::maps::FAST_IDX_BITS

use super::maps::{
    Dir, FastEntry, MapError, MapStore, FAST_F_IDX, FAST_IDX_MASK, FAST_IDX_SIZE, FAST_OVF_SIZE, FAST_POOL_SIZE,
    FAST_REF_NONE,
};
use super::slots::{Slots, SlotsFull, GRACE};
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
struct Owner {
    /// Reference position (direct, or overflow from FAST_IDX_SIZE).
    pos: u32,
    slot: u32,
    /// The entry in the slot (without FAST_F_IDX / key).
    entry: FastEntry,
}

/// One direction's reference array, entry pool and overflow positions.
#[derive(Debug)]
pub struct FastIndex {
    dir: Dir,
    pool: Slots,
    /// Overflow positions, as offsets from FAST_IDX_SIZE.
    ovf: Slots,
    /// Map key (TEID, or UE address in network order) -> its reference.
    keys: HashMap<u32, Owner>,
    /// Direct position -> the key holding it.
    direct: HashMap<u32, u32>,
    /// Keys whose entry is away from its home slot, to move back (stale
    /// keys are skipped), and when to try next.
    away: VecDeque<u32>,
    rehome_due: Option<Instant>,
}

/// Moves tried per [`FastIndex::rehome`] call.
pub const REHOME_BUDGET: usize = 4096;

impl FastIndex {
    /// `overflow`: overflow positions (the size of the `fast_ul` /
    /// `fast_dl` hash, at most [`FAST_OVF_SIZE`]).
    pub fn new(dir: Dir, overflow: u32) -> Self {
        let name = match dir {
            Dir::Ul => "fast_ul_lines",
            Dir::Dl => "fast_dl_lines",
        };
        let ovf = match dir {
            Dir::Ul => "fast_ul overflow",
            Dir::Dl => "fast_dl overflow",
        };
        let pool = Slots::new(name, FAST_POOL_SIZE).top_down();
        let ovf = Slots::new(ovf, overflow.min(FAST_OVF_SIZE));
        FastIndex {
            dir,
            pool,
            ovf,
            keys: HashMap::new(),
            direct: HashMap::new(),
            away: VecDeque::new(),
            rehome_due: None,
        }
    }

    /// The same index over another (smaller) entry pool, before any put
    /// (for tests that see slots reused).
    pub fn with_pool(self, pool: Slots) -> Self {
        FastIndex { pool, ..self }
    }

    /// Direct reference position of a map key (host order for UE addresses).
    pub fn position(&self, key: u32) -> u32 {
        match self.dir {
            Dir::Ul => key & FAST_IDX_MASK,
            Dir::Dl => u32::from_be(key) & FAST_IDX_MASK,
        }
    }

    /// Whether [`FastIndex::put`] of every `(key, entry)` will find its
    /// pool slot and overflow position at `now`.
    pub fn check<'a>(
        &mut self,
        puts: impl IntoIterator<Item = (u32, &'a FastEntry)>,
        now: Instant,
    ) -> Result<(), SlotsFull> {
        let (mut slots, mut ovf) = (0usize, 0usize);
        let mut claimed = HashSet::new();
        for (key, e) in puts {
            match self.keys.get(&key) {
                Some(o) if o.entry == *e => {}
                Some(_) => slots += 1,
                None => {
                    slots += 1;
                    let pos = self.position(key);
                    if self.direct.contains_key(&pos) || !claimed.insert(pos) {
                        ovf += 1;
                    }
                }
            }
        }
        self.pool.ensure(slots, now)?;
        self.ovf.ensure(ovf, now)
    }

    /// Publishes `e` as the entry of `key`: a fresh slot, then the
    /// reference switch (for a new key on an overflow position, then its
    /// hash element), then the old slot into quarantine. An unchanged entry
    /// writes nothing.
    pub fn put<M: MapStore>(&mut self, maps: &mut M, key: u32, e: &FastEntry, now: Instant) -> Result<(), MapError> {
        let old = self.keys.get(&key).copied();
        if old.is_some_and(|o| o.entry == *e) {
            return Ok(());
        }
        let full = |f: SlotsFull| MapError { map: f.table, msg: f.to_string() };
        let pos = match old {
            Some(o) => o.pos,
            None => {
                let direct = self.position(key);
                if self.direct.contains_key(&direct) {
                    FAST_IDX_SIZE + self.ovf.alloc(now).map_err(full)?
                } else {
                    direct
                }
            }
        };
        let new_ovf = old.is_none() && pos >= FAST_IDX_SIZE;
        // Home, else a slot that is no installed key's home.
        let (direct, ovf) = (&self.direct, &self.ovf);
        let home_of_a_key =
            |i: u32| if i < FAST_IDX_SIZE { direct.contains_key(&i) } else { ovf.is_taken(i - FAST_IDX_SIZE) };
        let slot = match self.pool.alloc_at(pos, now).map_or_else(|| self.pool.alloc_avoiding(now, home_of_a_key), Ok) {
            Ok(slot) => slot,
            Err(f) => {
                if new_ovf {
                    self.ovf.cancel(pos - FAST_IDX_SIZE);
                }
                return Err(full(f));
            }
        };
        let v = FastEntry { flags: e.flags | FAST_F_IDX, key, ..*e };
        if let Err(err) = maps.put_fast_slot(self.dir, slot, &v) {
            // Possibly half written, never referenced: reusable after the grace period.
            self.pool.release(slot, now);
            if new_ovf {
                self.ovf.cancel(pos - FAST_IDX_SIZE);
            }
            return Err(err);
        }
        if let Err(err) = maps.set_fast_ref(self.dir, pos, slot) {
            self.pool.release(slot, now);
            if new_ovf {
                self.ovf.release(pos - FAST_IDX_SIZE, now);
            }
            return Err(err);
        }
        if new_ovf {
            if let Err(err) = maps.put_fast_ovf(self.dir, key, pos) {
                // The reference is unreachable without the hash element.
                let _ = maps.set_fast_ref(self.dir, pos, FAST_REF_NONE);
                self.pool.release(slot, now);
                self.ovf.release(pos - FAST_IDX_SIZE, now);
                return Err(err);
            }
        } else if old.is_none() {
            self.direct.insert(pos, key);
        }
        self.keys.insert(key, Owner { pos, slot, entry: *e });
        if let Some(o) = old {
            self.pool.release(o.slot, now);
        }
        if slot != pos {
            self.away.push_back(key);
            self.rehome_due.get_or_insert(now + GRACE);
        }
        Ok(())
    }

    /// Moves entries that are away from their home slot back into it where
    /// that slot is free (at most `budget` tries); returns how many moved.
    /// Each move is an update to the same entry: the home slot written,
    /// the reference switched, the away slot into quarantine.
    pub fn rehome<M: MapStore>(&mut self, maps: &mut M, now: Instant, budget: usize) -> Result<usize, MapError> {
        let mut moved = 0;
        let mut waiting = VecDeque::new();
        let mut result = Ok(());
        for _ in 0..budget {
            let Some(key) = self.away.pop_front() else { break };
            let Some(o) = self.keys.get(&key).copied() else { continue };
            if o.slot == o.pos {
                continue;
            }
            let Some(home) = self.pool.alloc_at(o.pos, now) else {
                waiting.push_back(key);
                continue;
            };
            let v = FastEntry { flags: o.entry.flags | FAST_F_IDX, key, ..o.entry };
            if let Err(e) =
                maps.put_fast_slot(self.dir, home, &v).and_then(|()| maps.set_fast_ref(self.dir, o.pos, home))
            {
                // The reference may name either slot: keep both taken
                // until the grace period says neither is read.
                self.pool.release(home, now);
                waiting.push_back(key);
                result = Err(e);
                break;
            }
            self.pool.release(o.slot, now);
            self.keys.insert(key, Owner { slot: home, ..o });
            moved += 1;
        }
        self.away.extend(waiting);
        self.rehome_due = if self.away.is_empty() {
            None
        } else if moved > 0 || self.away.len() > budget {
            Some(now + Duration::from_millis(1))
        } else {
            Some(now + GRACE)
        };
        result.map(|()| moved)
    }

    /// When [`FastIndex::rehome`] has entries to move.
    pub fn rehome_due(&self) -> Option<Instant> {
        self.rehome_due
    }

    /// Entries away from their home slot.
    pub fn away(&self) -> usize {
        self.keys.values().filter(|o| o.slot != o.pos).count()
    }

    /// Unpublishes the entry of `key`: its hash element (if on an overflow
    /// position), its reference, then its slot and position into
    /// quarantine.
    pub fn del<M: MapStore>(&mut self, maps: &mut M, key: u32, now: Instant) -> Result<(), MapError> {
        let Some(o) = self.keys.get(&key).copied() else { return Ok(()) };
        if o.pos >= FAST_IDX_SIZE {
            maps.del_fast_ovf(self.dir, key)?;
        }
        maps.set_fast_ref(self.dir, o.pos, FAST_REF_NONE)?;
        self.keys.remove(&key);
        if o.pos >= FAST_IDX_SIZE {
            self.ovf.release(o.pos - FAST_IDX_SIZE, now);
        } else {
            self.direct.remove(&o.pos);
        }
        self.pool.release(o.slot, now);
        Ok(())
    }

    /// The pool slot `key` is published in, if any.
    pub fn slot_of(&self, key: u32) -> Option<u32> {
        self.keys.get(&key).map(|o| o.slot)
    }

    /// The reference position of `key`, if published.
    pub fn position_of(&self, key: u32) -> Option<u32> {
        self.keys.get(&key).map(|o| o.pos)
    }

    pub fn pool(&self) -> &Slots {
        &self.pool
    }
}
