//! HSS-initiated detach and location cancelling (TS 29.272 5.2.1.2, TS
//! 23.401 5.3.8.4): the HSS's Cancel-Location-Request names a UE by IMSI.
//!
//! - SUBSCRIPTION_WITHDRAWAL: network-initiated detach (the operator's
//!   detach procedure, [`crate::detach`]), re-attach required only when the
//!   CLR-Flags say so (TS 29.272 7.3.152 bit 1);
//! - MME_UPDATE_PROCEDURE (and the other cancellation types: the UE is
//!   served elsewhere now): the context is removed silently: Delete Session
//!   for its PDN connections, no NAS, the S1 connection released if any
//!   (TS 23.401 5.3.2.1 step 8, 5.3.3.1 step 8).
//!
//! The answer is DIAMETER_SUCCESS either way, and also for an IMSI the MME
//! does not know (TS 29.272 5.2.1.2.2).

use crate::mme::{Mme, MmeAction, OperatorCommand};
use mobicore_common::s6a::{CancelLocationRequest, CancellationType, S6aIncomingAnswer, S6aIncomingRequest};
use mobicore_common::Imsi;
use oxirush_s1ap::s1ap::CauseNas;

/// CLR-Flags bit 1: Reattach-Required (TS 29.272 7.3.152).
pub const CLR_FLAG_REATTACH_REQUIRED: u32 = 1 << 1;

impl Mme {
    /// Whether the MME has a context for this IMSI.
    pub fn has_imsi(&self, imsi: &Imsi) -> bool {
        self.by_imsi.get(imsi).is_some_and(|id| self.ues.contains_key(id))
    }

    /// A request of the HSS; the shell keeps its reply as `txn`.
    pub(crate) fn on_s6a_incoming(&mut self, txn: u64, request: S6aIncomingRequest) {
        let answer = match request {
            S6aIncomingRequest::CancelLocation(r) => self.on_cancel_location(r),
        };
        self.push(MmeAction::S6aAnswer { txn, answer });
    }

    /// Cancel-Location (TS 29.272 5.2.1.2.2).
    fn on_cancel_location(&mut self, r: CancelLocationRequest) -> S6aIncomingAnswer {
        let known = self.by_imsi.get(&r.imsi).copied().filter(|id| self.ues.contains_key(id));
        let Some(id) = known else {
            // "If it is not known, a result code of DIAMETER_SUCCESS is returned."
            self.counters.incr("s6a_cancel_location_unknown_imsi");
            return S6aIncomingAnswer::CancelLocation(Ok(()));
        };
        match r.cancellation_type {
            CancellationType::SubscriptionWithdrawal => {
                // TS 23.401 5.3.8.4: HSS-initiated detach.
                self.counters.incr("s6a_cancel_location_withdrawal");
                let reattach_required = r.flags & CLR_FLAG_REATTACH_REQUIRED != 0;
                let _ = self.on_operator(OperatorCommand::Detach { imsi: r.imsi, reattach_required });
            }
            CancellationType::MmeUpdateProcedure
            | CancellationType::InitialAttachProcedure
            | CancellationType::SgsnUpdateProcedure
            | CancellationType::UpdateProcedureIwf => {
                // TS 23.401 5.3.2.1 step 8, 5.3.3.1 step 8: another node serves
                // the UE; its bearers here go, without NAS.
                self.counters.incr("s6a_cancel_location_mme_update");
                self.abort_ue(id, CauseNas::normal_release);
            }
        }
        S6aIncomingAnswer::CancelLocation(Ok(()))
    }
}
