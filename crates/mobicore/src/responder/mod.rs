//! The responder of `bench attach`: an MME stand-in on S1-MME that answers
//! every message of the emulator's attach and detach at once from replies
//! built before the clock starts, over the same user-space SCTP transport.
//! Its rate is the most the emulator (its eNBs, UEs, USIMs and NAS
//! security) can drive, the like-for-like baseline of the core's rate.
//!
//! # Layout
//! - [`replies`]: [`ResponderPlan`] and the per-UE pre-built replies
//!   (vector, KASME, NAS security context, protected NAS PDUs at known
//!   NAS COUNTs, S1AP PDUs), with the MME's and the HSS's own code.
//! - [`machine`]: [`Responder`], the sans-I/O state machine.
//! - this file: [`serve`], its thin tokio shell, and [`run_attach`], the
//!   whole baseline run (build, serve, emulator, stop).

pub mod machine;
pub mod replies;
#[cfg(test)]
mod tests;

pub use machine::{Responder, ResponderEvent, ResponderStats, Send, Step};
pub use replies::{build_all, ResponderPlan, UeReplies};

use crate::config::Config;
use anyhow::{Context, Result};
use mobicore_common::counters::Counters;
use mobicore_common::sctp_api::{SctpCommand, SctpEvent, SctpHandle, PPID_S1AP};
use mobicore_sctp::Transport;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Events handled per wakeup before the replies are handed to the endpoint.
const BATCH: usize = 512;

/// The shell stopped because the SCTP endpoint went away.
#[derive(Debug, thiserror::Error)]
#[error("the responder's SCTP endpoint task has stopped")]
pub struct SctpClosed;

fn event(ev: SctpEvent, counters: &Counters) -> Option<ResponderEvent> {
    match ev {
        SctpEvent::Up { assoc, outbound_streams, .. } => Some(ResponderEvent::Up { assoc, outbound_streams }),
        // TS 36.412 7: S1AP is PPID 18.
        SctpEvent::Data { assoc, stream, ppid, data } if ppid == PPID_S1AP || ppid == 0 => {
            Some(ResponderEvent::Data { assoc, stream, data })
        }
        SctpEvent::Data { .. } => {
            counters.incr("responder_wrong_ppid");
            None
        }
        SctpEvent::Down { assoc, .. } => Some(ResponderEvent::Down { assoc }),
    }
}

/// Drive `responder` over an SCTP endpoint until `shutdown` turns true;
/// returns it with its totals.
pub async fn serve(
    mut responder: Responder,
    sctp: SctpHandle,
    mut shutdown: watch::Receiver<bool>,
) -> Result<Responder, SctpClosed> {
    let SctpHandle { commands, mut events, .. } = sctp;
    let counters = responder.counters().clone();
    loop {
        if *shutdown.borrow() {
            return Ok(responder);
        }
        tokio::select! {
            biased;
            changed = shutdown.changed() => {
                if changed.is_err() {
                    return Ok(responder);
                }
                continue;
            }
            ev = events.recv() => {
                let ev = ev.ok_or(SctpClosed)?;
                if let Some(e) = event(ev, &counters) {
                    responder.handle(e);
                }
            }
        }
        for _ in 1..BATCH {
            let Ok(ev) = events.try_recv() else { break };
            if let Some(e) = event(ev, &counters) {
                responder.handle(e);
            }
        }
        while let Some(Send { assoc, stream, data }) = responder.poll_action() {
            let cmd = SctpCommand::Send { assoc, stream, ppid: PPID_S1AP, data };
            commands.send(cmd).await.map_err(|_| SctpClosed)?;
        }
    }
}

/// A finished baseline run: the emulator's report against the responder,
/// the responder's totals and how long building its replies took.
pub struct AttachBaseline {
    pub report: mobicore_ran::RanReport,
    pub stats: ResponderStats,
    pub counters: Counters,
    pub build_time: Duration,
}

/// The emulator's workload `ran` against a responder for its UEs: build
/// every reply (not timed by the emulator), open a fresh S1-MME endpoint
/// on an ephemeral port of the MME's address over transport `t`, run the
/// emulator against it, stop the responder.
pub async fn run_attach(
    cfg: &Config,
    mut ran: mobicore_ran::RanConfig,
    t: Transport,
    quiet: bool,
) -> Result<AttachBaseline> {
    let plan = ResponderPlan {
        mme: cfg.mme.core.clone(),
        subscribers: ran.plan.clone(),
        template: crate::allinone::subscriber_template(&ran.plan),
        ues: ran.ues,
        enbs: ran.enbs,
        switch_off: ran.switch_off,
    };
    let started = Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let build_plan = plan.clone();
    let replies = tokio::task::spawn_blocking(move || build_all(&build_plan, threads)).await??;
    let build_time = started.elapsed();
    let responder = Responder::new(plan, replies).context("encoding the S1 SETUP RESPONSE")?;

    // A new endpoint: the core's port and associations are not reused.
    let local = SocketAddr::new(cfg.mme.s1ap.ip(), 0);
    let ep_t = match t {
        Transport::Udp { .. } => Transport::Udp { port: 0 },
        t => t,
    };
    let bound = mobicore_sctp::bind_with_info(crate::allinone::endpoint_config(cfg, local, ep_t, 0))
        .await
        .with_context(|| format!("opening the responder's SCTP endpoint on {local} ({t:?})"))?;
    ran.mme = bound.handle.local;
    let ran_t = match (t, bound.udp_port) {
        (Transport::Udp { .. }, Some(port)) => Transport::Udp { port },
        (t, _) => t,
    };
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(serve(responder, bound.handle, stopped));
    let report = crate::demo::run_with_progress(cfg, ran, ran_t, quiet).await;
    let _ = stop.send(true);
    let responder = task.await.context("the responder task")??;
    Ok(AttachBaseline { report: report?, stats: responder.stats(), counters: responder.counters().clone(), build_time })
}
