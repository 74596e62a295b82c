//! AF_XDP over a veth pair in namespaces this test creates
//! (`mct-<pid>-<n>-src` --veth-- `mct-<pid>-<n>-upf`): the UPF program on
//! the upf side with a buffering session redirects the UE's packets into an
//! [`XskSocket`]; the exact bytes sent from the peer arrive, in order.
//! Skipped unless root.

use super::*;
use crate::dataplane::io::in_netns;
use crate::rules::{Action, Far, PacketDetection, Pdr, SessionRules, INTERFACE_ACCESS, INTERFACE_CORE};
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
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
            eprintln!("note: skipped, needs root and iproute2");
            return None;
        }
        let id = format!("mct-{}-x{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let p = Pair { src: format!("{id}-src"), upf: format!("{id}-upf") };
        ip(&["netns", "add", &p.src]);
        ip(&["netns", "add", &p.upf]);
        ip(&["link", "add", "xa", "netns", &p.src, "type", "veth", "peer", "name", "xb", "netns", &p.upf]);
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
    let pdi = PacketDetection { source_interface: INTERFACE_CORE, local_fteid: None, choose_fteid: false, ue_ipv4: Some(UE), network_instance: None, sdf_filters: 0, flows: vec![] };
    let mut r = SessionRules::default();
    r.pdrs.insert(2, Pdr { id: 2, precedence: 100, pdi, outer_header_removal: None, far_id: Some(2), qer_ids: vec![], urr_ids: vec![] });
    r.fars.insert(2, Far { id: 2, action: dl, destination_interface: Some(INTERFACE_ACCESS), network_instance: None, outer_header_creation: None, bar_id: None });
    r
}

#[test]
fn buffered_downlink_arrives_on_the_xsk_with_exact_bytes() {
    let Some(pair) = Pair::new() else { return };
    let (mut plane, mut socks) = in_netns(Some(&pair.upf), || {
        let mut p = XdpPlane::load(XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(UPF) }).map_err(std::io::Error::other)?;
        p.attach("xb", AttachMode::Native).map_err(std::io::Error::other)?;
        let socks = open_for_plane(&mut p, "xb", 64).map_err(std::io::Error::other)?;
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
    let st = socks[0].stats().unwrap();
    assert_eq!((st.rx_dropped, st.rx_ring_full), (0, 0));

    // Closing the socket takes it out of the map: the program falls back to
    // XDP_PASS (the kernel route), nothing is lost in a dead socket.
    socks.clear();
    tx.send_to(b"after", SocketAddrV4::new(UE, 5000)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while plane.counter(Counter::PassBuffer).unwrap() < 6 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
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
