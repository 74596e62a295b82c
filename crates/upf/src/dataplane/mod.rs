//! The pure user-space data path, and the slow path both data paths share.
//!
//! # Layout
//! - [`UserPlane`] (this file): the sans-I/O packet core. Rules come in
//!   through install/update/remove; packets through [`UserPlane::uplink`]
//!   (a UDP datagram received on the S1-U address, port 2152) and
//!   [`UserPlane::downlink`] (an IPv4 or IPv6 packet routed to the UE pools
//!   on the core side); what to send comes out of [`UserPlane::poll_transmit`] and
//!   what to tell the CP function out of [`UserPlane::poll_report`].
//! - `forward`: the per-packet pipeline (PDR match, QER, URR, FAR), and
//!   the GTP-U MTU (`s1u_mtu`): a packet too big once encapsulated
//!   (downlink, or uplink with Outer Header Creation) is fragmented
//!   (inner, RFC 791) or, with DF, answered with ICMP Fragmentation Needed
//!   towards its source (RFC 1191; the UE through its tunnel for uplink).
//! - `dupl`: FAR DUPL, copies per Duplicating Parameters.
//! - [`defrag`]: virtual reassembly, so that later fragments follow the
//!   first one's PDR in sessions with port-based SDF filters.
//! - [`flow`]: SDF filters (flow descriptions).
//! - `ipv4`: the IPv4 fields we read; fragments and ICMP we build.
//! - [`ipv6`]: the IPv6 fields we read; the Router Advertisement we send.
//!   A session whose PDI names an IPv6 address is found by its /64 (PDN
//!   types IPv6 and IPv4v6); IPv6 is forwarded here, in the slow path
//!   (the XDP fast path passes it on), never fragmented (too big: dropped).
//! - [`plane`]: [`UserspacePlane`], the shared handle implementing
//!   [`ForwardingPlane`] for the PFCP node.
//! - [`handover`]: a FAR turning from BUFF to FORW switches the XDP fast
//!   path only once the released packets are sent (no overtaking); a
//!   path switch's End Marker leaves after the fast path's last packet
//!   on the old tunnel.
//! - [`io`]: the I/O shell: a UDP socket on S1-U:2152 on the access side
//!   and a TUN device on the core side.
//!
//! Counter names: `gtpu_malformed`, `gtpu_echo_request`,
//! `gtpu_error_indication_sent`, `gtpu_error_indication_suppressed`,
//! `gtpu_error_indication_received`, `gtpu_end_marker_sent`,
//! `gtpu_end_marker_received`, `gtpu_end_marker_relayed`,
//! `gtpu_end_marker_not_relayed`, `upf_end_marker_gate_failed` (the
//! grace period before End Markers could not be waited for),
//! `gtpu_unknown_teid`, `upf_ul_spoofed`, `upf_no_pdr`, `upf_gate_closed`,
//! `upf_mbr_exceeded`, `upf_far_drop` (including the packets of PDRs
//! whose URR quota is exhausted: they point to the usage engine's DROP
//! FAR; `upf_quota_exhausted` counts exhaustions, in the PFCP node),
//! `upf_buffer_overflow`, `upf_buffer_discarded`, `upf_dl_no_session`,
//! `upf_ul_forwarded`, `upf_dl_forwarded`, `upf_buffered`, `upf_released`,
//! `upf_duplicated`, `upf_dupl_outer_fragmented`, `upf_frag_held`, `upf_frag_overflow`,
//! `upf_frag_timeout`, `upf_frag_discarded`, `upf_dl_fragmented`,
//! `upf_ul_fragmented`,
//! `upf_icmp_frag_needed`, `upf_icmp_suppressed`, `upf_too_big`,
//! `upf_ipv6_router_advertisement`;
//! AF_XDP (XDP mode, `io`): `upf_afxdp_received` (buffered downlink frames
//! read from the sockets), `upf_afxdp_not_ipv4`, and in the shell
//! `upf_afxdp_fallback` (no sockets: the TUN device receives them).

pub mod defrag;
mod dupl;
pub mod flow;
mod forward;
pub mod handover;
pub mod io;
pub mod ipv4;
pub mod ipv6;
pub mod plane;

use crate::rules::{GtpuTunnel, PlaneError, PlaneReport, SessionRules, INTERFACE_ACCESS, INTERFACE_CORE};
use mobicore_common::counters::Counters;
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

pub use plane::UserspacePlane;

/// Budgets and limits of the user-space data path.
#[derive(Debug, Clone)]
pub struct DatapathConfig {
    /// Our S1-U address (GTP-U Peer Address of Error Indications).
    pub s1u_addr: Ipv4Addr,
    /// Octets of buffered downlink packets one session may hold.
    pub buffer_session_bytes: usize,
    /// Octets of buffered downlink packets all sessions together may hold.
    pub buffer_total_bytes: usize,
    /// Error Indications per second, at most (TS 29.281 7.3.1 leaves the
    /// rate to us; a flood of unknown TEIDs must not become a flood back).
    /// ICMP Fragmentation Needed messages have a bucket of the same rate.
    pub error_indications_per_sec: u32,
    /// Path MTU of GTP-U (towards the eNBs on S1-U, and uplink forwarding
    /// with Outer Header Creation): a packet larger than this once in
    /// GTP-U/UDP/IPv4 is fragmented before encapsulation, or answered with
    /// ICMP Fragmentation Needed when it has DF set.
    pub s1u_mtu: usize,
    /// Source address of the ICMP errors sent to the core side; `None`:
    /// `s1u_addr`.
    pub icmp_source: Option<Ipv4Addr>,
    /// Octets of out-of-order inner fragments one session may hold while
    /// waiting for a first fragment (see [`defrag`]), and all together.
    pub frag_session_bytes: usize,
    pub frag_total_bytes: usize,
    /// How long fragments of one packet are tracked from the first seen.
    pub frag_timeout: Duration,
}

impl Default for DatapathConfig {
    fn default() -> Self {
        DatapathConfig {
            s1u_addr: Ipv4Addr::LOCALHOST,
            buffer_session_bytes: 256 * 1024,
            buffer_total_bytes: 64 * 1024 * 1024,
            error_indications_per_sec: 100,
            s1u_mtu: 1500,
            icmp_source: None,
            frag_session_bytes: 64 * 1024,
            frag_total_bytes: 4 * 1024 * 1024,
            frag_timeout: Duration::from_secs(2),
        }
    }
}

/// A packet to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// A GTP-U message to a peer's UDP address (access side, or another
    /// user-plane node).
    Gtpu { to: SocketAddrV4, bytes: Vec<u8> },
    /// An IPv4 packet for the core side (the data network).
    Core(Vec<u8>),
    /// A GTP-U message whose outer IPv4 header gets this ToS (Transport
    /// Level Marking of Duplicating Parameters).
    GtpuMarked { to: SocketAddrV4, tos: u8, bytes: Vec<u8> },
}

impl Transmit {
    /// A GTP-U End Marker (message type 254, TS 29.281 6.1).
    pub fn is_end_marker(&self) -> bool {
        matches!(self, Transmit::Gtpu { bytes, .. } | Transmit::GtpuMarked { bytes, .. }
            if bytes.get(1) == Some(&mobicore_gtp::gtpu::msg::END_MARKER))
    }
}

/// Why a packet was dropped; each has its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    Malformed,
    UnknownTeid,
    NoSession,
    Spoofed,
    NoPdr,
    GateClosed,
    MbrExceeded,
    QuotaExhausted,
    FarDrop,
    BufferFull,
    NoDestination,
    Unsupported,
    /// A fragment for which the fragment table had no room.
    FragOverflow,
    /// A fragment whose data would end beyond 65535 octets (`defrag::in_range`).
    FragOutOfRange,
    /// Too big for the S1-U MTU with DF set (ICMP sent).
    TooBig,
}

impl DropReason {
    pub fn counter(self) -> &'static str {
        match self {
            DropReason::Malformed => "gtpu_malformed",
            DropReason::UnknownTeid => "gtpu_unknown_teid",
            DropReason::NoSession => "upf_dl_no_session",
            DropReason::Spoofed => "upf_ul_spoofed",
            DropReason::NoPdr => "upf_no_pdr",
            DropReason::GateClosed => "upf_gate_closed",
            DropReason::MbrExceeded => "upf_mbr_exceeded",
            DropReason::QuotaExhausted => "upf_quota_exhausted",
            DropReason::FarDrop => "upf_far_drop",
            DropReason::BufferFull => "upf_buffer_overflow",
            DropReason::NoDestination => "upf_no_destination",
            DropReason::Unsupported => "gtpu_unsupported_message",
            DropReason::FragOverflow => "upf_frag_overflow",
            DropReason::FragOutOfRange => "upf_frag_offset_out_of_range",
            DropReason::TooBig => "upf_too_big",
        }
    }
}

/// What became of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forwarded (see [`UserPlane::poll_transmit`]).
    Forwarded,
    /// Held in a session's downlink buffer.
    Buffered,
    /// A GTP-U control message, handled (an answer may be queued).
    Control,
    /// A non-first fragment held until its first fragment arrives.
    Held,
    Dropped(DropReason),
}

/// A token bucket (octets, or messages).
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    rate: f64,
    depth: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    pub(crate) fn new(rate_per_sec: f64, depth: f64) -> Self {
        TokenBucket { rate: rate_per_sec, depth, tokens: depth, last: None }
    }
    pub(crate) fn take(&mut self, now: Instant, n: f64) -> bool {
        if let Some(l) = self.last {
            let dt = now.saturating_duration_since(l).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.depth);
        }
        self.last = Some(now);
        if self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }
}

/// One URR's cumulative counts of what this data path forwarded (TS
/// 29.244 5.2.2); thresholds, quotas and reports are the usage engine's
/// ([`crate::urr`]), which reads them through `ForwardingPlane::usage`.
pub(crate) type UrrState = crate::urr::UsageCounts;

/// The data path's view of one PFCP session.
#[derive(Debug, Default)]
pub(crate) struct SessionState {
    pub rules: SessionRules,
    pub ue_ip: Option<Ipv4Addr>,
    /// The UE's IPv6 address (its /64 is the key of the session).
    pub ue_ip6: Option<std::net::Ipv6Addr>,
    /// Uplink PDRs (source interface Access), by precedence.
    pub ul_pdrs: Vec<u16>,
    /// Downlink PDRs (source interface Core), by precedence.
    pub dl_pdrs: Vec<u16>,
    pub teids: Vec<u32>,
    /// MBR buckets per (QER ID, uplink).
    pub buckets: HashMap<(u32, bool), TokenBucket>,
    pub usage: HashMap<u32, UrrState>,
    /// Buffered downlink packets with the PDR that buffered them.
    pub buffer: VecDeque<(u16, Vec<u8>)>,
    pub buffer_bytes: usize,
    /// A Downlink Data Report was sent for the current buffering episode.
    pub dldr_sent: bool,
    /// Downlink / uplink PDRs have SDF filters by port: fragments go
    /// through the fragment table.
    pub frag_dl: bool,
    pub frag_ul: bool,
}

impl SessionState {
    fn new(rules: &SessionRules) -> Self {
        let mut s = SessionState::default();
        s.set_rules(rules);
        s
    }

    fn set_rules(&mut self, rules: &SessionRules) {
        self.rules = rules.clone();
        let by_prec = |iface: u8| {
            let mut v: Vec<(u32, u16)> =
                rules.pdrs.values().filter(|p| p.pdi.source_interface == iface).map(|p| (p.precedence, p.id)).collect();
            v.sort();
            v.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
        };
        self.ul_pdrs = by_prec(INTERFACE_ACCESS);
        self.dl_pdrs = by_prec(INTERFACE_CORE);
        self.teids = rules.pdrs.values().filter_map(|p| p.pdi.local_fteid.map(|f| f.0)).collect();
        self.teids.sort();
        self.teids.dedup();
        self.ue_ip = rules.pdrs.values().find_map(|p| p.pdi.ue_ipv4);
        self.ue_ip6 = rules.pdrs.values().find_map(|p| p.pdi.ue_ipv6);
        let ports = |iface: u8| {
            rules.pdrs.values().any(|p| p.pdi.source_interface == iface && p.pdi.flows.iter().any(|f| f.needs_ports()))
        };
        self.frag_dl = ports(INTERFACE_CORE);
        self.frag_ul = ports(INTERFACE_ACCESS);
        self.usage.retain(|id, _| rules.urrs.contains_key(id));
        for id in rules.urrs.keys() {
            self.usage.entry(*id).or_default();
        }
        self.buckets.retain(|(id, _), _| rules.qers.contains_key(id));
    }
}

/// The sans-I/O user-space data path.
pub struct UserPlane {
    pub(crate) cfg: DatapathConfig,
    pub(crate) sessions: HashMap<u64, SessionState>,
    pub(crate) by_teid: HashMap<u32, u64>,
    pub(crate) by_ue: HashMap<Ipv4Addr, u64>,
    /// Sessions by the /64 of their UE's IPv6 address ([`ipv6::prefix64`]).
    pub(crate) by_ue6: HashMap<u64, u64>,
    pub(crate) buffered_total: usize,
    pub(crate) transmits: VecDeque<Transmit>,
    pub(crate) reports: VecDeque<PlaneReport>,
    pub(crate) error_indications: TokenBucket,
    pub(crate) icmp_errors: TokenBucket,
    pub(crate) defrag: defrag::Defrag,
    pub(crate) gtpu_seq: u16,
    pub counters: Counters,
}

impl UserPlane {
    pub fn new(cfg: DatapathConfig, counters: Counters) -> Self {
        let r = f64::from(cfg.error_indications_per_sec.max(1));
        UserPlane {
            error_indications: TokenBucket::new(r, r),
            icmp_errors: TokenBucket::new(r, r),
            defrag: defrag::Defrag::new(defrag::DefragLimits {
                session_bytes: cfg.frag_session_bytes,
                total_bytes: cfg.frag_total_bytes,
                timeout: cfg.frag_timeout,
            }),
            cfg,
            sessions: HashMap::new(),
            by_teid: HashMap::new(),
            by_ue: HashMap::new(),
            by_ue6: HashMap::new(),
            buffered_total: 0,
            transmits: VecDeque::new(),
            reports: VecDeque::new(),
            gtpu_seq: 0,
            counters,
        }
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Octets buffered by one session, and in total.
    pub fn buffered(&self, up_seid: u64) -> (usize, usize) {
        (self.sessions.get(&up_seid).map_or(0, |s| s.buffer_bytes), self.buffered_total)
    }

    /// The (uplink, downlink) octets a URR counted since it was installed.
    pub fn usage(&self, up_seid: u64, urr_id: u32) -> Option<(u64, u64)> {
        self.sessions.get(&up_seid)?.usage.get(&urr_id).map(|u| (u.ul_octets, u.dl_octets))
    }

    /// A URR's cumulative counts (octets and packets by direction).
    pub fn urr_counts(&self, up_seid: u64, urr_id: u32) -> Option<crate::urr::UsageCounts> {
        self.sessions.get(&up_seid)?.usage.get(&urr_id).copied()
    }

    /// Checks that no other session owns the TEIDs or UE address.
    fn check_keys(&self, up_seid: u64, s: &SessionState) -> Result<(), PlaneError> {
        for t in &s.teids {
            if self.by_teid.get(t).is_some_and(|o| *o != up_seid) {
                return Err(PlaneError::Other(format!("TEID {t:#x} belongs to another session")));
            }
        }
        if let Some(ue) = s.ue_ip {
            if self.by_ue.get(&ue).is_some_and(|o| *o != up_seid) {
                return Err(PlaneError::Other(format!("UE address {ue} belongs to another session")));
            }
        }
        if let Some(ue) = s.ue_ip6 {
            if self.by_ue6.get(&ipv6::prefix64(ue)).is_some_and(|o| *o != up_seid) {
                return Err(PlaneError::Other(format!("UE prefix of {ue} belongs to another session")));
            }
        }
        Ok(())
    }

    fn index(&mut self, up_seid: u64) {
        let s = &self.sessions[&up_seid];
        for t in &s.teids {
            self.by_teid.insert(*t, up_seid);
        }
        if let Some(ue) = s.ue_ip {
            self.by_ue.insert(ue, up_seid);
        }
        if let Some(ue) = s.ue_ip6 {
            self.by_ue6.insert(ipv6::prefix64(ue), up_seid);
        }
    }

    /// Forgets the keys of `s` (a session's state as indexed) that point
    /// to `up_seid`: its own keys only, not a scan of every session.
    fn unindex(&mut self, up_seid: u64, s: &SessionState) {
        for t in &s.teids {
            if self.by_teid.get(t) == Some(&up_seid) {
                self.by_teid.remove(t);
            }
        }
        if let Some(ue) = s.ue_ip.filter(|ue| self.by_ue.get(ue) == Some(&up_seid)) {
            self.by_ue.remove(&ue);
        }
        if let Some(p) = s.ue_ip6.map(ipv6::prefix64).filter(|p| self.by_ue6.get(p) == Some(&up_seid)) {
            self.by_ue6.remove(&p);
        }
    }

    pub fn install(&mut self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        if self.sessions.contains_key(&up_seid) {
            return Err(PlaneError::Exists(up_seid));
        }
        let s = SessionState::new(rules);
        self.check_keys(up_seid, &s)?;
        self.sessions.insert(up_seid, s);
        self.index(up_seid);
        Ok(())
    }

    /// Whether [`UserPlane::update`] would take these rules (it changes
    /// nothing when it refuses).
    pub fn check_update(&self, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.sessions.get(&up_seid).ok_or(PlaneError::NotFound(up_seid))?;
        self.check_keys(up_seid, &SessionState::new(rules))
    }

    /// New rules for a session: End Markers on paths that change (TS 29.281
    /// 7.3.2, TS 23.401 5.3.3.1 step 13), then the buffer is released in
    /// order if its FARs now forward.
    pub fn update(&mut self, now: Instant, up_seid: u64, rules: &SessionRules) -> Result<(), PlaneError> {
        self.check_update(up_seid, rules)?;
        let s = &self.sessions[&up_seid];
        let old: Vec<GtpuTunnel> = s
            .rules
            .fars
            .values()
            .filter(|f| f.action.forw)
            .filter_map(|f| {
                let new = rules.fars.get(&f.id).filter(|n| n.action.forw).and_then(|n| n.outer_header_creation);
                f.outer_header_creation.filter(|o| new.is_some_and(|n| n != *o))
            })
            .collect();
        for t in old {
            self.counters.incr("gtpu_end_marker_sent");
            self.transmits.push_back(Transmit::Gtpu {
                to: SocketAddrV4::new(t.ipv4, mobicore_gtp::gtpu::PORT),
                bytes: mobicore_gtp::gtpu::end_marker(t.teid),
            });
        }
        let mut s = self.sessions.remove(&up_seid).expect("checked above");
        self.unindex(up_seid, &s);
        s.set_rules(rules);
        self.sessions.insert(up_seid, s);
        self.index(up_seid);
        self.release(now, up_seid);
        Ok(())
    }

    pub fn remove(&mut self, up_seid: u64) -> Result<(), PlaneError> {
        let s = self.sessions.remove(&up_seid).ok_or(PlaneError::NotFound(up_seid))?;
        self.buffered_total -= s.buffer_bytes;
        for _ in &s.buffer {
            self.counters.incr("upf_buffer_discarded");
        }
        for _ in 0..self.defrag.remove_session(up_seid) {
            self.counters.incr("upf_frag_discarded");
        }
        self.unindex(up_seid, &s);
        Ok(())
    }

    /// Octets of held fragments (with bookkeeping) of one session, and in
    /// total.
    pub fn fragments_held(&self, up_seid: u64) -> (usize, usize) {
        self.defrag.usage(up_seid)
    }

    /// When [`Self::handle_timeout`] next has work (held fragments to
    /// expire); memory stays within budget without it, as expiry also
    /// runs on each fragment.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.defrag.poll_timeout()
    }

    /// Drops fragments held past their time (`upf_frag_timeout`).
    pub fn handle_timeout(&mut self, now: Instant) {
        for _ in 0..self.defrag.expire(now) {
            self.counters.incr("upf_frag_timeout");
        }
    }

    /// Re-runs a session's buffered packets through the downlink pipeline,
    /// in arrival order; those still buffered go back in the same order.
    fn release(&mut self, now: Instant, up_seid: u64) {
        let Some(s) = self.sessions.get_mut(&up_seid) else { return };
        if s.buffer.is_empty() {
            return;
        }
        let held: Vec<(u16, Vec<u8>)> = s.buffer.drain(..).collect();
        self.buffered_total -= s.buffer_bytes;
        s.buffer_bytes = 0;
        for (pdr, p) in held {
            match self.downlink_inner(now, &p, Some(pdr)) {
                Verdict::Forwarded => self.counters.incr("upf_released"),
                Verdict::Buffered | Verdict::Held | Verdict::Control => {}
                Verdict::Dropped(r) => self.counters.incr(r.counter()),
            }
        }
        if let Some(s) = self.sessions.get_mut(&up_seid) {
            if s.buffer.is_empty() {
                s.dldr_sent = false;
            }
        }
    }

    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    #[must_use]
    pub fn poll_report(&mut self) -> Option<PlaneReport> {
        self.reports.pop_front()
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_dupl;
#[cfg(test)]
mod tests_frag;
#[cfg(test)]
pub(crate) mod tests_netns;
