//! The tokio shell against an in-memory SCTP endpoint whose "MME" runs the
//! scripted attach and detach for every UE (channels only, no sockets).

use std::collections::HashMap;

use bytes::Bytes;
use mobicore_common::sctp_api::{AssocId, SctpCommand, SctpEvent, SctpHandle, PPID_S1AP};
use oxirush_nas::nas_eps::*;
use oxirush_s1ap::s1ap::S1AP_PDU;
use oxirush_s1ap::S1apPduKind;
use oxirush_security::milenage::Auts;
use oxirush_security::Rand;
use tokio::sync::mpsc;

use super::mme::*;
use crate::{run, Phase, RanConfig};

/// Answers every S1AP message of the RAN like an MME that accepts all.
struct ScriptedCore {
    ues: HashMap<(u64, u32), FakeMme>,
}

impl ScriptedCore {
    fn answer(&mut self, assoc: u64, data: &[u8]) -> Vec<Vec<u8>> {
        let pdu = S1AP_PDU::decode(data).unwrap();
        match pdu.kind() {
            S1apPduKind::Initiating_S1Setup => vec![s1_setup_response()],
            S1apPduKind::Initiating_initialUEMessage | S1apPduKind::Initiating_uplinkNASTransport => {
                let (enb_ue_id, nas) = uplink_nas(data);
                let mme = self.ues.entry((assoc, enb_ue_id)).or_insert_with(FakeMme::new);
                let message = match (nas[0] >> 4, &mme.ctx) {
                    (0, _) => NasEpsMessage::decode(&nas).unwrap(),
                    // A GUTI attach under a context this scripted MME does not keep.
                    (1, None) => match NasEpsMessage::decode(&nas).unwrap() {
                        NasEpsMessage::SecurityProtected(_, inner) => *inner,
                        other => other,
                    },
                    _ => mme.unprotect(&nas),
                };
                match message {
                    NasEpsMessage::Emm(_, NasEmmMessage::AttachRequest(_)) => {
                        mme.attach_request(&nas);
                        vec![downlink_nas(enb_ue_id, mme.authentication_request(64))]
                    }
                    NasEpsMessage::Emm(_, NasEmmMessage::AuthenticationResponse(_)) => {
                        mme.authentication_response(&nas);
                        let replayed = mme.replayed();
                        vec![downlink_nas(enb_ue_id, mme.security_mode_command(replayed))]
                    }
                    NasEpsMessage::Emm(_, NasEmmMessage::SecurityModeComplete(_)) => {
                        let accept = mme.attach_accept();
                        vec![mme.ics_request(enb_ue_id, accept)]
                    }
                    NasEpsMessage::Emm(_, NasEmmMessage::AuthenticationFailure(f)) => {
                        // TS 33.102 6.3.5: resynchronise from the AUTS.
                        assert_eq!(f.emm_cause.cause(), Some(EmmCause::SynchFailure));
                        let auts = *f.authentication_failure_parameter.unwrap().auts().unwrap();
                        let rand = Rand::new(&[0x23; 16]);
                        let sqn_ms = mme.milenage.verify_auts(&rand, &Auts::new(&auts)).unwrap().get();
                        vec![downlink_nas(enb_ue_id, mme.authentication_request(sqn_ms + 32))]
                    }
                    NasEpsMessage::Emm(_, NasEmmMessage::AttachComplete(_)) => vec![],
                    NasEpsMessage::Emm(_, NasEmmMessage::DetachRequestUeOriginating(req)) => {
                        let mut out = Vec::new();
                        if !req.detach_type.is_switch_off() {
                            out.push(downlink_nas(
                                enb_ue_id,
                                mme.protect(NasEpsMessage::new_emm(NasDetachAccept::new())),
                            ));
                        }
                        out.push(release_command(enb_ue_id));
                        out
                    }
                    other => panic!("unexpected uplink {other:?}"),
                }
            }
            S1apPduKind::Successful_InitialContextSetup | S1apPduKind::Successful_UEContextRelease => vec![],
            other => panic!("unexpected S1AP {other:?}"),
        }
    }
}

/// An SCTP endpoint task in memory, with the scripted core behind it.
fn endpoint() -> SctpHandle {
    let (cmd_tx, mut cmd_rx) = mpsc::channel::<SctpCommand>(64);
    let (ev_tx, ev_rx) = mpsc::channel::<SctpEvent>(64);
    tokio::spawn(async move {
        let mut core = ScriptedCore { ues: HashMap::new() };
        let mut next = 1;
        while let Some(cmd) = cmd_rx.recv().await {
            match cmd {
                SctpCommand::Connect { remote, reply } => {
                    let assoc = AssocId(next);
                    next += 1;
                    let _ = reply.send(Ok(assoc));
                    let up = SctpEvent::Up { assoc, peer: remote, inbound_streams: 4, outbound_streams: 4 };
                    if ev_tx.send(up).await.is_err() {
                        return;
                    }
                }
                SctpCommand::Send { assoc, stream, ppid, data } => {
                    assert_eq!(ppid, PPID_S1AP);
                    for out in core.answer(assoc.0, &data) {
                        let data = Bytes::from(out);
                        let ev = SctpEvent::Data { assoc, stream, ppid: PPID_S1AP, data };
                        if ev_tx.send(ev).await.is_err() {
                            return;
                        }
                    }
                }
                SctpCommand::Shutdown { .. } | SctpCommand::Abort { .. } => {}
            }
        }
    });
    SctpHandle { commands: cmd_tx, events: ev_rx, local: "127.0.0.1:0".parse().unwrap() }
}

#[tokio::test]
async fn run_attaches_and_detaches_every_ue_over_two_enbs() {
    for switch_off in [false, true] {
        let cfg = RanConfig { enbs: 2, ues: 40, max_in_flight: 7, detach: true, switch_off, ..RanConfig::default() };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let report = run(cfg, endpoint(), Some(tx)).await.unwrap();
        assert_eq!(report.failures, Default::default(), "{}", report.table());
        assert_eq!((report.attached, report.failed), (40, 0));
        assert_eq!((report.detached, report.detach_failed), (40, 0));
        assert_eq!(report.attach_latencies_us.len(), 40);
        assert!(report.attach_p99().is_some());
        let mut phases = Vec::new();
        while let Ok(p) = rx.try_recv() {
            assert!(p.done <= p.total);
            phases.push(p.phase);
        }
        assert!(phases.contains(&Phase::Attach) && phases.contains(&Phase::Detach));
    }
}

#[tokio::test]
async fn run_with_a_rate_and_a_second_guti_round() {
    let cfg = RanConfig {
        ues: 6,
        rate: Some(1000.0),
        detach: true,
        attach_with_guti_second_round: true,
        ..RanConfig::default()
    };
    let report = run(cfg, endpoint(), None).await.unwrap();
    assert_eq!(report.attached, 6);
    assert_eq!(report.detached, 6);
    // The scripted core answers a GUTI attach like an IMSI one.
    assert_eq!(report.reattach.as_ref().unwrap().succeeded, 6, "{}", report.table());
    assert_eq!(report.redetach.as_ref().unwrap().succeeded, 6);
    // The scripted HSS reused SQN 64: every USIM asked for a resync.
    assert_eq!(report.anomalies.get("synch failure #21 sent (SQN resynchronisation)"), Some(&6));
}

/// Throughput of the shell and the scripted core sharing one thread. Run
/// with `--ignored --nocapture`; asserts nothing on time.
#[tokio::test]
#[ignore]
async fn shell_throughput_in_memory() {
    let cfg = RanConfig { enbs: 4, ues: 20_000, max_in_flight: 1000, detach: true, ..RanConfig::default() };
    let report = run(cfg, endpoint(), None).await.unwrap();
    assert_eq!(report.attached, 20_000, "{}", report.table());
    println!("{}", report.table());
}
