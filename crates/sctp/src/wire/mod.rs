//! SCTP wire format (RFC 9260 3): zero-copy views over bytes with checked
//! accessors, and plain `Repr`s that parse from and emit into them.
//!
//! - [`packet`]: the common header and the CRC32c checksum (RFC 9260 3.1, Appendix A).
//! - [`chunk`]: the chunk header and every chunk type we speak (RFC 9260 3.3).
//! - [`tlv`]: the type-length-value lists inside chunks: INIT parameters and
//!   error causes (RFC 9260 3.2.1, 3.3.10).

pub mod chunk;
pub mod packet;
pub mod tlv;

pub use chunk::{Chunk, ChunkRepr, ChunkType, DataRepr, InitRepr, SackRepr};
pub use packet::{CommonHeader, Packet};
pub use tlv::{Tlv, Tlvs};

/// Why bytes could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("buffer too short")]
    Truncated,
    #[error("length field inconsistent with the buffer")]
    BadLength,
    #[error("checksum mismatch")]
    BadChecksum,
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// Round a length up to the next multiple of 4 (RFC 9260 3.2: chunks and
/// parameters are padded to 4 bytes).
pub const fn pad4(len: usize) -> usize {
    (len + 3) & !3
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
