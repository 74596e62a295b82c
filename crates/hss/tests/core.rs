//! The sans-I/O HSS core: AIR (vectors, SQN increment, resync with a
//! simulated USIM, bad MAC-S, unknown IMSI), ULR, PUR.

use mobicore_common::s6a::*;
use mobicore_common::{Imsi, Plmn};
use mobicore_hss::{auth, ApnProfile, Hss, Subscriber, SubscriberStore};
use oxirush_security::milenage::Sqn;
use oxirush_security::{Autn, Rand};

const K: [u8; 16] = [0x46, 0x5b, 0x5c, 0xe8, 0xb1, 0x99, 0xb4, 0x9f, 0xaa, 0x5f, 0x0a, 0x2e, 0xe2, 0x38, 0xa6, 0xbc];
const OPC: [u8; 16] = [0xcd, 0x63, 0xcb, 0x71, 0x95, 0x4a, 0x9f, 0x4e, 0x48, 0xa5, 0x99, 0x4e, 0x37, 0xa0, 0x2b, 0xaf];

fn imsi() -> Imsi {
    "001010000000001".parse().unwrap()
}
fn plmn() -> Plmn {
    "00101".parse().unwrap()
}

fn hss() -> Hss {
    let store = SubscriberStore::in_memory();
    let mut s = Subscriber::new(imsi(), K, OPC);
    s.msisdn = Some("46700000001".into());
    s.apns.push(ApnProfile::new("ims"));
    store.add(s).unwrap();
    Hss::with_seed(store, 7)
}

fn air(hss: &mut Hss, n: u32, resync: Option<ResyncInfo>) -> Result<Vec<EutranVector>, S6aError> {
    let req = AuthInfoRequest { imsi: imsi(), visited_plmn: plmn(), num_vectors: n, resync };
    match hss.handle(S6aRequest::AuthenticationInformation(req)) {
        S6aAnswer::AuthenticationInformation(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// The USIM side: checks AUTN, returns the SQN it carries.
fn usim_sqn(v: &EutranVector) -> u64 {
    let m = auth::milenage(&K, &OPC);
    let r = m.check_autn(&Rand::new(&v.rand), &Autn::new(&v.autn)).expect("MAC-A verifies");
    assert!(r.amf().separation_bit());
    assert_eq!(r.res().as_octets()[..], v.xres[..], "RES = XRES");
    r.sqn().get()
}

#[test]
fn air_gives_vectors_the_usim_accepts_and_sqn_increments() {
    let mut h = hss();
    let v1 = air(&mut h, 1, None).unwrap();
    assert_eq!(v1.len(), 1);
    let s1 = usim_sqn(&v1[0]);
    assert_eq!(auth::seq_of(s1), 1);
    let v3 = air(&mut h, 3, None).unwrap();
    assert_eq!(v3.len(), 3);
    let seqs: Vec<u64> = v3.iter().map(|v| auth::seq_of(usim_sqn(v))).collect();
    assert_eq!(seqs, vec![2, 3, 4]);
    assert_ne!(v3[0].rand, v3[1].rand, "fresh RAND per vector");
    assert_eq!(h.store().get(&imsi()).unwrap().sqn, usim_sqn(&v3[2]), "SQN_HE stored");
    assert!(h.store().is_dirty() || h.store().path().is_none());
}

#[test]
fn vector_count_is_bounded() {
    let mut h = hss();
    assert_eq!(air(&mut h, 0, None).unwrap().len(), 1);
    assert_eq!(air(&mut h, 100, None).unwrap().len(), 5);
}

#[test]
fn resync_round_trip_with_simulated_usim() {
    let mut h = hss();
    let v = air(&mut h, 1, None).unwrap().remove(0);
    // The USIM is far ahead (SEQ_MS = 1000): it rejects and answers AUTS.
    let sqn_ms = (1000u64 << 5) | 7;
    let m = auth::milenage(&K, &OPC);
    let auts = m.auts(&Rand::new(&v.rand), &Sqn::try_from(sqn_ms).unwrap());
    let resync = ResyncInfo { rand: v.rand, auts: *auts.as_octets() };
    let fresh = air(&mut h, 1, Some(resync)).unwrap().remove(0);
    let sqn = usim_sqn(&fresh);
    assert_eq!(auth::seq_of(sqn), 1001, "SQN_HE reset to SQN_MS, then incremented");
    assert!(sqn > sqn_ms, "the USIM accepts it (C.2.2)");
    assert_eq!(h.counters().value("hss_resync"), 1);
    // And the next AIR continues from there.
    let next = air(&mut h, 1, None).unwrap().remove(0);
    assert_eq!(auth::seq_of(usim_sqn(&next)), 1002);
}

#[test]
fn resync_with_bad_mac_s_is_refused_and_sqn_unchanged() {
    let mut h = hss();
    let v = air(&mut h, 1, None).unwrap().remove(0);
    let before = h.store().get(&imsi()).unwrap().sqn;
    let m = auth::milenage(&K, &OPC);
    let mut auts = *m.auts(&Rand::new(&v.rand), &Sqn::try_from(5000).unwrap()).as_octets();
    auts[13] ^= 1;
    let r = air(&mut h, 1, Some(ResyncInfo { rand: v.rand, auts }));
    assert_eq!(r, Err(S6aError::AuthenticationDataUnavailable));
    assert_eq!(h.store().get(&imsi()).unwrap().sqn, before);
    assert_eq!(h.counters().value("hss_resync_mac_failure"), 1);
}

#[test]
fn unknown_imsi_is_user_unknown() {
    let mut h = hss();
    let other: Imsi = "001019999999999".parse().unwrap();
    let req = AuthInfoRequest { imsi: other.clone(), visited_plmn: plmn(), num_vectors: 1, resync: None };
    assert_eq!(
        h.handle(S6aRequest::AuthenticationInformation(req)),
        S6aAnswer::AuthenticationInformation(Err(S6aError::UserUnknown))
    );
    let ulr = UpdateLocationRequest { imsi: other.clone(), visited_plmn: plmn(), flags: 0, terminal_information: None };
    assert_eq!(h.handle(S6aRequest::UpdateLocation(ulr)), S6aAnswer::UpdateLocation(Err(S6aError::UserUnknown)));
    assert_eq!(
        h.handle(S6aRequest::PurgeUe(PurgeUeRequest { imsi: other })),
        S6aAnswer::PurgeUe(Err(S6aError::UserUnknown))
    );
    assert_eq!(S6aError::UserUnknown.code(), 5001);
}

#[test]
fn ulr_returns_subscription_data() {
    let mut h = hss();
    let ulr = UpdateLocationRequest { imsi: imsi(), visited_plmn: plmn(), flags: 2, terminal_information: None };
    let S6aAnswer::UpdateLocation(Ok(sd)) = h.handle(S6aRequest::UpdateLocation(ulr)) else { panic!() };
    assert_eq!(sd.msisdn.as_deref(), Some("46700000001"));
    assert_eq!(sd.default_context_identifier, 1);
    assert_eq!(sd.apns.len(), 2);
    assert_eq!(sd.default_apn().unwrap().service_selection, "internet");
    assert_eq!(sd.apns[1].service_selection, "ims");
    assert_eq!(sd.apns[1].context_identifier, 2);
    assert_eq!(sd.apns[0].qci, 9);
    assert_eq!(sd.apns[0].arp.priority_level, 9);
    assert_eq!(sd.ue_ambr.downlink, 100_000_000);
}

#[test]
fn ulr_without_apns_is_unknown_eps_subscription_and_pur_succeeds() {
    let mut h = hss();
    h.store().update(&imsi(), |s| s.apns.clear());
    let ulr = UpdateLocationRequest { imsi: imsi(), visited_plmn: plmn(), flags: 0, terminal_information: None };
    assert_eq!(
        h.handle(S6aRequest::UpdateLocation(ulr)),
        S6aAnswer::UpdateLocation(Err(S6aError::UnknownEpsSubscription))
    );
    assert_eq!(h.handle(S6aRequest::PurgeUe(PurgeUeRequest { imsi: imsi() })), S6aAnswer::PurgeUe(Ok(())));
}
