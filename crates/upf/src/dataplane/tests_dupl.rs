//! FAR DUPL through PFCP: a Create FAR with several Duplicating Parameters
//! (with Outer Header Creation and Transport Level Marking, which
//! rs-pfcp's own struct lacks), read by the node and acted on by the data
//! path; Update Duplicating Parameters moves a copy; DUPL without
//! Duplicating Parameters is refused with cause 67 (Conditional IE
//! missing) naming it, a copy we cannot deliver with cause 73 and the
//! FAR's ID.

use super::ipv4::udp_packet;
use super::{DatapathConfig, Transmit, UserspacePlane, Verdict};
use crate::config::UpfConfig;
use crate::node::UpfCore;
use crate::pfcp::{decode, encode, first, msg};
use mobicore_common::counters::Counters;
use mobicore_gtp::gtpu;
use rs_pfcp::ie::apply_action::ApplyAction;
use rs_pfcp::ie::create_far::CreateFar;
use rs_pfcp::ie::create_pdr::CreatePdr;
use rs_pfcp::ie::destination_interface::{DestinationInterface, Interface};
use rs_pfcp::ie::f_teid::Fteid;
use rs_pfcp::ie::failed_rule_id::FailedRuleId;
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
use rs_pfcp::ie::ue_ip_address::UeIpAddress;
use rs_pfcp::ie::{Ie, IeType};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Instant, SystemTime};

const UE: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 5);
const ENB: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 2);
const LI: Ipv4Addr = Ipv4Addr::new(172, 16, 9, 9);
const LI2: Ipv4Addr = Ipv4Addr::new(172, 16, 9, 10);
const CORE_COPY: Ipv4Addr = Ipv4Addr::new(172, 16, 8, 8);

fn smf() -> SocketAddr {
    "127.0.0.2:8805".parse().unwrap()
}

struct Node {
    core: UpfCore,
    up: UserspacePlane,
    seq: u32,
    now: Instant,
}

impl Node {
    fn new() -> Node {
        let up = UserspacePlane::new(DatapathConfig::default(), Counters::new());
        let cfg = UpfConfig { s1u_addr: Ipv4Addr::new(127, 0, 0, 9), ..UpfConfig::default() };
        let core = UpfCore::new(cfg, Box::new(up.clone()), SystemTime::UNIX_EPOCH, Counters::new());
        let mut n = Node { core, up, seq: 0, now: Instant::now() };
        let node = NodeId::new_ipv4(Ipv4Addr::new(127, 0, 0, 2)).to_ie();
        let (_, r) = n.request(
            msg::ASSOCIATION_SETUP_REQUEST,
            None,
            &[node, RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH).to_ie()],
        );
        assert_eq!(cause(&r), 1);
        n
    }
    fn request(&mut self, t: u8, seid: Option<u64>, ies: &[Ie]) -> (crate::pfcp::PfcpHeader, Vec<Ie>) {
        self.seq += 1;
        self.core.handle_datagram(self.now, smf(), &encode(t, seid, self.seq, ies));
        let (_, b) = self.core.poll_transmit().expect("an answer");
        decode(&b).unwrap()
    }
}

fn cause(ies: &[Ie]) -> u8 {
    first(ies, IeType::Cause).unwrap().payload[0]
}

fn ie(t: IeType, payload: Vec<u8>) -> Ie {
    Ie::new(t, payload)
}

/// A grouped IE from its children.
fn group(t: IeType, children: &[Ie]) -> Ie {
    let mut b = vec![];
    for c in children {
        c.marshal_into(&mut b);
    }
    ie(t, b)
}

fn ohc(teid: u32, a: Ipv4Addr) -> Ie {
    OuterHeaderCreation::gtpu_ipv4(teid, a).to_ie()
}

/// Duplicating Parameters: Destination Interface, Outer Header Creation,
/// Transport Level Marking (ToS 0xb8 = DSCP EF, mask 0xfc).
fn duplicating(t: IeType, dest: Option<Interface>, tunnel: Option<(u32, Ipv4Addr)>, tos: Option<u8>) -> Ie {
    let mut c = vec![];
    if let Some(d) = dest {
        c.push(DestinationInterface::new(d).to_ie());
    }
    if let Some((teid, a)) = tunnel {
        c.push(ohc(teid, a));
    }
    if let Some(tos) = tos {
        c.push(ie(IeType::TransportLevelMarking, vec![tos, 0xfc]));
    }
    group(t, &c)
}

/// UL PDR 1 -> FAR 1 (core); DL PDR 2 -> FAR 2 (FORW to the eNB + the
/// given extra FAR children).
fn establishment(dl_action: u8, dl_extra: &[Ie]) -> Vec<Ie> {
    let mut ul_pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Access));
    ul_pdi.f_teid = Some(Fteid::new(true, false, 0x100, Some(Ipv4Addr::new(127, 0, 0, 9)), None, 0));
    let mut ul = CreatePdr::new(PdrId::new(1), Precedence::new(100), ul_pdi);
    ul.far_id = Some(FarId::new(1));
    let mut dl_pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Core));
    dl_pdi.ue_ip_addresses = vec![{
        let mut u = UeIpAddress::new(Some(UE), None);
        u.source_destination = true;
        u
    }];
    let mut dl = CreatePdr::new(PdrId::new(2), Precedence::new(100), dl_pdi);
    dl.far_id = Some(FarId::new(2));
    let mut ul_far = CreateFar::new(FarId::new(1), ApplyAction::new(0x02));
    ul_far.forwarding_parameters = Some(ForwardingParameters::new(DestinationInterface::new(Interface::Core)));
    let mut fp = ForwardingParameters::new(DestinationInterface::new(Interface::Access));
    fp.outer_header_creation = Some(OuterHeaderCreation::gtpu_ipv4(0x900, ENB));
    let mut dl_children = vec![FarId::new(2).to_ie(), ie(IeType::ApplyAction, vec![dl_action]), fp.to_ie()];
    dl_children.extend_from_slice(dl_extra);
    vec![
        NodeId::new_ipv4(Ipv4Addr::new(127, 0, 0, 2)).to_ie(),
        Ie::new(IeType::Fseid, Fseid::new(5, Some(Ipv4Addr::new(127, 0, 0, 2)), None).marshal()),
        ul.to_ie(),
        dl.to_ie(),
        ul_far.to_ie(),
        group(IeType::CreateFar, &dl_children),
    ]
}

fn downlink(n: &Node) -> Vec<Transmit> {
    let pkt = udp_packet(Ipv4Addr::new(192, 0, 2, 1), UE, 53, 4000, b"dl");
    let mut p = n.up.lock();
    assert_eq!(p.downlink(n.now, &pkt), Verdict::Forwarded);
    std::iter::from_fn(|| p.poll_transmit()).collect()
}

fn teid_of(bytes: &[u8]) -> u32 {
    gtpu::parse(bytes).unwrap().header.teid
}

#[test]
fn create_far_with_two_duplicating_parameters_copies_to_both() {
    let mut n = Node::new();
    let dups = [
        duplicating(IeType::DuplicatingParameters, Some(Interface::LiFunction), Some((0x11, LI)), Some(0xb8)),
        duplicating(IeType::DuplicatingParameters, Some(Interface::Core), Some((0x22, CORE_COPY)), None),
    ];
    let (_, r) = n.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(0x02 | 0x10, &dups));
    assert_eq!(cause(&r), 1);
    let seid: u64 = Fseid::unmarshal(&first(&r, IeType::Fseid).unwrap().payload).unwrap().seid.into();
    let out = downlink(&n);
    assert_eq!(out.len(), 3, "{out:?}");
    let [Transmit::GtpuMarked { to: li, tos: 0xb8, bytes: b1 }, Transmit::Gtpu { to: cc, bytes: b2 }, Transmit::Gtpu { to: enb, bytes: b3 }] =
        &out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!((*li, teid_of(b1)), (SocketAddrV4::new(LI, 2152), 0x11));
    assert_eq!((*cc, teid_of(b2)), (SocketAddrV4::new(CORE_COPY, 2152), 0x22));
    assert_eq!((*enb, teid_of(b3)), (SocketAddrV4::new(ENB, 2152), 0x900));
    assert_eq!(b1[8..], b3[8..], "the copy carries the same inner packet");
    assert_eq!(n.up.lock().counters.value("upf_duplicated"), 2);

    // Update Duplicating Parameters: the first copy moves to LI2 (TEID
    // 0x33), keeping its interface and marking.
    let upd = group(
        IeType::UpdateFar,
        &[FarId::new(2).to_ie(), duplicating(IeType::UpdateDuplicatingParameters, None, Some((0x33, LI2)), None)],
    );
    let (_, r) = n.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[upd]);
    assert_eq!(cause(&r), 1);
    let out = downlink(&n);
    assert!(
        matches!(&out[0], Transmit::GtpuMarked { to, tos: 0xb8, bytes } if *to == SocketAddrV4::new(LI2, 2152) && teid_of(bytes) == 0x33),
        "{out:?}"
    );
    assert_eq!(out.len(), 3);

    // Apply Action without DUPL: no more copies.
    let upd = group(IeType::UpdateFar, &[FarId::new(2).to_ie(), ie(IeType::ApplyAction, vec![0x02])]);
    let (_, r) = n.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[upd]);
    assert_eq!(cause(&r), 1);
    assert_eq!(downlink(&n).len(), 1);
}

#[test]
fn dupl_without_duplicating_parameters_is_refused() {
    let mut n = Node::new();
    let (_, r) = n.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(0x02 | 0x10, &[]));
    // TS 29.244 7.5.2.3-1: the IE shall be present with DUPL, a
    // conditional IE missing (cause 67 with the Offending IE, 8.2.1).
    assert_eq!(cause(&r), 67);
    let o =
        rs_pfcp::ie::offending_ie::OffendingIe::unmarshal(&first(&r, IeType::OffendingIe).unwrap().payload).unwrap();
    assert_eq!(o.ie_type, IeType::DuplicatingParameters as u16);
    assert_eq!(n.up.lock().session_count(), 0);
    // A copy to the LI function needs an outer header: the FAR cannot be
    // created (cause 73, Failed Rule ID naming FAR 2).
    let dup = duplicating(IeType::DuplicatingParameters, Some(Interface::LiFunction), None, None);
    let (_, r) = n.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(0x02 | 0x10, &[dup]));
    assert_eq!(cause(&r), 73);
    let f = FailedRuleId::unmarshal(&first(&r, IeType::FailedRuleId).unwrap().payload).unwrap();
    assert_eq!((f.rule_type(), f.rule_id()), (rs_pfcp::ie::failed_rule_id::RuleIdType::Far, 2));
    // Duplicating Parameters without its mandatory Destination Interface.
    let dup = duplicating(IeType::DuplicatingParameters, None, Some((1, LI)), None);
    let (_, r) = n.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(0x02 | 0x10, &[dup]));
    assert_ne!(cause(&r), 1);
    assert_eq!(n.up.lock().session_count(), 0);
    // Removing DUPL's parameters by turning DUPL on in an Update FAR
    // without any is refused too.
    let (_, r) = n.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(0x02, &[]));
    assert_eq!(cause(&r), 1);
    let seid: u64 = Fseid::unmarshal(&first(&r, IeType::Fseid).unwrap().payload).unwrap().seid.into();
    let upd = group(IeType::UpdateFar, &[FarId::new(2).to_ie(), ie(IeType::ApplyAction, vec![0x12])]);
    let (_, r) = n.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[upd]);
    assert_eq!(cause(&r), 67);
}
