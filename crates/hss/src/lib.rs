//! The HSS network function: S6a over Diameter (TS 29.272), Milenage
//! vectors and SQN management (TS 33.102 Annex C, TS 33.401), and the
//! embedded persistent subscriber store.
//!
//! # Layout
//! - [`config`]: [`HssConfig`] with defaults (127.0.0.1:3868).
//! - [`subscriber`]: the [`Subscriber`] record and its JSON form.
//! - [`store`]: [`SubscriberStore`], in memory with periodic atomic flush to
//!   `$MOBICORE_DATA_DIR/subscribers.json` (default `/var/lib/mobicore`).
//! - [`import`]: the CSV import format.
//! - [`auth`]: E-UTRAN vectors, KASME, SQN (SEQ || IND) and resync.
//! - [`hss`]: [`Hss`], the sans-I/O core: `handle(S6aRequest) -> S6aAnswer`.
//! - [`s6a_handler`]: Diameter S6a messages to the core and back.
//! - [`connection`]: [`connection::Connection`], one S6a connection without
//!   I/O: the Diameter peer with the allowlist, and the bounds on what it
//!   reads and what waits to be written.
//! - [`shell`]: [`run`] and [`bind`], the TCP server (several peers,
//!   CER/CEA, DWR/DWA, DPR/DPA, AIR/ULR/PUR; address allowlist and
//!   connection limit).

pub mod auth;
pub mod config;
pub mod connection;
pub mod hss;
pub mod import;
pub mod s6a_handler;
pub mod shell;
pub mod store;
pub mod subscriber;

pub use config::HssConfig;
pub use hss::Hss;
pub use shell::{bind, run, HssError};
pub use store::{StoreError, SubscriberStore, SubscriberTemplate};
pub use subscriber::{ApnProfile, Subscriber};
