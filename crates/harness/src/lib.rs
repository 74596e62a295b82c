//! mobicore-harness: the whole EPC (eNBs with UEs, MME, HSS, S/P-GW-C,
//! UPF) wired together in memory through the sans-I/O cores of each
//! crate, under a virtual clock. No sockets, no tokio, no sleeps: every
//! run of a scenario is the same run.
//!
//! What travels: S1AP PDUs as bytes, S11 as real GTPv2-C bytes (the MME's
//! typed requests are encoded, numbered and retransmitted as the S11
//! client task does, with [`mobicore_gtp::transaction::Transactions`]),
//! PFCP as bytes, S6a as typed values (the HSS core has no Diameter
//! codec). Messages wait in one FIFO queue and are delivered one at a time.
//!
//! # Writing a scenario (tests/README)
//!
//! ```text
//! let mut net = Network::new(n_enbs, n_ues, NetworkConfig::default());
//! net.s1_setup_all();                 // every eNB Ready
//! net.attach(ue); net.drive();        // deliver until every queue is empty
//! assert!(net.attached(ue));          // the UE reported a successful attach
//! ```
//!
//! - Time moves only when you ask: [`Network::step`] jumps to the earliest
//!   deadline of any node and fires it, [`Network::advance`] fires every
//!   deadline up to `now + d`, [`Network::drive_bounded`] /
//!   [`Network::run_until`] step with a bound. The SGW-C's PFCP heartbeat
//!   means there is always a next deadline: bound your loops.
//! - Faults: [`Network::drop_next`], [`Network::corrupt_next`], or
//!   [`Network::fault`] with a [`Matcher`] (see [`inspect::downlink_nas`],
//!   [`inspect::gtp_type`], [`inspect::pfcp_type`]) and
//!   [`FaultAction::Hold`] + [`Network::release_held`] to reorder;
//!   [`Network::disconnect_enb`]; [`Network::inject`] any [`Msg`].
//! - Change a subscriber: `net.hss.store().update(&imsi, |s| ...)`; change
//!   a UE: [`Network::replace_ue`] with another USIM.
//! - Inspect: [`Network::ue`] (eNB context with erabs and the UE),
//!   [`Network::guti`], [`Network::ipv4`], [`Network::mme_stats`],
//!   [`Network::mme_counter`], [`Network::sgw_session`],
//!   [`Network::upf_rules`], [`Network::reports`] (every outcome and
//!   anomaly the eNBs reported), and every core through its public field.
//! - Assert on behaviour (state, outcomes, counters), never on wall time.
//! - The MME ([`Network::mme`], an [`MmeUnderTest`]) is the monolithic
//!   core, or the elastic MME decomposed (front end, router, hosts, store;
//!   [`mme`]) when `MOBICORE_HARNESS_MME=decomposed` or
//!   [`NetworkConfig::mme_mode`] says so: assert on what either shows
//!   (counters, stats, pagings) so that a scenario holds for both.
//!
//! Scenarios live in `tests/` (one file per theme).

pub mod edge;
pub mod fault;
pub mod inspect;
pub mod mme;
pub mod network;
pub mod userplane;

pub use fault::{FaultAction, Link, Matcher, Msg};
pub use mme::{Decomposition, MmeMode, MmeUnderTest};
pub use network::{Network, NetworkConfig, Report, MME_S11, SGW_PFCP, SGW_S11, UPF_PFCP, UPF_S1U};
