//! The MME's typed configuration (one TOML section), with defaults that run
//! without a config file.

use mobicore_common::peers::PeerFilter;
use mobicore_common::Plmn;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

/// An EPS integrity algorithm (TS 33.401 5.1.4.1), as named in configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Eia {
    Eia0,
    Eia1,
    Eia2,
    Eia3,
}

impl Eia {
    /// The 3-bit code of TS 24.301 9.9.3.23.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// An EPS ciphering algorithm (TS 33.401 5.1.3.1), as named in configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Eea {
    Eea0,
    Eea1,
    Eea2,
    Eea3,
}

impl Eea {
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// A NAS retransmission timer: its period and how many times the message is
/// sent again before the procedure is aborted (TS 24.301 10.2: T3450, T3460,
/// T3470 are 6 s, and the fifth expiry aborts).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default)]
pub struct NasTimerConfig {
    pub seconds: f64,
    pub max_retransmissions: u8,
}

impl Default for NasTimerConfig {
    fn default() -> Self {
        NasTimerConfig { seconds: 6.0, max_retransmissions: 4 }
    }
}

impl NasTimerConfig {
    /// TS 24.301 10.3: T3489 is 4 s, and the third expiry aborts.
    pub fn t3489() -> Self {
        NasTimerConfig { seconds: 4.0, max_retransmissions: 2 }
    }

    /// TS 24.301 10.3: T3485 and T3495 are 8 s, the fifth expiry aborts.
    pub fn esm_8s() -> Self {
        NasTimerConfig { seconds: 8.0, max_retransmissions: 4 }
    }

    pub fn period(&self) -> Duration {
        Duration::from_secs_f64(self.seconds.max(0.001))
    }
}

/// `[mme]` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct MmeConfig {
    /// Serving PLMN (TS 23.003 12.1); "00101" by default.
    pub plmn: Plmn,
    pub mme_group_id: u16,
    pub mme_code: u8,
    /// TACs served; a TAI list of these is given in Attach Accept.
    pub served_tacs: Vec<u16>,
    pub mme_name: String,
    /// Local IPv4 address of S11, for the Sender F-TEID (TS 29.274 8.22).
    pub s11_local_ip: Ipv4Addr,
    /// Relative MME Capacity (TS 36.413 9.2.3.17), 0..=255.
    pub relative_capacity: u8,
    /// Integrity algorithms by preference. EIA0 is never selected for a
    /// normal attach (TS 33.401 5.1.4.1), even if listed.
    pub integrity_order: Vec<Eia>,
    /// Ciphering algorithms by preference.
    pub ciphering_order: Vec<Eea>,
    pub t3450: NasTimerConfig,
    pub t3460: NasTimerConfig,
    pub t3470: NasTimerConfig,
    /// ESM INFORMATION REQUEST retransmission (TS 24.301 10.3: 4 s, two
    /// retransmissions, then the attach is rejected with ESM #53).
    pub t3489: NasTimerConfig,
    /// ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST of a PDN connectivity
    /// after attach (8 s, four retransmissions, then the PDN goes).
    pub t3485: NasTimerConfig,
    /// DEACTIVATE EPS BEARER CONTEXT REQUEST (8 s, four retransmissions,
    /// then the bearer is deactivated locally).
    pub t3495: NasTimerConfig,
    /// Periodic TAU timer given in Attach Accept (TS 24.301 10.2), seconds.
    pub t3412_seconds: u64,
    /// Mobile reachable timer (TS 24.301 5.3.7), seconds: runs while the UE
    /// is ECM-IDLE. Absent: T3412 + 4 minutes, as the clause suggests.
    pub mobile_reachable_seconds: Option<u64>,
    /// Implicit detach timer (TS 24.301 5.3.7), seconds: starts when the
    /// mobile reachable timer expires; at its expiry the UE is detached.
    pub implicit_detach_seconds: u64,
    /// M-TMSIs of implicitly detached UEs remembered at most, so that their
    /// SERVICE REQUEST or TAU gets #10 "implicitly detached" (the oldest go).
    pub implicitly_detached_max: usize,
    /// How long an implicitly detached M-TMSI is remembered, seconds.
    pub implicitly_detached_seconds: u64,
    /// T3413 (TS 24.301 5.6.2.2): paging retransmission period and how many
    /// times the paging is repeated before it fails.
    pub t3413: NasTimerConfig,
    /// T3422 (TS 24.301 10.2): DETACH REQUEST of a network detach.
    pub t3422: NasTimerConfig,
    /// Throttling of Downlink Data Notifications asked of the S-GWs while
    /// this MME is loaded (TS 23.401 4.3.7.4.1a); off by default.
    pub ddn_throttling: DdnThrottlingConfig,
    /// If set, every default bearer uses this APN, whatever the UE asks.
    pub default_apn_override: Option<String>,
    /// The PGW S5/S8 control plane address sent in Create Session Requests
    /// (TS 29.274 7.2.1) for an APN that neither the subscription
    /// (PDN-GW allocation, TS 23.401 4.3.8.1) nor `pgw_by_apn` gives a PGW.
    /// Absent: the S-GW's own S11 address (the combined S/P-GW-C), or
    /// 127.0.0.1 if that is not known.
    pub pgw: Option<Ipv4Addr>,
    /// The PGW per APN (case-insensitive APN -> address), as a DNS
    /// selection would give it (TS 29.303); the subscription's PDN-GW
    /// allocation comes first.
    pub pgw_by_apn: BTreeMap<String, Ipv4Addr>,
    /// Seed of the random M-TMSI and MME-UE-S1AP-ID (= MME S11 TEID) draws
    /// (tests: repeatable values); from the OS when absent. Neither is
    /// predictable from the previous one, nor ever one still in use.
    pub mtmsi_seed: Option<u32>,
    /// The MME host of the elastic MME this core runs as (issue 13), in
    /// 1..=254: every MME-UE-S1AP-ID and M-TMSI it allocates has it as its
    /// top octet, so that the front end routes a UE's messages by these
    /// identifiers alone and no two hosts hand out the same one. Absent
    /// (the monolithic MME): the whole range.
    pub host_prefix: Option<u8>,
    /// UE contexts held at most (connected or idle). A new UE beyond it is
    /// rejected with EMM cause #22 congestion (TS 24.301 5.5.1.2.5).
    pub max_ues: usize,
    /// UE-associated S1 connections per eNB at most; beyond it, #22 too.
    pub max_ues_per_enb: usize,
    /// S6a requests in flight at most; an attach that would need one more
    /// is rejected with #22 (the HSS is the bottleneck, not this MME).
    pub max_s6a_in_flight: usize,
    /// Addresses eNBs may connect from on S1-MME; other associations are
    /// aborted. Loopback by default (the eNBs of `mobicore demo`).
    pub enb_peers: PeerFilter,
    /// TS1RELOCprep (TS 36.413 8.4.1.2), milliseconds: how long an S1
    /// handover's preparation may take (HANDOVER REQUIRED to HANDOVER
    /// COMMAND) before the MME ends it with HANDOVER PREPARATION FAILURE.
    pub ts1reloc_prep_ms: u64,
    /// TS1RELOCoverall (TS 36.413 8.4.1.2), milliseconds: from the
    /// HANDOVER COMMAND to the HANDOVER NOTIFY (then to the source's
    /// release); at expiry both S1 connections are released.
    pub ts1reloc_overall_ms: u64,
    /// Milliseconds an S1 handover's indirect data forwarding tunnel is
    /// kept after the handover completes (the source MME's timer of TS
    /// 23.401 5.5.1.2.2, step 21 at its expiry): the source eNB forwards
    /// until the End Marker the S-GW sent at the path switch comes back
    /// through the tunnel, so deleting it at once loses what is still on
    /// its way. Longer than the targets wait for that End Marker.
    pub indirect_forwarding_hold_ms: u64,
}

/// `[mme.ddn_throttling]`: while more than `pagings_above` pagings run,
/// every Downlink Data Notification Acknowledge carries the DL low
/// priority traffic Throttling IE (TS 29.274 8.85): the S-GW drops
/// `factor_percent` percent of the DDNs of its low-priority bearers for
/// `delay_seconds` (TS 23.401 4.3.7.4.1a). With `reject_arp_above` the
/// MME also rejects, under the same load, the DDNs of bearers whose ARP
/// priority level is above it (4.3.7.4.1a: "the MME can reject DDN
/// requests for low priority traffic for UEs in idle mode"): cause
/// "Unable to page UE", nobody paged, and the S-GW discards its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct DdnThrottlingConfig {
    /// The load threshold: pagings running (T3413) at most without
    /// throttling; absent (the default): never throttle.
    pub pagings_above: Option<usize>,
    /// Throttling Factor, 0..=100 percent.
    pub factor_percent: u8,
    /// Throttling Delay, seconds (sent in the finest unit of 8.85 that
    /// holds it, rounded up; at most 310 hours).
    pub delay_seconds: u32,
    /// ARP priority levels above this one (1 highest .. 15 lowest) are low
    /// priority traffic, rejected under load; absent (the default): none.
    pub reject_arp_above: Option<u8>,
}

impl Default for DdnThrottlingConfig {
    fn default() -> Self {
        DdnThrottlingConfig { pagings_above: None, factor_percent: 50, delay_seconds: 60, reject_arp_above: None }
    }
}

impl MmeConfig {
    /// Values the types admit but the specifications do not.
    pub fn validate(&self) -> Result<(), String> {
        let t = &self.ddn_throttling;
        if t.factor_percent > 100 {
            return Err(format!("[mme.ddn_throttling] factor_percent = {} (0..=100)", t.factor_percent));
        }
        if t.delay_seconds > 31 * 36_000 {
            return Err(format!("[mme.ddn_throttling] delay_seconds = {} (at most 1116000)", t.delay_seconds));
        }
        if let Some(a) = t.reject_arp_above.filter(|a| !(1..=15).contains(a)) {
            return Err(format!("[mme.ddn_throttling] reject_arp_above = {a} (an ARP priority level, 1..=15)"));
        }
        if let Some(p @ (0 | 255)) = self.host_prefix {
            return Err(format!("[mme] host_prefix = {p} (1..=254)"));
        }
        Ok(())
    }

    /// The mobile reachable timer's period (TS 24.301 5.3.7: T3412 + 4 min
    /// unless configured).
    pub fn mobile_reachable(&self) -> Duration {
        Duration::from_secs(self.mobile_reachable_seconds.unwrap_or(self.t3412_seconds + 240))
    }

    /// The PGW for `apn`: the subscription's PDN-GW allocation (an IPv4
    /// one: S11 here is IPv4), else `pgw_by_apn`, else `pgw`, else
    /// loopback (TS 23.401 4.3.8.1).
    pub fn pgw_for(&self, apn: &str, subscribed: Option<std::net::IpAddr>) -> Ipv4Addr {
        if let Some(std::net::IpAddr::V4(ip)) = subscribed {
            return ip;
        }
        let by_apn = self.pgw_by_apn.iter().find(|(a, _)| a.eq_ignore_ascii_case(apn)).map(|(_, ip)| *ip);
        by_apn.or(self.pgw).unwrap_or(Ipv4Addr::LOCALHOST)
    }
}

impl Default for MmeConfig {
    fn default() -> Self {
        MmeConfig {
            plmn: "00101".parse().expect("valid default PLMN"),
            mme_group_id: 1,
            mme_code: 1,
            served_tacs: vec![1],
            mme_name: "mobicore-mme".into(),
            s11_local_ip: Ipv4Addr::LOCALHOST,
            relative_capacity: 255,
            integrity_order: vec![Eia::Eia2, Eia::Eia1, Eia::Eia3],
            ciphering_order: vec![Eea::Eea0, Eea::Eea2, Eea::Eea1, Eea::Eea3],
            t3450: NasTimerConfig::default(),
            t3460: NasTimerConfig::default(),
            t3470: NasTimerConfig::default(),
            t3489: NasTimerConfig::t3489(),
            t3485: NasTimerConfig::esm_8s(),
            t3495: NasTimerConfig::esm_8s(),
            t3412_seconds: 54 * 60,
            mobile_reachable_seconds: None,
            implicit_detach_seconds: 4 * 60,
            // A day of implicit detaches at 1/s; 16 bytes each.
            implicitly_detached_max: 1 << 16,
            implicitly_detached_seconds: 24 * 3600,
            // Network dependent (TS 24.301 10.2); 4 s leaves a DRX cycle of
            // 2.56 s room, two repetitions.
            t3413: NasTimerConfig { seconds: 4.0, max_retransmissions: 2 },
            t3422: NasTimerConfig::default(),
            ddn_throttling: DdnThrottlingConfig::default(),
            default_apn_override: None,
            pgw: None,
            pgw_by_apn: BTreeMap::new(),
            mtmsi_seed: None,
            host_prefix: None,
            // About 2 KiB a context: 1 Mi contexts stay within 2-3 GiB.
            max_ues: 1 << 20,
            // Emulated eNBs carry 100k UEs (seed 004's scale); real ones far fewer.
            max_ues_per_enb: 1 << 17,
            // Ten times the attaches the bench keeps in flight by default (256).
            max_s6a_in_flight: 4096,
            enb_peers: PeerFilter::loopback(),
            // A loaded target answers in tens of ms; seconds leave room.
            ts1reloc_prep_ms: 5_000,
            ts1reloc_overall_ms: 10_000,
            indirect_forwarding_hold_ms: 2_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_brief() {
        let c = MmeConfig::default();
        assert_eq!(c.plmn.to_string(), "00101");
        assert_eq!(c.integrity_order, vec![Eia::Eia2, Eia::Eia1, Eia::Eia3]);
        assert_eq!(c.ciphering_order[0], Eea::Eea0);
        assert_eq!(c.t3460.period(), Duration::from_secs(6));
        assert_eq!(c.t3460.max_retransmissions, 4);
        // TS 24.301 10.3: T3489 4 s (third expiry aborts), T3485/T3495 8 s.
        assert_eq!((c.t3489.period(), c.t3489.max_retransmissions), (Duration::from_secs(4), 2));
        assert_eq!((c.t3485.period(), c.t3495.max_retransmissions), (Duration::from_secs(8), 4));
        assert_eq!((c.pgw, c.pgw_by_apn.len()), (None, 0));
    }

    #[test]
    fn pgw_is_the_subscriptions_then_per_apn_then_default() {
        let c = MmeConfig {
            pgw: Some(Ipv4Addr::new(192, 0, 2, 1)),
            pgw_by_apn: [("ims".to_string(), Ipv4Addr::new(192, 0, 2, 2))].into_iter().collect(),
            ..MmeConfig::default()
        };
        let hss: std::net::IpAddr = Ipv4Addr::new(198, 51, 100, 7).into();
        assert_eq!(c.pgw_for("IMS", Some(hss)), Ipv4Addr::new(198, 51, 100, 7));
        assert_eq!(c.pgw_for("IMS", None), Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(c.pgw_for("internet", None), Ipv4Addr::new(192, 0, 2, 1));
        // An IPv6 PDN GW cannot go in an IPv4 S11 F-TEID: the configuration decides.
        assert_eq!(c.pgw_for("internet", Some("2001:db8::1".parse().unwrap())), Ipv4Addr::new(192, 0, 2, 1));
    }

    #[test]
    fn deserializes_partial_json_like_config() {
        // serde_json is not a dependency; use the Deserialize impl through a
        // tiny in-memory deserializer: serde's value de from a map.
        use serde::de::value::{Error, MapDeserializer};
        let entries = vec![("mme_name", "edge-mme"), ("plmn", "310410")];
        let de = MapDeserializer::<_, Error>::new(entries.into_iter());
        let c = MmeConfig::deserialize(de).unwrap();
        assert_eq!(c.mme_name, "edge-mme");
        assert_eq!(c.plmn.mnc(), "410");
        assert_eq!(c.mme_code, 1);
    }
}
