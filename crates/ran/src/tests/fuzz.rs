//! Nothing an "MME" sends can panic the eNB or its UEs.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::mme::*;
use crate::enb::s1ap_handler;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn s1ap_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = s1ap_handler::decode(&bytes);
    }

    #[test]
    fn arbitrary_s1ap_never_panics_the_enb(
        pdus in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..6),
    ) {
        let now = Instant::now();
        let mut enb = ready_enb(now);
        enb.start_attach(now, 0).unwrap();
        let _ = drain(&mut enb);
        for p in &pdus {
            enb.handle_s1ap(now, 1, p);
            let _ = drain(&mut enb);
        }
        enb.handle_timeout(now + Duration::from_secs(60));
        let _ = drain(&mut enb);
    }

    #[test]
    fn arbitrary_nas_never_panics_the_ue(
        nas in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 1..5),
        secured in any::<bool>(),
    ) {
        let now = Instant::now();
        let mut enb = ready_enb(now);
        let mut mme = FakeMme::new();
        let id = if secured {
            attach(&mut enb, &mut mme, now)
        } else {
            enb.start_attach(now, 0).unwrap();
            uplink_nas(&sends(&mut enb)[0].1).0
        };
        for n in &nas {
            enb.handle_s1ap(now, 1, &downlink_nas(id, n.clone()));
            let _ = drain(&mut enb);
            // Also as the NAS of an INITIAL CONTEXT SETUP REQUEST.
            enb.handle_s1ap(now, 1, &ics_request(id, n.clone(), [0; 32]));
            let _ = drain(&mut enb);
        }
    }

    #[test]
    fn mutated_protected_nas_never_panics_the_ue(flip in 0usize..64, bit in 0u8..8) {
        let now = Instant::now();
        let mut enb = ready_enb(now);
        let mut mme = FakeMme::new();
        let id = attach(&mut enb, &mut mme, now);
        let mut pdu = mme.attach_accept();
        let at = flip % pdu.len();
        pdu[at] ^= 1 << bit;
        enb.handle_s1ap(now, 1, &downlink_nas(id, pdu));
        let _ = drain(&mut enb);
    }
}
