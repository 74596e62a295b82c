//! The S1-MME transport as NF shells see it: an SCTP endpoint task (in
//! `mobicore-sctp`) owns the sockets and associations and talks to its user
//! through two channels. The MME and the emulated eNBs depend only on this.

use bytes::Bytes;
use std::net::SocketAddr;
use tokio::sync::{mpsc, oneshot};

/// S1AP payload protocol identifier (TS 36.412 7).
pub const PPID_S1AP: u32 = 18;
/// The SCTP port of S1-MME (TS 36.412 7).
pub const S1AP_PORT: u16 = 36412;

/// An association of an endpoint; unique within that endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssocId(pub u64);

#[derive(Debug)]
pub enum SctpEvent {
    /// An association came up (accepted, or one we connected).
    Up { assoc: AssocId, peer: SocketAddr, inbound_streams: u16, outbound_streams: u16 },
    /// A user message arrived on a stream.
    Data { assoc: AssocId, stream: u16, ppid: u32, data: Bytes },
    /// The association is gone (ABORT, SHUTDOWN, or heartbeats/retransmissions exhausted).
    Down { assoc: AssocId, reason: String },
}

#[derive(Debug)]
pub enum SctpCommand {
    Send {
        assoc: AssocId,
        stream: u16,
        ppid: u32,
        data: Bytes,
    },
    /// Open an association to `remote`; the reply comes once it is up.
    Connect {
        remote: SocketAddr,
        reply: oneshot::Sender<Result<AssocId, String>>,
    },
    /// Graceful SHUTDOWN.
    Shutdown {
        assoc: AssocId,
    },
    /// ABORT.
    Abort {
        assoc: AssocId,
    },
}

/// What an endpoint task hands back to its user.
pub struct SctpHandle {
    pub commands: mpsc::Sender<SctpCommand>,
    pub events: mpsc::Receiver<SctpEvent>,
    /// The address the endpoint is bound to (port resolved).
    pub local: SocketAddr,
}
