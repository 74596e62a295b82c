//! What the loopback tests share: the Create Session Request of test UE `i`.
// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use mobicore_common::s11::{BearerContextToCreate, CreateSessionRequest};
use mobicore_common::{Ambr, Arp, Ebi, Ecgi, Fteid, PdnType, Plmn, Tai, Teid};
use std::net::Ipv4Addr;

/// An initial-attach Create Session Request for UE `i` from an MME at `mme_ip`.
pub fn csr(i: u32, mme_ip: Ipv4Addr) -> CreateSessionRequest {
    let plmn = Plmn::new("001", "01").unwrap();
    CreateSessionRequest {
        imsi: format!("00101{:010}", i).parse().unwrap(),
        msisdn: Some(format!("4600{:06}", i)),
        serving_network: plmn,
        tai: Tai { plmn, tac: 7 },
        ecgi: Ecgi { plmn, eci: 0x1234 },
        sender_fteid: Fteid { teid: Teid(0x10_0000 + i), ipv4: mme_ip },
        apn: "internet".into(),
        pdn_type: PdnType::Ipv4,
        apn_ambr: Ambr { uplink: 50_000_000, downlink: 100_000_000 },
        bearer: BearerContextToCreate { ebi: Ebi(5), qci: 9, arp: Arp::default() },
        pgw_s5s8_c: None,
        static_ipv4: None,
        pco: None,
        mei: None,
    }
}
