//! Links between the network functions, the messages in flight on them,
//! and the faults a scenario can inject: drop, corrupt or hold the next
//! messages of a link (optionally only those a predicate selects).

use bytes::Bytes;
use mobicore_common::s6a::{S6aAnswer, S6aRequest};
use mobicore_mme::UeRef;

/// One direction of one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// S1-MME, eNB to MME.
    S1Uplink,
    /// S1-MME, MME to eNB.
    S1Downlink,
    /// S6a, MME to HSS (requests).
    S6aRequest,
    /// S6a, HSS to MME (answers).
    S6aAnswer,
    /// S11, MME to SGW-C (GTPv2-C bytes).
    S11ToSgw,
    /// S11, SGW-C to MME (GTPv2-C bytes).
    S11ToMme,
    /// Sxa/Sxb, SGW-C to UPF (PFCP bytes).
    PfcpToUpf,
    /// Sxa/Sxb, UPF to SGW-C (PFCP bytes).
    PfcpToCp,
    /// S1-U, UPF to an eNB (GTP-U bytes).
    S1uDownlink,
    /// X2-U: GTP-U an eNB forwards to another in a handover.
    X2u,
    /// S11 between the controller's relay and the original SGW-C, either way.
    Relay,
    /// S11 between the controller and an edge anchor's SGW-C, either way.
    EdgeS11,
    /// Sxa/Sxb inside an edge anchor, either way.
    EdgePfcp,
}

/// A message in flight.
#[derive(Debug, Clone)]
pub enum Msg {
    /// An S1AP PDU from eNB `enb` (index) on `stream`.
    S1Uplink {
        enb: usize,
        stream: u16,
        pdu: Bytes,
    },
    /// An S1AP PDU to eNB `enb`.
    S1Downlink {
        enb: usize,
        stream: u16,
        pdu: Bytes,
    },
    S6aRequest {
        ue: UeRef,
        request: S6aRequest,
    },
    S6aAnswer {
        ue: UeRef,
        answer: S6aAnswer,
    },
    S11ToSgw(Bytes),
    S11ToMme(Bytes),
    PfcpToUpf(Bytes),
    PfcpToCp(Bytes),
    /// GTP-U from the UPF to the eNB at `to`.
    S1uDownlink {
        to: std::net::SocketAddrV4,
        bytes: Bytes,
    },
    /// GTP-U forwarded by eNB `from` (index) to the eNB at `to` (data
    /// forwarding of a handover, TS 36.300 10.1.2.1.1).
    X2u {
        from: usize,
        to: std::net::SocketAddrV4,
        bytes: Bytes,
    },
    /// The relay to the original SGW-C.
    RelayToSgw(Bytes),
    /// The original SGW-C to the relay.
    SgwToRelay(Bytes),
    /// The controller to edge anchor `edge`'s SGW-C.
    ToEdge {
        edge: usize,
        bytes: Bytes,
    },
    /// Edge anchor `edge`'s SGW-C to the controller.
    FromEdge {
        edge: usize,
        bytes: Bytes,
    },
    /// PFCP inside edge anchor `edge` (to its UPF when `to_upf`).
    EdgePfcp {
        edge: usize,
        to_upf: bool,
        bytes: Bytes,
    },
}

impl Msg {
    pub fn link(&self) -> Link {
        match self {
            Msg::S1Uplink { .. } => Link::S1Uplink,
            Msg::S1Downlink { .. } => Link::S1Downlink,
            Msg::S6aRequest { .. } => Link::S6aRequest,
            Msg::S6aAnswer { .. } => Link::S6aAnswer,
            Msg::S11ToSgw(_) => Link::S11ToSgw,
            Msg::S11ToMme(_) => Link::S11ToMme,
            Msg::PfcpToUpf(_) => Link::PfcpToUpf,
            Msg::PfcpToCp(_) => Link::PfcpToCp,
            Msg::S1uDownlink { .. } => Link::S1uDownlink,
            Msg::X2u { .. } => Link::X2u,
            Msg::RelayToSgw(_) | Msg::SgwToRelay(_) => Link::Relay,
            Msg::ToEdge { .. } | Msg::FromEdge { .. } => Link::EdgeS11,
            Msg::EdgePfcp { .. } => Link::EdgePfcp,
        }
    }

    /// The bytes of a message that travels as bytes (all but S6a, which
    /// the harness carries typed: the HSS core has no Diameter codec).
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            Msg::S1Uplink { pdu, .. } | Msg::S1Downlink { pdu, .. } => Some(pdu),
            Msg::S11ToSgw(b) | Msg::S11ToMme(b) | Msg::PfcpToUpf(b) | Msg::PfcpToCp(b) => Some(b),
            Msg::RelayToSgw(b) | Msg::SgwToRelay(b) => Some(b),
            Msg::S1uDownlink { bytes, .. } | Msg::X2u { bytes, .. } => Some(bytes),
            Msg::ToEdge { bytes, .. } | Msg::FromEdge { bytes, .. } | Msg::EdgePfcp { bytes, .. } => Some(bytes),
            Msg::S6aRequest { .. } | Msg::S6aAnswer { .. } => None,
        }
    }

    fn bytes_mut(&mut self) -> Option<&mut Bytes> {
        match self {
            Msg::S1Uplink { pdu, .. } | Msg::S1Downlink { pdu, .. } => Some(pdu),
            Msg::S11ToSgw(b) | Msg::S11ToMme(b) | Msg::PfcpToUpf(b) | Msg::PfcpToCp(b) => Some(b),
            Msg::RelayToSgw(b) | Msg::SgwToRelay(b) => Some(b),
            Msg::S1uDownlink { bytes, .. } | Msg::X2u { bytes, .. } => Some(bytes),
            Msg::ToEdge { bytes, .. } | Msg::FromEdge { bytes, .. } | Msg::EdgePfcp { bytes, .. } => Some(bytes),
            Msg::S6aRequest { .. } | Msg::S6aAnswer { .. } => None,
        }
    }

    /// Flip every bit of the octet in the middle (S6a is carried typed and
    /// cannot be corrupted; corrupting it drops it).
    /// Flips every bit of octet `at` (the last one if the message is shorter).
    pub(crate) fn corrupt(mut self, at: usize) -> Option<Msg> {
        let b = self.bytes_mut()?;
        let mut v = b.to_vec();
        if !v.is_empty() {
            let i = at.min(v.len() - 1);
            v[i] ^= 0xFF;
        }
        *b = Bytes::from(v);
        Some(self)
    }
}

/// What a fault does to a message it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    Drop,
    /// Flip the octet at this offset.
    Corrupt(usize),
    /// Keep it aside until [`crate::Network::release_held`].
    Hold,
}

/// Selects messages of a link.
pub type Matcher = Box<dyn Fn(&Msg) -> bool>;

/// A fault armed on a link for the next `remaining` matching messages.
pub(crate) struct Fault {
    pub link: Link,
    pub action: FaultAction,
    pub remaining: u32,
    pub matcher: Option<Matcher>,
}

/// The faults armed, in arming order; the first that selects a message
/// applies to it.
#[derive(Default)]
pub(crate) struct Faults {
    pub armed: Vec<Fault>,
    pub dropped: Vec<Msg>,
}

impl Faults {
    /// What happens to `m`: `None` if it passes untouched.
    pub fn apply(&mut self, m: &Msg) -> Option<FaultAction> {
        let link = m.link();
        let i = self
            .armed
            .iter()
            .position(|f| f.link == link && f.remaining > 0 && f.matcher.as_ref().is_none_or(|p| p(m)))?;
        let f = &mut self.armed[i];
        f.remaining -= 1;
        let action = f.action;
        if f.remaining == 0 {
            self.armed.remove(i);
        }
        Some(action)
    }
}
