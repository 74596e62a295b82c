//! Usage reporting (TS 29.244 5.2.2, 7.5.2.4, 7.5.4.4, 7.5.8.3): one
//! implementation for every data path.
//!
//! The forwarding planes only count: each keeps CUMULATIVE octets and
//! packets per (UP SEID, URR ID), uplink and downlink, for what it
//! forwarded (user space in `dataplane`, the XDP fast path in per-CPU
//! maps, the two summed behind XDP). [`UsageEngine`] reads those counts
//! ([`crate::ForwardingPlane::usage`]) and decides everything else:
//! measurement since the last report, thresholds, quotas, duration,
//! periodic reports, report sequence numbers, and which URRs' quotas are
//! exhausted. The PFCP node ([`crate::UpfCore`]) drives it and turns its
//! output into Usage Report IEs (Session Report Request, Session
//! Modification / Deletion Response).
//!
//! # Layout
//! - this file: the values ([`UsageCounts`], [`UrrTriggers`],
//!   [`UsageTrigger`], [`UsageMeasurement`]) and the quota enforcement by
//!   effective rules ([`effective_rules`]).
//! - `meter`: one URR's measurement (volume, duration with inactivity
//!   detection, quotas, what is due at an instant).
//! - `engine`: [`UsageEngine`], every URR of the node, the sampling tick
//!   and the time-trigger deadlines (sans-I/O: `now` in, reports out,
//!   [`UsageEngine::poll_timeout`]).
//! - `pfcp`: Create / Update URR into [`crate::rules::Urr`], Usage Report
//!   IEs, NTP time stamps, grouped URR IDs (Query URR, Remove URR).
//! - `node`: the PFCP node's side (session establishment / modification /
//!   deletion hooks, Session Report Requests, quota enforcement).
//!
//! # Semantics chosen where the specification leaves room
//! - Counts are read by sampling every `urr_poll` (default 1 s), and only
//!   for URRs that need it (a volume threshold with VOLTH, a volume quota,
//!   an Inactivity Detection Time, a Quota Holding Time): a threshold or
//!   quota is seen up to one interval late, and traffic of that interval
//!   still passes. Time triggers (TIMTH, TIMQU, PERIO) are deadlines.
//! - Thresholds apply to the measurement since the last report; quotas to
//!   the usage since the quota was granted (Create URR, or an Update URR
//!   carrying a Volume / Time Quota), across intermediate reports.
//! - Every report (any trigger, including IMMER for Query URR) closes the
//!   measurement: the next one starts at zero with UR-SEQN + 1.
//! - Duration (DURAT) without an Inactivity Detection Time is the time
//!   since the measurement started. With one, time runs from a sampled
//!   activity for as long as the next activity follows within the
//!   Inactivity Detection Time; a longer gap is not counted (5.2.2.3.1).
//! - An exhausted volume or time quota stops forwarding for every PDR that
//!   uses the URR (5.2.2.2): the plane gets effective rules in which those
//!   PDRs point to [`QUOTA_DROP_FAR`], until an Update URR grants quota.
//!   The report is sent only if VOLQU / TIMQU is enabled; the stop is not
//!   conditional.

mod engine;
mod meter;
pub(crate) mod node;
pub(crate) mod pfcp;

pub use engine::{UsageEngine, UsageEvent};
pub use meter::{MeterState, Regrant};
pub use pfcp::WallClock;

use crate::rules::{Action, SessionRules};
use std::sync::Arc;
use std::time::Instant;

/// Cumulative counts of one URR in a forwarding plane (octets of the inner
/// IP packets, and packets), by direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct UsageCounts {
    pub ul_octets: u64,
    pub dl_octets: u64,
    pub ul_packets: u64,
    pub dl_packets: u64,
}

impl UsageCounts {
    /// One packet of `octets`. Saturating: a count never wraps back to a
    /// small value (which [`Self::since`] would read as a restart).
    pub fn add(&mut self, uplink: bool, octets: u64) {
        if uplink {
            self.ul_octets = self.ul_octets.saturating_add(octets);
            self.ul_packets = self.ul_packets.saturating_add(1);
        } else {
            self.dl_octets = self.dl_octets.saturating_add(octets);
            self.dl_packets = self.dl_packets.saturating_add(1);
        }
    }
    pub fn total_octets(&self) -> u64 {
        self.ul_octets.saturating_add(self.dl_octets)
    }
    /// Component-wise saturating sum (the slow path plus the fast path).
    pub fn saturating_sum(self, o: Self) -> Self {
        UsageCounts {
            ul_octets: self.ul_octets.saturating_add(o.ul_octets),
            dl_octets: self.dl_octets.saturating_add(o.dl_octets),
            ul_packets: self.ul_packets.saturating_add(o.ul_packets),
            dl_packets: self.dl_packets.saturating_add(o.dl_packets),
        }
    }
    /// What was counted from `last` to `self`; a component that went back
    /// means its counter restarted from zero (a re-created map slot), so it
    /// counts in full.
    pub fn since(self, last: Self) -> Self {
        let d = |n: u64, l: u64| if n >= l { n - l } else { n };
        UsageCounts {
            ul_octets: d(self.ul_octets, last.ul_octets),
            dl_octets: d(self.dl_octets, last.dl_octets),
            ul_packets: d(self.ul_packets, last.ul_packets),
            dl_packets: d(self.dl_packets, last.dl_packets),
        }
    }
    pub fn is_zero(&self) -> bool {
        *self == UsageCounts::default()
    }
}

/// The Reporting Triggers the CP function enabled (TS 29.244 8.2.19), the
/// ones we act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct UrrTriggers {
    pub perio: bool,
    pub volth: bool,
    pub timth: bool,
    pub quhti: bool,
    pub volqu: bool,
    pub timqu: bool,
}

/// Usage Report Trigger bits (TS 29.244 8.2.41): bit `n` is bit `n % 8`
/// of octet `5 + n / 8`. A report may carry several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct UsageTrigger(pub u32);

impl UsageTrigger {
    pub const PERIO: UsageTrigger = UsageTrigger(1 << 0);
    pub const VOLTH: UsageTrigger = UsageTrigger(1 << 1);
    pub const TIMTH: UsageTrigger = UsageTrigger(1 << 2);
    pub const QUHTI: UsageTrigger = UsageTrigger(1 << 3);
    pub const IMMER: UsageTrigger = UsageTrigger(1 << 7);
    pub const VOLQU: UsageTrigger = UsageTrigger(1 << 8);
    pub const TIMQU: UsageTrigger = UsageTrigger(1 << 9);
    pub const TERMR: UsageTrigger = UsageTrigger(1 << 11);

    pub fn contains(self, t: UsageTrigger) -> bool {
        self.0 & t.0 == t.0 && t.0 != 0
    }
    pub fn insert(&mut self, t: UsageTrigger) {
        self.0 |= t.0;
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for UsageTrigger {
    type Output = UsageTrigger;
    fn bitor(self, o: Self) -> Self {
        UsageTrigger(self.0 | o.0)
    }
}

/// One URR's measurement since its last report (TS 29.244 7.5.8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageMeasurement {
    pub urr_id: u32,
    /// UR-SEQN: per URR, from 0 (TS 29.244 8.2.42).
    pub seqn: u32,
    pub trigger: UsageTrigger,
    /// Measurement Method of the URR: Volume Measurement and Duration
    /// Measurement are included only for what it measures.
    pub volume: bool,
    pub duration: bool,
    pub uplink_octets: u64,
    pub downlink_octets: u64,
    pub uplink_packets: u64,
    pub downlink_packets: u64,
    pub duration_secs: u32,
    /// Start Time / End Time of the measurement (TS 29.244 8.2.48, 8.2.49).
    pub start: Instant,
    pub end: Instant,
    /// Query URR Reference of the request that asked (TS 29.244 8.2.127).
    pub query_reference: Option<u32>,
}

/// The FAR ID the PDRs of an exhausted quota point to in the effective
/// rules. It has the "predefined" bit (TS 29.244 8.2.74), so it never
/// collides with a FAR the CP function creates dynamically.
pub const QUOTA_DROP_FAR: u32 = u32::MAX;

/// The rules the forwarding plane gets: `rules` itself when no quota is
/// exhausted, else a copy in which every PDR using an exhausted URR points
/// to the DROP FAR [`QUOTA_DROP_FAR`] (TS 29.244 5.2.2.2).
pub fn effective_rules(rules: &Arc<SessionRules>, exhausted: &[u32]) -> Arc<SessionRules> {
    let hit = |ids: &[u32]| ids.iter().any(|u| exhausted.contains(u));
    if !rules.pdrs.values().any(|p| hit(&p.urr_ids)) {
        return rules.clone();
    }
    let mut r = SessionRules::clone(rules);
    for p in r.pdrs.values_mut().filter(|p| hit(&p.urr_ids)) {
        p.far_id = Some(QUOTA_DROP_FAR);
    }
    // A copy of one of the session's FARs (robust to fields added to Far),
    // turned into a plain DROP.
    if let Some(mut f) = r.fars.values().next().cloned() {
        f.id = QUOTA_DROP_FAR;
        f.action = Action { drop: true, ..Action::default() };
        f.destination_interface = None;
        f.network_instance = None;
        f.outer_header_creation = None;
        f.bar_id = None;
        r.fars.insert(QUOTA_DROP_FAR, f);
    }
    Arc::new(r)
}

#[cfg(test)]
mod tests;
