//! PDN connections after attach (TS 24.301 6.5.1, 6.5.2): the UE asks for
//! one more (PDN CONNECTIVITY REQUEST with an APN, answered by ACTIVATE
//! DEFAULT EPS BEARER CONTEXT REQUEST, 6.4.1, or PDN CONNECTIVITY REJECT)
//! and gives one up (PDN DISCONNECT REQUEST, answered by DEACTIVATE EPS
//! BEARER CONTEXT REQUEST, 6.4.4, or PDN DISCONNECT REJECT). Both are sent
//! on the UE's NAS signalling connection, ciphered and integrity protected.

use std::net::Ipv4Addr;
use std::time::Instant;

use oxirush_nas::nas_eps::{
    NasAccessPointName, NasActivateDefaultEpsBearerContextAccept, NasActivateDefaultEpsBearerContextRequest,
    NasDeactivateEpsBearerContextAccept, NasEpsMessage, NasEsmCause, NasLinkedEpsBearerIdentity,
    NasPdnConnectivityRequest, NasPdnDisconnectRequest, NasPdnType, NasRequestType, PdnType, RequestTypeValue,
};

use super::attach::StartError;
use super::{EmmState, Procedure, Ue, Waiting, ATTACH_PTI};

/// A PDN connection made after attach: its default bearer and APN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdnConnection {
    pub ebi: u8,
    pub apn: String,
    pub ipv4: Option<Ipv4Addr>,
}

/// The ESM procedure a running PDN procedure waits on: its PTI (TS 24.007
/// 11.2.3.1a), and the APN asked for or the EBI given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum EsmPending {
    Connect { pti: u8, apn: String },
    Disconnect { pti: u8, ebi: u8 },
}

impl Ue {
    /// The PDN connections made after attach.
    pub fn pdn_connections(&self) -> &[PdnConnection] {
        &self.pdns
    }

    /// A PTI for a new ESM procedure: 2..=254 in turn (1 is the attach's).
    fn next_pti(&mut self) -> u8 {
        self.pti = if self.pti >= 254 || self.pti <= ATTACH_PTI { ATTACH_PTI + 1 } else { self.pti + 1 };
        self.pti
    }

    fn start_esm(&mut self, now: Instant, procedure: Procedure) -> Result<(), StartError> {
        if let Some(r) = &self.running {
            return Err(StartError::Busy(r.procedure));
        }
        if self.emm != EmmState::Registered || !self.secured_connection {
            // Sent on a secured connection: from idle a service request comes first.
            return Err(StartError::WrongState(self.emm));
        }
        self.begin(now, procedure, Waiting::EsmAnswer);
        Ok(())
    }

    /// UE-requested PDN connectivity to `apn` (6.5.1.2), IPv4.
    pub fn start_pdn_connectivity(&mut self, now: Instant, apn: &str) -> Result<(), StartError> {
        let name = NasAccessPointName::from_string(apn).map_err(|_| StartError::BadApn(apn.to_string()))?;
        self.start_esm(now, Procedure::PdnConnectivity)?;
        let pti = self.next_pti();
        self.esm = Some(EsmPending::Connect { pti, apn: apn.to_string() });
        let req = NasPdnConnectivityRequest::new(
            NasRequestType::from_request_type(RequestTypeValue::Initial),
            NasPdnType::from_pdn_type(PdnType::Ipv4),
        )
        .with_access_point_name(name);
        self.send(now, &NasEpsMessage::new_esm(req, 0, pti), false);
        Ok(())
    }

    /// UE-requested PDN disconnect of the connection whose default bearer
    /// is `ebi` (6.5.2.2).
    pub fn start_pdn_disconnect(&mut self, now: Instant, ebi: u8) -> Result<(), StartError> {
        let linked = NasLinkedEpsBearerIdentity::from_bearer_identity(ebi).map_err(|_| StartError::BadEbi(ebi))?;
        self.start_esm(now, Procedure::PdnDisconnect)?;
        let pti = self.next_pti();
        self.esm = Some(EsmPending::Disconnect { pti, ebi });
        self.send(now, &NasEpsMessage::new_esm(NasPdnDisconnectRequest::new(linked), 0, pti), false);
        Ok(())
    }

    /// ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST outside attach (6.4.1.3).
    pub(super) fn handle_activate_default(
        &mut self,
        now: Instant,
        pti: u8,
        ebi: u8,
        act: &NasActivateDefaultEpsBearerContextRequest,
    ) {
        let Some(EsmPending::Connect { pti: asked, apn }) = self.esm.clone() else {
            return self.problem(now, "ACTIVATE DEFAULT EPS BEARER CONTEXT REQUEST with no PDN asked for".into());
        };
        if pti != asked || !(5..=15).contains(&ebi) {
            return self.problem(now, format!("default bearer EBI {ebi} for PTI {pti} (asked with PTI {asked})"));
        }
        self.esm = None;
        let ipv4 = act.pdn_address.ipv4().map(Ipv4Addr::from);
        self.pdns.retain(|p| p.ebi != ebi);
        self.pdns.push(PdnConnection { ebi, apn, ipv4 });
        let accept = NasEpsMessage::new_esm(NasActivateDefaultEpsBearerContextAccept::new(), ebi, 0);
        self.send(now, &accept, false);
        if self.waiting() == Some((Procedure::PdnConnectivity, Waiting::EsmAnswer)) {
            self.finish(now, Ok(()));
        }
    }

    /// DEACTIVATE EPS BEARER CONTEXT REQUEST (6.4.4.3): the bearer goes,
    /// and with a default bearer its PDN connection.
    pub(super) fn handle_deactivate(&mut self, now: Instant, ebi: u8) {
        self.pdns.retain(|p| p.ebi != ebi);
        let accept = NasEpsMessage::new_esm(NasDeactivateEpsBearerContextAccept::new(), ebi, 0);
        self.send(now, &accept, false);
        if matches!(self.esm, Some(EsmPending::Disconnect { ebi: e, .. }) if e == ebi) {
            self.esm = None;
            self.finish(now, Ok(()));
        }
    }

    /// PDN CONNECTIVITY REJECT or PDN DISCONNECT REJECT for PTI `pti`.
    pub(super) fn handle_esm_reject(&mut self, now: Instant, pti: u8, what: &str, cause: &NasEsmCause) {
        let asked = match &self.esm {
            Some(EsmPending::Connect { pti, .. } | EsmPending::Disconnect { pti, .. }) => *pti,
            None => return self.anomaly(format!("{what} with no ESM procedure running")),
        };
        if asked != pti {
            return self.anomaly(format!("{what} for PTI {pti} (running PTI {asked})"));
        }
        self.esm = None;
        self.fail(now, format!("{what} #{}", cause.cause_raw()));
    }
}
