//! The default EPS bearer of a PDN connection (TS 24.301 6.4.1, TS 23.401
//! 5.3.2.1 steps 12-23): APN selection against the subscription, the PDN
//! type (TS 23.401 5.3.1.1, TS 24.301 6.5.1.3), the PGW, the S11 Create
//! Session with the UE's PCO, the GTP cause -> ESM cause table, and for the
//! attach the Initial Context Setup with the Attach Accept and KeNB, then
//! Modify Bearer with the eNB's S1-U F-TEID. The same pieces serve a PDN
//! connectivity after attach ([`crate::pdn_connectivity`]).

use crate::context::{NasTimerKind, PdnRequest, Session, Step};
use crate::mme::Mme;
use crate::nas_build::{self, DefaultBearer};
use crate::s1ap_build::InitialContextSetup;
use crate::s1ap_handler::S1Result;
use bytes::Bytes;
use mobicore_common::s11::*;
use mobicore_common::s6a::ApnConfiguration;
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ebi, Ecgi, Fteid, PdnType, Tai, Teid};
use oxirush_nas::nas_eps::{EmmCause, EsmCause, NasEpsSecurityHeaderType, NasPdnAddress};
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::ie;
use oxirush_s1ap::s1ap::S1APPDU;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The EBI of the default bearer of the attach.
pub const DEFAULT_EBI: u8 = 5;

/// PDN type codes of TS 24.301 9.9.4.10.
pub const PDN_IPV4: u8 = 1;
pub const PDN_IPV6: u8 = 2;
pub const PDN_IPV4V6: u8 = 3;

/// GTPv2-C cause 19 "New PDN type due to single address bearer only"
/// (TS 29.274 Table 8.4-1); 18 "due to network preference" gives #50 or
/// #51 by the type granted, as any other single type granted does.
const NEW_PDN_TYPE_SINGLE_ADDRESS_BEARER: u8 = 19;

/// The ESM cause a UE is given for a Create Session Request the S-GW or
/// P-GW refused with `cause` (TS 29.274 8.4 -> TS 24.301 6.5.1.4 and
/// Annex B), so that the UE learns what happened. `requested` is the PDN
/// type code the request asked for (#50/#51 name the type that is allowed).
pub fn esm_cause_for(cause: GtpCause, requested: u8) -> EsmCause {
    match cause.0 {
        // 78 Missing or unknown APN.
        78 => EsmCause::MissingOrUnknownApn,
        // 73 No resources available, 84 All dynamic addresses are occupied,
        // 91 No memory available, 113 APN congestion, 120 GTP-C entity
        // congestion: the network lacks resources (#26).
        73 | 84 | 91 | 113 | 120 => EsmCause::InsufficientResources,
        // 83 Preferred PDN type not supported: the other IP version is.
        83 => match requested {
            PDN_IPV6 => EsmCause::PdnTypeIpv4OnlyAllowed,
            PDN_IPV4 => EsmCause::PdnTypeIpv6OnlyAllowed,
            _ => EsmCause::UnknownPdnType,
        },
        // 92 User authentication failed (the PGW's AAA refused the PCO).
        92 => EsmCause::UserAuthenticationOrAuthorizationFailed,
        // 93 APN access denied - no subscription.
        93 => EsmCause::RequestedServiceOptionNotSubscribed,
        // 94 Request rejected (reason not specified).
        94 => EsmCause::RequestRejectedUnspecified,
        // 116 Multiple PDN connections for a given APN not allowed.
        116 => EsmCause::MultiplePdnConnectionsForAGivenApnNotAllowed,
        // 64 Context not found, 65 Invalid message format, 67 Invalid
        // length, 69 Mandatory IE incorrect, 70 Mandatory IE missing,
        // 72 System failure, 100 Remote peer not responding, 103
        // Conditional IE missing, 107 Invalid reply from remote peer:
        // an error situation in the network (#38).
        64 | 65 | 67 | 69 | 70 | 72 | 100 | 103 | 107 => EsmCause::NetworkFailure,
        // Any other rejection: refused by the S-GW or P-GW (#30).
        _ => EsmCause::RequestRejectedByServingGwOrPdnGw,
    }
}

fn pdn_code(t: PdnType) -> u8 {
    match t {
        PdnType::Ipv4 => PDN_IPV4,
        PdnType::Ipv6 => PDN_IPV6,
        PdnType::Ipv4v6 => PDN_IPV4V6,
    }
}

/// The PDN type the Create Session Request asks for, from what the UE
/// requested and what is subscribed (TS 23.401 5.3.1.1): IPv4v6 asked and
/// a single type subscribed gives that type; a single type asked must be
/// subscribed, or IPv4v6 must be, else the request is rejected with the
/// cause naming the type allowed (TS 24.301 6.5.1.4 #50, #51).
pub fn pdn_type_to_request(requested: u8, subscribed: PdnType) -> Result<PdnType, EsmCause> {
    match (requested, subscribed) {
        (PDN_IPV4V6, s) => Ok(s),
        (PDN_IPV4, PdnType::Ipv4 | PdnType::Ipv4v6) => Ok(PdnType::Ipv4),
        (PDN_IPV6, PdnType::Ipv6 | PdnType::Ipv4v6) => Ok(PdnType::Ipv6),
        (PDN_IPV4, PdnType::Ipv6) => Err(EsmCause::PdnTypeIpv6OnlyAllowed),
        (PDN_IPV6, PdnType::Ipv4) => Err(EsmCause::PdnTypeIpv4OnlyAllowed),
        // Non-IP, Ethernet and reserved codes are not served here.
        _ => Err(EsmCause::UnknownPdnType),
    }
}

/// What a granted PDN connection gives the UE: the type, its addresses, and
/// the ESM cause of an IPv4v6 request that got a single type (TS 24.301
/// 6.5.1.3: #50, #51 or #52 in the ACTIVATE DEFAULT EPS BEARER CONTEXT
/// REQUEST). `Err` if the response grants a type the UE did not ask for,
/// or lacks the address of the type it grants: never "accepted" then.
pub fn granted(r: &CreateSessionResponse, requested: u8) -> Result<Granted, EsmCause> {
    let pdn_type = match (r.pdn_type, r.paa, r.ipv6_prefix) {
        (Some(t), _, _) => t,
        // A response without the PDN type: what its addresses say.
        (None, Some(_), Some(_)) => PdnType::Ipv4v6,
        (None, None, Some(_)) => PdnType::Ipv6,
        (None, _, None) => PdnType::Ipv4,
    };
    let addresses_present = match pdn_type {
        PdnType::Ipv4 => r.paa.is_some(),
        PdnType::Ipv6 => r.ipv6_prefix.is_some(),
        PdnType::Ipv4v6 => r.paa.is_some() && r.ipv6_prefix.is_some(),
    };
    let fits = requested == PDN_IPV4V6 || requested == pdn_code(pdn_type);
    if !addresses_present || !fits {
        return Err(EsmCause::RequestRejectedByServingGwOrPdnGw);
    }
    let esm_cause = match (requested, pdn_type) {
        (PDN_IPV4V6, PdnType::Ipv4v6) => None,
        (PDN_IPV4V6, _) if r.cause.0 == NEW_PDN_TYPE_SINGLE_ADDRESS_BEARER => {
            Some(EsmCause::SingleAddressBearersOnlyAllowed)
        }
        (PDN_IPV4V6, PdnType::Ipv4) => Some(EsmCause::PdnTypeIpv4OnlyAllowed),
        (PDN_IPV4V6, PdnType::Ipv6) => Some(EsmCause::PdnTypeIpv6OnlyAllowed),
        _ => None,
    };
    let paa = matches!(pdn_type, PdnType::Ipv4 | PdnType::Ipv4v6).then_some(r.paa).flatten();
    let ipv6_prefix = matches!(pdn_type, PdnType::Ipv6 | PdnType::Ipv4v6).then_some(r.ipv6_prefix).flatten();
    Ok(Granted { pdn_type, paa, ipv6_prefix, esm_cause })
}

/// A granted PDN type and its addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub pdn_type: PdnType,
    pub paa: Option<Ipv4Addr>,
    pub ipv6_prefix: Option<(Ipv6Addr, u8)>,
    pub esm_cause: Option<EsmCause>,
}

/// The IPv6 interface identifier the UE is given (TS 23.401 5.3.1.2.2,
/// TS 24.301 9.9.4.9): the low 64 bits of the address the PGW put in the
/// PAA, or ::1 if it gave a bare prefix (an identifier must not be zero).
pub fn interface_identifier(prefix: Ipv6Addr) -> [u8; 8] {
    let o = prefix.octets();
    let mut iid = [0u8; 8];
    iid.copy_from_slice(&o[8..]);
    if iid == [0; 8] {
        iid[7] = 1;
    }
    iid
}

/// The PDN address IE of a session (TS 24.301 9.9.4.9).
pub fn pdn_address(s: &Session) -> NasPdnAddress {
    let ipv4 = s.paa.map_or([0; 4], |a| a.octets());
    let iid = s.ipv6_prefix.map_or([0, 0, 0, 0, 0, 0, 0, 1], |(p, _)| interface_identifier(p));
    match s.pdn_type {
        PdnType::Ipv4 => NasPdnAddress::from_ipv4(ipv4),
        PdnType::Ipv6 => NasPdnAddress::from_ipv6_iid(iid),
        PdnType::Ipv4v6 => NasPdnAddress::from_ipv4v6(iid, ipv4),
    }
}

/// The ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST of a session, plain.
pub(crate) fn default_bearer_request(
    s: &Session,
    pti: u8,
    esm_cause: Option<EsmCause>,
    pco: Option<(&[u8], bool)>,
) -> Option<oxirush_nas::nas_eps::NasEpsMessage> {
    let bearer = DefaultBearer {
        ebi: s.ebi,
        pti,
        qci: s.qci,
        apn: &s.apn,
        ipv4: s.paa.map_or([0; 4], |a| a.octets()),
        apn_ambr: s.apn_ambr,
        esm_cause,
    };
    nas_build::default_bearer_request(&bearer, pdn_address(s), pco)
}

impl Mme {
    /// The APN configuration a PDN connection uses: the configured
    /// override, else the APN the UE asked for if subscribed (#27 if not,
    /// TS 24.301 6.5.1.4), else the subscription's default (TS 23.401
    /// 5.3.2.1, 4.3.8.1).
    pub(crate) fn select_apn(&self, id: u32, requested: Option<&str>) -> Result<ApnConfiguration, EsmCause> {
        let ue = self.ues.get(&id).ok_or(EsmCause::NetworkFailure)?;
        let sub = ue.subscription.as_ref().ok_or(EsmCause::NetworkFailure)?;
        let find = |apn: &str| sub.apns.iter().find(|a| a.service_selection.eq_ignore_ascii_case(apn));
        if let Some(apn) = self.cfg.default_apn_override.as_deref() {
            let mut conf = find(apn).or(sub.default_apn()).cloned().ok_or(EsmCause::MissingOrUnknownApn)?;
            conf.service_selection = apn.to_string();
            return Ok(conf);
        }
        match requested {
            Some(apn) => find(apn).cloned().ok_or(EsmCause::MissingOrUnknownApn),
            None => sub.default_apn().cloned().ok_or(EsmCause::MissingOrUnknownApn),
        }
    }

    /// The Create Session Request (TS 29.274 7.2.1) for a PDN connection
    /// of UE `id` with default bearer `ebi`: the PDN type per subscription,
    /// the PGW per APN, the static address and the UE's PCO.
    pub(crate) fn create_session_request(
        &self,
        id: u32,
        conf: &ApnConfiguration,
        req: &PdnRequest,
        ebi: u8,
    ) -> Result<CreateSessionRequest, EsmCause> {
        let pdn_type = pdn_type_to_request(req.pdn_type, conf.pdn_type)?;
        let ue = self.ues.get(&id).ok_or(EsmCause::NetworkFailure)?;
        let (Some(imsi), Some(sub)) = (ue.imsi.clone(), ue.subscription.as_ref()) else {
            return Err(EsmCause::NetworkFailure);
        };
        let plmn = self.cfg.plmn;
        let tac = self.cfg.served_tacs.first().copied().unwrap_or(1);
        // A static address only for a PDN type that has IPv4.
        let static_ipv4 = conf.served_party_ipv4.filter(|_| pdn_type != PdnType::Ipv6);
        Ok(CreateSessionRequest {
            imsi,
            msisdn: sub.msisdn.clone(),
            serving_network: plmn,
            tai: ue.tai.unwrap_or(Tai { plmn, tac }),
            ecgi: ue.ecgi.unwrap_or(Ecgi { plmn, eci: 0 }),
            // One MME S11 F-TEID per UE, for all its PDN connections.
            sender_fteid: Fteid { teid: Teid(id), ipv4: self.cfg.s11_local_ip },
            apn: conf.service_selection.clone(),
            pdn_type,
            apn_ambr: conf.ambr,
            bearer: BearerContextToCreate { ebi: Ebi(ebi), qci: conf.qci, arp: conf.arp },
            pgw_s5s8_c: Some(self.cfg.pgw_for(&conf.service_selection, conf.pdn_gw)),
            static_ipv4,
            pco: req.pco.clone(),
            mei: ue.imeisv.clone(),
        })
    }

    /// The session a Create Session Response creates, and the ESM cause
    /// for the UE (a single type granted for IPv4v6), or the ESM cause of
    /// the refusal.
    pub(crate) fn session_from(
        &mut self,
        r: &CreateSessionResponse,
        conf: &ApnConfiguration,
        requested: u8,
        ebi: u8,
    ) -> Result<(Session, Option<EsmCause>), EsmCause> {
        if !r.cause.is_accepted() || !r.bearer_cause.is_accepted() {
            self.counters.incr("s11_create_session_rejected");
            let cause = if r.cause.is_accepted() { r.bearer_cause } else { r.cause };
            return Err(esm_cause_for(cause, requested));
        }
        let (Some(sgw_s11), Some(sgw_s1u)) = (r.sgw_fteid, r.s1u_sgw_fteid) else {
            self.counters.incr("s11_create_session_incomplete");
            return Err(EsmCause::NetworkFailure);
        };
        let g = granted(r, requested).inspect_err(|_| self.counters.incr("s11_create_session_pdn_type_mismatch"))?;
        let session = Session {
            apn: conf.service_selection.clone(),
            ebi: if r.bearer_ebi.0 == 0 { ebi } else { r.bearer_ebi.0 },
            qci: conf.qci,
            arp: conf.arp,
            apn_ambr: r.apn_ambr.unwrap_or(conf.ambr),
            sgw_s11,
            sgw_s1u,
            pdn_type: g.pdn_type,
            paa: g.paa,
            ipv6_prefix: g.ipv6_prefix,
            enb_s1u: None,
        };
        Ok((session, g.esm_cause))
    }

    fn reject_pdn(&mut self, id: u32, cause: EsmCause) {
        let pti = self.ues.get(&id).and_then(|u| u.attach.as_ref()).map_or(0, |a| a.pdn.pti);
        let esm = nas_build::pdn_connectivity_reject(pti, cause);
        // TS 24.301 5.5.1.2.5: #19 ESM failure with the PDN CONNECTIVITY REJECT.
        self.reject_attach(id, EmmCause::EsmFailure, esm);
    }

    /// S11 Create Session Request of the attach (TS 23.401 5.3.2.1 step 12).
    pub(crate) fn start_create_session(&mut self, id: u32) {
        let Some(req) = self.ues.get(&id).and_then(|u| u.attach.as_ref()).map(|a| a.pdn.clone()) else { return };
        let csr = self
            .select_apn(id, req.apn.as_deref())
            .and_then(|conf| self.create_session_request(id, &conf, &req, DEFAULT_EBI));
        let csr = match csr {
            Ok(c) => c,
            Err(cause) => {
                self.counters.incr("esm_pdn_connectivity_rejected");
                self.reject_pdn(id, cause);
                return;
            }
        };
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.step = Step::CreateSession;
        }
        self.request_s11(id, S11Request::CreateSession(csr));
    }

    /// Create Session Response of the attach: build the default bearer, the
    /// Attach Accept and the Initial Context Setup Request.
    pub(crate) fn on_create_session(&mut self, id: u32, r: CreateSessionResponse) {
        let Some(req) = self.ues.get(&id).and_then(|u| u.attach.as_ref()).map(|a| a.pdn.clone()) else { return };
        let Ok(conf) = self.select_apn(id, req.apn.as_deref()) else { return };
        match self.session_from(&r, &conf, req.pdn_type, DEFAULT_EBI) {
            Ok((session, esm_cause)) => {
                if let Some(ue) = self.ues.get_mut(&id) {
                    ue.sessions = vec![session];
                }
                self.send_attach_accept(id, &req, esm_cause, r.pco.as_deref());
            }
            Err(cause) => {
                // A session the S-GW did create but we cannot use goes.
                if r.cause.is_accepted() {
                    if let Some(teid) = r.sgw_fteid.map(|f| f.teid) {
                        let dsr = DeleteSessionRequest { sgw_teid: teid, linked_ebi: Ebi(DEFAULT_EBI) };
                        self.request_s11(id, S11Request::DeleteSession(dsr));
                    }
                }
                self.reject_pdn(id, cause);
            }
        }
    }

    fn send_attach_accept(&mut self, id: u32, req: &PdnRequest, esm_cause: Option<EsmCause>, pco: Option<&[u8]>) {
        let guti = match self.ues.get(&id).and_then(|u| u.guti) {
            Some(g) => g,
            None => {
                let g = self.alloc_guti(id);
                if let Some(ue) = self.ues.get_mut(&id) {
                    ue.guti = Some(g);
                }
                g
            }
        };
        let Some(ue) = self.ues.get(&id) else { return };
        let (Some(s), Some(_), Some(sec), Some(s1)) =
            (ue.sessions.first(), ue.subscription.as_ref(), ue.security.as_ref(), ue.s1)
        else {
            return;
        };
        // TS 24.301 6.5.1.3: the network's PCO answers the UE's, in the same IE.
        let esm = default_bearer_request(s, req.pti, esm_cause, pco.map(|p| (p, req.epco)));
        let tacs = self.tai_list_of(id);
        let accept =
            esm.and_then(|e| nas_build::attach_accept(&self.cfg.plmn, &tacs, self.cfg.t3412_seconds, &guti, &e));
        let (ebi, qci, arp, sgw_s1u) = (s.ebi, s.qci, s.arp, s.sgw_s1u);
        let (eea, eia, ue_ambr) = (sec.ue_eea, sec.ue_eia, ue.ue_ambr());
        let Some(accept) = accept else {
            self.counters.incr("nas_encode_error");
            self.reject_attach(id, EmmCause::NetworkFailure, None);
            return;
        };
        let header = NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered;
        let Some(nas) = self.protect_dl(id, &accept, header) else { return };
        let Some(kenb) = self.fresh_kenb(id) else { return };
        let ics = InitialContextSetup {
            mme_ue_id: id,
            enb_ue_id: s1.enb_ue_s1ap_id,
            ue_ambr,
            ebi,
            qci,
            arp,
            sgw_s1u,
            nas,
            eea,
            eia,
            kenb: &kenb,
        };
        let data = self.initial_context_setup_request(id, ics);
        self.push_s1(s1.assoc, s1.stream, data);
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.step = Step::AttachAccept;
            ue.tai_list = tacs;
        }
        // 5.5.1.2.4: T3450 retransmits the ATTACH ACCEPT.
        self.start_timer(id, NasTimerKind::T3450, Bytes::from(accept), header);
    }

    /// INITIAL CONTEXT SETUP RESPONSE (TS 36.413 8.3.1.2): Modify Bearer with
    /// the eNB's S1-U F-TEID (TS 23.401 5.3.2.1 step 23).
    pub(crate) fn on_ics_response(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, InitialContextSetupResponse,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
        );
        let Some(id) = self.known_ue(assoc, mme_id, enb_id) else { return Ok(()) };
        let mut enb_s1u = Vec::new();
        for item in pdu.items::<ie::E_RABSetupListCtxtSURes>() {
            let item = item?;
            let o = item.transport_layer_address.0.as_octets();
            if o.len() >= 4 {
                let ip = Ipv4Addr::new(o[0], o[1], o[2], o[3]);
                let teid = Teid(u32::from_be_bytes(item.gtp_teid.0));
                enb_s1u.push((item.e_rab_id.0.min(255) as u8, Fteid { teid, ipv4: ip }));
            }
        }
        let Some(ue) = self.ues.get_mut(&id) else { return Ok(()) };
        // Every PDN connection's default bearer the eNB set up gets its
        // downlink path (TS 23.401 5.3.2.1 step 23, 5.3.4.1 step 8).
        let mut requests = Vec::new();
        for s in ue.sessions.iter_mut() {
            if let Some(&(ebi, fteid)) = enb_s1u.iter().find(|(e, _)| *e == s.ebi) {
                s.enb_s1u = Some(fteid);
                requests.push(ModifyBearerRequest { sgw_teid: s.sgw_s11.teid, ebi: Ebi(ebi), s1u_enb_fteid: fteid });
            }
        }
        if requests.is_empty() {
            self.counters.incr("ics_response_without_bearer");
            self.stop_timer(id);
            self.abort_ue(id, oxirush_s1ap::s1ap::CauseNas::unspecified);
            return Ok(());
        }
        ue.ics_done = true;
        if ue.step == Step::ServiceRequest {
            // TS 23.401 5.3.4.1: the service request ends with the user plane.
            ue.step = Step::Idle;
            self.counters.incr("service_request_completed");
        }
        for req in requests {
            self.request_s11(id, S11Request::ModifyBearer(req));
        }
        Ok(())
    }

    pub(crate) fn on_modify_bearer(&mut self, _id: u32, r: ModifyBearerResponse) {
        if !r.cause.is_accepted() {
            self.counters.incr("s11_modify_bearer_rejected");
        }
    }
}
