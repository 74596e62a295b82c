//! `mobicore bench breakout` (issue 12 item 5): seed 001 Fig. 3 on this
//! machine, the MEC router's local breakout per frame size, with 1 and
//! with 120,000 traffic rules, each case next to the minimal XDP forwarder
//! and kernel forwarding on the identical topology, in the same run.
//!
//! The topology, generator and sink are `bench dataplane`'s ([`Rig`]):
//!
//! ```text
//!  gen g0 ---- d0 dut (mec_xdp on d0 and d1) d1 ---- s0 sink
//! ```
//!
//! - uplink: gen is the eNB. It sends G-PDUs in transit to the core
//!   ([`CORE`], routed through the sink) whose inner packet, UE
//!   ([`UE_BASE`]) to the edge application ([`APP`]), matches the one
//!   measured rule (FORWARD_DECAPSULATED, filterType FLOW, an exact
//!   5-tuple); `mec_xdp` decapsulates them to the application's MAC (the
//!   sink's) through `d1`.
//! - downlink: gen is the edge application. Its packets to the UE match
//!   the same rule reversed (FLOW) and are encapsulated into the UE's
//!   downlink tunnel (a `MecSession::Ue`: the eNB, which the sink plays,
//!   its TEID, the core's address as outer source) and sent out of `d1`.
//!
//! The rules are PFCP sessions of the MEC router role, established through
//! the sans-I/O [`mobicore_upf::UpfCore`] as the controller establishes
//! them ([`crate::cp`]); the node programs the live `mec_xdp` maps. The
//! other rules of a case (119,999 for 120,000) are real, distinct FLOW
//! rules of the same UE to other edge applications (destinations
//! [`OTHER_APPS`]` + k`): exact 5-tuples like the measured one, that no
//! measured packet matches, so that each is two `mec_exact`
//! entries (the uplink as written, the reverse on the plain side; 240,000
//! of its 262,144 for 120,000 rules) and the measured packets are looked
//! up among them. Their priorities cycle through 0..=255. The time the
//! node takes to establish them is the install rate.
//!
//! Frame sizes are those of seed 001 (64 to 1518 bytes), counted as RFC
//! 2544 counts them, the 4-byte FCS included (a veth carries the frame
//! without it), on the router's port towards the application: the
//! decapsulated frame the application receives (uplink) or sends
//! (downlink). The eNB side's frames are 36 bytes longer (outer IPv4, UDP,
//! GTP-U): a 1518-byte frame is a 1500-byte IP packet at the application
//! and 1536 bytes in the tunnel, so every veth has an MTU of [`MTU`].
//! Gbit/s = Mpps x frame size x 8 (the frames at the application, FCS
//! included, no preamble or gap).
//!
//! Measured per case (direction, frame size, rules): four rounds, each
//! the MEC router's rate and the minimal forwarder's back to back in
//! A B B A order (decap_min / encap_min of one fixed tunnel, no rule
//! lookup; the router steps aside with its rules kept); each rate is the
//! median of its rounds and the ratio between them the median of the
//! rounds' ratios (a drift of the shared machine cancels within a
//! round); then the run time per
//! packet of both programs (kernel BPF statistics); then one-way times
//! of single time-stamped frames, generator's XDP to the sink's XDP
//! through the device under test (an otherwise idle path: what one frame
//! takes, not queueing), router and forwarder in A B B A blocks. Kernel
//! forwarding (rate and one-way time of the same frames, the G-PDU
//! forwarded as it is uplink) before the first case and after the last,
//! the two rates averaged.

use crate::cp::{PfcpDriver, SharedPlane};
use crate::frames::*;
use crate::rig::{fixed, median, Dut, Latency, Rig};
use crate::DpBenchError;
use mobicore_netns::ip_batch;
use mobicore_upf::pfcp::mec::{Application, MecRule, MecSession, RuleAction, Slice, TrafficFilter, UeTunnel};
use mobicore_upf::xdp::baseline::{self, FixedTunnel};
use mobicore_upf::xdp::{AttachMode, Counter, MapSizes, NextHop, XdpConfig, XdpPlane};
use mobicore_upf::{UpfConfig, UpfRole};
use serde::Serialize;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// The edge application's address (the sink plays it).
pub const APP: Ipv4Addr = Ipv4Addr::new(10, 202, 0, 2);
/// The first of the other applications of the rules beyond the measured one.
pub const OTHER_APPS: Ipv4Addr = Ipv4Addr::new(10, 204, 0, 1);
/// The core's S1-U address: where the uplink G-PDUs are in transit to
/// (routed through the sink), and the outer source of the downlink tunnel.
pub const CORE: Ipv4Addr = Ipv4Addr::new(10, 202, 1, 2);
/// UDP ports of the measured flow, both ways (the sink counts port 9).
pub const PORT: u16 = BENCH_PORT;
/// MTU of every veth: the 1536-byte G-PDU of a 1518-byte frame.
pub const MTU: u32 = 1536;
/// Frame sizes, FCS included.
pub const MIN_FRAME: usize = 64;
pub const MAX_FRAME: usize = 1518;
/// Most rules a run installs: `max_mec_sessions` (131,072) less the UE's
/// tunnel, and two `mec_exact` entries each within its 262,144.
pub const MAX_RULES: usize = 130_000;
const FCS: usize = 4;
/// Outer IPv4 + UDP + GTP-U.
const ENCAP: usize = 36;

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakoutOptions {
    /// Frame sizes on the application's side, FCS included (64..=1518).
    pub sizes: Vec<usize>,
    /// Numbers of rules installed, one set of cases each (1..=130,000).
    pub rules: Vec<usize>,
    /// Directions measured (both by default).
    pub directions: Vec<Direction>,
    /// Measuring time of each rate, spread over four rounds.
    pub duration: Duration,
    /// Time-stamped frames per device under test and case.
    pub latency_samples: usize,
    /// Shorter warm-ups.
    pub quick: bool,
}

impl Default for BreakoutOptions {
    /// Seed 001 Fig. 3: five frame sizes, 1 and 120,000 rules.
    fn default() -> Self {
        BreakoutOptions {
            sizes: vec![64, 128, 512, 1024, 1518],
            rules: vec![1, 120_000],
            directions: DIRECTIONS.to_vec(),
            duration: Duration::from_secs(2),
            latency_samples: 2000,
            quick: false,
        }
    }
}

impl BreakoutOptions {
    /// The smallest and largest frames, 1 and 1,000 rules, 300 ms per rate.
    pub fn quick() -> Self {
        BreakoutOptions {
            sizes: vec![64, 1518],
            rules: vec![1, 1000],
            directions: DIRECTIONS.to_vec(),
            duration: Duration::from_millis(300),
            latency_samples: 200,
            quick: true,
        }
    }
}

/// One measured case (the `--json` rows).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakoutCase {
    /// "uplink" (decapsulated to the application) or "downlink"
    /// (encapsulated to the eNB).
    pub direction: &'static str,
    /// Bytes on the application's side, FCS included.
    pub frame_size: usize,
    /// The same frame on the eNB's side (GTP-U).
    pub tunnel_frame_size: usize,
    pub rules: usize,
    /// The MEC router (`mec_xdp`).
    pub mpps: f64,
    pub gbps: f64,
    /// One-way time of single frames through the router, us.
    pub latency_us_p50: Option<f64>,
    pub latency_us_p99: Option<f64>,
    /// The minimal XDP forwarder of one fixed tunnel.
    pub baseline_xdp_mpps: f64,
    pub baseline_xdp_gbps: f64,
    pub baseline_xdp_latency_us_p50: Option<f64>,
    pub baseline_xdp_latency_us_p99: Option<f64>,
    /// Kernel IPv4 forwarding of the same frames (no GTP-U processing).
    pub baseline_kernel_mpps: f64,
    pub baseline_kernel_latency_us_p50: Option<f64>,
    pub baseline_kernel_latency_us_p99: Option<f64>,
    /// `mpps` over the minimal forwarder's (target >= 0.9).
    pub ratio_to_xdp: f64,
    pub ratio_to_kernel: f64,
    /// Median one-way time, router minus minimal forwarder, us (target <= 2).
    pub latency_added_us: Option<f64>,
    /// Run time per packet of `mec_xdp` and of the minimal forwarder, ns
    /// (kernel BPF statistics): their cost apart from the veths.
    pub ns_per_packet: Option<f64>,
    pub baseline_xdp_ns_per_packet: Option<f64>,
}

/// The rules added through PFCP before a set of cases.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RuleInstall {
    /// Rules established by this install, and installed after it.
    pub added: usize,
    pub total: usize,
    pub seconds: f64,
    pub rules_per_s: f64,
}

/// The router's XDP counters after the run: that the measured traffic
/// took the breakout path in XDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BreakoutCounters {
    /// G-PDUs decapsulated to the application.
    pub decapsulated: u64,
    /// The application's packets put into the UE's tunnel.
    pub encapsulated: u64,
    /// Packets passed through as a router would (no rule matched).
    pub passed_through: u64,
    /// Frames left to the kernel (XDP_PASS, any reason).
    pub to_kernel: u64,
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakoutReport {
    pub cases: Vec<BreakoutCase>,
    pub installs: Vec<RuleInstall>,
    pub counters: BreakoutCounters,
    pub mtu: u32,
}

/// Runs the bench on a blocking thread (namespaces and XDP programs are
/// gone when it returns).
pub async fn run(opts: BreakoutOptions) -> Result<BreakoutReport, DpBenchError> {
    tokio::task::spawn_blocking(move || run_blocking(&opts))
        .await
        .map_err(|e| DpBenchError::Io(std::io::Error::other(format!("bench thread: {e}"))))?
}

/// The same, synchronously.
pub fn run_blocking(opts: &BreakoutOptions) -> Result<BreakoutReport, DpBenchError> {
    if opts.sizes.is_empty() || opts.rules.is_empty() || opts.directions.is_empty() {
        return Err(DpBenchError::Options("at least one frame size, one number of rules and one direction".into()));
    }
    if let Some(s) = opts.sizes.iter().find(|s| !(MIN_FRAME..=MAX_FRAME).contains(*s)) {
        return Err(DpBenchError::Options(format!("frame size {s} outside {MIN_FRAME}..={MAX_FRAME}")));
    }
    if let Some(n) = opts.rules.iter().find(|n| !(1..=MAX_RULES).contains(*n)) {
        return Err(DpBenchError::Options(format!("{n} rules outside 1..={MAX_RULES}")));
    }
    if opts.latency_samples < 2 || opts.duration < Duration::from_millis(30) {
        return Err(DpBenchError::Options("at least 2 latency samples and 30 ms per rate".into()));
    }
    mobicore_netns::require_root()?;
    let rig = Rig::create(&mobicore_netns::unique_tag("mcbo"), false, opts.quick)?;
    rig.topo.set_mtu(MTU)?;
    ip_batch(&rig.topo.dut, &[format!("route add {CORE}/32 via {SINK}")])?;
    let mut rules = opts.rules.clone();
    rules.sort_unstable();
    rules.dedup();
    let mut sizes = opts.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let mut b = Bench { plane: None, rig, opts: BreakoutOptions { rules, sizes, ..opts.clone() } };
    b.measure()
}

/// Uplink: G-PDUs from the eNB decapsulated to the application;
/// downlink: the application's packets encapsulated to the eNB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Uplink,
    Downlink,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Uplink => "uplink",
            Direction::Downlink => "downlink",
        }
    }
}

pub const DIRECTIONS: [Direction; 2] = [Direction::Uplink, Direction::Downlink];

/// Rounds per case, each a rate of the router and one of the minimal
/// forwarder back to back (A B B A); the ratio is the median of the
/// rounds' ratios.
const ROUNDS: usize = 4;

/// The frame the generator sends for a case, its configuration, and the
/// offset of its UDP payload (where the time stamp goes).
fn frame(dir: Direction, size: usize) -> (Vec<u8>, GenCfg, usize) {
    let ip_len = size - FCS - 14;
    match dir {
        Direction::Uplink => {
            let inner = ipv4_udp(UE_BASE, APP, PORT, PORT, ip_len);
            let (f, c) = fixed(gpdu_frame(CORE, TEID_BASE, &inner));
            (f, c, 14 + ENCAP + 28)
        }
        Direction::Downlink => {
            let (f, c) = fixed(eth(&ipv4_udp(APP, UE_BASE, PORT, PORT, ip_len)));
            (f, c, 14 + 28)
        }
    }
}

/// The application's interface and MAC, as the rule names them.
fn app() -> Application {
    Application { mac: MAC_S0, interface: "d1".into() }
}

/// Rule `k`: the FLOW of the UE ([`UE_BASE`]) to the application, both
/// ports [`PORT`], UDP: rule 0, the measured one, to [`APP`]; rule k > 0
/// to another application, [`OTHER_APPS`]` + k - 1`.
pub fn rule(k: u32) -> MecSession {
    MecSession::Rule(MecRule {
        slice: Slice { interface: "d0".into(), vlan: 0 },
        flow: true,
        priority: (k % 256) as u8,
        filters: vec![TrafficFilter {
            src: Some((UE_BASE, 32)),
            dst: Some((if k == 0 { APP } else { Ipv4Addr::from(u32::from(OTHER_APPS) + k - 1) }, 32)),
            src_ports: Some((PORT, PORT)),
            dst_ports: Some((PORT, PORT)),
            protocol: Some(17),
            ..TrafficFilter::default()
        }],
        action: RuleAction::ForwardDecapsulated(app()),
    })
}

/// The measured UE's downlink tunnel: to the eNB (the sink) as from the core.
pub fn ue_tunnel() -> MecSession {
    MecSession::Ue(UeTunnel { ue: UE_BASE, enb: SINK, teid: ENB_TEID_BASE, origin: CORE })
}

/// The MEC router: its plane and the PFCP node that programs it.
struct Router {
    plane: SharedPlane,
    cp: PfcpDriver,
    /// Rules established so far.
    rules: usize,
}

/// What one case measured of one device under test.
#[derive(Default)]
struct Measured {
    rates: Vec<f64>,
    ns: Option<f64>,
    latencies_ns: Vec<u64>,
    sent: usize,
}

impl Measured {
    fn latency(&self) -> Option<Latency> {
        Latency::of(&self.latencies_ns, self.sent)
    }
}

/// The counters of the program's XDP_PASS verdicts (bpf/maps.h).
const TO_KERNEL: [Counter; 16] = [
    Counter::PassNotIpv4,
    Counter::PassFragment,
    Counter::PassIpOptions,
    Counter::PassGtpControl,
    Counter::PassUnknownTeid,
    Counter::PassBuffer,
    Counter::PassOversize,
    Counter::PassNoRoute,
    Counter::PassTtl,
    Counter::PassNotUe,
    Counter::PassTruncated,
    Counter::PassUnsupported,
    Counter::PassGtpLongChain,
    Counter::PassDupl,
    Counter::PassManyUrrs,
    Counter::MecNoSlice,
];

/// The run. Field order is drop order: the router first, then the rig
/// (programs, then namespaces).
struct Bench {
    plane: Option<Router>,
    rig: Rig,
    opts: BreakoutOptions,
}

impl Bench {
    fn round(&self) -> Duration {
        self.opts.duration / ROUNDS as u32
    }

    fn measure(&mut self) -> Result<BreakoutReport, DpBenchError> {
        let mut kernel: HashMap<(Direction, usize), (f64, Option<Latency>)> = HashMap::new();
        self.kernel_pass(&mut kernel)?;
        self.load_router()?;
        let mut cases = Vec::new();
        let mut installs = Vec::new();
        for n in self.opts.rules.clone() {
            if let Some(i) = self.install_rules(n)? {
                installs.push(i);
            }
            for dir in self.opts.directions.clone() {
                for size in self.opts.sizes.clone() {
                    let (mec, min) = self.case(dir, size)?;
                    cases.push((dir, size, n, mec, min));
                }
            }
        }
        let counters = self.counters();
        tracing::info!(?counters, "MEC router");
        self.plane = None;
        self.kernel_pass(&mut kernel)?;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let gbps = |mpps: f64, size: usize| mpps * size as f64 * 8.0 / 1000.0;
        let cases = cases
            .into_iter()
            .map(|(dir, size, rules, mec, min)| {
                let (k, kl) = kernel[&(dir, size)];
                let k = k / 2.0;
                let (m, x) = (median(mec.rates.clone()), median(min.rates.clone()));
                let paired = median(mec.rates.iter().zip(&min.rates).map(|(a, b)| ratio(*a, *b)).collect());
                let (ml, xl) = (mec.latency(), min.latency());
                BreakoutCase {
                    direction: dir.name(),
                    frame_size: size,
                    tunnel_frame_size: size + ENCAP,
                    rules,
                    mpps: m,
                    gbps: gbps(m, size),
                    latency_us_p50: ml.map(|l| l.p50_us),
                    latency_us_p99: ml.map(|l| l.p99_us),
                    baseline_xdp_mpps: x,
                    baseline_xdp_gbps: gbps(x, size),
                    baseline_xdp_latency_us_p50: xl.map(|l| l.p50_us),
                    baseline_xdp_latency_us_p99: xl.map(|l| l.p99_us),
                    baseline_kernel_mpps: k,
                    baseline_kernel_latency_us_p50: kl.map(|l| l.p50_us),
                    baseline_kernel_latency_us_p99: kl.map(|l| l.p99_us),
                    ratio_to_xdp: paired,
                    ratio_to_kernel: ratio(m, k),
                    latency_added_us: ml.zip(xl).map(|(a, b)| a.p50_us - b.p50_us),
                    ns_per_packet: mec.ns,
                    baseline_xdp_ns_per_packet: min.ns,
                }
            })
            .collect();
        Ok(BreakoutReport { cases, installs, counters, mtu: MTU })
    }

    /// Kernel forwarding of every case's frames: the rate summed into
    /// `kernel`, the one-way times of the first pass kept.
    fn kernel_pass(
        &mut self,
        kernel: &mut HashMap<(Direction, usize), (f64, Option<Latency>)>,
    ) -> Result<(), DpBenchError> {
        for dir in self.opts.directions.clone() {
            for size in self.opts.sizes.clone() {
                let pass = self.rig.attach(|| Ok(Dut::Pass(baseline::load_pass()?)))?;
                let (f, cfg, at) = frame(dir, size);
                let rate = self.rig.blast_for(&f, &cfg, self.opts.duration)?;
                let e = kernel.entry((dir, size)).or_insert((0.0, None));
                e.0 += rate;
                if e.1.is_none() {
                    e.1 = self.rig.latency(&f, &cfg, at, self.opts.latency_samples)?;
                }
                drop(pass);
                tracing::info!(direction = dir.name(), size, kernel_mpps = rate, latency = ?e.1, "kernel forwarding");
            }
        }
        Ok(())
    }

    /// Loads `mec_xdp` (attached to d0 and d1, the next hop of the eNB on
    /// d1), associates its PFCP node and establishes the measured rule and
    /// the UE's tunnel.
    fn load_router(&mut self) -> Result<(), DpBenchError> {
        let d1 = self.rig.d1;
        let dut = self.rig.attach(move || {
            let cfg = XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(DUT0) };
            let mut p = XdpPlane::load_mec(cfg)?;
            p.attach("d1", AttachMode::Native)?;
            p.set_next_hop(SINK, NextHop { ifindex: d1, dmac: MAC_S0, smac: MAC_D1 })?;
            Ok(Dut::Shared(SharedPlane::new(p)))
        })?;
        let Dut::Shared(plane) = dut else { unreachable!("made above") };
        let cfg = UpfConfig { role: UpfRole::Mec, s1u_addr: DUT0, ..UpfConfig::default() };
        let mut cp = PfcpDriver::associate(cfg, plane.clone())?;
        cp.establish_mec(1, &ue_tunnel())?;
        cp.establish_mec(2, &rule(0))?;
        self.plane = Some(Router { plane, cp, rules: 1 });
        Ok(())
    }

    /// Establishes rules up to `n`, timed; None when there were enough.
    fn install_rules(&mut self, n: usize) -> Result<Option<RuleInstall>, DpBenchError> {
        let r = self.plane.as_mut().expect("loaded");
        if r.rules >= n {
            return Ok(None);
        }
        let added = n - r.rules;
        let t = Instant::now();
        for k in r.rules..n {
            r.cp.establish_mec(k as u64 + 2, &rule(k as u32))?;
        }
        let seconds = t.elapsed().as_secs_f64();
        r.rules = n;
        let i = RuleInstall { added, total: n, seconds, rules_per_s: added as f64 / seconds.max(1e-9) };
        tracing::info!(?i, "rules installed over PFCP");
        Ok(Some(i))
    }

    /// The router's counters.
    fn counters(&self) -> BreakoutCounters {
        let Some(r) = &self.plane else {
            return BreakoutCounters { decapsulated: 0, encapsulated: 0, passed_through: 0, to_kernel: 0 };
        };
        let all = r.plane.lock().counters().unwrap_or_default();
        let c = |k| all.iter().find(|(x, _)| *x == k).map_or(0, |(_, v)| *v);
        let to_kernel = TO_KERNEL.iter().map(|k| c(*k)).sum();
        BreakoutCounters {
            decapsulated: c(Counter::MecDecap),
            encapsulated: c(Counter::MecEncap),
            passed_through: c(Counter::MecPass),
            to_kernel,
        }
    }

    /// The router attached again (d0 by the rig, d1 here).
    fn reattach(&mut self) -> Result<(), DpBenchError> {
        let plane = self.plane.as_ref().expect("loaded").plane.clone();
        self.rig.attach(move || {
            plane.lock().attach("d1", AttachMode::Native)?;
            Ok(Dut::Shared(plane))
        })?;
        Ok(())
    }

    fn step_aside(&mut self) {
        self.plane.as_ref().expect("loaded").plane.lock().detach_all();
    }

    /// The minimal forwarder of the direction, attached to d0.
    fn attach_min(&mut self, dir: Direction) -> Result<Dut, DpBenchError> {
        let t = FixedTunnel { teid: TEID_BASE, src: CORE, dst: SINK, ifindex: self.rig.d1, dmac: MAC_S0, smac: MAC_D1 };
        self.rig.attach(move || {
            Ok(Dut::Min(Box::new(match dir {
                Direction::Uplink => baseline::load_decap_min(&t)?,
                Direction::Downlink => baseline::load_encap_min(&FixedTunnel { teid: ENB_TEID_BASE, ..t })?,
            })))
        })
    }

    /// One case: the router (attached on entry and on return) and the
    /// minimal forwarder.
    fn case(&mut self, dir: Direction, size: usize) -> Result<(Measured, Measured), DpBenchError> {
        let (f, cfg, at) = frame(dir, size);
        let dur = self.round();
        let (mut mec, mut min) = (Measured::default(), Measured::default());
        for round in 0..ROUNDS {
            // A B B A: the router first in even rounds, second in odd ones,
            // so that a drift of the machine weighs on both alike.
            if round % 2 == 0 {
                mec.rates.push(self.rig.blast_for(&f, &cfg, dur)?);
            }
            self.step_aside();
            let m = self.attach_min(dir)?;
            min.rates.push(self.rig.blast_for(&f, &cfg, dur)?);
            if round == ROUNDS - 1 {
                let Dut::Min(b) = &m else { unreachable!("attached above") };
                min.ns = self.rig.program_ns(Some(b.program.program()), &f, &cfg, dur)?;
            }
            drop(m);
            self.reattach()?;
            if round % 2 == 1 {
                mec.rates.push(self.rig.blast_for(&f, &cfg, dur)?);
            }
        }
        let plane = self.plane.as_ref().expect("loaded").plane.clone();
        {
            let p = plane.lock();
            mec.ns = self.rig.program_ns(p.program().map(|p| p.program()), &f, &cfg, dur)?;
        }
        // One-way times, router and forwarder in A B B A blocks.
        let half = (self.opts.latency_samples / 2).max(1);
        mec.latencies_ns.extend(self.rig.latency_ns(&f, &cfg, at, half)?);
        self.step_aside();
        let m = self.attach_min(dir)?;
        min.latencies_ns.extend(self.rig.latency_ns(&f, &cfg, at, 2 * half)?);
        drop(m);
        self.reattach()?;
        mec.latencies_ns.extend(self.rig.latency_ns(&f, &cfg, at, half)?);
        (mec.sent, min.sent) = (2 * half, 2 * half);
        tracing::info!(
            direction = dir.name(),
            size,
            rules = self.plane.as_ref().map(|r| r.rules),
            mec_mpps = median(mec.rates.clone()),
            xdp_min_mpps = median(min.rates.clone()),
            mec_latency = ?mec.latency(),
            min_latency = ?min.latency(),
            counters = ?self.counters(),
            "breakout"
        );
        Ok((mec, min))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mobicore_common::inet::checksum;

    #[test]
    fn frames_have_the_size_on_the_application_side() {
        for size in [64, 128, 1518] {
            let (up, c, at) = frame(Direction::Uplink, size);
            assert_eq!(up.len() + FCS, size + ENCAP, "the G-PDU is 36 bytes longer");
            assert_eq!(c.mode, GEN_UPLINK);
            assert_eq!(&up[at - 28 + 12..at - 28 + 20], &[UE_BASE.octets(), APP.octets()].concat()[..]);
            assert_eq!(u16::from_be_bytes([up[at - 6], up[at - 5]]), PORT, "inner destination port");
            assert_eq!(checksum(&up[at - 28..at - 8]), 0, "inner checksum");
            assert_eq!(u32::from_be_bytes([up[46], up[47], up[48], up[49]]), TEID_BASE);
            assert_eq!(&up[30..34], &CORE.octets(), "in transit to the core");
            let (down, c, at) = frame(Direction::Downlink, size);
            assert_eq!(down.len() + FCS, size);
            assert_eq!(c.mode, GEN_DOWNLINK);
            assert_eq!(at, 42);
            assert!(down.len() >= at + 12, "room for the time stamp");
            assert_eq!(&down[26..34], &[APP.octets(), UE_BASE.octets()].concat()[..]);
        }
        assert_eq!(frame(Direction::Uplink, 1518).0.len() - 14, MTU as usize, "the largest G-PDU fits the MTU");
    }

    #[test]
    fn rules_are_distinct_exact_flows_and_only_rule_0_matches_the_measured_flow() {
        let f = |k| match rule(k) {
            MecSession::Rule(r) => r.filters[0],
            _ => unreachable!(),
        };
        assert_eq!((f(0).src, f(0).dst), (Some((UE_BASE, 32)), Some((APP, 32))));
        assert_eq!(f(1).dst, Some((OTHER_APPS, 32)));
        let dsts: std::collections::HashSet<_> = (0..120_000).map(|k| f(k).dst).collect();
        assert_eq!(dsts.len(), 120_000, "distinct flows");
        assert!((1..120_000).all(|k| f(k).dst != Some((APP, 32))), "neither way of another rule is the measured flow");
        let MecSession::Rule(r) = rule(300) else { unreachable!() };
        assert_eq!(r.priority, 44);
        assert!(r.flow);
    }

    /// The rules of a full run fill the exact table and nothing else: two
    /// `mec_exact` entries each (the tunnel side as written, the plain
    /// side reversed), no prefix set (the rule compiler with in-memory maps).
    #[test]
    fn one_hundred_twenty_thousand_rules_fill_the_exact_table_only() {
        use mobicore_upf::xdp::mec::{MecTable, MemoryMecMaps};
        let resolve = |n: &str| match n {
            "d0" => Some((2, MAC_D0)),
            "d1" => Some((3, MAC_D1)),
            _ => None,
        };
        let (mut t, mut m) = (MecTable::new(Box::new(resolve)), MemoryMecMaps::default());
        let MecSession::Ue(u) = ue_tunnel() else { unreachable!() };
        t.set_ue(&mut m, 1, Some(&u)).unwrap();
        for k in 0..120_000u32 {
            let MecSession::Rule(r) = rule(k) else { unreachable!() };
            t.set_rule(&mut m, u64::from(k) + 2, Some(&r)).unwrap();
        }
        assert_eq!((t.rules(), m.exact.len(), m.prefixes.len(), m.ues.len()), (120_000, 240_000, 0, 1));
        assert_eq!(m.slices.len(), 2, "d0 and d1, one slice");
        assert!(u64::from(MAX_RULES as u32) * 2 <= 262_144);
    }
}
