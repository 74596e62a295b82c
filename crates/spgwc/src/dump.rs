//! Full-state dump and restore of the S/P-GW-C: its whole state copied
//! to a fresh instance, the stand-in for seed 000's whole-process "RAM
//! replication" baseline (CRIU cannot checkpoint on these machines; see
//! `mobicore bench relocation`). Not a 3GPP procedure: replication by
//! GTP-C replay needs none of this.
//!
//! A dump ([`SpgwcDump`], framed by [`mobicore_common::state_dump`]) holds
//! every session context exactly ([`Session`]: our S11 and S1-U F-TEIDs,
//! the MME's, CP and UP SEIDs, UE addresses, PCO, eNB F-TEID, usage,
//! paging state with its hold as time left), the pools' cursors, the UPF
//! identifiers still being released, our PFCP Node ID and Recovery Time
//! Stamp. The pools' addresses in use, the S1-U TEIDs in use and the
//! indexes by IMSI and SEID are rebuilt from the sessions.
//!
//! Not in it, by design: transactions (retransmissions, duplicate caches),
//! which is why a dump is only taken when nothing is in flight
//! ([`DumpError::Busy`]; the shell stops reading S11 until then); the
//! counters; the state of the random draw (the restored gateway draws its
//! own identifiers, never one in use).
//!
//! Restoring keeps the identity: the restoring gateway must have the
//! dump's Node ID and takes its Recovery Time Stamp, so that the UPF
//! restored beside it (which keeps its association) sees the same CP
//! function and keeps the sessions (TS 29.244 6.2.6.2.2). It must be fresh
//! (no session) and not started yet.

use crate::context::{Session, SessionState, UpIds};
use crate::core::SpgwcCore;
use mobicore_common::state_dump::{self, DumpKind, FrameError};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::{Instant, SystemTime};

/// The whole state of an S/P-GW-C (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpgwcDump {
    pub node_id: Ipv4Addr,
    pub pfcp_recovery: SystemTime,
    /// Every session, in the order of our S11 TEID.
    pub sessions: Vec<Session>,
    /// Paging holds: (our S11 TEID, microseconds from the dump until the
    /// hold ends, negative when already past).
    pub holds: Vec<(u32, i64)>,
    /// Per APN: the IPv4 and IPv6 pools' cursors.
    pub pool_cursors: BTreeMap<String, (Option<u32>, Option<u64>)>,
    /// UPF sessions being deleted: their identifiers stay reserved.
    pub draining: Vec<UpIds>,
    /// The UPF the next session goes to.
    pub next_upf: usize,
}

impl SpgwcDump {
    /// The dump as octets ([`state_dump`] framing).
    pub fn to_bytes(&self) -> Vec<u8> {
        state_dump::encode(DumpKind::Spgwc, self)
    }

    /// A dump from octets: errors, never panics, on any input.
    pub fn from_bytes(b: &[u8]) -> Result<Self, FrameError> {
        state_dump::decode(DumpKind::Spgwc, b)
    }
}

/// Why no dump can be taken now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    #[error(
        "procedures in flight ({pfcp} PFCP requests, {s11} S11 requests of ours, {sessions} sessions mid-procedure)"
    )]
    Busy { pfcp: usize, s11: usize, sessions: usize },
}

/// Why a dump cannot be restored here. Nothing is changed when restoring fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("this S/P-GW-C already runs: restore before it starts")]
    Started,
    #[error("this S/P-GW-C is not fresh: it holds {0} sessions or UPF identifiers")]
    NotFresh(usize),
    #[error("the dump is of Node ID {dumped}, this S/P-GW-C is {configured}: a full-state copy keeps its identity")]
    NodeId { dumped: Ipv4Addr, configured: Ipv4Addr },
    #[error("session {teid:#x}: APN {apn:?} is not configured here")]
    UnknownApn { teid: u32, apn: String },
    #[error("session {teid:#x}: UPF {upf} is not configured here")]
    UnknownUpf { teid: u32, upf: usize },
    #[error("session {teid:#x}: {what} is used twice")]
    Duplicate { teid: u32, what: &'static str },
    #[error("session {teid:#x}: its UE address {addr} is outside the pools here")]
    Address { teid: u32, addr: String },
    #[error("session {teid:#x} is mid-procedure: a dump is taken only when nothing is in flight")]
    InFlight { teid: u32 },
    #[error("UPF session {0:#x} being released: its identifiers clash or its UPF is not configured here")]
    Draining(u64),
    #[error("the pool cursor of APN {0:?} is outside its pool")]
    Cursor(String),
    #[error("a paging hold names session {0:#x}, which the dump does not hold")]
    Hold(u32),
}

impl SpgwcCore {
    /// What is in flight: PFCP requests, S11 requests of ours (Downlink
    /// Data Notifications), sessions in a procedure or with queued requests.
    fn in_flight(&self) -> (usize, usize, usize) {
        let mid = |s: &Session| s.state != SessionState::Active || !s.queued.is_empty() || s.paging.ddn_seq.is_some();
        (self.pfcp.outstanding(), self.s11.outstanding(), self.sessions.values().filter(|s| mid(s)).count())
    }

    /// Whether a dump can be taken now: nothing in flight, or what is.
    pub fn ready_to_dump(&self) -> Result<(), DumpError> {
        match self.in_flight() {
            (0, 0, 0) => Ok(()),
            (pfcp, s11, sessions) => Err(DumpError::Busy { pfcp, s11, sessions }),
        }
    }

    /// [`Self::ready_to_dump`] as a yes or no.
    pub fn quiescent(&self) -> bool {
        self.ready_to_dump().is_ok()
    }

    /// The whole state at `now` (see [`crate::dump`]).
    pub fn dump(&self, now: Instant) -> Result<SpgwcDump, DumpError> {
        self.ready_to_dump()?;
        let mut all: Vec<Session> = self.sessions.values().cloned().collect();
        all.sort_by_key(|s| s.sgw_s11.teid.0);
        let holds = all
            .iter()
            .filter_map(|s| s.paging.hold_until.map(|t| (s.sgw_s11.teid.0, state_dump::since(t, now))))
            .collect();
        let pool_cursors = self
            .pools
            .iter()
            .map(|(apn, p)| (apn.clone(), (p.ipv4.as_ref().map(|p| p.cursor()), p.ipv6.as_ref().map(|p| p.cursor()))))
            .collect();
        let mut draining: Vec<UpIds> = self.draining.values().copied().collect();
        draining.sort_by_key(|d| d.cp_seid);
        Ok(SpgwcDump {
            node_id: self.cfg.node_id,
            pfcp_recovery: self.pfcp_recovery,
            sessions: all,
            holds,
            pool_cursors,
            draining,
            next_upf: self.next_upf,
        })
    }

    /// Takes over the state of `d` at `now`: all of it, or nothing when
    /// it does not fit this gateway ([`RestoreError`]).
    pub fn restore(&mut self, now: Instant, d: SpgwcDump) -> Result<(), RestoreError> {
        if self.started {
            return Err(RestoreError::Started);
        }
        let held = self.sessions.len() + self.draining.len();
        if held > 0 {
            return Err(RestoreError::NotFresh(held));
        }
        if d.node_id != self.cfg.node_id {
            return Err(RestoreError::NodeId { dumped: d.node_id, configured: self.cfg.node_id });
        }
        // Everything is built aside and checked, then swapped in.
        let mut pools = self.pools.clone();
        let mut upfs = self.upfs.clone();
        let mut sessions = HashMap::with_capacity(d.sessions.len());
        let mut by_imsi = HashMap::with_capacity(d.sessions.len());
        let mut by_seid = HashMap::with_capacity(d.sessions.len());
        for mut s in d.sessions {
            let teid = s.sgw_s11.teid.0;
            if s.state != SessionState::Active || !s.queued.is_empty() || s.paging.ddn_seq.is_some() {
                return Err(RestoreError::InFlight { teid });
            }
            let pool = pools.get_mut(&s.apn).ok_or_else(|| RestoreError::UnknownApn { teid, apn: s.apn.clone() })?;
            let outside = |a: String| RestoreError::Address { teid, addr: a };
            if let Some(a) = s.ue_ipv4 {
                if !pool.ipv4.as_mut().ok_or_else(|| outside(a.to_string()))?.take(a) {
                    return Err(RestoreError::Duplicate { teid, what: "the UE IPv4 address" });
                }
            }
            if let Some(a) = s.ue_ipv6 {
                let p = pool.ipv6.as_mut().ok_or_else(|| outside(a.to_string()))?;
                if !p.take(a) {
                    return Err(if p.covers(a) {
                        RestoreError::Duplicate { teid, what: "the UE IPv6 prefix" }
                    } else {
                        outside(a.to_string())
                    });
                }
            }
            reserve(&mut upfs, s.up_ids()).map_err(|e| e.at(teid))?;
            if by_seid.insert(s.cp_seid, teid).is_some() {
                return Err(RestoreError::Duplicate { teid, what: "the CP SEID" });
            }
            if by_imsi.insert((s.imsi.clone(), s.ebi.0), teid).is_some() {
                return Err(RestoreError::Duplicate { teid, what: "the IMSI and EBI" });
            }
            s.paging.hold_until = None;
            if sessions.insert(teid, s).is_some() {
                return Err(RestoreError::Duplicate { teid, what: "the S11 TEID" });
            }
        }
        let mut draining = HashMap::with_capacity(d.draining.len());
        for ids in d.draining {
            let unique = !by_seid.contains_key(&ids.cp_seid) && draining.insert(ids.cp_seid, ids).is_none();
            if !unique || reserve(&mut upfs, ids).is_err() {
                return Err(RestoreError::Draining(ids.cp_seid));
            }
        }
        for (apn, (v4, v6)) in d.pool_cursors {
            let Some(p) = pools.get_mut(&apn) else { continue };
            let ok = v4.is_none_or(|c| p.ipv4.as_mut().is_some_and(|p| p.set_cursor(c)))
                && v6.is_none_or(|c| p.ipv6.as_mut().is_some_and(|p| p.set_cursor(c)));
            if !ok {
                return Err(RestoreError::Cursor(apn));
            }
        }
        let mut holds = Vec::with_capacity(d.holds.len());
        for (teid, us) in d.holds {
            let s = sessions.get_mut(&teid).ok_or(RestoreError::Hold(teid))?;
            let t = state_dump::at(us, now);
            s.paging.hold_until = Some(t);
            holds.push(Reverse((t, teid)));
        }
        self.sessions = sessions;
        self.by_imsi = by_imsi;
        self.by_seid = by_seid;
        self.draining = draining;
        self.pools = pools;
        self.upfs = upfs;
        self.paging_holds = holds.into();
        self.next_upf = if self.upfs.is_empty() { 0 } else { d.next_upf % self.upfs.len() };
        self.pfcp_recovery = d.pfcp_recovery;
        self.counters.add("sessions_restored", self.sessions.len() as u64);
        Ok(())
    }
}

/// Why a session's UPF identifiers cannot be reserved.
enum Reserve {
    Upf(usize),
    Teid,
}

impl Reserve {
    fn at(self, teid: u32) -> RestoreError {
        match self {
            Reserve::Upf(upf) => RestoreError::UnknownUpf { teid, upf },
            Reserve::Teid => RestoreError::Duplicate { teid, what: "an S1-U TEID" },
        }
    }
}

/// Marks a session's S1-U TEIDs in use on its UPF.
fn reserve(upfs: &mut [crate::context::UpfState], ids: UpIds) -> Result<(), Reserve> {
    let u = upfs.get_mut(ids.upf).ok_or(Reserve::Upf(ids.upf))?;
    let mut seen = HashSet::new();
    for t in std::iter::once(ids.s1u_teid).chain(ids.forwarding_teid) {
        if !seen.insert(t) || !u.s1u_in_use.insert(t) {
            return Err(Reserve::Teid);
        }
    }
    Ok(())
}
