//! An MME host of the elastic MME (issue 13 item 2): a process running
//! today's MME core for the UEs the front end routes to it, with its own
//! S6a and S11 clients, and its UE contexts in a store
//! ([`mobicore_mme::stored::StoredUes`], Redis or embedded, cold or hot).
//!
//! At a UE-associated message for a UE it does not hold (its MME-UE-S1AP-ID
//! or S-TMSI names none of its UEs: the UE was another host's, gone), it
//! loads the UE from the store first; after every event it writes what the
//! replication mode asks for, and only then sends what the event produced,
//! so that whatever an eNB answers to finds the state it follows from in
//! the store (write-ahead). The core allocates MME-UE-S1AP-IDs (its S11
//! TEIDs) and M-TMSIs under the host's number (`host_prefix`), which is how
//! the front end routes.
//!
//! # S11 after a takeover
//! Each host has its own S11 socket (all on one address, distinct ports:
//! the S/P-GW-C accepts a request for a session from the address that
//! created it). A UE keeps its MME S11 TEID (its MME-UE-S1AP-ID) across a
//! takeover: it is in the stored context. The heir's S11 requests for it
//! go from the heir's socket, and their responses come back there (GTP-C
//! answers the request's source). What does not follow the UE: requests
//! the S-GW starts (Downlink Data Notification) go to the S11 address that
//! created the session, the dead host's, until something tells the S-GW of
//! a new one (TS 29.274 allows a Sender F-TEID for Control Plane in Modify
//! Bearer Request for an MME change; not sent yet). A DDN that does reach
//! a host for a UE it does not hold loads it by its TEID.

use super::keys::{self, Uplink};
use super::wire::{read_frame, write_frame, Frame};
use mobicore_common::counters::Counters;
use mobicore_common::s11::{S11IncomingAnswer, S11IncomingRequest, S11Link};
use mobicore_common::s6a::{S6aIncomingAnswer, S6aLink};
use mobicore_common::sctp_api::AssocId;
use mobicore_elastic::router::UeName;
use mobicore_mme::context_codec::TimeBase;
use mobicore_mme::stored::{StoredError, StoredUes};
use mobicore_mme::transfer::UeKey;
use mobicore_mme::{Mme, MmeAction, MmeEvent};
use std::collections::HashMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};

/// Frames queued towards the front end at most.
const QUEUE: usize = 4096;

fn time_now() -> TimeBase {
    let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    TimeBase { now: Instant::now(), unix_ms }
}

/// Run host `host` (1..=254) with `core` (its `host_prefix` set) over
/// `stored`, connected to the front end by `frontend`, until shutdown or
/// until the front end goes.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    host: u8,
    mut core: Mme,
    mut stored: StoredUes,
    frontend: TcpStream,
    s6a: S6aLink,
    s11: S11Link,
    counters: Counters,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let _ = frontend.set_nodelay(true);
    let (mut rd, mut wr) = frontend.into_split();
    write_frame(&mut wr, &Frame::Hello { host }).await?;
    let (in_tx, mut from_fe) = mpsc::channel::<Frame>(QUEUE);
    let reader_counters = counters.clone();
    tokio::spawn(async move {
        loop {
            match read_frame(&mut rd).await {
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
    let (to_fe, mut out_rx) = mpsc::channel::<Frame>(QUEUE);
    tokio::spawn(async move {
        while let Some(f) = out_rx.recv().await {
            if write_frame(&mut wr, &f).await.is_err() {
                break;
            }
        }
    });

    let S11Link { requests: s11, incoming: mut s11_incoming, notify: s11_notify } = s11;
    let S6aLink { requests: s6a, incoming: mut s6a_incoming } = s6a;
    let (answers_tx, mut answers) = mpsc::unbounded_channel::<MmeEvent>();
    let mut s11_replies: HashMap<u64, oneshot::Sender<S11IncomingAnswer>> = HashMap::new();
    let mut s6a_replies: HashMap<u64, oneshot::Sender<S6aIncomingAnswer>> = HashMap::new();
    let mut next_txn = 0u64;
    loop {
        let deadline = core.poll_timeout();
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return Ok(());
                }
                continue;
            }
            frame = from_fe.recv() => {
                let Some(frame) = frame else { anyhow::bail!("the front end closed the connection") };
                on_frame(&mut core, &mut stored, &counters, frame).await;
            }
            Some(ev) = answers.recv() => core.handle(Instant::now(), ev),
            Some(inc) = s11_incoming.recv() => {
                let S11IncomingRequest::DownlinkDataNotification(ddn) = &inc.request;
                ensure_held(&mut core, &mut stored, &counters, UeKey::MmeUeS1apId(ddn.mme_teid.0)).await;
                next_txn += 1;
                s11_replies.insert(next_txn, inc.reply);
                core.handle(Instant::now(), MmeEvent::S11Incoming { txn: next_txn, request: inc.request });
            }
            Some(inc) = s6a_incoming.recv() => {
                next_txn += 1;
                s6a_replies.insert(next_txn, inc.reply);
                core.handle(Instant::now(), MmeEvent::S6aIncoming { txn: next_txn, request: inc.request });
            }
            _ = sleep => core.handle_timeout(Instant::now()),
        }
        if core.poll_timeout().is_some_and(|d| d <= Instant::now()) {
            core.handle_timeout(Instant::now());
        }
        // Write-ahead: the store first, then what the event sends.
        let report = stored.sync(&mut core, time_now()).await;
        if !report.conflicts.is_empty() {
            tracing::warn!(conflicts = ?report.conflicts, "UE records written by another host meanwhile: dropped here");
        }
        while let Some(action) = core.poll_action() {
            match action {
                MmeAction::S1Send { assoc, stream, data } => {
                    if to_fe.try_send(Frame::S1 { assoc: assoc.0, stream, data }).is_err() {
                        counters.incr("host_frontend_queue_full");
                    }
                }
                // The front end owns the associations.
                MmeAction::S1Abort { .. } => counters.incr("host_abort_not_forwarded"),
                MmeAction::S6a { ue, request } => {
                    let (answer, tx) = (s6a.submit(request).await, answers_tx.clone());
                    tokio::spawn(async move {
                        let _ = tx.send(MmeEvent::S6a { ue, answer: answer.await });
                    });
                }
                MmeAction::S11 { ue, request } => {
                    let (response, tx) = (s11.submit(request).await, answers_tx.clone());
                    tokio::spawn(async move {
                        let _ = tx.send(MmeEvent::S11 { ue, response: response.await });
                    });
                }
                MmeAction::S11Answer { txn, answer } => {
                    if let Some(reply) = s11_replies.remove(&txn) {
                        let _ = reply.send(answer);
                    }
                }
                MmeAction::S6aAnswer { txn, answer } => {
                    if let Some(reply) = s6a_replies.remove(&txn) {
                        let _ = reply.send(answer);
                    }
                }
                MmeAction::S11Notify { notification } => {
                    if s11_notify.try_send(notification).is_err() {
                        counters.incr("s11_notify_dropped");
                    }
                }
                MmeAction::OperatorAnswer { .. } => {}
            }
        }
    }
}

/// The UE `key` names is in `core`, loaded from the store if it was not.
async fn ensure_held(core: &mut Mme, stored: &mut StoredUes, counters: &Counters, key: UeKey) {
    if core.find_ue(&key).is_some() {
        return;
    }
    match stored.load(core, &key, time_now()).await {
        Ok(_) => counters.incr("host_ue_taken_over"),
        // Not stored (a UE this MME never had, or one whose procedure had
        // not completed under cold replication): the core answers as for
        // any unknown UE.
        Err(StoredError::NotFound(_)) => counters.incr("host_ue_not_in_store"),
        Err(e) => {
            counters.incr("host_ue_load_failed");
            tracing::warn!(?key, "loading a UE from the store: {e}");
        }
    }
}

async fn on_frame(core: &mut Mme, stored: &mut StoredUes, counters: &Counters, frame: Frame) {
    let now = Instant::now();
    match frame {
        Frame::EnbUp { assoc, peer, outbound_streams } => {
            core.handle(now, MmeEvent::S1Up { assoc: AssocId(assoc), peer, outbound_streams })
        }
        Frame::EnbDown { assoc } => core.handle(now, MmeEvent::S1Down { assoc: AssocId(assoc) }),
        Frame::S1 { assoc, stream, data } => {
            let key = match keys::uplink(assoc, &data) {
                Uplink::Ue(UeName::MmeUeS1apId(id)) => Some(UeKey::MmeUeS1apId(id)),
                Uplink::Ue(UeName::Initial { m_tmsi: Some(m), .. }) => Some(UeKey::MTmsi(m)),
                _ => None,
            };
            if let Some(key) = key {
                ensure_held(core, stored, counters, key).await;
            }
            core.handle(Instant::now(), MmeEvent::S1Data { assoc: AssocId(assoc), stream, data });
        }
        Frame::Hello { .. } => counters.incr("host_bad_frame"),
    }
}
