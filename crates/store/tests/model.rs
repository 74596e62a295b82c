//! Random sequences of operations, each checked against a `BTreeMap` model,
//! on every kind of store. The seed is fixed, so a run is the same
//! everywhere; a failure prints the smallest sequence that fails.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use common::TempDir;
use mobicore_store::redis_server::RedisServer;
use mobicore_store::{Store, StoreError, Versioned};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use tokio::runtime::Runtime;

const SEED: [u8; 32] = *b"mobicore store model test seed 1";

/// Few keys, so operations meet; glob characters and shared prefixes.
const KEYS: &[&str] = &["a", "a*", "a[b]", "ab", "b", "", r"b\", "a?", "ue:1", "ue:10"];
const PREFIXES: &[&str] = &["", "a", "a*", "a[", "b", "c", r"\", "ue:1", "?"];

#[derive(Debug, Clone)]
enum Op {
    Get(&'static str),
    Put(&'static str, Vec<u8>),
    CompareAndSet(&'static str, Option<u64>, Vec<u8>),
    Delete(&'static str),
    CompareAndDelete(&'static str, u64),
    Scan(&'static str),
    Usage(&'static str),
    /// Drop the store and open it again (file stores; a no-op otherwise).
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let key = proptest::sample::select(KEYS);
    let prefix = proptest::sample::select(PREFIXES);
    let value = vec(any::<u8>(), 0..6);
    let version = 1u64..5;
    prop_oneof![
        2 => key.clone().prop_map(Op::Get),
        4 => (key.clone(), value.clone()).prop_map(|(k, v)| Op::Put(k, v)),
        4 => (key.clone(), proptest::option::of(version.clone()), value).prop_map(|(k, e, v)| Op::CompareAndSet(k, e, v)),
        2 => key.clone().prop_map(Op::Delete),
        2 => (key, version).prop_map(|(k, e)| Op::CompareAndDelete(k, e)),
        2 => prefix.clone().prop_map(Op::Scan),
        1 => prefix.prop_map(Op::Usage),
        1 => Just(Op::Reopen),
    ]
}

/// What an operation answered, comparable between the store and the model.
#[derive(Debug, PartialEq)]
enum Outcome {
    Got(Option<Versioned>),
    Version(u64),
    Conflict(Option<u64>),
    Deleted(bool),
    Done,
    Scanned(Vec<(String, Versioned)>),
    Usage(usize, usize),
}

type Model = BTreeMap<String, Versioned>;

fn model_apply(m: &mut Model, op: &Op) -> Outcome {
    let version = |m: &Model, k: &str| m.get(k).map(|v| v.version);
    let write = |m: &mut Model, k: &str, value: &[u8]| {
        let version = version(m, k).map_or(1, |v| v + 1);
        m.insert(k.to_string(), Versioned { value: value.to_vec(), version });
        Outcome::Version(version)
    };
    let prefixed =
        |m: &Model, p: &str| m.iter().filter(|(k, _)| k.starts_with(p)).map(|(k, v)| (k.clone(), v.clone())).collect();
    match op {
        Op::Get(k) => Outcome::Got(m.get(*k).cloned()),
        Op::Put(k, value) => write(m, k, value),
        Op::CompareAndSet(k, expected, value) => match version(m, k) {
            v if v == *expected => write(m, k, value),
            v => Outcome::Conflict(v),
        },
        Op::Delete(k) => Outcome::Deleted(m.remove(*k).is_some()),
        Op::CompareAndDelete(k, expected) => match version(m, k) {
            Some(v) if v == *expected => {
                m.remove(*k);
                Outcome::Done
            }
            v => Outcome::Conflict(v),
        },
        Op::Scan(p) => Outcome::Scanned(prefixed(m, p)),
        Op::Usage(p) => {
            let entries: Vec<(String, Versioned)> = prefixed(m, p);
            Outcome::Usage(entries.len(), entries.iter().map(|(_, v)| v.value.len()).sum())
        }
        Op::Reopen => Outcome::Done,
    }
}

async fn store_apply(s: &Store, op: &Op) -> Result<Outcome, StoreError> {
    let answer = match op {
        Op::Get(k) => s.get(k).await.map(Outcome::Got),
        Op::Put(k, value) => s.put(k, value).await.map(Outcome::Version),
        Op::CompareAndSet(k, expected, value) => s.compare_and_set(k, *expected, value).await.map(Outcome::Version),
        Op::Delete(k) => s.delete(k).await.map(Outcome::Deleted),
        Op::CompareAndDelete(k, expected) => s.compare_and_delete(k, *expected).await.map(|()| Outcome::Done),
        Op::Scan(p) => s.scan_prefix(p).await.map(Outcome::Scanned),
        Op::Usage(p) => s.usage(p).await.map(|(n, bytes)| Outcome::Usage(n, bytes)),
        Op::Reopen => Ok(Outcome::Done),
    };
    match answer {
        Err(StoreError::Conflict { current }) => Ok(Outcome::Conflict(current)),
        other => other,
    }
}

/// A store for one case; `path` if it is a file that can be reopened.
struct Case {
    store: Store,
    path: Option<PathBuf>,
}

impl Case {
    fn reopen(&mut self) {
        if let Some(path) = &self.path {
            self.store = Store::memory(); // drops the file store first
            self.store = Store::open_file(path).expect("reopen the file store");
        }
    }
}

async fn run_case(mut case: Case, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut model = Model::new();
    for (i, op) in ops.iter().enumerate() {
        if let Op::Reopen = op {
            case.reopen();
        }
        let expected = model_apply(&mut model, op);
        let got = store_apply(&case.store, op).await.map_err(|e| TestCaseError::fail(format!("op {i} {op:?}: {e}")))?;
        prop_assert_eq!(got, expected, "op {} {:?}", i, op);
    }
    // What is left is what the model holds, also after reopening a file.
    case.reopen();
    let all = case.store.scan_prefix("").await.map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>(), "at the end");
    Ok(())
}

fn run_model(cases: u32, new_case: impl Fn(&Runtime) -> Case) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &SEED));
    let result = runner.run(&vec(op(), 1..40), |ops| {
        let case = new_case(&rt);
        rt.block_on(run_case(case, ops))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn memory_store_follows_the_model() {
    run_model(512, |_| Case { store: Store::memory(), path: None });
}

#[test]
fn file_store_follows_the_model() {
    let dir = TempDir::new();
    let next = AtomicU64::new(0);
    run_model(128, |_| {
        let path = dir.path().join(format!("case-{}.log", next.fetch_add(1, Ordering::Relaxed)));
        Case { store: Store::open_file(&path).unwrap(), path: Some(path) }
    });
}

#[test]
fn redis_store_follows_the_model() {
    let server = RedisServer::start().unwrap();
    let next = AtomicU64::new(0);
    run_model(48, |rt| {
        // A fresh namespace per case, on one server.
        let namespace = format!("case{}", next.fetch_add(1, Ordering::Relaxed));
        Case { store: rt.block_on(Store::connect_redis(&server.url(), &namespace)).unwrap(), path: None }
    });
}
