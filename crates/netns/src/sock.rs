//! Sockets bound to a given source address, for traffic from a UE address.

use std::io;
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

/// A TCP connection from `local` (e.g. a UE address; port 0 for any) to
/// `remote`, in the calling thread's namespace.
pub fn tcp_connect_from(local: SocketAddrV4, remote: SocketAddrV4, timeout: Duration) -> io::Result<TcpStream> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    s.bind(&SocketAddr::V4(local).into())?;
    s.connect_timeout(&SocketAddr::V4(remote).into(), timeout)?;
    Ok(s.into())
}

/// A raw ICMPv4 socket bound to `local` (datagrams received carry their
/// IPv4 header), in the calling thread's namespace. Needs CAP_NET_RAW.
pub fn icmp_raw(local: std::net::Ipv4Addr) -> io::Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(local, 0)).into())?;
    Ok(s)
}

/// A UDP socket bound to `local` with receive and send buffers of
/// `buffer` octets (capped by `net.core.{r,w}mem_max` unless root, where
/// the FORCE variants are used), in the calling thread's namespace.
pub fn udp_bind(local: SocketAddrV4, buffer: usize) -> io::Result<std::net::UdpSocket> {
    use std::os::fd::AsRawFd;
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        let v = buffer as libc::c_int;
        // SAFETY: setsockopt with a c_int option value of the right size.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &v as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            s.set_recv_buffer_size(buffer)?;
            s.set_send_buffer_size(buffer)?;
        }
    }
    s.bind(&SocketAddr::V4(local).into())?;
    Ok(s.into())
}

/// Caps the rate the kernel sends this socket's segments at
/// (SO_MAX_PACING_RATE, octets per second; TCP paces internally).
pub fn set_max_pacing_rate(s: &impl std::os::fd::AsRawFd, bytes_per_s: u32) -> io::Result<()> {
    // SAFETY: setsockopt with a u32 option value of the right size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            &bytes_per_s as *const u32 as *const libc::c_void,
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
