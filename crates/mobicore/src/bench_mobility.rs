//! `bench mobility --data-ues N`: the mobility phases with data. The core
//! runs with its UPF's XDP program in the `core` namespace; the first N
//! UEs' user plane (TUN and S1-U in `ran`) follows them through every
//! phase while the data network sends each a numbered datagram per
//! interval. Per phase and data UE: the downlink numbers sent during the
//! phase lost, duplicated or reordered; the longest gap between two
//! arrivals (a handover's interruption at the UE, an idle period's wait
//! for paging); the longest a datagram sent during the phase took to
//! arrive (for a release, the first buffered packet: DDN, paging, service
//! request and the switch back to forwarding).
//!
//! Then the mobility model ([`mobicore_ran::MobilityModel`]) moves the
//! data UEs while the data runs: per handover type and rate, a window in
//! which every data UE hands over at that rate, next to a window of the
//! same length in which they stay put; the first `tcp_ues` data UEs also
//! read a TCP stream from the data network in both windows. Per case:
//! the handovers' latency, the numbered downlink's losses, duplicates and
//! reordering, the largest gap per UE, and the TCP goodput of the moving
//! window as a ratio to the still one.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use mobicore_hss::SubscriberStore;
use mobicore_ran::userplane::goodput::{self, GoodputConfig, GoodputServer};
use mobicore_ran::userplane::numbered::{DownlinkLog, Numbered, NumberedConfig, StreamCheck};
use mobicore_ran::userplane::{UserPlane, UserPlaneConfig, UserPlaneStats};
use mobicore_ran::{HandoverType, MobilityConfig, MobilityModel, MovingReport, Phase, Ran, RanConfig, RanReport};
use mobicore_sctp::Transport;

use crate::allinone;
use crate::config::Config;

/// The phases, as `RanConfig::mobility` runs them.
const PHASES: [Phase; 6] =
    [Phase::Release, Phase::ServiceRequest, Phase::X2Handover, Phase::S1Handover, Phase::Release, Phase::Tau];

/// Longest wait for the data to catch up after a phase: a failure bound,
/// not a measure.
const CATCH_UP: Duration = Duration::from_secs(30);

/// The core's counters per network function.
pub type Counters = Vec<(&'static str, std::collections::BTreeMap<&'static str, u64>)>;

/// What the data UEs saw in one phase.
#[derive(Debug, Clone)]
pub struct PhaseData {
    pub phase: Phase,
    pub ues: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub reordered: usize,
    /// Per data UE, the longest time between two downlink arrivals (ms).
    pub gaps_ms: Vec<f64>,
    /// Per data UE, the longest a downlink datagram sent during the phase
    /// took to arrive (ms).
    pub delays_ms: Vec<f64>,
}

/// The moving windows of a run.
#[derive(Debug, Clone)]
pub struct MovingPlan {
    pub types: Vec<HandoverType>,
    /// Handovers per UE per second, one case each (per type).
    pub rates: Vec<f64>,
    pub window: Duration,
    /// Data UEs that also read a TCP stream.
    pub tcp_ues: usize,
    /// Each TCP stream's rate cap (Mbit/s), `None`: unpaced.
    pub tcp_mbit: Option<f64>,
    pub seed: u64,
}

/// The data of one window (moving or still).
#[derive(Debug, Clone, Default)]
pub struct WindowData {
    pub lost: usize,
    pub duplicated: usize,
    pub reordered: usize,
    /// Per data UE, the longest time between two downlink arrivals (ms).
    pub gaps_ms: Vec<f64>,
    /// TCP goodput summed over the TCP UEs (Mbit/s).
    pub tcp_mbit_s: f64,
    pub tcp_errors: Vec<String>,
    pub ran: MovingReport,
    pub seconds: f64,
}

/// One case: a handover type and rate, its moving window and the still
/// one next to it.
#[derive(Debug, Clone)]
pub struct MovingCase {
    pub handover: HandoverType,
    pub rate: f64,
    pub ues: usize,
    pub tcp_ues: usize,
    pub moving: WindowData,
    pub still: WindowData,
}

impl MovingCase {
    pub fn tcp_goodput_ratio(&self) -> f64 {
        goodput::ratio(self.moving.tcp_mbit_s, self.still.tcp_mbit_s)
    }
}

/// Everything a run with data measured.
pub struct DataRun {
    pub report: RanReport,
    pub phases: Vec<PhaseData>,
    pub cases: Vec<MovingCase>,
    pub user_plane: Option<UserPlaneStats>,
    pub counters: Counters,
}

/// The check of the numbers `s0..s1` of a downlink log.
fn window(log: &DownlinkLog, s0: u32, s1: u32) -> StreamCheck {
    let seqs: Vec<u32> = log.arrivals.iter().map(|a| a.0).filter(|s| (s0..s1).contains(s)).map(|s| s - s0).collect();
    StreamCheck::of(&seqs, s1 - s0)
}

/// Runs the workload with data for the first `data_ues` UEs, the
/// downlink every `interval`. Returns the RAN's report, the data per
/// phase and the core's counters.
pub async fn run(
    cfg: &Config,
    mut ran: RanConfig,
    t: Transport,
    data_ues: usize,
    interval: Duration,
    moving: Option<MovingPlan>,
) -> Result<DataRun> {
    let _ = mobicore_netns::cleanup_stale("mb");
    let topo = mobicore_netns::Topology::create(&mobicore_netns::unique_tag("mb"))
        .context("creating the bench's network namespaces (needs root and iproute2)")?;
    ran.s1u_addr = topo.addr.ran_s1u;
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran.plan, ran.ues)?;
    let core = allinone::start_with(cfg, store, t, Some(&topo)).await?;
    ran.mme = core.s1ap;
    let r = with_data(cfg, ran, t, &topo, data_ues, interval, moving).await;
    let counters: Vec<_> = core.counters.iter().map(|(n, c)| (*n, c.snapshot())).collect();
    core.stop().await?;
    drop(topo);
    let mut run = r?;
    run.counters = counters;
    Ok(run)
}

async fn with_data(
    cfg: &Config,
    ran: RanConfig,
    t: Transport,
    topo: &mobicore_netns::Topology,
    data_ues: usize,
    interval: Duration,
    moving: Option<MovingPlan>,
) -> Result<DataRun> {
    let (tx, bars) = crate::demo::progress_bars(false);
    let mut r = allinone::ran_session(cfg, ran, t, Some(tx)).await?;
    r.attach().await?;
    let data: Vec<_> = r.attached_ues().into_iter().take(data_ues).collect();
    anyhow::ensure!(!data.is_empty(), "no attached UE to carry data");
    let addresses: Vec<_> = data.iter().map(|u| u.tunnel.ue_ip).collect();
    let up =
        UserPlane::start(UserPlaneConfig::new(&topo.ran, topo.addr.ran_s1u), data.iter().map(|u| u.tunnel).collect())
            .await
            .context("starting the eNBs' user plane")?;
    r.follow(up.link().await?, &data);
    let mut nc = NumberedConfig::new(&topo.ran, &topo.dn, topo.addr.dn_sgi);
    nc.interval = interval;
    let mut streams = Numbered::start(&nc, &addresses).await.context("starting the numbered streams")?;
    // Both directions work before the phases start.
    streams.uplink(3).await?;
    anyhow::ensure!(r.serve_until(streams.wait_uplink(CATCH_UP)).await?, "no uplink through the core");
    streams.start_downlink();
    anyhow::ensure!(r.serve_until(streams.wait_reached(10, CATCH_UP)).await?, "no downlink through the core");

    let mut out = Vec::new();
    for phase in PHASES {
        let (t0, s0) = (Instant::now(), streams.sent());
        r.phase(phase).await?;
        // The data catches up: the paged UEs are back, the handed over
        // ones receive the new path.
        let s1 = streams.sent();
        let _ = r.serve_until(streams.wait_reached(s1 + 5, CATCH_UP)).await?;
        let t1 = Instant::now();
        let sent = streams.send_times();
        let mut d = PhaseData {
            phase,
            ues: addresses.len(),
            lost: 0,
            duplicated: 0,
            reordered: 0,
            gaps_ms: Vec::new(),
            delays_ms: Vec::new(),
        };
        for u in streams.report() {
            let c = window(&u.log, s0, s1);
            (d.lost, d.duplicated, d.reordered) =
                (d.lost + c.lost, d.duplicated + c.duplicated, d.reordered + c.reordered);
            if let Some(g) = u.log.largest_gap(t0, t1) {
                d.gaps_ms.push(g.as_secs_f64() * 1000.0);
            }
            if let Some(l) = u.log.largest_delay(&sent, t0, t1) {
                d.delays_ms.push(l.as_secs_f64() * 1000.0);
            }
        }
        out.push(d);
    }
    let mut cases = Vec::new();
    if let Some(plan) = moving {
        // The UEs are back from the last phase's idle mode.
        let s = streams.sent();
        anyhow::ensure!(r.serve_until(streams.wait_reached(s + 5, CATCH_UP)).await?, "the data UEs are not back");
        let mut g = GoodputConfig::new(&topo.ran, &topo.dn, topo.addr.dn_sgi);
        g.mbit_per_ue = plan.tcp_mbit;
        let server = GoodputServer::start(&g).context("starting the TCP server in the data network")?;
        let tcp: Vec<_> = addresses.iter().copied().take(plan.tcp_ues).collect();
        let indices: Vec<u64> = data.iter().map(|u| u.index).collect();
        let mut seed = plan.seed;
        for &handover in &plan.types {
            for &rate in &plan.rates {
                let w = Win { streams: &streams, goodput: &g, tcp: &tcp, ues: &indices, window: plan.window };
                let still = w.run(&mut r, None).await?;
                seed += 1;
                let moving = w
                    .run(
                        &mut r,
                        Some(MobilityConfig {
                            handover_rate: rate,
                            handover_type: handover,
                            seed,
                            ..Default::default()
                        }),
                    )
                    .await?;
                println!(
                    "{handover} at {rate}/s: {} handovers, TCP {:.1} Mbit/s moving, {:.1} still, lost/dup/reord {}/{}/{}",
                    moving.ran.handovers.values().map(|p| p.succeeded).sum::<u64>(),
                    moving.tcp_mbit_s,
                    still.tcp_mbit_s,
                    moving.lost,
                    moving.duplicated,
                    moving.reordered
                );
                cases.push(MovingCase { handover, rate, ues: indices.len(), tcp_ues: tcp.len(), moving, still });
            }
        }
        server.stop();
    }
    streams.close();
    let mut user_plane = None;
    if let Ok(s) = up.stop().await {
        println!(
            "eNB user plane: {} downlink packets forwarded by handover sources, End Markers {} forwarded / {} \
             received, {} targets stopped waiting for one, {} uplink packets held while idle, drops {:?}",
            s.forwarded,
            s.end_markers_forwarded,
            s.end_markers_received,
            s.end_marker_timeouts,
            s.idle_uplink_held,
            s.drops
        );
        user_plane = Some(s);
    }
    let report = r.finish().await?;
    let _ = bars.await;
    Ok(DataRun { report, phases: out, cases, user_plane, counters: Vec::new() })
}

/// A window of data with the UEs moving (a model configuration) or not.
struct Win<'a> {
    streams: &'a Numbered,
    goodput: &'a GoodputConfig,
    tcp: &'a [std::net::Ipv4Addr],
    ues: &'a [u64],
    window: Duration,
}

impl Win<'_> {
    async fn run(&self, r: &mut Ran, moving: Option<MobilityConfig>) -> Result<WindowData> {
        let mut model = MobilityModel::new(moving.clone().unwrap_or_default(), r.enb_count());
        let now = Instant::now();
        if let Some(m) = &moving {
            for &ue in self.ues {
                model.add_ue_with(now, ue, m.handover_rate, None);
            }
        }
        let (t0, s0) = (Instant::now(), self.streams.sent());
        let w = goodput::start_window(self.goodput, self.tcp, self.window);
        let length = self.window;
        // The TCP readers end the window; without any, its length does.
        let done = async move {
            let (res, _) = tokio::join!(tokio::task::spawn_blocking(move || w.join()), tokio::time::sleep(length));
            res.unwrap_or_default()
        };
        let (ran, results) = r.moving(&mut model, done).await?;
        let s1 = self.streams.sent();
        let seconds = t0.elapsed().as_secs_f64();
        let _ = r.serve_until(self.streams.wait_reached(s1 + 5, CATCH_UP)).await?;
        let t1 = Instant::now();
        let mut d = WindowData { ran, seconds, ..Default::default() };
        for u in self.streams.report() {
            let c = window(&u.log, s0, s1);
            (d.lost, d.duplicated, d.reordered) =
                (d.lost + c.lost, d.duplicated + c.duplicated, d.reordered + c.reordered);
            if let Some(g) = u.log.largest_gap(t0, t1) {
                d.gaps_ms.push(g.as_secs_f64() * 1000.0);
            }
        }
        for res in results {
            match res {
                Ok(g) => d.tcp_mbit_s += g.mbit_s(),
                Err(e) => d.tcp_errors.push(e),
            }
        }
        Ok(d)
    }
}

/// The `p`-th percentile (nearest rank) of `v`, 0 when empty.
pub fn percentile_ms(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}
