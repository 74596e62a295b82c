//! Picking IEs out of a message body by (type, instance), and classifying
//! what is wrong with them (TS 29.274 7.7).

use super::MessageError;
use crate::wire::ie::{IeIter, RawIe};
use crate::wire::Error;

/// The IEs of one message body or grouped IE, in wire order.
pub struct Fields<'a> {
    ies: Vec<RawIe<'a>>,
}

impl<'a> Fields<'a> {
    /// Splits the TLVs; a TLV running past the end has an invalid length
    /// (TS 29.274 7.7.7), a stub too short for an IE header makes the
    /// message malformed. Unknown IE types are kept here and simply never
    /// asked for, i.e. skipped (TS 29.274 7.7.9).
    pub fn new(buf: &'a [u8]) -> Result<Self, MessageError> {
        let ies = IeIter::new(buf).collect::<Result<Vec<_>, Error>>().map_err(|e| match e {
            Error::IeLength { ie_type, instance } => MessageError::InvalidLength { ie_type, instance },
            e => MessageError::Malformed(e),
        })?;
        Ok(Fields { ies })
    }

    pub fn get(&self, ie_type: u8, instance: u8) -> Option<&RawIe<'a>> {
        self.ies.iter().find(|i| i.ie_type == ie_type && i.instance == instance)
    }

    /// A mandatory IE: absent -> Mandatory IE missing (7.7.3); present but
    /// unreadable -> Mandatory IE incorrect (7.7.2).
    pub fn mandatory<T>(
        &self,
        ie_type: u8,
        instance: u8,
        f: impl FnOnce(&'a [u8]) -> Result<T, Error>,
    ) -> Result<T, MessageError> {
        let ie = self.get(ie_type, instance).ok_or(MessageError::MissingIe { ie_type, instance })?;
        f(ie.value).map_err(|_| MessageError::IncorrectIe { ie_type, instance })
    }

    /// An optional or conditional IE: an unreadable one is treated as
    /// absent (TS 29.274 7.7.7 for optional IEs).
    pub fn optional<T>(&self, ie_type: u8, instance: u8, f: impl FnOnce(&'a [u8]) -> Result<T, Error>) -> Option<T> {
        self.get(ie_type, instance).and_then(|ie| f(ie.value).ok())
    }

    /// Every instance of a repeated IE (e.g. Bearer Context), each decoded by `f`.
    pub fn all<T>(
        &self,
        ie_type: u8,
        instance: u8,
        mut f: impl FnMut(&'a [u8]) -> Result<T, MessageError>,
    ) -> Result<Vec<T>, MessageError> {
        self.ies.iter().filter(|i| i.ie_type == ie_type && i.instance == instance).map(|i| f(i.value)).collect()
    }
}
