//! FAR DUPL (TS 29.244 5.2.1, Apply Action 8.2.26): besides what the FAR
//! does with a packet (forward, buffer or drop), a copy goes to each of
//! its Duplicating Parameters (Table 7.5.2.3-3): in GTP-U/UDP/IPv4 to the
//! Outer Header Creation's peer (port 2152) with the Transport Level
//! Marking's ToS on the outer header, or as is to the core side when no
//! outer header is asked for and the destination is Core. Copies are made
//! of the packet as received (before the FAR's own encapsulation), are
//! not counted by URRs, and are held to the GTP-U MTU like forwarded
//! packets (inner fragments); one with DF set that does not fit is sent
//! whole, the kernel fragmenting its outer packet, as a copy is never
//! refused back to the sender (`upf_dupl_outer_fragmented`). Counter:
//! `upf_duplicated` per copy.
//! The XDP fast path passes packets of DUPL FARs up to this slow path.

use super::Transmit;
use crate::rules::{Duplicate, INTERFACE_CORE};
use mobicore_common::counters::Counters;
use mobicore_gtp::gtpu;
use std::collections::VecDeque;
use std::net::SocketAddrV4;

/// Queues one copy of `pkt` per Duplicating Parameters, GTP-U copies
/// within `mtu` octets of outer IPv4.
pub(crate) fn copies(dups: &[Duplicate], pkt: &[u8], mtu: usize, out: &mut VecDeque<Transmit>, counters: &Counters) {
    for d in dups {
        let Some(t) = d.outer_header_creation else {
            // Rules without a way to deliver copies are refused at
            // installation (SessionRules::check); counted if one slips by.
            if d.destination_interface == INTERFACE_CORE {
                counters.incr("upf_duplicated");
                out.push_back(Transmit::Core(pkt.to_vec()));
            } else {
                counters.incr("upf_dupl_no_destination");
            }
            continue;
        };
        let gpdus = super::forward::encapsulate(t, pkt, mtu).unwrap_or_else(|_| {
            counters.incr("upf_dupl_outer_fragmented");
            vec![gtpu::gpdu(t.teid, pkt)]
        });
        let to = SocketAddrV4::new(t.ipv4, gtpu::PORT);
        out.extend(gpdus.into_iter().map(|bytes| match d.tos {
            Some(tos) => Transmit::GtpuMarked { to, tos, bytes },
            None => Transmit::Gtpu { to, bytes },
        }));
        counters.incr("upf_duplicated");
    }
}
