//! A subscriber record of the HSS, as the store keeps it and as
//! `subscribers.json` holds it (keys in hex).

use mobicore_common::s6a::TerminalInformation;
use mobicore_common::{Ambr, Imsi, PdnType};
use oxirush_security::milenage::{Op, Opc, K};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr};

/// Default AMF: separation bit set (TS 33.401 6.1.1, TS 33.102 Annex H).
pub const DEFAULT_AMF: u16 = 0x8000;

/// One APN a subscriber may use (TS 29.272 7.3.35).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApnProfile {
    /// Service-Selection, e.g. "internet".
    pub name: String,
    #[serde(default = "default_qci")]
    pub qci: u8,
    /// ARP priority level 1..15 (TS 23.401 4.7.3).
    #[serde(default = "default_arp")]
    pub arp_priority: u8,
    #[serde(default)]
    pub pre_emption_capability: bool,
    #[serde(default = "yes")]
    pub pre_emption_vulnerability: bool,
    /// APN-AMBR in bit/s.
    #[serde(default = "default_ambr")]
    pub ambr: Ambr,
    /// PDN type the subscription allows: Ipv4, Ipv6 or Ipv4v6.
    #[serde(default)]
    pub pdn_type: PdnType,
    /// The PDN GW for this APN, sent in MIP6-Agent-Info (TS 29.272 7.3.45)
    /// with PDN-GW-Allocation-Type STATIC; absent: the MME chooses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pdn_gw: Option<IpAddr>,
    /// A static UE IPv4 address for this APN, sent as
    /// Served-Party-IP-Address (TS 29.272 7.3.44); absent: dynamic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_ipv4: Option<Ipv4Addr>,
}

fn default_qci() -> u8 {
    9
}
fn default_arp() -> u8 {
    9
}
fn yes() -> bool {
    true
}
fn default_ambr() -> Ambr {
    Ambr { uplink: 100_000_000, downlink: 100_000_000 }
}
fn default_amf() -> u16 {
    DEFAULT_AMF
}

impl ApnProfile {
    /// An APN with QCI 9, ARP 9 (no pre-emption capability, vulnerable),
    /// 100 Mbit/s each way.
    pub fn new(name: &str) -> Self {
        ApnProfile {
            name: name.to_string(),
            qci: default_qci(),
            arp_priority: default_arp(),
            pre_emption_capability: false,
            pre_emption_vulnerability: true,
            ambr: default_ambr(),
            pdn_type: PdnType::Ipv4,
            pdn_gw: None,
            static_ipv4: None,
        }
    }
}

mod hex_key {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(v))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        let s = String::deserialize(d)?;
        super::parse_key(&s).map_err(serde::de::Error::custom)
    }
}

mod hex_opt_key {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &Option<[u8; 16]>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_str(&hex::encode(v)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u8; 16]>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(s) => super::parse_key(&s).map(Some).map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

mod hex_amf {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &u16, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:04x}"))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_amf(&s).map_err(serde::de::Error::custom)
    }
}

/// A 128-bit key from 32 hex digits.
pub fn parse_key(s: &str) -> Result<[u8; 16], String> {
    let v = hex::decode(s.trim()).map_err(|e| format!("bad hex key: {e}"))?;
    v.try_into().map_err(|v: Vec<u8>| format!("key must be 16 octets, got {}", v.len()))
}

/// An AMF from 4 hex digits.
pub fn parse_amf(s: &str) -> Result<u16, String> {
    let s = s.trim();
    if s.len() != 4 {
        return Err(format!("AMF must be 4 hex digits, got {s:?}"));
    }
    u16::from_str_radix(s, 16).map_err(|e| format!("bad AMF {s:?}: {e}"))
}

/// A subscriber: identity, Milenage keys, SQN and subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscriber {
    pub imsi: Imsi,
    #[serde(with = "hex_key")]
    pub k: [u8; 16],
    /// OPc; derived from `op` when only that is given.
    #[serde(default, with = "hex_opt_key", skip_serializing_if = "Option::is_none")]
    pub opc: Option<[u8; 16]>,
    #[serde(default, with = "hex_opt_key", skip_serializing_if = "Option::is_none")]
    pub op: Option<[u8; 16]>,
    #[serde(default = "default_amf", with = "hex_amf")]
    pub amf: u16,
    /// SQN_HE, the last sequence number used (TS 33.102 Annex C), 48 bits.
    #[serde(default)]
    pub sqn: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msisdn: Option<String>,
    /// UE-AMBR in bit/s.
    #[serde(default = "default_ambr")]
    pub ue_ambr: Ambr,
    /// APNs; the first is the default context.
    #[serde(default)]
    pub apns: Vec<ApnProfile>,
    /// The terminal the serving MME last named in a ULR
    /// (Terminal-Information, TS 29.272 7.3.3): IMEI, Software-Version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<TerminalInformation>,
}

impl Subscriber {
    /// A subscriber with AMF 0x8000, SQN 0, no MSISDN, UE-AMBR 100 Mbit/s
    /// and the APN "internet".
    pub fn new(imsi: Imsi, k: [u8; 16], opc: [u8; 16]) -> Self {
        Subscriber {
            imsi,
            k,
            opc: Some(opc),
            op: None,
            amf: DEFAULT_AMF,
            sqn: 0,
            msisdn: None,
            ue_ambr: default_ambr(),
            apns: vec![ApnProfile::new("internet")],
            terminal: None,
        }
    }

    /// OPc: as stored, or OP ⊕ E[OP]K (TS 35.206 4.1).
    pub fn opc(&self) -> Option<[u8; 16]> {
        self.opc.or_else(|| self.op.map(|op| *Opc::from_op(&K::new(&self.k), &Op::new(&op)).as_octets()))
    }

    /// Fills OPc from OP; fails when neither is there.
    pub fn normalize(&mut self) -> Result<(), String> {
        self.opc = Some(self.opc().ok_or_else(|| format!("subscriber {} has neither OPc nor OP", self.imsi))?);
        self.sqn &= oxirush_security::milenage::Sqn::MAX;
        Ok(())
    }
}
