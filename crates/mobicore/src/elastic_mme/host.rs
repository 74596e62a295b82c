//! An MME host of the elastic MME (issue 13 item 2): a process running
//! today's MME core for the UEs the front end routes to it, with its own
//! S6a and S11 clients, and its UE contexts in a store
//! ([`mobicore_mme::stored::StoredUes`], Redis or embedded, cold or hot).
//!
//! At a UE-associated message for a UE it does not hold (its MME-UE-S1AP-ID
//! or S-TMSI names none of its UEs: the UE was another host's, gone), it
//! loads the UE from the store first, and sends again the S6a or S11
//! request the record's step awaits the answer to (that answer went to
//! the host that is gone; `Mme::resume_taken_over`); after every event it writes what the
//! replication mode asks for, and only then sends what the event produced,
//! so that whatever an eNB answers to finds the state it follows from in
//! the store (write-ahead). Under load the S1 frames queued from the
//! front end are handled together (up to `GROUP`) before one such write
//! (group commit: the UEs' records pipelined to Redis, one replicated
//! batch; `host_s1_grouped`), the messages of S1 connections under way
//! before INITIAL UE MESSAGEs ([`Inbox`]). The core allocates MME-UE-S1AP-IDs (its S11
//! TEIDs) and M-TMSIs under the host's number (`host_prefix`), which is how
//! the front end routes.
//!
//! # S11 after a takeover
//! A host's S11 goes through the front end, which owns the MME's one S11
//! address: the host's S11 client sends there, over the host's link to it
//! ([`Frame::S11`], [`S11OverLink`]; the front end renumbers the requests
//! it relays), and its Sender F-TEID for Control Plane
//! names the front end's IP (TS 29.274 7.2.1). The S-GW thus knows one MME
//! address for a UE whichever host serves it, and its requests (Downlink
//! Data Notification, TS 29.274 7.2.11.1) reach the host that serves the
//! UE now: the front end routes them by the MME S11 TEID, which is the
//! UE's MME-UE-S1AP-ID and so carries its host (the heir of a dead one).
//! A UE keeps that TEID across a takeover (it is in the stored context);
//! a DDN for a UE this host does not hold loads it by the TEID.
//!
//! # Being drained
//! When the front end drains the host (seed 004 5.2 "Scaling": a scale
//! in), it sends no new procedure to it ([`Frame::Drain`]); the host goes
//! on serving what runs and, once no UE has a procedure running, no S6a
//! or S11 answer is awaited and every record is written, says
//! [`Frame::Drained`]. From then on it handles
//! nothing: a UE-associated message still on its way goes back to the
//! front end ([`Frame::Bounce`]), which routes it to the heir now serving
//! the host's UEs; an S-GW request is dropped (its retransmission reaches
//! the heir); no timer runs (the heir re-arms the UEs' timers from their
//! records). At [`Frame::Stop`] it exits.
//!
//! # A host-local store
//! With `--store local` ([`LocalReplica`]) the store is this host's own,
//! and every sync's writes go to its replica host right after the sync,
//! before what the event sends; the front end's replication frames
//! ([`Frame::ReplicateTo`], [`Frame::Replica`], [`Frame::Inherit`], [`Frame::Adopt`]) go to
//! it. With a shared store they are ignored.
//!
//! # Held UEs
//! When the front end places every procedure (`mme-frontend --placement
//! procedure`, hosts on one shared store; it says [`Frame::Track`]), it
//! must know which host holds a UE in a procedure or an S1 connection,
//! so that one host at a time serves it: the host says [`Frame::Holding`]
//! when an event leaves a UE busy (before anything of it goes out), and
//! [`Frame::Released`] once it is at rest again (registered, ECM-IDLE, no
//! procedure) and its record written. A UE of another host (placed here,
//! loaded at its INITIAL UE MESSAGE) is held even if that message left
//! it at rest, and dropped then; the front end tells its owner's host to
//! read it again ([`Frame::Refresh`]), so that its timers run there
//! between procedures. The owner's host drops its own copy of a UE at
//! rest when told it was placed away ([`Frame::Lent`]): no timer of that
//! stale copy fires while the other host holds it; and reads it again if
//! the placement ends with no host holding it ([`Frame::Returned`]). UEs of a host this host takes
//! over that another host holds ([`Frame::Away`]), or was given a
//! procedure of and has not said it holds yet ([`Frame::AwayPlaced`]),
//! are not adopted: their refresh (or return) brings them. With a host-local store, a visitor's record comes
//! from this host's copy of its owner's store ([`visit`]; none: the
//! message goes back, [`Frame::Bounce`]), and goes back to the owner at
//! rest ([`Frame::WriteBack`], deleted here); a write-back to this host
//! is put in its own store, and a [`Frame::Copied`] updates its copy.
//!
//! # Load reports
//! Every `every` (`--load-every-ms`) the host sends the front end its
//! moving averages ([`super::load::LoadMeter`]): the frames from the front
//! end waiting for the core, and its CPU use of its budget, for skewed
//! consistent hashing (seed 004 Algorithm 1, Eq. 1).

use super::inbox::Inbox;
use super::load::{process_cpu, CpuSample, LoadMeter};
use super::nf::{NfIn, NfPool, ToNf};
use super::replica::LocalReplica;
use super::wire::{buffered, read_frame, write_frame, write_queued, Frame};
use bytes::Bytes;
use mobicore_common::counters::Counters;
use mobicore_common::s11::{S11IncomingRequest, S11Link};
use mobicore_common::s6a::S6aLink;
use mobicore_common::sctp_api::AssocId;
use mobicore_common::Groups;
use mobicore_elastic::router::UeName;
use mobicore_gtp::client::PeerVia;
use mobicore_mme::context_codec::TimeBase;
use mobicore_mme::routing::{self, Uplink};
use mobicore_mme::stored::{Hold, Replication, StoredError, StoredUes};
use mobicore_mme::transfer::{self, UeKey};
use mobicore_mme::{Mme, MmeAction, MmeEvent, Peers};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};

/// Frames queued towards the front end at most.
const QUEUE: usize = 4096;
/// S1 frames of the front end handled before one sync at most: under
/// load, one store write (and one replicated batch) for several messages.
const GROUP: usize = 32;

fn time_now() -> TimeBase {
    let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    TimeBase { now: Instant::now(), unix_ms }
}

/// Where a host is in a drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drain {
    No,
    Draining,
    Drained,
}

/// The UEs this host holds, told to the front end (see "Held UEs").
struct Holds {
    /// The front end tracks them ([`Frame::Track`]).
    on: bool,
    /// By MME-UE-S1AP-ID, with the M-TMSI last told.
    held: HashMap<u32, Option<u32>>,
    /// Held UEs at rest whose record waits for a store that failed.
    resting: HashSet<u32>,
    /// UEs of hosts this host takes over that another host holds
    /// ([`Frame::Away`]): not adopted. At most [`MAX_AWAY`].
    away: HashSet<u32>,
    /// M-TMSIs of such UEs placed on another host that has not said it
    /// holds them ([`Frame::AwayPlaced`]): not adopted by the next
    /// adoption. At most [`MAX_AWAY`].
    away_placed: HashSet<u32>,
}

/// UEs away ([`Holds::away`]) at most: the front end's table.
const MAX_AWAY: usize = 1 << 20;

impl Holds {
    fn new() -> Holds {
        Holds {
            on: false,
            held: HashMap::new(),
            resting: HashSet::new(),
            away: HashSet::new(),
            away_placed: HashSet::new(),
        }
    }

    /// The UEs the last events touched, if tracked (taken before the sync
    /// that clears the journal).
    fn touched(&self, core: &Mme) -> Vec<u32> {
        match self.on {
            true => core.touched().collect(),
            false => Vec::new(),
        }
    }

    /// Says Holding for each of `touched` newly busy, or held with a new
    /// M-TMSI (a GUTI reallocated: the UE may come by either now).
    fn hold(&mut self, core: &Mme, touched: &[u32], to_fe: &mpsc::Sender<Frame>, counters: &Counters) {
        for &id in touched {
            let m_tmsi = core.ue_mtmsi(id);
            match (self.held.get(&id), core.ue_at_rest(id)) {
                (Some(&told), _) if told == m_tmsi || m_tmsi.is_none() => continue,
                (Some(_), _) => {}
                // A visitor at rest is held too, to be released (and
                // dropped) at once: its owner's host reads it again.
                (None, Some(true)) if core.owns_identifier(id) => continue,
                (None, None) => continue,
                (None, _) => {}
            }
            if self.held.insert(id, m_tmsi).is_none() {
                counters.incr("host_hold_started");
            }
            tracing::debug!(id, ?m_tmsi, "holding");
            if to_fe.try_send(Frame::Holding { id, m_tmsi }).is_err() {
                counters.incr("host_frontend_queue_full");
            }
        }
    }

    /// Hot replication with a host-local store: the record of each
    /// visitor of `touched` goes to its owner's host after every message
    /// too ([`Frame::WriteBack`], kept here), before what the message
    /// sends, so that the owner's host carries on mid-procedure if this
    /// host dies (its refresh resumes the UE).
    async fn mirror(
        &self,
        core: &Mme,
        stored: &StoredUes,
        touched: &[u32],
        to_fe: &mpsc::Sender<Frame>,
        counters: &Counters,
    ) {
        for &id in touched {
            if !self.held.contains_key(&id) || core.owns_identifier(id) {
                continue;
            }
            match stored.written(core, id).await {
                Ok(writes) if writes.is_empty() => {}
                Ok(writes) => {
                    counters.incr("host_visitor_mirrored");
                    if to_fe.try_send(Frame::WriteBack { id, writes }).is_err() {
                        counters.incr("host_frontend_queue_full");
                    }
                }
                Err(e) => tracing::warn!(id, "reading a visitor's record: {e}"),
            }
        }
    }

    /// Says Released for each held UE of `touched` (or waiting) now at
    /// rest or gone, once the store has its record; drops other hosts'
    /// (with a host-local store, their records handed back first).
    #[allow(clippy::too_many_arguments)]
    async fn release(
        &mut self,
        core: &mut Mme,
        stored: &mut StoredUes,
        mut replica: Option<&mut LocalReplica>,
        touched: &[u32],
        to_fe: &mpsc::Sender<Frame>,
        counters: &Counters,
    ) {
        let mut resting: Vec<u32> = touched.iter().copied().filter(|id| self.held.contains_key(id)).collect();
        resting.extend(self.resting.drain());
        resting.retain(|&id| core.ue_at_rest(id) != Some(false));
        if stored.unsynced() {
            self.resting.extend(resting);
            return;
        }
        for id in resting {
            if self.held.remove(&id).is_none() {
                continue;
            }
            // Its own heir now, it was left out of an adoption: no more.
            self.away.remove(&id);
            if !core.owns_identifier(id) {
                if let Some(r) = replica.as_deref_mut() {
                    hand_back(core, stored, r, id, to_fe, counters).await;
                }
                stored.release(core, &UeKey::MmeUeS1apId(id));
                counters.incr("host_visitor_dropped");
            }
            tracing::debug!(id, "released");
            counters.incr("host_hold_released");
            if to_fe.try_send(Frame::Released { id }).is_err() {
                counters.incr("host_frontend_queue_full");
            }
        }
    }
}

/// A visitor at rest (host-local stores): its record and index keys go
/// back to the host serving its identifiers, before its Released (the
/// front end relays them ahead of that host's refresh), and are deleted
/// here.
async fn hand_back(
    core: &mut Mme,
    stored: &mut StoredUes,
    replica: &mut LocalReplica,
    id: u32,
    to_fe: &mpsc::Sender<Frame>,
    counters: &Counters,
) {
    match stored.hand_back(core, id).await {
        Ok(writes) if writes.is_empty() => counters.incr("host_hand_back_empty"),
        Ok(writes) => {
            counters.incr("host_handed_back");
            if writes.iter().all(|(_, v)| v.is_empty()) {
                // Detached here: its keys go back as deletes.
                counters.incr("host_detached_away");
            }
            replica.handed_back(&writes);
            if to_fe.try_send(Frame::WriteBack { id, writes }).is_err() {
                counters.incr("host_frontend_queue_full");
            }
        }
        Err(e) => {
            counters.incr("host_hand_back_failed");
            tracing::warn!(id, "handing a visitor's record back: {e}");
        }
    }
}

/// What a host with a host-local store needs to take visitors (procedures
/// placed, [`Frame::Track`]): its copies, its link to the front end.
struct Visiting<'a> {
    replica: &'a LocalReplica,
    to_fe: &'a mpsc::Sender<Frame>,
}

/// With a host-local store, an INITIAL UE MESSAGE (S-TMSI `m`) of a UE whose
/// identifiers another host holds (the front end placed its procedure
/// here, this host holding a copy of that host's store): the UE's record
/// is taken into this host's own store from the copy, so that it loads as
/// any UE. False if no copy holds it (this host was just named a replica
/// host, its full copy still on its way): the message is for the front
/// end to route to the owner's host.
async fn visit(core: &Mme, stored: &mut StoredUes, v: &Visiting<'_>, m: u32, counters: &Counters) -> bool {
    if core.owns_identifier(m) || core.find_ue(&UeKey::MTmsi(m)).is_some() {
        return true;
    }
    let writes = v.replica.lend(m);
    if writes.is_empty() {
        counters.incr("host_visitor_not_in_copy");
        return false;
    }
    match stored.take_back(core, &writes).await {
        Ok(_) => {
            counters.incr("host_visitor_from_copy");
            true
        }
        Err(e) => {
            tracing::warn!(m, "taking a visitor from a copy: {e}");
            false
        }
    }
}

/// How a host reports its load.
#[derive(Clone, Copy, Debug)]
pub struct LoadReporting {
    pub every: Duration,
    /// Cores the host may use (its cgroup's `cpu.max`), if bounded.
    pub budget: Option<f64>,
}

/// The host's S11 messages with the front end, carried by the link
/// ([`Frame::S11`]) rather than a socket of each: made before the S11
/// client, whose end ([`PeerVia`]) queues its messages for the front end
/// with the host's other frames (the one write of a wake) and takes the
/// front end's from the link's reader.
pub struct S11OverLink {
    to_fe: mpsc::Sender<Frame>,
    out_rx: mpsc::Receiver<Frame>,
    s11_in: mpsc::Sender<Bytes>,
}

impl S11OverLink {
    /// The queue of frames to the front end, and the S11 client's end.
    pub fn new() -> (S11OverLink, PeerVia) {
        let (to_fe, out_rx) = mpsc::channel(QUEUE);
        let (s11_in, recv) = mpsc::channel(QUEUE);
        // Weak: the writer ends when the host lets its queue go.
        let weak = to_fe.downgrade();
        let send = Box::new(move |data| weak.upgrade().is_some_and(|tx| tx.try_send(Frame::S11 { data }).is_ok()));
        (S11OverLink { to_fe, out_rx, s11_in }, PeerVia { send, recv })
    }
}

/// Run host `host` (1..=254) with `core` (its `host_prefix` set) over
/// `stored`, connected to the front end by `frontend`, until shutdown or
/// until the front end goes. `s11` is the link of the host's S11 client,
/// whose messages with the front end (the MME's S11 address) go over
/// `frontend` through `s11_over_link`. With `nf` the host is its NF
/// instances' forwarder ([`super::nf`]).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    host: u8,
    mut core: Mme,
    mut stored: StoredUes,
    mut replica: Option<LocalReplica>,
    frontend: super::link::Link,
    s6a: S6aLink,
    s11: S11Link,
    s11_over_link: S11OverLink,
    load: LoadReporting,
    counters: Counters,
    nf: Option<(NfPool, mpsc::Receiver<NfIn>)>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let (mut nf, mut nf_rx) = match nf {
        Some((p, rx)) => (Some(p), Some(rx)),
        None => (None, None),
    };
    // Events an NF instance gave back for the core; the instances' actions.
    let mut local: Vec<MmeEvent> = Vec::new();
    let mut nf_actions: Vec<MmeAction> = Vec::new();
    let super::link::Link { rd, mut wr } = frontend;
    let mut rd = buffered(rd);
    write_frame(&mut wr, &Frame::Hello { host, local: replica.is_some() }).await?;
    let S11OverLink { to_fe, mut out_rx, s11_in } = s11_over_link;
    let (in_tx, mut from_fe) = mpsc::channel::<Frame>(QUEUE);
    let reader_counters = counters.clone();
    tokio::spawn(async move {
        loop {
            match read_frame(&mut rd).await {
                // Straight to the S11 client; lost if it lags (its peer's
                // or its own T3 sends again).
                Ok(Some(Frame::S11 { data })) => {
                    if s11_in.try_send(data).is_err() {
                        reader_counters.incr("host_s11_queue_full");
                    }
                }
                Ok(Some(f)) => {
                    if in_tx.send(f).await.is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    reader_counters.incr("host_bad_frame");
                    tracing::warn!("front end connection: {e}");
                    break;
                }
            }
        }
    });
    let writer = tokio::spawn(async move {
        if write_queued(&mut wr, &mut out_rx).await.is_ok() {
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut wr).await;
        }
    });

    let (mut peers, mut peer_events) = Peers::new(s6a, s11, counters.clone());
    let started = Instant::now();
    let mut meter = LoadMeter::new(load.budget);
    let mut report_tick = tokio::time::interval(load.every.max(Duration::from_millis(1)));
    report_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut drain = Drain::No;
    let mut holds = Holds::new();
    // The front end's frames taken from its queue, in the order the core
    // takes them (messages of connections under way first), and which S1
    // frames are handled.
    let mut inbox = Inbox::new();
    // The INITIAL UE MESSAGEs of this round whose UE was loaded for them.
    let mut claimed: Vec<Claimed> = Vec::new();
    // S1 frames said handled.
    let mut s1_handled = 0u64;
    loop {
        // A drained host's UEs are its heir's: no timer runs here.
        let deadline = core.poll_timeout().filter(|_| drain != Drain::Drained);
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        // Answers and timers before new frames: they finish procedures
        // already running, and a host fed frames without pause (other
        // hosts' replicated writes, new attaches) must not leave them
        // waiting until the eNBs give up.
        tokio::select! {
            biased;
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return Ok(());
                }
                continue;
            }
            Some(input) = recv_nf(&mut nf_rx) => {
                if let Some(p) = &mut nf {
                    p.on_in(&mut core, input, &mut local, &mut nf_actions);
                }
            }
            Some(ev) = peer_events.answers.recv() => {
                let ue = match &ev {
                    MmeEvent::S6a { ue, .. } | MmeEvent::S11 { ue, .. } => Some(ue.mme_ue_s1ap_id),
                    _ => None,
                };
                match ue {
                    Some(id) => route(&mut core, &mut nf, ev, Some(id)),
                    None => core.handle(Instant::now(), ev),
                }
            }
            Some(inc) = peer_events.s11_incoming.recv() => {
                if drain == Drain::Drained {
                    // Unanswered: the S-GW's retransmission reaches the heir.
                    counters.incr("host_drained_s11_dropped");
                    continue;
                }
                let S11IncomingRequest::DownlinkDataNotification(ddn) = &inc.request;
                let teid = ddn.mme_teid.0;
                ensure_held(&mut core, &mut stored, UeKey::MmeUeS1apId(teid)).await;
                let ev = peers.s11_request(inc);
                route(&mut core, &mut nf, ev, Some(teid));
            }
            Some(inc) = peer_events.s6a_incoming.recv() => core.handle(Instant::now(), peers.s6a_request(inc)),
            _ = sleep => core.handle_timeout(Instant::now()),
            _ = report_tick.tick() => {
                if let Some(p) = &mut nf {
                    p.tick();
                }
                meter.sample(CpuSample { wall: started.elapsed(), cpu: process_cpu() }, from_fe.len() + inbox.len());
                if let Some(f) = meter.frame() {
                    match to_fe.try_send(f) {
                        Ok(()) => counters.incr("host_load_report_sent"),
                        Err(_) => counters.incr("host_frontend_queue_full"),
                    }
                }
                // Draining: whether it is quiet now is looked at below too
                // (an answer's wait ends just after its event). Writes the
                // store failed are tried again below, events or not.
                if drain != Drain::Draining && !stored.unsynced() {
                    continue;
                }
            }
            taken = async {
                match inbox.is_empty() {
                    true => from_fe.recv().await.map(|f| inbox.push(f)),
                    false => Some(()),
                }
            } => {
                let Some(()) = taken else { anyhow::bail!("the front end closed the connection") };
                while inbox.len() < QUEUE {
                    match from_fe.try_recv() {
                        Ok(f) => inbox.push(f),
                        Err(_) => break,
                    }
                }
                let (seq, frame) = inbox.pop().expect("a frame was taken");
                // Sent again: an INITIAL UE MESSAGE the host took over is
                // dropped (it counts as handled), else it is an S1 frame.
                let frame = match frame {
                    Frame::S1Again { assoc, data, .. } if core.taken_over_initial(AssocId(assoc), &data) => {
                        counters.incr("host_initial_again_dropped");
                        None
                    }
                    Frame::S1Again { assoc, stream, data } => Some(Frame::S1 { assoc, stream, data }),
                    f => Some(f),
                };
                match frame {
                    None => inbox.handled(seq.expect("an S1 frame is numbered")),
                    Some(frame) => match frame {
                        Frame::Drain if drain == Drain::No => {
                            drain = Drain::Draining;
                            println!("mme-host {host}: draining ({} UEs in a procedure)", core.busy_ues());
                        }
                        Frame::Refused { why } => anyhow::bail!("the front end refused host {host}: {why}"),
                        Frame::Stop => {
                            // What it gave back goes out before it exits.
                            drop(to_fe);
                            let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
                            println!("mme-host {host}: stopped by the front end");
                            return Ok(());
                        }
                        Frame::S1 { assoc, stream, data } if drain == Drain::Drained => {
                            inbox.handled(seq.expect("an S1 frame is numbered"));
                            if matches!(routing::uplink(assoc, &data), Uplink::Ue(_)) {
                                counters.incr("host_drained_bounced");
                                if to_fe.try_send(Frame::Bounce { assoc, stream, data }).is_err() {
                                    counters.incr("host_frontend_queue_full");
                                }
                            }
                            continue;
                        }
                        Frame::ReplicateTo { .. }
                        | Frame::Replica { .. }
                        | Frame::Inherit { .. }
                        | Frame::Adopt { .. } => {
                            let gone = match frame {
                                Frame::Inherit { host, groups } | Frame::Adopt { host, groups } => Some((host, groups)),
                                _ => None,
                            };
                            if let Some(r) = &mut replica {
                                r.on_frame(frame, &to_fe).await;
                            }
                            if let Some((gone, groups)) = gone {
                                core.adopt_prefix(gone, groups);
                                adopt(&mut core, &mut stored, &counters, (host, gone, groups), &mut holds).await;
                            }
                        }
                        Frame::Track => holds.on = true,
                        Frame::Away { id } if holds.away.len() < MAX_AWAY => {
                            holds.away.insert(id);
                        }
                        Frame::AwayPlaced { m_tmsi } if holds.away_placed.len() < MAX_AWAY => {
                            holds.away_placed.insert(m_tmsi);
                        }
                        Frame::Away { .. } | Frame::AwayPlaced { .. } => counters.incr("host_away_full"),
                        // Held here: this copy is the newest.
                        Frame::Refresh { id, resume } if !holds.held.contains_key(&id) => {
                            holds.away.remove(&id);
                            refresh(&mut core, &mut stored, &counters, UeKey::MmeUeS1apId(id), resume).await
                        }
                        Frame::Lent { m_tmsi } => lent(&mut core, &mut stored, &holds, &counters, m_tmsi),
                        // Here already (it came back by another way): current.
                        Frame::Returned { m_tmsi } if core.find_ue(&UeKey::MTmsi(m_tmsi)).is_none() => {
                            refresh(&mut core, &mut stored, &counters, UeKey::MTmsi(m_tmsi), false).await
                        }
                        Frame::Returned { .. } => counters.incr("host_returned_present"),
                        // Values of a host's store this host holds a copy of,
                        // ahead of its replicated write.
                        Frame::Copied { owner, writes } => {
                            if let Some(r) = &mut replica {
                                r.copied(owner, &writes);
                            }
                        }
                        // A visitor's record, for this host's own store (its
                        // Refresh follows).
                        Frame::WriteBack { id, writes } if replica.is_some() => {
                            match stored.take_back(&core, &writes).await {
                                Ok(n) if n > 0 => {
                                    counters.incr("host_taken_back");
                                    if writes.iter().all(|(_, v)| v.is_empty()) {
                                        counters.incr("host_taken_back_deleted");
                                    }
                                }
                                Ok(_) => {}
                                Err(e) => tracing::warn!(id, "taking a visitor's record back: {e}"),
                            }
                        }
                        frame @ Frame::S1 { .. } => {
                            inbox.handled(seq.expect("an S1 frame is numbered"));
                            let visiting = match (&replica, holds.on) {
                                (Some(replica), true) => Some(Visiting { replica, to_fe: &to_fe }),
                                _ => None,
                            };
                            let visiting = visiting.as_ref();
                            claimed.extend(on_frame(&mut core, &mut stored, &counters, &mut nf, visiting, frame).await);
                            // Group commit: the UE-associated S1 frames queued now
                            // are handled before the one sync (nothing of them
                            // goes out before it); any other frame waits for it.
                            for _ in 1..GROUP {
                                let Some((seq, f)) = inbox.pop_ue_s1() else { break };
                                inbox.handled(seq);
                                counters.incr("host_s1_grouped");
                                claimed.extend(on_frame(&mut core, &mut stored, &counters, &mut nf, visiting, f).await)
                            }
                        }
                        frame => {
                            claimed.extend(on_frame(&mut core, &mut stored, &counters, &mut nf, None, frame).await)
                        }
                    },
                }
            }
        }
        for ev in local.drain(..) {
            core.handle(Instant::now(), ev);
        }
        if drain != Drain::Drained && core.poll_timeout().is_some_and(|d| d <= Instant::now()) {
            core.handle_timeout(Instant::now());
        }
        // Told before anything of the UEs goes out; the journal the sync clears.
        let touched = holds.touched(&core);
        holds.hold(&core, &touched, &to_fe, &counters);
        // Write-ahead: the store first, then what the event sends.
        let report = stored.sync(&mut core, time_now()).await;
        for c in claimed.drain(..).filter(|c| report.conflicts.contains(&c.id)) {
            // Its claim lost: the host that wrote the UE takes it.
            counters.incr("host_claim_bounced");
            let Claimed { assoc, stream, data, .. } = c;
            if to_fe.try_send(Frame::Bounce { assoc, stream, data }).is_err() {
                counters.incr("host_frontend_queue_full");
            }
        }
        if !report.conflicts.is_empty() {
            tracing::warn!(conflicts = ?report.conflicts, "UE records written by another host meanwhile: dropped here");
            // What an NF instance produced for them goes no more than the core's.
            let before = nf_actions.len();
            nf_actions.retain(|a| transfer::action_ue(a).is_none_or(|id| !report.conflicts.contains(&id)));
            counters.add("store_conflict_actions_withdrawn", (before - nf_actions.len()) as u64);
        }
        // Replicated before what the event sends, as the store was written.
        if let Some(r) = &mut replica {
            r.flush(&to_fe);
            if stored.mode() == Replication::Hot {
                holds.mirror(&core, &stored, &touched, &to_fe, &counters).await;
            }
        }
        // The S1 frames taken are handled and written (replicated just
        // ahead): the front end need not route them again if this host
        // dies. NF instances' work is handled once none is in flight.
        if s1_handled < inbox.upto() && nf.as_ref().is_none_or(|p| p.in_flight() == 0) {
            match to_fe.try_send(Frame::Handled { upto: inbox.upto() }) {
                Ok(()) => s1_handled = inbox.upto(),
                Err(_) => counters.incr("host_frontend_queue_full"),
            }
        }
        nf_actions.reverse();
        while let Some(action) = core.poll_action().or_else(|| nf_actions.pop()) {
            match action {
                MmeAction::S1Send { assoc, stream, data } => {
                    if to_fe.try_send(Frame::S1 { assoc: assoc.0, stream, data }).is_err() {
                        counters.incr("host_frontend_queue_full");
                    }
                }
                // The front end owns the associations.
                MmeAction::S1Abort { .. } => counters.incr("host_abort_not_forwarded"),
                peer => peers.dispatch(peer).await,
            }
        }
        // Held UEs at rest (or gone: detached, lost a compare-and-set).
        holds.release(&mut core, &mut stored, replica.as_mut(), &touched, &to_fe, &counters).await;
        // Quiet: no procedure runs, no S6a or S11 answer is awaited, every
        // record is written. Looked at only while draining: `busy_ues`
        // reads every UE (it was 40% of a loaded host's CPU after each event).
        let quiet = || {
            core.busy_ues() == 0
                && peers.in_flight() == 0
                && peer_events.answers.is_empty()
                && nf.as_ref().is_none_or(|p| p.in_flight() == 0)
        };
        if drain == Drain::Draining && !stored.unsynced() && quiet() {
            drain = Drain::Drained;
            counters.incr("host_drained");
            println!("mme-host {host}: drained");
            if to_fe.send(Frame::Drained).await.is_err() {
                anyhow::bail!("the front end closed the connection");
            }
        }
    }
}

/// The UE `key` names is in `core`, loaded from the store if it was not
/// ([`StoredUes::hold`], which counts what it found).
async fn ensure_held(core: &mut Mme, stored: &mut StoredUes, key: UeKey) {
    stored.hold(core, &key, time_now()).await;
}

/// A procedure of this host's UE `m_tmsi` was placed on another host
/// ([`Frame::Lent`]): the UE is dropped here if it is at rest, its record
/// written, so that no timer of this copy fires while the other host
/// holds it; read again at its refresh. A UE busy here (paged, say: its
/// service request comes back here) stays; the store's compare-and-set
/// settles which host's write counts.
fn lent(core: &mut Mme, stored: &mut StoredUes, holds: &Holds, counters: &Counters, m_tmsi: u32) {
    let key = UeKey::MTmsi(m_tmsi);
    match core.find_ue(&key) {
        None => counters.incr("host_lent_absent"),
        Some(id) if holds.held.contains_key(&id) || core.ue_at_rest(id) != Some(true) || stored.unsynced() => {
            tracing::debug!(id, held = holds.held.contains_key(&id), at_rest = ?core.ue_at_rest(id), "lent, busy here");
            counters.incr("host_lent_busy")
        }
        Some(id) => {
            tracing::debug!(id, m_tmsi, "lent");
            stored.release(core, &key);
            counters.incr("host_lent_dropped");
        }
    }
}

/// Another host has written the record of the UE `key` names (it visited
/// there, or the host it visited is gone: `resume`; or its placement
/// there ended before that host held it): read it again, or drop the UE
/// if it is no longer stored (detached there). With `resume` the request
/// its step awaits goes again from here ([`Mme::resume_taken_over`]).
async fn refresh(core: &mut Mme, stored: &mut StoredUes, counters: &Counters, key: UeKey, resume: bool) {
    tracing::debug!(?key, resume, "refresh");
    match stored.load(core, &key, time_now()).await {
        Ok(id) => {
            counters.incr("host_ue_refreshed");
            match resume {
                true => {
                    core.resume_taken_over(id);
                }
                // Written back, it would race the next host to hold it.
                false => core.untouch(id),
            }
        }
        Err(StoredError::NotFound(_)) => {
            stored.release(core, &key);
            counters.incr("host_ue_refresh_gone");
        }
        Err(e) => {
            // Its copy here is stale: dropped, read at its next message.
            stored.release(core, &key);
            counters.incr("host_ue_refresh_failed");
            tracing::warn!(?key, "reading a UE again: {e}");
        }
    }
}

/// This host is the heir of host `gone`'s UEs of `groups` (dead or
/// drained): every such UE in the store is loaded now
/// ([`StoredUes::adopt`]), but those another host holds or was given a
/// procedure of (`holds`' away UEs; the placed ones by their IMSIs).
async fn adopt(
    core: &mut Mme,
    stored: &mut StoredUes,
    counters: &Counters,
    (host, gone, groups): (u8, u8, Groups),
    holds: &mut Holds,
) {
    let mut placed = HashSet::new();
    for m in std::mem::take(&mut holds.away_placed) {
        if let Ok(Some(imsi)) = stored.imsi_of(&UeKey::MTmsi(m)).await {
            placed.insert(imsi.as_str().as_bytes().to_vec());
        }
    }
    let away = |id: u32, imsi: &[u8]| holds.away.contains(&id) || placed.contains(imsi);
    match stored.adopt(core, gone, groups, time_now(), away).await {
        Ok(n) => println!(
            "mme-host {host}: adopted {n} UEs of host{gone}, {} of its 256 groups (their timers run here)",
            groups.len()
        ),
        Err(e) => {
            counters.incr("host_adopt_scan_failed");
            tracing::warn!("listing host{gone}'s UEs in the store: {e}");
        }
    }
}

/// The next frame of the NF instances' links (never, without instances).
async fn recv_nf(rx: &mut Option<mpsc::Receiver<NfIn>>) -> Option<NfIn> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// A UE-associated event of UE `ue` (none: a new UE) to an NF instance,
/// or to the core (no instances, or the instances gave it back).
fn route(core: &mut Mme, nf: &mut Option<NfPool>, ev: MmeEvent, ue: Option<u32>) {
    let ev = match nf {
        Some(p) => p.submit(core, ev, ue),
        None => Some(ev),
    };
    if let Some(ev) = ev {
        core.handle(Instant::now(), ev);
    }
}

/// An INITIAL UE MESSAGE whose UE this host loaded from a shared store
/// for it: given back to the front end ([`Frame::Bounce`]) if the claim
/// of the record loses (another host wrote it meanwhile: the owner's
/// host, a timer of its copy firing as the front end placed the UE
/// here), which routes it to the host that holds the UE now.
struct Claimed {
    id: u32,
    assoc: u64,
    stream: u16,
    data: Bytes,
}

/// A frame of the front end for the core; with `visiting`, a visitor's
/// first message is given back if no copy holds the UE ([`visit`]).
/// Returns the message if it loaded its UE from a shared store.
async fn on_frame(
    core: &mut Mme,
    stored: &mut StoredUes,
    counters: &Counters,
    nf: &mut Option<NfPool>,
    visiting: Option<&Visiting<'_>>,
    frame: Frame,
) -> Option<Claimed> {
    let now = Instant::now();
    match frame {
        Frame::EnbUp { assoc, peer, outbound_streams } => {
            if let Some(p) = nf {
                p.enb(ToNf::EnbUp { assoc, peer, outbound_streams });
            }
            core.handle(now, MmeEvent::S1Up { assoc: AssocId(assoc), peer, outbound_streams })
        }
        Frame::EnbDown { assoc } => {
            if let Some(p) = nf {
                p.enb(ToNf::EnbDown { assoc });
            }
            core.handle(now, MmeEvent::S1Down { assoc: AssocId(assoc) })
        }
        Frame::S1 { assoc, stream, data } => {
            let uplink = routing::uplink(assoc, &data);
            if let (Some(v), Uplink::Ue(UeName::Initial { m_tmsi: Some(m), .. })) = (visiting, uplink) {
                if !visit(core, stored, v, m, counters).await {
                    counters.incr("host_visitor_bounced");
                    if v.to_fe.try_send(Frame::Bounce { assoc, stream, data }).is_err() {
                        counters.incr("host_frontend_queue_full");
                    }
                    return None;
                }
            }
            let key = uplink.ue_key();
            let mut claimed = None;
            if let Some(key) = &key {
                if let Uplink::Ue(UeName::Initial { .. }) = uplink {
                    if let (Hold::Loaded(id), true) = (stored.hold(core, key, time_now()).await, stored.claims()) {
                        claimed = Some(Claimed { id, assoc, stream, data: data.clone() });
                    }
                } else {
                    // A UE at rest in the store is not loaded for this.
                    stored.hold_connected(core, key, time_now()).await;
                }
            }
            let held = key.as_ref().and_then(|k| core.find_ue(k));
            tracing::debug!(?uplink, ?held, at_rest = ?held.and_then(|id| core.ue_at_rest(id)), "S1 frame");
            if let (Some(p), Uplink::EnbWide) = (nf.as_mut(), uplink) {
                p.enb(ToNf::EnbS1 { assoc, stream, data: data.to_vec() });
            }
            let ev = MmeEvent::S1Data { assoc: AssocId(assoc), stream, data };
            match uplink {
                // A UE this host holds, or a new one (an INITIAL UE MESSAGE).
                Uplink::Ue(UeName::Initial { .. }) => route(core, nf, ev, held),
                Uplink::Ue(_) if held.is_some() => route(core, nf, ev, held),
                _ => core.handle(Instant::now(), ev),
            }
            return claimed;
        }
        Frame::Drain => {}
        // Replication frames are the loop's; so is a refresh of a visitor
        // (its copy here is the newest).
        Frame::ReplicateTo { .. }
        | Frame::Replica { .. }
        | Frame::Inherit { .. }
        | Frame::Adopt { .. }
        | Frame::Refresh { .. }
        | Frame::Away { .. }
        | Frame::AwayPlaced { .. }
        | Frame::Lent { .. }
        | Frame::Returned { .. }
        | Frame::WriteBack { .. }
        | Frame::Copied { .. }
        | Frame::Track => {}
        // The link's reader gives these to the S11 client.
        Frame::S11 { .. } => {}
        // The main loop makes it an S1 frame or drops it.
        Frame::S1Again { .. } => {}
        Frame::Hello { .. }
        | Frame::Refused { .. }
        | Frame::Holding { .. }
        | Frame::Released { .. }
        | Frame::Handled { .. }
        | Frame::Load { .. }
        | Frame::Drained
        | Frame::Bounce { .. }
        | Frame::Stop => counters.incr("host_bad_frame"),
    }
    None
}
