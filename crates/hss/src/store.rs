//! The embedded subscriber store: in memory, persisted as one JSON file
//! written atomically (temporary file, then rename).
//!
//! The HSS changes SQN on every AIR (thousands a second), so changes only
//! mark the store dirty; [`SubscriberStore::flush`] writes the file, which
//! the HSS shell does periodically (every second by default) and at
//! shutdown. A CLI that adds subscribers calls `flush()` before it exits.
//! Two processes must not write the same file at once.
//!
//! File format (`subscribers.json`):
//! ```json
//! { "subscribers": [ { "imsi": "001010000000001", "k": "465b...", "opc": "cd63...",
//!   "amf": "8000", "sqn": 0, "msisdn": "46700000001",
//!   "ue_ambr": { "uplink": 100000000, "downlink": 100000000 },
//!   "apns": [ { "name": "internet", "qci": 9, "arp_priority": 9,
//!     "pre_emption_capability": false, "pre_emption_vulnerability": true,
//!     "ambr": { "uplink": 100000000, "downlink": 100000000 }, "pdn_type": "Ipv4" } ] } ] }
//! ```
//! An APN may also name `"pdn_gw": "10.0.0.5"` (the PDN GW the ULA names
//! in MIP6-Agent-Info) and `"static_ipv4": "10.45.0.9"` (the UE's static
//! address, Served-Party-IP-Address); `pdn_type` is `Ipv4`, `Ipv6` or
//! `Ipv4v6`. The HSS adds `"terminal": { "imei": "35..", "software_version":
//! "01" }` when a ULR names the terminal (Terminal-Information).
//! `op` may stand in the place of `opc` (OPc is then derived).

use crate::subscriber::{ApnProfile, Subscriber, DEFAULT_AMF};
use mobicore_common::{Ambr, Imsi};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("bad subscriber file {path}: {message}")]
    Format { path: PathBuf, message: String },
    #[error("invalid subscriber: {0}")]
    Invalid(String),
    #[error("line {line}: {message}")]
    Csv { line: usize, message: String },
}

/// Environment variable naming the data directory.
pub const DATA_DIR_ENV: &str = "MOBICORE_DATA_DIR";
/// Data directory when the variable is not set.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/mobicore";
/// File name of the store inside the data directory.
pub const FILE_NAME: &str = "subscribers.json";

/// `$MOBICORE_DATA_DIR/subscribers.json`, or `/var/lib/mobicore/subscribers.json`.
pub fn default_path() -> PathBuf {
    let dir = std::env::var_os(DATA_DIR_ENV).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    dir.join(FILE_NAME)
}

#[derive(Serialize, Deserialize)]
struct FileFormat {
    subscribers: Vec<Subscriber>,
}

#[derive(Default)]
struct Inner {
    path: Option<PathBuf>,
    subscribers: HashMap<Imsi, Subscriber>,
    dirty: bool,
}

/// What [`SubscriberStore::import_range`] gives every subscriber besides
/// IMSI, K and OPc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberTemplate {
    pub amf: u16,
    pub sqn: u64,
    /// MSISDN of the first subscriber, incremented with the IMSI.
    pub first_msisdn: Option<u64>,
    pub ue_ambr: Ambr,
    pub apns: Vec<ApnProfile>,
}

impl Default for SubscriberTemplate {
    fn default() -> Self {
        let s = Subscriber::new("001010000000001".parse().expect("valid IMSI"), [0; 16], [0; 16]);
        SubscriberTemplate { amf: DEFAULT_AMF, sqn: 0, first_msisdn: None, ue_ambr: s.ue_ambr, apns: s.apns }
    }
}

/// A handle on the store; clones share it.
#[derive(Clone, Default)]
pub struct SubscriberStore {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for SubscriberStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.lock();
        f.debug_struct("SubscriberStore").field("path", &g.path).field("len", &g.subscribers.len()).finish()
    }
}

impl SubscriberStore {
    /// A store that is never written to disk.
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// Opens the store at `path`: loads it if the file exists, else starts
    /// empty (the file and its directory are created at the first flush).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let mut inner = Inner { path: Some(path.clone()), ..Default::default() };
        match std::fs::read(&path) {
            Ok(bytes) => {
                let f: FileFormat = serde_json::from_slice(&bytes)
                    .map_err(|e| StoreError::Format { path: path.clone(), message: e.to_string() })?;
                for mut s in f.subscribers {
                    s.normalize().map_err(|m| StoreError::Format { path: path.clone(), message: m })?;
                    inner.subscribers.insert(s.imsi.clone(), s);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(StoreError::Io { path, source }),
        }
        Ok(SubscriberStore { inner: Arc::new(Mutex::new(inner)) })
    }

    /// Opens the store at [`default_path`].
    pub fn open_default() -> Result<Self, StoreError> {
        Self::open(default_path())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a record half written
        // (every change is one insert), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn path(&self) -> Option<PathBuf> {
        self.lock().path.clone()
    }

    /// Adds or replaces a subscriber.
    pub fn add(&self, mut s: Subscriber) -> Result<(), StoreError> {
        s.normalize().map_err(StoreError::Invalid)?;
        let mut g = self.lock();
        g.subscribers.insert(s.imsi.clone(), s);
        g.dirty = true;
        Ok(())
    }

    /// Removes a subscriber; whether it was there.
    pub fn remove(&self, imsi: &Imsi) -> bool {
        let mut g = self.lock();
        let found = g.subscribers.remove(imsi).is_some();
        g.dirty |= found;
        found
    }

    pub fn get(&self, imsi: &Imsi) -> Option<Subscriber> {
        self.lock().subscribers.get(imsi).cloned()
    }

    /// All subscribers, sorted by IMSI.
    pub fn list(&self) -> Vec<Subscriber> {
        let mut v: Vec<Subscriber> = self.lock().subscribers.values().cloned().collect();
        v.sort_by(|a, b| a.imsi.cmp(&b.imsi));
        v
    }

    pub fn len(&self) -> usize {
        self.lock().subscribers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether there are changes not yet written.
    pub fn is_dirty(&self) -> bool {
        self.lock().dirty
    }

    /// Runs `f` on a subscriber and marks the store dirty (SQN updates).
    pub fn update<R>(&self, imsi: &Imsi, f: impl FnOnce(&mut Subscriber) -> R) -> Option<R> {
        let mut g = self.lock();
        let r = g.subscribers.get_mut(imsi).map(f);
        g.dirty |= r.is_some();
        r
    }

    /// Writes the file if anything changed: JSON to a temporary file in the
    /// same directory, fsync, then rename over the old one. No-op in memory.
    pub fn flush(&self) -> Result<(), StoreError> {
        let (path, json) = {
            let mut g = self.lock();
            let Some(path) = g.path.clone() else {
                g.dirty = false;
                return Ok(());
            };
            if !g.dirty && path.exists() {
                return Ok(());
            }
            let mut subscribers: Vec<&Subscriber> = g.subscribers.values().collect();
            subscribers.sort_by(|a, b| a.imsi.cmp(&b.imsi));
            #[derive(Serialize)]
            struct Out<'a> {
                subscribers: Vec<&'a Subscriber>,
            }
            let json = serde_json::to_vec_pretty(&Out { subscribers })
                .map_err(|e| StoreError::Format { path: path.clone(), message: e.to_string() })?;
            g.dirty = false;
            (path, json)
        };
        let io = |source| StoreError::Io { path: path.clone(), source };
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = path.with_extension(format!("json.tmp.{}", std::process::id()));
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&json)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            self.lock().dirty = true;
            io(e)
        })
    }

    /// Provisions `count` subscribers with sequential IMSIs from `first`
    /// (same number of digits), all with `k` and `opc` and the rest from
    /// `template`. Returns how many were added.
    pub fn import_range(
        &self,
        first: &Imsi,
        count: u64,
        k: [u8; 16],
        opc: [u8; 16],
        template: &SubscriberTemplate,
    ) -> Result<usize, StoreError> {
        let width = first.as_str().len();
        let base: u64 = first.as_str().parse().map_err(|_| StoreError::Invalid(first.to_string()))?;
        let last = base.checked_add(count.saturating_sub(1)).filter(|l| l.to_string().len() <= width);
        if last.is_none() {
            return Err(StoreError::Invalid(format!("{count} IMSIs from {first} overflow {width} digits")));
        }
        let mut g = self.lock();
        g.subscribers.reserve(count as usize);
        for i in 0..count {
            let imsi: Imsi =
                format!("{:0width$}", base + i).parse().map_err(|_| StoreError::Invalid(first.to_string()))?;
            let s = Subscriber {
                imsi: imsi.clone(),
                k,
                opc: Some(opc),
                op: None,
                amf: template.amf,
                sqn: template.sqn,
                msisdn: template.first_msisdn.map(|m| (m + i).to_string()),
                ue_ambr: template.ue_ambr,
                apns: template.apns.clone(),
                terminal: None,
            };
            g.subscribers.insert(imsi, s);
        }
        g.dirty |= count > 0;
        Ok(count as usize)
    }

    /// Imports subscribers from a CSV file; see [`crate::import`] for the
    /// format. Returns how many subscribers were added or replaced.
    pub fn import(&self, path: impl AsRef<Path>) -> Result<usize, StoreError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|source| StoreError::Io { path: path.to_path_buf(), source })?;
        let subs = crate::import::parse_csv(&text)?;
        let n = subs.len();
        for s in subs {
            self.add(s)?;
        }
        Ok(n)
    }
}
