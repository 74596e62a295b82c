//! The front end of the elastic MME (issue 13 item 1): the one MME the
//! eNBs see. It terminates S1AP/SCTP, answers the eNB-wide procedures
//! itself (S1 Setup, eNB Configuration Update, Reset, with an MME core of
//! its own that holds no UE) and keeps the eNB contexts, and hands every
//! UE-associated message to an MME host by [`Router`]. Hosts connect to it
//! over TCP ([`super::wire`]); each gets every eNB's association and S1
//! Setup Request first (so that any host can take any UE of any eNB), then
//! the UE-associated messages routed to it. A host's downlink S1AP goes out
//! on the eNB's association as it is, but for its answers to the eNB-wide
//! messages (the front end's answer went already).
//!
//! The front end also owns the MME's S11 address (one UDP socket): the
//! hosts send their S11 requests to it over their links ([`Frame::S11`])
//! and it relays them to the S-GW under numbers of its own, so that the
//! S-GW knows one MME address whichever host serves a UE (the one it sends
//! Downlink Data Notifications to); the S-GW's requests go to the host
//! that serves the UE by the MME S11 TEID in their header, the responses
//! to the host that sent the request, under its number
//! ([`Router::route_s11`]), both over the host's link, and the hosts'
//! answers go back to the S-GW from this address. The socket hears the
//! S-GW alone; an Echo Request is answered here (TS 29.274 7.1.2).
//!
//! Hosts report their load periodically (`Frame::Load`); the reports go to
//! the balancer ([`Router::report`], for `sk-ch`: seed 004 Algorithm 1,
//! Eq. 1), and a host whose reports stop is marked stale
//! ([`Router::expire_reports`]).
//!
//! Scaling (seed 004 5.2; [`super::scaling`] for the operator's API and
//! the processes): a host that connects at run time joins the rings and
//! takes new UEs. A host is drained ([`Router::drain`]) on the operator's
//! request or the EPS controller's decision
//! ([`mobicore_elastic::controller`], `--autoscale`): it gets no new UE,
//! serves what runs, and the INITIAL UE MESSAGEs of its UEs are held here
//! until it says [`Frame::Drained`] (or `drain_within` has passed: then it
//! is stopped as it stands); then it is gone for the router (its UEs go to
//! the heirs of their replica groups, which load them from the store, the
//! held messages first),
//! what it gives back ([`Frame::Bounce`]) is routed again, and it is told
//! to stop ([`Frame::Stop`]).
//!
//! Host-local stores (seed 004 4.3, `mme-host --store local`): the front
//! end tells each host its replica hosts, for each replica group the one
//! that would be its heir if it went now ([`Frame::ReplicateTo`], at its
//! Hello and whenever hosts join, leave or drain), relays the hosts'
//! replicated records between them ([`Frame::Replica`], in order per
//! pair of hosts), and tells each heir of a gone host's groups to take
//! their records from its copy ([`Frame::Inherit`]) before anything of
//! their UEs goes there, and to load those of hosts gone before whose
//! heir it was ([`Frame::Adopt`]). Hosts of a shared store only load the
//! UEs of the two.
//!
//! A host whose connection closes is gone: its UEs go to their heirs.
//!
//! # Messages in flight to a host that dies
//! Each UE-associated message sent to a host is kept until the host says
//! it handled it ([`Frame::Handled`]: every S1 frame up to a count, its
//! UEs' records written and, with a host-local store, replicated ahead of
//! that frame). When the host dies, those it had not handled go again,
//! after its heirs' [`Frame::Inherit`]s, as if the eNB had just sent them
//! (`frontend_unhandled_routed_again`); so do those routed to it after
//! its connection closed and before its going was handled
//! (`frontend_host_closing`). The heir's copy, replicated hot, is what the
//! dead host wrote before it sent anything (write-ahead), and the heir
//! sends again whatever the copy's step awaits (an S6a or S11 request, an
//! INITIAL CONTEXT SETUP REQUEST, a UE CONTEXT RELEASE COMMAND): so a
//! procedure running there at the kill completes, and none is lost. At
//! most [`UNHANDLED_MAX`] are kept per host, the oldest forgotten first
//! (`frontend_unhandled_evicted`). A message the host handled just before
//! it died, before its [`Frame::Handled`] went, goes to the heir a second
//! time (the window is the write of one frame); so they go as
//! [`Frame::S1Again`], routed by [`Router::route_again`]: an INITIAL UE
//! MESSAGE naming no M-TMSI goes to the heir of the replica group the dead
//! host drew its UE's identifiers in (the same [`Mme::group_for`] here),
//! which drops it if it took the UE over with that S1 connection
//! (`host_initial_again_dropped`): handled again, it would start a second
//! context of the IMSI there, and the two would collide in the store. The
//! other messages of such a window meet the heir's procedure at the step
//! after them, which takes them as a repeat; `Decomposed::kill_after_uplink`
//! (crates/harness) sweeps a UE's life.
//!
//! Everything queued is bounded: a host that does not
//! read loses messages (counted: `frontend_host_queue_full`), a peer that
//! sends a bad frame is disconnected (counted: `frontend_bad_frame`), S11
//! that cannot be routed is dropped (`frontend_s11_*`).

use super::scaling::{self, Command, Launcher};
use super::wire::{buffered, read_frame, write_queued, Frame, ReadError, Refusal, Replicated};
use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_common::sctp_api::{AssocId, SctpCommand, SctpEvent, SctpHandle, PPID_S1AP};
use mobicore_common::Groups;
use mobicore_elastic::balancer::RouteError;
use mobicore_elastic::controller::{Decision, EpsController};
use mobicore_elastic::procedure::ProcedureKind;
use mobicore_elastic::router::{replica_group, Dest, Handover, Lend, Router, S11From, S11Header, S11Route, UeName};
use mobicore_elastic::HostId;
use mobicore_gtp::message::{msg_type, Echo, GtpMessage, Message};
use mobicore_mme::routing::{self, Uplink};
use mobicore_mme::{Mme, MmeAction, MmeConfig, MmeEvent};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};

/// Frames queued towards one host at most.
pub const HOST_QUEUE: usize = 4096;
/// How often hosts' load reports are checked for staleness
/// ([`Router::expire_reports`]).
const REPORT_CHECK: Duration = Duration::from_millis(100);
/// How long a new host connection may take to say which host it is.
const HELLO_WITHIN: Duration = Duration::from_secs(5);
/// Messages held for draining hosts at most (beyond: dropped, counted;
/// the UE repeats its request on its own timer).
const HOLD_MAX: usize = 4096;
/// How often the EPS controller samples the hosts.
const CONTROL_EVERY: Duration = Duration::from_millis(500);

/// How the front end scales its hosts.
pub struct Scaling {
    /// Starts host processes (`--` arguments of `mme-frontend`), if given.
    pub launcher: Option<Launcher>,
    /// Decides on the hosts' load reports (`--autoscale`), if given.
    pub controller: Option<EpsController>,
    /// The operator's requests (`--admin`).
    pub requests: Option<mpsc::Receiver<scaling::Request>>,
    /// How long a draining host may take to finish what runs.
    pub drain_within: Duration,
}

impl Scaling {
    /// No scaling: hosts come and go by themselves.
    pub fn none() -> Scaling {
        Scaling { launcher: None, controller: None, requests: None, drain_within: Duration::from_secs(3) }
    }
}

/// Where a connected host is in a drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drain {
    No,
    /// Since when.
    Draining(Instant),
    /// Gone for the router; told to stop, its connection not closed yet.
    Done,
}

/// What the connections of hosts tell the front end's loop.
enum HostEvent {
    /// `local`: its store is its own (`--store local`).
    Up {
        host: HostId,
        conn: u64,
        tx: mpsc::Sender<Frame>,
        local: bool,
    },
    Frame {
        host: HostId,
        conn: u64,
        frame: Frame,
    },
    Down {
        host: HostId,
        conn: u64,
    },
}

/// An eNB as the front end keeps it, to give it to hosts that come later.
struct Enb {
    peer: IpAddr,
    outbound_streams: u16,
    /// Its last S1 Setup Request (or eNB Configuration Update), replayed.
    wide: Vec<Bytes>,
}

/// The front end's S11: its socket (the MME's S11 address) and the S-GW's.
pub struct S11Front {
    pub socket: UdpSocket,
    pub sgw: SocketAddr,
}

/// A connected host.
struct Host {
    conn: u64,
    tx: mpsc::Sender<Frame>,
    /// Whether it has sent a load report (printed once).
    reporting: bool,
    drain: Drain,
    /// [`Frame::S1`]s sent to it so far.
    s1_sent: u64,
    /// The UE-associated ones it has not said it handled
    /// ([`Frame::Handled`]), by their number among those: routed again
    /// if it dies (see "Messages in flight to a host that dies"), at most
    /// [`UNHANDLED_MAX`].
    unhandled: VecDeque<(u64, u64, u16, Bytes)>,
}

/// Messages kept per host until it has handled them, at most: beyond
/// hosts' group commits in flight at any rate measured; the oldest is
/// forgotten first (`frontend_unhandled_evicted`).
const UNHANDLED_MAX: usize = 8192;

/// Run the front end until `shutdown`.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    core_cfg: MmeConfig,
    router: Router,
    sctp: SctpHandle,
    hosts: super::link::LinkListener,
    s11: S11Front,
    scaling: Scaling,
    counters: Counters,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let SctpHandle { commands, mut events, .. } = sctp;
    let S11Front { socket: s11, sgw } = s11;
    let Scaling { launcher, controller, requests, drain_within } = scaling;
    let mut requests = requests.unwrap_or_else(|| mpsc::channel(1).1);
    let mut fe = State::new(Mme::new(core_cfg), router, sgw, counters);
    fe.launcher = launcher;
    fe.controller = controller;
    fe.drain_within = drain_within;
    let mut control = tokio::time::interval(CONTROL_EVERY);
    // S11 relayed in batches: every datagram ready at a wake read with one
    // system call, what they lead to sent with one.
    let mut s11_in = mobicore_common::mmsg::RecvBatch::new();
    let mut s11_out: Vec<(SocketAddr, Bytes)> = Vec::new();
    let (host_tx, mut host_rx) = mpsc::channel::<HostEvent>(HOST_QUEUE);
    let mut next_conn = 0u64;
    let mut expiry = tokio::time::interval(REPORT_CHECK);
    loop {
        tokio::select! {
            biased;
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return Ok(());
                }
            }
            accepted = hosts.accept() => {
                match accepted {
                    Ok(link) => {
                        next_conn += 1;
                        tokio::spawn(host_connection(link, next_conn, host_tx.clone(), fe.counters.clone()));
                    }
                    Err(_) => fe.counters.incr("frontend_accept_error"),
                }
            }
            ev = events.recv() => {
                let Some(ev) = ev else { anyhow::bail!("the SCTP endpoint task has stopped") };
                fe.on_sctp(ev);
            }
            Some(ev) = host_rx.recv() => {
                fe.on_host(ev);
                // And those already queued, a bounded number: the S11
                // messages among them go to the S-GW in one system call.
                for _ in 1..mobicore_common::mmsg::BATCH {
                    let Ok(ev) = host_rx.try_recv() else { break };
                    fe.on_host(ev);
                }
            }
            _ = expiry.tick() => {
                for h in fe.router.expire_reports(Instant::now()) {
                    fe.counters.incr("frontend_load_report_stale");
                    println!("mme-frontend: {h} load reports stopped (not viable until it reports)");
                }
                fe.drain_deadlines(Instant::now());
            }
            _ = control.tick() => fe.control(Instant::now()),
            Some(r) = requests.recv() => {
                let answer = fe.command(Instant::now(), r.command);
                let _ = r.reply.send(answer);
            }
            r = s11.readable() => {
                r?;
                match s11_in.recv(&s11) {
                    Ok(_) => {
                        let now = Instant::now();
                        for (from, b) in s11_in.iter() {
                            fe.on_s11_datagram(now, b, from);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => tracing::debug!("front end S11 recv: {e}"),
                }
            }
        }
        if !fe.to_sgw.is_empty() {
            s11_out.extend(fe.to_sgw.drain(..).map(|b| (fe.sgw, b)));
            let failed = mobicore_common::mmsg::send_all(&s11, &s11_out).await;
            fe.counters.add("frontend_s11_send_error", failed as u64);
            s11_out.clear();
        }
        while let Some(action) = fe.core.poll_action() {
            let cmd = match action {
                MmeAction::S1Send { assoc, stream, data } => SctpCommand::Send { assoc, stream, ppid: PPID_S1AP, data },
                MmeAction::S1Abort { assoc } => SctpCommand::Abort { assoc },
                _ => {
                    fe.counters.incr("frontend_unexpected_core_action");
                    continue;
                }
            };
            if commands.send(cmd).await.is_err() {
                anyhow::bail!("the SCTP endpoint task has stopped");
            }
        }
        for (assoc, stream, data) in fe.downlink.drain(..) {
            let cmd = SctpCommand::Send { assoc: AssocId(assoc), stream, ppid: PPID_S1AP, data };
            if commands.send(cmd).await.is_err() {
                anyhow::bail!("the SCTP endpoint task has stopped");
            }
        }
    }
}

struct State {
    core: Mme,
    router: Router,
    enbs: BTreeMap<u64, Enb>,
    hosts: HashMap<HostId, Host>,
    sgw: SocketAddr,
    /// S11 messages for the S-GW, sent after the event.
    to_sgw: Vec<Bytes>,
    /// Hosts' downlink S1AP for the eNBs, sent after the event.
    downlink: Vec<(u64, u16, Bytes)>,
    /// Uplink held for draining hosts: (host, UE, assoc, stream, PDU).
    held: VecDeque<(HostId, UeName, u64, u16, Bytes)>,
    /// Every host number that has been up or was started here: a new
    /// host gets none of them (UEs may carry them).
    numbers: BTreeSet<HostId>,
    /// Whether the hosts' stores are their own (`--store local`) or one
    /// shared: the first host's, which every later one must match.
    local_stores: Option<bool>,
    launcher: Option<Launcher>,
    controller: Option<EpsController>,
    /// The balancer's violations the controller has been told of.
    violations: u64,
    drain_within: Duration,
    counters: Counters,
}

impl State {
    fn new(core: Mme, router: Router, sgw: SocketAddr, counters: Counters) -> State {
        State {
            core,
            router,
            enbs: BTreeMap::new(),
            hosts: HashMap::new(),
            sgw,
            to_sgw: Vec::new(),
            downlink: Vec::new(),
            held: VecDeque::new(),
            numbers: BTreeSet::new(),
            local_stores: None,
            launcher: None,
            controller: None,
            violations: 0,
            drain_within: Scaling::none().drain_within,
            counters,
        }
    }

    fn on_sctp(&mut self, ev: SctpEvent) {
        let now = Instant::now();
        match ev {
            SctpEvent::Up { assoc, peer, outbound_streams, .. } => {
                self.core.handle(now, MmeEvent::S1Up { assoc, peer: peer.ip(), outbound_streams });
                self.enbs.insert(assoc.0, Enb { peer: peer.ip(), outbound_streams, wide: Vec::new() });
                self.broadcast(Frame::EnbUp { assoc: assoc.0, peer: peer.ip(), outbound_streams });
            }
            SctpEvent::Down { assoc, .. } => {
                self.core.handle(now, MmeEvent::S1Down { assoc });
                if self.enbs.remove(&assoc.0).is_some() {
                    self.broadcast(Frame::EnbDown { assoc: assoc.0 });
                }
            }
            SctpEvent::Data { assoc, stream, ppid, data } => {
                if ppid != PPID_S1AP && ppid != 0 {
                    self.counters.incr("sctp_wrong_ppid");
                    return;
                }
                match routing::uplink_and_start(assoc.0, &data) {
                    (Uplink::EnbWide, _) => {
                        self.core.handle(now, MmeEvent::S1Data { assoc, stream, data: data.clone() });
                        // Only what the front end took (an eNB it has set up) goes on.
                        let Some(enb) = self.enbs.get_mut(&assoc.0) else { return };
                        if enb.wide.len() >= 8 {
                            enb.wide.remove(0);
                        }
                        enb.wide.push(data.clone());
                        self.broadcast(Frame::S1 { assoc: assoc.0, stream, data });
                    }
                    (Uplink::NonUe | Uplink::Malformed, _) => {
                        self.core.handle(now, MmeEvent::S1Data { assoc, stream, data });
                    }
                    (Uplink::Ue(name), starts) => self.uplink(name, starts, assoc.0, stream, data),
                }
            }
        }
    }

    /// A UE-associated uplink message to its host, or held for it;
    /// `starts`: the procedure it starts ([`routing::starts`]).
    fn uplink(&mut self, name: UeName, starts: Option<ProcedureKind>, assoc: u64, stream: u16, data: Bytes) {
        // The procedure an INITIAL UE MESSAGE starts, by its NAS, when it
        // may be placed (the balancer's Eq. 1 is per procedure class).
        let kind = match name {
            UeName::Initial { m_tmsi: Some(_), .. } if self.router.places_procedures() => starts,
            _ => None,
        };
        let dest = self.router.route_as(name, kind);
        tracing::debug!(?name, ?kind, ?dest, "uplink routed");
        self.send_to(dest, name, assoc, stream, data);
    }

    /// A UE-associated uplink that host `gone` took before it went and had
    /// not handled: to the host serving its UE now ([`Router::route_again`],
    /// an INITIAL UE MESSAGE naming no M-TMSI by the replica group the dead
    /// host drew its identifiers in, as this MME core computes it too), as
    /// [`Frame::S1Again`].
    fn uplink_again(&mut self, gone: HostId, name: UeName, assoc: u64, stream: u16, data: Bytes) {
        let group = self.core.group_for(None, Some(&data));
        match self.router.route_again(gone, name, group) {
            Ok(Dest::Host(host)) => self.send_uplink(host, assoc, stream, data, true),
            dest => self.send_to(dest, name, assoc, stream, data),
        }
    }

    /// A visitor's first message given back ([`Router::bounced`]): to the
    /// UE's owner's host, not placed again.
    fn uplink_home(&mut self, name: UeName, assoc: u64, stream: u16, data: Bytes) {
        let dest = self.router.route_home(name);
        self.send_to(dest, name, assoc, stream, data);
    }

    fn send_to(&mut self, dest: Result<Dest, RouteError>, name: UeName, assoc: u64, stream: u16, data: Bytes) {
        self.lend();
        match dest {
            Ok(Dest::Host(host)) => self.send_uplink(host, assoc, stream, data, false),
            Ok(Dest::Hold(host)) if self.held.len() < HOLD_MAX => {
                self.held.push_back((host, name, assoc, stream, data))
            }
            Ok(Dest::Hold(_)) => self.counters.incr("frontend_hold_full"),
            Err(_) => self.counters.incr("frontend_no_host"),
        }
    }

    /// What was held for `host` (gone for the router now) is routed
    /// again; how many.
    fn release_held(&mut self, host: HostId) -> usize {
        let (mine, others): (VecDeque<_>, VecDeque<_>) = self.held.drain(..).partition(|h| h.0 == host);
        self.held = others;
        let n = mine.len();
        for (_, name, assoc, stream, data) in mine {
            self.counters.incr("frontend_held_released");
            let starts = if self.router.places_procedures() { routing::starts(&data) } else { None };
            self.uplink(name, starts, assoc, stream, data);
        }
        n
    }

    /// Start draining `host` (see the module doc).
    fn drain(&mut self, now: Instant, host: HostId) -> Result<(), &'static str> {
        let h = self.hosts.get_mut(&host).ok_or("no such host")?;
        if h.drain != Drain::No {
            return Err("already draining");
        }
        if !self.router.drain(host) {
            return Err("the only host taking new UEs");
        }
        h.drain = Drain::Draining(now);
        if h.tx.try_send(Frame::Drain).is_err() {
            self.counters.incr("frontend_host_queue_full");
        }
        // Out of the heirs' ring: who replicates to whom may change.
        self.tell_replicas();
        if let Some(c) = &mut self.controller {
            c.draining(host);
        }
        self.counters.incr("frontend_host_draining");
        println!("mme-frontend: {host} draining");
        Ok(())
    }

    /// `host` is drained (or `forced`, its time up): gone for the router,
    /// what was held for it goes to its heir, and it is told to stop.
    fn drained(&mut self, host: HostId, forced: bool) {
        let Some(h) = self.hosts.get_mut(&host).filter(|h| matches!(h.drain, Drain::Draining(_))) else { return };
        h.drain = Drain::Done;
        // Handled, all of it: what comes after, it gives back.
        h.unhandled.clear();
        let _ = h.tx.try_send(Frame::Stop);
        let moved = self.router.host_down(host);
        if let Some(c) = &mut self.controller {
            c.host_down(host);
        }
        if let Some(l) = &mut self.launcher {
            l.stopping(host);
        }
        self.handed_on(&moved);
        self.refresh();
        let held = self.release_held(host);
        self.counters.incr(if forced { "frontend_drain_forced" } else { "frontend_host_drained" });
        let how = if forced { "drain forced (time up)" } else { "drained" };
        println!("mme-frontend: {host} {how} ({}, {held} held)", self.heirs_text(host));
    }

    /// Draining hosts whose time is up are stopped as they stand.
    fn drain_deadlines(&mut self, now: Instant) {
        let late: Vec<HostId> = self
            .hosts
            .iter()
            .filter(|(_, h)| matches!(h.drain, Drain::Draining(at) if now.saturating_duration_since(at) > self.drain_within))
            .map(|(&id, _)| id)
            .collect();
        for host in late {
            self.drained(host, true);
        }
    }

    /// The lowest host number never used here (a host started by hand may
    /// have taken any).
    fn next_number(&self) -> Option<HostId> {
        (1..=254).map(HostId).find(|h| !self.numbers.contains(h))
    }

    /// Start a host with a number never used here.
    fn start_host(&mut self) -> Result<(HostId, u32), String> {
        let id = self.next_number().ok_or("no host number left (1..=254, never reused)")?;
        let Some(launcher) = &mut self.launcher else {
            return Err("no host command: give mme-host's arguments after --".into());
        };
        let pid = launcher.start(id).map_err(|e| format!("starting mme-host: {e}"))?;
        self.numbers.insert(id);
        self.counters.incr("frontend_host_started");
        println!("mme-frontend: starting {id} (pid {pid})");
        Ok((id, pid))
    }

    /// The EPS controller's turn: what it decides is done.
    fn control(&mut self, now: Instant) {
        let Some(c) = &mut self.controller else { return };
        let v = self.router.violations();
        c.violations(v.saturating_sub(self.violations));
        self.violations = v;
        match c.poll(now) {
            Some(Decision::StartHost) => {
                println!("mme-frontend: controller: start a host");
                if let Err(e) = self.start_host() {
                    println!("mme-frontend: controller: {e}");
                }
            }
            Some(Decision::Drain(host)) => {
                println!("mme-frontend: controller: drain {host}");
                if let Err(e) = self.drain(now, host) {
                    println!("mme-frontend: controller: {host}: {e}");
                }
            }
            None => {}
        }
    }

    /// An operator's request: an HTTP status and a JSON body.
    fn command(&mut self, now: Instant, command: Command) -> (u16, String) {
        match command {
            Command::Hosts => {
                let mut hosts: Vec<(HostId, &Host)> = self.hosts.iter().map(|(&id, h)| (id, h)).collect();
                hosts.sort_by_key(|(id, _)| *id);
                let list: Vec<serde_json::Value> = hosts
                    .iter()
                    .map(|(id, h)| {
                        let state = match h.drain {
                            Drain::No => "serving",
                            Drain::Draining(_) => "draining",
                            Drain::Done => "drained",
                        };
                        serde_json::json!({ "id": id.0, "state": state, "reporting": h.reporting })
                    })
                    .collect();
                (200, serde_json::json!({ "hosts": list }).to_string())
            }
            Command::StartHost => match self.start_host() {
                Ok((id, pid)) => (202, serde_json::json!({ "id": id.0, "pid": pid }).to_string()),
                Err(e) => (409, scaling::error(&e)),
            },
            Command::Drain(host) => match self.drain(now, host) {
                Ok(()) => (202, serde_json::json!({ "id": host.0, "state": "draining" }).to_string()),
                Err(e) => (409, scaling::error(e)),
            },
        }
    }

    fn on_host(&mut self, ev: HostEvent) {
        match ev {
            HostEvent::Up { host, conn, tx, local } => {
                // Two processes say they are the same host: the first stays.
                // A number of a host that went stays its heirs'. One kind
                // of store for all (an heir must hold what it inherits).
                let refused = if self.hosts.contains_key(&host) {
                    Some((Refusal::InUse, "frontend_host_duplicate"))
                } else if self.router.is_gone(host) {
                    Some((Refusal::Gone, "frontend_host_gone_refused"))
                } else if self.local_stores.is_some_and(|l| l != local) {
                    Some((Refusal::OtherStore, "frontend_host_store_mismatch"))
                } else {
                    None
                };
                if let Some((why, counter)) = refused {
                    self.counters.incr(counter);
                    tracing::warn!(%host, "refused: {why}");
                    // Sent before the link closes (`tx` dropped here).
                    let _ = tx.try_send(Frame::Refused { why });
                    return;
                }
                // Placement follows the first host's store.
                if self.local_stores.is_none() {
                    self.local_stores = Some(local);
                    if local {
                        self.router.local_stores();
                    }
                }
                if self.router.places_procedures() && tx.try_send(Frame::Track).is_err() {
                    self.counters.incr("frontend_host_queue_full");
                }
                // Every eNB first, so that the host can take any UE.
                let mut s1_sent = 0;
                for (&assoc, enb) in &self.enbs {
                    let up = Frame::EnbUp { assoc, peer: enb.peer, outbound_streams: enb.outbound_streams };
                    let wide = enb.wide.iter().map(|d| Frame::S1 { assoc, stream: 0, data: d.clone() });
                    for f in std::iter::once(up).chain(wide) {
                        let s1 = matches!(f, Frame::S1 { .. });
                        match tx.try_send(f) {
                            Ok(()) => s1_sent += u64::from(s1),
                            Err(_) => self.counters.incr("frontend_host_queue_full"),
                        }
                    }
                }
                let unhandled = VecDeque::new();
                self.hosts.insert(host, Host { conn, tx, reporting: false, drain: Drain::No, s1_sent, unhandled });
                self.numbers.insert(host);
                self.router.host_up(host);
                if let Some(c) = &mut self.controller {
                    c.host_up(host);
                }
                self.tell_replicas();
                self.counters.incr("frontend_host_up");
                println!("mme-frontend: {host} up");
            }
            HostEvent::Down { host, conn } => {
                if self.hosts.get(&host).is_some_and(|h| h.conn == conn) {
                    let unhandled = self.hosts.remove(&host).map(|h| h.unhandled).unwrap_or_default();
                    // A drained host was handed on when it said so.
                    let moved = self.router.host_down(host);
                    if let Some(c) = &mut self.controller {
                        c.host_down(host);
                    }
                    self.handed_on(&moved);
                    self.refresh();
                    // What it had not handled goes again, after the heir's
                    // Inherit; then, if it died draining, what was held for it.
                    let mut again = 0;
                    for (_, assoc, stream, data) in unhandled {
                        if let Uplink::Ue(name) = routing::uplink(assoc, &data) {
                            self.counters.incr("frontend_unhandled_routed_again");
                            self.uplink_again(host, name, assoc, stream, data);
                            again += 1;
                        }
                    }
                    self.release_held(host);
                    self.counters.incr("frontend_host_down");
                    println!("mme-frontend: {host} down ({})", self.heirs_text(host));
                    if again > 0 {
                        println!("mme-frontend: {again} messages {host} had not handled routed again");
                    }
                }
            }
            HostEvent::Frame { host, conn, frame } => {
                if self.hosts.get(&host).is_none_or(|h| h.conn != conn) {
                    return;
                }
                match frame {
                    Frame::S1 { assoc, stream, data } => {
                        if !self.enbs.contains_key(&assoc) {
                            self.counters.incr("frontend_downlink_unknown_enb");
                        } else if routing::is_enb_wide_answer(&data) {
                            self.counters.incr("frontend_host_wide_answer_dropped");
                        } else {
                            self.downlink.push((assoc, stream, data));
                        }
                    }
                    Frame::S11 { data } => self.on_s11(Instant::now(), data, S11From::Host(host)),
                    Frame::Load { cpu_e4, nfs } => {
                        self.counters.incr("frontend_load_report");
                        if self.hosts.get_mut(&host).is_some_and(|h| !std::mem::replace(&mut h.reporting, true)) {
                            println!("mme-frontend: {host} reports load");
                        }
                        let report = super::load::from_frame(cpu_e4, &nfs);
                        if let Some(c) = &mut self.controller {
                            c.report(host, report.clone());
                        }
                        self.router.report(Instant::now(), host, report);
                    }
                    Frame::Drained => self.drained(host, false),
                    Frame::Handled { upto } => {
                        if let Some(h) = self.hosts.get_mut(&host) {
                            while h.unhandled.front().is_some_and(|f| f.0 <= upto) {
                                h.unhandled.pop_front();
                            }
                        }
                    }
                    Frame::Replica { peer, msg } => self.relay_replica(host, HostId(u32::from(peer)), msg),
                    Frame::Holding { id, m_tmsi } => {
                        tracing::debug!(%host, id, ?m_tmsi, "holding");
                        match self.router.holding(host, id, m_tmsi) {
                            true => self.counters.incr("frontend_hold_tracked"),
                            false => self.counters.incr("frontend_hold_untracked"),
                        }
                    }
                    Frame::Released { id } => {
                        self.counters.incr("frontend_hold_released");
                        let owner = self.router.released(host, id);
                        tracing::debug!(%host, id, ?owner, "released");
                        if let Some(owner) = owner {
                            self.counters.incr("frontend_refresh");
                            self.send(owner, Frame::Refresh { id, resume: false });
                        }
                    }
                    // Sent to a host that was drained meanwhile, or placed at
                    // one whose copy lacks the UE: routed again.
                    Frame::Bounce { assoc, stream, data } => match routing::uplink_and_start(assoc, &data) {
                        (Uplink::Ue(name), starts) if self.hosts.get(&host).is_some_and(|h| h.drain == Drain::Done) => {
                            self.counters.incr("frontend_bounced");
                            self.uplink(name, starts, assoc, stream, data);
                        }
                        (Uplink::Ue(name @ UeName::Initial { m_tmsi: Some(m), .. }), _)
                            if self.router.bounced(host, m) =>
                        {
                            self.counters.incr("frontend_placement_bounced");
                            self.uplink_home(name, assoc, stream, data);
                        }
                        // Over a shared store: the host's claim of the UE's
                        // record lost to another host's write; the host
                        // holding the UE (or its owner's) takes it.
                        (Uplink::Ue(name @ UeName::Initial { m_tmsi: Some(_), .. }), _)
                            if !self.router.has_local_stores() =>
                        {
                            self.counters.incr("frontend_claim_bounced");
                            self.uplink_home(name, assoc, stream, data);
                        }
                        _ => self.counters.incr("frontend_bad_host_frame"),
                    },
                    // A visitor's record, to the host serving its identifiers.
                    Frame::WriteBack { id, writes } if self.router.has_local_stores() => {
                        match self.router.serving_id(id) {
                            Some(to) => {
                                self.counters.incr("frontend_write_back");
                                // Its copies first: before any procedure placed after.
                                // The visitor too, whose own values they were.
                                let owner = to.0 as u8;
                                let mut copies = self.router.replica_hosts_of(to, replica_group(id));
                                if !copies.contains(&host) && host != to {
                                    copies.push(host);
                                }
                                for r in copies {
                                    self.send(r, Frame::Copied { owner, writes: writes.clone() });
                                }
                                self.send(to, Frame::WriteBack { id, writes });
                            }
                            None => self.counters.incr("frontend_write_back_no_host"),
                        }
                    }
                    _ => self.counters.incr("frontend_bad_host_frame"),
                }
            }
        }
    }

    /// Hosts are gone for the router (from [`Router::host_down`]: the
    /// host that went, then those whose heir it was, group by group): each
    /// heir inherits its groups of the first (their records, from the
    /// copy replicated to it, which holds the others' UEs it had taken)
    /// and adopts its groups of the others (their UEs loaded from the
    /// store), before anything of their UEs reaches it, their UEs other
    /// hosts hold left out (Away); and the hosts whose replica hosts
    /// changed are told.
    fn handed_on(&mut self, handovers: &[Handover]) {
        for h in handovers {
            for id in self.router.held_away(h.gone, h.groups) {
                self.send(h.heir, Frame::Away { id });
            }
            for m_tmsi in self.router.placed_away(h.gone, h.groups) {
                self.send(h.heir, Frame::AwayPlaced { m_tmsi });
            }
            let (host, groups) = (h.gone.0 as u8, h.groups);
            self.send(h.heir, if h.inherit { Frame::Inherit { host, groups } } else { Frame::Adopt { host, groups } });
        }
        self.tell_replicas();
    }

    /// Who serves gone host `gone`'s UEs now, for a line of output: "heir
    /// hostH" (one host), "heirs hostH N groups, hostK M groups", or "heir
    /// none".
    fn heirs_text(&self, gone: HostId) -> String {
        let heirs = self.router.heirs_of(gone, Groups::ALL);
        match heirs.as_slice() {
            [] => "heir none".to_string(),
            [(h, _)] => format!("heir {h}"),
            _ => {
                let each: Vec<String> = heirs.iter().map(|(h, g)| format!("{h} {} groups", g.len())).collect();
                format!("heirs {}", each.join(", "))
            }
        }
    }

    /// The owners' hosts of the UEs whose holding host went read them
    /// again (queued after their Inherit or Adopt).
    fn refresh(&mut self) {
        for (owner, id) in self.router.take_refreshes() {
            self.counters.incr("frontend_refresh_host_gone");
            self.send(owner, Frame::Refresh { id, resume: true });
        }
        self.lend();
    }

    /// The owners' hosts of UEs placed away, or whose placement ended
    /// with no holder, are told.
    fn lend(&mut self) {
        for (owner, lend) in self.router.take_lends() {
            let frame = match lend {
                Lend::Lent(m_tmsi) => {
                    self.counters.incr("frontend_lent");
                    Frame::Lent { m_tmsi }
                }
                Lend::Returned(m_tmsi) => {
                    self.counters.incr("frontend_placement_returned");
                    Frame::Returned { m_tmsi }
                }
            };
            self.send(owner, frame);
        }
    }

    /// Tells each host whose replica hosts changed its new ones.
    fn tell_replicas(&mut self) {
        for (h, targets) in self.router.replica_changes() {
            let targets = targets.iter().map(|(t, groups)| (t.0 as u8, *groups)).collect();
            self.send(h, Frame::ReplicateTo { targets });
        }
    }

    /// A host's replicated records (or a replica's resync request) for
    /// host `to`: relayed, named by their sender. Lost if `to` is gone or
    /// its queue full (counted; the replica notices the gap by its
    /// sequence and asks for a full copy).
    fn relay_replica(&mut self, from: HostId, to: HostId, msg: Replicated) {
        let Some(h) = self.hosts.get(&to).filter(|_| to != from) else {
            self.counters.incr("frontend_replica_no_host");
            return;
        };
        match h.tx.try_send(Frame::Replica { peer: from.0 as u8, msg }) {
            Ok(()) => self.counters.incr("frontend_replica_relayed"),
            Err(_) => {
                self.counters.incr("frontend_host_queue_full");
                self.counters.incr("frontend_replica_dropped");
            }
        }
    }

    fn send(&mut self, host: HostId, frame: Frame) {
        let Some(h) = self.hosts.get_mut(&host) else {
            self.counters.incr("frontend_no_host");
            return;
        };
        let s1 = matches!(frame, Frame::S1 { .. } | Frame::S1Again { .. });
        if h.tx.try_send(frame).is_err() {
            self.counters.incr("frontend_host_queue_full");
            return;
        }
        h.s1_sent += u64::from(s1);
    }

    /// A UE-associated uplink message to `host`, kept until it says it
    /// handled it (a drained host gives back what it is sent instead).
    /// A host whose connection has closed, whose going is not handled
    /// yet, keeps it too: it goes to the heir with the rest.
    /// `again`: one a dead host had not handled ([`Frame::S1Again`]).
    fn send_uplink(&mut self, host: HostId, assoc: u64, stream: u16, data: Bytes, again: bool) {
        let Some(h) = self.hosts.get_mut(&host) else {
            self.counters.incr("frontend_no_host");
            return;
        };
        let frame = match again {
            true => Frame::S1Again { assoc, stream, data: data.clone() },
            false => Frame::S1 { assoc, stream, data: data.clone() },
        };
        match h.tx.try_send(frame) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.counters.incr("frontend_host_queue_full");
                return;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => self.counters.incr("frontend_host_closing"),
        }
        h.s1_sent += 1;
        if h.drain == Drain::Done {
            return;
        }
        if h.unhandled.len() >= UNHANDLED_MAX {
            h.unhandled.pop_front();
            self.counters.incr("frontend_unhandled_evicted");
        }
        h.unhandled.push_back((h.s1_sent, assoc, stream, data));
    }

    /// A datagram on the S11 socket: only the S-GW's are heard.
    fn on_s11_datagram(&mut self, now: Instant, b: &[u8], from: SocketAddr) {
        match from == self.sgw {
            true => self.on_s11(now, Bytes::copy_from_slice(b), S11From::Sgw),
            false => self.counters.incr("frontend_s11_unknown_peer"),
        }
    }

    /// An S11 message from the S-GW or a host: relayed to where it goes
    /// (the S-GW's to a host over its link, a host's to the S-GW from the
    /// S11 socket), answered (an Echo Request of the S-GW), or dropped.
    fn on_s11(&mut self, now: Instant, data: Bytes, source: S11From) {
        let header = match read_s11(&data) {
            S11Read::Message(h) => h,
            S11Read::EchoRequest { seq } if source == S11From::Sgw => {
                // TS 29.274 7.1.2: answered with our Recovery (no restarts counted).
                let echo = GtpMessage { teid: None, seq, body: Message::EchoResponse(Echo { recovery: 0 }) };
                return self.to_sgw.push(echo.to_bytes().into());
            }
            S11Read::EchoRequest { .. } | S11Read::EchoResponse => return,
            S11Read::Malformed => return self.counters.incr("frontend_s11_malformed"),
        };
        let (to, data) = match self.router.route_s11(now, source, header) {
            Ok(S11Route::Sgw) => (None, data),
            Ok(S11Route::SgwAs(seq)) => (None, renumbered(&data, seq)),
            Ok(S11Route::Host(h)) => (Some(h), data),
            Ok(S11Route::HostAs(h, seq)) => (Some(h), renumbered(&data, seq)),
            Err(e) => {
                self.counters.incr(e.counter());
                return tracing::debug!(?source, "S11 dropped: {e}");
            }
        };
        match to {
            None => self.to_sgw.push(data),
            Some(h) if self.hosts.contains_key(&h) => self.send(h, Frame::S11 { data }),
            Some(_) => self.counters.incr("frontend_s11_no_host"),
        }
    }

    fn broadcast(&mut self, frame: Frame) {
        let hosts: Vec<HostId> = self.hosts.keys().copied().collect();
        for h in hosts {
            self.send(h, frame.clone());
        }
    }
}

/// The message with sequence number `seq` (TS 29.274 5.5.1; its header
/// read already), the rest as it was.
fn renumbered(data: &[u8], seq: u32) -> Bytes {
    let mut b = data.to_vec();
    if let Ok(mut p) = mobicore_gtp::wire::Packet::new_checked(&mut b[..]) {
        p.set_seq(seq);
    }
    b.into()
}

/// What the front end reads of an S11 datagram.
enum S11Read {
    Message(S11Header),
    EchoRequest { seq: u32 },
    EchoResponse,
    Malformed,
}

/// The GTPv2-C header of `bytes` (TS 29.274 5.1, 5.5.1); a response is
/// the response type of a request type we know, anything else goes as a
/// request (the host's S11 client answers what it does not know).
fn read_s11(bytes: &[u8]) -> S11Read {
    let Ok(p) = mobicore_gtp::wire::Packet::new_checked(bytes) else { return S11Read::Malformed };
    let t = p.msg_type();
    match t {
        msg_type::ECHO_REQUEST => S11Read::EchoRequest { seq: p.seq() },
        msg_type::ECHO_RESPONSE => S11Read::EchoResponse,
        _ => {
            let response = t > 0 && msg_type::is_request(t - 1);
            S11Read::Message(S11Header { initial: !response, teid: p.teid(), seq: p.seq() })
        }
    }
}

/// One host's connection: its Hello, then its frames to the loop; the
/// loop's frames to it through a bounded queue.
async fn host_connection(link: super::link::Link, conn: u64, events: mpsc::Sender<HostEvent>, counters: Counters) {
    let super::link::Link { rd, mut wr } = link;
    let mut rd = buffered(rd);
    let (host, local) = match tokio::time::timeout(HELLO_WITHIN, read_frame(&mut rd)).await {
        Ok(Ok(Some(Frame::Hello { host, local }))) if (1..=254).contains(&host) => (HostId(u32::from(host)), local),
        _ => {
            counters.incr("frontend_bad_frame");
            return;
        }
    };
    let (tx, mut rx) = mpsc::channel::<Frame>(HOST_QUEUE);
    if events.send(HostEvent::Up { host, conn, tx, local }).await.is_err() {
        return;
    }
    let writer = tokio::spawn(async move { write_queued(&mut wr, &mut rx).await });
    loop {
        match read_frame(&mut rd).await {
            Ok(Some(frame)) => {
                if events.send(HostEvent::Frame { host, conn, frame }).await.is_err() {
                    break;
                }
            }
            Ok(None) => break,
            // Reset: the host is gone (killed, crashed), nothing it sent was wrong.
            Err(ReadError::Io(e)) => {
                tracing::info!(%host, "host connection: {e}");
                break;
            }
            Err(e) => {
                counters.incr("frontend_bad_frame");
                tracing::warn!(%host, "host connection: {e}");
                break;
            }
        }
    }
    writer.abort();
    let _ = events.send(HostEvent::Down { host, conn }).await;
}

#[cfg(test)]
mod tests {
    use super::super::samples::release_request;
    use super::*;

    /// An eNB's uplink message on association 1, stream 1, as `on_sctp` gives it.
    fn up(st: &mut State, name: UeName, data: Bytes) {
        let starts = routing::starts(&data);
        st.uplink(name, starts, 1, 1, data);
    }
    use mobicore_common::s11::{DownlinkDataNotification, DownlinkDataNotificationAck, GtpCause};
    use mobicore_common::s11::{S11IncomingAnswer, S11IncomingRequest};
    use mobicore_common::{Ebi, Teid};
    use mobicore_elastic::balancer::{Estimation, Loads};
    use mobicore_elastic::{Frontend, Profiles, Scheme};
    use mobicore_gtp::s11::{encode_incoming_answer, encode_incoming_request, modify_bearer_response};

    const SGW: &str = "127.0.0.1:2123";

    /// A front end with hosts 1..=3 connected (their frames dropped).
    fn state() -> State {
        hosts_on(0).0
    }

    /// A front end with hosts 1..=3 connected, host h on connection
    /// `conn_base` + h, and what each is sent.
    fn hosts_on(conn_base: u64) -> (State, HashMap<u32, mpsc::Receiver<Frame>>) {
        let fe = Frontend::new(
            Scheme::ConsistentHashing.balancer(2),
            Loads::new(Profiles::default(), Estimation::default()),
            64,
        );
        let mut st = State::new(Mme::new(MmeConfig::default()), Router::new(fe), SGW.parse().unwrap(), Counters::new());
        let mut queues = HashMap::new();
        for h in 1..=3 {
            let (tx, rx) = mpsc::channel(64);
            st.on_host(HostEvent::Up { host: HostId(h), conn: conn_base + u64::from(h), tx, local: false });
            queues.insert(h, rx);
        }
        (st, queues)
    }

    fn ddn(mme_teid: u32, seq: u32) -> Vec<u8> {
        let r = DownlinkDataNotification { mme_teid: Teid(mme_teid), ebi: Some(Ebi(5)), arp: None };
        encode_incoming_request(&S11IncomingRequest::DownlinkDataNotification(r), None, seq).to_bytes()
    }

    fn ack(seq: u32) -> Vec<u8> {
        let a = DownlinkDataNotificationAck {
            cause: GtpCause::REQUEST_ACCEPTED,
            data_notification_delay_ms: None,
            dl_buffering_duration_s: None,
            dl_buffering_suggested_packets: None,
            throttling: None,
        };
        encode_incoming_answer(&S11IncomingAnswer::DownlinkDataNotificationAck(a), 0, seq).to_bytes()
    }

    #[test]
    fn headers_are_read_as_requests_responses_or_echo() {
        let S11Read::Message(h) = read_s11(&ddn(0x0200_0001, 7)) else { panic!() };
        assert_eq!(h, S11Header { initial: true, teid: Some(0x0200_0001), seq: 7 });
        let S11Read::Message(h) = read_s11(&ack(7)) else { panic!() };
        assert!(!h.initial);
        let mbr = modify_bearer_response(0x0300_0001, 0x03_0009, GtpCause::REQUEST_ACCEPTED, Ebi(5), None);
        let S11Read::Message(h) = read_s11(&mbr.to_bytes()) else { panic!() };
        assert_eq!(h, S11Header { initial: false, teid: Some(0x0300_0001), seq: 0x03_0009 });
        let echo = GtpMessage { teid: None, seq: 5, body: Message::EchoRequest(Echo { recovery: 1 }) };
        assert!(matches!(read_s11(&echo.to_bytes()), S11Read::EchoRequest { seq: 5 }));
        for bad in [&[][..], &[0x48, 176, 0, 1][..], &[0x28, 176, 0, 4, 0, 0, 0, 0][..]] {
            assert!(matches!(read_s11(bad), S11Read::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn a_ddn_goes_to_the_ues_host_or_heir_and_its_ack_back_to_the_sgw() {
        let (mut st, mut q) = state_with_queues();
        let (sgw, now) = (st.sgw, Instant::now());
        let s11 = |b: Vec<u8>| Frame::S11 { data: b.into() };
        let from_host = |st: &mut State, h: u32, frame| {
            st.on_host(HostEvent::Frame { host: HostId(h), conn: 10 + u64::from(h), frame })
        };
        q.values_mut().for_each(|r| drop(sent_all(r)));
        // Over the host's link, and its answer to the S-GW from the S11 socket.
        st.on_s11_datagram(now, &ddn(0x0200_0001, 7), sgw);
        assert_eq!(sent_all(q.get_mut(&2).unwrap()), [s11(ddn(0x0200_0001, 7))]);
        from_host(&mut st, 2, s11(ack(7)));
        assert_eq!(std::mem::take(&mut st.to_sgw), [Bytes::from(ack(7))]);

        // Host 2 gone: its UE's DDN goes to the heir, and only the heir's ack back.
        st.on_host(HostEvent::Down { host: HostId(2), conn: 12 });
        let heir = st.router.heir(HostId(2), 0).unwrap();
        q.values_mut().for_each(|r| drop(sent_all(r)));
        st.on_s11_datagram(now, &ddn(0x0200_0001, 8), sgw);
        assert_eq!(sent_all(q.get_mut(&heir.0).unwrap()), [s11(ddn(0x0200_0001, 8))]);
        from_host(&mut st, 2, s11(ack(8)));
        assert!(st.to_sgw.is_empty(), "not a host any more");
        from_host(&mut st, heir.0, s11(ack(8)));
        assert_eq!(std::mem::take(&mut st.to_sgw), [Bytes::from(ack(8))]);

        // Nobody else is heard on the socket; bad and unroutable input is counted.
        st.on_s11_datagram(now, &ddn(0x0100_0001, 9), "127.0.0.1:9".parse().unwrap());
        st.on_s11_datagram(now, &[1, 2, 3], sgw);
        from_host(&mut st, 1, Frame::S11 { data: Bytes::from_static(&[1, 2, 3]) });
        st.on_s11_datagram(now, &ddn(0, 10), sgw);
        assert!(st.to_sgw.is_empty() && (1..=3).all(|h| q.get_mut(&h).is_none_or(|r| sent_all(r).is_empty())));
        let counted = ["frontend_s11_unknown_peer", "frontend_s11_malformed", "frontend_s11_no_teid"];
        assert_eq!(counted.map(|n| st.counters.value(n)), [1, 2, 1]);
    }

    /// A front end with hosts 1..=3 connected, and what each is sent.
    fn state_with_queues() -> (State, HashMap<u32, mpsc::Receiver<Frame>>) {
        hosts_on(10)
    }

    #[test]
    fn a_started_host_takes_the_lowest_number_never_used() {
        let (mut st, _q) = state_with_queues();
        assert_eq!(st.next_number(), Some(HostId(4)));
        // One started by hand under 254, one gone: neither is taken again.
        let (tx, _rx) = mpsc::channel(64);
        st.on_host(HostEvent::Up { host: HostId(254), conn: 99, tx, local: false });
        st.on_host(HostEvent::Down { host: HostId(2), conn: 12 });
        assert_eq!(st.next_number(), Some(HostId(4)));
        st.numbers.extend((4..=253).map(HostId));
        assert_eq!(st.next_number(), None);
    }

    #[test]
    fn a_host_under_a_number_in_use_or_gone_or_of_another_store_is_refused_and_changes_nothing() {
        let (mut st, _q) = state_with_queues();
        st.on_host(HostEvent::Down { host: HostId(2), conn: 12 });
        let heir = st.router.serving_id(0x0200_0001);
        // Host 4's store is its own; the others share one.
        for (host, local, why) in
            [(1, false, Refusal::InUse), (2, false, Refusal::Gone), (4, true, Refusal::OtherStore)]
        {
            let (tx, mut rx) = mpsc::channel(64);
            st.on_host(HostEvent::Up { host: HostId(host), conn: 99, tx, local });
            // The one frame, then the link closes.
            assert_eq!(sent_all(&mut rx), vec![Frame::Refused { why }]);
            assert!(rx.is_closed());
            st.on_host(HostEvent::Down { host: HostId(host), conn: 99 });
        }
        assert!(st.router.is_live(HostId(1)) && !st.router.is_live(HostId(2)) && !st.router.is_live(HostId(4)));
        assert!(!st.router.has_local_stores());
        assert_eq!(st.router.serving_id(0x0200_0001), heir, "host 2's UEs stay with their heirs");
        assert!(st.hosts.contains_key(&HostId(1)) && !st.hosts.contains_key(&HostId(2)));
        assert_eq!(st.counters.value("frontend_host_duplicate"), 1);
        assert_eq!(st.counters.value("frontend_host_gone_refused"), 1);
        assert_eq!(st.counters.value("frontend_host_store_mismatch"), 1);
        // Host 4 sharing the store is welcome.
        let (tx, mut rx) = mpsc::channel(64);
        st.on_host(HostEvent::Up { host: HostId(4), conn: 100, tx, local: false });
        assert!(st.router.is_live(HostId(4)));
        assert!(!sent_all(&mut rx).iter().any(|f| matches!(f, Frame::Refused { .. })));
    }

    /// What was sent to a host, but the replication frames.
    fn sent(rx: &mut mpsc::Receiver<Frame>) -> Vec<Frame> {
        let replication = |f: &Frame| matches!(f, Frame::ReplicateTo { .. } | Frame::Inherit { .. });
        sent_all(rx).into_iter().filter(|f| !replication(f)).collect()
    }

    fn sent_all(rx: &mut mpsc::Receiver<Frame>) -> Vec<Frame> {
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }

    /// Host `h`'s replica host of replica group `g`, as it was told.
    fn target_of(told: &[(u8, Groups)], g: u8) -> u32 {
        told.iter().find(|(_, groups)| groups.contains(g)).map(|(t, _)| u32::from(*t)).expect("a target")
    }

    /// The groups host `t` takes of a host's, as it was told.
    fn groups_at(told: &[(u8, Groups)], t: u32) -> Groups {
        told.iter().find(|(h, _)| u32::from(*h) == t).map(|(_, g)| *g).unwrap_or_default()
    }

    #[test]
    fn hosts_replicate_each_group_to_its_heir_to_be_which_inherits_before_their_ues_come() {
        use mobicore_store::replica::ReplicaMsg;
        let (mut st, mut q) = state_with_queues();
        // Each host is told its replica hosts, each with its groups: for
        // each group, the heir it would have. Three hosts: both others.
        let mut told = HashMap::new();
        for h in 1..=3u32 {
            let f = sent_all(q.get_mut(&h).unwrap());
            let Some(Frame::ReplicateTo { targets }) =
                f.into_iter().rev().find(|f| matches!(f, Frame::ReplicateTo { .. }))
            else {
                panic!("host {h} told nothing")
            };
            let want: Vec<(u8, Groups)> =
                st.router.replica_hosts(HostId(h)).iter().map(|(t, g)| (t.0 as u8, *g)).collect();
            assert_eq!(targets, want);
            assert_eq!(targets.len(), 2, "host {h}: {targets:?}");
            told.insert(h, targets);
        }
        // Host 2's records go to its replica hosts, named as from host 2;
        // an answer goes back; a replica message for no host is dropped.
        // Every identifier below is of group 0.
        let batch: Replicated = ReplicaMsg::Batch { reset: true, seq: 0, ops: vec![] }.into();
        let to = target_of(&told[&2], 0);
        st.on_host(HostEvent::Frame {
            host: HostId(2),
            conn: 12,
            frame: Frame::Replica { peer: to as u8, msg: batch.clone() },
        });
        assert_eq!(sent_all(q.get_mut(&to).unwrap()), [Frame::Replica { peer: 2, msg: batch }]);
        let resync = Frame::Replica { peer: 2, msg: ReplicaMsg::Resync.into() };
        st.on_host(HostEvent::Frame { host: HostId(to), conn: 10 + u64::from(to), frame: resync });
        assert_eq!(
            sent_all(q.get_mut(&2).unwrap()),
            [Frame::Replica { peer: to as u8, msg: ReplicaMsg::Resync.into() }]
        );
        st.on_host(HostEvent::Frame {
            host: HostId(2),
            conn: 12,
            frame: Frame::Replica { peer: 9, msg: ReplicaMsg::Forget.into() },
        });
        assert_eq!(st.counters.value("frontend_replica_no_host"), 1);

        // Host 2 dies: each heir of its groups, the host it replicated
        // them to, inherits them first; then the UEs' messages come; the
        // hosts that replicated to 2 are told anew.
        st.on_host(HostEvent::Down { host: HostId(2), conn: 12 });
        assert_eq!(st.router.heir(HostId(2), 0), Some(HostId(to)));
        up(&mut st, UeName::MmeUeS1apId(0x0200_0001), Bytes::from_static(b"ics response"));
        let mut after: HashMap<u32, Vec<Frame>> =
            [1, 3].into_iter().map(|h| (h, sent_all(q.get_mut(&h).unwrap()))).collect();
        for h in [1, 3] {
            let groups = groups_at(&told[&2], h);
            assert!(after[&h].contains(&Frame::Inherit { host: 2, groups }), "host {h} inherits {groups:?}");
        }
        let f: Vec<Frame> = after[&to].iter().filter(|f| !matches!(f, Frame::ReplicateTo { .. })).cloned().collect();
        let inherit = f.iter().position(|f| matches!(f, Frame::Inherit { host: 2, .. })).expect("told to inherit");
        assert_eq!(f.iter().position(|f| *f == s1(b"ics response")), Some(f.len() - 1));
        assert!(inherit < f.len() - 1);
        for h in [1, 3] {
            let f = after.remove(&h).unwrap();
            let new = f.iter().find_map(|f| match f {
                Frame::ReplicateTo { targets } => Some(targets.clone()),
                _ => None,
            });
            assert!(!groups_at(&told[&h], 2).is_empty(), "host {h} replicated some groups to 2");
            assert_eq!(new, Some(vec![(if h == 1 { 3 } else { 1 }, Groups::ALL)]));
        }

        // That heir dies too: the last host inherits it, then adopts the
        // groups of host 2's UEs it had taken, before any of them comes.
        let last = if to == 1 { 3 } else { 1 };
        st.on_host(HostEvent::Down { host: HostId(to), conn: 10 + u64::from(to) });
        up(&mut st, UeName::MmeUeS1apId(0x0200_0001), Bytes::from_static(b"release request"));
        let f: Vec<Frame> = sent_all(q.get_mut(&last).unwrap())
            .into_iter()
            .filter(|f| !matches!(f, Frame::ReplicateTo { .. }))
            .collect();
        let expect = [
            Frame::Inherit { host: to as u8, groups: Groups::ALL },
            Frame::Adopt { host: 2, groups: groups_at(&told[&2], to) },
            s1(b"release request"),
        ];
        assert_eq!(f, expect);
    }

    #[test]
    fn what_a_host_that_dies_has_not_handled_goes_to_its_heir_after_its_inherit() {
        let (mut st, mut q) = state_with_queues();
        let msgs: Vec<Bytes> = (1..=3).map(|n| release_request(0x0200_0000 + n)).collect();
        for (n, m) in (1..=3).zip(&msgs) {
            up(&mut st, UeName::MmeUeS1apId(0x0200_0000 + n), m.clone());
        }
        let s1 = |data: &Bytes| Frame::S1 { assoc: 1, stream: 1, data: data.clone() };
        assert_eq!(sent(q.get_mut(&2).unwrap()), msgs.iter().map(s1).collect::<Vec<_>>());
        // Host 2 handled the first; it dies before it says so of the others.
        st.on_host(HostEvent::Frame { host: HostId(2), conn: 12, frame: Frame::Handled { upto: 1 } });
        let (heir, groups, f) = host_2_dies(&mut st, &mut q);
        let again = |data: &Bytes| Frame::S1Again { assoc: 1, stream: 1, data: data.clone() };
        assert_eq!(f, [Frame::Inherit { host: 2, groups }, again(&msgs[1]), again(&msgs[2])]);
        assert_eq!(st.counters.value("frontend_unhandled_routed_again"), 2);
        // The heir handles them: nothing goes again when it dies too.
        let conn = 10 + u64::from(heir);
        st.on_host(HostEvent::Frame { host: HostId(heir), conn, frame: Frame::Handled { upto: 2 } });
        st.on_host(HostEvent::Down { host: HostId(heir), conn: 10 + u64::from(heir) });
        assert_eq!(st.counters.value("frontend_unhandled_routed_again"), 2);
    }

    /// A message routed to a host whose connection has closed before the
    /// front end handled its going is not lost: it goes to the heir.
    #[test]
    fn a_message_for_a_host_whose_connection_closed_goes_to_its_heir() {
        let (mut st, mut q) = state_with_queues();
        drop(q.remove(&2));
        let m = release_request(0x0200_0001);
        up(&mut st, UeName::MmeUeS1apId(0x0200_0001), m.clone());
        assert_eq!(st.counters.value("frontend_host_closing"), 1);
        let (_, groups, f) = host_2_dies(&mut st, &mut q);
        assert_eq!(f, [Frame::Inherit { host: 2, groups }, Frame::S1Again { assoc: 1, stream: 1, data: m }]);
    }

    /// Host 2 (of [`state_with_queues`]) goes, what was sent before
    /// forgotten: its heir of replica group 0, the groups that heir takes,
    /// and what it is sent (no ReplicateTo).
    fn host_2_dies(st: &mut State, q: &mut HashMap<u32, mpsc::Receiver<Frame>>) -> (u32, Groups, Vec<Frame>) {
        for rx in q.values_mut() {
            sent_all(rx);
        }
        st.on_host(HostEvent::Down { host: HostId(2), conn: 12 });
        let heir = st.router.heir(HostId(2), 0).unwrap();
        let groups = st.router.heirs_of(HostId(2), Groups::ALL).into_iter().find(|(h, _)| *h == heir).unwrap().1;
        let f = sent_all(q.get_mut(&heir.0).unwrap()).into_iter().filter(|f| !matches!(f, Frame::ReplicateTo { .. }));
        (heir.0, groups, f.collect())
    }

    fn s1(data: &'static [u8]) -> Frame {
        Frame::S1 { assoc: 1, stream: 1, data: Bytes::from_static(data) }
    }

    /// An INITIAL UE MESSAGE with S-TMSI `m` whose NAS starts procedure
    /// `nas` (its first octets: 0xc7, a short SERVICE REQUEST; 0x07 0x45,
    /// a DETACH REQUEST).
    fn initial_with(m: u32, nas: &[u8]) -> Bytes {
        use oxirush_s1ap::build_s1ap;
        use oxirush_s1ap::helpers::{eutran_cgi, plmn, tai, EnbKind};
        use oxirush_s1ap::s1ap::*;
        let p = plmn("001", "01").unwrap();
        let pdu = build_s1ap!(
            InitiatingMessage,
            initialUEMessage,
            InitialUEMessage,
            eNB_UE_S1AP_ID(3u32),
            NAS_PDU(nas.to_vec()),
            TAI(tai(p, [0, 1])),
            EUTRAN_CGI(eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap()),
            RRC_Establishment_Cause(RRCEstablishmentCause::mo_Data),
            S_TMSI(STMSI::new(MMECode([1]), MTMSI(m.to_be_bytes()), None)),
        );
        Bytes::from(pdu.unwrap().encode().unwrap().to_vec())
    }

    /// An INITIAL UE MESSAGE of eNB UE `enb_ue` with an ATTACH REQUEST by
    /// IMSI 001010000000001 (TS 24.301 8.2.4: only as far as its identity).
    fn attach_by_imsi(enb_ue: u32) -> Bytes {
        use oxirush_s1ap::build_s1ap;
        use oxirush_s1ap::helpers::{eutran_cgi, plmn, tai, EnbKind};
        use oxirush_s1ap::s1ap::*;
        let p = plmn("001", "01").unwrap();
        let nas = [0x07, 0x41, 0x71, 8, 0x09, 0x10, 0x10, 0x00, 0x00, 0x00, 0x00, 0x10];
        let pdu = build_s1ap!(
            InitiatingMessage,
            initialUEMessage,
            InitialUEMessage,
            eNB_UE_S1AP_ID(enb_ue),
            NAS_PDU(nas.to_vec()),
            TAI(tai(p, [0, 1])),
            EUTRAN_CGI(eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap()),
            RRC_Establishment_Cause(RRCEstablishmentCause::mo_Signalling),
        );
        Bytes::from(pdu.unwrap().encode().unwrap().to_vec())
    }

    /// An attach's INITIAL UE MESSAGE its host took and had not handled
    /// when it died goes again to the heir of the replica group of the
    /// IMSI it names (where the host drew the UE's identifiers, and where
    /// its record went), not to the balancer's pick, marked as sent again.
    #[test]
    fn an_unhandled_attach_goes_again_to_the_heir_of_its_imsis_group() {
        let (mut st, mut q) = state_with_queues();
        let m = attach_by_imsi(9);
        up(&mut st, UeName::Initial { enb: 1, enb_ue_s1ap_id: 9, m_tmsi: None }, m.clone());
        let took = (1..=3).find(|h| !sent(q.get_mut(h).unwrap()).is_empty()).expect("a host took it");
        let group = mobicore_elastic::router::imsi_group("001010000000001");
        assert_eq!(st.core.group_for(None, Some(&m)), group);
        for rx in q.values_mut() {
            sent_all(rx);
        }
        st.on_host(HostEvent::Down { host: HostId(took), conn: 10 + u64::from(took) });
        let heir = st.router.heir(HostId(took), group).unwrap();
        let got = sent(q.get_mut(&heir.0).unwrap());
        assert!(got.contains(&Frame::S1Again { assoc: 1, stream: 1, data: m }), "{got:?}");
        assert_eq!(st.counters.value("frontend_unhandled_routed_again"), 1);
    }

    /// Three hosts (`local`: with host-local stores) behind round robin,
    /// every procedure placed; what is sent to each.
    fn placing(local: bool) -> (State, HashMap<u32, mpsc::Receiver<Frame>>) {
        let fe =
            Frontend::new(Scheme::RoundRobin.balancer(2), Loads::new(Profiles::default(), Estimation::default()), 64);
        let router = Router::new(fe).placing_procedures(16);
        let mut st = State::new(Mme::new(MmeConfig::default()), router, SGW.parse().unwrap(), Counters::new());
        let mut q = HashMap::new();
        for h in 1..=3 {
            let (tx, rx) = mpsc::channel(64);
            st.on_host(HostEvent::Up { host: HostId(h), conn: u64::from(h), tx, local });
            q.insert(h, rx);
        }
        (st, q)
    }

    /// A frame of host `host` to the front end.
    fn from_host(st: &mut State, host: u32, frame: Frame) {
        st.on_host(HostEvent::Frame { host: HostId(host), conn: u64::from(host), frame })
    }

    /// Host-local stores: a service request goes to the owner's host or
    /// its replica host, a detach home; a visitor without a copy gives
    /// the message back and it goes home; a visitor's write-back reaches
    /// the owner's replica hosts' copies first, then the owner, then its
    /// refresh.
    #[test]
    fn with_host_local_stores_visits_stay_among_the_copies_and_records_go_home() {
        let (mut st, mut q) = placing(true);
        assert!(st.router.has_local_stores());
        // Host 2's replica host of group 0, which every identifier below is of.
        let copy = st.router.replica_hosts_of(HostId(2), 0)[0].0;
        for rx in q.values_mut() {
            sent_all(rx);
        }
        let (a, ma) = (0x0200_0007, 0x0200_0005);
        let sr = initial_with(ma, &[0xc7, 0, 0, 0]);
        let name = UeName::Initial { enb: 1, enb_ue_s1ap_id: 3, m_tmsi: Some(ma) };
        // An attach by S-TMSI goes home, whatever the turn.
        for _ in 0..3 {
            up(&mut st, name, initial_with(ma, &[0x07, 0x41, 0x01, 0]));
            assert_eq!(sent_all(q.get_mut(&2).unwrap()).len(), 1);
        }
        // Service requests: home and the copy in turn, never the third host.
        let mut to_copy = 0;
        for _ in 0..4 {
            up(&mut st, name, sr.clone());
            let home = sent_all(q.get_mut(&2).unwrap());
            let away = sent_all(q.get_mut(&copy).unwrap());
            assert!(q.iter_mut().filter(|(h, _)| **h != 2 && **h != copy).all(|(_, rx)| sent_all(rx).is_empty()));
            if away.is_empty() {
                continue;
            }
            to_copy += 1;
            assert_eq!(home, [Frame::Lent { m_tmsi: ma }]);
            if to_copy == 1 {
                // No copy there yet: given back, and sent home.
                from_host(&mut st, copy, Frame::Bounce { assoc: 1, stream: 1, data: sr.clone() });
                assert_eq!(sent_all(q.get_mut(&2).unwrap()), [Frame::S1 { assoc: 1, stream: 1, data: sr.clone() }]);
                continue;
            }
            // Held there, then at rest: the record goes back.
            from_host(&mut st, copy, Frame::Holding { id: a, m_tmsi: Some(ma) });
            let writes = vec![("mme/ue/001010000000001".to_string(), b"record".to_vec())];
            from_host(&mut st, copy, Frame::WriteBack { id: a, writes: writes.clone() });
            from_host(&mut st, copy, Frame::Released { id: a });
            assert_eq!(sent_all(q.get_mut(&copy).unwrap()), [Frame::Copied { owner: 2, writes: writes.clone() }]);
            let home = sent_all(q.get_mut(&2).unwrap());
            assert_eq!(home, [Frame::WriteBack { id: a, writes }, Frame::Refresh { id: a, resume: false }]);
        }
        assert_eq!(to_copy, 2);
        assert_eq!(st.counters.value("frontend_placement_bounced"), 1);
        assert_eq!(st.counters.value("frontend_write_back"), 1);
    }

    /// Placement, holding, release and a host's death as the hosts and
    /// the front end tell each other.
    #[test]
    fn hosts_holding_ues_are_followed_and_owners_told_to_read_them_again() {
        let (mut st, mut q) = placing(false);
        for rx in q.values_mut() {
            assert!(sent_all(rx).contains(&Frame::Track), "told to say what it holds");
        }
        // Host 2's UE a, placed on host 1 (round robin's first pick), held there.
        let (a, ma) = (0x0200_0007, 0x0200_0005);
        up(&mut st, UeName::Initial { enb: 1, enb_ue_s1ap_id: 3, m_tmsi: Some(ma) }, Bytes::from_static(b"sr"));
        assert_eq!(sent(q.get_mut(&1).unwrap()), [s1(b"sr")]);
        // Its owner's host is told, to drop its copy if at rest.
        assert_eq!(sent(q.get_mut(&2).unwrap()), [Frame::Lent { m_tmsi: ma }]);
        from_host(&mut st, 1, Frame::Holding { id: a, m_tmsi: Some(ma) });
        up(&mut st, UeName::MmeUeS1apId(a), Bytes::from_static(b"ics response"));
        assert_eq!(sent(q.get_mut(&1).unwrap()), [s1(b"ics response")]);
        // Host 1's UE b, held by host 3 (placed there, or its GUTI's host).
        let b = 0x0100_0003;
        from_host(&mut st, 3, Frame::Holding { id: b, m_tmsi: Some(0x0300_0001) });
        // b at rest: its owner's host reads it again.
        from_host(&mut st, 3, Frame::Released { id: b });
        assert_eq!(sent_all(q.get_mut(&1).unwrap()), [Frame::Refresh { id: b, resume: false }]);
        from_host(&mut st, 3, Frame::Holding { id: b, m_tmsi: Some(0x0300_0001) });
        // Host 1 goes: each heir takes its groups, the heir of b's (0)
        // leaving b to host 3; host 2 reads a again, resuming what its
        // step awaits.
        st.on_host(HostEvent::Down { host: HostId(1), conn: 1 });
        let heir = st.router.heir(HostId(1), 0).unwrap();
        let heirs = st.router.heirs_of(HostId(1), Groups::ALL);
        assert_eq!(heirs.len(), 2, "{heirs:?}");
        let mut to: HashMap<u32, Vec<Frame>> = [2, 3]
            .into_iter()
            .map(|h| {
                let f = sent_all(q.get_mut(&h).unwrap());
                (h, f.into_iter().filter(|f| !matches!(f, Frame::ReplicateTo { .. })).collect())
            })
            .collect();
        for (h, groups) in &heirs {
            let inherit = Frame::Inherit { host: 1, groups: *groups };
            match *h == heir {
                true => assert_eq!(to[&h.0][..2], [Frame::Away { id: b }, inherit], "{to:?}"),
                false => assert_eq!(to[&h.0][..1], [inherit], "{to:?}"),
            }
        }
        let to_2: Vec<Frame> = to
            .remove(&2)
            .unwrap()
            .into_iter()
            .filter(|f| !matches!(f, Frame::Inherit { .. } | Frame::Away { .. }))
            .collect();
        assert_eq!(to_2, [Frame::Refresh { id: a, resume: true }]);
        up(&mut st, UeName::MmeUeS1apId(a), Bytes::from_static(b"release request"));
        assert_eq!(sent(q.get_mut(&2).unwrap()), [s1(b"release request")]);
        up(&mut st, UeName::MmeUeS1apId(b), Bytes::from_static(b"uplink nas"));
        assert_eq!(sent(q.get_mut(&3).unwrap()), [s1(b"uplink nas")]);
    }

    /// Over a shared store, a host whose claim of a UE's record lost (its
    /// owner's host wrote it: a timer of its copy fired as the service
    /// request was placed away) gives the message back: it goes to the
    /// host holding the UE, not placed again.
    #[test]
    fn a_message_whose_claim_lost_goes_to_the_host_holding_the_ue() {
        let (mut st, mut q) = placing(false);
        for rx in q.values_mut() {
            sent_all(rx);
        }
        let (a, ma) = (0x0200_0007, 0x0200_0005);
        let sr = initial_with(ma, &[0xc7, 0, 0, 0]);
        up(&mut st, UeName::Initial { enb: 1, enb_ue_s1ap_id: 3, m_tmsi: Some(ma) }, sr.clone());
        assert_eq!(sent_all(q.get_mut(&1).unwrap()), [Frame::S1 { assoc: 1, stream: 1, data: sr.clone() }]);
        assert_eq!(sent_all(q.get_mut(&2).unwrap()), [Frame::Lent { m_tmsi: ma }]);
        // The owner's host holds it (a guard fired); host 1 lost its claim.
        from_host(&mut st, 2, Frame::Holding { id: a, m_tmsi: Some(ma) });
        from_host(&mut st, 1, Frame::Bounce { assoc: 1, stream: 1, data: sr.clone() });
        assert_eq!(sent_all(q.get_mut(&2).unwrap()), [Frame::S1 { assoc: 1, stream: 1, data: sr.clone() }]);
        assert!(sent_all(q.get_mut(&1).unwrap()).is_empty() && sent_all(q.get_mut(&3).unwrap()).is_empty());
        assert_eq!(st.counters.value("frontend_claim_bounced"), 1);
    }

    #[test]
    fn a_drained_hosts_new_procedures_wait_for_it_then_go_to_its_heir() {
        let (mut st, mut q) = state_with_queues();
        for rx in q.values_mut() {
            sent_all(rx);
        }
        let now = Instant::now();
        let (status, body) = st.command(now, Command::Drain(HostId(2)));
        assert_eq!(status, 202, "{body}");
        assert_eq!(sent(q.get_mut(&2).unwrap()), [Frame::Drain]);
        assert_eq!(st.command(now, Command::Drain(HostId(2))).0, 409, "once");

        // Its S1 connections' messages go on to it; a new procedure waits.
        let idle = UeName::Initial { enb: 1, enb_ue_s1ap_id: 7, m_tmsi: Some(0x0200_0009) };
        up(&mut st, idle, Bytes::from_static(b"service request"));
        up(&mut st, UeName::MmeUeS1apId(0x0200_0001), Bytes::from_static(b"ics response"));
        assert_eq!(sent(q.get_mut(&2).unwrap()), [s1(b"ics response")]);
        assert_eq!(st.held.len(), 1);

        // Drained: told to stop; the held message and the next ones go to
        // the heir, told first to inherit (once, not again at the close).
        st.on_host(HostEvent::Frame { host: HostId(2), conn: 12, frame: Frame::Drained });
        assert_eq!(sent(q.get_mut(&2).unwrap()), [Frame::Stop]);
        let heir = st.router.heir(HostId(2), 0).unwrap();
        let f = sent_all(q.get_mut(&heir.0).unwrap());
        assert_eq!(f.iter().filter(|f| matches!(f, Frame::Inherit { .. })).count(), 1, "{f:?}");
        assert_eq!(f.last(), Some(&s1(b"service request")));
        up(&mut st, UeName::MmeUeS1apId(0x0200_0001), Bytes::from_static(b"release request"));
        assert_eq!(sent(q.get_mut(&heir.0).unwrap()), [s1(b"release request")]);
        let hosts: serde_json::Value = serde_json::from_str(&st.command(now, Command::Hosts).1).unwrap();
        assert_eq!(hosts["hosts"][1]["state"], "drained", "{hosts}");
        // It exits: gone (its heir is not told to inherit again).
        st.on_host(HostEvent::Down { host: HostId(2), conn: 12 });
        assert!(!st.hosts.contains_key(&HostId(2)));
        assert!(!sent_all(q.get_mut(&heir.0).unwrap()).iter().any(|f| matches!(f, Frame::Inherit { host: 2, .. })));

        // One that does not drain in time is stopped as it stands; the
        // last host taking new UEs is not drained.
        let other = if heir.0 == 1 { 3 } else { 1 };
        assert_eq!(st.command(now, Command::Drain(HostId(other))).0, 202);
        st.drain_deadlines(now + st.drain_within / 2);
        assert_eq!(sent(q.get_mut(&other).unwrap()), [Frame::Drain]);
        st.drain_deadlines(now + st.drain_within * 2);
        assert_eq!(sent(q.get_mut(&other).unwrap()), [Frame::Stop]);
        assert_eq!(st.counters.value("frontend_drain_forced"), 1);
        assert_eq!(st.command(now, Command::Drain(heir)).0, 409);
        // Not a launcher here: no host can be started.
        assert_eq!(st.command(now, Command::StartHost).0, 409);
    }

    /// A host's request reaches the S-GW under the front end's number, the
    /// rest unchanged; the response reaches the host under the host's.
    #[test]
    fn a_host_s_request_is_renumbered_and_its_response_numbered_back() {
        use mobicore_common::s11::{ReleaseAccessBearersRequest, S11Request, S11Response};
        let (mut st, mut q) = state_with_queues();
        q.values_mut().for_each(|r| drop(sent_all(r)));
        let (sgw, now) = (st.sgw, Instant::now());
        let rab = S11Request::ReleaseAccessBearers(ReleaseAccessBearersRequest { sgw_teid: Teid(0x99) });
        let sent = mobicore_gtp::s11::encode_request(&rab, 0x02_0007).to_bytes();
        st.on_host(HostEvent::Frame { host: HostId(2), conn: 12, frame: Frame::S11 { data: sent.clone().into() } });
        let [out] = &std::mem::take(&mut st.to_sgw)[..] else { panic!("one request for the S-GW") };
        let relayed = GtpMessage::parse(out).unwrap();
        assert_ne!(relayed.seq, 0x02_0007);
        assert_eq!(GtpMessage { seq: 0x02_0007, ..relayed.clone() }.to_bytes(), sent, "only the number changed");
        let resp = S11Response::ReleaseAccessBearers(GtpCause::REQUEST_ACCEPTED);
        let answer = mobicore_gtp::s11::encode_response(&resp, 0x0200_0001, relayed.seq, None).to_bytes();
        st.on_s11_datagram(now, &answer, sgw);
        let back = mobicore_gtp::s11::encode_response(&resp, 0x0200_0001, 0x02_0007, None).to_bytes();
        assert_eq!(sent_all(q.get_mut(&2).unwrap()), [Frame::S11 { data: back.into() }]);
    }

    #[test]
    fn the_sgw_s_echo_is_answered_here() {
        let mut st = state();
        let sgw = st.sgw;
        let echo = GtpMessage { teid: None, seq: 5, body: Message::EchoRequest(Echo { recovery: 1 }) };
        st.on_s11_datagram(Instant::now(), &echo.to_bytes(), sgw);
        let [reply] = &std::mem::take(&mut st.to_sgw)[..] else { panic!("one answer") };
        let reply = GtpMessage::parse(reply).unwrap();
        assert_eq!((reply.seq, reply.body.msg_type()), (5, msg_type::ECHO_RESPONSE));
        // A host's is not relayed.
        st.on_host(HostEvent::Frame { host: HostId(1), conn: 1, frame: Frame::S11 { data: echo.to_bytes().into() } });
        assert!(st.to_sgw.is_empty());
    }
}
