//! `mobicore bench relocation`: seed 000 Figs 6-8 on this machine. For
//! each number of registered UEs, a real S/P-GW-C with its UPF's PFCP node
//! (the original anchor), two edge anchors of the same kind, and the
//! controller between the S11 of an emulated MME and the original, all on
//! loopback sockets. The UEs attach through the relay (Create Session +
//! Modify Bearer, as an MME sends them); then the controller's REST API
//! moves 1, 10, 100 ... of them by selective replication (and back), and
//! once by naive replication. Reported per point: octets stored, octets
//! sent to replicate, replication time. First, the relay's added latency:
//! Echo round trips to the S/P-GW-C directly and through the relay,
//! interleaved.
//!
//! The paper's third scheme, whole-process "RAM replication", is measured
//! by its closest honest stand-in, named as what it is: a full-state
//! dump of the running original S/P-GW-C and its UPF (every session
//! context, every PFCP session's rules and usage measurement;
//! `mobicore_spgwc::dump`, `mobicore_upf::dump`), sent over TCP to a fresh
//! pair at the edge and restored there before it runs (mode `ram`). Like
//! RAM replication it stores nothing ahead, stops the S/P-GW-C's S11 while
//! the dump is taken, and moves every UE whatever the number to move.
//! Unlike it, it copies the state, not the process image, so its octets
//! and times are far below a RAM image's (160 MB to 2 GB and 26 s in the
//! paper). The restored pair is checked after each point: it dumps as the
//! source and answers a Modify Bearer for a moved UE.
//!
//! CRIU itself cannot run here: the Debian package (3.17.1) does not know
//! the `[vvar_vclock]` mapping of Linux 6.13 and later, so `criu check`,
//! `criu check --all` and `criu dump -t PID -D DIR --shell-job
//! --tcp-established` all stop at start-up, before touching the process:
//!
//! ```text
//! Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds
//! Error (criu/vdso.c:613): vdso: Failed to fill self vdso symtable
//! Error (criu/kerndat.c:1615): kerndat_vdso_fill_symtable failed when initializing kerndat.
//! Error (criu/crtools.c:260): Could not initialize kernel features detection.
//! ```
//!
//! (fixed upstream in CRIU 4.1, "vdso: handle vvar_vclock vma-s"). The
//! bench runs `criu check` each time and prints what it says.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use mobicore_common::s11::{CreateSessionRequest, ModifyBearerRequest, S11Request};
use mobicore_common::state_dump;
use mobicore_common::{Ebi, Fteid, Teid};
use mobicore_controller::{Anchor, ControllerConfig};
use mobicore_gtp::s11::encode_request;
use mobicore_gtp::{GtpMessage, Message};
use mobicore_spgwc::{ApnConfig, SpgwcConfig, SpgwcControl, SpgwcDump, UpfPeerConfig};
use mobicore_upf::dump::UpfDump;
use mobicore_upf::{Upf, UpfConfig, UpfControl};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;

use crate::plot::{Chart, Series};

#[derive(Args, Debug)]
pub struct RelocationArgs {
    /// Registered UEs per point.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000,10000")]
    pub registered: Vec<usize>,
    /// Moved UEs per point (selective; capped at the registered count).
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    pub moved: Vec<usize>,
    /// Write the points as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw Figs 6-8 as SVG into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// One point of Figs 6-8.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub mode: &'static str,
    pub registered_ues: usize,
    pub moved_ues: usize,
    /// Octets the controller holds: recorded GTP-C (and, selective, the 16
    /// octets of TEIDs and addresses per moved UE that seed 000 counts);
    /// none for `ram`.
    pub stored_bytes: usize,
    /// Octets of GTP-C sent to the replica; for `ram`, the dumps of both
    /// processes.
    pub sent_bytes: usize,
    /// From the first request to the last relocation in force; for `ram`,
    /// dump + transfer + restore.
    pub replication_ms: f64,
    /// The controller's own replication time, summed over relocations
    /// (`ram`: as `replication_ms`).
    pub replication_ms_sum: f64,
    /// `ram` only: where the time and the octets went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ram: Option<RamBreakdown>,
}

/// A `ram` point in parts: the dump (the S/P-GW-C's S11 stopped for its
/// length), the transfer to the edge, the restore there.
#[derive(Debug, Clone, Serialize)]
pub struct RamBreakdown {
    pub dump_ms: f64,
    pub transfer_ms: f64,
    pub restore_ms: f64,
    pub spgwc_bytes: usize,
    pub upf_bytes: usize,
}

const TOKEN: &str = "bench";
const WAIT: Duration = Duration::from_secs(30);

/// The relay's added latency: GTP-C round trips (Echo) to the S/P-GW-C
/// directly and through the relay, in alternating blocks.
#[derive(Debug, Clone, Serialize)]
pub struct RelayLatency {
    pub round_trips: usize,
    pub direct_us_p50: f64,
    pub direct_us_p99: f64,
    pub relayed_us_p50: f64,
    pub relayed_us_p99: f64,
    pub added_us_p50: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Output<'a> {
    relay_latency: &'a RelayLatency,
    /// How the whole-process baseline was measured, and why not by CRIU.
    ram_baseline: &'a RamBaseline,
    points: &'a [Point],
}

#[derive(Debug, Clone, Serialize)]
struct RamBaseline {
    method: &'static str,
    /// What `criu check` said on this machine.
    criu_check: String,
}

/// `criu check` on this machine: "passes", or its error lines.
fn criu_check() -> String {
    match std::process::Command::new("criu").arg("check").output() {
        Err(e) => format!("criu not runnable: {e}"),
        Ok(o) if o.status.success() => "passes".into(),
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
            let errors: Vec<&str> = text.lines().filter(|l| l.contains("Error")).collect();
            let why = if errors.is_empty() { text.trim().to_string() } else { errors.join(" | ") };
            format!("fails ({}): {}", o.status, why.trim())
        }
    }
}

pub async fn run(a: RelocationArgs) -> Result<()> {
    let baseline = RamBaseline {
        method: "full-state dump/restore of the S/P-GW-C and its UPF (stand-in for whole-process RAM replication)",
        criu_check: criu_check(),
    };
    println!("RAM replication baseline: CRIU `criu check` {}", baseline.criu_check);
    println!("  measured instead as: {}", baseline.method);
    let latency = relay_latency(5_000).await.context("relay latency")?;
    println!(
        "S11 relay: Echo round trip p50 {:.1} us direct, {:.1} us relayed: +{:.1} us (p99 {:.1} / {:.1} us), {} each",
        latency.direct_us_p50,
        latency.relayed_us_p50,
        latency.added_us_p50,
        latency.direct_us_p99,
        latency.relayed_us_p99,
        latency.round_trips
    );
    let mut points = Vec::new();
    for &n in &a.registered {
        if n == 0 {
            bail!("--registered values must be at least 1");
        }
        eprintln!("relocation: {n} registered UEs");
        points.extend(one(n, &a.moved).await.with_context(|| format!("{n} registered UEs"))?);
    }
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|p| {
            vec![
                p.mode.to_string(),
                p.registered_ues.to_string(),
                p.moved_ues.to_string(),
                p.stored_bytes.to_string(),
                format!("{:.0}", p.stored_bytes as f64 / p.registered_ues as f64),
                p.sent_bytes.to_string(),
                format!("{:.2}", p.replication_ms),
                format!("{:.3}", p.replication_ms / p.moved_ues.max(1) as f64),
            ]
        })
        .collect();
    let header = ["mode", "registered", "moved", "stored B", "B/UE", "sent B", "replication ms", "ms/moved UE"];
    print!("{}", crate::report::table(&header, &rows));
    for p in &points {
        if let Some(r) = &p.ram {
            println!(
                "ram, {} registered: dump {:.2} ms (S/P-GW-C {} B + UPF {} B, {:.0} B/UE), transfer {:.2} ms, restore {:.2} ms; \
                 restored pair identical and serving",
                p.registered_ues,
                r.dump_ms,
                r.spgwc_bytes,
                r.upf_bytes,
                p.sent_bytes as f64 / p.registered_ues as f64,
                r.transfer_ms,
                r.restore_ms
            );
        }
    }
    if let Some(p) = &a.json {
        let out = Output { relay_latency: &latency, ram_baseline: &baseline, points: &points };
        std::fs::write(p, serde_json::to_string_pretty(&out)?).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(dir) = &a.plot {
        plot(dir, &points)?;
    }
    Ok(())
}

fn plot(dir: &std::path::Path, points: &[Point]) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    // Logarithmic axes: a zero (what `ram` stores) has no place on them.
    let series = |mode: &str, moved: Option<usize>, f: &dyn Fn(&Point) -> f64| -> Series {
        let pts = points.iter().filter(|p| p.mode == mode && moved.is_none_or(|m| p.moved_ues == m));
        let name = match (mode, moved) {
            (_, Some(m)) => format!("{mode}, {m} moved"),
            ("ram", None) => "ram (full-state dump), all moved".to_string(),
            _ => mode.to_string(),
        };
        Series { name, points: pts.map(|p| (p.registered_ues as f64, f(p))).filter(|(_, y)| *y > 0.0).collect() }
    };
    type Metric<'a> = &'a dyn Fn(&Point) -> f64;
    let figs: [(&str, &str, &str, Metric); 3] = [
        ("fig6_stored_bytes.svg", "Fig. 6: information stored (ram: none)", "bytes", &|p| p.stored_bytes as f64),
        ("fig7_sent_bytes.svg", "Fig. 7: bytes sent to replicate", "bytes", &|p| p.sent_bytes as f64),
        ("fig8_replication_time.svg", "Fig. 8: replication time", "ms", &|p| p.replication_ms),
    ];
    for (file, title, unit, f) in figs {
        let mut s = vec![series("naive", None, f)];
        let ram = series("ram", None, f);
        if !ram.points.is_empty() {
            s.push(ram);
        }
        for m in [1usize, 10, 100] {
            let one = series("selective", Some(m), f);
            if !one.points.is_empty() {
                s.push(one);
            }
        }
        let chart = Chart { title, x_label: "registered UEs", y_label: unit, log_x: true, log_y: true, series: s };
        std::fs::write(dir.join(file), chart.svg())?;
    }
    println!("plots in {}", dir.display());
    Ok(())
}

/// One registered count: fresh anchors and controller.
async fn one(n: usize, moved: &[usize]) -> Result<Vec<Point>> {
    let (stop, stop_rx) = watch::channel(false);
    let original_pool = SpgwcConfig::default().apns[0].pool.context("a default pool")?;
    let original = anchor(original_pool, &stop_rx).await?;
    let selective_edge = anchor(Ipv4Addr::new(10, 60, 0, 0), &stop_rx).await?.s11;
    // Naive replication reproduces the original's addresses: the same pool.
    let naive_edge = anchor(original_pool, &stop_rx).await?.s11;
    let cfg = ControllerConfig {
        s11: lo(0),
        sgw: original.s11,
        anchor_bind: lo(0),
        rest: lo(0),
        token: Some(TOKEN.into()),
        anchors: vec![
            Anchor { name: "selective".into(), s11: selective_edge },
            Anchor { name: "naive".into(), s11: naive_edge },
        ],
        ..ControllerConfig::default()
    };
    let c = mobicore_controller::bind(cfg).await?;
    let (relay, rest) = (c.s11_addr, c.rest_addr);
    let ctask = tokio::spawn(c.run(stop_rx.clone()));
    let imsis = attach_all(relay, n).await?;
    let stats: serde_json::Value = serde_json::from_str(&http(rest, "GET", "/v1/stats", "").await?.1)?;
    let selective_bytes = stats["selective_bytes"].as_u64().unwrap_or(0) as usize;
    let naive_bytes = stats["naive_log_bytes"].as_u64().unwrap_or(0) as usize;
    if stats["sessions"].as_u64() != Some(n as u64) {
        bail!("the relay recorded {} sessions of {n}", stats["sessions"]);
    }
    // The whole-state copy first, while the original holds exactly the
    // `n` sessions (replay leaves it untouched anyway).
    let mut out = vec![ram(&original, original_pool, &stop_rx).await.context("ram (full-state dump/restore)")?];
    let mut counts: Vec<usize> = moved.iter().map(|&m| m.min(n)).collect();
    counts.dedup();
    for m in counts {
        let t0 = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for imsi in &imsis[..m] {
            let b = format!(r#"{{"ue":"{imsi}","anchor":"selective"}}"#);
            set.spawn(async move { http(rest, "POST", "/v1/relocations", &b).await });
        }
        let mut answers = Vec::new();
        while let Some(r) = set.join_next().await {
            answers.push(r?);
        }
        let wall = t0.elapsed();
        let (mut sent, mut sum, mut ids) = (0usize, 0f64, Vec::new());
        for r in answers {
            let (status, body) = r?;
            if status != 201 {
                bail!("selective relocation answered {status}: {body}");
            }
            let v: serde_json::Value = serde_json::from_str(&body)?;
            sent += v["replicated_bytes"].as_u64().unwrap_or(0) as usize;
            sum += v["timing"]["replication_ms"].as_f64().unwrap_or(0.0);
            ids.push(v["id"].as_u64().unwrap_or(0));
        }
        out.push(Point {
            mode: "selective",
            registered_ues: n,
            moved_ues: m,
            stored_bytes: selective_bytes + 16 * m,
            sent_bytes: sent,
            replication_ms: wall.as_secs_f64() * 1e3,
            replication_ms_sum: sum,
            ram: None,
        });
        for id in ids {
            let (status, body) = http(rest, "DELETE", &format!("/v1/relocations/{id}"), "").await?;
            if status != 200 {
                bail!("moving back answered {status}: {body}");
            }
        }
    }
    let t0 = Instant::now();
    let body = format!(r#"{{"ue":"{}","anchor":"naive","mode":"naive"}}"#, imsis[0]);
    let (status, body) = http(rest, "POST", "/v1/relocations", &body).await?;
    let wall = t0.elapsed();
    if status != 201 {
        bail!("naive relocation answered {status}: {body}");
    }
    let v: serde_json::Value = serde_json::from_str(&body)?;
    out.push(Point {
        mode: "naive",
        registered_ues: n,
        moved_ues: 1,
        stored_bytes: naive_bytes,
        sent_bytes: v["replicated_bytes"].as_u64().unwrap_or(0) as usize,
        replication_ms: wall.as_secs_f64() * 1e3,
        replication_ms_sum: v["timing"]["replication_ms"].as_f64().unwrap_or(0.0),
        ram: None,
    });
    stop.send(true)?;
    ctask.await??;
    Ok(out)
}

async fn relay_latency(n: usize) -> Result<RelayLatency> {
    let (stop, stop_rx) = watch::channel(false);
    let sgw = anchor(Ipv4Addr::new(10, 44, 0, 0), &stop_rx).await?.s11;
    let cfg = ControllerConfig { s11: lo(0), sgw, anchor_bind: lo(0), rest: lo(0), ..ControllerConfig::default() };
    let c = mobicore_controller::bind(cfg).await?;
    let relay = c.s11_addr;
    let ctask = tokio::spawn(c.run(stop_rx.clone()));
    let sock = UdpSocket::bind(lo(0)).await?;
    let (mut direct, mut relayed) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut buf = vec![0u8; 2048];
    let mut seq = 1u32;
    let block = 250;
    for round in 0..(2 * n).div_ceil(block) {
        let (to, out) = if round % 2 == 0 { (sgw, &mut direct) } else { (relay, &mut relayed) };
        for _ in 0..block.min(n - out.len().min(n)) {
            let echo =
                GtpMessage { teid: None, seq, body: Message::EchoRequest(mobicore_gtp::message::Echo { recovery: 1 }) };
            let t0 = Instant::now();
            sock.send_to(&echo.to_bytes(), to).await?;
            loop {
                let (len, _) =
                    tokio::time::timeout(WAIT, sock.recv_from(&mut buf)).await.context("no Echo Response")??;
                if GtpMessage::parse(&buf[..len]).is_ok_and(|m| m.seq == seq) {
                    break;
                }
            }
            out.push(t0.elapsed().as_secs_f64() * 1e6);
            seq += 1;
        }
    }
    stop.send(true)?;
    ctask.await??;
    let pct = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    let (d50, d99, r50, r99) =
        (pct(&mut direct, 0.5), pct(&mut direct, 0.99), pct(&mut relayed, 0.5), pct(&mut relayed, 0.99));
    Ok(RelayLatency {
        round_trips: n,
        direct_us_p50: d50,
        direct_us_p99: d99,
        relayed_us_p50: r50,
        relayed_us_p99: r99,
        added_us_p50: r50 - d50,
    })
}

fn lo(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// An anchor on loopback: its S11 address, and handles on the state of
/// its S/P-GW-C and UPF for the full-state dump.
struct Site {
    s11: SocketAddr,
    spgwc: SpgwcControl,
    upf: UpfControl,
}

/// The S/P-GW-C of an anchor with UE pool `pool` and its UPF at `upf`.
fn anchor_config(pool: Ipv4Addr, upf: SocketAddr) -> SpgwcConfig {
    let mut cfg = SpgwcConfig { s11: lo(0), pfcp: lo(0), ..SpgwcConfig::default() };
    cfg.upfs = vec![UpfPeerConfig { pfcp: upf, s1u_addr: Ipv4Addr::LOCALHOST, ..UpfPeerConfig::default() }];
    for apn in &mut cfg.apns {
        *apn = ApnConfig { pool: Some(pool), ..apn.clone() };
    }
    cfg
}

/// An S/P-GW-C and its UPF's PFCP node (no data path) on loopback.
async fn anchor(pool: Ipv4Addr, stop: &watch::Receiver<bool>) -> Result<Site> {
    let upf = Upf::bind(UpfConfig { pfcp: lo(0), ..Default::default() }).await?;
    let cfg = anchor_config(pool, upf.pfcp_addr());
    let upf_control = upf.control();
    tokio::spawn(upf.run(stop.clone()));
    let gw = mobicore_spgwc::bind(cfg).await?;
    let (s11, spgwc) = (gw.s11_addr, gw.control());
    tokio::spawn(gw.run(stop.clone()));
    Ok(Site { s11, spgwc, upf: upf_control })
}

/// The largest dump the edge site takes.
const MAX_DUMP: usize = 1 << 30;

/// The `ram` point: the original anchor's S/P-GW-C frozen on S11, both
/// its processes dumped, the dumps sent over TCP to the edge site, which
/// restores them into a fresh pair (bound, not yet running, as a CRIU
/// restore would start it) and answers once it runs. Every registered UE
/// moves. Then, outside the timing, the restored pair must dump as the
/// source and serve a Modify Bearer.
async fn ram(src: &Site, pool: Ipv4Addr, stop: &watch::Receiver<bool>) -> Result<Point> {
    let edge_upf = Upf::bind(UpfConfig { pfcp: lo(0), ..Default::default() }).await?;
    let edge_gw = mobicore_spgwc::bind(anchor_config(pool, edge_upf.pfcp_addr())).await?;
    let (edge_s11, edge_gw_control, edge_upf_control) = (edge_gw.s11_addr, edge_gw.control(), edge_upf.control());
    let listener = TcpListener::bind(lo(0)).await?;
    let site = listener.local_addr()?;
    let edge = tokio::spawn(edge_site(listener, edge_upf, edge_gw, stop.clone()));

    let t0 = Instant::now();
    src.spgwc.freeze().await.context("freezing the original S/P-GW-C")?;
    let (upf_dump, gw_dump) = (src.upf.dump().await, src.spgwc.dump().await);
    src.spgwc.thaw().await?;
    let (upf_dump, gw_dump) = (upf_dump.context("dumping the UPF")?, gw_dump.context("dumping the S/P-GW-C")?);
    let dumped = Instant::now();
    let mut conn = TcpStream::connect(site).await?;
    conn.set_nodelay(true)?;
    conn.write_all(&upf_dump).await?;
    conn.write_all(&gw_dump).await?;
    let ack = tokio::time::timeout(WAIT, conn.read_u8()).await;
    let done = Instant::now();
    let (received, restored, sessions) = edge.await?.context("the edge site")?;
    ack.context("no answer from the edge site")?.context("the edge site's answer")?;

    // The restored pair holds what the source held, and serves it.
    let source = SpgwcDump::from_bytes(&gw_dump)?;
    let copy = SpgwcDump::from_bytes(&edge_gw_control.dump().await?)?;
    if copy.sessions != source.sessions || sessions != source.sessions.len() {
        bail!("the restored S/P-GW-C holds other sessions than the source");
    }
    let upf_copy = edge_upf_control.dump().await.context("dumping the restored UPF")?;
    let (upf_source, upf_copy) = (UpfDump::from_bytes(&upf_dump)?, UpfDump::from_bytes(&upf_copy)?);
    if timeless(upf_copy) != timeless(upf_source) {
        bail!("the restored UPF holds other sessions than the source");
    }
    let ue0: mobicore_common::Imsi = format!("00101{:010}", 0).parse().context("IMSI")?;
    let first = source.sessions.iter().find(|s| s.imsi == ue0).context("UE 0 in the dump")?;
    check_modify_bearer(edge_s11, 0, first.sgw_s11.teid.0).await.context("the restored S/P-GW-C")?;

    let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
    let total = ms(t0, done);
    Ok(Point {
        mode: "ram",
        registered_ues: sessions,
        moved_ues: sessions,
        stored_bytes: 0,
        sent_bytes: upf_dump.len() + gw_dump.len(),
        replication_ms: total,
        replication_ms_sum: total,
        ram: Some(RamBreakdown {
            dump_ms: ms(t0, dumped),
            transfer_ms: ms(dumped, received),
            restore_ms: ms(received, restored),
            spgwc_bytes: gw_dump.len(),
            upf_bytes: upf_dump.len(),
        }),
    })
}

/// A UPF dump's sessions with the times of their measurements left out:
/// those are relative to the instant of each dump.
fn timeless(mut d: UpfDump) -> Vec<mobicore_upf::dump::SessionDump> {
    for u in d.sessions.iter_mut().flat_map(|s| s.usage.iter_mut()) {
        (u.start_us, u.grant_us, u.mark_us, u.last_activity_us, u.next_period_us) = (0, 0, 0, None, None);
        (u.dur_report_us, u.dur_grant_us) = (0, 0);
    }
    d.sessions
}

/// The edge site: takes the UPF's then the S/P-GW-C's dump off one
/// connection, restores the fresh pair and runs it, answers one octet.
/// Returns when the dumps were in, when the pair ran, how many sessions.
async fn edge_site(
    listener: TcpListener,
    mut upf: Upf,
    mut gw: mobicore_spgwc::Spgwc,
    stop: watch::Receiver<bool>,
) -> Result<(Instant, Instant, usize)> {
    let (mut c, _) = tokio::time::timeout(WAIT, listener.accept()).await.context("no dump came")??;
    let upf_dump = read_dump(&mut c).await.context("the UPF's dump")?;
    let gw_dump = read_dump(&mut c).await.context("the S/P-GW-C's dump")?;
    let received = Instant::now();
    upf.restore(&upf_dump).context("restoring the UPF")?;
    let sessions = gw.restore(&gw_dump).context("restoring the S/P-GW-C")?;
    tokio::spawn(upf.run(stop.clone()));
    tokio::spawn(gw.run(stop));
    let restored = Instant::now();
    c.write_u8(1).await?;
    Ok((received, restored, sessions))
}

/// One framed dump off a stream ([`state_dump`] header, then its body).
async fn read_dump(c: &mut TcpStream) -> Result<Vec<u8>> {
    let mut b = vec![0u8; state_dump::HEADER_LEN];
    c.read_exact(&mut b).await?;
    let len = state_dump::body_len(&b)?;
    if len > MAX_DUMP {
        bail!("a dump of {len} octets, more than the {MAX_DUMP} taken");
    }
    b.resize(state_dump::HEADER_LEN + len, 0);
    c.read_exact(&mut b[state_dump::HEADER_LEN..]).await?;
    Ok(b)
}

/// A Modify Bearer for UE `ue` (our S11 TEID `teid` there) is accepted.
/// What an MME sends at a handover for UE `i` (of [`attach_all`]), sent
/// straight to the S/P-GW-C at `s11` whose S11 TEID for it is `teid`:
/// succeeds once it is accepted (retried while the S/P-GW-C sets up its
/// PFCP association).
pub async fn check_modify_bearer(s11: SocketAddr, ue: usize, teid: u32) -> Result<()> {
    let sock = UdpSocket::bind(lo(0)).await?;
    let mut buf = vec![0u8; 4096];
    // The restored S/P-GW-C sets its PFCP association up first: retry.
    let deadline = Instant::now() + WAIT;
    let mut seq = 0u32;
    loop {
        seq += 1;
        sock.send_to(&encode_request(&modify_bearer(ue, teid), seq).to_bytes(), s11).await?;
        let (len, _) = tokio::time::timeout(WAIT, sock.recv_from(&mut buf)).await.context("no S11 answer")??;
        let m = GtpMessage::parse(&buf[..len]).map_err(|e| anyhow::anyhow!("unreadable answer: {e:?}"))?;
        match &m.body {
            Message::ModifyBearerResponse(r) if r.cause.value == 16 => return Ok(()),
            _ if Instant::now() > deadline => bail!("Modify Bearer not accepted: {:?}", m.body),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// What an MME sends at attach, for UE `i`.
fn create_session(i: usize) -> S11Request {
    let imsi = format!("00101{i:010}").parse().expect("IMSI");
    let mme = Fteid { teid: Teid(0x1000 + i as u32), ipv4: Ipv4Addr::LOCALHOST };
    S11Request::CreateSession(CreateSessionRequest::attach(imsi, mme))
}

/// Attaches `n` UEs through the relay as an MME would (Create Session,
/// then Modify Bearer), 64 at a time; returns their IMSIs (UE `i` is
/// `00101` and `i` in ten digits).
pub async fn attach_all(relay: SocketAddr, n: usize) -> Result<Vec<String>> {
    let mme = UdpSocket::bind(lo(0)).await?;
    let window = 64;
    let mut buf = vec![0u8; 4096];
    // The S/P-GW-C needs its UPF association first: retry the first UE.
    let deadline = Instant::now() + WAIT;
    loop {
        mme.send_to(&encode_request(&create_session(0), 1).to_bytes(), relay).await?;
        let (len, _) = tokio::time::timeout(WAIT, mme.recv_from(&mut buf)).await.context("no S11 answer")??;
        let m = GtpMessage::parse(&buf[..len]).map_err(|e| anyhow::anyhow!("unreadable answer: {e:?}"))?;
        if let Message::CreateSessionResponse(r) = &m.body {
            if r.cause.value == 16 {
                let teid = r.sender_fteid.as_ref().map(|f| f.teid).context("no S11 F-TEID")?;
                mme.send_to(&encode_request(&modify_bearer(0, teid), 2).to_bytes(), relay).await?;
                tokio::time::timeout(WAIT, mme.recv_from(&mut buf)).await.context("no S11 answer")??;
                break;
            }
        }
        if Instant::now() > deadline {
            bail!("the S/P-GW-C never accepted a Create Session (no UPF association?)");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Sequence numbers: 2i+1 for UE i's Create Session, 2i+2 for its Modify Bearer.
    let (mut next, mut done, mut in_flight) = (1usize, 1usize, 0usize);
    while done < n {
        while in_flight < window && next < n {
            mme.send_to(&encode_request(&create_session(next), 2 * next as u32 + 1).to_bytes(), relay).await?;
            next += 1;
            in_flight += 1;
        }
        let (len, _) = tokio::time::timeout(WAIT, mme.recv_from(&mut buf)).await.context("no S11 answer")??;
        let m = GtpMessage::parse(&buf[..len]).map_err(|e| anyhow::anyhow!("unreadable answer: {e:?}"))?;
        let ue = (m.seq as usize - 1) / 2;
        match &m.body {
            Message::CreateSessionResponse(r) if r.cause.value == 16 => {
                let teid = r.sender_fteid.as_ref().map(|f| f.teid).context("no S11 F-TEID")?;
                mme.send_to(&encode_request(&modify_bearer(ue, teid), m.seq + 1).to_bytes(), relay).await?;
            }
            Message::ModifyBearerResponse(r) if r.cause.value == 16 => {
                done += 1;
                in_flight -= 1;
            }
            other => bail!("UE {ue}: unexpected answer {other:?}"),
        }
    }
    Ok((0..n).map(|i| format!("00101{i:010}")).collect())
}

fn modify_bearer(i: usize, sgw_teid: u32) -> S11Request {
    S11Request::ModifyBearer(ModifyBearerRequest {
        sgw_teid: Teid(sgw_teid),
        ebi: Ebi(5),
        s1u_enb_fteid: Fteid { teid: Teid(0x10_0000 + i as u32), ipv4: Ipv4Addr::new(10, 0, 1, 1) },
    })
}

/// One REST request to the controller with the bench's token; (status, body).
async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    Ok(mobicore_controller::site::http(addr, method, path, Some(TOKEN), body).await?)
}
