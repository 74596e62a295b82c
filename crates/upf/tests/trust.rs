//! The PFCP trust boundary of the running UPF (its tokio shell on loopback
//! UDP sockets): associations only from configured CP functions at their
//! addresses, sessions only for the association that owns them, and the
//! per-association bound, measured in the UPF's rule table. No root needed.

use mobicore_common::peers::PeerFilter;
use mobicore_upf::config::CpPeer;
use mobicore_upf::pfcp::{decode, encode, first, msg, PfcpHeader};
use mobicore_upf::{MemoryPlane, Upf, UpfConfig};
use rs_pfcp::ie::apply_action::ApplyAction;
use rs_pfcp::ie::cause::{Cause, CauseValue};
use rs_pfcp::ie::create_far::CreateFar;
use rs_pfcp::ie::create_pdr::CreatePdr;
use rs_pfcp::ie::destination_interface::{DestinationInterface, Interface};
use rs_pfcp::ie::f_teid::Fteid;
use rs_pfcp::ie::far_id::FarId;
use rs_pfcp::ie::forwarding_parameters::ForwardingParameters;
use rs_pfcp::ie::fseid::Fseid;
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::outer_header_creation::OuterHeaderCreation;
use rs_pfcp::ie::pdi::Pdi;
use rs_pfcp::ie::pdr_id::PdrId;
use rs_pfcp::ie::precedence::Precedence;
use rs_pfcp::ie::recovery_time_stamp::RecoveryTimeStamp;
use rs_pfcp::ie::source_interface::{SourceInterface, SourceInterfaceValue};
use rs_pfcp::ie::update_far::UpdateFar;
use rs_pfcp::ie::update_forwarding_parameters::UpdateForwardingParameters;
use rs_pfcp::ie::{Ie, IeType};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime};
use tokio::net::UdpSocket;

// Addresses of this test's own, so that nothing else on loopback collides.
const UPF: Ipv4Addr = Ipv4Addr::new(127, 0, 88, 1);
const CP_A: Ipv4Addr = Ipv4Addr::new(127, 0, 88, 2);
const CP_B: Ipv4Addr = Ipv4Addr::new(127, 0, 88, 3);
const MAX_SESSIONS: usize = 16;

/// One CP function's PFCP socket.
struct Cp {
    sock: UdpSocket,
    upf: SocketAddr,
    seq: u32,
}

impl Cp {
    async fn bind(ip: Ipv4Addr, upf: SocketAddr) -> Cp {
        Cp { sock: UdpSocket::bind((ip, 0)).await.unwrap(), upf, seq: 0 }
    }

    /// A request and its answer (within a generous bound: loopback).
    async fn request(&mut self, t: u8, seid: Option<u64>, ies: &[Ie]) -> (PfcpHeader, Vec<Ie>) {
        self.seq += 1;
        self.sock.send_to(&encode(t, seid, self.seq, ies), self.upf).await.unwrap();
        let mut buf = vec![0; 65536];
        loop {
            let (n, from) = tokio::time::timeout(Duration::from_secs(10), self.sock.recv_from(&mut buf))
                .await
                .expect("an answer")
                .unwrap();
            assert_eq!(from, self.upf);
            let (h, ies) = decode(&buf[..n]).unwrap();
            if h.seq == self.seq {
                return (h, ies);
            }
        }
    }

    async fn associate(&mut self, node: Ipv4Addr) -> u8 {
        let ies = [NodeId::new_ipv4(node).to_ie(), RecoveryTimeStamp::new(SystemTime::now()).to_ie()];
        cause(&self.request(msg::ASSOCIATION_SETUP_REQUEST, None, &ies).await.1)
    }

    /// A Session Establishment for `node`; (cause, UP SEID).
    async fn establish(&mut self, node: Ipv4Addr, cp_seid: u64) -> (u8, Option<u64>) {
        let mut pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Access));
        pdi.f_teid = Some(Fteid::new(true, false, 0x1000 + cp_seid as u32, Some(UPF), None, 0));
        let mut pdr = CreatePdr::new(PdrId::new(1), Precedence::new(100), pdi);
        pdr.far_id = Some(FarId::new(1));
        let mut far = CreateFar::new(FarId::new(1), ApplyAction::new(0x02));
        far.forwarding_parameters = Some(ForwardingParameters::new(DestinationInterface::new(Interface::Core)));
        let ies = [
            NodeId::new_ipv4(node).to_ie(),
            Ie::new(IeType::Fseid, Fseid::new(cp_seid, Some(node), None).marshal()),
            pdr.to_ie(),
            far.to_ie(),
        ];
        let (_, r) = self.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies).await;
        let up = first(&r, IeType::Fseid).map(|f| u64::from(Fseid::unmarshal(&f.payload).unwrap().seid));
        (cause(&r), up)
    }
}

fn cause(ies: &[Ie]) -> u8 {
    first(ies, IeType::Cause).map(|c| Cause::unmarshal(&c.payload).unwrap().value as u8).expect("a Cause")
}

fn far_update() -> Ie {
    let mut fp = UpdateForwardingParameters::new();
    fp.destination_interface = Some(DestinationInterface::new(Interface::Access));
    fp.outer_header_creation = Some(OuterHeaderCreation::gtpu_ipv4(0xbad, Ipv4Addr::new(127, 0, 88, 66)));
    UpdateFar::new(FarId::new(1), Some(ApplyAction::new(0x02)), Some(fp), None, None).to_ie()
}

/// The UPF's rule table: every session and its rules.
fn table(plane: &MemoryPlane, seids: &[u64]) -> Vec<Option<mobicore_upf::SessionRules>> {
    seids.iter().map(|s| plane.get(*s)).collect()
}

#[tokio::test]
async fn the_running_upf_keeps_its_associations_and_sessions_from_other_peers() {
    let peer =
        |node: Ipv4Addr| CpPeer { node_id: node.to_string().parse().unwrap(), addrs: PeerFilter::hosts([node.into()]) };
    let cfg = UpfConfig {
        pfcp: SocketAddr::new(UPF.into(), 0),
        node_id: UPF,
        s1u_addr: UPF,
        cp_peers: vec![peer(CP_A), peer(CP_B)],
        max_sessions_per_association: MAX_SESSIONS,
        ..UpfConfig::default()
    };
    let upf = Upf::bind(cfg).await.unwrap();
    let addr = upf.pfcp_addr();
    let plane = upf.plane();
    let counters = upf.counters.clone();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(upf.run(stop_rx));

    let mut a = Cp::bind(CP_A, addr).await;
    assert_eq!(a.associate(CP_A).await, 1);
    let mut seids = vec![];
    for cp_seid in 1..=2 {
        let (c, up) = a.establish(CP_A, cp_seid).await;
        assert_eq!(c, 1);
        seids.push(up.unwrap());
    }
    let before = table(&plane, &seids);
    assert!(before.iter().all(Option::is_some));

    // A PFCP Association Setup from an unconfigured node is refused, and a
    // setup with A's Node ID from another loopback address too.
    let mut b = Cp::bind(CP_B, addr).await;
    assert_eq!(b.associate(Ipv4Addr::new(127, 0, 88, 9)).await, CauseValue::RequestRejected as u8);
    assert_eq!(b.associate(CP_A).await, CauseValue::RequestRejected as u8);
    assert_eq!(counters.value("pfcp_association_setup_from_unknown_peer"), 2);
    // B has no association: its session messages get "No established PFCP Association".
    let (_, r) = b.request(msg::SESSION_MODIFICATION_REQUEST, Some(seids[0]), &[far_update()]).await;
    assert_eq!(cause(&r), CauseValue::NoEstablishedPfcpAssociation as u8);
    // B associates as itself: A's sessions are still not its own.
    assert_eq!(b.associate(CP_B).await, 1);
    for s in &seids {
        let (h, r) = b.request(msg::SESSION_MODIFICATION_REQUEST, Some(*s), &[far_update()]).await;
        assert_eq!((h.seid, cause(&r)), (Some(0), CauseValue::SessionContextNotFound as u8));
        let (_, r) = b.request(msg::SESSION_DELETION_REQUEST, Some(*s), &[]).await;
        assert_eq!(cause(&r), CauseValue::SessionContextNotFound as u8);
    }
    let (_, r) = b.request(msg::ASSOCIATION_RELEASE_REQUEST, None, &[NodeId::new_ipv4(CP_A).to_ie()]).await;
    assert_eq!(cause(&r), CauseValue::NoEstablishedPfcpAssociation as u8);
    assert_eq!(counters.value("pfcp_session_request_for_other_association"), 4);
    assert_eq!(table(&plane, &seids), before, "A's sessions are untouched");
    assert_eq!(plane.len(), 2);

    // A flood of establishments from A: the table never holds more than the bound.
    for cp_seid in 10..10 + 3 * MAX_SESSIONS as u64 {
        let (c, _) = a.establish(CP_A, cp_seid).await;
        assert!(c == 1 || c == CauseValue::NoResourcesAvailable as u8, "cause {c}");
        assert!(plane.len() <= MAX_SESSIONS, "{} sessions", plane.len());
    }
    assert_eq!(plane.len(), MAX_SESSIONS);
    assert_eq!(counters.value("pfcp_session_establishment_over_max_sessions"), 2 * MAX_SESSIONS as u64 + 2);

    // A still controls its own.
    let (h, r) = a.request(msg::SESSION_MODIFICATION_REQUEST, Some(seids[0]), &[far_update()]).await;
    assert_eq!((h.seid, cause(&r)), (Some(1), 1));
    let _ = stop.send(true);
    task.await.unwrap().unwrap();
}
