//! The frames of the front end waiting for an MME host's core, and the
//! order the core takes them in (sans-I/O).
//!
//! A message of an S1 connection under way (UE-associated, named by its
//! MME-UE-S1AP-ID: the next step of a procedure the host runs) is taken
//! before the INITIAL UE MESSAGEs that came ahead of it, each kind in
//! arrival order: what a procedure has begun finishes first, as the core
//! takes S6a and S11 answers before new frames (and the simulator's
//! forwarder, `ForwarderConfig::continuing_first`). Nothing else moves:
//! any other frame (eNB-wide S1AP, replication, refresh, drain) is taken
//! in its place, after everything that came before it. Messages of
//! different S1 connections have no order on the wire either (SCTP
//! orders a stream only, TS 36.412 7); an S1 connection's own messages
//! keep theirs, and its first (the INITIAL UE MESSAGE) is handled before
//! the eNB can name it by the MME's id.
//!
//! The front end keeps each S1 frame it sent until the host says it
//! handled every one up to a count ([`Frame::Handled`]); taken out of
//! order, the count is of the first frames all handled ([`Inbox::upto`]).

use super::wire::Frame;
use mobicore_elastic::router::UeName;
use mobicore_mme::routing::{self, Uplink};
use std::collections::{BTreeSet, VecDeque};

/// Frames looked past for a message of a connection under way, at most.
const LOOK_AHEAD: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// A UE-associated S1AP message of a connection under way.
    Connected,
    /// An INITIAL UE MESSAGE.
    Initial,
    /// Any other frame: nothing is taken ahead of it.
    Barrier,
}

fn class(frame: &Frame) -> Class {
    match frame {
        Frame::S1 { assoc, data, .. } | Frame::S1Again { assoc, data, .. } => match routing::uplink(*assoc, data) {
            Uplink::Ue(UeName::Initial { .. }) => Class::Initial,
            Uplink::Ue(_) => Class::Connected,
            _ => Class::Barrier,
        },
        _ => Class::Barrier,
    }
}

/// An S1 frame's number among those the front end sent ([`Frame::S1`],
/// [`Frame::S1Again`]), from 1; `None` for other frames.
pub type Seq = Option<u64>;

#[derive(Debug, Default)]
pub struct Inbox {
    frames: VecDeque<(Seq, Class, Frame)>,
    /// S1 frames received.
    received: u64,
    /// Every S1 frame up to this one is handled.
    upto: u64,
    /// Handled beyond `upto`.
    done: BTreeSet<u64>,
}

impl Inbox {
    pub fn new() -> Inbox {
        Inbox::default()
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn push(&mut self, frame: Frame) {
        let seq = matches!(frame, Frame::S1 { .. } | Frame::S1Again { .. }).then(|| {
            self.received += 1;
            self.received
        });
        self.frames.push_back((seq, class(&frame), frame));
    }

    /// Where the next frame the core takes is: the first message of a
    /// connection under way before any frame but INITIAL UE MESSAGEs,
    /// else the first.
    fn next_index(&self) -> Option<usize> {
        let first = self.frames.front()?;
        if first.1 == Class::Barrier {
            return Some(0);
        }
        let mut ahead = self.frames.iter().take(LOOK_AHEAD).take_while(|f| f.1 != Class::Barrier);
        Some(ahead.position(|f| f.1 == Class::Connected).unwrap_or(0))
    }

    /// The next frame for the core.
    pub fn pop(&mut self) -> Option<(Seq, Frame)> {
        let i = self.next_index()?;
        self.frames.remove(i).map(|(seq, _, f)| (seq, f))
    }

    /// The next frame for the core if it is a UE-associated
    /// [`Frame::S1`] (one more of a group handled before one store write).
    pub fn pop_ue_s1(&mut self) -> Option<(u64, Frame)> {
        let i = self.next_index()?;
        match &self.frames[i] {
            (Some(seq), Class::Connected | Class::Initial, Frame::S1 { .. }) => {
                let seq = *seq;
                self.frames.remove(i).map(|(_, _, f)| (seq, f))
            }
            _ => None,
        }
    }

    /// S1 frame `seq` is handled (or given back, or dropped).
    pub fn handled(&mut self, seq: u64) {
        if seq <= self.upto {
            return;
        }
        self.done.insert(seq);
        while self.done.remove(&(self.upto + 1)) {
            self.upto += 1;
        }
    }

    /// Every S1 frame up to this number is handled: what
    /// [`Frame::Handled`] says.
    pub fn upto(&self) -> u64 {
        self.upto
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use oxirush_s1ap::build_s1ap;
    use oxirush_s1ap::helpers::{eutran_cgi, plmn, tai, EnbKind};
    use oxirush_s1ap::s1ap::*;

    fn s1(data: Bytes) -> Frame {
        Frame::S1 { assoc: 7, stream: 1, data }
    }

    /// An INITIAL UE MESSAGE of eNB UE `enb_ue` (a short SERVICE REQUEST).
    fn initial(enb_ue: u32) -> Bytes {
        let p = plmn("001", "01").unwrap();
        let pdu = build_s1ap!(
            InitiatingMessage,
            initialUEMessage,
            InitialUEMessage,
            eNB_UE_S1AP_ID(enb_ue),
            NAS_PDU(vec![0xc7, 0, 0, 0]),
            TAI(tai(p, [0, 1])),
            EUTRAN_CGI(eutran_cgi(p, EnbKind::Macro, 0x12345, 1).unwrap()),
            RRC_Establishment_Cause(RRCEstablishmentCause::mo_Data),
        );
        Bytes::from(pdu.unwrap().encode().unwrap().to_vec())
    }

    /// A message of the S1 connection MME-UE-S1AP-ID `id`.
    fn connected(id: u32) -> Bytes {
        super::super::samples::release_request(id)
    }

    /// The S1 frames' numbers in the order the core takes every frame (0:
    /// not an S1 frame).
    fn order(inbox: &mut Inbox) -> Vec<u64> {
        std::iter::from_fn(|| inbox.pop()).map(|(seq, _)| seq.unwrap_or(0)).collect()
    }

    #[test]
    fn messages_of_connections_under_way_go_before_initial_ue_messages_and_nothing_else_moves() {
        let mut inbox = Inbox::new();
        inbox.push(s1(initial(1))); // 1
        inbox.push(s1(connected(0x0100_0001))); // 2
        inbox.push(s1(initial(2))); // 3
        inbox.push(s1(connected(0x0100_0002))); // 4
        inbox.push(s1(Bytes::from_static(b"not S1AP"))); // 5: no UE's, in its place
        inbox.push(s1(initial(3))); // 6
        inbox.push(s1(connected(0x0100_0001))); // 7
        inbox.push(Frame::Drain);
        inbox.push(s1(initial(4))); // 8
        inbox.push(Frame::S1Again { assoc: 7, stream: 1, data: connected(0x0100_0003) }); // 9
        assert_eq!(inbox.len(), 10);
        assert_eq!(order(&mut inbox), [2, 4, 1, 3, 5, 7, 6, 0, 9, 8]);
        assert!(inbox.is_empty());
    }

    #[test]
    fn a_group_takes_ue_associated_s1_frames_only() {
        let mut inbox = Inbox::new();
        inbox.push(s1(initial(1)));
        inbox.push(s1(connected(0x0100_0001)));
        inbox.push(Frame::S1Again { assoc: 7, stream: 1, data: initial(2) });
        inbox.push(s1(connected(0x0100_0002)));
        assert_eq!(inbox.pop_ue_s1().map(|x| x.0), Some(2));
        assert_eq!(inbox.pop_ue_s1().map(|x| x.0), Some(4));
        assert_eq!(inbox.pop_ue_s1().map(|x| x.0), Some(1));
        // The next is a frame sent again: the group ends there.
        assert!(inbox.pop_ue_s1().is_none());
        assert!(matches!(inbox.pop(), Some((Some(3), Frame::S1Again { .. }))));
        assert!(inbox.pop().is_none() && inbox.pop_ue_s1().is_none());
    }

    #[test]
    fn handled_counts_the_first_frames_all_handled() {
        let mut inbox = Inbox::new();
        assert_eq!(inbox.upto(), 0);
        inbox.handled(2);
        inbox.handled(4);
        assert_eq!(inbox.upto(), 0, "frame 1 is not");
        inbox.handled(1);
        assert_eq!(inbox.upto(), 2);
        inbox.handled(3);
        assert_eq!(inbox.upto(), 4);
        inbox.handled(3);
        assert_eq!(inbox.upto(), 4, "once");
        assert!(inbox.done.is_empty());
    }
}
