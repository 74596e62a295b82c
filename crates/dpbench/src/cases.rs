//! The devices under test and the measuring loop.
//!
//! Order of a run: kernel forwarding for every direction and size; the UPF
//! with each number of sessions installed, each case paired with the
//! minimal XDP forwarder measured right after it on the same frames (the
//! UPF is detached, the forwarder attached, then the UPF again), in order
//! and, with more than one session, under the generator's Zipf-like draw
//! (which costs the generator more per frame): three rounds of U, M, Mz,
//! Uz, each rate the median of its rounds, so each UPF rate sits next to
//! its baseline on a shared host whose speed drifts; kernel forwarding
//! again (the two passes are averaged); the bare-redirect ceiling.

use crate::frames::*;
use crate::rig::{fixed, median, Dut, Rig};
use crate::rtt::{median_rtt, Echo, Probe};
use crate::{DataplaneBenchOptions, DataplaneCase, DataplaneReport, DpBenchError};
use mobicore_upf::rules::{
    Action, Far, GtpuTunnel, PacketDetection, Pdr, SessionRules, INTERFACE_ACCESS, INTERFACE_CORE,
};
use mobicore_upf::xdp::baseline::{self, FixedTunnel};
use mobicore_upf::xdp::{MapSizes, NextHop, XdpConfig, XdpPlane};
use mobicore_upf::ForwardingPlane;
use std::collections::HashMap;
use std::time::Duration;

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

const DIRECTIONS: [Direction; 2] = [Direction::Uplink, Direction::Downlink];

/// One bearer of session `i` as the S/P-GW-C installs it after Modify
/// Bearer (crates/spgwc sxa_build): uplink PDR by local F-TEID with outer
/// header removal -> FAR FORW to Core; downlink PDR by UE IP -> FAR FORW
/// to Access with outer header creation towards the eNB (the sink).
pub fn session_rules(i: u32) -> SessionRules {
    let forw = Action { forw: true, ..Default::default() };
    let pdi = |iface: u8| PacketDetection {
        source_interface: iface,
        local_fteid: None,
        choose_fteid: false,
        ue_ipv4: None,
        ue_ipv6: None,
        network_instance: Some("internet".into()),
        sdf_filters: 0,
        flows: Vec::new(),
    };
    let mut r = SessionRules::default();
    let ul_pdi = PacketDetection { local_fteid: Some((TEID_BASE + i, DUT0)), ..pdi(INTERFACE_ACCESS) };
    let dl_pdi = PacketDetection { ue_ipv4: Some(ue(i)), ..pdi(INTERFACE_CORE) };
    r.pdrs.insert(
        1,
        Pdr {
            id: 1,
            precedence: 255,
            pdi: ul_pdi,
            outer_header_removal: Some(0),
            far_id: Some(1),
            qer_ids: vec![],
            urr_ids: vec![],
        },
    );
    r.pdrs.insert(
        2,
        Pdr {
            id: 2,
            precedence: 255,
            pdi: dl_pdi,
            outer_header_removal: None,
            far_id: Some(2),
            qer_ids: vec![],
            urr_ids: vec![],
        },
    );
    let far = |id, iface, ohc| Far {
        id,
        action: forw,
        destination_interface: Some(iface),
        network_instance: Some("internet".into()),
        outer_header_creation: ohc,
        bar_id: None,
        duplicating: vec![],
    };
    r.fars.insert(1, far(1, INTERFACE_CORE, None));
    r.fars.insert(2, far(2, INTERFACE_ACCESS, Some(GtpuTunnel { teid: ENB_TEID_BASE + i, ipv4: SINK })));
    r
}

fn ue(i: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(u32::from(UE_BASE) + i)
}

/// One UPF case as measured, Mpps.
struct UpfCase {
    dir: Direction,
    size: usize,
    sessions: usize,
    mpps: f64,
    /// The minimal XDP forwarder, measured right after `mpps`.
    xdp: f64,
    /// The UPF and the minimal forwarder under the Zipf-like draw (more
    /// than one session).
    zipf: Option<(f64, f64)>,
    /// Median round trip through the UPF, us.
    rtt: Option<f64>,
    /// Run time per packet of the UPF program and of the minimal forwarder, ns.
    ns: Option<(f64, f64)>,
}

/// The loaded XDP program of a device under test.
fn program_of(dut: &Dut) -> Option<&aya::programs::Xdp> {
    match dut {
        Dut::Upf(p) => p.program().map(|p| p.program()),
        Dut::Min(b) => Some(b.program.program()),
        Dut::Pass(p) => Some(p.program()),
        Dut::Shared(_) => None,
    }
}

/// The run: the rig and the echo servers. Field order is drop order:
/// threads first, then the rig (programs, then namespaces).
pub struct Bench {
    echo: Option<Echo>,
    rig: Rig,
    opts: DataplaneBenchOptions,
}

impl Bench {
    pub fn run(opts: &DataplaneBenchOptions) -> Result<DataplaneReport, DpBenchError> {
        if opts.sizes.is_empty() || opts.sessions.is_empty() {
            return Err(DpBenchError::Options("at least one size and one session count".into()));
        }
        if let Some(s) = opts.sizes.iter().find(|s| !(MIN_SIZE..=1400).contains(*s)) {
            return Err(DpBenchError::Options(format!("size {s} outside 64..=1400")));
        }
        if let Some(n) = opts.sessions.iter().find(|n| **n == 0 || **n > 1_000_000) {
            return Err(DpBenchError::Options(format!("{n} sessions outside 1..=1000000")));
        }
        mobicore_netns::require_root()?;
        let rig = Rig::create(&mobicore_netns::unique_tag("mcdp"), opts.split_cpus, opts.quick)?;
        let echo = Some(Echo::start(&rig.topo.sink)?);
        let mut b = Bench { echo, rig, opts: opts.clone() };
        let r = b.measure_all();
        b.echo.take();
        r
    }

    /// One round's share of a case's measuring time.
    fn round(&self) -> Duration {
        self.opts.duration / ROUNDS as u32
    }

    fn rtt_samples(&self) -> usize {
        if self.opts.quick {
            20
        } else {
            200
        }
    }

    fn measure_all(&mut self) -> Result<DataplaneReport, DpBenchError> {
        let mut kernel: HashMap<(Direction, usize), f64> = HashMap::new();
        let mut krtt: HashMap<(Direction, usize), Option<f64>> = HashMap::new();
        self.kernel_baselines(&mut kernel, Some(&mut krtt))?;
        let upf = self.upf_cases()?;
        self.kernel_baselines(&mut kernel, None)?;
        let ceiling = self.ceiling(self.opts.sizes[0])?;
        let k0 = kernel[&(Direction::Downlink, self.opts.sizes[0])] / 2.0;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let cases = upf
            .into_iter()
            .map(|c| {
                let k = kernel[&(c.dir, c.size)] / 2.0;
                DataplaneCase {
                    direction: c.dir.name(),
                    size: c.size,
                    sessions: c.sessions,
                    mpps: c.mpps,
                    baseline_kernel_mpps: k,
                    baseline_xdp_mpps: c.xdp,
                    ratio_to_xdp: ratio(c.mpps, c.xdp),
                    ratio_to_kernel: ratio(c.mpps, k),
                    mpps_zipf: c.zipf.map(|z| z.0),
                    baseline_xdp_zipf_mpps: c.zipf.map(|z| z.1),
                    zipf_ratio_to_xdp: c.zipf.map(|(z, xz)| ratio(z, xz)),
                    rtt_us: c.rtt.zip(krtt.get(&(c.dir, c.size)).copied().flatten()).map(|(u, k)| u - k),
                    ns_per_packet: c.ns.map(|n| n.0),
                    baseline_xdp_ns_per_packet: c.ns.map(|n| n.1),
                }
            })
            .collect();
        Ok(DataplaneReport { cases, ceiling_redirect_mpps: ceiling, ceiling_to_kernel: ratio(ceiling, k0) })
    }

    /// One pass of kernel forwarding over every direction and size, summed
    /// into `kernel`; kernel round trips into `rtt` when given.
    fn kernel_baselines(
        &mut self,
        kernel: &mut HashMap<(Direction, usize), f64>,
        mut rtt: Option<&mut HashMap<(Direction, usize), Option<f64>>>,
    ) -> Result<(), DpBenchError> {
        for dir in DIRECTIONS {
            for size in self.opts.sizes.clone() {
                let pass = self.rig.attach(|| Ok(Dut::Pass(baseline::load_pass()?)))?;
                let (frame, cfg) = match dir {
                    Direction::Uplink => fixed(uplink_frame(SINK, TEID_BASE, UE_BASE, size)),
                    Direction::Downlink => fixed(downlink_frame(UE_BASE, size)),
                };
                let k = self.rig.blast_for(&frame, &cfg, self.opts.duration)?;
                if let Some(r) = rtt.as_deref_mut() {
                    let p = if dir == Direction::Uplink { Probe::KernelUplink } else { Probe::KernelDownlink };
                    r.insert((dir, size), median_rtt(&self.rig.topo.gen, p, size, self.rtt_samples())?);
                }
                drop(pass);
                tracing::info!(direction = dir.name(), size, kernel_mpps = k, "kernel forwarding");
                *kernel.entry((dir, size)).or_default() += k;
            }
        }
        Ok(())
    }

    /// The minimal XDP forwarder of one fixed tunnel: its rate with the
    /// generator's in-order frames, and with its Zipf-like draw (one
    /// session: the same generator work per frame as the UPF's Zipf
    /// column) when `zipf`.
    fn min_rates(
        &mut self,
        dir: Direction,
        size: usize,
        zipf: bool,
        cost: bool,
    ) -> Result<(f64, Option<f64>, Option<f64>), DpBenchError> {
        let t = FixedTunnel { teid: TEID_BASE, src: DUT0, dst: SINK, ifindex: self.rig.d1, dmac: MAC_S0, smac: MAC_D1 };
        let (frame, cfg) = match dir {
            Direction::Uplink => fixed(uplink_frame(DUT0, TEID_BASE, UE_BASE, size)),
            Direction::Downlink => fixed(downlink_frame(UE_BASE, size)),
        };
        let min = self.rig.attach(|| {
            Ok(Dut::Min(Box::new(match dir {
                Direction::Uplink => baseline::load_decap_min(&t)?,
                Direction::Downlink => baseline::load_encap_min(&FixedTunnel { teid: ENB_TEID_BASE, ..t })?,
            })))
        })?;
        let dur = self.round();
        let x = self.rig.blast_for(&frame, &cfg, dur)?;
        let xz = if zipf { Some(self.rig.blast_for(&frame, &GenCfg { skew: 1, perm: 1, ..cfg }, dur)?) } else { None };
        let ns = if cost { self.rig.program_ns(program_of(&min), &frame, &cfg, dur)? } else { None };
        drop(min);
        tracing::info!(
            direction = dir.name(),
            size,
            xdp_min_mpps = x,
            xdp_min_zipf_mpps = xz,
            ns,
            "minimal XDP forwarder"
        );
        Ok((x, xz, ns))
    }

    /// The UPF with each number of sessions, each case with its paired
    /// minimal-forwarder rates.
    fn upf_cases(&mut self) -> Result<Vec<UpfCase>, DpBenchError> {
        let max = *self.opts.sessions.iter().max().expect("checked") as u32;
        let sizes = MapSizes { tunnels: max + 16, fars: 2 * max + 16, qers: 16, urrs: 16 };
        let mut out = Vec::new();
        for n in self.opts.sessions.clone() {
            let d1 = self.rig.d1;
            let mut plane = self.rig.attach(|| {
                let mut plane = XdpPlane::load(XdpConfig { s1u_addr: DUT0, mtu: 1500, no_fib: false, sizes })?;
                plane.set_next_hop(SINK, NextHop { ifindex: d1, dmac: MAC_S0, smac: MAC_D1 })?;
                for i in 0..n as u32 {
                    plane
                        .install(u64::from(i) + 1, &session_rules(i))
                        .map_err(|e| DpBenchError::Plane(format!("session {i}: {e}")))?;
                }
                Ok(Dut::Upf(Box::new(plane)))
            })?;
            for dir in DIRECTIONS {
                for size in self.opts.sizes.clone() {
                    let (frame, cfg) = match dir {
                        Direction::Uplink => {
                            let f = uplink_frame(DUT0, TEID_BASE, UE_BASE, size);
                            let c = gen_cfg(&f, GEN_UPLINK, n as u32, TEID_BASE, UE_BASE);
                            (f, c)
                        }
                        Direction::Downlink => {
                            let f = downlink_frame(UE_BASE, size);
                            let c = gen_cfg(&f, GEN_DOWNLINK, n as u32, 0, UE_BASE);
                            (f, c)
                        }
                    };
                    let p = if dir == Direction::Uplink { Probe::UpfUplink } else { Probe::UpfDownlink };
                    let rtt = median_rtt(&self.rig.topo.gen, p, size, self.rtt_samples())?;
                    let zcfg = GenCfg { skew: 1, perm: coprime_multiplier(n as u32), ..cfg };
                    let dur = self.round();
                    let (mut u, mut m, mut uz, mut mz) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                    let mut xdp_ns = None;
                    for round in 0..ROUNDS {
                        u.push(self.rig.blast_for(&frame, &cfg, dur)?);
                        // The UPF steps aside (sessions kept) for its baselines.
                        let Dut::Upf(mut upf) = plane else { unreachable!("attached above") };
                        upf.detach_all();
                        let (x, xz, ns) = self.min_rates(dir, size, n > 1, round == ROUNDS - 1)?;
                        plane = self.rig.attach(move || Ok(Dut::Upf(upf)))?;
                        m.push(x);
                        xdp_ns = xdp_ns.or(ns);
                        if let Some(xz) = xz {
                            mz.push(xz);
                            uz.push(self.rig.blast_for(&frame, &zcfg, dur)?);
                        }
                    }
                    let (mpps, xdp) = (median(u), median(m));
                    let ns = self.rig.program_ns(program_of(&plane), &frame, &cfg, self.round())?;
                    let zipf = (n > 1).then(|| (median(uz), median(mz)));
                    if let Dut::Upf(p) = &plane {
                        tracing::info!(direction = dir.name(), size, sessions = n, mpps, xdp, ?zipf, counters = ?p.counters().unwrap_or_default().into_iter().filter(|c| c.1 > 0).collect::<Vec<_>>(), "UPF");
                    }
                    out.push(UpfCase { dir, size, sessions: n, mpps, xdp, zipf, rtt, ns: ns.zip(xdp_ns) });
                }
            }
            drop(plane);
        }
        Ok(out)
    }

    fn ceiling(&mut self, size: usize) -> Result<f64, DpBenchError> {
        let t = FixedTunnel { teid: 0, src: DUT0, dst: SINK, ifindex: self.rig.d1, dmac: MAC_S0, smac: MAC_D1 };
        let dut = self.rig.attach(|| Ok(Dut::Min(Box::new(baseline::load_redirect(&t)?))))?;
        let (frame, cfg) = fixed(downlink_frame(UE_BASE, size));
        let r = self.rig.blast_for(&frame, &cfg, self.opts.duration);
        drop(dut);
        tracing::info!(size, mpps = r.as_ref().ok(), "ceiling (bare redirect)");
        r
    }
}

/// Rounds per UPF case: U M [Mz Uz], each rate the median of its rounds.
const ROUNDS: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;
    use mobicore_upf::xdp::MemoryMaps;

    #[test]
    fn sessions_install_through_the_forwarding_plane() {
        let mut p =
            XdpPlane::with_maps(MemoryMaps::default(), XdpConfig { sizes: MapSizes::small(), ..XdpConfig::new(DUT0) })
                .unwrap();
        for i in 0..100 {
            p.install(u64::from(i) + 1, &session_rules(i)).unwrap();
        }
        assert_eq!(p.sessions(), 100);
        let r = session_rules(7);
        assert_eq!(r.pdrs[&1].pdi.local_fteid, Some((TEID_BASE + 7, DUT0)));
        assert_eq!(r.pdrs[&2].pdi.ue_ipv4, Some(std::net::Ipv4Addr::new(10, 64, 0, 8)));
        assert_eq!(r.fars[&2].outer_header_creation, Some(GtpuTunnel { teid: ENB_TEID_BASE + 7, ipv4: SINK }));
    }
}
