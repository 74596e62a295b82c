//! Typed errors of the Diameter layers.

use thiserror::Error;

/// A wire-level decoding failure (RFC 6733 3 and 4.1). Each maps onto the
/// Result-Code that RFC 6733 7.1 gives for it ([`WireError::result_code`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("buffer shorter than the Diameter header")]
    Truncated,
    #[error("unsupported Diameter version {0}")]
    Version(u8),
    #[error("invalid message length {0}")]
    MessageLength(u32),
    #[error("reserved command flag bits set")]
    HeaderBits,
    #[error("invalid length of AVP {code} at offset {offset}")]
    AvpLength { code: u32, offset: usize },
    #[error("invalid AVP data for AVP {0}")]
    AvpData(u32),
}

impl WireError {
    /// The Result-Code of RFC 6733 7.1 for this failure.
    pub fn result_code(&self) -> u32 {
        use crate::dict::result::*;
        match self {
            WireError::Truncated | WireError::MessageLength(_) => DIAMETER_INVALID_MESSAGE_LENGTH,
            WireError::Version(_) => DIAMETER_UNSUPPORTED_VERSION,
            WireError::HeaderBits => DIAMETER_INVALID_HDR_BITS,
            WireError::AvpLength { .. } => DIAMETER_INVALID_AVP_LENGTH,
            WireError::AvpData(_) => DIAMETER_INVALID_AVP_VALUE,
        }
    }
}

/// Errors of the S6a client task and the transport.
#[derive(Debug, Error)]
pub enum DiameterError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("capabilities exchange failed: {0}")]
    CapabilitiesExchange(String),
    #[error("connection closed by the peer")]
    Closed,
    #[error("timed out")]
    Timeout,
}
