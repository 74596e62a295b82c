//! The MME under test ([`MmeUnderTest`]): today's monolithic core, or the
//! elastic MME decomposed as its processes are (ARCHITECTURE.md, "The
//! elastic MME as processes"), sans-I/O:
//!
//! - a front end's core, holding no UE, answers S1 Setup, eNB
//!   Configuration Update and Reset; these also go to every host's core
//!   (each keeps every eNB's context), whose answers are dropped;
//! - [`Router`] routes each UE-associated uplink message by its
//!   MME-UE-S1AP-ID or its INITIAL UE MESSAGE's S-TMSI (the host number on
//!   top, `MmeConfig::host_prefix`; a dead host's UEs to its heir), new
//!   UEs in turn, and the S-GW's requests by the MME S11 TEID;
//! - the host cores, over one shared memory store ([`StoredUes`]): a host
//!   at a message for a UE it does not hold loads it first
//!   ([`StoredUes::hold`]), and after every event it writes the store
//!   ([`StoredUes::sync`]) before anything the event produced is taken
//!   (write-ahead, as `mme-host` does). A host killed by the test is gone
//!   at once; its heir adopts its UEs from the store ([`StoredUes::adopt`]).
//!
//! The memory store never waits (the embedded store answers under a
//! lock), so its futures are run by polling them once ([`now_or_never`]).
//!
//! Every scenario runs against either: `NetworkConfig::default()` reads
//! [`MmeMode::ENV`].

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use mobicore_common::counters::Counters;
use mobicore_common::requester::TransportError;
use mobicore_common::s11::S11IncomingRequest;
use mobicore_common::s6a::S6aIncomingRequest;
use mobicore_common::Imsi;
use mobicore_elastic::balancer::{Estimation, Loads};
use mobicore_elastic::router::{Dest, Router, S11From, S11Header, S11Route};
use mobicore_elastic::{Frontend, HostId, Profiles, Scheme};
use mobicore_mme::context_codec::{self, TimeBase};
use mobicore_mme::routing::{self, Uplink};
use mobicore_mme::stored::{self, Replication, StoredUes};
use mobicore_mme::transfer::UeKey;
use mobicore_mme::{Mme, MmeAction, MmeConfig, MmeEvent, MmeStats, OperatorCommand, UeRef};
use mobicore_store::Store;

/// Which MME a [`crate::Network`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MmeMode {
    /// One `Mme` core.
    #[default]
    Monolith,
    /// A front end, a router and host cores over a shared store.
    Decomposed(Decomposition),
}

/// The shape of a decomposed MME.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decomposition {
    /// Host cores, numbered 1..=hosts.
    pub hosts: u8,
    pub replication: Replication,
}

impl Default for Decomposition {
    fn default() -> Self {
        Decomposition { hosts: 3, replication: Replication::Hot }
    }
}

impl MmeMode {
    /// The same MME, of `hosts` hosts if decomposed (a scenario whose
    /// point is one MME's load: each host judges its own).
    pub fn with_hosts(self, hosts: u8) -> MmeMode {
        match self {
            MmeMode::Monolith => MmeMode::Monolith,
            MmeMode::Decomposed(d) => MmeMode::Decomposed(Decomposition { hosts, ..d }),
        }
    }

    /// The environment variable [`MmeMode::from_env`] reads: `monolith`
    /// (or unset), or `decomposed` ([`Decomposition::default`]).
    pub const ENV: &'static str = "MOBICORE_HARNESS_MME";

    /// The mode [`MmeMode::ENV`] names; panics on anything else, so that a
    /// misspelt value does not silently run the monolith.
    pub fn from_env() -> MmeMode {
        match std::env::var(Self::ENV).as_deref() {
            Err(_) | Ok("" | "monolith") => MmeMode::Monolith,
            Ok("decomposed") => MmeMode::Decomposed(Decomposition::default()),
            Ok(other) => panic!("{}={other}: monolith or decomposed", Self::ENV),
        }
    }
}

/// The MME a [`crate::Network`] runs: the methods the scenarios use
/// answer for the whole MME in either mode.
pub enum MmeUnderTest {
    Monolith(Box<Mme>),
    Decomposed(Box<Decomposed>),
}

impl MmeUnderTest {
    pub fn new(cfg: MmeConfig, mode: MmeMode, now: Instant) -> MmeUnderTest {
        match mode {
            MmeMode::Monolith => MmeUnderTest::Monolith(Box::new(Mme::new(cfg))),
            MmeMode::Decomposed(d) => MmeUnderTest::Decomposed(Box::new(Decomposed::new(cfg, d, now))),
        }
    }

    /// The decomposed MME's parts, if it is one.
    pub fn decomposed(&self) -> Option<&Decomposed> {
        match self {
            MmeUnderTest::Monolith(_) => None,
            MmeUnderTest::Decomposed(d) => Some(d),
        }
    }

    pub fn decomposed_mut(&mut self) -> Option<&mut Decomposed> {
        match self {
            MmeUnderTest::Monolith(_) => None,
            MmeUnderTest::Decomposed(d) => Some(d),
        }
    }

    /// An event for the MME: to the core it concerns.
    pub fn handle(&mut self, now: Instant, ev: MmeEvent) {
        match self {
            MmeUnderTest::Monolith(m) => m.handle(now, ev),
            MmeUnderTest::Decomposed(d) => d.handle(now, ev),
        }
    }

    /// The S-GW's response (or its timeout) to the S11 request `from`
    /// sent (`None`: the monolith's).
    pub fn handle_s11_response(
        &mut self,
        now: Instant,
        from: Option<HostId>,
        ue: UeRef,
        response: Result<mobicore_common::s11::S11Response, TransportError>,
    ) {
        match self {
            MmeUnderTest::Monolith(m) => m.handle(now, MmeEvent::S11 { ue, response }),
            MmeUnderTest::Decomposed(d) => d.s11_response(now, from, ue, response),
        }
    }

    /// The next action of any core, with the host that produced it
    /// (`None`: the monolith or the front end).
    pub fn poll_action(&mut self) -> Option<(Option<HostId>, MmeAction)> {
        match self {
            MmeUnderTest::Monolith(m) => m.poll_action().map(|a| (None, a)),
            MmeUnderTest::Decomposed(d) => d.poll_action(),
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        match self {
            MmeUnderTest::Monolith(m) => m.poll_timeout(),
            MmeUnderTest::Decomposed(d) => d.cores().filter_map(Mme::poll_timeout).min(),
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        match self {
            MmeUnderTest::Monolith(m) => m.handle_timeout(now),
            MmeUnderTest::Decomposed(d) => d.handle_timeout(now),
        }
    }

    /// How many cores handle each eNB-wide message (S1 Setup, eNB
    /// Configuration Update, Reset) and count it: 1, or the front end and
    /// every host (each keeps every eNB's context).
    pub fn enb_wide_cores(&self) -> u64 {
        match self {
            MmeUnderTest::Monolith(_) => 1,
            MmeUnderTest::Decomposed(d) => 1 + d.hosts.len() as u64,
        }
    }

    /// The MME's counters: every core of a decomposed MME counts in the
    /// same set (an eNB-wide message is counted by each core it reaches:
    /// the front end and every host).
    pub fn counters(&self) -> &Counters {
        match self {
            MmeUnderTest::Monolith(m) => m.counters(),
            MmeUnderTest::Decomposed(d) => &d.counters,
        }
    }

    /// The eNBs the MME set up (the front end's), the UEs it holds (every
    /// host's).
    pub fn stats(&self) -> MmeStats {
        match self {
            MmeUnderTest::Monolith(m) => m.stats(),
            MmeUnderTest::Decomposed(d) => {
                let hosts: Vec<MmeStats> = d.hosts.values().map(|h| h.core.stats()).collect();
                MmeStats {
                    ues: hosts.iter().map(|s| s.ues).sum(),
                    enbs: d.frontend.stats().enbs,
                    attached: hosts.iter().map(|s| s.attached).sum(),
                }
            }
        }
    }

    /// Pagings running now, on every host.
    pub fn pagings(&self) -> usize {
        match self {
            MmeUnderTest::Monolith(m) => m.pagings(),
            MmeUnderTest::Decomposed(d) => d.hosts.values().map(|h| h.core.pagings()).sum(),
        }
    }

    /// The MME's configuration (the front end's: a host's differs only by
    /// its `host_prefix`).
    pub fn config(&self) -> &MmeConfig {
        match self {
            MmeUnderTest::Monolith(m) => m.config(),
            MmeUnderTest::Decomposed(d) => d.frontend.config(),
        }
    }
}

/// One MME host: its core and its store layer.
pub struct Host {
    pub core: Mme,
    pub stored: StoredUes,
}

/// A decomposed MME: front end, router, hosts, store.
pub struct Decomposed {
    pub frontend: Mme,
    pub router: Router,
    /// The live hosts.
    hosts: BTreeMap<HostId, Host>,
    pub store: Store,
    counters: Counters,
    /// The virtual clock's start: records carry deadlines as Unix
    /// milliseconds, counted from a fixed epoch (deterministic).
    start: Instant,
    now: Instant,
    /// The host each UE's S6a request came from, by MME-UE-S1AP-ID: its
    /// answer goes back there (a host's S6a link is its own).
    s6a_sender: HashMap<u32, HostId>,
    /// (Fault) UE-associated uplinks to go before the host handling one
    /// dies ([`Decomposed::kill_after_uplink`]).
    die_after: Option<u64>,
}

/// The Unix time the virtual clock starts at (2026-01-01T00:00:00Z).
const EPOCH_UNIX_MS: u64 = 1_767_225_600_000;

impl Decomposed {
    fn new(cfg: MmeConfig, d: Decomposition, now: Instant) -> Decomposed {
        let counters = Counters::new();
        let store = Store::memory();
        let hosts = (1..=d.hosts)
            .map(|h| {
                let mut core = Mme::with_counters(MmeConfig { host_prefix: Some(h), ..cfg.clone() }, counters.clone());
                let stored = StoredUes::new(store.clone(), d.replication, &mut core);
                (HostId(u32::from(h)), Host { core, stored })
            })
            .collect::<BTreeMap<_, _>>();
        let fe = Frontend::new(
            Scheme::RoundRobin.balancer(2),
            Loads::new(Profiles::default(), Estimation::default()),
            1 << 16,
        );
        let mut router = Router::new(fe);
        for &h in hosts.keys() {
            router.host_up(h);
        }
        Decomposed {
            frontend: Mme::with_counters(cfg, counters.clone()),
            router,
            hosts,
            store,
            counters,
            start: now,
            now,
            s6a_sender: HashMap::new(),
            die_after: None,
        }
    }

    /// A live host.
    pub fn host(&self, h: HostId) -> Option<&Host> {
        self.hosts.get(&h)
    }

    /// The live hosts, in order.
    pub fn hosts(&self) -> impl Iterator<Item = (HostId, &Host)> {
        self.hosts.iter().map(|(&h, host)| (h, host))
    }

    /// The live host holding the UE `key` names.
    pub fn holder(&self, key: &UeKey) -> Option<HostId> {
        self.hosts.iter().find(|(_, h)| h.core.find_ue(key).is_some()).map(|(&h, _)| h)
    }

    /// (Fault) The host that handles the `n`th UE-associated uplink from
    /// now (1: the next; 0: none) dies right after, its UE's record
    /// written and nothing it sent gone out; the uplink goes again to
    /// whoever serves the UE then, as `mme-frontend` sends a dead host's
    /// messages it had not said it handled (`Frame::Handled`) to the heir.
    pub fn kill_after_uplink(&mut self, n: u64) {
        self.die_after = (n > 0).then_some(n);
    }

    /// Host `h` dies (its core and what it held in memory are gone) and
    /// the router learns it; each heir adopts its replica groups of the
    /// dead host's UEs from the store, and of those of hosts gone before
    /// whose heir it was, as at the front end's `Inherit` and `Adopt`.
    /// Returns the heirs, in host order (none if `h` was not live).
    pub fn kill_host(&mut self, h: HostId) -> Vec<HostId> {
        if self.hosts.remove(&h).is_none() {
            return Vec::new();
        }
        let time = self.time(self.now);
        let mut heirs = Vec::new();
        for ho in self.router.host_down(h) {
            let Some(host) = self.hosts.get_mut(&ho.heir) else { continue };
            let gone = ho.gone.0 as u8;
            host.core.adopt_prefix(gone, ho.groups);
            if let Err(e) = now_or_never(host.stored.adopt(&mut host.core, gone, ho.groups, time, |_, _| false)) {
                panic!("the memory store failed: {e}");
            }
            // As `mme-host` after its Inherit: what the resumed steps changed
            // (a detach finished) is written before the next message.
            now_or_never(host.stored.sync(&mut host.core, time));
            if !heirs.contains(&ho.heir) {
                heirs.push(ho.heir);
            }
        }
        heirs.sort();
        heirs
    }

    fn cores(&self) -> impl Iterator<Item = &Mme> {
        std::iter::once(&self.frontend).chain(self.hosts.values().map(|h| &h.core))
    }

    fn time(&self, now: Instant) -> TimeBase {
        let unix_ms = EPOCH_UNIX_MS + now.saturating_duration_since(self.start).as_millis() as u64;
        TimeBase { now, unix_ms }
    }

    fn handle(&mut self, now: Instant, ev: MmeEvent) {
        self.now = now;
        match ev {
            MmeEvent::S1Up { .. } | MmeEvent::S1Down { .. } => self.enb_wide(now, ev),
            MmeEvent::S1Data { assoc, stream, ref data } => match routing::uplink(assoc.0, data) {
                Uplink::EnbWide => self.enb_wide(now, ev),
                Uplink::NonUe | Uplink::Malformed => self.frontend.handle(now, ev),
                uplink @ Uplink::Ue(name) => match self.router.route(name) {
                    // No host drains here: a held message would be routed
                    // the same once the host is gone.
                    Ok(Dest::Host(h) | Dest::Hold(h)) => {
                        let dies = self.die_after.as_mut().is_some_and(|n| {
                            *n -= 1;
                            *n == 0
                        });
                        let again = dies.then(|| MmeEvent::S1Data { assoc, stream, data: data.clone() });
                        self.on_host(h, now, uplink.ue_key(), ev);
                        if let Some(again) = again {
                            self.die_after = None;
                            self.kill_host(h);
                            self.counters.incr("harness_uplink_again");
                            self.again(h, now, again);
                        }
                    }
                    Err(_) => self.counters.incr("frontend_no_host"),
                },
            },
            MmeEvent::S6a { ue, .. } => {
                let id = ue.mme_ue_s1ap_id;
                match self.s6a_sender.remove(&id) {
                    Some(h) if self.hosts.contains_key(&h) => self.on_host(h, now, None, ev),
                    // Its host died with its S6a link: the answer is lost.
                    Some(_) => self.counters.incr("harness_s6a_answer_host_gone"),
                    None => self.serve_by_id(id, now, ev),
                }
            }
            MmeEvent::S11 { ue, response } => self.s11_response(now, None, ue, response),
            MmeEvent::S11Incoming { txn, ref request } => {
                let S11IncomingRequest::DownlinkDataNotification(ddn) = request;
                let teid = ddn.mme_teid.0;
                let header = S11Header { initial: true, teid: Some(teid), seq: txn as u32 };
                match self.router.route_s11(now, S11From::Sgw, header) {
                    Ok(S11Route::Host(h)) => self.on_host(h, now, Some(UeKey::MmeUeS1apId(teid)), ev),
                    // Not for a request of the S-GW.
                    Ok(S11Route::Sgw | S11Route::SgwAs(_) | S11Route::HostAs(..)) => {}
                    Err(d) => self.counters.incr(d.counter()),
                }
            }
            MmeEvent::S6aIncoming { request: S6aIncomingRequest::CancelLocation(ref clr), .. } => {
                let imsi = clr.imsi.clone();
                self.by_imsi(&imsi, now, ev)
            }
            MmeEvent::Operator { command: OperatorCommand::Detach { ref imsi, .. }, .. } => {
                let imsi = imsi.clone();
                self.by_imsi(&imsi, now, ev)
            }
        }
    }

    /// A UE-associated uplink dead host `gone` had not handled, routed
    /// again as `mme-frontend` does ([`Router::route_again`]).
    fn again(&mut self, gone: HostId, now: Instant, ev: MmeEvent) {
        let MmeEvent::S1Data { assoc, ref data, .. } = ev else { return };
        let uplink = routing::uplink(assoc.0, data);
        let Uplink::Ue(name) = uplink else { return };
        let group = self.frontend.group_for(None, Some(data));
        match self.router.route_again(gone, name, group) {
            Ok(Dest::Host(h) | Dest::Hold(h)) => {
                if self.hosts.get(&h).is_some_and(|host| host.core.taken_over_initial(assoc, data)) {
                    self.counters.incr("host_initial_again_dropped");
                    return;
                }
                self.on_host(h, now, uplink.ue_key(), ev)
            }
            Err(_) => self.counters.incr("frontend_no_host"),
        }
    }

    /// S1 Setup, eNB Configuration Update, Reset, an association up or
    /// down: to the front end and to every host.
    fn enb_wide(&mut self, now: Instant, ev: MmeEvent) {
        let hosts: Vec<HostId> = self.hosts.keys().copied().collect();
        for h in hosts {
            let copy = match &ev {
                MmeEvent::S1Up { assoc, peer, outbound_streams } => {
                    MmeEvent::S1Up { assoc: *assoc, peer: *peer, outbound_streams: *outbound_streams }
                }
                MmeEvent::S1Down { assoc } => MmeEvent::S1Down { assoc: *assoc },
                MmeEvent::S1Data { assoc, stream, data } => {
                    MmeEvent::S1Data { assoc: *assoc, stream: *stream, data: data.clone() }
                }
                _ => unreachable!("only eNB-wide events are copied"),
            };
            self.on_host(h, now, None, copy);
        }
        self.frontend.handle(now, ev);
    }

    /// An event of the UE `id` names (S6a answer with no request seen,
    /// S11 response of no known host): to the host serving its owner.
    fn serve_by_id(&mut self, id: u32, now: Instant, ev: MmeEvent) {
        match self.router.serving_id(id) {
            Some(h) => self.on_host(h, now, Some(UeKey::MmeUeS1apId(id)), ev),
            None => self.counters.incr("frontend_no_host"),
        }
    }

    /// The HSS's or the operator's request for an IMSI: to the host
    /// holding the UE, else to the host serving the MME-UE-S1AP-ID of its
    /// stored record (which loads it), else to any host (it answers that
    /// the IMSI is unknown).
    fn by_imsi(&mut self, imsi: &Imsi, now: Instant, ev: MmeEvent) {
        let key = UeKey::Imsi(imsi.clone());
        let stored = || {
            let record = now_or_never(self.store.get(&stored::keys::record(imsi))).ok()??;
            let (id, _) = context_codec::peek_context(&record.value).ok()?;
            self.router.serving_id(id)
        };
        let host = self.holder(&key).or_else(stored).or_else(|| self.hosts.keys().next().copied());
        match host {
            Some(h) => self.on_host(h, now, Some(key), ev),
            None => self.counters.incr("frontend_no_host"),
        }
    }

    fn s11_response(
        &mut self,
        now: Instant,
        from: Option<HostId>,
        ue: UeRef,
        response: Result<mobicore_common::s11::S11Response, TransportError>,
    ) {
        self.now = now;
        let ev = MmeEvent::S11 { ue, response };
        match from {
            // Only the sender holds the transaction (TS 29.274 7.6).
            Some(h) if self.hosts.contains_key(&h) => self.on_host(h, now, None, ev),
            Some(_) => self.counters.incr(mobicore_elastic::router::S11Drop::HostGone.counter()),
            None => self.serve_by_id(ue.mme_ue_s1ap_id, now, ev),
        }
    }

    /// What `mme-host` does with an event: hold the UE (load it if
    /// another host had it), handle, sync the store; what the event
    /// produced waits in the core for [`Decomposed::poll_action`].
    fn on_host(&mut self, h: HostId, now: Instant, key: Option<UeKey>, ev: MmeEvent) {
        let time = self.time(now);
        let Some(host) = self.hosts.get_mut(&h) else {
            self.counters.incr("frontend_no_host");
            return;
        };
        if let Some(key) = key {
            now_or_never(host.stored.hold(&mut host.core, &key, time));
        }
        host.core.handle(now, ev);
        now_or_never(host.stored.sync(&mut host.core, time));
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        if self.frontend.poll_timeout().is_some_and(|t| t <= now) {
            self.frontend.handle_timeout(now);
        }
        let time = self.time(now);
        for host in self.hosts.values_mut() {
            if host.core.poll_timeout().is_some_and(|t| t <= now) {
                host.core.handle_timeout(now);
                now_or_never(host.stored.sync(&mut host.core, time));
            }
        }
    }

    /// The front end's actions, then each host's, as the front end passes
    /// them on: a host's answer to an eNB-wide message is dropped (the
    /// front end answered), its S1 aborts too (the front end owns the
    /// associations), its answer to an S-GW request goes out only if the
    /// router gave it that request.
    fn poll_action(&mut self) -> Option<(Option<HostId>, MmeAction)> {
        if let Some(a) = self.frontend.poll_action() {
            return Some((None, a));
        }
        for (&h, host) in self.hosts.iter_mut() {
            while let Some(a) = host.core.poll_action() {
                match &a {
                    MmeAction::S1Send { data, .. } if routing::is_enb_wide_answer(data) => continue,
                    MmeAction::S1Abort { .. } => {
                        self.counters.incr("host_abort_not_forwarded");
                        continue;
                    }
                    MmeAction::S6a { ue, .. } => {
                        self.s6a_sender.insert(ue.mme_ue_s1ap_id, h);
                    }
                    MmeAction::S11Answer { txn, .. } => {
                        let header = S11Header { initial: false, teid: None, seq: *txn as u32 };
                        if let Err(d) = self.router.route_s11(self.now, S11From::Host(h), header) {
                            self.counters.incr(d.counter());
                            continue;
                        }
                    }
                    _ => {}
                }
                return Some((Some(h), a));
            }
        }
        None
    }
}

/// The output of a future that completes at its first poll: the memory
/// store's operations, which never wait. Panics if it does not.
pub fn now_or_never<T>(f: impl Future<Output = T>) -> T {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(t) => t,
        Poll::Pending => panic!("a memory store operation waited"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_store_answers_at_the_first_poll() {
        let store = Store::memory();
        let v = now_or_never(store.compare_and_set("k", None, b"v")).unwrap();
        assert_eq!(now_or_never(store.get("k")).unwrap().unwrap().version, v);
        assert_eq!(now_or_never(store.scan_prefix("")).unwrap().len(), 1);
    }

    #[test]
    #[should_panic(expected = "waited")]
    fn a_future_that_waits_is_refused() {
        now_or_never(std::future::pending::<()>());
    }
}
