//! S11 procedures of the SGW-C (TS 29.274 7.2; TS 23.401 5.3.2.1, 5.3.4,
//! 5.3.5, 5.3.8): each request starts a PFCP procedure and is answered
//! when the UPF has answered.
//!
//! A request naming a session is served only for the MME that created it
//! (anyone else gets Context Not Found, as for a TEID it does not own,
//! TS 29.274 7.2.8, 7.2.10, 7.2.22); while a procedure of the session is in
//! flight it waits in the session's bounded queue.

use crate::context::{canonical, S11Pending, Session, SessionState, UpIds};
use crate::core::{PfcpOp, SpgwcCore};
use crate::sxa_build::{self as sxa, msg};
use mobicore_common::s11::*;
use mobicore_common::{Ebi, Fteid, PdnType, Teid};
use mobicore_gtp::message::{self as gm, GtpMessage};
use mobicore_gtp::s11::{create_session_flags, decode_request, encode_response, CreateSessionFlags};
use std::time::Instant;

/// GTPv2-C causes not named in `mobicore_common::s11::GtpCause`
/// (TS 29.274 Table 8.4-1).
pub const NEW_PDN_TYPE_NETWORK_PREFERENCE: GtpCause = GtpCause(18);
pub const NEW_PDN_TYPE_SINGLE_ADDRESS_BEARER_ONLY: GtpCause = GtpCause(19);
pub const PREFERRED_PDN_TYPE_NOT_SUPPORTED: GtpCause = GtpCause(83);
pub const REMOTE_PEER_NOT_RESPONDING: GtpCause = GtpCause(100);

/// The PDN type granted for a request of `requested` on an APN with an
/// IPv4 pool (`v4`) and/or an IPv6 pool (`v6`), and the cause it is
/// granted with; or the cause of the rejection (TS 23.401 5.3.1.1,
/// TS 29.274 8.4): never "Request accepted" with a type the UE did not
/// ask for.
pub fn grant_pdn_type(requested: PdnType, v4: bool, v6: bool, dual: bool) -> Result<(PdnType, GtpCause), GtpCause> {
    use PdnType::*;
    let ok = GtpCause::REQUEST_ACCEPTED;
    match (requested, v4, v6) {
        (Ipv4, true, _) => Ok((Ipv4, ok)),
        (Ipv6, _, true) => Ok((Ipv6, ok)),
        (Ipv4v6, true, true) if dual => Ok((Ipv4v6, ok)),
        // The MME did not set DAF: one address only, IPv4 preferred.
        (Ipv4v6, true, true) => Ok((Ipv4, NEW_PDN_TYPE_SINGLE_ADDRESS_BEARER_ONLY)),
        (Ipv4v6, true, false) => Ok((Ipv4, NEW_PDN_TYPE_NETWORK_PREFERENCE)),
        (Ipv4v6, false, true) => Ok((Ipv6, NEW_PDN_TYPE_NETWORK_PREFERENCE)),
        _ => Err(PREFERRED_PDN_TYPE_NOT_SUPPORTED),
    }
}

/// The APN-NI of an APN that may carry an Operator Identifier.
pub fn apn_ni(apn: &str) -> String {
    let l = apn.to_ascii_lowercase();
    match l.find(".mnc") {
        Some(i) if l.ends_with(".gprs") => l[..i].to_string(),
        _ => l,
    }
}

impl SpgwcCore {
    pub(crate) fn reject_s11(&mut self, now: Instant, p: S11Pending, request_type: u8, teid: u32, cause: GtpCause) {
        self.counters.incr("s11_rejected");
        if let Some(r) = gm::reject(request_type, teid, p.seq, cause.0, None) {
            self.answer_s11(now, p, r);
        }
    }

    pub(crate) fn on_s11_request(&mut self, now: Instant, p: S11Pending, m: &GtpMessage) {
        let t = m.body.msg_type();
        let req = match decode_request(m) {
            Ok(r) => r,
            Err(e) => {
                self.counters.incr("s11_rejected_ie");
                let teid = self.mme_teid_for(m.teid.unwrap_or(0), p.peer);
                let cause = e.cause().unwrap_or(GtpCause::SYSTEM_FAILURE).0;
                if let Some(r) = gm::reject(t, teid, p.seq, cause, e.offending_ie()) {
                    self.answer_s11(now, p, r);
                }
                return;
            }
        };
        let flags = create_session_flags(m).unwrap_or_default();
        self.dispatch_s11(now, p, t, req, flags);
    }

    /// The PDN connection a request on our TEID `teid` for bearer `ebi`
    /// means. An MME that keeps one SGW S11 TEID per UE (the last one we
    /// gave it) names the other PDN connections of the UE by their EBI
    /// (TS 29.274 7.2.7, 7.2.9: Linked EBI): the sibling session of the same
    /// IMSI with that EBI and the same owner. EBI 0 names none.
    fn resolve_pdn(&self, teid: Teid, ebi: Ebi, from: std::net::IpAddr) -> Teid {
        let Some(s) = self.sessions.get(&teid.0) else { return teid };
        if s.ebi == ebi || ebi.0 == 0 {
            return teid;
        }
        let sibling = self.by_imsi.get(&(s.imsi.clone(), ebi.0)).copied();
        match sibling.and_then(|t| self.sessions.get(&t).map(|o| (t, o))) {
            Some((t, o)) if o.owned_by(from) && o.mme_s11 == s.mme_s11 => {
                self.counters.incr("s11_request_for_sibling_pdn");
                Teid(t)
            }
            _ => teid,
        }
    }

    /// Serves one decoded S11 request; one of a session whose procedure is
    /// still in flight waits in its queue.
    fn dispatch_s11(&mut self, now: Instant, p: S11Pending, t: u8, mut req: S11Request, flags: CreateSessionFlags) {
        match &mut req {
            S11Request::ModifyBearer(r) => r.sgw_teid = self.resolve_pdn(r.sgw_teid, r.ebi, p.peer.ip()),
            S11Request::DeleteSession(r) => r.sgw_teid = self.resolve_pdn(r.sgw_teid, r.linked_ebi, p.peer.ip()),
            _ => {}
        }
        if let Some(teid) = session_teid(&req) {
            let max = self.cfg.max_queued_per_session;
            if let Some(s) = self.sessions.get_mut(&teid.0) {
                if !s.owned_by(p.peer.ip()) {
                    // Not this sender's context: as for an unknown TEID,
                    // Context Not Found on TEID 0 (TS 29.274 5.5.2, 8.4).
                    self.counters.incr("s11_request_from_non_owner");
                    return self.reject_s11(now, p, t, 0, GtpCause::CONTEXT_NOT_FOUND);
                }
                if s.state != SessionState::Active {
                    if s.queued.len() >= max {
                        // TS 29.274 8.4 Table 8.4-1: "No resources
                        // available", the queue being the resource.
                        let mme = s.mme_s11.teid.0;
                        self.counters.incr("s11_request_queue_full");
                        return self.reject_s11(now, p, t, mme, GtpCause::NO_RESOURCES_AVAILABLE);
                    }
                    s.queued.push_back((p, req));
                    let depth = s.queued.len() as u64;
                    self.counters.incr("s11_queued_busy");
                    self.counters.get("s11_queued_high_water").fetch_max(depth, std::sync::atomic::Ordering::Relaxed);
                    return;
                }
            }
        }
        match req {
            S11Request::CreateSession(r) => self.create_session(now, p, r, flags),
            S11Request::ModifyBearer(r) => {
                if let Some(s) = self.sessions.get(&r.sgw_teid.0).filter(|s| s.ebi != r.ebi) {
                    let mme = s.mme_s11.teid.0;
                    let resp =
                        mobicore_gtp::s11::modify_bearer_response(mme, p.seq, GtpCause::CONTEXT_NOT_FOUND, r.ebi, None);
                    self.counters.incr("s11_rejected");
                    return self.answer_s11(now, p, resp);
                }
                let Some(s) = self.active(now, p, t, r.sgw_teid) else { return };
                let (upf, up_seid, seid) = (s.upf, s.up_seid, s.cp_seid);
                // The FAR forwarded to another eNB: End Markers on the old path.
                let moved = s.s1u_enb.is_some_and(|e| e != r.s1u_enb_fteid);
                let ies = sxa::forward_downlink(r.s1u_enb_fteid.teid.0, r.s1u_enb_fteid.ipv4, moved);
                self.session_request(
                    now,
                    upf,
                    up_seid,
                    &ies,
                    PfcpOp::ModifyBearer { teid: r.sgw_teid.0, seid, s11: p, enb: r.s1u_enb_fteid },
                );
            }
            S11Request::ReleaseAccessBearers(r) => {
                let Some(s) = self.active(now, p, t, r.sgw_teid) else { return };
                let (upf, up_seid, seid) = (s.upf, s.up_seid, s.cp_seid);
                self.session_request(
                    now,
                    upf,
                    up_seid,
                    &sxa::buffer_downlink(),
                    PfcpOp::ReleaseAccess { teid: r.sgw_teid.0, seid, s11: p },
                );
            }
            S11Request::CreateIndirectForwarding(r) => self.create_indirect_forwarding(now, p, t, r),
            S11Request::DeleteIndirectForwarding(r) => {
                let Some(s) = self.active(now, p, t, r.sgw_teid) else { return };
                let (upf, up_seid, seid, fwd) = (s.upf, s.up_seid, s.cp_seid, s.forwarding);
                match fwd {
                    Some(_) => {
                        let op = PfcpOp::DeleteForwarding { teid: r.sgw_teid.0, seid, s11: p };
                        self.session_request(now, upf, up_seid, &sxa::remove_forwarding(), op);
                    }
                    // Nothing to delete: done already (a retransmission after
                    // our answer was lost is answered from the cache).
                    None => self.forwarding_done(now, r.sgw_teid.0, p, None, true),
                }
            }
            S11Request::DeleteSession(r) => {
                let Some(s) = self.active(now, p, t, r.sgw_teid) else { return };
                let (upf, up_seid, seid) = (s.upf, s.up_seid, s.cp_seid);
                self.counters.incr("s11_delete_session");
                let op = PfcpOp::Delete { teid: r.sgw_teid.0, seid, s11: p };
                self.pfcp_request(now, self.cfg.upfs[upf].pfcp, msg::SESSION_DELETION_REQUEST, up_seid, &[], op);
            }
        }
    }

    /// The active session of `teid`, marked busy; or the request is
    /// rejected (Context Not Found, TS 29.274 7.2.8 etc.) and `None`.
    fn active(&mut self, now: Instant, p: S11Pending, t: u8, teid: Teid) -> Option<&Session> {
        match self.sessions.get(&teid.0).map(|s| (s.state, s.mme_s11.teid.0)) {
            None => {
                self.counters.incr("s11_request_for_unknown_context");
                self.reject_s11(now, p, t, 0, GtpCause::CONTEXT_NOT_FOUND);
                None
            }
            Some((SessionState::Active, _)) => {
                let s = self.sessions.get_mut(&teid.0)?;
                s.state = SessionState::Busy;
                Some(s)
            }
            Some((_, mme)) => {
                // Unreachable through dispatch_s11, which queues such requests.
                self.reject_s11(now, p, t, mme, GtpCause::REQUEST_REJECTED);
                None
            }
        }
    }

    /// Serves the queued requests of a session that became Active, until
    /// one starts a procedure (or the queue is empty).
    pub(crate) fn run_queued(&mut self, now: Instant, teid: u32) {
        loop {
            let next = match self.sessions.get_mut(&teid) {
                Some(s) if s.state == SessionState::Active => s.queued.pop_front(),
                _ => None,
            };
            let Some((p, req)) = next else { return };
            let t = request_type(&req);
            self.dispatch_s11(now, p, t, req, CreateSessionFlags::default());
        }
    }

    /// Answers the requests queued behind a session that is gone: their
    /// context is not found (TS 29.274 8.4).
    pub(crate) fn reject_queued(&mut self, now: Instant, s: &mut Session) {
        for (q, req) in std::mem::take(&mut s.queued) {
            self.reject_s11(now, q, request_type(&req), s.mme_s11.teid.0, GtpCause::CONTEXT_NOT_FOUND);
        }
    }

    fn session_request(&mut self, now: Instant, upf: usize, up_seid: Option<u64>, ies: &[rs_pfcp::ie::Ie], op: PfcpOp) {
        self.pfcp_request(now, self.cfg.upfs[upf].pfcp, msg::SESSION_MODIFICATION_REQUEST, up_seid, ies, op);
    }

    /// Create Session (TS 29.274 7.2.1; TS 23.401 5.3.2.1 steps 12-16,
    /// 5.10.2 for a further PDN connection of the UE).
    fn create_session(&mut self, now: Instant, p: S11Pending, r: CreateSessionRequest, flags: CreateSessionFlags) {
        let reject = |core: &mut Self, cause: GtpCause| {
            let resp = CreateSessionResponse {
                cause,
                sgw_fteid: None,
                paa: None,
                apn_ambr: None,
                bearer_ebi: r.bearer.ebi,
                bearer_cause: cause,
                s1u_sgw_fteid: None,
                pgw_s5s8_c_fteid: None,
                charging_id: None,
                pdn_type: None,
                ipv6_prefix: None,
                pco: None,
            };
            core.counters.incr("s11_rejected");
            let m = encode_response(&S11Response::CreateSession(resp), r.sender_fteid.teid.0, p.seq, None);
            core.answer_s11(now, p, m);
        };
        // Checked before anything changes: a request we refuse leaves every
        // existing session as it was.
        let apn = apn_ni(&r.apn);
        let Some(pools) = self.pools.get(&apn) else {
            self.counters.incr("s11_create_session_unknown_apn");
            return reject(self, GtpCause::MISSING_OR_UNKNOWN_APN);
        };
        let granted = grant_pdn_type(r.pdn_type, pools.ipv4.is_some(), pools.ipv6.is_some(), flags.dual_address_bearer);
        let (pdn_type, cause) = match granted {
            Ok(g) => g,
            Err(c) => {
                self.counters.incr("s11_create_session_pdn_type_unsupported");
                return reject(self, c);
            }
        };
        if cause != GtpCause::REQUEST_ACCEPTED {
            self.counters.incr("s11_create_session_pdn_type_changed");
        }
        let wants_v4 = matches!(pdn_type, PdnType::Ipv4 | PdnType::Ipv4v6);
        let wants_v6 = matches!(pdn_type, PdnType::Ipv6 | PdnType::Ipv4v6);
        // The PDN connection this request replaces, if any: same IMSI, same
        // default bearer (TS 29.274 7.2.1, e.g. after an MME restart or a
        // re-attach without detach). Another EBI is another PDN connection.
        let replaced = self.by_imsi.get(&(r.imsi.clone(), r.bearer.ebi.0)).copied();
        let static_ipv4 = r.static_ipv4.filter(|_| wants_v4);
        if let Some(a) = static_ipv4 {
            let mine = replaced.and_then(|t| self.sessions.get(&t)).is_some_and(|s| s.ue_ipv4 == Some(a));
            if pools.ipv4.as_ref().is_some_and(|pl| pl.holds(a)) && !mine {
                // TS 29.274 8.4: the subscribed static address is another
                // PDN connection's.
                self.counters.incr("s11_create_session_static_address_in_use");
                return reject(self, GtpCause::REQUEST_REJECTED);
            }
        }
        let Some(upf) = self.pick_upf() else {
            self.counters.incr("s11_create_session_no_upf");
            return reject(self, GtpCause::NO_RESOURCES_AVAILABLE);
        };
        if let Some(old) = replaced {
            if let Some(mut s) = self.remove_session(old) {
                self.counters.incr("sessions_replaced");
                self.reject_queued(now, &mut s);
                // Still being established (no UP SEID yet): its Establish
                // op undoes it when the UPF answers.
                if let Some(up) = s.up_seid {
                    self.delete_on_upf(now, s.up_ids(), up);
                }
            }
        }
        let Some((ue_ipv4, ue_ipv6)) = self.allocate_addresses(&apn, wants_v4, wants_v6, static_ipv4) else {
            self.counters.incr("s11_create_session_pool_exhausted");
            return reject(self, GtpCause::ALL_DYNAMIC_ADDRESSES_OCCUPIED);
        };
        let Some((teid, s1u_teid, cp_seid)) = self.draw_ids(upf) else {
            if let Some(pl) = self.pools.get_mut(&apn) {
                pl.release(ue_ipv4, ue_ipv6);
            }
            self.counters.incr("s11_create_session_teids_exhausted");
            return reject(self, GtpCause::NO_RESOURCES_AVAILABLE);
        };
        // PCO / ePCO answered per APN (TS 29.274 7.2.2, TS 24.008 10.5.6.3).
        let pco = r.pco.as_ref().map(|ue| {
            let a = self.cfg.apns.iter().find(|a| a.name.eq_ignore_ascii_case(&apn));
            let (dns, mtu) = a.map_or((&[][..], 0), |a| (&a.dns[..], a.mtu));
            crate::pco::answer(&crate::pco::requested(ue), dns, mtu)
        });
        let ucfg = &self.cfg.upfs[upf];
        let s1u_sgw = Fteid { teid: Teid(s1u_teid), ipv4: ucfg.s1u_addr };
        let usage_period = Some(self.cfg.usage_period_secs).filter(|p| *p > 0);
        let spec = sxa::SessionSpec {
            node_id: self.cfg.node_id,
            cp_seid,
            apn: apn.clone(),
            s1u_teid,
            s1u_addr: s1u_sgw.ipv4,
            ue_ipv4,
            ue_ipv6,
            apn_ambr: Some(r.apn_ambr).filter(|a| a.uplink > 0 || a.downlink > 0),
            usage_period,
        };
        self.by_seid.insert(cp_seid, teid);
        self.by_imsi.insert((r.imsi.clone(), r.bearer.ebi.0), teid);
        self.sessions.insert(
            teid,
            Session {
                imsi: r.imsi.clone(),
                apn,
                state: SessionState::Creating,
                sgw_s11: Fteid { teid: Teid(teid), ipv4: self.s11_ip },
                mme_s11: r.sender_fteid,
                created_by: canonical(p.peer.ip()),
                pdn_type,
                cause,
                ue_ipv4,
                ue_ipv6,
                charging_id: teid,
                pco,
                epco: flags.epco,
                ebi: r.bearer.ebi,
                apn_ambr: r.apn_ambr,
                s1u_sgw,
                s1u_enb: None,
                upf,
                cp_seid,
                up_seid: None,
                queued: Default::default(),
                usage: Default::default(),
                arp: r.bearer.arp,
                mme_s11_addr: match self.cfg.mme_s11_port {
                    Some(port) => std::net::SocketAddr::from((r.sender_fteid.ipv4, port)),
                    None => p.peer,
                },
                paging: Default::default(),
                forwarding: None,
            },
        );
        let ies = sxa::session_establishment(&spec);
        // TS 29.244 7.2.2.4.2: SEID 0 in an establishment request header.
        let op = PfcpOp::Establish { teid, s11: p, ids: UpIds { upf, s1u_teid, cp_seid, forwarding_teid: None } };
        self.pfcp_request(now, self.cfg.upfs[upf].pfcp, msg::SESSION_ESTABLISHMENT_REQUEST, Some(0), &ies, op);
    }

    /// The UE's addresses on `apn`: the static IPv4 address or one from the
    /// pool, a /64 from the IPv6 pool, as wanted; `None` (nothing taken)
    /// when a pool is exhausted or the static address is taken.
    fn allocate_addresses(
        &mut self,
        apn: &str,
        v4: bool,
        v6: bool,
        static_ipv4: Option<std::net::Ipv4Addr>,
    ) -> Option<(Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>)> {
        let pools = self.pools.get_mut(apn)?;
        let ipv4 = match (v4, static_ipv4, pools.ipv4.as_mut()) {
            (false, _, _) => None,
            (true, Some(a), Some(pl)) => {
                if !pl.take(a) {
                    return None;
                }
                Some(a)
            }
            (true, None, Some(pl)) => Some(pl.allocate()?),
            (true, _, None) => return None,
        };
        let ipv6 = match (v6, pools.ipv6.as_mut()) {
            (false, _) => None,
            (true, Some(pl)) => pl.allocate(),
            (true, None) => None,
        };
        if v6 && ipv6.is_none() {
            pools.release(ipv4, None);
            return None;
        }
        Some((ipv4, ipv6))
    }

    /// Create Indirect Data Forwarding Tunnel (TS 29.274 7.2.18, TS 23.401
    /// 5.5.1.2.2 step 8): for the session's default bearer, an S1-U TEID of
    /// ours on its UPF whose G-PDUs go on to the target eNB's F-TEID. The
    /// bearers of the UE's other PDN connections are not forwarded (left
    /// out of the answer, so the source eNB does not forward them).
    fn create_indirect_forwarding(&mut self, now: Instant, p: S11Pending, t: u8, r: CreateIndirectForwardingRequest) {
        let ebi = match self.sessions.get(&r.sgw_teid.0) {
            Some(s) => s.ebi,
            None => {
                self.counters.incr("s11_request_for_unknown_context");
                return self.reject_s11(now, p, t, 0, GtpCause::CONTEXT_NOT_FOUND);
            }
        };
        let Some(target) = r.bearers.iter().find(|b| b.ebi == ebi).map(|b| b.fteid) else {
            // TS 29.274 7.2.18: the bearer contexts name no bearer of ours.
            let mme = self.mme_teid_for(r.sgw_teid.0, p.peer);
            self.counters.incr("s11_indirect_forwarding_no_bearer");
            return self.reject_s11(now, p, t, mme, GtpCause::CONTEXT_NOT_FOUND);
        };
        let Some(s) = self.active(now, p, t, r.sgw_teid) else { return };
        let (upf, up_seid, seid, old) = (s.upf, s.up_seid, s.cp_seid, s.forwarding);
        if let Some((ours, _)) = old {
            // A new tunnel replaces the old one (a repeated preparation).
            self.upfs[upf].s1u_in_use.remove(&ours.teid.0);
        }
        let u = &self.cfg.upfs[upf];
        let last = u64::from(u.teid_base) + u64::from(u.teid_count);
        let range = u.teid_base..=u32::try_from(last.saturating_sub(1)).unwrap_or(u32::MAX);
        let addr = u.s1u_addr;
        let in_use = &self.upfs[upf].s1u_in_use;
        let Some(fwd_teid) = self.ids.draw_u32(range, |t| in_use.contains(&t)) else {
            if let Some(s) = self.sessions.get_mut(&r.sgw_teid.0) {
                s.state = SessionState::Active;
            }
            let mme = self.mme_teid_for(r.sgw_teid.0, p.peer);
            return self.reject_s11(now, p, t, mme, GtpCause::NO_RESOURCES_AVAILABLE);
        };
        self.upfs[upf].s1u_in_use.insert(fwd_teid);
        let ours = Fteid { teid: Teid(fwd_teid), ipv4: addr };
        let mut ies = if old.is_some() { sxa::remove_forwarding() } else { Vec::new() };
        ies.extend(sxa::create_forwarding(fwd_teid, addr, target.teid.0, target.ipv4));
        let op = PfcpOp::CreateForwarding { teid: r.sgw_teid.0, seid, s11: p, tunnel: (ours, target) };
        self.counters.incr("s11_create_indirect_forwarding");
        self.session_request(now, upf, up_seid, &ies, op);
    }

    /// The UPF answered a forwarding tunnel's creation (`tunnel`) or
    /// deletion (`None`).
    pub(crate) fn forwarding_done(
        &mut self,
        now: Instant,
        teid: u32,
        p: S11Pending,
        tunnel: Option<(Fteid, Fteid)>,
        ok: bool,
    ) {
        let Some(s) = self.sessions.get_mut(&teid) else { return };
        s.state = SessionState::Active;
        let (upf, ebi, mme) = (s.upf, s.ebi, s.mme_s11.teid.0);
        let cause = if ok { GtpCause::REQUEST_ACCEPTED } else { GtpCause::SYSTEM_FAILURE };
        let answer = match tunnel {
            Some((ours, target)) => {
                if ok {
                    s.forwarding = Some((ours, target));
                } else {
                    self.upfs[upf].s1u_in_use.remove(&ours.teid.0);
                }
                let bearers = if ok { vec![ForwardingBearer { ebi, fteid: ours }] } else { Vec::new() };
                S11Response::CreateIndirectForwarding(CreateIndirectForwardingResponse { cause, bearers })
            }
            None => {
                if let Some((ours, _)) = s.forwarding.take() {
                    self.upfs[upf].s1u_in_use.remove(&ours.teid.0);
                }
                S11Response::DeleteIndirectForwarding(cause)
            }
        };
        self.answer_s11(now, p, encode_response(&answer, mme, p.seq, None));
        self.run_queued(now, teid);
    }

    /// Draws a session's S11 TEID (never 0, TS 29.274 5.5.2), its S1-U
    /// TEID inside UPF `upf`'s [teid_base, teid_base + teid_count) and its
    /// CP SEID (never 0), none still in use, and marks the S1-U TEID
    /// taken. `None` when a range is full.
    fn draw_ids(&mut self, upf: usize) -> Option<(u32, u32, u64)> {
        let u = &self.cfg.upfs[upf];
        let last = u64::from(u.teid_base) + u64::from(u.teid_count);
        let s1u_range = u.teid_base..=u32::try_from(last.checked_sub(1)?).unwrap_or(u32::MAX);
        let sessions = &self.sessions;
        let teid = self.ids.draw_u32(1..=u32::MAX, |t| sessions.contains_key(&t))?;
        let in_use = &self.upfs[upf].s1u_in_use;
        let s1u_teid = self.ids.draw_u32(s1u_range, |t| in_use.contains(&t))?;
        let (by_seid, draining) = (&self.by_seid, &self.draining);
        let cp_seid = self.ids.draw(1..=u64::MAX, |s| by_seid.contains_key(&s) || draining.contains_key(&s))?;
        self.upfs[upf].s1u_in_use.insert(s1u_teid);
        Some((teid, s1u_teid, cp_seid))
    }

    /// Round robin over associated UPFs.
    fn pick_upf(&mut self) -> Option<usize> {
        let n = self.upfs.len();
        (0..n)
            .map(|k| (self.next_upf + k) % n)
            .find(|&i| self.upfs[i].associated)
            .inspect(|&i| self.next_upf = (i + 1) % n)
    }
}

/// The SGW S11 TEID a request addresses (None for Create Session).
fn session_teid(req: &S11Request) -> Option<Teid> {
    match req {
        S11Request::CreateSession(_) => None,
        S11Request::ModifyBearer(r) => Some(r.sgw_teid),
        S11Request::ReleaseAccessBearers(r) => Some(r.sgw_teid),
        S11Request::DeleteSession(r) => Some(r.sgw_teid),
        S11Request::CreateIndirectForwarding(r) => Some(r.sgw_teid),
        S11Request::DeleteIndirectForwarding(r) => Some(r.sgw_teid),
    }
}

/// The GTPv2-C message type of a request (TS 29.274 Table 6.1-1).
pub(crate) fn request_type(req: &S11Request) -> u8 {
    match req {
        S11Request::CreateSession(_) => 32,
        S11Request::ModifyBearer(_) => 34,
        S11Request::DeleteSession(_) => 36,
        S11Request::ReleaseAccessBearers(_) => 170,
        S11Request::CreateIndirectForwarding(_) => 166,
        S11Request::DeleteIndirectForwarding(_) => 168,
    }
}
