//! Identifiers, spelled the Rust way after their specification names.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// Error parsing an identifier from text or octets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("IMSI must be 6 to 15 decimal digits, got {0:?}")]
    Imsi(String),
    #[error("PLMN must be MCC of 3 digits and MNC of 2 or 3 digits, got {0:?}")]
    Plmn(String),
    #[error("truncated or malformed identifier octets")]
    Octets,
}

/// IMSI (TS 23.003 2.2): up to 15 digits, kept as digits so leading zeros
/// of the MSIN survive.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Imsi(String);

impl Imsi {
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn digits(&self) -> impl Iterator<Item = u8> + '_ {
        self.0.bytes().map(|b| b - b'0')
    }
    /// TBCD octets (TS 29.274 8.3, TS 29.272 uses UTF-8 text instead).
    pub fn to_tbcd(&self) -> Vec<u8> {
        tbcd_encode(&self.0)
    }
    pub fn from_tbcd(octets: &[u8]) -> Result<Self, IdError> {
        let s = tbcd_decode(octets).ok_or(IdError::Octets)?;
        s.parse()
    }
}

impl FromStr for Imsi {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        if (6..=15).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()) {
            Ok(Imsi(s.to_string()))
        } else {
            Err(IdError::Imsi(s.to_string()))
        }
    }
}
impl TryFrom<String> for Imsi {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        s.parse()
    }
}
impl From<Imsi> for String {
    fn from(i: Imsi) -> String {
        i.0
    }
}
impl fmt::Display for Imsi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl fmt::Debug for Imsi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Imsi({})", self.0)
    }
}

/// TBCD encoding of decimal digits, filler 0xF in the last high nibble.
pub fn tbcd_encode(digits: &str) -> Vec<u8> {
    let d: Vec<u8> = digits.bytes().map(|b| b - b'0').collect();
    d.chunks(2).map(|c| c[0] | (c.get(1).copied().unwrap_or(0xF) << 4)).collect()
}

/// Inverse of [`tbcd_encode`]; `None` on a non-digit nibble.
pub fn tbcd_decode(octets: &[u8]) -> Option<String> {
    let mut s = String::with_capacity(octets.len() * 2);
    for (i, &o) in octets.iter().enumerate() {
        for (n, nib) in [o & 0xF, o >> 4].into_iter().enumerate() {
            match nib {
                0..=9 => s.push((b'0' + nib) as char),
                0xF if i == octets.len() - 1 && n == 1 => {}
                _ => return None,
            }
        }
    }
    Some(s)
}

/// PLMN identity (TS 23.003 12.1): MCC and MNC as digit strings.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Plmn {
    mcc: [u8; 3],
    mnc: [u8; 3],
    mnc_len: u8,
}

impl Plmn {
    pub fn new(mcc: &str, mnc: &str) -> Result<Self, IdError> {
        format!("{mcc}{mnc}").parse().and_then(|p: Plmn| {
            if p.mnc_len as usize == mnc.len() && mcc.len() == 3 {
                Ok(p)
            } else {
                Err(IdError::Plmn(format!("{mcc}{mnc}")))
            }
        })
    }
    pub fn mcc(&self) -> String {
        self.mcc.iter().map(|d| (b'0' + d) as char).collect()
    }
    pub fn mnc(&self) -> String {
        self.mnc[..self.mnc_len as usize].iter().map(|d| (b'0' + d) as char).collect()
    }
    /// The three octets of TS 24.008 10.5.1.13 (also used by S1AP and GTPv2-C).
    pub fn to_octets(&self) -> [u8; 3] {
        let (m, n) = (self.mcc, self.mnc);
        let mnc3 = if self.mnc_len == 3 { n[2] } else { 0xF };
        [m[0] | (m[1] << 4), m[2] | (mnc3 << 4), n[0] | (n[1] << 4)]
    }
    pub fn from_octets(o: &[u8]) -> Result<Self, IdError> {
        if o.len() < 3 {
            return Err(IdError::Octets);
        }
        let nib = |x: u8| if x <= 9 { Ok(x) } else { Err(IdError::Octets) };
        let mcc = [nib(o[0] & 0xF)?, nib(o[0] >> 4)?, nib(o[1] & 0xF)?];
        let mnc3 = o[1] >> 4;
        let (mnc, mnc_len) = if mnc3 == 0xF {
            ([nib(o[2] & 0xF)?, nib(o[2] >> 4)?, 0], 2)
        } else {
            ([nib(o[2] & 0xF)?, nib(o[2] >> 4)?, nib(mnc3)?], 3)
        };
        Ok(Plmn { mcc, mnc, mnc_len })
    }
}

/// Parses "MCCMNC" (5 or 6 digits) or "MCC-MNC".
impl FromStr for Plmn {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        let digits: String = s.chars().filter(|c| *c != '-').collect();
        let err = || IdError::Plmn(s.to_string());
        if !(5..=6).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        let d: Vec<u8> = digits.bytes().map(|b| b - b'0').collect();
        let mnc_len = (d.len() - 3) as u8;
        let mut mnc = [0; 3];
        mnc[..mnc_len as usize].copy_from_slice(&d[3..]);
        Ok(Plmn { mcc: [d[0], d[1], d[2]], mnc, mnc_len })
    }
}
impl TryFrom<String> for Plmn {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        s.parse()
    }
}
impl From<Plmn> for String {
    fn from(p: Plmn) -> String {
        p.to_string()
    }
}
impl fmt::Display for Plmn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.mcc(), self.mnc())
    }
}
impl fmt::Debug for Plmn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Plmn({}-{})", self.mcc(), self.mnc())
    }
}

/// Tracking Area Identity (TS 23.003 19.4.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tai {
    pub plmn: Plmn,
    pub tac: u16,
}

/// E-UTRAN Cell Global Identifier: PLMN and 28-bit cell identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ecgi {
    pub plmn: Plmn,
    pub eci: u32,
}

/// M-TMSI (TS 23.003 2.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MTmsi(pub u32);

/// GUMMEI (TS 23.003 2.8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gummei {
    pub plmn: Plmn,
    pub mme_group_id: u16,
    pub mme_code: u8,
}

/// GUTI = GUMMEI + M-TMSI (TS 23.003 2.8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Guti {
    pub gummei: Gummei,
    pub m_tmsi: MTmsi,
}

/// Tunnel Endpoint Identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct Teid(pub u32);

/// Fully qualified TEID (TS 29.274 8.22): TEID plus the IPv4 address of the
/// node that allocated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fteid {
    pub teid: Teid,
    pub ipv4: Ipv4Addr,
}

/// eNB UE S1AP ID (TS 36.413 9.2.3.4), 24 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EnbUeS1apId(pub u32);

/// MME UE S1AP ID (TS 36.413 9.2.3.3), 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MmeUeS1apId(pub u32);

/// EPS Bearer Identity (TS 24.007 11.2.3.1.5), 5..=15.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ebi(pub u8);

/// Aggregate maximum bit rate, uplink and downlink, in bit/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Ambr {
    pub uplink: u64,
    pub downlink: u64,
}

/// Allocation and Retention Priority (TS 23.401 4.7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arp {
    pub priority_level: u8,
    pub pre_emption_capability: bool,
    pub pre_emption_vulnerability: bool,
}

impl Default for Arp {
    fn default() -> Self {
        Arp { priority_level: 9, pre_emption_capability: false, pre_emption_vulnerability: true }
    }
}

/// PDN type (TS 29.274 8.34).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum PdnType {
    #[default]
    Ipv4,
    Ipv6,
    Ipv4v6,
}

/// A set of replica groups (0..=255). An elastic MME host allocates a UE's
/// identifiers (MME-UE-S1AP-ID, M-TMSI) with its host number as the top
/// octet and the UE's replica group as the next (`mobicore_elastic::router`);
/// each group of a host has its own replica host and heir, so that a dead
/// host's UEs spread over the live hosts (seed 004 4.3: replicas per UE).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Groups([u64; 4]);

impl Groups {
    pub const NONE: Groups = Groups([0; 4]);
    pub const ALL: Groups = Groups([u64::MAX; 4]);

    pub fn one(g: u8) -> Groups {
        let mut s = Groups::NONE;
        s.insert(g);
        s
    }
    pub fn insert(&mut self, g: u8) {
        self.0[usize::from(g >> 6)] |= 1 << (g & 63);
    }
    pub fn contains(&self, g: u8) -> bool {
        self.0[usize::from(g >> 6)] & (1 << (g & 63)) != 0
    }
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        (0..=255u8).filter(|&g| self.contains(g))
    }
    /// 32 octets, group 0 in the first octet's low bit.
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, w) in self.0.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }
    pub fn from_bytes(b: &[u8; 32]) -> Groups {
        let mut s = Groups::NONE;
        for (i, w) in s.0.iter_mut().enumerate() {
            *w = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 octets"));
        }
        s
    }
}

impl FromIterator<u8> for Groups {
    fn from_iter<I: IntoIterator<Item = u8>>(it: I) -> Groups {
        let mut s = Groups::NONE;
        for g in it {
            s.insert(g);
        }
        s
    }
}

impl fmt::Debug for Groups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.len() {
            256 => write!(f, "Groups(all)"),
            n if n > 8 => write!(f, "Groups({n} of 256)"),
            _ => f.debug_set().entries(self.iter()).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plmn_octets_per_ts_24_008() {
        // MCC 001 MNC 01 -> 00 f1 10
        let p: Plmn = "00101".parse().unwrap();
        assert_eq!(p.to_octets(), [0x00, 0xf1, 0x10]);
        let p3: Plmn = "310410".parse().unwrap();
        assert_eq!(p3.to_octets(), [0x13, 0x00, 0x14]);
        assert_eq!(Plmn::from_octets(&p3.to_octets()).unwrap(), p3);
        assert!(Plmn::from_octets(&[0xaa, 0xf1, 0x10]).is_err());
    }

    #[test]
    fn imsi_tbcd() {
        let i: Imsi = "001010000000001".parse().unwrap();
        assert_eq!(i.to_tbcd(), vec![0x00, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0xf1]);
        assert_eq!(Imsi::from_tbcd(&i.to_tbcd()).unwrap(), i);
        assert!("12a45678".parse::<Imsi>().is_err());
    }

    proptest! {
        #[test]
        fn tbcd_never_panics(o in proptest::collection::vec(any::<u8>(), 0..12)) {
            let _ = Imsi::from_tbcd(&o);
            let _ = Plmn::from_octets(&o);
        }
        #[test]
        fn imsi_round_trip(d in "[0-9]{6,15}") {
            let i: Imsi = d.parse().unwrap();
            prop_assert_eq!(Imsi::from_tbcd(&i.to_tbcd()).unwrap(), i);
        }
    }

    #[test]
    fn groups_set_and_octets() {
        let s: Groups = [0u8, 63, 64, 200, 255].into_iter().collect();
        assert_eq!(s.len(), 5);
        assert!(s.contains(63) && s.contains(64) && !s.contains(65));
        assert_eq!(s.iter().collect::<Vec<_>>(), [0, 63, 64, 200, 255]);
        assert_eq!(Groups::from_bytes(&s.to_bytes()), s);
        assert_eq!(Groups::ALL.len(), 256);
        assert!(Groups::NONE.is_empty());
    }
}
