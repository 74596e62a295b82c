//! A controller restart with a relocation in force at an anchor the
//! controller started on demand (issue 11: "a restarted controller keeps
//! every relocation in force"). The anchors are real `mobicore upf` and
//! `mobicore spgwc` processes on loopback (PFCP-only data path, so no
//! root): the original one started by the test, the edge one by the
//! controller. Stopping the controller stops the edge processes; the
//! restarted controller starts them again, replays the moved UE into them
//! and serves the relocation as before (a later Modify Bearer reaches the
//! new replica; moving back deletes it).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use mobicore::bench_relocation::{attach_all, check_modify_bearer};
use mobicore_controller::site::{self, http, SiteConfig};
use mobicore_controller::ControllerConfig;
use mobicore_store::StoreConfig;
use tokio::sync::watch;

const TOKEN: &str = "t0ken";
/// Long enough for a loaded CI machine, short enough to notice a hang.
const WAIT: Duration = Duration::from_secs(60);

fn site_config(name: &str, loopback: Ipv4Addr, pool: Ipv4Addr) -> SiteConfig {
    SiteConfig {
        name: name.into(),
        program: Some(Path::new(env!("CARGO_BIN_EXE_mobicore")).to_path_buf()),
        loopback,
        datapath: "none".into(),
        s1u_addr: Ipv4Addr::from(u32::from(loopback) + 2),
        ue_pool: pool,
        ue_pool_prefix: 16,
        ready_timeout_ms: 60_000,
        ..SiteConfig::default()
    }
}

fn controller(store: &StoreConfig, sgw: SocketAddr) -> ControllerConfig {
    ControllerConfig {
        s11: "127.78.9.1:2123".parse().unwrap(),
        sgw,
        anchor_bind: "127.78.9.1:0".parse().unwrap(),
        rest: "127.0.0.1:0".parse().unwrap(),
        token: Some(TOKEN.into()),
        store: store.clone(),
        sites: vec![site_config("edge1", Ipv4Addr::new(127, 78, 1, 1), Ipv4Addr::new(10, 60, 0, 0))],
        ..ControllerConfig::default()
    }
}

async fn get(rest: SocketAddr, path: &str) -> serde_json::Value {
    let (s, b) = http(rest, "GET", path, None, "").await.unwrap();
    assert_eq!(s, 200, "{path}: {b}");
    serde_json::from_str(&b).unwrap()
}

/// The relocation once it is active again with a replica, or a failure.
async fn active_again(rest: SocketAddr, id: u64) -> serde_json::Value {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let r = get(rest, &format!("/v1/relocations/{id}")).await;
        if r["state"] == "active" && r["sessions"][0]["replica"].is_object() {
            return r;
        }
        assert!(r["state"].get("failed").is_none(), "{r}");
        assert!(tokio::time::Instant::now() < end, "not active again: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_starts_its_edge_anchor_again_and_keeps_the_relocation() {
    let dir = std::env::temp_dir().join(format!("mobicore-sites-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = StoreConfig { path: Some(dir.join("controller.log")), ..StoreConfig::default() };
    let origin = site::launch(&site_config("origin", Ipv4Addr::new(127, 78, 0, 1), Ipv4Addr::new(10, 44, 0, 0)))
        .await
        .expect("the original anchor's processes");

    let c = mobicore_controller::bind(controller(&store, origin.anchor.s11)).await.unwrap();
    let (relay, rest) = (c.s11_addr, c.rest_addr);
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(c.run(stop_rx));
    let imsis = attach_all(relay, 3).await.unwrap();
    let body = format!(r#"{{"ue":"{}","anchor":"edge1"}}"#, imsis[1]);
    let (s, b) = http(rest, "POST", "/v1/relocations", Some(TOKEN), &body).await.unwrap();
    assert_eq!(s, 201, "{b}");
    let first: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(first["state"], "active");
    let id = first["id"].as_u64().unwrap();
    let own = first["sessions"][0]["ue_ipv4"].clone();
    assert_eq!(first["sessions"][0]["replica"]["ue_ipv4"], own, "the replica keeps the UE's address");
    let metrics = site::http_get(rest, "/metrics").await.unwrap();
    assert!(metrics.contains("mobicore_controller_sites_started 1"), "{metrics}");

    // Stop: the edge anchor's processes end with the controller.
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    let edge_s11: SocketAddr = "127.78.1.1:2123".parse().unwrap();
    assert!(site::http_get("127.78.1.1:9101".parse().unwrap(), "/metrics").await.is_err(), "edge1 stopped");

    // Restart on the same store: edge1 starts again, the UE is replayed
    // into it, the relocation is active again with a new replica.
    let c = mobicore_controller::bind(controller(&store, origin.anchor.s11)).await.unwrap();
    let rest = c.rest_addr;
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(c.run(stop_rx));
    let again = active_again(rest, id).await;
    assert_eq!(again["imsi"], first["imsi"]);
    assert_eq!(again["sessions"][0]["replica"]["ue_ipv4"], own, "the same address at the new replica");
    let metrics = site::http_get(rest, "/metrics").await.unwrap();
    assert!(metrics.contains("mobicore_controller_relocations_reestablished 1"), "{metrics}");
    assert!(metrics.contains("mobicore_controller_sites_started 1"), "{metrics}");
    // The new replica serves the UE: a Modify Bearer on its own S11 TEID.
    let teid = again["sessions"][0]["replica"]["sgw_s11_teid"].as_u64().unwrap() as u32;
    check_modify_bearer(edge_s11, 1, teid).await.unwrap();
    // A second relocation of the same UE to the same site is refused.
    let (s, b) = http(rest, "POST", "/v1/relocations", Some(TOKEN), &body).await.unwrap();
    assert_eq!(s, 409, "{b}");
    // Moving back works as before the restart.
    let (s, b) = http(rest, "DELETE", &format!("/v1/relocations/{id}"), Some(TOKEN), "").await.unwrap();
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("reverted"), "{b}");

    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    origin.stop().await;
    assert!(site::http_get("127.78.1.1:9101".parse().unwrap(), "/metrics").await.is_err(), "edge1 stopped");
    std::fs::remove_dir_all(&dir).unwrap();
}
