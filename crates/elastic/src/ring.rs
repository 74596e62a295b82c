//! A consistent-hashing ring with virtual nodes: a UE's primary host is the
//! first host clockwise from its key, its replica hosts the next distinct
//! ones (seed 004 5.1, Fig. 5).

use crate::hash::{hash64, seed};
use crate::procedure::{HostId, MTmsi};
use std::collections::BTreeSet;

#[derive(Clone, Debug)]
pub struct Ring {
    vnodes_per_host: u32,
    /// (position, host), sorted by position.
    points: Vec<(u64, HostId)>,
    hosts: BTreeSet<HostId>,
}

/// A UE's primary host before and after a change of the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub ue: MTmsi,
    pub from: Option<HostId>,
    pub to: Option<HostId>,
}

impl Ring {
    pub const DEFAULT_VNODES: u32 = 160;

    pub fn new(vnodes_per_host: u32) -> Self {
        Ring { vnodes_per_host: vnodes_per_host.max(1), points: Vec::new(), hosts: BTreeSet::new() }
    }

    /// A key's position on the ring.
    pub fn key_position(ue: MTmsi) -> u64 {
        hash64(seed::KEY, u64::from(ue.0))
    }

    fn vnode_position(host: HostId, v: u32) -> u64 {
        hash64(seed::VNODE, (u64::from(host.0) << 32) | u64::from(v))
    }

    /// Adds a host; false if it was there.
    pub fn add(&mut self, host: HostId) -> bool {
        if !self.hosts.insert(host) {
            return false;
        }
        self.points.extend((0..self.vnodes_per_host).map(|v| (Self::vnode_position(host, v), host)));
        self.points.sort_unstable();
        true
    }

    /// Removes a host; false if it was not there.
    pub fn remove(&mut self, host: HostId) -> bool {
        if !self.hosts.remove(&host) {
            return false;
        }
        self.points.retain(|&(_, h)| h != host);
        true
    }

    pub fn contains(&self, host: HostId) -> bool {
        self.hosts.contains(&host)
    }

    pub fn hosts(&self) -> impl Iterator<Item = HostId> + '_ {
        self.hosts.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The UE's primary host.
    pub fn primary(&self, ue: MTmsi) -> Option<HostId> {
        self.walk(ue).next()
    }

    /// The primary and then up to `n - 1` replica hosts, all distinct.
    pub fn candidates(&self, ue: MTmsi, n: usize) -> Vec<HostId> {
        let mut out = Vec::with_capacity(n);
        for h in self.walk(ue) {
            if out.len() == n.min(self.hosts.len()) {
                break;
            }
            if !out.contains(&h) {
                out.push(h);
            }
        }
        out
    }

    /// Hosts clockwise from the UE's key, once round the ring.
    fn walk(&self, ue: MTmsi) -> impl Iterator<Item = HostId> + '_ {
        let start = self.points.partition_point(|&(p, _)| p < Self::key_position(ue));
        let (a, b) = self.points.split_at(start);
        b.iter().chain(a).map(|&(_, h)| h)
    }

    /// The UEs among `ues` whose primary differs between `self` (before)
    /// and `after`: the UE contexts to migrate.
    pub fn primary_moves(&self, after: &Ring, ues: &[MTmsi]) -> Vec<Move> {
        ues.iter()
            .filter_map(|&ue| {
                let (from, to) = (self.primary(ue), after.primary(ue));
                (from != to).then_some(Move { ue, from, to })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ring(hosts: &[u32]) -> Ring {
        let mut r = Ring::new(Ring::DEFAULT_VNODES);
        for &h in hosts {
            r.add(HostId(h));
        }
        r
    }

    #[test]
    fn keys_spread_over_hosts() {
        let r = ring(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let mut n = [0u32; 10];
        for k in 0..100_000 {
            n[r.primary(MTmsi(k)).unwrap().0 as usize] += 1;
        }
        // 160 virtual nodes keep every host within ~25% of its share.
        assert!(n.iter().all(|&c| (7_500..12_500).contains(&c)), "{n:?}");
    }

    #[test]
    fn empty_ring_has_no_host() {
        let r = Ring::new(4);
        assert_eq!(r.primary(MTmsi(1)), None);
        assert!(r.candidates(MTmsi(1), 3).is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Replica sets are distinct, start at the primary, and have
        /// min(n, hosts) members.
        #[test]
        fn candidates_distinct(hosts in proptest::collection::btree_set(0u32..1000, 1..20),
                               key in any::<u32>(), n in 1usize..6) {
            let r = ring(&hosts.iter().copied().collect::<Vec<_>>());
            let c = r.candidates(MTmsi(key), n);
            prop_assert_eq!(c.len(), n.min(hosts.len()));
            prop_assert_eq!(c[0], r.primary(MTmsi(key)).unwrap());
            let set: BTreeSet<_> = c.iter().collect();
            prop_assert_eq!(set.len(), c.len());
            prop_assert!(c.iter().all(|h| hosts.contains(&h.0)));
        }

        /// Adding a host moves keys only onto it; removing it moves back
        /// exactly those keys; the ring is as before.
        #[test]
        fn add_moves_only_to_new_host(hosts in proptest::collection::btree_set(0u32..1000, 1..12),
                                      new in 1000u32..2000, keys in proptest::collection::vec(any::<u32>(), 1..200)) {
            let before = ring(&hosts.iter().copied().collect::<Vec<_>>());
            let mut after = before.clone();
            prop_assert!(after.add(HostId(new)));
            let ues: Vec<MTmsi> = keys.into_iter().map(MTmsi).collect();
            let moves = before.primary_moves(&after, &ues);
            prop_assert!(moves.iter().all(|m| m.to == Some(HostId(new))));
            let mut back = after.clone();
            prop_assert!(back.remove(HostId(new)));
            let moved_back = after.primary_moves(&back, &ues);
            prop_assert_eq!(moves.len(), moved_back.len());
            prop_assert_eq!(back.points, before.points);
        }

        /// Removing a host moves only its own keys, and replica sets of
        /// other keys lose at most that host.
        #[test]
        fn remove_moves_only_its_keys(hosts in proptest::collection::btree_set(0u32..1000, 2..12),
                                      keys in proptest::collection::vec(any::<u32>(), 1..200)) {
            let hosts: Vec<u32> = hosts.into_iter().collect();
            let gone = HostId(hosts[0]);
            let before = ring(&hosts);
            let mut after = before.clone();
            after.remove(gone);
            for k in keys {
                let ue = MTmsi(k);
                let (p0, p1) = (before.primary(ue).unwrap(), after.primary(ue).unwrap());
                prop_assert!(p0 == p1 || p0 == gone);
                prop_assert_ne!(p1, gone);
                let c0: Vec<_> = before.candidates(ue, 3).into_iter().filter(|&h| h != gone).collect();
                let c1 = after.candidates(ue, 3);
                prop_assert_eq!(&c1[..c0.len()], &c0[..]);
            }
        }
    }
}
