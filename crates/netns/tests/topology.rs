//! Namespace tests: they need root and create only namespaces named
//! `mct<pid>-<n>-*`, removed even when a test fails.

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener, UdpSocket};
use std::path::Path;
use std::time::Duration;

use mobicore_netns::{cleanup_stale, exec_in, ip, run_in, sock, spawn_in, unique_tag, NetnsError, Topology};

fn exists(ns: &str) -> bool {
    Path::new(&format!("/run/netns/{ns}")).exists()
}

#[test]
fn create_then_destroy_removes_every_namespace() {
    let mut t = Topology::create(&unique_tag("mct")).unwrap();
    let names = t.namespaces().to_vec();
    assert_eq!(names, vec![t.ran.clone(), t.core.clone(), t.dn.clone()]);
    assert!(names.iter().all(|n| exists(n)));
    let out = exec_in(&t.core, &["ip", "-4", "addr", "show"]).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("10.200.1.2/30") && text.contains("10.200.2.1/30"), "{text}");
    let fwd = exec_in(&t.core, &["cat", "/proc/sys/net/ipv4/ip_forward"]).unwrap();
    assert_eq!(String::from_utf8_lossy(&fwd.stdout).trim(), "1");
    let routes = exec_in(&t.dn, &["ip", "route"]).unwrap();
    assert!(String::from_utf8_lossy(&routes.stdout).contains("10.44.0.0/14 via 10.200.2.1"));
    t.destroy().unwrap();
    assert!(names.iter().all(|n| !exists(n)));
    assert!(t.namespaces().is_empty());
    t.destroy().unwrap(); // idempotent
}

#[test]
fn drop_cleans_up_on_panic() {
    let tag = unique_tag("mct");
    let tag2 = tag.clone();
    let r = std::panic::catch_unwind(move || {
        let _t = Topology::create(&tag2).unwrap();
        assert!(exists(&format!("{tag2}-core")));
        panic!("test failure inside the topology");
    });
    assert!(r.is_err());
    for n in ["ran", "core", "dn"] {
        assert!(!exists(&format!("{tag}-{n}")), "{n} left behind");
    }
}

#[test]
fn failed_create_removes_what_it_made() {
    let tag = unique_tag("mct");
    // An address that is not a valid prefix length makes the veth step fail.
    let addr = mobicore_netns::Addressing { s1u_prefix: 33, ..Default::default() };
    let e = Topology::create_with(&tag, addr).unwrap_err();
    assert!(matches!(e, NetnsError::Command { .. }), "{e}");
    for n in ["ran", "core", "dn"] {
        assert!(!exists(&format!("{tag}-{n}")));
    }
}

/// ran -> core -> dn with plain kernel forwarding: UDP and TCP from a
/// socket opened in `ran` to servers in `dn`.
#[test]
fn kernel_forwarding_across_namespaces() {
    let t = Topology::create(&unique_tag("mct")).unwrap();
    let a = t.addr;
    ip(&["-n", &t.ran, "route", "add", &a.dn_sgi.to_string(), "via", &a.core_s1u.to_string()]).unwrap();
    ip(&["-n", &t.dn, "route", "add", "10.200.1.0/30", "via", &a.core_sgi.to_string()]).unwrap();

    let dn = a.dn_sgi;
    let udp = run_in(&t.dn, move || UdpSocket::bind((dn, 7000))).unwrap().unwrap();
    let tcp = run_in(&t.dn, move || TcpListener::bind((dn, 7001))).unwrap().unwrap();
    let server = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let (n, from) = udp.recv_from(&mut buf).unwrap();
        udp.send_to(&buf[..n], from).unwrap();
        let (mut c, _) = tcp.accept().unwrap();
        let mut all = Vec::new();
        c.read_to_end(&mut all).unwrap();
        all.len()
    });
    let ran_addr = a.ran_s1u;
    let (echo, from) = run_in(&t.ran, move || {
        let s = UdpSocket::bind((ran_addr, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.send_to(b"hello", (dn, 7000)).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = s.recv_from(&mut buf).unwrap();
        let mut c =
            sock::tcp_connect_from(SocketAddrV4::new(ran_addr, 0), SocketAddrV4::new(dn, 7001), Duration::from_secs(5))
                .unwrap();
        c.write_all(&vec![7u8; 100_000]).unwrap();
        (buf[..n].to_vec(), from)
    })
    .unwrap();
    assert_eq!(echo, b"hello");
    assert_eq!(from.ip(), std::net::IpAddr::V4(dn));
    assert_eq!(server.join().unwrap(), 100_000);
}

#[test]
fn spawn_in_enters_the_namespace() {
    let t = Topology::create(&unique_tag("mct")).unwrap();
    let h = spawn_in(&t.dn, "probe", || std::fs::read_to_string("/proc/thread-self/net/dev").unwrap()).unwrap();
    let devs = h.join().unwrap().unwrap();
    assert!(devs.contains("sgi:"), "{devs}");
    assert!(!devs.contains("s1u:"));
    assert!(matches!(run_in("mct-no-such-namespace", || ()), Err(NetnsError::Enter { .. })));
}

#[test]
fn cleanup_stale_removes_only_namespaces_of_dead_processes() {
    let prefix = format!("mcs{}x", std::process::id());
    // pid 999999999 is above any pid_max.
    let dead = format!("{prefix}999999999-ran");
    let live = format!("{prefix}{}-ran", std::process::id());
    ip(&["netns", "add", &dead]).unwrap();
    ip(&["netns", "add", &live]).unwrap();
    let deleted = cleanup_stale(&prefix);
    let _ = ip(&["netns", "del", &live]);
    let _ = ip(&["netns", "del", &dead]);
    assert_eq!(deleted.unwrap(), vec![dead.clone()]);
}

#[test]
fn tun_device_lives_in_the_namespace_it_was_created_in() {
    let t = Topology::create(&unique_tag("mct")).unwrap();
    let tun = run_in(&t.ran, || mobicore_netns::Tun::create("ue0")).unwrap().unwrap();
    assert_eq!(tun.name(), "ue0");
    ip(&["-n", &t.ran, "link", "set", "ue0", "up"]).unwrap();
    let out = exec_in(&t.ran, &["ip", "link", "show", "ue0"]).unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("ue0"));
    assert!(ip(&["link", "show", "ue0"]).is_err(), "not in the test's own namespace");
    // Non-blocking: drain whatever the kernel sent (IPv6 link setup), then
    // WouldBlock rather than a hang.
    let mut buf = [0u8; 1500];
    let mut reads = 0;
    let end = loop {
        match tun.recv(&mut buf) {
            Ok(_) if reads < 100 => reads += 1,
            other => break other,
        }
    };
    assert_eq!(end.map_err(|e| e.kind()).err(), Some(std::io::ErrorKind::WouldBlock));
}

/// A datagram from `from` reaches `to_addr` in namespace `to`. The
/// receiver takes a port of the kernel's choosing: a fixed one, bound
/// again at once for the next pair, was once still held (EADDRINUSE) by a
/// process another test had just forked, before its exec closed the
/// copy of the descriptor.
fn udp_reaches(from: &str, to: &str, to_addr: std::net::Ipv4Addr) -> bool {
    let rx = run_in(to, move || UdpSocket::bind(SocketAddrV4::new(to_addr, 0))).unwrap().unwrap();
    let dst = rx.local_addr().unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let tx = run_in(from, || UdpSocket::bind("0.0.0.0:0")).unwrap().unwrap();
    tx.send_to(b"hello", dst).unwrap();
    let mut buf = [0u8; 16];
    matches!(rx.recv_from(&mut buf), Ok((5, _)))
}

#[test]
fn edge_topology_routes_through_the_steering_switch() {
    let mut t = Topology::create_edge(&unique_tag("mct"), 2).unwrap();
    let steer = t.steer.clone().unwrap();
    assert_eq!(t.namespaces().len(), 6);
    assert_eq!(t.sites.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["edge1", "edge2"]);
    // The eNB reaches the core's and each site's S1-U address through
    // `steer` (kernel forwarding here; the steering XDP program is the UPF's).
    assert!(udp_reaches(&t.ran, &t.core, t.addr.core_s1u));
    for s in &t.sites {
        assert!(udp_reaches(&t.ran, &s.ns, s.s1u), "ran -> {}", s.name);
        assert!(udp_reaches(&s.ns, &t.ran, t.addr.ran_s1u), "{} -> ran", s.name);
        // The data network reaches each site's SGi.
        assert!(udp_reaches(&t.dn, &s.ns, s.sgi), "dn -> {}", s.name);
    }
    let names = t.namespaces().to_vec();
    assert!(names.contains(&steer));
    t.destroy().unwrap();
    assert!(names.iter().all(|n| !exists(n)));
}
