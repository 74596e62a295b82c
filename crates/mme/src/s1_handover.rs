//! S1-based handover, intra-MME, no S-GW change (TS 23.401 5.5.1.2.2,
//! TS 36.413 8.4): Handover Required, Handover Request / Acknowledge,
//! Handover Command, eNB / MME Status Transfer, Handover Notify, Handover
//! Preparation Failure and Handover Cancel, with direct or indirect data
//! forwarding.

use crate::context::{EmmState, GlobalEnbId, GuardKind, S1Conn, Step};
use crate::mme::Mme;
use crate::path_switch::{ecgi_of, fteid_of, tai_of};
use crate::s1ap_build::{self, HandoverErab, HandoverRequestData};
use crate::s1ap_handler::{plmn_of, S1Result};
use mobicore_common::requester::TransportError;
use mobicore_common::s11::{
    CreateIndirectForwardingRequest, DeleteIndirectForwardingRequest, ForwardingBearer, ModifyBearerRequest,
    S11Request, S11Response,
};
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ebi, Fteid};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{extract_s1ap_ies, ie};
use std::time::Duration;

/// A handover that runs, kept in the UE context (with `Step::Handover`).
#[derive(Debug, Clone)]
pub struct Handover {
    pub phase: Phase,
    /// The target eNB's association and the stream the MME uses there.
    pub target_assoc: AssocId,
    pub target_stream: u16,
    /// The target's S1 connection, once its eNB-UE-S1AP-ID is known (it is
    /// in `by_enb_ue` then, so that the target's messages find the UE).
    pub target: Option<S1Conn>,
    /// S1: the source said a direct forwarding path is available.
    pub direct: bool,
    /// The E-RABs the target admitted.
    pub admitted: Vec<Admitted>,
    /// The Target to Source Transparent Container, for the Handover Command.
    pub target_to_source: Vec<u8>,
    /// An indirect data forwarding tunnel exists at the S-GW.
    pub tunnel: bool,
    /// Modify Bearer requests in flight, and whether one failed.
    pub pending: u8,
    pub failed: bool,
    /// X2: the E-RABs (default bearers) the target did not switch, whose PDN
    /// connections are released.
    pub released: Vec<u8>,
    /// X2: the Path Switch Request's UE security capabilities were not the
    /// stored ones (TS 33.401 7.2.4.2.2).
    pub ue_security_mismatch: bool,
    /// The target asked to release the UE (UE CONTEXT RELEASE REQUEST)
    /// before the handover was complete at the core: the S1 release
    /// follows its completion (after its Modify Bearers, in order).
    pub release_requested: bool,
}

impl Handover {
    pub fn new(phase: Phase, target_assoc: AssocId, target_stream: u16) -> Self {
        Handover {
            phase,
            target_assoc,
            target_stream,
            target: None,
            direct: false,
            admitted: Vec::new(),
            target_to_source: Vec::new(),
            tunnel: false,
            pending: 0,
            failed: false,
            released: Vec::new(),
            ue_security_mismatch: false,
            release_requested: false,
        }
    }
}

/// Where a handover is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// X2 (TS 23.401 5.5.1.1.2): the Path Switch Request moved the S1
    /// connection; the Modify Bearers are in flight.
    PathSwitch,
    /// S1: HANDOVER REQUEST sent to the target (TS1RELOCprep runs).
    Preparation,
    /// S1: Create Indirect Data Forwarding Tunnel in flight.
    CreateForwarding,
    /// S1: HANDOVER COMMAND sent to the source (TS1RELOCoverall runs).
    Execution,
    /// S1: HANDOVER NOTIFY came, the Modify Bearers are in flight and the
    /// source's release is commanded; `source` awaits its completion.
    Completion { source: S1Conn, released: bool },
}

/// One E-RAB the target admitted (TS 36.413 9.1.5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub ebi: u8,
    pub s1u: Fteid,
    pub dl_forwarding: Option<Fteid>,
}

/// The Global eNB ID of a Target ID (TS 36.413 9.2.1.6) as the key S1
/// Setup stored; `None` for a target that is no eNB.
fn target_enb(t: &TargetID) -> Option<GlobalEnbId> {
    let TargetID::targeteNB_ID(t) = t else { return None };
    let bits = match &t.global_enb_id.enb_id {
        ENBID::macroENB_ID(b) | ENBID::homeENB_ID(b) | ENBID::short_macroENB_ID(b) | ENBID::long_macroENB_ID(b) => b,
        _ => return None,
    };
    Some(GlobalEnbId {
        plmn: plmn_of(&t.global_enb_id.plmn_identity),
        bits: bits.len() as u8,
        value: bits.value() as u32,
    })
}

fn radio(c: CauseRadioNetwork) -> Cause {
    Cause::radioNetwork(c)
}

/// The failure message that rejects a handover request whose IEs are
/// wrong (TS 36.413 10.3.4.2, 10.3.5): HANDOVER PREPARATION FAILURE or PATH
/// SWITCH REQUEST FAILURE, with the ids the message has; `None` when they
/// cannot be read (an ERROR INDICATION answers then).
pub(crate) fn reject_failure(pdu: &S1APPDU<'_>, cause: Cause) -> Option<Option<Vec<u8>>> {
    let enb = pdu.ie::<ie::ENB_UE_S1AP_ID>().and_then(|r| r.ok())?.0;
    match pdu.kind() {
        oxirush_s1ap::S1apPduKind::Initiating_HandoverPreparation => {
            let mme = pdu.ie::<ie::MME_UE_S1AP_ID>().and_then(|r| r.ok())?.0;
            Some(s1ap_build::handover_preparation_failure(mme, enb, cause))
        }
        oxirush_s1ap::S1apPduKind::Initiating_PathSwitchRequest => {
            let mme = pdu.ie::<ie::SourceMME_UE_S1AP_ID>().and_then(|r| r.ok())?.0;
            Some(s1ap_build::path_switch_request_failure(mme, enb, cause))
        }
        _ => None,
    }
}

impl Mme {
    /// The handover of UE `id`, if one runs.
    fn running(&self, id: u32) -> Option<&Handover> {
        self.ues.get(&id).filter(|u| u.step == Step::Handover).and_then(|u| u.handover.as_ref())
    }

    fn running_mut(&mut self, id: u32) -> Option<&mut Handover> {
        self.touch(id);
        self.ues.get_mut(&id).filter(|u| u.step == Step::Handover).and_then(|u| u.handover.as_mut())
    }

    /// HANDOVER REQUIRED (TS 36.413 8.4.1.2) from the source eNB.
    pub(crate) fn on_handover_required(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, HandoverRequired,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
            req ho_type: HandoverType = HandoverType(t),
            req cause: Cause = Cause(c),
            req target: TargetID = TargetID(t),
            opt direct: DirectForwardingPathAvailability = Direct_Forwarding_Path_Availability(d),
            req container: Vec<u8> = Source_ToTarget_TransparentContainer(c) => c.0.to_vec(),
        );
        // An idle UE, or one of another eNB: ERROR INDICATION (10.6).
        let Some(id) = self.known_ue(assoc, mme_id, enb_id) else { return Ok(()) };
        let source = self.ues[&id].s1.unwrap_or(S1Conn { assoc, enb_ue_s1ap_id: enb_id, stream: 0 });
        let fail = |m: &mut Mme, counter: &'static str, c: CauseRadioNetwork| {
            m.counters.incr(counter);
            let data = s1ap_build::handover_preparation_failure(id, enb_id, radio(c));
            m.push_s1(source.assoc, source.stream, data);
        };
        if ho_type != HandoverType::intralte {
            fail(self, "handover_required_not_intra_lte", CauseRadioNetwork::ho_target_not_allowed);
            return Ok(());
        }
        let target_assoc = target_enb(&target)
            .and_then(|g| self.enbs.values().find(|e| e.setup && e.global_enb_id == Some(g)))
            .map(|e| e.assoc);
        let ue = &self.ues[&id];
        // The same again from the same source while its preparation waits
        // for the target (an elastic MME host took the first and died
        // before its HANDOVER REQUEST went out; its heir has the UE at this
        // step): the preparation goes on, its request sent again.
        let repeat = ue.step == Step::Handover
            && ue.s1.is_some_and(|s| s.assoc == assoc && s.enb_ue_s1ap_id == enb_id)
            && ue
                .handover
                .as_ref()
                .is_some_and(|h| h.phase == Phase::Preparation && Some(h.target_assoc) == target_assoc);
        // One procedure at a time: a second Handover Required while one
        // runs, or one during another procedure, fails (8.4.1.4).
        if !repeat
            && (ue.emm != EmmState::Registered
                || ue.step != Step::Idle
                || ue.esm.is_some()
                || ue.sessions.is_empty()
                || ue.security.is_none())
        {
            fail(self, "handover_required_busy", CauseRadioNetwork::interaction_with_other_procedure);
            return Ok(());
        }
        let Some(target_assoc) = target_assoc else {
            fail(self, "handover_required_unknown_target", CauseRadioNetwork::unknown_targetID);
            return Ok(());
        };
        let ue = &self.ues[&id];
        let erabs: Vec<HandoverErab> = ue
            .sessions
            .iter()
            .map(|s| HandoverErab { ebi: s.ebi, qci: s.qci, arp: s.arp, sgw_s1u: s.sgw_s1u })
            .collect();
        let ue_ambr = ue.ue_ambr();
        let (eea, eia) = ue.security.as_ref().map(|s| (s.ue_eea, s.ue_eia)).unwrap_or((0, 0));
        // TS 33.401 7.2.8.4.4: the target gets a fresh {NCC, NH}.
        let Some((ncc, nh)) = self.next_nh(id) else { return Ok(()) };
        let stream = self.enbs.get_mut(&target_assoc).map(|e| e.pick_stream()).unwrap_or(0);
        let data = s1ap_build::handover_request(HandoverRequestData {
            mme_ue_id: id,
            cause,
            ue_ambr,
            erabs: &erabs,
            container: &container,
            eea,
            eia,
            ncc,
            nh: &nh,
        });
        self.push_s1(target_assoc, stream, data);
        if repeat {
            self.counters.incr("handover_required_repeated");
            if let Some(h) = self.ues.get_mut(&id).and_then(|u| u.handover.as_mut()) {
                h.target_stream = stream;
            }
        } else {
            self.counters.incr("s1_handover_required");
            let mut h = Handover::new(Phase::Preparation, target_assoc, stream);
            h.direct = direct.is_some();
            if let Some(ue) = self.ues.get_mut(&id) {
                ue.step = Step::Handover;
                ue.handover = Some(h);
            }
        }
        self.start_guard(id, GuardKind::TS1RelocPrep, Duration::from_millis(self.cfg.ts1reloc_prep_ms), 0);
        Ok(())
    }

    /// HANDOVER REQUEST ACKNOWLEDGE (TS 36.413 8.4.2.2) from the target.
    pub(crate) fn on_handover_request_ack(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, HandoverRequestAcknowledge,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
            req container: Vec<u8> = Target_ToSource_TransparentContainer(c) => c.0.to_vec(),
        );
        let mut admitted = Vec::new();
        for item in pdu.items::<ie::E_RABAdmittedList>() {
            let item = item?;
            let dl = match (&item.dl_transport_layer_address, &item.dl_gtp_teid) {
                (Some(a), Some(t)) => fteid_of(a, t),
                _ => None,
            };
            if let Some(s1u) = fteid_of(&item.transport_layer_address, &item.gtp_teid) {
                admitted.push(Admitted { ebi: item.e_rab_id.0.min(255) as u8, s1u, dl_forwarding: dl });
            }
        }
        // The same acknowledge again from the target connection the
        // preparation took (an elastic MME host handled it and died before
        // what it sent went out; its heir has the UE past it): the forwarding
        // tunnel is asked again (the heir's resumed request), or the command,
        // sent, goes again, as the dead host sent it.
        let again = self.running(mme_id).and_then(|h| {
            let linked = h.target.is_some_and(|t| t.assoc == assoc && t.enb_ue_s1ap_id == enb_id);
            let forwarding = || h.admitted.iter().filter_map(|a| a.dl_forwarding.map(|f| (a.ebi, f))).collect();
            match h.phase {
                Phase::CreateForwarding if linked => Some(None),
                Phase::Execution if linked => Some(Some(if h.direct { forwarding() } else { Vec::new() })),
                _ => None,
            }
        });
        if let Some(command) = again {
            self.counters.incr("handover_request_ack_repeated");
            if let Some(forwarding) = command {
                self.send_handover_command(mme_id, &forwarding);
            }
            return Ok(());
        }
        let preparing = self.running(mme_id).is_some_and(|h| h.phase == Phase::Preparation && h.target_assoc == assoc);
        if !preparing {
            // A preparation that ended (cancelled, timed out): the target
            // allocated for nothing; release it (TS 36.413 8.4.5.2).
            self.counters.incr("handover_request_ack_unexpected");
            let cause = radio(CauseRadioNetwork::handover_cancelled);
            self.push_s1(assoc, 0, s1ap_build::ue_context_release_command(mme_id, enb_id, cause));
            return Ok(());
        }
        let id = mme_id;
        let Some(h) = self.running(id) else { return Ok(()) };
        let target = S1Conn { assoc, enb_ue_s1ap_id: enb_id, stream: h.target_stream };
        let direct = h.direct;
        self.link_conn(id, target);
        let ebis: Vec<u8> = self.ues[&id].sessions.iter().map(|s| s.ebi).collect();
        admitted.retain(|a| ebis.contains(&a.ebi));
        if admitted.is_empty() {
            if let Some(h) = self.running_mut(id) {
                h.target = Some(target);
            }
            self.counters.incr("handover_nothing_admitted");
            self.fail_preparation(id, CauseRadioNetwork::ho_failure_in_target_EPC_eNB_or_target_system);
            return Ok(());
        }
        let forwarding: Vec<(u8, Fteid)> =
            admitted.iter().filter_map(|a| a.dl_forwarding.map(|f| (a.ebi, f))).collect();
        let Some(h) = self.running_mut(id) else { return Ok(()) };
        h.target = Some(target);
        h.admitted = admitted;
        h.target_to_source = container;
        match (direct, forwarding.is_empty()) {
            (true, _) => self.send_handover_command(id, &forwarding),
            (false, true) => self.send_handover_command(id, &[]),
            // TS 23.401 5.5.1.2.2 step 8: indirect forwarding through the S-GW.
            (false, false) => {
                h.phase = Phase::CreateForwarding;
                if !self.request_forwarding_tunnel(id) {
                    self.send_handover_command(id, &[]);
                }
            }
        }
        Ok(())
    }

    /// Create Indirect Data Forwarding Tunnel Request (TS 29.274 7.2.18)
    /// for the DL forwarding F-TEIDs the target admitted; whether it went.
    pub(crate) fn request_forwarding_tunnel(&mut self, id: u32) -> bool {
        let Some(ue) = self.ues.get(&id) else { return false };
        let (Some(h), Some(s)) = (ue.handover.as_ref(), ue.sessions.first()) else { return false };
        let bearers: Vec<ForwardingBearer> = h
            .admitted
            .iter()
            .filter_map(|a| a.dl_forwarding.map(|f| ForwardingBearer { ebi: Ebi(a.ebi), fteid: f }))
            .collect();
        if bearers.is_empty() {
            return false;
        }
        let req = CreateIndirectForwardingRequest { sgw_teid: s.sgw_s11.teid, bearers };
        self.request_s11(id, S11Request::CreateIndirectForwarding(req));
        true
    }

    /// HANDOVER COMMAND to the source (TS 36.413 8.4.1.2), TS1RELOCoverall.
    fn send_handover_command(&mut self, id: u32, forwarding: &[(u8, Fteid)]) {
        let Some(ue) = self.ues.get(&id) else { return };
        let (Some(source), Some(h)) = (ue.s1, ue.handover.as_ref()) else { return };
        let released: Vec<u8> =
            ue.sessions.iter().map(|s| s.ebi).filter(|e| !h.admitted.iter().any(|a| a.ebi == *e)).collect();
        let data = s1ap_build::handover_command(id, source.enb_ue_s1ap_id, forwarding, &released, &h.target_to_source);
        self.push_s1(source.assoc, source.stream, data);
        if let Some(h) = self.running_mut(id) {
            h.phase = Phase::Execution;
        }
        self.stop_guard(id, GuardKind::TS1RelocPrep);
        self.start_guard(id, GuardKind::TS1RelocOverall, Duration::from_millis(self.cfg.ts1reloc_overall_ms), 0);
        self.counters.incr("s1_handover_command");
    }

    /// The preparation ends unsuccessfully: HANDOVER PREPARATION FAILURE to
    /// the source (TS 36.413 8.4.1.3), the target released, the UE stays.
    fn fail_preparation(&mut self, id: u32, cause: CauseRadioNetwork) {
        if let Some(source) = self.ues.get(&id).and_then(|u| u.s1) {
            let data = s1ap_build::handover_preparation_failure(id, source.enb_ue_s1ap_id, radio(cause));
            self.push_s1(source.assoc, source.stream, data);
        }
        self.abandon_handover(id, CauseRadioNetwork::handover_cancelled);
    }

    /// End the handover of `id` with the UE on its source: the target's
    /// connection (if it allocated one) is released, the forwarding tunnel
    /// deleted, the guards stopped.
    fn abandon_handover(&mut self, id: u32, cause: CauseRadioNetwork) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let Some(h) = ue.handover.take() else { return };
        if ue.step == Step::Handover {
            ue.step = Step::Idle;
        }
        let current = ue.s1;
        if let Some(t) = h.target.filter(|t| Some(*t) != current) {
            self.unlink_s1(id, t);
            self.push_s1(t.assoc, t.stream, s1ap_build::ue_context_release_command(id, t.enb_ue_s1ap_id, radio(cause)));
        }
        self.end_guards_and_tunnel(id, &h);
    }

    fn end_guards_and_tunnel(&mut self, id: u32, h: &Handover) {
        self.stop_guard(id, GuardKind::TS1RelocPrep);
        self.stop_guard(id, GuardKind::TS1RelocOverall);
        // A tunnel made, or being made (its response may cross the delete).
        if h.tunnel || h.phase == Phase::CreateForwarding {
            self.delete_forwarding_tunnel(id);
        }
    }

    /// Delete Indirect Data Forwarding Tunnel (TS 23.401 5.5.1.2.2 step 21).
    fn delete_forwarding_tunnel(&mut self, id: u32) {
        let Some(s) = self.ues.get(&id).and_then(|u| u.sessions.first()) else { return };
        let req = DeleteIndirectForwardingRequest { sgw_teid: s.sgw_s11.teid };
        self.counters.incr("handover_forwarding_tunnel_deleted");
        self.request_s11(id, S11Request::DeleteIndirectForwarding(req));
    }

    /// HANDOVER FAILURE (TS 36.413 8.4.2.3) from the target.
    pub(crate) fn on_handover_failure(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, HandoverFailure,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
        );
        if !self.running(mme_id).is_some_and(|h| h.phase == Phase::Preparation && h.target_assoc == assoc) {
            self.counters.incr("handover_failure_unexpected");
            return Ok(());
        }
        self.counters.incr("handover_failure_from_target");
        self.fail_preparation(mme_id, CauseRadioNetwork::ho_failure_in_target_EPC_eNB_or_target_system);
        Ok(())
    }

    /// ENB STATUS TRANSFER (TS 36.413 8.4.6) from the source: the container
    /// goes as it is to the target in MME STATUS TRANSFER (8.4.7).
    pub(crate) fn on_enb_status_transfer(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, ENBStatusTransfer,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
            req container: ENBStatusTransferTransparentContainer = eNB_StatusTransfer_TransparentContainer(c) => c,
        );
        // Late: the target's HANDOVER NOTIFY (another association) came
        // first and the source's connection is being released. The UE is
        // at the target; nothing to forward, and nothing wrong to report.
        let late = self.running(mme_id).is_some_and(|h| {
            matches!(h.phase, Phase::Completion { source, .. } if source.assoc == assoc && source.enb_ue_s1ap_id == enb_id)
        });
        if late {
            self.counters.incr("status_transfer_after_handover");
            return Ok(());
        }
        let Some(id) = self.known_ue(assoc, mme_id, enb_id) else { return Ok(()) };
        let target = self.running(id).filter(|h| h.phase == Phase::Execution).and_then(|h| h.target);
        let Some(t) = target else {
            self.counters.incr("status_transfer_without_handover");
            let cause = Cause::protocol(CauseProtocol::message_not_compatible_with_receiver_state);
            self.push_s1(assoc, 0, s1ap_build::error_indication(Some(mme_id), Some(enb_id), cause));
            return Ok(());
        };
        self.push_s1(t.assoc, t.stream, s1ap_build::mme_status_transfer(id, t.enb_ue_s1ap_id, container));
        Ok(())
    }

    /// HANDOVER NOTIFY (TS 36.413 8.4.3) from the target: the UE is there.
    pub(crate) fn on_handover_notify(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, HandoverNotify,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
            lax cgi: EUTRANCGI = EUTRAN_CGI(c) => c,
            lax tai: TAI = TAI(t) => t,
        );
        let conn = |c: &S1Conn| c.assoc == assoc && c.enb_ue_s1ap_id == enb_id;
        let ours =
            self.running(mme_id).is_some_and(|h| h.phase == Phase::Execution && h.target.is_some_and(|t| conn(&t)));
        // Again on the connection the UE moved to, its handover completing
        // (an elastic MME host handled it and died before what it sent went
        // out; its heir has the UE past it, its Modify Bearers asked again,
        // the source's release due at TS1RELOCoverall at the latest):
        // nothing to do.
        let moved = self.ues.get(&mme_id).is_some_and(|u| {
            u.s1.is_some_and(|s| conn(&s))
                && u.handover.as_ref().is_some_and(|h| matches!(h.phase, Phase::Completion { .. }))
        });
        if !ours && moved {
            self.counters.incr("handover_notify_repeated");
            return Ok(());
        }
        if !ours {
            // Without preparation: the UE's own connection (or a target's
            // out of turn) is not in a state for it; another id is unknown.
            self.counters.incr("handover_notify_unexpected");
            let known = self.ues.get(&mme_id).is_some_and(|u| {
                u.s1.is_some_and(|s| conn(&s)) || u.handover.as_ref().and_then(|h| h.target).is_some_and(|t| conn(&t))
            });
            let cause = match known {
                true => Cause::protocol(CauseProtocol::message_not_compatible_with_receiver_state),
                false => radio(CauseRadioNetwork::unknown_mme_ue_s1ap_id),
            };
            self.push_s1(assoc, 0, s1ap_build::error_indication(Some(mme_id), Some(enb_id), cause));
            return Ok(());
        }
        let id = mme_id;
        let Some(ue) = self.ues.get_mut(&id) else { return Ok(()) };
        let Some(h) = ue.handover.as_mut() else { return Ok(()) };
        let (Some(target), Some(source)) = (h.target, ue.s1) else { return Ok(()) };
        ue.s1 = Some(target);
        if let Some(t) = tai.as_ref().and_then(tai_of) {
            ue.tai = Some(t);
        }
        if let Some(c) = cgi.as_ref().and_then(ecgi_of) {
            ue.ecgi = Some(c);
        }
        // TS 23.401 5.5.1.2.2 step 16: Modify Bearer per PDN connection.
        let mut requests = Vec::new();
        for s in ue.sessions.iter_mut() {
            if let Some(a) = h.admitted.iter().find(|a| a.ebi == s.ebi) {
                s.enb_s1u = Some(a.s1u);
                requests.push(ModifyBearerRequest { sgw_teid: s.sgw_s11.teid, ebi: Ebi(s.ebi), s1u_enb_fteid: a.s1u });
            }
        }
        h.pending = requests.len().min(u8::MAX as usize) as u8;
        h.phase = Phase::Completion { source, released: false };
        for r in requests {
            self.request_s11(id, S11Request::ModifyBearer(r));
        }
        // The source is released (TS 36.413 8.3.3); TS1RELOCoverall now
        // guards the completion of that release.
        self.unlink_s1(id, source);
        let cause = radio(CauseRadioNetwork::successful_handover);
        self.push_s1(
            source.assoc,
            source.stream,
            s1ap_build::ue_context_release_command(id, source.enb_ue_s1ap_id, cause),
        );
        self.start_guard(id, GuardKind::TS1RelocOverall, Duration::from_millis(self.cfg.ts1reloc_overall_ms), 0);
        self.counters.incr("s1_handover_notify");
        self.maybe_complete(id);
        Ok(())
    }

    /// The S1 handover ends once the Modify Bearers are answered and the
    /// source's release is complete.
    fn maybe_complete(&mut self, id: u32) {
        let Some(h) = self.running(id) else { return };
        if h.pending > 0 || !matches!(h.phase, Phase::Completion { released: true, .. }) {
            return;
        }
        self.complete_s1_handover(id);
    }

    fn complete_s1_handover(&mut self, id: u32) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let Some(h) = ue.handover.take() else { return };
        ue.step = Step::Idle;
        if h.failed {
            self.counters.incr("handover_modify_bearer_failed");
        }
        self.stop_guard(id, GuardKind::TS1RelocOverall);
        if h.tunnel {
            // Not at once: the source still forwards what reached it
            // before the path switch, and the End Marker after it.
            let hold = Duration::from_millis(self.cfg.indirect_forwarding_hold_ms);
            self.start_guard(id, GuardKind::IndirectForwarding, hold, 0);
        }
        self.counters.incr("s1_handover_completed");
        if h.release_requested {
            self.start_s1_release(id);
        }
    }

    /// UE CONTEXT RELEASE COMPLETE: the source's, after a handover.
    pub(crate) fn on_handover_release_complete(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) {
        extract_s1ap_ies!(pdu, UEContextReleaseComplete,
            lax mme_id: u32 = MME_UE_S1AP_ID(id),
            lax enb_id: u32 = eNB_UE_S1AP_ID(id),
        );
        let (Some(id), Some(enb_id)) = (mme_id, enb_id) else { return };
        let Some(h) = self.running_mut(id) else { return };
        if let Phase::Completion { source, released: false } = h.phase {
            if source.assoc == assoc && source.enb_ue_s1ap_id == enb_id {
                h.phase = Phase::Completion { source, released: true };
                self.maybe_complete(id);
            }
        }
    }

    /// HANDOVER CANCEL (TS 36.413 8.4.5) from the source, before or after
    /// the Handover Command: the target's resources released, the
    /// forwarding tunnel deleted, HANDOVER CANCEL ACKNOWLEDGE; the UE stays.
    pub(crate) fn on_handover_cancel(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, HandoverCancel,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
        );
        let Some(id) = self.known_ue(assoc, mme_id, enb_id) else { return Ok(()) };
        match self.running(id).map(|h| h.phase) {
            Some(Phase::Preparation | Phase::CreateForwarding | Phase::Execution) => {
                self.counters.incr("handover_cancelled");
                self.abandon_handover(id, CauseRadioNetwork::handover_cancelled);
            }
            // Too late (the UE is at the target) or nothing to cancel.
            _ => self.counters.incr("handover_cancel_without_handover"),
        }
        self.push_s1(assoc, 0, s1ap_build::handover_cancel_acknowledge(id, enb_id));
        Ok(())
    }

    /// An S11 answer while a handover runs, or a forwarding tunnel's.
    pub(crate) fn on_handover_s11(&mut self, id: u32, r: Result<S11Response, TransportError>) {
        let phase = self.running(id).map(|h| h.phase);
        match (phase, r) {
            (Some(Phase::PathSwitch), r) => self.on_path_switch_s11(id, r),
            (Some(Phase::CreateForwarding), Ok(S11Response::CreateIndirectForwarding(c))) if c.cause.is_accepted() => {
                if let Some(h) = self.running_mut(id) {
                    h.tunnel = true;
                }
                let fwd: Vec<(u8, Fteid)> = c.bearers.iter().map(|b| (b.ebi.0, b.fteid)).collect();
                self.send_handover_command(id, &fwd);
            }
            (Some(Phase::CreateForwarding), Ok(S11Response::CreateIndirectForwarding(_)) | Err(_)) => {
                self.counters.incr("handover_forwarding_tunnel_failed");
                if let Some(h) = self.running_mut(id) {
                    h.phase = Phase::Preparation;
                }
                self.fail_preparation(id, CauseRadioNetwork::ho_failure_in_target_EPC_eNB_or_target_system);
            }
            (Some(Phase::Completion { .. }), Ok(S11Response::ModifyBearer(m))) => {
                if let Some(h) = self.running_mut(id) {
                    h.pending = h.pending.saturating_sub(1);
                    h.failed |= !m.cause.is_accepted();
                }
                self.maybe_complete(id);
            }
            (Some(Phase::Completion { .. }), Err(_)) => {
                if let Some(h) = self.running_mut(id) {
                    h.pending = h.pending.saturating_sub(1);
                    h.failed = true;
                }
                self.maybe_complete(id);
            }
            // A tunnel made after its handover ended: deleted at once.
            (_, Ok(S11Response::CreateIndirectForwarding(c))) if c.cause.is_accepted() => {
                self.delete_forwarding_tunnel(id);
            }
            (_, Ok(S11Response::DeleteIndirectForwarding(c))) if !c.is_accepted() => {
                self.counters.incr("s11_delete_forwarding_tunnel_failed");
            }
            (_, Ok(S11Response::DeleteIndirectForwarding(_) | S11Response::CreateIndirectForwarding(_))) => {}
            (_, Ok(S11Response::DeleteSession(_) | S11Response::ModifyBearer(_))) => {}
            (_, Err(_)) => self.counters.incr("s11_transport_error"),
            _ => self.counters.incr("s11_unexpected_response"),
        }
    }

    /// The association `assoc` is gone (or reset) while UE `id` hands over.
    /// The handover ends; returns whether the UE keeps an S1 connection
    /// elsewhere (so that the caller leaves it alone).
    pub(crate) fn handover_s1_lost(&mut self, assoc: AssocId, id: u32) -> bool {
        let Some(ue) = self.ues.get(&id) else { return false };
        let Some(h) = ue.handover.clone() else { return false };
        let on_source = ue.s1.is_some_and(|s| s.assoc == assoc);
        match h.phase {
            // The UE's connection is the target's already: it goes idle.
            Phase::PathSwitch | Phase::Completion { .. } => {
                self.counters.incr("handover_enb_lost");
                if let Some(u) = self.ues.get_mut(&id) {
                    u.handover = None;
                    if u.step == Step::Handover {
                        u.step = Step::Idle;
                    }
                }
                self.end_guards_and_tunnel(id, &h);
                false
            }
            // The source is lost: the target is released, the UE goes idle.
            _ if on_source => {
                self.counters.incr("handover_source_lost");
                self.abandon_handover(id, CauseRadioNetwork::handover_cancelled);
                false
            }
            // The target is lost: the UE stays on the source.
            phase => {
                self.counters.incr("handover_target_lost");
                if let Some(t) = h.target {
                    self.unlink_s1(id, t);
                }
                if let Some(u) = self.ues.get_mut(&id) {
                    if let Some(h) = u.handover.as_mut() {
                        h.target = None;
                    }
                }
                match phase {
                    Phase::Preparation | Phase::CreateForwarding => {
                        self.fail_preparation(id, CauseRadioNetwork::ho_failure_in_target_EPC_eNB_or_target_system)
                    }
                    _ => self.abandon_handover(id, CauseRadioNetwork::handover_cancelled),
                }
                true
            }
        }
    }

    /// The UE context goes (detach, abort) while a handover runs: the
    /// target's connection is released.
    pub(crate) fn drop_handover(&mut self, id: u32) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let Some(h) = ue.handover.take() else { return };
        let current = ue.s1;
        if let Some(t) = h.target.filter(|t| Some(*t) != current) {
            self.unlink_s1(id, t);
            let cause = radio(CauseRadioNetwork::handover_cancelled);
            self.push_s1(t.assoc, t.stream, s1ap_build::ue_context_release_command(id, t.enb_ue_s1ap_id, cause));
        }
    }

    /// TS1RELOCprep expired (TS 36.413 8.4.1.2): the preparation fails.
    pub(crate) fn on_reloc_prep_expiry(&mut self, id: u32) {
        if self.running(id).is_some_and(|h| matches!(h.phase, Phase::Preparation | Phase::CreateForwarding)) {
            self.counters.incr("ts1relocprep_expiry");
            self.fail_preparation(id, CauseRadioNetwork::tS1relocprep_expiry);
        }
    }

    /// The forwarding tunnel of a completed S1 handover has been kept long
    /// enough: deleted (TS 23.401 5.5.1.2.2 step 21), unless a handover
    /// running now has replaced it (that one deletes its own).
    pub(crate) fn on_indirect_forwarding_expiry(&mut self, id: u32) {
        if self.running(id).is_some_and(|h| h.tunnel || h.phase == Phase::CreateForwarding) {
            return;
        }
        self.delete_forwarding_tunnel(id);
    }

    /// TS1RELOCoverall expired (TS 36.413 8.4.1.2): without a Handover
    /// Notify, both S1 connections are released and the UE goes ECM-IDLE;
    /// after it, the source's release is taken as done.
    pub(crate) fn on_reloc_overall_expiry(&mut self, id: u32) {
        match self.running(id).map(|h| h.phase) {
            Some(Phase::Execution) => {
                self.counters.incr("ts1relocoverall_expiry");
                self.abandon_handover(id, CauseRadioNetwork::tS1relocoverall_expiry);
                if let Some(s) = self.ues.get(&id).and_then(|u| u.sessions.first()) {
                    let req = mobicore_common::s11::ReleaseAccessBearersRequest { sgw_teid: s.sgw_s11.teid };
                    self.request_s11(id, S11Request::ReleaseAccessBearers(req));
                }
                if let Some(u) = self.ues.get_mut(&id) {
                    u.sessions.iter_mut().for_each(|s| s.enb_s1u = None);
                }
                self.release_s1(id, radio(CauseRadioNetwork::tS1relocoverall_expiry));
            }
            Some(Phase::Completion { .. }) => {
                self.counters.incr("ts1relocoverall_expiry_source_release");
                self.complete_s1_handover(id);
            }
            _ => {}
        }
    }
}
