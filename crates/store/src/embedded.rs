//! The embedded store: a hash map behind a mutex (a scan by prefix reads
//! every key: it is rare, a lookup is not), optionally persisted
//! to a [`Log`]. Every operation is short and never awaits while holding the
//! lock; a persisted write is in the log (handed to the OS) before the map
//! changes and before the call returns. A compaction (rare: the log must
//! have doubled) runs inside the write that triggers it.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use crate::log::{Log, Record};
use crate::{Change, Map, StoreError, Versioned};

#[derive(Debug)]
pub(crate) struct Embedded {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    map: Map,
    log: Option<Log>,
    /// Every write since the last [`Embedded::take_changes`], when the
    /// store feeds its changes to replicas (`crate::replica`).
    feed: Option<Vec<Change>>,
}

impl State {
    /// The version and value length `key` holds now.
    fn current(&self, key: &str) -> Option<(u64, usize)> {
        self.map.get(key).map(|c| (c.version, c.value.len()))
    }

    /// Logs then applies a write of `key`; `current` is [`State::current`].
    fn write(&mut self, key: &str, current: Option<(u64, usize)>, value: &[u8]) -> Result<u64, StoreError> {
        let version = current.map_or(1, |(v, _)| v + 1);
        let previous = current.map(|(_, len)| len);
        if let Some(log) = &mut self.log {
            log.append(&Record::Put { key, version, value }, previous)?;
        }
        self.map.insert(key.to_string(), Versioned { value: value.to_vec(), version });
        if let Some(feed) = &mut self.feed {
            feed.push(Change { key: key.to_string(), version, value: Some(value.to_vec()) });
        }
        self.after_write();
        Ok(version)
    }

    /// Logs then applies the delete of `key`, which holds a value of `len` bytes.
    fn remove(&mut self, key: &str, len: usize) -> Result<(), StoreError> {
        if let Some(log) = &mut self.log {
            log.append(&Record::Delete { key }, Some(len))?;
        }
        if let Some(gone) = self.map.remove(key) {
            if let Some(feed) = &mut self.feed {
                feed.push(Change { key: key.to_string(), version: gone.version, value: None });
            }
        }
        self.after_write();
        Ok(())
    }

    fn after_write(&mut self) {
        if let Some(log) = &mut self.log {
            log.maybe_compact(&self.map);
        }
    }

    fn prefixed<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a String, &'a Versioned)> + 'a {
        self.map.iter().filter(move |(k, _)| k.starts_with(prefix))
    }
}

impl Embedded {
    pub(crate) fn memory() -> Embedded {
        Embedded { state: Mutex::new(State::default()) }
    }

    pub(crate) fn open_file(path: &Path) -> Result<Embedded, StoreError> {
        let (log, map) = Log::open(path)?;
        Ok(Embedded { state: Mutex::new(State { map, log: Some(log), feed: None }) })
    }

    /// In memory, every write kept for [`Embedded::take_changes`].
    pub(crate) fn memory_with_feed() -> Embedded {
        Embedded { state: Mutex::new(State { feed: Some(Vec::new()), ..State::default() }) }
    }

    pub(crate) fn take_changes(&self) -> Vec<Change> {
        self.lock().feed.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic cannot happen between logging and applying a write, so the
        // state behind a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn get(&self, key: &str) -> Option<Versioned> {
        self.lock().map.get(key).cloned()
    }

    pub(crate) fn version(&self, key: &str) -> Option<u64> {
        self.lock().map.get(key).map(|v| v.version)
    }

    pub(crate) fn put(&self, key: &str, value: &[u8]) -> Result<u64, StoreError> {
        let mut state = self.lock();
        let current = state.current(key);
        state.write(key, current, value)
    }

    pub(crate) fn compare_and_set(&self, key: &str, expected: Option<u64>, value: &[u8]) -> Result<u64, StoreError> {
        let mut state = self.lock();
        let current = state.current(key);
        let version = current.map(|(v, _)| v);
        if version != expected {
            return Err(StoreError::Conflict { current: version });
        }
        state.write(key, current, value)
    }

    pub(crate) fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let mut state = self.lock();
        match state.current(key) {
            Some((_, len)) => state.remove(key, len).map(|()| true),
            None => Ok(false),
        }
    }

    pub(crate) fn compare_and_delete(&self, key: &str, expected: u64) -> Result<(), StoreError> {
        let mut state = self.lock();
        match state.current(key) {
            Some((version, len)) if version == expected => state.remove(key, len),
            other => Err(StoreError::Conflict { current: other.map(|(v, _)| v) }),
        }
    }

    pub(crate) fn scan_prefix(&self, prefix: &str) -> Vec<(String, Versioned)> {
        let mut found: Vec<(String, Versioned)> =
            self.lock().prefixed(prefix).map(|(k, v)| (k.clone(), v.clone())).collect();
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        found
    }

    pub(crate) fn usage(&self, prefix: &str) -> (usize, usize) {
        self.lock().prefixed(prefix).fold((0, 0), |(n, bytes), (_, v)| (n + 1, bytes + v.value.len()))
    }

    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        match &self.lock().log {
            Some(log) => log.sync(),
            None => Ok(()),
        }
    }
}
