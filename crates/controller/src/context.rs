//! What the controller knows: the sessions it recorded on S11, the anchors
//! it may move them to, their replicas there, and the relocations in force.
//! Every value here is serializable: the shell keeps it in the store.

use std::net::{Ipv4Addr, SocketAddr};

use serde::{Deserialize, Serialize};

/// One PDN connection as the MME created it on the original S/P-GW,
/// recorded for selective replication (seed 000 V.B): its Create Session
/// Request and latest Modify Bearer Request, exactly as the MME sent them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub imsi: String,
    /// The default bearer's EBI (TS 29.274 8.8).
    pub ebi: u8,
    /// The MME this session belongs to.
    pub mme: SocketAddr,
    /// The original S/P-GW's S11 TEID: the header TEID of every later
    /// request for this session.
    pub sgw_s11_teid: u32,
    /// The UE's address from the PAA.
    pub ue_ipv4: Option<Ipv4Addr>,
    /// The original anchor's S1-U F-TEID (TEID, address).
    pub s1u_sgw: Option<(u32, Ipv4Addr)>,
    #[serde(with = "hex_bytes")]
    pub csr: Vec<u8>,
    /// The latest accepted Modify Bearer Request (the eNB's F-TEID).
    #[serde(with = "opt_hex_bytes")]
    pub mbr: Option<Vec<u8>>,
    /// A Release Access Bearers accepted after that Modify Bearer: the UE
    /// is in ECM-IDLE and a replica must be too.
    #[serde(with = "opt_hex_bytes")]
    pub rab: Option<Vec<u8>>,
}

impl SessionRecord {
    /// The eNB's S1-U F-TEID (TEID, address) from the latest Modify
    /// Bearer Request: the UE's downlink tunnel.
    pub fn enb_s1u(&self) -> Option<(u32, Ipv4Addr)> {
        use mobicore_common::s11::S11Request;
        use mobicore_gtp::s11::decode_request;
        let m = mobicore_gtp::GtpMessage::parse(self.mbr.as_deref()?).ok()?;
        match decode_request(&m).ok()? {
            S11Request::ModifyBearer(r) => Some((r.s1u_enb_fteid.teid.0, r.s1u_enb_fteid.ipv4)),
            _ => None,
        }
    }

    /// Octets of recorded GTP-C (what seed 000 Fig. 6 counts).
    pub fn stored_bytes(&self) -> usize {
        self.csr.len() + self.mbr.as_ref().map_or(0, Vec::len) + self.rab.as_ref().map_or(0, Vec::len)
    }
}

/// A message of the naive log: every request the original S/P-GW accepted,
/// in the order it answered them (seed 000 V.A).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedMessage {
    pub mme: SocketAddr,
    /// For a Create Session Request: the S11 TEID the original S/P-GW
    /// gave the session, so that a replica's own can be mapped to it.
    pub created_teid: Option<u32>,
    #[serde(with = "hex_bytes")]
    pub bytes: Vec<u8>,
}

/// How the state of the moved sessions reaches the new anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every recorded message of the original S/P-GW, in order.
    Naive,
    /// Only the moved UEs' messages, TEIDs rewritten.
    Selective,
}

/// An anchor: an S/P-GW-C (and its UPF) at a site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Anchor {
    /// Unique name, e.g. `edge1`.
    pub name: String,
    /// Its S/P-GW-C's S11 address.
    #[schema(value_type = String, example = "10.0.3.2:2123")]
    pub s11: SocketAddr,
}

/// What a replica anchor answered for one replayed session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplicaSession {
    /// The default bearer's EBI.
    pub ebi: u8,
    /// The replica's S11 TEID: later requests are rewritten to it.
    pub sgw_s11_teid: u32,
    /// The replica's S1-U F-TEID: the steering switch's uplink target.
    #[schema(value_type = Option<(u32, String)>)]
    pub s1u: Option<(u32, Ipv4Addr)>,
    /// The UE's address at the replica.
    #[schema(value_type = Option<String>)]
    pub ue_ipv4: Option<Ipv4Addr>,
}

/// Octets as lowercase hex in JSON and in the store.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::to_hex(b))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        super::from_hex(&String::deserialize(d)?).ok_or_else(|| serde::de::Error::custom("bad hex"))
    }
}

mod opt_hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(b: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            Some(b) => s.serialize_some(&super::to_hex(b)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(h) => super::from_hex(&h).map(Some).ok_or_else(|| serde::de::Error::custom("bad hex")),
            None => Ok(None),
        }
    }
}

fn to_hex(b: &[u8]) -> String {
    hex::encode(b)
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    hex::decode(s).ok()
}
