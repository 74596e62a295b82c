//! The mobility model of the emulated RAN, without I/O: which UE moves to
//! which eNB when, and by which handover (X2, TS 23.401 5.5.1.1.2, or S1,
//! 5.5.1.2.2). Each moving UE makes `rate` handovers per second: one every
//! `1 / rate` seconds from a seeded random phase, so that the moves of many
//! UEs spread evenly over time while a run with the same seed moves the
//! same UEs to the same eNBs in the same order. The target is a seeded
//! random eNB other than the UE's own; the handover type is the run's, or
//! the one configured for that (source, target) pair; `mixed` draws X2 or
//! S1 per handover.
//!
//! The driver ([`crate::Ran::moving`]) asks [`MobilityModel::poll_timeout`]
//! when to wake it and takes the due moves with [`MobilityModel::poll_move`]:
//! a connected UE hands over; an idle one reselects the target's cell
//! (TS 36.304 5.2.4) and updates its tracking area there if that cell is
//! outside its TAI list ([`crate::enb::reselect`]). A move the UE cannot
//! make now (it is busy with a procedure or a handover) is skipped, not
//! retried, and the UE's next one comes at its usual time. Periodic
//! tracking area updates need no model: the emulated UE's T3412 runs
//! whenever it is idle (TS 24.301 5.3.5) and its eNB starts the TAU at
//! expiry.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The handover a move uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HandoverType {
    /// X2-based handover (TS 23.401 5.5.1.1.2): Path Switch Request.
    X2,
    /// S1-based handover through the MME (TS 23.401 5.5.1.2.2).
    S1,
    /// X2 or S1, drawn per handover.
    Mixed,
}

impl HandoverType {
    pub fn name(self) -> &'static str {
        match self {
            HandoverType::X2 => "x2",
            HandoverType::S1 => "s1",
            HandoverType::Mixed => "mixed",
        }
    }
}

impl std::str::FromStr for HandoverType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "x2" => Ok(HandoverType::X2),
            "s1" => Ok(HandoverType::S1),
            "mixed" => Ok(HandoverType::Mixed),
            other => Err(format!("handover type must be x2, s1 or mixed, not {other:?}")),
        }
    }
}

impl std::fmt::Display for HandoverType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The handover type of moves between two eNBs (positions among the run's
/// eNBs), in both directions; overrides the run's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairType {
    pub a: usize,
    pub b: usize,
    pub handover: HandoverType,
}

/// The `[ran.moving]` configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MobilityConfig {
    /// Handovers per moving UE per second; 0 moves nobody.
    pub handover_rate: f64,
    /// The run's handover type.
    pub handover_type: HandoverType,
    /// Per eNB pair exceptions to `handover_type`.
    pub pairs: Vec<PairType>,
    /// How many UEs move (the lowest indices registered, connected or
    /// idle); `None`: every registered UE.
    pub ues: Option<u64>,
    /// How long the UEs move, in milliseconds.
    pub duration_ms: u64,
    /// Seed of the model's random choices.
    pub seed: u64,
}

impl Default for MobilityConfig {
    fn default() -> Self {
        MobilityConfig {
            handover_rate: 1.0,
            handover_type: HandoverType::X2,
            pairs: Vec::new(),
            ues: None,
            duration_ms: 10_000,
            seed: 1,
        }
    }
}

impl MobilityConfig {
    /// The type of a handover from eNB `from` to eNB `to` (before a
    /// `mixed` draw).
    pub fn type_between(&self, from: usize, to: usize) -> HandoverType {
        self.pairs
            .iter()
            .rev()
            .find(|p| (p.a, p.b) == (from, to) || (p.a, p.b) == (to, from))
            .map_or(self.handover_type, |p| p.handover)
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(self.handover_rate.is_finite() && self.handover_rate >= 0.0) {
            return Err(format!("handover rate must be 0 or more, got {}", self.handover_rate));
        }
        Ok(())
    }
}

/// One move: UE `ue` hands over from eNB `from` to eNB `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub ue: u64,
    pub from: usize,
    pub to: usize,
    /// X2 or S1, never `Mixed`.
    pub handover: HandoverType,
}

/// A small deterministic generator (SplitMix64): the same seed gives the
/// same moves whatever the `rand` version.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

#[derive(Debug, Clone, Copy)]
struct Motion {
    interval: Duration,
    handover: Option<HandoverType>,
}

/// The model: moving UEs, each with its rate and (optionally) its own
/// handover type, over `enbs` eNBs.
#[derive(Debug, Clone)]
pub struct MobilityModel {
    cfg: MobilityConfig,
    enbs: usize,
    rng: SplitMix,
    ues: BTreeMap<u64, Motion>,
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Moves handed out, by type.
    pub moves: BTreeMap<HandoverType, u64>,
}

impl MobilityModel {
    pub fn new(cfg: MobilityConfig, enbs: usize) -> Self {
        let rng = SplitMix(cfg.seed);
        MobilityModel { cfg, enbs, rng, ues: BTreeMap::new(), due: BinaryHeap::new(), moves: BTreeMap::new() }
    }

    pub fn config(&self) -> &MobilityConfig {
        &self.cfg
    }

    /// UE `ue` moves from `now` on at the configured rate and type.
    pub fn add_ue(&mut self, now: Instant, ue: u64) {
        self.add_ue_with(now, ue, self.cfg.handover_rate, None);
    }

    /// UE `ue` moves from `now` on at `rate` handovers per second, by
    /// `handover` if given (else the run's or the pair's type). Its first
    /// move comes at a random point of its first interval.
    pub fn add_ue_with(&mut self, now: Instant, ue: u64, rate: f64, handover: Option<HandoverType>) {
        if !(rate.is_finite() && rate > 0.0) || self.enbs < 2 {
            self.ues.remove(&ue);
            return;
        }
        let interval = Duration::from_secs_f64(1.0 / rate);
        self.ues.insert(ue, Motion { interval, handover });
        let first = now + interval.mul_f64(self.rng.unit());
        self.due.push(Reverse((first, ue)));
    }

    /// Stop moving every UE.
    pub fn clear(&mut self) {
        self.ues.clear();
        self.due.clear();
    }

    /// UEs that move.
    pub fn len(&self) -> usize {
        self.ues.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ues.is_empty()
    }

    /// When the next move is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((t, _))| *t)
    }

    /// The next move due at `now`, the UE's eNB given by `locate`; the
    /// UE's following move is scheduled one interval after this one was
    /// due (so that a slow driver does not lower the rate).
    pub fn poll_move(&mut self, now: Instant, locate: impl Fn(u64) -> usize) -> Option<Move> {
        loop {
            let Reverse((t, ue)) = *self.due.peek()?;
            if t > now {
                return None;
            }
            self.due.pop();
            // A UE removed (or re-added, with its own entry) meanwhile.
            let Some(m) = self.ues.get(&ue).copied() else { continue };
            self.due.push(Reverse((t + m.interval, ue)));
            let from = locate(ue) % self.enbs;
            let to = (from + 1 + self.rng.below(self.enbs - 1)) % self.enbs;
            let handover = match m.handover.unwrap_or_else(|| self.cfg.type_between(from, to)) {
                HandoverType::Mixed if self.rng.next_u64() & 1 == 0 => HandoverType::X2,
                HandoverType::Mixed => HandoverType::S1,
                h => h,
            };
            *self.moves.entry(handover).or_default() += 1;
            return Some(Move { ue, from, to, handover });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(rate: f64, t: HandoverType, seed: u64) -> MobilityConfig {
        MobilityConfig { handover_rate: rate, handover_type: t, seed, ..Default::default() }
    }

    /// Runs the model on a virtual clock for `secs` seconds, every UE
    /// where its last move took it.
    fn run(
        model: &mut MobilityModel,
        start: Instant,
        secs: u64,
        at: &mut BTreeMap<u64, usize>,
    ) -> Vec<(Instant, Move)> {
        let end = start + Duration::from_secs(secs);
        let mut out = Vec::new();
        while let Some(t) = model.poll_timeout().filter(|t| *t < end) {
            let m = model.poll_move(t, |ue| at.get(&ue).copied().unwrap_or(0)).expect("a move is due");
            assert!(model.poll_timeout().is_some());
            at.insert(m.ue, m.to);
            out.push((t, m));
        }
        out
    }

    #[test]
    fn each_ue_moves_at_its_rate_to_another_enb() {
        let start = Instant::now();
        let mut m = MobilityModel::new(cfg(2.0, HandoverType::X2, 7), 4);
        for ue in 0..10 {
            m.add_ue(start, ue);
        }
        let mut at = BTreeMap::new();
        let moves = run(&mut m, start, 30, &mut at);
        // 2 per second for 30 s, from a random phase in the first interval.
        for ue in 0..10 {
            let n = moves.iter().filter(|(_, mv)| mv.ue == ue).count();
            assert_eq!(n, 60, "seed 7, UE {ue}");
        }
        let mut last: BTreeMap<u64, usize> = BTreeMap::new();
        for (_, mv) in &moves {
            assert_ne!(mv.from, mv.to, "seed 7: {mv:?}");
            assert!(mv.to < 4);
            assert_eq!(mv.from, last.get(&mv.ue).copied().unwrap_or(0), "seed 7: moves chain");
            assert_eq!(mv.handover, HandoverType::X2);
            last.insert(mv.ue, mv.to);
        }
        // Every other eNB is a target now and then.
        for e in 0..4 {
            assert!(moves.iter().any(|(_, mv)| mv.to == e), "seed 7: no move to eNB {e}");
        }
        assert_eq!(m.moves.get(&HandoverType::X2), Some(&600));
    }

    #[test]
    fn moves_are_spaced_by_the_interval_from_a_seeded_phase() {
        let start = Instant::now();
        let mut m = MobilityModel::new(cfg(0.5, HandoverType::S1, 3), 2);
        m.add_ue(start, 42);
        let moves = run(&mut m, start, 10, &mut BTreeMap::new());
        assert_eq!(moves.len(), 5, "seed 3");
        assert!(moves[0].0 < start + Duration::from_secs(2), "seed 3: first in the first interval");
        for w in moves.windows(2) {
            assert_eq!(w[1].0 - w[0].0, Duration::from_secs(2), "seed 3");
        }
        // Two eNBs: back and forth.
        let tos: Vec<usize> = moves.iter().map(|(_, mv)| mv.to).collect();
        assert_eq!(tos, vec![1, 0, 1, 0, 1]);
        assert!(moves.iter().all(|(_, mv)| mv.handover == HandoverType::S1));
    }

    #[test]
    fn same_seed_same_moves_other_seed_other_moves() {
        let start = Instant::now();
        let go = |seed| {
            let mut m = MobilityModel::new(cfg(1.0, HandoverType::Mixed, seed), 5);
            for ue in 0..20 {
                m.add_ue(start, ue);
            }
            run(&mut m, start, 5, &mut BTreeMap::new())
        };
        assert_eq!(go(11), go(11));
        assert_ne!(go(11), go(12));
    }

    #[test]
    fn mixed_draws_both_types_and_pairs_override() {
        let start = Instant::now();
        let mut m = MobilityModel::new(cfg(4.0, HandoverType::Mixed, 5), 3);
        for ue in 0..50 {
            m.add_ue(start, ue);
        }
        run(&mut m, start, 10, &mut BTreeMap::new());
        let (x2, s1) = (m.moves[&HandoverType::X2], m.moves[&HandoverType::S1]);
        assert_eq!(x2 + s1, 2000);
        // A fair coin: far from either extreme (seed 5).
        assert!((800..1200).contains(&x2), "seed 5: {x2} X2 of 2000");

        // eNBs 0 and 1 have no X2 between them: S1 there, X2 elsewhere.
        let mut c = cfg(4.0, HandoverType::X2, 5);
        c.pairs.push(PairType { a: 1, b: 0, handover: HandoverType::S1 });
        let mut m = MobilityModel::new(c, 3);
        for ue in 0..50 {
            m.add_ue(start, ue);
        }
        let moves = run(&mut m, start, 10, &mut BTreeMap::new());
        for (_, mv) in moves {
            let between_0_1 = mv.from.min(mv.to) == 0 && mv.from.max(mv.to) == 1;
            let want = if between_0_1 { HandoverType::S1 } else { HandoverType::X2 };
            assert_eq!(mv.handover, want, "seed 5: {mv:?}");
        }
    }

    #[test]
    fn per_ue_rate_and_type_and_no_moves_at_zero() {
        let start = Instant::now();
        let mut m = MobilityModel::new(cfg(1.0, HandoverType::X2, 9), 2);
        m.add_ue_with(start, 1, 0.0, None);
        m.add_ue_with(start, 2, 2.0, Some(HandoverType::S1));
        m.add_ue_with(start, 3, 1.0, None);
        assert_eq!(m.len(), 2);
        let moves = run(&mut m, start, 4, &mut BTreeMap::new());
        assert!(moves.iter().all(|(_, mv)| mv.ue != 1));
        assert_eq!(moves.iter().filter(|(_, mv)| mv.ue == 2 && mv.handover == HandoverType::S1).count(), 8);
        assert_eq!(moves.iter().filter(|(_, mv)| mv.ue == 3 && mv.handover == HandoverType::X2).count(), 4);
        // One eNB: nowhere to go.
        let mut one = MobilityModel::new(cfg(1.0, HandoverType::X2, 9), 1);
        one.add_ue(start, 1);
        assert!(one.poll_timeout().is_none());
        m.clear();
        assert!(m.poll_timeout().is_none());
    }

    #[test]
    fn a_late_driver_gets_every_due_move_in_order() {
        let start = Instant::now();
        let mut m = MobilityModel::new(cfg(10.0, HandoverType::X2, 2), 2);
        m.add_ue(start, 0);
        m.add_ue(start, 1);
        // Woken only after 1 s: 20 moves are due, oldest first.
        let late = start + Duration::from_secs(1);
        let mut n = 0;
        let mut at = BTreeMap::new();
        while let Some(mv) = m.poll_move(late, |ue| at.get(&ue).copied().unwrap_or(0)) {
            at.insert(mv.ue, mv.to);
            n += 1;
        }
        assert_eq!(n, 20, "seed 2");
        assert!(m.poll_timeout().unwrap() > late);
    }

    #[test]
    fn types_parse_and_config_reads_from_json() {
        assert_eq!("X2".parse::<HandoverType>(), Ok(HandoverType::X2));
        assert_eq!("mixed".parse::<HandoverType>(), Ok(HandoverType::Mixed));
        assert!("x3".parse::<HandoverType>().is_err());
        let c: MobilityConfig = serde_json::from_str(
            r#"{"handover_rate": 0.5, "handover_type": "s1", "pairs": [{"a": 0, "b": 2, "handover": "x2"}]}"#,
        )
        .unwrap();
        assert_eq!(c.handover_rate, 0.5);
        assert_eq!(c.type_between(2, 0), HandoverType::X2);
        assert_eq!(c.type_between(0, 1), HandoverType::S1);
        assert!(MobilityConfig { handover_rate: -1.0, ..c }.validate().is_err());
    }
}
