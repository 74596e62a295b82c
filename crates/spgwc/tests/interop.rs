//! A third-party MME's S11, built byte by byte from TS 29.274, against the
//! S/P-GW-C (addressed as a separate SGW-C would be) and mobicore-upf over
//! 127.0.79.x UDP sockets, captured with tshark: every new message decodes
//! with no malformed packet and no expert error.

use mobicore_gtp::message::{GtpMessage, Message};
use mobicore_gtp::wire::ie::{ie_type, put_ie};
use mobicore_spgwc::{ApnConfig, SpgwcConfig, UpfPeerConfig};
use mobicore_upf::UpfConfig;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::net::UdpSocket;

mod capture;

const GW_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 79, 1);
const UPF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 79, 2);
const MME_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 79, 3);
/// Sends the malformed and other-version messages (left out of the check;
/// the answers to them are in it).
const BAD_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 79, 4);

/// What one Create Session Request of the third-party MME asks for.
struct Csr {
    seq: u32,
    header_teid: u32,
    imsi: &'static [u8],
    apn: &'static str,
    ebi: u8,
    /// PDN type (TS 29.274 8.34) and the PAA value.
    pdn_type: u8,
    paa: Vec<u8>,
}

/// A Create Session Request as an MME addressing a separate SGW-C sends it
/// on E-UTRAN initial attach (TS 29.274 Table 7.2.1-1), with the optional
/// IEs such MMEs add.
fn third_party_csr(c: &Csr) -> Vec<u8> {
    let mut b = vec![0x48, 32, 0, 0];
    b.extend_from_slice(&c.header_teid.to_be_bytes());
    b.extend_from_slice(&c.seq.to_be_bytes()[1..]);
    b.push(0);
    put_ie(&mut b, ie_type::IMSI, 0, |v| v.extend_from_slice(c.imsi));
    put_ie(&mut b, ie_type::MSISDN, 0, |v| v.extend_from_slice(&[0x64, 0x00, 0x00, 0x00, 0x10]));
    put_ie(&mut b, ie_type::MEI, 0, |v| v.extend_from_slice(&[0x53, 0x61, 0x00, 0x00, 0x00, 0x00, 0x10, 0xf0]));
    // ULI: TAI + ECGI for PLMN 001/01.
    put_ie(&mut b, ie_type::ULI, 0, |v| {
        v.extend_from_slice(&[0x18, 0x00, 0xf1, 0x10, 0x00, 0x01, 0x00, 0xf1, 0x10, 0x00, 0x00, 0x01, 0x01])
    });
    put_ie(&mut b, ie_type::SERVING_NETWORK, 0, |v| v.extend_from_slice(&[0x00, 0xf1, 0x10]));
    put_ie(&mut b, ie_type::RAT_TYPE, 0, |v| v.push(6));
    // Indication: DAF, then flags of later releases (7 octets).
    put_ie(&mut b, ie_type::INDICATION, 0, |v| v.extend_from_slice(&[0x80, 0, 0, 0, 0, 0, 0]));
    // Sender F-TEID for Control Plane: S11 MME GTP-C.
    put_ie(&mut b, ie_type::FTEID, 0, |v| {
        v.extend_from_slice(&[0x8a, 0x00, 0x00, 0x00, c.ebi]);
        v.extend_from_slice(&MME_IP.octets());
    });
    // PGW S5/S8 Address for Control Plane: S5/S8 PGW GTP-C, TEID 0.
    put_ie(&mut b, ie_type::FTEID, 1, |v| {
        v.extend_from_slice(&[0x87, 0, 0, 0, 0]);
        v.extend_from_slice(&GW_IP.octets());
    });
    put_ie(&mut b, ie_type::APN, 0, |v| mobicore_gtp::wire::ie::emit_apn(c.apn, v));
    put_ie(&mut b, ie_type::SELECTION_MODE, 0, |v| v.push(0xfc));
    put_ie(&mut b, ie_type::PDN_TYPE, 0, |v| v.push(c.pdn_type));
    put_ie(&mut b, ie_type::PAA, 0, |v| v.extend_from_slice(&c.paa));
    put_ie(&mut b, ie_type::APN_RESTRICTION, 0, |v| v.push(0));
    put_ie(&mut b, ie_type::AMBR, 0, |v| v.extend_from_slice(&[0, 0, 0x27, 0x10, 0, 0, 0x4e, 0x20]));
    // PCO: DNS IPv4, DNS IPv6, IPv4 link MTU requests, IPCP with DNS options.
    put_ie(&mut b, ie_type::PCO, 0, |v| {
        v.extend_from_slice(&[
            0x80, 0x80, 0x21, 0x10, 0x01, 0x00, 0x00, 0x10, 0x81, 0x06, 0, 0, 0, 0, 0x83, 0x06, 0, 0, 0, 0,
        ]);
        v.extend_from_slice(&[0x00, 0x0d, 0x00, 0x00, 0x03, 0x00, 0x00, 0x10, 0x00]);
    });
    put_ie(&mut b, ie_type::BEARER_CONTEXT, 0, |v| {
        put_ie(v, ie_type::EBI, 0, |e| e.push(c.ebi));
        // QCI 9, ARP 9, no pre-emption, MBR/GBR 0.
        put_ie(v, ie_type::BEARER_QOS, 0, |q| {
            q.extend_from_slice(&[0x25, 9]);
            q.extend_from_slice(&[0; 20]);
        });
    });
    put_ie(&mut b, ie_type::RECOVERY, 0, |v| v.push(12));
    put_ie(&mut b, ie_type::CHARGING_CHARACTERISTICS, 0, |v| v.extend_from_slice(&[0x08, 0x00]));
    put_ie(&mut b, ie_type::UE_TIME_ZONE, 0, |v| v.extend_from_slice(&[0x40, 0x00]));
    put_ie(&mut b, ie_type::SIGNALLING_PRIORITY_INDICATION, 0, |v| v.push(0));
    // ULI Timestamp (TS 29.274 8.101), which we do not use.
    put_ie(&mut b, 170, 0, |v| v.extend_from_slice(&[0xe9, 0x1f, 0x2a, 0x00]));
    let l = (b.len() - 4) as u16;
    b[2..4].copy_from_slice(&l.to_be_bytes());
    b
}

async fn ask(s: &UdpSocket, to: SocketAddr, b: &[u8]) -> Vec<u8> {
    s.send_to(b, to).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, _) =
        tokio::time::timeout(Duration::from_secs(10), s.recv_from(&mut buf)).await.expect("an answer").unwrap();
    buf.truncate(n);
    buf
}

fn created(b: &[u8]) -> mobicore_gtp::message::CreateSessionResponse {
    match GtpMessage::parse(b).unwrap().body {
        Message::CreateSessionResponse(r) => r,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_party_mme_on_loopback() {
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
    tokio::spawn(upf.run(stop_rx.clone()));

    let internet = ApnConfig {
        ipv6_pool: Some("2001:db8:45::/48".to_string().try_into().unwrap()),
        dns: vec!["10.45.0.53".parse().unwrap(), "2001:db8:45::53".parse().unwrap()],
        ..ApnConfig::ipv4("internet", Ipv4Addr::new(10, 45, 0, 0), 16)
    };
    let ims = ApnConfig {
        ipv6_pool: Some("2001:db8:46::/48".to_string().try_into().unwrap()),
        ..ApnConfig::ipv4("ims", Ipv4Addr::new(10, 46, 0, 0), 16)
    };
    let cfg = SpgwcConfig {
        s11: SocketAddr::new(GW_IP.into(), 2123),
        pfcp: SocketAddr::new(GW_IP.into(), 8805),
        node_id: GW_IP,
        apns: vec![internet, ims],
        upfs: vec![UpfPeerConfig { pfcp: upf_addr, s1u_addr: UPF_IP, teid_base: 0x100, teid_count: 0x1000 }],
        heartbeat_interval: Duration::from_millis(200),
        t1: Duration::from_millis(500),
        ..SpgwcConfig::default()
    };
    let gw = mobicore_spgwc::bind(cfg).await.expect("bind S/P-GW-C");
    let (s11, gw_pfcp) = (gw.s11_addr, gw.pfcp_addr);
    let counters = gw.counters.clone();
    tokio::spawn(gw.run(stop_rx.clone()));
    let mme = UdpSocket::bind(SocketAddr::new(MME_IP.into(), 0)).await.unwrap();
    // Captured from the first PFCP heartbeats on (every 200 ms).
    let capture = tokio::task::spawn_blocking(|| {
        let c = capture::start("interop", "udp and host 127.0.79.1 and (port 2123 or port 8805)");
        if let Some(c) = &c {
            capture::wait_for_packets(c);
        }
        c
    })
    .await
    .unwrap();

    // IPv4v6, dynamic: wait for the PFCP association (refused before it).
    let imsi1: &[u8] = &[0x00, 0x01, 0x10, 0x00, 0x00, 0x00, 0x10, 0xf0];
    let mut seq = 1;
    let dual_paa = |v4: [u8; 4]| {
        let mut p = vec![3, 64];
        p.extend_from_slice(&[0; 16]);
        p.extend_from_slice(&v4);
        p
    };
    let mut r = None;
    for _ in 0..200 {
        seq += 1;
        let c = Csr {
            seq,
            header_teid: 0,
            imsi: imsi1,
            apn: "internet.mnc001.mcc001.gprs",
            ebi: 5,
            pdn_type: 3,
            paa: dual_paa([0; 4]),
        };
        let resp = created(&ask(&mme, s11, &third_party_csr(&c)).await);
        if resp.cause.value == 16 {
            r = Some(resp);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = r.expect("S/P-GW-C never associated with the UPF");
    let pgw = r.pgw_s5s8_fteid.expect("PGW S5/S8-C F-TEID");
    assert_eq!((pgw.interface_type, pgw.ipv4), (7, Some(GW_IP)));
    let sgw = r.sender_fteid.expect("SGW S11 F-TEID");
    let paa = r.paa.expect("PAA");
    assert_eq!((paa.pdn_type, paa.ipv4), (mobicore_common::PdnType::Ipv4v6, Some(Ipv4Addr::new(10, 45, 0, 1))));
    let (len, v6) = paa.ipv6.unwrap();
    assert_eq!((len, v6), (64, "2001:db8:45::1".parse::<Ipv6Addr>().unwrap()));
    assert_eq!(r.recovery, Some(0));
    assert_eq!(r.apn_restriction, Some(0));
    let bc = &r.bearer_contexts[0];
    assert!(bc.charging_id.is_some() && bc.s1u_sgw_fteid.is_some());
    // PCO: IPv4 DNS, IPv6 DNS, MTU 1400; IPCP not answered.
    let pco = r.pco.expect("PCO");
    let mut want = vec![0x80, 0x00, 0x0d, 4, 10, 45, 0, 53, 0x00, 0x03, 16];
    want.extend_from_slice(&"2001:db8:45::53".parse::<Ipv6Addr>().unwrap().octets());
    want.extend_from_slice(&[0x00, 0x10, 2, 0x05, 0x78]);
    assert_eq!(pco, want);

    // A second PDN connection, "ims", IPv6, on the SGW TEID the MME holds
    // for the UE (as MMEs keeping one S11 context per UE send it).
    seq += 1;
    let mut v6paa = vec![2, 64];
    v6paa.extend_from_slice(&[0; 16]);
    let c = Csr { seq, header_teid: sgw.teid, imsi: imsi1, apn: "ims", ebi: 6, pdn_type: 2, paa: v6paa };
    let ims = created(&ask(&mme, s11, &third_party_csr(&c)).await);
    assert_eq!(ims.cause.value, 16);
    assert_eq!(ims.paa.unwrap().pdn_type, mobicore_common::PdnType::Ipv6);
    assert_eq!(plane.len(), 2);
    // Delete Session for "ims" (Linked EBI 6, TS 29.274 7.2.9): "internet" stays.
    seq += 1;
    let mut dsr = vec![0x48, 36, 0, 0];
    dsr.extend_from_slice(&ims.sender_fteid.unwrap().teid.to_be_bytes());
    dsr.extend_from_slice(&seq.to_be_bytes()[1..]);
    dsr.push(0);
    put_ie(&mut dsr, ie_type::EBI, 0, |v| v.push(6));
    put_ie(&mut dsr, ie_type::INDICATION, 0, |v| v.extend_from_slice(&[0, 0x08, 0]));
    let l = (dsr.len() - 4) as u16;
    dsr[2..4].copy_from_slice(&l.to_be_bytes());
    let d = GtpMessage::parse(&ask(&mme, s11, &dsr).await).unwrap();
    let Message::DeleteSessionResponse(d) = d.body else { panic!("{d:?}") };
    assert_eq!(d.cause.value, 16);
    assert_eq!(plane.len(), 1);

    // A static address from the subscription, in the PAA of an IPv4 request.
    seq += 1;
    let imsi2: &[u8] = &[0x00, 0x01, 0x10, 0x00, 0x00, 0x00, 0x20, 0xf0];
    let c = Csr { seq, header_teid: 0, imsi: imsi2, apn: "internet", ebi: 5, pdn_type: 1, paa: vec![1, 10, 45, 7, 7] };
    let st = created(&ask(&mme, s11, &third_party_csr(&c)).await);
    assert_eq!((st.cause.value, st.paa.unwrap().ipv4), (16, Some(Ipv4Addr::new(10, 45, 7, 7))));

    // Another GTP version, an IE running past the message, PFCP version 2.
    let bad = UdpSocket::bind(SocketAddr::new(BAD_IP.into(), 0)).await.unwrap();
    let v = ask(&bad, s11, &[0x32, 1, 0, 4, 0, 0, 0, 0, 0x43, 0x21, 0, 0]).await;
    assert_eq!(v, [0x40, 3, 0, 4, 0, 0x43, 0x21, 0], "Version Not Supported Indication");
    seq += 1;
    let c = Csr { seq, header_teid: 0, imsi: imsi2, apn: "ims", ebi: 6, pdn_type: 1, paa: vec![1, 0, 0, 0, 0] };
    let mut b = third_party_csr(&c);
    let n = b.len();
    b[n - 7..n - 5].copy_from_slice(&[0, 40]); // the ULI Timestamp's length
    let r = created(&ask(&bad, s11, &b).await);
    assert_eq!((r.cause.value, r.cause.offending), (67, Some((170, 0))));
    let fake_upf = UdpSocket::bind(SocketAddr::new(UPF_IP.into(), 0)).await.unwrap();
    let v = ask(&fake_upf, gw_pfcp, &[0x40, 1, 0, 12, 0, 0, 5, 0, 0, 96, 0, 4, 0xe0, 0, 0, 1]).await;
    assert_eq!(v, [0x20, 11, 0, 4, 0, 0, 5, 0], "PFCP Version Not Supported Response");
    assert_eq!(counters.value("gtp_version_not_supported"), 1);
    assert_eq!(counters.value("pfcp_version_not_supported"), 1);
    assert_eq!(counters.value("s11_rejected_invalid_length"), 1);

    if let Some(c) = capture {
        // The bad senders' requests are left out; every answer is in.
        let filter = "!(ip.src == 127.0.79.4) && !(ip.src == 127.0.79.2 && udp.srcport != 8805)";
        let text = tokio::task::spawn_blocking(move || {
            capture::check(
                c,
                filter,
                &[
                    "Create Session Request",
                    "Create Session Response",
                    "Version Not Supported Indication",
                    "Version Not Supported Response",
                    "Charging ID",
                    "Protocol Configuration Options",
                    "Create QER",
                ],
            )
        })
        .await
        .unwrap();
        assert!(text.contains("S5/S8 PGW GTP-C"), "PGW S5/S8-C F-TEID interface type decoded");
    }
    let _ = stop_tx.send(true);
}
