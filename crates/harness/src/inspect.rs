//! Looking at the state of every node, and matchers for faults.

use std::net::Ipv4Addr;

use mobicore_common::{Fteid, Imsi};
use mobicore_mme::MmeStats;
use mobicore_ran::enb::s1ap_handler::{self, Downlink};
use mobicore_ran::enb::{Outcome, UeContext};
use mobicore_ran::ue::Procedure;
use mobicore_spgwc::context::Session;
use mobicore_upf::SessionRules;

use crate::fault::{Matcher, Msg};
use crate::network::{Network, Report};

impl Network {
    /// The eNB's context of UE `ue` (with the UE itself).
    pub fn ue(&self, ue: u64) -> &UeContext {
        self.enbs[self.enb_of(ue)].ue(ue).expect("UE added at construction")
    }

    pub fn imsi(&self, ue: u64) -> Imsi {
        self.ue(ue).ue.usim.imsi.clone()
    }

    /// The UE's GUTI, as text (`Debug` of the NAS GUTI), if it has one.
    pub fn guti(&self, ue: u64) -> Option<String> {
        self.ue(ue).ue.guti().map(|g| format!("{g:?}"))
    }

    /// The PDN address the UE was given.
    pub fn ipv4(&self, ue: u64) -> Option<Ipv4Addr> {
        self.ue(ue).ue.ipv4()
    }

    pub fn mme_stats(&self) -> MmeStats {
        self.mme.stats()
    }

    /// A counter of the MME.
    pub fn mme_counter(&self, name: &'static str) -> u64 {
        self.mme.counters().value(name)
    }

    /// The S1AP PDUs the MME delivered to eNB `enb`, in order.
    pub fn s1_downlink_log(&self, enb: usize) -> Vec<&[u8]> {
        self.s1_downlink.iter().filter(|(e, _)| *e == enb).map(|(_, p)| &p[..]).collect()
    }

    /// A counter of the UPF's user-space data path.
    pub fn upf_counter(&self, name: &'static str) -> u64 {
        self.plane.user.lock().counters.value(name)
    }

    /// The SGW-C session of UE `ue`, if any.
    pub fn sgw_session(&self, ue: u64) -> Option<&Session> {
        let imsi = self.imsi(ue);
        self.spgwc.sessions().values().find(|s| s.imsi == imsi)
    }

    /// The rules the UPF's forwarding plane holds for UE `ue`'s session.
    pub fn upf_rules(&self, ue: u64) -> Option<SessionRules> {
        self.plane.table.get(self.sgw_session(ue)?.up_seid?)
    }

    /// Every outcome eNBs reported for UE `ue`, in order.
    pub fn outcomes(&self, ue: u64) -> Vec<&Outcome> {
        self.reports
            .iter()
            .filter_map(|r| match r {
                Report::Outcome { outcome, .. } if outcome.ue == ue => Some(outcome),
                _ => None,
            })
            .collect()
    }

    /// The result of UE `ue`'s last `procedure`, if it ended.
    pub fn last_result(&self, ue: u64, procedure: Procedure) -> Option<Result<(), String>> {
        self.outcomes(ue).into_iter().rev().find(|o| o.procedure == procedure).map(|o| o.result.clone())
    }

    /// Whether UE `ue`'s last attach succeeded.
    pub fn attached(&self, ue: u64) -> bool {
        self.last_result(ue, Procedure::Attach) == Some(Ok(()))
    }

    /// The eNB's S1-U F-TEID of UE `ue`'s default bearer, as it gave it
    /// in its INITIAL CONTEXT SETUP RESPONSE.
    pub fn enb_fteid(&self, ue: u64) -> Option<Fteid> {
        self.ue(ue).erabs.first().map(|e| e.enb)
    }

    /// Anomalies eNBs reported.
    pub fn anomalies(&self) -> Vec<&str> {
        self.reports
            .iter()
            .filter_map(|r| match r {
                Report::Anomaly { what, .. } => Some(what.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// The plain NAS message type a downlink S1AP PDU carries (DOWNLINK NAS
/// TRANSPORT only), seen through the eNB's own decoder.
pub fn downlink_nas_type(pdu: &[u8]) -> Option<u8> {
    match s1ap_handler::decode(pdu).ok()? {
        Downlink::DownlinkNas { nas, .. } => plain_emm_type(&nas),
        _ => None,
    }
}

/// The EMM message type of a NAS PDU that is plain or only integrity
/// protected (its inner message is readable).
fn plain_emm_type(nas: &[u8]) -> Option<u8> {
    let header = nas.first()? >> 4;
    match header {
        0 => nas.get(1).copied(),
        // Integrity protected (1) or with new context (3): 6 octets before
        // the plain message.
        1 | 3 => nas.get(7).copied(),
        _ => None,
    }
}

/// EMM message types (TS 24.301 9.8).
pub mod emm {
    pub const AUTHENTICATION_REQUEST: u8 = 0x52;
    pub const AUTHENTICATION_REJECT: u8 = 0x54;
    pub const SECURITY_MODE_COMMAND: u8 = 0x5D;
}

/// A matcher for DOWNLINK NAS TRANSPORTs carrying EMM message `t`.
pub fn downlink_nas(t: u8) -> Matcher {
    Box::new(move |m: &Msg| match m {
        Msg::S1Downlink { pdu, .. } => downlink_nas_type(pdu) == Some(t),
        _ => false,
    })
}

/// A matcher for GTPv2-C messages of type `t` (TS 29.274 6.1: octet 2).
pub fn gtp_type(t: u8) -> Matcher {
    Box::new(move |m: &Msg| m.bytes().and_then(|b| b.get(1)) == Some(&t))
}

/// A matcher for PFCP messages of type `t` (TS 29.244 7.2.2: octet 2).
pub fn pfcp_type(t: u8) -> Matcher {
    gtp_type(t)
}

/// GTPv2-C message types (TS 29.274 Table 6.1-1).
pub mod gtpv2 {
    pub const MODIFY_BEARER_REQUEST: u8 = 34;
    pub const MODIFY_BEARER_RESPONSE: u8 = 35;
    pub const DELETE_SESSION_REQUEST: u8 = 36;
    pub const DELETE_SESSION_RESPONSE: u8 = 37;
}

/// PFCP message types (TS 29.244 Table 7.3-1).
pub mod pfcp {
    pub const SESSION_MODIFICATION_REQUEST: u8 = 52;
    pub const SESSION_MODIFICATION_RESPONSE: u8 = 53;
    pub const SESSION_DELETION_RESPONSE: u8 = 55;
}
