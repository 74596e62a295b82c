//! UE Capability Info Indication (TS 36.413 8.9): the eNB gives the MME the
//! UE Radio Capability it retrieved from the UE. The MME keeps the octets in
//! the UE context (dropped with it) and gives them back in a later INITIAL
//! CONTEXT SETUP REQUEST (9.1.4.1), so the eNB need not ask the UE again
//! (TS 23.401 5.11.2).

use crate::mme::Mme;
use crate::s1ap_build::{self, InitialContextSetup};
use crate::s1ap_handler::S1Result;
use bytes::Bytes;
use mobicore_common::sctp_api::AssocId;
use oxirush_s1ap::extract_s1ap_ies;
use oxirush_s1ap::s1ap::*;

impl Mme {
    /// UE CAPABILITY INFO INDICATION (TS 36.413 8.9.2).
    pub(crate) fn on_ue_capability_info(&mut self, assoc: AssocId, pdu: &S1APPDU<'_>) -> S1Result {
        extract_s1ap_ies!(pdu, UECapabilityInfoIndication,
            req mme_id: u32 = MME_UE_S1AP_ID(id),
            req enb_id: u32 = eNB_UE_S1AP_ID(id),
            // Mandatory, of criticality ignore (10.3.4.2, 10.3.5).
            lax capability: Vec<u8> = UERadioCapability(c) => c.0.to_vec(),
        );
        let Some(id) = self.known_ue(assoc, mme_id, enb_id) else { return Ok(()) };
        let Some(capability) = capability else {
            self.counters.incr("ue_capability_info_without_capability");
            return Ok(());
        };
        if let Some(ue) = self.ues.get_mut(&id) {
            // 8.9.2: the new capability replaces what the MME had.
            ue.ue_radio_capability = Some(Bytes::from(capability));
            self.counters.incr("ue_capability_info_stored");
        }
        Ok(())
    }

    /// The INITIAL CONTEXT SETUP REQUEST for UE `id`, with the UE Radio
    /// Capability it holds. TS 23.401 5.11.2: an attach deletes what the MME
    /// stored, and its INITIAL CONTEXT SETUP REQUEST carries none.
    pub(crate) fn initial_context_setup_request(&mut self, id: u32, ics: InitialContextSetup<'_>) -> Option<Vec<u8>> {
        let ue = self.ues.get_mut(&id)?;
        if ue.attach.is_some() {
            ue.ue_radio_capability = None;
        }
        s1ap_build::initial_context_setup_request_with(ics, ue.ue_radio_capability.as_deref())
    }
}
