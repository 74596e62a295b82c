//! The file an embedded store persists to: an append-only log of records
//! (format in the crate documentation), replayed on open and compacted when
//! mostly dead.
//!
//! Encoding and replay work on bytes ([`encode`], [`replay`]); [`Log`] holds
//! the file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::{Map, StoreError, Versioned};

/// First bytes of every log file.
pub(crate) const MAGIC: &[u8; 8] = b"MCSLOG01";

/// Bytes of the length and CRC fields before each body.
const FRAME_LEN: usize = 8;

const KIND_PUT: u8 = 1;
const KIND_DELETE: u8 = 2;

/// A log is compacted once it is at least this long (and twice the live data).
pub(crate) const COMPACT_MIN_LEN: u64 = 1 << 20;

/// One write, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    Put { key: &'a str, version: u64, value: &'a [u8] },
    Delete { key: &'a str },
}

/// Encoded size of a put record: what a key holding a value of `value_len`
/// bytes costs in a compacted log.
pub(crate) fn put_len(key: &str, value_len: usize) -> u64 {
    (FRAME_LEN + 1 + 2 + key.len() + 8 + value_len) as u64
}

/// Appends the encoded `rec` to `out`. The key must fit in a u16 length
/// (keys are bounded by [`crate::MAX_KEY_LEN`]).
pub(crate) fn encode(rec: &Record<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_LEN]);
    let key = match rec {
        Record::Put { key, .. } => {
            out.push(KIND_PUT);
            key
        }
        Record::Delete { key } => {
            out.push(KIND_DELETE);
            key
        }
    };
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    if let Record::Put { version, value, .. } = rec {
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(value);
    }
    let body_len = (out.len() - start - FRAME_LEN) as u32;
    out[start..start + 4].copy_from_slice(&body_len.to_le_bytes());
    let crc = frame_crc(body_len, &out[start + FRAME_LEN..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn frame_crc(body_len: u32, body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&body_len.to_le_bytes()), body)
}

fn decode_body(body: &[u8]) -> Option<Record<'_>> {
    let (&kind, rest) = body.split_first()?;
    let key_len = u16::from_le_bytes(rest.get(..2)?.try_into().ok()?) as usize;
    let key = std::str::from_utf8(rest.get(2..2 + key_len)?).ok()?;
    let rest = &rest[2 + key_len..];
    match kind {
        KIND_PUT => {
            let version = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
            Some(Record::Put { key, version, value: &rest[8..] })
        }
        KIND_DELETE if rest.is_empty() => Some(Record::Delete { key }),
        _ => None,
    }
}

/// What a log holds.
#[derive(Debug, Default)]
pub(crate) struct Replayed {
    pub map: Map,
    /// Bytes up to the end of the last good record (0: not even a header).
    pub valid_len: usize,
}

/// Replays a whole log file. A final record cut short (or a tail of zeros)
/// ends the log at `valid_len`; anything else unreadable is an error
/// message for [`StoreError::Corrupt`].
pub(crate) fn replay(bytes: &[u8]) -> Result<Replayed, String> {
    let mut out = Replayed::default();
    if bytes.len() < MAGIC.len() {
        // Empty, or the header itself was cut short.
        return if MAGIC.starts_with(bytes) { Ok(out) } else { Err("not a store log (bad header)".into()) };
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a store log (bad header)".into());
    }
    let mut pos = MAGIC.len();
    out.valid_len = pos;
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        let is_tail = |end: usize| end >= rest.len() || rest.iter().all(|&b| b == 0);
        if rest.len() < FRAME_LEN {
            return Ok(out);
        }
        let body_len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        let end = FRAME_LEN.saturating_add(body_len as usize);
        if end > rest.len() {
            // Runs past the end of the file: the last write was cut short.
            return Ok(out);
        }
        let body = &rest[FRAME_LEN..end];
        if frame_crc(body_len, body) != crc {
            if is_tail(end) {
                return Ok(out);
            }
            return Err(format!("bad CRC in the record at byte {pos}"));
        }
        match decode_body(body) {
            Some(Record::Put { key, version, value }) => {
                out.map.insert(key.to_string(), Versioned { value: value.to_vec(), version });
            }
            Some(Record::Delete { key }) => {
                out.map.remove(key);
            }
            None => return Err(format!("unreadable record at byte {pos}")),
        }
        pos += end;
        out.valid_len = pos;
    }
    Ok(out)
}

/// The open log file of an embedded store.
#[derive(Debug)]
pub(crate) struct Log {
    path: PathBuf,
    file: File,
    /// Bytes in the file.
    len: u64,
    /// Bytes a compacted log would hold: the header and one put per live key.
    live: u64,
    /// No compaction before the log is this long.
    compact_from: u64,
    /// Set when a failed write left the file in an unknown state.
    broken: bool,
}

impl Log {
    /// Opens (or creates) the log at `path` and replays it.
    pub(crate) fn open(path: &Path) -> Result<(Log, Map), StoreError> {
        let corrupt = |msg: String| StoreError::Corrupt(format!("{}: {msg}", path.display()));
        remove_if_present(&compact_path(path))?;
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let replayed = replay(&bytes).map_err(corrupt)?;
        let mut valid_len = replayed.valid_len as u64;
        if valid_len < bytes.len() as u64 {
            tracing::warn!(
                path = %path.display(),
                offset = valid_len,
                dropped = bytes.len() as u64 - valid_len,
                "store log: the last write was cut short (crash?), truncating it away"
            );
            file.set_len(valid_len)?;
        }
        if valid_len == 0 {
            file.write_all(MAGIC)?;
            valid_len = MAGIC.len() as u64;
        }
        if valid_len as usize != bytes.len() {
            file.sync_all()?;
        }
        let map = replayed.map;
        let live = MAGIC.len() as u64 + map.iter().map(|(k, v)| put_len(k, v.value.len())).sum::<u64>();
        let log =
            Log { path: path.to_path_buf(), file, len: valid_len, live, compact_from: COMPACT_MIN_LEN, broken: false };
        Ok((log, map))
    }

    /// Appends `rec` and hands it to the OS. `previous` is the length of the
    /// value the key held before (None: absent), to account for live data.
    pub(crate) fn append(&mut self, rec: &Record<'_>, previous: Option<usize>) -> Result<(), StoreError> {
        if self.broken {
            return Err(io::Error::other(format!(
                "{}: an earlier write failed and could not be undone; reopen the store",
                self.path.display()
            ))
            .into());
        }
        let mut buf = Vec::new();
        encode(rec, &mut buf);
        if let Err(e) = self.file.write_all(&buf) {
            // Undo a partial write so the next record does not follow garbage.
            if self.file.set_len(self.len).is_err() {
                self.broken = true;
            }
            return Err(e.into());
        }
        self.len += buf.len() as u64;
        let (key, added) = match rec {
            Record::Put { key, value, .. } => (key, put_len(key, value.len())),
            Record::Delete { key } => (key, 0),
        };
        self.live = self.live + added - previous.map_or(0, |len| put_len(key, len));
        Ok(())
    }

    /// Forces the file to the disk.
    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        Ok(self.file.sync_data()?)
    }

    /// Compacts if the log is past twice the live data and long enough; a
    /// failure leaves the old log in use (it is complete) and is logged.
    pub(crate) fn maybe_compact(&mut self, map: &Map) {
        if self.len < self.compact_from || self.len <= 2 * self.live {
            return;
        }
        if let Err(e) = self.compact(map) {
            tracing::warn!(path = %self.path.display(), error = %e, "store log: compaction failed, keeping the log");
            self.compact_from = (2 * self.len).max(COMPACT_MIN_LEN);
        }
    }

    /// Rewrites the log with one put per key of `map`: a temporary file,
    /// forced to the disk, renamed over the log.
    fn compact(&mut self, map: &Map) -> io::Result<()> {
        let tmp = compact_path(&self.path);
        let mut buf = Vec::with_capacity(self.live as usize);
        buf.extend_from_slice(MAGIC);
        for (key, v) in map {
            encode(&Record::Put { key, version: v.version, value: &v.value }, &mut buf);
        }
        remove_if_present(&tmp)?;
        // This handle becomes the log's: once renamed, it is the file at `path`.
        let mut file = OpenOptions::new().append(true).create_new(true).open(&tmp)?;
        file.write_all(&buf)?;
        file.sync_all()?;
        fs::rename(&tmp, &self.path)?;
        let before = self.len;
        self.file = file;
        self.len = buf.len() as u64;
        self.live = self.len;
        self.compact_from = COMPACT_MIN_LEN;
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)?.sync_all()?;
        tracing::debug!(path = %self.path.display(), before, after = self.len, "store log compacted");
        Ok(())
    }
}

fn compact_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".compact");
    path.with_file_name(name)
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(records: &[Record<'_>]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        for r in records {
            encode(r, &mut bytes);
        }
        bytes
    }

    fn sample() -> Vec<u8> {
        log_of(&[
            Record::Put { key: "a", version: 1, value: b"one" },
            Record::Put { key: "b", version: 1, value: b"" },
            Record::Put { key: "a", version: 2, value: b"two" },
            Record::Delete { key: "b" },
        ])
    }

    #[test]
    fn records_round_trip() {
        for rec in [
            Record::Put { key: "k", version: 7, value: b"v" },
            Record::Put { key: "", version: u64::MAX, value: b"" },
            Record::Delete { key: "x[*]" },
        ] {
            let mut buf = Vec::new();
            encode(&rec, &mut buf);
            assert_eq!(decode_body(&buf[FRAME_LEN..]), Some(rec.clone()));
        }
    }

    #[test]
    fn replay_applies_puts_and_deletes() {
        let bytes = sample();
        let r = replay(&bytes).unwrap();
        assert_eq!(r.valid_len, bytes.len());
        assert_eq!(r.map.len(), 1);
        assert_eq!(r.map["a"], Versioned { value: b"two".to_vec(), version: 2 });
    }

    #[test]
    fn every_cut_of_the_last_record_is_a_torn_tail() {
        let full = sample();
        let before_last = log_of(&[
            Record::Put { key: "a", version: 1, value: b"one" },
            Record::Put { key: "b", version: 1, value: b"" },
            Record::Put { key: "a", version: 2, value: b"two" },
        ]);
        for cut in before_last.len()..full.len() {
            let r = replay(&full[..cut]).unwrap();
            assert_eq!(r.valid_len, before_last.len(), "cut at {cut}");
            assert_eq!(r.map.len(), 2);
        }
    }

    #[test]
    fn a_cut_header_is_an_empty_log() {
        for cut in 0..MAGIC.len() {
            assert_eq!(replay(&MAGIC[..cut]).unwrap().valid_len, 0);
        }
        assert!(replay(b"hello, world").is_err());
    }

    #[test]
    fn a_zero_tail_is_torn_but_a_bad_record_inside_is_corrupt() {
        let mut bytes = sample();
        let len = bytes.len();
        bytes.extend_from_slice(&[0; 4096]);
        assert_eq!(replay(&bytes).unwrap().valid_len, len);

        let mut bytes = sample();
        bytes[MAGIC.len() + FRAME_LEN + 4] ^= 0x40; // inside the first body
        assert!(replay(&bytes).unwrap_err().contains("bad CRC"));

        // A bad CRC on the very last record is a torn write.
        let mut bytes = sample();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(replay(&bytes).is_ok());
    }

    #[test]
    fn a_well_framed_unknown_record_is_corrupt() {
        let mut bytes = MAGIC.to_vec();
        let body = [9u8, 0, 0];
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&frame_crc(3, &body).to_le_bytes());
        bytes.extend_from_slice(&body);
        assert!(replay(&bytes).unwrap_err().contains("unreadable"));
    }
}
