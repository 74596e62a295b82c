//! ESM information request (TS 24.301 6.6.1.2, TS 23.401 5.3.2.1 step 6):
//! a UE that sets the ESM information transfer flag in the PDN
//! CONNECTIVITY REQUEST of its ATTACH REQUEST sends its APN and PCO only
//! once NAS security is on, in the ESM INFORMATION RESPONSE. The APN it
//! names is then checked against the subscription like any other
//! ([`Mme::select_apn`]: #27 if not subscribed).

use crate::context::{NasTimerKind, Step};
use crate::mme::Mme;
use crate::nas_build;
use oxirush_nas::nas_eps::{EmmCause, EsmCause, NasEpsSecurityHeaderType, NasEsmInformationResponse};

impl Mme {
    /// After SECURITY MODE COMPLETE: the ESM INFORMATION REQUEST if the UE
    /// asked for it (6.6.1.2.2, T3489), else straight to Update Location.
    pub(crate) fn start_esm_information_or_update_location(&mut self, id: u32) {
        let pdn =
            self.ues.get(&id).and_then(|u| u.attach.as_ref()).map(|a| (a.pdn.esm_information_transfer, a.pdn.pti));
        let Some((true, pti)) = pdn else {
            self.start_update_location(id);
            return;
        };
        let Some(plain) = nas_build::esm_information_request(pti) else {
            self.counters.incr("nas_encode_error");
            self.start_update_location(id);
            return;
        };
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.step = Step::EsmInformation;
        }
        self.counters.incr("esm_information_request");
        let header = NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered;
        self.send_dl_nas_timed(id, NasTimerKind::T3489, plain, header);
    }

    /// ESM INFORMATION RESPONSE (6.6.1.2.3): the APN and PCO replace what
    /// the PDN CONNECTIVITY REQUEST left out; the attach goes on.
    pub(crate) fn on_esm_information_response(&mut self, id: u32, pti: u8, r: NasEsmInformationResponse) {
        let Some(attach) = self.ues.get_mut(&id).and_then(|u| u.attach.as_mut()) else { return };
        if attach.pdn.pti != pti {
            // 7.3.1: a PTI of no running procedure.
            self.counters.incr("esm_pti_mismatch");
            self.send_esm_status(id, 0, pti, EsmCause::PtiMismatch);
            return;
        }
        if let Some(apn) = r.access_point_name.as_ref().and_then(|a| a.as_string()) {
            attach.pdn.apn = Some(apn);
        }
        let epco = r.extended_protocol_configuration_options.as_ref().map(|e| e.value.to_vec());
        let pco = r.protocol_configuration_options.as_ref().map(|p| p.value.to_vec());
        if epco.is_some() || pco.is_some() {
            attach.pdn.epco = epco.is_some();
            attach.pdn.pco = epco.or(pco);
        }
        self.stop_timer(id);
        self.counters.incr("esm_information_response");
        self.start_update_location(id);
    }

    /// The third expiry of T3489 (6.6.1.2.6 b): the attach is rejected, with
    /// a PDN CONNECTIVITY REJECT #53 ESM information not received.
    pub(crate) fn on_t3489_abort(&mut self, id: u32) {
        let pti = self.ues.get(&id).and_then(|u| u.attach.as_ref()).map_or(0, |a| a.pdn.pti);
        let esm = nas_build::pdn_connectivity_reject(pti, EsmCause::EsmInformationNotReceived);
        self.reject_attach(id, EmmCause::EsmFailure, esm);
    }

    /// ESM STATUS (TS 24.301 6.7, 7.3), protected as every ESM message is.
    pub(crate) fn send_esm_status(&mut self, id: u32, ebi: u8, pti: u8, cause: EsmCause) {
        if let Some(plain) = nas_build::esm_status(ebi, pti, cause) {
            let header = self.dl_header(id);
            self.send_dl_nas(id, &plain, header);
        }
    }
}
