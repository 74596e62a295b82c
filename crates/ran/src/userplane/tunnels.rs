//! The eNB side of S1-U, without I/O: which tunnel an uplink IP packet
//! goes into, which UE a downlink G-PDU belongs to, and what happens to a
//! UE's packets while it is idle or handed over between two eNBs of this
//! table. The shell ([`super::UserPlane`]) moves the octets and the clock.
//!
//! # The API the glue uses
//!
//! Time is passed in (`now`), outputs are polled, as in quinn-proto:
//!
//! - [`Tunnels::insert`]: a UE's bearer is set up (attach, or back from
//!   idle by a Service Request): uplink packets held while it was idle are
//!   queued first, in order ([`Tunnels::poll_transmit`]).
//! - [`Tunnels::release`]: S1 release to ECM-IDLE (TS 23.401 5.3.5). The
//!   UE keeps its address on the TUN but has no tunnel (downlink still
//!   arriving on the released TEID is delivered until the next tunnel); its uplink packets
//!   are held (at most [`HoldConfig::idle_uplink_packets`], oldest dropped)
//!   and the first one raises [`Event::UplinkWhileIdle`] once per idle
//!   period: the shell turns it into a Service Request (TS 23.401 5.3.4.1).
//! - [`Event::Activity`]: a UE sent or received a packet, at most once per
//!   UE per [`HoldConfig::activity_interval_ms`]: it feeds the eNB's
//!   inactivity timer.
//! - Handover (TS 36.300 10.1.2.1 X2, 10.1.2.3 / TS 23.401 5.5.1.2.2 S1):
//!   1. target: [`Tunnels::accept_forwarding`] (the DL forwarding TEID it
//!      allocated for the UE): forwarded G-PDUs on it are held until the
//!      UE arrives;
//!   2. source: [`Tunnels::start_handover`] (the target's forwarding
//!      F-TEID, or the S-GW's for indirect forwarding): downlink still
//!      arriving on the source TEID is sent there in GTP-U
//!      ([`Downlink::Send`]), and so is the End Marker (TS 29.281 7.3.2),
//!      after which the source forgets its TEID ([`Event::EndMarkerForwarded`]);
//!   3. target: [`Tunnels::complete_handover`] (the UE's new tunnel): uplink
//!      goes to the new S-GW F-TEID at once; the forwarded packets go to the
//!      UE first, then downlink of the new path is held until the End Marker
//!      arrives on the forwarding TEID, or [`HoldConfig::end_marker_timeout_ms`]
//!      / [`HoldConfig::end_marker_hold_packets`] pass (counted in
//!      `UserPlaneStats::end_marker_timeouts`); [`Event::HandoverDone`].
//!      The UE sees no loss, duplicate or reordering.
//! - After every call the shell drains [`Tunnels::poll_transmit`] (in order,
//!   before the next datagram) and [`Tunnels::poll_event`], and calls
//!   [`Tunnels::handle_timeout`] at [`Tunnels::poll_timeout`].

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use mobicore_common::{Fteid, Teid};
use mobicore_gtp::gtpu::{self, Body, Extension, HeaderRepr};
use serde::{Deserialize, Serialize};

/// The user-plane data of one attached UE (its default bearer): the
/// address the PDN gave it, the S-GW's S1-U F-TEID (uplink, from the
/// INITIAL CONTEXT SETUP REQUEST) and the eNB's (downlink, sent in the
/// INITIAL CONTEXT SETUP RESPONSE). TS 36.413 9.1.4.1-2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct UeTunnel {
    pub ue_ip: Ipv4Addr,
    pub sgw: Fteid,
    pub enb: Fteid,
}

/// The bounds of what the table holds for idle UEs and handovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HoldConfig {
    /// Uplink packets held per idle UE until its tunnel is back; beyond
    /// it the oldest is dropped.
    pub idle_uplink_packets: usize,
    /// At most one [`Event::Activity`] per UE per this many milliseconds.
    pub activity_interval_ms: u64,
    /// How long a handover target holds downlink of the new path waiting
    /// for the End Marker on the forwarding tunnel (TS 36.300 10.1.2.2).
    pub end_marker_timeout_ms: u64,
    /// Downlink packets of the new path held at most while waiting for it.
    pub end_marker_hold_packets: usize,
    /// Forwarded packets a handover target holds before the UE arrives;
    /// beyond it the newest is dropped.
    pub forwarded_packets: usize,
}

impl Default for HoldConfig {
    fn default() -> Self {
        HoldConfig {
            idle_uplink_packets: 64,
            activity_interval_ms: 1_000,
            end_marker_timeout_ms: 1_000,
            end_marker_hold_packets: 4_096,
            forwarded_packets: 4_096,
        }
    }
}

/// Why a packet was not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum DropReason {
    /// Uplink: not an IPv4 packet (or too short to be one).
    NotIpv4,
    /// Uplink: the source address is no attached UE's.
    UnknownUe,
    /// Downlink: not decodable as GTP-U.
    Malformed,
    /// Downlink: a G-PDU on a TEID no UE has.
    UnknownTeid,
    /// Downlink: the inner destination is not the UE of the TEID.
    WrongDestination,
    /// Downlink: a GTP-U message the eNB does not act on.
    Ignored,
    /// Uplink: the oldest packet held for an idle UE, pushed out.
    IdleQueueFull,
    /// Downlink: a forwarded packet beyond what a target holds.
    ForwardingQueueFull,
}

/// Counters of one direction and the drops.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UserPlaneStats {
    pub uplink_packets: u64,
    pub uplink_bytes: u64,
    pub downlink_packets: u64,
    pub downlink_bytes: u64,
    pub echo_requests: u64,
    pub error_indications_sent: u64,
    pub error_indications_received: u64,
    /// Uplink packets of idle UEs held (sent later or dropped).
    pub idle_uplink_held: u64,
    /// Downlink G-PDUs a source sent on to a forwarding tunnel.
    pub forwarded: u64,
    /// End Markers a source sent on, and a target received.
    pub end_markers_forwarded: u64,
    pub end_markers_received: u64,
    /// Handovers whose target stopped waiting for the End Marker.
    pub end_marker_timeouts: u64,
    /// Forwarded packets reaching a target after it stopped waiting.
    pub late_forwarded: u64,
    pub drops: HashMap<String, u64>,
    /// S1-U (and X2-U) datagrams the socket refused to send (sendto
    /// failures), and inner packets the TUN refused: counted by the
    /// shell, never silently lost.
    pub send_errors: u64,
    pub tun_write_errors: u64,
}

impl UserPlaneStats {
    fn drop(&mut self, r: DropReason) {
        *self.drops.entry(format!("{r:?}")).or_default() += 1;
    }
    pub fn dropped(&self) -> u64 {
        self.drops.values().sum()
    }
}

/// What to do with a datagram received on the S1-U socket.
#[derive(Debug, PartialEq, Eq)]
pub enum Downlink<'a> {
    /// Write this inner IP packet into the TUN device.
    Deliver(&'a [u8]),
    /// Send the GTP-U message left in `out` to this address (a source
    /// forwarding a G-PDU or the End Marker).
    Send(SocketAddrV4),
    /// Send this GTP-U message back to the sender (Echo Response, Error
    /// Indication).
    Reply(Vec<u8>),
    /// Kept (or consumed) by the table: drain [`Tunnels::poll_transmit`].
    Held,
    Drop(DropReason),
}

/// What to do with an IP packet read from the TUN device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uplink {
    /// Send the G-PDU left in `out` to this address.
    Send(SocketAddrV4),
    /// The UE is idle: the packet is held until its tunnel is back.
    Held,
    Drop(DropReason),
}

/// Packets the table releases later (held ones), in the order to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// An IP packet for the TUN device.
    ToUe(Vec<u8>),
    /// A GTP-U message for the S1-U socket.
    Gtpu { to: SocketAddrV4, bytes: Vec<u8> },
}

/// What the glue acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// An idle UE sent a packet: time for a Service Request.
    UplinkWhileIdle { ue_ip: Ipv4Addr },
    /// The UE sent or received (throttled): restart its inactivity timer.
    Activity { ue_ip: Ipv4Addr },
    /// A source sent the End Marker on and forgot its TEID.
    EndMarkerForwarded { ue_ip: Ipv4Addr },
    /// A target delivers the new path directly now (End Marker received,
    /// or `timed_out`).
    HandoverDone { ue_ip: Ipv4Addr, timed_out: bool },
}

/// Why a handover step was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandoverError {
    #[error("no UE with address {0}")]
    UnknownUe(Ipv4Addr),
    #[error("UE {0} has no tunnel (idle)")]
    Idle(Ipv4Addr),
    #[error("UE {0} is already being forwarded from this eNB")]
    AlreadyForwarding(Ipv4Addr),
    #[error("TEID {0:?} is in use")]
    TeidInUse(Teid),
}

/// What a TEID of this table is to its UE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The UE's downlink tunnel.
    Current,
    /// A handover source's old tunnel: forward what arrives.
    Source,
    /// A handover target's forwarding tunnel.
    Forwarded,
}

/// A handover source: where downlink on `teid` goes now.
#[derive(Debug, Clone, Copy)]
struct Source {
    teid: Teid,
    forward_to: Fteid,
}

/// A handover target's holding state.
#[derive(Debug, Default)]
struct Target {
    forwarding: Teid,
    /// [`Tunnels::complete_handover`] was called.
    arrived: bool,
    /// Forwarded packets not yet delivered (the UE is not there yet).
    forwarded: VecDeque<Vec<u8>>,
    /// New-path packets held until the End Marker.
    new_path: VecDeque<Vec<u8>>,
    end_marker: bool,
    deadline: Option<Instant>,
    /// Stopped waiting for the End Marker: what still comes is late.
    timed_out: bool,
}

#[derive(Debug, Default)]
struct Ue {
    /// None: ECM-IDLE (address kept, no tunnel).
    tunnel: Option<UeTunnel>,
    seq: u16,
    idle_held: VecDeque<Vec<u8>>,
    idle_reported: bool,
    last_activity: Option<Instant>,
    source: Option<Source>,
    target: Option<Target>,
    /// Forwarding TEIDs of handovers left before their End Marker.
    stale: Vec<Teid>,
    /// The TEID of the tunnel released last: downlink the S-GW sent before
    /// it stopped (in flight, or queued at our socket) still reaches the
    /// UE, until its next tunnel.
    released: Option<Teid>,
}

/// The tunnels of every UE, by UE address and by eNB TEID.
#[derive(Debug)]
pub struct Tunnels {
    by_ue: HashMap<Ipv4Addr, Ue>,
    by_teid: HashMap<Teid, (Ipv4Addr, Role)>,
    /// The header of uplink G-PDUs (see [`uplink_header`]), kept so that
    /// only its TEID and sequence number change per packet (no
    /// allocation for its extension headers).
    uplink: HeaderRepr,
    /// Sequence number of the Error Indications we send.
    ei_seq: u16,
    local: Option<Ipv4Addr>,
    hold: HoldConfig,
    transmit: VecDeque<Transmit>,
    events: VecDeque<Event>,
    /// End Marker deadlines in the order they were set (all the same
    /// timeout, so sorted); stale entries are skipped.
    deadlines: VecDeque<(Instant, Ipv4Addr)>,
    pub stats: UserPlaneStats,
}

/// The header of the uplink G-PDUs (TS 29.281 5.1) the eNB sends, its
/// TEID and sequence number still to be set per packet: with
/// `sequence_numbers`, the S flag and a per-tunnel sequence number; with
/// `pdu_session_qfi`, a PDU Session Container extension header (UL PDU
/// SESSION INFORMATION, TS 38.415 5.5.2.2) carrying that QFI, as an N3
/// access node sends them (TS 29.281 5.2.2.7). Its `header_len()` is
/// what GTP-U adds to every uplink packet.
pub fn uplink_header(sequence_numbers: bool, pdu_session_qfi: Option<u8>) -> HeaderRepr {
    let mut h = HeaderRepr::gpdu(0);
    if sequence_numbers {
        h = h.with_seq(0);
    }
    if let Some(qfi) = pdu_session_qfi {
        h = h.with_extension(Extension::pdu_session_container(true, qfi));
    }
    h
}

/// Is `ip` an IPv4 packet to `ue`?
fn is_for(ip: &[u8], ue: Ipv4Addr) -> bool {
    ip.len() >= 20 && ip[0] >> 4 == 4 && ip[16..20] == ue.octets()
}

impl Tunnels {
    /// `local`: the eNB's S1-U address (the GTP-U Peer Address of the
    /// Error Indications it sends).
    pub fn new(local: Ipv4Addr, sequence_numbers: bool) -> Self {
        Tunnels {
            by_ue: HashMap::new(),
            by_teid: HashMap::new(),
            uplink: uplink_header(sequence_numbers, None),
            ei_seq: 0,
            local: Some(local),
            hold: HoldConfig::default(),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            deadlines: VecDeque::new(),
            stats: UserPlaneStats::default(),
        }
    }

    /// Uplink G-PDUs also carry a PDU Session Container with `qfi` (see
    /// [`uplink_header`]).
    pub fn with_pdu_session_container(mut self, qfi: u8) -> Self {
        self.uplink = uplink_header(self.uplink.seq.is_some(), Some(qfi));
        self
    }

    /// Other bounds for idle UEs and handovers.
    pub fn with_hold(mut self, hold: HoldConfig) -> Self {
        self.hold = hold;
        self
    }

    /// Add or replace a UE's tunnel. A UE back from idle (TS 23.401
    /// 5.3.4.1) gets its held uplink packets sent first, in order
    /// ([`Tunnels::poll_transmit`]).
    pub fn insert(&mut self, t: UeTunnel) {
        let ue = self.by_ue.entry(t.ue_ip).or_default();
        if let Some(old) = ue.tunnel.replace(t) {
            if self.by_teid.get(&old.enb.teid) == Some(&(t.ue_ip, Role::Current)) {
                self.by_teid.remove(&old.enb.teid);
            }
        }
        ue.idle_reported = false;
        if let Some(r) = ue.released.take().filter(|r| *r != t.enb.teid) {
            if self.by_teid.get(&r) == Some(&(t.ue_ip, Role::Current)) {
                self.by_teid.remove(&r);
            }
        }
        self.by_teid.insert(t.enb.teid, (t.ue_ip, Role::Current));
        let held = std::mem::take(&mut ue.idle_held);
        for ip in held {
            let mut out = Vec::new();
            if let Uplink::Send(to) = self.encap(&ip, &mut out) {
                self.transmit.push_back(Transmit::Gtpu { to, bytes: out });
                self.stats.uplink_packets += 1;
                self.stats.uplink_bytes += ip.len() as u64;
            }
        }
    }

    /// The S1 connection of the UE is released (ECM-IDLE, TS 23.401
    /// 5.3.5): it keeps its address but has no tunnel; its uplink is held
    /// from now on. Packets a handover target still held go to the UE.
    /// False for an unknown UE.
    pub fn release(&mut self, ue_ip: Ipv4Addr) -> bool {
        let Some(ue) = self.by_ue.get_mut(&ue_ip) else { return false };
        let tunnel = ue.tunnel.take();
        let (source, target) = (ue.source.take(), ue.target.take());
        ue.idle_reported = false;
        if let Some(t) = tunnel {
            // Kept for the downlink still on its way (TS 23.401 5.3.5: the
            // S-GW stops sending at Release Access Bearers, before the
            // release reaches the eNB, but not before what it sent arrives).
            if let Some(r) = ue.released.replace(t.enb.teid) {
                if self.by_teid.get(&r) == Some(&(ue_ip, Role::Current)) {
                    self.by_teid.remove(&r);
                }
            }
        }
        if let Some(s) = source {
            self.by_teid.remove(&s.teid);
        }
        if let Some(t) = target {
            self.by_teid.remove(&t.forwarding);
            self.flush_target(t);
        }
        true
    }

    /// Forget a UE (detached): its tunnels and whatever was held for it.
    pub fn remove(&mut self, ue_ip: Ipv4Addr) -> Option<UeTunnel> {
        let ue = self.by_ue.remove(&ue_ip)?;
        let teids = ue.tunnel.map(|t| t.enb.teid).into_iter();
        let teids = teids.chain(ue.source.map(|s| s.teid)).chain(ue.target.as_ref().map(|t| t.forwarding));
        let teids = teids.chain(ue.released);
        for teid in teids.chain(ue.stale) {
            if self.by_teid.get(&teid).is_some_and(|&(ip, _)| ip == ue_ip) {
                self.by_teid.remove(&teid);
            }
        }
        ue.tunnel
    }

    /// The UE's tunnel; None for an unknown or idle UE.
    pub fn get(&self, ue_ip: Ipv4Addr) -> Option<&UeTunnel> {
        self.by_ue.get(&ue_ip)?.tunnel.as_ref()
    }

    /// Whether the UE is known and idle.
    pub fn is_idle(&self, ue_ip: Ipv4Addr) -> bool {
        self.by_ue.get(&ue_ip).is_some_and(|u| u.tunnel.is_none())
    }

    /// UEs known (connected or idle).
    pub fn len(&self) -> usize {
        self.by_ue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_ue.is_empty()
    }

    /// Source side of a handover (TS 36.300 10.1.2.1.1 step 8, TS 23.401
    /// 5.5.1.2.2 step 8): downlink arriving on the UE's current TEID from
    /// now on, and then the End Marker, goes in GTP-U to `forward_to`
    /// (the target's forwarding F-TEID, or the S-GW's for indirect
    /// forwarding). Uplink stays on the old tunnel until
    /// [`Tunnels::complete_handover`].
    pub fn start_handover(&mut self, ue_ip: Ipv4Addr, forward_to: Fteid) -> Result<(), HandoverError> {
        let ue = self.by_ue.get_mut(&ue_ip).ok_or(HandoverError::UnknownUe(ue_ip))?;
        let t = ue.tunnel.ok_or(HandoverError::Idle(ue_ip))?;
        if ue.source.is_some() {
            return Err(HandoverError::AlreadyForwarding(ue_ip));
        }
        ue.source = Some(Source { teid: t.enb.teid, forward_to });
        self.by_teid.insert(t.enb.teid, (ue_ip, Role::Source));
        // The UE leaves: what a previous handover still held for it goes
        // the same way, ahead of what arrives from now on.
        // (A target not yet arrived is this handover's own, in this table.)
        if let Some(prev) = ue.target.take_if(|t| t.arrived) {
            // Forwarded packets still to come on its forwarding TEID go to
            // the UE as they come (late); the TEID is forgotten with the UE.
            ue.stale.retain(|t| self.by_teid.contains_key(t));
            ue.stale.push(prev.forwarding);
            for ip in prev.forwarded.into_iter().chain(prev.new_path) {
                let bytes = gtpu::gpdu(forward_to.teid.0, &ip);
                self.stats.forwarded += 1;
                self.transmit.push_back(Transmit::Gtpu { to: SocketAddrV4::new(forward_to.ipv4, gtpu::PORT), bytes });
            }
        }
        Ok(())
    }

    /// Target side, at preparation (TS 36.413 9.1.5.5 / 9.1.5.2): G-PDUs
    /// on `teid` are the UE's forwarded downlink, held until the UE
    /// arrives ([`Tunnels::complete_handover`]).
    pub fn accept_forwarding(&mut self, ue_ip: Ipv4Addr, teid: Teid) -> Result<(), HandoverError> {
        if self.by_teid.get(&teid).is_some_and(|&(ip, r)| ip != ue_ip || r != Role::Forwarded) {
            return Err(HandoverError::TeidInUse(teid));
        }
        let ue = self.by_ue.get_mut(&ue_ip).ok_or(HandoverError::UnknownUe(ue_ip))?;
        if let Some(prev) = ue.target.replace(Target { forwarding: teid, ..Default::default() }) {
            self.by_teid.remove(&prev.forwarding);
            self.flush_target(prev);
        }
        self.by_teid.insert(teid, (ue_ip, Role::Forwarded));
        Ok(())
    }

    /// Target side, the UE has arrived: `new` is its tunnel from now on
    /// (uplink to the new S-GW F-TEID at once). Forwarded packets go to
    /// the UE first; downlink on the new TEID is held until the End Marker
    /// (TS 36.300 10.1.2.2, TS 29.281 7.3.2) or the bounds of
    /// [`HoldConfig`]. Without [`Tunnels::accept_forwarding`] the new path
    /// is delivered at once.
    pub fn complete_handover(&mut self, now: Instant, ue_ip: Ipv4Addr, new: UeTunnel) -> Result<(), HandoverError> {
        if new.ue_ip != ue_ip {
            return Err(HandoverError::UnknownUe(new.ue_ip));
        }
        if self.by_teid.get(&new.enb.teid).is_some_and(|&(ip, r)| ip != ue_ip || r != Role::Current) {
            return Err(HandoverError::TeidInUse(new.enb.teid));
        }
        let ue = self.by_ue.get_mut(&ue_ip).ok_or(HandoverError::UnknownUe(ue_ip))?;
        if let Some(old) = ue.tunnel.replace(new) {
            if self.by_teid.get(&old.enb.teid) == Some(&(ue_ip, Role::Current)) {
                self.by_teid.remove(&old.enb.teid);
            }
        }
        self.by_teid.insert(new.enb.teid, (ue_ip, Role::Current));
        let Some(t) = ue.target.as_mut() else { return Ok(()) };
        if t.arrived {
            // A second arrival (a new tunnel again): nothing more to hold.
            return Ok(());
        }
        t.arrived = true;
        for ip in t.forwarded.drain(..) {
            self.stats.downlink_packets += 1;
            self.stats.downlink_bytes += ip.len() as u64;
            self.transmit.push_back(Transmit::ToUe(ip));
        }
        if t.end_marker {
            let forwarding = t.forwarding;
            ue.target = None;
            self.by_teid.remove(&forwarding);
            self.finish(ue_ip, false);
        } else {
            let at = now + Duration::from_millis(self.hold.end_marker_timeout_ms);
            t.deadline = Some(at);
            self.deadlines.push_back((at, ue_ip));
        }
        Ok(())
    }

    /// The UE's downlink no longer waits for the End Marker.
    fn finish(&mut self, ue_ip: Ipv4Addr, timed_out: bool) {
        if timed_out {
            self.stats.end_marker_timeouts += 1;
        }
        self.events.push_back(Event::HandoverDone { ue_ip, timed_out });
    }

    /// Everything a target held goes to the UE, in order.
    fn flush_target(&mut self, t: Target) {
        for ip in t.forwarded.into_iter().chain(t.new_path) {
            self.stats.downlink_packets += 1;
            self.stats.downlink_bytes += ip.len() as u64;
            self.transmit.push_back(Transmit::ToUe(ip));
        }
    }

    /// A target stops waiting for the End Marker: held packets go to the
    /// UE; forwarded ones still arriving are delivered as late.
    fn give_up(&mut self, ue_ip: Ipv4Addr) {
        let Some(t) = self.by_ue.get_mut(&ue_ip).and_then(|u| u.target.as_mut()) else { return };
        t.timed_out = true;
        t.deadline = None;
        let held: Vec<_> = t.new_path.drain(..).collect();
        for ip in held {
            self.stats.downlink_packets += 1;
            self.stats.downlink_bytes += ip.len() as u64;
            self.transmit.push_back(Transmit::ToUe(ip));
        }
        self.finish(ue_ip, true);
    }

    /// When [`Tunnels::handle_timeout`] wants to be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.front().map(|d| d.0)
    }

    /// Targets whose End Marker has not come by `now` stop waiting.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(at, ue_ip)) = self.deadlines.front() {
            if at > now {
                break;
            }
            self.deadlines.pop_front();
            let live = self.by_ue.get(&ue_ip).and_then(|u| u.target.as_ref()).is_some_and(|t| t.deadline == Some(at));
            if live {
                self.give_up(ue_ip);
            }
        }
    }

    /// The next held packet to send, in order.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmit.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Throttled activity report (TS 36.300 10.1.6: the eNB's inactivity
    /// timer is its own, fed by traffic).
    fn activity(&mut self, ue_ip: Ipv4Addr, now: Instant) {
        let Some(ue) = self.by_ue.get_mut(&ue_ip) else { return };
        let every = Duration::from_millis(self.hold.activity_interval_ms);
        if ue.last_activity.is_none_or(|t| now.saturating_duration_since(t) >= every) {
            ue.last_activity = Some(now);
            self.events.push_back(Event::Activity { ue_ip });
        }
    }

    /// An IP packet the UE sent (read from the TUN): encapsulate it into
    /// `out` as a G-PDU on the UE's uplink tunnel (TS 29.281 5.1), or hold
    /// it while the UE is idle.
    pub fn uplink(&mut self, now: Instant, ip: &[u8], out: &mut Vec<u8>) -> Uplink {
        let r = self.encap(ip, out);
        match r {
            Uplink::Send(_) => {
                self.stats.uplink_packets += 1;
                self.stats.uplink_bytes += ip.len() as u64;
                let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
                self.activity(src, now);
            }
            Uplink::Held => {}
            Uplink::Drop(e) => self.stats.drop(e),
        }
        r
    }

    fn encap(&mut self, ip: &[u8], out: &mut Vec<u8>) -> Uplink {
        if ip.len() < 20 || ip[0] >> 4 != 4 {
            return Uplink::Drop(DropReason::NotIpv4);
        }
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let Some(ue) = self.by_ue.get_mut(&src) else { return Uplink::Drop(DropReason::UnknownUe) };
        let Some(t) = ue.tunnel else {
            // ECM-IDLE: hold it, report the first one (TS 23.401 5.3.4.1).
            self.stats.idle_uplink_held += 1;
            if ue.idle_held.len() >= self.hold.idle_uplink_packets {
                ue.idle_held.pop_front();
                self.stats.drop(DropReason::IdleQueueFull);
            }
            if self.hold.idle_uplink_packets > 0 {
                ue.idle_held.push_back(ip.to_vec());
            } else {
                self.stats.drop(DropReason::IdleQueueFull);
            }
            if !ue.idle_reported {
                ue.idle_reported = true;
                self.events.push_back(Event::UplinkWhileIdle { ue_ip: src });
            }
            return Uplink::Held;
        };
        let h = &mut self.uplink;
        h.teid = t.sgw.teid.0;
        if h.seq.is_some() {
            h.seq = Some(ue.seq);
            ue.seq = ue.seq.wrapping_add(1);
        }
        out.clear();
        out.resize(h.header_len() + ip.len(), 0);
        h.emit_with_payload(out, ip);
        Uplink::Send(SocketAddrV4::new(t.sgw.ipv4, gtpu::PORT))
    }

    /// A datagram received on the S1-U socket from `from`; a message to
    /// send on is left in `out` ([`Downlink::Send`]).
    pub fn downlink<'a>(
        &mut self,
        now: Instant,
        datagram: &'a [u8],
        from: SocketAddrV4,
        out: &mut Vec<u8>,
    ) -> Downlink<'a> {
        let d = self.decap(datagram, from, out);
        match &d {
            Downlink::Deliver(ip) => {
                self.stats.downlink_packets += 1;
                self.stats.downlink_bytes += ip.len() as u64;
                let ue = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
                self.activity(ue, now);
            }
            Downlink::Drop(r) => self.stats.drop(*r),
            Downlink::Reply(_) | Downlink::Send(_) | Downlink::Held => {}
        }
        d
    }

    fn decap<'a>(&mut self, datagram: &'a [u8], from: SocketAddrV4, out: &mut Vec<u8>) -> Downlink<'a> {
        let Ok(m) = gtpu::parse(datagram) else { return Downlink::Drop(DropReason::Malformed) };
        let teid = Teid(m.header.teid);
        match m.body {
            Body::GPdu(ip) => {
                let Some(&(ue_ip, role)) = self.by_teid.get(&teid) else {
                    // TS 29.281 7.3.1: tell the sender the tunnel is unknown.
                    self.stats.error_indications_sent += 1;
                    self.stats.drop(DropReason::UnknownTeid);
                    self.ei_seq = self.ei_seq.wrapping_add(1);
                    let local = IpAddr::V4(self.local.unwrap_or(Ipv4Addr::UNSPECIFIED));
                    return Downlink::Reply(gtpu::error_indication(
                        self.ei_seq,
                        m.header.teid,
                        local,
                        Some(from.port()),
                    ));
                };
                if !is_for(ip, ue_ip) {
                    return Downlink::Drop(DropReason::WrongDestination);
                }
                self.gpdu(ue_ip, teid, role, ip, out)
            }
            Body::EndMarker => match self.by_teid.get(&teid) {
                Some(&(ue_ip, Role::Source)) => self.forward_end_marker(ue_ip, out),
                Some(&(ue_ip, Role::Forwarded)) => self.end_marker_at_target(ue_ip, teid),
                // On the current tunnel (no forwarding): nothing waits for it.
                _ => Downlink::Drop(DropReason::Ignored),
            },
            Body::EchoRequest => {
                self.stats.echo_requests += 1;
                Downlink::Reply(gtpu::echo_response(m.header.seq))
            }
            Body::ErrorIndication { .. } => {
                self.stats.error_indications_received += 1;
                Downlink::Drop(DropReason::Ignored)
            }
            _ => Downlink::Drop(DropReason::Ignored),
        }
    }

    fn gpdu<'a>(&mut self, ue_ip: Ipv4Addr, teid: Teid, role: Role, ip: &'a [u8], out: &mut Vec<u8>) -> Downlink<'a> {
        let Some(ue) = self.by_ue.get_mut(&ue_ip) else { return Downlink::Drop(DropReason::UnknownUe) };
        match role {
            Role::Source => {
                let Some(s) = ue.source else { return Downlink::Drop(DropReason::UnknownTeid) };
                // TS 36.300 10.1.2.1.1 step 8: on to the target, in order.
                self.stats.forwarded += 1;
                out.clear();
                let repr = gtpu::Repr { header: HeaderRepr::gpdu(s.forward_to.teid.0), body: Body::GPdu(ip) };
                repr.emit_into(out);
                Downlink::Send(SocketAddrV4::new(s.forward_to.ipv4, gtpu::PORT))
            }
            Role::Forwarded => {
                let bound = self.hold.forwarded_packets;
                let Some(t) = ue.target.as_mut().filter(|t| t.forwarding == teid) else {
                    // A previous handover's forwarding, after the UE left it.
                    self.stats.late_forwarded += 1;
                    return Downlink::Deliver(ip);
                };
                if t.timed_out {
                    self.stats.late_forwarded += 1;
                    return Downlink::Deliver(ip);
                }
                if t.arrived {
                    return Downlink::Deliver(ip);
                }
                if t.forwarded.len() >= bound {
                    return Downlink::Drop(DropReason::ForwardingQueueFull);
                }
                t.forwarded.push_back(ip.to_vec());
                Downlink::Held
            }
            Role::Current => {
                let bound = self.hold.end_marker_hold_packets;
                match ue.target.as_mut() {
                    Some(t) if t.arrived && !t.end_marker && !t.timed_out => {
                        t.new_path.push_back(ip.to_vec());
                        if t.new_path.len() >= bound {
                            self.give_up(ue_ip);
                        }
                        Downlink::Held
                    }
                    _ => Downlink::Deliver(ip),
                }
            }
        }
    }

    /// A source received the End Marker on its old tunnel: send it on and
    /// forget the tunnel (TS 36.300 10.1.2.2, TS 29.281 7.3.2).
    fn forward_end_marker<'a>(&mut self, ue_ip: Ipv4Addr, out: &mut Vec<u8>) -> Downlink<'a> {
        let Some(s) = self.by_ue.get_mut(&ue_ip).and_then(|u| u.source.take()) else {
            return Downlink::Drop(DropReason::Ignored);
        };
        self.by_teid.remove(&s.teid);
        self.stats.end_markers_forwarded += 1;
        self.events.push_back(Event::EndMarkerForwarded { ue_ip });
        *out = gtpu::end_marker(s.forward_to.teid.0);
        Downlink::Send(SocketAddrV4::new(s.forward_to.ipv4, gtpu::PORT))
    }

    /// A target received the End Marker on its forwarding tunnel: the new
    /// path's held packets go to the UE, after every forwarded one.
    fn end_marker_at_target<'a>(&mut self, ue_ip: Ipv4Addr, teid: Teid) -> Downlink<'a> {
        self.stats.end_markers_received += 1;
        let Some(ue) = self.by_ue.get_mut(&ue_ip) else { return Downlink::Drop(DropReason::Ignored) };
        let Some(t) = ue.target.as_mut().filter(|t| t.forwarding == teid) else {
            // A previous handover's forwarding ends: forget its TEID.
            self.by_teid.remove(&teid);
            return Downlink::Held;
        };
        let forwarding = t.forwarding;
        if t.timed_out {
            ue.target = None;
            self.by_teid.remove(&forwarding);
            return Downlink::Held;
        }
        t.end_marker = true;
        if !t.arrived {
            // Delivered with the forwarded ones at complete_handover.
            return Downlink::Held;
        }
        if let Some(t) = ue.target.take() {
            self.by_teid.remove(&forwarding);
            self.flush_target(t);
            self.finish(ue_ip, false);
        }
        Downlink::Held
    }
}

#[cfg(test)]
mod tests;
