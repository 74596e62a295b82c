//! Service request (TS 24.301 5.6.1), UE-triggered or as the answer to a
//! paging (5.6.2.2.1), and SERVICE REJECT (5.6.1.5).

use std::time::Instant;

use oxirush_nas::nas_eps::{NasEpsMessage, NasServiceReject};

use super::attach::StartError;
use super::{EmmState, Procedure, Ue, UeAction, Waiting};

impl Ue {
    /// Start a service request from EMM-IDLE: the SERVICE REQUEST (security
    /// header type 12: KSI, the 5 low bits of the uplink NAS COUNT and the
    /// short MAC, TS 24.301 9.8), as the initial NAS message of a new
    /// connection. `paged` marks the answer to a paging
    /// ([`Procedure::PagingResponse`], measured from `started`, the paging),
    /// else [`Procedure::ServiceRequest`] (uplink data). The procedure ends
    /// when the eNB has set up the bearers ([`Ue::context_setup`]).
    ///
    /// KeNB is derived from KASME and the uplink NAS COUNT of this SERVICE
    /// REQUEST (TS 33.401 7.2.6.2, A.3); the eNB checks the MME's against it.
    pub fn start_service_request(&mut self, started: Instant, paged: bool) -> Result<(), StartError> {
        if let Some(r) = &self.running {
            return Err(StartError::Busy(r.procedure));
        }
        if self.emm != EmmState::Registered {
            return Err(StartError::WrongState(self.emm));
        }
        if self.idle.connected {
            return Err(StartError::Connected);
        }
        let Some(sec) = self.security.as_mut() else {
            return Err(StartError::NoSecurityContext);
        };
        let procedure = if paged { Procedure::PagingResponse } else { Procedure::ServiceRequest };
        let count = sec.next_uplink_count();
        let built = sec.ctx.protect_service_request(sec.ksi).and_then(|sr| NasEpsMessage::ServiceRequest(sr).encode());
        let kenb = count.map(|c| sec.kenb(c));
        self.begin(started, procedure, Waiting::Bearers);
        match built {
            Ok(pdu) => {
                self.kenb = kenb;
                self.actions.push_back(UeAction::Uplink(pdu));
            }
            Err(e) => self.finish(started, Err(format!("cannot build SERVICE REQUEST: {e}"))),
        }
        Ok(())
    }

    /// SERVICE REJECT (TS 24.301 5.6.1.5). The procedure fails with the
    /// cause; the UE does what the cause asks.
    pub(super) fn handle_service_reject(&mut self, now: Instant, reject: &NasServiceReject) {
        if !matches!(self.procedure(), Some(Procedure::ServiceRequest | Procedure::PagingResponse)) {
            return self.anomaly("SERVICE REJECT outside a service request".into());
        }
        let cause = reject.emm_cause.cause_raw();
        self.on_reject_cause(cause);
        self.finish(now, Err(format!("service reject #{cause} ({})", reject.emm_cause.description())));
    }
}
