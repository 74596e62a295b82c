//! S1 release (TS 23.401 5.3.5, TS 36.413 8.3.2/8.3.3): the eNB asks for a
//! release, the MME releases the S1-U bearers at the S-GW (Release Access
//! Bearers), then commands the release; the UE goes ECM-IDLE.

use crate::context::{EmmState, Step};
use crate::mme::Mme;
use crate::s1ap_handler::S1Result;
use mobicore_common::s11::{ReleaseAccessBearersRequest, S11Request};
use mobicore_common::sctp_api::AssocId;
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::s1ap::*;

impl Mme {
    /// UE CONTEXT RELEASE REQUEST (TS 36.413 8.3.2).
    pub(crate) fn on_release_request(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, UEContextReleaseRequest,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
        );
        let Some(id) = self.known_ue(assoc, mme_id, enb_id) else { return Ok(()) };
        // The target of a handover the core is still completing (Modify
        // Bearers in flight, the source's release): the release follows
        // the handover's end, in order.
        let on_current = self.ues[&id].s1.is_some_and(|s| s.assoc == assoc && s.enb_ue_s1ap_id == enb_id);
        if let Some(h) = self.ues.get_mut(&id).and_then(|u| u.handover.as_mut()) {
            let completing =
                matches!(h.phase, crate::s1_handover::Phase::Completion { .. } | crate::s1_handover::Phase::PathSwitch);
            if completing && on_current {
                h.release_requested = true;
                self.counters.incr("release_request_after_handover");
                return Ok(());
            }
        }
        let ue = &self.ues[&id];
        // A repeat while the release runs: its command answers both (TS
        // 36.413 8.3.2; an eNB's retry, or one a dead elastic MME host had
        // taken, sent again to its heir).
        if ue.step == Step::ReleaseAccessBearers {
            self.counters.incr("release_request_repeated");
            return Ok(());
        }
        // A release during a service request or TAU (radio link lost) leaves
        // the UE registered and idle (TS 23.401 5.3.5).
        let settled = ue.emm == EmmState::Registered
            && matches!(ue.step, Step::Idle | Step::ServiceRequest | Step::TauAccept { .. });
        match settled {
            true => self.start_s1_release(id),
            // A release in the middle of a procedure aborts it.
            false => {
                self.counters.incr("ue_aborted_release_request");
                self.abort_ue(id, CauseNas::unspecified);
            }
        }
        Ok(())
    }

    /// S1 release of a registered UE (TS 23.401 5.3.5 steps 2-5): Release
    /// Access Bearers at the S-GW, then the release command.
    pub(crate) fn start_s1_release(&mut self, id: u32) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        match ue.sessions.first() {
            Some(s) => {
                let req = ReleaseAccessBearersRequest { sgw_teid: s.sgw_s11.teid };
                ue.step = Step::ReleaseAccessBearers;
                self.request_s11(id, S11Request::ReleaseAccessBearers(req));
            }
            None => self.finish_s1_release(id),
        }
    }

    /// After Release Access Bearers: command the release, keep the UE idle.
    pub(crate) fn finish_s1_release(&mut self, id: u32) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        ue.step = Step::Idle;
        ue.timer = None;
        for s in ue.sessions.iter_mut() {
            s.enb_s1u = None;
        }
        let registered = ue.emm == EmmState::Registered;
        self.release_s1(id, Cause::radioNetwork(CauseRadioNetwork::user_inactivity));
        if registered {
            // TS 24.301 5.3.7: EMM-REGISTERED and ECM-IDLE.
            self.counters.incr("ue_idle");
            self.start_mobile_reachable(id);
            // Downlink data notified during the release: paged now.
            let running = self.paged.contains(&id);
            let pending = self.ues.get_mut(&id).filter(|_| !running).and_then(|u| u.paging.take());
            if let Some(why) = pending {
                self.page(id, why);
            }
        } else {
            self.remove_ue(id);
        }
    }

    /// UE CONTEXT RELEASE COMPLETE (TS 36.413 8.3.3.2). The S1 connection
    /// was forgotten when the command was sent; the UE is at rest now.
    pub(crate) fn on_release_complete(&mut self, _assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, UEContextReleaseComplete,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req _enb_id: u32 = eNB_UE_S1AP_ID(id),
        );
        if let Some(ue) = self.ues.get_mut(&mme_id).filter(|u| u.releasing.is_some()) {
            ue.releasing = None;
            self.touch(mme_id);
        }
        self.counters.incr("ue_context_release_complete");
        Ok(())
    }
}
