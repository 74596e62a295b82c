//! A scripted eNB, UE (USIM with Milenage, NAS security) and HSS for the
//! core's tests: everything is exchanged as standard S1AP and NAS octets,
//! under a virtual clock, with no sockets.

use crate::mme::{Mme, MmeAction, MmeEvent};
use crate::{MmeConfig, UeRef};
use bytes::Bytes;
use mobicore_common::s11::*;
use mobicore_common::s6a::*;
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ambr, Arp, Ebi, Fteid, PdnType, Teid};
use oxirush_nas::nas_eps::*;
use oxirush_s1ap::helpers::{eutran_cgi, global_enb_id, plmn, tai, EnbKind};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{build_s1ap, build_s1ap_ie, BitString, S1apPduKind};
use oxirush_security::milenage::{Amf, Milenage, Opc, Sqn, K};
use oxirush_security::nas_eps::{derive_kasme, derive_kenb, KAsme};
use oxirush_security::{NasCount, Rand};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

pub const K_HEX: &str = "465b5ce8b199b49faa5f0a2ee238a6bc";
pub const OPC_HEX: &str = "cd63cb71954a9f4e48a5994e37a02baf";

pub fn milenage() -> Milenage {
    let k = K::from_slice(&hex::decode(K_HEX).unwrap()).unwrap();
    let opc = Opc::from_slice(&hex::decode(OPC_HEX).unwrap()).unwrap();
    Milenage::new(&k, &opc)
}

fn sec_plmn() -> oxirush_security::Plmn {
    oxirush_security::Plmn::new("001", "01").unwrap()
}

/// The HSS: one E-UTRAN vector for SQN `sqn` (TS 33.401 6.1.1).
pub fn hss_vector(sqn: u64, rand_byte: u8) -> EutranVector {
    let m = milenage();
    let rand = Rand::new(&[rand_byte; 16]);
    let v = m.authentication_vector(&rand, &Sqn::try_from(sqn).unwrap(), &Amf::new(&[0x80, 0x00]));
    let kasme = derive_kasme(v.ck(), v.ik(), sec_plmn(), v.autn());
    EutranVector {
        rand: *rand.as_octets(),
        xres: v.xres().as_octets().to_vec(),
        autn: *v.autn().as_octets(),
        kasme: *kasme.as_octets(),
    }
}

pub fn subscription() -> SubscriptionData {
    SubscriptionData {
        msisdn: Some("3361000001".into()),
        ue_ambr: Ambr { uplink: 50_000_000, downlink: 100_000_000 },
        default_context_identifier: 1,
        apns: vec![
            ApnConfiguration {
                context_identifier: 1,
                service_selection: "internet".into(),
                pdn_type: PdnType::Ipv4,
                qci: 9,
                arp: Arp::default(),
                ambr: Ambr { uplink: 10_000_000, downlink: 20_000_000 },
                pdn_gw: None,
                served_party_ipv4: None,
            },
            ApnConfiguration {
                context_identifier: 2,
                service_selection: "ims".into(),
                pdn_type: PdnType::Ipv4v6,
                qci: 5,
                arp: Arp::default(),
                ambr: Ambr { uplink: 1_000_000, downlink: 1_000_000 },
                pdn_gw: None,
                served_party_ipv4: None,
            },
        ],
    }
}

pub const SGW_S11: Fteid = Fteid { teid: Teid(0x5000), ipv4: Ipv4Addr::new(127, 0, 0, 5) };
pub const SGW_S1U: Fteid = Fteid { teid: Teid(0x7000_0001), ipv4: Ipv4Addr::new(127, 0, 0, 7) };
pub const PAA: Ipv4Addr = Ipv4Addr::new(10, 45, 0, 2);

pub fn create_session_ok() -> S11Response {
    S11Response::CreateSession(CreateSessionResponse {
        cause: GtpCause::REQUEST_ACCEPTED,
        sgw_fteid: Some(SGW_S11),
        paa: Some(PAA),
        apn_ambr: None,
        bearer_ebi: Ebi(5),
        bearer_cause: GtpCause::REQUEST_ACCEPTED,
        s1u_sgw_fteid: Some(SGW_S1U),
        pgw_s5s8_c_fteid: None,
        charging_id: None,
        pdn_type: None,
        ipv6_prefix: None,
        pco: None,
    })
}

// ---- eNB side S1AP ----

pub fn s1_setup_request(mcc: &str, mnc: &str, enb: u32) -> Vec<u8> {
    let p = plmn(mcc, mnc).unwrap();
    let area = SupportedTAsItem::new(TAC([0, 1]), BPLMNs(vec![p]), None);
    let pdu = build_s1ap!(
        InitiatingMessage,
        S1Setup,
        S1SetupRequest,
        Global_ENB_ID(global_enb_id(p, EnbKind::Macro, enb).unwrap()),
        eNBname("test-enb"),
        SupportedTAs(SupportedTAs(vec![area])),
        DefaultPagingDRX(PagingDRX::v128),
    )
    .unwrap();
    pdu.encode().unwrap().to_vec()
}

pub fn initial_ue_message(enb_ue_id: u32, nas: Vec<u8>) -> Vec<u8> {
    let p = plmn("001", "01").unwrap();
    build_s1ap!(
        InitiatingMessage,
        initialUEMessage,
        InitialUEMessage,
        eNB_UE_S1AP_ID(enb_ue_id),
        NAS_PDU(nas),
        TAI(tai(p, [0, 1])),
        EUTRAN_CGI(eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap()),
        RRC_Establishment_Cause(RRCEstablishmentCause::mo_Signalling),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

pub fn uplink_nas(mme_id: u32, enb_id: u32, nas: Vec<u8>) -> Vec<u8> {
    let p = plmn("001", "01").unwrap();
    build_s1ap!(
        InitiatingMessage,
        uplinkNASTransport,
        UplinkNASTransport,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
        NAS_PDU(nas),
        EUTRAN_CGI(eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap()),
        TAI(tai(p, [0, 1])),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

pub fn ics_response(mme_id: u32, enb_id: u32, teid: u32) -> Vec<u8> {
    let item = ERABSetupItemCtxtSURes::new(
        ERABID(5),
        TransportLayerAddress(BitString::from([127, 0, 0, 9])),
        GTPTEID(teid.to_be_bytes()),
        None,
    );
    let item = build_s1ap_ie!(IGNORE E_RABSetupItemCtxtSURes(item)).unwrap();
    build_s1ap!(
        SuccessfulOutcome,
        InitialContextSetup,
        InitialContextSetupResponse,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
        E_RABSetupListCtxtSURes(ERABSetupListCtxtSURes(vec![item])),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

/// E-RAB SETUP RESPONSE (TS 36.413 9.1.3.2) with E-RAB `ebi` set up.
pub fn erab_setup_response(mme_id: u32, enb_id: u32, ebi: u8, teid: u32) -> Vec<u8> {
    let item = ERABSetupItemBearerSURes::new(
        ERABID(ebi as u64),
        TransportLayerAddress(BitString::from([127, 0, 0, 9])),
        GTPTEID(teid.to_be_bytes()),
        None,
    );
    let item = build_s1ap_ie!(IGNORE E_RABSetupItemBearerSURes(item)).unwrap();
    build_s1ap!(
        SuccessfulOutcome,
        E_RABSetup,
        ERABSetupResponse,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
        E_RABSetupListBearerSURes(ERABSetupListBearerSURes(vec![item])),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

/// E-RAB RELEASE RESPONSE (TS 36.413 9.1.3.6) for E-RAB `ebi`.
pub fn erab_release_response(mme_id: u32, enb_id: u32, ebi: u8) -> Vec<u8> {
    let item = build_s1ap_ie!(IGNORE E_RABReleaseItemBearerRelComp(ERABReleaseItemBearerRelComp::new(
        ERABID(ebi as u64),
        None
    )))
    .unwrap();
    build_s1ap!(
        SuccessfulOutcome,
        E_RABRelease,
        ERABReleaseResponse,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
        E_RABReleaseListBearerRelComp(ERABReleaseListBearerRelComp(vec![item])),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

pub fn release_request(mme_id: u32, enb_id: u32) -> Vec<u8> {
    build_s1ap!(
        InitiatingMessage,
        UEContextReleaseRequest,
        UEContextReleaseRequest,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
        Cause(Cause::radioNetwork(CauseRadioNetwork::user_inactivity)),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

pub fn release_complete(mme_id: u32, enb_id: u32) -> Vec<u8> {
    build_s1ap!(
        SuccessfulOutcome,
        UEContextRelease,
        UEContextReleaseComplete,
        MME_UE_S1AP_ID(mme_id),
        eNB_UE_S1AP_ID(enb_id),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

/// What the eNB reads in a PDU from the MME.
#[derive(Debug, Clone)]
pub struct Down {
    pub kind: S1apPduKind,
    pub mme_id: Option<u32>,
    pub enb_id: Option<u32>,
    pub nas: Option<Vec<u8>>,
    pub kenb: Option<[u8; 32]>,
    pub cause: Option<Cause>,
    /// The UE Aggregate Maximum Bit Rate, uplink and downlink, in bit/s.
    pub ue_ambr: Option<(u64, u64)>,
}

pub fn read_down(data: &[u8]) -> Down {
    let pdu = S1AP_PDU::decode(data).expect("the MME sends decodable S1AP");
    assert!(pdu.check().unwrap().is_empty(), "deviations in {pdu}");
    let mut d =
        Down { kind: pdu.kind(), mme_id: None, enb_id: None, nas: None, kenb: None, cause: None, ue_ambr: None };
    d.ue_ambr = pdu
        .ie::<oxirush_s1ap::ie::uEaggregateMaximumBitrate>()
        .and_then(|r| r.ok())
        .map(|a| (a.ue_aggregate_maximum_bit_rate_ul.0, a.ue_aggregate_maximum_bit_rate_dl.0));
    d.mme_id = pdu.ie::<oxirush_s1ap::ie::MME_UE_S1AP_ID>().and_then(|r| r.ok()).map(|v| v.0);
    d.enb_id = pdu.ie::<oxirush_s1ap::ie::ENB_UE_S1AP_ID>().and_then(|r| r.ok()).map(|v| v.0);
    d.cause = pdu.ie::<oxirush_s1ap::ie::Cause>().and_then(|r| r.ok());
    d.nas = pdu.ie::<oxirush_s1ap::ie::NAS_PDU>().and_then(|r| r.ok()).map(|n| n.0.to_vec());
    if d.kind == S1apPduKind::Initiating_InitialContextSetup {
        for item in pdu.items::<oxirush_s1ap::ie::E_RABToBeSetupListCtxtSUReq>() {
            let item = item.unwrap();
            d.nas = item.nas_pdu.map(|n| n.0.to_vec());
        }
        let key = pdu.ie::<oxirush_s1ap::ie::SecurityKey>().unwrap().unwrap();
        d.kenb = Some(key.0.as_octets().try_into().unwrap());
    }
    if d.kind == S1apPduKind::Initiating_E_RABSetup {
        for item in pdu.items::<oxirush_s1ap::ie::E_RABToBeSetupListBearerSUReq>() {
            d.nas = Some(item.unwrap().nas_pdu.0.to_vec());
        }
    }
    if d.kind == S1apPduKind::Initiating_UEContextRelease {
        let ids = pdu.ie::<oxirush_s1ap::ie::UE_S1AP_IDs>().unwrap().unwrap();
        if let UES1APIDs::uE_S1AP_ID_pair(p) = ids {
            d.mme_id = Some(p.mme_ue_s1ap_id.0);
            d.enb_id = Some(p.enb_ue_s1ap_id.0);
        }
    }
    d
}

// ---- the UE ----

pub struct TestUe {
    pub imsi: String,
    pub eea: u8,
    pub eia: u8,
    pub enb_ue_id: u32,
    pub mme_ue_id: Option<u32>,
    pub ctx: Option<NasSecurityContext>,
    pub kasme: Option<KAsme>,
    pub guti: Option<oxirush_nas::nas_eps::Guti>,
    pub last_rand: Option<[u8; 16]>,
    /// Given in SECURITY MODE COMPLETE when the command asks for it.
    pub imeisv: Option<String>,
}

impl TestUe {
    pub fn new(imsi: &str, enb_ue_id: u32) -> Self {
        TestUe {
            imsi: imsi.into(),
            eea: 0xf0,
            eia: 0xf0,
            enb_ue_id,
            mme_ue_id: None,
            ctx: None,
            kasme: None,
            guti: None,
            last_rand: None,
            imeisv: None,
        }
    }

    pub fn attach_request_with(&self, identity: NasEpsMobileIdentity) -> Vec<u8> {
        self.attach_request_pdn(identity, pdn_connectivity_request(PdnType4::Ipv4))
    }

    /// An ATTACH REQUEST whose ESM container holds `pdn` (PTI 1).
    pub fn attach_request_pdn(&self, identity: NasEpsMobileIdentity, pdn: NasPdnConnectivityRequest) -> Vec<u8> {
        let esm = NasEpsMessage::new_esm(pdn, 0, 1);
        let req = NasAttachRequest::new(
            NasEpsAttachType::from_attach_type(AttachType::EpsAttach),
            NasKeySetIdentifier::new(0x07),
            identity,
            NasUeNetworkCapability::from_eea_eia(self.eea, self.eia),
            NasEsmMessageContainer::from_esm_message(&esm).unwrap(),
        );
        NasEpsMessage::new_emm(req).encode().unwrap()
    }

    pub fn attach_request(&self) -> Vec<u8> {
        self.attach_request_with(NasEpsMobileIdentity::from_imsi(&self.imsi).unwrap())
    }

    /// The ESM message of a protected downlink NAS PDU, verified.
    pub fn receive_esm(&mut self, nas: &[u8]) -> (u8, u8, NasEsmMessage) {
        match self.ctx.as_mut().expect("a context").unprotect(nas, Direction::Downlink).unwrap().message {
            NasEpsMessage::Esm(h, m) => (h.eps_bearer_identity, h.procedure_transaction_identity, m),
            other => panic!("not ESM: {other:?}"),
        }
    }

    /// The plain message of a downlink NAS PDU, verified if protected.
    pub fn receive(&mut self, nas: &[u8]) -> NasEmmMessage {
        let msg = if nas[0] >> 4 == 0 {
            NasEpsMessage::decode(nas).unwrap()
        } else {
            self.ctx.as_mut().expect("a context").unprotect(nas, Direction::Downlink).unwrap().message
        };
        match msg {
            NasEpsMessage::Emm(_, m) => m,
            other => panic!("not EMM: {other:?}"),
        }
    }

    /// Answer an AUTHENTICATION REQUEST: the USIM checks AUTN, gives RES.
    pub fn authenticate(&mut self, req: &NasAuthenticationRequest) -> Vec<u8> {
        let rand = Rand::new(req.authentication_parameter_rand.rand().unwrap());
        let autn_bytes: [u8; 16] = *req.authentication_parameter_autn.autn().unwrap();
        let autn = oxirush_security::Autn::new(&autn_bytes);
        let usim = milenage().check_autn(&rand, &autn).expect("AUTN of our HSS");
        self.kasme = Some(derive_kasme(usim.ck(), usim.ik(), sec_plmn(), &autn));
        self.last_rand = Some(*rand.as_octets());
        let param = NasAuthenticationResponseParameter::from_res(usim.res().as_octets()).unwrap();
        NasEpsMessage::new_emm(NasAuthenticationResponse::new(param)).encode().unwrap()
    }

    pub fn security_mode_complete(&mut self, smc_pdu: &[u8]) -> Vec<u8> {
        let NasEpsMessage::SecurityProtected(_, inner) = NasEpsMessage::decode(smc_pdu).unwrap() else {
            panic!("SMC must be protected")
        };
        let NasEpsMessage::Emm(_, NasEmmMessage::SecurityModeCommand(cmd)) = *inner else { panic!("not SMC") };
        let eea = cmd.selected_nas_security_algorithms.ciphering().unwrap();
        let eia = cmd.selected_nas_security_algorithms.integrity().unwrap();
        let cmd_imeisv_requested = cmd.imeisv_request.as_ref().is_some_and(|r| r.is_requested());
        let kasme = self.kasme.as_ref().unwrap();
        let mut ctx = NasSecurityContext::from_fresh_kasme(kasme, eia, eea).unwrap();
        ctx.unprotect(smc_pdu, Direction::Downlink).expect("SMC MAC verifies");
        self.ctx = Some(ctx);
        let mut complete = NasSecurityModeComplete::new();
        if let (Some(i), true) = (&self.imeisv, cmd_imeisv_requested) {
            complete = complete.with_imeisv(NasMobileIdentity::from_imeisv(i).unwrap());
        }
        let complete = NasEpsMessage::new_emm(complete);
        let h = NasEpsSecurityHeaderType::IntegrityProtectedAndCipheredWithNewEpsSecurityContext;
        self.ctx.as_mut().unwrap().protect(&complete, h, Direction::Uplink).unwrap()
    }

    pub fn protect(&mut self, msg: &NasEpsMessage) -> Vec<u8> {
        let h = NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered;
        self.ctx.as_mut().unwrap().protect(msg, h, Direction::Uplink).unwrap()
    }

    pub fn attach_complete(&mut self) -> Vec<u8> {
        let accept = NasEpsMessage::new_esm(NasActivateDefaultEpsBearerContextAccept::new(), 5, 0);
        let c = NasAttachComplete::new(NasEsmMessageContainer::from_esm_message(&accept).unwrap());
        self.protect(&NasEpsMessage::new_emm(c))
    }

    pub fn detach_request(&mut self, switch_off: bool) -> Vec<u8> {
        let id = match self.guti {
            Some(g) => NasEpsMobileIdentity::from_guti(g),
            None => NasEpsMobileIdentity::from_imsi(&self.imsi).unwrap(),
        };
        let d = NasDetachRequestUeOriginating::new(
            NasDetachType::from_ue_detach_kind(UeDetachKind::EpsDetach, switch_off),
            NasKeySetIdentifier::new(0),
            id,
        );
        self.protect(&NasEpsMessage::new_emm(d))
    }

    /// KeNB as the UE derives it after the SMC Complete (uplink COUNT 0).
    pub fn kenb(&self, ul_count: u32) -> [u8; 32] {
        *derive_kenb(self.kasme.as_ref().unwrap(), NasCount::new(ul_count).unwrap()).as_octets()
    }
}

pub use oxirush_nas::nas_eps::PdnType as PdnType4;

/// A PDN CONNECTIVITY REQUEST for an initial request of `pdn_type`.
pub fn pdn_connectivity_request(pdn_type: PdnType4) -> NasPdnConnectivityRequest {
    NasPdnConnectivityRequest::new(
        NasRequestType::from_request_type(RequestTypeValue::Initial),
        NasPdnType::from_pdn_type(pdn_type),
    )
}

// ---- the harness ----

pub struct Harness {
    pub mme: Mme,
    pub now: Instant,
    pub assoc: AssocId,
    /// Every S1AP PDU both ways, for the tshark check.
    pub log: Vec<Vec<u8>>,
    /// Check, around every event the harness hands the core, that each UE
    /// whose record changed is in the journal of touched UEs (what the store
    /// layer writes from). On by default; a test that runs the store layer
    /// itself turns it off ([`Harness::without_journal_check`]).
    journal_check: bool,
}

impl Harness {
    pub fn new(cfg: MmeConfig) -> Self {
        let mut mme = Mme::new(cfg);
        mme.track_changes(true);
        let mut h = Harness { mme, now: Instant::now(), assoc: AssocId(1), log: Vec::new(), journal_check: true };
        h.enb_up(AssocId(1));
        h
    }

    /// Stop checking the journal, and leave it to the caller.
    pub fn without_journal_check(mut self) -> Self {
        self.journal_check = false;
        self
    }

    /// Hand the core one event; with the journal check, every UE whose
    /// record (at a fixed time base) changed, appeared or went must be
    /// named by the journal of that event.
    fn event(&mut self, f: impl FnOnce(&mut Mme, Instant)) {
        if !self.journal_check {
            return f(&mut self.mme, self.now);
        }
        let t = crate::context_codec::TimeBase { now: self.now, unix_ms: 1 << 40 };
        let records = |mme: &Mme| -> std::collections::HashMap<u32, Vec<u8>> {
            let ids: Vec<u32> = mme.ues.keys().copied().collect();
            ids.into_iter()
                .filter_map(|id| Some((id, mme.export_ue(&crate::transfer::UeKey::MmeUeS1apId(id), t)?)))
                .collect()
        };
        let before = records(&self.mme);
        let _ = self.mme.take_changes();
        f(&mut self.mme, self.now);
        let after = records(&self.mme);
        let changes = self.mme.take_changes();
        let removed: Vec<u32> = changes.removed.iter().map(|r| r.id).collect();
        for id in before.keys().chain(after.keys()) {
            if before.get(id) != after.get(id) {
                assert!(
                    changes.touched.contains(id) || removed.contains(id),
                    "UE {id} changed but the journal does not name it"
                );
            }
        }
    }

    pub fn default() -> Self {
        Self::new(MmeConfig { mtmsi_seed: Some(0x100), ..MmeConfig::default() })
    }

    /// Association up and S1 Setup; returns the S1 Setup outcome kind.
    pub fn enb_up(&mut self, assoc: AssocId) -> S1apPduKind {
        self.mme.handle(self.now, MmeEvent::S1Up { assoc, peer: [127, 0, 0, 1].into(), outbound_streams: 4 });
        self.s1_on(assoc, 0, s1_setup_request("001", "01", assoc.0 as u32 + 1));
        let out = self.drain();
        assert_eq!(out.len(), 1);
        read_down(&s1_data(&out[0]).2).kind
    }

    pub fn s1_on(&mut self, assoc: AssocId, stream: u16, data: Vec<u8>) {
        self.log.push(data.clone());
        self.event(|mme, now| mme.handle(now, MmeEvent::S1Data { assoc, stream, data: Bytes::from(data) }));
    }

    pub fn s1(&mut self, data: Vec<u8>) {
        self.s1_on(self.assoc, 1, data);
    }

    pub fn drain(&mut self) -> Vec<MmeAction> {
        let out: Vec<MmeAction> = std::iter::from_fn(|| self.mme.poll_action()).collect();
        for a in &out {
            if let MmeAction::S1Send { data, .. } = a {
                self.log.push(data.to_vec());
            }
        }
        out
    }

    pub fn advance(&mut self, d: Duration) {
        self.now += d;
        self.event(|mme, now| mme.handle_timeout(now));
    }

    pub fn s6a(&mut self, ue: UeRef, answer: S6aAnswer) {
        self.event(|mme, now| mme.handle(now, MmeEvent::S6a { ue, answer: Ok(answer) }));
    }

    pub fn s11(&mut self, ue: UeRef, response: S11Response) {
        self.event(|mme, now| mme.handle(now, MmeEvent::S11 { ue, response: Ok(response) }));
    }

    /// The only action, which must be a downlink S1AP PDU.
    pub fn one_down(&mut self) -> Down {
        let out = self.drain();
        assert_eq!(out.len(), 1, "expected one action, got {out:?}");
        read_down(&s1_data(&out[0]).2)
    }

    /// Run a full attach by IMSI; returns the UE, attached.
    pub fn attach(&mut self, imsi: &str, enb_ue_id: u32) -> TestUe {
        let mut ue = TestUe::new(imsi, enb_ue_id);
        self.s1(initial_ue_message(enb_ue_id, ue.attach_request()));
        let (r, req) = expect_s6a(&self.drain());
        assert!(matches!(req, S6aRequest::AuthenticationInformation(ref a) if a.imsi.as_str() == imsi));
        self.finish_attach(&mut ue, r);
        ue
    }

    /// From the Authentication-Information-Answer on.
    pub fn finish_attach(&mut self, ue: &mut TestUe, r: UeRef) {
        self.s6a(r, S6aAnswer::AuthenticationInformation(Ok(vec![hss_vector(32, 0x23)])));
        let d = self.one_down();
        ue.mme_ue_id = d.mme_id;
        let NasEmmMessage::AuthenticationRequest(a) = ue.receive(&d.nas.unwrap()) else { panic!() };
        let resp = ue.authenticate(&a);
        self.s1(uplink_nas(ue.mme_ue_id.unwrap(), ue.enb_ue_id, resp));
        let smc = self.one_down().nas.unwrap();
        let complete = ue.security_mode_complete(&smc);
        self.s1(uplink_nas(ue.mme_ue_id.unwrap(), ue.enb_ue_id, complete));
        // Besides the ULR: the release of an older context of the same UE.
        let out: Vec<MmeAction> = self.drain().into_iter().filter(|a| matches!(a, MmeAction::S6a { .. })).collect();
        let (r2, req) = expect_s6a(&out);
        assert_eq!(r2, r);
        assert!(matches!(req, S6aRequest::UpdateLocation(_)));
        self.s6a(r, S6aAnswer::UpdateLocation(Ok(subscription())));
        let (r3, req) = expect_s11(&self.drain());
        let S11Request::CreateSession(cs) = req else { panic!("{req:?}") };
        assert_eq!(cs.apn, "internet");
        assert_eq!(cs.sender_fteid.ipv4, self.mme.config().s11_local_ip);
        self.s11(r3, create_session_ok());
        let ics = self.one_down();
        assert_eq!(ics.kind, S1apPduKind::Initiating_InitialContextSetup);
        assert_eq!(ics.kenb, Some(ue.kenb(0)), "KeNB per TS 33.401 A.3");
        let NasEmmMessage::AttachAccept(acc) = ue.receive(&ics.nas.unwrap()) else { panic!() };
        ue.guti = acc.guti.as_ref().and_then(|g| g.as_guti());
        self.s1(ics_response(ue.mme_ue_id.unwrap(), ue.enb_ue_id, 0xabc));
        let (_, req) = expect_s11(&self.drain());
        let S11Request::ModifyBearer(mb) = req else { panic!() };
        assert_eq!(mb.s1u_enb_fteid, Fteid { teid: Teid(0xabc), ipv4: Ipv4Addr::new(127, 0, 0, 9) });
        self.s11(
            r,
            S11Response::ModifyBearer(ModifyBearerResponse { cause: GtpCause::REQUEST_ACCEPTED, bearer_cause: None }),
        );
        let complete = ue.attach_complete();
        self.s1(uplink_nas(ue.mme_ue_id.unwrap(), ue.enb_ue_id, complete));
        assert!(self.drain().is_empty());
    }
}

pub fn s1_data(a: &MmeAction) -> (AssocId, u16, Vec<u8>) {
    match a {
        MmeAction::S1Send { assoc, stream, data } => (*assoc, *stream, data.to_vec()),
        other => panic!("not S1: {other:?}"),
    }
}

pub fn expect_s6a(out: &[MmeAction]) -> (UeRef, S6aRequest) {
    match out {
        [MmeAction::S6a { ue, request }] => (*ue, request.clone()),
        other => panic!("expected one S6a request, got {other:?}"),
    }
}

pub fn expect_s11(out: &[MmeAction]) -> (UeRef, S11Request) {
    match out {
        [MmeAction::S11 { ue, request }] => (*ue, request.clone()),
        other => panic!("expected one S11 request, got {other:?}"),
    }
}

impl Harness {
    /// INITIAL UE MESSAGE with an Attach Request by IMSI; returns the AIR.
    pub fn start_attach(&mut self, imsi: &str, enb_ue_id: u32) -> (TestUe, UeRef) {
        let ue = TestUe::new(imsi, enb_ue_id);
        self.s1(initial_ue_message(enb_ue_id, ue.attach_request()));
        let (r, _) = expect_s6a(&self.drain());
        (ue, r)
    }

    /// Answer the AIR with a vector; returns the AUTHENTICATION REQUEST.
    pub fn challenge(&mut self, ue: &mut TestUe, r: UeRef, sqn: u64) -> NasAuthenticationRequest {
        self.s6a(r, S6aAnswer::AuthenticationInformation(Ok(vec![hss_vector(sqn, 0x23)])));
        let d = self.one_down();
        ue.mme_ue_id = d.mme_id;
        match ue.receive(&d.nas.unwrap()) {
            NasEmmMessage::AuthenticationRequest(a) => *a,
            other => panic!("not an authentication request: {other:?}"),
        }
    }

    pub fn up(&mut self, ue: &TestUe, nas: Vec<u8>) {
        self.s1(uplink_nas(ue.mme_ue_id.unwrap(), ue.enb_ue_id, nas));
    }
}

/// The algorithms a SECURITY MODE COMMAND selects.
pub fn smc_algorithms(pdu: &[u8]) -> (CipheringAlgorithm, IntegrityAlgorithm) {
    let NasEpsMessage::SecurityProtected(_, inner) = NasEpsMessage::decode(pdu).unwrap() else { panic!() };
    let NasEpsMessage::Emm(_, NasEmmMessage::SecurityModeCommand(cmd)) = *inner else { panic!() };
    let a = &cmd.selected_nas_security_algorithms;
    (a.ciphering().unwrap(), a.integrity().unwrap())
}

/// The EMM message of a plain NAS PDU.
pub fn plain_emm(pdu: &[u8]) -> NasEmmMessage {
    match NasEpsMessage::decode(pdu).unwrap() {
        NasEpsMessage::Emm(_, m) => m,
        other => panic!("not plain EMM: {other:?}"),
    }
}
