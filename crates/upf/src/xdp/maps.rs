//! The typed map layer: `#[repr(C)]` mirrors of `crates/upf/bpf/maps.h`
//! (byte for byte; the size asserts below match the C `_Static_assert`s),
//! and [`MapStore`], the trait every map write and read goes through, so
//! the rule translation can run against [`MemoryMaps`] in tests.

use std::collections::HashMap;
use std::net::Ipv4Addr;

pub const PDR_SET_MAX: usize = 4;
pub const IDX_NONE: u32 = u32::MAX;
pub const GTPU_PORT: u16 = 2152;
/// Octets the downlink encapsulation adds (IPv4 20 + UDP 8 + GTP-U 8).
pub const ENCAP_LEN: usize = 36;

/// A PDR's `urr_idx` (bpf/maps.h "Several URRs on one PDR"): `IDX_NONE`,
/// a `urrs` slot, `URR_IDX_LIST | n` (n a `urr_lists` slot naming 2 to
/// [`URR_LIST_MAX`] `urrs` slots), or [`URR_IDX_SLOW`] (more URRs: the
/// PDR's packets go to the slow path, [`Counter::PassManyUrrs`]).
pub const URR_LIST_MAX: usize = 4;
pub const URR_IDX_LIST: u32 = 1 << 31;
pub const URR_IDX_SLOW: u32 = 0xffff_fffe;
pub const MAX_URR_LISTS: u32 = 65_536;

pub const PDR_F_SDF: u8 = 1 << 0;
pub const PDR_F_OHR: u8 = 1 << 1;

pub const FAR_FORW: u8 = 1 << 0;
pub const FAR_DROP: u8 = 1 << 1;
pub const FAR_BUFF: u8 = 1 << 2;
pub const FAR_NOCP: u8 = 1 << 3;
pub const FAR_DUPL: u8 = 1 << 4;
pub const FAR_F_OHC: u8 = 1 << 0;

pub const CFG_F_NO_FIB: u32 = 1 << 0;
pub const FAST_F_SET: u8 = 1 << 0;
/// In the index arrays only: the slot holds the entry of its `key`.
pub const FAST_F_IDX: u8 = 1 << 1;
/// Reference positions of `fast_ul_lines` / `fast_dl_lines`: TEID or UE
/// address (host order) masked to these bits (see [`super::index`]).
pub const FAST_IDX_BITS: u32 = 18;
pub const FAST_IDX_MASK: u32 = (1 << FAST_IDX_BITS) - 1;
pub const FAST_IDX_SIZE: u32 = 1 << FAST_IDX_BITS;
/// Overflow positions (from [`FAST_IDX_SIZE`]): keys whose direct
/// position another key holds, named by the `fast_ul` / `fast_dl` hash.
pub const FAST_OVF_SIZE: u32 = 1 << 17;
pub const FAST_REF_SIZE: u32 = FAST_IDX_SIZE + FAST_OVF_SIZE;
/// Pool slots of `fast_ul_lines` / `fast_dl_lines`: one per line, so that
/// every reference position has its home slot in its own line.
pub const FAST_POOL_SIZE: u32 = FAST_REF_SIZE;
/// Slots of `pdr_sets` (both directions).
pub const MAX_PDR_SETS: u32 = 65_536;
/// A reference to no pool slot.
pub const FAST_REF_NONE: u32 = u32::MAX;

/// Direction of a fast-entry table: uplink (by TEID) or downlink (by UE
/// address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    Ul,
    Dl,
}

/// An IPv4 address as the programs keep it: network order in a `u32`.
pub fn be_addr(a: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(a.octets())
}

/// SDF filter on the inner 5-tuple, oriented as the packet travels
/// (`src` is the packet's source). `proto` 0 = any, mask 0 = any address.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SdfFilter {
    pub src_addr: u32,
    pub src_mask: u32,
    pub dst_addr: u32,
    pub dst_mask: u32,
    pub sport_lo: u16,
    pub sport_hi: u16,
    pub dport_lo: u16,
    pub dport_hi: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

impl SdfFilter {
    /// Matches everything.
    pub fn any() -> Self {
        SdfFilter { sport_hi: u16::MAX, dport_hi: u16::MAX, ..Default::default() }
    }
    /// Source and destination prefixes (address, prefix length).
    pub fn with_src(mut self, addr: Ipv4Addr, len: u8) -> Self {
        (self.src_addr, self.src_mask) = prefix(addr, len);
        self
    }
    pub fn with_dst(mut self, addr: Ipv4Addr, len: u8) -> Self {
        (self.dst_addr, self.dst_mask) = prefix(addr, len);
        self
    }
    pub fn with_proto(mut self, proto: u8) -> Self {
        self.proto = proto;
        self
    }
    pub fn with_sports(mut self, lo: u16, hi: u16) -> Self {
        (self.sport_lo, self.sport_hi) = (lo, hi);
        self
    }
    pub fn with_dports(mut self, lo: u16, hi: u16) -> Self {
        (self.dport_lo, self.dport_hi) = (lo, hi);
        self
    }
}

fn prefix(addr: Ipv4Addr, len: u8) -> (u32, u32) {
    let len = len.min(32) as u32;
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    let mask = Ipv4Addr::from(mask);
    let net = Ipv4Addr::from(u32::from(addr) & u32::from(mask));
    (be_addr(net), be_addr(mask))
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PdrRule {
    pub precedence: u32,
    pub far_idx: u32,
    pub qer_idx: u32,
    pub urr_idx: u32,
    pub pdr_id: u16,
    pub flags: u8,
    pub pad: u8,
    pub sdf: SdfFilter,
}

/// Value of the `pdr_sets` array (the PDRs of one TEID or UE address,
/// reached through its fast entry): rules sorted by ascending precedence.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PdrSet {
    /// Uplink: the tunnel's UE address for the anti-spoofing check; 0 = none.
    pub ue_addr: u32,
    pub count: u32,
    pub rules: [PdrRule; PDR_SET_MAX],
}

/// A pool slot's entry in `fast_ul_lines` (key TEID) and `fast_dl_lines`
/// (key UE address): every installed key has one. A key with one PDR and
/// no SDF filter (the common bearer) is complete here with its FAR inline
/// (one lookup per packet); [`FAST_F_SET`] sends the packet on to the
/// key's [`PdrSet`] in `pdr_sets` slot `teid` (C: `set_idx`, a union;
/// only `ue_addr` and that are then meaningful).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FastEntry {
    /// Uplink: the tunnel's UE address for the anti-spoofing check; 0 = none.
    pub ue_addr: u32,
    pub qer_idx: u32,
    pub urr_idx: u32,
    /// FAR outer header creation: the peer's TEID, peer and local address.
    /// With [`FAST_F_SET`]: the `pdr_sets` slot (see [`FastEntry::set_idx`]).
    pub teid: u32,
    pub peer_addr: u32,
    pub local_addr: u32,
    /// FAR apply action (`FAR_FORW`...).
    pub action: u8,
    pub far_flags: u8,
    pub pdr_flags: u8,
    pub flags: u8,
    /// Index arrays: the slot's key (TEID, or UE address in network order); else 0.
    pub key: u32,
}

/// Value of `fast_ul_lines` / `fast_dl_lines` (bpf/maps.h `fast_line`):
/// reference position i and pool slot i in one 64-octet cache line.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FastLine {
    /// The pool slot of the key at this position, or [`FAST_REF_NONE`].
    pub r#ref: u32,
    pub pad: [u32; 7],
    /// Pool slot i.
    pub e: FastEntry,
}

impl FastEntry {
    /// The `pdr_sets` slot of an entry with [`FAST_F_SET`].
    pub fn set_idx(&self) -> Option<u32> {
        (self.flags & FAST_F_SET != 0).then_some(self.teid)
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FarEntry {
    pub action: u8,
    pub dst_iface: u8,
    pub flags: u8,
    pub pad: u8,
    pub teid: u32,
    pub peer_addr: u32,
    pub local_addr: u32,
}

/// QER with MBR as a GCRA: picoseconds per byte (0 = no MBR), burst
/// tolerance in ns; the `*_tat` fields are the program's state.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QerEntry {
    pub gate_ul: u8,
    pub gate_dl: u8,
    pub pad: [u8; 6],
    pub ul_ps_per_byte: u64,
    pub dl_ps_per_byte: u64,
    pub ul_burst_ns: u64,
    pub dl_burst_ns: u64,
    pub ul_tat: u64,
    pub dl_tat: u64,
}

/// Cost of one byte at `kbps` in picoseconds (0 kbit/s = no limit).
pub fn ps_per_byte(kbps: u64) -> u64 {
    8_000_000_000u64.checked_div(kbps).map_or(0, |v| v.max(1))
}

/// Burst tolerance: 10 ms at the rate, at least two 1500-octet packets.
pub fn burst_ns(ps_per_byte: u64) -> u64 {
    let two_mtu = 3000 * ps_per_byte / 1000;
    two_mtu.max(10_000_000)
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UrrCounts {
    pub ul_bytes: u64,
    pub ul_pkts: u64,
    pub dl_bytes: u64,
    pub dl_pkts: u64,
}

impl std::ops::AddAssign for UrrCounts {
    fn add_assign(&mut self, o: Self) {
        self.ul_bytes += o.ul_bytes;
        self.ul_pkts += o.ul_pkts;
        self.dl_bytes += o.dl_bytes;
        self.dl_pkts += o.dl_pkts;
    }
}

/// Value of `urr_lists`: the `urrs` slots of a PDR with several URRs
/// (unused entries `IDX_NONE`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrrList {
    pub idx: [u32; URR_LIST_MAX],
}

impl UrrList {
    /// `slots` (at most [`URR_LIST_MAX`]), the rest `IDX_NONE`.
    pub fn new(slots: &[u32]) -> Self {
        let mut idx = [IDX_NONE; URR_LIST_MAX];
        idx[..slots.len()].copy_from_slice(slots);
        UrrList { idx }
    }
}

/// Next hop of a destination (key: IPv4, network order).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NextHop {
    pub ifindex: u32,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UpfConfigEntry {
    pub s1u_addr: u32,
    pub mtu: u32,
    pub flags: u32,
    /// Bumped on every change of next hops or MEC rules: the program's
    /// per-CPU memos of them (bpf/maps.h `nh_memo`, `mec_memo`) hold only
    /// for the current value.
    pub memo_gen: u32,
}

/// Baselines: the one fixed tunnel and next hop.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MinConfig {
    pub teid: u32,
    pub src_addr: u32,
    pub dst_addr: u32,
    pub ifindex: u32,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
}

/// Steering role (bpf/maps.h "Steering role"): diversions per UE and
/// per (anchor, UE address at the anchor).
pub const STEER_SET_MAX: usize = 8;
pub const STEER_MAX_DIVERSIONS: u32 = 65_536;
pub const STEER_F_SDF: u8 = 1 << 0;
pub const STEER_F_TEID: u8 = 1 << 1;
pub const STEER_F_XLATE: u8 = 1 << 2;

/// One diversion of a UE's uplink (value part of `steer_ul`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SteerRule {
    pub anchor: u32,
    pub teid: u32,
    pub anchor_ue: u32,
    pub flags: u8,
    pub pad: [u8; 3],
    pub sdf: SdfFilter,
}

/// Value of `steer_ul` (key: the UE's address, network order).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SteerUlSet {
    pub count: u32,
    pub rules: [SteerRule; STEER_SET_MAX],
}

/// Key of `steer_dl`: outer source (the anchor) and inner destination.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SteerDlKey {
    pub anchor: u32,
    pub dst: u32,
}

/// Value of `steer_dl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SteerDl {
    pub ue: u32,
    pub origin: u32,
}

const _: () = assert!(std::mem::size_of::<SteerRule>() == 44);
const _: () = assert!(std::mem::size_of::<SteerUlSet>() == 4 + 44 * STEER_SET_MAX);
const _: () = assert!(std::mem::size_of::<SteerDlKey>() == 8 && std::mem::size_of::<SteerDl>() == 8);
const _: () = assert!(std::mem::size_of::<SdfFilter>() == 28);
const _: () = assert!(std::mem::size_of::<PdrRule>() == 48);
const _: () = assert!(std::mem::size_of::<PdrSet>() == 8 + 48 * PDR_SET_MAX);
const _: () = assert!(std::mem::size_of::<FarEntry>() == 16);
const _: () = assert!(std::mem::size_of::<FastEntry>() == 32);
const _: () = assert!(std::mem::size_of::<FastLine>() == 64 && std::mem::offset_of!(FastLine, e) == 32);
const _: () = assert!(std::mem::size_of::<QerEntry>() == 56);
const _: () = assert!(std::mem::size_of::<UrrCounts>() == 32);
const _: () = assert!(std::mem::size_of::<NextHop>() == 16);
const _: () = assert!(std::mem::size_of::<UpfConfigEntry>() == 16);
const _: () = assert!(std::mem::size_of::<MinConfig>() == 28);
const _: () = assert!(std::mem::size_of::<UrrList>() == 16);

// SAFETY: plain #[repr(C)] structs of integers with explicit padding fields.
unsafe impl aya::Pod for SdfFilter {}
unsafe impl aya::Pod for PdrRule {}
unsafe impl aya::Pod for PdrSet {}
unsafe impl aya::Pod for FarEntry {}
unsafe impl aya::Pod for FastEntry {}
unsafe impl aya::Pod for QerEntry {}
unsafe impl aya::Pod for UrrCounts {}
unsafe impl aya::Pod for NextHop {}
unsafe impl aya::Pod for UpfConfigEntry {}
unsafe impl aya::Pod for MinConfig {}
unsafe impl aya::Pod for UrrList {}
unsafe impl aya::Pod for SteerUlSet {}
unsafe impl aya::Pod for SteerDlKey {}
unsafe impl aya::Pod for SteerDl {}

/// Indices of the per-CPU `counters` array (enum upf_counter in maps.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Counter {
    Rx = 0,
    UlFwd,
    DlFwd,
    PassNotIpv4,
    PassFragment,
    PassIpOptions,
    PassGtpControl,
    PassUnknownTeid,
    DropSpoofed,
    DropMalformed,
    DropFar,
    PassBuffer,
    DropGate,
    DropMbr,
    PassOversize,
    PassNoRoute,
    DropNoPdr,
    PassTtl,
    DropNoFar,
    PassNotUe,
    NhCacheHit,
    NhFibHit,
    PassTruncated,
    PassUnsupported,
    PassGtpLongChain,
    PassDupl,
    PassManyUrrs,
    SteerUplink,
    SteerDownlink,
    SteerPass,
    MecDecap,
    MecRetunnel,
    MecEncap,
    MecDrop,
    MecPass,
    MecDupl,
    MecNoSlice,
    MecNoUe,
    MecNoCopy,
    /// Downlink behind packets still in the AF_XDP slow path (order.rs).
    PassInOrder,
}

/// The value of `counters` (bpf/counters.h `struct upf_counters`): every
/// counter of one CPU, indexed by [`Counter`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CounterLine(pub [u64; Counter::ALL.len()]);
unsafe impl aya::Pod for CounterLine {}

impl Counter {
    pub const ALL: [Counter; 40] = [
        Counter::Rx,
        Counter::UlFwd,
        Counter::DlFwd,
        Counter::PassNotIpv4,
        Counter::PassFragment,
        Counter::PassIpOptions,
        Counter::PassGtpControl,
        Counter::PassUnknownTeid,
        Counter::DropSpoofed,
        Counter::DropMalformed,
        Counter::DropFar,
        Counter::PassBuffer,
        Counter::DropGate,
        Counter::DropMbr,
        Counter::PassOversize,
        Counter::PassNoRoute,
        Counter::DropNoPdr,
        Counter::PassTtl,
        Counter::DropNoFar,
        Counter::PassNotUe,
        Counter::NhCacheHit,
        Counter::NhFibHit,
        Counter::PassTruncated,
        Counter::PassUnsupported,
        Counter::PassGtpLongChain,
        Counter::PassDupl,
        Counter::PassManyUrrs,
        Counter::SteerUplink,
        Counter::SteerDownlink,
        Counter::SteerPass,
        Counter::MecDecap,
        Counter::MecRetunnel,
        Counter::MecEncap,
        Counter::MecDrop,
        Counter::MecPass,
        Counter::MecDupl,
        Counter::MecNoSlice,
        Counter::MecNoUe,
        Counter::MecNoCopy,
        Counter::PassInOrder,
    ];
    /// Counter name for `mobicore_common::counters` style reporting.
    pub fn name(self) -> &'static str {
        match self {
            Counter::Rx => "xdp_rx",
            Counter::UlFwd => "xdp_ul_forwarded",
            Counter::DlFwd => "xdp_dl_forwarded",
            Counter::PassNotIpv4 => "xdp_pass_not_ipv4",
            Counter::PassFragment => "xdp_pass_fragment",
            Counter::PassIpOptions => "xdp_pass_ip_options",
            Counter::PassGtpControl => "xdp_pass_gtpu_control",
            Counter::PassUnknownTeid => "xdp_pass_unknown_teid",
            Counter::DropSpoofed => "xdp_drop_spoofed_ue_address",
            Counter::DropMalformed => "xdp_drop_malformed",
            Counter::DropFar => "xdp_drop_far",
            Counter::PassBuffer => "xdp_pass_buffer",
            Counter::DropGate => "xdp_drop_gate_closed",
            Counter::DropMbr => "xdp_drop_mbr",
            Counter::PassOversize => "xdp_pass_oversize",
            Counter::PassNoRoute => "xdp_pass_no_route",
            Counter::DropNoPdr => "xdp_drop_no_pdr",
            Counter::PassTtl => "xdp_pass_ttl_expired",
            Counter::DropNoFar => "xdp_drop_no_far",
            Counter::PassNotUe => "xdp_pass_not_ue",
            Counter::NhCacheHit => "xdp_nexthop_cache_hit",
            Counter::NhFibHit => "xdp_nexthop_fib_hit",
            Counter::PassTruncated => "xdp_pass_truncated",
            Counter::PassUnsupported => "xdp_pass_unsupported",
            Counter::PassGtpLongChain => "xdp_pass_gtpu_long_ext_chain",
            Counter::PassDupl => "xdp_pass_duplicate",
            Counter::PassManyUrrs => "xdp_pass_many_urrs",
            Counter::SteerUplink => "xdp_steer_uplink",
            Counter::SteerDownlink => "xdp_steer_downlink",
            Counter::SteerPass => "xdp_steer_pass",
            Counter::MecDecap => "xdp_mec_decapsulated",
            Counter::MecRetunnel => "xdp_mec_retunnelled",
            Counter::MecEncap => "xdp_mec_encapsulated",
            Counter::MecDrop => "xdp_mec_drop",
            Counter::MecPass => "xdp_mec_pass",
            Counter::MecDupl => "xdp_mec_duplicated",
            Counter::MecNoSlice => "xdp_mec_no_slice",
            Counter::MecNoUe => "xdp_mec_no_ue_tunnel",
            Counter::MecNoCopy => "xdp_mec_no_copy",
            Counter::PassInOrder => "xdp_pass_in_order",
        }
    }
}

/// Error of a map operation (kernel errno text or a mock failure).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("xdp map {map}: {msg}")]
pub struct MapError {
    pub map: &'static str,
    pub msg: String,
}

/// Every map access of the fast path. Implemented by the aya-backed
/// [`super::loader::AyaMaps`] and by [`MemoryMaps`].
pub trait MapStore: Send {
    fn set_config(&mut self, c: &UpfConfigEntry) -> Result<(), MapError>;
    /// Writes a `pdr_sets` slot (a free one, as FAR slots).
    fn put_pdr_set(&mut self, idx: u32, s: &PdrSet) -> Result<(), MapError>;
    /// Writes pool slot `slot` of `fast_ul_lines` / `fast_dl_lines` (a
    /// free one: see [`super::index`]).
    fn put_fast_slot(&mut self, dir: Dir, slot: u32, e: &FastEntry) -> Result<(), MapError>;
    /// Points reference position `pos` of `fast_ul_lines` / `fast_dl_lines`
    /// at a pool slot ([`FAST_REF_NONE`]: at none) with one atomic 32-bit
    /// store.
    fn set_fast_ref(&mut self, dir: Dir, pos: u32, slot: u32) -> Result<(), MapError>;
    /// Inserts the overflow position of a key (TEID, or UE address in
    /// network order) into `fast_ul` / `fast_dl` (a new key: never an
    /// update).
    fn put_fast_ovf(&mut self, dir: Dir, key: u32, pos: u32) -> Result<(), MapError>;
    fn del_fast_ovf(&mut self, dir: Dir, key: u32) -> Result<(), MapError>;
    fn put_far(&mut self, idx: u32, f: &FarEntry) -> Result<(), MapError>;
    fn put_qer(&mut self, idx: u32, q: &QerEntry) -> Result<(), MapError>;
    /// Writes a `urr_lists` slot (a free one, as FAR slots).
    fn put_urr_list(&mut self, idx: u32, l: &UrrList) -> Result<(), MapError>;
    /// Zeroes the URR's counters (a fresh slot).
    fn reset_urr(&mut self, idx: u32) -> Result<(), MapError>;
    /// Summed over CPUs.
    fn urr(&self, idx: u32) -> Result<UrrCounts, MapError>;
    fn put_nexthop(&mut self, dst: u32, n: &NextHop) -> Result<(), MapError>;
    fn del_nexthop(&mut self, dst: u32) -> Result<(), MapError>;
    /// Adds an egress interface to the redirect DEVMAP.
    fn add_port(&mut self, ifindex: u32) -> Result<(), MapError>;
    /// Summed over CPUs.
    fn counter(&self, c: Counter) -> Result<u64, MapError>;
    /// Steering: a UE's diversions (`steer_ul`, key network order), whole.
    fn put_steer_ul(&mut self, ue: u32, s: &SteerUlSet) -> Result<(), MapError>;
    fn del_steer_ul(&mut self, ue: u32) -> Result<(), MapError>;
    fn put_steer_dl(&mut self, k: SteerDlKey, v: &SteerDl) -> Result<(), MapError>;
    fn del_steer_dl(&mut self, k: SteerDlKey) -> Result<(), MapError>;
}

impl MemoryMaps {
    /// The entry a packet with `key` (TEID, or UE address in network
    /// order) finds, looked up as the program does: the direct position,
    /// else the overflow position; without `FAST_F_IDX` and `key`.
    pub fn fast(&self, dir: Dir, key: u32) -> Option<FastEntry> {
        let host = match dir {
            Dir::Ul => key,
            Dir::Dl => u32::from_be(key),
        };
        let by_ref = |pos: u32| {
            let slot = self.fast_ref.get(&(dir, pos))?;
            let e = self.fast_idx.get(&(dir, *slot)).filter(|e| e.flags & FAST_F_IDX != 0 && e.key == key)?;
            Some(FastEntry { flags: e.flags & !FAST_F_IDX, key: 0, ..*e })
        };
        by_ref(host & FAST_IDX_MASK).or_else(|| by_ref(*self.fast_ovf.get(&(dir, key))?))
    }

    /// The PDR set a packet with `key` finds through its fast entry.
    pub fn set_of(&self, dir: Dir, key: u32) -> Option<PdrSet> {
        self.pdr_sets.get(&self.fast(dir, key)?.set_idx()?).copied()
    }
}

/// In-memory maps with the same semantics (for translation tests and mocks).
#[derive(Debug, Default, Clone)]
pub struct MemoryMaps {
    pub config: UpfConfigEntry,
    pub pdr_sets: HashMap<u32, PdrSet>,
    /// Overflow positions by key, per direction.
    pub fast_ovf: HashMap<(Dir, u32), u32>,
    /// Entry pools and references, per direction (absent reference = none).
    pub fast_idx: HashMap<(Dir, u32), FastEntry>,
    pub fast_ref: HashMap<(Dir, u32), u32>,
    pub fars: HashMap<u32, FarEntry>,
    pub qers: HashMap<u32, QerEntry>,
    pub urrs: HashMap<u32, UrrCounts>,
    pub urr_lists: HashMap<u32, UrrList>,
    pub nexthops: HashMap<u32, NextHop>,
    pub ports: Vec<u32>,
    pub counters: HashMap<u32, u64>,
    pub steer_ul: HashMap<u32, SteerUlSet>,
    pub steer_dl: HashMap<SteerDlKey, SteerDl>,
}

impl MapStore for MemoryMaps {
    fn set_config(&mut self, c: &UpfConfigEntry) -> Result<(), MapError> {
        self.config = *c;
        Ok(())
    }
    fn put_pdr_set(&mut self, idx: u32, s: &PdrSet) -> Result<(), MapError> {
        if idx >= MAX_PDR_SETS {
            return Err(MapError { map: "pdr_sets", msg: format!("slot {idx} out of range") });
        }
        self.pdr_sets.insert(idx, *s);
        Ok(())
    }
    fn put_fast_slot(&mut self, dir: Dir, slot: u32, e: &FastEntry) -> Result<(), MapError> {
        if slot >= FAST_POOL_SIZE {
            return Err(MapError { map: "fast_idx", msg: format!("slot {slot} out of range") });
        }
        self.fast_idx.insert((dir, slot), *e);
        Ok(())
    }
    fn set_fast_ref(&mut self, dir: Dir, pos: u32, slot: u32) -> Result<(), MapError> {
        if pos >= FAST_REF_SIZE {
            return Err(MapError { map: "fast_ref", msg: format!("position {pos} out of range") });
        }
        if slot == FAST_REF_NONE {
            self.fast_ref.remove(&(dir, pos));
        } else {
            self.fast_ref.insert((dir, pos), slot);
        }
        Ok(())
    }
    fn put_fast_ovf(&mut self, dir: Dir, key: u32, pos: u32) -> Result<(), MapError> {
        match self.fast_ovf.insert((dir, key), pos) {
            None => Ok(()),
            Some(_) => {
                Err(MapError { map: "fast_ovf", msg: "key exists: overflow positions are never updated".into() })
            }
        }
    }
    fn del_fast_ovf(&mut self, dir: Dir, key: u32) -> Result<(), MapError> {
        self.fast_ovf.remove(&(dir, key)).map(|_| ()).ok_or(MapError { map: "fast_ovf", msg: "no such key".into() })
    }
    fn put_far(&mut self, idx: u32, f: &FarEntry) -> Result<(), MapError> {
        self.fars.insert(idx, *f);
        Ok(())
    }
    fn put_qer(&mut self, idx: u32, q: &QerEntry) -> Result<(), MapError> {
        self.qers.insert(idx, *q);
        Ok(())
    }
    fn put_urr_list(&mut self, idx: u32, l: &UrrList) -> Result<(), MapError> {
        self.urr_lists.insert(idx, *l);
        Ok(())
    }
    fn reset_urr(&mut self, idx: u32) -> Result<(), MapError> {
        self.urrs.insert(idx, UrrCounts::default());
        Ok(())
    }
    fn urr(&self, idx: u32) -> Result<UrrCounts, MapError> {
        Ok(self.urrs.get(&idx).copied().unwrap_or_default())
    }
    fn put_nexthop(&mut self, dst: u32, n: &NextHop) -> Result<(), MapError> {
        self.nexthops.insert(dst, *n);
        Ok(())
    }
    fn del_nexthop(&mut self, dst: u32) -> Result<(), MapError> {
        self.nexthops.remove(&dst);
        Ok(())
    }
    fn add_port(&mut self, ifindex: u32) -> Result<(), MapError> {
        if !self.ports.contains(&ifindex) {
            self.ports.push(ifindex);
        }
        Ok(())
    }
    fn counter(&self, c: Counter) -> Result<u64, MapError> {
        Ok(self.counters.get(&(c as u32)).copied().unwrap_or(0))
    }
    fn put_steer_ul(&mut self, ue: u32, s: &SteerUlSet) -> Result<(), MapError> {
        self.steer_ul.insert(ue, *s);
        Ok(())
    }
    fn del_steer_ul(&mut self, ue: u32) -> Result<(), MapError> {
        self.steer_ul.remove(&ue);
        Ok(())
    }
    fn put_steer_dl(&mut self, k: SteerDlKey, v: &SteerDl) -> Result<(), MapError> {
        self.steer_dl.insert(k, *v);
        Ok(())
    }
    fn del_steer_dl(&mut self, k: SteerDlKey) -> Result<(), MapError> {
        self.steer_dl.remove(&k);
        Ok(())
    }
}
