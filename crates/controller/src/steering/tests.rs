//! The client against the real sans-I/O UPF node in the steering role,
//! in memory under a virtual clock: no sockets, no sleeps.

use super::*;
use crate::association::testing::{epoch, Link};
use crate::association::PeerConfig;
use crate::context::ReplicaSession;
use crate::core::{MovedSession, RelocationState, Timing};
use mobicore_gtp::transaction::TransactionConfig;
use mobicore_pfcp::decode_view;
use mobicore_upf::config::{UpfConfig, UpfRole};
use std::collections::HashMap;
use std::time::Duration;

const SWITCH_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 9);
const SWITCH: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(SWITCH_IP), 8805);
const ME: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)), 40_000);
const ORIGIN: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const EDGE1: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const EDGE2: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 8);

fn client_config() -> SteeringClientConfig {
    SteeringClientConfig {
        pfcp: PeerConfig {
            peer: SWITCH,
            node_id: Ipv4Addr::new(127, 0, 0, 3),
            t1: Duration::from_secs(3),
            n1: 3,
            heartbeat_interval: Duration::from_secs(10),
        },
        max_waiting: 16,
    }
}

fn steering() -> UpfConfig {
    UpfConfig { role: UpfRole::Steering, node_id: SWITCH_IP, pfcp: SWITCH, ..UpfConfig::default() }
}

/// The client and the switch, and what is lost on the way.
type Bench = Link<SteeringClient>;

impl Link<SteeringClient> {
    fn new(cfg: UpfConfig) -> Self {
        Link::with(SteeringClient::new(client_config(), epoch(100), Counters::new()), cfg, ME)
    }

    fn associated(cfg: UpfConfig) -> Self {
        let mut b = Self::new(cfg);
        b.client.start(b.now);
        b.drive();
        assert!(b.client.associated());
        b
    }

    fn events(&mut self) -> Vec<SteeringEvent> {
        std::iter::from_fn(|| self.client.poll_event()).collect()
    }

    fn divert(&mut self, relocation: u64, ds: Vec<Diversion>) -> Result<(), String> {
        self.client.divert(self.now, relocation, ds);
        self.drive();
        match self.events().as_slice() {
            [SteeringEvent::Diverted { relocation: r, result }] if *r == relocation => result.clone(),
            e => panic!("expected one Diverted, got {e:?}"),
        }
    }

    fn undivert(&mut self, relocation: u64) -> Result<(), String> {
        self.client.undivert(self.now, relocation);
        self.drive();
        match self.events().as_slice() {
            [SteeringEvent::Undiverted { relocation: r, result }] if *r == relocation => result.clone(),
            e => panic!("expected one Undiverted, got {e:?}"),
        }
    }

    /// The switch's diversions, whatever their UP SEIDs.
    fn on_switch(&self) -> Vec<Diversion> {
        let mut v: Vec<Diversion> = self.plane.diversions().into_values().collect();
        v.sort_by_key(|d| (d.ue, d.anchor));
        v
    }
}

fn ue(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 45, 0, n)
}

fn diversion(n: u8, anchor: Ipv4Addr) -> Diversion {
    Diversion {
        ue: ue(n),
        flow: None,
        anchor,
        anchor_teid: Some(0x100 + u32::from(n)),
        anchor_ue: None,
        origin: ORIGIN,
    }
}

fn relocation(id: u64, mode: Mode, flow: Option<FlowSpec>, sessions: Vec<MovedSession>) -> Relocation {
    Relocation {
        id,
        imsi: "001010000000001".into(),
        flow,
        anchor: "edge0".into(),
        mode,
        state: RelocationState::Active,
        sessions,
        timing: Timing::default(),
        keep_address: true,
        replicated_messages: 2,
        replicated_bytes: 300,
        diverted: true,
    }
}

fn moved(n: u8, replica_ue: Ipv4Addr) -> MovedSession {
    MovedSession {
        sgw_s11_teid: 0x10 + u32::from(n),
        ue_ipv4: Some(ue(n)),
        origin_s1u: Some((0x2000 + u32::from(n), ORIGIN)),
        replica: Some(ReplicaSession {
            ebi: 5,
            sgw_s11_teid: 0x90,
            s1u: Some((0x3000 + u32::from(n), EDGE1)),
            ue_ipv4: Some(replica_ue),
        }),
    }
}

#[test]
fn diversions_are_built_from_the_relocation() {
    let flow = FlowSpec {
        protocol: Some(17),
        remote: Some(Ipv4Addr::new(192, 0, 2, 0)),
        remote_prefix: Some(24),
        ue_port: None,
        remote_port: Some(9000),
    };
    let sel = diversions_of(&relocation(1, Mode::Selective, Some(flow), vec![moved(2, Ipv4Addr::new(10, 60, 0, 2))]));
    let f = FlowFilter {
        protocol: Some(17),
        remote: Some((Ipv4Addr::new(192, 0, 2, 0), 24)),
        ue_ports: None,
        remote_ports: Some((9000, 9000)),
    };
    let want = Diversion {
        ue: ue(2),
        flow: Some(f),
        anchor: EDGE1,
        anchor_teid: Some(0x3002),
        anchor_ue: Some(Ipv4Addr::new(10, 60, 0, 2)),
        origin: ORIGIN,
    };
    assert_eq!(sel, Ok(vec![want]));
    // Naive: the TEID kept, the address translated only where it differs.
    let naive = diversions_of(&relocation(2, Mode::Naive, None, vec![moved(2, ue(2)), moved(3, ue(4))])).unwrap();
    assert_eq!((naive[0].anchor_teid, naive[0].anchor_ue, naive[0].flow), (None, None, None));
    assert_eq!((naive[1].anchor_teid, naive[1].anchor_ue), (None, Some(ue(4))));
    // A session without its replica cannot be diverted.
    let mut m = moved(2, ue(2));
    m.replica = None;
    assert!(diversions_of(&relocation(3, Mode::Naive, None, vec![m])).unwrap_err().contains("no replica"));
}

#[test]
fn association_then_selective_and_naive_diversions() {
    let mut b = Bench::new(steering());
    b.client.start(b.now);
    // Asked before the association is up: waits for it.
    let flow = FlowSpec { protocol: Some(6), remote: None, remote_prefix: None, ue_port: Some(443), remote_port: None };
    let sel = diversions_of(&relocation(1, Mode::Selective, Some(flow), vec![moved(2, Ipv4Addr::new(10, 60, 0, 2))]))
        .unwrap();
    let naive = diversions_of(&relocation(2, Mode::Naive, None, vec![moved(3, ue(3))])).unwrap();
    b.client.divert(b.now, 1, sel.clone());
    assert!(!b.client.associated());
    b.drive();
    assert!(b.client.associated());
    assert_eq!(b.events(), vec![SteeringEvent::Diverted { relocation: 1, result: Ok(()) }]);
    assert_eq!(b.divert(2, naive.clone()), Ok(()));
    // What the node decoded and holds is what the relocation said.
    let mut want = vec![sel[0], naive[0]];
    want.sort_by_key(|d| (d.ue, d.anchor));
    assert_eq!(b.on_switch(), want);
    // The request on the wire decodes to it too (TS 29.244 7.5.2).
    let est = b.sent.iter().find(|m| m[1] == msg::SESSION_ESTABLISHMENT_REQUEST).unwrap();
    let (_, ies) = decode_view(est).unwrap();
    assert_eq!(mobicore_pfcp::steering::decode_diversion(&ies), Ok(sel[0]));
    let held = &b.client.installed()[&1];
    assert_eq!(held.len(), 1);
    assert_eq!(b.plane.diversions()[&held[0].up_seid], sel[0]);
    assert_eq!(b.node.sessions()[&held[0].up_seid].cp_seid, held[0].cp_seid);
    assert_eq!(b.client.counters().value("steering_sessions_established"), 2);
}

#[test]
fn undivert_deletes_the_sessions() {
    let mut b = Bench::associated(steering());
    assert_eq!(b.divert(1, vec![diversion(2, EDGE1), diversion(3, EDGE1)]), Ok(()));
    assert_eq!(b.plane.diversions().len(), 2);
    assert_eq!(b.undivert(1), Ok(()));
    assert!(b.plane.diversions().is_empty() && b.node.sessions().is_empty());
    assert!(b.client.installed().is_empty());
    // Nothing installed: answered at once.
    assert_eq!(b.undivert(7), Ok(()));
}

#[test]
fn edge_to_edge_leaves_exactly_the_new_diversion() {
    let mut b = Bench::associated(steering());
    assert_eq!(b.divert(1, vec![diversion(2, EDGE1), diversion(3, EDGE1)]), Ok(()));
    let before: HashMap<u64, Diversion> = b.plane.diversions();
    // The same UE (address 2) to another anchor; address 3's PDN
    // connection is gone meanwhile.
    let new = diversion(2, EDGE2);
    assert_eq!(b.divert(2, vec![new]), Ok(()));
    let after = b.plane.diversions();
    assert_eq!(after.len(), 1, "exactly the new diversion: {after:?}");
    let (seid, d) = after.into_iter().next().unwrap();
    assert_eq!(d, new);
    assert_eq!(before[&seid].anchor, EDGE1, "modified in place: the same session, no gap");
    assert_eq!(b.client.installed().keys().copied().collect::<Vec<_>>(), vec![2]);
    assert_eq!(b.client.counters().value("steering_sessions_modified"), 1);
    // The core's Undivert of the superseded relocation finds nothing left.
    assert_eq!(b.undivert(1), Ok(()));
    assert_eq!(b.on_switch(), vec![new]);
    // Moving back removes it.
    assert_eq!(b.undivert(2), Ok(()));
    assert!(b.plane.diversions().is_empty());
}

#[test]
fn a_refused_diversion_rolls_back_and_says_why() {
    // The bound: the second session is refused, the first deleted again.
    let mut b = Bench::associated(UpfConfig { max_diversions: 1, ..steering() });
    let why = b.divert(1, vec![diversion(2, EDGE1), diversion(3, EDGE1)]).unwrap_err();
    assert!(why.contains("cause 75"), "{why}");
    assert!(b.plane.diversions().is_empty() && b.node.sessions().is_empty());
    assert!(b.client.installed().is_empty());
    assert_eq!(b.client.counters().value("steering_rollback"), 1);
    // None allowed at all.
    let mut b = Bench::associated(UpfConfig { max_diversions: 0, ..steering() });
    assert!(b.divert(1, vec![diversion(2, EDGE1)]).unwrap_err().contains("NoResourcesAvailable"));
    // An overlapping one (the same UE and flow twice): cause 73.
    let mut b = Bench::associated(steering());
    assert_eq!(b.divert(1, vec![diversion(4, EDGE1)]), Ok(()));
    let why = b.divert(2, vec![diversion(2, EDGE1), diversion(2, EDGE2)]).unwrap_err();
    assert!(why.contains("cause 73") && why.contains("failed rule 1"), "{why}");
    assert_eq!(b.on_switch(), vec![diversion(4, EDGE1)], "the other relocation untouched");
    // A takeover done before another session is refused is modified back:
    // UE 4 edge to edge, and UE 7 onto the downlink UE 5 already uses.
    let taken = diversion(5, EDGE2);
    assert_eq!(b.divert(3, vec![taken]), Ok(()));
    let refused = Diversion { anchor_ue: Some(ue(5)), ..diversion(7, EDGE2) };
    let why = b.divert(4, vec![diversion(4, EDGE2), refused]).unwrap_err();
    assert!(why.contains("cause 73") && why.contains("failed rule 2"), "{why}");
    assert_eq!(b.client.counters().value("steering_sessions_modified"), 1, "the takeover was done");
    assert_eq!(b.on_switch(), vec![diversion(4, EDGE1), taken], "and undone");
    assert_eq!(b.client.installed().keys().copied().collect::<Vec<_>>(), vec![1, 3]);
}

#[test]
fn a_lost_request_or_answer_is_retransmitted() {
    let mut b = Bench::associated(steering());
    b.lose_to_node = 1;
    b.client.divert(b.now, 1, vec![diversion(2, EDGE1)]);
    b.drive();
    assert!(b.events().is_empty() && b.plane.diversions().is_empty());
    b.step();
    assert_eq!(b.events(), vec![SteeringEvent::Diverted { relocation: 1, result: Ok(()) }]);
    // A lost answer: the node answers the retransmission from its cache.
    b.lose_to_client = 1;
    b.client.divert(b.now, 2, vec![diversion(3, EDGE1)]);
    b.drive();
    assert!(b.events().is_empty());
    b.step();
    assert_eq!(b.events(), vec![SteeringEvent::Diverted { relocation: 2, result: Ok(()) }]);
    assert_eq!(b.plane.diversions().len(), 2, "one session each");
    assert_eq!(b.node.counters.value("pfcp_duplicate_request"), 1);
}

#[test]
fn without_an_association_a_diversion_fails_after_t1_n1() {
    let mut b = Bench::new(steering());
    b.lose_to_node = usize::MAX;
    b.client.start(b.now);
    b.client.divert(b.now, 1, vec![diversion(2, EDGE1)]);
    b.drive();
    let t0 = b.now;
    let why = loop {
        b.step();
        assert!(b.now - t0 <= Duration::from_secs(9), "failed by T1 x N1");
        if let Some(SteeringEvent::Diverted { relocation: 1, result: Err(why) }) = b.client.poll_event() {
            break why;
        }
    };
    assert!(why.contains("no PFCP association"), "{why}");
    // The switch answers again: the association comes up.
    b.lose_to_node = 0;
    while !b.client.associated() {
        b.step();
    }
    assert_eq!(b.divert(3, vec![diversion(2, EDGE1)]), Ok(()));
}

#[test]
fn heartbeats_both_ways_and_a_restarted_switch_gets_its_sessions_again() {
    let mut b = Bench::associated(steering());
    assert_eq!(b.divert(1, vec![diversion(2, EDGE1)]), Ok(()));
    for _ in 0..6 {
        b.step();
    }
    assert!(b.client.associated());
    assert!(b.node.counters.value("pfcp_heartbeat_sent") > 0);
    assert_eq!(b.node.counters.value("pfcp_heartbeat_from_unknown_peer"), 0);
    // The switch restarts: a new node, a new Recovery Time Stamp.
    b.restart_node(steering(), epoch(50));
    for _ in 0..6 {
        b.step();
        if !b.plane.diversions().is_empty() {
            break;
        }
    }
    assert_eq!(b.on_switch(), vec![diversion(2, EDGE1)]);
    assert_eq!(b.client.counters().value("steering_switch_restarted"), 1);
    let held = b.client.installed()[&1][0];
    assert!(b.plane.diversions().contains_key(&held.up_seid), "the new UP SEID kept");
    assert_eq!(b.undivert(1), Ok(()));
    assert!(b.plane.diversions().is_empty());
}

/// A restarted controller: a new client (new Recovery Time Stamp) behind a
/// restored core; the switch drops the old sessions, the core diverts the
/// relocation in force again, and the switch ends with it exactly once.
#[test]
fn a_restored_core_installs_its_relocations_again() {
    use crate::core::ControllerCore;
    use crate::relay::RelayLimits;
    use mobicore_common::peers::PeerFilter;
    let mut b = Bench::associated(steering());
    let r = relocation(5, Mode::Selective, None, vec![moved(2, Ipv4Addr::new(10, 60, 0, 2))]);
    let ds = diversions_of(&r).unwrap();
    assert_eq!(b.divert(5, ds.clone()), Ok(()));
    // The new controller.
    let mut core = ControllerCore::new(
        PeerFilter::loopback(),
        RelayLimits::default(),
        TransactionConfig::default(),
        false,
        Counters::new(),
    );
    let client = SteeringClient::new(client_config(), epoch(200), Counters::new());
    core.attach_switch(b.now, client);
    let anchor = crate::context::Anchor { name: "edge0".into(), s11: "127.0.1.1:2123".parse().unwrap() };
    core.restore(b.now, vec![], vec![], vec![anchor], vec![r]);
    core.handle_timeout(b.now);
    for _ in 0..100 {
        let mut moved = false;
        while let Some((_, m)) = core.poll_switch_transmit() {
            b.node.handle_datagram(b.now, ME, &m);
            moved = true;
        }
        while let Some((_, m)) = b.node.poll_transmit() {
            core.handle_from_switch(b.now, SWITCH, &m);
            moved = true;
        }
        if !moved {
            break;
        }
    }
    assert_eq!(b.on_switch(), ds, "exactly once");
    assert_eq!(b.node.counters.value("pfcp_cp_function_restarted"), 1, "the old sessions dropped");
    let sw = core.switch().unwrap();
    assert_eq!(sw.installed()[&5].len(), 1);
    assert_eq!(core.relocation(5).unwrap().state, RelocationState::Active);
    assert_eq!(core.counters().value("redivert_failed"), 0);
}
