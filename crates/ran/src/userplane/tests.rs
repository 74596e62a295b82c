//! End-to-end tests of the eNB user plane over real namespaces, with the
//! TEST-ONLY GTP-U reflector of [`super::reflector`] standing in for the
//! UPF. They need root and remove every namespace they create.

use std::net::Ipv4Addr;
use std::time::Duration;

use mobicore_common::{Fteid, Teid};
use mobicore_netns::{exec_in, unique_tag, Topology};

use super::reflector::Reflector;
use super::*;

fn tunnels(t: &Topology, n: u8) -> Vec<UeTunnel> {
    (0..n)
        .map(|i| UeTunnel {
            ue_ip: Ipv4Addr::new(10, 45, 0, 2 + i),
            sgw: Fteid { teid: Teid(0x100 + u32::from(i)), ipv4: t.addr.core_s1u },
            enb: Fteid { teid: Teid(0x900 + u32::from(i)), ipv4: t.addr.ran_s1u },
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_udp_and_tcp_of_two_ues_through_gtpu() {
    let topo = Topology::create(&unique_tag("mct")).unwrap();
    let tuns = tunnels(&topo, 2);
    let reflector = Reflector::start(&topo.core, topo.addr.core_s1u, &tuns).await;
    let up = UserPlane::start(UserPlaneConfig::new(&topo.ran, topo.addr.ran_s1u), tuns.clone()).await.unwrap();

    let mut cfg = TrafficConfig::new(&topo.ran, &topo.dn, topo.addr.dn_sgi);
    cfg.icmp_count = 5;
    cfg.icmp_interval = Duration::from_millis(1);
    cfg.udp_count = 20;
    cfg.tcp_bytes = 1 << 20;
    let ips: Vec<_> = tuns.iter().map(|t| t.ue_ip).collect();
    let r = run_traffic(cfg, ips).await.unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!((r.icmp.sent, r.icmp.received), (10, 10), "{r:?}");
    assert_eq!((r.udp.sent, r.udp.received), (40, 40), "{r:?}");
    assert_eq!(r.icmp.loss, 0.0);
    assert!(r.icmp.rtt_us.p50 > 0 && r.icmp.rtt_us.p99 >= r.icmp.rtt_us.p50);
    assert_eq!((r.tcp_uplink.completed, r.tcp_uplink.bytes), (2, 2 << 20));
    assert_eq!((r.tcp_downlink.completed, r.tcp_downlink.bytes), (2, 2 << 20));
    assert!(r.tcp_uplink.mbit_s > 0.0 && r.tcp_downlink.mbit_s > 0.0);

    let stats = up.stop().await.unwrap();
    let refl = reflector.stop().await;
    // Every packet crossed S1-U in GTP-U: what the reflector decapsulated
    // the eNB sent, what the eNB delivered the reflector sent (a full
    // socket buffer may lose some in between: TCP retransmits them).
    assert!(refl.uplink <= stats.uplink_packets, "{stats:?} {refl:?}");
    assert!(stats.downlink_packets <= refl.downlink, "{stats:?} {refl:?}");
    assert!(refl.uplink >= 10 + 40 + 2 * 700, "{refl:?}");
    assert!(stats.downlink_packets >= 10 + 40 + 2 * 700, "{stats:?}");
    assert_eq!(stats.dropped(), 0, "{stats:?}");
    assert_eq!(refl.dropped, 0, "{refl:?}");
    // The policy rule is gone with the user plane.
    let rules = exec_in(&topo.ran, &["ip", "rule"]).unwrap();
    assert!(!String::from_utf8_lossy(&rules.stdout).contains("10.44.0.0/14"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ue_without_a_tunnel_gets_no_service_and_added_ues_do() {
    let topo = Topology::create(&unique_tag("mct")).unwrap();
    let tuns = tunnels(&topo, 2);
    let reflector = Reflector::start(&topo.core, topo.addr.core_s1u, &tuns).await;
    let up = UserPlane::start(UserPlaneConfig::new(&topo.ran, topo.addr.ran_s1u), vec![tuns[0]]).await.unwrap();
    let mut cfg = TrafficConfig::new(&topo.ran, &topo.dn, topo.addr.dn_sgi);
    cfg.icmp_count = 2;
    cfg.udp_count = 0;
    cfg.tcp_bytes = 0;
    cfg.reply_timeout = Duration::from_millis(200);
    // UE 1 has no address yet: its sockets can't even bind.
    let r = run_traffic(cfg.clone(), vec![tuns[1].ue_ip]).await.unwrap();
    assert_eq!(r.icmp.received, 0);
    assert_eq!(r.errors.len(), 1, "{r:?}");

    up.add(vec![tuns[1]]).await.unwrap();
    let r = run_traffic(cfg.clone(), vec![tuns[1].ue_ip]).await.unwrap();
    assert_eq!((r.icmp.sent, r.icmp.received), (2, 2), "{r:?}");

    up.remove(vec![tuns[1].ue_ip]).await.unwrap();
    let r = run_traffic(cfg, vec![tuns[1].ue_ip]).await.unwrap();
    assert_eq!(r.icmp.received, 0);
    let stats = up.stats().await.unwrap();
    assert_eq!(stats.uplink_packets, 2);
    drop(up);
    reflector.stop().await;
}
