//! What a restarted core does with the relocations the store kept, by
//! state and by whether their anchor is known again (no sockets: the
//! core's transmits and events are read directly).

use super::*;
use mobicore_common::s11::{CreateSessionRequest, S11Request};
use mobicore_common::{Fteid, Teid};
use mobicore_gtp::s11::encode_request;

const MME: &str = "127.0.0.1:2123";
const EDGE: &str = "127.0.9.1:2123";

fn core() -> ControllerCore {
    ControllerCore::new(
        PeerFilter::loopback(),
        RelayLimits::default(),
        TransactionConfig::default(),
        false,
        Counters::new(),
    )
}

fn record(n: u32) -> SessionRecord {
    let imsi = format!("0010100000{n:05}").parse().unwrap();
    let mme = Fteid { teid: Teid(0x9000 + n), ipv4: Ipv4Addr::LOCALHOST };
    let csr = S11Request::CreateSession(CreateSessionRequest::attach(imsi, mme));
    SessionRecord {
        imsi: format!("0010100000{n:05}"),
        ebi: 5,
        mme: MME.parse().unwrap(),
        sgw_s11_teid: 0x100 + n,
        ue_ipv4: Some(Ipv4Addr::new(10, 45, 0, n as u8)),
        s1u_sgw: Some((0x200 + n, Ipv4Addr::new(10, 0, 3, 2))),
        csr: encode_request(&csr, n).to_bytes().to_vec(),
        mbr: None,
        rab: None,
    }
}

fn relocation(id: u64, n: u32, anchor: &str, state: RelocationState) -> Relocation {
    let s = record(n);
    Relocation {
        id,
        imsi: s.imsi.clone(),
        flow: None,
        anchor: anchor.into(),
        mode: Mode::Selective,
        state,
        sessions: vec![MovedSession {
            sgw_s11_teid: s.sgw_s11_teid,
            ue_ipv4: s.ue_ipv4,
            origin_s1u: s.s1u_sgw,
            replica: Some(ReplicaSession {
                ebi: 5,
                sgw_s11_teid: 0x900 + n,
                s1u: Some((0x700 + n, Ipv4Addr::new(10, 201, 1, 2))),
                ue_ipv4: s.ue_ipv4,
            }),
        }],
        timing: Timing::default(),
        replicated_messages: 1,
        replicated_bytes: 100,
        diverted: true,
        keep_address: true,
    }
}

fn anchor_sends(core: &mut ControllerCore) -> Vec<(SocketAddr, u8)> {
    std::iter::from_fn(|| core.poll_transmit())
        .filter_map(|t| match t {
            Transmit::Anchor { to, bytes } => Some((to, relay::header(&bytes)?.msg_type)),
            Transmit::Relay(_) => None,
        })
        .collect()
}

fn state(core: &ControllerCore, id: u64) -> RelocationState {
    core.relocation(id).unwrap().state.clone()
}

#[test]
fn a_restart_fails_cut_replications_finishes_move_backs_and_waits_for_started_anchors() {
    let now = Instant::now();
    let mut c = core();
    let known = Anchor { name: "edge0".into(), s11: "127.0.8.1:2123".parse().unwrap() };
    let relocations = vec![
        relocation(1, 1, "edge0", RelocationState::Replicating),
        relocation(2, 2, "edge0", RelocationState::MovingBack),
        relocation(3, 3, "edge0", RelocationState::Active),
        relocation(4, 4, "edge1", RelocationState::Active),
        relocation(5, 5, "edge2", RelocationState::Active),
    ];
    let sessions = (1..=5).map(record).collect();
    c.restore(now, sessions, vec![], vec![known.clone()], relocations);
    assert!(matches!(state(&c, 1), RelocationState::Failed(w) if w.contains("restart")));
    assert_eq!(state(&c, 2), RelocationState::Reverted);
    assert_eq!(state(&c, 3), RelocationState::Active, "its anchor still runs");
    assert_eq!(c.awaited_anchors(), ["edge1", "edge2"], "started sites, not in the store");
    let r4 = c.relocation(4).unwrap();
    assert_eq!((&r4.state, r4.diverted), (&RelocationState::Active, false), "served by its origin meanwhile");
    assert_eq!(r4.sessions[0].replica, None, "its replica went with its anchor");
    // The failed and the moved-back relocations' replicas are deleted.
    let sent = anchor_sends(&mut c);
    let deletes = sent.iter().filter(|(to, t)| *to == known.s11 && *t == msg_type::DELETE_SESSION_REQUEST).count();
    assert_eq!(deletes, 2, "{sent:?}");
    assert_eq!(c.relocations().count(), 5);
    assert_eq!(c.next_id, 6, "new relocations get new ids");

    // edge1 runs again: its relocation is replicated into it afresh.
    let edge1 = Anchor { name: "edge1".into(), s11: EDGE.parse().unwrap() };
    c.add_anchor(edge1.clone()).unwrap();
    c.reestablish(now, "edge1");
    assert_eq!(state(&c, 4), RelocationState::Replicating);
    let sent = anchor_sends(&mut c);
    assert_eq!(sent, [(edge1.s11, msg_type::CREATE_SESSION_REQUEST)]);
    assert_eq!(c.counters().value("relocations_reestablished"), 1);
    // edge2 cannot start: its relocation fails; its UE never left its origin.
    c.abandon(now, "edge2", "exec failed");
    assert!(matches!(state(&c, 5), RelocationState::Failed(w) if w.contains("edge2") && w.contains("exec failed")));
    assert!(c.awaited_anchors().is_empty());
    // Nothing is waited for twice.
    c.reestablish(now, "edge1");
    assert!(anchor_sends(&mut c).is_empty());
}

#[test]
fn a_relocation_whose_sessions_ended_meanwhile_is_reverted_not_replayed() {
    let now = Instant::now();
    let mut c = core();
    // The store holds the relocation but no longer its session.
    c.restore(now, vec![], vec![], vec![], vec![relocation(7, 7, "edge1", RelocationState::Active)]);
    c.add_anchor(Anchor { name: "edge1".into(), s11: EDGE.parse().unwrap() }).unwrap();
    c.reestablish(now, "edge1");
    assert_eq!(state(&c, 7), RelocationState::Reverted);
    assert!(anchor_sends(&mut c).is_empty());
}
