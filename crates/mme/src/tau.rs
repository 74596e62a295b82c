//! Tracking area updating, the network's part (TS 24.301 5.5.3.2, TS 23.401
//! 5.3.3.2 without S-GW change): periodic and normal, from ECM-IDLE (the
//! stored context found and the message verified by
//! [`crate::service_request`]) or connected; TAU ACCEPT with a new GUTI, the
//! TAI list and T3412 under T3450; TAU COMPLETE frees the old GUTI. With the
//! "active" flag the bearers come back as in a service request.

use crate::context::Step;
use crate::mme::Mme;
use crate::nas_build;
use oxirush_nas::nas_eps::{EmmCause, NasEpsSecurityHeaderType, NasTrackingAreaUpdateRequest};
use oxirush_s1ap::s1ap::{Cause, CauseNas};

impl Mme {
    /// TRACKING AREA UPDATE REQUEST of a registered UE whose message was
    /// verified with its security context (5.5.3.2.4). `from_idle`: the
    /// message opened the S1 connection.
    pub(crate) fn on_tau_request(&mut self, id: u32, r: NasTrackingAreaUpdateRequest, from_idle: bool) {
        self.counters.incr("tau_request");
        self.ue_reachable(id);
        let active = r.eps_update_type.is_active();
        let Some(ue) = self.ues.get_mut(&id) else { return };
        // A TAU after an unfinished one (T3450 abort kept the old GUTI
        // valid): the older GUTI goes now.
        if let Some(old) = ue.old_mtmsi.take() {
            if self.by_mtmsi.get(&old) == Some(&id) {
                self.by_mtmsi.remove(&old);
            }
        }
        // Bearers the UE no longer has are released at the S-GW (5.5.3.2.4:
        // EPS bearer context status), default bearers by PDN disconnection.
        if let Some(status) = &r.eps_bearer_context_status {
            let gone: Vec<u8> = ue.sessions.iter().map(|s| s.ebi).filter(|&e| !status.is_active(e)).collect();
            if !gone.is_empty() && gone.len() < ue.sessions.len() {
                self.counters.incr("tau_bearers_released");
                self.release_pdns(id, &gone);
            } else if !gone.is_empty() {
                // No PDN connection left: the UE is detached (5.5.3.2.4).
                self.counters.incr("tau_reject_no_bearer");
                self.tau_reject_stored(id, EmmCause::NoEpsBearerContextActivated);
                return;
            }
        }
        let old_mtmsi = self.ues.get(&id).and_then(|u| u.guti).map(|g| g.m_tmsi.0);
        // A visitor (placed here for this procedure by an elastic MME's
        // front end) keeps its GUTI, which names the host that holds its
        // record between procedures: the ACCEPT carries none, and no
        // COMPLETE comes (5.5.3.2.4: a new GUTI is the MME's choice).
        let guti = match old_mtmsi.is_some_and(|m| !self.owns_identifier(m)) {
            true => None,
            false => Some(self.alloc_guti(id)),
        };
        let tacs = self.tai_list_of(id);
        let Some(ue) = self.ues.get_mut(&id) else { return };
        if guti.is_some() {
            ue.guti = guti;
        }
        // The list the UE takes from this ACCEPT is the one it is paged in
        // from now on (a lost ACCEPT is retransmitted under T3450).
        ue.tai_list.clone_from(&tacs);
        let ebis: Vec<u8> = ue.sessions.iter().map(|s| s.ebi).collect();
        // Connected, or asked to be: the S1 connection stays after the TAU.
        let release = from_idle && !active;
        let accept = nas_build::tau_accept(&self.cfg.plmn, &tacs, self.cfg.t3412_seconds, guti.as_ref(), &ebis);
        let Some(accept) = accept else {
            self.counters.incr("nas_encode_error");
            return;
        };
        let secured = NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered;
        match guti {
            Some(_) => {
                ue.step = Step::TauAccept { old_mtmsi, release };
                self.send_dl_nas_timed(id, crate::context::NasTimerKind::T3450, accept, secured);
            }
            // Done at the ACCEPT: T3450 runs only for a new GUTI.
            None => {
                ue.step = Step::Idle;
                self.counters.incr("tau_guti_kept");
                self.send_dl_nas(id, &accept, secured);
                if release {
                    self.release_idle_s1(id);
                }
            }
        }
        // TS 23.401 5.3.3.2 step 22 (active flag): the user plane is set up.
        if from_idle && active && !self.reestablish_bearers(id) {
            self.counters.incr("tau_active_without_bearers");
        }
    }

    /// TRACKING AREA UPDATE COMPLETE (5.5.3.2.4): the new GUTI is the one;
    /// the old goes. From idle without the active flag, the S1 connection
    /// is released (TS 23.401 5.3.3.2 step 21).
    pub(crate) fn on_tau_complete(&mut self, id: u32) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let Step::TauAccept { old_mtmsi, release } = ue.step else {
            self.counters.incr("nas_unexpected_message");
            return;
        };
        ue.step = Step::Idle;
        ue.timer = None;
        if let Some(old) = old_mtmsi {
            if self.by_mtmsi.get(&old) == Some(&id) {
                self.by_mtmsi.remove(&old);
            }
        }
        self.counters.incr("tau_complete");
        if release {
            self.release_idle_s1(id);
        }
    }

    /// T3450 expired a fifth time on TAU ACCEPT (5.5.3.2.7 c): the procedure
    /// is aborted; the old and the new GUTI both stay valid until the next
    /// procedure that assigns one.
    pub(crate) fn on_tau_accept_abort(&mut self, id: u32, old_mtmsi: Option<u32>) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let release = matches!(ue.step, Step::TauAccept { release: true, .. });
        ue.step = Step::Idle;
        ue.old_mtmsi = old_mtmsi;
        if release {
            self.release_idle_s1(id);
        }
    }

    /// A UE whose bearers were never set up on this connection goes back to
    /// ECM-IDLE: the S1 connection is released, the mobile reachable timer
    /// runs (TS 24.301 5.3.7).
    fn release_idle_s1(&mut self, id: u32) {
        self.release_s1(id, Cause::nas(CauseNas::normal_release));
        self.start_mobile_reachable(id);
    }

    /// TRACKING AREA UPDATE REJECT (5.5.3.2.5) on the S1 connection of the
    /// context `new` that the request opened; that context goes.
    pub(crate) fn tau_reject(&mut self, new: u32, cause: EmmCause) {
        self.counters.incr("tau_reject");
        if let Some(plain) = nas_build::tau_reject(cause) {
            self.send_dl_nas(new, &plain, NasEpsSecurityHeaderType::PlainNasMessageNotSecurityProtected);
        }
        self.abort_ue(new, CauseNas::normal_release);
    }

    /// TRACKING AREA UPDATE REJECT to a verified, registered UE: it is
    /// detached here (its PDN connections deleted, its context gone).
    fn tau_reject_stored(&mut self, id: u32, cause: EmmCause) {
        self.counters.incr("tau_reject");
        if let Some(plain) = nas_build::tau_reject(cause) {
            self.send_dl_nas(id, &plain, NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered);
        }
        self.abort_ue(id, CauseNas::detach);
    }
}
