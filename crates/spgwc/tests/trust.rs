//! The S/P-GW-C's trust boundary against the real task on loopback
//! sockets: an S11 peer that is not configured, an MME that does not own
//! the session, and a flood queued behind one busy session.

use mobicore_common::peers::PeerFilter;
use mobicore_common::s11::*;
use mobicore_common::{Ebi, Fteid, Teid};
use mobicore_gtp::s11::{decode_response, encode_request};
use mobicore_gtp::{s11_client_bound, GtpMessage, S11ClientConfig};
use mobicore_pfcp::{decode, encode, msg};
use mobicore_spgwc::{ApnConfig, SpgwcConfig, UpfPeerConfig};
use mobicore_upf::{MemoryPlane, UpfConfig};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::watch;

mod support;

const MME_IP: Ipv4Addr = Ipv4Addr::LOCALHOST;

fn mbr(sgw_teid: Teid, enb_teid: u32) -> S11Request {
    let enb = Fteid { teid: Teid(enb_teid), ipv4: Ipv4Addr::new(127, 0, 78, 1) };
    S11Request::ModifyBearer(ModifyBearerRequest { sgw_teid, ebi: Ebi(5), s1u_enb_fteid: enb })
}

fn gw_config(mme_peers: &[&str], upf: SocketAddr) -> SpgwcConfig {
    SpgwcConfig {
        s11: "127.0.0.1:0".parse().unwrap(),
        pfcp: "127.0.0.1:0".parse().unwrap(),
        apns: vec![ApnConfig::ipv4("internet", Ipv4Addr::new(10, 45, 0, 0), 16)],
        upfs: vec![UpfPeerConfig { pfcp: upf, s1u_addr: Ipv4Addr::LOCALHOST, teid_base: 0x100, teid_count: 0x1000 }],
        heartbeat_interval: Duration::from_millis(200),
        mme_peers: PeerFilter::hosts(mme_peers.iter().map(|a| a.parse::<IpAddr>().unwrap())),
        ..SpgwcConfig::default()
    }
}

/// Waits (at most 10 s) until `f` holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// One S11 request from a socket of the test's own; its answer.
async fn raw_request(sock: &UdpSocket, to: SocketAddr, req: &S11Request, seq: u32) -> GtpMessage {
    sock.send_to(&encode_request(req, seq).to_bytes(), to).await.unwrap();
    recv_gtp(sock).await
}

async fn recv_gtp(sock: &UdpSocket) -> GtpMessage {
    let mut buf = [0u8; 2048];
    let (n, _) =
        tokio::time::timeout(Duration::from_secs(10), sock.recv_from(&mut buf)).await.expect("an answer").unwrap();
    GtpMessage::parse(&buf[..n]).expect("well-formed GTPv2-C")
}

struct Core {
    s11: SocketAddr,
    counters: mobicore_common::counters::Counters,
    plane: MemoryPlane,
    client: mobicore_gtp::S11Client,
    stop: watch::Sender<bool>,
}

/// The real UPF and S/P-GW-C tasks, and the MME's S11 client on 127.0.0.1.
async fn start(mme_peers: &[&str]) -> Core {
    let (stop, stop_rx) = watch::channel(false);
    let upf = mobicore_upf::Upf::bind(UpfConfig { pfcp: "127.0.0.1:0".parse().unwrap(), ..UpfConfig::default() })
        .await
        .expect("bind UPF");
    let plane = upf.plane();
    let upf_addr = upf.pfcp_addr();
    tokio::spawn(upf.run(stop_rx.clone()));
    let gw = mobicore_spgwc::bind(gw_config(mme_peers, upf_addr)).await.expect("bind S/P-GW-C");
    let (s11, counters) = (gw.s11_addr, gw.counters.clone());
    tokio::spawn(gw.run(stop_rx));
    let client = s11_client_bound(S11ClientConfig {
        local: SocketAddr::new(MME_IP.into(), 0),
        peer: s11,
        t3: Duration::from_secs(2),
        n3: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    Core { s11, counters, plane, client, stop }
}

impl Core {
    /// A session, once the PFCP association is up.
    async fn create(&self, i: u32) -> CreateSessionResponse {
        for _ in 0..200 {
            match self.client.requester.request(S11Request::CreateSession(support::csr(i, MME_IP))).await {
                Ok(S11Response::CreateSession(r)) if r.cause.is_accepted() => return r,
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        panic!("S/P-GW-C never associated with the UPF");
    }

    async fn request(&self, r: S11Request) -> S11Response {
        self.client.requester.request(r).await.unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_session_from_an_unconfigured_address_is_refused_and_the_session_stays() {
    let core = start(&["127.0.0.1"]).await;
    let r = core.create(1).await;
    let sgw_teid = r.sgw_fteid.unwrap().teid;
    let rules = core.plane.sessions();
    assert_eq!(rules.len(), 1);

    // The same Create Session Request, replayed from 127.0.0.9.
    let stranger = UdpSocket::bind("127.0.0.9:0").await.unwrap();
    stranger
        .send_to(&encode_request(&S11Request::CreateSession(support::csr(1, MME_IP)), 77).to_bytes(), core.s11)
        .await
        .unwrap();
    until("the replay to be counted", || core.counters.value("s11_request_from_unknown_peer") == 1).await;
    assert_eq!(core.plane.sessions(), rules, "the UPF session is untouched");
    let mut buf = [0u8; 64];
    assert!(stranger.try_recv_from(&mut buf).is_err(), "no answer to a stranger");

    // The real MME's Delete Session then succeeds.
    let d = core.request(S11Request::DeleteSession(DeleteSessionRequest { sgw_teid, linked_ebi: Ebi(5) })).await;
    assert_eq!(d, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    assert!(core.plane.is_empty());
    let _ = core.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modify_bearer_from_another_address_than_the_sessions_mme_changes_nothing() {
    let core = start(&["127.0.0.1", "127.0.0.5"]).await;
    let sgw_teid = core.create(1).await.sgw_fteid.unwrap().teid;
    let m = core.request(mbr(sgw_teid, 0xe0b)).await;
    assert!(matches!(m, S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, .. })));
    let rules = core.plane.sessions();

    // A configured MME that does not own the session: Context Not Found.
    let other = UdpSocket::bind("127.0.0.5:0").await.unwrap();
    let resp = raw_request(&other, core.s11, &mbr(sgw_teid, 0xbad), 99).await;
    assert_eq!(resp.teid, Some(0));
    let r = decode_response(&resp, Ebi(5)).unwrap();
    assert!(
        matches!(r, S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::CONTEXT_NOT_FOUND, .. })),
        "{r:?}"
    );
    assert_eq!(core.counters.value("s11_request_from_non_owner"), 1);
    assert_eq!(core.plane.sessions(), rules, "the downlink still goes to the first eNB");

    let d = core.request(S11Request::DeleteSession(DeleteSessionRequest { sgw_teid, linked_ebi: Ebi(5) })).await;
    assert_eq!(d, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    assert!(core.plane.is_empty());
    let _ = core.stop.send(true);
}

/// A UPF of the test's own: it associates and establishes, and holds every
/// Session Modification Request until `release` turns true.
async fn held_upf(sock: UdpSocket, mut release: watch::Receiver<bool>) {
    use rs_pfcp::ie::cause::CauseValue;
    use rs_pfcp::ie::{fseid::Fseid, node_id::NodeId, recovery_time_stamp::RecoveryTimeStamp, Ie, IeType};
    let accepted = || mobicore_pfcp::cause_ie(CauseValue::RequestAccepted);
    let mut held: Vec<(SocketAddr, u32)> = vec![];
    let mut buf = vec![0u8; 65536];
    loop {
        tokio::select! {
            r = sock.recv_from(&mut buf) => {
                let Ok((n, from)) = r else { return };
                let Ok((h, _)) = decode(&buf[..n]) else { continue };
                let answer = match h.msg_type {
                    msg::ASSOCIATION_SETUP_REQUEST => encode(msg::ASSOCIATION_SETUP_RESPONSE, None, h.seq, &[
                        NodeId::new_ipv4(Ipv4Addr::LOCALHOST).to_ie(),
                        accepted(),
                        RecoveryTimeStamp::new(std::time::SystemTime::now()).to_ie(),
                    ]),
                    msg::HEARTBEAT_REQUEST => encode(msg::HEARTBEAT_RESPONSE, None, h.seq, &[RecoveryTimeStamp::new(std::time::SystemTime::now()).to_ie()]),
                    msg::SESSION_ESTABLISHMENT_REQUEST => {
                        let f = Ie::new(IeType::Fseid, Fseid::new(0x5e1d, Some(Ipv4Addr::LOCALHOST), None).marshal());
                        encode(msg::SESSION_ESTABLISHMENT_RESPONSE, Some(1), h.seq, &[NodeId::new_ipv4(Ipv4Addr::LOCALHOST).to_ie(), accepted(), f])
                    }
                    msg::SESSION_MODIFICATION_REQUEST if !*release.borrow() => {
                        held.push((from, h.seq));
                        continue;
                    }
                    msg::SESSION_MODIFICATION_REQUEST => encode(msg::SESSION_MODIFICATION_RESPONSE, Some(1), h.seq, &[accepted()]),
                    msg::SESSION_DELETION_REQUEST => encode(msg::SESSION_DELETION_RESPONSE, Some(1), h.seq, &[accepted()]),
                    _ => continue,
                };
                let _ = sock.send_to(&answer, from).await;
            }
            r = release.changed() => {
                if r.is_err() { return; }
                for (to, seq) in held.drain(..) {
                    let _ = sock.send_to(&encode(msg::SESSION_MODIFICATION_RESPONSE, Some(1), seq, &[accepted()]), to).await;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_queued_behind_one_session_stays_within_the_queue_bound() {
    const FLOOD: u32 = 200;
    let (stop, stop_rx) = watch::channel(false);
    let (release, release_rx) = watch::channel(false);
    let upf = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let upf_addr = upf.local_addr().unwrap();
    tokio::spawn(held_upf(upf, release_rx));
    let mut cfg = gw_config(&["127.0.0.1"], upf_addr);
    cfg.max_queued_per_session = 4;
    // The held modification is not retransmitted during the test.
    cfg.t1 = Duration::from_secs(60);
    let gw = mobicore_spgwc::bind(cfg).await.unwrap();
    let (s11, counters) = (gw.s11_addr, gw.counters.clone());
    tokio::spawn(gw.run(stop_rx));

    let mme = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut sgw_teid = None;
    for seq in 1..200 {
        let r = decode_response(
            &raw_request(&mme, s11, &S11Request::CreateSession(support::csr(1, MME_IP)), seq).await,
            Ebi(5),
        )
        .unwrap();
        match r {
            S11Response::CreateSession(c) if c.cause.is_accepted() => {
                sgw_teid = c.sgw_fteid.map(|f| f.teid);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let sgw_teid = sgw_teid.expect("a session");
    // The first Modify Bearer is held by the UPF: the session is busy.
    mme.send_to(&encode_request(&mbr(sgw_teid, 1), 1000).to_bytes(), s11).await.unwrap();
    for i in 1..=FLOOD {
        mme.send_to(&encode_request(&mbr(sgw_teid, 1 + i), 1000 + i).to_bytes(), s11).await.unwrap();
    }
    // All but the queue's worth are refused at once, No resources available.
    for _ in 0..FLOOD - 4 {
        let r = decode_response(&recv_gtp(&mme).await, Ebi(5)).unwrap();
        assert!(
            matches!(
                r,
                S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::NO_RESOURCES_AVAILABLE, .. })
            ),
            "{r:?}"
        );
    }
    assert_eq!(counters.value("s11_request_queue_full"), u64::from(FLOOD) - 4);
    assert_eq!(counters.value("s11_queued_high_water"), 4, "never more than the bound queued");
    // The UPF answers: the held request and the four queued are served.
    release.send(true).unwrap();
    for _ in 0..5 {
        let r = decode_response(&recv_gtp(&mme).await, Ebi(5)).unwrap();
        assert!(
            matches!(r, S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, .. })),
            "{r:?}"
        );
    }
    let _ = stop.send(true);
}
