//! S1 Setup (TS 36.413 8.7.3): the eNB makes itself known; the MME answers
//! with its served GUMMEIs, or fails it when no broadcast PLMN is ours.

use crate::mme::Mme;
use crate::s1ap_build;
use crate::s1ap_handler::{plmn_of, S1Result};
use mobicore_common::sctp_api::AssocId;
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::s1ap::*;

impl Mme {
    pub(crate) fn on_s1_setup_request(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, S1SetupRequest,
            req _enb: GlobalENBID = Global_ENB_ID(g) => g,
            opt name: String = eNBname(n) => n.0.into_owned(),
            req areas: SupportedTAs = SupportedTAs(a) => a,
        );
        let ours = self.cfg.plmn;
        let serves_ours = areas
            .0
            .iter()
            .any(|ta| ta.broadcast_plmns.0.iter().any(|p| plmn_of(p) == Some(ours)));
        if !serves_ours {
            // TS 36.413 8.7.3.3: S1 SETUP FAILURE, cause unknown PLMN.
            self.counters.incr("s1_setup_failure");
            let fail = s1ap_build::s1_setup_failure(Cause::misc(CauseMisc::unknown_PLMN));
            self.push_s1(assoc, 0, fail);
            return Ok(());
        }
        // 8.7.3.2: a new S1 Setup erases what the eNB had.
        self.drop_enb_ues(assoc);
        let tacs = areas.0.iter().map(|ta| u16::from_be_bytes(ta.tac.0)).collect();
        if let Some(enb) = self.enbs.get_mut(&assoc) {
            enb.setup = true;
            enb.name = name;
            enb.tacs = tacs;
        }
        let resp = s1ap_build::s1_setup_response(&self.cfg);
        self.push_s1(assoc, 0, resp);
        Ok(())
    }
}
