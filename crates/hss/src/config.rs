//! HSS configuration with defaults (one `[hss]` TOML section).

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
        }
    }
}

impl HssConfig {
    pub fn watchdog_interval(&self) -> Duration {
        Duration::from_secs(self.watchdog_interval_secs.max(1))
    }
    pub fn flush_interval(&self) -> Duration {
        Duration::from_millis(self.flush_interval_ms.max(10))
    }
}
