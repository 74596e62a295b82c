//! Identifiers and the procedure classes the balancers reason about.

use std::fmt;

/// An MME host (a process running a forwarder and services).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostId(pub u32);

/// A slice: one hashing ring each. Slice 0 serves the first messages of
/// attach, before the UE's slice is known (seed 004 Algorithm 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SliceId(pub u16);

impl SliceId {
    pub const ATTACH: SliceId = SliceId(0);
}

/// The M-TMSI of the UE's GUTI (TS 23.003 2.8), the key of every ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MTmsi(pub u32);

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host{}", self.0)
    }
}

/// The procedures the services implement, one service type each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProcedureKind {
    Attach,
    ServiceRequest,
    Tau,
    Handover,
    Detach,
}

impl ProcedureKind {
    pub const ALL: [ProcedureKind; 5] = [Self::Attach, Self::ServiceRequest, Self::Tau, Self::Handover, Self::Detach];
    pub const COUNT: usize = 5;

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Attach => "attach",
            Self::ServiceRequest => "service_request",
            Self::Tau => "tau",
            Self::Handover => "handover",
            Self::Detach => "detach",
        }
    }
}

/// What a procedure costs and may take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcedureClass {
    pub kind: ProcedureKind,
    /// Messages from the RAN the MME handles in one procedure (`p_t`).
    pub messages: u32,
    /// Seconds of one full core the whole procedure takes in isolation
    /// (`T_t` of Eq. 1, "obtained via profiling").
    pub cost_s: f64,
    /// Completion time the procedure must meet (`T_SLO`).
    pub slo_s: f64,
}

impl ProcedureClass {
    /// Core seconds of one message.
    pub fn message_cost_s(&self) -> f64 {
        self.cost_s / f64::from(self.messages.max(1))
    }
}

/// One class per procedure kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Profiles(pub [ProcedureClass; ProcedureKind::COUNT]);

impl Profiles {
    pub fn get(&self, kind: ProcedureKind) -> &ProcedureClass {
        &self.0[kind.index()]
    }

    pub fn get_mut(&mut self, kind: ProcedureKind) -> &mut ProcedureClass {
        &mut self.0[kind.index()]
    }

    /// The tightest SLO (`SLO_min` of seed 004 5.3).
    pub fn slo_min_s(&self) -> f64 {
        self.0.iter().map(|c| c.slo_s).fold(f64::INFINITY, f64::min)
    }

    /// These profiles with every class's SLO times `factor`.
    pub fn with_slos_scaled(mut self, factor: f64) -> Profiles {
        for c in &mut self.0 {
            c.slo_s *= factor;
        }
        self
    }
}

impl Default for Profiles {
    /// Relative costs as in seed 004 Fig. 9 (a service request well under
    /// a handover), scaled to a millisecond; SLOs 13 to 50 times the cost
    /// (6 to 14 times a procedure's completion time alone: its messages'
    /// costs and the round trips between them, `SimConfig::rtt_s`).
    /// [`Profiles::with_slos_scaled`] tightens them: by 0.25 they sit
    /// 1.4 to 3.6 times the completion time alone, as seed 004's do
    /// (Fig. 9: a service request under 10 ms alone; SLOs of 1-10 ms).
    fn default() -> Self {
        let c = |kind, messages, cost_ms: f64, slo_ms: f64| ProcedureClass {
            kind,
            messages,
            cost_s: cost_ms / 1e3,
            slo_s: slo_ms / 1e3,
        };
        Profiles([
            c(ProcedureKind::Attach, 4, 2.0, 40.0),
            c(ProcedureKind::ServiceRequest, 2, 0.5, 10.0),
            c(ProcedureKind::Tau, 2, 0.6, 20.0),
            c(ProcedureKind::Handover, 3, 1.5, 20.0),
            c(ProcedureKind::Detach, 2, 0.4, 20.0),
        ])
    }
}
