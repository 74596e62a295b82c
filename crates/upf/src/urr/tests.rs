//! The usage engine under a virtual clock: every trigger, inactivity,
//! quota stop and re-grant, UR-SEQN, and properties over arbitrary count
//! sequences. No sockets, no sleeps.

use super::pfcp::{grouped_urr_id, ntp_seconds};
use super::*;
use crate::rules::{PacketDetection, Pdr, Urr, VolumeLimit};
use proptest::prelude::*;
use std::time::Duration;

const SEID: u64 = 7;

fn urr(id: u32) -> Urr {
    Urr { id, measure_volume: true, measure_duration: true, ..Default::default() }
}

fn total(octets: u64) -> Option<VolumeLimit> {
    Some(VolumeLimit { total: Some(octets), ..Default::default() })
}

fn ul(octets: u64, packets: u64) -> UsageCounts {
    UsageCounts { ul_octets: octets, ul_packets: packets, ..Default::default() }
}

struct Clock(Instant);

impl Clock {
    fn at(&self, secs: u64) -> Instant {
        self.0 + Duration::from_secs(secs)
    }
}

fn engine() -> (UsageEngine, Clock) {
    (UsageEngine::new(Duration::from_secs(1)), Clock(Instant::now()))
}

fn events(e: &mut UsageEngine) -> Vec<UsageEvent> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

fn reports(e: &mut UsageEngine) -> Vec<UsageMeasurement> {
    events(e)
        .into_iter()
        .filter_map(|v| match v {
            UsageEvent::Report { usage, .. } => Some(usage),
            _ => None,
        })
        .collect()
}

#[test]
fn volume_threshold_reports_the_measurement_since_the_last_report() {
    let (mut e, c) = engine();
    let mut u = urr(1);
    u.triggers.volth = true;
    u.volume_threshold = total(100);
    e.install(c.at(0), SEID, &u, Some(ul(1000, 10)));
    assert_eq!(e.sampled(), 1);
    assert_eq!(e.poll_timeout(), Some(c.at(1)));
    e.handle_timeout(c.at(1), |_, _| Some(ul(1060, 11)));
    assert!(reports(&mut e).is_empty(), "60 of 100");
    e.handle_timeout(c.at(2), |_, _| Some(ul(1120, 12)));
    let r = reports(&mut e);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].urr_id, r[0].seqn, r[0].trigger), (1, 0, UsageTrigger::VOLTH));
    assert_eq!((r[0].uplink_octets, r[0].uplink_packets, r[0].downlink_octets), (120, 2, 0));
    assert_eq!((r[0].start, r[0].end, r[0].duration_secs), (c.at(0), c.at(2), 2));
    e.handle_timeout(c.at(3), |_, _| Some(ul(1250, 14)));
    let r = reports(&mut e);
    assert_eq!((r[0].seqn, r[0].uplink_octets, r[0].start), (1, 130, c.at(2)));
}

#[test]
fn volume_threshold_is_not_reported_unless_volth_is_enabled() {
    let (mut e, c) = engine();
    let mut u = urr(1);
    u.volume_threshold = total(100);
    e.install(c.at(0), SEID, &u, None);
    assert_eq!(e.sampled(), 0, "nothing to sample");
    assert_eq!(e.poll_timeout(), None);
}

#[test]
fn volume_quota_stops_forwarding_until_a_new_quota() {
    let (mut e, c) = engine();
    let mut u = urr(2);
    u.triggers.volqu = true;
    u.triggers.volth = true;
    u.volume_threshold = total(100);
    u.volume_quota = total(250);
    e.install(c.at(0), SEID, &u, None);
    e.handle_timeout(c.at(1), |_, _| Some(ul(150, 3)));
    assert_eq!(reports(&mut e)[0].trigger, UsageTrigger::VOLTH);
    assert!(e.exhausted(SEID).is_empty(), "the quota counts across reports: 150 of 250");
    e.handle_timeout(c.at(2), |_, _| Some(ul(260, 5)));
    let ev = events(&mut e);
    assert_eq!(ev[0], UsageEvent::Quota { up_seid: SEID, urr_id: 2, exhausted: true });
    match &ev[1] {
        UsageEvent::Report { usage, .. } => {
            assert_eq!(usage.trigger, UsageTrigger::VOLTH | UsageTrigger::VOLQU);
            assert_eq!((usage.seqn, usage.uplink_octets), (1, 110));
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(e.exhausted(SEID), vec![2]);
    // Still exhausted: no second quota event.
    e.handle_timeout(c.at(3), |_, _| Some(ul(260, 5)));
    assert!(events(&mut e).is_empty());
    // Update URR with a new Volume Quota.
    u.volume_quota = total(50);
    e.update(c.at(4), SEID, &u, Regrant { volume: true, time: false }, Some(ul(260, 5)));
    assert_eq!(events(&mut e), vec![UsageEvent::Quota { up_seid: SEID, urr_id: 2, exhausted: false }]);
    assert!(e.exhausted(SEID).is_empty());
    e.handle_timeout(c.at(5), |_, _| Some(ul(300, 6)));
    assert!(e.exhausted(SEID).is_empty(), "40 of the new 50");
    e.handle_timeout(c.at(6), |_, _| Some(ul(320, 7)));
    assert_eq!(e.exhausted(SEID), vec![2]);
}

#[test]
fn quota_without_volqu_stops_silently() {
    let (mut e, c) = engine();
    let mut u = urr(3);
    u.volume_quota = total(10);
    e.install(c.at(0), SEID, &u, None);
    e.handle_timeout(c.at(1), |_, _| Some(ul(20, 1)));
    assert_eq!(events(&mut e), vec![UsageEvent::Quota { up_seid: SEID, urr_id: 3, exhausted: true }]);
}

#[test]
fn time_threshold_is_a_deadline_not_a_sample() {
    let (mut e, c) = engine();
    let mut u = urr(4);
    u.triggers.timth = true;
    u.time_threshold = Some(10);
    e.install(c.at(0), SEID, &u, None);
    assert_eq!(e.sampled(), 0);
    assert_eq!(e.poll_timeout(), Some(c.at(10)));
    let mut reads = 0;
    e.handle_timeout(c.at(10), |_, _| {
        reads += 1;
        Some(ul(42, 1))
    });
    assert_eq!(reads, 1);
    let r = reports(&mut e);
    assert_eq!((r[0].trigger, r[0].duration_secs, r[0].uplink_octets), (UsageTrigger::TIMTH, 10, 42));
    assert_eq!(e.poll_timeout(), Some(c.at(20)));
}

#[test]
fn time_quota_exhausts_and_is_granted_again() {
    let (mut e, c) = engine();
    let mut u = urr(5);
    u.triggers.timqu = true;
    u.time_quota = Some(5);
    e.install(c.at(0), SEID, &u, None);
    assert_eq!(e.poll_timeout(), Some(c.at(5)));
    e.handle_timeout(c.at(5), |_, _| None);
    let ev = events(&mut e);
    assert_eq!(ev[0], UsageEvent::Quota { up_seid: SEID, urr_id: 5, exhausted: true });
    assert!(
        matches!(&ev[1], UsageEvent::Report { usage, .. } if usage.trigger == UsageTrigger::TIMQU && usage.duration_secs == 5)
    );
    assert_eq!(e.poll_timeout(), None, "nothing runs while exhausted");
    e.update(c.at(8), SEID, &u, Regrant { volume: false, time: true }, None);
    assert_eq!(events(&mut e), vec![UsageEvent::Quota { up_seid: SEID, urr_id: 5, exhausted: false }]);
    assert_eq!(e.poll_timeout(), Some(c.at(13)));
}

#[test]
fn periodic_reports_on_a_fixed_grid() {
    let (mut e, c) = engine();
    let mut u = urr(6);
    u.triggers.perio = true;
    u.measurement_period = Some(3);
    e.install(c.at(0), SEID, &u, None);
    let mut got = vec![];
    for (t, n) in [(3, 10), (6, 25), (9, 25)] {
        assert_eq!(e.poll_timeout(), Some(c.at(t)));
        e.handle_timeout(c.at(t), |_, _| Some(ul(n, 1)));
        got.extend(reports(&mut e).into_iter().map(|r| (r.seqn, r.trigger, r.uplink_octets, r.duration_secs)));
    }
    assert_eq!(
        got,
        vec![(0, UsageTrigger::PERIO, 10, 3), (1, UsageTrigger::PERIO, 15, 3), (2, UsageTrigger::PERIO, 0, 3)]
    );
    // A late caller gets one report and the grid is kept.
    e.handle_timeout(c.at(17), |_, _| None);
    assert_eq!(reports(&mut e).len(), 1);
    assert_eq!(e.poll_timeout(), Some(c.at(18)));
}

#[test]
fn inactivity_detection_time_leaves_idle_gaps_out_of_the_duration() {
    let (mut e, c) = engine();
    let mut u = urr(7);
    u.inactivity_detection_time = Some(2);
    e.install(c.at(0), SEID, &u, None);
    assert_eq!(e.sampled(), 1);
    // Traffic at 1 and 2, idle until 10, traffic at 10 and 11.
    let counts = |t: u64| match t {
        0 => 0,
        1 => 10,
        2..=9 => 20,
        10 => 30,
        _ => 40,
    };
    for t in 1..=11 {
        e.handle_timeout(c.at(t), |_, _| Some(ul(counts(t), counts(t) / 10)));
    }
    let r = e.query(c.at(11), SEID, 7, Some(ul(40, 4)), Some(9)).unwrap();
    assert_eq!(r.trigger, UsageTrigger::IMMER);
    assert_eq!(r.duration_secs, 2, "1 s from 1 to 2, 1 s from 10 to 11; the 8 s gap is not counted");
    assert_eq!((r.uplink_octets, r.query_reference), (40, Some(9)));
    // Without an Inactivity Detection Time the clock runs throughout.
    let (mut e, c) = engine();
    e.install(c.at(0), SEID, &urr(7), None);
    assert_eq!(e.query(c.at(11), SEID, 7, None, None).unwrap().duration_secs, 11);
}

#[test]
fn quota_holding_time_reports_once_per_idle_period() {
    let (mut e, c) = engine();
    let mut u = urr(8);
    u.triggers.quhti = true;
    u.quota_holding_time = Some(4);
    e.install(c.at(0), SEID, &u, None);
    for t in 1..=6 {
        e.handle_timeout(c.at(t), |_, _| Some(ul(0, 0)));
    }
    let r = reports(&mut e);
    assert_eq!(r.iter().map(|r| (r.trigger, r.end)).collect::<Vec<_>>(), vec![(UsageTrigger::QUHTI, c.at(4))]);
    // Traffic at 7, idle again: a second report 4 s later.
    for t in 7..=12 {
        e.handle_timeout(c.at(t), |_, _| Some(ul(if t >= 7 { 5 } else { 0 }, 1)));
    }
    let r = reports(&mut e);
    assert_eq!(
        r.iter().map(|r| (r.trigger, r.end, r.seqn)).collect::<Vec<_>>(),
        vec![(UsageTrigger::QUHTI, c.at(11), 1)]
    );
}

#[test]
fn query_and_termination_close_the_measurement() {
    let (mut e, c) = engine();
    e.install(c.at(0), SEID, &urr(1), Some(ul(5, 1)));
    e.install(c.at(0), SEID, &urr(2), None);
    e.install(c.at(0), SEID + 1, &urr(1), None);
    let q = e.query(c.at(2), SEID, 1, Some(ul(25, 3)), None).unwrap();
    assert_eq!((q.seqn, q.trigger, q.uplink_octets, q.uplink_packets), (0, UsageTrigger::IMMER, 20, 2));
    let q = e.query(c.at(3), SEID, 1, Some(ul(30, 4)), None).unwrap();
    assert_eq!((q.seqn, q.uplink_octets, q.start, q.duration_secs), (1, 5, c.at(2), 1));
    assert_eq!(e.query(c.at(3), SEID, 99, None, None), None, "unknown URR");
    let r = e.remove(c.at(4), SEID, 2, Some(ul(7, 1))).unwrap();
    assert_eq!((r.trigger, r.seqn, r.uplink_octets), (UsageTrigger::TERMR, 0, 7));
    let rs = e.remove_session(c.at(5), SEID, |id| Some(ul(if id == 1 { 31 } else { 0 }, 5)));
    assert_eq!(
        rs.iter().map(|r| (r.urr_id, r.seqn, r.trigger, r.uplink_octets)).collect::<Vec<_>>(),
        vec![(1, 2, UsageTrigger::TERMR, 1)]
    );
    assert_eq!(e.len(), 1, "the other session's URR stays");
    e.forget_session(SEID + 1);
    assert!(e.is_empty());
    assert_eq!(e.poll_timeout(), None);
}

#[test]
fn a_counter_that_restarts_counts_from_zero() {
    let (mut e, c) = engine();
    e.install(c.at(0), SEID, &urr(1), Some(ul(1000, 10)));
    let r = e.query(c.at(1), SEID, 1, Some(ul(30, 1)), None).unwrap();
    assert_eq!(r.uplink_octets, 30);
}

#[test]
fn effective_rules_point_exhausted_pdrs_to_a_drop_far() {
    let mut r = crate::rules::SessionRules::default();
    let pd = PacketDetection {
        source_interface: 0,
        local_fteid: None,
        choose_fteid: false,
        ue_ipv4: None,
        ue_ipv6: None,
        network_instance: None,
        sdf_filters: 0,
        flows: vec![],
    };
    for (id, urrs) in [(1u16, vec![1u32]), (2, vec![2])] {
        r.pdrs.insert(
            id,
            Pdr {
                id,
                precedence: 1,
                pdi: pd.clone(),
                outer_header_removal: None,
                far_id: Some(id as u32),
                qer_ids: vec![],
                urr_ids: urrs,
            },
        );
    }
    r.urrs.insert(1, urr(1));
    r.urrs.insert(2, urr(2));
    let mut fwd = crate::rules::Far::from_ie(&rs_pfcp::ie::create_far::CreateFar::new(
        rs_pfcp::ie::far_id::FarId::new(1),
        rs_pfcp::ie::apply_action::ApplyAction::new(0x02),
    ));
    fwd.destination_interface = Some(1);
    r.fars.insert(1, fwd.clone());
    fwd.id = 2;
    r.fars.insert(2, fwd);
    let r = Arc::new(r);
    assert!(Arc::ptr_eq(&effective_rules(&r, &[]), &r), "no copy without an exhausted quota");
    let eff = effective_rules(&r, &[2]);
    assert_eq!(eff.pdrs[&1].far_id, Some(1));
    assert_eq!(eff.pdrs[&2].far_id, Some(QUOTA_DROP_FAR));
    let drop = &eff.fars[&QUOTA_DROP_FAR];
    assert!(drop.action.drop && !drop.action.forw && drop.outer_header_creation.is_none());
    assert_eq!(eff.check(), Ok(()));
}

#[test]
fn query_and_remove_urr_ids_in_both_encodings() {
    use rs_pfcp::ie::IeType;
    let grouped = rs_pfcp::ie::urr_id::UrrId::new(0x0102_0304).to_ie().marshal();
    assert_eq!(grouped_urr_id(&grouped, IeType::QueryUrr).unwrap(), 0x0102_0304);
    assert_eq!(grouped_urr_id(&[0, 0, 0, 9], IeType::RemoveUrr).unwrap(), 9);
    assert!(grouped_urr_id(&[0, 1, 0], IeType::QueryUrr).is_err());
    assert!(grouped_urr_id(&[0, 80, 0, 4, 0, 0, 0, 1], IeType::QueryUrr).is_err(), "a grouped IE without URR ID");
}

#[test]
fn ntp_time_stamps() {
    use std::time::UNIX_EPOCH;
    assert_eq!(ntp_seconds(UNIX_EPOCH), 2_208_988_800);
    assert_eq!(ntp_seconds(UNIX_EPOCH + Duration::from_secs(1_700_000_000)), 3_908_988_800);
    // Era 1 (after 2036-02-07) wraps.
    assert_eq!(ntp_seconds(UNIX_EPOCH + Duration::from_secs(2_085_978_496)), 0);
}

#[derive(Debug, Clone)]
enum Op {
    Tick(u16, [u64; 4]),
    Query([u64; 4]),
    Regrant,
}

fn arb_op(small: bool) -> impl Strategy<Value = Op> {
    let counts = if small {
        proptest::array::uniform4(0u64..1_000_000).boxed()
    } else {
        proptest::array::uniform4(any::<u64>()).boxed()
    };
    prop_oneof![
        6 => (0u16..3000, counts.clone()).prop_map(|(dt, c)| Op::Tick(dt, c)),
        1 => counts.prop_map(Op::Query),
        1 => Just(Op::Regrant),
    ]
}

fn arb_urr() -> impl Strategy<Value = Urr> {
    (
        any::<[bool; 6]>(),
        proptest::option::of(0u64..5000),
        proptest::option::of(0u64..5000),
        proptest::array::uniform5(proptest::option::of(0u32..6)),
    )
        .prop_map(|(t, vt, vq, times)| Urr {
            id: 1,
            measure_volume: true,
            measure_duration: true,
            triggers: UrrTriggers { perio: t[0], volth: t[1], timth: t[2], quhti: t[3], volqu: t[4], timqu: t[5] },
            volume_threshold: vt.and_then(total),
            volume_quota: vq.and_then(total),
            time_threshold: times[0],
            time_quota: times[1],
            measurement_period: times[2],
            inactivity_detection_time: times[3],
            quota_holding_time: times[4],
        })
}

fn to_counts(c: [u64; 4]) -> UsageCounts {
    UsageCounts { ul_octets: c[0], dl_octets: c[1], ul_packets: c[2], dl_packets: c[3] }
}

/// Runs `ops`, returning every report in order (the final one TERMR).
fn run(u: &Urr, ops: &[Op], monotone: bool) -> (Vec<UsageMeasurement>, UsageCounts) {
    let (mut e, c) = engine();
    let mut now = c.at(0);
    let mut cur = UsageCounts::default();
    let mut out = vec![];
    e.install(now, SEID, u, Some(cur));
    for op in ops {
        let mut next = |raw: [u64; 4]| {
            let n = to_counts(raw);
            cur = if monotone { cur.saturating_sum(n) } else { n };
            cur
        };
        match op {
            Op::Tick(dt, raw) => {
                now += Duration::from_millis(u64::from(*dt));
                let counts = next(*raw);
                // Whatever is due, possibly more than once in a long step.
                while e.poll_timeout().is_some_and(|t| t <= now) {
                    e.handle_timeout(now, |_, _| Some(counts));
                }
                e.handle_timeout(now, |_, _| Some(counts));
            }
            Op::Query(raw) => out.extend(e.query(now, SEID, 1, Some(next(*raw)), None)),
            Op::Regrant => e.update(now, SEID, u, Regrant { volume: true, time: true }, Some(cur)),
        }
        out.extend(reports(&mut e));
    }
    out.extend(e.remove(now, SEID, 1, Some(cur)));
    (out, cur)
}

proptest! {
    #[test]
    fn arbitrary_counts_never_panic_and_seqn_counts_up(u in arb_urr(), ops in proptest::collection::vec(arb_op(false), 0..40)) {
        let (out, _) = run(&u, &ops, false);
        for (i, r) in out.iter().enumerate() {
            prop_assert_eq!(r.seqn, i as u32);
            prop_assert!(!r.trigger.is_empty());
            prop_assert!(r.end >= r.start);
        }
        prop_assert!(out.last().is_some_and(|r| r.trigger.contains(UsageTrigger::TERMR)));
    }

    #[test]
    fn growing_counts_are_reported_exactly_once(u in arb_urr(), ops in proptest::collection::vec(arb_op(true), 0..40)) {
        let (out, last) = run(&u, &ops, true);
        let sum = out.iter().fold(UsageCounts::default(), |a, r| a.saturating_sum(UsageCounts {
            ul_octets: r.uplink_octets, dl_octets: r.downlink_octets, ul_packets: r.uplink_packets, dl_packets: r.downlink_packets,
        }));
        prop_assert_eq!(sum, last);
        // Consecutive measurements tile time: each starts where the last ended.
        for w in out.windows(2) {
            prop_assert_eq!(w[1].start, w[0].end);
        }
    }
}

#[test]
fn usage_counts_saturate_instead_of_wrapping() {
    let mut c = UsageCounts { ul_octets: u64::MAX - 5, ul_packets: u64::MAX, ..Default::default() };
    c.add(true, 1500);
    assert_eq!((c.ul_octets, c.ul_packets), (u64::MAX, u64::MAX));
    let last = c;
    c.add(true, 1500);
    assert!(c.since(last).is_zero(), "a saturated count is not read as a restart");
    c.add(false, u64::MAX);
    c.add(false, 1);
    assert_eq!((c.dl_octets, c.dl_packets, c.total_octets()), (u64::MAX, 2, u64::MAX));
}

fn arb_extreme_urr() -> impl Strategy<Value = Urr> {
    let big = || prop_oneof![Just(u64::MAX), Just(u64::MAX - 1), Just(0u64), any::<u64>()];
    let time = || proptest::option::of(prop_oneof![Just(u32::MAX), Just(0u32), Just(1u32), any::<u32>()]);
    (
        any::<[bool; 6]>(),
        proptest::option::of(big()),
        proptest::option::of(big()),
        [time(), time(), time(), time(), time()],
    )
        .prop_map(|(t, vt, vq, times)| Urr {
            id: 1,
            measure_volume: true,
            measure_duration: true,
            triggers: UrrTriggers { perio: t[0], volth: t[1], timth: t[2], quhti: t[3], volqu: t[4], timqu: t[5] },
            volume_threshold: vt.and_then(total),
            volume_quota: vq.and_then(total),
            time_threshold: times[0],
            time_quota: times[1],
            measurement_period: times[2],
            inactivity_detection_time: times[3],
            quota_holding_time: times[4],
        })
}

proptest! {
    /// Thresholds, quotas and times a peer sets at their extremes, with
    /// counts anywhere in u64 (growing to saturation or jumping about):
    /// no panic, no overflow, and every report's counts add up without wrapping.
    #[test]
    fn peer_values_at_their_extremes_never_overflow(u in arb_extreme_urr(), ops in proptest::collection::vec(arb_op(false), 0..30), monotone in any::<bool>()) {
        let (out, last) = run(&u, &ops, monotone);
        prop_assert!(out.last().is_some_and(|r| r.trigger.contains(UsageTrigger::TERMR)));
        if monotone {
            let sum = out.iter().fold(UsageCounts::default(), |a, r| a.saturating_sum(UsageCounts {
                ul_octets: r.uplink_octets, dl_octets: r.downlink_octets, ul_packets: r.uplink_packets, dl_packets: r.downlink_packets,
            }));
            prop_assert_eq!(sum, last);
        }
    }
}
