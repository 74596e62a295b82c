//! Namespace test: a volume threshold Usage Report for traffic that only
//! the XDP fast path forwarded. ran --veth-- upf (XDP); the session is
//! installed through the PFCP node ([`UpfCore`]) with the XDP plane behind
//! it; G-PDUs sent from `ran` are decapsulated and sent back out of the
//! same veth by XDP (XDP_TX; `ran` drops them, it does not forward), and
//! the usage engine reads the per-CPU URR counters.

use super::tests::{inner_udp, is_root, DN, S1U, UE};
use super::tests_netns::{in_ns, ip, Netns, SEQ};
use super::*;
use crate::config::UpfConfig;
use crate::node::UpfCore;
use crate::pfcp::{decode, encode, first, msg};
use mobicore_common::counters::Counters;
use rs_pfcp::ie::apply_action::ApplyAction;
use rs_pfcp::ie::create_far::CreateFar;
use rs_pfcp::ie::create_pdr::CreatePdr;
use rs_pfcp::ie::create_urr::CreateUrr;
use rs_pfcp::ie::destination_interface::{DestinationInterface, Interface};
use rs_pfcp::ie::f_teid::Fteid;
use rs_pfcp::ie::far_id::FarId;
use rs_pfcp::ie::forwarding_parameters::ForwardingParameters;
use rs_pfcp::ie::fseid::Fseid;
use rs_pfcp::ie::measurement_method::MeasurementMethod;
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::outer_header_removal::OuterHeaderRemoval;
use rs_pfcp::ie::pdi::Pdi;
use rs_pfcp::ie::pdr_id::PdrId;
use rs_pfcp::ie::precedence::Precedence;
use rs_pfcp::ie::recovery_time_stamp::RecoveryTimeStamp;
use rs_pfcp::ie::reporting_triggers::ReportingTriggers;
use rs_pfcp::ie::source_interface::{SourceInterface, SourceInterfaceValue};
use rs_pfcp::ie::urr_id::UrrId;
use rs_pfcp::ie::usage_report::UsageReport;
use rs_pfcp::ie::usage_report_trigger::UsageReportTrigger;
use rs_pfcp::ie::volume_threshold::VolumeThreshold;
use rs_pfcp::ie::{Ie, IeType};
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The XDP plane shared between the PFCP node (which owns its plane) and
/// the test (which reads the program's counters or maps).
struct Shared<M: MapStore>(Arc<Mutex<XdpPlane<M>>>);

impl<M: MapStore> Clone for Shared<M> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<M: MapStore> ForwardingPlane for Shared<M> {
    fn install(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.0.lock().unwrap().install(up_seid, rules)
    }
    fn update(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.0.lock().unwrap().update(up_seid, rules)
    }
    fn remove(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        self.0.lock().unwrap().remove(up_seid)
    }
    fn usage(&self, up_seid: u64, urr_id: u32) -> Option<crate::urr::UsageCounts> {
        self.0.lock().unwrap().usage(up_seid, urr_id)
    }
    fn poll_maintenance(&self) -> Option<Instant> {
        self.0.lock().unwrap().poll_maintenance()
    }
    fn maintain(&mut self, now: Instant) {
        self.0.lock().unwrap().maintain(now)
    }
}

const TEID: u32 = 0x4242;
const THRESHOLD: u64 = 10_000;
const INNER: usize = 1000;
const PACKETS: usize = 12;

/// Association, then a session: uplink PDR by TEID with outer header
/// removal, FAR FORW to Core, URR 1 measuring volume with VOLTH at
/// [`THRESHOLD`] octets uplink. Returns the UP SEID.
fn establish(core: &mut UpfCore, now: Instant, smf: SocketAddr) -> u64 {
    let mut ask = |t: u8, seid: Option<u64>, seq: u32, ies: &[Ie]| {
        core.handle_datagram(now, smf, &encode(t, seid, seq, ies));
        let (to, b) = core.poll_transmit().expect("an answer");
        assert_eq!(to, smf);
        decode(&b).unwrap()
    };
    let node = NodeId::new_ipv4(Ipv4Addr::new(127, 0, 0, 2)).to_ie();
    let (_, ies) = ask(
        msg::ASSOCIATION_SETUP_REQUEST,
        None,
        1,
        &[node.clone(), RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH).to_ie()],
    );
    assert_eq!(first(&ies, IeType::Cause).unwrap().payload, vec![1]);

    let mut pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Access));
    pdi.f_teid = Some(Fteid::new(true, false, TEID, Some(S1U), None, 0));
    let mut pdr = CreatePdr::new(PdrId::new(1), Precedence::new(100), pdi);
    pdr.outer_header_removal = Some(OuterHeaderRemoval::new(0));
    pdr.far_id = Some(FarId::new(1));
    pdr.urr_ids = vec![UrrId::new(1)];
    let mut far = CreateFar::new(FarId::new(1), ApplyAction::new(0x02));
    far.forwarding_parameters = Some(ForwardingParameters::new(DestinationInterface::new(Interface::Core)));
    let mut urr = CreateUrr::new(
        UrrId::new(1),
        MeasurementMethod::new(false, true, false),
        ReportingTriggers::new().with_volume_threshold(true),
        None,
        None,
        None,
        None,
        None,
        None,
    );
    urr.volume_threshold = Some(VolumeThreshold::new(false, true, false, None, Some(THRESHOLD), None));
    let fseid = Ie::new(IeType::Fseid, Fseid::new(9, Some(Ipv4Addr::new(127, 0, 0, 2)), None).marshal());
    let ies = [node, fseid, pdr.to_ie(), far.to_ie(), Ie::new(IeType::CreateUrr, urr.marshal())];
    let (h, ies) = ask(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 2, &ies);
    assert_eq!(h.msg_type, msg::SESSION_ESTABLISHMENT_RESPONSE);
    assert_eq!(first(&ies, IeType::Cause).unwrap().payload, vec![1], "{ies:?}");
    Fseid::unmarshal(&first(&ies, IeType::Fseid).unwrap().payload).unwrap().seid.into()
}

#[test]
fn volume_threshold_report_covers_fast_path_traffic() {
    if !is_root() {
        eprintln!("note: skipped, network namespaces need root");
        return;
    }
    let id = format!("mct-{}-{}", std::process::id(), SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let (r, u) = (format!("{id}-uran"), format!("{id}-uupf"));
    let guard = Netns(vec![r.clone(), u.clone()]);
    for n in &guard.0 {
        ip(&["netns", "add", n]);
    }
    ip(&["link", "add", "vr0", "netns", &r, "type", "veth", "peer", "name", "vu0", "netns", &u]);
    ip(&["-n", &r, "link", "set", "vr0", "address", "02:00:00:00:00:a0"]);
    ip(&["-n", &u, "link", "set", "vu0", "address", "02:00:00:00:00:b0"]);
    for (ns, dev, addr) in [(&r, "vr0", "172.16.0.2/24"), (&u, "vu0", "172.16.0.1/24")] {
        ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
        ip(&["-n", ns, "link", "set", dev, "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    // ran: an XDP program on the peer, so that frames sent back with XDP_TX are received (veth).
    let (pass, tx) = in_ns(&r, || {
        let mut pass = baseline::load_pass().expect("load pass");
        pass.attach("vr0", AttachMode::Native).expect("attach pass");
        (pass, UdpSocket::bind("172.16.0.2:2152").unwrap())
    });
    // upf: the fast path on vu0; the next hop of DN is back out of vu0.
    let plane = in_ns(&u, || {
        let mut p =
            XdpPlane::load(XdpConfig { no_fib: true, sizes: MapSizes::small(), ..XdpConfig::new(S1U) }).expect("load");
        p.attach("vu0", AttachMode::Native).expect("attach upf_xdp");
        let vu0 = ifindex("vu0").unwrap();
        p.set_next_hop(DN, NextHop { ifindex: vu0, dmac: [2, 0, 0, 0, 0, 0xa0], smac: [2, 0, 0, 0, 0, 0xb0] }).unwrap();
        p
    });
    let plane = Shared(Arc::new(Mutex::new(plane)));

    let smf: SocketAddr = "127.0.0.2:8805".parse().unwrap();
    let cfg = UpfConfig { s1u_addr: S1U, ..UpfConfig::default() };
    let t0 = Instant::now();
    let mut core = UpfCore::new(cfg, Box::new(plane.clone()), SystemTime::now(), Counters::new());
    let seid = establish(&mut core, t0, smf);
    assert_eq!(core.usage_engine().sampled(), 1, "VOLTH needs sampling");

    let inner = inner_udp(UE, DN, 9000, INNER - 28);
    assert_eq!(inner.len(), INNER);
    for _ in 0..PACKETS {
        tx.send_to(&mobicore_gtp::gtpu::gpdu(TEID, &inner), SocketAddrV4::new(S1U, 2152)).unwrap();
    }
    // Wait (bounded) until the program has seen every G-PDU.
    let fwd = || plane.0.lock().unwrap().counter(Counter::UlFwd).unwrap();
    for _ in 0..200 {
        if fwd() >= PACKETS as u64 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(fwd(), PACKETS as u64, "every G-PDU forwarded by XDP");
    assert_eq!(plane.0.lock().unwrap().counter(Counter::PassUnknownTeid).unwrap(), 0);

    // The node's clock runs through its deadlines (the sampling tick).
    let mut now = t0;
    let mut sent = vec![];
    while let Some(t) = core.poll_timeout().filter(|t| *t <= t0 + Duration::from_secs(3)) {
        now = t.max(now);
        core.handle_timeout(now);
        sent.extend(std::iter::from_fn(|| core.poll_transmit()).map(|(_, b)| decode(&b).unwrap()));
        if !sent.is_empty() {
            break;
        }
    }
    assert_eq!(sent.len(), 1, "one Session Report Request");
    let (h, ies) = &sent[0];
    assert_eq!((h.msg_type, h.seid), (crate::session::SESSION_REPORT_REQUEST, Some(9)));
    assert_eq!(first(ies, IeType::ReportType).unwrap().payload, vec![0x02], "USAR");
    let reports: Vec<UsageReport> = ies
        .iter()
        .filter(|i| i.ie_type == IeType::UsageReportWithinSessionReportRequest)
        .map(|i| UsageReport::unmarshal(&i.payload).unwrap())
        .collect();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].urr_id.id, 1);
    assert!(reports[0].usage_report_trigger.contains(UsageReportTrigger::VOLTH));
    let v = reports[0].volume_measurement.as_ref().expect("Volume Measurement");
    assert_eq!(v.uplink_volume, Some((PACKETS * INNER) as u64), "every octet the fast path forwarded");
    assert!(v.uplink_volume.unwrap() >= THRESHOLD);
    assert_eq!(plane.0.lock().unwrap().urr_usage(seid, 1).unwrap().ul_pkts, PACKETS as u64);

    drop(core);
    drop(plane);
    drop(pass);
    drop(guard);
}

/// The PFCP node over in-memory maps (no root): its timer moves a fast
/// entry that a Session Modification left away from its home slot back
/// into it once the grace period is over.
#[test]
fn the_pfcp_node_moves_an_updated_entry_home_on_its_timer() {
    use rs_pfcp::ie::update_far::UpdateFar;
    let cfg = XdpConfig { s1u_addr: S1U, mtu: 1500, no_fib: true, sizes: MapSizes::small() };
    let plane = Arc::new(Mutex::new(XdpPlane::with_maps(MemoryMaps::default(), cfg).unwrap()));
    let mut core = UpfCore::new(
        UpfConfig { s1u_addr: S1U, ..UpfConfig::default() },
        Box::new(Shared(plane.clone())),
        SystemTime::UNIX_EPOCH,
        Counters::new(),
    );
    let smf = SocketAddr::from(([127, 0, 0, 2], 8805));
    let t0 = Instant::now();
    let seid = establish(&mut core, t0, smf);
    let key = PdrKey::Teid(TEID);
    let at_home = |p: &XdpPlane<MemoryMaps>| p.fast_slot(key) == p.fast_position(key);
    assert!(at_home(&plane.lock().unwrap()));
    // FAR 1: FORW -> DROP, a new entry for the TEID.
    let t1 = t0 + Duration::from_millis(1);
    let uf = UpdateFar::new(FarId::new(1), Some(ApplyAction::new(0x01)), None, None, None);
    core.handle_datagram(t1, smf, &encode(msg::SESSION_MODIFICATION_REQUEST, Some(seid), 3, &[uf.to_ie()]));
    let (_, ies) = decode(&core.poll_transmit().expect("an answer").1).unwrap();
    assert_eq!(first(&ies, IeType::Cause).unwrap().payload, vec![1]);
    {
        let p = plane.lock().unwrap();
        assert!(!at_home(&p), "the home slot held the replaced entry");
        assert_eq!(p.maps().fast(maps::Dir::Ul, TEID).map(|e| e.action), Some(maps::FAR_DROP));
    }
    // The plane's `apply` reads the wall clock (not `t1`): the move is due
    // a grace period after the modification, which is before now.
    let due = Instant::now().max(t1) + slots::GRACE;
    assert!(core.poll_timeout().is_some_and(|t| t <= due), "the node's timer covers the move");
    core.handle_timeout(due);
    let p = plane.lock().unwrap();
    assert!(at_home(&p));
    assert_eq!(p.maps().fast(maps::Dir::Ul, TEID).map(|e| e.action), Some(maps::FAR_DROP), "the same entry");
    assert_eq!(p.poll_maintenance(), None);
}
