//! Batched datagram I/O (the UPF's PFCP socket, the elastic MME front
//! end's S11 relay): every ready datagram is read with one `recvmmsg(2)`
//! and what goes out with one `sendmmsg(2)`, instead of one system call
//! per message.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Datagrams read or written per system call.
pub const BATCH: usize = 32;
/// The largest datagram read (PFCP's and GTPv2-C's length fields are 16
/// bits).
const MAX_DATAGRAM: usize = 65536;

/// Receive buffers for [`BATCH`] datagrams.
pub struct RecvBatch {
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: [usize; BATCH],
    count: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    pub fn new() -> Self {
        // Pages are only touched when a datagram is that large.
        RecvBatch {
            bufs: vec![0; BATCH * MAX_DATAGRAM],
            addrs: vec![unsafe { zeroed() }; BATCH],
            lens: [0; BATCH],
            count: 0,
        }
    }

    /// Reads the datagrams ready on `socket` (at most [`BATCH`]); `WouldBlock`
    /// when none is.
    pub fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        self.count = 0;
        let n = socket.try_io(Interest::READABLE, || {
            let mut iov: [libc::iovec; BATCH] = unsafe { zeroed() };
            let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
            for i in 0..BATCH {
                iov[i] =
                    libc::iovec { iov_base: self.bufs[i * MAX_DATAGRAM..].as_mut_ptr().cast(), iov_len: MAX_DATAGRAM };
                let h = &mut hdrs[i].msg_hdr;
                h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
                h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                h.msg_iov = &mut iov[i];
                h.msg_iovlen = 1;
            }
            // SAFETY: every header points at live buffers of the stated sizes.
            let r = unsafe {
                libc::recvmmsg(
                    socket.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    BATCH as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            for (i, h) in hdrs.iter().take(r as usize).enumerate() {
                self.lens[i] = h.msg_len as usize;
            }
            self.count = r as usize;
            // Fewer than asked for: the socket was drained. Answering
            // `WouldBlock` clears its readiness now (the reactor keeps any
            // newer), which spares the system call that would only have
            // found it empty, as tokio's own streams do on a short read.
            if self.count < BATCH {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(self.count)
        });
        match n {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && self.count > 0 => Ok(self.count),
            r => r,
        }
    }

    /// The datagrams of the last [`Self::recv`] with their senders (a
    /// sender of an unknown address family is skipped).
    pub fn iter(&self) -> impl Iterator<Item = (SocketAddr, &[u8])> {
        (0..self.count).filter_map(|i| {
            let from = from_sockaddr(&self.addrs[i])?;
            Some((from, &self.bufs[i * MAX_DATAGRAM..i * MAX_DATAGRAM + self.lens[i]]))
        })
    }
}

/// Sends `out` in batches of [`BATCH`]; waits while the socket is full.
/// Returns how many datagrams failed to be sent.
pub async fn send_all(socket: &UdpSocket, out: &[(SocketAddr, bytes::Bytes)]) -> usize {
    let mut failed = 0;
    let mut rest = out;
    while !rest.is_empty() {
        let chunk = &rest[..rest.len().min(BATCH)];
        match socket.try_io(Interest::WRITABLE, || send_batch(socket, chunk)) {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if socket.writable().await.is_err() {
                    return failed + rest.len();
                }
            }
            Err(_) => {
                // The first datagram of the chunk is refused: skip it.
                failed += 1;
                rest = &rest[1..];
            }
        }
    }
    failed
}

fn send_batch(socket: &UdpSocket, chunk: &[(SocketAddr, bytes::Bytes)]) -> io::Result<usize> {
    let mut addrs: [libc::sockaddr_storage; BATCH] = unsafe { zeroed() };
    let mut iov: [libc::iovec; BATCH] = unsafe { zeroed() };
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
    for (i, (to, b)) in chunk.iter().enumerate() {
        let len = to_sockaddr(to, &mut addrs[i]);
        iov[i] = libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() };
        let h = &mut hdrs[i].msg_hdr;
        h.msg_name = (&mut addrs[i] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = len;
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = 1;
    }
    // SAFETY: every header points at live buffers of the stated sizes; the
    // kernel only reads the payloads.
    let r = unsafe {
        libc::sendmmsg(socket.as_raw_fd(), hdrs.as_mut_ptr(), chunk.len() as libc::c_uint, libc::MSG_DONTWAIT)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

fn to_sockaddr(a: &SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match a {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            let s = unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = a.port().to_be();
            s.sin_addr = libc::in_addr { s_addr: u32::from(*a.ip()).to_be() };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above.
            let s = unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = a.port().to_be();
            s.sin6_flowinfo = a.flowinfo().to_be();
            s.sin6_addr = libc::in6_addr { s6_addr: a.ip().octets() };
            s.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

fn from_sockaddr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it is a sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                u32::from_be(a.sin6_flowinfo),
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for a in ["127.0.0.1:8805", "[::1]:8805", "[fe80::1%2]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            let mut s = unsafe { zeroed() };
            to_sockaddr(&a, &mut s);
            assert_eq!(from_sockaddr(&s), Some(a));
        }
    }

    #[tokio::test]
    async fn batch_send_and_receive_on_loopback() {
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = b.local_addr().unwrap();
        let out: Vec<_> = (0..40u8).map(|i| (to, bytes::Bytes::from(vec![i; 1 + i as usize]))).collect();
        assert_eq!(send_all(&a, &out).await, 0);
        let mut rx = RecvBatch::new();
        let mut got = Vec::new();
        while got.len() < out.len() {
            b.readable().await.unwrap();
            match rx.recv(&b) {
                Ok(_) => got.extend(rx.iter().map(|(from, d)| (from, d.to_vec()))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        let from = a.local_addr().unwrap();
        assert!(got.iter().all(|(f, _)| *f == from));
        assert_eq!(
            got.iter().map(|(_, d)| d.clone()).collect::<Vec<_>>(),
            out.iter().map(|(_, b)| b.to_vec()).collect::<Vec<_>>()
        );
    }

    /// Readable, within seconds: a lost wake-up fails the test instead of
    /// hanging it.
    async fn readable(b: &UdpSocket) {
        let r = tokio::time::timeout(std::time::Duration::from_secs(10), b.readable()).await;
        r.expect("no wake-up for a queued datagram").unwrap();
    }

    /// A short batch clears the socket's readiness: what comes after it
    /// must still make it readable (no wake-up lost), round after round.
    #[tokio::test]
    async fn after_a_short_batch_a_later_datagram_is_still_heard() {
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = b.local_addr().unwrap();
        let mut rx = RecvBatch::new();
        let mut got = Vec::new();
        for round in 0..3u8 {
            let out: Vec<_> = (0..3u8).map(|i| (to, bytes::Bytes::from(vec![round, i]))).collect();
            assert_eq!(send_all(&a, &out).await, 0);
            // Datagrams over loopback are queued by the time send returns.
            readable(&b).await;
            let n = rx.recv(&b).unwrap();
            assert!((1..=3).contains(&n), "round {round}: {n}");
            got.extend(rx.iter().map(|(_, d)| d.to_vec()));
            while got.len() < 3 * (usize::from(round) + 1) {
                readable(&b).await;
                if rx.recv(&b).is_ok() {
                    got.extend(rx.iter().map(|(_, d)| d.to_vec()));
                }
            }
            let err = rx.recv(&b).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "round {round}: drained");
        }
        let want: Vec<Vec<u8>> = (0..3u8).flat_map(|r| (0..3u8).map(move |i| vec![r, i])).collect();
        assert_eq!(got, want);
    }
}
