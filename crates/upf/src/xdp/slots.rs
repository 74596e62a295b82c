//! Slot allocation for the fast path's array maps, with a grace period.
//!
//! The XDP program reads array slots (FARs, QERs, URR counters, the pooled
//! fast entries of `fast_ul_lines` / `fast_dl_lines`) through a reference
//! it loaded a moment before (a PDR set's `far_idx`, a fast entry's
//! `qer_idx`, a reference in `fast_*_lines`). A slot is therefore never
//! rewritten in place while it is published: an update writes a free slot
//! and switches the reference (copy on write), and the slot it replaced is
//! [`Slots::release`]d into a quarantine. XDP programs run inside an RCU
//! read-side section of at most one NAPI poll (microseconds, well under a
//! millisecond), so once [`GRACE`] has passed since the switch no program
//! that could have loaded the old reference is still running, and
//! [`Slots::alloc`] may hand the slot out again. Time is passed in
//! (`now`), never read here.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a released slot stays unused: far longer than any XDP program
/// run (one RCU read-side section), short enough that session churn does
/// not exhaust a table (at 100 ms, 262,144 slots allow 2.6 million
/// replacements per second).
pub const GRACE: Duration = Duration::from_millis(100);

/// A table is full: every slot is in use or waiting for its grace period.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "fast-path {table} table full: {capacity} slots, {quarantined} of them waiting {grace_ms} ms for in-flight packets"
)]
pub struct SlotsFull {
    pub table: &'static str,
    pub capacity: u32,
    pub quarantined: usize,
    pub grace_ms: u64,
}

/// What a slot is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Free,
    Taken,
    Quarantined,
}

/// Fixed-capacity index allocator with a quarantine for released slots.
#[derive(Debug, Clone)]
pub struct Slots {
    table: &'static str,
    /// What every slot is doing (slots never handed out are `Free`).
    uses: Vec<Use>,
    /// Slots that became free again; may hold slots `alloc_at` took since
    /// (skipped when popped).
    free: Vec<u32>,
    /// Free slots an [`Slots::alloc_avoiding`] refused (homes of installed
    /// keys, say): tried again only when no other slot is left, so they are
    /// not popped and refused at every allocation. May hold slots
    /// `alloc_at` took since (dropped when found).
    parked: Vec<u32>,
    /// Released slots with their release time, oldest first.
    quarantine: VecDeque<(Instant, u32)>,
    /// Slots never handed out are scanned from here (upwards, or downwards
    /// from the top with `top_down`).
    next: u32,
    cap: u32,
    grace: Duration,
    taken: usize,
    top_down: bool,
}

impl Slots {
    /// `table` names the map in errors.
    pub fn new(table: &'static str, cap: u32) -> Self {
        Slots::with_grace(table, cap, GRACE)
    }

    pub fn with_grace(table: &'static str, cap: u32, grace: Duration) -> Self {
        Slots {
            table,
            uses: vec![Use::Free; cap as usize],
            free: Vec::new(),
            parked: Vec::new(),
            quarantine: VecDeque::new(),
            next: 0,
            cap,
            grace,
            taken: 0,
            top_down: false,
        }
    }

    /// The same allocator handing out never-used slots from the top down
    /// (for a pool whose low slots are the home slots of keys, which
    /// [`Slots::alloc_at`] takes).
    pub fn top_down(self) -> Self {
        Slots { top_down: true, ..self }
    }

    fn full(&self) -> SlotsFull {
        SlotsFull {
            table: self.table,
            capacity: self.cap,
            quarantined: self.quarantine.len(),
            grace_ms: self.grace.as_millis() as u64,
        }
    }

    fn take(&mut self, i: u32) -> u32 {
        self.uses[i as usize] = Use::Taken;
        self.taken += 1;
        i
    }

    /// A slot no program can be reading: never used, or released at least
    /// the grace period before `now`.
    pub fn alloc(&mut self, now: Instant) -> Result<u32, SlotsFull> {
        self.alloc_avoiding(now, |_| false)
    }

    /// [`Slots::alloc`] of a slot `avoid` does not refuse (a refused slot
    /// stays free): freed slots first (the most recent first), then slots
    /// never used, then slots refused before.
    pub fn alloc_avoiding(&mut self, now: Instant, avoid: impl Fn(u32) -> bool) -> Result<u32, SlotsFull> {
        self.reclaim(now);
        while let Some(i) = self.free.pop().or_else(|| self.never_used()) {
            if self.uses[i as usize] != Use::Free {
                continue;
            }
            if avoid(i) {
                self.parked.push(i);
                continue;
            }
            return Ok(self.take(i));
        }
        // Nothing else is left: the refused ones, if one is acceptable now.
        self.parked.retain(|&i| self.uses[i as usize] == Use::Free);
        match self.parked.iter().position(|&i| !avoid(i)) {
            Some(p) => {
                let i = self.parked.swap_remove(p);
                Ok(self.take(i))
            }
            None => Err(self.full()),
        }
    }

    /// The next slot never handed out by number (it may have been taken
    /// by [`Slots::alloc_at`] since).
    fn never_used(&mut self) -> Option<u32> {
        (self.next < self.cap).then(|| {
            self.next += 1;
            if self.top_down {
                self.cap - self.next
            } else {
                self.next - 1
            }
        })
    }

    /// Slot `i` if no program can be reading it (as [`Slots::alloc`]
    /// would hand it out), else None.
    pub fn alloc_at(&mut self, i: u32, now: Instant) -> Option<u32> {
        self.reclaim(now);
        (i < self.cap && self.uses[i as usize] == Use::Free).then(|| self.take(i))
    }

    /// Whether `n` slots can be allocated at `now` (none is taken).
    pub fn ensure(&mut self, n: usize, now: Instant) -> Result<(), SlotsFull> {
        self.reclaim(now);
        if self.cap as usize - self.taken - self.quarantine.len() >= n {
            return Ok(());
        }
        Err(self.full())
    }

    /// A slot that was published (some map entry referred to it) and no
    /// longer is, as of `now`: reusable after the grace period.
    pub fn release(&mut self, slot: u32, now: Instant) {
        debug_assert_eq!(self.uses[slot as usize], Use::Taken, "{} slot {slot} released twice", self.table);
        self.uses[slot as usize] = Use::Quarantined;
        self.taken -= 1;
        self.quarantine.push_back((now, slot));
    }

    /// Gives back a slot from [`Slots::alloc`] that was never published
    /// (nothing in the maps refers to it): reusable at once.
    pub fn cancel(&mut self, slot: u32) {
        debug_assert_eq!(self.uses[slot as usize], Use::Taken, "{} slot {slot} cancelled twice", self.table);
        self.uses[slot as usize] = Use::Free;
        self.taken -= 1;
        self.free.push(slot);
    }

    /// Moves the slots whose grace period is over to the free list. Release
    /// times are in call order; a `now` earlier than a release time frees
    /// nothing (safe when a caller's clock is not monotonic).
    fn reclaim(&mut self, now: Instant) {
        while let Some((t, slot)) = self.quarantine.front().copied() {
            if now.checked_duration_since(t).is_none_or(|d| d < self.grace) {
                break;
            }
            self.quarantine.pop_front();
            self.uses[slot as usize] = Use::Free;
            self.free.push(slot);
        }
    }

    /// Whether slot `i` is allocated and not released.
    pub fn is_taken(&self, i: u32) -> bool {
        self.uses.get(i as usize) == Some(&Use::Taken)
    }

    /// Slots allocated and not released.
    pub fn in_use(&self) -> usize {
        self.taken
    }

    /// Slots released and still in their grace period (as of the last
    /// `alloc`).
    pub fn quarantined(&self) -> usize {
        self.quarantine.len()
    }

    pub fn capacity(&self) -> u32 {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_slot_waits_for_the_grace_period() {
        let t0 = Instant::now();
        let mut s = Slots::new("far", 2);
        let a = s.alloc(t0).unwrap();
        let b = s.alloc(t0).unwrap();
        assert_ne!(a, b);
        s.release(a, t0);
        assert_eq!((s.in_use(), s.quarantined()), (1, 1));
        let full = s.alloc(t0 + GRACE - Duration::from_nanos(1)).unwrap_err();
        assert_eq!(full, SlotsFull { table: "far", capacity: 2, quarantined: 1, grace_ms: 100 });
        assert_eq!(
            full.to_string(),
            "fast-path far table full: 2 slots, 1 of them waiting 100 ms for in-flight packets"
        );
        assert_eq!(s.alloc(t0 + GRACE).unwrap(), a);
        assert_eq!((s.in_use(), s.quarantined()), (2, 0));
    }

    #[test]
    fn cancelled_slot_is_reused_at_once() {
        let t0 = Instant::now();
        let mut s = Slots::new("qer", 1);
        let a = s.alloc(t0).unwrap();
        s.cancel(a);
        assert_eq!(s.alloc(t0).unwrap(), a);
    }

    #[test]
    fn a_clock_going_backwards_frees_nothing() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut s = Slots::new("urr", 1);
        let a = s.alloc(t0).unwrap();
        s.release(a, t0);
        assert!(s.alloc(t0 - Duration::from_secs(5)).is_err());
        assert_eq!(s.alloc(t0 + GRACE).unwrap(), a);
    }

    #[test]
    fn a_slot_taken_at_its_number_is_not_handed_out_again() {
        let t0 = Instant::now();
        let mut s = Slots::new("fast_ul_lines", 4);
        assert_eq!(s.alloc_at(1, t0), Some(1));
        assert_eq!(s.alloc_at(1, t0), None, "taken");
        assert_eq!(s.alloc_at(4, t0), None, "out of range");
        let rest: Vec<u32> = (0..3).map(|_| s.alloc(t0).unwrap()).collect();
        assert_eq!(rest, [0, 2, 3]);
        assert!(s.alloc(t0).is_err() && s.ensure(1, t0).is_err());
        // Released: back only after the grace period, by number too.
        s.release(2, t0);
        assert_eq!(s.alloc_at(2, t0 + GRACE / 2), None);
        assert_eq!(s.alloc_at(2, t0 + GRACE), Some(2));
        // A freed slot on the free list that alloc_at took is skipped.
        s.cancel(2);
        assert_eq!(s.alloc_at(2, t0 + GRACE), Some(2));
        assert!(s.alloc(t0 + GRACE).is_err());
        assert_eq!((s.in_use(), s.quarantined()), (4, 0));
    }

    #[test]
    fn top_down_hands_out_high_slots_first() {
        let t0 = Instant::now();
        let mut s = Slots::new("fast_dl_lines", 4).top_down();
        assert_eq!(s.alloc_at(0, t0), Some(0));
        assert_eq!(s.alloc(t0).unwrap(), 3);
        assert_eq!(s.alloc_at(2, t0), Some(2));
        assert_eq!(s.alloc(t0).unwrap(), 1, "2 is skipped");
        assert!(s.alloc(t0).is_err());
    }

    #[test]
    fn a_refused_slot_is_tried_again_only_when_nothing_else_is_left() {
        let t0 = Instant::now();
        let mut s = Slots::new("fast_dl_lines", 8);
        let calls = std::cell::Cell::new(0);
        let avoid_0 = |i| {
            calls.set(calls.get() + 1);
            i == 0
        };
        assert_eq!(s.alloc_avoiding(t0, avoid_0).unwrap(), 1);
        calls.set(0);
        for want in 2..8 {
            assert_eq!(s.alloc_avoiding(t0, avoid_0).unwrap(), want);
        }
        assert_eq!(calls.get(), 6, "the refused slot was asked again");
        assert!(s.alloc_avoiding(t0, avoid_0).is_err());
        assert_eq!(s.alloc_avoiding(t0, |_| false).unwrap(), 0, "taken once acceptable");
        assert!(s.alloc(t0).is_err());
    }

    #[test]
    fn refused_slots_stay_free() {
        let t0 = Instant::now();
        let mut s = Slots::new("fast_dl_lines", 3).top_down();
        assert_eq!(s.alloc_avoiding(t0, |i| i == 2).unwrap(), 1);
        assert_eq!(s.alloc_avoiding(t0, |i| i == 2).unwrap(), 0);
        assert!(s.alloc_avoiding(t0, |i| i == 2).is_err(), "only the refused one is left");
        assert!(!s.is_taken(2) && s.is_taken(1));
        assert_eq!(s.alloc_at(2, t0), Some(2));
        // Freed slots too: 0 and 1 come back (1 first), 1 is refused.
        s.release(0, t0);
        s.release(1, t0);
        assert_eq!(s.alloc_avoiding(t0 + GRACE, |i| i == 1).unwrap(), 0);
        assert_eq!(s.alloc(t0 + GRACE).unwrap(), 1);
        assert!(s.alloc(t0 + GRACE).is_err());
    }

    #[test]
    fn slots_come_back_in_release_order() {
        let t0 = Instant::now();
        let mut s = Slots::new("fast_ul_lines", 3);
        let v: Vec<u32> = (0..3).map(|_| s.alloc(t0).unwrap()).collect();
        s.release(v[2], t0);
        s.release(v[0], t0 + Duration::from_millis(50));
        // Only v[2] is past its grace period at t0 + 120 ms.
        assert_eq!(s.alloc(t0 + Duration::from_millis(120)).unwrap(), v[2]);
        assert!(s.alloc(t0 + Duration::from_millis(120)).is_err());
        assert_eq!(s.alloc(t0 + Duration::from_millis(150)).unwrap(), v[0]);
    }
}
