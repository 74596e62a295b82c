//! Kernel SCTP: probed once. This machine class has no kernel SCTP module, so
//! the kernel transport is not implemented; `bind` reports that clearly.

use std::sync::OnceLock;

/// Whether `socket(AF_INET, SOCK_SEQPACKET, IPPROTO_SCTP)` works here (probed once).
pub fn available() -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    *PROBE.get_or_init(|| {
        // SAFETY: plain socket(2)/close(2) on a descriptor we own.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_SEQPACKET, super::socket::IPPROTO_SCTP);
            if fd >= 0 {
                libc::close(fd);
                true
            } else {
                false
            }
        }
    })
}
