//! E-UTRAN authentication vectors (TS 33.401 6.1.1, A.2) from Milenage
//! (TS 35.206), and SQN management in the HE (TS 33.102 Annex C).

use mobicore_common::s6a::{EutranVector, ResyncInfo};
use mobicore_common::Plmn;
use oxirush_security::milenage::{Amf, Auts, Milenage, Opc, Sqn, K};
use oxirush_security::nas_eps::derive_kasme;
use oxirush_security::Rand;

/// Bits of IND in SQN = SEQ || IND (TS 33.102 C.3.2 suggests 5).
pub const IND_BITS: u32 = 5;
const IND_MASK: u64 = (1 << IND_BITS) - 1;

/// The SQN of the next vector after `sqn` (TS 33.102 C.3.1, C.1.2): SEQ
/// incremented by one, IND taken cyclically from the array of 2^5 entries.
pub fn next_sqn(sqn: u64) -> u64 {
    let seq = (sqn >> IND_BITS) + 1;
    let ind = ((sqn & IND_MASK) + 1) & IND_MASK;
    ((seq << IND_BITS) | ind) & Sqn::MAX
}

/// SEQ of a SQN.
pub fn seq_of(sqn: u64) -> u64 {
    sqn >> IND_BITS
}

/// A subscriber's Milenage instance.
pub fn milenage(k: &[u8; 16], opc: &[u8; 16]) -> Milenage {
    Milenage::new(&K::new(k), &Opc::new(opc))
}

/// The serving network identity of KASME's derivation (TS 33.401 A.2).
fn serving_network(plmn: &Plmn) -> Option<oxirush_security::Plmn> {
    oxirush_security::Plmn::new(&plmn.mcc(), &plmn.mnc()).ok()
}

/// One E-UTRAN vector for `rand` and `sqn`: XRES, AUTN = SQN ⊕ AK || AMF ||
/// MAC-A (TS 33.102 6.3.2) and KASME = KDF(CK || IK, 0x10, SN id, SQN ⊕ AK)
/// (TS 33.401 A.2). `None` if the PLMN cannot be expressed (never for a
/// valid [`Plmn`]).
pub fn eutran_vector(m: &Milenage, rand: [u8; 16], sqn: u64, amf: u16, plmn: &Plmn) -> Option<EutranVector> {
    let sqn = Sqn::try_from(sqn & Sqn::MAX).ok()?;
    let av = m.authentication_vector(&Rand::new(&rand), &sqn, &Amf::new(&amf.to_be_bytes()));
    let kasme = derive_kasme(av.ck(), av.ik(), serving_network(plmn)?, av.autn());
    Some(EutranVector {
        rand,
        xres: av.xres().as_octets().to_vec(),
        autn: *av.autn().as_octets(),
        kasme: *kasme.as_octets(),
    })
}

/// SQN_MS from a Re-Synchronization-Info (TS 33.102 6.3.5): `None` when
/// MAC-S does not verify.
pub fn resync_sqn_ms(m: &Milenage, r: &ResyncInfo) -> Option<u64> {
    m.verify_auts(&Rand::new(&r.rand), &Auts::new(&r.auts)).ok().map(|s| s.get())
}
