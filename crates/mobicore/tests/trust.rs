//! Trust boundaries end to end, over real sockets and namespaces: an
//! impostor eNB attaching with a registered UE's IMSI fails authentication
//! and the registered UE keeps working (its traffic flows through the
//! UPF, its detach succeeds). Needs root (raw IP for SCTP, namespaces);
//! without it the test says so and passes.

use bytes::Bytes;
use mobicore::allinone;
use mobicore::config::Config;
use mobicore::demo::{run_traffic, TrafficPlan};
use mobicore_common::sctp_api::{SctpCommand, SctpEvent, PPID_S1AP};
use mobicore_hss::SubscriberStore;
use mobicore_ran::enb::s1ap_build::{s1_setup_request, CellIdentity};
use mobicore_sctp::Transport;
use oxirush_s1ap::s1ap::S1AP_PDU;
use std::time::Duration;

fn is_root() -> bool {
    unsafe { libc_geteuid() == 0 }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_attach_with_a_registered_imsi_leaves_the_ue_working() {
    if !is_root() {
        eprintln!("skipped: needs root (raw IP for SCTP, network namespaces)");
        return;
    }
    let mut cfg = Config::default();
    cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
    let t = Transport::RawIp;
    let _ = mobicore_netns::cleanup_stale("mt");
    let topo = mobicore_netns::Topology::create(&mobicore_netns::unique_tag("mt")).unwrap();
    let mut ran = cfg.ran.core.clone();
    ran.ues = 1;
    ran.enbs = 1;
    ran.detach = true;
    ran.s1u_addr = topo.addr.ran_s1u;
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran.plan, 1).unwrap();
    let core = allinone::start_with(&cfg, store, t, Some(&topo)).await.unwrap();
    ran.mme = core.s1ap;

    // Another eNB with a UE that claims the same IMSI but holds another key.
    let mut impostor = ran.clone();
    impostor.first_enb_id = 77;
    impostor.detach = false;
    impostor.plan.k = [0x5a; 16];
    impostor.s1u_addr = std::net::Ipv4Addr::LOCALHOST;
    let (report, (fake, traffic)) = allinone::run_ran_workload_with(&cfg, ran, t, None, |ues| {
        let (cfg, topo) = (&cfg, &topo);
        async move {
            let fake = allinone::run_ran_workload(cfg, impostor, t, None).await;
            let traffic = run_traffic(TrafficPlan { topo, ues: 1, edge: None }, ues).await;
            (fake, traffic)
        }
    })
    .await
    .unwrap();
    let counter =
        |name: &'static str| core.counters.iter().filter(|(n, _)| *n == "mme").map(|(_, c)| c.value(name)).sum::<u64>();
    let replaced = counter("ue_context_replaced");
    // The SCTP endpoint's counters are the MME's (exported with them).
    assert!(counter("sctp_rx_packets") > 0, "SCTP counters are among the MME's");
    // The impostor's USIM refuses the network's AUTN (another K): the MME
    // sees a MAC failure and rejects it.
    let refused = counter("authentication_mac_failure") + counter("authentication_reject");
    core.stop().await.unwrap();
    drop(topo);

    let fake = fake.unwrap();
    assert_eq!((fake.attached, fake.failed), (0, 1), "the impostor must not attach: {:?}", fake.failures);
    assert_eq!(replaced, 0, "no context was replaced");
    assert!(refused >= 1, "the impostor reached authentication and failed it");
    let traffic = traffic.unwrap();
    assert!(traffic.errors.is_empty(), "{:?}", traffic.errors);
    assert!(traffic.icmp.received > 0, "{:?}", traffic.icmp);
    assert_eq!(traffic.tcp_uplink.completed, traffic.tcp_uplink.started);
    assert_eq!(report.attached, 1);
    assert_eq!(report.detached, 1, "the registered UE's detach succeeds: {:?}", report.failures);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s1_setup_with_a_global_enb_id_in_use_fails_and_the_live_enb_keeps_its_ues() {
    if !is_root() {
        eprintln!("skipped: needs root (raw IP for SCTP)");
        return;
    }
    let mut cfg = Config::default();
    cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
    let t = Transport::RawIp;
    let mut ran = cfg.ran.core.clone();
    ran.ues = 20;
    ran.enbs = 1;
    ran.detach = true;
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran.plan, ran.ues).unwrap();
    let core = allinone::start(&cfg, store, t).await.unwrap();
    ran.mme = core.s1ap;
    let (plmn, enb_id, tac) = (ran.plmn, ran.first_enb_id, ran.tac);
    // While the RAN's eNB has its UEs attached, another association claims its Global eNB ID.
    let (report, setup_outcome) = allinone::run_ran_workload_with(&cfg, ran, t, None, |_| {
        let cfg = &cfg;
        async move {
            let mut rogue = allinone::sctp_endpoint(cfg, "127.0.0.1:0".parse().unwrap(), t, 0).await.unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel();
            rogue.commands.send(SctpCommand::Connect { remote: core.s1ap, reply: tx }).await.unwrap();
            let assoc = rx.await.unwrap().unwrap();
            let setup = s1_setup_request(&CellIdentity::new(plmn, enb_id, tac).unwrap(), "impostor").unwrap();
            let send = SctpCommand::Send { assoc, stream: 0, ppid: PPID_S1AP, data: Bytes::from(setup) };
            rogue.commands.send(send).await.unwrap();
            let outcome = loop {
                let ev = tokio::time::timeout(Duration::from_secs(30), rogue.events.recv())
                    .await
                    .expect("an answer to the S1 Setup")
                    .expect("endpoint");
                if let SctpEvent::Data { data, .. } = ev {
                    break format!("{}", S1AP_PDU::decode(&data).expect("valid S1AP"));
                }
            };
            let _ = rogue.commands.send(SctpCommand::Abort { assoc }).await;
            outcome
        }
    })
    .await
    .unwrap();
    let duplicates = core
        .counters
        .iter()
        .filter(|(n, _)| *n == "mme")
        .map(|(_, c)| c.value("s1_setup_duplicate_global_enb_id"))
        .sum::<u64>();
    core.stop().await.unwrap();
    assert!(setup_outcome.starts_with("S1SetupFailure"), "TS 36.413 8.7.3.3: {setup_outcome}");
    assert_eq!(duplicates, 1);
    assert_eq!(report.attached, 20);
    assert_eq!(report.detached, 20, "the live eNB's UEs still detach: {:?}", report.failures);
}
