//! The load-oblivious hashing baselines: the primary host on the slice's
//! ring, and Maglev's table.

use super::{Balancer, Loads, Request, Scheme, Selection};
use crate::maglev::MaglevTable;
use crate::procedure::{HostId, MTmsi, SliceId};
use crate::ring::Ring;
use std::collections::{BTreeMap, BTreeSet};

pub struct ConsistentHashing {
    vnodes: u32,
    rings: BTreeMap<SliceId, Ring>,
}

impl ConsistentHashing {
    pub fn new(vnodes: u32) -> Self {
        ConsistentHashing { vnodes, rings: BTreeMap::new() }
    }

    /// The ring of a slice, if it has hosts.
    pub(super) fn ring(&self, slice: SliceId) -> Option<&Ring> {
        self.rings.get(&slice)
    }
}

impl Balancer for ConsistentHashing {
    fn scheme(&self) -> Scheme {
        Scheme::ConsistentHashing
    }

    fn add_host(&mut self, slice: SliceId, host: HostId) {
        self.rings.entry(slice).or_insert_with(|| Ring::new(self.vnodes)).add(host);
    }

    fn remove_host(&mut self, slice: SliceId, host: HostId) {
        if let Some(r) = self.rings.get_mut(&slice) {
            r.remove(host);
        }
    }

    fn has_host(&self, slice: SliceId, host: HostId) -> bool {
        self.rings.get(&slice).is_some_and(|r| r.contains(host))
    }

    fn owner(&self, slice: SliceId, ue: MTmsi) -> Option<HostId> {
        self.rings.get(&slice)?.primary(ue)
    }

    fn select(&mut self, req: &Request, _loads: &Loads) -> Option<Selection> {
        Some(Selection { host: self.owner(req.slice, req.ue)?, violation: None })
    }
}

pub struct Maglev {
    size: usize,
    slices: BTreeMap<SliceId, (BTreeSet<HostId>, MaglevTable)>,
}

impl Maglev {
    /// `size`: the table's entries, a prime.
    pub fn new(size: usize) -> Self {
        Maglev { size, slices: BTreeMap::new() }
    }

    fn rebuild(&mut self, slice: SliceId) {
        if let Some((hosts, table)) = self.slices.get_mut(&slice) {
            *table = MaglevTable::build(&hosts.iter().copied().collect::<Vec<_>>(), self.size);
        }
    }
}

impl Balancer for Maglev {
    fn scheme(&self) -> Scheme {
        Scheme::Maglev
    }

    fn add_host(&mut self, slice: SliceId, host: HostId) {
        let e = self.slices.entry(slice).or_insert_with(|| (BTreeSet::new(), MaglevTable::build(&[], 0)));
        if e.0.insert(host) {
            self.rebuild(slice);
        }
    }

    fn remove_host(&mut self, slice: SliceId, host: HostId) {
        if self.slices.get_mut(&slice).is_some_and(|e| e.0.remove(&host)) {
            self.rebuild(slice);
        }
    }

    fn has_host(&self, slice: SliceId, host: HostId) -> bool {
        self.slices.get(&slice).is_some_and(|e| e.0.contains(&host))
    }

    fn owner(&self, slice: SliceId, ue: MTmsi) -> Option<HostId> {
        self.slices.get(&slice)?.1.lookup(ue)
    }

    fn select(&mut self, req: &Request, _loads: &Loads) -> Option<Selection> {
        Some(Selection { host: self.owner(req.slice, req.ue)?, violation: None })
    }
}
