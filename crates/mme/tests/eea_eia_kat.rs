//! Known-answer tests of the NAS algorithms the MME and the emulated UE use
//! (through oxirush-security), with the test data of the specifications:
//! 128-EEA1/EIA1 (TS 33.401 Annex C.1/C.2, from TS 35.217 and TS 35.223),
//! 128-EEA2/EIA2 (TS 33.401 Annex C.1/C.2), 128-EEA3/EIA3 (TS 35.223 / the
//! EEA3 & EIA3 test data document, test set 1).

use oxirush_security::nas_eps::{KNasEnc, KNasInt};
use oxirush_security::{nea_cipher_bits, nia_mac_bits, Bearer, CipheringAlgorithm, Direction, IntegrityAlgorithm};

fn h(s: &str) -> Vec<u8> {
    hex::decode(s.replace(' ', "")).unwrap()
}

fn key(s: &str) -> [u8; 16] {
    h(s).try_into().unwrap()
}

fn dir(d: u8) -> Direction {
    Direction::try_from(d).unwrap()
}

#[allow(clippy::too_many_arguments)] // the columns of a TS 35.222 / 35.223 test set
/// Ciphers `plain` and checks the first `bits` bits against `cipher`.
fn eea(alg: CipheringAlgorithm, k: &str, count: u32, bearer: u8, d: u8, bits: u64, plain: &str, cipher: &str) {
    let mut data = h(plain);
    nea_cipher_bits(&KNasEnc::new(&key(k)), count, Bearer::new(bearer).unwrap(), dir(d), &mut data, bits, alg).unwrap();
    assert_eq!(hex::encode(&data), hex::encode(h(cipher)), "{alg:?} ciphertext");
    // And back: ciphering is its own inverse.
    nea_cipher_bits(&KNasEnc::new(&key(k)), count, Bearer::new(bearer).unwrap(), dir(d), &mut data, bits, alg).unwrap();
    assert_eq!(data, h(plain), "{alg:?} deciphers");
}

#[allow(clippy::too_many_arguments)]
fn eia(alg: IntegrityAlgorithm, k: &str, count: u32, bearer: u8, d: u8, bits: u64, msg: &str, mac: u32) {
    let got =
        nia_mac_bits(&KNasInt::new(&key(k)), count, Bearer::new(bearer).unwrap(), dir(d), &h(msg), bits, alg).unwrap();
    assert_eq!(got, mac, "{alg:?} MAC: {got:08x} != {mac:08x}");
}

#[test]
fn eea1_test_set_1() {
    eea(
        CipheringAlgorithm::Snow3g,
        "d3c5d592327fb11c4035c6680af8c6d1",
        0x398a59b4,
        0x15,
        1,
        253,
        "981ba682 4c1bfb1a b4854720 29b71d80 8ce33e2c c3c0b5fc 1f3de8a6 dc66b1f0",
        "5d5bfe75 eb04f68c e0a12377 ea00b37d 47c6a0ba 06309155 086a859c 4341b378",
    );
}

#[test]
fn eea2_test_set_1() {
    eea(
        CipheringAlgorithm::Aes,
        "d3c5d592327fb11c4035c6680af8c6d1",
        0x398a59b4,
        0x15,
        1,
        253,
        "981ba682 4c1bfb1a b4854720 29b71d80 8ce33e2c c3c0b5fc 1f3de8a6 dc66b1f0",
        "e9fed8a6 3d155304 d71df20b f3e82214 b20ed7da d2f233dc 3c22d7bd eeed8e78",
    );
}

#[test]
fn eea3_test_set_1() {
    eea(
        CipheringAlgorithm::Zuc,
        "173d14ba5003731d7a60049470f00a29",
        0x66035492,
        0x0f,
        0,
        193,
        "6cf65340 735552ab 0c9752fa 6f9025fe 0bd675d9 005875b2 00000000",
        "a6c85fc6 6afb8533 aafc2518 dfe78494 0ee1e4b0 30238cc8 00000000",
    );
}

#[test]
fn eia1_test_set_1() {
    eia(
        IntegrityAlgorithm::Snow3g,
        "2bd6459f82c5b300952c49104881ff48",
        0x38a6f056,
        0x1f,
        0,
        88,
        "33323462 63393861 373479",
        0x731f1165,
    );
}

#[test]
fn eia2_test_set_1() {
    eia(
        IntegrityAlgorithm::Aes,
        "2bd6459f82c5b300952c49104881ff48",
        0x38a6f056,
        0x18,
        0,
        58,
        "33323462 63393840",
        0x118c6eb8,
    );
}

#[test]
fn eia3_test_set_1() {
    eia(IntegrityAlgorithm::Zuc, "00000000000000000000000000000000", 0, 0, 0, 1, "00000000", 0xc8a9595e);
}
