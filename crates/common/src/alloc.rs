//! Identifiers a peer must not be able to guess (TEIDs, SEIDs, M-TMSIs):
//! drawn at random from their range, never one still in use.
//!
//! Each NF owns an [`IdDraw`] per identifier space and passes it the test
//! of what is in use; tests seed it so that a run can be repeated.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::ops::RangeInclusive;

/// Random draws from a range of `u64`.
#[derive(Debug, Clone)]
pub struct IdDraw {
    rng: StdRng,
}

impl IdDraw {
    /// Seeded from the OS.
    pub fn from_entropy() -> Self {
        IdDraw { rng: StdRng::from_os_rng() }
    }

    /// Repeatable (tests, benches).
    pub fn seeded(seed: u64) -> Self {
        IdDraw { rng: StdRng::seed_from_u64(seed) }
    }

    /// `seed` if given, else from the OS.
    pub fn new(seed: Option<u64>) -> Self {
        seed.map_or_else(Self::from_entropy, Self::seeded)
    }

    /// A value of `range` for which `in_use` is false; `None` when every
    /// value is in use. Random draws first; when the range is nearly full, a
    /// scan from a random point, so a free value is always found.
    pub fn draw(&mut self, range: RangeInclusive<u64>, mut in_use: impl FnMut(u64) -> bool) -> Option<u64> {
        let (lo, hi) = (*range.start(), *range.end());
        if lo > hi {
            return None;
        }
        for _ in 0..32 {
            let v = self.rng.random_range(lo..=hi);
            if !in_use(v) {
                return Some(v);
            }
        }
        let start = self.rng.random_range(lo..=hi);
        (start..=hi).chain(lo..start).find(|v| !in_use(*v))
    }

    /// [`draw`](Self::draw) over `u32`.
    pub fn draw_u32(&mut self, range: RangeInclusive<u32>, mut in_use: impl FnMut(u32) -> bool) -> Option<u32> {
        let r = u64::from(*range.start())..=u64::from(*range.end());
        self.draw(r, |v| in_use(v as u32)).map(|v| v as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn draws_are_in_range_unused_and_not_sequential() {
        let mut d = IdDraw::seeded(7);
        let mut used = HashSet::new();
        let mut prev = None;
        let mut steps_of_one = 0;
        for _ in 0..1000 {
            let v = d.draw(1..=1_000_000, |v| used.contains(&v)).unwrap();
            assert!((1..=1_000_000).contains(&v));
            assert!(used.insert(v), "{v} handed out twice");
            if prev.is_some_and(|p: u64| v == p + 1) {
                steps_of_one += 1;
            }
            prev = Some(v);
        }
        assert!(steps_of_one < 5, "{steps_of_one} draws followed their predecessor");
    }

    #[test]
    fn a_full_range_is_filled_then_refused() {
        let mut d = IdDraw::seeded(1);
        let mut used = HashSet::new();
        for _ in 0..=20u32 {
            let v = d.draw_u32(10..=30, |v| used.contains(&v)).expect("a free value remains");
            assert!(used.insert(v));
        }
        assert_eq!(d.draw_u32(10..=30, |v| used.contains(&v)), None);
        used.remove(&17);
        assert_eq!(d.draw_u32(10..=30, |v| used.contains(&v)), Some(17));
        assert!(IdDraw::seeded(1).draw(0..=u64::MAX, |_| false).is_some());
    }
}
