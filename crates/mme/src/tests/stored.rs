//! Services continuing a procedure from a stored context (issue 13): a UE
//! is served by MME host A, its context goes to a store, A is dropped as if
//! killed, and host B (the same eNB association set up) carries on with it
//! from the record, with no new attach. Embedded and Redis stores.

use super::*;
use crate::context::{EmmState, Step};
use crate::context_codec::TimeBase;
use crate::stored::{keys, Replication, StoredError, StoredUes};
use crate::transfer::UeKey;
use crate::{MmeAction, MmeConfig, MmeEvent};
use mobicore_common::s11::*;
use mobicore_common::s6a::*;
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Fteid, Imsi, Teid};
use mobicore_store::Store;
use oxirush_nas::nas_eps::*;
use oxirush_s1ap::helpers::{eutran_cgi, plmn, tai, EnbKind};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{build_s1ap, S1apPduKind};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// The wall clock of every host at its start (hosts share a wall clock,
/// not their monotonic clocks).
const WALL0: u64 = 1_800_000_000_000;

/// One MME host: the core driven by the test harness, and its store layer.
struct Host {
    h: Harness,
    start: Instant,
    stored: StoredUes,
}

impl Host {
    /// A host whose eNB association 1 is set up (the front end's eNB).
    fn new(store: Store, mode: Replication, seed: u32) -> Host {
        let mut h = Harness::new(MmeConfig { mtmsi_seed: Some(seed), ..MmeConfig::default() }).without_journal_check();
        let stored = StoredUes::new(store, mode, &mut h.mme);
        Host { start: h.now, h, stored }
    }

    /// An elastic MME host numbered `prefix` (its identifiers carry it).
    fn numbered(store: Store, mode: Replication, seed: u32, prefix: u8) -> Host {
        let cfg = MmeConfig { mtmsi_seed: Some(seed), host_prefix: Some(prefix), ..MmeConfig::default() };
        let mut h = Harness::new(cfg).without_journal_check();
        let stored = StoredUes::new(store, mode, &mut h.mme);
        Host { start: h.now, h, stored }
    }

    fn time(&self) -> TimeBase {
        TimeBase { now: self.h.now, unix_ms: WALL0 + (self.h.now - self.start).as_millis() as u64 }
    }

    async fn sync(&mut self) -> crate::stored::SyncReport {
        let t = self.time();
        self.stored.sync(&mut self.h.mme, t).await
    }

    async fn load(&mut self, key: UeKey) -> Result<u32, StoredError> {
        let t = self.time();
        self.stored.load(&mut self.h.mme, &key, t).await
    }

    fn count(&self, name: &'static str) -> u64 {
        self.h.mme.counters().value(name)
    }
}

/// INITIAL UE MESSAGE of a UE coming back from idle, with its S-TMSI.
fn initial_ue_message_stmsi(enb_ue_id: u32, nas: Vec<u8>, mmec: u8, m_tmsi: u32) -> Vec<u8> {
    let p = plmn("001", "01").unwrap();
    build_s1ap!(
        InitiatingMessage,
        initialUEMessage,
        InitialUEMessage,
        eNB_UE_S1AP_ID(enb_ue_id),
        NAS_PDU(nas),
        TAI(tai(p, [0, 1])),
        EUTRAN_CGI(eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap()),
        RRC_Establishment_Cause(RRCEstablishmentCause::mo_Signalling),
        S_TMSI(STMSI::new(MMECode([mmec]), MTMSI(m_tmsi.to_be_bytes()), None)),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

fn m_tmsi(ue: &TestUe) -> u32 {
    ue.guti.expect("a GUTI").m_tmsi()
}

/// S1 release of a connected UE (TS 23.401 5.3.5): it goes ECM-IDLE.
pub(super) fn release_to_idle(h: &mut Harness, ue: &TestUe) {
    h.s1(release_request(ue.mme_ue_id.unwrap(), ue.enb_ue_id));
    let (r, req) = expect_s11(&h.drain());
    assert!(matches!(req, S11Request::ReleaseAccessBearers(_)));
    h.s11(r, S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED));
    assert_eq!(h.one_down().kind, S1apPduKind::Initiating_UEContextRelease);
    h.s1(crate::test_ue::release_complete(ue.mme_ue_id.unwrap(), ue.enb_ue_id));
    assert!(h.drain().is_empty());
}

/// UE-triggered SERVICE REQUEST from idle (TS 24.301 5.6.1): short MAC and
/// KSI checked with the stored context, bearers back, KeNB from the
/// request's uplink NAS COUNT (TS 33.401 7.2.6.2). Returns the request.
fn service_request(h: &mut Harness, ue: &mut TestUe, ksi: u8, enb_ue_id: u32) -> Vec<u8> {
    ue.enb_ue_id = enb_ue_id;
    let ctx = ue.ctx.as_mut().unwrap();
    let count = ctx.nas_count(Direction::Uplink).unwrap().get();
    let sr = ctx.protect_service_request(ksi).unwrap();
    let pdu = NasEpsMessage::ServiceRequest(sr).encode().unwrap();
    h.s1(initial_ue_message_stmsi(enb_ue_id, pdu.clone(), h.mme.config().mme_code, m_tmsi(ue)));
    let ics = h.one_down();
    assert_eq!(ics.kind, S1apPduKind::Initiating_InitialContextSetup, "the SERVICE REQUEST was taken");
    assert_eq!(ics.enb_id, Some(enb_ue_id));
    assert_eq!(ics.mme_id, ue.mme_ue_id, "the same MME-UE-S1AP-ID (S11 TEID)");
    assert_eq!(ics.kenb, Some(ue.kenb(count)), "KeNB per TS 33.401 A.3");
    h.s1(ics_response(ue.mme_ue_id.unwrap(), enb_ue_id, 0xdef));
    let (r, req) = expect_s11(&h.drain());
    let S11Request::ModifyBearer(mb) = req else { panic!("{req:?}") };
    assert_eq!(mb.sgw_teid, SGW_S11.teid);
    assert_eq!(mb.s1u_enb_fteid, Fteid { teid: Teid(0xdef), ipv4: Ipv4Addr::new(127, 0, 0, 9) });
    h.s11(r, S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, bearer_cause: None }));
    assert!(h.drain().is_empty());
    pdu
}

/// The next NAS COUNTs (uplink, downlink) of UE `id`'s security context.
fn nas_counts(h: &Harness, id: u32) -> (Option<u32>, Option<u32>) {
    let ctx = &h.mme.ues[&id].security.as_ref().unwrap().ctx;
    let get = |d| ctx.nas_count(d).map(|c| c.get());
    (get(Direction::Uplink), get(Direction::Downlink))
}

/// TRACKING AREA UPDATE REQUEST from idle (TA updating, integrity
/// protected) in an INITIAL UE MESSAGE with the UE's S-TMSI.
fn send_tau_request(h: &mut Harness, ue: &mut TestUe, ksi: u8, enb_ue_id: u32) {
    ue.enb_ue_id = enb_ue_id;
    let req = NasTrackingAreaUpdateRequest::new(
        NasEpsUpdateType::from_update_type(UpdateType::TaUpdating),
        NasKeySetIdentifier::new(ksi),
        NasEpsMobileIdentity::from_guti(ue.guti.unwrap()),
    );
    let h1 = NasEpsSecurityHeaderType::IntegrityProtected;
    let pdu = ue.ctx.as_mut().unwrap().protect(&NasEpsMessage::new_emm(req), h1, Direction::Uplink).unwrap();
    h.s1(initial_ue_message_stmsi(enb_ue_id, pdu, h.mme.config().mme_code, m_tmsi(ue)));
}

/// TAU from idle without the active flag (TS 24.301 5.5.3.2): TAU ACCEPT
/// with a new GUTI, TAU COMPLETE, the S1 connection released.
fn tau_from_idle(h: &mut Harness, ue: &mut TestUe, ksi: u8, enb_ue_id: u32) {
    let old = m_tmsi(ue);
    send_tau_request(h, ue, ksi, enb_ue_id);
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_downlinkNASTransport);
    ue.mme_ue_id = d.mme_id;
    let NasEmmMessage::TrackingAreaUpdateAccept(acc) = ue.receive(&d.nas.unwrap()) else { panic!("no TAU ACCEPT") };
    ue.guti = acc.guti.as_ref().and_then(|g| g.as_guti());
    assert_ne!(m_tmsi(ue), old, "a new GUTI");
    let complete = ue.protect(&NasEpsMessage::new_emm(NasTrackingAreaUpdateComplete::new()));
    h.up(ue, complete);
    let d = h.one_down();
    assert_eq!(d.kind, S1apPduKind::Initiating_UEContextRelease);
}

/// TAU from idle of a UE visiting another elastic MME host than the one
/// whose GUTI it has (TS 24.301 5.5.3.2.4): TAU ACCEPT without a GUTI, no
/// TAU COMPLETE, the S1 connection released at once.
fn tau_from_idle_keeping_guti(h: &mut Harness, ue: &mut TestUe, ksi: u8, enb_ue_id: u32) {
    send_tau_request(h, ue, ksi, enb_ue_id);
    let out = h.drain();
    assert_eq!(out.len(), 2, "{out:?}");
    let accept = read_down(&s1_data(&out[0]).2);
    assert_eq!(accept.kind, S1apPduKind::Initiating_downlinkNASTransport);
    let NasEmmMessage::TrackingAreaUpdateAccept(acc) = ue.receive(&accept.nas.unwrap()) else {
        panic!("no TAU ACCEPT")
    };
    assert!(acc.guti.is_none(), "the GUTI is kept");
    assert_eq!(read_down(&s1_data(&out[1]).2).kind, S1apPduKind::Initiating_UEContextRelease);
}

/// Switch-off DETACH REQUEST from idle (TS 24.301 5.5.2.2): session
/// deleted, S1 connection released, the context gone.
fn detach_from_idle(h: &mut Harness, ue: &mut TestUe, enb_ue_id: u32) {
    let before = h.mme.stats().ues;
    ue.enb_ue_id = enb_ue_id;
    let d = NasDetachRequestUeOriginating::new(
        NasDetachType::from_ue_detach_kind(UeDetachKind::EpsDetach, true),
        NasKeySetIdentifier::new(0),
        NasEpsMobileIdentity::from_guti(ue.guti.unwrap()),
    );
    let h1 = NasEpsSecurityHeaderType::IntegrityProtected;
    let pdu = ue.ctx.as_mut().unwrap().protect(&NasEpsMessage::new_emm(d), h1, Direction::Uplink).unwrap();
    h.s1(initial_ue_message_stmsi(enb_ue_id, pdu, h.mme.config().mme_code, m_tmsi(ue)));
    let (r, req) = expect_s11(&h.drain());
    let S11Request::DeleteSession(ds) = req else { panic!("{req:?}") };
    assert_eq!(ds.sgw_teid, SGW_S11.teid);
    h.s11(r, S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED));
    assert_eq!(h.one_down().kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!(h.mme.stats().ues, before - 1);
}

fn ksi_of(h: &Harness, id: u32) -> u8 {
    h.mme.ues[&id].security.as_ref().unwrap().ksi
}

/// Attach at A, idle; A dies; B serves a service request; B dies; C a TAU,
/// then D the detach: each host takes the UE from the record the previous
/// one wrote when its procedure completed (cold).
async fn cold_takeovers(store_of: impl Fn() -> Store) {
    let imsi = "001010000000101";
    let mut a = Host::new(store_of(), Replication::Cold, 0x100);
    let mut ue = a.h.attach(imsi, 11);
    let id = ue.mme_ue_id.unwrap();
    let guti = ue.guti.unwrap();
    release_to_idle(&mut a.h, &ue);
    let report = a.sync().await;
    assert_eq!((report.written, report.conflicts.len(), report.failed), (1, 0, 0), "{report:?}");
    let written = a.stored.store().get(&keys::record(&imsi.parse().unwrap())).await.unwrap().unwrap();
    let ksi = ksi_of(&a.h, id);
    let counts = nas_counts(&a.h, id);
    drop(a);

    // B: the UE's SERVICE REQUEST names it by S-TMSI; B loads it first.
    let mut b = Host::new(store_of(), Replication::Cold, 0x200);
    b.h.advance(Duration::from_secs(5));
    assert_eq!(b.load(UeKey::MTmsi(guti.m_tmsi())).await.unwrap(), id);
    assert_eq!(b.stored.version(&imsi.parse().unwrap()), Some(written.version));
    let ctx = &b.h.mme.ues[&id];
    assert_eq!((ctx.emm, ctx.step, ctx.s1), (EmmState::Registered, Step::Idle, None));
    assert!(b.h.mme.poll_timeout().is_some(), "the mobile reachable timer runs again");
    assert_eq!(nas_counts(&b.h, id), counts, "the NAS COUNTs came with the record");
    let sr = service_request(&mut b.h, &mut ue, ksi, 12);
    assert_eq!(b.count("attach_complete"), 0, "no new attach");
    assert_eq!(b.h.mme.ues[&id].guti.map(|g| g.m_tmsi.0), Some(guti.m_tmsi()), "the same GUTI");
    release_to_idle(&mut b.h, &ue);
    assert_eq!(b.sync().await.written, 1);
    drop(b);

    // C: a TAU from idle, found again by the same S-TMSI.
    let mut c = Host::new(store_of(), Replication::Cold, 0x300);
    c.load(UeKey::MTmsi(guti.m_tmsi())).await.unwrap();
    // B's SERVICE REQUEST replayed: its COUNT is spent (TS 33.401 7.2.6.2).
    c.h.s1(initial_ue_message_stmsi(15, sr, c.h.mme.config().mme_code, guti.m_tmsi()));
    let out = c.h.drain();
    assert!(out.iter().all(|x| read_down(&s1_data(x).2).kind != S1apPduKind::Initiating_InitialContextSetup));
    assert_eq!(c.count("service_request_mac_failure"), 1, "a replay is refused");
    tau_from_idle(&mut c.h, &mut ue, ksi, 13);
    assert_eq!(c.sync().await.written, 1);
    let new_mtmsi = m_tmsi(&ue);
    drop(c);

    // D: the detach, by the GUTI the TAU gave; the old one leads nowhere.
    let mut d = Host::new(store_of(), Replication::Cold, 0x400);
    assert!(matches!(d.load(UeKey::MTmsi(guti.m_tmsi())).await, Err(StoredError::NotFound(_))));
    d.load(UeKey::MTmsi(new_mtmsi)).await.unwrap();
    detach_from_idle(&mut d.h, &mut ue, 14);
    let report = d.sync().await;
    assert_eq!((report.deleted, report.written), (1, 0), "{report:?}");
    assert_eq!(d.stored.store().usage("mme/").await.unwrap(), (0, 0), "no record nor index left");
}

/// Host-local stores, a procedure placed on a replica host: host 2 (the
/// visitor) has host 1's record in its own store (taken from its copy),
/// serves a service request and a TAU keeping the UE's GUTI, and hands
/// the record back; host 1 takes it back and carries on from it (the NAS
/// COUNTs the visitor advanced), and the visitor keeps nothing.
#[tokio::test]
async fn a_visitor_keeps_the_guti_and_hands_the_record_back_to_its_owner() {
    let imsi = "001010000000131";
    let mut owner = Host::numbered(Store::memory(), Replication::Cold, 0x100, 1);
    let mut ue = owner.h.attach(imsi, 11);
    let id = ue.mme_ue_id.unwrap();
    let guti = ue.guti.unwrap();
    assert_eq!(guti.m_tmsi() >> 24, 1);
    release_to_idle(&mut owner.h, &ue);
    assert_eq!(owner.sync().await.written, 1);
    let ksi = ksi_of(&owner.h, id);
    let lent = owner.stored.hand_back(&mut owner.h.mme, id).await.unwrap();
    assert_eq!(lent.len(), 3, "record, M-TMSI and MME-UE-S1AP-ID keys");
    owner.stored.take_back(&owner.h.mme, &lent).await.unwrap();

    let mut visitor = Host::numbered(Store::memory(), Replication::Cold, 0x200, 2);
    visitor.stored.take_back(&visitor.h.mme, &lent).await.unwrap();
    assert_eq!(visitor.load(UeKey::MTmsi(guti.m_tmsi())).await.unwrap(), id);
    service_request(&mut visitor.h, &mut ue, ksi, 12);
    release_to_idle(&mut visitor.h, &ue);
    tau_from_idle_keeping_guti(&mut visitor.h, &mut ue, ksi, 13);
    assert_eq!(visitor.count("tau_guti_kept"), 1);
    assert_eq!(visitor.h.mme.ues[&id].guti.map(|g| g.m_tmsi.0), Some(guti.m_tmsi()));
    assert_eq!(visitor.sync().await.written, 1);
    let counts = nas_counts(&visitor.h, id);
    let back = visitor.stored.hand_back(&mut visitor.h.mme, id).await.unwrap();
    assert_eq!(back.len(), 3);
    assert!(visitor.h.mme.find_ue(&UeKey::MmeUeS1apId(id)).is_none(), "dropped at the visitor");
    assert_eq!(visitor.stored.store().usage("mme/").await.unwrap(), (0, 0), "nothing left there");

    // Held at the owner meanwhile (a stale copy): read again over it.
    owner.load(UeKey::MmeUeS1apId(id)).await.unwrap();
    let stale = owner.stored.version(&imsi.parse().unwrap());
    assert_eq!(owner.stored.take_back(&owner.h.mme, &back).await.unwrap(), 3);
    assert_eq!(owner.load(UeKey::MTmsi(guti.m_tmsi())).await.unwrap(), id);
    assert!(owner.stored.version(&imsi.parse().unwrap()) > stale);
    assert_eq!(nas_counts(&owner.h, id), counts, "the visitor's NAS COUNTs");
    // The owner's own TAU gives a new GUTI of its own.
    tau_from_idle(&mut owner.h, &mut ue, ksi, 14);
    assert_eq!(m_tmsi(&ue) >> 24, 1);
    assert_eq!(owner.count("tau_guti_kept"), 0);

    // Keys other than a UE's are refused, all of them.
    let bad = vec![(keys::record(&imsi.parse().unwrap()), vec![1]), ("other".to_string(), vec![2])];
    assert_eq!(visitor.stored.take_back(&visitor.h.mme, &bad).await.unwrap(), 0);
    assert_eq!(visitor.count("store_take_back_refused"), 1);
    assert_eq!(visitor.stored.store().usage("").await.unwrap(), (0, 0));
}

/// A detach placed on a replica host: the visitor deletes the UE's keys
/// in its own store and hands them back as deletes; its owner's host
/// deletes them too, and the UE is gone everywhere.
#[tokio::test]
async fn a_visitor_that_detaches_the_ue_hands_back_deletes() {
    let imsi = "001010000000132";
    let mut owner = Host::numbered(Store::memory(), Replication::Cold, 0x100, 1);
    let mut ue = owner.h.attach(imsi, 11);
    let id = ue.mme_ue_id.unwrap();
    release_to_idle(&mut owner.h, &ue);
    owner.sync().await;
    let lent = owner.stored.written(&owner.h.mme, id).await.unwrap();
    let mut visitor = Host::numbered(Store::memory(), Replication::Cold, 0x200, 2);
    visitor.stored.take_back(&visitor.h.mme, &lent).await.unwrap();
    visitor.load(UeKey::MTmsi(m_tmsi(&ue))).await.unwrap();
    detach_from_idle(&mut visitor.h, &mut ue, 12);
    assert_eq!(visitor.sync().await.deleted, 1);
    let back = visitor.stored.hand_back(&mut visitor.h.mme, id).await.unwrap();
    let mut keys: Vec<&str> = back.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    let mut want = lent.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>();
    want.sort_unstable();
    assert_eq!(keys, want, "the keys it had");
    assert!(back.iter().all(|(_, v)| v.is_empty()), "each a delete");
    assert_eq!(visitor.stored.store().usage("mme/").await.unwrap(), (0, 0));
    assert!(visitor.stored.hand_back(&mut visitor.h.mme, id).await.unwrap().is_empty(), "once");
    // The owner's host deletes them: the UE is gone.
    assert_eq!(owner.stored.take_back(&owner.h.mme, &back).await.unwrap(), 3);
    assert_eq!(owner.stored.store().usage("mme/").await.unwrap(), (0, 0));
    assert!(matches!(owner.load(UeKey::MTmsi(m_tmsi(&ue))).await, Err(StoredError::NotFound(_))));
    // An own UE detached leaves nothing to hand back.
    let mut own = owner.h.attach("001010000000133", 13);
    let own_id = own.mme_ue_id.unwrap();
    release_to_idle(&mut owner.h, &own);
    owner.sync().await;
    detach_from_idle(&mut owner.h, &mut own, 14);
    owner.sync().await;
    assert!(owner.stored.hand_back(&mut owner.h.mme, own_id).await.unwrap().is_empty());
}

#[tokio::test]
async fn cold_record_serves_service_request_tau_and_detach_on_other_hosts() {
    let store = Store::memory();
    cold_takeovers(|| store.clone()).await;
}

/// Hot replication: A dies in the middle of an attach, after the
/// Authentication Response (the SECURITY MODE COMMAND sent, T3460
/// running); B takes the SECURITY MODE COMPLETE from the record and
/// completes the attach.
async fn hot_mid_attach(store_a: Store, store_b: Store) {
    let imsi = "001010000000102";
    let mut a = Host::new(store_a, Replication::Hot, 0x100);
    let (mut ue, r) = a.h.start_attach(imsi, 21);
    assert_eq!(a.sync().await.written, 1, "written at the AIR already");
    let auth = a.h.challenge(&mut ue, r, 32);
    a.sync().await;
    let res = ue.authenticate(&auth);
    a.h.up(&ue, res);
    let smc = a.h.one_down().nas.unwrap();
    let report = a.sync().await;
    assert_eq!((report.written, report.failed), (1, 0));
    let id = ue.mme_ue_id.unwrap();
    assert_eq!(a.h.mme.ues[&id].step, Step::SecurityMode);
    drop(a);

    // B: the front end routes the uplink NAS by MME-UE-S1AP-ID.
    let mut b = Host::new(store_b, Replication::Hot, 0x200);
    b.h.advance(Duration::from_millis(300));
    assert_eq!(b.load(UeKey::MmeUeS1apId(id)).await.unwrap(), id);
    assert_eq!(b.h.mme.ues[&id].step, Step::SecurityMode);
    // T3460 re-armed at its written deadline.
    let t3460 = b.h.mme.ues[&id].timer.as_ref().map(|t| (t.kind, t.deadline));
    assert_eq!(t3460.map(|t| t.0), Some(crate::context::NasTimerKind::T3460));
    assert_eq!(b.h.mme.poll_timeout(), t3460.map(|t| t.1));
    let complete = ue.security_mode_complete(&smc);
    b.h.up(&ue, complete);
    let out: Vec<MmeAction> = b.h.drain().into_iter().filter(|x| matches!(x, MmeAction::S6a { .. })).collect();
    let (r, req) = expect_s6a(&out);
    assert_eq!(r.mme_ue_s1ap_id, id);
    assert!(matches!(req, S6aRequest::UpdateLocation(_)));
    b.h.s6a(r, S6aAnswer::UpdateLocation(Ok(subscription())));
    let (r3, req) = expect_s11(&b.h.drain());
    let S11Request::CreateSession(cs) = req else { panic!("{req:?}") };
    assert_eq!(cs.sender_fteid.teid, Teid(id), "the MME's S11 TEID is kept");
    b.h.s11(r3, create_session_ok());
    let ics = b.h.one_down();
    assert_eq!(ics.kind, S1apPduKind::Initiating_InitialContextSetup);
    assert_eq!(ics.kenb, Some(ue.kenb(0)), "the NAS COUNTs came with the record");
    let NasEmmMessage::AttachAccept(acc) = ue.receive(&ics.nas.unwrap()) else { panic!("no ATTACH ACCEPT") };
    ue.guti = acc.guti.as_ref().and_then(|g| g.as_guti());
    b.h.s1(ics_response(id, ue.enb_ue_id, 0xabc));
    let (_, req) = expect_s11(&b.h.drain());
    assert!(matches!(req, S11Request::ModifyBearer(_)));
    b.h.s11(
        r,
        S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, bearer_cause: None }),
    );
    let complete = ue.attach_complete();
    b.h.up(&ue, complete);
    assert!(b.h.drain().is_empty());
    let ctx = &b.h.mme.ues[&id];
    assert_eq!((ctx.emm, ctx.step), (EmmState::Registered, Step::Idle));
    assert_eq!(ctx.guti.map(|g| g.m_tmsi.0), ue.guti.map(|g| g.m_tmsi()));
    assert_eq!(b.count("t3460_abort"), 0);
    assert!(b.sync().await.written >= 1);
    // The record names the UE by its new GUTI.
    let imsi: Imsi = imsi.parse().unwrap();
    let by_mtmsi = b.stored.store().get(&keys::mtmsi(m_tmsi(&ue))).await.unwrap().unwrap();
    assert_eq!(by_mtmsi.value, imsi.as_str().as_bytes());
}

#[tokio::test]
async fn hot_record_lets_another_host_finish_an_attach() {
    let store = Store::memory();
    hot_mid_attach(store.clone(), store).await;
}

/// Hot replication: the SMC would be retransmitted by B if the UE stayed
/// silent (T3460 fires on whichever host holds the UE then).
#[tokio::test]
async fn hot_record_timer_fires_on_the_new_host() {
    let store = Store::memory();
    let mut a = Host::new(store.clone(), Replication::Hot, 0x100);
    let (mut ue, r) = a.h.start_attach("001010000000103", 31);
    let auth = a.h.challenge(&mut ue, r, 32);
    let res = ue.authenticate(&auth);
    a.h.up(&ue, res);
    let smc = a.h.one_down().nas.unwrap();
    a.sync().await;
    let id = ue.mme_ue_id.unwrap();
    drop(a);
    let mut b = Host::new(store, Replication::Hot, 0x200);
    b.load(UeKey::MmeUeS1apId(id)).await.unwrap();
    b.h.advance(Duration::from_secs(7));
    let again = b.h.one_down();
    assert_eq!((again.kind, again.mme_id), (S1apPduKind::Initiating_downlinkNASTransport, Some(id)));
    // The SECURITY MODE COMMAND again, with the algorithms A selected.
    assert_eq!(smc_algorithms(&again.nas.unwrap()), smc_algorithms(&smc));
    assert_eq!(b.count("nas_retransmission"), 1);
}

/// Two hosts hold the same UE; the one whose write comes second loses its
/// compare-and-set: counted, its copy dropped, the winner's record kept,
/// and it can load that record again.
#[tokio::test]
async fn cas_conflict_is_counted_and_the_loser_steps_back() {
    let store = Store::memory();
    let imsi: Imsi = "001010000000104".parse().unwrap();
    let mut a = Host::new(store.clone(), Replication::Hot, 0x100);
    let ue = a.h.attach(imsi.as_str(), 41);
    let id = ue.mme_ue_id.unwrap();
    a.sync().await;
    let mut b = Host::new(store.clone(), Replication::Hot, 0x200);
    b.load(UeKey::Imsi(imsi.clone())).await.unwrap();
    let v = b.stored.version(&imsi).unwrap();
    // Both take an S1 release of the UE; A writes first.
    release_to_idle(&mut a.h, &ue);
    let ra = a.sync().await;
    assert!(ra.written >= 1 && ra.conflicts.is_empty(), "{ra:?}");
    let won = store.get(&keys::record(&imsi)).await.unwrap().unwrap();
    assert!(won.version > v);
    release_to_idle(&mut b.h, &ue);
    let rb = b.sync().await;
    assert_eq!(rb.conflicts, vec![id], "{rb:?}");
    assert_eq!(b.count("store_cas_conflict"), 1);
    assert_eq!(b.h.mme.stats().ues, 0, "the loser dropped its copy");
    assert_eq!(store.get(&keys::record(&imsi)).await.unwrap().unwrap(), won, "the winner's record stays");
    // The reload: B takes the winner's record.
    b.load(UeKey::Imsi(imsi.clone())).await.unwrap();
    assert_eq!(b.stored.version(&imsi), Some(won.version));
    assert_eq!(a.count("store_cas_conflict"), 0);
}

/// One sync writes several UEs' records at once (pipelined): each answer
/// is its own, so the one UE another host wrote meanwhile is a conflict
/// (evicted here) and the others are written with their index keys. One
/// sync deletes several detached UEs' records and index keys at once.
async fn one_sync_of_many_ues_settles_each_write_on_its_own(store: Store) {
    let mut a = Host::new(store.clone(), Replication::Hot, 0x100);
    let imsis: Vec<Imsi> = (0..4).map(|i| format!("00101000000020{i}").parse().unwrap()).collect();
    let mut ues: Vec<TestUe> = imsis.iter().zip(51..).map(|(i, e)| a.h.attach(i.as_str(), e)).collect();
    let r = a.sync().await;
    assert_eq!((r.written, r.failed, r.conflicts.len()), (4, 0, 0), "{r:?}");
    // Host B takes UE 2 over and writes it first.
    let mut b = Host::new(store.clone(), Replication::Hot, 0x200);
    b.load(UeKey::Imsi(imsis[2].clone())).await.unwrap();
    release_to_idle(&mut b.h, &ues[2]);
    assert_eq!(b.sync().await.written, 1);
    let theirs = store.get(&keys::record(&imsis[2])).await.unwrap().unwrap();
    for ue in &ues {
        release_to_idle(&mut a.h, ue);
    }
    let r = a.sync().await;
    assert_eq!(r.written, 3, "{r:?}");
    assert_eq!(r.conflicts, vec![ues[2].mme_ue_id.unwrap()]);
    assert_eq!(a.h.mme.stats().ues, 3, "only the stale copy dropped");
    assert_eq!(store.get(&keys::record(&imsis[2])).await.unwrap().unwrap(), theirs, "B's record stays");
    for (i, ue) in ues.iter().enumerate().filter(|(i, _)| *i != 2) {
        let mine = a.h.mme.export_ue(&UeKey::Imsi(imsis[i].clone()), a.time()).unwrap();
        assert_eq!(store.get(&keys::record(&imsis[i])).await.unwrap().unwrap().value, mine);
        // Found again by its index keys, from another host.
        let mut c = Host::new(store.clone(), Replication::Hot, 0x300);
        assert!(c.load(UeKey::MTmsi(m_tmsi(ue))).await.is_ok(), "UE {i} by its M-TMSI");
        assert!(c.load(UeKey::MmeUeS1apId(ue.mme_ue_id.unwrap())).await.is_ok(), "UE {i} by its MME-UE-S1AP-ID");
    }
    for (i, ue) in ues.iter_mut().enumerate().filter(|(i, _)| *i != 2) {
        detach_from_idle(&mut a.h, ue, 60 + i as u32);
    }
    let r = a.sync().await;
    assert_eq!((r.deleted, r.failed), (3, 0), "{r:?}");
    let left: Vec<String> = store.scan_prefix("").await.unwrap().into_iter().map(|(k, _)| k).collect();
    let ue2 = [keys::record(&imsis[2]), keys::id(ues[2].mme_ue_id.unwrap()), keys::mtmsi(m_tmsi(&ues[2]))];
    assert!(left.iter().all(|k| ue2.contains(k)), "only UE 2's keys are left: {left:?}");
}

#[tokio::test]
async fn one_sync_of_many_ues_settles_each_write_on_its_own_embedded() {
    one_sync_of_many_ues_settles_each_write_on_its_own(Store::memory()).await;
}

/// The loser of a compare-and-set sends nothing its event produced for
/// the UE (write-ahead: the store is written before anything goes out):
/// its copy was stale, and the winner has acted for the UE.
#[tokio::test]
async fn the_loser_of_a_cas_conflict_withdraws_what_its_event_would_send() {
    let store = Store::memory();
    let imsi: Imsi = "001010000000112".parse().unwrap();
    let mut a = Host::new(store.clone(), Replication::Hot, 0x100);
    let ue = a.h.attach(imsi.as_str(), 42);
    let id = ue.mme_ue_id.unwrap();
    a.sync().await;
    let mut b = Host::new(store.clone(), Replication::Hot, 0x200);
    b.load(UeKey::Imsi(imsi.clone())).await.unwrap();
    release_to_idle(&mut a.h, &ue);
    assert!(a.sync().await.conflicts.is_empty());
    // B takes the same release on its stale copy: a Release Access
    // Bearers Request is ready to go, then the write loses.
    b.h.s1(release_request(id, ue.enb_ue_id));
    let rb = b.sync().await;
    assert_eq!(rb.conflicts, vec![id], "{rb:?}");
    assert_eq!(b.count("store_conflict_actions_withdrawn"), 1);
    assert!(b.h.drain().is_empty(), "nothing of the stale copy goes out");
    // What names the UE of an action: an S11 request's UeRef, a
    // UE-associated S1AP PDU's MME-UE-S1AP-ID.
    let other = a.h.attach("001010000000113", 43);
    a.h.s1(release_request(other.mme_ue_id.unwrap(), other.enb_ue_id));
    let out = a.h.drain();
    let (r, _) = expect_s11(&out);
    let s11 = out.iter().find(|x| matches!(x, MmeAction::S11 { .. })).unwrap();
    assert_eq!(crate::transfer::action_ue(s11), other.mme_ue_id);
    a.h.s11(r, S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED));
    let out = a.h.drain();
    let s1 = out.iter().find(|x| matches!(x, MmeAction::S1Send { .. })).expect("UE CONTEXT RELEASE COMMAND");
    assert_eq!(crate::transfer::action_ue(s1), other.mme_ue_id);
}

/// A UE that attaches again on another host supersedes its old record.
#[tokio::test]
async fn a_new_attach_supersedes_the_old_record() {
    let store = Store::memory();
    let imsi: Imsi = "001010000000105".parse().unwrap();
    let mut a = Host::new(store.clone(), Replication::Cold, 0x100);
    let old = a.h.attach(imsi.as_str(), 51);
    a.sync().await;
    drop(a);
    let mut b = Host::new(store.clone(), Replication::Cold, 0x200);
    let ue = b.h.attach(imsi.as_str(), 52);
    let report = b.sync().await;
    assert_eq!((report.written, report.conflicts.len()), (1, 0), "{report:?}");
    assert_eq!(b.count("store_record_superseded"), 1);
    let record = store.get(&keys::record(&imsi)).await.unwrap().unwrap();
    let (rid, _) = crate::context_codec::peek_context(&record.value).unwrap();
    assert_eq!(rid, ue.mme_ue_id.unwrap());
    // The old context's index keys went with it: one record, two indexes.
    assert_eq!(store.usage("mme/").await.unwrap().0, 3);
    assert!(store.get(&keys::mtmsi(m_tmsi(&old))).await.unwrap().is_none());
    assert!(store.get(&keys::id(old.mme_ue_id.unwrap())).await.unwrap().is_none());
}

/// Export, evict, import on one host: the UE is gone without a word to the
/// eNB, then back with its indexes.
#[test]
fn evict_sends_nothing_and_import_restores_the_indexes() {
    let mut h = Harness::default();
    let ue = h.attach("001010000000106", 61);
    let id = ue.mme_ue_id.unwrap();
    let t = TimeBase { now: h.now, unix_ms: WALL0 };
    let record = h.mme.export_ue(&UeKey::MTmsi(m_tmsi(&ue)), t).unwrap();
    // Compact: an attached UE with two APNs subscribed is 343 octets.
    assert!(record.len() < 512, "{} octets", record.len());
    assert!(h.mme.evict_ue(&UeKey::MmeUeS1apId(id)).is_some());
    assert!(h.drain().is_empty(), "no signalling");
    assert_eq!(h.mme.stats().ues, 0);
    assert!(h.mme.by_enb_ue.is_empty() && h.mme.by_mtmsi.is_empty() && h.mme.by_imsi.is_empty());
    assert_eq!(h.mme.import_ue(&record, t), Ok(id));
    assert_eq!(h.mme.find_ue(&UeKey::Imsi("001010000000106".parse().unwrap())), Some(id));
    assert_eq!(h.mme.find_ue(&UeKey::MTmsi(m_tmsi(&ue))), Some(id));
    assert_eq!(h.mme.by_enb_ue.get(&(h.assoc, 61)), Some(&id));
    assert_eq!(h.mme.export_ue(&UeKey::MmeUeS1apId(id), t).as_ref(), Some(&record), "the same record");
    // A record on an association this host has no eNB for is refused.
    let mut other = Harness::default();
    other.mme.handle(other.now, MmeEvent::S1Down { assoc: AssocId(1) });
    assert!(matches!(other.mme.import_ue(&record, t), Err(crate::transfer::ImportError::UnknownEnb(_))));
    // The eNB again, with one stream only: the UE gets a stream it has.
    other.mme.handle(other.now, MmeEvent::S1Up { assoc: AssocId(1), peer: [127, 0, 0, 1].into(), outbound_streams: 1 });
    other.s1_on(AssocId(1), 0, s1_setup_request("001", "01", 2));
    assert_eq!(read_down(&s1_data(&other.drain()[0]).2).kind, S1apPduKind::Successful_S1Setup);
    assert_eq!(h.mme.ues[&id].s1.map(|s| s.stream), Some(1));
    assert_eq!(other.mme.import_ue(&record, t), Ok(id));
    assert_eq!(other.mme.ues[&id].s1.map(|s| (s.assoc, s.enb_ue_s1ap_id, s.stream)), Some((AssocId(1), 61, 0)));
}

/// The same takeovers through a real Redis, each host with its own
/// connection.
/// Over a shared store a host that loads a UE to serve a message claims
/// its record at that event's sync (cold: the record as read, nothing of
/// the procedure), before its INITIAL CONTEXT SETUP REQUEST goes: the
/// owner's copy, still held until the front end's `Lent` reaches it,
/// loses its compare-and-set if it writes (a guard of it fired), and the
/// serving host completes its service request.
async fn a_serving_host_claims_the_record_it_loaded(store_a: Store, store_b: Store) {
    let imsi: Imsi = "001010000000108".parse().unwrap();
    let mut a = Host::new(store_a, Replication::Cold, 0x100);
    let mut ue = a.h.attach(imsi.as_str(), 81);
    let id = ue.mme_ue_id.unwrap();
    release_to_idle(&mut a.h, &ue);
    assert_eq!(a.sync().await.written, 1);
    let ksi = ksi_of(&a.h, id);
    let mut b = Host::new(store_b, Replication::Cold, 0x200);
    let t = b.time();
    let held = b.stored.hold(&mut b.h.mme, &UeKey::MTmsi(m_tmsi(&ue)), t).await;
    assert!(matches!(held, crate::stored::Hold::Loaded(i) if i == id), "{held:?}");
    ue.enb_ue_id = 82;
    let sr = ue.ctx.as_mut().unwrap().protect_service_request(ksi).unwrap();
    let pdu = NasEpsMessage::ServiceRequest(sr).encode().unwrap();
    b.h.s1(initial_ue_message_stmsi(82, pdu, b.h.mme.config().mme_code, m_tmsi(&ue)));
    let r = b.sync().await;
    assert_eq!((r.written, r.conflicts.len()), (0, 0), "cold: nothing of the procedure written: {r:?}");
    assert_eq!(b.count("store_ue_claimed"), 1);
    assert_eq!(b.h.one_down().kind, S1apPduKind::Initiating_InitialContextSetup);
    // The owner's copy writes: it lost, and went.
    let t = a.time();
    assert!(matches!(a.stored.write(&mut a.h.mme, id, t).await, Err(StoredError::Conflict { .. })));
    assert_eq!((a.count("store_cas_conflict"), a.h.mme.stats().ues), (1, 0));
    b.h.s1(ics_response(id, 82, 0xdef));
    let (r, _) = expect_s11(&b.h.drain());
    b.h.s11(
        r,
        S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, bearer_cause: None }),
    );
    let r = b.sync().await;
    assert_eq!((r.written, r.conflicts.len()), (1, 0), "the service request completed: {r:?}");
    assert_eq!((b.count("store_cas_conflict"), b.count("store_ue_claimed")), (0, 1));
}

#[tokio::test]
async fn redis_takeovers() {
    let server = match mobicore_store::redis_server::RedisServer::start() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIPPED redis_takeovers: {e}");
            return;
        }
    };
    let url = server.url();
    let connect = |ns: &'static str| {
        let url = url.clone();
        async move { Store::connect_redis(&url, ns).await.unwrap() }
    };
    hot_mid_attach(connect("hot").await, connect("hot").await).await;
    let shared = connect("cold").await;
    cold_takeovers(|| shared.clone()).await;
    // A CAS conflict on Redis too: two hosts, one record.
    let imsi: Imsi = "001010000000107".parse().unwrap();
    let mut a = Host::new(connect("cas").await, Replication::Hot, 0x100);
    let ue = a.h.attach(imsi.as_str(), 71);
    a.sync().await;
    let mut b = Host::new(connect("cas").await, Replication::Hot, 0x200);
    b.load(UeKey::Imsi(imsi.clone())).await.unwrap();
    release_to_idle(&mut a.h, &ue);
    assert!(a.sync().await.conflicts.is_empty());
    release_to_idle(&mut b.h, &ue);
    assert_eq!(b.sync().await.conflicts, vec![ue.mme_ue_id.unwrap()]);
    assert_eq!(b.count("store_cas_conflict"), 1);
    // Many UEs in one sync: their writes pipelined on one connection.
    one_sync_of_many_ues_settles_each_write_on_its_own(connect("many").await).await;
    a_serving_host_claims_the_record_it_loaded(connect("claim").await, connect("claim").await).await;
    a_stray_message_of_an_s1_connection_writes_nothing(connect("stray").await, connect("stray").await).await;
}

/// A message of an S1 connection (by MME-UE-S1AP-ID) that reaches a host
/// for a UE the store has at rest (misrouted, or late after a release)
/// concerns no UE: the copy its lookup loads is dropped unwritten, so the
/// owner's host writes the UE's record on with no conflict.
async fn a_stray_message_of_an_s1_connection_writes_nothing(store_a: Store, store_b: Store) {
    let mut a = Host::new(store_a, Replication::Cold, 0x100);
    let ue = a.h.attach("001010000000109", 91);
    let id = ue.mme_ue_id.unwrap();
    release_to_idle(&mut a.h, &ue);
    assert_eq!(a.sync().await.written, 1);
    let mut b = Host::new(store_b, Replication::Cold, 0x200);
    let t = b.time();
    let held = b.stored.hold_connected(&mut b.h.mme, &UeKey::MmeUeS1apId(id), t).await;
    assert!(matches!(held, crate::stored::Hold::NotStored), "{held:?}");
    b.h.s1(release_request(id, 91));
    assert_eq!(b.h.one_down().kind, S1apPduKind::Initiating_ErrorIndication);
    let r = b.sync().await;
    assert_eq!((r.written, r.conflicts.len(), b.h.mme.stats().ues), (0, 0, 0), "{r:?}");
    assert_eq!((b.count("store_ue_claimed"), b.count("host_stray_load_dropped")), (0, 1));
    let t = a.time();
    assert!(a.stored.write(&mut a.h.mme, id, t).await.is_ok(), "the owner's copy is the record");
    assert_eq!(a.count("store_cas_conflict"), 0);
}

#[tokio::test]
async fn a_stray_message_of_an_s1_connection_writes_nothing_embedded() {
    let store = Store::memory();
    a_stray_message_of_an_s1_connection_writes_nothing(store.clone(), store).await;
}

/// Redis gone: writes fail, are counted and tried again; the UE is still
/// served from memory and nothing panics.
#[tokio::test]
async fn redis_down_counts_failed_writes() {
    let server = match mobicore_store::redis_server::RedisServer::start() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIPPED redis_down_counts_failed_writes: {e}");
            return;
        }
    };
    let store = Store::connect_redis(&server.url(), "down").await.unwrap();
    let mut a = Host::new(store, Replication::Hot, 0x100);
    let ue = a.h.attach("001010000000108", 81);
    assert_eq!(a.sync().await.failed, 0);
    drop(server);
    release_to_idle(&mut a.h, &ue);
    let report = a.sync().await;
    assert_eq!((report.written, report.failed), (0, 1), "{report:?}");
    assert_eq!(a.count("store_write_failed"), 1);
    // Left alone for a pause (no timeout waited out at every event)...
    let report = a.sync().await;
    assert!(report.failed == 0 && report.deferred >= 1, "{report:?}");
    assert_eq!(a.count("store_sync_deferred"), 1);
    // ...then tried again, and failed again.
    a.h.advance(Duration::from_millis(300));
    assert_eq!(a.sync().await.failed, 1);
    assert_eq!(a.h.mme.stats().attached, 1, "still served");
    assert!(matches!(a.load(UeKey::Imsi("001010000000108".parse().unwrap())).await, Err(StoredError::Store(_))));
}

/// Redis frozen (SIGSTOP: requests taken, not answered), then back: a
/// write times out and is counted, the writes of the pause wait without
/// being tried, and once the server answers again they catch up, so the
/// record is the UE's newest state; the UE is served from memory all the
/// while. The timed-out write lands when the server thaws: the next
/// compare-and-set finds it and knows it for its own (not another host's,
/// which would evict the UE).
#[tokio::test]
async fn redis_frozen_then_back_the_writes_catch_up() {
    let mut server = match mobicore_store::redis_server::RedisServer::start() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIPPED redis_frozen_then_back_the_writes_catch_up: {e}");
            return;
        }
    };
    let store = Store::connect_redis_with_timeout(&server.url(), "frozen", Duration::from_millis(200)).await.unwrap();
    let mut a = Host::new(store.clone(), Replication::Cold, 0x100);
    let imsi: Imsi = "001010000000111".parse().unwrap();
    let mut ue = a.h.attach(imsi.as_str(), 82);
    assert_eq!(a.sync().await.failed, 0);
    let before = store.get(&keys::record(&imsi)).await.unwrap().unwrap().version;
    server.pause().unwrap();
    release_to_idle(&mut a.h, &ue);
    assert_eq!(a.sync().await.failed, 1, "timed out");
    let id = ue.mme_ue_id.unwrap();
    let ksi = ksi_of(&a.h, id);
    let sr = service_request(&mut a.h, &mut ue, ksi, 31);
    assert!(!sr.is_empty());
    let report = a.sync().await;
    assert!(report.failed == 0 && report.deferred >= 1, "not tried during the pause: {report:?}");
    server.resume().unwrap();
    a.h.advance(Duration::from_secs(5));
    let report = a.sync().await;
    assert_eq!((report.written, report.failed), (1, 0), "caught up: {report:?}");
    let after = store.get(&keys::record(&imsi)).await.unwrap().unwrap();
    assert!(after.version > before);
    assert_eq!(after.value, a.h.mme.export_ue(&UeKey::Imsi(imsi), a.time()).unwrap(), "the newest state");
    assert_eq!(a.h.mme.stats().attached, 1);
}

/// Host A (hot replication) takes UE `imsi` through authentication and
/// security mode, sends the Update-Location-Request, writes the record
/// and dies: the request and the UE.
async fn dead_awaiting_update_location(store: &Store, imsi: &str, enb_ue_id: u32) -> (crate::UeRef, TestUe) {
    let mut a = Host::new(store.clone(), Replication::Hot, 0x100);
    let (mut ue, r) = a.h.start_attach(imsi, enb_ue_id);
    let auth = a.h.challenge(&mut ue, r, 32);
    let res = ue.authenticate(&auth);
    a.h.up(&ue, res);
    let smc = a.h.one_down().nas.unwrap();
    let complete = ue.security_mode_complete(&smc);
    a.h.up(&ue, complete);
    let out: Vec<MmeAction> = a.h.drain().into_iter().filter(|x| matches!(x, MmeAction::S6a { .. })).collect();
    let (ulr, req) = expect_s6a(&out);
    assert!(matches!(req, S6aRequest::UpdateLocation(_)));
    a.sync().await;
    (ulr, ue)
}

/// Hot replication: A dies with its Update-Location-Request in flight; the
/// answer, routed to B (by the UE's MME-UE-S1AP-ID), is taken there: the
/// record kept the UeRef generation the request carried.
#[tokio::test]
async fn hot_record_takes_an_answer_to_the_previous_hosts_request() {
    let store = Store::memory();
    let (ulr, _) = dead_awaiting_update_location(&store, "001010000000109", 91).await;
    let mut b = Host::new(store, Replication::Hot, 0x200);
    b.load(UeKey::MmeUeS1apId(ulr.mme_ue_s1ap_id)).await.unwrap();
    b.h.s6a(ulr, S6aAnswer::UpdateLocation(Ok(subscription())));
    let (_, req) = expect_s11(&b.h.drain());
    assert!(matches!(req, S11Request::CreateSession(_)), "B goes on with the attach");
    assert_eq!(b.count("s6a_stale_answer"), 0);
    assert_eq!(b.h.mme.ues[&ulr.mme_ue_s1ap_id].step, Step::CreateSession);
    assert_eq!(b.sync().await.written, 1);
}

/// Hot replication, the host dead with a request in flight: its answer is
/// lost with it, so the heir sends the request of the record's step again
/// (`resume_taken_over`): the ULR, then, dead again, the Create Session;
/// the attach completes on the third host with the same S11 TEID.
#[tokio::test]
async fn a_takeover_resends_the_request_whose_answer_went_to_the_dead_host() {
    let store = Store::memory();
    let (ulr, mut ue) = dead_awaiting_update_location(&store, "001010000000110", 92).await;
    let id = ulr.mme_ue_s1ap_id;

    let mut b = Host::new(store.clone(), Replication::Hot, 0x200);
    b.load(UeKey::MmeUeS1apId(id)).await.unwrap();
    assert!(b.h.drain().is_empty(), "loading alone sends nothing");
    assert!(b.h.mme.resume_taken_over(id));
    let out: Vec<MmeAction> = b.h.drain().into_iter().filter(|x| matches!(x, MmeAction::S6a { .. })).collect();
    let (ulr2, req) = expect_s6a(&out);
    assert!(matches!(req, S6aRequest::UpdateLocation(_)), "the ULR again: {req:?}");
    b.h.s6a(ulr2, S6aAnswer::UpdateLocation(Ok(subscription())));
    let (_, req) = expect_s11(&b.h.drain());
    assert!(matches!(req, S11Request::CreateSession(_)));
    b.sync().await;
    drop(b);

    let mut c = Host::new(store.clone(), Replication::Hot, 0x300);
    c.load(UeKey::MmeUeS1apId(id)).await.unwrap();
    assert_eq!(c.h.mme.ues[&id].step, Step::CreateSession);
    assert!(c.h.mme.resume_taken_over(id));
    let (csr, req) = expect_s11(&c.h.drain());
    let S11Request::CreateSession(cs) = req else { panic!("{req:?}") };
    assert_eq!(cs.sender_fteid.teid, Teid(id), "the same MME S11 TEID");
    c.h.s11(csr, create_session_ok());
    let ics = c.h.one_down();
    assert_eq!(ics.kind, S1apPduKind::Initiating_InitialContextSetup);
    assert_eq!(c.count("ue_resumed_request"), 1);
    let NasEmmMessage::AttachAccept(_) = ue.receive(&ics.nas.unwrap()) else { panic!("no ATTACH ACCEPT") };
    c.h.s1(ics_response(id, ue.enb_ue_id, 0xabc));
    let (_, req) = expect_s11(&c.h.drain());
    assert!(matches!(req, S11Request::ModifyBearer(_)));
    let complete = ue.attach_complete();
    c.h.up(&ue, complete);
    c.sync().await;
    drop(c);

    // Dead after the Modify Bearer went (sent without a step to wait in):
    // whether the S-GW heard it, the record cannot say, so it goes again.
    let mut d = Host::new(store, Replication::Hot, 0x400);
    d.load(UeKey::MmeUeS1apId(id)).await.unwrap();
    assert!(d.h.mme.resume_taken_over(id));
    let (_, req) = expect_s11(&d.h.drain());
    let S11Request::ModifyBearer(mb) = req else { panic!("{req:?}") };
    assert_eq!(mb.s1u_enb_fteid.teid, Teid(0xabc), "the eNB's tunnel again");
    // Idle, nothing is awaited.
    d.h.mme.ues.get_mut(&id).unwrap().s1 = None;
    assert!(!d.h.mme.resume_taken_over(id));
}

/// Hot replication, the host dead once its UE CONTEXT RELEASE COMMAND was
/// written but maybe not sent: the record keeps the command until the
/// COMPLETE, so the heir sends it again (TS 36.413 8.3.3) and the UE is
/// at rest only after the COMPLETE, whose record the next heir reads.
#[tokio::test]
async fn a_takeover_resends_a_release_command_whose_complete_has_not_come() {
    let store = Store::memory();
    let mut a = Host::new(store.clone(), Replication::Hot, 0x100);
    let ue = a.h.attach("001010000000111", 93);
    let id = ue.mme_ue_id.unwrap();
    a.h.s1(release_request(id, ue.enb_ue_id));
    let (r, _) = expect_s11(&a.h.drain());
    a.h.s11(r, S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED));
    a.sync().await;
    let command = a.h.one_down();
    assert_eq!(command.kind, S1apPduKind::Initiating_UEContextRelease);
    assert_eq!(a.h.mme.ue_at_rest(id), Some(false), "until the COMPLETE");
    drop(a);

    let mut b = Host::new(store.clone(), Replication::Hot, 0x200);
    b.load(UeKey::MmeUeS1apId(id)).await.unwrap();
    assert_eq!(b.h.mme.ue_at_rest(id), Some(false));
    assert!(b.h.mme.resume_taken_over(id));
    let again = b.h.one_down();
    assert_eq!((again.kind, again.mme_id, again.enb_id), (command.kind, command.mme_id, command.enb_id));
    b.h.s1(crate::test_ue::release_complete(id, ue.enb_ue_id));
    assert_eq!(b.h.mme.ue_at_rest(id), Some(true));
    assert_eq!(b.sync().await.written, 1, "the release is complete");
    drop(b);

    let mut c = Host::new(store, Replication::Hot, 0x300);
    c.load(UeKey::MmeUeS1apId(id)).await.unwrap();
    assert_eq!(c.h.mme.ue_at_rest(id), Some(true));
    assert!(!c.h.mme.resume_taken_over(id), "nothing awaited");
    assert!(c.h.drain().is_empty());
}

/// Hot replication, the host dead once its INITIAL CONTEXT SETUP REQUEST
/// for a SERVICE REQUEST was written but maybe not sent: the heir sends
/// the same request again (the KeNB from the same uplink NAS COUNT), and
/// its RESPONSE ends the service request there.
#[tokio::test]
async fn a_takeover_resends_the_initial_context_setup_of_a_service_request() {
    let store = Store::memory();
    let mut a = Host::new(store.clone(), Replication::Hot, 0x100);
    let mut ue = a.h.attach("001010000000112", 94);
    let id = ue.mme_ue_id.unwrap();
    release_to_idle(&mut a.h, &ue);
    let ksi = ksi_of(&a.h, id);
    ue.enb_ue_id = 95;
    let ctx = ue.ctx.as_mut().unwrap();
    let count = ctx.nas_count(Direction::Uplink).unwrap().get();
    let sr = NasEpsMessage::ServiceRequest(ctx.protect_service_request(ksi).unwrap()).encode().unwrap();
    a.h.s1(initial_ue_message_stmsi(95, sr, a.h.mme.config().mme_code, m_tmsi(&ue)));
    let ics = a.h.one_down();
    assert_eq!(ics.kind, S1apPduKind::Initiating_InitialContextSetup);
    a.sync().await;
    drop(a);

    let mut b = Host::new(store, Replication::Hot, 0x200);
    b.load(UeKey::MmeUeS1apId(id)).await.unwrap();
    assert_eq!(b.h.mme.ues[&id].step, Step::ServiceRequest);
    assert!(b.h.mme.resume_taken_over(id));
    let again = b.h.one_down();
    assert_eq!((again.kind, again.mme_id, again.enb_id), (ics.kind, Some(id), Some(95)));
    assert_eq!(again.kenb, Some(ue.kenb(count)), "the same KeNB (TS 33.401 A.3)");
    b.h.s1(ics_response(id, 95, 0xdef));
    let (_, req) = expect_s11(&b.h.drain());
    assert!(matches!(req, S11Request::ModifyBearer(_)), "{req:?}");
    assert_eq!(b.h.mme.ues[&id].step, Step::Idle, "the service request is over");
}

/// Cold replication writes nothing mid-procedure: a host that dies in the
/// middle of an attach leaves no record, and the attach restarts.
#[tokio::test]
async fn cold_record_waits_for_the_procedure_to_complete() {
    let store = Store::memory();
    let mut a = Host::new(store.clone(), Replication::Cold, 0x100);
    let (mut ue, r) = a.h.start_attach("001010000000110", 95);
    a.h.challenge(&mut ue, r, 32);
    assert_eq!(a.sync().await, crate::stored::SyncReport::default());
    assert_eq!(store.usage("mme/").await.unwrap(), (0, 0));
    let mut b = Host::new(store, Replication::Cold, 0x200);
    let id = ue.mme_ue_id.unwrap();
    assert!(matches!(b.load(UeKey::MmeUeS1apId(id)).await, Err(StoredError::NotFound(_))));
}

/// An elastic MME host (`host_prefix`): every MME-UE-S1AP-ID (its S11
/// TEID) and M-TMSI it allocates carries its number as the top octet and
/// the UE's replica group (its IMSI's) as the second, by which the front
/// end routes; the prefix is 1..=254.
#[test]
fn a_hosts_identifiers_carry_its_number_and_the_ues_group() {
    let cfg = MmeConfig { host_prefix: Some(7), mtmsi_seed: Some(0x77), ..MmeConfig::default() };
    assert!(cfg.validate().is_ok());
    let mut h = Harness::new(cfg);
    let mut groups = std::collections::BTreeSet::new();
    // IMSIs of 15 digits and of 14 (odd and even TBCD).
    for imsi in (0..8u32).map(|i| format!("0010100000002{i:02}")).chain(["00101000000299".to_string()]) {
        let ue = h.attach(&imsi, 100 + groups.len() as u32);
        let (id, m) = (ue.mme_ue_id.unwrap(), m_tmsi(&ue));
        let g = mobicore_elastic::router::imsi_group(&imsi);
        groups.insert(g);
        assert_eq!((id >> 24, id >> 16 & 0xff), (7, u32::from(g)), "{id:#x}");
        assert_eq!((m >> 24, m >> 16 & 0xff), (7, u32::from(g)), "{m:#x}");
        assert_eq!(keys::group_of(&keys::record(&imsi.parse().unwrap())), Some(g));
        assert_eq!(keys::group_of(&keys::id(id)), Some(g));
        assert_eq!(keys::group_of(&keys::mtmsi(m)), Some(g));
        // Attaching again by that GUTI: the new S1 connection's
        // MME-UE-S1AP-ID has the same group, before the IMSI is known.
        release_to_idle(&mut h, &ue);
        let e = 200 + groups.len() as u32;
        h.s1(initial_ue_message(e, ue.attach_request_with(NasEpsMobileIdentity::from_guti(ue.guti.unwrap()))));
        let (again, _) = h.mme.ues.iter().find(|(_, u)| u.s1.is_some_and(|s| s.enb_ue_s1ap_id == e)).unwrap();
        assert_eq!(again >> 16, 7 << 8 | u32::from(g), "{again:#x}");
        let _ = h.drain();
    }
    assert!(groups.len() > 4, "IMSIs spread over the groups: {groups:?}");
    for bad in [0, 255] {
        assert!(MmeConfig { host_prefix: Some(bad), ..MmeConfig::default() }.validate().is_err());
    }
}

/// What a drained host waits for (`Mme::busy_ues`): a UE in the middle
/// of an attach is busy, an attached one (connected or idle) is not.
#[test]
fn a_ue_mid_attach_is_busy_and_an_attached_one_is_not() {
    let mut h = Harness::default();
    assert_eq!(h.mme.busy_ues(), 0);
    let (mut ue, r) = h.start_attach("001010000000107", 71);
    assert_eq!(h.mme.busy_ues(), 1, "waiting for the authentication vectors");
    let auth = h.challenge(&mut ue, r, 72);
    let res = ue.authenticate(&auth);
    h.up(&ue, res);
    assert!(h.one_down().nas.is_some(), "the security mode command");
    assert_eq!(h.mme.busy_ues(), 1, "its answer awaited");
    let attached = h.attach("001010000000108", 73);
    assert_eq!(h.mme.busy_ues(), 1, "the other one only");
    release_to_idle(&mut h, &attached);
    assert_eq!(h.mme.busy_ues(), 1);
}

/// What an elastic MME host's forwarder does with its NF instances'
/// cores: it hands out the ids a new UE and GUTI take; a record replaces
/// the copy it holds; a UE an instance forgot is journalled as removed.
#[test]
fn pinned_ids_are_taken_records_replace_and_dropped_ues_are_removed() {
    let mut h = Harness::default();
    h.mme.track_changes(true);
    let (id, m) = h.mme.draw_free_ids(0, |_| false);
    h.mme.pin_next_ids(id, m);
    let ue = h.attach("001010000000107", 62);
    assert_eq!((ue.mme_ue_id, m_tmsi(&ue)), (Some(id), m), "the pinned ids");
    let (id2, m2) = h.mme.draw_free_ids(0, |x| x == id.wrapping_add(1));
    assert!(id2 != id && m2 != m, "never one in use");
    let t = TimeBase { now: h.now, unix_ms: WALL0 };
    let record = h.mme.export_ue(&UeKey::MmeUeS1apId(id), t).unwrap();
    assert_eq!(h.mme.replace_ue(&record, t), Ok(id));
    assert_eq!(h.mme.find_ue(&UeKey::MTmsi(m)), Some(id));
    let _ = h.mme.take_changes();
    assert!(h.mme.drop_ue(id));
    assert_eq!(h.mme.take_changes().removed.iter().map(|r| r.id).collect::<Vec<_>>(), [id]);
    assert_eq!(h.mme.find_ue(&UeKey::MmeUeS1apId(id)), None);
    assert!(!h.mme.drop_ue(id));
}

/// A UE touched by an event that leaves its record as it was (the UE
/// CONTEXT RELEASE COMPLETE after its release to idle was written) is not
/// written again: no compare-and-set, nothing for the replica host, the
/// version held stays. The next change is written as any, and so is an
/// unchanged record another writer moved meanwhile (it loses).
#[tokio::test]
async fn a_record_an_event_left_as_it_was_is_not_written_again() {
    let store = Store::memory_with_feed();
    let imsi: Imsi = "001010000000120".parse().unwrap();
    let mut a = Host::new(store.clone(), Replication::Cold, 0x100);
    let mut ue = a.h.attach(imsi.as_str(), 41);
    let id = ue.mme_ue_id.unwrap();
    assert_eq!(a.sync().await.written, 1);
    release_to_idle(&mut a.h, &ue);
    assert_eq!(a.sync().await.written, 1, "ECM-IDLE: the record changed");
    let v = a.stored.version(&imsi).unwrap();
    store.take_changes();
    a.h.s1(crate::test_ue::release_complete(id, ue.enb_ue_id));
    assert!(a.h.mme.touched().any(|t| t == id), "the event touched the UE");
    let r = a.sync().await;
    assert_eq!((r.written, r.failed), (0, 0), "{r:?}");
    assert_eq!(a.count("store_ue_unchanged"), 1);
    assert!(store.take_changes().is_empty(), "nothing to replicate");
    assert_eq!(a.stored.version(&imsi), Some(v));
    let stored = store.get(&keys::record(&imsi)).await.unwrap().unwrap();
    assert_eq!(stored.version, v);
    assert_eq!(
        Some(stored.value),
        a.h.mme.export_ue(&UeKey::MmeUeS1apId(id), a.time()),
        "the store holds the UE as it is"
    );
    // A SERVICE REQUEST changes it (its NAS COUNT, ECM-CONNECTED): written.
    let ksi = ksi_of(&a.h, id);
    service_request(&mut a.h, &mut ue, ksi, 42);
    assert_eq!(a.sync().await.written, 1);
    assert!(a.stored.version(&imsi).unwrap() > v);
    assert_eq!(a.count("store_ue_unchanged"), 1);
    // Another writer moved the record (a visitor's, handed back): the same
    // event is a compare-and-set again, and loses it.
    release_to_idle(&mut a.h, &ue);
    assert_eq!(a.sync().await.written, 1);
    let record = store.get(&keys::record(&imsi)).await.unwrap().unwrap().value;
    store.put(&keys::record(&imsi), &record).await.unwrap();
    a.h.s1(crate::test_ue::release_complete(id, 42));
    assert_eq!(a.sync().await.conflicts, vec![id]);
    assert_eq!(a.count("store_ue_unchanged"), 1);
}
