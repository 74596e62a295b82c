//! Addresses of the bench topology and the template frames of the load
//! generator (pure functions, unit tested).

use mobicore_common::inet::checksum;
use mobicore_gtp::gtpu;
use std::net::Ipv4Addr;

/// gen `g0` (the eNB or the data network, by direction).
pub const GEN: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 1);
/// dut `d0`: also the UPF's S1-U address.
pub const DUT0: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 2);
/// dut `d1`.
pub const DUT1: Ipv4Addr = Ipv4Addr::new(10, 201, 2, 1);
/// sink `s0` (the data network, or the eNB of the downlink).
pub const SINK: Ipv4Addr = Ipv4Addr::new(10, 201, 2, 2);
/// First UE address; session i has `UE_BASE + i` (a /14 holds 100,000).
pub const UE_BASE: Ipv4Addr = Ipv4Addr::new(10, 64, 0, 1);
pub const UE_POOL: &str = "10.64.0.0/14";
/// UE address of the uplink round-trip probes (lives on gen's loopback).
pub const PROBE_UE_UL: Ipv4Addr = Ipv4Addr::new(10, 63, 0, 1);
/// UE address of the kernel downlink probe (lives on sink's loopback).
pub const PROBE_UE_DL: Ipv4Addr = Ipv4Addr::new(10, 63, 0, 2);
/// Local TEID of session i: `TEID_BASE + i`; eNB TEID: `ENB_TEID_BASE + i`.
pub const TEID_BASE: u32 = 0x0010_0000;
pub const ENB_TEID_BASE: u32 = 0x0080_0000;
pub const GTPU_PORT: u16 = 2152;
/// UDP port of the measured frames (counted and dropped by the sink).
pub const BENCH_PORT: u16 = 9;
/// UDP echo port of the round-trip probes.
pub const ECHO_PORT: u16 = 7;

pub const MAC_G0: [u8; 6] = [0x02, 0xdb, 0, 0, 0, 0x01];
pub const MAC_D0: [u8; 6] = [0x02, 0xdb, 0, 0, 0, 0x02];
pub const MAC_D1: [u8; 6] = [0x02, 0xdb, 0, 0, 0, 0x03];
pub const MAC_S0: [u8; 6] = [0x02, 0xdb, 0, 0, 0, 0x04];

/// Bytes the generator rewrites of a frame that long (bpf/gen.c HDR_LEN;
/// a shorter, plain frame has its first [`PLAIN_HDR_LEN`] rewritten).
pub const HDR_LEN: usize = 78;
/// Smallest inner packet: the generator's header must fit.
pub const MIN_SIZE: usize = 64;

/// Generator modes (bpf/gen.c enum gen_mode).
pub const GEN_FIXED: u32 = 0;
pub const GEN_DOWNLINK: u32 = 1;
pub const GEN_UPLINK: u32 = 2;

/// The generator's configuration (bpf/gen.c struct gen_cfg).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GenCfg {
    pub mode: u32,
    pub n: u32,
    pub teid_base: u32,
    pub addr_base: u32,
    pub hdr: [u8; 80],
    /// 1: sessions drawn Zipf-like (see [`zipf_table`]); 0: in order.
    pub skew: u32,
    /// Rank-to-session multiplier, coprime with `n`.
    pub perm: u32,
    /// 0, or the offset of the UDP payload: the generator writes
    /// [`STAMP_MAGIC`] and its clock (`bpf_ktime_get_ns`) there, and the
    /// sink records the frame's one-way time ([`crate::progs::Sink::latencies`]).
    pub stamp_at: u32,
}

// SAFETY: #[repr(C)] integers and bytes, no padding (4*4 + 80 + 3*4).
unsafe impl aya::Pod for GenCfg {}
const _: () = assert!(std::mem::size_of::<GenCfg>() == 108);

/// The first 4 payload octets of a time-stamped frame (bpf/gen.c, bpf/sink.c).
pub const STAMP_MAGIC: u32 = 0x4d43_4c54;
/// Eth + IPv4 + UDP: the least the generator rewrites (a plain frame);
/// the smallest frame it sends.
pub const PLAIN_HDR_LEN: usize = 42;

/// Steps of the generator's Zipf table (bpf/gen.c ZIPF_STEPS).
pub const ZIPF_STEPS: usize = 1024;

/// Inverse CDF of a continuous Zipf (s = 1) over ranks 0..n:
/// `t[k] = floor((n + 1)^(k / ZIPF_STEPS)) - 1`, so `t[0] = 0`,
/// `t[ZIPF_STEPS] = n`. The generator draws k uniformly, then a rank
/// uniformly in `t[k]..t[k+1]` (or `t[k]` when they are equal).
pub fn zipf_table(n: u32) -> Vec<u32> {
    let n1 = f64::from(n.max(1)) + 1.0;
    (0..=ZIPF_STEPS)
        .map(|k| ((n1.powf(k as f64 / ZIPF_STEPS as f64)).floor() as u32).saturating_sub(1).min(n.max(1)))
        .collect()
}

/// With [`zipf_table`]: the share of draws landing on rank 0..`top`.
pub fn zipf_share(t: &[u32], top: u32) -> f64 {
    let mut hits = 0.0;
    for w in t.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        hits += if hi <= lo {
            f64::from(u8::from(lo < top))
        } else {
            f64::from(top.clamp(lo, hi) - lo) / f64::from(hi - lo)
        };
    }
    hits / (t.len() - 1) as f64
}

/// A multiplier coprime with `n` (near the golden ratio of 2^32), so that
/// `rank * perm % n` is a permutation of 0..n.
pub fn coprime_multiplier(n: u32) -> u32 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let n = u64::from(n.max(1));
    let mut p = 2_654_435_761u64 % n;
    while p == 0 || gcd(p, n) != 1 {
        p = (p + 1) % n;
        if n == 1 {
            return 1;
        }
    }
    p as u32
}

pub fn mac_text(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// IPv4 (no options, TTL 64, checksum set) + UDP (checksum 0) of `total`
/// bytes (at least 28), payload bytes 0x5a.
pub fn ipv4_udp(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, total: usize) -> Vec<u8> {
    let total = total.max(28);
    let mut p = vec![0x5a; total];
    p[..12].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((total - 20) as u16).to_be_bytes());
    p[26..28].copy_from_slice(&[0, 0]);
    p
}

/// An Ethernet frame (gen `g0` to dut `d0`) around an IPv4 packet.
pub fn eth(ip: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + ip.len());
    f.extend_from_slice(&MAC_D0);
    f.extend_from_slice(&MAC_G0);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(ip);
    f
}

/// Uplink frame: gen -> `outer_dst`:2152, G-PDU with TEID `teid`, inner
/// UDP of `size` bytes from `ue` to the sink's bench port.
pub fn uplink_frame(outer_dst: Ipv4Addr, teid: u32, ue: Ipv4Addr, size: usize) -> Vec<u8> {
    gpdu_frame(outer_dst, teid, &ipv4_udp(ue, SINK, 10000, BENCH_PORT, size))
}

/// A G-PDU (TS 29.281 5.1) from gen to `outer_dst`:2152 with TEID `teid`
/// around the IPv4 packet `inner`.
pub fn gpdu_frame(outer_dst: Ipv4Addr, teid: u32, inner: &[u8]) -> Vec<u8> {
    eth(&ipv4_udp_payload(GEN, outer_dst, GTPU_PORT, GTPU_PORT, &gtpu::gpdu(teid, inner)))
}

/// Downlink frame: plain UDP of `size` bytes from gen to `ue`.
pub fn downlink_frame(ue: Ipv4Addr, size: usize) -> Vec<u8> {
    eth(&ipv4_udp(GEN, ue, 10000, BENCH_PORT, size))
}

/// IPv4 + UDP around `payload`.
pub fn ipv4_udp_payload(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = ipv4_udp(src, dst, sport, dport, 28 + payload.len());
    p[28..].copy_from_slice(payload);
    p
}

/// The generator configuration for `frame`, cycling through `n` sessions.
pub fn gen_cfg(frame: &[u8], mode: u32, n: u32, teid_base: u32, addr_base: Ipv4Addr) -> GenCfg {
    let mut hdr = [0u8; 80];
    let k = frame.len().min(HDR_LEN);
    hdr[..k].copy_from_slice(&frame[..k]);
    GenCfg { mode, n: n.max(1), teid_base, addr_base: u32::from(addr_base), hdr, skew: 0, perm: 1, stamp_at: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uplink_frame_layout_matches_the_generator_offsets() {
        let f = uplink_frame(DUT0, TEID_BASE + 5, Ipv4Addr::new(10, 64, 0, 6), 64);
        assert_eq!(f.len(), 14 + 20 + 8 + 8 + 64);
        assert_eq!(&f[46..50], &(TEID_BASE + 5).to_be_bytes(), "TEID at 46");
        assert_eq!(&f[62..66], &[10, 64, 0, 6], "inner source at 62");
        assert_eq!(checksum(&f[14..34]), 0, "outer checksum");
        assert_eq!(checksum(&f[50..70]), 0, "inner checksum at 50");
        assert_eq!(u16::from_be_bytes([f[72], f[73]]), BENCH_PORT, "inner dport at 72 (bpf/sink.c)");
        assert_eq!(u16::from_be_bytes([f[44], f[45]]), 64, "GTP-U length");
    }

    #[test]
    fn downlink_frame_layout_matches_the_generator_offsets() {
        let f = downlink_frame(Ipv4Addr::new(10, 64, 0, 1), 64);
        assert_eq!(f.len(), HDR_LEN);
        assert_eq!(&f[30..34], &[10, 64, 0, 1], "destination at 30");
        assert_eq!(checksum(&f[14..34]), 0);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), BENCH_PORT);
        assert_eq!(downlink_frame(UE_BASE, 1400).len(), 1414);
    }

    #[test]
    fn zipf_table_is_a_skewed_inverse_cdf() {
        let t = zipf_table(100_000);
        assert_eq!((t[0], t[ZIPF_STEPS]), (0, 100_000));
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
        // Zipf s = 1 over 100k: the top 1% of sessions carry about 60%.
        let top = zipf_share(&t, 1000);
        assert!((0.5..0.7).contains(&top), "{top}");
        assert!(zipf_share(&t, 1) > 0.03);
        assert_eq!(zipf_table(1)[ZIPF_STEPS], 1);
    }

    #[test]
    fn multiplier_permutes_the_sessions() {
        for n in [1u32, 2, 1000, 100_000, 65_536] {
            let p = u64::from(coprime_multiplier(n));
            let mut seen = vec![false; n as usize];
            for r in 0..u64::from(n) {
                seen[(r * p % u64::from(n)) as usize] = true;
            }
            assert!(seen.iter().all(|s| *s), "n = {n}");
        }
    }

    #[test]
    fn gen_cfg_copies_the_header_only() {
        let f = downlink_frame(UE_BASE, 1400);
        let c = gen_cfg(&f, GEN_DOWNLINK, 0, 0, UE_BASE);
        assert_eq!(c.n, 1, "at least one session");
        assert_eq!(&c.hdr[..HDR_LEN], &f[..HDR_LEN]);
        assert_eq!(c.addr_base, u32::from(UE_BASE));
    }
}
