//! What every test file shares: temporary directories and one store of each
//! kind, each kept alive with what it needs.

#![allow(dead_code)] // each test file uses part of it

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::{env, fs};

use mobicore_store::redis_server::RedisServer;
use mobicore_store::Store;

/// A directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = env::temp_dir().join(format!("mobicore-store-test-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create a temporary directory");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A store and what must outlive it (a directory, a server).
pub struct Fixture {
    pub store: Store,
    _dir: Option<TempDir>,
    _server: Option<RedisServer>,
}

pub fn memory() -> Fixture {
    Fixture { store: Store::memory(), _dir: None, _server: None }
}

pub fn file() -> Fixture {
    let dir = TempDir::new();
    let store = Store::open_file(&dir.path().join("store.log")).expect("open a file store");
    Fixture { store, _dir: Some(dir), _server: None }
}

pub async fn redis() -> Fixture {
    let server = RedisServer::start().expect("start redis-server");
    let store = Store::connect_redis(&server.url(), "test").await.expect("connect to redis-server");
    Fixture { store, _dir: None, _server: Some(server) }
}
