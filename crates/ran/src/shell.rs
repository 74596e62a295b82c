//! The thin tokio driver of the emulated RAN: one task owns every eNB (and
//! so every UE), feeds them SCTP events and timer expiries, and hands what
//! they send to the SCTP endpoint. It drains every ready event per wakeup
//! and spawns nothing per message.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mobicore_common::sctp_api::{AssocId, SctpCommand, SctpEvent, SctpHandle, PPID_S1AP};
use oxirush_nas::nas_eps::Guti;
use tokio::sync::mpsc::{self, error::TryRecvError, error::TrySendError};
use tokio::sync::oneshot;

use crate::config::{usim_for, RanConfig};
use crate::enb::handover::HandoverAction;
use crate::enb::{Enb, EnbAction, EnbConfig, Outcome, Reselection, S1State};
use crate::mobility::{HandoverType, MobilityModel, Move};
use crate::report::{MovingReport, Phase, PhaseReport, Progress, RanReport};
use crate::ue::{EmmState, Procedure, Ue};
use crate::userplane::{Follower, UeTunnel, UserPlaneLink};

/// Why a run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum RanError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("eNB {enb}: SCTP association to the MME failed: {reason}")]
    Connect { enb: u32, reason: String },
    #[error("eNB {enb}: S1 Setup failed: {reason}")]
    S1Setup { enb: u32, reason: String },
    #[error("the SCTP endpoint task is gone")]
    SctpClosed,
    #[error("reselection: {0}")]
    Reselection(String),
}

/// Events handled per wakeup before the output is flushed.
const EVENT_BATCH: usize = 1024;
/// How long S1 Setup waits for an association's Up event.
const UP_GRACE: Duration = Duration::from_millis(500);
/// After the last phase: how long replies (UE Context Release Commands)
/// are still answered, and the silence that ends that early.
const LINGER: Duration = Duration::from_millis(500);
const LINGER_SILENCE: Duration = Duration::from_millis(50);
/// Interval of progress messages.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// Run the configured workload: connect one association per eNB, S1 Setup
/// for all, attach every UE at the arrival rate, then detach them (and a
/// second GUTI round) if configured.
pub async fn run(
    cfg: RanConfig,
    sctp: SctpHandle,
    progress: Option<mpsc::UnboundedSender<Progress>>,
) -> Result<RanReport, RanError> {
    run_with(cfg, sctp, progress, |_| async {}).await.map(|(report, _)| report)
}

/// The user-plane data of a UE attached after the attach phase: its
/// default bearer's E-RAB ID, UE address and S1-U F-TEIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachedUe {
    pub index: u64,
    pub e_rab_id: u8,
    pub tunnel: UeTunnel,
}

/// [`run`], and between the attach phase and the detach phase call
/// `while_attached` with every attached UE's user-plane data and await
/// its future (e.g. start a [`crate::userplane::UserPlane`] and
/// [`crate::userplane::run_traffic`]) while the eNBs keep serving S1AP.
/// Returns the report and the future's output.
pub async fn run_with<F, Fut>(
    cfg: RanConfig,
    sctp: SctpHandle,
    progress: Option<mpsc::UnboundedSender<Progress>>,
    while_attached: F,
) -> Result<(RanReport, Fut::Output), RanError>
where
    F: FnOnce(Vec<AttachedUe>) -> Fut,
    Fut: std::future::Future,
{
    let mut ran = Ran::connect(cfg, sctp, progress).await?;
    ran.attach().await?;
    let attached = ran.attached_ues();
    let out = ran.serve_until(while_attached(attached)).await?;
    if let Some(m) = ran.d.cfg.moving.clone() {
        // The mobility model: registered UEs move for a while.
        let mut model = MobilityModel::new(m.clone(), ran.d.enbs.len());
        let now = Instant::now();
        for ue in ran.registered_ues().into_iter().take(m.ues.map_or(usize::MAX, |n| n as usize)) {
            model.add_ue(now, ue);
        }
        ran.moving(&mut model, tokio::time::sleep(Duration::from_millis(m.duration_ms))).await?;
    }
    if ran.d.cfg.mobility {
        ran.mobility().await?;
    }
    Ok((ran.finish().await?, out))
}

/// A run of the emulated RAN driven step by step (what [`run_with`]
/// does in one go): connect and S1 Setup, attach, then any mobility
/// phases, with a user plane that follows the UEs if one is linked
/// ([`Ran::follow`]), serving S1AP meanwhile ([`Ran::serve_until`]);
/// [`Ran::finish`] detaches as configured and closes.
pub struct Ran {
    d: Driver,
}

impl Ran {
    /// One SCTP association and S1 Setup per eNB.
    pub async fn connect(
        cfg: RanConfig,
        sctp: SctpHandle,
        progress: Option<mpsc::UnboundedSender<Progress>>,
    ) -> Result<Ran, RanError> {
        validate(&cfg)?;
        let mut enbs = Vec::with_capacity(cfg.enbs as usize);
        for i in 0..cfg.enbs {
            let enb_id = cfg.first_enb_id + i;
            let enb_cfg = EnbConfig {
                enb_id,
                name: format!("mobicore-enb-{enb_id}"),
                plmn: cfg.plmn,
                tac: cfg.tac_of(i as usize),
                s1u_addr: cfg.s1u_addr,
                procedure_timeout: cfg.procedure_timeout(),
                s1_setup_timeout: cfg.s1_setup_timeout(),
                inactivity_timeout: cfg.inactivity_timeout(),
            };
            enbs.push(Enb::new(enb_cfg).map_err(|e| RanError::Config(e.to_string()))?);
        }
        let SctpHandle { commands, events, .. } = sctp;
        let mut d = Driver {
            cfg,
            enbs,
            assoc_of: Vec::new(),
            enb_of: HashMap::new(),
            commands,
            events,
            outbox: VecDeque::new(),
            progress,
            last_progress: None,
            report: RanReport::default(),
            phase: PhaseState::new(Phase::Connect, 0),
            s1_results: Vec::new(),
            releasing: HashMap::new(),
            follow: None,
            moving: None,
            log: None,
            reconnect: None,
        };
        d.report.ues = d.cfg.ues;
        d.report.enbs = d.cfg.enbs;
        d.connect().await?;
        d.s1_setup().await?;
        Ok(Ran { d })
    }

    /// Attach every UE at the arrival rate.
    pub async fn attach(&mut self) -> Result<(), RanError> {
        let attach = self.d.procedure_phase(Phase::Attach, (0..self.d.cfg.ues).collect()).await?;
        self.d.report.set_attach(attach);
        Ok(())
    }

    /// Attach UEs `ues` (indices) at the arrival rate: a run that attaches
    /// in steps ([`Ran::attach`] is all of them at once). Their results
    /// are added to the run's attach report.
    pub async fn attach_some(&mut self, ues: std::ops::Range<u64>) -> Result<PhaseReport, RanError> {
        let r = self.d.procedure_phase(Phase::Attach, ues.collect()).await?;
        self.d.report.add_attach(&r);
        Ok(r)
    }

    /// Serve S1AP until no registered UE has an S1 connection (a TAU from
    /// idle ends at its ACCEPT; the MME releases the connection after the
    /// COMPLETE), at most the procedure guard time.
    pub async fn settle_idle(&mut self) -> Result<(), RanError> {
        self.d.settle_idle().await
    }

    /// Registered UEs with an address and a bearer, in index order.
    pub fn attached_ues(&self) -> Vec<AttachedUe> {
        self.d.attached_ues()
    }

    /// Keep the tunnel table of a user plane (one for all eNBs) in step
    /// with UEs `ues` (whose tunnels it has now) through idle mode, paging
    /// and handovers, over `link` ([`crate::userplane::Follower`]); an
    /// idle UE's uplink starts its service request.
    pub fn follow(&mut self, link: UserPlaneLink, ues: &[AttachedUe]) {
        let follower = Follower::shared(ues.iter().map(|u| (u.index, u.tunnel)));
        self.d.follow = Some(Follow { follower, link });
    }

    /// Keep serving S1AP (and the linked user plane) until `fut` is done.
    pub async fn serve_until<Fut: std::future::Future>(&mut self, fut: Fut) -> Result<Fut::Output, RanError> {
        self.d.serve_until(fut).await
    }

    /// One mobility phase over the UEs it applies to now (connected ones
    /// for a release or handover, idle ones for a service request or
    /// TAU); its report is added to the run's.
    pub async fn phase(&mut self, phase: Phase) -> Result<PhaseReport, RanError> {
        let ues = self.d.candidates(phase);
        let r = self.d.procedure_phase(phase, ues).await?;
        self.d.report.mobility.push((phase, r.clone()));
        Ok(r)
    }

    /// [`Ran::phase`] over the UEs of `ues` it applies to now: a load
    /// generator that measures groups of UEs apart.
    pub async fn phase_of(&mut self, phase: Phase, ues: &[u64]) -> Result<PhaseReport, RanError> {
        let want: HashSet<u64> = ues.iter().copied().collect();
        let ues = self.d.candidates(phase).into_iter().filter(|u| want.contains(u)).collect();
        let r = self.d.procedure_phase(phase, ues).await?;
        self.d.report.mobility.push((phase, r.clone()));
        Ok(r)
    }

    /// Several phases at once: each `(phase, ue)` of the UEs it applies to
    /// now (as [`Ran::phase_of`]), started in the order given at the
    /// arrival rate, all running together (a UE once). One report for
    /// all; [`Ran::log_outcomes`] tells them apart by procedure.
    pub async fn mix_of(&mut self, steps: &[(Phase, u64)]) -> Result<PhaseReport, RanError> {
        let mut candidates: HashMap<Phase, HashSet<u64>> = HashMap::new();
        let mut seen = HashSet::new();
        let mut run = Vec::with_capacity(steps.len());
        for &(phase, ue) in steps {
            let c = candidates.entry(phase).or_insert_with(|| self.d.candidates(phase).into_iter().collect());
            if c.contains(&ue) && seen.insert(ue) {
                run.push((phase, ue));
            }
        }
        let Some(&(first, _)) = run.first() else { return Ok(PhaseReport::default()) };
        let r = self.d.mixed_phase(first, run).await?;
        self.d.report.mobility.push((first, r.clone()));
        Ok(r)
    }

    /// The arrival rate of the phases from now on (none: all at once,
    /// within `max_in_flight`).
    pub fn set_rate(&mut self, rate: Option<f64>) -> Result<(), RanError> {
        let old = std::mem::replace(&mut self.d.cfg.rate, rate);
        validate(&self.d.cfg).inspect_err(|_| self.d.cfg.rate = old)
    }

    /// Keep every procedure's outcome from now on, with its start time
    /// ([`Ran::take_outcomes`]): for latency timelines.
    pub fn log_outcomes(&mut self) {
        self.d.log.get_or_insert_with(Vec::new);
    }

    /// The outcomes kept since the last call, in the order they ended.
    pub fn take_outcomes(&mut self) -> Vec<OutcomeRecord> {
        self.d.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// After an eNB's association is lost (the MME died), connect again
    /// every `every` and set S1 up anew, as a real eNB does; its UEs find
    /// whatever MME answers then (a restarted stateful one knows none of
    /// them: they attach again).
    pub fn reconnect_after_loss(&mut self, every: Duration) {
        self.d.reconnect = Some(Reconnect { every, due: Vec::new(), pending: Vec::new(), early_up: HashMap::new() });
    }

    /// UEs move as `model` says (the UEs it was given, at their rates;
    /// their periodic TAUs and service requests go on meanwhile) until
    /// `fut` is done; then the handovers under way end. A connected UE
    /// hands over, an idle one reselects the target's cell ([`Ran::reselect`]).
    /// What happened meanwhile is returned and added to the run's report.
    pub async fn moving<Fut: std::future::Future>(
        &mut self,
        model: &mut MobilityModel,
        fut: Fut,
    ) -> Result<(MovingReport, Fut::Output), RanError> {
        self.d.moving = Some(Moving::default());
        let out = self.d.moving_until(model, fut).await;
        let m = self.d.moving.take().unwrap_or_default();
        let mut r = m.report;
        r.moves = model.moves.iter().map(|(t, n)| (t.name().to_string(), *n)).collect();
        r.unfinished = m.started.len() as u64;
        self.d.report.moving.push(r.clone());
        Ok((r, out?))
    }

    /// Idle UE `ue` reselects eNB `to`'s cell ([`crate::enb::reselect`]):
    /// it camps there from now on, and updates its tracking area through it
    /// if that cell is outside its TAI list (the TAU's outcome is reported
    /// as procedures no phase started are, or in the mobility model's run).
    pub fn reselect(&mut self, ue: u64, to: usize) -> Result<Reselection, RanError> {
        let from = self.d.locate(ue);
        let r = self.d.reselect(Instant::now(), ue, from, to).map_err(RanError::Reselection);
        self.d.collect_actions(Instant::now());
        r
    }

    /// EMM-REGISTERED UEs, connected or idle, in index order.
    pub fn registered_ues(&self) -> Vec<u64> {
        self.d.ues_in(EmmState::Registered)
    }

    /// Every UE's GUTI (none: it was given none), in index order.
    pub fn gutis(&self) -> Vec<(u64, Option<Guti>)> {
        let mut v: Vec<(u64, Option<Guti>)> =
            self.d.enbs.iter().flat_map(|e| e.ues().map(|(i, c)| (i, c.ue.guti()))).collect();
        v.sort_unstable_by_key(|g| g.0);
        v
    }

    /// The eNB (its position in the run) UE `ue` camps on now.
    pub fn locate(&self, ue: u64) -> usize {
        self.d.locate(ue)
    }

    /// The mobility phases of [`RanConfig::mobility`] in order.
    pub async fn mobility(&mut self) -> Result<(), RanError> {
        for phase in MOBILITY {
            self.phase(phase).await?;
            if phase == Phase::Release {
                // UEs a handover took out of their TAI list update once
                // released (enb::idle): the next phase starts from idle.
                self.d.settle_idle().await?;
            }
        }
        // A TAU from idle ends at its ACCEPT; the MME releases the
        // connection after the COMPLETE. The next phase starts from idle.
        self.d.settle_idle().await
    }

    /// The number of eNBs.
    pub fn enb_count(&self) -> usize {
        self.d.enbs.len()
    }

    /// The report so far.
    pub fn report(&self) -> &RanReport {
        &self.d.report
    }

    /// Detach (and the second round) as configured, then close the
    /// associations.
    pub async fn finish(mut self) -> Result<RanReport, RanError> {
        let d = &mut self.d;
        d.follow = None;
        if d.cfg.detach {
            let registered = d.ues_in(EmmState::Registered);
            let detach = d.procedure_phase(Phase::Detach, registered).await?;
            d.report.set_detach(detach);
            if d.cfg.attach_with_guti_second_round {
                let again = d.ues_in(EmmState::Deregistered);
                d.report.reattach = Some(d.procedure_phase(Phase::Reattach, again).await?);
                let registered = d.ues_in(EmmState::Registered);
                d.report.redetach = Some(d.procedure_phase(Phase::Redetach, registered).await?);
            }
        }
        d.shutdown().await;
        Ok(std::mem::take(&mut d.report))
    }
}

/// A mobility model's run: its report so far and the handovers it
/// started that have not ended (UE, type).
#[derive(Default)]
struct Moving {
    report: MovingReport,
    started: HashMap<u64, HandoverType>,
}

/// A linked user plane and what it was told.
struct Follow {
    follower: Follower,
    link: UserPlaneLink,
}

/// The mobility phases of a run with [`RanConfig::mobility`], in order.
const MOBILITY: [Phase; 6] =
    [Phase::Release, Phase::ServiceRequest, Phase::X2Handover, Phase::S1Handover, Phase::Release, Phase::Tau];

/// The procedure a phase measures.
fn procedure_of(phase: Phase) -> Procedure {
    match phase {
        Phase::Attach | Phase::Reattach => Procedure::Attach,
        Phase::ServiceRequest => Procedure::ServiceRequest,
        Phase::Release => Procedure::Release,
        Phase::X2Handover => Procedure::X2Handover,
        Phase::S1Handover => Procedure::S1Handover,
        Phase::Tau => Procedure::Tau,
        Phase::Detach | Phase::Redetach | Phase::Connect | Phase::S1Setup => Procedure::Detach,
    }
}

/// A skipped move's reason without the UE's index (one counter per kind).
fn skip_reason(reason: &str) -> String {
    reason.split(|c: char| c.is_ascii_digit()).collect::<Vec<_>>().join("").trim().to_string()
}

/// The next event of a linked user plane, or pending without one.
async fn recv_user_plane(
    events: Option<&mut mpsc::UnboundedReceiver<crate::userplane::Event>>,
) -> Option<crate::userplane::Event> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The eNB (its position among the run's eNBs) that UE `index` camps on:
/// UEs are spread round robin.
pub fn enb_of(index: u64, enbs: u32) -> usize {
    (index % u64::from(enbs.max(1))) as usize
}

/// The eNB-UE-S1AP-ID UE `index` gets on its first attach of a run: each
/// eNB numbers its new S1 connections from 1 on, and the attach phase
/// starts UEs in index order, so UE `index` is connection
/// `index / enbs` of its eNB. A load generator's counterpart (the bench's
/// responder) pre-builds its replies with it.
pub fn first_enb_ue_s1ap_id(index: u64, enbs: u32) -> u32 {
    ((index / u64::from(enbs.max(1)) + 1) % u64::from(crate::enb::ENB_UE_ID_SPACE)) as u32
}

fn validate(cfg: &RanConfig) -> Result<(), RanError> {
    if cfg.enbs == 0 {
        return Err(RanError::Config("at least one eNB".into()));
    }
    if cfg.max_in_flight == 0 {
        return Err(RanError::Config("max_in_flight must be at least 1".into()));
    }
    if let Some(r) = cfg.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(RanError::Config(format!("rate must be positive, got {r}")));
        }
    }
    if let Some(m) = &cfg.moving {
        m.validate().map_err(RanError::Config)?;
    }
    if u64::from(cfg.first_enb_id) + u64::from(cfg.enbs) > 1 << 20 {
        return Err(RanError::Config("eNB IDs must fit in 20 bits".into()));
    }
    Ok(())
}

struct PhaseState {
    phase: Phase,
    /// UEs whose procedure of this phase has not ended, and which
    /// procedure it is: other outcomes (a paged UE's service request) are
    /// not the phase's.
    members: HashMap<u64, Procedure>,
    total: u64,
    done: u64,
    failed: u64,
    in_flight: usize,
    report: PhaseReport,
}

impl PhaseState {
    fn new(phase: Phase, total: u64) -> Self {
        PhaseState {
            phase,
            members: HashMap::new(),
            total,
            done: 0,
            failed: 0,
            in_flight: 0,
            report: PhaseReport::default(),
        }
    }
}

struct Driver {
    cfg: RanConfig,
    enbs: Vec<Enb>,
    /// The association of each eNB, once connected.
    assoc_of: Vec<Option<AssocId>>,
    enb_of: HashMap<AssocId, usize>,
    commands: mpsc::Sender<SctpCommand>,
    events: mpsc::Receiver<SctpEvent>,
    /// Commands not yet taken by the endpoint (never blocks the event side).
    outbox: VecDeque<SctpCommand>,
    progress: Option<mpsc::UnboundedSender<Progress>>,
    last_progress: Option<Instant>,
    report: RanReport,
    phase: PhaseState,
    /// S1 Setup results per eNB.
    s1_results: Vec<Option<Result<(), String>>>,
    /// UEs whose release was asked, and when (the release phase).
    releasing: HashMap<u64, Instant>,
    follow: Option<Follow>,
    /// While a mobility model runs ([`Ran::moving`]).
    moving: Option<Moving>,
    /// Every outcome, once [`Ran::log_outcomes`] was called.
    log: Option<Vec<OutcomeRecord>>,
    /// Reconnection after a lost association ([`Ran::reconnect_after_loss`]).
    reconnect: Option<Reconnect>,
}

/// One procedure's outcome with its start ([`Ran::log_outcomes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeRecord {
    pub ue: u64,
    pub procedure: &'static str,
    pub started: Instant,
    pub latency: Duration,
    pub ok: bool,
}

/// The eNBs that lost their association and are connecting again.
struct Reconnect {
    every: Duration,
    /// (eNB, when to try).
    due: Vec<(usize, Instant)>,
    /// Connect commands sent, their replies awaited.
    pending: Vec<(usize, oneshot::Receiver<Result<AssocId, String>>)>,
    /// Up events of associations whose Connect reply has not come yet.
    early_up: HashMap<AssocId, u16>,
}

impl Driver {
    /// One SCTP association per eNB (all through the same endpoint).
    async fn connect(&mut self) -> Result<(), RanError> {
        self.phase = PhaseState::new(Phase::Connect, self.enbs.len() as u64);
        let mut replies = Vec::new();
        for _ in &self.enbs {
            let (tx, rx) = oneshot::channel();
            self.commands
                .send(SctpCommand::Connect { remote: self.cfg.mme, reply: tx })
                .await
                .map_err(|_| RanError::SctpClosed)?;
            replies.push(rx);
        }
        self.assoc_of = vec![None; self.enbs.len()];
        self.s1_results = vec![None; self.enbs.len()];
        let deadline = Instant::now() + self.cfg.s1_setup_timeout();
        // Up events that come before their Connect reply wait here.
        let mut early_up: HashMap<AssocId, u16> = HashMap::new();
        for (i, rx) in replies.into_iter().enumerate() {
            let enb = self.enbs[i].config().enb_id;
            let mut rx = rx;
            let assoc = loop {
                tokio::select! {
                    r = &mut rx => match r {
                        Ok(Ok(a)) => break a,
                        Ok(Err(reason)) => return Err(RanError::Connect { enb, reason }),
                        Err(_) => return Err(RanError::SctpClosed),
                    },
                    ev = self.events.recv() => match ev {
                        Some(SctpEvent::Up { assoc, outbound_streams, .. }) => {
                            match self.enb_of.get(&assoc) {
                                Some(&k) if self.enbs[k].s1_state() == &S1State::Down => {
                                    self.enbs[k].start_s1_setup(Instant::now(), outbound_streams)
                                }
                                Some(_) => {}
                                None => { early_up.insert(assoc, outbound_streams); }
                            }
                        }
                        Some(other) => self.handle_event(Instant::now(), other),
                        None => return Err(RanError::SctpClosed),
                    },
                    _ = tokio::time::sleep_until(deadline.into()) => {
                        return Err(RanError::Connect { enb, reason: "timeout".into() });
                    }
                }
            };
            self.assoc_of[i] = Some(assoc);
            self.enb_of.insert(assoc, i);
            if let Some(streams) = early_up.remove(&assoc) {
                self.enbs[i].start_s1_setup(Instant::now(), streams);
            }
            self.phase.done += 1;
            self.report_progress(false);
        }
        self.collect_actions(Instant::now());
        Ok(())
    }

    /// Wait for every eNB's S1 Setup to end.
    async fn s1_setup(&mut self) -> Result<(), RanError> {
        self.phase = PhaseState::new(Phase::S1Setup, self.enbs.len() as u64);
        let started = Instant::now();
        let deadline = started + self.cfg.s1_setup_timeout() * 2;
        let mut fallback_done = false;
        while self.s1_results.iter().any(Option::is_none) {
            // An endpoint that reports no Up for associations it connected:
            // after a grace time, set up S1 on stream 0 alone.
            if !fallback_done && Instant::now() >= started + UP_GRACE {
                fallback_done = true;
                let now = Instant::now();
                for (k, enb) in self.enbs.iter_mut().enumerate() {
                    if self.assoc_of[k].is_some() && enb.s1_state() == &S1State::Down {
                        enb.start_s1_setup(now, 1);
                    }
                }
                self.collect_actions(now);
            }
            let wake = if fallback_done { Some(deadline) } else { Some(started + UP_GRACE) };
            // eNBs whose Up never came get a deadline of their own here.
            if Instant::now() >= deadline {
                let i = self.s1_results.iter().position(Option::is_none).unwrap_or(0);
                let enb = self.enbs[i].config().enb_id;
                return Err(RanError::S1Setup { enb, reason: "association never came up".into() });
            }
            self.step(wake).await?;
        }
        for (i, r) in self.s1_results.iter().enumerate() {
            if let Some(Err(reason)) = r {
                let enb = self.enbs[i].config().enb_id;
                return Err(RanError::S1Setup { enb, reason: reason.clone() });
            }
        }
        self.report_progress(true);
        Ok(())
    }

    /// Registered UEs with an address and an E-RAB whose S-GW F-TEID is
    /// known, in index order.
    fn attached_ues(&self) -> Vec<AttachedUe> {
        let mut v: Vec<AttachedUe> = self
            .enbs
            .iter()
            .flat_map(|e| e.ues())
            .filter(|(_, c)| c.ue.emm_state() == EmmState::Registered)
            .filter_map(|(index, c)| {
                let ue_ip = c.ue.ipv4()?;
                let erab = c.erabs.iter().find(|e| e.sgw.is_some())?;
                let tunnel = UeTunnel { ue_ip, sgw: erab.sgw?, enb: erab.enb };
                Some(AttachedUe { index, e_rab_id: erab.e_rab_id, tunnel })
            })
            .collect();
        v.sort_unstable_by_key(|a| a.index);
        v
    }

    /// Keep serving S1AP until `fut` is done.
    async fn serve_until<Fut: std::future::Future>(&mut self, fut: Fut) -> Result<Fut::Output, RanError> {
        tokio::pin!(fut);
        loop {
            tokio::select! {
                biased;
                out = &mut fut => return Ok(out),
                r = self.step(None) => r?,
            }
        }
    }

    /// UE indices in an EMM state, in order.
    fn ues_in(&self, state: EmmState) -> Vec<u64> {
        let mut v: Vec<u64> =
            self.enbs.iter().flat_map(|e| e.ues().filter(|(_, c)| c.ue.emm_state() == state).map(|(i, _)| i)).collect();
        v.sort_unstable();
        v
    }

    /// Start one procedure per UE of `ues`, at the arrival rate and under
    /// the in-flight cap, until every one has ended.
    async fn procedure_phase(&mut self, phase: Phase, ues: Vec<u64>) -> Result<PhaseReport, RanError> {
        self.mixed_phase(phase, ues.into_iter().map(|u| (phase, u)).collect()).await
    }

    /// Each UE's procedure of its phase, started in the order given at
    /// the arrival rate; `phase` names the whole.
    async fn mixed_phase(&mut self, phase: Phase, ues: Vec<(Phase, u64)>) -> Result<PhaseReport, RanError> {
        self.phase = PhaseState::new(phase, ues.len() as u64);
        let start = Instant::now();
        let mut next = 0usize;
        let interval = self.cfg.rate.map(|r| Duration::from_secs_f64(1.0 / r));
        let mut last_end = start;
        while self.phase.done < self.phase.total {
            let now = Instant::now();
            // Arrivals due now.
            let mut arrival_wake = None;
            while next < ues.len() && self.phase.in_flight < self.cfg.max_in_flight {
                if let Some(iv) = interval {
                    let due = start + iv.mul_f64(next as f64);
                    if due > now {
                        arrival_wake = Some(due);
                        break;
                    }
                }
                let (phase, ue) = ues[next];
                self.start(Instant::now(), phase, ue);
                next += 1;
            }
            let done_before = self.phase.done;
            self.collect_actions(now);
            if self.phase.done >= self.phase.total {
                last_end = Instant::now();
                break;
            }
            if self.phase.done != done_before {
                last_end = Instant::now();
                continue;
            }
            self.step(arrival_wake).await?;
            if self.phase.done != done_before {
                last_end = Instant::now();
            }
        }
        self.flush_now();
        let mut report = std::mem::take(&mut self.phase.report);
        report.elapsed = last_end.saturating_duration_since(start);
        self.report_progress(true);
        Ok(report)
    }

    fn start(&mut self, now: Instant, phase: Phase, ue: u64) {
        let n = self.enbs.len();
        let k = self.locate(ue);
        let next = (k + 1) % n;
        self.phase.members.insert(ue, procedure_of(phase));
        let started: Result<(), String> = match phase {
            Phase::Attach | Phase::Reattach => {
                let enb = &mut self.enbs[k];
                if enb.ue(ue).is_none() {
                    enb.add_ue(ue, Ue::new(usim_for(ue, &self.cfg.plan), self.cfg.plmn));
                }
                enb.start_attach(now, ue).map_err(|e| e.to_string())
            }
            Phase::Detach | Phase::Redetach => {
                self.enbs[k].start_detach(now, ue, self.cfg.switch_off).map_err(|e| e.to_string())
            }
            Phase::Release => {
                let r = self.enbs[k].release_inactive(ue).map_err(|e| e.to_string());
                if r.is_ok() {
                    self.releasing.insert(ue, now);
                }
                r
            }
            // One its uplink data started already is the phase's own.
            Phase::ServiceRequest
                if self.enbs[k].ue(ue).is_some_and(|c| c.ue.procedure() == Some(Procedure::ServiceRequest)) =>
            {
                Ok(())
            }
            Phase::ServiceRequest => self.enbs[k].start_service_request(now, ue).map_err(|e| e.to_string()),
            Phase::Tau => self.enbs[k].start_tau(now, ue, false).map_err(|e| e.to_string()),
            Phase::X2Handover if n < 2 => Err("a handover needs two eNBs".into()),
            Phase::X2Handover => self.start_handover(now, ue, k, next, HandoverType::X2, ue.is_multiple_of(2)),
            Phase::S1Handover if n < 2 => Err("a handover needs two eNBs".into()),
            Phase::S1Handover => self.start_handover(now, ue, k, next, HandoverType::S1, ue.is_multiple_of(2)),
            Phase::Connect | Phase::S1Setup => Ok(()),
        };
        self.phase.in_flight += 1;
        if let Err(e) = started {
            let procedure = procedure_of(phase);
            self.outcome(Outcome { ue, procedure, latency: Duration::ZERO, result: Err(e) });
        }
    }

    /// Start the handover of UE `ue` from eNB `k` to eNB `next`; an S1
    /// handover with direct or (else) indirect data forwarding.
    fn start_handover(
        &mut self,
        now: Instant,
        ue: u64,
        k: usize,
        next: usize,
        kind: HandoverType,
        direct: bool,
    ) -> Result<(), String> {
        let cell = self.enbs[next].cell();
        match kind {
            // The source's decision and X2AP HANDOVER REQUEST in one go;
            // the target sends PATH SWITCH REQUEST, and its outcome ends it.
            HandoverType::X2 => self.enbs[k]
                .x2_handover_out(now, ue, cell)
                .and_then(|ho| self.enbs[next].x2_handover_in(now, ho))
                .map(|fwd| {
                    self.enbs[k].x2_forwarding_to(ue, &fwd);
                    if let Some(f) = &mut self.follow {
                        f.follower.x2_handover(&self.enbs, ue, k, next, &fwd);
                    }
                })
                .map_err(|e| e.to_string()),
            HandoverType::S1 | HandoverType::Mixed => {
                self.enbs[k].start_s1_handover(now, ue, cell, direct).map_err(|e| e.to_string())
            }
        }
    }

    /// Serve S1AP (and the linked user plane) until `fut` is done, starting
    /// the model's moves as they fall due; then until the handovers it
    /// started have ended (or the procedure guard time has passed).
    async fn moving_until<Fut: std::future::Future>(
        &mut self,
        model: &mut MobilityModel,
        fut: Fut,
    ) -> Result<Fut::Output, RanError> {
        tokio::pin!(fut);
        let mut direct = false;
        let out = loop {
            let now = Instant::now();
            let mut due: Vec<Move> = Vec::new();
            {
                let enbs = &self.enbs;
                let n = enbs.len() as u32;
                let locate = |ue: u64| enbs.iter().position(|e| e.ue(ue).is_some()).unwrap_or(enb_of(ue, n));
                while let Some(m) = model.poll_move(now, locate) {
                    due.push(m);
                }
            }
            for m in due {
                if self.enbs[m.from].ue(m.ue).is_some_and(|c| c.ue.is_idle() && c.ue.procedure().is_none()) {
                    // An idle UE reselects the target's cell instead.
                    match self.reselect(now, m.ue, m.from, m.to) {
                        Ok(r) => {
                            if let Some(mv) = &mut self.moving {
                                mv.report.reselections += 1;
                                mv.report.reselection_taus += u64::from(r == Reselection::TauStarted);
                            }
                        }
                        Err(reason) => {
                            if let Some(mv) = &mut self.moving {
                                let key = format!("reselection: {}", skip_reason(&reason));
                                *mv.report.skipped.entry(key).or_default() += 1;
                            }
                        }
                    }
                    continue;
                }
                // S1 handovers alternate direct and indirect forwarding.
                direct = !direct;
                match self.start_handover(now, m.ue, m.from, m.to, m.handover, direct) {
                    Ok(()) => {
                        if let Some(mv) = &mut self.moving {
                            mv.started.insert(m.ue, m.handover);
                        }
                    }
                    Err(reason) => {
                        // Busy with another procedure or handover (or idle
                        // and busy): this move is skipped (TS 36.300
                        // 10.1.2: the eNB decides; an emulated one only
                        // moves who it can).
                        if let Some(mv) = &mut self.moving {
                            let key = format!("{}: {}", m.handover.name(), skip_reason(&reason));
                            *mv.report.skipped.entry(key).or_default() += 1;
                        }
                    }
                }
            }
            self.collect_actions(now);
            tokio::select! {
                biased;
                out = &mut fut => break out,
                r = self.step(model.poll_timeout()) => r?,
            }
        };
        let deadline = Instant::now() + self.cfg.procedure_timeout();
        while self.moving.as_ref().is_some_and(|m| !m.started.is_empty()) && Instant::now() < deadline {
            self.step(Some(deadline)).await?;
        }
        Ok(out)
    }

    /// Idle UE `ue` leaves eNB `from` for eNB `to` ([`crate::enb::reselect`]).
    fn reselect(&mut self, now: Instant, ue: u64, from: usize, to: usize) -> Result<Reselection, String> {
        if from == to || to >= self.enbs.len() || from >= self.enbs.len() {
            return Err(format!("no reselection of UE {ue} from eNB {from} to eNB {to}"));
        }
        crate::enb::reselect_among(now, &mut self.enbs, from, to, ue).map_err(|e| e.to_string())
    }

    /// The eNB UE `ue` is at now (handovers move UEs), else where it was
    /// put at the start.
    fn locate(&self, ue: u64) -> usize {
        self.enbs.iter().position(|e| e.ue(ue).is_some()).unwrap_or_else(|| enb_of(ue, self.enbs.len() as u32))
    }

    /// The UEs a phase starts with, in index order: registered ones,
    /// connected for a release or a handover, idle for a service request,
    /// a TAU or a detach; deregistered ones for an attach.
    fn candidates(&self, phase: Phase) -> Vec<u64> {
        // A UE attaches again once detached (it stays on its eNB).
        if matches!(phase, Phase::Attach | Phase::Reattach) {
            return self.ues_in(EmmState::Deregistered);
        }
        let connected = matches!(phase, Phase::Release | Phase::X2Handover | Phase::S1Handover);
        let mut v: Vec<u64> = self
            .enbs
            .iter()
            .flat_map(|e| e.ues())
            .filter(|(_, c)| c.ue.emm_state() == EmmState::Registered && c.s1.is_some() == connected)
            .map(|(i, _)| i)
            .collect();
        v.sort_unstable();
        v
    }

    /// Serve S1AP until no registered UE has an S1 connection (or the
    /// procedure guard time has passed).
    async fn settle_idle(&mut self) -> Result<(), RanError> {
        let deadline = Instant::now() + self.cfg.procedure_timeout();
        while Instant::now() < deadline {
            let connected = self
                .enbs
                .iter()
                .flat_map(|e| e.ues())
                .any(|(_, c)| c.ue.emm_state() == EmmState::Registered && c.s1.is_some());
            if !connected {
                break;
            }
            self.step(Some(deadline)).await?;
            self.collect_actions(Instant::now());
        }
        Ok(())
    }

    /// Releases that completed (the eNB forgot the UE's S1 connection) or
    /// ran past the procedure guard end as outcomes of the release phase.
    fn poll_releases(&mut self, now: Instant) {
        if self.releasing.is_empty() {
            return;
        }
        let guard = self.cfg.procedure_timeout();
        let mut ended = Vec::new();
        for (&ue, &started) in &self.releasing {
            let k = self.locate(ue);
            // Without a KeNB: released, perhaps on its way back already
            // (a paging or its own uplink data).
            let idle = self.enbs[k].ue(ue).is_some_and(|c| c.s1.is_none() || c.kenb.is_none());
            if idle {
                ended.push((ue, started, Ok(())));
            } else if now.saturating_duration_since(started) > guard {
                ended.push((ue, started, Err("no UE CONTEXT RELEASE COMMAND".to_string())));
            }
        }
        for (ue, started, result) in ended {
            self.releasing.remove(&ue);
            let latency = now.saturating_duration_since(started);
            self.outcome(Outcome { ue, procedure: crate::ue::Procedure::Release, latency, result });
        }
    }

    /// A handover step an eNB asks its driver for: the UE moves between
    /// eNBs as the radio would carry it.
    fn on_handover(&mut self, now: Instant, source: usize, h: HandoverAction) {
        if let Some(f) = &mut self.follow {
            f.follower.on_handover(source, &h);
        }
        match &h {
            HandoverAction::X2Release { ue, source_enb_id, .. } => {
                if let Some(e) = self.enbs.iter_mut().find(|e| e.config().enb_id == *source_enb_id) {
                    e.x2_release(*ue);
                }
            }
            HandoverAction::S1HandoverExecute { ue, target_enb_id, .. } => {
                let Some(t) = self.enbs.iter().position(|e| e.config().enb_id == *target_enb_id) else {
                    return self.anomaly(format!("S1 handover to unknown eNB {target_enb_id}"));
                };
                let arrived =
                    self.enbs[source].s1_handover_depart(*ue).and_then(|d| self.enbs[t].s1_handover_arrive(now, d));
                if let Err(e) = arrived {
                    self.anomaly(format!("S1 handover arrival: {e}"));
                }
            }
            HandoverAction::S1HandoverArrived { .. } => {}
        }
        if let Some(f) = &mut self.follow {
            f.follower.handover_done(&self.enbs, source, &h);
        }
    }

    /// The linked user plane's event: an idle UE's uplink data starts its
    /// service request, activity feeds the inactivity timer.
    fn on_user_plane(&mut self, now: Instant, ev: crate::userplane::Event) {
        let Some(f) = &mut self.follow else { return };
        f.follower.on_event(now, &mut self.enbs, ev);
    }

    /// The follower's changes to the linked user plane, in one message.
    fn send_tunnel_ops(&mut self) {
        let Some(f) = &mut self.follow else { return };
        f.follower.sync(&self.enbs);
        let ops: Vec<_> = std::iter::from_fn(|| f.follower.poll_op()).map(|(_, op)| op).collect();
        if !ops.is_empty() && f.link.ops.send(ops).is_err() {
            // The user plane stopped: nothing to follow any more.
            self.follow = None;
        }
    }

    /// Wait for something to do (an event, room in the endpoint's queue, a
    /// timer or `wake`), then handle every event that is ready.
    async fn step(&mut self, wake: Option<Instant>) -> Result<(), RanError> {
        self.flush();
        let timer = self.enbs.iter().filter_map(Enb::poll_timeout).min();
        // A release's guard ends it (poll_releases) even when nothing else
        // wakes the driver (its MME died).
        let guard = self.cfg.procedure_timeout() + Duration::from_millis(1);
        let release = self.releasing.values().min().map(|t| *t + guard);
        let timer = [timer, release, self.poll_reconnect(Instant::now())].into_iter().flatten().min();
        let wake = match (timer, wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let far = Instant::now() + Duration::from_secs(3600);
        let sleep = tokio::time::sleep_until(wake.unwrap_or(far).into());
        let has_output = !self.outbox.is_empty();
        let up_events = self.follow.as_mut().map(|f| &mut f.link.events);
        let mut from_user_plane = None;
        let event = tokio::select! {
            ev = self.events.recv() => Some(ev.ok_or(RanError::SctpClosed)?),
            ev = recv_user_plane(up_events) => {
                from_user_plane = Some(ev);
                None
            }
            permit = self.commands.reserve(), if has_output => {
                let permit = permit.map_err(|_| RanError::SctpClosed)?;
                if let Some(c) = self.outbox.pop_front() {
                    permit.send(c);
                }
                None
            }
            _ = sleep => None,
        };
        match from_user_plane {
            Some(Some(ev)) => self.on_user_plane(Instant::now(), ev),
            // The user plane stopped: nothing to follow any more.
            Some(None) => self.follow = None,
            None => {}
        }
        if let Some(ev) = event {
            // Each event gets its own time, so that latencies are not
            // rounded to the batch.
            self.handle_event(Instant::now(), ev);
            for _ in 1..EVENT_BATCH {
                match self.events.try_recv() {
                    Ok(ev) => self.handle_event(Instant::now(), ev),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Err(RanError::SctpClosed),
                }
            }
        }
        let now = Instant::now();
        for enb in &mut self.enbs {
            if enb.poll_timeout().is_some_and(|t| t <= now) {
                enb.handle_timeout(now);
            }
        }
        self.collect_actions(now);
        self.flush();
        Ok(())
    }

    /// Reconnection of eNBs whose association was lost: Connect when due
    /// (again after `every` if it fails), S1 Setup once up. When to look
    /// again, while any is under way.
    fn poll_reconnect(&mut self, now: Instant) -> Option<Instant> {
        let r = self.reconnect.as_mut()?;
        let mut i = 0;
        while i < r.pending.len() {
            match r.pending[i].1.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => i += 1,
                Ok(Ok(assoc)) => {
                    let (k, _) = r.pending.swap_remove(i);
                    self.assoc_of[k] = Some(assoc);
                    self.enb_of.insert(assoc, k);
                    if let Some(streams) = r.early_up.remove(&assoc) {
                        self.enbs[k].start_s1_setup(now, streams);
                    }
                }
                Ok(Err(_)) | Err(oneshot::error::TryRecvError::Closed) => {
                    let (k, _) = r.pending.swap_remove(i);
                    r.due.push((k, now + r.every));
                }
            }
        }
        let (ready, later): (Vec<_>, Vec<_>) = r.due.drain(..).partition(|(_, t)| *t <= now);
        r.due = later;
        for (k, _) in ready {
            let (tx, rx) = oneshot::channel();
            self.outbox.push_back(SctpCommand::Connect { remote: self.cfg.mme, reply: tx });
            r.pending.push((k, rx));
        }
        let next = r.due.iter().map(|(_, t)| *t).min();
        // Replies are polled, not awaited: look again soon while any is due.
        let poll = (!r.pending.is_empty()).then(|| now + Duration::from_millis(20));
        match (next, poll) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_event(&mut self, now: Instant, ev: SctpEvent) {
        match ev {
            SctpEvent::Data { assoc, stream, ppid, data } => {
                let Some(&k) = self.enb_of.get(&assoc) else {
                    return self.anomaly("data on an unknown association".into());
                };
                if ppid != PPID_S1AP {
                    return self.anomaly(format!("payload with PPID {ppid} ignored"));
                }
                self.enbs[k].handle_s1ap(now, stream, &data);
            }
            SctpEvent::Up { assoc, outbound_streams, .. } => match self.enb_of.get(&assoc) {
                Some(&k) => {
                    if matches!(self.enbs[k].s1_state(), S1State::Down | S1State::Failed(_)) {
                        self.enbs[k].start_s1_setup(now, outbound_streams);
                    }
                }
                None => {
                    if let Some(r) = &mut self.reconnect {
                        r.early_up.insert(assoc, outbound_streams);
                    }
                }
            },
            SctpEvent::Down { assoc, reason } => {
                if let Some(&k) = self.enb_of.get(&assoc) {
                    self.enbs[k].association_lost(now, &reason);
                    if let Some(r) = &mut self.reconnect {
                        self.enb_of.remove(&assoc);
                        self.assoc_of[k] = None;
                        r.due.push((k, now));
                    }
                }
            }
        }
    }

    /// Move every eNB's actions to the outbox and the report.
    fn collect_actions(&mut self, _now: Instant) {
        if let Some(f) = &mut self.follow {
            f.follower.retry(Instant::now(), &mut self.enbs);
        }
        // Handover steps make more actions (an S1 arrival): all are taken
        // before the user plane is compared with the contexts.
        loop {
            let handovers = self.collect_round();
            if handovers.is_empty() {
                break;
            }
            let now = Instant::now();
            for (k, h) in handovers {
                self.on_handover(now, k, h);
            }
        }
        self.send_tunnel_ops();
        self.poll_releases(Instant::now());
        self.report_progress(false);
    }

    /// Every eNB's queued actions; the handover steps are returned.
    fn collect_round(&mut self) -> Vec<(usize, HandoverAction)> {
        let mut handovers = Vec::new();
        for k in 0..self.enbs.len() {
            while let Some(action) = self.enbs[k].poll_action() {
                match action {
                    EnbAction::Send { stream, pdu } => {
                        if let Some(assoc) = self.assoc_of[k] {
                            let data = Bytes::from(pdu);
                            self.outbox.push_back(SctpCommand::Send { assoc, stream, ppid: PPID_S1AP, data });
                        }
                    }
                    EnbAction::S1Setup(r) => {
                        if let Some(slot) = self.s1_results.get_mut(k) {
                            *slot = Some(r);
                            // A setup after a reconnection is no phase's.
                            if self.phase.phase == Phase::S1Setup {
                                self.phase.done += 1;
                            }
                        }
                    }
                    EnbAction::Outcome(o) => self.outcome(o),
                    EnbAction::Anomaly(a) => self.anomaly(a),
                    EnbAction::Handover(h) => handovers.push((k, h)),
                }
            }
        }
        handovers
    }

    fn outcome(&mut self, o: Outcome) {
        if let Some(log) = &mut self.log {
            let now = Instant::now();
            let started = now.checked_sub(o.latency).unwrap_or(now);
            let (ue, procedure, latency, ok) = (o.ue, o.procedure.name(), o.latency, o.result.is_ok());
            log.push(OutcomeRecord { ue, procedure, started, latency, ok });
        }
        if let Some(m) = &mut self.moving {
            // While the model runs, every outcome is the model run's: its
            // handovers by type, the rest (periodic TAUs, service requests
            // of its data, answers to paging) by procedure.
            let mine = matches!(o.procedure, Procedure::X2Handover | Procedure::S1Handover)
                .then(|| m.started.remove(&o.ue))
                .flatten();
            let key = match mine {
                Some(t) => format!("{}-handover", t.name()),
                None => o.procedure.name().to_string(),
            };
            let r = if mine.is_some() { m.report.handovers.entry(key) } else { m.report.other.entry(key) };
            r.or_default().record(o.latency, o.result.is_ok());
            if let Err(reason) = &o.result {
                *self.report.failures.entry(failure_key(o.procedure, reason)).or_default() += 1;
            }
            return;
        }
        if self.phase.members.get(&o.ue) != Some(&o.procedure) {
            let r = self.report.unsolicited.entry(o.procedure.name().to_string()).or_default();
            r.record(o.latency, o.result.is_ok());
            if let Err(reason) = &o.result {
                *self.report.failures.entry(failure_key(o.procedure, reason)).or_default() += 1;
            }
            return;
        }
        self.phase.members.remove(&o.ue);
        self.phase.in_flight = self.phase.in_flight.saturating_sub(1);
        self.phase.done += 1;
        let ok = o.result.is_ok();
        if let Err(reason) = &o.result {
            self.phase.failed += 1;
            *self.report.failures.entry(failure_key(o.procedure, reason)).or_default() += 1;
        }
        self.phase.report.record(o.latency, ok);
    }

    fn anomaly(&mut self, what: String) {
        *self.report.anomalies.entry(what).or_default() += 1;
    }

    /// Hand queued commands to the endpoint while it has room.
    fn flush(&mut self) {
        while let Some(c) = self.outbox.pop_front() {
            match self.commands.try_send(c) {
                Ok(()) => {}
                Err(TrySendError::Full(c)) => {
                    self.outbox.push_front(c);
                    break;
                }
                Err(TrySendError::Closed(_)) => {
                    self.report.send_errors += 1 + self.outbox.len() as u64;
                    self.outbox.clear();
                    break;
                }
            }
        }
    }

    fn flush_now(&mut self) {
        self.flush();
    }

    fn report_progress(&mut self, force: bool) {
        let Some(tx) = &self.progress else { return };
        let now = Instant::now();
        if !force && self.last_progress.is_some_and(|t| now.duration_since(t) < PROGRESS_EVERY) {
            return;
        }
        self.last_progress = Some(now);
        let p = &self.phase;
        let _ = tx.send(Progress { phase: p.phase, done: p.done, failed: p.failed, total: p.total });
    }

    /// Answer what the MME still sends for a short while (releases after
    /// detach), deliver what is left and close the associations gracefully.
    async fn shutdown(&mut self) {
        let end = Instant::now() + LINGER;
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let wake = (now + LINGER_SILENCE).min(end);
            let got = tokio::select! {
                ev = self.events.recv() => ev,
                _ = tokio::time::sleep_until(wake.into()) => None,
            };
            let Some(ev) = got else { break };
            let now = Instant::now();
            self.handle_event(now, ev);
            while let Ok(ev) = self.events.try_recv() {
                self.handle_event(now, ev);
            }
            self.collect_actions(now);
            self.flush();
        }
        while let Some(c) = self.outbox.pop_front() {
            if self.commands.send(c).await.is_err() {
                self.report.send_errors += 1 + self.outbox.len() as u64;
                self.outbox.clear();
                return;
            }
        }
        for assoc in self.assoc_of.iter().flatten() {
            let _ = self.commands.send(SctpCommand::Shutdown { assoc: *assoc }).await;
        }
    }
}

/// The key a failure is counted under: its procedure and reason, without
/// the UE's index, so that one cause is one line however many UEs it hit.
fn failure_key(procedure: Procedure, reason: &str) -> String {
    let mut key = format!("{}: ", procedure.name());
    let mut rest = reason;
    while let Some(at) = rest.find("UE ") {
        let after = &rest[at + 3..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        match digits {
            0 => {
                key.push_str(&rest[..at + 3]);
                rest = after;
            }
            _ => {
                key.push_str(&rest[..at + 2]);
                rest = &after[digits..];
            }
        }
    }
    key.push_str(rest);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_counted_by_its_reason_not_by_its_ue() {
        let key = |r: &str| failure_key(Procedure::Release, r);
        assert_eq!(key("UE 10225 has no S1 connection"), "release: UE has no S1 connection");
        assert_eq!(key("UE 7's release is requested already"), "release: UE's release is requested already");
        assert_eq!(key("no UE CONTEXT RELEASE COMMAND"), "release: no UE CONTEXT RELEASE COMMAND");
        assert_eq!(key("UE 1 and UE 22 on eNB 3"), "release: UE and UE on eNB 3");
        assert_eq!(key("UE "), "release: UE ");
    }
}
