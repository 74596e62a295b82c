//! The behaviour every store has, written once and run against a memory
//! store, a file-backed store and a real Redis server (the macro at the end).

mod common;

use mobicore_store::{Store, StoreError, Versioned, DEFAULT_MAX_VALUE_LEN, MAX_KEY_LEN};

fn v(value: &[u8], version: u64) -> Versioned {
    Versioned { value: value.to_vec(), version }
}

fn conflict(r: Result<impl std::fmt::Debug, StoreError>) -> Option<u64> {
    match r {
        Err(StoreError::Conflict { current }) => current,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

fn keys(entries: &[(String, Versioned)]) -> Vec<&str> {
    entries.iter().map(|(k, _)| k.as_str()).collect()
}

async fn versions_count_writes_per_key(s: &Store) {
    assert_eq!(s.get("a").await.unwrap(), None);
    assert_eq!(s.put("a", b"one").await.unwrap(), 1);
    assert_eq!(s.put("a", b"two").await.unwrap(), 2);
    assert_eq!(s.put("b", b"other").await.unwrap(), 1);
    assert_eq!(s.put("a", b"three").await.unwrap(), 3);
    assert_eq!(s.get("a").await.unwrap(), Some(v(b"three", 3)));
    assert_eq!(s.get("b").await.unwrap(), Some(v(b"other", 1)));
}

async fn empty_keys_and_values_and_any_bytes(s: &Store) {
    assert_eq!(s.put("", b"").await.unwrap(), 1);
    assert_eq!(s.get("").await.unwrap(), Some(v(b"", 1)));
    let bytes: Vec<u8> = (0..=255).collect();
    assert_eq!(s.put("ue:日本", &bytes).await.unwrap(), 1);
    assert_eq!(s.get("ue:日本").await.unwrap(), Some(v(&bytes, 1)));
    assert_eq!(s.usage("").await.unwrap(), (2, 256));
}

async fn compare_and_set_on_an_absent_key(s: &Store) {
    assert_eq!(s.compare_and_set("k", None, b"first").await.unwrap(), 1);
    assert_eq!(conflict(s.compare_and_set("k", None, b"second").await), Some(1));
    assert_eq!(s.get("k").await.unwrap(), Some(v(b"first", 1)));
    assert_eq!(conflict(s.compare_and_set("absent", Some(1), b"x").await), None);
    assert_eq!(s.get("absent").await.unwrap(), None);
}

async fn compare_and_set_with_a_stale_version(s: &Store) {
    s.put("k", b"1").await.unwrap();
    s.put("k", b"2").await.unwrap();
    assert_eq!(conflict(s.compare_and_set("k", Some(1), b"stale").await), Some(2));
    assert_eq!(conflict(s.compare_and_set("k", Some(3), b"future").await), Some(2));
    assert_eq!(s.get("k").await.unwrap(), Some(v(b"2", 2)));
    assert_eq!(s.compare_and_set("k", Some(2), b"3").await.unwrap(), 3);
    assert_eq!(s.get("k").await.unwrap(), Some(v(b"3", 3)));
}

async fn delete_forgets_the_version(s: &Store) {
    assert!(!s.delete("k").await.unwrap());
    s.put("k", b"a").await.unwrap();
    s.put("k", b"b").await.unwrap();
    assert!(s.delete("k").await.unwrap());
    assert_eq!(s.get("k").await.unwrap(), None);
    assert!(!s.delete("k").await.unwrap());
    assert_eq!(conflict(s.compare_and_set("k", Some(2), b"c").await), None);
    assert_eq!(s.put("k", b"c").await.unwrap(), 1);
    s.delete("k").await.unwrap();
    assert_eq!(s.compare_and_set("k", None, b"d").await.unwrap(), 1);
}

async fn compare_and_delete_needs_the_current_version(s: &Store) {
    assert_eq!(conflict(s.compare_and_delete("k", 1).await), None);
    s.put("k", b"a").await.unwrap();
    s.put("k", b"b").await.unwrap();
    assert_eq!(conflict(s.compare_and_delete("k", 1).await), Some(2));
    assert_eq!(s.get("k").await.unwrap(), Some(v(b"b", 2)));
    s.compare_and_delete("k", 2).await.unwrap();
    assert_eq!(s.get("k").await.unwrap(), None);
    assert_eq!(conflict(s.compare_and_delete("k", 2).await), None);
    assert_eq!(s.put("k", b"c").await.unwrap(), 1);
}

async fn scan_prefix_is_sorted_and_only_the_prefix(s: &Store) {
    for key in ["ue:3", "ue:1", "ue:10", "u", "uf", "ue:", "ue;", "ue", "mme:1", "ue:2/x"] {
        s.put(key, key.as_bytes()).await.unwrap();
    }
    s.put("ue:1", b"again").await.unwrap();
    let ues = s.scan_prefix("ue:").await.unwrap();
    assert_eq!(keys(&ues), ["ue:", "ue:1", "ue:10", "ue:2/x", "ue:3"]);
    assert_eq!(ues[1].1, v(b"again", 2));
    assert_eq!(ues[4].1, v(b"ue:3", 1));
    assert_eq!(keys(&s.scan_prefix("ue").await.unwrap()), ["ue", "ue:", "ue:1", "ue:10", "ue:2/x", "ue:3", "ue;"]);
    assert_eq!(keys(&s.scan_prefix("").await.unwrap()).len(), 10);
    assert_eq!(keys(&s.scan_prefix("").await.unwrap())[0], "mme:1");
    assert!(s.scan_prefix("zz").await.unwrap().is_empty());
    assert_eq!(keys(&s.scan_prefix("ue:10").await.unwrap()), ["ue:10"]);
    s.delete("ue:10").await.unwrap();
    assert_eq!(keys(&s.scan_prefix("ue:1").await.unwrap()), ["ue:1"]);
}

async fn glob_characters_are_plain_characters(s: &Store) {
    let all = ["a*", "a*b", "ab", "a[1]", "a1", "a?", "ax", r"a\", r"a\b", "a]", "a^", "[a]", "*"];
    for key in all {
        s.put(key, b"x").await.unwrap();
    }
    assert_eq!(keys(&s.scan_prefix("a*").await.unwrap()), ["a*", "a*b"]);
    assert_eq!(keys(&s.scan_prefix("a[").await.unwrap()), ["a[1]"]);
    assert_eq!(keys(&s.scan_prefix("a[1]").await.unwrap()), ["a[1]"]);
    assert_eq!(keys(&s.scan_prefix("a?").await.unwrap()), ["a?"]);
    assert_eq!(keys(&s.scan_prefix(r"a\").await.unwrap()), [r"a\", r"a\b"]);
    assert_eq!(keys(&s.scan_prefix("a]").await.unwrap()), ["a]"]);
    assert_eq!(keys(&s.scan_prefix("*").await.unwrap()), ["*"]);
    assert_eq!(keys(&s.scan_prefix("[").await.unwrap()), ["[a]"]);
    assert_eq!(s.scan_prefix("a").await.unwrap().len(), 11);
    assert_eq!(s.usage("a*").await.unwrap(), (2, 2));
    assert_eq!(s.get("a*").await.unwrap(), Some(v(b"x", 1)));
}

async fn usage_counts_keys_and_value_bytes(s: &Store) {
    assert_eq!(s.usage("").await.unwrap(), (0, 0));
    s.put("gtpc:1", &[0; 100]).await.unwrap();
    s.put("gtpc:2", &[0; 50]).await.unwrap();
    s.put("reloc:1", &[0; 7]).await.unwrap();
    assert_eq!(s.usage("gtpc:").await.unwrap(), (2, 150));
    assert_eq!(s.usage("").await.unwrap(), (3, 157));
    s.put("gtpc:1", &[0; 10]).await.unwrap();
    assert_eq!(s.usage("gtpc:").await.unwrap(), (2, 60));
    s.delete("gtpc:2").await.unwrap();
    assert_eq!(s.usage("gtpc:").await.unwrap(), (1, 10));
    assert_eq!(s.usage("none").await.unwrap(), (0, 0));
}

async fn oversized_keys_and_values_are_refused_and_not_written(s: &Store) {
    let longest = "k".repeat(MAX_KEY_LEN);
    assert_eq!(s.put(&longest, b"ok").await.unwrap(), 1);
    assert_eq!(s.get(&longest).await.unwrap(), Some(v(b"ok", 1)));
    let too_long = "k".repeat(MAX_KEY_LEN + 1);
    let is_key_too_large = |r: StoreError| matches!(r, StoreError::TooLarge { what: "key", len, max } if len == MAX_KEY_LEN + 1 && max == MAX_KEY_LEN);
    assert!(is_key_too_large(s.put(&too_long, b"x").await.unwrap_err()));
    assert!(is_key_too_large(s.compare_and_set(&too_long, None, b"x").await.unwrap_err()));
    assert!(is_key_too_large(s.get(&too_long).await.unwrap_err()));
    assert!(is_key_too_large(s.delete(&too_long).await.unwrap_err()));
    assert!(is_key_too_large(s.compare_and_delete(&too_long, 1).await.unwrap_err()));

    let largest = vec![7u8; DEFAULT_MAX_VALUE_LEN];
    assert_eq!(s.put("big", &largest).await.unwrap(), 1);
    let too_big = vec![7u8; DEFAULT_MAX_VALUE_LEN + 1];
    let is_value_too_large = |r: StoreError| {
        matches!(r, StoreError::TooLarge { what: "value", len, max }
            if len == DEFAULT_MAX_VALUE_LEN + 1 && max == DEFAULT_MAX_VALUE_LEN)
    };
    assert!(is_value_too_large(s.put("big", &too_big).await.unwrap_err()));
    // Refused for its size even though the version matches.
    assert!(is_value_too_large(s.compare_and_set("big", Some(1), &too_big).await.unwrap_err()));
    assert!(is_value_too_large(s.put("new", &too_big).await.unwrap_err()));
    assert_eq!(s.get("big").await.unwrap(), Some(v(&largest, 1)));
    assert_eq!(s.get("new").await.unwrap(), None);
    assert_eq!(s.usage("").await.unwrap(), (2, DEFAULT_MAX_VALUE_LEN + 2));

    // The bound is configurable.
    let small = s.clone().with_max_value_len(4);
    assert_eq!(small.put("small", b"four").await.unwrap(), 1);
    assert!(matches!(small.put("small", b"five!").await, Err(StoreError::TooLarge { what: "value", len: 5, max: 4 })));
}

async fn clones_share_one_store(s: &Store) {
    let other = s.clone();
    other.put("k", b"from the clone").await.unwrap();
    assert_eq!(s.get("k").await.unwrap(), Some(v(b"from the clone", 1)));
}

/// 8 tasks each add 1 to one counter 100 times by compare-and-set, retrying
/// on a conflict: no increment may be lost.
async fn concurrent_compare_and_set_loses_no_increment(s: &Store) {
    const TASKS: u64 = 8;
    const INCREMENTS: u64 = 100;
    s.put("counter", &0u64.to_le_bytes()).await.unwrap();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                let mut conflicts = 0u64;
                for _ in 0..INCREMENTS {
                    loop {
                        let cur = s.get("counter").await.unwrap().expect("the counter exists");
                        let n = u64::from_le_bytes(cur.value.try_into().unwrap());
                        match s.compare_and_set("counter", Some(cur.version), &(n + 1).to_le_bytes()).await {
                            Ok(_) => break,
                            Err(StoreError::Conflict { .. }) => conflicts += 1,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                conflicts
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let end = s.get("counter").await.unwrap().unwrap();
    assert_eq!(u64::from_le_bytes(end.value.try_into().unwrap()), TASKS * INCREMENTS);
    assert_eq!(end.version, 1 + TASKS * INCREMENTS);
}

async fn concurrent_writers_of_distinct_keys(s: &Store) {
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let s = s.clone();
            tokio::spawn(async move {
                for i in 0..50 {
                    assert_eq!(s.put(&format!("t{t}:{i:03}"), &[t; 3]).await.unwrap(), 1);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(s.usage("t").await.unwrap(), (400, 1200));
    let t3 = s.scan_prefix("t3:").await.unwrap();
    assert_eq!(t3.len(), 50);
    assert!(t3.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(t3.iter().all(|(_, val)| *val == v(&[3; 3], 1)));
}

/// One test per behaviour and backend, each on a fresh store.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let fixture = crate::common::memory();
                    super::$name(&fixture.store).await;
                }
            )*
        }

        mod file {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let fixture = crate::common::file();
                    super::$name(&fixture.store).await;
                }
            )*
        }

        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let fixture = crate::common::redis().await;
                    super::$name(&fixture.store).await;
                }
            )*
        }
    };
}

suite!(
    versions_count_writes_per_key,
    empty_keys_and_values_and_any_bytes,
    compare_and_set_on_an_absent_key,
    compare_and_set_with_a_stale_version,
    delete_forgets_the_version,
    compare_and_delete_needs_the_current_version,
    scan_prefix_is_sorted_and_only_the_prefix,
    glob_characters_are_plain_characters,
    usage_counts_keys_and_value_bytes,
    oversized_keys_and_values_are_refused_and_not_written,
    clones_share_one_store,
    concurrent_compare_and_set_loses_no_increment,
    concurrent_writers_of_distinct_keys,
);
