//! mobicore-netns: the network namespaces, veth links and TUN devices of the
//! user-plane demo and tests, and helpers to open sockets and run commands
//! inside a namespace.
//!
//! # Layout
//! - [`topology`]: [`Topology`], the `ran` / `core` / `dn` namespaces with
//!   the S1-U and SGi veth links, removed on drop; [`cleanup_stale`].
//! - [`exec`]: [`run_in`] / [`spawn_in`] (a thread that enters a namespace,
//!   so sockets it opens live there) and [`exec_in`] (a command).
//! - [`tun`]: [`Tun`], a layer-3 TUN device (no packet information).
//! - [`link`]: [`set_gro`] through the ethtool ioctl; [`link_stat`], a link's counter; [`udp_rcvbuf_errors`].
//!
//! Everything here needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN):
//! [`require_root`] says so clearly.

pub mod exec;
pub mod link;
pub mod sock;
pub mod topology;
pub mod tun;

pub use exec::{exec_in, ip, ip_batch, run_in, spawn_in};
pub use link::{link_drops, link_mac, link_stat, set_gro, set_tx_checksum, udp_rcvbuf_errors};
pub use topology::{cleanup_stale, unique_tag, Addressing, Site, Topology};
pub use tun::Tun;

/// Why a namespace operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN); run as root")]
    NotRoot,
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command { cmd: String, status: String, stderr: String },
    #[error("network namespace {ns}: {source}")]
    Enter { ns: String, source: std::io::Error },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the thread inside namespace {0} panicked")]
    Panicked(String),
}

/// Fail with [`NetnsError::NotRoot`] unless the effective user is root.
pub fn require_root() -> Result<(), NetnsError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        Ok(())
    } else {
        Err(NetnsError::NotRoot)
    }
}
