//! A UE's downlink in order across the two paths (TS 29.244 5.2.1:
//! buffered packets are forwarded in order when the FAR turns to FORW).
//!
//! The fast path hands a buffering session's downlink packets to the
//! AF_XDP slow path and counts each in its bucket of UE addresses
//! (`slow_order` in bpf/far.h, an mmapped array); while a bucket's count
//! is above zero, the fast path hands that bucket's forwarded packets to
//! the slow path too, behind the ones still there. The slow path takes one
//! off per packet it took from its sockets once the flush that follows has
//! sent it ([`SlowOrder::sent`]). So when a session's FAR turns from BUFF
//! to FORW, the packets still in a socket's ring at that moment are not
//! overtaken by the first ones the fast path forwards: those queue behind
//! them until the slow path has caught up, and the fast path takes over
//! from there.
//!
//! A frame the kernel drops at a full ring is counted and never sent: its
//! bucket would stay on the slow path (in order, but slower) for good. The
//! I/O task sees such drops in the sockets' statistics and then
//! [`SlowOrder::reset`]s every bucket once it has emptied the rings.

use super::loader::Mapped;
use super::maps::MapError;
use std::sync::atomic::{AtomicU32, Ordering};

/// Buckets of UE addresses (bpf/far.h `SLOW_ORDER_BUCKETS`).
pub const BUCKETS: u32 = 65536;

/// The bucket of a UE address (host order): its low bits, so that a
/// contiguous pool shares no bucket below 65,536 addresses.
pub fn bucket(ue: u32) -> u32 {
    ue & (BUCKETS - 1)
}

/// The bucket of the destination of an IPv4 packet.
pub fn bucket_of_ipv4(ip: &[u8]) -> Option<u32> {
    let d: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
    Some(bucket(u32::from_be_bytes(d)))
}

/// The program's `slow_order` counts, mapped into this process.
pub struct SlowOrder {
    map: Mapped,
}

impl SlowOrder {
    pub(crate) fn new(map: aya::maps::Map) -> Result<Self, MapError> {
        let (map, entries) = Mapped::new("slow_order", map, 4)?;
        if entries != BUCKETS {
            return Err(MapError { map: "slow_order", msg: format!("{entries} entries, not {BUCKETS}") });
        }
        Ok(SlowOrder { map })
    }

    fn count(&self, bucket: u32) -> &AtomicU32 {
        let at = (bucket & (BUCKETS - 1)) as usize * Mapped::stride(4);
        // SAFETY: in bounds (masked), 8-aligned (page-aligned base, 8-octet
        // stride); the program updates it only atomically.
        unsafe { &*self.map.base().add(at).cast::<AtomicU32>() }
    }

    /// Packets of `bucket` the slow path holds or has yet to take.
    pub fn pending(&self, bucket: u32) -> u32 {
        self.count(bucket).load(Ordering::Acquire)
    }

    /// One packet of `bucket` that the slow path took from a socket has
    /// left (or was dropped). Never below zero (after a reset).
    pub fn sent(&self, bucket: u32) {
        let _ = self.count(bucket).fetch_update(Ordering::Release, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Every bucket back to zero: after frames were dropped at a full ring
    /// and the rings were emptied since (a frame an XDP run is handing over
    /// right now may then be overtaken once, never stuck).
    pub fn reset(&self) {
        for b in 0..BUCKETS {
            self.count(b).store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buckets_is_the_low_bits_of_the_destination() {
        let mut ip = [0u8; 20];
        ip[16..20].copy_from_slice(&[10, 45, 1, 2]);
        assert_eq!(bucket_of_ipv4(&ip), Some(0x0102));
        assert_eq!(bucket_of_ipv4(&ip[..19]), None);
        assert_ne!(bucket(0x0a2d_0001), bucket(0x0a2d_0002), "neighbours in a pool never share one");
    }
}
