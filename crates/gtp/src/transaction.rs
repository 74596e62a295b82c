//! Sans-I/O transaction layer (TS 29.274 7.6; the same rules serve PFCP,
//! TS 29.244 6.4, with T1/N1).
//!
//! Requester side: each request gets a 24-bit sequence number, is resent
//! every T3 up to N3 times and then fails. Responder side: a request whose
//! (peer, sequence number) was already answered gets the cached answer
//! again without being processed again; the cache entry lives T3 x N3,
//! and the cache holds at most [`Transactions::max_cached`] entries (the
//! oldest is evicted first), so a peer sending distinct sequence numbers
//! cannot make it grow without bound.
//!
//! No clock and no socket: time comes in as `now`, datagrams go out through
//! [`Transactions::poll_transmit`], and [`Transactions::poll_timeout`] says
//! when to call [`Transactions::handle_timeout`] next.

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// T3-RESPONSE and N3-REQUESTS (TS 29.274 7.6), defaults 3 s and 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionConfig {
    pub t3: Duration,
    pub n3: u32,
}

impl Default for TransactionConfig {
    fn default() -> Self {
        TransactionConfig { t3: Duration::from_secs(3), n3: 3 }
    }
}

/// What to do with a received request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// Not seen before: process it and call [`Transactions::answer`].
    New,
    /// Already answered: the cached answer has been queued for sending again.
    Duplicate,
    /// Seen and still being processed: drop this copy.
    InProgress,
}

struct Outstanding<P, T> {
    peer: P,
    bytes: Bytes,
    retransmissions: u32,
    token: T,
}

enum Answer {
    InProgress,
    Sent(Bytes),
}

struct Cached {
    answer: Answer,
    expires: Instant,
}

/// Entries the duplicate cache holds at most unless told otherwise
/// ([`Transactions::with_max_cached`]): at 30,000 requests per second this
/// still covers T3 = 3 s (a first retransmission finds its answer), and
/// at a few hundred octets per entry it stays in the tens of MB.
pub const DEFAULT_MAX_CACHED: usize = 131_072;

/// Counters of the transaction layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransactionStats {
    pub retransmissions: u64,
    pub timeouts: u64,
    pub duplicates_answered: u64,
    pub duplicates_in_progress: u64,
    pub unmatched_responses: u64,
    /// Cache entries dropped before their time because the cache was full.
    pub evicted: u64,
}

pub struct Transactions<P, T> {
    cfg: TransactionConfig,
    next_seq: u32,
    /// The bits every sequence number carries, and those that count
    /// ([`Self::with_seq_prefix`]; by default none and all 24).
    seq_base: u32,
    seq_mask: u32,
    outstanding: HashMap<u32, Outstanding<P, T>>,
    /// (deadline, seq, retransmissions at arming time); stale entries skipped.
    retx: VecDeque<(Instant, u32, u32)>,
    answered: HashMap<(P, u32), Cached>,
    /// Insertion order of `answered` (entries whose key was updated or
    /// removed since are stale and skipped): expiry and eviction order.
    expiry: VecDeque<(Instant, P, u32)>,
    max_cached: usize,
    transmits: VecDeque<(P, Bytes)>,
    timeouts: VecDeque<(u32, T)>,
    pub stats: TransactionStats,
}

const SEQ_MASK: u32 = 0x00ff_ffff;

impl<P: Copy + Eq + Hash, T> Transactions<P, T> {
    pub fn new(cfg: TransactionConfig) -> Self {
        Self::with_first_seq(cfg, 1)
    }

    pub fn with_first_seq(cfg: TransactionConfig, first: u32) -> Self {
        Transactions {
            cfg,
            next_seq: first & SEQ_MASK,
            seq_base: 0,
            seq_mask: SEQ_MASK,
            outstanding: HashMap::new(),
            retx: VecDeque::new(),
            answered: HashMap::new(),
            expiry: VecDeque::new(),
            max_cached: DEFAULT_MAX_CACHED,
            transmits: VecDeque::new(),
            timeouts: VecDeque::new(),
            stats: TransactionStats::default(),
        }
    }

    /// Bounds the duplicate cache to `max` entries (at least 1).
    pub fn with_max_cached(mut self, max: usize) -> Self {
        self.max_cached = max.max(1);
        self
    }

    /// Numbers requests within one block of 2^16 of the 24-bit space,
    /// `prefix` their top octet. Senders behind one address (the elastic
    /// MME's hosts behind its front end's S11 address) then never use the
    /// same number towards a peer that tells transactions apart by sender
    /// address and number (TS 29.274 7.6), and the front end routes the
    /// responses by the number alone.
    pub fn with_seq_prefix(mut self, prefix: u8) -> Self {
        self.seq_base = u32::from(prefix) << 16;
        self.seq_mask = 0xffff;
        self.next_seq &= self.seq_mask;
        self
    }

    pub fn config(&self) -> TransactionConfig {
        self.cfg
    }

    /// The most entries the duplicate cache holds.
    pub fn max_cached(&self) -> usize {
        self.max_cached
    }

    /// Entries in the duplicate cache now.
    pub fn cached(&self) -> usize {
        self.answered.len()
    }

    /// A fresh 24-bit sequence number not used by an outstanding request.
    pub fn next_seq(&mut self) -> u32 {
        loop {
            let s = self.seq_base | self.next_seq;
            self.next_seq = (self.next_seq + 1) & self.seq_mask;
            if !self.outstanding.contains_key(&s) {
                return s;
            }
        }
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Sends a request numbered `seq` (from [`Self::next_seq`]) and arms T3.
    pub fn send_request(&mut self, now: Instant, peer: P, seq: u32, bytes: impl Into<Bytes>, token: T) {
        let bytes = bytes.into();
        self.transmits.push_back((peer, bytes.clone()));
        self.outstanding.insert(seq, Outstanding { peer, bytes, retransmissions: 0, token });
        self.retx.push_back((now + self.cfg.t3, seq, 0));
    }

    /// A response numbered `seq` arrived from `peer`: the token of the
    /// request it answers, or `None` for a late or unknown response.
    pub fn on_response(&mut self, peer: P, seq: u32) -> Option<T> {
        match self.outstanding.get(&seq) {
            Some(o) if o.peer == peer => self.outstanding.remove(&seq).map(|o| o.token),
            _ => {
                self.stats.unmatched_responses += 1;
                None
            }
        }
    }

    /// Gives up on an outstanding request without a timeout event.
    pub fn cancel(&mut self, seq: u32) -> Option<T> {
        self.outstanding.remove(&seq).map(|o| o.token)
    }

    /// A request numbered `seq` arrived from `peer` (TS 29.274 7.6).
    pub fn on_request(&mut self, now: Instant, peer: P, seq: u32) -> Incoming {
        match self.answered.get(&(peer, seq)) {
            Some(Cached { answer: Answer::Sent(bytes), .. }) => {
                self.stats.duplicates_answered += 1;
                self.transmits.push_back((peer, bytes.clone()));
                Incoming::Duplicate
            }
            Some(Cached { answer: Answer::InProgress, .. }) => {
                self.stats.duplicates_in_progress += 1;
                Incoming::InProgress
            }
            None => {
                self.cache(now, peer, seq, Answer::InProgress);
                Incoming::New
            }
        }
    }

    /// Forgets request (`peer`, `seq`) still being processed, which will not
    /// be answered (dropped for lack of room, or its processor is gone): a
    /// retransmission of it is then taken as new.
    pub fn abandon(&mut self, peer: P, seq: u32) {
        if matches!(self.answered.get(&(peer, seq)), Some(Cached { answer: Answer::InProgress, .. })) {
            self.answered.remove(&(peer, seq));
        }
    }

    /// Sends the answer to request (`peer`, `seq`) and keeps it for duplicates.
    pub fn answer(&mut self, now: Instant, peer: P, seq: u32, bytes: impl Into<Bytes>) {
        let bytes = bytes.into();
        self.transmits.push_back((peer, bytes.clone()));
        self.cache(now, peer, seq, Answer::Sent(bytes));
    }

    /// Keeps `answer` for (`peer`, `seq`), evicting the oldest entries
    /// while the cache is full.
    fn cache(&mut self, now: Instant, peer: P, seq: u32, answer: Answer) {
        let expires = now + self.cache_lifetime();
        if !self.answered.contains_key(&(peer, seq)) {
            while self.answered.len() >= self.max_cached {
                if !self.pop_oldest() {
                    break;
                }
                self.stats.evicted += 1;
            }
        }
        self.answered.insert((peer, seq), Cached { answer, expires });
        self.expiry.push_back((expires, peer, seq));
        // Each live entry has at most two positions in `expiry` (asked,
        // answered); stale ones beyond that are dropped here.
        while self.expiry.len() > 2 * self.max_cached + 2 {
            if let Some((e, p, s)) = self.expiry.pop_front() {
                if self.answered.get(&(p, s)).is_some_and(|c| c.expires == e) {
                    self.answered.remove(&(p, s));
                    self.stats.evicted += 1;
                }
            }
        }
    }

    /// Removes the oldest live cache entry; false if there is none.
    fn pop_oldest(&mut self) -> bool {
        while let Some((e, p, s)) = self.expiry.pop_front() {
            if self.answered.get(&(p, s)).is_some_and(|c| c.expires == e) {
                self.answered.remove(&(p, s));
                return true;
            }
        }
        false
    }

    fn cache_lifetime(&self) -> Duration {
        self.cfg.t3 * self.cfg.n3.max(1)
    }

    /// Retransmits due requests, fails those past N3, expires the cache.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(deadline, seq, armed)) = self.retx.front() {
            if deadline > now {
                break;
            }
            self.retx.pop_front();
            let Some(o) = self.outstanding.get_mut(&seq) else {
                continue;
            };
            if o.retransmissions != armed {
                continue;
            }
            if o.retransmissions < self.cfg.n3 {
                o.retransmissions += 1;
                self.stats.retransmissions += 1;
                self.transmits.push_back((o.peer, o.bytes.clone()));
                self.retx.push_back((now + self.cfg.t3, seq, o.retransmissions));
            } else if let Some(o) = self.outstanding.remove(&seq) {
                self.stats.timeouts += 1;
                self.timeouts.push_back((seq, o.token));
            }
        }
        while let Some(&(expires, peer, seq)) = self.expiry.front() {
            if expires > now {
                break;
            }
            self.expiry.pop_front();
            if self.answered.get(&(peer, seq)).is_some_and(|c| c.expires == expires) {
                self.answered.remove(&(peer, seq));
            }
        }
    }

    /// When [`Self::handle_timeout`] should next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let a = self.retx.front().map(|e| e.0);
        let b = self.expiry.front().map(|e| e.0);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next datagram to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(P, Bytes)> {
        self.transmits.pop_front()
    }

    /// The next request that failed after N3 retransmissions: (seq, token).
    #[must_use]
    pub fn poll_timed_out(&mut self) -> Option<(u32, T)> {
        self.timeouts.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TransactionConfig {
        TransactionConfig { t3: Duration::from_secs(3), n3: 3 }
    }

    fn drain<P: Copy + Eq + Hash, T>(t: &mut Transactions<P, T>) -> Vec<(P, Vec<u8>)> {
        std::iter::from_fn(|| t.poll_transmit()).map(|(p, b)| (p, b.to_vec())).collect()
    }

    #[test]
    fn request_is_retransmitted_n3_times_then_times_out() {
        let t0 = Instant::now();
        let mut t = Transactions::<u8, &str>::new(cfg());
        let seq = t.next_seq();
        t.send_request(t0, 1, seq, vec![9], "csr");
        assert_eq!(drain(&mut t), vec![(1, vec![9])]);
        for i in 1..=3 {
            let now = t.poll_timeout().unwrap();
            assert_eq!(now, t0 + Duration::from_secs(3 * i));
            t.handle_timeout(now);
            assert_eq!(drain(&mut t), vec![(1, vec![9])], "retransmission {i}");
            assert!(t.poll_timed_out().is_none());
        }
        let now = t.poll_timeout().unwrap();
        t.handle_timeout(now);
        assert!(drain(&mut t).is_empty());
        assert_eq!(t.poll_timed_out(), Some((seq, "csr")));
        assert_eq!(t.stats.retransmissions, 3);
        assert_eq!(t.outstanding(), 0);
        // A late answer matches nothing.
        assert_eq!(t.on_response(1, seq), None);
    }

    #[test]
    fn response_stops_retransmission() {
        let t0 = Instant::now();
        let mut t = Transactions::<u8, u32>::new(cfg());
        let seq = t.next_seq();
        t.send_request(t0, 1, seq, vec![1], 77);
        let _ = drain(&mut t);
        assert_eq!(t.on_response(2, seq), None, "wrong peer");
        assert_eq!(t.on_response(1, seq), Some(77));
        t.handle_timeout(t0 + Duration::from_secs(30));
        assert!(drain(&mut t).is_empty());
        assert!(t.poll_timed_out().is_none());
    }

    #[test]
    fn duplicate_request_gets_cached_answer_until_expiry() {
        let t0 = Instant::now();
        let mut t = Transactions::<u8, ()>::new(cfg());
        assert_eq!(t.on_request(t0, 5, 100), Incoming::New);
        assert_eq!(t.on_request(t0, 5, 100), Incoming::InProgress);
        t.answer(t0, 5, 100, vec![42]);
        assert_eq!(drain(&mut t), vec![(5, vec![42])]);
        let later = t0 + Duration::from_secs(8);
        t.handle_timeout(later);
        assert_eq!(t.on_request(later, 5, 100), Incoming::Duplicate);
        assert_eq!(drain(&mut t), vec![(5, vec![42])]);
        // Another peer with the same sequence number is a new request.
        assert_eq!(t.on_request(later, 6, 100), Incoming::New);
        // After T3 x N3 the entry is gone.
        let expired = t0 + Duration::from_secs(9);
        t.handle_timeout(expired);
        assert_eq!(t.on_request(expired, 5, 100), Incoming::New);
        assert_eq!(t.stats.duplicates_answered, 1);
    }

    #[test]
    fn a_flood_of_distinct_requests_never_grows_the_cache_past_its_bound() {
        let t0 = Instant::now();
        let mut t = Transactions::<u8, ()>::new(cfg()).with_max_cached(100);
        let mut most = 0;
        for seq in 0..10_000u32 {
            // Within one cache lifetime, so nothing expires by time.
            let now = t0 + Duration::from_micros(seq as u64);
            assert_eq!(t.on_request(now, 1, seq), Incoming::New);
            if seq % 2 == 0 {
                t.answer(now, 1, seq, vec![seq as u8]);
            }
            t.handle_timeout(now);
            most = most.max(t.cached());
            assert!(t.expiry.len() <= 2 * 100 + 2, "the order queue is bounded too");
        }
        assert_eq!(most, 100);
        assert_eq!(t.stats.evicted, 10_000 - 100);
        // The oldest went first: the newest 100 are still answered from cache.
        let _ = drain(&mut t);
        let now = t0 + Duration::from_millis(20);
        assert_eq!(t.on_request(now, 1, 9_998), Incoming::Duplicate);
        assert_eq!(drain(&mut t), vec![(1, vec![(9_998u32) as u8])]);
        assert_eq!(t.on_request(now, 1, 9_901), Incoming::InProgress);
        assert_eq!(t.on_request(now, 1, 9_899), Incoming::New, "evicted");
        assert_eq!(t.cached(), 100);
    }

    #[test]
    fn a_prefix_keeps_sequence_numbers_in_its_block() {
        let mut t = Transactions::<u8, ()>::with_first_seq(cfg(), 0xfffe).with_seq_prefix(7);
        let a = t.next_seq();
        t.send_request(Instant::now(), 1, a, vec![], ());
        let seqs = [a, t.next_seq(), t.next_seq()];
        // Wrapping within the block, never into the neighbours'.
        assert_eq!(seqs, [0x07_fffe, 0x07_ffff, 0x07_0000]);
        for _ in 0..0x1_0000 {
            let s = t.next_seq();
            assert_eq!(s >> 16, 7);
            assert_ne!(s, a, "outstanding: skipped");
        }
    }

    #[test]
    fn sequence_numbers_wrap_at_24_bits_and_skip_outstanding() {
        let mut t = Transactions::<u8, ()>::with_first_seq(cfg(), 0x00ff_fffe);
        let t0 = Instant::now();
        let a = t.next_seq();
        t.send_request(t0, 1, a, vec![], ());
        assert_eq!(t.next_seq(), 0x00ff_ffff);
        assert_eq!(t.next_seq(), 0);
        let mut u = Transactions::<u8, ()>::with_first_seq(cfg(), 5);
        let s = u.next_seq();
        u.send_request(t0, 1, s, vec![], ());
        u.next_seq = 5;
        assert_eq!(u.next_seq(), 6);
    }
}
