//! S6a (TS 29.272) over Diameter: mapping between the typed procedures of
//! `mobicore_common::s6a` and Diameter messages.
//!
//! - [`request`]: ULR, AIR, PUR (7.2.3, 7.2.5, 7.2.13), both directions.
//! - [`answer`]: ULA, AIA, PUA (7.2.4, 7.2.6, 7.2.14), both directions.
//! - [`cancel`]: CLR and CLA (7.2.7, 7.2.8), the HSS's request to the MME.

pub mod answer;
pub mod cancel;
pub mod request;

pub use answer::{decode_answer, encode_answer};
pub use cancel::{
    decode_cancel_location_answer, decode_incoming_request, encode_cancel_location, encode_incoming_answer,
};
pub use request::{decode_request, encode_request, RequestContext, RequestError};

use crate::avp::AvpRepr;
use crate::error::WireError;

/// Auth-Session-State NO_STATE_MAINTAINED (RFC 6733 8.11), as S6a uses.
pub const NO_STATE_MAINTAINED: u32 = 1;
/// RAT-Type EUTRAN (TS 29.212 5.3.31).
pub const RAT_TYPE_EUTRAN: u32 = 1004;
/// ULA-Flags bit 0: Separation Indication (TS 29.272 7.3.8).
pub const ULA_FLAG_SEPARATION_INDICATION: u32 = 1;
/// Network-Access-Mode ONLY_PACKET (TS 29.272 7.3.21).
pub const NETWORK_ACCESS_MODE_ONLY_PACKET: u32 = 2;
/// Subscriber-Status SERVICE_GRANTED (TS 29.272 7.3.29).
pub const SUBSCRIBER_STATUS_SERVICE_GRANTED: u32 = 0;

fn u32_of(avps: &[AvpRepr], def: crate::dict::AvpDef) -> Result<Option<u32>, WireError> {
    crate::message::find(avps, def).map(|a| a.as_u32()).transpose()
}

fn fixed<const N: usize>(a: &AvpRepr) -> Result<[u8; N], WireError> {
    a.data.as_slice().try_into().map_err(|_| WireError::AvpData(a.code))
}
