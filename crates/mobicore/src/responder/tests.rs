//! The emulator's eNB and UE state machines against the responder's, in
//! memory: no sockets, no clock but one fixed instant.

use super::*;
use mobicore_common::sctp_api::AssocId;
use mobicore_ran::enb::{Enb, EnbAction, EnbConfig, Outcome};
use mobicore_ran::ue::{EmmState, Procedure, Ue};
use mobicore_ran::{enb_of, usim_for, SubscriberPlan};
use proptest::prelude::*;
use std::time::{Duration, Instant};

fn plan(ues: u64, enbs: u32, switch_off: bool) -> ResponderPlan {
    let subscribers = SubscriberPlan::default();
    ResponderPlan {
        mme: mobicore_mme::MmeConfig::default(),
        template: crate::allinone::subscriber_template(&subscribers),
        subscribers,
        ues,
        enbs,
        switch_off,
    }
}

/// eNB `k` on association `k`.
struct Run {
    now: Instant,
    enbs: Vec<Enb>,
    responder: Responder,
    outcomes: Vec<Outcome>,
    anomalies: Vec<String>,
}

impl Run {
    fn new(plan: ResponderPlan) -> Self {
        let replies = build_all(&plan, 2).unwrap();
        assert_eq!(replies.len() as u64, plan.ues);
        let enbs = (0..plan.enbs)
            .map(|k| {
                Enb::new(EnbConfig {
                    enb_id: k + 1,
                    name: format!("enb-{k}"),
                    plmn: "00101".parse().unwrap(),
                    tac: 1,
                    s1u_addr: std::net::Ipv4Addr::LOCALHOST,
                    procedure_timeout: Duration::from_secs(10),
                    s1_setup_timeout: Duration::from_secs(5),
                    inactivity_timeout: None,
                })
                .unwrap()
            })
            .collect();
        let responder = Responder::new(plan, replies).unwrap();
        let mut run = Run { now: Instant::now(), enbs, responder, outcomes: Vec::new(), anomalies: Vec::new() };
        for k in 0..run.enbs.len() {
            run.responder.handle(ResponderEvent::Up { assoc: AssocId(k as u64), outbound_streams: 4 });
            run.enbs[k].start_s1_setup(run.now, 4);
        }
        run.pump();
        assert!(run.enbs.iter().all(Enb::is_ready), "{:?}", run.anomalies);
        run
    }

    /// Carry PDUs both ways until neither side has anything to send.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            for k in 0..self.enbs.len() {
                while let Some(a) = self.enbs[k].poll_action() {
                    moved = true;
                    match a {
                        EnbAction::Send { stream, pdu } => self.responder.handle(ResponderEvent::Data {
                            assoc: AssocId(k as u64),
                            stream,
                            data: pdu.into(),
                        }),
                        EnbAction::Outcome(o) => self.outcomes.push(o),
                        EnbAction::Anomaly(a) => self.anomalies.push(a),
                        EnbAction::S1Setup(r) => r.unwrap(),
                        EnbAction::Handover(h) => panic!("no handover here: {h:?}"),
                    }
                }
            }
            while let Some(Send { assoc, stream, data }) = self.responder.poll_action() {
                moved = true;
                self.enbs[assoc.0 as usize].handle_s1ap(self.now, stream, &data);
            }
            if !moved {
                return;
            }
        }
    }

    fn attach(&mut self, order: impl IntoIterator<Item = u64>) {
        let p = SubscriberPlan::default();
        for i in order {
            let k = enb_of(i, self.enbs.len() as u32);
            self.enbs[k].add_ue(i, Ue::new(usim_for(i, &p), "00101".parse().unwrap()));
            self.enbs[k].start_attach(self.now, i).unwrap();
        }
        self.pump();
    }

    fn detach(&mut self, ues: u64, switch_off: bool) {
        for i in 0..ues {
            let k = enb_of(i, self.enbs.len() as u32);
            self.enbs[k].start_detach(self.now, i, switch_off).unwrap();
        }
        self.pump();
    }

    fn succeeded(&self, p: Procedure) -> usize {
        self.outcomes.iter().filter(|o| o.procedure == p && o.result.is_ok()).count()
    }

    fn emm(&self, i: u64) -> EmmState {
        let k = enb_of(i, self.enbs.len() as u32);
        self.enbs[k].ue(i).unwrap().ue.emm_state()
    }
}

#[test]
fn every_ue_attaches_and_detaches_with_the_pre_built_replies() {
    let (ues, enbs) = (40, 3);
    let mut run = Run::new(plan(ues, enbs, false));
    // All started before any answer: the emulator's in-flight pattern.
    run.attach(0..ues);
    assert_eq!(run.succeeded(Procedure::Attach), ues as usize, "{:?} {:?}", run.outcomes, run.anomalies);
    assert!((0..ues).all(|i| run.emm(i) == EmmState::Registered));
    let s = run.responder.stats();
    assert_eq!((s.enbs, s.attached, s.patched), (u64::from(enbs), ues, 0), "every eNB-UE-S1AP-ID as expected");
    // The eNB checked each KeNB against its UE's; the UE each MAC.
    run.detach(ues, false);
    assert_eq!(run.succeeded(Procedure::Detach), ues as usize, "{:?} {:?}", run.outcomes, run.anomalies);
    assert!((0..ues).all(|i| run.emm(i) == EmmState::Deregistered));
    let s = run.responder.stats();
    assert_eq!((s.detached, s.released), (ues, ues));
    assert!(run.anomalies.is_empty(), "{:?}", run.anomalies);
    assert!(run.responder.counters().snapshot().values().all(|v| *v == 0), "{:?}", run.responder.counters().snapshot());
}

#[test]
fn other_enb_ue_ids_are_patched_at_run_time() {
    let ues = 12;
    let mut run = Run::new(plan(ues, 2, false));
    // In reverse order the eNBs number the connections the other way round.
    run.attach((0..ues).rev());
    assert_eq!(run.succeeded(Procedure::Attach), ues as usize, "{:?} {:?}", run.outcomes, run.anomalies);
    assert!(run.responder.stats().patched >= ues - 2, "{:?}", run.responder.stats());
    run.detach(ues, false);
    assert_eq!(run.succeeded(Procedure::Detach), ues as usize, "{:?}", run.outcomes);
}

#[test]
fn switch_off_detach_gets_the_release_alone() {
    let ues = 6;
    let mut run = Run::new(plan(ues, 2, true));
    run.attach(0..ues);
    run.detach(ues, true);
    assert_eq!(run.succeeded(Procedure::Detach), ues as usize, "{:?}", run.outcomes);
    // A DETACH ACCEPT after a switch-off would be an anomaly at the UE.
    assert!(run.anomalies.is_empty(), "{:?}", run.anomalies);
    assert_eq!(run.responder.stats().released, ues);
}

#[test]
fn an_unknown_imsi_is_counted_not_answered() {
    let mut run = Run::new(plan(2, 1, false));
    run.attach(0..2);
    // UE 5 is not in the responder's plan.
    let p = SubscriberPlan::default();
    run.enbs[0].add_ue(5, Ue::new(usim_for(5, &p), "00101".parse().unwrap()));
    run.enbs[0].start_attach(run.now, 5).unwrap();
    run.pump();
    assert_eq!(run.responder.counters().value("responder_unknown_imsi"), 1);
    assert_eq!(run.responder.stats().attached, 2);
}

proptest! {
    /// Whatever an eNB sends, the responder does not panic and no UE's
    /// step changes.
    #[test]
    fn any_pdu_leaves_every_ue_as_it_was(data in proptest::collection::vec(any::<u8>(), 0..200), stream in 0u16..5) {
        let plan = plan(3, 1, false);
        let replies = build_all(&plan, 1).unwrap();
        let mut r = Responder::new(plan, replies).unwrap();
        r.handle(ResponderEvent::Up { assoc: AssocId(0), outbound_streams: 2 });
        let before: Vec<Step> = (0..3).map(|i| r.step(i)).collect();
        r.handle(ResponderEvent::Data { assoc: AssocId(0), stream, data: data.into() });
        r.handle(ResponderEvent::Data { assoc: AssocId(7), stream, data: vec![0x00, 0x0c, 0x00].into() });
        let after: Vec<Step> = (0..3).map(|i| r.step(i)).collect();
        prop_assert_eq!(before, after);
    }
}
