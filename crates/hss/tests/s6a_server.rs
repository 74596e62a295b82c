//! The HSS server on 127.0.0.1:0 with the S6a client of mobicore-diameter:
//! AIR, ULR, PUR, unknown IMSI, resync, 1000 concurrent requests; malformed
//! input from a raw peer gets its answer (or a disconnect) while the server
//! keeps serving the other peers. The trust boundary: peers outside the
//! allowlist (by identity or address), a flood of connections, a peer that
//! announces a huge message or sends more than the bound.

use mobicore_common::requester::Requester;
use mobicore_common::s6a::*;
use mobicore_common::{Imsi, Plmn};
use mobicore_diameter::dict::{app, avp, cmd, result};
use mobicore_diameter::header::HeaderRepr;
use mobicore_diameter::{base, connect_s6a, Message, S6aClientConfig};
use mobicore_hss::{auth, bind, HssConfig, SubscriberStore, SubscriberTemplate};
use oxirush_security::milenage::Sqn;
use oxirush_security::{Autn, Rand};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const K: [u8; 16] = [0x46, 0x5b, 0x5c, 0xe8, 0xb1, 0x99, 0xb4, 0x9f, 0xaa, 0x5f, 0x0a, 0x2e, 0xe2, 0x38, 0xa6, 0xbc];
const OPC: [u8; 16] = [0xcd, 0x63, 0xcb, 0x71, 0x95, 0x4a, 0x9f, 0x4e, 0x48, 0xa5, 0x99, 0x4e, 0x37, 0xa0, 0x2b, 0xaf];

fn imsi(n: u64) -> Imsi {
    format!("0010100000{n:05}").parse().unwrap()
}
fn plmn() -> Plmn {
    "00101".parse().unwrap()
}

struct Server {
    addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), mobicore_hss::HssError>>,
    counters: mobicore_common::counters::Counters,
}

async fn start(port: u16) -> Server {
    start_with(HssConfig { listen: SocketAddr::from(([127, 0, 0, 1], port)), ..Default::default() }).await
}

async fn start_with(cfg: HssConfig) -> Server {
    let store = SubscriberStore::in_memory();
    let t = SubscriberTemplate { first_msisdn: Some(46700000000), ..Default::default() };
    store.import_range(&imsi(0), 2000, K, OPC, &t).unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let counters = mobicore_common::counters::Counters::new();
    let (addr, fut) = bind(cfg, store, counters.clone(), rx).await.unwrap();
    Server { addr, stop, task: tokio::spawn(fut), counters }
}

async fn client(addr: SocketAddr) -> Requester<S6aRequest, S6aAnswer> {
    let mut cfg = S6aClientConfig::new("mme.mobicore.local", "mobicore.local");
    cfg.peer = addr;
    cfg.request_timeout = Duration::from_secs(20);
    connect_s6a(cfg).await.unwrap()
}

fn air(i: u64, resync: Option<ResyncInfo>) -> S6aRequest {
    S6aRequest::AuthenticationInformation(AuthInfoRequest {
        imsi: imsi(i),
        visited_plmn: plmn(),
        num_vectors: 1,
        resync,
    })
}

/// The procedures a test run (and the tshark capture) goes through.
pub async fn exercise(s6a: &Requester<S6aRequest, S6aAnswer>) {
    let usim = auth::milenage(&K, &OPC);
    // AIR: a vector the USIM accepts.
    let S6aAnswer::AuthenticationInformation(Ok(v)) = s6a.request(air(1, None)).await.unwrap() else { panic!() };
    let r = usim.check_autn(&Rand::new(&v[0].rand), &Autn::new(&v[0].autn)).unwrap();
    assert_eq!(auth::seq_of(r.sqn().get()), 1);
    // Resync: the USIM is at SEQ 500.
    let auts = usim.auts(&Rand::new(&v[0].rand), &Sqn::try_from(500 << 5).unwrap());
    let rs = ResyncInfo { rand: v[0].rand, auts: *auts.as_octets() };
    let S6aAnswer::AuthenticationInformation(Ok(v)) = s6a.request(air(1, Some(rs))).await.unwrap() else { panic!() };
    let r = usim.check_autn(&Rand::new(&v[0].rand), &Autn::new(&v[0].autn)).unwrap();
    assert_eq!(auth::seq_of(r.sqn().get()), 501);
    // ULR
    let ulr = S6aRequest::UpdateLocation(UpdateLocationRequest {
        imsi: imsi(1),
        visited_plmn: plmn(),
        flags: 2,
        terminal_information: None,
    });
    let S6aAnswer::UpdateLocation(Ok(sd)) = s6a.request(ulr).await.unwrap() else { panic!() };
    assert_eq!(sd.msisdn.as_deref(), Some("46700000001"));
    assert_eq!(sd.default_apn().unwrap().service_selection, "internet");
    // Unknown IMSI: Experimental-Result 5001.
    let unknown: Imsi = "001019999999999".parse().unwrap();
    let req = AuthInfoRequest { imsi: unknown.clone(), visited_plmn: plmn(), num_vectors: 1, resync: None };
    let a = s6a.request(S6aRequest::AuthenticationInformation(req)).await.unwrap();
    assert_eq!(a, S6aAnswer::AuthenticationInformation(Err(S6aError::UserUnknown)));
    let ulr = S6aRequest::UpdateLocation(UpdateLocationRequest {
        imsi: unknown,
        visited_plmn: plmn(),
        flags: 2,
        terminal_information: None,
    });
    assert_eq!(s6a.request(ulr).await.unwrap(), S6aAnswer::UpdateLocation(Err(S6aError::UserUnknown)));
    // PUR
    let pur = S6aRequest::PurgeUe(PurgeUeRequest { imsi: imsi(1) });
    assert_eq!(s6a.request(pur).await.unwrap(), S6aAnswer::PurgeUe(Ok(())));
}

#[tokio::test]
async fn procedures_over_diameter() {
    let srv = start(0).await;
    let s6a = client(srv.addr).await;
    exercise(&s6a).await;
    srv.stop.send(true).unwrap();
    srv.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_requests_all_answered() {
    let srv = start(0).await;
    let s6a = client(srv.addr).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1000u64 {
        let s6a = s6a.clone();
        tasks.spawn(async move {
            let a = s6a.request(air(i % 2000, None)).await.unwrap();
            matches!(a, S6aAnswer::AuthenticationInformation(Ok(v)) if v.len() == 1)
        });
    }
    let mut ok = 0;
    while let Some(r) = tasks.join_next().await {
        ok += r.unwrap() as usize;
    }
    assert_eq!(ok, 1000);
    srv.stop.send(true).unwrap();
    srv.task.await.unwrap().unwrap();
}

/// A raw peer that has done CER/CEA.
async fn raw_peer(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let id = base::LocalIdentity::new("mme.mobicore.local", "mobicore.local");
    s.write_all(&base::cer(&id, 1, 1).to_vec()).await.unwrap();
    let cea = read_message(&mut s).await.unwrap();
    assert_eq!(cea.result_code(), Some(result::DIAMETER_SUCCESS));
    s
}

async fn read_message(s: &mut TcpStream) -> Option<Message> {
    let mut hdr = [0u8; 20];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut hdr)).await.ok()?.ok()?;
    let len = u32::from_be_bytes([0, hdr[1], hdr[2], hdr[3]]) as usize;
    let mut buf = hdr.to_vec();
    buf.resize(len, 0);
    s.read_exact(&mut buf[20..]).await.ok()?;
    Some(Message::parse(&buf).unwrap())
}

fn s6a_air_bytes(hop: u32) -> Vec<u8> {
    let id = base::LocalIdentity::new("mme.mobicore.local", "mobicore.local");
    let ctx = mobicore_diameter::s6a::RequestContext {
        session_id: "mme.mobicore.local;1;1",
        local: &id,
        destination_realm: "mobicore.local",
        destination_host: None,
        hop_by_hop: hop,
        end_to_end: hop,
    };
    mobicore_diameter::s6a::encode_request(&air(3, None), &ctx).to_vec()
}

#[tokio::test]
async fn malformed_messages_get_their_answers_and_others_are_served() {
    let srv = start(0).await;
    let good = client(srv.addr).await;

    // Truncated AVP: the last AVP claims more octets than the message has.
    let mut p = raw_peer(srv.addr).await;
    let mut bytes = s6a_air_bytes(10);
    let n = bytes.len();
    // The last AVP is Visited-PLMN-Id (12 header + 3 data + 1 pad = 16).
    bytes[n - 16 + 7] = 40;
    p.write_all(&bytes).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!(a.header.hop_by_hop, 10);
    assert_eq!(a.result_code(), Some(result::DIAMETER_INVALID_AVP_LENGTH));
    assert!(a.find(avp::FAILED_AVP).is_some());
    assert!(a.find(avp::ORIGIN_HOST).is_some());

    // Missing User-Name: DIAMETER_MISSING_AVP with Failed-AVP.
    let mut m = Message::parse(&s6a_air_bytes(11)).unwrap();
    m.avps.retain(|a| !avp::USER_NAME.matches(a));
    p.write_all(&m.to_vec()).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!(a.result_code(), Some(result::DIAMETER_MISSING_AVP));
    let failed = a.find(avp::FAILED_AVP).unwrap().grouped().unwrap();
    assert_eq!(failed[0].code, avp::USER_NAME.code);

    // Unknown command with M-bit AVPs: DIAMETER_COMMAND_UNSUPPORTED, E-bit.
    let mut m = Message::parse(&s6a_air_bytes(12)).unwrap();
    m.header.command_code = 999;
    p.write_all(&m.to_vec()).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!(a.result_code(), Some(result::DIAMETER_COMMAND_UNSUPPORTED));
    assert!(a.header.error);
    assert_eq!(a.session_id(), Some("mme.mobicore.local;1;1"));

    // Unknown AVP with the M-bit in an AIR: DIAMETER_AVP_UNSUPPORTED.
    let mut m = Message::parse(&s6a_air_bytes(13)).unwrap();
    m.avps.push(mobicore_diameter::avp::AvpRepr {
        code: 9999,
        vendor_id: None,
        mandatory: true,
        protected: false,
        data: vec![1],
    });
    p.write_all(&m.to_vec()).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!(a.result_code(), Some(result::DIAMETER_AVP_UNSUPPORTED));

    // Unknown application: DIAMETER_APPLICATION_UNSUPPORTED.
    let mut m = Message::parse(&s6a_air_bytes(14)).unwrap();
    m.header.application_id = 4;
    p.write_all(&m.to_vec()).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!(a.result_code(), Some(result::DIAMETER_APPLICATION_UNSUPPORTED));

    // Other Destination-Host: DIAMETER_UNABLE_TO_DELIVER.
    let mut m = Message::parse(&s6a_air_bytes(15)).unwrap();
    m.avps.insert(5, avp::DESTINATION_HOST.utf8("elsewhere.example"));
    p.write_all(&m.to_vec()).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!(a.result_code(), Some(result::DIAMETER_UNABLE_TO_DELIVER));
    assert!(a.header.error);

    // The same connection still serves a good request, and DWR.
    p.write_all(&s6a_air_bytes(16)).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!((a.header.hop_by_hop, a.result_code()), (16, Some(result::DIAMETER_SUCCESS)));
    let id = base::LocalIdentity::new("mme.mobicore.local", "mobicore.local");
    p.write_all(&base::dwr(&id, 17, 17).to_vec()).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!((a.header.command_code, a.result_code()), (cmd::DEVICE_WATCHDOG, Some(2001)));

    // Bad message length (below the header): answered, then disconnected.
    let mut bytes = s6a_air_bytes(18);
    bytes[1..4].copy_from_slice(&[0, 0, 8]);
    p.write_all(&bytes).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!(a.result_code(), Some(result::DIAMETER_INVALID_MESSAGE_LENGTH));
    assert!(read_message(&mut p).await.is_none(), "connection closed");

    // A peer that skips CER is disconnected.
    let mut q = TcpStream::connect(srv.addr).await.unwrap();
    q.write_all(&s6a_air_bytes(19)).await.unwrap();
    assert!(read_message(&mut q).await.is_none());

    // Garbage from a third peer does not disturb the client.
    let mut g = TcpStream::connect(srv.addr).await.unwrap();
    g.write_all(&[0xff; 64]).await.unwrap();
    let S6aAnswer::AuthenticationInformation(Ok(_)) = good.request(air(2, None)).await.unwrap() else { panic!() };
    assert!(srv.counters.value("diameter_malformed") >= 1);
    assert!(srv.counters.value("diameter_command_unsupported") >= 1);

    // DPR from the raw peer side is answered with DPA.
    let mut p = raw_peer(srv.addr).await;
    p.write_all(&base::dpr(&id, 20, 20, 0).to_vec()).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!(a.header.command_code, cmd::DISCONNECT_PEER);
    let _ = HeaderRepr::default();
    let _ = app::S6A;

    srv.stop.send(true).unwrap();
    srv.task.await.unwrap().unwrap();
}

/// Captures a whole session on lo with tshark and checks that Wireshark's
/// Diameter dissector finds nothing malformed and no expert error in what
/// the client and the server put on the wire. Where tshark is missing or
/// cannot capture this fails as root, and is skipped (with a note) only
/// without root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tshark_decodes_the_session_without_errors() {
    use std::process::Command;
    if !mobicore_common::tools::require(&["tshark"]) {
        return;
    }
    // Bind first to learn the port, then capture it.
    let srv = start(0).await;
    let port = srv.addr.port();
    let Some(cap) = mobicore_common::tools::LoCapture::start("hss-s6a", &format!("tcp port {port}")) else {
        return;
    };

    let s6a = client(srv.addr).await;
    exercise(&s6a).await;
    drop(s6a);
    srv.stop.send(true).unwrap();
    srv.task.await.unwrap().unwrap();
    let pcap = cap.stop();

    let decode = format!("tcp.port=={port},diameter");
    let v = mobicore_common::tools::run(Command::new("tshark").args(["-r"]).arg(&pcap).args(["-d", &decode, "-V"]))
        .expect("tshark -r");
    let text = String::from_utf8_lossy(&v.stdout);
    for cmd in ["Capabilities-Exchange", "Authentication-Information", "Update-Location", "Purge-UE", "Disconnect-Peer"]
    {
        assert!(text.contains(cmd), "tshark saw no {cmd}:\n{text}\n{}", String::from_utf8_lossy(&v.stderr));
    }
    assert!(text.contains("KASME"), "AIA vectors dissected");
    assert!(text.contains("Experimental-Result-Code: DIAMETER_ERROR_USER_UNKNOWN (5001)"), "{text}");
    assert!(!text.contains("Malformed"), "malformed packet in capture:\n{text}");
    let x = mobicore_common::tools::run(
        Command::new("tshark").args(["-r"]).arg(&pcap).args(["-d", &decode, "-q", "-z", "expert"]),
    )
    .expect("tshark -z expert");
    let experts = String::from_utf8_lossy(&x.stdout);
    // Sections are "Errors (n)", "Warns (n)", "Notes (n)", "Chats (n)". No
    // error at all, and no warning from the Diameter dissector (a TCP RST
    // when both sides disconnect at once is TCP's business).
    assert!(!experts.contains("Errors ("), "expert errors:\n{experts}");
    let mut severity = "";
    for line in experts.lines() {
        if let Some(head) = line.split(" (").next().filter(|_| line.ends_with(')') && !line.starts_with(' ')) {
            severity = if ["Errors", "Warns", "Notes", "Chats"].contains(&head) { head } else { severity };
        }
        if severity == "Warns" {
            assert!(!line.to_ascii_lowercase().contains("diameter"), "Diameter expert warning:\n{experts}");
        }
    }
    let _ = std::fs::remove_file(&pcap);
}

/// Throughput over loopback (not a timing assertion: it prints the rate).
/// `cargo test -p mobicore-hss --release --test s6a_server throughput -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn throughput() {
    let srv = start(0).await;
    let s6a = client(srv.addr).await;
    for (name, total) in [("PUR", 200_000u64), ("AIR", 100_000u64)] {
        let start = std::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        let workers = 512;
        for w in 0..workers {
            let s6a = s6a.clone();
            tasks.spawn(async move {
                for i in 0..total / workers {
                    let req = if name == "PUR" {
                        S6aRequest::PurgeUe(PurgeUeRequest { imsi: imsi((w * 7 + i) % 2000) })
                    } else {
                        air((w * 7 + i) % 2000, None)
                    };
                    s6a.request(req).await.unwrap();
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let secs = start.elapsed().as_secs_f64();
        println!("{name}: {total} requests in {secs:.2} s = {:.0}/s", total as f64 / secs);
    }
    srv.stop.send(true).unwrap();
    srv.task.await.unwrap().unwrap();
}

// ---- Trust boundary and bounds (issue 8) ----

use mobicore_common::peers::PeerFilter;
use mobicore_diameter::allowlist::{AllowedPeer, AllowedPeers};

/// The MME from 127.0.0.1 only, a partner realm from 127.0.0.2.
fn two_peers() -> AllowedPeers {
    AllowedPeers(vec![
        AllowedPeer {
            origin_host: Some("mme.mobicore.local".into()),
            origin_realm: "mobicore.local".into(),
            addrs: PeerFilter::hosts(["127.0.0.1".parse().unwrap()]),
        },
        AllowedPeer {
            origin_host: None,
            origin_realm: "partner.example".into(),
            addrs: PeerFilter::hosts(["127.0.0.2".parse().unwrap()]),
        },
    ])
}

fn trust_cfg() -> HssConfig {
    HssConfig { listen: "127.0.0.1:0".parse().unwrap(), peers: two_peers(), ..Default::default() }
}

/// A TCP connection to `to` from the local address `from`.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    s.connect(to).await.unwrap()
}

/// The server closed the stream: EOF or reset, well before the bound.
async fn assert_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    let r = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(r.is_ok(), "connection still open after 10 s");
}

/// Waits (at most 20 s) until the counter reaches `n`.
async fn counter_reaches(c: &mobicore_common::counters::Counters, name: &'static str, n: u64) {
    let t0 = std::time::Instant::now();
    while c.value(name) < n {
        assert!(t0.elapsed() < Duration::from_secs(20), "{name} = {} < {n}", c.value(name));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn diameter_peer_not_in_the_allowlist_gets_unknown_peer_and_no_vectors() {
    let srv = start_with(trust_cfg()).await;
    let mut s = connect_from("127.0.0.1", srv.addr).await;
    let rogue = base::LocalIdentity::new("rogue.mobicore.local", "mobicore.local");
    // CER and an AIR right behind it.
    let mut bytes = base::cer(&rogue, 1, 1).to_vec();
    bytes.extend(s6a_air_bytes(2));
    s.write_all(&bytes).await.unwrap();
    let cea = read_message(&mut s).await.unwrap();
    assert_eq!(cea.header.command_code, cmd::CAPABILITIES_EXCHANGE);
    assert_eq!(cea.result_code(), Some(result::DIAMETER_UNKNOWN_PEER));
    assert!(cea.header.error);
    assert!(read_message(&mut s).await.is_none(), "no answer to the AIR");
    assert_closed(&mut s).await;
    assert_eq!(srv.counters.value("diameter_cer_from_unknown_peer"), 1);
    // The S6a client under that identity cannot connect at all.
    let mut cfg = S6aClientConfig::new("rogue.mobicore.local", "mobicore.local");
    cfg.peer = srv.addr;
    assert!(connect_s6a(cfg).await.is_err());
    // The allowed MME is served.
    let s6a = client(srv.addr).await;
    let S6aAnswer::AuthenticationInformation(Ok(v)) = s6a.request(air(1, None)).await.unwrap() else { panic!() };
    assert_eq!(v.len(), 1);
    srv.stop.send(true).unwrap();
    srv.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn allowed_origin_host_from_a_disallowed_address_is_refused() {
    let srv = start_with(trust_cfg()).await;
    let mme = base::LocalIdentity::new("mme.mobicore.local", "mobicore.local");
    // From the partner's address: the address is allowed, the MME's identity
    // is not from there.
    let mut s = connect_from("127.0.0.2", srv.addr).await;
    s.write_all(&[base::cer(&mme, 1, 1).to_vec(), s6a_air_bytes(2)].concat()).await.unwrap();
    let cea = read_message(&mut s).await.unwrap();
    assert_eq!(cea.result_code(), Some(result::DIAMETER_UNKNOWN_PEER));
    assert_closed(&mut s).await;
    // From an address no peer has: closed before anything is read.
    let mut s = connect_from("127.0.0.3", srv.addr).await;
    let _ = s.write_all(&base::cer(&mme, 1, 1).to_vec()).await;
    assert_closed(&mut s).await;
    counter_reaches(&srv.counters, "s6a_connection_from_unknown_address", 1).await;
    assert_eq!(srv.counters.value("diameter_cer_from_unknown_peer"), 1, "the second CER was never read");
    srv.stop.send(true).unwrap();
    srv.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_flood_beyond_the_bound_is_closed_and_the_mme_is_served() {
    let srv = start_with(HssConfig { max_connections: 4, ..trust_cfg() }).await;
    let s6a = client(srv.addr).await;
    let mut flood = Vec::new();
    for _ in 0..40 {
        flood.push(connect_from("127.0.0.1", srv.addr).await);
    }
    // Three fit beside the MME; 37 are closed.
    counter_reaches(&srv.counters, "s6a_connection_over_limit", 37).await;
    assert_eq!(srv.counters.value("s6a_connections"), 4);
    let (mut open, mut closed) = (0, 0);
    let mme = base::LocalIdentity::new("mme.mobicore.local", "mobicore.local");
    for s in flood.iter_mut() {
        let _ = s.write_all(&base::cer(&mme, 1, 1).to_vec()).await;
        match read_message(s).await {
            Some(cea) if cea.result_code() == Some(result::DIAMETER_SUCCESS) => open += 1,
            _ => closed += 1,
        }
    }
    assert_eq!((open, closed), (3, 37));
    // The MME still gets vectors.
    for i in 0..10 {
        let S6aAnswer::AuthenticationInformation(Ok(v)) = s6a.request(air(i, None)).await.unwrap() else { panic!() };
        assert_eq!(v.len(), 1);
    }
    // Once the flood leaves, new connections are taken again.
    drop(flood);
    let t0 = std::time::Instant::now();
    while srv.counters.value("s6a_connections") > 1 {
        assert!(t0.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let again = client(srv.addr).await;
    let S6aAnswer::AuthenticationInformation(Ok(_)) = again.request(air(11, None)).await.unwrap() else { panic!() };
    srv.stop.send(true).unwrap();
    srv.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_message_is_cut_off_and_buffered_bytes_stay_within_the_bound() {
    const MAX: usize = 4096;
    const UNSENT: usize = 4096;
    let cfg = HssConfig { max_message_octets: MAX, max_unsent_answer_octets: UNSENT, ..trust_cfg() };
    let srv = start_with(cfg).await;
    let good = client(srv.addr).await;

    // A header announcing 16 MiB: DIAMETER_INVALID_MESSAGE_LENGTH, closed.
    let mut p = raw_peer(srv.addr).await;
    let mut big = s6a_air_bytes(30);
    big[1..4].copy_from_slice(&[0xff, 0xff, 0xff]);
    p.write_all(&big).await.unwrap();
    let a = read_message(&mut p).await.unwrap();
    assert_eq!((a.header.hop_by_hop, a.result_code()), (30, Some(result::DIAMETER_INVALID_MESSAGE_LENGTH)));
    assert_closed(&mut p).await;
    assert_eq!(srv.counters.value("s6a_message_over_max_length"), 1);

    // A header announcing exactly the maximum, its octets a few at a time,
    // then 4 MiB more: the HSS holds the one message, nothing more.
    let mut p = raw_peer(srv.addr).await;
    let mut hdr = s6a_air_bytes(31)[..20].to_vec();
    hdr[1..4].copy_from_slice(&(MAX as u32).to_be_bytes()[1..]);
    p.write_all(&hdr).await.unwrap();
    for _ in 0..100 {
        p.write_all(&[0u8; 10]).await.unwrap();
    }
    counter_reaches(&srv.counters, "s6a_buffered_octets", 1020).await;
    let (mut rd, mut wr) = p.into_split();
    let pusher = tokio::spawn(async move {
        let chunk = vec![0u8; 64 * 1024];
        for _ in 0..64 {
            if wr.write_all(&chunk).await.is_err() {
                break;
            }
        }
    });
    // The message is answered (its AVPs are zeros); the zeros after it
    // cannot be framed (length 0, and not a request to answer): closed.
    let mut d = mobicore_diameter::framing::FrameDecoder::default();
    let mut codes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), rd.read(&mut buf)).await.expect("closed within 10 s") {
            Ok(0) | Err(_) => break,
            Ok(n) => d.push(&buf[..n]),
        }
        while let Some(f) = d.next_frame().unwrap() {
            codes.push(Message::parse(&f).unwrap().result_code());
        }
    }
    let _ = pusher.await;
    assert_eq!(codes, [Some(result::DIAMETER_INVALID_AVP_LENGTH)]);
    assert!(srv.counters.value("diameter_invalid_message_length") >= 2);
    let peak = srv.counters.value("s6a_buffered_octets_peak") as usize;
    assert!(peak <= 3 * (MAX + UNSENT), "held {peak} octets for 3 connections");

    // The MME was served all along.
    let S6aAnswer::AuthenticationInformation(Ok(_)) = good.request(air(5, None)).await.unwrap() else { panic!() };
    srv.stop.send(true).unwrap();
    srv.task.await.unwrap().unwrap();
}
