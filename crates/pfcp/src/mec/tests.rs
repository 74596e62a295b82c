use super::*;
use crate::{decode, decode_view};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

const CP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

pub(crate) fn decap_rule() -> MecRule {
    MecRule {
        slice: Slice { interface: "s1u0".into(), vlan: 100 },
        flow: true,
        priority: 7,
        filters: vec![
            TrafficFilter {
                src: Some((Ipv4Addr::new(10, 45, 0, 0), 16)),
                dst: Some((Ipv4Addr::new(192, 0, 2, 10), 32)),
                dst_ports: Some((80, 80)),
                protocol: Some(6),
                dscp: Some(46),
                ..TrafficFilter::default()
            },
            TrafficFilter { teid: Some(0x1234), enb: Some(Ipv4Addr::new(10, 1, 0, 2)), ..TrafficFilter::default() },
        ],
        action: RuleAction::ForwardDecapsulated(Application { mac: [2, 0, 0, 0, 0, 9], interface: "mec0".into() }),
    }
}

fn decoded(m: &[u8]) -> Result<MecSession, BadIe> {
    let (_, ies) = decode_view(m).expect("frames");
    decode_mec(&ies)
}

#[test]
fn rules_and_ue_tunnels_round_trip() {
    let tun = Tunnel { addr: Ipv4Addr::new(198, 51, 100, 7), teid: 99 };
    let app = Application { mac: [2, 0, 0, 0, 0, 9], interface: "mec0".into() };
    let mut all: Vec<MecSession> = [
        RuleAction::Drop,
        RuleAction::ForwardDecapsulated(app.clone()),
        RuleAction::ForwardEncapsulated(tun),
        RuleAction::Passthrough,
        RuleAction::DuplicateDecapsulated(app),
        RuleAction::DuplicateEncapsulated(tun),
    ]
    .into_iter()
    .map(|action| MecSession::Rule(MecRule { action, ..decap_rule() }))
    .collect();
    let ue = UeTunnel {
        ue: Ipv4Addr::new(10, 45, 0, 2),
        enb: Ipv4Addr::new(10, 1, 0, 2),
        teid: 0x2000,
        origin: Ipv4Addr::new(10, 2, 0, 2),
    };
    all.push(MecSession::Ue(ue));
    for s in all {
        let m = establishment_request(7, CP, 0x99, CP, &s);
        let (h, ies) = decode(&m).expect("rs-pfcp reads it");
        assert_eq!((h.msg_type, h.seid, h.seq), (50, Some(0), 7));
        assert_eq!(ies.len(), 2 + pdr_count(&s) + 1);
        let (_, v) = decode_view(&m).unwrap();
        assert!(is_mec(&v) && !steering::is_steering(&v));
        assert_eq!(decoded(&m), Ok(s.clone()));
        let m = modification_request(8, 0xabc, 3, &s);
        assert_eq!(decoded(&m), Ok(s.clone()));
    }
    assert_eq!(
        decap_rule().filters[0].description(),
        "permit in 6 from 10.45.0.0/16 to 192.0.2.10/32 80",
        "as the packet travels"
    );
}

fn with(f: impl FnOnce(&mut Vec<Ie>)) -> Vec<u8> {
    let mut ies = create_ies(&MecSession::Rule(decap_rule()));
    f(&mut ies);
    encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 1, &ies)
}

#[test]
fn bad_rules_name_the_offending_ie() {
    let other = |r: MecRule| create_ies(&MecSession::Rule(r));
    let cases: Vec<(Vec<u8>, BadIe)> = vec![
        (with(|v| v.retain(|i| i.ie_type != IeType::CreateFar)), BadIe::missing(t(IeType::CreateFar))),
        (with(|v| v.retain(|i| i.ie_type != IeType::CreatePdr)), BadIe::missing(t(IeType::CreatePdr))),
        (
            // The second filter with another priority.
            with(|v| v[1] = other(MecRule { priority: 8, ..decap_rule() })[1].clone()),
            BadIe::incorrect(t(IeType::Precedence)),
        ),
        (
            // The second filter of another slice.
            with(|v| {
                let s = Slice { interface: "s1u0".into(), vlan: 200 };
                v[1] = other(MecRule { slice: s, ..decap_rule() })[1].clone()
            }),
            BadIe::incorrect(IE_MEC_MATCH),
        ),
        (
            // A decapsulating FAR behind PDRs without Outer Header Removal.
            with(|v| v[2] = other(MecRule { action: RuleAction::Passthrough, ..decap_rule() })[2].clone()),
            BadIe::incorrect(t(IeType::OuterHeaderRemoval)),
        ),
        (
            // Priority beyond 255.
            with(|v| {
                let p = Ie::new(IeType::Precedence, 256u32.to_be_bytes().to_vec());
                let kids: Vec<Ie> = raw_ies(&v[0].payload)
                    .unwrap()
                    .into_iter()
                    .map(|c| match c.ie_type == t(IeType::Precedence) {
                        true => p.clone(),
                        false => match c.enterprise {
                            Some(e) => Ie::new_vendor_specific(c.ie_type, e, c.payload.to_vec()).unwrap(),
                            None => Ie::new(IeType::from(c.ie_type), c.payload.to_vec()),
                        },
                    })
                    .collect();
                v[0] = group(IeType::CreatePdr, &kids);
            }),
            BadIe::incorrect(t(IeType::Precedence)),
        ),
    ];
    for (i, (m, want)) in cases.into_iter().enumerate() {
        assert_eq!(decoded(&m), Err(want), "case {i}");
    }
    let plain = encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 1, &[]);
    assert!(!is_mec(&decode_view(&plain).unwrap().1));
    assert_eq!(decoded(&plain), Err(BadIe::missing(t(IeType::CreatePdr))));
}

fn addr() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from)
}

fn filter() -> impl Strategy<Value = TrafficFilter> {
    let range = (any::<u16>(), any::<u16>()).prop_map(|(a, b)| (a.min(b), a.max(b)));
    let pfx = || proptest::option::of((addr(), 0u8..=32));
    (
        (pfx(), pfx()),
        (proptest::option::of(range.clone()), proptest::option::of(range)),
        (proptest::option::of(any::<u8>()), proptest::option::of(0u8..64)),
        (proptest::option::of(any::<u32>()), proptest::option::of(addr())),
    )
        .prop_map(|((src, dst), (src_ports, dst_ports), (protocol, dscp), (teid, enb))| TrafficFilter {
            src,
            dst,
            src_ports,
            dst_ports,
            protocol,
            dscp,
            teid,
            enb,
        })
}

fn ifname_s() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9.-]{0,14}"
}

fn action() -> impl Strategy<Value = RuleAction> {
    let app = || (any::<[u8; 6]>(), ifname_s()).prop_map(|(mac, interface)| Application { mac, interface });
    let tun = || (addr(), any::<u32>()).prop_map(|(addr, teid)| Tunnel { addr, teid });
    prop_oneof![
        Just(RuleAction::Drop),
        Just(RuleAction::Passthrough),
        app().prop_map(RuleAction::ForwardDecapsulated),
        tun().prop_map(RuleAction::ForwardEncapsulated),
        app().prop_map(RuleAction::DuplicateDecapsulated),
        tun().prop_map(RuleAction::DuplicateEncapsulated),
    ]
}

fn session() -> impl Strategy<Value = MecSession> {
    let rule = (
        ifname_s(),
        0u16..=4094,
        any::<bool>(),
        any::<u8>(),
        prop::collection::vec(filter(), 1..=MAX_FILTERS),
        action(),
    )
        .prop_map(|(interface, vlan, flow, priority, filters, action)| {
            MecSession::Rule(MecRule { slice: Slice { interface, vlan }, flow, priority, filters, action })
        });
    let ue = (addr(), addr(), any::<u32>(), addr())
        .prop_map(|(ue, enb, teid, origin)| MecSession::Ue(UeTunnel { ue, enb, teid, origin }));
    prop_oneof![4 => rule, 1 => ue]
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        rng_seed: RngSeed::Fixed(0x4d45_4331),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Every session reads back from both requests that carry it.
    #[test]
    fn every_mec_session_round_trips(s in session(), seq in 0u32..0xff_ffff, seid in any::<u64>()) {
        prop_assert_eq!(decoded(&establishment_request(seq, CP, seid, CP, &s)), Ok(s.clone()));
        prop_assert_eq!(decoded(&modification_request(seq, seid, 2, &s)), Ok(s));
    }

    /// Flipped or cut octets: an error or a session, never a panic.
    #[test]
    fn damaged_mec_requests_never_panic(s in session(), at in any::<prop::sample::Index>(), x in any::<u8>(), cut in any::<bool>()) {
        let mut m = establishment_request(1, CP, 1, CP, &s);
        let i = 16 + at.index(m.len() - 16);
        if cut {
            m.truncate(i);
            let len = (m.len() - 4) as u16;
            m[2..4].copy_from_slice(&len.to_be_bytes());
        } else {
            m[i] ^= x | 1;
        }
        if let Ok((_, ies)) = decode_view(&m) {
            let _ = is_mec(&ies);
            let _ = decode_mec(&ies);
        }
    }

    /// Random octets as Create PDR / Create FAR: errors, never panics.
    #[test]
    fn garbage_mec_groups_never_panic(a in prop::collection::vec(any::<u8>(), 0..80), b in prop::collection::vec(any::<u8>(), 0..80)) {
        let m = encode(msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), 1,
            &[Ie::new(IeType::CreatePdr, a.clone()), Ie::new(IeType::CreateFar, b)]);
        if let Ok((_, ies)) = decode_view(&m) {
            prop_assert!(decode_mec(&ies).is_err());
        }
    }
}
