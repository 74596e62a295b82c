//! Tracking area updating (TS 24.301 5.5.3): periodic (T3412 expiry) and
//! normal (a cell outside the TAI list), from EMM-IDLE or connected, with
//! or without the "active" flag.

use std::time::Instant;

use oxirush_nas::nas_eps::{
    KeySetIdentifier, NasEpsBearerContextStatus, NasEpsMessage, NasEpsMobileIdentity, NasEpsUpdateType,
    NasKeySetIdentifier, NasTrackingAreaIdentity, NasTrackingAreaUpdateAccept, NasTrackingAreaUpdateComplete,
    NasTrackingAreaUpdateReject, NasTrackingAreaUpdateRequest, UpdateType,
};

use super::attach::StartError;
use super::{EmmState, Procedure, Ue, Waiting};

/// Why a UE updates its tracking area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TauKind {
    /// T3412 expired (5.3.5, 5.5.3.2.2): periodic updating.
    Periodic,
    /// The UE entered a TA outside its TAI list (5.5.3.2.2 a), or any other
    /// normal update.
    TaChange,
}

impl Ue {
    /// Start a TAU: TRACKING AREA UPDATE REQUEST with the update type (and
    /// the "active" flag when `active`: the UE wants its bearers back,
    /// 5.5.3.2.2), the KSI, the old GUTI, the last visited registered TAI,
    /// the EPS bearer context status and the UE network capability. From
    /// EMM-IDLE it is the initial NAS message of a new connection, integrity
    /// protected with the current context, and KeNB follows from its uplink
    /// NAS COUNT (TS 33.401 7.2.6.2); connected, it is ciphered too.
    pub fn start_tau(&mut self, now: Instant, kind: TauKind, active: bool) -> Result<(), StartError> {
        if let Some(r) = &self.running {
            return Err(StartError::Busy(r.procedure));
        }
        if self.emm != EmmState::Registered {
            return Err(StartError::WrongState(self.emm));
        }
        let Some(guti) = self.guti else { return Err(StartError::WrongState(self.emm)) };
        let update = match kind {
            TauKind::Periodic => UpdateType::PeriodicUpdating,
            TauKind::TaChange => UpdateType::TaUpdating,
        };
        let ksi = match &self.security {
            Some(s) => KeySetIdentifier::Native(s.ksi),
            None => KeySetIdentifier::NoKey,
        };
        let mut request = NasTrackingAreaUpdateRequest::new(
            NasEpsUpdateType::from_update_type(update).with_active(active),
            NasKeySetIdentifier::from_key_set_identifier(ksi).unwrap_or_default(),
            NasEpsMobileIdentity::from_guti(guti),
        )
        .with_ue_network_capability(Self::ue_network_capability());
        if let Some(tai) = self.idle.last_visited {
            request = request.with_last_visited_registered_tai(NasTrackingAreaIdentity::from_tai(tai));
        }
        let ebis: Vec<u8> = self.bearer.iter().map(|b| b.ebi).collect();
        if let Ok(status) = NasEpsBearerContextStatus::from_bearers(&ebis) {
            request = request.with_eps_bearer_context_status(status);
        }
        let waiting = if active { Waiting::TauAcceptActive } else { Waiting::TauAccept };
        let procedure = match kind {
            TauKind::Periodic => Procedure::PeriodicTau,
            TauKind::TaChange => Procedure::Tau,
        };
        self.begin(now, procedure, waiting);
        let initial = !self.idle.connected;
        if initial {
            // A new NAS signalling connection: KeNB comes from this message.
            self.secured_connection = false;
        }
        self.send(now, &NasEpsMessage::new_emm(request), initial);
        Ok(())
    }

    /// TRACKING AREA UPDATE ACCEPT (5.5.3.2.4): keep the new GUTI (and
    /// answer TAU COMPLETE), the TAI list, T3412; bearers the network does
    /// not report active are deactivated locally. With the active flag the
    /// procedure ends when the bearers are set up.
    pub(super) fn handle_tau_accept(&mut self, now: Instant, accept: &NasTrackingAreaUpdateAccept) {
        let Some((Procedure::Tau | Procedure::PeriodicTau, waiting @ (Waiting::TauAccept | Waiting::TauAcceptActive))) =
            self.waiting()
        else {
            return self.problem(now, "TRACKING AREA UPDATE ACCEPT outside a TAU".into());
        };
        if !self.secured_connection {
            // TS 24.301 4.4.4.2: never taken without integrity protection.
            return self.problem(now, "TRACKING AREA UPDATE ACCEPT without integrity protection".into());
        }
        if let Some(t) = &accept.t3412_value {
            self.set_t3412(t);
        }
        if let Some(list) = &accept.tai_list {
            self.tais = list.tais();
        }
        if let Some(status) = &accept.eps_bearer_context_status {
            if self.bearer.is_some_and(|b| !status.is_active(b.ebi)) {
                self.bearer = None;
            }
        }
        self.idle.last_visited = self.idle.cell.filter(|c| self.tais.contains(c));
        self.emm = EmmState::Registered;
        if let Some(guti) = accept.guti.as_ref().and_then(|g| g.as_guti()) {
            self.guti = Some(guti);
            self.send(now, &NasEpsMessage::new_emm(NasTrackingAreaUpdateComplete::new()), false);
        }
        if waiting == Waiting::TauAcceptActive {
            self.set_waiting(Waiting::Bearers);
        } else {
            self.finish(now, Ok(()));
        }
    }

    /// TRACKING AREA UPDATE REJECT (5.5.3.2.5), by cause.
    pub(super) fn handle_tau_reject(&mut self, now: Instant, reject: &NasTrackingAreaUpdateReject) {
        if !matches!(self.procedure(), Some(Procedure::Tau | Procedure::PeriodicTau)) {
            return self.anomaly("TRACKING AREA UPDATE REJECT outside a TAU".into());
        }
        let cause = reject.emm_cause.cause_raw();
        self.on_reject_cause(cause);
        self.finish(now, Err(format!("TAU reject #{cause} ({})", reject.emm_cause.description())));
    }
}
