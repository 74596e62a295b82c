//! Seed 004 Fig. 7a as numbers: procedure latency per time bin around a
//! failure, failed procedures, and how long until latency is back to its
//! level before the failure. No I/O, no clock: outcomes in (times in ms
//! from the start of the measured run), bins and the recovery out.

/// One procedure as the emulated RAN saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// When it started, ms since the run began.
    pub start_ms: f64,
    /// How long it took (to its failure, for a failed one).
    pub latency_ms: f64,
    pub ok: bool,
}

/// The procedures that started in one bin.
#[derive(Debug, Clone, PartialEq)]
pub struct Bin {
    pub start_ms: f64,
    pub ok: u64,
    pub failed: u64,
    /// Latency of the successful ones (nearest rank); none without any.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// Bins of `bin_ms` from 0 to `end_ms`; a procedure counts in the bin it
/// started in, so one the failure held up shows where it began.
pub fn bins(outcomes: &[Outcome], bin_ms: f64, end_ms: f64) -> Vec<Bin> {
    assert!(bin_ms > 0.0, "a bin has a width");
    let n = (end_ms / bin_ms).ceil().max(1.0) as usize;
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut failed = vec![0u64; n];
    for o in outcomes {
        let i = ((o.start_ms.max(0.0) / bin_ms) as usize).min(n - 1);
        match o.ok {
            true => lat[i].push(o.latency_ms),
            false => failed[i] += 1,
        }
    }
    lat.into_iter()
        .zip(failed)
        .enumerate()
        .map(|(i, (mut v, failed))| {
            v.sort_by(f64::total_cmp);
            Bin {
                start_ms: i as f64 * bin_ms,
                ok: v.len() as u64,
                failed,
                p50_ms: nearest_rank(&v, 50.0),
                p99_ms: nearest_rank(&v, 99.0),
            }
        })
        .collect()
}

/// p50 and p99 (nearest rank) of the successful procedures' latencies, ms.
pub fn p50_p99(outcomes: &[Outcome]) -> (Option<f64>, Option<f64>) {
    let mut lat: Vec<f64> = outcomes.iter().filter(|o| o.ok).map(|o| o.latency_ms).collect();
    lat.sort_by(f64::total_cmp);
    (nearest_rank(&lat, 50.0), nearest_rank(&lat, 99.0))
}

/// The bins as the benches' JSON has them.
pub fn bins_json(bins: &[Bin]) -> Vec<serde_json::Value> {
    bins.iter()
        .map(|b| {
            serde_json::json!({"t_ms": b.start_ms, "ok": b.ok, "failed": b.failed,
                "latency_ms_p50": b.p50_ms, "latency_ms_p99": b.p99_ms})
        })
        .collect()
}

/// The `p`th percentile of sorted values by nearest rank.
pub fn nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// When a bin after the failure counts as disturbed: a failed procedure
/// in it, none that succeeded (under constant load, nothing got through:
/// the load generator waited on what the failure held up), or a median
/// latency above `factor` times the level before the failure plus
/// `slack_ms` (sub-millisecond medians double by noise alone). Latency is back once `settle_bins` bins in a row are not
/// disturbed (a lone slow bin long after, a hiccup of the machine, is not
/// the failure's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold {
    pub factor: f64,
    pub slack_ms: f64,
    pub settle_bins: usize,
}

impl Default for Threshold {
    fn default() -> Self {
        Threshold { factor: 2.0, slack_ms: 2.0, settle_bins: 5 }
    }
}

/// What the failure did to the timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recovery {
    /// The median of the bins' medians before the failure (none: no bin
    /// before it had a successful procedure).
    pub level_ms: Option<f64>,
    /// From the failure to the start of the first `settle_bins` bins in a
    /// row that are not disturbed (0: at once); none if the run ended
    /// before that.
    pub recovery_ms: Option<f64>,
}

/// The level before `fail_ms` and the time until latency is back to it
/// (seed 004 7.2: "recovers quickly", < 0.5 s for an NF, up to 2.5 s for
/// a host; 5 s and re-attaches for the stateful MME).
pub fn recovery(bins: &[Bin], bin_ms: f64, fail_ms: f64, t: Threshold) -> Recovery {
    let mut before: Vec<f64> =
        bins.iter().filter(|b| b.start_ms + bin_ms <= fail_ms).filter_map(|b| b.p50_ms).collect();
    before.sort_by(f64::total_cmp);
    let level = nearest_rank(&before, 50.0);
    let limit = level.map_or(f64::INFINITY, |l| t.factor * l + t.slack_ms);
    let disturbed = |b: &Bin| b.failed > 0 || b.p50_ms.is_none_or(|p| p > limit);
    let after: Vec<&Bin> = bins.iter().filter(|b| b.start_ms + bin_ms > fail_ms).collect();
    let settle = t.settle_bins.max(1);
    let back =
        (0..after.len()).find(|&i| after.len() - i >= settle && !after[i..i + settle].iter().any(|b| disturbed(b)));
    Recovery { level_ms: level, recovery_ms: back.map(|i| (after[i].start_ms - fail_ms).max(0.0)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(start_ms: f64, latency_ms: f64) -> Outcome {
        Outcome { start_ms, latency_ms, ok: true }
    }

    /// A steady 2 ms with 10 procedures per 100 ms bin over 2 s.
    fn steady() -> Vec<Outcome> {
        (0..200).map(|i| ok(i as f64 * 10.0, 2.0)).collect()
    }

    #[test]
    fn procedures_count_where_they_started() {
        let mut o = steady();
        o.push(ok(150.0, 900.0));
        o.push(Outcome { start_ms: 250.0, latency_ms: 5000.0, ok: false });
        let b = bins(&o, 100.0, 2000.0);
        assert_eq!(b.len(), 20);
        assert_eq!((b[1].ok, b[1].failed, b[1].p50_ms, b[1].p99_ms), (11, 0, Some(2.0), Some(900.0)));
        assert_eq!((b[2].ok, b[2].failed), (10, 1));
        // Past the end: the last bin.
        assert_eq!(bins(&[ok(5000.0, 1.0)], 100.0, 2000.0)[19].ok, 1);
    }

    #[test]
    fn no_disturbance_recovers_at_once() {
        let b = bins(&steady(), 100.0, 2000.0);
        let r = recovery(&b, 100.0, 1000.0, Threshold::default());
        assert_eq!(r, Recovery { level_ms: Some(2.0), recovery_ms: Some(0.0) });
    }

    #[test]
    fn recovery_is_the_start_of_the_first_settled_stretch() {
        let mut o = steady();
        // Failure at 1000 ms: slow until 1300, one failure starting at 1420.
        for x in &mut o {
            if (1000.0..1300.0).contains(&x.start_ms) {
                x.latency_ms = 40.0;
            }
        }
        o.push(Outcome { start_ms: 1420.0, latency_ms: 5000.0, ok: false });
        let b = bins(&o, 100.0, 2000.0);
        let r = recovery(&b, 100.0, 1000.0, Threshold::default());
        assert_eq!(r.recovery_ms, Some(500.0));
        // A lone slow bin long after the latency is back is not the failure's.
        let mut late = o.clone();
        late.iter_mut().filter(|x| (1800.0..1900.0).contains(&x.start_ms)).for_each(|x| x.latency_ms = 90.0);
        let r =
            recovery(&bins(&late, 100.0, 2000.0), 100.0, 1000.0, Threshold { settle_bins: 2, ..Default::default() });
        assert_eq!(r.recovery_ms, Some(500.0));
        // Within factor x level + slack: not disturbed.
        let mut o = steady();
        o.iter_mut().filter(|x| x.start_ms >= 1000.0).for_each(|x| x.latency_ms = 5.9);
        let r = recovery(&bins(&o, 100.0, 2000.0), 100.0, 1000.0, Threshold::default());
        assert_eq!(r.recovery_ms, Some(0.0));
        // A gap: nothing started from 1000 to 1200 (held up), then steady.
        let gap: Vec<Outcome> = steady().into_iter().filter(|x| !(1000.0..1200.0).contains(&x.start_ms)).collect();
        let r = recovery(&bins(&gap, 100.0, 2000.0), 100.0, 1000.0, Threshold::default());
        assert_eq!(r.recovery_ms, Some(200.0));
    }

    #[test]
    fn a_run_that_ends_disturbed_did_not_recover() {
        let mut o = steady();
        o.iter_mut().filter(|x| x.start_ms >= 1000.0).for_each(|x| x.latency_ms = 100.0);
        let r = recovery(&bins(&o, 100.0, 2000.0), 100.0, 1000.0, Threshold::default());
        assert_eq!(r, Recovery { level_ms: Some(2.0), recovery_ms: None });
        // Nothing before the failure: no level, any latency is level.
        let r = recovery(&bins(&o[100..], 100.0, 2000.0), 100.0, 1000.0, Threshold::default());
        assert_eq!(r, Recovery { level_ms: None, recovery_ms: Some(0.0) });
    }
}
