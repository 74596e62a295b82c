//! The UE's side of a handover: its access stratum key chain (TS 33.401
//! 7.2.8) and the RRC handover command it receives from the target cell.
//!
//! The UE keeps KASME (in its NAS security context) and, from the KeNB it
//! derived last, the chain of Next Hop parameters: NCC 0 is KeNB itself, NH
//! of NCC n+1 is KDF(KASME, NH of NCC n) (Annex A.4). At a handover it
//! takes the NCC the target cell sends: the same NCC as its own means a
//! horizontal derivation KeNB* = KDF(KeNB, PCI, EARFCN-DL), another one a
//! vertical derivation KeNB* = KDF(NH of that NCC, PCI, EARFCN-DL)
//! (7.2.8.4.3, Annex A.5). The eNBs check their keys against
//! [`Ue::next_hop`] and [`Ue::handover_kenb`].

use oxirush_security::nas_eps::{derive_kenb_star, derive_nh, KEnb, Nh};

use super::Ue;

/// The UE's key chain of the current KeNB.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct AsKeyChain {
    /// The KeNB this chain belongs to; a new KeNB (Initial Context Setup,
    /// Service Request) restarts the chain at NCC 0.
    kenb: [u8; 32],
    /// NH of `ncc` (KeNB for NCC 0 of a fresh chain).
    nh: [u8; 32],
    ncc: u8,
}

/// Why a UE could not take a handover's keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandoverKeyError {
    #[error("the UE has no access stratum security context")]
    NoContext,
    #[error("NCC {0} is not a 3-bit value")]
    Ncc(u8),
    #[error("KeNB* derivation: {0}")]
    Derivation(String),
    #[error("undecodable RRC HandoverCommand")]
    RrcCommand,
}

impl Ue {
    /// The chain of the current KeNB, restarted if KeNB changed since.
    fn key_chain(&mut self) -> Result<AsKeyChain, HandoverKeyError> {
        let kenb = self.kenb.ok_or(HandoverKeyError::NoContext)?;
        match &self.as_keys {
            Some(c) if c.kenb == kenb => Ok(c.clone()),
            _ => Ok(AsKeyChain { kenb, nh: kenb, ncc: 0 }),
        }
    }

    /// NH of next hop chaining count `ncc` as this UE derives it from its
    /// current KeNB (TS 33.401 7.2.8.4, A.4); `None` without a context.
    /// NCC wraps at 8: the NH is the first one ahead of the UE's own NCC
    /// with that count.
    pub fn next_hop(&mut self, ncc: u8) -> Option<[u8; 32]> {
        let chain = self.key_chain().ok()?;
        self.advance(chain, ncc).ok().map(|c| c.nh)
    }

    fn advance(&self, mut chain: AsKeyChain, ncc: u8) -> Result<AsKeyChain, HandoverKeyError> {
        if ncc > 7 {
            return Err(HandoverKeyError::Ncc(ncc));
        }
        let kasme = &self.security.as_ref().ok_or(HandoverKeyError::NoContext)?.kasme;
        while chain.ncc != ncc {
            chain.nh = *derive_nh(kasme, &Nh::new(&chain.nh)).as_octets();
            chain.ncc = (chain.ncc + 1) % 8;
        }
        Ok(chain)
    }

    /// The KeNB the UE takes in a target cell (`pci`, `earfcn_dl`) whose
    /// handover command carries `ncc` (TS 33.401 7.2.8.4.3): horizontal from
    /// KeNB for the UE's own NCC, vertical from NH otherwise. The UE then
    /// uses it as its KeNB.
    pub fn handover_kenb(&mut self, ncc: u8, pci: u16, earfcn_dl: u32) -> Result<[u8; 32], HandoverKeyError> {
        let chain = self.key_chain()?;
        let horizontal = chain.ncc == ncc;
        let chain = self.advance(chain, ncc)?;
        let base = if horizontal { KEnb::new(&chain.kenb) } else { KEnb::new(&chain.nh) };
        let star = derive_kenb_star(&base, pci, earfcn_dl).map_err(|e| HandoverKeyError::Derivation(e.to_string()))?;
        let kenb = *star.as_octets();
        self.kenb = Some(kenb);
        self.as_keys = Some(AsKeyChain { kenb, nh: chain.nh, ncc: chain.ncc });
        Ok(kenb)
    }

    /// Take an RRC HandoverCommand (TS 36.331 10.2.2) built by a target eNB
    /// with [`rrc_handover_command`]: the KeNB of the target cell.
    pub fn take_handover_command(
        &mut self,
        command: &[u8],
        pci: u16,
        earfcn_dl: u32,
    ) -> Result<[u8; 32], HandoverKeyError> {
        let ncc = rrc_handover_command_ncc(command).ok_or(HandoverKeyError::RrcCommand)?;
        self.handover_kenb(ncc, pci, earfcn_dl)
    }
}

/// Unaligned PER bits, most significant first (ITU-T X.691).
struct Bits {
    octets: Vec<u8>,
    len: usize,
}

impl Bits {
    fn new() -> Self {
        Bits { octets: Vec::new(), len: 0 }
    }
    fn put(&mut self, value: u32, width: usize) {
        for i in (0..width).rev() {
            if self.len.is_multiple_of(8) {
                self.octets.push(0);
            }
            if (value >> i) & 1 == 1 {
                let last = self.octets.len() - 1;
                self.octets[last] |= 0x80 >> (self.len % 8);
            }
            self.len += 1;
        }
    }
    fn put_octets(&mut self, octets: &[u8]) {
        for o in octets {
            self.put(u32::from(*o), 8);
        }
    }
}

fn get(octets: &[u8], at: &mut usize, width: usize) -> Option<u32> {
    let mut value = 0;
    for _ in 0..width {
        let bit = (octets.get(*at / 8)? >> (7 - *at % 8)) & 1;
        value = (value << 1) | u32::from(bit);
        *at += 1;
    }
    Some(value)
}

/// DL-DCCH-Message with an RRCConnectionReconfiguration that carries only
/// securityConfigHO (intraLTE, keyChangeIndicator false, nextHopChainingCount
/// `ncc`), TS 36.331 6.2.2, 6.3.3, in UPER.
fn rrc_connection_reconfiguration(ncc: u8) -> Vec<u8> {
    let mut b = Bits::new();
    b.put(0, 1); // DL-DCCH-MessageType: c1
    b.put(4, 4); // c1: rrcConnectionReconfiguration
    b.put(0, 2); // rrc-TransactionIdentifier
    b.put(0, 1); // criticalExtensions: c1
    b.put(0, 3); // c1: rrcConnectionReconfiguration-r8
    b.put(0b000010, 6); // only securityConfigHO present
    b.put(0, 1); // SecurityConfigHO: no extension
    b.put(0, 1); // handoverType: intraLTE
    b.put(0, 1); // no securityAlgorithmConfig
    b.put(0, 1); // keyChangeIndicator FALSE
    b.put(u32::from(ncc & 7), 3); // nextHopChainingCount
    b.octets
}

/// The RRC HandoverCommand a target eNB puts in its Target eNB to Source
/// eNB Transparent Container (TS 36.331 10.2.2, TS 36.413 9.2.1.41): the
/// DL-DCCH-Message of the handover with the NCC the UE derives KeNB from.
pub fn rrc_handover_command(ncc: u8) -> Vec<u8> {
    let inner = rrc_connection_reconfiguration(ncc);
    let mut b = Bits::new();
    b.put(0, 1); // criticalExtensions: c1
    b.put(0, 3); // c1: handoverCommand-r8
    b.put(0, 1); // no nonCriticalExtension
    b.put(inner.len() as u32, 8); // handoverCommandMessage length (< 128)
    b.put_octets(&inner);
    b.octets
}

/// The NCC of a command built by [`rrc_handover_command`].
pub fn rrc_handover_command_ncc(command: &[u8]) -> Option<u8> {
    let mut at = 0;
    if get(command, &mut at, 5)? != 0 {
        return None;
    }
    let len = get(command, &mut at, 8)? as usize;
    let mut inner = Vec::with_capacity(len);
    for _ in 0..len {
        inner.push(get(command, &mut at, 8)? as u8);
    }
    let mut at = 0;
    // c1, rrcConnectionReconfiguration, transaction, c1, r8, presence bits.
    let head = get(&inner, &mut at, 17)?;
    // Grouped by field, as the comment above reads.
    #[allow(clippy::unusual_byte_groupings)]
    let expected = 0b0_0100_00_0_000 << 6 | 0b000010;
    if head != expected {
        return None;
    }
    // No extension, intraLTE, no algorithms, keyChangeIndicator.
    if get(&inner, &mut at, 4)? != 0 {
        return None;
    }
    get(&inner, &mut at, 3).map(|n| n as u8)
}

/// HandoverPreparationInformation (TS 36.331 10.2.2) for a Source eNB to
/// Target eNB Transparent Container: the r8 message with an empty UE radio
/// access capability list and no optional part, in UPER.
pub fn rrc_handover_preparation_information() -> Vec<u8> {
    let mut b = Bits::new();
    b.put(0, 1); // criticalExtensions: c1
    b.put(0, 3); // c1: handoverPreparationInformation-r8
    b.put(0, 4); // as-Config, rrm-Config, as-Context, nonCriticalExtension absent
    b.put(0, 4); // ue-RadioAccessCapabilityInfo: SIZE (0..8), 0 items
    b.octets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handover_command_carries_every_ncc() {
        for ncc in 0..8 {
            assert_eq!(rrc_handover_command_ncc(&rrc_handover_command(ncc)), Some(ncc));
        }
        assert_eq!(rrc_handover_command_ncc(&[]), None);
        assert_eq!(rrc_handover_command_ncc(&[0xff, 0xff, 0xff]), None);
    }
}
