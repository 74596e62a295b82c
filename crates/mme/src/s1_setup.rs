//! S1 Setup (TS 36.413 8.7.3): the eNB makes itself known; the MME answers
//! with its served GUMMEIs, or fails it when no broadcast PLMN is ours or
//! its Global eNB ID is already set up on another association.

use crate::context::GlobalEnbId;
use crate::mme::Mme;
use crate::s1ap_build;
use crate::s1ap_handler::{plmn_of, S1Result};
use mobicore_common::sctp_api::AssocId;
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::s1ap::*;

impl Mme {
    /// S1 SETUP REQUEST; `cd` reports IEs ignored with notification
    /// (TS 36.413 10.3.4.2) in the response.
    pub(crate) fn on_s1_setup_request(
        &mut self,
        assoc: AssocId,
        pdu: &S1APPDU<'_>,
        cd: Option<CriticalityDiagnostics>,
    ) -> S1Result {
        extract_s1ap_ies!(pdu, S1SetupRequest,
            req enb: GlobalENBID = Global_ENB_ID(g) => g,
            lax name: String = eNBname(n) => n.0.into_owned(),
            req areas: SupportedTAs = SupportedTAs(a) => a,
            lax drx: PagingDRX = DefaultPagingDRX(d) => d,
        );
        if !serves(&areas, self.cfg.plmn) {
            // TS 36.413 8.7.3.3: S1 SETUP FAILURE, cause unknown PLMN.
            self.counters.incr("s1_setup_failure");
            let fail = s1ap_build::s1_setup_failure(Cause::misc(CauseMisc::unknown_PLMN));
            self.push_s1(assoc, 0, fail);
            return Ok(());
        }
        let global = global_enb_id(&enb);
        let taken =
            global.is_some() && self.enbs.values().any(|e| e.assoc != assoc && e.setup && e.global_enb_id == global);
        if taken {
            // 8.7.3.3: the MME cannot accept the setup. The eNB already set
            // up keeps its ID and its UEs; the newcomer is refused, always.
            self.counters.incr("s1_setup_duplicate_global_enb_id");
            let fail = s1ap_build::s1_setup_failure(Cause::misc(CauseMisc::unspecified));
            self.push_s1(assoc, 0, fail);
            return Ok(());
        }
        // 8.7.3.2: a new S1 Setup erases what the eNB had.
        self.drop_enb_ues(assoc);
        let tacs = areas.0.iter().map(|ta| u16::from_be_bytes(ta.tac.0)).collect();
        if let Some(enb) = self.enbs.get_mut(&assoc) {
            enb.setup = true;
            enb.global_enb_id = global;
            enb.name = name;
            enb.tacs = tacs;
            enb.default_paging_drx = drx.and_then(paging_drx_frames);
        }
        let resp = s1ap_build::s1_setup_response_with(&self.cfg, cd);
        self.push_s1(assoc, 0, resp);
        Ok(())
    }
}

/// The Global eNB ID as a key: the eNB ID's length tells its kind.
/// `None` for a kind of a later release that the decoder may add.
fn global_enb_id(g: &GlobalENBID) -> Option<GlobalEnbId> {
    let bits = match &g.enb_id {
        ENBID::macroENB_ID(b) | ENBID::homeENB_ID(b) | ENBID::short_macroENB_ID(b) | ENBID::long_macroENB_ID(b) => b,
        _ => return None,
    };
    Some(GlobalEnbId { plmn: plmn_of(&g.plmn_identity), bits: bits.len() as u8, value: bits.value() as u32 })
}

/// Whether a broadcast PLMN of one of the supported TAs is `plmn`.
pub(crate) fn serves(areas: &SupportedTAs, plmn: mobicore_common::Plmn) -> bool {
    areas.0.iter().any(|ta| ta.broadcast_plmns.0.iter().any(|p| plmn_of(p) == Some(plmn)))
}

/// The paging DRX cycle in radio frames (TS 36.413 9.2.1.16); `None` for a
/// value of a later release.
pub(crate) fn paging_drx_frames(d: PagingDRX) -> Option<u16> {
    match d {
        PagingDRX::v32 => Some(32),
        PagingDRX::v64 => Some(64),
        PagingDRX::v128 => Some(128),
        PagingDRX::v256 => Some(256),
        _ => None,
    }
}
