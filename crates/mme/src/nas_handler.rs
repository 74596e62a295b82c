//! NAS in: security header, integrity check and deciphering, replay
//! protection, the rules of which messages may come unprotected
//! (TS 24.301 4.4.4.3), and dispatch to the EMM procedures.

use crate::context::Step;
use crate::mme::Mme;
use crate::nas_build;
use oxirush_nas::nas_eps::*;

/// A message the security layer let through, and whether its MAC was
/// verified with the UE's NAS security context.
pub(crate) struct Uplink {
    pub msg: Message,
    pub verified: bool,
}

/// An uplink EMM message, or an ESM message (only ever integrity
/// protected here: a plain ESM message travels inside an EMM container).
pub(crate) enum Message {
    Emm(NasEmmMessage),
    Esm(NasEsmHeader, NasEsmMessage),
}

const EMM_PD: u8 = 0x07;
const ATTACH_REQUEST: u8 = 0x41;

impl Mme {
    /// An uplink NAS PDU of the UE `id` (INITIAL UE MESSAGE or UPLINK NAS
    /// TRANSPORT).
    pub(crate) fn on_uplink_nas(&mut self, id: u32, data: &[u8], _initial: bool) {
        let Some(up) = self.unwrap_uplink(id, data) else {
            return;
        };
        let active = self.ues.get(&id).is_some_and(|u| u.security_active());
        match up.msg {
            Message::Emm(msg) => {
                if active && !up.verified && !allowed_unprotected(&msg) {
                    // TS 24.301 4.4.4.3: discard what must be integrity protected.
                    self.counters.incr("nas_unprotected_dropped");
                    return;
                }
                self.dispatch_emm(id, msg, up.verified);
            }
            Message::Esm(h, msg) if up.verified && active => self.dispatch_esm(id, h, msg),
            Message::Esm(..) => self.counters.incr("nas_unprotected_dropped"),
        }
    }

    fn unwrap_uplink(&mut self, id: u32, data: &[u8]) -> Option<Uplink> {
        let (Some(&first), true) = (data.first(), data.len() >= 2) else {
            self.counters.incr("nas_malformed");
            return None;
        };
        if first & 0x0f != EMM_PD {
            // A plain ESM message travels only inside an EMM container here.
            self.counters.incr("nas_unexpected_pd");
            return None;
        }
        match first >> 4 {
            0 => match NasEpsMessage::decode_with_direction(data, Direction::Uplink) {
                Ok(NasEpsMessage::Emm(_, msg)) => Some(Uplink { msg: Message::Emm(msg), verified: false }),
                Ok(_) => {
                    self.counters.incr("nas_unexpected_message");
                    None
                }
                Err(e) => {
                    self.answer_malformed(id, data, &e);
                    None
                }
            },
            1..=4 => self.unprotect_uplink(id, data),
            _ => {
                // SERVICE REQUEST and EMM TRANSPORT are not handled yet.
                self.counters.incr("nas_unsupported_header");
                None
            }
        }
    }

    fn unprotect_uplink(&mut self, id: u32, data: &[u8]) -> Option<Uplink> {
        let sec = self.ues.get_mut(&id).and_then(|u| u.security.as_mut());
        let Some(sec) = sec else {
            return self.unverified_attach(data);
        };
        match sec.ctx.unprotect(data, Direction::Uplink) {
            Ok(v) => {
                sec.last_ul_count = v.count.get();
                match v.message {
                    NasEpsMessage::Emm(_, msg) => Some(Uplink { msg: Message::Emm(msg), verified: true }),
                    NasEpsMessage::Esm(h, msg) => Some(Uplink { msg: Message::Esm(h, msg), verified: true }),
                    _ => {
                        self.counters.incr("nas_unexpected_message");
                        None
                    }
                }
            }
            Err(NasError::IntegrityCheckFailed) => {
                // Bad MAC or a replayed COUNT (4.4.3.2): discard, count.
                self.counters.incr("nas_mac_failure");
                self.unverified_attach(data)
            }
            Err(e) => {
                // Authentic but refused: answer per clause 7.
                self.answer_malformed(id, data, &e);
                None
            }
        }
    }

    /// TS 24.301 4.4.4.3: an ATTACH REQUEST that cannot be verified is still
    /// processed (authentication follows); any other is discarded.
    fn unverified_attach(&mut self, data: &[u8]) -> Option<Uplink> {
        if data.len() > 7 && data[0] >> 4 == 1 && is_attach_request(data) {
            if let Ok(NasEpsMessage::Emm(_, msg)) = NasEpsMessage::decode_with_direction(&data[6..], Direction::Uplink)
            {
                return Some(Uplink { msg: Message::Emm(msg), verified: false });
            }
        }
        self.counters.incr("nas_unverified_dropped");
        None
    }

    /// TS 24.301 7.5, 7.6: an ATTACH REQUEST that does not decode is
    /// rejected; any other message is answered with EMM STATUS.
    fn answer_malformed(&mut self, id: u32, data: &[u8], e: &NasError) {
        self.counters.incr("nas_malformed");
        let Some(answer) = NasEpsMessage::answer_to_refused(data, e, Direction::Uplink) else {
            return;
        };
        let cause = match &answer {
            NasEpsMessage::Emm(_, NasEmmMessage::EmmStatus(s)) => s.emm_cause.cause(),
            _ => None,
        };
        let plain_type = match data.first().map(|b| b >> 4) {
            Some(0) => data.get(1).copied(),
            _ => None,
        };
        if plain_type == Some(ATTACH_REQUEST) {
            let cause = cause.unwrap_or(EmmCause::InvalidMandatoryInformation);
            self.reject_attach(id, cause, None);
            return;
        }
        if let Ok(plain) = answer.encode() {
            let header = self.dl_header(id);
            self.send_dl_nas(id, &plain, header);
        }
    }

    fn dispatch_emm(&mut self, id: u32, msg: NasEmmMessage, v: bool) {
        let (step, registered) = match self.ues.get(&id) {
            Some(u) => (u.step, u.emm == crate::context::EmmState::Registered),
            None => return,
        };
        match (msg, step) {
            (NasEmmMessage::AttachRequest(r), _) => self.on_attach_request(id, *r),
            (NasEmmMessage::IdentityResponse(r), Step::Identity) => self.on_identity_response(id, *r),
            (NasEmmMessage::AuthenticationResponse(r), Step::Authentication) => self.on_authentication_response(id, *r),
            (NasEmmMessage::AuthenticationFailure(r), Step::Authentication) => self.on_authentication_failure(id, *r),
            (NasEmmMessage::SecurityModeComplete(c), Step::SecurityMode) if v => self.on_security_mode_complete(id, *c),
            (NasEmmMessage::SecurityModeReject(_), Step::SecurityMode) => self.on_security_mode_reject(id),
            (NasEmmMessage::AttachComplete(r), Step::AttachAccept) if v => self.on_attach_complete(id, *r),
            (NasEmmMessage::DetachRequestUeOriginating(r), _) => self.on_detach_request(id, *r, v),
            (NasEmmMessage::DetachAccept(_), Step::NetworkDetach) if v => self.on_detach_accept(id),
            // A connected UE's TAU (TS 24.301 5.5.3.2.2); one from idle
            // comes through `on_initial_nas`.
            (NasEmmMessage::TrackingAreaUpdateRequest(r), Step::Idle) if v && registered => {
                self.on_tau_request(id, *r, false)
            }
            (NasEmmMessage::TrackingAreaUpdateComplete(_), Step::TauAccept { .. }) if v => self.on_tau_complete(id),
            (NasEmmMessage::EmmStatus(_), _) => self.counters.incr("nas_emm_status_received"),
            (_, _) => {
                // TS 24.301 7.4: not compatible with the protocol state.
                self.counters.incr("nas_unexpected_message");
                if v {
                    let cause = EmmCause::MessageNotCompatibleWithTheProtocolState;
                    if let Some(plain) = nas_build::emm_status(cause) {
                        let header = self.dl_header(id);
                        self.send_dl_nas(id, &plain, header);
                    }
                }
            }
        }
    }
}

impl Mme {
    /// A protected ESM message (TS 24.301 6): the ESM information of the
    /// attach, and the UE-requested procedures after it.
    fn dispatch_esm(&mut self, id: u32, h: NasEsmHeader, msg: NasEsmMessage) {
        let Some(step) = self.ues.get(&id).map(|u| u.step) else { return };
        let (ebi, pti) = (h.eps_bearer_identity, h.procedure_transaction_identity);
        match msg {
            NasEsmMessage::EsmInformationResponse(r) if step == Step::EsmInformation => {
                self.on_esm_information_response(id, pti, *r)
            }
            NasEsmMessage::PdnConnectivityRequest(p) => self.on_pdn_connectivity_request(id, pti, &p),
            NasEsmMessage::PdnDisconnectRequest(r) => self.on_pdn_disconnect_request(id, pti, &r),
            NasEsmMessage::ActivateDefaultEpsBearerContextAccept(_) => self.on_activate_default_accept(id, ebi),
            NasEsmMessage::ActivateDefaultEpsBearerContextReject(_) => self.on_activate_default_reject(id, ebi),
            NasEsmMessage::DeactivateEpsBearerContextAccept(_) => self.on_deactivate_accept(id, ebi),
            NasEsmMessage::EsmStatus(_) => self.counters.incr("nas_esm_status_received"),
            _ => {
                // TS 24.301 7.4: not compatible with the protocol state.
                self.counters.incr("esm_unexpected_message");
                self.send_esm_status(id, ebi, pti, EsmCause::MessageTypeNotCompatibleWithTheProtocolState);
            }
        }
    }
}

/// Whether a NAS PDU is an ATTACH REQUEST, plain or integrity protected
/// (TS 24.301 9.1: the plain message follows a 6-octet security header).
pub(crate) fn is_attach_request(data: &[u8]) -> bool {
    match data.first().map(|b| b >> 4) {
        Some(0) => data.len() > 1 && data[0] & 0x0f == EMM_PD && data[1] == ATTACH_REQUEST,
        Some(1..=4) => data.len() > 7 && data[6] & 0x0f == EMM_PD && data[7] == ATTACH_REQUEST,
        _ => false,
    }
}

/// TS 24.301 4.4.4.3: the messages a network processes without integrity
/// protection. A DETACH REQUEST is not among them here once the UE has a
/// security context: an unprotected detach could come from anyone.
fn allowed_unprotected(msg: &NasEmmMessage) -> bool {
    matches!(
        msg,
        NasEmmMessage::AttachRequest(_)
            | NasEmmMessage::IdentityResponse(_)
            | NasEmmMessage::AuthenticationResponse(_)
            | NasEmmMessage::AuthenticationFailure(_)
            | NasEmmMessage::SecurityModeReject(_)
    )
}
