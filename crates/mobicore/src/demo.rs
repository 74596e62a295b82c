//! `mobicore demo`: every network function on this machine, N emulated UEs
//! attached and detached through them, a summary, and nothing left running.

use crate::allinone::{self, AllInOne};
use crate::capture::{self, Capture, Ports};
use crate::cli::SctpTransport;
use crate::config;
use anyhow::{bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use mobicore_hss::SubscriberStore;
use mobicore_ran::{Progress, RanReport};
use serde_json::json;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Number of UEs to attach and detach.
    #[arg(long, default_value_t = 100)]
    pub ues: u64,
    /// Number of emulated eNBs (one SCTP association each).
    #[arg(long, default_value_t = 4)]
    pub enbs: u32,
    /// UE arrivals per second (default: as fast as the in-flight cap allows).
    #[arg(long)]
    pub rate: Option<f64>,
    /// S1-MME transport (default: [sctp] transport of the config, auto).
    #[arg(long, value_enum)]
    pub sctp: Option<SctpTransport>,
    /// Capture the run with tshark into FILE and check it decodes cleanly
    /// (S1AP, NAS-EPS, Diameter, GTPv2, PFCP); exits non-zero if not.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Write the summary as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// TOML config file.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

pub async fn run(a: DemoArgs) -> Result<()> {
    let cfg = config::load(a.config.as_deref())?;
    let t = allinone::transport(a.sctp.unwrap_or(cfg.sctp.transport), cfg.sctp.udp_port);
    allinone::check_privileges(t)?;
    let mut ran = cfg.ran.core.clone();
    ran.mme = cfg.mme.s1ap;
    ran.ues = a.ues;
    ran.enbs = a.enbs;
    ran.rate = a.rate.or(ran.rate);
    ran.detach = true;

    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran.plan, ran.ues)?;

    // Capture everything on lo from before the first S6a connection.
    let capture = match &a.pcap {
        Some(f) => {
            anyhow::ensure!(capture::tshark_available(), "--pcap needs tshark (apt-get install tshark)");
            Some(Capture::start(f, &Ports::everything())?)
        }
        None => None,
    };
    let core = allinone::start(&cfg, store, t).await?;
    println!(
        "mobicore demo: MME S1-MME {} over {:?}, HSS S6a {}, S/P-GW-C S11 {}, PFCP {} -> UPF {}",
        core.s1ap, t, core.hss, core.sgw_s11, core.pfcp.0, core.pfcp.1
    );
    let report = run_with_progress(&cfg, ran, t, a.quiet).await;
    let ports = ports_of(&core);
    let counters = counters_of(&core);
    core.stop().await?;
    let report = report?;
    print_report(&report);
    print_counters(&counters);
    let mut summary = summary_json(&report);
    let mut clean = true;
    if let Some(cap) = capture {
        let file = cap.stop()?;
        let v = capture::analyze(&file, &ports)?;
        println!("capture {}: packets {:?}", file.display(), v.packets);
        for m in v.malformed.iter().chain(&v.expert_errors).take(20) {
            println!("  problem: {m}");
        }
        println!("capture verdict: {}", if v.is_clean() { "clean (no malformed packet, no expert error)" } else { "PROBLEMS" });
        clean = v.is_clean();
        summary["capture"] = serde_json::to_value(&v)?;
    }
    if let Some(p) = &a.json {
        write_json(p, &summary)?;
    }
    if report.failed > 0 || report.attached < report.ues {
        bail!("{} of {} UEs failed to attach", report.ues - report.attached, report.ues);
    }
    if !clean {
        bail!("the capture has malformed packets or expert errors");
    }
    Ok(())
}

/// Runs the RAN workload with a progress bar per phase.
pub async fn run_with_progress(cfg: &config::Config, ran: mobicore_ran::RanConfig, t: mobicore_sctp::Transport, quiet: bool) -> Result<RanReport> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
    let bar_task = tokio::spawn(async move {
        let mut bar: Option<(mobicore_ran::Phase, ProgressBar)> = None;
        while let Some(p) = rx.recv().await {
            if quiet {
                continue;
            }
            if bar.as_ref().map(|b| b.0) != Some(p.phase) {
                if let Some((_, b)) = bar.take() {
                    b.finish();
                }
                let b = ProgressBar::new(p.total);
                b.set_style(
                    ProgressStyle::with_template("{prefix:>9} [{bar:40}] {pos}/{len} {per_sec} {msg}")
                        .expect("valid template")
                        .progress_chars("=> "),
                );
                b.set_prefix(p.phase.name());
                bar = Some((p.phase, b));
            }
            if let Some((_, b)) = &bar {
                b.set_position(p.done);
                if p.failed > 0 {
                    b.set_message(format!("{} failed", p.failed));
                }
            }
        }
        if let Some((_, b)) = bar {
            b.finish();
        }
    });
    let r = allinone::run_ran_workload(cfg, ran, t, Some(tx)).await;
    let _ = bar_task.await;
    r
}

fn ports_of(core: &AllInOne) -> Ports {
    Ports {
        diameter: vec![core.hss.port()],
        gtpv2: vec![core.sgw_s11.port()],
        pfcp: vec![core.pfcp.0.port(), core.pfcp.1.port()],
    }
}

fn counters_of(core: &AllInOne) -> Vec<(String, u64)> {
    core.counters
        .iter()
        .flat_map(|(nf, c)| c.snapshot().into_iter().map(move |(k, v)| (format!("{nf}.{k}"), v)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

fn print_counters(c: &[(String, u64)]) {
    if !c.is_empty() {
        let rows: Vec<Vec<String>> = c.iter().map(|(k, v)| vec![k.clone(), v.to_string()]).collect();
        print!("{}", crate::report::table(&["counter", "value"], &rows));
    }
}

pub fn print_report(r: &RanReport) {
    print!("{}", r.table());
}

/// The JSON summary of a run (also the `bench attach` JSON).
pub fn summary_json(r: &RanReport) -> serde_json::Value {
    let ms = |v: Option<u64>| v.map_or(0.0, |us| us as f64 / 1000.0);
    json!({
        "ues": r.ues,
        "enbs": r.enbs,
        "attached": r.attached,
        "failed": r.failed,
        "attach_per_s": r.attach_per_s,
        "latency_ms_p50": ms(r.attach_p50()),
        "latency_ms_p90": ms(r.attach_p90()),
        "latency_ms_p99": ms(r.attach_p99()),
        "detached": r.detached,
        "detach_failed": r.detach_failed,
        "detach_per_s": r.detach_per_s,
        "detach_latency_ms_p50": ms(r.detach_p50()),
        "detach_latency_ms_p99": ms(r.detach_p99()),
        "failures": r.failures,
        "anomalies": r.anomalies,
    })
}

pub fn write_json(path: &Path, v: &serde_json::Value) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(v)? + "\n")?;
    println!("wrote {}", path.display());
    Ok(())
}
