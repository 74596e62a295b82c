//! Idle UEs cross a tracking area boundary with the real core (issue 10
//! item 8): HSS, S/P-GW-C, UPF without a data path and the MME in this
//! process, S1-MME over UDP-encapsulated SCTP (no root, no namespaces),
//! two emulated eNBs in TAs 1 and 2 (`[ran] enbs_per_tac = 1`). Four UEs
//! attach (those at eNB 0 get the TAI list [1], those at eNB 1 [1, 2]),
//! go idle and each reselects the other eNB's cell: the UEs from TA 1 make
//! a normal TAU from idle through eNB 1, the others signal nothing; then
//! every UE comes back by a service request through its new eNB, and all
//! detach.

use mobicore::allinone;
use mobicore::config::Config;
use mobicore_common::counters::Counters;
use mobicore_hss::SubscriberStore;
use mobicore_ran::{Phase, Reselection};
use mobicore_sctp::Transport;
use std::time::{Duration, Instant};

/// How long any wait may take at most before the test fails (generous:
/// a loaded host), never a measure of speed.
const LIMIT: Duration = Duration::from_secs(30);

/// The sum of the MME's counter `name`.
fn mme_counter(counters: &[(&'static str, Counters)], name: &'static str) -> u64 {
    counters.iter().filter(|(n, _)| *n == "mme").map(|(_, c)| c.value(name)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_ues_cross_a_ta_boundary_and_come_back_by_service_request() {
    let mut cfg = Config::default();
    // A UDP port of its own below the ephemeral range, as tests/admin.rs.
    let udp = 20_000 + ((std::process::id() + 6_000) % 12_000) as u16;
    cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
    let t = Transport::Udp { port: udp };
    let mut ran_cfg = cfg.ran.core.clone();
    ran_cfg.ues = 4;
    ran_cfg.enbs = 2;
    ran_cfg.enbs_per_tac = Some(1);
    ran_cfg.detach = true;
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran_cfg.plan, 4).unwrap();
    let core = allinone::start(&cfg, store, t).await.unwrap();
    ran_cfg.mme = core.s1ap;
    let counters = core.counters.clone();

    let mut ran = allinone::ran_session(&cfg, ran_cfg, t, None).await.unwrap();
    ran.attach().await.unwrap();
    assert_eq!(ran.attached_ues().len(), 4, "{:?}", ran.report().failures);
    let released = ran.phase(Phase::Release).await.unwrap();
    assert_eq!((released.succeeded, released.failed), (4, 0), "{:?}", ran.report().failures);
    ran.settle_idle().await.unwrap();

    // UE u camps on eNB u % 2: UEs 0 and 2 leave TA 1 for TA 2.
    for ue in 0..4 {
        let to = 1 - ran.locate(ue);
        let want = if to == 1 { Reselection::TauStarted } else { Reselection::InTaiList };
        assert_eq!(ran.reselect(ue, to).unwrap(), want, "UE {ue}");
        assert_eq!(ran.locate(ue), to);
    }
    let end = Instant::now() + LIMIT;
    let taus =
        |ran: &mobicore_ran::Ran| ran.report().unsolicited.get("tau").map_or((0, 0), |p| (p.succeeded, p.failed));
    while taus(&ran).0 + taus(&ran).1 < 2 && Instant::now() < end {
        ran.serve_until(tokio::time::sleep(Duration::from_millis(20))).await.unwrap();
    }
    assert_eq!(taus(&ran), (2, 0), "{:?}", ran.report().failures);
    ran.settle_idle().await.unwrap();
    assert_eq!(mme_counter(&counters, "tau_request"), 2, "only the UEs that left their TAI list");
    assert_eq!(mme_counter(&counters, "tau_complete"), 2, "each got a new GUTI");

    // Every UE back by a UE-triggered service request through its new eNB.
    let back = ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((back.succeeded, back.failed), (4, 0), "{:?}", ran.report().failures);
    assert_eq!(mme_counter(&counters, "attach_complete"), 4, "no new attach");

    let report = ran.finish().await.unwrap();
    assert_eq!((report.detached, report.detach_failed), (4, 0), "{:?}", report.failures);
    assert_eq!(report.send_errors, 0);
    core.stop().await.unwrap();
}
