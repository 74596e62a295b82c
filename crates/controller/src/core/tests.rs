//! What a restarted core does with the relocations the store kept, by
//! state and by whether their anchor is known again (no sockets: the
//! core's transmits and events are read directly).

use super::*;
use mobicore_common::s11::{CreateSessionRequest, S11Request};
use mobicore_common::{Fteid, Teid};
use mobicore_gtp::s11::encode_request;
use std::time::Duration;

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

/// What the core sent to anchors, octets only.
fn anchor_bytes(core: &mut ControllerCore) -> Vec<Bytes> {
    std::iter::from_fn(|| core.poll_transmit())
        .filter_map(|t| match t {
            Transmit::Anchor { bytes, .. } => Some(bytes),
            Transmit::Relay(_) => None,
        })
        .collect()
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

/// The relay's transmits to the original S/P-GW, dropped (the test
/// answers for it).
fn relayed(core: &mut ControllerCore) -> usize {
    std::iter::from_fn(|| core.poll_transmit()).filter(|t| matches!(t, Transmit::Relay(_))).count()
}

#[test]
fn a_ue_whose_modify_bearer_is_unanswered_is_replayed_once_it_is_answered_with_it() {
    use mobicore_common::s11::S11Response;
    use mobicore_common::s11::{CreateSessionResponse, GtpCause, ModifyBearerRequest, ModifyBearerResponse};
    use mobicore_common::{Ebi, PdnType};
    use mobicore_gtp::s11::encode_response;
    let now = Instant::now();
    let mut c = core();
    let edge = Anchor { name: "edge1".into(), s11: EDGE.parse().unwrap() };
    let (mme, s) = (MME.parse().unwrap(), record(1));
    c.restore(now, vec![s.clone()], vec![], vec![edge.clone()], vec![]);
    // The MME's Modify Bearer (the attach's last step) is with the
    // original S/P-GW when the relocation is asked for.
    let enb = Fteid { teid: Teid(0x4242), ipv4: Ipv4Addr::new(10, 0, 1, 2) };
    let mbr = S11Request::ModifyBearer(ModifyBearerRequest {
        sgw_teid: Teid(s.sgw_s11_teid),
        ebi: Ebi(5),
        s1u_enb_fteid: enb,
    });
    c.handle_from_mme(now, mme, &encode_request(&mbr, 77).to_bytes());
    assert_eq!(relayed(&mut c), 1);
    let id = c.relocate(now, &s.imsi, None, "edge1", Mode::Selective).unwrap();
    assert_eq!(state(&c, id), RelocationState::Replicating);
    assert!(anchor_sends(&mut c).is_empty(), "no replay while the Modify Bearer is unanswered");
    assert_eq!(c.counters().value("relocations_deferred"), 1);
    // Other traffic does not start it.
    c.handle_timeout(now + Duration::from_millis(5));
    assert!(anchor_sends(&mut c).is_empty());

    // Answered: the replay starts, and carries the Modify Bearer.
    let ok = S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, bearer_cause: None });
    let later = now + Duration::from_millis(30);
    c.handle_from_sgw(later, mme, &encode_response(&ok, 0x9001, 77, None).to_bytes());
    let sent: Vec<Bytes> = anchor_bytes(&mut c);
    let types: Vec<u8> = sent.iter().map(|b| relay::header(b).unwrap().msg_type).collect();
    assert_eq!(types, [msg_type::CREATE_SESSION_REQUEST]);
    let f = |teid| Fteid { teid: Teid(teid), ipv4: Ipv4Addr::new(127, 0, 9, 1) };
    let created = S11Response::CreateSession(CreateSessionResponse {
        cause: GtpCause::REQUEST_ACCEPTED,
        sgw_fteid: Some(f(0x900)),
        paa: s.ue_ipv4,
        apn_ambr: None,
        bearer_ebi: Ebi(5),
        bearer_cause: GtpCause::REQUEST_ACCEPTED,
        s1u_sgw_fteid: Some(f(0x700)),
        pgw_s5s8_c_fteid: None,
        charging_id: None,
        pdn_type: Some(PdnType::Ipv4),
        ipv6_prefix: None,
        pco: None,
    });
    let seq = relay::header(&sent[0]).unwrap().seq;
    c.handle_from_anchor(later, edge.s11, &encode_response(&created, 0x9001, seq, None).to_bytes());
    let next: Vec<Bytes> = anchor_bytes(&mut c);
    assert_eq!(next.len(), 1);
    let m = mobicore_gtp::GtpMessage::parse(&next[0]).unwrap();
    let Ok(S11Request::ModifyBearer(replayed)) = mobicore_gtp::s11::decode_request(&m) else { panic!("{m:?}") };
    assert_eq!((replayed.sgw_teid, replayed.s1u_enb_fteid), (Teid(0x900), enb), "the replica's TEID, the eNB's F-TEID");
    let t = c.relocation(id).unwrap().timing;
    assert!(t.waited_ms >= 29.0, "{t:?}");
}

#[test]
fn a_request_the_original_never_answers_holds_a_relocation_only_until_the_relay_forgets_it() {
    use mobicore_common::s11::ModifyBearerRequest;
    use mobicore_common::Ebi;
    let now = Instant::now();
    let mut c = core();
    let (mme, s) = (MME.parse().unwrap(), record(2));
    c.restore(now, vec![s.clone()], vec![], vec![Anchor { name: "edge1".into(), s11: EDGE.parse().unwrap() }], vec![]);
    let enb = Fteid { teid: Teid(0x4343), ipv4: Ipv4Addr::new(10, 0, 1, 2) };
    let mbr = S11Request::ModifyBearer(ModifyBearerRequest {
        sgw_teid: Teid(s.sgw_s11_teid),
        ebi: Ebi(5),
        s1u_enb_fteid: enb,
    });
    c.handle_from_mme(now, mme, &encode_request(&mbr, 78).to_bytes());
    let id = c.relocate(now, &s.imsi, None, "edge1", Mode::Selective).unwrap();
    assert!(anchor_sends(&mut c).is_empty());
    let forget = RelayLimits::default().pending_timeout;
    assert!(c.poll_timeout().is_some_and(|t| t <= now + forget), "a timer for the relay's forgetting");
    c.handle_timeout(now + forget);
    assert_eq!(anchor_sends(&mut c), [(EDGE.parse().unwrap(), msg_type::CREATE_SESSION_REQUEST)]);
    assert_eq!(state(&c, id), RelocationState::Replicating);
    assert_eq!(c.counters().value("relay_unanswered"), 1);
}
