//! PFCP answers and failures (TS 29.244 6.2, 7.5) and the S11 responses
//! they complete. Only the configured UPFs are heard; an answer counts only
//! from the node its request went to, a Session Report only from the node
//! that holds the session.

use crate::context::{canonical, S11Pending, SessionState};
use crate::core::{Interface, PfcpOp, SpgwcCore};
use crate::s11_handler::REMOTE_PEER_NOT_RESPONDING;
use crate::sxa_build::{self as sxa, msg};
use mobicore_common::s11::*;
use mobicore_gtp::s11::{encode_response, modify_bearer_response, pco_as_epco};
use std::net::SocketAddr;
use std::time::Instant;

/// PFCP Cause "Request accepted" (TS 29.244 8.2.1).
const PFCP_ACCEPTED: u8 = 1;
/// The PFCP version we speak (TS 29.244 7.2.2.1).
const PFCP_VERSION: u8 = 1;
/// PFCP Cause "No established PFCP Association".
const PFCP_NO_ASSOCIATION: u8 = 72;

impl SpgwcCore {
    /// One PFCP datagram from `peer`. Nothing from an address that is no
    /// configured UPF's is read (dropped and counted).
    pub fn handle_pfcp(&mut self, now: Instant, peer: SocketAddr, bytes: &[u8]) {
        if self.upf_at(peer).is_none() {
            self.counters.incr("pfcp_from_unknown_peer");
            return;
        }
        self.pfcp_datagram(now, peer, bytes);
        self.count_transactions();
    }

    /// The configured UPF whose PFCP address is `peer`'s.
    pub(crate) fn upf_at(&self, peer: SocketAddr) -> Option<usize> {
        let ip = canonical(peer.ip());
        self.cfg.upfs.iter().position(|u| u.pfcp.ip() == ip)
    }

    fn pfcp_datagram(&mut self, now: Instant, peer: SocketAddr, bytes: &[u8]) {
        if bytes.len() >= 8 && bytes[0] >> 5 != PFCP_VERSION {
            // TS 29.244 7.2.2.1, 7.4.4.7: a request of another version gets
            // Version Not Supported Response (header only), anything else
            // is dropped; counted either way, as on the UPF.
            self.counters.incr("pfcp_version_not_supported");
            if msg::is_request(bytes[1]) {
                let seq = if bytes[0] & 0x01 != 0 { bytes.get(12..15) } else { bytes.get(4..7) };
                if let Some(q) = seq {
                    let seq = u32::from_be_bytes([0, q[0], q[1], q[2]]);
                    let b = sxa::encode(msg::VERSION_NOT_SUPPORTED_RESPONSE, None, seq, &[]);
                    self.out.push_back(crate::core::Transmit {
                        interface: Interface::Pfcp,
                        dst: peer,
                        bytes: b.into(),
                    });
                }
            }
            return;
        }
        let Some((h, ies)) = sxa::decode(bytes) else {
            self.counters.incr("pfcp_malformed");
            return;
        };
        match h.msg_type {
            msg::HEARTBEAT_REQUEST => {
                // Answer a UPF's heartbeat with our Recovery Time Stamp.
                let b = sxa::encode(msg::HEARTBEAT_RESPONSE, None, h.seq, &sxa::heartbeat_request(self.pfcp_recovery));
                self.out.push_back(crate::core::Transmit { interface: Interface::Pfcp, dst: peer, bytes: b.into() });
                return;
            }
            sxa::SESSION_REPORT_REQUEST => {
                // A retransmitted report is answered again, never added
                // up twice (TS 29.244 6.4).
                if self.pfcp.on_request(now, peer, h.seq, bytes) == mobicore_gtp::Incoming::New {
                    self.session_report(now, peer, h.seid.unwrap_or(0), h.seq, &ies);
                } else {
                    self.counters.incr("pfcp_duplicate_request");
                }
                return;
            }
            msg::HEARTBEAT_RESPONSE
            | msg::ASSOCIATION_SETUP_RESPONSE
            | msg::SESSION_ESTABLISHMENT_RESPONSE
            | msg::SESSION_MODIFICATION_RESPONSE
            | msg::SESSION_DELETION_RESPONSE => {}
            _ => {
                self.counters.incr("pfcp_unsupported_message");
                return;
            }
        }
        // Matched only if it comes from the node the request went to.
        let Some(op) = self.pfcp.on_response(peer, h.seq, h.msg_type) else {
            self.counters.incr("pfcp_unmatched_response");
            return;
        };
        let cause = sxa::cause_of(&ies);
        // Usage Reports ride on Modification and Deletion Responses
        // (TS 29.244 7.5.5.2, 7.5.7.2).
        if let PfcpOp::ModifyBearer { teid, seid, .. }
        | PfcpOp::ReleaseAccess { teid, seid, .. }
        | PfcpOp::Delete { teid, seid, .. } = op
        {
            if self.live(teid, seid) {
                self.record_usage(teid, &ies);
            }
        }
        if cause == PFCP_NO_ASSOCIATION {
            // The UPF lost our association (e.g. it restarted): set it up
            // again (TS 29.244 6.2.6.2.1).
            if let Some(i) = self.upf_at(peer) {
                if !self.upfs[i].probing {
                    self.upfs[i].associated = false;
                    self.associate(now, i);
                }
            }
        }
        match op {
            PfcpOp::AssociationSetup(i) => {
                self.upfs[i].probing = false;
                self.upfs[i].associated = cause == PFCP_ACCEPTED;
                if self.upfs[i].associated {
                    self.counters.incr("pfcp_associations_set_up");
                } else {
                    self.counters.incr("pfcp_association_rejected");
                }
            }
            PfcpOp::Heartbeat(i) => self.upfs[i].probing = false,
            PfcpOp::Establish { teid, s11, ids } => match sxa::up_seid_of(&ies).filter(|_| cause == PFCP_ACCEPTED) {
                Some(up_seid) if self.live(teid, ids.cp_seid) => self.session_created(now, teid, s11, up_seid),
                // Replaced by a newer Create Session meanwhile: undo on the UPF.
                Some(up_seid) => self.delete_on_upf(now, ids, up_seid),
                None if self.live(teid, ids.cp_seid) => {
                    self.counters.incr("pfcp_session_establishment_rejected");
                    self.create_failed(now, teid, s11, GtpCause::NO_RESOURCES_AVAILABLE)
                }
                None => self.release_ids(ids),
            },
            PfcpOp::ModifyBearer { teid, seid, s11, enb } if self.live(teid, seid) => {
                let ok = cause == PFCP_ACCEPTED;
                self.modify_done(now, teid, s11, ok.then_some(enb), ok)
            }
            PfcpOp::ReleaseAccess { teid, seid, s11 } if self.live(teid, seid) => {
                self.release_done(now, teid, s11, cause == PFCP_ACCEPTED)
            }
            PfcpOp::Delete { teid, seid, s11 } if self.live(teid, seid) => self.session_deleted(now, teid, s11),
            // The session was replaced meanwhile; its replacement cleans up.
            PfcpOp::ModifyBearer { .. } | PfcpOp::ReleaseAccess { .. } | PfcpOp::Delete { .. } => {}
            PfcpOp::DeleteStale(ids) => self.release_ids(ids),
            PfcpOp::DiscardBuffer { teid, seid } if self.live(teid, seid) => self.rearm_buffer(now, teid),
            PfcpOp::CreateForwarding { teid, seid, s11, tunnel } if self.live(teid, seid) => {
                self.forwarding_done(now, teid, s11, Some(tunnel), cause == PFCP_ACCEPTED)
            }
            PfcpOp::DeleteForwarding { teid, seid, s11 } if self.live(teid, seid) => {
                self.forwarding_done(now, teid, s11, None, cause == PFCP_ACCEPTED)
            }
            PfcpOp::CreateForwarding { .. } | PfcpOp::DeleteForwarding { .. } => {}
            PfcpOp::DiscardBuffer { .. } | PfcpOp::RearmBuffer { .. } => {}
        }
    }

    pub(crate) fn on_pfcp_timeout(&mut self, now: Instant, op: PfcpOp) {
        self.counters.incr("pfcp_timeout");
        match op {
            PfcpOp::AssociationSetup(i) => self.upfs[i].probing = false,
            PfcpOp::Heartbeat(i) => {
                // TS 29.244 6.2.2: the peer is considered down.
                self.upfs[i].probing = false;
                self.upfs[i].associated = false;
            }
            PfcpOp::Establish { teid, s11, ids } if self.live(teid, ids.cp_seid) => {
                self.create_failed(now, teid, s11, REMOTE_PEER_NOT_RESPONDING)
            }
            PfcpOp::Establish { ids, .. } => self.release_ids(ids),
            PfcpOp::ModifyBearer { teid, seid, s11, .. } if self.live(teid, seid) => {
                self.modify_done(now, teid, s11, None, false)
            }
            PfcpOp::ReleaseAccess { teid, seid, s11 } if self.live(teid, seid) => {
                self.release_done(now, teid, s11, false)
            }
            // The context goes away whatever the UPF says (TS 23.401 5.3.8.2.1).
            PfcpOp::Delete { teid, seid, s11 } if self.live(teid, seid) => self.session_deleted(now, teid, s11),
            PfcpOp::ModifyBearer { .. } | PfcpOp::ReleaseAccess { .. } | PfcpOp::Delete { .. } => {}
            // The UPF never answered: nothing more can be done from here.
            PfcpOp::DeleteStale(ids) => self.release_ids(ids),
            PfcpOp::DiscardBuffer { .. } | PfcpOp::RearmBuffer { .. } => {}
            PfcpOp::CreateForwarding { teid, seid, s11, tunnel } if self.live(teid, seid) => {
                self.forwarding_done(now, teid, s11, Some(tunnel), false)
            }
            PfcpOp::DeleteForwarding { teid, seid, s11 } if self.live(teid, seid) => {
                self.forwarding_done(now, teid, s11, None, false)
            }
            PfcpOp::CreateForwarding { .. } | PfcpOp::DeleteForwarding { .. } => {}
        }
    }

    fn session_created(&mut self, now: Instant, teid: u32, p: S11Pending, up_seid: u64) {
        let Some(s) = self.sessions.get_mut(&teid) else { return };
        s.up_seid = Some(up_seid);
        s.state = SessionState::Active;
        // TS 29.274 Table 7.2.2-1: Cause, Sender F-TEID, PGW S5/S8-C F-TEID
        // (we are the PGW too: our S11 address and the session's TEID),
        // PAA, APN Restriction, APN-AMBR, PCO if the UE sent PCO, the
        // Bearer Context created with its S1-U SGW F-TEID and Charging ID,
        // and Recovery (always: harmless where it is not the first contact).
        let resp = CreateSessionResponse {
            cause: s.cause,
            sgw_fteid: Some(s.sgw_s11),
            paa: s.ue_ipv4,
            apn_ambr: Some(s.apn_ambr),
            bearer_ebi: s.ebi,
            bearer_cause: GtpCause::REQUEST_ACCEPTED,
            s1u_sgw_fteid: Some(s.s1u_sgw),
            pgw_s5s8_c_fteid: Some(s.sgw_s11),
            charging_id: Some(s.charging_id),
            pdn_type: Some(s.pdn_type),
            ipv6_prefix: s.ue_ipv6.map(|a| (a, 64)),
            pco: s.pco.clone(),
        };
        let mut m =
            encode_response(&S11Response::CreateSession(resp), s.mme_s11.teid.0, p.seq, Some(self.cfg.recovery));
        if s.epco {
            pco_as_epco(&mut m);
        }
        self.counters.incr("sessions_created");
        self.answer_s11(now, p, m);
        self.run_queued(now, teid);
    }

    /// The UPF refused (or never answered) the establishment: nothing of
    /// the session is left, and its queued requests are refused.
    fn create_failed(&mut self, now: Instant, teid: u32, p: S11Pending, cause: GtpCause) {
        let Some(mut s) = self.remove_session(teid) else { return };
        self.release_ids(s.up_ids());
        self.reject_queued(now, &mut s);
        let resp = CreateSessionResponse {
            cause,
            sgw_fteid: None,
            paa: None,
            apn_ambr: None,
            bearer_ebi: s.ebi,
            bearer_cause: cause,
            s1u_sgw_fteid: None,
            pgw_s5s8_c_fteid: None,
            charging_id: None,
            pdn_type: None,
            ipv6_prefix: None,
            pco: None,
        };
        self.counters.incr("s11_rejected");
        self.answer_s11(now, p, encode_response(&S11Response::CreateSession(resp), s.mme_s11.teid.0, p.seq, None));
    }

    fn modify_done(&mut self, now: Instant, teid: u32, p: S11Pending, enb: Option<mobicore_common::Fteid>, ok: bool) {
        if ok {
            // The UE is reachable: the buffered downlink flows (5.3.4.3).
            self.paging_reset(teid);
        }
        let Some(s) = self.sessions.get_mut(&teid) else { return };
        s.state = SessionState::Active;
        if enb.is_some() {
            s.s1u_enb = enb;
        }
        let cause = if ok { GtpCause::REQUEST_ACCEPTED } else { GtpCause::SYSTEM_FAILURE };
        let m = modify_bearer_response(s.mme_s11.teid.0, p.seq, cause, s.ebi, ok.then_some(s.s1u_sgw));
        self.answer_s11(now, p, m);
        self.run_queued(now, teid);
    }

    fn release_done(&mut self, now: Instant, teid: u32, p: S11Pending, ok: bool) {
        self.paging_reset(teid);
        let Some(s) = self.sessions.get_mut(&teid) else { return };
        s.state = SessionState::Active;
        if ok {
            s.s1u_enb = None;
        }
        let cause = if ok { GtpCause::REQUEST_ACCEPTED } else { GtpCause::SYSTEM_FAILURE };
        let m = encode_response(&S11Response::ReleaseAccessBearers(cause), s.mme_s11.teid.0, p.seq, None);
        self.answer_s11(now, p, m);
        self.run_queued(now, teid);
    }

    /// A Session Report Request (TS 29.244 7.5.8): usage is recorded, a
    /// Downlink Data Report starts a Downlink Data Notification
    /// (paging.rs), and the
    /// answer is Request accepted, or Session context not found (65) for
    /// an SEID we do not know or that another UPF holds (7.5.9).
    fn session_report(&mut self, now: Instant, peer: SocketAddr, cp_seid: u64, seq: u32, ies: &[rs_pfcp::ie::Ie]) {
        use rs_pfcp::ie::cause::CauseValue;
        use rs_pfcp::ie::IeType;
        let from = self.upf_at(peer);
        let session = self.by_seid.get(&cp_seid).copied().filter(|t| self.sessions.contains_key(t));
        let owner = session.filter(|t| Some(self.sessions[t].upf) == from);
        if session.is_some() && owner.is_none() {
            self.counters.incr("pfcp_report_from_non_owner");
        }
        let (seid, cause) = match owner {
            Some(teid) => {
                if ies.iter().any(|i| i.ie_type == IeType::DownlinkDataReport) {
                    self.counters.incr("pfcp_downlink_data_reports");
                    self.on_downlink_data(now, teid);
                }
                self.record_usage(teid, ies);
                (self.sessions[&teid].up_seid.unwrap_or(0), CauseValue::RequestAccepted)
            }
            None => {
                self.counters.incr("pfcp_report_unknown_session");
                (0, CauseValue::SessionContextNotFound)
            }
        };
        let b = sxa::encode(sxa::SESSION_REPORT_RESPONSE, Some(seid), seq, &[mobicore_pfcp::cause_ie(cause)]);
        self.pfcp.answer(now, peer, seq, b);
    }

    /// Adds the Usage Reports among `ies` to the session's totals.
    fn record_usage(&mut self, teid: u32, ies: &[rs_pfcp::ie::Ie]) {
        let u = match sxa::usage_reports(ies) {
            Ok(u) if u.reports > 0 => u,
            Ok(_) => return,
            Err(_) => {
                self.counters.incr("pfcp_usage_report_malformed");
                return;
            }
        };
        // Peer values: added with saturation, never wrapped.
        self.count_saturating("usage_reports", u.reports);
        self.count_saturating("usage_uplink_octets", u.uplink_octets);
        self.count_saturating("usage_downlink_octets", u.downlink_octets);
        if let Some(s) = self.sessions.get_mut(&teid) {
            s.usage.add(&u);
        }
    }

    fn session_deleted(&mut self, now: Instant, teid: u32, p: S11Pending) {
        let Some(mut s) = self.remove_session(teid) else { return };
        self.release_ids(s.up_ids());
        self.counters.incr("sessions_deleted");
        tracing::info!(
            imsi = %s.imsi, apn = %s.apn, ue = ?s.ue_ipv4, ue_ipv6 = ?s.ue_ipv6, uplink_octets = s.usage.uplink_octets, downlink_octets = s.usage.downlink_octets,
            duration_secs = s.usage.duration_secs, "PDN connection released"
        );
        let m = encode_response(&S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED), s.mme_s11.teid.0, p.seq, None);
        self.answer_s11(now, p, m);
        // Requests queued behind the deletion address a context that is gone.
        self.reject_queued(now, &mut s);
    }
}
