//! mobicore-spgwc: a combined SGW-C + PGW-C (TS 23.401, TS 29.274 S11,
//! TS 29.244 Sxa/Sxb). An ordinary 3GPP S/P-GW: its processing depends
//! only on the messages it receives, its configuration and the times it is
//! given, so recorded S11 traffic replays into a fresh instance.
//!
//! # Layout
//! - [`config`]: [`SpgwcConfig`] (APNs with IPv4 / IPv6 pools, DNS and
//!   MTU for PCO; UPFs, timers).
//! - [`context`]: sessions keyed by our S11 TEID (with the MME that owns
//!   each), IPv4 pools (static addresses too) and IPv6 /64 pools, UPF state.
//! - [`pco`]: the PCO / ePCO answer (DNS servers, IPv4 link MTU).
//! - [`core`]: the sans-I/O [`SpgwcCore`] (`handle_s11`, `handle_pfcp`,
//!   `handle_timeout`, `poll_transmit`, `poll_timeout`).
//! - [`s11_handler`]: Create Session (PDN type granted per TS 29.274 8.4,
//!   several PDN connections per UE), Modify Bearer (End Markers on the
//!   old path when the eNB changes), Release Access Bearers, Create /
//!   Delete Indirect Data Forwarding Tunnel, Delete Session.
//! - [`paging`]: the S-GW's part of the network-triggered service request
//!   (Downlink Data Report -> Downlink Data Notification, its Acknowledge,
//!   DDN Failure Indication; counters `ddn_sent`, `ddn_acknowledged`,
//!   `ddn_temporarily_rejected`, `ddn_rejected`, `ddn_timeout`, `ddn_held`,
//!   `ddn_failure_indication`, `downlink_buffer_discarded`).
//! - [`sxa_build`] / `sxa_handler`: PFCP requests and answers.
//! - [`dump`]: the full-state dump and restore ([`SpgwcDump`]): every
//!   session context copied to a fresh instance (the stand-in for
//!   whole-process checkpointing, seed 000's "RAM replication").
//! - [`shell`]: the tokio task. Either `run(cfg, shutdown)`, or
//!   `bind(cfg)` (port 0 allowed) to learn `s11_addr` / `pfcp_addr`, then
//!   `.run(shutdown)`; `.control()` (freeze, dump, thaw) and `.restore()`
//!   for the full-state dump.
//!
//! Counter names: `gtp_malformed`, `s11_rejected`, `s11_rejected_ie`,
//! `s11_duplicate_request`, `pfcp_malformed`, `pfcp_timeout`,
//! `pfcp_unmatched_response`, `sessions_created`, `sessions_deleted`,
//! `sessions_replaced`, `sessions_restored` (from a full-state dump). Refusals at the trust boundary (issue 8):
//! `s11_request_from_unknown_peer` (not in `mme_peers`, dropped),
//! `s11_request_from_non_owner` (Context Not Found),
//! `s11_request_for_unknown_context`, `s11_request_queue_full` (No
//! resources available; `s11_queued_high_water` is the deepest queue
//! seen), `s11_create_session_unknown_apn`,
//! `s11_create_session_pdn_type_unsupported`, `s11_create_session_no_upf`,
//! `s11_create_session_pool_exhausted`, `s11_create_session_teids_exhausted`,
//! `pfcp_session_establishment_rejected`, `pfcp_from_unknown_peer` (not a
//! configured UPF, dropped), `pfcp_report_from_non_owner`,
//! `pfcp_report_unknown_session`, `pfcp_duplicate_request`,
//! `s11_duplicate_cache_evicted`, `pfcp_duplicate_cache_evicted`, and of the
//! transaction layers (`mobicore_gtp::S11_STATS`, `PFCP_STATS`):
//! `{s11,pfcp}_retransmissions`, `_mismatched_response` (a response under
//! an outstanding number that does not answer its request) and
//! `_reused_sequence_number` (a peer's new request under a number still
//! cached, taken as new).

pub mod config;
pub mod context;
pub mod core;
pub mod dump;
pub mod paging;
pub mod pco;
pub mod s11_handler;
pub mod shell;
pub mod sxa_build;
mod sxa_handler;

pub use config::{ApnConfig, SpgwcConfig, UpfPeerConfig};
pub use core::{Interface, SpgwcCore, Transmit};
pub use dump::SpgwcDump;
pub use shell::{bind, run, ControlError, Spgwc, SpgwcControl, SpgwcError};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_dump;
#[cfg(test)]
mod tests_interop;
#[cfg(test)]
mod tests_trust;
