//! The open-loop load of Figs. 10 and 11 on real processes (seed 004 7.3:
//! "we use all traffic patterns (T1 - T4)"; issue 13 item 7): the load
//! model's arrivals ([`LoadGen`]: a pattern, a skew over the UEs, a
//! procedure mix) played by the emulated RAN, so that the report gives
//! SLO violations per class.
//!
//! The RAN takes the arrivals in rounds of [`SLOT_S`]: a round's UEs (a
//! UE at most once; its later arrivals wait for the next round) spread
//! over the slot, so the rate of each round follows the pattern. A round
//! that ends late makes the next one take every arrival due by then;
//! arrivals still waiting after twice the run's time are not run.
//!
//! The UEs are registered and idle between rounds. An arrival runs in up
//! to three stages, each stage of a round's arrivals together
//! ([`Ran::mix_of`](mobicore_ran::Ran::mix_of)): a service request is one
//! from idle and a release; a handover, a service request, an S1
//! handover and a release; a TAU, one from idle (the MME releases the
//! UE after it); an attach or a detach, a detach and an attach again
//! (the UEs stay registered) and a release.

use super::balance::hot_order;
use super::real::Rig;
use super::timeline::{self, Outcome};
use super::MmeArgs;
use anyhow::{bail, Result};
use mobicore_elastic::load::{LoadConfig, LoadGen, Mix};
use mobicore_elastic::{ProcedureKind, Profiles};
use mobicore_ran::{OutcomeRecord, Phase};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// A round of the RAN's load, seconds.
pub const SLOT_S: f64 = 0.05;

/// What an arrival of `kind` runs, by stage (see the module's text).
fn stages(kind: ProcedureKind) -> [Option<Phase>; 3] {
    use ProcedureKind as K;
    match kind {
        K::ServiceRequest => [Some(Phase::ServiceRequest), None, Some(Phase::Release)],
        K::Handover => [Some(Phase::ServiceRequest), Some(Phase::S1Handover), Some(Phase::Release)],
        K::Tau => [Some(Phase::Tau), None, None],
        K::Attach | K::Detach => [Some(Phase::Detach), Some(Phase::Attach), Some(Phase::Release)],
    }
}

/// The RAN's procedures an arrival of `kind` runs.
fn procedures(kind: ProcedureKind) -> usize {
    stages(kind).iter().flatten().count()
}

/// Procedures per arrival under `mix`, on average.
pub fn procedures_per_arrival(mix: &Mix) -> f64 {
    let total: f64 = mix.0.iter().sum();
    ProcedureKind::ALL.iter().map(|&k| mix.0[k.index()] * procedures(k) as f64).sum::<f64>()
        / total.max(f64::MIN_POSITIVE)
}

/// A run's arrivals in time order: (seconds from the start, RAN UE, kind).
pub struct Arrivals {
    pending: VecDeque<(f64, u64, ProcedureKind)>,
}

impl Arrivals {
    /// `cfg`'s arrivals at `cfg.rate` procedures/s of the RAN's (so
    /// arrivals at that over [`procedures_per_arrival`]); the load model's
    /// UE i is the RAN's `hot_order(ues, seed)[i]`, as Fig. 10's hot UEs.
    pub fn new(cfg: LoadConfig) -> Arrivals {
        let order = hot_order(u64::from(cfg.ues), cfg.seed);
        let cfg = LoadConfig { rate: cfg.rate / procedures_per_arrival(&cfg.mix), ..cfg };
        Arrivals { pending: LoadGen::new(cfg).map(|a| (a.at_ns as f64 / 1e9, order[a.ue as usize], a.kind)).collect() }
    }

    /// The arrivals before `t_s`, a UE at most once (its later ones stay).
    pub fn due(&mut self, t_s: f64) -> Vec<(u64, ProcedureKind)> {
        let (mut taken, mut seen, mut kept) = (Vec::new(), HashSet::new(), Vec::new());
        while let Some(&(at, ue, kind)) = self.pending.front() {
            if at >= t_s {
                break;
            }
            self.pending.pop_front();
            if seen.insert(ue) {
                taken.push((ue, kind));
            } else {
                kept.push((at, ue, kind));
            }
        }
        for k in kept.into_iter().rev() {
            self.pending.push_front(k);
        }
        taken
    }

    /// The procedures of the arrivals left.
    pub fn procedures_left(&self) -> usize {
        self.pending.iter().map(|&(_, _, k)| procedures(k)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// One round: the stages of `arrivals`, spread over the slot, their
/// outcomes added to `log`. The procedures of the arrivals that could not
/// start (the UE was not in the state their first stage needs: left
/// connected by a failure, say); they run no other stage.
async fn round(rig: &mut Rig, arrivals: &[(u64, ProcedureKind)], log: &mut Vec<OutcomeRecord>) -> Result<usize> {
    let total: usize = arrivals.iter().map(|&(_, k)| procedures(k)).sum();
    if total == 0 {
        return Ok(0);
    }
    rig.ran.set_rate(Some(total as f64 / SLOT_S))?;
    let mut running: Vec<(u64, ProcedureKind)> = arrivals.to_vec();
    let mut not_started = 0;
    for stage in 0..3 {
        let steps: Vec<(Phase, u64)> =
            running.iter().filter_map(|&(ue, k)| stages(k)[stage].map(|p| (p, ue))).collect();
        if !steps.is_empty() {
            rig.ran.mix_of(&steps).await?;
        }
        let ended = rig.ran.take_outcomes();
        if stage == 0 {
            let started: HashSet<u64> = ended.iter().map(|o| o.ue).collect();
            not_started += running.iter().filter(|a| !started.contains(&a.0)).map(|a| procedures(a.1)).sum::<usize>();
            running.retain(|a| started.contains(&a.0));
        }
        log.extend(ended);
    }
    if arrivals.iter().any(|&(_, k)| k == ProcedureKind::Tau) {
        // The MME releases a UE after its TAU: idle again for the next round.
        rig.ran.settle_idle().await?;
        log.extend(rig.ran.take_outcomes());
    }
    Ok(not_started)
}

/// A run of `arrivals` on `rig` for at most twice `seconds`: the outcomes,
/// and the procedures not run (not started by a round, or never due in
/// time).
pub async fn play(rig: &mut Rig, arrivals: &mut Arrivals, seconds: f64) -> Result<(Vec<OutcomeRecord>, usize)> {
    rig.ran.log_outcomes();
    rig.ran.take_outcomes();
    let t0 = Instant::now();
    let (mut slot, mut not_run, mut log) = (0u64, 0usize, Vec::new());
    while !arrivals.is_empty() && t0.elapsed().as_secs_f64() < 2.0 * seconds {
        let start = t0 + Duration::from_secs_f64(slot as f64 * SLOT_S);
        tokio::time::sleep_until(start.into()).await;
        let due = arrivals.due((slot + 1) as f64 * SLOT_S);
        not_run += round(rig, &due, &mut log).await?;
        slot = (slot + 1).max((t0.elapsed().as_secs_f64() / SLOT_S) as u64);
    }
    Ok((log, not_run + arrivals.procedures_left()))
}

/// Each procedure's SLO: `--slo-ms` for all, else its class's in the
/// simulator's profiles (a release: a service request's).
#[derive(Clone, Debug)]
pub struct Slos {
    pub all_ms: Option<f64>,
    pub profiles: Profiles,
}

/// The SLOs of a real run by `--slo-ms`.
pub fn slos_of(a: &MmeArgs) -> Result<Slos> {
    if a.slo_ms.is_some_and(|s| s.is_nan() || s <= 0.0) {
        bail!("--slo-ms must be positive");
    }
    Ok(Slos { all_ms: a.slo_ms, profiles: a.profiles() })
}

/// Each kind in `mix` and its share of it.
fn shares(mix: &Mix) -> impl Iterator<Item = (ProcedureKind, f64)> + '_ {
    let total: f64 = mix.0.iter().sum();
    ProcedureKind::ALL.into_iter().filter(|k| mix.0[k.index()] > 0.0).map(move |k| (k, mix.0[k.index()] / total))
}

/// "service_request 60%, tau 40%".
pub fn describe_mix(mix: &Mix) -> String {
    shares(mix).map(|(k, s)| format!("{} {:.0}%", k.name(), 100.0 * s)).collect::<Vec<_>>().join(", ")
}

/// The mix as JSON: each kind's share.
pub fn mix_json(mix: &Mix) -> Value {
    shares(mix).map(|(k, s)| (k.name().to_string(), json!(s))).collect::<serde_json::Map<_, _>>().into()
}

impl Slos {
    pub fn describe(&self) -> String {
        match self.all_ms {
            Some(ms) => format!("{ms} ms each"),
            None => {
                let per: Vec<String> = ProcedureKind::ALL
                    .iter()
                    .map(|&k| format!("{} {} ms", k.name(), 1e3 * self.profiles.get(k).slo_s))
                    .collect();
                format!("by class: {}; a release a service request's", per.join(", "))
            }
        }
    }

    /// The SLO of a RAN procedure by its name, ms.
    pub fn of(&self, procedure: &str) -> f64 {
        self.all_ms.unwrap_or_else(|| {
            let kind = match procedure {
                "attach" => ProcedureKind::Attach,
                "detach" => ProcedureKind::Detach,
                "tau" | "periodic_tau" => ProcedureKind::Tau,
                "s1_handover" | "x2_handover" => ProcedureKind::Handover,
                _ => ProcedureKind::ServiceRequest,
            };
            1e3 * self.profiles.get(kind).slo_s
        })
    }
}

/// A set of procedures against their SLOs.
pub struct Slo {
    pub procedures: usize,
    pub failed: usize,
    /// Failed or over the SLO, and not run, percent of all.
    pub viol: f64,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

impl Slo {
    /// `log` with `not_run` procedures more, each a violation.
    pub fn of<'a>(log: impl IntoIterator<Item = &'a OutcomeRecord>, slos: &Slos, not_run: usize) -> Slo {
        let (mut failed, mut over, mut outcomes) = (0, 0, Vec::new());
        for o in log {
            let ms = o.latency.as_secs_f64() * 1e3;
            failed += usize::from(!o.ok);
            over += usize::from(!o.ok || ms > slos.of(o.procedure));
            outcomes.push(Outcome { start_ms: 0.0, latency_ms: ms, ok: o.ok });
        }
        let (p50, p99) = timeline::p50_p99(&outcomes);
        let all = outcomes.len() + not_run;
        let viol = if all == 0 { 0.0 } else { 100.0 * (over + not_run) as f64 / all as f64 };
        Slo { procedures: outcomes.len(), failed, viol, p50, p99 }
    }

    /// Per RAN procedure (attach, detach, service_request, release, tau,
    /// s1_handover), those it ran.
    pub fn per_class(log: &[OutcomeRecord], slos: &Slos) -> BTreeMap<&'static str, Slo> {
        let mut names: Vec<&'static str> = log.iter().map(|o| o.procedure).collect();
        names.sort_unstable();
        names.dedup();
        names.into_iter().map(|n| (n, Slo::of(log.iter().filter(|o| o.procedure == n), slos, 0))).collect()
    }

    pub fn json(&self, slo_ms: f64) -> Value {
        json!({
            "procedures": self.procedures,
            "slo_ms": slo_ms,
            "slo_violation_pct": self.viol,
            "latency_ms_p50": self.p50,
            "latency_ms_p99": self.p99,
            "failed_procedures": self.failed,
        })
    }
}

/// The per-class columns of a table row: "service_request 1.2 release 0.0".
pub fn classes_cell(classes: &BTreeMap<&'static str, Slo>) -> String {
    classes.iter().map(|(n, s)| format!("{n} {:.1}", s.viol)).collect::<Vec<_>>().join(", ")
}

/// The JSON of [`Slo::per_class`].
pub fn classes_json(classes: &BTreeMap<&'static str, Slo>, slos: &Slos) -> Value {
    classes.iter().map(|(n, s)| (n.to_string(), s.json(slos.of(n)))).collect::<serde_json::Map<_, _>>().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mobicore_elastic::load::{Pattern, Skew};

    fn cfg(mix: Mix) -> LoadConfig {
        LoadConfig {
            ues: 100,
            rate: 400.0,
            duration_s: 5.0,
            pattern: Pattern::pareto(1.0),
            skew: Skew { hot_fraction: 0.2, hot_share: 0.8 },
            mix,
            seed: 7,
        }
    }

    fn service_requests() -> Mix {
        let mut m = Mix([0.0; ProcedureKind::COUNT]);
        m.0[ProcedureKind::ServiceRequest.index()] = 1.0;
        m
    }

    #[test]
    fn arrivals_follow_the_load_model_and_take_a_ue_once_per_round() {
        let mut b = Arrivals::new(cfg(service_requests()));
        // 400 procedures/s, each arrival two (a service request and a
        // release): about 200 arrivals/s over 5 s.
        let n = b.pending.len();
        assert!((500..1500).contains(&n), "{n}");
        assert_eq!(b.procedures_left(), 2 * n);
        let (mut rounds, mut taken) = (Vec::new(), 0);
        for slot in 1..=200 {
            let r = b.due(slot as f64 * SLOT_S);
            assert_eq!(r.iter().map(|x| x.0).collect::<HashSet<_>>().len(), r.len(), "a UE once per round");
            assert!(r.iter().all(|&(u, k)| u < 100 && k == ProcedureKind::ServiceRequest));
            taken += r.len();
            rounds.push(r.len());
        }
        // What was left is a UE's later arrivals.
        assert_eq!(taken + b.pending.len(), n);
        // Bursty: some rounds far above the mean, some empty.
        let mean = taken as f64 / rounds.len() as f64;
        assert!(rounds.iter().any(|&r| r as f64 > 3.0 * mean) && rounds.contains(&0), "{rounds:?}");
        let again = Arrivals::new(cfg(service_requests())).due(1.0);
        assert_eq!(again, Arrivals::new(cfg(service_requests())).due(1.0), "seeded");
    }

    #[test]
    fn a_mix_brings_every_kind_at_the_procedure_rate() {
        let mix = Mix::default();
        // 0.05*3 + 0.5*2 + 0.2*1 + 0.2*3 + 0.05*3
        assert!((procedures_per_arrival(&mix) - 2.1).abs() < 1e-9);
        let b = Arrivals::new(cfg(mix));
        let mut kinds = [0usize; ProcedureKind::COUNT];
        for &(_, _, k) in &b.pending {
            kinds[k.index()] += 1;
        }
        assert!(kinds.iter().all(|&k| k > 0), "{kinds:?}");
        // About 400 procedures/s over 5 s (Pareto bursts: loosely).
        let p = b.procedures_left();
        assert!((1000..3000).contains(&p), "{p}");
        // Service requests about half the arrivals.
        let share = kinds[ProcedureKind::ServiceRequest.index()] as f64 / b.pending.len() as f64;
        assert!((share - 0.5).abs() < 0.1, "{share}");
    }

    #[test]
    fn slos_per_class_from_the_profiles_unless_one_for_all() {
        let slos = Slos { all_ms: None, profiles: Profiles::default() };
        assert_eq!(slos.of("service_request"), 10.0);
        assert_eq!(slos.of("release"), 10.0);
        assert_eq!(slos.of("attach"), 40.0);
        assert_eq!(slos.of("s1_handover"), 20.0);
        let one = Slos { all_ms: Some(5.0), ..slos.clone() };
        assert_eq!(one.of("attach"), 5.0);
        let rec = |procedure, ms, ok| OutcomeRecord {
            ue: 0,
            procedure,
            started: Instant::now(),
            latency: Duration::from_millis(ms),
            ok,
        };
        let log = [rec("attach", 30, true), rec("service_request", 30, true), rec("release", 1, false)];
        let s = Slo::of(&log, &slos, 1);
        // The service request over its SLO, the release failed, one not run.
        assert_eq!((s.procedures, s.failed), (3, 1));
        assert!((s.viol - 75.0).abs() < 1e-9, "{}", s.viol);
        let c = Slo::per_class(&log, &slos);
        assert_eq!(c.keys().copied().collect::<Vec<_>>(), ["attach", "release", "service_request"]);
        assert_eq!((c["attach"].viol, c["service_request"].viol), (0.0, 100.0));
        assert_eq!(classes_cell(&c), "attach 0.0, release 100.0, service_request 100.0");
    }
}
