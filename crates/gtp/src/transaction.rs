//! Sans-I/O transaction layer (TS 29.274 7.6; the same rules serve PFCP,
//! TS 29.244 6.4, with T1/N1).
//!
//! Requester side: each request gets a 24-bit sequence number, is resent
//! every T3 up to N3 times and then fails; a response ends it only if its
//! message type answers the request's (a late answer to an earlier request
//! under the same number does not). Responder side: a request whose
//! (peer, sequence number) was already answered gets the cached answer
//! again without being processed again, if it repeats that request octet
//! for octet (a retransmission is the same message, TS 29.274 7.6,
//! TS 29.244 6.4); another request under a number the peer has reused is
//! new. The cache entry lives T3 x N3, and the cache holds at most
//! [`Transactions::max_cached`] entries (the oldest is evicted first), so
//! a peer sending distinct sequence numbers cannot make it grow without
//! bound.
//!
//! No clock and no socket: time comes in as `now`, datagrams go out through
//! [`Transactions::poll_transmit`], and [`Transactions::poll_timeout`] says
//! when to call [`Transactions::handle_timeout`] next.

use bytes::Bytes;
use mobicore_common::counters::Counters;
use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
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
    /// The request's [`fingerprint`]; `None` if answered unseen (any
    /// request under the number is a retransmission of it).
    request: Option<u64>,
}

/// What tells a retransmission from another request under the same number.
fn fingerprint(request: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    request.hash(&mut h);
    h.finish()
}

/// Whether a response of type `response` answers `request`: in GTPv2-C and
/// PFCP alike the message type is the header's second octet, and each
/// response type follows its request's (TS 29.274 6.1, TS 29.244 7.3).
fn answers(request: &[u8], response: u8) -> bool {
    request.get(1).is_some_and(|&t| t.wrapping_add(1) == response)
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
    /// Responses under an outstanding number whose type does not answer
    /// its request (a late answer to an earlier request under it), ignored.
    pub mismatched_responses: u64,
    /// Requests under a (peer, number) answered before that are not that
    /// request again (the peer's numbers came round), taken as new.
    pub reused_numbers: u64,
    /// Cache entries dropped before their time because the cache was full.
    pub evicted: u64,
}

pub struct Transactions<P, T> {
    cfg: TransactionConfig,
    next_seq: u32,
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

/// The counters a protocol's [`TransactionStats`] are mirrored under
/// ([`TransactionStats::count_since`]).
#[derive(Debug, Clone, Copy)]
pub struct StatNames {
    pub retransmissions: &'static str,
    pub mismatched_responses: &'static str,
    pub reused_numbers: &'static str,
    pub evicted: &'static str,
}

pub const S11_STATS: StatNames = StatNames {
    retransmissions: "s11_retransmissions",
    mismatched_responses: "s11_mismatched_response",
    reused_numbers: "s11_reused_sequence_number",
    evicted: "s11_duplicate_cache_evicted",
};

pub const PFCP_STATS: StatNames = StatNames {
    retransmissions: "pfcp_retransmissions",
    mismatched_responses: "pfcp_mismatched_response",
    reused_numbers: "pfcp_reused_sequence_number",
    evicted: "pfcp_duplicate_cache_evicted",
};

impl TransactionStats {
    /// Adds to `counters` what changed since `seen` (which becomes these
    /// stats) of what callers do not count themselves.
    pub fn count_since(&self, seen: &mut TransactionStats, counters: &Counters, names: &StatNames) {
        for (now, before, name) in [
            (self.retransmissions, seen.retransmissions, names.retransmissions),
            (self.mismatched_responses, seen.mismatched_responses, names.mismatched_responses),
            (self.reused_numbers, seen.reused_numbers, names.reused_numbers),
            (self.evicted, seen.evicted, names.evicted),
        ] {
            if now > before {
                counters.add(name, now - before);
            }
        }
        *seen = *self;
    }
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
            let s = self.next_seq;
            self.next_seq = (s + 1) & SEQ_MASK;
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

    /// A response of type `msg_type` numbered `seq` arrived from `peer`:
    /// the token of the request it answers, or `None` for a late or
    /// unknown response (the request, if any, stays outstanding).
    pub fn on_response(&mut self, peer: P, seq: u32, msg_type: u8) -> Option<T> {
        match self.outstanding.get(&seq) {
            Some(o) if o.peer == peer && answers(&o.bytes, msg_type) => self.outstanding.remove(&seq).map(|o| o.token),
            Some(o) if o.peer == peer => {
                self.stats.mismatched_responses += 1;
                None
            }
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

    /// Request `request`, numbered `seq`, arrived from `peer` (TS 29.274 7.6).
    pub fn on_request(&mut self, now: Instant, peer: P, seq: u32, request: &[u8]) -> Incoming {
        let print = fingerprint(request);
        match self.answered.get(&(peer, seq)) {
            Some(Cached { answer: Answer::Sent(bytes), request, .. }) if request.is_none_or(|r| r == print) => {
                self.stats.duplicates_answered += 1;
                self.transmits.push_back((peer, bytes.clone()));
                Incoming::Duplicate
            }
            Some(Cached { answer: Answer::InProgress, request, .. }) if request.is_none_or(|r| r == print) => {
                self.stats.duplicates_in_progress += 1;
                Incoming::InProgress
            }
            held => {
                if held.is_some() {
                    self.stats.reused_numbers += 1;
                }
                self.cache(now, peer, seq, Answer::InProgress, Some(print));
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
        // The request answered is the one seen under this number (none
        // seen: a request the caller answered without asking, matched by
        // number alone).
        let request = self.answered.get(&(peer, seq)).and_then(|c| c.request);
        self.cache(now, peer, seq, Answer::Sent(bytes), request);
    }

    /// Keeps `answer` for (`peer`, `seq`), evicting the oldest entries
    /// while the cache is full.
    fn cache(&mut self, now: Instant, peer: P, seq: u32, answer: Answer, request: Option<u64>) {
        let expires = now + self.cache_lifetime();
        if !self.answered.contains_key(&(peer, seq)) {
            while self.answered.len() >= self.max_cached {
                if !self.pop_oldest() {
                    break;
                }
                self.stats.evicted += 1;
            }
        }
        self.answered.insert((peer, seq), Cached { answer, expires, request });
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

    /// A request as the tests' peers send it (type 34, Modify Bearer).
    const REQ: &[u8] = &[0x48, 34, 0, 4];

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
        assert_eq!(t.on_response(1, seq, 10), None);
    }

    #[test]
    fn response_stops_retransmission() {
        let t0 = Instant::now();
        let mut t = Transactions::<u8, u32>::new(cfg());
        let seq = t.next_seq();
        t.send_request(t0, 1, seq, vec![0x48, 170], 77);
        let _ = drain(&mut t);
        assert_eq!(t.on_response(2, seq, 171), None, "wrong peer");
        assert_eq!(t.on_response(1, seq, 35), None, "not an answer to it");
        assert_eq!(t.on_response(1, seq, 171), Some(77));
        assert_eq!((t.stats.mismatched_responses, t.stats.unmatched_responses), (1, 1));
        t.handle_timeout(t0 + Duration::from_secs(30));
        assert!(drain(&mut t).is_empty());
        assert!(t.poll_timed_out().is_none());
    }

    #[test]
    fn duplicate_request_gets_cached_answer_until_expiry() {
        let t0 = Instant::now();
        let mut t = Transactions::<u8, ()>::new(cfg());
        assert_eq!(t.on_request(t0, 5, 100, REQ), Incoming::New);
        assert_eq!(t.on_request(t0, 5, 100, REQ), Incoming::InProgress);
        t.answer(t0, 5, 100, vec![42]);
        assert_eq!(drain(&mut t), vec![(5, vec![42])]);
        let later = t0 + Duration::from_secs(8);
        t.handle_timeout(later);
        assert_eq!(t.on_request(later, 5, 100, REQ), Incoming::Duplicate);
        assert_eq!(drain(&mut t), vec![(5, vec![42])]);
        // Another peer with the same sequence number is a new request.
        assert_eq!(t.on_request(later, 6, 100, REQ), Incoming::New);
        // After T3 x N3 the entry is gone.
        let expired = t0 + Duration::from_secs(9);
        t.handle_timeout(expired);
        assert_eq!(t.on_request(expired, 5, 100, REQ), Incoming::New);
        assert_eq!(t.stats.duplicates_answered, 1);
    }

    #[test]
    fn another_request_under_a_number_the_peer_reused_is_new() {
        let t0 = Instant::now();
        let mut t = Transactions::<u8, ()>::new(cfg());
        assert_eq!(t.on_request(t0, 5, 100, REQ), Incoming::New);
        t.answer(t0, 5, 100, vec![42]);
        let _ = drain(&mut t);
        // The peer's numbers came round within the cache's lifetime: a
        // Release Access Bearers Request under the Modify Bearer's number.
        let later = t0 + Duration::from_secs(5);
        let rab: &[u8] = &[0x48, 170, 0, 4];
        assert_eq!(t.on_request(later, 5, 100, rab), Incoming::New, "not answered with the other's answer");
        assert!(drain(&mut t).is_empty());
        assert_eq!(t.on_request(later, 5, 100, rab), Incoming::InProgress);
        t.answer(later, 5, 100, vec![43]);
        let _ = drain(&mut t);
        // Its retransmission is answered with its own answer.
        assert_eq!(t.on_request(later, 5, 100, rab), Incoming::Duplicate);
        assert_eq!(drain(&mut t), vec![(5, vec![43])]);
        assert_eq!((t.stats.reused_numbers, t.stats.duplicates_answered), (1, 1));
        // One answered without being asked is matched by number alone.
        t.answer(later, 5, 7, vec![44]);
        let _ = drain(&mut t);
        assert_eq!(t.on_request(later, 5, 7, rab), Incoming::Duplicate);
    }

    #[test]
    fn a_flood_of_distinct_requests_never_grows_the_cache_past_its_bound() {
        let t0 = Instant::now();
        let mut t = Transactions::<u8, ()>::new(cfg()).with_max_cached(100);
        let mut most = 0;
        for seq in 0..10_000u32 {
            // Within one cache lifetime, so nothing expires by time.
            let now = t0 + Duration::from_micros(seq as u64);
            assert_eq!(t.on_request(now, 1, seq, REQ), Incoming::New);
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
        assert_eq!(t.on_request(now, 1, 9_998, REQ), Incoming::Duplicate);
        assert_eq!(drain(&mut t), vec![(1, vec![(9_998u32) as u8])]);
        assert_eq!(t.on_request(now, 1, 9_901, REQ), Incoming::InProgress);
        assert_eq!(t.on_request(now, 1, 9_899, REQ), Incoming::New, "evicted");
        assert_eq!(t.cached(), 100);
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
