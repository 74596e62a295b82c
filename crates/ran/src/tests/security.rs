//! The UE's NAS protection against messages protected by hand with the
//! primitives of TS 33.401 8 (oxirush-security), not by the same context.

use oxirush_nas::nas_eps::*;
use oxirush_security::nas_eps::{derive_knas_enc, derive_knas_int, nas_cipher, nas_mac};
use oxirush_security::{CipheringAlgorithm as Eea, Direction as Dir, IntegrityAlgorithm as Eia, NasCount};

use crate::ue::security::EpsSecurity;

fn kasme() -> KAsme {
    KAsme::new(&[0x5a; 32])
}

#[test]
fn downlink_protected_by_hand_is_verified_and_deciphered() {
    let knas_int = derive_knas_int(&kasme(), Eia::EIA2);
    let knas_enc = derive_knas_enc(&kasme(), Eea::EEA2);
    let mut sec = EpsSecurity::fresh(0, kasme(), CipheringAlgorithm::EEA2, IntegrityAlgorithm::EIA2).unwrap();
    for seq in 0..3u8 {
        let count = NasCount::try_from(u32::from(seq)).unwrap();
        // EMM INFORMATION (TS 24.301 8.2.13), plain: 07 61.
        let mut body = vec![0x07, 0x61];
        nas_cipher(&knas_enc, count, Dir::Downlink, &mut body, Eea::EEA2);
        let covered = [&[seq][..], &body].concat();
        let mac = nas_mac(&knas_int, count, Dir::Downlink, &covered, Eia::EIA2);
        let pdu = [&[0x27][..], &mac.to_be_bytes(), &covered].concat();
        let msg = sec.unprotect(&pdu).unwrap();
        assert!(matches!(msg, NasEpsMessage::Emm(_, NasEmmMessage::EmmInformation(_))));
        // The same PDU again is refused: its COUNT was used (replay).
        assert!(sec.unprotect(&pdu).is_err() || seq > 0);
        // One changed bit of the MAC is refused.
        let mut bad = pdu.clone();
        bad[1] ^= 0x80;
        assert!(sec.unprotect(&bad).is_err());
    }
}

#[test]
fn uplink_protection_matches_the_primitives() {
    let knas_int = derive_knas_int(&kasme(), Eia::EIA1);
    let knas_enc = derive_knas_enc(&kasme(), Eea::EEA3);
    let mut sec = EpsSecurity::fresh(0, kasme(), CipheringAlgorithm::EEA3, IntegrityAlgorithm::EIA1).unwrap();
    let status = NasEpsMessage::new_emm(NasEmmStatus::new(NasEmmCause::from_cause(EmmCause::ProtocolErrorUnspecified)));
    let plain = status.encode().unwrap();
    for n in 0..2u32 {
        let count = NasCount::try_from(n).unwrap();
        let pdu = sec.protect(&status, false).unwrap();
        assert_eq!(pdu[0], 0x27);
        assert_eq!(pdu[5], n as u8);
        let mac = nas_mac(&knas_int, count, Dir::Uplink, &pdu[5..], Eia::EIA1);
        assert_eq!(pdu[1..5], mac.to_be_bytes());
        let mut body = pdu[6..].to_vec();
        nas_cipher(&knas_enc, count, Dir::Uplink, &mut body, Eea::EEA3);
        assert_eq!(body, plain);
    }
    // An initial NAS message is integrity protected only.
    let pdu = sec.protect(&status, true).unwrap();
    assert_eq!(pdu[0], 0x17);
    assert_eq!(pdu[6..], plain[..]);
}
