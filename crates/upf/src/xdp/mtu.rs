//! The egress MTU the fast path checks encapsulated packets against: the
//! smallest MTU of the interfaces it uses, capped by configuration.
//!
//! Interfaces are read through a socket opened in the namespace they were
//! added from (an interface index means something only in its namespace),
//! so a later refresh from any thread (the PFCP task's, say) reads the
//! right devices.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

#[derive(Debug)]
pub struct MtuWatch {
    /// 0 = no cap.
    cap: u32,
    ifaces: Vec<u32>,
    /// A datagram socket in the namespace of the interfaces.
    sock: Option<OwnedFd>,
}

impl MtuWatch {
    pub fn new(cap: u32) -> Self {
        MtuWatch { cap, ifaces: Vec::new(), sock: None }
    }

    /// Adds an interface (of the calling thread's namespace; the first
    /// call fixes the namespace).
    pub fn watch(&mut self, ifindex: u32) {
        if self.sock.is_none() {
            // SAFETY: plain socket(2); the fd is owned below.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
            if fd >= 0 {
                // SAFETY: a fresh fd nobody else owns.
                self.sock = Some(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        if !self.ifaces.contains(&ifindex) {
            self.ifaces.push(ifindex);
        }
    }

    /// The smallest of the cap and the interfaces' MTUs (interfaces that
    /// are gone are skipped); None when nothing is known.
    pub fn effective(&self) -> Option<u32> {
        let cap = (self.cap != 0).then_some(self.cap);
        let sock = self.sock.as_ref();
        self.ifaces.iter().filter_map(|i| sock.and_then(|s| if_mtu(s, *i))).chain(cap).min()
    }
}

/// MTU of interface `ifindex` in the namespace of `sock`.
fn if_mtu(sock: &OwnedFd, ifindex: u32) -> Option<u32> {
    // SAFETY: ifreq is plain data; zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    req.ifr_ifru.ifru_ifindex = ifindex as libc::c_int;
    // SAFETY: SIOCGIFNAME and SIOCGIFMTU read and write one ifreq.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFNAME, &mut req) != 0 {
            return None;
        }
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) != 0 {
            return None;
        }
        u32::try_from(req.ifr_ifru.ifru_mtu).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_and_loopback() {
        assert_eq!(MtuWatch::new(0).effective(), None);
        assert_eq!(MtuWatch::new(1400).effective(), Some(1400));
        let lo = crate::xdp::ifindex("lo").unwrap();
        let mut w = MtuWatch::new(0);
        w.watch(lo);
        let sock = w.sock.as_ref().unwrap();
        let lo_mtu = if_mtu(sock, lo).expect("lo has an MTU");
        assert!(lo_mtu >= 1280);
        assert_eq!(w.effective(), Some(lo_mtu));
        let mut capped = MtuWatch::new(1400);
        capped.watch(lo);
        assert_eq!(capped.effective(), Some(1400.min(lo_mtu)));
        // An interface that does not exist is skipped.
        w.watch(u32::MAX - 1);
        assert_eq!(w.effective(), Some(lo_mtu));
    }
}
