//! The MME's admin endpoint over real sockets on loopback: a whole core in
//! this process (HSS, S/P-GW-C, UPF without a data path, MME over
//! UDP-encapsulated SCTP, so no root is needed) with emulated eNBs and
//! UEs; attached UEs are detached by the network through `POST
//! /v1/ues/{imsi}/detach` (and `mobicore detach`), the UEs see the
//! network's DETACH REQUEST, and bad requests get their status.

use mobicore::allinone;
use mobicore::config::Config;
use mobicore_common::counters::Counters;
use mobicore_controller::site::http;
use mobicore_hss::SubscriberStore;
use mobicore_sctp::Transport;
use std::net::SocketAddr;
use std::time::Duration;

const TOKEN: &str = "admin-test-token";

/// The sum of the MME's counter `name`.
fn mme_counter(counters: &[(&'static str, Counters)], name: &'static str) -> u64 {
    counters.iter().filter(|(n, _)| *n == "mme").map(|(_, c)| c.value(name)).sum()
}

/// Wait until the MME's counter `name` reaches `want` (the whole test is
/// bounded by the caller's timeout).
async fn until(counters: &[(&'static str, Counters)], name: &'static str, want: u64) {
    while mme_counter(counters, name) < want {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_ue_is_detached_through_the_admin_endpoint() {
    let mut cfg = Config::default();
    // Ports of its own, so that other tests (and an MME on this host) are
    // no obstacle; below the ephemeral range (32768-60999 by default), so
    // that no socket of another process can be holding it by chance.
    let udp = 20_000 + (std::process::id() % 12_000) as u16;
    cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
    cfg.mme.admin = Some("127.0.0.1:0".parse().unwrap());
    cfg.mme.admin_token = Some(TOKEN.into());
    let t = Transport::Udp { port: udp };
    let mut ran = cfg.ran.core.clone();
    ran.ues = 2;
    ran.enbs = 1;
    ran.detach = false;
    let imsi = |i: u64| mobicore_ran::imsi_for(i, &ran.plan).to_string();
    let (imsi0, imsi1) = (imsi(0), imsi(1));
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran.plan, 2).unwrap();
    let core = allinone::start(&cfg, store, t).await.unwrap();
    ran.mme = core.s1ap;
    let admin = core.mme_admin.expect("the admin endpoint runs");
    let counters = core.counters.clone();

    let scenario = allinone::run_ran_workload_with(&cfg, ran, t, None, |ues| {
        let counters = &counters;
        let (imsi0, imsi1) = (&imsi0, &imsi1);
        async move {
            assert_eq!(ues.len(), 2, "both UEs attached");
            // The UEs sent ATTACH COMPLETE; the MME may not have read it yet.
            until(counters, "attach_complete", 2).await;
            let post = |imsi: &str, token: Option<&'static str>, body: &'static str| {
                let path = format!("/v1/ues/{imsi}/detach");
                async move { http(admin, "POST", &path, token, body).await.unwrap() }
            };
            // Bad requests first: nothing changes.
            assert_eq!(post(imsi0, None, "{}").await.0, 401);
            assert_eq!(post(imsi0, Some("wrong"), "{}").await.0, 401);
            assert_eq!(post("0010x", Some(TOKEN), "{}").await.0, 400);
            assert_eq!(post(imsi0, Some(TOKEN), "{\"reattachRequired\": \"yes\"}").await.0, 400);
            assert_eq!(post(imsi0, Some(TOKEN), "not json").await.0, 400);
            assert_eq!(post("001019999999999", Some(TOKEN), "{}").await.0, 404, "no such UE");
            let big = Box::leak(format!("{{\"reattachRequired\":true{}}}", " ".repeat(4096)).into_boxed_str());
            assert_eq!(post(imsi0, Some(TOKEN), big).await.0, 413);
            assert_eq!(mme_counter(counters, "network_detach"), 0);

            // UE 0: detached, no re-attach.
            let (status, body) = post(imsi0, Some(TOKEN), "{\"reattachRequired\": false}").await;
            assert_eq!(status, 202, "{body}");
            assert!(body.contains("\"state\":\"detach-requested\""), "{body}");
            until(counters, "network_detach_accepted", 1).await;
            // Its PDN connection deleted, its S1 connection released, its
            // context is gone: a second detach finds no UE.
            until(counters, "ue_context_release_complete", 1).await;
            assert_eq!(post(imsi0, Some(TOKEN), "{}").await.0, 404);

            // UE 1, through the CLI: detached, and it attaches again.
            let attaches = mme_counter(counters, "attach_complete");
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mobicore"))
                .args(["detach", "--admin", &admin.to_string(), "--token", TOKEN, imsi1, "--reattach"])
                .output()
                .await
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            assert!(String::from_utf8_lossy(&out.stdout).contains(imsi1.as_str()));
            until(counters, "network_detach_accepted", 2).await;
            until(counters, "attach_complete", attaches + 1).await;
            // A refused request is an error of the CLI, with the answer.
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mobicore"))
                .args(["detach", "--admin", &admin.to_string(), "--token", "wrong", imsi1])
                .output()
                .await
                .unwrap();
            assert!(!out.status.success());
            assert!(String::from_utf8_lossy(&out.stderr).contains("401"), "{}", String::from_utf8_lossy(&out.stderr));
        }
    });
    let (report, ()) = tokio::time::timeout(Duration::from_secs(60), scenario).await.expect("in time").unwrap();
    let stats = (
        mme_counter(&counters, "network_detach"),
        mme_counter(&counters, "admin_detach_started"),
        mme_counter(&counters, "admin_unauthorized"),
        mme_counter(&counters, "admin_bad_request"),
    );
    core.stop().await.unwrap();
    // The UEs saw the network's DETACH REQUEST: type 2 "re-attach not
    // required", type 1 "re-attach required" (TS 24.301 9.9.3.7).
    assert_eq!(report.anomalies.get("network detach (type 2)"), Some(&1), "{:?}", report.anomalies);
    assert_eq!(report.anomalies.get("network detach (type 1)"), Some(&1), "{:?}", report.anomalies);
    assert_eq!(report.attached, 2);
    assert_eq!(stats, (2, 2, 3, 4), "network detaches, started, unauthorized, bad requests");
}

#[tokio::test]
async fn no_admin_endpoint_unless_configured() {
    let cfg = Config::default();
    assert_eq!((cfg.mme.admin, cfg.mme.admin_token.as_deref()), (None, None));
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mobicore"))
        .args(["detach", "--admin", &SocketAddr::from(([127, 0, 0, 1], 9)).to_string(), "001010000000001"])
        .env_remove("MOBICORE_ADMIN_TOKEN")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no token"));
}
