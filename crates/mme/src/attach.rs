//! Attach (TS 24.301 5.5.1.2, TS 23.401 5.3.2.1): identification, EPS-AKA,
//! NAS security, Update Location, Create Session, Initial Context Setup with
//! Attach Accept, Modify Bearer, Attach Complete. This file has the start,
//! the subscription step, the end and the rejections; the common procedures
//! are in their own modules.

use crate::context::{AttachData, EmmState, PdnRequest, Step};
use crate::mme::Mme;
use crate::nas_build;
use crate::s1ap_handler::S1Result;
use mobicore_common::s6a::{S6aError, S6aRequest, SubscriptionData, UpdateLocationRequest};
use mobicore_common::sctp_api::AssocId;
use mobicore_common::Imsi;
use oxirush_nas::nas_eps::*;
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::s1ap::{CauseNas, S1APPDU};

/// ULR-Flags (TS 29.272 7.3.7): S6a/S6d-Indicator and Initial-Attach-Indicator.
const ULR_FLAGS: u32 = (1 << 1) | (1 << 5);

/// Terminal-Information of a 16-digit IMEISV (TS 23.003 6.2.2): IMEI is
/// TAC || SNR (14 digits), Software-Version the SVN (TS 29.272 7.3.3-5).
pub fn terminal_information(imeisv: &str) -> Option<mobicore_common::s6a::TerminalInformation> {
    let ok = imeisv.len() == 16 && imeisv.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| mobicore_common::s6a::TerminalInformation {
        imei: Some(imeisv[..14].to_string()),
        software_version: Some(imeisv[14..].to_string()),
        meid: None,
    })
}

/// The EMM cause for an S6a error (TS 29.272 Annex A, Table A.1).
pub fn emm_cause_for(e: S6aError) -> EmmCause {
    match e {
        S6aError::UserUnknown => EmmCause::EpsServicesAndNonEpsServicesNotAllowed,
        S6aError::UnknownEpsSubscription => EmmCause::EpsServicesNotAllowed,
        S6aError::RoamingNotAllowed => EmmCause::PlmnNotAllowed,
        S6aError::RatNotAllowed => EmmCause::NoSuitableCellsInTrackingArea,
        S6aError::AuthenticationDataUnavailable | S6aError::UnableToComply | S6aError::Other(_) => {
            EmmCause::NetworkFailure
        }
    }
}

/// What a PDN CONNECTIVITY REQUEST (TS 24.301 8.3.20) asks for: the APN,
/// the PDN type, the ESM information transfer flag (9.9.4.5) and the PCO
/// or ePCO (the ePCO when both came, 6.5.1.2).
pub(crate) fn pdn_request(pti: u8, pdn: &NasPdnConnectivityRequest) -> PdnRequest {
    let epco = pdn.extended_protocol_configuration_options.as_ref().map(|e| e.value.to_vec());
    let pco = pdn.protocol_configuration_options.as_ref().map(|p| p.value.to_vec());
    PdnRequest {
        pti,
        apn: pdn.access_point_name.as_ref().and_then(|a| a.as_string()),
        pdn_type: pdn.pdn_type.pdn_type_raw(),
        esm_information_transfer: pdn.esm_information_transfer_flag.as_ref().is_some_and(|f| f.is_required()),
        epco: epco.is_some(),
        pco: epco.or(pco),
    }
}

impl Mme {
    /// ATTACH REQUEST (TS 24.301 5.5.1.2.3). Nothing of another context
    /// of the same UE changes until this attach has passed authentication
    /// and security mode ([`Mme::claim_identity`], 5.5.1.2.7 e, 4.4.4.3):
    /// an unauthenticated request naming a registered UE leaves it working.
    pub(crate) fn on_attach_request(&mut self, id: u32, req: NasAttachRequest) {
        // A second ATTACH REQUEST restarts the procedure (5.5.1.2.7 d, e);
        // this context's own session, if any, goes at the claim.
        self.stop_timer(id);
        let cap = req.ue_network_capability.clone();
        let esm = match req.esm_message_container.decode_as_esm_message() {
            Ok(NasEpsMessage::Esm(h, NasEsmMessage::PdnConnectivityRequest(p))) => Some((h, p)),
            _ => None,
        };
        let Some((esm_header, pdn)) = esm else {
            // 5.5.1.2.3: the container must hold a PDN CONNECTIVITY REQUEST.
            self.counters.incr("attach_bad_esm_container");
            self.reject_attach(id, EmmCause::InvalidMandatoryInformation, None);
            return;
        };
        let data = AttachData {
            eea: cap.eea_byte(),
            eia: cap.eia_byte(),
            ue_network_capability: cap,
            pdn: pdn_request(esm_header.procedure_transaction_identity, &pdn),
            by_guti: false,
            imsi_requested: false,
        };
        let identity = &req.eps_mobile_identity;
        let imsi = identity.as_imsi().and_then(|i| i.to_string().parse::<Imsi>().ok());
        let known = identity.as_guti().and_then(|g| self.known_guti(&g));
        let Some(ue) = self.ues.get_mut(&id) else {
            return;
        };
        ue.emm = EmmState::CommonProcedureInitiated;
        ue.attach = Some(data);
        ue.auth = None;
        ue.security = None;
        ue.ics_done = false;
        ue.attach_complete = false;
        match (imsi, known) {
            (Some(imsi), _) => {
                self.set_imsi(id, imsi);
                self.start_authentication(id, None);
            }
            (None, Some((_old, imsi))) => {
                // A GUTI of ours that we know: reuse the identity, run AKA
                // again; the old context goes once this one is authenticated.
                if let Some(a) = self.ues.get_mut(&id).and_then(|u| u.attach.as_mut()) {
                    a.by_guti = true;
                }
                self.set_imsi(id, imsi);
                self.start_authentication(id, None);
            }
            // TS 24.301 5.5.1.2.3: unknown GUTI -> identification (5.4.4).
            (None, None) => self.start_identification(id),
        }
    }

    /// The UE context and IMSI of a GUTI that this MME allocated.
    fn known_guti(&self, g: &oxirush_nas::nas_eps::Guti) -> Option<(u32, Imsi)> {
        let ours = nas_build::nas_plmn(&self.cfg.plmn)?;
        if g.plmn() != ours || g.mme_group_id() != self.cfg.mme_group_id || g.mme_code() != self.cfg.mme_code {
            return None;
        }
        let old = *self.by_mtmsi.get(&g.m_tmsi())?;
        let imsi = self.ues.get(&old)?.imsi.clone()?;
        Some((old, imsi))
    }

    /// The IMSI this attach claims, not yet proven: the UE's other
    /// contexts stay as they are.
    pub(crate) fn set_imsi(&mut self, id: u32, imsi: Imsi) {
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.imsi = Some(imsi);
        }
    }

    /// After SECURITY MODE COMPLETE the UE has proven its IMSI: only now
    /// are the EMM context and EPS bearers of an earlier attach deleted
    /// (TS 24.301 5.5.1.2.7 e), this context's own and another's, and the
    /// IMSI bound to this context.
    pub(crate) fn claim_identity(&mut self, id: u32) {
        self.delete_session_detached(id);
        let Some(imsi) = self.ues.get(&id).and_then(|u| u.imsi.clone()) else {
            return;
        };
        if let Some(&other) = self.by_imsi.get(&imsi) {
            if other != id {
                self.counters.incr("ue_context_replaced");
                self.abort_ue(other, CauseNas::normal_release);
            }
        }
        self.by_imsi.insert(imsi, id);
    }

    /// After NAS security: Update Location (TS 23.401 5.3.2.1 step 8).
    pub(crate) fn start_update_location(&mut self, id: u32) {
        let Some(ue) = self.ues.get_mut(&id) else {
            return;
        };
        let Some(imsi) = ue.imsi.clone() else { return };
        ue.step = Step::UpdateLocation;
        let terminal_information = ue.imeisv.as_deref().and_then(terminal_information);
        if !self.s6a_room(id) {
            return;
        }
        let req = UpdateLocationRequest { imsi, visited_plmn: self.cfg.plmn, flags: ULR_FLAGS, terminal_information };
        self.request_s6a(id, S6aRequest::UpdateLocation(req));
    }

    pub(crate) fn on_update_location(&mut self, id: u32, r: Result<SubscriptionData, S6aError>) {
        match r {
            Ok(sub) => {
                if let Some(ue) = self.ues.get_mut(&id) {
                    ue.subscription = Some(sub);
                }
                self.start_create_session(id);
            }
            Err(e) => {
                self.counters.incr("s6a_update_location_rejected");
                self.reject_attach(id, emm_cause_for(e), None);
            }
        }
    }

    /// ATTACH COMPLETE (TS 24.301 5.5.1.2.4): the UE is EMM-REGISTERED.
    pub(crate) fn on_attach_complete(&mut self, id: u32, msg: NasAttachComplete) {
        let accepted = matches!(
            msg.esm_message_container.decode_as_esm_message(),
            Ok(NasEpsMessage::Esm(_, NasEsmMessage::ActivateDefaultEpsBearerContextAccept(_)))
        );
        if !accepted {
            // 6.4.1.5: the default bearer was refused; the attach fails.
            self.counters.incr("attach_default_bearer_rejected");
            self.abort_ue(id, CauseNas::unspecified);
            return;
        }
        self.stop_timer(id);
        let Some(ue) = self.ues.get_mut(&id) else {
            return;
        };
        ue.attach_complete = true;
        ue.emm = EmmState::Registered;
        ue.step = Step::Idle;
        ue.attach = None;
        ue.auth = None;
        self.counters.incr("attach_complete");
    }

    /// ATTACH REJECT (5.5.1.2.5), then release of the UE.
    pub(crate) fn reject_attach(&mut self, id: u32, cause: EmmCause, esm: Option<Vec<u8>>) {
        self.counters.incr("attach_reject");
        self.stop_timer(id);
        if let Some(plain) = nas_build::attach_reject(cause, esm) {
            let header = self.dl_header(id);
            self.send_dl_nas(id, &plain, header);
        }
        self.abort_ue(id, CauseNas::unspecified);
    }

    /// INITIAL CONTEXT SETUP FAILURE (TS 36.413 8.3.1.3): the attach fails.
    pub(crate) fn on_ics_failure(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, InitialContextSetupFailure,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
        );
        if let Some(id) = self.known_ue(assoc, mme_id, enb_id) {
            self.counters.incr("initial_context_setup_failure");
            // A registered UE (service request, TAU with the active flag)
            // stays registered and goes back to ECM-IDLE (TS 23.401 5.3.4.1).
            let registered = self.ues.get(&id).is_some_and(|u| u.emm == crate::context::EmmState::Registered);
            if registered {
                self.reestablish_failed(id);
                return Ok(());
            }
            self.stop_timer(id);
            self.abort_ue(id, CauseNas::unspecified);
        }
        Ok(())
    }
}
