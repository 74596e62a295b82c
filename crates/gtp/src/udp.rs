//! UDP sockets for signalling: large kernel buffers so that bursts of
//! thousands of requests are queued rather than dropped.

use std::net::SocketAddr;
use tokio::net::UdpSocket;

/// Kernel socket buffer we ask for (capped by net.core.rmem_max/wmem_max).
pub const SOCKET_BUFFER: usize = 4 << 20;

/// Binds a non-blocking UDP socket with [`SOCKET_BUFFER`]-sized buffers.
pub fn bind_udp(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: a smaller buffer still works, only burstiness suffers.
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    UdpSocket::from_std(s.into())
}
