//! S/P-GW-C state: per-UE sessions keyed by our S11 TEID, and the IPv4
//! and IPv6 pools per APN.

use crate::config::{ApnConfig, Ipv6Pool};
use mobicore_common::s11::GtpCause;
use mobicore_common::{Ambr, Arp, Ebi, Fteid, Imsi, PdnType};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Where a procedure stands for one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionState {
    /// PFCP Session Establishment sent, Create Session Response pending.
    Creating,
    Active,
    /// A PFCP modification or deletion is in flight.
    Busy,
}

/// The S11 request a session owes an answer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct S11Pending {
    pub peer: SocketAddr,
    pub seq: u32,
}

/// One PDN connection (default bearer only). Serializable for the
/// full-state dump ([`crate::dump`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub imsi: Imsi,
    pub apn: String,
    pub state: SessionState,
    /// Our S11 F-TEID (the key of the session table).
    pub sgw_s11: Fteid,
    /// The MME's S11 F-TEID (Sender F-TEID of the Create Session Request).
    pub mme_s11: Fteid,
    /// The address the Create Session Request came from. Only it and the
    /// address of `mme_s11` may address this session (TS 29.274 5.5.2:
    /// the MME's context, reached on our TEID).
    pub created_by: IpAddr,
    /// The PDN type granted and the cause it was granted with (Request
    /// accepted, or New PDN type due to network preference / single
    /// address bearers only, TS 29.274 8.4).
    pub pdn_type: PdnType,
    pub cause: GtpCause,
    pub ue_ipv4: Option<Ipv4Addr>,
    /// The UE's /64 with the interface identifier it is given in the low
    /// 64 bits (TS 29.274 8.14, TS 24.301 9.9.4.9).
    pub ue_ipv6: Option<Ipv6Addr>,
    /// Charging ID of the default bearer (TS 29.274 8.29): unique among
    /// live bearers, being the session's S11 TEID.
    pub charging_id: u32,
    /// PCO for the UE in the Create Session Response (None when the UE
    /// sent none), and whether it goes as ePCO.
    pub pco: Option<Vec<u8>>,
    pub epco: bool,
    pub ebi: Ebi,
    pub apn_ambr: Ambr,
    /// S1-U SGW F-TEID (allocated from the UPF's range, the UPF's address).
    pub s1u_sgw: Fteid,
    /// S1-U eNB F-TEID once Modify Bearer gave it; None while idle.
    pub s1u_enb: Option<Fteid>,
    /// Index of the UPF in the configuration.
    pub upf: usize,
    pub cp_seid: u64,
    pub up_seid: Option<u64>,
    /// S11 requests that arrived while another procedure of this session
    /// was in flight, served in arrival order once it ends (an MME may send
    /// Delete Session before the Modify Bearer Response came back); at
    /// most `max_queued_per_session`.
    pub queued: std::collections::VecDeque<(S11Pending, mobicore_common::s11::S11Request)>,
    /// What the UPF reported this PDN connection carried.
    pub usage: crate::sxa_build::Usage,
    /// ARP of the default bearer (sent in a Downlink Data Notification).
    pub arp: Arp,
    /// Where the MME's requests for this session come from (the socket of
    /// its S11 F-TEID's address): Downlink Data Notifications go there.
    pub mme_s11_addr: SocketAddr,
    /// The network-triggered service request in progress (TS 23.401 5.3.4.3).
    pub paging: Paging,
    /// The indirect data forwarding tunnel of an S1 handover (TS 23.401
    /// 5.5.1.2.2): our F-TEID for DL data forwarding, and the target eNB's.
    pub forwarding: Option<(Fteid, Fteid)>,
}

/// Where a session's downlink data notification stands (TS 23.401 5.3.4.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paging {
    /// Sequence number of the Downlink Data Notification awaiting its
    /// Acknowledge: at most one per session.
    pub ddn_seq: Option<u32>,
    /// No Downlink Data Notification before this (the Ack's Data
    /// Notification Delay or DL Buffering Duration, or the mobility guard).
    /// A dump carries it as time left ([`crate::dump::SpgwcDump::holds`]).
    #[serde(skip)]
    pub hold_until: Option<std::time::Instant>,
    /// Downlink data was reported while held: notify when the hold ends.
    pub report_pending: bool,
    /// The buffer is discarded when the hold ends (DL Buffering Duration
    /// or the guard of "temporarily rejected" passed without a Modify Bearer).
    pub discard_at_hold_end: bool,
}

impl Session {
    /// Whether a request from `ip` may address this session: the MME that
    /// created it (its F-TEID address or the source of its request).
    pub fn owned_by(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip == IpAddr::V4(self.mme_s11.ipv4) || ip == self.created_by
    }

    /// The identifiers this session holds on its UPF.
    pub fn up_ids(&self) -> UpIds {
        UpIds {
            upf: self.upf,
            s1u_teid: self.s1u_sgw.teid.0,
            cp_seid: self.cp_seid,
            forwarding_teid: self.forwarding.map(|(f, _)| f.teid.0),
        }
    }
}

/// An IPv4-mapped IPv6 address (as a dual-stack socket reports an IPv4
/// peer) as its IPv4 address; others unchanged.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// What a session holds on a UPF until the UPF has let go of it: its S1-U
/// TEID and our CP SEID there (neither is handed out again before).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpIds {
    /// Index of the UPF in the configuration.
    pub upf: usize,
    pub s1u_teid: u32,
    pub cp_seid: u64,
    /// The S1-U TEID of an indirect forwarding tunnel, if one exists.
    pub forwarding_teid: Option<u32>,
}

/// A sequential IPv4 pool (deterministic: lowest free address first after
/// the last one handed out, released addresses reused after wrap). Static
/// addresses (TS 29.274 7.2.1 PAA) are taken out of it when inside it, and
/// held apart when outside, so that no address is given twice.
#[derive(Debug, Clone)]
pub struct Pool {
    first: u32,
    size: u32,
    next: u32,
    used: BTreeSet<u32>,
    statics: HashSet<Ipv4Addr>,
}

impl Pool {
    pub fn new(pool: Ipv4Addr, prefix_len: u8) -> Self {
        let prefix = prefix_len.min(30);
        let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
        let net = u32::from(pool) & mask;
        let size = (!mask).saturating_sub(1); // no network / broadcast address
        Pool { first: net + 1, size, next: 0, used: BTreeSet::new(), statics: HashSet::new() }
    }

    fn offset(&self, a: Ipv4Addr) -> Option<u32> {
        Some(u32::from(a).wrapping_sub(self.first)).filter(|o| *o < self.size)
    }

    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        if self.used.len() as u32 >= self.size {
            return None;
        }
        loop {
            let off = self.next;
            self.next = (self.next + 1) % self.size;
            if self.used.insert(off) {
                return Some(Ipv4Addr::from(self.first + off));
            }
        }
    }

    /// Whether `a` is handed out (from the pool or as a static address).
    pub fn holds(&self, a: Ipv4Addr) -> bool {
        match self.offset(a) {
            Some(o) => self.used.contains(&o),
            None => self.statics.contains(&a),
        }
    }

    /// Takes the static address `a`; false if it is in use.
    pub fn take(&mut self, a: Ipv4Addr) -> bool {
        match self.offset(a) {
            Some(o) => self.used.insert(o),
            None => self.statics.insert(a),
        }
    }

    pub fn release(&mut self, a: Ipv4Addr) {
        match self.offset(a) {
            Some(o) => self.used.remove(&o),
            None => self.statics.remove(&a),
        };
    }

    pub fn in_use(&self) -> usize {
        self.used.len() + self.statics.len()
    }

    /// Where the next allocation starts looking (an offset into the pool).
    pub fn cursor(&self) -> u32 {
        self.next
    }

    /// Moves the cursor (a restored dump); false when outside the pool.
    pub fn set_cursor(&mut self, c: u32) -> bool {
        let ok = c < self.size;
        if ok {
            self.next = c;
        }
        ok
    }
}

/// The UE's interface identifier inside its /64 (TS 23.401 5.3.1.2.2: the
/// PDN GW gives it; the prefix is the UE's alone, so any fixed one is unique).
pub const UE_INTERFACE_ID: u128 = 1;

/// A pool of /64 prefixes (TS 23.401 5.3.1.2.2), handed out in order like
/// [`Pool`].
#[derive(Debug, Clone)]
pub struct Pool6 {
    base: u128,
    size: u64,
    next: u64,
    used: BTreeSet<u64>,
}

impl Pool6 {
    pub fn new(p: &Ipv6Pool) -> Self {
        let len = u32::from(p.len.min(64));
        let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
        let size = if len == 0 { u64::MAX } else { (1u128 << (64 - len)).min(u128::from(u64::MAX)) as u64 };
        Pool6 { base: u128::from(p.prefix) & mask, size, next: 0, used: BTreeSet::new() }
    }

    /// A free /64, as the address the UE is given in it (prefix and
    /// interface identifier).
    pub fn allocate(&mut self) -> Option<Ipv6Addr> {
        if self.used.len() as u64 >= self.size {
            return None;
        }
        loop {
            let off = self.next;
            self.next = if self.next + 1 >= self.size { 0 } else { self.next + 1 };
            if self.used.insert(off) {
                return Some(Ipv6Addr::from(self.base | (u128::from(off) << 64) | UE_INTERFACE_ID));
            }
        }
    }

    pub fn release(&mut self, a: Ipv6Addr) {
        if let Some(off) = self.offset(a) {
            self.used.remove(&off);
        }
    }

    /// The offset of `a`'s /64 in the pool, if it is one of the pool's.
    fn offset(&self, a: Ipv6Addr) -> Option<u64> {
        let off = (u128::from(a) >> 64).wrapping_sub(self.base >> 64);
        u64::try_from(off).ok().filter(|o| *o < self.size)
    }

    /// Whether `a` lies in one of the pool's /64s.
    pub fn covers(&self, a: Ipv6Addr) -> bool {
        self.offset(a).is_some()
    }

    /// Takes the /64 of `a` (a restored session's); false when it is not
    /// the pool's or already in use.
    pub fn take(&mut self, a: Ipv6Addr) -> bool {
        self.offset(a).is_some_and(|o| self.used.insert(o))
    }

    pub fn in_use(&self) -> usize {
        self.used.len()
    }

    /// See [`Pool::cursor`].
    pub fn cursor(&self) -> u64 {
        self.next
    }

    /// See [`Pool::set_cursor`].
    pub fn set_cursor(&mut self, c: u64) -> bool {
        let ok = c < self.size;
        if ok {
            self.next = c;
        }
        ok
    }
}

/// The pools of one APN.
#[derive(Debug, Clone)]
pub struct ApnPools {
    pub ipv4: Option<Pool>,
    pub ipv6: Option<Pool6>,
}

impl ApnPools {
    pub fn new(cfg: &ApnConfig) -> Self {
        ApnPools { ipv4: cfg.pool.map(|p| Pool::new(p, cfg.prefix_len)), ipv6: cfg.ipv6_pool.as_ref().map(Pool6::new) }
    }

    /// Gives a session's addresses back.
    pub fn release(&mut self, v4: Option<Ipv4Addr>, v6: Option<Ipv6Addr>) {
        if let (Some(p), Some(a)) = (self.ipv4.as_mut(), v4) {
            p.release(a);
        }
        if let (Some(p), Some(a)) = (self.ipv6.as_mut(), v6) {
            p.release(a);
        }
    }

    pub fn in_use(&self) -> usize {
        self.ipv4.as_ref().map_or(0, Pool::in_use) + self.ipv6.as_ref().map_or(0, Pool6::in_use)
    }
}

/// Our side of one PFCP association.
#[derive(Debug, Clone)]
pub struct UpfState {
    pub associated: bool,
    /// A setup or heartbeat request is outstanding.
    pub probing: bool,
    /// S1-U TEIDs of this node held by a session (live, or being deleted
    /// on the UPF).
    pub s1u_in_use: HashSet<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_allocates_in_order_and_exhausts() {
        let mut p = Pool::new(Ipv4Addr::new(10, 0, 0, 0), 30);
        assert_eq!(p.allocate(), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(p.allocate(), Some(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(p.allocate(), None);
        p.release(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.allocate(), Some(Ipv4Addr::new(10, 0, 0, 1)));
    }

    #[test]
    fn static_addresses_are_taken_once_inside_or_outside_the_pool() {
        let mut p = Pool::new(Ipv4Addr::new(10, 0, 0, 0), 29);
        assert!(p.take(Ipv4Addr::new(10, 0, 0, 1)));
        assert!(!p.take(Ipv4Addr::new(10, 0, 0, 1)), "in use");
        assert_eq!(p.allocate(), Some(Ipv4Addr::new(10, 0, 0, 2)), "never handed out dynamically");
        // Outside the pool: held apart, and its release frees no pool address.
        let outside = Ipv4Addr::new(10, 0, 0, 10);
        assert!(p.take(outside) && !p.take(outside) && p.holds(outside));
        p.release(outside);
        assert!(!p.holds(outside) && p.holds(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(p.in_use(), 2);
    }

    #[test]
    fn ipv6_pool_hands_out_64s_with_an_interface_id() {
        let cfg: Ipv6Pool = "2001:db8:45::/63".to_string().try_into().unwrap();
        let mut p = Pool6::new(&cfg);
        let a = p.allocate().unwrap();
        let b = p.allocate().unwrap();
        assert_eq!(a, "2001:db8:45::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(b, "2001:db8:45:1::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.allocate(), None);
        p.release(a);
        assert_eq!(p.allocate(), Some(a));
        assert!(Ipv6Pool::try_from("2001:db8::/80".to_string()).is_err());
    }
}
