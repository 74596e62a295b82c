//! One mmap'ed AF_XDP ring (linux/if_xdp.h: struct xdp_ring_offset).
//!
//! A ring is a power-of-two array of entries with a producer and a
//! consumer index (free-running u32, masked on use). The fill ring is
//! produced by us and consumed by the kernel; the RX and completion rings
//! the other way round. Indices are read with acquire and written with
//! release ordering, pairing with the kernel's smp_load_acquire /
//! smp_store_release on the same words.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// Which ring, for its mmap offset and entry size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RingKind {
    /// Entries are u64 UMEM addresses.
    Fill,
    Completion,
    /// Entries are struct xdp_desc { u64 addr; u32 len; u32 options; }.
    Rx,
}

impl RingKind {
    fn pgoff(self) -> libc::off_t {
        match self {
            RingKind::Fill => libc::XDP_UMEM_PGOFF_FILL_RING as libc::off_t,
            RingKind::Completion => libc::XDP_UMEM_PGOFF_COMPLETION_RING as libc::off_t,
            RingKind::Rx => libc::XDP_PGOFF_RX_RING,
        }
    }
    fn entry_size(self) -> usize {
        match self {
            RingKind::Fill | RingKind::Completion => std::mem::size_of::<u64>(),
            RingKind::Rx => std::mem::size_of::<libc::xdp_desc>(),
        }
    }
}

pub(super) struct Ring {
    map: *mut u8,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
    kind: RingKind,
    /// Our side's index, published by `publish` / `release`.
    local: u32,
}

impl Ring {
    pub(super) fn map(fd: RawFd, kind: RingKind, size: u32, off: &libc::xdp_ring_offset) -> io::Result<Ring> {
        let map_len = off.desc as usize + size as usize * kind.entry_size();
        // SAFETY: mapping the socket's ring at the kernel-given offset; the
        // kernel checks the length against the ring it allocated.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                kind.pgoff(),
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = p.cast::<u8>();
        // SAFETY: the offsets lie inside the mapping (kernel ABI).
        let (producer, consumer, desc) = unsafe {
            (
                base.add(off.producer as usize) as *const AtomicU32,
                base.add(off.consumer as usize) as *const AtomicU32,
                base.add(off.desc as usize),
            )
        };
        let mut r = Ring { map: base, map_len, producer, consumer, desc, mask: size - 1, kind, local: 0 };
        // Start from where the kernel is (0 on a fresh socket).
        r.local = match kind {
            RingKind::Fill => r.prod().load(Ordering::Relaxed),
            RingKind::Completion | RingKind::Rx => r.cons().load(Ordering::Relaxed),
        };
        Ok(r)
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping, 4-byte aligned (kernel ABI).
        unsafe { &*self.producer }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as in prod().
        unsafe { &*self.consumer }
    }

    /// Consumer side: entries the kernel has produced and we not yet taken.
    pub(super) fn available(&self) -> u32 {
        self.prod().load(Ordering::Acquire).wrapping_sub(self.local)
    }

    /// The same from a shared reference (no side effect either).
    pub(super) fn peek_available(&self) -> u32 {
        self.available()
    }

    /// Consumer side (RX ring): the next descriptor (addr, len). Call only
    /// after `available` said there is one.
    pub(super) fn pop_desc(&mut self) -> (u64, u32) {
        debug_assert_eq!(self.kind, RingKind::Rx);
        let i = (self.local & self.mask) as usize;
        // SAFETY: slot i is inside the descriptor array; the kernel
        // published it before the producer index we acquired.
        let d = unsafe { std::ptr::read_volatile(self.desc.add(i * self.kind.entry_size()).cast::<libc::xdp_desc>()) };
        self.local = self.local.wrapping_add(1);
        (d.addr, d.len)
    }

    /// Consumer side: gives the taken entries back to the kernel.
    pub(super) fn release(&mut self) {
        self.cons().store(self.local, Ordering::Release);
    }

    /// Producer side (fill ring): writes an address into the next slot. The
    /// caller never has more chunks than the ring has slots, so it cannot
    /// overrun the kernel's consumer.
    pub(super) fn push_addr(&mut self, addr: u64) {
        debug_assert_eq!(self.kind, RingKind::Fill);
        let i = (self.local & self.mask) as usize;
        // SAFETY: slot i is inside the array and not owned by the kernel
        // (it consumed it, or never had it).
        unsafe { std::ptr::write_volatile(self.desc.add(i * 8).cast::<u64>(), addr) };
        self.local = self.local.wrapping_add(1);
    }

    /// Producer side: makes the pushed entries visible to the kernel.
    pub(super) fn publish(&mut self) {
        self.prod().store(self.local, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in map(), unmapped once.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}
