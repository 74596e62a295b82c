//! MEC router sessions (issue 12; `[upf] role = "mec"`): one PFCP session
//! per traffic rule (ETSI GS MEC 011 TrafficRule) or per UE downlink
//! tunnel, encoded as [`mobicore_pfcp::mec`] says and recognised by its MEC
//! Match IE; established, replaced by a modification, deleted like any
//! session, from the node's associated CP functions (the controller);
//! installed with [`crate::ForwardingPlane::install_mec`].
//!
//! Answers (TS 29.244 7.2.2.4.2): missing or inconsistent pieces,
//! "Mandatory IE missing" / "Mandatory IE incorrect" with the Offending
//! IE; a rule overlapping another session's rule of the same slice and
//! priority (MEC 011 orders rules by priority only), a second tunnel for
//! one UE address, or one the fast path's tables cannot hold, "Rule
//! creation/modification failure" naming PDR 1; beyond
//! `max_mec_sessions`, "No resources available"; another role or a data
//! path without the MEC program, "Service not supported". Nothing changes
//! on a refusal, and no other session is touched. A state dump
//! (`crate::dump`) carries them.

use crate::node::{Reply, UpfCore};
use crate::pfcp::IeRef;
use crate::rules::{MecSession, PlaneError, RuleRef};
use crate::session::Reject;
use mobicore_pfcp::mec::{decode_mec, MecRule, TrafficFilter};
use rs_pfcp::ie::cause::CauseValue;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};

/// The rule sessions of one (slice, priority): those whose every filter
/// names one exact destination, by destination, and the others; a new
/// exact rule is checked against its destinations' rules and the wide
/// ones only (120,000 exact rules at one priority stay cheap).
#[derive(Debug, Default)]
struct Bucket {
    by_dst: HashMap<Ipv4Addr, Vec<u64>>,
    wide: Vec<u64>,
}

/// Every filter's destination, when all are exact.
fn exact_dsts(r: &MecRule) -> Option<Vec<Ipv4Addr>> {
    r.filters.iter().map(|f| f.dst.filter(|(_, len)| *len == 32).map(|(a, _)| a)).collect()
}

impl Bucket {
    fn candidates(&self, r: &MecRule) -> Vec<u64> {
        match exact_dsts(r) {
            Some(dsts) => {
                let mut v: Vec<u64> =
                    dsts.iter().filter_map(|d| self.by_dst.get(d)).flatten().chain(&self.wide).copied().collect();
                v.sort_unstable();
                v.dedup();
                v
            }
            None => self.by_dst.values().flatten().chain(&self.wide).copied().collect(),
        }
    }

    fn insert(&mut self, seid: u64, r: &MecRule) {
        match exact_dsts(r) {
            Some(dsts) => dsts.into_iter().for_each(|d| self.by_dst.entry(d).or_default().push(seid)),
            None => self.wide.push(seid),
        }
    }

    fn remove(&mut self, seid: u64, r: &MecRule) {
        match exact_dsts(r) {
            Some(dsts) => {
                for d in dsts {
                    if let Some(v) = self.by_dst.get_mut(&d) {
                        v.retain(|x| *x != seid);
                        if v.is_empty() {
                            self.by_dst.remove(&d);
                        }
                    }
                }
            }
            None => self.wide.retain(|x| *x != seid),
        }
    }

    fn is_empty(&self) -> bool {
        self.by_dst.is_empty() && self.wide.is_empty()
    }
}

/// The MEC sessions, indexed for the overlap checks.
#[derive(Debug, Default)]
pub(crate) struct MecSessions {
    by_seid: HashMap<u64, MecSession>,
    /// (slice interface, VLAN, priority) -> rule sessions.
    by_priority: HashMap<(String, u16, u8), Bucket>,
    /// UE address -> tunnel session.
    ues: HashMap<Ipv4Addr, u64>,
}

fn prio_key(r: &MecRule) -> (String, u16, u8) {
    (r.slice.interface.clone(), r.slice.vlan, r.priority)
}

fn prefix_overlap(a: Option<(Ipv4Addr, u8)>, b: Option<(Ipv4Addr, u8)>) -> bool {
    match (a, b) {
        (Some((x, l)), Some((y, m))) => {
            let len = l.min(m).min(32);
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            u32::from(x) & mask == u32::from(y) & mask
        }
        _ => true,
    }
}

fn both<T: PartialEq + Copy>(a: Option<T>, b: Option<T>, f: impl Fn(T, T) -> bool) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => f(x, y),
        _ => true,
    }
}

/// Whether one packet can match both filters (as written).
pub(crate) fn filters_overlap(a: &TrafficFilter, b: &TrafficFilter) -> bool {
    let ports = |x: (u16, u16), y: (u16, u16)| x.0.max(y.0) <= x.1.min(y.1);
    prefix_overlap(a.src, b.src)
        && prefix_overlap(a.dst, b.dst)
        && both(a.src_ports, b.src_ports, ports)
        && both(a.dst_ports, b.dst_ports, ports)
        && both(a.protocol, b.protocol, |x, y| x == y)
        && both(a.dscp, b.dscp, |x, y| x == y)
        && both(a.teid, b.teid, |x, y| x == y)
        && both(a.enb, b.enb, |x, y| x == y)
}

impl MecSessions {
    pub(crate) fn len(&self) -> usize {
        self.by_seid.len()
    }

    pub(crate) fn contains(&self, seid: u64) -> bool {
        self.by_seid.contains_key(&seid)
    }

    pub(crate) fn get(&self, seid: u64) -> Option<&MecSession> {
        self.by_seid.get(&seid)
    }

    /// The other session whose match `s` would share.
    fn clash(&self, s: &MecSession, except: Option<u64>) -> Option<u64> {
        match s {
            MecSession::Ue(u) => self.ues.get(&u.ue).copied().filter(|o| Some(*o) != except),
            MecSession::Rule(r) => {
                let others = self.by_priority.get(&prio_key(r)).map(|b| b.candidates(r)).unwrap_or_default();
                others.into_iter().filter(|o| Some(*o) != except).find(|o| match self.by_seid.get(o) {
                    Some(MecSession::Rule(x)) => {
                        x.filters.iter().any(|a| r.filters.iter().any(|b| filters_overlap(a, b)))
                    }
                    _ => false,
                })
            }
        }
    }

    pub(crate) fn insert(&mut self, seid: u64, s: MecSession) {
        self.remove(seid);
        match &s {
            MecSession::Ue(u) => {
                self.ues.insert(u.ue, seid);
            }
            MecSession::Rule(r) => self.by_priority.entry(prio_key(r)).or_default().insert(seid, r),
        }
        self.by_seid.insert(seid, s);
    }

    pub(crate) fn remove(&mut self, seid: u64) -> bool {
        let Some(s) = self.by_seid.remove(&seid) else { return false };
        match s {
            MecSession::Ue(u) => {
                self.ues.remove(&u.ue);
            }
            MecSession::Rule(r) => {
                if let Some(b) = self.by_priority.get_mut(&prio_key(&r)) {
                    b.remove(seid, &r);
                    if b.is_empty() {
                        self.by_priority.remove(&prio_key(&r));
                    }
                }
            }
        }
        true
    }
}

impl UpfCore {
    /// The MEC session of a request, if this node can take it: role,
    /// decoding, action, bound (establishment only), overlap.
    fn mec_of(&self, raw: &[IeRef], replacing: Option<u64>) -> Result<MecSession, Reject> {
        if self.cfg.role != crate::config::UpfRole::Mec {
            self.counters.incr("pfcp_mec_refused_role");
            return Err(Reject::cause(CauseValue::ServiceNotSupported));
        }
        let s = decode_mec(raw).map_err(|b| {
            self.counters.incr("pfcp_mec_bad_session");
            Reject { cause: b.cause(), offending: Some(b.ie_type), failed_rule: None }
        })?;
        if replacing.is_none() && self.mec.len() >= self.cfg.max_mec_sessions {
            self.counters.incr("pfcp_mec_over_max_sessions");
            return Err(Reject::cause(CauseValue::NoResourcesAvailable));
        }
        if self.mec.clash(&s, replacing).is_some() {
            self.counters.incr("pfcp_mec_overlapping_rule");
            return Err(Reject::rule(RuleRef::Pdr(1)));
        }
        Ok(s)
    }

    fn mec_plane_reject(&self, e: PlaneError) -> Reject {
        match e {
            PlaneError::MecUnsupported => {
                self.counters.incr("pfcp_mec_unsupported_datapath");
                Reject::cause(CauseValue::ServiceNotSupported)
            }
            e => {
                tracing::warn!(error = %e, "mec: the data path refused a session");
                self.counters.incr("pfcp_mec_refused_by_datapath");
                Reject::rule(RuleRef::Pdr(1))
            }
        }
    }

    /// A Session Establishment Request carrying a MEC session (TS 29.244
    /// 7.5.2): `ies` as the node reads any request, `raw` with the
    /// enterprise IEs.
    pub(crate) fn mec_establishment(&mut self, peer: SocketAddr, ies: &[IeRef], raw: &[IeRef]) -> Reply {
        let prepare = |core: &Self| core.mec_of(raw, None);
        self.role_establishment(peer, ies, prepare, |core, up_seid, s| {
            core.plane.install_mec(up_seid, &s).map_err(|e| core.mec_plane_reject(e))?;
            tracing::info!(up_seid, session = ?s, "mec: session established");
            core.mec.insert(up_seid, s);
            core.counters.incr("pfcp_mec_sessions_established");
            Ok(None)
        })
    }

    /// A Session Modification Request of a MEC session (TS 29.244 7.5.4):
    /// the rule or tunnel it carries replaces the session's.
    pub(crate) fn mec_modification(&mut self, up_seid: u64, raw: &[IeRef]) -> Reply {
        self.role_modification(up_seid, |core| {
            let s = core.mec_of(raw, Some(up_seid))?;
            core.plane.install_mec(up_seid, &s).map_err(|e| core.mec_plane_reject(e))?;
            core.mec.insert(up_seid, s);
            core.counters.incr("pfcp_mec_sessions_modified");
            Ok(())
        })
    }

    /// The installed MEC sessions (tests, diagnostics).
    pub fn mec_sessions(&self) -> HashMap<u64, MecSession> {
        self.mec.by_seid.clone()
    }
}
