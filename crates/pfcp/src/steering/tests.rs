use super::*;
use crate::{decode, decode_view};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

const CP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

pub(crate) fn selective() -> Diversion {
    Diversion {
        ue: Ipv4Addr::new(10, 45, 0, 2),
        flow: Some(FlowFilter {
            protocol: Some(17),
            remote: Some((Ipv4Addr::new(192, 0, 2, 0), 24)),
            ue_ports: Some((5000, 5010)),
            remote_ports: Some((9000, 9000)),
        }),
        anchor: Ipv4Addr::new(198, 51, 100, 7),
        anchor_teid: Some(0x1234_5678),
        anchor_ue: Some(Ipv4Addr::new(10, 99, 0, 2)),
        origin: Ipv4Addr::new(203, 0, 113, 1),
    }
}

fn decoded(m: &[u8]) -> Result<Diversion, BadIe> {
    let (_, ies) = decode_view(m).expect("frames");
    decode_diversion(&ies)
}

#[test]
fn naive_and_selective_round_trip() {
    let naive = Diversion { flow: None, anchor_teid: None, anchor_ue: None, ..selective() };
    for d in [selective(), naive] {
        let m = establishment_request(7, CP, 0x99, CP, &d);
        let (h, ies) = decode(&m).expect("rs-pfcp reads it");
        assert_eq!((h.msg_type, h.seid, h.seq), (50, Some(0), 7));
        assert_eq!(ies.len(), 6);
        let (_, v) = decode_view(&m).unwrap();
        assert!(is_steering(&v));
        assert_eq!(decoded(&m), Ok(d));
        let m = modification_request(8, 0xabc, &d);
        assert_eq!(decoded(&m), Ok(d));
        assert_eq!(decode(&m).unwrap().0.seid, Some(0xabc));
    }
    let m = deletion_request(9, 0xabc);
    assert_eq!(decode(&m).unwrap().0, crate::PfcpHeader { version: 1, msg_type: 54, seid: Some(0xabc), seq: 9 });
}

#[test]
fn flow_descriptions_read_back() {
    let f = selective().flow.unwrap();
    assert_eq!(f.description(), "permit out 17 from 192.0.2.0/24 9000 to assigned 5000-5010");
    assert_eq!(FlowFilter::from_description(&f.description()), Some(f));
    let any = FlowFilter { protocol: None, remote: None, ue_ports: None, remote_ports: None };
    assert_eq!(any.description(), "permit out ip from any to assigned");
    assert_eq!(FlowFilter::from_description("permit out ip from any to 10.0.0.1"), None, "UE side is assigned");
}

/// An establishment request whose Create IEs are `f(create_ies)`.
fn with(f: impl FnOnce(&mut Vec<Ie>)) -> Vec<u8> {
    let mut ies = create_ies(&selective());
    f(&mut ies);
    encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 1, &ies)
}

/// Rebuilds the grouped IE `g` with its children filtered/changed.
fn regroup(g: &Ie, f: impl Fn(RawIe) -> Option<Ie>) -> Ie {
    let kids: Vec<Ie> = raw_ies(&g.payload).unwrap().into_iter().filter_map(f).collect();
    group(g.ie_type, &kids)
}

fn raw_to_ie(c: RawIe) -> Ie {
    match c.enterprise {
        Some(e) => Ie::new_vendor_specific(c.ie_type, e, c.payload.to_vec()).unwrap(),
        None => Ie::new(IeType::from(c.ie_type), c.payload.to_vec()),
    }
}

#[test]
fn bad_diversions_name_the_offending_ie() {
    let pdi = t(IeType::Pdi);
    let cases: Vec<(Vec<u8>, BadIe)> = vec![
        (with(|v| v.retain(|i| i.ie_type != IeType::CreateFar)), BadIe::missing(t(IeType::CreateFar))),
        (
            with(|v| {
                v.remove(1);
            }),
            BadIe::missing(t(IeType::CreatePdr)),
        ),
        (
            // The uplink PDI without its UE IP Address.
            with(|v| {
                v[0] = regroup(&v[0], |c| {
                    Some(match c.ie_type == pdi {
                        true => regroup(&raw_to_ie(c), |k| (k.ie_type != t(IeType::UeIpAddress)).then(|| raw_to_ie(k))),
                        false => raw_to_ie(c),
                    })
                })
            }),
            BadIe::missing(t(IeType::UeIpAddress)),
        ),
        (
            // An unreadable SDF filter.
            with(|v| {
                v[0] = regroup(&v[0], |c| {
                    Some(match c.ie_type == pdi {
                        true => regroup(&raw_to_ie(c), |k| {
                            Some(match k.ie_type == t(IeType::SdfFilter) {
                                true => Ie::new(IeType::SdfFilter, vec![1, 0, 0, 4, b'x', b'y', b'z', b'!']),
                                false => raw_to_ie(k),
                            })
                        }),
                        false => raw_to_ie(c),
                    })
                })
            }),
            BadIe::incorrect(t(IeType::SdfFilter)),
        ),
        (
            // The uplink FAR drops.
            with(|v| {
                v[2] = regroup(&v[2], |c| {
                    Some(match c.ie_type == t(IeType::ApplyAction) {
                        true => Ie::new(IeType::ApplyAction, vec![0x01, 0]),
                        false => raw_to_ie(c),
                    })
                })
            }),
            BadIe::incorrect(t(IeType::ApplyAction)),
        ),
        (
            // The downlink PDR for another address than the anchor's UE.
            with(|v| v[1] = create_ies(&Diversion { anchor_ue: None, ..selective() })[1].clone()),
            BadIe::incorrect(t(IeType::UeIpAddress)),
        ),
        (
            // The downlink FAR of another origin's diversion without translation.
            with(|v| v[3] = create_ies(&Diversion { anchor_ue: None, ..selective() })[3].clone()),
            BadIe::incorrect(IE_TRANSIT_REWRITE),
        ),
        (
            // The downlink PDR from another anchor.
            with(|v| v[1] = create_ies(&Diversion { anchor: Ipv4Addr::new(1, 2, 3, 4), ..selective() })[1].clone()),
            BadIe::incorrect(IE_TRANSIT_MATCH),
        ),
    ];
    for (i, (m, want)) in cases.into_iter().enumerate() {
        assert_eq!(decoded(&m), Err(want), "case {i}");
    }
    // A request without any steering IE is not a steering session.
    let plain = encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 1, &[]);
    assert!(!is_steering(&decode_view(&plain).unwrap().1));
    assert_eq!(decoded(&plain), Err(BadIe::missing(t(IeType::CreatePdr))));
}

fn addr() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from)
}

fn flow() -> impl Strategy<Value = FlowFilter> {
    let range = (any::<u16>(), any::<u16>()).prop_map(|(a, b)| (a.min(b), a.max(b)));
    (
        proptest::option::of(any::<u8>()),
        proptest::option::of((addr(), 0u8..=32)),
        proptest::option::of(range.clone()),
        proptest::option::of(range),
    )
        .prop_map(|(protocol, remote, ue_ports, remote_ports)| FlowFilter {
            protocol,
            remote,
            ue_ports,
            remote_ports,
        })
}

fn diversion() -> impl Strategy<Value = Diversion> {
    (
        addr(),
        proptest::option::of(flow()),
        addr(),
        proptest::option::of(any::<u32>()),
        proptest::option::of(addr()),
        addr(),
    )
        .prop_map(|(ue, flow, anchor, anchor_teid, anchor_ue, origin)| Diversion {
            ue,
            flow,
            anchor,
            anchor_teid,
            anchor_ue,
            origin,
        })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        rng_seed: RngSeed::Fixed(0x5743_4552),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Every diversion reads back from the three requests that carry it.
    #[test]
    fn every_diversion_round_trips(d in diversion(), seq in 0u32..0xff_ffff, seid in any::<u64>()) {
        prop_assert_eq!(decoded(&establishment_request(seq, CP, seid, CP, &d)), Ok(d));
        prop_assert_eq!(decoded(&modification_request(seq, seid, &d)), Ok(d));
    }

    /// Flipped or cut octets: an error or a diversion, never a panic.
    #[test]
    fn damaged_requests_never_panic(d in diversion(), at in any::<prop::sample::Index>(), x in any::<u8>(), cut in any::<bool>()) {
        let mut m = establishment_request(1, CP, 1, CP, &d);
        let i = 16 + at.index(m.len() - 16);
        if cut {
            m.truncate(i);
            let len = (m.len() - 4) as u16;
            m[2..4].copy_from_slice(&len.to_be_bytes());
        } else {
            m[i] ^= x | 1;
        }
        if let Ok((_, ies)) = decode_view(&m) {
            let _ = is_steering(&ies);
            let _ = decode_diversion(&ies);
        }
    }

    /// Random octets as a Create PDR / Create FAR: errors, never panics.
    #[test]
    fn garbage_groups_never_panic(a in prop::collection::vec(any::<u8>(), 0..80), b in prop::collection::vec(any::<u8>(), 0..80)) {
        let m = encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 1,
            &[Ie::new(IeType::CreatePdr, a.clone()), Ie::new(IeType::CreatePdr, b), Ie::new(IeType::CreateFar, a)]);
        if let Ok((_, ies)) = decode_view(&m) {
            prop_assert!(decode_diversion(&ies).is_err());
        }
    }
}
