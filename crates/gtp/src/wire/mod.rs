//! GTPv2-C wire format (TS 29.274): zero-copy views and plain `Repr`s.
//!
//! - [`header`]: the message header (version, P/T flags, type, length, TEID,
//!   24-bit sequence number).
//! - [`ie`]: the TLV view and the `Repr` of each IE the S11 messages use.

pub mod header;
pub mod ie;

pub use header::{HeaderRepr, Packet};

/// Why octets could not be read as GTPv2-C.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("truncated")]
    Truncated,
    #[error("unsupported GTP version {0}")]
    Version(u8),
    #[error("length field disagrees with the datagram")]
    Length,
    /// An IE whose length field runs past the end of what holds it.
    #[error("IE {ie_type} instance {instance} runs past the message")]
    IeLength { ie_type: u8, instance: u8 },
    #[error("invalid {0}")]
    Value(&'static str),
}

pub type Result<T> = core::result::Result<T, Error>;
