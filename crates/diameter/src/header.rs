//! The Diameter header (RFC 6733 3): a wire view over the first 20 octets
//! and its plain [`HeaderRepr`].

use crate::error::WireError;

type Field = std::ops::Range<usize>;

mod field {
    use super::Field;
    pub const VERSION: usize = 0;
    pub const LENGTH: Field = 1..4;
    pub const FLAGS: usize = 4;
    pub const COMMAND_CODE: Field = 5..8;
    pub const APPLICATION_ID: Field = 8..12;
    pub const HOP_BY_HOP: Field = 12..16;
    pub const END_TO_END: Field = 16..20;
}

/// Length of the Diameter header.
pub const HEADER_LEN: usize = 20;
/// The only Diameter version (RFC 6733 3).
pub const VERSION: u8 = 1;

/// Command flags (RFC 6733 3).
pub mod flags {
    pub const REQUEST: u8 = 0x80;
    pub const PROXIABLE: u8 = 0x40;
    pub const ERROR: u8 = 0x20;
    pub const RETRANSMIT: u8 = 0x10;
    pub const RESERVED: u8 = 0x0f;
}

fn be24(b: &[u8]) -> u32 {
    (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A read/write view of a Diameter message buffer.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view whose accessors cannot panic: the buffer holds the header and
    /// the whole message its Message Length announces.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let len = self.message_length() as usize;
        if len < HEADER_LEN || !len.is_multiple_of(4) {
            return Err(WireError::MessageLength(len as u32));
        }
        if len > b.len() {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    pub fn message_length(&self) -> u32 {
        be24(&self.buffer.as_ref()[field::LENGTH])
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    pub fn command_code(&self) -> u32 {
        be24(&self.buffer.as_ref()[field::COMMAND_CODE])
    }
    pub fn application_id(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::APPLICATION_ID])
    }
    pub fn hop_by_hop(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::HOP_BY_HOP])
    }
    pub fn end_to_end(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::END_TO_END])
    }
    /// The AVPs: the octets after the header, up to Message Length.
    pub fn payload(&self) -> &[u8] {
        let len = (self.message_length() as usize).min(self.buffer.as_ref().len());
        &self.buffer.as_ref()[HEADER_LEN.min(len)..len]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }
    pub fn set_message_length(&mut self, v: u32) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    pub fn set_command_code(&mut self, v: u32) {
        self.buffer.as_mut()[field::COMMAND_CODE].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    pub fn set_application_id(&mut self, v: u32) {
        self.buffer.as_mut()[field::APPLICATION_ID].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_hop_by_hop(&mut self, v: u32) {
        self.buffer.as_mut()[field::HOP_BY_HOP].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_end_to_end(&mut self, v: u32) {
        self.buffer.as_mut()[field::END_TO_END].copy_from_slice(&v.to_be_bytes());
    }
}

/// The header as plain values; Message Length is computed at emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderRepr {
    pub request: bool,
    pub proxiable: bool,
    pub error: bool,
    pub retransmit: bool,
    /// 24 bits.
    pub command_code: u32,
    pub application_id: u32,
    pub hop_by_hop: u32,
    pub end_to_end: u32,
}

impl HeaderRepr {
    /// Reads the header fields; the length has been checked by the view.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, WireError> {
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if p.version() != VERSION {
            return Err(WireError::Version(p.version()));
        }
        let f = p.flags();
        Ok(HeaderRepr {
            request: f & flags::REQUEST != 0,
            proxiable: f & flags::PROXIABLE != 0,
            error: f & flags::ERROR != 0,
            retransmit: f & flags::RETRANSMIT != 0,
            command_code: p.command_code(),
            application_id: p.application_id(),
            hop_by_hop: p.hop_by_hop(),
            end_to_end: p.end_to_end(),
        })
    }

    pub fn flags(&self) -> u8 {
        let mut f = 0;
        for (set, bit) in [
            (self.request, flags::REQUEST),
            (self.proxiable, flags::PROXIABLE),
            (self.error, flags::ERROR),
            (self.retransmit, flags::RETRANSMIT),
        ] {
            if set {
                f |= bit;
            }
        }
        f
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header with the given Message Length.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>, message_length: u32) {
        p.set_version(VERSION);
        p.set_message_length(message_length);
        p.set_flags(self.flags());
        p.set_command_code(self.command_code & 0x00ff_ffff);
        p.set_application_id(self.application_id);
        p.set_hop_by_hop(self.hop_by_hop);
        p.set_end_to_end(self.end_to_end);
    }

    /// The header of the answer to this request (RFC 6733 6.2): same
    /// command, application and identifiers, R cleared, P copied.
    pub fn answer(&self) -> HeaderRepr {
        HeaderRepr { request: false, error: false, retransmit: false, ..*self }
    }
}
