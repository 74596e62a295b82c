//! The USIM of an emulated UE: Milenage (TS 35.206) and the sequence number
//! check of TS 33.102 6.3.3 with the array scheme of Annex C.2.2.

use mobicore_common::Imsi;
use oxirush_security::milenage::{Milenage, Opc, Sqn, K};
use oxirush_security::{Autn, Ck, Ik, Rand, SecurityError};

/// Bits of IND in SQN = SEQ || IND (TS 33.102 C.3.2).
pub const IND_BITS: u32 = 5;
/// Entries of the SEQ array, one per IND value (TS 33.102 C.2.2).
pub const IND_ENTRIES: usize = 1 << IND_BITS;
/// Δ, how far SEQ may run ahead of the highest accepted SEQ
/// (TS 33.102 C.2.1, the 2^28 of the example values).
pub const DELTA: u64 = 1 << 28;

/// What the USIM (and the ME around it) says to one AUTN.
#[derive(Debug)]
pub enum AuthOutcome {
    /// Genuine and fresh: RES for the network, CK and IK for KASME.
    Accepted(AkaResponse),
    /// MAC-A does not verify (cause #20, TS 24.301 5.4.2.6).
    MacFailure,
    /// The AMF separation bit is 0 (cause #26, TS 33.401 6.1.1).
    NonEpsAuthenticationUnacceptable,
    /// SQN out of range (cause #21) and the AUTS to resynchronise with.
    SynchFailure { auts: [u8; 14] },
}

/// The outputs of a successful challenge.
#[derive(Debug)]
pub struct AkaResponse {
    pub res: [u8; 8],
    pub ck: Ck,
    pub ik: Ik,
    pub sqn: u64,
}

/// A USIM: subscriber identity and keys, and the sequence number state.
#[derive(Clone)]
pub struct Usim {
    pub imsi: Imsi,
    pub k: [u8; 16],
    pub opc: [u8; 16],
    /// SQN_MS: the highest SQN accepted so far (48 bits).
    pub sqn: u64,
    /// The subscription's AMF (the AUTN carries the one in use).
    pub amf: u16,
    /// SEQ_MS(i) per IND value i (TS 33.102 C.2.2).
    seq_ms: [u64; IND_ENTRIES],
}

impl std::fmt::Debug for Usim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Usim").field("imsi", &self.imsi).field("sqn", &self.sqn).finish_non_exhaustive()
    }
}

impl Usim {
    /// A USIM that has accepted `sqn` last (0 for a fresh card).
    pub fn new(imsi: Imsi, k: [u8; 16], opc: [u8; 16], sqn: u64, amf: u16) -> Self {
        let sqn = sqn & Sqn::MAX;
        let mut seq_ms = [0; IND_ENTRIES];
        seq_ms[ind(sqn)] = seq(sqn);
        Usim { imsi, k, opc, sqn, amf, seq_ms }
    }

    fn milenage(&self) -> Milenage {
        Milenage::new(&K::new(&self.k), &Opc::new(&self.opc))
    }

    /// Check a challenge as a UE does (TS 33.102 6.3.3): MAC-A first, then
    /// the separation bit of the AMF (TS 33.401 6.1.1), then freshness of
    /// SQN. Only an accepted SQN updates the array.
    pub fn authenticate(&mut self, rand: &[u8; 16], autn: &[u8; 16]) -> AuthOutcome {
        let milenage = self.milenage();
        let rand = Rand::new(rand);
        let response = match milenage.check_autn(&rand, &Autn::new(autn)) {
            Ok(r) => r,
            Err(SecurityError::MacFailure) => return AuthOutcome::MacFailure,
            Err(_) => return AuthOutcome::MacFailure,
        };
        if !response.amf().separation_bit() {
            return AuthOutcome::NonEpsAuthenticationUnacceptable;
        }
        let sqn = response.sqn().get();
        if !self.sqn_acceptable(sqn) {
            let sqn_ms = Sqn::try_from(self.sqn).expect("48-bit SQN");
            let auts = milenage.auts(&rand, &sqn_ms);
            return AuthOutcome::SynchFailure { auts: *auts.as_octets() };
        }
        self.seq_ms[ind(sqn)] = seq(sqn);
        if seq(sqn) > seq(self.sqn) {
            self.sqn = sqn;
        }
        let mut res = [0; 8];
        res.copy_from_slice(response.res().as_octets());
        AuthOutcome::Accepted(AkaResponse { res, ck: response.ck().clone(), ik: response.ik().clone(), sqn })
    }

    /// TS 33.102 C.2.1 (SEQ - SEQ_MS <= Δ) and C.2.2 (SEQ > SEQ_MS(IND)).
    pub fn sqn_acceptable(&self, sqn: u64) -> bool {
        let (s, highest) = (seq(sqn), seq(self.sqn));
        let not_too_far = s <= highest || s - highest <= DELTA;
        not_too_far && s > self.seq_ms[ind(sqn)]
    }
}

fn seq(sqn: u64) -> u64 {
    sqn >> IND_BITS
}

fn ind(sqn: u64) -> usize {
    (sqn & (IND_ENTRIES as u64 - 1)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxirush_security::milenage::Amf;

    fn h<const N: usize>(s: &str) -> [u8; N] {
        let mut o = [0; N];
        hex::decode_to_slice(s, &mut o).unwrap();
        o
    }

    // TS 35.208 test set 1 (4.3.1): K, RAND, SQN, AMF, OPc and f1..f5.
    const K1: &str = "465b5ce8b199b49faa5f0a2ee238a6bc";
    const RAND1: &str = "23553cbe9637a89d218ae64dae47bf35";
    const SQN1: u64 = 0xff9b_b4d0_b607;
    const AMF1: &str = "b9b9";
    const OPC1: &str = "cd63cb71954a9f4e48a5994e37a02baf";
    const F1: &str = "4a9ffac354dfafb3"; // MAC-A
    const F2: &str = "a54211d5e3ba50bf"; // RES
    const F3: &str = "b40ba9a3c58b2a05bbf0d987b21bf8cb"; // CK
    const F4: &str = "f769bcd751044604127672711c6d3441"; // IK
    const F5: &str = "aa689c648370"; // AK

    /// AUTN = SQN xor AK || AMF || MAC-A, from the spec's own values.
    fn autn_from_spec(sqn: u64, mac_a: [u8; 8]) -> [u8; 16] {
        let ak: [u8; 6] = h(F5);
        let sqn_octets = &sqn.to_be_bytes()[2..];
        let mut autn = [0; 16];
        for i in 0..6 {
            autn[i] = sqn_octets[i] ^ ak[i];
        }
        autn[6..8].copy_from_slice(&h::<2>(AMF1));
        autn[8..].copy_from_slice(&mac_a);
        autn
    }

    fn usim_set1(sqn: u64) -> Usim {
        Usim::new("001010000000001".parse().unwrap(), h(K1), h(OPC1), sqn, 0xb9b9)
    }

    #[test]
    fn test_set_1_accepted_with_spec_outputs() {
        let mut usim = usim_set1(SQN1 - 32);
        let autn = autn_from_spec(SQN1, h(F1));
        let AuthOutcome::Accepted(r) = usim.authenticate(&h(RAND1), &autn) else { panic!("not accepted") };
        assert_eq!(r.res, h::<8>(F2));
        assert_eq!(r.ck.as_octets(), &h::<16>(F3));
        assert_eq!(r.ik.as_octets(), &h::<16>(F4));
        assert_eq!(r.sqn, SQN1);
        assert_eq!(usim.sqn, SQN1);
        // The same challenge again is a replay: synch failure.
        assert!(matches!(usim.authenticate(&h(RAND1), &autn), AuthOutcome::SynchFailure { .. }));
    }

    #[test]
    fn wrong_mac_is_mac_failure_and_leaves_state() {
        let mut usim = usim_set1(0);
        let mut mac: [u8; 8] = h(F1);
        mac[7] ^= 1;
        let autn = autn_from_spec(SQN1, mac);
        assert!(matches!(usim.authenticate(&h(RAND1), &autn), AuthOutcome::MacFailure));
        assert_eq!(usim.sqn, 0);
    }

    #[test]
    fn stale_sqn_gives_auts_that_the_hss_verifies() {
        let mut usim = usim_set1(SQN1 + 64);
        let autn = autn_from_spec(SQN1, h(F1));
        let AuthOutcome::SynchFailure { auts } = usim.authenticate(&h(RAND1), &autn) else {
            panic!("expected synch failure")
        };
        let hss = Milenage::new(&K::new(&h(K1)), &Opc::new(&h(OPC1)));
        let sqn_ms = hss.verify_auts(&Rand::new(&h(RAND1)), &oxirush_security::milenage::Auts::new(&auts)).unwrap();
        assert_eq!(sqn_ms.get(), SQN1 + 64);
    }

    #[test]
    fn array_scheme_accepts_out_of_order_ind_but_not_reuse() {
        let plan_opc: [u8; 16] = h(OPC1);
        let mut usim = Usim::new("001010000000001".parse().unwrap(), h(K1), plan_opc, 0, 0x8000);
        let hss = Milenage::new(&K::new(&h(K1)), &Opc::new(&plan_opc));
        let rand = Rand::new(&[7; 16]);
        let amf = Amf::new(&[0x80, 0]);
        let mut challenge = |sqn: u64| {
            let v = hss.authentication_vector(&rand, &Sqn::try_from(sqn).unwrap(), &amf);
            usim.authenticate(rand.as_octets(), v.autn().as_octets())
        };
        // SEQ 2 with IND 3, then SEQ 1 with IND 4 (older, other slot): both fine.
        assert!(matches!(challenge((2 << 5) | 3), AuthOutcome::Accepted(_)));
        assert!(matches!(challenge((1 << 5) | 4), AuthOutcome::Accepted(_)));
        // SEQ 1 with IND 3 is not above SEQ_MS(3) = 2.
        assert!(matches!(challenge((1 << 5) | 3), AuthOutcome::SynchFailure { .. }));
        // Too far ahead of the highest SEQ (more than Δ).
        assert!(matches!(challenge(((2 + DELTA + 1) << 5) | 3), AuthOutcome::SynchFailure { .. }));
    }

    #[test]
    fn amf_without_separation_bit_is_refused() {
        let mut usim = Usim::new("001010000000001".parse().unwrap(), h(K1), h(OPC1), 0, 0);
        let hss = Milenage::new(&K::new(&h(K1)), &Opc::new(&h(OPC1)));
        let rand = Rand::new(&[9; 16]);
        let v = hss.authentication_vector(&rand, &Sqn::try_from(64).unwrap(), &Amf::new(&[0, 0]));
        assert!(matches!(
            usim.authenticate(rand.as_octets(), v.autn().as_octets()),
            AuthOutcome::NonEpsAuthenticationUnacceptable
        ));
    }
}
