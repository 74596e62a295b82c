//! S11 client -> S/P-GW-C -> mobicore-upf PFCP node over 127.0.0.x UDP
//! sockets. The well-formed phase is captured with tshark when present and
//! checked for malformed packets and expert errors.

use mobicore_common::s11::*;
use mobicore_common::{Ebi, Fteid, Teid};
use mobicore_gtp::{s11_client_bound, S11ClientConfig};
use mobicore_spgwc::{ApnConfig, SpgwcConfig, UpfPeerConfig};
use mobicore_upf::UpfConfig;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::net::UdpSocket;

mod capture;
mod support;

const SESSIONS: u32 = 1000;
// Standard ports on addresses of their own so tshark dissects GTPv2 and
// PFCP by port and nothing else on the machine collides.
const GW_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 77, 1);
const UPF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 77, 2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_sessions_over_loopback() {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let upf = mobicore_upf::Upf::bind(UpfConfig {
        pfcp: SocketAddr::new(UPF_IP.into(), 8805),
        node_id: UPF_IP,
        s1u_addr: UPF_IP,
        ..UpfConfig::default()
    })
    .await
    .expect("bind UPF");
    let upf_addr = upf.pfcp_addr();
    let plane = upf.plane();
    let upf_counters = upf.counters.clone();
    tokio::spawn(upf.run(stop_rx.clone()));

    let capture = capture::start("loopback", "udp and host 127.0.77.1 and (port 2123 or port 8805)");

    let cfg = SpgwcConfig {
        s11: SocketAddr::new(GW_IP.into(), 2123),
        pfcp: SocketAddr::new(GW_IP.into(), 8805),
        node_id: GW_IP,
        apns: vec![ApnConfig::ipv4("internet", Ipv4Addr::new(10, 45, 0, 0), 16)],
        upfs: vec![UpfPeerConfig { pfcp: upf_addr, s1u_addr: UPF_IP, teid_base: 0x100, teid_count: 0x10_0000 }],
        heartbeat_interval: Duration::from_millis(200),
        t1: Duration::from_millis(500),
        ..SpgwcConfig::default()
    };
    let gw = mobicore_spgwc::bind(cfg).await.expect("bind S/P-GW-C");
    let (s11_addr, gw_pfcp) = (gw.s11_addr, gw.pfcp_addr);
    let gw_counters = gw.counters.clone();
    tokio::spawn(gw.run(stop_rx.clone()));

    let client = s11_client_bound(S11ClientConfig {
        local: "127.0.0.1:0".parse().unwrap(),
        peer: s11_addr,
        t3: Duration::from_secs(2),
        n3: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    let mme_ip = match client.local_addr().ip() {
        std::net::IpAddr::V4(a) => a,
        _ => unreachable!(),
    };
    // Wait for the PFCP association (Create Session is refused before it).
    let mut ok = false;
    for _ in 0..100 {
        match client.requester.request(S11Request::CreateSession(support::csr(0, mme_ip))).await {
            Ok(S11Response::CreateSession(r)) if r.cause.is_accepted() => {
                ok = true;
                let d = DeleteSessionRequest { sgw_teid: r.sgw_fteid.unwrap().teid, linked_ebi: Ebi(5) };
                client.requester.request(S11Request::DeleteSession(d)).await.unwrap();
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert!(ok, "S/P-GW-C never associated with the UPF");

    // Create, then modify, every session concurrently.
    let mut set = tokio::task::JoinSet::new();
    for i in 1..=SESSIONS {
        let r = client.requester.clone();
        set.spawn(async move {
            let c = match r.request(S11Request::CreateSession(support::csr(i, mme_ip))).await {
                Ok(S11Response::CreateSession(c)) => c,
                other => panic!("session {i}: {other:?}"),
            };
            assert_eq!(c.cause, GtpCause::REQUEST_ACCEPTED);
            let sgw_teid = c.sgw_fteid.unwrap().teid;
            let enb = Fteid { teid: Teid(0xe000_0000 + i), ipv4: Ipv4Addr::new(127, 0, 78, 1) };
            let m = r
                .request(S11Request::ModifyBearer(ModifyBearerRequest { sgw_teid, ebi: Ebi(5), s1u_enb_fteid: enb }))
                .await
                .unwrap();
            assert!(matches!(
                m,
                S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, .. })
            ));
            (i, sgw_teid, c.paa.unwrap(), c.s1u_sgw_fteid.unwrap())
        });
    }
    let mut made = vec![];
    while let Some(r) = set.join_next().await {
        made.push(r.unwrap());
    }
    assert_eq!(made.len(), SESSIONS as usize);

    // The UPF's table: one session per UE, downlink forwarding to its eNB.
    let table = plane.sessions();
    assert_eq!(table.len(), SESSIONS as usize);
    let mut ues: Vec<Ipv4Addr> = made.iter().map(|m| m.2).collect();
    ues.sort();
    ues.dedup();
    assert_eq!(ues.len(), SESSIONS as usize, "distinct UE addresses");
    for rules in table.values() {
        let dl = rules.pdrs.values().find(|p| p.pdi.ue_ipv4.is_some()).unwrap();
        let far = &rules.fars[&dl.far_id.unwrap()];
        let ohc = far.outer_header_creation.expect("eNB tunnel");
        let i = ohc.teid - 0xe000_0000;
        let m = made.iter().find(|m| m.0 == i).unwrap();
        assert_eq!(dl.pdi.ue_ipv4, Some(m.2));
        let ul = rules.pdrs.values().find(|p| p.pdi.local_fteid.is_some()).unwrap();
        assert_eq!(ul.pdi.local_fteid, Some((m.3.teid.0, UPF_IP)));
    }

    // Delete half now; the other half after the malformed input.
    let (first, rest) = made.split_at(made.len() / 2);
    let mut set = tokio::task::JoinSet::new();
    for m in first.iter().copied() {
        let r = client.requester.clone();
        set.spawn(async move {
            let d = r
                .request(S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: m.1, linked_ebi: Ebi(5) }))
                .await
                .unwrap();
            assert_eq!(d, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    assert_eq!(plane.len(), rest.len());

    if let Some(c) = capture {
        tokio::task::spawn_blocking(move || {
            capture::check(c, "udp", &["GPRS Tunneling Protocol V2", "Packet Forwarding Control Protocol"])
        })
        .await
        .unwrap();
    }

    // Malformed GTPv2-C: garbage is dropped and counted; a request missing
    // a mandatory IE is answered with Cause 70.
    let probe = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    probe.send_to(&[0x48, 0x20, 0x00, 0x40, 1, 2, 3], s11_addr).await.unwrap();
    let mut bad = mobicore_gtp::s11::encode_request(&S11Request::CreateSession(support::csr(99_999, mme_ip)), 4242);
    if let mobicore_gtp::Message::CreateSessionRequest(r) = &mut bad.body {
        r.bearer_contexts.clear();
    }
    // Re-encode without the Bearer Context by emitting and trimming: the
    // Repr will not emit an empty list, so the IE is simply absent.
    probe.send_to(&bad.to_bytes(), s11_addr).await.unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) =
        tokio::time::timeout(Duration::from_secs(5), probe.recv_from(&mut buf)).await.expect("rejection").unwrap();
    let resp = mobicore_gtp::GtpMessage::parse(&buf[..n]).unwrap();
    let mobicore_gtp::Message::CreateSessionResponse(r) = resp.body else { panic!("{resp:?}") };
    assert_eq!((r.cause.value, r.cause.offending), (70, Some((93, 0))));

    // Malformed PFCP to the UPF: a Session Deletion Request whose IE runs
    // past the end is answered with a cause; garbage to the gateway's PFCP
    // port from an address that is no UPF's is counted.
    let mut pf = vec![0x21, 54, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 9, 0, 0, 19, 0, 9, 1];
    let l = (pf.len() - 4) as u16;
    pf[2..4].copy_from_slice(&l.to_be_bytes());
    probe.send_to(&pf, upf_addr).await.unwrap();
    let (n, _) =
        tokio::time::timeout(Duration::from_secs(5), probe.recv_from(&mut buf)).await.expect("PFCP rejection").unwrap();
    assert_eq!(buf[1], 55, "Session Deletion Response");
    probe.send_to(&[0x20, 0x01], gw_pfcp).await.unwrap();
    let _ = n;

    // The other sessions are undisturbed: they still delete cleanly.
    let mut set = tokio::task::JoinSet::new();
    for m in rest.iter().copied() {
        let r = client.requester.clone();
        set.spawn(async move {
            let d = r
                .request(S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: m.1, linked_ebi: Ebi(5) }))
                .await
                .unwrap();
            assert_eq!(d, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    assert!(plane.is_empty());
    assert_eq!(gw_counters.value("gtp_malformed"), 1);
    assert_eq!(gw_counters.value("s11_rejected_ie"), 1);
    assert_eq!(upf_counters.value("pfcp_malformed"), 1);
    // The probe is no configured UPF: its datagram is dropped unread.
    for _ in 0..500 {
        if gw_counters.value("pfcp_from_unknown_peer") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(gw_counters.value("pfcp_from_unknown_peer"), 1);
    assert_eq!(gw_counters.value("pfcp_malformed"), 0);
    assert_eq!(gw_counters.value("sessions_created"), SESSIONS as u64 + 1);
    let _ = stop_tx.send(true);
}
