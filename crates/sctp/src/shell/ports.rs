//! Host-wide reservation of SCTP port numbers. Raw sockets have no kernel
//! port binding, so endpoints of different processes could pick the same
//! port; each endpoint therefore holds a bound (never listening) TCP socket on
//! the same IP and port number, and lets the kernel choose ephemeral ones.

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};

use crate::endpoint::PortAllocator;

/// Reserve `port` on `ip` (0: let the kernel pick); returns the socket and the port.
pub fn reserve(ip: IpAddr, port: u16) -> io::Result<(Socket, u16)> {
    let s = Socket::new(Domain::for_address(SocketAddr::new(ip, 0)), Type::STREAM, Some(Protocol::TCP))?;
    s.bind(&SockAddr::from(SocketAddr::new(ip, port)))?;
    let port = s.local_addr()?.as_socket().map_or(port, |a| a.port());
    Ok((s, port))
}

/// Extra ports for further associations to one peer, each reserved while used.
pub struct ReservedPorts {
    ip: IpAddr,
    held: HashMap<u16, Socket>,
}

impl ReservedPorts {
    pub fn new(ip: IpAddr) -> Self {
        ReservedPorts { ip, held: HashMap::new() }
    }
}

impl PortAllocator for ReservedPorts {
    fn allocate(&mut self) -> Option<u16> {
        let (s, port) = reserve(self.ip, 0).ok()?;
        self.held.insert(port, s);
        Some(port)
    }
    fn release(&mut self, port: u16) {
        self.held.remove(&port);
    }
}
