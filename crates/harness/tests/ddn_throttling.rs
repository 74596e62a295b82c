//! Throttling of Downlink Data Notifications (TS 23.401 4.3.7.4.1a)
//! through the whole core in memory, under the virtual clock: an MME with
//! more pagings running than its threshold puts the Throttling IE (TS
//! 29.274 8.85) in its DDN Acknowledge; for the Throttling Delay the
//! S/P-GW-C drops that share of the notifications of low-priority bearers
//! (ARP priority level above `ddn_low_priority_arp_above`) with their
//! buffered data, and never those of other bearers.

use mobicore_harness::{Network, NetworkConfig};
use mobicore_mme::config::DdnThrottlingConfig;
use mobicore_ran::ue::Procedure;
use std::time::Duration;

const INACTIVITY: Duration = Duration::from_secs(10);
const DELAY: Duration = Duration::from_secs(20);

/// `n` UEs on one eNB, all attached and idle; the UEs in `high` have the
/// ARP priority level 1 in their subscription, the others the default 9.
/// The MME throttles by `factor` percent while any paging runs.
fn idle_network(n: u64, high: &[u64], factor: u8) -> Network {
    idle_network_with(n, high, factor, None)
}

/// The same, the MME rejecting under load the DDNs of ARP priority levels
/// above `reject`.
fn idle_network_with(n: u64, high: &[u64], factor: u8, reject: Option<u8>) -> Network {
    let mut cfg = NetworkConfig { inactivity_timeout: Some(INACTIVITY), ..NetworkConfig::default() };
    // The load is the pagings running at the MME that pages: a decomposed
    // MME's host judges its own, so these UEs share one host.
    cfg.mme_mode = cfg.mme_mode.with_hosts(1);
    cfg.mme.ddn_throttling = DdnThrottlingConfig {
        pagings_above: Some(0),
        factor_percent: factor,
        delay_seconds: DELAY.as_secs() as u32,
        reject_arp_above: reject,
    };
    let mut net = Network::new(1, n, cfg);
    for &ue in high {
        let imsi = net.imsi(ue);
        net.hss.store().update(&imsi, |s| s.apns[0].arp_priority = 1).expect("a provisioned subscriber");
    }
    net.s1_setup_all();
    for ue in 0..n {
        net.attach(ue);
    }
    net.drive();
    for ue in 0..n {
        assert!(net.attached(ue), "UE {ue}: {:?}", net.outcomes(ue));
    }
    net.advance(INACTIVITY + Duration::from_secs(1));
    assert_eq!(net.mme.counters().value("ue_idle"), n, "every UE released to idle");
    net
}

fn connected(net: &Network, ue: u64) -> bool {
    net.enbs.iter().any(|e| e.ue(ue).is_some_and(|c| c.s1.is_some()))
}

/// A paging that keeps running: UE `ue` is out of coverage and its
/// downlink pages it; the MME's Acknowledge asks for throttling.
fn load_the_mme(net: &mut Network, ue: u64) -> mobicore_ran::ue::Ue {
    net.send_downlink(ue, 0);
    let away = net.enbs[0].take_idle_ue(ue).expect("an idle UE");
    net.drive();
    assert_eq!(net.mme.pagings(), 1);
    assert_eq!(net.mme.counters().value("ddn_throttling_requested"), 1);
    assert_eq!(net.spgwc.counters.value("ddn_throttling_received"), 1);
    away
}

#[test]
fn low_priority_ddn_is_throttled_during_the_delay_and_paged_after_it() {
    // UE 0 low priority, UE 1 high priority, UE 2 the load.
    let mut net = idle_network(3, &[1], 100);
    assert_eq!(net.sgw_session(0).unwrap().arp.priority_level, 9);
    assert_eq!(net.sgw_session(1).unwrap().arp.priority_level, 1);
    let away = load_the_mme(&mut net, 2);
    let start = net.now;

    // Within the delay: UE 0's notification is dropped with its data.
    net.send_downlink(0, 0);
    net.drive();
    let s = &net.spgwc.counters;
    assert_eq!(s.value("ddn_throttled"), 1);
    assert_eq!(s.value("ddn_sent"), 1, "only UE 2's DDN went to the MME");
    assert!(!connected(&net, 0), "UE 0 was not paged");
    assert_eq!(net.downlink_received(0), &[] as &[u32]);
    // The high-priority UE is paged as ever, and gets its data.
    net.send_downlink(1, 0);
    net.drive();
    assert!(connected(&net, 1));
    assert_eq!(net.downlink_received(1), &[0]);
    assert_eq!(net.last_result(1, Procedure::PagingResponse), Some(Ok(())));
    // Later low-priority data within the delay goes the same way (its
    // buffer was re-armed, so it is reported again).
    net.advance(Duration::from_secs(5));
    net.send_downlink(0, 1);
    net.drive();
    assert_eq!(net.spgwc.counters.value("ddn_throttled"), 2);
    assert!(!connected(&net, 0));

    // The delay (restarted by UE 1's Acknowledge, sent under the same
    // load) runs out; UE 2's paging has failed meanwhile.
    net.advance(DELAY + Duration::from_secs(1) - (net.now - start));
    assert_eq!(net.mme.counters().value("paging_failed"), 1);
    assert_eq!(net.mme.pagings(), 0);
    net.send_downlink(0, 2);
    net.drive();
    assert!(connected(&net, 0), "after the delay UE 0 is paged");
    assert_eq!(net.downlink_received(0), &[2], "the data dropped while throttled never arrives");
    assert_eq!(net.spgwc.counters.value("ddn_throttled"), 2);
    assert_eq!(net.spgwc.counters.value("ddn_throttling_ended"), 1);
    drop(away);
}

#[test]
fn the_factor_drops_that_share_of_low_priority_notifications_and_no_other() {
    // UEs 0..8 low priority, 8..12 high priority, 12 the load; 50 percent.
    let high: Vec<u64> = (8..12).collect();
    let mut net = idle_network(13, &high, 50);
    let _away = load_the_mme(&mut net, 12);
    for ue in 0..12 {
        net.send_downlink(ue, 0);
        net.drive();
    }
    // Every second low-priority notification in a row, none of the others.
    let paged: Vec<u64> = (0..12).filter(|&u| connected(&net, u)).collect();
    assert_eq!(paged, vec![0, 2, 4, 6, 8, 9, 10, 11]);
    for ue in paged {
        assert_eq!(net.downlink_received(ue), &[0], "UE {ue}");
    }
    assert_eq!(net.spgwc.counters.value("ddn_throttled"), 4);
    assert_eq!(net.spgwc.counters.value("downlink_buffer_discarded"), 4);
}

/// TS 23.401 4.3.7.4.1a: an MME under load may reject the DDNs of low
/// priority traffic itself: "Unable to page UE", the UE not paged, the
/// S-GW's buffer discarded; a high-priority bearer's DDN is paged as ever.
#[test]
fn an_overloaded_mme_rejects_low_priority_notifications() {
    // UE 0 low priority (ARP 9), UE 1 high (1), UE 2 the load; the S-GW
    // throttles nothing, so every DDN reaches the MME.
    let mut net = idle_network_with(3, &[1], 0, Some(8));
    net.send_downlink(2, 0);
    let _away = net.enbs[0].take_idle_ue(2).expect("an idle UE");
    net.drive();
    assert_eq!(net.mme.pagings(), 1);
    net.send_downlink(0, 0);
    net.drive();
    assert_eq!(net.mme.counters().value("ddn_rejected_low_priority"), 1);
    assert_eq!(net.spgwc.counters.value("ddn_rejected"), 1);
    assert_eq!(net.spgwc.counters.value("downlink_buffer_discarded"), 1);
    assert!(!connected(&net, 0), "UE 0 was not paged");
    net.send_downlink(1, 0);
    net.drive();
    assert!(connected(&net, 1));
    assert_eq!(net.downlink_received(1), &[0]);
    assert_eq!(net.mme.counters().value("ddn_rejected_low_priority"), 1);
    // Once the load is gone the low-priority UE is paged again.
    net.advance(Duration::from_secs(60));
    assert_eq!(net.mme.pagings(), 0);
    net.send_downlink(0, 1);
    net.drive();
    assert!(connected(&net, 0));
    assert_eq!(net.downlink_received(0), &[1]);
}

#[test]
fn an_mme_below_its_threshold_asks_for_no_throttling() {
    let mut cfg = NetworkConfig { inactivity_timeout: Some(INACTIVITY), ..NetworkConfig::default() };
    cfg.mme.ddn_throttling.pagings_above = Some(1);
    let mut net = Network::all_attached(1, 2, cfg);
    net.advance(INACTIVITY + Duration::from_secs(1));
    net.send_downlink(0, 0);
    net.drive();
    assert_eq!(net.downlink_received(0), &[0]);
    assert_eq!(net.mme.counters().value("ddn_throttling_requested"), 0);
    assert_eq!(net.spgwc.counters.value("ddn_throttling_received"), 0);
}
