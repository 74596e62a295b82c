//! Full-state dump and restore of the UPF's PFCP node: its whole state
//! copied to a fresh instance, the stand-in for seed 000's whole-process
//! "RAM replication" baseline (CRIU cannot checkpoint on these machines;
//! see `mobicore bench relocation`), with the S/P-GW-C's
//! (`mobicore_spgwc::dump`). Not a PFCP procedure.
//!
//! A dump ([`UpfDump`], framed by [`mobicore_common::state_dump`]) holds
//! our Node ID and Recovery Time Stamp, every association (the CP
//! function's Node ID, address and Recovery Time Stamp) and every PFCP
//! session exactly: UP and CP SEIDs, its association, all its rules (PDR,
//! FAR, QER, URR, BAR as [`SessionRules`]) or its diversion (steering
//! role), and the measurement each URR has in progress (UR-SEQN, volume
//! and duration since the last report and since the quota grant, times
//! as offsets from the dump). The local TEIDs in use, the exhausted
//! quotas and the forwarding plane's tables are rebuilt from it.
//!
//! Not in it: transactions (our Session Report and Heartbeat Requests in
//! flight belong to the source's conversation), the duplicate cache, the
//! counters, the random draw's state, the forwarding plane's cumulative
//! counts (a restored URR measures from the new plane's counts on). An
//! association is restored alive, its heartbeat due one interval later.
//!
//! Restoring keeps the identity: the restoring node must have the dump's
//! Node ID and allow each association's CP function (`[upf] cp_peers`);
//! it takes the dump's Recovery Time Stamp. When the restored S/P-GW-C
//! sets its association up again with the same Recovery Time Stamp, the
//! sessions stay (TS 29.244 6.2.6.2.2). It must be fresh (no association,
//! no session); the bounds of its configuration apply.

use crate::node::{Association, Session, UpfCore};
use crate::rules::{FlowFilter, SessionRules};
use crate::urr::MeterState;
use mobicore_common::state_dump::{self, DumpKind, FrameError};
use mobicore_pfcp::flow::AddrMatch;
use mobicore_pfcp::steering::Diversion;
use rs_pfcp::ie::node_id::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The whole state of a UPF's PFCP node (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpfDump {
    pub node_id: Ipv4Addr,
    pub recovery: SystemTime,
    /// By Node ID.
    pub associations: Vec<AssociationDump>,
    /// By UP SEID.
    pub sessions: Vec<SessionDump>,
}

/// One association with a CP function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssociationDump {
    /// Its Node ID, as text (an address or an FQDN).
    pub node: String,
    pub peer: SocketAddr,
    pub recovery: SystemTime,
}

/// One PFCP session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDump {
    pub up_seid: u64,
    pub cp_seid: u64,
    /// The Node ID of its association.
    pub node: String,
    /// As the CP function installed them (quotas not applied).
    pub rules: SessionRules,
    pub diversion: Option<Diversion>,
    /// A MEC router's session: its traffic rule or UE tunnel (`crate::mec`).
    #[serde(default)]
    pub mec: Option<crate::rules::MecSession>,
    /// Each URR's measurement in progress, by URR ID.
    pub usage: Vec<MeterState>,
}

impl UpfDump {
    /// The dump as octets ([`state_dump`] framing).
    pub fn to_bytes(&self) -> Vec<u8> {
        state_dump::encode(DumpKind::Upf, self)
    }

    /// A dump from octets: errors, never panics, on any input.
    pub fn from_bytes(b: &[u8]) -> Result<Self, FrameError> {
        state_dump::decode(DumpKind::Upf, b)
    }
}

/// Why a dump cannot be restored here. Nothing is changed when restoring fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("this UPF is not fresh: it holds {associations} associations and {sessions} sessions")]
    NotFresh { associations: usize, sessions: usize },
    #[error("the dump is of Node ID {dumped}, this UPF is {configured}: a full-state copy keeps its identity")]
    NodeId { dumped: Ipv4Addr, configured: Ipv4Addr },
    #[error("association {0:?}: no [upf] cp_peers entry allows this CP function from its address")]
    UnknownPeer(String),
    #[error("association {0:?} appears twice")]
    DuplicateAssociation(String),
    #[error("{0} associations, more than max_associations")]
    TooManyAssociations(usize),
    #[error("session {0:#x}: its UP SEID is 0 or used twice")]
    Seid(u64),
    #[error("session {seid:#x}: association {node:?} is not in the dump")]
    NoAssociation { seid: u64, node: String },
    #[error("association {0:?}: more sessions than max_sessions_per_association")]
    TooManySessions(String),
    #[error("session {seid:#x}: its rules do not hold together ({why})")]
    Rules { seid: u64, why: String },
    #[error("session {seid:#x}: a measurement for URR {urr} which it does not have, or twice")]
    Usage { seid: u64, urr: u32 },
    #[error("session {seid:#x}: the forwarding plane refused it: {why}")]
    Plane { seid: u64, why: String },
}

impl UpfCore {
    /// The whole state at `now` (see [`crate::dump`]). Always possible:
    /// every PFCP request is handled to its end before the next.
    pub fn dump(&self, now: Instant) -> UpfDump {
        let mut associations: Vec<AssociationDump> = self
            .associations
            .iter()
            .map(|(node, a)| AssociationDump { node: node.clone(), peer: a.peer, recovery: a.recovery })
            .collect();
        associations.sort_by(|a, b| a.node.cmp(&b.node));
        let mut sessions: Vec<SessionDump> = self
            .sessions
            .values()
            .map(|s| SessionDump {
                up_seid: s.up_seid,
                cp_seid: s.cp_seid,
                node: s.node.clone(),
                rules: SessionRules::clone(&s.rules),
                diversion: s.diversion,
                mec: self.mec.get(s.up_seid).cloned(),
                usage: self.usage.states(s.up_seid, now),
            })
            .collect();
        sessions.sort_by_key(|s| s.up_seid);
        UpfDump { node_id: self.cfg.node_id, recovery: self.recovery, associations, sessions }
    }

    /// Takes over the state of `d` at `now`: all of it, or nothing when
    /// it does not fit this node ([`RestoreError`]).
    pub fn restore(&mut self, now: Instant, d: UpfDump) -> Result<(), RestoreError> {
        if !self.associations.is_empty() || !self.sessions.is_empty() {
            return Err(RestoreError::NotFresh {
                associations: self.associations.len(),
                sessions: self.sessions.len(),
            });
        }
        if d.node_id != self.cfg.node_id {
            return Err(RestoreError::NodeId { dumped: d.node_id, configured: self.cfg.node_id });
        }
        let associations = self.restored_associations(now, &d.associations)?;
        self.check_sessions(&d.sessions, &associations)?;
        // Checked: only the forwarding plane can still refuse.
        self.associations = associations;
        let mut done = Vec::with_capacity(d.sessions.len());
        for s in d.sessions {
            let seid = s.up_seid;
            if let Err(why) = self.restore_session(now, s) {
                for seid in done {
                    self.remove_session(seid);
                }
                self.associations.clear();
                return Err(RestoreError::Plane { seid, why: why.to_string() });
            }
            done.push(seid);
        }
        self.recovery = d.recovery;
        self.counters.add("pfcp_sessions_restored", done.len() as u64);
        Ok(())
    }

    fn restored_associations(
        &self,
        now: Instant,
        dumped: &[AssociationDump],
    ) -> Result<HashMap<String, Association>, RestoreError> {
        if dumped.len() > self.cfg.max_associations {
            return Err(RestoreError::TooManyAssociations(dumped.len()));
        }
        let interval = Duration::from_millis(self.cfg.heartbeat_interval_ms);
        let mut out = HashMap::with_capacity(dumped.len());
        for a in dumped {
            let id = node_id(&a.node);
            let entry = self.cfg.cp_peers.iter().find(|p| p.permits(&id, a.peer.ip()));
            let addrs = entry.ok_or_else(|| RestoreError::UnknownPeer(a.node.clone()))?.addrs.clone();
            let restored = Association {
                peer: a.peer,
                recovery: a.recovery,
                addrs,
                sessions: 0,
                next_heartbeat: now + interval,
                heartbeat_seq: None,
                dead_until: None,
            };
            if out.insert(a.node.clone(), restored).is_some() {
                return Err(RestoreError::DuplicateAssociation(a.node.clone()));
            }
        }
        Ok(out)
    }

    /// Everything about the sessions that can be checked before any is
    /// installed; counts them into their associations.
    fn check_sessions(
        &self,
        sessions: &[SessionDump],
        associations: &HashMap<String, Association>,
    ) -> Result<(), RestoreError> {
        let mut seids = BTreeSet::new();
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for s in sessions {
            let seid = s.up_seid;
            if seid == 0 || !seids.insert(seid) {
                return Err(RestoreError::Seid(seid));
            }
            if !associations.contains_key(&s.node) {
                return Err(RestoreError::NoAssociation { seid, node: s.node.clone() });
            }
            let n = per_node.entry(&s.node).or_default();
            *n += 1;
            if *n > self.cfg.max_sessions_per_association {
                return Err(RestoreError::TooManySessions(s.node.clone()));
            }
            s.rules.check().map_err(|e| RestoreError::Rules { seid, why: format!("{e:?}") })?;
            if s.diversion.is_some() && s.rules != SessionRules::default() {
                return Err(RestoreError::Rules { seid, why: "a steering session has no rules".into() });
            }
            if s.mec.is_some() && (s.diversion.is_some() || s.rules != SessionRules::default()) {
                return Err(RestoreError::Rules { seid, why: "a MEC session has no rules nor diversion".into() });
            }
            let mut urrs = BTreeSet::new();
            for m in &s.usage {
                if !s.rules.urrs.contains_key(&m.urr_id) || !urrs.insert(m.urr_id) {
                    return Err(RestoreError::Usage { seid, urr: m.urr_id });
                }
            }
        }
        Ok(())
    }

    /// Installs one checked session: its URRs' measurements, then its
    /// effective rules (or diversion) in the plane.
    fn restore_session(&mut self, now: Instant, s: SessionDump) -> Result<(), crate::rules::PlaneError> {
        let seid = s.up_seid;
        let rules = Arc::new(s.rules);
        let measured: HashMap<u32, &MeterState> = s.usage.iter().map(|m| (m.urr_id, m)).collect();
        for urr in rules.urrs.values() {
            let counts = self.plane.usage(seid, urr.id);
            match measured.get(&urr.id) {
                Some(m) => self.usage.restore(now, seid, urr, m, counts),
                None => self.usage.install(now, seid, urr, counts),
            }
        }
        let installed = match (&s.diversion, &s.mec) {
            (Some(d), _) => self.plane.install_diversion(seid, d),
            (None, Some(m)) => self.plane.install_mec(seid, m),
            (None, None) => {
                let (effective, _) = self.effective(seid, &rules);
                self.plane.install_shared(seid, &effective)
            }
        };
        if let Err(e) = installed {
            self.usage.forget_session(seid);
            return Err(e);
        }
        if let Some(d) = s.diversion {
            self.diversions.insert(seid, d);
        }
        if let Some(m) = s.mec {
            self.mec.insert(seid, m);
        }
        self.track_teids(&rules, true);
        if let Some(a) = self.associations.get_mut(&s.node) {
            a.sessions += 1;
        }
        let blocked = self.usage.exhausted(seid);
        let session =
            Session { up_seid: seid, cp_seid: s.cp_seid, node: s.node, rules, blocked, diversion: s.diversion };
        self.sessions.insert(seid, session);
        Ok(())
    }
}

/// A Node ID from its text ([`mobicore_pfcp::node_id_text`]'s inverse).
fn node_id(text: &str) -> NodeId {
    match text.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => NodeId::IPv4(a),
        Ok(IpAddr::V6(a)) => NodeId::IPv6(a),
        Err(_) => NodeId::FQDN(text.to_string()),
    }
}

/// The serde form of the SDF filters of a PDR ([`FlowFilter`] is the
/// PFCP crate's, which has no serde form of its own).
pub(crate) mod flows {
    use super::*;
    use serde::{Deserializer, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(remote = "AddrMatch")]
    enum AddrMatchDef {
        Any,
        Assigned,
        Prefix(Ipv4Addr, u8),
    }

    #[derive(Serialize, Deserialize)]
    #[serde(remote = "FlowFilter")]
    struct FlowFilterDef {
        proto: Option<u8>,
        #[serde(with = "AddrMatchDef")]
        remote: AddrMatch,
        remote_ports: Option<(u16, u16)>,
        #[serde(with = "AddrMatchDef")]
        ue: AddrMatch,
        ue_ports: Option<(u16, u16)>,
        never: bool,
    }

    struct Out<'a>(&'a FlowFilter);

    impl Serialize for Out<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            FlowFilterDef::serialize(self.0, s)
        }
    }

    #[derive(Deserialize)]
    struct In(#[serde(with = "FlowFilterDef")] FlowFilter);

    pub fn serialize<S: Serializer>(v: &[FlowFilter], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(Out))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<FlowFilter>, D::Error> {
        Ok(Vec::<In>::deserialize(d)?.into_iter().map(|f| f.0).collect())
    }
}
