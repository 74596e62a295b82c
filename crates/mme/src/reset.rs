//! S1 Reset from an eNB (TS 36.413 8.7.1.2.1): the eNB lost some or all of
//! its UE-associated logical S1-connections. The MME releases what it holds
//! on S1 for the UEs the RESET names (or for all of that eNB's), as a lost
//! S1 connection is released (TS 23.401 5.3.5), and answers RESET
//! ACKNOWLEDGE. No UE of another eNB is touched: an id is only looked up
//! among the connections of the association the RESET came on.

use crate::mme::Mme;
use crate::s1ap_build::{self, S1ConnectionItem};
use crate::s1ap_handler::S1Result;
use mobicore_common::sctp_api::AssocId;
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::s1ap::*;

/// `id-UE-associatedLogicalS1-ConnectionItem` (TS 36.413 9.3.7).
const CONNECTION_ITEM: u16 = 91;

impl Mme {
    /// RESET; `cd` reports IEs ignored with notification (10.3.4.2).
    pub(crate) fn on_reset(
        &mut self,
        assoc: AssocId,
        pdu: &S1APPDU<'_>,
        cd: Option<CriticalityDiagnostics>,
    ) -> S1Result {
        extract_s1ap_ies!(pdu, Reset,
            req reset: ResetType = ResetType(r) => r.into_owned(),
        );
        if !self.enbs.get(&assoc).is_some_and(|e| e.setup) {
            // 8.7.3.1: S1 Setup comes first. RESET has no failure message:
            // ERROR INDICATION (10.4).
            self.counters.incr("s1ap_before_setup");
            let cause = Cause::protocol(CauseProtocol::message_not_compatible_with_receiver_state);
            let diag = pdu.criticality_diagnostics(&[]);
            self.push_s1(assoc, 0, s1ap_build::error_indication_with(None, None, cause, Some(diag)));
            return Ok(());
        }
        let items = match reset {
            ResetType::s1_Interface(_) => None,
            ResetType::partOfS1_Interface(list) => {
                let mut items = Vec::with_capacity(list.0.len());
                for field in list.0.iter().filter(|f| f.id.0 == CONNECTION_ITEM) {
                    let item: UEAssociatedLogicalS1ConnectionItem = decode_open_type(&field.value)?;
                    let mme_ue_id = item.mme_ue_s1ap_id.map(|v| v.0);
                    items.push(S1ConnectionItem { mme_ue_id, enb_ue_id: item.enb_ue_s1ap_id.map(|v| v.0) });
                }
                Some(items)
            }
            // A kind of reset of a later release: not comprehended (10.3.4.2).
            _ => {
                self.counters.incr("s1_reset_unknown_type");
                let cause = Cause::protocol(CauseProtocol::abstract_syntax_error_reject);
                let diag = pdu.criticality_diagnostics(&[]);
                self.push_s1(assoc, 0, s1ap_build::error_indication_with(None, None, cause, Some(diag)));
                return Ok(());
            }
        };
        let ids = match &items {
            None => {
                self.counters.incr("s1_reset_all");
                self.s1_ues_of(assoc)
            }
            Some(items) => {
                self.counters.incr("s1_reset_partial");
                let mut ids: Vec<u32> = items.iter().filter_map(|i| self.reset_target(assoc, i)).collect();
                ids.dedup();
                ids
            }
        };
        self.counters.add("s1_reset_ue", ids.len() as u64);
        self.lose_s1(assoc, &ids, "ue_aborted_reset");
        // 8.7.1.2.1: the items in the order received, unknown ones too;
        // 8.7.1.3.1: an item with neither id is ignored and may be left out.
        let echo: Option<Vec<S1ConnectionItem>> =
            items.map(|i| i.into_iter().filter(|i| i.mme_ue_id.is_some() || i.enb_ue_id.is_some()).collect());
        let ack = s1ap_build::reset_acknowledge(echo.as_deref(), cd);
        self.push_s1(assoc, 0, ack);
        Ok(())
    }

    /// The UE whose S1 connection on `assoc` an item of a RESET names: by
    /// its MME-UE-S1AP-ID (and its eNB-UE-S1AP-ID, when both are given and
    /// agree), else by its eNB-UE-S1AP-ID on this association.
    fn reset_target(&self, assoc: AssocId, item: &S1ConnectionItem) -> Option<u32> {
        let by_mme = item.mme_ue_id.filter(|m| {
            self.ues
                .get(m)
                .and_then(|u| u.s1)
                .is_some_and(|s| s.assoc == assoc && item.enb_ue_id.is_none_or(|e| e == s.enb_ue_s1ap_id))
        });
        by_mme.or_else(|| self.by_enb_ue.get(&(assoc, item.enb_ue_id?)).copied())
    }
}
