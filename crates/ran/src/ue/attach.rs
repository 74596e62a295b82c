//! Attach (TS 24.301 5.5.1) with the default bearer of its PDN connection
//! (6.4.1, 6.5.1).

use std::net::Ipv4Addr;
use std::time::Instant;

use oxirush_nas::nas_eps::{
    AttachType, KeySetIdentifier, NasActivateDefaultEpsBearerContextAccept, NasAttachAccept, NasAttachComplete,
    NasAttachReject, NasAttachRequest, NasEmmMessage, NasEpsAttachType, NasEpsMessage, NasEpsMobileIdentity,
    NasEsmMessage, NasEsmMessageContainer, NasKeySetIdentifier, NasPdnConnectivityRequest, NasPdnType, NasRequestType,
    NasUeNetworkCapability, PdnType, RequestTypeValue,
};

use super::security::{UE_EEA, UE_EIA};
use super::{DefaultBearer, EmmState, Procedure, Ue, Waiting, ATTACH_PTI};

/// Why a procedure could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    #[error("a {0:?} procedure is already running")]
    Busy(Procedure),
    #[error("UE is in EMM state {0:?}")]
    WrongState(EmmState),
    #[error("UE is connected, not idle")]
    Connected,
    #[error("UE has no EPS security context")]
    NoSecurityContext,
    #[error("not an APN: {0:?}")]
    BadApn(String),
    #[error("not an EPS bearer identity: {0}")]
    BadEbi(u8),
}

impl Ue {
    /// The UE network capability it advertises (TS 24.301 9.9.3.34).
    pub fn ue_network_capability() -> NasUeNetworkCapability {
        NasUeNetworkCapability::from_eea_eia(UE_EEA, UE_EIA)
    }

    /// Start an attach: queues the ATTACH REQUEST, with the GUTI and under
    /// the current security context if the UE has both (5.5.1.2.2), else
    /// with the IMSI, plain.
    pub fn start_attach(&mut self, now: Instant) -> Result<(), StartError> {
        if let Some(r) = &self.running {
            return Err(StartError::Busy(r.procedure));
        }
        if self.emm != EmmState::Deregistered {
            return Err(StartError::WrongState(self.emm));
        }
        self.begin(now, Procedure::Attach, Waiting::AttachProgress);
        self.emm = EmmState::RegisteredInitiated;
        self.secured_connection = false;
        self.bearer = None;
        self.pdns.clear();
        self.kenb = None;
        let (identity, ksi) = match (&self.guti, &self.security) {
            (Some(guti), Some(sec)) => (NasEpsMobileIdentity::from_guti(*guti), KeySetIdentifier::Native(sec.ksi)),
            _ => match NasEpsMobileIdentity::from_imsi(self.usim.imsi.as_str()) {
                Ok(id) => (id, KeySetIdentifier::NoKey),
                Err(e) => {
                    self.finish(now, Err(format!("IMSI not encodable: {e:?}")));
                    return Ok(());
                }
            },
        };
        let pdn = NasPdnConnectivityRequest::new(
            NasRequestType::from_request_type(RequestTypeValue::Initial),
            NasPdnType::from_pdn_type(PdnType::Ipv4),
        );
        let esm = NasEpsMessage::new_esm(pdn, 0, ATTACH_PTI);
        let container = match NasEsmMessageContainer::from_esm_message(&esm) {
            Ok(c) => c,
            Err(e) => {
                self.finish(now, Err(format!("ESM container: {e}")));
                return Ok(());
            }
        };
        let ksi = NasKeySetIdentifier::from_key_set_identifier(ksi).unwrap_or_default();
        let request = NasAttachRequest::new(
            NasEpsAttachType::from_attach_type(AttachType::EpsAttach),
            ksi,
            identity,
            Self::ue_network_capability(),
            container,
        );
        let with_context = self.guti.is_some() && self.security.is_some();
        self.send(now, &NasEpsMessage::new_emm(request), with_context);
        Ok(())
    }

    pub(super) fn handle_attach_accept(&mut self, now: Instant, accept: &NasAttachAccept) {
        if self.waiting().map(|w| w.0) != Some(Procedure::Attach) {
            return self.problem(now, "ATTACH ACCEPT outside attach".into());
        }
        if !self.secured_connection {
            return self.problem(now, "ATTACH ACCEPT before security mode control".into());
        }
        let esm = match accept.esm_message_container.decode_as_esm_message() {
            Ok(m) => m,
            Err(e) => return self.problem(now, format!("ATTACH ACCEPT ESM container: {e}")),
        };
        let NasEpsMessage::Esm(header, NasEsmMessage::ActivateDefaultEpsBearerContextRequest(act)) = esm else {
            return self.problem(now, "ATTACH ACCEPT without ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST".into());
        };
        if header.procedure_transaction_identity != ATTACH_PTI {
            return self.problem(
                now,
                format!("default bearer for PTI {} (sent {ATTACH_PTI})", header.procedure_transaction_identity),
            );
        }
        let ebi = header.eps_bearer_identity;
        if !(5..=15).contains(&ebi) {
            return self.problem(now, format!("default bearer with invalid EBI {ebi}"));
        }
        let ipv4 = act.pdn_address.ipv4().map(Ipv4Addr::from);
        if ipv4.is_none() {
            return self.problem(now, "default bearer without an IPv4 PDN address".into());
        }
        if let Some(guti) = accept.guti.as_ref().and_then(|g| g.as_guti()) {
            self.guti = Some(guti);
        }
        self.tais = accept.tai_list.tais();
        self.set_t3412(&accept.t3412_value);
        self.idle.last_visited = self.idle.cell.filter(|c| self.tais.contains(c));
        self.bearer = Some(DefaultBearer { ebi, ipv4 });

        // TS 24.301 5.5.1.2.4: ATTACH COMPLETE with the bearer's accept.
        let esm_accept = NasEpsMessage::new_esm(NasActivateDefaultEpsBearerContextAccept::new(), ebi, 0);
        let container = match NasEsmMessageContainer::from_esm_message(&esm_accept) {
            Ok(c) => c,
            Err(e) => return self.problem(now, format!("ESM container: {e}")),
        };
        self.send(now, &NasEpsMessage::new_emm(NasAttachComplete::new(container)), false);
        self.emm = EmmState::Registered;
        self.finish(now, Ok(()));
    }

    pub(super) fn handle_attach_reject(&mut self, now: Instant, reject: &NasAttachReject) {
        if self.waiting().map(|w| w.0) != Some(Procedure::Attach) {
            return self.problem(now, "ATTACH REJECT outside attach".into());
        }
        let cause = reject.emm_cause.cause_raw();
        // TS 24.301 5.5.1.2.5: #3, #6, #7, #8 invalidate the GUTI and the
        // security context; others (#9, #10 ...) too for this emulation,
        // so that a retry starts with the IMSI.
        self.guti = None;
        self.security = None;
        self.emm = EmmState::Deregistered;
        self.finish(now, Err(format!("attach reject #{cause} ({})", reject.emm_cause.description())));
    }

    pub(super) fn handle_guti_reallocation(
        &mut self,
        now: Instant,
        cmd: &oxirush_nas::nas_eps::NasGutiReallocationCommand,
    ) {
        if let Some(guti) = cmd.guti.as_guti() {
            self.guti = Some(guti);
        }
        let complete = NasEpsMessage::new_emm(NasEmmMessage::GutiReallocationComplete(Box::default()));
        self.send(now, &complete, false);
    }
}
