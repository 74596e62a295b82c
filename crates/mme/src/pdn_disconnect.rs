//! UE-requested PDN disconnect (TS 24.301 6.5.2, TS 23.401 5.10.3): a
//! protected PDN DISCONNECT REQUEST naming a PDN's linked EBI -> S11 Delete
//! Session Request -> E-RAB RELEASE COMMAND (TS 36.413 8.2.3) carrying the
//! DEACTIVATE EPS BEARER CONTEXT REQUEST (T3495) -> DEACTIVATE EPS BEARER
//! CONTEXT ACCEPT. The last PDN connection is not disconnected (#49).

use crate::context::{EmmState, EsmProcedure, NasTimerKind, Step};
use crate::erab_build;
use crate::mme::Mme;
use crate::nas_build;
use crate::s1ap_handler::S1Result;
use bytes::Bytes;
use mobicore_common::s11::{DeleteSessionRequest, S11Request};
use mobicore_common::sctp_api::AssocId;
use mobicore_common::Ebi;
use oxirush_nas::nas_eps::{EsmCause, NasEpsSecurityHeaderType, NasPdnDisconnectRequest};
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::s1ap::{Cause, CauseNas, S1APPDU};

impl Mme {
    /// PDN DISCONNECT REQUEST (6.5.2.2), integrity checked.
    pub(crate) fn on_pdn_disconnect_request(&mut self, id: u32, pti: u8, r: &NasPdnDisconnectRequest) {
        self.settle_cut_esm(id);
        let Some(ue) = self.ues.get(&id) else { return };
        if ue.emm != EmmState::Registered || ue.step != Step::Idle {
            self.counters.incr("esm_unexpected_message");
            return;
        }
        if let Some(running) = ue.esm.as_ref() {
            if running.pti() == pti {
                self.counters.incr("esm_duplicate_request");
            } else {
                self.reject_pdn_disconnect(id, pti, EsmCause::RequestRejectedUnspecified);
            }
            return;
        }
        let linked = r.linked_eps_bearer_identity.bearer_identity();
        let Some(s) = ue.sessions.iter().find(|s| s.ebi == linked) else {
            // 6.5.2.4: no PDN connection with that default bearer.
            return self.reject_pdn_disconnect(id, pti, EsmCause::InvalidEpsBearerIdentity);
        };
        if ue.sessions.len() == 1 {
            // 6.5.2.4: the last PDN connection stays (detach removes it).
            return self.reject_pdn_disconnect(id, pti, EsmCause::LastPdnDisconnectionNotAllowed);
        }
        let req = DeleteSessionRequest { sgw_teid: s.sgw_s11.teid, linked_ebi: Ebi(linked) };
        self.counters.incr("pdn_disconnect_request");
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.esm = Some(EsmProcedure::DeleteSession { pti, ebi: linked });
        }
        self.request_s11(id, S11Request::DeleteSession(req));
    }

    /// PDN DISCONNECT REJECT (6.5.2.4), protected.
    fn reject_pdn_disconnect(&mut self, id: u32, pti: u8, cause: EsmCause) {
        self.counters.incr("pdn_disconnect_reject");
        if let Some(plain) = nas_build::pdn_disconnect_reject(pti, cause) {
            let header = self.dl_header(id);
            self.send_dl_nas(id, &plain, header);
        }
    }

    /// After the Delete Session (answered or not: the UE asked for it), the
    /// bearers of the PDN are deactivated: E-RAB RELEASE COMMAND with the
    /// DEACTIVATE EPS BEARER CONTEXT REQUEST, #36 regular deactivation
    /// (6.4.4.2, with the PTI of the request).
    pub(crate) fn deactivate_pdn(&mut self, id: u32, pti: u8, ebi: u8) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        ue.sessions.retain(|s| s.ebi != ebi);
        let ue_ambr = ue.ue_ambr();
        let Some(s1) = ue.s1 else {
            // ECM-IDLE: the UE learns at its next service request (TS 24.301 6.4.4.2).
            return;
        };
        let plain = nas_build::deactivate_bearer_request(ebi, pti, EsmCause::RegularDeactivation);
        let header = NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered;
        let nas = plain.as_ref().and_then(|p| self.protect_dl(id, p, header));
        let (Some(plain), Some(nas)) = (plain, nas) else {
            self.counters.incr("nas_encode_error");
            return;
        };
        let cause = Cause::nas(CauseNas::normal_release);
        let data = erab_build::erab_release_command(id, s1.enb_ue_s1ap_id, ue_ambr, ebi, cause, Some(nas));
        self.push_s1(s1.assoc, s1.stream, data);
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.esm = Some(EsmProcedure::Deactivate { pti, ebi });
        }
        self.start_timer(id, NasTimerKind::T3495, Bytes::from(plain), header);
    }

    /// DEACTIVATE EPS BEARER CONTEXT ACCEPT (6.4.4.3).
    pub(crate) fn on_deactivate_accept(&mut self, id: u32, ebi: u8) {
        match self.ues.get(&id).and_then(|u| u.esm.as_ref()) {
            Some(EsmProcedure::Deactivate { ebi: e, .. }) if *e == ebi => {
                self.stop_timer(id);
                if let Some(ue) = self.ues.get_mut(&id) {
                    ue.esm = None;
                }
                self.counters.incr("pdn_disconnect_complete");
            }
            _ => self.counters.incr("esm_unexpected_message"),
        }
    }

    /// E-RAB RELEASE RESPONSE (TS 36.413 8.2.3.2): the eNB released the
    /// E-RAB; the bearer is gone already on our side.
    pub(crate) fn on_erab_release_response(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, ERABReleaseResponse,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
        );
        if self.known_ue(assoc, mme_id, enb_id).is_some() {
            self.counters.incr("erab_release_response");
        }
        Ok(())
    }
}
