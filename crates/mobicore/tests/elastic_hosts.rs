//! The elastic MME as real processes (issue 13, "System tests with real
//! processes"): a front end (`mobicore mme-frontend`), three MME hosts
//! (`mobicore mme-host`) and a real `redis-server`, all on loopback; the
//! HSS and S/P-GW-C run in this process, the emulated eNBs and UEs too.
//! UEs attach (spread over the hosts), go idle; one host is killed with
//! SIGKILL; every UE it served keeps its GUTI, MME-UE-S1AP-ID and session
//! (cold replication: the record of its last completed procedure) and
//! comes back by a service request with no new attach, then detaches.
//! And the S11 path after a takeover: a Downlink Data Notification for an
//! idle UE of the killed host reaches its heir through the front end's S11
//! address; the heir pages it and it comes back by a service request. And
//! a kill mid-procedure (hot replication): the host of a UE is killed
//! after sending its Attach Accept, and the heir completes the attach.
//! And scaling (two hosts to start with): a host started at run time by
//! the front end takes new UEs, a host drained under load hands its UEs
//! on and exits, with no failed procedure; the EPS controller drains a
//! host of an idle pair by itself.
//! And host-local stores replicated to the replica host (`--store local`,
//! no Redis): a host killed after completed procedures (cold) and one
//! killed mid-handover (hot); its heir serves its UEs from its copy.
//! And NF instances inside a host (`--nf-instances 2`): one instance is
//! killed with SIGKILL while it provably holds an attach's event; another
//! takes its events over and every attach completes, with no re-attach.
//! And one NF instance per procedure kind (`--nf attach=1,...`): each
//! takes only its kind; the service-request one, killed mid-procedure,
//! is replaced and its events wait for the replacement; none fails.
//!
//! No step waits a fixed time: each waits for what it needs (a line a
//! process prints, a message relayed, a counter, the store), bounded by
//! [`LIMIT`].
//!
//! Every process started is killed and reaped when the test ends, even
//! when it fails ([`Procs`]). Ports are all chosen by the kernel (port 0)
//! and read back from what each process prints. SCTP runs over UDP (RFC
//! 6951), which needs no privilege.

use mobicore::allinone;
use mobicore::config::Config;
use mobicore::elastic_mme::launch;
use mobicore::procs::{self, field, Procs, TempDir};
use mobicore_common::s11::{DownlinkDataNotification, S11IncomingAnswer, S11IncomingRequest, S11Request};
use mobicore_common::{Arp, Ebi, Teid};
use mobicore_gtp::message::{msg_type, GtpMessage};
use mobicore_gtp::s11::{decode_incoming_answer, decode_request, encode_incoming_request};
use mobicore_hss::SubscriberStore;
use mobicore_mme::context_codec::{self, TimeBase};
use mobicore_ran::Phase;
use mobicore_sctp::Transport;
use mobicore_store::redis_server::RedisServer;
use mobicore_store::Store;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The most any one step may take before the test fails (a bound for a
/// loaded machine, never a measure of speed).
const LIMIT: Duration = Duration::from_secs(60);
const UES: u64 = 12;

/// The test's processes: `mobicore` child processes, their output echoed
/// (tagged) on stderr, killed and reaped on drop.
fn new_procs() -> Procs {
    Procs::new(env!("CARGO_BIN_EXE_mobicore"), true)
}

/// Until `name` exits by itself (bounded by [`LIMIT`]); reaped.
async fn wait_exit(procs: &mut Procs, name: &str) -> std::process::ExitStatus {
    let end = Instant::now() + LIMIT;
    loop {
        if let Some(status) = procs.try_wait(name).unwrap() {
            return status;
        }
        assert!(Instant::now() < end, "{name} did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The first line from `rx` for which `pick` gives something.
fn wait_line<T>(rx: &mpsc::Receiver<String>, what: &str, pick: impl FnMut(&str) -> Option<T>) -> T {
    procs::wait_line(rx, what, LIMIT, pick).unwrap_or_else(|e| panic!("{e}"))
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

/// A counter summed over hosts.
async fn counter_sum(metrics: impl Iterator<Item = &SocketAddr>, name: &str) -> u64 {
    let mut n = 0;
    for &m in metrics {
        n += counter(m, name).await;
    }
    n
}

/// A host's counter, from its Prometheus endpoint.
async fn counter(metrics: std::net::SocketAddr, name: &str) -> u64 {
    live_counter(metrics, name).await.unwrap()
}

/// A host's counter; an error if the host is gone.
async fn live_counter(metrics: std::net::SocketAddr, name: &str) -> std::io::Result<u64> {
    let (status, body) = mobicore_controller::site::http(metrics, "GET", "/metrics", None, "").await?;
    assert_eq!(status, 200);
    Ok(body.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok()).unwrap_or(0))
}

/// The S11 path between the front end and the S/P-GW-C, relayed by the
/// test (every datagram both ways, unchanged), which can also send the
/// front end a Downlink Data Notification as the S-GW would. The UPF here
/// carries PFCP only (no downlink data plane without root and network
/// namespaces), so no real downlink can make the S/P-GW-C send one; the
/// DDN is the S/P-GW-C's own encoding (`encode_incoming_request`), from
/// the address the front end knows as the S-GW's.
struct S11Tap {
    addr: SocketAddr,
    inject: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    /// The answers to injected requests (sequence numbers 0xf0_0000 and
    /// up, which the S/P-GW-C's own requests do not reach here).
    answers: tokio::sync::mpsc::UnboundedReceiver<GtpMessage>,
    /// The sequence numbers of the Modify Bearer Responses relayed.
    modified: tokio::sync::watch::Receiver<Vec<u32>>,
    /// With `lose_first_csr`: the first Create Session Request's MME S11
    /// TEID once it has been dropped.
    lost_csr: tokio::sync::watch::Receiver<Option<u32>>,
    task: tokio::task::JoinHandle<()>,
}

const INJECTED_SEQ: u32 = 0xf0_0000;

impl S11Tap {
    /// `lose_first_csr`: the first Create Session Request from the front
    /// end is dropped, and its retransmissions (as if its host died before
    /// the S-GW heard it).
    async fn start(sgw: SocketAddr, lose_first_csr: bool) -> S11Tap {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let (inject, mut injected) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        let (answers_tx, answers) = tokio::sync::mpsc::unbounded_channel();
        let (modified_tx, modified) = tokio::sync::watch::channel(Vec::new());
        let (lost_tx, lost_csr) = tokio::sync::watch::channel(None);
        let task = tokio::spawn(async move {
            // The lost request's sequence number: its retransmissions
            // (the same number, TS 29.274 7.6) are lost too.
            let mut lost_seq: Option<u32> = None;
            let mut frontend: Option<SocketAddr> = None;
            let mut buf = vec![0u8; 65_536];
            loop {
                tokio::select! {
                    Some(bytes) = injected.recv() => {
                        let to = frontend.expect("the front end spoke first (its hosts' Create Session)");
                        socket.send_to(&bytes, to).await.unwrap();
                    }
                    r = socket.recv_from(&mut buf) => {
                        let (n, from) = r.unwrap();
                        let bytes = &buf[..n];
                        if from == sgw {
                            let msg = GtpMessage::parse(bytes).ok();
                            if let Some(m) = msg.filter(|m| m.body.msg_type() == msg_type::MODIFY_BEARER_RESPONSE) {
                                modified_tx.send_modify(|v| v.push(m.seq));
                            }
                            if let Some(to) = frontend {
                                socket.send_to(bytes, to).await.unwrap();
                            }
                            continue;
                        }
                        frontend = Some(from);
                        match GtpMessage::parse(bytes) {
                            Ok(m) if m.seq >= INJECTED_SEQ && !msg_type::is_request(m.body.msg_type()) => {
                                let _ = answers_tx.send(m);
                            }
                            Ok(m) if lose_first_csr
                                && m.body.msg_type() == msg_type::CREATE_SESSION_REQUEST
                                && lost_seq.is_none_or(|s| s == m.seq) =>
                            {
                                lost_seq = Some(m.seq);
                                let fteid = decode_request(&m).ok().and_then(|r| match r {
                                    S11Request::CreateSession(c) => Some(c.sender_fteid.teid.0),
                                    _ => None,
                                });
                                lost_tx.send_replace(Some(fteid.expect("a Create Session Request")));
                            }
                            _ => {
                                socket.send_to(bytes, sgw).await.unwrap();
                            }
                        }
                    }
                }
            }
        });
        S11Tap { addr, inject, answers, modified, lost_csr, task }
    }

    /// A DDN for the UE of MME S11 TEID `mme_teid`, and its answer.
    async fn downlink_data_notification(&mut self, mme_teid: u32, seq: u32) -> S11IncomingAnswer {
        let ddn = S11IncomingRequest::DownlinkDataNotification(DownlinkDataNotification {
            mme_teid: Teid(mme_teid),
            ebi: Some(Ebi(5)),
            arp: Some(Arp::default()),
        });
        self.inject.send(encode_incoming_request(&ddn, None, INJECTED_SEQ + seq).to_bytes()).unwrap();
        let m = tokio::time::timeout(LIMIT, self.answers.recv()).await.expect("the DDN's answer").unwrap();
        assert_eq!(m.seq, INJECTED_SEQ + seq);
        decode_incoming_answer(&m).unwrap()
    }

    /// How many Modify Bearer Responses have been relayed so far.
    fn modify_bearer_count(&self) -> usize {
        self.modified.borrow().len()
    }
}

impl Drop for S11Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// kill -9 host `id`, and wait until the front end has seen it go; the
/// first heir it named (0 for none).
fn kill_host(procs: &mut Procs, fe: &mpsc::Receiver<String>, id: u32) -> u32 {
    let status = procs.kill(&format!("host{id}")).unwrap();
    assert!(!status.success(), "host{id} was killed");
    wait_line(fe, "the front end to see the host gone", |l| {
        let rest = l.strip_prefix(&format!("mme-frontend: host{id} down"))?;
        Some(first_heir(rest.strip_prefix(" (")?).unwrap_or(0))
    })
}

/// The first heir of the front end's "heir hostH" or "heirs hostH N
/// groups, hostK M groups" (then anything).
fn first_heir(text: &str) -> Option<u32> {
    let rest = text.strip_prefix("heir host").or_else(|| text.strip_prefix("heirs host"))?;
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// SCTP over UDP (RFC 6951) between the RAN and the front end, relayed by
/// the test (every packet, unchanged), which holds the RAN's packets from
/// the first one the front end sends with a given S1AP message in it
/// ([`Options::s1_hold`]; e.g. the Initial Context Setup Request, the
/// Attach Accept's, TS 23.401 5.3.2.1 step 17) until told to let them go:
/// so a host can be killed after sending it and before it hears the
/// answer (Initial Context Setup Response, Attach Complete), with no race. Held packets are SCTP's to recover (it
/// retransmits; duplicates are discarded, RFC 9260 6.2).
struct S1Tap {
    /// The UDP port the RAN sends to.
    port: u16,
    /// True once the RAN's packets are held.
    held: tokio::sync::watch::Receiver<bool>,
    release: tokio::sync::mpsc::UnboundedSender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl S1Tap {
    async fn start(frontend: SocketAddr, hold: [u8; 2]) -> S1Tap {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let port = socket.local_addr().unwrap().port();
        let (held_tx, held) = tokio::sync::watch::channel(false);
        let (release, mut released) = tokio::sync::mpsc::unbounded_channel::<()>();
        let task = tokio::spawn(async move {
            let mut ran: Option<SocketAddr> = None;
            let (mut holding, mut done) = (false, false);
            let mut queue: Vec<Vec<u8>> = Vec::new();
            let mut buf = vec![0u8; 65_536];
            loop {
                tokio::select! {
                    Some(()) = released.recv() => {
                        for p in queue.drain(..) {
                            socket.send_to(&p, frontend).await.unwrap();
                        }
                        holding = false;
                    }
                    r = socket.recv_from(&mut buf) => {
                        let (n, from) = r.unwrap();
                        let p = &buf[..n];
                        if from == frontend {
                            if !done && carries_s1ap(p, hold) {
                                (holding, done) = (true, true);
                                held_tx.send_replace(true);
                            }
                            if let Some(to) = ran {
                                socket.send_to(p, to).await.unwrap();
                            }
                        } else if holding {
                            assert!(queue.len() < 100_000, "the RAN's packets held: bounded");
                            ran = Some(from);
                            queue.push(p.to_vec());
                        } else {
                            ran = Some(from);
                            socket.send_to(p, frontend).await.unwrap();
                        }
                    }
                }
            }
        });
        S1Tap { port, held, release, task }
    }
}

impl Drop for S1Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An S1AP Initial Context Setup Request's first octets: an
/// initiatingMessage (0) of procedure code 9 (TS 36.413 9.3.6,
/// id-InitialContextSetup).
const INITIAL_CONTEXT_SETUP_REQUEST: [u8; 2] = [0x00, 0x09];
/// An S1AP Handover Command's: a successfulOutcome (APER choice 1: 0x20)
/// of procedure code 0 (id-HandoverPreparation).
const HANDOVER_COMMAND: [u8; 2] = [0x20, 0x00];

/// Whether an SCTP packet carries, whole in a DATA chunk (RFC 9260 3.3.1:
/// TSN, stream, SSN, PPID, then the user data), an S1AP PDU starting with
/// `first` (its kind and procedure code).
fn carries_s1ap(p: &[u8], first: [u8; 2]) -> bool {
    let mut i = 12; // the common header
    while i + 4 <= p.len() {
        let (kind, flags, len) = (p[i], p[i + 1], u16::from_be_bytes([p[i + 2], p[i + 3]]) as usize);
        if len < 4 || i + len > p.len() {
            return false;
        }
        // A DATA chunk with B and E set: an unfragmented user message.
        if kind == 0 && flags & 0x03 == 0x03 && len >= 18 && p[i + 16..i + len].starts_with(&first) {
            return true;
        }
        i += (len + 3) & !3;
    }
    false
}

/// What a [`Cluster`] is started with.
#[derive(Clone, Copy)]
struct Options {
    ues: u64,
    /// S11 between the front end and the S/P-GW-C relayed by an [`S11Tap`].
    s11_tap: bool,
    /// The [`S11Tap`] drops the first Create Session Request.
    lose_first_csr: bool,
    /// Redis keeps what it answered across a kill and restart.
    redis_persistent: bool,
    /// S1 between the RAN and the front end relayed by an [`S1Tap`].
    s1_tap: bool,
    /// What the [`S1Tap`] holds the RAN's packets from.
    s1_hold: [u8; 2],
    /// The hosts' store: "redis" (a real redis-server started here) or
    /// "local" (each host's own, replicated to its replica host).
    store: &'static str,
    /// The front end's --scheme.
    scheme: &'static str,
    /// Host 3's --cpu-max.
    cpu_max: Option<&'static str>,
    /// Hosts started with the cluster (1..=hosts).
    hosts: u32,
    /// The RAN's procedure arrivals per second (none: all at once).
    rate: Option<f64>,
    /// More arguments of the front end.
    frontend: &'static [&'static str],
    /// More lines of the hosts' [mme] section.
    host_mme: &'static str,
    /// More arguments of the hosts started with the cluster.
    host_args: &'static [&'static str],
    /// More arguments of the hosts the front end starts.
    launched_args: &'static [&'static str],
    /// The hosts' link to the front end is a Unix socket (not loopback TCP).
    unix_link: bool,
}

const DEFAULT: Options = Options {
    ues: UES,
    s11_tap: false,
    lose_first_csr: false,
    redis_persistent: false,
    s1_tap: false,
    s1_hold: INITIAL_CONTEXT_SETUP_REQUEST,
    store: "redis",
    scheme: "ch",
    cpu_max: None,
    hosts: 3,
    rate: None,
    frontend: &[],
    host_mme: "",
    host_args: &[],
    launched_args: &[],
    unix_link: false,
};

/// A bad peer's connection to the hosts' link, TCP or Unix.
trait Duplex: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> Duplex for T {}

/// The elastic MME of three hosts, the RAN connected.
struct Cluster {
    // Dropped first: the processes, then the rest.
    procs: Procs,
    fe: mpsc::Receiver<String>,
    ran: mobicore_ran::Ran,
    core: allinone::AllInOne,
    /// The shared store (none with host-local stores).
    store: Option<Store>,
    metrics: BTreeMap<u32, SocketAddr>,
    /// What each host started with the cluster prints after its ready line.
    host_out: BTreeMap<u32, mpsc::Receiver<String>>,
    /// Every UE's record once idle, and the UEs of each host (by IMSI
    /// with a shared store; by count only with local stores).
    before: BTreeMap<String, Stored>,
    per_host: BTreeMap<u32, Vec<String>>,
    ues_on: BTreeMap<u32, u64>,
    /// Every UE's session as the RAN saw it once attached ([`sessions`]).
    attached: BTreeMap<u64, (std::net::Ipv4Addr, String)>,
    tap: Option<S11Tap>,
    s1_tap: Option<S1Tap>,
    ues: u64,
    /// The front end's hosts' address.
    hosts: String,
    /// The front end's operator API (scaling).
    admin: SocketAddr,
    /// The front end's S1-MME UDP port (SCTP over UDP) and S11 port.
    s1ap_udp: u16,
    s11_port: u16,
    _dir: TempDir,
    redis: Option<RedisServer>,
}

impl Cluster {
    /// Start it; UEs attach and are released to idle.
    async fn start(replication: &str, o: Options) -> Cluster {
        let mut c = Cluster::boot(replication, o).await;
        c.attach_and_idle().await;
        c
    }

    /// Start it up to the RAN's S1 Setup.
    async fn boot(replication: &str, o: Options) -> Cluster {
        let start = if o.redis_persistent { RedisServer::start_persistent } else { RedisServer::start };
        let redis = (o.store == "redis").then(|| start().expect("redis-server (apt-get install redis-server)"));
        let mut procs = new_procs();

        // HSS, UPF (PFCP only) and S/P-GW-C here; the monolithic MME that
        // `start` brings too stays idle on its own ephemeral port.
        let mut cfg = Config::default();
        cfg.mme.s1ap = "127.0.0.1:0".parse().unwrap();
        let mut ran_cfg = cfg.ran.core.clone();
        ran_cfg.ues = o.ues;
        ran_cfg.enbs = 2;
        ran_cfg.detach = true;
        // A bound for a loaded machine (a drain holds new procedures).
        ran_cfg.procedure_timeout_ms = 30_000;
        ran_cfg.rate = o.rate;
        let subscribers = SubscriberStore::in_memory();
        allinone::provision(&subscribers, &ran_cfg.plan, o.ues).unwrap();
        let core = allinone::start(&cfg, subscribers, Transport::Udp { port: 0 }).await.unwrap();
        let tap = match o.s11_tap {
            true => Some(S11Tap::start(core.sgw_s11, o.lose_first_csr).await),
            false => None,
        };
        let sgw = tap.as_ref().map_or(core.sgw_s11, |t| t.addr).to_string();

        // One directory per cluster: tests run side by side in this process.
        let dir = TempDir::new(&format!("mobicore-elastic-{replication}")).unwrap();
        let host_cfg = dir.0.join("host.toml");
        let toml = format!("{}{}", launch::host_config(core.hss, core.sgw_s11), o.host_mme);
        std::fs::write(&host_cfg, toml).unwrap();
        let url = redis.as_ref().map_or_else(|| o.store.to_string(), |r| r.url());
        // The hosts the front end starts (scaling out) are as these.
        let host_args = ["--config", host_cfg.to_str().unwrap(), "--store", &url, "--replication", replication];
        let host_args = host_args.into_iter().chain(["--metrics", "127.0.0.1:0"]);
        let launched = host_args.clone().chain(o.launched_args.iter().copied());

        let link = match o.unix_link {
            true => format!("unix:{}", dir.0.join("hosts.sock").display()),
            false => "127.0.0.1:0".to_string(),
        };
        let fe = procs
            .start(
                "frontend",
                &launch::frontend_args(&sgw, o.scheme, &link)
                    .into_iter()
                    // Generous: a drain waits for procedures, never for luck.
                    .chain(["--admin", "127.0.0.1:0", "--drain-within-ms", "20000"])
                    .chain(o.frontend.iter().copied())
                    .chain(["--"])
                    .chain(launched)
                    .collect::<Vec<_>>(),
            )
            .expect("starting the front end");
        let ready = wait_line(&fe, "the front end", |l| l.starts_with("mme-frontend ready").then(|| l.to_string()));
        let s1ap: SocketAddr = field(&ready, "s1ap").unwrap().parse().unwrap();
        let udp: u16 = field(&ready, "udp_port").unwrap().parse().unwrap();
        let hosts = field(&ready, "hosts").unwrap().to_string();
        let s11 = field(&ready, "s11").unwrap().to_string();
        let admin: SocketAddr = field(&ready, "admin").unwrap().parse().unwrap();

        // Bad peers on the hosts' port: a frame too long, a Hello of no
        // host. Each is disconnected; the front end carries on.
        for bad in [vec![0xff, 0xff, 0xff, 0xff], vec![0, 0, 0, 2, 1, 0]] {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut c: Box<dyn Duplex> = match hosts.strip_prefix("unix:") {
                Some(path) => Box::new(tokio::net::UnixStream::connect(path).await.unwrap()),
                None => Box::new(tokio::net::TcpStream::connect(&hosts).await.unwrap()),
            };
            c.write_all(&bad).await.unwrap();
            let mut buf = [0u8; 16];
            let n = tokio::time::timeout(LIMIT, c.read(&mut buf)).await.expect("closed by the front end");
            assert_eq!(n.unwrap_or(0), 0, "nothing but the close");
        }

        let (mut metrics, mut host_out) = (BTreeMap::new(), BTreeMap::new());
        for id in 1..=o.hosts {
            let name = format!("host{id}");
            let out = procs
                .start(
                    &name,
                    &[
                        "mme-host",
                        "--config",
                        host_cfg.to_str().unwrap(),
                        "--id",
                        &id.to_string(),
                        "--frontend",
                        &hosts,
                        "--frontend-s11",
                        &s11,
                        "--store",
                        &url,
                        "--replication",
                        replication,
                        "--metrics",
                        "127.0.0.1:0",
                    ]
                    .into_iter()
                    .chain(o.cpu_max.filter(|_| id == 3).map(|f| ["--cpu-max", f]).into_iter().flatten())
                    .chain(o.host_args.iter().copied())
                    .collect::<Vec<_>>(),
                )
                .unwrap_or_else(|e| panic!("starting {name}: {e}"));
            let m = wait_line(&out, &name, |l| field(l, "metrics").map(str::to_string));
            metrics.insert(id, m.parse::<SocketAddr>().unwrap());
            host_out.insert(id, out);
            wait_line(&fe, "the host's connection", |l| (l == format!("mme-frontend: host{id} up")).then_some(()));
        }

        ran_cfg.mme = s1ap;
        let s1_tap = match o.s1_tap {
            true => Some(S1Tap::start(SocketAddr::new(s1ap.ip(), udp), o.s1_hold).await),
            false => None,
        };
        let udp = s1_tap.as_ref().map_or(udp, |t| t.port);
        let ran = allinone::ran_session(&cfg, ran_cfg, Transport::Udp { port: udp }, None).await.unwrap();
        let store = match &redis {
            Some(_) => Some(Store::connect_redis(&url, "mobicore").await.unwrap()),
            None => None,
        };
        Cluster {
            procs,
            fe,
            ran,
            core,
            store,
            metrics,
            host_out,
            before: BTreeMap::new(),
            per_host: BTreeMap::new(),
            ues_on: BTreeMap::new(),
            attached: BTreeMap::new(),
            tap,
            s1_tap,
            ues: o.ues,
            hosts,
            admin,
            s1ap_udp: udp,
            s11_port: s11.rsplit(':').next().and_then(|p| p.parse().ok()).expect("the front end's S11 port"),
            _dir: dir,
            redis,
        }
    }

    /// A host started under gone host `id`'s number exits, refused.
    async fn restart_refused(&mut self, id: u32) {
        let url = self.redis.as_ref().map(|r| r.url()).expect("over Redis");
        let cfg = self._dir.0.join("host.toml");
        let s11 = format!("127.0.0.1:{}", self.s11_port);
        let id = id.to_string();
        let args = ["mme-host", "--config", cfg.to_str().unwrap(), "--id", &id, "--frontend", &self.hosts];
        let args = [&args[..], &["--frontend-s11", &s11, "--store", &url]].concat();
        let out = self.procs.start("restarted", &args).unwrap();
        let why = "went and its UEs are served by its heirs";
        wait_line(&out, "the restarted host's refusal", |l| l.contains(why).then_some(()));
        assert!(!wait_exit(&mut self.procs, "restarted").await.success(), "refused");
        wait_line(&self.fe, "the front end's refusal", |l| (l.contains("refused") && l.contains(why)).then_some(()));
    }

    /// Attach, then release to idle: each UE's procedure completed, its
    /// record written (cold too), UEs on every host.
    async fn attach_and_idle(&mut self) {
        let (ran, ues) = (&mut self.ran, self.ues);
        ran.attach().await.unwrap();
        assert_eq!(ran.attached_ues().len() as u64, ues, "{:?}", ran.report().failures);
        self.attached = sessions(ran);
        let r = ran.phase(Phase::Release).await.unwrap();
        assert_eq!((r.succeeded, r.failed), (ues, 0), "release: {:?}", ran.report().failures);

        self.ues_on = self.attached_per_host().await;
        if let Some(store) = &self.store {
            self.before = records(store).await;
            assert_eq!(self.before.len() as u64, ues, "every UE's record is in the store");
            for (imsi, s) in &self.before {
                self.per_host.entry(s.mme_ue_s1ap_id >> 24).or_default().push(imsi.clone());
                assert_eq!(s.m_tmsi >> 24, s.mme_ue_s1ap_id >> 24, "both identifiers carry their host");
            }
            let counts = self.per_host.iter().map(|(&h, v)| (h, v.len() as u64)).collect::<BTreeMap<_, _>>();
            assert_eq!(counts, self.ues_on, "each host attached its UEs");
        }
        let hosts = self.ues_on.iter().filter(|(_, &n)| n > 0).map(|(&h, _)| h).collect::<Vec<_>>();
        assert_eq!(hosts, [1, 2, 3], "UEs on every host: {:?}", self.ues_on);
    }

    /// With host-local stores: the live hosts (the heirs of gone hosts'
    /// replica groups) took each of `taken` UEs of the gone hosts from
    /// their copies of the gone hosts' records (no record missing, every
    /// UE found, once), and every UE kept its session.
    async fn check_served_from_copy(&self, taken: u64) {
        assert_eq!(self.counter_of_others(0, "mobicore_mme_replica_inherit_no_copy").await, 0);
        assert_eq!(self.counter_of_others(0, "mobicore_mme_replica_inherit_incomplete").await, 0);
        assert!(self.counter_of_others(0, "mobicore_mme_replica_inherited").await >= taken, "the records inherited");
        let taken_over = self.counter_of_others(0, "mobicore_mme_host_ue_taken_over").await;
        assert_eq!(taken_over, taken, "the heirs loaded each UE once");
        for &m in self.metrics.values() {
            assert_eq!(counter(m, "mobicore_mme_host_ue_not_in_store").await, 0);
        }
        assert_eq!(sessions(&self.ran), self.attached, "every UE kept its address and S-GW tunnel: its session");
    }

    /// Every (connected) UE's release and TAU, then [`Cluster::finish`].
    async fn release_tau_and_finish(mut self) -> u64 {
        for phase in [Phase::Release, Phase::Tau] {
            let r = self.ran.phase(phase).await.unwrap();
            assert_eq!((r.succeeded, r.failed), (self.ues, 0), "{phase:?}: {:?}", self.ran.report().failures);
        }
        self.ran.settle_idle().await.unwrap();
        self.finish().await
    }

    /// The shared store (Redis).
    fn shared(&self) -> &Store {
        self.store.as_ref().expect("a shared store")
    }

    /// The UEs each host attached (its attaches completed).
    async fn attached_per_host(&self) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for (&id, &m) in &self.metrics {
            out.insert(id, counter(m, "mobicore_mme_attach_complete").await);
        }
        out
    }

    /// kill -9 the host with the most UEs, once the front end has seen it
    /// go; its number and its UEs (their IMSIs with a shared store).
    fn kill_busiest(&mut self) -> (u32, Vec<String>) {
        let (&victim, _) = self.ues_on.iter().max_by_key(|(_, &n)| n).unwrap();
        let served = self.per_host.get(&victim).cloned().unwrap_or_default();
        kill_host(&mut self.procs, &self.fe, victim);
        (victim, served)
    }

    /// The sum of a counter over the live hosts (all but `dead`; 0: all).
    async fn counter_of_others(&self, dead: u32, name: &str) -> u64 {
        counter_sum(self.metrics.iter().filter(|(&id, _)| id != dead).map(|(_, m)| m), name).await
    }

    /// Until the sum of a counter over the live hosts reaches `value`.
    async fn wait_others(&self, dead: u32, name: &str, value: u64) {
        let end = Instant::now() + LIMIT;
        while self.counter_of_others(dead, name).await < value {
            assert!(Instant::now() < end, "waiting for {name} to reach {value}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every UE detaches, with no attach beyond the first; no record left.
    /// Every UE detaches, none attached again; the UEs that detached at a
    /// visitor (host-local stores) had their keys deleted at their owners'
    /// hosts too: how many.
    async fn finish(self) -> u64 {
        let Cluster { procs, ran, core, store, ues, metrics, .. } = self;
        let report = ran.finish().await.unwrap();
        assert_eq!((report.attached, report.failed), (ues, 0), "no attach beyond the first: {:?}", report.failures);
        assert_eq!((report.detached, report.detach_failed), (ues, 0), "{:?}", report.failures);
        if let Some(store) = &store {
            assert!(records(store).await.is_empty(), "detached UEs leave no record");
        }
        // Over the hosts alive now (a test may have killed one).
        let mut live = Vec::new();
        for &m in metrics.values() {
            if live_counter(m, "mobicore_mme_host_detached_away").await.is_ok() {
                live.push(m);
            }
        }
        let end = Instant::now() + LIMIT;
        let away = loop {
            let away = counter_sum(live.iter(), "mobicore_mme_host_detached_away").await;
            let deleted = counter_sum(live.iter(), "mobicore_mme_host_taken_back_deleted").await;
            if away == deleted {
                break away;
            }
            assert!(Instant::now() < end, "{away} UEs detached at a visitor, {deleted} deleted at their owners");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        drop(procs);
        core.stop().await.unwrap();
        away
    }
}

/// Conformance is unchanged by the decomposition: tshark reads
/// everything the decomposed MME puts on loopback (S1AP and NAS over SCTP
/// over UDP from the front end, S6a from the hosts, S11 through the front
/// end) through attach, release, a host killed (hot) and its UEs' service
/// requests on the heir, and detach, with no malformed packet or expert
/// error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decomposed_mmes_capture_decodes_without_malformed_packets_or_expert_errors() {
    use mobicore::capture::{self, Capture, Ports};
    if !mobicore_common::tools::is_root() && !capture::tshark_available() {
        eprintln!("skipped: no tshark");
        return;
    }
    // As root (CI, tshark installed by the bootstrap) the check must run.
    mobicore_common::tools::require(&["tshark"]);
    let dir = TempDir::new("mobicore-elastic-capture").unwrap();
    let file = dir.0.join("elastic.pcapng");
    let cap = Capture::start(&file, &Ports::everything()).unwrap();
    let mut c = Cluster::start("hot", DEFAULT).await;
    let (victim, _) = c.kill_busiest();
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests: {:?}", c.ran.report().failures);
    assert!(c.counter_of_others(victim, "mobicore_mme_host_ue_taken_over").await > 0);
    let mut ports = c.core.capture_ports();
    ports.gtpv2.push(c.s11_port);
    ports.sctp_udp.push(c.s1ap_udp);
    c.finish().await;
    let v = capture::analyze(&cap.stop().unwrap(), &ports).unwrap();
    println!("capture: {:?}", v.packets);
    let problems: Vec<_> = v.malformed.iter().chain(&v.expert_errors).take(10).collect();
    assert!(v.is_clean(), "malformed packets or expert errors: {problems:?}");
    for proto in ["s1ap", "nas-eps", "diameter", "gtpv2"] {
        assert!(v.packets.get(proto).copied().unwrap_or(0) > 0, "no {proto} in the capture: {:?}", v.packets);
    }
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
    let mut c = Cluster::start(replication, DEFAULT).await;
    let (victim, served) = c.kill_busiest();

    // Every UE comes back from idle by a service request: the victim's
    // are taken over by its heir from their stored records.
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests: {:?}", c.ran.report().failures);
    let taken_over = c.counter_of_others(victim, "mobicore_mme_host_ue_taken_over").await;
    assert_eq!(taken_over, served.len() as u64, "the heir loaded each of the victim's UEs once");
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_host_ue_not_in_store").await, 0);

    // No new attach: the same MME-UE-S1AP-ID, GUTI and S-GW session.
    let after = records(c.shared()).await;
    for imsi in &served {
        assert_eq!(after.get(imsi), c.before.get(imsi), "UE {imsi} kept its context");
    }

    // The victim restarted under its number (as a supervisor would) is
    // refused: its UEs' identifiers are its heirs' now. It exits saying
    // so, and they go on being served there.
    c.restart_refused(victim).await;
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "releases: {:?}", c.ran.report().failures);
    c.finish().await;
}

/// Downlink data for an idle UE of a killed host: the S-GW's Downlink
/// Data Notification goes to the front end's S11 address (the one the
/// hosts' Create Session Requests came from), which hands it to the heir
/// by the UE's MME S11 TEID; the heir loads the UE, acknowledges, pages
/// it, and the UE comes back by a service request (its Modify Bearer
/// through the front end) with the same GUTI and session, no new attach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_downlink_data_for_a_killed_hosts_idle_ue_pages_it_from_the_heir() {
    let mut c = Cluster::start("cold", Options { s11_tap: true, ..DEFAULT }).await;
    let (victim, served) = c.kill_busiest();
    let imsi = served[0].clone();
    let ue = c.before[&imsi].clone();

    let mut tap = c.tap.take().unwrap();
    let modified = tap.modify_bearer_count();
    let S11IncomingAnswer::DownlinkDataNotificationAck(ack) =
        tap.downlink_data_notification(ue.mme_ue_s1ap_id, 1).await;
    assert!(ack.cause.is_accepted(), "DDN acknowledged by the heir: {ack:?}");
    // The heir loads every UE of the victim when told it inherits them
    // (that and the DDN, which comes by S11, in either order).
    c.wait_others(victim, "mobicore_mme_host_ue_taken_over", served.len() as u64).await;
    let taken_over = c.counter_of_others(victim, "mobicore_mme_host_ue_taken_over").await;
    assert_eq!(taken_over, served.len() as u64, "the heir loaded the victim's UEs");
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_ddn_received").await, 1);
    assert!(c.counter_of_others(victim, "mobicore_mme_paging_sent").await >= 1, "the heir paged the UE");

    // The RAN answers the paging: served until the service request's
    // Modify Bearer has gone through the front end to the S/P-GW-C.
    let mut m = tap.modified.clone();
    let modify_bearer = async { tokio::time::timeout(LIMIT, m.wait_for(|v| v.len() > modified)).await.is_ok() };
    let done = c.ran.serve_until(modify_bearer).await.unwrap();
    assert!(done, "no Modify Bearer after the paging: {:?}", c.ran.report().failures);
    let paged = c.ran.report().unsolicited.get("paging_response").map_or(0, |r| r.succeeded);
    assert_eq!(paged, 1, "the UE came back by paging: {:?}", c.ran.report().unsolicited);
    let after = records(c.shared()).await;
    assert_eq!(after.get(&imsi), Some(&ue), "UE {imsi} kept its MME-UE-S1AP-ID, GUTI and session");

    // The others come back by their own service requests.
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES - 1, 0), "service requests: {:?}", c.ran.report().failures);
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_host_ue_taken_over").await, served.len() as u64);
    c.finish().await;
    drop(tap); // relayed S11 to the end (Delete Session)
}

/// Per-procedure placement and paging: the S-GW's Downlink Data
/// Notification for an idle UE goes to its owner's host (by S11 TEID),
/// which pages it and so holds it (it says so before the paging goes
/// out): the UE's service request, by its S-TMSI, goes to that host, not
/// to the one the balancer would pick; no host loads it from the store,
/// no write conflicts, and the UE keeps its identifiers and session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placed_procedures_a_paged_ues_service_request_goes_to_the_host_paging_it() {
    let o = Options { s11_tap: true, frontend: &["--placement", "procedure"], ..DEFAULT };
    let mut c = Cluster::start("cold", o).await;
    let taken_before = c.counter_of_others(0, "mobicore_mme_host_ue_taken_over").await;
    let (imsi, ue) = c.before.iter().next().map(|(i, u)| (i.clone(), u.clone())).unwrap();
    let mut tap = c.tap.take().unwrap();
    let modified = tap.modify_bearer_count();
    let S11IncomingAnswer::DownlinkDataNotificationAck(ack) =
        tap.downlink_data_notification(ue.mme_ue_s1ap_id, 1).await;
    assert!(ack.cause.is_accepted(), "DDN acknowledged: {ack:?}");
    let owner = c.metrics[&(ue.mme_ue_s1ap_id >> 24)];
    assert!(counter(owner, "mobicore_mme_paging_sent").await >= 1, "the owner's host paged the UE");

    let mut m = tap.modified.clone();
    let modify_bearer = async { tokio::time::timeout(LIMIT, m.wait_for(|v| v.len() > modified)).await.is_ok() };
    let done = c.ran.serve_until(modify_bearer).await.unwrap();
    assert!(done, "no Modify Bearer after the paging: {:?}", c.ran.report().failures);
    let paged = c.ran.report().unsolicited.get("paging_response").map_or(0, |r| r.succeeded);
    assert_eq!(paged, 1, "the UE came back by paging: {:?}", c.ran.report().unsolicited);
    assert_eq!(
        c.counter_of_others(0, "mobicore_mme_host_ue_taken_over").await,
        taken_before,
        "served where it was paged"
    );
    assert_eq!(records(c.shared()).await.get(&imsi), Some(&ue), "UE {imsi} kept its identifiers and session");
    for &m in c.metrics.values() {
        assert_eq!(counter(m, "mobicore_mme_store_cas_conflict").await, 0);
    }
    c.finish().await;
    drop(tap); // relayed S11 to the end (Delete Session)
}

/// A killed host's idle UEs' timers run on its heir (issue 13 item 2): the
/// heir loads them when the front end tells it it inherits them, not at
/// their next message, so their mobile reachable and implicit detach
/// timers (TS 23.401 4.3.5.2; short here) fire there. Every UE, the
/// victim's too, is detached implicitly by a live host, its record gone,
/// though the RAN sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_a_killed_hosts_idle_ues_timers_fire_on_the_heir() {
    let host_mme = "mobile_reachable_seconds = 20\nimplicit_detach_seconds = 5\n";
    let mut c = Cluster::start("cold", Options { host_mme, ..DEFAULT }).await;
    let (victim, served) = c.kill_busiest();
    assert!(!served.is_empty());
    c.wait_others(victim, "mobicore_mme_host_ues_adopted", served.len() as u64).await;
    let end = Instant::now() + LIMIT;
    while c.counter_of_others(victim, "mobicore_mme_implicit_detach").await < UES {
        if Instant::now() > end {
            let mut seen = vec![];
            for (id, m) in c.metrics.iter().filter(|(id, _)| **id != victim) {
                for name in
                    ["mobicore_mme_mobile_reachable_expiry", "mobicore_mme_implicit_detach", "mobicore_mme_ue_idle"]
                {
                    seen.push(format!("host{id} {name} {}", counter(*m, name).await));
                }
            }
            panic!("not every UE detached implicitly: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_host_ues_adopted").await, served.len() as u64);
    let end = Instant::now() + LIMIT;
    while !records(c.shared()).await.is_empty() {
        assert!(Instant::now() < end, "implicitly detached UEs leave no record");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Cluster { procs, core, .. } = c;
    drop(procs);
    core.stop().await.unwrap();
}

/// Hot replication, a host killed mid-procedure: the host of the only UE
/// attaching is killed after it has sent the Attach Accept (in the
/// Initial Context Setup Request, its state written to the store first)
/// and before it hears the Initial Context Setup Response and the Attach
/// Complete ([`S1Tap`] holds them). Those reach the heir, which loads the
/// UE as it stood mid-attach and completes the attach: the UE keeps the
/// dead host's MME-UE-S1AP-ID and GUTI (no restart, no new attach), and
/// detaches from the heir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_a_host_killed_mid_attach_its_ue_completes_the_attach_on_the_heir() {
    let mut c = Cluster::boot("hot", Options { ues: 1, s1_tap: true, ..DEFAULT }).await;
    let tap = c.s1_tap.take().unwrap();
    let mut held = tap.held.clone();
    let Cluster { ran, procs, fe, store, .. } = &mut c;
    let mid_attach = async {
        let r = tokio::time::timeout(LIMIT, held.wait_for(|h| *h)).await;
        assert!(r.is_ok(), "no Initial Context Setup Request went down");
        // Write-ahead: the host stored the UE before sending the request.
        let mid = records(store.as_ref().unwrap()).await;
        assert_eq!(mid.len(), 1, "the UE's record, mid-attach: {mid:?}");
        let ue = mid.values().next().unwrap().clone();
        let victim = ue.mme_ue_s1ap_id >> 24;
        tokio::task::block_in_place(|| kill_host(procs, fe, victim));
        tap.release.send(()).unwrap();
        (victim, ue)
    };
    let (attach, (victim, ue)) = tokio::join!(ran.attach(), mid_attach);
    attach.unwrap();
    assert_eq!(c.ran.attached_ues().len(), 1, "{:?}", c.ran.report().failures);

    // The heir took the UE over and completed its attach (the RAN's
    // attach ends when its Attach Complete is sent: wait for the heir).
    c.wait_others(victim, "mobicore_mme_attach_complete", 1).await;
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_host_ue_taken_over").await, 1);
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_attach_complete").await, 1);
    let after = records(c.shared()).await;
    assert_eq!(after.values().collect::<Vec<_>>(), [&ue], "the same MME-UE-S1AP-ID, GUTI and session");
    c.finish().await;
    drop(tap); // relayed S1 to the end (Detach)
}

/// Hot replication, a host killed while an answer is awaited: the Create
/// Session Request of the only UE attaching is lost (the [`S11Tap`] drops
/// it) and its host is killed; the record (written before the request
/// went out) stands at that step. The heir, told it inherits the host's
/// UEs, loads the UE and sends the request again (the answer to the first
/// would have gone to the dead host): the attach completes on the heir
/// with the dead host's MME-UE-S1AP-ID, S11 TEID and GUTI, no new attach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_a_host_killed_awaiting_create_session_its_heir_resends_it_and_the_attach_completes() {
    let o = Options { ues: 1, s11_tap: true, lose_first_csr: true, ..DEFAULT };
    let mut c = Cluster::boot("hot", o).await;
    let mut lost = c.tap.as_ref().unwrap().lost_csr.clone();
    let Cluster { ran, procs, fe, store, .. } = &mut c;
    let mid_attach = async {
        let r = tokio::time::timeout(LIMIT, lost.wait_for(|l| l.is_some())).await;
        let teid = r.expect("no Create Session Request went out").map(|l| *l).unwrap().expect("its TEID");
        // Write-ahead: the host stored the UE (no GUTI nor session yet)
        // before sending the request.
        let mid = store.as_ref().unwrap().scan_prefix("mme/ue/").await.unwrap();
        assert_eq!(mid.len(), 1, "the UE's record, mid-attach");
        let time = TimeBase { now: Instant::now(), unix_ms: 1_800_000_000_000 };
        let ue = context_codec::decode(&mid[0].1.value, time).unwrap();
        assert_eq!(ue.id, teid, "the MME S11 TEID is the MME-UE-S1AP-ID");
        assert_eq!(ue.step, mobicore_mme::context::Step::CreateSession);
        let victim = teid >> 24;
        tokio::task::block_in_place(|| kill_host(procs, fe, victim));
        victim
    };
    let (attach, victim) = tokio::join!(ran.attach(), mid_attach);
    attach.unwrap();
    assert_eq!(c.ran.attached_ues().len(), 1, "{:?}", c.ran.report().failures);
    c.wait_others(victim, "mobicore_mme_attach_complete", 1).await;
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_host_ue_taken_over").await, 1);
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_ue_resumed_request").await, 1, "the request went again");
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_attach_complete").await, 1);
    let after = records(c.shared()).await;
    let ue = after.values().next().expect("the UE's record");
    assert_eq!(ue.mme_ue_s1ap_id >> 24, victim, "the dead host's MME-UE-S1AP-ID kept");
    assert_eq!(after.len(), 1);
    c.finish().await;
}

/// Every UE's uplink NAS COUNT as last verified, from its stored record
/// (the store's error if it cannot be read now).
async fn stored_ul_counts(store: &Store) -> Result<BTreeMap<String, u32>, mobicore_store::StoreError> {
    let time = TimeBase { now: Instant::now(), unix_ms: 1_800_000_000_000 };
    let mut out = BTreeMap::new();
    for (key, v) in store.scan_prefix("mme/ue/").await? {
        let ue = context_codec::decode(&v.value, time).unwrap();
        let count = ue.security.as_ref().map_or(0, |s| s.last_ul_count);
        out.insert(key.trim_start_matches("mme/ue/").to_string(), count);
    }
    Ok(out)
}

/// Redis slow, unavailable and restarted under the hosts (issue 13: clear
/// errors and counted failures, never a crash). Frozen (SIGSTOP): every
/// UE's service request is served from the hosts' memory, the writes
/// time out and are counted, and the hosts pause their writes instead of
/// waiting out a timeout at every event. Killed (SIGKILL) while frozen:
/// every release is served too. Restarted (persistent, so with what it
/// had answered): the hosts catch up by themselves, each record the UE's
/// newest state (its uplink NAS COUNT past the service request). Then a
/// host is killed: its UEs come back on the heir from those records, and
/// every UE detaches with no attach beyond the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_killed_and_restarted_the_hosts_serve_on_and_catch_up() {
    let mut c = Cluster::start("cold", Options { redis_persistent: true, ..DEFAULT }).await;
    let counts_before = stored_ul_counts(c.shared()).await.unwrap();
    assert_eq!(counts_before.len() as u64, UES);

    c.redis.as_mut().unwrap().pause().unwrap();
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests, Redis frozen: {:?}", c.ran.report().failures);
    // The failed writes are counted (once their answer's wait is over).
    c.wait_others(0, "mobicore_mme_store_write_failed", 1).await;
    c.redis.as_mut().unwrap().kill().unwrap();
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "releases, Redis gone: {:?}", c.ran.report().failures);

    c.redis.as_mut().unwrap().restart().unwrap();
    let end = Instant::now() + LIMIT;
    loop {
        // The test's own connection comes back by itself too.
        let now = stored_ul_counts(c.shared()).await.unwrap_or_default();
        let behind: Vec<_> = counts_before.iter().filter(|(imsi, n)| now.get(*imsi).is_none_or(|m| m <= n)).collect();
        if behind.is_empty() {
            break;
        }
        assert!(Instant::now() < end, "records not caught up after the restart: {behind:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(records(c.shared()).await, c.before, "identifiers and sessions unchanged");

    let (victim, served) = c.kill_busiest();
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests: {:?}", c.ran.report().failures);
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_host_ue_taken_over").await, served.len() as u64);
    c.finish().await;
}

/// NF instances inside a host (issue 13 item 1, seed 004 Fig. 7 "NF
/// failure"): one host with two `mme-nf` instances behind its forwarder.
/// Instance 0 holds the first S6a answer it is sent forever (a test flag),
/// so it provably holds an attach's event when it is killed with SIGKILL;
/// its events are taken over by instance 1 from the records as last
/// committed and every attach completes, with no re-attach; a replacement
/// instance starts in its slot; then every UE's service request and
/// detach succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_a_killed_nf_instances_events_are_taken_over_and_every_attach_completes() {
    let host_args: &[&str] = &["--nf-instances", "2", "--nf-stall-first"];
    let mut c = Cluster::boot("hot", Options { hosts: 1, host_args, ..DEFAULT }).await;
    let out = c.host_out.remove(&1).unwrap();
    let nf_pid = |l: &str, slot: &str| {
        let rest = l.strip_prefix("mme-host 1: nf ")?;
        let (s, pid) = rest.split_once(" pid ")?;
        (s == slot).then(|| pid.trim().parse::<i32>().ok()).flatten()
    };
    let mut pids = BTreeMap::new();
    while pids.len() < 2 {
        let (slot, pid) = wait_line(&out, "the NF instances", |l| {
            ["0", "1"].into_iter().find_map(|s| nf_pid(l, s).map(|p| (s.to_string(), p)))
        });
        pids.insert(slot, pid);
    }
    let victim = pids["0"];
    // Once instance 0 holds an event (it says so), kill it; then its
    // replacement comes up in slot 0.
    let killer = tokio::task::spawn_blocking(move || {
        wait_line(&out, "instance 0 to hold an S6a answer", |l| l.starts_with("mme-nf 1/0: stalling").then_some(()));
        // SAFETY: kill(2) of a process this test saw start (the host's child).
        assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0, "kill -9 {victim}");
        wait_line(&out, "the forwarder to see instance 0 gone", |l| {
            l.strip_prefix("mme-host 1: nf 0 gone, ")?.split(' ').next()?.parse::<u64>().ok()
        })
    });
    c.ran.attach().await.unwrap();
    let retaken = killer.await.unwrap();
    assert!(retaken >= 1, "instance 0 held events when it was killed");
    assert_eq!(c.ran.attached_ues().len() as u64, UES, "{:?}", c.ran.report().failures);
    let m = c.metrics[&1];
    // The RAN's attach ends at its Attach Complete: wait for the host's.
    c.wait_others(0, "mobicore_mme_attach_complete", UES).await;
    assert_eq!(counter(m, "mobicore_mme_host_nf_failed").await, 1);
    assert!(counter(m, "mobicore_mme_host_nf_events_retaken").await >= retaken);
    assert_eq!(counter(m, "mobicore_mme_host_nf_import_failed").await, 0);
    assert_eq!(counter(m, "mobicore_mme_host_nf_none_free").await, 0, "no event left to the forwarder's core");
    assert_eq!(counter(m, "mobicore_mme_attach_complete").await, UES, "one attach per UE");
    let end = Instant::now() + LIMIT;
    while counter(m, "mobicore_mme_host_nf_up").await < 3 {
        assert!(Instant::now() < end, "a replacement instance in slot 0");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for phase in [Phase::Release, Phase::ServiceRequest] {
        let r = c.ran.phase(phase).await.unwrap();
        assert_eq!((r.succeeded, r.failed), (UES, 0), "{phase:?}: {:?}", c.ran.report().failures);
    }
    assert_eq!(counter(m, "mobicore_mme_host_bad_frame").await, 0);
    c.finish().await;
}

/// A host with one NF instance per procedure kind (seed 004 5.2): each
/// instance takes only its kind's procedures; the service-request one is
/// killed with SIGKILL while it provably holds a service request's
/// Modify Bearer Response, its events wait for its replacement (same
/// kind) and every service request completes; then every UE's release,
/// TAU and detach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_per_procedure_nf_instances_serve_their_kind_and_a_killed_ones_replacement_takes_over() {
    let host_args: &[&str] = &["--nf", "attach=1,service-request=1,tau=1,handover=1,detach=1", "--nf-stall-mbr", "1"];
    let mut c = Cluster::boot("hot", Options { hosts: 1, host_args, ..DEFAULT }).await;
    let out = c.host_out.remove(&1).unwrap();
    let kinds = ["attach", "service_request", "tau", "handover", "detach"];
    let mut pids = BTreeMap::new();
    while pids.len() < kinds.len() {
        let (slot, pid) = wait_line(&out, "the NF instances", |l| {
            let (s, pid) = l.strip_prefix("mme-host 1: nf ")?.split_once(" pid ")?;
            Some((s.parse::<usize>().ok()?, pid.trim().parse::<i32>().ok()?))
        });
        pids.insert(slot, pid);
    }
    let m = c.metrics[&1];
    c.ran.attach().await.unwrap();
    assert_eq!(c.ran.attached_ues().len() as u64, UES, "{:?}", c.ran.report().failures);
    c.wait_others(0, "mobicore_mme_attach_complete", UES).await;
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "release: {:?}", c.ran.report().failures);
    let victim = pids[&1];
    let killer = tokio::task::spawn_blocking(move || {
        wait_line(&out, "the SR instance to hold a Modify Bearer Response", |l| {
            l.starts_with("mme-nf 1/1: stalling on a Modify Bearer Response").then_some(())
        });
        // SAFETY: kill(2) of a process this test saw start (the host's child).
        assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0, "kill -9 {victim}");
        wait_line(&out, "the forwarder to see instance 1 gone", |l| {
            l.strip_prefix("mme-host 1: nf 1 gone, ")?.split(' ').next()?.parse::<u64>().ok()
        })
    });
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service request: {:?}", c.ran.report().failures);
    let retaken = killer.await.unwrap();
    assert!(retaken >= 1, "instance 1 held events when it was killed");
    for phase in [Phase::Release, Phase::Tau] {
        let r = c.ran.phase(phase).await.unwrap();
        assert_eq!((r.succeeded, r.failed), (UES, 0), "{phase:?}: {:?}", c.ran.report().failures);
    }
    c.ran.settle_idle().await.unwrap();
    // Every UE detaches (the RAN's end), with no attach beyond the first.
    let Cluster { procs, ran, core, .. } = c;
    let report = ran.finish().await.unwrap();
    assert_eq!((report.attached, report.failed), (UES, 0), "{:?}", report.failures);
    assert_eq!((report.detached, report.detach_failed), (UES, 0), "{:?}", report.failures);
    assert_eq!(counter(m, "mobicore_mme_host_nf_failed").await, 1);
    assert!(counter(m, "mobicore_mme_host_nf_events_parked").await >= 1, "they waited for the replacement");
    assert_eq!(counter(m, "mobicore_mme_host_nf_up").await, 6, "five instances and the replacement");
    assert_eq!(counter(m, "mobicore_mme_host_nf_none_free").await, 0, "no event left to the forwarder's core");
    assert_eq!(counter(m, "mobicore_mme_host_nf_import_failed").await, 0);
    assert_eq!(counter(m, "mobicore_mme_attach_complete").await, UES, "one attach per UE");
    // Each instance took its kind's procedures only (a release goes to
    // the UE's last procedure's instance, counted as that kind's).
    for (slot, kind) in kinds.iter().enumerate() {
        for other in kinds {
            let n = counter(m, &format!("mobicore_mme_host_nf{slot}_{other}_events")).await;
            if other == *kind {
                if *kind != "handover" {
                    assert!(n >= UES, "instance {slot} ({kind}): {n} events of its kind");
                }
            } else {
                assert_eq!(n, 0, "instance {slot} ({kind}) took {n} events of {other}");
            }
        }
    }
    assert_eq!(counter(m, "mobicore_mme_host_bad_frame").await, 0);
    drop(procs);
    core.stop().await.unwrap();
}

/// The per-host NF controller (issue 13 item 5, seed 004 5.2): one host
/// with an instance per kind and one idle in the pool, every instance slow
/// (30 ms per event, a test flag), 40 UEs attaching at 20 a second: the
/// attach instance's backlog persists, so the pooled instance is given
/// attach and takes the attaches that start from then on by least Q/C
/// (its events counted under attach); once every UE is attached and
/// nothing more comes, it goes back to the pool. Attaches over their SLO
/// bump attach's priority. Every UE attaches once and detaches.
/// UEs attaching to a backlogged instance (the NF controller's tests).
const N: u64 = 40;

/// One hot host with `host_args` (NF instances slowed down), and `N` UEs
/// attached at 20 a second, each attach some 7 events of 30 ms at the
/// instance: far beyond one instance, so its backlog grows whatever the
/// machine. The host's output and metrics address.
async fn backlogged_attaches(host_args: &'static [&'static str]) -> (Cluster, mpsc::Receiver<String>, SocketAddr) {
    let o = Options { ues: N, hosts: 1, host_args, rate: Some(20.0), ..DEFAULT };
    let mut c = Cluster::boot("hot", o).await;
    let out = c.host_out.remove(&1).unwrap();
    let m = c.metrics[&1];
    c.ran.attach().await.unwrap();
    assert_eq!(c.ran.attached_ues().len() as u64, N, "{:?}", c.ran.report().failures);
    c.wait_others(0, "mobicore_mme_attach_complete", N).await;
    (c, out, m)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pool_instance_takes_a_backlogged_kind_and_goes_back_when_the_load_ends() {
    let args =
        &["--nf", "attach=1,service-request=1,tau=1,handover=1,detach=1", "--nf-pool", "1", "--nf-slow-ms", "30"];
    let (c, out, m) = backlogged_attaches(args).await;
    let (to_attach, back) = tokio::task::spawn_blocking(move || {
        let grown = wait_line(&out, "the pooled instance given attach", |l| {
            l.strip_prefix("mme-host 1: nf 5 to attach").map(str::to_string)
        });
        let shrunk = wait_line(&out, "the instance back to the pool", |l| {
            l.strip_prefix("mme-host 1: nf 5 to the pool").map(str::to_string)
        });
        (grown, shrunk)
    })
    .await
    .unwrap();
    assert!(to_attach.contains("grown") && back.contains("shrunk"), "{to_attach} / {back}");
    assert_eq!(counter(m, "mobicore_mme_host_nf_grown").await, 1);
    assert_eq!(counter(m, "mobicore_mme_host_nf_shrunk").await, 1);
    let taken = counter(m, "mobicore_mme_host_nf5_attach_events").await;
    assert!(taken > 0, "the pooled instance served attaches");
    // Every attach took well over its SLO (40 ms: 7 events of 30 ms at
    // least): attach's P was bumped (seed 004 5.3).
    assert!(counter(m, "mobicore_mme_host_nf_priority_bumped").await >= 1, "attach's priority bumped");
    assert_eq!(counter(m, "mobicore_mme_attach_complete").await, N, "one attach per UE");
    c.finish().await;
}

/// Instances beyond the pool (`--nf-max`): the same backlogged attach
/// instance as above, the pool of one kept at its size. When the pooled
/// instance is given to attach, a new instance process is started in the
/// pool; once the load ends and attach gives instances back, the pool
/// above its size stops as many as were started (their processes gone).
/// Every UE attaches once and detaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_is_kept_at_its_size_by_instances_started_and_stopped() {
    let args = &[
        "--nf",
        "attach=1,service-request=1,tau=1,handover=1,detach=1",
        "--nf-pool",
        "1",
        "--nf-max",
        "8",
        "--nf-slow-ms",
        "30",
    ];
    let (c, out, m) = backlogged_attaches(args).await;
    let (slot, pid) = tokio::task::spawn_blocking(move || {
        wait_line(&out, "an instance stopped", |l| {
            let rest = l.strip_prefix("mme-host 1: nf ")?;
            let (slot, rest) = rest.split_once(" stopped, pid ")?;
            let pid = rest.split_once(',')?.0;
            Some((slot.parse::<usize>().ok()?, pid.parse::<u32>().ok()?))
        })
    })
    .await
    .unwrap();
    assert!(pid > 0, "instance {slot}'s process");
    let end = Instant::now() + LIMIT;
    loop {
        let started = counter(m, "mobicore_mme_host_nf_started").await;
        if started >= 1 && counter(m, "mobicore_mme_host_nf_stopped").await == started {
            break;
        }
        assert!(Instant::now() < end, "every instance started beyond the pool stopped once the load ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(counter(m, "mobicore_mme_host_nf_grown").await >= 1);
    assert_eq!(counter(m, "mobicore_mme_host_nf_failed").await, 0, "a stopped instance is no failure");
    // Gone (or a zombie, its command line empty, until reaped).
    let runs =
        || std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains("mme-nf"));
    let end = Instant::now() + LIMIT;
    while runs() {
        assert!(Instant::now() < end, "the stopped instance's process {pid} is gone");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counter(m, "mobicore_mme_attach_complete").await, N, "one attach per UE");
    c.finish().await;
}

/// The RAN's view of each registered UE's session: its address and the
/// S-GW's S1-U F-TEID of its default bearer (kept while the S-GW session is).
fn sessions(ran: &mobicore_ran::Ran) -> BTreeMap<u64, (std::net::Ipv4Addr, String)> {
    ran.attached_ues().into_iter().map(|u| (u.index, (u.tunnel.ue_ip, format!("{:?}", u.tunnel.sgw)))).collect()
}

/// Host-local stores (`--store local`, no Redis), cold replication: each
/// host's records of completed procedures are replicated to its replica
/// host (the heir it would have); the busiest host is killed; its heir
/// takes its copy into its own store and serves every UE of it from
/// there: each comes back from idle by a service request with its S-TMSI
/// (its GUTI known to the heir) and the same S-GW session (the same
/// address and S-GW tunnel), no new attach. Then the heir is killed too:
/// the last host, its replica host (re-seeded with a full copy when the
/// first host went, the inherited records in it), loads every UE of both
/// at once and serves them the same way; then their next procedures
/// (release, TAU, detach) succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_cold_killed_hosts_ues_are_served_from_their_heirs_copies_without_attach() {
    let mut c = Cluster::start("cold", Options { store: "local", ..DEFAULT }).await;
    assert_eq!(c.attached.len() as u64, UES);
    // Every UE idle at its host (the record of the release written).
    c.wait_others(0, "mobicore_mme_ue_context_release_complete", UES).await;
    let (&victim, &served) = c.ues_on.iter().max_by_key(|(_, &n)| n).unwrap();
    let heir = kill_host(&mut c.procs, &c.fe, victim);
    c.metrics.remove(&victim);

    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests: {:?}", c.ran.report().failures);
    c.check_served_from_copy(served).await;

    // Idle again, every record written; then the heir goes too.
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "release: {:?}", c.ran.report().failures);
    c.wait_others(victim, "mobicore_mme_ue_context_release_complete", UES - served + UES).await;
    let last = kill_host(&mut c.procs, &c.fe, heir);
    c.metrics.remove(&heir);
    // The last host loads at once (its timers run there) the heir's UEs
    // and the first host's, which the heir had taken (Inherit, Adopt);
    // those of the first host's groups it was heir of, it took before.
    c.wait_others(0, "mobicore_mme_host_ues_adopted", UES - c.ues_on[&last]).await;
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests: {:?}", c.ran.report().failures);
    c.check_served_from_copy(UES - c.ues_on[&last]).await;
    c.release_tau_and_finish().await;
}

/// Per-procedure placement with host-local stores (`--store local`, seed
/// 004 4.3 and Algorithm 1): a service request or TAU is placed on the
/// UE's owner's host or on its replica host, which holds a copy of the
/// owner's store (round robin among them here, so that many go away).
/// There the visitor takes the UE from its copy, serves the procedure
/// (a TAU keeping the UE's GUTI, which names its owner) and, at rest,
/// hands the record back: the owner's host puts it in its own store,
/// replicates it, and reads the UE again. No procedure fails, no UE
/// attaches again, nothing is written from a stale copy, and every
/// visitor's record went home. Then the host that took back the most is
/// killed: its heir serves its UEs from the copy, with the records the
/// visitors handed back in it, and every UE detaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_placed_procedures_run_on_a_replica_host_and_the_record_goes_home_after() {
    // The hosts' link over a Unix socket here.
    let o =
        Options { store: "local", scheme: "rr", frontend: &["--placement", "procedure"], unix_link: true, ..DEFAULT };
    let mut c = Cluster::start("cold", o).await;
    c.wait_others(0, "mobicore_mme_ue_context_release_complete", UES).await;
    for phase in [Phase::ServiceRequest, Phase::Release, Phase::Tau, Phase::ServiceRequest, Phase::Release] {
        let r = c.ran.phase(phase).await.unwrap();
        assert_eq!((r.succeeded, r.failed), (UES, 0), "{phase:?}: {:?}", c.ran.report().failures);
        // A TAU's S1 connection is released after it.
        if phase == Phase::Tau {
            c.ran.settle_idle().await.unwrap();
        }
    }
    // Every visit over: its record handed back and taken back.
    let end = Instant::now() + LIMIT;
    loop {
        let visits = c.counter_of_others(0, "mobicore_mme_host_visitor_from_copy").await;
        let back = c.counter_of_others(0, "mobicore_mme_host_handed_back").await;
        let taken = c.counter_of_others(0, "mobicore_mme_host_taken_back").await;
        if visits > 0 && back == visits && taken == back {
            break;
        }
        assert!(Instant::now() < end, "visits {visits}, handed back {back}, taken back {taken}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(c.counter_of_others(0, "mobicore_mme_tau_guti_kept").await > 0, "TAUs placed away kept the GUTI");
    for name in ["host_hand_back_empty", "host_hand_back_failed", "store_cas_conflict", "host_ue_not_in_store"] {
        assert_eq!(c.counter_of_others(0, &format!("mobicore_mme_{name}")).await, 0, "{name}");
    }

    // The host that took back the most goes: its heir has its copy.
    let mut busiest = (0, 0);
    for (&id, &m) in &c.metrics {
        let n = counter(m, "mobicore_mme_host_taken_back").await;
        if n > busiest.1 {
            busiest = (id, n);
        }
    }
    kill_host(&mut c.procs, &c.fe, busiest.0);
    c.metrics.remove(&busiest.0);
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests: {:?}", c.ran.report().failures);
    assert_eq!(sessions(&c.ran), c.attached, "every UE kept its address and S-GW tunnel: its session");
    // Detaches placed on a replica host delete the UE's keys at its owner's
    // host too (checked by `finish`). How many go there depends on the
    // order the eNBs' detaches reach the front end (about a third here),
    // so none is asked for: the router's and the replica's tests place
    // and serve a detach at a visitor deterministically.
    let away = c.release_tau_and_finish().await;
    eprintln!("{away} of {UES} detaches placed on a replica host");
}

/// Per-procedure placement with host-local stores and hot replication:
/// a visitor sends its owner's host the UE's record after every message
/// (kept there too), so that when the visitor dies mid-procedure (here
/// with its visitors connected after their service requests) their
/// owners' hosts carry on from the record as it stood: every release
/// succeeds, then every TAU and detach, with no new attach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_hot_a_visitor_killed_mid_procedure_its_ues_go_on_at_their_owners() {
    let o = Options { store: "local", scheme: "rr", frontend: &["--placement", "procedure"], ..DEFAULT };
    let mut c = Cluster::start("hot", o).await;
    c.wait_others(0, "mobicore_mme_ue_context_release_complete", UES).await;
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests: {:?}", c.ran.report().failures);
    // The host holding the most visitors (connected) goes.
    let mut busiest = (0, 0);
    for (&id, &m) in &c.metrics {
        let n = counter(m, "mobicore_mme_host_visitor_from_copy").await;
        if n > busiest.1 {
            busiest = (id, n);
        }
    }
    assert!(busiest.1 > 0, "some service requests placed on a replica host");
    assert!(c.counter_of_others(0, "mobicore_mme_host_visitor_mirrored").await >= busiest.1);
    assert_eq!(c.counter_of_others(0, "mobicore_mme_host_handed_back").await, 0, "connected visitors stay");
    kill_host(&mut c.procs, &c.fe, busiest.0);
    c.metrics.remove(&busiest.0);
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "release: {:?}", c.ran.report().failures);
    assert!(c.counter_of_others(0, "mobicore_mme_host_ue_refreshed").await >= busiest.1, "owners read them again");
    assert_eq!(c.counter_of_others(0, "mobicore_mme_host_ue_refresh_failed").await, 0);
    let r = c.ran.phase(Phase::Tau).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "TAU: {:?}", c.ran.report().failures);
    c.ran.settle_idle().await.unwrap();
    c.finish().await;
}

/// Per-procedure placement (`--placement procedure`, seed 004 Algorithm
/// 1 places every procedure, not only the attach) over Redis: consistent
/// hashing by M-TMSI sends most UEs' service requests to a host other
/// than the one they attached at. That host loads the UE, serves the
/// service request and the X2 handover after it (the front end follows
/// the UE there: the host says it holds it), and the UE keeps its
/// identifiers and session. Then the host with the most visitors is
/// killed while they are connected: their releases go to their owners'
/// hosts, which read them again from the store (hot: as they stood); the
/// other visitors are released and dropped (their owners read them
/// again); TAUs and detaches are placed too; no procedure fails, no UE
/// attaches again, and no host ever writes from a stale copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn procedures_placed_away_from_a_ues_host_run_there_and_it_goes_home_after() {
    let o = Options { frontend: &["--placement", "procedure"], ..DEFAULT };
    let mut c = Cluster::start("hot", o).await;
    for phase in [Phase::ServiceRequest, Phase::X2Handover] {
        let r = c.ran.phase(phase).await.unwrap();
        assert_eq!((r.succeeded, r.failed), (UES, 0), "{phase:?}: {:?}", c.ran.report().failures);
    }
    let visits = c.counter_of_others(0, "mobicore_mme_host_ue_taken_over").await;
    assert!(visits > 0, "some procedures placed away from the UE's host");
    assert_eq!(c.counter_of_others(0, "mobicore_mme_host_visitor_dropped").await, 0, "connected visitors stay");
    assert_eq!(records(c.shared()).await, c.before, "every UE kept its identifiers and session");

    // The host with the most (connected) visitors goes.
    let mut busiest = (0, 0);
    for (&id, &m) in &c.metrics {
        let n = counter(m, "mobicore_mme_host_ue_taken_over").await;
        if n > busiest.1 {
            busiest = (id, n);
        }
    }
    let (victim, _) = busiest;
    kill_host(&mut c.procs, &c.fe, victim);
    c.metrics.remove(&victim);

    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "release: {:?}", c.ran.report().failures);
    // Every UE at rest again: each host let go of what it held, visitors
    // dropped, their owners' hosts reading them again (the lost host's
    // at its death).
    let end = Instant::now() + LIMIT;
    while c.counter_of_others(0, "mobicore_mme_host_hold_released").await
        < c.counter_of_others(0, "mobicore_mme_host_hold_started").await
    {
        assert!(Instant::now() < end, "held UEs released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(c.counter_of_others(0, "mobicore_mme_host_ue_refreshed").await > 0, "owners read their UEs again");
    assert_eq!(c.counter_of_others(0, "mobicore_mme_host_ue_refresh_failed").await, 0);
    let r = c.ran.phase(Phase::Tau).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "TAU: {:?}", c.ran.report().failures);
    c.ran.settle_idle().await.unwrap();
    // Detaches visit too; no stale copy ever wrote.
    let metrics: Vec<SocketAddr> = c.metrics.values().copied().collect();
    let Cluster { procs, ran, core, store, .. } = c;
    let report = ran.finish().await.unwrap();
    assert_eq!((report.attached, report.failed), (UES, 0), "no attach beyond the first: {:?}", report.failures);
    assert_eq!((report.detached, report.detach_failed), (UES, 0), "{:?}", report.failures);
    assert!(records(store.as_ref().unwrap()).await.is_empty(), "detached UEs leave no record");
    for m in metrics {
        assert_eq!(counter(m, "mobicore_mme_store_cas_conflict").await, 0, "no stale copy wrote");
    }
    drop(procs);
    core.stop().await.unwrap();
}

/// Per-procedure placement: the owner's host of a UE placed away is told
/// (the front end lent the UE), and drops its copy of the UE at rest, so
/// that no timer of a stale copy runs while another host holds it. The
/// UEs' mobile reachable timer is short here: while every UE's service
/// request connection is held (some away from their owners), no host's
/// timer fires (a UE connected has none running: only a stale copy's
/// would), and no stale copy ever writes. Released, each UE is read again
/// by its owner's host and its timer fires there, once per UE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placed_procedures_an_owners_copy_runs_no_timer_while_another_host_holds_the_ue() {
    let host_mme = "mobile_reachable_seconds = 2\nimplicit_detach_seconds = 600\n";
    let o = Options { host_mme, frontend: &["--placement", "procedure"], ..DEFAULT };
    let mut c = Cluster::start("hot", o).await;
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service request: {:?}", c.ran.report().failures);
    let visits = c.counter_of_others(0, "mobicore_mme_host_ue_taken_over").await;
    assert!(visits > 0, "some procedures placed away from the UE's host");
    assert!(c.counter_of_others(0, "mobicore_mme_host_lent_dropped").await > 0, "owners dropped lent UEs");
    // Every UE connected: past the timer's period, none fires (one that
    // fired before the phase, on a slow machine, is in `fired`).
    let fired = c.counter_of_others(0, "mobicore_mme_mobile_reachable_expiry").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        c.counter_of_others(0, "mobicore_mme_mobile_reachable_expiry").await,
        fired,
        "a stale copy's timer fired for a connected UE"
    );

    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "release: {:?}", c.ran.report().failures);
    // Idle again, wherever they were: each UE's timer fires once, on the
    // host that holds it now.
    let end = Instant::now() + LIMIT;
    while c.counter_of_others(0, "mobicore_mme_mobile_reachable_expiry").await < fired + UES {
        assert!(Instant::now() < end, "every idle UE's mobile reachable timer fires");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(c.counter_of_others(0, "mobicore_mme_host_ue_refreshed").await > 0, "owners read their UEs again");
    let metrics: Vec<SocketAddr> = c.metrics.values().copied().collect();
    let Cluster { procs, ran, core, store, .. } = c;
    let report = ran.finish().await.unwrap();
    assert_eq!((report.attached, report.failed), (UES, 0), "no attach beyond the first: {:?}", report.failures);
    assert_eq!((report.detached, report.detach_failed), (UES, 0), "{:?}", report.failures);
    assert!(records(store.as_ref().unwrap()).await.is_empty(), "detached UEs leave no record");
    let mut expired = 0;
    for m in metrics {
        assert_eq!(counter(m, "mobicore_mme_store_cas_conflict").await, 0, "no stale copy wrote");
        expired += counter(m, "mobicore_mme_mobile_reachable_expiry").await;
    }
    assert_eq!(expired, fired + UES, "each idle UE's timer fired once");
    drop(procs);
    core.stop().await.unwrap();
}

/// Host-local stores surviving two failures (`mme-frontend --replicas
/// 2`): with three hosts each replicates to both others, so two hosts
/// killed together (kill -9 one after the other, before the front end
/// has seen either go: the first one's heir may be the second) leave
/// every UE's record with the last host, which serves them all from its
/// copies with no new attach. With one replica host each, the records of
/// a host whose only replica host dies with it are lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_cold_two_hosts_killed_together_lose_no_ue_with_two_replicas() {
    let o = Options { store: "local", frontend: &["--replicas", "2"], ..DEFAULT };
    let mut c = Cluster::start("cold", o).await;
    // Every UE idle at its host (the record of the release written).
    c.wait_others(0, "mobicore_mme_ue_context_release_complete", UES).await;
    for id in [1, 2] {
        let status = c.procs.kill(&format!("host{id}")).unwrap();
        assert!(!status.success(), "host{id} was killed");
        c.metrics.remove(&id);
    }
    let mut down = std::collections::BTreeSet::new();
    while down.len() < 2 {
        let id: u32 = wait_line(&c.fe, "both hosts gone", |l| {
            l.strip_prefix("mme-frontend: host")?.split_once(" down")?.0.parse().ok()
        });
        down.insert(id);
    }
    let taken = UES - c.ues_on[&3];
    c.wait_others(0, "mobicore_mme_host_ues_adopted", taken).await;
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests: {:?}", c.ran.report().failures);
    c.check_served_from_copy(taken).await;
    c.release_tau_and_finish().await;
}

/// Host-local stores, hot replication, a host killed mid-handover: the
/// host of the only UE is killed after it has sent the Handover Command
/// of an S1 handover (its state replicated first, write-ahead) and before
/// it hears the rest ([`S1Tap`] holds the RAN's packets: the eNB Status
/// Transfer, the target's Handover Notify). Those reach the heir, which
/// takes the UE from its copy as it stood mid-handover and completes the
/// handover: the UE keeps its session (the heir's Modify Bearer moves the
/// same one) and its GUTI (its next service request by S-TMSI), no new
/// attach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_hot_a_host_killed_mid_handover_its_ue_completes_the_handover_on_the_heir() {
    let o = Options { ues: 1, s1_tap: true, s1_hold: HANDOVER_COMMAND, store: "local", ..DEFAULT };
    let mut c = Cluster::boot("hot", o).await;
    c.ran.attach().await.unwrap();
    let before = sessions(&c.ran);
    assert_eq!(before.len(), 1, "{:?}", c.ran.report().failures);
    // The RAN's attach ends when its Attach Complete is sent: wait for the host.
    c.wait_others(0, "mobicore_mme_attach_complete", 1).await;
    let (victim, _) = c.attached_per_host().await.into_iter().find(|&(_, n)| n == 1).expect("the UE's host");
    let tap = c.s1_tap.take().unwrap();
    let mut held = tap.held.clone();
    let Cluster { ran, procs, fe, .. } = &mut c;
    let mid_handover = async {
        let r = tokio::time::timeout(LIMIT, held.wait_for(|h| *h)).await;
        assert!(r.is_ok(), "no Handover Command went down");
        tokio::task::block_in_place(|| kill_host(procs, fe, victim));
        tap.release.send(()).unwrap();
    };
    let (handover, ()) = tokio::join!(ran.phase(Phase::S1Handover), mid_handover);
    let r = handover.unwrap();
    assert_eq!((r.succeeded, r.failed), (1, 0), "the handover: {:?}", c.ran.report().failures);

    // The heir took the UE over mid-handover and completed it.
    c.wait_others(victim, "mobicore_mme_s1_handover_completed", 1).await;
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_host_ue_taken_over").await, 1);
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_replica_inherit_no_copy").await, 0);
    assert_eq!(sessions(&c.ran), before, "the same address and S-GW tunnel: the same session");

    // Its next procedures, from the heir: release, service request by S-TMSI.
    for phase in [Phase::Release, Phase::ServiceRequest] {
        let r = c.ran.phase(phase).await.unwrap();
        assert_eq!((r.succeeded, r.failed), (1, 0), "{phase:?}: {:?}", c.ran.report().failures);
    }
    assert_eq!(c.counter_of_others(victim, "mobicore_mme_host_ue_taken_over").await, 1, "loaded once");
    c.finish().await;
    drop(tap); // relayed S1 to the end (Detach)
}

/// A host that is not one, on the front end's hosts' port: it says Hello
/// as host `id`, reports a queue far beyond any SLO while told to, and
/// counts the UE-associated S1AP it is given (it answers none).
struct LoadedHost {
    ue_messages: std::sync::Arc<std::sync::atomic::AtomicU64>,
    reporting: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl LoadedHost {
    async fn start(hosts: &str, id: u8) -> LoadedHost {
        use mobicore::elastic_mme::wire::{read_frame, write_frame, Frame, NfLoadWire};
        use mobicore_mme::routing::{uplink, Uplink};
        use std::sync::atomic::{AtomicU64, Ordering};
        let stream = tokio::net::TcpStream::connect(hosts).await.unwrap();
        let (mut rd, mut wr) = stream.into_split();
        write_frame(&mut wr, &Frame::Hello { host: id, local: false }).await.unwrap();
        let ue_messages = std::sync::Arc::new(AtomicU64::new(0));
        let (reporting, mut on) = tokio::sync::watch::channel(true);
        let count = ue_messages.clone();
        let task = tokio::spawn(async move {
            // Eq. 1 at c = 1: a million messages ahead of any procedure.
            let nfs = (0..5).map(|kind| NfLoadWire { kind, q_e3: 1_000_000_000, c_e4: 10_000 }).collect();
            let load = Frame::Load { cpu_e4: 10_000, nfs };
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    f = read_frame(&mut rd) => match f {
                        Ok(Some(Frame::S1 { assoc, data, .. })) => {
                            if matches!(uplink(assoc, &data), Uplink::Ue(_)) {
                                count.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Ok(Some(_)) => {}
                        _ => break,
                    },
                    _ = tick.tick() => {
                        if *on.borrow_and_update() && write_frame(&mut wr, &load).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
        LoadedHost { ue_messages, reporting, task }
    }

    fn ue_messages(&self) -> u64 {
        self.ue_messages.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for LoadedHost {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Skewed consistent hashing on the hosts' load reports (seed 004
/// Algorithm 1, Eq. 1): the three real hosts report their load (idle), a
/// fourth host reports a queue no procedure could get through within its
/// SLO. Every new UE is placed on a real host, none on the loaded one
/// (which is a candidate on the ring for most of them). When the loaded
/// host's reports stop, the front end says so (stale: still not viable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sk_ch_places_new_ues_away_from_a_host_reporting_overload() {
    let mut c = Cluster::boot("cold", Options { scheme: "sk-ch", ..DEFAULT }).await;
    // The real hosts report (every 100 ms by default).
    let end = Instant::now() + LIMIT;
    for m in c.metrics.values() {
        while counter(*m, "mobicore_mme_host_load_report_sent").await < 2 {
            assert!(Instant::now() < end, "a host's load reports");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let hosts = c.hosts.clone();
    let loaded = LoadedHost::start(&hosts, 9).await;
    wait_line(&c.fe, "the loaded host", |l| (l == "mme-frontend: host9 up").then_some(()));
    wait_line(&c.fe, "its load report", |l| (l == "mme-frontend: host9 reports load").then_some(()));

    c.ran.attach().await.unwrap();
    assert_eq!(c.ran.attached_ues().len() as u64, UES, "{:?}", c.ran.report().failures);
    assert_eq!(loaded.ue_messages(), 0, "nothing routed to the loaded host");
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "release: {:?}", c.ran.report().failures);
    let placed = records(c.shared()).await;
    assert_eq!(placed.len() as u64, UES);
    for (imsi, s) in &placed {
        assert!((1..=3).contains(&(s.mme_ue_s1ap_id >> 24)), "UE {imsi} on a real host: {s:?}");
    }

    // Its reports stop: stale, within the front end's bound (1 s).
    loaded.reporting.send_replace(false);
    let stale = "mme-frontend: host9 load reports stopped (not viable until it reports)";
    wait_line(&c.fe, "the loaded host's reports to go stale", |l| (l == stale).then_some(()));
    assert_eq!(loaded.ue_messages(), 0);
    drop(loaded);
    c.finish().await;
}

/// Removes a directory (a cgroup, empty once its process is gone) on drop.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        // A host's cgroup: its process's leaf first.
        let _ = std::fs::remove_dir(self.0.join(mobicore::elastic_mme::cgroup::PROCESS_LEAF));
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The cgroup hierarchy hosts' `--cpu-max` uses (its version, its
/// root), if this machine has one and the tests run as root; why not
/// otherwise.
fn cgroup_root() -> Result<(mobicore::elastic_mme::cgroup::Version, PathBuf), String> {
    use mobicore::elastic_mme::cgroup::{self, Version};
    match cgroup::available(Path::new(cgroup::ROOT), Path::new(cgroup::V1_ROOT)) {
        Ok(v) if unsafe { libc::geteuid() } == 0 => {
            Ok((v, PathBuf::from(if v == Version::V2 { cgroup::ROOT } else { cgroup::V1_ROOT })))
        }
        Ok(_) => Err("--cpu-max needs root".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// `mme-host --cpu-max` (issue 13 item 8): the host runs in a cgroup of
/// its own bounded to its budget (cgroup v2's `cpu.max`, else cgroup v1's
/// CFS quota), reports, and its cgroup is gone once it is stopped. Needs
/// root and either; skipped, with the reason, otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_a_cpu_budget_runs_in_its_own_cgroup() {
    use mobicore::elastic_mme::cgroup::Version;
    let (version, root) = match cgroup_root() {
        Ok(r) => r,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    // Declared before the cluster, so dropped after its processes (even
    // on failure): the cgroup is empty by then.
    let mut cleanup = RemoveDir(PathBuf::new());
    let mut c = Cluster::boot("cold", Options { cpu_max: Some("0.2"), ..DEFAULT }).await;
    let pid = c.procs.pid("host3").unwrap();
    let dir = root.join(format!("mobicore-hosts/host3-{pid}"));
    cleanup.0 = dir.clone();
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    match version {
        Version::V2 => assert_eq!(read("cpu.max").trim(), "2000 10000"),
        Version::V1 => {
            assert_eq!(read("cpu.cfs_quota_us").trim(), "2000");
            assert_eq!(read("cpu.cfs_period_us").trim(), "10000");
        }
    }
    // The process in a leaf below its budget (cgroup v2 hands no
    // controller on from a cgroup with processes of its own).
    let procs = read("main/cgroup.procs");
    assert!(procs.lines().any(|l| l.trim() == pid.to_string()), "host3 ({pid}) in {version:?} {dir:?}: {procs:?}");
    assert!(read("cgroup.procs").trim().is_empty(), "none in the budget's cgroup itself");
    let end = Instant::now() + LIMIT;
    while counter(c.metrics[&3], "mobicore_mme_host_load_report_sent").await < 2 {
        assert!(Instant::now() < end, "host3's load reports");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.attach_and_idle().await;
    c.finish().await;
    assert!(!dir.exists(), "{dir:?} removed once host3 is stopped");
    drop(cleanup);
}

/// A process the test did not start itself (a host the front end
/// started), SIGKILLed on drop if it still runs.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
    }
}

/// An operator request to the front end's scaling API: its status and JSON.
async fn admin(addr: SocketAddr, method: &str, path: &str) -> (u16, serde_json::Value) {
    let (status, body) = mobicore_controller::site::http(addr, method, path, None, "").await.unwrap();
    (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")))
}

/// [`wait_line`] that lets the rest of its task (the RAN) run meanwhile.
async fn fe_line<T>(rx: &mpsc::Receiver<String>, what: &str, pick: impl FnMut(&str) -> Option<T>) -> T {
    procs::next_line(rx, what, LIMIT, pick).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Round `round` of load under scaling: every UE's service request, then
/// its release, none failing.
async fn service_round(ran: &mut mobicore_ran::Ran, round: u32) {
    for phase in [Phase::ServiceRequest, Phase::Release] {
        let r = ran.phase(phase).await.unwrap();
        assert_eq!(r.failed, 0, "{phase:?} in round {round}: {:?}", ran.report().failures);
    }
}

/// The EPS controller scales out under real CPU load, then in (issue 13
/// item 5): one host bounded to 0.05 of a core (a cgroup, root only), the
/// UEs' service requests and releases round after round with every
/// procedure placed (Redis). The host's reported CPU use stays over 80%
/// of its budget for the window, so the controller starts a second host
/// (a process the front end starts), which takes procedures too. Once the
/// load ends, the spare CPU lasts the window and the controller drains a
/// host, down to `--min-hosts 1`. No procedure fails throughout, and every
/// UE comes back and detaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eps_controller_starts_a_host_under_real_cpu_load_and_drains_one_after() {
    let root = match cgroup_root() {
        Ok((_, root)) => root,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    // Host 1's cgroup, if it is killed at the end (not drained): removed
    // after the cluster's processes are gone.
    let mut cleanup = RemoveDir(PathBuf::new());
    let frontend = &[
        "--autoscale",
        "--min-hosts",
        "1",
        "--max-hosts",
        "2",
        "--scale-window-s",
        "1",
        "--spare-cores",
        "0.5",
        "--placement",
        "procedure",
    ];
    let o = Options { hosts: 1, scheme: "sk-ch", frontend, host_args: &["--cpu-max", "0.05"], ..DEFAULT };
    let mut c = Cluster::boot("cold", o).await;
    cleanup.0 = root.join(format!("mobicore-hosts/host1-{}", c.procs.pid("host1").unwrap()));
    c.ran.attach().await.unwrap();
    assert_eq!(c.ran.attached_ues().len() as u64, UES, "{:?}", c.ran.report().failures);
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "release: {:?}", c.ran.report().failures);
    let (started_tx, mut started) = tokio::sync::watch::channel(false);
    let Cluster { ran, fe, .. } = &mut c;
    let load = async {
        let (mut rounds, t0) = (0u32, Instant::now());
        // Until the second host is up, and a few rounds more with it.
        let mut after = 0;
        while after < 3 {
            service_round(ran, rounds).await;
            rounds += 1;
            if *started.borrow_and_update() {
                after += 1;
            }
            assert!(t0.elapsed() < LIMIT, "no host started under load in {rounds} rounds");
        }
    };
    let scale = async {
        fe_line(fe, "the controller's start", |l| (l == "mme-frontend: controller: start a host").then_some(())).await;
        fe_line(fe, "the started host", |l| {
            (l.starts_with("mme-frontend: host") && l.ends_with(" up") && l != "mme-frontend: host1 up").then_some(())
        })
        .await;
        started_tx.send_replace(true);
    };
    tokio::join!(load, scale);
    // The load over: hosts drained down to --min-hosts (the controller may
    // have drained and started one again under the load meanwhile).
    fe_line(&c.fe, "the controller's drain", |l| l.starts_with("mme-frontend: controller: drain host").then_some(()))
        .await;
    let end = Instant::now() + LIMIT;
    loop {
        let (_, hosts) = admin(c.admin, "GET", "/v1/hosts").await;
        let states: Vec<&str> = hosts["hosts"].as_array().unwrap().iter().filter_map(|h| h["state"].as_str()).collect();
        if states.iter().filter(|&&s| s == "serving").count() == 1 && !states.contains(&"draining") {
            break;
        }
        assert!(Instant::now() < end, "back to --min-hosts once the load ended: {hosts}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "{:?}", c.ran.report().failures);
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!(r.failed, 0, "{:?}", c.ran.report().failures);
    c.finish().await;
}

/// Scaling under load (issue 13 item 5, seed 004 5.2): two hosts, half
/// the UEs attached, and the RAN running service requests and releases
/// round after round all along. An operator request makes the front end
/// start a third host (`mme-host` started by the front end itself): the
/// UEs attached then are placed on it too (round robin, so surely), the
/// others stay where they are. Then host 1 is drained: no new UE goes
/// to it, what it runs ends there, the first message of each new
/// procedure of its UEs waits at the front end until it says it is
/// drained, and then goes to its heir, which loads the UE from the store;
/// host 1 is told to stop and exits. No procedure fails, no UE attaches
/// again, every UE keeps its MME-UE-S1AP-ID, GUTI and S-GW session, and
/// host 1's UEs come back through the heir; a TAU of every UE and their
/// detach succeed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_hosts_scale_out_and_in_under_load_with_no_failed_procedure() {
    scale_out_and_in_under_load("cold", false).await;
}

/// The same with hot replication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_hosts_scale_out_and_in_under_load_with_no_failed_procedure() {
    scale_out_and_in_under_load("hot", false).await;
}

/// The same with every procedure placed (`--placement procedure`): the
/// service requests of host 1's UEs go to other hosts while it drains
/// (none waits), the new host takes procedures of every host's UEs, and
/// no host ever writes from a stale copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placed_procedures_hosts_scale_out_and_in_under_load_with_no_failed_procedure() {
    scale_out_and_in_under_load("cold", true).await;
}

async fn scale_out_and_in_under_load(replication: &str, every_procedure: bool) {
    const FIRST: u64 = 8;
    // Service requests arrive 40 a second: a round lasts a while.
    let frontend: &'static [&'static str] = if every_procedure { &["--placement", "procedure"] } else { &[] };
    // Placed: the hosts' link over a Unix socket, the hosts the front end
    // starts told it too.
    let unix_link = every_procedure;
    let o = Options { ues: 2 * FIRST, scheme: "rr", hosts: 2, rate: Some(40.0), frontend, unix_link, ..DEFAULT };
    let mut c = Cluster::boot(replication, o).await;
    let r = c.ran.attach_some(0..FIRST).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (FIRST, 0), "{:?}", c.ran.report().failures);
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (FIRST, 0), "{:?}", c.ran.report().failures);
    let first = records(c.shared()).await;
    let hosts: std::collections::BTreeSet<u32> = first.values().map(|s| s.mme_ue_s1ap_id >> 24).collect();
    assert_eq!(hosts, [1, 2].into(), "{first:?}");

    // The scaling, beside the load: the load attaches the second half
    // once the third host is up, and runs on until host 1 is gone.
    let (up_tx, mut up) = tokio::sync::watch::channel(false);
    let (attached_tx, mut attached) = tokio::sync::watch::channel(false);
    let (gone_tx, mut gone) = tokio::sync::watch::channel(false);
    // Rounds of service requests begun.
    let (begun_tx, mut begun) = tokio::sync::watch::channel(0u32);
    let Cluster { ran, procs, fe, store, admin: admin_addr, .. } = &mut c;
    let load = async {
        let mut rounds = 0u32;
        let mut after = 0u32;
        while after < 2 {
            if *up.borrow_and_update() && !*attached_tx.borrow() {
                let r = ran.attach_some(FIRST..2 * FIRST).await.unwrap();
                assert_eq!((r.succeeded, r.failed), (FIRST, 0), "{:?}", ran.report().failures);
                let r = ran.phase(Phase::Release).await.unwrap();
                assert_eq!(r.failed, 0, "{:?}", ran.report().failures);
                attached_tx.send_replace(true);
            }
            begun_tx.send_modify(|n| *n += 1);
            service_round(ran, rounds).await;
            rounds += 1;
            // Rounds that began with host 1 gone: every UE through its host or heir.
            if *gone.borrow_and_update() {
                after += 1;
            }
            assert!(rounds < 10_000, "the scaling never ended");
        }
        rounds
    };
    let scale = async {
        // Scale out: the front end starts host 3.
        let (status, started) = admin(*admin_addr, "POST", "/v1/hosts").await;
        assert_eq!(status, 202, "{started}");
        assert_eq!(started["id"], 3);
        let host3 = KillOnDrop(started["pid"].as_u64().unwrap() as u32);
        let m = fe_line(fe, "host 3 ready", |l| {
            l.starts_with("mme-host 3 ready").then(|| field(l, "metrics").map(str::to_string)).flatten()
        })
        .await;
        fe_line(fe, "host 3 up", |l| (l == "mme-frontend: host3 up").then_some(())).await;
        up_tx.send_replace(true);
        assert!(attached.wait_for(|a| *a).await.is_ok());
        let placed = records(store.as_ref().unwrap()).await;
        let on3 = placed.values().filter(|s| s.mme_ue_s1ap_id >> 24 == 3).count();
        assert!(on3 >= 2, "new UEs on the new host: {placed:?}");
        for (imsi, s) in &first {
            assert_eq!(placed.get(imsi), Some(s), "UE {imsi} stayed where it was");
        }
        let (_, list) = admin(*admin_addr, "GET", "/v1/hosts").await;
        assert_eq!(list["hosts"].as_array().unwrap().len(), 3, "{list}");

        // Scale in: host 1 drained under the load, as a round of service
        // requests begins (what it finds running there ends there), then
        // stopped.
        let on1: Vec<String> =
            placed.iter().filter(|(_, s)| s.mme_ue_s1ap_id >> 24 == 1).map(|(i, _)| i.clone()).collect();
        begun.borrow_and_update();
        assert!(begun.changed().await.is_ok());
        let (status, body) = admin(*admin_addr, "POST", "/v1/hosts/1/drain").await;
        assert_eq!(status, 202, "{body}");
        // "drained (heir hostH, N held)": N new procedures waited for it.
        let heir = fe_line(fe, "host 1 drained", |l| {
            let rest = l.strip_prefix("mme-frontend: host1 ")?;
            assert!(!rest.starts_with("drain forced"), "{l}");
            first_heir(rest.strip_prefix("drained (")?)
        })
        .await;
        assert!(heir == 2 || heir == 3, "{heir}");
        let status = wait_exit(procs, "host1").await;
        assert!(status.success(), "host 1 exits when told: {status}");
        let (status, _) = admin(*admin_addr, "POST", "/v1/hosts/1/drain").await;
        assert_eq!(status, 409, "not a host any more");
        gone_tx.send_replace(true);
        (m.parse::<SocketAddr>().unwrap(), heir, placed, on1, host3)
    };
    let (rounds, (metrics3, heir, placed, on1, _host3)) = tokio::join!(load, scale);
    c.metrics.insert(3, metrics3);
    eprintln!(
        "{rounds} rounds of service requests and releases; host 1's {} UEs to its heirs (host {heir} first)",
        on1.len()
    );

    // No failure, no attach beyond each UE's first; identifiers and sessions kept.
    let report = c.ran.report();
    assert_eq!((report.attached, report.failed), (2 * FIRST, 0), "{:?}", report.failures);
    let failed: u64 = report.mobility.iter().map(|(_, r)| r.failed).sum();
    assert_eq!(failed, 0, "{:?}", report.failures);
    let after = records(c.shared()).await;
    assert_eq!(after, placed, "every UE kept its MME-UE-S1AP-ID, GUTI and S-GW session");
    c.metrics.remove(&1);
    match every_procedure {
        // Host 1's UEs came back through its heirs, each loaded once.
        false => {
            let taken = c.counter_of_others(0, "mobicore_mme_host_ue_taken_over").await;
            assert_eq!(taken, on1.len() as u64, "the heirs loaded each of host 1's UEs");
        }
        true => {
            for &m in c.metrics.values() {
                assert_eq!(counter(m, "mobicore_mme_store_cas_conflict").await, 0, "no stale copy wrote");
            }
        }
    }

    // Their next procedures: a TAU of every UE (a new GUTI each, TS 24.301
    // 5.5.3.2.4), then the detach in finish.
    let r = c.ran.phase(Phase::Tau).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (2 * FIRST, 0), "TAU: {:?}", c.ran.report().failures);
    c.ran.settle_idle().await.unwrap();
    c.finish().await;
}

/// Host-local stores while scaling (cold, two hosts to start with): a
/// third host joins (the front end tells each host its replica host anew,
/// and a host whose replica host changed seeds the new one with a full
/// copy), then host 1 is drained: its heir takes host 1's records from
/// its copy, and every UE of host 1 comes back by a service request there
/// with its GUTI and session, no new attach; then every UE's TAU and
/// detach succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_a_host_joins_then_a_drained_hosts_ues_are_served_from_its_heirs_copy() {
    let o = Options { hosts: 2, scheme: "rr", store: "local", ..DEFAULT };
    let mut c = Cluster::boot("cold", o).await;
    c.ran.attach().await.unwrap();
    assert_eq!(c.ran.attached_ues().len() as u64, UES, "{:?}", c.ran.report().failures);
    c.attached = sessions(&c.ran);
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "release: {:?}", c.ran.report().failures);
    c.wait_others(0, "mobicore_mme_ue_context_release_complete", UES).await;
    let on = c.attached_per_host().await;
    assert!(on[&1] > 0 && on[&2] > 0, "{on:?}");

    // Scale out: host 3 joins and replicates to its own replica host.
    let (status, started) = admin(c.admin, "POST", "/v1/hosts").await;
    assert_eq!(status, 202, "{started}");
    let _host3 = KillOnDrop(started["pid"].as_u64().unwrap() as u32);
    let m = fe_line(&c.fe, "host 3 ready", |l| {
        l.starts_with("mme-host 3 ready").then(|| field(l, "metrics").map(str::to_string)).flatten()
    })
    .await;
    fe_line(&c.fe, "host 3 up", |l| (l == "mme-frontend: host3 up").then_some(())).await;
    let m3: SocketAddr = m.parse().unwrap();
    c.metrics.insert(3, m3);
    let end = Instant::now() + LIMIT;
    while counter(m3, "mobicore_mme_replica_full_copies_sent").await == 0 {
        assert!(Instant::now() < end, "host 3 never told its replica host");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Scale in: host 1 drained (no procedure runs), then stopped.
    let (status, body) = admin(c.admin, "POST", "/v1/hosts/1/drain").await;
    assert_eq!(status, 202, "{body}");
    let heir = fe_line(&c.fe, "host 1 drained", |l| {
        let rest = l.strip_prefix("mme-frontend: host1 ")?;
        assert!(!rest.starts_with("drain forced"), "{l}");
        first_heir(rest.strip_prefix("drained (")?)
    })
    .await;
    assert!(heir == 2 || heir == 3, "{heir}");
    let status = wait_exit(&mut c.procs, "host1").await;
    assert!(status.success(), "host 1 exits when told: {status}");
    c.metrics.remove(&1);

    // Every UE comes back; host 1's through the heir, from its copy.
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "service requests: {:?}", c.ran.report().failures);
    c.check_served_from_copy(on[&1]).await;
    c.release_tau_and_finish().await;
}

/// The EPS controller on its own (`--autoscale`, seed 004 5.2: "scale
/// down hosts if the total available CPU across MME hosts is high"): two
/// idle hosts have about two cores spare, over the 1.5 it keeps, for its
/// whole window (1 s here), so it drains one, the least loaded, and no
/// more (`--min-hosts 1`). The UEs attached meanwhile (placed only on
/// hosts taking new UEs) all come back by service requests, through the
/// heir for the drained host's, and detach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eps_controller_drains_a_host_of_an_idle_pair() {
    let frontend = &["--autoscale", "--min-hosts", "1", "--max-hosts", "2", "--scale-window-s", "1"];
    let mut c = Cluster::boot("cold", Options { hosts: 2, frontend, ..DEFAULT }).await;
    c.ran.attach().await.unwrap();
    assert_eq!(c.ran.attached_ues().len() as u64, UES, "{:?}", c.ran.report().failures);
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "release: {:?}", c.ran.report().failures);
    let Cluster { ran, procs, fe, .. } = &mut c;
    let (drained, r) = tokio::join!(
        async {
            let victim = fe_line(fe, "the controller's drain", |l| {
                l.strip_prefix("mme-frontend: controller: drain host")?.parse::<u32>().ok()
            })
            .await;
            fe_line(fe, "the drain", |l| l.starts_with(&format!("mme-frontend: host{victim} drained")).then_some(()))
                .await;
            assert!(wait_exit(procs, &format!("host{victim}")).await.success());
            victim
        },
        // Meanwhile the UEs come and go: whatever the drain meets ends well.
        async {
            let mut failed = 0;
            for _ in 0..3 {
                for phase in [Phase::ServiceRequest, Phase::Release] {
                    failed += ran.phase(phase).await.unwrap().failed;
                }
            }
            failed
        }
    );
    assert_eq!(r, 0, "{:?}", c.ran.report().failures);
    c.metrics.remove(&drained);
    let (_, hosts) = admin(c.admin, "GET", "/v1/hosts").await;
    let serving: Vec<_> = hosts["hosts"].as_array().unwrap().iter().filter(|h| h["state"] == "serving").collect();
    assert_eq!(serving.len(), 1, "at --min-hosts: {hosts}");
    // Every UE through the host left, the drained one's by its heir.
    let r = c.ran.phase(Phase::ServiceRequest).await.unwrap();
    assert_eq!((r.succeeded, r.failed), (UES, 0), "{:?}", c.ran.report().failures);
    let r = c.ran.phase(Phase::Release).await.unwrap();
    assert_eq!(r.failed, 0, "{:?}", c.ran.report().failures);
    c.finish().await;
}

/// A front end stopped by SIGTERM takes the hosts it started itself (at
/// the operator's request here) with it: none is left running, nor its
/// cgroup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_end_stopped_by_sigterm_takes_the_hosts_it_started_with_it() {
    let root = match cgroup_root() {
        Ok((_, root)) => root,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    let mut cleanup = RemoveDir(PathBuf::new());
    let o = Options { hosts: 1, host_args: &["--cpu-max", "0.5"], launched_args: &["--cpu-max", "0.5"], ..DEFAULT };
    let c = Cluster::boot("cold", o).await;
    cleanup.0 = root.join(format!("mobicore-hosts/host1-{}", c.procs.pid("host1").unwrap()));
    let (status, started) = admin(c.admin, "POST", "/v1/hosts").await;
    assert_eq!(status, 202, "{started}");
    let pid = started["pid"].as_u64().unwrap() as u32;
    let _host2 = KillOnDrop(pid);
    fe_line(&c.fe, "host 2 up", |l| (l == "mme-frontend: host2 up").then_some(())).await;
    let cgroup = root.join(format!("mobicore-hosts/host2-{pid}"));
    assert!(cgroup.exists(), "{cgroup:?}");
    unsafe { libc::kill(c.procs.pid("frontend").unwrap() as i32, libc::SIGTERM) };
    let end = Instant::now() + LIMIT;
    while Path::new(&format!("/proc/{pid}")).exists() || cgroup.exists() {
        assert!(Instant::now() < end, "host 2 (pid {pid}) or its cgroup left after the front end went");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
