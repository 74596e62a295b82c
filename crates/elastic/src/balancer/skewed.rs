//! Skewed consistent hashing with viable hosts (seed 004 5.1,
//! Algorithm 1): among the UE's primary and replica hosts on its slice's
//! ring, the viable ones are those with an NF whose Eq. 1 completion time
//! meets the procedure's SLO; the most loaded viable host is chosen (so
//! that the others stay light and can be scaled in); with none viable,
//! the host with the least q/c, and the violation is reported.

use super::hashing::ConsistentHashing;
use super::{Balancer, Loads, Request, Scheme, Selection, Violation};
use crate::procedure::{HostId, MTmsi, ProcedureKind, SliceId};

pub struct SkewedCh {
    /// Replica hosts per UE besides the primary (seed 004 uses 2).
    replicas: usize,
    /// The slices' rings, kept as consistent hashing keeps them.
    ch: ConsistentHashing,
    /// Attaches too are placed by Eq. 1 ([`SkewedCh::placing_attaches`]).
    place_attaches: bool,
}

impl SkewedCh {
    pub fn new(vnodes: u32, replicas: usize) -> Self {
        SkewedCh { replicas, ch: ConsistentHashing::new(vnodes), place_attaches: false }
    }

    /// An attach's first message goes to a viable host among its ring
    /// candidates too, not always to the primary (Algorithm 1 line 16).
    /// For a system where a UE stays on the host it attached at (the
    /// elastic MME: no migration to primary and replicas after the attach,
    /// seed 004 5.1), so that the attach is the one choice there is.
    pub fn placing_attaches(mut self) -> Self {
        self.place_attaches = true;
        self
    }

    /// The UE's primary and replica hosts on its slice's ring.
    pub fn candidates(&self, slice: SliceId, ue: MTmsi) -> Vec<HostId> {
        self.ch.ring(slice).map_or_else(Vec::new, |r| r.candidates(ue, 1 + self.replicas))
    }
}

impl Balancer for SkewedCh {
    fn scheme(&self) -> Scheme {
        Scheme::SkewedCh
    }

    fn add_host(&mut self, slice: SliceId, host: HostId) {
        self.ch.add_host(slice, host);
    }

    fn remove_host(&mut self, slice: SliceId, host: HostId) {
        self.ch.remove_host(slice, host);
    }

    fn has_host(&self, slice: SliceId, host: HostId) -> bool {
        self.ch.has_host(slice, host)
    }

    fn owner(&self, slice: SliceId, ue: MTmsi) -> Option<HostId> {
        self.ch.owner(slice, ue)
    }

    fn select(&mut self, req: &Request, loads: &Loads) -> Option<Selection> {
        let ring = self.ch.ring(req.slice)?;
        // Algorithm 1 line 16: an attach's first message goes to its
        // host on the ring, which then holds the context.
        if req.kind == ProcedureKind::Attach && !self.place_attaches {
            return Some(Selection { host: ring.primary(req.ue)?, violation: None });
        }
        let candidates = ring.candidates(req.ue, 1 + self.replicas);
        self.select_among(req, loads, &candidates)
    }

    /// Algorithm 1 lines 6-15 over `candidates`.
    fn select_among(&mut self, req: &Request, loads: &Loads, candidates: &[HostId]) -> Option<Selection> {
        let slo_s = loads.profiles().get(req.kind).slo_s;
        let mut viable: Option<(f64, HostId)> = None;
        let mut least: Option<(f64, HostId)> = None;
        for &h in candidates {
            let Some(qc) = loads.least_q_over_c(h, req.kind) else { continue };
            if loads.viable(h, req.kind) == Some(true) && viable.is_none_or(|(cpu, _)| loads.cpu(h) > cpu) {
                viable = Some((loads.cpu(h), h));
            }
            if least.is_none_or(|(l, _)| qc < l) {
                least = Some((qc, h));
            }
        }
        if let Some((_, host)) = viable {
            return Some(Selection { host, violation: None });
        }
        // None viable (or no candidate runs this service): the least q/c,
        // else the primary.
        let host = least.map_or(*candidates.first()?, |(_, h)| h);
        let estimate_s = loads.completion_estimate_s(host, req.kind).unwrap_or(f64::INFINITY);
        Some(Selection { host, violation: Some(Violation { ue: req.ue, kind: req.kind, host, estimate_s, slo_s }) })
    }
}
