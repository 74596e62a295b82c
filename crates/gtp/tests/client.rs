//! The S11 client task against fake SGWs on 127.0.0.1.

use mobicore_common::requester::TransportError;
use mobicore_common::s11::*;
use mobicore_common::{Ebi, Teid};
use mobicore_gtp::message::{Echo, GtpMessage, Message};
use mobicore_gtp::s11::{decode_request, encode_response};
use mobicore_gtp::{s11_client_bound, S11ClientConfig};
use std::time::Duration;
use tokio::net::UdpSocket;

async fn fake_sgw(drop_first: usize) -> std::net::SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    tokio::spawn(async move {
        let mut b = vec![0u8; 4096];
        let mut seen = 0;
        loop {
            let (n, from) = sock.recv_from(&mut b).await.unwrap();
            seen += 1;
            if seen <= drop_first {
                continue;
            }
            let m = GtpMessage::parse(&b[..n]).unwrap();
            let resp = match decode_request(&m).unwrap() {
                S11Request::DeleteSession(r) => {
                    S11Response::DeleteSession(GtpCause(if r.sgw_teid.0 % 2 == 0 { 16 } else { 64 }))
                }
                S11Request::ReleaseAccessBearers(_) => S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED),
                other => panic!("unexpected {other:?}"),
            };
            sock.send_to(&encode_response(&resp, 1, m.seq, None).to_bytes(), from).await.unwrap();
        }
    });
    addr
}

fn cfg(peer: std::net::SocketAddr) -> S11ClientConfig {
    S11ClientConfig { local: "127.0.0.1:0".parse().unwrap(), peer, t3: Duration::from_millis(100), n3: 3 }
}

#[tokio::test]
async fn many_requests_in_flight_are_matched_by_sequence_number() {
    let c = s11_client_bound(cfg(fake_sgw(0).await)).await.unwrap();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..500u32 {
        let r = c.requester.clone();
        set.spawn(async move {
            let got = r
                .request(S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: Teid(i), linked_ebi: Ebi(5) }))
                .await
                .unwrap();
            assert_eq!(got, S11Response::DeleteSession(GtpCause(if i % 2 == 0 { 16 } else { 64 })));
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}

#[tokio::test]
async fn lost_request_is_retransmitted() {
    let c = s11_client_bound(cfg(fake_sgw(2).await)).await.unwrap();
    let r =
        c.requester.request(S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid: Teid(2) })).await;
    assert_eq!(r, Ok(S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED)));
}

#[tokio::test]
async fn silent_peer_times_out_after_n3() {
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let c = s11_client_bound(cfg(silent.local_addr().unwrap())).await.unwrap();
    let r =
        c.requester.request(S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid: Teid(2) })).await;
    assert_eq!(r, Err(TransportError::Timeout));
    // The original and N3 = 3 retransmissions reached the peer.
    let mut b = [0u8; 512];
    let mut n = 0;
    while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(50), silent.recv_from(&mut b)).await {
        n += 1;
    }
    assert_eq!(n, 4);
    assert_eq!(c.counters.value("s11_timeout"), 1);
}

#[tokio::test]
async fn echo_request_is_answered_and_garbage_counted() {
    let c = s11_client_bound(cfg(fake_sgw(0).await)).await.unwrap();
    let peer = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    peer.send_to(&[0x48, 1, 2], c.local_addr()).await.unwrap();
    let echo = GtpMessage { teid: None, seq: 0x42, body: Message::EchoRequest(Echo { recovery: 3 }) };
    peer.send_to(&echo.to_bytes(), c.local_addr()).await.unwrap();
    let mut b = [0u8; 512];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), peer.recv_from(&mut b)).await.unwrap().unwrap();
    let r = GtpMessage::parse(&b[..n]).unwrap();
    assert_eq!(r.seq, 0x42);
    assert!(matches!(r.body, Message::EchoResponse(Echo { .. })));
    assert_eq!(c.counters.value("gtp_malformed"), 1);
}
