//! TCP framing (RFC 6733 2.1): a byte stream cut into messages by their
//! Message Length, across partial reads and with several messages per read.

use crate::error::WireError;
use crate::header::{HeaderRepr, HEADER_LEN};
use bytes::{Buf, Bytes, BytesMut};

/// Largest message accepted by default (a peer announcing more is cut off).
pub const DEFAULT_MAX_MESSAGE_LEN: usize = 1 << 20;

/// The stream cannot be cut into messages any more: the Message Length is
/// below the header length or above the limit. The connection must close;
/// `header` is there when the 20 octets were, to answer first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Diameter stream out of sync: {error}")]
pub struct FramingError {
    pub error: WireError,
    pub header: Option<HeaderRepr>,
}

/// Accumulates octets read from a stream and yields whole messages.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_len: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_MESSAGE_LEN)
    }
}

impl FrameDecoder {
    pub fn new(max_len: usize) -> Self {
        FrameDecoder { buf: BytesMut::with_capacity(64 * 1024), max_len }
    }

    /// The buffer to read into (e.g. `AsyncReadExt::read_buf`).
    pub fn read_buf(&mut self) -> &mut BytesMut {
        if self.buf.capacity() - self.buf.len() < 16 * 1024 {
            self.buf.reserve(64 * 1024);
        }
        &mut self.buf
    }

    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Octets held that do not make a whole message yet.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next whole message, `None` until one has arrived. A message with
    /// a bad version or a length that is not a multiple of four is still
    /// cut out (its parse fails and gets its answer); a length that cannot
    /// be trusted is a [`FramingError`].
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FramingError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = ((self.buf[1] as usize) << 16) | ((self.buf[2] as usize) << 8) | self.buf[3] as usize;
        if len < HEADER_LEN || len > self.max_len {
            let header = if self.buf.len() >= HEADER_LEN {
                let p = crate::header::Packet::new_unchecked(&self.buf[..HEADER_LEN]);
                Some(HeaderRepr {
                    request: p.flags() & crate::header::flags::REQUEST != 0,
                    proxiable: p.flags() & crate::header::flags::PROXIABLE != 0,
                    error: false,
                    retransmit: false,
                    command_code: p.command_code(),
                    application_id: p.application_id(),
                    hop_by_hop: p.hop_by_hop(),
                    end_to_end: p.end_to_end(),
                })
            } else {
                None
            };
            return Err(FramingError { error: WireError::MessageLength(len as u32), header });
        }
        if self.buf.len() < len {
            return Ok(None);
        }
        let frame = self.buf.split_to(len).freeze();
        if self.buf.is_empty() {
            // Keep the allocation; nothing to move.
            self.buf.advance(0);
        }
        Ok(Some(frame))
    }
}
