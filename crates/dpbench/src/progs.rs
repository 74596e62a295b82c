//! The load generator (`bpf/gen.c`, run with `BPF_PROG_RUN` and
//! `BPF_F_TEST_XDP_LIVE_FRAMES`) and the sink counter (`bpf/sink.c`).

use crate::frames::GenCfg;
use crate::DpBenchError;
use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::{TestRun, TestRunAttrs, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use std::time::{Duration, Instant};

static GEN_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gen.o"));
static SINK_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sink.o"));

/// Frames per live-frames batch (the kernel's default is 64).
const BATCH: u32 = 64;

fn load(obj: &[u8], name: &str) -> Result<Ebpf, DpBenchError> {
    let mut ebpf = EbpfLoader::new().load(obj).map_err(|e| DpBenchError::Xdp(format!("loading {name}: {e:#}")))?;
    let prog: &mut Xdp = ebpf
        .program_mut(name)
        .ok_or_else(|| DpBenchError::Xdp(format!("no program {name}")))?
        .try_into()
        .map_err(|e| DpBenchError::Xdp(format!("{name}: {e}")))?;
    prog.load().map_err(|e| DpBenchError::Xdp(format!("verifier rejected {name}: {e:#}")))?;
    Ok(ebpf)
}

fn xdp<'a>(ebpf: &'a mut Ebpf, name: &str) -> &'a mut Xdp {
    ebpf.program_mut(name).and_then(|p| p.try_into().ok()).expect("loaded in load()")
}

fn map_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> DpBenchError {
    move |e| DpBenchError::Xdp(format!("map {map}: {e}"))
}

/// `struct xdp_md` as `BPF_PROG_RUN` takes it in `ctx_in`.
#[repr(C)]
#[derive(Default)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

/// The load generator. Runs must happen on a thread inside the namespace
/// of `ifindex` (the kernel resolves the ingress device there).
pub struct Generator {
    ebpf: Ebpf,
    cfg: Array<MapData, GenCfg>,
    zipf: Array<MapData, u32>,
    state: PerCpuArray<MapData, u64>,
}

impl Generator {
    pub fn load() -> Result<Self, DpBenchError> {
        let mut ebpf = load(GEN_OBJ, "gen_xdp")?;
        let cfg = Array::try_from(ebpf.take_map("gen_cfg").ok_or(DpBenchError::Xdp("no map gen_cfg".into()))?)
            .map_err(map_err("gen_cfg"))?;
        let state =
            PerCpuArray::try_from(ebpf.take_map("gen_state").ok_or(DpBenchError::Xdp("no map gen_state".into()))?)
                .map_err(map_err("gen_state"))?;
        let zipf = Array::try_from(ebpf.take_map("gen_zipf").ok_or(DpBenchError::Xdp("no map gen_zipf".into()))?)
            .map_err(map_err("gen_zipf"))?;
        Ok(Generator { ebpf, cfg, zipf, state })
    }

    /// The configuration; with `c.skew`, also the Zipf table for `c.n`
    /// sessions ([`crate::frames::zipf_table`]).
    pub fn configure(&mut self, c: &GenCfg) -> Result<(), DpBenchError> {
        if c.skew != 0 {
            for (k, t) in crate::frames::zipf_table(c.n).into_iter().enumerate() {
                self.zipf.set(k as u32, t, 0).map_err(map_err("gen_zipf"))?;
            }
        }
        self.cfg.set(0, c, 0).map_err(map_err("gen_cfg"))
    }

    /// Frames the program has sent so far (all CPUs).
    pub fn sent(&self) -> Result<u64, DpBenchError> {
        Ok(self.state.get(&1, 0).map_err(map_err("gen_state"))?.iter().sum())
    }

    /// Sends `frame` (rewritten per `configure`) out of `ifindex` for about
    /// `duration`, in runs of `chunk` frames. Returns the wall time spent.
    pub fn blast(&self, frame: &[u8], ifindex: u32, duration: Duration, chunk: u32) -> Result<Duration, DpBenchError> {
        let md = XdpMd { data_end: frame.len() as u32, ingress_ifindex: ifindex, ..Default::default() };
        // SAFETY: XdpMd is #[repr(C)] of u32s, no padding.
        let ctx =
            unsafe { std::slice::from_raw_parts((&md as *const XdpMd).cast::<u8>(), std::mem::size_of::<XdpMd>()) };
        let prog: &Xdp = self.ebpf.program("gen_xdp").and_then(|p| p.try_into().ok()).expect("loaded");
        let start = Instant::now();
        while start.elapsed() < duration {
            let opts = TestRunOptions {
                data_in: Some(frame),
                ctx_in: Some(ctx),
                repeat: chunk,
                attrs: TestRunAttrs::new().xdp_live_frames(BATCH),
                ..Default::default()
            };
            prog.test_run(opts).map_err(|e| DpBenchError::Xdp(format!("BPF_PROG_RUN live frames: {e:#}")))?;
        }
        Ok(start.elapsed())
    }

    /// Sends one frame (a live-frames run of one): its batch is flushed,
    /// and the veths' receive paths run, before the call returns.
    pub fn send_one(&self, frame: &[u8], ifindex: u32) -> Result<(), DpBenchError> {
        let md = XdpMd { data_end: frame.len() as u32, ingress_ifindex: ifindex, ..Default::default() };
        // SAFETY: as in `blast`.
        let ctx =
            unsafe { std::slice::from_raw_parts((&md as *const XdpMd).cast::<u8>(), std::mem::size_of::<XdpMd>()) };
        let prog: &Xdp = self.ebpf.program("gen_xdp").and_then(|p| p.try_into().ok()).expect("loaded");
        let opts = TestRunOptions {
            data_in: Some(frame),
            ctx_in: Some(ctx),
            repeat: 1,
            attrs: TestRunAttrs::new().xdp_live_frames(1),
            ..Default::default()
        };
        prog.test_run(opts).map_err(|e| DpBenchError::Xdp(format!("BPF_PROG_RUN live frames: {e:#}")))?;
        Ok(())
    }
}

/// One-way times the sink can hold per measurement (bpf/sink.c LAT_MAX).
pub const LATENCY_SAMPLES_MAX: usize = 16384;

/// The sink: counts and drops the bench frames arriving on its veth.
pub struct Sink {
    ebpf: Ebpf,
    count: PerCpuArray<MapData, u64>,
    lat: Array<MapData, u64>,
    lat_n: Array<MapData, u64>,
    attached: Option<aya::programs::xdp::XdpLinkId>,
}

impl Sink {
    pub fn load() -> Result<Self, DpBenchError> {
        let mut ebpf = load(SINK_OBJ, "sink_xdp")?;
        let count =
            PerCpuArray::try_from(ebpf.take_map("sink_count").ok_or(DpBenchError::Xdp("no map sink_count".into()))?)
                .map_err(map_err("sink_count"))?;
        let lat = Array::try_from(ebpf.take_map("sink_lat").ok_or(DpBenchError::Xdp("no map sink_lat".into()))?)
            .map_err(map_err("sink_lat"))?;
        let lat_n = Array::try_from(ebpf.take_map("sink_lat_n").ok_or(DpBenchError::Xdp("no map sink_lat_n".into()))?)
            .map_err(map_err("sink_lat_n"))?;
        Ok(Sink { ebpf, count, lat, lat_n, attached: None })
    }

    /// Attaches (native mode) to `ifindex` of the calling thread's namespace.
    pub fn attach(&mut self, ifindex: u32) -> Result<(), DpBenchError> {
        let link = xdp(&mut self.ebpf, "sink_xdp")
            .attach_to_if_index(ifindex, XdpMode::Driver)
            .map_err(|e| DpBenchError::Xdp(format!("attaching the sink: {e:#}")))?;
        self.attached = Some(link);
        Ok(())
    }

    pub fn count(&self) -> Result<u64, DpBenchError> {
        Ok(self.count.get(&0, 0).map_err(map_err("sink_count"))?.iter().sum())
    }

    /// Forgets the one-way times recorded so far.
    pub fn reset_latencies(&mut self) -> Result<(), DpBenchError> {
        self.lat_n.set(0, 0, 0).map_err(map_err("sink_lat_n"))
    }

    /// Time-stamped frames that arrived since the reset.
    pub fn latency_count(&self) -> Result<u64, DpBenchError> {
        self.lat_n.get(&0, 0).map_err(map_err("sink_lat_n"))
    }

    /// Their one-way times (generator's stamp to the sink), ns, in order
    /// of arrival (at most [`LATENCY_SAMPLES_MAX`]).
    pub fn latencies(&self) -> Result<Vec<u64>, DpBenchError> {
        let n = (self.latency_count()? as usize).min(LATENCY_SAMPLES_MAX);
        (0..n as u32).map(|i| self.lat.get(&i, 0).map_err(map_err("sink_lat"))).collect()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Some(l) = self.attached.take() {
            let _ = xdp(&mut self.ebpf, "sink_xdp").detach(l);
        }
    }
}
