//! The S/P-GW-C's trust boundary and bounds (issue 8), driven directly
//! against the in-memory UPF: who may send what, what a refused request
//! leaves behind (nothing), and how much a peer can make us hold.

use crate::config::{SpgwcConfig, UpfPeerConfig};
use crate::context::SessionState;
use crate::core::Held;
use crate::sxa_build::{self as sxa, msg};
use crate::tests::{a, created, csr, Net, S1U, UPF};
use mobicore_common::peers::PeerFilter;
use mobicore_common::s11::*;
use mobicore_common::{Ebi, Fteid, PdnType, Teid};
use mobicore_gtp::s11::encode_request;
use mobicore_upf::UpfConfig;
use proptest::prelude::*;
use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};

/// A second configured MME, which owns none of the sessions below.
const OTHER_MME: &str = "127.0.0.5:41000";
/// An address that is no configured MME.
const STRANGER: &str = "127.0.0.9:40000";
/// A second configured UPF (nothing runs there).
const OTHER_UPF: &str = "127.0.0.3:8805";

fn two_mmes() -> SpgwcConfig {
    let mut cfg = Net::cfg();
    cfg.mme_peers = PeerFilter::hosts(["127.0.0.1".parse().unwrap(), "127.0.0.5".parse().unwrap()]);
    cfg
}

fn mbr(sgw_teid: Teid, enb_teid: u32) -> S11Request {
    let enb = Fteid { teid: Teid(enb_teid), ipv4: Ipv4Addr::new(127, 0, 0, 9) };
    S11Request::ModifyBearer(ModifyBearerRequest { sgw_teid, ebi: Ebi(5), s1u_enb_fteid: enb })
}

fn dsr(sgw_teid: Teid) -> S11Request {
    S11Request::DeleteSession(DeleteSessionRequest { sgw_teid, linked_ebi: Ebi(5) })
}

fn cause_of(r: Option<S11Response>) -> GtpCause {
    r.expect("no answer").cause()
}

/// What sessions hold (not the duplicate caches, nor node-level PFCP
/// requests such as heartbeats).
fn session_state(n: &Net) -> Held {
    Held { s11_cache: 0, pfcp_cache: 0, pfcp_outstanding: 0, ..n.gw.held() }
}

/// Nothing held for any session.
fn nothing_held(n: &Net) -> bool {
    session_state(n) == Held::default()
}

#[test]
fn a_create_session_replayed_from_an_unconfigured_address_is_dropped_and_the_session_stays() {
    let mut cfg = Net::cfg();
    cfg.mme_peers = PeerFilter::hosts(["127.0.0.1".parse().unwrap()]);
    let mut n = Net::new(cfg);
    let r = created(n.s11(&S11Request::CreateSession(csr(1))));
    let sgw_teid = r.sgw_fteid.unwrap().teid;
    let (sessions, rules, pfcp, held) = (n.gw.sessions().clone(), n.plane.sessions(), n.pfcp_log.len(), n.gw.held());

    // The same request (a fresh sequence number), garbage, an echo: all dropped unread.
    let replay = encode_request(&S11Request::CreateSession(csr(1)), 4242).to_bytes();
    assert!(n.s11_from(a(STRANGER), &replay).is_none());
    assert!(n.s11_from(a(STRANGER), &[0x48, 32, 0, 1]).is_none());
    assert!(n.s11_from(a(STRANGER), &encode_request(&dsr(sgw_teid), 7).to_bytes()).is_none());
    assert_eq!(n.gw.counters.value("s11_request_from_unknown_peer"), 3);
    assert_eq!(n.gw.sessions(), &sessions);
    assert_eq!(n.plane.sessions(), rules);
    assert_eq!(n.pfcp_log.len(), pfcp, "nothing sent to the UPF");
    assert_eq!(n.gw.held(), held, "not even a cache entry");

    // The real MME's Delete Session succeeds.
    assert_eq!(cause_of(n.s11(&dsr(sgw_teid))), GtpCause::REQUEST_ACCEPTED);
    assert!(n.plane.is_empty() && nothing_held(&n));
}

#[test]
fn requests_for_a_session_from_another_mme_get_context_not_found_and_change_nothing() {
    let mut n = Net::new(two_mmes());
    let r = created(n.s11(&S11Request::CreateSession(csr(1))));
    let sgw_teid = r.sgw_fteid.unwrap().teid;
    assert_eq!(cause_of(n.s11(&mbr(sgw_teid, 0xe0b))), GtpCause::REQUEST_ACCEPTED);
    let (sessions, rules, pfcp) = (n.gw.sessions().clone(), n.plane.sessions(), n.pfcp_log.len());

    let other = a(OTHER_MME);
    assert_eq!(cause_of(n.s11_as(other, &mbr(sgw_teid, 0xbad))), GtpCause::CONTEXT_NOT_FOUND);
    assert_eq!(n.s11_out.last().unwrap().teid, Some(0), "TEID 0: no context of the sender's");
    let rab = S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid });
    assert_eq!(cause_of(n.s11_as(other, &rab)), GtpCause::CONTEXT_NOT_FOUND);
    assert_eq!(cause_of(n.s11_as(other, &dsr(sgw_teid))), GtpCause::CONTEXT_NOT_FOUND);
    assert_eq!(n.gw.counters.value("s11_request_from_non_owner"), 3);
    assert_eq!(n.gw.sessions(), &sessions);
    assert_eq!(n.plane.sessions(), rules);
    assert_eq!(n.pfcp_log.len(), pfcp, "nothing sent to the UPF");

    // Nor does another MME's request wait in a busy session's queue.
    n.upf_up = false;
    assert!(n.s11(&mbr(sgw_teid, 0xe0c)).is_none());
    assert_eq!(cause_of(n.s11_as(other, &dsr(sgw_teid))), GtpCause::CONTEXT_NOT_FOUND);
    assert_eq!(n.gw.held().queued, 0);
    n.upf_up = true;
    n.step();
    assert_eq!(n.gw.session(sgw_teid).unwrap().state, SessionState::Active);
    assert_eq!(cause_of(n.s11(&dsr(sgw_teid))), GtpCause::REQUEST_ACCEPTED);
    assert!(n.plane.is_empty() && nothing_held(&n));
}

#[test]
fn the_address_in_the_mme_f_teid_owns_the_session_too() {
    let mut n = Net::new(two_mmes());
    // Sent from 127.0.0.1, naming 127.0.0.5 as the MME's S11 address.
    let mut req = csr(1);
    req.sender_fteid.ipv4 = Ipv4Addr::new(127, 0, 0, 5);
    let sgw_teid = created(n.s11(&S11Request::CreateSession(req))).sgw_fteid.unwrap().teid;
    assert_eq!(cause_of(n.s11_as(a(OTHER_MME), &mbr(sgw_teid, 1))), GtpCause::REQUEST_ACCEPTED);
    assert_eq!(cause_of(n.s11(&dsr(sgw_teid))), GtpCause::REQUEST_ACCEPTED);
}

#[test]
fn a_refused_create_session_for_a_live_imsi_leaves_its_session_alone() {
    let mut n = Net::new(Net::cfg());
    let sgw_teid = created(n.s11(&S11Request::CreateSession(csr(1)))).sgw_fteid.unwrap().teid;
    let (sessions, rules) = (n.gw.sessions().clone(), n.plane.sessions());
    let mut bad = csr(1);
    bad.apn = "nowhere".into();
    assert_eq!(cause_of(n.s11(&S11Request::CreateSession(bad))), GtpCause::MISSING_OR_UNKNOWN_APN);
    let mut v6 = csr(1);
    v6.pdn_type = PdnType::Ipv6;
    assert_eq!(cause_of(n.s11(&S11Request::CreateSession(v6))), GtpCause(83));
    assert_eq!(n.gw.sessions(), &sessions);
    assert_eq!(n.plane.sessions(), rules);
    assert_eq!(cause_of(n.s11(&dsr(sgw_teid))), GtpCause::REQUEST_ACCEPTED);
}

#[test]
fn requests_queued_behind_a_busy_session_stay_within_the_bound() {
    let mut cfg = Net::cfg();
    cfg.max_queued_per_session = 4;
    let mut n = Net::new(cfg);
    let sgw_teid = created(n.s11(&S11Request::CreateSession(csr(1)))).sgw_fteid.unwrap().teid;
    n.upf_up = false;
    assert!(n.s11(&mbr(sgw_teid, 1)).is_none(), "in flight");
    let (mut most, mut refused) = (0, 0);
    for i in 0..100 {
        match n.s11(&mbr(sgw_teid, 2 + i)) {
            None => {}
            Some(S11Response::ModifyBearer(m)) => {
                // TS 29.274 8.4: No resources available, on the MME's TEID.
                assert_eq!(m.cause, GtpCause::NO_RESOURCES_AVAILABLE);
                assert_eq!(n.s11_out.last().unwrap().teid, Some(0x9001));
                refused += 1;
            }
            other => panic!("{other:?}"),
        }
        most = most.max(n.gw.held().queued);
    }
    assert_eq!((most, refused), (4, 96));
    assert_eq!(n.gw.counters.value("s11_request_queue_full"), 96);
    assert_eq!(n.gw.counters.value("s11_queued_high_water"), 4);
    // The UPF comes back: the one in flight and the four queued are served.
    n.upf_up = true;
    let before = n.s11_out.len();
    n.step();
    let accepted = n.s11_out[before..].iter().filter(|m| m.body.msg_type() == 35).count();
    assert_eq!(accepted, 5);
    assert_eq!(n.gw.held().queued, 0);
}

#[test]
fn a_flood_of_refused_and_replacing_create_sessions_leaves_nothing_behind() {
    let upf = UpfConfig { max_sessions_per_association: 3, ..UpfConfig::default() };
    let mut n = Net::with_upf(Net::cfg(), upf);
    for i in 0..50 {
        let mut bad = csr(i);
        bad.apn = "nowhere".into();
        assert_eq!(cause_of(n.s11(&S11Request::CreateSession(bad))), GtpCause::MISSING_OR_UNKNOWN_APN);
        let mut v6 = csr(i);
        v6.pdn_type = PdnType::Ipv6;
        assert_eq!(cause_of(n.s11(&S11Request::CreateSession(v6))), GtpCause(83));
    }
    assert!(nothing_held(&n) && n.plane.is_empty());
    // The UPF takes three, then refuses every establishment.
    for i in 0..3 {
        assert_eq!(cause_of(n.s11(&S11Request::CreateSession(csr(1000 + i)))), GtpCause::REQUEST_ACCEPTED);
    }
    for i in 0..50 {
        assert_eq!(cause_of(n.s11(&S11Request::CreateSession(csr(2000 + i)))), GtpCause::NO_RESOURCES_AVAILABLE);
    }
    assert_eq!(n.gw.counters.value("pfcp_session_establishment_rejected"), 50);
    let three = Held { sessions: 3, by_imsi: 3, by_seid: 3, pool_addresses: 3, s1u_teids: 3, ..Held::default() };
    let held = session_state;
    assert_eq!(held(&n), three);
    assert_eq!(n.plane.len(), 3);
    // Each new Create Session for a live PDN connection replaces it.
    for _ in 0..50 {
        assert_eq!(cause_of(n.s11(&S11Request::CreateSession(csr(1000)))), GtpCause::REQUEST_ACCEPTED);
    }
    assert_eq!(n.gw.counters.value("sessions_replaced"), 50);
    assert_eq!(held(&n), three);
    assert_eq!(n.plane.len(), 3, "every replaced UPF session was deleted");
    // The UPF unreachable: establishments time out, nothing stays.
    n.upf_up = false;
    for i in 0..10 {
        assert!(n.s11(&S11Request::CreateSession(csr(3000 + i))).is_none());
    }
    for _ in 0..100 {
        if n.gw.held().sessions == 3 {
            break;
        }
        n.step();
    }
    assert_eq!(held(&n), three);
    n.upf_up = true;
    let teids: Vec<Teid> = n.gw.sessions().values().map(|s| s.sgw_s11.teid).collect();
    for t in teids {
        assert_eq!(cause_of(n.s11(&dsr(t))), GtpCause::REQUEST_ACCEPTED);
    }
    assert!(nothing_held(&n) && n.plane.is_empty());
}

#[test]
fn identifiers_are_drawn_in_range_never_in_use_and_not_in_sequence() {
    let mut cfg = Net::cfg();
    cfg.upfs = vec![UpfPeerConfig { pfcp: a(UPF), s1u_addr: S1U, teid_base: 0x1000, teid_count: 16 }];
    let mut n = Net::new(cfg.clone());
    let mut made = vec![];
    for i in 0..16 {
        made.push(created(n.s11(&S11Request::CreateSession(csr(i)))));
    }
    let s1u: HashSet<u32> = made.iter().map(|r| r.s1u_sgw_fteid.unwrap().teid.0).collect();
    assert_eq!(s1u, (0x1000..0x1010).collect(), "all 16, inside [teid_base, teid_base + teid_count)");
    let s11: Vec<u32> = made.iter().map(|r| r.sgw_fteid.unwrap().teid.0).collect();
    let seids: Vec<u64> = s11.iter().map(|t| n.gw.session(Teid(*t)).unwrap().cp_seid).collect();
    assert_eq!(s11.iter().collect::<HashSet<_>>().len(), 16);
    assert_eq!(seids.iter().collect::<HashSet<_>>().len(), 16);
    assert!(s11.iter().all(|t| *t != 0) && seids.iter().all(|s| *s != 0));
    assert!(s11.windows(2).all(|w| w[1] != w[0].wrapping_add(1)), "{s11:x?}");
    assert!(seids.windows(2).all(|w| w[1] != w[0].wrapping_add(1)), "{seids:x?}");
    // The range is full: refused, and the UE address goes back.
    assert_eq!(cause_of(n.s11(&S11Request::CreateSession(csr(99)))), GtpCause::NO_RESOURCES_AVAILABLE);
    assert_eq!(n.gw.counters.value("s11_create_session_teids_exhausted"), 1);
    assert_eq!(n.gw.held().pool_addresses, 16);
    // Once a session is gone its S1-U TEID is the one free value.
    let freed = made[5].s1u_sgw_fteid.unwrap().teid;
    assert_eq!(cause_of(n.s11(&dsr(made[5].sgw_fteid.unwrap().teid))), GtpCause::REQUEST_ACCEPTED);
    assert_eq!(created(n.s11(&S11Request::CreateSession(csr(99)))).s1u_sgw_fteid.unwrap().teid, freed);
    // Another seed, other values; no seed works too.
    cfg.id_seed = Some(2);
    let first = created(Net::new(cfg.clone()).s11(&S11Request::CreateSession(csr(0))));
    assert_ne!(first.sgw_fteid, made[0].sgw_fteid);
    cfg.id_seed = None;
    let r = created(Net::new(cfg).s11(&S11Request::CreateSession(csr(0))));
    assert_eq!(r.cause, GtpCause::REQUEST_ACCEPTED);
}

/// A Session Report Request carrying one Usage Report.
fn usage_report(cp_seid: u64, seq: u32, ul: u64, dl: u64) -> Vec<u8> {
    use rs_pfcp::ie::{ur_seqn::UrSeqn, urr_id::UrrId, usage_report::UsageReport};
    use rs_pfcp::ie::{usage_report_trigger::UsageReportTrigger, volume_measurement::VolumeMeasurement};
    let mut rep = UsageReport::new(UrrId::new(sxa::URR_SESSION), UrSeqn::new(seq), UsageReportTrigger::new(1));
    rep.volume_measurement = Some(VolumeMeasurement::new(0x06, None, Some(ul), Some(dl), None, None, None));
    let ie = rs_pfcp::ie::Ie::new(rs_pfcp::ie::IeType::UsageReportWithinSessionReportRequest, rep.marshal());
    sxa::encode(sxa::SESSION_REPORT_REQUEST, Some(cp_seid), seq, &[ie])
}

/// The cause of the gateway's answer to `peer`, if it sent one.
fn pfcp_answer(n: &mut Net, peer: SocketAddr, b: &[u8]) -> Option<u8> {
    n.gw.handle_pfcp(n.now, peer, b);
    let t = n.gw.poll_transmit()?;
    assert_eq!(t.dst, peer);
    assert!(n.gw.poll_transmit().is_none());
    Some(sxa::cause_of(&sxa::decode(&t.bytes).unwrap().1))
}

fn two_upfs() -> SpgwcConfig {
    let mut cfg = Net::cfg();
    let second = UpfPeerConfig { pfcp: a(OTHER_UPF), s1u_addr: S1U, teid_base: 0x1000, teid_count: 0x1000 };
    cfg.upfs.push(second);
    cfg
}

#[test]
fn session_reports_count_only_from_the_upf_that_holds_the_session_and_saturate() {
    let mut n = Net::new(two_upfs());
    let sgw_teid = created(n.s11(&S11Request::CreateSession(csr(1)))).sgw_fteid.unwrap().teid;
    let cp_seid = n.gw.session(sgw_teid).unwrap().cp_seid;
    assert_eq!(n.gw.session(sgw_teid).unwrap().upf, 0);
    let usage = |n: &Net| n.gw.session(sgw_teid).unwrap().usage;

    // Another configured UPF: Session context not found (TS 29.244 7.5.9).
    assert_eq!(pfcp_answer(&mut n, a(OTHER_UPF), &usage_report(cp_seid, 500, 1000, 5000)), Some(65));
    assert_eq!(n.gw.counters.value("pfcp_report_from_non_owner"), 1);
    // No UPF at all: not even answered.
    assert_eq!(pfcp_answer(&mut n, a("127.0.0.66:8805"), &usage_report(cp_seid, 501, 1000, 5000)), None);
    assert_eq!(n.gw.counters.value("pfcp_from_unknown_peer"), 1);
    assert_eq!(usage(&n).uplink_octets, 0);

    // The owner: counted once, a retransmission answered again.
    let r = usage_report(cp_seid, 502, 1000, 5000);
    assert_eq!(pfcp_answer(&mut n, a(UPF), &r), Some(1));
    assert_eq!(pfcp_answer(&mut n, a(UPF), &r), Some(1));
    assert_eq!((usage(&n).uplink_octets, usage(&n).downlink_octets), (1000, 5000));
    assert_eq!(n.gw.counters.value("pfcp_duplicate_request"), 1);
    // Values near the top saturate, never wrap.
    for seq in [503, 504] {
        assert_eq!(pfcp_answer(&mut n, a(UPF), &usage_report(cp_seid, seq, u64::MAX - 1, u64::MAX)), Some(1));
    }
    assert_eq!((usage(&n).uplink_octets, usage(&n).downlink_octets), (u64::MAX, u64::MAX));
    assert_eq!(n.gw.counters.value("usage_uplink_octets"), u64::MAX);
}

#[test]
fn a_pfcp_response_from_another_node_completes_nothing() {
    let mut n = Net::new(two_upfs());
    let sgw_teid = created(n.s11(&S11Request::CreateSession(csr(1)))).sgw_fteid.unwrap().teid;
    let cp_seid = n.gw.session(sgw_teid).unwrap().cp_seid;
    n.upf_up = false;
    assert!(n.s11(&mbr(sgw_teid, 7)).is_none());
    let smr = n.pfcp_log.last().unwrap().clone();
    let (h, _) = sxa::decode(&smr).unwrap();
    assert_eq!(h.msg_type, msg::SESSION_MODIFICATION_REQUEST);
    let accept = [mobicore_pfcp::cause_ie(rs_pfcp::ie::cause::CauseValue::RequestAccepted)];
    let forged = sxa::encode(msg::SESSION_MODIFICATION_RESPONSE, Some(cp_seid), h.seq, &accept);
    let before = n.s11_out.len();
    n.gw.handle_pfcp(n.now, a(OTHER_UPF), &forged);
    n.drive();
    assert_eq!(n.s11_out.len(), before, "no Modify Bearer Response");
    assert_eq!(n.gw.counters.value("pfcp_unmatched_response"), 1);
    assert_eq!(n.gw.session(sgw_teid).unwrap().state, SessionState::Busy);
    assert_eq!(n.gw.session(sgw_teid).unwrap().s1u_enb, None);
    // The UPF it went to answers its retransmission.
    n.upf_up = true;
    n.step();
    assert_eq!(n.s11_out.len(), before + 1);
    assert_eq!(n.gw.session(sgw_teid).unwrap().s1u_enb.map(|f| f.teid), Some(Teid(7)));
}

#[test]
fn duplicate_caches_never_grow_past_their_bound() {
    let mut cfg = Net::cfg();
    cfg.s11_duplicate_cache = 16;
    cfg.pfcp_duplicate_cache = 8;
    let mut n = Net::new(cfg);
    let mut most = 0;
    for seq in 1..=1000 {
        let b = encode_request(&dsr(Teid(0xdead)), seq).to_bytes();
        assert!(n.s11_raw(&b).is_some());
        most = most.max(n.gw.held().s11_cache);
    }
    assert_eq!(most, 16);
    assert_eq!(n.gw.counters.value("s11_duplicate_cache_evicted"), 1000 - 16);
    let mut most = 0;
    for seq in 1..=200 {
        assert_eq!(pfcp_answer(&mut n, a(UPF), &usage_report(0xbeef, seq, 1, 1)), Some(65));
        most = most.max(n.gw.held().pfcp_cache);
    }
    assert_eq!(most, 8);
    assert_eq!(n.gw.counters.value("pfcp_duplicate_cache_evicted"), 200 - 8);
}

/// One datagram a non-owner sends.
#[derive(Debug, Clone)]
enum Hostile {
    /// Any bytes, from the other MME or a stranger.
    Bytes(Vec<u8>, bool),
    /// A Modify Bearer / Release Access Bearers / Delete Session for a live
    /// session (or a random TEID), one octet changed, from the other MME.
    Request { kind: u8, session: usize, teid: Option<u32>, at: usize, xor: u8 },
    /// A live UE's Create Session Request from a stranger.
    CreateSession { ue: u32, seq: u32 },
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        (proptest::collection::vec(any::<u8>(), 0..80), any::<bool>()).prop_map(|(b, s)| Hostile::Bytes(b, s)),
        (0u8..3, 0usize..2, proptest::option::of(any::<u32>()), any::<usize>(), any::<u8>())
            .prop_map(|(kind, session, teid, at, xor)| Hostile::Request { kind, session, teid, at, xor }),
        (1u32..3, any::<u32>()).prop_map(|(ue, seq)| Hostile::CreateSession { ue, seq: seq & 0xff_ffff }),
    ]
}

proptest! {
    /// Whatever a non-owner sends on S11, no existing session changes (in
    /// the S/P-GW-C or on the UPF), and nothing panics.
    #[test]
    fn s11_input_from_a_non_owner_changes_no_session(msgs in proptest::collection::vec(hostile(), 1..16)) {
        let mut n = Net::new(two_mmes());
        let t1 = created(n.s11(&S11Request::CreateSession(csr(1)))).sgw_fteid.unwrap().teid;
        let t2 = created(n.s11(&S11Request::CreateSession(csr(2)))).sgw_fteid.unwrap().teid;
        prop_assert_eq!(cause_of(n.s11(&mbr(t1, 0xe0b))), GtpCause::REQUEST_ACCEPTED);
        let (sessions, rules) = (n.gw.sessions().clone(), n.plane.sessions());
        for (i, m) in msgs.into_iter().enumerate() {
            let (peer, bytes) = match m {
                Hostile::Bytes(b, stranger) => (if stranger { a(STRANGER) } else { a(OTHER_MME) }, b),
                Hostile::Request { kind, session, teid, at, xor } => {
                    let t = teid.map_or([t1, t2][session], Teid);
                    let req = match kind {
                        0 => mbr(t, 0xbad),
                        1 => S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid: t }),
                        _ => dsr(t),
                    };
                    let mut b = encode_request(&req, 1000 + i as u32).to_bytes();
                    let at = at % b.len();
                    b[at] ^= xor;
                    (a(OTHER_MME), b)
                }
                Hostile::CreateSession { ue, seq } => {
                    (a(STRANGER), encode_request(&S11Request::CreateSession(csr(ue)), seq).to_bytes())
                }
            };
            n.gw.handle_s11(n.now, peer, &bytes);
            n.drive();
        }
        for (teid, s) in &sessions {
            prop_assert_eq!(n.gw.sessions().get(teid), Some(s));
        }
        let now = n.plane.sessions();
        for (seid, r) in &rules {
            prop_assert_eq!(now.get(seid), Some(r));
        }
    }
}
