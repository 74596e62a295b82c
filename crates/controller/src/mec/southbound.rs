//! Southbound: a traffic rule (ETSI GS MEC 011 TrafficRule, validated by
//! the rule table) as the PFCP session the MEC router role of the
//! user-plane node takes (`mobicore_pfcp::mec`). Pure: no I/O.
//!
//! A trafficFilter's lists (any entry matches) become the cross product of
//! single-valued filters, one PDR each, at most
//! [`mobicore_pfcp::mec::MAX_FILTERS`]. `srcTunnelAddress` is the eNB (one
//! address); `tgtTunnelAddress` (the outer destination) has no match on
//! the node and is refused, as is a MEC router the controller knows no
//! slice for. An INACTIVE rule has no session.

use super::{prefix, validate, Action, InterfaceType, RuleError, RuleState, TrafficRule};
use mobicore_pfcp::mec::{
    Application, MecRule, MecSession, RuleAction, Slice, TrafficFilter as Filter, Tunnel, MAX_FILTERS,
};
use std::net::Ipv4Addr;

fn invalid(msg: impl Into<String>) -> RuleError {
    RuleError::Invalid(msg.into())
}

/// Every value of an optional list (`None`: one "any").
fn each<T: Copy>(v: &Option<Vec<T>>) -> Vec<Option<T>> {
    v.as_ref().map_or(vec![None], |v| v.iter().copied().map(Some).collect())
}

fn mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16)).collect::<Result<_, _>>().ok()?;
    v.try_into().ok()
}

/// The rule's action with its destination: the application's MAC (MAC or
/// IP dstInterface) reached through `app_interface`, or the tunnel end.
fn action(rule: &TrafficRule, app_interface: &str) -> Result<RuleAction, RuleError> {
    let ifaces = rule.dst_interface.as_deref().unwrap_or(&[]);
    let app = || {
        ifaces
            .iter()
            .filter(|i| matches!(i.interface_type, InterfaceType::Mac | InterfaceType::Ip))
            .find_map(|i| i.dst_mac_address.as_deref().and_then(mac))
            .map(|mac| Application { mac, interface: app_interface.to_string() })
            .ok_or_else(|| invalid("no dstMacAddress for the edge application"))
    };
    let tunnel = || {
        ifaces
            .iter()
            .filter_map(|i| i.tunnel_info.as_ref())
            .find_map(|t| t.tunnel_dst_address.as_deref().and_then(|a| a.parse::<Ipv4Addr>().ok()))
            // MEC 011 tunnelInfo has no TEID: 0 keeps the G-PDU's.
            .map(|addr| Tunnel { addr, teid: 0 })
            .ok_or_else(|| invalid("no tunnelDstAddress for the tunnel"))
    };
    Ok(match rule.action {
        Action::Drop => RuleAction::Drop,
        Action::Passthrough => RuleAction::Passthrough,
        Action::ForwardDecapsulated => RuleAction::ForwardDecapsulated(app()?),
        Action::DuplicateDecapsulated => RuleAction::DuplicateDecapsulated(app()?),
        Action::ForwardEncapsulated => RuleAction::ForwardEncapsulated(tunnel()?),
        Action::DuplicateEncapsulated => RuleAction::DuplicateEncapsulated(tunnel()?),
    })
}

/// The PFCP session of `rule` on the MEC router of slice `slice`, whose
/// decapsulated traffic leaves through `app_interface`; `None` for an
/// INACTIVE rule.
pub fn mec_session(rule: &TrafficRule, slice: &Slice, app_interface: &str) -> Result<Option<MecSession>, RuleError> {
    let matches = validate(rule)?;
    if rule.state == RuleState::Inactive {
        return Ok(None);
    }
    let as_prefix = |p: (u32, u8)| (Ipv4Addr::from(p.0), p.1);
    let mut filters = Vec::new();
    for (m, f) in matches.iter().zip(&rule.traffic_filter) {
        if f.tgt_tunnel_address.is_some() {
            return Err(invalid("tgtTunnelAddress: the MEC router matches the eNB (srcTunnelAddress) only"));
        }
        let enbs: Vec<Option<Ipv4Addr>> = match &f.src_tunnel_address {
            None => vec![None],
            Some(v) => v
                .iter()
                .map(|s| match prefix(s) {
                    Some((a, 32)) => Ok(Some(Ipv4Addr::from(a))),
                    _ => Err(invalid(format!("srcTunnelAddress {s:?}: one eNB address, not a prefix"))),
                })
                .collect::<Result<_, _>>()?,
        };
        for src in each(&m.src) {
            for dst in each(&m.dst) {
                for src_ports in each(&m.sport) {
                    for dst_ports in each(&m.dport) {
                        for protocol in each(&m.proto) {
                            for enb in &enbs {
                                filters.push(Filter {
                                    src: src.map(as_prefix),
                                    dst: dst.map(as_prefix),
                                    src_ports,
                                    dst_ports,
                                    protocol,
                                    dscp: m.dscp,
                                    teid: None,
                                    enb: *enb,
                                });
                                if filters.len() > MAX_FILTERS {
                                    return Err(invalid(format!(
                                        "the trafficFilter lists make more than {MAX_FILTERS} filters"
                                    )));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(Some(MecSession::Rule(MecRule {
        slice: slice.clone(),
        flow: rule.filter_type == super::FilterType::Flow,
        priority: rule.priority,
        filters,
        action: action(rule, app_interface)?,
    })))
}

#[cfg(test)]
mod tests {
    use super::super::{DestinationInterface, FilterType, TrafficFilter, TunnelInfo};
    use super::*;

    fn rule(action: Action, dst_interface: Option<Vec<DestinationInterface>>) -> TrafficRule {
        TrafficRule {
            traffic_rule_id: "r1".into(),
            filter_type: FilterType::Flow,
            priority: 3,
            traffic_filter: vec![TrafficFilter {
                src_address: Some(vec!["10.45.0.0/16".into()]),
                dst_address: Some(vec!["192.0.2.10".into(), "192.0.2.11".into()]),
                dst_port: Some(vec!["80".into(), "8000-8080".into()]),
                protocol: Some(vec!["TCP".into()]),
                dscp: Some(46),
                src_tunnel_address: Some(vec!["10.1.0.2".into()]),
                ..TrafficFilter::default()
            }],
            action,
            dst_interface,
            state: RuleState::Active,
        }
    }

    fn slice() -> Slice {
        Slice { interface: "s1u0".into(), vlan: 100 }
    }

    fn app_iface() -> DestinationInterface {
        DestinationInterface {
            interface_type: InterfaceType::Mac,
            tunnel_info: None,
            src_mac_address: None,
            dst_mac_address: Some("02:00:00:00:0a:99".into()),
            dst_ip_address: Some("192.0.2.10".into()),
        }
    }

    #[test]
    fn a_rule_becomes_its_pfcp_session() {
        let s = mec_session(&rule(Action::ForwardDecapsulated, Some(vec![app_iface()])), &slice(), "mec0").unwrap();
        let Some(MecSession::Rule(r)) = s else { panic!("a rule session") };
        assert_eq!((&r.slice, r.flow, r.priority), (&slice(), true, 3));
        assert_eq!(
            r.action,
            RuleAction::ForwardDecapsulated(Application { mac: [2, 0, 0, 0, 0xa, 0x99], interface: "mec0".into() })
        );
        // 2 destinations x 2 port ranges.
        assert_eq!(r.filters.len(), 4);
        let f = r.filters[1];
        assert_eq!(f.src, Some((Ipv4Addr::new(10, 45, 0, 0), 16)));
        assert_eq!((f.dst, f.dst_ports), (Some((Ipv4Addr::new(192, 0, 2, 10), 32)), Some((8000, 8080))));
        assert_eq!((f.protocol, f.dscp, f.enb), (Some(6), Some(46), Some(Ipv4Addr::new(10, 1, 0, 2))));
        // It survives the PFCP encoding.
        let m = mobicore_pfcp::mec::establishment_request(
            1,
            Ipv4Addr::LOCALHOST,
            1,
            Ipv4Addr::LOCALHOST,
            &MecSession::Rule(r.clone()),
        );
        let (_, ies) = mobicore_pfcp::decode_view(&m).unwrap();
        assert_eq!(mobicore_pfcp::mec::decode_mec(&ies), Ok(MecSession::Rule(r)));
    }

    #[test]
    fn tunnels_inactive_rules_and_what_the_node_cannot_match() {
        let tun = DestinationInterface {
            interface_type: InterfaceType::Tunnel,
            tunnel_info: Some(TunnelInfo {
                tunnel_type: "GTP_U".into(),
                tunnel_dst_address: Some("198.51.100.7".into()),
                tunnel_src_address: None,
            }),
            src_mac_address: None,
            dst_mac_address: None,
            dst_ip_address: None,
        };
        let s = mec_session(&rule(Action::ForwardEncapsulated, Some(vec![tun])), &slice(), "mec0").unwrap();
        let Some(MecSession::Rule(r)) = s else { panic!("a rule session") };
        assert_eq!(r.action, RuleAction::ForwardEncapsulated(Tunnel { addr: Ipv4Addr::new(198, 51, 100, 7), teid: 0 }));
        let off = TrafficRule { state: RuleState::Inactive, ..rule(Action::Drop, None) };
        assert_eq!(mec_session(&off, &slice(), "mec0"), Ok(None));
        let mut outer = rule(Action::Drop, None);
        outer.traffic_filter[0].tgt_tunnel_address = Some(vec!["10.2.0.2".into()]);
        assert!(matches!(mec_session(&outer, &slice(), "mec0"), Err(RuleError::Invalid(_))));
        let mut many = rule(Action::Drop, None);
        many.traffic_filter[0].src_port = Some((0..5).map(|p| p.to_string()).collect());
        assert!(matches!(mec_session(&many, &slice(), "mec0"), Err(RuleError::Invalid(_))), "5 x 4 filters");
    }
}
