//! Round robin: each UE is bound to the next host at its first procedure
//! and stays there, since its state does (the baseline of seed 004 7.2
//! balances connections, not their load).

use super::{Balancer, Loads, Request, Scheme, Selection};
use crate::procedure::{HostId, MTmsi, ProcedureKind, SliceId};
use std::collections::{BTreeMap, HashMap};

pub struct RoundRobin {
    slices: BTreeMap<SliceId, (Vec<HostId>, usize)>,
    bindings: HashMap<(SliceId, MTmsi), HostId>,
    max_bindings: usize,
    /// UEs sent round robin without a binding because the table was full.
    pub unbound: u64,
    /// The turn among given candidates ([`Balancer::select_among`]).
    among: usize,
}

impl RoundRobin {
    pub const DEFAULT_MAX_BINDINGS: usize = 1 << 22;

    pub fn new(max_bindings: usize) -> Self {
        RoundRobin { slices: BTreeMap::new(), bindings: HashMap::new(), max_bindings, unbound: 0, among: 0 }
    }
}

impl Balancer for RoundRobin {
    fn scheme(&self) -> Scheme {
        Scheme::RoundRobin
    }

    fn add_host(&mut self, slice: SliceId, host: HostId) {
        let (hosts, _) = self.slices.entry(slice).or_default();
        if !hosts.contains(&host) {
            hosts.push(host);
        }
    }

    fn remove_host(&mut self, slice: SliceId, host: HostId) {
        if let Some((hosts, _)) = self.slices.get_mut(&slice) {
            hosts.retain(|&h| h != host);
        }
        self.bindings.retain(|(s, _), h| !(*s == slice && *h == host));
    }

    fn has_host(&self, slice: SliceId, host: HostId) -> bool {
        self.slices.get(&slice).is_some_and(|(h, _)| h.contains(&host))
    }

    fn owner(&self, slice: SliceId, ue: MTmsi) -> Option<HostId> {
        self.bindings.get(&(slice, ue)).copied()
    }

    fn select(&mut self, req: &Request, _loads: &Loads) -> Option<Selection> {
        if let Some(&host) = self.bindings.get(&(req.slice, req.ue)) {
            return Some(Selection { host, violation: None });
        }
        let (hosts, next) = self.slices.get_mut(&req.slice)?;
        if hosts.is_empty() {
            return None;
        }
        let host = hosts[*next % hosts.len()];
        *next = next.wrapping_add(1);
        if self.bindings.len() < self.max_bindings {
            self.bindings.insert((req.slice, req.ue), host);
        } else {
            self.unbound += 1;
        }
        Some(Selection { host, violation: None })
    }

    /// The hosts that hold the UE's state in turn, procedure after
    /// procedure (whichever UE): no binding, the state is on each.
    fn select_among(&mut self, _req: &Request, _loads: &Loads, candidates: &[HostId]) -> Option<Selection> {
        let host = *candidates.get(self.among % candidates.len().max(1))?;
        self.among = self.among.wrapping_add(1);
        Some(Selection { host, violation: None })
    }

    fn procedure_ended(&mut self, req: &Request) {
        if req.kind == ProcedureKind::Detach {
            self.bindings.remove(&(req.slice, req.ue));
        }
    }
}
