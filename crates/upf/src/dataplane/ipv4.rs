//! The few IPv4 header fields the user-space data path reads (RFC 791),
//! checked before use: no panic on any input; and the packets it builds:
//! fragments of an inner packet too big for the S1-U path (RFC 791 3.2)
//! and ICMP Fragmentation Needed (RFC 792, RFC 1191).

use mobicore_common::inet::checksum;
use std::net::Ipv4Addr;

/// What rule matching needs from an inner IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Info {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    /// Source and destination ports, for the first (or only) fragment of
    /// TCP, UDP and SCTP.
    pub ports: Option<(u16, u16)>,
    /// MF set or a non-zero fragment offset.
    pub fragment: bool,
    /// Identification (reassembly key with src, dst, proto).
    pub id: u16,
    /// Don't Fragment.
    pub df: bool,
    /// Fragment offset in 8-octet units (0: the first or only fragment).
    pub frag_offset: u16,
}

pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_SCTP: u8 = 132;

/// Reads an IPv4 header; `None` if it is not a well-formed IPv4 packet
/// that fits `b`.
pub fn parse(b: &[u8]) -> Option<Ipv4Info> {
    if b.len() < 20 || b[0] >> 4 != 4 {
        return None;
    }
    let ihl = (b[0] & 0x0f) as usize * 4;
    let total = u16::from_be_bytes([b[2], b[3]]) as usize;
    if ihl < 20 || total < ihl || total > b.len() {
        return None;
    }
    let frag = u16::from_be_bytes([b[6], b[7]]);
    let offset = frag & 0x1fff;
    let fragment = frag & 0x2000 != 0 || offset != 0;
    let proto = b[9];
    let ports = match proto {
        PROTO_TCP | PROTO_UDP | PROTO_SCTP if offset == 0 && total >= ihl + 4 => {
            Some((u16::from_be_bytes([b[ihl], b[ihl + 1]]), u16::from_be_bytes([b[ihl + 2], b[ihl + 3]])))
        }
        _ => None,
    };
    Some(Ipv4Info {
        src: Ipv4Addr::new(b[12], b[13], b[14], b[15]),
        dst: Ipv4Addr::new(b[16], b[17], b[18], b[19]),
        proto,
        ports,
        fragment,
        id: u16::from_be_bytes([b[4], b[5]]),
        df: frag & 0x4000 != 0,
        frag_offset: offset,
    })
}

pub const PROTO_ICMP: u8 = 1;
const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;

fn set_header_checksum(p: &mut [u8], ihl: usize) {
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(&p[..ihl]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
}

/// The options of a header that every fragment carries: those with the
/// copied flag (RFC 791 3.1, option-type bit 0x80), padded to 4 octets.
fn copied_options(opts: &[u8]) -> Vec<u8> {
    let mut out = vec![];
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,  // End of Option List
            1 => i += 1, // No Operation
            t => {
                let Some(&l) = opts.get(i + 1) else { break };
                let l = l as usize;
                if l < 2 || i + l > opts.len() {
                    break;
                }
                if t & 0x80 != 0 {
                    out.extend_from_slice(&opts[i..i + l]);
                }
                i += l;
            }
        }
    }
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out
}

/// RFC 791 3.2 fragmentation of the IPv4 packet `p` into fragments of at
/// most `mtu` octets each, in offset order. The first keeps every option,
/// the others the copied ones; a packet already a fragment is split
/// further (offsets add up, the last piece keeps the original MF).
/// `None` if `p` is not a well-formed IPv4 packet, has DF set, or `mtu`
/// leaves no room for 8 octets of data.
pub fn fragment(p: &[u8], mtu: usize) -> Option<Vec<Vec<u8>>> {
    parse(p)?;
    let ihl = (p[0] & 0x0f) as usize * 4;
    let total = u16::from_be_bytes([p[2], p[3]]) as usize;
    let frag = u16::from_be_bytes([p[6], p[7]]);
    if frag & FLAG_DF != 0 {
        return None;
    }
    let data = &p[ihl..total];
    let later_opts = copied_options(&p[20..ihl]);
    let (base_off, last_mf) = ((frag & 0x1fff) as usize * 8, frag & FLAG_MF != 0);
    let mut out = vec![];
    let mut off = 0;
    while off < data.len() || (off == 0 && data.is_empty()) {
        let hlen = if off == 0 { ihl } else { 20 + later_opts.len() };
        let room = mtu.checked_sub(hlen)? / 8 * 8;
        if room == 0 {
            return None;
        }
        let n = room.min(data.len() - off);
        let last = off + n == data.len();
        let mut f = Vec::with_capacity(hlen + n);
        f.extend_from_slice(&p[..20]);
        if off == 0 {
            f.extend_from_slice(&p[20..ihl]);
        } else {
            f.extend_from_slice(&later_opts);
            f[0] = 0x40 | (hlen / 4) as u8;
        }
        f.extend_from_slice(&data[off..off + n]);
        f[2..4].copy_from_slice(&((hlen + n) as u16).to_be_bytes());
        let mf = if last { last_mf } else { true };
        let word = ((base_off + off) / 8) as u16 | if mf { FLAG_MF } else { 0 };
        f[6..8].copy_from_slice(&word.to_be_bytes());
        set_header_checksum(&mut f, hlen);
        out.push(f);
        off += n;
        if data.is_empty() {
            break;
        }
    }
    Some(out)
}

/// ICMP Destination Unreachable, Fragmentation Needed and DF set (RFC 792
/// type 3 code 4, with the Next-Hop MTU of RFC 1191 4) from `src` to the
/// source of `orig`, quoting its IP header and first 64 bits of data.
/// `None` for what must not be answered (RFC 1122 3.2.2): an ICMP error, a
/// non-first fragment, a malformed packet.
pub fn icmp_frag_needed(src: Ipv4Addr, orig: &[u8], next_hop_mtu: u16) -> Option<Vec<u8>> {
    let info = parse(orig)?;
    let ihl = (orig[0] & 0x0f) as usize * 4;
    let total = u16::from_be_bytes([orig[2], orig[3]]) as usize;
    if info.frag_offset != 0 || info.src.is_broadcast() || info.src.is_multicast() || info.src.is_unspecified() {
        return None;
    }
    // ICMP errors (destination unreachable, source quench, redirect, time
    // exceeded, parameter problem) are never answered.
    if info.proto == PROTO_ICMP && orig.get(ihl).is_none_or(|t| matches!(t, 3 | 4 | 5 | 11 | 12)) {
        return None;
    }
    let quote = &orig[..total.min(ihl + 8)];
    let len = 20 + 8 + quote.len();
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[1] = 0xc0; // Internetwork Control, as routers send ICMP errors
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = PROTO_ICMP;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&info.src.octets());
    set_header_checksum(&mut p, 20);
    p[20] = 3;
    p[21] = 4;
    p[26..28].copy_from_slice(&next_hop_mtu.to_be_bytes());
    p[28..].copy_from_slice(quote);
    let c = checksum(&p[20..]);
    p[22..24].copy_from_slice(&c.to_be_bytes());
    Some(p)
}

/// Builds an IPv4/UDP packet (tests and tools): header checksum set, UDP
/// checksum 0.
pub fn udp_packet(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = PROTO_UDP;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_udp_and_fragments() {
        let mut p = udp_packet([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 1000, 2000, b"hi");
        assert_eq!(checksum(&p[..20]), 0);
        let i = parse(&p).unwrap();
        assert_eq!(
            (i.src, i.dst, i.proto, i.ports, i.fragment),
            ([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 17, Some((1000, 2000)), false)
        );
        p[6] = 0x00;
        p[7] = 0x10; // offset 16 * 8
        let i = parse(&p).unwrap();
        assert!(i.fragment);
        assert_eq!(i.ports, None);
        assert_eq!(parse(&p[..10]), None);
        assert_eq!(parse(&[0x60; 40]), None);
    }
}
