//! Endpoint configuration with the defaults of RFC 9260 15 where it gives one.

use mobicore_common::counters::Counters;
use std::net::SocketAddr;
use std::time::Duration;

/// The default UDP port of SCTP over UDP (RFC 6951 5).
pub const UDP_ENCAPS_PORT: u16 = 9899;

/// How SCTP packets reach the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// User-space SCTP over raw IP protocol 132 (wire-compatible with kernel SCTP peers; needs root).
    RawIp,
    /// User-space SCTP over UDP (RFC 6951); `port` is the local UDP port (0: ephemeral).
    Udp { port: u16 },
    /// The kernel's SCTP, where the kernel has it.
    Kernel,
}

impl Default for Transport {
    fn default() -> Self {
        Transport::Udp { port: UDP_ENCAPS_PORT }
    }
}

impl Transport {
    /// `RawIp` when the kernel has no SCTP (probed once per process). Where it
    /// has, raw sockets would fight the kernel's stack (it answers our packets
    /// with ABORT) and the kernel transport is not implemented yet, so UDP
    /// encapsulation on port 9899 is chosen.
    pub fn auto() -> Transport {
        if crate::shell::kernel::available() {
            Transport::Udp { port: UDP_ENCAPS_PORT }
        } else {
            Transport::RawIp
        }
    }
}

/// Configuration of one endpoint (one local IP and SCTP port).
#[derive(Clone)]
pub struct EndpointConfig {
    /// Local IP and SCTP port; port 0 picks an ephemeral port (49152-65535).
    pub local: SocketAddr,
    pub transport: Transport,
    /// HB.interval (RFC 9260 8.3).
    pub heartbeat_interval: Duration,
    pub rto_initial: Duration,
    pub rto_min: Duration,
    pub rto_max: Duration,
    /// Path.Max.Retrans: consecutive timeouts before the association goes Down.
    pub path_max_retrans: u32,
    /// Max.Init.Retransmits for INIT and COOKIE ECHO.
    pub max_init_retrans: u32,
    /// Outbound streams we ask for.
    pub outbound_streams: u16,
    /// Inbound streams we accept at most.
    pub max_inbound_streams: u16,
    /// Largest SCTP packet (common header + chunks), bytes.
    pub mtu: usize,
    /// Delayed SACK timeout (RFC 9260 6.2: at most 500 ms; low for signalling latency).
    pub sack_delay: Duration,
    /// Receive buffer advertised to peers (a_rwnd), bytes (at least 1500, RFC 9260 6.2).
    /// It bounds what a peer can make an association hold: fragments waiting for
    /// reassembly plus messages waiting for an earlier SSN never exceed it, and a
    /// TSN further above the cumulative TSN than this many is dropped (RFC 9260
    /// 6.2, 6.9). It is therefore also the largest message that can be received.
    pub receive_window: u32,
    /// Most associations the endpoint holds. An INIT, or a COOKIE ECHO, that
    /// would open one more is answered with ABORT "Out of Resource" (RFC 9260
    /// 5.1, 3.3.10.4); existing associations, a peer's restart and associations
    /// we open ourselves are not refused (the latter still count).
    pub max_associations: usize,
    /// Most packets that answer peers without an association (INIT ACKs,
    /// ABORTs to out-of-the-blue packets, stale cookie ERRORs) waiting to be
    /// sent; a reply beyond it is not sent (the shell sends them after every
    /// receive batch, so only a flood between two batches reaches it).
    pub max_queued_replies: usize,
    /// Valid.Cookie.Life.
    pub cookie_lifetime: Duration,
    /// Remote UDP port for `Transport::Udp` peers we connect to before hearing from them.
    pub udp_remote_port: u16,
    /// Dropped or rejected input is counted here (names `sctp_*`).
    pub counters: Counters,
}

impl EndpointConfig {
    pub fn new(local: SocketAddr, transport: Transport) -> Self {
        EndpointConfig {
            local,
            transport,
            heartbeat_interval: Duration::from_secs(30),
            rto_initial: Duration::from_secs(1),
            rto_min: Duration::from_secs(1),
            rto_max: Duration::from_secs(60),
            path_max_retrans: 5,
            max_init_retrans: 8,
            outbound_streams: 16,
            max_inbound_streams: 16,
            mtu: 1400,
            sack_delay: Duration::from_millis(10),
            receive_window: 4 << 20,
            max_associations: 1024,
            max_queued_replies: 1024,
            cookie_lifetime: Duration::from_secs(60),
            udp_remote_port: UDP_ENCAPS_PORT,
            counters: Counters::new(),
        }
    }
}

impl std::fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("local", &self.local)
            .field("transport", &self.transport)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("rto_initial", &self.rto_initial)
            .field("rto_min", &self.rto_min)
            .field("rto_max", &self.rto_max)
            .field("path_max_retrans", &self.path_max_retrans)
            .field("outbound_streams", &self.outbound_streams)
            .field("max_inbound_streams", &self.max_inbound_streams)
            .field("mtu", &self.mtu)
            .field("receive_window", &self.receive_window)
            .field("max_associations", &self.max_associations)
            .finish_non_exhaustive()
    }
}
