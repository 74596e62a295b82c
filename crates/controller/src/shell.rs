//! The tokio task around [`ControllerCore`]: the relay's sockets (one
//! towards the MMEs, one per MME towards the S/P-GW-C), the socket towards
//! replica anchors, the PFCP sockets towards the steering switch and the
//! MEC router node when configured (`[controller] steering`, `mec`), the
//! timers, the REST API, and write-behind persistence of everything the
//! core records (the relay never waits for the store).
//!
//! With a MEC router node, a traffic-rule change is answered once the
//! node accepted it (`appliedUs` in the answer) and stored only then; a
//! refusal (422) or a node out of reach (503) changes nothing. Every
//! relayed session's downlink tunnel (UE address, eNB F-TEID, anchor
//! S1-U address) is kept on the node for the edge applications' answers.
//!
//! [`bind`] binds every socket and restores what the store kept;
//! [`Controller::run`] serves until the shutdown signal.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mobicore_common::counters::Counters;
use mobicore_gtp::TransactionConfig;
use mobicore_store::{Store, StoreError};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{mpsc, oneshot, watch};

use crate::api::{self, AppState, Command, Failure, MecAnswer, MecOp, RelocationRequest, Stats};
use crate::config::ControllerConfig;
use crate::context::{Anchor, LoggedMessage, SessionRecord};
use crate::core::{ControllerCore, CoreEvent, Relocation, RelocationState, Transmit};
use crate::mec::{mec_session, MecClient, MecError, MecEvent, MecKey, MecRouters, RuleAnswer, RuleError, TrafficRule};
use crate::relay::Peer;
use crate::site::{self, RunningSite};
use crate::steering::SteeringClient;

/// A site's anchor: being started (the relocations waiting for it), or running.
enum SiteSlot {
    Starting(Vec<Queued>),
    Running(RunningSite),
}

/// A relocation request waiting for its site's anchor, and its answer.
type Queued = (RelocationRequest, oneshot::Sender<Result<Relocation, Failure>>);

type SiteResult = (String, Result<RunningSite, String>);

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("binding {what} on {addr}: {source} (is another process using it?)")]
    Bind { what: &'static str, addr: SocketAddr, source: std::io::Error },
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("a stored {0} is unreadable: {1}")]
    Corrupt(&'static str, String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Store writes waiting for the store: beyond, writes are dropped and
/// counted (`store_backlog_full`) rather than slowing the relay.
const PERSIST_BACKLOG: usize = 1 << 20;

/// Store keys.
const SESSION: &str = "controller/session/";
const LOG: &str = "controller/log/";
const ANCHOR: &str = "controller/anchor/";
const RELOCATION: &str = "controller/relocation/";
/// `controller/mec/{router}/{trafficRuleId}`.
const MEC: &str = "controller/mec/";

pub struct Controller {
    pub s11_addr: SocketAddr,
    pub anchor_addr: SocketAddr,
    pub rest_addr: SocketAddr,
    /// The PFCP socket towards the steering switch, when one is configured.
    pub switch_addr: Option<SocketAddr>,
    pub counters: Counters,
    /// The token writes must carry (drawn when not configured).
    pub token: String,
    cfg: ControllerConfig,
    core: ControllerCore,
    store: Store,
    log_len: u64,
    /// An anchor added over REST, to persist.
    pending_anchor: Option<Anchor>,
    mec: MecRouters,
    /// MEC rule changes to persist: (router, id, rule or deleted).
    pending_rules: Vec<(String, String, Option<TrafficRule>)>,
    /// The MEC router node's client and socket, when configured.
    mec_node: Option<(MecClient, Arc<UdpSocket>)>,
    /// Rule changes awaiting the node, by request.
    mec_pending: HashMap<u64, PendingRule>,
    /// The UE address of each relayed session with a tunnel on the node.
    mec_ues: HashMap<u32, std::net::Ipv4Addr>,
    s11: Arc<UdpSocket>,
    anchor: Arc<UdpSocket>,
    switch: Option<Arc<UdpSocket>>,
    rest: TcpListener,
    sites: HashMap<String, SiteSlot>,
    site_tx: mpsc::Sender<SiteResult>,
    site_rx: Option<mpsc::Receiver<SiteResult>>,
}

pub async fn bind(cfg: ControllerConfig) -> Result<Controller, ControllerError> {
    // Large buffers (`bind_udp`): an attach storm's requests arrive in
    // bursts, and a datagram dropped here waits out the MME's T3.
    let udp = |what, addr| async move {
        mobicore_gtp::udp::bind_udp(addr).map_err(|source| ControllerError::Bind { what, addr, source })
    };
    let s11 = Arc::new(udp("S11 (relay)", cfg.s11).await?);
    let anchor = Arc::new(udp("GTP-C towards anchors", cfg.anchor_bind).await?);
    let rest = TcpListener::bind(cfg.rest).await.map_err(|source| ControllerError::Bind {
        what: "REST",
        addr: cfg.rest,
        source,
    })?;
    let switch = match &cfg.steering {
        Some(sc) => Some(Arc::new(udp("PFCP towards the steering switch", sc.local).await?)),
        None => None,
    };
    let store = Store::open(&cfg.store).await?;
    let counters = Counters::new();
    let t = TransactionConfig { t3: Duration::from_millis(cfg.t3_ms), n3: cfg.n3 };
    // Without a steering switch relocations move state only.
    let mut core = ControllerCore::new(cfg.mme_peers.clone(), cfg.limits(), t, false, counters.clone());
    if let Some(sc) = &cfg.steering {
        let client = SteeringClient::new(sc.client(), SystemTime::now(), counters.clone());
        core.attach_switch(Instant::now(), client);
    }
    let log_len = restore(&store, &mut core, &cfg.anchors).await?;
    let names: Vec<String> = cfg.mec_routers.iter().map(|r| r.name.clone()).collect();
    let mut mec = MecRouters::new(&names, cfg.max_mec_rules);
    for (key, v) in store.scan_prefix(MEC).await? {
        let rule: TrafficRule =
            serde_json::from_slice(&v.value).map_err(|e| ControllerError::Corrupt("traffic rule", e.to_string()))?;
        if let Some((router, _)) = key[MEC.len()..].split_once('/') {
            mec.restore(router, rule);
        }
    }
    let mec_node = match &cfg.mec {
        Some(mc) => {
            let sock = Arc::new(udp("PFCP towards the MEC router node", mc.local).await?);
            let mut client = MecClient::new(mc.mec_client(), SystemTime::now(), counters.clone());
            client.start(Instant::now());
            // The node dropped a previous controller's sessions: the
            // stored rules are applied again.
            for r in &cfg.mec_routers {
                for rule in mec.rules(&r.name).unwrap_or_default() {
                    match mec_session(&rule, &r.slice(), &r.app_interface) {
                        Ok(session) => {
                            let key = MecKey::Rule { router: r.name.clone(), id: rule.traffic_rule_id.clone() };
                            client.apply(Instant::now(), key, session);
                        }
                        Err(e) => tracing::warn!(rule = %rule.traffic_rule_id, error = %e, "stored rule not applied"),
                    }
                }
            }
            Some((client, sock))
        }
        None => None,
    };
    // Hands the relocations in force to the switch again.
    core.handle_timeout(Instant::now());
    let token = cfg.token.clone().unwrap_or_else(draw_token);
    let (site_tx, site_rx) = mpsc::channel(16);
    Ok(Controller {
        s11_addr: s11.local_addr()?,
        anchor_addr: anchor.local_addr()?,
        rest_addr: rest.local_addr()?,
        switch_addr: switch.as_ref().map(|s| s.local_addr()).transpose()?,
        counters,
        token,
        cfg,
        core,
        store,
        log_len,
        pending_anchor: None,
        mec,
        pending_rules: Vec::new(),
        mec_node,
        mec_pending: HashMap::new(),
        mec_ues: HashMap::new(),
        s11,
        anchor,
        switch,
        rest,
        sites: HashMap::new(),
        site_tx,
        site_rx: Some(site_rx),
    })
}

/// Loads sessions, the log, anchors and relocations; configured anchors
/// are added when the store does not know them yet. Returns the log length.
async fn restore(store: &Store, core: &mut ControllerCore, configured: &[Anchor]) -> Result<u64, ControllerError> {
    fn parse<T: serde::de::DeserializeOwned>(what: &'static str, v: &[u8]) -> Result<T, ControllerError> {
        serde_json::from_slice(v).map_err(|e| ControllerError::Corrupt(what, e.to_string()))
    }
    let mut sessions = Vec::new();
    for (_, v) in store.scan_prefix(SESSION).await? {
        sessions.push(parse::<SessionRecord>("session", &v.value)?);
    }
    let mut log = Vec::new();
    for (_, v) in store.scan_prefix(LOG).await? {
        log.push(parse::<LoggedMessage>("log entry", &v.value)?);
    }
    let mut anchors = Vec::new();
    for (_, v) in store.scan_prefix(ANCHOR).await? {
        anchors.push(parse::<Anchor>("anchor", &v.value)?);
    }
    for a in configured {
        if !anchors.iter().any(|b| b.name == a.name) {
            store.put(&format!("{ANCHOR}{}", a.name), &serde_json::to_vec(a).expect("json")).await?;
            anchors.push(a.clone());
        }
    }
    let mut relocations = Vec::new();
    for (_, v) in store.scan_prefix(RELOCATION).await? {
        relocations.push(parse::<Relocation>("relocation", &v.value)?);
    }
    let n = log.len() as u64;
    if !sessions.is_empty() || !relocations.is_empty() {
        tracing::info!(sessions = sessions.len(), relocations = relocations.len(), "restored from the store");
    }
    core.restore(Instant::now(), sessions, log, anchors, relocations);
    Ok(n)
}

fn draw_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    // Two SipHash draws keyed by the OS's random state: 128 bits.
    let mut s = String::new();
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
        s.push_str(&format!("{:016x}", h.finish()));
    }
    s
}

/// A store write, done in order by the persister task.
enum Persist {
    Put(String, Vec<u8>),
    Delete(String),
}

/// A traffic-rule change awaiting the MEC router node, and its REST call.
struct PendingRule {
    router: String,
    id: String,
    /// The rule to store once applied (none: a deletion).
    rule: Option<TrafficRule>,
    answer: MecAnswer,
    reply: oneshot::Sender<Result<MecAnswer, RuleError>>,
    started: Instant,
}

/// A REST call waiting for a relocation to reach a state.
struct Waiter {
    id: u64,
    done: fn(&RelocationState) -> bool,
    reply: oneshot::Sender<Result<Relocation, Failure>>,
    deadline: Instant,
}

impl Controller {
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), ControllerError> {
        let (cmd_tx, mut cmd_rx) = mpsc::channel::<Command>(256);
        let state = AppState { commands: cmd_tx, token: self.token.clone().into(), counters: self.counters.clone() };
        let app = api::router(state, self.cfg.max_body_bytes);
        let mut rest_stop = shutdown.clone();
        let rest = std::mem::replace(&mut self.rest, TcpListener::bind("127.0.0.1:0").await?);
        let rest_task = tokio::spawn(async move {
            let stop = async move {
                while !*rest_stop.borrow_and_update() {
                    if rest_stop.changed().await.is_err() {
                        break;
                    }
                }
            };
            axum::serve(rest, app).with_graceful_shutdown(stop).await
        });
        let (persist_tx, persist_rx) = mpsc::channel(PERSIST_BACKLOG);
        let persister = tokio::spawn(persist(self.store.clone(), persist_rx, self.counters.clone()));
        let (up_tx, mut up_rx) = mpsc::channel::<(SocketAddr, Vec<u8>)>(4096);
        let mut upstream: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
        let mut up_tasks = Vec::new();
        let mut waiters: Vec<Waiter> = Vec::new();
        let mut site_rx = self.site_rx.take().expect("run once");
        let mut buf = vec![0u8; 65_536];
        let mut abuf = vec![0u8; 65_536];
        let mut sbuf = vec![0u8; 65_536];
        let switch = self.switch.clone();
        let mec_sock = self.mec_node.as_ref().map(|(_, s)| s.clone());
        let mut mbuf = vec![0u8; 65_536];
        let upstream_ip = self.cfg.upstream_ip.unwrap_or(self.s11_addr.ip());
        // Sites whose anchors carried relocations before a restart start again.
        for name in self.core.awaited_anchors() {
            if self.cfg.sites.iter().any(|s| s.name == name) {
                self.launch_site(name, Vec::new());
            } else {
                self.core.abandon(Instant::now(), &name, "no site of that name is configured");
            }
        }
        self.flush(&upstream, &persist_tx, &mut waiters).await;
        loop {
            let mec_timeout = self.mec_node.as_ref().and_then(|(c, _)| c.poll_timeout());
            let deadline = [self.core.poll_timeout(), waiters.iter().map(|w| w.deadline).min(), mec_timeout]
                .into_iter()
                .flatten()
                .min()
                .map(tokio::time::Instant::from_std);
            let timer = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = self.s11.recv_from(&mut buf) => {
                    let Ok((n, mme)) = r else { continue };
                    if !upstream.contains_key(&mme) && self.cfg.mme_peers.permits(mme.ip()) {
                        if upstream.len() >= self.cfg.max_mmes {
                            self.counters.incr("relay_too_many_mmes");
                            continue;
                        }
                        let sock = Arc::new(mobicore_gtp::udp::bind_udp(SocketAddr::new(upstream_ip, 0))?);
                        upstream.insert(mme, sock.clone());
                        let tx = up_tx.clone();
                        up_tasks.push(tokio::spawn(async move {
                            let mut b = vec![0u8; 65_536];
                            while let Ok((n, _)) = sock.recv_from(&mut b).await {
                                if tx.send((mme, b[..n].to_vec())).await.is_err() {
                                    break;
                                }
                            }
                        }));
                    }
                    self.core.handle_from_mme(Instant::now(), mme, &buf[..n]);
                }
                Some((mme, bytes)) = up_rx.recv() => self.core.handle_from_sgw(Instant::now(), mme, &bytes),
                r = self.anchor.recv_from(&mut abuf) => {
                    let Ok((n, from)) = r else { continue };
                    self.core.handle_from_anchor(Instant::now(), from, &abuf[..n]);
                }
                r = recv_opt(switch.as_deref(), &mut sbuf) => {
                    let Ok((n, from)) = r else { continue };
                    self.core.handle_from_switch(Instant::now(), from, &sbuf[..n]);
                }
                r = recv_opt(mec_sock.as_deref(), &mut mbuf) => {
                    let Ok((n, from)) = r else { continue };
                    if let Some((c, _)) = &mut self.mec_node {
                        c.handle_datagram(Instant::now(), from, &mbuf[..n]);
                    }
                }
                Some(cmd) = cmd_rx.recv() => self.command(cmd, &mut waiters),
                Some((name, r)) = site_rx.recv() => self.site_started(name, r, &mut waiters),
                _ = timer => {
                    let now = Instant::now();
                    self.core.handle_timeout(now);
                    if let Some((c, _)) = &mut self.mec_node {
                        c.handle_timeout(now);
                    }
                    for w in extract(&mut waiters, |w| w.deadline <= now) {
                        let r = self.core.relocation(w.id).cloned();
                        if let Some(r) = r {
                            let _ = w.reply.send(Err(Failure::TimedOut(r)));
                        }
                    }
                }
                r = shutdown.changed() => {
                    if r.is_err() || *shutdown.borrow() {
                        break;
                    }
                }
            }
            self.flush(&upstream, &persist_tx, &mut waiters).await;
        }
        for t in up_tasks {
            t.abort();
        }
        for (_, slot) in self.sites.drain() {
            if let SiteSlot::Running(site) = slot {
                site.stop().await;
            }
        }
        drop(persist_tx);
        let _ = persister.await;
        let _ = self.store.sync();
        let _ = rest_task.await;
        Ok(())
    }

    /// Whether `anchor` names a configured site whose anchor is not running.
    fn must_start(&self, anchor: &str) -> bool {
        !matches!(self.sites.get(anchor), Some(SiteSlot::Running(_)))
            && self.core.anchors().all(|a| a.name != anchor)
            && self.cfg.sites.iter().any(|s| s.name == anchor)
    }

    /// Queues a relocation behind the start of its site's anchor (started
    /// once, by a task, while the relay goes on).
    fn start_site(&mut self, req: RelocationRequest, reply: oneshot::Sender<Result<Relocation, Failure>>) {
        match self.sites.get_mut(&req.anchor) {
            Some(SiteSlot::Starting(q)) => q.push((req, reply)),
            _ => self.launch_site(req.anchor.clone(), vec![(req, reply)]),
        }
    }

    /// Starts configured site `name`'s anchor, `queued` waiting for it.
    fn launch_site(&mut self, name: String, queued: Vec<Queued>) {
        let cfg = self.cfg.sites.iter().find(|s| s.name == name).cloned().expect("a configured site");
        self.sites.insert(name.clone(), SiteSlot::Starting(queued));
        self.counters.incr("sites_starting");
        let tx = self.site_tx.clone();
        tokio::spawn(async move {
            let r = site::launch(&cfg).await;
            let _ = tx.send((name, r)).await;
        });
    }

    /// A site's anchor is up (it becomes an anchor; the waiting
    /// relocations start) or could not start (they are refused, 503).
    fn site_started(&mut self, name: String, r: Result<RunningSite, String>, waiters: &mut Vec<Waiter>) {
        let Some(SiteSlot::Starting(queued)) = self.sites.remove(&name) else { return };
        match r {
            Ok(site) => {
                self.counters.incr("sites_started");
                if let Err(e) = self.core.add_anchor(site.anchor.clone()) {
                    tracing::warn!(site = %name, error = %e, "started anchor not added");
                }
                self.sites.insert(name.clone(), SiteSlot::Running(site));
                self.core.reestablish(Instant::now(), &name);
                for (req, reply) in queued {
                    self.command(Command::Relocate(req, reply), waiters);
                }
            }
            Err(e) => {
                self.counters.incr("sites_failed");
                tracing::warn!(site = %name, error = %e, "anchor did not start");
                self.core.abandon(Instant::now(), &name, &e);
                for (_, reply) in queued {
                    let _ = reply.send(Err(Failure::Refused(crate::core::CoreError::Unavailable(e.clone()))));
                }
            }
        }
    }

    fn command(&mut self, cmd: Command, waiters: &mut Vec<Waiter>) {
        let now = Instant::now();
        let deadline = now + Duration::from_millis(self.cfg.relocation_timeout_ms);
        match cmd {
            Command::Relocate(req, reply) if self.must_start(&req.anchor) => self.start_site(req, reply),
            Command::Relocate(req, reply) => {
                match self.core.relocate_with(now, &req.ue, req.flow, &req.anchor, req.mode, req.keep_address) {
                    Ok(id) => waiters.push(Waiter { id, done: settled, reply, deadline }),
                    Err(e) => {
                        let _ = reply.send(Err(Failure::Refused(e)));
                    }
                }
            }
            Command::MoveBack(id, reply) => match self.core.move_back(now, id) {
                Ok(()) => waiters.push(Waiter { id, done: reverted, reply, deadline }),
                Err(e) => {
                    let _ = reply.send(Err(Failure::Refused(e)));
                }
            },
            Command::AddAnchor(a, reply) => {
                let r = self.core.add_anchor(a.clone());
                if r.is_ok() {
                    self.pending_anchor = Some(a);
                }
                let _ = reply.send(r);
            }
            Command::Anchors(reply) => {
                let _ = reply.send(self.core.anchors().cloned().collect());
            }
            Command::Relocations(reply) => {
                let _ = reply.send(self.core.relocations().cloned().collect());
            }
            Command::Relocation(id, reply) => {
                let _ = reply.send(self.core.relocation(id).cloned());
            }
            Command::Mec(op, reply) if self.mec_node.is_some() => self.mec_change(op, reply),
            Command::Mec(op, reply) => {
                let r = match op {
                    MecOp::Routers => Ok(MecAnswer::Routers(self.mec.routers().map(String::from).collect())),
                    MecOp::List(router) => self.mec.rules(&router).map(MecAnswer::Rules),
                    MecOp::Get(router, id) => self.mec.rule(&router, &id).map(MecAnswer::Rule),
                    MecOp::Put(router, rule, replace) => {
                        let r = self.mec.put(&router, rule, replace);
                        if let Ok(a) = &r {
                            let id = a.rule.traffic_rule_id.clone();
                            self.pending_rules.push((router, id, Some(a.rule.clone())));
                        }
                        r.map(MecAnswer::Put)
                    }
                    MecOp::Delete(router, id) => {
                        let r = self.mec.delete(&router, &id);
                        if r.is_ok() {
                            self.pending_rules.push((router, id, None));
                        }
                        r.map(MecAnswer::Rule)
                    }
                };
                let _ = reply.send(r);
            }
            Command::Stats(reply) => {
                let relay = self.core.relay();
                let (naive_log_bytes, selective_bytes) = relay.stored_bytes();
                let active = self.core.relocations().filter(|r| r.state == RelocationState::Active).count();
                let _ = reply.send(Stats {
                    sessions: relay.sessions().len(),
                    selective_bytes,
                    naive_log_bytes,
                    naive_log_full: relay.log().is_none(),
                    relocations_active: active,
                });
            }
        }
    }

    /// A traffic-rule operation with a MEC router node: reads are
    /// answered at once; a change is checked, sent to the node, and
    /// stored and answered when the node accepts it ([`Self::mec_applied`]).
    fn mec_change(&mut self, op: MecOp, reply: oneshot::Sender<Result<MecAnswer, RuleError>>) {
        let prepared = match op {
            MecOp::Put(router, rule, replace) => self.mec.check_put(&router, &rule, replace).and_then(|answer| {
                let cfg = self.cfg.mec_routers.iter().find(|r| r.name == router).expect("a configured router");
                let session = mec_session(&rule, &cfg.slice(), &cfg.app_interface)?;
                Ok((router, rule.traffic_rule_id.clone(), Some(rule), MecAnswer::Put(answer), session))
            }),
            MecOp::Delete(router, id) => {
                self.mec.rule(&router, &id).map(|old| (router, id, None, MecAnswer::Rule(old), None))
            }
            read => {
                let r = match read {
                    MecOp::Routers => Ok(MecAnswer::Routers(self.mec.routers().map(String::from).collect())),
                    MecOp::List(router) => self.mec.rules(&router).map(MecAnswer::Rules),
                    MecOp::Get(router, id) => self.mec.rule(&router, &id).map(MecAnswer::Rule),
                    MecOp::Put(..) | MecOp::Delete(..) => unreachable!("changes are matched above"),
                };
                let _ = reply.send(r);
                return;
            }
        };
        let (router, id, rule, answer, session) = match prepared {
            Ok(p) => p,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        if let Err(e) = self.mec.begin_change(&router, &id) {
            let _ = reply.send(Err(e));
            return;
        }
        let (client, _) = self.mec_node.as_mut().expect("a MEC router node");
        let key = MecKey::Rule { router: router.clone(), id: id.clone() };
        let started = Instant::now();
        let request = client.apply(started, key, session);
        self.mec_pending.insert(request, PendingRule { router, id, rule, answer, reply, started });
    }

    /// The node's answer to a change: stored and answered, or refused
    /// with nothing changed.
    fn mec_applied(&mut self, e: MecEvent) {
        let Some(p) = self.mec_pending.remove(&e.request) else {
            if let (MecKey::Ue(ue), Err(why)) = (&e.key, &e.result) {
                self.counters.incr("mec_ue_tunnel_failed");
                tracing::warn!(%ue, error = %why, "the UE's tunnel is not on the MEC router node");
            }
            return;
        };
        self.mec.end_change(&p.router, &p.id);
        let r = match e.result {
            Ok(()) => {
                match &p.rule {
                    Some(rule) => self.mec.commit_put(&p.router, rule.clone()),
                    None => {
                        let _ = self.mec.delete(&p.router, &p.id);
                    }
                }
                self.pending_rules.push((p.router, p.id, p.rule));
                Ok(match p.answer {
                    MecAnswer::Put(a) => {
                        MecAnswer::Put(RuleAnswer { applied_us: Some(p.started.elapsed().as_micros() as u64), ..a })
                    }
                    other => other,
                })
            }
            Err(MecError::Refused(why)) => Err(RuleError::Refused(why)),
            Err(MecError::Unreachable(why)) => Err(RuleError::Unavailable(why)),
        };
        let _ = p.reply.send(r);
    }

    /// A relayed session recorded or forgotten: its downlink tunnel on the
    /// MEC router node follows.
    fn mec_tunnel(&mut self, sgw_s11_teid: u32, record: Option<&SessionRecord>) {
        let Some((client, _)) = self.mec_node.as_mut() else { return };
        let now = Instant::now();
        let tunnel = record.and_then(|r| {
            let ue = r.ue_ipv4?;
            let (teid, enb) = r.enb_s1u()?;
            let (_, origin) = r.s1u_sgw?;
            Some(mobicore_pfcp::mec::UeTunnel { ue, enb, teid, origin })
        });
        match tunnel {
            Some(t) => {
                if let Some(old) = self.mec_ues.insert(sgw_s11_teid, t.ue).filter(|o| *o != t.ue) {
                    client.apply(now, MecKey::Ue(old), None);
                }
                client.apply(now, MecKey::Ue(t.ue), Some(mobicore_pfcp::mec::MecSession::Ue(t)));
            }
            None if record.is_none() => {
                if let Some(ue) = self.mec_ues.remove(&sgw_s11_teid) {
                    client.apply(now, MecKey::Ue(ue), None);
                }
            }
            None => {}
        }
    }

    /// Sends what the core wants sent, persists what it recorded, answers
    /// the REST calls whose relocation settled.
    async fn flush(
        &mut self,
        upstream: &HashMap<SocketAddr, Arc<UdpSocket>>,
        persist: &mpsc::Sender<Persist>,
        waiters: &mut Vec<Waiter>,
    ) {
        while let Some(t) = self.core.poll_transmit() {
            let sent = match &t {
                Transmit::Relay(t) => match t.to {
                    Peer::Sgw { mme } => match upstream.get(&mme) {
                        Some(s) => s.send_to(&t.bytes, self.cfg.sgw).await,
                        None => continue,
                    },
                    Peer::Mme(mme) => self.s11.send_to(&t.bytes, mme).await,
                },
                Transmit::Anchor { to, bytes } => self.anchor.send_to(bytes, *to).await,
            };
            if let Err(e) = sent {
                self.counters.incr("send_failed");
                tracing::debug!(error = %e, "send failed");
            }
        }
        while let Some((to, bytes)) = self.core.poll_switch_transmit() {
            let Some(s) = &self.switch else { break };
            if let Err(e) = s.send_to(&bytes, to).await {
                self.counters.incr("send_failed");
                tracing::debug!(error = %e, "send to the steering switch failed");
            }
        }
        if let Some(a) = self.pending_anchor.take() {
            self.persist(persist, Persist::Put(format!("{ANCHOR}{}", a.name), json(&a)));
        }
        while let Some(e) = self.core.poll_event() {
            match e {
                CoreEvent::Session { sgw_s11_teid, record } => {
                    self.mec_tunnel(sgw_s11_teid, record.as_ref());
                    let key = format!("{SESSION}{sgw_s11_teid:08x}");
                    self.persist(
                        persist,
                        match record {
                            Some(r) => Persist::Put(key, json(&r)),
                            None => Persist::Delete(key),
                        },
                    );
                }
                CoreEvent::Logged(m) => {
                    self.persist(persist, Persist::Put(format!("{LOG}{:012}", self.log_len), json(&m)));
                    self.log_len += 1;
                }
                CoreEvent::Relocation(r) => {
                    self.persist(persist, Persist::Put(format!("{RELOCATION}{:012}", r.id), json(&r)));
                    for w in extract(waiters, |w| w.id == r.id && ((w.done)(&r.state) || is_failed(&r.state))) {
                        let answer = if (w.done)(&r.state) { Ok(r.clone()) } else { Err(Failure::Failed(r.clone())) };
                        let _ = w.reply.send(answer);
                    }
                }
                // Only without a switch: an attached one gets them in the core.
                CoreEvent::Divert { relocation } => {
                    let why = "no steering switch is configured".to_string();
                    self.core.handle_diverted(Instant::now(), relocation.id, Err(why));
                }
                CoreEvent::Undivert { relocation } => {
                    self.core.handle_diverted(Instant::now(), relocation.id, Ok(()));
                }
            }
        }
        if let Some((client, sock)) = &mut self.mec_node {
            while let Some((to, bytes)) = client.poll_transmit() {
                if let Err(e) = sock.send_to(&bytes, to).await {
                    self.counters.incr("send_failed");
                    tracing::debug!(error = %e, "send to the MEC router node failed");
                }
            }
        }
        while let Some(e) = self.mec_node.as_mut().and_then(|(c, _)| c.poll_event()) {
            self.mec_applied(e);
        }
        for (router, id, rule) in std::mem::take(&mut self.pending_rules) {
            let key = format!("{MEC}{router}/{id}");
            self.persist(
                persist,
                match rule {
                    Some(r) => Persist::Put(key, json(&r)),
                    None => Persist::Delete(key),
                },
            );
        }
    }
}

impl Controller {
    fn persist(&self, tx: &mpsc::Sender<Persist>, p: Persist) {
        if tx.try_send(p).is_err() {
            self.counters.incr("store_backlog_full");
        }
    }
}

/// A datagram from `s`, or never when there is no socket.
async fn recv_opt(s: Option<&UdpSocket>, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddr)> {
    match s {
        Some(s) => s.recv_from(buf).await,
        None => std::future::pending().await,
    }
}

fn settled(s: &RelocationState) -> bool {
    *s == RelocationState::Active
}

fn reverted(s: &RelocationState) -> bool {
    *s == RelocationState::Reverted
}

fn is_failed(s: &RelocationState) -> bool {
    matches!(s, RelocationState::Failed(_))
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("plain data serializes")
}

/// Removes and returns the waiters `f` selects.
fn extract(v: &mut Vec<Waiter>, f: impl Fn(&Waiter) -> bool) -> Vec<Waiter> {
    let (out, keep): (Vec<_>, Vec<_>) = std::mem::take(v).into_iter().partition(|w| f(w));
    *v = keep;
    out
}

async fn persist(store: Store, mut rx: mpsc::Receiver<Persist>, counters: Counters) {
    while let Some(p) = rx.recv().await {
        let r = match p {
            Persist::Put(k, v) => store.put(&k, &v).await.map(|_| ()),
            Persist::Delete(k) => store.delete(&k).await.map(|_| ()),
        };
        if let Err(e) = r {
            counters.incr("store_write_failed");
            tracing::warn!(error = %e, "store write failed");
        }
    }
}
