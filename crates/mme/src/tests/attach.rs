use super::*;
use crate::context::EmmState;
use oxirush_s1ap::S1apPduKind;

#[test]
fn full_attach_by_imsi() {
    let mut h = Harness::default();
    let ue = h.attach("001010000000001", 7);
    let s = h.mme.stats();
    assert_eq!((s.ues, s.enbs, s.attached), (1, 1, 1));
    let ctx = &h.mme.ues[&ue.mme_ue_id.unwrap()];
    assert_eq!(ctx.emm, EmmState::Registered);
    assert!(ue.guti.is_some());
    assert_eq!(h.mme.poll_timeout(), None, "T3450 stopped");
    assert_eq!(h.mme.counters().value("attach_complete"), 1);
    let _ = S1apPduKind::Initiating_InitialContextSetup;
}
