//! S1AP in: association events, PDU decoding and dispatch to procedures.
//! Whatever an eNB sends, the answer is the one TS 36.413 clause 10 gives
//! (an ERROR INDICATION), it is counted, and it touches no UE of another eNB.

use crate::context::{EmmState, EnbContext, S1Conn, Step};
use crate::mme::Mme;
use crate::s1ap_build;
use mobicore_common::s11::{ReleaseAccessBearersRequest, S11Request};
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ecgi, Plmn, Tai};
use oxirush_s1ap::helpers::plmn_from;
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{extract_s1ap_ies, S1apPduKind};

pub(crate) type S1Result = Result<(), oxirush_s1ap::Error>;

/// A UE-associated message whose ids do not name a UE of this eNB.
pub(crate) struct UnknownUe(pub CauseRadioNetwork);

pub(crate) fn plmn_of(id: &PLMNidentity) -> Option<Plmn> {
    let (mcc, mnc) = plmn_from(id)?;
    Plmn::new(&mcc, &mnc).ok()
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
        let ids: Vec<u32> = self.by_enb_ue.iter().filter(|((a, _), _)| *a == assoc).map(|(_, id)| *id).collect();
        self.by_enb_ue.retain(|(a, _), _| *a != assoc);
        if let Some(e) = self.enbs.get_mut(&assoc) {
            e.s1_ues = 0;
        }
        for id in ids {
            let Some(ue) = self.ues.get_mut(&id) else {
                continue;
            };
            if ue.s1.is_some_and(|s| s.assoc == assoc) {
                ue.s1 = None;
            }
            let settled = ue.emm == EmmState::Registered && ue.step == Step::Idle;
            if settled {
                ue.timer = None;
                ue.sessions.iter_mut().for_each(|s| s.enb_s1u = None);
                if let Some(s) = ue.sessions.first() {
                    let req = ReleaseAccessBearersRequest { sgw_teid: s.sgw_s11.teid };
                    self.request_s11(id, S11Request::ReleaseAccessBearers(req));
                }
            } else {
                self.counters.incr("ue_aborted_enb_down");
                self.abort_ue(id, CauseNas::unspecified);
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
        let result = match pdu.kind() {
            S1apPduKind::Initiating_S1Setup => self.on_s1_setup_request(assoc, &pdu),
            S1apPduKind::Initiating_initialUEMessage => self.on_initial_ue_message(assoc, &pdu),
            S1apPduKind::Initiating_uplinkNASTransport => self.on_uplink_nas_transport(assoc, &pdu),
            S1apPduKind::Successful_InitialContextSetup => self.on_ics_response(assoc, &pdu),
            S1apPduKind::Unsuccessful_InitialContextSetup => self.on_ics_failure(assoc, &pdu),
            S1apPduKind::Successful_E_RABSetup => self.on_erab_setup_response(assoc, &pdu),
            S1apPduKind::Successful_E_RABRelease => self.on_erab_release_response(assoc, &pdu),
            S1apPduKind::Initiating_UEContextReleaseRequest => self.on_release_request(assoc, &pdu),
            S1apPduKind::Successful_UEContextRelease => self.on_release_complete(assoc, &pdu),
            S1apPduKind::Initiating_ErrorIndication => {
                self.counters.incr("s1ap_error_indication_received");
                Ok(())
            }
            S1apPduKind::Initiating_UECapabilityInfoIndication | S1apPduKind::Initiating_NASNonDeliveryIndication => {
                Ok(())
            }
            _ => {
                // TS 36.413 10.3.3 (unknown or unsupported procedure).
                self.counters.incr("s1ap_unsupported_procedure");
                Ok(())
            }
        };
        if result.is_err() {
            // TS 36.413 10.3.4: abstract syntax error (missing or wrong IE).
            self.counters.incr("s1ap_abstract_syntax_error");
            let cause = Cause::protocol(CauseProtocol::abstract_syntax_error_falsely_constructed_message);
            self.push_s1(assoc, 0, s1ap_build::error_indication(None, None, cause));
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
            Ok(id) => Some(id),
            Err(e) => {
                self.unknown_ue(assoc, mme_id, enb_id, e);
                None
            }
        }
    }

    fn unknown_ue(&mut self, assoc: AssocId, mme_id: u32, enb_id: u32, e: UnknownUe) {
        self.counters.incr("s1ap_unknown_ue");
        let ind = s1ap_build::error_indication(Some(mme_id), Some(enb_id), Cause::radioNetwork(e.0));
        self.push_s1(assoc, 0, ind);
    }

    /// INITIAL UE MESSAGE (TS 36.413 8.6.2.1): a new S1 connection.
    fn on_initial_ue_message(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, InitialUEMessage,
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
            req nas: Vec<u8> = NAS_PDU(n) => n.0.to_vec(),
            req tai: TAI = TAI(t) => t,
            req cgi: EUTRANCGI = EUTRAN_CGI(c) => c,
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
        let id = self.new_ue(S1Conn { assoc, enb_ue_s1ap_id: enb_id, stream });
        if full {
            self.refuse_new_ue(id, &nas);
            return Ok(());
        }
        let tai = plmn_of(&tai.plmn_identity).map(|plmn| Tai { plmn, tac: u16::from_be_bytes(tai.tac.0) });
        let ecgi = plmn_of(&cgi.plmn_identity).map(|plmn| {
            // 28-bit Cell Identity (TS 36.413 9.2.1.38), left aligned.
            let mut b = [0u8; 4];
            for (i, x) in cgi.cell_id.0.to_vec().iter().take(4).enumerate() {
                b[i] = *x;
            }
            Ecgi { plmn, eci: u32::from_be_bytes(b) >> 4 }
        });
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.tai = tai;
            ue.ecgi = ecgi;
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
}
