//! X2-based handover without S-GW relocation (TS 23.401 5.5.1.1.2,
//! TS 36.413 8.4.4): the target eNB's PATH SWITCH REQUEST moves the UE's S1
//! connection to the target (the source is released over X2, not by the
//! MME), a Modify Bearer per PDN connection switches the downlink to the
//! target's S1-U F-TEIDs (the S-GW sends End Markers to the source), and
//! the PATH SWITCH REQUEST ACKNOWLEDGE carries the next {NCC, NH} (TS 33.401
//! 7.2.8.4.3).

use crate::context::{EmmState, S1Conn, Step};
use crate::mme::Mme;
use crate::s1_handover::{Handover, Phase};
use crate::s1ap_build;
use crate::s1ap_handler::{plmn_of, S1Result};
use mobicore_common::requester::TransportError;
use mobicore_common::s11::{ModifyBearerRequest, S11Request, S11Response};
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ebi, Ecgi, Fteid, Tai, Teid};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{extract_s1ap_ies, ie};
use std::net::Ipv4Addr;

/// The TAI of an S1AP TAI IE (TS 36.413 9.2.3.16).
pub(crate) fn tai_of(t: &TAI) -> Option<Tai> {
    Some(Tai { plmn: plmn_of(&t.plmn_identity)?, tac: u16::from_be_bytes(t.tac.0) })
}

/// The ECGI of an S1AP E-UTRAN CGI (TS 36.413 9.2.1.38): the 28-bit cell
/// identity, left aligned in its octets.
pub(crate) fn ecgi_of(c: &EUTRANCGI) -> Option<Ecgi> {
    let plmn = plmn_of(&c.plmn_identity)?;
    let mut b = [0u8; 4];
    for (i, x) in c.cell_id.0.to_vec().iter().take(4).enumerate() {
        b[i] = *x;
    }
    Some(Ecgi { plmn, eci: u32::from_be_bytes(b) >> 4 })
}

/// An IPv4 GTP-U F-TEID from a Transport Layer Address (TS 36.413 9.2.2.1:
/// IPv4, or IPv4 then IPv6) and a GTP-TEID; `None` for an IPv6-only one.
pub(crate) fn fteid_of(addr: &TransportLayerAddress<'_>, teid: &GTPTEID) -> Option<Fteid> {
    let o = addr.0.as_octets();
    if o.len() != 4 && o.len() != 20 {
        return None;
    }
    Some(Fteid { teid: Teid(u32::from_be_bytes(teid.0)), ipv4: Ipv4Addr::new(o[0], o[1], o[2], o[3]) })
}

/// The first octets of the EEA and EIA bitmaps of UE Security Capabilities.
pub(crate) fn security_octets(c: &UESecurityCapabilities<'_>) -> (u8, u8) {
    let first = |b: &oxirush_s1ap::BitString<'_>| b.as_octets().first().copied().unwrap_or(0);
    (first(&c.encryption_algorithms.0), first(&c.integrity_protection_algorithms.0))
}

impl Mme {
    /// PATH SWITCH REQUEST (TS 36.413 8.4.4.2) from the target eNB.
    pub(crate) fn on_path_switch_request(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, PathSwitchRequest,
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
            req mme_id: u32 = SourceMME_UE_S1AP_ID(id),
            lax cgi: EUTRANCGI = EUTRAN_CGI(c) => c,
            lax tai: TAI = TAI(t) => t,
            lax caps: (u8, u8) = UESecurityCapabilities(c) => security_octets(&c),
        );
        let mut switched: Vec<(u8, Option<Fteid>)> = Vec::new();
        for item in pdu.items::<ie::E_RABToBeSwitchedDLList>() {
            let item = item?;
            switched.push((item.e_rab_id.0.min(255) as u8, fteid_of(&item.transport_layer_address, &item.gtp_teid)));
        }
        let fail = |m: &mut Mme, counter: &'static str, cause: Cause| {
            m.counters.incr(counter);
            m.push_s1(assoc, 0, s1ap_build::path_switch_request_failure(mme_id, enb_id, cause));
        };
        let radio = Cause::radioNetwork;
        if !self.enbs.get(&assoc).is_some_and(|e| e.setup) {
            let cause = Cause::protocol(CauseProtocol::message_not_compatible_with_receiver_state);
            fail(self, "path_switch_before_setup", cause);
            return Ok(());
        }
        let Some(ue) = self.ues.get(&mme_id) else {
            fail(self, "path_switch_unknown_ue", radio(CauseRadioNetwork::unknown_mme_ue_s1ap_id));
            return Ok(());
        };
        // Again from the target the UE switched to, its Modify Bearers out
        // (an elastic MME host took it and died before what it sent went
        // out; its heir asked them again): the ACKNOWLEDGE comes with them.
        let on_target = ue.s1.is_some_and(|s| s.assoc == assoc && s.enb_ue_s1ap_id == enb_id);
        if on_target && ue.handover.as_ref().is_some_and(|h| h.phase == crate::s1_handover::Phase::PathSwitch) {
            self.counters.incr("path_switch_repeated");
            return Ok(());
        }
        // The UE must be ECM-CONNECTED on another S1 connection.
        let Some(source) = ue.s1.filter(|s| !(s.assoc == assoc && s.enb_ue_s1ap_id == enb_id)) else {
            fail(self, "path_switch_ue_not_connected", radio(CauseRadioNetwork::unknown_mme_ue_s1ap_id));
            return Ok(());
        };
        // A service request whose INITIAL CONTEXT SETUP RESPONSE has not
        // come yet (it may be behind on the source's association) does not
        // stop the path switch: the UE is at the target; the source's late
        // answer no longer names the UE's connection and is refused.
        let settled = matches!(ue.step, Step::Idle | Step::ServiceRequest);
        if ue.emm != EmmState::Registered || !settled || ue.esm.is_some() || ue.security.is_none() {
            fail(self, "path_switch_busy", radio(CauseRadioNetwork::interaction_with_other_procedure));
            return Ok(());
        }
        // TS 36.413 8.4.4.4: each E-RAB once, each one the UE has.
        let mut seen = std::collections::HashSet::new();
        if !switched.iter().all(|(e, _)| seen.insert(*e)) {
            fail(self, "path_switch_unknown_erab", radio(CauseRadioNetwork::multiple_E_RAB_ID_instances));
            return Ok(());
        }
        if switched.is_empty() || !switched.iter().all(|(e, _)| ue.sessions.iter().any(|s| s.ebi == *e)) {
            fail(self, "path_switch_unknown_erab", radio(CauseRadioNetwork::unknown_E_RAB_ID));
            return Ok(());
        }
        let Some(switched) = switched.into_iter().map(|(e, f)| f.map(|f| (e, f))).collect::<Option<Vec<_>>>() else {
            fail(self, "path_switch_bad_transport_address", Cause::transport(CauseTransport::unspecified));
            return Ok(());
        };
        // TS 33.401 7.2.4.2.2: capabilities unlike those stored are logged;
        // the ACK carries the stored ones.
        let mismatch = match (caps, ue.security.as_ref()) {
            (Some(c), Some(sec)) => c != (sec.ue_eea, sec.ue_eia),
            _ => false,
        };
        if mismatch {
            self.counters.incr("path_switch_ue_security_capabilities_mismatch");
        }
        // TS 23.401 5.5.1.1.2 step 2: a PDN connection whose default bearer
        // was not switched is released.
        let released: Vec<u8> =
            ue.sessions.iter().map(|s| s.ebi).filter(|e| !switched.iter().any(|(x, _)| x == e)).collect();
        self.counters.incr("path_switch_request");
        // The S1 connection is the target's now; the source forgets it
        // without a UE CONTEXT RELEASE COMMAND (the target releases it over X2).
        self.unlink_s1(mme_id, source);
        let stream = self.enbs.get_mut(&assoc).map(|e| e.pick_stream()).unwrap_or(0);
        let target = S1Conn { assoc, enb_ue_s1ap_id: enb_id, stream };
        self.link_conn(mme_id, target);
        let mut requests = Vec::new();
        if let Some(ue) = self.ues.get_mut(&mme_id) {
            ue.s1 = Some(target);
            if let Some(t) = tai.as_ref().and_then(tai_of) {
                ue.tai = Some(t);
            }
            if let Some(c) = cgi.as_ref().and_then(ecgi_of) {
                ue.ecgi = Some(c);
            }
            for s in ue.sessions.iter_mut() {
                if let Some((_, f)) = switched.iter().find(|(e, _)| *e == s.ebi) {
                    s.enb_s1u = Some(*f);
                    requests.push(ModifyBearerRequest { sgw_teid: s.sgw_s11.teid, ebi: Ebi(s.ebi), s1u_enb_fteid: *f });
                }
            }
            let mut h = Handover::new(Phase::PathSwitch, assoc, stream);
            h.target = Some(target);
            h.pending = requests.len().min(u8::MAX as usize) as u8;
            h.released = released.clone();
            h.ue_security_mismatch = mismatch;
            ue.step = Step::Handover;
            ue.handover = Some(h);
        }
        self.release_pdns(mme_id, &released);
        for r in requests {
            self.request_s11(mme_id, S11Request::ModifyBearer(r));
        }
        Ok(())
    }

    /// Put `conn` in the eNB's table as one of UE `id`'s S1 connections. An
    /// eNB that reuses its UE id ends the older connection (as `new_ue`).
    pub(crate) fn link_conn(&mut self, id: u32, conn: S1Conn) {
        match self.by_enb_ue.insert((conn.assoc, conn.enb_ue_s1ap_id), id) {
            Some(old) if old == id => {}
            Some(old) => {
                if let Some(u) = self.ues.get_mut(&old) {
                    if u.s1 == Some(conn) {
                        u.s1 = None;
                    }
                }
            }
            None => {
                if let Some(e) = self.enbs.get_mut(&conn.assoc) {
                    e.s1_ues += 1;
                }
            }
        }
    }

    /// Delete the PDN connections whose default bearer is in `ebis`, without
    /// waiting for the answers.
    pub(crate) fn release_pdns(&mut self, id: u32, ebis: &[u8]) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let (gone, kept) = std::mem::take(&mut ue.sessions).into_iter().partition(|s| ebis.contains(&s.ebi));
        ue.sessions = kept;
        let gone: Vec<crate::context::Session> = gone;
        for s in gone {
            self.counters.incr("handover_pdn_released");
            let req = mobicore_common::s11::DeleteSessionRequest { sgw_teid: s.sgw_s11.teid, linked_ebi: Ebi(s.ebi) };
            self.request_s11(id, S11Request::DeleteSession(req));
        }
    }

    /// An S11 answer during the path switch: the last Modify Bearer answered
    /// ends it (TS 23.401 5.5.1.1.2 steps 5-6, TS 36.413 8.4.4.2/8.4.4.3).
    pub(crate) fn on_path_switch_s11(&mut self, id: u32, r: Result<S11Response, TransportError>) {
        let Some(h) = self.ues.get_mut(&id).and_then(|u| u.handover.as_mut()) else { return };
        match r {
            Ok(S11Response::ModifyBearer(m)) => {
                h.pending = h.pending.saturating_sub(1);
                h.failed |= !m.cause.is_accepted();
            }
            Err(_) => {
                h.pending = h.pending.saturating_sub(1);
                h.failed = true;
            }
            // The Delete Sessions of released PDN connections.
            Ok(S11Response::DeleteSession(_)) => return,
            Ok(_) => {
                self.counters.incr("s11_unexpected_response");
                return;
            }
        }
        if h.pending > 0 {
            return;
        }
        let h = h.clone();
        self.finish_path_switch(id, h);
    }

    fn finish_path_switch(&mut self, id: u32, h: Handover) {
        let Some(ue) = self.ues.get_mut(&id) else { return };
        ue.step = Step::Idle;
        ue.handover = None;
        let Some(target) = ue.s1 else { return };
        if h.failed {
            // TS 23.401 5.5.1.1.2: the path could not be switched; the UE
            // goes ECM-IDLE (its S1-U released at the S-GW).
            self.counters.incr("path_switch_modify_bearer_failed");
            let cause = Cause::radioNetwork(CauseRadioNetwork::ho_failure_in_target_EPC_eNB_or_target_system);
            let data = s1ap_build::path_switch_request_failure(id, target.enb_ue_s1ap_id, cause);
            self.push_s1(target.assoc, target.stream, data);
            self.lose_s1(target.assoc, &[id], "path_switch_ue_aborted");
            return;
        }
        let caps = ue.security.as_ref().map(|s| (s.ue_eea, s.ue_eia)).filter(|_| h.ue_security_mismatch);
        let Some((ncc, nh)) = self.next_nh(id) else { return };
        let data = s1ap_build::path_switch_request_acknowledge(id, target.enb_ue_s1ap_id, &h.released, ncc, &nh, caps);
        self.push_s1(target.assoc, target.stream, data);
        self.counters.incr("x2_handover_completed");
        if h.release_requested {
            self.start_s1_release(id);
        }
    }
}
