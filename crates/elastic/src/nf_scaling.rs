//! The per-host NF controller (seed 004 5.2 "Scaling"): instances of a
//! procedure kind taken from the host's idle pool on a persistent backlog,
//! given back on persistently low load. Sans-I/O: the forwarder samples
//! its instances' queues (the events each holds) every tick and applies
//! the decision.

use crate::procedure::ProcedureKind;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NfScalingConfig {
    /// A kind grows when its instances hold more than this many events
    /// each, on average ...
    pub grow_above: f64,
    /// ... at this many samples in a row.
    pub grow_after: u32,
    /// A kind with instances beyond its base count shrinks when they hold
    /// at most this many events each, on average ...
    pub shrink_below: f64,
    /// ... at this many samples in a row.
    pub shrink_after: u32,
}

impl Default for NfScalingConfig {
    /// Sampled every 100 ms: a backlog of 4 events per instance for 0.3 s
    /// grows a kind, an almost empty queue for 3 s shrinks it.
    fn default() -> Self {
        NfScalingConfig { grow_above: 4.0, grow_after: 3, shrink_below: 0.5, shrink_after: 30 }
    }
}

/// One kind's instances as the forwarder sees them at a sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KindLoad {
    pub kind: ProcedureKind,
    /// Live instances taking only this kind.
    pub instances: usize,
    /// The events they hold (sent, not answered yet).
    pub held: usize,
    /// Instances the kind started with: it never shrinks below them.
    pub base: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NfScale {
    /// Give the kind an instance from the idle pool.
    Grow(ProcedureKind),
    /// Give one of the kind's idle instances back to the pool.
    Shrink(ProcedureKind),
}

/// Consecutive busy and quiet samples per kind.
#[derive(Clone, Debug, Default)]
pub struct NfScaling {
    cfg: NfScalingConfig,
    busy: [u32; ProcedureKind::COUNT],
    quiet: [u32; ProcedureKind::COUNT],
}

impl NfScaling {
    pub fn new(cfg: NfScalingConfig) -> NfScaling {
        NfScaling { cfg, ..NfScaling::default() }
    }

    /// One sample of every kind with instances; `pool` idle instances are
    /// left. At most one decision per sample, growth first (the kind
    /// with the longest backlog); a decision starts that kind's count over.
    pub fn sample(&mut self, loads: &[KindLoad], pool: usize) -> Option<NfScale> {
        for l in loads {
            let i = l.kind.index();
            let per = l.held as f64 / l.instances.max(1) as f64;
            self.busy[i] = if l.instances > 0 && per > self.cfg.grow_above { self.busy[i] + 1 } else { 0 };
            self.quiet[i] = if l.instances > l.base && per <= self.cfg.shrink_below { self.quiet[i] + 1 } else { 0 };
        }
        let grow =
            loads.iter().filter(|l| pool > 0 && self.busy[l.kind.index()] >= self.cfg.grow_after).max_by(|a, b| {
                let per = |l: &KindLoad| l.held as f64 / l.instances.max(1) as f64;
                per(a).total_cmp(&per(b))
            });
        if let Some(l) = grow {
            self.busy[l.kind.index()] = 0;
            return Some(NfScale::Grow(l.kind));
        }
        let shrink = loads.iter().find(|l| self.quiet[l.kind.index()] >= self.cfg.shrink_after)?;
        self.quiet[shrink.kind.index()] = 0;
        Some(NfScale::Shrink(shrink.kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProcedureKind::*;

    fn load(kind: ProcedureKind, instances: usize, held: usize) -> KindLoad {
        KindLoad { kind, instances, held, base: 1 }
    }

    #[test]
    fn a_persistent_backlog_grows_the_busiest_kind_and_a_lasting_lull_shrinks_it() {
        let cfg = NfScalingConfig { grow_above: 4.0, grow_after: 3, shrink_below: 0.5, shrink_after: 5 };
        let mut c = NfScaling::new(cfg);
        // A backlog that does not last: nothing.
        assert_eq!(c.sample(&[load(Attach, 1, 9)], 1), None);
        assert_eq!(c.sample(&[load(Attach, 1, 9)], 1), None);
        assert_eq!(c.sample(&[load(Attach, 1, 2)], 1), None);
        // Two kinds backlogged for three samples: the longer queue grows.
        for _ in 0..2 {
            assert_eq!(c.sample(&[load(Attach, 1, 6), load(Handover, 1, 20)], 1), None);
        }
        assert_eq!(c.sample(&[load(Attach, 1, 6), load(Handover, 1, 20)], 1), Some(NfScale::Grow(Handover)));
        // The other kind's count went on: it grows at the next sample...
        assert_eq!(c.sample(&[load(Attach, 1, 6), load(Handover, 2, 2)], 1), Some(NfScale::Grow(Attach)));
        // ... unless the pool is empty.
        for _ in 0..5 {
            assert_eq!(c.sample(&[load(Attach, 2, 20)], 0), None);
        }
        // Quiet beyond the base count, long enough: one back to the pool.
        for _ in 0..4 {
            assert_eq!(c.sample(&[load(Handover, 2, 1)], 0), None);
        }
        assert_eq!(c.sample(&[load(Handover, 2, 1)], 0), Some(NfScale::Shrink(Handover)));
        // Never below the base count.
        for _ in 0..10 {
            assert_eq!(c.sample(&[load(Handover, 1, 0)], 0), None);
        }
    }
}
