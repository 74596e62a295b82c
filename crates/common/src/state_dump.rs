//! The framing of a network function's full-state dump: what the
//! S/P-GW-C and the UPF write when their whole state is copied to a fresh
//! instance (the stand-in for seed 000's whole-process "RAM replication",
//! see `mobicore bench relocation`). One frame per network function:
//!
//! ```text
//! 0      4        6     7          8             12         16
//! | "MCSD" | version | kind | reserved | body length | CRC32C | body (JSON) ...
//! ```
//!
//! Integers are big-endian; the CRC32C (Castagnoli) covers the body. The
//! body is the function's own dump type in JSON. Decoding checks every
//! field and returns a [`FrameError`] on any input, never panics.
//!
//! Times inside a dump are relative to the instant it was taken
//! ([`since`], [`at`]): an `Instant` means nothing in another process.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::{Duration, Instant};

/// The four octets every dump starts with.
pub const MAGIC: [u8; 4] = *b"MCSD";
/// The format version this build writes and reads.
pub const VERSION: u16 = 1;

mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: Range<usize> = 4..6;
    pub const KIND: usize = 6;
    pub const LENGTH: Range<usize> = 8..12;
    pub const CRC: Range<usize> = 12..16;
    pub const BODY: usize = 16;
}

/// The header's length in octets.
pub const HEADER_LEN: usize = field::BODY;

/// Whose state a dump holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpKind {
    Spgwc,
    Upf,
}

impl DumpKind {
    fn code(self) -> u8 {
        match self {
            DumpKind::Spgwc => 1,
            DumpKind::Upf => 2,
        }
    }
}

/// Why octets are not a dump of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("dump truncated: {len} octets, the header needs {HEADER_LEN}")]
    ShortHeader { len: usize },
    #[error("not a mobicore state dump (magic {0:02x?})")]
    Magic([u8; 4]),
    #[error("dump format version {0}, this build reads {VERSION}")]
    Version(u16),
    #[error("dump of kind {found}, expected {expected:?}")]
    Kind { expected: DumpKind, found: u8 },
    #[error("dump truncated or padded: the header announces {declared} octets of body, {actual} follow")]
    Length { declared: usize, actual: usize },
    #[error("dump corrupted: body checksum {found:#010x}, header says {declared:#010x}")]
    Checksum { declared: u32, found: u32 },
    #[error("dump body unreadable: {0}")]
    Body(String),
}

/// `state` framed as a dump of `kind`.
pub fn encode<T: Serialize>(kind: DumpKind, state: &T) -> Vec<u8> {
    let body = serde_json::to_vec(state).expect("plain data serializes");
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.push(kind.code());
    out.push(0);
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The body length a dump header announces, once `header` holds at least
/// [`HEADER_LEN`] octets (for a reader that takes a dump off a stream).
pub fn body_len(header: &[u8]) -> Result<usize, FrameError> {
    check_header(header)?;
    Ok(be32(&header[field::LENGTH]) as usize)
}

fn be32(b: &[u8]) -> u32 {
    b.iter().fold(0u32, |v, x| (v << 8) | u32::from(*x))
}

fn check_header(b: &[u8]) -> Result<(), FrameError> {
    if b.len() < HEADER_LEN {
        return Err(FrameError::ShortHeader { len: b.len() });
    }
    if b[field::MAGIC] != MAGIC {
        let mut m = [0u8; 4];
        m.copy_from_slice(&b[field::MAGIC]);
        return Err(FrameError::Magic(m));
    }
    let version = be32(&b[field::VERSION]) as u16;
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    Ok(())
}

/// The state in a dump of `kind`.
pub fn decode<T: DeserializeOwned>(kind: DumpKind, b: &[u8]) -> Result<T, FrameError> {
    check_header(b)?;
    if b[field::KIND] != kind.code() {
        return Err(FrameError::Kind { expected: kind, found: b[field::KIND] });
    }
    let declared = be32(&b[field::LENGTH]) as usize;
    let body = &b[field::BODY..];
    if body.len() != declared {
        return Err(FrameError::Length { declared, actual: body.len() });
    }
    let (declared, found) = (be32(&b[field::CRC]), crc32c::crc32c(body));
    if declared != found {
        return Err(FrameError::Checksum { declared, found });
    }
    serde_json::from_slice(body).map_err(|e| FrameError::Body(e.to_string()))
}

/// `t` as signed microseconds from `now` (negative: before), saturating.
pub fn since(t: Instant, now: Instant) -> i64 {
    let us = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    match t.checked_duration_since(now) {
        Some(ahead) => us(ahead),
        None => -us(now.saturating_duration_since(t)),
    }
}

/// The farthest from the dump a restored time is put: 50 years, so that
/// later arithmetic on it (deadlines, wall-clock times) cannot overflow
/// whatever a dump says.
pub const MAX_OFFSET_US: i64 = 50 * 365 * 86_400 * 1_000_000;

/// The instant `us` microseconds from `now` (see [`since`]), at most
/// [`MAX_OFFSET_US`] away; `now` itself when it cannot be represented.
pub fn at(us: i64, now: Instant) -> Instant {
    let us = us.clamp(-MAX_OFFSET_US, MAX_OFFSET_US);
    let d = Duration::from_micros(us.unsigned_abs());
    let t = if us >= 0 { now.checked_add(d) } else { now.checked_sub(d) };
    t.unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct S {
        a: u32,
        b: Vec<String>,
    }

    #[test]
    fn round_trip_and_every_damage_is_named() {
        let s = S { a: 7, b: vec!["x".into()] };
        let d = encode(DumpKind::Upf, &s);
        assert_eq!(decode::<S>(DumpKind::Upf, &d), Ok(s));
        assert_eq!(body_len(&d), Ok(d.len() - HEADER_LEN));
        assert!(matches!(decode::<S>(DumpKind::Spgwc, &d), Err(FrameError::Kind { found: 2, .. })));
        for n in 0..d.len() {
            assert!(decode::<S>(DumpKind::Upf, &d[..n]).is_err(), "truncated to {n}");
        }
        let mut bad = d.clone();
        bad[0] = b'X';
        assert!(matches!(decode::<S>(DumpKind::Upf, &bad), Err(FrameError::Magic(_))));
        let mut bad = d.clone();
        bad[5] = 9;
        assert!(matches!(decode::<S>(DumpKind::Upf, &bad), Err(FrameError::Version(9))));
        let mut bad = d.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(matches!(decode::<S>(DumpKind::Upf, &bad), Err(FrameError::Checksum { .. })));
        // A well-framed body of the wrong shape.
        let other = encode(DumpKind::Upf, &vec![1, 2, 3]);
        assert!(matches!(decode::<S>(DumpKind::Upf, &other), Err(FrameError::Body(_))));
    }

    #[test]
    fn relative_times_round_trip() {
        let now = Instant::now();
        for us in [0i64, 1, -1, 1_500_000, -2_000_000] {
            let t = at(us, now);
            assert_eq!(since(t, now), us);
        }
        assert_eq!(since(at(i64::MIN, now), now), -MAX_OFFSET_US, "bounded");
        assert_eq!(since(at(i64::MAX, now), now), MAX_OFFSET_US, "bounded");
    }
}
