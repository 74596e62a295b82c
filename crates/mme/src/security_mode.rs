//! NAS security mode control (TS 24.301 5.4.3, TS 33.401 7.2.4.4): pick
//! EIA/EEA by the configured priority among what the UE supports, take a
//! fresh context from KASME into use with the SECURITY MODE COMMAND
//! (integrity protected, with the replayed UE security capabilities), and
//! cipher from the SECURITY MODE COMPLETE on.

use crate::config::{Eea, Eia};
use crate::context::{NasSecurity, NasTimerKind, Step};
use crate::mme::Mme;
use crate::nas_build;
use oxirush_nas::nas_eps::*;
use oxirush_s1ap::s1ap::CauseNas;
use oxirush_security::nas_eps::KAsme;

/// Whether a TS 24.301 9.9.3.34 octet (algorithm 0 in the MSB) has `code`.
fn supports(octet: u8, code: u8) -> bool {
    code < 8 && octet & (0x80 >> code) != 0
}

/// The first integrity algorithm of `order` that the UE supports; EIA0 is
/// never selected (TS 33.401 5.1.4.1: only for emergency calls).
pub fn select_eia(order: &[Eia], ue_eia: u8) -> Option<IntegrityAlgorithm> {
    order.iter().filter(|a| **a != Eia::Eia0).find(|a| supports(ue_eia, a.code())).map(|a| match a {
        Eia::Eia0 => IntegrityAlgorithm::EIA0,
        Eia::Eia1 => IntegrityAlgorithm::EIA1,
        Eia::Eia2 => IntegrityAlgorithm::EIA2,
        Eia::Eia3 => IntegrityAlgorithm::EIA3,
    })
}

/// The first ciphering algorithm of `order` that the UE supports.
pub fn select_eea(order: &[Eea], ue_eea: u8) -> Option<CipheringAlgorithm> {
    order.iter().find(|a| supports(ue_eea, a.code())).map(|a| match a {
        Eea::Eea0 => CipheringAlgorithm::EEA0,
        Eea::Eea1 => CipheringAlgorithm::EEA1,
        Eea::Eea2 => CipheringAlgorithm::EEA2,
        Eea::Eea3 => CipheringAlgorithm::EEA3,
    })
}

impl Mme {
    /// After a successful authentication: SECURITY MODE COMMAND (5.4.3.2).
    pub(crate) fn start_security_mode(&mut self, id: u32) {
        let Some(ue) = self.ues.get(&id) else { return };
        let (Some(attach), Some(auth)) = (ue.attach.as_ref(), ue.auth.as_ref()) else {
            return;
        };
        let eia = select_eia(&self.cfg.integrity_order, attach.eia);
        let eea = select_eea(&self.cfg.ciphering_order, attach.eea);
        let (Some(eia), Some(eea)) = (eia, eea) else {
            self.counters.incr("security_no_common_algorithm");
            self.reject_attach(id, EmmCause::UeSecurityCapabilitiesMismatch, None);
            return;
        };
        let kasme = KAsme::new(&auth.vector.kasme);
        let Ok(ctx) = NasSecurityContext::from_fresh_kasme(&kasme, eia, eea) else {
            self.reject_attach(id, EmmCause::UeSecurityCapabilitiesMismatch, None);
            return;
        };
        let ksi = auth.ksi;
        let plain = nas_build::security_mode_command(eea, eia, ksi, &attach.ue_network_capability);
        // S1AP bitmaps start at 128-EEA1 / 128-EIA1 (TS 36.413 9.2.1.40).
        let (ue_eea, ue_eia) = (attach.eea << 1, attach.eia << 1);
        let Some(ue) = self.ues.get_mut(&id) else {
            return;
        };
        ue.security =
            Some(NasSecurity { ctx, kasme, ksi, active: false, last_ul_count: 0, ue_eea, ue_eia, nh: [0; 32], ncc: 0 });
        ue.step = Step::SecurityMode;
        let Some(plain) = plain else { return };
        let header = NasEpsSecurityHeaderType::IntegrityProtectedWithNewEpsSecurityContext;
        self.send_dl_nas_timed(id, NasTimerKind::T3460, plain, header);
    }

    /// SECURITY MODE COMPLETE (5.4.3.4), verified with the new context.
    pub(crate) fn on_security_mode_complete(&mut self, id: u32, c: NasSecurityModeComplete) {
        self.stop_timer(id);
        let imeisv = c.imeisv.as_ref().and_then(|m| m.as_imeisv()).map(|i| i.as_str().to_string());
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.imeisv = imeisv.or(ue.imeisv.take());
        }
        let Some(sec) = self.ues.get_mut(&id).and_then(|u| u.security.as_mut()) else {
            return;
        };
        sec.active = true;
        self.claim_identity(id);
        self.start_esm_information_or_update_location(id);
    }

    /// SECURITY MODE REJECT (5.4.3.5): abort the attach.
    pub(crate) fn on_security_mode_reject(&mut self, id: u32) {
        self.counters.incr("security_mode_reject");
        self.stop_timer(id);
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.security = None;
        }
        self.abort_ue(id, CauseNas::unspecified);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_follows_priority_and_capability() {
        let order = [Eia::Eia2, Eia::Eia1, Eia::Eia3];
        // UE: EIA0 EIA1 EIA2 (0xe0)
        assert_eq!(select_eia(&order, 0xe0), Some(IntegrityAlgorithm::EIA2));
        // UE: EIA0 EIA1 only
        assert_eq!(select_eia(&order, 0xc0), Some(IntegrityAlgorithm::EIA1));
        // UE: EIA0 EIA3 only
        assert_eq!(select_eia(&order, 0x90), Some(IntegrityAlgorithm::EIA3));
        // UE: EIA0 only: never EIA0, even if configured
        assert_eq!(select_eia(&[Eia::Eia0, Eia::Eia2], 0x80), None);
        let eea = [Eea::Eea0, Eea::Eea2, Eea::Eea1, Eea::Eea3];
        assert_eq!(select_eea(&eea, 0xf0), Some(CipheringAlgorithm::EEA0));
        assert_eq!(select_eea(&[Eea::Eea3, Eea::Eea1], 0x70), Some(CipheringAlgorithm::EEA3));
        assert_eq!(select_eea(&[Eea::Eea2], 0x80), None);
    }
}
