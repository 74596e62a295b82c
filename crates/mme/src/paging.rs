//! Network-triggered service request, the MME's part (TS 23.401 5.3.4.3):
//! Downlink Data Notification from the S-GW, S1AP Paging (TS 36.413 8.5)
//! to the eNBs of the UE's TAI list, T3413 (TS 24.301 5.6.2), DDN Failure
//! Indication when paging fails.

use crate::mme::Mme;
use mobicore_common::s11::S11IncomingRequest;

impl Mme {
    pub(crate) fn on_s11_incoming(&mut self, _txn: u64, _request: S11IncomingRequest) {
        self.counters.incr("s11_incoming_unhandled");
    }

    pub(crate) fn on_t3413_expiry(&mut self, _id: u32, _count: u8) {}
}
