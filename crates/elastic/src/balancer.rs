//! The inter-host load balancer of the front end (seed 004 5.1,
//! Algorithm 1): a `Balancer` picks a host for a procedure's first message;
//! the `Frontend` sends the procedure's later messages to the same host
//! (connection tracking), keeps the hosts' reports and lets hosts join and
//! leave a slice.

mod hashing;
mod round_robin;
mod skewed;
#[cfg(test)]
mod tests;

pub use hashing::{ConsistentHashing, Maglev};
pub use round_robin::RoundRobin;
pub use skewed::SkewedCh;

use crate::procedure::{HostId, MTmsi, ProcedureKind, Profiles, SliceId};
use crate::report::HostReport;
use crate::ring::Move;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;

/// The balancing schemes of seed 004 7.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// Round robin over hosts at a UE's first procedure; the UE stays
    /// there (its state does).
    RoundRobin,
    /// The primary host on the slice's ring.
    ConsistentHashing,
    /// Maglev's lookup table.
    Maglev,
    /// Skewed consistent hashing with viable hosts (Algorithm 1).
    SkewedCh,
}

impl Scheme {
    pub const ALL: [Scheme; 4] = [Scheme::SkewedCh, Scheme::ConsistentHashing, Scheme::RoundRobin, Scheme::Maglev];

    /// The name in bench output (`sk-ch`, `ch`, `rr`, `maglev`).
    pub fn name(self) -> &'static str {
        match self {
            Scheme::RoundRobin => "rr",
            Scheme::ConsistentHashing => "ch",
            Scheme::Maglev => "maglev",
            Scheme::SkewedCh => "sk-ch",
        }
    }

    /// A balancer of this scheme with the crate's defaults.
    pub fn balancer(self, replicas: usize) -> Box<dyn Balancer> {
        match self {
            Scheme::RoundRobin => Box::new(RoundRobin::new(RoundRobin::DEFAULT_MAX_BINDINGS)),
            Scheme::ConsistentHashing => Box::new(ConsistentHashing::new(crate::ring::Ring::DEFAULT_VNODES)),
            Scheme::Maglev => Box::new(Maglev::new(crate::maglev::MaglevTable::DEFAULT_SIZE)),
            Scheme::SkewedCh => Box::new(SkewedCh::new(crate::ring::Ring::DEFAULT_VNODES, replicas)),
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Scheme::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| format!("unknown scheme {s:?} (one of sk-ch, ch, rr, maglev)"))
    }
}

/// A procedure's first message as the front end sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The UE's slice; `SliceId::ATTACH` while it attaches.
    pub slice: SliceId,
    pub ue: MTmsi,
    pub kind: ProcedureKind,
}

/// No candidate host could meet the procedure's SLO (Eq. 1): the
/// procedure went to the host with the least q/c, and this is reported to
/// the EPS controller.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Violation {
    pub ue: MTmsi,
    pub kind: ProcedureKind,
    pub host: HostId,
    /// Eq. 1's completion time at the chosen host, seconds.
    pub estimate_s: f64,
    pub slo_s: f64,
}

/// A balancer's choice for a procedure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Selection {
    pub host: HostId,
    pub violation: Option<Violation>,
}

/// One balancing scheme. Membership is per slice.
pub trait Balancer {
    fn scheme(&self) -> Scheme;
    fn add_host(&mut self, slice: SliceId, host: HostId);
    fn remove_host(&mut self, slice: SliceId, host: HostId);
    fn has_host(&self, slice: SliceId, host: HostId) -> bool;
    /// The host that holds the UE's state in this scheme (its primary),
    /// if any.
    fn owner(&self, slice: SliceId, ue: MTmsi) -> Option<HostId>;
    /// The host for a procedure's first message; `None` if the slice has
    /// no host.
    fn select(&mut self, req: &Request, loads: &Loads) -> Option<Selection>;
    /// The host for a procedure's first message among `candidates` only
    /// (the hosts that hold the UE's state; the first is its owner's): by
    /// default the scheme's own choice if it is one of them, else the
    /// first. Skewed CH applies Algorithm 1 to them.
    fn select_among(&mut self, req: &Request, loads: &Loads, candidates: &[HostId]) -> Option<Selection> {
        let first = *candidates.first()?;
        let sel = self.select(req, loads).filter(|s| candidates.contains(&s.host));
        Some(sel.unwrap_or(Selection { host: first, violation: None }))
    }
    /// A procedure ended (its host has answered its last message).
    fn procedure_ended(&mut self, _req: &Request) {}
}

/// The hosts' last reports, as the front end knows them, and Eq. 1 on
/// them.
#[derive(Clone, Debug)]
pub struct Loads {
    profiles: Profiles,
    reports: HashMap<HostId, HostReport>,
    /// Per host and kind: procedures routed there since its last report
    /// and still in progress (those the report cannot show yet).
    since_report: HashMap<HostId, [i64; ProcedureKind::COUNT]>,
    /// Per host: reports received, to tell which procedures came after.
    epochs: HashMap<HostId, u64>,
    /// Hosts whose reports stopped ([`Loads::stale`]).
    stale: BTreeSet<HostId>,
    /// Per host: procedures placed there since its last report, and its
    /// CPU per procedure.
    placed: HashMap<HostId, Placed>,
    estimation: Estimation,
}

#[derive(Clone, Copy, Debug, Default)]
struct Placed {
    since_report: u32,
    /// A moving average of the reported CPU use over the procedures placed
    /// in the period, from busy periods only ([`BUSY_PERIOD`]).
    cpu_per_procedure: Option<f64>,
}

/// Weight of a period's value in [`Placed::cpu_per_procedure`] (the
/// hosts' moving averages weigh a sample as much).
const PLACED_ALPHA: f64 = 0.5;

/// Procedures placed in a report period for its CPU use to tell the CPU
/// per procedure: in a quieter one the host's own work (timers, reports,
/// its store) dominates, and a host at rest would seem to spend its whole
/// use on its one procedure, so that a burst after a lull found every
/// host full at a tenth of its budget (`bench mme fig8`: violations at
/// every load, so the EPS controller never scaled in).
pub const BUSY_PERIOD: u32 = 5;

/// How the front end applies Eq. 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimation {
    /// Add the procedures the front end itself has sent to a host since
    /// its last report, and that are still in progress, to the reported
    /// queue length. Without it, every procedure of a report period that
    /// can go to the most loaded viable host goes there, which the report
    /// shows only a period later.
    pub correct_between_reports: bool,
    /// A host is viable if its Eq. 1 estimate is at most `headroom` times
    /// the SLO; 1 is Eq. 1 as written. Eq. 1 assumes a stable queue, but
    /// the most-loaded-first choice fills a host up to the bound, so the
    /// procedures placed there see the queue grow behind their first
    /// message, and a host at the bound runs near full CPU, where queues
    /// swing: with no headroom a good part of them miss the SLO. The
    /// default, 0.3, keeps skewed CH's violations under the baselines'
    /// under skewed load in the simulator (`sim`).
    pub headroom: f64,
    /// A host whose reported CPU use (of its budget) is at least this is
    /// not viable, whatever its queue. A real host bounded by a cgroup's
    /// quota is throttled as a whole, its sampler with it, so the queue
    /// it reports misses the time its messages wait for CPU: at 100% of
    /// its budget it may still report almost none (`bench mme fig10`).
    /// The ceiling applies to [`Loads::cpu_committed`] too: the CPU the
    /// procedures placed on a host since its last report will take, at
    /// the CPU per procedure of its recent reports. Reports come a period
    /// apart, and the most-loaded-first choice would fill a host far past
    /// its budget within one.
    /// Off (infinite) by default: the simulator's queues are exact.
    pub cpu_ceiling: f64,
}

impl Estimation {
    /// Eq. 1 on the reports alone.
    pub const EQ1: Estimation =
        Estimation { correct_between_reports: false, headroom: 1.0, cpu_ceiling: f64::INFINITY };
}

impl Default for Estimation {
    fn default() -> Self {
        Estimation { correct_between_reports: true, headroom: 0.3, cpu_ceiling: f64::INFINITY }
    }
}

impl Loads {
    pub fn new(profiles: Profiles, estimation: Estimation) -> Self {
        Loads {
            profiles,
            reports: HashMap::new(),
            since_report: HashMap::new(),
            epochs: HashMap::new(),
            stale: BTreeSet::new(),
            placed: HashMap::new(),
            estimation,
        }
    }

    pub fn profiles(&self) -> &Profiles {
        &self.profiles
    }

    pub fn report(&mut self, host: HostId, report: HostReport) {
        let cpu = report.cpu;
        self.reports.insert(host, report);
        self.since_report.remove(&host);
        self.stale.remove(&host);
        let epoch = self.epochs.entry(host).or_default();
        *epoch += 1;
        // The first report closes no whole period of placements.
        let first = *epoch == 1;
        let p = self.placed.entry(host).or_default();
        let n = std::mem::take(&mut p.since_report);
        if !first && n >= BUSY_PERIOD {
            let x = cpu / f64::from(n);
            p.cpu_per_procedure = Some(p.cpu_per_procedure.map_or(x, |v| v + PLACED_ALPHA * (x - v)));
        }
    }

    /// The host's reports have stopped (it reported before, but not for
    /// longer than its owner allows): its q/c is infinite, so Eq. 1 finds
    /// it never viable and Algorithm 1's least-q/c fallback takes it last,
    /// until it reports again. A host that never reported counts as idle.
    pub fn stale(&mut self, host: HostId) {
        self.stale.insert(host);
    }

    pub fn is_stale(&self, host: HostId) -> bool {
        self.stale.contains(&host)
    }

    fn epoch(&self, host: HostId) -> u64 {
        self.epochs.get(&host).copied().unwrap_or(0)
    }

    pub fn forget(&mut self, host: HostId) {
        self.stale.remove(&host);
        self.reports.remove(&host);
        self.since_report.remove(&host);
        self.placed.remove(&host);
    }

    /// A procedure was placed on `host`.
    fn note_placed(&mut self, host: HostId) {
        self.placed.entry(host).or_default().since_report += 1;
    }

    /// The share of a report period's CPU budget that the procedures
    /// placed on `host` since its last report will take: their number
    /// times the CPU per procedure by its reports (a moving average of the
    /// reported use over the procedures placed in the period, over busy
    /// periods, [`BUSY_PERIOD`]). 0 until a busy period has closed, or
    /// while none are placed. Everything a host does counts in its use
    /// (replicated writes, reports), so this errs high.
    pub fn cpu_committed(&self, host: HostId) -> f64 {
        let Some(p) = self.placed.get(&host) else { return 0.0 };
        p.cpu_per_procedure.map_or(0.0, |c| c * f64::from(p.since_report))
    }

    fn count(&mut self, host: HostId, kind: ProcedureKind, d: i64) {
        self.since_report.entry(host).or_default()[kind.index()] += d;
    }

    /// The host's CPU use by its last report (0 before any).
    pub fn cpu(&self, host: HostId) -> f64 {
        self.reports.get(&host).map_or(0.0, |r| r.cpu)
    }

    /// The least q_i / c_i over the host's NFs of `kind`; 0 for a host
    /// that has not reported yet, infinite for a stale one, `None` if it
    /// reported no such NF.
    pub fn least_q_over_c(&self, host: HostId, kind: ProcedureKind) -> Option<f64> {
        if self.stale.contains(&host) {
            return Some(f64::INFINITY);
        }
        let Some(r) = self.reports.get(&host) else {
            return Some(0.0);
        };
        let nfs = r.nfs.iter().filter(|n| n.kind == kind && n.c > 0.0);
        let n = nfs.clone().count();
        let extra = match (self.estimation.correct_between_reports, self.since_report.get(&host)) {
            (true, Some(d)) if n > 0 => d[kind.index()] as f64 / n as f64,
            _ => 0.0,
        };
        nfs.map(|nf| (nf.q + extra).max(0.0) / nf.c).min_by(f64::total_cmp)
    }

    /// Eq. 1: the completion time of a `kind` procedure at the host's best
    /// NF, `(q_i / c_i + 1) * T_t`.
    /// Whether the host can take a `kind` procedure within its SLO (times
    /// the headroom); `None` if it runs no such NF.
    pub fn viable(&self, host: HostId, kind: ProcedureKind) -> Option<bool> {
        let t = self.completion_estimate_s(host, kind)?;
        Some(
            t <= self.estimation.headroom * self.profiles.get(kind).slo_s
                && self.cpu(host).max(self.cpu_committed(host)) < self.estimation.cpu_ceiling,
        )
    }

    pub fn completion_estimate_s(&self, host: HostId, kind: ProcedureKind) -> Option<f64> {
        self.least_q_over_c(host, kind).map(|qc| (qc + 1.0) * self.profiles.get(kind).cost_s)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrontendStats {
    pub messages: u64,
    pub procedures: u64,
    /// Procedures sent to a host that could not meet their SLO.
    pub violations: u64,
    pub no_host: u64,
    pub tracking_full: u64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Route {
    pub host: HostId,
    /// The procedure's first message: the balancer chose the host.
    pub first: bool,
    pub violation: Option<Violation>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("slice {0:?} has no MME host")]
    NoHost(SliceId),
    #[error("procedure tracking table full")]
    TrackingFull,
}

#[derive(Clone, Copy, Debug)]
struct Tracked {
    host: HostId,
    req: Request,
    /// The host's report epoch when the procedure was routed.
    epoch: u64,
}

/// The front end's balancing: a scheme, the hosts' loads, and one tracking
/// entry per procedure in progress (Algorithm 1 lines 3-5).
pub struct Frontend {
    balancer: Box<dyn Balancer>,
    loads: Loads,
    tracked: HashMap<MTmsi, Tracked>,
    max_tracked: usize,
    slices: BTreeMap<SliceId, BTreeSet<HostId>>,
    pub stats: FrontendStats,
}

impl Frontend {
    pub fn new(balancer: Box<dyn Balancer>, loads: Loads, max_tracked: usize) -> Self {
        Frontend {
            balancer,
            loads,
            tracked: HashMap::new(),
            max_tracked,
            slices: BTreeMap::new(),
            stats: FrontendStats::default(),
        }
    }

    pub fn scheme(&self) -> Scheme {
        self.balancer.scheme()
    }

    pub fn loads(&self) -> &Loads {
        &self.loads
    }

    /// The host for a message of the procedure `req`: the tracked one, or
    /// a new choice at the procedure's first message.
    pub fn route(&mut self, req: &Request) -> Result<Route, RouteError> {
        self.route_with(req, |b, loads| b.select(req, loads))
    }

    /// [`Frontend::route`], a new choice made among `candidates` only
    /// ([`Balancer::select_among`]).
    pub fn route_among(&mut self, req: &Request, candidates: &[HostId]) -> Result<Route, RouteError> {
        self.route_with(req, |b, loads| b.select_among(req, loads, candidates))
    }

    fn route_with(
        &mut self,
        req: &Request,
        select: impl FnOnce(&mut dyn Balancer, &Loads) -> Option<Selection>,
    ) -> Result<Route, RouteError> {
        self.stats.messages += 1;
        if let Some(t) = self.tracked.get(&req.ue) {
            return Ok(Route { host: t.host, first: false, violation: None });
        }
        if self.tracked.len() >= self.max_tracked {
            self.stats.tracking_full += 1;
            return Err(RouteError::TrackingFull);
        }
        let Some(sel) = select(self.balancer.as_mut(), &self.loads) else {
            self.stats.no_host += 1;
            return Err(RouteError::NoHost(req.slice));
        };
        self.stats.procedures += 1;
        self.stats.violations += u64::from(sel.violation.is_some());
        self.loads.count(sel.host, req.kind, 1);
        self.loads.note_placed(sel.host);
        let epoch = self.loads.epoch(sel.host);
        self.tracked.insert(req.ue, Tracked { host: sel.host, req: *req, epoch });
        Ok(Route { host: sel.host, first: true, violation: sel.violation })
    }

    /// The procedure of this UE has ended; its next message starts a new
    /// one. Returns the host it ran on.
    pub fn end(&mut self, ue: MTmsi) -> Option<HostId> {
        let t = self.tracked.remove(&ue)?;
        if t.epoch == self.loads.epoch(t.host) {
            self.loads.count(t.host, t.req.kind, -1);
        }
        self.balancer.procedure_ended(&t.req);
        Some(t.host)
    }

    /// Stop tracking the UE's procedure, its host's count left as it is
    /// until the host's next report (which includes it): for a front end
    /// that follows the procedure by other means.
    pub fn untrack(&mut self, ue: MTmsi) {
        if let Some(t) = self.tracked.remove(&ue) {
            self.balancer.procedure_ended(&t.req);
        }
    }

    pub fn in_progress(&self) -> usize {
        self.tracked.len()
    }

    /// A host's periodic report.
    /// A host's reports have stopped ([`Loads::stale`]).
    pub fn stale(&mut self, host: HostId) {
        self.loads.stale(host);
    }

    /// Forget the host's reports (it left).
    pub fn forget(&mut self, host: HostId) {
        self.loads.forget(host);
    }

    pub fn report(&mut self, host: HostId, report: HostReport) {
        self.loads.report(host, report);
    }

    /// Adds a host to a slice. Returns the UEs among `ues` whose state
    /// moves (their owner changes).
    pub fn add_host(&mut self, slice: SliceId, host: HostId, ues: &[MTmsi]) -> Vec<Move> {
        let before: Vec<_> = ues.iter().map(|&ue| self.balancer.owner(slice, ue)).collect();
        self.balancer.add_host(slice, host);
        self.slices.entry(slice).or_default().insert(host);
        self.moves(slice, ues, before)
    }

    /// Removes a host from a slice. Procedures in progress there lose
    /// their tracking entry: their next message is balanced anew.
    pub fn remove_host(&mut self, slice: SliceId, host: HostId, ues: &[MTmsi]) -> Vec<Move> {
        let before: Vec<_> = ues.iter().map(|&ue| self.balancer.owner(slice, ue)).collect();
        self.balancer.remove_host(slice, host);
        if let Some(s) = self.slices.get_mut(&slice) {
            s.remove(&host);
        }
        let gone: Vec<MTmsi> =
            self.tracked.iter().filter(|(_, t)| t.host == host && t.req.slice == slice).map(|(ue, _)| *ue).collect();
        for ue in gone {
            self.end(ue);
        }
        if !self.slices.values().any(|s| s.contains(&host)) {
            self.loads.forget(host);
        }
        self.moves(slice, ues, before)
    }

    fn moves(&self, slice: SliceId, ues: &[MTmsi], before: Vec<Option<HostId>>) -> Vec<Move> {
        ues.iter()
            .zip(before)
            .filter_map(|(&ue, from)| {
                let to = self.balancer.owner(slice, ue);
                (from != to).then_some(Move { ue, from, to })
            })
            .collect()
    }
}
