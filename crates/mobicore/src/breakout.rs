//! Local breakout at the MEC router (issue 12) on the edge topology with
//! the real data path: the node in `steer` runs `mec_xdp`
//! ([`crate::allinone::start_edge_as`] with the MEC role), the edge
//! application is the first site's namespace (its S1-U address), the
//! controller applies the traffic rules of router `mec1` over PFCP and
//! keeps every relayed UE's downlink tunnel on the node, so the
//! application's answers reach the UE in its tunnel. Used by `mobicore
//! demo` and the breakout test.
//!
//! The application's network routes the UE pool back to the MEC router,
//! as an operator's edge network would; this module installs that route.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mobicore_controller::site::http;
use mobicore_netns::Topology;
use mobicore_ran::userplane::continuity::{ContinuityConfig, ContinuityReport, Streams};
use mobicore_ran::userplane::{UserPlane, UserPlaneConfig};
use mobicore_ran::AttachedUe;
use serde::Serialize;

use crate::allinone::EdgeControl;

/// The traffic rules of router `mec1`.
pub const RULES: &str = "/v1/mec/routers/mec1/traffic-rules";

/// One REST change of a traffic rule, as the node took it.
#[derive(Debug, Clone, Serialize)]
pub struct RuleChange {
    pub what: String,
    /// When, from the start of the flows (milliseconds).
    pub at_ms: f64,
    /// The controller's `appliedUs`: from the request to the node's
    /// acceptance (microseconds); and the REST call's wall time.
    pub applied_us: Option<u64>,
    pub call_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BreakoutReport {
    /// The edge application's address and the data network's server's.
    pub app: Ipv4Addr,
    pub dn: Ipv4Addr,
    /// Median UDP round trip of the first UE to the application (local
    /// breakout) and to the data network's server (through the core).
    pub rtt_app_us: Option<f64>,
    pub rtt_dn_us: Option<f64>,
    pub changes: Vec<RuleChange>,
    /// Packets the test's own ends dropped (eNB TUN, full UDP buffers).
    pub emulator_dropped: u64,
    /// Flows to the application (UDP and TCP of the first UE) and to the
    /// data network (UDP of every UE).
    pub to_app: ContinuityReport,
    pub to_dn: ContinuityReport,
}

/// A rule sending the UEs' traffic for `app` to it, decapsulated.
pub fn app_rule(id: &str, priority: u8, app: Ipv4Addr, mac: &str, extra: &str) -> String {
    format!(
        r#"{{"trafficRuleId":"{id}","filterType":"FLOW","priority":{priority},"trafficFilter":[{{"dstAddress":["{app}/32"]{extra}}}],"action":"FORWARD_DECAPSULATED","dstInterface":[{{"interfaceType":"MAC","dstMacAddress":"{mac}","dstIpAddress":"{app}"}}],"state":"ACTIVE"}}"#
    )
}

/// A rule dropping UDP to `app` port `port` (traffic nobody sends).
pub fn drop_rule(id: &str, app: Ipv4Addr, port: u16) -> String {
    format!(
        r#"{{"trafficRuleId":"{id}","filterType":"PACKET","priority":1,"trafficFilter":[{{"dstAddress":["{app}"],"dstPort":["{port}"],"protocol":["UDP"]}}],"action":"DROP","state":"ACTIVE"}}"#
    )
}

/// `method` on `path` with `body`; the answer's `appliedUs` and the call's time.
pub async fn change(
    edge: &EdgeControl,
    method: &str,
    path: &str,
    body: &str,
    what: &str,
    started: Instant,
) -> Result<RuleChange> {
    let t0 = Instant::now();
    let (status, b) = http(edge.rest, method, path, Some(&edge.token), body).await?;
    if !(200..300).contains(&status) {
        bail!("{what}: {status} {b}");
    }
    let v: serde_json::Value = serde_json::from_str(&b).unwrap_or_default();
    Ok(RuleChange {
        what: what.into(),
        at_ms: ms(t0 - started),
        applied_us: v["appliedUs"].as_u64(),
        call_ms: ms(t0.elapsed()),
    })
}

/// Waits (up to 30 s) until the controller counts `n` sessions
/// established on the MEC router node (`mec_sessions_established`).
async fn wait_for_sessions(edge: &EdgeControl, n: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = mobicore_controller::site::http_get(edge.rest, "/metrics").await?;
        let have = metrics
            .lines()
            .find_map(|l| l.strip_prefix("mobicore_controller_mec_sessions_established "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if have >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the MEC router node holds {have} sessions, not the {n} the UEs' tunnels and the rule make");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Flows from attached `ues` to the edge application (the first UE: UDP
/// and TCP) and to the data network (every UE: UDP) at once; the rules
/// changed while they run: an unrelated rule added, the application's
/// rule replaced by a new version, the unrelated rule removed.
pub async fn run_breakout(
    topo: &Topology,
    edge: &EdgeControl,
    ues: &[AttachedUe],
    flows: fn(&str, &str, Ipv4Addr) -> ContinuityConfig,
    settle: u64,
) -> Result<BreakoutReport> {
    let site = topo.sites.first().context("the edge topology has no site for the application")?;
    anyhow::ensure!(!ues.is_empty(), "no attached UE");
    let tunnels: Vec<_> = ues.iter().map(|u| u.tunnel).collect();
    let ips: Vec<Ipv4Addr> = tunnels.iter().map(|t| t.ue_ip).collect();
    // The application's network: the UEs via the MEC router.
    let pool = format!("{}/{}", topo.addr.ue_pool, topo.addr.ue_pool_prefix);
    let steer_end = Ipv4Addr::from(u32::from(site.s1u) - 1);
    mobicore_netns::ip(&["-n", &site.ns, "route", "replace", &pool, "via", &steer_end.to_string()])?;
    let mac = mobicore_netns::link_mac(&site.ns, mobicore_netns::topology::S1U_IF)?;
    let up = UserPlane::start(UserPlaneConfig::new(&topo.ran, topo.addr.ran_s1u), tunnels)
        .await
        .context("starting the eNBs' user plane")?;
    let drops = || {
        let names = [topo.ran.clone(), topo.dn.clone(), site.ns.clone()];
        async move {
            tokio::task::spawn_blocking(move || -> Result<u64> {
                names.iter().try_fold(0, |n, ns| Ok(n + mobicore_netns::udp_rcvbuf_errors(ns)?))
            })
            .await?
        }
    };
    let before = drops().await?;
    let r = flows_and_changes(topo, edge, &ips, site, &mac, flows, settle).await;
    let tun = up.tun_dropped().await;
    let after = drops().await;
    let _ = up.stop().await;
    let mut r = r?;
    r.emulator_dropped = tun.context("the eNB TUN's counters")? + (after? - before);
    Ok(r)
}

async fn flows_and_changes(
    topo: &Topology,
    edge: &EdgeControl,
    ips: &[Ipv4Addr],
    site: &mobicore_netns::Site,
    mac: &str,
    flows: fn(&str, &str, Ipv4Addr) -> ContinuityConfig,
    settle: u64,
) -> Result<BreakoutReport> {
    let app = site.s1u;
    let started = Instant::now();
    let mut changes = vec![change(edge, "POST", RULES, &app_rule("app", 10, app, mac, ""), "app rule", started).await?];
    // The application's answers need each UE's tunnel on the node: the
    // controller puts them there as it relays the attaches' Modify Bearer.
    wait_for_sessions(edge, ips.len() as u64 + 1).await?;
    let app_cfg = flows(&topo.ran, &site.ns, app);
    let dn_cfg = flows(&topo.ran, &topo.dn, topo.addr.dn_sgi);
    let first = &ips[..1];
    let to_app = Streams::start(&app_cfg, first, first).await.context("starting the flows to the application")?;
    let to_dn = match Streams::start(&dn_cfg, ips, &[]).await {
        Ok(s) => s,
        Err(e) => {
            to_app.stop().await;
            return Err(e).context("starting the flows to the data network");
        }
    };
    let settled = |s: &Streams| {
        let (target, counter) = (s.received() + settle, s.counter());
        async move { Streams::wait_until(&counter, target, Duration::from_secs(60)).await }
    };
    let r = async {
        if !settled(&to_app).await {
            bail!("nothing comes back from the edge application by local breakout");
        }
        if !settled(&to_dn).await {
            bail!("the flows to the data network do not get through");
        }
        let rtt_app = crate::edge::rtt(&topo.ran, ips[0], SocketAddrV4::new(app, app_cfg.udp_port)).await;
        let rtt_dn = crate::edge::rtt(&topo.ran, ips[0], SocketAddrV4::new(dn_cfg.dn_addr, dn_cfg.udp_port)).await;
        let path = |id: &str| format!("{RULES}/{id}");
        changes
            .push(change(edge, "POST", RULES, &drop_rule("unrelated", app, 9), "unrelated rule added", started).await?);
        let v2 = app_rule("app", 20, app, mac, "");
        changes.push(change(edge, "PUT", &path("app"), &v2, "app rule replaced", started).await?);
        changes.push(change(edge, "DELETE", &path("unrelated"), "", "unrelated rule removed", started).await?);
        if !settled(&to_app).await || !settled(&to_dn).await {
            bail!("the flows stalled after the rule changes");
        }
        Ok((rtt_app, rtt_dn))
    }
    .await;
    let (to_app, to_dn) = (to_app.stop().await, to_dn.stop().await);
    let (rtt_app_us, rtt_dn_us) = r?;
    Ok(BreakoutReport { app, dn: dn_cfg.dn_addr, rtt_app_us, rtt_dn_us, changes, emulator_dropped: 0, to_app, to_dn })
}

/// `mobicore demo`'s local breakout: a second short run on an edge
/// topology of its own with the MEC router in `steer`; two UEs attach,
/// the first reaches the edge application by local breakout while both
/// keep a flow to the data network, and the rules change meanwhile.
/// Prints the round trips, the rule changes and the flows' outcome.
pub async fn demo(cfg: &crate::config::Config, t: mobicore_sctp::Transport) -> Result<BreakoutReport> {
    // The config's S1-MME address again (the run before it has stopped).
    let _ = mobicore_netns::cleanup_stale("mx");
    let topo = Topology::create_edge(&mobicore_netns::unique_tag("mx"), 1)
        .context("creating the breakout's network namespaces")?;
    let mut ran = cfg.ran.core.clone();
    (ran.ues, ran.enbs, ran.detach, ran.mobility) = (2, 1, true, false);
    ran.s1u_addr = topo.addr.ran_s1u;
    let store = mobicore_hss::SubscriberStore::in_memory();
    crate::allinone::provision(&store, &ran.plan, ran.ues)?;
    let role = mobicore_upf::config::UpfRole::Mec;
    let core = crate::allinone::start_edge_as(cfg, store, t, Some(&topo), None, role).await?;
    ran.mme = core.s1ap;
    let edge = core.edge.clone().context("the breakout run has a controller")?;
    let r = crate::allinone::run_ran_workload_with(cfg, ran, t, None, |ues| {
        let (topo, edge) = (&topo, &edge);
        async move { run_breakout(topo, edge, &ues, demo_flows, 50).await }
    })
    .await;
    core.stop().await?;
    drop(topo);
    let (_, b) = r?;
    let b = b?;
    print(&b);
    Ok(b)
}

fn demo_flows(ran: &str, dn: &str, server: Ipv4Addr) -> ContinuityConfig {
    let mut c = ContinuityConfig::new(ran, dn, server);
    c.udp_interval = Duration::from_millis(10);
    c
}

fn print(b: &BreakoutReport) {
    let us = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0} us"));
    let ue = b.to_app.flows.first().map_or("-".into(), |f| f.ue.to_string());
    println!(
        "local breakout at the MEC router (mec_xdp in steer): UE {ue} RTT to the edge application {} {}, to the data network {} {}",
        b.app,
        us(b.rtt_app_us),
        b.dn,
        us(b.rtt_dn_us)
    );
    for c in &b.changes {
        let applied = c.applied_us.map_or(String::new(), |a| format!(", the node took it in {a} us"));
        println!("  {} at {:.0} ms: REST call {:.1} ms{applied}", c.what, c.at_ms, c.call_ms);
    }
    for (to, r) in [("the application", &b.to_app), ("the data network", &b.to_dn)] {
        for f in &r.flows {
            println!(
                "  {} flow of {} to {to}: {} sent, {} back, {} lost: {}",
                f.kind,
                f.ue,
                f.sent,
                f.received,
                f.lost,
                if f.intact() { "nothing lost" } else { "BROKEN" }
            );
        }
    }
}
