//! Random garbage on S1 uplink, S11 and PFCP between normal attaches:
//! nothing panics and every normal attach still completes.

use bytes::Bytes;
use mobicore_harness::{Msg, Network, NetworkConfig};
use proptest::prelude::*;

/// Where a garbage datagram is put.
fn garbage_msg(kind: u8, enb: usize, bytes: Vec<u8>) -> Msg {
    let b = Bytes::from(bytes);
    match kind % 5 {
        0 => Msg::S1Uplink { enb, stream: 1, pdu: b },
        1 => Msg::S11ToSgw(b),
        2 => Msg::S11ToMme(b),
        3 => Msg::PfcpToUpf(b),
        _ => Msg::PfcpToCp(b),
    }
}

/// Garbage that often passes the first checks: a GTPv2-C or PFCP header
/// (version octet, a known message type) in front of random octets.
fn plausible(kind: u8, t: u8, mut body: Vec<u8>) -> Vec<u8> {
    let first = if kind % 5 == 3 || kind % 5 == 4 { 0x21 } else { 0x48 };
    let len = (body.len() as u16).to_be_bytes();
    let mut v = vec![first, t, len[0], len[1]];
    v.append(&mut body);
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn garbage_between_attaches_breaks_nothing(
        garbage in prop::collection::vec(
            (any::<u8>(), any::<bool>(), any::<u8>(), prop::collection::vec(any::<u8>(), 0..64)),
            1..12,
        ),
    ) {
        let n = 4u64;
        let mut net = Network::new(2, n, NetworkConfig::default());
        net.s1_setup_all();
        for (i, (kind, shaped, t, bytes)) in garbage.iter().enumerate() {
            let bytes = if *shaped { plausible(*kind, *t, bytes.clone()) } else { bytes.clone() };
            net.inject(garbage_msg(*kind, i % 2, bytes));
            if (i as u64) < n {
                net.attach(i as u64);
            }
            net.drive();
        }
        for ue in (garbage.len() as u64).min(n)..n {
            net.attach(ue);
        }
        net.drive();
        for ue in 0..n {
            prop_assert!(net.attached(ue), "UE {}: {:?}", ue, net.outcomes(ue));
        }
        prop_assert_eq!(net.mme_stats().attached, n as usize);
        prop_assert_eq!(net.spgwc.sessions().len(), n as usize);
        prop_assert_eq!(net.plane.table.len(), n as usize);
        // Time passing with the garbage answered changes nothing.
        net.advance(std::time::Duration::from_secs(30));
        prop_assert_eq!(net.spgwc.sessions().len(), n as usize);
    }
}
