//! The intra-host forwarder (seed 004 5.2-5.3, Algorithm 2): per-service
//! NF instances sharing a core, each with a queue; a procedure's first
//! message goes to the instance with the least Q/C (Eqs. 2-3) and its later
//! messages follow it (tracking by M-TMSI), queued there ahead of new
//! procedures' first messages; the core's time is shared between busy
//! instances in proportion to their priorities (Eq. 4,
//! `C_i = P_i / sum P_j`, `P_i = SLO_min / SLO_i`), and a service whose
//! procedures miss their SLO has its priority raised.

use crate::procedure::{MTmsi, ProcedureKind, Profiles};
use std::collections::{HashMap, VecDeque};

#[derive(Clone, Debug, PartialEq)]
pub struct ForwarderConfig {
    /// NF instances per service, indexed by `ProcedureKind::index`.
    pub instances: [usize; ProcedureKind::COUNT],
    /// `SLO_min`; by default the tightest class SLO.
    pub slo_min_s: Option<f64>,
    /// Consecutive completions over the SLO that raise a service's
    /// priority (seed 004 5.3: "if SLO violations occur for an NF, we
    /// reactively increment its priority": 1).
    pub bump_after: u32,
    /// How much a priority rises (seed 004 5.3: "a small fraction (e.g.,
    /// 0.01)").
    pub bump_step: f64,
    /// The highest priority.
    pub max_priority: f64,
    /// Messages one instance may queue.
    pub max_queue: usize,
    /// Procedures tracked at once.
    pub max_tracked: usize,
    /// One NF instance takes every kind, in one queue: the unified
    /// MME of seed 004 Fig. 9 (`instances` is then ignored).
    pub unified: bool,
    /// `P_i` per service, in place of `SLO_min / SLO_i` (seed 004 Fig. 9
    /// "prioritized": one procedure's NF favoured over another's).
    pub priorities: Option<[f64; ProcedureKind::COUNT]>,
    /// An instance runs the later messages of procedures under way
    /// before new procedures' first messages (in arrival order each), as
    /// `mme-host` takes the S6a and S11 answers of its procedures before
    /// new frames: what a procedure has begun finishes first.
    pub continuing_first: bool,
}

impl Default for ForwarderConfig {
    fn default() -> Self {
        ForwarderConfig {
            instances: [1; ProcedureKind::COUNT],
            slo_min_s: None,
            bump_after: 1,
            bump_step: 0.01,
            max_priority: 1.0,
            max_queue: 4096,
            max_tracked: 1 << 20,
            unified: false,
            priorities: None,
            continuing_first: true,
        }
    }
}

/// An NF instance of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(pub usize);

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dispatched {
    pub instance: InstanceId,
    /// The procedure's first message (the instance was chosen now).
    pub first: bool,
    /// Eq. 2 at the chosen instance, seconds.
    pub estimate_s: f64,
    /// Eq. 2 exceeds the SLO: reported to the NF controller.
    pub predicted_violation: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    #[error("no NF instance serves {0:?}")]
    NoInstance(ProcedureKind),
    #[error("queue of NF instance {0:?} full")]
    QueueFull(InstanceId),
    #[error("procedure tracking table full")]
    TrackingFull,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwarderStats {
    pub dispatched: u64,
    pub predicted_violations: u64,
    pub queue_full: u64,
    pub tracking_full: u64,
    pub bumps: u64,
}

/// A priority raised after repeated SLO violations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bump {
    pub kind: ProcedureKind,
    pub priority: f64,
}

#[derive(Clone, Debug)]
struct Service {
    cost_s: f64,
    slo_s: f64,
    priority: f64,
    consecutive_violations: u32,
}

#[derive(Clone, Debug)]
struct Instance<M> {
    kind: ProcedureKind,
    /// Each message with its UE and cost.
    queue: VecDeque<(MTmsi, M, f64)>,
    /// The first `continuing` messages of `queue` are later messages of
    /// procedures under way, queued ahead of new procedures' first.
    continuing: usize,
    /// Stride scheduling's pass: core time received over priority.
    pass: f64,
}

/// One host's forwarder and the core its instances share; `M` is what a
/// queued message carries.
#[derive(Clone, Debug)]
pub struct Forwarder<M> {
    cfg: ForwarderConfig,
    services: Vec<Service>,
    instances: Vec<Instance<M>>,
    tracking: HashMap<MTmsi, InstanceId>,
    vtime: f64,
    queued: usize,
    pub stats: ForwarderStats,
}

impl<M> Forwarder<M> {
    pub fn new(profiles: &Profiles, cfg: ForwarderConfig) -> Self {
        let slo_min = cfg.slo_min_s.unwrap_or_else(|| profiles.slo_min_s());
        let services = ProcedureKind::ALL
            .iter()
            .map(|&k| {
                let c = profiles.get(k);
                let p = cfg.priorities.map_or(slo_min / c.slo_s, |p| p[k.index()]);
                Service {
                    cost_s: c.cost_s,
                    slo_s: c.slo_s,
                    priority: p.clamp(f64::MIN_POSITIVE, cfg.max_priority),
                    consecutive_violations: 0,
                }
            })
            .collect();
        let instances = if cfg.unified {
            // Its kind names it only: it takes every kind (`serves`).
            vec![Instance { kind: ProcedureKind::Attach, queue: VecDeque::new(), continuing: 0, pass: 0.0 }]
        } else {
            ProcedureKind::ALL
                .iter()
                .flat_map(|&kind| (0..cfg.instances[kind.index()]).map(move |_| kind))
                .map(|kind| Instance { kind, queue: VecDeque::new(), continuing: 0, pass: 0.0 })
                .collect()
        };
        Forwarder {
            cfg,
            services,
            instances,
            tracking: HashMap::new(),
            vtime: 0.0,
            queued: 0,
            stats: ForwarderStats::default(),
        }
    }

    /// `P_i` of a service.
    pub fn priority(&self, kind: ProcedureKind) -> f64 {
        self.services[kind.index()].priority
    }

    pub fn kind(&self, i: InstanceId) -> ProcedureKind {
        self.instances[i.0].kind
    }

    /// `Q_i`: messages queued at an instance.
    pub fn queue_len(&self, i: InstanceId) -> usize {
        self.instances[i.0].queue.len()
    }

    /// Messages queued at all instances.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Whether instance `i` takes procedures of `kind`.
    fn serves(&self, i: usize, kind: ProcedureKind) -> bool {
        self.cfg.unified || self.instances[i].kind == kind
    }

    fn active(&self, i: usize) -> bool {
        !self.instances[i].queue.is_empty()
    }

    fn p(&self, i: usize) -> f64 {
        self.services[self.instances[i].kind.index()].priority
    }

    /// Eq. 4 for instance `i` were it busy: `P_i` over the priorities of
    /// the busy instances and itself (idle instances do not count).
    pub fn share(&self, i: InstanceId) -> f64 {
        let others: f64 = (0..self.instances.len()).filter(|&j| j != i.0 && self.active(j)).map(|j| self.p(j)).sum();
        self.p(i.0) / (self.p(i.0) + others)
    }

    /// Eq. 4 over the busy instances: their shares of the core, summing
    /// to 1.
    pub fn shares(&self) -> Vec<(InstanceId, f64)> {
        let total: f64 = (0..self.instances.len()).filter(|&j| self.active(j)).map(|j| self.p(j)).sum();
        (0..self.instances.len()).filter(|&j| self.active(j)).map(|j| (InstanceId(j), self.p(j) / total)).collect()
    }

    /// Per instance, in a fixed order: kind, `Q_i` and `C_i`, what the
    /// host's monitor samples.
    pub fn loads(&self) -> impl Iterator<Item = (ProcedureKind, f64, f64)> + '_ {
        (0..self.instances.len())
            .map(|i| (self.instances[i].kind, self.instances[i].queue.len() as f64, self.share(InstanceId(i))))
    }

    /// Eq. 3: the instance of `kind` with the least `Q_i / C_i`.
    pub fn optimal(&self, kind: ProcedureKind) -> Option<InstanceId> {
        (0..self.instances.len())
            .filter(|&i| self.serves(i, kind))
            .map(|i| (self.instances[i].queue.len() as f64 / self.share(InstanceId(i)), i))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, i)| InstanceId(i))
    }

    /// Eq. 2 at an instance: `(Q_i / C_i + 1) * T_t`.
    pub fn estimate_s(&self, i: InstanceId) -> f64 {
        self.estimate_for(i, self.instances[i.0].kind)
    }

    /// Eq. 2 for a procedure of `kind` at instance `i`.
    fn estimate_for(&self, i: InstanceId, kind: ProcedureKind) -> f64 {
        (self.instances[i.0].queue.len() as f64 / self.share(i) + 1.0) * self.services[kind.index()].cost_s
    }

    /// Queues a message of the UE's procedure of `kind`, costing `cost_s`
    /// of a full core: at the instance tracked for the procedure, or at
    /// the optimal one for its first message.
    pub fn dispatch(
        &mut self,
        ue: MTmsi,
        kind: ProcedureKind,
        msg: M,
        cost_s: f64,
    ) -> Result<Dispatched, DispatchError> {
        let (instance, first) = match self.tracking.get(&ue) {
            Some(&i) if self.serves(i.0, kind) => (i, false),
            _ => {
                if self.tracking.len() >= self.cfg.max_tracked {
                    self.stats.tracking_full += 1;
                    return Err(DispatchError::TrackingFull);
                }
                (self.optimal(kind).ok_or(DispatchError::NoInstance(kind))?, true)
            }
        };
        let inst = &self.instances[instance.0];
        if inst.queue.len() >= self.cfg.max_queue {
            self.stats.queue_full += 1;
            return Err(DispatchError::QueueFull(instance));
        }
        let estimate_s = self.estimate_for(instance, kind);
        let predicted_violation = first && estimate_s > self.services[kind.index()].slo_s;
        if first {
            self.tracking.insert(ue, instance);
        }
        let inst = &mut self.instances[instance.0];
        if inst.queue.is_empty() {
            // A newly busy instance starts at the current virtual time: no
            // credit for having been idle.
            inst.pass = inst.pass.max(self.vtime);
        }
        // Never ahead of a message of its own UE.
        let ahead =
            !first && self.cfg.continuing_first && inst.queue.iter().skip(inst.continuing).all(|(u, _, _)| *u != ue);
        match ahead {
            true => {
                inst.queue.insert(inst.continuing, (ue, msg, cost_s));
                inst.continuing += 1;
            }
            false => inst.queue.push_back((ue, msg, cost_s)),
        }
        self.queued += 1;
        self.stats.dispatched += 1;
        self.stats.predicted_violations += u64::from(predicted_violation);
        Ok(Dispatched { instance, first, estimate_s, predicted_violation })
    }

    /// The UE's procedure has ended: its next message is dispatched anew.
    pub fn end_procedure(&mut self, ue: MTmsi) {
        self.tracking.remove(&ue);
    }

    /// The next message the core runs: from the busy instance that is
    /// furthest behind its share (stride scheduling, so each busy instance
    /// gets core time in proportion to `C_i`).
    pub fn next_message(&mut self) -> Option<(InstanceId, M, f64)> {
        let i = (0..self.instances.len())
            .filter(|&i| self.active(i))
            .min_by(|&a, &b| self.instances[a].pass.total_cmp(&self.instances[b].pass))?;
        let p = self.p(i);
        let inst = &mut self.instances[i];
        let (_, msg, cost) = inst.queue.pop_front()?;
        inst.continuing = inst.continuing.saturating_sub(1);
        self.vtime = inst.pass;
        inst.pass += cost / p;
        self.queued -= 1;
        Some((InstanceId(i), msg, cost))
    }

    /// A procedure of `kind` completed in `latency_s`. After `bump_after`
    /// consecutive ones over the SLO the service's priority rises by
    /// `bump_step` (seed 004 5.3), up to `max_priority`.
    pub fn completed(&mut self, kind: ProcedureKind, latency_s: f64) -> Option<Bump> {
        let s = &mut self.services[kind.index()];
        if latency_s <= s.slo_s {
            s.consecutive_violations = 0;
            return None;
        }
        s.consecutive_violations += 1;
        if s.consecutive_violations < self.cfg.bump_after || s.priority >= self.cfg.max_priority {
            return None;
        }
        s.consecutive_violations = 0;
        s.priority = (s.priority + self.cfg.bump_step).min(self.cfg.max_priority);
        self.stats.bumps += 1;
        Some(Bump { kind, priority: s.priority })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procedure::ProcedureClass;
    use ProcedureKind::*;

    /// Seed 004 5.3's example: SLO_a = 5 ms, SLO_b = 10 ms, SLO_min = 1 ms.
    fn paper_profiles() -> Profiles {
        let mut p = Profiles::default();
        *p.get_mut(ServiceRequest) = ProcedureClass { kind: ServiceRequest, messages: 1, cost_s: 0.001, slo_s: 0.005 };
        *p.get_mut(Handover) = ProcedureClass { kind: Handover, messages: 1, cost_s: 0.002, slo_s: 0.010 };
        p
    }

    fn fwd(instances: [usize; 5]) -> Forwarder<u32> {
        Forwarder::new(&paper_profiles(), ForwarderConfig { instances, slo_min_s: Some(0.001), ..Default::default() })
    }

    #[test]
    fn priorities_and_shares_follow_eq4() {
        let mut f = fwd([0, 1, 0, 1, 0]);
        assert!((f.priority(ServiceRequest) - 0.2).abs() < 1e-12);
        assert!((f.priority(Handover) - 0.1).abs() < 1e-12);
        // One busy NF has the whole core.
        f.dispatch(MTmsi(1), ServiceRequest, 0, 0.001).unwrap();
        assert_eq!(f.shares(), vec![(InstanceId(0), 1.0)]);
        f.dispatch(MTmsi(2), Handover, 0, 0.002).unwrap();
        let s = f.shares();
        assert!((s[0].1 - 2.0 / 3.0).abs() < 1e-12 && (s[1].1 - 1.0 / 3.0).abs() < 1e-12, "{s:?}");
    }

    #[test]
    fn dispatch_picks_argmin_q_over_c_and_tracks_the_procedure() {
        let mut f = fwd([0, 2, 0, 1, 0]);
        // Instances: 0, 1 service request; 2 handover.
        for ue in 0..3 {
            f.dispatch(MTmsi(100 + ue), ServiceRequest, 0, 0.001).unwrap();
        }
        // 0 got two (ties go to the lower index, then 1 had fewer), 1 one.
        assert_eq!((f.queue_len(InstanceId(0)), f.queue_len(InstanceId(1))), (2, 1));
        let d = f.dispatch(MTmsi(7), ServiceRequest, 0, 0.001).unwrap();
        assert_eq!(d.instance, InstanceId(1));
        assert!(d.first);
        // Eq. 2: Q = 1, C = P/(P + P) = 0.5 => (1/0.5 + 1) * 1 ms.
        assert!((d.estimate_s - 0.003).abs() < 1e-12, "{}", d.estimate_s);
        // The procedure's next message follows it though 1 is now longer.
        let d2 = f.dispatch(MTmsi(7), ServiceRequest, 0, 0.001).unwrap();
        assert_eq!((d2.instance, d2.first), (InstanceId(1), false));
        f.end_procedure(MTmsi(7));
        let d3 = f.dispatch(MTmsi(7), ServiceRequest, 0, 0.001).unwrap();
        assert_eq!((d3.instance, d3.first), (InstanceId(0), true));
    }

    #[test]
    fn predicted_violation_when_eq2_exceeds_the_slo() {
        let mut f = fwd([0, 1, 0, 0, 0]);
        // SLO 5 ms, 1 ms each alone: the fifth queued sees (4/1 + 1) ms.
        let v: Vec<bool> =
            (0..6).map(|u| f.dispatch(MTmsi(u), ServiceRequest, 0, 0.001).unwrap().predicted_violation).collect();
        assert_eq!(v, [false, false, false, false, false, true]);
        assert_eq!(f.stats.predicted_violations, 1);
    }

    #[test]
    fn core_time_is_shared_by_priority() {
        let mut f = fwd([0, 1, 0, 1, 0]);
        for u in 0..300 {
            f.dispatch(MTmsi(u), ServiceRequest, u, 0.001).unwrap();
            f.dispatch(MTmsi(1000 + u), Handover, u, 0.001).unwrap();
            f.end_procedure(MTmsi(u));
            f.end_procedure(MTmsi(1000 + u));
        }
        // While both are busy, service request gets 2/3 of the core.
        let mut time = [0.0f64; 2];
        for _ in 0..300 {
            let (i, _, cost) = f.next_message().unwrap();
            time[i.0] += cost;
        }
        let share = time[0] / (time[0] + time[1]);
        assert!((share - 2.0 / 3.0).abs() < 0.01, "{share}");
        // Then FIFO within an instance.
        let mut f = fwd([0, 1, 0, 0, 0]);
        f.dispatch(MTmsi(1), ServiceRequest, 10, 0.001).unwrap();
        f.dispatch(MTmsi(1), ServiceRequest, 11, 0.001).unwrap();
        assert_eq!(f.next_message().map(|x| x.1), Some(10));
        assert_eq!(f.next_message().map(|x| x.1), Some(11));
        assert!(f.next_message().is_none());
    }

    #[test]
    fn priority_bumped_after_repeated_violations() {
        let cfg =
            ForwarderConfig { instances: [0, 1, 0, 1, 0], slo_min_s: Some(0.001), bump_after: 3, ..Default::default() };
        let mut f = Forwarder::<u32>::new(&paper_profiles(), cfg);
        let p0 = f.priority(Handover);
        assert_eq!(f.completed(Handover, 0.011), None);
        assert_eq!(f.completed(Handover, 0.011), None);
        // One in time resets the count.
        assert_eq!(f.completed(Handover, 0.009), None);
        assert_eq!(f.completed(Handover, 0.011), None);
        assert_eq!(f.completed(Handover, 0.011), None);
        let b = f.completed(Handover, 0.011).unwrap();
        assert!((b.priority - (p0 + 0.01)).abs() < 1e-12);
        assert_eq!(f.priority(Handover), b.priority);
        assert_eq!(f.priority(ServiceRequest), 0.2);
    }

    /// Seed 004 5.3: "if SLO violations occur for an NF, we reactively
    /// increment its priority by a small fraction (e.g., 0.01)", up to the
    /// highest.
    #[test]
    fn by_default_every_violation_bumps_up_to_the_highest_priority() {
        let mut f = fwd([0, 1, 0, 1, 0]);
        let p0 = f.priority(Handover);
        assert_eq!(f.completed(Handover, 0.009), None, "in time");
        let b = f.completed(Handover, 0.011).expect("a bump at the first violation");
        assert!((b.priority - (p0 + 0.01)).abs() < 1e-12);
        while f.completed(Handover, 0.011).is_some() {}
        assert_eq!(f.priority(Handover), 1.0);
        assert_eq!(f.stats.bumps, 90, "from 0.1 to 1 by 0.01");
    }

    /// A procedure's later messages go ahead of new procedures' first at
    /// its instance, in arrival order among themselves, never ahead of
    /// their own UE's; without
    /// `continuing_first`, all in arrival order.
    #[test]
    fn later_messages_of_procedures_under_way_run_before_new_procedures() {
        let order = |continuing_first| {
            let cfg = ForwarderConfig { instances: [0, 1, 0, 0, 0], continuing_first, ..Default::default() };
            let mut f = Forwarder::<&str>::new(&Profiles::default(), cfg);
            let sr = ServiceRequest;
            f.dispatch(MTmsi(1), sr, "a1", 0.001).unwrap();
            f.dispatch(MTmsi(2), sr, "b1", 0.001).unwrap();
            assert_eq!(f.next_message().unwrap().1, "a1");
            f.dispatch(MTmsi(3), sr, "c1", 0.001).unwrap();
            // UE 1's second message goes ahead of UE 2's and 3's first;
            // UE 2's second, come before its first ran, never ahead of it.
            f.dispatch(MTmsi(1), sr, "a2", 0.001).unwrap();
            let mut out = vec![f.next_message().unwrap().1];
            f.dispatch(MTmsi(2), sr, "b2", 0.001).unwrap();
            f.dispatch(MTmsi(1), sr, "a3", 0.001).unwrap();
            while let Some((_, m, _)) = f.next_message() {
                out.push(m);
            }
            out
        };
        assert_eq!(order(true), ["a2", "a3", "b1", "c1", "b2"]);
        assert_eq!(order(false), ["b1", "c1", "a2", "b2", "a3"]);
    }

    proptest::proptest! {
        /// Eq. 4's shares of the busy instances sum to 1 and follow the
        /// priorities; Eq. 3's choice has the least Q/C of its service;
        /// the core serves every queued message exactly once.
        #[test]
        fn shares_and_argmin(slos in proptest::collection::vec(1u32..100, 5),
                             instances in proptest::collection::vec(0usize..3, 5),
                             msgs in proptest::collection::vec((0usize..5, 0u32..50), 0..60)) {
            let mut p = Profiles::default();
            for (k, slo) in ProcedureKind::ALL.iter().zip(&slos) {
                p.get_mut(*k).slo_s = f64::from(*slo) / 1000.0;
            }
            let mut inst = [0; 5];
            inst.copy_from_slice(&instances);
            let mut f = Forwarder::<u32>::new(&p, ForwarderConfig { instances: inst, ..Default::default() });
            let mut queued = 0;
            for (i, (k, ue)) in msgs.iter().enumerate() {
                let kind = ProcedureKind::ALL[*k];
                if let Some(opt) = f.optimal(kind) {
                    let qc = |j: usize| f.queue_len(InstanceId(j)) as f64 / f.share(InstanceId(j));
                    for j in (0..inst.iter().sum()).filter(|&j| f.kind(InstanceId(j)) == kind) {
                        proptest::prop_assert!(qc(opt.0) <= qc(j));
                    }
                }
                match f.dispatch(MTmsi(*ue), kind, i as u32, 0.001) {
                    Ok(_) => queued += 1,
                    Err(e) => proptest::prop_assert_eq!(e, DispatchError::NoInstance(kind)),
                }
                let shares = f.shares();
                if !shares.is_empty() {
                    let total: f64 = shares.iter().map(|s| s.1).sum();
                    proptest::prop_assert!((total - 1.0).abs() < 1e-9);
                    for &(a, ca) in &shares {
                        for &(b, cb) in &shares {
                            let (pa, pb) = (f.priority(f.kind(a)), f.priority(f.kind(b)));
                            proptest::prop_assert!((ca / cb - pa / pb).abs() < 1e-9);
                        }
                    }
                }
            }
            let mut served = std::collections::BTreeSet::new();
            while let Some((_, m, _)) = f.next_message() {
                proptest::prop_assert!(served.insert(m));
            }
            proptest::prop_assert_eq!(served.len(), queued);
            proptest::prop_assert_eq!(f.queued(), 0);
        }
    }

    /// Fig. 9's arrangements: one NF taking every kind in one queue (here all first messages, so in arrival order);
    /// priorities given instead of the SLOs'.
    #[test]
    fn a_unified_nf_takes_every_kind_in_order_and_priorities_can_be_fixed() {
        let cfg = ForwarderConfig { unified: true, instances: [0; 5], ..Default::default() };
        let mut f = Forwarder::<u32>::new(&paper_profiles(), cfg);
        for (m, kind) in [(1, Handover), (2, ServiceRequest), (3, Attach), (4, Handover)] {
            assert_eq!(f.dispatch(MTmsi(m), kind, m, 0.001).unwrap().instance, InstanceId(0));
        }
        let order: Vec<u32> = std::iter::from_fn(|| f.next_message().map(|(_, m, _)| m)).collect();
        assert_eq!(order, [1, 2, 3, 4]);

        let mut p = [1.0; 5];
        p[Handover.index()] = 0.25;
        let f = Forwarder::<u32>::new(&paper_profiles(), ForwarderConfig { priorities: Some(p), ..Default::default() });
        assert_eq!((f.priority(ServiceRequest), f.priority(Handover)), (1.0, 0.25));
    }

    #[test]
    fn bounded_queues_and_missing_services_are_errors() {
        let mut f = Forwarder::<u32>::new(
            &paper_profiles(),
            ForwarderConfig { instances: [0, 1, 0, 0, 0], max_queue: 2, ..Default::default() },
        );
        f.dispatch(MTmsi(1), ServiceRequest, 0, 0.001).unwrap();
        f.dispatch(MTmsi(2), ServiceRequest, 0, 0.001).unwrap();
        assert_eq!(f.dispatch(MTmsi(3), ServiceRequest, 0, 0.001), Err(DispatchError::QueueFull(InstanceId(0))));
        assert_eq!(f.dispatch(MTmsi(3), Tau, 0, 0.001), Err(DispatchError::NoInstance(Tau)));
        assert_eq!(f.stats.queue_full, 1);
    }
}
