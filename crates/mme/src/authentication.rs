//! EPS authentication and key agreement (TS 24.301 5.4.2, TS 33.401 6.1):
//! an E-UTRAN vector from the HSS (S6a AIR), AUTHENTICATION REQUEST, RES
//! against XRES, and the failures: MAC failure, synch failure with
//! re-synchronisation (AUTS), non-EPS authentication unacceptable.

use crate::attach::emm_cause_for;
use crate::context::{AuthState, NasTimerKind, Step};
use crate::mme::Mme;
use crate::nas_build;
use mobicore_common::s6a::{AuthInfoRequest, EutranVector, ResyncInfo, S6aError, S6aRequest};
use oxirush_nas::nas_eps::*;
use oxirush_s1ap::s1ap::CauseNas;

impl Mme {
    /// Ask the HSS for one vector (TS 29.272 5.2.3.1), with RAND and AUTS
    /// after a synch failure.
    pub(crate) fn start_authentication(&mut self, id: u32, resync: Option<ResyncInfo>) {
        let Some(ue) = self.ues.get_mut(&id) else {
            return;
        };
        let Some(imsi) = ue.imsi.clone() else { return };
        ue.step = Step::AuthInfo;
        if !self.s6a_room(id) {
            return;
        }
        let req = AuthInfoRequest { imsi, visited_plmn: self.cfg.plmn, num_vectors: 1, resync };
        self.request_s6a(id, S6aRequest::AuthenticationInformation(req));
    }

    pub(crate) fn on_auth_info(&mut self, id: u32, r: Result<Vec<EutranVector>, S6aError>) {
        let vector = match r {
            Ok(mut v) if !v.is_empty() => v.swap_remove(0),
            Ok(_) => {
                self.counters.incr("s6a_no_vector");
                self.reject_attach(id, EmmCause::NetworkFailure, None);
                return;
            }
            Err(e) => {
                self.counters.incr("s6a_auth_info_rejected");
                self.reject_attach(id, emm_cause_for(e), None);
                return;
            }
        };
        let Some(ue) = self.ues.get_mut(&id) else {
            return;
        };
        // A fresh eKSI, other than the one in use (TS 24.301 9.9.3.21).
        let ksi = match ue.auth.as_ref().map(|a| a.ksi).or(ue.security.as_ref().map(|s| s.ksi)) {
            Some(k) => (k + 1) % 7,
            None => 0,
        };
        let sync_failures = ue.auth.as_ref().map_or(0, |a| a.sync_failures);
        let (rand, autn) = (vector.rand, vector.autn);
        ue.auth = Some(AuthState { vector, ksi, sync_failures });
        ue.step = Step::Authentication;
        let Some(plain) = nas_build::authentication_request(ksi, rand, autn) else {
            return;
        };
        let header = self.dl_header(id);
        self.send_dl_nas_timed(id, NasTimerKind::T3460, plain, header);
    }

    /// AUTHENTICATION RESPONSE (5.4.2.4): RES against XRES.
    pub(crate) fn on_authentication_response(&mut self, id: u32, r: NasAuthenticationResponse) {
        self.stop_timer(id);
        let res = r.authentication_response_parameter.res();
        let ok = self
            .ues
            .get(&id)
            .and_then(|u| u.auth.as_ref())
            .is_some_and(|a| !a.vector.xres.is_empty() && oxirush_security::constant_time_eq(res, &a.vector.xres));
        if ok {
            self.start_security_mode(id);
        } else {
            self.counters.incr("authentication_res_mismatch");
            self.authentication_failed(id);
        }
    }

    /// AUTHENTICATION FAILURE (5.4.2.6 / 5.4.2.7).
    pub(crate) fn on_authentication_failure(&mut self, id: u32, r: NasAuthenticationFailure) {
        self.stop_timer(id);
        match r.emm_cause.cause() {
            Some(EmmCause::SynchFailure) => {
                let auts = r.authentication_failure_parameter.as_ref().and_then(|p| p.auts().copied());
                let Some(ue) = self.ues.get_mut(&id) else {
                    return;
                };
                let Some(auth) = ue.auth.as_mut() else { return };
                auth.sync_failures += 1;
                match auts {
                    // 5.4.2.7 f: one re-synchronisation; a second failure in a row ends it.
                    Some(auts) if auth.sync_failures <= 1 => {
                        self.counters.incr("authentication_resync");
                        let resync = ResyncInfo { rand: auth.vector.rand, auts };
                        self.start_authentication(id, Some(resync));
                    }
                    _ => self.authentication_reject(id),
                }
            }
            Some(EmmCause::MacFailure) => {
                self.counters.incr("authentication_mac_failure");
                self.authentication_failed(id);
            }
            _ => self.authentication_reject(id),
        }
    }

    /// 5.4.2.5 / 5.4.2.7 c: a UE identified by a GUTI is asked for its IMSI
    /// once; otherwise authentication is rejected.
    fn authentication_failed(&mut self, id: u32) {
        let by_guti = self.ues.get(&id).and_then(|u| u.attach.as_ref()).is_some_and(|a| a.by_guti);
        if by_guti {
            self.start_identification(id);
        } else {
            self.authentication_reject(id);
        }
    }

    /// AUTHENTICATION REJECT (5.4.2.5), then release of the UE.
    pub(crate) fn authentication_reject(&mut self, id: u32) {
        self.counters.incr("authentication_reject");
        self.stop_timer(id);
        if let Some(plain) = nas_build::authentication_reject() {
            // 4.4.4.2: sent unprotected when no context is in use.
            let header = self.dl_header(id);
            self.send_dl_nas(id, &plain, header);
        }
        self.abort_ue(id, CauseNas::authentication_failure);
    }
}
