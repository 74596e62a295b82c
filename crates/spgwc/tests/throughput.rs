//! Throughput measurements (ignored by default; no timing assertions):
//! `cargo test -p mobicore-spgwc --release --test throughput -- --ignored --nocapture`

use mobicore_common::s11::*;
use mobicore_common::{Ebi, Teid};
use mobicore_gtp::message::{CauseOnlyResponse, GtpMessage, Message};
use mobicore_gtp::{s11_client_bound, S11ClientConfig};
use mobicore_spgwc::{SpgwcConfig, UpfPeerConfig};
use mobicore_upf::UpfConfig;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

mod support;

async fn blast(
    r: &mobicore_common::requester::Requester<S11Request, S11Response>,
    n: u32,
    window: usize,
    mk: impl Fn(u32) -> S11Request,
) -> (u32, Duration) {
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    let mut ok = 0;
    for i in 0..n {
        if set.len() >= window {
            if let Some(Ok(true)) = set.join_next().await {
                ok += 1;
            }
        }
        let r = r.clone();
        let req = mk(i);
        set.spawn(async move { r.request(req).await.is_ok() });
    }
    while let Some(x) = set.join_next().await {
        if matches!(x, Ok(true)) {
            ok += 1;
        }
    }
    (ok, t0.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn s11_client_requests_per_second() {
    // A minimal responder: answers every request with a Delete Session Response.
    let sock = mobicore_gtp::udp::bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
    let peer = sock.local_addr().unwrap();
    // The reply is prebuilt; only the 24-bit sequence number is copied in.
    let template =
        GtpMessage { teid: Some(1), seq: 0, body: Message::DeleteSessionResponse(CauseOnlyResponse::new(16)) }
            .to_bytes();
    tokio::spawn(async move {
        let mut b = vec![0u8; 4096];
        let mut r = template.clone();
        loop {
            let (n, from) = sock.recv_from(&mut b).await.unwrap();
            if n >= 12 {
                r[8..11].copy_from_slice(&b[8..11]);
                let _ = sock.send_to(&r, from).await;
            }
        }
    });
    let c = s11_client_bound(S11ClientConfig { peer, ..S11ClientConfig::default() }).await.unwrap();
    let n = 200_000;
    let (ok, d) = blast(&c.requester, n, 4096, |i| {
        S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: Teid(i), linked_ebi: Ebi(5) })
    })
    .await;
    println!("S11 client: {ok}/{n} answered in {d:?}: {:.0} requests/s", ok as f64 / d.as_secs_f64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn spgwc_and_upf_sessions_per_second() {
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let upf = mobicore_upf::Upf::bind(UpfConfig { pfcp: "127.0.0.1:0".parse().unwrap(), ..UpfConfig::default() })
        .await
        .unwrap();
    let upf_addr = upf.pfcp_addr();
    let plane = upf.plane();
    tokio::spawn(upf.run(rx.clone()));
    let gw = mobicore_spgwc::bind(SpgwcConfig {
        s11: "127.0.0.1:0".parse().unwrap(),
        pfcp: "127.0.0.1:0".parse().unwrap(),
        upfs: vec![UpfPeerConfig { pfcp: upf_addr, ..UpfPeerConfig::default() }],
        t1: Duration::from_millis(500),
        ..SpgwcConfig::default()
    })
    .await
    .unwrap();
    let s11 = gw.s11_addr;
    tokio::spawn(gw.run(rx.clone()));
    let c = s11_client_bound(S11ClientConfig { peer: s11, ..S11ClientConfig::default() }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = 50_000;
    let (ok, d) =
        blast(&c.requester, n, 2048, |i| S11Request::CreateSession(support::csr(i, Ipv4Addr::LOCALHOST))).await;
    println!(
        "S/P-GW-C + UPF: {ok}/{n} sessions created in {d:?}: {:.0} sessions/s; UPF holds {}",
        ok as f64 / d.as_secs_f64(),
        plane.len()
    );
}
