//! The running UPF (its tokio shell on loopback UDP) sends its own PFCP
//! Heartbeat Requests to an associated CP function (TS 29.244 6.2.2),
//! retransmits them every T1 up to N1 times (6.4) and declares a CP
//! function that never answers dead, then deletes its sessions after the
//! grace period. Short intervals, generous bounds: no tight timing.
//! No root needed.

use mobicore_upf::pfcp::{decode, encode, first, msg};
use mobicore_upf::{Upf, UpfConfig};
use rs_pfcp::ie::cause::Cause;
use rs_pfcp::ie::node_id::NodeId;
use rs_pfcp::ie::recovery_time_stamp::RecoveryTimeStamp;
use rs_pfcp::ie::IeType;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant, SystemTime};
use tokio::net::UdpSocket;

// Addresses of this test's own, so that nothing else on loopback collides.
const UPF: Ipv4Addr = Ipv4Addr::new(127, 0, 89, 1);
const CP: Ipv4Addr = Ipv4Addr::new(127, 0, 89, 2);

/// Waits (at most `bound`) until `cond` holds.
async fn wait_for(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + bound;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

#[tokio::test]
async fn a_cp_function_that_never_answers_heartbeats_is_declared_dead() {
    let n1 = 2;
    let cfg = UpfConfig {
        pfcp: (UPF, 0).into(),
        node_id: UPF,
        heartbeat_interval_ms: 100,
        t1: Duration::from_millis(100),
        n1,
        peer_dead_grace_ms: 300,
        ..UpfConfig::default()
    };
    let upf = Upf::bind(cfg).await.unwrap();
    let addr = upf.pfcp_addr();
    let counters = upf.counters.clone();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(upf.run(shutdown));

    // Associate, then only listen.
    let cp = UdpSocket::bind((CP, 0)).await.unwrap();
    let setup = encode(
        msg::ASSOCIATION_SETUP_REQUEST,
        None,
        1,
        &[NodeId::new_ipv4(CP).to_ie(), RecoveryTimeStamp::new(SystemTime::now()).to_ie()],
    );
    cp.send_to(&setup, addr).await.unwrap();
    let mut buf = vec![0; 65536];
    let mut heartbeats: Vec<u32> = vec![];
    let mut accepted = false;
    // Every Heartbeat Request of the first one's lifetime: 1 + N1 copies.
    let deadline = Instant::now() + Duration::from_secs(20);
    while heartbeats.len() < 1 + n1 as usize + 1 && Instant::now() < deadline {
        let Ok(r) = tokio::time::timeout(Duration::from_secs(5), cp.recv_from(&mut buf)).await else { break };
        let (n, from) = r.unwrap();
        assert_eq!(from, addr);
        let (h, ies) = decode(&buf[..n]).unwrap();
        match h.msg_type {
            msg::ASSOCIATION_SETUP_RESPONSE => {
                let c = Cause::unmarshal(&first(&ies, IeType::Cause).unwrap().payload).unwrap();
                accepted = c.value as u8 == 1;
            }
            msg::HEARTBEAT_REQUEST => {
                assert!(first(&ies, IeType::RecoveryTimeStamp).is_some(), "our Recovery Time Stamp");
                heartbeats.push(h.seq);
            }
            t => panic!("unexpected message type {t}"),
        }
    }
    assert!(accepted, "the association was set up");
    // The first Heartbeat Request and its N1 retransmissions (same
    // sequence number), then a new one after the first was given up.
    assert!(heartbeats.len() > 1 + n1 as usize, "{heartbeats:?}");
    assert!(heartbeats[..=n1 as usize].iter().all(|s| *s == heartbeats[0]), "{heartbeats:?}");
    assert_ne!(heartbeats[1 + n1 as usize], heartbeats[0], "{heartbeats:?}");
    assert!(counters.value("pfcp_heartbeat_sent") >= 2);
    assert!(
        wait_for(Duration::from_secs(10), || counters.value("pfcp_peer_dead") >= 1).await,
        "declared dead: {:?}",
        counters.snapshot()
    );
    // After the grace period the association is gone.
    assert!(
        wait_for(Duration::from_secs(10), || counters.value("pfcp_dead_peer_association_deleted") >= 1).await,
        "association deleted: {:?}",
        counters.snapshot()
    );
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
}
