//! The sans-I/O S/P-GW-C: S11 datagrams and PFCP datagrams in, datagrams
//! out, time passed in. Deterministic given the messages, the
//! configuration and the times: TEIDs, SEIDs and UE addresses are handed
//! out in order.

use crate::config::SpgwcConfig;
use crate::context::{Pool, S11Pending, Session, UpfState};
use crate::sxa_build::{self as sxa, msg};
use mobicore_common::counters::Counters;
use mobicore_common::s11::GtpCause;
use mobicore_common::{Imsi, Teid};
use mobicore_gtp::message::{self as gm, GtpMessage, Message};
use mobicore_gtp::transaction::{TransactionConfig, Transactions};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Instant, SystemTime};

/// Which socket a datagram goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    S11,
    Pfcp,
}

/// A datagram to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub interface: Interface,
    pub dst: SocketAddr,
    pub bytes: bytes::Bytes,
}

/// What an outstanding PFCP request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PfcpOp {
    AssociationSetup(usize),
    Heartbeat(usize),
    Establish { teid: u32, s11: S11Pending },
    ModifyBearer { teid: u32, s11: S11Pending, enb: mobicore_common::Fteid },
    ReleaseAccess { teid: u32, s11: S11Pending },
    Delete { teid: u32, s11: S11Pending },
    /// Deletion of a UPF session whose S11 context is already gone.
    DeleteStale,
}

pub struct SpgwcCore {
    pub(crate) cfg: SpgwcConfig,
    /// Our S11 address, put in the SGW S11 F-TEID.
    pub(crate) s11_ip: Ipv4Addr,
    pub(crate) pfcp_recovery: SystemTime,
    pub(crate) s11: Transactions<SocketAddr, ()>,
    pub(crate) pfcp: Transactions<SocketAddr, PfcpOp>,
    pub(crate) sessions: HashMap<u32, Session>,
    /// (IMSI, default bearer EBI) -> our S11 TEID.
    pub(crate) by_imsi: HashMap<(Imsi, u8), u32>,
    /// Our CP SEID -> our S11 TEID (Session Report Requests name the SEID).
    pub(crate) by_seid: HashMap<u64, u32>,
    pub(crate) pools: BTreeMap<String, Pool>,
    pub(crate) upfs: Vec<UpfState>,
    pub(crate) next_teid: u32,
    pub(crate) next_seid: u64,
    pub(crate) next_upf: usize,
    pub(crate) next_heartbeat: Option<Instant>,
    pub(crate) started: bool,
    pub(crate) out: VecDeque<Transmit>,
    pub counters: Counters,
}

impl SpgwcCore {
    /// `s11_ip` is the address the MME reaches us at; `pfcp_recovery` our
    /// start time for PFCP Recovery Time Stamps.
    pub fn new(cfg: SpgwcConfig, s11_ip: Ipv4Addr, pfcp_recovery: SystemTime, counters: Counters) -> Self {
        let pools = cfg.apns.iter().map(|a| (a.name.to_ascii_lowercase(), Pool::new(a))).collect();
        let upfs = cfg.upfs.iter().map(|u| UpfState { associated: false, probing: false, next_teid: u.teid_base }).collect();
        SpgwcCore {
            s11: Transactions::new(TransactionConfig { t3: cfg.t3, n3: cfg.n3 }),
            pfcp: Transactions::new(TransactionConfig { t3: cfg.t1, n3: cfg.n1 }),
            cfg,
            s11_ip,
            pfcp_recovery,
            sessions: HashMap::new(),
            by_imsi: HashMap::new(),
            by_seid: HashMap::new(),
            pools,
            upfs,
            next_teid: 1,
            next_seid: 1,
            next_upf: 0,
            next_heartbeat: None,
            started: false,
            out: VecDeque::new(),
            counters,
        }
    }

    /// Sessions by our S11 TEID.
    pub fn sessions(&self) -> &HashMap<u32, Session> {
        &self.sessions
    }

    pub fn session(&self, sgw_teid: Teid) -> Option<&Session> {
        self.sessions.get(&sgw_teid.0)
    }

    /// Removes a session from the tables and returns its address to the pool.
    pub(crate) fn remove_session(&mut self, teid: u32) -> Option<Session> {
        let s = self.sessions.remove(&teid)?;
        self.by_seid.remove(&s.cp_seid);
        if self.by_imsi.get(&(s.imsi.clone(), s.ebi.0)) == Some(&teid) {
            self.by_imsi.remove(&(s.imsi.clone(), s.ebi.0));
        }
        if let Some(pool) = self.pools.get_mut(&s.apn) {
            pool.release(s.ue_ipv4);
        }
        Some(s)
    }

    /// Deletes a UPF session nobody waits for.
    pub(crate) fn delete_on_upf(&mut self, now: Instant, upf: usize, up_seid: u64) {
        let to = self.cfg.upfs[upf].pfcp;
        self.pfcp_request(now, to, msg::SESSION_DELETION_REQUEST, Some(up_seid), &[], PfcpOp::DeleteStale);
    }

    /// Whether UPF `i` (configuration order) has a PFCP association.
    pub fn upf_associated(&self, i: usize) -> bool {
        self.upfs.get(i).is_some_and(|u| u.associated)
    }

    /// Sends Association Setup Requests to every configured UPF
    /// (TS 29.244 6.2.6.2.1) and arms the heartbeat.
    pub fn start(&mut self, now: Instant) {
        if self.started {
            return;
        }
        self.started = true;
        for i in 0..self.upfs.len() {
            self.associate(now, i);
        }
        self.next_heartbeat = Some(now + self.cfg.heartbeat_interval);
    }

    pub(crate) fn associate(&mut self, now: Instant, i: usize) {
        let ies = sxa::association_setup_request(self.cfg.node_id, self.pfcp_recovery);
        self.upfs[i].probing = true;
        self.pfcp_request(now, self.cfg.upfs[i].pfcp, msg::ASSOCIATION_SETUP_REQUEST, None, &ies, PfcpOp::AssociationSetup(i));
    }

    pub(crate) fn pfcp_request(&mut self, now: Instant, to: SocketAddr, t: u8, seid: Option<u64>, ies: &[rs_pfcp::ie::Ie], op: PfcpOp) {
        let seq = self.pfcp.next_seq();
        let bytes = sxa::encode(t, seid, seq, ies);
        self.pfcp.send_request(now, to, seq, bytes, op);
    }

    /// Sends the S11 answer to a pending request and keeps it for duplicates.
    pub(crate) fn answer_s11(&mut self, now: Instant, p: S11Pending, m: GtpMessage) {
        self.s11.answer(now, p.peer, p.seq, m.to_bytes());
    }

    /// One S11 datagram from `peer`.
    pub fn handle_s11(&mut self, now: Instant, peer: SocketAddr, bytes: &[u8]) {
        match GtpMessage::parse(bytes) {
            Ok(m) => self.on_s11_message(now, peer, m),
            Err((Some(h), e)) if gm::msg_type::is_request(h.msg_type) && e.cause().is_some() => {
                // TS 29.274 7.7.3: reject naming the offending IE.
                self.counters.incr("s11_rejected_ie");
                if self.s11.on_request(now, peer, h.seq) != mobicore_gtp::Incoming::New {
                    return;
                }
                let teid = self.mme_teid_for(h.teid.unwrap_or(0));
                let cause = e.cause().unwrap_or(GtpCause::SYSTEM_FAILURE).0;
                if let Some(r) = gm::reject(h.msg_type, teid, h.seq, cause, e.offending_ie()) {
                    self.answer_s11(now, S11Pending { peer, seq: h.seq }, r);
                }
            }
            Err(_) => self.counters.incr("gtp_malformed"),
        }
    }

    /// The MME TEID to answer a request that came on our TEID `teid`
    /// (0 when we know no such context, TS 29.274 5.5.2).
    pub(crate) fn mme_teid_for(&self, teid: u32) -> u32 {
        self.sessions.get(&teid).map_or(0, |s| s.mme_s11.teid.0)
    }

    fn on_s11_message(&mut self, now: Instant, peer: SocketAddr, m: GtpMessage) {
        match &m.body {
            Message::EchoRequest(_) => {
                // TS 29.274 7.1.2: Echo Response with our Recovery.
                let r = GtpMessage { teid: None, seq: m.seq, body: Message::EchoResponse(gm::Echo { recovery: self.cfg.recovery }) };
                self.out.push_back(Transmit { interface: Interface::S11, dst: peer, bytes: r.to_bytes().into() });
            }
            Message::EchoResponse(_) => {}
            b if gm::msg_type::is_request(b.msg_type()) => {
                match self.s11.on_request(now, peer, m.seq) {
                    mobicore_gtp::Incoming::New => self.on_s11_request(now, S11Pending { peer, seq: m.seq }, &m),
                    _ => self.counters.incr("s11_duplicate_request"),
                }
            }
            _ => self.counters.incr("s11_unexpected_response"),
        }
    }

    /// Advances timers: GTP-C cache expiry, PFCP retransmissions and
    /// failures, heartbeats.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.s11.handle_timeout(now);
        self.pfcp.handle_timeout(now);
        while let Some((_, op)) = self.pfcp.poll_timed_out() {
            self.on_pfcp_timeout(now, op);
        }
        if self.next_heartbeat.is_some_and(|t| t <= now) {
            self.next_heartbeat = Some(now + self.cfg.heartbeat_interval);
            for i in 0..self.upfs.len() {
                if self.upfs[i].probing {
                    continue;
                }
                if self.upfs[i].associated {
                    self.upfs[i].probing = true;
                    let ies = sxa::heartbeat_request(self.pfcp_recovery);
                    self.pfcp_request(now, self.cfg.upfs[i].pfcp, msg::HEARTBEAT_REQUEST, None, &ies, PfcpOp::Heartbeat(i));
                } else {
                    self.associate(now, i);
                }
            }
        }
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.s11.poll_timeout(), self.pfcp.poll_timeout(), self.next_heartbeat].into_iter().flatten().min()
    }

    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        if let Some(t) = self.out.pop_front() {
            return Some(t);
        }
        if let Some((dst, bytes)) = self.s11.poll_transmit() {
            return Some(Transmit { interface: Interface::S11, dst, bytes });
        }
        self.pfcp.poll_transmit().map(|(dst, bytes)| Transmit { interface: Interface::Pfcp, dst, bytes })
    }
}
