//! The simulator's accounting, and seed 004's orderings (Figs. 10, 11)
//! reproduced on small clusters.

use super::*;
use crate::load::{Mix, Pattern, Skew};

/// 20% of the UEs carry 80% of the load.
const SKEWED: Skew = Skew { hot_fraction: 0.2, hot_share: 0.8 };

fn cfg(hosts: u32, scheme: Scheme, rate: f64, skew: Skew) -> SimConfig {
    SimConfig {
        hosts,
        scheme,
        load: LoadConfig {
            ues: 300,
            rate,
            duration_s: 5.0,
            pattern: Pattern::Constant,
            skew,
            seed: 11,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn show(r: &SimResult) -> String {
    format!(
        "{}: {:.2}% violations, CPU {:?} (sd {:.1}), p50 {:.2} ms p99 {:.2} ms, {} failed",
        r.scheme,
        r.slo_violation_pct(),
        r.cpu_pct.iter().map(|c| c.round()).collect::<Vec<_>>(),
        r.cpu_stddev_pct(),
        r.latency_ms_p50,
        r.latency_ms_p99,
        r.failed
    )
}

#[test]
fn one_host_accounting() {
    // 200 procedures/s of the default mix on one idle core.
    let r = run(&SimConfig {
        hosts: 1,
        load: LoadConfig { ues: 100, rate: 200.0, duration_s: 5.0, ..Default::default() },
        ..Default::default()
    });
    let mix = Mix::default();
    let profiles = Profiles::default();
    let mean_cost: f64 = ProcedureKind::ALL.iter().map(|&k| mix.0[k.index()] * profiles.get(k).cost_s).sum();
    assert_eq!(r.completed, r.procedures, "{}", show(&r));
    assert_eq!((r.failed, r.violations), (0, 0));
    let expected_cpu = 100.0 * 200.0 * mean_cost;
    assert!((r.cpu_pct[0] - expected_cpu).abs() < 0.1 * expected_cpu, "{} vs {expected_cpu}", r.cpu_pct[0]);
    assert!((r.procedures_per_s - 200.0).abs() < 10.0);
    // Lightly loaded, a service request (the most common) takes its cost
    // and one round trip: 0.5 + 1 ms.
    assert!((1.4..2.0).contains(&r.latency_ms_p50), "{}", r.latency_ms_p50);
    assert_eq!(r.cpu_stddev_pct(), 0.0);
    let per_class: u64 = r.per_class.iter().map(|c| c.procedures).sum();
    assert_eq!(per_class, r.procedures);
}

#[test]
fn deterministic() {
    let c = cfg(3, Scheme::SkewedCh, 2000.0, SKEWED);
    assert_eq!(run(&c), run(&c));
}

#[test]
fn bounds_reached_are_counted_failures() {
    let mut c = cfg(1, Scheme::ConsistentHashing, 3000.0, SKEWED);
    c.forwarder.max_queue = 2;
    c.load.duration_s = 1.0;
    let r = run(&c);
    assert!(r.failed > 0, "{}", show(&r));
    assert_eq!(r.completed + r.failed, r.procedures);
    let failed: u64 = r.per_class.iter().map(|c| c.failed).sum();
    assert_eq!(failed, r.failed);
    assert!(r.violations >= r.failed);
}

#[test]
fn uniform_light_load_every_scheme_meets_slos() {
    for scheme in Scheme::ALL {
        let r = run(&cfg(3, scheme, 1500.0, Skew::UNIFORM));
        assert!(r.slo_violation_pct() < 1.0, "{}", show(&r));
    }
}

/// Fig. 10b: 3 hosts at about 95% of their capacity, skewed load. The
/// schemes that place UEs regardless of their load leave a host over
/// capacity; skewed CH does not, and misses at most 3% of the SLOs.
#[test]
fn skewed_load_sk_ch_violates_least() {
    let results: Vec<SimResult> = Scheme::ALL.iter().map(|&s| run(&cfg(3, s, 3600.0, SKEWED))).collect();
    let sk = &results[0];
    assert_eq!(sk.scheme, Scheme::SkewedCh);
    for r in &results[1..] {
        assert!(sk.slo_violation_pct() < r.slo_violation_pct(), "{}\n{}", show(sk), show(r));
    }
    // Issue 13's target (seed 004: 3-4%, the others 18-28%).
    assert!(sk.slo_violation_pct() <= 3.0, "{}", show(sk));
    // Consistent hashing leaves the most imbalance.
    let ch = results.iter().find(|r| r.scheme == Scheme::ConsistentHashing).unwrap();
    assert!(ch.cpu_stddev_pct() > 2.0 * sk.cpu_stddev_pct(), "{}\n{}", show(ch), show(sk));
}

/// Fig. 11's load at a small size: skewed Pareto bursts (alpha 2) over
/// 1,000 UEs, about 8 hosts' worth.
fn fig11(scheme: Scheme) -> SimConfig {
    SimConfig {
        scheme,
        load: LoadConfig {
            ues: 1000,
            rate: 10_000.0,
            duration_s: 2.0,
            pattern: Pattern::pareto(2.0),
            skew: SKEWED,
            seed: 11,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Fig. 11: hosts needed for at most 5% violations under skewed Pareto
/// bursts.
#[test]
fn skewed_pareto_load_sk_ch_needs_fewest_hosts() {
    let needed = |scheme| {
        let c = fig11(scheme);
        hosts_needed(&c, 16, 5.0).map(|(n, r)| {
            assert!(r.slo_violation_pct() <= 5.0 && r.hosts == n);
            n
        })
    };
    let sk = needed(Scheme::SkewedCh).expect("16 hosts are enough");
    for s in [Scheme::ConsistentHashing, Scheme::RoundRobin, Scheme::Maglev] {
        let n = needed(s);
        assert!(n.is_none_or(|n| sk < n), "sk-ch {sk} vs {s} {n:?}");
    }
}

/// Fig. 11b's scale: 100 hosts run quickly, every host takes load.
#[test]
fn hundred_hosts() {
    let c = SimConfig {
        hosts: 100,
        load: LoadConfig { ues: 20_000, rate: 60_000.0, duration_s: 0.5, skew: SKEWED, seed: 3, ..Default::default() },
        ..Default::default()
    };
    let r = run(&c);
    assert_eq!(r.cpu_pct.len(), 100);
    assert!(r.cpu_pct.iter().all(|&c| c > 0.0));
    assert!(r.slo_violation_pct() < 5.0, "{}", show(&r));
    assert!((r.procedures_per_s / 60_000.0 - 1.0).abs() < 0.05);
}

/// The search runs the most hosts, then bisects to the fewest that meet
/// the target, whatever runs them.
#[test]
fn host_search_bisects() {
    let search = |max: u32, enough: u32| {
        let mut s = HostSearch::new(max);
        let mut ran = Vec::new();
        while let Some(n) = s.next() {
            ran.push(n);
            s.record(n, n >= enough);
        }
        (s.found(), ran)
    };
    assert_eq!(search(4, 3), (Some(3), vec![4, 2, 3]));
    assert_eq!(search(4, 1), (Some(1), vec![4, 2, 1]));
    assert_eq!(search(4, 5), (None, vec![4]));
    assert_eq!(search(1, 1), (Some(1), vec![1]));
    assert_eq!(search(100, 37).0, Some(37));
    // From a guess: outward in doubling steps, then bisection.
    let around = |guess: u32, max: u32, enough: u32| {
        let mut s = HostSearch::around(guess, max);
        let mut ran = Vec::new();
        while let Some(n) = s.next() {
            ran.push(n);
            s.record(n, n >= enough);
        }
        (s.found(), ran)
    };
    assert_eq!(around(50, 100, 53), (Some(53), vec![50, 52, 56, 54, 53]));
    assert_eq!(around(50, 100, 47), (Some(47), vec![50, 48, 44, 46, 47]));
    assert_eq!(around(50, 100, 50), (Some(50), vec![50, 48, 49]));
    assert_eq!(around(3, 100, 1), (Some(1), vec![3, 1]));
    assert_eq!(around(90, 100, 101), (None, vec![90, 92, 96, 100]));
    for enough in 1..=40 {
        assert_eq!(around(20, 40, enough).0, Some(enough));
        assert_eq!(around(1, 40, enough).0, Some(enough));
    }
}

/// A constant load of 1.5 hosts' capacity on one host: the EPS controller
/// starts hosts until the violations stop, and drains them back to one
/// when the load ends; no procedure is lost on the way.
#[test]
fn controller_scales_out_under_load_and_back_in_after() {
    let capacity = host_capacity(&Profiles::default(), &Mix::default(), 1.0);
    let mut c = cfg(1, Scheme::SkewedCh, 1.5 * capacity, Skew::UNIFORM);
    c.load.duration_s = 3.0;
    c.scaling = Some(ScalingConfig::new(1, 4, 1.0));
    let r = run(&c);
    assert_eq!((r.completed, r.failed), (r.procedures, 0), "{}", show(&r));
    assert!(r.hosts_max >= 2, "{:?}", r.hosts_timeline);
    let &(end_s, last) = r.hosts_timeline.last().unwrap();
    assert_eq!(last, 1, "back to the minimum: {:?}", r.hosts_timeline);
    assert!(end_s > c.load.duration_s, "drained after the load: {:?}", r.hosts_timeline);
    assert!(1.0 < r.hosts_time_avg && r.hosts_time_avg < f64::from(r.hosts_max), "{}", r.hosts_time_avg);
    // Scaled out, it meets the SLOs for most of the run.
    assert!(r.slo_violation_pct() < 20.0, "{}", show(&r));
    assert_eq!(run(&c), r, "deterministic");
}

/// Without scaling, the hosts are the configured ones throughout.
#[test]
fn fixed_hosts_time_average() {
    let r = run(&cfg(3, Scheme::ConsistentHashing, 1500.0, Skew::UNIFORM));
    assert_eq!((r.hosts_time_avg, r.hosts_max, r.hosts_timeline.clone()), (3.0, 3, vec![(0.0, 3)]));
}

/// Fig. 11 as seed 004 measures it: time-averaged hosts under the EPS
/// controller, the same controller settings for both schemes.
#[test]
fn skewed_pareto_load_sk_ch_needs_fewer_time_averaged_hosts() {
    let needed = |scheme| {
        let c = fig11(scheme);
        time_avg_hosts_needed(&c, 16, 5.0, 8).map(|(_, r)| {
            assert!(r.slo_violation_pct() <= 5.0, "{}", show(&r));
            assert!(r.hosts_time_avg <= f64::from(r.hosts_max), "{:?}", r.hosts_timeline);
            r.hosts_time_avg
        })
    };
    let sk = needed(Scheme::SkewedCh).expect("16 hosts are enough");
    let ch = needed(Scheme::ConsistentHashing);
    assert!(ch.is_none_or(|ch| sk < ch), "sk-ch {sk} vs ch {ch:?}");
}

/// Seed 004's SLOs sit near a procedure's completion time alone: with
/// ours tightened towards it ([`Profiles::with_slos_scaled`]), hosts that
/// balance UEs by count alone pay more for their hot spots, and skewed
/// CH's saving over consistent hashing grows.
#[test]
fn tighter_slos_widen_sk_chs_saving_over_ch() {
    let saving = |scale: f64| {
        let needed = |scheme| {
            let c = SimConfig { profiles: Profiles::default().with_slos_scaled(scale), ..fig11(scheme) };
            hosts_needed(&c, 32, 5.0).map(|(n, _)| f64::from(n)).expect("32 hosts are enough")
        };
        let (sk, ch) = (needed(Scheme::SkewedCh), needed(Scheme::ConsistentHashing));
        eprintln!("SLOs x{scale}: sk-ch {sk} hosts, ch {ch}");
        1.0 - sk / ch
    };
    let (default, tight) = (saving(1.0), saving(0.25));
    assert!(default > 0.0 && tight > default, "saving {default:.2} at the default SLOs, {tight:.2} at a quarter");
}

/// The fewer UEs share a load, the larger each one's share of a host, and
/// the less evenly hashing spreads the hot ones: consistent hashing needs
/// more hosts for its hottest, while skewed CH, which places each
/// procedure on the least loaded viable of its candidates, needs about
/// as many (`mobicore bench mme fig11 --sim` takes 40 UEs per host's worth
/// of load; at 125, as here by default, the saving is smaller).
#[test]
fn lumpier_ues_widen_sk_chs_saving_over_ch() {
    let saving = |ues: u32| {
        let needed = |scheme| {
            let base = fig11(scheme);
            let c = SimConfig {
                profiles: Profiles::default().with_slos_scaled(0.25),
                load: LoadConfig { ues, ..base.load.clone() },
                ..base
            };
            hosts_needed(&c, 40, 5.0).map(|(n, _)| f64::from(n)).expect("40 hosts are enough")
        };
        let (sk, ch) = (needed(Scheme::SkewedCh), needed(Scheme::ConsistentHashing));
        eprintln!("{ues} UEs: sk-ch {sk} hosts, ch {ch}");
        1.0 - sk / ch
    };
    let (many, few) = (saving(1000), saving(320));
    assert!(few > many && many > 0.0, "saving {many:.2} with 1000 UEs, {few:.2} with 320");
}
