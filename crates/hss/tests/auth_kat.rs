//! Known-answer tests of the vector code path: TS 35.208 test sets 1, 3, 4
//! through `auth::eutran_vector`, and KASME against an independent
//! HMAC-SHA-256 (TS 33.220 B.2, TS 33.401 A.2) and oxirush's documented value.

mod support {
    pub mod sha256;
}
use mobicore_common::Plmn;
use mobicore_hss::auth;
use support::sha256::{hmac_sha256, sha256};

fn h<const N: usize>(s: &str) -> [u8; N] {
    hex::decode(s).unwrap().try_into().unwrap()
}

fn u48(s: &str) -> u64 {
    u64::from_str_radix(s, 16).unwrap()
}

struct Set {
    k: &'static str,
    rand: &'static str,
    sqn: &'static str,
    amf: &'static str,
    opc: &'static str,
    f1: &'static str,
    f2: &'static str,
    f5: &'static str,
    f3: &'static str,
    f4: &'static str,
}

// TS 35.208 4.3, test sets 1, 3 and 4.
const SETS: [Set; 3] = [
    Set {
        k: "465b5ce8b199b49faa5f0a2ee238a6bc",
        rand: "23553cbe9637a89d218ae64dae47bf35",
        sqn: "ff9bb4d0b607",
        amf: "b9b9",
        opc: "cd63cb71954a9f4e48a5994e37a02baf",
        f1: "4a9ffac354dfafb3",
        f2: "a54211d5e3ba50bf",
        f5: "aa689c648370",
        f3: "b40ba9a3c58b2a05bbf0d987b21bf8cb",
        f4: "f769bcd751044604127672711c6d3441",
    },
    Set {
        k: "fec86ba6eb707ed08905757b1bb44b8f",
        rand: "9f7c8d021accf4db213ccff0c7f71a6a",
        sqn: "9d0277595ffc",
        amf: "725c",
        opc: "1006020f0a478bf6b699f15c062e42b3",
        f1: "9cabc3e99baf7281",
        f2: "8011c48c0c214ed2",
        f5: "33484dc2136b",
        f3: "5dbdbb2954e8f3cde665b046179a5098",
        f4: "59a92d3b476a0443487055cf88b2307b",
    },
    Set {
        k: "9e5944aea94b81165c82fbf9f32db751",
        rand: "ce83dbc54ac0274a157c17f80d017bd6",
        sqn: "0b604a81eca8",
        amf: "9e09",
        opc: "a64a507ae1a2a98bb88eb4210135dc87",
        f1: "74a58220cba84c49",
        f2: "f365cd683cd92e96",
        f5: "f0b9c08ad02e",
        f3: "e203edb3971574f5a94b0d61b816345d",
        f4: "0c4524adeac041c4dd830d20854fc46b",
    },
];

/// KASME per TS 33.401 A.2 computed here: HMAC-SHA-256(CK || IK, S) with
/// S = FC 0x10 || SN id || 0x0003 || SQN ⊕ AK || 0x0006.
fn kasme_independent(ck: &[u8; 16], ik: &[u8; 16], plmn: &Plmn, sqn_xor_ak: &[u8]) -> [u8; 32] {
    let mut key = ck.to_vec();
    key.extend_from_slice(ik);
    let mut s = vec![0x10];
    s.extend_from_slice(&plmn.to_octets());
    s.extend_from_slice(&[0x00, 0x03]);
    s.extend_from_slice(sqn_xor_ak);
    s.extend_from_slice(&[0x00, 0x06]);
    hmac_sha256(&key, &s)
}

#[test]
fn independent_sha256_is_right() {
    // FIPS 180-2 B.1 "abc", and RFC 4231 test case 2 for HMAC.
    assert_eq!(hex::encode(sha256(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_eq!(
        hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
}

#[test]
fn ts_35_208_sets_through_the_vector_path() {
    let plmn: Plmn = "20893".parse().unwrap();
    for (i, s) in SETS.iter().enumerate() {
        let m = auth::milenage(&h(s.k), &h(s.opc));
        let amf = u16::from_str_radix(s.amf, 16).unwrap();
        let v = auth::eutran_vector(&m, h(s.rand), u48(s.sqn), amf, &plmn).unwrap();
        assert_eq!(hex::encode(&v.xres), s.f2, "set {i} XRES");
        let sqn_xor_ak = u48(s.sqn) ^ u48(s.f5);
        let expected_autn = format!("{:012x}{}{}", sqn_xor_ak, s.amf, s.f1);
        assert_eq!(hex::encode(v.autn), expected_autn, "set {i} AUTN");
        let kasme = kasme_independent(&h(s.f3), &h(s.f4), &plmn, &v.autn[..6]);
        assert_eq!(v.kasme, kasme, "set {i} KASME");
    }
}

#[test]
fn kasme_matches_documented_value() {
    // oxirush-security's documented KASME for test set 1 in PLMN 208-93.
    let s = &SETS[0];
    let m = auth::milenage(&h(s.k), &h(s.opc));
    let v = auth::eutran_vector(&m, h(s.rand), u48(s.sqn), 0xb9b9, &"20893".parse().unwrap()).unwrap();
    assert_eq!(hex::encode(v.kasme), "ba595c5419be71add1212bc8e1bd843afd26e58c0ad8d54f144686b5f55cda77");
}

#[test]
fn kasme_differs_per_serving_network_with_3_digit_mnc() {
    let s = &SETS[0];
    let m = auth::milenage(&h(s.k), &h(s.opc));
    let p3: Plmn = "310410".parse().unwrap();
    let v = auth::eutran_vector(&m, h(s.rand), u48(s.sqn), 0x8000, &p3).unwrap();
    assert_eq!(v.kasme, kasme_independent(&h(s.f3), &h(s.f4), &p3, &v.autn[..6]));
    assert_eq!(&v.autn[6..8], &[0x80, 0x00], "AMF with the separation bit");
}

#[test]
fn sqn_is_seq_and_ind() {
    // TS 33.102 C.3: SEQ increments by one, IND cycles through 32 values.
    let mut sqn = 0;
    for i in 1..=40u64 {
        sqn = auth::next_sqn(sqn);
        assert_eq!(auth::seq_of(sqn), i);
        assert_eq!(sqn & 31, i % 32);
    }
}

/// The KDF of TS 33.220 B.2 with one parameter: HMAC-SHA-256(key, FC || P0 || L0).
fn kdf1(key: &[u8], fc: u8, p0: &[u8]) -> [u8; 32] {
    let mut s = vec![fc];
    s.extend_from_slice(p0);
    s.extend_from_slice(&(p0.len() as u16).to_be_bytes());
    hmac_sha256(key, &s)
}

/// KeNB (TS 33.401 A.3, FC 0x11, P0 = uplink NAS COUNT) and the NAS keys
/// (A.7, FC 0x15, P0 = algorithm type distinguisher, P1 = algorithm
/// identity, the key being the last 128 bits), as the MME and the emulated
/// UE derive them through oxirush-security, checked against this file's
/// independent HMAC-SHA-256.
#[test]
fn kenb_and_nas_keys_per_ts_33_401_annex_a() {
    use oxirush_security::nas_eps::{derive_kenb, derive_knas_enc, derive_knas_int, KAsme};
    use oxirush_security::{CipheringAlgorithm, IntegrityAlgorithm};
    let kasme_octets: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
    let kasme = KAsme::new(&kasme_octets);
    for count in [0u32, 1, 0x0001_0203, 0x00ff_ffff] {
        let want = kdf1(&kasme_octets, 0x11, &count.to_be_bytes());
        let nas_count = oxirush_security::NasCount::new(count).unwrap();
        assert_eq!(derive_kenb(&kasme, nas_count).as_octets(), &want, "KeNB for uplink NAS COUNT {count:#x}");
    }
    let alg_key = |distinguisher: u8, id: u8| {
        let s = [0x15, distinguisher, 0x00, 0x01, id, 0x00, 0x01];
        let k = hmac_sha256(&kasme_octets, &s);
        k[16..].to_vec()
    };
    for (alg, id) in [
        (CipheringAlgorithm::Null, 0),
        (CipheringAlgorithm::Snow3g, 1),
        (CipheringAlgorithm::Aes, 2),
        (CipheringAlgorithm::Zuc, 3),
    ] {
        assert_eq!(derive_knas_enc(&kasme, alg).as_octets().to_vec(), alg_key(0x01, id), "KNASenc for EEA{id}");
    }
    for (alg, id) in [(IntegrityAlgorithm::Snow3g, 1), (IntegrityAlgorithm::Aes, 2), (IntegrityAlgorithm::Zuc, 3)] {
        assert_eq!(derive_knas_int(&kasme, alg).as_octets().to_vec(), alg_key(0x02, id), "KNASint for EIA{id}");
    }
}
