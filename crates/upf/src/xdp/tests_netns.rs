//! Namespace test: ran --veth-- upf (XDP) --veth-- dn. Real GTP-U sent with
//! a UDP socket in `ran` arrives decapsulated at a UDP socket in `dn`,
//! forwarded by XDP alone (IP forwarding stays off in the middle).

use super::tests::{inner_udp, is_root, DN, S1U, UE};
use super::*;
use mobicore_gtp::gtpu::{Body, Extension, HeaderRepr, Repr};
use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub(super) static SEQ: AtomicU32 = AtomicU32::new(0);

pub(super) fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// Namespaces deleted on drop (their veths, and XDP on them, go too).
pub(super) struct Netns(pub(super) Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Runs f on a thread that has entered network namespace `ns`.
pub(super) fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open netns");
        // SAFETY: valid fd; only this thread changes namespace.
        assert_eq!(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns");
        f()
    })
    .join()
    .expect("namespace thread")
}

#[test]
fn gtpu_from_ran_arrives_decapsulated_in_dn() {
    if !is_root() {
        eprintln!("note: skipped, network namespaces need root");
        return;
    }
    let id = format!("mct-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    let (r, u, d) = (format!("{id}-ran"), format!("{id}-upf"), format!("{id}-dn"));
    let guard = Netns(vec![r.clone(), u.clone(), d.clone()]);
    for n in &guard.0 {
        ip(&["netns", "add", n]);
    }
    ip(&["link", "add", "vr0", "netns", &r, "type", "veth", "peer", "name", "vu0", "netns", &u]);
    ip(&["link", "add", "vu1", "netns", &u, "type", "veth", "peer", "name", "vd0", "netns", &d]);
    ip(&["-n", &u, "link", "set", "vu1", "address", "02:00:00:00:00:b1"]);
    ip(&["-n", &d, "link", "set", "vd0", "address", "02:00:00:00:00:d0"]);
    for (ns, dev, addr) in [
        (&r, "vr0", "172.16.0.2/24"),
        (&u, "vu0", "172.16.0.1/24"),
        (&u, "vu1", "192.0.2.1/24"),
        (&d, "vd0", "192.0.2.10/24"),
    ] {
        ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
        ip(&["-n", ns, "link", "set", dev, "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    ip(&["-n", &d, "route", "add", "10.45.0.0/16", "via", "192.0.2.1"]);

    // dn: XDP_PASS on the peer of the redirect target (the veth pitfall), and the receiver.
    let (pass, rx) = in_ns(&d, || {
        let mut pass = baseline::load_pass().expect("load pass");
        pass.attach("vd0", AttachMode::Native).expect("attach pass");
        let rx = UdpSocket::bind("192.0.2.10:9000").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        (pass, rx)
    });
    // upf: the fast path on vu0, next hop for DN cached towards vu1.
    let plane = in_ns(&u, || {
        let mut p =
            XdpPlane::load(XdpConfig { no_fib: true, sizes: MapSizes::small(), ..XdpConfig::new(S1U) }).expect("load");
        p.attach("vu0", AttachMode::Native).expect("attach upf_xdp");
        let vu1 = ifindex("vu1").unwrap();
        p.set_next_hop(DN, NextHop { ifindex: vu1, dmac: [2, 0, 0, 0, 0, 0xd0], smac: [2, 0, 0, 0, 0, 0xb1] }).unwrap();
        p.install(
            1,
            &tests::bearer(
                crate::rules::Action { forw: true, ..Default::default() },
                crate::rules::Qer { id: 1, gate_ul_open: true, gate_dl_open: true, mbr: None, qfi: None },
            ),
        )
        .unwrap();
        p
    });
    let tx = in_ns(&r, || UdpSocket::bind("172.16.0.2:2152").unwrap());

    let inner = inner_udp(UE, DN, 9000, 0);
    let payload = b"through the tunnel";
    let mut inner_pkt = inner[..20].to_vec();
    let udp_len = (8 + payload.len()) as u16;
    inner_pkt.extend_from_slice(&[0x9c, 0x40, 0x23, 0x28]); // 40000 -> 9000
    inner_pkt.extend_from_slice(&udp_len.to_be_bytes());
    inner_pkt.extend_from_slice(&[0, 0]);
    inner_pkt.extend_from_slice(payload);
    let tot = inner_pkt.len() as u16;
    inner_pkt[2..4].copy_from_slice(&tot.to_be_bytes());
    inner_pkt[10..12].copy_from_slice(&[0, 0]);
    let c = mobicore_common::inet::checksum(&inner_pkt[..20]);
    inner_pkt[10..12].copy_from_slice(&c.to_be_bytes());
    // G-PDU with S flag and a PDU session container.
    let header = HeaderRepr::gpdu(tests::TEID).with_seq(1).with_extension(Extension::pdu_session_container(true, 5));
    let gpdu = Repr { header, body: Body::GPdu(&inner_pkt) }.to_vec();

    let mut buf = [0u8; 2048];
    let mut got = None;
    for _ in 0..5 {
        tx.send_to(&gpdu, SocketAddrV4::new(S1U, 2152)).unwrap();
        if let Ok((n, from)) = rx.recv_from(&mut buf) {
            got = Some((buf[..n].to_vec(), from));
            break;
        }
    }
    let (data, from) = got.expect("no decapsulated packet arrived in dn");
    assert_eq!(data, payload);
    assert_eq!(from, std::net::SocketAddr::from(SocketAddrV4::new(UE, 40000)));
    assert!(plane.counter(Counter::UlFwd).unwrap() >= 1);
    assert!(plane.counter(Counter::NhCacheHit).unwrap() >= 1);
    assert_eq!(plane.urr_usage(1, 1).unwrap().ul_bytes % inner_pkt.len() as u64, 0);
    drop(plane);
    drop(pass);
    drop(guard);
}

/// The MTU checked after encapsulation is the egress device's: read when
/// the device is added, followed when it changes (the refresh runs on the
/// neighbour tick, here from a thread outside the namespace).
#[test]
fn oversize_check_uses_the_egress_device_mtu() {
    if !is_root() {
        eprintln!("note: skipped, network namespaces need root");
        return;
    }
    let id = format!("mct-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    let u = format!("{id}-mtu");
    let guard = Netns(vec![u.clone()]);
    ip(&["netns", "add", &u]);
    ip(&["link", "add", "vm0", "netns", &u, "type", "veth", "peer", "name", "vm1", "netns", &u]);
    ip(&["-n", &u, "link", "set", "vm0", "mtu", "1400"]);
    let mut plane = in_ns(&u, || {
        let mut p = XdpPlane::load(XdpConfig { mtu: 0, no_fib: true, sizes: MapSizes::small(), ..XdpConfig::new(S1U) })
            .expect("load");
        p.add_egress(ifindex("vm0").unwrap()).unwrap();
        // ifindex 1 (lo): the BPF_PROG_RUN ingress, so XDP_TX.
        p.set_next_hop(tests::ENB, NextHop { ifindex: 1, dmac: [2, 0, 0, 0, 0, 0xd], smac: [2, 0, 0, 0, 0, 5] })
            .unwrap();
        p.install(
            1,
            &tests::bearer(
                crate::rules::Action { forw: true, ..Default::default() },
                crate::rules::Qer { id: 1, gate_ul_open: true, gate_dl_open: true, mbr: None, qfi: None },
            ),
        )
        .unwrap();
        p
    });
    assert_eq!(plane.mtu(), 1400);
    let prog = |p: &XdpPlane, tot: usize| {
        p.program().unwrap().test_run(&tests::eth(&inner_udp(tests::DN, UE, 5000, tot - 28))).unwrap().0
    };
    assert_eq!(prog(&plane, 1400 - 36), 3, "fits exactly: XDP_TX");
    assert_eq!(prog(&plane, 1400 - 35), 2, "one octet over: XDP_PASS");
    assert_eq!(plane.counter(Counter::PassOversize).unwrap(), 1);
    ip(&["-n", &u, "link", "set", "vm0", "mtu", "1300"]);
    plane.set_neighbours(&[]);
    assert_eq!(plane.mtu(), 1300);
    assert_eq!(prog(&plane, 1300 - 35), 2);
    assert_eq!(plane.counter(Counter::PassOversize).unwrap(), 2);
    drop(plane);
    drop(guard);
}
