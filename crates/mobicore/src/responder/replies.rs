//! The replies of the responder, built per UE before the clock starts
//! with the MME's own builders (`mobicore_mme::nas_build`,
//! `s1ap_build`) and the HSS's Milenage (`mobicore_hss::auth`): the
//! E-UTRAN vector from the UE's K/OPc, KASME, the NAS security context and
//! the protected downlink NAS PDUs at their known NAS COUNTs, and the S1AP
//! PDUs around them for the eNB-UE-S1AP-ID the UE is expected to get.

use bytes::Bytes;
use mobicore_common::{Ambr, Arp, Fteid, Gummei, Guti, Imsi, MTmsi, Teid};
use mobicore_hss::{auth, SubscriberTemplate};
use mobicore_mme::nas_build::{self, DefaultBearer};
use mobicore_mme::s1ap_build::{self, InitialContextSetup};
use mobicore_mme::security_mode::{select_eea, select_eia};
use mobicore_mme::MmeConfig;
use mobicore_ran::ue::security::{UE_EEA, UE_EIA};
use mobicore_ran::ue::ATTACH_PTI;
use mobicore_ran::{first_enb_ue_s1ap_id, imsi_for, SubscriberPlan};
use oxirush_nas::nas_eps::{
    CipheringAlgorithm, Direction, IntegrityAlgorithm, KAsme, NasCount, NasEpsSecurityHeaderType, NasSecurityContext,
    NasUeNetworkCapability,
};
use oxirush_s1ap::s1ap::{Cause, CauseNas};
use std::net::Ipv4Addr;

/// Why the replies could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("UE {index}: cannot build {what}")]
    Encode { index: u64, what: &'static str },
    #[error("no common NAS security algorithm between the MME's orders and the emulated UE")]
    NoAlgorithm,
    #[error("the subscriber template has no APN")]
    NoApn,
    #[error("{0} UEs do not fit in 32-bit MME-UE-S1AP-IDs")]
    TooManyUes(u64),
    #[error("a thread building replies panicked")]
    Panicked,
}

/// What the responder answers with, the same as the core would give the
/// emulator: the MME's identity and algorithm orders, the subscribers of
/// the plan with the HSS template the bench provisions them with.
#[derive(Debug, Clone)]
pub struct ResponderPlan {
    pub mme: MmeConfig,
    pub subscribers: SubscriberPlan,
    pub template: SubscriberTemplate,
    /// UEs 0..ues of the plan.
    pub ues: u64,
    /// eNBs of the emulator (for the eNB-UE-S1AP-IDs it will use).
    pub enbs: u32,
    /// The emulator detaches with "switch off": no DETACH ACCEPT.
    pub switch_off: bool,
}

/// KSI of the one native context (TS 24.301 9.9.3.21).
const KSI: u8 = 0;
/// The E-RAB of the default bearer.
const EBI: u8 = 5;

/// The algorithms the MME would select for the emulated UE.
pub fn algorithms(mme: &MmeConfig) -> Result<(CipheringAlgorithm, IntegrityAlgorithm), BuildError> {
    let eia = select_eia(&mme.integrity_order, UE_EIA).ok_or(BuildError::NoAlgorithm)?;
    let eea = select_eea(&mme.ciphering_order, UE_EEA).ok_or(BuildError::NoAlgorithm)?;
    Ok((eea, eia))
}

/// The MME-UE-S1AP-ID of UE `index`: its index plus one.
pub fn mme_ue_id(index: u64) -> u32 {
    (index + 1) as u32
}

/// The UE of an MME-UE-S1AP-ID, the inverse of [`mme_ue_id`].
pub fn index_of(mme_ue_id: u32) -> Option<u64> {
    u64::from(mme_ue_id).checked_sub(1)
}

/// Everything sent to one UE, built in advance.
#[derive(Debug, Clone)]
pub struct UeReplies {
    pub imsi: Imsi,
    pub mme_ue_id: u32,
    /// The eNB-UE-S1AP-ID the S1AP PDUs below carry.
    pub enb_ue_id: u32,
    /// DOWNLINK NAS TRANSPORT: AUTHENTICATION REQUEST.
    pub authentication_request: Bytes,
    /// DOWNLINK NAS TRANSPORT: SECURITY MODE COMMAND (DL NAS COUNT 0).
    pub security_mode_command: Bytes,
    /// INITIAL CONTEXT SETUP REQUEST with the ATTACH ACCEPT (DL COUNT 1).
    pub initial_context_setup: Bytes,
    /// DOWNLINK NAS TRANSPORT: DETACH ACCEPT (DL COUNT 2).
    pub detach_accept: Bytes,
    /// UE CONTEXT RELEASE COMMAND, cause detach.
    pub release_command: Bytes,
    /// The NAS PDUs and keys, to wrap again for another eNB-UE-S1AP-ID.
    nas: NasPdus,
}

#[derive(Debug, Clone)]
struct NasPdus {
    authentication_request: Vec<u8>,
    security_mode_command: Vec<u8>,
    attach_accept: Vec<u8>,
    detach_accept: Vec<u8>,
    kenb: [u8; 32],
    sgw_s1u: Fteid,
}

/// What the per-UE builds share.
struct Common {
    eea: CipheringAlgorithm,
    eia: IntegrityAlgorithm,
    capability: NasUeNetworkCapability,
    apn: String,
    qci: u8,
    arp: Arp,
    apn_ambr: Ambr,
    ue_ambr: Ambr,
    tacs: Vec<u16>,
    gummei: Gummei,
}

impl Common {
    fn new(plan: &ResponderPlan) -> Result<Self, BuildError> {
        let (eea, eia) = algorithms(&plan.mme)?;
        let apn = plan.template.apns.first().ok_or(BuildError::NoApn)?;
        Ok(Common {
            eea,
            eia,
            capability: mobicore_ran::ue::Ue::ue_network_capability(),
            apn: apn.name.clone(),
            qci: apn.qci,
            arp: arp_of(apn),
            apn_ambr: apn.ambr,
            ue_ambr: plan.template.ue_ambr,
            tacs: if plan.mme.served_tacs.is_empty() { vec![1] } else { plan.mme.served_tacs.clone() },
            gummei: Gummei { plmn: plan.mme.plmn, mme_group_id: plan.mme.mme_group_id, mme_code: plan.mme.mme_code },
        })
    }
}

/// The replies of every UE of the plan, built on `threads` threads.
pub fn build_all(plan: &ResponderPlan, threads: usize) -> Result<Vec<UeReplies>, BuildError> {
    if plan.ues > u64::from(u32::MAX) - 1 {
        return Err(BuildError::TooManyUes(plan.ues));
    }
    let common = Common::new(plan)?;
    let threads = threads.max(1) as u64;
    let per = plan.ues.div_ceil(threads).max(1);
    let chunks: Vec<Result<Vec<UeReplies>, BuildError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (from, to) = ((t * per).min(plan.ues), ((t + 1) * per).min(plan.ues));
                let common = &common;
                s.spawn(move || (from..to).map(|i| build(plan, common, i)).collect())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(Err(BuildError::Panicked))).collect()
    });
    let mut all = Vec::with_capacity(plan.ues as usize);
    for c in chunks {
        all.extend(c?);
    }
    Ok(all)
}

/// The replies of one UE of the plan.
pub fn build_one(plan: &ResponderPlan, index: u64) -> Result<UeReplies, BuildError> {
    build(plan, &Common::new(plan)?, index)
}

fn build(plan: &ResponderPlan, c: &Common, index: u64) -> Result<UeReplies, BuildError> {
    let err = |what| BuildError::Encode { index, what };
    let p = &plan.subscribers;
    // The HSS's vector: the first SQN after the USIM's (TS 33.102 C.3.1);
    // RAND need only differ per UE here.
    let mut rand = [0x5a; 16];
    rand[..8].copy_from_slice(&index.to_be_bytes());
    let sqn = auth::next_sqn(p.sqn);
    let vector = auth::eutran_vector(&auth::milenage(&p.k, &p.opc), rand, sqn, p.amf, &plan.mme.plmn)
        .ok_or(err("the authentication vector"))?;
    let auth_req =
        nas_build::authentication_request(KSI, vector.rand, vector.autn).ok_or(err("AUTHENTICATION REQUEST"))?;

    // NAS security (TS 33.401 7.2.4.4): a fresh context, DL COUNT 0 for
    // the SECURITY MODE COMMAND, then 1 and 2.
    let kasme = KAsme::new(&vector.kasme);
    let mut ctx = NasSecurityContext::from_fresh_kasme(&kasme, c.eia, c.eea).map_err(|_| err("the NAS context"))?;
    let smc_plain =
        nas_build::security_mode_command(c.eea, c.eia, KSI, &c.capability).ok_or(err("SECURITY MODE COMMAND"))?;
    let smc = ctx
        .protect_bytes(
            smc_plain,
            NasEpsSecurityHeaderType::IntegrityProtectedWithNewEpsSecurityContext,
            Direction::Downlink,
        )
        .map_err(|_| err("the protected SECURITY MODE COMMAND"))?;

    let ue_ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 44, 0, 0)).wrapping_add(index as u32 + 1));
    let bearer = DefaultBearer {
        ebi: EBI,
        pti: ATTACH_PTI,
        qci: c.qci,
        apn: &c.apn,
        ipv4: ue_ip.octets(),
        apn_ambr: c.apn_ambr,
        esm_cause: None,
    };
    let esm = nas_build::activate_default_bearer_request(&bearer).ok_or(err("the default bearer request"))?;
    let guti = Guti { gummei: c.gummei, m_tmsi: MTmsi(0xC000_0000 | index as u32) };
    let accept_plain = nas_build::attach_accept(&plan.mme.plmn, &c.tacs, plan.mme.t3412_seconds, &guti, &esm)
        .ok_or(err("ATTACH ACCEPT"))?;
    let ciphered = NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered;
    let attach_accept = ctx
        .protect_bytes(accept_plain, ciphered, Direction::Downlink)
        .map_err(|_| err("the protected ATTACH ACCEPT"))?;
    let detach_plain = nas_build::detach_accept().ok_or(err("DETACH ACCEPT"))?;
    let detach_accept = ctx
        .protect_bytes(detach_plain, ciphered, Direction::Downlink)
        .map_err(|_| err("the protected DETACH ACCEPT"))?;
    // TS 33.401 A.3: KeNB from the uplink COUNT of the SECURITY MODE
    // COMPLETE, the first message of the context (0).
    let kenb = *oxirush_security::nas_eps::derive_kenb(&kasme, NasCount::ZERO).as_octets();

    let nas = NasPdus {
        authentication_request: auth_req,
        security_mode_command: smc,
        attach_accept,
        detach_accept,
        kenb,
        sgw_s1u: Fteid { teid: Teid(index as u32 + 1), ipv4: Ipv4Addr::LOCALHOST },
    };
    let enb_ue_id = first_enb_ue_s1ap_id(index, plan.enbs);
    let mut r = UeReplies {
        imsi: imsi_for(index, p),
        mme_ue_id: mme_ue_id(index),
        enb_ue_id,
        authentication_request: Bytes::new(),
        security_mode_command: Bytes::new(),
        initial_context_setup: Bytes::new(),
        detach_accept: Bytes::new(),
        release_command: Bytes::new(),
        nas,
    };
    r.wrap(c.ue_ambr, c.qci, c.arp, enb_ue_id).ok_or(err("the S1AP PDUs"))?;
    Ok(r)
}

impl UeReplies {
    /// (Re)build the S1AP PDUs around the NAS PDUs for `enb_ue_id`.
    fn wrap(&mut self, ue_ambr: Ambr, qci: u8, arp: Arp, enb_ue_id: u32) -> Option<()> {
        let (m, n) = (self.mme_ue_id, &self.nas);
        let dl = |nas: &Vec<u8>| s1ap_build::downlink_nas_transport(m, enb_ue_id, nas.clone()).map(Bytes::from);
        let authentication_request = dl(&n.authentication_request)?;
        let security_mode_command = dl(&n.security_mode_command)?;
        let detach_accept = dl(&n.detach_accept)?;
        let ics = InitialContextSetup {
            mme_ue_id: m,
            enb_ue_id,
            ue_ambr,
            ebi: EBI,
            qci,
            arp,
            sgw_s1u: n.sgw_s1u,
            nas: n.attach_accept.clone(),
            // S1AP bitmaps start at 128-EEA1 / 128-EIA1 (TS 36.413 9.2.1.40).
            eea: UE_EEA << 1,
            eia: UE_EIA << 1,
            kenb: &n.kenb,
        };
        let initial_context_setup = Bytes::from(s1ap_build::initial_context_setup_request(ics)?);
        let release = s1ap_build::ue_context_release_command(m, enb_ue_id, Cause::nas(CauseNas::detach))?;
        self.enb_ue_id = enb_ue_id;
        self.authentication_request = authentication_request;
        self.security_mode_command = security_mode_command;
        self.initial_context_setup = initial_context_setup;
        self.detach_accept = detach_accept;
        self.release_command = Bytes::from(release);
        Some(())
    }

    /// Wrap the NAS PDUs again for another eNB-UE-S1AP-ID than the
    /// expected one; `false` if that could not be encoded.
    pub fn patch(&mut self, plan: &ResponderPlan, enb_ue_id: u32) -> bool {
        let Some(apn) = plan.template.apns.first() else { return false };
        self.wrap(plan.template.ue_ambr, apn.qci, arp_of(apn), enb_ue_id).is_some()
    }

    /// KeNB the INITIAL CONTEXT SETUP REQUEST carries.
    pub fn kenb(&self) -> [u8; 32] {
        self.nas.kenb
    }
}

fn arp_of(apn: &mobicore_hss::ApnProfile) -> Arp {
    Arp {
        priority_level: apn.arp_priority,
        pre_emption_capability: apn.pre_emption_capability,
        pre_emption_vulnerability: apn.pre_emption_vulnerability,
    }
}
