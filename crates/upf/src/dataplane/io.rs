//! The I/O shell of the user-space data path.
//!
//! Access side: one UDP socket bound to the S1-U address, port 2152. The
//! kernel does the outer IPv4/UDP (checksums, outer fragmentation and
//! reassembly, ARP), and with the XDP fast path attached the same socket
//! receives what XDP passes up (unknown TEIDs, GTP-U control messages,
//! fragments), so the slow path is this very code in both modes.
//!
//! Core side: a TUN device (IFF_TUN, no packet information) with a route
//! for each UE pool pointing into it. Chosen over a raw AF_PACKET socket
//! because the kernel then does next-hop resolution, ARP and the routing
//! of the inner packets (a TUN write is an IPv4 packet entering the stack;
//! a downlink packet is whatever the kernel routes to a UE address), so
//! the data path needs no MAC or neighbour handling of its own. Closing
//! the device (drop) removes it and its routes.
//!
//! Buffered downlink in XDP mode: the XDP program redirects the downlink
//! packets of a buffering session (FAR BUFF/NOCP) into AF_XDP copy-mode
//! sockets, one per receive queue of the core interface
//! ([`DatapathIo::with_afxdp`], opened by the shell); each frame's IPv4
//! packet goes to [`super::UserPlane::downlink`] exactly like a TUN read,
//! a batch per lock. Measured faster than XDP_PASS + kernel route + TUN
//! read (`mobicore bench slowpath`). Without sockets (user-space data path,
//! `buffer_afxdp = false`, or bind failure) the program passes those
//! packets up the stack and they arrive on the TUN device as before. On a
//! rule change the sockets are drained before the flush, so packets that
//! reached them before a release leave right after the released ones.
//! Each flush is counted (started / done) and, while a fast-path switch
//! waits for one, wakes the PFCP task: the XDP FAR turns FORW only after
//! the released packets are sent ([`super::handover`]). Packets still in
//! a socket's ring at that switch are not overtaken: the program counts
//! what it hands the sockets per bucket of UE addresses and sends that
//! bucket's packets after them until this task has sent them
//! ([`crate::xdp::order`]).
//!
//! Fragments: inner fragments are forwarded unchanged, never reassembled
//! (every fragment carries the source address the anti-spoofing check
//! needs); in sessions with port-based SDF filters the later fragments
//! follow the PDR of their first one (`defrag`). Outer fragments are
//! reassembled by the kernel. Downlink packets too big for `s1u_mtu` once
//! encapsulated are fragmented inside the tunnel or answered with ICMP
//! (written into the TUN device, which accepts our own source address).
//! Copies with a Transport Level Marking are sent with an IP_TOS control
//! message.

use super::{Transmit, UserspacePlane};
use crate::afxdp::{ipv4_of_frame, XskSocket};
use crate::xdp::order::{self, SlowOrder};
use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::unix::AsyncFd;
use tokio::net::UdpSocket;
use tokio::sync::watch;

/// Where the user-space data path does its I/O.
#[derive(Debug, Clone)]
pub struct IoConfig {
    /// S1-U address and port (2152) to bind.
    pub s1u: SocketAddrV4,
    /// Network namespace (a name under /var/run/netns) of the access side.
    pub access_netns: Option<String>,
    /// Network namespace of the core side (where the TUN device lives).
    pub core_netns: Option<String>,
    pub tun_name: String,
    /// UE address pools routed into the TUN device, e.g. "10.44.0.0/14".
    pub ue_pools: Vec<String>,
}

/// Runs `f` on a thread that entered namespace `ns` (sockets and devices
/// created there stay in it).
pub fn in_netns<T: Send + 'static>(
    ns: Option<&str>,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let Some(ns) = ns else { return f() };
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
        // SAFETY: setns on a valid namespace fd affects only this thread.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        f()
    })
    .join()
    .map_err(|_| io::Error::other("namespace thread panicked"))?
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// Opens a TUN device (IFF_TUN | IFF_NO_PI), non-blocking.
pub fn open_tun(name: &str) -> io::Result<OwnedFd> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "TUN name too long"));
    }
    // SAFETY: plain open(2) of a path literal.
    let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::new(io::Error::last_os_error().kind(), "/dev/net/tun (are you root?)"));
    }
    // SAFETY: fd was just opened and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = [0u8; 40]; // struct ifreq
    req[..name.len()].copy_from_slice(name.as_bytes());
    let flags = (libc::IFF_TUN | libc::IFF_NO_PI) as u16;
    req[16..18].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes a struct ifreq, which `req` holds.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, req.as_mut_ptr()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

fn ip(ns: Option<&str>, args: &[&str]) -> io::Result<()> {
    let mut c = Command::new("ip");
    if let Some(ns) = ns {
        c.args(["-n", ns]);
    }
    let out = c.args(args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The bound sockets of a user-space data path, ready to run.
pub struct DatapathIo {
    udp: Arc<UdpSocket>,
    tun: AsyncFd<OwnedFd>,
    plane: UserspacePlane,
    /// AF_XDP sockets receiving buffered downlink packets (XDP mode).
    xsks: Vec<AsyncFd<XskSocket>>,
    /// The program's counts of what it handed those sockets.
    order: Option<Arc<SlowOrder>>,
    /// Buckets of the frames taken since the last flush, one per frame.
    taken: Vec<u32>,
    /// The sockets' drops (frames counted but never received) seen so far.
    xsk_drops: u64,
}

/// Frames taken from one AF_XDP socket per wake-up (one plane lock).
const XSK_BATCH: usize = 64;

/// How often the AF_XDP sockets' drop counts are read.
const XSK_DROPS_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Hands a batch of an AF_XDP socket's frames to the plane as downlink
/// packets (one lock); the number taken.
/// Notes each frame's bucket in `taken` ([`SlowOrder`]).
fn take_batch(x: &mut XskSocket, plane: &UserspacePlane, taken: &mut Vec<u32>) -> usize {
    let now = Instant::now();
    let mut core = plane.lock();
    let n = x.recv_at_most(XSK_BATCH, |f| match ipv4_of_frame(f) {
        Some(ip) => {
            taken.extend(order::bucket_of_ipv4(ip));
            let _ = core.downlink(now, ip);
        }
        None => core.counters.incr("upf_afxdp_not_ipv4"),
    });
    core.counters.get("upf_afxdp_received").fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    n
}

/// Empties every socket's RX ring into the plane, without waiting.
fn drain_xsks(xsks: &mut [AsyncFd<XskSocket>], plane: &UserspacePlane, taken: &mut Vec<u32>) {
    for x in xsks.iter_mut() {
        while take_batch(x.get_mut(), plane, taken) == XSK_BATCH {}
    }
}

/// Waits until one AF_XDP socket has frames and hands a batch of them to
/// the plane as downlink packets; Ready(number taken).
fn poll_xsks(
    xsks: &mut [AsyncFd<XskSocket>],
    plane: &UserspacePlane,
    taken: &mut Vec<u32>,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    for x in xsks.iter_mut() {
        match x.poll_read_ready_mut(cx) {
            Poll::Ready(Ok(mut g)) => {
                let n = take_batch(g.get_inner_mut(), plane, taken);
                if n < XSK_BATCH {
                    // Drained; a frame arriving meanwhile re-arms readiness.
                    g.clear_ready();
                }
                return Poll::Ready(Ok(n));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
    }
    Poll::Pending
}

impl DatapathIo {
    /// Binds S1-U and creates the TUN device with its routes. Call inside
    /// a tokio runtime.
    pub fn open(cfg: &IoConfig, plane: UserspacePlane) -> io::Result<DatapathIo> {
        let s1u = cfg.s1u;
        let udp = in_netns(cfg.access_netns.as_deref(), move || {
            let s = std::net::UdpSocket::bind(s1u)
                .map_err(|e| io::Error::new(e.kind(), format!("binding S1-U {s1u}: {e}")))?;
            s.set_nonblocking(true)?;
            Ok(s)
        })?;
        let name = cfg.tun_name.clone();
        let tun = in_netns(cfg.core_netns.as_deref(), move || open_tun(&name))?;
        let ns = cfg.core_netns.as_deref();
        // IPv6 UE pools (PDN types IPv6 and IPv4v6) need IPv6 on the device
        // and forwarding in its namespace; the device gets no address of
        // its own (addr_gen_mode 1), so the kernel sends nothing into it
        // (router solicitations, DAD). Without them, IPv4 only.
        let v6 = cfg.ue_pools.iter().any(|p| p.contains(':'));
        let conf = |key: &str| format!("/proc/sys/net/ipv6/conf/{}/{key}", cfg.tun_name);
        if v6 {
            let (mode, forwarding) = (conf("addr_gen_mode"), "/proc/sys/net/ipv6/conf/all/forwarding");
            let _ = in_netns(ns, move || std::fs::write(mode, "1"));
            in_netns(ns, move || std::fs::write(forwarding, "1"))
                .map_err(|e| io::Error::new(e.kind(), format!("enabling IPv6 forwarding for the UE pools: {e}")))?;
        }
        let path = conf("disable_ipv6");
        let _ = in_netns(ns, move || std::fs::write(path, if v6 { "0" } else { "1" }));
        // ICMP errors we write into the TUN come from our own address
        // (DatapathConfig::icmp_source): without accept_local the kernel
        // drops them as martians instead of routing them to the core.
        let path = format!("/proc/sys/net/ipv4/conf/{}/accept_local", cfg.tun_name);
        let _ = in_netns(ns, move || std::fs::write(path, "1"));
        ip(ns, &["link", "set", "dev", &cfg.tun_name, "up"])?;
        for pool in &cfg.ue_pools {
            ip(ns, &["route", "replace", pool, "dev", &cfg.tun_name])?;
        }
        // SAFETY: `tun` is an fd we own, registered once and kept open by
        // the AsyncFd until it is dropped.
        let tun = unsafe { AsyncFd::register(tun) }.map_err(|e| e.into_parts().1)?;
        Ok(DatapathIo {
            udp: Arc::new(UdpSocket::from_std(udp)?),
            tun,
            plane,
            xsks: Vec::new(),
            order: None,
            taken: Vec::new(),
            xsk_drops: 0,
        })
    }

    /// Receives buffered downlink packets from these AF_XDP sockets
    /// (registered in the XDP program's XSKMAP) too, and takes each off
    /// `order` once sent. Call inside a tokio runtime.
    pub fn with_afxdp(mut self, socks: Vec<XskSocket>, order: Arc<SlowOrder>) -> io::Result<DatapathIo> {
        self.order = Some(order);
        self.plane.set_in_order(!socks.is_empty());
        for s in socks {
            // SAFETY: the socket owns its fd, which stays open (and
            // registered once) until the AsyncFd drops it.
            let fd = unsafe { AsyncFd::register_with_interest(s, tokio::io::Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
            self.xsks.push(fd);
        }
        Ok(self)
    }

    /// AF_XDP sockets in use (0: buffered downlink arrives on the TUN device).
    pub fn afxdp_sockets(&self) -> usize {
        self.xsks.len()
    }

    pub fn s1u_addr(&self) -> io::Result<SocketAddr> {
        self.udp.local_addr()
    }

    /// Moves packets until `shutdown` turns true.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> io::Result<()> {
        let wake = self.plane.notified();
        let mut buf = vec![0u8; 65536];
        let mut drops_check = tokio::time::interval(XSK_DROPS_CHECK);
        drops_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // The data path's own deadlines (held fragments expire).
            let deadline = self.plane.lock().poll_timeout();
            let timer = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = timer => {
                    self.plane.lock().handle_timeout(Instant::now());
                }
                r = self.udp.readable() => {
                    r?;
                    for _ in 0..64 {
                        match self.udp.try_recv_from(&mut buf) {
                            Ok((n, SocketAddr::V4(from))) => {
                                let _ = self.plane.lock().uplink(Instant::now(), from, &buf[..n]);
                            }
                            Ok(_) => {}
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(_) => break,
                        }
                    }
                }
                r = self.tun.readable() => {
                    let mut g = r?;
                    for _ in 0..64 {
                        // SAFETY: read(2) into a buffer we own.
                        let n = unsafe { libc::read(self.tun.get_ref().as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                        if n < 0 {
                            g.clear_ready();
                            break;
                        }
                        let _ = self.plane.lock().downlink(Instant::now(), &buf[..n as usize]);
                    }
                }
                r = std::future::poll_fn(|cx| poll_xsks(&mut self.xsks, &self.plane, &mut self.taken, cx)), if !self.xsks.is_empty() => {
                    r?;
                }
                _ = wake.notified() => {
                    // A rule change (a release, say): what the sockets hold
                    // arrived before it and goes out in this same flush,
                    // right after the released packets.
                    drain_xsks(&mut self.xsks, &self.plane, &mut self.taken);
                }
                _ = drops_check.tick(), if !self.xsks.is_empty() => {
                    self.check_xsk_drops().await;
                }
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { return Ok(()); }
                }
            }
            self.flush().await;
            self.sent_taken();
        }
    }

    /// Takes what this task took from its sockets, all sent now (or held
    /// or dropped by the plane), off the program's counts.
    fn sent_taken(&mut self) {
        match &self.order {
            Some(o) => self.taken.drain(..).for_each(|b| o.sent(b)),
            None => self.taken.clear(),
        }
    }

    /// Frames the kernel dropped at a socket were counted and will never
    /// be taken off: once the rings are emptied, every count starts again
    /// from zero ([`SlowOrder::reset`]).
    async fn check_xsk_drops(&mut self) {
        let drops: u64 =
            self.xsks.iter().filter_map(|x| x.get_ref().stats().ok()).map(|s| s.rx_dropped + s.rx_ring_full).sum();
        if drops == self.xsk_drops {
            return;
        }
        self.xsk_drops = drops;
        drain_xsks(&mut self.xsks, &self.plane, &mut self.taken);
        self.flush().await;
        self.sent_taken();
        if let Some(o) = &self.order {
            o.reset();
            self.plane.lock().counters.incr("upf_slow_order_reset");
        }
    }

    async fn flush(&self) {
        let (out, reports) = {
            let mut core = self.plane.lock();
            self.plane.flush_started();
            (std::iter::from_fn(|| core.poll_transmit()).collect::<Vec<_>>(), !core.reports.is_empty())
        };
        // After the sends below (a fast-path switch waits for them).
        struct Done<'a>(&'a UserspacePlane);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.flush_done();
            }
        }
        let _done = Done(&self.plane);
        if reports {
            self.plane.reports_ready.notify_one();
        }
        let mut out = out;
        if self.plane.fast_path() && out.iter().any(Transmit::is_end_marker) {
            // End Markers wait for the grace period on their own; the rest
            // of the flush (and the next ones) do not.
            let (end_markers, rest): (Vec<_>, Vec<_>) = out.into_iter().partition(Transmit::is_end_marker);
            out = rest;
            let (udp, plane) = (self.udp.clone(), self.plane.clone());
            tokio::spawn(async move {
                if !matches!(tokio::task::spawn_blocking(end_marker_gate).await, Ok(Ok(()))) {
                    plane.lock().counters.incr("upf_end_marker_gate_failed");
                }
                for t in end_markers {
                    if let Transmit::Gtpu { to, bytes } | Transmit::GtpuMarked { to, bytes, .. } = t {
                        if udp.send_to(&bytes, to).await.is_err() {
                            plane.lock().counters.incr("upf_send_error");
                        }
                    }
                }
            });
        }
        for t in out {
            match t {
                Transmit::Gtpu { to, bytes } => {
                    if self.udp.send_to(&bytes, to).await.is_err() {
                        self.plane.lock().counters.incr("upf_send_error");
                    }
                }
                Transmit::GtpuMarked { to, tos, bytes } => {
                    let fd = self.udp.as_raw_fd();
                    if self
                        .udp
                        .async_io(tokio::io::Interest::WRITABLE, || send_with_tos(fd, to, tos, &bytes))
                        .await
                        .is_err()
                    {
                        self.plane.lock().counters.incr("upf_send_error");
                    }
                }
                Transmit::Core(p) => {
                    // SAFETY: write(2) of a buffer we own.
                    let n = unsafe { libc::write(self.tun.get_ref().as_raw_fd(), p.as_ptr().cast(), p.len()) };
                    if n < 0 {
                        self.plane.lock().counters.incr("upf_tun_write_error");
                    }
                }
            }
        }
    }
}

/// Waits until no XDP run that started before now is still under way: an
/// RCU grace period (membarrier(2) MEMBARRIER_CMD_GLOBAL). XDP runs, and
/// flushes what it redirected to the egress device's queue, inside one
/// RCU read-side section (the NAPI poll), so a G-PDU an XDP run sent on a
/// tunnel the fast path has just left is queued on the egress before the
/// End Marker sent after this returns (TS 29.281 7.3.2: the End Marker is
/// the last packet on the old path). Some milliseconds; the I/O task's
/// End Markers of one flush share one.
pub fn end_marker_gate() -> io::Result<()> {
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier(2) takes no pointers.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0 as libc::c_long, 0 as libc::c_long) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// sendmsg(2) of one UDP datagram whose IPv4 header gets `tos` (an IP_TOS
/// control message, so the socket's own ToS stays as it is).
fn send_with_tos(fd: std::os::fd::RawFd, to: SocketAddrV4, tos: u8, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: all-zero is a valid sockaddr_in and msghdr.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_port = to.port().to_be();
    addr.sin_addr.s_addr = u32::from(*to.ip()).to_be();
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    let mut control = [0u64; 4]; // 8-aligned, room for one int cmsg
    let int = std::mem::size_of::<libc::c_int>() as u32;
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut addr as *mut libc::sockaddr_in).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(int) } as _;
    // SAFETY: msg_control points at `control`, large enough for one
    // header and an int; CMSG_FIRSTHDR/CMSG_DATA stay inside it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::IPPROTO_IP;
        (*c).cmsg_type = libc::IP_TOS;
        (*c).cmsg_len = libc::CMSG_LEN(int) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), libc::c_int::from(tos));
    }
    // SAFETY: msg and everything it points to live across the call.
    let n = unsafe { libc::sendmsg(fd, &msg, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
