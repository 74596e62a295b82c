//! mobicore-sctp: the S1-MME transport without kernel SCTP.
//!
//! A sans-I/O SCTP endpoint (RFC 9260) driven by a thin tokio task over raw
//! IP protocol 132, RFC 6951 UDP encapsulation, or kernel SCTP where present.
//! Users see it only through [`mobicore_common::sctp_api::SctpHandle`].
//!
//! # Layout
//! - [`wire`]: wire views and `Repr`s of the common header, chunks, parameters.
//! - [`cookie`]: the authenticated State Cookie.
//! - `assoc`: one association's state machine (`tx`: sending, `rx`: receiving).
//! - [`endpoint`]: demultiplexing, INIT/COOKIE handling, out-of-the-blue packets.
//! - [`config`]: [`EndpointConfig`] and [`Transport`].
//! - `shell`: the tokio task and the raw / UDP / kernel sockets; [`bind`].
//! - [`bench`]: a loopback throughput measurement.

pub mod assoc;
pub mod bench;
pub mod config;
pub mod cookie;
pub mod endpoint;
mod shell;
pub mod wire;

pub use assoc::{SendError, State};
pub use bench::{bench, BenchResult};
pub use config::{EndpointConfig, Transport, UDP_ENCAPS_PORT};
pub use endpoint::{ConnectError, Endpoint, Stats};
pub use shell::{bind, bind_with_info, Bound, SctpError};
