//! The emulated eNB's user plane: real IPv4 traffic of attached UEs carried
//! over S1-U in GTP-U (TS 29.281), and a driver that measures it.
//!
//! In the RAN's network namespace a TUN device (`ue0`) holds one /32 per
//! attached UE; a policy rule sends traffic from the UE pool into it. The
//! [`UserPlane`] task reads those packets, encapsulates them on the UE's
//! uplink tunnel (S-GW F-TEID) from the eNB's S1-U address, and writes the
//! inner packets of downlink G-PDUs (matched by the eNB's TEID) back into
//! the TUN. Ordinary sockets bound to a UE address inside the namespace
//! therefore act as the UE (`ping -I <ue-ip>`, UDP, TCP).
//!
//! - [`tunnels`]: the I/O-free tunnel table ([`Tunnels`], [`UeTunnel`]).
//! - [`shell`]: [`UserPlane`], the tokio task over the TUN and UDP socket.
//! - [`follow`]: [`Follower`], the tables kept in step with the eNBs'
//!   contexts through idle mode, paging and handovers (shell and harness).
//! - [`continuity`]: [`continuity::Streams`], numbered UDP and TCP flows
//!   checked for loss, duplication and reordering while they are moved.
//! - [`numbered`]: [`numbered::Numbered`], numbered downlink from the
//!   data network to every UE whatever its state, and uplink bursts, with
//!   arrival times (idle mode, paging and handover tests and benches).
//! - [`goodput`]: TCP goodput windows of UEs (downlink streams from the
//!   data network), for mobility benches.
//! - [`traffic`]: [`run_traffic`], ICMP echo, UDP echo and TCP bulk
//!   transfers between UE addresses and servers it starts in the data
//!   network namespace.

pub mod continuity;
pub mod follow;
pub mod goodput;
pub mod icmp;
pub mod numbered;
pub mod shell;
pub mod traffic;
pub mod tunnels;

#[cfg(test)]
mod reflector;
#[cfg(test)]
mod tests;

pub use follow::{Follower, TunnelOp};
pub use shell::{UserPlane, UserPlaneConfig, UserPlaneError, UserPlaneLink};
pub use traffic::{run_traffic, EchoReport, TcpReport, TrafficConfig, TrafficReport};
pub use tunnels::{
    Downlink, DropReason, Event, HandoverError, HoldConfig, Transmit, Tunnels, UeTunnel, Uplink, UserPlaneStats,
};
