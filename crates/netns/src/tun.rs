//! A layer-3 TUN device: each read yields one IP packet, each write injects
//! one (IFF_TUN | IFF_NO_PI, so no packet-information prefix).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// `struct ifreq` as TUNSETIFF and SIOCETHTOOL read it (40 octets).
#[repr(C)]
pub(crate) struct IfReq {
    pub name: [u8; libc::IFNAMSIZ],
    pub data: [u8; 24],
}

impl IfReq {
    pub(crate) fn new(name: &str) -> io::Result<Self> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad interface name {name:?}")));
        }
        let mut r = IfReq { name: [0; libc::IFNAMSIZ], data: [0; 24] };
        r.name[..bytes.len()].copy_from_slice(bytes);
        Ok(r)
    }
}

/// An open TUN device. It lives in the namespace of the thread that
/// created it (see [`crate::run_in`]) and disappears when dropped.
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
}

impl Tun {
    /// Create (or attach to) TUN device `name` in the calling thread's
    /// namespace, non-blocking. Addresses and link state are set with `ip`.
    pub fn create(name: &str) -> io::Result<Tun> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        let mut req = IfReq::new(name)?;
        let flags = (libc::IFF_TUN | libc::IFF_NO_PI) as i16;
        req.data[..2].copy_from_slice(&flags.to_ne_bytes());
        // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which IfReq
        // matches in size and layout.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF as _, &mut req as *mut IfReq) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let end = req.name.iter().position(|&b| b == 0).unwrap_or(req.name.len());
        let name = String::from_utf8_lossy(&req.name[..end]).into_owned();
        Ok(Tun { file, name })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Read one packet; `WouldBlock` when none is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.file).read(buf)
    }

    /// Write one packet.
    pub fn send(&self, packet: &[u8]) -> io::Result<usize> {
        (&self.file).write(packet)
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}
