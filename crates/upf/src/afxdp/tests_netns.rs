//! AF_XDP over a veth pair in namespaces this test creates
//! (`mct-<pid>-<n>-src` --veth-- `mct-<pid>-<n>-upf`): the UPF program on
//! the upf side with a buffering session redirects the UE's packets into an
//! [`XskSocket`]; the exact bytes sent from the peer arrive, in order.
//! Skipped unless root.

use super::*;
use crate::dataplane::io::in_netns;
use crate::dataplane::tests_netns::{run_io, Running};
use crate::rules::{Action, Far, PacketDetection, Pdr, SessionRules, INTERFACE_ACCESS, INTERFACE_CORE};
use crate::xdp::order::SlowOrder;
use crate::xdp::{AttachMode, Counter, MapSizes, XdpConfig, XdpPlane};
use crate::ForwardingPlane;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static SEQ: AtomicU32 = AtomicU32::new(0);

const UPF: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 2);
const SRC: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 1);
const UE: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 2);
const UPF_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0a, 0x02];

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// Two namespaces with a veth pair; deleted on drop (with the veths and
/// any XDP program on them).
pub(crate) struct Pair {
    pub src: String,
    pub upf: String,
}

impl Drop for Pair {
    fn drop(&mut self) {
        for n in [&self.src, &self.upf] {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

impl Pair {
    fn new() -> Option<Pair> {
        Pair::with_queues(1)
    }

    /// The veths get `queues` receive and transmit queues each.
    fn with_queues(queues: u32) -> Option<Pair> {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
            eprintln!("note: skipped, needs root and iproute2");
            return None;
        }
        let id = format!("mct-{}-x{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let p = Pair { src: format!("{id}-src"), upf: format!("{id}-upf") };
        ip(&["netns", "add", &p.src]);
        ip(&["netns", "add", &p.upf]);
        let q = queues.to_string();
        let qs = ["numtxqueues", &q, "numrxqueues", &q];
        let mut args = vec!["link", "add", "xa", "netns", &p.src];
        args.extend_from_slice(&qs);
        args.extend_from_slice(&["type", "veth", "peer", "name", "xb", "netns", &p.upf]);
        args.extend_from_slice(&qs);
        ip(&args);
        ip(&["-n", &p.upf, "link", "set", "xb", "address", "02:00:00:00:0a:02"]);
        ip(&["-n", &p.src, "addr", "add", "10.210.0.1/24", "dev", "xa"]);
        ip(&["-n", &p.upf, "addr", "add", "10.210.0.2/24", "dev", "xb"]);
        for (ns, dev) in [(&p.src, "xa"), (&p.upf, "xb")] {
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&["-n", &p.src, "route", "add", "10.45.0.0/24", "via", "10.210.0.2"]);
        Some(p)
    }
}

/// A downlink-only session for UE: PDR by UE address, FAR `dl`.
fn rules(dl: Action) -> SessionRules {
    let pdi = PacketDetection {
        source_interface: INTERFACE_CORE,
        local_fteid: None,
        choose_fteid: false,
        ue_ipv4: Some(UE),
        ue_ipv6: None,
        network_instance: None,
        sdf_filters: 0,
        flows: vec![],
    };
    let mut r = SessionRules::default();
    r.pdrs.insert(
        2,
        Pdr {
            id: 2,
            precedence: 100,
            pdi,
            outer_header_removal: None,
            far_id: Some(2),
            qer_ids: vec![],
            urr_ids: vec![],
        },
    );
    r.fars.insert(
        2,
        Far {
            id: 2,
            action: dl,
            destination_interface: Some(INTERFACE_ACCESS),
            network_instance: None,
            outer_header_creation: None,
            bar_id: None,
            duplicating: vec![],
        },
    );
    r
}

#[test]
fn buffered_downlink_arrives_on_the_xsk_with_exact_bytes() {
    let Some(pair) = Pair::new() else { return };
    let (mut plane, mut socks) = in_netns(Some(&pair.upf), || {
        let mut p = XdpPlane::load(XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(UPF) })
            .map_err(std::io::Error::other)?;
        p.attach("xb", AttachMode::Native).map_err(std::io::Error::other)?;
        let (socks, _order) = open_for_plane(&mut p, "xb", 64).map_err(std::io::Error::other)?;
        Ok((p, socks))
    })
    .expect("XDP and AF_XDP set up");
    assert_eq!(socks.len(), 1, "a veth has one receive queue");
    plane.install(1, &rules(Action { buff: true, nocp: true, ..Action::default() })).unwrap();

    let tx = in_netns(Some(&pair.src), || UdpSocket::bind(SocketAddrV4::new(SRC, 4000))).unwrap();
    let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![b'p', i, 0xa5, i.wrapping_mul(37)]).collect();
    for p in &payloads {
        tx.send_to(p, SocketAddrV4::new(UE, 5000)).unwrap();
    }
    let mut got: Vec<Vec<u8>> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < payloads.len() {
        assert!(Instant::now() < deadline, "only {} frames arrived on the socket", got.len());
        socks[0].wait(100).unwrap();
        socks[0].recv(|f| got.push(f.to_vec()));
    }
    assert_eq!(got.len(), payloads.len(), "nothing more than what was sent");
    for (f, p) in got.iter().zip(&payloads) {
        assert_eq!(&f[..6], &UPF_MAC, "addressed to the UPF's interface");
        let ip = ipv4_of_frame(f).expect("an IPv4 frame");
        assert_eq!(ip.len(), 20 + 8 + p.len());
        assert_eq!(&ip[12..16], &SRC.octets());
        assert_eq!(&ip[16..20], &UE.octets());
        assert_eq!(ip[9], 17, "UDP");
        assert_eq!(&ip[20..22], &4000u16.to_be_bytes());
        assert_eq!(&ip[22..24], &5000u16.to_be_bytes());
        assert_eq!(&ip[28..], &p[..], "payload, in order");
    }
    assert_eq!(plane.counter(Counter::PassBuffer).unwrap(), payloads.len() as u64);
    // A buffered packet arriving on another interface (BPF_PROG_RUN: lo)
    // is passed up the stack, never redirected to a socket of xb, where
    // the kernel would drop it.
    let mut frame = vec![0u8; 14];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame.extend_from_slice(&crate::dataplane::ipv4::udp_packet(SRC, UE, 4000, 5000, b"lo"));
    let (verdict, _) = plane.program().expect("loaded").test_run(&frame).unwrap();
    assert_eq!(verdict, 2, "XDP_PASS");
    assert_eq!(plane.counter(Counter::PassBuffer).unwrap(), payloads.len() as u64 + 1);
    let st = socks[0].stats().unwrap();
    assert_eq!((st.rx_dropped, st.rx_ring_full), (0, 0));

    // Closing the socket takes it out of the map: the program falls back to
    // XDP_PASS (the kernel route), nothing is lost in a dead socket.
    socks.clear();
    tx.send_to(b"after", SocketAddrV4::new(UE, 5000)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while plane.counter(Counter::PassBuffer).unwrap() < 7 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(plane);
    drop(pair);
}

/// Packets still in a socket's ring when the FAR turns FORW are not
/// overtaken: the program hands the UE's next packets to the socket too,
/// behind them, until the slow path has taken those off its counts
/// (crate::xdp::order); then the fast path has the UE's packets again.
#[test]
fn packets_behind_ones_still_in_the_slow_path_follow_them_there() {
    let Some(pair) = Pair::new() else { return };
    let (mut plane, (mut socks, order)) = in_netns(Some(&pair.upf), || {
        let mut p = XdpPlane::load(XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(UPF) })
            .map_err(std::io::Error::other)?;
        p.attach("xb", AttachMode::Native).map_err(std::io::Error::other)?;
        let s = open_for_plane(&mut p, "xb", 64).map_err(std::io::Error::other)?;
        Ok((p, s))
    })
    .expect("XDP and AF_XDP set up");
    let count = |p: &XdpPlane, c| p.counter(c).unwrap();
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    plane.install(1, &rules(Action { buff: true, nocp: true, ..Action::default() })).unwrap();
    let tx = in_netns(Some(&pair.src), || UdpSocket::bind(SocketAddrV4::new(SRC, 4000))).unwrap();
    let send = |p: &[u8]| tx.send_to(p, SocketAddrV4::new(UE, 5000)).unwrap();
    for p in [b"b0", b"b1", b"b2"] {
        send(p);
    }
    wait("three buffered", &|| count(&plane, Counter::PassBuffer) == 3);
    let bucket = crate::xdp::order::bucket(u32::from(UE));
    assert_eq!(order.pending(bucket), 3, "counted as handed over");

    // FORW while the three are still in the ring: the next two queue
    // behind them.
    plane.update(1, &rules(Action { forw: true, ..Action::default() })).unwrap();
    send(b"f0");
    send(b"f1");
    wait("two behind", &|| count(&plane, Counter::PassInOrder) == 2);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 5 {
        assert!(Instant::now() < deadline, "only {} frames on the socket", got.len());
        socks[0].wait(100).unwrap();
        socks[0].recv(|f| got.push(ipv4_of_frame(f).expect("IPv4")[28..].to_vec()));
    }
    assert_eq!(got, [b"b0", b"b1", b"b2", b"f0", b"f1"].map(|p| p.to_vec()), "in arrival order");
    assert_eq!(order.pending(bucket), 5);

    // Sent: the fast path has the UE again.
    for _ in 0..5 {
        order.sent(bucket);
    }
    order.sent(bucket);
    assert_eq!(order.pending(bucket), 0, "never below zero");
    // Each run ends in one verdict counter (the next-hop cache's aside).
    let verdicts = || {
        let by_the_way = [Counter::Rx, Counter::NhCacheHit, Counter::NhFibHit];
        Counter::ALL.iter().filter(|c| !by_the_way.contains(c)).map(|&c| count(&plane, c)).sum::<u64>()
    };
    let before = verdicts();
    send(b"f2");
    wait("the last one judged", &|| verdicts() > before);
    assert_eq!((count(&plane, Counter::PassInOrder), count(&plane, Counter::PassBuffer)), (2, 3), "not to the socket");
    drop(plane);
    drop(pair);
}

/// A veth with two receive queues gets a socket on each; packets of many
/// flows spread over the queues and every one arrives on one socket.
#[test]
fn every_receive_queue_gets_a_socket() {
    let Some(pair) = Pair::with_queues(2) else { return };
    let (mut plane, mut socks) = in_netns(Some(&pair.upf), || {
        let mut p = XdpPlane::load(XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(UPF) })
            .map_err(std::io::Error::other)?;
        p.attach("xb", AttachMode::Native).map_err(std::io::Error::other)?;
        let (socks, _order) = open_for_plane(&mut p, "xb", 64).map_err(std::io::Error::other)?;
        Ok((p, socks))
    })
    .expect("XDP and AF_XDP set up");
    assert_eq!(socks.iter().map(XskSocket::queue).collect::<Vec<_>>(), vec![0, 1]);
    plane.install(1, &rules(Action { buff: true, nocp: true, ..Action::default() })).unwrap();
    const N: usize = 64;
    let senders: Vec<UdpSocket> = (0..8u16)
        .map(|i| in_netns(Some(&pair.src), move || UdpSocket::bind(SocketAddrV4::new(SRC, 4100 + i))).unwrap())
        .collect();
    for k in 0..N {
        senders[k % senders.len()].send_to(&(k as u16).to_be_bytes(), SocketAddrV4::new(UE, 5000)).unwrap();
    }
    let mut got = Vec::new();
    let mut per_queue = [0usize; 2];
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < N {
        assert!(Instant::now() < deadline, "only {} of {N} arrived", got.len());
        for (q, s) in socks.iter_mut().enumerate() {
            per_queue[q] += s.recv(|f| {
                let ip = ipv4_of_frame(f).expect("IPv4");
                got.push(u16::from_be_bytes([ip[28], ip[29]]));
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("frames per receive queue: {per_queue:?}");
    got.sort_unstable();
    assert_eq!(got, (0..N as u16).collect::<Vec<_>>(), "each packet exactly once");
    for s in &socks {
        assert_eq!(s.stats().unwrap().rx_dropped, 0);
    }
    drop(socks);
    drop(plane);
    drop(pair);
}

#[test]
fn bind_to_a_missing_queue_fails_with_a_clear_error() {
    let Some(pair) = Pair::new() else { return };
    let r = in_netns(Some(&pair.upf), || {
        let idx = crate::xdp::ifindex("xb").map_err(std::io::Error::other)?;
        Ok(XskSocket::bind(idx, 7, 64).map(|_| ()))
    })
    .unwrap();
    let e = r.expect_err("veth has no queue 7");
    assert!(matches!(e, XskError::Bind { queue: 7, .. }), "{e}");
    assert!(e.to_string().contains("queue 7"), "{e}");
}

/// enb --veth-- upf (XDP on both veths, AF_XDP on the core one, the
/// user-space slow path with its TUN device) --veth-- dn; deleted on drop.
struct Three {
    enb: String,
    upf: String,
    dn: String,
    tun: String,
}

impl Drop for Three {
    fn drop(&mut self) {
        for n in [&self.enb, &self.upf, &self.dn] {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

const S1U: Ipv4Addr = Ipv4Addr::new(10, 220, 1, 1);
const ENB: Ipv4Addr = Ipv4Addr::new(10, 220, 1, 2);
const DN: Ipv4Addr = Ipv4Addr::new(10, 220, 2, 2);
const ENB_MAC: [u8; 6] = [2, 0, 0, 0, 0x0e, 2];
const S1U_MAC: [u8; 6] = [2, 0, 0, 0, 0x0e, 1];

impl Three {
    fn new() -> Option<Three> {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
            eprintln!("note: skipped, needs root and iproute2");
            return None;
        }
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let id = format!("mct-{}-x{n}", std::process::id());
        let t = Three {
            enb: format!("{id}-enb"),
            upf: format!("{id}-upf"),
            dn: format!("{id}-dn"),
            tun: format!("mcx{}{n}", std::process::id() % 100_000),
        };
        for ns in [&t.enb, &t.upf, &t.dn] {
            ip(&["netns", "add", ns]);
        }
        ip(&["link", "add", "ea", "netns", &t.enb, "type", "veth", "peer", "name", "s1u", "netns", &t.upf]);
        ip(&["link", "add", "sgi", "netns", &t.upf, "type", "veth", "peer", "name", "da", "netns", &t.dn]);
        ip(&["-n", &t.enb, "link", "set", "ea", "address", "02:00:00:00:0e:02"]);
        ip(&["-n", &t.upf, "link", "set", "s1u", "address", "02:00:00:00:0e:01"]);
        for (ns, dev, addr) in [
            (&t.enb, "ea", "10.220.1.2/24"),
            (&t.upf, "s1u", "10.220.1.1/24"),
            (&t.upf, "sgi", "10.220.2.1/24"),
            (&t.dn, "da", "10.220.2.2/24"),
        ] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&["-n", &t.dn, "route", "add", "10.45.0.0/24", "via", "10.220.2.1"]);
        ip(&[
            "-n",
            &t.upf,
            "neigh",
            "replace",
            "10.220.1.2",
            "lladdr",
            "02:00:00:00:0e:02",
            "dev",
            "s1u",
            "nud",
            "permanent",
        ]);
        let out = Command::new("ip")
            .args(["netns", "exec", &t.upf, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
            .output()
            .unwrap();
        assert!(out.status.success());
        Some(t)
    }
}

fn bearer(dl: Action) -> SessionRules {
    use crate::rules::GtpuTunnel;
    let mut r = rules(dl);
    let pdi = PacketDetection {
        source_interface: INTERFACE_ACCESS,
        local_fteid: Some((0x100, S1U)),
        choose_fteid: false,
        ue_ipv4: Some(UE),
        ue_ipv6: None,
        network_instance: None,
        sdf_filters: 0,
        flows: vec![],
    };
    r.pdrs.insert(
        1,
        Pdr {
            id: 1,
            precedence: 100,
            pdi,
            outer_header_removal: Some(0),
            far_id: Some(1),
            qer_ids: vec![],
            urr_ids: vec![],
        },
    );
    let forw = Action { forw: true, ..Action::default() };
    r.fars.insert(
        1,
        Far {
            id: 1,
            action: forw,
            destination_interface: Some(INTERFACE_CORE),
            network_instance: None,
            outer_header_creation: None,
            bar_id: None,
            duplicating: vec![],
        },
    );
    r.fars.get_mut(&2).unwrap().outer_header_creation = dl.forw.then_some(GtpuTunnel { teid: 0x900, ipv4: ENB });
    r
}

/// The slow path of the shell in XDP mode, run on a thread of its own.
fn start_slow_path(t: &Three, socks: Vec<XskSocket>, order: std::sync::Arc<SlowOrder>) -> Running {
    use crate::dataplane::io::IoConfig;
    use crate::dataplane::{DatapathConfig, UserspacePlane};
    let plane = UserspacePlane::new(
        DatapathConfig { s1u_addr: S1U, ..DatapathConfig::default() },
        mobicore_common::counters::Counters::new(),
    );
    let cfg = IoConfig {
        s1u: SocketAddrV4::new(S1U, 2152),
        access_netns: Some(t.upf.clone()),
        core_netns: Some(t.upf.clone()),
        tun_name: t.tun.clone(),
        ue_pools: vec!["10.45.0.0/24".into()],
    };
    let (running, n) = run_io(plane, cfg, Some((socks, order)));
    assert_eq!(n, 1, "one AF_XDP socket (veth: one queue)");
    running
}

/// XDP mode end to end: a buffering session's downlink packets reach the
/// user-space buffer through AF_XDP (not the TUN device), a Downlink Data
/// Report goes up, and when the FAR turns FORW all of them leave
/// encapsulated towards the eNB in arrival order; later packets take the
/// fast path.
#[test]
fn xdp_mode_buffers_over_afxdp_and_releases_in_order() {
    let Some(t) = Three::new() else { return };
    // enb: XDP_PASS on the peer of the redirect target (veth pitfall).
    let pass = in_netns(Some(&t.enb), || {
        let mut p = crate::xdp::baseline::load_pass().map_err(std::io::Error::other)?;
        p.attach("ea", AttachMode::Native).map_err(std::io::Error::other)?;
        Ok(p)
    })
    .expect("pass program on the eNB side");
    let (mut xdp, socks) = in_netns(Some(&t.upf), || {
        let mut p = XdpPlane::load(XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(S1U) })
            .map_err(std::io::Error::other)?;
        for i in ["s1u", "sgi"] {
            p.attach(i, AttachMode::Native).map_err(std::io::Error::other)?;
        }
        let s1u = crate::xdp::ifindex("s1u").map_err(std::io::Error::other)?;
        p.set_next_hop(ENB, crate::xdp::NextHop { ifindex: s1u, dmac: ENB_MAC, smac: S1U_MAC })
            .map_err(std::io::Error::other)?;
        let (socks, order) = open_for_plane(&mut p, "sgi", DEFAULT_FRAMES).map_err(std::io::Error::other)?;
        Ok((p, (socks, std::sync::Arc::new(order))))
    })
    .expect("XDP and AF_XDP set up");
    let (socks, order) = socks;
    let mut slow = start_slow_path(&t, socks, order.clone());
    let buff = Action { buff: true, nocp: true, ..Action::default() };
    // The shell's order (Tee): the slow path first, then the fast path.
    slow.plane.install(1, &bearer(buff)).unwrap();
    xdp.install(1, &bearer(buff)).unwrap();

    let enb = in_netns(Some(&t.enb), || UdpSocket::bind(SocketAddrV4::new(ENB, 2152))).unwrap();
    enb.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let dn = in_netns(Some(&t.dn), || UdpSocket::bind(SocketAddrV4::new(DN, 5000))).unwrap();
    const N: u16 = 100;
    for i in 0..N {
        dn.send_to(&i.to_be_bytes(), SocketAddrV4::new(UE, 4000)).unwrap();
    }
    let counters = slow.plane.lock().counters.clone();
    let counter = |name| counters.value(name);
    let deadline = Instant::now() + Duration::from_secs(20);
    while counter("upf_buffered") < u64::from(N) {
        assert!(Instant::now() < deadline, "buffered {} of {N}", counter("upf_buffered"));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(counter("upf_afxdp_received"), u64::from(N), "every packet came over AF_XDP");
    assert_eq!(counter("upf_buffered"), u64::from(N));
    assert_eq!(xdp.counter(Counter::PassBuffer).unwrap(), u64::from(N));
    assert!(matches!(
        slow.plane.poll_report(),
        Some(crate::rules::PlaneReport::DownlinkData { up_seid: 1, pdr_id: 2 })
    ));
    assert_eq!(slow.plane.lock().buffered(1).0, usize::from(N) * 30, "100 IPv4/UDP packets of 30 octets held");

    // The FAR turns FORW through the shell's handover; packets sent at
    // once arrive behind the released ones, whichever path they take.
    let forw = Action { forw: true, ..Action::default() };
    let mut handover = crate::dataplane::handover::Handover::new();
    handover.update(&mut slow.plane, &mut xdp, 1, &bearer(forw)).unwrap();
    for i in N..N + 5 {
        dn.send_to(&i.to_be_bytes(), SocketAddrV4::new(UE, 4000)).unwrap();
    }
    enb.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut buf = [0u8; 2048];
    let mut got: Vec<u16> = Vec::new();
    let mut receive = |got: &mut Vec<u16>, handover: &mut crate::dataplane::handover::Handover, xdp: &mut XdpPlane| {
        // What the PFCP task does when the I/O task reports a flush.
        handover.poll(&slow.plane, xdp);
        if let Ok((n, _)) = enb.recv_from(&mut buf) {
            let r = mobicore_gtp::gtpu::parse(&buf[..n]).unwrap();
            assert_eq!(r.header.teid, 0x900);
            let mobicore_gtp::gtpu::Body::GPdu(ip) = r.body else { panic!("{r:?}") };
            got.push(u16::from_be_bytes([ip[28], ip[29]]));
        }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < usize::from(N) + 5 {
        assert!(Instant::now() < deadline, "{} of {} arrived", got.len(), N + 5);
        receive(&mut got, &mut handover, &mut xdp);
    }
    assert_eq!(got, (0..N + 5).collect::<Vec<_>>(), "released in arrival order, none lost, none overtaken");
    assert_eq!(slow.plane.lock().buffered(1), (0, 0));
    assert_eq!(counter("upf_released"), u64::from(N));
    // Once the release is sent the fast path carries the downlink.
    while handover.pending() > 0 {
        assert!(Instant::now() < deadline, "the fast path never switched");
        receive(&mut got, &mut handover, &mut xdp);
    }
    // ... once the slow path has sent what it took (the bucket's count).
    let bucket = crate::xdp::order::bucket(u32::from(UE));
    while order.pending(bucket) > 0 {
        assert!(Instant::now() < deadline, "the slow path never caught up: {}", order.pending(bucket));
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = xdp.counter(Counter::DlFwd).unwrap();
    for i in N + 5..N + 10 {
        dn.send_to(&i.to_be_bytes(), SocketAddrV4::new(UE, 4000)).unwrap();
    }
    while got.len() < usize::from(N) + 10 {
        assert!(Instant::now() < deadline, "{} of {} arrived", got.len(), N + 10);
        receive(&mut got, &mut handover, &mut xdp);
    }
    assert_eq!(got, (0..N + 10).collect::<Vec<_>>());
    assert_eq!(xdp.counter(Counter::DlFwd).unwrap() - before, 5, "by XDP");
    drop(slow);
    drop(xdp);
    drop(pass);
    drop(t);
}

/// The shell in XDP mode opens a socket on the core interface by default,
/// and `buffer_afxdp = false` keeps the TUN path (counted fallback).
#[test]
fn the_shell_opens_afxdp_unless_told_not_to() {
    for afxdp in [true, false] {
        let Some(t) = Three::new() else { return };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let cfg = crate::UpfConfig {
                pfcp: "127.0.0.1:0".parse().unwrap(),
                s1u_addr: S1U,
                datapath: crate::DatapathKind::Xdp,
                access_netns: Some(t.upf.clone()),
                core_netns: Some(t.upf.clone()),
                access_interface: Some("s1u".into()),
                core_interface: Some("sgi".into()),
                tun_name: t.tun.clone(),
                ue_pools: vec!["10.45.0.0/24".into()],
                buffer_afxdp: afxdp,
                ..crate::UpfConfig::default()
            };
            let upf = crate::Upf::bind(cfg).await.expect("binds in XDP mode");
            assert!(upf.xdp_loaded());
            assert_eq!(upf.counters.value("upf_afxdp_fallback"), u64::from(!afxdp), "buffer_afxdp = {afxdp}");
        });
    }
}
