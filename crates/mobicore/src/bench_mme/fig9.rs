//! Seed 004 Fig. 9 from the simulator: service request and handover
//! latency on one host at a given rate (1,000 procedures/s by default),
//! half of each, with the MME unified (one NF takes both in arrival
//! order) or decomposed into one NF per procedure sharing the core by
//! Eq. 4: with equal priorities, with the SLOs' priorities (`SLO_min /
//! SLO`, what the forwarder does by default), and with each procedure
//! prioritized over the other (ten to one), the priorities fixed. The
//! host's speed is set so
//! that the rate is `--utilization` of its capacity.

use super::{bar, finish, MmeArgs};
use mobicore_elastic::forwarder::ForwarderConfig;
use mobicore_elastic::load::{LoadConfig, Mix, Pattern, Skew};
use mobicore_elastic::sim::{self, SimConfig, SimResult};
use mobicore_elastic::{ProcedureKind, Profiles, Scheme};
use serde_json::{json, Value};

/// The lower of two fixed priorities (`P`), ten to one: the simulator's
/// SR- and HO-prioritized arrangements and the real hosts' `h-over-s`
/// and `s-over-h` (`mme-host --nf-priority`).
pub const LOW_PRIORITY: f64 = 0.1;

/// How the host's NFs are arranged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrangement {
    Unified,
    Decomposed,
    /// Decomposed, priorities from the SLOs (Eq. 4 as the hosts run it).
    SloPriorities,
    SrFirst,
    HoFirst,
}

impl Arrangement {
    pub const ALL: [Arrangement; 5] = [
        Arrangement::Unified,
        Arrangement::Decomposed,
        Arrangement::SloPriorities,
        Arrangement::SrFirst,
        Arrangement::HoFirst,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Arrangement::Unified => "unified",
            Arrangement::Decomposed => "decomposed",
            Arrangement::SloPriorities => "slo-priorities",
            Arrangement::SrFirst => "sr-prioritized",
            Arrangement::HoFirst => "ho-prioritized",
        }
    }

    fn forwarder(self) -> ForwarderConfig {
        let priorities = |sr: f64, ho: f64| {
            let mut p = [1.0; ProcedureKind::COUNT];
            p[ProcedureKind::ServiceRequest.index()] = sr;
            p[ProcedureKind::Handover.index()] = ho;
            Some(p)
        };
        // Fixed priorities: no bump after violations (seed 004 5.3), which
        // would even out the prioritized arrangements over a run.
        let base = ForwarderConfig { bump_after: u32::MAX, ..ForwarderConfig::default() };
        match self {
            Arrangement::Unified => ForwarderConfig { unified: true, ..base },
            Arrangement::Decomposed => ForwarderConfig { priorities: priorities(1.0, 1.0), ..base },
            Arrangement::SloPriorities => base,
            Arrangement::SrFirst => ForwarderConfig { priorities: priorities(1.0, LOW_PRIORITY), ..base },
            Arrangement::HoFirst => ForwarderConfig { priorities: priorities(LOW_PRIORITY, 1.0), ..base },
        }
    }
}

/// The host's configuration for one arrangement: service requests and
/// handovers only, `rate` of them per second at `utilization` of the
/// host.
pub fn config(arrangement: Arrangement, rate: f64, utilization: f64, ues: u32, seconds: f64, seed: u64) -> SimConfig {
    let profiles = Profiles::default();
    let mut mix = [0.0; ProcedureKind::COUNT];
    mix[ProcedureKind::ServiceRequest.index()] = 0.5;
    mix[ProcedureKind::Handover.index()] = 0.5;
    let mix = Mix(mix);
    let speed = rate / (utilization * sim::host_capacity(&profiles, &mix, 1.0));
    SimConfig {
        hosts: 1,
        scheme: Scheme::ConsistentHashing,
        host_speed: speed,
        profiles,
        forwarder: arrangement.forwarder(),
        load: LoadConfig { ues, rate, duration_s: seconds, pattern: Pattern::Constant, skew: Skew::UNIFORM, mix, seed },
        ..Default::default()
    }
}

fn class(r: &SimResult, kind: ProcedureKind) -> Value {
    let c = &r.per_class[kind.index()];
    json!({
        "procedures": c.procedures,
        "latency_ms_p50": c.latency_ms_p50,
        "latency_ms_p99": c.latency_ms_p99,
        "slo_violation_pct": c.violation_pct(),
    })
}

pub fn fig9(a: &MmeArgs) -> Vec<Value> {
    let rate = a.rate.unwrap_or(1000.0);
    let ues = a.ues.unwrap_or(300);
    let seconds = a.sim_seconds();
    println!(
        "Fig. 9 (simulated): {rate:.0} procedures/s on one host, half service requests and half handovers, \
         {:.0}% of the host's capacity, {ues} UEs, {seconds} s per run",
        100.0 * a.utilization
    );
    let b = bar(Arrangement::ALL.len() as u64);
    let (mut points, mut rows) = (Vec::new(), Vec::new());
    for arr in Arrangement::ALL {
        b.set_message(arr.name());
        let r = sim::run(&config(arr, rate, a.utilization, ues, seconds, a.seed));
        let (sr, ho) = (ProcedureKind::ServiceRequest, ProcedureKind::Handover);
        let mut p = super::point(9, &r, rate);
        p["scheme"] = json!(arr.name());
        p["service_request"] = class(&r, sr);
        p["handover"] = class(&r, ho);
        let (s, h) = (&r.per_class[sr.index()], &r.per_class[ho.index()]);
        rows.push(vec![
            arr.name().to_string(),
            format!("{:.2}", s.latency_ms_p50),
            format!("{:.2}", s.latency_ms_p99),
            format!("{:.2}", h.latency_ms_p50),
            format!("{:.2}", h.latency_ms_p99),
            format!("{:.2}", s.violation_pct()),
            format!("{:.2}", h.violation_pct()),
        ]);
        points.push(p);
        b.inc(1);
    }
    finish(b, &["NFs", "SR p50 ms", "SR p99 ms", "HO p50 ms", "HO p99 ms", "SR SLO viol. %", "HO SLO viol. %"], &rows);
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(arr: Arrangement) -> SimResult {
        sim::run(&config(arr, 1000.0, 0.9, 300, 2.0, 7))
    }

    fn p99(r: &SimResult, kind: ProcedureKind) -> f64 {
        r.per_class[kind.index()].latency_ms_p99
    }

    /// Seed 004 Fig. 9's orderings on the same seeded load: the NF given
    /// priority has the lower tail of its procedure, against the other
    /// way round and against the unified MME; the other procedure pays.
    #[test]
    fn prioritizing_a_procedures_nf_lowers_its_tail() {
        let (sr, ho) = (ProcedureKind::ServiceRequest, ProcedureKind::Handover);
        let unified = run(Arrangement::Unified);
        let sr_first = run(Arrangement::SrFirst);
        let ho_first = run(Arrangement::HoFirst);
        for r in [&unified, &sr_first, &ho_first] {
            assert_eq!(r.failed, 0);
            assert!(r.per_class[sr.index()].procedures > 500 && r.per_class[ho.index()].procedures > 500);
        }
        assert!(p99(&sr_first, sr) < p99(&ho_first, sr), "{sr_first:?} {ho_first:?}");
        assert!(p99(&ho_first, ho) < p99(&sr_first, ho), "{sr_first:?} {ho_first:?}");
        assert!(p99(&sr_first, sr) < p99(&unified, sr), "{sr_first:?} {unified:?}");
        assert!(p99(&ho_first, ho) < p99(&unified, ho), "{ho_first:?} {unified:?}");
    }
}
