//! The store in a Redis server. Key `k` is the hash `{namespace}:k` with
//! fields `v` (version) and `d` (value); every write is a Lua script, so
//! checking the version and writing are one atomic step on the server.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Script, Value};

use crate::{StoreError, Versioned};

/// Bound on connecting to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on one answer of the server.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Keys asked of each SCAN step, and reads sent in one pipeline.
const BATCH: usize = 1000;

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

pub(crate) struct RedisStore {
    conn: MultiplexedConnection,
    /// `{namespace}:`, put before every key.
    prefix: String,
    put: Script,
    compare_and_set: Script,
    compare_and_delete: Script,
}

impl RedisStore {
    pub(crate) async fn connect(url: &str, namespace: &str) -> Result<RedisStore, StoreError> {
        let client = Client::open(url)?;
        let config =
            AsyncConnectionConfig::new().set_connection_timeout(CONNECT_TIMEOUT).set_response_timeout(RESPONSE_TIMEOUT);
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| StoreError::Redis(format!("cannot connect to {url}: {e}")))?;
        Ok(RedisStore {
            conn,
            prefix: format!("{namespace}:"),
            put: Script::new(PUT),
            compare_and_set: Script::new(COMPARE_AND_SET),
            compare_and_delete: Script::new(COMPARE_AND_DELETE),
        })
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    pub(crate) async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let key = self.key(key);
        let fields: Value = hmget(&key).query_async(&mut self.conn.clone()).await?;
        entry(&key, fields)
    }

    pub(crate) async fn put(&self, key: &str, value: &[u8]) -> Result<u64, StoreError> {
        let version: u64 = self.put.key(self.key(key)).arg(value).invoke_async(&mut self.conn.clone()).await?;
        Ok(version)
    }

    pub(crate) async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<u64>,
        value: &[u8],
    ) -> Result<u64, StoreError> {
        let expected = expected.map(|v| v.to_string()).unwrap_or_default();
        let answer: Vec<u64> = self
            .compare_and_set
            .key(self.key(key))
            .arg(expected)
            .arg(value)
            .invoke_async(&mut self.conn.clone())
            .await?;
        match answer[..] {
            [1, version] => Ok(version),
            [0] => Err(StoreError::Conflict { current: None }),
            [0, current] => Err(StoreError::Conflict { current: Some(current) }),
            _ => Err(StoreError::Redis(format!("unexpected answer {answer:?} of the compare-and-set script"))),
        }
    }

    pub(crate) async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let removed: u64 = redis::cmd("DEL").arg(self.key(key)).query_async(&mut self.conn.clone()).await?;
        Ok(removed > 0)
    }

    pub(crate) async fn compare_and_delete(&self, key: &str, expected: u64) -> Result<(), StoreError> {
        let answer: Vec<u64> = self
            .compare_and_delete
            .key(self.key(key))
            .arg(expected.to_string())
            .invoke_async(&mut self.conn.clone())
            .await?;
        match answer[..] {
            [1] => Ok(()),
            [0] => Err(StoreError::Conflict { current: None }),
            [0, current] => Err(StoreError::Conflict { current: Some(current) }),
            _ => Err(StoreError::Redis(format!("unexpected answer {answer:?} of the compare-and-delete script"))),
        }
    }

    pub(crate) async fn scan_prefix(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        let keys = self.scan_keys(prefix).await?;
        let mut out = Vec::with_capacity(keys.len());
        for batch in keys.chunks(BATCH) {
            let mut pipe = redis::pipe();
            for key in batch {
                pipe.add_command(hmget(key));
            }
            let answers: Vec<Value> = pipe.query_async(&mut self.conn.clone()).await?;
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
        let keys = self.scan_keys(prefix).await?;
        let (mut count, mut bytes) = (0, 0);
        for batch in keys.chunks(BATCH) {
            let mut pipe = redis::pipe();
            for key in batch {
                pipe.cmd("EXISTS").arg(key).cmd("HSTRLEN").arg(key).arg("d");
            }
            let answers: Vec<usize> = pipe.query_async(&mut self.conn.clone()).await?;
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
    /// and without duplicates (SCAN may return a key twice).
    async fn scan_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let pattern = format!("{}{}*", glob_escape(&self.prefix), glob_escape(prefix));
        let mut conn = self.conn.clone();
        let mut keys = BTreeSet::new();
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(BATCH)
                .query_async(&mut conn)
                .await?;
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
