//! Per-procedure NF instances inside an MME host (issue 13 item 1, seed
//! 004 5.2-5.3: MMLite's service instances behind a forwarder).
//!
//! With `mme-host --nf-instances N` the host process is its host's
//! forwarder: it keeps the link to the front end, the S6a and S11 clients,
//! the store and the replica, and its MME core as the host's record of its
//! UEs, eNBs and timers; and it starts N `mobicore mme-nf` processes, the
//! instances, linked to it over loopback TCP ([`ToNf`], [`FromNf`]).
//!
//! An instance is a sans-I/O procedure machine that keeps nothing of a UE
//! between messages: for each UE-associated event (an uplink S1AP message
//! of a UE, an S6a or S11 answer, an S-GW's Downlink Data Notification) the
//! forwarder sends it the UE's record (none for a new attach), the event
//! and the identifiers a new UE or GUTI takes ([`Mme::pin_next_ids`]: the
//! forwarder holds every UE of the host, so ids it hands out are never in
//! use, whichever instance lives or restarts); the instance imports the
//! record into its core, handles the event, evicts the UE and returns the
//! UE's new record and the actions. The forwarder imports the record
//! ([`Mme::replace_ue`]), writes the store (write-ahead) and only then
//! sends the actions. An instance keeps the eNBs' contexts only: the
//! forwarder replays each eNB's association and S1 Setup to it.
//!
//! Which instance ([`NfTable`], Algorithm 2): an instance takes every
//! procedure kind (`--nf-instances N`) or one (`--nf attach=1,...`, seed
//! 004 5.2's per-procedure services). The message that starts a UE's
//! procedure ([`mobicore_mme::routing::starts`]) goes to the live instance of its
//! kind (or of every kind) with the least `Q/C` (Eq. 3: `Q` the events it
//! holds, `C` Eq. 4's share from the kinds' priorities `P = SLO_min/SLO`,
//! [`mobicore_elastic::forwarder::Forwarder::priority`]); its later ones go
//! to the same instance while it lives; the procedure ends when the UE is
//! settled. A message that starts nothing known (a UE Context Release
//! Request, a Downlink Data Notification, an S11 answer still due once the
//! UE is settled) goes to the UE's last procedure's instance if it lives,
//! else to any live one. With
//! no live instance of its kind but one being restarted, the event waits
//! for it (bounded); with none of its kind at all, any live one takes it.
//! One event of a UE is at an instance at a time; the UE's next ones wait
//! at the forwarder (bounded). Each slot's instance runs in a cgroup
//! weighted by its kind's `P` ([`super::cgroup::NfCgroups`]: Eq. 4 when
//! instances share a core).
//!
//! Failure: the forwarder holds each event it sent until its instance
//! answers. When an instance's link closes (it died), nothing of its steps
//! was committed or sent, so every event it held is sent again, in order,
//! to another live instance with the record as last committed
//! (`host_nf_failed`, `host_nf_events_retaken`), and a replacement instance
//! is started in its slot. With no live instance the forwarder's own core
//! handles the event.
//!
//! What stays in the forwarder's core: eNB-wide messages (S1 Setup, eNB
//! Configuration Update, Reset), association events, the UEs' timers (a
//! timer that fires while its UE's event is at an instance acts on the
//! record the forwarder holds; the instance's record then replaces it),
//! the HSS's Cancel Location, messages for UEs the host does not hold.

use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_common::requester::TransportError;
use mobicore_common::s11::{S11IncomingAnswer, S11IncomingRequest, S11Notification, S11Request, S11Response};
use mobicore_common::s6a::{S6aAnswer, S6aIncomingAnswer, S6aRequest};
use mobicore_common::sctp_api::AssocId;
use mobicore_elastic::forwarder::{Forwarder, ForwarderConfig};
use mobicore_elastic::nf_scaling::{KindLoad, NfScale, NfScaling, NfScalingConfig};
use mobicore_elastic::procedure::{ProcedureKind, Profiles};
use mobicore_mme::context_codec::TimeBase;
use mobicore_mme::transfer::UeKey;
use mobicore_mme::{Mme, MmeAction, MmeEvent, UeRef};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The longest frame taken on a forwarder-instance link (a UE record is
/// a few KiB; its JSON a few times that).
pub const MAX_NF_FRAME: usize = 1 << 20;
/// Events one instance holds at most (sent, not answered).
pub const MAX_HELD: usize = 512;
/// Events of one UE waiting for its event at an instance, at most.
pub const MAX_UE_WAITING: usize = 32;

/// A UE-associated event, as an instance is sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum NfEvent {
    S1 { assoc: u64, stream: u16, data: Vec<u8> },
    S6a { ue: UeRef, answer: Result<S6aAnswer, TransportError> },
    S11 { ue: UeRef, response: Result<S11Response, TransportError> },
    S11Incoming { txn: u64, request: S11IncomingRequest },
}

impl NfEvent {
    /// The event an instance may take, or the event back (not an error:
    /// the caller's own event, for its core).
    #[allow(clippy::result_large_err)]
    pub fn from_mme(ev: MmeEvent) -> Result<NfEvent, MmeEvent> {
        Ok(match ev {
            MmeEvent::S1Data { assoc, stream, data } => NfEvent::S1 { assoc: assoc.0, stream, data: data.to_vec() },
            MmeEvent::S6a { ue, answer } => NfEvent::S6a { ue, answer },
            MmeEvent::S11 { ue, response } => NfEvent::S11 { ue, response },
            MmeEvent::S11Incoming { txn, request } => NfEvent::S11Incoming { txn, request },
            other => return Err(other),
        })
    }

    pub fn into_mme(self) -> MmeEvent {
        match self {
            NfEvent::S1 { assoc, stream, data } => {
                MmeEvent::S1Data { assoc: AssocId(assoc), stream, data: data.into() }
            }
            NfEvent::S6a { ue, answer } => MmeEvent::S6a { ue, answer },
            NfEvent::S11 { ue, response } => MmeEvent::S11 { ue, response },
            NfEvent::S11Incoming { txn, request } => MmeEvent::S11Incoming { txn, request },
        }
    }
}

/// An action of an instance's core, for the forwarder to carry out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum NfAction {
    S1Send { assoc: u64, stream: u16, data: Vec<u8> },
    S6a { ue: UeRef, request: S6aRequest },
    S11 { ue: UeRef, request: S11Request },
    S11Answer { txn: u64, answer: S11IncomingAnswer },
    S6aAnswer { txn: u64, answer: S6aIncomingAnswer },
    S11Notify { notification: S11Notification },
}

impl NfAction {
    fn from_mme(a: MmeAction) -> Option<NfAction> {
        Some(match a {
            MmeAction::S1Send { assoc, stream, data } => {
                NfAction::S1Send { assoc: assoc.0, stream, data: data.to_vec() }
            }
            MmeAction::S6a { ue, request } => NfAction::S6a { ue, request },
            MmeAction::S11 { ue, request } => NfAction::S11 { ue, request },
            MmeAction::S11Answer { txn, answer } => NfAction::S11Answer { txn, answer },
            MmeAction::S6aAnswer { txn, answer } => NfAction::S6aAnswer { txn, answer },
            MmeAction::S11Notify { notification } => NfAction::S11Notify { notification },
            MmeAction::S1Abort { .. } | MmeAction::OperatorAnswer { .. } => return None,
        })
    }

    pub fn into_mme(self) -> MmeAction {
        match self {
            NfAction::S1Send { assoc, stream, data } => {
                MmeAction::S1Send { assoc: AssocId(assoc), stream, data: Bytes::from(data) }
            }
            NfAction::S6a { ue, request } => MmeAction::S6a { ue, request },
            NfAction::S11 { ue, request } => MmeAction::S11 { ue, request },
            NfAction::S11Answer { txn, answer } => MmeAction::S11Answer { txn, answer },
            NfAction::S6aAnswer { txn, answer } => MmeAction::S6aAnswer { txn, answer },
            NfAction::S11Notify { notification } => MmeAction::S11Notify { notification },
        }
    }
}

/// Forwarder -> instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToNf {
    /// An eNB's association is up (replayed to a new instance too).
    EnbUp {
        assoc: u64,
        peer: IpAddr,
        outbound_streams: u16,
    },
    /// An eNB-wide PDU of the association (S1 Setup, eNB Configuration
    /// Update): the instance takes it for the eNB's context, sends nothing.
    EnbS1 {
        assoc: u64,
        stream: u16,
        data: Vec<u8>,
    },
    EnbDown {
        assoc: u64,
    },
    /// A UE's event: its record (none: a new UE), and the MME-UE-S1AP-ID
    /// and M-TMSI a new UE or GUTI takes.
    Event {
        seq: u64,
        record: Option<Vec<u8>>,
        ids: (u32, u32),
        event: NfEvent,
    },
}

/// Instance -> forwarder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromNf {
    /// First frame: the slot the instance was started in and its life
    /// there (a replacement is a new life), its process id.
    Hello { slot: usize, life: u64, pid: u32 },
    /// Event `seq` handled: the records of the UEs it touched, the
    /// MME-UE-S1AP-IDs of the UEs it forgot, its actions, and what its
    /// core's counters rose by (the host's counters count its procedures).
    Done { seq: u64, records: Vec<Vec<u8>>, removed: Vec<u32>, actions: Vec<NfAction>, counters: Vec<(String, u64)> },
    /// Event `seq`'s record could not be imported: the forwarder's core
    /// handles it.
    Refused { seq: u64 },
}

/// Why a frame was not read.
#[derive(Debug, thiserror::Error)]
pub enum NfReadError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {0} octets (at most {MAX_NF_FRAME})")]
    TooLong(usize),
    #[error("bad frame: {0}")]
    Bad(#[from] serde_json::Error),
}

/// One frame: a 4-octet big-endian length and JSON. `Ok(None)` at a clean end.
pub async fn read_msg<T: DeserializeOwned, R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<T>, NfReadError> {
    match super::wire::read_body(r, MAX_NF_FRAME).await? {
        super::wire::Body::End => Ok(None),
        super::wire::Body::TooLong(len) => Err(NfReadError::TooLong(len)),
        super::wire::Body::Data(body) => Ok(Some(serde_json::from_slice(&body)?)),
    }
}

pub async fn write_msg<T: Serialize, W: AsyncWrite + Unpin>(w: &mut W, msg: &T) -> std::io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    if body.len() > MAX_NF_FRAME {
        return Err(std::io::Error::other(format!("frame of {} octets", body.len())));
    }
    let mut b = Vec::with_capacity(body.len() + 4);
    b.extend_from_slice(&(body.len() as u32).to_be_bytes());
    b.extend_from_slice(&body);
    w.write_all(&b).await
}

fn time_now() -> TimeBase {
    let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    TimeBase { now: Instant::now(), unix_ms }
}

// ---- The instance ----

/// One event through an instance's core: import, handle, export, evict.
/// Sans-I/O; the core keeps its eNBs only.
pub fn handle_event(core: &mut Mme, record: Option<&[u8]>, ids: (u32, u32), event: NfEvent) -> Option<FromNfDone> {
    let time = time_now();
    let mut imported = None;
    if let Some(r) = record {
        match core.import_ue(r, time) {
            Ok(id) => imported = Some(id),
            Err(e) => {
                tracing::warn!("importing a UE record: {e}");
                return None;
            }
        }
    }
    core.pin_next_ids(ids.0, ids.1);
    let _ = core.take_changes();
    core.handle(time.now, event.into_mme());
    let changes = core.take_changes();
    let mut touched: Vec<u32> = changes.touched.into_iter().collect();
    touched.sort_unstable();
    let records = touched.iter().filter_map(|&id| core.export_ue(&UeKey::MmeUeS1apId(id), time)).collect();
    let removed = changes.removed.iter().map(|r| r.id).collect();
    for id in touched.into_iter().chain(imported) {
        core.evict_ue(&UeKey::MmeUeS1apId(id));
    }
    let mut actions = Vec::new();
    while let Some(a) = core.poll_action() {
        actions.extend(NfAction::from_mme(a));
    }
    Some(FromNfDone { records, removed, actions })
}

/// What [`handle_event`] returns for [`FromNf::Done`].
#[derive(Debug)]
pub struct FromNfDone {
    pub records: Vec<Vec<u8>>,
    pub removed: Vec<u32>,
    pub actions: Vec<NfAction>,
}

/// Run an instance: connect to the forwarder at `forwarder`, take its
/// frames until it goes. `stall_on_s6a` (`stall_on_mbr`): hold the first
/// S6a answer (Modify Bearer Response) forever, for the system tests that
/// kill an instance mid-attach (mid-service-request).
/// Faults an instance is started with (system tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Hold the first S6a answer forever.
    pub stall_on_s6a: bool,
    /// Hold the first Modify Bearer Response forever.
    pub stall_on_mbr: bool,
    /// Sleep this long after each event.
    pub slow: Option<Duration>,
}

pub async fn run_instance(
    mut core: Mme,
    forwarder: SocketAddr,
    host: u8,
    slot: usize,
    life: u64,
    faults: Faults,
) -> anyhow::Result<()> {
    let Faults { stall_on_s6a, stall_on_mbr, slow } = faults;
    core.track_changes(true);
    let stream = TcpStream::connect(forwarder).await?;
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let mut counted = core.counters().snapshot();
    write_msg(&mut wr, &FromNf::Hello { slot, life, pid: std::process::id() }).await?;
    println!("mme-nf {host}/{slot}: ready (life {life})");
    while let Some(msg) = read_msg::<ToNf, _>(&mut rd).await? {
        let now = Instant::now();
        match msg {
            ToNf::EnbUp { assoc, peer, outbound_streams } => {
                core.handle(now, MmeEvent::S1Up { assoc: AssocId(assoc), peer, outbound_streams })
            }
            ToNf::EnbS1 { assoc, stream, data } => {
                core.handle(now, MmeEvent::S1Data { assoc: AssocId(assoc), stream, data: data.into() })
            }
            ToNf::EnbDown { assoc } => core.handle(now, MmeEvent::S1Down { assoc: AssocId(assoc) }),
            ToNf::Event { seq, record, ids, event } => {
                if stall_on_s6a && matches!(event, NfEvent::S6a { .. }) {
                    println!("mme-nf {host}/{slot}: stalling on an S6a answer (event {seq})");
                    std::future::pending::<()>().await;
                }
                if stall_on_mbr && matches!(event, NfEvent::S11 { response: Ok(S11Response::ModifyBearer(_)), .. }) {
                    println!("mme-nf {host}/{slot}: stalling on a Modify Bearer Response (event {seq})");
                    std::future::pending::<()>().await;
                }
                let reply = match handle_event(&mut core, record.as_deref(), ids, event) {
                    Some(d) => {
                        let now = core.counters().snapshot();
                        let counters = now
                            .iter()
                            .filter(|(k, _)| !matches!(**k, "ue_imported" | "ue_evicted"))
                            .filter_map(|(k, v)| {
                                let d = v.saturating_sub(counted.get(k).copied().unwrap_or(0));
                                (d > 0).then(|| (k.to_string(), d))
                            })
                            .collect();
                        counted = now;
                        FromNf::Done { seq, records: d.records, removed: d.removed, actions: d.actions, counters }
                    }
                    None => FromNf::Refused { seq },
                };
                if let Some(d) = slow {
                    tokio::time::sleep(d).await;
                }
                write_msg(&mut wr, &reply).await?;
                continue;
            }
        }
        // What an eNB-wide replay produced is the forwarder's to send.
        while core.poll_action().is_some() {}
    }
    Ok(())
}

// ---- The forwarder's table (sans-I/O) ----

/// An event at an instance, kept until it answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    /// The UE (none: a new UE).
    pub ue: Option<u32>,
    pub event: NfEvent,
    pub ids: (u32, u32),
    /// The kind of the procedure it belongs to (none: not known).
    pub kind: Option<ProcedureKind>,
    /// When the forwarder took it.
    pub at: Instant,
}

#[derive(Debug)]
struct Slot {
    live: bool,
    life: u64,
    held: BTreeMap<u64, Held>,
    /// The procedure kind it takes (none: every kind).
    kind: Option<ProcedureKind>,
    /// Its `P` (Eq. 4).
    p: f64,
    /// In the idle pool: it takes nothing until the NF controller gives
    /// it a kind ([`NfTable::grow`]).
    pooled: bool,
    /// Its instance was stopped, the pool above its size
    /// ([`NfTable::retire_pooled`]): no instance runs in it, none is
    /// started again but for the pool ([`NfTable::add_pooled`]).
    retired: bool,
}

/// Where an event goes ([`NfTable::choose`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Slot(usize),
    /// Only a restarting instance takes its kind: wait for it.
    Wait,
    /// No live instance has room.
    None,
}

/// The instances' kinds from `--nf` (`attach=1,service-request=2`; kinds
/// as [`ProcedureKind::name`], `-` or `_`).
pub fn parse_kinds(spec: &str) -> Result<NfKinds, String> {
    parse_kind_list(spec).map(NfKinds)
}

/// `--nf`'s instances' kinds, a slot each.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NfKinds(pub Vec<ProcedureKind>);

/// A procedure kind by [`ProcedureKind::name`], `-` or `_`.
fn kind_named(name: &str, flag: &str, part: &str) -> Result<ProcedureKind, String> {
    let name = name.trim().replace('-', "_");
    ProcedureKind::ALL
        .into_iter()
        .find(|k| k.name() == name)
        .ok_or_else(|| format!("{flag} {part}: a kind of attach, service-request, tau, handover, detach"))
}

fn parse_kind_list(spec: &str) -> Result<Vec<ProcedureKind>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, n) = part.split_once('=').unwrap_or((part, "1"));
        let kind = kind_named(name, "--nf", part)?;
        let n: usize = n.trim().parse().map_err(|_| format!("--nf {part}: a count"))?;
        if n > 64 {
            return Err(format!("--nf {part}: at most 64 instances of a kind"));
        }
        out.extend(std::iter::repeat_n(kind, n));
    }
    Ok(out)
}

/// `P` of each kind (seed 004 5.3: `SLO_min / SLO`, from the profiles).
pub fn priorities(profiles: &Profiles) -> [f64; ProcedureKind::COUNT] {
    let f = Forwarder::<()>::new(profiles, ForwarderConfig::default());
    ProcedureKind::ALL.map(|k| f.priority(k))
}

/// `--nf-priority`: `P` fixed per kind in place of the profiles'
/// `SLO_min / SLO` (seed 004 Fig. 9's "H over S", "S over H").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NfPriorities(pub [Option<f64>; ProcedureKind::COUNT]);

impl NfPriorities {
    /// `base` with the fixed kinds' `P` in place.
    pub fn over(&self, base: [f64; ProcedureKind::COUNT]) -> [f64; ProcedureKind::COUNT] {
        std::array::from_fn(|i| self.0[i].unwrap_or(base[i]))
    }
}

/// `--nf-priority handover=1,service-request=0.25`: each kind once, `P`
/// in (0, 1] (the cgroup weight is 1000 P under v2, 1024 P under v1).
pub fn parse_priorities(spec: &str) -> Result<NfPriorities, String> {
    let mut out = NfPriorities::default();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, p) = part.split_once('=').ok_or_else(|| format!("--nf-priority {part}: kind=P"))?;
        let kind = kind_named(name, "--nf-priority", part)?;
        let p: f64 = p.trim().parse().map_err(|_| format!("--nf-priority {part}: P a number"))?;
        if !(p > 0.0 && p <= 1.0) {
            return Err(format!("--nf-priority {part}: P in (0, 1]"));
        }
        if out.0[kind.index()].replace(p).is_some() {
            return Err(format!("--nf-priority {part}: {} given twice", kind.name()));
        }
    }
    if out.0.iter().all(Option::is_none) {
        return Err("--nf-priority: at least one kind=P".into());
    }
    Ok(out)
}

/// The instances' priorities: each kind's `P`, and the SLOs by which a
/// kind's is bumped at each violation (none when fixed by
/// --nf-priority).
#[derive(Debug, Clone)]
pub struct Priorities {
    pub p: [f64; ProcedureKind::COUNT],
    pub bumps: Option<Profiles>,
}

/// Which instance holds what (Algorithm 2's dispatch, with failure).
#[derive(Debug)]
pub struct NfTable {
    slots: Vec<Slot>,
    /// `P` of each kind, for an instance taken from the pool.
    kind_p: [f64; ProcedureKind::COUNT],
    /// Instances of each kind at the start: it never shrinks below them.
    base: [usize; ProcedureKind::COUNT],
    /// A UE's procedure's instance and kind, and whether it runs (an ended
    /// one's instance still takes the UE's messages that start nothing
    /// known, and its S6a/S11 answers still due).
    affinity: HashMap<u32, (usize, Option<ProcedureKind>, bool)>,
    /// Ids handed out to events still at an instance.
    reserved: HashSet<u32>,
    next_seq: u64,
}

impl NfTable {
    /// Slots of these kinds (none: every kind, `P` the highest, 1), then
    /// `pool` idle ones.
    pub fn new(kinds: &[Option<ProcedureKind>], pool: usize, p: [f64; ProcedureKind::COUNT]) -> NfTable {
        let slot = |kind: Option<ProcedureKind>, pooled: bool| Slot {
            live: false,
            life: 0,
            held: BTreeMap::new(),
            kind,
            p: kind.map_or(1.0, |k| p[k.index()]),
            pooled,
            retired: false,
        };
        let mut base = [0; ProcedureKind::COUNT];
        for k in kinds.iter().flatten() {
            base[k.index()] += 1;
        }
        NfTable {
            slots: kinds.iter().map(|&k| slot(k, false)).chain((0..pool).map(|_| slot(None, true))).collect(),
            kind_p: p,
            base,
            affinity: HashMap::new(),
            reserved: HashSet::new(),
            next_seq: 1,
        }
    }

    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    pub fn kind(&self, slot: usize) -> Option<ProcedureKind> {
        self.slots[slot].kind
    }

    /// `P` of the slot's kind (1 for every kind).
    pub fn p(&self, slot: usize) -> f64 {
        self.slots[slot].p
    }

    /// Eq. 4 for `slot` were it busy: its `P` over its own and the busy
    /// instances' (as [`Forwarder::share`]).
    pub fn share(&self, slot: usize) -> f64 {
        let others: f64 =
            self.slots.iter().enumerate().filter(|(j, s)| *j != slot && !s.held.is_empty()).map(|(_, s)| s.p).sum();
        self.slots[slot].p / (self.slots[slot].p + others)
    }

    pub fn life(&self, slot: usize) -> u64 {
        self.slots[slot].life
    }

    pub fn is_live(&self, slot: usize, life: u64) -> bool {
        self.slots.get(slot).is_some_and(|s| s.live && s.life == life)
    }

    /// The instance of `slot`, life `life`, connected.
    pub fn up(&mut self, slot: usize, life: u64) {
        if let Some(s) = self.slots.get_mut(slot).filter(|s| s.life == life) {
            s.live = true;
        }
    }

    pub fn held(&self) -> usize {
        self.slots.iter().map(|s| s.held.len()).sum()
    }

    pub fn is_reserved(&self, id: u32) -> bool {
        self.reserved.contains(&id)
    }

    /// The kind of the UE's running procedure, if it has one.
    pub fn procedure_of(&self, ue: u32) -> Option<Option<ProcedureKind>> {
        self.affinity.get(&ue).filter(|a| a.2).map(|&(_, k, _)| k)
    }

    /// The kind of the UE's last procedure (ended or not).
    pub fn last_of(&self, ue: u32) -> Option<Option<ProcedureKind>> {
        self.affinity.get(&ue).map(|&(_, k, _)| k)
    }

    /// The UE starts a new procedure: placed anew.
    pub fn forget(&mut self, ue: u32) {
        self.affinity.remove(&ue);
    }

    /// Algorithm 2: the instance of the UE's procedure if it lives and has
    /// room, else the live one taking `kind` with the least `Q/C` (Eq. 3);
    /// none of `kind` live: wait for one restarting, else any live one.
    pub fn choose(&self, ue: Option<u32>, kind: Option<ProcedureKind>) -> Choice {
        let room = |i: usize| self.slots[i].live && !self.slots[i].pooled && self.slots[i].held.len() < MAX_HELD;
        if let Some(&(i, _, _)) = ue.and_then(|u| self.affinity.get(&u)) {
            if room(i) {
                return Choice::Slot(i);
            }
        }
        let takes = |i: usize| {
            !self.slots[i].pooled && (kind.is_none() || self.slots[i].kind.is_none() || self.slots[i].kind == kind)
        };
        let best = |f: &dyn Fn(usize) -> bool| {
            (0..self.slots.len())
                .filter(|&i| room(i) && f(i))
                .map(|i| (self.slots[i].held.len() as f64 / self.share(i), i))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, i)| i)
        };
        if let Some(i) = best(&takes) {
            return Choice::Slot(i);
        }
        if kind.is_some() && (0..self.slots.len()).any(|i| takes(i) && !self.slots[i].live) {
            return Choice::Wait;
        }
        best(&|_| true).map_or(Choice::None, Choice::Slot)
    }

    /// What the NF controller samples: each kind's live instances (not
    /// pooled, taking only it) and the events they hold; and the live
    /// instances in the pool.
    pub fn kind_loads(&self) -> (Vec<KindLoad>, usize) {
        let mut loads: Vec<KindLoad> = Vec::new();
        for s in self.slots.iter().filter(|s| s.live && !s.pooled) {
            let Some(kind) = s.kind else { continue };
            match loads.iter_mut().find(|l| l.kind == kind) {
                Some(l) => {
                    l.instances += 1;
                    l.held += s.held.len();
                }
                None => loads.push(KindLoad { kind, instances: 1, held: s.held.len(), base: self.base[kind.index()] }),
            }
        }
        let pool = self.slots.iter().filter(|s| s.live && s.pooled).count();
        (loads, pool)
    }

    /// `kind`'s `P` is now `p` (a priority bump): the slots taking it.
    pub fn set_p(&mut self, kind: ProcedureKind, p: f64) -> Vec<usize> {
        self.kind_p[kind.index()] = p;
        let mut out = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate().filter(|(_, s)| s.kind == Some(kind)) {
            s.p = p;
            out.push(i);
        }
        out
    }

    /// A live pooled instance takes `kind` from now on (its `P` too);
    /// its slot, for its cgroup's weight.
    pub fn grow(&mut self, kind: ProcedureKind) -> Option<usize> {
        let slot = self.slots.iter().position(|s| s.live && s.pooled)?;
        let s = &mut self.slots[slot];
        (s.pooled, s.kind, s.p) = (false, Some(kind), self.kind_p[kind.index()]);
        Some(slot)
    }

    /// Slots with an instance (running or being started).
    pub fn instances(&self) -> usize {
        self.slots.iter().filter(|s| !s.retired).count()
    }

    /// Slots of the idle pool with an instance (running or being started).
    pub fn pooled(&self) -> usize {
        self.slots.iter().filter(|s| s.pooled && !s.retired).count()
    }

    /// A slot for one more pooled instance, to be started: a retired one
    /// again, or a new one.
    pub fn add_pooled(&mut self) -> usize {
        let fresh =
            Slot { live: false, life: 0, held: BTreeMap::new(), kind: None, p: 1.0, pooled: true, retired: false };
        match self.slots.iter().position(|s| s.retired) {
            Some(i) => {
                let life = self.slots[i].life;
                self.slots[i] = Slot { life, ..fresh };
                i
            }
            None => {
                self.slots.push(fresh);
                self.slots.len() - 1
            }
        }
    }

    /// A live pooled instance (it holds nothing) is to stop: its slot is
    /// retired, its life over (its link's end is no failure); its slot.
    pub fn retire_pooled(&mut self) -> Option<usize> {
        let slot = self.slots.iter().rposition(|s| s.live && s.pooled && s.held.is_empty())?;
        let s = &mut self.slots[slot];
        (s.live, s.retired) = (false, true);
        s.life += 1;
        self.affinity.retain(|_, (i, _, _)| *i != slot);
        Some(slot)
    }

    /// A slot just added to the pool whose instance did not start.
    pub fn retire_pooled_slot(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        (s.live, s.retired) = (false, true);
        s.life += 1;
    }

    /// An instance of `kind` holding nothing and running no UE's
    /// procedure goes back to the pool (none such: `None`, try later).
    pub fn shrink(&mut self, kind: ProcedureKind) -> Option<usize> {
        let running = |slot: usize| self.affinity.values().any(|&(i, _, run)| i == slot && run);
        let slot = (0..self.slots.len()).rev().find(|&i| {
            let s = &self.slots[i];
            s.live && !s.pooled && s.kind == Some(kind) && s.held.is_empty() && !running(i)
        })?;
        let s = &mut self.slots[slot];
        (s.pooled, s.kind) = (true, None);
        self.affinity.retain(|_, (i, _, _)| *i != slot);
        Some(slot)
    }

    /// `held` sent to `slot`; its sequence number.
    pub fn hold(&mut self, slot: usize, held: Held) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.reserved.insert(held.ids.0);
        self.reserved.insert(held.ids.1);
        if let Some(u) = held.ue {
            self.affinity.insert(u, (slot, held.kind, true));
        }
        self.slots[slot].held.insert(seq, held);
        seq
    }

    /// The UE's procedure at `slot` (a new UE's, once it has an id).
    pub fn follow(&mut self, ue: u32, slot: usize, kind: Option<ProcedureKind>) {
        self.affinity.insert(ue, (slot, kind, true));
    }

    /// The UE's procedure ended: a message that starts a procedure is
    /// placed anew.
    pub fn end_procedure(&mut self, ue: u32) {
        if let Some(a) = self.affinity.get_mut(&ue) {
            a.2 = false;
        }
    }

    /// `slot` (life `life`) answered `seq`.
    pub fn answered(&mut self, slot: usize, life: u64, seq: u64) -> Option<Held> {
        let s = self.slots.get_mut(slot).filter(|s| s.life == life)?;
        let held = s.held.remove(&seq)?;
        self.reserved.remove(&held.ids.0);
        self.reserved.remove(&held.ids.1);
        Some(held)
    }

    /// The instance of `slot` (life `life`) is gone: what it held, in the
    /// order it was sent; the slot's next life begins (not live yet).
    pub fn failed(&mut self, slot: usize, life: u64) -> Option<Vec<Held>> {
        let s = self.slots.get_mut(slot).filter(|s| s.life == life)?;
        s.live = false;
        s.life += 1;
        let held: Vec<Held> = std::mem::take(&mut s.held).into_values().collect();
        for h in &held {
            self.reserved.remove(&h.ids.0);
            self.reserved.remove(&h.ids.1);
        }
        self.affinity.retain(|_, (i, _, _)| *i != slot);
        Some(held)
    }
}

// ---- The forwarder's I/O ----

/// What the instances' links bring the forwarder.
#[derive(Debug)]
pub enum NfIn {
    Up { slot: usize, life: u64, pid: u32, tx: mpsc::UnboundedSender<ToNf> },
    Msg { slot: usize, life: u64, msg: FromNf },
    Closed { slot: usize, life: u64 },
}

/// How instances are started.
#[derive(Debug, Clone)]
pub struct NfLaunch {
    pub exe: PathBuf,
    /// `mme-nf` and its arguments but --forwarder, --slot, --life.
    pub args: Vec<String>,
    /// Give slot 0's first instance `--stall-on-s6a` (system test).
    pub stall_first: bool,
    /// Give this slot's first instance `--stall-on-mbr` (system test).
    pub stall_mbr: Option<usize>,
    /// Give every instance `--slow-ms` (system test).
    pub slow_ms: Option<u64>,
}

/// The forwarder's side: the table, the instances' processes and links,
/// the eNBs replayed to them, the UEs' waiting events.
pub struct NfPool {
    host: u8,
    table: NfTable,
    launch: NfLaunch,
    addr: SocketAddr,
    children: Vec<Option<tokio::process::Child>>,
    links: Vec<Option<mpsc::UnboundedSender<ToNf>>>,
    /// eNB associations (their [`ToNf::EnbUp`] first) and their latest
    /// eNB-wide PDUs, replayed to new instances.
    enbs: BTreeMap<u64, Vec<ToNf>>,
    /// UEs with an event at an instance, and their events waiting for it.
    busy: HashMap<u32, VecDeque<NfEvent>>,
    /// Events waiting for a restarting instance of their kind (bounded by
    /// [`MAX_HELD`] per slot).
    parked: VecDeque<(Option<u32>, Option<ProcedureKind>, NfEvent)>,
    counters: Counters,
    /// The instances' counter names (bounded: [`MAX_COUNTER_NAMES`]).
    names: HashMap<String, &'static str>,
    /// The slots' cgroups, weighted by `P` (none: no cgroup control here).
    /// After `children`: dropped once they are killed.
    cgroups: Option<super::cgroup::NfCgroups>,
    /// The NF controller (with an idle pool).
    scaling: Option<NfScaling>,
    /// The idle pool's size, kept while instances are at most `max`:
    /// one given to a kind is replaced by a new one, one given back
    /// beyond the size is stopped.
    idle: usize,
    max: usize,
    /// Priority bumps (seed 004 5.3), unless P is fixed: the forwarder's
    /// bookkeeping of consecutive SLO violations per kind.
    bumps: Option<Forwarder<()>>,
    /// The running procedure of each UE: its kind and when it began.
    started: HashMap<u32, (ProcedureKind, Instant)>,
}

impl Drop for NfPool {
    /// The instances killed before their cgroups go.
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.start_kill();
        }
    }
}

/// Distinct counter names taken from instances at most.
const MAX_COUNTER_NAMES: usize = 1024;

impl NfPool {
    /// Listen for instances on loopback and start one per kind of `kinds`
    /// (none: every kind), each kind's `P` from `p`, and `idle` more in the
    /// pool ([`NfPool::tick`] gives them kinds; instances started beyond
    /// those, up to `max` in all, keep the pool at `idle`); their links'
    /// frames come on the returned channel.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        host: u8,
        kinds: &[Option<ProcedureKind>],
        idle: usize,
        max: usize,
        launch: NfLaunch,
        counters: Counters,
        host_cgroup: Option<&std::path::Path>,
        priorities: Priorities,
    ) -> anyhow::Result<(NfPool, mpsc::Receiver<NfIn>)> {
        let Priorities { p, bumps } = priorities;
        let n = kinds.len() + idle;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(4096);
        tokio::spawn(accept(listener, tx, counters.clone()));
        let table = NfTable::new(kinds, idle, p);
        let ps: Vec<f64> = (0..n).map(|i| table.p(i)).collect();
        let cgroups = match super::cgroup::NfCgroups::create(host_cgroup, host, &ps) {
            Ok(c) => {
                println!("mme-host {host}: nf cpu weights by P ({:?}): {ps:?}", c.version());
                Some(c)
            }
            Err(e) => {
                println!("mme-host {host}: nf instances run without cpu weights (no cgroup control: {e:#})");
                None
            }
        };
        let mut pool = NfPool {
            host,
            table,
            launch,
            addr,
            children: (0..n).map(|_| None).collect(),
            links: (0..n).map(|_| None).collect(),
            enbs: BTreeMap::new(),
            busy: HashMap::new(),
            parked: VecDeque::new(),
            counters,
            names: HashMap::new(),
            cgroups,
            scaling: (idle > 0).then(|| NfScaling::new(NfScalingConfig::default())),
            idle,
            max: max.max(n),
            bumps: bumps.map(|slos| Forwarder::new(&slos, ForwarderConfig::default())),
            started: HashMap::new(),
        };
        let mut named: Vec<&str> = kinds.iter().map(|k| k.map_or("any", ProcedureKind::name)).collect();
        named.extend(std::iter::repeat_n("pool", idle));
        println!("mme-host {host}: nf slots {}", named.join(" "));
        for slot in 0..n {
            pool.spawn(slot)?;
        }
        Ok((pool, rx))
    }

    fn spawn(&mut self, slot: usize) -> anyhow::Result<()> {
        let life = self.table.life(slot);
        let mut cmd = tokio::process::Command::new(&self.launch.exe);
        cmd.args(&self.launch.args)
            .args(["--forwarder", &self.addr.to_string(), "--slot", &slot.to_string(), "--life", &life.to_string()])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        if self.launch.stall_first && slot == 0 && life == 0 {
            cmd.arg("--stall-on-s6a");
        }
        if self.launch.stall_mbr == Some(slot) && life == 0 {
            cmd.arg("--stall-on-mbr");
        }
        if let Some(ms) = self.launch.slow_ms {
            cmd.args(["--slow-ms", &ms.to_string()]);
        }
        let child = cmd.spawn()?;
        if slot >= self.children.len() {
            self.children.resize_with(slot + 1, || None);
            self.links.resize_with(slot + 1, || None);
        }
        if let (Some(cg), Some(pid)) = (&self.cgroups, child.id()) {
            if let Err(e) = cg.enter(slot, pid) {
                self.counters.incr("host_nf_cgroup_failed");
                tracing::warn!("NF instance {slot} into its cgroup: {e:#}");
            }
        }
        self.children[slot] = Some(child);
        Ok(())
    }

    /// The NF controller's sample (at the host's load tick): an idle
    /// instance to a kind with a persistent backlog, or one back to the
    /// pool from a kind persistently idle beyond its base count.
    pub fn tick(&mut self) {
        let Some(scaling) = &mut self.scaling else { return };
        let (loads, pool) = self.table.kind_loads();
        let (slot, what, kind) = match scaling.sample(&loads, pool) {
            Some(NfScale::Grow(k)) => (self.table.grow(k), "host_nf_grown", k),
            Some(NfScale::Shrink(k)) => (self.table.shrink(k), "host_nf_shrunk", k),
            None => return,
        };
        let Some(slot) = slot else { return };
        self.counters.incr(what);
        let p = self.table.p(slot);
        if let Some(cg) = &self.cgroups {
            if let Err(e) = cg.set_weight(slot, p) {
                self.counters.incr("host_nf_cgroup_failed");
                tracing::warn!("NF instance {slot}'s weight: {e:#}");
            }
        }
        let to = self.table.kind(slot).map_or("the pool", ProcedureKind::name);
        println!(
            "mme-host {}: nf {slot} to {to} ({}: {})",
            self.host,
            kind.name(),
            what.trim_start_matches("host_nf_")
        );
        self.keep_pool();
    }

    /// The idle pool back to its size: an instance started for each one
    /// given to a kind (up to `max` in all), one stopped for each given
    /// back beyond the size.
    fn keep_pool(&mut self) {
        while self.table.pooled() < self.idle && self.table.instances() < self.max {
            let slot = self.table.add_pooled();
            if let Some(cg) = &self.cgroups {
                if let Err(e) = cg.add_slot(slot, self.table.p(slot)) {
                    self.counters.incr("host_nf_cgroup_failed");
                    tracing::warn!("NF instance {slot}'s cgroup: {e:#}");
                }
            }
            if let Err(e) = self.spawn(slot) {
                self.counters.incr("host_nf_spawn_failed");
                tracing::warn!("starting NF instance {slot} for the pool: {e}");
                self.table.retire_pooled_slot(slot);
                return;
            }
            self.counters.incr("host_nf_started");
            println!("mme-host {}: nf {slot} started for the pool ({} instances)", self.host, self.table.instances());
        }
        while self.table.pooled() > self.idle {
            let Some(slot) = self.table.retire_pooled() else { return };
            let mut pid = 0;
            if let Some(mut child) = self.children[slot].take() {
                pid = child.id().unwrap_or(0);
                let _ = child.start_kill();
                // Reaped in the background.
                tokio::spawn(async move {
                    let _ = child.wait().await;
                });
            }
            self.links[slot] = None;
            self.counters.incr("host_nf_stopped");
            println!(
                "mme-host {}: nf {slot} stopped, pid {pid}, the pool above {} ({} instances)",
                self.host,
                self.idle,
                self.table.instances()
            );
        }
    }

    /// A procedure of `kind` ended `latency` after its first message came:
    /// at each one over its SLO (mme-host --slo-scale), its kind's P
    /// rises by 0.01 up to 1 (seed 004 5.3, `Forwarder::completed`), and
    /// so do its instances' CPU weights (`host_nf_priority_bumped`).
    fn completed(&mut self, kind: ProcedureKind, latency: Duration) {
        let Some(bump) = self.bumps.as_mut().and_then(|f| f.completed(kind, latency.as_secs_f64())) else { return };
        self.counters.incr("host_nf_priority_bumped");
        for slot in self.table.set_p(bump.kind, bump.priority) {
            if let Some(cg) = &self.cgroups {
                if let Err(e) = cg.set_weight(slot, bump.priority) {
                    self.counters.incr("host_nf_cgroup_failed");
                    tracing::warn!("NF instance {slot}'s weight: {e:#}");
                }
            }
        }
    }

    /// Events held at instances or waiting for one.
    pub fn in_flight(&self) -> usize {
        self.table.held() + self.busy.values().map(VecDeque::len).sum::<usize>() + self.parked.len()
    }

    /// An eNB-wide frame for every instance, now and when one starts.
    pub fn enb(&mut self, msg: ToNf) {
        match &msg {
            ToNf::EnbUp { assoc, .. } => {
                self.enbs.insert(*assoc, vec![msg.clone()]);
            }
            ToNf::EnbDown { assoc } => {
                self.enbs.remove(assoc);
            }
            ToNf::EnbS1 { assoc, .. } => {
                // Bounded: the association and its latest few PDUs.
                if let Some(v) = self.enbs.get_mut(assoc) {
                    if v.len() >= 8 {
                        v.remove(1);
                    }
                    v.push(msg.clone());
                }
            }
            ToNf::Event { .. } => return,
        }
        for tx in self.links.iter().flatten() {
            let _ = tx.send(msg.clone());
        }
    }

    /// Take UE-associated `ev` of UE `ue` (none: a new UE) to an instance;
    /// `Some(ev)` back if the forwarder's core must handle it.
    pub fn submit(&mut self, core: &mut Mme, ev: MmeEvent, ue: Option<u32>) -> Option<MmeEvent> {
        if ue.is_some_and(|id| core.find_ue(&UeKey::MmeUeS1apId(id)).is_none()) {
            return Some(ev);
        }
        let event = match NfEvent::from_mme(ev) {
            Ok(e) => e,
            Err(ev) => return Some(ev),
        };
        if let Some(q) = ue.and_then(|id| self.busy.get_mut(&id)) {
            if q.len() >= MAX_UE_WAITING {
                self.counters.incr("host_nf_ue_queue_full");
            } else {
                q.push_back(event);
            }
            return None;
        }
        let kind = self.kind_of(ue, &event);
        self.send(core, ue, kind, event).map(NfEvent::into_mme)
    }

    /// The running procedure's kind; else the one this message starts
    /// (placed anew); else the UE's last procedure's (its instance).
    fn kind_of(&mut self, ue: Option<u32>, event: &NfEvent) -> Option<ProcedureKind> {
        if let Some(k) = ue.and_then(|id| self.table.procedure_of(id)) {
            return k;
        }
        let starts = match event {
            NfEvent::S1 { data, .. } => mobicore_mme::routing::starts(data),
            _ => None,
        };
        match (starts, ue) {
            (Some(k), Some(id)) => {
                self.table.forget(id);
                self.started.insert(id, (k, Instant::now()));
                Some(k)
            }
            (Some(k), None) => Some(k),
            (None, Some(id)) => self.table.last_of(id).flatten(),
            (None, None) => None,
        }
    }

    /// Send `event` of a procedure of `kind` to an instance (or park it for
    /// a restarting one); it back if none lives or has room (the UE's
    /// waiting events are then the caller's).
    fn send(
        &mut self,
        core: &mut Mme,
        ue: Option<u32>,
        kind: Option<ProcedureKind>,
        event: NfEvent,
    ) -> Option<NfEvent> {
        let slot = match self.table.choose(ue, kind) {
            Choice::Slot(i) => i,
            Choice::Wait if self.parked.len() < MAX_HELD * self.table.slots() => {
                self.counters.incr("host_nf_events_parked");
                if let Some(id) = ue {
                    self.busy.entry(id).or_default();
                }
                self.parked.push_back((ue, kind, event));
                return None;
            }
            Choice::Wait | Choice::None => {
                self.counters.incr("host_nf_none_free");
                return Some(event);
            }
        };
        let name = format!("host_nf{slot}_{}_events", kind.map_or("other", ProcedureKind::name));
        self.count(vec![(name, 1)]);
        let record = ue.and_then(|id| core.export_ue(&UeKey::MmeUeS1apId(id), time_now()));
        // In the replica group of the UE (or of the one its INITIAL UE
        // MESSAGE names), as the instance's own draw would be.
        let s1 = match &event {
            NfEvent::S1 { data, .. } => Some(&data[..]),
            _ => None,
        };
        let group = core.group_for(ue, s1);
        let ids = core.draw_free_ids(group, |x| self.table.is_reserved(x));
        let seq = self.table.hold(slot, Held { ue, event: event.clone(), ids, kind, at: Instant::now() });
        if let Some(id) = ue {
            self.busy.entry(id).or_default();
        }
        self.counters.incr("host_nf_events_sent");
        if let Some(tx) = &self.links[slot] {
            // Bounded by MAX_HELD per instance (and the eNBs replayed).
            let _ = tx.send(ToNf::Event { seq, record, ids, event });
        }
        None
    }

    /// A frame from an instance's link. Events for the forwarder's core
    /// go to `local`, actions to carry out (after the store is written)
    /// to `actions`.
    pub fn on_in(&mut self, core: &mut Mme, input: NfIn, local: &mut Vec<MmeEvent>, actions: &mut Vec<MmeAction>) {
        match input {
            NfIn::Up { slot, life, pid, tx } => {
                if slot >= self.table.slots() || self.table.life(slot) != life || self.table.is_live(slot, life) {
                    self.counters.incr("host_nf_bad_hello");
                    return;
                }
                for msgs in self.enbs.values() {
                    for m in msgs {
                        let _ = tx.send(m.clone());
                    }
                }
                self.links[slot] = Some(tx);
                self.table.up(slot, life);
                self.counters.incr("host_nf_up");
                println!("mme-host {}: nf {slot} pid {pid}", self.host);
                // The events that waited for an instance of their kind.
                for (ue, kind, ev) in std::mem::take(&mut self.parked) {
                    if let Some(back) = self.send(core, ue, kind, ev) {
                        local.push(back.into_mme());
                        if let Some(id) = ue {
                            self.flush_local(id, local);
                        }
                    }
                }
            }
            NfIn::Closed { slot, life } => {
                let Some(held) = self.table.failed(slot, life) else { return };
                self.links[slot] = None;
                self.counters.incr("host_nf_failed");
                println!("mme-host {}: nf {slot} gone, {} events taken over", self.host, held.len());
                for h in held {
                    self.counters.incr("host_nf_events_retaken");
                    if let Some(back) = self.send(core, h.ue, h.kind, h.event) {
                        local.push(back.into_mme());
                        if let Some(id) = h.ue {
                            self.flush_local(id, local);
                        }
                    }
                }
                if let Err(e) = self.spawn(slot) {
                    self.counters.incr("host_nf_spawn_failed");
                    tracing::warn!("starting NF instance {slot}: {e}");
                    // Nothing to wait for: the forwarder's core takes them.
                    for (ue, _, ev) in std::mem::take(&mut self.parked) {
                        local.push(ev.into_mme());
                        if let Some(id) = ue {
                            self.flush_local(id, local);
                        }
                    }
                }
            }
            NfIn::Msg { slot, life, msg } => {
                let (seq, done) = match msg {
                    FromNf::Done { seq, records, removed, actions, counters } => {
                        self.count(counters);
                        (seq, Some((records, removed, actions)))
                    }
                    FromNf::Refused { seq } => (seq, None),
                    FromNf::Hello { .. } => {
                        self.counters.incr("host_nf_bad_frame");
                        return;
                    }
                };
                let Some(held) = self.table.answered(slot, life, seq) else {
                    self.counters.incr("host_nf_stale_answer");
                    return;
                };
                match done {
                    Some((records, removed, acts)) => {
                        let time = time_now();
                        for r in records {
                            match core.replace_ue(&r, time) {
                                Ok(id) => {
                                    let settled = core.ue_summary(id).is_some_and(|s| s.settled);
                                    if held.ue.is_none() {
                                        // A new UE's procedure began with this event.
                                        if let Some(k) = held.kind {
                                            self.started.entry(id).or_insert((k, held.at));
                                        }
                                    }
                                    if settled {
                                        self.table.end_procedure(id);
                                        if let Some((k, at)) = self.started.remove(&id) {
                                            self.completed(k, at.elapsed());
                                        }
                                    } else {
                                        self.table.follow(id, slot, held.kind);
                                    }
                                }
                                Err(e) => {
                                    self.counters.incr("host_nf_import_failed");
                                    tracing::warn!("a UE record from NF instance {slot}: {e}");
                                }
                            }
                        }
                        for id in removed {
                            core.drop_ue(id);
                            self.table.forget(id);
                            self.started.remove(&id);
                        }
                        actions.extend(acts.into_iter().map(NfAction::into_mme));
                    }
                    None => {
                        self.counters.incr("host_nf_refused");
                        local.push(held.event.clone().into_mme());
                    }
                }
                // The UE's next event, on its record as now committed.
                if let Some(id) = held.ue {
                    self.next_of(core, id, local);
                }
            }
        }
    }

    /// An instance's counts, into the host's counters.
    fn count(&mut self, counts: Vec<(String, u64)>) {
        for (name, n) in counts {
            let known = self.names.len();
            let name = match self.names.get(&name) {
                Some(&k) => k,
                None if known < MAX_COUNTER_NAMES && name.len() <= 64 => {
                    // Leaked once per name, bounded.
                    let k: &'static str = Box::leak(name.clone().into_boxed_str());
                    self.names.insert(name, k);
                    k
                }
                None => continue,
            };
            self.counters.add(name, n);
        }
    }

    fn next_of(&mut self, core: &mut Mme, id: u32, local: &mut Vec<MmeEvent>) {
        let Some(mut q) = self.busy.remove(&id) else { return };
        let Some(ev) = q.pop_front() else { return };
        if core.find_ue(&UeKey::MmeUeS1apId(id)).is_none() {
            // Gone meanwhile: the core answers as for any unknown UE.
            local.push(ev.into_mme());
            local.extend(q.into_iter().map(NfEvent::into_mme));
            return;
        }
        let kind = self.kind_of(Some(id), &ev);
        match self.send(core, Some(id), kind, ev) {
            None => {
                if let Some(b) = self.busy.get_mut(&id) {
                    b.extend(q);
                }
            }
            Some(back) => {
                local.push(back.into_mme());
                local.extend(q.into_iter().map(NfEvent::into_mme));
            }
        }
    }

    /// The UE's waiting events, to the forwarder's core.
    fn flush_local(&mut self, id: u32, local: &mut Vec<MmeEvent>) {
        if let Some(q) = self.busy.remove(&id) {
            local.extend(q.into_iter().map(NfEvent::into_mme));
        }
    }
}

/// Accept instances' links: each says Hello first, then its frames go to
/// `tx`; a bad frame closes its link (counted).
async fn accept(listener: TcpListener, tx: mpsc::Sender<NfIn>, counters: Counters) {
    while let Ok((stream, _)) = listener.accept().await {
        let (tx, counters) = (tx.clone(), counters.clone());
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let (mut rd, mut wr) = stream.into_split();
            let hello = tokio::time::timeout(std::time::Duration::from_secs(10), read_msg::<FromNf, _>(&mut rd)).await;
            let Ok(Ok(Some(FromNf::Hello { slot, life, pid }))) = hello else {
                counters.incr("host_nf_bad_frame");
                return;
            };
            let (out_tx, mut out_rx) = mpsc::unbounded_channel::<ToNf>();
            tokio::spawn(async move {
                while let Some(m) = out_rx.recv().await {
                    if write_msg(&mut wr, &m).await.is_err() {
                        return;
                    }
                }
            });
            if tx.send(NfIn::Up { slot, life, pid, tx: out_tx }).await.is_err() {
                return;
            }
            loop {
                match read_msg::<FromNf, _>(&mut rd).await {
                    Ok(Some(msg)) => {
                        if tx.send(NfIn::Msg { slot, life, msg }).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        counters.incr("host_nf_bad_frame");
                        tracing::warn!("NF instance {slot}'s link: {e}");
                        break;
                    }
                }
            }
            let _ = tx.send(NfIn::Closed { slot, life }).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(ue: Option<u32>) -> Held {
        let event = NfEvent::S1 { assoc: 1, stream: 1, data: vec![1] };
        Held { ue, event, ids: (ue.unwrap_or(9), 7), kind: None, at: Instant::now() }
    }

    #[test]
    fn a_procedure_goes_to_an_instance_of_its_kind_by_least_q_over_c() {
        use ProcedureKind::*;
        assert_eq!(
            parse_kinds("attach=2, service-request=1,tau").unwrap().0,
            vec![Attach, Attach, ServiceRequest, Tau]
        );
        assert!(parse_kinds("paging=1").is_err() && parse_kinds("attach=x").is_err());
        let p = priorities(&Profiles::default());
        // SLO_min / SLO: the service request's (the tightest) is 1.
        assert!((p[ServiceRequest.index()] - 1.0).abs() < 1e-12 && p[Attach.index()] < 1.0);
        let mut t = NfTable::new(&[Some(Attach), Some(ServiceRequest), Some(ServiceRequest)], 0, p);
        t.up(0, 0);
        t.up(1, 0);
        assert_eq!(t.choose(Some(1), Some(Attach)), Choice::Slot(0));
        assert_eq!(t.choose(Some(1), Some(ServiceRequest)), Choice::Slot(1));
        let mut h = held(Some(1));
        h.kind = Some(ServiceRequest);
        t.hold(1, h);
        // Its procedure follows slot 1; another UE's waits for slot 2 (its
        // kind's only idle one) only while it restarts: slot 1 takes it.
        assert_eq!(t.choose(Some(1), None), Choice::Slot(1));
        assert_eq!(t.procedure_of(1), Some(Some(ServiceRequest)));
        // Ended, its instance still known for what starts nothing known.
        t.end_procedure(1);
        assert_eq!((t.procedure_of(1), t.last_of(1)), (None, Some(Some(ServiceRequest))));
        t.follow(1, 1, Some(ServiceRequest));
        t.up(2, 0);
        assert_eq!(t.choose(Some(2), Some(ServiceRequest)), Choice::Slot(2), "Q/C: the idle one");
        // Eq. 4: the attach instance's share against a busy SR's.
        assert!((t.share(0) - p[0] / (p[0] + p[1])).abs() < 1e-12);
        // Nothing known: any live instance. No live one of a kind being
        // restarted: wait; of a kind no slot takes: any.
        assert!(matches!(t.choose(Some(3), None), Choice::Slot(_)));
        t.failed(0, 0).unwrap();
        assert_eq!(t.choose(Some(3), Some(Attach)), Choice::Wait);
        assert!(matches!(t.choose(Some(3), Some(Detach)), Choice::Slot(1 | 2)));
    }

    #[test]
    fn fixed_priorities_are_parsed_strictly_and_set_p_and_the_cgroup_weights() {
        use super::super::cgroup::{weight, Version};
        use ProcedureKind::*;
        let fixed = parse_priorities("handover=1, service_request=0.25").unwrap();
        assert_eq!(fixed.0[Handover.index()], Some(1.0));
        assert_eq!(fixed.0[ServiceRequest.index()], Some(0.25));
        assert_eq!(fixed.0[Attach.index()], None);
        for bad in [
            "",
            "handover",
            "handover=",
            "handover=x",
            "handover=0",
            "handover=-1",
            "handover=1.5",
            "handover=NaN",
            "handover=inf",
            "paging=1",
            "handover=1,handover=0.5",
        ] {
            assert!(parse_priorities(bad).is_err(), "{bad:?}");
        }
        // The kinds not given keep the profiles' P.
        let base = priorities(&Profiles::default());
        let p = fixed.over(base);
        assert_eq!((p[Handover.index()], p[ServiceRequest.index()]), (1.0, 0.25));
        assert_eq!(p[Attach.index()], base[Attach.index()]);
        // The forwarder's slots take them (an every-kind one keeps 1), and
        // so do their cgroups' weights.
        let mut t = NfTable::new(&[Some(ServiceRequest), Some(Handover), None], 0, p);
        assert_eq!((t.p(0), t.p(1), t.p(2)), (0.25, 1.0, 1.0));
        assert_eq!((weight(Version::V2, t.p(0)), weight(Version::V1, t.p(0))), (250, 256));
        assert_eq!((weight(Version::V2, t.p(1)), weight(Version::V1, t.p(1))), (1000, 1024));
        // Eq. 4 with the service request's busy: the handover's share is 1 / 1.25.
        t.up(0, 0);
        t.hold(0, held(Some(1)));
        assert!((t.share(1) - 0.8).abs() < 1e-12, "{}", t.share(1));
        let s_over_h = parse_priorities("service-request=1,handover=0.1").unwrap().over(base);
        assert_eq!(weight(Version::V1, s_over_h[Handover.index()]), 102);
    }

    /// The idle pool (the NF controller's): a pooled instance takes
    /// nothing, not even as an every-kind one, until given a kind; it goes
    /// back only once it holds nothing and runs no UE's procedure.
    #[test]
    fn a_pooled_instance_takes_nothing_until_given_a_kind_and_goes_back_when_idle() {
        use ProcedureKind::*;
        let mut p = [1.0; ProcedureKind::COUNT];
        p[Attach.index()] = 0.5;
        let mut t = NfTable::new(&[Some(Attach)], 1, p);
        t.up(0, 0);
        t.up(1, 0);
        let s0 = t.hold(0, held(Some(1)));
        assert_eq!(t.choose(None, Some(Attach)), Choice::Slot(0), "the pool takes nothing");
        assert_eq!(t.choose(None, Some(Tau)), Choice::Slot(0), "not even a kind none takes");
        let (loads, pool) = t.kind_loads();
        assert_eq!(loads, [KindLoad { kind: Attach, instances: 1, held: 1, base: 1 }]);
        assert_eq!(pool, 1);

        assert_eq!(t.grow(Attach), Some(1));
        assert_eq!((t.kind(1), t.p(1)), (Some(Attach), 0.5), "its kind's P");
        assert_eq!(t.grow(Attach), None, "the pool is empty");
        assert_eq!(t.choose(None, Some(Attach)), Choice::Slot(1), "least Q/C");
        let s1 = t.hold(1, held(Some(2)));
        assert_eq!(t.kind_loads(), (vec![KindLoad { kind: Attach, instances: 2, held: 2, base: 1 }], 0));

        assert_eq!(t.shrink(Attach), None, "both hold an event");
        assert!(t.answered(1, 0, s1).is_some());
        assert_eq!(t.shrink(Attach), None, "UE 2's procedure still runs there");
        t.end_procedure(2);
        assert_eq!(t.shrink(Attach), Some(1));
        assert_eq!(t.kind(1), None);
        assert_eq!(t.choose(Some(2), Some(Attach)), Choice::Slot(0), "the UE's later messages: elsewhere");
        assert!(t.answered(0, 0, s0).is_some());
        // A bump: the kind's instances' P, and a pooled one's once given it.
        assert_eq!(t.set_p(Attach, 0.51), vec![0]);
        assert_eq!(t.grow(Attach), Some(1));
        assert_eq!(t.p(1), 0.51);
    }

    /// Beyond the pool: a slot for a new pooled instance, a stopped one's
    /// retired (its old life's link end no failure), then reused.
    #[test]
    fn the_pool_gets_new_slots_and_a_stopped_instances_slot_is_retired_then_reused() {
        use ProcedureKind::*;
        let mut t = NfTable::new(&[Some(Attach)], 1, [1.0; ProcedureKind::COUNT]);
        t.up(0, 0);
        t.up(1, 0);
        assert_eq!((t.instances(), t.pooled()), (2, 1));
        assert_eq!(t.grow(Attach), Some(1));
        assert_eq!(t.pooled(), 0);
        let new = t.add_pooled();
        assert_eq!((new, t.instances(), t.pooled()), (2, 3, 1));
        assert_eq!(t.retire_pooled(), None, "not up yet");
        t.up(2, 0);
        assert_eq!(t.choose(None, Some(Attach)), Choice::Slot(0), "the new one is pooled: it takes nothing");
        assert_eq!(t.shrink(Attach), Some(1));
        assert_eq!(t.pooled(), 2);
        // The last pooled slot stops: retired, its life over.
        assert_eq!(t.retire_pooled(), Some(2));
        assert_eq!((t.instances(), t.pooled()), (2, 1));
        assert_eq!(t.failed(2, 0), None, "its link's end is no failure");
        assert!(!t.is_live(2, 1));
        assert_eq!(t.kind_loads().1, 1);
        // Needed again: the retired slot, in its next life.
        assert_eq!(t.add_pooled(), 2);
        assert_eq!((t.life(2), t.instances(), t.pooled()), (1, 3, 2));
        t.up(2, 1);
        assert_eq!(t.grow(Attach), Some(1));
    }

    #[test]
    fn a_procedure_follows_its_instance_and_is_retaken_in_order_when_it_dies() {
        let mut t = NfTable::new(&[None, None], 0, [1.0; ProcedureKind::COUNT]);
        assert_eq!(t.choose(None, None), Choice::None);
        t.up(0, 0);
        t.up(1, 0);
        let a = match t.choose(Some(1), None) {
            Choice::Slot(i) => i,
            c => panic!("{c:?}"),
        };
        t.hold(a, held(Some(1)));
        // The least loaded for a new procedure, the same for UE 1's next.
        let b = match t.choose(Some(2), None) {
            Choice::Slot(i) => i,
            c => panic!("{c:?}"),
        };
        assert_ne!(a, b);
        assert_eq!(t.choose(Some(1), None), Choice::Slot(a));
        t.hold(a, held(Some(3)));
        assert!(t.is_reserved(1) && t.is_reserved(7));
        let gone = t.failed(a, 0).unwrap();
        assert_eq!(gone.iter().map(|h| h.ue).collect::<Vec<_>>(), vec![Some(1), Some(3)]);
        assert!(!t.is_reserved(1));
        assert_eq!(t.choose(Some(1), None), Choice::Slot(b));
        // A late answer of the dead life is stale.
        assert_eq!(t.answered(a, 0, 1), None);
        assert!(!t.is_live(a, 1));
        t.up(a, 1);
        assert!(t.is_live(a, 1));
    }

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_errors() {
        let m = ToNf::Event {
            seq: 3,
            record: Some(vec![1, 2]),
            ids: (5, 6),
            event: NfEvent::S1 { assoc: 1, stream: 2, data: vec![9] },
        };
        let mut buf = Vec::new();
        write_msg(&mut buf, &m).await.unwrap();
        let mut r: &[u8] = &buf;
        assert_eq!(read_msg::<ToNf, _>(&mut r).await.unwrap(), Some(m));
        let mut long: &[u8] = &(MAX_NF_FRAME as u32 + 1).to_be_bytes();
        assert!(matches!(read_msg::<ToNf, _>(&mut long).await, Err(NfReadError::TooLong(_))));
        let mut bad: &[u8] = &[0, 0, 0, 2, b'{', b'x'];
        assert!(matches!(read_msg::<ToNf, _>(&mut bad).await, Err(NfReadError::Bad(_))));
    }
}
