//! Numbered downlink packets through the UPF's real user-space data path,
//! in memory: delivery to the right eNB and UE, buffering while the UE has
//! no S1-U tunnel, release in order.

use mobicore_harness::userplane::StreamCheck;
use mobicore_harness::{Network, NetworkConfig};

fn attached(n_enbs: usize, n_ues: u64) -> Network {
    Network::all_attached(n_enbs, n_ues, NetworkConfig::default())
}

#[test]
fn downlink_reaches_each_ue_in_order() {
    let mut net = attached(2, 4);
    for seq in 0..20 {
        for ue in 0..4 {
            net.send_downlink(ue, seq);
        }
        net.drive();
    }
    for ue in 0..4 {
        let c = StreamCheck::of(net.downlink_received(ue), 20);
        assert!(c.clean() && c.received == 20, "UE {ue}: {c:?}");
    }
    assert!(net.s1u.unknown_teid.is_empty(), "{:?}", net.s1u.unknown_teid);
}

#[test]
fn stream_check_counts_loss_duplicates_and_reordering() {
    let c = StreamCheck::of(&[0, 1, 3, 2, 3, 5], 6);
    assert_eq!((c.received, c.lost, c.duplicated, c.reordered), (6, 1, 1, 1));
    assert!(!c.clean());
    assert!(StreamCheck::of(&[0, 1, 2], 3).clean());
}
