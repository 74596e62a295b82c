//! Diameter base protocol (RFC 6733) and S6a (TS 29.272) for mobicore.
//!
//! # Layout
//! - [`allowlist`]: [`allowlist::AllowedPeers`], the Diameter peers (Origin-Host,
//!   Origin-Realm, addresses) a responder admits.
//! - [`header`]: wire view [`header::Packet`] and [`header::HeaderRepr`] of
//!   the 20-octet header (version, length, R/P/E/T flags, command code,
//!   application id, hop-by-hop, end-to-end).
//! - [`avp`]: wire view [`avp::Avp`] and [`avp::AvpRepr`] (code, V/M/P
//!   flags, vendor id, data, padding; Grouped AVPs decoded on demand).
//! - [`message`]: a whole [`Message`], parse and emit; [`message::ParseError`]
//!   keeps what was read so the error answer can be built.
//! - [`dict`]: command codes, application ids, Result-Codes and AVP
//!   definitions with their types and flag rules (vendor 10415 for 3GPP
//!   AVPs): every AVP of TS 29.272 table 7.3.1 and the base and IETF AVPs
//!   S6a uses ([`dict::avp`]), and the grammars of ULR/ULA, AIR/AIA,
//!   CLR/CLA, PUR/PUA and the Grouped AVPs we read ([`dict::grammar`]).
//! - [`base`]: CER/CEA, DWR/DWA, DPR/DPA and the error answers of RFC 6733 7.
//! - [`framing`]: cutting a TCP stream into messages.
//! - [`peer`]: the sans-I/O peer state machine (capabilities exchange,
//!   watchdog of RFC 3539, disconnect, answers to bad input).
//! - [`s6a`]: mapping between `mobicore_common::s6a` and S6a messages.
//! - [`client`]: the S6a client task, [`connect_s6a`], used by the MME.
//! - [`transport`]: the tokio shell that drives a [`peer::Peer`] over TCP,
//!   shared by the client and the HSS server.
//!
//! Decoders never panic on any input; a bad message from a peer gets the
//! answer RFC 6733 gives and is counted.

pub mod allowlist;
pub mod avp;
pub mod base;
pub mod client;
pub mod dict;
pub mod error;
pub mod framing;
pub mod header;
pub mod message;
pub mod peer;
pub mod s6a;
pub mod transport;

pub use client::{connect_s6a, connect_s6a_link, S6aClientConfig};
pub use error::{DiameterError, WireError};
pub use message::Message;
