//! The S11 relay (seed 000 IV.A): the MME's S11 peer is the controller,
//! which forwards every GTP-C datagram to the original S/P-GW-C and back
//! unchanged (same bytes, same sequence numbers) and records what the
//! S/P-GW accepted: the whole log for naive replication, and per PDN
//! connection its Create Session Request and latest Modify Bearer Request
//! for selective replication, dropped when the session is deleted.
//!
//! Sans-I/O: [`Relay::handle_from_mme`] and [`Relay::handle_from_sgw`] take
//! datagrams; what to send comes out of [`Relay::poll_transmit`], what
//! changed in the records out of [`Relay::poll_event`]. The S/P-GW's side
//! is one socket per MME (`Peer::Sgw { mme }`), so the S/P-GW sees each MME
//! as a distinct peer and its requests (Downlink Data Notification) go back
//! to the MME they belong to.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_common::peers::PeerFilter;
use mobicore_gtp::message::{msg_type, Message};
use mobicore_gtp::wire::{HeaderRepr, Packet};
use mobicore_gtp::GtpMessage;

use crate::context::{LoggedMessage, SessionRecord};

/// Bounds on what the MMEs can make the relay hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayLimits {
    /// Requests awaiting the S/P-GW's answer; beyond, they are forwarded
    /// but not recorded (`relay_pending_full`).
    pub max_pending: usize,
    /// Recorded sessions; beyond, new ones are not recorded
    /// (`relay_records_full`) and cannot move selectively.
    pub max_sessions: usize,
    /// Octets in the naive log; beyond, the log stops and naive
    /// replication is refused (`relay_log_full`).
    pub max_log_bytes: usize,
    /// How long a request may wait for its answer before it is forgotten
    /// (the MME's T3 x (N3 + 1) is 12 s by default).
    pub pending_timeout: Duration,
}

impl Default for RelayLimits {
    fn default() -> Self {
        RelayLimits {
            max_pending: 65_536,
            max_sessions: 1_000_000,
            max_log_bytes: 256 << 20,
            pending_timeout: Duration::from_secs(15),
        }
    }
}

/// Where a relayed datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// The MME at this address (from the relay's MME-facing socket).
    Mme(SocketAddr),
    /// The original S/P-GW-C, from the socket that stands for `mme`.
    Sgw { mme: SocketAddr },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub to: Peer,
    pub bytes: Bytes,
}

/// A change to the records, for the store and for relocations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayEvent {
    /// A session was recorded or its record changed.
    Recorded(SessionRecord),
    /// The original S/P-GW deleted the session (or replaced it).
    Deleted { sgw_s11_teid: u32 },
    /// A request the original S/P-GW accepted for a session (Modify Bearer,
    /// Release Access Bearers, Delete Session): a replica of it must follow.
    Accepted { sgw_s11_teid: u32, msg_type: u8, bytes: Bytes },
    /// The naive log grew.
    Logged(LoggedMessage),
    /// An MME (`Some`) or the S/P-GW (`None`) restarted (its Recovery
    /// changed, TS 29.274 7.1.1): the sessions it held are gone.
    PeerRestarted { mme: Option<IpAddr> },
}

struct Pending {
    msg_type: u8,
    teid: u32,
    bytes: Bytes,
    deadline: Instant,
}

pub struct Relay {
    limits: RelayLimits,
    counters: Counters,
    mme_peers: PeerFilter,
    pending: HashMap<(SocketAddr, u32), Pending>,
    /// Requests in `pending` per session (header TEID).
    in_progress: HashMap<u32, u32>,
    /// Deadlines of `pending`, in arrival order (stale entries skipped).
    expiry: VecDeque<(Instant, SocketAddr, u32)>,
    sessions: HashMap<u32, SessionRecord>,
    /// Indexes of `sessions`: a UE's sessions by IMSI, a session by its
    /// UE address (a relocation names the UE by either).
    by_imsi: HashMap<String, Vec<u32>>,
    by_ipv4: HashMap<std::net::Ipv4Addr, u32>,
    session_bytes: usize,
    log: Vec<LoggedMessage>,
    log_bytes: usize,
    log_full: bool,
    recovery: HashMap<IpAddr, u8>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<RelayEvent>,
}

impl Relay {
    /// `mme_peers`: the MMEs that may use the relay (trust boundary; other
    /// sources are dropped and counted as `relay_from_unknown_peer`).
    pub fn new(mme_peers: PeerFilter, limits: RelayLimits, counters: Counters) -> Self {
        Relay {
            limits,
            counters,
            mme_peers,
            pending: HashMap::new(),
            in_progress: HashMap::new(),
            expiry: VecDeque::new(),
            sessions: HashMap::new(),
            by_imsi: HashMap::new(),
            by_ipv4: HashMap::new(),
            session_bytes: 0,
            log: Vec::new(),
            log_bytes: 0,
            log_full: false,
            recovery: HashMap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// Puts back what the store kept (a restarted controller).
    pub fn restore(&mut self, sessions: impl IntoIterator<Item = SessionRecord>, log: Vec<LoggedMessage>) {
        for s in sessions {
            self.insert(s);
        }
        self.log_bytes = log.iter().map(|m| m.bytes.len()).sum();
        self.log = log;
    }

    pub fn sessions(&self) -> &HashMap<u32, SessionRecord> {
        &self.sessions
    }

    pub fn session(&self, sgw_s11_teid: u32) -> Option<&SessionRecord> {
        self.sessions.get(&sgw_s11_teid)
    }

    /// The recorded sessions of one UE.
    pub fn sessions_of(&self, imsi: &str) -> Vec<&SessionRecord> {
        let teids = self.by_imsi.get(imsi).map_or(&[][..], Vec::as_slice);
        let mut v: Vec<_> = teids.iter().filter_map(|t| self.sessions.get(t)).collect();
        v.sort_by_key(|s| s.ebi);
        v
    }

    /// The session that gave the UE this address.
    pub fn session_by_ipv4(&self, ip: std::net::Ipv4Addr) -> Option<&SessionRecord> {
        self.sessions.get(self.by_ipv4.get(&ip)?)
    }

    /// The naive log, or `None` once it overflowed (naive replication would
    /// be incomplete).
    pub fn log(&self) -> Option<&[LoggedMessage]> {
        (!self.log_full).then_some(&self.log[..])
    }

    /// Octets of recorded GTP-C: (naive log, selective records).
    pub fn stored_bytes(&self) -> (usize, usize) {
        (self.log_bytes, self.session_bytes)
    }

    /// A datagram from an MME on the relay's S11 socket.
    pub fn handle_from_mme(&mut self, now: Instant, mme: SocketAddr, bytes: &[u8]) {
        if !self.mme_peers.permits(mme.ip()) {
            self.counters.incr("relay_from_unknown_peer");
            return;
        }
        self.counters.incr("relay_from_mme");
        self.expire(now);
        let bytes = Bytes::copy_from_slice(bytes);
        if let Some(h) = header(&bytes) {
            if h.msg_type == msg_type::ECHO_REQUEST || h.msg_type == msg_type::ECHO_RESPONSE {
                self.note_recovery(Some(mme.ip()), &bytes);
            }
            if msg_type::is_request(h.msg_type) && h.msg_type != msg_type::ECHO_REQUEST {
                self.track(now, mme, h, &bytes);
            }
        } else {
            // Forwarded all the same: the S/P-GW gives the answer 3GPP gives.
            self.counters.incr("relay_malformed");
        }
        self.transmits.push_back(Transmit { to: Peer::Sgw { mme }, bytes });
    }

    /// A datagram from the original S/P-GW on the socket standing for `mme`.
    pub fn handle_from_sgw(&mut self, now: Instant, mme: SocketAddr, bytes: &[u8]) {
        self.counters.incr("relay_from_sgw");
        self.expire(now);
        let bytes = Bytes::copy_from_slice(bytes);
        if let Some(h) = header(&bytes) {
            if let Some(p) = self.untrack(&(mme, h.seq)) {
                if msg_type::response_to(p.msg_type) == Some(h.msg_type) {
                    self.on_answer(mme, p, &bytes);
                } else {
                    self.counters.incr("relay_answer_type_mismatch");
                }
            } else if h.msg_type == msg_type::ECHO_REQUEST || h.msg_type == msg_type::ECHO_RESPONSE {
                self.note_recovery(None, &bytes);
            }
        } else {
            self.counters.incr("relay_malformed");
        }
        self.transmits.push_back(Transmit { to: Peer::Mme(mme), bytes });
    }

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<RelayEvent> {
        self.events.pop_front()
    }

    /// When pending requests next need forgetting.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.expiry.front().map(|e| e.0)
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.expire(now);
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(t, mme, seq)) = self.expiry.front() {
            if t > now {
                break;
            }
            self.expiry.pop_front();
            if self.pending.get(&(mme, seq)).is_some_and(|p| p.deadline <= now) {
                self.untrack(&(mme, seq));
                self.counters.incr("relay_unanswered");
            }
        }
    }

    fn track(&mut self, now: Instant, mme: SocketAddr, h: HeaderRepr, bytes: &Bytes) {
        let key = (mme, h.seq);
        if self.pending.contains_key(&key) {
            self.counters.incr("relay_retransmission");
            return;
        }
        if self.pending.len() >= self.limits.max_pending {
            self.counters.incr("relay_pending_full");
            return;
        }
        let deadline = now + self.limits.pending_timeout;
        let p = Pending { msg_type: h.msg_type, teid: h.teid.unwrap_or(0), bytes: bytes.clone(), deadline };
        *self.in_progress.entry(p.teid).or_default() += 1;
        self.pending.insert(key, p);
        self.expiry.push_back((deadline, mme, h.seq));
    }

    fn untrack(&mut self, key: &(SocketAddr, u32)) -> Option<Pending> {
        let p = self.pending.remove(key)?;
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.in_progress.entry(p.teid) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        Some(p)
    }

    /// Whether a request of the session is with the S/P-GW, unanswered
    /// (until its answer, or until it is forgotten after
    /// `pending_timeout`).
    pub fn in_progress(&self, sgw_s11_teid: u32) -> bool {
        self.in_progress.contains_key(&sgw_s11_teid)
    }

    /// The S/P-GW answered `p`: record what it accepted.
    fn on_answer(&mut self, mme: SocketAddr, p: Pending, answer: &[u8]) {
        let Ok(answer) = GtpMessage::parse(answer) else {
            self.counters.incr("relay_answer_unreadable");
            return;
        };
        let Some(cause) = cause_of(&answer.body) else { return };
        // TS 29.274 8.4: 16-63 are acceptances.
        let accepted = (16..64).contains(&cause);
        if !accepted {
            if p.msg_type == msg_type::DELETE_SESSION_REQUEST && cause == CONTEXT_NOT_FOUND {
                self.forget(p.teid);
            }
            return;
        }
        let created = match &answer.body {
            Message::CreateSessionResponse(r) => r.sender_fteid.as_ref().map(|f| f.teid),
            _ => None,
        };
        self.log_message(mme, &p.bytes, created);
        match (p.msg_type, &answer.body) {
            (msg_type::CREATE_SESSION_REQUEST, Message::CreateSessionResponse(r)) => {
                if let Some(record) = session_record(mme, &p.bytes, r) {
                    self.record(record);
                }
            }
            (msg_type::MODIFY_BEARER_REQUEST, _) => {
                if let Some(s) = self.sessions.get_mut(&p.teid) {
                    let before = s.stored_bytes();
                    s.mbr = Some(p.bytes.to_vec());
                    s.rab = None;
                    self.session_bytes = self.session_bytes + s.stored_bytes() - before;
                    self.events.push_back(RelayEvent::Recorded(s.clone()));
                }
            }
            (msg_type::RELEASE_ACCESS_BEARERS_REQUEST, _) => {
                if let Some(s) = self.sessions.get_mut(&p.teid) {
                    let before = s.stored_bytes();
                    s.rab = Some(p.bytes.to_vec());
                    self.session_bytes = self.session_bytes + s.stored_bytes() - before;
                    self.events.push_back(RelayEvent::Recorded(s.clone()));
                }
            }
            _ => {}
        }
        if matches!(
            p.msg_type,
            msg_type::MODIFY_BEARER_REQUEST
                | msg_type::RELEASE_ACCESS_BEARERS_REQUEST
                | msg_type::DELETE_SESSION_REQUEST
        ) {
            let (sgw_s11_teid, msg_type, bytes) = (p.teid, p.msg_type, p.bytes);
            self.events.push_back(RelayEvent::Accepted { sgw_s11_teid, msg_type, bytes });
        }
        // After the replicas were told (Accepted above).
        if p.msg_type == msg_type::DELETE_SESSION_REQUEST {
            self.forget(p.teid);
        }
    }

    fn log_message(&mut self, mme: SocketAddr, bytes: &Bytes, created_teid: Option<u32>) {
        if self.log_full {
            return;
        }
        if self.log_bytes + bytes.len() > self.limits.max_log_bytes {
            self.log_full = true;
            self.counters.incr("relay_log_full");
            return;
        }
        self.log_bytes += bytes.len();
        let m = LoggedMessage { mme, created_teid, bytes: bytes.to_vec() };
        self.log.push(m.clone());
        self.events.push_back(RelayEvent::Logged(m));
    }

    fn record(&mut self, record: SessionRecord) {
        // A Create Session for a UE's EBI replaces the session it had there
        // (TS 23.401 5.3.2.1: the S-GW deletes the old one).
        let replaced: Vec<u32> = (self.sessions_of(&record.imsi).into_iter())
            .filter(|s| s.ebi == record.ebi && s.mme.ip() == record.mme.ip())
            .map(|s| s.sgw_s11_teid)
            .collect();
        for teid in replaced {
            self.forget(teid);
        }
        if self.sessions.len() >= self.limits.max_sessions {
            self.counters.incr("relay_records_full");
            return;
        }
        self.counters.incr("relay_sessions_recorded");
        self.insert(record.clone());
        self.events.push_back(RelayEvent::Recorded(record));
    }

    /// Adds (or replaces) a record and its index entries.
    fn insert(&mut self, s: SessionRecord) {
        let teid = s.sgw_s11_teid;
        self.unindex(teid);
        self.session_bytes += s.stored_bytes();
        self.by_imsi.entry(s.imsi.clone()).or_default().push(teid);
        if let Some(ip) = s.ue_ipv4 {
            self.by_ipv4.insert(ip, teid);
        }
        self.sessions.insert(teid, s);
    }

    /// Removes a record and its index entries.
    fn unindex(&mut self, teid: u32) -> Option<SessionRecord> {
        let s = self.sessions.remove(&teid)?;
        self.session_bytes -= s.stored_bytes();
        if let Some(v) = self.by_imsi.get_mut(&s.imsi) {
            v.retain(|t| *t != teid);
            if v.is_empty() {
                self.by_imsi.remove(&s.imsi);
            }
        }
        if let Some(ip) = s.ue_ipv4 {
            if self.by_ipv4.get(&ip) == Some(&teid) {
                self.by_ipv4.remove(&ip);
            }
        }
        Some(s)
    }

    fn forget(&mut self, teid: u32) {
        if self.unindex(teid).is_some() {
            self.counters.incr("relay_sessions_forgotten");
            self.events.push_back(RelayEvent::Deleted { sgw_s11_teid: teid });
        }
    }

    /// A changed Recovery restart counter means the peer restarted and lost
    /// its sessions (TS 23.007 16.1.1): forget what they recorded. `mme`
    /// is the MME that sent it, `None` for the S/P-GW.
    fn note_recovery(&mut self, mme: Option<IpAddr>, bytes: &[u8]) {
        let Ok(m) = GtpMessage::parse(bytes) else { return };
        let (Message::EchoRequest(e) | Message::EchoResponse(e)) = m.body else { return };
        let key = mme.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        match self.recovery.insert(key, e.recovery) {
            Some(old) if old != e.recovery => {
                self.counters.incr("relay_peer_restarted");
                let gone: Vec<u32> = (self.sessions.values())
                    .filter(|s| mme.is_none_or(|ip| s.mme.ip() == ip))
                    .map(|s| s.sgw_s11_teid)
                    .collect();
                for teid in gone {
                    self.forget(teid);
                }
                self.events.push_back(RelayEvent::PeerRestarted { mme });
            }
            _ => {}
        }
    }
}

/// TS 29.274 8.4 cause 64.
const CONTEXT_NOT_FOUND: u8 = 64;

/// The header of a GTPv2-C datagram, if it is one.
pub fn header(bytes: &[u8]) -> Option<HeaderRepr> {
    let p = Packet::new_checked(bytes).ok()?;
    HeaderRepr::parse(&p).ok()
}

/// A copy of a recorded request with its header TEID and sequence number
/// replaced: what a replica gets (seed 000 V.B 1).
pub fn rewrite(bytes: &[u8], teid: Option<u32>, seq: u32) -> Option<Vec<u8>> {
    let mut b = bytes.to_vec();
    let mut p = Packet::new_checked(&mut b[..]).ok()?;
    if let Some(t) = teid {
        if !p.has_teid() {
            return None;
        }
        p.set_teid(t);
    }
    p.set_seq(seq);
    Some(b)
}

/// A copy of a Create Session Request whose PDN Address Allocation asks
/// for `addr` (a static address, TS 29.274 8.14: a non-zero IPv4 address
/// in the PAA of an IPv4 or IPv4v6 PDN). None when the request has no such
/// PAA at the top level.
pub fn with_static_ipv4(bytes: &[u8], addr: Ipv4Addr) -> Option<Vec<u8>> {
    let p = Packet::new_checked(bytes).ok()?;
    let mut at = if p.has_teid() { 12 } else { 8 };
    let end = bytes.len().min(4 + usize::from(u16::from_be_bytes([bytes[2], bytes[3]])));
    // Top-level IEs: type, length (2), spare/instance, value (TS 29.274 8.2.1).
    while at + 4 <= end {
        let (ty, len, inst) =
            (bytes[at], usize::from(u16::from_be_bytes([bytes[at + 1], bytes[at + 2]])), bytes[at + 3] & 0x0f);
        let value = at + 4..at + 4 + len;
        if value.end > end {
            return None;
        }
        if ty == PAA_IE && inst == 0 {
            let v4 = match (bytes[value.start] & 0x07, len) {
                (1, 5) => value.start + 1,
                (3, 22) => value.start + 18,
                _ => return None,
            };
            let mut b = bytes.to_vec();
            b[v4..v4 + 4].copy_from_slice(&addr.octets());
            return Some(b);
        }
        at = value.end;
    }
    None
}

/// PDN Address Allocation (TS 29.274 8.14).
const PAA_IE: u8 = 79;

/// The Cause of a response body (TS 29.274 8.4).
pub fn cause_of(m: &Message) -> Option<u8> {
    Some(match m {
        Message::CreateSessionResponse(r) => r.cause.value,
        Message::ModifyBearerResponse(r) => r.cause.value,
        Message::DeleteSessionResponse(r)
        | Message::ReleaseAccessBearersResponse(r)
        | Message::DeleteIndirectDataForwardingTunnelResponse(r) => r.cause.value,
        Message::CreateIndirectDataForwardingTunnelResponse(r) => r.cause.value,
        _ => return None,
    })
}

/// The record of an accepted Create Session: identity from the request,
/// TEIDs and address from the response.
fn session_record(
    mme: SocketAddr,
    csr: &[u8],
    r: &mobicore_gtp::message::CreateSessionResponse,
) -> Option<SessionRecord> {
    let req = GtpMessage::parse(csr).ok()?;
    let Message::CreateSessionRequest(q) = req.body else { return None };
    let sgw = r.sender_fteid.as_ref()?;
    let s1u = r.bearer_contexts.first().and_then(|b| b.s1u_sgw_fteid.as_ref());
    Some(SessionRecord {
        imsi: q.imsi.map(|i| i.as_str().to_string()).unwrap_or_default(),
        ebi: q.bearer_contexts.first().map_or(0, |b| b.ebi.0),
        mme,
        sgw_s11_teid: sgw.teid,
        ue_ipv4: r.paa.as_ref().and_then(|p| p.ipv4),
        s1u_sgw: s1u.and_then(|f| Some((f.teid, f.ipv4?))),
        csr: csr.to_vec(),
        mbr: None,
        rab: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mobicore_common::s11::{
        BearerContextToCreate, CreateSessionRequest, CreateSessionResponse, S11Request, S11Response,
    };
    use mobicore_common::s11::{DeleteSessionRequest, GtpCause};
    use mobicore_common::{Ambr, Arp, Ebi, Ecgi, Fteid, PdnType, Plmn, Tai, Teid};
    use mobicore_gtp::s11::{encode_request, encode_response};
    use std::net::Ipv4Addr;

    const MME: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 2124);

    fn csr(imsi: &str) -> S11Request {
        let plmn = Plmn::new("001", "01").unwrap();
        S11Request::CreateSession(CreateSessionRequest {
            imsi: imsi.parse().unwrap(),
            msisdn: None,
            serving_network: plmn,
            tai: Tai { plmn, tac: 1 },
            ecgi: Ecgi { plmn, eci: 1 },
            sender_fteid: Fteid { teid: Teid(0x10), ipv4: Ipv4Addr::LOCALHOST },
            apn: "internet".into(),
            pdn_type: PdnType::Ipv4,
            apn_ambr: Ambr { uplink: 1, downlink: 1 },
            bearer: BearerContextToCreate { ebi: Ebi(5), qci: 9, arp: Arp::default() },
            pgw_s5s8_c: None,
            static_ipv4: None,
            pco: None,
            mei: None,
        })
    }

    fn accepted(sgw_teid: u32, ue: Ipv4Addr) -> S11Response {
        let f = |teid| Fteid { teid: Teid(teid), ipv4: Ipv4Addr::LOCALHOST };
        S11Response::CreateSession(CreateSessionResponse {
            cause: GtpCause::REQUEST_ACCEPTED,
            sgw_fteid: Some(f(sgw_teid)),
            paa: Some(ue),
            apn_ambr: None,
            bearer_ebi: Ebi(5),
            bearer_cause: GtpCause::REQUEST_ACCEPTED,
            s1u_sgw_fteid: Some(f(sgw_teid + 0x1000)),
            pgw_s5s8_c_fteid: None,
            charging_id: None,
            pdn_type: Some(PdnType::Ipv4),
            ipv6_prefix: None,
            pco: None,
        })
    }

    /// One request through the relay and its answer back.
    fn exchange(r: &mut Relay, req: &S11Request, answer: &S11Response, seq: u32) {
        let now = Instant::now();
        r.handle_from_mme(now, MME, &encode_request(req, seq).to_bytes());
        let t = r.poll_transmit().unwrap();
        assert_eq!(t.to, Peer::Sgw { mme: MME });
        assert_eq!(&t.bytes[..], &encode_request(req, seq).to_bytes()[..], "forwarded unchanged");
        r.handle_from_sgw(now, MME, &encode_response(answer, 0x10, seq, None).to_bytes());
        assert_eq!(r.poll_transmit().unwrap().to, Peer::Mme(MME));
    }

    #[test]
    fn records_are_found_by_imsi_and_address_replaced_and_forgotten() {
        let mut r = Relay::new(PeerFilter::loopback(), RelayLimits::default(), Counters::new());
        let (ue1, ue2) = (Ipv4Addr::new(10, 44, 0, 1), Ipv4Addr::new(10, 44, 0, 2));
        exchange(&mut r, &csr("001010000000001"), &accepted(0x100, ue1), 1);
        exchange(&mut r, &csr("001010000000002"), &accepted(0x200, ue2), 2);
        assert_eq!(r.sessions_of("001010000000001")[0].sgw_s11_teid, 0x100);
        assert_eq!(r.session_by_ipv4(ue2).unwrap().imsi, "001010000000002");
        // A new Create Session for UE 1's EBI replaces its record (and its
        // address entry).
        let ue3 = Ipv4Addr::new(10, 44, 0, 3);
        exchange(&mut r, &csr("001010000000001"), &accepted(0x300, ue3), 3);
        let v = r.sessions_of("001010000000001");
        assert_eq!((v.len(), v[0].sgw_s11_teid), (1, 0x300));
        assert!(r.session_by_ipv4(ue1).is_none());
        assert_eq!(r.session_by_ipv4(ue3).unwrap().sgw_s11_teid, 0x300);
        // Delete Session forgets it everywhere.
        let del = S11Request::DeleteSession(DeleteSessionRequest { sgw_teid: Teid(0x200), linked_ebi: Ebi(5) });
        exchange(&mut r, &del, &S11Response::DeleteSession(GtpCause::REQUEST_ACCEPTED), 4);
        assert!(r.sessions_of("001010000000002").is_empty() && r.session_by_ipv4(ue2).is_none());
        assert_eq!(r.sessions().len(), 1);
        let (_, selective) = r.stored_bytes();
        assert_eq!(selective, r.sessions().values().map(SessionRecord::stored_bytes).sum::<usize>());
    }

    #[test]
    fn an_unknown_mme_is_dropped_and_counted() {
        let c = Counters::new();
        let mut r =
            Relay::new(PeerFilter::hosts([IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9))]), RelayLimits::default(), c.clone());
        r.handle_from_mme(Instant::now(), MME, &encode_request(&csr("001010000000001"), 1).to_bytes());
        assert!(r.poll_transmit().is_none());
        assert_eq!(c.value("relay_from_unknown_peer"), 1);
    }

    #[test]
    fn a_static_address_is_written_into_the_paa_and_nothing_else_changes() {
        use mobicore_gtp::s11::decode_request;
        let fixed = Ipv4Addr::new(10, 44, 3, 7);
        for pdn_type in [PdnType::Ipv4, PdnType::Ipv4v6] {
            let S11Request::CreateSession(mut c) = csr("001010000000001") else { unreachable!() };
            c.pdn_type = pdn_type;
            let bytes = encode_request(&S11Request::CreateSession(c), 7).to_bytes();
            let out = with_static_ipv4(&bytes, fixed).expect("a PAA to rewrite");
            assert_eq!(out.len(), bytes.len());
            let m = GtpMessage::parse(&out).expect("parses");
            let Ok(S11Request::CreateSession(d)) = decode_request(&m) else { panic!("decodes") };
            assert_eq!((d.static_ipv4, m.seq), (Some(fixed), 7));
            let Ok(S11Request::CreateSession(orig)) = decode_request(&GtpMessage::parse(&bytes).unwrap()) else {
                panic!("decodes")
            };
            assert_eq!(CreateSessionRequest { static_ipv4: None, ..d }, orig, "only the address differs");
        }
        // IPv6 only: no IPv4 address to ask for; truncated input: None.
        let S11Request::CreateSession(mut c) = csr("001010000000001") else { unreachable!() };
        c.pdn_type = PdnType::Ipv6;
        assert!(with_static_ipv4(&encode_request(&S11Request::CreateSession(c), 1).to_bytes(), fixed).is_none());
        let bytes = encode_request(&csr("001010000000001"), 1).to_bytes();
        for cut in 0..bytes.len() {
            let _ = with_static_ipv4(&bytes[..cut], fixed);
        }
    }
}
