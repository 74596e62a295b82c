//! Types every mobicore network function shares.
//!
//! # Layout
//! - [`ids`]: identifiers named as in the specifications (IMSI, PLMN, TAI,
//!   GUTI, TEID, F-TEID, S1AP UE IDs, EBI).
//! - [`s6a`]: the S6a requests and answers the MME and HSS exchange, as typed
//!   values independent of the Diameter encoding (TS 29.272).
//! - [`s11`]: the S11 requests and responses the MME and S/P-GW-C exchange,
//!   independent of the GTPv2-C encoding (TS 29.274).
//! - [`requester`]: the channel-shaped client handle a protocol client task
//!   offers to a network function shell (request in, answer out).
//! - [`sctp_api`]: the channel interface of an SCTP endpoint task (S1-MME).
//! - [`counters`]: named counters of dropped or rejected input.
//! - [`inet`]: the Internet checksum (RFC 1071), shared by every crate
//!   that builds or checks packets.
//! - [`peers`]: [`peers::PeerFilter`], which peers may use an interface.
//! - [`alloc`]: [`alloc::IdDraw`], identifiers drawn at random, never one in use.
//! - [`state_dump`]: the framing of a network function's full-state dump
//!   (header, checksum, JSON body) and times relative to the dump.
//! - [`mmsg`]: batched UDP I/O (`recvmmsg`/`sendmmsg`) over a tokio
//!   socket: the UPF's PFCP socket, the elastic MME front end's S11 relay.
//! - [`tools`]: external tools (tshark) for tests and captures: a check
//!   that needs one fails as root when it cannot run, skips otherwise.

pub mod alloc;
pub mod counters;
pub mod ids;
pub mod inet;
pub mod mmsg;
pub mod peers;
pub mod requester;
pub mod s11;
pub mod s6a;
pub mod sctp_api;
pub mod state_dump;
pub mod tools;

pub use ids::*;
