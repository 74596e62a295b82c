//! `mobicore bench divert` (issue 11 item 9): seed 000 Figs 10-16, what
//! diverting a UE's GTP-U at the steering switch costs the data path,
//! against not diverting, in the same run.
//!
//! The paper's testbed (Fig. 9) is an eNB, an OVS switch and an S/P-GW
//! in VMs; here seven namespaces ([`topo`]) with every hop in XDP: the
//! eNB encapsulates the UE's packets into GTP-U (the minimal one-tunnel
//! encap/decap programs), the switch runs `steer_xdp` (the UPF's steering
//! role, programmed over PFCP through the sans-I/O [`UpfCore`]), and two
//! anchor-role UPFs (`upf_xdp`) each with its own data network hold the
//! UE's session: the original in `core`, the edge replica in `edge`.
//!
//! - not diverting: the switch passes the UE's G-PDUs through to `core`
//!   (FIB forwarding, the paper's "without GTP processing");
//! - diverting: one PFCP session on the switch diverts the UE to `edge`
//!   (re-encapsulated in XDP; selective mode by default: the replica's
//!   TEID, the inner source translated to the replica's UE address, and
//!   back on the downlink), the paper's "with GTP processing".
//!
//! Measured, each block of the two cases next to each other in
//! alternating order so that a shared host's drift hits both alike:
//! round trips UE - server through eNB, switch and anchor (UDP echo;
//! Fig. 10) and their jitter (|difference| of consecutive round trips,
//! Fig. 11); per direction and target rate, a paced TCP transfer's
//! achieved rate with the switch's CPU use (Figs 12-15) and a paced UDP
//! stream's loss (Fig. 16) with the round trips of probes beside it.
//!
//! The switch's CPU use: every veth has threaded NAPI, so each
//! namespace's receive path (its XDP program, redirects, the stack at the
//! ends) runs in kernel threads of its own; the switch's share is the CPU
//! time of its three NAPI threads over the run (100 = one CPU).
//!
//! - [`topo`]: the namespaces, veths and addresses.
//! - [`traffic`]: TCP transfer, UDP stream, probes, echo server.

pub mod topo;
pub mod traffic;

use crate::cp::{PfcpDriver, SharedPlane, CP};
use crate::DpBenchError;
use mobicore_netns::run_in;
use mobicore_upf::pfcp::steering;
use mobicore_upf::rules::{
    Action, Diversion, Far, GtpuTunnel, PacketDetection, Pdr, SessionRules, INTERFACE_ACCESS, INTERFACE_CORE,
};
use mobicore_upf::xdp::baseline::{self, Baseline, FixedTunnel};
use mobicore_upf::xdp::{ifindex, AttachMode, Counter, LoadedProgram, MapSizes, XdpConfig, XdpPlane};
use mobicore_upf::{ForwardingPlane, UpfConfig, UpfRole};
use serde::Serialize;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use topo::*;
use traffic::Direction;

/// The UE's uplink TEID at the original anchor (and at a naive replica).
const TEID_UL: u32 = 0x100;
/// The UE's uplink TEID at a selective replica.
const TEID_REPLICA: u32 = 0x900;
/// The eNB's downlink TEID.
const TEID_DL: u32 = 0x200;

/// How the replica at the edge holds the UE (issue 11 item 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DivertMode {
    /// Same TEID and UE address at the replica: the switch rewrites the
    /// outer destination only.
    Naive,
    /// The replica's TEID and UE address: the switch also translates the
    /// inner source (checksums updated) and, on the downlink, back.
    Selective,
}

impl DivertMode {
    pub fn name(self) -> &'static str {
        match self {
            DivertMode::Naive => "naive",
            DivertMode::Selective => "selective",
        }
    }
}

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct DivertBenchOptions {
    /// Target rates of the TCP transfers and UDP streams, Mbit/s.
    pub rates_mbps: Vec<f64>,
    /// Length of each TCP transfer and each UDP stream.
    pub duration: Duration,
    /// Blocks per case at each point (in A B B A order); a point's rates
    /// are the blocks' mean.
    pub rounds: usize,
    /// Idle round-trip blocks per case, and probes per block.
    pub rtt_blocks: usize,
    pub rtt_block_probes: usize,
    pub mode: DivertMode,
}

impl Default for DivertBenchOptions {
    /// About 100 s on a 2-CPU host.
    fn default() -> Self {
        DivertBenchOptions {
            rates_mbps: vec![100.0, 250.0, 500.0, 1000.0, 1500.0, 2000.0, 3000.0],
            duration: Duration::from_millis(500),
            rounds: 2,
            rtt_blocks: 10,
            rtt_block_probes: 1000,
            mode: DivertMode::Selective,
        }
    }
}

impl DivertBenchOptions {
    /// Two rates, short transfers, fewer probes: under 20 s.
    pub fn quick() -> Self {
        DivertBenchOptions {
            rates_mbps: vec![200.0, 2000.0],
            duration: Duration::from_millis(250),
            rounds: 1,
            rtt_blocks: 2,
            rtt_block_probes: 300,
            ..Self::default()
        }
    }
}

/// Round-trip percentiles and jitter, us.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RttStats {
    pub rtt_p50_us: f64,
    pub rtt_p90_us: f64,
    pub rtt_p99_us: f64,
    /// Mean |difference| of consecutive round trips.
    pub jitter_us: f64,
}

impl RttStats {
    /// None with fewer than two samples.
    pub fn of(samples: &[f64]) -> Option<RttStats> {
        if samples.len() < 2 {
            return None;
        }
        let jit: Vec<f64> = samples.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        Some(RttStats {
            rtt_p50_us: pct(&s, 0.5),
            rtt_p90_us: pct(&s, 0.9),
            rtt_p99_us: pct(&s, 0.99),
            jitter_us: jit.iter().sum::<f64>() / jit.len() as f64,
        })
    }
}

/// `q`-quantile of sorted `s` (nearest rank).
fn pct(s: &[f64], q: f64) -> f64 {
    s[((s.len() - 1) as f64 * q).round() as usize]
}

/// One point of Figs 12-16 (the `--json` rows).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DivertPoint {
    pub diverting: bool,
    /// "uplink" or "downlink".
    pub direction: &'static str,
    pub target_mbps: f64,
    /// TCP goodput at the receiver.
    pub achieved_mbps: f64,
    /// The switch's CPU use during the TCP transfer (100 = one CPU).
    pub cpu_pct: f64,
    /// The UDP stream at the same target: what its sender managed, and
    /// the share of its datagrams that never arrived.
    pub udp_sent_mbps: f64,
    pub loss_pct: f64,
    /// Round trips of the probes beside the UDP stream (latency under
    /// load); None when fewer than two came back.
    #[serde(flatten)]
    pub rtt: Option<RttStats>,
}

/// Idle round trips of one case (Figs 10-11).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RttCase {
    pub diverting: bool,
    pub probes: usize,
    pub answered: usize,
    #[serde(flatten)]
    pub stats: Option<RttStats>,
    /// Round trips, us, in the order measured (block after block).
    #[serde(skip)]
    pub samples: Vec<f64>,
}

/// A histogram of both cases over the same bins.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Histogram {
    /// Lower edge of the first bin and the bin width, us.
    pub start_us: f64,
    pub bin_us: f64,
    pub not_diverting: Vec<u64>,
    pub diverting: Vec<u64>,
}

impl Histogram {
    /// `bins` equal bins from the smallest sample to the 99.5th
    /// percentile of both cases (the tail past it counts in the last bin).
    pub fn of(a: &[f64], b: &[f64], bins: usize) -> Histogram {
        let mut all: Vec<f64> = a.iter().chain(b).copied().collect();
        all.sort_by(f64::total_cmp);
        let (lo, hi) = if all.is_empty() { (0.0, 1.0) } else { (all[0], pct(&all, 0.995)) };
        let bin = ((hi - lo) / bins as f64).max(0.1);
        let count = |v: &[f64]| {
            let mut h = vec![0u64; bins];
            for x in v {
                h[(((x - lo) / bin) as usize).min(bins - 1)] += 1;
            }
            h
        };
        Histogram { start_us: lo, bin_us: bin, not_diverting: count(a), diverting: count(b) }
    }
}

/// The switch's XDP counters after the run: that diverted packets stayed
/// in XDP (and how many passed through).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SteeringCounts {
    /// G-PDUs re-encapsulated to the edge anchor.
    pub diverted_uplink: u64,
    /// The edge anchor's G-PDUs rewritten back to the eNB.
    pub diverted_downlink: u64,
    /// Packets passed through to their destination.
    pub passed: u64,
    /// Packets the switch left to the kernel for want of a route (0 when
    /// everything stayed in XDP).
    pub to_kernel: u64,
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DivertReport {
    pub mode: DivertMode,
    /// Idle round trips, not diverting then diverting.
    pub rtt: Vec<RttCase>,
    /// Fig. 10 and Fig. 11.
    pub rtt_histogram: Histogram,
    pub jitter_histogram: Histogram,
    pub points: Vec<DivertPoint>,
    pub steering: SteeringCounts,
}

impl DivertReport {
    /// The idle median round trip diverting minus not diverting, us.
    pub fn added_median_us(&self) -> Option<f64> {
        let m = |d: bool| self.rtt.iter().find(|c| c.diverting == d)?.stats.map(|s| s.rtt_p50_us);
        Some(m(true)? - m(false)?)
    }

    /// Each (direction, target) with its two points: (not diverting, diverting).
    pub fn pairs(&self) -> Vec<(&DivertPoint, &DivertPoint)> {
        let mut out = Vec::new();
        for a in self.points.iter().filter(|p| !p.diverting) {
            let b = self
                .points
                .iter()
                .find(|p| p.diverting && p.direction == a.direction && p.target_mbps == a.target_mbps);
            if let Some(b) = b {
                out.push((a, b));
            }
        }
        out
    }
}

/// Runs the bench on a blocking thread (namespaces and XDP programs are
/// gone when it returns).
pub async fn run(opts: DivertBenchOptions) -> Result<DivertReport, DpBenchError> {
    tokio::task::spawn_blocking(move || run_blocking(&opts))
        .await
        .map_err(|e| DpBenchError::Io(std::io::Error::other(format!("bench thread: {e}"))))?
}

/// The same, synchronously.
pub fn run_blocking(opts: &DivertBenchOptions) -> Result<DivertReport, DpBenchError> {
    if opts.rates_mbps.is_empty() || opts.rates_mbps.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        return Err(DpBenchError::Options("at least one target rate, each above 0 Mbit/s".into()));
    }
    if opts.rtt_blocks == 0
        || opts.rtt_block_probes < 2
        || opts.rounds == 0
        || opts.duration < Duration::from_millis(50)
    {
        return Err(DpBenchError::Options(
            "at least one round-trip block of 2 probes, one round, 50 ms per run".into(),
        ));
    }
    mobicore_netns::require_root()?;
    let topo = DivertTopology::create(&mobicore_netns::unique_tag("mcdv"))?;
    let mut bench = Bench::build(topo, opts.mode)?;
    let r = bench.measure(opts);
    tracing::info!(counters = ?bench.steer_counters(), "steering switch");
    r
}

/// The steering switch's PFCP node, driven in memory as the controller's
/// steering client would drive it over the wire.
struct Switch {
    cp: PfcpDriver,
    /// The UP SEID of the diversion in force.
    diversion: Option<u64>,
    divert: Diversion,
}

impl Switch {
    fn new(plane: SharedPlane, divert: Diversion) -> Result<Switch, DpBenchError> {
        let cfg = UpfConfig { role: UpfRole::Steering, s1u_addr: STEER_ENB, ..UpfConfig::default() };
        Ok(Switch { cp: PfcpDriver::associate(cfg, plane)?, diversion: None, divert })
    }

    /// Establishes or deletes the diversion.
    fn set(&mut self, on: bool) -> Result<(), DpBenchError> {
        match (on, self.diversion) {
            (true, None) => {
                let seq = self.cp.next_seq();
                let seid = self.cp.request(&steering::establishment_request(seq, CP, 1, CP, &self.divert))?;
                self.diversion = Some(seid.ok_or_else(|| DpBenchError::Plane("no UP F-SEID".into()))?);
            }
            (false, Some(seid)) => {
                let seq = self.cp.next_seq();
                self.cp.request(&steering::deletion_request(seq, seid))?;
                self.diversion = None;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The UE's session at an anchor as the S/P-GW-C installs it after Modify
/// Bearer: uplink PDR by F-TEID with outer header removal to Core;
/// downlink PDR by UE address, outer header creation towards the eNB.
fn anchor_rules(teid: u32, s1u: Ipv4Addr, ue: Ipv4Addr) -> SessionRules {
    let pdi = |iface: u8, local_fteid, ue_ipv4| PacketDetection {
        source_interface: iface,
        local_fteid,
        choose_fteid: false,
        ue_ipv4,
        ue_ipv6: None,
        network_instance: Some("internet".into()),
        sdf_filters: 0,
        flows: Vec::new(),
    };
    let pdr = |id, pdi, ohr| Pdr {
        id,
        precedence: 255,
        pdi,
        outer_header_removal: ohr,
        far_id: Some(u32::from(id)),
        qer_ids: vec![],
        urr_ids: vec![],
    };
    let far = |id, iface, ohc| Far {
        id,
        action: Action { forw: true, ..Default::default() },
        destination_interface: Some(iface),
        network_instance: Some("internet".into()),
        outer_header_creation: ohc,
        bar_id: None,
        duplicating: vec![],
    };
    let mut r = SessionRules::default();
    r.pdrs.insert(1, pdr(1, pdi(INTERFACE_ACCESS, Some((teid, s1u)), None), Some(0)));
    r.pdrs.insert(2, pdr(2, pdi(INTERFACE_CORE, None, Some(ue)), None));
    r.fars.insert(1, far(1, INTERFACE_CORE, None));
    r.fars.insert(2, far(2, INTERFACE_ACCESS, Some(GtpuTunnel { teid: TEID_DL, ipv4: ENB })));
    r
}

/// Loads an anchor-role UPF with the UE's session and attaches it to both
/// of its veths (on a thread in its namespace: DEVMAP entries name
/// interfaces of the writer's namespace).
fn anchor(ns: &str, s1u: End, sgi: End, teid: u32, ue: Ipv4Addr) -> Result<XdpPlane, DpBenchError> {
    run_in(ns, || {
        let mut p = XdpPlane::load(XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(s1u.2) })?;
        p.install(1, &anchor_rules(teid, s1u.2, ue)).map_err(|e| DpBenchError::Plane(e.to_string()))?;
        p.attach(s1u.0, AttachMode::Native)?;
        p.attach(sgi.0, AttachMode::Native)?;
        Ok(p)
    })?
}

/// XDP_PASS on a traffic end (the peer of a redirect target needs a
/// program), software checksums.
fn end(ns: &str, e: End) -> Result<LoadedProgram, DpBenchError> {
    run_in(ns, || {
        mobicore_netns::set_tx_checksum(e.0, false)?;
        let mut p = baseline::load_pass()?;
        p.attach(e.0, AttachMode::Native)?;
        Ok(p)
    })?
}

/// The run. Field order is drop order: servers, then programs, then the
/// namespaces.
struct Bench {
    _echo: Vec<traffic::Echo>,
    switch: Switch,
    steer: SharedPlane,
    /// The switch's NAPI threads.
    steer_threads: Vec<libc::pid_t>,
    _anchors: Vec<XdpPlane>,
    _enb: Vec<Baseline>,
    _ends: Vec<LoadedProgram>,
    mode: DivertMode,
    topo: DivertTopology,
}

impl Bench {
    fn build(topo: DivertTopology, mode: DivertMode) -> Result<Bench, DpBenchError> {
        let ends = vec![end(&topo.ue, U0)?, end(&topo.dn, D0)?, end(&topo.mec, M0)?];
        // The eNB: the UE's packets into the UE's tunnel towards the
        // original anchor; the downlink tunnel's packets to the UE.
        let enb = run_in(&topo.enb, || {
            let (e_ue, e_s1) = (ifindex(E_UE.0)?, ifindex(E_S1.0)?);
            let up = FixedTunnel { teid: TEID_UL, src: ENB, dst: CORE, ifindex: e_s1, dmac: S_ENB.1, smac: E_S1.1 };
            let down = FixedTunnel { teid: TEID_DL, ifindex: e_ue, dmac: U0.1, smac: E_UE.1, ..up };
            let mut encap = baseline::load_encap_min(&up)?;
            encap.program.attach(E_UE.0, AttachMode::Native)?;
            let mut decap = baseline::load_decap_min(&down)?;
            decap.program.attach(E_S1.0, AttachMode::Native)?;
            Ok::<_, DpBenchError>(vec![encap, decap])
        })??;
        let (edge_teid, edge_ue) = match mode {
            DivertMode::Naive => (TEID_UL, UE),
            DivertMode::Selective => (TEID_REPLICA, REPLICA_UE),
        };
        let anchors =
            vec![anchor(&topo.core, C_S1, C_DN, TEID_UL, UE)?, anchor(&topo.edge, X_S1, X_MEC, edge_teid, edge_ue)?];
        let steer = run_in(&topo.steer, || {
            let mut p =
                XdpPlane::load_role(XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(STEER_ENB) }, Some(16))?;
            for e in [S_ENB, S_CORE, S_EDGE] {
                p.attach(e.0, AttachMode::Native)?;
            }
            Ok::<_, DpBenchError>(SharedPlane::new(p))
        })??;
        topo.threaded_napi(&topo.ue, &[U0.0])?;
        topo.threaded_napi(&topo.enb, &[E_UE.0, E_S1.0])?;
        topo.threaded_napi(&topo.core, &[C_S1.0, C_DN.0])?;
        topo.threaded_napi(&topo.edge, &[X_S1.0, X_MEC.0])?;
        topo.threaded_napi(&topo.dn, &[D0.0])?;
        topo.threaded_napi(&topo.mec, &[M0.0])?;
        let steer_threads = topo.threaded_napi(&topo.steer, &[S_ENB.0, S_CORE.0, S_EDGE.0])?;
        if steer_threads.is_empty() {
            tracing::warn!("no NAPI threads of the switch found: its CPU use reads 0");
        }
        let divert = Diversion {
            ue: UE,
            flow: None,
            anchor: EDGE,
            anchor_teid: (mode == DivertMode::Selective).then_some(TEID_REPLICA),
            anchor_ue: (mode == DivertMode::Selective).then_some(REPLICA_UE),
            origin: CORE,
        };
        let switch = Switch::new(steer.clone(), divert)?;
        let echo = vec![traffic::Echo::start(&topo.dn)?, traffic::Echo::start(&topo.mec)?];
        Ok(Bench { _echo: echo, switch, steer, steer_threads, _anchors: anchors, _enb: enb, _ends: ends, mode, topo })
    }

    fn steer_counters(&self) -> SteeringCounts {
        let p = self.steer.lock();
        let c = |k| p.counter(k).unwrap_or(0);
        SteeringCounts {
            diverted_uplink: c(Counter::SteerUplink),
            diverted_downlink: c(Counter::SteerDownlink),
            passed: c(Counter::SteerPass),
            to_kernel: c(Counter::PassNoRoute),
        }
    }

    /// The server's namespace and the UE's address there, per case.
    fn server(&self, diverting: bool) -> (&str, Ipv4Addr) {
        match (diverting, self.mode) {
            (false, _) => (&self.topo.dn, UE),
            (true, DivertMode::Naive) => (&self.topo.mec, UE),
            (true, DivertMode::Selective) => (&self.topo.mec, REPLICA_UE),
        }
    }

    /// Probes until the path answers (the first packets of a fresh path
    /// meet cold caches), at most 3 s.
    fn warm(&mut self, diverting: bool) -> Result<(), DpBenchError> {
        self.switch.set(diverting)?;
        let p = traffic::prober(&self.topo.ue)?;
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut seq = 1u64 << 40;
        while Instant::now() < deadline {
            seq += 1;
            if p.once(seq).is_some() {
                return Ok(());
            }
        }
        let case = if diverting { "diverting" } else { "not diverting" };
        Err(DpBenchError::Plane(format!(
            "no echo from the server through the switch ({case}): {:?}",
            self.steer_counters()
        )))
    }

    fn measure(&mut self, opts: &DivertBenchOptions) -> Result<DivertReport, DpBenchError> {
        self.warm(false)?;
        self.warm(true)?;
        // Figs 10-11: idle round trips in alternating blocks.
        let mut samples = [Vec::new(), Vec::new()];
        let mut seq = 0u64;
        for b in 0..2 * opts.rtt_blocks {
            let diverting = (b % 4 == 1) || (b % 4 == 2);
            self.switch.set(diverting)?;
            let p = traffic::prober(&self.topo.ue)?;
            samples[usize::from(diverting)].extend(p.block(seq, opts.rtt_block_probes));
            seq += opts.rtt_block_probes as u64;
        }
        let jitter = |s: &[f64]| s.windows(2).map(|w| (w[1] - w[0]).abs()).collect::<Vec<f64>>();
        let rtt_histogram = Histogram::of(&samples[0], &samples[1], 40);
        let jitter_histogram = Histogram::of(&jitter(&samples[0]), &jitter(&samples[1]), 40);
        let probes = opts.rtt_blocks * opts.rtt_block_probes;
        let rtt = [false, true]
            .map(|d| {
                let s = std::mem::take(&mut samples[usize::from(d)]);
                RttCase { diverting: d, probes, answered: s.len(), stats: RttStats::of(&s), samples: s }
            })
            .to_vec();
        tracing::info!(?rtt, "idle round trips");

        // Figs 12-16: per target and direction, both cases back to back.
        let mut points = Vec::new();
        let mut run = 0u32;
        for (i, &rate) in opts.rates_mbps.iter().enumerate() {
            for (j, dir) in [Direction::Uplink, Direction::Downlink].into_iter().enumerate() {
                // Blocks A B B A ..., A alternating between points.
                let mut blocks: [Vec<Block>; 2] = [Vec::new(), Vec::new()];
                for k in 0..2 * opts.rounds {
                    let diverting = (k % 4 == 1 || k % 4 == 2) != ((i + j) % 2 == 1);
                    run += 1;
                    blocks[usize::from(diverting)].push(self.block(diverting, dir, rate, opts.duration, run)?);
                }
                for diverting in [false, true] {
                    let p = Block::point(&blocks[usize::from(diverting)], diverting, dir, rate);
                    tracing::info!(?p, "point");
                    points.push(p);
                }
            }
        }
        Ok(DivertReport {
            mode: self.mode,
            rtt,
            rtt_histogram,
            jitter_histogram,
            points,
            steering: self.steer_counters(),
        })
    }

    /// One block of a point: a TCP transfer (with the switch's CPU), then
    /// a UDP stream with probes beside it.
    fn block(
        &mut self,
        diverting: bool,
        dir: Direction,
        rate: f64,
        dur: Duration,
        run: u32,
    ) -> Result<Block, DpBenchError> {
        self.switch.set(diverting)?;
        let (srv, ue_at_server) = self.server(diverting);
        let (srv, ue_ns) = (srv.to_string(), self.topo.ue.clone());
        let (c0, t0) = (cpu_ns(&self.steer_threads), Instant::now());
        let tcp = traffic::tcp(&ue_ns, &srv, dir, Some(rate * 1e6), dur)?;
        let cpu_pct = (cpu_ns(&self.steer_threads) - c0) as f64 / t0.elapsed().as_nanos() as f64 * 100.0;
        let udp = traffic::udp(&ue_ns, &srv, dir, rate * 1e6, dur, ue_at_server, run)?;
        Ok(Block { tcp_mbps: tcp.mbps(), cpu_pct, udp })
    }
}

/// What one block measured.
struct Block {
    tcp_mbps: f64,
    cpu_pct: f64,
    udp: traffic::Stream,
}

impl Block {
    /// A point from its blocks: rates and CPU averaged, datagrams and
    /// round trips pooled.
    fn point(blocks: &[Block], diverting: bool, dir: Direction, target_mbps: f64) -> DivertPoint {
        let n = blocks.len().max(1) as f64;
        let mean = |f: &dyn Fn(&Block) -> f64| blocks.iter().map(f).sum::<f64>() / n;
        let pooled = traffic::Stream {
            sent: blocks.iter().map(|b| b.udp.sent).sum(),
            received: blocks.iter().map(|b| b.udp.received).sum(),
            sent_mbps: mean(&|b| b.udp.sent_mbps),
            rtts_us: blocks.iter().flat_map(|b| b.udp.rtts_us.iter().copied()).collect(),
        };
        DivertPoint {
            diverting,
            direction: dir.name(),
            target_mbps,
            achieved_mbps: mean(&|b| b.tcp_mbps),
            cpu_pct: mean(&|b| b.cpu_pct),
            udp_sent_mbps: pooled.sent_mbps,
            loss_pct: pooled.loss_pct(),
            rtt: RttStats::of(&pooled.rtts_us),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_take_percentiles_and_consecutive_differences() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        let r = RttStats::of(&s).unwrap();
        assert_eq!((r.rtt_p50_us, r.rtt_p90_us, r.rtt_p99_us, r.jitter_us), (51.0, 90.0, 99.0, 1.0));
        assert_eq!(RttStats::of(&[1.0]), None);
        assert_eq!(RttStats::of(&[10.0, 30.0, 20.0]).unwrap().jitter_us, 15.0);
    }

    #[test]
    fn histogram_shares_bins_and_keeps_every_sample() {
        let a = [10.0, 11.0, 12.0, 50.0];
        let b = [10.5, 20.0];
        let h = Histogram::of(&a, &b, 4);
        assert_eq!(h.start_us, 10.0);
        assert_eq!(h.not_diverting.iter().sum::<u64>(), 4);
        assert_eq!(h.diverting.iter().sum::<u64>(), 2);
        assert_eq!(h.not_diverting[0], 3);
    }

    #[test]
    fn pairs_match_direction_and_target() {
        let p = |diverting, direction, achieved_mbps| DivertPoint {
            diverting,
            direction,
            target_mbps: 100.0,
            achieved_mbps,
            cpu_pct: 1.0,
            udp_sent_mbps: 100.0,
            loss_pct: 0.0,
            rtt: None,
        };
        let h = Histogram::of(&[], &[], 2);
        let r = DivertReport {
            mode: DivertMode::Naive,
            rtt: vec![],
            rtt_histogram: h.clone(),
            jitter_histogram: h,
            points: vec![
                p(true, "uplink", 90.0),
                p(false, "downlink", 80.0),
                p(false, "uplink", 100.0),
                p(true, "downlink", 70.0),
            ],
            steering: SteeringCounts { diverted_uplink: 0, diverted_downlink: 0, passed: 0, to_kernel: 0 },
        };
        let pairs: Vec<(f64, f64)> = r.pairs().iter().map(|(a, b)| (a.achieved_mbps, b.achieved_mbps)).collect();
        assert_eq!(pairs, vec![(80.0, 70.0), (100.0, 90.0)]);
        assert_eq!(r.added_median_us(), None);
    }

    /// A tiny run in namespaces: every point and round trip is there, the
    /// diverted traffic went through the switch's XDP diversion both ways
    /// (its counters), and no namespace of the run is left. Nothing about
    /// rates or times is asserted.
    #[test]
    fn a_quick_run_diverts_in_xdp_and_leaves_nothing_behind() {
        if mobicore_netns::require_root().is_err() {
            eprintln!("note: skipped, network namespaces and XDP need root");
            return;
        }
        let opts = DivertBenchOptions {
            rates_mbps: vec![50.0, 200.0],
            duration: Duration::from_millis(150),
            rounds: 1,
            rtt_blocks: 2,
            rtt_block_probes: 50,
            mode: DivertMode::Selective,
        };
        let r = run_blocking(&opts).expect("bench divert");
        assert_eq!(r.points.len(), 8, "2 rates x 2 directions x 2 cases");
        assert_eq!(r.pairs().len(), 4);
        for (a, b) in r.pairs() {
            assert!(!a.diverting && b.diverting);
            assert!(a.achieved_mbps > 0.0 && b.achieved_mbps > 0.0, "TCP got through: {a:?} {b:?}");
            assert!((0.0..=100.0).contains(&a.loss_pct) && (0.0..=100.0).contains(&b.loss_pct));
        }
        assert_eq!(r.rtt.len(), 2);
        for c in &r.rtt {
            assert_eq!(c.probes, 100);
            assert!(c.stats.is_some(), "round trips answered: {c:?}");
        }
        let s = r.steering;
        assert!(s.diverted_uplink > 0 && s.diverted_downlink > 0, "diverted in XDP: {s:?}");
        assert!(s.passed > 0, "passed through when not diverting: {s:?}");
        let tag = format!("mcdv{}-", std::process::id());
        let list = mobicore_netns::ip(&["netns", "list"]).expect("ip netns list");
        let left: Vec<String> =
            String::from_utf8_lossy(&list.stdout).lines().filter(|l| l.starts_with(&tag)).map(String::from).collect();
        assert!(left.is_empty(), "namespaces left: {left:?}");
    }

    #[test]
    fn anchors_hold_the_ue_by_teid_and_address() {
        let r = anchor_rules(TEID_REPLICA, EDGE, REPLICA_UE);
        assert_eq!(r.pdrs[&1].pdi.local_fteid, Some((TEID_REPLICA, EDGE)));
        assert_eq!(r.pdrs[&2].pdi.ue_ipv4, Some(REPLICA_UE));
        assert_eq!(r.fars[&2].outer_header_creation, Some(GtpuTunnel { teid: TEID_DL, ipv4: ENB }));
    }
}
