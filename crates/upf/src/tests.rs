//! Deterministic tests of the PFCP node: no sockets, no sleeps.

use crate::config::UpfConfig;
use crate::node::UpfCore;
use crate::pfcp::{decode, encode, first, msg};
use crate::rules::{GtpuTunnel, MemoryPlane, INTERFACE_ACCESS, INTERFACE_CORE};
use mobicore_common::counters::Counters;
use rs_pfcp::ie::apply_action::ApplyAction;
use rs_pfcp::ie::bar_id::BarId;
use rs_pfcp::ie::cause::Cause;
use rs_pfcp::ie::create_bar::CreateBar;
use rs_pfcp::ie::create_far::CreateFar;
use rs_pfcp::ie::create_pdr::CreatePdr;
use rs_pfcp::ie::destination_interface::{DestinationInterface, Interface};
use rs_pfcp::ie::f_teid::Fteid;
use rs_pfcp::ie::far_id::FarId;
use rs_pfcp::ie::forwarding_parameters::ForwardingParameters;
use rs_pfcp::ie::fseid::Fseid;
use rs_pfcp::ie::network_instance::NetworkInstance;
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::offending_ie::OffendingIe;
use rs_pfcp::ie::outer_header_creation::OuterHeaderCreation;
use rs_pfcp::ie::outer_header_removal::OuterHeaderRemoval;
use rs_pfcp::ie::pdi::Pdi;
use rs_pfcp::ie::pdr_id::PdrId;
use rs_pfcp::ie::precedence::Precedence;
use rs_pfcp::ie::recovery_time_stamp::RecoveryTimeStamp;
use rs_pfcp::ie::source_interface::{SourceInterface, SourceInterfaceValue};
use rs_pfcp::ie::ue_ip_address::UeIpAddress;
use rs_pfcp::ie::update_far::UpdateFar;
use rs_pfcp::ie::update_forwarding_parameters::UpdateForwardingParameters;
use rs_pfcp::ie::{Ie, IeType};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Instant, SystemTime};

const SMF: &str = "127.0.0.2:8805";

fn smf() -> SocketAddr {
    SMF.parse().unwrap()
}

struct Harness {
    core: UpfCore,
    plane: MemoryPlane,
    now: Instant,
    seq: u32,
}

impl Harness {
    fn new() -> Self {
        Self::with(UpfConfig::default())
    }
    /// `cfg` with the harness's S1-U address.
    fn with(cfg: UpfConfig) -> Self {
        let plane = MemoryPlane::new();
        let cfg = UpfConfig { s1u_addr: Ipv4Addr::new(127, 0, 0, 9), ..cfg };
        let core = UpfCore::new(
            cfg,
            Box::new(plane.clone()),
            SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(3_900_000_000 - 2_208_988_800),
            Counters::new(),
        );
        Harness { core, plane, now: Instant::now(), seq: 0 }
    }
    /// Sends a request, returns the (header, IEs) of the single answer.
    fn request(&mut self, t: u8, seid: Option<u64>, ies: &[Ie]) -> (crate::pfcp::PfcpHeader, Vec<Ie>) {
        self.seq += 1;
        let b = encode(t, seid, self.seq, ies);
        self.raw(&b).expect("an answer")
    }
    fn raw(&mut self, b: &[u8]) -> Option<(crate::pfcp::PfcpHeader, Vec<Ie>)> {
        self.core.handle_datagram(self.now, smf(), b);
        let out = self.core.poll_transmit().map(|(to, b)| {
            assert_eq!(to, smf());
            decode(&b).unwrap()
        });
        assert!(self.core.poll_transmit().is_none());
        out
    }
    /// What the node sent, but for its own Heartbeat Requests (TS 29.244
    /// 6.2.2: they go out every `heartbeat_interval_ms` whatever else happens).
    fn not_heartbeats(&mut self) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.core.poll_transmit())
            .map(|(_, b)| b.to_vec())
            .filter(|b| b[1] != msg::HEARTBEAT_REQUEST)
            .collect()
    }
    fn associate(&mut self) {
        let (h, ies) = self.request(msg::ASSOCIATION_SETUP_REQUEST, None, &[node_ie(), recovery_ie()]);
        assert_eq!(h.msg_type, msg::ASSOCIATION_SETUP_RESPONSE);
        assert_eq!(cause(&ies), 1);
    }
}

fn node_ie() -> Ie {
    NodeId::new_ipv4(Ipv4Addr::new(127, 0, 0, 2)).to_ie()
}
fn recovery_ie() -> Ie {
    RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH).to_ie()
}
fn fseid_ie(seid: u64) -> Ie {
    Ie::new(IeType::Fseid, Fseid::new(seid, Some(Ipv4Addr::new(127, 0, 0, 2)), None).marshal())
}
fn cause(ies: &[Ie]) -> u8 {
    first(ies, IeType::Cause).map(|c| Cause::unmarshal(&c.payload).unwrap().value as u8).unwrap()
}
fn offending(ies: &[Ie]) -> Option<u16> {
    first(ies, IeType::OffendingIe).map(|c| OffendingIe::unmarshal(&c.payload).unwrap().ie_type)
}

/// The SGW-C's usual rules: UL PDR 1 -> FAR 1 (FORW core), DL PDR 2 -> FAR 2 (BUFF, BAR 1).
fn session_rules(teid: u32, ue: Ipv4Addr, ni: &str) -> Vec<Ie> {
    session_rules_urrs(teid, ue, ni, &[])
}

/// [`session_rules`] with both PDRs using `urrs` (the Create URRs are the caller's).
fn session_rules_urrs(teid: u32, ue: Ipv4Addr, ni: &str, urrs: &[u32]) -> Vec<Ie> {
    let mut ul_pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Access));
    ul_pdi.f_teid = Some(Fteid::new(true, false, teid, Some(Ipv4Addr::new(127, 0, 0, 9)), None, 0));
    ul_pdi.network_instance = Some(NetworkInstance { instance: ni.into() });
    let mut ul = CreatePdr::new(PdrId::new(1), Precedence::new(100), ul_pdi);
    ul.outer_header_removal = Some(OuterHeaderRemoval::new(0));
    ul.far_id = Some(FarId::new(1));
    ul.urr_ids = urrs.iter().map(|u| rs_pfcp::ie::urr_id::UrrId::new(*u)).collect();
    let mut dl_pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Core));
    dl_pdi.ue_ip_addresses = vec![{
        let mut u = UeIpAddress::new(Some(ue), None);
        u.source_destination = true;
        u
    }];
    let mut dl = CreatePdr::new(PdrId::new(2), Precedence::new(100), dl_pdi);
    dl.far_id = Some(FarId::new(2));
    dl.urr_ids = ul.urr_ids.clone();
    let mut ul_far = CreateFar::new(FarId::new(1), ApplyAction::new(0x02));
    ul_far.forwarding_parameters = Some(ForwardingParameters::new(DestinationInterface::new(Interface::Core)));
    let mut dl_far = CreateFar::new(FarId::new(2), ApplyAction::new(0x04));
    dl_far.bar_id = Some(BarId::new(1));
    let bar = CreateBar::new(BarId::new(1), None);
    vec![ul.to_ie(), dl.to_ie(), ul_far.to_ie(), dl_far.to_ie(), bar.to_ie()]
}

fn establish(h: &mut Harness, cp_seid: u64) -> (crate::pfcp::PfcpHeader, Vec<Ie>) {
    let mut ies = vec![node_ie(), fseid_ie(cp_seid)];
    ies.extend(session_rules(0x100 + cp_seid as u32, Ipv4Addr::new(10, 45, 0, cp_seid as u8), "\x08internet"));
    h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies)
}

fn up_seid(ies: &[Ie]) -> u64 {
    Fseid::unmarshal(&first(ies, IeType::Fseid).unwrap().payload).unwrap().seid.into()
}

#[test]
fn establishment_installs_rules() {
    let mut h = Harness::new();
    h.associate();
    let (hd, ies) = establish(&mut h, 7);
    assert_eq!(hd.msg_type, msg::SESSION_ESTABLISHMENT_RESPONSE);
    assert_eq!(hd.seid, Some(7), "response goes to the CP SEID");
    assert_eq!(cause(&ies), 1);
    let seid = up_seid(&ies);
    let r = h.plane.get(seid).expect("installed");
    let ul = &r.pdrs[&1];
    assert_eq!(ul.pdi.source_interface, INTERFACE_ACCESS);
    assert_eq!(ul.pdi.local_fteid, Some((0x107, Ipv4Addr::new(127, 0, 0, 9))));
    assert_eq!(ul.pdi.network_instance.as_deref(), Some("internet"), "DNS-label Network Instance");
    assert_eq!(ul.outer_header_removal, Some(0));
    let dl = &r.pdrs[&2];
    assert_eq!(dl.pdi.source_interface, INTERFACE_CORE);
    assert_eq!(dl.pdi.ue_ipv4, Some(Ipv4Addr::new(10, 45, 0, 7)));
    assert!(r.fars[&1].action.forw && r.fars[&1].destination_interface == Some(INTERFACE_CORE));
    assert!(r.fars[&2].action.buff && r.fars[&2].bar_id == Some(1));
    assert_eq!(h.core.sessions()[&seid].cp_seid, 7);
}

#[test]
fn establishment_without_association_is_rejected() {
    let mut h = Harness::new();
    let (hd, ies) = establish(&mut h, 1);
    assert_eq!(cause(&ies), 72);
    assert_eq!(hd.seid, Some(1));
    assert!(h.plane.is_empty());
}

#[test]
fn missing_mandatory_ie_names_it() {
    let mut h = Harness::new();
    h.associate();
    let mut ies = vec![node_ie()];
    ies.extend(session_rules(1, Ipv4Addr::new(10, 45, 0, 1), "internet"));
    let (hd, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies);
    assert_eq!((cause(&r), offending(&r), hd.seid), (66, Some(IeType::Fseid as u16), Some(0)));
    let (_, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &[node_ie(), fseid_ie(3)]);
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::CreatePdr as u16)));
    // A Create PDR without its PDI.
    let bad_pdr = Ie::new_grouped(IeType::CreatePdr, vec![PdrId::new(1).to_ie(), Precedence::new(1).to_ie()]);
    let far = CreateFar::new(FarId::new(1), ApplyAction::new(0x01)).to_ie();
    let (_, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &[node_ie(), fseid_ie(3), bad_pdr, far]);
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::Pdi as u16)));
    assert!(h.plane.is_empty());
}

#[test]
fn dangling_far_reference_is_a_rule_failure() {
    let mut h = Harness::new();
    h.associate();
    let mut ies = vec![node_ie(), fseid_ie(3)];
    let mut rules = session_rules(1, Ipv4Addr::new(10, 45, 0, 1), "internet");
    rules.remove(3); // FAR 2 gone: PDR 2 points nowhere.
    ies.extend(rules);
    let (_, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies);
    assert_eq!(cause(&r), 73);
    let f = first(&r, IeType::FailedRuleId).expect("Failed Rule ID");
    assert_eq!(rs_pfcp::ie::failed_rule_id::FailedRuleId::unmarshal(&f.payload).unwrap().rule_id(), 2);
}

#[test]
fn modification_forwards_downlink_then_deletion() {
    let mut h = Harness::new();
    h.associate();
    let (_, ies) = establish(&mut h, 9);
    let seid = up_seid(&ies);
    let mut fp = UpdateForwardingParameters::new();
    fp.destination_interface = Some(DestinationInterface::new(Interface::Access));
    fp.outer_header_creation = Some(OuterHeaderCreation::gtpu_ipv4(0xabcd, Ipv4Addr::new(127, 0, 0, 50)));
    let mut uf = UpdateFar::new(FarId::new(2), Some(ApplyAction::new(0x02)), Some(fp), None, None);
    uf.bar_id = None;
    let (hd, r) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[uf.to_ie()]);
    assert_eq!((hd.seid, cause(&r)), (Some(9), 1));
    let far = &h.plane.get(seid).unwrap().fars[&2];
    assert!(far.action.forw && !far.action.buff);
    assert_eq!(far.outer_header_creation, Some(GtpuTunnel { teid: 0xabcd, ipv4: Ipv4Addr::new(127, 0, 0, 50) }));

    let (hd, r) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid + 100), &[]);
    assert_eq!((hd.seid, cause(&r)), (Some(0), 65));

    let (hd, r) = h.request(msg::SESSION_DELETION_REQUEST, Some(seid), &[]);
    assert_eq!((hd.msg_type, hd.seid, cause(&r)), (msg::SESSION_DELETION_RESPONSE, Some(9), 1));
    assert!(h.plane.is_empty());
    let (_, r) = h.request(msg::SESSION_DELETION_REQUEST, Some(seid), &[]);
    assert_eq!(cause(&r), 65);
}

#[test]
fn retransmitted_request_gets_the_same_answer_once_processed() {
    let mut h = Harness::new();
    h.associate();
    let mut ies = vec![node_ie(), fseid_ie(4)];
    ies.extend(session_rules(4, Ipv4Addr::new(10, 45, 0, 4), "internet"));
    let b = encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 999, &ies);
    let first_answer = h.raw(&b).unwrap();
    let again = h.raw(&b).unwrap();
    assert_eq!(first_answer, again);
    assert_eq!(h.plane.len(), 1);
}

#[test]
fn heartbeat_release_and_malformed() {
    let mut h = Harness::new();
    let (hd, r) = h.request(msg::HEARTBEAT_REQUEST, None, &[recovery_ie()]);
    assert_eq!(hd.msg_type, msg::HEARTBEAT_RESPONSE);
    assert!(first(&r, IeType::RecoveryTimeStamp).is_some());
    let (_, r) = h.request(msg::ASSOCIATION_UPDATE_REQUEST, None, &[node_ie()]);
    assert_eq!(cause(&r), 72);
    h.associate();
    establish(&mut h, 1);
    let (_, r) = h.request(msg::ASSOCIATION_RELEASE_REQUEST, None, &[node_ie()]);
    assert_eq!(cause(&r), 1);
    assert!(h.plane.is_empty(), "release deletes the sessions");
    // A truncated IE inside a known request is answered with a cause.
    let mut b = encode(msg::SESSION_DELETION_REQUEST, Some(1), 77, &[]);
    b.extend_from_slice(&[0, 19, 0, 9, 1]);
    let l = (b.len() - 4) as u16;
    b[2..4].copy_from_slice(&l.to_be_bytes());
    let (hd, r) = h.raw(&b).unwrap();
    assert_eq!(hd.msg_type, msg::SESSION_DELETION_RESPONSE);
    assert_ne!(cause(&r), 1);
    // Garbage is dropped and counted.
    assert!(h.raw(&[0x20, 1]).is_none());
    assert_eq!(h.core.counters.value("pfcp_malformed"), 2);
}

mod dump;
mod interop;
mod mec;
mod steering;
mod trust;

mod props {
    use super::*;
    use proptest::prelude::*;
    proptest! {
        #[test]
        fn node_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300), t in prop_oneof![Just(5u8), Just(50), Just(52), Just(54), any::<u8>()]) {
            let mut h = Harness::new();
            h.associate();
            let mut m = b.clone();
            if m.len() >= 16 { m[0] = 0x21; m[1] = t; let l = (m.len() - 4) as u16; m[2..4].copy_from_slice(&l.to_be_bytes()); }
            h.core.handle_datagram(h.now, smf(), &m);
            h.core.handle_datagram(h.now, smf(), &b);
            while h.core.poll_transmit().is_some() {}
        }

        /// Session Modification Requests made of rule IEs (Create/Update/
        /// Remove/Query of FAR, URR, PDR, QER, BAR, with Duplicating
        /// Parameters and URR fields inside) whose contents are arbitrary:
        /// each gets exactly one answer, and the other session's rules and
        /// usage stay as they were.
        #[test]
        fn modifications_of_arbitrary_rule_ies_leave_other_sessions_alone(ies in proptest::collection::vec(arb_rule_ie(), 1..6)) {
            let mut h = Harness::new();
            h.associate();
            let (_, a) = establish(&mut h, 1);
            let (_, b) = establish(&mut h, 2);
            let (target, other) = (up_seid(&a), up_seid(&b));
            let before = h.plane.get(other).unwrap();
            let before_t = h.plane.get(target).unwrap();
            let (hd, r) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(target), &ies);
            prop_assert_eq!(hd.msg_type, msg::SESSION_MODIFICATION_RESPONSE);
            prop_assert!(first(&r, IeType::Cause).is_some());
            if cause(&r) != 1 {
                prop_assert_eq!(h.plane.get(target).unwrap(), before_t, "a rejected modification changes nothing");
            }
            prop_assert_eq!(&h.plane.get(other).unwrap(), &before);
            let (_, d) = h.request(msg::SESSION_DELETION_REQUEST, Some(target), &[]);
            prop_assert_eq!(cause(&d), 1);
            prop_assert_eq!(h.plane.get(other).unwrap(), before);
        }
    }

    /// An IE of one of `types` whose content is arbitrary bytes or a few
    /// IEs of `inner` types with arbitrary contents.
    fn arb_ie(types: &'static [u16], inner: &'static [u16]) -> impl Strategy<Value = Ie> {
        let leaf = (proptest::sample::select(inner), proptest::collection::vec(any::<u8>(), 0..12));
        let grouped = proptest::collection::vec(leaf, 0..5).prop_map(|v| {
            let mut b = Vec::new();
            for (t, c) in v {
                Ie::new(IeType::from(t), c).marshal_into(&mut b);
            }
            b
        });
        let payload = prop_oneof![proptest::collection::vec(any::<u8>(), 0..24), grouped];
        (proptest::sample::select(types), payload).prop_map(|(t, p)| Ie::new(IeType::from(t), p))
    }

    pub(super) fn arb_rule_ie() -> impl Strategy<Value = Ie> {
        // TS 29.244 8.1.2: Create PDR 1, Create FAR 3, Create URR 6, Update
        // PDR 9, Update FAR 10, Update URR 13, Update QER 14, Remove PDR 15,
        // Remove FAR 16, Remove URR 17, Query URR 77, Update BAR 86.
        const RULES: &[u16] = &[1, 3, 6, 9, 10, 13, 14, 15, 16, 17, 77, 86];
        // Inside them: PDR ID 56, FAR ID 108, URR ID 81, QER ID 109, BAR ID
        // 88, Apply Action 44, Forwarding Parameters 4, Update Forwarding
        // Parameters 11, Duplicating Parameters 5, Update Duplicating
        // Parameters 105, Destination Interface 42, Outer Header Creation
        // 84, Measurement Method 62, Reporting Triggers 37, Volume
        // Threshold 31, Time Threshold 32, Volume Quota 73, Time Quota 74,
        // Measurement Period 64, Inactivity Detection Time 36, Quota
        // Holding Time 71, Precedence 29, PDI 2.
        const INNER: &[u16] =
            &[56, 108, 81, 109, 88, 44, 4, 11, 5, 105, 42, 84, 62, 37, 31, 32, 73, 74, 64, 36, 71, 29, 2];
        arb_ie(RULES, INNER)
    }
}

#[test]
fn choose_fteid_is_allocated_and_reported() {
    let mut h = Harness::new();
    h.associate();
    let mut pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Access));
    pdi.f_teid = Some(Fteid::new_with_choose(true, false, true, false, 0u32, None, None, 0));
    pdi.network_instance = Some(NetworkInstance::new("internet"));
    let mut pdr = CreatePdr::new(PdrId::new(1), Precedence::new(10), pdi);
    pdr.far_id = Some(FarId::new(1));
    let mut far = CreateFar::new(FarId::new(1), ApplyAction::new(0x02));
    far.forwarding_parameters = Some(ForwardingParameters::new(DestinationInterface::new(Interface::Core)));
    let (_, r) =
        h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &[node_ie(), fseid_ie(1), pdr.to_ie(), far.to_ie()]);
    assert_eq!(cause(&r), 1);
    let created =
        rs_pfcp::ie::created_pdr::CreatedPdr::unmarshal(&first(&r, IeType::CreatedPdr).expect("Created PDR").payload)
            .unwrap();
    let f = created.f_teid.unwrap();
    assert_eq!(f.ipv4_address, Some(Ipv4Addr::new(127, 0, 0, 9)));
    let rules = h.plane.get(up_seid(&r)).unwrap();
    assert_eq!(rules.pdrs[&1].pdi.local_fteid, Some((u32::from(f.teid), Ipv4Addr::new(127, 0, 0, 9))));
    assert_eq!(rules.pdrs[&1].pdi.network_instance.as_deref(), Some("internet"), "plain-text Network Instance");
}

#[test]
fn modification_removes_and_creates_rules() {
    let mut h = Harness::new();
    h.associate();
    let (_, ies) = establish(&mut h, 2);
    let seid = up_seid(&ies);
    // Replace the downlink pair: remove PDR 2 and FAR 2, create PDR 3 -> FAR 3 (DROP).
    let mut pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Core));
    pdi.ue_ip_addresses = vec![UeIpAddress::new(Some(Ipv4Addr::new(10, 45, 0, 2)), None)];
    let mut pdr = CreatePdr::new(PdrId::new(3), Precedence::new(10), pdi);
    pdr.far_id = Some(FarId::new(3));
    let far = CreateFar::new(FarId::new(3), ApplyAction::new(0x01));
    let ies = [
        rs_pfcp::ie::remove_pdr::RemovePdr::new(PdrId::new(2)).to_ie(),
        rs_pfcp::ie::remove_far::RemoveFar::new(FarId::new(2)).to_ie(),
        pdr.to_ie(),
        far.to_ie(),
    ];
    let (_, r) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &ies);
    assert_eq!(cause(&r), 1);
    let rules = h.plane.get(seid).unwrap();
    assert!(!rules.pdrs.contains_key(&2) && !rules.fars.contains_key(&2));
    assert!(rules.fars[&3].action.drop);
    // Removing FAR 1 while PDR 1 still uses it fails and changes nothing.
    let (_, r) = h.request(
        msg::SESSION_MODIFICATION_REQUEST,
        Some(seid),
        &[rs_pfcp::ie::remove_far::RemoveFar::new(FarId::new(1)).to_ie()],
    );
    assert_eq!(cause(&r), 73);
    assert_eq!(h.plane.get(seid).unwrap(), rules);
}

#[test]
fn association_setup_needs_recovery_time_stamp() {
    let mut h = Harness::new();
    let (_, r) = h.request(msg::ASSOCIATION_SETUP_REQUEST, None, &[node_ie()]);
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::RecoveryTimeStamp as u16)));
    assert!(h.core.associations().is_empty());
    let (_, r) = h.request(msg::ASSOCIATION_SETUP_REQUEST, None, &[recovery_ie()]);
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::NodeId as u16)));
}

/// The user-space data path reports the first buffered downlink packet of a
/// NOCP FAR: the node sends a Session Report Request with a Downlink Data
/// Report to the CP function and matches its response (TS 29.244 7.5.8).
#[test]
fn first_buffered_packet_sends_session_report_request() {
    use crate::dataplane::{DatapathConfig, UserspacePlane, Verdict};
    let mut h = Harness::new();
    let up = UserspacePlane::new(DatapathConfig::default(), Counters::new());
    h.core = UpfCore::new(
        UpfConfig { s1u_addr: Ipv4Addr::new(127, 0, 0, 9), ..UpfConfig::default() },
        Box::new(up.clone()),
        SystemTime::UNIX_EPOCH,
        Counters::new(),
    );
    h.associate();
    let mut ies = vec![node_ie(), fseid_ie(5)];
    let mut rules = session_rules(0x105, Ipv4Addr::new(10, 45, 0, 5), "internet");
    // DL FAR 2: BUFF + NOCP.
    let mut dl_far = CreateFar::new(FarId::new(2), ApplyAction::new(0x04 | 0x08));
    dl_far.bar_id = Some(BarId::new(1));
    rules[3] = dl_far.to_ie();
    ies.extend(rules);
    let (_, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies);
    assert_eq!(cause(&r), 1);
    let pkt =
        crate::dataplane::ipv4::udp_packet(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(10, 45, 0, 5), 53, 4000, b"dl");
    assert_eq!(up.lock().downlink(h.now, &pkt), Verdict::Buffered);
    assert_eq!(up.lock().downlink(h.now, &pkt), Verdict::Buffered);
    h.core.poll_plane_reports(h.now);
    let (to, b) = h.core.poll_transmit().expect("a Session Report Request");
    assert!(h.core.poll_transmit().is_none(), "one report for the first packet only");
    assert_eq!(to, smf());
    let (hd, ies) = decode(&b).unwrap();
    assert_eq!((hd.msg_type, hd.seid), (56, Some(5)));
    let rt = first(&ies, IeType::ReportType).unwrap();
    assert_eq!(rt.payload, vec![0x01], "DLDR");
    let ddr = rs_pfcp::ie::downlink_data_report::DownlinkDataReport::unmarshal(
        &first(&ies, IeType::DownlinkDataReport).unwrap().payload,
    )
    .unwrap();
    assert_eq!(ddr.pdr_id.value, 2);
    // rs-pfcp reads the whole message.
    assert!(rs_pfcp::message::parse(&b).is_ok());
    // The response is matched; a retransmission would stop.
    let resp = encode(57, Some(0x1), hd.seq, &[crate::pfcp::cause_ie(rs_pfcp::ie::cause::CauseValue::RequestAccepted)]);
    h.core.handle_datagram(h.now, smf(), &resp);
    assert_eq!(h.core.counters.value("pfcp_session_report_accepted"), 1);
    h.core.handle_timeout(h.now + std::time::Duration::from_secs(10));
    assert!(h.not_heartbeats().is_empty(), "no retransmission after the response");
}

// ---- Usage reporting (crate::urr) through PFCP ----

#[test]
fn usage_report_ies_parse() {
    use crate::rules::{PlaneReport, UsageMeasurement, UsageTrigger};
    let t0 = Instant::now();
    let clock =
        crate::urr::WallClock { at: t0, wall: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000) };
    let usage = UsageMeasurement {
        urr_id: 3,
        seqn: 2,
        trigger: UsageTrigger::VOLTH | UsageTrigger::VOLQU,
        volume: true,
        duration: true,
        uplink_octets: 10,
        downlink_octets: 20,
        uplink_packets: 1,
        downlink_packets: 2,
        duration_secs: 4,
        start: t0,
        end: t0 + std::time::Duration::from_secs(4),
        query_reference: None,
    };
    let ies = crate::session::report_ies(&PlaneReport::Usage { up_seid: 1, usage }, &clock);
    assert_eq!(ies[0].payload, vec![0x02], "USAR");
    assert_eq!(ies[1].ie_type, IeType::UsageReportWithinSessionReportRequest);
    let u = rs_pfcp::ie::usage_report::UsageReport::unmarshal(&ies[1].payload).unwrap();
    assert_eq!((u.urr_id.id, u.ur_seqn.sequence_number()), (3, 2));
    use rs_pfcp::ie::usage_report_trigger::UsageReportTrigger as T;
    assert!(u.usage_report_trigger.contains(T::VOLTH) && u.usage_report_trigger.contains(T::VOLQU));
    assert!(!u.usage_report_trigger.contains(T::TERMR));
    assert_eq!(u.volume_measurement.unwrap().total_volume, Some(30));
    assert_eq!(u.duration_measurement.unwrap().duration_seconds, 4);
    assert_eq!((u.start_time.unwrap().timestamp, u.end_time.unwrap().timestamp), (3_908_988_800, 3_908_988_804));
    let b = encode(56, Some(9), 1, &ies);
    assert!(rs_pfcp::message::parse(&b).is_ok());
    // A URR measuring only duration has no Volume Measurement.
    let ies = crate::session::report_ies(
        &PlaneReport::Usage { up_seid: 1, usage: UsageMeasurement { volume: false, ..usage } },
        &clock,
    );
    let u = rs_pfcp::ie::usage_report::UsageReport::unmarshal(&ies[1].payload).unwrap();
    assert!(u.volume_measurement.is_none() && u.duration_measurement.is_some());
}

use crate::urr::UsageCounts;
use rs_pfcp::ie::create_urr::CreateUrr;
use rs_pfcp::ie::measurement_method::MeasurementMethod;
use rs_pfcp::ie::reporting_triggers::ReportingTriggers;
use rs_pfcp::ie::usage_report::UsageReport;
use rs_pfcp::ie::usage_report_trigger::UsageReportTrigger;

/// NTP seconds of the harness's recovery time (its wall clock at `h.now`).
const T0_NTP: u32 = 3_900_000_000;

fn create_urr(id: u32, triggers: ReportingTriggers, f: impl FnOnce(&mut CreateUrr)) -> Ie {
    let mut c = CreateUrr::new(
        rs_pfcp::ie::urr_id::UrrId::new(id),
        MeasurementMethod::new(true, true, false),
        triggers,
        None,
        None,
        None,
        None,
        None,
        None,
    );
    f(&mut c);
    Ie::new(IeType::CreateUrr, c.marshal())
}

/// A session whose PDRs use URR 1 (and the Create URRs given); returns the UP SEID.
fn establish_urr(h: &mut Harness, cp_seid: u64, urrs: Vec<Ie>) -> u64 {
    let mut ies = vec![node_ie(), fseid_ie(cp_seid)];
    ies.extend(session_rules_urrs(0x100 + cp_seid as u32, Ipv4Addr::new(10, 45, 0, cp_seid as u8), "internet", &[1]));
    ies.extend(urrs);
    let (_, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies);
    assert_eq!(cause(&r), 1, "{r:?}");
    up_seid(&r)
}

fn urr_harness() -> Harness {
    let mut h = Harness::new();
    let wall = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(u64::from(T0_NTP) - 2_208_988_800);
    h.core.set_wall_clock(h.now, wall);
    h.associate();
    h
}

fn reports_in(ies: &[Ie], t: IeType) -> Vec<UsageReport> {
    ies.iter().filter(|i| i.ie_type == t).map(|i| UsageReport::unmarshal(&i.payload).unwrap()).collect()
}

fn volume(r: &UsageReport) -> (Option<u64>, Option<u64>, Option<u64>) {
    let v = r.volume_measurement.as_ref().unwrap();
    (v.uplink_volume, v.downlink_volume, v.total_packets)
}

fn counts(ul: u64, dl: u64) -> UsageCounts {
    UsageCounts { ul_octets: ul, dl_octets: dl, ul_packets: ul / 100, dl_packets: dl / 100 }
}

/// Runs the clock forward by `secs`, through every deadline on the way;
/// returns the Session Report Requests sent.
fn advance(h: &mut Harness, secs: u64) -> Vec<(crate::pfcp::PfcpHeader, Vec<Ie>)> {
    let end = h.now + std::time::Duration::from_secs(secs);
    let mut out = vec![];
    while let Some(t) = h.core.poll_timeout().filter(|t| *t <= end) {
        h.now = t;
        h.core.handle_timeout(t);
        out.extend(h.not_heartbeats().iter().map(|b| decode(b).unwrap()));
    }
    h.now = end;
    out
}

#[test]
fn deletion_response_carries_every_urr_usage() {
    let mut h = urr_harness();
    let seid = establish_urr(
        &mut h,
        5,
        vec![create_urr(1, ReportingTriggers::new(), |_| {}), create_urr(2, ReportingTriggers::new(), |_| {})],
    );
    h.plane.set_usage(seid, 1, counts(1000, 3000));
    h.now += std::time::Duration::from_secs(7);
    let (hd, ies) = h.request(msg::SESSION_DELETION_REQUEST, Some(seid), &[]);
    assert_eq!((hd.msg_type, cause(&ies)), (msg::SESSION_DELETION_RESPONSE, 1));
    let r = reports_in(&ies, IeType::UsageReportWithinSessionDeletionResponse);
    assert_eq!(r.iter().map(|r| r.urr_id.id).collect::<Vec<_>>(), vec![1, 2]);
    assert!(r[0].usage_report_trigger.contains(UsageReportTrigger::TERMR));
    assert_eq!((r[0].ur_seqn.sequence_number(), volume(&r[0])), (0, (Some(1000), Some(3000), Some(40))));
    assert_eq!(r[0].duration_measurement.as_ref().unwrap().duration_seconds, 7);
    assert_eq!(
        (r[0].start_time.as_ref().unwrap().timestamp, r[0].end_time.as_ref().unwrap().timestamp),
        (T0_NTP, T0_NTP + 7)
    );
    assert_eq!(volume(&r[1]), (Some(0), Some(0), Some(0)), "URR 2 counted nothing");
    assert!(h.core.usage_engine().is_empty());
}

#[test]
fn query_urr_and_qaurr_answer_with_immediate_reports() {
    let mut h = urr_harness();
    let seid = establish_urr(
        &mut h,
        5,
        vec![create_urr(1, ReportingTriggers::new(), |_| {}), create_urr(2, ReportingTriggers::new(), |_| {})],
    );
    h.plane.set_usage(seid, 1, counts(500, 0));
    h.now += std::time::Duration::from_secs(2);
    // Query URR as TS 29.244 7.5.4.10 encodes it: grouped, with a URR ID;
    // and a Query URR Reference to echo.
    let query = Ie::new(IeType::QueryUrr, rs_pfcp::ie::urr_id::UrrId::new(1).to_ie().marshal());
    let reference = Ie::new(IeType::QueryUrrReference, 77u32.to_be_bytes().to_vec());
    let (_, ies) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[query.clone(), reference]);
    assert_eq!(cause(&ies), 1);
    let r = reports_in(&ies, IeType::UsageReportWithinSessionModificationResponse);
    assert_eq!(r.len(), 1);
    assert!(r[0].usage_report_trigger.contains(UsageReportTrigger::IMMER));
    assert_eq!((r[0].urr_id.id, r[0].ur_seqn.sequence_number(), volume(&r[0]).0), (1, 0, Some(500)));
    assert_eq!(r[0].query_urr_reference.as_ref().map(|q| q.reference), Some(77));
    // The measurement restarted: the next query reports only what came since.
    h.plane.set_usage(seid, 1, counts(800, 0));
    let (_, ies) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[query]);
    let r = reports_in(&ies, IeType::UsageReportWithinSessionModificationResponse);
    assert_eq!((r[0].ur_seqn.sequence_number(), volume(&r[0]).0), (1, Some(300)));
    // PFCPSMReq-Flags QAURR: every URR.
    let flags = Ie::new(IeType::PfcpsmReqFlags, vec![0x04]);
    let (_, ies) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[flags]);
    let r = reports_in(&ies, IeType::UsageReportWithinSessionModificationResponse);
    assert_eq!(r.iter().map(|r| (r.urr_id.id, r.ur_seqn.sequence_number())).collect::<Vec<_>>(), vec![(1, 2), (2, 0)]);
    // An unknown URR is a rule failure naming it.
    let bad = Ie::new(IeType::QueryUrr, rs_pfcp::ie::urr_id::UrrId::new(9).to_ie().marshal());
    let (_, ies) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[bad]);
    assert_eq!(cause(&ies), 73);
    let f = first(&ies, IeType::FailedRuleId).expect("Failed Rule ID");
    assert_eq!(rs_pfcp::ie::failed_rule_id::FailedRuleId::unmarshal(&f.payload).unwrap().rule_id(), 9);
}

#[test]
fn remove_urr_answers_with_its_final_report() {
    let mut h = urr_harness();
    let urrs = vec![
        create_urr(1, ReportingTriggers::new(), |_| {}),
        create_urr(2, ReportingTriggers::new(), |_| {}),
        create_urr(3, ReportingTriggers::new(), |_| {}),
    ];
    let seid = establish_urr(&mut h, 5, urrs);
    h.plane.set_usage(seid, 2, counts(0, 700));
    // Grouped (TS 29.244 7.5.4.7) and rs-pfcp's bare encoding.
    let grouped = Ie::new(IeType::RemoveUrr, rs_pfcp::ie::urr_id::UrrId::new(2).to_ie().marshal());
    let bare = rs_pfcp::ie::remove_urr::RemoveUrr::new(rs_pfcp::ie::urr_id::UrrId::new(3)).to_ie();
    let (_, ies) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[grouped, bare]);
    assert_eq!(cause(&ies), 1);
    let r = reports_in(&ies, IeType::UsageReportWithinSessionModificationResponse);
    assert_eq!(r.iter().map(|r| r.urr_id.id).collect::<Vec<_>>(), vec![2, 3]);
    assert!(r.iter().all(|r| r.usage_report_trigger.contains(UsageReportTrigger::TERMR)));
    assert_eq!(volume(&r[0]).1, Some(700));
    assert_eq!(h.plane.get(seid).unwrap().urrs.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(h.core.usage_engine().len(), 1);
}

#[test]
fn periodic_reports_go_out_as_session_report_requests() {
    let mut h = urr_harness();
    let t0 = h.now;
    let urr = create_urr(1, ReportingTriggers::new().with_periodic(true), |c| {
        c.measurement_period = Some(rs_pfcp::ie::measurement_period::MeasurementPeriod::new(10));
    });
    let seid = establish_urr(&mut h, 5, vec![urr]);
    assert_eq!(h.core.usage_engine().sampled(), 0, "a period needs no sampling");
    for (i, ul) in [(0u32, 1000u64), (1, 1500)] {
        h.plane.set_usage(seid, 1, counts(ul, 0));
        assert!(advance(&mut h, 9).is_empty());
        let sent = advance(&mut h, 1);
        assert_eq!(h.now, t0 + std::time::Duration::from_secs(10 * (u64::from(i) + 1)));
        assert_eq!(sent.len(), 1);
        let (hd, ies) = &sent[0];
        assert_eq!((hd.msg_type, hd.seid), (crate::session::SESSION_REPORT_REQUEST, Some(5)));
        assert_eq!(first(ies, IeType::ReportType).unwrap().payload, vec![0x02], "USAR");
        let r = reports_in(ies, IeType::UsageReportWithinSessionReportRequest);
        assert!(r[0].usage_report_trigger.contains(UsageReportTrigger::PERIO));
        assert_eq!((r[0].ur_seqn.sequence_number(), volume(&r[0]).0), (i, Some(if i == 0 { 1000 } else { 500 })));
        assert_eq!(r[0].end_time.as_ref().unwrap().timestamp, T0_NTP + 10 * (i + 1));
        // The SGW-C answers.
        let b = encode(
            crate::session::SESSION_REPORT_RESPONSE,
            Some(seid),
            hd.seq,
            &[crate::pfcp::cause_ie(rs_pfcp::ie::cause::CauseValue::RequestAccepted)],
        );
        h.core.handle_datagram(h.now, smf(), &b);
    }
    assert_eq!(h.core.counters.value("pfcp_session_report_accepted"), 2);
}

#[test]
fn exhausted_volume_quota_drops_until_update_urr_grants_more() {
    let mut h = urr_harness();
    let quota = |total: u64| rs_pfcp::ie::volume_quota::VolumeQuota::new(0x01, Some(total), None, None);
    let urr = create_urr(1, ReportingTriggers::new().with_volume_quota(true), |c| c.volume_quota = Some(quota(1000)));
    let seid = establish_urr(&mut h, 5, vec![urr]);
    assert_eq!(h.core.usage_engine().sampled(), 1);
    h.plane.set_usage(seid, 1, counts(600, 0));
    assert!(advance(&mut h, 1).is_empty(), "600 of 1000");
    h.plane.set_usage(seid, 1, counts(900, 300));
    let sent = advance(&mut h, 1);
    let r = reports_in(&sent[0].1, IeType::UsageReportWithinSessionReportRequest);
    assert!(r[0].usage_report_trigger.contains(UsageReportTrigger::VOLQU));
    assert_eq!(volume(&r[0]), (Some(900), Some(300), Some(12)));
    // TS 29.244 5.2.2.2: forwarding stops for the PDRs using the URR.
    let rules = h.plane.get(seid).unwrap();
    assert_eq!(
        (rules.pdrs[&1].far_id, rules.pdrs[&2].far_id),
        (Some(crate::urr::QUOTA_DROP_FAR), Some(crate::urr::QUOTA_DROP_FAR))
    );
    assert!(rules.fars[&crate::urr::QUOTA_DROP_FAR].action.drop);
    assert_eq!(h.core.counters.value("upf_quota_exhausted"), 1);
    assert_eq!(h.core.sessions()[&seid].rules.pdrs[&1].far_id, Some(1), "the CP function's rules are kept");
    // Update URR with a new quota: forwarding resumes.
    let u = rs_pfcp::ie::update_urr::UpdateUrr::builder(rs_pfcp::ie::urr_id::UrrId::new(1))
        .volume_quota(quota(5000))
        .build()
        .unwrap();
    let (_, ies) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[u.to_ie()]);
    assert_eq!(cause(&ies), 1);
    let rules = h.plane.get(seid).unwrap();
    assert_eq!((rules.pdrs[&1].far_id, rules.pdrs[&2].far_id), (Some(1), Some(2)));
    assert!(!rules.fars.contains_key(&crate::urr::QUOTA_DROP_FAR));
    assert_eq!(h.core.sessions()[&seid].rules.urrs[&1].volume_quota.unwrap().total, Some(5000));
    // A FAR update while exhausted keeps the drop: modify, then exhaust again.
    h.plane.set_usage(seid, 1, counts(6300, 300));
    let _ = advance(&mut h, 1);
    assert_eq!(h.plane.get(seid).unwrap().pdrs[&1].far_id, Some(crate::urr::QUOTA_DROP_FAR));
    let mut fp = UpdateForwardingParameters::new();
    fp.destination_interface = Some(DestinationInterface::new(Interface::Access));
    fp.outer_header_creation = Some(OuterHeaderCreation::gtpu_ipv4(0xabcd, Ipv4Addr::new(127, 0, 0, 50)));
    let uf = UpdateFar::new(FarId::new(2), Some(ApplyAction::new(0x02)), Some(fp), None, None);
    let (_, ies) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[uf.to_ie()]);
    assert_eq!(cause(&ies), 1);
    let rules = h.plane.get(seid).unwrap();
    assert_eq!(rules.pdrs[&2].far_id, Some(crate::urr::QUOTA_DROP_FAR));
    assert!(rules.fars[&2].action.forw, "the CP function's update is kept underneath");
    assert_eq!(h.core.counters.value("upf_quota_exhausted"), 2);
}

#[test]
fn create_urr_without_the_ie_its_trigger_needs_is_rejected() {
    let mut h = urr_harness();
    let mut ies = vec![node_ie(), fseid_ie(5)];
    ies.extend(session_rules_urrs(0x105, Ipv4Addr::new(10, 45, 0, 5), "internet", &[1]));
    ies.push(create_urr(1, ReportingTriggers::new().with_periodic(true), |_| {}));
    let (_, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies);
    assert_eq!((cause(&r), offending(&r)), (67, Some(IeType::MeasurementPeriod as u16)));
    assert!(h.plane.is_empty() && h.core.usage_engine().is_empty());
}

#[test]
fn sessions_without_urr_triggers_cost_no_sampling() {
    let mut h = urr_harness();
    for cp in 1..=50 {
        establish(&mut h, cp);
    }
    establish_urr(&mut h, 60, vec![create_urr(1, ReportingTriggers::new(), |_| {})]);
    assert_eq!((h.core.usage_engine().len(), h.core.usage_engine().sampled()), (1, 0));
    let now = h.now;
    h.core.handle_timeout(now + std::time::Duration::from_secs(3600));
    assert!(h.not_heartbeats().is_empty());
}
