//! Namespace test of the steering role: enb --veth-- steer (XDP
//! `steer_xdp`, programmed by PFCP through the sans-I/O node) --veth-- core
//! (the original anchor), and steer --veth-- edge (the new anchor). Real
//! G-PDUs from UDP sockets on port 2152; every check waits for its packet
//! with a multi-second limit.

use super::tests::is_root;
use super::tests_netns::{in_ns, ip, Netns, SEQ};
use super::*;
use crate::config::{UpfConfig, UpfRole};
use crate::node::UpfCore;
use crate::pfcp::{decode, encode, first, msg};
use crate::rules::{Diversion, PlaneError, SessionRules};
use mobicore_common::counters::Counters;
use mobicore_common::inet::{checksum, Sum};
use mobicore_pfcp::steering::{deletion_request, establishment_request, modification_request, FlowFilter};
use rs_pfcp::ie::fseid::Fseid;
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::recovery_time_stamp::RecoveryTimeStamp;
use rs_pfcp::ie::IeType;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

const ENB: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
const STEER: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const CORE: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 2);
const EDGE: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 2);
const UE1: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 2);
const UE2: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 3);
const REPLICA_UE1: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const CP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// The XDP plane shared between the node (which programs it) and the test
/// (which reads its counters).
struct Shared(Arc<Mutex<XdpPlane>>);

impl crate::rules::ForwardingPlane for Shared {
    fn install(&mut self, s: u64, r: &SessionRules) -> Result<(), PlaneError> {
        self.0.lock().unwrap().install(s, r)
    }
    fn update(&mut self, s: u64, r: &SessionRules) -> Result<(), PlaneError> {
        self.0.lock().unwrap().update(s, r)
    }
    fn remove(&mut self, s: u64) -> Result<(), PlaneError> {
        self.0.lock().unwrap().remove(s)
    }
    fn install_diversion(&mut self, s: u64, d: &Diversion) -> Result<(), PlaneError> {
        self.0.lock().unwrap().install_diversion(s, d)
    }
    fn remove_diversion(&mut self, s: u64) -> Result<(), PlaneError> {
        self.0.lock().unwrap().remove_diversion(s)
    }
}

/// An inner IPv4/UDP packet with valid IPv4 and UDP checksums.
pub(super) fn inner(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = crate::dataplane::ipv4::udp_packet(src, dst, sport, dport, payload);
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    let c = udp_sum(&p).finish();
    p[26..28].copy_from_slice(&if c == 0 { 0xffff } else { c }.to_be_bytes());
    p
}

/// The UDP checksum sum over the pseudo-header and the datagram.
fn udp_sum(p: &[u8]) -> Sum {
    let len = (p.len() - 20) as u16;
    let mut pseudo = p[12..20].to_vec();
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&len.to_be_bytes());
    Sum::new().feed(&pseudo).feed(&p[20..])
}

/// Both checksums of an inner IPv4/UDP packet verify.
pub(super) fn checksums_ok(p: &[u8]) -> bool {
    checksum(&p[..20]) == 0 && udp_sum(p).finish() == 0
}

pub(super) fn gpdu(teid: u32, inner: &[u8]) -> Vec<u8> {
    mobicore_gtp::gtpu::gpdu(teid, inner)
}

/// The TEID and T-PDU of a G-PDU.
pub(super) fn open(g: &[u8]) -> (u32, Vec<u8>) {
    let r = mobicore_gtp::gtpu::parse(g).expect("a G-PDU");
    match r.body {
        mobicore_gtp::gtpu::Body::GPdu(b) => (r.header.teid, b.to_vec()),
        _ => panic!("not a G-PDU"),
    }
}

struct Node {
    core: UpfCore,
    seq: u32,
}

impl Node {
    /// A request from the controller; the answer's cause and UP SEID.
    fn request(&mut self, b: &[u8]) -> (u8, Option<u64>) {
        let from = SocketAddr::from(SocketAddrV4::new(CP, 8805));
        self.core.handle_datagram(Instant::now(), from, b);
        let (_, out) = self.core.poll_transmit().expect("an answer");
        let (_, ies) = decode(&out).unwrap();
        let cause = first(&ies, IeType::Cause).map(|c| c.payload[0]).unwrap();
        let seid = first(&ies, IeType::Fseid).map(|f| u64::from(Fseid::unmarshal(&f.payload).unwrap().seid));
        (cause, seid)
    }
    fn next(&mut self) -> u32 {
        self.seq += 1;
        self.seq
    }
}

/// Reads away whatever `rx` holds (copies of earlier retransmissions).
pub(super) fn drain(rx: &UdpSocket) {
    rx.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    while rx.recv_from(&mut buf).is_ok() {}
    rx.set_nonblocking(false).unwrap();
}

/// Sends `pkt` from `tx` to `to` until `rx` gets the packet `want` accepts
/// (once per 200 ms, for 5 s at most: the first may meet an unresolved
/// neighbour).
fn deliver(
    tx: &UdpSocket,
    to: Ipv4Addr,
    pkt: &[u8],
    rx: &UdpSocket,
    want: impl Fn(&[u8], SocketAddr) -> bool,
) -> Option<(Vec<u8>, SocketAddr)> {
    deliver_to(tx, SocketAddrV4::new(to, 2152), pkt, rx, want)
}

/// [`deliver`] to any address and port.
pub(super) fn deliver_to(
    tx: &UdpSocket,
    to: SocketAddrV4,
    pkt: &[u8],
    rx: &UdpSocket,
    want: impl Fn(&[u8], SocketAddr) -> bool,
) -> Option<(Vec<u8>, SocketAddr)> {
    drain(rx);
    rx.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        tx.send_to(pkt, to).unwrap();
        while let Ok((n, from)) = rx.recv_from(&mut buf) {
            if want(&buf[..n], from) {
                return Some((buf[..n].to_vec(), from));
            }
        }
    }
    None
}

/// Nothing `want` accepts arrives on `rx` within 500 ms.
fn nothing(rx: &UdpSocket, want: impl Fn(&[u8], SocketAddr) -> bool) -> bool {
    rx.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        if let Ok((n, from)) = rx.recv_from(&mut buf) {
            if want(&buf[..n], from) {
                return false;
            }
        }
    }
    true
}

/// Four namespaces `[a, r, b, c]` (named `<prefix>-<pid>-<n>-<name>`): a
/// router `r` linked to `a` (10.1.0.0/24), `b` (10.2.0.0/24) and `c`
/// (10.3.0.0/24), `r` at .1 on `vs0`-`vs2`, the ends at .2 on `ve0`, `vc0`,
/// `vx0` with default routes through it; fixed MACs 02:00:00:00:0n:0m, the
/// router's neighbours permanent (its FIB lookups resolve at once, so
/// every packet stays in XDP) and IPv4 forwarding on.
pub(super) fn router_topology(prefix: &str, names: [&str; 4]) -> (Netns, [String; 4]) {
    let id = format!("{prefix}-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    let [e, s, c, x] = names.map(|n| format!("{id}-{n}"));
    let guard = Netns(vec![e.clone(), s.clone(), c.clone(), x.clone()]);
    for n in &guard.0 {
        ip(&["netns", "add", n]);
    }
    // Links with fixed MACs: (ns, dev, mac, addr) per end.
    let links = [
        ((&e, "ve0", "02:00:00:00:01:02", "10.1.0.2/24"), (&s, "vs0", "02:00:00:00:01:01", "10.1.0.1/24")),
        ((&s, "vs1", "02:00:00:00:02:01", "10.2.0.1/24"), (&c, "vc0", "02:00:00:00:02:02", "10.2.0.2/24")),
        ((&s, "vs2", "02:00:00:00:03:01", "10.3.0.1/24"), (&x, "vx0", "02:00:00:00:03:02", "10.3.0.2/24")),
    ];
    for (a, b) in &links {
        ip(&["link", "add", a.1, "netns", a.0, "type", "veth", "peer", "name", b.1, "netns", b.0]);
        for (ns, dev, mac, addr) in [a, b] {
            ip(&["-n", ns, "link", "set", dev, "address", mac]);
            ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        let (far, near) = if a.0 == &s { (b, a) } else { (a, b) };
        let nb = far.3.split('/').next().unwrap();
        ip(&["-n", &s, "neigh", "replace", nb, "lladdr", far.2, "dev", near.1, "nud", "permanent"]);
    }
    for (ns, gw) in [(&e, "10.1.0.1"), (&c, "10.2.0.1"), (&x, "10.3.0.1")] {
        ip(&["-n", ns, "route", "add", "default", "via", gw]);
    }
    let fwd = std::process::Command::new("ip")
        .args(["netns", "exec", &s, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        .status()
        .unwrap();
    assert!(fwd.success());
    (guard, [e, s, c, x])
}

#[test]
fn steering_diverts_ues_and_flows_in_xdp() {
    if !is_root() {
        eprintln!("note: skipped, network namespaces need root");
        return;
    }
    let (guard, [e, s, c, x]) = router_topology("mcs", ["enb", "steer", "core", "edge"]);

    // The end namespaces: XDP_PASS on each veth peer of a redirect target
    // (the veth pitfall) and a GTP-U socket.
    let mut ends = vec![];
    for (ns, dev, addr) in [(&e, "ve0", ENB), (&c, "vc0", CORE), (&x, "vx0", EDGE)] {
        let dev = dev.to_string();
        ends.push(in_ns(ns, move || {
            // A socket's UDP checksum is left to the device (partial), which
            // a frame redirected in XDP no longer has: computed here.
            mobicore_netns::set_tx_checksum(&dev, false).expect("tx checksum off");
            let mut pass = baseline::load_pass().expect("load pass");
            pass.attach(&dev, AttachMode::Native).expect("attach pass");
            (pass, UdpSocket::bind(SocketAddrV4::new(addr, 2152)).unwrap())
        }));
    }
    let plane = in_ns(&s, || {
        let cfg = XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(STEER) };
        let mut p = XdpPlane::load_role(cfg, Some(1024)).expect("load steer_xdp");
        for dev in ["vs0", "vs1", "vs2"] {
            p.attach(dev, AttachMode::Native).expect("attach steer_xdp");
        }
        Arc::new(Mutex::new(p))
    });
    let (enb, core, edge) = (&ends[0].1, &ends[1].1, &ends[2].1);
    let counter = |k: Counter| plane.lock().unwrap().counter(k).unwrap();

    // 1. No diversion: every G-PDU reaches the core untouched.
    let ul1 = gpdu(0x100, &inner(UE1, SERVER, 40000, 9000, b"ue1 uplink"));
    let ul2 = gpdu(0x101, &inner(UE2, SERVER, 40000, 9000, b"ue2 uplink"));
    for p in [&ul1, &ul2] {
        let got = deliver(enb, CORE, p, core, |b, _| b == &p[..])
            .unwrap_or_else(|| panic!("pass-through to core: {:?}", plane.lock().unwrap().counters()));
        assert_eq!(got.1, SocketAddr::from(SocketAddrV4::new(ENB, 2152)));
    }
    assert!(counter(Counter::SteerPass) >= 2);
    assert!(counter(Counter::NhFibHit) >= 2, "forwarded in XDP by FIB lookup");

    // The controller's association and a naive whole-UE diversion of UE1.
    let cfg = UpfConfig { role: UpfRole::Steering, s1u_addr: STEER, ..UpfConfig::default() };
    let plane_box = Box::new(Shared(plane.clone()));
    let mut node = Node { core: UpfCore::new(cfg, plane_box, SystemTime::now(), Counters::new()), seq: 0 };
    let setup = encode(
        msg::ASSOCIATION_SETUP_REQUEST,
        None,
        node.next(),
        &[NodeId::new_ipv4(CP).to_ie(), RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH).to_ie()],
    );
    assert_eq!(node.request(&setup).0, 1);
    let naive = Diversion { ue: UE1, flow: None, anchor: EDGE, anchor_teid: None, anchor_ue: None, origin: CORE };
    let seq = node.next();
    let (cause, seid) = node.request(&establishment_request(seq, CP, 1, CP, &naive));
    assert_eq!(cause, 1);
    let seid = seid.expect("UP F-SEID");

    // 2. Naive: UE1's G-PDUs reach the edge unchanged (TEID, inner packet);
    // UE2's still the core.
    let before = counter(Counter::SteerUplink);
    deliver(enb, CORE, &ul1, edge, |b, _| b == &ul1[..]).expect("UE1 diverted to edge");
    deliver(enb, CORE, &ul2, core, |b, _| b == &ul2[..]).expect("UE2 still to core");
    assert!(counter(Counter::SteerUplink) > before);
    // The edge's downlink reaches the eNB as if from the core.
    let dl1 = gpdu(0x200, &inner(SERVER, UE1, 9000, 40000, b"ue1 downlink"));
    let (_, from) = deliver(edge, ENB, &dl1, enb, |b, _| b == &dl1[..]).expect("downlink from edge");
    assert_eq!(from, SocketAddr::from(SocketAddrV4::new(CORE, 2152)), "outer source is the core's");
    assert!(counter(Counter::SteerDownlink) >= 1);

    // 3. Selective (a modification): TEID and inner source translated.
    let selective = Diversion { anchor_teid: Some(0x999), anchor_ue: Some(REPLICA_UE1), ..naive };
    let seq = node.next();
    assert_eq!(node.request(&modification_request(seq, seid, &selective)).0, 1);
    let (b, _) = deliver(enb, CORE, &ul1, edge, |b, _| open(b).0 == 0x999).expect("UE1 translated to edge");
    let (_, t) = open(&b);
    assert_eq!(Ipv4Addr::from(<[u8; 4]>::try_from(&t[12..16]).unwrap()), REPLICA_UE1);
    assert!(checksums_ok(&t), "inner checksums after translation");
    assert_eq!(&t[28..], b"ue1 uplink");
    let dl = gpdu(0x200, &inner(SERVER, REPLICA_UE1, 9000, 40000, b"replica downlink"));
    let (b, from) = deliver(edge, ENB, &dl, enb, |b, _| open(b).1.ends_with(b"replica downlink")).expect("downlink");
    assert_eq!(from, SocketAddr::from(SocketAddrV4::new(CORE, 2152)));
    let (teid, t) = open(&b);
    assert_eq!(teid, 0x200, "the downlink TEID is the eNB's");
    assert_eq!(Ipv4Addr::from(<[u8; 4]>::try_from(&t[16..20]).unwrap()), UE1);
    assert!(checksums_ok(&t));

    // 4. A flow diversion moves only its flow.
    let seq = node.next();
    assert_eq!(node.request(&deletion_request(seq, seid)).0, 1);
    let flow =
        FlowFilter { protocol: Some(17), remote: Some((SERVER, 32)), ue_ports: None, remote_ports: Some((9000, 9000)) };
    let seq = node.next();
    let (cause, seid) = node.request(&establishment_request(seq, CP, 2, CP, &Diversion { flow: Some(flow), ..naive }));
    assert_eq!(cause, 1);
    let other_flow = gpdu(0x100, &inner(UE1, SERVER, 40000, 9001, b"ue1 other flow"));
    deliver(enb, CORE, &ul1, edge, |b, _| b == &ul1[..]).expect("the flow to edge");
    deliver(enb, CORE, &other_flow, core, |b, _| b == &other_flow[..]).expect("another flow to core");

    // 5. Deleting the session restores pass-through.
    let seq = node.next();
    assert_eq!(node.request(&deletion_request(seq, seid.unwrap())).0, 1);
    drain(edge);
    deliver(enb, CORE, &ul1, core, |b, _| b == &ul1[..]).expect("UE1 back to core");
    assert!(nothing(edge, |b, _| b == &ul1[..]), "nothing more at the edge");
    assert!(counter(Counter::PassNoRoute) == 0, "no packet left through the kernel");

    drop(node);
    drop(plane);
    drop(ends);
    drop(guard);
}

/// The map values the diversions make (no kernel): a UE's flows before its
/// whole-UE diversion, one downlink entry per (anchor, address), all gone
/// with the sessions; the anchor role refuses diversions.
#[test]
fn diversions_fill_the_steering_maps_flows_first() {
    use super::maps::{be_addr, SteerDlKey, STEER_F_SDF, STEER_F_TEID, STEER_F_XLATE};
    use crate::rules::ForwardingPlane;
    let whole = Diversion { ue: UE1, flow: None, anchor: EDGE, anchor_teid: None, anchor_ue: None, origin: CORE };
    let flow = FlowFilter { protocol: Some(6), remote: None, ue_ports: Some((80, 80)), remote_ports: None };
    let one = Diversion { flow: Some(flow), anchor_teid: Some(7), anchor_ue: Some(REPLICA_UE1), ..whole };
    let mut p = XdpPlane::with_maps(MemoryMaps::default(), XdpConfig::new(STEER)).unwrap();
    assert!(matches!(p.install_diversion(1, &whole), Err(PlaneError::SteeringUnsupported)));
    p.enable_steering();
    p.install_diversion(1, &whole).unwrap();
    p.install_diversion(2, &one).unwrap();
    let set = p.maps().steer_ul[&be_addr(UE1)];
    assert_eq!(set.count, 2);
    assert_eq!(set.rules[0].flags, STEER_F_SDF | STEER_F_TEID | STEER_F_XLATE);
    assert_eq!((set.rules[0].teid, set.rules[0].anchor_ue), (7, be_addr(REPLICA_UE1)));
    assert_eq!((set.rules[0].sdf.proto, set.rules[0].sdf.sport_lo, set.rules[0].sdf.sport_hi), (6, 80, 80));
    assert_eq!(set.rules[1].flags, 0);
    let dl = |a: Ipv4Addr| SteerDlKey { anchor: be_addr(EDGE), dst: be_addr(a) };
    assert_eq!(p.maps().steer_dl[&dl(UE1)].origin, be_addr(CORE));
    assert_eq!(p.maps().steer_dl[&dl(REPLICA_UE1)].ue, be_addr(UE1));
    p.remove_diversion(1).unwrap();
    assert_eq!(p.maps().steer_ul[&be_addr(UE1)].count, 1);
    assert!(!p.maps().steer_dl.contains_key(&dl(UE1)));
    p.remove_diversion(2).unwrap();
    assert!(p.maps().steer_ul.is_empty() && p.maps().steer_dl.is_empty());
    assert!(matches!(p.remove_diversion(2), Err(PlaneError::NotFound(2))));
}
