//! The sans-I/O S/P-GW-C: S11 datagrams and PFCP datagrams in, datagrams
//! out, time passed in. S11 TEIDs, S1-U TEIDs and CP SEIDs are drawn at
//! random ([`IdDraw`], never one still in use), UE addresses in order; with
//! `id_seed` set, processing is deterministic given the messages, the
//! configuration and the times.
//!
//! Trust boundary: S11 only from `mme_peers`, and a session only from the
//! MME that created it; PFCP only from the configured UPFs, and a session's
//! reports only from its own. What a peer can make us hold is bounded:
//! requests queued per session, the duplicate caches, the pools.

use crate::config::SpgwcConfig;
use crate::context::{ApnPools, S11Pending, Session, UpIds, UpfState};
use crate::sxa_build::{self as sxa, msg};
use mobicore_common::alloc::IdDraw;
use mobicore_common::counters::Counters;
use mobicore_common::s11::GtpCause;
use mobicore_common::{Imsi, Teid};
use mobicore_gtp::message::{self as gm, GtpMessage, Message};
use mobicore_gtp::transaction::{TransactionConfig, TransactionStats, Transactions};
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
    /// Session ops name the session by our S11 TEID and check its CP SEID
    /// (reserved until the op ends) before touching it.
    Establish {
        teid: u32,
        s11: S11Pending,
        ids: UpIds,
    },
    ModifyBearer {
        teid: u32,
        seid: u64,
        s11: S11Pending,
        enb: mobicore_common::Fteid,
    },
    ReleaseAccess {
        teid: u32,
        seid: u64,
        s11: S11Pending,
    },
    Delete {
        teid: u32,
        seid: u64,
        s11: S11Pending,
    },
    /// Create Indirect Data Forwarding Tunnel: our F-TEID and the target's.
    CreateForwarding {
        teid: u32,
        seid: u64,
        s11: S11Pending,
        tunnel: (mobicore_common::Fteid, mobicore_common::Fteid),
    },
    /// Delete Indirect Data Forwarding Tunnel.
    DeleteForwarding {
        teid: u32,
        seid: u64,
        s11: S11Pending,
    },
    /// The downlink FAR turned to DROP to discard the buffer (paging.rs).
    DiscardBuffer {
        teid: u32,
        seid: u64,
    },
    /// The downlink FAR back to BUFF + NOCP after a discard.
    RearmBuffer {
        teid: u32,
        seid: u64,
    },
    /// Deletion of a UPF session whose S11 context is already gone; its
    /// identifiers are free again once the UPF answered (or never will).
    DeleteStale(UpIds),
}

/// What the S/P-GW-C holds now ([`SpgwcCore::held`]): every resource a
/// peer's requests can make it allocate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub sessions: usize,
    pub by_imsi: usize,
    pub by_seid: usize,
    /// UE addresses handed out, over all pools.
    pub pool_addresses: usize,
    /// S1-U TEIDs held, over all UPFs.
    pub s1u_teids: usize,
    /// CP SEIDs of UPF sessions being deleted.
    pub draining_seids: usize,
    /// S11 requests waiting behind a procedure, over all sessions.
    pub queued: usize,
    pub s11_cache: usize,
    pub pfcp_cache: usize,
    pub pfcp_outstanding: usize,
}

pub struct SpgwcCore {
    pub(crate) cfg: SpgwcConfig,
    /// Our S11 address, put in the SGW S11 F-TEID.
    pub(crate) s11_ip: Ipv4Addr,
    pub(crate) pfcp_recovery: SystemTime,
    /// S11 as a server, and as the client of our Downlink Data
    /// Notifications (the token: the session's S11 TEID).
    pub(crate) s11: Transactions<SocketAddr, u32>,
    /// When sessions' DDN holds end (paging.rs), earliest first.
    pub(crate) paging_holds: std::collections::BinaryHeap<std::cmp::Reverse<(Instant, u32)>>,
    /// DDN throttling per MME address (paging.rs, TS 23.401 4.3.7.4.1a).
    pub(crate) ddn_throttling: HashMap<std::net::IpAddr, crate::paging::Throttling>,
    pub(crate) pfcp: Transactions<SocketAddr, PfcpOp>,
    pub(crate) sessions: HashMap<u32, Session>,
    /// (IMSI, default bearer EBI) -> our S11 TEID.
    pub(crate) by_imsi: HashMap<(Imsi, u8), u32>,
    /// Our CP SEID -> our S11 TEID (Session Report Requests name the SEID).
    pub(crate) by_seid: HashMap<u64, u32>,
    pub(crate) pools: BTreeMap<String, ApnPools>,
    pub(crate) upfs: Vec<UpfState>,
    /// CP SEID -> (UPF, S1-U TEID) of UPF sessions being deleted.
    pub(crate) draining: HashMap<u64, UpIds>,
    /// The one allocator of S11 TEIDs, S1-U TEIDs and CP SEIDs.
    pub(crate) ids: IdDraw,
    /// The transaction layers' stats already counted.
    s11_seen: TransactionStats,
    pfcp_seen: TransactionStats,
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
        let pools = cfg.apns.iter().map(|a| (a.name.to_ascii_lowercase(), ApnPools::new(a))).collect();
        let upfs = cfg
            .upfs
            .iter()
            .map(|_| UpfState { associated: false, probing: false, s1u_in_use: Default::default() })
            .collect();
        SpgwcCore {
            paging_holds: Default::default(),
            ddn_throttling: HashMap::new(),
            s11: Transactions::new(TransactionConfig { t3: cfg.t3, n3: cfg.n3 })
                .with_max_cached(cfg.s11_duplicate_cache),
            pfcp: Transactions::new(TransactionConfig { t3: cfg.t1, n3: cfg.n1 })
                .with_max_cached(cfg.pfcp_duplicate_cache),
            ids: IdDraw::new(cfg.id_seed),
            cfg,
            s11_ip,
            pfcp_recovery,
            sessions: HashMap::new(),
            by_imsi: HashMap::new(),
            by_seid: HashMap::new(),
            pools,
            upfs,
            draining: HashMap::new(),
            s11_seen: TransactionStats::default(),
            pfcp_seen: TransactionStats::default(),
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

    /// What is held now: sessions, addresses, identifiers, queues, caches.
    pub fn held(&self) -> Held {
        Held {
            sessions: self.sessions.len(),
            by_imsi: self.by_imsi.len(),
            by_seid: self.by_seid.len(),
            pool_addresses: self.pools.values().map(ApnPools::in_use).sum(),
            s1u_teids: self.upfs.iter().map(|u| u.s1u_in_use.len()).sum(),
            draining_seids: self.draining.len(),
            queued: self.sessions.values().map(|s| s.queued.len()).sum(),
            s11_cache: self.s11.cached(),
            pfcp_cache: self.pfcp.cached(),
            pfcp_outstanding: self.pfcp.outstanding(),
        }
    }

    /// The live session of `teid` that still has CP SEID `seid` (a
    /// session replaced meanwhile is not it).
    pub(crate) fn live(&self, teid: u32, seid: u64) -> bool {
        self.sessions.get(&teid).is_some_and(|s| s.cp_seid == seid)
    }

    /// Removes a session from the tables and returns its address to the
    /// pool. Its S1-U TEID and CP SEID stay reserved (the UPF may hold
    /// them) until [`Self::release_ids`].
    pub(crate) fn remove_session(&mut self, teid: u32) -> Option<Session> {
        let s = self.sessions.remove(&teid)?;
        self.by_seid.remove(&s.cp_seid);
        self.draining.insert(s.cp_seid, s.up_ids());
        if self.by_imsi.get(&(s.imsi.clone(), s.ebi.0)) == Some(&teid) {
            self.by_imsi.remove(&(s.imsi.clone(), s.ebi.0));
        }
        if let Some(pool) = self.pools.get_mut(&s.apn) {
            pool.release(s.ue_ipv4, s.ue_ipv6);
        }
        Some(s)
    }

    /// The UPF holds nothing of a removed session any more: its
    /// identifiers may be drawn again.
    pub(crate) fn release_ids(&mut self, ids: UpIds) {
        if self.draining.get(&ids.cp_seid) == Some(&ids) {
            self.draining.remove(&ids.cp_seid);
            if let Some(u) = self.upfs.get_mut(ids.upf) {
                u.s1u_in_use.remove(&ids.s1u_teid);
                if let Some(t) = ids.forwarding_teid {
                    u.s1u_in_use.remove(&t);
                }
            }
        }
    }

    /// Deletes a UPF session nobody waits for.
    pub(crate) fn delete_on_upf(&mut self, now: Instant, ids: UpIds, up_seid: u64) {
        let to = self.cfg.upfs[ids.upf].pfcp;
        self.pfcp_request(now, to, msg::SESSION_DELETION_REQUEST, Some(up_seid), &[], PfcpOp::DeleteStale(ids));
    }

    /// Adds `n` to counter `name` without wrapping (values a peer reports
    /// may be anything).
    pub(crate) fn count_saturating(&self, name: &'static str, n: u64) {
        let c = self.counters.get(name);
        let _ = c.fetch_update(std::sync::atomic::Ordering::Relaxed, std::sync::atomic::Ordering::Relaxed, |v| {
            Some(v.saturating_add(n))
        });
    }

    /// Counts the duplicate-cache evictions since the last call.
    pub(crate) fn count_transactions(&mut self) {
        self.s11.stats.count_since(&mut self.s11_seen, &self.counters, &mobicore_gtp::S11_STATS);
        self.pfcp.stats.count_since(&mut self.pfcp_seen, &self.counters, &mobicore_gtp::PFCP_STATS);
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
        self.pfcp_request(
            now,
            self.cfg.upfs[i].pfcp,
            msg::ASSOCIATION_SETUP_REQUEST,
            None,
            &ies,
            PfcpOp::AssociationSetup(i),
        );
    }

    pub(crate) fn pfcp_request(
        &mut self,
        now: Instant,
        to: SocketAddr,
        t: u8,
        seid: Option<u64>,
        ies: &[rs_pfcp::ie::Ie],
        op: PfcpOp,
    ) {
        let seq = self.pfcp.next_seq();
        let bytes = sxa::encode(t, seid, seq, ies);
        self.pfcp.send_request(now, to, seq, bytes, op);
    }

    /// Sends the S11 answer to a pending request and keeps it for duplicates.
    pub(crate) fn answer_s11(&mut self, now: Instant, p: S11Pending, m: GtpMessage) {
        self.s11.answer(now, p.peer, p.seq, m.to_bytes());
    }

    /// One S11 datagram from `peer`. Nothing from an address outside
    /// `mme_peers` is read: TS 29.274 gives no answer to an unknown peer,
    /// so it is dropped and counted.
    pub fn handle_s11(&mut self, now: Instant, peer: SocketAddr, bytes: &[u8]) {
        if !self.cfg.mme_peers.permits(peer.ip()) {
            self.counters.incr("s11_request_from_unknown_peer");
            return;
        }
        self.s11_datagram(now, peer, bytes);
        self.count_transactions();
    }

    fn s11_datagram(&mut self, now: Instant, peer: SocketAddr, bytes: &[u8]) {
        if let Some(v) = gm::version_not_supported(bytes) {
            // Another GTP version (TS 29.274 7.7.2, 7.9.1): answered with
            // Version Not Supported Indication, nothing else read.
            self.counters.incr("gtp_version_not_supported");
            self.out.push_back(Transmit { interface: Interface::S11, dst: peer, bytes: v.to_bytes().into() });
            return;
        }
        match GtpMessage::parse(bytes) {
            Ok(m) => self.on_s11_message(now, peer, m, bytes),
            Err((Some(h), e)) if gm::msg_type::is_request(h.msg_type) && e.cause().is_some() => {
                // TS 29.274 7.7.3, 7.7.7: reject naming the offending IE.
                self.counters.incr("s11_rejected_ie");
                if matches!(e, gm::MessageError::InvalidLength { .. }) {
                    self.counters.incr("s11_rejected_invalid_length");
                }
                if self.s11.on_request(now, peer, h.seq, bytes) != mobicore_gtp::Incoming::New {
                    return;
                }
                let teid = self.mme_teid_for(h.teid.unwrap_or(0), peer);
                let cause = e.cause().unwrap_or(GtpCause::SYSTEM_FAILURE).0;
                if let Some(r) = gm::reject(h.msg_type, teid, h.seq, cause, e.offending_ie()) {
                    self.answer_s11(now, S11Pending { peer, seq: h.seq }, r);
                }
            }
            Err(_) => self.counters.incr("gtp_malformed"),
        }
    }

    /// The MME TEID to answer a request from `peer` that came on our TEID
    /// `teid` (0 when `peer` has no such context, TS 29.274 5.5.2).
    pub(crate) fn mme_teid_for(&self, teid: u32, peer: SocketAddr) -> u32 {
        self.sessions.get(&teid).filter(|s| s.owned_by(peer.ip())).map_or(0, |s| s.mme_s11.teid.0)
    }

    fn on_s11_message(&mut self, now: Instant, peer: SocketAddr, m: GtpMessage, bytes: &[u8]) {
        match &m.body {
            Message::EchoRequest(_) => {
                // TS 29.274 7.1.2: Echo Response with our Recovery.
                let r = GtpMessage {
                    teid: None,
                    seq: m.seq,
                    body: Message::EchoResponse(gm::Echo { recovery: self.cfg.recovery }),
                };
                self.out.push_back(Transmit { interface: Interface::S11, dst: peer, bytes: r.to_bytes().into() });
            }
            Message::EchoResponse(_) => {}
            // No response is sent to it (TS 29.274 7.2.11.3).
            Message::DownlinkDataNotificationFailureIndication(_) => self.on_ddn_failure(now, peer, &m),
            Message::DownlinkDataNotificationAck(_) => self.on_s11_response(now, peer, &m),
            b if gm::msg_type::is_request(b.msg_type()) => match self.s11.on_request(now, peer, m.seq, bytes) {
                mobicore_gtp::Incoming::New => self.on_s11_request(now, S11Pending { peer, seq: m.seq }, &m),
                _ => self.counters.incr("s11_duplicate_request"),
            },
            _ => self.counters.incr("s11_unexpected_response"),
        }
    }

    /// Advances timers: GTP-C cache expiry, PFCP retransmissions and
    /// failures, heartbeats.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.s11.handle_timeout(now);
        while let Some((_, teid)) = self.s11.poll_timed_out() {
            self.on_ddn_timeout(teid);
        }
        self.paging_timeout(now);
        self.pfcp.handle_timeout(now);
        while let Some((_, op)) = self.pfcp.poll_timed_out() {
            self.on_pfcp_timeout(now, op);
        }
        self.count_transactions();
        if self.next_heartbeat.is_some_and(|t| t <= now) {
            self.next_heartbeat = Some(now + self.cfg.heartbeat_interval);
            for i in 0..self.upfs.len() {
                if self.upfs[i].probing {
                    continue;
                }
                if self.upfs[i].associated {
                    self.upfs[i].probing = true;
                    let ies = sxa::heartbeat_request(self.pfcp_recovery);
                    self.pfcp_request(
                        now,
                        self.cfg.upfs[i].pfcp,
                        msg::HEARTBEAT_REQUEST,
                        None,
                        &ies,
                        PfcpOp::Heartbeat(i),
                    );
                } else {
                    self.associate(now, i);
                }
            }
        }
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.s11.poll_timeout(), self.pfcp.poll_timeout(), self.next_heartbeat, self.paging_poll_timeout()]
            .into_iter()
            .flatten()
            .min()
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
