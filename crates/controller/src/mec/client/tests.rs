//! The client against the real sans-I/O UPF node in the MEC router role,
//! in memory under a virtual clock: no sockets, no sleeps.

use super::*;
use crate::association::testing::{epoch, Link};
use mobicore_pfcp::mec::{Application, MecRule, RuleAction, Slice, TrafficFilter, UeTunnel};
use mobicore_upf::config::{UpfConfig, UpfRole};
use std::time::Duration;

const NODE_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 11);
const NODE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(NODE_IP), 8805);
const ME: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)), 40_001);

fn node_config() -> UpfConfig {
    UpfConfig { role: UpfRole::Mec, node_id: NODE_IP, pfcp: NODE, ..UpfConfig::default() }
}

type MecLink = Link<MecClient>;

impl Link<MecClient> {
    fn new() -> Self {
        let cfg = MecClientConfig {
            pfcp: PeerConfig {
                peer: NODE,
                node_id: Ipv4Addr::new(127, 0, 0, 3),
                t1: Duration::from_secs(3),
                n1: 3,
                heartbeat_interval: Duration::from_secs(10),
            },
            max_waiting: 8,
        };
        Link::with(MecClient::new(cfg, epoch(100), Counters::new()), node_config(), ME)
    }

    fn associated() -> Self {
        let mut l = Self::new();
        l.client.start(l.now);
        l.drive();
        assert!(l.client.associated());
        l
    }

    fn events(&mut self) -> Vec<MecEvent> {
        std::iter::from_fn(|| self.client.poll_event()).collect()
    }

    /// Applies and drives to the one answer.
    fn apply(&mut self, key: MecKey, s: Option<MecSession>) -> Result<(), MecError> {
        let request = self.client.apply(self.now, key.clone(), s);
        self.drive();
        match self.events().as_slice() {
            [e] if e.request == request && e.key == key => e.result.clone(),
            e => panic!("expected one answer to {request}, got {e:?}"),
        }
    }

    fn on_node(&self) -> Vec<MecSession> {
        let mut v: Vec<MecSession> = self.plane.mec().into_values().collect();
        v.sort_by_key(|s| format!("{s:?}"));
        v
    }
}

fn key(id: &str) -> MecKey {
    MecKey::Rule { router: "mec1".into(), id: id.into() }
}

fn rule(priority: u8, dst: u8) -> MecSession {
    MecSession::Rule(MecRule {
        slice: Slice { interface: "s1u0".into(), vlan: 0 },
        flow: true,
        priority,
        filters: vec![TrafficFilter {
            dst: Some((Ipv4Addr::new(192, 0, 2, dst), 32)),
            protocol: Some(17),
            ..TrafficFilter::default()
        }],
        action: RuleAction::ForwardDecapsulated(Application { mac: [2, 0, 0, 0, 0, dst], interface: "mec0".into() }),
    })
}

fn tunnel(n: u8, teid: u32) -> MecSession {
    MecSession::Ue(UeTunnel {
        ue: Ipv4Addr::new(10, 45, 0, n),
        enb: Ipv4Addr::new(10, 1, 0, 2),
        teid,
        origin: Ipv4Addr::new(10, 2, 0, 2),
    })
}

#[test]
fn rules_and_tunnels_are_established_replaced_and_deleted() {
    let mut l = MecLink::associated();
    assert_eq!(l.apply(key("a"), Some(rule(5, 10))), Ok(()));
    assert_eq!(l.apply(MecKey::Ue(Ipv4Addr::new(10, 45, 0, 1)), Some(tunnel(1, 0x77))), Ok(()));
    assert_eq!(l.on_node(), vec![rule(5, 10), tunnel(1, 0x77)]);
    // A new version replaces the old in one modification.
    assert_eq!(l.apply(key("a"), Some(rule(5, 11))), Ok(()));
    assert_eq!(l.apply(MecKey::Ue(Ipv4Addr::new(10, 45, 0, 1)), Some(tunnel(1, 0x78))), Ok(()));
    assert_eq!(l.on_node(), vec![rule(5, 11), tunnel(1, 0x78)]);
    assert_eq!(l.client.counters().value("mec_sessions_modified"), 2);
    // The same again costs nothing.
    assert_eq!(l.apply(key("a"), Some(rule(5, 11))), Ok(()));
    assert_eq!(l.client.counters().value("mec_sessions_modified"), 2);
    assert_eq!(l.apply(key("a"), None), Ok(()));
    assert_eq!(l.apply(key("never"), None), Ok(()));
    assert_eq!(l.on_node(), vec![tunnel(1, 0x78)]);
    assert_eq!(l.client.installed(&key("a")), None);
    assert_eq!(l.client.installed_len(), 1);
}

#[test]
fn a_refusal_says_why_and_changes_nothing() {
    let mut l = MecLink::associated();
    assert_eq!(l.apply(key("a"), Some(rule(5, 10))), Ok(()));
    // The node refuses two rules that overlap at one priority (cause 73).
    let r = l.apply(key("b"), Some(rule(5, 10)));
    let Err(MecError::Refused(why)) = r else { panic!("refused, got {r:?}") };
    assert!(why.contains("cause 73"), "{why}");
    assert_eq!(l.client.installed(&key("b")), None);
    assert_eq!(l.on_node(), vec![rule(5, 10)]);
    assert_eq!(l.client.counters().value("mec_refused"), 1);
}

#[test]
fn changes_of_one_key_keep_their_order() {
    let mut l = MecLink::associated();
    let first = l.client.apply(l.now, key("a"), Some(rule(5, 10)));
    let second = l.client.apply(l.now, key("a"), Some(rule(5, 12)));
    let third = l.client.apply(l.now, key("a"), None);
    let other = l.client.apply(l.now, key("b"), Some(rule(6, 20)));
    l.drive();
    let events = l.events();
    let order: Vec<u64> = events.iter().map(|e| e.request).filter(|r| *r != other).collect();
    assert_eq!(order, vec![first, second, third]);
    assert!(events.iter().all(|e| e.result.is_ok()), "{events:?}");
    assert_eq!(l.on_node(), vec![rule(6, 20)]);
}

#[test]
fn without_the_node_a_change_fails_after_t1_n1() {
    let mut l = MecLink::new();
    l.lose_to_node = usize::MAX;
    l.client.start(l.now);
    let request = l.client.apply(l.now, key("a"), Some(rule(5, 10)));
    let start = l.now;
    let mut events = Vec::new();
    while events.is_empty() {
        l.step();
        events = l.events();
    }
    assert_eq!(events[0].request, request);
    assert!(matches!(events[0].result, Err(MecError::Unreachable(_))), "{events:?}");
    assert!(l.now - start >= Duration::from_secs(9), "T1 x N1");
    assert_eq!(l.client.counters().value("mec_waiting_expired"), 1);
    // Bounded: beyond max_waiting, refused at once.
    for _ in 0..8 {
        l.client.apply(l.now, key("b"), None);
    }
    l.client.apply(l.now, key("c"), None);
    assert_eq!(l.client.counters().value("mec_waiting_full"), 1);
    // The node comes back: the waiting changes run.
    l.lose_to_node = 0;
    for _ in 0..10 {
        l.step();
        if l.client.associated() {
            break;
        }
    }
    assert!(l.client.associated());
    let _ = l.events();
    assert_eq!(l.apply(key("a"), Some(rule(5, 10))), Ok(()));
}

#[test]
fn a_restarted_node_gets_its_sessions_again() {
    let mut l = MecLink::associated();
    assert_eq!(l.apply(key("a"), Some(rule(5, 10))), Ok(()));
    assert_eq!(l.apply(MecKey::Ue(Ipv4Addr::new(10, 45, 0, 1)), Some(tunnel(1, 0x77))), Ok(()));
    l.restart_node(node_config(), epoch(50));
    for _ in 0..8 {
        l.step();
        if l.plane.mec().len() == 2 {
            break;
        }
    }
    assert_eq!(l.on_node(), vec![rule(5, 10), tunnel(1, 0x77)]);
    assert_eq!(l.client.counters().value("mec_node_restarted"), 1);
    // The new UP SEIDs are the ones used: a deletion reaches the node.
    assert_eq!(l.apply(key("a"), None), Ok(()));
    assert_eq!(l.on_node(), vec![tunnel(1, 0x77)]);
}

#[test]
fn two_slices_hold_the_same_rule_apart() {
    let mut l = MecLink::associated();
    let in_slice = |vlan: u16| match rule(5, 10) {
        MecSession::Rule(r) => MecSession::Rule(MecRule { slice: Slice { vlan, ..r.slice }, ..r }),
        s => s,
    };
    let (a, b) = (
        MecKey::Rule { router: "mec1".into(), id: "x".into() },
        MecKey::Rule { router: "mec2".into(), id: "x".into() },
    );
    // One match, one priority, two virtual routers (VLAN 0 and 100).
    assert_eq!(l.apply(a.clone(), Some(in_slice(0))), Ok(()));
    assert_eq!(l.apply(b.clone(), Some(in_slice(100))), Ok(()));
    assert_eq!(l.on_node().len(), 2);
    // Removing one router's rule leaves the other's.
    assert_eq!(l.apply(a, None), Ok(()));
    assert_eq!(l.on_node(), vec![in_slice(100)]);
    assert!(l.client.installed(&b).is_some());
}
