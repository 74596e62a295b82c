//! Issue 11 end to end on the real data path: 1,000 UEs attached through
//! the controller's S11 relay, flows running; 100 of them moved to an edge
//! anchor the controller starts on demand (`mobicore upf` + `mobicore
//! spgwc` processes at site `edge1`), moved back, then moved to a second
//! site. The steering switch is the UPF's XDP program in `steer`; the core
//! UPF runs XDP in `core`. Every flow (numbered UDP for every UE, TCP for
//! 20 of the moved UEs) must come through with nothing lost,
//! duplicated or reordered, and with the UE's own address at the server.
//! Needs root; without it the test says so and passes.

use mobicore::allinone;
use mobicore::config::Config;
use mobicore::edge::{run_moves, MovePlan};
use mobicore_hss::SubscriberStore;
use mobicore_ran::userplane::continuity::ContinuityConfig;
use mobicore_sctp::Transport;
use std::path::Path;
use std::time::Duration;

fn is_root() -> bool {
    unsafe { libc_geteuid() == 0 }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

fn flows_interval() -> Duration {
    Duration::from_millis(200)
}

fn flows(ran: &str, dn: &str, server: std::net::Ipv4Addr) -> ContinuityConfig {
    let mut c = ContinuityConfig::new(ran, dn, server);
    // 1,000 UEs at 5 datagrams/s each, 20 TCP flows at 50 records/s: a
    // load the 2-CPU hosts carry with room to spare.
    c.udp_interval = flows_interval();
    c.tcp_interval = Duration::from_millis(20);
    c.drain = Duration::from_secs(10);
    c
}

// Its intermittent loss (1 run in 12 on a loaded host) was the test's
// own: the eNB emulator's TUN queue (500 packets) overflowed while the
// host kept its task from running. The queue is 16,384 now, and what the
// test's own ends drop is counted apart (`emulator_dropped`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_ues_keep_every_flow_through_moves_to_the_edge_back_and_to_a_second_edge() {
    if !is_root() {
        eprintln!("skipped: needs root (raw IP for SCTP, namespaces, XDP)");
        return;
    }
    let mut cfg = Config::default();
    cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
    let t = Transport::RawIp;
    let _ = mobicore_netns::cleanup_stale("me");
    let topo = mobicore_netns::Topology::create_edge(&mobicore_netns::unique_tag("me"), 2).unwrap();
    let mut ran = cfg.ran.core.clone();
    ran.ues = 1000;
    ran.enbs = 4;
    ran.detach = true;
    ran.s1u_addr = topo.addr.ran_s1u;
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran.plan, ran.ues).unwrap();
    let program = Path::new(env!("CARGO_BIN_EXE_mobicore"));
    let core = allinone::start_edge(&cfg, store, t, Some(&topo), Some(program)).await.unwrap();
    ran.mme = core.s1ap;
    assert!(core.xdp, "the core UPF runs XDP");
    let edge = core.edge.clone().expect("the edge run has a controller");
    // UDP from every UE; TCP from UEs 0..20 and 100..110; UEs 0..100
    // move, and the TCP flows of UEs 100..110 alone.
    let plan = MovePlan { udp_ues: 1000, tcp_ues: 20, moved: 100, flow_moved: 10, continuity: flows, settle: 2000 };
    let (report, moves) = allinone::run_ran_workload_with(&cfg, ran, t, None, |ues| {
        let (topo, edge, plan) = (&topo, &edge, &plan);
        async move { run_moves(topo, edge, &ues, plan).await }
    })
    .await
    .unwrap();
    let counter = |nf: &str, name: &'static str| {
        core.counters.iter().filter(|(n, _)| *n == nf).map(|(_, c)| c.value(name)).sum::<u64>()
    };
    let diversions = counter("steering", "pfcp_steering_diversions_established");
    let sites_started = counter("controller", "sites_started");
    // On a loss, every NF's non-zero counters: relay retransmissions
    // and buffered downlink at the core told a late Modify Bearer.
    if moves.as_ref().is_ok_and(|m| !m.continuity.broken().is_empty()) {
        for (nf, c) in &core.counters {
            let nz: Vec<_> = c.snapshot().into_iter().filter(|(_, v)| *v != 0).collect();
            println!("counters of {nf}: {nz:?}");
        }
    }
    core.stop().await.unwrap();
    drop(topo);

    assert_eq!(report.attached, 1000, "{:?}", report.failures);
    assert_eq!(report.detached, 1000, "detach through the relay, replicas too: {:?}", report.failures);
    let moves = moves.unwrap();
    println!("phases: {:?}", moves.phases);
    println!("rtt before {:?} us, at the edge {:?} us", moves.rtt_before_us, moves.rtt_at_edge_us);
    assert_eq!(sites_started, 2, "edge1 and edge2 started on demand");
    assert!(diversions >= 210, "the switch diverted each moved UE twice, each moved flow once: {diversions}");
    let flows = &moves.continuity.flows;
    assert_eq!(flows.iter().filter(|f| f.kind == "udp").count(), 1000);
    assert_eq!(flows.iter().filter(|f| f.kind == "tcp").count(), 30);
    assert_eq!(moves.flow_moved.len(), 10);
    let broken = moves.continuity.broken();
    let moved_broken = broken.iter().filter(|f| moves.moved.contains(&f.ue)).count();
    let lost: u64 = broken.iter().map(|f| f.lost).sum();
    println!(
        "broken: {} ({moved_broken} moved), lost {lost}; the emulator dropped {}, the links {}, the core's UDP sockets {}",
        broken.len(),
        moves.emulator_dropped,
        moves.links_dropped,
        moves.core_udp_dropped
    );
    // Where a loss fell: the UE's place in the move order, which end lost
    // it, and when (the n-th datagram left n intervals after the start).
    let interval = flows_interval().as_millis() as u64;
    for f in broken.iter().filter(|f| f.kind == "udp").take(20) {
        let at: Vec<u64> = f.missing.iter().map(|q| q * interval).collect();
        println!(
            "broken: ue {} (move #{:?}) sent {} lost {} server got {} missing {:?} at ~{:?} ms",
            f.ue,
            moves.moved.iter().position(|u| *u == f.ue),
            f.sent,
            f.lost,
            f.server_received,
            f.missing,
            at
        );
    }
    for f in broken.iter().filter(|f| f.kind == "tcp").take(3) {
        println!("tcp: {f:?}");
    }
    for f in broken.iter().filter(|f| !moves.moved.contains(&f.ue)).take(3) {
        println!("unmoved: {f:?}");
    }
    assert_eq!(moves.emulator_dropped, 0, "the test's own ends fell behind (eNB TUN, UDP buffers)");
    assert!(broken.is_empty(), "{} flows broken, e.g. {:?}", broken.len(), &broken[..broken.len().min(5)]);
}
