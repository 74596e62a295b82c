//! Issue 10 item 8 on the real data path: the mobility model moves UEs
//! between three eNBs by X2 and S1 (drawn per handover, fixed seed) while
//! a numbered downlink and TCP streams run through the core's XDP UPF,
//! and an idle UE makes periodic tracking area updates at T3412 expiry.
//! No downlink packet may be lost, duplicated or reordered, no handover
//! may fail, and TCP keeps delivering. The core runs in this process, the
//! emulated eNBs' user plane in the `ran` namespace. Needs root; without
//! it the test says so and passes.

use mobicore::allinone;
use mobicore::config::Config;
use mobicore_common::tools::is_root;
use mobicore_hss::SubscriberStore;
use mobicore_ran::userplane::goodput::{self, GoodputConfig, GoodputServer};
use mobicore_ran::userplane::numbered::{Numbered, NumberedConfig, StreamCheck};
use mobicore_ran::userplane::{UserPlane, UserPlaneConfig};
use mobicore_ran::{HandoverType, MobilityConfig, MobilityModel, Phase};
use mobicore_sctp::Transport;
use std::time::{Duration, Instant};

/// How long any step may take at most before the test fails (generous:
/// a loaded host), never a measure of speed.
const LIMIT: Duration = Duration::from_secs(30);
const SEED: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ues_move_under_the_model_with_data_and_idle_ues_update_periodically() {
    if !is_root() {
        eprintln!("skipped: needs root (raw IP for SCTP, namespaces, XDP)");
        return;
    }
    // UEs 0..4 carry data and move; UE 4 is released and stays idle.
    const UES: u64 = 5;
    let mut cfg = Config::default();
    cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
    // T3412 of 2 s (TS 24.008 10.5.7.3: 2-second units).
    cfg.mme.core.t3412_seconds = 2;
    let t = Transport::RawIp;
    let _ = mobicore_netns::cleanup_stale("mv");
    let topo = mobicore_netns::Topology::create(&mobicore_netns::unique_tag("mv")).unwrap();
    let mut ran_cfg = cfg.ran.core.clone();
    ran_cfg.ues = UES;
    ran_cfg.enbs = 3;
    ran_cfg.detach = true;
    ran_cfg.s1u_addr = topo.addr.ran_s1u;
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran_cfg.plan, UES).unwrap();
    let core = allinone::start_with(&cfg, store, t, Some(&topo)).await.unwrap();
    ran_cfg.mme = core.s1ap;

    let mut ran = allinone::ran_session(&cfg, ran_cfg, t, None).await.unwrap();
    ran.attach().await.unwrap();
    let all = ran.attached_ues();
    assert_eq!(all.len() as u64, UES, "{:?}", ran.report().failures);
    let data: Vec<_> = all.iter().copied().filter(|u| u.index < 4).collect();
    let addresses: Vec<_> = data.iter().map(|u| u.tunnel.ue_ip).collect();
    let up =
        UserPlane::start(UserPlaneConfig::new(&topo.ran, topo.addr.ran_s1u), data.iter().map(|u| u.tunnel).collect())
            .await
            .unwrap();
    ran.follow(up.link().await.unwrap(), &data);
    let streams =
        Numbered::start(&NumberedConfig::new(&topo.ran, &topo.dn, topo.addr.dn_sgi), &addresses).await.unwrap();
    streams.start_downlink();
    assert!(ran.serve_until(streams.wait_reached(20, LIMIT)).await.unwrap(), "no downlink before moving");

    // The idle UE: released once, it runs T3412 from then on.
    let r = ran.phase(Phase::Release).await.unwrap();
    assert!(r.succeeded >= 1, "{:?}", ran.report().failures);
    // The data UEs are paged back by their downlink.
    let s = streams.sent();
    assert!(ran.serve_until(streams.wait_reached(s + 20, LIMIT)).await.unwrap(), "data UEs not back");

    let mut g = GoodputConfig::new(&topo.ran, &topo.dn, topo.addr.dn_sgi);
    // Paced: unpaced TCP fills the queues on the way to the same UE and
    // its numbered datagrams are dropped there, handovers or not.
    g.mbit_per_ue = Some(20.0);
    let server = GoodputServer::start(&g).unwrap();
    let mut model = MobilityModel::new(
        MobilityConfig { handover_rate: 2.0, handover_type: HandoverType::Mixed, seed: SEED, ..Default::default() },
        ran.enb_count(),
    );
    let now = Instant::now();
    for u in &data {
        model.add_ue(now, u.index);
    }
    let s0 = streams.sent();
    let window = goodput::start_window(&g, &addresses[..2], Duration::from_secs(3));
    let join = tokio::task::spawn_blocking(move || window.join());
    let (moved, tcp) = ran.moving(&mut model, join).await.unwrap();
    let tcp = tcp.unwrap();
    let s1 = streams.sent();
    assert!(ran.serve_until(streams.wait_reached(s1 + 20, LIMIT)).await.unwrap(), "downlink after moving");
    server.stop();

    println!("seed {SEED}: {moved:?}");
    let ok = |k: &str| moved.handovers.get(k).map_or(0, |r| r.succeeded);
    let failed: u64 = moved.handovers.values().map(|r| r.failed).sum();
    assert_eq!(failed, 0, "seed {SEED}: {:?}", ran.report().failures);
    assert_eq!(moved.unfinished, 0, "seed {SEED}");
    assert!(ok("x2-handover") > 0 && ok("s1-handover") > 0, "seed {SEED}: both types: {moved:?}");
    for r in &tcp {
        let g = r.as_ref().unwrap_or_else(|e| panic!("seed {SEED}: TCP: {e}"));
        assert!(g.octets > 0, "seed {SEED}: {g:?}");
    }
    for u in streams.report() {
        let seqs: Vec<u32> =
            u.log.arrivals.iter().map(|a| a.0).filter(|q| (s0..s1).contains(q)).map(|q| q - s0).collect();
        let c = StreamCheck::of(&seqs, s1 - s0);
        assert!(c.clean(), "seed {SEED}: UE {}: {c:?}", u.ue);
    }

    // Periodic TAUs of the idle UE (T3412 of 2 s): during the moves or
    // after them; served until one has come, at most LIMIT.
    let taus = |ran: &mobicore_ran::Ran| {
        let r = ran.report();
        r.moving
            .iter()
            .filter_map(|m| m.other.get("periodic_tau"))
            .chain(r.unsolicited.get("periodic_tau"))
            .map(|p| p.succeeded)
            .sum::<u64>()
    };
    let end = Instant::now() + LIMIT;
    while taus(&ran) == 0 && Instant::now() < end {
        ran.serve_until(tokio::time::sleep(Duration::from_millis(100))).await.unwrap();
    }
    assert!(taus(&ran) > 0, "no periodic TAU: {:?}", ran.report().unsolicited.keys());

    streams.close();
    let stats = up.stop().await.unwrap();
    assert_eq!((stats.send_errors, stats.tun_write_errors), (0, 0), "{stats:?}");
    let report = ran.finish().await.unwrap();
    assert_eq!(report.send_errors, 0);
    core.stop().await.unwrap();
    drop(topo);
}
