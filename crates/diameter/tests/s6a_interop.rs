//! S6a as independent MMEs and HSSs speak it (TS 29.272, RFC 6733), driven
//! without sockets: requests built from the specification's grammars with
//! the optional AVPs a third-party MME sends, the M-bit rule (RFC 6733
//! 6.1.8, 7.5), Proxy-Info and Supported-Features in answers, and the
//! subscription data real MMEs use (PDN GW, static address, PDN types).

use mobicore_common::s6a::*;
use mobicore_common::{Ambr, Arp, PdnType};
use mobicore_diameter::avp::AvpRepr;
use mobicore_diameter::base::{error_answer_for, LocalIdentity};
use mobicore_diameter::dict::{app, avp, cmd, grammar, result, AvpDef, VENDOR_3GPP};
use mobicore_diameter::header::HeaderRepr;
use mobicore_diameter::s6a::request::unsupported_avp;
use mobicore_diameter::s6a::{decode_answer, decode_request, encode_answer};
use mobicore_diameter::Message;
use proptest::prelude::*;

const IMSI: &str = "001010000000001";

fn u64_avp(def: AvpDef, v: u64) -> AvpRepr {
    def.octets(&v.to_be_bytes())
}

fn header(command_code: u32) -> HeaderRepr {
    HeaderRepr {
        request: true,
        proxiable: true,
        command_code,
        application_id: app::S6A,
        hop_by_hop: 0x1234,
        end_to_end: 0x5678,
        ..Default::default()
    }
}

/// The AVPs every S6a request of a third-party MME starts with.
fn common(m: &mut Message) {
    m.push(avp::SESSION_ID.utf8("mme01.other.example;1700000000;42"));
    m.push(avp::DRMP.u32(10));
    m.push(mobicore_diameter::base::s6a_vendor_specific_application_id());
    m.push(avp::AUTH_SESSION_STATE.u32(1));
    m.push(avp::ORIGIN_HOST.utf8("mme01.other.example"));
    m.push(avp::ORIGIN_REALM.utf8("epc.mnc001.mcc001.3gppnetwork.org"));
    m.push(avp::DESTINATION_REALM.utf8("mobicore.local"));
    m.push(avp::USER_NAME.utf8(IMSI));
    m.push(avp::OC_SUPPORTED_FEATURES.grouped(&[u64_avp(avp::OC_FEATURE_VECTOR, 1)]));
    for (id, list) in [(1, 0x1c00_0607), (2, 0x0800_0000)] {
        m.push(avp::SUPPORTED_FEATURES.grouped(&[
            avp::VENDOR_ID.u32(VENDOR_3GPP),
            avp::FEATURE_LIST_ID.u32(id),
            avp::FEATURE_LIST.u32(list),
        ]));
    }
}

/// What relays and proxies on the way add (RFC 6733 6.7.1, 6.7.2).
fn relayed(m: &mut Message) {
    m.push(avp::PROXY_INFO.grouped(&[avp::PROXY_HOST.utf8("dra1.example"), avp::PROXY_STATE.octets(b"st-1")]));
    m.push(avp::PROXY_INFO.grouped(&[avp::PROXY_HOST.utf8("dra2.example"), avp::PROXY_STATE.octets(b"st-2")]));
    m.push(avp::ROUTE_RECORD.utf8("dra1.example"));
}

/// A ULR as an independent MME sends it (TS 29.272 7.2.3), with the
/// optional AVPs of its grammar.
fn third_party_ulr() -> Message {
    let mut m = Message::new(header(cmd::UPDATE_LOCATION));
    common(&mut m);
    m.push(avp::TERMINAL_INFORMATION.grouped(&[avp::IMEI.utf8("35609204079301"), avp::SOFTWARE_VERSION.utf8("42")]));
    m.push(avp::RAT_TYPE.u32(1004));
    m.push(avp::ULR_FLAGS.u32(0x22));
    m.push(avp::UE_SRVCC_CAPABILITY.u32(1));
    m.push(avp::VISITED_PLMN_ID.octets(&[0x00, 0xf1, 0x10]));
    m.push(avp::HOMOGENEOUS_SUPPORT_OF_IMS_VOICE_OVER_PS_SESSIONS.u32(1));
    m.push(avp::GMLC_ADDRESS.address([10, 1, 1, 1].into()));
    m.push(avp::ACTIVE_APN.grouped(&[avp::CONTEXT_IDENTIFIER.u32(1), avp::SERVICE_SELECTION.utf8("internet")]));
    m.push(avp::EQUIVALENT_PLMN_LIST.grouped(&[avp::VISITED_PLMN_ID.octets(&[0x00, 0xf2, 0x10])]));
    m.push(avp::MME_NUMBER_FOR_MT_SMS.octets(&[0x91, 0x64, 0x07]));
    m.push(avp::SMS_REGISTER_REQUEST.u32(2));
    m.push(avp::COUPLED_NODE_DIAMETER_ID.utf8("sgsn01.other.example"));
    relayed(&mut m);
    m
}

fn unknown_m_avp() -> AvpRepr {
    AvpRepr { code: 9999, vendor_id: Some(VENDOR_3GPP), mandatory: true, protected: false, data: vec![1, 2, 3, 4] }
}

#[test]
fn every_avp_of_every_grammar_is_in_the_dictionary() {
    for g in grammar::ALL {
        for (def, _) in g.rules {
            assert_eq!(avp::lookup(def.code, def.vendor_id), Some(def), "{}: {}", g.name, def.name);
        }
    }
    // Codes and vendors are unique.
    for (i, a) in avp::ALL.iter().enumerate() {
        assert!(avp::ALL[i + 1..].iter().all(|b| (a.code, a.vendor_id) != (b.code, b.vendor_id)), "{}", a.name);
    }
    // The AVPs the issue names, with their TS 29.272 / RFC codes.
    for (name, code, vendor) in [
        ("Terminal-Information", 1401, Some(VENDOR_3GPP)),
        ("IMEI", 1402, Some(VENDOR_3GPP)),
        ("Software-Version", 1403, Some(VENDOR_3GPP)),
        ("3GPP2-MEID", 1471, Some(VENDOR_3GPP)),
        ("Route-Record", 282, None),
        ("Proxy-Info", 284, None),
        ("Proxy-Host", 280, None),
        ("Proxy-State", 33, None),
        ("UE-SRVCC-Capability", 1615, Some(VENDOR_3GPP)),
        ("SGSN-Number", 1489, Some(VENDOR_3GPP)),
        ("Active-APN", 1612, Some(VENDOR_3GPP)),
        ("Equivalent-PLMN-List", 1637, Some(VENDOR_3GPP)),
        ("Adjacent-Access-Restriction-Data", 1673, Some(VENDOR_3GPP)),
        ("Cancellation-Type", 1420, Some(VENDOR_3GPP)),
        ("CLR-Flags", 1638, Some(VENDOR_3GPP)),
        ("DRMP", 301, None),
        ("OC-Supported-Features", 621, None),
        ("MIP6-Agent-Info", 486, None),
        ("MIP-Home-Agent-Address", 334, None),
        ("Served-Party-IP-Address", 848, Some(VENDOR_3GPP)),
    ] {
        assert_eq!(avp::lookup(code, vendor).map(|d| d.name), Some(name));
    }
    assert_eq!(grammar::command(cmd::CANCEL_LOCATION, true).unwrap().name, "Cancel-Location-Request");
}

#[test]
fn third_party_ulr_decodes_with_its_terminal_information() {
    let m = Message::parse(&third_party_ulr().to_vec()).unwrap();
    let S6aRequest::UpdateLocation(r) = decode_request(&m).unwrap() else { panic!() };
    assert_eq!(r.imsi.as_str(), IMSI);
    assert_eq!(r.flags, 0x22);
    let t = r.terminal_information.unwrap();
    assert_eq!(t.imei.as_deref(), Some("35609204079301"));
    assert_eq!(t.software_version.as_deref(), Some("42"));
    assert_eq!(t.meid, None);
    // The optional AVPs of the grammar are taken with the M-bit set too
    // (some MMEs set it where the table says "must not").
    let mut m2 = m.clone();
    for a in &mut m2.avps {
        a.mandatory = true;
    }
    assert!(decode_request(&m2).is_ok());
}

#[test]
fn terminal_information_round_trips_and_bad_imei_is_an_invalid_value() {
    let local = LocalIdentity::new("mme.mobicore.local", "mobicore.local");
    let t = TerminalInformation {
        imei: Some("356092040793011".into()),
        software_version: Some("01".into()),
        meid: Some(vec![0xa1; 7]),
    };
    let req = S6aRequest::UpdateLocation(UpdateLocationRequest {
        imsi: IMSI.parse().unwrap(),
        visited_plmn: "00101".parse().unwrap(),
        flags: 2,
        terminal_information: Some(t),
    });
    let ctx = mobicore_diameter::s6a::RequestContext {
        session_id: "s;1;1",
        local: &local,
        destination_realm: "mobicore.local",
        destination_host: None,
        hop_by_hop: 1,
        end_to_end: 1,
    };
    let m = mobicore_diameter::s6a::encode_request(&req, &ctx);
    assert_eq!(decode_request(&Message::parse(&m.to_vec()).unwrap()).unwrap(), req);

    for bad in ["3560920407930", "35609204079301A", "3560920407930123"] {
        let mut m = third_party_ulr();
        let ti = m.avps.iter_mut().find(|a| avp::TERMINAL_INFORMATION.matches(a)).unwrap();
        *ti = avp::TERMINAL_INFORMATION.grouped(&[avp::IMEI.utf8(bad)]);
        let e = decode_request(&m).unwrap_err();
        assert_eq!(e.result_code, result::DIAMETER_INVALID_AVP_VALUE, "{bad}");
        let f = e.failed_avp.unwrap();
        assert!(avp::TERMINAL_INFORMATION.matches(&f));
        assert_eq!(f.grouped().unwrap()[0].as_str().unwrap(), bad);
    }
}

#[test]
fn unknown_m_bit_avp_is_refused_with_failed_avp_top_level_and_nested() {
    // Top level: vendor 10415 code 9999 with the M-bit.
    let mut m = third_party_ulr();
    m.avps.insert(10, unknown_m_avp());
    let e = decode_request(&m).unwrap_err();
    assert_eq!(e.result_code, result::DIAMETER_AVP_UNSUPPORTED);
    assert_eq!(e.failed_avp, Some(unknown_m_avp()));

    // Inside Terminal-Information: Failed-AVP is Terminal-Information
    // holding only the offending AVP (RFC 6733 7.5).
    let mut m = third_party_ulr();
    let ti = m.avps.iter_mut().find(|a| avp::TERMINAL_INFORMATION.matches(a)).unwrap();
    *ti = avp::TERMINAL_INFORMATION.grouped(&[avp::IMEI.utf8("35609204079301"), unknown_m_avp()]);
    let e = decode_request(&m).unwrap_err();
    assert_eq!(e.result_code, result::DIAMETER_AVP_UNSUPPORTED);
    let f = e.failed_avp.unwrap();
    assert!(avp::TERMINAL_INFORMATION.matches(&f));
    assert_eq!(f.grouped().unwrap(), vec![unknown_m_avp()]);

    // The same AVPs without the M-bit are ignored, at any depth.
    let mut m = third_party_ulr();
    let quiet = AvpRepr { mandatory: false, ..unknown_m_avp() };
    m.avps.insert(10, quiet.clone());
    let ti = m.avps.iter_mut().find(|a| avp::TERMINAL_INFORMATION.matches(a)).unwrap();
    *ti = avp::TERMINAL_INFORMATION.grouped(&[avp::IMEI.utf8("35609204079301"), quiet]);
    assert!(decode_request(&m).is_ok());

    // The error answer carries it, with the request's Proxy-Info.
    let local = LocalIdentity::new("hss.mobicore.local", "mobicore.local");
    let mut m = third_party_ulr();
    m.avps.insert(10, unknown_m_avp());
    let e = decode_request(&m).unwrap_err();
    let a = error_answer_for(&local, &m, e.result_code, e.failed_avp);
    let a = Message::parse(&a.to_vec()).unwrap();
    assert_eq!(a.result_code(), Some(result::DIAMETER_AVP_UNSUPPORTED));
    assert_eq!(a.find(avp::FAILED_AVP).unwrap().grouped().unwrap(), vec![unknown_m_avp()]);
    let pi: Vec<_> = a.find_all(avp::PROXY_INFO).cloned().collect();
    let sent: Vec<_> = m.find_all(avp::PROXY_INFO).cloned().collect();
    assert_eq!(pi, sent);
}

#[test]
fn air_with_supported_features_and_route_record_decodes() {
    let mut m = Message::new(header(cmd::AUTHENTICATION_INFORMATION));
    common(&mut m);
    m.push(
        avp::REQUESTED_EUTRAN_AUTHENTICATION_INFO
            .grouped(&[avp::NUMBER_OF_REQUESTED_VECTORS.u32(2), avp::IMMEDIATE_RESPONSE_PREFERRED.u32(1)]),
    );
    m.push(avp::VISITED_PLMN_ID.octets(&[0x00, 0xf1, 0x10]));
    m.push(avp::AIR_FLAGS.u32(0));
    relayed(&mut m);
    let S6aRequest::AuthenticationInformation(r) = decode_request(&Message::parse(&m.to_vec()).unwrap()).unwrap()
    else {
        panic!()
    };
    assert_eq!((r.imsi.as_str(), r.num_vectors, r.resync), (IMSI, 2, None));
}

#[test]
fn answers_copy_proxy_info_and_answer_supported_features() {
    let local = LocalIdentity::new("hss.mobicore.local", "mobicore.local");
    let req = third_party_ulr();
    let a = encode_answer(&req, &S6aAnswer::UpdateLocation(Ok(subscription())), &local);
    let a = Message::parse(&a.to_vec()).unwrap();
    // RFC 6733 6.2: every Proxy-Info, unchanged, in order; Route-Record stays behind.
    let pi: Vec<_> = a.find_all(avp::PROXY_INFO).cloned().collect();
    assert_eq!(pi, req.find_all(avp::PROXY_INFO).cloned().collect::<Vec<_>>());
    assert_eq!(pi.len(), 2);
    assert!(a.find(avp::ROUTE_RECORD).is_none());
    // TS 29.229 7.2.1: one Supported-Features per list the MME announced,
    // with what both support, M-bit cleared.
    let sf: Vec<_> = a.find_all(avp::SUPPORTED_FEATURES).collect();
    assert_eq!(sf.len(), 2);
    for (s, id) in sf.iter().zip([1, 2]) {
        assert!(!s.mandatory);
        let c = s.grouped().unwrap();
        assert_eq!(mobicore_diameter::message::find(&c, avp::VENDOR_ID).unwrap().as_u32(), Ok(VENDOR_3GPP));
        assert_eq!(mobicore_diameter::message::find(&c, avp::FEATURE_LIST_ID).unwrap().as_u32(), Ok(id));
        let list = mobicore_diameter::message::find(&c, avp::FEATURE_LIST).unwrap().as_u32().unwrap();
        let offered = if id == 1 { 0x1c00_0607 } else { 0x0800_0000 };
        assert_eq!(list & !offered, 0, "only features the MME offered");
    }
    // A request without Supported-Features gets none.
    let mut plain = req.clone();
    plain.avps.retain(|a| !avp::SUPPORTED_FEATURES.matches(a));
    let a = encode_answer(&plain, &S6aAnswer::PurgeUe(Ok(())), &local);
    assert!(a.find(avp::SUPPORTED_FEATURES).is_none());
    // Our answer passes our own M-bit rule.
    assert_eq!(unsupported_avp(&a.avps, grammar::command(cmd::PURGE_UE, false)), None);
}

fn subscription() -> SubscriptionData {
    let apn = |id: u32, name: &str, pdn_type, pdn_gw, ip| ApnConfiguration {
        context_identifier: id,
        service_selection: name.into(),
        pdn_type,
        qci: if id == 1 { 9 } else { 5 },
        arp: Arp { priority_level: 8, pre_emption_capability: false, pre_emption_vulnerability: true },
        ambr: Ambr { uplink: 50_000_000, downlink: 100_000_000 },
        pdn_gw,
        served_party_ipv4: ip,
    };
    SubscriptionData {
        msisdn: Some("46700000001".into()),
        ue_ambr: Ambr { uplink: 100_000_000, downlink: 200_000_000 },
        default_context_identifier: 1,
        apns: vec![
            apn(1, "internet", PdnType::Ipv4v6, Some([10, 9, 0, 5].into()), Some([10, 45, 0, 9].into())),
            apn(2, "ims", PdnType::Ipv6, Some("fd00::5".parse().unwrap()), None),
            apn(3, "iot", PdnType::Ipv4, None, None),
        ],
    }
}

#[test]
fn ula_carries_pdn_gw_and_static_address_and_the_client_decodes_them() {
    let local = LocalIdentity::new("hss.mobicore.local", "mobicore.local");
    let req = third_party_ulr();
    let sd = subscription();
    let a = Message::parse(&encode_answer(&req, &S6aAnswer::UpdateLocation(Ok(sd.clone())), &local).to_vec()).unwrap();
    assert_eq!(decode_answer(&a).unwrap(), S6aAnswer::UpdateLocation(Ok(sd)));
    // On the wire: MIP6-Agent-Info / MIP-Home-Agent-Address and
    // Served-Party-IP-Address inside the first APN-Configuration.
    let sdata = a.find(avp::SUBSCRIPTION_DATA).unwrap().grouped().unwrap();
    let profile = mobicore_diameter::message::find(&sdata, avp::APN_CONFIGURATION_PROFILE).unwrap().grouped().unwrap();
    let first = mobicore_diameter::message::find(&profile, avp::APN_CONFIGURATION).unwrap().grouped().unwrap();
    let mip = mobicore_diameter::message::find(&first, avp::MIP6_AGENT_INFO).unwrap().grouped().unwrap();
    let ha = mobicore_diameter::message::find(&mip, avp::MIP_HOME_AGENT_ADDRESS).unwrap();
    assert_eq!(ha.as_address().unwrap(), std::net::IpAddr::from([10, 9, 0, 5]));
    let spia = mobicore_diameter::message::find(&first, avp::SERVED_PARTY_IP_ADDRESS).unwrap();
    assert_eq!(spia.as_address().unwrap(), std::net::IpAddr::from([10, 45, 0, 9]));
    assert_eq!(mobicore_diameter::message::find(&first, avp::PDN_TYPE).unwrap().as_u32(), Ok(2));
    // Every AVP of the ULA passes the M-bit rule a strict MME applies.
    assert_eq!(unsupported_avp(&a.avps, grammar::command(cmd::UPDATE_LOCATION, false)), None);
}

proptest! {
    /// The M-bit check never panics and never recurses without bound, on
    /// any bytes and on deeply nested Grouped AVPs.
    #[test]
    fn unsupported_avp_total(bytes in proptest::collection::vec(any::<u8>(), 0..512), depth in 0usize..200) {
        if let Ok(avps) = mobicore_diameter::avp::parse_avps(&bytes) {
            let _ = unsupported_avp(&avps, grammar::command(cmd::UPDATE_LOCATION, true));
        }
        let mut a = unknown_m_avp();
        for _ in 0..depth {
            a = avp::PROXY_INFO.grouped(&[a]);
        }
        let found = unsupported_avp(std::slice::from_ref(&a), None);
        prop_assert_eq!(found.is_some(), depth < mobicore_diameter::s6a::request::MAX_GROUPED_DEPTH);
    }
}
