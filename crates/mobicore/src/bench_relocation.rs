//! `mobicore bench relocation`: seed 000 Figs 6-8 on this machine. For
//! each number of registered UEs, a real S/P-GW-C with its UPF's PFCP node
//! (the original anchor), two edge anchors of the same kind, and the
//! controller between the S11 of an emulated MME and the original, all on
//! loopback sockets. The UEs attach through the relay (Create Session +
//! Modify Bearer, as an MME sends them); then the controller's REST API
//! moves 1, 10, 100 ... of them by selective replication (and back), and
//! once by naive replication. Reported per point: octets stored, octets
//! sent to replicate, replication time. Whole-process RAM replication is
//! the paper's third scheme; CRIU cannot checkpoint on these machines
//! (`criu check`: "vdso: Failed to fill self vdso symtable"), so it is left
//! out rather than imitated. First, the relay's added latency: Echo round
//! trips to the S/P-GW-C directly and through the relay, interleaved.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use mobicore_common::s11::{BearerContextToCreate, CreateSessionRequest, ModifyBearerRequest, S11Request};
use mobicore_common::{Ambr, Arp, Ebi, Ecgi, Fteid, PdnType, Plmn, Tai, Teid};
use mobicore_controller::{Anchor, ControllerConfig};
use mobicore_gtp::s11::encode_request;
use mobicore_gtp::{GtpMessage, Message};
use mobicore_spgwc::{ApnConfig, SpgwcConfig, UpfPeerConfig};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
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
    /// octets of TEIDs and addresses per moved UE that seed 000 counts).
    pub stored_bytes: usize,
    /// Octets of GTP-C sent to the replica.
    pub sent_bytes: usize,
    /// From the first request to the last relocation in force.
    pub replication_ms: f64,
    /// The controller's own replication time, summed over relocations.
    pub replication_ms_sum: f64,
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
    points: &'a [Point],
}

pub async fn run(a: RelocationArgs) -> Result<()> {
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
    if let Some(p) = &a.json {
        let out = Output { relay_latency: &latency, points: &points };
        std::fs::write(p, serde_json::to_string_pretty(&out)?).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(dir) = &a.plot {
        plot(dir, &points)?;
    }
    Ok(())
}

fn plot(dir: &std::path::Path, points: &[Point]) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let series = |mode: &str, moved: Option<usize>, f: &dyn Fn(&Point) -> f64| -> Series {
        let pts = points.iter().filter(|p| p.mode == mode && moved.is_none_or(|m| p.moved_ues == m));
        let name = match moved {
            Some(m) => format!("{mode}, {m} moved"),
            None => mode.to_string(),
        };
        Series { name, points: pts.map(|p| (p.registered_ues as f64, f(p))).collect() }
    };
    type Metric<'a> = &'a dyn Fn(&Point) -> f64;
    let figs: [(&str, &str, &str, Metric); 3] = [
        ("fig6_stored_bytes.svg", "Fig. 6: information stored", "bytes", &|p| p.stored_bytes as f64),
        ("fig7_sent_bytes.svg", "Fig. 7: bytes sent to replicate", "bytes", &|p| p.sent_bytes as f64),
        ("fig8_replication_time.svg", "Fig. 8: replication time", "ms", &|p| p.replication_ms),
    ];
    for (file, title, unit, f) in figs {
        let mut s = vec![series("naive", None, f)];
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
    let sgw = anchor(original_pool, &stop_rx).await?;
    let selective_edge = anchor(Ipv4Addr::new(10, 60, 0, 0), &stop_rx).await?;
    // Naive replication reproduces the original's addresses: the same pool.
    let naive_edge = anchor(original_pool, &stop_rx).await?;
    let cfg = ControllerConfig {
        s11: lo(0),
        sgw,
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
    let mut out = Vec::new();
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
    });
    stop.send(true)?;
    ctask.await??;
    Ok(out)
}

async fn relay_latency(n: usize) -> Result<RelayLatency> {
    let (stop, stop_rx) = watch::channel(false);
    let sgw = anchor(Ipv4Addr::new(10, 44, 0, 0), &stop_rx).await?;
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

/// An S/P-GW-C and its UPF's PFCP node (no data path) on loopback.
async fn anchor(pool: Ipv4Addr, stop: &watch::Receiver<bool>) -> Result<SocketAddr> {
    let upf = mobicore_upf::Upf::bind(mobicore_upf::UpfConfig { pfcp: lo(0), ..Default::default() }).await?;
    let upf_addr = upf.pfcp_addr();
    tokio::spawn(upf.run(stop.clone()));
    let mut cfg = SpgwcConfig { s11: lo(0), pfcp: lo(0), ..SpgwcConfig::default() };
    cfg.upfs = vec![UpfPeerConfig { pfcp: upf_addr, s1u_addr: Ipv4Addr::LOCALHOST, ..UpfPeerConfig::default() }];
    for apn in &mut cfg.apns {
        *apn = ApnConfig { pool: Some(pool), ..apn.clone() };
    }
    let gw = mobicore_spgwc::bind(cfg).await?;
    let s11 = gw.s11_addr;
    tokio::spawn(gw.run(stop.clone()));
    Ok(s11)
}

/// What an MME sends at attach, for UE `i`.
fn create_session(i: usize) -> S11Request {
    let plmn = Plmn::new("001", "01").expect("PLMN");
    S11Request::CreateSession(CreateSessionRequest {
        imsi: format!("00101{i:010}").parse().expect("IMSI"),
        msisdn: None,
        serving_network: plmn,
        tai: Tai { plmn, tac: 1 },
        ecgi: Ecgi { plmn, eci: 0x100 },
        sender_fteid: Fteid { teid: Teid(0x1000 + i as u32), ipv4: Ipv4Addr::LOCALHOST },
        apn: "internet".into(),
        pdn_type: PdnType::Ipv4,
        apn_ambr: Ambr { uplink: 100_000_000, downlink: 200_000_000 },
        bearer: BearerContextToCreate { ebi: Ebi(5), qci: 9, arp: Arp::default() },
        pgw_s5s8_c: None,
        static_ipv4: None,
        pco: None,
        mei: None,
    })
}

/// Attaches `n` UEs through the relay, 64 at a time; returns their IMSIs.
async fn attach_all(relay: SocketAddr, n: usize) -> Result<Vec<String>> {
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

/// One HTTP/1.1 request to the controller; (status, body).
async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: c\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut out)).await.context("REST answer")??;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).context("HTTP status line")?;
    Ok((status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}
