//! The controller as a process would run it, on loopback sockets: the
//! relay between an MME's S11 socket and a real S/P-GW-C (with a real UPF
//! PFCP node), relocation into a second real S/P-GW-C over REST, the REST
//! API's answers to bad input, and a restart that keeps every relocation,
//! with the embedded store and with a real redis-server.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use mobicore_common::s11::{CreateSessionRequest, ModifyBearerRequest, S11Request};
use mobicore_common::{Ebi, Fteid, Teid};
use mobicore_controller::{Anchor, ControllerConfig};
use mobicore_gtp::s11::encode_request;
use mobicore_gtp::{GtpMessage, Message};
use mobicore_spgwc::{ApnConfig, SpgwcConfig, UpfPeerConfig};
use mobicore_store::redis_server::RedisServer;
use mobicore_store::{StoreConfig, StoreKind};
use tokio::net::UdpSocket;
use tokio::sync::watch;

const TOKEN: &str = "s3cret";
/// Long enough for a loaded CI machine, short enough to notice a hang.
const WAIT: Duration = Duration::from_secs(10);

fn lo(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// An S/P-GW-C with its UPF (no data path), S11 on `s11`; returns its S11
/// address.
async fn anchor(s11: SocketAddr, pool: Ipv4Addr, stop: &watch::Receiver<bool>) -> SocketAddr {
    let upf = mobicore_upf::Upf::bind(mobicore_upf::UpfConfig { pfcp: lo(0), ..Default::default() }).await.unwrap();
    let upf_addr = upf.pfcp_addr();
    tokio::spawn(upf.run(stop.clone()));
    let mut cfg = SpgwcConfig { s11, pfcp: lo(0), ..SpgwcConfig::default() };
    cfg.upfs = vec![UpfPeerConfig { pfcp: upf_addr, s1u_addr: Ipv4Addr::LOCALHOST, ..UpfPeerConfig::default() }];
    for apn in &mut cfg.apns {
        *apn = ApnConfig { pool: Some(pool), ..apn.clone() };
    }
    let gw = mobicore_spgwc::bind(cfg).await.unwrap();
    let (s11, counters) = (gw.s11_addr, gw.counters.clone());
    tokio::spawn(gw.run(stop.clone()));
    // Serving only once associated with its UPF: a replay before that
    // would be refused (No resources available) on a busy host.
    let end = tokio::time::Instant::now() + WAIT;
    while counters.value("pfcp_associations_set_up") == 0 {
        assert!(tokio::time::Instant::now() < end, "the anchor's S/P-GW-C never associated with its UPF");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    s11
}

fn csr(i: u32) -> S11Request {
    let imsi = format!("0010100000{i:05}").parse().unwrap();
    S11Request::CreateSession(CreateSessionRequest::attach(
        imsi,
        Fteid { teid: Teid(0x9000 + i), ipv4: Ipv4Addr::LOCALHOST },
    ))
}

/// What an MME does: send a request, wait for its answer (retrying while
/// the S/P-GW-C is not associated with its UPF yet).
async fn exchange(mme: &UdpSocket, relay: SocketAddr, req: &S11Request, seq: u32) -> GtpMessage {
    let bytes = encode_request(req, seq).to_bytes();
    let mut buf = vec![0u8; 4096];
    for _ in 0..50 {
        mme.send_to(&bytes, relay).await.unwrap();
        let Ok(Ok((n, _))) = tokio::time::timeout(WAIT, mme.recv_from(&mut buf)).await else { panic!("no answer") };
        let m = GtpMessage::parse(&buf[..n]).unwrap();
        assert_eq!(m.seq, seq, "the same sequence number comes back");
        let cause = match &m.body {
            Message::CreateSessionResponse(r) => r.cause.value,
            Message::ModifyBearerResponse(r) => r.cause.value,
            _ => 16,
        };
        if cause == 16 {
            return m;
        }
        // Not associated yet (no UPF): the condition clears within seconds.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the S/P-GW-C never accepted the request");
}

/// Attaches UE `i` through the relay: Create Session, then Modify Bearer.
async fn attach(mme: &UdpSocket, relay: SocketAddr, i: u32) -> Ipv4Addr {
    let r = exchange(mme, relay, &csr(i), 2 * i + 1).await;
    let Message::CreateSessionResponse(r) = r.body else { panic!("not a Create Session Response") };
    let sgw = r.sender_fteid.unwrap().teid;
    let mbr = S11Request::ModifyBearer(ModifyBearerRequest {
        sgw_teid: Teid(sgw),
        ebi: Ebi(5),
        s1u_enb_fteid: Fteid { teid: Teid(0x7000 + i), ipv4: Ipv4Addr::new(10, 0, 1, 1) },
    });
    exchange(mme, relay, &mbr, 2 * i + 2).await;
    r.paa.unwrap().ipv4.unwrap()
}

/// One HTTP/1.1 request; returns (status, body).
async fn http(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    mobicore_controller::site::http(addr, method, path, token, body).await.unwrap()
}

/// Addresses of one test: GTP-C on port 2123 (so that tshark dissects it)
/// at 127.0.`net`.1 (relay), .2 (original S/P-GW-C), .3 (edge).
fn at(net: u8, host: u8, port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::new(127, 0, net, host), port))
}

fn controller_cfg(net: u8, sgw: SocketAddr, edge: SocketAddr, store: StoreConfig) -> ControllerConfig {
    ControllerConfig {
        s11: at(net, 1, 2123),
        sgw,
        anchor_bind: at(net, 1, 0),
        rest: lo(0),
        token: Some(TOKEN.into()),
        store,
        anchors: vec![Anchor { name: "edge1".into(), s11: edge }],
        ..ControllerConfig::default()
    }
}

async fn relocate_restart_keep(net: u8, store: StoreConfig) {
    let (stop, stop_rx) = watch::channel(false);
    let capture = mobicore_common::tools::LoCapture::start(
        &format!("controller-{net}"),
        &format!("udp port 2123 and net 127.0.{net}.0/24"),
    );
    let sgw = anchor(at(net, 2, 2123), Ipv4Addr::new(10, 44, 0, 0), &stop_rx).await;
    let edge = anchor(at(net, 3, 2123), Ipv4Addr::new(10, 60, 0, 0), &stop_rx).await;
    let c = mobicore_controller::bind(controller_cfg(net, sgw, edge, store.clone())).await.unwrap();
    let (relay, rest) = (c.s11_addr, c.rest_addr);
    let (cstop, cstop_rx) = watch::channel(false);
    let task = tokio::spawn(c.run(cstop_rx));
    let mme = UdpSocket::bind(at(net, 4, 0)).await.unwrap();
    let mut ips = Vec::new();
    for i in 1..=3 {
        ips.push(attach(&mme, relay, i).await);
    }

    // Bad input: 4xx with a message, nothing changed.
    let ok = r#"{"ue":"001010000000002","anchor":"edge1","mode":"selective"}"#;
    assert_eq!(http(rest, "POST", "/v1/relocations", None, ok).await.0, 401, "no token");
    assert_eq!(http(rest, "POST", "/v1/relocations", Some("wrong"), ok).await.0, 401, "wrong token");
    let (s, b) = http(rest, "POST", "/v1/relocations", Some(TOKEN), "{not json").await;
    assert!((400..500).contains(&s) && b.contains("error"), "{s} {b}");
    let unknown_field = r#"{"ue":"001010000000002","anchor":"edge1","colour":"red"}"#;
    let (s, b) = http(rest, "POST", "/v1/relocations", Some(TOKEN), unknown_field).await;
    assert!((400..500).contains(&s) && b.contains("colour"), "{s} {b}");
    let big = format!(r#"{{"ue":"{}","anchor":"edge1"}}"#, "9".repeat(100_000));
    assert_eq!(http(rest, "POST", "/v1/relocations", Some(TOKEN), &big).await.0, 413, "oversized");
    let (s, b) =
        http(rest, "POST", "/v1/relocations", Some(TOKEN), r#"{"ue":"001019999999999","anchor":"edge1"}"#).await;
    assert_eq!(s, 404, "{b}");
    let (s, b) =
        http(rest, "POST", "/v1/relocations", Some(TOKEN), r#"{"ue":"001010000000002","anchor":"mars"}"#).await;
    assert_eq!(s, 404, "{b}");
    assert_eq!(http(rest, "GET", "/v1/relocations/77", None, "").await.0, 404);
    assert_eq!(http(rest, "GET", "/v1/relocations/x", None, "").await.0, 400);
    assert_eq!(http(rest, "GET", "/v1/relocations", None, "").await.1, "[]", "nothing changed");

    // The UE at 10.44.0.2 moves by its address; the answer has the timing.
    // Without keep_address the replica gives it an address of its own pool.
    let by_ip = format!(r#"{{"ue":"{}","anchor":"edge1","keep_address":false}}"#, ips[1]);
    let (s, b) = http(rest, "POST", "/v1/relocations", Some(TOKEN), &by_ip).await;
    assert_eq!(s, 201, "{b}");
    let r: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(r["state"], "active");
    assert_eq!(r["imsi"], "001010000000002");
    assert!(r["timing"]["replication_ms"].as_f64().unwrap() > 0.0);
    let replica = &r["sessions"][0]["replica"];
    assert_eq!(replica["ue_ipv4"].as_str().unwrap().split('.').take(2).collect::<Vec<_>>(), ["10", "60"]);
    let id = r["id"].as_u64().unwrap();
    let (s, b) = http(rest, "POST", "/v1/relocations", Some(TOKEN), &by_ip).await;
    assert_eq!(s, 409, "already there: {b}");

    let (_, doc) = http(rest, "GET", "/v1/openapi.json", None, "").await;
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert!(doc["paths"]["/v1/relocations"]["post"].is_object());
    let (_, metrics) = http(rest, "GET", "/metrics", None, "").await;
    assert!(metrics.contains("mobicore_controller_relay_sessions_recorded 3"), "{metrics}");
    assert!(metrics.contains("mobicore_controller_relocations_active 1"), "{metrics}");

    // MEC traffic rules (MEC 011 TrafficRule) on router mec1.
    let rules = "/v1/mec/routers/mec1/traffic-rules";
    let rule = |id: &str, prio: u8, src: &str| {
        format!(
            r#"{{"trafficRuleId":"{id}","filterType":"FLOW","priority":{prio},"trafficFilter":[{{"srcAddress":["{src}"],"protocol":["UDP"]}}],"action":"FORWARD_DECAPSULATED","dstInterface":[{{"interfaceType":"IP","dstMacAddress":"02:00:00:00:00:01","dstIpAddress":"10.210.0.2"}}],"state":"ACTIVE"}}"#
        )
    };
    assert_eq!(http(rest, "POST", rules, None, &rule("r1", 5, "10.44.0.0/16")).await.0, 401);
    let (s, b) = http(rest, "POST", rules, Some(TOKEN), &rule("r1", 5, "10.44.0.0/16")).await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = http(rest, "POST", rules, Some(TOKEN), &rule("r2", 1, "10.44.0.7")).await;
    assert_eq!(s, 201, "{b}");
    assert!(b.contains(r#""overlaps":[{"trafficRuleId":"r1","winner":"r2"}]"#), "{b}");
    let (s, b) = http(rest, "POST", rules, Some(TOKEN), &rule("r3", 5, "10.44.1.1")).await;
    assert_eq!(s, 409, "same priority as an overlapping rule: {b}");
    let (s, b) = http(rest, "POST", rules, Some(TOKEN), &rule("r4", 5, "10.44.1.300")).await;
    assert!(s == 400 && b.contains("srcAddress"), "{s} {b}");
    assert_eq!(
        http(rest, "POST", "/v1/mec/routers/nope/traffic-rules", Some(TOKEN), &rule("r5", 5, "10.1.0.0/16")).await.0,
        404
    );
    assert_eq!(http(rest, "PUT", &format!("{rules}/r9"), Some(TOKEN), &rule("r1", 5, "10.44.0.0/16")).await.0, 400);
    let (s, b) = http(rest, "PUT", &format!("{rules}/r1"), Some(TOKEN), &rule("r1", 7, "10.44.0.0/16")).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = http(rest, "DELETE", &format!("{rules}/r2"), Some(TOKEN), "").await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(http(rest, "GET", &format!("{rules}/r2"), None, "").await.0, 404);

    // Restart on the same store: the relocation is still in force.
    cstop.send(true).unwrap();
    task.await.unwrap().unwrap();
    let c = mobicore_controller::bind(controller_cfg(net, sgw, edge, store)).await.unwrap();
    let rest = c.rest_addr;
    let (cstop, cstop_rx) = watch::channel(false);
    let task = tokio::spawn(c.run(cstop_rx));
    let (s, b) = http(rest, "GET", &format!("/v1/relocations/{id}"), None, "").await;
    assert_eq!(s, 200);
    let again: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(again, r, "the relocation as it was");
    let (_, st) = http(rest, "GET", "/v1/stats", None, "").await;
    let st: serde_json::Value = serde_json::from_str(&st).unwrap();
    assert_eq!(st["sessions"], 3);
    assert_eq!(st["relocations_active"], 1);
    let (_, b) = http(rest, "GET", rules, None, "").await;
    let kept: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(kept.as_array().unwrap().len(), 1, "{b}");
    assert_eq!(kept[0]["priority"], 7, "the replaced rule survived the restart");
    // Move back after the restart: the replica is found again.
    let (s, b) = http(rest, "DELETE", &format!("/v1/relocations/{id}"), Some(TOKEN), "").await;
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("reverted"), "{b}");
    cstop.send(true).unwrap();
    task.await.unwrap().unwrap();
    stop.send(true).unwrap();
    // The relay's GTP-C and the replay into the edge, as tshark reads them.
    if let Some(c) = capture {
        let expected = ["Create Session Request", "Create Session Response", "Modify Bearer Request"];
        let text = c.check("gtpv2", &expected);
        assert!(text.contains("127.0.") && text.contains("Delete Session Request"), "the move back's delete");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relocation_over_rest_survives_a_restart_with_the_embedded_store() {
    let dir = std::env::temp_dir().join(format!("mobicore-controller-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = StoreConfig { path: Some(dir.join("controller.log")), ..StoreConfig::default() };
    relocate_restart_keep(61, store).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relocation_over_rest_survives_a_restart_with_redis() {
    let redis = RedisServer::start().expect("redis-server (scripts/bootstrap.sh installs it)");
    let store = StoreConfig { kind: StoreKind::Redis, url: Some(redis.url()), ..StoreConfig::default() };
    relocate_restart_keep(62, store).await;
}
