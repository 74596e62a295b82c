//! Byte and property tests of the message `Repr`s.

use super::*;
use crate::wire::ie::*;
use mobicore_common::{Ambr, Arp, Ebi, Ecgi, Imsi, PdnType, Plmn, Tai};
use proptest::prelude::*;
use std::net::Ipv4Addr;

fn plmn() -> impl Strategy<Value = Plmn> {
    ("[0-9]{3}", "[0-9]{2,3}").prop_map(|(a, b)| Plmn::new(&a, &b).unwrap())
}
fn fteid() -> impl Strategy<Value = FteidIe> {
    (0u8..64, any::<u32>(), any::<u32>()).prop_map(|(i, t, a)| FteidIe::v4(i, t, Ipv4Addr::from(a)))
}
fn cause() -> impl Strategy<Value = CauseIe> {
    (any::<u8>(), 0u8..8, proptest::option::of((any::<u8>(), 0u8..16))).prop_map(|(value, flags, offending)| CauseIe {
        value,
        flags,
        offending,
    })
}
fn qos() -> impl Strategy<Value = BearerQos> {
    (0u8..16, any::<bool>(), any::<bool>(), any::<u8>(), [0u64..1 << 40, 0u64..1 << 40, 0u64..1 << 40, 0u64..1 << 40])
        .prop_map(|(pl, c, v, qci, r)| BearerQos {
            arp: Arp { priority_level: pl, pre_emption_capability: c, pre_emption_vulnerability: v },
            qci,
            mbr_ul: r[0],
            mbr_dl: r[1],
            gbr_ul: r[2],
            gbr_dl: r[3],
        })
}
fn ambr() -> impl Strategy<Value = Ambr> {
    (any::<u32>(), any::<u32>()).prop_map(|(u, d)| Ambr { uplink: u as u64 * 1000, downlink: d as u64 * 1000 })
}
fn uli() -> impl Strategy<Value = Uli> {
    (proptest::option::of((plmn(), any::<u16>())), proptest::option::of((plmn(), 0u32..1 << 28))).prop_map(|(t, e)| {
        Uli { tai: t.map(|(plmn, tac)| Tai { plmn, tac }), ecgi: e.map(|(plmn, eci)| Ecgi { plmn, eci }) }
    })
}
fn ebi() -> impl Strategy<Value = Ebi> {
    (0u8..16).prop_map(Ebi)
}
fn paa() -> impl Strategy<Value = Paa> {
    prop_oneof![
        any::<u32>().prop_map(|a| Paa::ipv4(Ipv4Addr::from(a))),
        (any::<u128>(), 0u8..=128).prop_map(|(b, l)| Paa {
            pdn_type: PdnType::Ipv6,
            ipv4: None,
            ipv6: Some((l, b.into()))
        }),
        (any::<u32>(), any::<u128>(), 0u8..=128).prop_map(|(a, b, l)| Paa {
            pdn_type: PdnType::Ipv4v6,
            ipv4: Some(Ipv4Addr::from(a)),
            ipv6: Some((l, b.into()))
        }),
    ]
}
fn throttling() -> impl Strategy<Value = ThrottlingIe> {
    (0u8..8, 0u8..32, any::<u8>()).prop_map(|(delay_unit, delay_value, factor)| ThrottlingIe {
        delay_unit,
        delay_value,
        factor,
    })
}
fn apn() -> impl Strategy<Value = String> {
    "[a-z0-9-]{1,12}(\\.[a-z0-9]{1,8}){0,3}"
}
fn digits() -> impl Strategy<Value = String> {
    "[0-9]{1,15}"
}
fn opt_bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::of(proptest::collection::vec(any::<u8>(), 1..5))
}

fn csr() -> impl Strategy<Value = CreateSessionRequest> {
    let bc = (ebi(), qos(), proptest::option::of(fteid()))
        .prop_map(|(ebi, bearer_qos, s1u_enb_fteid)| BearerContextToCreate { ebi, bearer_qos, s1u_enb_fteid });
    (
        (
            proptest::option::of("[0-9]{6,15}"),
            proptest::option::of(digits()),
            proptest::option::of(digits()),
            proptest::option::of(uli()),
        ),
        (proptest::option::of(plmn()), any::<u8>(), opt_bytes(), fteid(), proptest::option::of(fteid()), apn()),
        (
            proptest::option::of(0u8..4),
            proptest::option::of(prop_oneof![Just(PdnType::Ipv4), Just(PdnType::Ipv6), Just(PdnType::Ipv4v6)]),
            proptest::option::of(paa()),
            proptest::option::of(any::<u8>()),
        ),
        (
            proptest::option::of(ambr()),
            proptest::collection::vec(bc, 1..3),
            proptest::option::of(any::<u8>()),
            opt_bytes(),
            opt_bytes(),
        ),
    )
        .prop_map(
            |(
                (imsi, msisdn, mei, uli),
                (sn, rat, ind, sf, pf, apn),
                (sel, pdn, paa, restr),
                (ambr, bcs, rec, pco, epco),
            )| {
                CreateSessionRequest {
                    imsi: imsi.map(|s| s.parse::<Imsi>().unwrap()),
                    msisdn,
                    mei,
                    uli,
                    serving_network: sn,
                    rat_type: rat,
                    indication: ind,
                    sender_fteid: sf,
                    pgw_s5s8_fteid: pf,
                    apn,
                    selection_mode: sel,
                    pdn_type: pdn,
                    paa,
                    apn_restriction: restr,
                    apn_ambr: ambr,
                    pco,
                    bearer_contexts: bcs,
                    recovery: rec,
                    epco,
                }
            },
        )
}

fn csresp() -> impl Strategy<Value = CreateSessionResponse> {
    let bc =
        (
            ebi(),
            cause(),
            proptest::option::of(fteid()),
            proptest::option::of(fteid()),
            proptest::option::of(qos()),
            proptest::option::of(any::<u32>()),
        )
            .prop_map(|(ebi, cause, s1u_sgw_fteid, s5s8_pgw_fteid, bearer_qos, charging_id)| {
                BearerContextCreated { ebi, cause, s1u_sgw_fteid, s5s8_pgw_fteid, bearer_qos, charging_id }
            });
    (
        cause(),
        proptest::option::of(fteid()),
        proptest::option::of(fteid()),
        proptest::option::of(paa()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(ambr()),
        proptest::collection::vec(bc, 0..3),
        proptest::option::of(any::<u8>()),
        (opt_bytes(), opt_bytes()),
    )
        .prop_map(
            |(
                cause,
                sender_fteid,
                pgw_s5s8_fteid,
                paa,
                apn_restriction,
                apn_ambr,
                bearer_contexts,
                recovery,
                (pco, epco),
            )| {
                CreateSessionResponse {
                    cause,
                    sender_fteid,
                    pgw_s5s8_fteid,
                    paa,
                    apn_restriction,
                    apn_ambr,
                    pco,
                    bearer_contexts,
                    recovery,
                    epco,
                }
            },
        )
}

fn any_message() -> impl Strategy<Value = Message> {
    let mbr_bc = (ebi(), proptest::option::of(fteid()))
        .prop_map(|(ebi, s1u_enb_fteid)| BearerContextToModify { ebi, s1u_enb_fteid });
    let mbresp_bc = (ebi(), cause(), proptest::option::of(fteid()))
        .prop_map(|(ebi, cause, s1u_sgw_fteid)| BearerContextModified { ebi, cause, s1u_sgw_fteid });
    let cause_only = || {
        (cause(), proptest::option::of(any::<u8>())).prop_map(|(cause, recovery)| CauseOnlyResponse { cause, recovery })
    };
    prop_oneof![
        any::<u8>().prop_map(|recovery| Message::EchoRequest(Echo { recovery })),
        any::<u8>().prop_map(|recovery| Message::EchoResponse(Echo { recovery })),
        Just(Message::VersionNotSupported),
        csr().prop_map(Message::CreateSessionRequest),
        csresp().prop_map(Message::CreateSessionResponse),
        (
            opt_bytes(),
            proptest::option::of(uli()),
            proptest::option::of(plmn()),
            proptest::option::of(any::<u8>()),
            proptest::option::of(fteid()),
            proptest::collection::vec(mbr_bc, 0..3),
            proptest::option::of(any::<u8>())
        )
            .prop_map(
                |(indication, uli, serving_network, rat_type, sender_fteid, bearer_contexts, recovery)| {
                    Message::ModifyBearerRequest(ModifyBearerRequest {
                        indication,
                        uli,
                        serving_network,
                        rat_type,
                        sender_fteid,
                        bearer_contexts,
                        recovery,
                    })
                }
            ),
        (
            cause(),
            proptest::option::of(digits()),
            proptest::collection::vec(mbresp_bc, 0..3),
            proptest::option::of(any::<u8>())
        )
            .prop_map(|(cause, msisdn, bearer_contexts, recovery)| Message::ModifyBearerResponse(
                ModifyBearerResponse { cause, msisdn, bearer_contexts, recovery }
            )),
        (proptest::option::of(ebi()), proptest::option::of(uli()), opt_bytes()).prop_map(
            |(linked_ebi, uli, indication)| Message::DeleteSessionRequest(DeleteSessionRequest {
                linked_ebi,
                uli,
                indication
            })
        ),
        cause_only().prop_map(Message::DeleteSessionResponse),
        opt_bytes()
            .prop_map(|indication| Message::ReleaseAccessBearersRequest(ReleaseAccessBearersRequest { indication })),
        cause_only().prop_map(Message::ReleaseAccessBearersResponse),
        (proptest::option::of(fteid()), proptest::collection::vec(fwd_bc(), 1..3), proptest::option::of(any::<u8>()))
            .prop_map(|(sender_fteid, bearer_contexts, recovery)| {
                Message::CreateIndirectDataForwardingTunnelRequest(CreateIndirectDataForwardingTunnelRequest {
                    sender_fteid,
                    bearer_contexts,
                    recovery,
                })
            }),
        (
            cause(),
            proptest::option::of(fteid()),
            proptest::collection::vec(fwd_bc(), 0..3),
            proptest::option::of(any::<u8>())
        )
            .prop_map(|(cause, sender_fteid, bearer_contexts, recovery)| {
                Message::CreateIndirectDataForwardingTunnelResponse(CreateIndirectDataForwardingTunnelResponse {
                    cause,
                    sender_fteid,
                    bearer_contexts,
                    recovery,
                })
            }),
        Just(Message::DeleteIndirectDataForwardingTunnelRequest),
        cause_only().prop_map(Message::DeleteIndirectDataForwardingTunnelResponse),
        (
            proptest::option::of(cause()),
            proptest::option::of(ebi()),
            proptest::option::of(qos().prop_map(|q| q.arp)),
            proptest::option::of(fteid())
        )
            .prop_map(|(cause, ebi, arp, sender_fteid)| Message::DownlinkDataNotification(
                DownlinkDataNotification { cause, ebi, arp, sender_fteid }
            )),
        (
            cause(),
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u16>()),
            proptest::option::of(throttling())
        )
            .prop_map(
                |(cause, delay, recovery, dl_buffering_duration, dl_buffering_suggested_packets, throttling)| {
                    Message::DownlinkDataNotificationAck(DownlinkDataNotificationAck {
                        cause,
                        delay,
                        recovery,
                        dl_buffering_duration,
                        dl_buffering_suggested_packets,
                        throttling,
                    })
                }
            ),
        cause().prop_map(|cause| Message::DownlinkDataNotificationFailureIndication(
            DownlinkDataNotificationFailureIndication { cause }
        )),
    ]
}

fn fwd_bc() -> impl Strategy<Value = ForwardingBearerContext> {
    (ebi(), proptest::option::of(cause()), proptest::option::of(fteid()), proptest::option::of(fteid())).prop_map(
        |(ebi, cause, enb_dl_fteid, sgw_dl_fteid)| ForwardingBearerContext { ebi, cause, enb_dl_fteid, sgw_dl_fteid },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_on_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = GtpMessage::parse(&b);
    }

    #[test]
    fn never_panics_on_valid_header_arbitrary_body(t in any::<u8>(), body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut b = vec![0x48, t, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0];
        b.extend_from_slice(&body);
        let l = (b.len() - 4) as u16;
        b[2..4].copy_from_slice(&l.to_be_bytes());
        let _ = GtpMessage::parse(&b);
    }

    #[test]
    fn emit_then_parse_round_trips(body in any_message(), teid in any::<u32>(), seq in 0u32..1 << 24) {
        let is_echo = matches!(body, Message::EchoRequest(_) | Message::EchoResponse(_) | Message::VersionNotSupported);
        let msg = GtpMessage { teid: if is_echo { None } else { Some(teid) }, seq, body };
        let bytes = msg.to_bytes();
        prop_assert_eq!(bytes.len(), msg.buffer_len());
        prop_assert_eq!(GtpMessage::parse(&bytes).map_err(|e| e.1), Ok(msg));
    }

    #[test]
    fn truncation_never_panics(body in any_message(), cut in 0usize..400) {
        let bytes = GtpMessage { teid: Some(1), seq: 1, body }.to_bytes();
        let _ = GtpMessage::parse(&bytes[..cut.min(bytes.len())]);
    }
}

fn sample_csr() -> CreateSessionRequest {
    CreateSessionRequest {
        imsi: Some("001010000000001".parse().unwrap()),
        msisdn: None,
        mei: None,
        uli: None,
        serving_network: None,
        rat_type: 6,
        indication: None,
        sender_fteid: FteidIe::v4(10, 1, Ipv4Addr::LOCALHOST),
        pgw_s5s8_fteid: None,
        apn: "internet".into(),
        selection_mode: None,
        pdn_type: None,
        paa: None,
        apn_restriction: None,
        apn_ambr: None,
        pco: None,
        bearer_contexts: vec![BearerContextToCreate {
            ebi: Ebi(5),
            bearer_qos: BearerQos::new(9, Arp::default()),
            s1u_enb_fteid: None,
        }],
        recovery: None,
        epco: None,
    }
}

#[test]
fn unknown_ie_is_skipped() {
    let msg = GtpMessage { teid: Some(0), seq: 3, body: Message::CreateSessionRequest(sample_csr()) };
    let mut bytes = msg.to_bytes();
    // An IE type we do not know (TS 29.274 7.7.8), placed in the middle.
    bytes.extend_from_slice(&[250, 0, 3, 0, 1, 2, 3]);
    let l = (bytes.len() - 4) as u16;
    bytes[2..4].copy_from_slice(&l.to_be_bytes());
    assert_eq!(GtpMessage::parse(&bytes).unwrap(), msg);
}

#[test]
fn missing_mandatory_ie_is_reported_with_header() {
    let msg = GtpMessage { teid: Some(0), seq: 9, body: Message::CreateSessionRequest(sample_csr()) };
    let bytes = msg.to_bytes();
    // Remove the Sender F-TEID (type 87 instance 0).
    let mut out = bytes[..12].to_vec();
    for ie in IeIter::new(&bytes[12..]) {
        let ie = ie.unwrap();
        if ie.ie_type != ie_type::FTEID {
            put_ie(&mut out, ie.ie_type, ie.instance, |b| b.extend_from_slice(ie.value));
        }
    }
    let l = (out.len() - 4) as u16;
    out[2..4].copy_from_slice(&l.to_be_bytes());
    let (h, e) = GtpMessage::parse(&out).unwrap_err();
    assert_eq!(e, MessageError::MissingIe { ie_type: 87, instance: 0 });
    let h = h.unwrap();
    assert_eq!((h.msg_type, h.seq), (msg_type::CREATE_SESSION_REQUEST, 9));
    let rej = reject(h.msg_type, 0x55, h.seq, e.cause().unwrap().0, e.offending_ie()).unwrap();
    let Message::CreateSessionResponse(r) = &rej.body else { panic!() };
    assert_eq!(r.cause, CauseIe { value: 70, flags: 0, offending: Some((87, 0)) });
    assert_eq!(rej.teid, Some(0x55));
}

#[test]
fn an_ie_running_past_the_message_has_an_invalid_length() {
    let bytes = [0x48, 32, 0, 12, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 8, 0];
    let (h, e) = GtpMessage::parse(&bytes).unwrap_err();
    assert_eq!(e, MessageError::InvalidLength { ie_type: 1, instance: 0 });
    assert_eq!(e.cause(), Some(mobicore_common::s11::GtpCause::INVALID_LENGTH));
    let rej = reject(h.unwrap().msg_type, 0, 1, e.cause().unwrap().0, e.offending_ie()).unwrap();
    let Message::CreateSessionResponse(r) = &rej.body else { panic!() };
    assert_eq!(r.cause, CauseIe { value: 67, flags: 0, offending: Some((1, 0)) });
    // Inside a grouped IE too: the Bearer Context's EBI runs past it.
    let mut body = vec![];
    put_ie(&mut body, ie_type::BEARER_CONTEXT, 0, |b| b.extend_from_slice(&[73, 0, 9, 0, 5]));
    assert_eq!(
        Message::parse(msg_type::CREATE_SESSION_REQUEST, &body).unwrap_err(),
        MessageError::InvalidLength { ie_type: 73, instance: 0 }
    );
    // Less than an IE header left: malformed, dropped.
    assert!(matches!(
        GtpMessage::parse(&[0x48, 32, 0, 10, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0]),
        Err((Some(_), MessageError::Malformed(_)))
    ));
}

#[test]
fn other_gtp_versions_get_version_not_supported() {
    // GTPv1-C Echo Request with the S flag: sequence number 0x1234.
    let v1 = [0x32, 1, 0, 4, 0, 0, 0, 0, 0x12, 0x34, 0, 0];
    let m = version_not_supported(&v1).unwrap();
    assert_eq!(m.to_bytes(), [0x40, 3, 0, 4, 0x00, 0x12, 0x34, 0]);
    assert_eq!(GtpMessage::parse(&m.to_bytes()).unwrap().body, Message::VersionNotSupported);
    // Version 3 laid out as GTPv2-C with a TEID.
    let v3 = [0x68, 32, 0, 8, 1, 2, 3, 4, 0xa, 0xb, 0xc, 0];
    assert_eq!(version_not_supported(&v3).unwrap().seq, 0x0a0b0c);
    // GTPv2-C, a too-short datagram, and the indication itself: nothing.
    assert!(version_not_supported(&m.to_bytes()).is_none());
    assert!(version_not_supported(&v1[..7]).is_none());
    assert!(version_not_supported(&[0x30, 3, 0, 4, 0, 0, 0, 0]).is_none());
}

#[test]
fn echo_request_bytes() {
    let m = GtpMessage { teid: None, seq: 1, body: Message::EchoRequest(Echo { recovery: 7 }) };
    assert_eq!(m.to_bytes(), [0x40, 1, 0, 9, 0, 0, 1, 0, 3, 0, 1, 0, 7]);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x7468_726f),
        ..ProptestConfig::default()
    })]

    /// TS 29.274 8.85: any unit, value and factor goes through the wire
    /// unchanged, as the two octets of the clause.
    #[test]
    fn throttling_ie_round_trips(t in throttling()) {
        let mut b = vec![];
        t.emit(&mut b);
        prop_assert_eq!(b.clone(), vec![(t.delay_unit << 5) | t.delay_value, t.factor]);
        prop_assert_eq!(ThrottlingIe::parse(&b), Ok(t));
    }

    /// A delay in seconds is coded in the finest unit that holds it,
    /// rounded up, and reads back as at least what was asked.
    #[test]
    fn throttling_delay_is_the_finest_unit_rounded_up(secs in 0u32..=31 * 36_000, factor in 0u8..=100) {
        let t = ThrottlingIe::new(secs, factor);
        let back = t.delay_seconds().unwrap();
        prop_assert!(back >= secs);
        let unit = [2, 60, 600, 3600, 36_000][usize::from(t.delay_unit)];
        prop_assert!(back - secs < unit, "{secs} s coded as {back} s");
        prop_assert_eq!(t.factor_percent(), factor);
    }
}

#[test]
fn throttling_ie_bytes_and_units() {
    // 8.85: unit 001 (1 minute) value 3, factor 50 percent.
    let t = ThrottlingIe::parse(&[0x23, 50]).unwrap();
    assert_eq!((t.delay_unit, t.delay_value, t.delay_seconds(), t.factor_percent()), (1, 3, Some(180), 50));
    assert_eq!(ThrottlingIe::new(180, 50), t);
    assert_eq!(ThrottlingIe::new(10, 100), ThrottlingIe { delay_unit: 0, delay_value: 5, factor: 100 });
    // 111: the timer is deactivated; undefined units read as 1 minute.
    assert_eq!(ThrottlingIe::parse(&[0xe5, 10]).unwrap().delay_seconds(), None);
    assert_eq!(ThrottlingIe::parse(&[0xa2, 10]).unwrap().delay_seconds(), Some(120));
}

#[test]
fn malformed_throttling_ie_is_refused_or_read_as_the_clause_says() {
    // Fewer than two octets: an error, never a panic.
    assert_eq!(ThrottlingIe::parse(&[]), Err(crate::wire::Error::Truncated));
    assert_eq!(ThrottlingIe::parse(&[0x23]), Err(crate::wire::Error::Truncated));
    // A factor above 100 reads as 0 percent.
    assert_eq!(ThrottlingIe::parse(&[0x23, 101]).unwrap().factor_percent(), 0);
    assert_eq!(ThrottlingIe::parse(&[0x23, 255]).unwrap().factor_percent(), 0);
    // In a DDN Acknowledge, a truncated optional Throttling IE is ignored
    // (7.7.7): the Acknowledge itself still reads, without throttling.
    let ack = Message::DownlinkDataNotificationAck(DownlinkDataNotificationAck::rejected(CauseIe::new(16)));
    let mut bytes = GtpMessage { teid: Some(1), seq: 7, body: ack.clone() }.to_bytes();
    put_ie(&mut bytes, ie_type::THROTTLING, 0, |b| b.push(0x23));
    let l = (bytes.len() - 4) as u16;
    bytes[2..4].copy_from_slice(&l.to_be_bytes());
    let m = GtpMessage::parse(&bytes).unwrap();
    assert_eq!(m.body, ack);
    // An IE whose length runs past the message: the message is refused.
    let mut bad = GtpMessage { teid: Some(1), seq: 7, body: ack }.to_bytes();
    bad.extend_from_slice(&[ie_type::THROTTLING, 0, 9, 0, 0x23, 50]);
    let l = (bad.len() - 4) as u16;
    bad[2..4].copy_from_slice(&l.to_be_bytes());
    assert!(GtpMessage::parse(&bad).is_err());
}
