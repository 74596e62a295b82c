//! The MME's state: eNB contexts (one per S1 association) and UE contexts
//! (EMM, NAS security, subscription, session), keyed by MME-UE-S1AP-ID.

use bytes::Bytes;
use mobicore_common::s6a::{EutranVector, SubscriptionData};
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ambr, Arp, Ecgi, Fteid, Guti, Imsi, PdnType, Plmn, Tai};
use oxirush_nas::nas_eps::{NasEpsSecurityHeaderType, NasSecurityContext, NasUeNetworkCapability};
use oxirush_security::nas_eps::KAsme;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

/// The MME's opaque key of a UE in S6a/S11 exchanges: the MME-UE-S1AP-ID
/// and the generation of the context, so that a late answer for a released
/// (or restarted) UE is recognised and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct UeRef {
    pub mme_ue_s1ap_id: u32,
    pub generation: u64,
}

/// A Global eNB ID (TS 36.413 9.2.1.37): the PLMN, the length of the eNB
/// ID (20 macro, 28 home, 18 short macro, 21 long macro) and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GlobalEnbId {
    pub plmn: Option<Plmn>,
    pub bits: u8,
    pub value: u32,
}

/// An eNB as the S1 Setup made it known (TS 36.413 8.7.3).
#[derive(Debug, Clone)]
pub struct EnbContext {
    pub assoc: AssocId,
    pub outbound_streams: u16,
    /// S1 Setup succeeded.
    pub setup: bool,
    pub name: Option<String>,
    /// Its Global eNB ID, once its S1 Setup succeeded.
    pub global_enb_id: Option<GlobalEnbId>,
    /// UE-associated S1 connections on this association (bounded by
    /// `max_ues_per_enb`).
    pub s1_ues: usize,
    pub tacs: Vec<u16>,
    /// Default paging DRX in radio frames (32, 64, 128, 256; TS 36.413
    /// 9.2.1.16), from S1 Setup or eNB Configuration Update.
    pub default_paging_drx: Option<u16>,
    /// Round-robin cursor over UE-associated streams.
    pub next_stream: u16,
}

impl EnbContext {
    pub fn new(assoc: AssocId, outbound_streams: u16) -> Self {
        EnbContext {
            assoc,
            outbound_streams,
            setup: false,
            name: None,
            global_enb_id: None,
            s1_ues: 0,
            tacs: Vec::new(),
            default_paging_drx: None,
            next_stream: 0,
        }
    }

    /// Stream for a new UE: non-UE signalling keeps stream 0, UE-associated
    /// signalling uses 1..outbound_streams-1 (TS 36.412 7).
    pub fn pick_stream(&mut self) -> u16 {
        if self.outbound_streams <= 1 {
            return 0;
        }
        let n = self.outbound_streams - 1;
        self.next_stream = (self.next_stream % n) + 1;
        self.next_stream
    }
}

/// The UE's S1 connection (ECM-CONNECTED): the association and the eNB's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct S1Conn {
    pub assoc: AssocId,
    pub enb_ue_s1ap_id: u32,
    pub stream: u16,
}

/// EMM main state (TS 24.301 5.1.3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmmState {
    Deregistered,
    CommonProcedureInitiated,
    Registered,
}

/// What the UE context waits for: the step of the running procedure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Idle,
    /// Identity Request sent (T3470).
    Identity,
    /// S6a Authentication-Information-Request in flight.
    AuthInfo,
    /// Authentication Request sent (T3460).
    Authentication,
    /// Security Mode Command sent (T3460).
    SecurityMode,
    /// ESM INFORMATION REQUEST sent (T3489), TS 24.301 6.6.1.2.
    EsmInformation,
    /// S6a Update-Location-Request in flight.
    UpdateLocation,
    /// S11 Create Session Request in flight.
    CreateSession,
    /// Initial Context Setup with Attach Accept sent (T3450); waiting for the
    /// ICS Response and the Attach Complete, in either order.
    AttachAccept,
    /// S11 Delete Sessions in flight for a UE-initiated detach, one per
    /// PDN connection; `pending` of them not answered yet.
    DetachDeleteSession {
        switch_off: bool,
        pending: u8,
    },
    /// S11 Release Access Bearers in flight for an S1 release.
    ReleaseAccessBearers,
    /// SERVICE REQUEST verified, INITIAL CONTEXT SETUP REQUEST sent
    /// (TS 23.401 5.3.4.1); the ICS Response ends it.
    ServiceRequest,
    /// TRACKING AREA UPDATE ACCEPT sent (T3450, TS 24.301 5.5.3.2.4); the
    /// TAU COMPLETE ends it (`old_mtmsi` is freed then). `release`: the S1
    /// connection goes at the end (from idle, no active flag).
    TauAccept {
        old_mtmsi: Option<u32>,
        release: bool,
    },
    /// Network detach: DETACH REQUEST sent (T3422, TS 24.301 5.5.2.3).
    NetworkDetach,
    /// An X2 or S1 handover runs (TS 23.401 5.5.1); `UeContext::handover`
    /// says which and where it is.
    Handover,
}

/// Which NAS timer runs (TS 24.301 10.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NasTimerKind {
    T3450,
    T3460,
    T3470,
    /// ESM INFORMATION REQUEST (TS 24.301 6.6.1.2.6).
    T3489,
    /// ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST after attach (6.4.1.6).
    T3485,
    /// DEACTIVATE EPS BEARER CONTEXT REQUEST (6.4.4.6).
    T3495,
    /// DETACH REQUEST of the network (5.5.2.3.4).
    T3422,
}

/// A running NAS timer and the downlink message it retransmits.
#[derive(Debug, Clone)]
pub struct NasTimer {
    pub kind: NasTimerKind,
    pub seq: u64,
    pub deadline: Instant,
    pub expiries: u8,
    pub message: Bytes,
    pub header: NasEpsSecurityHeaderType,
}

/// Timers that guard a state rather than retransmit a NAS message; a UE
/// runs at most one of each kind, beside its NAS timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuardKind {
    /// Mobile reachable timer (TS 24.301 5.3.5, TS 23.401 4.3.5.2): runs
    /// while the UE is ECM-IDLE, T3412 + 4 min by default.
    MobileReachable,
    /// Implicit detach timer: starts when the mobile reachable timer
    /// expires; at its expiry the UE is detached implicitly.
    ImplicitDetach,
    /// T3413: paging retransmission (TS 24.301 5.6.2.2).
    T3413,
    /// TS1RELOCprep: Handover Preparation (TS 36.413 8.4.1.2).
    TS1RelocPrep,
    /// TS1RELOCoverall at the source (TS 36.413 8.4.1.2): the source
    /// releases on its expiry if no UE Context Release came.
    TS1RelocOverall,
    /// After an S1 handover with indirect forwarding: the S-GW's
    /// forwarding tunnel is deleted at its expiry (TS 23.401 5.5.1.2.2
    /// step 21), once what the source still forwards, End Marker last,
    /// has gone through it.
    IndirectForwarding,
}

/// A running guard timer; `count` is how many times it already fired (the
/// paging attempts for T3413).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardTimer {
    pub kind: GuardKind,
    pub seq: u64,
    pub deadline: Instant,
    pub count: u8,
}

/// What the Attach Request asked for (TS 24.301 8.2.4).
#[derive(Debug, Clone)]
pub struct AttachData {
    /// EEA and EIA octets of the UE network capability (TS 24.301 9.9.3.34),
    /// EEA0/EIA0 in the most significant bit.
    pub eea: u8,
    pub eia: u8,
    /// The UE network capability IE, replayed in the SMC.
    pub ue_network_capability: NasUeNetworkCapability,
    /// PDN CONNECTIVITY REQUEST in the ESM container.
    pub pdn: PdnRequest,
    /// The UE gave an old GUTI of ours that we knew.
    pub by_guti: bool,
    /// The UE was already asked for its IMSI in this attach.
    pub imsi_requested: bool,
}

/// What a PDN CONNECTIVITY REQUEST asked for (TS 24.301 8.3.20), in the
/// ATTACH REQUEST or on its own after attach; the ESM INFORMATION RESPONSE
/// fills in the APN and PCO (6.6.1.2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PdnRequest {
    pub pti: u8,
    pub apn: Option<String>,
    /// PDN type code of TS 24.301 9.9.4.10 (1 IPv4, 2 IPv6, 3 IPv4v6).
    pub pdn_type: u8,
    /// The ESM information transfer flag (9.9.4.5) was set.
    pub esm_information_transfer: bool,
    /// The PCO (TS 24.008 10.5.6.3) or ePCO (10.5.6.3A) value octets.
    pub pco: Option<Vec<u8>>,
    /// The PCO came as ePCO: the answer goes in an ePCO too.
    pub epco: bool,
}

/// A UE-requested ESM procedure after attach (TS 24.301 6.5.1, 6.5.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EsmProcedure {
    /// PDN connectivity: the Create Session Request for the new default
    /// bearer `ebi` is in flight.
    CreateSession { req: PdnRequest, ebi: u8, apn: String },
    /// The E-RAB SETUP REQUEST with the ACTIVATE DEFAULT EPS BEARER CONTEXT
    /// REQUEST went (T3485); the E-RAB SETUP RESPONSE (`erab_done`) and the
    /// ACTIVATE DEFAULT EPS BEARER CONTEXT ACCEPT (`accepted`) come in either
    /// order.
    ActivateDefault { pti: u8, ebi: u8, erab_done: bool, accepted: bool },
    /// PDN disconnect: the Delete Session Request of `ebi` is in flight.
    DeleteSession { pti: u8, ebi: u8 },
    /// The E-RAB RELEASE COMMAND with the DEACTIVATE EPS BEARER CONTEXT
    /// REQUEST went (T3495).
    Deactivate { pti: u8, ebi: u8 },
}

/// A running EPS-AKA (TS 33.401 6.1).
#[derive(Debug, Clone)]
pub struct AuthState {
    pub vector: EutranVector,
    pub ksi: u8,
    pub sync_failures: u8,
}

/// The UE's NAS security context and its eKSI (TS 33.401 7.2.5).
pub struct NasSecurity {
    pub ctx: NasSecurityContext,
    pub kasme: KAsme,
    pub ksi: u8,
    /// Taken into use by a Security Mode Complete.
    pub active: bool,
    /// The uplink NAS COUNT of the latest verified uplink message.
    pub last_ul_count: u32,
    /// S1AP UE security capabilities octets (EEA1.., EIA1.. first).
    pub ue_eea: u8,
    pub ue_eia: u8,
    /// The access stratum key chain (TS 33.401 7.2.8.4): the KeNB of the
    /// latest Initial Context Setup, then each NH derived from it, and the
    /// NCC of the latest (0 with the KeNB itself).
    pub nh: [u8; 32],
    pub ncc: u8,
}

/// A PDN connection and its default bearer (TS 23.401 5.3.2.1, 5.10.2).
#[derive(Debug, Clone)]
pub struct Session {
    pub apn: String,
    /// The EBI of the default bearer, the PDN's linked EBI.
    pub ebi: u8,
    pub qci: u8,
    pub arp: Arp,
    pub apn_ambr: Ambr,
    pub sgw_s11: Fteid,
    pub sgw_s1u: Fteid,
    /// The PDN type granted, with the addresses of that type.
    pub pdn_type: PdnType,
    pub paa: Option<Ipv4Addr>,
    pub ipv6_prefix: Option<(Ipv6Addr, u8)>,
    pub enb_s1u: Option<Fteid>,
}

/// One UE.
pub struct UeContext {
    pub id: u32,
    pub generation: u64,
    pub s1: Option<S1Conn>,
    pub imsi: Option<Imsi>,
    pub guti: Option<Guti>,
    /// An older M-TMSI that still names the UE: a TAU ACCEPT whose T3450
    /// ran out keeps both GUTIs valid (TS 24.301 5.5.3.2.7 c).
    pub old_mtmsi: Option<u32>,
    pub emm: EmmState,
    pub step: Step,
    pub attach: Option<AttachData>,
    pub ics_done: bool,
    pub attach_complete: bool,
    pub auth: Option<AuthState>,
    pub security: Option<NasSecurity>,
    pub subscription: Option<SubscriptionData>,
    /// The UE's PDN connections, the attach's first (TS 23.401 5.10).
    pub sessions: Vec<Session>,
    /// The ESM procedure after attach that runs, if any.
    pub esm: Option<EsmProcedure>,
    pub timer: Option<NasTimer>,
    /// The guard timers that run, at most one per kind.
    pub guards: Vec<GuardTimer>,
    pub tai: Option<Tai>,
    /// The TACs of the TAI list the UE was last given (ATTACH or TAU
    /// ACCEPT): where it may be while idle without updating, so where it
    /// is paged (TS 23.401 4.3.5.3, 5.3.4.3 step 3a).
    pub tai_list: Vec<u16>,
    pub ecgi: Option<Ecgi>,
    /// The UE Radio Capability octets of the latest UE CAPABILITY INFO
    /// INDICATION (TS 36.413 8.9), for a later INITIAL CONTEXT SETUP REQUEST.
    pub ue_radio_capability: Option<Bytes>,
    /// The 16 digits of the IMEISV from SECURITY MODE COMPLETE.
    pub imeisv: Option<String>,
    /// The handover that runs (with `Step::Handover`), or the S1
    /// connections it released whose release is not complete yet.
    pub handover: Option<crate::s1_handover::Handover>,
    /// The paging that runs (with the T3413 guard), and why.
    pub paging: Option<crate::paging::Paging>,
    /// The UE CONTEXT RELEASE COMMAND sent whose COMPLETE has not come
    /// (TS 36.413 8.3.3): the UE is not at rest until it does, and a host
    /// that takes the UE over sends it again (the host that sent it may
    /// have died before it went out).
    pub releasing: Option<Releasing>,
}

/// A UE CONTEXT RELEASE COMMAND sent, on the S1 connection it released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Releasing {
    pub s1: S1Conn,
    /// The command's S1AP PDU, as sent.
    pub command: Bytes,
}

impl UeContext {
    /// The UE-AMBR the eNB enforces (TS 23.401 4.7.3): the sum of the
    /// APN-AMBRs of the UE's active PDN connections, up to the subscribed
    /// UE-AMBR, per direction. A direction no APN-AMBR limits keeps the
    /// subscribed value; a subscribed 0 caps nothing.
    pub fn ue_ambr(&self) -> Ambr {
        self.ue_ambr_with(self.sessions.iter().map(|s| s.apn_ambr))
    }

    /// [`UeContext::ue_ambr`] over these APN-AMBRs.
    pub fn ue_ambr_with(&self, apn_ambrs: impl Iterator<Item = Ambr>) -> Ambr {
        let subscribed = self.subscription.as_ref().map(|s| s.ue_ambr).unwrap_or_default();
        let sum = apn_ambrs.fold(Ambr::default(), |a, b| Ambr {
            uplink: a.uplink.saturating_add(b.uplink),
            downlink: a.downlink.saturating_add(b.downlink),
        });
        let cap = |sum: u64, sub: u64| match (sum, sub) {
            (0, sub) => sub,
            (sum, 0) => sum,
            (sum, sub) => sum.min(sub),
        };
        Ambr { uplink: cap(sum.uplink, subscribed.uplink), downlink: cap(sum.downlink, subscribed.downlink) }
    }

    pub fn new(id: u32, generation: u64, s1: S1Conn) -> Self {
        UeContext {
            id,
            generation,
            s1: Some(s1),
            imsi: None,
            guti: None,
            old_mtmsi: None,
            emm: EmmState::Deregistered,
            step: Step::Idle,
            attach: None,
            ics_done: false,
            attach_complete: false,
            auth: None,
            security: None,
            subscription: None,
            sessions: Vec::new(),
            esm: None,
            timer: None,
            guards: Vec::new(),
            tai: None,
            tai_list: Vec::new(),
            ecgi: None,
            ue_radio_capability: None,
            imeisv: None,
            handover: None,
            paging: None,
            releasing: None,
        }
    }

    pub fn ue_ref(&self) -> UeRef {
        UeRef { mme_ue_s1ap_id: self.id, generation: self.generation }
    }

    /// The PDN connection whose default bearer is `ebi`.
    pub fn session_mut(&mut self, ebi: u8) -> Option<&mut Session> {
        self.sessions.iter_mut().find(|s| s.ebi == ebi)
    }

    /// Whether downlink NAS goes integrity protected and ciphered.
    pub fn security_active(&self) -> bool {
        self.security.as_ref().is_some_and(|s| s.active)
    }
}

/// What `stats()` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MmeStats {
    /// UE contexts held (connected or idle).
    pub ues: usize,
    /// eNBs whose S1 Setup succeeded.
    pub enbs: usize,
    /// UEs in EMM-REGISTERED.
    pub attached: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_skip_zero_and_wrap() {
        let mut e = EnbContext::new(AssocId(1), 3);
        let s: Vec<u16> = (0..5).map(|_| e.pick_stream()).collect();
        assert_eq!(s, vec![1, 2, 1, 2, 1]);
        let mut single = EnbContext::new(AssocId(2), 1);
        assert_eq!(single.pick_stream(), 0);
        let mut zero = EnbContext::new(AssocId(3), 0);
        assert_eq!(zero.pick_stream(), 0);
    }
}
