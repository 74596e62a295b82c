//! The PFCP node's side of usage reporting: URR IEs of session requests
//! into the [`super::UsageEngine`], its reports into Usage Report IEs
//! (Session Modification Response: Query URR, QAURR, Remove URR; Session
//! Deletion Response: every URR; Session Report Request: triggers), and
//! exhausted quotas into the plane's effective rules.

use super::pfcp::{apply_update, grouped_urr_id, missing_conditional, urr_from_create, usage_report_ie};
use super::{effective_rules, Regrant, UsageEvent};
use crate::node::UpfCore;
use crate::pfcp::{all, first, IeRef};
use crate::rules::{RuleRef, SessionRules, Urr};
use crate::session::{Reject, SESSION_REPORT_REQUEST};
use rs_pfcp::ie::cause::CauseValue;
use rs_pfcp::ie::create_urr::CreateUrr;
use rs_pfcp::ie::pfcpsm_req_flags::PfcpsmReqFlags;
use rs_pfcp::ie::report_type::ReportType;
use rs_pfcp::ie::update_urr::UpdateUrr;
use rs_pfcp::ie::{Ie, IeType};
use std::sync::Arc;
use std::time::Instant;

/// A Create URR IE (TS 29.244 7.5.2.4); a trigger without the IE it needs
/// is a Conditional IE missing.
pub(crate) fn create_urr(payload: &[u8]) -> Result<Urr, Reject> {
    let c = CreateUrr::unmarshal(payload).map_err(|e| Reject::decode(e, IeType::CreateUrr))?;
    let u = urr_from_create(&c, payload);
    check(&u)?;
    Ok(u)
}

fn check(u: &Urr) -> Result<(), Reject> {
    match missing_conditional(u) {
        Some(t) => Err(Reject {
            cause: CauseValue::ConditionalIeMissing,
            offending: Some(t as u16),
            failed_rule: Some(RuleRef::Urr(u.id)),
        }),
        None => Ok(()),
    }
}

/// The usage side of one Session Modification Request, checked before
/// anything is applied.
pub(crate) struct UsagePlan {
    /// Update URR: the URR and which quotas it granted.
    updates: Vec<(u32, Regrant)>,
    /// Query URR, or every URR for QAURR (TS 29.244 7.5.4.1).
    queries: Vec<u32>,
    /// Query URR Reference (TS 29.244 7.5.4.1-1), echoed in the reports.
    reference: Option<u32>,
}

/// Applies the Update URR IEs to `rules` (after removals and creations,
/// TS 29.244 7.5.4.1) and reads Query URR / PFCPSMReq-Flags QAURR.
pub(crate) fn plan(old: &SessionRules, rules: &mut SessionRules, ies: &[IeRef]) -> Result<UsagePlan, Reject> {
    let mut updates = vec![];
    for ie in all(ies, IeType::UpdateUrr) {
        let u = UpdateUrr::unmarshal(ie.payload).map_err(|e| Reject::decode(e, IeType::UpdateUrr))?;
        let urr = rules.urrs.get_mut(&u.urr_id.id).ok_or(Reject::rule(RuleRef::Urr(u.urr_id.id)))?;
        let regrant = apply_update(&u, ie.payload, urr);
        check(urr)?;
        updates.push((u.urr_id.id, regrant));
    }
    let mut queries = vec![];
    for ie in all(ies, IeType::QueryUrr) {
        let id = grouped_urr_id(ie.payload, IeType::QueryUrr).map_err(|e| Reject::decode(e, IeType::QueryUrr))?;
        if !old.urrs.contains_key(&id) {
            return Err(Reject::rule(RuleRef::Urr(id)));
        }
        queries.push(id);
    }
    let qaurr = first(ies, IeType::PfcpsmReqFlags)
        .and_then(|f| PfcpsmReqFlags::unmarshal(f.payload).ok())
        .is_some_and(|f| f.contains(PfcpsmReqFlags::QAURR));
    if qaurr {
        queries = old.urrs.keys().copied().collect();
    }
    // Removed URRs get their final report instead.
    queries.retain(|id| rules.urrs.contains_key(id));
    queries.sort_unstable();
    queries.dedup();
    let reference = first(ies, IeType::QueryUrrReference)
        .and_then(|r| r.payload.get(..4))
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    Ok(UsagePlan { updates, queries, reference })
}

/// Remove URR (TS 29.244 7.5.4.7), in either encoding.
pub(crate) fn removed_urr_id(payload: &[u8]) -> Result<u32, Reject> {
    grouped_urr_id(payload, IeType::RemoveUrr).map_err(|e| Reject::decode(e, IeType::RemoveUrr))
}

impl UpfCore {
    /// A new session's URRs start measuring.
    pub(crate) fn usage_established(&mut self, now: Instant, up_seid: u64, rules: &SessionRules) {
        for u in rules.urrs.values() {
            let c = self.plane.usage(up_seid, u.id);
            self.usage.install(now, up_seid, u, c);
        }
    }

    /// Before the plane gets a modification's rules: the final reports of
    /// removed URRs (TERMR) and the immediate reports asked for (IMMER),
    /// as Usage Report IEs of the response (TS 29.244 7.5.5.2); the new
    /// parameters of updated URRs.
    pub(crate) fn usage_before_update(
        &mut self,
        now: Instant,
        up_seid: u64,
        old: &SessionRules,
        new: &SessionRules,
        plan: &UsagePlan,
    ) -> Vec<Ie> {
        let mut out = vec![];
        let removed = old.urrs.keys().filter(|id| !new.urrs.contains_key(id));
        for &id in removed {
            let c = self.plane.usage(up_seid, id);
            if let Some(r) = self.usage.remove(now, up_seid, id, c) {
                out.push(usage_report_ie(&r, IeType::UsageReportWithinSessionModificationResponse, &self.clock));
            }
        }
        for &id in &plan.queries {
            let c = self.plane.usage(up_seid, id);
            if let Some(r) = self.usage.query(now, up_seid, id, c, plan.reference) {
                out.push(usage_report_ie(&r, IeType::UsageReportWithinSessionModificationResponse, &self.clock));
            }
        }
        for &(id, regrant) in &plan.updates {
            if let Some(u) = new.urrs.get(&id) {
                let c = self.plane.usage(up_seid, id);
                self.usage.update(now, up_seid, u, regrant, c);
            }
        }
        out
    }

    /// After the plane has a modification's rules: created URRs start
    /// measuring from the plane's counts.
    pub(crate) fn usage_after_update(&mut self, now: Instant, up_seid: u64, old: &SessionRules, new: &SessionRules) {
        for u in new.urrs.values().filter(|u| !old.urrs.contains_key(&u.id)) {
            let c = self.plane.usage(up_seid, u.id);
            self.usage.install(now, up_seid, u, c);
        }
    }

    /// The rules the plane must get for `rules` given the exhausted quotas,
    /// and those URRs.
    pub(crate) fn effective(&self, up_seid: u64, rules: &Arc<SessionRules>) -> (Arc<SessionRules>, Vec<u32>) {
        let blocked = self.usage.exhausted(up_seid);
        (effective_rules(rules, &blocked), blocked)
    }

    /// The final reports of a session being deleted (TS 29.244 7.5.7.2),
    /// read from the plane before it forgets the session.
    pub(crate) fn usage_deleted(&mut self, now: Instant, up_seid: u64) -> Vec<Ie> {
        let plane = &self.plane;
        let reports = self.usage.remove_session(now, up_seid, |id| plane.usage(up_seid, id));
        reports
            .iter()
            .map(|r| usage_report_ie(r, IeType::UsageReportWithinSessionDeletionResponse, &self.clock))
            .collect()
    }

    /// The engine's output: reports become Session Report Requests (USAR),
    /// quota changes new effective rules (TS 29.244 5.2.2.2).
    pub(crate) fn drain_usage_events(&mut self, now: Instant) {
        while let Some(e) = self.usage.poll_event() {
            match e {
                UsageEvent::Report { up_seid, usage } => {
                    let ies = vec![
                        ReportType::usage_report().to_ie(),
                        usage_report_ie(&usage, IeType::UsageReportWithinSessionReportRequest, &self.clock),
                    ];
                    self.send_session_report(now, up_seid, &ies, "pfcp_session_report_usar_sent");
                }
                UsageEvent::Quota { up_seid, exhausted, .. } => {
                    if exhausted {
                        self.counters.incr("upf_quota_exhausted");
                    }
                    self.enforce_quota(up_seid);
                }
            }
        }
    }

    /// Gives the plane the session's effective rules if the set of
    /// exhausted URRs changed.
    fn enforce_quota(&mut self, up_seid: u64) {
        let Some(s) = self.sessions.get(&up_seid) else { return };
        let (eff, blocked) = self.effective(up_seid, &s.rules);
        if blocked == s.blocked {
            return;
        }
        if self.plane.update_shared(up_seid, &eff).is_err() {
            self.counters.incr("upf_quota_enforcement_failed");
            return;
        }
        if let Some(s) = self.sessions.get_mut(&up_seid) {
            s.blocked = blocked;
        }
    }

    /// A Session Report Request towards the session's CP function (TS
    /// 29.244 7.5.8), retransmitted until answered.
    pub(crate) fn send_session_report(&mut self, now: Instant, up_seid: u64, ies: &[Ie], counter: &'static str) {
        let Some(s) = self.sessions.get(&up_seid) else {
            self.counters.incr("pfcp_report_for_unknown_session");
            return;
        };
        let Some(peer) = self.associations.get(&s.node).map(|a| a.peer) else {
            self.counters.incr("pfcp_report_without_association");
            return;
        };
        let seq = self.tx.next_seq();
        let b = crate::pfcp::encode(SESSION_REPORT_REQUEST, Some(s.cp_seid), seq, ies);
        self.tx.send_request(now, peer, seq, b, crate::node::Outgoing::SessionReport);
        self.counters.incr(counter);
    }
}
