//! The PFCP node (TS 29.244 6.2): associations, heartbeat, request
//! dispatch and duplicate detection. Sans-I/O: datagrams in through
//! [`UpfCore::handle_datagram`], out through [`UpfCore::poll_transmit`];
//! [`UpfCore::handle_timeout`] at [`UpfCore::poll_timeout`] expires the
//! duplicate cache, sends our Heartbeat Requests (every
//! `heartbeat_interval_ms`, retransmitted per T1/N1; a CP function that
//! never answers is dead and its sessions go after `peer_dead_grace_ms`)
//! and runs the usage engine ([`crate::urr`]: sampling of URR counts, time
//! triggers), whose reports go out as Session Report Requests
//! (`session.rs`). IEs we do not know are left out of every request before
//! it is read (TS 29.244 7.6, [`crate::pfcp::without_unknown_ies`]).

use crate::config::UpfConfig;
use crate::pfcp::{
    cause_ie, decode_view, encode, first, msg, node_id_text, offending_ie_ie, without_unknown_ies, FrameError, IeRef,
    PfcpHeader,
};
use crate::rules::{offending_ie, ForwardingPlane, SessionRules};
use crate::urr::{UsageEngine, WallClock};
use mobicore_common::alloc::IdDraw;
use mobicore_common::counters::Counters;
use mobicore_common::peers::PeerFilter;
use mobicore_gtp::transaction::{Incoming, TransactionConfig, Transactions};
use rs_pfcp::ie::cause::CauseValue;
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::recovery_time_stamp::RecoveryTimeStamp;
use rs_pfcp::ie::up_function_features::UPFunctionFeatures;
use rs_pfcp::ie::{Ie, IeType};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

/// One PFCP association with a CP function (TS 29.244 6.2.6).
#[derive(Debug, Clone)]
pub struct Association {
    /// Where it was set up from: its node and session messages must come
    /// from this IP address (any source port), and Session Reports go here.
    pub peer: SocketAddr,
    pub recovery: SystemTime,
    /// The addresses its configured entry allows ([`crate::config::CpPeer`]):
    /// the CP F-SEIDs of its sessions must name one of them.
    pub addrs: PeerFilter,
    /// Its sessions on this node (bounded by `max_sessions_per_association`).
    pub sessions: usize,
    /// When our next Heartbeat Request to it is due (TS 29.244 6.2.2).
    pub next_heartbeat: Instant,
    /// The sequence number of our Heartbeat Request awaiting its response.
    pub heartbeat_seq: Option<u32>,
    /// Set when a Heartbeat Request went unanswered N1 retransmissions
    /// long: the peer is dead, and at this time its sessions and the
    /// association are deleted (`peer_dead_grace_ms`) unless it answers
    /// first.
    pub dead_until: Option<Instant>,
}

/// A request of ours awaiting its response (retransmitted every T1 up to
/// N1 times, TS 29.244 6.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outgoing {
    /// A Session Report Request (TS 29.244 7.5.8).
    SessionReport,
    /// A Heartbeat Request to the CP function of this Node ID (6.2.2).
    Heartbeat(String),
}

/// The UP function features we support (TS 29.244 8.2.25), sent in the
/// Association Setup Response: BUCP (downlink buffering in the UP
/// function, FAR BUFF with a BAR), FTUP (F-TEID allocation, CHOOSE), EMPU
/// (End Markers sent when a FAR's tunnel changes).
pub fn up_function_features() -> UPFunctionFeatures {
    let mut f = UPFunctionFeatures::new();
    for x in [UPFunctionFeatures::BUCP, UPFunctionFeatures::FTUP, UPFunctionFeatures::EMPU] {
        f.insert(x);
    }
    f
}

/// One PFCP session on this node.
#[derive(Debug, Clone)]
pub struct Session {
    pub up_seid: u64,
    pub cp_seid: u64,
    /// The CP function's Node ID.
    pub node: String,
    /// Shared with the forwarding plane's copy when it keeps one.
    pub rules: std::sync::Arc<SessionRules>,
    /// The URRs whose exhausted quota the plane's effective rules enforce
    /// (see [`crate::urr::effective_rules`]).
    pub blocked: Vec<u32>,
    /// A steering session's diversion (`crate::steering`; its `rules`
    /// are then empty).
    pub diversion: Option<crate::rules::Diversion>,
}

pub struct UpfCore {
    pub(crate) cfg: UpfConfig,
    pub(crate) recovery: SystemTime,
    pub(crate) associations: HashMap<String, Association>,
    pub(crate) sessions: HashMap<u64, Session>,
    /// UP SEIDs and CHOOSE TEIDs are drawn at random, never one in use.
    pub(crate) ids: IdDraw,
    /// Local TEIDs of every session's PDRs, and how many PDRs use each.
    pub(crate) teids: HashMap<u32, u32>,
    pub(crate) plane: Box<dyn ForwardingPlane>,
    pub(crate) tx: Transactions<SocketAddr, Outgoing>,
    /// Usage reporting for every URR of every session.
    pub(crate) usage: UsageEngine,
    /// The steering sessions' diversions, indexed for the overlap checks.
    pub(crate) diversions: crate::steering::Diversions,
    /// The MEC router's sessions (rules, UE tunnels), indexed for the
    /// overlap checks.
    pub(crate) mec: crate::mec::MecSessions,
    /// Maps `Instant`s to wall-clock time for report time stamps.
    pub(crate) clock: WallClock,
    pub counters: Counters,
}

/// A request's answer: message type, header SEID, IEs.
pub(crate) type Reply = (u8, Option<u64>, Vec<Ie>);

impl UpfCore {
    /// `recovery` is our start time, sent as Recovery Time Stamp; it is
    /// also the wall-clock time of this call for usage report time stamps
    /// (see [`Self::set_wall_clock`]).
    pub fn new(cfg: UpfConfig, plane: Box<dyn ForwardingPlane>, recovery: SystemTime, counters: Counters) -> Self {
        let tx = Transactions::new(TransactionConfig { t3: cfg.t1, n3: cfg.n1 });
        let usage = UsageEngine::new(std::time::Duration::from_millis(cfg.urr_poll_ms));
        UpfCore {
            usage,
            diversions: Default::default(),
            mec: Default::default(),
            clock: WallClock { at: Instant::now(), wall: recovery },
            cfg,
            recovery,
            associations: HashMap::new(),
            sessions: HashMap::new(),
            ids: IdDraw::new(None),
            teids: HashMap::new(),
            plane,
            tx,
            counters,
        }
    }

    pub fn associations(&self) -> &HashMap<String, Association> {
        &self.associations
    }

    pub fn sessions(&self) -> &HashMap<u64, Session> {
        &self.sessions
    }

    /// Pairs an `Instant` with the wall-clock time it stands for (Start
    /// Time / End Time of usage reports are wall-clock NTP times).
    pub fn set_wall_clock(&mut self, at: Instant, wall: SystemTime) {
        self.clock = WallClock { at, wall };
    }

    /// The usage engine (read-only: how many URRs, how many sampled).
    pub fn usage_engine(&self) -> &UsageEngine {
        &self.usage
    }

    pub(crate) fn node_id_ie(&self) -> Ie {
        NodeId::new_ipv4(self.cfg.node_id).to_ie()
    }

    pub(crate) fn recovery_ie(&self) -> Ie {
        RecoveryTimeStamp::new(self.recovery).to_ie()
    }

    /// One datagram from `peer`.
    pub fn handle_datagram(&mut self, now: Instant, peer: SocketAddr, bytes: &[u8]) {
        // TS 29.244 7.6: IEs we do not know are ignored, in grouped IEs
        // too; a steering session's enterprise IEs are read from `raw`.
        let raw = bytes;
        let (bytes, unknown) = without_unknown_ies(raw);
        if unknown > 0 {
            self.counters.add("pfcp_unknown_ie_ignored", unknown as u64);
        }
        let (h, ies) = match decode_view(&bytes) {
            Ok(x) => x,
            Err(FrameError::Header) => {
                self.counters.incr("pfcp_malformed");
                return;
            }
            Err(FrameError::Ies(h, e)) => {
                self.counters.incr("pfcp_malformed");
                if msg::is_request(h.msg_type) && h.version == 1 {
                    if let Some(t) = response_type(h.msg_type) {
                        let seid = h.seid.map(|_| 0);
                        let mut ies = vec![cause_ie(e.to_cause_code())];
                        if let Some(o) = offending_ie(&e) {
                            ies.push(offending_ie_ie(o));
                        }
                        if h.msg_type < 50 {
                            ies.insert(0, self.node_id_ie());
                        }
                        self.reply(now, peer, &h, (t, seid, ies));
                    }
                }
                return;
            }
        };
        if h.version != 1 {
            // TS 29.244 7.4.4.7: Version Not Supported Response.
            self.counters.incr("pfcp_version_not_supported");
            let b = encode(msg::VERSION_NOT_SUPPORTED_RESPONSE, None, h.seq, &[]);
            self.tx.answer(now, peer, h.seq, b);
            return;
        }
        if h.msg_type == crate::session::SESSION_REPORT_RESPONSE {
            self.session_report_response(peer, h.seq, &ies);
            return;
        }
        if h.msg_type == msg::HEARTBEAT_RESPONSE {
            self.heartbeat_response(peer, h.seq, &ies);
            return;
        }
        if !msg::is_request(h.msg_type) {
            self.counters.incr("pfcp_unexpected_response");
            return;
        }
        match self.tx.on_request(now, peer, h.seq, &bytes) {
            Incoming::New => {}
            Incoming::Duplicate | Incoming::InProgress => {
                self.counters.incr("pfcp_duplicate_request");
                return;
            }
        }
        let reply = match h.msg_type {
            // TS 29.244 6.2.2: heartbeats carry no Node ID; answered to the
            // addresses a configured CP function may use, others dropped.
            msg::HEARTBEAT_REQUEST if !self.cfg.cp_peers.iter().any(|p| p.addrs.permits(peer.ip())) => {
                self.counters.incr("pfcp_heartbeat_from_unknown_peer");
                return;
            }
            msg::HEARTBEAT_REQUEST => {
                // TS 29.244 6.2.2: its Recovery Time Stamp tells whether an
                // associated CP function at this address restarted.
                self.heard_from(peer.ip(), recovery_in(&ies));
                Some((msg::HEARTBEAT_RESPONSE, None, vec![self.recovery_ie()]))
            }
            msg::ASSOCIATION_SETUP_REQUEST => Some(self.association_setup(now, peer, &ies)),
            msg::ASSOCIATION_UPDATE_REQUEST => Some(self.association_update(peer, &ies)),
            msg::ASSOCIATION_RELEASE_REQUEST => Some(self.association_release(peer, &ies)),
            msg::SESSION_ESTABLISHMENT_REQUEST => {
                // Steering and MEC sessions carry enterprise IEs (left out of `ies`).
                let view = (unknown > 0).then(|| decode_view(raw).ok()).flatten();
                Some(match view {
                    Some((_, r)) if mobicore_pfcp::steering::is_steering(&r) => {
                        self.steering_establishment(peer, &ies, &r)
                    }
                    Some((_, r)) if mobicore_pfcp::mec::is_mec(&r) => self.mec_establishment(peer, &ies, &r),
                    _ => self.session_establishment(now, peer, &ies),
                })
            }
            msg::SESSION_MODIFICATION_REQUEST => {
                let seid = h.seid.unwrap_or(0);
                let refused = self.session_request_refused(peer, msg::SESSION_MODIFICATION_RESPONSE, seid);
                let steering = self.sessions.get(&seid).is_some_and(|s| s.diversion.is_some());
                let mec = self.mec.contains(seid);
                Some(refused.unwrap_or_else(|| {
                    let raw_ies = || decode_view(raw).map(|(_, r)| r).unwrap_or_default();
                    match (steering, mec) {
                        (true, _) => self.steering_modification(seid, &raw_ies()),
                        (_, true) => self.mec_modification(seid, &raw_ies()),
                        _ => self.session_modification(now, seid, &ies),
                    }
                }))
            }
            msg::SESSION_DELETION_REQUEST => {
                let seid = h.seid.unwrap_or(0);
                let refused = self.session_request_refused(peer, msg::SESSION_DELETION_RESPONSE, seid);
                Some(refused.unwrap_or_else(|| self.session_deletion(now, seid)))
            }
            _ => None,
        };
        match reply {
            Some(r) => {
                if r.2.iter().any(|ie| ie.ie_type == IeType::Cause && ie.payload.first() != Some(&1)) {
                    self.counters.incr("pfcp_rejected");
                }
                self.reply(now, peer, &h, r)
            }
            None => self.counters.incr("pfcp_unsupported_message"),
        }
    }

    fn reply(&mut self, now: Instant, peer: SocketAddr, h: &PfcpHeader, (t, seid, ies): Reply) {
        self.tx.answer(now, peer, h.seq, encode(t, seid, h.seq, &ies));
    }

    /// The Node ID of a node-level request (typed, and as text), or the
    /// reply rejecting it.
    pub(crate) fn node_id_of(&self, ies: &[IeRef], resp: u8) -> Result<(NodeId, String), Reply> {
        let missing = || {
            (
                resp,
                None,
                vec![
                    self.node_id_ie(),
                    cause_ie(CauseValue::MandatoryIeMissing),
                    offending_ie_ie(IeType::NodeId as u16),
                ],
            )
        };
        let ie = first(ies, IeType::NodeId).ok_or_else(missing)?;
        let n = NodeId::unmarshal(ie.payload).map_err(|_| {
            (
                resp,
                None,
                vec![
                    self.node_id_ie(),
                    cause_ie(CauseValue::MandatoryIeIncorrect),
                    offending_ie_ie(IeType::NodeId as u16),
                ],
            )
        })?;
        let text = node_id_text(&n);
        Ok((n, text))
    }

    /// A node-level refusal: our Node ID and `cause`, counted as `counter`.
    fn refuse(&self, resp: u8, cause: CauseValue, counter: &'static str) -> Reply {
        self.counters.incr(counter);
        (resp, None, vec![self.node_id_ie(), cause_ie(cause)])
    }

    /// Whether `from` is the address of an association.
    pub(crate) fn has_association_from(&self, from: IpAddr) -> bool {
        self.associations.values().any(|a| a.peer.ip() == from)
    }

    /// The association of `node` if `from` is its address.
    pub(crate) fn association_of(&self, node: &str, from: IpAddr) -> Option<&Association> {
        self.associations.get(node).filter(|a| a.peer.ip() == from)
    }

    /// Association Setup (TS 29.244 6.2.6.2.2): only a configured CP
    /// function from one of its configured addresses; an existing
    /// association is never taken over from another address.
    /// Every answer has our Node ID, Cause and Recovery Time Stamp, an
    /// acceptance also our UP Function Features (TS 29.244 7.4.4.2).
    fn association_setup(&mut self, now: Instant, peer: SocketAddr, ies: &[IeRef]) -> Reply {
        let mut r = self.association_setup_inner(now, peer, ies);
        r.2.push(self.recovery_ie());
        if r.2.iter().any(|ie| ie.ie_type == IeType::Cause && ie.payload.first() == Some(&1)) {
            r.2.push(up_function_features().to_ie());
        }
        r
    }

    fn association_setup_inner(&mut self, now: Instant, peer: SocketAddr, ies: &[IeRef]) -> Reply {
        let resp = msg::ASSOCIATION_SETUP_RESPONSE;
        let (node_id, node) = match self.node_id_of(ies, resp) {
            Ok(n) => n,
            Err(r) => return r,
        };
        let incorrect_rts =
            |c| (resp, None, vec![self.node_id_ie(), cause_ie(c), offending_ie_ie(IeType::RecoveryTimeStamp as u16)]);
        let Some(rts) = first(ies, IeType::RecoveryTimeStamp) else {
            return incorrect_rts(CauseValue::MandatoryIeMissing);
        };
        let Ok(recovery) = RecoveryTimeStamp::unmarshal(rts.payload).map(|r| r.timestamp) else {
            return incorrect_rts(CauseValue::MandatoryIeIncorrect);
        };
        // TS 29.244 6.2.6.2.2: a request the UP function cannot accept gets
        // "Request rejected".
        let Some(allowed) = self.cfg.cp_peers.iter().find(|p| p.permits(&node_id, peer.ip())) else {
            return self.refuse(resp, CauseValue::RequestRejected, "pfcp_association_setup_from_unknown_peer");
        };
        let addrs = allowed.addrs.clone();
        let full = self.associations.len() >= self.cfg.max_associations;
        let interval = self.heartbeat_interval();
        match self.associations.get_mut(&node) {
            // TS 29.244 5.8.1: a Node ID that is an IP address exposes one
            // address for the association; another address does not take it.
            Some(old) if old.peer.ip() != peer.ip() => {
                return self.refuse(resp, CauseValue::RequestRejected, "pfcp_association_setup_from_other_address");
            }
            Some(old) => {
                // The same CP function again. A new Recovery Time Stamp means
                // it restarted and lost its sessions: ours go too (TS 29.244
                // 6.2.6.2.2, 19A; TS 23.007 16.1.1); the same one keeps them
                // (a re-setup after a lost response or a path failure).
                // Alive: an outstanding heartbeat no longer matters.
                old.peer = peer;
                old.addrs = addrs;
                old.dead_until = None;
                old.next_heartbeat = now + interval;
                if let Some(seq) = old.heartbeat_seq.take() {
                    self.tx.cancel(seq);
                }
                self.recovery_seen(&node, recovery);
            }
            None if full => {
                return self.refuse(
                    resp,
                    CauseValue::NoResourcesAvailable,
                    "pfcp_association_setup_over_max_associations",
                );
            }
            None => {
                let next_heartbeat = now + interval;
                let a = Association {
                    peer,
                    recovery,
                    addrs,
                    sessions: 0,
                    next_heartbeat,
                    heartbeat_seq: None,
                    dead_until: None,
                };
                self.associations.insert(node, a);
            }
        }
        self.counters.incr("pfcp_associations_set_up");
        (resp, None, vec![self.node_id_ie(), cause_ie(CauseValue::RequestAccepted)])
    }

    /// The Recovery Time Stamp of association `node`'s CP function, as a
    /// setup, heartbeat request or heartbeat response gives it: a new one
    /// means the CP function restarted and lost its sessions, so ours go
    /// too (TS 29.244 6.2.6.2.2, 19A; TS 23.007 16.1.1); the same one
    /// keeps them (a re-setup after a lost response or a path failure).
    fn recovery_seen(&mut self, node: &str, recovery: SystemTime) {
        let Some(a) = self.associations.get_mut(node) else { return };
        let restarted = a.recovery != recovery;
        a.recovery = recovery;
        if restarted {
            self.counters.incr("pfcp_cp_function_restarted");
            self.delete_sessions_of(node);
        }
    }

    /// A heartbeat (request or response) from `from`: the associations at
    /// that address are alive again, and a changed Recovery Time Stamp
    /// means their CP function restarted.
    fn heard_from(&mut self, from: IpAddr, recovery: Option<SystemTime>) {
        let nodes: Vec<String> =
            self.associations.iter().filter(|(_, a)| a.peer.ip() == from).map(|(n, _)| n.clone()).collect();
        for node in nodes {
            if let Some(a) = self.associations.get_mut(&node) {
                if a.dead_until.take().is_some() {
                    self.counters.incr("pfcp_peer_alive_again");
                }
            }
            match recovery {
                Some(r) if self.cfg.restart_from_heartbeats => self.recovery_seen(&node, r),
                Some(r) if self.associations.get(&node).is_some_and(|a| a.recovery != r) => {
                    self.counters.incr("pfcp_heartbeat_recovery_changed");
                }
                _ => {}
            }
        }
    }

    fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.cfg.heartbeat_interval_ms)
    }

    /// Our Heartbeat Request to every associated CP function whose turn
    /// has come and that has none outstanding (TS 29.244 6.2.2), with our
    /// Recovery Time Stamp.
    fn send_heartbeats(&mut self, now: Instant) {
        let due: Vec<String> = self
            .associations
            .iter()
            .filter(|(_, a)| a.heartbeat_seq.is_none() && a.next_heartbeat <= now)
            .map(|(n, _)| n.clone())
            .collect();
        let interval = self.heartbeat_interval();
        for node in due {
            let seq = self.tx.next_seq();
            let b = encode(msg::HEARTBEAT_REQUEST, None, seq, &[self.recovery_ie()]);
            let Some(a) = self.associations.get_mut(&node) else { continue };
            a.heartbeat_seq = Some(seq);
            a.next_heartbeat = now + interval;
            let peer = a.peer;
            self.tx.send_request(now, peer, seq, b, Outgoing::Heartbeat(node));
            self.counters.incr("pfcp_heartbeat_sent");
        }
    }

    /// The request of ours that a response of type `msg_type` from `peer`
    /// numbered `seq` answers (no longer outstanding); `None` (counted) for none.
    pub(crate) fn response_to(&mut self, peer: SocketAddr, seq: u32, msg_type: u8) -> Option<Outgoing> {
        let Some(what) = self.tx.on_response(peer, seq, msg_type) else {
            self.counters.incr("pfcp_unexpected_response");
            return None;
        };
        if let Outgoing::Heartbeat(node) = &what {
            if let Some(a) = self.associations.get_mut(node).filter(|a| a.heartbeat_seq == Some(seq)) {
                a.heartbeat_seq = None;
            }
        }
        Some(what)
    }

    /// A Heartbeat Response (TS 29.244 7.4.2.2) to one of ours.
    fn heartbeat_response(&mut self, peer: SocketAddr, seq: u32, ies: &[IeRef]) {
        match self.response_to(peer, seq, msg::HEARTBEAT_RESPONSE) {
            Some(Outgoing::Heartbeat(_)) => self.heard_from(peer.ip(), recovery_in(ies)),
            Some(Outgoing::SessionReport) => self.counters.incr("pfcp_unexpected_response"),
            None => {}
        }
    }

    /// Our Heartbeat Request `seq` to `node` went unanswered through every
    /// retransmission (TS 29.244 6.4): the CP function is dead; its sessions
    /// stay for `peer_dead_grace_ms`.
    fn heartbeat_timed_out(&mut self, now: Instant, node: &str, seq: u32) {
        let grace = Duration::from_millis(self.cfg.peer_dead_grace_ms);
        let Some(a) = self.associations.get_mut(node) else { return };
        if a.heartbeat_seq != Some(seq) {
            return;
        }
        a.heartbeat_seq = None;
        if a.dead_until.is_none() {
            a.dead_until = Some(now + grace);
            tracing::warn!(node, sessions = a.sessions, "PFCP peer dead: no heartbeat response");
            self.counters.incr("pfcp_peer_dead");
        }
    }

    /// Deletes the associations whose peer stayed dead through the grace
    /// period, with their sessions.
    fn expire_dead_peers(&mut self, now: Instant) {
        let gone: Vec<String> = self
            .associations
            .iter()
            .filter(|(_, a)| a.dead_until.is_some_and(|t| t <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for node in gone {
            self.delete_sessions_of(&node);
            self.associations.remove(&node);
            self.counters.incr("pfcp_dead_peer_association_deleted");
        }
    }

    /// Association Update (TS 29.244 6.2.7): only from the association's address.
    fn association_update(&mut self, peer: SocketAddr, ies: &[IeRef]) -> Reply {
        let resp = msg::ASSOCIATION_UPDATE_RESPONSE;
        match self.node_id_of(ies, resp) {
            Ok((_, n)) if self.association_of(&n, peer.ip()).is_some() => {
                (resp, None, vec![self.node_id_ie(), cause_ie(CauseValue::RequestAccepted)])
            }
            Ok(_) => self.refuse(
                resp,
                CauseValue::NoEstablishedPfcpAssociation,
                "pfcp_association_update_from_unassociated_peer",
            ),
            Err(r) => r,
        }
    }

    /// Association Release (TS 29.244 6.2.8): its sessions are deleted.
    /// Only from the association's address.
    fn association_release(&mut self, peer: SocketAddr, ies: &[IeRef]) -> Reply {
        let resp = msg::ASSOCIATION_RELEASE_RESPONSE;
        match self.node_id_of(ies, resp) {
            Ok((_, n)) if self.association_of(&n, peer.ip()).is_some() => {
                self.delete_sessions_of(&n);
                self.associations.remove(&n);
                (resp, None, vec![self.node_id_ie(), cause_ie(CauseValue::RequestAccepted)])
            }
            Ok(_) => self.refuse(
                resp,
                CauseValue::NoEstablishedPfcpAssociation,
                "pfcp_association_release_from_unassociated_peer",
            ),
            Err(r) => r,
        }
    }

    /// A Session Modification or Deletion Request for `seid` from `peer`:
    /// the refusal when `peer` has no association (TS 29.244 7.2.2.4.2:
    /// "No established PFCP Association") or the session belongs to
    /// another association (answered as if it did not exist, "Session
    /// context not found", so that nothing about it shows).
    fn session_request_refused(&self, peer: SocketAddr, resp: u8, seid: u64) -> Option<Reply> {
        if !self.has_association_from(peer.ip()) {
            self.counters.incr("pfcp_session_request_from_unassociated_peer");
            return Some((resp, Some(0), vec![cause_ie(CauseValue::NoEstablishedPfcpAssociation)]));
        }
        let s = self.sessions.get(&seid)?;
        if self.association_of(&s.node, peer.ip()).is_some() {
            return None;
        }
        self.counters.incr("pfcp_session_request_for_other_association");
        Some((resp, Some(0), vec![cause_ie(CauseValue::SessionContextNotFound)]))
    }

    /// Counts the local TEIDs of `rules` in (`add`) or out of use.
    pub(crate) fn track_teids(&mut self, rules: &SessionRules, add: bool) {
        for t in rules.pdrs.values().filter_map(|p| p.pdi.local_fteid.map(|f| f.0)) {
            let n = self.teids.entry(t).or_default();
            *n = if add { n.saturating_add(1) } else { n.saturating_sub(1) };
            if *n == 0 {
                self.teids.remove(&t);
            }
        }
    }

    /// Removes one session from the tables, the usage engine and the plane.
    pub(crate) fn remove_session(&mut self, seid: u64) -> Option<Session> {
        let s = self.sessions.remove(&seid)?;
        self.track_teids(&s.rules, false);
        if let Some(a) = self.associations.get_mut(&s.node) {
            a.sessions = a.sessions.saturating_sub(1);
        }
        self.usage.forget_session(seid);
        if self.mec.remove(seid) {
            let _ = self.plane.remove_mec(seid);
            return Some(s);
        }
        match s.diversion {
            Some(_) => {
                self.diversions.remove(seid);
                let _ = self.plane.remove_diversion(seid);
            }
            None => {
                let _ = self.plane.remove(seid);
            }
        }
        Some(s)
    }

    fn delete_sessions_of(&mut self, node: &str) {
        let gone: Vec<u64> = self.sessions.values().filter(|s| s.node == node).map(|s| s.up_seid).collect();
        for seid in gone {
            self.remove_session(seid);
        }
    }

    /// Expires the duplicate-detection cache; samples the URRs that need
    /// it and runs their time triggers (usage reports go out as Session
    /// Report Requests, exhausted quotas change the effective rules).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tx.handle_timeout(now);
        while let Some((seq, what)) = self.tx.poll_timed_out() {
            match what {
                Outgoing::Heartbeat(node) => self.heartbeat_timed_out(now, &node, seq),
                Outgoing::SessionReport => self.counters.incr("pfcp_session_report_timeout"),
            }
        }
        self.expire_dead_peers(now);
        self.send_heartbeats(now);
        if self.plane.poll_maintenance().is_some_and(|t| t <= now) {
            self.plane.maintain(now);
        }
        let plane = &self.plane;
        self.usage.handle_timeout(now, |s, u| plane.usage(s, u));
        self.drain_usage_events(now);
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let peers = self.associations.values().flat_map(|a| {
            let heartbeat = a.heartbeat_seq.is_none().then_some(a.next_heartbeat);
            [heartbeat, a.dead_until]
        });
        [self.tx.poll_timeout(), self.usage.poll_timeout(), self.plane.poll_maintenance()]
            .into_iter()
            .chain(peers)
            .flatten()
            .min()
    }

    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, bytes::Bytes)> {
        self.tx.poll_transmit()
    }
}

/// The Recovery Time Stamp IE of a message, if it has one that reads.
fn recovery_in(ies: &[IeRef]) -> Option<SystemTime> {
    first(ies, IeType::RecoveryTimeStamp)
        .and_then(|r| RecoveryTimeStamp::unmarshal(r.payload).ok())
        .map(|r| r.timestamp)
}

/// The response type of a request type we answer.
pub(crate) fn response_type(t: u8) -> Option<u8> {
    match t {
        msg::HEARTBEAT_REQUEST
        | msg::ASSOCIATION_SETUP_REQUEST
        | msg::ASSOCIATION_UPDATE_REQUEST
        | msg::ASSOCIATION_RELEASE_REQUEST
        | msg::SESSION_ESTABLISHMENT_REQUEST
        | msg::SESSION_MODIFICATION_REQUEST
        | msg::SESSION_DELETION_REQUEST => Some(t + 1),
        _ => None,
    }
}
