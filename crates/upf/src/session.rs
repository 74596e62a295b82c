//! PFCP session procedures on the UP function (TS 29.244 6.3, 7.5):
//! establishment, modification and deletion, with the causes of 7.2.2.4.
//! The URR side of each (Create / Update / Remove / Query URR, usage
//! reports in responses and Session Report Requests) is in
//! `crate::urr::node`.

use crate::node::{Reply, Session, UpfCore};
use crate::pfcp::{all, cause_ie, first, group_view, grouped_id, msg, offending_ie_ie, IeRef};
use crate::rules::{
    gtpu_tunnel, offending_ie, Action, Bar, Duplicate, DuplicateError, Far, Pdr, PlaneReport, Qer, RuleError, RuleRef,
    SessionRules,
};
use mobicore_common::counters::Counters;
use rs_pfcp::error::PfcpError;
use rs_pfcp::ie::cause::CauseValue;
use rs_pfcp::ie::create_bar::CreateBar;
use rs_pfcp::ie::create_far::CreateFar;
use rs_pfcp::ie::create_pdr::CreatePdr;
use rs_pfcp::ie::create_qer::CreateQer;
use rs_pfcp::ie::created_pdr::CreatedPdr;
use rs_pfcp::ie::f_teid::Fteid;
use rs_pfcp::ie::failed_rule_id::FailedRuleId;
use rs_pfcp::ie::fseid::Fseid;
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::pdr_id::PdrId;
use rs_pfcp::ie::precedence::Precedence;
use rs_pfcp::ie::update_bar::UpdateBar;
use rs_pfcp::ie::update_far::UpdateFar;
use rs_pfcp::ie::update_pdr::UpdatePdr;
use rs_pfcp::ie::update_qer::UpdateQer;
use rs_pfcp::ie::{Ie, IeType};

/// A rejection: cause, and the offending IE or failed rule to report.
pub(crate) struct Reject {
    pub(crate) cause: CauseValue,
    pub(crate) offending: Option<u16>,
    pub(crate) failed_rule: Option<RuleRef>,
}

impl Reject {
    pub(crate) fn cause(cause: CauseValue) -> Self {
        Reject { cause, offending: None, failed_rule: None }
    }
    fn missing(t: IeType) -> Self {
        Reject { cause: CauseValue::MandatoryIeMissing, offending: Some(t as u16), failed_rule: None }
    }
    pub(crate) fn decode(e: PfcpError, group: IeType) -> Self {
        Reject {
            cause: e.to_cause_code(),
            offending: Some(offending_ie(&e).unwrap_or(group as u16)),
            failed_rule: None,
        }
    }
    pub(crate) fn rule(r: RuleRef) -> Self {
        Reject { cause: CauseValue::RuleCreationModificationFailure, offending: None, failed_rule: Some(r) }
    }
    fn rules(e: RuleError) -> Self {
        match e {
            RuleError::Rule(r) => Reject::rule(r),
            RuleError::ConditionalIeMissing(t) => {
                Reject { cause: CauseValue::ConditionalIeMissing, offending: Some(t), failed_rule: None }
            }
        }
    }
    pub(crate) fn ies(&self) -> Vec<Ie> {
        let mut v = vec![cause_ie(self.cause)];
        if let Some(o) = self.offending {
            v.push(offending_ie_ie(o));
        }
        let failed = match self.failed_rule {
            Some(RuleRef::Pdr(i)) => Some(FailedRuleId::pdr(i)),
            Some(RuleRef::Far(i)) => Some(FailedRuleId::far(i)),
            Some(RuleRef::Qer(i)) => Some(FailedRuleId::qer(i)),
            Some(RuleRef::Urr(i)) => Some(FailedRuleId::urr(i)),
            // rs-pfcp 0.5 has no BAR kind of Failed Rule ID (TS 29.244 8.2.80).
            Some(RuleRef::Bar(_)) | None => None,
        };
        if let Some(f) = failed {
            v.push(Ie::new(IeType::FailedRuleId, f.marshal()));
        }
        v
    }
}

/// A Duplicating Parameters IE that does not decode is answered like any
/// other IE; one we cannot act on fails its FAR.
fn dupl_reject(e: DuplicateError, far: u32) -> Reject {
    match e {
        DuplicateError::Decode(e) => Reject::decode(e, IeType::DuplicatingParameters),
        DuplicateError::Unsupported => Reject::rule(RuleRef::Far(far)),
    }
}

fn parse_each<T>(ies: &[IeRef], t: IeType, f: impl Fn(&[u8]) -> Result<T, PfcpError>) -> Result<Vec<T>, Reject> {
    all(ies, t).map(|ie| f(ie.payload).map_err(|e| Reject::decode(e, t))).collect()
}

/// A Create PDR's value with `default` as its Precedence when it has none
/// (`[upf] default_pdr_precedence`: SGW-Cs leave it out on Sxa, TS 29.244
/// 7.5.2.2), counted; unchanged otherwise (also when it does not read: the
/// decoder judges that).
fn with_precedence<'a>(pdr: &'a [u8], default: u32, counters: &Counters) -> std::borrow::Cow<'a, [u8]> {
    match group_view(pdr) {
        Ok(children) if first(&children, IeType::Precedence).is_none() => {
            counters.incr("pfcp_pdr_without_precedence");
            let mut v = pdr.to_vec();
            Precedence::new(default).to_ie().marshal_into(&mut v);
            v.into()
        }
        _ => pdr.into(),
    }
}

/// The rule ID inside a Remove PDR/FAR/QER/BAR IE (a group holding the ID
/// IE, TS 29.244 7.5.4.6-9; also the bare value rs-pfcp writes).
fn removed_id(payload: &[u8], child: IeType, width: usize) -> Result<u32, Reject> {
    let b = grouped_id(payload, child, width).ok_or(Reject::missing(child))?;
    Ok(b.iter().fold(0u32, |v, x| (v << 8) | u32::from(*x)))
}

/// Adds the rules of Create PDR/FAR/QER/URR/BAR IEs; an ID in use is a
/// rule creation failure. A Create PDR without Precedence gets
/// `default_precedence`.
fn create_rules(
    rules: &mut SessionRules,
    ies: &[IeRef],
    default_precedence: u32,
    counters: &Counters,
) -> Result<(), Reject> {
    for ie in all(ies, IeType::CreateFar) {
        let c = CreateFar::unmarshal(ie.payload).map_err(|e| Reject::decode(e, IeType::CreateFar))?;
        let mut f = Far::from_ie(&c);
        // rs-pfcp keeps one Duplicating Parameters without its Outer
        // Header Creation: read them all from the IE (TS 29.244 7.5.2.3-3).
        f.duplicating = Duplicate::all_in(ie.payload).map_err(|e| dupl_reject(e, f.id))?;
        if rules.fars.insert(f.id, f).is_some() {
            return Err(Reject::rule(RuleRef::Far(c.far_id.value)));
        }
    }
    for c in parse_each(ies, IeType::CreateQer, CreateQer::unmarshal)? {
        if rules.qers.insert(c.qer_id.value, Qer::from_ie(&c)).is_some() {
            return Err(Reject::rule(RuleRef::Qer(c.qer_id.value)));
        }
    }
    for ie in all(ies, IeType::CreateUrr) {
        let u = crate::urr::node::create_urr(ie.payload)?;
        let id = u.id;
        if rules.urrs.insert(id, u).is_some() {
            return Err(Reject::rule(RuleRef::Urr(id)));
        }
    }
    for c in parse_each(ies, IeType::CreateBar, CreateBar::unmarshal)? {
        if rules.bars.insert(c.bar_id.id, Bar::from_ie(&c)).is_some() {
            return Err(Reject::rule(RuleRef::Bar(c.bar_id.id)));
        }
    }
    for ie in all(ies, IeType::CreatePdr) {
        let payload = with_precedence(ie.payload, default_precedence, counters);
        let c = CreatePdr::unmarshal(&payload).map_err(|e| Reject::decode(e, IeType::CreatePdr))?;
        if rules.pdrs.insert(c.pdr_id.value, Pdr::from_ie(&c)).is_some() {
            return Err(Reject::rule(RuleRef::Pdr(c.pdr_id.value)));
        }
    }
    Ok(())
}

impl UpfCore {
    /// PDRs asking for CHOOSE get an F-TEID from us (TS 29.244 5.5.3),
    /// drawn at random and never one in use (by any session, or by another
    /// PDR of these rules); returns the Created PDR IEs, or "No resources
    /// available" when every TEID is taken.
    fn allocate_fteids(&mut self, rules: &mut SessionRules) -> Result<Vec<Ie>, Reject> {
        let mut created = vec![];
        let mut taken: std::collections::HashSet<u32> =
            rules.pdrs.values().filter_map(|p| p.pdi.local_fteid.map(|f| f.0)).collect();
        for p in rules.pdrs.values_mut().filter(|p| p.pdi.choose_fteid && p.pdi.local_fteid.is_none()) {
            let teids = &self.teids;
            let teid = self
                .ids
                .draw_u32(1..=u32::MAX, |t| teids.contains_key(&t) || taken.contains(&t))
                .ok_or(Reject::cause(CauseValue::NoResourcesAvailable))?;
            taken.insert(teid);
            p.pdi.local_fteid = Some((teid, self.cfg.s1u_addr));
            let mut c = CreatedPdr::new(PdrId::new(p.id));
            c.f_teid = Some(Fteid::new(true, false, teid, Some(self.cfg.s1u_addr), None, 0));
            created.push(c.to_ie());
        }
        Ok(created)
    }

    /// Session Establishment (TS 29.244 7.5.2, 7.5.3).
    pub(crate) fn session_establishment(
        &mut self,
        now: std::time::Instant,
        peer: std::net::SocketAddr,
        ies: &[IeRef],
    ) -> Reply {
        let resp = msg::SESSION_ESTABLISHMENT_RESPONSE;
        let cp_fseid = first(ies, IeType::Fseid).and_then(|i| Fseid::unmarshal(i.payload).ok());
        // TS 29.244 7.2.2.4.2: SEID 0 when the CP F-SEID could not be read.
        let seid = Some(cp_fseid.as_ref().map_or(0, |f| u64::from(f.seid)));
        match self.establish(now, peer, ies, cp_fseid) {
            Ok(mut ok) => {
                ok.insert(0, self.node_id_ie());
                (resp, seid, ok)
            }
            Err(r) => {
                let mut v = vec![self.node_id_ie()];
                v.extend(r.ies());
                (resp, seid, v)
            }
        }
    }

    /// Nothing is installed, allocated or counted against a bound until
    /// every check has passed; a rejected request leaves no trace.
    fn establish(
        &mut self,
        now: std::time::Instant,
        peer: std::net::SocketAddr,
        ies: &[IeRef],
        cp_fseid: Option<Fseid>,
    ) -> Result<Vec<Ie>, Reject> {
        let (node, cp_fseid) = self.establishment_checks(peer, ies, cp_fseid)?;
        let mut rules = SessionRules::default();
        create_rules(&mut rules, ies, self.cfg.default_pdr_precedence, &self.counters)?;
        rules.check().map_err(Reject::rules)?;
        let created = self.allocate_fteids(&mut rules)?;
        let up_seid = self.draw_up_seid()?;
        let rules = std::sync::Arc::new(rules);
        self.plane.install_shared(up_seid, &rules).map_err(|_| Reject::cause(CauseValue::SystemFailure))?;
        self.track_teids(&rules, true);
        self.usage_established(now, up_seid, &rules);
        let session = Session { up_seid, cp_seid: cp_fseid.seid.into(), node, rules, blocked: vec![], diversion: None };
        let mut out = self.session_added(session);
        out.extend(created);
        Ok(out)
    }

    /// TS 29.244 5.6.2: the UP function allocates the SEID; drawn at
    /// random so that a peer cannot guess another session's.
    pub(crate) fn draw_up_seid(&mut self) -> Result<u64, Reject> {
        let sessions = &self.sessions;
        self.ids
            .draw(1..=u64::MAX, |s| sessions.contains_key(&s))
            .ok_or(Reject::cause(CauseValue::NoResourcesAvailable))
    }

    /// Records an installed session; the accepting answer's Cause and UP F-SEID.
    pub(crate) fn session_added(&mut self, s: Session) -> Vec<Ie> {
        let up_seid = s.up_seid;
        if let Some(a) = self.associations.get_mut(&s.node) {
            a.sessions += 1;
        }
        self.sessions.insert(up_seid, s);
        self.counters.incr("pfcp_sessions_established");
        let mut out = vec![cause_ie(CauseValue::RequestAccepted)];
        out.push(Ie::new(IeType::Fseid, Fseid::new(up_seid, Some(self.cfg.node_id), None).marshal()));
        out
    }

    /// A Session Establishment Request of a role's own session (steering,
    /// MEC; TS 29.244 7.5.2): the checks of every establishment, then
    /// `prepare` (decoding, bounds, overlap: nothing changes on a
    /// refusal), a UP SEID, then `install` into the plane and the role's
    /// tables, which gives the session's diversion if it is one.
    pub(crate) fn role_establishment<T>(
        &mut self,
        peer: std::net::SocketAddr,
        ies: &[IeRef],
        prepare: impl FnOnce(&Self) -> Result<T, Reject>,
        install: impl FnOnce(&mut Self, u64, T) -> Result<Option<crate::rules::Diversion>, Reject>,
    ) -> Reply {
        let cp_fseid = first(ies, IeType::Fseid).and_then(|i| Fseid::unmarshal(i.payload).ok());
        let seid = Some(cp_fseid.as_ref().map_or(0, |f| u64::from(f.seid)));
        let mut out = vec![self.node_id_ie()];
        let res = (|| -> Result<Vec<Ie>, Reject> {
            let (node, cp_fseid) = self.establishment_checks(peer, ies, cp_fseid)?;
            let t = prepare(self)?;
            let up_seid = self.draw_up_seid()?;
            let diversion = install(self, up_seid, t)?;
            let rules = std::sync::Arc::new(SessionRules::default());
            let s = Session { up_seid, cp_seid: cp_fseid.seid.into(), node, rules, blocked: vec![], diversion };
            Ok(self.session_added(s))
        })();
        match res {
            Ok(ok) => out.extend(ok),
            Err(r) => out.extend(r.ies()),
        }
        (msg::SESSION_ESTABLISHMENT_RESPONSE, seid, out)
    }

    /// A Session Modification Request of a role's own session (TS 29.244
    /// 7.5.4): `apply` replaces what the session carries, or refuses.
    pub(crate) fn role_modification(
        &mut self,
        up_seid: u64,
        apply: impl FnOnce(&mut Self) -> Result<(), Reject>,
    ) -> Reply {
        let resp = msg::SESSION_MODIFICATION_RESPONSE;
        let Some(cp_seid) = self.sessions.get(&up_seid).map(|s| s.cp_seid) else {
            return (resp, Some(0), vec![cause_ie(CauseValue::SessionContextNotFound)]);
        };
        match apply(self) {
            Ok(()) => (resp, Some(cp_seid), vec![cause_ie(CauseValue::RequestAccepted)]),
            Err(r) => (resp, Some(cp_seid), r.ies()),
        }
    }

    /// The checks of every Session Establishment Request (TS 29.244 6.3.2,
    /// 7.5.2): mandatory IEs, the association, the CP F-SEID, the bound;
    /// the CP function's Node ID (as text) and F-SEID.
    pub(crate) fn establishment_checks(
        &mut self,
        peer: std::net::SocketAddr,
        ies: &[IeRef],
        cp_fseid: Option<Fseid>,
    ) -> Result<(String, Fseid), Reject> {
        let node_ie = first(ies, IeType::NodeId).ok_or(Reject::missing(IeType::NodeId))?;
        let node = NodeId::unmarshal(node_ie.payload).map_err(|e| Reject::decode(e, IeType::NodeId))?;
        let fseid_ie = first(ies, IeType::Fseid).ok_or(Reject::missing(IeType::Fseid))?;
        let cp_fseid = cp_fseid.ok_or(Reject {
            cause: CauseValue::MandatoryIeIncorrect,
            offending: Some(fseid_ie.ie_type as u16),
            failed_rule: None,
        })?;
        if first(ies, IeType::CreatePdr).is_none() {
            return Err(Reject::missing(IeType::CreatePdr));
        }
        if first(ies, IeType::CreateFar).is_none() {
            return Err(Reject::missing(IeType::CreateFar));
        }
        let node = crate::pfcp::node_id_text(&node);
        // TS 29.244 6.3.2: only a CP function with an association, and the
        // Node ID is that of the association the request comes from.
        let Some(assoc) = self.association_of(&node, peer.ip()) else {
            self.counters.incr("pfcp_session_establishment_from_unassociated_peer");
            return Err(Reject::cause(CauseValue::NoEstablishedPfcpAssociation));
        };
        // The CP F-SEID's address is where the session is controlled from:
        // one of the association's configured addresses.
        let fseid_ok =
            [cp_fseid.ipv4_address.map(std::net::IpAddr::V4), cp_fseid.ipv6_address.map(std::net::IpAddr::V6)]
                .into_iter()
                .flatten()
                .all(|a| assoc.addrs.permits(a));
        if !fseid_ok {
            self.counters.incr("pfcp_session_establishment_fseid_outside_association");
            return Err(Reject {
                cause: CauseValue::MandatoryIeIncorrect,
                offending: Some(IeType::Fseid as u16),
                failed_rule: None,
            });
        }
        if assoc.sessions >= self.cfg.max_sessions_per_association {
            self.counters.incr("pfcp_session_establishment_over_max_sessions");
            return Err(Reject::cause(CauseValue::NoResourcesAvailable));
        }
        Ok((node, cp_fseid))
    }

    /// Session Modification (TS 29.244 7.5.4, 7.5.5).
    /// Usage: Update URR, Query URR, QAURR and Remove URR through
    /// `crate::urr::node` (reports in the response, TS 29.244 7.5.5.2); the
    /// plane gets the effective rules (exhausted quotas enforced).
    pub(crate) fn session_modification(&mut self, now: std::time::Instant, up_seid: u64, ies: &[IeRef]) -> Reply {
        let resp = msg::SESSION_MODIFICATION_RESPONSE;
        let Some(s) = self.sessions.get(&up_seid) else {
            return (resp, Some(0), vec![cause_ie(CauseValue::SessionContextNotFound)]);
        };
        let cp_seid = s.cp_seid;
        // A new CP F-SEID (TS 29.244 7.5.4.1) stays within the association's addresses.
        let fseid = first(ies, IeType::Fseid).and_then(|i| Fseid::unmarshal(i.payload).ok());
        let addrs = self.associations.get(&s.node).map(|a| &a.addrs);
        let fseid_ok = fseid.as_ref().is_none_or(|f| {
            [f.ipv4_address.map(std::net::IpAddr::V4), f.ipv6_address.map(std::net::IpAddr::V6)]
                .into_iter()
                .flatten()
                .all(|a| addrs.is_some_and(|p| p.permits(a)))
        });
        if !fseid_ok {
            self.counters.incr("pfcp_session_modification_fseid_outside_association");
            return (
                resp,
                Some(cp_seid),
                Reject {
                    cause: CauseValue::MandatoryIeIncorrect,
                    offending: Some(IeType::Fseid as u16),
                    failed_rule: None,
                }
                .ies(),
            );
        }
        let old = s.rules.clone();
        let mut rules = SessionRules::clone(&s.rules);
        let checked =
            self.modify(&mut rules, ies).and_then(|c| Ok((c, crate::urr::node::plan(&old, &mut rules, ies)?)));
        match checked {
            Ok((created, plan)) => {
                let reports = self.usage_before_update(now, up_seid, &old, &rules, &plan);
                let rules = std::sync::Arc::new(rules);
                let (eff, blocked) = self.effective(up_seid, &rules);
                if self.plane.update_shared(up_seid, &eff).is_err() {
                    return (resp, Some(cp_seid), vec![cause_ie(CauseValue::SystemFailure)]);
                }
                self.usage_after_update(now, up_seid, &old, &rules);
                self.track_teids(&old, false);
                self.track_teids(&rules, true);
                let s = self.sessions.get_mut(&up_seid).expect("checked above");
                s.rules = rules;
                s.blocked = blocked;
                if let Some(f) = fseid {
                    s.cp_seid = f.seid.into();
                }
                self.drain_usage_events(now);
                let mut out = vec![cause_ie(CauseValue::RequestAccepted)];
                out.extend(created);
                out.extend(reports);
                (resp, Some(cp_seid), out)
            }
            Err(r) => (resp, Some(cp_seid), r.ies()),
        }
    }

    fn modify(&mut self, rules: &mut SessionRules, ies: &[IeRef]) -> Result<Vec<Ie>, Reject> {
        // Removals first, then creations, then updates (TS 29.244 7.5.4.1).
        for ie in all(ies, IeType::RemovePdr) {
            let id = removed_id(ie.payload, IeType::PdrId, 2)? as u16;
            rules.pdrs.remove(&id).ok_or(Reject::rule(RuleRef::Pdr(id)))?;
        }
        for ie in all(ies, IeType::RemoveFar) {
            let id = removed_id(ie.payload, IeType::FarId, 4)?;
            rules.fars.remove(&id).ok_or(Reject::rule(RuleRef::Far(id)))?;
        }
        for ie in all(ies, IeType::RemoveQer) {
            let id = removed_id(ie.payload, IeType::QerId, 4)?;
            rules.qers.remove(&id).ok_or(Reject::rule(RuleRef::Qer(id)))?;
        }
        for ie in all(ies, IeType::RemoveUrr) {
            let id = crate::urr::node::removed_urr_id(ie.payload)?;
            rules.urrs.remove(&id).ok_or(Reject::rule(RuleRef::Urr(id)))?;
        }
        for ie in all(ies, IeType::RemoveBar) {
            let id = removed_id(ie.payload, IeType::BarId, 1)? as u8;
            rules.bars.remove(&id).ok_or(Reject::rule(RuleRef::Bar(id)))?;
        }
        create_rules(rules, ies, self.cfg.default_pdr_precedence, &self.counters)?;
        for u in parse_each(ies, IeType::UpdatePdr, UpdatePdr::unmarshal)? {
            let p = rules.pdrs.get_mut(&u.pdr_id.value).ok_or(Reject::rule(RuleRef::Pdr(u.pdr_id.value)))?;
            if let Some(x) = u.precedence {
                p.precedence = x.value;
            }
            if let Some(x) = &u.pdi {
                p.pdi = crate::rules::PacketDetection::from_pdi(x);
            }
            if let Some(x) = u.outer_header_removal {
                p.outer_header_removal = Some(x.description);
            }
            if let Some(x) = u.far_id {
                p.far_id = Some(x.value);
            }
            if !u.qer_ids.is_empty() {
                p.qer_ids = u.qer_ids.iter().map(|q| q.value).collect();
            }
            if !u.urr_ids.is_empty() {
                p.urr_ids = u.urr_ids.iter().map(|q| q.id).collect();
            }
        }
        for ie in all(ies, IeType::UpdateFar) {
            let u = UpdateFar::unmarshal(ie.payload).map_err(|e| Reject::decode(e, IeType::UpdateFar))?;
            let f = rules.fars.get_mut(&u.far_id.value).ok_or(Reject::rule(RuleRef::Far(u.far_id.value)))?;
            // TS 29.244 7.5.4.3-3: Update Duplicating Parameters.
            Duplicate::update_in(ie.payload, &mut f.duplicating).map_err(|e| dupl_reject(e, f.id))?;
            if let Some(a) = &u.apply_action {
                f.action = Action::from_ie(a);
            }
            if let Some(fp) = &u.update_forwarding_parameters {
                if let Some(d) = &fp.destination_interface {
                    f.destination_interface = Some(d.interface as u8);
                }
                if let Some(n) = &fp.network_instance {
                    f.network_instance = Some(crate::rules::network_instance_text(n.instance.as_bytes()));
                }
                if let Some(o) = &fp.outer_header_creation {
                    f.outer_header_creation = Some(gtpu_tunnel(o).ok_or(Reject::rule(RuleRef::Far(f.id)))?);
                }
            }
            if let Some(b) = &u.bar_id {
                f.bar_id = Some(b.id);
            }
        }
        for u in parse_each(ies, IeType::UpdateQer, UpdateQer::unmarshal)? {
            let q = rules.qers.get_mut(&u.qer_id.value).ok_or(Reject::rule(RuleRef::Qer(u.qer_id.value)))?;
            if let Some(g) = u.gate_status {
                q.gate_ul_open = g.uplink_gate == rs_pfcp::ie::gate_status::GateStatusValue::Open;
                q.gate_dl_open = g.downlink_gate == rs_pfcp::ie::gate_status::GateStatusValue::Open;
            }
            if let Some(m) = u.mbr {
                q.mbr = Some((m.uplink, m.downlink));
            }
        }
        for u in parse_each(ies, IeType::UpdateBar, UpdateBar::unmarshal)? {
            let b = rules.bars.get_mut(&u.bar_id.id).ok_or(Reject::rule(RuleRef::Bar(u.bar_id.id)))?;
            b.suggested_buffering_packets_count = u.suggested_buffering_packets_count.map(|s| s.count);
        }
        rules.check().map_err(Reject::rules)?;
        self.allocate_fteids(rules)
    }

    /// Session Deletion (TS 29.244 7.5.6, 7.5.7).
    /// Every URR's final usage goes in the response (TERMR, 7.5.7.2).
    pub(crate) fn session_deletion(&mut self, now: std::time::Instant, up_seid: u64) -> Reply {
        let resp = msg::SESSION_DELETION_RESPONSE;
        if !self.sessions.contains_key(&up_seid) {
            return (resp, Some(0), vec![cause_ie(CauseValue::SessionContextNotFound)]);
        }
        // The final counts are read before the plane forgets them.
        let reports = self.usage_deleted(now, up_seid);
        match self.remove_session(up_seid) {
            Some(s) => {
                self.counters.incr("pfcp_sessions_deleted");
                let mut out = vec![cause_ie(CauseValue::RequestAccepted)];
                out.extend(reports);
                (resp, Some(s.cp_seid), out)
            }
            None => (resp, Some(0), vec![cause_ie(CauseValue::SessionContextNotFound)]),
        }
    }
}

/// PFCP Session Report (TS 29.244 7.5.8, 7.5.9), UP function initiated.
pub(crate) const SESSION_REPORT_REQUEST: u8 = 56;
pub(crate) const SESSION_REPORT_RESPONSE: u8 = 57;

impl UpfCore {
    /// Turns the data path's reports into Session Report Requests towards
    /// the CP function of each session (TS 29.244 7.5.8): a Downlink Data
    /// Report (DLDR) or a Usage Report (USAR).
    pub fn poll_plane_reports(&mut self, now: std::time::Instant) {
        while let Some(r) = self.plane.poll_report() {
            let seid = match &r {
                PlaneReport::DownlinkData { up_seid, .. } | PlaneReport::Usage { up_seid, .. } => *up_seid,
            };
            let ies = report_ies(&r, &self.clock);
            let counter = match r {
                PlaneReport::DownlinkData { .. } => "pfcp_session_report_dldr_sent",
                PlaneReport::Usage { .. } => "pfcp_session_report_usar_sent",
            };
            self.send_session_report(now, seid, &ies, counter);
        }
    }

    /// A Session Report Response (TS 29.244 7.5.9): matched to our request;
    /// a rejection is counted (cause 65, Session context not found, means
    /// the CP function no longer has the session).
    pub(crate) fn session_report_response(&mut self, peer: std::net::SocketAddr, seq: u32, ies: &[IeRef]) {
        match self.response_to(peer, seq, SESSION_REPORT_RESPONSE) {
            Some(crate::node::Outgoing::SessionReport) => {}
            Some(crate::node::Outgoing::Heartbeat(_)) => return self.counters.incr("pfcp_unexpected_response"),
            None => return,
        }
        match first(ies, IeType::Cause).and_then(|c| c.payload.first()) {
            Some(1) => self.counters.incr("pfcp_session_report_accepted"),
            _ => self.counters.incr("pfcp_session_report_rejected"),
        }
    }
}

/// The IEs of a Session Report Request for one report; `clock` maps the
/// measurement's instants to NTP time stamps.
pub(crate) fn report_ies(r: &PlaneReport, clock: &crate::urr::WallClock) -> Vec<Ie> {
    use rs_pfcp::ie::downlink_data_report::DownlinkDataReport;
    use rs_pfcp::ie::report_type::ReportType;
    match r {
        PlaneReport::DownlinkData { pdr_id, .. } => {
            vec![ReportType::downlink_data_report().to_ie(), DownlinkDataReport::new(PdrId::new(*pdr_id)).to_ie()]
        }
        PlaneReport::Usage { usage, .. } => vec![
            ReportType::usage_report().to_ie(),
            crate::urr::pfcp::usage_report_ie(usage, IeType::UsageReportWithinSessionReportRequest, clock),
        ],
    }
}
