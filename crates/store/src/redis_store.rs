//! The store in a Redis server. Key `k` is the hash `{namespace}:k` with
//! fields `v` (version) and `d` (value); every write is a Lua script, so
//! checking the version and writing are one atomic step on the server.
//!
//! # The connection
//! One multiplexed connection carries the requests of every task using the
//! store ([`Link`]). Each request has [`RedisStore::timeout`] to be answered.
//! A request that fails for the connection (an I/O error, the connection
//! closed, or no answer in time while nothing at all came back on it) drops
//! it, and the next operation connects again. A connect attempt reserves the
//! next one a backoff later (from [`BACKOFF_FIRST`], doubled after each
//! attempt up to [`BACKOFF_MAX`], back to the first when a connection
//! answers); until then every operation fails at once with
//! [`StoreError::Unavailable`]: nothing waits in a queue, nothing loops.
//!
//! No request is ever sent twice. A write whose answer was lost (the
//! connection broke or the timeout passed after it was handed to the
//! connection) is [`StoreError::OutcomeUnknown`]: the server may have run
//! it, or may still run it. A Lua script runs whole or not at all, so a
//! compare-and-set is never half-applied, whatever happens to the
//! connection.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mobicore_common::counters::Counters;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, RedisResult, Script, Value};

use crate::{StoreError, Versioned};

/// Keys asked of each SCAN step, and reads sent in one pipeline.
const BATCH: usize = 1000;
/// The wait after a first failed connect attempt.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two connect attempts.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Unconditional write: bumps the version (1 if the key was absent).
const PUT: &str = r"
local v = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSET', KEYS[1], 'd', ARGV[1])
return v
";

/// Write if the version is ARGV[1] ('' = absent): {1, new version}, or
/// {0, current version} / {0} (absent) on a conflict.
const COMPARE_AND_SET: &str = r"
local cur = redis.call('HGET', KEYS[1], 'v')
if (ARGV[1] == '' and cur) or (ARGV[1] ~= '' and cur ~= ARGV[1]) then
  if cur then return {0, tonumber(cur)} end
  return {0}
end
local v = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSET', KEYS[1], 'd', ARGV[2])
return {1, v}
";

/// Delete if the version is ARGV[1]: {1}, or a conflict as above.
const COMPARE_AND_DELETE: &str = r"
local cur = redis.call('HGET', KEYS[1], 'v')
if cur ~= ARGV[1] then
  if cur then return {0, tonumber(cur)} end
  return {0}
end
redis.call('DEL', KEYS[1])
return {1}
";

/// A store operation, for error messages and to tell writes from reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    Put,
    CompareAndSet,
    Delete,
    CompareAndDelete,
    Scan,
    Usage,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Put => "put",
            Op::CompareAndSet => "compare-and-set",
            Op::Delete => "delete",
            Op::CompareAndDelete => "compare-and-delete",
            Op::Scan => "scan",
            Op::Usage => "usage",
        }
    }

    fn writes(self) -> bool {
        matches!(self, Op::Put | Op::CompareAndSet | Op::Delete | Op::CompareAndDelete)
    }

    /// The error for a request of this operation whose answer was lost.
    fn lost(self, cause: String) -> StoreError {
        if self.writes() {
            StoreError::OutcomeUnknown { op: self.name(), cause }
        } else {
            StoreError::Unavailable(format!("{}: {cause}", self.name()))
        }
    }
}

/// The state of the connection, shared by every task using the store.
struct Link {
    /// The connection in use; None when lost (or never made).
    live: Option<Live>,
    /// No connect attempt before this.
    next_attempt: Instant,
    /// How long the attempt after the next one waits.
    backoff: Duration,
    /// Why there is no connection, for the errors of operations meanwhile.
    down_because: String,
    /// Connections made so far.
    connections: u64,
}

/// One connection.
#[derive(Clone)]
struct Live {
    conn: MultiplexedConnection,
    /// Which connection of the store (1 = the first).
    number: u64,
    /// Answers received on it, replies with an error included.
    answers: Arc<AtomicU64>,
}

pub(crate) struct RedisStore {
    client: Client,
    /// The URL, for messages.
    url: String,
    /// Bound on connecting, and on waiting for each answer.
    timeout: Duration,
    link: Mutex<Link>,
    /// Held by the one task connecting, so that others wait for its attempt
    /// instead of making their own.
    connecting: tokio::sync::Mutex<()>,
    counters: Counters,
    /// `{namespace}:`, put before every key.
    prefix: String,
    put: Script,
    compare_and_set: Script,
    compare_and_delete: Script,
}

impl RedisStore {
    /// Connects to `url` (an error if it cannot); `timeout` bounds each
    /// answer and each connect attempt, and failures are counted in
    /// `counters`.
    pub(crate) async fn connect(
        url: &str,
        namespace: &str,
        timeout: Duration,
        counters: Counters,
    ) -> Result<RedisStore, StoreError> {
        let client = Client::open(url).map_err(|e| StoreError::Redis(format!("bad redis URL {url:?}: {e}")))?;
        let store = RedisStore {
            client,
            url: url.to_string(),
            timeout,
            link: Mutex::new(Link {
                live: None,
                next_attempt: Instant::now(),
                backoff: BACKOFF_FIRST,
                down_because: "not connected yet".to_string(),
                connections: 0,
            }),
            connecting: tokio::sync::Mutex::new(()),
            counters,
            prefix: format!("{namespace}:"),
            put: Script::new(PUT),
            compare_and_set: Script::new(COMPARE_AND_SET),
            compare_and_delete: Script::new(COMPARE_AND_DELETE),
        };
        store.connection().await?;
        Ok(store)
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn link(&self) -> MutexGuard<'_, Link> {
        // A panic elsewhere while holding it leaves a consistent state.
        self.link.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection in use, or a new one if none and the backoff allows
    /// an attempt; else [`StoreError::Unavailable`] at once.
    async fn connection(&self) -> Result<Live, StoreError> {
        if let Some(live) = self.ready()? {
            return Ok(live);
        }
        let _one_at_a_time = self.connecting.lock().await;
        // Another task may have connected, or failed to, meanwhile.
        if let Some(live) = self.ready()? {
            return Ok(live);
        }
        // Reserve the next attempt before this one: an attempt given up
        // half-way (its caller dropped) still counts.
        let number = {
            let mut link = self.link();
            link.next_attempt = Instant::now() + link.backoff;
            link.backoff = (link.backoff * 2).min(BACKOFF_MAX);
            link.connections + 1
        };
        let config = AsyncConnectionConfig::new().set_connection_timeout(self.timeout);
        let attempt =
            tokio::time::timeout(self.timeout, self.client.get_multiplexed_async_connection_with_config(&config));
        let failure = match attempt.await {
            Ok(Ok(conn)) => {
                let live = Live { conn, number, answers: Arc::new(AtomicU64::new(0)) };
                let mut link = self.link();
                link.live = Some(live.clone());
                link.connections = number;
                if number > 1 {
                    self.counters.incr("redis_reconnected");
                    tracing::info!(url = %self.url, "store: connected to redis again");
                }
                return Ok(live);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", self.timeout),
        };
        self.counters.incr("redis_connect_failed");
        let message = format!("cannot connect to {}: {failure}", self.url);
        tracing::warn!(url = %self.url, error = %failure, "store: cannot connect to redis");
        self.link().down_because = message.clone();
        Err(StoreError::Unavailable(message))
    }

    /// The connection in use (Some), none but an attempt is allowed (None),
    /// or the error of an operation while waiting for the next attempt.
    fn ready(&self) -> Result<Option<Live>, StoreError> {
        let link = self.link();
        if let Some(live) = &link.live {
            return Ok(Some(live.clone()));
        }
        let wait = link.next_attempt.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return Ok(None);
        }
        Err(StoreError::Unavailable(format!(
            "{}; next connection attempt in {} ms",
            link.down_because,
            wait.as_millis().max(1)
        )))
    }

    /// Drops connection `live` (if still the one in use) for `cause`.
    fn drop_connection(&self, live: &Live, cause: &str) {
        let mut link = self.link();
        if link.live.as_ref().is_some_and(|l| l.number == live.number) {
            link.live = None;
            link.down_because = format!("connection to {} lost: {cause}", self.url);
            self.counters.incr("redis_connection_lost");
            tracing::warn!(url = %self.url, error = %cause, "store: redis connection lost");
        }
    }

    /// Runs one request of `op` (`request` gets the connection): bounded by
    /// the timeout, never retried, and what it says about the connection
    /// taken into account.
    async fn run<T, F, Fut>(&self, op: Op, request: F) -> Result<T, StoreError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let live = self.connection().await?;
        let answers_before = live.answers.load(Ordering::Relaxed);
        match tokio::time::timeout(self.timeout, request(live.conn.clone())).await {
            Ok(Ok(answer)) => {
                self.answered(&live);
                Ok(answer)
            }
            Ok(Err(e)) if breaks_connection(&e) => {
                let cause = e.to_string();
                self.drop_connection(&live, &cause);
                Err(op.lost(cause))
            }
            Ok(Err(e)) => {
                // The server answered, with an error: nothing was done.
                self.answered(&live);
                Err(StoreError::Redis(e.to_string()))
            }
            Err(_) => {
                let cause = format!("no answer within {:?}", self.timeout);
                // Nothing at all came back meanwhile: the connection is stuck
                // (or the server is), try a new one next time.
                if live.answers.load(Ordering::Relaxed) == answers_before {
                    self.drop_connection(&live, &cause);
                }
                if op.writes() {
                    Err(op.lost(cause))
                } else {
                    Err(StoreError::Timeout { op: op.name(), after: self.timeout })
                }
            }
        }
    }

    /// An answer came on `live`: the first one ends the backoff.
    fn answered(&self, live: &Live) {
        if live.answers.fetch_add(1, Ordering::Relaxed) == 0 {
            self.link().backoff = BACKOFF_FIRST;
        }
    }

    pub(crate) async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let key = self.key(key);
        let cmd = hmget(&key);
        let fields: Value = self.run(Op::Get, |mut c| async move { cmd.query_async(&mut c).await }).await?;
        entry(&key, fields)
    }

    pub(crate) async fn put(&self, key: &str, value: &[u8]) -> Result<u64, StoreError> {
        let mut script = self.put.prepare_invoke();
        script.key(self.key(key)).arg(value);
        self.run(Op::Put, |mut c| async move { script.invoke_async(&mut c).await }).await
    }

    pub(crate) async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<u64>,
        value: &[u8],
    ) -> Result<u64, StoreError> {
        let expected = expected.map(|v| v.to_string()).unwrap_or_default();
        let mut script = self.compare_and_set.prepare_invoke();
        script.key(self.key(key)).arg(expected).arg(value);
        let answer: Vec<u64> =
            self.run(Op::CompareAndSet, |mut c| async move { script.invoke_async(&mut c).await }).await?;
        match answer[..] {
            [1, version] => Ok(version),
            [0] => Err(StoreError::Conflict { current: None }),
            [0, current] => Err(StoreError::Conflict { current: Some(current) }),
            _ => Err(StoreError::Redis(format!("unexpected answer {answer:?} of the compare-and-set script"))),
        }
    }

    pub(crate) async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.key(key));
        let removed: u64 = self.run(Op::Delete, |mut c| async move { cmd.query_async(&mut c).await }).await?;
        Ok(removed > 0)
    }

    pub(crate) async fn compare_and_delete(&self, key: &str, expected: u64) -> Result<(), StoreError> {
        let mut script = self.compare_and_delete.prepare_invoke();
        script.key(self.key(key)).arg(expected.to_string());
        let answer: Vec<u64> =
            self.run(Op::CompareAndDelete, |mut c| async move { script.invoke_async(&mut c).await }).await?;
        match answer[..] {
            [1] => Ok(()),
            [0] => Err(StoreError::Conflict { current: None }),
            [0, current] => Err(StoreError::Conflict { current: Some(current) }),
            _ => Err(StoreError::Redis(format!("unexpected answer {answer:?} of the compare-and-delete script"))),
        }
    }

    pub(crate) async fn scan_prefix(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        let keys = self.scan_keys(Op::Scan, prefix).await?;
        let mut out = Vec::with_capacity(keys.len());
        for batch in keys.chunks(BATCH) {
            let mut pipe = redis::pipe();
            for key in batch {
                pipe.add_command(hmget(key));
            }
            let answers: Vec<Value> = self.run(Op::Scan, |mut c| async move { pipe.query_async(&mut c).await }).await?;
            for (key, fields) in batch.iter().zip(answers) {
                // A key deleted since the scan is left out.
                if let Some(v) = entry(key, fields)? {
                    out.push((key[self.prefix.len()..].to_string(), v));
                }
            }
        }
        Ok(out)
    }

    pub(crate) async fn usage(&self, prefix: &str) -> Result<(usize, usize), StoreError> {
        let keys = self.scan_keys(Op::Usage, prefix).await?;
        let (mut count, mut bytes) = (0, 0);
        for batch in keys.chunks(BATCH) {
            let mut pipe = redis::pipe();
            for key in batch {
                pipe.cmd("EXISTS").arg(key).cmd("HSTRLEN").arg(key).arg("d");
            }
            let answers: Vec<usize> =
                self.run(Op::Usage, |mut c| async move { pipe.query_async(&mut c).await }).await?;
            for answer in answers.chunks_exact(2) {
                // A key deleted since the scan is left out.
                if answer[0] > 0 {
                    count += 1;
                    bytes += answer[1];
                }
            }
        }
        Ok((count, bytes))
    }

    /// Every full Redis key of this namespace starting with `prefix`, sorted
    /// and without duplicates (SCAN may return a key twice). Each SCAN step
    /// has the timeout to answer.
    async fn scan_keys(&self, op: Op, prefix: &str) -> Result<Vec<String>, StoreError> {
        let pattern = format!("{}{}*", glob_escape(&self.prefix), glob_escape(prefix));
        let mut keys = BTreeSet::new();
        let mut cursor = 0u64;
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(BATCH);
            let (next, batch): (u64, Vec<Vec<u8>>) =
                self.run(op, |mut c| async move { cmd.query_async(&mut c).await }).await?;
            for raw in batch {
                let key = String::from_utf8(raw)
                    .map_err(|e| StoreError::Corrupt(format!("redis key {:?} is not UTF-8", e.as_bytes())))?;
                keys.insert(key);
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        Ok(keys.into_iter().collect())
    }
}

/// Whether `e` means the connection is no longer usable (rather than an
/// error reply of the server).
fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error() || e.is_unrecoverable_error()
}

fn hmget(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(key).arg("v").arg("d");
    cmd
}

/// The entry of Redis key `key` from the answer to [`hmget`] (both fields
/// absent: no entry).
fn entry(key: &str, fields: Value) -> Result<Option<Versioned>, StoreError> {
    let not_entry = || StoreError::Corrupt(format!("redis key {key}: not a store entry (needs fields v and d)"));
    let Value::Array(fields) = fields else { return Err(not_entry()) };
    match <[Value; 2]>::try_from(fields).map_err(|_| not_entry())? {
        [Value::Nil, Value::Nil] => Ok(None),
        [Value::BulkString(v), Value::BulkString(value)] => {
            let version = std::str::from_utf8(&v).ok().and_then(|v| v.parse().ok()).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "redis key {key}: version {:?} is not a number",
                    String::from_utf8_lossy(&v)
                ))
            })?;
            Ok(Some(Versioned { value, version }))
        }
        _ => Err(not_entry()),
    }
}

/// `s` with the glob characters of a SCAN MATCH pattern escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("plain:key"), "plain:key");
        assert_eq!(glob_escape(r"a*b?c[d]e\f"), r"a\*b\?c\[d\]e\\f");
    }

    fn fields(v: Option<&[u8]>, d: Option<&[u8]>) -> Value {
        let field = |f: Option<&[u8]>| f.map_or(Value::Nil, |b| Value::BulkString(b.to_vec()));
        Value::Array(vec![field(v), field(d)])
    }

    #[test]
    fn entries_need_both_fields() {
        assert_eq!(entry("k", fields(None, None)).unwrap(), None);
        assert_eq!(
            entry("k", fields(Some(b"3"), Some(b"x"))).unwrap(),
            Some(Versioned { value: b"x".to_vec(), version: 3 })
        );
        assert!(matches!(entry("k", fields(Some(b"3"), None)), Err(StoreError::Corrupt(_))));
        assert!(matches!(entry("k", fields(Some(b"x"), Some(b""))), Err(StoreError::Corrupt(_))));
        assert!(matches!(entry("k", Value::Nil), Err(StoreError::Corrupt(_))));
    }
}
