//! The full-state dump ([`crate::dump`]) of the PFCP node, restored into a
//! fresh node: the same associations, sessions, rules, quotas, diversions
//! and usage measurements, carried on from where the source was; input
//! that does not fit is refused whole.

use super::*;
use crate::config::UpfRole;
use crate::dump::{RestoreError, UpfDump};
use crate::rules::{ForwardingPlane, PlaneError, SessionRules};
use crate::urr::QUOTA_DROP_FAR;
use mobicore_pfcp::steering::{establishment_request, Diversion};
use rs_pfcp::ie::reporting_triggers::ReportingTriggers;
use std::sync::Arc;
use std::time::Duration;

/// A fresh node at `src`'s time and wall clock, with another Recovery
/// Time Stamp (the dump's must win), and `plane` as its forwarding plane.
fn fresh_like(src: &Harness, cfg: UpfConfig, plane: Box<dyn ForwardingPlane>) -> UpfCore {
    let later = SystemTime::UNIX_EPOCH + Duration::from_secs(4_000_000_000 - 2_208_988_800);
    let cfg = UpfConfig { s1u_addr: Ipv4Addr::new(127, 0, 0, 9), ..cfg };
    let mut core = UpfCore::new(cfg, plane, later, Counters::new());
    core.set_wall_clock(src.core.clock.at, src.core.clock.wall);
    core
}

fn restored(src: &Harness, cfg: UpfConfig) -> Harness {
    let plane = MemoryPlane::new();
    let mut core = fresh_like(src, cfg, Box::new(plane.clone()));
    let d = UpfDump::from_bytes(&src.core.dump(src.now).to_bytes()).expect("reads back");
    core.restore(src.now, d).expect("restored");
    Harness { core, plane, now: src.now, seq: 100 }
}

/// A session with a volume quota of 1000 octets (reported, VOLQU).
fn quota_urr() -> Ie {
    create_urr(1, ReportingTriggers::new().with_volume_quota(true), |c| {
        c.volume_quota = Some(rs_pfcp::ie::volume_quota::VolumeQuota::new(0x01, Some(1000), None, None));
    })
}

/// A session measuring every 10 s (PERIO).
fn periodic_urr() -> Ie {
    create_urr(1, ReportingTriggers::new().with_periodic(true), |c| {
        c.measurement_period = Some(rs_pfcp::ie::measurement_period::MeasurementPeriod::new(10));
    })
}

/// [`advance`], the CP function answering every Session Report Request.
fn answered(h: &mut Harness, secs: u64) -> Vec<(crate::pfcp::PfcpHeader, Vec<Ie>)> {
    let end = h.now + Duration::from_secs(secs);
    let mut out = vec![];
    loop {
        let sent = advance(h, 0);
        for (hd, _) in &sent {
            let ok = [crate::pfcp::cause_ie(rs_pfcp::ie::cause::CauseValue::RequestAccepted)];
            let b = encode(crate::session::SESSION_REPORT_RESPONSE, hd.seid, hd.seq, &ok);
            h.core.handle_datagram(h.now, smf(), &b);
        }
        out.extend(sent);
        match h.core.poll_timeout().filter(|t| *t <= end) {
            Some(t) => h.now = t,
            None => break,
        }
    }
    h.now = end;
    out
}

#[test]
fn rules_quotas_and_measurements_carry_on_in_the_restored_node() {
    let mut h = urr_harness();
    let t0 = h.now;
    let plain = up_seid(&establish(&mut h, 3).1);
    let quota = establish_urr(&mut h, 4, vec![quota_urr()]);
    let periodic = establish_urr(&mut h, 5, vec![periodic_urr()]);
    // The quota runs out: its PDRs drop in the plane.
    h.plane.set_usage(quota, 1, counts(1500, 0));
    let sent = answered(&mut h, 2);
    assert_eq!(sent.len(), 1, "the VOLQU report");
    assert!(h.plane.get(quota).unwrap().pdrs.values().all(|p| p.far_id == Some(QUOTA_DROP_FAR)));
    // One periodic report out (UR-SEQN 0), the next measurement under way.
    h.plane.set_usage(periodic, 1, counts(1000, 0));
    assert_eq!(answered(&mut h, 8).len(), 1);
    assert_eq!(h.now, t0 + Duration::from_secs(10));
    answered(&mut h, 4);

    let mut r = restored(&h, UpfConfig::default());
    assert_eq!(r.plane.sessions(), h.plane.sessions(), "the plane has the effective rules");
    assert_eq!(r.core.dump(r.now), h.core.dump(h.now), "the restored node dumps as the source");
    assert_eq!(r.core.sessions()[&quota].blocked, vec![1]);
    assert_eq!(r.core.sessions()[&plain].rules, h.core.sessions()[&plain].rules);
    assert_eq!(r.core.counters.value("pfcp_sessions_restored"), 3);

    // The same traffic then gives the same report, UR-SEQN 1, from either
    // (the restored plane counts from zero).
    h.plane.set_usage(periodic, 1, counts(1300, 0));
    r.plane.set_usage(periodic, 1, counts(300, 0));
    let (a, b) = (answered(&mut h, 6), answered(&mut r, 6));
    assert_eq!(a.len(), 1);
    assert_eq!(b.iter().map(|(_, ies)| ies.clone()).collect::<Vec<_>>(), vec![a[0].1.clone()]);
    let rep = reports_in(&b[0].1, IeType::UsageReportWithinSessionReportRequest);
    assert_eq!((rep[0].ur_seqn.sequence_number(), volume(&rep[0]).0), (1, Some(300)));

    // The CP function sets its association up again: the same Recovery
    // Time Stamp keeps the sessions; a new one would mean it restarted.
    r.associate();
    assert_eq!(r.core.sessions().len(), 3);
    let newer = RecoveryTimeStamp::new(SystemTime::UNIX_EPOCH + Duration::from_secs(5)).to_ie();
    let (_, ies) = r.request(msg::ASSOCIATION_SETUP_REQUEST, None, &[node_ie(), newer]);
    assert_eq!(cause(&ies), 1);
    assert!(r.core.sessions().is_empty() && r.plane.is_empty());
}

fn diversion(ue: u8) -> Diversion {
    Diversion {
        ue: Ipv4Addr::new(10, 45, 0, ue),
        flow: None,
        anchor: Ipv4Addr::new(198, 51, 100, 7),
        anchor_teid: Some(0x77),
        anchor_ue: Some(Ipv4Addr::new(10, 99, 0, ue)),
        origin: Ipv4Addr::new(203, 0, 113, 1),
    }
}

#[test]
fn diversions_of_a_steering_node_are_restored_and_still_exclusive() {
    let steering = UpfConfig { role: UpfRole::Steering, ..UpfConfig::default() };
    let mut h = Harness::with(steering.clone());
    h.associate();
    let cp = Ipv4Addr::new(127, 0, 0, 2);
    for (i, ue) in [(1u64, 2u8), (2, 3)] {
        let (_, ies) = h.raw(&establishment_request(10 + i as u32, cp, i, cp, &diversion(ue))).unwrap();
        assert_eq!(cause(&ies), 1);
    }
    let mut r = restored(&h, steering);
    assert_eq!(r.plane.diversions(), h.plane.diversions());
    assert_eq!(r.core.dump(r.now), h.core.dump(h.now));
    // The index of diversions was rebuilt: the same UE cannot be diverted twice.
    let (_, ies) = r.raw(&establishment_request(50, cp, 9, cp, &diversion(2))).unwrap();
    assert_ne!(cause(&ies), 1);
}

/// A memory plane that refuses one session.
struct Refusing(MemoryPlane, u64);

impl ForwardingPlane for Refusing {
    fn install(&mut self, s: u64, r: &SessionRules) -> Result<(), PlaneError> {
        self.install_shared(s, &Arc::new(r.clone()))
    }
    fn install_shared(&mut self, s: u64, r: &Arc<SessionRules>) -> Result<(), PlaneError> {
        if s == self.1 {
            return Err(PlaneError::Other("refused".into()));
        }
        self.0.install_shared(s, r)
    }
    fn update(&mut self, s: u64, r: &SessionRules) -> Result<(), PlaneError> {
        self.0.update(s, r)
    }
    fn remove(&mut self, s: u64) -> Result<(), PlaneError> {
        self.0.remove(s)
    }
}

#[test]
fn a_dump_that_does_not_fit_changes_nothing() {
    let mut h = urr_harness();
    let seids: Vec<u64> = (1..=3).map(|i| establish_urr(&mut h, i, vec![periodic_urr()])).collect();
    let d = h.core.dump(h.now);
    let refused = |d: UpfDump, cfg: UpfConfig| {
        let plane = MemoryPlane::new();
        let mut core = fresh_like(&h, cfg, Box::new(plane.clone()));
        let e = core.restore(h.now, d).expect_err("refused");
        assert!(core.sessions().is_empty() && core.associations().is_empty() && plane.is_empty());
        assert!(core.usage_engine().is_empty() && core.teids.is_empty());
        e
    };
    let mut bad = d.clone();
    bad.sessions[1].rules.pdrs.get_mut(&1).unwrap().far_id = Some(77);
    assert!(matches!(refused(bad, UpfConfig::default()), RestoreError::Rules { .. }));
    let mut bad = d.clone();
    bad.sessions[0].usage[0].urr_id = 9;
    assert!(matches!(refused(bad, UpfConfig::default()), RestoreError::Usage { urr: 9, .. }));
    let mut bad = d.clone();
    bad.sessions[2].node = "192.0.2.7".into();
    assert!(matches!(refused(bad, UpfConfig::default()), RestoreError::NoAssociation { .. }));
    let bound = UpfConfig { max_sessions_per_association: 2, ..UpfConfig::default() };
    assert!(matches!(refused(d.clone(), bound), RestoreError::TooManySessions(_)));
    let mut bad = d.clone();
    bad.associations.push(bad.associations[0].clone());
    assert!(matches!(refused(bad, UpfConfig::default()), RestoreError::DuplicateAssociation(_)));

    // The plane refuses the last session: the others are taken out again.
    let plane = MemoryPlane::new();
    let last = *seids.iter().max().unwrap();
    let mut core = fresh_like(&h, UpfConfig::default(), Box::new(Refusing(plane.clone(), last)));
    assert!(matches!(core.restore(h.now, d), Err(RestoreError::Plane { seid, .. }) if seid == last));
    assert!(core.sessions().is_empty() && core.associations().is_empty() && plane.is_empty());
    assert!(core.usage_engine().is_empty() && core.teids.is_empty());
}
