//! Issue 9 on the S/P-GW-C, driven directly against the in-memory UPF:
//! PDN types, static addresses, PCO, several PDN connections per UE, the
//! APN-AMBR QER, and the answers to other GTP / PFCP versions and to IEs
//! of invalid length.

use crate::config::{ApnConfig, Ipv6Pool, SpgwcConfig};
use crate::s11_handler::{
    NEW_PDN_TYPE_NETWORK_PREFERENCE, NEW_PDN_TYPE_SINGLE_ADDRESS_BEARER_ONLY, PREFERRED_PDN_TYPE_NOT_SUPPORTED,
};
use crate::sxa_build::{self as sxa, msg};
use crate::tests::{a, created, csr, Net, MME, UPF};
use mobicore_common::s11::*;
use mobicore_common::{Ebi, PdnType, Teid};
use mobicore_gtp::message::{GtpMessage, Message};
use mobicore_gtp::s11::{decode_response, encode_request};
use mobicore_gtp::wire::ie::{ie_type, put_ie};
use std::net::{Ipv4Addr, Ipv6Addr};

fn v6pool(s: &str) -> Option<Ipv6Pool> {
    Some(s.to_string().try_into().unwrap())
}

/// "internet" with both pools, "v4only", "v6only", "ims" (both).
fn cfg() -> SpgwcConfig {
    let mut c = Net::cfg();
    let dual = |name: &str, v4: Ipv4Addr, v6: &str| ApnConfig {
        ipv6_pool: v6pool(v6),
        dns: vec!["10.0.0.53".parse().unwrap(), "2001:db8::53".parse().unwrap()],
        mtu: 1400,
        ..ApnConfig::ipv4(name, v4, 24)
    };
    c.apns = vec![
        dual("internet", Ipv4Addr::new(10, 45, 0, 0), "2001:db8:45::/48"),
        dual("ims", Ipv4Addr::new(10, 46, 0, 0), "2001:db8:46::/48"),
        ApnConfig::ipv4("v4only", Ipv4Addr::new(10, 47, 0, 0), 24),
        ApnConfig { pool: None, ..dual("v6only", Ipv4Addr::UNSPECIFIED, "2001:db8:48::/48") },
    ];
    c
}

fn csr_for(i: u32, apn: &str, pdn_type: PdnType) -> CreateSessionRequest {
    CreateSessionRequest { apn: apn.into(), pdn_type, ..csr(i) }
}

/// Sends a Create Session Request after `edit` changed its message.
fn create_edited(
    n: &mut Net,
    r: &CreateSessionRequest,
    edit: impl FnOnce(&mut mobicore_gtp::message::CreateSessionRequest),
) -> (CreateSessionResponse, GtpMessage) {
    n.seq += 1;
    let mut m = encode_request(&S11Request::CreateSession(r.clone()), n.seq);
    if let Message::CreateSessionRequest(c) = &mut m.body {
        edit(c);
    }
    let resp = n.s11_from(a(MME), &m.to_bytes()).expect("an answer");
    (created(Some(decode_response(&resp, r.bearer.ebi).unwrap())), resp)
}

#[test]
fn pdn_types_are_answered_per_ts_29_274() {
    let mut n = Net::new(cfg());
    // IPv4v6 with DAF on an APN with both pools: both, Request accepted.
    let r = created(n.s11(&S11Request::CreateSession(csr_for(1, "internet", PdnType::Ipv4v6))));
    assert_eq!((r.cause, r.pdn_type), (GtpCause::REQUEST_ACCEPTED, Some(PdnType::Ipv4v6)));
    assert_eq!(r.paa, Some(Ipv4Addr::new(10, 45, 0, 1)));
    assert_eq!(r.ipv6_prefix, Some(("2001:db8:45::1".parse().unwrap(), 64)), "a /64 with the UE's interface id");
    // IPv6 only.
    let r = created(n.s11(&S11Request::CreateSession(csr_for(2, "internet", PdnType::Ipv6))));
    assert_eq!((r.cause, r.pdn_type, r.paa), (GtpCause::REQUEST_ACCEPTED, Some(PdnType::Ipv6), None));
    assert_eq!(r.ipv6_prefix.map(|p| p.0.segments()[3]), Some(1), "the next /64");
    // IPv4v6 on an APN that has one of them: that one, cause 18.
    let r = created(n.s11(&S11Request::CreateSession(csr_for(3, "v4only", PdnType::Ipv4v6))));
    assert_eq!((r.cause, r.pdn_type, r.ipv6_prefix), (NEW_PDN_TYPE_NETWORK_PREFERENCE, Some(PdnType::Ipv4), None));
    assert!(r.paa.is_some());
    let r = created(n.s11(&S11Request::CreateSession(csr_for(4, "v6only", PdnType::Ipv4v6))));
    assert_eq!((r.cause, r.pdn_type, r.paa), (NEW_PDN_TYPE_NETWORK_PREFERENCE, Some(PdnType::Ipv6), None));
    assert!(r.ipv6_prefix.is_some());
    // IPv4v6 without DAF (the MME allows single address bearers only): cause 19.
    let (r, _) = create_edited(&mut n, &csr_for(5, "internet", PdnType::Ipv4v6), |c| c.indication = None);
    assert_eq!(
        (r.cause, r.pdn_type, r.ipv6_prefix),
        (NEW_PDN_TYPE_SINGLE_ADDRESS_BEARER_ONLY, Some(PdnType::Ipv4), None)
    );
    // Neither possible: Preferred PDN type not supported, nothing held.
    let before = n.gw.sessions().len();
    for (i, apn, t) in [(6, "v4only", PdnType::Ipv6), (7, "v6only", PdnType::Ipv4)] {
        let r = created(n.s11(&S11Request::CreateSession(csr_for(i, apn, t))));
        assert_eq!((r.cause, r.paa, r.ipv6_prefix), (PREFERRED_PDN_TYPE_NOT_SUPPORTED, None, None));
    }
    assert_eq!(n.gw.sessions().len(), before);
    assert_eq!(n.gw.counters.value("s11_create_session_pdn_type_unsupported"), 2);
    assert_eq!(n.gw.counters.value("s11_create_session_pdn_type_changed"), 3);
    // Every accepted one is on the UPF, the three with a prefix with their
    // IPv6 address in the downlink PDI (the UPF matches IPv6 by its /64).
    assert_eq!(n.plane.len(), 5);
    let with_v6 = n.plane.sessions().values().filter(|r| r.pdrs.values().any(|p| p.pdi.ue_ipv6.is_some())).count();
    assert_eq!(with_v6, 3);
    // Deleting gives the /64 back.
    let ipv6_held = n.gw.held().pool_addresses;
    let t =
        n.gw.sessions()
            .iter()
            .find(|(_, s)| s.pdn_type == PdnType::Ipv6 && s.apn == "internet")
            .map(|(t, _)| *t)
            .unwrap();
    let d = n.s11(&S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: Teid(t), linked_ebi: Ebi(5) }));
    assert_eq!(d, Some(S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED)));
    assert_eq!(n.gw.held().pool_addresses, ipv6_held - 1);
}

#[test]
fn a_static_address_is_honoured_and_refused_while_in_use() {
    let mut n = Net::new(cfg());
    let fixed = Ipv4Addr::new(10, 45, 0, 9);
    let r = created(n.s11(&S11Request::CreateSession(CreateSessionRequest { static_ipv4: Some(fixed), ..csr(1) })));
    assert_eq!((r.cause, r.paa), (GtpCause::REQUEST_ACCEPTED, Some(fixed)));
    let dl = n.plane.sessions().into_values().next().unwrap().pdrs[&sxa::PDR_DOWNLINK].clone();
    assert_eq!(dl.pdi.ue_ipv4, Some(fixed), "the UPF routes the static address");
    // Another UE subscribed to the same address: Request rejected.
    let r = created(n.s11(&S11Request::CreateSession(CreateSessionRequest { static_ipv4: Some(fixed), ..csr(2) })));
    assert_eq!((r.cause, r.paa), (GtpCause::REQUEST_REJECTED, None));
    assert_eq!(n.gw.counters.value("s11_create_session_static_address_in_use"), 1);
    // The same UE re-attaching replaces its own connection and keeps it.
    let r = created(n.s11(&S11Request::CreateSession(CreateSessionRequest { static_ipv4: Some(fixed), ..csr(1) })));
    assert_eq!((r.cause, r.paa), (GtpCause::REQUEST_ACCEPTED, Some(fixed)));
    // The pool never hands it out dynamically; outside the pool works too.
    for i in 3..12 {
        let r = created(n.s11(&S11Request::CreateSession(csr(i))));
        assert_ne!(r.paa, Some(fixed));
    }
    let outside = Ipv4Addr::new(192, 0, 2, 7);
    let r = created(n.s11(&S11Request::CreateSession(CreateSessionRequest { static_ipv4: Some(outside), ..csr(20) })));
    assert_eq!(r.paa, Some(outside));
}

#[test]
fn pco_gets_dns_and_mtu_and_the_response_every_conditional_ie() {
    let mut n = Net::new(cfg());
    // DNS IPv4 (0x000D), DNS IPv6 (0x0003), IPv4 link MTU (0x0010), IPCP.
    let ue_pco = vec![0x80, 0x00, 0x0d, 0x00, 0x00, 0x03, 0x00, 0x00, 0x10, 0x00, 0x80, 0x21, 0x00];
    let req = CreateSessionRequest { pco: Some(ue_pco.clone()), ..csr_for(1, "internet", PdnType::Ipv4v6) };
    let (r, m) = create_edited(&mut n, &req, |_| {});
    let mut want = vec![0x80, 0x00, 0x0d, 4, 10, 0, 0, 53, 0x00, 0x03, 16];
    want.extend_from_slice(&"2001:db8::53".parse::<Ipv6Addr>().unwrap().octets());
    want.extend_from_slice(&[0x00, 0x10, 2, 0x05, 0x78]);
    assert_eq!(r.pco, Some(want.clone()));
    let sgw = r.sgw_fteid.unwrap();
    assert_eq!(r.pgw_s5s8_c_fteid, Some(sgw), "PGW S5/S8-C F-TEID: ours, we are the PGW too");
    assert_eq!(r.charging_id, Some(sgw.teid.0));
    let Message::CreateSessionResponse(raw) = &m.body else { panic!() };
    assert_eq!(raw.recovery, Some(0));
    assert_eq!(raw.apn_restriction, Some(0));
    assert!(raw.apn_ambr.is_some());
    assert_eq!(raw.pgw_s5s8_fteid.unwrap().interface_type, 7);
    // ePCO in, ePCO out (same contents); no PCO at all, no PCO back.
    let req = CreateSessionRequest { pco: Some(ue_pco), ..csr_for(2, "internet", PdnType::Ipv4) };
    let (r, m) = create_edited(&mut n, &req, |c| c.epco = c.pco.take());
    let Message::CreateSessionResponse(raw) = &m.body else { panic!() };
    assert!(raw.pco.is_none() && raw.epco.is_some());
    assert_eq!(r.pco.unwrap()[..8], want[..8]);
    let r = created(n.s11(&S11Request::CreateSession(csr(3))));
    assert_eq!(r.pco, None);
}

#[test]
fn a_second_pdn_connection_and_its_deletion_leave_the_first() {
    let mut n = Net::new(cfg());
    let internet = created(n.s11(&S11Request::CreateSession(csr(1))));
    let ims_req = CreateSessionRequest {
        apn: "ims".into(),
        bearer: BearerContextToCreate { ebi: Ebi(6), ..csr(1).bearer },
        ..csr(1)
    };
    let ims = created(n.s11(&S11Request::CreateSession(ims_req.clone())));
    assert_eq!(ims.cause, GtpCause::REQUEST_ACCEPTED);
    assert_eq!(ims.paa, Some(Ipv4Addr::new(10, 46, 0, 1)));
    assert_eq!((n.gw.sessions().len(), n.plane.len()), (2, 2));
    assert_eq!(n.gw.counters.value("sessions_replaced"), 0);
    // Delete Session for "ims" (Linked EBI 6): "internet" stays.
    let d = n.s11(&S11Request::DeleteSession(DeleteSessionRequest {
        sgw_teid: ims.sgw_fteid.unwrap().teid,
        linked_ebi: Ebi(6),
    }));
    assert_eq!(d, Some(S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED)));
    assert_eq!((n.gw.sessions().len(), n.plane.len()), (1, 1));
    assert!(n.gw.session(internet.sgw_fteid.unwrap().teid).is_some());
    // An MME keeping one SGW TEID per UE names "ims" by its EBI on the
    // other connection's TEID (TS 29.274 7.2.9 Linked EBI).
    let ims = created(n.s11(&S11Request::CreateSession(ims_req)));
    let d = n.s11(&S11Request::DeleteSession(DeleteSessionRequest {
        sgw_teid: internet.sgw_fteid.unwrap().teid,
        linked_ebi: Ebi(6),
    }));
    assert_eq!(d, Some(S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED)));
    assert!(n.gw.session(ims.sgw_fteid.unwrap().teid).is_none());
    assert!(n.gw.session(internet.sgw_fteid.unwrap().teid).is_some());
    assert_eq!(n.gw.counters.value("s11_request_for_sibling_pdn"), 1);
}

#[test]
fn apn_ambr_becomes_a_qer_on_both_pdrs() {
    let mut n = Net::new(cfg());
    created(n.s11(&S11Request::CreateSession(csr(1))));
    let rules = n.plane.sessions().into_values().next().unwrap();
    let q = &rules.qers[&sxa::QER_APN_AMBR];
    assert_eq!(q.mbr, Some((100_000, 200_000)), "APN-AMBR in kbit/s");
    assert!(q.gate_ul_open && q.gate_dl_open);
    for pdr in [sxa::PDR_UPLINK, sxa::PDR_DOWNLINK] {
        assert_eq!(rules.pdrs[&pdr].qer_ids, vec![sxa::QER_APN_AMBR]);
    }
}

#[test]
fn other_gtp_versions_and_ies_of_invalid_length_are_answered() {
    let mut n = Net::new(cfg());
    // GTPv1-C Echo Request (TS 29.060), sequence number 0x0102.
    let r = n.s11_raw(&[0x32, 1, 0, 4, 0, 0, 0, 0, 0x01, 0x02, 0, 0]).expect("an answer");
    assert_eq!((r.body, r.teid, r.seq), (Message::VersionNotSupported, None, 0x0102));
    assert_eq!(n.gw.counters.value("gtp_version_not_supported"), 1);
    // A Create Session Request whose APN IE runs past the message.
    let mut b = encode_request(&S11Request::CreateSession(csr(1)), 77).to_bytes();
    put_ie(&mut b, ie_type::APN, 0, |v| v.extend_from_slice(b"\x03ims"));
    let last = b.len() - 8;
    b[last + 1..last + 3].copy_from_slice(&40u16.to_be_bytes());
    let l = (b.len() - 4) as u16;
    b[2..4].copy_from_slice(&l.to_be_bytes());
    let r = n.s11_raw(&b).expect("an answer");
    let Message::CreateSessionResponse(c) = &r.body else { panic!("{r:?}") };
    assert_eq!((c.cause.value, c.cause.offending), (67, Some((ie_type::APN, 0))));
    assert_eq!((r.seq, r.teid), (77, Some(0)));
    assert_eq!(n.gw.counters.value("s11_rejected_invalid_length"), 1);
    assert!(n.gw.sessions().is_empty());
    // PFCP version 2 from the UPF: Version Not Supported Response.
    let before = n.pfcp_log.len();
    n.upf_up = false;
    n.gw.handle_pfcp(n.now, a(UPF), &[0x40, msg::HEARTBEAT_REQUEST, 0, 4, 0, 0, 9, 0]);
    n.drive();
    assert_eq!(n.pfcp_log[before..], [vec![0x20, msg::VERSION_NOT_SUPPORTED_RESPONSE, 0, 4, 0, 0, 9, 0]]);
    // Not a request: counted, not answered.
    n.gw.handle_pfcp(n.now, a(UPF), &[0x40, msg::HEARTBEAT_RESPONSE, 0, 4, 0, 0, 9, 0]);
    n.drive();
    assert_eq!(n.pfcp_log.len(), before + 1);
    assert_eq!(n.gw.counters.value("pfcp_version_not_supported"), 2);
    assert_eq!(n.gw.counters.value("pfcp_malformed"), 0);
}

#[test]
fn a_upf_reporting_features_we_do_not_use_is_associated() {
    use mobicore_common::counters::Counters;
    let mut gw =
        crate::SpgwcCore::new(Net::cfg(), Ipv4Addr::LOCALHOST, std::time::SystemTime::UNIX_EPOCH, Counters::new());
    let now = std::time::Instant::now();
    gw.start(now);
    let req = gw.poll_transmit().unwrap();
    let (h, _) = sxa::decode(&req.bytes).unwrap();
    // Node ID, Cause accepted, Recovery Time Stamp, UP Function Features
    // with every bit of 6 octets set, an IE type nobody defined, and a
    // vendor-specific IE (TS 29.244 8.1.1: enterprise ID after the length).
    let mut ies = vec![];
    ies.extend_from_slice(&[0, 60, 0, 5, 0, 127, 0, 0, 2]);
    ies.extend_from_slice(&[0, 19, 0, 1, 1]);
    ies.extend_from_slice(&[0, 96, 0, 4, 0xe0, 0, 0, 1]);
    ies.extend_from_slice(&[0, 43, 0, 6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    ies.extend_from_slice(&[0x7f, 0x00, 0, 2, 1, 2]);
    ies.extend_from_slice(&[0x80, 0x01, 0, 4, 0x28, 0xaf, 9, 9]);
    let mut b = vec![0x20, msg::ASSOCIATION_SETUP_RESPONSE, 0, 0];
    b.extend_from_slice(&h.seq.to_be_bytes()[1..]);
    b.push(0);
    b.extend_from_slice(&ies);
    let l = (b.len() - 4) as u16;
    b[2..4].copy_from_slice(&l.to_be_bytes());
    gw.handle_pfcp(now, a(UPF), &b);
    assert!(gw.upf_associated(0));
    assert_eq!(gw.counters.value("pfcp_malformed"), 0);
}
