//! The steering role's maps (bpf/steer.h, bpf/maps.h "Steering role"):
//! each diversion becomes a rule in its UE's `steer_ul` set (flows first,
//! then the whole UE, in session order) and the `steer_dl` entry of its
//! anchor and UE address at the anchor. A change rewrites the whole value
//! of each key it touches (one hash update, which a program sees whole).

use super::maps::{
    be_addr, MapStore, SteerDl, SteerDlKey, SteerRule, SteerUlSet, STEER_F_SDF, STEER_F_TEID, STEER_F_XLATE,
    STEER_SET_MAX,
};
use super::translate::sdf_from_flow;
use crate::dataplane::flow::{self, AddrMatch};
use crate::rules::{Diversion, PlaneError};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// The installed diversions, by UP SEID (ordered: a set's order is stable).
#[derive(Debug, Default)]
pub(crate) struct SteerTable {
    by_seid: BTreeMap<u64, Diversion>,
}

/// A diversion's uplink rule (its SDF filter oriented as the uplink
/// travels: the UE is the source).
fn rule(d: &Diversion) -> SteerRule {
    let mut r = SteerRule { anchor: be_addr(d.anchor), ..Default::default() };
    if let Some(t) = d.anchor_teid {
        r.teid = t;
        r.flags |= STEER_F_TEID;
    }
    if let Some(a) = d.anchor_ue {
        r.anchor_ue = be_addr(a);
        r.flags |= STEER_F_XLATE;
    }
    if let Some(f) = &d.flow {
        let remote = f.remote.map_or(AddrMatch::Any, |(a, l)| AddrMatch::Prefix(a, l));
        let ff = flow::FlowFilter {
            proto: f.protocol,
            remote,
            remote_ports: f.remote_ports,
            ue: AddrMatch::Any,
            ue_ports: f.ue_ports,
            never: false,
        };
        r.sdf = sdf_from_flow(&ff, true);
        r.flags |= STEER_F_SDF;
    }
    r
}

impl SteerTable {
    /// The `steer_ul` value of UE `ue` (None: no diversion).
    fn ul_set(&self, ue: Ipv4Addr) -> Result<Option<SteerUlSet>, PlaneError> {
        let mine: Vec<&Diversion> = self.by_seid.values().filter(|d| d.ue == ue).collect();
        if mine.is_empty() {
            return Ok(None);
        }
        if mine.len() > STEER_SET_MAX {
            return Err(PlaneError::Other(format!("more than {STEER_SET_MAX} diversions of UE {ue}")));
        }
        let mut set = SteerUlSet::default();
        let ordered = mine.iter().filter(|d| d.flow.is_some()).chain(mine.iter().filter(|d| d.flow.is_none()));
        for (i, d) in ordered.enumerate() {
            set.rules[i] = rule(d);
        }
        set.count = mine.len() as u32;
        Ok(Some(set))
    }

    /// The `steer_dl` value of (anchor, UE address at the anchor).
    fn dl(&self, anchor: Ipv4Addr, dst: Ipv4Addr) -> Option<SteerDl> {
        self.by_seid
            .values()
            .find(|d| d.anchor == anchor && d.downlink_ue() == dst)
            .map(|d| SteerDl { ue: be_addr(d.ue), origin: be_addr(d.origin) })
    }

    /// Sets (or with None removes) the diversion of `seid` and rewrites
    /// the keys it changes; refused before any write when a UE's set
    /// would overflow.
    pub(crate) fn set<M: MapStore>(
        &mut self,
        maps: &mut M,
        seid: u64,
        d: Option<&Diversion>,
    ) -> Result<(), PlaneError> {
        let old = match d {
            Some(d) => self.by_seid.insert(seid, *d),
            None => self.by_seid.remove(&seid),
        };
        let touched: Vec<Diversion> = old.iter().chain(d).copied().collect();
        let mut uls = Vec::new();
        for t in &touched {
            match self.ul_set(t.ue) {
                Ok(s) => uls.push((t.ue, s)),
                Err(e) => {
                    // Back as it was.
                    match old {
                        Some(o) => self.by_seid.insert(seid, o),
                        None => self.by_seid.remove(&seid),
                    };
                    return Err(e);
                }
            }
        }
        let map_err = |e: super::maps::MapError| PlaneError::Other(e.to_string());
        for (ue, s) in uls {
            match s {
                Some(s) => maps.put_steer_ul(be_addr(ue), &s).map_err(map_err)?,
                None => maps.del_steer_ul(be_addr(ue)).map_err(map_err)?,
            }
        }
        for t in &touched {
            let k = SteerDlKey { anchor: be_addr(t.anchor), dst: be_addr(t.downlink_ue()) };
            match self.dl(t.anchor, t.downlink_ue()) {
                Some(v) => maps.put_steer_dl(k, &v).map_err(map_err)?,
                None => maps.del_steer_dl(k).map_err(map_err)?,
            }
        }
        Ok(())
    }

    pub(crate) fn contains(&self, seid: u64) -> bool {
        self.by_seid.contains_key(&seid)
    }
}
