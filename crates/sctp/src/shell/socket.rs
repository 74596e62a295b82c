//! The packet sockets under the endpoint task: raw IPv4 protocol 132, or UDP
//! (RFC 6951), both non-blocking and batched with recvmmsg/sendmmsg.

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use tokio::io::unix::AsyncFd;

use super::SctpError;

/// IANA protocol number of SCTP.
pub const IPPROTO_SCTP: i32 = 132;
/// Packets per recvmmsg/sendmmsg call.
pub const BATCH: usize = 32;
const RECV_BUF: usize = 16 * 1024;

pub enum Kind {
    /// The kernel hands us the IPv4 header too; we send bare SCTP packets.
    Raw,
    /// `peer_ports`: the UDP port each peer (IP + SCTP port) was last heard from (RFC 6951 5.4).
    Udp { peer_ports: HashMap<SocketAddr, u16>, default_remote: u16 },
}

pub struct PacketSocket {
    pub fd: AsyncFd<Socket>,
    pub io: Batcher,
}

/// Receive buffers and the per-transport addressing, apart from the fd so that
/// the task can use them while it holds a readiness guard on the fd.
pub struct Batcher {
    kind: Kind,
    bufs: Vec<Vec<u8>>,
}

fn enlarge_buffers(s: &Socket) {
    // Best effort: *FORCE works for root beyond the sysctl limits.
    let size: libc::c_int = 8 << 20;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        // SAFETY: setsockopt with a valid fd and a pointer to a c_int of the given length.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &size as *const libc::c_int as *const libc::c_void,
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            let _ = if opt == libc::SO_RCVBUFFORCE {
                s.set_recv_buffer_size(8 << 20)
            } else {
                s.set_send_buffer_size(8 << 20)
            };
        }
    }
}

fn v4(local: SocketAddr, what: &'static str) -> Result<Ipv4Addr, SctpError> {
    match local.ip() {
        IpAddr::V4(a) => Ok(a),
        IpAddr::V6(_) => Err(SctpError::Unsupported(what)),
    }
}

impl PacketSocket {
    /// A raw IPv4 socket for protocol 132 that only lets through packets to `port`.
    pub fn raw(local: SocketAddr, port: u16) -> Result<PacketSocket, SctpError> {
        let ip = v4(local, "raw IPv6")?;
        let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(IPPROTO_SCTP))).map_err(|e| {
            if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
                SctpError::NeedRoot
            } else {
                SctpError::Io(e)
            }
        })?;
        s.set_nonblocking(true)?;
        enlarge_buffers(&s);
        if !ip.is_unspecified() {
            s.bind(&SockAddr::from(SocketAddrV4::new(ip, 0)))
                .map_err(|e| SctpError::Bind { addr: local, source: e })?;
        }
        attach_port_filter(&s, &[port])?;
        Ok(PacketSocket { fd: register(s)?, io: Batcher { kind: Kind::Raw, bufs: vec![vec![0; RECV_BUF]; BATCH] } })
    }

    /// A UDP socket on `local.ip()` and `udp_port` (0: ephemeral) for RFC 6951.
    pub fn udp(local: SocketAddr, udp_port: u16, default_remote: u16) -> Result<PacketSocket, SctpError> {
        let ip = v4(local, "UDP over IPv6")?;
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_nonblocking(true)?;
        enlarge_buffers(&s);
        let addr = SocketAddr::V4(SocketAddrV4::new(ip, udp_port));
        s.bind(&SockAddr::from(addr)).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                SctpError::PortInUse { port: udp_port }
            } else {
                SctpError::Bind { addr, source: e }
            }
        })?;
        Ok(PacketSocket {
            fd: register(s)?,
            io: Batcher {
                kind: Kind::Udp { peer_ports: HashMap::new(), default_remote },
                bufs: vec![vec![0; RECV_BUF]; BATCH],
            },
        })
    }

    /// Deliver only packets to these SCTP ports (raw sockets; UDP needs nothing).
    pub fn set_ports(&self, ports: &[u16]) -> io::Result<()> {
        match self.io.kind {
            Kind::Raw => attach_port_filter(self.fd.get_ref(), ports),
            Kind::Udp { .. } => Ok(()),
        }
    }

    pub fn local_udp_port(&self) -> Option<u16> {
        match self.io.kind {
            Kind::Udp { .. } => self.fd.get_ref().local_addr().ok()?.as_socket().map(|a| a.port()),
            Kind::Raw => None,
        }
    }
}

impl Batcher {
    /// Receive one batch without blocking; calls `f(source IP, SCTP packet)` for each.
    /// Returns the number of datagrams, or `WouldBlock`.
    pub fn recv_batch(&mut self, fd: RawFd, mut f: impl FnMut(IpAddr, &[u8])) -> io::Result<usize> {
        let mut lens = [0usize; BATCH];
        let mut addrs: [libc::sockaddr_in; BATCH] = unsafe { zeroed() };
        let n = recvmmsg(fd, &mut self.bufs, &mut addrs, &mut lens)?;
        for i in 0..n {
            let src_ip = Ipv4Addr::from(u32::from_be(addrs[i].sin_addr.s_addr));
            let src_port = u16::from_be(addrs[i].sin_port);
            let data = &self.bufs[i][..lens[i]];
            match &mut self.kind {
                Kind::Raw => {
                    let Some(&b0) = data.first() else { continue };
                    let ihl = ((b0 & 0x0f) as usize) * 4;
                    if b0 >> 4 != 4 || ihl < 20 || data.len() < ihl {
                        continue;
                    }
                    f(IpAddr::V4(src_ip), &data[ihl..]);
                }
                Kind::Udp { peer_ports, .. } => {
                    if data.len() >= 2 {
                        let peer = SocketAddr::new(IpAddr::V4(src_ip), u16::from_be_bytes([data[0], data[1]]));
                        if peer_ports.get(&peer) != Some(&src_port) {
                            peer_ports.insert(peer, src_port);
                        }
                    }
                    f(IpAddr::V4(src_ip), data);
                }
            }
        }
        Ok(n)
    }

    /// Send packets (destination IP + SCTP port) without blocking. Returns how
    /// many went out, or `WouldBlock` if none did.
    pub fn send_batch(&self, fd: RawFd, pkts: &[(SocketAddr, Vec<u8>)]) -> io::Result<usize> {
        let mut addrs: [libc::sockaddr_in; BATCH] = unsafe { zeroed() };
        let n = pkts.len().min(BATCH);
        for (i, (dst, _)) in pkts[..n].iter().enumerate() {
            let ip = match dst.ip() {
                IpAddr::V4(a) => a,
                IpAddr::V6(a) => a.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
            };
            let port = match &self.kind {
                Kind::Raw => 0,
                Kind::Udp { peer_ports, default_remote } => *peer_ports.get(dst).unwrap_or(default_remote),
            };
            addrs[i].sin_family = libc::AF_INET as libc::sa_family_t;
            addrs[i].sin_port = port.to_be();
            addrs[i].sin_addr.s_addr = u32::from(ip).to_be();
        }
        sendmmsg(fd, &pkts[..n], &addrs[..n])
    }
}

/// Every raw 132 socket sees every SCTP packet of the host: let the kernel
/// drop the ones for other ports (classic BPF over the IPv4 and SCTP headers).
/// Above 250 ports everything is accepted and the endpoint demultiplexes.
fn attach_port_filter(s: &Socket, ports: &[u16]) -> io::Result<()> {
    let n = ports.len();
    if n > 250 {
        return s.attach_filter(&[bpf(0x06, 0, 0, 0x0004_0000)]);
    }
    let mut prog = vec![
        bpf(0xb1, 0, 0, 0), // ldxb 4*([0]&0xf): IP header length
        bpf(0x48, 0, 0, 2), // ldh [x+2]: SCTP destination port
    ];
    for (i, &p) in ports.iter().enumerate() {
        prog.push(bpf(0x15, (n - i) as u8, 0, p as u32)); // jeq #port -> accept
    }
    prog.push(bpf(0x06, 0, 0, 0)); // ret #0: drop
    prog.push(bpf(0x06, 0, 0, 0x0004_0000)); // ret #262144: accept
    s.attach_filter(&prog)
}

const fn bpf(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

fn recvmmsg(
    fd: RawFd,
    bufs: &mut [Vec<u8>],
    addrs: &mut [libc::sockaddr_in; BATCH],
    lens: &mut [usize; BATCH],
) -> io::Result<usize> {
    let n = bufs.len().min(BATCH);
    let mut iovs: [libc::iovec; BATCH] = unsafe { zeroed() };
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
    for i in 0..n {
        iovs[i] = libc::iovec { iov_base: bufs[i].as_mut_ptr() as *mut libc::c_void, iov_len: bufs[i].len() };
        hdrs[i].msg_hdr.msg_name = &mut addrs[i] as *mut libc::sockaddr_in as *mut libc::c_void;
        hdrs[i].msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every header points at live buffers of the stated lengths for the duration of the call.
    let r =
        unsafe { libc::recvmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let r = r as usize;
    for i in 0..r {
        // A truncated datagram is cut to the buffer; the SCTP checksum then rejects it.
        lens[i] = (hdrs[i].msg_len as usize).min(bufs[i].len());
    }
    Ok(r)
}

fn sendmmsg(fd: RawFd, pkts: &[(SocketAddr, Vec<u8>)], addrs: &[libc::sockaddr_in]) -> io::Result<usize> {
    let n = pkts.len();
    let mut iovs: [libc::iovec; BATCH] = unsafe { zeroed() };
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
    for i in 0..n {
        iovs[i] = libc::iovec { iov_base: pkts[i].1.as_ptr() as *mut libc::c_void, iov_len: pkts[i].1.len() };
        hdrs[i].msg_hdr.msg_name = &addrs[i] as *const libc::sockaddr_in as *mut libc::c_void;
        hdrs[i].msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every header points at live buffers of the stated lengths for the duration of the call.
    let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

fn register(s: Socket) -> io::Result<AsyncFd<Socket>> {
    // SAFETY: the AsyncFd owns the socket, so the fd stays open and is not
    // registered elsewhere while it lives.
    unsafe { AsyncFd::register(s) }.map_err(io::Error::from)
}
