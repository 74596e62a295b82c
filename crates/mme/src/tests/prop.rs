use super::*;
use crate::MmeEvent;
use bytes::Bytes;
use mobicore_common::sctp_api::AssocId;
use proptest::prelude::*;

/// What another UE's state looks like from outside.
fn fingerprint(h: &Harness, id: u32) -> String {
    let u = &h.mme.ues[&id];
    let counts = u.security.as_ref().map(|s| {
        (
            s.ctx.nas_count(oxirush_nas::nas_eps::Direction::Uplink),
            s.ctx.nas_count(oxirush_nas::nas_eps::Direction::Downlink),
        )
    });
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?}",
        u.emm,
        u.step,
        u.s1,
        u.guti,
        counts,
        u.sessions.iter().map(|s| s.enb_s1u).collect::<Vec<_>>()
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_s1_bytes_never_panic_nor_touch_other_ues(
        data in proptest::collection::vec(any::<u8>(), 0..200),
        from_other_enb in any::<bool>(),
        stream in 0u16..4,
    ) {
        let mut h = Harness::default();
        let ue = h.attach("001010000000041", 41);
        let id = ue.mme_ue_id.unwrap();
        let before = fingerprint(&h, id);
        let assoc = if from_other_enb { h.enb_up(AssocId(2)); AssocId(2) } else { AssocId(1) };
        h.mme.handle(h.now, MmeEvent::S1Data { assoc, stream, data: Bytes::from(data) });
        let _ = h.drain();
        if from_other_enb {
            prop_assert_eq!(fingerprint(&h, id), before);
        }
    }

    #[test]
    fn arbitrary_nas_in_uplink_transport_never_panics(
        nas in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        let mut h = Harness::default();
        let a = h.attach("001010000000042", 42);
        let b = h.attach("001010000000043", 43);
        let before = fingerprint(&h, b.mme_ue_id.unwrap());
        h.up(&a, nas.clone());
        h.s1(initial_ue_message(99, nas));
        let _ = h.drain();
        prop_assert_eq!(fingerprint(&h, b.mme_ue_id.unwrap()), before);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Valid PDUs of UE A with bytes changed: UE B is never touched.
    #[test]
    fn mutated_pdus_of_one_ue_leave_another_alone(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        which in 0usize..3,
    ) {
        let mut h = Harness::default();
        let mut a = h.attach("001010000000044", 44);
        let b = h.attach("001010000000045", 45);
        let before = fingerprint(&h, b.mme_ue_id.unwrap());
        let a_id = a.mme_ue_id.unwrap();
        let mut pdu = match which {
            0 => uplink_nas(a_id, 44, a.detach_request(false)),
            1 => ics_response(a_id, 44, 0x1234),
            _ => release_request(a_id, 44),
        };
        for (at, x) in flips {
            let n = pdu.len();
            pdu[at % n] ^= x;
        }
        h.s1(pdu);
        let _ = h.drain();
        prop_assert_eq!(fingerprint(&h, b.mme_ue_id.unwrap()), before);
    }
}
