//! Attach and detach at scale, GUTI re-attach, and the user-plane rules
//! that follow from them.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use mobicore_harness::{Network, NetworkConfig};
use mobicore_ran::ue::{EmmState, Procedure};
use mobicore_upf::rules::{INTERFACE_ACCESS, INTERFACE_CORE};

fn in_pool(a: Ipv4Addr) -> bool {
    let o = a.octets();
    o[0] == 10 && (44..48).contains(&o[1])
}

/// Every session of UE `ue`: the uplink PDR matches the S1-U SGW F-TEID
/// the eNB was given and removes the outer header; the downlink FAR
/// forwards to exactly the F-TEID the eNB put in its ICS Response.
fn assert_user_plane(net: &Network, ue: u64) {
    let s = net.sgw_session(ue).unwrap_or_else(|| panic!("UE {ue} has an SGW-C session"));
    let ctx = net.ue(ue);
    assert_eq!(ctx.erabs.len(), 1, "UE {ue}: one E-RAB");
    let erab = ctx.erabs[0];
    assert_eq!(erab.sgw, Some(s.s1u_sgw), "UE {ue}: the eNB got the SGW-C's S1-U F-TEID");
    assert_eq!(s.s1u_enb, Some(erab.enb), "UE {ue}: Modify Bearer gave the SGW-C the eNB F-TEID");
    assert_eq!(s.ue_ipv4, net.ipv4(ue), "UE {ue}: PAA is the UE's address");
    let rules = net.upf_rules(ue).unwrap_or_else(|| panic!("UE {ue}: rules installed on the UPF"));
    let ul = rules
        .pdrs
        .values()
        .find(|p| p.pdi.source_interface == INTERFACE_ACCESS)
        .unwrap_or_else(|| panic!("UE {ue}: uplink PDR"));
    assert_eq!(ul.pdi.local_fteid, Some((s.s1u_sgw.teid.0, s.s1u_sgw.ipv4)), "UE {ue}: UL PDR F-TEID");
    assert!(ul.outer_header_removal.is_some(), "UE {ue}: UL PDR removes the GTP-U header");
    let ul_far = &rules.fars[&ul.far_id.expect("UL PDR has a FAR")];
    assert!(ul_far.action.forw);
    assert_eq!(ul_far.destination_interface, Some(INTERFACE_CORE));
    let dl = rules
        .pdrs
        .values()
        .find(|p| p.pdi.source_interface == INTERFACE_CORE)
        .unwrap_or_else(|| panic!("UE {ue}: downlink PDR"));
    assert_eq!(dl.pdi.ue_ipv4, s.ue_ipv4, "UE {ue}: DL PDR matches the UE address");
    let dl_far = &rules.fars[&dl.far_id.expect("DL PDR has a FAR")];
    assert!(dl_far.action.forw, "UE {ue}: DL FAR forwards");
    assert_eq!(dl_far.destination_interface, Some(INTERFACE_ACCESS));
    let ohc = dl_far.outer_header_creation.expect("DL FAR creates an outer header");
    assert_eq!((ohc.teid, ohc.ipv4), (erab.enb.teid.0, erab.enb.ipv4), "UE {ue}: DL FAR to the eNB F-TEID");
}

#[test]
fn fifty_ues_on_three_enbs_attach_and_detach_leaving_no_state() {
    let n = 50;
    let mut net = Network::new(3, n, NetworkConfig::default());
    net.s1_setup_all();
    assert_eq!(net.mme_stats().enbs, 3);
    for ue in 0..n {
        net.attach(ue);
    }
    net.drive();
    let mut gutis = HashSet::new();
    let mut ips = HashSet::new();
    for ue in 0..n {
        assert!(net.attached(ue), "UE {ue}: {:?}", net.outcomes(ue));
        assert_eq!(net.ue(ue).ue.emm_state(), EmmState::Registered);
        assert!(gutis.insert(net.guti(ue).expect("GUTI")), "UE {ue}: GUTI distinct");
        let ip = net.ipv4(ue).expect("IPv4");
        assert!(in_pool(ip), "UE {ue}: {ip} in 10.44.0.0/14");
        assert!(ips.insert(ip), "UE {ue}: address distinct");
        assert_user_plane(&net, ue);
    }
    assert_eq!(net.mme_stats().attached, n as usize);
    assert!(net.delivered > 20 * n as usize, "{} messages delivered", net.delivered);
    assert_eq!(net.spgwc.sessions().len(), n as usize);
    assert_eq!(net.plane.table.len(), n as usize);
    assert_eq!(net.upf.sessions().len(), n as usize);
    // eNB F-TEIDs are distinct across eNBs too (the eNB ID is in the TEID).
    let enb_fteids: HashSet<_> = (0..n).map(|u| net.enb_fteid(u).unwrap()).collect();
    assert_eq!(enb_fteids.len(), n as usize);

    for ue in 0..n {
        net.detach(ue, ue % 2 == 0);
    }
    net.drive();
    for ue in 0..n {
        assert_eq!(net.last_result(ue, Procedure::Detach), Some(Ok(())), "UE {ue}: {:?}", net.outcomes(ue));
        assert_eq!(net.ue(ue).ue.emm_state(), EmmState::Deregistered);
        assert!(net.sgw_session(ue).is_none());
    }
    assert_eq!(net.mme_stats().ues, 0, "MME holds no UE context");
    assert!(net.spgwc.sessions().is_empty(), "SGW-C holds no session");
    assert!(net.upf.sessions().is_empty(), "UPF holds no PFCP session");
    assert!(net.plane.table.is_empty(), "forwarding plane holds no rules");
    assert_eq!(net.spgwc.counters.value("sessions_deleted"), n);
    assert!(net.anomalies().is_empty(), "{:?}", net.anomalies());
}

#[test]
fn guti_reattach_after_detach_keeps_the_guti() {
    let mut net = Network::new(1, 2, NetworkConfig::default());
    net.s1_setup_all();
    net.attach(0);
    net.drive();
    assert!(net.attached(0));
    let guti = net.guti(0).expect("GUTI after attach");
    net.detach(0, false);
    net.drive();
    assert_eq!(net.last_result(0, Procedure::Detach), Some(Ok(())));
    assert_eq!(net.guti(0), Some(guti.clone()), "the UE keeps its GUTI after detach");
    assert!(net.ue(0).ue.has_security_context());
    assert_eq!(net.mme_stats().ues, 0);

    net.attach(0);
    net.drive();
    assert!(net.attached(0), "{:?}", net.outcomes(0));
    assert_eq!(net.outcomes(0).len(), 3);
    assert!(net.guti(0).is_some());
    assert!(net.ipv4(0).is_some_and(in_pool));
    assert_user_plane(&net, 0);
    // The MME forgot the GUTI at detach; the attach by GUTI still ends registered.
    assert_eq!(net.mme_stats().attached, 1);
    assert_eq!(net.spgwc.sessions().len(), 1);
    assert_eq!(net.plane.table.len(), 1);
}

#[test]
fn same_scenario_same_run() {
    let run = || {
        let mut net = Network::new(2, 6, NetworkConfig::default());
        net.s1_setup_all();
        for ue in 0..6 {
            net.attach(ue);
        }
        net.drive();
        (0..6).map(|u| (net.guti(u), net.ipv4(u), net.enb_fteid(u))).collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn idle_network_only_heartbeats_and_keeps_sessions() {
    let mut net = Network::new(1, 2, NetworkConfig::default());
    net.s1_setup_all();
    net.attach(0);
    net.attach(1);
    net.drive();
    let t0 = net.now;
    // There is always a next deadline (the SGW-C's PFCP heartbeat), so the
    // bound is what stops this.
    assert_eq!(net.drive_bounded(20), 20);
    assert!(net.now - t0 >= std::time::Duration::from_secs(60), "virtual time moved");
    assert!(net.spgwc.upf_associated(0), "heartbeats kept the association");
    assert_eq!(net.spgwc.counters.value("pfcp_timeout"), 0);
    assert!(net.attached(0) && net.attached(1));
    assert_eq!(net.mme_stats().attached, 2);
    assert_eq!(net.plane.table.len(), 2);
    assert!(net.anomalies().is_empty(), "{:?}", net.anomalies());
}
