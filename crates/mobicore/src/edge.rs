//! Moving running UEs to edge anchors and back (issue 11), on the edge
//! topology ([`mobicore_netns::Topology::create_edge`]) with the real
//! data path: the eNBs' user plane in `ran`, the steering switch's XDP in
//! `steer`, the core UPF in `core`, anchors the controller starts on demand
//! at the sites. Used by `mobicore demo` and the continuity test.
//!
//! The data network's routing is the operator's, not the core's: a moved
//! UE keeps its address, so while it is at a site the data network routes
//! that address (a /32) to the site's SGi, as a routing protocol would;
//! this module installs and removes those routes in `dn`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mobicore_controller::site::http;
use mobicore_netns::Topology;
use mobicore_ran::userplane::continuity::{self, ContinuityConfig, ContinuityReport, Streams};
use mobicore_ran::userplane::{UserPlane, UserPlaneConfig};
use mobicore_ran::AttachedUe;
use serde::Serialize;

use crate::allinone::EdgeControl;

/// Which UEs carry flows and which move.
#[derive(Debug, Clone)]
pub struct MovePlan {
    /// UEs (by attach order) with a numbered UDP flow, and with a TCP flow.
    pub udp_ues: usize,
    pub tcp_ues: usize,
    /// The first `moved` UEs move: to the first site, back, to the second
    /// site (when there is one).
    pub moved: usize,
    /// The next `flow_moved` UEs have a TCP flow too, and only that flow
    /// moves, to the first site and back, while their UDP stays.
    pub flow_moved: usize,
    pub continuity: fn(&str, &str, Ipv4Addr) -> ContinuityConfig,
    /// Echoes awaited between moves (the flows are running).
    pub settle: u64,
}

/// One step of the plan.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub name: String,
    pub ues: usize,
    /// When the step began, from the start of the flows (milliseconds).
    pub at_ms: f64,
    /// Wall time of the REST calls of the step, all UEs.
    pub ms: f64,
    /// The controller's timing of the first UE's relocation.
    pub first: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MoveReport {
    pub phases: Vec<Phase>,
    /// Median UDP round trip of the first moved UE to the server, before
    /// the move and at the first site (microseconds).
    pub rtt_before_us: Option<f64>,
    pub rtt_at_edge_us: Option<f64>,
    /// The UEs that moved, and those of which one flow moved.
    pub moved: Vec<Ipv4Addr>,
    pub flow_moved: Vec<Ipv4Addr>,
    /// Packets the test's own ends dropped because they did not keep up
    /// (the emulated eNB's TUN device; full UDP receive buffers in `ran`
    /// and `dn`): not a loss of the core's.
    pub emulator_dropped: u64,
    /// Packets the links of every namespace dropped meanwhile (the eNB's
    /// TUN included): on an overloaded host, veth rings overflow.
    pub links_dropped: u64,
    /// UDP datagrams dropped on full receive buffers in the core's, the
    /// steering switch's and the sites' namespaces meanwhile (the user
    /// planes' sockets): the core's own loss, counted apart from the
    /// test's ends.
    pub core_udp_dropped: u64,
    pub continuity: ContinuityReport,
}

/// Runs the plan against attached `ues`; every UE moved is back at its
/// original anchor or at the last site when this returns.
pub async fn run_moves(topo: &Topology, edge: &EdgeControl, ues: &[AttachedUe], plan: &MovePlan) -> Result<MoveReport> {
    anyhow::ensure!(!topo.sites.is_empty(), "the edge topology has no site");
    let tunnels: Vec<_> = ues.iter().map(|u| u.tunnel).collect();
    let ips: Vec<Ipv4Addr> = tunnels.iter().map(|t| t.ue_ip).collect();
    let needed = (plan.moved + plan.flow_moved).max(plan.udp_ues).max(plan.tcp_ues);
    anyhow::ensure!(ips.len() >= needed, "not enough attached UEs");
    let up = UserPlane::start(UserPlaneConfig::new(&topo.ran, topo.addr.ran_s1u), tunnels)
        .await
        .context("starting the eNBs' user plane")?;
    let cfg = (plan.continuity)(&topo.ran, &topo.dn, topo.addr.dn_sgi);
    let before = (instrument_drops(topo).await?, links_dropped(topo).await?, core_udp_drops(topo).await?);
    let r = moves(topo, edge, &ips, plan, &cfg).await;
    let tun = up.tun_dropped().await;
    let links = links_dropped(topo).await;
    let _ = up.stop().await;
    let mut r = r?;
    r.emulator_dropped = tun.context("the eNB TUN's counters")? + (instrument_drops(topo).await? - before.0);
    r.links_dropped = links? - before.1;
    r.core_udp_dropped = core_udp_drops(topo).await?.saturating_sub(before.2);
    Ok(r)
}

async fn moves(
    topo: &Topology,
    edge: &EdgeControl,
    ips: &[Ipv4Addr],
    plan: &MovePlan,
    cfg: &ContinuityConfig,
) -> Result<MoveReport> {
    let flow_moved = &ips[plan.moved..plan.moved + plan.flow_moved];
    let tcp: Vec<Ipv4Addr> = ips[..plan.tcp_ues].iter().chain(flow_moved).copied().collect();
    let streams = Streams::start(cfg, &ips[..plan.udp_ues], &tcp).await.context("starting the flows")?;
    // The moved flow: the UE's TCP connection to the server.
    let flow = format!(r#"{{"protocol":6,"remote":"{}","remote_port":{}}}"#, cfg.dn_addr, cfg.tcp_port);
    let started = Instant::now();
    let probe = SocketAddrV4::new(cfg.dn_addr, cfg.udp_port);
    let settle = |s: &Streams| {
        let (target, limit) = (s.received() + plan.settle, Duration::from_secs(60));
        let counter = s.counter();
        async move { Streams::wait_until(&counter, target, limit).await }
    };
    let mut phases = Vec::new();
    let r = async {
        if !settle(&streams).await {
            bail!("the flows do not get through before any move");
        }
        let moved = &ips[..plan.moved];
        let rtt_before = rtt(&topo.ran, moved[0], probe).await;
        let site = &topo.sites[0];
        let (p, ids) = relocate(edge, moved, &site.name, None, started).await?;
        routes(&topo.dn, moved, Some(site.sgi))?;
        phases.push(p);
        let (p, flow_ids) = relocate(edge, flow_moved, &site.name, Some(&flow), started).await?;
        flow_routes(&topo.dn, flow_moved, cfg.tcp_port, Some(site.sgi))?;
        phases.push(p);
        if !settle(&streams).await {
            bail!("the flows stalled at {}", site.name);
        }
        let rtt_edge = rtt(&topo.ran, moved[0], probe).await;
        routes(&topo.dn, moved, None)?;
        phases.push(move_back(edge, &ids, started).await?);
        flow_routes(&topo.dn, flow_moved, cfg.tcp_port, None)?;
        phases.push(move_back(edge, &flow_ids, started).await?);
        if !settle(&streams).await {
            bail!("the flows stalled after moving back");
        }
        if let Some(second) = topo.sites.get(1) {
            let (p, _) = relocate(edge, moved, &second.name, None, started).await?;
            routes(&topo.dn, moved, Some(second.sgi))?;
            phases.push(p);
            if !settle(&streams).await {
                bail!("the flows stalled at {}", second.name);
            }
        }
        Ok((rtt_before, rtt_edge))
    }
    .await;
    let continuity = streams.stop().await;
    let (rtt_before_us, rtt_at_edge_us) = r?;
    let (moved, flow_moved) = (ips[..plan.moved].to_vec(), flow_moved.to_vec());
    let (emulator_dropped, links_dropped, core_udp_dropped) = (0, 0, 0);
    Ok(MoveReport {
        phases,
        rtt_before_us,
        rtt_at_edge_us,
        moved,
        flow_moved,
        emulator_dropped,
        links_dropped,
        core_udp_dropped,
        continuity,
    })
}

/// UDP datagrams dropped on full receive buffers in `ran` and `dn`.
async fn instrument_drops(topo: &Topology) -> Result<u64> {
    sum_in(vec![topo.ran.clone(), topo.dn.clone()], mobicore_netns::udp_rcvbuf_errors).await
}

/// The core's, the steering switch's and the sites' namespaces.
fn core_side(topo: &Topology) -> Vec<String> {
    let mut names = vec![topo.core.clone()];
    names.extend(topo.steer.clone());
    names.extend(topo.sites.iter().map(|s| s.ns.clone()));
    names
}

/// UDP datagrams dropped on full receive buffers on the core's side.
async fn core_udp_drops(topo: &Topology) -> Result<u64> {
    sum_in(core_side(topo), mobicore_netns::udp_rcvbuf_errors).await
}

/// Packets dropped by the links of every namespace of the topology.
async fn links_dropped(topo: &Topology) -> Result<u64> {
    let mut names = vec![topo.ran.clone(), topo.dn.clone()];
    names.extend(core_side(topo));
    sum_in(names, mobicore_netns::link_drops).await
}

/// `count` summed over namespaces `names` (it runs commands in them).
async fn sum_in(names: Vec<String>, count: fn(&str) -> Result<u64, mobicore_netns::NetnsError>) -> Result<u64> {
    let n =
        tokio::task::spawn_blocking(move || -> Result<u64> { names.iter().try_fold(0, |n, ns| Ok(n + count(ns)?)) });
    n.await?
}

/// `POST /v1/relocations` for each UE (by address) to `anchor`: the whole
/// UE, or the `flow` (a FlowSpec in JSON).
async fn relocate(
    edge: &EdgeControl,
    ues: &[Ipv4Addr],
    anchor: &str,
    flow: Option<&str>,
    started: Instant,
) -> Result<(Phase, Vec<u64>)> {
    let t0 = Instant::now();
    let mut ids = Vec::new();
    let mut first = None;
    for ue in ues {
        let body = match flow {
            Some(f) => format!(r#"{{"ue":"{ue}","anchor":"{anchor}","flow":{f}}}"#),
            None => format!(r#"{{"ue":"{ue}","anchor":"{anchor}"}}"#),
        };
        let (status, b) = http(edge.rest, "POST", "/v1/relocations", Some(&edge.token), &body).await?;
        if status != 201 {
            bail!("moving {ue} to {anchor}: {status} {b}");
        }
        let v: serde_json::Value = serde_json::from_str(&b)?;
        ids.push(v["id"].as_u64().context("relocation id")?);
        first.get_or_insert(v["timing"].clone());
    }
    let what = if flow.is_some() { "a flow each" } else { "UEs" };
    let name = format!("{what} to {anchor}");
    let p = Phase { name, ues: ues.len(), at_ms: ms(t0 - started), ms: ms(t0.elapsed()), first };
    Ok((p, ids))
}

/// `DELETE /v1/relocations/{id}` for each.
async fn move_back(edge: &EdgeControl, ids: &[u64], started: Instant) -> Result<Phase> {
    let t0 = Instant::now();
    for id in ids {
        let (status, b) = http(edge.rest, "DELETE", &format!("/v1/relocations/{id}"), Some(&edge.token), "").await?;
        if status != 200 {
            bail!("moving relocation {id} back: {status} {b}");
        }
    }
    Ok(Phase { name: "back".into(), ues: ids.len(), at_ms: ms(t0 - started), ms: ms(t0.elapsed()), first: None })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The data network's host routes for `ues`: via `via`, or removed.
fn routes(dn: &str, ues: &[Ipv4Addr], via: Option<Ipv4Addr>) -> Result<()> {
    let lines: Vec<String> = ues
        .iter()
        .map(|ue| match via {
            Some(v) => format!("route replace {ue}/32 via {v}"),
            None => format!("route del {ue}/32"),
        })
        .collect();
    mobicore_netns::ip_batch(dn, &lines).context("the data network's routes")
}

/// The data network's policy routes for the server's side of the moved
/// TCP flows (source port `port`) of `ues`: via `via` (table 201), or
/// removed. The UEs' other traffic keeps the data network's main table.
fn flow_routes(dn: &str, ues: &[Ipv4Addr], port: u16, via: Option<Ipv4Addr>) -> Result<()> {
    const TABLE: u32 = 201;
    let rule =
        |op: &str, ue: &Ipv4Addr| format!("rule {op} to {ue}/32 ipproto tcp sport {port} lookup {TABLE} pref 201");
    let mut lines: Vec<String> = Vec::new();
    match via {
        Some(v) => {
            lines.push(format!("route replace default via {v} table {TABLE}"));
            lines.extend(ues.iter().map(|ue| rule("add", ue)));
        }
        None => lines.extend(ues.iter().map(|ue| rule("del", ue))),
    }
    if ues.is_empty() {
        return Ok(());
    }
    mobicore_netns::ip_batch(dn, &lines).context("the data network's flow routes")
}

/// Median of 20 UDP round trips from `ue` to the flows' echo server.
pub(crate) async fn rtt(ran: &str, ue: Ipv4Addr, server: SocketAddrV4) -> Option<f64> {
    let ran = ran.to_string();
    tokio::task::spawn_blocking(move || continuity::udp_rtt(&ran, ue, server, 20).ok().flatten())
        .await
        .ok()
        .flatten()
        .map(|d| d.as_secs_f64() * 1e6)
}
