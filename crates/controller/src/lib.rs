//! mobicore-controller: moves a UE, or one of its flows, to an anchor at
//! the edge while its sessions keep running (seed 000), without any change
//! to the MME or the S/P-GW.
//!
//! # Layout
//! - [`context`]: what the controller knows (recorded sessions, the naive
//!   log, anchors, replicas), all serializable for the store.
//! - [`relay`]: the S11 relay, sans-I/O: forwards GTP-C between the MME
//!   and the original S/P-GW-C unchanged and records it.
//! - [`replication`]: replay of recorded GTP-C into a replica S/P-GW-C
//!   (naive and selective), and mirroring of later requests.
//! - [`core`]: [`ControllerCore`], relocations (replicate, divert, move
//!   back, edge to edge).
//! - [`association`]: the controller's side of a PFCP association with a
//!   user-plane node (setup, heartbeats, retransmission, restarts), shared
//!   by the steering and MEC clients.
//! - [`steering`]: the PFCP CP side towards the steering switch
//!   ([`SteeringClient`], sans-I/O): association, heartbeats, one PFCP
//!   session per diverted PDN connection, rollback, edge to edge.
//! - [`mec`]: MEC traffic rules (ETSI GS MEC 011 TrafficRule) per virtual
//!   MEC router: validation, bounds, overlaps resolved by priority.
//! - [`config`]: `[controller]` ([`ControllerConfig`]).
//! - [`api`]: the REST API (axum), its OpenAPI document (utoipa).
//! - [`shell`]: the tokio task: sockets, timers, REST, write-behind
//!   persistence in the store (embedded by default, Redis as the option).
//!
//! Counter names: `relay_from_mme`, `relay_from_sgw`,
//! `relay_from_unknown_peer`, `relay_malformed`, `relay_retransmission`,
//! `relay_pending_full`, `relay_records_full`, `relay_log_full`,
//! `relay_unanswered`, `relay_answer_type_mismatch`,
//! `relay_answer_unreadable`, `relay_sessions_recorded`,
//! `relay_sessions_forgotten`, `relay_peer_restarted`; `replica_mirrored`,
//! `replica_mirror_failed`, `replica_malformed`, `replica_unsolicited`,
//! `replication_done`, `replication_failed`, `replication_skipped`;
//! `relocations_started`, `relocations_deferred` (the replay waited for
//! an answer of the original S/P-GW), `relocations_reestablished`,
//! `relocations_active`, `relocations_failed`,
//! `relocations_reverted`, `relocations_ended_by_detach`,
//! `undivert_failed`, `redivert_failed`; the steering client's are listed
//! in [`steering`].

pub mod api;
pub mod association;
pub mod config;
pub mod context;
pub mod core;
pub mod mec;
pub mod relay;
pub mod replication;
pub mod shell;
pub mod site;
pub mod steering;

pub use crate::core::{ControllerCore, CoreError, CoreEvent, FlowSpec, Relocation, RelocationState, Timing};
pub use config::ControllerConfig;
pub use context::{Anchor, Mode, ReplicaSession, SessionRecord};
pub use shell::{bind, Controller, ControllerError};
pub use site::SiteConfig;
pub use steering::{SteeringClient, SteeringClientConfig, SteeringEvent};
