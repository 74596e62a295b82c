//! Over real sockets in network namespaces this test creates (enb - upf -
//! dn, veth pairs): G-PDUs from "enb" arrive decapsulated at a UDP server
//! in "dn", replies come back encapsulated; buffering releases 100
//! packets in order; with a small S1-U MTU, a DF packet from "dn" is
//! answered with ICMP Fragmentation Needed that the dn host's kernel takes
//! (its path MTU drops) and a non-DF one reaches "enb" as inner fragments;
//! a dual-stack session carries IPv6 both ways through the TUN device and
//! answers a Router Solicitation with its prefix.
//! Skipped unless root with `ip` available. The GTP-U and ICMP we emit
//! are checked with tshark (which must run: see `mobicore_common::tools`).

use super::io::{in_netns, DatapathIo, IoConfig};
use super::ipv4::udp_packet;
use super::{DatapathConfig, UserspacePlane};
use crate::rules::{
    Action, Far, ForwardingPlane, GtpuTunnel, PacketDetection, Pdr, SessionRules, INTERFACE_ACCESS, INTERFACE_CORE,
};
use mobicore_common::counters::Counters;
use mobicore_common::tools;
use mobicore_gtp::gtpu::{self, Body, HeaderRepr, Repr};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static N: AtomicU32 = AtomicU32::new(0);

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("run");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Namespaces enb, upf, dn and their veths; removed on drop.
struct Topo {
    enb: String,
    upf: String,
    dn: String,
    tun: String,
}

impl Drop for Topo {
    fn drop(&mut self) {
        for ns in [&self.enb, &self.upf, &self.dn] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

impl Topo {
    fn new() -> Option<Topo> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
            eprintln!("skipped: needs root and iproute2");
            return None;
        }
        let id = format!("{}-{}", std::process::id() % 100_000, N.fetch_add(1, Ordering::Relaxed));
        let t = Topo {
            enb: format!("mct-{id}-enb"),
            upf: format!("mct-{id}-upf"),
            dn: format!("mct-{id}-dn"),
            tun: format!("mcu{id}"),
        };
        for ns in [&t.enb, &t.upf, &t.dn] {
            sh(&["ip", "netns", "add", ns]);
        }
        let (a, b, c, d) = (format!("mva{id}"), format!("mvb{id}"), format!("mvc{id}"), format!("mvd{id}"));
        sh(&["ip", "link", "add", &a, "netns", &t.enb, "type", "veth", "peer", "name", &b, "netns", &t.upf]);
        sh(&["ip", "link", "add", &c, "netns", &t.upf, "type", "veth", "peer", "name", &d, "netns", &t.dn]);
        let ip = |ns: &str, args: &[&str]| {
            let mut v = vec!["ip", "-n", ns];
            v.extend_from_slice(args);
            sh(&v);
        };
        ip(&t.enb, &["addr", "add", "10.200.1.2/24", "dev", &a]);
        ip(&t.upf, &["addr", "add", "10.200.1.1/24", "dev", &b]);
        ip(&t.upf, &["addr", "add", "10.200.2.1/24", "dev", &c]);
        ip(&t.dn, &["addr", "add", "10.200.2.2/24", "dev", &d]);
        for (ns, dev) in [(&t.enb, &a), (&t.upf, &b), (&t.upf, &c), (&t.dn, &d)] {
            ip(ns, &["link", "set", dev, "up"]);
            ip(ns, &["link", "set", "lo", "up"]);
        }
        ip(&t.dn, &["route", "add", "10.45.0.0/24", "via", "10.200.2.1"]);
        sh(&["ip", "netns", "exec", &t.upf, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        Some(t)
    }
}

const UE: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 2);
const ENB: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 2);
const DN: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 200, 2, 2), 5000);

fn rules(dl: Action) -> SessionRules {
    let pd = |iface, teid: Option<u32>| PacketDetection {
        source_interface: iface,
        local_fteid: teid.map(|t| (t, Ipv4Addr::new(10, 200, 1, 1))),
        choose_fteid: false,
        ue_ipv4: Some(UE),
        ue_ipv6: None,
        network_instance: None,
        sdf_filters: 0,
        flows: vec![],
    };
    let mut r = SessionRules::default();
    r.pdrs.insert(
        1,
        Pdr {
            id: 1,
            precedence: 100,
            pdi: pd(INTERFACE_ACCESS, Some(0x100)),
            outer_header_removal: Some(0),
            far_id: Some(1),
            qer_ids: vec![],
            urr_ids: vec![],
        },
    );
    r.pdrs.insert(
        2,
        Pdr {
            id: 2,
            precedence: 100,
            pdi: pd(INTERFACE_CORE, None),
            outer_header_removal: None,
            far_id: Some(2),
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
    let ohc = dl.forw.then_some(GtpuTunnel { teid: 0x900, ipv4: ENB });
    r.fars.insert(
        2,
        Far {
            id: 2,
            action: dl,
            destination_interface: Some(INTERFACE_ACCESS),
            network_instance: None,
            outer_header_creation: ohc,
            bar_id: None,
            duplicating: vec![],
        },
    );
    r
}

/// The I/O shell of a data path running on a runtime of its own, in the
/// namespaces of `cfg` (shared with the AF_XDP tests).
pub(crate) struct Running {
    pub(crate) plane: UserspacePlane,
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Opens `cfg` for `plane`, with AF_XDP sockets `socks` for buffered
/// downlink (none: TUN only), and runs it; returns once it is open, with
/// the number of AF_XDP sockets it reads.
/// AF_XDP sockets and the program's counts of what it hands them.
pub(crate) type Afxdp = (Vec<crate::afxdp::XskSocket>, std::sync::Arc<crate::xdp::order::SlowOrder>);

pub(crate) fn run_io(plane: UserspacePlane, cfg: IoConfig, afxdp: Option<Afxdp>) -> (Running, usize) {
    let (stop, rx) = tokio::sync::watch::channel(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let p = plane.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let opened = DatapathIo::open(&cfg, p).and_then(|io| match afxdp {
                Some((socks, order)) => io.with_afxdp(socks, order),
                None => Ok(io),
            });
            match opened {
                Ok(io) => {
                    ready_tx.send(Ok(io.afxdp_sockets())).unwrap();
                    io.run(rx).await.unwrap();
                }
                Err(e) => ready_tx.send(Err(e)).unwrap(),
            }
        });
    });
    let n = ready_rx.recv().unwrap().expect("data path opens");
    (Running { plane, stop, thread: Some(thread) }, n)
}

fn start(t: &Topo) -> Running {
    start_with(t, DatapathConfig::default())
}

fn start_with(t: &Topo, cfg: DatapathConfig) -> Running {
    let plane = UserspacePlane::new(DatapathConfig { s1u_addr: Ipv4Addr::new(10, 200, 1, 1), ..cfg }, Counters::new());
    let cfg = IoConfig {
        s1u: SocketAddrV4::new(Ipv4Addr::new(10, 200, 1, 1), gtpu::PORT),
        access_netns: Some(t.upf.clone()),
        core_netns: Some(t.upf.clone()),
        tun_name: t.tun.clone(),
        ue_pools: vec!["10.45.0.0/24".into()],
    };
    run_io(plane, cfg, None).0
}

fn udp_in(ns: &str, addr: SocketAddrV4) -> UdpSocket {
    let s = in_netns(Some(ns), move || UdpSocket::bind(addr)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Checks GTP-U datagrams with tshark (wrapped in IPv4/UDP in a pcap).
fn tshark_clean(datagrams: &[Vec<u8>]) {
    let packets: Vec<Vec<u8>> =
        datagrams.iter().map(|d| udp_packet(Ipv4Addr::new(10, 200, 1, 1), ENB, gtpu::PORT, gtpu::PORT, d)).collect();
    if let Some(text) = tshark_raw(&packets) {
        assert!(text.contains("GPRS Tunneling Protocol"), "{text}");
    }
}

/// Dissects IPv4 packets with tshark (a LINKTYPE_RAW pcap): no malformed
/// packet, no expert error. The dissection's text, or `None` (with a note)
/// where tshark cannot run and we are not root; as root that fails.
pub(crate) fn tshark_raw(packets: &[Vec<u8>]) -> Option<String> {
    if !tools::require(&["tshark"]) {
        return None;
    }
    let mut pcap = vec![];
    pcap.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    pcap.extend_from_slice(&2u16.to_le_bytes());
    pcap.extend_from_slice(&4u16.to_le_bytes());
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&65535u32.to_le_bytes());
    pcap.extend_from_slice(&101u32.to_le_bytes()); // LINKTYPE_RAW
    for p in packets {
        pcap.extend_from_slice(&[0; 8]);
        pcap.extend_from_slice(&(p.len() as u32).to_le_bytes());
        pcap.extend_from_slice(&(p.len() as u32).to_le_bytes());
        pcap.extend_from_slice(p);
    }
    let f = std::env::temp_dir().join(format!(
        "mct-gtpu-{}-{}.pcap",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&f, &pcap).unwrap();
    let out = tools::run(Command::new("tshark").args(["-r", f.to_str().unwrap(), "-V"]));
    let expert = tools::run(Command::new("tshark").args(["-r", f.to_str().unwrap(), "-q", "-z", "expert,error"]));
    let _ = std::fs::remove_file(&f);
    let (out, expert) = (out.expect("tshark -r -V"), expert.expect("tshark -r -z expert"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!text.contains("Malformed"), "{text}");
    let e = String::from_utf8_lossy(&expert.stdout);
    assert!(!e.contains("Error"), "{e}");
    Some(text)
}

#[test]
fn gpdu_round_trip_enb_upf_dn() {
    let Some(t) = Topo::new() else { return };
    let mut run = start(&t);
    run.plane.install(1, &rules(Action { forw: true, ..Action::default() })).unwrap();
    let enb = udp_in(&t.enb, SocketAddrV4::new(ENB, gtpu::PORT));
    let dn = udp_in(&t.dn, DN);
    let s1u = SocketAddrV4::new(Ipv4Addr::new(10, 200, 1, 1), gtpu::PORT);
    let mut seen = vec![];
    for i in 0..5u8 {
        let inner = udp_packet(UE, *DN.ip(), 4000, DN.port(), &[b'u', i]);
        enb.send_to(&gtpu::gpdu(0x100, &inner), s1u).unwrap();
        let mut buf = [0u8; 2048];
        let (n, from) = dn.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[b'u', i]);
        assert_eq!(from, std::net::SocketAddr::V4(SocketAddrV4::new(UE, 4000)));
        dn.send_to(&[b'd', i], from).unwrap();
        let (n, _) = enb.recv_from(&mut buf).unwrap();
        let r = gtpu::parse(&buf[..n]).unwrap();
        assert_eq!(r.header.teid, 0x900);
        let Body::GPdu(ip) = r.body else { panic!("{r:?}") };
        assert_eq!(&ip[28..], &[b'd', i]);
        assert_eq!(super::ipv4::parse(ip).unwrap().dst, UE);
        seen.push(buf[..n].to_vec());
    }
    // Echo Request -> Echo Response; unknown TEID -> Error Indication.
    let echo = Repr {
        header: HeaderRepr { msg_type: gtpu::msg::ECHO_REQUEST, seq: Some(3), ..Default::default() },
        body: Body::EchoRequest,
    }
    .to_vec();
    enb.send_to(&echo, s1u).unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = enb.recv_from(&mut buf).unwrap();
    assert_eq!(gtpu::parse(&buf[..n]).unwrap().body, Body::EchoResponse { recovery: 0 });
    seen.push(buf[..n].to_vec());
    enb.send_to(&gtpu::gpdu(0xbad, &udp_packet(UE, *DN.ip(), 1, 2, b"x")), s1u).unwrap();
    let (n, _) = enb.recv_from(&mut buf).unwrap();
    assert!(matches!(gtpu::parse(&buf[..n]).unwrap().body, Body::ErrorIndication { teid_data_i: 0xbad, .. }));
    seen.push(buf[..n].to_vec());
    // Moving the downlink tunnel sends an End Marker on the old path.
    let mut moved = rules(Action { forw: true, ..Action::default() });
    moved.fars.get_mut(&2).unwrap().outer_header_creation = Some(GtpuTunnel { teid: 0x901, ipv4: ENB });
    run.plane.update(1, &moved).unwrap();
    let (n, _) = enb.recv_from(&mut buf).unwrap();
    let r = gtpu::parse(&buf[..n]).unwrap();
    assert_eq!((r.header.teid, r.body), (0x900, Body::EndMarker));
    seen.push(buf[..n].to_vec());
    // A spoofed inner source never reaches the data network.
    enb.send_to(&gtpu::gpdu(0x100, &udp_packet(Ipv4Addr::new(10, 45, 0, 99), *DN.ip(), 1, DN.port(), b"spoof")), s1u)
        .unwrap();
    enb.send_to(&gtpu::gpdu(0x100, &udp_packet(UE, *DN.ip(), 4000, DN.port(), b"ok")), s1u).unwrap();
    let (n, _) = dn.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"ok");
    assert_eq!(run.plane.lock().counters.value("upf_ul_spoofed"), 1);
    tshark_clean(&seen);
    run.plane.remove(1).unwrap();
    drop(run);
}

#[test]
fn buffered_downlink_released_in_order_over_sockets() {
    let Some(t) = Topo::new() else { return };
    let mut run = start(&t);
    run.plane.install(1, &rules(Action { buff: true, nocp: true, ..Action::default() })).unwrap();
    let enb = udp_in(&t.enb, SocketAddrV4::new(ENB, gtpu::PORT));
    let dn = udp_in(&t.dn, DN);
    for i in 0..100u16 {
        dn.send_to(&i.to_be_bytes(), SocketAddrV4::new(UE, 4000)).unwrap();
    }
    // Wait (no timing assertion) until all 100 are held.
    let deadline = Instant::now() + Duration::from_secs(20);
    while run.plane.lock().counters.value("upf_buffered") < 100 {
        assert!(Instant::now() < deadline, "buffered {}", run.plane.lock().counters.value("upf_buffered"));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(matches!(run.plane.poll_report(), Some(crate::rules::PlaneReport::DownlinkData { up_seid: 1, pdr_id: 2 })));
    run.plane.update(1, &rules(Action { forw: true, ..Action::default() })).unwrap();
    let mut buf = [0u8; 2048];
    for i in 0..100u16 {
        let (n, _) = enb.recv_from(&mut buf).unwrap();
        let r = gtpu::parse(&buf[..n]).unwrap();
        let Body::GPdu(ip) = r.body else { panic!() };
        assert_eq!(&ip[28..], &i.to_be_bytes(), "packet {i} in order");
    }
    assert_eq!(run.plane.lock().buffered(1), (0, 0));
}

/// `datapath = "auto"` without an XDP interface falls back to the
/// user-space data path, opened in the configured namespaces.
#[test]
fn upf_auto_falls_back_to_userspace() {
    let Some(t) = Topo::new() else { return };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let cfg = crate::UpfConfig {
            pfcp: "127.0.0.1:0".parse().unwrap(),
            s1u_addr: Ipv4Addr::new(10, 200, 1, 1),
            datapath: crate::DatapathKind::Auto,
            access_netns: Some(t.upf.clone()),
            core_netns: Some(t.upf.clone()),
            tun_name: t.tun.clone(),
            ue_pools: vec!["10.45.0.0/24".into()],
            ..crate::UpfConfig::default()
        };
        let upf = crate::Upf::bind(cfg).await.expect("binds");
        assert!(!upf.xdp_loaded());
        assert!(upf.userspace_plane().is_some());
        assert_eq!(upf.counters.value("upf_xdp_fallback"), 1);
    });
}

fn set_int(s: &UdpSocket, level: libc::c_int, opt: libc::c_int, v: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt with a valid fd and an int option value.
    let r = unsafe { libc::setsockopt(s.as_raw_fd(), level, opt, (&v as *const libc::c_int).cast(), 4) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// S1-U MTU 1000: a 1200-octet DF datagram from the data network is
/// answered with ICMP Fragmentation Needed (next-hop MTU 964) which the
/// sender's kernel accepts, a non-DF one arrives at the eNB as two inner
/// fragments each in a G-PDU within the MTU; tshark reads both clean.
#[test]
fn s1u_mtu_icmp_reaches_the_sender_and_fragments_reach_the_enb() {
    use std::os::fd::{AsRawFd, FromRawFd};
    let Some(t) = Topo::new() else { return };
    let mut run = start_with(&t, DatapathConfig { s1u_mtu: 1000, ..DatapathConfig::default() });
    run.plane.install(1, &rules(Action { forw: true, ..Action::default() })).unwrap();
    let enb = udp_in(&t.enb, SocketAddrV4::new(ENB, gtpu::PORT));
    let dn = udp_in(&t.dn, DN);
    // A raw ICMP socket in dn sees the ICMP message as it arrived.
    let raw = in_netns(Some(&t.dn), || {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is owned by the UdpSocket-shaped
        // wrapper only for its read timeout and recv.
        Ok(unsafe { UdpSocket::from_raw_fd(fd) })
    })
    .unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    dn.connect(SocketAddrV4::new(UE, 4000)).unwrap();
    set_int(&dn, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO);
    dn.send(&[7u8; 1200]).unwrap();
    let mut buf = [0u8; 2048];
    let n = raw.recv(&mut buf).unwrap();
    let icmp = buf[..n].to_vec();
    let ihl = (icmp[0] & 0x0f) as usize * 4;
    assert_eq!((icmp[ihl], icmp[ihl + 1]), (3, 4), "{icmp:?}");
    assert_eq!(u16::from_be_bytes([icmp[ihl + 6], icmp[ihl + 7]]), 964);
    assert_eq!(run.plane.lock().counters.value("upf_icmp_frag_needed"), 1);
    // The sender's kernel took it: its path MTU to the UE is now 964. The
    // raw socket gets its copy before the kernel's own ICMP handling runs
    // (on another CPU, possibly still running), so wait for it briefly.
    let path_mtu = || {
        let mut mtu: libc::c_int = 0;
        let mut len = 4 as libc::socklen_t;
        // SAFETY: getsockopt into an int we own.
        unsafe {
            libc::getsockopt(
                dn.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_MTU,
                (&mut mtu as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        mtu
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while path_mtu() != 964 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(path_mtu(), 964);
    // DF clear: inner fragments, each G-PDU within 1000 octets of IPv4.
    set_int(&dn, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DONT);
    // The ICMP is also pending on the connected socket as EMSGSIZE
    // (reported once, by the next call).
    if let Err(e) = dn.send(&[9u8; 1200]) {
        assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE));
        dn.send(&[9u8; 1200]).unwrap();
    }
    let mut seen = vec![];
    let mut data = vec![];
    let mut kernel_frags = 0;
    while data.len() < 1208 {
        let (n, _) = enb.recv_from(&mut buf).unwrap();
        assert!(n + 28 <= 1000, "outer packet of {} octets", n + 28);
        let r = gtpu::parse(&buf[..n]).unwrap();
        let Body::GPdu(ip) = r.body else { panic!("{r:?}") };
        let i = super::ipv4::parse(ip).unwrap();
        assert!(i.fragment && i.dst == UE);
        data.extend_from_slice(&ip[20..]);
        kernel_frags += 1;
        seen.push(buf[..n].to_vec());
    }
    // The dn kernel itself may already split at its learnt 964: either
    // way, every piece fits and the UDP datagram is complete.
    assert!(kernel_frags >= 2);
    assert_eq!(data.len(), 1208);
    tshark_clean(&seen);
    if let Some(text) = tshark_raw(&[icmp]) {
        assert!(text.contains("Fragmentation needed"), "{text}");
    }
    drop(run);
}

#[test]
fn ipv6_round_trip_enb_upf_dn_and_router_advertisement() {
    let Some(t) = Topo::new() else { return };
    // IPv6 between the UPF and the data network (no DAD: usable at once);
    // the UE pool 2001:db8:45::/48 is routed back through the UPF.
    let (upf_dev, dn_dev) = (format!("mvc{}", &t.tun[3..]), format!("mvd{}", &t.tun[3..]));
    sh(&["ip", "-n", &t.upf, "addr", "add", "2001:db8:200::1/64", "dev", &upf_dev, "nodad"]);
    sh(&["ip", "-n", &t.dn, "addr", "add", "2001:db8:200::2/64", "dev", &dn_dev, "nodad"]);
    sh(&["ip", "-n", &t.dn, "route", "add", "2001:db8:45::/48", "via", "2001:db8:200::1"]);
    let plane = UserspacePlane::new(
        DatapathConfig { s1u_addr: Ipv4Addr::new(10, 200, 1, 1), ..DatapathConfig::default() },
        Counters::new(),
    );
    let cfg = IoConfig {
        s1u: SocketAddrV4::new(Ipv4Addr::new(10, 200, 1, 1), gtpu::PORT),
        access_netns: Some(t.upf.clone()),
        core_netns: Some(t.upf.clone()),
        tun_name: t.tun.clone(),
        ue_pools: vec!["10.45.0.0/24".into(), "2001:db8:45::/48".into()],
    };
    let (mut run, _) = run_io(plane, cfg, None);
    let ue6: Ipv6Addr = "2001:db8:45:0:1::7".parse().unwrap();
    let mut r = rules(Action { forw: true, ..Action::default() });
    for p in r.pdrs.values_mut() {
        p.pdi.ue_ipv6 = Some(ue6);
    }
    run.plane.install(1, &r).unwrap();
    let enb = udp_in(&t.enb, SocketAddrV4::new(ENB, gtpu::PORT));
    let dn6 = SocketAddrV6::new("2001:db8:200::2".parse().unwrap(), 5000, 0, 0);
    let dn = in_netns(Some(&t.dn), move || UdpSocket::bind(dn6)).unwrap();
    dn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let s1u = SocketAddrV4::new(Ipv4Addr::new(10, 200, 1, 1), gtpu::PORT);
    let mut seen = vec![];
    let mut buf = [0u8; 2048];
    for i in 0..5u8 {
        let inner = super::ipv6::udp_packet(ue6, *dn6.ip(), 4000, dn6.port(), &[b'u', i]);
        enb.send_to(&gtpu::gpdu(0x100, &inner), s1u).unwrap();
        let (n, from) = dn.recv_from(&mut buf).expect("the uplink datagram reaches the data network");
        assert_eq!((&buf[..n], from), (&[b'u', i][..], SocketAddr::V6(SocketAddrV6::new(ue6, 4000, 0, 0))));
        dn.send_to(&[b'd', i], from).unwrap();
        let (n, _) = enb.recv_from(&mut buf).expect("the reply comes down the tunnel");
        let r = gtpu::parse(&buf[..n]).unwrap();
        assert_eq!(r.header.teid, 0x900);
        let Body::GPdu(ip) = r.body else { panic!("{r:?}") };
        let i6 = super::ipv6::parse(ip).unwrap();
        assert_eq!((i6.src, i6.dst, &ip[48..]), (*dn6.ip(), ue6, &[b'd', i][..]));
        seen.push(buf[..n].to_vec());
    }
    // A Router Solicitation from the UE's link-local address: the prefix comes back.
    let ll: Ipv6Addr = "fe80::1:0:0:7".parse().unwrap();
    enb.send_to(&gtpu::gpdu(0x100, &super::ipv6::router_solicitation(ll)), s1u).unwrap();
    let (n, _) = enb.recv_from(&mut buf).expect("a Router Advertisement");
    let r = gtpu::parse(&buf[..n]).unwrap();
    let Body::GPdu(ra) = r.body else { panic!("{r:?}") };
    assert_eq!((ra[40], &ra[72..80]), (134, &ue6.octets()[..8]));
    seen.push(buf[..n].to_vec());
    assert_eq!(run.plane.lock().counters.value("upf_ipv6_router_advertisement"), 1);
    tshark_clean(&seen);
}
