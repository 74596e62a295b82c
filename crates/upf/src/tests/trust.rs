//! The PFCP trust boundary (issue 8): which CP functions may associate,
//! from where, which association owns a session, and the bounds on what
//! a peer can make the node hold. Driven directly: no sockets, no sleeps.

use super::*;
use crate::config::{CpPeer, NodeIdPattern};
use crate::rules::SessionRules;
use mobicore_common::peers::PeerFilter;
use proptest::prelude::*;
use rs_pfcp::ie::cause::CauseValue;
use std::collections::BTreeMap;

/// Sessions (owner, CP SEID, rules in the plane) and associations (address,
/// Recovery Time Stamp, session count).
type State = (BTreeMap<u64, (String, u64, Option<SessionRules>)>, BTreeMap<String, (SocketAddr, SystemTime, usize)>);

/// Another CP function on loopback (its own address and Node ID).
const OTHER: &str = "127.0.0.3:8805";

fn other() -> SocketAddr {
    OTHER.parse().unwrap()
}

fn node(a: [u8; 4]) -> Ie {
    NodeId::new_ipv4(Ipv4Addr::from(a)).to_ie()
}

fn rts(secs: u64) -> Ie {
    RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs)).to_ie()
}

impl Harness {
    /// A request from `from`; the single answer, which goes back to `from`.
    fn request_from(
        &mut self,
        from: SocketAddr,
        t: u8,
        seid: Option<u64>,
        ies: &[Ie],
    ) -> (crate::pfcp::PfcpHeader, Vec<Ie>) {
        self.seq += 1;
        let b = encode(t, seid, self.seq, ies);
        self.core.handle_datagram(self.now, from, &b);
        let (to, b) = self.core.poll_transmit().expect("an answer");
        assert_eq!(to, from);
        assert!(self.core.poll_transmit().is_none());
        decode(&b).unwrap()
    }

    /// What a peer could have changed: every session's owner, CP SEID and
    /// rules as the plane holds them, and every association.
    fn state(&self) -> State {
        let s =
            self.core.sessions().iter().map(|(k, s)| (*k, (s.node.clone(), s.cp_seid, self.plane.get(*k)))).collect();
        let a = self.core.associations().iter().map(|(k, a)| (k.clone(), (a.peer, a.recovery, a.sessions))).collect();
        (s, a)
    }
}

/// An establishment from `from` for `node` with CP F-SEID `cp_seid` (its
/// address `fseid_addr`).
fn establishment(node_id: Ie, cp_seid: u64, fseid_addr: Ipv4Addr) -> Vec<Ie> {
    let mut ies = vec![node_id, Ie::new(IeType::Fseid, Fseid::new(cp_seid, Some(fseid_addr), None).marshal())];
    ies.extend(session_rules(0x100 + cp_seid as u32, Ipv4Addr::new(10, 45, 0, cp_seid as u8), "internet"));
    ies
}

/// The harness's CP function (node 127.0.0.2 at 127.0.0.2:8805) with two
/// sessions; returns their UP SEIDs.
fn associated_with_sessions(h: &mut Harness) -> Vec<u64> {
    h.associate();
    vec![up_seid(&establish(h, 1).1), up_seid(&establish(h, 2).1)]
}

/// The second CP function (node 127.0.0.3 at 127.0.0.3:8805) associates.
fn associate_other(h: &mut Harness) {
    let (_, r) = h.request_from(other(), msg::ASSOCIATION_SETUP_REQUEST, None, &[node([127, 0, 0, 3]), rts(7)]);
    assert_eq!(cause(&r), 1);
}

#[test]
fn association_setup_from_an_unconfigured_node_is_refused_and_the_existing_association_and_sessions_stay() {
    let cfg = UpfConfig {
        cp_peers: vec![CpPeer {
            node_id: "127.0.0.2".parse().unwrap(),
            addrs: PeerFilter(vec!["127.0.0.2".parse().unwrap()]),
        }],
        ..UpfConfig::default()
    };
    let mut h = Harness::with(cfg);
    associated_with_sessions(&mut h);
    let before = h.state();
    // An unconfigured Node ID from the configured address; the configured
    // Node ID from an unconfigured address (even with a new Recovery Time
    // Stamp, which from the right place would delete the sessions).
    let cases: [(SocketAddr, Ie); 3] =
        [(smf(), node([127, 0, 0, 7])), (other(), node_ie()), (other(), NodeId::new_fqdn("smf.example.org").to_ie())];
    for (from, n) in cases {
        let (hd, r) = h.request_from(from, msg::ASSOCIATION_SETUP_REQUEST, None, &[n, rts(99)]);
        assert_eq!((hd.msg_type, cause(&r)), (msg::ASSOCIATION_SETUP_RESPONSE, CauseValue::RequestRejected as u8));
        assert!(first(&r, IeType::NodeId).is_some(), "the response carries our Node ID");
    }
    assert_eq!(h.core.counters.value("pfcp_association_setup_from_unknown_peer"), 3);
    assert_eq!(h.state(), before);
    assert_eq!(h.plane.len(), 2);
    // The association still works.
    assert_eq!(cause(&establish(&mut h, 3).1), 1);
}

#[test]
fn setup_with_the_same_node_id_from_another_loopback_address_is_refused() {
    let mut h = Harness::new();
    let seids = associated_with_sessions(&mut h);
    let before = h.state();
    for recovery in [0, 12345] {
        let (_, r) = h.request_from(other(), msg::ASSOCIATION_SETUP_REQUEST, None, &[node_ie(), rts(recovery)]);
        assert_eq!(cause(&r), CauseValue::RequestRejected as u8);
    }
    assert_eq!(h.core.counters.value("pfcp_association_setup_from_other_address"), 2);
    assert_eq!(h.state(), before);
    // Nor can the other address release it or use its Node ID.
    let (_, r) = h.request_from(other(), msg::ASSOCIATION_RELEASE_REQUEST, None, &[node_ie()]);
    assert_eq!(cause(&r), CauseValue::NoEstablishedPfcpAssociation as u8);
    let (_, r) = h.request_from(
        other(),
        msg::SESSION_ESTABLISHMENT_REQUEST,
        Some(0),
        &establishment(node_ie(), 9, Ipv4Addr::new(127, 0, 0, 2)),
    );
    assert_eq!(cause(&r), CauseValue::NoEstablishedPfcpAssociation as u8);
    assert_eq!(h.core.counters.value("pfcp_association_release_from_unassociated_peer"), 1);
    assert_eq!(h.core.counters.value("pfcp_session_establishment_from_unassociated_peer"), 1);
    assert_eq!(h.state(), before);
    // The owner still controls its sessions.
    let (_, r) = h.request(msg::SESSION_DELETION_REQUEST, Some(seids[0]), &[]);
    assert_eq!(cause(&r), 1);
}

/// TS 29.244 6.2.6.2.2, 19A: the same CP function from the same address
/// with the same Recovery Time Stamp keeps its sessions; with a new one it
/// restarted, and its old sessions are deleted.
#[test]
fn recovery_time_stamp_change_deletes_the_old_sessions() {
    let mut h = Harness::new();
    associated_with_sessions(&mut h);
    let before = h.state();
    h.associate();
    assert_eq!(h.state(), before, "same Recovery Time Stamp: nothing changes");
    // The CP function restarted (a new source port is the same address).
    let restarted: SocketAddr = "127.0.0.2:40000".parse().unwrap();
    let (_, r) = h.request_from(restarted, msg::ASSOCIATION_SETUP_REQUEST, None, &[node_ie(), rts(3_000)]);
    assert_eq!(cause(&r), 1);
    assert!(h.core.sessions().is_empty() && h.plane.is_empty() && h.core.usage_engine().is_empty());
    let a = &h.core.associations()["127.0.0.2"];
    assert_eq!(
        (a.peer, a.recovery, a.sessions),
        (restarted, SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(3_000), 0)
    );
    assert_eq!(h.core.counters.value("pfcp_cp_function_restarted"), 1);
    // An unreadable Recovery Time Stamp is an incorrect mandatory IE.
    let (_, r) =
        h.request(msg::ASSOCIATION_SETUP_REQUEST, None, &[node_ie(), Ie::new(IeType::RecoveryTimeStamp, vec![1])]);
    assert_eq!(
        (cause(&r), offending(&r)),
        (CauseValue::MandatoryIeIncorrect as u8, Some(IeType::RecoveryTimeStamp as u16))
    );
}

#[test]
fn session_modification_from_another_association_changes_nothing() {
    let mut h = Harness::new();
    let seids = associated_with_sessions(&mut h);
    associate_other(&mut h);
    let before = h.state();
    let mut fp = UpdateForwardingParameters::new();
    fp.destination_interface = Some(DestinationInterface::new(Interface::Access));
    fp.outer_header_creation = Some(OuterHeaderCreation::gtpu_ipv4(0xbad, Ipv4Addr::new(127, 0, 0, 66)));
    let uf = UpdateFar::new(FarId::new(2), Some(ApplyAction::new(0x02)), Some(fp), None, None).to_ie();
    for seid in &seids {
        let (hd, r) =
            h.request_from(other(), msg::SESSION_MODIFICATION_REQUEST, Some(*seid), &[uf.clone(), fseid_ie(77)]);
        assert_eq!(
            (hd.msg_type, hd.seid, cause(&r)),
            (msg::SESSION_MODIFICATION_RESPONSE, Some(0), CauseValue::SessionContextNotFound as u8)
        );
        let (hd, r) = h.request_from(other(), msg::SESSION_DELETION_REQUEST, Some(*seid), &[]);
        assert_eq!((hd.seid, cause(&r)), (Some(0), CauseValue::SessionContextNotFound as u8));
    }
    assert_eq!(h.core.counters.value("pfcp_session_request_for_other_association"), 4);
    // From an address with no association at all.
    let stranger: SocketAddr = "127.0.0.4:8805".parse().unwrap();
    let (_, r) = h.request_from(stranger, msg::SESSION_MODIFICATION_REQUEST, Some(seids[0]), std::slice::from_ref(&uf));
    assert_eq!(cause(&r), CauseValue::NoEstablishedPfcpAssociation as u8);
    let (_, r) = h.request_from(stranger, msg::SESSION_DELETION_REQUEST, Some(seids[1]), &[]);
    assert_eq!(cause(&r), CauseValue::NoEstablishedPfcpAssociation as u8);
    assert_eq!(h.core.counters.value("pfcp_session_request_from_unassociated_peer"), 2);
    assert_eq!(h.state(), before);
    // The owner's modification goes through.
    let (hd, r) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seids[0]), &[uf]);
    assert_eq!((hd.seid, cause(&r)), (Some(1), 1));
}

#[test]
fn establishment_fseid_must_name_the_associations_addresses() {
    let mut h = Harness::new();
    h.associate();
    let (_, r) = h.request(
        msg::SESSION_ESTABLISHMENT_REQUEST,
        Some(0),
        &establishment(node_ie(), 5, Ipv4Addr::new(192, 0, 2, 1)),
    );
    assert_eq!((cause(&r), offending(&r)), (CauseValue::MandatoryIeIncorrect as u8, Some(IeType::Fseid as u16)));
    assert_eq!(h.core.counters.value("pfcp_session_establishment_fseid_outside_association"), 1);
    let seid = up_seid(&establish(&mut h, 6).1);
    let (_, r) = h.request(
        msg::SESSION_MODIFICATION_REQUEST,
        Some(seid),
        &[Ie::new(IeType::Fseid, Fseid::new(8, Some(Ipv4Addr::new(192, 0, 2, 1)), None).marshal())],
    );
    assert_eq!(cause(&r), CauseValue::MandatoryIeIncorrect as u8);
    assert_eq!(h.core.sessions()[&seid].cp_seid, 6);
    assert_eq!(h.core.sessions().len(), 1);
}

#[test]
fn heartbeats_only_from_configured_addresses() {
    let mut h = Harness::new();
    let (hd, _) = h.request_from(other(), msg::HEARTBEAT_REQUEST, None, &[recovery_ie()]);
    assert_eq!(hd.msg_type, msg::HEARTBEAT_RESPONSE);
    let b = encode(msg::HEARTBEAT_REQUEST, None, 1, &[recovery_ie()]);
    h.core.handle_datagram(h.now, "192.0.2.1:8805".parse().unwrap(), &b);
    assert!(h.core.poll_transmit().is_none());
    assert_eq!(h.core.counters.value("pfcp_heartbeat_from_unknown_peer"), 1);
}

#[test]
fn associations_are_bounded() {
    let mut h = Harness::with(UpfConfig { max_associations: 2, ..UpfConfig::default() });
    h.associate();
    associate_other(&mut h);
    let third: SocketAddr = "127.0.0.4:8805".parse().unwrap();
    let (_, r) = h.request_from(third, msg::ASSOCIATION_SETUP_REQUEST, None, &[node([127, 0, 0, 4]), rts(1)]);
    assert_eq!(cause(&r), CauseValue::NoResourcesAvailable as u8);
    assert_eq!(h.core.counters.value("pfcp_association_setup_over_max_associations"), 1);
    assert_eq!(h.core.associations().len(), 2);
    // An existing association's re-setup is not a new one.
    h.associate();
    // A released one makes room.
    let (_, r) = h.request_from(other(), msg::ASSOCIATION_RELEASE_REQUEST, None, &[node([127, 0, 0, 3])]);
    assert_eq!(cause(&r), 1);
    let (_, r) = h.request_from(third, msg::ASSOCIATION_SETUP_REQUEST, None, &[node([127, 0, 0, 4]), rts(1)]);
    assert_eq!(cause(&r), 1);
}

/// A flood of establishments beyond the per-association bound: each is
/// refused with "No resources available", the session table never holds
/// more than the bound, and the other association is not affected.
#[test]
fn establishments_beyond_the_per_association_bound_are_refused() {
    const MAX: usize = 8;
    let mut h = Harness::with(UpfConfig { max_sessions_per_association: MAX, ..UpfConfig::default() });
    h.associate();
    associate_other(&mut h);
    let mut accepted = vec![];
    for cp in 1..=200u64 {
        let (hd, r) = establish(&mut h, cp);
        assert_eq!(hd.seid, Some(cp));
        match cause(&r) {
            1 => accepted.push(up_seid(&r)),
            c => assert_eq!(c, CauseValue::NoResourcesAvailable as u8),
        }
        let size = h.core.sessions().len();
        assert!(size <= MAX && h.plane.len() == size && h.core.usage_engine().len() <= size, "{size} sessions");
    }
    assert_eq!(accepted.len(), MAX);
    assert_eq!(h.core.counters.value("pfcp_session_establishment_over_max_sessions"), 200 - MAX as u64);
    assert_eq!(h.core.associations()["127.0.0.2"].sessions, MAX);
    // The other association has its own bound.
    let (_, r) = h.request_from(
        other(),
        msg::SESSION_ESTABLISHMENT_REQUEST,
        Some(0),
        &establishment(node([127, 0, 0, 3]), 500, Ipv4Addr::new(127, 0, 0, 3)),
    );
    assert_eq!(cause(&r), 1);
    // A deletion makes room for one more.
    assert_eq!(cause(&h.request(msg::SESSION_DELETION_REQUEST, Some(accepted[0]), &[]).1), 1);
    assert_eq!(cause(&establish(&mut h, 300).1), 1);
    assert_eq!(cause(&establish(&mut h, 301).1), CauseValue::NoResourcesAvailable as u8);
    assert_eq!(h.core.sessions().len(), MAX + 1);
}

/// A flood of establishments that are each refused for some reason leaves
/// nothing behind: no session, no rules in the plane, no URR in the usage
/// engine, nothing counted against the association's bound.
#[test]
fn a_flood_of_refused_establishments_leaves_nothing() {
    let mut h = Harness::with(UpfConfig { max_sessions_per_association: 4, ..UpfConfig::default() });
    h.associate();
    let stranger: SocketAddr = "127.0.0.4:8805".parse().unwrap();
    for cp in 1..=300u64 {
        let mut ies = establishment(node_ie(), cp, Ipv4Addr::new(127, 0, 0, 2));
        ies.push(create_urr(1, rs_pfcp::ie::reporting_triggers::ReportingTriggers::new().with_periodic(true), |_| {}));
        let (from, ies) = match cp % 5 {
            0 => (
                smf(),
                ies.into_iter().filter(|i| i.ie_type != IeType::CreateFar || cp % 2 == 0).take(4).collect::<Vec<_>>(),
            ),
            1 => (stranger, ies),
            2 => (smf(), establishment(node([127, 0, 0, 9]), cp, Ipv4Addr::new(127, 0, 0, 2))),
            3 => (smf(), establishment(node_ie(), cp, Ipv4Addr::new(203, 0, 113, 1))),
            // The URR has PERIO but no Measurement Period.
            _ => (smf(), ies),
        };
        let (_, r) = h.request_from(from, msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies);
        assert_ne!(cause(&r), 1, "case {}", cp % 5);
    }
    assert!(h.core.sessions().is_empty() && h.plane.is_empty() && h.core.usage_engine().is_empty());
    assert_eq!(h.core.associations()["127.0.0.2"].sessions, 0);
    // The bound is intact: four good establishments still fit.
    for cp in 1..=4 {
        assert_eq!(cause(&establish(&mut h, cp).1), 1);
    }
}

#[test]
fn fqdn_node_ids_are_matched_by_name() {
    let cfg = UpfConfig {
        cp_peers: vec![CpPeer {
            node_id: NodeIdPattern::Fqdn("sgwc.example.org".into()),
            addrs: PeerFilter::loopback(),
        }],
        ..UpfConfig::default()
    };
    let mut h = Harness::with(cfg);
    let (_, r) =
        h.request(msg::ASSOCIATION_SETUP_REQUEST, None, &[NodeId::new_fqdn("SGWC.example.org").to_ie(), recovery_ie()]);
    assert_eq!(cause(&r), 1);
    let (_, r) = h.request(msg::ASSOCIATION_SETUP_REQUEST, None, &[node_ie(), recovery_ie()]);
    assert_eq!(cause(&r), CauseValue::RequestRejected as u8);
}

/// A node- or session-level request as a non-owner could send it: any
/// request type, the owner's SEIDs or others, the owner's Node ID or
/// others, valid or arbitrary IEs.
fn arb_request(seids: Vec<u64>) -> impl Strategy<Value = Vec<u8>> {
    let t = proptest::sample::select(vec![1u8, 5, 7, 9, 50, 52, 54, 56, 57, 3, 12]);
    let seid = prop_oneof![
        proptest::sample::select(seids).prop_map(Some),
        any::<u64>().prop_map(Some),
        Just(None),
        Just(Some(0))
    ];
    let ie = prop_oneof![
        Just(node_ie()),
        Just(node([127, 0, 0, 3])),
        any::<u32>().prop_map(|s| rts(u64::from(s))),
        (any::<u64>(), any::<[u8; 4]>())
            .prop_map(|(s, a)| Ie::new(IeType::Fseid, Fseid::new(s, Some(Ipv4Addr::from(a)), None).marshal())),
        props::arb_rule_ie(),
        (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..16)).prop_map(|(t, b)| Ie::new(IeType::from(t), b)),
    ];
    let rules = Just(session_rules(0x777, Ipv4Addr::new(10, 45, 0, 77), "internet"));
    (t, seid, proptest::collection::vec(ie, 0..6), any::<bool>(), rules, any::<u32>()).prop_map(
        |(t, seid, mut ies, with_rules, rules, seq)| {
            if with_rules {
                ies.extend(rules);
            }
            encode(t, seid, seq & 0xff_ffff, &ies)
        },
    )
}

proptest! {
    /// Arbitrary PFCP messages from another association's address, or from
    /// an address with none, never change the owner's association or
    /// sessions, and never panic.
    #[test]
    fn messages_from_a_non_owner_never_change_the_owners_sessions(
        msgs in proptest::collection::vec((any::<bool>(), arb_request(vec![1, 2, 3])), 1..12),
        truncate in proptest::collection::vec(any::<u8>(), 12),
    ) {
        let mut h = Harness::new();
        let seids = associated_with_sessions(&mut h);
        associate_other(&mut h);
        let owner = |st: &State| {
            let s: Vec<_> = st.0.iter().filter(|(_, v)| v.0 == "127.0.0.2").map(|(k, v)| (*k, v.clone())).collect();
            (s, st.1.get("127.0.0.2").cloned())
        };
        let before = owner(&h.state());
        let stranger: SocketAddr = "127.0.0.4:8805".parse().unwrap();
        for (i, (associated, mut m)) in msgs.into_iter().enumerate() {
            // Now and then a cut-off message.
            let cut = usize::from(truncate[i % truncate.len()]);
            if cut < m.len() && cut % 3 == 0 {
                m.truncate(cut);
            }
            // Requests aimed at the owner's real SEIDs too.
            if m.len() >= 16 && m[0] & 1 == 1 && i % 2 == 0 {
                m[4..12].copy_from_slice(&seids[i % 2].to_be_bytes());
            }
            h.core.handle_datagram(h.now, if associated { other() } else { stranger }, &m);
            while let Some((to, _)) = h.core.poll_transmit() {
                prop_assert!(to != smf(), "nothing goes to the owner");
            }
        }
        prop_assert_eq!(owner(&h.state()), before);
    }
}

/// UP SEIDs and CHOOSE F-TEIDs are not the previous one plus one, and a
/// value in use is never handed out again.
#[test]
fn seids_and_chosen_teids_are_drawn_never_in_use() {
    let mut h = Harness::new();
    h.associate();
    let mut seids = vec![];
    let mut teids = std::collections::BTreeSet::new();
    for cp in 1..=40u64 {
        let mut pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Access));
        pdi.f_teid = Some(Fteid::new_with_choose(true, false, true, false, 0u32, None, None, 0));
        let mut pdr = CreatePdr::new(PdrId::new(1), Precedence::new(10), pdi);
        pdr.far_id = Some(FarId::new(1));
        let far = CreateFar::new(FarId::new(1), ApplyAction::new(0x01));
        let (_, r) = h.request(
            msg::SESSION_ESTABLISHMENT_REQUEST,
            Some(0),
            &[node_ie(), fseid_ie(cp), pdr.to_ie(), far.to_ie()],
        );
        assert_eq!(cause(&r), 1);
        let created =
            rs_pfcp::ie::created_pdr::CreatedPdr::unmarshal(&first(&r, IeType::CreatedPdr).unwrap().payload).unwrap();
        assert!(teids.insert(u32::from(created.f_teid.unwrap().teid)), "a TEID in use handed out again");
        seids.push(up_seid(&r));
    }
    let distinct: std::collections::BTreeSet<_> = seids.iter().collect();
    assert_eq!(distinct.len(), seids.len());
    assert!(seids.windows(2).any(|w| w[1] != w[0].wrapping_add(1)), "SEIDs are not sequential");
    assert_eq!(h.core.teids.len(), 40);
    // Deleted sessions give their TEIDs back.
    for s in &seids {
        assert_eq!(cause(&h.request(msg::SESSION_DELETION_REQUEST, Some(*s), &[]).1), 1);
    }
    assert!(h.core.teids.is_empty());
}
