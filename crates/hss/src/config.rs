//! HSS configuration with defaults (one `[hss]` TOML section).

use mobicore_common::peers::PeerFilter;
use mobicore_diameter::allowlist::{AllowedPeer, AllowedPeers};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HssConfig {
    /// S6a listening address (default 127.0.0.1:3868).
    pub listen: SocketAddr,
    /// Our Origin-Host.
    pub origin_host: String,
    /// Our Origin-Realm.
    pub origin_realm: String,
    /// Tw of the watchdog (RFC 3539), in seconds.
    pub watchdog_interval_secs: u64,
    /// How often dirty subscriber state (SQN) is written, in milliseconds.
    pub flush_interval_ms: u64,
    /// Answer DIAMETER_REALM_NOT_SERVED to requests for another realm
    /// (off by default: any Destination-Realm is served).
    pub strict_realm: bool,
    /// The Diameter peers S6a serves: Origin-Host (absent: any host of the
    /// realm), Origin-Realm, and the addresses each may connect from. A
    /// connection from another address is closed before anything is read;
    /// a CER from another identity gets DIAMETER_UNKNOWN_PEER (RFC 6733
    /// 5.3) and the connection is closed. Default: the MME of `mobicore
    /// demo` (mme.mobicore.local, realm mobicore.local) on loopback.
    pub peers: AllowedPeers,
    /// Most S6a connections open at once (default 64: a few MMEs with room
    /// to reconnect). One more is closed at once and counted.
    pub max_connections: usize,
    /// Seconds a new connection may take to send its CER before it is
    /// closed (default 10): how long a silent connection holds one of
    /// `max_connections`.
    pub cer_timeout_secs: u64,
    /// Largest Diameter message taken from a peer, in octets (default
    /// 65536: an S6a request is well under 1 KiB). A message announcing more
    /// gets DIAMETER_INVALID_MESSAGE_LENGTH and the connection is closed;
    /// it is also the most a connection buffers of what it reads.
    pub max_message_octets: usize,
    /// Most answer octets waiting for a peer that does not read them
    /// (default 65536); beyond it no more of its requests are read until it
    /// does. Requests are answered one at a time, in order, so a connection
    /// holds at most this plus `max_message_octets`.
    pub max_unsent_answer_octets: usize,
}

/// The default `peers`: the MME that `mobicore demo` starts, on loopback.
pub fn default_peers() -> AllowedPeers {
    AllowedPeers(vec![AllowedPeer {
        origin_host: Some("mme.mobicore.local".to_string()),
        origin_realm: "mobicore.local".to_string(),
        addrs: PeerFilter::loopback(),
    }])
}

impl Default for HssConfig {
    fn default() -> Self {
        HssConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 3868)),
            origin_host: "hss.mobicore.local".to_string(),
            origin_realm: "mobicore.local".to_string(),
            watchdog_interval_secs: 30,
            flush_interval_ms: 1000,
            strict_realm: false,
            peers: default_peers(),
            max_connections: 64,
            cer_timeout_secs: 10,
            max_message_octets: 65536,
            max_unsent_answer_octets: 65536,
        }
    }
}

impl HssConfig {
    pub fn watchdog_interval(&self) -> Duration {
        Duration::from_secs(self.watchdog_interval_secs.max(1))
    }
    pub fn cer_timeout(&self) -> Duration {
        Duration::from_secs(self.cer_timeout_secs.max(1))
    }
    pub fn flush_interval(&self) -> Duration {
        Duration::from_millis(self.flush_interval_ms.max(10))
    }
}
