//! MEC traffic rules (seed 001; the TrafficRule data model of ETSI GS MEC
//! 011 7.1.2.2): per virtual MEC router, the rules the MEC platform pushes
//! at run time. This module is the rule table: validation, bounds, and
//! overlaps resolved by priority (0 is the highest) and reported; the data
//! path that applies them is the user-plane node's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FilterType {
    /// The reverse direction of a matched flow is handled in the same context.
    Flow,
    Packet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Action {
    Drop,
    ForwardDecapsulated,
    ForwardEncapsulated,
    Passthrough,
    DuplicateDecapsulated,
    DuplicateEncapsulated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RuleState {
    Active,
    Inactive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InterfaceType {
    Tunnel,
    Mac,
    Ip,
}

/// MEC 011 TunnelInfo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TunnelInfo {
    /// `GTP_U` (the only one a MEC router beside an eNB needs).
    pub tunnel_type: String,
    pub tunnel_dst_address: Option<String>,
    pub tunnel_src_address: Option<String>,
}

/// MEC 011 DestinationInterface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DestinationInterface {
    pub interface_type: InterfaceType,
    pub tunnel_info: Option<TunnelInfo>,
    pub src_mac_address: Option<String>,
    pub dst_mac_address: Option<String>,
    pub dst_ip_address: Option<String>,
}

/// MEC 011 TrafficFilter: every present list must match (a list matches
/// when any of its entries does).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrafficFilter {
    /// Inner source addresses or prefixes (`10.44.0.7`, `10.44.0.0/16`).
    pub src_address: Option<Vec<String>>,
    pub dst_address: Option<Vec<String>>,
    /// Ports or ranges (`80`, `8000-8080`).
    pub src_port: Option<Vec<String>>,
    pub dst_port: Option<Vec<String>>,
    /// Protocol numbers or names (`6`, `TCP`, `UDP`, `ICMP`).
    pub protocol: Option<Vec<String>>,
    /// DSCP, 0-63.
    #[serde(rename = "dSCP")]
    pub dscp: Option<u8>,
    /// Outer (S1-U) addresses: the eNB's or the anchor's.
    pub src_tunnel_address: Option<Vec<String>>,
    pub tgt_tunnel_address: Option<Vec<String>>,
}

/// MEC 011 TrafficRule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrafficRule {
    pub traffic_rule_id: String,
    pub filter_type: FilterType,
    /// 0 (highest) to 255.
    pub priority: u8,
    pub traffic_filter: Vec<TrafficFilter>,
    pub action: Action,
    pub dst_interface: Option<Vec<DestinationInterface>>,
    pub state: RuleState,
}

/// A rule accepted, with the ACTIVE rules it overlaps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleAnswer {
    pub rule: TrafficRule,
    pub overlaps: Vec<Overlap>,
    /// Microseconds from the request to the MEC router node's acceptance
    /// (absent for a router without a node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_us: Option<u64>,
}

/// Two ACTIVE rules that can match one packet: the higher priority wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overlap {
    pub traffic_rule_id: String,
    /// The rule that applies where both match.
    pub winner: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("no MEC router {0}")]
    UnknownRouter(String),
    #[error("no traffic rule {0}")]
    UnknownRule(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    /// The MEC router node refused the change (its PFCP cause).
    #[error("{0}")]
    Refused(String),
    /// The MEC router node could not be reached.
    #[error("{0}")]
    Unavailable(String),
}

/// What a filter matches, parsed: prefixes and ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Match {
    src: Option<Vec<(u32, u8)>>,
    dst: Option<Vec<(u32, u8)>>,
    sport: Option<Vec<(u16, u16)>>,
    dport: Option<Vec<(u16, u16)>>,
    proto: Option<Vec<u8>>,
    dscp: Option<u8>,
}

/// One router's rules, each with its parsed filters, and the ACTIVE ones
/// indexed so that checking a new rule's overlaps does not read every
/// rule (120,000 exact-destination rules, the seed 001 figure, are
/// checked against their own destinations and the few wide rules).
#[derive(Debug, Default)]
struct Table {
    rules: BTreeMap<String, (TrafficRule, Vec<Match>)>,
    /// ACTIVE rules whose every filter names exact destinations, by one.
    by_dst: HashMap<u32, BTreeSet<String>>,
    /// The other ACTIVE rules (a destination prefix, or any).
    wide: BTreeSet<String>,
}

/// Every destination of the filters when all are exact (/32).
fn exact_dsts(ms: &[Match]) -> Option<Vec<u32>> {
    let mut v = Vec::new();
    for m in ms {
        let dst = m.dst.as_ref()?;
        if dst.iter().any(|(_, len)| *len != 32) {
            return None;
        }
        v.extend(dst.iter().map(|(a, _)| *a));
    }
    Some(v)
}

impl Table {
    fn insert(&mut self, rule: TrafficRule, m: Vec<Match>) {
        let id = rule.traffic_rule_id.clone();
        self.remove(&id);
        if rule.state == RuleState::Active {
            match exact_dsts(&m) {
                Some(dsts) => dsts.into_iter().for_each(|d| {
                    self.by_dst.entry(d).or_default().insert(id.clone());
                }),
                None => {
                    self.wide.insert(id.clone());
                }
            }
        }
        self.rules.insert(id, (rule, m));
    }

    fn remove(&mut self, id: &str) -> Option<TrafficRule> {
        let (rule, m) = self.rules.remove(id)?;
        self.wide.remove(id);
        for d in exact_dsts(&m).unwrap_or_default() {
            if let Some(ids) = self.by_dst.get_mut(&d) {
                ids.remove(id);
                if ids.is_empty() {
                    self.by_dst.remove(&d);
                }
            }
        }
        Some(rule)
    }

    /// The ACTIVE rules that can overlap filters `m`.
    fn candidates(&self, m: &[Match]) -> Vec<&(TrafficRule, Vec<Match>)> {
        let ids: BTreeSet<&String> = match exact_dsts(m) {
            Some(dsts) => dsts.iter().filter_map(|d| self.by_dst.get(d)).flatten().chain(self.wide.iter()).collect(),
            None => self.by_dst.values().flatten().chain(self.wide.iter()).collect(),
        };
        ids.into_iter().filter_map(|id| self.rules.get(id)).collect()
    }
}

/// The rule tables of the virtual MEC routers.
#[derive(Debug, Default)]
pub struct MecRouters {
    routers: BTreeMap<String, Table>,
    max_rules: usize,
    /// Rules with a change on its way to the node: (router, id).
    changing: BTreeSet<(String, String)>,
}

impl MecRouters {
    pub fn new(names: &[String], max_rules: usize) -> Self {
        let routers = names.iter().map(|n| (n.clone(), Table::default())).collect();
        MecRouters { routers, max_rules, changing: BTreeSet::new() }
    }

    pub fn routers(&self) -> impl Iterator<Item = &str> {
        self.routers.keys().map(String::as_str)
    }

    pub fn rules(&self, router: &str) -> Result<Vec<TrafficRule>, RuleError> {
        Ok(self.table(router)?.rules.values().map(|(r, _)| r.clone()).collect())
    }

    pub fn rule(&self, router: &str, id: &str) -> Result<TrafficRule, RuleError> {
        self.table(router)?.rules.get(id).map(|(r, _)| r.clone()).ok_or_else(|| RuleError::UnknownRule(id.into()))
    }

    /// A new rule (`replace`: false) or a new version of one (true).
    pub fn put(&mut self, router: &str, rule: TrafficRule, replace: bool) -> Result<RuleAnswer, RuleError> {
        let answer = self.check_put(router, &rule, replace)?;
        self.commit_put(router, rule);
        Ok(answer)
    }

    /// What [`MecRouters::put`] would answer, changing nothing.
    pub fn check_put(&self, router: &str, rule: &TrafficRule, replace: bool) -> Result<RuleAnswer, RuleError> {
        let m = validate(rule)?;
        let max = self.max_rules;
        let table = self.table(router)?;
        match (table.rules.contains_key(&rule.traffic_rule_id), replace) {
            (true, false) => return Err(RuleError::Conflict(format!("traffic rule {} exists", rule.traffic_rule_id))),
            (false, true) => return Err(RuleError::UnknownRule(rule.traffic_rule_id.clone())),
            (false, false) if table.rules.len() >= max => {
                return Err(RuleError::Conflict(format!("router {router} holds {max} rules, its bound")))
            }
            _ => {}
        }
        let mut overlaps = Vec::new();
        if rule.state == RuleState::Active {
            for (other, om) in table.candidates(&m) {
                if other.traffic_rule_id == rule.traffic_rule_id || !rules_overlap(&m, om) {
                    continue;
                }
                if other.priority == rule.priority {
                    return Err(RuleError::Conflict(format!(
                        "traffic rule {} overlaps {} at the same priority {}: give one a different priority",
                        rule.traffic_rule_id, other.traffic_rule_id, rule.priority
                    )));
                }
                let winner =
                    if rule.priority < other.priority { &rule.traffic_rule_id } else { &other.traffic_rule_id };
                overlaps.push(Overlap { traffic_rule_id: other.traffic_rule_id.clone(), winner: winner.clone() });
            }
        }
        Ok(RuleAnswer { rule: rule.clone(), overlaps, applied_us: None })
    }

    /// Stores a rule [`MecRouters::check_put`] accepted.
    pub fn commit_put(&mut self, router: &str, rule: TrafficRule) {
        if let (Some(t), Ok(m)) = (self.routers.get_mut(router), validate(&rule)) {
            t.insert(rule, m);
        }
    }

    pub fn delete(&mut self, router: &str, id: &str) -> Result<TrafficRule, RuleError> {
        let table = self.routers.get_mut(router).ok_or_else(|| RuleError::UnknownRouter(router.into()))?;
        table.remove(id).ok_or_else(|| RuleError::UnknownRule(id.into()))
    }

    /// Marks rule `id` of `router` as changing (its node has not answered
    /// yet); a second change meanwhile is a conflict.
    pub fn begin_change(&mut self, router: &str, id: &str) -> Result<(), RuleError> {
        if !self.changing.insert((router.to_string(), id.to_string())) {
            return Err(RuleError::Conflict(format!("a change to traffic rule {id} is still on its way to the node")));
        }
        Ok(())
    }

    pub fn end_change(&mut self, router: &str, id: &str) {
        self.changing.remove(&(router.to_string(), id.to_string()));
    }

    /// Puts back a stored rule (a restarted controller).
    pub fn restore(&mut self, router: &str, rule: TrafficRule) {
        self.commit_put(router, rule);
    }

    fn table(&self, router: &str) -> Result<&Table, RuleError> {
        self.routers.get(router).ok_or_else(|| RuleError::UnknownRouter(router.into()))
    }
}

fn invalid(msg: String) -> RuleError {
    RuleError::Invalid(msg)
}

/// Checks a rule as MEC 011 and the router's data path need it; returns
/// its union of filters as one match when it has a single filter, else
/// the first (overlap checks use every filter, see [`rules_overlap`]).
fn validate(r: &TrafficRule) -> Result<Vec<Match>, RuleError> {
    let id = &r.traffic_rule_id;
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        return Err(invalid("trafficRuleId is 1-64 letters, digits, '-', '_' or '.'".into()));
    }
    if r.traffic_filter.is_empty() {
        return Err(invalid("trafficFilter needs at least one filter".into()));
    }
    let ifaces = r.dst_interface.as_deref().unwrap_or(&[]);
    let need = |t: InterfaceType| ifaces.iter().any(|i| i.interface_type == t);
    match r.action {
        Action::ForwardDecapsulated | Action::DuplicateDecapsulated => {
            let ok = ifaces.iter().any(|i| {
                matches!(i.interface_type, InterfaceType::Mac | InterfaceType::Ip)
                    && i.dst_ip_address.as_deref().is_some_and(|a| a.parse::<Ipv4Addr>().is_ok())
                    && i.dst_mac_address.as_deref().is_some_and(mac_ok)
            });
            if !ok {
                return Err(invalid(format!(
                    "{:?} needs a dstInterface of type MAC or IP with dstIpAddress and dstMacAddress (the edge application)",
                    r.action
                )));
            }
        }
        Action::ForwardEncapsulated | Action::DuplicateEncapsulated => {
            if !need(InterfaceType::Tunnel)
                || ifaces.iter().any(|i| i.tunnel_info.is_none() && i.interface_type == InterfaceType::Tunnel)
            {
                return Err(invalid(format!("{:?} needs a dstInterface of type TUNNEL with tunnelInfo", r.action)));
            }
        }
        Action::Drop | Action::Passthrough => {}
    }
    for i in ifaces {
        for mac in [&i.src_mac_address, &i.dst_mac_address].into_iter().flatten() {
            if !mac_ok(mac) {
                return Err(invalid(format!("{mac:?} is not a MAC address (aa:bb:cc:dd:ee:ff)")));
            }
        }
    }
    r.traffic_filter.iter().map(parse_filter).collect()
}

fn mac_ok(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && u8::from_str_radix(p, 16).is_ok())
}

fn parse_filter(f: &TrafficFilter) -> Result<Match, RuleError> {
    let prefixes = |v: &Option<Vec<String>>, what: &str| -> Result<Option<Vec<(u32, u8)>>, RuleError> {
        v.as_ref()
            .map(|v| {
                v.iter()
                    .map(|s| prefix(s).ok_or_else(|| invalid(format!("{what} {s:?} is not an IPv4 address or prefix"))))
                    .collect()
            })
            .transpose()
    };
    let ranges = |v: &Option<Vec<String>>, what: &str| -> Result<Option<Vec<(u16, u16)>>, RuleError> {
        v.as_ref()
            .map(|v| {
                v.iter()
                    .map(|s| {
                        port_range(s).ok_or_else(|| invalid(format!("{what} {s:?} is not a port or a range lo-hi")))
                    })
                    .collect()
            })
            .transpose()
    };
    let proto = f
        .protocol
        .as_ref()
        .map(|v| {
            v.iter()
                .map(|s| {
                    protocol(s)
                        .ok_or_else(|| invalid(format!("protocol {s:?} is not a number 0-255 or TCP, UDP, ICMP")))
                })
                .collect::<Result<Vec<u8>, _>>()
        })
        .transpose()?;
    if f.dscp.is_some_and(|d| d > 63) {
        return Err(invalid("dSCP is 0-63".into()));
    }
    prefixes(&f.src_tunnel_address, "srcTunnelAddress")?;
    prefixes(&f.tgt_tunnel_address, "tgtTunnelAddress")?;
    Ok(Match {
        src: prefixes(&f.src_address, "srcAddress")?,
        dst: prefixes(&f.dst_address, "dstAddress")?,
        sport: ranges(&f.src_port, "srcPort")?,
        dport: ranges(&f.dst_port, "dstPort")?,
        proto,
        dscp: f.dscp,
    })
}

fn prefix(s: &str) -> Option<(u32, u8)> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, l.parse::<u8>().ok().filter(|l| *l <= 32)?),
        None => (s, 32),
    };
    let a = u32::from(a.parse::<Ipv4Addr>().ok()?);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some((a & mask, len))
}

fn port_range(s: &str) -> Option<(u16, u16)> {
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
        None => {
            let p = s.trim().parse().ok()?;
            (p, p)
        }
    };
    (lo <= hi).then_some((lo, hi))
}

fn protocol(s: &str) -> Option<u8> {
    match s.to_ascii_uppercase().as_str() {
        "TCP" => Some(6),
        "UDP" => Some(17),
        "ICMP" => Some(1),
        n => n.parse().ok(),
    }
}

/// Whether some packet matches a filter of each rule.
fn rules_overlap(a: &[Match], b: &[Match]) -> bool {
    a.iter().any(|x| b.iter().any(|y| filters_overlap(x, y)))
}

fn filters_overlap(a: &Match, b: &Match) -> bool {
    fn any<T>(a: &Option<Vec<T>>, b: &Option<Vec<T>>, f: impl Fn(&T, &T) -> bool) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => a.iter().any(|x| b.iter().any(|y| f(x, y))),
            _ => true,
        }
    }
    let prefixes = |x: &(u32, u8), y: &(u32, u8)| {
        let len = x.1.min(y.1);
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        x.0 & mask == y.0 & mask
    };
    let ranges = |x: &(u16, u16), y: &(u16, u16)| x.0 <= y.1 && y.0 <= x.1;
    any(&a.src, &b.src, prefixes)
        && any(&a.dst, &b.dst, prefixes)
        && any(&a.sport, &b.sport, ranges)
        && any(&a.dport, &b.dport, ranges)
        && any(&a.proto, &b.proto, |x, y| x == y)
        && (a.dscp.is_none() || b.dscp.is_none() || a.dscp == b.dscp)
}

mod client;
mod southbound;
pub use client::{MecClient, MecClientConfig, MecError, MecEvent, MecKey};
pub use southbound::mec_session;

#[cfg(test)]
mod tests;
