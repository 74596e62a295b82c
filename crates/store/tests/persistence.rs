//! The embedded store persisted to a file: reopening, a write cut short by a
//! crash, corruption, compaction.

mod common;

use std::fs;
use std::path::Path;

use common::TempDir;
use mobicore_store::{Store, StoreConfig, StoreError, StoreKind, Versioned};

fn v(value: &[u8], version: u64) -> Versioned {
    Versioned { value: value.to_vec(), version }
}

async fn everything(s: &Store) -> Vec<(String, Versioned)> {
    s.scan_prefix("").await.unwrap()
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

#[tokio::test]
async fn a_reopened_store_has_the_same_contents_and_versions() {
    let dir = TempDir::new();
    let path = dir.path().join("store.log");
    let before = {
        let s = Store::open_file(&path).unwrap();
        s.put("ue:1", b"one").await.unwrap();
        s.put("ue:1", b"one again").await.unwrap();
        s.put("ue:2", b"two").await.unwrap();
        s.compare_and_set("ue:3", None, b"three").await.unwrap();
        s.put("gone", b"soon").await.unwrap();
        s.delete("gone").await.unwrap();
        s.put("cad", b"x").await.unwrap();
        s.compare_and_delete("cad", 1).await.unwrap();
        s.sync().unwrap();
        everything(&s).await
    };
    assert_eq!(before.len(), 3);

    let cfg = StoreConfig { path: Some(path.clone()), ..StoreConfig::default() };
    let s = Store::open(&cfg).await.unwrap();
    assert_eq!(s.kind(), StoreKind::Embedded);
    assert_eq!(everything(&s).await, before);
    assert_eq!(s.get("ue:1").await.unwrap(), Some(v(b"one again", 2)));
    // Versions go on from where they were; a deleted key starts again.
    assert_eq!(s.put("ue:1", b"three times").await.unwrap(), 3);
    assert_eq!(s.put("gone", b"back").await.unwrap(), 1);
    drop(s);

    let s = Store::open_file(&path).unwrap();
    assert_eq!(s.get("ue:1").await.unwrap(), Some(v(b"three times", 3)));
    assert_eq!(s.get("gone").await.unwrap(), Some(v(b"back", 1)));
    assert_eq!(s.usage("").await.unwrap(), (4, 11 + 3 + 5 + 4));
}

#[tokio::test]
async fn a_write_cut_short_is_truncated_away() {
    let dir = TempDir::new();
    let path = dir.path().join("store.log");
    let s = Store::open_file(&path).unwrap();
    s.put("a", b"kept").await.unwrap();
    s.put("b", b"kept too").await.unwrap();
    let good_len = file_len(&path);
    s.put("c", b"lost in the crash").await.unwrap();
    drop(s);
    let full = fs::read(&path).unwrap();

    // Every cut inside the last record loses that record and nothing else.
    for cut in good_len as usize + 1..full.len() {
        fs::write(&path, &full[..cut]).unwrap();
        let s = Store::open_file(&path).unwrap();
        assert_eq!(file_len(&path), good_len, "cut at {cut}");
        assert_eq!(
            everything(&s).await,
            [("a".to_string(), v(b"kept", 1)), ("b".to_string(), v(b"kept too", 1))],
            "cut at {cut}"
        );
        // The log goes on after the truncation.
        assert_eq!(s.put("c", b"written after").await.unwrap(), 1);
        drop(s);
        assert_eq!(Store::open_file(&path).unwrap().get("c").await.unwrap(), Some(v(b"written after", 1)));
    }

    // So does a tail of zeros (blocks allocated but never written).
    let mut zeros = full[..good_len as usize].to_vec();
    zeros.resize(good_len as usize + 4096, 0);
    fs::write(&path, &zeros).unwrap();
    let s = Store::open_file(&path).unwrap();
    assert_eq!(file_len(&path), good_len);
    assert_eq!(everything(&s).await.len(), 2);
}

#[tokio::test]
async fn a_bad_record_in_the_middle_is_corrupt() {
    let dir = TempDir::new();
    let path = dir.path().join("store.log");
    let s = Store::open_file(&path).unwrap();
    s.put("first", b"value of the first key").await.unwrap();
    s.put("second", b"value of the second key").await.unwrap();
    drop(s);

    let mut bytes = fs::read(&path).unwrap();
    bytes[8 + 8 + 10] ^= 0x01; // inside the first record's body
    fs::write(&path, &bytes).unwrap();
    match Store::open_file(&path) {
        Err(StoreError::Corrupt(msg)) => assert!(msg.contains("bad CRC"), "{msg}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // The file is left as it was, for someone to look at.
    assert_eq!(fs::read(&path).unwrap(), bytes);
}

#[test]
fn a_file_that_is_not_a_log_is_corrupt() {
    let dir = TempDir::new();
    let path = dir.path().join("notes.txt");
    fs::write(&path, "this is not a store log\n").unwrap();
    assert!(matches!(Store::open_file(&path), Err(StoreError::Corrupt(_))));
    assert!(matches!(Store::open_file(&dir.path().join("no/such/dir/store.log")), Err(StoreError::Io(_))));
}

#[tokio::test]
async fn compaction_keeps_the_contents_and_bounds_the_file() {
    let dir = TempDir::new();
    let path = dir.path().join("store.log");
    let s = Store::open_file(&path).unwrap();
    for i in 0..20 {
        s.put(&format!("small:{i:02}"), format!("value {i}").as_bytes()).await.unwrap();
    }
    s.put("deleted", b"x").await.unwrap();
    s.delete("deleted").await.unwrap();
    // 48 rewrites of 64 KiB: 3 MiB of log for 64 KiB of live data.
    let mut written = 0;
    for round in 1..=48u8 {
        let value = vec![round; 64 << 10];
        assert_eq!(s.put("big", &value).await.unwrap(), round as u64);
        written += value.len();
    }
    assert!(written >= 3 << 20);
    let len = file_len(&path);
    assert!(len < (1 << 20) + (128 << 10), "the log is {len} bytes after compactions");
    let before = everything(&s).await;
    assert_eq!(before.len(), 21);
    drop(s);

    let s = Store::open_file(&path).unwrap();
    assert_eq!(everything(&s).await, before);
    assert_eq!(s.get("big").await.unwrap(), Some(v(&[48; 64 << 10], 48)));
    assert_eq!(s.get("deleted").await.unwrap(), None);
    assert_eq!(s.put("big", b"small now").await.unwrap(), 49);
    let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["store.log"], "no temporary file is left behind");
}

#[tokio::test]
async fn config_defaults_and_a_memory_store() {
    let cfg = StoreConfig::default();
    assert_eq!(cfg.kind, StoreKind::Embedded);
    assert_eq!(cfg.namespace, "mobicore");
    assert_eq!(cfg.max_value_len, 1 << 20);
    let s = Store::open(&cfg).await.unwrap();
    assert_eq!(s.kind(), StoreKind::Embedded);
    s.sync().unwrap();
    let s = Store::open(&StoreConfig { max_value_len: 3, ..cfg }).await.unwrap();
    assert!(matches!(s.put("k", b"four").await, Err(StoreError::TooLarge { what: "value", len: 4, max: 3 })));
}
