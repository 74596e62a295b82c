//! S/P-GW-C state: per-UE sessions keyed by our S11 TEID, and the IPv4
//! pools per APN.

use crate::config::ApnConfig;
use mobicore_common::{Ambr, Ebi, Fteid, Imsi};
use std::collections::{BTreeSet, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Where a procedure stands for one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// PFCP Session Establishment sent, Create Session Response pending.
    Creating,
    Active,
    /// A PFCP modification or deletion is in flight.
    Busy,
}

/// The S11 request a session owes an answer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct S11Pending {
    pub peer: SocketAddr,
    pub seq: u32,
}

/// One PDN connection (default bearer only).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub ue_ipv4: Ipv4Addr,
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
        UpIds { upf: self.upf, s1u_teid: self.s1u_sgw.teid.0, cp_seid: self.cp_seid }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpIds {
    /// Index of the UPF in the configuration.
    pub upf: usize,
    pub s1u_teid: u32,
    pub cp_seid: u64,
}

/// A sequential IPv4 pool (deterministic: lowest free address first after
/// the last one handed out, released addresses reused after wrap).
#[derive(Debug, Clone)]
pub struct Pool {
    first: u32,
    size: u32,
    next: u32,
    used: BTreeSet<u32>,
}

impl Pool {
    pub fn new(cfg: &ApnConfig) -> Self {
        let prefix = cfg.prefix_len.min(30);
        let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
        let net = u32::from(cfg.pool) & mask;
        let size = (!mask).saturating_sub(1); // no network / broadcast address
        Pool { first: net + 1, size, next: 0, used: BTreeSet::new() }
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

    pub fn release(&mut self, a: Ipv4Addr) {
        self.used.remove(&u32::from(a).wrapping_sub(self.first));
    }

    pub fn in_use(&self) -> usize {
        self.used.len()
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
        let mut p = Pool::new(&ApnConfig { name: "x".into(), pool: Ipv4Addr::new(10, 0, 0, 0), prefix_len: 30 });
        assert_eq!(p.allocate(), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(p.allocate(), Some(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(p.allocate(), None);
        p.release(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.allocate(), Some(Ipv4Addr::new(10, 0, 0, 1)));
    }
}
