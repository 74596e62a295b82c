//! Typed configuration of the emulated RAN (one TOML section, `[ran]`) and
//! the subscriber plan that both the RAN and the HSS provisioning read.

use mobicore_common::{Imsi, Plmn};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::usim::Usim;

/// How the emulated subscribers are numbered and keyed. The demo provisions
/// the HSS from the same plan, so UE `i` of the RAN is subscriber `i` of
/// the HSS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubscriberPlan {
    /// Home PLMN of the IMSIs.
    pub plmn: Plmn,
    /// MSIN of subscriber 0; subscriber `i` has `first_msin + i`.
    pub first_msin: u64,
    /// Subscriber key K (TS 33.102 6.3), written as 32 hex digits.
    #[serde(with = "hex16")]
    pub k: [u8; 16],
    /// OPc (TS 35.206 4.1), written as 32 hex digits.
    #[serde(with = "hex16")]
    pub opc: [u8; 16],
    /// Authentication management field; 0x8000 has the separation bit
    /// that EPS requires (TS 33.401 6.1.1).
    pub amf: u16,
    /// SQN the USIMs start from (48 bits; the last one they accepted).
    pub sqn: u64,
}

impl Default for SubscriberPlan {
    fn default() -> Self {
        SubscriberPlan {
            plmn: "00101".parse().expect("valid PLMN"),
            first_msin: 1,
            k: hex_array("465B5CE8B199B49FAA5F0A2EE238A6BC"),
            opc: hex_array("E8ED289DEBA952E4283B54E88E6183CA"),
            amf: 0x8000,
            sqn: 0,
        }
    }
}

fn hex_array(s: &str) -> [u8; 16] {
    let mut out = [0; 16];
    hex::decode_to_slice(s, &mut out).expect("16 octets of hex");
    out
}

/// The IMSI of subscriber `index`: MCC + MNC + MSIN, the MSIN zero-padded
/// so that the IMSI has 15 digits (TS 23.003 2.2). The MSIN is cut to its
/// low digits if `first_msin + index` has too many.
pub fn imsi_for(index: u64, plan: &SubscriberPlan) -> Imsi {
    let prefix = format!("{}{}", plan.plmn.mcc(), plan.plmn.mnc());
    let width = 15 - prefix.len();
    let modulus = 10u64.pow(width as u32);
    let msin = plan.first_msin.wrapping_add(index) % modulus;
    format!("{prefix}{msin:0width$}").parse().expect("15 decimal digits")
}

/// The USIM of subscriber `index`.
pub fn usim_for(index: u64, plan: &SubscriberPlan) -> Usim {
    Usim::new(imsi_for(index, plan), plan.k, plan.opc, plan.sqn, plan.amf)
}

/// The emulated RAN's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RanConfig {
    /// The MME's S1-MME address.
    pub mme: SocketAddr,
    /// Number of eNBs, each with its own SCTP association.
    pub enbs: u32,
    /// eNB ID (20-bit macro) of the first eNB; the others follow.
    pub first_enb_id: u32,
    /// Number of UEs, spread round robin over the eNBs.
    pub ues: u64,
    /// UE arrivals per second; `None` starts them as fast as
    /// `max_in_flight` allows.
    pub rate: Option<f64>,
    /// Cap on procedures in progress at once.
    pub max_in_flight: usize,
    /// Subscribers of the UEs.
    pub plan: SubscriberPlan,
    /// Serving PLMN that the eNBs broadcast.
    pub plmn: Plmn,
    /// Tracking area code of the first eNB's cell (of every cell without
    /// `enbs_per_tac`).
    pub tac: u16,
    /// eNBs per tracking area: eNB `k` (its position in the run) has TAC
    /// `tac + k / enbs_per_tac` ([`tac_of`]), so that idle UEs the
    /// mobility model moves cross TA boundaries and update (TS 24.301
    /// 5.5.3.2.2); absent: one TA for all.
    pub enbs_per_tac: Option<u32>,
    /// The eNBs' S1-U address, sent in the E-RAB setup lists.
    pub s1u_addr: Ipv4Addr,
    /// Detach every UE after the attach phase.
    pub detach: bool,
    /// Detach with "switch off" (no Detach Accept expected).
    pub switch_off: bool,
    /// After a detach phase, attach every UE again with its GUTI and detach
    /// once more.
    pub attach_with_guti_second_round: bool,
    /// After the attach phase (and what runs while attached): release
    /// every UE to idle, UE-triggered service requests, X2 handovers, S1
    /// handovers (each to the next eNB), release again, tracking area
    /// updates from idle; each a measured phase. Needs two eNBs or more
    /// for the handovers.
    pub mobility: bool,
    /// Guard time of one procedure, in milliseconds.
    pub procedure_timeout_ms: u64,
    /// Guard time of the S1 Setup of each eNB, in milliseconds.
    pub s1_setup_timeout_ms: u64,
    /// User-plane inactivity after which an eNB asks the MME to release a
    /// connected UE (UE CONTEXT RELEASE REQUEST, user-inactivity), in
    /// milliseconds; absent: UEs stay connected.
    pub inactivity_ms: Option<u64>,
    /// The mobility model (`[ran.moving]`): after the attach phase and
    /// what runs while attached, the registered UEs move between eNBs at
    /// its rate for its duration, connected ones by handover of its type,
    /// idle ones by cell reselection (before the mobility
    /// phases); absent: nobody moves.
    pub moving: Option<crate::mobility::MobilityConfig>,
}

impl Default for RanConfig {
    fn default() -> Self {
        RanConfig {
            mme: SocketAddr::from(([127, 0, 0, 1], mobicore_common::sctp_api::S1AP_PORT)),
            enbs: 1,
            first_enb_id: 1,
            ues: 1,
            rate: None,
            max_in_flight: 1000,
            plan: SubscriberPlan::default(),
            plmn: "00101".parse().expect("valid PLMN"),
            tac: 1,
            enbs_per_tac: None,
            s1u_addr: Ipv4Addr::new(127, 0, 0, 1),
            detach: false,
            switch_off: false,
            attach_with_guti_second_round: false,
            mobility: false,
            procedure_timeout_ms: 10_000,
            s1_setup_timeout_ms: 5_000,
            inactivity_ms: None,
            moving: None,
        }
    }
}

/// The TAC of eNB `k` (its position among the run's eNBs): `first` for
/// every eNB without `enbs_per_tac`, else `first + k / enbs_per_tac`
/// (wrapping in the 16-bit TAC, TS 23.003 19.4.2.3).
pub fn tac_of(first: u16, enbs_per_tac: Option<u32>, k: usize) -> u16 {
    match enbs_per_tac.filter(|n| *n > 0) {
        Some(n) => first.wrapping_add((k as u64 / u64::from(n)) as u16),
        None => first,
    }
}

impl RanConfig {
    /// The TAC of eNB `k` ([`tac_of`]).
    pub fn tac_of(&self, k: usize) -> u16 {
        tac_of(self.tac, self.enbs_per_tac, k)
    }
    pub fn procedure_timeout(&self) -> Duration {
        Duration::from_millis(self.procedure_timeout_ms)
    }
    pub fn s1_setup_timeout(&self) -> Duration {
        Duration::from_millis(self.s1_setup_timeout_ms)
    }
    pub fn inactivity_timeout(&self) -> Option<Duration> {
        self.inactivity_ms.map(Duration::from_millis)
    }
}

/// 16 octets as 32 hex digits in text formats.
mod hex16 {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode_upper(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        let text = String::deserialize(d)?;
        let mut out = [0; 16];
        hex::decode_to_slice(text.trim(), &mut out).map_err(D::Error::custom)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imsi_is_mcc_mnc_and_padded_msin() {
        let plan = SubscriberPlan::default();
        assert_eq!(imsi_for(0, &plan).as_str(), "001010000000001");
        assert_eq!(imsi_for(41, &plan).as_str(), "001010000000042");
        let plan3 = SubscriberPlan { plmn: "310410".parse().unwrap(), first_msin: 7, ..plan };
        assert_eq!(imsi_for(3, &plan3).as_str(), "310410000000010");
    }

    #[test]
    fn usim_carries_the_plan_keys() {
        let plan = SubscriberPlan::default();
        let usim = usim_for(5, &plan);
        assert_eq!(usim.imsi.as_str(), "001010000000006");
        assert_eq!(usim.k, plan.k);
        assert_eq!(usim.opc, plan.opc);
        assert_eq!(usim.amf, 0x8000);
    }

    #[test]
    fn enbs_share_a_tac_or_group_by_enbs_per_tac() {
        let one = RanConfig { tac: 7, ..Default::default() };
        assert_eq!((0..4).map(|k| one.tac_of(k)).collect::<Vec<_>>(), [7, 7, 7, 7]);
        let two = RanConfig { tac: 7, enbs_per_tac: Some(2), ..Default::default() };
        assert_eq!((0..5).map(|k| two.tac_of(k)).collect::<Vec<_>>(), [7, 7, 8, 8, 9]);
        assert_eq!(tac_of(1, Some(1), 3), 4);
        assert_eq!(tac_of(1, Some(0), 3), 1, "0 is one TA for all");
        assert_eq!(tac_of(u16::MAX, Some(1), 1), 0);
    }

    #[test]
    fn plan_keys_are_hex_in_json() {
        let plan = SubscriberPlan::default();
        let text = serde_json::to_string(&plan).unwrap();
        assert!(text.contains("465B5CE8B199B49FAA5F0A2EE238A6BC"), "{text}");
        let back: SubscriberPlan = serde_json::from_str(&text).unwrap();
        assert_eq!(back, plan);
        let cfg: RanConfig = serde_json::from_str(r#"{"ues": 10, "rate": 50.0}"#).unwrap();
        assert_eq!(cfg.ues, 10);
        assert_eq!(cfg.rate, Some(50.0));
        assert_eq!(cfg.mme.port(), 36412);
    }
}
