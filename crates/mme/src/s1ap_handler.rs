//! S1AP in: association events, PDU decoding and dispatch to procedures.
//! Whatever an eNB sends, the answer is the one TS 36.413 clause 10 gives
//! (a failure message or an ERROR INDICATION, by the class of the procedure
//! and the criticality of what is wrong), it is counted, and it touches no
//! UE of another eNB.

use crate::context::{EmmState, EnbContext, S1Conn, Step};
use crate::mme::Mme;
use crate::s1ap_build;
use mobicore_common::s11::{ReleaseAccessBearersRequest, S11Request};
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ecgi, Plmn, Tai};
use oxirush_s1ap::helpers::plmn_from;
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{extract_s1ap_ies, Deviation, S1apPduKind};

pub(crate) type S1Result = Result<(), oxirush_s1ap::Error>;

/// A UE-associated message whose ids do not name a UE of this eNB.
pub(crate) struct UnknownUe(pub CauseRadioNetwork);

pub(crate) fn plmn_of(id: &PLMNidentity) -> Option<Plmn> {
    let (mcc, mnc) = plmn_from(id)?;
    Plmn::new(&mcc, &mnc).ok()
}

/// What a received message is to the error handling of TS 36.413 10.3: the
/// class of its procedure (8.1) and the direction of the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The request of a class 1 procedure that has a failure message.
    RequestWithFailure,
    /// The request of a class 1 procedure without one (Reset).
    Request,
    /// A class 2 message.
    Class2,
    /// The response of a procedure the MME started.
    Response,
    /// ERROR INDICATION: never answered (10.5).
    ErrorIndication,
}

/// The role of each message this MME implements; `None`: not implemented,
/// which 10.3.4.1 treats as a procedure code not comprehended.
fn role(kind: &S1apPduKind) -> Option<Role> {
    use S1apPduKind as K;
    Some(match kind {
        K::Initiating_S1Setup | K::Initiating_ENBConfigurationUpdate => Role::RequestWithFailure,
        K::Initiating_HandoverPreparation | K::Initiating_PathSwitchRequest => Role::RequestWithFailure,
        K::Initiating_Reset | K::Initiating_HandoverCancel => Role::Request,
        K::Initiating_HandoverNotification | K::Initiating_eNBStatusTransfer => Role::Class2,
        K::Successful_HandoverResourceAllocation | K::Unsuccessful_HandoverResourceAllocation => Role::Response,
        K::Initiating_initialUEMessage
        | K::Initiating_uplinkNASTransport
        | K::Initiating_UEContextReleaseRequest
        | K::Initiating_UECapabilityInfoIndication
        | K::Initiating_NASNonDeliveryIndication => Role::Class2,
        K::Successful_InitialContextSetup
        | K::Unsuccessful_InitialContextSetup
        | K::Successful_E_RABSetup
        | K::Successful_E_RABRelease
        | K::Successful_UEContextRelease => Role::Response,
        K::Initiating_ErrorIndication => Role::ErrorIndication,
        _ => return None,
    })
}

/// Whether a deviation makes the receiver reject the procedure (TS 36.413
/// 10.3.4.2 and 10.3.5 "reject IE", 10.3.6, 10.2), rather than ignore it.
fn rejects(d: &Deviation) -> bool {
    d.cause().is_some_and(|c| c != CauseProtocol::abstract_syntax_error_ignore_and_notify)
}

/// The UE ids of a message, where they are and decode.
fn ue_ids(pdu: &S1APPDU<'_>) -> (Option<u32>, Option<u32>) {
    let mme = pdu.ie::<oxirush_s1ap::ie::MME_UE_S1AP_ID>().and_then(|r| r.ok()).map(|v| v.0);
    let enb = pdu.ie::<oxirush_s1ap::ie::ENB_UE_S1AP_ID>().and_then(|r| r.ok()).map(|v| v.0);
    (mme, enb)
}

impl Mme {
    /// An association from `peer`: only eNBs that `enb_peers` allows may
    /// use S1-MME; any other is aborted and its messages ignored.
    pub(crate) fn on_s1_up_from(&mut self, assoc: AssocId, peer: std::net::IpAddr, outbound_streams: u16) {
        if !self.cfg.enb_peers.permits(peer) {
            self.counters.incr("s1_association_from_unknown_peer");
            self.refused.insert(assoc);
            self.push(crate::mme::MmeAction::S1Abort { assoc });
            return;
        }
        self.on_s1_up(assoc, outbound_streams);
    }

    pub(crate) fn on_s1_up(&mut self, assoc: AssocId, outbound_streams: u16) {
        if self.enbs.contains_key(&assoc) {
            self.drop_enb_ues(assoc);
        }
        self.enbs.insert(assoc, EnbContext::new(assoc, outbound_streams));
    }

    /// TS 23.401 5.3.5: the association is gone; its UEs lose their S1
    /// connection (ECM-IDLE), a UE in the middle of a procedure is aborted.
    pub(crate) fn on_s1_down(&mut self, assoc: AssocId) {
        self.refused.remove(&assoc);
        self.enbs.remove(&assoc);
        self.drop_enb_ues(assoc);
    }

    /// Drop the S1 part of every UE of `assoc`, and only those.
    pub(crate) fn drop_enb_ues(&mut self, assoc: AssocId) {
        // No COMPLETE will come for the releases commanded there: those
        // UEs are at rest now.
        let released: Vec<u32> = self
            .ues
            .iter()
            .filter(|(_, u)| u.releasing.as_ref().is_some_and(|r| r.s1.assoc == assoc))
            .map(|(&id, _)| id)
            .collect();
        for id in released {
            if let Some(ue) = self.ues.get_mut(&id) {
                ue.releasing = None;
            }
            self.touch(id);
        }
        let ids = self.s1_ues_of(assoc);
        self.lose_s1(assoc, &ids, "ue_aborted_enb_down");
    }

    /// The UEs with an S1 connection on `assoc`.
    pub(crate) fn s1_ues_of(&self, assoc: AssocId) -> Vec<u32> {
        self.by_enb_ue.iter().filter(|((a, _), _)| *a == assoc).map(|(_, id)| *id).collect()
    }

    /// The S1 connections of `ids` on `assoc` are gone with no release
    /// (association lost, S1 Setup again, S1 Reset): as an S1 release does
    /// (TS 23.401 5.3.5), a registered UE goes ECM-IDLE and its S1-U bearers
    /// are released at the S-GW; a UE in the middle of a procedure is aborted
    /// (`aborted` counts it). Nothing is sent to the eNB, and a UE whose S1
    /// connection is on another association is left alone.
    pub(crate) fn lose_s1(&mut self, assoc: AssocId, ids: &[u32], aborted: &'static str) {
        for &id in ids {
            self.touch(id);
            if self.handover_s1_lost(assoc, id) {
                continue;
            }
            let Some(s1) = self.ues.get(&id).and_then(|u| u.s1).filter(|s| s.assoc == assoc) else {
                continue;
            };
            self.unlink_s1(id, s1);
            let Some(ue) = self.ues.get_mut(&id) else { continue };
            ue.s1 = None;
            match (ue.emm == EmmState::Registered, ue.step) {
                (true, Step::Idle) => {
                    ue.timer = None;
                    ue.sessions.iter_mut().for_each(|s| s.enb_s1u = None);
                    if let Some(s) = ue.sessions.first() {
                        let req = ReleaseAccessBearersRequest { sgw_teid: s.sgw_s11.teid };
                        self.request_s11(id, S11Request::ReleaseAccessBearers(req));
                    }
                }
                // An S1 release already runs: it finds no connection to command.
                (true, Step::ReleaseAccessBearers) => {}
                _ => {
                    self.counters.incr(aborted);
                    self.abort_ue(id, CauseNas::unspecified);
                }
            }
        }
    }

    pub(crate) fn on_s1_data(&mut self, assoc: AssocId, stream: u16, data: &[u8]) {
        if self.refused.contains(&assoc) {
            self.counters.incr("s1ap_from_unknown_peer");
            return;
        }
        if !self.enbs.contains_key(&assoc) {
            // Data before the association was reported up: take it as up.
            self.on_s1_up(assoc, stream.saturating_add(1).max(2));
        }
        let pdu = match S1AP_PDU::decode_borrowed(data) {
            Ok(p) => p,
            Err(_) => {
                // TS 36.413 10.2: a PDU that cannot be decoded.
                self.counters.incr("s1ap_malformed");
                let cause = Cause::protocol(CauseProtocol::transfer_syntax_error);
                self.push_s1(assoc, 0, s1ap_build::error_indication(None, None, cause));
                return;
            }
        };
        let kind = pdu.kind();
        let Some(role) = role(&kind) else {
            self.not_comprehended(assoc, &pdu);
            return;
        };
        // TS 36.413 10.3.4.2, 10.3.5, 10.3.6: the IEs against the object set.
        let deviations = match pdu.check_structure() {
            Ok(d) => d,
            Err(_) => {
                self.counters.incr("s1ap_malformed");
                self.reject_message(assoc, &pdu, role, CauseProtocol::transfer_syntax_error, &[]);
                return;
            }
        };
        if let Some(cause) = deviations.iter().find(|d| rejects(d)).and_then(|d| d.cause()) {
            self.reject_message(assoc, &pdu, role, cause, &deviations);
            return;
        }
        // What is left is ignored; IEs of criticality notify are reported.
        let notify: Vec<Deviation> = deviations.into_iter().filter(|d| d.cause().is_some()).collect();
        let response_cd = match (notify.is_empty(), role) {
            (false, Role::RequestWithFailure | Role::Request) => {
                Some(pdu.criticality_diagnostics_for_response(&notify))
            }
            _ => None,
        };
        let result = match kind {
            S1apPduKind::Initiating_S1Setup => self.on_s1_setup_request(assoc, &pdu, response_cd),
            S1apPduKind::Initiating_ENBConfigurationUpdate => {
                self.on_enb_configuration_update(assoc, &pdu, response_cd)
            }
            S1apPduKind::Initiating_Reset => self.on_reset(assoc, &pdu, response_cd),
            S1apPduKind::Initiating_initialUEMessage => self.on_initial_ue_message(assoc, &pdu),
            S1apPduKind::Initiating_uplinkNASTransport => self.on_uplink_nas_transport(assoc, &pdu),
            S1apPduKind::Initiating_NASNonDeliveryIndication => self.on_nas_non_delivery(assoc, &pdu),
            S1apPduKind::Initiating_UECapabilityInfoIndication => self.on_ue_capability_info(assoc, &pdu),
            S1apPduKind::Successful_InitialContextSetup => self.on_ics_response(assoc, &pdu),
            S1apPduKind::Unsuccessful_InitialContextSetup => self.on_ics_failure(assoc, &pdu),
            S1apPduKind::Successful_E_RABSetup => self.on_erab_setup_response(assoc, &pdu),
            S1apPduKind::Successful_E_RABRelease => self.on_erab_release_response(assoc, &pdu),
            S1apPduKind::Initiating_UEContextReleaseRequest => self.on_release_request(assoc, &pdu),
            S1apPduKind::Successful_UEContextRelease => {
                self.on_handover_release_complete(assoc, &pdu);
                self.on_release_complete(assoc, &pdu)
            }
            S1apPduKind::Initiating_PathSwitchRequest => self.on_path_switch_request(assoc, &pdu),
            S1apPduKind::Initiating_HandoverPreparation => self.on_handover_required(assoc, &pdu),
            S1apPduKind::Successful_HandoverResourceAllocation => self.on_handover_request_ack(assoc, &pdu),
            S1apPduKind::Unsuccessful_HandoverResourceAllocation => self.on_handover_failure(assoc, &pdu),
            S1apPduKind::Initiating_eNBStatusTransfer => self.on_enb_status_transfer(assoc, &pdu),
            S1apPduKind::Initiating_HandoverNotification => self.on_handover_notify(assoc, &pdu),
            S1apPduKind::Initiating_HandoverCancel => self.on_handover_cancel(assoc, &pdu),
            S1apPduKind::Initiating_ErrorIndication => {
                self.counters.incr("s1ap_error_indication_received");
                Ok(())
            }
            _ => Ok(()),
        };
        match result {
            Err(e) => {
                // An IE the structure check cannot see into (10.2, 10.3).
                let d = Deviation::of(&e);
                let cause = d.as_ref().and_then(|d| d.cause());
                let cause = cause.unwrap_or(CauseProtocol::abstract_syntax_error_falsely_constructed_message);
                self.reject_message(assoc, &pdu, role, cause, d.as_slice());
            }
            Ok(()) if !notify.is_empty() && matches!(role, Role::Class2 | Role::Response) => {
                // 10.3.4.2, 10.3.5: ignored and notified by an ERROR INDICATION.
                self.counters.incr("s1ap_ie_ignored_and_notified");
                let (mme, enb) = ue_ids(&pdu);
                let cause = Cause::protocol(CauseProtocol::abstract_syntax_error_ignore_and_notify);
                let cd = pdu.criticality_diagnostics(&notify);
                self.push_s1(assoc, 0, s1ap_build::error_indication_with(mme, enb, cause, Some(cd)));
            }
            Ok(()) => {}
        }
    }

    /// TS 36.413 10.3.4.1: a procedure this MME does not implement (or one
    /// of a later release) is a procedure code it does not comprehend; the
    /// criticality of the PDU says what to do: reject (ERROR INDICATION),
    /// ignore and notify (ignore it, ERROR INDICATION) or ignore. The ERROR
    /// INDICATION names the procedure code, the triggering message and the
    /// procedure criticality (Criticality Diagnostics).
    fn not_comprehended(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) {
        self.counters.incr("s1ap_unsupported_procedure");
        let cause = match pdu.criticality() {
            Criticality::reject => CauseProtocol::abstract_syntax_error_reject,
            Criticality::notify => CauseProtocol::abstract_syntax_error_ignore_and_notify,
            _ => {
                self.counters.incr("s1ap_unsupported_ignored");
                return;
            }
        };
        self.counters.incr(match cause {
            CauseProtocol::abstract_syntax_error_reject => "s1ap_unsupported_rejected",
            _ => "s1ap_unsupported_notified",
        });
        let (mme, enb) = ue_ids(pdu);
        let cd = pdu.criticality_diagnostics(&[]);
        self.push_s1(assoc, 0, s1ap_build::error_indication_with(mme, enb, Cause::protocol(cause), Some(cd)));
    }

    /// Reject a message of a procedure we implement, for `deviations`
    /// (TS 36.413 10.3.4.2, 10.3.5, 10.3.6, 10.2): the failure message of a
    /// class 1 procedure that has one, local error handling for a response,
    /// an ERROR INDICATION otherwise; none of its requests is executed.
    fn reject_message(
        &mut self,
        assoc: AssocId,
        pdu: &S1APPDU<'_>,
        role: Role,
        cause: CauseProtocol,
        deviations: &[Deviation],
    ) {
        self.counters.incr(match cause {
            CauseProtocol::transfer_syntax_error => "s1ap_transfer_syntax_error",
            _ => "s1ap_abstract_syntax_error",
        });
        let why = Cause::protocol(cause);
        match role {
            Role::RequestWithFailure => {
                let cd = Some(pdu.criticality_diagnostics_for_response(deviations));
                let fail = match pdu.kind() {
                    S1apPduKind::Initiating_ENBConfigurationUpdate => {
                        s1ap_build::enb_configuration_update_failure(why, cd)
                    }
                    S1apPduKind::Initiating_HandoverPreparation | S1apPduKind::Initiating_PathSwitchRequest => {
                        let (mme, enb) = ue_ids(pdu);
                        crate::s1_handover::reject_failure(pdu, why.clone()).unwrap_or_else(|| {
                            let cd = pdu.criticality_diagnostics(deviations);
                            s1ap_build::error_indication_with(mme, enb, why, Some(cd))
                        })
                    }
                    _ => s1ap_build::s1_setup_failure_with(why, cd),
                };
                self.push_s1(assoc, 0, fail);
            }
            Role::Request | Role::Class2 => {
                let (mme, enb) = ue_ids(pdu);
                let cd = pdu.criticality_diagnostics(deviations);
                self.push_s1(assoc, 0, s1ap_build::error_indication_with(mme, enb, why, Some(cd)));
            }
            // 10.3.4.2: the procedure ends unsuccessfully, handled locally.
            Role::Response => self.counters.incr("s1ap_response_rejected"),
            // 10.5: an ERROR INDICATION is never answered by another.
            Role::ErrorIndication => self.counters.incr("s1ap_error_indication_received"),
        }
    }

    /// The UE that a UE-associated message names, checked against the
    /// association it came on (TS 36.413 10.6).
    pub(crate) fn ue_for(&self, assoc: AssocId, mme_id: u32, enb_id: u32) -> Result<u32, UnknownUe> {
        let ue = self.ues.get(&mme_id).ok_or(UnknownUe(CauseRadioNetwork::unknown_mme_ue_s1ap_id))?;
        match ue.s1 {
            Some(s) if s.assoc == assoc && s.enb_ue_s1ap_id == enb_id => Ok(mme_id),
            Some(s) if s.assoc == assoc => Err(UnknownUe(CauseRadioNetwork::unknown_pair_ue_s1ap_id)),
            _ => Err(UnknownUe(CauseRadioNetwork::unknown_mme_ue_s1ap_id)),
        }
    }

    /// The UE a UE-associated message names, or `None` after answering
    /// the Error Indication of TS 36.413 10.6 (unknown or inconsistent IDs).
    pub(crate) fn known_ue(&mut self, assoc: AssocId, mme_id: u32, enb_id: u32) -> Option<u32> {
        match self.ue_for(assoc, mme_id, enb_id) {
            Ok(id) => {
                self.touch(id);
                Some(id)
            }
            // On the connection a UE CONTEXT RELEASE COMMAND released (it
            // crossed the command; or an elastic MME host took it and died
            // before the command went, and its heir sent the command again):
            // the release answers it, no ERROR INDICATION.
            Err(_) if self.released_here(assoc, mme_id, enb_id) => {
                self.counters.incr("s1ap_after_release_command");
                None
            }
            Err(e) => {
                self.unknown_ue(assoc, mme_id, enb_id, e);
                None
            }
        }
    }

    /// Whether UE `mme_id`'s release command, its COMPLETE not in, was for
    /// eNB UE `enb_id` on `assoc`.
    fn released_here(&self, assoc: AssocId, mme_id: u32, enb_id: u32) -> bool {
        self.ues
            .get(&mme_id)
            .and_then(|u| u.releasing.as_ref())
            .is_some_and(|r| r.s1.assoc == assoc && r.s1.enb_ue_s1ap_id == enb_id)
    }

    fn unknown_ue(&mut self, assoc: AssocId, mme_id: u32, enb_id: u32, e: UnknownUe) {
        self.counters.incr("s1ap_unknown_ue");
        tracing::debug!(mme_id, enb_id, cause = ?e.0, "S1AP message of a UE not known here");
        let ind = s1ap_build::error_indication(Some(mme_id), Some(enb_id), Cause::radioNetwork(e.0));
        self.push_s1(assoc, 0, ind);
    }

    /// INITIAL UE MESSAGE (TS 36.413 8.6.2.1): a new S1 connection.
    fn on_initial_ue_message(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, InitialUEMessage,
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
            req nas: Vec<u8> = NAS_PDU(n) => n.0.to_vec(),
            req tai: TAI = TAI(t) => t,
            // Mandatory, of criticality ignore: absent or undecodable, the
            // UE is served without it (TS 36.413 10.3.4.2, 10.3.5).
            lax cgi: EUTRANCGI = EUTRAN_CGI(c) => c,
            // The S-TMSI of a UE coming back from idle (9.2.3.6).
            lax s_tmsi: (u8, u32) = S_TMSI(t) => (t.mmec.0[0], u32::from_be_bytes(t.m_tmsi.0)),
        );
        let Some(enb) = self.enbs.get_mut(&assoc).filter(|e| e.setup) else {
            // 8.6.2.1 presumes S1 Setup; answer in the sense of 10.4.
            self.counters.incr("s1ap_before_setup");
            let cause = Cause::protocol(CauseProtocol::message_not_compatible_with_receiver_state);
            self.push_s1(assoc, 0, s1ap_build::error_indication(None, Some(enb_id), cause));
            return Ok(());
        };
        let stream = enb.pick_stream();
        let full = enb.s1_ues >= self.cfg.max_ues_per_enb || self.ues.len() >= self.cfg.max_ues;
        // Any group will do for a UE of no known identity (see `initial_group`).
        let group = crate::routing::initial_group(&nas, s_tmsi, self.own_gummei()).unwrap_or(enb_id as u8);
        let id = self.new_ue(S1Conn { assoc, enb_ue_s1ap_id: enb_id, stream }, group);
        if full {
            self.refuse_new_ue(id, &nas);
            return Ok(());
        }
        let tai = plmn_of(&tai.plmn_identity).map(|plmn| Tai { plmn, tac: u16::from_be_bytes(tai.tac.0) });
        let ecgi = cgi.and_then(|cgi| {
            let plmn = plmn_of(&cgi.plmn_identity)?;
            // 28-bit Cell Identity (TS 36.413 9.2.1.38), left aligned.
            let mut b = [0u8; 4];
            for (i, x) in cgi.cell_id.0.to_vec().iter().take(4).enumerate() {
                b[i] = *x;
            }
            Some(Ecgi { plmn, eci: u32::from_be_bytes(b) >> 4 })
        });
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.tai = tai;
            ue.ecgi = ecgi;
        }
        // A SERVICE REQUEST, TAU or DETACH of a stored UE (from ECM-IDLE).
        if self.on_initial_nas(id, &nas, s_tmsi) {
            return Ok(());
        }
        self.on_uplink_nas(id, &nas, true);
        // A first message that started nothing leaves no context behind.
        let idle = self
            .ues
            .get(&id)
            .is_some_and(|u| u.step == Step::Idle && u.attach.is_none() && u.emm == EmmState::Deregistered);
        if idle {
            self.counters.incr("initial_nas_ignored");
            self.abort_ue(id, CauseNas::unspecified);
        }
        Ok(())
    }

    /// A new UE beyond `max_ues` or `max_ues_per_enb`: its context lives
    /// only to carry the answer. An attach gets #22 congestion (TS 24.301
    /// 5.5.1.2.5); anything else the release of its S1 connection.
    fn refuse_new_ue(&mut self, id: u32, nas: &[u8]) {
        self.counters.incr("ue_context_limit");
        if crate::nas_handler::is_attach_request(nas) {
            self.reject_attach(id, oxirush_nas::nas_eps::EmmCause::Congestion, None);
        } else {
            self.abort_ue(id, CauseNas::unspecified);
        }
    }

    /// UPLINK NAS TRANSPORT (TS 36.413 8.6.2.3).
    fn on_uplink_nas_transport(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, UplinkNASTransport,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
            req nas: Vec<u8> = NAS_PDU(n) => n.0.to_vec(),
        );
        if let Some(id) = self.known_ue(assoc, mme_id, enb_id) {
            self.on_uplink_nas(id, &nas, false);
        }
        Ok(())
    }

    /// NAS NON DELIVERY INDICATION (TS 36.413 8.6.2.4): the eNB could not
    /// deliver a NAS PDU. A message under a NAS timer (T3450, T3460, T3470,
    /// ...) goes again when the timer expires, as for any lost message
    /// (TS 24.301 5.4.2.7, 5.5.1.2.7); another is not repeated.
    fn on_nas_non_delivery(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, NASNonDeliveryIndication,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
        );
        let Some(id) = self.known_ue(assoc, mme_id, enb_id) else { return Ok(()) };
        self.counters.incr("nas_non_delivery_indication");
        if self.ues.get(&id).is_some_and(|u| u.timer.is_none()) {
            self.counters.incr("nas_non_delivery_not_repeated");
        }
        Ok(())
    }
}
