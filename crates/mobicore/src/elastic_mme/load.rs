//! What an MME host measures for the front end's balancer (seed 004 5.1:
//! moving averages of the NFs' queue lengths and of the host's CPU use,
//! sent every few hundred milliseconds), sans-I/O: [`LoadMeter`] is fed
//! samples (the process's CPU time, the wall clock, the messages waiting)
//! and gives the [`Frame::Load`] to send; the host's shell reads the
//! clocks ([`process_cpu`]) and sends it.
//!
//! A host runs one MME core for every procedure kind: one NF, in seed
//! 004's terms, whose queue (the messages from the front end waiting for
//! it) is reported for each kind, with the host's CPU budget (`--cpu-max`,
//! else one core) as its share `c_i` of Eq. 1.

use super::wire::{Frame, NfLoadWire};
use mobicore_elastic::report::{HostMonitor, HostReport, NfLoad};
use mobicore_elastic::ProcedureKind;
use std::time::Duration;

/// Weight of a new sample in the moving averages.
pub const ALPHA: f64 = 0.5;

/// The host's CPU time and the wall clock at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSample {
    pub wall: Duration,
    pub cpu: Duration,
}

pub struct LoadMeter {
    monitor: HostMonitor,
    /// Cores the host may use (its `cpu.max`), 1 without a budget.
    budget: f64,
    last: Option<CpuSample>,
}

impl LoadMeter {
    pub fn new(budget: Option<f64>) -> Self {
        let budget = budget.filter(|b| b.is_finite() && *b > 0.0).unwrap_or(1.0);
        LoadMeter { monitor: HostMonitor::new(ALPHA), budget, last: None }
    }

    /// A sample at `at` with `queued` messages waiting. The first one only
    /// sets the start of the CPU interval; from the second on, the CPU
    /// share used since the previous (of the budget, in [0, 1]) is
    /// averaged in.
    pub fn sample(&mut self, at: CpuSample, queued: usize) {
        let Some(last) = self.last.replace(at) else { return };
        let wall = at.wall.saturating_sub(last.wall).as_secs_f64();
        if wall <= 0.0 {
            self.last = Some(last);
            return;
        }
        let used = at.cpu.saturating_sub(last.cpu).as_secs_f64() / wall / self.budget;
        let q = queued as f64;
        self.monitor.sample(used, ProcedureKind::ALL.iter().map(|&k| (k, q, self.budget.min(1.0))));
    }

    pub fn report(&self) -> HostReport {
        self.monitor.report()
    }

    /// The report as sent, once a CPU interval has been measured.
    pub fn frame(&self) -> Option<Frame> {
        let r = self.report();
        if r.nfs.is_empty() {
            return None;
        }
        Some(to_frame(&r))
    }
}

pub fn to_frame(r: &HostReport) -> Frame {
    let e4 = |x: f64| (x.clamp(0.0, 1.0) * 1e4).round() as u16;
    let nfs = r
        .nfs
        .iter()
        .map(|n| NfLoadWire {
            kind: n.kind.index() as u8,
            q_e3: (n.q.max(0.0) * 1e3).min(u32::MAX as f64) as u32,
            c_e4: e4(n.c),
        })
        .collect();
    Frame::Load { cpu_e4: e4(r.cpu), nfs }
}

/// The report a [`Frame::Load`] carries; entries of an unknown kind or no
/// share are left out.
pub fn from_frame(cpu_e4: u16, nfs: &[NfLoadWire]) -> HostReport {
    let nfs = nfs
        .iter()
        .filter(|n| n.c_e4 > 0)
        .filter_map(|n| {
            let kind = *ProcedureKind::ALL.get(usize::from(n.kind))?;
            Some(NfLoad { kind, q: f64::from(n.q_e3) / 1e3, c: (f64::from(n.c_e4) / 1e4).min(1.0) })
        })
        .collect();
    HostReport { cpu: (f64::from(cpu_e4) / 1e4).min(1.0), nfs }
}

/// This process's CPU time (user and system, every thread), by
/// getrusage(2).
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage writes the struct it is given, nothing else.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(u.ru_utime) + tv(u.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(wall_ms: u64, cpu_ms: u64) -> CpuSample {
        CpuSample { wall: Duration::from_millis(wall_ms), cpu: Duration::from_millis(cpu_ms) }
    }

    #[test]
    fn cpu_share_is_of_the_interval_and_the_budget() {
        let mut m = LoadMeter::new(Some(0.5));
        m.sample(at(0, 0), 0);
        assert!(m.frame().is_none(), "no interval yet");
        // 25 ms of CPU in 100 ms: a quarter core, half of the budget.
        m.sample(at(100, 25), 4);
        let r = m.report();
        assert!((r.cpu - 0.5).abs() < 1e-9, "{r:?}");
        assert_eq!(r.nfs.len(), ProcedureKind::COUNT);
        assert!(r.nfs.iter().all(|n| n.q == 4.0 && n.c == 0.5));
        // Moving averages: the next interval idle, the queue empty.
        m.sample(at(200, 25), 0);
        let r = m.report();
        assert!((r.cpu - 0.25).abs() < 1e-9 && r.nfs[0].q == 2.0, "{r:?}");
    }

    #[test]
    fn odd_samples_are_bounded() {
        let mut m = LoadMeter::new(None);
        m.sample(at(100, 0), 0);
        // The clock not moving adds nothing; more CPU than wall (threads) is 1.
        m.sample(at(100, 50), 0);
        assert!(m.frame().is_none());
        m.sample(at(110, 90), 0);
        assert_eq!(m.report().cpu, 1.0);
        // A budget of nothing is one core.
        assert_eq!(LoadMeter::new(Some(0.0)).budget, 1.0);
    }

    #[test]
    fn reports_survive_the_wire() {
        let mut m = LoadMeter::new(Some(0.25));
        m.sample(at(0, 0), 0);
        m.sample(at(1000, 125), 7);
        let Some(Frame::Load { cpu_e4, nfs }) = m.frame() else { panic!() };
        assert_eq!(from_frame(cpu_e4, &nfs), m.report());
        // Unknown kinds and no share are left out.
        let odd = [NfLoadWire { kind: 200, q_e3: 1, c_e4: 1 }, NfLoadWire { kind: 0, q_e3: 1, c_e4: 0 }];
        assert!(from_frame(0, &odd).nfs.is_empty());
    }
}
