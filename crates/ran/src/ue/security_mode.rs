//! NAS security mode control on the UE side (TS 24.301 5.4.3).

use std::time::Instant;

use oxirush_nas::nas_eps::{
    Direction, EmmCause, NasEmmCause, NasEmmMessage, NasEpsMessage, NasEpsSecurityHeaderType, NasMobileIdentity,
    NasSecurityModeCommand, NasSecurityModeComplete, NasSecurityModeReject,
};

use super::security::{supported, EpsSecurity};
use super::{EmmState, Procedure, Ue, Waiting};

impl Ue {
    /// A PDU with security header type 3: the SECURITY MODE COMMAND, whose
    /// MAC is checked with the context it takes into use (5.4.3.3).
    pub(super) fn handle_security_mode_command(&mut self, now: Instant, pdu: &[u8]) {
        let smc = match NasEpsMessage::decode_with_direction(pdu, Direction::Downlink) {
            Ok(NasEpsMessage::SecurityProtected(_, inner)) => match *inner {
                NasEpsMessage::Emm(_, NasEmmMessage::SecurityModeCommand(smc)) => smc,
                other => {
                    return self.problem(now, format!("header type 3 on {}", super::name(&other)));
                }
            },
            Ok(_) => return self.problem(now, "header type 3 on an unprotected message".into()),
            Err(e) => return self.problem(now, format!("undecodable SECURITY MODE COMMAND: {e}")),
        };
        match self.check_security_mode_command(&smc, pdu) {
            Ok(sec) => self.accept_security_mode(now, &smc, sec),
            Err((cause, why)) => self.reject_security_mode(now, cause, why),
        }
    }

    fn check_security_mode_command(
        &mut self,
        smc: &NasSecurityModeCommand,
        pdu: &[u8],
    ) -> Result<EpsSecurity, (EmmCause, &'static str)> {
        let algorithms = &smc.selected_nas_security_algorithms;
        let (eea, eia) = (algorithms.ciphering_raw(), algorithms.integrity_raw());
        let (Some(cipher), Some(integrity)) = (algorithms.ciphering(), algorithms.integrity()) else {
            return Err((EmmCause::SecurityModeRejectedUnspecified, "reserved algorithm selected"));
        };
        if !supported(eea, eia) {
            return Err((EmmCause::SecurityModeRejectedUnspecified, "algorithm the UE does not support"));
        }
        // The replayed capabilities must be those the UE sent (5.4.3.3).
        if !smc.replayed_ue_security_capabilities.matches_ue_network_capability(&Self::ue_network_capability()) {
            return Err((EmmCause::UeSecurityCapabilitiesMismatch, "replayed UE security capabilities differ"));
        }
        let ksi = smc.nas_key_set_identifier.ksi();
        let kasme = match (&self.pending, &self.security) {
            (Some(p), _) if p.ksi == ksi => self.pending.take().map(|p| p.kasme),
            (_, Some(s)) if s.ksi == ksi => Some(s.kasme.clone()),
            _ => None,
        };
        let Some(kasme) = kasme else {
            return Err((EmmCause::SecurityModeRejectedUnspecified, "KSI of no known KASME"));
        };
        let mut sec = EpsSecurity::fresh(ksi, kasme, cipher, integrity)
            .map_err(|_| (EmmCause::SecurityModeRejectedUnspecified, "algorithms refused"))?;
        match sec.unprotect(pdu) {
            Ok(_) => Ok(sec),
            Err(oxirush_nas::NasError::IntegrityCheckFailed) => {
                Err((EmmCause::SecurityModeRejectedUnspecified, "SECURITY MODE COMMAND MAC failure"))
            }
            Err(_) => Err((EmmCause::SecurityModeRejectedUnspecified, "SECURITY MODE COMMAND refused")),
        }
    }

    fn accept_security_mode(&mut self, now: Instant, smc: &NasSecurityModeCommand, sec: EpsSecurity) {
        let mut complete = NasSecurityModeComplete::new();
        if smc.imeisv_request.as_ref().is_some_and(|r| r.is_requested()) {
            let imeisv = format!("{}01", &self.imei()[..14]);
            if let Ok(id) = NasMobileIdentity::from_imeisv(&imeisv) {
                complete = complete.with_imeisv(id);
            }
        }
        let count = sec.next_uplink_count();
        self.security = Some(sec);
        self.secured_connection = true;
        let sec = self.security.as_mut().expect("just set");
        // TS 33.401 7.2.6.2 / A.3: KeNB with the uplink NAS COUNT of the
        // SECURITY MODE COMPLETE that activates the context.
        if let Some(count) = count {
            self.kenb = Some(sec.kenb(count));
        }
        let msg = NasEpsMessage::new_emm(complete);
        match sec.protect_as(&msg, NasEpsSecurityHeaderType::IntegrityProtectedAndCipheredWithNewEpsSecurityContext) {
            Ok(pdu) => self.actions.push_back(super::UeAction::Uplink(pdu)),
            Err(e) => self.fail(now, format!("cannot protect SECURITY MODE COMPLETE: {e}")),
        }
        if self.waiting() == Some((Procedure::Attach, Waiting::AttachProgress)) {
            self.set_waiting(Waiting::AttachAccept);
        }
    }

    fn reject_security_mode(&mut self, now: Instant, cause: EmmCause, why: &'static str) {
        let reject = NasSecurityModeReject::new(NasEmmCause::from_cause(cause));
        self.send_plain(now, &NasEpsMessage::new_emm(reject));
        if self.waiting().map(|w| w.0) == Some(Procedure::Attach) {
            self.emm = EmmState::Deregistered;
        }
        self.fail(now, format!("security mode reject #{} ({why})", cause as u8));
    }
}
