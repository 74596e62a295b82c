//! mobicore-upf: the PFCP node side of the user-plane function (TS 29.244).
//!
//! # Layout
//! - [`afxdp`]: AF_XDP copy-mode receive sockets (buffered downlink in XDP mode).
//! - [`config`]: [`UpfConfig`] with defaults (PFCP on 127.0.0.1:8805).
//! - [`pfcp`]: framing glue over rs-pfcp (header check, IE lists, encode).
//! - [`dataplane`]: the user-space data path and the slow path (GTP-U
//!   Echo, Error Indication, End Marker, buffering, usage reports).
//! - [`rules`]: PDR/FAR/QER/URR/BAR as plain values, the
//!   [`ForwardingPlane`] trait and the in-memory [`MemoryPlane`].
//! - [`urr`]: usage reporting: [`urr::UsageEngine`] reads the planes'
//!   cumulative URR counts and makes every usage report, for every data
//!   path.
//! - [`node`]: the sans-I/O PFCP node: associations, heartbeats (ours,
//!   with dead-peer detection, and the peer's), dispatch, duplicate
//!   detection.
//! - `session`: session establishment / modification / deletion handlers.
//! - `steering`: steering sessions (`[upf] role = "steering"`, issue 11):
//!   one diversion per PFCP session ([`mobicore_pfcp::steering`]), checked
//!   and installed in the XDP program `steer_xdp` (`bpf/steer.h`).
//! - [`dump`]: the full-state dump and restore ([`dump::UpfDump`]): every
//!   association and PFCP session (rules, usage measurement) copied to a
//!   fresh node (the stand-in for whole-process checkpointing, seed 000's
//!   "RAM replication").
//! - [`shell`]: the tokio task ([`run`], or [`Upf::bind`] then
//!   [`Upf::run`] to learn the bound address first; [`Upf::control`] to
//!   dump it running, [`Upf::restore`] to fill it before it runs).
//!
//! Counter names: `pfcp_malformed`, `pfcp_rejected`,
//! `pfcp_duplicate_request`, `pfcp_unsupported_message`,
//! `pfcp_sessions_established`, `pfcp_sessions_deleted`,
//! `pfcp_associations_set_up`, `pfcp_cp_function_restarted`,
//! `pfcp_sessions_restored` (from a full-state dump).
//!
//! Interop (issue 9): `pfcp_pdr_without_precedence` (a Create PDR got
//! `default_pdr_precedence`), `pfcp_unknown_ie_ignored` (IEs left out at
//! any level, TS 29.244 7.6); our heartbeats (6.2.2): `pfcp_heartbeat_sent`,
//! `pfcp_peer_dead` (N1 retransmissions unanswered), `pfcp_peer_alive_again`,
//! `pfcp_dead_peer_association_deleted` (after `peer_dead_grace_ms`),
//! `pfcp_heartbeat_recovery_changed` (with `restart_from_heartbeats` off);
//! `pfcp_session_report_timeout`.
//!
//! Refusals at the trust boundary (`[upf] cp_peers`, the bounds), each
//! named after what was refused: `pfcp_association_setup_from_unknown_peer`,
//! `pfcp_association_setup_from_other_address`,
//! `pfcp_association_setup_over_max_associations`,
//! `pfcp_association_update_from_unassociated_peer`,
//! `pfcp_association_release_from_unassociated_peer`,
//! `pfcp_heartbeat_from_unknown_peer`,
//! `pfcp_session_establishment_from_unassociated_peer`,
//! `pfcp_session_establishment_fseid_outside_association`,
//! `pfcp_session_establishment_over_max_sessions`,
//! `pfcp_session_modification_fseid_outside_association`,
//! `pfcp_session_request_from_unassociated_peer`,
//! `pfcp_session_request_for_other_association`; in the data path
//! `upf_frag_offset_out_of_range`.
//!
//! Steering role: `pfcp_steering_diversions_established`,
//! `pfcp_steering_diversions_modified`, refusals
//! `pfcp_steering_bad_diversion`, `pfcp_steering_overlapping_diversion`,
//! `pfcp_steering_over_max_diversions`, `pfcp_steering_refused_anchor_role`,
//! `pfcp_steering_unsupported_datapath`; in XDP `xdp_steer_uplink`,
//! `xdp_steer_downlink`, `xdp_steer_pass` (beside `xdp_nexthop_fib_hit`,
//! `xdp_nexthop_cache_hit` and `xdp_pass_no_route`, which tell whether a
//! packet left in XDP or through the kernel).
//!
//! MEC router role (`mec`, issue 12): `pfcp_mec_sessions_established`,
//! `pfcp_mec_sessions_modified`, refusals `pfcp_mec_bad_session`,
//! `pfcp_mec_overlapping_rule`,
//! `pfcp_mec_over_max_sessions`, `pfcp_mec_refused_role`,
//! `pfcp_mec_unsupported_datapath`, `pfcp_mec_refused_by_datapath`; in XDP
//! `xdp_mec_decapsulated`, `xdp_mec_retunnelled`, `xdp_mec_encapsulated`,
//! `xdp_mec_drop`, `xdp_mec_pass`, `xdp_mec_duplicated`, `xdp_mec_no_copy`,
//! `xdp_mec_no_slice`, `xdp_mec_no_ue_tunnel`.

pub mod afxdp;
pub mod config;
pub mod dataplane;
pub mod dump;
mod mec;
pub mod neighbours;
pub mod node;
pub mod pfcp;
pub mod rules;
mod session;
pub mod shell;
mod steering;
pub mod urr;
pub mod xdp;

pub use config::{DatapathKind, UpfConfig, UpfRole};
pub use node::{Association, Session, UpfCore};
pub use rules::{ForwardingPlane, MemoryPlane, SessionRules};
pub use shell::{run, Upf, UpfControl, UpfError};

#[cfg(test)]
mod tests;
