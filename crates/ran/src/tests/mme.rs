//! A scripted MME for the tests: it builds the canned messages with
//! oxirush-s1ap and oxirush-nas, and keeps its own NAS security context,
//! independent of the UE's.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use oxirush_nas::nas_eps::*;
use oxirush_s1ap::helpers::{plmn, ue_security_capabilities};
use oxirush_s1ap::s1ap::*;
use oxirush_s1ap::{build_s1ap, build_s1ap_ie, extract_s1ap_ies, BitString, S1apPduKind};
use oxirush_security::milenage::{Amf, AuthenticationVector, Milenage, Opc, Sqn, K};
use oxirush_security::nas_eps::{derive_kasme, derive_kenb};
use oxirush_security::Rand;

use crate::enb::{Enb, EnbAction, EnbConfig, Outcome};
use crate::ue::Ue;
use crate::{usim_for, SubscriberPlan};

pub const MME_UE_ID: u32 = 100;
pub const SGW: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const SGW_TEID: u32 = 0x1234;
pub const UE_IP: [u8; 4] = [10, 45, 0, 2];
pub const M_TMSI: u32 = 0xC0FF_EE01;

pub fn serving() -> mobicore_common::Plmn {
    "00101".parse().unwrap()
}

pub fn enb_config() -> EnbConfig {
    EnbConfig {
        enb_id: 1,
        name: "enb-1".into(),
        plmn: serving(),
        tac: 1,
        s1u_addr: Ipv4Addr::new(127, 0, 0, 1),
        procedure_timeout: Duration::from_secs(10),
        s1_setup_timeout: Duration::from_secs(5),
        inactivity_timeout: Some(Duration::from_secs(10)),
    }
}

/// An eNB with S1 up and UE 0 in its cell.
/// An eNB of `cfg` with S1 up and no UE.
pub fn enb_up(now: Instant, cfg: EnbConfig) -> Enb {
    let mut enb = Enb::new(cfg).unwrap();
    enb.start_s1_setup(now, 2);
    let _ = drain(&mut enb);
    enb.handle_s1ap(now, 0, &s1_setup_response());
    assert_eq!(drain(&mut enb), vec![EnbAction::S1Setup(Ok(()))]);
    enb
}

pub fn ready_enb(now: Instant) -> Enb {
    let mut enb = Enb::new(enb_config()).unwrap();
    enb.add_ue(0, Ue::new(usim_for(0, &SubscriberPlan::default()), serving()));
    enb.start_s1_setup(now, 2);
    let sent = sends(&mut enb);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, 0, "S1 Setup on stream 0");
    let pdu = S1AP_PDU::decode(&sent[0].1).unwrap();
    assert_eq!(pdu.kind(), S1apPduKind::Initiating_S1Setup);
    assert!(pdu.check().unwrap().is_empty(), "S1 SETUP REQUEST deviates from the ASN.1");
    enb.handle_s1ap(now, 0, &s1_setup_response());
    assert_eq!(drain(&mut enb), vec![EnbAction::S1Setup(Ok(()))]);
    enb
}

pub fn s1_setup_response() -> Vec<u8> {
    let network = plmn("001", "01").unwrap();
    let served = ServedGUMMEIsItem::new(
        ServedPLMNs(vec![network]),
        ServedGroupIDs(vec![MMEGroupID([0, 1])]),
        ServedMMECs(vec![MMECode([1])]),
        None,
    );
    build_s1ap!(
        SuccessfulOutcome,
        S1Setup,
        S1SetupResponse,
        MMEname("mme-1"),
        ServedGUMMEIs(ServedGUMMEIs(vec![served])),
        RelativeMMECapacity(RelativeMMECapacity(255)),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

pub fn drain(enb: &mut Enb) -> Vec<EnbAction> {
    std::iter::from_fn(|| enb.poll_action()).collect()
}

/// The PDUs an eNB sent, with their streams; other actions are dropped.
pub fn sends(enb: &mut Enb) -> Vec<(u16, Vec<u8>)> {
    drain(enb)
        .into_iter()
        .filter_map(|a| match a {
            EnbAction::Send { stream, pdu } => Some((stream, pdu)),
            _ => None,
        })
        .collect()
}

pub fn outcomes(actions: &[EnbAction]) -> Vec<Outcome> {
    actions
        .iter()
        .filter_map(|a| match a {
            EnbAction::Outcome(o) => Some(o.clone()),
            _ => None,
        })
        .collect()
}

/// The NAS PDU and eNB-UE-S1AP-ID of an INITIAL UE MESSAGE or UPLINK NAS
/// TRANSPORT.
pub fn uplink_nas(pdu: &[u8]) -> (u32, Vec<u8>) {
    let pdu = S1AP_PDU::decode(pdu).unwrap();
    assert!(pdu.check().unwrap().is_empty(), "{pdu} deviates from the ASN.1");
    let r: Result<(u32, Vec<u8>), oxirush_s1ap::Error> = (|| match pdu.kind() {
        S1apPduKind::Initiating_initialUEMessage => {
            extract_s1ap_ies!(pdu, InitialUEMessage,
                req enb: u32 = eNB_UE_S1AP_ID(id),
                req nas: Vec<u8> = NAS_PDU(n) => n.0.to_vec(),
            );
            Ok((enb, nas))
        }
        S1apPduKind::Initiating_uplinkNASTransport => {
            extract_s1ap_ies!(pdu, UplinkNASTransport,
                req mme: u32 = MME_UE_S1AP_ID(id),
                req enb: u32 = eNB_UE_S1AP_ID(id),
                req nas: Vec<u8> = NAS_PDU(n) => n.0.to_vec(),
            );
            assert_eq!(mme, MME_UE_ID);
            Ok((enb, nas))
        }
        other => panic!("not an uplink NAS message: {other:?}"),
    })();
    r.unwrap()
}

pub fn downlink_nas(enb_ue_id: u32, nas: Vec<u8>) -> Vec<u8> {
    build_s1ap!(
        InitiatingMessage,
        downlinkNASTransport,
        DownlinkNASTransport,
        MME_UE_S1AP_ID(MME_UE_ID),
        eNB_UE_S1AP_ID(enb_ue_id),
        NAS_PDU(nas),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

pub fn release_command(enb_ue_id: u32) -> Vec<u8> {
    let ids = UES1APIDs::uE_S1AP_ID_pair(UES1APIDPair::new(MMEUES1APID(MME_UE_ID), ENBUES1APID(enb_ue_id), None));
    build_s1ap!(
        InitiatingMessage,
        UEContextRelease,
        UEContextReleaseCommand,
        UE_S1AP_IDs(ids),
        Cause(Cause::nas(CauseNas::normal_release)),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

/// The HSS and MME side of one subscriber.
pub struct FakeMme {
    pub milenage: Milenage,
    pub vector: Option<AuthenticationVector>,
    pub ctx: Option<NasSecurityContext>,
    pub kasme: Option<KAsme>,
    pub ue_capability: Option<NasUeNetworkCapability>,
}

impl FakeMme {
    pub fn new() -> Self {
        let plan = SubscriberPlan::default();
        FakeMme {
            milenage: Milenage::new(&K::new(&plan.k), &Opc::new(&plan.opc)),
            vector: None,
            ctx: None,
            kasme: None,
            ue_capability: None,
        }
    }

    /// Read the ATTACH REQUEST of an INITIAL UE MESSAGE.
    pub fn attach_request(&mut self, nas: &[u8]) -> NasAttachRequest {
        let message = match NasEpsMessage::decode(nas).unwrap() {
            NasEpsMessage::SecurityProtected(_, inner) => *inner,
            plain => plain,
        };
        let NasEpsMessage::Emm(_, NasEmmMessage::AttachRequest(req)) = message else { panic!("not an ATTACH REQUEST") };
        self.ue_capability = Some(req.ue_network_capability.clone());
        *req
    }

    /// AUTHENTICATION REQUEST with a vector of `sqn`, KSI 0.
    pub fn authentication_request(&mut self, sqn: u64) -> Vec<u8> {
        let rand = Rand::new(&[0x23; 16]);
        let vector = self.milenage.authentication_vector(&rand, &Sqn::try_from(sqn).unwrap(), &Amf::new(&[0x80, 0]));
        let msg = auth_request_for(&vector);
        self.vector = Some(vector);
        msg
    }

    /// Check RES, derive KASME and start the context.
    pub fn authentication_response(&mut self, nas: &[u8]) {
        let NasEpsMessage::Emm(_, NasEmmMessage::AuthenticationResponse(resp)) = NasEpsMessage::decode(nas).unwrap()
        else {
            panic!("not an AUTHENTICATION RESPONSE")
        };
        let v = self.vector.as_ref().unwrap();
        assert_eq!(resp.authentication_response_parameter.res(), v.xres().as_octets());
        let plmn = oxirush_security::Plmn::new("001", "01").unwrap();
        self.kasme = Some(derive_kasme(v.ck(), v.ik(), plmn, v.autn()));
    }

    /// SECURITY MODE COMMAND for EEA2/EIA2 replaying `replayed`.
    pub fn security_mode_command(&mut self, replayed: NasUeSecurityCapability) -> Vec<u8> {
        let kasme = self.kasme.clone().unwrap();
        let (eia, eea) = (IntegrityAlgorithm::EIA2, CipheringAlgorithm::EEA2);
        let mut ctx = NasSecurityContext::from_fresh_kasme(&kasme, eia, eea).unwrap();
        let ksi = NasKeySetIdentifier::from_key_set_identifier(KeySetIdentifier::Native(0)).unwrap();
        let cmd = NasSecurityModeCommand::new(NasSecurityAlgorithms::from_algorithms(eea, eia), ksi, replayed);
        let sht = NasEpsSecurityHeaderType::IntegrityProtectedWithNewEpsSecurityContext;
        let pdu = ctx.protect(&NasEpsMessage::new_emm(cmd), sht, Direction::Downlink).unwrap();
        self.ctx = Some(ctx);
        pdu
    }

    pub fn replayed(&self) -> NasUeSecurityCapability {
        NasUeSecurityCapability::from_ue_network_capability(self.ue_capability.as_ref().unwrap())
    }

    pub fn unprotect(&mut self, nas: &[u8]) -> NasEpsMessage {
        self.ctx.as_mut().unwrap().unprotect(nas, Direction::Uplink).unwrap().message
    }

    pub fn protect(&mut self, msg: NasEpsMessage) -> Vec<u8> {
        let sht = NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered;
        self.ctx.as_mut().unwrap().protect(&msg, sht, Direction::Downlink).unwrap()
    }

    pub fn kenb(&self) -> [u8; 32] {
        *derive_kenb(self.kasme.as_ref().unwrap(), NasCount::ZERO).as_octets()
    }

    /// ATTACH ACCEPT with a GUTI, one TAI and the default bearer (EBI 5,
    /// PTI 1, IPv4 UE_IP), protected.
    pub fn attach_accept(&mut self) -> Vec<u8> {
        let plmn = Plmn::new("001", "01").unwrap();
        let bearer = NasActivateDefaultEpsBearerContextRequest::new(
            NasEpsQualityOfService::new(vec![9]),
            NasAccessPointName::from_string("internet").unwrap(),
            NasPdnAddress::from_ipv4(UE_IP),
        );
        let esm = NasEpsMessage::new_esm(bearer, 5, 1);
        let accept = NasAttachAccept::new(
            NasEpsAttachResult::from_attach_result(AttachResult::EpsOnly),
            NasT3412Value::new(0x21),
            NasTrackingAreaIdentityList::from_plmn_tacs(&plmn, &[1]).unwrap(),
            NasEsmMessageContainer::from_esm_message(&esm).unwrap(),
        )
        .with_guti(NasEpsMobileIdentity::from_guti(Guti::new(plmn, 1, 1, M_TMSI)));
        self.protect(NasEpsMessage::new_emm(accept))
    }

    /// INITIAL CONTEXT SETUP REQUEST with one E-RAB carrying `nas`.
    pub fn ics_request(&self, enb_ue_id: u32, nas: Vec<u8>) -> Vec<u8> {
        ics_request(enb_ue_id, nas, self.kenb())
    }
}

pub fn auth_request_for(vector: &AuthenticationVector) -> Vec<u8> {
    let ksi = NasKeySetIdentifier::from_key_set_identifier(KeySetIdentifier::Native(0)).unwrap();
    let req = NasAuthenticationRequest::new(
        ksi,
        NasAuthenticationParameterRand::from_rand(*vector.rand().as_octets()),
        NasAuthenticationParameterAutn::from_autn(*vector.autn().as_octets()),
    );
    NasEpsMessage::new_emm(req).encode().unwrap()
}

pub fn ics_request(enb_ue_id: u32, nas: Vec<u8>, kenb: [u8; 32]) -> Vec<u8> {
    let priority = AllocationAndRetentionPriority::new(
        PriorityLevel(8),
        PreEmptionCapability::shall_not_trigger_pre_emption,
        PreEmptionVulnerability::not_pre_emptable,
        None,
    );
    let bearer = ERABToBeSetupItemCtxtSUReq::new(
        ERABID(5),
        ERABLevelQoSParameters::new(QCI(9), priority, None, None),
        TransportLayerAddress(BitString::from(SGW.octets())),
        GTPTEID(SGW_TEID.to_be_bytes()),
        Some(NASPDU::from(nas)),
        None,
    );
    let bearers = vec![build_s1ap_ie!(REJECT E_RABToBeSetupItemCtxtSUReq(bearer)).unwrap()];
    let rates = UEAggregateMaximumBitrate::new(BitRate(100_000_000), BitRate(50_000_000), None);
    build_s1ap!(
        InitiatingMessage,
        InitialContextSetup,
        InitialContextSetupRequest,
        MME_UE_S1AP_ID(MME_UE_ID),
        eNB_UE_S1AP_ID(enb_ue_id),
        uEaggregateMaximumBitrate(rates),
        E_RABToBeSetupListCtxtSUReq(ERABToBeSetupListCtxtSUReq(bearers)),
        UESecurityCapabilities(ue_security_capabilities(0xe0, 0xe0)),
        SecurityKey(kenb),
    )
    .unwrap()
    .encode()
    .unwrap()
    .to_vec()
}

/// Run a whole attach of UE 0 to Attach Complete; returns the eNB-UE-S1AP-ID.
pub fn attach(enb: &mut Enb, mme: &mut FakeMme, now: Instant) -> u32 {
    enb.start_attach(now, 0).unwrap();
    let sent = sends(enb);
    let (enb_ue_id, nas) = uplink_nas(&sent[0].1);
    assert_ne!(sent[0].0, 0, "UE-associated signalling on a non-zero stream");
    mme.attach_request(&nas);
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, mme.authentication_request(32 + 32)));
    let (_, nas) = uplink_nas(&sends(enb)[0].1);
    mme.authentication_response(&nas);
    let replayed = mme.replayed();
    enb.handle_s1ap(now, 1, &downlink_nas(enb_ue_id, mme.security_mode_command(replayed)));
    let (_, nas) = uplink_nas(&sends(enb)[0].1);
    assert!(matches!(mme.unprotect(&nas), NasEpsMessage::Emm(_, NasEmmMessage::SecurityModeComplete(_))));
    let accept = mme.attach_accept();
    enb.handle_s1ap(now, 1, &mme.ics_request(enb_ue_id, accept));
    let actions = drain(enb);
    assert_eq!(outcomes(&actions).len(), 1);
    assert!(outcomes(&actions)[0].result.is_ok(), "{actions:?}");
    enb_ue_id
}
