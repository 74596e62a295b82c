//! The UE's NAS security context: protection of uplink and verification of
//! downlink messages (TS 24.301 4.4, TS 33.401 8), over oxirush-nas's
//! `NasSecurityContext`, which keeps the NAS COUNTs.

use oxirush_nas::nas_eps::{
    CipheringAlgorithm, Direction, IntegrityAlgorithm, KAsme, NasEmmMessage, NasEpsMessage, NasEpsSecurityHeaderType,
    NasSecurityContext,
};
use oxirush_nas::NasError;
use oxirush_security::nas_eps::derive_kenb;
use oxirush_security::NasCount;

/// The UE network capability octets (TS 24.301 9.9.3.34): EEA0-3 and
/// EIA1-3.
pub const UE_EEA: u8 = 0xF0;
pub const UE_EIA: u8 = 0x70;

/// Whether the UE supports the algorithms a network selected (EIA0 is for
/// emergency bearer services only, TS 33.401 5.1.4.2, and is not offered).
pub fn supported(eea: u8, eia: u8) -> bool {
    eea <= 7 && UE_EEA & (0x80 >> eea) != 0 && eia <= 6 && UE_EIA & (0x80 >> eia) != 0
}

/// KASME from a fresh EPS AKA run, not yet taken into use.
pub struct PendingKasme {
    pub ksi: u8,
    pub kasme: KAsme,
}

/// The current EPS security context.
pub struct EpsSecurity {
    pub ksi: u8,
    pub kasme: KAsme,
    pub ctx: NasSecurityContext,
}

impl EpsSecurity {
    /// A new context for the algorithms of a SECURITY MODE COMMAND, with
    /// both NAS COUNTs at zero (TS 33.401 7.2.4.4).
    pub fn fresh(ksi: u8, kasme: KAsme, eea: CipheringAlgorithm, eia: IntegrityAlgorithm) -> Result<Self, NasError> {
        let ctx = NasSecurityContext::from_fresh_kasme(&kasme, eia, eea)?;
        Ok(EpsSecurity { ksi, kasme, ctx })
    }

    /// Protect an uplink message; `initial` for an initial NAS message
    /// (ATTACH/DETACH REQUEST from idle), integrity protected but not
    /// ciphered (TS 24.301 4.4.5).
    pub fn protect(&mut self, msg: &NasEpsMessage, initial: bool) -> Result<Vec<u8>, NasError> {
        // TS 24.301 4.4.5: ATTACH REQUEST and TRACKING AREA
        // UPDATE REQUEST are integrity protected, never ciphered, even on
        // an established connection (a TAU after a handover).
        let never_ciphered = matches!(
            msg,
            NasEpsMessage::Emm(_, NasEmmMessage::AttachRequest(_) | NasEmmMessage::TrackingAreaUpdateRequest(_))
        );
        let sht = if initial || never_ciphered {
            NasEpsSecurityHeaderType::IntegrityProtected
        } else {
            NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered
        };
        self.ctx.protect(msg, sht, Direction::Uplink)
    }

    /// Protect with a given header type (SECURITY MODE COMPLETE takes 4).
    pub fn protect_as(&mut self, msg: &NasEpsMessage, sht: NasEpsSecurityHeaderType) -> Result<Vec<u8>, NasError> {
        self.ctx.protect(msg, sht, Direction::Uplink)
    }

    /// Verify the MAC and decipher a downlink message; the downlink COUNT
    /// advances only for a message whose MAC verifies (TS 24.301 4.4.3.3).
    pub fn unprotect(&mut self, pdu: &[u8]) -> Result<NasEpsMessage, NasError> {
        self.ctx.unprotect(pdu, Direction::Downlink).map(|v| v.message)
    }

    /// The uplink NAS COUNT the next message will use.
    pub fn next_uplink_count(&self) -> Option<NasCount> {
        self.ctx.nas_count(Direction::Uplink)
    }

    /// KeNB for an uplink NAS COUNT (TS 33.401 A.3).
    pub fn kenb(&self, ul_count: NasCount) -> [u8; 32] {
        *derive_kenb(&self.kasme, ul_count).as_octets()
    }
}

/// The security header type of a NAS PDU, if it is an EMM-layer PDU
/// (protocol discriminator 7); a plain ESM PDU gives `Some(0)` too.
pub fn header_type(pdu: &[u8]) -> Option<u8> {
    let first = *pdu.first()?;
    match first & 0x0F {
        0x07 => Some(first >> 4),
        0x02 => Some(0),
        _ => None,
    }
}
