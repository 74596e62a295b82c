//! Idle-mode cell reselection between eNBs ([`crate::enb::reselect`]):
//! inside the TAI list nothing is sent, outside it a normal TAU from idle
//! goes through the new eNB (TS 24.301 5.5.3.2.2).

use std::net::Ipv4Addr;
use std::time::Instant;

use oxirush_nas::nas_eps::*;
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{extract_s1ap_ies, S1apPduKind};

use super::mme::*;
use crate::enb::{reselect, Enb, EnbConfig, EnbError, Reselection};

/// An eNB with S1 up, no UE, in TA `tac`.
fn enb_in(now: Instant, enb_id: u32, tac: u16) -> Enb {
    let cfg =
        EnbConfig { enb_id, name: format!("enb-{enb_id}"), tac, s1u_addr: Ipv4Addr::new(127, 0, 0, 2), ..enb_config() };
    enb_up(now, cfg)
}

/// eNB 1 (TAC 1) with UE 0 attached (TAI list: TAC 1) and released to idle.
fn idle_at_enb1(now: Instant) -> (Enb, FakeMme) {
    let mut enb = ready_enb(now);
    let mut mme = FakeMme::new();
    let id = attach(&mut enb, &mut mme, now);
    enb.handle_s1ap(now, 1, &release_command(id));
    let _ = drain(&mut enb);
    assert!(enb.ue(0).unwrap().ue.is_idle());
    (enb, mme)
}

#[test]
fn a_move_inside_the_tai_list_sends_nothing_and_the_ue_camps_on_the_new_cell() {
    let now = Instant::now();
    let (mut enb1, _) = idle_at_enb1(now);
    let mut enb2 = enb_in(now, 2, 1);
    let t3412 = enb1.ue(0).unwrap().ue.t3412_deadline();
    assert!(t3412.is_some(), "T3412 runs in idle");
    assert_eq!(reselect(now, &mut enb1, &mut enb2, 0), Ok(Reselection::InTaiList));
    assert!(enb1.ue(0).is_none());
    assert!(drain(&mut enb1).is_empty() && drain(&mut enb2).is_empty(), "no signalling");
    let ue = &enb2.ue(0).unwrap().ue;
    assert_eq!(ue.cell().map(|c| c.tac()), Some(1));
    // Its T3412 runs on at the new eNB.
    assert_eq!(ue.t3412_deadline(), t3412);
    assert_eq!(enb2.poll_timeout(), t3412);
    // Its own uplink data brings it back through the new eNB.
    enb2.start_service_request(now, 0).unwrap();
    let sent = sends(&mut enb2);
    assert_eq!(S1AP_PDU::decode(&sent[0].1).unwrap().kind(), S1apPduKind::Initiating_initialUEMessage);
}

#[test]
fn a_move_out_of_the_tai_list_starts_a_normal_tau_through_the_new_enb() -> Result<(), oxirush_s1ap::Error> {
    let now = Instant::now();
    let (mut enb1, mut mme) = idle_at_enb1(now);
    let mut enb3 = enb_in(now, 3, 7);
    assert_eq!(reselect(now, &mut enb1, &mut enb3, 0), Ok(Reselection::TauStarted));
    assert!(drain(&mut enb1).is_empty());
    let sent = sends(&mut enb3);
    assert_eq!(sent.len(), 1);
    let pdu = S1AP_PDU::decode(&sent[0].1).unwrap();
    assert_eq!(pdu.kind(), S1apPduKind::Initiating_initialUEMessage);
    extract_s1ap_ies!(pdu, InitialUEMessage,
        req tai: TAI = TAI(t) => t,
        req s_tmsi: u32 = S_TMSI(t) => u32::from_be_bytes(t.m_tmsi.0),
    );
    assert_eq!(u16::from_be_bytes(tai.tac.0), 7, "the new cell's TAI");
    assert_eq!(s_tmsi, M_TMSI);
    let (_, nas) = uplink_nas(&sent[0].1);
    assert_eq!(nas[0] >> 4, 1, "initial NAS message: integrity protected");
    let NasEpsMessage::Emm(_, NasEmmMessage::TrackingAreaUpdateRequest(r)) = mme.unprotect(&nas) else {
        panic!("not a TAU REQUEST")
    };
    assert_eq!(r.eps_update_type.update_type(), Some(UpdateType::TaUpdating));
    assert!(!r.eps_update_type.is_active());
    assert_eq!(enb3.ue(0).unwrap().ue.procedure(), Some(crate::ue::Procedure::Tau));
    Ok(())
}

#[test]
fn only_an_idle_ue_reselects() {
    let now = Instant::now();
    let mut enb1 = ready_enb(now);
    let mut mme = FakeMme::new();
    attach(&mut enb1, &mut mme, now);
    let mut enb2 = enb_in(now, 2, 1);
    assert_eq!(reselect(now, &mut enb1, &mut enb2, 0), Err(EnbError::NotIdle(0)), "connected");
    assert_eq!(reselect(now, &mut enb1, &mut enb2, 9), Err(EnbError::UnknownUe(9)));
    assert!(enb1.ue(0).is_some() && enb2.ue(0).is_none());
}
