use super::*;
use crate::load::{Pattern, Skew};

fn skewed(hosts: u32, scheme: Scheme, rate: f64) -> SimConfig {
    SimConfig {
        hosts,
        scheme,
        load: LoadConfig {
            ues: 300,
            rate,
            duration_s: 5.0,
            pattern: Pattern::Constant,
            skew: Skew { hot_fraction: 0.5, hot_share: 0.9 },
            seed: 11,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn explore() {
    for rate in [2000.0, 2500.0, 3000.0] {
        for scheme in Scheme::ALL {
            let r = run(&skewed(3, scheme, rate));
            println!(
                "rate {rate} {scheme}: viol {:.2}% cpu {:?} sd {:.1} p50 {:.2} p99 {:.2} thr {:.0} failed {} bal {} fwd {} bumps {}",
                r.slo_violation_pct(),
                r.cpu_pct.iter().map(|c| c.round()).collect::<Vec<_>>(),
                r.cpu_stddev_pct(),
                r.latency_ms_p50,
                r.latency_ms_p99,
                r.procedures_per_s,
                r.failed,
                r.balancer_violations,
                r.forwarder_violations,
                r.priority_bumps
            );
            println!("   per class {:?}", r.per_class.iter().map(|c| format!("{}/{} ", c.violations, c.procedures)).collect::<Vec<_>>());
        }
    }
}
