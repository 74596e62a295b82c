//! Identification (TS 24.301 5.4.4): IDENTITY REQUEST for the IMSI when the
//! UE gave a GUTI we do not know, or after an authentication that failed
//! for a UE identified by its GUTI (5.4.2.7).

use crate::context::{NasTimerKind, Step};
use crate::mme::Mme;
use crate::nas_build;
use mobicore_common::Imsi;
use oxirush_nas::nas_eps::{EmmCause, NasEpsSecurityHeaderType, NasIdentityResponse};

impl Mme {
    pub(crate) fn start_identification(&mut self, id: u32) {
        let Some(ue) = self.ues.get_mut(&id) else {
            return;
        };
        ue.step = Step::Identity;
        if let Some(a) = ue.attach.as_mut() {
            a.imsi_requested = true;
        }
        let Some(plain) = nas_build::identity_request_imsi() else {
            return;
        };
        // 4.4.4.2: sent plain before a security context exists.
        let header = match ue.security_active() {
            true => NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered,
            false => NasEpsSecurityHeaderType::PlainNasMessageNotSecurityProtected,
        };
        self.send_dl_nas_timed(id, NasTimerKind::T3470, plain, header);
    }

    /// IDENTITY RESPONSE (5.4.4.4).
    pub(crate) fn on_identity_response(&mut self, id: u32, r: NasIdentityResponse) {
        self.stop_timer(id);
        let imsi = r.mobile_identity.as_imsi().and_then(|i| i.to_string().parse::<Imsi>().ok());
        let Some(imsi) = imsi else {
            // Not the identity asked for: the UE cannot be identified.
            self.counters.incr("identity_response_without_imsi");
            self.reject_attach(id, EmmCause::UeIdentityCannotBeDerivedByTheNetwork, None);
            return;
        };
        let previous = self.ues.get(&id).and_then(|u| u.imsi.clone());
        if previous.as_ref() == Some(&imsi) {
            // 5.4.2.7 c: same IMSI after a failed authentication.
            self.authentication_reject(id);
            return;
        }
        self.set_imsi(id, imsi);
        if let Some(a) = self.ues.get_mut(&id).and_then(|u| u.attach.as_mut()) {
            a.by_guti = false;
        }
        self.start_authentication(id, None);
    }
}
