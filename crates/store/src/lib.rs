//! The store: everything that must outlive a process or be shared between
//! processes (recorded GTP-C messages and relocations of the controller, UE
//! contexts of a stateless MME) goes through one interface, [`Store`].
//!
//! A store maps string keys to byte values. Every key has a version: the first
//! write gives 1, each later write adds 1, and a delete forgets it (the next
//! write gives 1 again). [`Store::compare_and_set`] and
//! [`Store::compare_and_delete`] act only if the version is the one the caller
//! read, which is how several tasks or hosts update one key without losing
//! each other's writes. Keys are at most [`MAX_KEY_LEN`] bytes, values at most
//! [`StoreConfig::max_value_len`]; a larger one is refused before anything is
//! written.
//!
//! Two implementations pass the same tests:
//! - **embedded** (the default): an ordered map in the process, optionally
//!   persisted to a file;
//! - **Redis**: a real `redis-server`, shared by several processes or hosts.
//!
//! # Layout
//! - this file: [`Store`], its configuration ([`StoreConfig`]), [`Versioned`]
//!   and [`StoreError`]; the bounds checks shared by both implementations.
//! - `embedded`: the in-process ordered map behind a mutex; optionally it
//!   keeps every write ([`Change`]) for [`Store::take_changes`].
//! - [`replica`]: replication of an embedded store's writes to replica
//!   hosts and the copies a host keeps of others' (sans-I/O).
//! - `log`: the file an embedded store persists to (format below): encoding,
//!   replay, compaction.
//! - `redis_store`: the Redis implementation (key layout below), and its
//!   one connection: remade when lost, every request bounded by a timeout.
//! - [`redis_server`]: starts a real `redis-server` in a temporary directory,
//!   for tests (of this crate and of others).
//!
//! # The embedded log
//! An 8-byte header `MCSLOG01`, then records appended one per write:
//!
//! ```text
//! u32 LE  body length
//! u32 LE  CRC-32C of the length field and the body
//! body:   u8 kind (1 = put, 2 = delete)
//!         u16 LE key length, the key (UTF-8)
//!         put only: u64 LE version, the value (the rest of the body)
//! ```
//!
//! Each record is written and handed to the OS before the call returns
//! ([`Store::sync`] also forces it to the disk). Opening replays the log; a
//! final record cut short by a crash is truncated away with a warning, a bad
//! record followed by more data is [`StoreError::Corrupt`]. When the log grows
//! past twice the live data and at least 1 MiB, it is rewritten with only the
//! live keys (into a temporary file renamed over the log).
//!
//! # The Redis key layout
//! Key `k` of namespace `ns` is the Redis hash `ns:k` with fields `v` (the
//! version, decimal) and `d` (the value). Writes run as Lua scripts, so the
//! version check and the write are one atomic step. A scan is `SCAN` with
//! `MATCH ns:prefix*` (glob characters escaped) followed by reads of what it
//! found; keys are returned without the namespace.
//!
//! # Failures of Redis
//! A Redis store keeps one connection, and makes a new one when it is lost
//! (the server restarted, the network broke): the operation that finds it
//! lost fails, a later one connects again, with a backoff between attempts
//! (100 ms doubling up to 2 s) during which operations fail at once. Every
//! request has [`StoreConfig::timeout_ms`] (default 1 s) to be answered, so
//! a slow or stopped server never makes a caller hang. The errors say what
//! happened:
//! - [`StoreError::Unavailable`]: no connection (cannot connect, or lost
//!   during a read); nothing was done, try again later.
//! - [`StoreError::Timeout`]: a read got no answer in time.
//! - [`StoreError::OutcomeUnknown`]: a write was sent but its answer was
//!   lost (connection lost, or no answer in time); the server may or may
//!   not have applied it, and may still (a server that was frozen runs what
//!   it had received when it thaws). It is never sent again by the store: a
//!   blind retry could apply it twice. Read the key and decide from its
//!   version: a compare-and-set took effect whole or not at all, and a new
//!   compare-and-set on the version read settles it (if the lost one runs
//!   later, it finds another version and does nothing). A lost
//!   unconditional put or delete may still land later.
//!
//! Failures are counted in [`Store::counters`] (names in
//! [`Store::counters`]'s documentation).

mod embedded;
mod log;
pub mod redis_server;
mod redis_store;
pub mod replica;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use mobicore_common::counters::Counters;
use serde::{Deserialize, Serialize};

use crate::embedded::Embedded;
use crate::redis_store::RedisStore;

/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 512;

/// Default bound on one value: 1 MiB.
pub const DEFAULT_MAX_VALUE_LEN: usize = 1 << 20;

/// Default namespace of keys in Redis.
pub const DEFAULT_NAMESPACE: &str = "mobicore";

/// Redis URL used when the configuration names none.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379/";

/// Default bound on waiting for Redis (each answer, each connect attempt).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// Keys and their values, in no order (lookups are what is hot; a scan by
/// prefix, rare, reads them all and sorts what it returns). Hashed with
/// foldhash, seeded at random per process: SipHash was 2-4% of a loaded
/// host's CPU; the keys are those of UEs that attached, not raw input.
pub(crate) type Map = std::collections::HashMap<String, Versioned, foldhash::fast::RandomState>;

/// A value and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub value: Vec<u8>,
    pub version: u64,
}

/// One write of an embedded store that feeds its changes
/// ([`Store::memory_with_feed`]): the key's new version and value, or
/// (`value` None) its delete and the version it removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    pub version: u64,
    pub value: Option<Vec<u8>>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// compare-and-set / compare-and-delete lost: the key's current version (None = absent).
    #[error("version conflict: the key's current version is {}", match current {
        Some(v) => v.to_string(),
        None => "none (absent)".to_string(),
    })]
    Conflict { current: Option<u64> },
    /// key longer than MAX_KEY_LEN or value longer than the configured max_value_len.
    #[error("{what} of {len} bytes is longer than the limit of {max}")]
    TooLarge { what: &'static str, len: usize, max: usize },
    /// embedded file persistence.
    #[error("store file: {0}")]
    Io(#[from] std::io::Error),
    /// an error answer of the redis server (or a bad URL), with its message;
    /// nothing was done.
    #[error("redis: {0}")]
    Redis(String),
    /// no connection to redis (it cannot be reached, or the connection was
    /// lost during a read); nothing was done. The store connects again by
    /// itself: try again later.
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    /// a read got no answer from redis within the configured timeout.
    #[error("redis: no answer to {op} within {after:?} (server slow or stopped)")]
    Timeout { op: &'static str, after: Duration },
    /// a write was sent to redis but its answer was lost (`cause`: the
    /// connection broke, or no answer within the timeout): it may or may
    /// not have been applied, and may still be. The store never resends it;
    /// read the key's version before deciding what to do.
    #[error("redis: {op} may or may not have been applied ({cause}); read the key before writing it again")]
    OutcomeUnknown { op: &'static str, cause: String },
    /// a persisted file or redis entry we cannot read.
    #[error("corrupt store data: {0}")]
    Corrupt(String),
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        StoreError::Redis(e.to_string())
    }
}

/// Which implementation a [`Store`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    #[default]
    Embedded,
    Redis,
}

/// How to open a store; every field has a default.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// "embedded" (default) or "redis"
    pub kind: StoreKind,
    /// embedded: file to persist to (None = memory only)
    pub path: Option<PathBuf>,
    /// redis: URL, e.g. "redis://127.0.0.1:6379/" or "redis+unix:///tmp/x.sock"
    /// (None = [`DEFAULT_REDIS_URL`])
    pub url: Option<String>,
    /// every key is stored under this prefix (so several users share one
    /// redis), default "mobicore"; two users sharing a server need
    /// namespaces where neither is the other followed by ':'
    pub namespace: String,
    /// bound on one value, default 1 MiB
    pub max_value_len: usize,
    /// redis: how long to wait for each answer and each connect attempt
    /// before the operation fails (a timeout; for a write, outcome
    /// unknown), milliseconds, default 1000
    pub timeout_ms: u64,
}

impl StoreConfig {
    /// [`StoreConfig::timeout_ms`] (at least 1 ms).
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Embedded,
            path: None,
            url: None,
            namespace: DEFAULT_NAMESPACE.to_string(),
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            timeout_ms: DEFAULT_TIMEOUT.as_millis() as u64,
        }
    }
}

/// The store: a cheap handle to clone and share between tasks.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    max_value_len: usize,
    counters: Counters,
}

#[derive(Clone)]
enum Backend {
    Embedded(Arc<Embedded>),
    Redis(Arc<RedisStore>),
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("kind", &self.kind()).field("max_value_len", &self.max_value_len).finish()
    }
}

impl Store {
    fn new(backend: Backend, counters: Counters) -> Store {
        Store { backend, max_value_len: DEFAULT_MAX_VALUE_LEN, counters }
    }

    /// An embedded store in memory only.
    pub fn memory() -> Store {
        Store::new(Backend::Embedded(Arc::new(Embedded::memory())), Counters::new())
    }

    /// An embedded store in memory that keeps every write for
    /// [`Store::take_changes`] (what a host replicates, [`replica`]).
    pub fn memory_with_feed() -> Store {
        Store::new(Backend::Embedded(Arc::new(Embedded::memory_with_feed())), Counters::new())
    }

    /// The writes since the last call, in order (none unless the store is
    /// [`Store::memory_with_feed`]). Take them after every batch of
    /// writes: they are kept until taken.
    pub fn take_changes(&self) -> Vec<Change> {
        match &self.backend {
            Backend::Embedded(e) => e.take_changes(),
            Backend::Redis(_) => Vec::new(),
        }
    }

    /// An embedded store persisted to `path`, with what the file holds
    /// (created if missing).
    pub fn open_file(path: &Path) -> Result<Store, StoreError> {
        Ok(Store::new(Backend::Embedded(Arc::new(Embedded::open_file(path)?)), Counters::new()))
    }

    /// A store in the Redis server at `url`, keys under `namespace`, with
    /// the default timeout ([`DEFAULT_TIMEOUT`]); fails if the server cannot
    /// be reached now (later losses are survived, see the crate doc).
    pub async fn connect_redis(url: &str, namespace: &str) -> Result<Store, StoreError> {
        Store::connect_redis_with_timeout(url, namespace, DEFAULT_TIMEOUT).await
    }

    /// [`Store::connect_redis`] with another bound on each answer and each
    /// connect attempt.
    pub async fn connect_redis_with_timeout(
        url: &str,
        namespace: &str,
        timeout: Duration,
    ) -> Result<Store, StoreError> {
        let counters = Counters::new();
        let redis = RedisStore::connect(url, namespace, timeout, counters.clone()).await;
        if let Err(e) = &redis {
            count_failure(&counters, e);
        }
        Ok(Store::new(Backend::Redis(Arc::new(redis?)), counters))
    }

    /// The store `cfg` describes.
    pub async fn open(cfg: &StoreConfig) -> Result<Store, StoreError> {
        let store = match cfg.kind {
            StoreKind::Embedded => {
                if cfg.url.is_some() {
                    tracing::warn!("store: url is ignored by an embedded store");
                }
                match &cfg.path {
                    Some(path) => Store::open_file(path)?,
                    None => Store::memory(),
                }
            }
            StoreKind::Redis => {
                if cfg.path.is_some() {
                    tracing::warn!("store: path is ignored by a redis store");
                }
                let url = cfg.url.as_deref().unwrap_or(DEFAULT_REDIS_URL);
                Store::connect_redis_with_timeout(url, &cfg.namespace, cfg.timeout()).await?
            }
        };
        Ok(store.with_max_value_len(cfg.max_value_len))
    }

    /// The same store with another bound on one value.
    pub fn with_max_value_len(mut self, max_value_len: usize) -> Store {
        self.max_value_len = max_value_len;
        self
    }

    /// The store's failure counters, shared by every clone of it:
    /// - `conflict`: compare-and-set or compare-and-delete lost
    ///   ([`StoreError::Conflict`]);
    /// - `unavailable`, `timeout`, `outcome_unknown`, `redis_error`,
    ///   `corrupt`, `io_error`, `too_large`: operations failed with the
    ///   [`StoreError`] of that name;
    /// - Redis only: `redis_connection_lost` (connections dropped),
    ///   `redis_connect_failed` (connect attempts that failed),
    ///   `redis_reconnected` (connections made again after a loss).
    ///
    /// Export them with [`Counters::prometheus`] (e.g. prefix "store").
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// `result`, its failure counted.
    fn counted<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e) = &result {
            count_failure(&self.counters, e);
        }
        result
    }

    pub fn kind(&self) -> StoreKind {
        match self.backend {
            Backend::Embedded(_) => StoreKind::Embedded,
            Backend::Redis(_) => StoreKind::Redis,
        }
    }

    /// The version `key` holds now (`Some(None)`: absent) if the store is
    /// in this process; `None` for Redis (it takes a round trip: [`Store::get`]).
    pub fn local_version(&self, key: &str) -> Option<Option<u64>> {
        match &self.backend {
            Backend::Embedded(e) => Some(e.version(key)),
            Backend::Redis(_) => None,
        }
    }

    pub async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.counted(check_key(key))?;
        let result = match &self.backend {
            Backend::Embedded(e) => Ok(e.get(key)),
            Backend::Redis(r) => r.get(key).await,
        };
        self.counted(result)
    }

    /// unconditional write; returns the new version (versions start at 1 and grow by 1 per write of that key)
    pub async fn put(&self, key: &str, value: &[u8]) -> Result<u64, StoreError> {
        self.counted(self.check_write(key, value))?;
        let result = match &self.backend {
            Backend::Embedded(e) => e.put(key, value),
            Backend::Redis(r) => r.put(key, value).await,
        };
        self.counted(result)
    }

    /// write only if the key's version is `expected` (None = the key must be absent); returns the new version, else Conflict{current}
    pub async fn compare_and_set(&self, key: &str, expected: Option<u64>, value: &[u8]) -> Result<u64, StoreError> {
        self.counted(self.check_write(key, value))?;
        let result = match &self.backend {
            Backend::Embedded(e) => e.compare_and_set(key, expected, value),
            Backend::Redis(r) => r.compare_and_set(key, expected, value).await,
        };
        self.counted(result)
    }

    /// returns whether the key existed
    pub async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        self.counted(check_key(key))?;
        let result = match &self.backend {
            Backend::Embedded(e) => e.delete(key),
            Backend::Redis(r) => r.delete(key).await,
        };
        self.counted(result)
    }

    /// delete only if the key's version is `expected`, else Conflict{current}
    pub async fn compare_and_delete(&self, key: &str, expected: u64) -> Result<(), StoreError> {
        self.counted(check_key(key))?;
        let result = match &self.backend {
            Backend::Embedded(e) => e.compare_and_delete(key, expected),
            Backend::Redis(r) => r.compare_and_delete(key, expected).await,
        };
        self.counted(result)
    }

    /// every key starting with `prefix`, sorted by key
    pub async fn scan_prefix(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        let result = match &self.backend {
            Backend::Embedded(e) => Ok(e.scan_prefix(prefix)),
            Backend::Redis(r) => r.scan_prefix(prefix).await,
        };
        self.counted(result)
    }

    /// number of keys and total value bytes under `prefix` (for "bytes stored" reports)
    pub async fn usage(&self, prefix: &str) -> Result<(usize, usize), StoreError> {
        let result = match &self.backend {
            Backend::Embedded(e) => Ok(e.usage(prefix)),
            Backend::Redis(r) => r.usage(prefix).await,
        };
        self.counted(result)
    }

    /// Forces what a file-backed store wrote to the disk (fsync); nothing to
    /// do for a memory or Redis store.
    pub fn sync(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Embedded(e) => e.sync(),
            Backend::Redis(_) => Ok(()),
        }
    }

    fn check_write(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        if value.len() > self.max_value_len {
            return Err(StoreError::TooLarge { what: "value", len: value.len(), max: self.max_value_len });
        }
        Ok(())
    }
}

fn count_failure(counters: &Counters, e: &StoreError) {
    counters.incr(match e {
        StoreError::Conflict { .. } => "conflict",
        StoreError::TooLarge { .. } => "too_large",
        StoreError::Io(_) => "io_error",
        StoreError::Redis(_) => "redis_error",
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Timeout { .. } => "timeout",
        StoreError::OutcomeUnknown { .. } => "outcome_unknown",
        StoreError::Corrupt(_) => "corrupt",
    });
}

fn check_key(key: &str) -> Result<(), StoreError> {
    if key.len() > MAX_KEY_LEN {
        return Err(StoreError::TooLarge { what: "key", len: key.len(), max: MAX_KEY_LEN });
    }
    Ok(())
}
