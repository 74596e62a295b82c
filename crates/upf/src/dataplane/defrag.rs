//! Virtual reassembly of inner IPv4 fragments for SDF filters by port
//! (sans-I/O, time passed in).
//!
//! Only the first fragment (offset 0) carries the ports a port-based SDF
//! filter (TS 29.244 5.2.1, 8.2.5) looks at. So for sessions that have
//! such filters, fragments are grouped by (session, source, destination,
//! protocol, Identification) (the reassembly key of RFC 791 3.2): the
//! first fragment's PDR match is remembered, and later fragments follow
//! it. Fragments that arrive before the first are held, in arrival order,
//! until it comes, and are then forwarded unchanged right after it (no
//! reassembly into one packet). What is held counts against a budget per
//! session and in total (an entry's bookkeeping counts [`ENTRY_COST`]
//! octets, so a flood of keys cannot grow the table either); every entry
//! lives at most `timeout` from its first fragment, after which its held
//! fragments are dropped (`upf_frag_timeout`).

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Octets an entry's bookkeeping counts against the budgets.
pub const ENTRY_COST: usize = 64;

/// The largest IPv4 datagram: Total Length is 16 bits (RFC 791 3.1).
pub const MAX_DATAGRAM: usize = 65535;

/// Whether an IPv4 fragment stays within the largest datagram once put
/// back together: header + fragment offset x 8 + its data <= 65535 (RFC
/// 791 3.2). One that ends beyond it (the "ping of death") is never
/// forwarded or held. A packet too short to hold an IPv4 header is out too.
pub fn in_range(packet: &[u8]) -> bool {
    let (Some(&vihl), Some(total), Some(frag)) = (packet.first(), packet.get(2..4), packet.get(6..8)) else {
        return false;
    };
    let ihl = usize::from(vihl & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([total[0], total[1]])).min(packet.len());
    let offset = usize::from(u16::from_be_bytes([frag[0], frag[1]]) & 0x1fff) * 8;
    packet.len() >= 20 && ihl >= 20 && ihl + offset + total.saturating_sub(ihl) <= MAX_DATAGRAM
}

/// The RFC 791 reassembly key of a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragKey {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    pub id: u16,
}

/// Budgets and lifetime of the held fragments.
#[derive(Debug, Clone, Copy)]
pub struct DefragLimits {
    pub session_bytes: usize,
    pub total_bytes: usize,
    pub timeout: Duration,
}

/// What to do with a non-first fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Later {
    /// The first fragment was matched: to this PDR (`None`: to none).
    Follow(Option<u16>),
    /// Held until the first fragment arrives.
    Held,
    /// No room in the budget: drop it.
    Overflow,
    /// Its data would end beyond 65535 octets ([`in_range`]): drop it.
    OutOfRange,
}

#[derive(Debug)]
struct Entry {
    /// The first fragment's PDR, once it has been seen.
    decision: Option<Option<u16>>,
    held: Vec<Vec<u8>>,
    /// Octets counted for this entry (held fragments + ENTRY_COST).
    bytes: usize,
    deadline: Instant,
}

/// The fragment table of the data path.
#[derive(Debug)]
pub struct Defrag {
    limits: DefragLimits,
    entries: HashMap<(u64, FragKey), Entry>,
    /// Deadlines in creation order (so in deadline order); stale items
    /// (entries gone or replaced) are skipped.
    order: VecDeque<(Instant, u64, FragKey)>,
    per_session: HashMap<u64, usize>,
    total: usize,
}

impl Defrag {
    pub fn new(limits: DefragLimits) -> Self {
        Defrag { limits, entries: HashMap::new(), order: VecDeque::new(), per_session: HashMap::new(), total: 0 }
    }

    /// Octets counted for one session, and in total.
    pub fn usage(&self, seid: u64) -> (usize, usize) {
        (self.per_session.get(&seid).copied().unwrap_or(0), self.total)
    }

    /// Number of entries (keys being tracked).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn room(&self, seid: u64, n: usize) -> bool {
        self.usage(seid).0 + n <= self.limits.session_bytes && self.total + n <= self.limits.total_bytes
    }

    fn charge(&mut self, seid: u64, n: usize) {
        *self.per_session.entry(seid).or_default() += n;
        self.total += n;
    }

    fn credit(&mut self, seid: u64, n: usize) {
        if let Some(s) = self.per_session.get_mut(&seid) {
            *s -= n;
            if *s == 0 {
                self.per_session.remove(&seid);
            }
        }
        self.total -= n;
    }

    fn create(&mut self, now: Instant, seid: u64, key: FragKey) {
        let deadline = now + self.limits.timeout;
        self.entries.insert((seid, key), Entry { decision: None, held: vec![], bytes: ENTRY_COST, deadline });
        self.order.push_back((deadline, seid, key));
        self.charge(seid, ENTRY_COST);
    }

    /// The first fragment of `key` was matched to `decision`: remembered
    /// for the later ones (if there is room), and the fragments held so
    /// far are returned in arrival order, to go the same way.
    /// Call [`Self::expire`] first.
    pub fn first(&mut self, now: Instant, seid: u64, key: FragKey, decision: Option<u16>) -> Vec<Vec<u8>> {
        if !self.entries.contains_key(&(seid, key)) {
            if !self.room(seid, ENTRY_COST) {
                return vec![];
            }
            self.create(now, seid, key);
        }
        let e = self.entries.get_mut(&(seid, key)).expect("present");
        e.decision = Some(decision);
        let held = std::mem::take(&mut e.held);
        let freed = e.bytes - ENTRY_COST;
        e.bytes = ENTRY_COST;
        self.credit(seid, freed);
        held
    }

    /// A non-first fragment of `key`. Call [`Self::expire`] first.
    pub fn later(&mut self, now: Instant, seid: u64, key: FragKey, packet: &[u8]) -> Later {
        if !in_range(packet) {
            return Later::OutOfRange;
        }
        if let Some(e) = self.entries.get(&(seid, key)) {
            if let Some(d) = e.decision {
                return Later::Follow(d);
            }
        }
        let new = !self.entries.contains_key(&(seid, key));
        let need = packet.len() + if new { ENTRY_COST } else { 0 };
        if !self.room(seid, need) {
            return Later::Overflow;
        }
        if new {
            self.create(now, seid, key);
        }
        let e = self.entries.get_mut(&(seid, key)).expect("present");
        e.held.push(packet.to_vec());
        e.bytes += packet.len();
        self.charge(seid, packet.len());
        Later::Held
    }

    /// Drops the entries whose time is up; returns how many held
    /// fragments went with them.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut dropped = 0;
        while let Some(&(deadline, seid, key)) = self.order.front() {
            if deadline > now {
                break;
            }
            self.order.pop_front();
            if self.entries.get(&(seid, key)).is_some_and(|e| e.deadline == deadline) {
                dropped += self.remove(seid, key);
            }
        }
        dropped
    }

    fn remove(&mut self, seid: u64, key: FragKey) -> usize {
        let Some(e) = self.entries.remove(&(seid, key)) else { return 0 };
        self.credit(seid, e.bytes);
        e.held.len()
    }

    /// Forgets a session's fragments; returns how many were held.
    pub fn remove_session(&mut self, seid: u64) -> usize {
        let keys: Vec<FragKey> = self.entries.keys().filter(|(s, _)| *s == seid).map(|(_, k)| *k).collect();
        keys.into_iter().map(|k| self.remove(seid, k)).sum()
    }

    /// When [`Self::expire`] next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.order.front().map(|(d, _, _)| *d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: DefragLimits =
        DefragLimits { session_bytes: 1000, total_bytes: 1600, timeout: Duration::from_secs(2) };

    fn key(id: u16) -> FragKey {
        FragKey { src: Ipv4Addr::new(192, 0, 2, 1), dst: Ipv4Addr::new(10, 45, 0, 2), proto: 17, id }
    }

    /// An IPv4 fragment of `data` octets at `offset` (8-octet units).
    fn fragment(offset: u16, data: usize) -> Vec<u8> {
        let mut p = vec![0u8; 20 + data];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((20 + data) as u16).to_be_bytes());
        p[6..8].copy_from_slice(&offset.to_be_bytes());
        p
    }

    /// A non-first fragment of `len` octets in all.
    fn sized(len: usize) -> Vec<u8> {
        fragment(1, len - 20)
    }

    #[test]
    fn offsets_beyond_the_largest_datagram_are_dropped() {
        // 20 + 8184 * 8 + 43 = 65535 fits, one more octet does not.
        assert!(in_range(&fragment(8184, 43)) && !in_range(&fragment(8184, 44)));
        assert!(in_range(&fragment(8189, 3)) && !in_range(&fragment(8189, 4)));
        assert!(!in_range(&fragment(8191, 8)));
        assert!(!in_range(&fragment(8184, 1500)));
        assert!(!in_range(&[0x45, 0, 0]) && !in_range(&fragment(0, 0)[..19]));
        let now = Instant::now();
        let mut d = Defrag::new(LIMITS);
        assert_eq!(d.later(now, 1, key(9), &fragment(8191, 8)), Later::OutOfRange);
        assert!(d.is_empty(), "nothing held for it");
        // Nor does it follow a first fragment that was matched.
        d.first(now, 1, key(9), Some(1));
        assert_eq!(d.later(now, 1, key(9), &fragment(8190, 100)), Later::OutOfRange);
        assert_eq!(d.later(now, 1, key(9), &fragment(100, 100)), Later::Follow(Some(1)));
    }

    #[test]
    fn held_until_first_then_followed() {
        let now = Instant::now();
        let mut d = Defrag::new(LIMITS);
        assert_eq!(d.later(now, 1, key(7), &sized(100)), Later::Held);
        assert_eq!(d.later(now, 1, key(7), &sized(50)), Later::Held);
        assert_eq!(d.usage(1), (150 + ENTRY_COST, 150 + ENTRY_COST));
        assert_eq!(d.first(now, 1, key(7), Some(3)), vec![sized(100), sized(50)]);
        assert_eq!(d.usage(1), (ENTRY_COST, ENTRY_COST));
        assert_eq!(d.later(now, 1, key(7), &sized(20)), Later::Follow(Some(3)));
        // Another session with the same key knows nothing of it.
        assert_eq!(d.later(now, 2, key(7), &sized(20)), Later::Held);
    }

    #[test]
    fn budgets_and_timeout() {
        let t0 = Instant::now();
        let mut d = Defrag::new(LIMITS);
        assert_eq!(d.later(t0, 1, key(1), &sized(900)), Later::Held);
        assert_eq!(d.later(t0, 1, key(1), &sized(100)), Later::Overflow, "session budget");
        assert_eq!(d.later(t0, 2, key(1), &sized(500)), Later::Held);
        assert_eq!(d.later(t0, 3, key(1), &sized(20)), Later::Overflow, "total budget");
        assert_eq!(d.poll_timeout(), Some(t0 + LIMITS.timeout));
        assert_eq!(d.expire(t0 + Duration::from_millis(1999)), 0);
        assert_eq!(d.expire(t0 + LIMITS.timeout), 2);
        assert_eq!((d.usage(1), d.len()), ((0, 0), 0));
        assert_eq!(d.later(t0 + LIMITS.timeout, 3, key(1), &sized(20)), Later::Held);
        assert_eq!(d.remove_session(3), 1);
        assert_eq!(d.usage(3), (0, 0));
    }
}
