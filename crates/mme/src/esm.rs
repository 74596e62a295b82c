//! The default EPS bearer of the attach (TS 24.301 6.4.1, TS 23.401 5.3.2.1
//! steps 12-23): APN selection, S11 Create Session, Initial Context Setup
//! with the Attach Accept and KeNB, and Modify Bearer with the eNB's S1-U
//! F-TEID.

use crate::context::{NasTimerKind, Session, Step};
use crate::mme::Mme;
use crate::nas_build::{self, DefaultBearer};
use crate::s1ap_build::{self, InitialContextSetup};
use crate::s1ap_handler::S1Result;
use bytes::Bytes;
use mobicore_common::s11::*;
use mobicore_common::s6a::ApnConfiguration;
use mobicore_common::sctp_api::AssocId;
use mobicore_common::{Ebi, Ecgi, Fteid, PdnType, Tai, Teid};
use oxirush_nas::nas_eps::{EmmCause, EsmCause, NasEpsSecurityHeaderType};
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::ie;
use oxirush_s1ap::s1ap::S1APPDU;
use oxirush_security::nas_eps::derive_kenb;
use oxirush_security::NasCount;
use std::net::Ipv4Addr;

/// The EBI of the default bearer of the attach.
pub const DEFAULT_EBI: u8 = 5;

/// PDN type codes of TS 24.301 9.9.4.10.
const PDN_IPV6: u8 = 2;
const PDN_IPV4V6: u8 = 3;

impl Mme {
    /// The APN configuration the default bearer uses: the configured
    /// override, else the APN the UE asked for if subscribed, else the
    /// subscription's default (TS 23.401 5.3.2.1, 4.3.8.1).
    fn select_apn(&self, id: u32) -> Result<ApnConfiguration, EsmCause> {
        let ue = self.ues.get(&id).ok_or(EsmCause::NetworkFailure)?;
        let sub = ue.subscription.as_ref().ok_or(EsmCause::NetworkFailure)?;
        let requested = ue.attach.as_ref().and_then(|a| a.requested_apn.clone());
        let find = |apn: &str| sub.apns.iter().find(|a| a.service_selection.eq_ignore_ascii_case(apn));
        if let Some(apn) = self.cfg.default_apn_override.as_deref() {
            let mut conf = find(apn).or(sub.default_apn()).cloned().ok_or(EsmCause::MissingOrUnknownApn)?;
            conf.service_selection = apn.to_string();
            return Ok(conf);
        }
        match requested {
            Some(apn) => find(&apn).cloned().ok_or(EsmCause::MissingOrUnknownApn),
            None => sub.default_apn().cloned().ok_or(EsmCause::MissingOrUnknownApn),
        }
    }

    fn reject_pdn(&mut self, id: u32, cause: EsmCause) {
        let pti = self.ues.get(&id).and_then(|u| u.attach.as_ref()).map_or(0, |a| a.pti);
        let esm = nas_build::pdn_connectivity_reject(pti, cause);
        // TS 24.301 5.5.1.2.5: #19 ESM failure with the PDN CONNECTIVITY REJECT.
        self.reject_attach(id, EmmCause::EsmFailure, esm);
    }

    /// S11 Create Session Request (TS 29.274 7.2.1).
    pub(crate) fn start_create_session(&mut self, id: u32) {
        let conf = match self.select_apn(id) {
            Ok(c) => c,
            Err(cause) => {
                self.counters.incr("esm_apn_rejected");
                self.reject_pdn(id, cause);
                return;
            }
        };
        let Some(ue) = self.ues.get_mut(&id) else { return };
        if ue.attach.as_ref().is_some_and(|a| a.pdn_type == PDN_IPV6) {
            // Only IPv4 PDN addresses are handed out (6.5.1.4 #50).
            self.reject_pdn(id, EsmCause::PdnTypeIpv4OnlyAllowed);
            return;
        }
        let (Some(imsi), Some(sub)) = (ue.imsi.clone(), ue.subscription.as_ref()) else { return };
        let plmn = self.cfg.plmn;
        let tac = self.cfg.served_tacs.first().copied().unwrap_or(1);
        let req = CreateSessionRequest {
            imsi,
            msisdn: sub.msisdn.clone(),
            serving_network: plmn,
            tai: ue.tai.unwrap_or(Tai { plmn, tac }),
            ecgi: ue.ecgi.unwrap_or(Ecgi { plmn, eci: 0 }),
            sender_fteid: Fteid { teid: Teid(id), ipv4: self.cfg.s11_local_ip },
            apn: conf.service_selection.clone(),
            pdn_type: PdnType::Ipv4,
            apn_ambr: conf.ambr,
            bearer: BearerContextToCreate { ebi: Ebi(DEFAULT_EBI), qci: conf.qci, arp: conf.arp },
            pgw_s5s8_c: None,
            static_ipv4: None,
            pco: None,
        };
        ue.step = Step::CreateSession;
        self.request_s11(id, S11Request::CreateSession(req));
    }

    /// Create Session Response: build the default bearer, the Attach Accept
    /// and the Initial Context Setup Request.
    pub(crate) fn on_create_session(&mut self, id: u32, r: CreateSessionResponse) {
        let fields = (r.sgw_fteid, r.s1u_sgw_fteid, r.paa);
        let (Some(sgw_s11), Some(sgw_s1u), Some(paa)) = fields else {
            self.counters.incr("s11_create_session_rejected");
            let cause = match r.cause {
                GtpCause::MISSING_OR_UNKNOWN_APN => EsmCause::MissingOrUnknownApn,
                _ => EsmCause::InsufficientResources,
            };
            self.reject_pdn(id, cause);
            return;
        };
        if !r.cause.is_accepted() || !r.bearer_cause.is_accepted() {
            self.counters.incr("s11_create_session_rejected");
            self.reject_pdn(id, EsmCause::RequestRejectedByServingGwOrPdnGw);
            return;
        }
        let Ok(conf) = self.select_apn(id) else { return };
        let Some(ue) = self.ues.get_mut(&id) else { return };
        let apn_ambr = r.apn_ambr.unwrap_or(conf.ambr);
        ue.session = Some(Session {
            apn: conf.service_selection.clone(),
            ebi: r.bearer_ebi.0,
            qci: conf.qci,
            arp: conf.arp,
            apn_ambr,
            sgw_s11,
            sgw_s1u,
            paa,
            enb_s1u: None,
        });
        let attach = ue.attach.as_ref();
        let pti = attach.map_or(0, |a| a.pti);
        let esm_cause = attach.filter(|a| a.pdn_type == PDN_IPV4V6).map(|_| EsmCause::PdnTypeIpv4OnlyAllowed);
        self.send_attach_accept(id, pti, esm_cause);
    }

    fn send_attach_accept(&mut self, id: u32, pti: u8, esm_cause: Option<EsmCause>) {
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
        let (Some(s), Some(sub), Some(sec), Some(s1)) =
            (ue.session.as_ref(), ue.subscription.as_ref(), ue.security.as_ref(), ue.s1)
        else {
            return;
        };
        let bearer = DefaultBearer {
            ebi: s.ebi,
            pti,
            qci: s.qci,
            apn: &s.apn,
            ipv4: s.paa.octets(),
            apn_ambr: s.apn_ambr,
            esm_cause,
        };
        let esm = nas_build::activate_default_bearer_request(&bearer);
        let tacs = match self.cfg.served_tacs.is_empty() {
            true => vec![1],
            false => self.cfg.served_tacs.clone(),
        };
        let accept =
            esm.and_then(|e| nas_build::attach_accept(&self.cfg.plmn, &tacs, self.cfg.t3412_seconds, &guti, &e));
        // TS 33.401 A.3: KeNB from the uplink NAS COUNT of the latest verified message.
        let kenb = derive_kenb(&sec.kasme, NasCount::new(sec.last_ul_count).unwrap_or(NasCount::ZERO));
        let kenb: [u8; 32] = *kenb.as_octets();
        let (ebi, qci, arp, sgw_s1u) = (s.ebi, s.qci, s.arp, s.sgw_s1u);
        let (eea, eia, ue_ambr) = (sec.ue_eea, sec.ue_eia, sub.ue_ambr);
        let Some(accept) = accept else {
            self.counters.incr("nas_encode_error");
            self.reject_attach(id, EmmCause::NetworkFailure, None);
            return;
        };
        let header = NasEpsSecurityHeaderType::IntegrityProtectedAndCiphered;
        let Some(nas) = self.protect_dl(id, &accept, header) else { return };
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
        let data = s1ap_build::initial_context_setup_request(ics);
        self.push_s1(s1.assoc, s1.stream, data);
        if let Some(ue) = self.ues.get_mut(&id) {
            ue.step = Step::AttachAccept;
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
        let mut enb_s1u = None;
        for item in pdu.items::<ie::E_RABSetupListCtxtSURes>() {
            let item = item?;
            let o = item.transport_layer_address.0.as_octets();
            if o.len() >= 4 {
                let ip = Ipv4Addr::new(o[0], o[1], o[2], o[3]);
                let teid = Teid(u32::from_be_bytes(item.gtp_teid.0));
                enb_s1u = Some((item.e_rab_id.0.min(255) as u8, Fteid { teid, ipv4: ip }));
            }
        }
        let Some(ue) = self.ues.get_mut(&id) else { return Ok(()) };
        let Some(s) = ue.session.as_mut() else { return Ok(()) };
        let Some((ebi, fteid)) = enb_s1u.filter(|(e, _)| *e == s.ebi) else {
            self.counters.incr("ics_response_without_bearer");
            self.stop_timer(id);
            self.abort_ue(id, oxirush_s1ap::s1ap::CauseNas::unspecified);
            return Ok(());
        };
        s.enb_s1u = Some(fteid);
        ue.ics_done = true;
        let req = ModifyBearerRequest { sgw_teid: s.sgw_s11.teid, ebi: Ebi(ebi), s1u_enb_fteid: fteid };
        self.request_s11(id, S11Request::ModifyBearer(req));
        Ok(())
    }

    pub(crate) fn on_modify_bearer(&mut self, _id: u32, r: ModifyBearerResponse) {
        if !r.cause.is_accepted() {
            self.counters.incr("s11_modify_bearer_rejected");
        }
    }
}
