//! Maglev's lookup table (Eisenbud et al., NSDI 2016, 3.4): each host fills
//! the table in the order of its own permutation (offset and skip from the
//! crate's one hash), in turns, so every host holds M/N entries give or
//! take one, and a change of hosts rewrites few entries of the others.

use crate::hash::{hash64, seed};
use crate::procedure::{HostId, MTmsi};

#[derive(Clone, Debug)]
pub struct MaglevTable {
    entries: Vec<HostId>,
}

impl MaglevTable {
    /// A prime well above 100 times the hosts (Maglev 3.4 uses 65537).
    pub const DEFAULT_SIZE: usize = 65_537;

    /// Populates a table of `size` entries (a prime) for `hosts`; empty if
    /// there are no hosts.
    pub fn build(hosts: &[HostId], size: usize) -> Self {
        let mut hosts = hosts.to_vec();
        hosts.sort_unstable();
        hosts.dedup();
        if hosts.is_empty() || size == 0 {
            return MaglevTable { entries: Vec::new() };
        }
        let m = size as u64;
        let perm: Vec<(u64, u64)> = hosts
            .iter()
            .map(|h| {
                let offset = hash64(seed::MAGLEV_OFFSET, u64::from(h.0)) % m;
                let skip = hash64(seed::MAGLEV_SKIP, u64::from(h.0)) % (m - 1).max(1) + 1;
                (offset, skip)
            })
            .collect();
        let mut next = vec![0u64; hosts.len()];
        let mut entry: Vec<Option<HostId>> = vec![None; size];
        let mut filled = 0;
        'fill: loop {
            for (i, &host) in hosts.iter().enumerate() {
                let (offset, skip) = perm[i];
                let mut c = (offset + next[i] * skip) % m;
                while entry[c as usize].is_some() {
                    next[i] += 1;
                    c = (offset + next[i] * skip) % m;
                }
                entry[c as usize] = Some(host);
                next[i] += 1;
                filled += 1;
                if filled == size {
                    break 'fill;
                }
            }
        }
        MaglevTable { entries: entry.into_iter().map(|e| e.expect("every entry filled")).collect() }
    }

    pub fn lookup(&self, ue: MTmsi) -> Option<HostId> {
        if self.entries.is_empty() {
            return None;
        }
        let i = hash64(seed::KEY, u64::from(ue.0)) % self.entries.len() as u64;
        Some(self.entries[i as usize])
    }

    pub fn entries(&self) -> &[HostId] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn hosts(n: u32) -> Vec<HostId> {
        (0..n).map(HostId).collect()
    }

    fn counts(t: &MaglevTable) -> HashMap<HostId, usize> {
        let mut c = HashMap::new();
        for h in t.entries() {
            *c.entry(*h).or_default() += 1;
        }
        c
    }

    #[test]
    fn every_host_holds_its_share_within_one_entry() {
        for n in [1, 3, 10, 100] {
            let t = MaglevTable::build(&hosts(n), MaglevTable::DEFAULT_SIZE);
            let c = counts(&t);
            assert_eq!(c.len(), n as usize);
            let (lo, hi) = (c.values().min().unwrap(), c.values().max().unwrap());
            assert!(hi - lo <= 1, "n={n}: {lo}..{hi}");
        }
    }

    #[test]
    fn removing_a_host_disrupts_few_other_entries() {
        // Maglev 5.3 (Fig. 11): with M = 65537 a backend's removal changes
        // about 1-2% of the other entries; allow up to 3%.
        let before = MaglevTable::build(&hosts(10), MaglevTable::DEFAULT_SIZE);
        let gone = HostId(3);
        let rest: Vec<HostId> = hosts(10).into_iter().filter(|&h| h != gone).collect();
        let after = MaglevTable::build(&rest, MaglevTable::DEFAULT_SIZE);
        let (mut kept_owner, mut changed) = (0usize, 0usize);
        for (a, b) in before.entries().iter().zip(after.entries()) {
            if *a != gone {
                kept_owner += 1;
                changed += usize::from(a != b);
            }
            assert_ne!(*b, gone);
        }
        let pct = 100.0 * changed as f64 / kept_owner as f64;
        assert!(pct < 3.0, "{pct:.2}% of surviving hosts' entries changed");
    }

    #[test]
    fn empty_without_hosts() {
        assert_eq!(MaglevTable::build(&[], 7).lookup(MTmsi(1)), None);
    }
}
