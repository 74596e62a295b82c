//! UE-requested PDN connectivity after attach (TS 24.301 6.5.1, TS 23.401
//! 5.10.2): a protected PDN CONNECTIVITY REQUEST for another subscribed
//! APN -> S11 Create Session Request (the UE's MME S11 F-TEID, a new EBI)
//! -> E-RAB SETUP REQUEST (TS 36.413 8.2.1) carrying the ACTIVATE DEFAULT
//! EPS BEARER CONTEXT REQUEST (T3485) -> E-RAB SETUP RESPONSE -> Modify
//! Bearer Request for that bearer; the ACTIVATE DEFAULT EPS BEARER CONTEXT
//! ACCEPT may come before or after the E-RAB SETUP RESPONSE. Refusals are
//! PDN CONNECTIVITY REJECTs with the cause of 6.5.1.4. This file also
//! routes the S11 answers and timer expiries of the ESM procedures after
//! attach (this one and [`crate::pdn_disconnect`]).

use crate::attach::pdn_request;
use crate::context::{EsmProcedure, NasTimerKind, Step};
use crate::erab_build::{self, ErabToSetup};
use crate::esm::default_bearer_request;
use crate::mme::Mme;
use crate::nas_build;
use crate::s1ap_handler::S1Result;
use bytes::Bytes;
use mobicore_common::requester::TransportError;
use mobicore_common::s11::*;
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ebi, Fteid, Teid};
use oxirush_nas::nas_eps::{EsmCause, NasEpsSecurityHeaderType, NasPdnConnectivityRequest};
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::ie;
use oxirush_s1ap::s1ap::{Cause, CauseNas, S1APPDU};
use std::net::Ipv4Addr;

/// EPS bearer identities a UE's bearers can have (TS 24.007 11.2.3.1.5).
const EBIS: std::ops::RangeInclusive<u8> = 5..=15;

impl EsmProcedure {
    pub fn pti(&self) -> u8 {
        match self {
            EsmProcedure::CreateSession { req, .. } => req.pti,
            EsmProcedure::ActivateDefault { pti, .. }
            | EsmProcedure::DeleteSession { pti, .. }
            | EsmProcedure::Deactivate { pti, .. } => *pti,
        }
    }
}

impl Mme {
    /// PDN CONNECTIVITY REQUEST after attach (6.5.1.2), integrity checked.
    pub(crate) fn on_pdn_connectivity_request(&mut self, id: u32, pti: u8, p: &NasPdnConnectivityRequest) {
        self.settle_cut_esm(id);
        let Some(ue) = self.ues.get(&id) else { return };
        if ue.emm != crate::context::EmmState::Registered || ue.step != Step::Idle {
            // During an attach the request travels in the ATTACH REQUEST.
            self.counters.incr("esm_unexpected_message");
            return;
        }
        if let Some(running) = ue.esm.as_ref() {
            if running.pti() == pti {
                // A retransmission of the request being served.
                self.counters.incr("esm_duplicate_request");
            } else {
                self.reject_pdn_connectivity(id, pti, EsmCause::RequestRejectedUnspecified);
            }
            return;
        }
        let req = pdn_request(pti, p);
        let conf = match self.select_apn(id, req.apn.as_deref()) {
            Ok(c) => c,
            Err(cause) => return self.reject_pdn_connectivity(id, pti, cause),
        };
        let ue = &self.ues[&id];
        if ue.sessions.iter().any(|s| s.apn.eq_ignore_ascii_case(&conf.service_selection)) {
            // 6.5.1.4: one PDN connection per APN here.
            return self.reject_pdn_connectivity(id, pti, EsmCause::MultiplePdnConnectionsForAGivenApnNotAllowed);
        }
        let Some(ebi) = EBIS.clone().find(|e| !ue.sessions.iter().any(|s| s.ebi == *e)) else {
            return self.reject_pdn_connectivity(id, pti, EsmCause::MaximumNumberOfEpsBearersReached);
        };
        let csr = match self.create_session_request(id, &conf, &req, ebi) {
            Ok(c) => c,
            Err(cause) => return self.reject_pdn_connectivity(id, pti, cause),
        };
        self.counters.incr("pdn_connectivity_request");
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.esm = Some(EsmProcedure::CreateSession { req, ebi, apn: conf.service_selection });
        }
        self.request_s11(id, S11Request::CreateSession(csr));
    }

    /// PDN CONNECTIVITY REJECT (6.5.1.4), protected.
    pub(crate) fn reject_pdn_connectivity(&mut self, id: u32, pti: u8, cause: EsmCause) {
        self.counters.incr("pdn_connectivity_reject");
        if let Some(plain) = nas_build::pdn_connectivity_reject(pti, cause) {
            let header = self.dl_header(id);
            self.send_dl_nas(id, &plain, header);
        }
    }

    /// Whether an S11 answer is the one the UE's ESM procedure waits for.
    /// A transport error is only taken for it outside any EMM procedure.
    pub(crate) fn esm_awaits_s11(&self, id: u32, step: Step, r: &Result<S11Response, TransportError>) -> bool {
        let Some(esm) = self.ues.get(&id).and_then(|u| u.esm.as_ref()) else { return false };
        match (esm, r) {
            (EsmProcedure::CreateSession { .. }, Ok(S11Response::CreateSession(_))) => true,
            (EsmProcedure::DeleteSession { .. }, Ok(S11Response::DeleteSession(_))) => true,
            (EsmProcedure::CreateSession { .. } | EsmProcedure::DeleteSession { .. }, Err(_)) => step == Step::Idle,
            _ => false,
        }
    }

    pub(crate) fn on_esm_s11(&mut self, id: u32, r: Result<S11Response, TransportError>) {
        let Some(esm) = self.ues.get_mut(&id).and_then(|u| u.esm.take()) else { return };
        match (esm, r) {
            (EsmProcedure::CreateSession { req, ebi, apn }, Ok(S11Response::CreateSession(r))) => {
                self.on_pdn_create_session(id, req, ebi, &apn, r)
            }
            (EsmProcedure::CreateSession { req, .. }, _) => {
                self.counters.incr("s11_transport_error");
                self.reject_pdn_connectivity(id, req.pti, EsmCause::NetworkFailure);
            }
            (EsmProcedure::DeleteSession { pti, ebi }, r) => {
                if !matches!(r, Ok(S11Response::DeleteSession(c)) if c.is_accepted()) {
                    self.counters.incr("s11_delete_session_failed");
                }
                self.deactivate_pdn(id, pti, ebi);
            }
            (other, _) => {
                if let Some(ue) = self.ues.get_mut(&id) {
                    ue.esm = Some(other);
                }
            }
        }
    }

    /// Create Session Response of a PDN connectivity: the new default
    /// bearer goes to the eNB and the UE, or the UE gets the reject.
    fn on_pdn_create_session(
        &mut self,
        id: u32,
        req: crate::context::PdnRequest,
        ebi: u8,
        apn: &str,
        r: CreateSessionResponse,
    ) {
        let conf = self.select_apn(id, Some(apn));
        let result = conf.and_then(|conf| self.session_from(&r, &conf, req.pdn_type, ebi));
        let (session, esm_cause) = match result {
            Ok(s) => s,
            Err(cause) => {
                if r.cause.is_accepted() {
                    if let Some(f) = r.sgw_fteid {
                        self.delete_pdn_at_sgw(id, f.teid, ebi);
                    }
                }
                return self.reject_pdn_connectivity(id, req.pti, cause);
            }
        };
        let Some(s1) = self.ues.get(&id).and_then(|u| u.s1) else {
            // The UE went idle meanwhile: nothing can reach it.
            self.counters.incr("pdn_connectivity_ue_unreachable");
            return self.delete_pdn_at_sgw(id, session.sgw_s11.teid, session.ebi);
        };
        let plain = default_bearer_request(&session, req.pti, esm_cause, r.pco.as_deref().map(|p| (p, req.epco)))
            .and_then(|m| m.encode().ok());
        let header = NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered;
        let nas = plain.as_ref().and_then(|p| self.protect_dl(id, p, header));
        let (Some(plain), Some(nas)) = (plain, nas) else {
            self.counters.incr("nas_encode_error");
            self.delete_pdn_at_sgw(id, session.sgw_s11.teid, session.ebi);
            return self.reject_pdn_connectivity(id, req.pti, EsmCause::NetworkFailure);
        };
        let erab = ErabToSetup { ebi: session.ebi, qci: session.qci, arp: session.arp, sgw_s1u: session.sgw_s1u, nas };
        let ue_ambr =
            self.ues.get(&id).map(|u| u.ue_ambr_with(u.sessions.iter().map(|s| s.apn_ambr).chain([session.apn_ambr])));
        let data = erab_build::erab_setup_request(id, s1.enb_ue_s1ap_id, ue_ambr.unwrap_or_default(), erab);
        let ebi = session.ebi;
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.sessions.push(session);
            ue.esm = Some(EsmProcedure::ActivateDefault { pti: req.pti, ebi, erab_done: false, accepted: false });
        }
        self.push_s1(s1.assoc, s1.stream, data);
        // 6.4.1.2: T3485 retransmits the request (in DOWNLINK NAS TRANSPORT).
        self.start_timer(id, NasTimerKind::T3485, Bytes::from(plain), header);
    }

    /// Delete Session of one PDN connection, without waiting for it.
    fn delete_pdn_at_sgw(&mut self, id: u32, sgw_teid: Teid, ebi: u8) {
        let req = DeleteSessionRequest { sgw_teid, linked_ebi: Ebi(ebi) };
        self.request_s11(id, S11Request::DeleteSession(req));
    }

    /// E-RAB SETUP RESPONSE (TS 36.413 8.2.1.2): Modify Bearer with the
    /// eNB's S1-U F-TEID of the new bearer (TS 23.401 5.10.2 step 9).
    pub(crate) fn on_erab_setup_response(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, ERABSetupResponse,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
        );
        let Some(id) = self.known_ue(assoc, mme_id, enb_id) else { return Ok(()) };
        let mut set_up = Vec::new();
        for item in pdu.items::<ie::E_RABSetupListBearerSURes>() {
            let item = item?;
            let o = item.transport_layer_address.0.as_octets();
            if o.len() >= 4 {
                let fteid = Fteid {
                    teid: Teid(u32::from_be_bytes(item.gtp_teid.0)),
                    ipv4: Ipv4Addr::new(o[0], o[1], o[2], o[3]),
                };
                set_up.push((item.e_rab_id.0, fteid));
            }
        }
        let Some(EsmProcedure::ActivateDefault { ebi, accepted, .. }) = self.ues.get(&id).and_then(|u| u.esm.clone())
        else {
            self.counters.incr("erab_setup_response_unexpected");
            return Ok(());
        };
        let Some(&(_, fteid)) = set_up.iter().find(|(e, _)| *e == u64::from(ebi)) else {
            // 8.2.1.2: the E-RAB is in the failed list: the PDN fails.
            self.counters.incr("erab_setup_failed");
            self.fail_pdn_activation(id, ebi, false);
            return Ok(());
        };
        let Some(ue) = self.ues.get_mut(&id) else { return Ok(()) };
        let Some(s) = ue.session_mut(ebi) else { return Ok(()) };
        s.enb_s1u = Some(fteid);
        let mbr = ModifyBearerRequest { sgw_teid: s.sgw_s11.teid, ebi: Ebi(ebi), s1u_enb_fteid: fteid };
        if let Some(EsmProcedure::ActivateDefault { erab_done, .. }) = ue.esm.as_mut() {
            *erab_done = true;
        }
        self.request_s11(id, S11Request::ModifyBearer(mbr));
        if accepted {
            self.finish_pdn_connectivity(id);
        }
        Ok(())
    }

    /// ACTIVATE DEFAULT EPS BEARER CONTEXT ACCEPT (6.4.1.3) after attach.
    pub(crate) fn on_activate_default_accept(&mut self, id: u32, ebi: u8) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let Some(EsmProcedure::ActivateDefault { ebi: e, erab_done, accepted, .. }) = ue.esm.as_mut() else {
            self.counters.incr("esm_unexpected_message");
            return;
        };
        if *e != ebi {
            self.counters.incr("esm_unexpected_message");
            return;
        }
        *accepted = true;
        let done = *erab_done;
        self.stop_timer(id);
        if done {
            self.finish_pdn_connectivity(id);
        }
    }

    /// ACTIVATE DEFAULT EPS BEARER CONTEXT REJECT (6.4.1.4): the new PDN
    /// connection goes (at the S-GW, and its E-RAB if it was set up).
    pub(crate) fn on_activate_default_reject(&mut self, id: u32, ebi: u8) {
        match self.ues.get(&id).and_then(|u| u.esm.clone()) {
            Some(EsmProcedure::ActivateDefault { ebi: e, erab_done, .. }) if e == ebi => {
                self.counters.incr("activate_default_bearer_rejected");
                self.fail_pdn_activation(id, ebi, erab_done);
            }
            _ => self.counters.incr("esm_unexpected_message"),
        }
    }

    fn finish_pdn_connectivity(&mut self, id: u32) {
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.esm = None;
        }
        self.counters.incr("pdn_connectivity_complete");
    }

    /// The activation of PDN `ebi` failed: it is deleted at the S-GW, its
    /// E-RAB released if it was set up (TS 23.401 5.10.2).
    fn fail_pdn_activation(&mut self, id: u32, ebi: u8, release_erab: bool) {
        self.stop_timer(id);
        let Some(ue) = self.ues.get_mut(&id) else { return };
        ue.esm = None;
        let Some(i) = ue.sessions.iter().position(|s| s.ebi == ebi) else { return };
        let s = ue.sessions.remove(i);
        let (s1, ue_ambr) = (ue.s1, ue.ue_ambr());
        self.delete_pdn_at_sgw(id, s.sgw_s11.teid, ebi);
        if let (true, Some(s1)) = (release_erab, s1) {
            let cause = Cause::nas(CauseNas::unspecified);
            let data = erab_build::erab_release_command(id, s1.enb_ue_s1ap_id, ue_ambr, ebi, cause, None);
            self.push_s1(s1.assoc, s1.stream, data);
        }
    }

    /// The fifth expiry of T3485 (6.4.1.6: the activation is abandoned) or
    /// of T3495 (6.4.4.6: the bearer is deactivated locally).
    pub(crate) fn on_esm_timer_abort(&mut self, id: u32) {
        match self.ues.get(&id).and_then(|u| u.esm.clone()) {
            Some(EsmProcedure::ActivateDefault { ebi, erab_done, .. }) => self.fail_pdn_activation(id, ebi, erab_done),
            Some(_) => {
                if let Some(ue) = self.ues.get_mut(&id) {
                    ue.esm = None;
                }
            }
            None => {}
        }
    }

    /// An ESM procedure whose S1 part an S1 release cut (its timer is gone
    /// and no S11 answer is awaited) is settled as its timer's expiry
    /// would have: the unaccepted PDN goes, the deactivation is done.
    pub(crate) fn settle_cut_esm(&mut self, id: u32) {
        let Some(ue) = self.ues.get(&id) else { return };
        let (no_timer, no_s1) = (ue.timer.is_none(), ue.s1.is_none());
        match ue.esm {
            // The UE accepted; only the E-RAB's answer was lost: the PDN stays.
            Some(EsmProcedure::ActivateDefault { accepted: true, .. }) if no_s1 => self.finish_pdn_connectivity(id),
            Some(EsmProcedure::ActivateDefault { accepted: false, .. } | EsmProcedure::Deactivate { .. })
                if no_timer =>
            {
                self.counters.incr("esm_procedure_cut_by_release");
                self.on_esm_timer_abort(id);
            }
            _ => {}
        }
    }
}
