//! The eNB side of S1-U for attached UEs, without I/O: which tunnel an
//! uplink IP packet goes into and which UE a downlink G-PDU belongs to.
//! The shell ([`super::UserPlane`]) moves the octets.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use mobicore_common::{Fteid, Teid};
use mobicore_gtp::gtpu::{self, Body, Extension, HeaderRepr};
use serde::Serialize;

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
    pub drops: HashMap<String, u64>,
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
    /// Send this GTP-U message back to the sender (Echo Response, Error
    /// Indication).
    Reply(Vec<u8>),
    Drop(DropReason),
}

/// The tunnels of every attached UE, by UE address and by eNB TEID.
#[derive(Debug)]
pub struct Tunnels {
    by_ue: HashMap<Ipv4Addr, UeTunnel>,
    by_teid: HashMap<Teid, Ipv4Addr>,
    /// The header of uplink G-PDUs (see [`uplink_header`]), kept so that
    /// only its TEID and sequence number change per packet (no
    /// allocation for its extension headers).
    uplink: HeaderRepr,
    seq: HashMap<Ipv4Addr, u16>,
    /// Sequence number of the Error Indications we send.
    ei_seq: u16,
    local: Option<Ipv4Addr>,
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

impl Tunnels {
    /// `local`: the eNB's S1-U address (the GTP-U Peer Address of the
    /// Error Indications it sends).
    pub fn new(local: Ipv4Addr, sequence_numbers: bool) -> Self {
        Tunnels {
            by_ue: HashMap::new(),
            by_teid: HashMap::new(),
            uplink: uplink_header(sequence_numbers, None),
            seq: HashMap::new(),
            ei_seq: 0,
            local: Some(local),
            stats: UserPlaneStats::default(),
        }
    }

    /// Uplink G-PDUs also carry a PDU Session Container with `qfi` (see
    /// [`uplink_header`]).
    pub fn with_pdu_session_container(mut self, qfi: u8) -> Self {
        self.uplink = uplink_header(self.uplink.seq.is_some(), Some(qfi));
        self
    }

    /// Add or replace a UE's tunnel.
    pub fn insert(&mut self, t: UeTunnel) {
        if let Some(old) = self.by_ue.insert(t.ue_ip, t) {
            self.by_teid.remove(&old.enb.teid);
        }
        self.by_teid.insert(t.enb.teid, t.ue_ip);
    }

    pub fn remove(&mut self, ue_ip: Ipv4Addr) -> Option<UeTunnel> {
        let t = self.by_ue.remove(&ue_ip)?;
        self.by_teid.remove(&t.enb.teid);
        self.seq.remove(&ue_ip);
        Some(t)
    }

    pub fn get(&self, ue_ip: Ipv4Addr) -> Option<&UeTunnel> {
        self.by_ue.get(&ue_ip)
    }

    pub fn len(&self) -> usize {
        self.by_ue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_ue.is_empty()
    }

    /// An IP packet the UE sent (read from the TUN): encapsulate it into
    /// `out` as a G-PDU on the UE's uplink tunnel (TS 29.281 5.1) and
    /// return where to send it.
    pub fn uplink(&mut self, ip: &[u8], out: &mut Vec<u8>) -> Result<SocketAddrV4, DropReason> {
        let r = self.encap(ip, out);
        match r {
            Ok(_) => {
                self.stats.uplink_packets += 1;
                self.stats.uplink_bytes += ip.len() as u64;
            }
            Err(e) => self.stats.drop(e),
        }
        r
    }

    fn encap(&mut self, ip: &[u8], out: &mut Vec<u8>) -> Result<SocketAddrV4, DropReason> {
        if ip.len() < 20 || ip[0] >> 4 != 4 {
            return Err(DropReason::NotIpv4);
        }
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let t = self.by_ue.get(&src).ok_or(DropReason::UnknownUe)?;
        let h = &mut self.uplink;
        h.teid = t.sgw.teid.0;
        if h.seq.is_some() {
            let s = self.seq.entry(src).or_default();
            h.seq = Some(*s);
            *s = s.wrapping_add(1);
        }
        out.clear();
        out.resize(h.header_len() + ip.len(), 0);
        h.emit_with_payload(out, ip);
        Ok(SocketAddrV4::new(t.sgw.ipv4, gtpu::PORT))
    }

    /// A datagram received on the S1-U socket from `from`.
    pub fn downlink<'a>(&mut self, datagram: &'a [u8], from: SocketAddrV4) -> Downlink<'a> {
        let d = self.decap(datagram, from);
        match &d {
            Downlink::Deliver(ip) => {
                self.stats.downlink_packets += 1;
                self.stats.downlink_bytes += ip.len() as u64;
            }
            Downlink::Drop(r) => self.stats.drop(*r),
            Downlink::Reply(_) => {}
        }
        d
    }

    fn decap<'a>(&mut self, datagram: &'a [u8], from: SocketAddrV4) -> Downlink<'a> {
        let Ok(m) = gtpu::parse(datagram) else { return Downlink::Drop(DropReason::Malformed) };
        match m.body {
            Body::GPdu(ip) => {
                let Some(&ue) = self.by_teid.get(&Teid(m.header.teid)) else {
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
                if ip.len() < 20 || ip[0] >> 4 != 4 || ip[16..20] != ue.octets() {
                    return Downlink::Drop(DropReason::WrongDestination);
                }
                Downlink::Deliver(ip)
            }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ENB: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 1);
    const SGW: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 2);
    const PEER: SocketAddrV4 = SocketAddrV4::new(SGW, 2152);

    fn tunnel(i: u8) -> UeTunnel {
        UeTunnel {
            ue_ip: Ipv4Addr::new(10, 45, 0, i),
            sgw: Fteid { teid: Teid(0x1000 + u32::from(i)), ipv4: SGW },
            enb: Fteid { teid: Teid(0x9000 + u32::from(i)), ipv4: ENB },
        }
    }

    fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
        p.extend_from_slice(&src.octets());
        p.extend_from_slice(&dst.octets());
        p.extend_from_slice(payload);
        let len = p.len() as u16;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        p
    }

    #[test]
    fn uplink_encapsulates_on_the_sgw_teid() {
        let mut t = Tunnels::new(ENB, false);
        t.insert(tunnel(2));
        let ip = ipv4(Ipv4Addr::new(10, 45, 0, 2), Ipv4Addr::new(10, 200, 2, 2), b"data");
        let mut out = Vec::new();
        assert_eq!(t.uplink(&ip, &mut out), Ok(PEER));
        assert_eq!(&out[..8], &[0x30, 255, 0, ip.len() as u8, 0, 0, 0x10, 0x02]);
        assert_eq!(&out[8..], &ip[..]);
        let m = gtpu::parse(&out).unwrap();
        assert_eq!(m.body, Body::GPdu(&ip));
        assert_eq!(t.stats.uplink_packets, 1);
        assert_eq!(t.stats.uplink_bytes, ip.len() as u64);
    }

    #[test]
    fn uplink_with_pdu_session_container_tags_the_qfi() {
        let mut t = Tunnels::new(ENB, true).with_pdu_session_container(9);
        t.insert(tunnel(2));
        let ip = ipv4(Ipv4Addr::new(10, 45, 0, 2), Ipv4Addr::new(10, 200, 2, 2), b"data");
        let mut out = Vec::new();
        t.uplink(&ip, &mut out).unwrap();
        // E and S flags; 4 optional octets, then one 4-octet extension:
        // length 1, PDU type 1 (UL) in the high nibble, QFI 9, next type 0.
        assert_eq!(out[0], 0x36);
        assert_eq!(out[11], 0x85);
        assert_eq!(&out[12..16], &[1, 0x10, 9, 0]);
        assert_eq!(&out[16..], &ip[..]);
        let p = gtpu::Packet::new_checked(&out[..]).unwrap();
        let qfis: Vec<_> = p.extensions().map(|(kind, c)| Extension { kind, content: c.to_vec() }.qfi()).collect();
        assert_eq!(qfis, vec![Some(9)]);
        assert_eq!(p.payload(), &ip[..]);
    }

    #[test]
    fn uplink_header_len_is_what_gtpu_adds() {
        // The TUN MTU budget (shell::setup_routing) is the emitted header.
        for (seq, qfi, len) in [(false, None, 8), (true, None, 12), (false, Some(9), 16), (true, Some(9), 16)] {
            let mut t = Tunnels::new(ENB, seq);
            if let Some(q) = qfi {
                t = t.with_pdu_session_container(q);
            }
            t.insert(tunnel(2));
            let ip = ipv4(Ipv4Addr::new(10, 45, 0, 2), Ipv4Addr::new(8, 8, 8, 8), b"x");
            let mut out = vec![0xee; 3000];
            t.uplink(&ip, &mut out).unwrap();
            assert_eq!(uplink_header(seq, qfi).header_len(), len);
            assert_eq!(out.len() - ip.len(), len, "seq {seq} qfi {qfi:?}");
        }
    }

    #[test]
    fn uplink_with_sequence_numbers_counts_per_tunnel() {
        let mut t = Tunnels::new(ENB, true);
        t.insert(tunnel(2));
        let ip = ipv4(Ipv4Addr::new(10, 45, 0, 2), Ipv4Addr::new(8, 8, 8, 8), b"x");
        let mut out = Vec::new();
        for want in 0..3u16 {
            t.uplink(&ip, &mut out).unwrap();
            let m = gtpu::parse(&out).unwrap();
            assert_eq!(m.header.seq, Some(want));
            assert_eq!(m.body, Body::GPdu(&ip));
        }
    }

    #[test]
    fn uplink_from_unknown_source_or_non_ipv4_is_dropped() {
        let mut t = Tunnels::new(ENB, false);
        t.insert(tunnel(2));
        let mut out = Vec::new();
        let spoofed = ipv4(Ipv4Addr::new(10, 45, 0, 3), Ipv4Addr::new(8, 8, 8, 8), b"x");
        assert_eq!(t.uplink(&spoofed, &mut out), Err(DropReason::UnknownUe));
        assert_eq!(t.uplink(&[0x60; 40], &mut out), Err(DropReason::NotIpv4));
        assert_eq!(t.uplink(&[0x45; 3], &mut out), Err(DropReason::NotIpv4));
        assert_eq!(t.stats.dropped(), 3);
        assert_eq!(t.stats.uplink_packets, 0);
    }

    #[test]
    fn downlink_by_teid_delivers_the_inner_packet() {
        let mut t = Tunnels::new(ENB, false);
        t.insert(tunnel(2));
        t.insert(tunnel(3));
        let ip = ipv4(Ipv4Addr::new(10, 200, 2, 2), Ipv4Addr::new(10, 45, 0, 3), b"reply");
        let mut g = gtpu::gpdu(0x9003, &ip);
        assert_eq!(t.downlink(&g, PEER), Downlink::Deliver(&ip));
        // The same packet on UE 2's TEID is not UE 2's.
        g[4..8].copy_from_slice(&0x9002u32.to_be_bytes());
        assert_eq!(t.downlink(&g, PEER), Downlink::Drop(DropReason::WrongDestination));
        assert_eq!(t.stats.downlink_packets, 1);
    }

    #[test]
    fn downlink_on_unknown_teid_answers_error_indication() {
        let mut t = Tunnels::new(ENB, false);
        let ip = ipv4(Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::new(10, 45, 0, 9), b"");
        let g = gtpu::gpdu(0x4242, &ip);
        let Downlink::Reply(r) = t.downlink(&g, PEER) else { panic!("no reply") };
        let m = gtpu::parse(&r).unwrap();
        assert_eq!(m.body, Body::ErrorIndication { teid_data_i: 0x4242, peer: IpAddr::V4(ENB) });
        assert_eq!(t.stats.error_indications_sent, 1);
    }

    #[test]
    fn echo_request_is_answered_with_its_sequence_number() {
        let mut t = Tunnels::new(ENB, false);
        let req = gtpu::Repr {
            header: HeaderRepr { msg_type: gtpu::msg::ECHO_REQUEST, teid: 0, seq: Some(77), ..Default::default() },
            body: Body::EchoRequest,
        }
        .to_vec();
        let Downlink::Reply(r) = t.downlink(&req, PEER) else { panic!("no reply") };
        let m = gtpu::parse(&r).unwrap();
        assert_eq!(m.header.seq, Some(77));
        assert_eq!(m.body, Body::EchoResponse { recovery: 0 });
    }

    #[test]
    fn replacing_a_tunnel_forgets_the_old_teid() {
        let mut t = Tunnels::new(ENB, false);
        t.insert(tunnel(2));
        let mut moved = tunnel(2);
        moved.enb.teid = Teid(0x7777);
        t.insert(moved);
        assert_eq!(t.len(), 1);
        assert!(!t.by_teid.contains_key(&Teid(0x9002)));
        assert_eq!(t.remove(moved.ue_ip), Some(moved));
        assert!(t.is_empty() && t.by_teid.is_empty());
    }

    proptest! {
        #[test]
        fn downlink_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut t = Tunnels::new(ENB, false);
            t.insert(tunnel(2));
            let _ = t.downlink(&bytes, PEER);
        }

        #[test]
        fn uplink_then_downlink_round_trips(payload in proptest::collection::vec(any::<u8>(), 0..1400), seq in any::<bool>(), qfi in proptest::option::of(0u8..64)) {
            let mut t = Tunnels::new(ENB, seq);
            if let Some(q) = qfi {
                t = t.with_pdu_session_container(q);
            }
            let tun = tunnel(2);
            t.insert(tun);
            let ip = ipv4(tun.ue_ip, tun.ue_ip, &payload);
            let mut out = Vec::new();
            t.uplink(&ip, &mut out).unwrap();
            // Reflect: same packet on the eNB's TEID.
            out[4..8].copy_from_slice(&tun.enb.teid.0.to_be_bytes());
            prop_assert_eq!(t.downlink(&out, PEER), Downlink::Deliver(&ip));
        }
    }
}
