//! The direct-indexed fast entries (bpf/maps.h, "Direct-indexed fast
//! entries"): a reference array (`fast_ul_ref` / `fast_dl_ref`, indexed by
//! TEID or UE address masked to [`FAST_IDX_BITS`]) of slot numbers into an
//! entry pool (`fast_ul_idx` / `fast_dl_idx`), kept copy-on-write.
//!
//! Why a program never sees a torn entry:
//! - a pool slot is written only when it is free: never published, or
//!   released at least [`super::slots::GRACE`] earlier (no program that
//!   loaded a reference to it can still be running);
//! - the reference switches with one aligned 32-bit store (through mmap,
//!   [`MapStore::set_fast_ref`]), after the slot's entry is complete; the
//!   program loads the reference once and the entry through it (an address
//!   dependency), so it sees the old entry or the new one, whole;
//! - nothing caches a slot number across packets (the program's only
//!   per-CPU memo holds next hops, invalidated by a generation).
//!
//! The first key on a position owns it until deleted; a colliding key is
//! served from the hash only. When the pool is exhausted (only possible
//! with heavy churn inside one grace period), an update drops the key's
//! reference instead: the key is served from the hash, which is always
//! current.

use super::maps::{Dir, FastEntry, MapError, MapStore, FAST_F_IDX, FAST_IDX_MASK, FAST_POOL_SIZE, FAST_REF_NONE};
use super::slots::Slots;
use std::collections::HashMap;
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
struct Owner {
    /// The map key (TEID, or UE address in network order).
    key: u32,
    slot: u32,
    /// The entry in the slot (without FAST_F_IDX / key).
    entry: FastEntry,
}

/// One direction's reference array and entry pool.
#[derive(Debug)]
pub struct FastIndex {
    dir: Dir,
    pool: Slots,
    /// Reference position -> owner.
    owners: HashMap<u32, Owner>,
}

impl FastIndex {
    pub fn new(dir: Dir) -> Self {
        let name = match dir {
            Dir::Ul => "fast_ul_idx",
            Dir::Dl => "fast_dl_idx",
        };
        FastIndex::with_pool(dir, Slots::new(name, FAST_POOL_SIZE))
    }

    pub fn with_pool(dir: Dir, pool: Slots) -> Self {
        FastIndex { dir, pool, owners: HashMap::new() }
    }

    /// Reference position of a map key (host order for UE addresses).
    pub fn position(&self, key: u32) -> u32 {
        match self.dir {
            Dir::Ul => key & FAST_IDX_MASK,
            Dir::Dl => u32::from_be(key) & FAST_IDX_MASK,
        }
    }

    /// Publishes `e` as the entry of `key` (whose hash entry is written
    /// already): a fresh slot, then the reference switch, then the old slot
    /// into quarantine. Unchanged entries and colliding keys write nothing.
    pub fn put<M: MapStore>(&mut self, maps: &mut M, key: u32, e: &FastEntry, now: Instant) -> Result<(), MapError> {
        let pos = self.position(key);
        match self.owners.get(&pos) {
            Some(o) if o.key != key || o.entry == *e => return Ok(()),
            _ => {}
        }
        let Ok(slot) = self.pool.alloc(now) else {
            // Served from the hash until a later update finds a slot.
            return self.del(maps, key, now);
        };
        let v = FastEntry { flags: e.flags | FAST_F_IDX, key, ..*e };
        if let Err(err) = maps.put_fast_slot(self.dir, slot, &v) {
            // Possibly half written, never referenced: reusable after the grace period.
            self.pool.release(slot, now);
            return Err(err);
        }
        if let Err(err) = maps.set_fast_ref(self.dir, pos, slot) {
            self.pool.release(slot, now);
            return Err(err);
        }
        if let Some(old) = self.owners.insert(pos, Owner { key, slot, entry: *e }) {
            self.pool.release(old.slot, now);
        }
        Ok(())
    }

    /// Unpublishes the entry of `key` (before its hash entry is removed).
    pub fn del<M: MapStore>(&mut self, maps: &mut M, key: u32, now: Instant) -> Result<(), MapError> {
        let pos = self.position(key);
        if self.owners.get(&pos).is_some_and(|o| o.key == key) {
            maps.set_fast_ref(self.dir, pos, FAST_REF_NONE)?;
            let old = self.owners.remove(&pos).expect("checked");
            self.pool.release(old.slot, now);
        }
        Ok(())
    }

    /// The pool slot `key` is published in, if any.
    pub fn slot_of(&self, key: u32) -> Option<u32> {
        self.owners.get(&self.position(key)).filter(|o| o.key == key).map(|o| o.slot)
    }

    pub fn pool(&self) -> &Slots {
        &self.pool
    }
}
