//! The thin tokio shell: feeds SCTP events and S6a/S11 answers into the
//! core, executes its actions, drives its timers, stops on shutdown.
//! Ready events are drained in a batch before actions are polled.

use crate::context::MmeStats;
use crate::mme::{Mme, MmeAction, MmeEvent};
use mobicore_common::requester::Requester;
use mobicore_common::s11::{S11Request, S11Response};
use mobicore_common::s6a::{S6aAnswer, S6aRequest};
use mobicore_common::sctp_api::{SctpCommand, SctpEvent, SctpHandle, PPID_S1AP};
use std::time::Instant;
use tokio::sync::{mpsc, watch};

/// Why the shell stopped other than by shutdown.
#[derive(Debug, thiserror::Error)]
pub enum MmeError {
    #[error("the SCTP endpoint task has stopped")]
    SctpClosed,
}

/// The most events handled before the actions are flushed.
const BATCH: usize = 512;

fn sctp_event(ev: SctpEvent, mme: &Mme) -> Option<MmeEvent> {
    match ev {
        SctpEvent::Up { assoc, outbound_streams, .. } => Some(MmeEvent::S1Up { assoc, outbound_streams }),
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
pub async fn run(
    mut core: Mme,
    sctp: SctpHandle,
    s6a: Requester<S6aRequest, S6aAnswer>,
    s11: Requester<S11Request, S11Response>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<MmeStats, MmeError> {
    let SctpHandle { commands, mut events, .. } = sctp;
    let (answers_tx, mut answers) = mpsc::unbounded_channel::<MmeEvent>();
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
            Some(ev) = answers.recv() => core.handle(Instant::now(), ev),
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
            if let Ok(ev) = answers.try_recv() {
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
                MmeAction::S6a { ue, request } => {
                    let (client, tx) = (s6a.clone(), answers_tx.clone());
                    tokio::spawn(async move {
                        let answer = client.request(request).await;
                        let _ = tx.send(MmeEvent::S6a { ue, answer });
                    });
                }
                MmeAction::S11 { ue, request } => {
                    let (client, tx) = (s11.clone(), answers_tx.clone());
                    tokio::spawn(async move {
                        let response = client.request(request).await;
                        let _ = tx.send(MmeEvent::S11 { ue, response });
                    });
                }
            }
        }
    }
}
