//! The emulator's load (seed 004 7.2): procedure arrivals under traffic
//! patterns T1 (constant), T2 (ramp up then down), T3 (Markov-modulated
//! Poisson per UE) and T4 (Pareto bursts), spread over UEs with a
//! configurable skew, each a procedure drawn from a mix. Seeded: the same
//! configuration gives the same arrivals.

use crate::procedure::ProcedureKind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pattern {
    /// T1: Poisson arrivals at a constant rate.
    Constant,
    /// T2: the rate rises linearly to `peak_factor` (in [1, 2]) times the
    /// mean at half time and falls back as far, so the mean is the
    /// configured rate.
    Ramp { peak_factor: f64 },
    /// T3: every UE alternates between a high state (`high_factor` times
    /// its mean rate, for exponential times of mean `mean_high_s`) and a
    /// low one (mean `mean_low_s`), whose rate keeps the UE's mean.
    Mmpp { high_factor: f64, mean_high_s: f64, mean_low_s: f64 },
    /// T4: bursts at Poisson times of Pareto(`alpha`, 1) procedures each
    /// (rounded down, at most `max_burst`), spread over `burst_window_s`;
    /// the smaller `alpha`, the larger the bursts.
    Pareto { alpha: f64, max_burst: u32, burst_window_s: f64 },
}

impl Pattern {
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::Constant => "T1",
            Pattern::Ramp { .. } => "T2",
            Pattern::Mmpp { .. } => "T3",
            Pattern::Pareto { .. } => "T4",
        }
    }

    pub fn pareto(alpha: f64) -> Pattern {
        Pattern::Pareto { alpha, max_burst: 200, burst_window_s: 0.02 }
    }

    pub fn mmpp() -> Pattern {
        Pattern::Mmpp { high_factor: 4.0, mean_high_s: 0.2, mean_low_s: 1.0 }
    }
}

/// How load is spread over UEs: the first `hot_fraction` of them carry
/// `hot_share` of it, the rest the remainder, evenly within each group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Skew {
    pub hot_fraction: f64,
    pub hot_share: f64,
}

impl Skew {
    pub const UNIFORM: Skew = Skew { hot_fraction: 0.5, hot_share: 0.5 };

    /// Each UE's share of the load, summing to 1.
    pub fn weights(&self, ues: u32) -> Vec<f64> {
        let n = ues.max(1) as usize;
        let hot = ((self.hot_fraction.clamp(0.0, 1.0) * n as f64).round() as usize).min(n);
        let share = self.hot_share.clamp(0.0, 1.0);
        let (hot, share) = match hot {
            0 => (0, 0.0),
            h if h == n => (n, 1.0),
            h => (h, share),
        };
        (0..n).map(|i| if i < hot { share / hot as f64 } else { (1.0 - share) / (n - hot) as f64 }).collect()
    }
}

/// Relative frequencies of the procedures, by `ProcedureKind::index`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix(pub [f64; ProcedureKind::COUNT]);

impl Default for Mix {
    /// IoT-like signalling: mostly service requests, then TAU and
    /// handover, some attach and detach.
    fn default() -> Self {
        Mix([0.05, 0.5, 0.2, 0.2, 0.05])
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct LoadConfig {
    pub ues: u32,
    /// Mean procedures per second over the run.
    pub rate: f64,
    pub duration_s: f64,
    pub pattern: Pattern,
    pub skew: Skew,
    pub mix: Mix,
    pub seed: u64,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            ues: 1000,
            rate: 1000.0,
            duration_s: 10.0,
            pattern: Pattern::Constant,
            skew: Skew::UNIFORM,
            mix: Mix::default(),
            seed: 1,
        }
    }
}

/// A procedure's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Arrival {
    pub at_ns: u64,
    /// The UE's index, 0..ues.
    pub ue: u32,
    pub kind: ProcedureKind,
}

enum State {
    /// T1, T2: the next candidate time of the (thinned) Poisson process.
    Poisson { t: f64 },
    /// T3: each UE's next event (arrival or state change) and state.
    Mmpp { events: BinaryHeap<Reverse<(u64, u32)>>, high: Vec<bool>, low_factor: f64 },
    /// T4: the next burst's time.
    Pareto { next_burst: f64 },
}

/// The arrivals of a `LoadConfig`, in time order.
pub struct LoadGen {
    cfg: LoadConfig,
    rng: StdRng,
    cum_weights: Vec<f64>,
    cum_mix: [f64; ProcedureKind::COUNT],
    state: State,
    /// Arrivals drawn ahead (a burst's spread procedures), by time.
    pending: BinaryHeap<Reverse<Arrival>>,
}

fn cumulative(w: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut acc = 0.0;
    w.into_iter()
        .map(|x| {
            acc += x.max(0.0);
            acc
        })
        .collect()
}

fn ns(t: f64) -> u64 {
    (t * 1e9).round() as u64
}

/// `E[min(floor(X), cap)]` for X ~ Pareto(alpha, 1): the sum over
/// k = 1..cap of P(X >= k) = k^-alpha.
pub fn mean_burst(alpha: f64, cap: u32) -> f64 {
    (1..=cap.max(1)).map(|k| f64::from(k).powf(-alpha)).sum()
}

impl LoadGen {
    pub fn new(cfg: LoadConfig) -> Self {
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let weights = cfg.skew.weights(cfg.ues);
        let cum_mix_v = cumulative(cfg.mix.0);
        let mut cum_mix = [0.0; ProcedureKind::COUNT];
        cum_mix.copy_from_slice(&cum_mix_v);
        let state = match cfg.pattern {
            Pattern::Constant | Pattern::Ramp { .. } => State::Poisson { t: 0.0 },
            Pattern::Mmpp { high_factor, mean_high_s, mean_low_s } => {
                let p_high = mean_high_s / (mean_high_s + mean_low_s);
                let high_factor = high_factor.clamp(1.0, 1.0 / p_high);
                let low_factor = (1.0 - p_high * high_factor) / (1.0 - p_high);
                let high: Vec<bool> = (0..weights.len()).map(|_| rng.random::<f64>() < p_high).collect();
                let mut events = BinaryHeap::new();
                for (ue, &w) in weights.iter().enumerate() {
                    let f = if high[ue] { high_factor } else { low_factor };
                    let switch = 1.0 / if high[ue] { mean_high_s } else { mean_low_s };
                    let total = cfg.rate * w * f + switch;
                    events.push(Reverse((ns(exp(&mut rng, total)), ue as u32)));
                }
                State::Mmpp { events, high, low_factor }
            }
            Pattern::Pareto { alpha, max_burst, .. } => {
                let burst_rate = cfg.rate / mean_burst(alpha, max_burst);
                State::Pareto { next_burst: exp(&mut rng, burst_rate) }
            }
        };
        LoadGen { cum_weights: cumulative(weights), cum_mix, rng, state, pending: BinaryHeap::new(), cfg }
    }

    pub fn config(&self) -> &LoadConfig {
        &self.cfg
    }

    fn pick(cum: &[f64], u: f64) -> usize {
        let total = cum.last().copied().unwrap_or(0.0);
        cum.partition_point(|&c| c <= u * total).min(cum.len().saturating_sub(1))
    }

    fn kind(&mut self) -> ProcedureKind {
        ProcedureKind::ALL[Self::pick(&self.cum_mix, self.rng.random())]
    }

    fn ue(&mut self) -> u32 {
        Self::pick(&self.cum_weights, self.rng.random()) as u32
    }

    /// The T2 rate relative to the mean at time `t`.
    fn ramp(&self, t: f64, peak: f64) -> f64 {
        ramp_factor(t / self.cfg.duration_s, peak)
    }

    fn next_arrival(&mut self) -> Option<Arrival> {
        let end = self.cfg.duration_s;
        match self.cfg.pattern {
            Pattern::Constant | Pattern::Ramp { .. } => {
                let peak = match self.cfg.pattern {
                    Pattern::Ramp { peak_factor } => peak_factor.clamp(1.0, 2.0),
                    _ => 1.0,
                };
                loop {
                    let State::Poisson { t } = &mut self.state else { unreachable!() };
                    *t += exp(&mut self.rng, self.cfg.rate * peak);
                    let now = *t;
                    if now >= end {
                        return None;
                    }
                    // Thinning: keep with probability rate(t) / peak rate.
                    if peak == 1.0 || self.rng.random::<f64>() * peak < self.ramp(now, peak) {
                        let (ue, kind) = (self.ue(), self.kind());
                        return Some(Arrival { at_ns: ns(now), ue, kind });
                    }
                }
            }
            Pattern::Mmpp { high_factor, mean_high_s, mean_low_s } => loop {
                let State::Mmpp { events, high, low_factor } = &mut self.state else { unreachable!() };
                let Reverse((at, ue)) = events.pop()?;
                let t = at as f64 / 1e9;
                if t >= end {
                    return None;
                }
                let i = ue as usize;
                let w = self.cum_weights[i] - if i == 0 { 0.0 } else { self.cum_weights[i - 1] };
                let p_high = mean_high_s / (mean_high_s + mean_low_s);
                let hf = high_factor.clamp(1.0, 1.0 / p_high);
                let f = |h: bool| if h { hf } else { *low_factor };
                let switch = |h: bool| 1.0 / if h { mean_high_s } else { mean_low_s };
                let arrival_rate = self.cfg.rate * w * f(high[i]);
                let total = arrival_rate + switch(high[i]);
                // Which of the competing exponentials fired.
                let arrived = self.rng.random::<f64>() * total < arrival_rate;
                if !arrived {
                    high[i] = !high[i];
                }
                let total = self.cfg.rate * w * f(high[i]) + switch(high[i]);
                let next = t + exp(&mut self.rng, total);
                let State::Mmpp { events, .. } = &mut self.state else { unreachable!() };
                events.push(Reverse((ns(next), ue)));
                if arrived {
                    let kind = self.kind();
                    return Some(Arrival { at_ns: at, ue, kind });
                }
            },
            Pattern::Pareto { alpha, max_burst, burst_window_s } => loop {
                let State::Pareto { next_burst } = &mut self.state else { unreachable!() };
                let burst = *next_burst;
                if let Some(Reverse(a)) = self.pending.peek() {
                    if (a.at_ns as f64) / 1e9 <= burst || burst >= end {
                        let a = self.pending.pop()?.0;
                        return Some(a);
                    }
                }
                if burst >= end {
                    return None;
                }
                let burst_rate = self.cfg.rate / mean_burst(alpha, max_burst);
                *next_burst = burst + exp(&mut self.rng, burst_rate);
                let u: f64 = 1.0 - self.rng.random::<f64>();
                let size = (u.powf(-1.0 / alpha).floor() as u64).clamp(1, u64::from(max_burst.max(1)));
                for _ in 0..size {
                    let at = burst + self.rng.random::<f64>() * burst_window_s;
                    if at < end {
                        let (ue, kind) = (self.ue(), self.kind());
                        self.pending.push(Reverse(Arrival { at_ns: ns(at), ue, kind }));
                    }
                }
            },
        }
    }
}

impl Iterator for LoadGen {
    type Item = Arrival;
    fn next(&mut self) -> Option<Arrival> {
        self.next_arrival()
    }
}

/// T2's rate relative to its mean at `x` of the run (0 to 1): from
/// `2 - peak` up to `peak` (in [1, 2]) at half time and down again.
pub fn ramp_factor(x: f64, peak: f64) -> f64 {
    let tri = 1.0 - (2.0 * x.clamp(0.0, 1.0) - 1.0).abs();
    let lo = 2.0 - peak;
    lo + (peak - lo) * tri
}

/// An exponential time of the given rate.
fn exp(rng: &mut StdRng, rate: f64) -> f64 {
    if rate <= 0.0 {
        return f64::INFINITY;
    }
    let u: f64 = 1.0 - rng.random::<f64>();
    -u.ln() / rate
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pattern: Pattern, skew: Skew, seed: u64) -> Vec<Arrival> {
        let cfg = LoadConfig { ues: 2000, rate: 2000.0, duration_s: 20.0, pattern, skew, seed, ..Default::default() };
        LoadGen::new(cfg).collect()
    }

    fn rate(a: &[Arrival]) -> f64 {
        a.len() as f64 / 20.0
    }

    #[test]
    fn mean_rates_of_every_pattern() {
        let patterns = [
            (Pattern::Constant, 0.02),
            (Pattern::Ramp { peak_factor: 1.8 }, 0.02),
            (Pattern::mmpp(), 0.05),
            (Pattern::pareto(3.0), 0.05),
            (Pattern::pareto(2.0), 0.08),
        ];
        for (p, tol) in patterns {
            let a = run(p, Skew::UNIFORM, 7);
            let r = rate(&a);
            assert!((r / 2000.0 - 1.0).abs() < tol, "{p:?}: {r}/s");
            assert!(a.windows(2).all(|w| w[0].at_ns <= w[1].at_ns), "{p:?}: in time order");
            assert!(a.iter().all(|x| x.at_ns < 20_000_000_000 && x.ue < 2000));
        }
    }

    #[test]
    fn seeded_and_deterministic() {
        for p in [Pattern::Constant, Pattern::mmpp(), Pattern::pareto(1.0)] {
            assert_eq!(run(p, Skew::UNIFORM, 3), run(p, Skew::UNIFORM, 3));
            assert_ne!(run(p, Skew::UNIFORM, 3), run(p, Skew::UNIFORM, 4));
        }
    }

    #[test]
    fn ramp_rises_then_falls() {
        let a = run(Pattern::Ramp { peak_factor: 1.8 }, Skew::UNIFORM, 1);
        let in_window =
            |lo: f64, hi: f64| a.iter().filter(|x| (lo..hi).contains(&(x.at_ns as f64 / 1e9))).count() as f64;
        // Rate at the edges ~0.2-0.36x the mean, at the middle ~1.64-1.8x.
        let (first, mid, last) = (in_window(0.0, 2.0), in_window(9.0, 11.0), in_window(18.0, 20.0));
        assert!(mid > 4.0 * first && mid > 4.0 * last, "{first} {mid} {last}");
        assert!((mid / 2.0 / 2000.0 - 1.72).abs() < 0.1, "{mid}");
    }

    #[test]
    fn skew_puts_the_share_on_the_hot_ues() {
        let a = run(Pattern::Constant, Skew { hot_fraction: 0.5, hot_share: 0.9 }, 2);
        let hot = a.iter().filter(|x| x.ue < 1000).count() as f64 / a.len() as f64;
        assert!((hot - 0.9).abs() < 0.01, "{hot}");
        // T3 per UE keeps the skew too.
        let a = run(Pattern::mmpp(), Skew { hot_fraction: 0.2, hot_share: 0.8 }, 2);
        let hot = a.iter().filter(|x| x.ue < 400).count() as f64 / a.len() as f64;
        assert!((hot - 0.8).abs() < 0.03, "{hot}");
    }

    #[test]
    fn mix_is_followed() {
        let a = run(Pattern::Constant, Skew::UNIFORM, 5);
        for k in ProcedureKind::ALL {
            let f = a.iter().filter(|x| x.kind == k).count() as f64 / a.len() as f64;
            assert!((f - Mix::default().0[k.index()]).abs() < 0.01, "{k:?}: {f}");
        }
    }

    #[test]
    fn mmpp_is_burstier_than_poisson_and_pareto_by_alpha() {
        // Variance over mean of counts in 100 ms windows: 1 for Poisson.
        let dispersion = |a: &[Arrival]| {
            let mut c = vec![0f64; 200];
            for x in a {
                c[(x.at_ns / 100_000_000) as usize] += 1.0;
            }
            let m = c.iter().sum::<f64>() / c.len() as f64;
            c.iter().map(|v| (v - m).powi(2)).sum::<f64>() / c.len() as f64 / m
        };
        let d1 = dispersion(&run(Pattern::Constant, Skew::UNIFORM, 9));
        let d3 = dispersion(&run(Pattern::mmpp(), Skew { hot_fraction: 0.01, hot_share: 0.5 }, 9));
        let p3 = dispersion(&run(Pattern::pareto(3.0), Skew::UNIFORM, 9));
        let p1 = dispersion(&run(Pattern::pareto(1.0), Skew::UNIFORM, 9));
        assert!(d1 < 1.5, "{d1}");
        assert!(d3 > 2.0 * d1, "{d3} vs {d1}");
        assert!(p1 > 3.0 * p3 && p3 > d1, "{p1} {p3} {d1}");
    }

    #[test]
    fn mean_burst_sums_the_tail() {
        assert_eq!(mean_burst(2.0, 1), 1.0);
        assert!((mean_burst(2.0, 100_000) - std::f64::consts::PI.powi(2) / 6.0).abs() < 1e-4);
        // alpha = 1: the harmonic number.
        assert!((mean_burst(1.0, 4) - (1.0 + 0.5 + 1.0 / 3.0 + 0.25)).abs() < 1e-12);
    }
}
