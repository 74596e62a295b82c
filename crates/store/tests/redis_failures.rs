//! A Redis store when the server fails: killed (SIGKILL) and restarted on
//! the same socket, or frozen (SIGSTOP) and thawed. Operations fail with
//! clear errors, within a bound, never panic; the same store handle serves
//! again once the server does; failures are counted; compare-and-set stays
//! atomic and is never sent twice.
//!
//! Timing: the store's timeout is 1 s; a test only asserts that an
//! operation ends within [`BOUND`] (several seconds) and waits for recovery
//! by polling with a deadline of [`RECOVERY`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mobicore_store::redis_server::RedisServer;
use mobicore_store::{Store, StoreConfig, StoreError, StoreKind, Versioned};

/// The store's timeout in these tests.
const TIMEOUT: Duration = Duration::from_secs(1);
/// What any one operation may take, whatever the server does: the timeout
/// to connect plus the timeout of the request, and a wide margin.
const BOUND: Duration = Duration::from_secs(10);
/// How long the store may take to serve again once the server does.
const RECOVERY: Duration = Duration::from_secs(30);

fn v(value: &[u8], version: u64) -> Versioned {
    Versioned { value: value.to_vec(), version }
}

async fn open(server: &RedisServer, namespace: &str) -> Store {
    let cfg = StoreConfig {
        kind: StoreKind::Redis,
        url: Some(server.url()),
        namespace: namespace.into(),
        timeout_ms: TIMEOUT.as_millis() as u64,
        ..StoreConfig::default()
    };
    Store::open(&cfg).await.expect("connect to redis-server")
}

/// `op`'s result, after checking it came within [`BOUND`].
async fn bounded<T>(what: &str, op: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(BOUND, op).await {
        Ok(result) => result,
        Err(_) => panic!("{what} hung for {BOUND:?}"),
    }
}

/// Polls `get(key)` until it succeeds, within [`RECOVERY`].
async fn until_served(store: &Store, key: &str) -> Option<Versioned> {
    let started = Instant::now();
    loop {
        match bounded("get while recovering", store.get(key)).await {
            Ok(found) => return found,
            Err(e) if started.elapsed() < RECOVERY => {
                assert!(transient(&e), "unexpected error while recovering: {e:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the store still fails {RECOVERY:?} after the server is back: {e}"),
        }
    }
}

fn transient(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable(_) | StoreError::Timeout { .. } | StoreError::OutcomeUnknown { .. })
}

/// A read that failed because the server is gone.
fn assert_read_failed<T: std::fmt::Debug>(what: &str, result: Result<T, StoreError>) {
    match result {
        Err(e @ StoreError::Unavailable(_)) => assert!(e.to_string().starts_with("redis unavailable: "), "{e}"),
        other => panic!("{what}: expected redis unavailable, got {other:?}"),
    }
}

/// A write that failed because the server is gone: not sent, or sent with
/// its answer lost.
fn assert_write_failed<T: std::fmt::Debug>(what: &str, result: Result<T, StoreError>) {
    match result {
        Err(StoreError::Unavailable(_)) => {}
        Err(e @ StoreError::OutcomeUnknown { .. }) => {
            assert!(e.to_string().contains("may or may not have been applied"), "{e}")
        }
        other => panic!("{what}: expected redis unavailable or outcome unknown, got {other:?}"),
    }
}

#[tokio::test]
async fn a_killed_server_fails_every_operation_and_the_same_handle_serves_after_its_restart() {
    let mut server = RedisServer::start_persistent().expect("start redis-server");
    let store = open(&server, "kill").await;
    store.put("ue:1", b"one").await.unwrap();
    assert_eq!(store.compare_and_set("ue:1", Some(1), b"two").await.unwrap(), 2);
    store.put("ue:2", b"other").await.unwrap();

    server.kill().unwrap();
    // The first operation finds the connection lost: a write sent on it has
    // an unknown outcome, and is not sent again.
    assert_write_failed(
        "compare-and-set",
        bounded("compare-and-set", store.compare_and_set("ue:1", Some(2), b"x")).await,
    );
    // Every operation fails, within the bound, with an error that says so.
    for _ in 0..3 {
        assert_read_failed("get", bounded("get", store.get("ue:1")).await);
        assert_read_failed("scan", bounded("scan", store.scan_prefix("ue:")).await);
        assert_read_failed("usage", bounded("usage", store.usage("ue:")).await);
        assert_write_failed("put", bounded("put", store.put("ue:3", b"x")).await);
        assert_write_failed("compare-and-set", bounded("cas", store.compare_and_set("ue:1", Some(2), b"x")).await);
        assert_write_failed("delete", bounded("delete", store.delete("ue:2")).await);
        assert_write_failed("compare-and-delete", bounded("cad", store.compare_and_delete("ue:2", 1)).await);
    }
    // Operations while the server is down fail at once: between connect
    // attempts (a growing backoff) nothing is tried, nothing queued.
    let counters = store.counters();
    let started = Instant::now();
    for _ in 0..1000 {
        assert_read_failed("get", store.get("ue:1").await);
    }
    // Attempts go on, one per backoff, however many operations come.
    while counters.value("redis_connect_failed") < 3 {
        assert!(started.elapsed() < RECOVERY, "no connect attempt");
        for _ in 0..100 {
            assert_read_failed("get", store.get("ue:1").await);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let attempts = counters.value("redis_connect_failed");
    assert!(
        attempts as u128 <= 2 + started.elapsed().as_millis() / 100,
        "{attempts} connect attempts in {:?}",
        started.elapsed()
    );
    assert_eq!(counters.value("redis_connection_lost"), 1);
    assert!(counters.value("unavailable") >= 1000);
    assert_eq!(counters.value("redis_reconnected"), 0);
    let attempts_before = counters.value("redis_connect_failed");

    server.restart().unwrap();
    // Same handle, same socket: served again, with what the server had
    // answered before it died (its append-only file) and nothing more.
    assert_eq!(until_served(&store, "ue:1").await, Some(v(b"two", 2)));
    assert_eq!(store.get("ue:2").await.unwrap(), Some(v(b"other", 1)));
    assert_eq!(store.compare_and_set("ue:1", Some(2), b"three").await.unwrap(), 3);
    assert!(matches!(
        store.compare_and_set("ue:1", Some(2), b"stale").await,
        Err(StoreError::Conflict { current: Some(3) })
    ));
    assert_eq!(store.scan_prefix("ue:").await.unwrap().len(), 2);
    assert_eq!(store.usage("ue:").await.unwrap(), (2, 10));
    assert_eq!(counters.value("redis_reconnected"), 1);
    assert_eq!(counters.value("redis_connection_lost"), 1);
    assert!(counters.value("redis_connect_failed") >= attempts_before);
    assert_eq!(counters.value("conflict"), 1);
    assert!(counters.prometheus("store").contains("mobicore_store_redis_reconnected 1\n"));
}

#[tokio::test]
async fn a_store_opened_while_the_server_is_down_says_so() {
    let mut server = RedisServer::start().expect("start redis-server");
    server.kill().unwrap();
    let cfg = StoreConfig {
        kind: StoreKind::Redis,
        url: Some(server.url()),
        timeout_ms: TIMEOUT.as_millis() as u64,
        ..StoreConfig::default()
    };
    match bounded("open", Store::open(&cfg)).await {
        Err(e @ StoreError::Unavailable(_)) => {
            let msg = e.to_string();
            assert!(msg.contains("cannot connect to redis+unix://") && msg.contains("redis.sock"), "{msg}");
        }
        other => panic!("expected redis unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_frozen_server_times_operations_out_and_they_recover_when_it_thaws() {
    let mut server = RedisServer::start().expect("start redis-server");
    let store = open(&server, "slow").await;
    store.put("ue:1", b"one").await.unwrap();

    server.pause().unwrap();
    // A write sent to a server that does not answer: outcome unknown (the
    // server still holds it and may run it when it thaws).
    let started = Instant::now();
    match bounded("compare-and-set", store.compare_and_set("ue:1", Some(1), b"two")).await {
        Err(e @ StoreError::OutcomeUnknown { op: "compare-and-set", .. }) => {
            assert!(e.to_string().contains("no answer within 1s"), "{e}")
        }
        other => panic!("expected outcome unknown, got {other:?}"),
    }
    assert!(started.elapsed() >= TIMEOUT, "gave up before the timeout: {:?}", started.elapsed());
    // Reads: a timeout, or (the stuck connection dropped, a new one that
    // cannot be made in time) unavailable; never a hang.
    for _ in 0..3 {
        match bounded("get", store.get("ue:1")).await {
            Err(StoreError::Timeout { op: "get", after }) => assert_eq!(after, TIMEOUT),
            Err(StoreError::Unavailable(_)) => {}
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
    // Many tasks at once: each ends within the bound.
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { bounded("concurrent get", store.get(&format!("ue:{i}"))).await })
        })
        .collect();
    for task in tasks {
        assert!(transient(&task.await.unwrap().unwrap_err()));
    }
    let counters = store.counters();
    assert_eq!(counters.value("outcome_unknown"), 1);
    assert!(counters.value("timeout") + counters.value("unavailable") >= 53);
    assert!(counters.value("redis_connection_lost") >= 1);

    server.resume().unwrap();
    // The compare-and-set may have been run by the server once it thawed:
    // the version says which, and a compare-and-set on it goes through.
    let now = until_served(&store, "ue:1").await.expect("ue:1 is there");
    assert!(now == v(b"one", 1) || now == v(b"two", 2), "{now:?}");
    assert_eq!(store.compare_and_set("ue:1", Some(now.version), b"three").await.unwrap(), now.version + 1);
    assert_eq!(store.get("ue:1").await.unwrap(), Some(v(b"three", now.version + 1)));
}

/// A compare-and-set in flight when the connection breaks is reported as
/// outcome unknown and never sent again: here the server was frozen when it
/// was sent and killed before it could run it, so after a restart the key
/// still has its old version.
#[tokio::test]
async fn a_compare_and_set_cut_by_a_crash_is_outcome_unknown_and_not_resent() {
    let mut server = RedisServer::start_persistent().expect("start redis-server");
    // A long timeout: the answer is lost to the crash, not to the timeout.
    let store = Store::connect_redis_with_timeout(&server.url(), "cut", Duration::from_secs(60)).await.unwrap();
    assert_eq!(store.put("ue:1", b"one").await.unwrap(), 1);
    server.pause().unwrap();
    let cas = tokio::spawn({
        let store = store.clone();
        async move { store.compare_and_set("ue:1", Some(1), b"two").await }
    });
    // Let it reach the socket (if it does not in time, it finds the broken
    // connection instead: the same error).
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.kill().unwrap();
    match bounded("compare-and-set", cas).await.unwrap() {
        Err(e @ StoreError::OutcomeUnknown { op: "compare-and-set", .. }) => {
            assert!(!e.to_string().contains("no answer within"), "lost to the crash, not a timeout: {e}")
        }
        other => panic!("expected outcome unknown, got {other:?}"),
    }
    server.restart().unwrap();
    assert_eq!(until_served(&store, "ue:1").await, Some(v(b"one", 1)), "not resent after reconnecting");
    assert_eq!(store.compare_and_set("ue:1", Some(1), b"two").await.unwrap(), 2);
    assert_eq!(store.counters().value("outcome_unknown"), 1);
}

/// Two hosts increment one key by compare-and-set (each write carries the
/// version it expects to make) while the server is killed and restarted:
/// no increment is lost or applied twice, and the value always matches the
/// version.
#[tokio::test]
async fn compare_and_set_stays_atomic_across_a_restart() {
    const PER_WORKER: u64 = 30;
    const WORKERS: u64 = 4;
    let mut server = RedisServer::start_persistent().expect("start redis-server");
    let hosts = [open(&server, "count").await, open(&server, "count").await];
    hosts[0].put("n", b"1").await.unwrap();
    let successes = Arc::new(AtomicU64::new(0));
    let unknown = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let store = hosts[(w % 2) as usize].clone();
            let (successes, unknown) = (successes.clone(), unknown.clone());
            tokio::spawn(async move {
                let mut mine = 0;
                let started = Instant::now();
                while mine < PER_WORKER {
                    assert!(started.elapsed() < RECOVERY * 2, "worker {w} stuck at {mine}");
                    let current = match bounded("get", store.get("n")).await {
                        Ok(Some(current)) => current,
                        Ok(None) => panic!("the key is gone"),
                        Err(e) => {
                            assert!(transient(&e), "{e:?}");
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    };
                    let next = (current.version + 1).to_string();
                    match bounded("cas", store.compare_and_set("n", Some(current.version), next.as_bytes())).await {
                        Ok(version) => {
                            assert_eq!(version, current.version + 1);
                            mine += 1;
                            successes.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(StoreError::Conflict { .. }) => {}
                        Err(StoreError::OutcomeUnknown { .. }) => {
                            unknown.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            assert!(transient(&e), "{e:?}");
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            })
        })
        .collect();
    // Kill the server half-way, restart it.
    let started = Instant::now();
    while successes.load(Ordering::Relaxed) < WORKERS * PER_WORKER / 2 {
        assert!(started.elapsed() < RECOVERY, "no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart().unwrap();
    for worker in workers {
        worker.await.unwrap();
    }
    // (A host whose workers were done before the kill finds its connection
    // lost now, and makes a new one.)
    let end = until_served(&hosts[1], "n").await.unwrap();
    assert_eq!(end.value, end.version.to_string().into_bytes(), "value and version moved together");
    let (ok, unknown) = (successes.load(Ordering::Relaxed), unknown.load(Ordering::Relaxed));
    assert_eq!(ok, WORKERS * PER_WORKER);
    // Each success is one increment; an outcome-unknown one is at most one.
    let increments = end.version - 1;
    assert!((ok..=ok + unknown).contains(&increments), "{end:?}, {ok} ok, {unknown} unknown");
    let lost: u64 = hosts.iter().map(|h| h.counters().value("redis_connection_lost")).sum();
    assert!(lost >= 1, "the kill was seen");
}
