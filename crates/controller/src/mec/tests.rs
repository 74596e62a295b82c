use super::*;
use proptest::prelude::*;

fn rule(id: &str, priority: u8, src: &str, dport: Option<&str>, action: Action) -> TrafficRule {
    let dst_interface = match action {
        Action::ForwardDecapsulated | Action::DuplicateDecapsulated => Some(vec![DestinationInterface {
            interface_type: InterfaceType::Ip,
            tunnel_info: None,
            src_mac_address: None,
            dst_mac_address: Some("02:00:00:00:00:01".into()),
            dst_ip_address: Some("10.210.0.2".into()),
        }]),
        _ => None,
    };
    TrafficRule {
        traffic_rule_id: id.into(),
        filter_type: FilterType::Flow,
        priority,
        traffic_filter: vec![TrafficFilter {
            src_address: Some(vec![src.into()]),
            dst_port: dport.map(|p| vec![p.into()]),
            protocol: Some(vec!["UDP".into()]),
            ..TrafficFilter::default()
        }],
        action,
        dst_interface,
        state: RuleState::Active,
    }
}

fn routers() -> MecRouters {
    MecRouters::new(&["mec1".into(), "mec2".into()], 3)
}

#[test]
fn overlapping_rules_are_resolved_by_priority_and_reported() {
    let mut m = routers();
    let a = m.put("mec1", rule("a", 10, "10.44.0.0/16", None, Action::ForwardDecapsulated), false).unwrap();
    assert!(a.overlaps.is_empty());
    // Inside a's prefix, higher priority (lower value): it wins.
    let b = m.put("mec1", rule("b", 1, "10.44.3.7", Some("5000-5010"), Action::Drop), false).unwrap();
    assert_eq!(b.overlaps, vec![Overlap { traffic_rule_id: "a".into(), winner: "b".into() }]);
    // Disjoint: no overlap reported.
    let c = m.put("mec1", rule("c", 10, "10.45.0.0/16", None, Action::Passthrough), false).unwrap();
    assert!(c.overlaps.is_empty());
    // Same priority and overlapping: refused, nothing changed.
    let e = m.put("mec1", rule("c", 10, "10.44.9.9", None, Action::Passthrough), true).unwrap_err();
    assert!(matches!(e, RuleError::Conflict(ref s) if s.contains("same priority")), "{e}");
    assert_eq!(m.rule("mec1", "c").unwrap().traffic_filter[0].src_address, Some(vec!["10.45.0.0/16".into()]));
    // Routers are separate slices.
    assert!(m.rules("mec2").unwrap().is_empty());
    assert!(m.put("mec2", rule("a", 10, "10.44.0.0/16", None, Action::Drop), false).is_ok());
}

#[test]
fn bad_rules_say_what_is_wrong_and_change_nothing() {
    let mut m = routers();
    let mut r = rule("x", 1, "10.44.0.1", None, Action::ForwardDecapsulated);
    r.dst_interface = None;
    assert!(matches!(m.put("mec1", r, false), Err(RuleError::Invalid(s)) if s.contains("dstIpAddress")));
    for bad in ["10.44.0.300", "10.44.0.0/33", "host"] {
        let e = m.put("mec1", rule("x", 1, bad, None, Action::Drop), false).unwrap_err();
        assert!(matches!(e, RuleError::Invalid(ref s) if s.contains("srcAddress")), "{bad}: {e}");
    }
    for bad in ["70000", "9-3", "x"] {
        let e = m.put("mec1", rule("x", 1, "10.44.0.1", Some(bad), Action::Drop), false).unwrap_err();
        assert!(matches!(e, RuleError::Invalid(ref s) if s.contains("dstPort")), "{bad}: {e}");
    }
    let e = m.put("mec1", rule("bad id!", 1, "10.44.0.1", None, Action::Drop), false).unwrap_err();
    assert!(matches!(e, RuleError::Invalid(_)));
    let mut enc = rule("e", 1, "10.44.0.1", None, Action::ForwardEncapsulated);
    enc.dst_interface = None;
    assert!(matches!(m.put("mec1", enc, false), Err(RuleError::Invalid(s)) if s.contains("TUNNEL")));
    assert!(matches!(
        m.put("mars", rule("x", 1, "10.44.0.1", None, Action::Drop), false),
        Err(RuleError::UnknownRouter(_))
    ));
    assert!(m.rules("mec1").unwrap().is_empty(), "nothing stored");
}

#[test]
fn ids_are_unique_updates_need_the_rule_and_the_bound_holds() {
    let mut m = routers();
    for (i, net) in ["10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16"].iter().enumerate() {
        m.put("mec1", rule(&format!("r{i}"), 5, net, None, Action::Drop), false).unwrap();
    }
    assert!(matches!(
        m.put("mec1", rule("r0", 5, "10.9.0.0/16", None, Action::Drop), false),
        Err(RuleError::Conflict(_))
    ));
    let e = m.put("mec1", rule("r9", 5, "10.9.0.0/16", None, Action::Drop), false).unwrap_err();
    assert!(matches!(e, RuleError::Conflict(ref s) if s.contains("bound")), "{e}");
    assert!(matches!(
        m.put("mec1", rule("r9", 5, "10.9.0.0/16", None, Action::Drop), true),
        Err(RuleError::UnknownRule(_))
    ));
    // An update of an existing rule is not counted against the bound.
    let mut r = rule("r1", 5, "10.2.0.0/16", None, Action::Drop);
    r.state = RuleState::Inactive;
    assert_eq!(m.put("mec1", r, true).unwrap().rule.state, RuleState::Inactive);
    assert_eq!(m.delete("mec1", "r1").unwrap().traffic_rule_id, "r1");
    assert!(matches!(m.delete("mec1", "r1"), Err(RuleError::UnknownRule(_))));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(0x6d6563), ..ProptestConfig::default() })]

    #[test]
    fn overlap_is_symmetric_and_a_filter_overlaps_itself(
        a in (any::<u32>(), 0u8..=32, 0u16..2000, 0u16..2000),
        b in (any::<u32>(), 0u8..=32, 0u16..2000, 0u16..2000),
    ) {
        let f = |(addr, len, p, q): (u32, u8, u16, u16)| parse_filter(&TrafficFilter {
            src_address: Some(vec![format!("{}/{len}", Ipv4Addr::from(addr))]),
            dst_port: Some(vec![format!("{}-{}", p.min(q), p.max(q))]),
            ..TrafficFilter::default()
        }).unwrap();
        let (x, y) = (f(a), f(b));
        prop_assert_eq!(filters_overlap(&x, &y), filters_overlap(&y, &x));
        prop_assert!(filters_overlap(&x, &x));
    }

    #[test]
    fn any_json_is_a_rule_or_an_error(s in ".{0,200}") {
        let _ = serde_json::from_str::<TrafficRule>(&s);
    }
}

/// A rule to one destination (exact or a prefix) and port.
fn to_dst(id: &str, priority: u8, dst: &str, port: u16) -> TrafficRule {
    let mut r = rule(id, priority, "0.0.0.0/0", Some(&port.to_string()), Action::Drop);
    r.traffic_filter[0].src_address = None;
    r.traffic_filter[0].dst_address = Some(vec![dst.into()]);
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, rng_seed: proptest::test_runner::RngSeed::Fixed(0x696478), ..ProptestConfig::default() })]

    /// The destination index finds exactly the overlaps reading every rule finds.
    #[test]
    fn the_index_answers_as_a_full_scan(
        rules in proptest::collection::vec((0u8..8, prop_oneof![Just(32u8), Just(30u8), Just(0u8)], 0u16..3, 0u8..4, any::<bool>()), 1..40),
    ) {
        let mut m = MecRouters::new(&["mec1".into()], 1000);
        let mut kept: Vec<TrafficRule> = Vec::new();
        for (i, (host, len, port, prio, active)) in rules.into_iter().enumerate() {
            let mut r = to_dst(&format!("r{i}"), prio, &format!("10.9.0.{host}/{len}"), port);
            if !active {
                r.state = RuleState::Inactive;
            }
            let scan: Vec<&TrafficRule> = kept
                .iter()
                .filter(|o| o.state == RuleState::Active && r.state == RuleState::Active)
                .filter(|o| rules_overlap(&validate(&r).unwrap(), &validate(o).unwrap()))
                .collect();
            match m.put("mec1", r.clone(), false) {
                Ok(a) => {
                    prop_assert!(scan.iter().all(|o| o.priority != r.priority));
                    let mut got: Vec<&str> = a.overlaps.iter().map(|o| o.traffic_rule_id.as_str()).collect();
                    let mut want: Vec<&str> = scan.iter().map(|o| o.traffic_rule_id.as_str()).collect();
                    got.sort_unstable();
                    want.sort_unstable();
                    prop_assert_eq!(got, want);
                    kept.push(r);
                }
                Err(RuleError::Conflict(_)) => prop_assert!(scan.iter().any(|o| o.priority == r.priority)),
                Err(e) => prop_assert!(false, "{e}"),
            }
        }
        // Deleting keeps the index right: a rule equal to a deleted one fits again.
        if let Some(first) = kept.first().cloned() {
            m.delete("mec1", &first.traffic_rule_id).unwrap();
            let again = TrafficRule { traffic_rule_id: "again".into(), ..first };
            let clash = kept[1..].iter().any(|o| {
                o.state == RuleState::Active
                    && again.state == RuleState::Active
                    && o.priority == again.priority
                    && rules_overlap(&validate(&again).unwrap(), &validate(o).unwrap())
            });
            prop_assert_eq!(m.put("mec1", again, false).is_ok(), !clash);
        }
    }
}

#[test]
fn a_router_holds_120000_exact_rules() {
    // Seed 001's Tofino figure; each rule checked against its own
    // destination's rules only (the full scan took minutes).
    let mut m = MecRouters::new(&["mec1".into()], 120_000);
    for i in 0..120_000u32 {
        let dst = Ipv4Addr::from(0x0a80_0000 + i);
        let a = m.put("mec1", to_dst(&format!("r{i}"), 5, &dst.to_string(), 80), false).unwrap();
        assert!(a.overlaps.is_empty());
    }
    assert!(matches!(m.put("mec1", to_dst("one-more", 5, "10.9.9.9", 80), false), Err(RuleError::Conflict(_))));
    let wide = to_dst("wide", 5, "10.128.0.0/24", 80);
    assert!(matches!(m.put("mec1", wide, true), Err(RuleError::UnknownRule(_))));
    m.delete("mec1", "r0").unwrap();
    let wide = to_dst("wide", 4, "10.128.0.0/24", 80);
    let a = m.put("mec1", wide, false).unwrap();
    assert_eq!(a.overlaps.len(), 255, "r1..r255 in the /24");
}
