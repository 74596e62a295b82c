//! S1-based handover, intra-MME, no S-GW change (TS 23.401 5.5.1.2.2,
//! TS 36.413 8.4): Handover Required, Handover Request / Acknowledge,
//! Handover Command, eNB / MME Status Transfer, Handover Notify, Handover
//! Preparation Failure and Handover Cancel, with direct or indirect data
//! forwarding.

use crate::mme::Mme;

impl Mme {
    pub(crate) fn on_reloc_prep_expiry(&mut self, _id: u32) {}

    pub(crate) fn on_reloc_overall_expiry(&mut self, _id: u32) {}
}
