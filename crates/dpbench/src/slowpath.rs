//! `mobicore bench slowpath`: how fast user space receives the downlink
//! packets of a buffering session (FAR BUFF/NOCP) in XDP mode, by the two
//! mechanisms the UPF can use (issue 3 item 3):
//!
//! - `tun`: the XDP program returns XDP_PASS, the kernel routes the packet
//!   (UE pool route) into a TUN device, user space reads it (one read(2)
//!   per packet, as `dataplane/io.rs` does);
//! - `afxdp`: the program redirects it into the AF_XDP copy-mode socket of
//!   its receive queue (`mobicore_upf::afxdp`), user space takes a batch
//!   from the RX ring. The sockets stay open for the whole run and are
//!   suspended in the program (XDP_PASS) during the `tun` runs.
//!
//! Placement: with two CPUs the generator thread is pinned to one (the
//! kernel work of both paths - the XDP program, the stack forwarding into
//! the TUN device, the copy into the AF_XDP ring - runs in its softirq) and
//! the user-space receiver to the other, so that the receiver is never
//! stuck behind a generator system call (the bursts that would cause are
//! not what a UPF sees).
//!
//! Same run, same topology ([`crate::topo`]: the live-frames generator in
//! `gen` floods `d0` of `dut`, where the UPF program holds one session whose
//! downlink FAR buffers), same receiver thread shape (copy each packet into
//! a reused buffer, count it). Per size the two mechanisms run twice in
//! alternating order (tun, afxdp, afxdp, tun) and each is averaged, to even
//! out the drift of a shared host. Reported per case: the offered rate (frames the generator sent), the rate
//! that reached the program's BUFF branch, the rate user space received.

use crate::frames::*;
use crate::progs::Generator;
use crate::topo::BenchTopology;
use crate::DpBenchError;
use mobicore_netns::run_in;
use mobicore_upf::afxdp::{self, XskSocket};
use mobicore_upf::rules::{Action, SessionRules};
use mobicore_upf::xdp::{ifindex, AttachMode, Counter, MapSizes, XdpConfig, XdpPlane};
use mobicore_upf::ForwardingPlane;
use serde::Serialize;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowpathOptions {
    /// Inner (IPv4) packet sizes in bytes, 64..=1400.
    pub sizes: Vec<usize>,
    /// Measuring time of each run (each mechanism runs twice per size).
    pub duration: Duration,
    /// Frames of each AF_XDP socket's UMEM (and ring entries).
    pub frames: u32,
    /// Shorter warm-up (for tests).
    pub quick: bool,
}

impl Default for SlowpathOptions {
    fn default() -> Self {
        SlowpathOptions {
            sizes: vec![64, 1400],
            duration: Duration::from_secs(2),
            frames: afxdp::DEFAULT_FRAMES,
            quick: false,
        }
    }
}

impl SlowpathOptions {
    pub fn quick() -> Self {
        SlowpathOptions {
            sizes: vec![64],
            duration: Duration::from_millis(300),
            frames: afxdp::DEFAULT_FRAMES,
            quick: true,
        }
    }
}

/// One mechanism at one size (averaged over its two runs), rates in Mpps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowpathCase {
    /// "tun" (XDP_PASS + kernel route + TUN read) or "afxdp" (copy mode).
    pub mechanism: &'static str,
    pub size: usize,
    /// Frames the generator sent.
    pub offered_mpps: f64,
    /// Frames that took the program's BUFF branch.
    pub buffer_branch_mpps: f64,
    /// Packets user space received.
    pub received_mpps: f64,
    /// received / offered.
    pub delivered_share: f64,
}

/// One size: both mechanisms and their ratio.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowpathRow {
    pub size: usize,
    /// Frames the generator sent, both mechanisms together (they differ:
    /// the kernel work of each path runs on the generator's CPU).
    pub offered_mpps: f64,
    pub tun_offered_mpps: f64,
    pub afxdp_offered_mpps: f64,
    /// Received by user space.
    pub tun_mpps: f64,
    pub afxdp_mpps: f64,
    /// afxdp_mpps / tun_mpps.
    pub ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowpathReport {
    pub rows: Vec<SlowpathRow>,
    pub cases: Vec<SlowpathCase>,
    /// Receive queues of the ingress veth (one AF_XDP socket each).
    pub queues: u32,
    /// Frames of each AF_XDP socket's UMEM.
    pub frames: u32,
    /// Generator and receiver pinned to two different CPUs.
    pub pinned: bool,
}

/// The session: downlink PDR by UE address, FAR BUFF + NOCP (as the
/// S/P-GW-C installs it before Modify Bearer), uplink as usual.
fn buffering_rules() -> SessionRules {
    let mut r = crate::cases::session_rules(0);
    let far = r.fars.get_mut(&2).expect("downlink FAR");
    far.action = Action { buff: true, nocp: true, ..Action::default() };
    far.outer_header_creation = None;
    r
}

const TUN: &str = "mcsp0";

/// The receiving side in `dut`: the UPF program, the TUN device with the
/// UE pool routed into it, and (while measuring AF_XDP) the sockets.
struct Dut {
    plane: XdpPlane,
    tun: OwnedFd,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mechanism {
    Tun,
    Afxdp,
}

impl Mechanism {
    fn name(self) -> &'static str {
        match self {
            Mechanism::Tun => "tun",
            Mechanism::Afxdp => "afxdp",
        }
    }
}

/// Runs the bench (blocking; namespaces and programs are gone when it returns).
pub fn run_blocking(opts: &SlowpathOptions) -> Result<SlowpathReport, DpBenchError> {
    if opts.sizes.is_empty() {
        return Err(DpBenchError::Options("at least one size".into()));
    }
    if let Some(s) = opts.sizes.iter().find(|s| !(MIN_SIZE..=1400).contains(*s)) {
        return Err(DpBenchError::Options(format!("size {s} outside 64..=1400")));
    }
    mobicore_netns::require_root()?;
    let topo = BenchTopology::create(&mobicore_netns::unique_tag("mcsp"))?;
    let g0 = run_in(&topo.gen, || ifindex("g0"))??;
    let dut = run_in(&topo.dut, || -> Result<Dut, DpBenchError> {
        let mut plane =
            XdpPlane::load(XdpConfig { s1u_addr: DUT0, mtu: 1500, no_fib: true, sizes: MapSizes::small() })?;
        plane.install(1, &buffering_rules()).map_err(|e| DpBenchError::Plane(e.to_string()))?;
        plane.attach("d0", AttachMode::Native)?;
        let tun = mobicore_upf::dataplane::io::open_tun(TUN)?;
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{TUN}/disable_ipv6"), "1");
        Ok(Dut { plane, tun })
    })??;
    mobicore_netns::ip(&["-n", &topo.dut, "link", "set", TUN, "up"])?;
    mobicore_netns::ip(&["-n", &topo.dut, "route", "replace", UE_POOL, "dev", TUN])?;
    let mut dut = dut;
    let socks = {
        let (plane, frames) = (&mut dut.plane, opts.frames);
        // Every frame here stays buffered: the program's counts of them
        // (crate::xdp::order) are never taken off, and need not be.
        run_in(&topo.dut, || afxdp::open_for_plane(plane, "d0", frames))?.map_err(DpBenchError::Xdp)?.0
    };
    let queues = socks.len() as u32;
    let mut gen = Generator::load()?;
    let frame_cfg = |size: usize| {
        let f = downlink_frame(UE_BASE, size);
        let c = gen_cfg(&f, GEN_DOWNLINK, 1, 0, UE_BASE);
        (f, c)
    };
    let place = crate::cpus::Placement::detect();
    let mut b = Runner { topo: &topo, dut, socks, gen: &mut gen, g0, opts, place };
    let mut cases = Vec::new();
    let mut rows = Vec::new();
    for &size in &opts.sizes {
        let (frame, cfg) = frame_cfg(size);
        let mut acc = [[0.0f64; 3]; 2];
        for m in [Mechanism::Tun, Mechanism::Afxdp, Mechanism::Afxdp, Mechanism::Tun] {
            let r = b.measure(m, &frame, &cfg)?;
            tracing::info!(
                mechanism = m.name(),
                size,
                offered = r[0],
                buffer_branch = r[1],
                received = r[2],
                "slow path"
            );
            let a = &mut acc[m as usize];
            for k in 0..3 {
                a[k] += r[k] / 2.0;
            }
        }
        for m in [Mechanism::Tun, Mechanism::Afxdp] {
            let [o, bb, r] = acc[m as usize];
            cases.push(SlowpathCase {
                mechanism: m.name(),
                size,
                offered_mpps: o,
                buffer_branch_mpps: bb,
                received_mpps: r,
                delivered_share: if o > 0.0 { r / o } else { 0.0 },
            });
        }
        let (t, x) = (acc[0][2], acc[1][2]);
        rows.push(SlowpathRow {
            size,
            offered_mpps: (acc[0][0] + acc[1][0]) / 2.0,
            tun_offered_mpps: acc[0][0],
            afxdp_offered_mpps: acc[1][0],
            tun_mpps: t,
            afxdp_mpps: x,
            ratio: if t > 0.0 { x / t } else { 0.0 },
        });
    }
    drop(b);
    drop(topo);
    Ok(SlowpathReport { rows, cases, queues, frames: opts.frames, pinned: place.is_some() })
}

struct Runner<'a> {
    topo: &'a BenchTopology,
    dut: Dut,
    /// Open for the whole run (a closed socket holds its queue for a while
    /// in the kernel); registered in the program only during AF_XDP runs.
    socks: Vec<XskSocket>,
    gen: &'a mut Generator,
    g0: u32,
    opts: &'a SlowpathOptions,
    place: Option<crate::cpus::Placement>,
}

impl Runner<'_> {
    /// One run of `m`: (offered, BUFF branch, received) in Mpps.
    fn measure(&mut self, m: Mechanism, frame: &[u8], cfg: &GenCfg) -> Result<[f64; 3], DpBenchError> {
        let plane = &mut self.dut.plane;
        match m {
            Mechanism::Tun => plane.suspend_xsks()?,
            Mechanism::Afxdp => {
                for s in &self.socks {
                    plane.register_xsk(s.ifindex(), s.queue(), s.as_fd())?;
                }
            }
        }
        let stop = AtomicBool::new(false);
        let count = AtomicU64::new(0);
        let tun_fd = self.dut.tun.as_raw_fd();
        let warm = if self.opts.quick { Duration::from_millis(20) } else { Duration::from_millis(200) };
        let (gen, g0, dur, plane, socks) =
            (&mut *self.gen, self.g0, self.opts.duration, &self.dut.plane, &mut self.socks);
        let (topo, stop, count, place) = (self.topo, &stop, &count, self.place);
        std::thread::scope(|sc| {
            sc.spawn(move || {
                if let Some(p) = place {
                    let _ = crate::cpus::pin(0, p.dut);
                }
                match m {
                    Mechanism::Tun => receive_tun(tun_fd, stop, count),
                    Mechanism::Afxdp => receive_xsk(socks, stop, count),
                }
            });
            let r = run_in(&topo.gen, move || -> Result<[f64; 3], DpBenchError> {
                if let Some(p) = place {
                    crate::cpus::pin(0, p.gen)?;
                }
                gen.configure(cfg)?;
                gen.blast(frame, g0, warm, 1 << 14)?;
                std::thread::sleep(Duration::from_millis(20));
                let (s0, b0, r0) = (gen.sent()?, plane.counter(Counter::PassBuffer)?, count.load(Ordering::Relaxed));
                let t = gen.blast(frame, g0, dur, 1 << 14)?;
                std::thread::sleep(Duration::from_millis(20));
                let (s1, b1, r1) = (gen.sent()?, plane.counter(Counter::PassBuffer)?, count.load(Ordering::Relaxed));
                let per = |a: u64, b: u64| b.saturating_sub(a) as f64 / t.as_secs_f64() / 1e6;
                Ok([per(s0, s1), per(b0, b1), per(r0, r1)])
            });
            stop.store(true, Ordering::Relaxed);
            r?
        })
    }
}

/// Today's path: one read(2) per packet from the TUN device.
fn receive_tun(fd: i32, stop: &AtomicBool, count: &AtomicU64) {
    let mut buf = vec![0u8; 65536];
    let mut keep: Vec<u8> = Vec::with_capacity(2048);
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: read(2) into a buffer we own.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            keep.clear();
            keep.extend_from_slice(&buf[..n as usize]);
            count.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut p, 1, 10) };
    }
}

/// AF_XDP: batches from the RX rings, each packet copied out as the
/// buffer would keep it.
fn receive_xsk(socks: &mut [XskSocket], stop: &AtomicBool, count: &AtomicU64) {
    let mut keep: Vec<u8> = Vec::with_capacity(2048);
    while !stop.load(Ordering::Relaxed) {
        let mut got = 0;
        for s in socks.iter_mut() {
            got += s.recv_at_most(256, |f| {
                if let Some(ip) = afxdp::ipv4_of_frame(f) {
                    keep.clear();
                    keep.extend_from_slice(ip);
                }
            });
        }
        count.fetch_add(got as u64, Ordering::Relaxed);
        if got == 0 {
            if let Some(s) = socks.first() {
                let _ = s.wait(10);
            }
        }
    }
    for s in socks.iter() {
        if let Ok(st) = s.stats() {
            tracing::info!(queue = s.queue(), ?st, "AF_XDP socket");
        }
    }
}

/// A fixed-width table of the report.
pub fn table(r: &SlowpathReport) -> String {
    let mut s = format!(
        "{:<6} {:>12} {:>13} {:>14} {:>15} {:>10}\n",
        "size", "tun offered", "tun received", "afxdp offered", "afxdp received", "afxdp/tun"
    );
    for row in &r.rows {
        s += &format!(
            "{:<6} {:>12.3} {:>13.3} {:>14.3} {:>15.3} {:>10.2}\n",
            row.size, row.tun_offered_mpps, row.tun_mpps, row.afxdp_offered_mpps, row.afxdp_mpps, row.ratio
        );
    }
    s += "(Mpps; received = packets user space read; afxdp/tun = ratio of received)\n";
    s += "per mechanism (Mpps): offered / reached the BUFF branch / received by user space\n";
    for c in &r.cases {
        s += &format!(
            "  {:<6} {:>5} B  {:.3} / {:.3} / {:.3} ({:.0}% of offered)\n",
            c.mechanism,
            c.size,
            c.offered_mpps,
            c.buffer_branch_mpps,
            c.received_mpps,
            100.0 * c.delivered_share
        );
    }
    s += &format!(
        "AF_XDP copy mode, {} receive queue(s) on the ingress veth, {} frames per socket; generator and receiver {}\n",
        r.queues,
        r.frames,
        if r.pinned { "on two pinned CPUs" } else { "unpinned (one CPU)" }
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffering_rules_buffer_the_downlink_only() {
        let r = buffering_rules();
        assert!(r.fars[&2].action.buff && r.fars[&2].action.nocp && !r.fars[&2].action.forw);
        assert_eq!(r.fars[&2].outer_header_creation, None);
        assert!(r.fars[&1].action.forw);
        assert_eq!(r.pdrs[&2].pdi.ue_ipv4, Some(UE_BASE));
    }

    #[test]
    fn quick_run_measures_both_mechanisms_and_cleans_up() {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("note: skipped, needs root");
            return;
        }
        let r = run_blocking(&SlowpathOptions::quick()).expect("bench runs");
        eprintln!("{}", table(&r));
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.cases.len(), 2);
        for c in &r.cases {
            assert!(c.offered_mpps > 0.0 && c.buffer_branch_mpps > 0.0 && c.received_mpps > 0.0, "{c:?}");
        }
        let prefix = format!("mcsp{}-", std::process::id());
        let left: Vec<_> = std::fs::read_dir("/run/netns")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&prefix))
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
    }
}
