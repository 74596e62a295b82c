//! PFCP as SGW-Cs and SMFs in the field send it (issue 9): Create PDR
//! without Precedence, unknown IEs at every level, our own heartbeats and
//! dead-peer detection, what the node-level answers carry. Driven
//! directly under a virtual clock: no sockets, no sleeps.

use super::*;
use crate::dataplane::{DatapathConfig, Transmit, UserspacePlane, Verdict};
use crate::node::up_function_features;
use crate::rules::Pdr;
use mobicore_gtp::gtpu;
use rs_pfcp::ie::up_function_features::UPFunctionFeatures;
use std::time::Duration;

const UE: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 7);
const ENB: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 60);

fn unknown(raw: u16) -> Ie {
    Ie::new_unknown(raw, vec![0xde, 0xad]).unwrap()
}

/// An enterprise-specific IE (TS 29.244 8.1.1): type >= 32768, Enterprise ID.
fn vendor() -> Ie {
    Ie::new_vendor_specific(0x8123, 18681, vec![1, 2, 3]).unwrap()
}

/// Type 250 is a known IE, unexpected inside rule IEs; 400 is unknown to
/// the codec; plus an enterprise-specific IE.
fn strangers() -> Vec<Ie> {
    vec![Ie::new(IeType::from(250u16), vec![0, 0, 0, 1]), unknown(400), vendor()]
}

/// The rules an SGW-C sends on Sxa (TS 29.244 7.5.2.2, as in the field):
/// one PDR per direction and no Precedence; uplink TEID CHOOSE when
/// `teid` is None. With `extra`, every grouped IE (Create PDR, PDI,
/// Create FAR, Forwarding Parameters) carries those IEs too.
fn sxa_rules(teid: Option<u32>, extra: &[Ie]) -> Vec<Ie> {
    let with = |mut v: Vec<Ie>| {
        v.extend_from_slice(extra);
        v
    };
    let fteid = match teid {
        Some(t) => Fteid::new(true, false, t, Some(Ipv4Addr::new(127, 0, 0, 9)), None, 0),
        None => Fteid::new_with_choose(true, false, true, false, 0u32, None, None, 0),
    };
    let ul_pdi = Ie::new_grouped(
        IeType::Pdi,
        with(vec![
            SourceInterface::new(SourceInterfaceValue::Access).to_ie(),
            Ie::new(IeType::Fteid, fteid.marshal()),
            NetworkInstance { instance: "\x08internet".into() }.to_ie(),
        ]),
    );
    let ul = Ie::new_grouped(
        IeType::CreatePdr,
        with(vec![
            PdrId::new(1).to_ie(),
            ul_pdi,
            Ie::new(IeType::OuterHeaderRemoval, OuterHeaderRemoval::new(0).marshal().to_vec()),
            FarId::new(1).to_ie(),
        ]),
    );
    let mut ue = UeIpAddress::new(Some(UE), None);
    ue.source_destination = true;
    let dl_pdi =
        Ie::new_grouped(IeType::Pdi, with(vec![SourceInterface::new(SourceInterfaceValue::Core).to_ie(), ue.to_ie()]));
    let dl = Ie::new_grouped(IeType::CreatePdr, with(vec![PdrId::new(2).to_ie(), dl_pdi, FarId::new(2).to_ie()]));
    let fp = |dest: Interface, ohc: Option<OuterHeaderCreation>| {
        let mut v = vec![DestinationInterface::new(dest).to_ie()];
        v.extend(ohc.map(|o| o.to_ie()));
        Ie::new_grouped(IeType::ForwardingParameters, with(v))
    };
    let far = |id: u32, p: Ie| {
        Ie::new_grouped(IeType::CreateFar, with(vec![FarId::new(id).to_ie(), ApplyAction::new(0x02).to_ie(), p]))
    };
    let ul_far = far(1, fp(Interface::Core, None));
    let dl_far = far(2, fp(Interface::Access, Some(OuterHeaderCreation::gtpu_ipv4(0x900, ENB))));
    vec![ul, dl, ul_far, dl_far]
}

fn establishment(cp_seid: u64, rules: Vec<Ie>) -> Vec<Ie> {
    let mut ies = vec![node_ie(), fseid_ie(cp_seid)];
    ies.extend(rules);
    ies
}

/// A harness whose forwarding plane is the user-space data path (driven
/// without I/O: packets in through `uplink`/`downlink`, out as transmits).
fn userspace_harness() -> (Harness, UserspacePlane) {
    let cfg = DatapathConfig { s1u_addr: Ipv4Addr::new(127, 0, 0, 9), ..DatapathConfig::default() };
    let user = UserspacePlane::new(cfg, Counters::new());
    let mut h = Harness::new();
    h.core = UpfCore::new(
        UpfConfig { s1u_addr: Ipv4Addr::new(127, 0, 0, 9), ..UpfConfig::default() },
        Box::new(user.clone()),
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        Counters::new(),
    );
    (h, user)
}

#[test]
fn sxa_create_pdr_without_precedence_is_accepted_and_forwards() {
    let (mut h, user) = userspace_harness();
    h.associate();
    let (hd, ies) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(5, sxa_rules(None, &[])));
    assert_eq!((hd.seid, cause(&ies)), (Some(5), 1), "{ies:?}");
    assert_eq!(h.core.counters.value("pfcp_pdr_without_precedence"), 2);
    let seid = up_seid(&ies);
    let rules = h.core.sessions()[&seid].rules.clone();
    assert!(rules.pdrs.values().all(|p: &Pdr| p.precedence == u32::MAX), "the documented default, lowest");
    // The TEID we chose (CHOOSE) carries uplink traffic to the core, and
    // downlink to the UE goes to the eNB's tunnel.
    let created =
        rs_pfcp::ie::created_pdr::CreatedPdr::unmarshal(&first(&ies, IeType::CreatedPdr).unwrap().payload).unwrap();
    let teid: u32 = created.f_teid.unwrap().teid.into();
    let inner = crate::dataplane::ipv4::udp_packet(UE, Ipv4Addr::new(192, 0, 2, 10), 4000, 53, b"up");
    let now = h.now;
    let enb = std::net::SocketAddrV4::new(ENB, 2152);
    let mut p = user.lock();
    assert_eq!(p.uplink(now, enb, &gtpu::gpdu(teid, &inner)), Verdict::Forwarded);
    assert_eq!(p.poll_transmit(), Some(Transmit::Core(inner)));
    let reply = crate::dataplane::ipv4::udp_packet(Ipv4Addr::new(192, 0, 2, 10), UE, 53, 4000, b"down");
    assert_eq!(p.downlink(now, &reply), Verdict::Forwarded);
    let Some(Transmit::Gtpu { to, bytes }) = p.poll_transmit() else { panic!("no downlink G-PDU") };
    assert_eq!((to, gtpu::parse(&bytes).unwrap().header.teid), (enb, 0x900));
}

/// An uplink PDR whose PDI carries this SDF filter, with its FAR.
fn filtered_uplink(flow_description: &str) -> Vec<Ie> {
    let fteid = Fteid::new(true, false, 7, Some(Ipv4Addr::new(127, 0, 0, 9)), None, 0);
    let pdi = Ie::new_grouped(
        IeType::Pdi,
        vec![
            SourceInterface::new(SourceInterfaceValue::Access).to_ie(),
            Ie::new(IeType::Fteid, fteid.marshal()),
            rs_pfcp::ie::sdf_filter::SdfFilter::new(flow_description).to_ie(),
        ],
    );
    let pdr = Ie::new_grouped(IeType::CreatePdr, vec![PdrId::new(4).to_ie(), pdi, FarId::new(1).to_ie()]);
    let fp = Ie::new_grouped(IeType::ForwardingParameters, vec![DestinationInterface::new(Interface::Core).to_ie()]);
    let far = Ie::new_grouped(IeType::CreateFar, vec![FarId::new(1).to_ie(), ApplyAction::new(0x02).to_ie(), fp]);
    vec![pdr, far]
}

#[test]
fn a_pdr_whose_sdf_filter_we_cannot_read_is_refused_with_its_rule_id() {
    // Installed, it would never match and its traffic would meet the next PDR's rules unseen.
    let mut h = Harness::new();
    h.associate();
    let rules = filtered_uplink("permit out udpx from any to assigned");
    let (_, ies) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(5, rules));
    let failed = first(&ies, IeType::FailedRuleId)
        .map(|f| rs_pfcp::ie::failed_rule_id::FailedRuleId::unmarshal(&f.payload).unwrap().rule_id());
    assert_eq!((cause(&ies), failed), (73, Some(4)), "{ies:?}");
    assert!(h.core.sessions().is_empty());
    // The same filter as SD-Core's pfcpsim writes it, protocol by name: taken.
    let rules = filtered_uplink("permit out udp from 192.0.2.10/32 to assigned 40000-40999");
    let (_, ies) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(6, rules));
    assert_eq!(cause(&ies), 1, "{ies:?}");
    assert_eq!(h.plane.get(up_seid(&ies)).unwrap().pdrs[&4].pdi.flows[0].proto, Some(17));
}

#[test]
fn configured_default_precedence_and_given_ones_are_kept() {
    let mut h = Harness::with(UpfConfig { default_pdr_precedence: 0, ..UpfConfig::default() });
    h.associate();
    let (_, ies) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(5, sxa_rules(Some(7), &[])));
    assert_eq!(cause(&ies), 1);
    let r = h.plane.get(up_seid(&ies)).unwrap();
    assert_eq!((r.pdrs[&1].precedence, r.pdrs[&2].precedence), (0, 0));
    // With Precedence (Sxb), the value sent is kept and nothing is counted.
    let before = h.core.counters.value("pfcp_pdr_without_precedence");
    let (_, ies) = establish(&mut h, 6);
    assert_eq!(h.plane.get(up_seid(&ies)).unwrap().pdrs[&1].precedence, 100);
    assert_eq!(h.core.counters.value("pfcp_pdr_without_precedence"), before);
    // A Create PDR without Precedence in a Session Modification as well.
    let seid = up_seid(&ies);
    let mut pdi = Pdi::new(SourceInterface::new(SourceInterfaceValue::Core));
    pdi.ue_ip_addresses = vec![UeIpAddress::new(Some(Ipv4Addr::new(10, 45, 0, 99)), None)];
    let pdr = Ie::new_grouped(IeType::CreatePdr, vec![PdrId::new(9).to_ie(), pdi.to_ie(), FarId::new(2).to_ie()]);
    let (_, r) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[pdr]);
    assert_eq!(cause(&r), 1);
    assert_eq!(h.plane.get(seid).unwrap().pdrs[&9].precedence, 0);
}

#[test]
fn unknown_ies_are_ignored_at_the_top_level_and_in_grouped_ies() {
    let mut h = Harness::new();
    h.associate();
    let (_, plain) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(5, sxa_rules(Some(7), &[])));
    let mut ies = establishment(6, sxa_rules(Some(8), &strangers()));
    ies.splice(1..1, strangers());
    ies.extend(strangers());
    let (hd, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies);
    assert_eq!((hd.seid, cause(&r)), (Some(6), 1), "{r:?}");
    // The same rules as without the strangers (but the TEID).
    let (a, mut b) = (h.plane.get(up_seid(&plain)).unwrap(), h.plane.get(up_seid(&r)).unwrap());
    b.pdrs.get_mut(&1).unwrap().pdi.local_fteid = a.pdrs[&1].pdi.local_fteid;
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    // 3 at the top twice, 2 of each kind in 2 PDRs, 2 PDIs, 2 FARs, 2 FPs.
    assert_eq!(h.core.counters.value("pfcp_unknown_ie_ignored"), 2 * 2 + 8 * 2);
    // In node-level requests and modifications too.
    let mut setup = vec![node_ie(), recovery_ie()];
    setup.extend(strangers());
    assert_eq!(cause(&h.request(msg::ASSOCIATION_SETUP_REQUEST, None, &setup).1), 1);
    let far = Ie::new_grouped(
        IeType::UpdateFar,
        [vec![FarId::new(2).to_ie(), ApplyAction::new(0x01).to_ie()], strangers()].concat(),
    );
    let (_, m) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(up_seid(&r)), &[unknown(400), far]);
    assert_eq!(cause(&m), 1);
    assert!(h.plane.get(up_seid(&r)).unwrap().fars[&2].action.drop);
}

#[test]
fn missing_mandatory_ies_are_still_refused_among_unknown_ones() {
    let mut h = Harness::new();
    h.associate();
    // No CP F-SEID at the top level.
    let mut ies = vec![node_ie()];
    ies.extend(strangers());
    ies.extend(sxa_rules(Some(7), &strangers()));
    let (_, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies);
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::Fseid as u16)));
    // A Create PDR without its PDI (and without Precedence).
    let pdr = Ie::new_grouped(IeType::CreatePdr, [vec![PdrId::new(1).to_ie()], strangers()].concat());
    let far = CreateFar::new(FarId::new(1), ApplyAction::new(0x01)).to_ie();
    let (_, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &[node_ie(), fseid_ie(3), pdr, far]);
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::Pdi as u16)));
    // A Create FAR without its Apply Action.
    let mut rules = sxa_rules(Some(7), &[]);
    rules[3] = Ie::new_grouped(IeType::CreateFar, [vec![FarId::new(2).to_ie()], strangers()].concat());
    let (_, r) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(4, rules));
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::ApplyAction as u16)));
    assert!(h.plane.is_empty());
    // Association Setup without Node ID among unknown IEs.
    let mut setup = vec![recovery_ie()];
    setup.extend(strangers());
    let (_, r) = h.request(msg::ASSOCIATION_SETUP_REQUEST, None, &setup);
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::NodeId as u16)));
}

#[test]
fn remove_rules_in_their_grouped_encoding() {
    let mut h = Harness::new();
    h.associate();
    let (_, ies) = h.request(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &establishment(5, sxa_rules(Some(7), &[])));
    let seid = up_seid(&ies);
    // TS 29.244 7.5.4.6/7.5.4.7: Remove PDR holds a PDR ID IE, Remove FAR a FAR ID IE.
    let rm_pdr = Ie::new_grouped(IeType::RemovePdr, vec![unknown(400), PdrId::new(2).to_ie()]);
    let rm_far = Ie::new_grouped(IeType::RemoveFar, vec![FarId::new(2).to_ie()]);
    let (_, r) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[rm_pdr, rm_far]);
    assert_eq!(cause(&r), 1, "{r:?}");
    let rules = h.plane.get(seid).unwrap();
    assert_eq!((rules.pdrs.keys().collect::<Vec<_>>(), rules.fars.keys().collect::<Vec<_>>()), (vec![&1], vec![&1]));
    // A Remove PDR without a PDR ID names it.
    let rm = Ie::new_grouped(IeType::RemovePdr, vec![unknown(400)]);
    let (_, r) = h.request(msg::SESSION_MODIFICATION_REQUEST, Some(seid), &[rm]);
    assert_eq!((cause(&r), offending(&r)), (66, Some(IeType::PdrId as u16)));
}

// ---- Node-level answers (TS 29.244 7.4) ----

#[test]
fn association_setup_response_carries_node_id_cause_recovery_and_features() {
    let mut h = Harness::new();
    let (hd, ies) = h.request(msg::ASSOCIATION_SETUP_REQUEST, None, &[node_ie(), recovery_ie()]);
    assert_eq!(hd.msg_type, msg::ASSOCIATION_SETUP_RESPONSE);
    assert_eq!(cause(&ies), 1);
    let node = NodeId::unmarshal(&first(&ies, IeType::NodeId).unwrap().payload).unwrap();
    assert_eq!(node, NodeId::new_ipv4(Ipv4Addr::new(127, 0, 0, 2)));
    let rts = RecoveryTimeStamp::unmarshal(&first(&ies, IeType::RecoveryTimeStamp).unwrap().payload).unwrap();
    assert_eq!(rts.timestamp, h.core.recovery);
    let f = UPFunctionFeatures::unmarshal(&first(&ies, IeType::UpFunctionFeatures).unwrap().payload).unwrap();
    assert_eq!(f, up_function_features());
    for x in [UPFunctionFeatures::BUCP, UPFunctionFeatures::FTUP, UPFunctionFeatures::EMPU] {
        assert!(f.contains(x));
    }
    assert!(!f.contains(UPFunctionFeatures::UEIP) && !f.contains(UPFunctionFeatures::QUOAC));
    // A refusal has Node ID, Cause and Recovery Time Stamp, no features.
    let mut other = Harness::new();
    let (_, ies) = other.request(
        msg::ASSOCIATION_SETUP_REQUEST,
        None,
        &[NodeId::new_ipv4(Ipv4Addr::new(10, 9, 9, 9)).to_ie(), recovery_ie()],
    );
    assert_eq!(cause(&ies), 64);
    assert!(first(&ies, IeType::NodeId).is_some() && first(&ies, IeType::RecoveryTimeStamp).is_some());
    assert!(first(&ies, IeType::UpFunctionFeatures).is_none());
    // Heartbeat Response: our Recovery Time Stamp (TS 29.244 7.4.2.2).
    let (hd, ies) = h.request(msg::HEARTBEAT_REQUEST, None, &[recovery_ie()]);
    assert_eq!(hd.msg_type, msg::HEARTBEAT_RESPONSE);
    let rts = RecoveryTimeStamp::unmarshal(&first(&ies, IeType::RecoveryTimeStamp).unwrap().payload).unwrap();
    assert_eq!(rts.timestamp, h.core.recovery);
}

// ---- Our heartbeats (TS 29.244 6.2.2, 6.4) ----

fn hb_config() -> UpfConfig {
    UpfConfig {
        heartbeat_interval_ms: 10_000,
        t1: Duration::from_secs(3),
        n1: 3,
        peer_dead_grace_ms: 60_000,
        ..UpfConfig::default()
    }
}

impl Harness {
    /// Moves the clock to the node's next deadline (not beyond `end`) and
    /// fires it; what it sent. `None` once nothing is due before `end`.
    fn step_until(&mut self, end: Instant) -> Option<Vec<(SocketAddr, Vec<u8>)>> {
        let t = self.core.poll_timeout().filter(|t| *t <= end)?;
        self.now = self.now.max(t);
        self.core.handle_timeout(self.now);
        Some(std::iter::from_fn(|| self.core.poll_transmit()).map(|(to, b)| (to, b.to_vec())).collect())
    }

    /// Runs the clock to `end`; every datagram sent on the way, with its time.
    fn run_to(&mut self, end: Instant) -> Vec<(Instant, SocketAddr, Vec<u8>)> {
        let mut out = vec![];
        while let Some(sent) = self.step_until(end) {
            out.extend(sent.into_iter().map(|(to, b)| (self.now, to, b)));
        }
        self.now = end;
        out
    }

    fn answer_heartbeat(&mut self, seq: u32, recovery: Ie) {
        let b = encode(msg::HEARTBEAT_RESPONSE, None, seq, &[recovery]);
        self.core.handle_datagram(self.now, smf(), &b);
        assert!(self.core.poll_transmit().is_none());
    }
}

fn heartbeats(sent: &[(Instant, SocketAddr, Vec<u8>)]) -> Vec<(Instant, u32)> {
    sent.iter()
        .filter(|(_, to, b)| *to == smf() && b[1] == msg::HEARTBEAT_REQUEST)
        .map(|(t, _, b)| {
            let (h, ies) = decode(b).unwrap();
            let rts = RecoveryTimeStamp::unmarshal(&first(&ies, IeType::RecoveryTimeStamp).unwrap().payload);
            assert!(rts.is_ok(), "our Recovery Time Stamp in every Heartbeat Request");
            (*t, h.seq)
        })
        .collect()
}

#[test]
fn heartbeats_go_to_each_associated_peer_every_interval() {
    let mut h = Harness::with(hb_config());
    let t0 = h.now;
    assert!(h.run_to(t0 + Duration::from_secs(60)).is_empty(), "no association, no heartbeat");
    let t0 = h.now;
    h.associate();
    for i in 1..=3u32 {
        let sent = h.run_to(t0 + Duration::from_secs(10 * u64::from(i)));
        let hb = heartbeats(&sent);
        assert_eq!(hb.len(), 1, "one per interval, {sent:?}");
        assert_eq!(hb[0].0, t0 + Duration::from_secs(10 * u64::from(i)));
        h.answer_heartbeat(hb[0].1, recovery_ie());
    }
    assert_eq!(h.core.counters.value("pfcp_heartbeat_sent"), 3);
    assert_eq!(h.core.counters.value("pfcp_peer_dead"), 0);
}

#[test]
fn unanswered_heartbeats_are_retransmitted_then_the_peer_is_dead_and_its_sessions_go_after_the_grace() {
    let mut h = Harness::with(hb_config());
    h.associate();
    let t0 = h.now;
    let seid = up_seid(&establish(&mut h, 1).1);
    // Sent at 10 s, resent every T1 = 3 s N1 = 3 times, given up at 22 s.
    let sent = h.run_to(t0 + Duration::from_secs(22) - Duration::from_millis(1));
    let hb = heartbeats(&sent);
    let times: Vec<u64> = hb.iter().map(|(t, _)| (*t - t0).as_secs()).collect();
    assert_eq!(times, vec![10, 13, 16, 19]);
    assert!(hb.iter().all(|(_, s)| *s == hb[0].1), "retransmissions keep the sequence number");
    assert_eq!(h.core.counters.value("pfcp_peer_dead"), 0);
    h.run_to(t0 + Duration::from_secs(22));
    assert_eq!(h.core.counters.value("pfcp_peer_dead"), 1);
    let a = &h.core.associations()["127.0.0.2"];
    assert_eq!(a.dead_until, Some(t0 + Duration::from_secs(82)));
    // Kept (and still forwarding) through the grace period; still probed.
    let sent = h.run_to(t0 + Duration::from_secs(81));
    assert!(!heartbeats(&sent).is_empty());
    assert!(h.plane.get(seid).is_some());
    assert_eq!(h.core.counters.value("pfcp_peer_dead"), 1, "counted once per death");
    h.run_to(t0 + Duration::from_secs(82));
    assert!(h.plane.is_empty() && h.core.sessions().is_empty() && h.core.associations().is_empty());
    assert_eq!(h.core.counters.value("pfcp_dead_peer_association_deleted"), 1);
    // Without an association: no more heartbeats, and its requests are refused.
    assert!(h.run_to(h.now + Duration::from_secs(100)).is_empty());
    let (_, r) = h.request(msg::SESSION_DELETION_REQUEST, Some(seid), &[]);
    assert_eq!(cause(&r), 72);
}

#[test]
fn a_dead_peer_that_answers_within_the_grace_keeps_its_sessions() {
    let mut h = Harness::with(hb_config());
    h.associate();
    let t0 = h.now;
    let seid = up_seid(&establish(&mut h, 1).1);
    h.run_to(t0 + Duration::from_secs(30));
    assert_eq!(h.core.counters.value("pfcp_peer_dead"), 1);
    let sent = h.run_to(t0 + Duration::from_secs(40));
    // The latest one is outstanding (earlier ones have timed out).
    let hb = heartbeats(&sent);
    h.answer_heartbeat(hb.last().unwrap().1, recovery_ie());
    assert_eq!(h.core.associations()["127.0.0.2"].dead_until, None);
    assert_eq!(h.core.counters.value("pfcp_peer_alive_again"), 1);
    // Past the first grace period's end (82 s): kept, as it answered.
    h.run_to(t0 + Duration::from_secs(85));
    assert!(h.plane.get(seid).is_some(), "not deleted: it answered");
    assert_eq!(h.core.counters.value("pfcp_dead_peer_association_deleted"), 0);
    // So does one that sets up the association again with the same Recovery Time Stamp.
    let mut h = Harness::with(hb_config());
    h.associate();
    let t0 = h.now;
    let seid = up_seid(&establish(&mut h, 1).1);
    h.run_to(t0 + Duration::from_secs(30));
    h.associate();
    assert_eq!(h.core.associations()["127.0.0.2"].dead_until, None);
    h.run_to(t0 + Duration::from_secs(100));
    assert!(h.plane.get(seid).is_some());
}

#[test]
fn no_grace_deletes_a_dead_peers_sessions_at_once() {
    let mut h = Harness::with(UpfConfig { peer_dead_grace_ms: 0, ..hb_config() });
    h.associate();
    let t0 = h.now;
    establish(&mut h, 1);
    h.run_to(t0 + Duration::from_secs(22));
    assert_eq!(h.core.counters.value("pfcp_peer_dead"), 1);
    assert!(h.plane.is_empty() && h.core.associations().is_empty());
}

#[test]
fn a_new_recovery_time_stamp_in_a_heartbeat_deletes_the_peers_sessions() {
    let mut h = Harness::with(hb_config());
    h.associate();
    let t0 = h.now;
    let seid = up_seid(&establish(&mut h, 1).1);
    // Same Recovery Time Stamp: nothing happens.
    let hb = heartbeats(&h.run_to(t0 + Duration::from_secs(10)));
    h.answer_heartbeat(hb[0].1, recovery_ie());
    assert!(h.plane.get(seid).is_some());
    // The CP function restarted (TS 29.244 6.2.2, 19A): its sessions go, the association stays.
    let hb = heartbeats(&h.run_to(t0 + Duration::from_secs(20)));
    let restarted = RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH + Duration::from_secs(3_900_000_000)).to_ie();
    h.answer_heartbeat(hb[0].1, restarted.clone());
    assert!(h.plane.is_empty() && h.core.sessions().is_empty());
    assert_eq!(h.core.counters.value("pfcp_cp_function_restarted"), 1);
    assert_eq!(h.core.associations()["127.0.0.2"].sessions, 0);
    // Its Heartbeat Request with a newer one does the same.
    let seid = up_seid(&establish(&mut h, 2).1);
    let newer = RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH + Duration::from_secs(3_900_000_100)).to_ie();
    let (hd, _) = h.request(msg::HEARTBEAT_REQUEST, None, &[newer]);
    assert_eq!(hd.msg_type, msg::HEARTBEAT_RESPONSE);
    assert!(h.plane.get(seid).is_none());
    assert_eq!(h.core.counters.value("pfcp_cp_function_restarted"), 2);
    // A response to nothing of ours is counted and changes nothing.
    let before = h.core.counters.value("pfcp_unexpected_response");
    h.answer_heartbeat(0x77_7777, restarted);
    assert_eq!(h.core.counters.value("pfcp_unexpected_response"), before + 1);
}

#[test]
fn with_restart_from_heartbeats_off_a_heartbeats_new_stamp_keeps_the_sessions() {
    // A CP function that stamps each Heartbeat Request with its time of sending (SD-Core's
    // pfcpsim does): counted, its sessions stay; a new Association Setup with a new stamp still
    // deletes them.
    let mut h = Harness::with(UpfConfig { restart_from_heartbeats: false, ..hb_config() });
    h.associate();
    let seid = up_seid(&establish(&mut h, 1).1);
    for secs in [3_900_000_005, 3_900_000_010] {
        let stamp = RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH + Duration::from_secs(secs)).to_ie();
        let (hd, _) = h.request(msg::HEARTBEAT_REQUEST, None, &[stamp]);
        assert_eq!(hd.msg_type, msg::HEARTBEAT_RESPONSE);
    }
    assert!(h.plane.get(seid).is_some());
    assert_eq!(h.core.counters.value("pfcp_heartbeat_recovery_changed"), 2);
    assert_eq!(h.core.counters.value("pfcp_cp_function_restarted"), 0);
    let restarted = RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH + Duration::from_secs(3_900_000_100)).to_ie();
    let (hd, _) = h.request(msg::ASSOCIATION_SETUP_REQUEST, None, &[node_ie(), restarted]);
    assert_eq!(hd.msg_type, msg::ASSOCIATION_SETUP_RESPONSE);
    assert!(h.plane.get(seid).is_none());
    assert_eq!(h.core.counters.value("pfcp_cp_function_restarted"), 1);
}

// ---- tshark: what the node sends, dissected independently ----

#[test]
fn tshark_dissects_our_heartbeats_and_association_setup_response() {
    let mut h = Harness::with(hb_config());
    let mut seen = vec![];
    let setup = encode(msg::ASSOCIATION_SETUP_REQUEST, None, 1, &[node_ie(), recovery_ie()]);
    h.core.handle_datagram(h.now, smf(), &setup);
    seen.push(h.core.poll_transmit().unwrap().1.to_vec());
    let hb = encode(msg::HEARTBEAT_REQUEST, None, 2, &[recovery_ie()]);
    h.core.handle_datagram(h.now, smf(), &hb);
    seen.push(h.core.poll_transmit().unwrap().1.to_vec());
    let t0 = h.now;
    let ours = h.run_to(t0 + Duration::from_secs(10));
    assert_eq!(heartbeats(&ours).len(), 1);
    seen.extend(ours.into_iter().map(|(_, _, b)| b));
    let est = establishment(5, sxa_rules(None, &[]));
    h.core.handle_datagram(h.now, smf(), &encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 3, &est));
    seen.push(h.core.poll_transmit().unwrap().1.to_vec());
    let types: Vec<u8> = seen.iter().map(|b| b[1]).collect();
    assert_eq!(types, vec![6, 2, 1, 51]);
    let packets: Vec<Vec<u8>> = seen
        .iter()
        .map(|b| crate::dataplane::ipv4::udp_packet(Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::LOCALHOST, 8805, 8805, b))
        .collect();
    if let Some(text) = crate::dataplane::tests_netns::tshark_raw(&packets) {
        for s in [
            "Association Setup Response",
            "Heartbeat Request",
            "Heartbeat Response",
            "UP Function Features",
            "Recovery Time Stamp",
            "BUCP",
        ] {
            assert!(text.contains(s), "{s} not in:\n{text}");
        }
    }
}
