//! PDN connections after attach through the whole core in memory (TS
//! 24.301 6.5.1, 6.5.2; TS 23.401 5.10.2, 5.10.3): the emulated UE asks for
//! a second APN ("ims") on its connection, the MME creates the session on
//! S11 and sets up its E-RAB (E-RAB SETUP, TS 36.413 8.2.1), the UPF
//! forwards the new address's downlink to that E-RAB's tunnel; the UE gives
//! the PDN up (E-RAB RELEASE, 8.2.3) and the session goes everywhere; an
//! APN the subscription lacks is refused with ESM #27, and the last PDN
//! cannot be given up (#49).

use mobicore_common::Ambr;
use mobicore_harness::userplane::numbered_packet;
use mobicore_harness::{Network, NetworkConfig};
use mobicore_hss::ApnProfile;
use mobicore_ran::ue::Procedure;
use mobicore_spgwc::config::ApnConfig;
use mobicore_upf::dataplane::{Transmit, Verdict};
use std::net::Ipv4Addr;

fn network() -> Network {
    // APN-AMBRs under the subscribed UE-AMBR, so that their sum shows.
    let apn = |name: &str, uplink: u64, downlink: u64| ApnProfile {
        ambr: Ambr { uplink, downlink },
        ..ApnProfile::new(name)
    };
    let apns = vec![apn("internet", 10_000_000, 20_000_000), apn("ims", 1_000_000, 2_000_000)];
    let mut cfg = NetworkConfig { apns, ..Default::default() };
    cfg.spgwc.apns.push(ApnConfig::ipv4("ims", Ipv4Addr::new(10, 60, 0, 0), 16));
    Network::all_attached(1, 2, cfg)
}

/// UE `ue`'s S-GW sessions, by APN.
fn apns(net: &Network, ue: u64) -> Vec<String> {
    let imsi = net.imsi(ue);
    let mut v: Vec<String> = net.spgwc.sessions().values().filter(|s| s.imsi == imsi).map(|s| s.apn.clone()).collect();
    v.sort();
    v
}

#[test]
fn a_second_pdn_is_set_up_carries_its_downlink_and_is_given_up() {
    let mut net = network();
    let now = net.now;
    net.enbs[0].start_pdn_connectivity(now, 0, "ims").unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::PdnConnectivity), Some(Ok(())), "{:?}", net.outcomes(0));
    let pdn = net.enbs[0].ue(0).unwrap().ue.pdn_connections()[0].clone();
    assert_eq!(pdn.apn, "ims");
    let ims_ip = pdn.ipv4.expect("an address of the ims pool");
    assert_eq!(ims_ip.octets()[..2], [10, 60]);
    assert_eq!(apns(&net, 0), ["ims", "internet"]);
    assert_eq!(apns(&net, 1), ["internet"], "UE 1 untouched");
    // The E-RAB of the new default bearer, and the UPF's downlink to it.
    let ctx = net.enbs[0].ue(0).unwrap();
    let erab = *ctx.erabs.iter().find(|e| u32::from(e.e_rab_id) == u32::from(pdn.ebi)).expect("the new E-RAB");
    assert_eq!(ctx.erabs.len(), 2);
    // TS 23.401 4.7.3: the eNB's UE-AMBR is the sum of both APN-AMBRs.
    assert_eq!(ctx.ambr, Some((11_000_000, 22_000_000)));
    let now = net.now;
    let tunnel = {
        let mut up = net.plane.user.lock();
        assert_eq!(up.downlink(now, &numbered_packet(ims_ip, 7)), Verdict::Forwarded);
        match up.poll_transmit() {
            Some(Transmit::Gtpu { to, bytes }) => (*to.ip(), u32::from_be_bytes(bytes[4..8].try_into().unwrap())),
            other => panic!("no G-PDU for the ims address: {other:?}"),
        }
    };
    assert_eq!(tunnel, (erab.enb.ipv4, erab.enb.teid.0), "to the ims E-RAB's tunnel");
    // Given up: the E-RAB, the S-GW session and the UPF's rules go.
    let now = net.now;
    net.enbs[0].start_pdn_disconnect(now, 0, pdn.ebi).unwrap();
    net.drive();
    assert_eq!(net.last_result(0, Procedure::PdnDisconnect), Some(Ok(())), "{:?}", net.outcomes(0));
    assert!(net.enbs[0].ue(0).unwrap().ue.pdn_connections().is_empty());
    assert_eq!(net.enbs[0].ue(0).unwrap().erabs.len(), 1);
    assert_eq!(net.enbs[0].ue(0).unwrap().ambr, Some((10_000_000, 20_000_000)), "internet's alone again");
    assert_eq!(apns(&net, 0), ["internet"]);
    let now = net.now;
    assert!(matches!(net.plane.user.lock().downlink(now, &numbered_packet(ims_ip, 8)), Verdict::Dropped(_)));
    // The default PDN still carries traffic, and the UE detaches.
    net.send_downlink(0, 9);
    net.drive();
    assert_eq!(net.downlink_received(0), &[9]);
    net.detach(0, false);
    net.drive();
    assert_eq!(net.last_result(0, Procedure::Detach), Some(Ok(())), "{:?}", net.outcomes(0));
    assert_eq!(apns(&net, 0), Vec::<String>::new());
}

#[test]
fn an_apn_not_subscribed_is_refused_and_the_last_pdn_cannot_be_given_up() {
    let mut net = network();
    let now = net.now;
    net.enbs[0].start_pdn_connectivity(now, 1, "corporate").unwrap();
    net.drive();
    let r = net.last_result(1, Procedure::PdnConnectivity).expect("an outcome");
    assert_eq!(r, Err("PDN CONNECTIVITY REJECT #27".to_string()), "TS 24.301 6.5.1.4: missing or unknown APN");
    assert_eq!(apns(&net, 1), ["internet"]);
    let ebi = net.enbs[0].ue(1).unwrap().ue.default_bearer().unwrap().ebi;
    let now = net.now;
    net.enbs[0].start_pdn_disconnect(now, 1, ebi).unwrap();
    net.drive();
    let r = net.last_result(1, Procedure::PdnDisconnect).expect("an outcome");
    assert_eq!(r, Err("PDN DISCONNECT REJECT #49".to_string()), "TS 24.301 6.5.2.4: last PDN connection");
    assert_eq!(apns(&net, 1), ["internet"]);
}
