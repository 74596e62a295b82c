//! The measuring rig every packet-rate bench shares: the `gen -> dut ->
//! sink` topology ([`crate::topo`]), the live-frames generator and the
//! sink counter ([`crate::progs`]), the device under test attached to
//! `d0`, and the three measurements made of it: the rate the sink counts
//! ([`Rig::blast_for`]), the program's own run time per packet
//! ([`Rig::program_ns`]) and the one-way time of single time-stamped
//! frames ([`Rig::latency`]).

use crate::cp::SharedPlane;
use crate::cpus::{self, Placement};
use crate::frames::*;
use crate::progs::{Generator, Sink, LATENCY_SAMPLES_MAX};
use crate::topo::BenchTopology;
use crate::DpBenchError;
use mobicore_netns::run_in;
use mobicore_upf::xdp::baseline::Baseline;
use mobicore_upf::xdp::{ifindex, AttachMode, LoadedProgram, XdpPlane};
use serde::Serialize;
use std::time::{Duration, Instant};

/// What runs on `d0` in the dut namespace; dropping it detaches (a shared
/// plane: when its last holder drops it).
pub enum Dut {
    Upf(Box<XdpPlane>),
    /// A plane that a PFCP node programs at the same time.
    Shared(SharedPlane),
    Min(Box<Baseline>),
    Pass(LoadedProgram),
}

/// The run's topology, generator and sink. Field order is drop order:
/// programs first, namespaces last.
pub struct Rig {
    gen: Option<Generator>,
    sink: Sink,
    /// gen's `g0` and dut's `d1`, by index in their namespaces.
    pub g0: u32,
    pub d1: u32,
    place: Option<Placement>,
    /// Shorter warm-ups.
    quick: bool,
    pub topo: BenchTopology,
}

impl Rig {
    /// Namespaces `<tag>-gen`, `-dut`, `-sink`, the sink attached to `s0`,
    /// the generator loaded; with `split_cpus`, generator and DUT on
    /// separate CPUs ([`crate::cpus`]).
    pub fn create(tag: &str, split_cpus: bool, quick: bool) -> Result<Rig, DpBenchError> {
        mobicore_netns::require_root()?;
        let topo = BenchTopology::create(tag)?;
        let mut sink = Sink::load()?;
        let s0 = run_in(&topo.sink, || ifindex("s0"))??;
        run_in(&topo.sink, || sink.attach(s0))??;
        let g0 = run_in(&topo.gen, || ifindex("g0"))??;
        let d1 = run_in(&topo.dut, || ifindex("d1"))??;
        let place = if split_cpus { Placement::detect() } else { None };
        tracing::info!(?place, "generator and device-under-test CPUs (None: all on the generator's)");
        Ok(Rig { gen: Some(Generator::load()?), sink, g0, d1, place, quick, topo })
    }

    /// Builds a device under test and attaches it to d0 (native XDP), all
    /// on a thread in the dut namespace: DEVMAP entries name interfaces by
    /// index in the namespace of the thread that writes them, so a map
    /// written from another namespace would redirect to a foreign device.
    /// With two CPUs, d0's NAPI poll then moves to its pinned thread
    /// (see [`crate::cpus`]).
    pub fn attach(&self, make: impl FnOnce() -> Result<Dut, DpBenchError> + Send) -> Result<Dut, DpBenchError> {
        let dut = run_in(&self.topo.dut, || {
            let mut dut = make()?;
            match &mut dut {
                Dut::Upf(p) => p.attach("d0", AttachMode::Native)?,
                Dut::Shared(p) => p.lock().attach("d0", AttachMode::Native)?,
                Dut::Min(b) => b.program.attach("d0", AttachMode::Native)?,
                Dut::Pass(p) => p.attach("d0", AttachMode::Native)?,
            }
            Ok::<_, DpBenchError>(dut)
        })??;
        if let Some(p) = self.place {
            cpus::threaded_napi(&self.topo.dut, "d0", p.dut)?;
        }
        Ok(dut)
    }

    /// Offers `frame` (rewritten per `cfg`) for `dur` after a short
    /// warm-up; the rate the sink counted, in Mpps: the median of
    /// [`WINDOWS`] equal windows.
    pub fn blast_for(&mut self, frame: &[u8], cfg: &GenCfg, dur: Duration) -> Result<f64, DpBenchError> {
        let warm = if self.quick { Duration::from_millis(20) } else { Duration::from_millis(200) };
        self.in_gen(|gen, sink, g0| {
            gen.configure(cfg)?;
            gen.blast(frame, g0, warm, 1 << 14)?;
            std::thread::sleep(Duration::from_millis(5));
            // The median of WINDOWS windows: a burst of another
            // tenant's load in one window does not make the case.
            let mut rates = Vec::with_capacity(WINDOWS);
            for _ in 0..WINDOWS {
                let before = sink.count()?;
                let t = gen.blast(frame, g0, dur / WINDOWS as u32, 1 << 16)?;
                std::thread::sleep(Duration::from_millis(5));
                let after = sink.count()?;
                rates.push(after.saturating_sub(before) as f64 / t.as_secs_f64() / 1e6);
            }
            Ok(median(rates))
        })
    }

    /// The device under test's own run time per packet, ns (the kernel's
    /// BPF run-time statistics, enabled only while measuring and costing
    /// about a third of the rate, so they never overlap a rate window):
    /// what the XDP program costs, apart from the veth path around it.
    /// None without a program or where the kernel keeps no statistics.
    pub fn program_ns(
        &mut self,
        prog: Option<&aya::programs::Xdp>,
        frame: &[u8],
        cfg: &GenCfg,
        dur: Duration,
    ) -> Result<Option<f64>, DpBenchError> {
        let Some(prog) = prog else { return Ok(None) };
        let stats = |p: &aya::programs::Xdp| p.info().ok().map(|i| (i.run_time(), i.run_count()));
        let Ok(_on) = aya::sys::enable_stats(aya::sys::Stats::RunTime) else { return Ok(None) };
        let Some((t0, n0)) = stats(prog) else { return Ok(None) };
        self.blast_for(frame, cfg, dur)?;
        let Some((t1, n1)) = stats(prog) else { return Ok(None) };
        let n = n1.saturating_sub(n0);
        Ok((n > 0).then(|| t1.saturating_sub(t0).as_nanos() as f64 / n as f64))
    }

    /// One-way times of `samples` single frames, each time-stamped by the
    /// generator at UDP payload offset `stamp_at` (see [`GenCfg::stamp_at`])
    /// and timed by the sink, one frame in flight at a time (the next is
    /// sent when the sink has recorded the last, or after a millisecond):
    /// generator's XDP -> veth -> the DUT -> veth -> sink's XDP, on an
    /// otherwise idle path. None when fewer than half arrived.
    pub fn latency(
        &mut self,
        frame: &[u8],
        cfg: &GenCfg,
        stamp_at: usize,
        samples: usize,
    ) -> Result<Option<Latency>, DpBenchError> {
        let samples = samples.min(LATENCY_SAMPLES_MAX);
        let ns = self.latency_ns(frame, cfg, stamp_at, samples)?;
        Ok(Latency::of(&ns, samples))
    }

    /// [`Rig::latency`]'s one-way times as they came, ns (at most
    /// [`LATENCY_SAMPLES_MAX`] frames are sent).
    pub fn latency_ns(
        &mut self,
        frame: &[u8],
        cfg: &GenCfg,
        stamp_at: usize,
        samples: usize,
    ) -> Result<Vec<u64>, DpBenchError> {
        let samples = samples.min(LATENCY_SAMPLES_MAX);
        let cfg = GenCfg { stamp_at: stamp_at as u32, ..*cfg };
        self.in_gen(|gen, sink, g0| {
            gen.configure(&cfg)?;
            sink.reset_latencies()?;
            for i in 0..samples as u64 {
                gen.send_one(frame, g0)?;
                let t = Instant::now();
                while sink.latency_count()? <= i && t.elapsed() < Duration::from_millis(1) {
                    std::hint::spin_loop();
                }
            }
            // Frames still on their way arrive within this.
            std::thread::sleep(Duration::from_millis(5));
            let v = sink.latencies()?;
            sink.reset_latencies()?;
            Ok(v)
        })
    }

    /// Runs `f` on a thread in gen's namespace (the kernel resolves the
    /// generator's ingress device there), pinned with `split_cpus`.
    fn in_gen<T: Send>(
        &mut self,
        f: impl FnOnce(&mut Generator, &mut Sink, u32) -> Result<T, DpBenchError> + Send,
    ) -> Result<T, DpBenchError> {
        let mut gen = self.gen.take().expect("generator present between runs");
        let (g0, sink, place) = (self.g0, &mut self.sink, self.place);
        let (gen, r) = run_in(&self.topo.gen, move || {
            let r = (|| {
                if let Some(p) = place {
                    cpus::pin(0, p.gen)?;
                }
                f(&mut gen, sink, g0)
            })();
            (gen, r)
        })?;
        self.gen = Some(gen);
        r
    }
}

/// One-way times of single frames, us.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    /// Frames that arrived of those sent.
    pub received: usize,
    pub sent: usize,
}

impl Latency {
    /// From one-way times in ns; None when fewer than half of `sent` arrived.
    pub fn of(ns: &[u64], sent: usize) -> Option<Latency> {
        if ns.is_empty() || ns.len() * 2 < sent {
            return None;
        }
        let mut v: Vec<f64> = ns.iter().map(|n| *n as f64 / 1000.0).collect();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        Some(Latency { p50_us: q(0.5), p99_us: q(0.99), received: ns.len(), sent })
    }
}

/// Measuring windows per rate (odd: the median is one of them).
pub const WINDOWS: usize = 3;

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One fixed flow, with the generator doing the same per-frame work as in
/// the UPF cases (field writes and checksum), so only the DUT differs.
pub fn fixed(frame: Vec<u8>) -> (Vec<u8>, GenCfg) {
    let mode = if frame.len() >= 50 && frame[36..38] == GTPU_PORT.to_be_bytes() { GEN_UPLINK } else { GEN_DOWNLINK };
    let c = gen_cfg(&frame, mode, 1, TEID_BASE, UE_BASE);
    (frame, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_takes_nearest_rank_percentiles_in_us() {
        let ns: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        let l = Latency::of(&ns, 100).unwrap();
        assert_eq!((l.p50_us, l.p99_us, l.received, l.sent), (51.0, 99.0, 100, 100));
        assert_eq!(Latency::of(&ns[..40], 100), None, "fewer than half arrived");
        assert_eq!(Latency::of(&[], 0), None);
    }

    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![0.9, 1.0, 0.8, 0.95]), 0.925);
        assert_eq!(median(vec![]), 0.0);
    }
}
