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
    S11ClientConfig {
        local: "127.0.0.1:0".parse().unwrap(),
        peer,
        t3: Duration::from_millis(100),
        n3: 3,
        ..Default::default()
    }
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

/// Waits (up to 10 s) until `f` holds.
async fn wait_for(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn ddn(seq: u32) -> Vec<u8> {
    use mobicore_gtp::s11::encode_incoming_request;
    let req = S11IncomingRequest::DownlinkDataNotification(DownlinkDataNotification {
        mme_teid: Teid(0x55),
        ebi: Some(Ebi(5)),
        arp: None,
    });
    let sgw = mobicore_common::Fteid { teid: Teid(0x99), ipv4: std::net::Ipv4Addr::LOCALHOST };
    encode_incoming_request(&req, Some(sgw), seq).to_bytes()
}

/// A DDN Ack that accepts, with nothing else.
fn accepted() -> DownlinkDataNotificationAck {
    DownlinkDataNotificationAck {
        cause: GtpCause::REQUEST_ACCEPTED,
        data_notification_delay_ms: None,
        dl_buffering_duration_s: None,
        dl_buffering_suggested_packets: None,
        throttling: None,
    }
}

async fn recv_msg(sock: &UdpSocket) -> GtpMessage {
    let mut b = [0u8; 1024];
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), sock.recv_from(&mut b)).await.unwrap().unwrap();
    GtpMessage::parse(&b[..n]).unwrap()
}

#[tokio::test]
async fn sgw_requests_reach_the_mme_once_and_are_answered_with_their_sequence_number() {
    use mobicore_gtp::s11::decode_incoming_answer;
    let sgw = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (mut link, c) = mobicore_gtp::s11_client_link(cfg(sgw.local_addr().unwrap())).await.unwrap();
    sgw.send_to(&ddn(7), c.local_addr()).await.unwrap();
    let inc = tokio::time::timeout(Duration::from_secs(10), link.incoming.recv()).await.unwrap().unwrap();
    assert_eq!(
        inc.request,
        S11IncomingRequest::DownlinkDataNotification(DownlinkDataNotification {
            mme_teid: Teid(0x55),
            ebi: Some(Ebi(5)),
            arp: None
        })
    );
    // A retransmission while the MME is still at it does not reach it again.
    sgw.send_to(&ddn(7), c.local_addr()).await.unwrap();
    let ack = DownlinkDataNotificationAck {
        cause: GtpCause::REQUEST_ACCEPTED,
        data_notification_delay_ms: Some(100),
        dl_buffering_duration_s: None,
        dl_buffering_suggested_packets: None,
        throttling: None,
    };
    inc.reply.send(S11IncomingAnswer::DownlinkDataNotificationAck(ack.clone())).unwrap();
    let m = recv_msg(&sgw).await;
    // Answered to the S-GW's Sender F-TEID with the request's sequence number.
    assert_eq!((m.teid, m.seq), (Some(0x99), 7));
    assert_eq!(decode_incoming_answer(&m).unwrap(), S11IncomingAnswer::DownlinkDataNotificationAck(ack.clone()));
    // A retransmission after the answer gets the same answer from the cache.
    sgw.send_to(&ddn(7), c.local_addr()).await.unwrap();
    let cc = c.counters.clone();
    wait_for("both duplicates", || {
        cc.value("s11_incoming_duplicate_answered") + cc.value("s11_incoming_duplicate_in_progress") == 2
    })
    .await;
    let m = recv_msg(&sgw).await;
    assert_eq!((m.seq, decode_incoming_answer(&m).unwrap()), (7, S11IncomingAnswer::DownlinkDataNotificationAck(ack)));
    assert!(link.incoming.try_recv().is_err(), "a retransmission reached the MME");
    assert_eq!(c.counters.value("s11_incoming_request"), 1);

    // A DDN from another address is dropped and counted.
    let other = UdpSocket::bind("127.0.0.2:0").await.unwrap();
    other.send_to(&ddn(8), c.local_addr()).await.unwrap();
    let cc = c.counters.clone();
    wait_for("the foreign DDN counted", || cc.value("s11_request_from_unknown_peer") == 1).await;
    assert!(link.incoming.try_recv().is_err(), "a foreign DDN reached the MME");

    // A Failure Indication is sent once, to the S-GW's TEID.
    let fail = S11Notification::DownlinkDataNotificationFailure(DownlinkDataNotificationFailure {
        sgw_teid: Teid(0x99),
        cause: GtpCause::UE_NOT_RESPONDING,
    });
    link.notify.send(fail.clone()).await.unwrap();
    // (The in-progress retransmission may have been read after the answer
    // and so been answered from the cache too: skip such Acks.)
    let mut m = recv_msg(&sgw).await;
    while m.body.msg_type() == 177 {
        m = recv_msg(&sgw).await;
    }
    assert_eq!(mobicore_gtp::s11::decode_notification(&m).unwrap(), fail);
}

#[tokio::test]
async fn sgw_requests_waiting_for_the_mme_are_bounded() {
    let sgw = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let cfg = S11ClientConfig { max_incoming: 1, ..cfg(sgw.local_addr().unwrap()) };
    let (mut link, c) = mobicore_gtp::s11_client_link(cfg).await.unwrap();
    sgw.send_to(&ddn(1), c.local_addr()).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), link.incoming.recv()).await.unwrap().unwrap();
    sgw.send_to(&ddn(2), c.local_addr()).await.unwrap();
    let cc = c.counters.clone();
    wait_for("the second DDN refused", || cc.value("s11_incoming_queue_full") == 1).await;
    assert!(link.incoming.try_recv().is_err());
    // Once the first is answered, the S-GW's retransmission of the second gets through.
    let ack = accepted();
    first.reply.send(S11IncomingAnswer::DownlinkDataNotificationAck(ack)).unwrap();
    assert_eq!(recv_msg(&sgw).await.seq, 1);
    sgw.send_to(&ddn(2), c.local_addr()).await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), link.incoming.recv()).await.unwrap().unwrap();
    drop(second); // the MME dropping a request is counted; nothing is sent
    let cc = c.counters.clone();
    wait_for("the dropped request counted", || cc.value("s11_incoming_unanswered") == 1).await;
}

/// An elastic MME host's client (`direct`): the Create Session goes to
/// `peer` (its front end, whose address the S-GW keeps for the session),
/// every other request straight to the S-GW, whose response ends it.
#[tokio::test]
async fn with_direct_only_create_session_goes_to_the_peer() {
    let front_end = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let via_fe = S11ClientConfig { direct: Some(fake_sgw(0).await), ..cfg(front_end.local_addr().unwrap()) };
    let c = s11_client_bound(via_fe).await.unwrap();
    let r =
        c.requester.request(S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid: Teid(2) })).await;
    assert_eq!(r, Ok(S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED)));
    let plmn = mobicore_common::Plmn::new("001", "01").unwrap();
    let csr = CreateSessionRequest {
        imsi: "001010000000001".parse().unwrap(),
        msisdn: None,
        serving_network: plmn,
        tai: mobicore_common::Tai { plmn, tac: 1 },
        ecgi: mobicore_common::Ecgi { plmn, eci: 1 },
        sender_fteid: mobicore_common::Fteid { teid: Teid(1), ipv4: std::net::Ipv4Addr::LOCALHOST },
        apn: "internet".into(),
        pdn_type: mobicore_common::PdnType::Ipv4,
        apn_ambr: mobicore_common::Ambr { uplink: 1, downlink: 1 },
        bearer: BearerContextToCreate { ebi: Ebi(5), qci: 9, arp: mobicore_common::Arp::default() },
        pgw_s5s8_c: None,
        static_ipv4: None,
        pco: None,
        mei: None,
    };
    let csr2 = csr.clone();
    let requester = c.requester.clone();
    let pending = tokio::spawn(async move { requester.request(S11Request::CreateSession(csr)).await });
    let mut b = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), front_end.recv_from(&mut b)).await.unwrap().unwrap();
    let m = GtpMessage::parse(&b[..n]).unwrap();
    assert!(matches!(decode_request(&m), Ok(S11Request::CreateSession(_))), "{m:?}");
    pending.abort();

    // With `create_session_direct`, the Create Session goes to the S-GW
    // too.
    let sgw = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let all_direct = S11ClientConfig {
        direct: Some(sgw.local_addr().unwrap()),
        create_session_direct: true,
        ..cfg(front_end.local_addr().unwrap())
    };
    let c = s11_client_bound(all_direct).await.unwrap();
    let requester = c.requester.clone();
    let pending = tokio::spawn(async move { requester.request(S11Request::CreateSession(csr2)).await });
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), sgw.recv_from(&mut b)).await.unwrap().unwrap();
    let m = GtpMessage::parse(&b[..n]).unwrap();
    assert!(matches!(decode_request(&m), Ok(S11Request::CreateSession(_))), "{m:?}");
    pending.abort();
}

/// An elastic MME host's client: a response under a direct request's
/// number that does not answer it (a late one to an earlier request under
/// that number) leaves it waiting for its own.
#[tokio::test]
async fn direct_requests_are_answered_only_by_their_type() {
    let sgw = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let front_end = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let cfg = S11ClientConfig {
        direct: Some(sgw.local_addr().unwrap()),
        // Seconds between the retransmission and the failure, however
        // slow the machine.
        t3: Duration::from_secs(2),
        ..cfg(front_end.local_addr().unwrap())
    };
    let c = s11_client_bound(cfg).await.unwrap();
    let requester = c.requester.clone();
    let rab = S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid: Teid(2) });
    let pending = tokio::spawn(async move { requester.request(rab).await });
    let mut b = vec![0u8; 4096];
    let (n, from) = tokio::time::timeout(Duration::from_secs(10), sgw.recv_from(&mut b)).await.unwrap().unwrap();
    let m = GtpMessage::parse(&b[..n]).unwrap();
    assert!(matches!(decode_request(&m), Ok(S11Request::ReleaseAccessBearers(_))));
    // A Modify Bearer Response under its number: not its answer.
    let stale =
        S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, bearer_cause: None });
    sgw.send_to(&encode_response(&stale, 1, m.seq, None).to_bytes(), from).await.unwrap();
    // Its retransmission (after T3) gets its own answer.
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), sgw.recv_from(&mut b)).await.unwrap().unwrap();
    assert_eq!(GtpMessage::parse(&b[..n]).unwrap().seq, m.seq, "retransmitted");
    let ok = S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED);
    sgw.send_to(&encode_response(&ok, 1, m.seq, None).to_bytes(), from).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), pending).await.unwrap().unwrap();
    assert_eq!(got, Ok(ok));
    assert_eq!(c.counters.value("s11_mismatched_response"), 1);
}

/// An elastic MME host's client over its link to the front end
/// (`s11_client_via`): what goes to `peer` (a request, the answer to the
/// S-GW's request, an Echo Response)
/// is handed to the link, not the socket; what the link gives is read as
/// from `peer`; a message the link cannot take is counted.
#[tokio::test]
async fn over_a_link_the_peer_s_messages_do_not_touch_the_socket() {
    use mobicore_gtp::client::{s11_client_via, PeerVia};
    use mobicore_gtp::s11::decode_incoming_answer;
    let front_end = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (to_link, mut link_out) = tokio::sync::mpsc::channel::<bytes::Bytes>(1);
    let (link_in, recv) = tokio::sync::mpsc::channel(16);
    let send = Box::new(move |b| to_link.try_send(b).is_ok());
    let cfg = cfg(front_end.local_addr().unwrap());
    let (mut link, c) = s11_client_via(cfg, Some(PeerVia { send, recv })).await.unwrap();
    // A request: onto the link, its response from the link.
    let requester = c.requester.clone();
    let pending = tokio::spawn(async move {
        requester
            .request(S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: Teid(4), linked_ebi: Ebi(5) }))
            .await
    });
    let sent = tokio::time::timeout(Duration::from_secs(10), link_out.recv()).await.unwrap().unwrap();
    let m = GtpMessage::parse(&sent).unwrap();
    assert!(matches!(decode_request(&m), Ok(S11Request::DeleteSession(_))), "{m:?}");
    let resp = S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED);
    link_in.send(encode_response(&resp, 1, m.seq, None).to_bytes().into()).await.unwrap();
    assert_eq!(tokio::time::timeout(Duration::from_secs(10), pending).await.unwrap().unwrap(), Ok(resp));

    // The S-GW's request relayed by the peer, answered onto the link.
    link_in.send(ddn(9).into()).await.unwrap();
    let inc = tokio::time::timeout(Duration::from_secs(10), link.incoming.recv()).await.unwrap().unwrap();
    let ack = accepted();
    inc.reply.send(S11IncomingAnswer::DownlinkDataNotificationAck(ack.clone())).unwrap();
    let sent = tokio::time::timeout(Duration::from_secs(10), link_out.recv()).await.unwrap().unwrap();
    let m = GtpMessage::parse(&sent).unwrap();
    assert_eq!((m.seq, decode_incoming_answer(&m).unwrap()), (9, S11IncomingAnswer::DownlinkDataNotificationAck(ack)));

    // An Echo Request from the link is answered onto it.
    let echo = GtpMessage { teid: None, seq: 0x42, body: Message::EchoRequest(Echo { recovery: 3 }) };
    link_in.send(echo.to_bytes().into()).await.unwrap();
    let sent = tokio::time::timeout(Duration::from_secs(10), link_out.recv()).await.unwrap().unwrap();
    assert!(matches!(GtpMessage::parse(&sent).unwrap().body, Message::EchoResponse(_)));

    // The socket saw nothing for the peer; a full link is counted.
    let mut b = [0u8; 64];
    assert!(tokio::time::timeout(Duration::from_millis(100), front_end.recv_from(&mut b)).await.is_err());
    let fail = S11Notification::DownlinkDataNotificationFailure(DownlinkDataNotificationFailure {
        sgw_teid: Teid(0x99),
        cause: GtpCause::UE_NOT_RESPONDING,
    });
    link.notify.send(fail.clone()).await.unwrap();
    link.notify.send(fail).await.unwrap();
    let cc = c.counters.clone();
    wait_for("the one the full link could not take counted", || cc.value("s11_send_error") == 1).await;
    assert_eq!(c.counters.value("s11_notification_sent"), 2);
}
