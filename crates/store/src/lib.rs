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
//! - `embedded`: the in-process ordered map behind a mutex.
//! - `log`: the file an embedded store persists to (format below): encoding,
//!   replay, compaction.
//! - `redis_store`: the Redis implementation (key layout below).
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
//! found; keys are returned without the namespace. A Redis store does not
//! reconnect: once its connection is lost, every call fails with
//! [`StoreError::Redis`] until a new store is opened.

mod embedded;
mod log;
pub mod redis_server;
mod redis_store;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// A value and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub value: Vec<u8>,
    pub version: u64,
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
    /// any redis error, with its message.
    #[error("redis: {0}")]
    Redis(String),
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
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Embedded,
            path: None,
            url: None,
            namespace: DEFAULT_NAMESPACE.to_string(),
            max_value_len: DEFAULT_MAX_VALUE_LEN,
        }
    }
}

/// The store: a cheap handle to clone and share between tasks.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    max_value_len: usize,
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
    fn new(backend: Backend) -> Store {
        Store { backend, max_value_len: DEFAULT_MAX_VALUE_LEN }
    }

    /// An embedded store in memory only.
    pub fn memory() -> Store {
        Store::new(Backend::Embedded(Arc::new(Embedded::memory())))
    }

    /// An embedded store persisted to `path`, with what the file holds
    /// (created if missing).
    pub fn open_file(path: &Path) -> Result<Store, StoreError> {
        Ok(Store::new(Backend::Embedded(Arc::new(Embedded::open_file(path)?))))
    }

    /// A store in the Redis server at `url`, keys under `namespace`.
    pub async fn connect_redis(url: &str, namespace: &str) -> Result<Store, StoreError> {
        Ok(Store::new(Backend::Redis(Arc::new(RedisStore::connect(url, namespace).await?))))
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
                Store::connect_redis(url, &cfg.namespace).await?
            }
        };
        Ok(store.with_max_value_len(cfg.max_value_len))
    }

    /// The same store with another bound on one value.
    pub fn with_max_value_len(mut self, max_value_len: usize) -> Store {
        self.max_value_len = max_value_len;
        self
    }

    pub fn kind(&self) -> StoreKind {
        match self.backend {
            Backend::Embedded(_) => StoreKind::Embedded,
            Backend::Redis(_) => StoreKind::Redis,
        }
    }

    pub async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        check_key(key)?;
        match &self.backend {
            Backend::Embedded(e) => Ok(e.get(key)),
            Backend::Redis(r) => r.get(key).await,
        }
    }

    /// unconditional write; returns the new version (versions start at 1 and grow by 1 per write of that key)
    pub async fn put(&self, key: &str, value: &[u8]) -> Result<u64, StoreError> {
        self.check_write(key, value)?;
        match &self.backend {
            Backend::Embedded(e) => e.put(key, value),
            Backend::Redis(r) => r.put(key, value).await,
        }
    }

    /// write only if the key's version is `expected` (None = the key must be absent); returns the new version, else Conflict{current}
    pub async fn compare_and_set(&self, key: &str, expected: Option<u64>, value: &[u8]) -> Result<u64, StoreError> {
        self.check_write(key, value)?;
        match &self.backend {
            Backend::Embedded(e) => e.compare_and_set(key, expected, value),
            Backend::Redis(r) => r.compare_and_set(key, expected, value).await,
        }
    }

    /// returns whether the key existed
    pub async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        check_key(key)?;
        match &self.backend {
            Backend::Embedded(e) => e.delete(key),
            Backend::Redis(r) => r.delete(key).await,
        }
    }

    /// delete only if the key's version is `expected`, else Conflict{current}
    pub async fn compare_and_delete(&self, key: &str, expected: u64) -> Result<(), StoreError> {
        check_key(key)?;
        match &self.backend {
            Backend::Embedded(e) => e.compare_and_delete(key, expected),
            Backend::Redis(r) => r.compare_and_delete(key, expected).await,
        }
    }

    /// every key starting with `prefix`, sorted by key
    pub async fn scan_prefix(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        match &self.backend {
            Backend::Embedded(e) => Ok(e.scan_prefix(prefix)),
            Backend::Redis(r) => r.scan_prefix(prefix).await,
        }
    }

    /// number of keys and total value bytes under `prefix` (for "bytes stored" reports)
    pub async fn usage(&self, prefix: &str) -> Result<(usize, usize), StoreError> {
        match &self.backend {
            Backend::Embedded(e) => Ok(e.usage(prefix)),
            Backend::Redis(r) => r.usage(prefix).await,
        }
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

fn check_key(key: &str) -> Result<(), StoreError> {
    if key.len() > MAX_KEY_LEN {
        return Err(StoreError::TooLarge { what: "key", len: key.len(), max: MAX_KEY_LEN });
    }
    Ok(())
}
