//! mobicore-gtp: GTPv2-C (TS 29.274) for S11.
//!
//! # Layout
//! - [`wire`]: zero-copy header view and IE `Repr`s (TS 29.274 5, 8).
//! - [`message`]: message `Repr`s for Echo, Version Not Supported
//!   Indication, Create Session, Modify Bearer, Delete Session and Release
//!   Access Bearers (TS 29.274 7.1, 7.2, 7.9.1); the answer owed to another
//!   GTP version, and Invalid Length for IEs running past the message.
//! - [`s11`]: mapping to and from the typed values of
//!   [`mobicore_common::s11`].
//! - [`transaction`]: the sans-I/O transaction layer (T3/N3 retransmission,
//!   duplicate request detection; TS 29.274 7.6), reusable for PFCP.
//! - [`gtpu`]: GTP-U (TS 29.281) wire view and message `Repr`s.
//! - [`client`]: the S11 client task used by the MME shell.

pub mod client;
pub mod gtpu;
pub mod message;
pub mod s11;
pub mod transaction;
pub mod udp;
pub mod wire;

pub use client::{s11_client, s11_client_bound, s11_client_link, S11Client, S11ClientConfig};
pub use message::{GtpMessage, Message, MessageError};
pub use transaction::{Incoming, StatNames, TransactionConfig, TransactionStats, Transactions, PFCP_STATS, S11_STATS};

/// Errors of the GTP-C client and server tasks.
#[derive(Debug, thiserror::Error)]
pub enum GtpError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
}
