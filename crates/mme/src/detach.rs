//! UE-initiated detach (TS 24.301 5.5.2.2, TS 23.401 5.3.8.2): Delete
//! Session at the S-GW for every PDN connection, then DETACH ACCEPT unless switched off, then the
//! release of the S1 connection; the UE context is forgotten.

use crate::context::{EmmState, Step};
use crate::mme::Mme;
use crate::nas_build;
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
        let sessions = std::mem::take(&mut ue.sessions);
        if sessions.is_empty() {
            self.finish_detach(id, switch_off);
            return;
        }
        // TS 23.401 5.3.8.2.1 step 2: a Delete Session per PDN connection.
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
    /// An operator's command (TS 24.301 5.5.2.3 for a detach).
    pub(crate) fn on_operator(&mut self, _cmd: crate::mme::OperatorCommand) {
        self.counters.incr("operator_command_unhandled");
    }
}
