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

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use mobicore_hss::SubscriberStore;
use mobicore_ran::userplane::numbered::{DownlinkLog, Numbered, NumberedConfig, StreamCheck};
use mobicore_ran::userplane::{UserPlane, UserPlaneConfig};
use mobicore_ran::{Phase, RanConfig, RanReport};
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
) -> Result<(RanReport, Vec<PhaseData>, Counters)> {
    let _ = mobicore_netns::cleanup_stale("mb");
    let topo = mobicore_netns::Topology::create(&mobicore_netns::unique_tag("mb"))
        .context("creating the bench's network namespaces (needs root and iproute2)")?;
    ran.s1u_addr = topo.addr.ran_s1u;
    let store = SubscriberStore::in_memory();
    allinone::provision(&store, &ran.plan, ran.ues)?;
    let core = allinone::start_with(cfg, store, t, Some(&topo)).await?;
    let r = with_data(cfg, ran, t, &topo, data_ues, interval).await;
    let counters: Vec<_> = core.counters.iter().map(|(n, c)| (*n, c.snapshot())).collect();
    core.stop().await?;
    drop(topo);
    let (report, data) = r?;
    Ok((report, data, counters))
}

async fn with_data(
    cfg: &Config,
    ran: RanConfig,
    t: Transport,
    topo: &mobicore_netns::Topology,
    data_ues: usize,
    interval: Duration,
) -> Result<(RanReport, Vec<PhaseData>)> {
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
    streams.close();
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
    }
    let report = r.finish().await?;
    let _ = bars.await;
    Ok((report, out))
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
