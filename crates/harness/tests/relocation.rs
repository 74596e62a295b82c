//! Seed 000's relocation through the whole core in memory: the controller
//! relays S11 between the real MME and the real SGW-C, records it, and
//! replays it into edge anchors (real SGW-Cs with real UPF nodes). A replay
//! must reproduce the source's state for the replayed UEs, and the replica
//! must follow every later request (idle, service request, handover,
//! detach).

use std::net::Ipv4Addr;
use std::time::Duration;

use mobicore_controller::{Mode, RelocationState};
use mobicore_harness::{Network, NetworkConfig};

const INACTIVITY: Duration = Duration::from_secs(10);

/// `n` UEs attached through the controller's relay, one edge anchor whose
/// pool is `edge_pool`.
fn relayed(n_enbs: usize, n: u64, edge_pool: Ipv4Addr) -> Network {
    let cfg = NetworkConfig { inactivity_timeout: Some(INACTIVITY), ..NetworkConfig::default() };
    let mut net = Network::new(n_enbs, n, cfg);
    net.enable_controller();
    let edge = net.edge_spgwc_config(0, edge_pool);
    net.add_edge(edge);
    net.s1_setup_all();
    for ue in 0..n {
        net.attach(ue);
    }
    net.drive();
    for ue in 0..n {
        assert!(net.ipv4(ue).is_some(), "UE {ue} attached through the relay");
    }
    net
}

/// The original SGW-C's pool: a naive replica must hand out the same.
fn original_pool(net: &Network) -> Ipv4Addr {
    net.spgwc_config().apns[0].pool.expect("a pool")
}

fn relocate(net: &mut Network, ue: u64, mode: Mode) -> u64 {
    relocate_keeping(net, ue, mode, true)
}

/// With `keep_address` false, a selective replica gives the UE an address
/// of its own pool (the steering switch translates).
fn relocate_keeping(net: &mut Network, ue: u64, mode: Mode, keep_address: bool) -> u64 {
    let imsi = net.imsi(ue).as_str().to_string();
    let now = net.now;
    let id = net.controller().relocate_with(now, &imsi, None, "edge0", mode, keep_address).expect("relocation starts");
    net.drive();
    id
}

fn state(net: &mut Network, id: u64) -> RelocationState {
    net.controller().relocation(id).unwrap().state.clone()
}

/// The edge SGW-C's session for UE `ue`.
fn replica(net: &Network, ue: u64) -> Option<&mobicore_spgwc::context::Session> {
    let imsi = net.imsi(ue);
    net.edges[0].spgwc.sessions().values().find(|s| s.imsi == imsi)
}

#[test]
fn the_relay_is_transparent_and_records_each_session_in_two_messages() {
    let net = relayed(1, 20, Ipv4Addr::new(10, 60, 0, 0));
    let c = net.controller.as_ref().unwrap();
    let relay = c.relay();
    assert_eq!(relay.sessions().len(), 20);
    for s in relay.sessions().values() {
        assert!(s.mbr.is_some(), "the Modify Bearer of attach is recorded");
        assert!(s.ue_ipv4.is_some() && s.s1u_sgw.is_some());
    }
    let (log, selective) = relay.stored_bytes();
    println!("stored per UE: selective {} B, naive log {} B", selective / 20, log / 20);
    // Same bytes, same sequence numbers: the SGW-C saw no duplicates and
    // no malformed message, the MME no unmatched answer.
    assert_eq!(net.spgwc.counters.value("gtp_malformed"), 0);
    assert_eq!(net.spgwc.counters.value("s11_duplicate_request"), 0);
    assert_eq!(c.counters().value("relay_from_unknown_peer"), 0);
    assert_eq!(c.counters().value("relay_malformed"), 0);
}

#[test]
fn selective_replay_reproduces_the_moved_ues_sessions_only() {
    let mut net = relayed(1, 20, Ipv4Addr::new(10, 60, 0, 0));
    // UEs 3 and 7 keep their address at the replica (a static address in
    // the replayed Create Session); UE 11's replica gives its own.
    let moved = [3u64, 7, 11];
    let ids: Vec<u64> = moved.iter().map(|&ue| relocate_keeping(&mut net, ue, Mode::Selective, ue != 11)).collect();
    for (&ue, &id) in moved.iter().zip(&ids) {
        assert_eq!(state(&mut net, id), RelocationState::Active, "UE {ue}");
        let orig = net.sgw_session(ue).unwrap().clone();
        let rep = replica(&net, ue).expect("replica session").clone();
        assert_eq!((rep.apn.as_str(), rep.ebi, rep.pdn_type), (orig.apn.as_str(), orig.ebi, orig.pdn_type));
        assert_eq!(rep.s1u_enb, orig.s1u_enb, "the replayed Modify Bearer gave the replica the eNB's F-TEID");
        assert_eq!(rep.mme_s11.teid, orig.mme_s11.teid, "the MME's S11 TEID is the one it sent");
        let ip = rep.ue_ipv4.unwrap();
        if ue == 11 {
            assert_eq!(ip.octets()[..2], [10, 60], "selective: the replica's own pool");
        } else {
            assert_eq!(Some(ip), orig.ue_ipv4, "selective, address kept: the UE's own");
        }
        let r = net.controller().relocation(id).unwrap().clone();
        let s = &r.sessions[0];
        let rs = s.replica.unwrap();
        assert_eq!(rs.ue_ipv4, Some(ip));
        assert_eq!(rs.sgw_s11_teid, rep.sgw_s11.teid.0);
        assert_eq!(rs.s1u.map(|f| f.0), Some(rep.s1u_sgw.teid.0));
        assert_eq!(s.ue_ipv4, orig.ue_ipv4);
        assert_eq!(r.replicated_messages, 2, "Create Session and Modify Bearer");
        // The replica's UPF holds the forwarding rules of the session.
        let rules = net.edges[0].plane.table.get(rep.up_seid.unwrap()).expect("rules on the edge UPF");
        assert!(!rules.pdrs.is_empty() && !rules.fars.is_empty());
    }
    assert_eq!(net.edges[0].spgwc.sessions().len(), 3, "only the moved UEs");
    // The replica's answers never reached the MME.
    assert_eq!(net.s11_client.stats.unmatched_responses, 0);
}

#[test]
fn a_replica_follows_idle_service_request_handover_and_detach() {
    let mut net = relayed(2, 4, Ipv4Addr::new(10, 60, 0, 0));
    let id = relocate(&mut net, 0, Mode::Selective);
    assert_eq!(state(&mut net, id), RelocationState::Active);
    // Idle: Release Access Bearers mirrored, the replica buffers too.
    net.advance(INACTIVITY + Duration::from_secs(1));
    assert!(net.sgw_session(0).unwrap().s1u_enb.is_none());
    assert!(replica(&net, 0).unwrap().s1u_enb.is_none(), "Release Access Bearers mirrored");
    // Service request: the new eNB F-TEID reaches the replica.
    let now = net.now;
    let enb = net.enb_of(0);
    net.enbs[enb].start_service_request(now, 0).unwrap();
    net.drive();
    let orig = net.sgw_session(0).unwrap().s1u_enb;
    assert!(orig.is_some());
    assert_eq!(replica(&net, 0).unwrap().s1u_enb, orig, "Modify Bearer mirrored");
    // X2 handover to the other eNB: the replica switches its path too.
    let target = 1 - enb;
    net.x2_handover(0, target).unwrap();
    net.drive();
    let orig = net.sgw_session(0).unwrap().s1u_enb.unwrap();
    assert_eq!(orig.ipv4, Ipv4Addr::new(10, 0, 1, target as u8 + 1));
    assert_eq!(replica(&net, 0).unwrap().s1u_enb, Some(orig));
    // Detach: the replica's session goes, the relocation ends.
    net.detach(0, false);
    net.drive();
    assert!(replica(&net, 0).is_none(), "Delete Session mirrored");
    assert_eq!(state(&mut net, id), RelocationState::Reverted);
    assert_eq!(net.controller().relay().sessions().len(), 3, "its record dropped");
    assert_eq!(net.controller().counters().value("replica_mirror_failed"), 0);
}

#[test]
fn naive_replay_reproduces_every_session_with_the_same_addresses_and_follows_new_ones() {
    let mut net = Network::new(1, 6, NetworkConfig::default());
    net.enable_controller();
    let pool = original_pool(&net);
    let edge = net.edge_spgwc_config(0, pool);
    net.add_edge(edge);
    net.s1_setup_all();
    for ue in 0..5 {
        net.attach(ue);
    }
    net.drive();
    let id = relocate(&mut net, 2, Mode::Naive);
    assert_eq!(state(&mut net, id), RelocationState::Active);
    assert_eq!(net.edges[0].spgwc.sessions().len(), 5, "naive: every session");
    for ue in 0..5 {
        let (o, r) = (net.sgw_session(ue).unwrap().clone(), replica(&net, ue).unwrap().clone());
        assert_eq!(r.ue_ipv4, o.ue_ipv4, "naive: the same UE address for UE {ue}");
        assert_eq!(r.s1u_enb, o.s1u_enb);
    }
    // From now on every request reaches the replica too: a new attach.
    net.attach(5);
    net.drive();
    assert_eq!(replica(&net, 5).unwrap().ue_ipv4, net.sgw_session(5).unwrap().ue_ipv4);
}

#[test]
fn moving_back_deletes_the_replica_and_a_second_move_replicates_again() {
    let mut net = relayed(1, 3, Ipv4Addr::new(10, 60, 0, 0));
    let id = relocate(&mut net, 1, Mode::Selective);
    let now = net.now;
    net.controller().move_back(now, id).unwrap();
    net.drive();
    assert_eq!(state(&mut net, id), RelocationState::Reverted);
    assert!(replica(&net, 1).is_none(), "the replica session deleted");
    let again = relocate(&mut net, 1, Mode::Selective);
    assert_eq!(state(&mut net, again), RelocationState::Active);
    assert!(replica(&net, 1).is_some());
}

#[test]
fn a_replica_that_refuses_rolls_the_relocation_back_and_says_why() {
    let mut net = Network::new(1, 2, NetworkConfig::default());
    net.enable_controller();
    let mut edge = net.edge_spgwc_config(0, Ipv4Addr::new(10, 60, 0, 0));
    for apn in &mut edge.apns {
        apn.name = "other.apn".into();
    }
    net.add_edge(edge);
    net.s1_setup_all();
    net.attach(0);
    net.attach(1);
    net.drive();
    let id = relocate(&mut net, 0, Mode::Selective);
    match state(&mut net, id) {
        RelocationState::Failed(why) => assert!(why.contains("cause"), "{why}"),
        s => panic!("expected a failure, got {s:?}"),
    }
    assert!(net.edges[0].spgwc.sessions().is_empty(), "nothing left at the replica");
    // The UE is untouched at its original anchor.
    assert!(net.sgw_session(0).unwrap().s1u_enb.is_some());
    let (now, imsi) = (net.now, net.imsi(1).as_str().to_string());
    let c = net.controller();
    assert_eq!(c.counters().value("relocations_failed"), 1);
    let err = c.relocate(now, "001010000000999", None, "edge0", Mode::Selective).unwrap_err();
    assert!(err.to_string().contains("no recorded session"), "{err}");
    let err = c.relocate(now, &imsi, None, "nowhere", Mode::Naive).unwrap_err();
    assert!(err.to_string().contains("no anchor"), "{err}");
}

/// The controller programs the steering switch over PFCP: a relocation is
/// in force (`diverted`) once the switch holds the diversion the replica
/// needs; edge to edge leaves exactly the new one; moving back removes it.
#[test]
fn the_controller_programs_the_steering_switch_edge_to_edge_and_back() {
    let mut net = Network::new(1, 3, NetworkConfig::default());
    let mut sw = net.enable_controller_with_switch();
    for (i, pool) in [(0, Ipv4Addr::new(10, 60, 0, 0)), (1, Ipv4Addr::new(10, 61, 0, 0))] {
        let edge = net.edge_spgwc_config(i, pool);
        net.add_edge(edge);
    }
    net.s1_setup_all();
    for ue in 0..3 {
        net.attach(ue);
    }
    net.drive_switch(&mut sw);
    let imsi = net.imsi(1).as_str().to_string();
    let orig = net.sgw_session(1).unwrap().clone();
    let mut ids = Vec::new();
    for (edge, anchor) in ["edge0", "edge1"].into_iter().enumerate() {
        let now = net.now;
        let id = net.controller().relocate(now, &imsi, None, anchor, Mode::Selective).expect("relocation starts");
        net.drive_switch(&mut sw);
        let r = net.controller().relocation(id).unwrap().clone();
        assert_eq!((r.state, r.diverted), (RelocationState::Active, true), "to {anchor}");
        let rep = net.edges[edge].spgwc.sessions().values().find(|s| s.imsi == orig.imsi).unwrap().clone();
        let diversions: Vec<_> = sw.plane.diversions().into_values().collect();
        let want = mobicore_controller::steering::Diversion {
            ue: orig.ue_ipv4.unwrap(),
            flow: None,
            anchor: mobicore_harness::edge::Edge::s1u(edge),
            anchor_teid: Some(rep.s1u_sgw.teid.0),
            anchor_ue: rep.ue_ipv4,
            origin: orig.s1u_sgw.ipv4,
        };
        assert_eq!(diversions, vec![want], "exactly the diversion to {anchor}");
        ids.push(id);
    }
    assert_eq!(state(&mut net, ids[0]), RelocationState::Reverted, "edge to edge ended the first");
    assert!(net.edges[0].spgwc.sessions().values().all(|s| s.imsi != orig.imsi), "its replica deleted");
    let now = net.now;
    net.controller().move_back(now, ids[1]).unwrap();
    net.drive_switch(&mut sw);
    let r = net.controller().relocation(ids[1]).unwrap().clone();
    assert_eq!((r.state, r.diverted), (RelocationState::Reverted, false));
    assert!(sw.plane.diversions().is_empty(), "moving back removed the diversion");
    assert!(sw.node.sessions().is_empty());
    let c = net.controller().counters();
    assert_eq!((c.value("undivert_failed"), c.value("relocations_failed")), (0, 0));
}
