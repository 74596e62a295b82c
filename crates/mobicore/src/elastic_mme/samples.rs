//! S1AP messages for the elastic MME's unit tests.

use bytes::Bytes;
use oxirush_s1ap::build_s1ap;
use oxirush_s1ap::s1ap::*;

/// A UE CONTEXT RELEASE REQUEST of the UE with MME-UE-S1AP-ID `id`: a
/// message of an S1 connection under way.
pub fn release_request(id: u32) -> Bytes {
    let pdu = build_s1ap!(
        InitiatingMessage,
        UEContextReleaseRequest,
        UEContextReleaseRequest,
        MME_UE_S1AP_ID(id),
        eNB_UE_S1AP_ID(id & 0xff),
        Cause(Cause::radioNetwork(CauseRadioNetwork::user_inactivity)),
    );
    Bytes::from(pdu.unwrap().encode().unwrap().to_vec())
}
