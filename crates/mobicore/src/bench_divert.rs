//! `mobicore bench divert`: seed 000 Figs 10-16 on this machine, the data
//! path with and without the steering switch diverting a UE to an edge
//! anchor, measured in one run with the two cases interleaved
//! (`mobicore_dpbench::divert` does the work). Printed: idle round trips
//! (Figs 10-11), then per direction and target rate the TCP rate achieved
//! with the switch's CPU use (Figs 12-15), UDP loss (Fig. 16) and round
//! trips under that load, each diverted / not diverted.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use mobicore_dpbench::divert::{DivertBenchOptions, DivertMode, DivertPoint, DivertReport, Histogram};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::plot::{Chart, Series};

/// Seed 000's targets, reported against (not asserted).
const TARGET_ADDED_RTT_US: f64 = 10.0;
const TARGET_THROUGHPUT_RATIO: f64 = 0.95;

#[derive(Args, Debug)]
pub struct DivertArgs {
    /// Target rates in Mbit/s (TCP and UDP, each direction, both cases).
    #[arg(long, value_delimiter = ',')]
    pub rates: Option<Vec<f64>>,
    /// Seconds of each TCP transfer and each UDP stream.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Blocks per case at each target, in A B B A order (a point is their
    /// mean): more rounds, less of a busy host's noise near saturation.
    #[arg(long)]
    pub rounds: Option<usize>,
    /// How the edge replica holds the UE: selective (the replica's TEID and
    /// UE address, translated by the switch) or naive (same TEID and address).
    #[arg(long, value_enum, default_value = "selective")]
    pub mode: ModeArg,
    /// Two rates, short runs, fewer probes (under 20 s).
    #[arg(long)]
    pub quick: bool,
    /// Write the report as JSON (points: diverting, direction, target_mbps,
    /// achieved_mbps, cpu_pct, udp_sent_mbps, loss_pct, rtt_p50_us,
    /// rtt_p90_us, rtt_p99_us, jitter_us; idle rtt per case; histograms;
    /// the switch's counters).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw Figs 10-16 as SVG into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    Naive,
    Selective,
}

pub async fn run(a: DivertArgs) -> Result<()> {
    let mut opts = if a.quick { DivertBenchOptions::quick() } else { DivertBenchOptions::default() };
    if let Some(r) = a.rates {
        opts.rates_mbps = r;
    }
    if let Some(n) = a.rounds {
        anyhow::ensure!(n > 0, "--rounds must be at least 1");
        opts.rounds = n;
    }
    if let Some(s) = a.seconds {
        opts.duration = Duration::try_from_secs_f64(s).context("--seconds")?;
    }
    opts.mode = match a.mode {
        ModeArg::Naive => DivertMode::Naive,
        ModeArg::Selective => DivertMode::Selective,
    };
    let report = mobicore_dpbench::divert::run(opts).await?;
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

fn f1(v: f64) -> String {
    format!("{v:.1}")
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), f1)
}

/// The summary: idle round trips, the per-point comparison, the targets.
pub fn table(r: &DivertReport) -> String {
    let mut out =
        format!("bench divert ({} diversion): idle round trips UE - eNB - switch - anchor - server\n", r.mode.name());
    let rows: Vec<Vec<String>> = r
        .rtt
        .iter()
        .map(|c| {
            let s = c.stats;
            vec![
                if c.diverting { "diverting" } else { "not diverting" }.into(),
                format!("{}/{}", c.answered, c.probes),
                opt(s.map(|s| s.rtt_p50_us)),
                opt(s.map(|s| s.rtt_p90_us)),
                opt(s.map(|s| s.rtt_p99_us)),
                opt(s.map(|s| s.jitter_us)),
            ]
        })
        .collect();
    out += &crate::report::table(&["case", "answered", "p50 us", "p90 us", "p99 us", "jitter us"], &rows);
    let pairs = r.pairs();
    let rows: Vec<Vec<String>> = pairs
        .iter()
        .map(|(a, b)| {
            vec![
                a.direction.into(),
                format!("{:.0}", a.target_mbps),
                format!("{:.0}", a.achieved_mbps),
                format!("{:.0}", b.achieved_mbps),
                format!("{:.3}", ratio(b.achieved_mbps, a.achieved_mbps)),
                f1(a.cpu_pct),
                f1(b.cpu_pct),
            ]
        })
        .collect();
    out += "\nTCP throughput and the switch's CPU (Figs 12-15): not diverting | diverting\n";
    let header = ["direction", "target Mb/s", "TCP Mb/s", "diverted", "ratio", "switch CPU %", "diverted"];
    out += &crate::report::table(&header, &rows);
    let rows: Vec<Vec<String>> = pairs
        .iter()
        .map(|(a, b)| {
            let p50 = |p: &DivertPoint| p.rtt.map(|s| s.rtt_p50_us);
            let p99 = |p: &DivertPoint| p.rtt.map(|s| s.rtt_p99_us);
            vec![
                a.direction.into(),
                format!("{:.0}", a.target_mbps),
                format!("{:.0}", a.udp_sent_mbps),
                format!("{:.0}", b.udp_sent_mbps),
                format!("{:.2}", a.loss_pct),
                format!("{:.2}", b.loss_pct),
                opt(p50(a)),
                opt(p50(b)),
                opt(p99(a)),
                opt(p99(b)),
            ]
        })
        .collect();
    out += "\nUDP loss (Fig. 16) and round trips under that load: not diverting | diverting\n";
    let header = [
        "direction",
        "target Mb/s",
        "sent Mb/s",
        "diverted",
        "loss %",
        "diverted",
        "p50 us",
        "diverted",
        "p99 us",
        "diverted",
    ];
    out += &crate::report::table(&header, &rows);
    let added = r.added_median_us();
    out += &format!(
        "diverting adds {} us to the idle median RTT (target <= {TARGET_ADDED_RTT_US} us)\n",
        added.map_or("-".into(), |v| format!("{v:+.1}"))
    );
    for dir in ["uplink", "downlink"] {
        let worst = r
            .pairs()
            .into_iter()
            .filter(|(a, _)| a.direction == dir)
            .map(|(a, b)| (ratio(b.achieved_mbps, a.achieved_mbps), a.target_mbps))
            .min_by(|x, y| x.0.total_cmp(&y.0));
        if let Some((w, at)) = worst {
            out += &format!(
                "{dir}: diverting keeps >= {:.1}% of the TCP throughput at every target (lowest at {at:.0} Mb/s; target >= {:.0}%)\n",
                w * 100.0,
                TARGET_THROUGHPUT_RATIO * 100.0
            );
        }
    }
    let s = r.steering;
    out += &format!(
        "switch: {} uplink and {} downlink G-PDUs diverted in XDP, {} passed through, {} left to the kernel\n",
        s.diverted_uplink, s.diverted_downlink, s.passed, s.to_kernel
    );
    out
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

fn histogram_series(h: &Histogram) -> Vec<Series> {
    let pts =
        |c: &[u64]| c.iter().enumerate().map(|(i, n)| (h.start_us + (i as f64 + 0.5) * h.bin_us, *n as f64)).collect();
    vec![
        Series { name: "not diverting".into(), points: pts(&h.not_diverting) },
        Series { name: "diverting".into(), points: pts(&h.diverting) },
    ]
}

/// One series per direction and case.
fn rate_series(r: &DivertReport, x: &dyn Fn(&DivertPoint) -> f64, y: &dyn Fn(&DivertPoint) -> f64) -> Vec<Series> {
    let mut out = Vec::new();
    for dir in ["uplink", "downlink"] {
        for diverting in [false, true] {
            let mut points: Vec<(f64, f64)> = r
                .points
                .iter()
                .filter(|p| p.direction == dir && p.diverting == diverting)
                .map(|p| (x(p), y(p)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let name = format!("{dir}, {}", if diverting { "diverting" } else { "not diverting" });
            out.push(Series { name, points });
        }
    }
    out
}

fn plot(dir: &Path, r: &DivertReport) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let target = |p: &DivertPoint| p.target_mbps;
    let charts = [
        (
            "fig10_rtt_histogram.svg",
            Chart {
                title: "Fig. 10: round-trip time",
                x_label: "RTT (us)",
                y_label: "probes",
                log_x: false,
                log_y: false,
                series: histogram_series(&r.rtt_histogram),
            },
        ),
        (
            "fig11_jitter_histogram.svg",
            Chart {
                title: "Fig. 11: jitter (|consecutive RTT difference|)",
                x_label: "jitter (us)",
                y_label: "probes",
                log_x: false,
                log_y: false,
                series: histogram_series(&r.jitter_histogram),
            },
        ),
        (
            "fig12_14_tcp_throughput.svg",
            Chart {
                title: "Figs 12a/14a: TCP throughput achieved",
                x_label: "target (Mbit/s)",
                y_label: "achieved (Mbit/s)",
                log_x: false,
                log_y: false,
                series: rate_series(r, &target, &|p| p.achieved_mbps),
            },
        ),
        (
            "fig12_14_switch_cpu.svg",
            Chart {
                title: "Figs 12b/14b: steering switch CPU",
                x_label: "target (Mbit/s)",
                y_label: "CPU (% of one)",
                log_x: false,
                log_y: false,
                series: rate_series(r, &target, &|p| p.cpu_pct),
            },
        ),
        (
            "fig13_15_cpu_vs_throughput.svg",
            Chart {
                title: "Figs 13/15: achieved TCP throughput vs switch CPU",
                x_label: "switch CPU (% of one)",
                y_label: "achieved (Mbit/s)",
                log_x: false,
                log_y: false,
                series: rate_series(r, &|p| p.cpu_pct, &|p| p.achieved_mbps),
            },
        ),
        (
            "fig16_loss.svg",
            Chart {
                title: "Fig. 16: UDP packet loss",
                x_label: "offered (Mbit/s, what the sender managed)",
                y_label: "loss (%)",
                log_x: false,
                log_y: false,
                series: rate_series(r, &|p| p.udp_sent_mbps, &|p| p.loss_pct),
            },
        ),
    ];
    for (file, chart) in charts {
        std::fs::write(dir.join(file), chart.svg()).with_context(|| format!("writing {file}"))?;
    }
    Ok(())
}
