//! The elastic MME as real processes (issue 13, "System tests with real
//! processes"): a front end (`mobicore mme-frontend`), three MME hosts
//! (`mobicore mme-host`) and a real `redis-server`, all on loopback; the
//! HSS and S/P-GW-C run in this process, the emulated eNBs and UEs too.
//! UEs attach (spread over the hosts), go idle; one host is killed with
//! SIGKILL; every UE it served keeps its GUTI, MME-UE-S1AP-ID and session
//! (cold replication: the record of its last completed procedure) and
//! comes back by a service request with no new attach, then detaches.
//!
//! Every process started is killed and reaped when the test ends, even
//! when it fails ([`Procs`]). Ports are all chosen by the kernel (port 0)
//! and read back from what each process prints. SCTP runs over UDP (RFC
//! 6951), which needs no privilege.

use mobicore::allinone;
use mobicore::config::Config;
use mobicore_hss::SubscriberStore;
use mobicore_mme::context_codec::{self, TimeBase};
use mobicore_ran::Phase;
use mobicore_sctp::Transport;
use mobicore_store::redis_server::RedisServer;
use mobicore_store::Store;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The most any one step may take before the test fails (a bound for a
/// loaded machine, never a measure of speed).
const LIMIT: Duration = Duration::from_secs(60);
const UES: u64 = 12;

/// Child processes, killed (SIGKILL) and reaped on drop.
#[derive(Default)]
struct Procs(Vec<(String, Child)>);

impl Procs {
    /// Start `mobicore args...`; its stdout lines go to the returned channel.
    fn start(&mut self, name: &str, args: &[&str]) -> mpsc::Receiver<String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mobicore"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let tag = name.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                eprintln!("[{tag}] {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        self.0.push((name.to_string(), child));
        rx
    }

    /// SIGKILL `name` and reap it.
    fn kill(&mut self, name: &str) {
        let i = self.0.iter().position(|(n, _)| n == name).expect("a process of that name");
        let (_, mut child) = self.0.remove(i);
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "{name} was killed");
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The first line from `rx` for which `pick` gives something.
fn wait_line<T>(rx: &mpsc::Receiver<String>, what: &str, mut pick: impl FnMut(&str) -> Option<T>) -> T {
    let end = Instant::now() + LIMIT;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(v) = pick(&line) {
                    return v;
                }
            }
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    }
}

/// The value of `key=` in a line of `key=value` words.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// What the store says of one UE.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    mme_ue_s1ap_id: u32,
    m_tmsi: u32,
    /// The S-GW's S11 TEID of its default bearer's PDN connection.
    sgw_teid: u32,
}

/// Every UE record in the store, by IMSI.
async fn records(store: &Store) -> BTreeMap<String, Stored> {
    let time = TimeBase { now: Instant::now(), unix_ms: 1_800_000_000_000 };
    let mut out = BTreeMap::new();
    for (key, v) in store.scan_prefix("mme/ue/").await.unwrap() {
        let ue = context_codec::decode(&v.value, time).unwrap();
        let stored = Stored {
            mme_ue_s1ap_id: ue.id,
            m_tmsi: ue.guti.expect("a GUTI").m_tmsi.0,
            sgw_teid: ue.sessions.first().expect("a PDN connection").sgw_s11.teid.0,
        };
        out.insert(key.trim_start_matches("mme/ue/").to_string(), stored);
    }
    out
}

/// A host's counter, from its Prometheus endpoint.
async fn counter(metrics: std::net::SocketAddr, name: &str) -> u64 {
    let (status, body) = mobicore_controller::site::http(metrics, "GET", "/metrics", None, "").await.unwrap();
    assert_eq!(status, 200);
    body.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_a_killed_hosts_ues_keep_guti_and_session_and_come_back_without_attach() {
    killed_host_after_completed_procedures("cold").await;
}

/// The same with hot replication (every message's state written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_a_killed_hosts_ues_keep_guti_and_session_and_come_back_without_attach() {
    killed_host_after_completed_procedures("hot").await;
}

async fn killed_host_after_completed_procedures(replication: &str) {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let mut procs = Procs::default();

    // HSS, UPF (PFCP only) and S/P-GW-C here; the monolithic MME that
    // `start` brings too stays idle on its own ephemeral port.
    let mut cfg = Config::default();
    cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
    let mut ran_cfg = cfg.ran.core.clone();
    ran_cfg.ues = UES;
    ran_cfg.enbs = 2;
    ran_cfg.detach = true;
    let subscribers = SubscriberStore::in_memory();
    allinone::provision(&subscribers, &ran_cfg.plan, UES).unwrap();
    let core = allinone::start(&cfg, subscribers, Transport::Udp { port: 0 }).await.unwrap();

    let fe = procs.start(
        "frontend",
        &["mme-frontend", "--s1ap", "127.0.0.1:0", "--sctp", "udp", "--udp-port", "0", "--hosts", "127.0.0.1:0"],
    );
    let ready = wait_line(&fe, "the front end", |l| l.starts_with("mme-frontend ready").then(|| l.to_string()));
    let s1ap: std::net::SocketAddr = field(&ready, "s1ap").unwrap().parse().unwrap();
    let udp: u16 = field(&ready, "udp_port").unwrap().parse().unwrap();
    let hosts = field(&ready, "hosts").unwrap().to_string();

    // Bad peers on the hosts' port: a frame too long, a Hello of no
    // host. Each is disconnected; the front end carries on.
    for bad in [vec![0xff, 0xff, 0xff, 0xff], vec![0, 0, 0, 2, 1, 0]] {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut c = tokio::net::TcpStream::connect(&hosts).await.unwrap();
        c.write_all(&bad).await.unwrap();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(LIMIT, c.read(&mut buf)).await.expect("closed by the front end");
        assert_eq!(n.unwrap_or(0), 0, "nothing but the close");
    }

    let dir = std::env::temp_dir().join(format!("mobicore-elastic-{replication}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host_cfg = dir.join("host.toml");
    let toml = format!("[mme]\nhss = \"{}\"\nsgw = \"{}\"\ns11_local = \"127.0.0.1:0\"\n", core.hss, core.sgw_s11);
    std::fs::write(&host_cfg, toml).unwrap();
    let url = redis.url();
    let mut metrics = BTreeMap::new();
    for id in 1..=3u32 {
        let name = format!("host{id}");
        let out = procs.start(
            &name,
            &[
                "mme-host",
                "--config",
                host_cfg.to_str().unwrap(),
                "--id",
                &id.to_string(),
                "--frontend",
                &hosts,
                "--store",
                &url,
                "--replication",
                replication,
                "--metrics",
                "127.0.0.1:0",
            ],
        );
        let m = wait_line(&out, &name, |l| field(l, "metrics").map(str::to_string));
        metrics.insert(id, m.parse::<std::net::SocketAddr>().unwrap());
        wait_line(&fe, "the host's connection", |l| (l == format!("mme-frontend: host{id} up")).then_some(()));
    }

    // Attach, then release to idle: each UE's procedure completed, its
    // record written (cold).
    ran_cfg.mme = s1ap;
    let mut ran = allinone::ran_session(&cfg, ran_cfg, Transport::Udp { port: udp }, None).await.unwrap();
    ran.attach().await.unwrap();
    assert_eq!(ran.attached_ues().len() as u64, UES, "{:?}", ran.report().failures);
    let r = ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "release: {:?}", ran.report().failures);

    let store = Store::connect_redis(&url, "mobicore").await.unwrap();
    let before = records(&store).await;
    assert_eq!(before.len() as u64, UES, "every UE's record is in the store");
    let mut per_host = BTreeMap::<u32, Vec<String>>::new();
    for (imsi, s) in &before {
        per_host.entry(s.mme_ue_s1ap_id >> 24).or_default().push(imsi.clone());
        assert_eq!(s.m_tmsi >> 24, s.mme_ue_s1ap_id >> 24, "both identifiers carry their host");
    }
    assert_eq!(per_host.keys().copied().collect::<Vec<_>>(), [1, 2, 3], "UEs on every host: {per_host:?}");

    // kill -9 the host with the most UEs.
    let (&victim, served) = per_host.iter().max_by_key(|(_, v)| v.len()).unwrap();
    let served = served.clone();
    procs.kill(&format!("host{victim}"));
    wait_line(&fe, "the front end to see the host gone", |l| {
        l.starts_with(&format!("mme-frontend: host{victim} down")).then_some(())
    });

    // Every UE comes back from idle by a service request: the victim's
    // are taken over by its heir from their stored records.
    let r = ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests: {:?}", ran.report().failures);
    let mut taken_over = 0;
    for (id, m) in &metrics {
        if *id != victim {
            taken_over += counter(*m, "mobicore_mme_host_ue_taken_over").await;
            assert_eq!(counter(*m, "mobicore_mme_host_ue_not_in_store").await, 0);
        }
    }
    assert_eq!(taken_over, served.len() as u64, "the heir loaded each of the victim's UEs once");

    // No new attach: the same MME-UE-S1AP-ID, GUTI and S-GW session.
    let after = records(&store).await;
    for imsi in &served {
        assert_eq!(after.get(imsi), before.get(imsi), "UE {imsi} kept its context");
    }

    // And they detach, like everyone else.
    let report = ran.finish().await.unwrap();
    assert_eq!((report.attached, report.failed), (UES, 0), "no attach beyond the first: {:?}", report.failures);
    assert_eq!((report.detached, report.detach_failed), (UES, 0), "{:?}", report.failures);
    assert!(records(&store).await.is_empty(), "detached UEs leave no record");

    drop(procs);
    core.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
