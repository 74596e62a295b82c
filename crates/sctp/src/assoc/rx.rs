//! The receiving half of an association: TSN tracking, duplicate detection,
//! reassembly of fragmented user messages, per-stream ordered delivery
//! (RFC 9260 6.2, 6.5, 6.6, 6.9) and the SACK it owes its peer (RFC 9260 6.2).

use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::wire::{DataRepr, SackRepr};

/// How far above the cumulative TSN a DATA chunk may be and still be kept,
/// whatever the window (each TSN kept above it costs an entry in the gap set).
const MAX_TSN_AHEAD: u64 = 1 << 18;

/// Extend a 32-bit serial number (RFC 9260 1.6) to 64 bits around `near`.
pub(crate) fn unwrap_tsn(tsn: u32, near: u64) -> u64 {
    let delta = tsn.wrapping_sub(near as u32) as i32 as i64;
    (near as i64 + delta) as u64
}

/// A message handed to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delivered {
    pub stream: u16,
    pub ppid: u32,
    pub data: Bytes,
}

struct Fragment {
    begin: bool,
    end: bool,
    unordered: bool,
    stream: u16,
    ssn: u16,
    ppid: u32,
    data: Bytes,
}

#[derive(Default)]
struct InStream {
    next_ssn: u16,
    /// Complete ordered messages waiting for an earlier SSN.
    pending: HashMap<u16, (u32, Bytes)>,
}

/// What happened to one DATA chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataOutcome {
    Accepted,
    Duplicate,
    /// Stream id out of range: acknowledged and dropped, answered with an ERROR (RFC 9260 6.5).
    InvalidStream,
    /// Queuing it would make the held bytes exceed the receive window: dropped
    /// without acknowledging, the peer retransmits it (RFC 9260 6.2).
    QueueFull,
    /// Its TSN is further above the cumulative TSN than the window allows (each
    /// DATA chunk carries at least one byte, so a sender that respects our
    /// a_rwnd never has more TSNs outstanding): dropped without acknowledging.
    TsnBeyondWindow,
}

pub(crate) struct Receiver {
    /// Cumulative TSN: every TSN up to this one was received.
    cum: u64,
    /// TSNs above `cum` already received.
    above: BTreeSet<u64>,
    dups: Vec<u32>,
    frags: BTreeMap<u64, Fragment>,
    streams: Vec<InStream>,
    /// Bytes held in fragments and out-of-order messages; never above `window`.
    buffered: usize,
    window: usize,
    /// How far above `cum` a TSN may be: min(window, MAX_TSN_AHEAD).
    max_ahead: u64,
    /// Fragments given up to make room for a lower TSN, since the last `take_reneged`.
    reneged: u64,
}

impl Receiver {
    pub fn new(peer_initial_tsn: u32, inbound_streams: u16, window: usize) -> Self {
        // Start far from zero so that unwrapping never underflows.
        let cum = (1u64 << 32) + peer_initial_tsn.wrapping_sub(1) as u64;
        Receiver {
            cum,
            above: BTreeSet::new(),
            dups: Vec::new(),
            frags: BTreeMap::new(),
            streams: (0..inbound_streams).map(|_| InStream::default()).collect(),
            buffered: 0,
            window,
            max_ahead: (window as u64).clamp(1, MAX_TSN_AHEAD),
            reneged: 0,
        }
    }

    /// Bytes held for reassembly and ordered delivery (RFC 9260 6.2: at most the window).
    pub fn queued_bytes(&self) -> usize {
        self.buffered
    }

    /// Fragments reneged since the last call.
    pub fn take_reneged(&mut self) -> u64 {
        std::mem::take(&mut self.reneged)
    }

    /// TSNs received above the cumulative TSN (the gap set).
    pub fn tsns_above_cum(&self) -> usize {
        self.above.len()
    }

    pub fn cum_tsn(&self) -> u32 {
        self.cum as u32
    }

    pub fn has_gaps(&self) -> bool {
        !self.above.is_empty() || !self.dups.is_empty()
    }

    /// Advertised receiver window (RFC 9260 6.2.1).
    pub fn a_rwnd(&self) -> u32 {
        self.window.saturating_sub(self.buffered) as u32
    }

    /// Take one DATA chunk; complete messages are pushed to `out`.
    ///
    /// Everything the peer makes us hold is bounded by the window we advertise
    /// (RFC 9260 6.2, 6.9): a chunk that would be queued (a fragment, or a
    /// message waiting for an earlier SSN) is dropped without acknowledgement
    /// when the queued bytes would exceed the window, and a TSN further ahead
    /// than the window is dropped too. A message that can be delivered at once
    /// needs no room and is always taken, so in-order delivery goes on while
    /// the queues are full, and a chunk below the highest fragments held for
    /// reordering takes their place (they are reneged: RFC 9260 6.2, the sender
    /// keeps gap-acked data until it is cumulatively acked), so data sent far
    /// ahead cannot wedge the association. Cumulatively acked data is never
    /// given up: a message larger than the window cannot be received (there is
    /// no partial delivery, RFC 9260 6.9).
    pub fn on_data(&mut self, d: &DataRepr<'_>, out: &mut Vec<Delivered>) -> DataOutcome {
        let tsn = unwrap_tsn(d.tsn, self.cum);
        if tsn <= self.cum || self.above.contains(&tsn) {
            if self.dups.len() < 16 {
                self.dups.push(d.tsn);
            }
            return DataOutcome::Duplicate;
        }
        if tsn - self.cum > self.max_ahead {
            return DataOutcome::TsnBeyondWindow;
        }
        let fragmented = !(d.begin && d.end);
        let valid_stream = (d.stream_id as usize) < self.streams.len();
        let queued = match self.streams.get(d.stream_id as usize) {
            None => 0,
            Some(_) if fragmented => d.data.len(),
            Some(_) if d.unordered => 0,
            Some(st) => {
                let ahead = d.ssn != st.next_ssn && d.ssn.wrapping_sub(st.next_ssn) < 0x8000;
                if ahead && !st.pending.contains_key(&d.ssn) {
                    d.data.len()
                } else {
                    0
                }
            }
        };
        if self.buffered + queued > self.window && !self.renege_above(tsn, self.buffered + queued - self.window) {
            return DataOutcome::QueueFull;
        }
        self.mark_received(tsn);
        if !valid_stream {
            return DataOutcome::InvalidStream;
        }
        if !fragmented {
            self.deliver(d.stream_id, d.ssn, d.unordered, d.ppid, Bytes::copy_from_slice(d.data), out);
            return DataOutcome::Accepted;
        }
        self.buffered += d.data.len();
        self.frags.insert(
            tsn,
            Fragment {
                begin: d.begin,
                end: d.end,
                unordered: d.unordered,
                stream: d.stream_id,
                ssn: d.ssn,
                ppid: d.ppid,
                data: Bytes::copy_from_slice(d.data),
            },
        );
        self.reassemble(tsn, out);
        DataOutcome::Accepted
    }

    /// RFC 9260 6.2: drop the highest TSNs held for reordering (fragments above
    /// `tsn`, none cumulatively acked) to free `need` bytes; nothing is dropped
    /// if they cannot free that much.
    fn renege_above(&mut self, tsn: u64, need: usize) -> bool {
        let mut freed = 0;
        let mut lowest = None;
        for (&t, f) in self.frags.range(tsn + 1..).rev() {
            freed += f.data.len();
            lowest = Some(t);
            if freed >= need {
                break;
            }
        }
        let Some(lowest) = lowest.filter(|_| freed >= need) else { return false };
        for (t, f) in self.frags.split_off(&lowest) {
            self.above.remove(&t);
            self.buffered -= f.data.len();
            self.reneged += 1;
        }
        true
    }

    fn mark_received(&mut self, tsn: u64) {
        if tsn == self.cum + 1 {
            self.cum = tsn;
            while self.above.first() == Some(&(self.cum + 1)) {
                self.above.pop_first();
                self.cum += 1;
            }
        } else {
            self.above.insert(tsn);
        }
    }

    /// Fragments of one message carry consecutive TSNs (RFC 9260 6.9).
    fn reassemble(&mut self, tsn: u64, out: &mut Vec<Delivered>) {
        let stream = self.frags[&tsn].stream;
        let mut first = tsn;
        while !self.frags[&first].begin {
            match self.frags.get(&(first - 1)) {
                Some(f) if f.stream == stream && !f.end => first -= 1,
                _ => return,
            }
        }
        let mut last = tsn;
        while !self.frags[&last].end {
            match self.frags.get(&(last + 1)) {
                Some(f) if f.stream == stream && !f.begin => last += 1,
                _ => return,
            }
        }
        let total: usize = (first..=last).map(|t| self.frags[&t].data.len()).sum();
        let mut msg = BytesMut::with_capacity(total);
        let head = self.frags.remove(&first).expect("present");
        msg.extend_from_slice(&head.data);
        for t in first + 1..=last {
            msg.extend_from_slice(&self.frags.remove(&t).expect("present").data);
        }
        self.buffered -= total;
        self.deliver(head.stream, head.ssn, head.unordered, head.ppid, msg.freeze(), out);
    }

    /// Ordered delivery per stream by SSN (RFC 9260 6.6).
    fn deliver(&mut self, stream: u16, ssn: u16, unordered: bool, ppid: u32, data: Bytes, out: &mut Vec<Delivered>) {
        if unordered {
            out.push(Delivered { stream, ppid, data });
            return;
        }
        let st = &mut self.streams[stream as usize];
        if ssn != st.next_ssn {
            // An old SSN on this stream cannot be new data; keep only ones ahead.
            if ssn.wrapping_sub(st.next_ssn) < 0x8000 && !st.pending.contains_key(&ssn) {
                self.buffered += data.len();
                st.pending.insert(ssn, (ppid, data));
            }
            return;
        }
        out.push(Delivered { stream, ppid, data });
        st.next_ssn = st.next_ssn.wrapping_add(1);
        while let Some((ppid, data)) = st.pending.remove(&st.next_ssn) {
            self.buffered -= data.len();
            out.push(Delivered { stream, ppid, data });
            st.next_ssn = st.next_ssn.wrapping_add(1);
        }
    }

    /// The SACK for the current state; clears the duplicate list (RFC 9260 3.3.4).
    pub fn build_sack(&mut self, max_blocks: usize) -> SackRepr {
        let mut gap_blocks: Vec<(u16, u16)> = Vec::new();
        for &t in &self.above {
            let off = t - self.cum;
            if off > u16::MAX as u64 {
                break;
            }
            let off = off as u16;
            match gap_blocks.last_mut() {
                Some((_, end)) if *end + 1 == off => *end = off,
                _ => {
                    if gap_blocks.len() == max_blocks {
                        break;
                    }
                    gap_blocks.push((off, off));
                }
            }
        }
        SackRepr {
            cum_tsn_ack: self.cum as u32,
            a_rwnd: self.a_rwnd(),
            gap_blocks,
            dup_tsns: std::mem::take(&mut self.dups),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(tsn: u32, ssn: u16, b: bool, e: bool, payload: &'static [u8]) -> DataRepr<'static> {
        DataRepr { unordered: false, begin: b, end: e, tsn, stream_id: 0, ssn, ppid: 18, data: payload }
    }

    #[test]
    fn unwrap_handles_wraparound() {
        let near = (1u64 << 32) + 0xffff_fff0;
        assert_eq!(unwrap_tsn(0x0000_0005, near), (2u64 << 32) + 5);
        assert_eq!(unwrap_tsn(0xffff_ffe0, near), (1u64 << 32) + 0xffff_ffe0);
    }

    #[test]
    fn reorders_by_ssn_and_reports_gaps() {
        let mut r = Receiver::new(u32::MAX - 1, 2, 1 << 20);
        let mut out = Vec::new();
        assert_eq!(r.on_data(&data(u32::MAX, 1, true, true, b"second"), &mut out), DataOutcome::Accepted);
        assert!(out.is_empty());
        let sack = r.build_sack(16);
        assert_eq!(sack.cum_tsn_ack, u32::MAX - 2);
        assert_eq!(sack.gap_blocks, vec![(2, 2)]);
        r.on_data(&data(u32::MAX - 1, 0, true, true, b"first"), &mut out);
        let got: Vec<_> = out.iter().map(|d| d.data.clone()).collect();
        assert_eq!(got, vec![Bytes::from_static(b"first"), Bytes::from_static(b"second")]);
        assert_eq!(r.cum_tsn(), u32::MAX);
        assert!(!r.has_gaps());
        assert_eq!(r.on_data(&data(u32::MAX, 1, true, true, b"second"), &mut out), DataOutcome::Duplicate);
        assert_eq!(r.build_sack(16).dup_tsns, vec![u32::MAX]);
    }

    #[test]
    fn reassembles_out_of_order_fragments() {
        let mut r = Receiver::new(10, 1, 1 << 20);
        let mut out = Vec::new();
        r.on_data(&data(12, 0, false, true, b"C"), &mut out);
        r.on_data(&data(10, 0, true, false, b"A"), &mut out);
        assert!(out.is_empty());
        r.on_data(&data(11, 0, false, false, b"B"), &mut out);
        assert_eq!(out, vec![Delivered { stream: 0, ppid: 18, data: Bytes::from_static(b"ABC") }]);
        assert_eq!(r.a_rwnd(), 1 << 20);
    }

    #[test]
    fn invalid_stream_is_acked_not_delivered() {
        let mut r = Receiver::new(1, 1, 1 << 20);
        let mut out = Vec::new();
        let mut d = data(1, 0, true, true, b"x");
        d.stream_id = 5;
        assert_eq!(r.on_data(&d, &mut out), DataOutcome::InvalidStream);
        assert!(out.is_empty());
        assert_eq!(r.cum_tsn(), 1);
    }
}
