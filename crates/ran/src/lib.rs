//! mobicore-ran: emulated eNBs and UEs that run real S1AP and NAS with real
//! security against an MME, and the workload driver that measures them.
//!
//! # Layout
//! - [`config`]: [`RanConfig`], [`SubscriberPlan`], [`imsi_for`], [`usim_for`],
//!   [`tac_of`] (the TAC of each eNB).
//! - [`usim`]: the USIM (Milenage, SQN array of TS 33.102 Annex C).
//! - [`ue`]: the UE's EMM/ESM state machine, one module per procedure.
//! - [`enb`]: the eNB's S1AP state machine (S1 Setup, UE-associated
//!   signalling), owning its UEs.
//! - [`mobility`]: the I/O-free mobility model ([`MobilityModel`]): which
//!   UE hands over to which eNB when, by X2 or S1, seeded.
//! - [`report`]: latencies, percentiles and failure counters.
//! - [`shell`]: the tokio driver [`run`] over an SCTP endpoint
//!   ([`run_with`] hands the attached UEs' user-plane data to a future;
//!   [`Ran`] runs the phases one by one, with a user plane that follows).
//! - [`userplane`]: the eNB's S1-U user plane (TUN + GTP-U) and the
//!   traffic driver [`userplane::run_traffic`].

pub mod config;
pub mod enb;
pub mod mobility;
pub mod report;
pub mod shell;
pub mod ue;
pub mod userplane;
pub mod usim;

pub use config::{imsi_for, tac_of, usim_for, RanConfig, SubscriberPlan};
pub use enb::Reselection;
pub use mobility::{HandoverType, MobilityConfig, MobilityModel};
pub use report::{percentile, LatencySummary, MovingReport, Phase, PhaseReport, Progress, RanReport};
pub use shell::{enb_of, first_enb_ue_s1ap_id, run, run_with, AttachedUe, OutcomeRecord, Ran, RanError};
pub use usim::Usim;

#[cfg(test)]
mod tests;
