//! What a host tells the load balancer, periodically: moving averages of
//! each NF's queue length and CPU share and of the host's CPU use (seed 004
//! 5.1, "a few hundred milliseconds" apart).

use crate::procedure::ProcedureKind;

/// An exponentially weighted moving average.
#[derive(Clone, Copy, Debug)]
pub struct Ewma {
    alpha: f64,
    value: Option<f64>,
}

impl Ewma {
    /// `alpha` is the weight of a new sample, in (0, 1].
    pub fn new(alpha: f64) -> Self {
        Ewma { alpha: alpha.clamp(f64::MIN_POSITIVE, 1.0), value: None }
    }

    pub fn add(&mut self, sample: f64) {
        self.value = Some(match self.value {
            None => sample,
            Some(v) => v + self.alpha * (sample - v),
        });
    }

    pub fn value(&self) -> f64 {
        self.value.unwrap_or(0.0)
    }
}

/// One NF's moving averages: `q_i` and `c_i` of Eq. 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NfLoad {
    pub kind: ProcedureKind,
    /// Messages queued.
    pub q: f64,
    /// Share of a core, in (0, 1].
    pub c: f64,
}

/// A host's report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostReport {
    /// CPU use in [0, 1]: how loaded the host is when choosing among
    /// viable hosts.
    pub cpu: f64,
    pub nfs: Vec<NfLoad>,
}

/// The moving averages a host keeps between reports.
#[derive(Clone, Debug)]
pub struct HostMonitor {
    cpu: Ewma,
    /// Per NF instance: kind, q, c.
    nfs: Vec<(ProcedureKind, Ewma, Ewma)>,
    alpha: f64,
}

impl HostMonitor {
    pub fn new(alpha: f64) -> Self {
        HostMonitor { cpu: Ewma::new(alpha), nfs: Vec::new(), alpha }
    }

    /// One sample: the host's busy fraction since the last sample, and per
    /// NF instance (in a fixed order) its kind, queue length and share.
    pub fn sample(&mut self, busy: f64, nfs: impl IntoIterator<Item = (ProcedureKind, f64, f64)>) {
        self.cpu.add(busy.clamp(0.0, 1.0));
        for (i, (kind, q, c)) in nfs.into_iter().enumerate() {
            if i == self.nfs.len() {
                self.nfs.push((kind, Ewma::new(self.alpha), Ewma::new(self.alpha)));
            }
            let nf = &mut self.nfs[i];
            nf.0 = kind;
            nf.1.add(q);
            nf.2.add(c);
        }
    }

    pub fn report(&self) -> HostReport {
        HostReport {
            cpu: self.cpu.value(),
            nfs: self.nfs.iter().map(|(kind, q, c)| NfLoad { kind: *kind, q: q.value(), c: c.value() }).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ewma_converges_and_starts_at_first_sample() {
        let mut e = Ewma::new(0.5);
        assert_eq!(e.value(), 0.0);
        e.add(4.0);
        assert_eq!(e.value(), 4.0);
        e.add(0.0);
        assert_eq!(e.value(), 2.0);
        for _ in 0..50 {
            e.add(1.0);
        }
        assert!((e.value() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn monitor_reports_per_nf_averages() {
        let mut m = HostMonitor::new(1.0);
        m.sample(0.7, [(ProcedureKind::Attach, 3.0, 0.5), (ProcedureKind::Handover, 1.0, 0.5)]);
        let r = m.report();
        assert_eq!(r.cpu, 0.7);
        assert_eq!(r.nfs[1], NfLoad { kind: ProcedureKind::Handover, q: 1.0, c: 0.5 });
    }
}
