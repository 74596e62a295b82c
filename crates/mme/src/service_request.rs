//! A UE that comes back from ECM-IDLE: the INITIAL UE MESSAGE of a UE the
//! MME knows. UE-triggered Service Request (TS 24.301 5.6.1, TS 23.401
//! 5.3.4.1), and the TAU and DETACH REQUESTs from idle, whose stored
//! context is found by the S-TMSI (or the GUTI in the message) and which
//! are integrity-checked with it before anything of it changes (TS 24.301
//! 4.4.4.3).

use crate::context::{EmmState, Step};
use crate::mme::Mme;
use crate::nas_build;
use crate::paging::Paging;
use crate::s1ap_build::{self, IcsErab, IcsUe};
use oxirush_nas::nas_eps::*;
use oxirush_nas::Decode;
use oxirush_s1ap::s1ap::{Cause, CauseNas, CauseRadioNetwork};

const EMM_PD: u8 = 0x07;
const DETACH_REQUEST: u8 = 0x45;
const TAU_REQUEST: u8 = 0x48;

/// The message type of a NAS PDU's plain EMM message, if it can be read
/// (plain, or integrity protected and not ciphered).
fn emm_type(nas: &[u8]) -> Option<u8> {
    match nas.first().map(|b| b >> 4)? {
        0 if nas.len() > 1 && nas[0] & 0x0f == EMM_PD => Some(nas[1]),
        1..=4 if nas.len() > 7 && nas[6] & 0x0f == EMM_PD => Some(nas[7]),
        _ => None,
    }
}

impl Mme {
    /// The NAS PDU of an INITIAL UE MESSAGE that names a stored context
    /// (SERVICE REQUEST, TRACKING AREA UPDATE REQUEST, DETACH REQUEST); the
    /// new S1 connection's context `new` is answered here and goes, or is
    /// taken over by the stored one. Returns whether it was such a PDU.
    pub(crate) fn on_initial_nas(&mut self, new: u32, nas: &[u8], s_tmsi: Option<(u8, u32)>) -> bool {
        let Some(&first) = nas.first() else { return false };
        if first & 0x0f != EMM_PD {
            return false;
        }
        match (first >> 4, emm_type(nas)) {
            (12..=15, _) => self.on_service_request(new, nas, s_tmsi),
            (0, Some(TAU_REQUEST)) => {
                // 4.4.4.3 lets a TAU REQUEST come unprotected, but it cannot
                // prove who sent it: the UE attaches again.
                self.counters.incr("tau_request_unprotected");
                self.tau_reject(new, EmmCause::UeIdentityCannotBeDerivedByTheNetwork);
            }
            (1..=4, Some(TAU_REQUEST | DETACH_REQUEST)) => self.on_idle_emm(new, nas, s_tmsi),
            _ => return false,
        }
        true
    }

    /// The stored UE an S-TMSI or a GUTI of ours names, or the EMM cause
    /// for a UE the MME does not know: #10 if it was implicitly detached,
    /// else #9 (TS 24.301 5.6.1.5, 5.5.3.2.5).
    fn stored_ue(&mut self, s_tmsi: Option<(u8, u32)>, guti: Option<&Guti>) -> Result<u32, EmmCause> {
        let unknown = EmmCause::UeIdentityCannotBeDerivedByTheNetwork;
        let m_tmsi = match (s_tmsi, guti) {
            (Some((mmec, m)), _) if mmec == self.cfg.mme_code => m,
            (Some(_), _) => return Err(unknown),
            (None, Some(g)) => {
                let ours = nas_build::nas_plmn(&self.cfg.plmn).ok_or(unknown)?;
                let gummei = (g.plmn(), g.mme_group_id(), g.mme_code());
                if gummei != (ours, self.cfg.mme_group_id, self.cfg.mme_code) {
                    return Err(unknown);
                }
                g.m_tmsi()
            }
            (None, None) => return Err(unknown),
        };
        match self.by_mtmsi.get(&m_tmsi).copied() {
            Some(id) if self.ues.get(&id).is_some_and(|u| u.emm == EmmState::Registered) => Ok(id),
            Some(_) => Err(unknown),
            None if self.was_implicitly_detached(m_tmsi) => Err(EmmCause::ImplicitlyDetached),
            None => Err(unknown),
        }
    }

    /// SERVICE REQUEST (TS 24.301 5.6.1.4): KSI and short MAC checked with
    /// the stored context (the check resolves the uplink NAS COUNT from the
    /// 5-bit sequence number); then the bearers are set up again.
    fn on_service_request(&mut self, new: u32, nas: &[u8], s_tmsi: Option<(u8, u32)>) {
        self.counters.incr("service_request");
        let Ok(req) = NasServiceRequest::decode(nas) else {
            self.counters.incr("nas_malformed");
            self.service_reject(new, EmmCause::UeIdentityCannotBeDerivedByTheNetwork);
            return;
        };
        let id = match self.stored_ue(s_tmsi, None) {
            Ok(id) => id,
            Err(cause) => {
                self.counters.incr("service_request_unknown_ue");
                self.service_reject(new, cause);
                return;
            }
        };
        let ksi = req.ksi_and_sequence_number >> 5;
        let verified = match self.ues.get_mut(&id).and_then(|u| u.security.as_mut()) {
            Some(sec) if sec.active && sec.ksi == ksi => match sec.ctx.unprotect_service_request(&req) {
                Ok(count) => {
                    // TS 33.401 A.3: the KeNB is derived from this COUNT.
                    sec.last_ul_count = count.get();
                    true
                }
                Err(_) => false,
            },
            _ => false,
        };
        if !verified {
            // 5.6.1.5: the network cannot tell who sent it; no state of the
            // stored UE changes (issue 8).
            self.counters.incr("service_request_mac_failure");
            self.service_reject(new, EmmCause::UeIdentityCannotBeDerivedByTheNetwork);
            return;
        }
        self.adopt_s1(new, id);
        let paging = self.paging_answered(id);
        if let Some(reattach) = paging.and_then(|p| p.detach) {
            // 5.5.2.3.1: the paging was for a detach, which goes now.
            self.start_network_detach(id, reattach);
            return;
        }
        if self.reestablish_bearers(id) {
            if let Some(ue) = self.ues.get_mut(&id) {
                ue.step = Step::ServiceRequest;
            }
        }
    }

    /// SERVICE REJECT (5.6.1.5) on the new S1 connection, which goes.
    fn service_reject(&mut self, new: u32, cause: EmmCause) {
        self.counters.incr(match cause {
            EmmCause::ImplicitlyDetached => "service_reject_implicitly_detached",
            _ => "service_reject_identity",
        });
        if let Some(plain) = nas_build::service_reject(cause) {
            self.send_dl_nas(new, &plain, NasEpsSecurityHeaderType::PlainNasMessageNotSecurityProtected);
        }
        self.abort_ue(new, CauseNas::normal_release);
    }

    /// A TRACKING AREA UPDATE or DETACH REQUEST from idle: the stored UE is
    /// named by the S-TMSI or the message's GUTI, the message checked with
    /// its security context, then handled as from a connected UE.
    fn on_idle_emm(&mut self, new: u32, nas: &[u8], s_tmsi: Option<(u8, u32)>) {
        let is_tau = emm_type(nas) == Some(TAU_REQUEST);
        let guti = match NasEpsMessage::decode_with_direction(&nas[6..], Direction::Uplink) {
            Ok(NasEpsMessage::Emm(_, NasEmmMessage::TrackingAreaUpdateRequest(r))) => r.old_guti.as_guti(),
            Ok(NasEpsMessage::Emm(_, NasEmmMessage::DetachRequestUeOriginating(d))) => d.eps_mobile_identity.as_guti(),
            _ => None,
        };
        let found = self.stored_ue(s_tmsi, guti.as_ref());
        let verified = found.ok().and_then(|id| {
            let sec = self.ues.get_mut(&id)?.security.as_mut().filter(|s| s.active)?;
            let v = sec.ctx.unprotect(nas, Direction::Uplink).ok()?;
            sec.last_ul_count = v.count.get();
            match v.message {
                NasEpsMessage::Emm(_, msg) => Some((id, msg)),
                _ => None,
            }
        });
        let Some((id, msg)) = verified else {
            let cause = match found {
                Err(c) => c,
                Ok(_) => {
                    // Nothing of the stored UE changes (issue 8).
                    self.counters.incr("nas_mac_failure");
                    EmmCause::UeIdentityCannotBeDerivedByTheNetwork
                }
            };
            match is_tau {
                true => self.tau_reject(new, cause),
                false => {
                    self.counters.incr("detach_unknown_ue");
                    self.abort_ue(new, CauseNas::normal_release);
                }
            }
            return;
        };
        self.adopt_s1(new, id);
        let paging = self.paging_answered(id);
        match msg {
            NasEmmMessage::TrackingAreaUpdateRequest(r) => match paging {
                Some(Paging { detach: Some(reattach), .. }) => self.start_network_detach(id, reattach),
                // A TAU that crosses a paging for downlink data: the bearers
                // come up as if the UE had set the active flag (TS 23.401
                // 5.3.4.3: the paging is answered by this connection).
                Some(Paging { ddn: true, .. }) => {
                    self.counters.incr("tau_answers_paging");
                    let mut r = *r;
                    r.eps_update_type = r.eps_update_type.with_active(true);
                    self.on_tau_request(id, r, true)
                }
                _ => self.on_tau_request(id, *r, true),
            },
            NasEmmMessage::DetachRequestUeOriginating(d) => self.on_detach_request(id, *d, true),
            _ => self.counters.incr("nas_unexpected_message"),
        }
    }

    /// The stored UE `id` takes over the S1 connection of the context
    /// `new` that its INITIAL UE MESSAGE made (keeping its MME-UE-S1AP-ID,
    /// its S11 TEID); an S1 connection it still had elsewhere is released
    /// first (TS 23.401 5.3.4.1, TS 36.413 8.3.3). The UE is reachable.
    pub(crate) fn adopt_s1(&mut self, new: u32, id: u32) {
        self.touch(id);
        if self.ues.get(&id).is_some_and(|u| u.s1.is_some()) {
            self.counters.incr("ue_old_s1_released");
            self.release_s1(id, Cause::radioNetwork(CauseRadioNetwork::unspecified));
        }
        let Some(n) = self.ues.remove(&new) else { return };
        if let Some(s1) = n.s1 {
            self.by_enb_ue.insert((s1.assoc, s1.enb_ue_s1ap_id), id);
        }
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.s1 = n.s1;
            ue.tai = n.tai.or(ue.tai);
            ue.ecgi = n.ecgi.or(ue.ecgi);
        }
        self.ue_reachable(id);
    }

    /// INITIAL CONTEXT SETUP REQUEST with every PDN connection's default
    /// bearer (TS 23.401 5.3.4.1 step 4): the S-GW's S1-U F-TEIDs, the UE
    /// security capabilities, the stored UE radio capability and a fresh
    /// KeNB from the uplink NAS COUNT just verified; no NAS PDU. Returns
    /// whether it went.
    pub(crate) fn reestablish_bearers(&mut self, id: u32) -> bool {
        let Some(kenb) = self.fresh_kenb(id) else { return false };
        let Some(ue) = self.ues.get(&id) else { return false };
        let (Some(s1), Some(sec)) = (ue.s1, ue.security.as_ref()) else { return false };
        let ue_ambr = ue.ue_ambr();
        let erabs: Vec<IcsErab> = ue
            .sessions
            .iter()
            .map(|s| IcsErab { ebi: s.ebi, qci: s.qci, arp: s.arp, sgw_s1u: s.sgw_s1u, nas: None })
            .collect();
        if erabs.is_empty() {
            return false;
        }
        let ics = IcsUe {
            mme_ue_id: id,
            enb_ue_id: s1.enb_ue_s1ap_id,
            ue_ambr,
            eea: sec.ue_eea,
            eia: sec.ue_eia,
            kenb: &kenb,
        };
        let data = s1ap_build::initial_context_setup_request_erabs(&ics, erabs, ue.ue_radio_capability.as_deref());
        self.push_s1(s1.assoc, s1.stream, data);
        true
    }

    /// The bearers could not be set up again (INITIAL CONTEXT SETUP
    /// FAILURE, TS 23.401 5.3.4.1): the UE goes back to ECM-IDLE.
    pub(crate) fn reestablish_failed(&mut self, id: u32) {
        self.counters.incr("service_request_ics_failure");
        self.stop_timer(id);
        self.finish_s1_release(id);
    }
}
