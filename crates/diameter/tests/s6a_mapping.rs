//! S6a messages: typed -> Diameter -> typed for every procedure, the flag
//! rules on the wire, and the answers to bad requests.

use mobicore_common::s6a::*;
use mobicore_common::{Ambr, Arp, PdnType, Plmn};
use mobicore_diameter::base::LocalIdentity;
use mobicore_diameter::dict::{app, avp, result};
use mobicore_diameter::s6a::{decode_answer, decode_request, encode_answer, encode_request, RequestContext};
use mobicore_diameter::Message;
use proptest::prelude::*;

fn ctx(local: &LocalIdentity) -> RequestContext<'_> {
    RequestContext {
        session_id: "mme;1;2",
        local,
        destination_realm: "mobicore.local",
        destination_host: None,
        hop_by_hop: 7,
        end_to_end: 9,
    }
}

fn requests() -> Vec<S6aRequest> {
    let imsi: mobicore_common::Imsi = "001010123456789".parse().unwrap();
    let plmn: Plmn = "310410".parse().unwrap();
    vec![
        S6aRequest::AuthenticationInformation(AuthInfoRequest {
            imsi: imsi.clone(),
            visited_plmn: plmn,
            num_vectors: 3,
            resync: None,
        }),
        S6aRequest::AuthenticationInformation(AuthInfoRequest {
            imsi: imsi.clone(),
            visited_plmn: plmn,
            num_vectors: 1,
            resync: Some(ResyncInfo { rand: [5; 16], auts: [6; 14] }),
        }),
        S6aRequest::UpdateLocation(UpdateLocationRequest {
            imsi: imsi.clone(),
            visited_plmn: plmn,
            flags: 0x22,
            terminal_information: None,
        }),
        S6aRequest::PurgeUe(PurgeUeRequest { imsi }),
    ]
}

#[test]
fn requests_round_trip_with_3gpp_flags() {
    let local = LocalIdentity::new("mme.mobicore.local", "mobicore.local");
    for r in requests() {
        let m = encode_request(&r, &ctx(&local));
        assert!(m.header.request && m.header.proxiable);
        assert_eq!(m.header.application_id, app::S6A);
        assert_eq!(m.avps[0].code, avp::SESSION_ID.code, "Session-Id first");
        assert!(m.find(avp::VENDOR_SPECIFIC_APPLICATION_ID).is_some());
        for a in &m.avps {
            let def = avp::lookup(a.code, a.vendor_id).expect("known AVP");
            assert_eq!(a.mandatory, def.mandatory, "{}", def.name);
        }
        let wire = Message::parse(&m.to_vec()).unwrap();
        assert_eq!(decode_request(&wire).unwrap(), r);
    }
}

fn answers() -> Vec<S6aAnswer> {
    let v = EutranVector { rand: [1; 16], xres: vec![2; 8], autn: [3; 16], kasme: [4; 32] };
    let sd = SubscriptionData {
        msisdn: Some("46700000001".into()),
        ue_ambr: Ambr { uplink: 50_000_000, downlink: 100_000_000 },
        default_context_identifier: 1,
        apns: vec![
            ApnConfiguration {
                context_identifier: 1,
                service_selection: "internet".into(),
                pdn_type: PdnType::Ipv4,
                qci: 9,
                arp: Arp::default(),
                ambr: Ambr { uplink: 1, downlink: 2 },
                pdn_gw: None,
                served_party_ipv4: None,
            },
            ApnConfiguration {
                context_identifier: 2,
                service_selection: "ims".into(),
                pdn_type: PdnType::Ipv4v6,
                qci: 5,
                arp: Arp { priority_level: 1, pre_emption_capability: true, pre_emption_vulnerability: false },
                ambr: Ambr { uplink: 3, downlink: 4 },
                pdn_gw: None,
                served_party_ipv4: None,
            },
        ],
    };
    vec![
        S6aAnswer::AuthenticationInformation(Ok(vec![v.clone(), v])),
        S6aAnswer::AuthenticationInformation(Err(S6aError::UserUnknown)),
        S6aAnswer::AuthenticationInformation(Err(S6aError::AuthenticationDataUnavailable)),
        S6aAnswer::UpdateLocation(Ok(sd)),
        S6aAnswer::UpdateLocation(Err(S6aError::RoamingNotAllowed)),
        S6aAnswer::UpdateLocation(Err(S6aError::UnknownEpsSubscription)),
        S6aAnswer::UpdateLocation(Err(S6aError::UnableToComply)),
        S6aAnswer::PurgeUe(Ok(())),
        S6aAnswer::PurgeUe(Err(S6aError::UserUnknown)),
    ]
}

#[test]
fn answers_round_trip_with_result_or_experimental_result() {
    let mme = LocalIdentity::new("mme.mobicore.local", "mobicore.local");
    let hss = LocalIdentity::new("hss.mobicore.local", "mobicore.local");
    let reqs = requests();
    for a in answers() {
        let req = match a {
            S6aAnswer::AuthenticationInformation(_) => &reqs[0],
            S6aAnswer::UpdateLocation(_) => &reqs[2],
            S6aAnswer::PurgeUe(_) => &reqs[3],
        };
        let req = encode_request(req, &ctx(&mme));
        let m = encode_answer(&req, &a, &hss);
        assert!(!m.header.request && !m.header.error);
        assert_eq!(m.header.hop_by_hop, 7);
        assert_eq!(m.session_id(), Some("mme;1;2"));
        assert_eq!(m.find(avp::ORIGIN_HOST).unwrap().as_str().unwrap(), "hss.mobicore.local");
        let experimental = m.find(avp::EXPERIMENTAL_RESULT).is_some();
        let expected_experimental = matches!(&a,
            S6aAnswer::AuthenticationInformation(Err(e)) | S6aAnswer::UpdateLocation(Err(e)) | S6aAnswer::PurgeUe(Err(e)) if e.is_experimental());
        assert_eq!(experimental, expected_experimental, "{a:?}");
        let wire = Message::parse(&m.to_vec()).unwrap();
        assert_eq!(decode_answer(&wire).unwrap(), a);
    }
}

#[test]
fn bad_requests_get_the_rfc_6733_codes() {
    let local = LocalIdentity::new("mme", "realm");
    let good = encode_request(&requests()[0], &ctx(&local));
    let mut m = good.clone();
    m.avps.retain(|a| !avp::VISITED_PLMN_ID.matches(a));
    let e = decode_request(&m).unwrap_err();
    assert_eq!(e.result_code, result::DIAMETER_MISSING_AVP);
    let f = e.failed_avp.unwrap();
    assert_eq!((f.code, f.vendor_id, f.data.len()), (1407, Some(10415), 3));

    let mut m = good.clone();
    for a in m.avps.iter_mut().filter(|a| avp::USER_NAME.matches(a)) {
        a.data = b"12x".to_vec();
    }
    assert_eq!(decode_request(&m).unwrap_err().result_code, result::DIAMETER_INVALID_AVP_VALUE);

    let mut m = good.clone();
    m.avps.push(mobicore_diameter::avp::AvpRepr {
        code: 4242,
        vendor_id: Some(1),
        mandatory: true,
        protected: false,
        data: vec![],
    });
    assert_eq!(decode_request(&m).unwrap_err().result_code, result::DIAMETER_AVP_UNSUPPORTED);
    // Unknown AVP without the M-bit is ignored.
    let mut m = good.clone();
    m.avps.push(mobicore_diameter::avp::AvpRepr {
        code: 4242,
        vendor_id: Some(1),
        mandatory: false,
        protected: false,
        data: vec![],
    });
    assert!(decode_request(&m).is_ok());

    // An E-bit answer with a protocol error maps to S6aError::Other.
    let err = mobicore_diameter::base::error_answer(
        &local,
        &good.header,
        Some("s"),
        result::DIAMETER_UNABLE_TO_DELIVER,
        None,
    );
    assert!(err.header.error);
    assert_eq!(decode_answer(&err).unwrap(), S6aAnswer::AuthenticationInformation(Err(S6aError::Other(3002))));
}

proptest! {
    #[test]
    fn air_round_trips(imsi in "[0-9]{6,15}", n in any::<u32>(), rand in any::<[u8; 16]>(), auts in any::<[u8; 14]>(), with in any::<bool>()) {
        let local = LocalIdentity::new("mme", "realm");
        let r = S6aRequest::AuthenticationInformation(AuthInfoRequest {
            imsi: imsi.parse().unwrap(),
            visited_plmn: "00101".parse().unwrap(),
            num_vectors: n,
            resync: with.then_some(ResyncInfo { rand, auts }),
        });
        let m = Message::parse(&encode_request(&r, &ctx(&local)).to_vec()).unwrap();
        prop_assert_eq!(decode_request(&m).unwrap(), r);
    }
}
