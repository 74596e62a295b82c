//! Identification (TS 24.301 5.4.4) and EPS authentication (5.4.2) on the
//! UE side.

use std::time::Instant;

use oxirush_nas::nas_eps::{
    EmmCause, IdentityType, NasAuthenticationFailure, NasAuthenticationFailureParameter, NasAuthenticationRequest,
    NasAuthenticationResponse, NasAuthenticationResponseParameter, NasEmmCause, NasEpsMessage, NasIdentityRequest,
    NasIdentityResponse, NasMobileIdentity,
};
use oxirush_security::nas_eps::derive_kasme;
use oxirush_security::Autn;

use super::security::PendingKasme;
use super::{EmmState, Ue};
use crate::usim::AuthOutcome;

impl Ue {
    /// An IMEI for the UE, derived from its IMSI (TAC 35000000 + the last
    /// six MSIN digits, and a check digit of 0).
    pub fn imei(&self) -> String {
        let imsi = self.usim.imsi.as_str();
        format!("35000000{}0", &imsi[imsi.len() - 6..])
    }

    pub(super) fn handle_identity_request(&mut self, now: Instant, req: &NasIdentityRequest) {
        let identity = match req.identity_type.identity_type() {
            IdentityType::Imsi => NasMobileIdentity::from_imsi(self.usim.imsi.as_str()),
            IdentityType::Imei => NasMobileIdentity::from_imei(&self.imei()),
            IdentityType::Imeisv => NasMobileIdentity::from_imeisv(&format!("{}01", &self.imei()[..14])),
            IdentityType::Tmsi => Ok(match self.guti {
                Some(g) => NasMobileIdentity::from_tmsi(g.m_tmsi()),
                None => NasMobileIdentity::from_no_identity(),
            }),
            _ => Ok(NasMobileIdentity::from_no_identity()),
        };
        match identity {
            Ok(id) => {
                let reply = NasEpsMessage::new_emm(NasIdentityResponse::new(id));
                self.send(now, &reply, false);
            }
            Err(e) => self.fail(now, format!("identity not encodable: {e:?}")),
        }
    }

    pub(super) fn handle_authentication_request(&mut self, now: Instant, req: &NasAuthenticationRequest) {
        let (Some(rand), Some(autn)) =
            (req.authentication_parameter_rand.rand(), req.authentication_parameter_autn.autn())
        else {
            return self.problem(now, "AUTHENTICATION REQUEST without RAND or AUTN".into());
        };
        let ksi = req.nas_key_set_identifier_asme.ksi();
        let (rand, autn) = (*rand, *autn);
        let failure = |cause: EmmCause| NasAuthenticationFailure::new(NasEmmCause::from_cause(cause));
        match self.usim.authenticate(&rand, &autn) {
            AuthOutcome::Accepted(r) => {
                // TS 33.401 A.2: KASME from CK, IK, the serving network and SQN xor AK.
                let kasme = derive_kasme(&r.ck, &r.ik, self.serving, &Autn::new(&autn));
                self.pending = Some(PendingKasme { ksi, kasme });
                let param = match NasAuthenticationResponseParameter::from_res(&r.res) {
                    Ok(p) => p,
                    Err(e) => return self.fail(now, format!("RES not encodable: {e:?}")),
                };
                let reply = NasAuthenticationResponse::new(param);
                self.send(now, &NasEpsMessage::new_emm(reply), false);
            }
            AuthOutcome::MacFailure => {
                self.note("MAC failure #20");
                self.send(now, &NasEpsMessage::new_emm(failure(EmmCause::MacFailure)), false);
            }
            AuthOutcome::NonEpsAuthenticationUnacceptable => {
                self.note("non-EPS authentication unacceptable #26");
                let reply = failure(EmmCause::NonEpsAuthenticationUnacceptable);
                self.send(now, &NasEpsMessage::new_emm(reply), false);
            }
            AuthOutcome::SynchFailure { auts } => {
                self.note("synch failure #21");
                self.anomaly("synch failure #21 sent (SQN resynchronisation)".into());
                let reply = failure(EmmCause::SynchFailure)
                    .with_authentication_failure_parameter(NasAuthenticationFailureParameter::from_auts(auts));
                self.send(now, &NasEpsMessage::new_emm(reply), false);
            }
        }
    }

    pub(super) fn handle_authentication_reject(&mut self, now: Instant) {
        // TS 24.301 5.4.2.7: the USIM is invalid until switched off; the
        // GUTI, TAI list and security context are deleted.
        self.guti = None;
        self.security = None;
        self.pending = None;
        self.tais.clear();
        self.emm = EmmState::Deregistered;
        self.fail(now, "authentication reject".into());
    }
}
