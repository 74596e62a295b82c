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
//! Fragments: uplink inner fragments are forwarded by the outer TEID
//! without reassembly (every fragment carries the source address that
//! the anti-spoofing check needs); downlink fragments are matched on
//! addresses and protocol, so a non-first fragment never matches a PDR
//! whose SDF filter names ports and falls to the next PDR by precedence
//! (the default bearer). Outer fragments are reassembled by the kernel.

use super::{Transmit, UserspacePlane};
use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
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
    /// UE address pools routed into the TUN device, e.g. "10.45.0.0/16".
    pub ue_pools: Vec<String>,
}

/// Runs `f` on a thread that entered namespace `ns` (sockets and devices
/// created there stay in it).
pub fn in_netns<T: Send + 'static>(ns: Option<&str>, f: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
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
        return Err(io::Error::other(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(())
}

/// The bound sockets of a user-space data path, ready to run.
pub struct DatapathIo {
    udp: UdpSocket,
    tun: AsyncFd<OwnedFd>,
    plane: UserspacePlane,
}

impl DatapathIo {
    /// Binds S1-U and creates the TUN device with its routes. Call inside
    /// a tokio runtime.
    pub fn open(cfg: &IoConfig, plane: UserspacePlane) -> io::Result<DatapathIo> {
        let s1u = cfg.s1u;
        let udp = in_netns(cfg.access_netns.as_deref(), move || {
            let s = std::net::UdpSocket::bind(s1u).map_err(|e| io::Error::new(e.kind(), format!("binding S1-U {s1u}: {e}")))?;
            s.set_nonblocking(true)?;
            Ok(s)
        })?;
        let name = cfg.tun_name.clone();
        let tun = in_netns(cfg.core_netns.as_deref(), move || open_tun(&name))?;
        let ns = cfg.core_netns.as_deref();
        // IPv4 only: without this the kernel sends the new device's IPv6
        // router solicitations into it, counted as malformed G-PDU payload.
        let path = format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", cfg.tun_name);
        let _ = in_netns(ns, move || std::fs::write(path, "1"));
        ip(ns, &["link", "set", "dev", &cfg.tun_name, "up"])?;
        for pool in &cfg.ue_pools {
            ip(ns, &["route", "replace", pool, "dev", &cfg.tun_name])?;
        }
        // SAFETY: `tun` is an fd we own, registered once and kept open by
        // the AsyncFd until it is dropped.
        let tun = unsafe { AsyncFd::register(tun) }.map_err(|e| e.into_parts().1)?;
        Ok(DatapathIo { udp: UdpSocket::from_std(udp)?, tun, plane })
    }

    pub fn s1u_addr(&self) -> io::Result<SocketAddr> {
        self.udp.local_addr()
    }

    /// Moves packets until `shutdown` turns true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> io::Result<()> {
        let wake = self.plane.notified();
        let mut buf = vec![0u8; 65536];
        loop {
            tokio::select! {
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
                _ = wake.notified() => {}
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { return Ok(()); }
                }
            }
            self.flush().await;
        }
    }

    async fn flush(&self) {
        let (out, reports) = {
            let mut core = self.plane.lock();
            (std::iter::from_fn(|| core.poll_transmit()).collect::<Vec<_>>(), !core.reports.is_empty())
        };
        if reports {
            self.plane.reports_ready.notify_one();
        }
        for t in out {
            match t {
                Transmit::Gtpu { to, bytes } => {
                    if self.udp.send_to(&bytes, to).await.is_err() {
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
