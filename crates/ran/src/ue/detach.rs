//! Detach (TS 24.301 5.5.2): UE-initiated, normal or switch-off, and the
//! network-initiated detach a UE must answer.

use std::time::Instant;

use oxirush_nas::nas_eps::{
    KeySetIdentifier, NasDetachAccept, NasDetachRequestUeOriginating, NasDetachRequestUeTerminated, NasDetachType,
    NasEpsMessage, NasEpsMobileIdentity, NasKeySetIdentifier, NetworkDetachKind, UeDetachKind,
};

use super::attach::StartError;
use super::{EmmState, Procedure, Ue, Waiting};

impl Ue {
    /// Start a UE-initiated EPS detach (5.5.2.2.1). `connected` says whether
    /// the UE has a NAS signalling connection (the DETACH REQUEST is then
    /// ciphered) or sends it as an initial NAS message. With `switch_off`
    /// the UE is deregistered at once and the procedure ends when the S1
    /// connection is released; otherwise with the DETACH ACCEPT.
    pub fn start_detach(&mut self, now: Instant, switch_off: bool, connected: bool) -> Result<(), StartError> {
        if let Some(r) = &self.running {
            return Err(StartError::Busy(r.procedure));
        }
        if self.emm != EmmState::Registered {
            return Err(StartError::WrongState(self.emm));
        }
        let identity = match (&self.guti, NasEpsMobileIdentity::from_imsi(self.usim.imsi.as_str())) {
            (Some(guti), _) => NasEpsMobileIdentity::from_guti(*guti),
            (None, Ok(imsi)) => imsi,
            (None, Err(e)) => return self.start_failed(now, format!("IMSI not encodable: {e:?}")),
        };
        let ksi = match &self.security {
            Some(s) => KeySetIdentifier::Native(s.ksi),
            None => KeySetIdentifier::NoKey,
        };
        let request = NasDetachRequestUeOriginating::new(
            NasDetachType::from_ue_detach_kind(UeDetachKind::EpsDetach, switch_off),
            NasKeySetIdentifier::from_key_set_identifier(ksi).unwrap_or_default(),
            identity,
        );
        let waiting = if switch_off { Waiting::Release } else { Waiting::DetachAccept };
        self.begin(now, Procedure::Detach, waiting);
        self.emm = if switch_off { EmmState::Deregistered } else { EmmState::DeregisteredInitiated };
        self.send(now, &NasEpsMessage::new_emm(request), !connected);
        Ok(())
    }

    fn start_failed(&mut self, now: Instant, reason: String) -> Result<(), StartError> {
        self.begin(now, Procedure::Detach, Waiting::DetachAccept);
        self.finish(now, Err(reason));
        Ok(())
    }

    pub(super) fn handle_detach_accept(&mut self, now: Instant) {
        if self.waiting() != Some((Procedure::Detach, Waiting::DetachAccept)) {
            return self.anomaly("DETACH ACCEPT outside detach".into());
        }
        // TS 24.301 5.5.2.2.2: EMM-DEREGISTERED; the security context and
        // GUTI are kept for the next attach.
        self.emm = EmmState::Deregistered;
        self.bearer = None;
        self.finish(now, Ok(()));
    }

    pub(super) fn handle_network_detach(&mut self, now: Instant, req: &NasDetachRequestUeTerminated) {
        // TS 24.301 5.5.2.3.2: answer with DETACH ACCEPT; deregistered.
        self.anomaly(format!("network detach (type {})", req.detach_type.detach_type_raw()));
        self.send(now, &NasEpsMessage::new_emm(NasDetachAccept::new()), false);
        self.emm = EmmState::Deregistered;
        self.bearer = None;
        self.idle.t3412_deadline = None;
        // "Re-attach required": a new attach once the connection is
        // released (TS 24.301 5.5.2.3.2).
        if req.detach_type.network_detach_kind() == NetworkDetachKind::ReattachRequired {
            self.idle.reattach = true;
        }
        if self.running.is_some() {
            self.fail(now, "network detach during procedure".into());
        }
    }
}
