//! Issue 12 end to end on the real data path: UEs attached through the
//! controller's S11 relay; the node on S1-U is the MEC router (`mec_xdp`
//! in `steer`); the first UE runs a UDP and a TCP flow to the edge
//! application (local breakout, the first site's namespace) while every
//! UE runs a UDP flow to the data network through the core. Mid-stream a
//! rule is added, the application's rule is replaced by a new version and
//! the added rule removed: no flow may lose, duplicate or reorder
//! anything, and the application must see the UE's own address. Needs
//! root; without it the test says so and passes.

use mobicore::allinone;
use mobicore::breakout::run_breakout;
use mobicore::config::Config;
use mobicore_controller::site::http;
use mobicore_hss::SubscriberStore;
use mobicore_ran::userplane::continuity::ContinuityConfig;
use mobicore_sctp::Transport;
use mobicore_upf::config::UpfRole;
use std::time::Duration;

fn is_root() -> bool {
    unsafe { libc_geteuid() == 0 }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

fn flows(ran: &str, dn: &str, server: std::net::Ipv4Addr) -> ContinuityConfig {
    let mut c = ContinuityConfig::new(ran, dn, server);
    c.udp_interval = Duration::from_millis(10);
    c.tcp_interval = Duration::from_millis(10);
    c.drain = Duration::from_secs(5);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_to_an_edge_application_and_to_the_core_survive_rule_changes() {
    if !is_root() {
        eprintln!("skipped: needs root (raw IP for SCTP, namespaces, XDP)");
        return;
    }
    let mut cfg = Config::default();
    cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
    let t = Transport::RawIp;
    let _ = mobicore_netns::cleanup_stale("mb");
    let topo = mobicore_netns::Topology::create_edge(&mobicore_netns::unique_tag("mb"), 1).unwrap();
    let mut ran = cfg.ran.core.clone();
    ran.ues = 4;
    ran.enbs = 1;
    ran.detach = true;
    ran.s1u_addr = topo.addr.ran_s1u;
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran.plan, ran.ues).unwrap();
    let core = allinone::start_edge_as(&cfg, store, t, Some(&topo), None, UpfRole::Mec).await.unwrap();
    ran.mme = core.s1ap;
    let edge = core.edge.clone().expect("the edge run has a controller");
    let (report, run) = allinone::run_ran_workload_with(&cfg, ran, t, None, |ues| {
        let (topo, edge) = (&topo, &edge);
        async move { run_breakout(topo, edge, &ues, flows, 100).await }
    })
    .await
    .unwrap();
    // A DUPLICATE rule is taken by the node (the copy is made in XDP),
    // kept, and removed again.
    let dup = mobicore::breakout::app_rule("copy", 30, topo.sites[0].s1u, "02:00:00:00:00:01", "")
        .replace("FORWARD_DECAPSULATED", "DUPLICATE_DECAPSULATED");
    let rules = mobicore::breakout::RULES;
    let (status, body) = http(edge.rest, "POST", rules, Some(&edge.token), &dup).await.unwrap();
    assert_eq!(status, 201, "{body}");
    let (status, body) = http(edge.rest, "GET", &format!("{rules}/copy"), None, "").await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("DUPLICATE_DECAPSULATED"), "{body}");
    let (status, body) = http(edge.rest, "DELETE", &format!("{rules}/copy"), Some(&edge.token), "").await.unwrap();
    assert!((200..300).contains(&status), "{status} {body}");
    let counter = |nf: &str, name: &'static str| {
        core.counters.iter().filter(|(n, _)| *n == nf).map(|(_, c)| c.value(name)).sum::<u64>()
    };
    let tunnels = counter("mec", "pfcp_mec_sessions_established");
    let refused = counter("controller", "mec_refused") + counter("controller", "mec_ue_tunnel_failed");
    core.stop().await.unwrap();
    drop(topo);

    assert_eq!(report.attached, 4, "{:?}", report.failures);
    assert_eq!(report.detached, 4, "{:?}", report.failures);
    let run = run.unwrap();
    println!("rtt to the application {:?} us, to the data network {:?} us", run.rtt_app_us, run.rtt_dn_us);
    println!("rule changes: {:?}", run.changes);
    assert_eq!(refused, 0, "every rule and UE tunnel taken by the node");
    // 4 UE tunnels, the application's rule, the unrelated rule.
    assert!(tunnels >= 6, "sessions on the MEC router: {tunnels}");
    assert_eq!(run.changes.len(), 4);
    for c in &run.changes[..2] {
        assert!(c.applied_us.is_some(), "{} reports the time the node took", c.what);
    }
    let app = &run.to_app.flows;
    assert_eq!(
        (app.iter().filter(|f| f.kind == "udp").count(), app.iter().filter(|f| f.kind == "tcp").count()),
        (1, 1)
    );
    assert_eq!(run.to_dn.flows.len(), 4);
    for f in app {
        assert_eq!(f.seen_as, Some(f.ue), "the application sees the UE's own address: {f:?}");
    }
    assert_eq!(run.emulator_dropped, 0, "the test's own ends fell behind (eNB TUN, UDP buffers)");
    let broken: Vec<_> = run.to_app.broken().into_iter().chain(run.to_dn.broken()).collect();
    assert!(broken.is_empty(), "broken flows: {broken:?}");
}
