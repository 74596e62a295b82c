//! The sending half of an association: fragmentation, TSN assignment, the
//! retransmission queue, SACK processing with fast retransmit, and congestion
//! control (RFC 9260 6.1, 6.2.1, 6.3.3, 7.2).

use bytes::Bytes;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::rx::unwrap_tsn;
use crate::wire::chunk::DATA_HEADER_LEN;
use crate::wire::{pad4, ChunkRepr, DataRepr, SackRepr};

/// Upper bound for cwnd, so that an application-limited sender cannot grow it forever.
const MAX_CWND: usize = 16 << 20;

struct OutChunk {
    tsn: u64,
    stream: u16,
    ssn: u16,
    ppid: u32,
    begin: bool,
    end: bool,
    data: Bytes,
    tx_count: u32,
    gap_acked: bool,
    /// The SACK (by `Sender::sacks`) that last gap-acked it.
    gap_acked_by: u64,
    /// Marked for retransmission (not in flight).
    rtx: bool,
    miss: u8,
    fast_retransmitted: bool,
}

impl OutChunk {
    fn wire_len(&self) -> usize {
        pad4(DATA_HEADER_LEN + self.data.len())
    }
}

/// What a SACK changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SackOutcome {
    pub cum_advanced: bool,
    pub rtt: Option<Duration>,
    pub fast_retransmit: bool,
}

pub(crate) struct Sender {
    next_tsn: u64,
    cum_acked: u64,
    /// Chunks not yet cumulatively acked, in TSN order; the first `n_sent` were sent.
    q: VecDeque<OutChunk>,
    n_sent: usize,
    rtx_count: usize,
    flight: usize,
    cwnd: usize,
    ssthresh: usize,
    partial_bytes_acked: usize,
    peer_rwnd: usize,
    mtu: usize,
    next_ssn: Vec<u16>,
    fast_recovery_exit: Option<u64>,
    rtt_probe: Option<(u64, Instant)>,
    /// Let the next packet of fast retransmissions ignore cwnd (RFC 9260 7.2.4).
    fast_rtx_bypass: bool,
    /// SACKs processed; and whether the last one had Gap Ack Blocks.
    sacks: u64,
    last_sack_gaps: bool,
}

impl Sender {
    pub fn new(initial_tsn: u32, out_streams: u16, peer_rwnd: u32, mtu: usize) -> Self {
        let next_tsn = (1u64 << 32) + initial_tsn as u64;
        Sender {
            next_tsn,
            cum_acked: next_tsn - 1,
            q: VecDeque::new(),
            n_sent: 0,
            rtx_count: 0,
            flight: 0,
            // RFC 9260 7.2.1: min(4*MTU, max(2*MTU, 4404)).
            cwnd: (4 * mtu).min((2 * mtu).max(4404)),
            ssthresh: peer_rwnd as usize,
            partial_bytes_acked: 0,
            peer_rwnd: peer_rwnd as usize,
            mtu,
            next_ssn: vec![0; out_streams as usize],
            fast_recovery_exit: None,
            rtt_probe: None,
            fast_rtx_bypass: false,
            sacks: 0,
            last_sack_gaps: false,
        }
    }

    pub fn set_peer(&mut self, out_streams: u16, peer_rwnd: u32) {
        self.next_ssn = vec![0; out_streams as usize];
        self.peer_rwnd = peer_rwnd as usize;
        self.ssthresh = peer_rwnd as usize;
    }

    pub fn out_streams(&self) -> u16 {
        self.next_ssn.len() as u16
    }

    /// Largest user data per DATA chunk.
    pub fn max_fragment(&self) -> usize {
        self.mtu - crate::wire::packet::HEADER_LEN - DATA_HEADER_LEN
    }

    /// Queue a user message, fragmented to the MTU (RFC 9260 6.9). The caller
    /// checked the stream and that `data` is not empty.
    pub fn enqueue(&mut self, stream: u16, ppid: u32, data: Bytes) {
        let ssn = self.next_ssn[stream as usize];
        self.next_ssn[stream as usize] = ssn.wrapping_add(1);
        let frag = self.max_fragment();
        let n = data.len().div_ceil(frag);
        for i in 0..n {
            let part = data.slice(i * frag..((i + 1) * frag).min(data.len()));
            self.q.push_back(OutChunk {
                tsn: self.next_tsn,
                stream,
                ssn,
                ppid,
                begin: i == 0,
                end: i + 1 == n,
                data: part,
                tx_count: 0,
                gap_acked: false,
                gap_acked_by: 0,
                rtx: false,
                miss: 0,
                fast_retransmitted: false,
            });
            self.next_tsn += 1;
        }
    }

    /// Nothing queued or unacknowledged.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Some sent chunk is not yet cumulatively acked.
    pub fn has_outstanding(&self) -> bool {
        self.n_sent > 0
    }

    pub fn has_sendable(&self) -> bool {
        self.rtx_count > 0 || self.n_sent < self.q.len()
    }

    /// The peer's last advertised window (what a SHUTDOWN, which carries none, leaves as is).
    pub fn peer_a_rwnd(&self) -> u32 {
        (self.peer_rwnd + self.flight).min(u32::MAX as usize) as u32
    }

    fn may_send(&self, size: usize, bypass: bool) -> bool {
        bypass || self.flight == 0 || self.flight + size <= self.cwnd
    }

    fn emit(c: &OutChunk, buf: &mut Vec<u8>) {
        let r = ChunkRepr::Data(DataRepr {
            unordered: false,
            begin: c.begin,
            end: c.end,
            tsn: c.tsn as u32,
            stream_id: c.stream,
            ssn: c.ssn,
            ppid: c.ppid,
            data: &c.data,
        });
        let at = buf.len();
        buf.resize(at + r.buffer_len(), 0);
        r.emit(&mut buf[at..]);
    }

    /// Append DATA chunks (retransmissions first) while they fit the packet,
    /// cwnd and the peer's window. Returns how many were added.
    pub fn fill(&mut self, now: Instant, buf: &mut Vec<u8>) -> usize {
        let mut added = 0;
        if self.rtx_count > 0 {
            let bypass = std::mem::take(&mut self.fast_rtx_bypass);
            for i in 0..self.n_sent {
                if self.rtx_count == 0 {
                    break;
                }
                let size = self.q[i].wire_len();
                if !self.q[i].rtx {
                    continue;
                }
                if buf.len() + size > self.mtu || !self.may_send(size, bypass) {
                    return added;
                }
                let c = &mut self.q[i];
                c.rtx = false;
                c.tx_count += 1;
                c.miss = 0;
                self.rtx_count -= 1;
                self.flight += size;
                Self::emit(&self.q[i], buf);
                added += 1;
            }
            if self.rtx_count > 0 {
                return added;
            }
        }
        while self.n_sent < self.q.len() {
            let size = self.q[self.n_sent].wire_len();
            if buf.len() + size > self.mtu || !self.may_send(size, false) {
                break;
            }
            if self.flight > 0 && self.peer_rwnd < size {
                break; // RFC 9260 6.1 A/B: window closed, one probe only when nothing is in flight.
            }
            let c = &mut self.q[self.n_sent];
            c.tx_count = 1;
            if self.rtt_probe.is_none() {
                self.rtt_probe = Some((c.tsn, now));
            }
            self.flight += size;
            self.peer_rwnd = self.peer_rwnd.saturating_sub(size);
            Self::emit(&self.q[self.n_sent], buf);
            self.n_sent += 1;
            added += 1;
        }
        added
    }

    /// Process a SACK (RFC 9260 6.2.1, 7.2.1-7.2.4). `None`: stale or invalid, ignored.
    pub fn on_sack(&mut self, now: Instant, s: &SackRepr) -> Option<SackOutcome> {
        let c = unwrap_tsn(s.cum_tsn_ack, self.cum_acked);
        let highest_sent = if self.n_sent > 0 { self.q[self.n_sent - 1].tsn } else { self.cum_acked };
        if c < self.cum_acked || c > highest_sent {
            return None;
        }
        let mut out = SackOutcome::default();
        let mut bytes_acked = 0;
        while self.q.front().is_some_and(|f| f.tsn <= c) {
            let f = self.q.pop_front().expect("front");
            self.n_sent -= 1;
            let size = f.wire_len();
            if !f.gap_acked {
                if f.rtx {
                    self.rtx_count -= 1;
                } else {
                    self.flight -= size;
                }
                bytes_acked += size;
            }
            if let Some((t, at)) = self.rtt_probe {
                if t == f.tsn {
                    // Karn: only chunks sent once give an RTT sample (RFC 9260 6.3.1 C5).
                    if f.tx_count == 1 {
                        out.rtt = Some(now.saturating_duration_since(at));
                    }
                    self.rtt_probe = None;
                }
            }
        }
        out.cum_advanced = c > self.cum_acked;
        self.cum_acked = c;

        self.sacks += 1;
        let mut highest_gap = None;
        for &(start, end) in &s.gap_blocks {
            if start == 0 || start > end {
                continue;
            }
            for off in start..=end {
                let idx = off as usize - 1;
                if idx >= self.n_sent {
                    break;
                }
                let size = self.q[idx].wire_len();
                let f = &mut self.q[idx];
                f.gap_acked_by = self.sacks;
                if !f.gap_acked {
                    f.gap_acked = true;
                    if f.rtx {
                        f.rtx = false;
                        self.rtx_count -= 1;
                    } else {
                        self.flight -= size;
                    }
                }
                highest_gap = Some(f.tsn);
            }
        }
        if std::mem::replace(&mut self.last_sack_gaps, highest_gap.is_some()) {
            // RFC 9260 6.2.1 D iii: gap-acked before, missing now: the receiver
            // reneged. Outstanding again, with a miss indication; T3 covers it.
            for i in 0..self.n_sent {
                let size = self.q[i].wire_len();
                let f = &mut self.q[i];
                if f.gap_acked && f.gap_acked_by != self.sacks {
                    f.gap_acked = false;
                    f.miss = f.miss.saturating_add(1);
                    self.flight += size;
                }
            }
        }
        if let Some(h) = highest_gap {
            for i in 0..self.n_sent {
                let size = self.q[i].wire_len();
                let f = &mut self.q[i];
                if f.tsn >= h {
                    break;
                }
                if f.gap_acked || f.rtx || f.fast_retransmitted {
                    continue;
                }
                f.miss += 1;
                if f.miss >= 3 {
                    f.rtx = true;
                    f.fast_retransmitted = true;
                    self.rtx_count += 1;
                    self.flight -= size;
                    out.fast_retransmit = true;
                }
            }
        }
        if out.fast_retransmit && self.fast_recovery_exit.is_none() {
            self.ssthresh = (self.cwnd / 2).max(4 * self.mtu);
            self.cwnd = self.ssthresh;
            self.partial_bytes_acked = 0;
            self.fast_recovery_exit = Some(highest_sent);
            self.fast_rtx_bypass = true;
        }
        if self.fast_recovery_exit.is_some_and(|e| c >= e) {
            self.fast_recovery_exit = None;
        }
        if out.cum_advanced && self.fast_recovery_exit.is_none() {
            if self.cwnd <= self.ssthresh {
                self.cwnd += bytes_acked.min(self.mtu);
            } else {
                self.partial_bytes_acked += bytes_acked;
                if self.partial_bytes_acked >= self.cwnd {
                    self.partial_bytes_acked -= self.cwnd;
                    self.cwnd += self.mtu;
                }
            }
            self.cwnd = self.cwnd.min(MAX_CWND);
        }
        self.peer_rwnd = (s.a_rwnd as usize).saturating_sub(self.flight);
        Some(out)
    }

    /// The Cumulative TSN Ack of a SHUTDOWN (RFC 9260 9.2): it says nothing
    /// about gap-acked data, so that is not taken as reneged.
    pub fn on_shutdown_cum_ack(&mut self, now: Instant, cum_tsn_ack: u32) {
        let gaps = std::mem::take(&mut self.last_sack_gaps);
        let a_rwnd = self.peer_a_rwnd();
        self.on_sack(now, &SackRepr { cum_tsn_ack, a_rwnd, ..Default::default() });
        self.last_sack_gaps = gaps;
    }

    /// T3-rtx expired: everything outstanding is retransmitted, cwnd drops to one MTU (RFC 9260 6.3.3, 7.2.3).
    pub fn on_t3_expiry(&mut self) {
        for i in 0..self.n_sent {
            let size = self.q[i].wire_len();
            let f = &mut self.q[i];
            if !f.gap_acked && !f.rtx {
                f.rtx = true;
                self.rtx_count += 1;
                self.flight -= size;
            }
        }
        self.ssthresh = (self.cwnd / 2).max(4 * self.mtu);
        self.cwnd = self.mtu;
        self.partial_bytes_acked = 0;
        self.fast_recovery_exit = None;
        self.rtt_probe = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Chunk, ChunkRepr};

    fn tsns(buf: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        let mut rest = buf;
        while !rest.is_empty() {
            let c = Chunk::new_checked(rest).unwrap();
            if let ChunkRepr::Data(d) = ChunkRepr::parse(&Chunk::new_unchecked(c.raw())).unwrap() {
                out.push(d.tsn);
            }
            rest = &rest[c.padded_len()..];
        }
        out
    }

    #[test]
    fn fragments_and_bundles() {
        let now = Instant::now();
        let mut s = Sender::new(100, 2, 1 << 20, 1400);
        s.enqueue(0, 18, Bytes::from(vec![7u8; 3000]));
        s.enqueue(1, 18, Bytes::from_static(b"small"));
        let mut buf = vec![0; 12];
        assert_eq!(s.fill(now, &mut buf), 1);
        assert!(buf.len() <= 1400);
        let mut buf2 = vec![0; 12];
        assert_eq!(s.fill(now, &mut buf2), 1);
        let mut buf3 = vec![0; 12];
        assert_eq!(s.fill(now, &mut buf3), 2, "last fragment and the small message share a packet");
        assert_eq!(tsns(&buf3[12..]), vec![102, 103]);
    }

    #[test]
    fn three_miss_indications_trigger_fast_retransmit() {
        let now = Instant::now();
        let mut s = Sender::new(1, 1, 1 << 20, 1400);
        for _ in 0..5 {
            s.enqueue(0, 18, Bytes::from_static(b"m"));
        }
        let mut buf = vec![0; 12];
        assert_eq!(s.fill(now, &mut buf), 5);
        for gap_end in 2..=4 {
            let sack = SackRepr { cum_tsn_ack: 0, a_rwnd: 1 << 20, gap_blocks: vec![(2, gap_end)], dup_tsns: vec![] };
            let o = s.on_sack(now, &sack).unwrap();
            assert_eq!(o.fast_retransmit, gap_end == 4);
        }
        let mut buf = vec![0; 12];
        assert_eq!(s.fill(now, &mut buf), 1);
        assert_eq!(tsns(&buf[12..]), vec![1]);
        let sack = SackRepr { cum_tsn_ack: 5, a_rwnd: 1 << 20, ..Default::default() };
        assert!(s.on_sack(now, &sack).unwrap().cum_advanced);
        assert!(s.is_empty());
    }

    #[test]
    fn stale_and_impossible_sacks_are_ignored() {
        let now = Instant::now();
        let mut s = Sender::new(10, 1, 1 << 20, 1400);
        s.enqueue(0, 18, Bytes::from_static(b"m"));
        let mut buf = vec![0; 12];
        s.fill(now, &mut buf);
        assert!(s.on_sack(now, &SackRepr { cum_tsn_ack: 11, ..Default::default() }).is_none());
        assert!(s.on_sack(now, &SackRepr { cum_tsn_ack: 8, ..Default::default() }).is_none());
        assert!(s.on_sack(now, &SackRepr { cum_tsn_ack: 10, ..Default::default() }).is_some());
    }
}
