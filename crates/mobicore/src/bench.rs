//! `mobicore bench ...`: each figure is measured next to its baseline in
//! the same run, because these machines are shared and noisy.

use crate::allinone;
use crate::cli::SctpTransport;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use mobicore_hss::SubscriberStore;
use serde_json::json;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Full attaches per second (EPS-AKA + NAS security + S6a + S11 + PFCP)
    /// and attach latency, then detach. Baseline, measured in the same run
    /// after the core has stopped: the same emulated eNBs and UEs (real
    /// USIM keys, NAS security) over the same SCTP transport against a
    /// responder that answers every message at once from replies built
    /// before the clock starts: the most the emulator can drive; the
    /// ratio (core / responder) says how close the core comes to its load
    /// generator. Second baseline: the S1-MME transport's own message rate.
    Attach(AttachArgs),
    /// Idle mode and mobility signalling through the whole core: every UE
    /// attaches, then in phases all UEs are released to ECM-IDLE, come
    /// back by UE-triggered service request, hand over by X2 and by S1
    /// (direct and indirect forwarding alternating) to the next eNB, are
    /// released again and make a tracking area update from idle; then
    /// detach. Rate and latency (p50, p99) per procedure; the attach phase
    /// of the same run is the reference each rate is also given against.
    /// With data (`--data-ues`, default 16; XDP UPF in namespaces), those
    /// UEs' user plane follows them through every phase under a numbered
    /// downlink: per phase the packets lost, duplicated and reordered, the
    /// interruption at the UE, and paging to the first delivered packet.
    /// Then the mobility model moves the data UEs while the data runs: per
    /// handover type and rate (`--handover-type`, `--handover-rate`) a
    /// window in which each makes that many handovers per second to a
    /// random other eNB, next to a window in which they stay put; the
    /// first `--tcp-ues` read a TCP stream from the data network in both:
    /// the goodput ratio moving / still, and the numbered downlink's
    /// losses, duplicates, reordering and gaps while moving.
    Mobility(MobilityArgs),
    /// User-space SCTP message rate on loopback.
    Sctp(SctpArgs),
    /// PFCP session establishments and deletions per second against the
    /// UPF's PFCP node, with 1 and N requests in flight; baseline: PFCP
    /// Heartbeats at the same concurrency.
    Pfcp(PfcpArgs),
    /// User-plane packet rate (uplink/downlink, 64 and 1400-byte inner
    /// packets, 1/1,000/100,000 sessions) and added RTT of the XDP UPF,
    /// each case next to plain kernel forwarding and a minimal XDP GTP-U
    /// forwarder on the identical namespace topology, plus the bare XDP
    /// redirect ceiling. Load from a BPF_PROG_RUN live-frames generator.
    Dataplane(DataplaneArgs),
    /// Slow-path receive rate of buffered downlink packets (FAR BUFF) in
    /// XDP mode: XDP_PASS + kernel route + TUN read (the fallback) versus
    /// an AF_XDP copy-mode socket (the default), 64 and 1400-byte packets,
    /// same run and topology as `bench dataplane`, with the offered rate.
    Slowpath(crate::bench_slowpath::SlowpathArgs),
    /// Seed 000 Figs 6-8: octets stored, octets sent and time to replicate
    /// an S/P-GW's state by GTP-C replay, naive (every recorded message)
    /// and selective (the moved UEs' only), against the number of
    /// registered and moved UEs; real S/P-GW-Cs and the controller on
    /// loopback, moves through its REST API.
    Relocation(crate::bench_relocation::RelocationArgs),
    /// Seed 000 Figs 10-16: round-trip time and jitter, TCP throughput
    /// against target rate with the steering switch's CPU use, and UDP
    /// loss, uplink and downlink, with the switch diverting the UE to an
    /// edge anchor and without (passing it through), interleaved in one
    /// run; all in XDP across seven namespaces (eNB, switch, two anchors).
    Divert(crate::bench_divert::DivertArgs),
    /// Seed 001 Fig. 3: the MEC router's local breakout, throughput (Mpps,
    /// Gbit/s) and one-way latency for 64 to 1518-byte frames, uplink
    /// (G-PDUs decapsulated to an edge application) and downlink (its
    /// answers encapsulated into the UE's tunnel), with 1 and 120,000
    /// traffic rules installed over PFCP (the install rate reported), each
    /// case next to the minimal XDP forwarder and kernel forwarding on the
    /// identical namespace topology (`bench dataplane`'s generator).
    Breakout(crate::bench_breakout::BreakoutArgs),
    /// Seed 004 Figs. 6-11 on real processes: the elastic MME
    /// (mme-frontend, mme-hosts, a redis-server started for the run) beside
    /// the stateful MME (`mobicore mme`), the emulated RAN as load:
    /// procedures/s against offered load (fig6); latency per bin, failed
    /// procedures, re-attaches and recovery around a host killed mid-run,
    /// hot and cold, the stateful MME killed and restarted (fig7); latency
    /// and hosts over time as the front end's EPS controller scales hosts
    /// bounded by --cpu-max under the T2 ramp (fig8); service request and
    /// S1 handover latency on one such host pinned to a CPU, its NF
    /// instances unified, one per procedure, or prioritized either way
    /// (fig9, --rate scaled down from 1,000/s to what it takes); SLO violations and
    /// CPU spread across such hosts per balancer, uniform and skewed load
    /// (fig10); the fewest such hosts per balancer and Pareto alpha that
    /// keep --target-pct violations under the load model's bursts (fig11,
    /// up to --max-hosts 4). Figs. 9-11 with `--sim`: service request and
    /// handover latency on one host with the NFs unified, decomposed or
    /// prioritized (fig9); skewed consistent hashing against round robin,
    /// consistent hashing and Maglev against the number of hosts (fig10),
    /// and the hosts each needs for at most 5% violations under Pareto
    /// bursts (fig11: 50 hosts' load, up to 160 hosts, SLOs x0.25 as
    /// tight as seed 004's), from the elastic MME's simulator running the
    /// same balancer and forwarder code.
    Mme(Box<crate::bench_mme::MmeArgs>),
}

#[derive(Args, Debug)]
pub struct DataplaneArgs {
    /// Inner packet sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "64,1400")]
    pub sizes: Vec<usize>,
    /// Installed sessions, one case each.
    #[arg(long, value_delimiter = ',', default_value = "1,1000,100000")]
    pub sessions: Vec<usize>,
    /// Seconds of measuring per rate (the UPF's and each baseline's in a
    /// case, spread over three interleaved rounds)
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Write the cases as JSON (direction, size, sessions, mpps,
    /// baseline_kernel_mpps, baseline_xdp_mpps, ratios, Zipf-like columns, rtt_us)
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct PfcpArgs {
    /// Sessions established (and deleted) per case.
    #[arg(long, default_value_t = 50_000)]
    pub sessions: usize,
    /// Requests in flight, one case each.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    pub in_flight: Vec<usize>,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// Number of UEs.
    #[arg(long, default_value_t = 10_000)]
    pub ues: u64,
    /// UE arrivals per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Number of eNBs.
    #[arg(long, default_value_t = 16)]
    pub enbs: u32,
    /// Attach procedures in flight at most (more adds queueing latency, not rate).
    #[arg(long, default_value_t = 256)]
    pub in_flight: usize,
    #[arg(long, value_enum)]
    pub sctp: Option<SctpTransport>,
    /// Write the results as JSON (the core's summary, and with the
    /// baselines baseline_responder_attach_per_s, ratio_to_responder,
    /// baseline_sctp_msgs_per_s, baseline_attach_equivalent_per_s,
    /// ratio_to_baseline).
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Skip both baselines (the responder run and SCTP alone).
    #[arg(long)]
    pub no_baseline: bool,
}

#[derive(Args, Debug)]
pub struct MobilityArgs {
    /// Number of UEs.
    #[arg(long, default_value_t = 10_000)]
    pub ues: u64,
    /// Number of eNBs (at least 2: UEs hand over to the next one).
    #[arg(long, default_value_t = 16)]
    pub enbs: u32,
    /// Procedures in flight at most.
    #[arg(long, default_value_t = 256)]
    pub in_flight: usize,
    #[arg(long, value_enum)]
    pub sctp: Option<SctpTransport>,
    /// UEs that carry data through the phases (numbered downlink from
    /// the data network, uplink bursts; the UPF's XDP program in network
    /// namespaces: needs root). 0: signalling only.
    #[arg(long, default_value_t = 16)]
    pub data_ues: usize,
    /// Interval of each data UE's downlink datagrams, in milliseconds
    /// (the resolution of the interruption times).
    #[arg(long, default_value_t = 2)]
    pub data_interval_ms: u64,
    /// Handovers per UE per second of the moving windows, one case each
    /// per handover type.
    #[arg(long, value_delimiter = ',', default_value = "0.5,1,2")]
    pub handover_rate: Vec<f64>,
    /// Handover types of the moving windows, one case each per rate: x2,
    /// s1 or mixed (X2 or S1 drawn per handover).
    #[arg(long, value_delimiter = ',', default_value = "x2,s1")]
    pub handover_type: Vec<mobicore_ran::HandoverType>,
    /// Seconds of each window (moving, and still next to it).
    #[arg(long, default_value_t = 5.0)]
    pub window_s: f64,
    /// Data UEs that also read a TCP stream in the windows.
    #[arg(long, default_value_t = 4)]
    pub tcp_ues: usize,
    /// Cap of each TCP stream, Mbit/s (0: as fast as TCP goes, which on
    /// a shared 2-core host measures mostly who got the CPU: the unpaced
    /// moving/still ratio swung from 0.5 to 3.4 between windows).
    #[arg(long, default_value_t = 20.0)]
    pub tcp_mbit: f64,
    /// Seed of the mobility model (targets, phases, mixed draws).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No moving windows: the phases only.
    #[arg(long)]
    pub no_moving: bool,
    /// T3412 the MME gives the UEs, in seconds (periodic TAU of idle UEs
    /// at its expiry, TS 24.301 5.3.5); default: the configuration's.
    #[arg(long)]
    pub t3412_s: Option<u64>,
    /// Write one object per procedure (procedure, ues, ok, failed, per_s,
    /// latency_ms_p50, latency_ms_p99, ratio_to_attach; with data also
    /// data_ues, lost, duplicated, reordered, interruption_ms_p50/p99,
    /// downlink_delay_ms_p50/p99; paging-response: paging to the end of
    /// the answer's context setup, first_packet_ms_p50/p99; x2-handover
    /// and s1-handover: tcp_goodput_ratio at 1/s), one per moving case
    /// (handover_type, handover_rate, handovers ok/failed/skipped,
    /// per_s, latency_ms_p50/p99, lost, duplicated, reordered,
    /// interruption_ms_p50/p99, tcp_mbit_s moving and still,
    /// tcp_goodput_ratio) and the emulator's send errors.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct SctpArgs {
    #[arg(long, value_enum, default_value = "raw")]
    pub sctp: SctpTransport,
    #[arg(long, default_value_t = 16)]
    pub assocs: usize,
    #[arg(long, default_value_t = 200_000)]
    pub messages: usize,
    /// User message size in bytes (S1AP messages are mostly 30-150 bytes).
    #[arg(long, default_value_t = 100)]
    pub size: usize,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// S1AP messages per attach between eNB and MME: Initial UE Message,
/// Authentication Request/Response, Security Mode Command/Complete, Initial
/// Context Setup Request/Response, Attach Complete.
const S1AP_MESSAGES_PER_ATTACH: f64 = 8.0;

pub async fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Attach(a) => attach(a).await,
        BenchCommand::Mobility(a) => mobility(a).await,
        BenchCommand::Sctp(a) => sctp(a).await,
        BenchCommand::Pfcp(a) => pfcp(a).await,
        BenchCommand::Dataplane(a) => dataplane(a).await,
        BenchCommand::Slowpath(a) => crate::bench_slowpath::run(a).await,
        BenchCommand::Relocation(a) => crate::bench_relocation::run(a).await,
        BenchCommand::Divert(a) => crate::bench_divert::run(a).await,
        BenchCommand::Breakout(a) => crate::bench_breakout::run(a).await,
        BenchCommand::Mme(a) => crate::bench_mme::run(*a).await,
    }
}

async fn attach(a: AttachArgs) -> Result<()> {
    let (cfg, t, mut ran) = allinone::run_setup(a.config.as_deref(), a.sctp, a.ues, a.enbs)?;
    ran.rate = a.rate;
    ran.max_in_flight = a.in_flight;
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran.plan, ran.ues)?;
    let core = allinone::start(&cfg, store, t).await?;
    ran.mme = core.s1ap;
    let report = crate::demo::run_with_progress(&cfg, ran.clone(), t, false).await;
    core.stop().await?;
    let report = report?;
    crate::demo::print_report(&report);
    let mut out = crate::demo::summary_json(&report);

    let mut baseline_error = None;
    if !a.no_baseline {
        // The emulator against the responder: same UEs, eNBs, in-flight
        // cap and transport, new associations (the core has stopped).
        println!("baseline: the same emulator run against a responder with pre-built replies");
        let b = crate::responder::run_attach(&cfg, ran, t, false).await.context("the responder baseline")?;
        let r = &b.report;
        let ratio = report.attach_per_s / r.attach_per_s;
        let ms = |v: Option<u64>| v.map_or("-".into(), |us| format!("{:.2}", us as f64 / 1000.0));
        let row = |name: &str, x: &mobicore_ran::RanReport| {
            vec![
                name.to_string(),
                format!("{}/{}", x.attached, x.ues),
                format!("{:.0}", x.attach_per_s),
                ms(x.attach_p50()),
                ms(x.attach_p99()),
                format!("{}/{}", x.detached, x.ues),
                format!("{:.0}", x.detach_per_s),
            ]
        };
        println!(
            "baseline: replies built in {:.0} ms before the clock started; core and responder runs side by side:",
            b.build_time.as_secs_f64() * 1000.0
        );
        print!(
            "{}",
            crate::report::table(
                &["run", "attached", "attach/s", "p50 ms", "p99 ms", "detached", "detach/s"],
                &[row("core", &report), row("responder", r)]
            )
        );
        println!("core / responder: {ratio:.2} ({:.1}% of what the emulator can drive)", 100.0 * ratio);
        out["baseline_responder_attach_per_s"] = json!(r.attach_per_s);
        out["baseline_responder_detach_per_s"] = json!(r.detach_per_s);
        out["baseline_responder_latency_ms_p50"] = json!(r.attach_p50().map_or(0.0, |us| us as f64 / 1000.0));
        out["ratio_to_responder"] = json!(ratio);
        if r.failed > 0 || r.attached < r.ues || r.detached < r.ues {
            baseline_error = Some(format!(
                "responder baseline: {} of {} attached, {} detached ({:?}; responder counters {:?})",
                r.attached,
                r.ues,
                r.detached,
                r.failures,
                b.counters.snapshot()
            ));
        }

        // The transport alone, same machine, same run: eNB->MME messages of
        // S1AP size over as many associations as eNBs.
        let messages = (a.ues as f64 * S1AP_MESSAGES_PER_ATTACH).clamp(50_000.0, 400_000.0) as usize;
        let b = mobicore_sctp::bench(t, a.enbs as usize, messages, 100).await;
        if let Some(e) = &b.error {
            bail!("SCTP baseline failed: {e}");
        }
        let ceiling = b.msgs_per_s / S1AP_MESSAGES_PER_ATTACH;
        println!(
            "baseline: SCTP alone {:.0} msgs/s = {:.0} attach-equivalents/s; full attaches reach {:.1}% of it",
            b.msgs_per_s,
            ceiling,
            100.0 * report.attach_per_s / ceiling
        );
        out["baseline_sctp_msgs_per_s"] = json!(b.msgs_per_s);
        out["baseline_attach_equivalent_per_s"] = json!(ceiling);
        out["ratio_to_baseline"] = json!(report.attach_per_s / ceiling);
    }
    out["transport"] = json!(format!("{t:?}"));
    if let Some(p) = &a.json {
        crate::demo::write_json(p, &out)?;
    }
    if report.failed > 0 {
        bail!("{} attaches failed", report.failed);
    }
    if let Some(e) = baseline_error {
        bail!(e);
    }
    Ok(())
}

async fn mobility(a: MobilityArgs) -> Result<()> {
    if a.enbs < 2 {
        bail!("--enbs must be at least 2: UEs hand over to the next eNB");
    }
    let (mut cfg, t, mut ran) = allinone::run_setup(a.config.as_deref(), a.sctp, a.ues, a.enbs)?;
    if let Some(s) = a.t3412_s {
        cfg.mme.core.t3412_seconds = s;
    }
    ran.rate = None;
    ran.max_in_flight = a.in_flight;
    ran.mobility = true;
    let moving = (!a.no_moving && !a.handover_rate.is_empty() && !a.handover_type.is_empty()).then(|| {
        crate::bench_mobility::MovingPlan {
            types: a.handover_type.clone(),
            rates: a.handover_rate.clone(),
            window: std::time::Duration::from_secs_f64(a.window_s.max(0.1)),
            tcp_ues: a.tcp_ues,
            tcp_mbit: (a.tcp_mbit > 0.0).then_some(a.tcp_mbit),
            seed: a.seed,
        }
    });
    if let Some(r) = a.handover_rate.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        bail!("--handover-rate must be positive, got {r}");
    }
    let mut cases = Vec::new();
    let mut up_stats = None;
    let (report, data, counters) = if a.data_ues > 0 {
        allinone::check_privileges(t)?;
        let interval = std::time::Duration::from_millis(a.data_interval_ms.max(1));
        let run = crate::bench_mobility::run(&cfg, ran, t, a.data_ues, interval, moving).await?;
        cases = run.cases;
        up_stats = run.user_plane;
        (run.report, run.phases, run.counters)
    } else {
        let store = SubscriberStore::in_memory();
        allinone::provision(&store, &ran.plan, ran.ues)?;
        let core = allinone::start(&cfg, store, t).await?;
        ran.mme = core.s1ap;
        let report = crate::demo::run_with_progress(&cfg, ran, t, false).await;
        let counters: Vec<_> = core.counters.iter().map(|(n, c)| (*n, c.snapshot())).collect();
        core.stop().await?;
        (report?, Vec::new(), counters)
    };
    if !report.failures.is_empty() {
        for (name, c) in &counters {
            println!("{name} counters: {c:?}");
        }
    }
    let attach = mobicore_ran::PhaseReport {
        succeeded: report.attached,
        failed: report.failed,
        latencies_us: report.attach_latencies_us.clone(),
        elapsed: report.elapsed_attach,
    };
    let paging = report.unsolicited.get("paging_response");
    let phases: Vec<(&str, &mobicore_ran::PhaseReport, Option<&crate::bench_mobility::PhaseData>)> =
        std::iter::once(("attach", &attach, None))
            .chain(report.mobility.iter().enumerate().map(|(i, (p, r))| (p.name(), r, data.get(i))))
            .chain(paging.map(|r| ("paging-response", r, None)))
            .collect();
    let ms = |us: u64| us as f64 / 1000.0;
    let pct = crate::bench_mobility::percentile_ms;
    let mut rows = Vec::new();
    let mut out = Vec::new();
    // Paging to the first delivered packet: the first buffered packet's
    // wait in the release phases, whose data UEs are paged back.
    let first_packet: Vec<f64> =
        data.iter().filter(|d| d.phase == mobicore_ran::Phase::Release).flat_map(|d| d.delays_ms.clone()).collect();
    for (name, r, d) in &phases {
        let s = r.summary();
        let ratio = r.per_second() / attach.per_second().max(f64::MIN_POSITIVE);
        // Answers to paging come as the data makes them: no rate.
        let rate = if *name == "paging-response" { String::new() } else { format!("{:.0}", r.per_second()) };
        let mut row = vec![
            name.to_string(),
            format!("{}/{}", r.succeeded, r.succeeded + r.failed),
            rate,
            format!("{:.2}", ms(s.p50)),
            format!("{:.2}", ms(s.p99)),
            format!("{ratio:.2}"),
        ];
        let mut o = json!({
            "procedure": name,
            "ues": a.ues,
            "ok": r.succeeded,
            "failed": r.failed,
            "per_s": r.per_second(),
            "latency_ms_p50": ms(s.p50),
            "latency_ms_p99": ms(s.p99),
            "ratio_to_attach": ratio,
        });
        if !data.is_empty() {
            match d {
                Some(d) => {
                    row.push(format!("{}/{}/{}", d.lost, d.duplicated, d.reordered));
                    row.push(format!("{:.1}", pct(&d.gaps_ms, 50.0)));
                    row.push(format!("{:.1}", pct(&d.gaps_ms, 99.0)));
                    row.push(format!("{:.1}", pct(&d.delays_ms, 50.0)));
                    o["data_ues"] = json!(d.ues);
                    o["lost"] = json!(d.lost);
                    o["duplicated"] = json!(d.duplicated);
                    o["reordered"] = json!(d.reordered);
                    o["interruption_ms_p50"] = json!(pct(&d.gaps_ms, 50.0));
                    o["interruption_ms_p99"] = json!(pct(&d.gaps_ms, 99.0));
                    o["downlink_delay_ms_p50"] = json!(pct(&d.delays_ms, 50.0));
                    o["downlink_delay_ms_p99"] = json!(pct(&d.delays_ms, 99.0));
                }
                None if *name == "paging-response" => {
                    row.extend(["".into(), "".into(), "".into(), format!("{:.1}", pct(&first_packet, 50.0))]);
                    o["first_packet_ms_p50"] = json!(pct(&first_packet, 50.0));
                    o["first_packet_ms_p99"] = json!(pct(&first_packet, 99.0));
                }
                None => row.extend(["".into(), "".into(), "".into(), "".into()]),
            }
        }
        let kind = match *name {
            "x2-handover" => Some(mobicore_ran::HandoverType::X2),
            "s1-handover" => Some(mobicore_ran::HandoverType::S1),
            _ => None,
        };
        if let Some(c) = kind.and_then(|k| cases.iter().find(|c| c.handover == k && c.rate == 1.0)) {
            o["tcp_goodput_ratio"] = json!(c.tcp_goodput_ratio());
        }
        rows.push(row);
        out.push(o);
    }
    println!(
        "{} UEs on {} eNBs, {} in flight, {t:?}; the attach phase of this run is the reference:",
        a.ues, a.enbs, a.in_flight
    );
    let mut head = vec!["procedure", "ok", "per s", "p50 ms", "p99 ms", "vs attach"];
    if !data.is_empty() {
        println!(
            "data: {} UEs, a numbered downlink datagram each every {} ms; per phase the numbers sent \
             during it lost/duplicated/reordered, the longest gap between arrivals at the UE (p50, p99 \
             over UEs), the longest delay of one sent during it (p50; paging-response: the first \
             buffered packet after a release)",
            data[0].ues, a.data_interval_ms
        );
        head.extend(["lost/dup/reord", "gap p50 ms", "gap p99 ms", "delay p50 ms"]);
    }
    print!("{}", crate::report::table(&head, &rows));
    let (moving_rows, moving_json) = moving_table(&cases);
    if !cases.is_empty() {
        println!(
            "moving: {} data UEs hand over at each rate to a random other eNB in a {} s window, next to a \
             window without handovers; the first {} read a TCP stream from the data network ({}) in both",
            cases[0].ues,
            a.window_s,
            cases[0].tcp_ues,
            if a.tcp_mbit > 0.0 { format!("each capped at {} Mbit/s", a.tcp_mbit) } else { "unpaced".into() }
        );
        print!("{}", crate::report::table(&MOVING_HEADER, &moving_rows));
    }
    // The emulator's own send failures: never silently dropped.
    let sctp = allinone::ran_sctp_counters();
    let (refused, failed_tx) = (sctp.value("sctp_send_refused"), sctp.value("sctp_send_failed"));
    let send_errors = json!({
        "s1ap_send_errors": report.send_errors,
        "sctp_send_refused": refused,
        "sctp_send_failed": failed_tx,
        "user_plane": up_stats.as_ref().map(|s| json!({
            "udp_send_errors": s.send_errors,
            "tun_write_errors": s.tun_write_errors,
        })),
    });
    println!(
        "emulator send errors: S1AP not handed to SCTP {}, SCTP sends refused {refused}, SCTP datagrams not sent \
         {failed_tx}{}",
        report.send_errors,
        up_stats
            .as_ref()
            .map(|s| format!(", S1-U sendto {}, TUN write {}", s.send_errors, s.tun_write_errors))
            .unwrap_or_default()
    );
    if !report.failures.is_empty() {
        println!("failures: {:?}", report.failures);
    }
    if let Some(p) = &a.json {
        crate::demo::write_json(
            p,
            &json!({
                "transport": format!("{t:?}"),
                "procedures": out,
                "moving": moving_json,
                "emulator_send_errors": send_errors,
            }),
        )?;
    }
    let failed: u64 = phases.iter().map(|(_, r, _)| r.failed).sum::<u64>()
        + report.detach_failed
        + cases.iter().flat_map(|c| c.moving.ran.handovers.values()).map(|r| r.failed).sum::<u64>();
    let broken: usize = data.iter().map(|d| d.lost + d.duplicated + d.reordered).sum::<usize>()
        + cases.iter().map(|c| c.moving.lost + c.moving.duplicated + c.moving.reordered).sum::<usize>();
    if broken > 0 {
        bail!("{broken} downlink packets lost, duplicated or reordered");
    }
    if failed > 0 {
        bail!("{failed} procedures failed: {:?}", report.failures);
    }
    Ok(())
}

/// The columns of [`moving_table`]'s rows.
const MOVING_HEADER: [&str; 14] = [
    "type",
    "HO/UE/s",
    "HO ok",
    "skipped",
    "per s",
    "p50 ms",
    "p99 ms",
    "lost/dup/reord",
    "still l/d/r",
    "gap p50 ms",
    "gap still",
    "TCP Mbit/s",
    "TCP still",
    "ratio",
];

/// The moving cases as table rows ([`MOVING_HEADER`]) and JSON objects.
fn moving_table(cases: &[crate::bench_mobility::MovingCase]) -> (Vec<Vec<String>>, Vec<serde_json::Value>) {
    let pct = crate::bench_mobility::percentile_ms;
    let mut rows = Vec::new();
    let mut out = Vec::new();
    for c in cases {
        let m = &c.moving;
        let mut all = mobicore_ran::PhaseReport::default();
        for r in m.ran.handovers.values() {
            all.succeeded += r.succeeded;
            all.failed += r.failed;
            all.latencies_us.extend(&r.latencies_us);
        }
        let s = all.summary();
        let skipped: u64 = m.ran.skipped.values().sum();
        let per_s = all.succeeded as f64 / m.seconds.max(f64::MIN_POSITIVE);
        let (p50, p99) = (s.p50 as f64 / 1000.0, s.p99 as f64 / 1000.0);
        rows.push(vec![
            c.handover.name().to_string(),
            format!("{}", c.rate),
            format!("{}/{}", all.succeeded, all.succeeded + all.failed),
            skipped.to_string(),
            format!("{per_s:.1}"),
            format!("{p50:.2}"),
            format!("{p99:.2}"),
            format!("{}/{}/{}", m.lost, m.duplicated, m.reordered),
            format!("{}/{}/{}", c.still.lost, c.still.duplicated, c.still.reordered),
            format!("{:.1}", pct(&m.gaps_ms, 50.0)),
            format!("{:.1}", pct(&c.still.gaps_ms, 50.0)),
            format!("{:.1}", m.tcp_mbit_s),
            format!("{:.1}", c.still.tcp_mbit_s),
            format!("{:.3}", c.tcp_goodput_ratio()),
        ]);
        out.push(json!({
            "procedure": format!("{}-handover", c.handover.name()),
            "handover_type": c.handover.name(),
            "handover_rate": c.rate,
            "ues": c.ues,
            "ok": all.succeeded,
            "failed": all.failed,
            "skipped": m.ran.skipped,
            "unfinished": m.ran.unfinished,
            "reselections": m.ran.reselections,
            "reselection_taus": m.ran.reselection_taus,
            "per_s": per_s,
            "latency_ms_p50": p50,
            "latency_ms_p99": p99,
            "by_type": m.ran.handovers.iter().map(|(k, r)| (k.clone(), json!({"ok": r.succeeded, "failed": r.failed}))).collect::<serde_json::Map<_, _>>(),
            "other_procedures": m.ran.other.iter().map(|(k, r)| (k.clone(), json!({"ok": r.succeeded, "failed": r.failed}))).collect::<serde_json::Map<_, _>>(),
            "lost": m.lost,
            "duplicated": m.duplicated,
            "reordered": m.reordered,
            "interruption_ms_p50": pct(&m.gaps_ms, 50.0),
            "interruption_ms_p99": pct(&m.gaps_ms, 99.0),
            "still_gap_ms_p50": pct(&c.still.gaps_ms, 50.0),
            "still_lost": c.still.lost,
            "still_duplicated": c.still.duplicated,
            "still_reordered": c.still.reordered,
            "tcp_ues": c.tcp_ues,
            "tcp_mbit_s": m.tcp_mbit_s,
            "tcp_mbit_s_still": c.still.tcp_mbit_s,
            "tcp_goodput_ratio": c.tcp_goodput_ratio(),
            "tcp_errors": m.tcp_errors.iter().chain(&c.still.tcp_errors).collect::<Vec<_>>(),
            "seconds": m.seconds,
        }));
    }
    (rows, out)
}

async fn sctp(a: SctpArgs) -> Result<()> {
    let t = allinone::transport(a.sctp, 9899);
    allinone::check_privileges(t)?;
    let b = mobicore_sctp::bench(t, a.assocs, a.messages, a.size).await;
    let row = vec![
        b.transport.clone(),
        b.assocs.to_string(),
        format!("{}/{}", b.delivered, b.messages),
        b.size.to_string(),
        format!("{:.0}", b.msgs_per_s),
        format!("{:.1}", b.mbit_per_s),
    ];
    print!("{}", crate::report::table(&["transport", "assocs", "delivered", "size", "msgs/s", "Mbit/s"], &[row]));
    if let Some(p) = &a.json {
        crate::demo::write_json(
            p,
            &serde_json::to_value(json!({
                "transport": b.transport, "assocs": b.assocs, "messages": b.messages, "delivered": b.delivered,
                "size": b.size, "msgs_per_s": b.msgs_per_s, "mbit_per_s": b.mbit_per_s,
            }))?,
        )?;
    }
    if let Some(e) = b.error {
        bail!("{e}");
    }
    Ok(())
}

async fn pfcp(a: PfcpArgs) -> Result<()> {
    let cases = crate::bench_pfcp::run(a.sessions, &a.in_flight).await?;
    let rows: Vec<Vec<String>> = cases
        .iter()
        .map(|c| {
            vec![
                c.in_flight.to_string(),
                c.sessions.to_string(),
                format!("{:.0}", c.establish_per_s),
                format!("{:.0}", c.delete_per_s),
                format!("{:.0}", c.baseline_heartbeat_per_s),
                format!("{:.2}", c.establish_ratio_to_heartbeat),
            ]
        })
        .collect();
    print!(
        "{}",
        crate::report::table(
            &["in flight", "sessions", "establish/s", "delete/s", "heartbeat/s (baseline)", "establish/heartbeat"],
            &rows
        )
    );
    if let Some(p) = &a.json {
        crate::demo::write_json(p, &serde_json::to_value(&cases)?)?;
    }
    Ok(())
}

async fn dataplane(a: DataplaneArgs) -> Result<()> {
    let opts = mobicore_dpbench::DataplaneBenchOptions {
        sizes: a.sizes,
        sessions: a.sessions,
        duration: std::time::Duration::from_secs_f64(a.seconds),
        ..Default::default()
    };
    let report = tokio::task::spawn_blocking(move || mobicore_dpbench::run_blocking(&opts)).await??;
    print!("{}", mobicore_dpbench::table(&report));
    if let Some(p) = &a.json {
        crate::demo::write_json(p, &serde_json::to_value(&report)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod moving_table_tests {
    use super::*;
    use crate::bench_mobility::{MovingCase, WindowData};

    #[test]
    fn every_moving_row_has_a_cell_per_column() {
        let c = MovingCase {
            handover: mobicore_ran::HandoverType::X2,
            rate: 1.0,
            ues: 4,
            tcp_ues: 2,
            moving: WindowData::default(),
            still: WindowData::default(),
        };
        let (rows, json) = moving_table(&[c]);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].len(), MOVING_HEADER.len(), "{:?}", rows[0]);
        assert_eq!(json[0]["procedure"], "x2-handover");
    }
}
