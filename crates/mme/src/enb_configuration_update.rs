//! eNB Configuration Update (TS 36.413 8.7.4): the eNB tells the MME of a
//! configuration it has taken into use (its name, its supported TAs, its
//! default paging DRX). The MME keeps it in the eNB context and answers ENB
//! CONFIGURATION UPDATE ACKNOWLEDGE, or ENB CONFIGURATION UPDATE FAILURE,
//! keeping the configuration it had, when the update would leave the eNB
//! serving no PLMN of ours (as S1 Setup fails, 8.7.3.3).

use crate::mme::Mme;
use crate::s1_setup::{paging_drx_frames, serves};
use crate::s1ap_build;
use crate::s1ap_handler::S1Result;
use mobicore_common::sctp_api::AssocId;
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::s1ap::*;

impl Mme {
    /// ENB CONFIGURATION UPDATE; `cd` reports IEs ignored with
    /// notification (10.3.4.2) in the acknowledge.
    pub(crate) fn on_enb_configuration_update(
        &mut self,
        assoc: AssocId,
        pdu: &S1APPDU<'_>,
        cd: Option<CriticalityDiagnostics>,
    ) -> S1Result {
        extract_s1ap_ies!(pdu, ENBConfigurationUpdate,
            lax name: String = eNBname(n) => n.0.into_owned(),
            opt areas: SupportedTAs = SupportedTAs(a) => a,
            lax drx: PagingDRX = DefaultPagingDRX(d) => d,
        );
        if !self.enbs.get(&assoc).is_some_and(|e| e.setup) {
            // 8.7.3.1: S1 Setup comes first (10.4, class 1 with a failure message).
            self.counters.incr("enb_configuration_update_failure");
            let cause = Cause::protocol(CauseProtocol::message_not_compatible_with_receiver_state);
            self.push_s1(assoc, 0, s1ap_build::enb_configuration_update_failure(cause, cd));
            return Ok(());
        }
        if areas.as_ref().is_some_and(|a| !serves(a, self.cfg.plmn)) {
            self.counters.incr("enb_configuration_update_failure");
            let cause = Cause::misc(CauseMisc::unknown_PLMN);
            self.push_s1(assoc, 0, s1ap_build::enb_configuration_update_failure(cause, cd));
            return Ok(());
        }
        let Some(enb) = self.enbs.get_mut(&assoc) else { return Ok(()) };
        // 8.7.4.2: what the message leaves out is unchanged; the Supported
        // TAs replace the whole list.
        if let Some(name) = name {
            enb.name = Some(name);
        }
        if let Some(areas) = areas {
            enb.tacs = areas.0.iter().map(|ta| u16::from_be_bytes(ta.tac.0)).collect();
        }
        if let Some(frames) = drx.and_then(paging_drx_frames) {
            enb.default_paging_drx = Some(frames);
        }
        self.counters.incr("enb_configuration_update");
        self.push_s1(assoc, 0, s1ap_build::enb_configuration_update_acknowledge(cd));
        Ok(())
    }
}
