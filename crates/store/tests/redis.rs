//! What only the Redis store has: namespaces, the key layout on the server,
//! several handles on one server, connection errors, the test server itself.

use mobicore_store::redis_server::RedisServer;
use mobicore_store::{Store, StoreConfig, StoreError, StoreKind, Versioned};

fn v(value: &[u8], version: u64) -> Versioned {
    Versioned { value: value.to_vec(), version }
}

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

#[tokio::test]
async fn namespaces_do_not_see_each_other() {
    let server = RedisServer::start().unwrap();
    let a = Store::connect_redis(&server.url(), "a").await.unwrap();
    let b = Store::connect_redis(&server.url(), "b").await.unwrap();
    // Glob characters in a namespace match only themselves.
    let star = Store::connect_redis(&server.url(), "a*").await.unwrap();
    let a1 = Store::connect_redis(&server.url(), "a1").await.unwrap();

    a.put("ue:1", b"from a").await.unwrap();
    a.put("ue:1", b"from a again").await.unwrap();
    b.put("ue:1", b"from b").await.unwrap();
    star.put("ue:1", b"from a*").await.unwrap();
    a1.put("ue:1", b"from a1").await.unwrap();

    assert_eq!(a.get("ue:1").await.unwrap(), Some(v(b"from a again", 2)));
    assert_eq!(b.get("ue:1").await.unwrap(), Some(v(b"from b", 1)));
    for s in [&a, &b, &star, &a1] {
        let all = s.scan_prefix("").await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].0, "ue:1", "keys come back without the namespace");
        assert_eq!(s.usage("ue:").await.unwrap().0, 1);
    }
    assert_eq!(star.scan_prefix("ue").await.unwrap()[0].1, v(b"from a*", 1));

    assert!(b.delete("ue:1").await.unwrap());
    assert_eq!(a.get("ue:1").await.unwrap(), Some(v(b"from a again", 2)));
    assert!(b.scan_prefix("").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_key_is_a_hash_of_version_and_data_under_the_namespace() {
    let server = RedisServer::start().unwrap();
    let s = Store::connect_redis(&server.url(), "ns").await.unwrap();
    s.put("ue:7", b"context").await.unwrap();
    s.put("ue:7", b"context 2").await.unwrap();
    let mut conn = raw(&server).await;
    let fields: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL").arg("ns:ue:7").query_async(&mut conn).await.unwrap();
    let mut fields = fields;
    fields.sort();
    assert_eq!(fields, [("d".to_string(), b"context 2".to_vec()), ("v".to_string(), b"2".to_vec())]);

    // What the store did not write is an error, never a wrong answer.
    let () = redis::cmd("SET").arg("ns:plain").arg("x").query_async(&mut conn).await.unwrap();
    assert!(matches!(s.get("plain").await, Err(StoreError::Redis(msg)) if msg.contains("WRONGTYPE")));
    let () = redis::cmd("HSET").arg("ns:half").arg("v").arg("1").query_async(&mut conn).await.unwrap();
    assert!(matches!(s.get("half").await, Err(StoreError::Corrupt(_))));
    let () =
        redis::cmd("HSET").arg("ns:word").arg("v").arg("one").arg("d").arg("x").query_async(&mut conn).await.unwrap();
    assert!(matches!(s.get("word").await, Err(StoreError::Corrupt(_))));
}

#[tokio::test]
async fn two_handles_on_one_namespace_share_the_keys() {
    let server = RedisServer::start().unwrap();
    let cfg = StoreConfig {
        kind: StoreKind::Redis,
        url: Some(server.url()),
        namespace: "shared".into(),
        ..StoreConfig::default()
    };
    let first = Store::open(&cfg).await.unwrap();
    let second = Store::open(&cfg).await.unwrap();
    assert_eq!(first.kind(), StoreKind::Redis);
    first.sync().unwrap();

    let read = second.compare_and_set("relocation:1", None, b"mme-a").await.unwrap();
    assert!(matches!(
        first.compare_and_set("relocation:1", None, b"mme-b").await,
        Err(StoreError::Conflict { current: Some(1) })
    ));
    assert_eq!(first.compare_and_set("relocation:1", Some(read), b"mme-b").await.unwrap(), 2);
    assert_eq!(second.get("relocation:1").await.unwrap(), Some(v(b"mme-b", 2)));
}

#[tokio::test]
async fn connection_errors_say_where() {
    let dir = std::env::temp_dir().join(format!("mobicore-store-nothing-{}", std::process::id()));
    let url = format!("redis+unix://{}/redis.sock", dir.display());
    match Store::connect_redis(&url, "ns").await {
        Err(e @ StoreError::Unavailable(_)) => {
            let msg = e.to_string();
            assert!(msg.contains("cannot connect") && msg.contains("redis.sock"), "{msg}");
        }
        other => panic!("expected redis unavailable, got {other:?}"),
    }
    assert!(matches!(Store::connect_redis("http://example.com/", "ns").await, Err(StoreError::Redis(_))));
}

#[tokio::test]
async fn a_stopped_server_leaves_nothing_behind() {
    let server = RedisServer::start().unwrap();
    let dir = server.socket().parent().unwrap().to_path_buf();
    let s = Store::connect_redis(&server.url(), "ns").await.unwrap();
    s.put("k", b"v").await.unwrap();
    assert!(dir.is_dir());
    drop(server);
    assert!(!dir.exists());
    // The store reports the lost server as an error.
    assert!(matches!(s.get("k").await, Err(StoreError::Unavailable(_))));
}
