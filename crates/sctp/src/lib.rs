//! mobicore-sctp: the S1-MME transport without kernel SCTP.
//!
//! A sans-I/O SCTP endpoint (RFC 9260) driven by a thin tokio task over raw
//! IP protocol 132, RFC 6951 UDP encapsulation, or kernel SCTP where present.
//! Users see it only through [`mobicore_common::sctp_api::SctpHandle`].
//!
//! # Use
//!
//! ```no_run
//! # async fn demo() -> Result<(), mobicore_sctp::SctpError> {
//! use mobicore_common::sctp_api::{SctpCommand, SctpEvent, PPID_S1AP, S1AP_PORT};
//! use mobicore_sctp::{bind, EndpointConfig, Transport};
//! // The MME side: accept associations on 127.0.0.1:36412.
//! let mut mme = bind(EndpointConfig::new(([127, 0, 0, 1], S1AP_PORT).into(), Transport::auto())).await?;
//! // An eNB side: port 0 picks a free port; one endpoint may open many associations.
//! let enb = bind(EndpointConfig::new(([127, 0, 0, 1], 0).into(), Transport::auto())).await?;
//! let (reply, up) = tokio::sync::oneshot::channel();
//! enb.commands.send(SctpCommand::Connect { remote: mme.local, reply }).await.unwrap();
//! let assoc = up.await.unwrap().expect("association up");
//! enb.commands.send(SctpCommand::Send { assoc, stream: 0, ppid: PPID_S1AP, data: "S1 Setup".into() }).await.unwrap();
//! while let Some(ev) = mme.events.recv().await {
//!     if let SctpEvent::Data { data, .. } = ev { assert_eq!(&data[..], b"S1 Setup"); break; }
//! }
//! # Ok(()) }
//! ```
//!
//! Several endpoints may share a host and a process: each raw socket filters
//! its own ports in the kernel (BPF), the endpoint demultiplexes by port, peer
//! and verification tag, and each SCTP port number is reserved host-wide with
//! a bound TCP socket of the same number. A second association from one
//! endpoint to the same peer uses an extra local port (SCTP allows one
//! association per pair of ports).
//!
//! # Layout
//! - [`wire`]: wire views and `Repr`s of the common header, chunks, parameters.
//! - [`cookie`]: the authenticated State Cookie.
//! - `assoc`: one association's state machine (`tx`: sending, `rx`: receiving).
//! - [`endpoint`]: demultiplexing, INIT/COOKIE handling, out-of-the-blue packets.
//! - [`config`]: [`EndpointConfig`] and [`Transport`].
//! - `shell`: the tokio task, the raw / UDP sockets (recvmmsg/sendmmsg), port reservation; [`bind`].
//! - [`bench`]: a loopback throughput measurement.

pub mod assoc;
pub mod bench;
pub mod config;
pub mod cookie;
pub mod endpoint;
mod shell;
pub mod wire;

pub use assoc::{ReceiveQueue, SendError, State};
pub use bench::{bench, BenchResult};
pub use config::{EndpointConfig, Transport, UDP_ENCAPS_PORT};
pub use endpoint::{ConnectError, Endpoint, Held, PortAllocator, Stats};
pub use shell::{bind, bind_with_info, Bound, SctpError};
