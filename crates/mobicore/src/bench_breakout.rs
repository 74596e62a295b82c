//! `mobicore bench breakout`: seed 001 Fig. 3 on this machine, the MEC
//! router's local breakout (uplink G-PDUs decapsulated to an edge
//! application, its answers encapsulated into the UE's tunnel) per frame
//! size with 1 and 120,000 traffic rules, each case next to the minimal
//! XDP forwarder and kernel forwarding in the same run
//! (`mobicore_dpbench::breakout` does the work). Printed: rates, Gbit/s,
//! one-way times, the ratios against the targets, the rule install rate.

use anyhow::{Context, Result};
use clap::Args;
use mobicore_dpbench::breakout::{BreakoutCase, BreakoutOptions, BreakoutReport, DIRECTIONS};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::plot::{Chart, Series};

/// Issue 12's targets, reported against (not asserted).
const TARGET_RATIO_TO_XDP: f64 = 0.9;
const TARGET_ADDED_LATENCY_US: f64 = 2.0;

#[derive(Args, Debug)]
pub struct BreakoutArgs {
    /// Frame sizes in bytes on the application's side, FCS included
    /// (64..=1518; the G-PDUs on the eNB's side are 36 bytes longer).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<usize>>,
    /// Traffic rules installed, one set of cases each (1..=130000).
    #[arg(long, value_delimiter = ',')]
    pub rules: Option<Vec<usize>>,
    /// Directions measured: uplink (decapsulated to the application),
    /// downlink (encapsulated to the eNB); both by default.
    #[arg(long, value_delimiter = ',', value_parser = ["uplink", "downlink"])]
    pub directions: Option<Vec<String>>,
    /// Seconds of measuring per rate (the router's and the minimal
    /// forwarder's in a case, each spread over four rounds, A B B A; the ratio is the median of the rounds' ratios).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Time-stamped single frames per device under test and case.
    #[arg(long)]
    pub latency_samples: Option<usize>,
    /// 64 and 1518-byte frames, 1 and 1,000 rules, short runs (about 30 s).
    #[arg(long)]
    pub quick: bool,
    /// Write the report as JSON (cases: direction, frame_size, rules, mpps,
    /// gbps, latency_us_p50, latency_us_p99, baseline_xdp_mpps,
    /// baseline_kernel_mpps, ratios and the baselines' latencies; the rule
    /// installs; the router's XDP counters).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw Fig. 3 (throughput and latency per frame size) as SVG into
    /// this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

pub async fn run(a: BreakoutArgs) -> Result<()> {
    let mut opts = if a.quick { BreakoutOptions::quick() } else { BreakoutOptions::default() };
    if let Some(s) = a.sizes {
        opts.sizes = s;
    }
    if let Some(r) = a.rules {
        opts.rules = r;
    }
    if let Some(d) = a.directions {
        opts.directions = DIRECTIONS.into_iter().filter(|x| d.iter().any(|n| n == x.name())).collect();
    }
    if let Some(s) = a.seconds {
        opts.duration = Duration::try_from_secs_f64(s).context("--seconds")?;
    }
    if let Some(n) = a.latency_samples {
        opts.latency_samples = n;
    }
    let report = mobicore_dpbench::breakout::run(opts).await?;
    print!("{}", table(&report));
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(dir) = &a.plot {
        plot(dir, &report)?;
        println!("plots in {}", dir.display());
    }
    Ok(())
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The summary: one row per case, the installs, the targets, the counters.
pub fn table(r: &BreakoutReport) -> String {
    let mut out = String::from(
        "bench breakout: MEC router (mec_xdp) | minimal XDP forwarder | kernel forwarding; \
         frame sizes on the application's side (FCS included), one-way times of single frames\n",
    );
    let rows: Vec<Vec<String>> = r
        .cases
        .iter()
        .map(|c| {
            vec![
                c.direction.into(),
                c.frame_size.to_string(),
                c.rules.to_string(),
                format!("{:.3}", c.mpps),
                format!("{:.2}", c.gbps),
                format!("{:.3}", c.baseline_xdp_mpps),
                format!("{:.3}", c.baseline_kernel_mpps),
                format!("{:.2}", c.ratio_to_xdp),
                format!("{:.2}", c.ratio_to_kernel),
                opt(c.latency_us_p50, 2),
                opt(c.latency_us_p99, 2),
                opt(c.baseline_xdp_latency_us_p50, 2),
                opt(c.baseline_kernel_latency_us_p50, 2),
                c.ns_per_packet
                    .zip(c.baseline_xdp_ns_per_packet)
                    .map_or("-".into(), |(a, b)| format!("{a:.0} ({b:.0})")),
            ]
        })
        .collect();
    let header = [
        "direction",
        "frame",
        "rules",
        "Mpps",
        "Gbit/s",
        "xdp-min",
        "kernel",
        "/xdp",
        "/kernel",
        "p50 us",
        "p99 us",
        "xdp p50",
        "kernel p50",
        "ns/pkt (min)",
    ];
    out += &crate::report::table(&header, &rows);
    for i in &r.installs {
        out += &format!(
            "installed {} rules over PFCP ({} in all) in {:.2} s: {:.0} rules/s\n",
            i.added, i.total, i.seconds, i.rules_per_s
        );
    }
    if let Some(max) = r.cases.iter().map(|c| c.rules).max() {
        let at_max: Vec<&BreakoutCase> = r.cases.iter().filter(|c| c.rules == max).collect();
        let worst = at_max.iter().min_by(|a, b| a.ratio_to_xdp.total_cmp(&b.ratio_to_xdp));
        if let Some(w) = worst {
            out += &format!(
                "with {max} rules: >= {:.1}% of the minimal XDP forwarder at every frame size (lowest: {} {} bytes; target >= {:.0}%)\n",
                w.ratio_to_xdp * 100.0,
                w.direction,
                w.frame_size,
                TARGET_RATIO_TO_XDP * 100.0
            );
        }
        let added =
            at_max.iter().filter_map(|c| c.latency_added_us.map(|a| (a, *c))).max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((a, c)) = added {
            out += &format!(
                "with {max} rules: the router adds at most {a:+.2} us to the median one-way time of the minimal forwarder ({} {} bytes; target <= {TARGET_ADDED_LATENCY_US} us)\n",
                c.direction, c.frame_size
            );
        }
    }
    let s = r.counters;
    out += &format!(
        "router: {} G-PDUs decapsulated to the application and {} packets encapsulated to the eNB in XDP, {} passed through, {} left to the kernel; veth MTU {}\n",
        s.decapsulated, s.encapsulated, s.passed_through, s.to_kernel, r.mtu
    );
    out
}

/// One series per device under test (and number of rules for the router)
/// in one direction.
fn series(r: &BreakoutReport, dir: &str, y: &dyn Fn(&BreakoutCase) -> [Option<f64>; 3]) -> Vec<Series> {
    let mut rules: Vec<usize> = r.cases.iter().map(|c| c.rules).collect();
    rules.sort_unstable();
    rules.dedup();
    let mut out = Vec::new();
    let pts = |n: usize, k: usize| -> Vec<(f64, f64)> {
        let mut p: Vec<(f64, f64)> = r
            .cases
            .iter()
            .filter(|c| c.direction == dir && c.rules == n)
            .filter_map(|c| y(c)[k].map(|v| (c.frame_size as f64, v)))
            .collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        p
    };
    for &n in &rules {
        out.push(Series { name: format!("MEC router, {n} rules"), points: pts(n, 0) });
    }
    // The baselines of the largest rule count's cases (measured beside them).
    if let Some(&n) = rules.last() {
        out.push(Series { name: "minimal XDP forwarder".into(), points: pts(n, 1) });
        out.push(Series { name: "kernel forwarding".into(), points: pts(n, 2) });
    }
    out.retain(|s| !s.points.is_empty());
    out
}

fn plot(dir: &Path, r: &BreakoutReport) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for d in ["uplink", "downlink"] {
        let what =
            if d == "uplink" { "uplink, decapsulated to the application" } else { "downlink, encapsulated to the eNB" };
        let charts = [
            (
                format!("fig3_throughput_mpps_{d}.svg"),
                format!("Fig. 3: throughput ({what})"),
                "Mpps",
                false,
                series(r, d, &|c| [Some(c.mpps), Some(c.baseline_xdp_mpps), Some(c.baseline_kernel_mpps)]),
            ),
            (
                format!("fig3_throughput_gbps_{d}.svg"),
                format!("Fig. 3: throughput ({what})"),
                "Gbit/s",
                false,
                series(r, d, &|c| {
                    let g = |m: f64| m * c.frame_size as f64 * 8.0 / 1000.0;
                    [Some(c.gbps), Some(c.baseline_xdp_gbps), Some(g(c.baseline_kernel_mpps))]
                }),
            ),
            (
                format!("fig3_latency_{d}.svg"),
                format!("Fig. 3: latency, median one-way ({what})"),
                "latency (us)",
                false,
                series(r, d, &|c| [c.latency_us_p50, c.baseline_xdp_latency_us_p50, c.baseline_kernel_latency_us_p50]),
            ),
        ];
        for (file, title, y_label, log_y, series) in charts {
            let chart = Chart { title: &title, x_label: "frame size (bytes)", y_label, log_x: false, log_y, series };
            std::fs::write(dir.join(&file), chart.svg()).with_context(|| format!("writing {file}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mobicore_dpbench::breakout::{BreakoutCounters, RuleInstall};

    fn case(direction: &'static str, frame_size: usize, rules: usize, mpps: f64) -> BreakoutCase {
        BreakoutCase {
            direction,
            frame_size,
            tunnel_frame_size: frame_size + 36,
            rules,
            mpps,
            gbps: mpps * frame_size as f64 * 8.0 / 1000.0,
            latency_us_p50: Some(2.0),
            latency_us_p99: Some(3.0),
            baseline_xdp_mpps: 2.0,
            baseline_xdp_gbps: 2.0 * frame_size as f64 * 8.0 / 1000.0,
            baseline_xdp_latency_us_p50: Some(1.5),
            baseline_xdp_latency_us_p99: Some(2.5),
            baseline_kernel_mpps: 1.0,
            baseline_kernel_latency_us_p50: Some(4.0),
            baseline_kernel_latency_us_p99: None,
            ratio_to_xdp: mpps / 2.0,
            ratio_to_kernel: mpps,
            latency_added_us: Some(0.5),
            ns_per_packet: None,
            baseline_xdp_ns_per_packet: None,
        }
    }

    fn report() -> BreakoutReport {
        BreakoutReport {
            cases: vec![
                case("uplink", 64, 1, 1.9),
                case("uplink", 1518, 1, 1.8),
                case("uplink", 64, 120_000, 1.7),
                case("uplink", 1518, 120_000, 1.9),
                case("downlink", 64, 120_000, 1.95),
            ],
            installs: vec![RuleInstall { added: 119_999, total: 120_000, seconds: 2.0, rules_per_s: 60_000.0 }],
            counters: BreakoutCounters { decapsulated: 5, encapsulated: 6, passed_through: 0, to_kernel: 0 },
            mtu: 1536,
        }
    }

    #[test]
    fn the_summary_names_the_worst_case_against_the_targets() {
        let t = table(&report());
        assert!(t.contains(">= 85.0% of the minimal XDP forwarder"), "{t}");
        assert!(t.contains("lowest: uplink 64 bytes"), "{t}");
        assert!(t.contains("installed 119999 rules over PFCP (120000 in all) in 2.00 s: 60000 rules/s"), "{t}");
        assert!(t.contains("+0.50 us"), "{t}");
    }

    #[test]
    fn the_figure_has_a_series_per_rule_count_and_baseline() {
        let r = report();
        let s = series(&r, "uplink", &|c| [Some(c.mpps), Some(c.baseline_xdp_mpps), Some(c.baseline_kernel_mpps)]);
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["MEC router, 1 rules", "MEC router, 120000 rules", "minimal XDP forwarder", "kernel forwarding"]
        );
        assert_eq!(s[1].points, vec![(64.0, 1.7), (1518.0, 1.9)]);
        let dir = std::env::temp_dir().join(format!("mcbo-plot-{}", std::process::id()));
        plot(&dir, &r).unwrap();
        for d in ["uplink", "downlink"] {
            for f in ["throughput_mpps", "throughput_gbps", "latency"] {
                let svg = std::fs::read_to_string(dir.join(format!("fig3_{f}_{d}.svg"))).unwrap();
                assert!(svg.contains("<polyline"), "{f} {d}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
