//! The S6a client against a scripted peer on loopback: CER/CEA, a request
//! the peer never answers (Timeout), DWR from the peer answered, and the
//! connection dropping (Down).

use mobicore_common::requester::TransportError;
use mobicore_common::s6a::*;
use mobicore_diameter::base::{self, LocalIdentity};
use mobicore_diameter::dict::cmd;
use mobicore_diameter::framing::FrameDecoder;
use mobicore_diameter::{connect_s6a, Message, S6aClientConfig};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn next(s: &mut TcpStream, d: &mut FrameDecoder) -> Option<Message> {
    loop {
        if let Some(f) = d.next_frame().unwrap() {
            return Some(Message::parse(&f).unwrap());
        }
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        d.push(&buf[..n]);
    }
}

#[tokio::test]
async fn timeout_watchdog_answer_and_down() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut cfg = S6aClientConfig::new("mme.mobicore.local", "mobicore.local");
    cfg.peer = l.local_addr().unwrap();
    cfg.request_timeout = Duration::from_millis(300);
    cfg.reconnect_max_backoff = None;
    let hss = LocalIdentity::new("hss.mobicore.local", "mobicore.local");
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut d = FrameDecoder::default();
        let cer = next(&mut s, &mut d).await.unwrap();
        assert_eq!(cer.header.command_code, cmd::CAPABILITIES_EXCHANGE);
        s.write_all(&base::cea(&hss, &cer.header, 2001).to_vec()).await.unwrap();
        // The AIR: not answered. Then a DWR of ours, which must be answered.
        let air = next(&mut s, &mut d).await.unwrap();
        assert_eq!(air.header.command_code, cmd::AUTHENTICATION_INFORMATION);
        s.write_all(&base::dwr(&hss, 99, 99).to_vec()).await.unwrap();
        let dwa = next(&mut s, &mut d).await.unwrap();
        assert_eq!(
            (dwa.header.command_code, dwa.header.hop_by_hop, dwa.header.request),
            (cmd::DEVICE_WATCHDOG, 99, false)
        );
        seen_tx.send(()).unwrap();
        // A second request arrives; drop the connection instead of answering.
        let _ = next(&mut s, &mut d).await.unwrap();
        drop(s);
    });
    let s6a = connect_s6a(cfg).await.unwrap();
    let air = S6aRequest::AuthenticationInformation(AuthInfoRequest {
        imsi: "001010000000001".parse().unwrap(),
        visited_plmn: "00101".parse().unwrap(),
        num_vectors: 1,
        resync: None,
    });
    assert_eq!(s6a.request(air.clone()).await, Err(TransportError::Timeout));
    seen_rx.await.unwrap();
    let r = s6a.request(air.clone()).await;
    assert!(matches!(r, Err(TransportError::Down(_))), "{r:?}");
    server.await.unwrap();
    // Without reconnection the task stops: the handle reports Closed.
    assert_eq!(s6a.request(air).await, Err(TransportError::Closed));
}

#[tokio::test]
async fn refused_cea_fails_connect() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = S6aClientConfig { peer: l.local_addr().unwrap(), ..Default::default() };
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut d = FrameDecoder::default();
        let cer = next(&mut s, &mut d).await.unwrap();
        let hss = LocalIdentity::new("hss", "r");
        s.write_all(&base::cea(&hss, &cer.header, 5010).to_vec()).await.unwrap();
        let _ = next(&mut s, &mut d).await;
    });
    assert!(connect_s6a(cfg).await.is_err());
}
