//! The thin tokio shell: feeds SCTP events and S6a/S11 answers into the
//! core, executes its actions, drives its timers, stops on shutdown.
//! Ready events are drained in a batch before actions are polled.

use crate::context::MmeStats;
use crate::mme::{Mme, MmeAction, MmeEvent, OperatorCommand, OperatorOutcome};
use mobicore_common::counters::Counters;
use mobicore_common::requester::Requester;
use mobicore_common::s11::{IncomingS11, S11IncomingAnswer, S11Link, S11Notification, S11Request, S11Response};
use mobicore_common::s6a::{S6aAnswer, S6aIncoming, S6aIncomingAnswer, S6aLink, S6aRequest};
use mobicore_common::sctp_api::{SctpCommand, SctpEvent, SctpHandle, PPID_S1AP};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot, watch};

/// Why the shell stopped other than by shutdown.
#[derive(Debug, thiserror::Error)]
pub enum MmeError {
    #[error("the SCTP endpoint task has stopped")]
    SctpClosed,
}

/// An operator's command as the admin endpoint ([`crate::admin`]) hands
/// it to the shell; the core's outcome goes back through `reply`.
#[derive(Debug)]
pub struct OperatorRequest {
    pub command: OperatorCommand,
    pub reply: oneshot::Sender<OperatorOutcome>,
}

/// The most events handled before the actions are flushed.
const BATCH: usize = 512;

fn sctp_event(ev: SctpEvent, mme: &Mme) -> Option<MmeEvent> {
    match ev {
        SctpEvent::Up { assoc, peer, outbound_streams, .. } => {
            Some(MmeEvent::S1Up { assoc, peer: peer.ip(), outbound_streams })
        }
        SctpEvent::Data { assoc, stream, ppid, data } => {
            // TS 36.412 7: S1AP is PPID 18; 0 (unspecified) is tolerated.
            if ppid == PPID_S1AP || ppid == 0 {
                Some(MmeEvent::S1Data { assoc, stream, data })
            } else {
                mme.counters().incr("sctp_wrong_ppid");
                None
            }
        }
        SctpEvent::Down { assoc, .. } => Some(MmeEvent::S1Down { assoc }),
    }
}

/// Run the MME until `shutdown` turns true (or its sender goes away).
/// `operator` brings the operator's commands (none once its senders are
/// gone).
pub async fn run(
    mut core: Mme,
    sctp: SctpHandle,
    s6a: S6aLink,
    s11: S11Link,
    mut operator: mpsc::Receiver<OperatorRequest>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<MmeStats, MmeError> {
    let SctpHandle { commands, mut events, .. } = sctp;
    let (mut peers, mut peer_events) = Peers::new(s6a, s11, core.counters().clone());
    // The operator's commands waiting for the core's outcome, by `txn`.
    let mut operator_replies: HashMap<u64, oneshot::Sender<OperatorOutcome>> = HashMap::new();
    if *shutdown.borrow() {
        return Ok(core.stats());
    }
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
                    return Ok(core.stats());
                }
                continue;
            }
            ev = events.recv() => {
                let Some(ev) = ev else { return Err(MmeError::SctpClosed) };
                let now = Instant::now();
                if let Some(e) = sctp_event(ev, &core) {
                    core.handle(now, e);
                }
            }
            Some(ev) = peer_events.answers.recv() => core.handle(Instant::now(), ev),
            Some(inc) = peer_events.s11_incoming.recv() => core.handle(Instant::now(), peers.s11_request(inc)),
            Some(inc) = peer_events.s6a_incoming.recv() => core.handle(Instant::now(), peers.s6a_request(inc)),
            Some(req) = operator.recv() => {
                let txn = peers.next_txn();
                operator_replies.insert(txn, req.reply);
                core.handle(Instant::now(), MmeEvent::Operator { txn, command: req.command });
            }
            _ = sleep => core.handle_timeout(Instant::now()),
        }
        // Drain what else is ready, then act.
        let now = Instant::now();
        for _ in 0..BATCH {
            let mut progressed = false;
            if let Ok(ev) = events.try_recv() {
                if let Some(e) = sctp_event(ev, &core) {
                    core.handle(now, e);
                }
                progressed = true;
            }
            if let Ok(ev) = peer_events.answers.try_recv() {
                core.handle(now, ev);
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
        if core.poll_timeout().is_some_and(|d| d <= now) {
            core.handle_timeout(now);
        }
        while let Some(action) = core.poll_action() {
            match action {
                MmeAction::S1Send { assoc, stream, data } => {
                    let cmd = SctpCommand::Send { assoc, stream, ppid: PPID_S1AP, data };
                    if commands.send(cmd).await.is_err() {
                        return Err(MmeError::SctpClosed);
                    }
                }
                MmeAction::S1Abort { assoc } => {
                    if commands.send(SctpCommand::Abort { assoc }).await.is_err() {
                        return Err(MmeError::SctpClosed);
                    }
                }
                MmeAction::OperatorAnswer { txn, outcome } => {
                    if let Some(reply) = operator_replies.remove(&txn) {
                        let _ = reply.send(outcome);
                    }
                }
                peer => peers.dispatch(peer).await,
            }
        }
    }
}

/// The core's S6a and S11 peers as a shell drives them, shared by [`run`]
/// and the elastic MME's hosts: the core's requests go out on the links
/// and their answers come back as events ([`PeerEvents::answers`]); the
/// peers' own requests (the HSS's, the S-GW's) are numbered for the core
/// and its answers go back to them.
pub struct Peers {
    s6a: Requester<S6aRequest, S6aAnswer>,
    s11: Requester<S11Request, S11Response>,
    s11_notify: mpsc::Sender<S11Notification>,
    answers: mpsc::UnboundedSender<MmeEvent>,
    /// The HSS's requests waiting for the core's answer, by `txn`.
    s6a_replies: HashMap<u64, oneshot::Sender<S6aIncomingAnswer>>,
    /// The S-GW's requests waiting for the core's answer, by `txn`.
    s11_replies: HashMap<u64, oneshot::Sender<S11IncomingAnswer>>,
    next_txn: u64,
    /// The core's S6a and S11 requests whose answer has not been queued
    /// on `answers` yet.
    in_flight: Arc<AtomicUsize>,
    counters: Counters,
}

/// What the peers bring the shell's loop: the answers to the core's
/// requests (as events), and the peers' requests (for [`Peers::s6a_request`],
/// [`Peers::s11_request`]).
pub struct PeerEvents {
    pub answers: mpsc::UnboundedReceiver<MmeEvent>,
    pub s6a_incoming: mpsc::Receiver<S6aIncoming>,
    pub s11_incoming: mpsc::Receiver<IncomingS11>,
}

impl Peers {
    pub fn new(s6a: S6aLink, s11: S11Link, counters: Counters) -> (Peers, PeerEvents) {
        let S11Link { requests: s11, incoming: s11_incoming, notify: s11_notify } = s11;
        let S6aLink { requests: s6a, incoming: s6a_incoming } = s6a;
        let (answers, answers_rx) = mpsc::unbounded_channel();
        let peers = Peers {
            s6a,
            s11,
            s11_notify,
            answers,
            s6a_replies: HashMap::new(),
            s11_replies: HashMap::new(),
            next_txn: 0,
            in_flight: Arc::new(AtomicUsize::new(0)),
            counters,
        };
        (peers, PeerEvents { answers: answers_rx, s6a_incoming, s11_incoming })
    }

    /// The core's S6a and S11 requests not answered yet (an answer
    /// queued on [`PeerEvents::answers`] counts as answered).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// A fresh `txn` for a request to the core (the shell's others too,
    /// such as the operator's, share the numbering).
    pub fn next_txn(&mut self) -> u64 {
        self.next_txn += 1;
        self.next_txn
    }

    /// The core's event for an S-GW request; its reply waits for the answer.
    pub fn s11_request(&mut self, inc: IncomingS11) -> MmeEvent {
        let txn = self.next_txn();
        self.s11_replies.insert(txn, inc.reply);
        MmeEvent::S11Incoming { txn, request: inc.request }
    }

    /// The core's event for an HSS request; its reply waits for the answer.
    pub fn s6a_request(&mut self, inc: S6aIncoming) -> MmeEvent {
        let txn = self.next_txn();
        self.s6a_replies.insert(txn, inc.reply);
        MmeEvent::S6aIncoming { txn, request: inc.request }
    }

    /// Carries out an S6a or S11 action of the core. Any other action is
    /// the shell's own: counted (`shell_action_not_for_peers`) and dropped.
    pub async fn dispatch(&mut self, action: MmeAction) {
        match action {
            MmeAction::S6a { ue, request } => {
                // Queued in order here; only the wait for the answer is spawned.
                let (answer, tx) = (self.s6a.submit(request).await, self.answers.clone());
                let in_flight = self.in_flight.clone();
                in_flight.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let _ = tx.send(MmeEvent::S6a { ue, answer: answer.await });
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                });
            }
            MmeAction::S11 { ue, request } => {
                let (response, tx) = (self.s11.submit(request).await, self.answers.clone());
                let in_flight = self.in_flight.clone();
                in_flight.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let _ = tx.send(MmeEvent::S11 { ue, response: response.await });
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                });
            }
            MmeAction::S11Answer { txn, answer } => {
                if let Some(reply) = self.s11_replies.remove(&txn) {
                    let _ = reply.send(answer);
                }
            }
            MmeAction::S6aAnswer { txn, answer } => {
                if let Some(reply) = self.s6a_replies.remove(&txn) {
                    let _ = reply.send(answer);
                }
            }
            MmeAction::S11Notify { notification } => {
                if self.s11_notify.try_send(notification).is_err() {
                    self.counters.incr("s11_notify_dropped");
                }
            }
            MmeAction::S1Send { .. } | MmeAction::S1Abort { .. } | MmeAction::OperatorAnswer { .. } => {
                self.counters.incr("shell_action_not_for_peers")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_ue::*;
    use crate::MmeConfig;
    use bytes::Bytes;
    use mobicore_common::sctp_api::AssocId;
    use oxirush_s1ap::S1apPduKind;

    /// The shell against in-memory SCTP, HSS and S-GW tasks: S1 Setup and
    /// the first NAS round trip through a spawned S6a request, then shutdown.
    #[tokio::test]
    async fn shell_drives_core_and_answers_through_requesters() {
        let (ev_tx, ev_rx) = mpsc::channel(64);
        let (cmd_tx, mut cmd_rx) = mpsc::channel(64);
        let sctp = SctpHandle { commands: cmd_tx, events: ev_rx, local: "127.0.0.1:36412".parse().unwrap() };
        let (s6a, task) = S6aLink::channel(16);
        let mut hss = task.requests;
        let (s11, _sgw) = S11Link::channel(16);
        tokio::spawn(async move {
            while let Some(p) = hss.recv().await {
                let ans = mobicore_common::s6a::S6aAnswer::AuthenticationInformation(Ok(vec![hss_vector(32, 9)]));
                let _ = p.reply.send(Ok(ans));
            }
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let core = Mme::new(MmeConfig::default());
        let (_operator, operator_rx) = mpsc::channel(1);
        let task = tokio::spawn(run(core, sctp, s6a, s11, operator_rx, stop_rx));

        let assoc = AssocId(3);
        let peer = "127.0.0.1:5000".parse().unwrap();
        ev_tx.send(SctpEvent::Up { assoc, peer, inbound_streams: 4, outbound_streams: 4 }).await.unwrap();
        let setup = Bytes::from(s1_setup_request("001", "01", 1));
        ev_tx.send(SctpEvent::Data { assoc, stream: 0, ppid: PPID_S1AP, data: setup }).await.unwrap();
        let Some(SctpCommand::Send { assoc: a, stream, ppid, data }) = cmd_rx.recv().await else { panic!() };
        assert_eq!((a, stream, ppid), (assoc, 0, PPID_S1AP));
        assert_eq!(read_down(&data).kind, S1apPduKind::Successful_S1Setup);

        let ue = TestUe::new("001010000000051", 5);
        let initial = Bytes::from(initial_ue_message(5, ue.attach_request()));
        ev_tx.send(SctpEvent::Data { assoc, stream: 1, ppid: PPID_S1AP, data: initial }).await.unwrap();
        let Some(SctpCommand::Send { data, .. }) = cmd_rx.recv().await else { panic!() };
        let d = read_down(&data);
        assert_eq!(d.kind, S1apPduKind::Initiating_downlinkNASTransport);
        assert!(matches!(plain_emm(&d.nas.unwrap()), oxirush_nas::nas_eps::NasEmmMessage::AuthenticationRequest(_)));

        stop_tx.send(true).unwrap();
        let stats = task.await.unwrap().unwrap();
        assert_eq!((stats.enbs, stats.ues), (1, 1));
    }

    #[tokio::test]
    async fn shell_reports_closed_sctp() {
        let (ev_tx, ev_rx) = mpsc::channel(1);
        let (cmd_tx, _cmd_rx) = mpsc::channel(1);
        let sctp = SctpHandle { commands: cmd_tx, events: ev_rx, local: "127.0.0.1:36412".parse().unwrap() };
        let (s6a, _h) = S6aLink::channel(1);
        let (s11, _s) = S11Link::channel(1);
        let (_stop_tx, stop_rx) = watch::channel(false);
        drop(ev_tx);
        let (_operator, operator_rx) = mpsc::channel(1);
        let r = run(Mme::new(MmeConfig::default()), sctp, s6a, s11, operator_rx, stop_rx).await;
        assert!(matches!(r, Err(MmeError::SctpClosed)));
    }
}
