//! AF_XDP copy-mode receive sockets, written directly on the kernel API
//! (linux/if_xdp.h, Documentation/networking/af_xdp.rst) with `libc`.
//!
//! Role in the UPF: the XDP fast path redirects the downlink packets of a
//! buffering session (FAR BUFF/NOCP, TS 29.244 5.2.1) into an `XSKMAP`
//! (`xsks` in `bpf/far.h`, key = receive queue); the slow path reads them
//! here and hands each frame's IPv4 packet to
//! [`crate::dataplane::UserPlane::downlink`], which holds it under the
//! per-session and total budgets. With no socket registered the program
//! falls back to XDP_PASS (kernel route into the TUN device), so this is an
//! optimisation, never a requirement. `mobicore bench slowpath` measures
//! both receive paths side by side.
//!
//! One [`XskSocket`] = one UMEM of `frames` chunks of 2048 or 4096 octets,
//! a fill ring and an RX ring of `frames` entries each (plus the completion
//! ring the kernel requires for binding), bound with `XDP_COPY` to one
//! (interface, queue). A frame goes fill ring -> kernel -> RX ring -> the
//! [`XskSocket::recv`] callback -> back onto the fill ring in the same
//! call, so the fill ring never overflows and the memory is fixed at bind
//! time (`frames * chunk`; [`DEFAULT_FRAMES`] and [`FRAME_SIZE`]: 8 MiB per
//! queue). Copy mode because zero-copy is refused on
//! veth and needs driver support; copy mode works on any device, with XDP
//! in native or generic mode.
//!
//! Dropping the socket closes it (the kernel removes it from any XSKMAP)
//! and unmaps the rings and the UMEM.

mod ring;
#[cfg(test)]
mod tests_netns;

use ring::{Ring, RingKind};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// Octets of one UMEM chunk by default. The kernel puts
/// XDP_PACKET_HEADROOM (256) in front of the copied frame, so frames up to
/// 1792 octets fit (an Ethernet frame of a 1500-octet MTU and then some);
/// [`XskSocket::bind_with_chunk`] takes 4096 for larger MTUs, and
/// [`open_for_plane`] picks by the interface's MTU. A frame that does not
/// fit is dropped by the kernel and counted in [`XskStats::rx_dropped`].
pub const FRAME_SIZE: u32 = 2048;

/// Octets the kernel keeps in front of a frame in its chunk (linux/bpf.h
/// XDP_PACKET_HEADROOM).
const XDP_PACKET_HEADROOM: u32 = 256;

/// Frames per socket by default: 8 MiB of UMEM with 2048-octet chunks.
/// Measured (`mobicore bench slowpath`): the kernel hands frames over in
/// bursts of thousands when the receiving thread is descheduled for a few
/// milliseconds, and 2048 frames then overflowed while 16384 did not.
pub const DEFAULT_FRAMES: u32 = 4096;

/// Why an AF_XDP socket could not be set up; each names the step.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    #[error("frames must be a power of two between 2 and 65536, got {0}")]
    Frames(u32),
    #[error("chunk size must be 2048 or 4096, got {0}")]
    Chunk(u32),
    #[error("socket(AF_XDP): {0} (needs root or CAP_NET_RAW, and a kernel with CONFIG_XDP_SOCKETS)")]
    Socket(io::Error),
    #[error("allocating the UMEM ({0} octets): {1}")]
    Umem(usize, io::Error),
    #[error("setsockopt {0}: {1}")]
    SetOpt(&'static str, io::Error),
    #[error("getsockopt XDP_MMAP_OFFSETS: {0}")]
    Offsets(io::Error),
    #[error("mapping the {0} ring: {1}")]
    Mmap(&'static str, io::Error),
    #[error("binding to interface {ifindex} queue {queue} in copy mode: {err} (is an XDP program attached, does the queue exist?)")]
    Bind { ifindex: u32, queue: u32, err: io::Error },
}

/// Counters the kernel keeps per socket (struct xdp_statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Frames dropped for other reasons (e.g. larger than a chunk).
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full (user space too slow).
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: u64,
}

/// An AF_XDP socket in copy mode with its UMEM, receiving only.
pub struct XskSocket {
    fd: OwnedFd,
    umem: NonNull<u8>,
    umem_len: usize,
    fill: Ring,
    rx: Ring,
    completion: Ring,
    chunk: u32,
    ifindex: u32,
    queue: u32,
}

// SAFETY: the socket owns its mappings exclusively; the kernel side is
// synchronised through the rings' atomic producer/consumer words.
unsafe impl Send for XskSocket {}
// SAFETY: every method that touches the rings or the UMEM takes &mut self;
// the &self ones only read the kernel's atomic indices or make syscalls.
unsafe impl Sync for XskSocket {}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

fn setsockopt<T>(fd: RawFd, name: libc::c_int, what: &'static str, v: &T) -> Result<(), XskError> {
    // SAFETY: v points to a live T of the size passed.
    let r = unsafe {
        libc::setsockopt(fd, libc::SOL_XDP, name, (v as *const T).cast(), std::mem::size_of::<T>() as libc::socklen_t)
    };
    if r != 0 {
        return Err(XskError::SetOpt(what, last_err()));
    }
    Ok(())
}

impl XskSocket {
    /// Creates a socket with a UMEM of `frames` chunks (a power of two),
    /// fills every chunk into the fill ring and binds it in copy mode to
    /// queue `queue` of interface `ifindex` (in the calling thread's network
    /// namespace). Register [`XskSocket::as_raw_fd`] in the XDP program's
    /// XSKMAP at key `queue` to receive.
    pub fn bind(ifindex: u32, queue: u32, frames: u32) -> Result<XskSocket, XskError> {
        XskSocket::bind_with_chunk(ifindex, queue, frames, FRAME_SIZE)
    }

    /// [`XskSocket::bind`] with UMEM chunks of `chunk` octets (2048 or 4096).
    pub fn bind_with_chunk(ifindex: u32, queue: u32, frames: u32, chunk: u32) -> Result<XskSocket, XskError> {
        if !frames.is_power_of_two() || !(2..=65536).contains(&frames) {
            return Err(XskError::Frames(frames));
        }
        if chunk != 2048 && chunk != 4096 {
            return Err(XskError::Chunk(chunk));
        }
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(XskError::Socket(last_err()));
        }
        // SAFETY: fd was just created and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();

        let umem_len = frames as usize * chunk as usize;
        // SAFETY: anonymous private mapping, no file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                umem_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(XskError::Umem(umem_len, last_err()));
        }
        let umem = NonNull::new(p.cast::<u8>()).expect("mmap returned a non-null address");
        // From here on a failure must unmap the UMEM: build a partial
        // socket whose drop does it.
        let mut guard = UmemGuard { umem, len: umem_len };

        // SAFETY: an all-zero xdp_umem_reg is valid (flags 0, no metadata).
        let mut reg: libc::xdp_umem_reg = unsafe { std::mem::zeroed() };
        reg.addr = umem.as_ptr() as u64;
        reg.len = umem_len as u64;
        reg.chunk_size = chunk;
        reg.headroom = 0;
        setsockopt(raw, libc::XDP_UMEM_REG, "XDP_UMEM_REG", &reg)?;
        setsockopt(raw, libc::XDP_UMEM_FILL_RING, "XDP_UMEM_FILL_RING", &frames)?;
        setsockopt(raw, libc::XDP_UMEM_COMPLETION_RING, "XDP_UMEM_COMPLETION_RING", &frames)?;
        setsockopt(raw, libc::XDP_RX_RING, "XDP_RX_RING", &frames)?;

        // SAFETY: zeroed plain integers; getsockopt fills them.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // SAFETY: off/len point to live values of the sizes given.
        if unsafe {
            libc::getsockopt(
                raw,
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&mut off as *mut libc::xdp_mmap_offsets).cast(),
                &mut len,
            )
        } != 0
        {
            return Err(XskError::Offsets(last_err()));
        }
        if len as usize != std::mem::size_of::<libc::xdp_mmap_offsets>() {
            // Kernels before 5.4 answer without the flags words.
            return Err(XskError::Offsets(io::Error::other(
                "kernel too old (no ring flags in XDP_MMAP_OFFSETS; 5.4 or later needed)",
            )));
        }
        let fill = Ring::map(raw, RingKind::Fill, frames, &off.fr).map_err(|e| XskError::Mmap("fill", e))?;
        let completion =
            Ring::map(raw, RingKind::Completion, frames, &off.cr).map_err(|e| XskError::Mmap("completion", e))?;
        let rx = Ring::map(raw, RingKind::Rx, frames, &off.rx).map_err(|e| XskError::Mmap("RX", e))?;

        guard.len = 0; // the socket owns the UMEM now
        let mut s = XskSocket { fd, umem, umem_len, fill, rx, completion, chunk, ifindex, queue };
        // Every chunk goes to the kernel for receiving.
        for i in 0..frames {
            s.fill.push_addr(u64::from(i) * u64::from(chunk));
        }
        s.fill.publish();

        // SAFETY: an all-zero sockaddr_xdp is valid; fields set below.
        let mut sa: libc::sockaddr_xdp = unsafe { std::mem::zeroed() };
        sa.sxdp_family = libc::AF_XDP as u16;
        sa.sxdp_flags = libc::XDP_COPY;
        sa.sxdp_ifindex = ifindex;
        sa.sxdp_queue_id = queue;
        // SAFETY: sa is a live sockaddr_xdp of the size given.
        let r = unsafe {
            libc::bind(
                raw,
                (&sa as *const libc::sockaddr_xdp).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(XskError::Bind { ifindex, queue, err: last_err() });
        }
        Ok(s)
    }

    /// Hands every frame waiting in the RX ring (Ethernet header first),
    /// at most `limit` of them, to `f`, then returns their chunks to the
    /// kernel. Returns how many were received; never blocks.
    pub fn recv_at_most(&mut self, limit: usize, mut f: impl FnMut(&[u8])) -> usize {
        let n = self.rx.available().min(limit as u32);
        for _ in 0..n {
            let (addr, len) = self.rx.pop_desc();
            let (addr, len) = (addr as usize, len as usize);
            if addr.checked_add(len).is_some_and(|end| end <= self.umem_len) {
                // SAFETY: the range lies inside the UMEM mapping, and the
                // kernel does not write a chunk while it is off the fill ring.
                let frame = unsafe { std::slice::from_raw_parts(self.umem.as_ptr().add(addr), len) };
                f(frame);
            }
            // Aligned mode: the kernel takes any address in the chunk.
            self.fill.push_addr((addr as u64) & !(u64::from(self.chunk) - 1));
        }
        if n > 0 {
            self.rx.release();
            self.fill.publish();
        }
        n as usize
    }

    /// [`XskSocket::recv_at_most`] with the whole ring as the limit.
    pub fn recv(&mut self, f: impl FnMut(&[u8])) -> usize {
        self.recv_at_most(usize::MAX, f)
    }

    /// Frames waiting in the RX ring.
    pub fn pending(&self) -> u32 {
        self.rx.peek_available()
    }

    /// Waits up to `timeout_ms` for a frame (poll(2)); true if one waits.
    pub fn wait(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r < 0 {
            return Err(last_err());
        }
        Ok(r > 0 && p.revents & libc::POLLIN != 0)
    }

    /// The kernel's counters of this socket.
    pub fn stats(&self) -> io::Result<XskStats> {
        // SAFETY: zeroed integers; getsockopt fills what it knows.
        let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: s/len point to live values of the sizes given.
        if unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&mut s as *mut libc::xdp_statistics).cast(),
                &mut len,
            )
        } != 0
        {
            return Err(last_err());
        }
        Ok(XskStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
        })
    }

    /// The largest frame a chunk holds.
    pub fn max_frame(&self) -> u32 {
        self.chunk - XDP_PACKET_HEADROOM
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Octets of memory this socket holds (UMEM only; rings are small).
    pub fn umem_bytes(&self) -> usize {
        self.umem_len
    }
}

impl AsRawFd for XskSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for XskSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl std::fmt::Debug for XskSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("ifindex", &self.ifindex)
            .field("queue", &self.queue)
            .finish()
    }
}

impl Drop for XskSocket {
    fn drop(&mut self) {
        // Rings unmap in their own Drop; the fd closes after this body.
        // The kernel keeps its own reference to the UMEM pages until the
        // socket is released, so unmapping our view first is safe.
        let _ = &self.completion;
        drop(UmemGuard { umem: self.umem, len: self.umem_len });
    }
}

/// Unmaps a UMEM on drop (len 0: nothing).
struct UmemGuard {
    umem: NonNull<u8>,
    len: usize,
}

impl Drop for UmemGuard {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping of this length was made by bind and is
            // unmapped exactly once.
            unsafe { libc::munmap(self.umem.as_ptr().cast(), self.len) };
        }
    }
}

/// The UMEM chunk that holds an Ethernet frame of this MTU; None above 3826.
pub fn chunk_for_mtu(mtu: u32) -> Option<u32> {
    [2048, 4096].into_iter().find(|c| mtu + 14 <= c - XDP_PACKET_HEADROOM)
}

/// The MTU of an interface (SIOCGIFMTU), in the calling thread's namespace.
pub fn mtu(ifname: &str) -> io::Result<u32> {
    if ifname.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "interface name too long"));
    }
    let mut ifr = [0u8; 40]; // struct ifreq: name, then ifr_mtu (int)
    ifr[..ifname.len()].copy_from_slice(ifname.as_bytes());
    // SAFETY: a datagram socket only for the ioctl, closed below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(last_err());
    }
    // SAFETY: SIOCGIFMTU reads the name and writes an int into `ifr`.
    let r = unsafe { libc::ioctl(s, libc::SIOCGIFMTU as _, ifr.as_mut_ptr()) };
    let e = last_err();
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(s) };
    if r != 0 {
        return Err(e);
    }
    Ok(i32::from_ne_bytes([ifr[16], ifr[17], ifr[18], ifr[19]]).max(0) as u32)
}

/// Receive queues of an interface (ethtool channels; 1 when the driver
/// does not say), in the calling thread's network namespace. veth has one
/// unless created with `numrxqueues`.
pub fn rx_queues(ifname: &str) -> u32 {
    // struct ethtool_channels (linux/ethtool.h): cmd, max_rx, max_tx,
    // max_other, max_combined, rx_count, tx_count, other_count, combined_count.
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    if ifname.len() >= libc::IFNAMSIZ {
        return 1;
    }
    let mut ch = [0u32; 9];
    ch[0] = ETHTOOL_GCHANNELS;
    let mut ifr = [0u8; 40]; // struct ifreq: name, then a pointer
    ifr[..ifname.len()].copy_from_slice(ifname.as_bytes());
    ifr[16..24].copy_from_slice(&(ch.as_mut_ptr() as u64).to_ne_bytes());
    // SAFETY: a datagram socket only for the ioctl, closed below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return 1;
    }
    // SAFETY: s is ours; SIOCETHTOOL reads ifr and writes `ch`, both live.
    let r = unsafe { libc::ioctl(s, libc::SIOCETHTOOL as _, ifr.as_mut_ptr()) };
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(s) };
    if r != 0 {
        return 1;
    }
    ch[5].max(ch[8]).max(1)
}

/// Opens one socket per receive queue of `iface` (in the calling thread's
/// network namespace, which must be the one the program is attached in)
/// and registers each in `plane`'s XSKMAP. Err with the reason (the caller
/// falls back to the TUN device); on error no socket stays registered
/// (closing a socket removes it from the map).
pub fn open_for_plane(
    plane: &mut crate::xdp::XdpPlane,
    iface: &str,
    frames: u32,
) -> Result<(Vec<XskSocket>, crate::xdp::order::SlowOrder), String> {
    let ifindex = crate::xdp::ifindex(iface).map_err(|e| e.to_string())?;
    // Before any socket is registered: the program counts what it hands
    // them, and only this can take the counts off again.
    let order = plane.take_slow_order().ok_or("no program loaded")?.map_err(|e| e.to_string())?;
    let chunk = chunk_for_mtu(mtu(iface).map_err(|e| format!("MTU of {iface}: {e}"))?)
        .ok_or_else(|| format!("{iface}: MTU above {} octets", 4096 - XDP_PACKET_HEADROOM - 14))?;
    let queues = rx_queues(iface).min(UPF_MAX_XSK_QUEUES);
    let mut out = Vec::with_capacity(queues as usize);
    for q in 0..queues {
        let s = bind_retrying(ifindex, q, frames, chunk).map_err(|e| format!("{iface} queue {q}: {e}"))?;
        plane.register_xsk(ifindex, q, s.as_fd()).map_err(|e| format!("{iface} queue {q}: {e}"))?;
        out.push(s);
    }
    Ok((out, order))
}

/// [`XskSocket::bind`], retried for up to a second while the queue is
/// busy: the kernel releases a closed socket's hold on its queue in
/// deferred work, so a socket closed just before (a restart) still holds it.
pub fn bind_retrying(ifindex: u32, queue: u32, frames: u32, chunk: u32) -> Result<XskSocket, XskError> {
    let mut tries = 0;
    loop {
        match XskSocket::bind_with_chunk(ifindex, queue, frames, chunk) {
            Err(XskError::Bind { err, .. }) if err.raw_os_error() == Some(libc::EBUSY) && tries < 20 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// Keys of the XSKMAP (bpf/maps.h UPF_MAX_XSK_QUEUES).
pub const UPF_MAX_XSK_QUEUES: u32 = 64;

/// The IPv4 packet of an Ethernet frame (EtherType 0x0800, no VLAN tag),
/// cut to its total length (Ethernet padding dropped); None otherwise.
pub fn ipv4_of_frame(frame: &[u8]) -> Option<&[u8]> {
    const ETH: usize = 14;
    if frame.len() < ETH + 20 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[ETH..];
    let tot = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    (tot >= 20 && tot <= ip.len()).then(|| &ip[..tot])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_of_frame_cuts_padding_and_rejects_others() {
        let mut f = vec![0u8; 14 + 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        assert_eq!(ipv4_of_frame(&f).map(<[u8]>::len), Some(46));
        f[16..18].copy_from_slice(&61u16.to_be_bytes());
        assert_eq!(ipv4_of_frame(&f), None, "longer than the frame");
        f[16..18].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(ipv4_of_frame(&f), None, "shorter than a header");
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(ipv4_of_frame(&f), None, "IPv6");
        assert_eq!(ipv4_of_frame(&f[..20]), None);
    }

    proptest::proptest! {
        #[test]
        fn ipv4_of_frame_never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Some(ip) = ipv4_of_frame(&b) {
                proptest::prop_assert!(ip.len() >= 20 && ip.len() + 14 <= b.len());
            }
        }
    }

    #[test]
    fn chunk_fits_the_mtu() {
        assert_eq!(chunk_for_mtu(1500), Some(2048));
        assert_eq!(chunk_for_mtu(1778), Some(2048));
        assert_eq!(chunk_for_mtu(1779), Some(4096));
        assert_eq!(chunk_for_mtu(3826), Some(4096));
        assert_eq!(chunk_for_mtu(9000), None);
    }

    #[test]
    fn bad_frame_counts_are_refused_before_any_syscall() {
        assert!(matches!(XskSocket::bind_with_chunk(1, 0, 64, 1024), Err(XskError::Chunk(1024))));
        assert!(matches!(XskSocket::bind(1, 0, 3), Err(XskError::Frames(3))));
        assert!(matches!(XskSocket::bind(1, 0, 0), Err(XskError::Frames(0))));
        assert!(matches!(XskSocket::bind(1, 0, 1 << 17), Err(XskError::Frames(_))));
    }
}
