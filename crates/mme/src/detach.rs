//! UE-initiated detach (TS 24.301 5.5.2.2, TS 23.401 5.3.8.2): Delete
//! Session at the S-GW for every PDN connection, then DETACH ACCEPT unless switched off, then the
//! release of the S1 connection; the UE context is forgotten.

use crate::context::{EmmState, NasTimerKind, Step};
use crate::mme::Mme;
use crate::mme::{OperatorCommand, OperatorOutcome};
use crate::nas_build;
use crate::paging::Paging;
use mobicore_common::s11::{DeleteSessionRequest, S11Request};
use mobicore_common::Ebi;
use oxirush_nas::nas_eps::NasDetachRequestUeOriginating;
use oxirush_s1ap::s1ap::{Cause, CauseNas};

impl Mme {
    /// DETACH REQUEST (UE originating), 5.5.2.2.2.
    pub(crate) fn on_detach_request(&mut self, id: u32, r: NasDetachRequestUeOriginating, verified: bool) {
        let switch_off = r.detach_type.is_switch_off();
        let Some(ue) = self.ues.get_mut(&id) else { return };
        if ue.security_active() && !verified {
            self.counters.incr("nas_unprotected_dropped");
            return;
        }
        self.counters.incr(if switch_off { "detach_switch_off" } else { "detach_normal" });
        ue.timer = None;
        ue.emm = EmmState::Deregistered;
        ue.esm = None;
        self.delete_sessions_then_release(id, switch_off);
    }

    /// Delete Session for every PDN connection (TS 23.401 5.3.8.2.1 step
    /// 2), then [`Self::finish_detach`]; DETACH ACCEPT goes to the UE unless
    /// `quiet` (switch-off, or the network's own detach).
    fn delete_sessions_then_release(&mut self, id: u32, quiet: bool) {
        let switch_off = quiet;
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let sessions = std::mem::take(&mut ue.sessions);
        if sessions.is_empty() {
            self.finish_detach(id, switch_off);
            return;
        }
        let pending = sessions.len().min(u8::MAX as usize) as u8;
        ue.step = Step::DetachDeleteSession { switch_off, pending };
        for s in sessions {
            let req = DeleteSessionRequest { sgw_teid: s.sgw_s11.teid, linked_ebi: Ebi(s.ebi) };
            self.request_s11(id, S11Request::DeleteSession(req));
        }
    }

    /// One Delete Session of the detach answered (or failed): the detach
    /// ends with the last.
    pub(crate) fn on_detach_delete_session(&mut self, id: u32, switch_off: bool, pending: u8) {
        if pending > 1 {
            if let Some(ue) = self.ues.get_mut(&id) {
                ue.step = Step::DetachDeleteSession { switch_off, pending: pending - 1 };
            }
            return;
        }
        self.finish_detach(id, switch_off);
    }

    /// After Delete Session: DETACH ACCEPT (not after a switch-off), UE
    /// CONTEXT RELEASE COMMAND with cause detach, and the context goes.
    pub(crate) fn finish_detach(&mut self, id: u32, switch_off: bool) {
        if !switch_off {
            if let Some(plain) = nas_build::detach_accept() {
                let header = self.dl_header(id);
                self.send_dl_nas(id, &plain, header);
            }
        }
        self.release_s1(id, Cause::nas(CauseNas::detach));
        self.remove_ue(id);
    }
}

impl Mme {
    /// An operator's command: a network-initiated detach (TS 24.301
    /// 5.5.2.3, TS 23.401 5.3.8.3); an idle UE is paged first (5.5.2.3.1).
    pub(crate) fn on_operator(&mut self, cmd: OperatorCommand) -> OperatorOutcome {
        match cmd {
            OperatorCommand::Detach { imsi, reattach_required } => {
                let Some(id) = self.by_imsi.get(&imsi).copied().filter(|id| self.ues.contains_key(id)) else {
                    self.counters.incr("operator_detach_unknown_imsi");
                    return OperatorOutcome::UnknownImsi;
                };
                let ue = &self.ues[&id];
                if matches!(ue.step, Step::NetworkDetach | Step::DetachDeleteSession { .. }) {
                    // A detach runs already: it is not started again.
                    self.counters.incr("operator_detach_in_progress");
                    return OperatorOutcome::DetachInProgress;
                }
                if ue.emm != EmmState::Registered {
                    // Attaching: the attach simply ends.
                    self.counters.incr("operator_detach_not_registered");
                    self.abort_ue(id, CauseNas::detach);
                    return OperatorOutcome::AttachAborted;
                }
                match ue.s1 {
                    Some(_) => {
                        self.start_network_detach(id, reattach_required);
                        OperatorOutcome::DetachStarted { paged: false }
                    }
                    None => {
                        self.page(id, Paging { ddn: false, detach: Some(reattach_required) });
                        OperatorOutcome::DetachStarted { paged: true }
                    }
                }
            }
        }
    }

    /// DETACH REQUEST to the connected UE under T3422 (5.5.2.3.1); the
    /// procedure that ran is dropped.
    pub(crate) fn start_network_detach(&mut self, id: u32, reattach_required: bool) {
        self.drop_handover(id);
        let Some(plain) = nas_build::detach_request_network(reattach_required) else {
            self.counters.incr("nas_encode_error");
            return;
        };
        let Some(ue) = self.ues.get_mut(&id) else { return };
        ue.step = Step::NetworkDetach;
        self.counters.incr("network_detach");
        let header = self.dl_header(id);
        self.send_dl_nas_timed(id, NasTimerKind::T3422, plain, header);
    }

    /// DETACH ACCEPT of the UE (5.5.2.3.2): T3422 stops; the PDN
    /// connections are deleted at the S-GW and the S1 connection released
    /// (TS 23.401 5.3.8.3 steps 2-6).
    pub(crate) fn on_detach_accept(&mut self, id: u32) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        if ue.step != Step::NetworkDetach {
            self.counters.incr("nas_unexpected_message");
            return;
        }
        ue.timer = None;
        ue.emm = EmmState::Deregistered;
        ue.esm = None;
        self.counters.incr("network_detach_accepted");
        self.delete_sessions_then_release(id, true);
    }
}
