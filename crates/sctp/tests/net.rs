//! Two endpoints over real sockets on 127.0.0.1: raw IP protocol 132 and
//! RFC 6951 UDP encapsulation. Raw sockets need root (these tests skip with a
//! note otherwise). With tshark installed, the raw run is captured and dissected.

use bytes::Bytes;
use mobicore_common::sctp_api::{AssocId, SctpCommand, SctpEvent, SctpHandle, PPID_S1AP};
use mobicore_sctp::{bind_with_info, EndpointConfig, SctpError, Transport};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

const ASSOCS: usize = 3;
const MESSAGES: u32 = 1000;
const STREAMS: u16 = 4;

fn lo() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn message(i: u32) -> Bytes {
    // Varied sizes, some above the MTU so that fragmentation is exercised too.
    let len = if i.is_multiple_of(97) { 3000 } else { 40 + (i % 200) as usize };
    let mut v = vec![(i % 251) as u8; len];
    v[..4].copy_from_slice(&i.to_be_bytes());
    Bytes::from(v)
}

async fn next_event(h: &mut SctpHandle) -> SctpEvent {
    recv(&mut h.events).await
}

async fn recv(events: &mut mpsc::Receiver<SctpEvent>) -> SctpEvent {
    tokio::time::timeout(Duration::from_secs(30), events.recv()).await.expect("event in time").expect("endpoint alive")
}

/// Receive until `total` Data events arrived; check order per (association, stream).
async fn collect(events: &mut mpsc::Receiver<SctpEvent>, total: usize) -> HashMap<AssocId, usize> {
    let mut next: HashMap<(AssocId, u16), u32> = HashMap::new();
    let mut per_assoc: HashMap<AssocId, usize> = HashMap::new();
    let mut n = 0;
    while n < total {
        if let SctpEvent::Data { assoc, stream, ppid, data } = recv(events).await {
            assert_eq!(ppid, PPID_S1AP);
            let i = u32::from_be_bytes(data[..4].try_into().unwrap());
            assert_eq!(data, message(i), "payload intact");
            assert_eq!(i % STREAMS as u32, stream as u32);
            let want = next.entry((assoc, stream)).or_insert(stream as u32);
            assert_eq!(i, *want, "in order on {assoc:?} stream {stream}");
            *want += STREAMS as u32;
            *per_assoc.entry(assoc).or_default() += 1;
            n += 1;
        }
    }
    per_assoc
}

async fn send_all(commands: &mpsc::Sender<SctpCommand>, assocs: &[AssocId]) {
    for i in 0..MESSAGES {
        for &assoc in assocs {
            let cmd =
                SctpCommand::Send { assoc, stream: (i % STREAMS as u32) as u16, ppid: PPID_S1AP, data: message(i) };
            commands.send(cmd).await.unwrap();
        }
    }
}

async fn exchange(server_tr: Transport, client_tr: Transport, before_traffic: impl FnOnce(u16, u16)) {
    let server = bind_with_info(EndpointConfig::new(lo(), server_tr)).await.unwrap();
    let mut ccfg = EndpointConfig::new(lo(), client_tr);
    if let Some(p) = server.udp_port {
        ccfg.udp_remote_port = p;
    }
    let mut client = bind_with_info(ccfg).await.unwrap().handle;
    let mut server = server.handle;
    assert_ne!(server.local.port(), 0);
    before_traffic(server.local.port(), client.local.port());

    let mut client_ids = Vec::new();
    for _ in 0..ASSOCS {
        let (tx, rx) = oneshot::channel();
        client.commands.send(SctpCommand::Connect { remote: server.local, reply: tx }).await.unwrap();
        client_ids.push(rx.await.unwrap().expect("association up"));
    }
    let mut server_ids = Vec::new();
    while server_ids.len() < ASSOCS {
        if let SctpEvent::Up { assoc, peer, .. } = next_event(&mut server).await {
            assert_eq!(peer.ip(), client.local.ip());
            server_ids.push(assoc);
        }
    }
    for _ in 0..ASSOCS {
        assert!(matches!(next_event(&mut client).await, SctpEvent::Up { .. }));
    }

    let total = ASSOCS * MESSAGES as usize;
    let (to_server, to_client) = tokio::join!(
        async {
            send_all(&client.commands, &client_ids).await;
            collect(&mut server.events, total).await
        },
        async {
            send_all(&server.commands, &server_ids).await;
            collect(&mut client.events, total).await
        }
    );
    assert!(to_server.values().all(|&n| n == MESSAGES as usize) && to_server.len() == ASSOCS);
    assert!(to_client.values().all(|&n| n == MESSAGES as usize) && to_client.len() == ASSOCS);

    // Graceful shutdown of one, abort of another.
    client.commands.send(SctpCommand::Shutdown { assoc: client_ids[0] }).await.unwrap();
    client.commands.send(SctpCommand::Abort { assoc: client_ids[1] }).await.unwrap();
    let mut reasons = Vec::new();
    while reasons.len() < 2 {
        if let SctpEvent::Down { reason, .. } = next_event(&mut server).await {
            reasons.push(reason);
        }
    }
    reasons.sort();
    assert_eq!(reasons, ["aborted by the peer: user-initiated abort", "shutdown"]);
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

struct Capture {
    child: Child,
    file: std::path::PathBuf,
}

fn start_capture(ports: (u16, u16)) -> Option<Capture> {
    // As root tshark must run: the check fails rather than skip.
    if !mobicore_common::tools::require(&["tshark"]) {
        return None;
    }
    let file = std::env::temp_dir().join(format!("mobicore-sctp-{}-{}.pcapng", std::process::id(), ports.0));
    let _ = std::fs::remove_file(&file);
    let filter = format!("sctp and (port {} or port {})", ports.0, ports.1);
    let child = Command::new("tshark")
        .args(["-i", "lo", "-f", &filter, "-w"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tshark");
    // Owned by a Capture at once: whichever way this returns, tshark is stopped and waited for.
    let mut cap = Capture { child, file };
    // tshark says "Capturing on 'Loopback: lo'" and then "Capture started" once it listens.
    use std::io::{BufRead, BufReader};
    let mut err = BufReader::new(cap.child.stderr.take()?);
    let mut line = String::new();
    while err.read_line(&mut line).ok()? > 0 {
        if line.contains("Capture started") {
            std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
            std::thread::sleep(Duration::from_millis(300));
            return Some(cap);
        }
        line.clear();
    }
    mobicore_common::tools::cannot_check("tshark did not start capturing on lo");
    None
}

impl Capture {
    fn stop(&mut self) {
        // SAFETY: signalling the child we spawned, by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
    }
}

impl Drop for Capture {
    /// Also on a failed assertion: never leave tshark running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
        let _ = std::fs::remove_file(&self.file);
    }
}

fn check_capture(mut cap: Capture) {
    std::thread::sleep(Duration::from_millis(500));
    cap.stop();
    let run = |extra: &[&str]| {
        let out = mobicore_common::tools::run(
            Command::new("tshark")
                .args(["-r"])
                .arg(&cap.file)
                .args(["-o", "sctp.checksum:CRC-32C"])
                // The test payloads are not S1AP: dissect SCTP only.
                .args(["--disable-protocol", "s1ap"])
                .args(extra),
        )
        .expect("tshark -r");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let verbose = run(&["-V"]);
    let frames = verbose.matches("\nFrame ").count() + verbose.starts_with("Frame ") as usize;
    assert!(frames > 100, "captured {frames} frames");
    if verbose.contains("Malformed") {
        let at = verbose.find("Malformed").unwrap();
        panic!("tshark found malformed packets: {}", &verbose[at.saturating_sub(3000)..(at + 500).min(verbose.len())]);
    }
    assert!(verbose.contains("[Checksum Status: Good]") || verbose.contains("Checksum Status: Good"));
    assert!(!verbose.contains("Checksum Status: Bad"), "bad checksum on the wire");
    let expert = run(&["-q", "-z", "expert"]);
    let errors =
        expert.lines().skip_while(|l| !l.contains("Errors (")).skip(1).take_while(|l| !l.starts_with("====")).count();
    assert!(!expert.contains("Errors ("), "tshark expert errors:\n{expert}");
    println!("tshark: {frames} frames, no malformed packets, no expert errors ({errors})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_ip_three_associations_thousand_messages_each_way() {
    if !is_root() {
        println!("note: not root; raw sockets need CAP_NET_RAW, skipping");
        return;
    }
    let mut cap = None;
    exchange(Transport::RawIp, Transport::RawIp, |s, c| cap = start_capture((s, c))).await;
    if let Some(cap) = cap {
        check_capture(cap);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_encapsulation_three_associations_thousand_messages_each_way() {
    exchange(Transport::Udp { port: 0 }, Transport::Udp { port: 0 }, |_, _| {}).await;
}

#[tokio::test]
async fn udp_port_in_use_is_reported() {
    let first = bind_with_info(EndpointConfig::new(lo(), Transport::Udp { port: 0 })).await.unwrap();
    let port = first.udp_port.unwrap();
    let err = bind_with_info(EndpointConfig::new(lo(), Transport::Udp { port })).await.err().unwrap();
    assert!(matches!(err, SctpError::PortInUse { port: p } if p == port));
    assert!(err.to_string().starts_with(&format!("UDP port {port} is in use: ")), "{err}");
}

#[tokio::test]
async fn sctp_port_in_use_is_reported() {
    let first = bind_with_info(EndpointConfig::new(lo(), Transport::Udp { port: 0 })).await.unwrap();
    let port = first.handle.local.port();
    let again = SocketAddr::new(lo().ip(), port);
    let err = bind_with_info(EndpointConfig::new(again, Transport::Udp { port: 0 })).await.err().unwrap();
    assert!(err.to_string().starts_with(&format!("SCTP port {port} is in use by another endpoint")), "{err}");
}

#[tokio::test]
async fn kernel_transport_reports_clearly_when_missing() {
    let err = bind_with_info(EndpointConfig::new(lo(), Transport::Kernel)).await.err().unwrap();
    assert_eq!(err.to_string(), "kernel SCTP is not available on this host; use the raw or udp transport");
    assert_eq!(Transport::auto(), Transport::RawIp);
}

#[tokio::test]
async fn connect_to_nobody_fails() {
    let mut cfg = EndpointConfig::new(lo(), Transport::Udp { port: 0 });
    cfg.rto_initial = Duration::from_millis(20);
    cfg.rto_min = Duration::from_millis(20);
    cfg.rto_max = Duration::from_millis(40);
    cfg.max_init_retrans = 2;
    cfg.udp_remote_port = 9; // discard: nobody answers
    let h = bind_with_info(cfg).await.unwrap().handle;
    let (tx, rx) = oneshot::channel();
    h.commands.send(SctpCommand::Connect { remote: "127.0.0.1:36999".parse().unwrap(), reply: tx }).await.unwrap();
    assert_eq!(rx.await.unwrap(), Err("no answer to INIT".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_runs_over_udp() {
    let r = mobicore_sctp::bench(Transport::Udp { port: 0 }, 4, 20_000, 100).await;
    assert_eq!(r.error, None);
    assert_eq!(r.delivered, 20_000);
    assert!(r.msgs_per_s > 0.0);
    println!("bench udp: {:.0} msgs/s", r.msgs_per_s);
}

// ---- bounds on a running endpoint (RFC 6951 UDP encapsulation: no root needed) ----

mod bounds {
    use super::*;
    use mobicore_common::counters::Counters;
    use mobicore_sctp::wire::tlv::param;
    use mobicore_sctp::wire::{ChunkRepr, CommonHeader, DataRepr, InitRepr, Packet, Tlvs};
    use tokio::net::UdpSocket;

    /// A hand-driven peer: SCTP packets in UDP datagrams, built with the wire module.
    struct Forger {
        sock: UdpSocket,
        server: SocketAddr,
        sctp_port: u16,
        server_tag: u32,
        next_tsn: u32,
    }

    fn packet(src: u16, dst: u16, vtag: u32, c: &ChunkRepr<'_>) -> Vec<u8> {
        let mut buf = vec![0u8; 12 + c.buffer_len()];
        c.emit(&mut buf[12..]);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        CommonHeader { src_port: src, dst_port: dst, verification_tag: vtag }.emit(&mut p);
        p.fill_checksum();
        buf
    }

    fn init(tag: u32) -> ChunkRepr<'static> {
        ChunkRepr::Init(InitRepr {
            initiate_tag: tag,
            a_rwnd: 1 << 20,
            outbound_streams: 4,
            inbound_streams: 4,
            initial_tsn: tag,
            params: &[],
        })
    }

    impl Forger {
        async fn new(server_udp: u16) -> Self {
            let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            Forger { sock, server: SocketAddr::new(lo().ip(), server_udp), sctp_port: 0, server_tag: 0, next_tsn: 0 }
        }
        async fn send(&self, pkt: &[u8]) {
            self.sock.send_to(pkt, self.server).await.unwrap();
        }
        async fn recv(&self) -> Vec<u8> {
            let mut buf = vec![0u8; 65_536];
            let n = tokio::time::timeout(Duration::from_secs(30), self.sock.recv(&mut buf))
                .await
                .expect("answer in time")
                .unwrap();
            buf.truncate(n);
            buf
        }
        /// INIT, INIT ACK, COOKIE ECHO, COOKIE ACK from SCTP port `port` to `server_port`.
        async fn associate(&mut self, port: u16, server_port: u16) {
            self.sctp_port = port;
            let tag = 0x1234_5678;
            self.send(&packet(port, server_port, 0, &init(tag))).await;
            let ack = self.recv().await;
            let p = Packet::new_checked(&ack[..]).unwrap();
            let c = p.chunks().next().unwrap().unwrap();
            let ChunkRepr::InitAck(i) = ChunkRepr::parse(&c).unwrap() else { panic!("no INIT ACK") };
            let cookie = Tlvs::new(i.params).flatten().find(|t| t.ty == param::STATE_COOKIE).unwrap().value.to_vec();
            self.server_tag = i.initiate_tag;
            self.next_tsn = tag;
            self.send(&packet(port, server_port, self.server_tag, &ChunkRepr::CookieEcho { cookie: &cookie })).await;
            let ack = self.recv().await;
            let p = Packet::new_checked(&ack[..]).unwrap();
            let c = p.chunks().next().unwrap().unwrap();
            assert_eq!(ChunkRepr::parse(&c).unwrap(), ChunkRepr::CookieAck);
        }
        async fn data(&self, server_port: u16, tsn: u32, stream: u16, flags: (bool, bool), payload: &[u8]) {
            let d = DataRepr {
                unordered: false,
                begin: flags.0,
                end: flags.1,
                tsn,
                stream_id: stream,
                ssn: 0,
                ppid: PPID_S1AP,
                data: payload,
            };
            self.send(&packet(self.sctp_port, server_port, self.server_tag, &ChunkRepr::Data(d))).await;
        }
    }

    async fn wait_for(counters: &Counters, name: &'static str, at_least: u64) {
        for _ in 0..3000 {
            if counters.value(name) >= at_least {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{name} = {} after 30 s, want >= {at_least}", counters.value(name));
    }

    #[tokio::test]
    async fn a_running_endpoint_drops_data_beyond_its_window_and_still_delivers() {
        let mut cfg = EndpointConfig::new(lo(), Transport::Udp { port: 0 });
        cfg.receive_window = 16 << 10;
        let counters = cfg.counters.clone();
        let bound = bind_with_info(cfg).await.unwrap();
        let (mut server, udp) = (bound.handle, bound.udp_port.unwrap());
        let sp = server.local.port();
        let mut f = Forger::new(udp).await;
        f.associate(40_001, sp).await;
        assert!(matches!(next_event(&mut server).await, SctpEvent::Up { .. }));
        // 300 first fragments that never complete, far ahead: 300 kB against 16 kB.
        let junk = [7u8; 1000];
        for k in 0..300u32 {
            f.data(sp, f.next_tsn.wrapping_add(100 + 2 * k), 1, (true, false), &junk).await;
        }
        // (Loopback UDP may drop some of a burst; 17 arriving are enough to overflow.)
        wait_for(&counters, "sctp_data_beyond_receive_window", 1).await;
        // And far beyond the window.
        f.data(sp, f.next_tsn.wrapping_add(10_000_000), 1, (true, true), b"far").await;
        wait_for(&counters, "sctp_data_tsn_beyond_window", 1).await;
        // In-order data is still delivered.
        f.data(sp, f.next_tsn, 0, (true, true), b"in order").await;
        match next_event(&mut server).await {
            SctpEvent::Data { data, stream, .. } => assert_eq!((stream, &data[..]), (0, &b"in order"[..])),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_running_endpoint_refuses_associations_beyond_its_maximum_and_keeps_no_init_state() {
        let mut cfg = EndpointConfig::new(lo(), Transport::Udp { port: 0 });
        cfg.max_associations = 1;
        let counters = cfg.counters.clone();
        let bound = bind_with_info(cfg).await.unwrap();
        let (mut server, udp) = (bound.handle, bound.udp_port.unwrap());
        let client = |udp| {
            let mut c = EndpointConfig::new(lo(), Transport::Udp { port: 0 });
            c.udp_remote_port = udp;
            bind_with_info(c)
        };
        let first = client(udp).await.unwrap().handle;
        let (tx, rx) = oneshot::channel();
        first.commands.send(SctpCommand::Connect { remote: server.local, reply: tx }).await.unwrap();
        let assoc = rx.await.unwrap().expect("first association up");
        assert!(matches!(next_event(&mut server).await, SctpEvent::Up { .. }));
        // Beyond the maximum: ABORT "Out of Resource".
        let second = client(udp).await.unwrap().handle;
        let (tx, rx) = oneshot::channel();
        second.commands.send(SctpCommand::Connect { remote: server.local, reply: tx }).await.unwrap();
        assert_eq!(rx.await.unwrap(), Err("aborted by the peer: out of resource".to_string()));
        assert_eq!(counters.value("sctp_init_beyond_max_associations"), 1);
        // A flood of INITs from other ports: all refused the same way, nothing kept.
        let f = Forger::new(udp).await;
        for k in 1..=500u16 {
            f.send(&packet(20_000 + k, server.local.port(), 0, &init(k as u32))).await;
        }
        wait_for(&counters, "sctp_init_beyond_max_associations", 501).await;
        // The first association still carries data.
        first
            .commands
            .send(SctpCommand::Send { assoc, stream: 0, ppid: PPID_S1AP, data: Bytes::from_static(b"still up") })
            .await
            .unwrap();
        match next_event(&mut server).await {
            SctpEvent::Data { data, .. } => assert_eq!(&data[..], b"still up"),
            other => panic!("{other:?}"),
        }
        // Below the maximum, INITs are answered statelessly (half-open): no association appears.
        first.commands.send(SctpCommand::Abort { assoc }).await.unwrap();
        assert!(matches!(next_event(&mut server).await, SctpEvent::Down { .. }));
        let half_open = counters.value("sctp_half_open_init");
        for k in 1..=500u16 {
            f.send(&packet(30_000 + k, server.local.port(), 0, &init(k as u32))).await;
        }
        wait_for(&counters, "sctp_half_open_init", half_open + 500).await;
        assert!(server.events.try_recv().is_err(), "no association from INITs alone");
    }
}
