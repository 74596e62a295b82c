//! AVPs (RFC 6733 4.1): a wire view over one AVP and the owned [`AvpRepr`].

use crate::error::WireError;

mod field {
    pub const CODE: std::ops::Range<usize> = 0..4;
    pub const FLAGS: usize = 4;
    pub const LENGTH: std::ops::Range<usize> = 5..8;
    pub const VENDOR_ID: std::ops::Range<usize> = 8..12;
}

/// AVP flags (RFC 6733 4.1).
pub mod flags {
    pub const VENDOR: u8 = 0x80;
    pub const MANDATORY: u8 = 0x40;
    pub const PROTECTED: u8 = 0x20;
    pub const RESERVED: u8 = 0x1f;
}

/// Header length without and with the Vendor-ID field.
pub const HEADER_LEN: usize = 8;
pub const HEADER_LEN_VENDOR: usize = 12;

/// Rounds up to the next multiple of four (RFC 6733 4: AVPs are padded).
pub const fn padded(len: usize) -> usize {
    (len + 3) & !3
}

/// A view of one AVP at the start of a buffer.
#[derive(Debug, Clone)]
pub struct Avp<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Avp<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Avp { buffer }
    }

    /// Checks that the header and the AVP Length fit the buffer.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let a = Self::new_unchecked(buffer);
        let b = a.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::AvpLength { code: 0, offset: 0 });
        }
        let bad = WireError::AvpLength { code: a.code(), offset: 0 };
        if a.flags() & flags::VENDOR != 0 && b.len() < HEADER_LEN_VENDOR {
            return Err(bad);
        }
        let len = a.length() as usize;
        if len < a.header_len() || len > b.len() {
            return Err(bad);
        }
        Ok(a)
    }

    pub fn code(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::CODE];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// AVP Length: header and data, without padding.
    pub fn length(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::LENGTH];
        (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
    }
    pub fn vendor_id(&self) -> Option<u32> {
        if self.flags() & flags::VENDOR == 0 {
            return None;
        }
        let b = &self.buffer.as_ref()[field::VENDOR_ID];
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn header_len(&self) -> usize {
        if self.flags() & flags::VENDOR != 0 {
            HEADER_LEN_VENDOR
        } else {
            HEADER_LEN
        }
    }
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.length() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Avp<T> {
    pub fn set_code(&mut self, v: u32) {
        self.buffer.as_mut()[field::CODE].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    pub fn set_length(&mut self, v: u32) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    pub fn set_vendor_id(&mut self, v: u32) {
        self.buffer.as_mut()[field::VENDOR_ID].copy_from_slice(&v.to_be_bytes());
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        let (h, l) = (self.header_len(), self.length() as usize);
        &mut self.buffer.as_mut()[h..l]
    }
}

/// One AVP as plain values. Grouped AVPs keep their children encoded in
/// `data`; [`AvpRepr::grouped`] decodes them on demand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvpRepr {
    pub code: u32,
    /// `Some` sets the V-bit and the Vendor-ID field.
    pub vendor_id: Option<u32>,
    pub mandatory: bool,
    pub protected: bool,
    pub data: Vec<u8>,
}

impl AvpRepr {
    /// Parses one AVP; reserved flag bits are ignored on receipt.
    pub fn parse<T: AsRef<[u8]>>(a: &Avp<T>) -> Self {
        let f = a.flags();
        AvpRepr {
            code: a.code(),
            vendor_id: a.vendor_id(),
            mandatory: f & flags::MANDATORY != 0,
            protected: f & flags::PROTECTED != 0,
            data: a.data().to_vec(),
        }
    }

    fn header_len(&self) -> usize {
        if self.vendor_id.is_some() {
            HEADER_LEN_VENDOR
        } else {
            HEADER_LEN
        }
    }

    /// AVP Length (no padding).
    pub fn length(&self) -> usize {
        self.header_len() + self.data.len()
    }

    /// Octets on the wire, padding included.
    pub fn buffer_len(&self) -> usize {
        padded(self.length())
    }

    /// Emits header, data and zero padding into `buf` (at least
    /// [`buffer_len`](Self::buffer_len) octets).
    pub fn emit(&self, buf: &mut [u8]) {
        let total = self.buffer_len();
        let mut a = Avp::new_unchecked(&mut buf[..total]);
        a.set_code(self.code);
        let mut f = 0;
        if self.vendor_id.is_some() {
            f |= flags::VENDOR;
        }
        if self.mandatory {
            f |= flags::MANDATORY;
        }
        if self.protected {
            f |= flags::PROTECTED;
        }
        a.set_flags(f);
        a.set_length(self.length() as u32);
        if let Some(v) = self.vendor_id {
            a.set_vendor_id(v);
        }
        a.data_mut().copy_from_slice(&self.data);
        buf[self.length()..total].fill(0);
    }

    /// Appends the encoded AVP to `out`.
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + self.buffer_len(), 0);
        self.emit(&mut out[start..]);
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.buffer_len());
        self.emit_into(&mut v);
        v
    }

    /// Unsigned32, Enumerated, AppId, VendorId.
    pub fn as_u32(&self) -> Result<u32, WireError> {
        let b: [u8; 4] = self.data.as_slice().try_into().map_err(|_| self.invalid_length())?;
        Ok(u32::from_be_bytes(b))
    }

    /// UTF8String, DiameterIdentity.
    pub fn as_str(&self) -> Result<&str, WireError> {
        std::str::from_utf8(&self.data).map_err(|_| WireError::AvpData(self.code))
    }

    /// Address (RFC 6733 4.3.1).
    pub fn as_address(&self) -> Result<std::net::IpAddr, WireError> {
        let d = &self.data;
        match (d.get(..2), d.len()) {
            (Some([0, 1]), 6) => Ok(std::net::IpAddr::from([d[2], d[3], d[4], d[5]])),
            (Some([0, 2]), 18) => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&d[2..]);
                Ok(std::net::IpAddr::from(o))
            }
            _ => Err(WireError::AvpData(self.code)),
        }
    }

    /// The children of a Grouped AVP (RFC 6733 4.4).
    pub fn grouped(&self) -> Result<Vec<AvpRepr>, WireError> {
        parse_avps(&self.data)
    }

    fn invalid_length(&self) -> WireError {
        WireError::AvpLength { code: self.code, offset: 0 }
    }
}

/// Iterator over the AVPs of a buffer: each item is the AVP or the error at
/// its offset, and the iteration stops after an error.
pub struct AvpIter<'a> {
    buf: &'a [u8],
    offset: usize,
    failed: bool,
}

impl<'a> AvpIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        AvpIter { buf, offset: 0, failed: false }
    }
}

impl<'a> Iterator for AvpIter<'a> {
    type Item = Result<Avp<&'a [u8]>, WireError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.offset >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.offset..];
        match Avp::new_checked(rest) {
            Ok(a) => {
                let len = a.length() as usize;
                // The AVP without its padding is in bounds; the padding of the
                // last AVP may only be missing inside a Grouped AVP.
                self.offset += padded(len).min(rest.len());
                Some(Ok(Avp::new_unchecked(&rest[..len])))
            }
            Err(e) => {
                self.failed = true;
                let code = if rest.len() >= 4 { u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) } else { 0 };
                let offset = self.offset;
                Some(Err(match e {
                    WireError::AvpLength { .. } => WireError::AvpLength { code, offset },
                    e => e,
                }))
            }
        }
    }
}

/// Parses a sequence of AVPs.
pub fn parse_avps(buf: &[u8]) -> Result<Vec<AvpRepr>, WireError> {
    AvpIter::new(buf).map(|a| a.map(|a| AvpRepr::parse(&a))).collect()
}
