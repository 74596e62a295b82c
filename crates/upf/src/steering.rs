//! Steering sessions (issue 11; `[upf] role = "steering"`): one PFCP
//! session per diversion, encoded as [`mobicore_pfcp::steering`] says and
//! recognised by its Transit GTP-U Match IE. Established, replaced by a
//! modification, deleted like any session, from the node's associated CP
//! functions (the controller); installed with
//! [`crate::ForwardingPlane::install_diversion`].
//!
//! Answers (TS 29.244 7.2.2.4.2): a diversion with missing or inconsistent
//! pieces, "Mandatory IE missing" / "Mandatory IE incorrect" with the
//! Offending IE; one with the same match as another session's (the same UE
//! and flow, or the same anchor and UE address at the anchor for another
//! UE or origin), "Rule creation/modification failure" naming PDR 1 or 2;
//! beyond `max_diversions`, "No resources available"; the anchor role or a
//! data path that cannot steer, "Service not supported". Nothing changes on
//! a refusal, and no other session is touched.

use crate::node::{Reply, UpfCore};
use crate::pfcp::IeRef;
use crate::rules::{Diversion, PlaneError, RuleRef};
use crate::session::Reject;
use mobicore_pfcp::steering::{decode_diversion, FlowFilter};
use rs_pfcp::ie::cause::CauseValue;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};

/// The steering sessions' diversions, indexed by what they match.
#[derive(Debug, Default)]
pub(crate) struct Diversions {
    by_seid: HashMap<u64, Diversion>,
    /// Uplink match (UE address, flow) -> session.
    uplink: HashMap<(Ipv4Addr, Option<FlowFilter>), u64>,
    /// Downlink match (anchor, UE address at the anchor) -> sessions.
    downlink: HashMap<(Ipv4Addr, Ipv4Addr), Vec<u64>>,
}

fn dl_key(d: &Diversion) -> (Ipv4Addr, Ipv4Addr) {
    (d.anchor, d.downlink_ue())
}

impl Diversions {
    pub(crate) fn len(&self) -> usize {
        self.by_seid.len()
    }

    /// The PDR of `d` whose match another session than `except` has: the
    /// same uplink match (PDR 1), or the same downlink match rewritten
    /// otherwise (PDR 2: another UE or origin). Two flows of one UE to one
    /// anchor share the downlink match.
    fn clash(&self, d: &Diversion, except: Option<u64>) -> Option<u16> {
        if self.uplink.get(&(d.ue, d.flow)).is_some_and(|s| Some(*s) != except) {
            return Some(1);
        }
        let others = self.downlink.get(&dl_key(d)).into_iter().flatten().filter(|s| Some(**s) != except);
        let differs = |s: &u64| self.by_seid.get(s).is_some_and(|o| (o.ue, o.origin) != (d.ue, d.origin));
        others.into_iter().any(differs).then_some(2)
    }

    pub(crate) fn insert(&mut self, seid: u64, d: Diversion) {
        self.remove(seid);
        self.uplink.insert((d.ue, d.flow), seid);
        self.downlink.entry(dl_key(&d)).or_default().push(seid);
        self.by_seid.insert(seid, d);
    }

    pub(crate) fn remove(&mut self, seid: u64) {
        let Some(d) = self.by_seid.remove(&seid) else { return };
        self.uplink.remove(&(d.ue, d.flow));
        if let Some(v) = self.downlink.get_mut(&dl_key(&d)) {
            v.retain(|s| *s != seid);
            if v.is_empty() {
                self.downlink.remove(&dl_key(&d));
            }
        }
    }
}

impl UpfCore {
    /// The diversion of a steering request, if this node can take it:
    /// role, decoding, bound (establishment only), overlap.
    fn diversion_of(&self, raw: &[IeRef], replacing: Option<u64>) -> Result<Diversion, Reject> {
        if self.cfg.role != crate::config::UpfRole::Steering {
            self.counters.incr("pfcp_steering_refused_anchor_role");
            return Err(Reject::cause(CauseValue::ServiceNotSupported));
        }
        let d = decode_diversion(raw).map_err(|b| {
            self.counters.incr("pfcp_steering_bad_diversion");
            Reject { cause: b.cause(), offending: Some(b.ie_type), failed_rule: None }
        })?;
        if replacing.is_none() && self.diversions.len() >= self.cfg.max_diversions {
            self.counters.incr("pfcp_steering_over_max_diversions");
            return Err(Reject::cause(CauseValue::NoResourcesAvailable));
        }
        if let Some(pdr) = self.diversions.clash(&d, replacing) {
            self.counters.incr("pfcp_steering_overlapping_diversion");
            return Err(Reject::rule(RuleRef::Pdr(pdr)));
        }
        Ok(d)
    }

    fn plane_reject(&self, e: PlaneError) -> Reject {
        match e {
            PlaneError::SteeringUnsupported => {
                self.counters.incr("pfcp_steering_unsupported_datapath");
                Reject::cause(CauseValue::ServiceNotSupported)
            }
            e => {
                tracing::warn!(error = %e, "steering: the data path refused a diversion");
                Reject::cause(CauseValue::SystemFailure)
            }
        }
    }

    /// A Session Establishment Request carrying a diversion (TS 29.244
    /// 7.5.2): `ies` as the node reads any request, `raw` with the
    /// enterprise IEs.
    pub(crate) fn steering_establishment(&mut self, peer: SocketAddr, ies: &[IeRef], raw: &[IeRef]) -> Reply {
        let prepare = |core: &Self| core.diversion_of(raw, None);
        self.role_establishment(peer, ies, prepare, |core, up_seid, d| {
            core.plane.install_diversion(up_seid, &d).map_err(|e| core.plane_reject(e))?;
            core.diversions.insert(up_seid, d);
            core.counters.incr("pfcp_steering_diversions_established");
            tracing::info!(up_seid, ue = %d.ue, anchor = %d.anchor, "steering: diversion established");
            Ok(Some(d))
        })
    }

    /// A Session Modification Request of a steering session (TS 29.244
    /// 7.5.4): the diversion it carries replaces the session's.
    pub(crate) fn steering_modification(&mut self, up_seid: u64, raw: &[IeRef]) -> Reply {
        self.role_modification(up_seid, |core| {
            let d = core.diversion_of(raw, Some(up_seid))?;
            core.plane.install_diversion(up_seid, &d).map_err(|e| core.plane_reject(e))?;
            core.diversions.insert(up_seid, d);
            if let Some(s) = core.sessions.get_mut(&up_seid) {
                s.diversion = Some(d);
            }
            core.counters.incr("pfcp_steering_diversions_modified");
            Ok(())
        })
    }
}
