//! GTPv2-C message header (TS 29.274 5.1, 5.5).

use super::{Error, Result};

/// Wire view over a GTPv2-C message header and body.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const FLAGS: usize = 0;
    pub const MSG_TYPE: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const TEID: Field = 4..8;
}

/// Flags octet: version in bits 8-6, P bit 5, T bit 4 (TS 29.274 5.1).
const FLAG_P: u8 = 0x10;
const FLAG_T: u8 = 0x08;
pub const VERSION: u8 = 2;

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Checks the version and that the length field fits the buffer.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < 8 {
            return Err(Error::Truncated);
        }
        if self.version() != VERSION {
            return Err(Error::Version(self.version()));
        }
        if b.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        let total = 4 + self.length() as usize;
        if total < self.header_len() || total > b.len() {
            return Err(Error::Length);
        }
        Ok(())
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] >> 5
    }
    pub fn piggybacked(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_P != 0
    }
    pub fn has_teid(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_T != 0
    }
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::MSG_TYPE]
    }
    /// Octets after the first four (TS 29.274 5.5.1).
    pub fn length(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn teid(&self) -> Option<u32> {
        self.has_teid().then(|| {
            let b = &self.buffer.as_ref()[field::TEID];
            u32::from_be_bytes([b[0], b[1], b[2], b[3]])
        })
    }
    fn seq_offset(&self) -> usize {
        if self.has_teid() {
            8
        } else {
            4
        }
    }
    pub fn header_len(&self) -> usize {
        self.seq_offset() + 4
    }
    pub fn seq(&self) -> u32 {
        let o = self.seq_offset();
        let b = self.buffer.as_ref();
        u32::from_be_bytes([0, b[o], b[o + 1], b[o + 2]])
    }
    /// The IEs of this message (up to the length field, not a piggybacked one).
    pub fn payload(&self) -> &[u8] {
        let end = 4 + self.length() as usize;
        &self.buffer.as_ref()[self.header_len()..end]
    }
    /// Total octets of this message, without any piggybacked message.
    pub fn total_len(&self) -> usize {
        4 + self.length() as usize
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_flags(&mut self, teid: bool) {
        self.buffer.as_mut()[field::FLAGS] = (VERSION << 5) | if teid { FLAG_T } else { 0 };
    }
    fn set_msg_type(&mut self, t: u8) {
        self.buffer.as_mut()[field::MSG_TYPE] = t;
    }
    fn set_length(&mut self, l: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&l.to_be_bytes());
    }
    pub fn set_teid(&mut self, teid: u32) {
        self.buffer.as_mut()[field::TEID].copy_from_slice(&teid.to_be_bytes());
    }
    pub fn set_seq(&mut self, seq: u32) {
        let o = self.seq_offset();
        let s = seq.to_be_bytes();
        let b = self.buffer.as_mut();
        b[o..o + 3].copy_from_slice(&s[1..4]);
        b[o + 3] = 0;
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buffer.as_mut()[h..]
    }
}

/// The header as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRepr {
    pub msg_type: u8,
    /// Present when the T flag is set (all S11 messages but Echo).
    pub teid: Option<u32>,
    /// 24-bit sequence number.
    pub seq: u32,
}

impl HeaderRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        if p.piggybacked() {
            // Piggybacking is only for Create Bearer/Session responses on S5/S8;
            // we read the first message and ignore the rest (TS 29.274 5.5.1).
        }
        Ok(HeaderRepr { msg_type: p.msg_type(), teid: p.teid(), seq: p.seq() })
    }
    pub fn header_len(&self) -> usize {
        if self.teid.is_some() {
            12
        } else {
            8
        }
    }
    /// Writes the header for a message whose IEs take `payload_len` octets.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>, payload_len: usize) {
        p.set_flags(self.teid.is_some());
        p.set_msg_type(self.msg_type);
        p.set_length((self.header_len() - 4 + payload_len) as u16);
        if let Some(t) = self.teid {
            p.set_teid(t);
        }
        p.set_seq(self.seq & 0x00ff_ffff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_header_bytes() {
        let h = HeaderRepr { msg_type: 1, teid: None, seq: 0x0a0b0c };
        let mut buf = vec![0u8; 8];
        h.emit(&mut Packet::new_unchecked(&mut buf[..]), 0);
        assert_eq!(buf, [0x40, 1, 0, 4, 0x0a, 0x0b, 0x0c, 0]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(HeaderRepr::parse(&p).unwrap(), h);
    }

    #[test]
    fn teid_header_bytes() {
        let h = HeaderRepr { msg_type: 32, teid: Some(0x01020304), seq: 7 };
        let mut buf = vec![0u8; 12];
        h.emit(&mut Packet::new_unchecked(&mut buf[..]), 0);
        assert_eq!(buf, [0x48, 32, 0, 8, 1, 2, 3, 4, 0, 0, 7, 0]);
        assert_eq!(HeaderRepr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), h);
    }

    #[test]
    fn rejects_bad_version_and_length() {
        assert_eq!(Packet::new_checked(&[0x20u8, 1, 0, 4, 0, 0, 0, 0][..]).unwrap_err(), Error::Version(1));
        assert_eq!(Packet::new_checked(&[0x40u8, 1, 0, 9, 0, 0, 0, 0][..]).unwrap_err(), Error::Length);
        assert_eq!(Packet::new_checked(&[0x48u8, 1, 0, 4, 0, 0, 0, 0][..]).unwrap_err(), Error::Truncated);
    }
}
