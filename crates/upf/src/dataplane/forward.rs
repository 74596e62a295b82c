//! The per-packet pipeline of the user-space data path (TS 29.244 5.2.1):
//! find the session and its PDR (fragments of sessions with port-based
//! SDF filters through the fragment table, see `defrag`), then QER (gate,
//! MBR), URR (counting; reports are `crate::urr`'s) and the FAR (FORW / BUFF /
//! DROP, and DUPL copies, see `dupl`).
//!
//! GTP-U MTU: a packet whose GTP-U/UDP/IPv4 encapsulation (36 octets)
//! would exceed `s1u_mtu` (downlink towards the eNB, or uplink forwarded
//! with Outer Header Creation) is split into inner fragments (RFC 791),
//! each encapsulated (`upf_dl_fragmented`, `upf_ul_fragmented`), so the
//! outer packet is never fragmented (TS 29.281 / TS 23.060 ask to avoid
//! it); with DF set it is dropped and answered with ICMP Fragmentation
//! Needed carrying the MTU left for the inner packet (RFC 1191): to the
//! core side for downlink, to the UE through its tunnel for uplink,
//! rate-limited like Error Indications (`upf_icmp_frag_needed`,
//! `upf_icmp_suppressed`).

use super::defrag::{self, FragKey, Later};
use super::flow::FlowKey;
use super::ipv4::{self, Ipv4Info};
use super::ipv6;
use super::{dupl, DropReason, SessionState, TokenBucket, Transmit, UserPlane, Verdict};
use crate::rules::{GtpuTunnel, PlaneReport, INTERFACE_CORE};
use mobicore_gtp::gtpu::{self, msg, HeaderRepr, Packet};
use std::net::{IpAddr, Ipv6Addr, SocketAddrV4};
use std::time::Instant;

impl UserPlane {
    /// One UDP datagram received on S1-U port 2152 from `from`.
    pub fn uplink(&mut self, now: Instant, from: SocketAddrV4, datagram: &[u8]) -> Verdict {
        let v = self.uplink_inner(now, from, datagram);
        if let Verdict::Dropped(r) = v {
            self.counters.incr(r.counter());
        }
        v
    }

    /// One IPv4 packet for a UE, received on the core side.
    pub fn downlink(&mut self, now: Instant, packet: &[u8]) -> Verdict {
        let v = self.downlink_inner(now, packet, None);
        if let Verdict::Dropped(r) = v {
            self.counters.incr(r.counter());
        }
        v
    }

    fn uplink_inner(&mut self, now: Instant, from: SocketAddrV4, datagram: &[u8]) -> Verdict {
        let Ok(p) = Packet::new_checked(datagram) else {
            return Verdict::Dropped(DropReason::Malformed);
        };
        match p.msg_type() {
            msg::G_PDU => {}
            msg::ECHO_REQUEST => {
                // TS 29.281 7.2.2: answered to the request's source port.
                self.counters.incr("gtpu_echo_request");
                self.transmits.push_back(Transmit::Gtpu { to: from, bytes: gtpu::echo_response(p.seq()) });
                return Verdict::Control;
            }
            msg::ECHO_RESPONSE => {
                self.counters.incr("gtpu_echo_response");
                return Verdict::Control;
            }
            msg::ERROR_INDICATION => {
                self.counters.incr("gtpu_error_indication_received");
                return Verdict::Control;
            }
            msg::END_MARKER => {
                self.counters.incr("gtpu_end_marker_received");
                self.relay_end_marker(p.teid());
                return Verdict::Control;
            }
            _ => return Verdict::Dropped(DropReason::Unsupported),
        }
        let teid = p.teid();
        let Some(&seid) = self.by_teid.get(&teid) else {
            self.error_indication(now, from, teid);
            return Verdict::Dropped(DropReason::UnknownTeid);
        };
        let inner = &datagram[p.payload_offset()..p.total_len()];
        let s = self.sessions.get(&seid).expect("indexed session");
        // Downlink on an indirect data forwarding tunnel (TS 23.401
        // 5.5.1.2.2): on to the target eNB as it is.
        if let Some(pdr) = forwarding_pdr(s, teid) {
            return self.apply(now, seid, pdr, inner, true, false);
        }
        if inner.first().is_some_and(|b| b >> 4 == 6) {
            return self.uplink_ipv6(now, seid, teid, inner);
        }
        let Some(ip) = ipv4::parse(inner) else {
            return Verdict::Dropped(DropReason::Malformed);
        };
        if ip.fragment && !defrag::in_range(inner) {
            return Verdict::Dropped(DropReason::FragOutOfRange);
        }
        let s = self.sessions.get(&seid).expect("indexed session");
        // Anti-spoofing: the inner source must be the session's UE address.
        if s.ue_ip.is_some_and(|ue| ue != ip.src) {
            return Verdict::Dropped(DropReason::Spoofed);
        }
        let key = FlowKey {
            proto: ip.proto,
            ue: ip.src,
            remote: ip.dst,
            ue_port: ip.ports.map(|p| p.0),
            remote_port: ip.ports.map(|p| p.1),
        };
        let pdr = s.ul_pdrs.iter().copied().find(|id| {
            let pd = &s.rules.pdrs[id].pdi;
            pd.local_fteid.is_some_and(|f| f.0 == teid)
                && (pd.flows.is_empty() || pd.flows.iter().any(|f| f.matches(&key)))
        });
        if ip.fragment && s.frag_ul {
            return self.fragment_step(now, seid, &ip, inner, pdr, true);
        }
        let Some(pdr) = pdr else {
            return Verdict::Dropped(DropReason::NoPdr);
        };
        self.apply(now, seid, pdr, inner, true, false)
    }

    /// An IPv6 packet of the UE on `teid` (a PDN connection of type IPv6
    /// or IPv4v6): a Router Solicitation is answered with the session's
    /// prefix; anything else must come from that /64 and meet an uplink
    /// PDR whose filters an IPv6 packet can match.
    fn uplink_ipv6(&mut self, now: Instant, seid: u64, teid: u32, inner: &[u8]) -> Verdict {
        let Some(ip) = ipv6::parse(inner) else {
            return Verdict::Dropped(DropReason::Malformed);
        };
        let s = &self.sessions[&seid];
        let Some(ue) = s.ue_ip6 else {
            return Verdict::Dropped(DropReason::NoPdr);
        };
        if ipv6::is_router_solicitation(&ip, inner) {
            return self.router_advertisement(seid, ip.src, ue);
        }
        if ipv6::prefix64(ip.src) != ipv6::prefix64(ue) {
            return Verdict::Dropped(DropReason::Spoofed);
        }
        let (ue_port, remote_port) = (ip.ports.map(|p| p.0), ip.ports.map(|p| p.1));
        let pdr = s.ul_pdrs.iter().copied().find(|id| {
            let pd = &s.rules.pdrs[id].pdi;
            pd.local_fteid.is_some_and(|f| f.0 == teid)
                && (pd.flows.is_empty()
                    || pd.flows.iter().any(|f| f.matches_ipv6(ip.next_header, ue_port, remote_port)))
        });
        let Some(pdr) = pdr else {
            return Verdict::Dropped(DropReason::NoPdr);
        };
        self.apply(now, seid, pdr, inner, true, false)
    }

    /// TS 29.061 11.2.1.3.2: the gateway answers a Router Solicitation with
    /// a Router Advertisement of the PDN connection's /64, through the
    /// session's downlink tunnel (none while it buffers: the UE is idle).
    fn router_advertisement(&mut self, seid: u64, from: Ipv6Addr, ue: Ipv6Addr) -> Verdict {
        let s = &self.sessions[&seid];
        let tunnel = s.dl_pdrs.iter().find_map(|id| {
            let far = s.rules.pdrs[id].far_id.and_then(|f| s.rules.fars.get(&f))?;
            far.action.forw.then_some(far.outer_header_creation).flatten()
        });
        let Some(t) = tunnel else {
            return Verdict::Dropped(DropReason::NoDestination);
        };
        // To the solicitation's source, or all nodes if it had none.
        let dst = if from.is_unspecified() { Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1) } else { from };
        let mtu = u32::try_from(self.cfg.s1u_mtu.saturating_sub(20 + 8 + 8)).ok();
        let ra = ipv6::router_advertisement(dst, ue, mtu);
        self.counters.incr("upf_ipv6_router_advertisement");
        let to = SocketAddrV4::new(t.ipv4, gtpu::PORT);
        self.transmits.push_back(Transmit::Gtpu { to, bytes: gtpu::gpdu(t.teid, &ra) });
        Verdict::Control
    }

    /// An IPv6 packet for a UE from the core: the session by the /64 of
    /// its destination, then the downlink PDR of highest precedence whose
    /// UE address has that /64 and whose filters an IPv6 packet can match.
    fn downlink_ipv6(&mut self, now: Instant, packet: &[u8], released: Option<u16>) -> Verdict {
        let Some(ip) = ipv6::parse(packet) else {
            return Verdict::Dropped(DropReason::Malformed);
        };
        let prefix = ipv6::prefix64(ip.dst);
        let Some(&seid) = self.by_ue6.get(&prefix) else {
            return Verdict::Dropped(DropReason::NoSession);
        };
        let s = &self.sessions[&seid];
        let pdr = released.filter(|p| s.rules.pdrs.contains_key(p)).or_else(|| {
            let (ue_port, remote_port) = (ip.ports.map(|p| p.1), ip.ports.map(|p| p.0));
            s.dl_pdrs.iter().copied().find(|id| {
                let pd = &s.rules.pdrs[id].pdi;
                pd.ue_ipv6.is_some_and(|u| ipv6::prefix64(u) == prefix)
                    && (pd.flows.is_empty()
                        || pd.flows.iter().any(|f| f.matches_ipv6(ip.next_header, ue_port, remote_port)))
            })
        });
        let Some(pdr) = pdr else {
            return Verdict::Dropped(DropReason::NoPdr);
        };
        self.apply(now, seid, pdr, packet, false, released.is_some())
    }

    /// A fragment in a session whose PDRs filter on ports: the first
    /// fragment's PDR (`matched`) is kept for the later ones, which wait
    /// for it if they come first (see `defrag`).
    fn fragment_step(
        &mut self,
        now: Instant,
        seid: u64,
        ip: &Ipv4Info,
        pkt: &[u8],
        matched: Option<u16>,
        uplink: bool,
    ) -> Verdict {
        self.handle_timeout(now);
        let key = FragKey { src: ip.src, dst: ip.dst, proto: ip.proto, id: ip.id };
        if ip.frag_offset == 0 {
            let held = self.defrag.first(now, seid, key, matched);
            let Some(pdr) = matched else {
                for _ in &held {
                    self.counters.incr(DropReason::NoPdr.counter());
                }
                return Verdict::Dropped(DropReason::NoPdr);
            };
            let v = self.apply(now, seid, pdr, pkt, uplink, false);
            for h in held {
                if let Verdict::Dropped(r) = self.apply(now, seid, pdr, &h, uplink, false) {
                    self.counters.incr(r.counter());
                }
            }
            return v;
        }
        match self.defrag.later(now, seid, key, pkt) {
            Later::Follow(Some(p)) if self.sessions[&seid].rules.pdrs.contains_key(&p) => {
                self.apply(now, seid, p, pkt, uplink, false)
            }
            Later::Follow(_) => Verdict::Dropped(DropReason::NoPdr),
            Later::Held => {
                self.counters.incr("upf_frag_held");
                Verdict::Held
            }
            Later::Overflow => Verdict::Dropped(DropReason::FragOverflow),
            Later::OutOfRange => Verdict::Dropped(DropReason::FragOutOfRange),
        }
    }

    /// An End Marker on an indirect data forwarding tunnel goes on to the
    /// target eNB (TS 23.401 5.5.1.2.2 step 14: it follows the forwarded
    /// packets); on any other TEID it ends nothing here and is dropped
    /// (`gtpu_end_marker_not_relayed`: one arriving after its forwarding
    /// tunnel was deleted leaves the target waiting for it).
    fn relay_end_marker(&mut self, teid: u32) {
        let s = self.by_teid.get(&teid).and_then(|seid| self.sessions.get(seid));
        let tunnel = s.and_then(|s| {
            let pdr = forwarding_pdr(s, teid)?;
            s.rules.pdrs[&pdr].far_id.and_then(|f| s.rules.fars.get(&f)).and_then(|f| f.outer_header_creation)
        });
        match tunnel {
            Some(t) => {
                self.counters.incr("gtpu_end_marker_relayed");
                let to = SocketAddrV4::new(t.ipv4, gtpu::PORT);
                self.transmits.push_back(Transmit::Gtpu { to, bytes: gtpu::end_marker(t.teid) });
            }
            None => self.counters.incr("gtpu_end_marker_not_relayed"),
        }
    }

    /// TS 29.281 7.3.1: an Error Indication to the sender of a G-PDU for an
    /// unknown TEID, at a bounded rate.
    fn error_indication(&mut self, now: Instant, from: SocketAddrV4, teid: u32) {
        if !self.error_indications.take(now, 1.0) {
            self.counters.incr("gtpu_error_indication_suppressed");
            return;
        }
        self.counters.incr("gtpu_error_indication_sent");
        self.gtpu_seq = self.gtpu_seq.wrapping_add(1);
        let b = gtpu::error_indication(self.gtpu_seq, teid, IpAddr::V4(self.cfg.s1u_addr), Some(from.port()));
        self.transmits.push_back(Transmit::Gtpu { to: SocketAddrV4::new(*from.ip(), gtpu::PORT), bytes: b });
    }

    /// `released`: the PDR that buffered the packet, when the buffer is
    /// being released.
    pub(crate) fn downlink_inner(&mut self, now: Instant, packet: &[u8], released: Option<u16>) -> Verdict {
        if packet.first().is_some_and(|b| b >> 4 == 6) {
            return self.downlink_ipv6(now, packet, released);
        }
        let Some(ip) = ipv4::parse(packet) else {
            return Verdict::Dropped(DropReason::Malformed);
        };
        // Every fragment, held for reassembly or not (RFC 791 3.2).
        if ip.fragment && !defrag::in_range(packet) {
            return Verdict::Dropped(DropReason::FragOutOfRange);
        }
        let Some(&seid) = self.by_ue.get(&ip.dst) else {
            return Verdict::Dropped(DropReason::NoSession);
        };
        let s = &self.sessions[&seid];
        if ip.fragment && s.frag_dl {
            // A released fragment keeps the PDR it was buffered under
            // (its first fragment may be long gone from the table).
            if let Some(p) = released.filter(|p| s.rules.pdrs.contains_key(p)) {
                return self.apply(now, seid, p, packet, false, true);
            }
            let matched = match_downlink(s, &ip);
            return self.fragment_step(now, seid, &ip, packet, matched, false);
        }
        let Some(pdr) = match_downlink(s, &ip) else {
            return Verdict::Dropped(DropReason::NoPdr);
        };
        self.apply(now, seid, pdr, packet, false, released.is_some())
    }

    /// QER, URR and FAR of `pdr` on one inner packet.
    fn apply(&mut self, now: Instant, seid: u64, pdr_id: u16, pkt: &[u8], uplink: bool, releasing: bool) -> Verdict {
        let s = self.sessions.get_mut(&seid).expect("session");
        let pdr = &s.rules.pdrs[&pdr_id];
        let Some(far) = pdr.far_id.and_then(|f| s.rules.fars.get(&f)) else {
            return Verdict::Dropped(DropReason::NoPdr);
        };
        let len = pkt.len();
        // QER (TS 29.244 5.4.2): gate, then MBR. Released packets passed
        // their QERs when they arrived.
        if !releasing {
            for q in &pdr.qer_ids {
                let qer = &s.rules.qers[q];
                if !(if uplink { qer.gate_ul_open } else { qer.gate_dl_open }) {
                    return Verdict::Dropped(DropReason::GateClosed);
                }
                if let Some((ul, dl)) = qer.mbr {
                    let kbps = if uplink { ul } else { dl };
                    if kbps > 0 {
                        let rate = kbps as f64 * 1000.0 / 8.0;
                        let b = s
                            .buckets
                            .entry((*q, uplink))
                            .or_insert_with(|| TokenBucket::new(rate, (rate / 10.0).max(16_000.0)));
                        if !b.take(now, len as f64) {
                            return Verdict::Dropped(DropReason::MbrExceeded);
                        }
                    }
                }
            }
        }
        let action = far.action;
        // DUPL (TS 29.244 5.2.1): a copy per Duplicating Parameters,
        // whatever else the FAR does; released packets were copied when
        // they were buffered.
        if action.dupl && !releasing {
            dupl::copies(&far.duplicating, pkt, self.cfg.s1u_mtu, &mut self.transmits, &self.counters);
        }
        if action.buff {
            if action.drop || action.forw {
                return Verdict::Dropped(DropReason::FarDrop);
            }
            let count_cap =
                far.bar_id.and_then(|b| s.rules.bars.get(&b)).and_then(|b| b.suggested_buffering_packets_count);
            if s.buffer_bytes + len > self.cfg.buffer_session_bytes
                || self.buffered_total + len > self.cfg.buffer_total_bytes
                || count_cap.is_some_and(|c| c > 0 && s.buffer.len() >= c as usize)
            {
                return Verdict::Dropped(DropReason::BufferFull);
            }
            s.buffer.push_back((pdr_id, pkt.to_vec()));
            s.buffer_bytes += len;
            self.buffered_total += len;
            self.counters.incr("upf_buffered");
            // TS 29.244 5.2.3.1: NOCP asks for a report of the first
            // buffered packet.
            if action.nocp && !s.dldr_sent {
                s.dldr_sent = true;
                self.reports.push_back(PlaneReport::DownlinkData { up_seid: seid, pdr_id });
            }
            return Verdict::Buffered;
        }
        if !action.forw {
            return Verdict::Dropped(DropReason::FarDrop);
        }
        let out: Vec<Transmit> = match far.outer_header_creation {
            Some(t) => {
                let to = SocketAddrV4::new(t.ipv4, gtpu::PORT);
                match encapsulate(t, pkt, self.cfg.s1u_mtu) {
                    Ok(v) => {
                        if v.len() > 1 {
                            self.counters.incr(if uplink { "upf_ul_fragmented" } else { "upf_dl_fragmented" });
                        }
                        v.into_iter().map(|bytes| Transmit::Gtpu { to, bytes }).collect()
                    }
                    Err(next_hop_mtu) => {
                        let src = self.cfg.icmp_source.unwrap_or(self.cfg.s1u_addr);
                        let icmp = next_hop_mtu.and_then(|m| ipv4::icmp_frag_needed(src, pkt, m));
                        return self.too_big(now, icmp, uplink);
                    }
                }
            }
            None if far.destination_interface == Some(INTERFACE_CORE) => vec![Transmit::Core(pkt.to_vec())],
            None => return Verdict::Dropped(DropReason::NoDestination),
        };
        // URR (TS 29.244 5.2.2): count what is forwarded; the usage engine
        // reads the counts (crate::urr).
        for u in &pdr.urr_ids {
            if let Some(st) = s.usage.get_mut(u) {
                st.add(uplink, len as u64);
            }
        }
        self.counters.incr(if uplink { "upf_ul_forwarded" } else { "upf_dl_forwarded" });
        self.transmits.extend(out);
        Verdict::Forwarded
    }

    /// A packet dropped as too big with DF set: ICMP Fragmentation Needed
    /// (RFC 1191) back to its sender, at the ICMP error rate. The sender of
    /// a downlink packet is on the core side; that of an uplink packet is
    /// the UE, reached through its session's downlink PDR and tunnel.
    fn too_big(&mut self, now: Instant, icmp: Option<Vec<u8>>, uplink: bool) -> Verdict {
        if let Some(icmp) = icmp {
            if !self.icmp_errors.take(now, 1.0) {
                self.counters.incr("upf_icmp_suppressed");
                return Verdict::Dropped(DropReason::TooBig);
            }
            self.counters.incr("upf_icmp_frag_needed");
            if !uplink {
                self.transmits.push_back(Transmit::Core(icmp));
            } else if let Verdict::Dropped(r) = self.downlink_inner(now, &icmp, None) {
                self.counters.incr(r.counter());
            }
        }
        Verdict::Dropped(DropReason::TooBig)
    }
}

/// The G-PDUs carrying `pkt` on `t` within `mtu` octets of outer IPv4:
/// one, or one per inner fragment. `Err(Some(m))`: DF is set and `m`
/// octets are left for the inner packet; `Err(None)`: not even a
/// fragment fits.
pub(super) fn encapsulate(t: GtpuTunnel, pkt: &[u8], mtu: usize) -> Result<Vec<Vec<u8>>, Option<u16>> {
    // Outer IPv4 (20) + UDP (8) + the GTP-U header with its optional
    // fields and extension headers (8 here: none are sent).
    let inner_mtu = mtu.saturating_sub(20 + 8 + HeaderRepr::gpdu(t.teid).header_len());
    if pkt.len() <= inner_mtu {
        return Ok(vec![gtpu::gpdu(t.teid, pkt)]);
    }
    // IPv6 is never fragmented on the way (RFC 8200 5): dropped, counted
    // as too big; the APN's MTU in the PCO keeps UEs below it.
    if ipv4::parse(pkt).is_none_or(|i| i.df) {
        return Err(Some(inner_mtu.min(usize::from(u16::MAX)) as u16));
    }
    let frags = ipv4::fragment(pkt, inner_mtu).ok_or(None)?;
    Ok(frags.iter().map(|f| gtpu::gpdu(t.teid, f)).collect())
}

/// The downlink PDR of highest precedence whose UE address and SDF filters
/// match. A non-first fragment carries no ports: in a session whose
/// filters look at ports it follows its first fragment instead (`defrag`).
fn match_downlink(s: &SessionState, ip: &Ipv4Info) -> Option<u16> {
    let key = FlowKey {
        proto: ip.proto,
        ue: ip.dst,
        remote: ip.src,
        ue_port: ip.ports.map(|p| p.1),
        remote_port: ip.ports.map(|p| p.0),
    };
    s.dl_pdrs.iter().copied().find(|id| {
        let pd = &s.rules.pdrs[id].pdi;
        pd.ue_ipv4.is_none_or(|u| u == ip.dst) && (pd.flows.is_empty() || pd.flows.iter().any(|f| f.matches(&key)))
    })
}

/// The session's PDR of an indirect data forwarding tunnel on `teid`: an
/// uplink PDR on that F-TEID whose FAR forwards back to the Access side
/// in GTP-U (TS 23.401 5.5.1.2.2 step 8).
fn forwarding_pdr(s: &SessionState, teid: u32) -> Option<u16> {
    s.ul_pdrs.iter().copied().find(|id| {
        let pdr = &s.rules.pdrs[id];
        pdr.pdi.local_fteid.is_some_and(|f| f.0 == teid)
            && pdr.far_id.and_then(|f| s.rules.fars.get(&f)).is_some_and(|far| {
                far.destination_interface == Some(crate::rules::INTERFACE_ACCESS) && far.outer_header_creation.is_some()
            })
    })
}
