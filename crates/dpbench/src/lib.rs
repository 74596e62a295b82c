//! mobicore-dpbench: `mobicore bench dataplane` (issue 3 item 6).
//!
//! Uplink and downlink packet rates of the XDP UPF for each inner packet
//! size and number of installed sessions, each against two baselines on
//! the identical topology (`gen -> dut -> sink`, see [`topo`]): plain
//! kernel IPv4 forwarding and the minimal XDP GTP-U decap/encap of one
//! fixed tunnel; plus a bare XDP redirect as the ceiling of the host, and
//! the round-trip time the UPF adds over kernel forwarding.
//!
//! - [`frames`]: addresses and the generator's template frames.
//! - [`progs`]: the live-frames load generator and the sink counter.
//! - [`topo`]: the namespaces and veths (removed on drop).
//! - [`rig`]: topology, generator and sink together; a device under test
//!   on `d0`; rates, run time per packet, one-way times.
//! - [`rtt`]: round-trip probes and echo servers.
//! - [`cpus`]: generator on one CPU, the DUT's receive path on another.
//! - [`cases`]: the devices under test and the measuring loop.
//! - [`slowpath`]: `mobicore bench slowpath`, buffered downlink received by
//!   user space through XDP_PASS + TUN versus an AF_XDP socket.
//! - [`divert`]: `mobicore bench divert`, seed 000 Figs 10-16: round trips,
//!   TCP throughput with the steering switch's CPU, and loss, diverting a
//!   UE at the switch versus passing it through.
//! - [`breakout`]: `mobicore bench breakout`, seed 001 Fig. 3: the MEC
//!   router's local breakout (uplink decapsulation to an edge application,
//!   its answers encapsulated into the UE's tunnel) per frame size with 1
//!   and 120,000 traffic rules, against the minimal XDP forwarder and
//!   kernel forwarding; the rule install rate over PFCP.
//! - [`cp`]: a UPF's PFCP node driven in memory, as a controller would.

pub mod breakout;
pub mod cases;
pub mod cp;
pub mod cpus;
pub mod divert;
pub mod frames;
pub mod progs;
pub mod rig;
pub mod rtt;
pub mod slowpath;
pub mod topo;

use serde::Serialize;
use std::time::Duration;

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct DataplaneBenchOptions {
    /// Inner packet sizes in bytes (>= 64, <= 1400 so that the
    /// encapsulated packet fits a 1500-byte MTU).
    pub sizes: Vec<usize>,
    /// Numbers of sessions installed in the UPF.
    pub sessions: Vec<usize>,
    /// Measuring time of each case.
    pub duration: Duration,
    /// Fewer round-trip samples and a shorter warm-up (for tests).
    pub quick: bool,
    /// Generator on one CPU, the DUT's and sink's receive path on another
    /// ([`cpus`]). Off by default: on the 2-vCPU hosts measured, the
    /// cross-CPU hand-off (thread wake-ups, frames crossing caches, pages
    /// returned to another CPU's pool) halves every rate, the ceiling's
    /// included, and costs more than the generator work it takes off the
    /// DUT's CPU.
    pub split_cpus: bool,
}

impl Default for DataplaneBenchOptions {
    /// The matrix: 64 and 1400 bytes, 1 / 1,000 / 100,000 sessions.
    fn default() -> Self {
        DataplaneBenchOptions {
            sizes: vec![64, 1400],
            sessions: vec![1, 1000, 100_000],
            duration: Duration::from_secs(2),
            quick: false,
            split_cpus: false,
        }
    }
}

impl DataplaneBenchOptions {
    /// A tiny run: one size, 1 and 1000 sessions, 200 ms per case.
    pub fn quick() -> Self {
        DataplaneBenchOptions {
            sizes: vec![64],
            sessions: vec![1, 1000],
            duration: Duration::from_millis(200),
            quick: true,
            split_cpus: false,
        }
    }
}

/// One measured case (the `--json` rows).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataplaneCase {
    /// "uplink" or "downlink".
    pub direction: &'static str,
    /// Inner packet bytes.
    pub size: usize,
    pub sessions: usize,
    /// Our XDP UPF with full rule processing, million packets per second.
    pub mpps: f64,
    /// Plain kernel IPv4 forwarding (uplink: the outer GTP-U packet).
    pub baseline_kernel_mpps: f64,
    /// Minimal XDP decap/encap of one fixed tunnel, no rule lookup.
    pub baseline_xdp_mpps: f64,
    pub ratio_to_xdp: f64,
    pub ratio_to_kernel: f64,
    /// The same UPF case with sessions drawn Zipf-like (s = 1, the top 1%
    /// of sessions carry ~60% of packets) instead of in order; None for a
    /// single session. In order, the sessions' entries are read in address
    /// order, which the CPU prefetches; the Zipf-like draw scatters the
    /// cold 40% over every session and shows what cache misses cost.
    pub mpps_zipf: Option<f64>,
    /// The minimal XDP forwarder with the generator's Zipf-like draw (one
    /// tunnel): the baseline of `mpps_zipf`, since the draw costs the
    /// generator per frame. None with `mpps_zipf`.
    pub baseline_xdp_zipf_mpps: Option<f64>,
    /// `mpps_zipf` over `baseline_xdp_zipf_mpps`.
    pub zipf_ratio_to_xdp: Option<f64>,
    /// Added round-trip time over kernel forwarding, microseconds
    /// (median of single-packet probes); None if the probes got no answer.
    pub rtt_us: Option<f64>,
    /// Run time of the UPF program per packet in the in-order case, ns
    /// (kernel BPF statistics): its cost apart from the veth path, which
    /// bounds every rate here. None where the kernel keeps no statistics.
    pub ns_per_packet: Option<f64>,
    /// The same for the minimal XDP forwarder.
    pub baseline_xdp_ns_per_packet: Option<f64>,
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataplaneReport {
    pub cases: Vec<DataplaneCase>,
    /// Bare XDP redirect (MAC rewrite only) of the smallest size: the
    /// ceiling of this host's veth path.
    pub ceiling_redirect_mpps: f64,
    /// The ceiling over kernel forwarding of the same frames (downlink,
    /// smallest size): the most any XDP program can gain over the kernel
    /// on this host and topology.
    pub ceiling_to_kernel: f64,
}

/// Why the bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum DpBenchError {
    #[error("the data-plane bench needs root (network namespaces, XDP); run it as root")]
    NotRoot,
    #[error("network namespace setup: {0}")]
    Netns(mobicore_netns::NetnsError),
    #[error("XDP: {0} (is this a kernel with XDP and BPF_PROG_RUN live frames, 5.18 or later?)")]
    Xdp(String),
    #[error("installing sessions in the XDP UPF: {0}")]
    Plane(String),
    #[error("bad options: {0}")]
    Options(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl From<mobicore_netns::NetnsError> for DpBenchError {
    fn from(e: mobicore_netns::NetnsError) -> Self {
        match e {
            mobicore_netns::NetnsError::NotRoot => DpBenchError::NotRoot,
            e => DpBenchError::Netns(e),
        }
    }
}

impl From<mobicore_upf::xdp::XdpError> for DpBenchError {
    fn from(e: mobicore_upf::xdp::XdpError) -> Self {
        DpBenchError::Xdp(e.to_string())
    }
}

/// Runs the bench on a blocking thread (it takes `duration` per case plus
/// the session installs; namespaces and XDP programs are gone when it returns).
pub async fn run(opts: DataplaneBenchOptions) -> Result<DataplaneReport, DpBenchError> {
    tokio::task::spawn_blocking(move || run_blocking(&opts))
        .await
        .map_err(|e| DpBenchError::Io(std::io::Error::other(format!("bench thread: {e}"))))?
}

/// The same, synchronously.
pub fn run_blocking(opts: &DataplaneBenchOptions) -> Result<DataplaneReport, DpBenchError> {
    cases::Bench::run(opts)
}

/// A fixed-width table of the report (the summary of `mobicore bench dataplane`).
pub fn table(r: &DataplaneReport) -> String {
    let mut s = format!(
        "{:<9} {:>5} {:>8} {:>8} {:>10} {:>10} {:>7} {:>8} {:>9} {:>10} {:>9} {:>13}\n",
        "direction",
        "size",
        "sessions",
        "Mpps",
        "xdp-min",
        "kernel",
        "/xdp",
        "/kernel",
        "+rtt us",
        "zipf Mpps",
        "zipf/xdp",
        "ns/pkt (min)"
    );
    for c in &r.cases {
        let rtt = c.rtt_us.map_or("-".to_string(), |v| format!("{v:.1}"));
        let zipf = c.mpps_zipf.map_or("-".to_string(), |v| format!("{v:.3}"));
        let zipf_ratio = c.zipf_ratio_to_xdp.map_or("-".to_string(), |v| format!("{v:.2}"));
        let ns = c
            .ns_per_packet
            .zip(c.baseline_xdp_ns_per_packet)
            .map_or("-".to_string(), |(u, m)| format!("{u:.0} ({m:.0})"));
        s += &format!(
            "{:<9} {:>5} {:>8} {:>8.3} {:>10.3} {:>10.3} {:>7.2} {:>8.2} {:>9} {:>10} {:>9} {:>13}\n",
            c.direction,
            c.size,
            c.sessions,
            c.mpps,
            c.baseline_xdp_mpps,
            c.baseline_kernel_mpps,
            c.ratio_to_xdp,
            c.ratio_to_kernel,
            rtt,
            zipf,
            zipf_ratio,
            ns
        );
    }
    s += &format!(
        "ceiling (bare XDP redirect): {:.3} Mpps = {:.2}x kernel forwarding\n",
        r.ceiling_redirect_mpps, r.ceiling_to_kernel
    );
    s
}
