//! The HSS task on loopback as an independent MME meets it: a ULR built
//! from TS 29.272 7.2.3 with the optional AVPs such MMEs send
//! (Terminal-Information, Route-Record, Proxy-Info, Supported-Features,
//! Vendor-Specific-Application-Id, UE-SRVCC-Capability, DRMP, ...) is
//! answered with the subscription and its Proxy-Info, and the IMEI/SV is
//! stored; an AIR with Supported-Features and Route-Record gets vectors; an
//! invented M-bit AVP gets DIAMETER_AVP_UNSUPPORTED with Failed-AVP; a PUR
//! gets a PUA; the ULA names the PDN GW and the static address per APN and
//! our own S6a client decodes them. A tshark capture of all of it decodes
//! without malformed packets or expert errors.

use mobicore_common::peers::PeerFilter;
use mobicore_common::s6a::*;
use mobicore_common::{Ambr, Imsi, PdnType};
use mobicore_diameter::allowlist::{AllowedPeer, AllowedPeers};
use mobicore_diameter::avp::AvpRepr;
use mobicore_diameter::dict::{app, avp, cmd, result, VENDOR_3GPP};
use mobicore_diameter::header::HeaderRepr;
use mobicore_diameter::{base, connect_s6a, Message, S6aClientConfig};
use mobicore_hss::{bind, ApnProfile, HssConfig, Subscriber, SubscriberStore};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const K: [u8; 16] = [0x46, 0x5b, 0x5c, 0xe8, 0xb1, 0x99, 0xb4, 0x9f, 0xaa, 0x5f, 0x0a, 0x2e, 0xe2, 0x38, 0xa6, 0xbc];
const OPC: [u8; 16] = [0xcd, 0x63, 0xcb, 0x71, 0x95, 0x4a, 0x9f, 0x4e, 0x48, 0xa5, 0x99, 0x4e, 0x37, 0xa0, 0x2b, 0xaf];
const IMSI: &str = "001010000000001";
const IMEI: &str = "35609204079301";
const MME_HOST: &str = "mme01.other.example";
const MME_REALM: &str = "epc.mnc001.mcc001.3gppnetwork.org";

struct Server {
    addr: SocketAddr,
    store: SubscriberStore,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), mobicore_hss::HssError>>,
}

impl Server {
    async fn stop(self) {
        self.stop.send(true).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

/// One subscriber with "internet" (IPv4v6, PDN GW and static address, the
/// default) and "ims" (IPv6, its own PDN GW).
fn subscriber() -> Subscriber {
    let mut s = Subscriber::new(IMSI.parse().unwrap(), K, OPC);
    let mut internet = ApnProfile::new("internet");
    internet.pdn_type = PdnType::Ipv4v6;
    internet.pdn_gw = Some([127, 0, 0, 9].into());
    internet.static_ipv4 = Some([10, 45, 0, 9].into());
    let mut ims = ApnProfile::new("ims");
    ims.pdn_type = PdnType::Ipv6;
    ims.qci = 5;
    ims.pdn_gw = Some("fd00::5".parse().unwrap());
    ims.ambr = Ambr { uplink: 1_000_000, downlink: 2_000_000 };
    s.apns = vec![internet, ims];
    s
}

async fn start() -> Server {
    let mut peers = mobicore_hss::config::default_peers();
    peers.0.push(AllowedPeer {
        origin_host: Some(MME_HOST.into()),
        origin_realm: MME_REALM.into(),
        addrs: PeerFilter::loopback(),
    });
    let cfg =
        HssConfig { listen: SocketAddr::from(([127, 0, 0, 1], 0)), peers: AllowedPeers(peers.0), ..Default::default() };
    let store = SubscriberStore::in_memory();
    store.add(subscriber()).unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let (addr, fut) = bind(cfg, store.clone(), mobicore_common::counters::Counters::new(), rx).await.unwrap();
    Server { addr, store, stop, task: tokio::spawn(fut) }
}

async fn read_message(s: &mut TcpStream) -> Message {
    let mut hdr = [0u8; 20];
    tokio::time::timeout(Duration::from_secs(20), s.read_exact(&mut hdr)).await.expect("answer in time").unwrap();
    let len = u32::from_be_bytes([0, hdr[1], hdr[2], hdr[3]]) as usize;
    let mut buf = hdr.to_vec();
    buf.resize(len, 0);
    s.read_exact(&mut buf[20..]).await.unwrap();
    Message::parse(&buf).unwrap()
}

async fn exchange(s: &mut TcpStream, m: &Message) -> Message {
    s.write_all(&m.to_vec()).await.unwrap();
    let a = read_message(s).await;
    assert_eq!(a.header.hop_by_hop, m.header.hop_by_hop);
    assert!(!a.header.request);
    a
}

fn request(command_code: u32, n: u32) -> Message {
    let mut m = Message::new(HeaderRepr {
        request: true,
        proxiable: true,
        command_code,
        application_id: app::S6A,
        hop_by_hop: n,
        end_to_end: n,
        ..Default::default()
    });
    // TS 29.272 7.2.3 / 7.2.5 / 7.2.13: the head of every S6a request.
    m.push(avp::SESSION_ID.utf8(&format!("{MME_HOST};1700000000;{n}")));
    m.push(avp::DRMP.u32(10));
    m.push(base::s6a_vendor_specific_application_id());
    m.push(avp::AUTH_SESSION_STATE.u32(1));
    m.push(avp::ORIGIN_HOST.utf8(MME_HOST));
    m.push(avp::ORIGIN_REALM.utf8(MME_REALM));
    m.push(avp::DESTINATION_REALM.utf8("mobicore.local"));
    m.push(avp::USER_NAME.utf8(IMSI));
    m.push(avp::OC_SUPPORTED_FEATURES.grouped(&[avp::OC_FEATURE_VECTOR.octets(&1u64.to_be_bytes())]));
    m.push(avp::SUPPORTED_FEATURES.grouped(&[
        avp::VENDOR_ID.u32(VENDOR_3GPP),
        avp::FEATURE_LIST_ID.u32(1),
        avp::FEATURE_LIST.u32(0x1c00_0607),
    ]));
    m
}

/// What a relay and a proxy on the way add (RFC 6733 6.7.1, 6.7.2).
fn relayed(m: &mut Message) {
    m.push(avp::PROXY_INFO.grouped(&[avp::PROXY_HOST.utf8("dra1.example"), avp::PROXY_STATE.octets(b"state-1")]));
    m.push(avp::ROUTE_RECORD.utf8("dra1.example"));
}

fn ulr(n: u32) -> Message {
    let mut m = request(cmd::UPDATE_LOCATION, n);
    m.push(avp::TERMINAL_INFORMATION.grouped(&[avp::IMEI.utf8(IMEI), avp::SOFTWARE_VERSION.utf8("42")]));
    m.push(avp::RAT_TYPE.u32(1004));
    m.push(avp::ULR_FLAGS.u32(0x22));
    m.push(avp::UE_SRVCC_CAPABILITY.u32(1));
    m.push(avp::VISITED_PLMN_ID.octets(&[0x00, 0xf1, 0x10]));
    m.push(avp::HOMOGENEOUS_SUPPORT_OF_IMS_VOICE_OVER_PS_SESSIONS.u32(1));
    m.push(avp::EQUIVALENT_PLMN_LIST.grouped(&[avp::VISITED_PLMN_ID.octets(&[0x00, 0xf2, 0x10])]));
    m.push(avp::MME_NUMBER_FOR_MT_SMS.octets(&[0x91, 0x64, 0x07, 0x00]));
    m.push(avp::SMS_REGISTER_REQUEST.u32(2));
    relayed(&mut m);
    m
}

/// Everything a third-party MME does, on one raw connection, with the
/// answers checked.
async fn third_party_session(srv: &Server) {
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let id = base::LocalIdentity::new(MME_HOST, MME_REALM);
    s.write_all(&base::cer(&id, 1, 1).to_vec()).await.unwrap();
    assert_eq!(read_message(&mut s).await.result_code(), Some(result::DIAMETER_SUCCESS));

    // ULR: success, the subscription, Proxy-Info back, Supported-Features answered.
    let req = ulr(100);
    let a = exchange(&mut s, &req).await;
    assert_eq!(a.result_code(), Some(result::DIAMETER_SUCCESS), "{a:?}");
    let pi: Vec<&AvpRepr> = a.find_all(avp::PROXY_INFO).collect();
    assert_eq!(pi, req.find_all(avp::PROXY_INFO).collect::<Vec<_>>());
    assert!(a.find(avp::ROUTE_RECORD).is_none());
    assert_eq!(a.find_all(avp::SUPPORTED_FEATURES).count(), 1);
    let S6aAnswer::UpdateLocation(Ok(sd)) = mobicore_diameter::s6a::decode_answer(&a).unwrap() else { panic!() };
    assert_eq!(sd.apns.len(), 2);
    assert_eq!(sd.default_apn().unwrap().service_selection, "internet");
    // The IMEI and Software-Version are stored with the subscriber.
    let t = srv.store.get(&IMSI.parse().unwrap()).unwrap().terminal.expect("terminal stored");
    assert_eq!((t.imei.as_deref(), t.software_version.as_deref()), (Some(IMEI), Some("42")));

    // AIR with Supported-Features and Route-Record: vectors.
    let mut air = request(cmd::AUTHENTICATION_INFORMATION, 101);
    air.push(
        avp::REQUESTED_EUTRAN_AUTHENTICATION_INFO
            .grouped(&[avp::NUMBER_OF_REQUESTED_VECTORS.u32(2), avp::IMMEDIATE_RESPONSE_PREFERRED.u32(1)]),
    );
    air.push(avp::VISITED_PLMN_ID.octets(&[0x00, 0xf1, 0x10]));
    relayed(&mut air);
    let a = exchange(&mut s, &air).await;
    assert_eq!(a.result_code(), Some(result::DIAMETER_SUCCESS));
    let S6aAnswer::AuthenticationInformation(Ok(v)) = mobicore_diameter::s6a::decode_answer(&a).unwrap() else {
        panic!()
    };
    assert_eq!(v.len(), 2);
    assert_eq!(a.find_all(avp::PROXY_INFO).count(), 1);

    // An invented M-bit AVP (vendor 10415, code 9999): 5001 with Failed-AVP.
    let mut bad = ulr(102);
    let invented =
        AvpRepr { code: 9999, vendor_id: Some(VENDOR_3GPP), mandatory: true, protected: false, data: vec![7; 4] };
    bad.avps.insert(9, invented.clone());
    let a = exchange(&mut s, &bad).await;
    assert_eq!(a.result_code(), Some(result::DIAMETER_AVP_UNSUPPORTED));
    assert_eq!(a.find(avp::FAILED_AVP).unwrap().grouped().unwrap(), vec![invented]);
    assert_eq!(a.find_all(avp::PROXY_INFO).count(), 1);

    // PUR: PUA success.
    let mut pur = request(cmd::PURGE_UE, 103);
    pur.push(avp::PUR_FLAGS.u32(0));
    relayed(&mut pur);
    let a = exchange(&mut s, &pur).await;
    assert_eq!(a.result_code(), Some(result::DIAMETER_SUCCESS));
    assert!(a.find(avp::PUA_FLAGS).is_some());

    // DPR/DPA: an orderly goodbye.
    s.write_all(&base::dpr(&id, 104, 104, base::disconnect_cause::REBOOTING).to_vec()).await.unwrap();
    assert_eq!(read_message(&mut s).await.header.command_code, cmd::DISCONNECT_PEER);
}

/// Our own S6a client (the MME side) against the same HSS: the ULA's PDN
/// GW, static address and PDN types land in SubscriptionData.
async fn our_client_session(srv: &Server) {
    let mut cfg = S6aClientConfig::new("mme.mobicore.local", "mobicore.local");
    cfg.peer = srv.addr;
    cfg.request_timeout = Duration::from_secs(20);
    cfg.reconnect_max_backoff = None;
    let s6a = connect_s6a(cfg).await.unwrap();
    let imsi: Imsi = IMSI.parse().unwrap();
    let terminal =
        TerminalInformation { imei: Some("35609204079302".into()), software_version: Some("07".into()), meid: None };
    let req = UpdateLocationRequest {
        imsi: imsi.clone(),
        visited_plmn: "00101".parse().unwrap(),
        flags: 2,
        terminal_information: Some(terminal.clone()),
    };
    let S6aAnswer::UpdateLocation(Ok(sd)) = s6a.request(S6aRequest::UpdateLocation(req)).await.unwrap() else {
        panic!()
    };
    let internet = &sd.apns[0];
    assert_eq!(internet.service_selection, "internet");
    assert_eq!(internet.pdn_type, PdnType::Ipv4v6);
    assert_eq!(internet.pdn_gw, Some([127, 0, 0, 9].into()));
    assert_eq!(internet.served_party_ipv4, Some([10, 45, 0, 9].into()));
    let ims = &sd.apns[1];
    assert_eq!((ims.service_selection.as_str(), ims.pdn_type, ims.qci), ("ims", PdnType::Ipv6, 5));
    assert_eq!(ims.pdn_gw, Some("fd00::5".parse().unwrap()));
    assert_eq!(ims.served_party_ipv4, None);
    assert_eq!(srv.store.get(&imsi).unwrap().terminal, Some(terminal));
}

#[tokio::test]
async fn third_party_mme_is_served() {
    let srv = start().await;
    third_party_session(&srv).await;
    our_client_session(&srv).await;
    srv.stop().await;
}

/// A capture of the same exchanges on lo: Wireshark's Diameter dissector
/// finds nothing malformed, no expert error, and decodes the IMEI of
/// Terminal-Information. Fails as root when tshark cannot run; skipped
/// (with a note) without root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tshark_decodes_third_party_exchanges() {
    use std::process::Command;
    if !mobicore_common::tools::require(&["tshark"]) {
        return;
    }
    let srv = start().await;
    let port = srv.addr.port();
    let Some(cap) = mobicore_common::tools::LoCapture::start("hss-interop", &format!("tcp port {port}")) else {
        return;
    };

    third_party_session(&srv).await;
    our_client_session(&srv).await;
    srv.stop().await;
    let pcap = cap.stop();

    let decode = format!("tcp.port=={port},diameter");
    let v = mobicore_common::tools::run(Command::new("tshark").args(["-r"]).arg(&pcap).args(["-d", &decode, "-V"]))
        .expect("tshark -r");
    let text = String::from_utf8_lossy(&v.stdout);
    for want in [
        "Update-Location",
        "Authentication-Information",
        "Purge-UE",
        "Terminal-Information",
        &format!("IMEI: {IMEI}"),
        "Proxy-Info",
        "Route-Record",
        "Supported-Features",
        "MIP-Home-Agent-Address",
        "Served-Party-IP-Address",
        "DIAMETER_AVP_UNSUPPORTED",
    ] {
        assert!(text.contains(want), "tshark did not show {want:?}:\n{text}");
    }
    assert!(!text.contains("Malformed"), "malformed packet in capture:\n{text}");
    let x = mobicore_common::tools::run(
        Command::new("tshark").args(["-r"]).arg(&pcap).args(["-d", &decode, "-q", "-z", "expert"]),
    )
    .expect("tshark -z expert");
    let experts = String::from_utf8_lossy(&x.stdout);
    assert!(!experts.contains("Errors ("), "expert errors:\n{experts}");
    let mut severity = "";
    for line in experts.lines() {
        if let Some(head) = line.split(" (").next().filter(|_| line.ends_with(')') && !line.starts_with(' ')) {
            severity = if ["Errors", "Warns", "Notes", "Chats"].contains(&head) { head } else { severity };
        }
        // The one AVP Wireshark cannot know is the invented one, on purpose.
        if severity == "Warns" && !line.contains("Unknown AVP 9999") {
            assert!(!line.to_ascii_lowercase().contains("diameter"), "Diameter expert warning:\n{experts}");
        }
    }
    let _ = std::fs::remove_file(&pcap);
}
