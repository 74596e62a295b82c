//! TCP framing (RFC 6733 2.1): a byte stream cut into messages by their
//! Message Length, across partial reads and with several messages per read.

use crate::error::WireError;
use crate::header::{HeaderRepr, HEADER_LEN};
use bytes::buf::Limit;
use bytes::{Buf, BufMut, Bytes, BytesMut};

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
///
/// Read through [`read_buf`](Self::read_buf), it never holds more than
/// `max_len` octets: whole messages are taken out by
/// [`next_frame`](Self::next_frame) between reads, what is left is part of
/// one message no longer than `max_len`, and a read takes at most
/// [`room`](Self::room) octets.
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
    /// A decoder that takes messages of at most `max_len` octets (never
    /// less than a header).
    pub fn new(max_len: usize) -> Self {
        let max_len = max_len.max(HEADER_LEN);
        FrameDecoder { buf: BytesMut::with_capacity(max_len.min(16 * 1024)), max_len }
    }

    /// The largest message taken.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// How many more octets may be read before the buffer holds `max_len`.
    pub fn room(&self) -> usize {
        self.max_len.saturating_sub(self.buf.len())
    }

    /// The buffer to read into (e.g. `AsyncReadExt::read_buf`), limited to
    /// [`room`](Self::room) octets. When the room is zero a read returns 0:
    /// take the frames out first.
    pub fn read_buf(&mut self) -> Limit<&mut BytesMut> {
        let room = self.room();
        let want = room.min(64 * 1024);
        if self.buf.capacity() - self.buf.len() < want.min(16 * 1024) {
            self.buf.reserve(want);
        }
        (&mut self.buf).limit(room)
    }

    /// Appends octets without a bound (for callers that bound their input
    /// themselves, e.g. with [`room`](Self::room)).
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
