/* Map layout shared by the XDP programs and the Rust map layer
 * (crates/upf/src/xdp/maps.rs mirrors every struct here, byte for byte;
 * the _Static_asserts below and the Rust const asserts keep them in step).
 *
 * Byte order: IPv4 addresses are kept in network order (as on the wire);
 * TEIDs, ports, precedence and indices in host order. */
#ifndef UPF_MAPS_H
#define UPF_MAPS_H

#include <linux/types.h>

#define UPF_GTPU_PORT 2152
/* PDRs per TEID (uplink) or per UE address (downlink), sorted by precedence. */
#define PDR_SET_MAX 4
/* "No rule" in a far/qer/urr index. */
#define UPF_IDX_NONE 0xffffffffu

/* Several URRs on one PDR (TS 29.244 5.2.2; common: one URR for the
 * session, one per rating group). A PDR's urr_idx (pdr_rule, pdr_fast) is
 * one of: UPF_IDX_NONE (no URR); a slot of the urrs array (one URR);
 * URR_IDX_LIST | n, n a slot of urr_lists, whose entry names up to
 * URR_LIST_MAX urrs slots (2 to 4 URRs; unused entries UPF_IDX_NONE),
 * every one counted; URR_IDX_SLOW (more URRs than a list holds): the PDR's
 * packets go to the slow path (CNT_PASS_MANY_URRS), which counts them all.
 * A urr_lists slot is copy-on-write like a FAR slot (written while
 * unreferenced, quarantined when released; crates/upf/src/xdp/slots.rs). */
#define URR_LIST_MAX 4
#define URR_IDX_LIST (1u << 31)
#define URR_IDX_SLOW 0xfffffffeu
#define UPF_MAX_URR_LISTS 65536

struct urr_list {
	__u32 idx[URR_LIST_MAX];
};

/* Default map sizes; the loader may shrink or grow them before load. */
#define UPF_MAX_TUNNELS 262144
#define UPF_MAX_FARS 262144
#define UPF_MAX_QERS 262144
#define UPF_MAX_URRS 262144
#define UPF_MAX_NEXTHOPS 4096
#define UPF_MAX_PORTS 64

/* SDF filter: 5-tuple of the inner packet (TS 29.244 8.2.5, flow description
 * as IPFilterRule). proto 0 = any; mask 0 = any address; a port range
 * lo..hi inclusive (0..65535 = any). */
struct sdf_filter {
	__u32 src_addr;
	__u32 src_mask;
	__u32 dst_addr;
	__u32 dst_mask;
	__u16 sport_lo;
	__u16 sport_hi;
	__u16 dport_lo;
	__u16 dport_hi;
	__u8 proto;
	__u8 pad[3];
};

#define PDR_F_SDF (1 << 0) /* sdf is valid; otherwise the PDR matches all */
#define PDR_F_OHR (1 << 1) /* outer header removal (GTP-U/UDP/IPv4) */

struct pdr_rule {
	__u32 precedence;
	__u32 far_idx;
	__u32 qer_idx;
	__u32 urr_idx;
	__u16 pdr_id;
	__u8 flags;
	__u8 pad;
	struct sdf_filter sdf;
};

/* Value of the pdr_sets array: the PDRs of one lookup key (TEID or UE
 * address), rules[0..count] sorted by ascending precedence value. Reached
 * only through the set_idx of the key's fast entry (FAST_F_SET). */
struct pdr_set {
	__u32 ue_addr; /* uplink: the tunnel's UE address (anti-spoofing); 0 = no check */
	__u32 count;
	struct pdr_rule rules[PDR_SET_MAX];
};

/* PDR sets in use at once (keys with several PDRs or SDF filters), plus
 * room for the quarantine. */
#define UPF_MAX_PDR_SETS 65536

/* Fast entry of a key (TEID, or UE IPv4 in network order): every installed
 * key has one. The common bearer - one PDR without SDF filter - is complete
 * here, its FAR inline, so a packet costs one 32-octet value. FAST_F_SET
 * marks a key whose PDRs (several, or with SDF filters) are in the
 * pdr_sets slot set_idx, with their FARs in the far array; then only
 * ue_addr and set_idx are meaningful. */
#define FAST_F_SET (1 << 0)
/* The pool slot holds the entry of `key` (always set in a published slot). */
#define FAST_F_IDX (1 << 1)

/* Session lookup, copy-on-write everywhere (no bucket walk on the common
 * path, no torn read). Every fast entry lives in a pool slot and is found
 * through a reference, a 32-bit slot number; both are kept in the one
 * array fast_ul_lines / fast_dl_lines of 64-octet lines, line i holding
 * reference position i and pool slot i (struct fast_line). A key's entry
 * sits in its home slot (slot number = its reference position) unless an
 * update found the home slot still in use; user space moves it back once
 * that slot's grace period is over, so a lookup costs one cache line, not
 * two. The reference of a key is at its direct
 * position (TEID, or UE address in host order, masked to FAST_IDX_BITS)
 * when the key was the first there, else at an overflow position
 * (FAST_IDX_SIZE and up) that the hash fast_ul / fast_dl (key -> position)
 * names. A pool slot or pdr_sets slot is written only while nothing
 * refers to it and no program can still hold an old reference (user space
 * quarantines a released slot for a grace period, see
 * crates/upf/src/xdp/slots.rs); an update writes a free slot and then
 * switches the reference with one aligned 32-bit store through mmap
 * (BPF_F_MMAPABLE), so a program sees the old entry or the new one, whole.
 * A hash element is written once, when its key is inserted (after the
 * reference it names is valid), and deleted with the key, never updated:
 * an element the kernel recycles under a reader yields another key's
 * position, whose entry fails the key check. An entry is used only when it
 * has FAST_F_IDX and the packet's key. */
#define FAST_IDX_BITS 18
#define FAST_IDX_SIZE (1u << FAST_IDX_BITS)
/* Overflow positions: keys whose direct position another key holds. */
#define FAST_OVF_SIZE (1u << 17)
#define FAST_REF_SIZE (FAST_IDX_SIZE + FAST_OVF_SIZE)
/* Pool slots: one line each, so every position has its home slot; slots
 * of unused overflow positions hold entries away from home and the
 * quarantine. */
#define FAST_POOL_SIZE FAST_REF_SIZE
#define FAST_REF_NONE 0xffffffffu

struct pdr_fast {
	__u32 ue_addr; /* uplink: the tunnel's UE address (anti-spoofing); 0 = no check */
	__u32 qer_idx;
	__u32 urr_idx;
	union {
		__u32 teid;    /* FAR OHC: the peer's TEID */
		__u32 set_idx; /* FAST_F_SET: the pdr_sets slot */
	};
	__u32 peer_addr;  /* FAR OHC: the peer's IPv4 (network order) */
	__u32 local_addr; /* FAR OHC: our source address; 0 = upf_config.s1u_addr */
	__u8 action;      /* FAR apply action */
	__u8 far_flags;   /* FAR_F_* */
	__u8 pdr_flags;   /* PDR_F_OHR */
	__u8 flags;       /* FAST_F_* */
	__u32 key;        /* the slot's TEID / UE address (network order) */
};

/* Value of fast_ul_lines / fast_dl_lines: reference position i and pool
 * slot i in one cache line (the array's values are 64-octet aligned: its
 * base is page-aligned, BPF_F_MMAPABLE). User space stores `ref` with one
 * aligned 32-bit store and writes `e` only while no reference names it. */
struct fast_line {
	__u32 ref; /* pool slot of the key at this position, FAST_REF_NONE */
	__u32 pad[7];
	struct pdr_fast e; /* pool slot i */
};

/* Apply Action (TS 29.244 8.2.26). */
#define FAR_FORW (1 << 0)
#define FAR_DROP (1 << 1)
#define FAR_BUFF (1 << 2)
#define FAR_NOCP (1 << 3)
#define FAR_DUPL (1 << 4)

#define FAR_F_OHC (1 << 0) /* outer header creation GTP-U/UDP/IPv4 */

/* Value of the far array. */
struct far_entry {
	__u8 action;
	__u8 dst_iface;
	__u8 flags;
	__u8 pad;
	__u32 teid;       /* OHC: the peer's TEID */
	__u32 peer_addr;  /* OHC: the peer's IPv4 (network order) */
	__u32 local_addr; /* OHC: our source address; 0 = upf_config.s1u_addr */
};

/* Value of the qer array. MBR as a GCRA (virtual-time token bucket):
 * cost of one byte in picoseconds, tolerance (burst) in ns; tat fields are
 * the per-direction theoretical arrival times kept by the program with
 * atomic compare-and-swap. ps_per_byte 0 = no MBR. */
struct qer_entry {
	__u8 gate_ul; /* 1 = open */
	__u8 gate_dl;
	__u8 pad[6];
	__u64 ul_ps_per_byte;
	__u64 dl_ps_per_byte;
	__u64 ul_burst_ns;
	__u64 dl_burst_ns;
	__u64 ul_tat;
	__u64 dl_tat;
};

/* Value of the urr per-CPU array. */
struct urr_counts {
	__u64 ul_bytes;
	__u64 ul_pkts;
	__u64 dl_bytes;
	__u64 dl_pkts;
};

/* Value of the nexthop hash (key: destination IPv4, network order), kept
 * current by the control side; a miss falls back to bpf_fib_lookup. */
struct nexthop {
	__u32 ifindex;
	__u8 dmac[6];
	__u8 smac[6];
};

/* Per-CPU memo of the last nexthops entries used, direct-mapped by the
 * destination (slot = host-order address masked to NH_MEMO_SLOTS), valid
 * while its gen equals upf_config.memo_gen: a packet to a recently used
 * destination costs an array slot instead of a hash lookup. */
#define NH_MEMO_SLOTS 64
struct nh_memo {
	__u32 dst;
	__u32 gen;
	__u32 valid;
	struct nexthop nh;
};

#define CFG_F_NO_FIB (1 << 0) /* cache miss goes to the slow path, no fib lookup */

/* Single entry of the config array. */
struct upf_config {
	__u32 s1u_addr; /* our S1-U / N3 address (network order) */
	__u32 mtu;      /* egress MTU: an encapsulated packet above it goes to the slow path */
	__u32 flags;
	__u32 memo_gen; /* bumped by the control side on every change of nexthops or a MEC table
			 * (invalidates the per-CPU memos of them: nh_memo, mec_memo, mec_dl_memo) */
};

/* Indices of the per-CPU counters array. */
enum upf_counter {
	CNT_RX = 0,
	CNT_UL_FWD,
	CNT_DL_FWD,
	CNT_PASS_NOT_IPV4,
	CNT_PASS_FRAGMENT,
	CNT_PASS_IP_OPTIONS,
	CNT_PASS_GTP_CONTROL,
	CNT_PASS_UNKNOWN_TEID,
	CNT_DROP_SPOOFED,
	CNT_DROP_MALFORMED,
	CNT_DROP_FAR,
	CNT_PASS_BUFFER,
	CNT_DROP_GATE,
	CNT_DROP_MBR,
	CNT_PASS_OVERSIZE,
	CNT_PASS_NO_ROUTE,
	CNT_DROP_NO_PDR,
	CNT_PASS_TTL,
	CNT_DROP_NO_FAR,
	CNT_PASS_NOT_UE,
	CNT_NH_CACHE_HIT,
	CNT_NH_FIB_HIT,
	CNT_PASS_TRUNCATED,
	CNT_PASS_UNSUPPORTED,
	CNT_PASS_GTP_LONG_CHAIN,
	CNT_PASS_DUPL, /* FAR with DUPL: the slow path duplicates (TS 29.244 5.2.1) */
	CNT_PASS_MANY_URRS, /* PDR with more than URR_LIST_MAX URRs: the slow path counts them */
	CNT_STEER_UL,       /* steering: an uplink G-PDU re-encapsulated to its new anchor (steer.h) */
	CNT_STEER_DL,       /* steering: a new anchor's downlink G-PDU rewritten back */
	CNT_STEER_PASS,     /* steering: passed through, forwarded in XDP */
	CNT_MEC_DECAP,      /* MEC: an uplink G-PDU decapsulated to its application (mec.h) */
	CNT_MEC_RETUNNEL,   /* MEC: an uplink G-PDU re-tunnelled (FORWARD_ENCAPSULATED) */
	CNT_MEC_ENCAP,      /* MEC: an application's packet put into its UE's downlink tunnel */
	CNT_MEC_DROP,       /* MEC: dropped by a DROP rule */
	CNT_MEC_PASS,       /* MEC: passed through (no rule, PASSTHROUGH), forwarded as a router */
	CNT_MEC_DUPL,       /* MEC: a DUPLICATE_* rule's G-PDU sent on and copied (mec_dup) */
	CNT_MEC_NO_SLICE,   /* MEC: a frame of no slice (ifindex, VLAN): the host's */
	CNT_MEC_NO_UE,      /* MEC: a FORWARD rule's downlink to a UE without a tunnel: routed */
	CNT_MEC_NO_COPY,    /* MEC: a DUPLICATE_* rule's copy not made (no route, no metadata room) */
	CNT_PASS_IN_ORDER,  /* downlink behind packets still in the AF_XDP slow path (far.h slow_order) */
	CNT_MAX
};

/* Steering role (steer.h, issue 11): diversions of transit G-PDUs by
 * their inner header. steer_ul is keyed by the inner source (the UE's
 * address, network order); its value holds the UE's diversions, flows
 * (STEER_F_SDF) before the whole UE, the first match wins. steer_dl is
 * keyed by (outer source = the new anchor, inner destination). Both are
 * hashes without preallocation: an update replaces the element and frees
 * the old one after an RCU grace period, so a program never reads a torn
 * value. */
#define STEER_SET_MAX 8
#define STEER_MAX_DIVERSIONS 65536
#define STEER_F_SDF (1 << 0)   /* sdf is valid: one flow of the UE */
#define STEER_F_TEID (1 << 1)  /* set the TEID (selective replication); else keep it */
#define STEER_F_XLATE (1 << 2) /* inner source becomes anchor_ue */

struct steer_rule {
	__u32 anchor;    /* the new anchor's S1-U address (network order) */
	__u32 teid;      /* STEER_F_TEID: the anchor's TEID (host order) */
	__u32 anchor_ue; /* STEER_F_XLATE: the UE's address at the anchor (network order) */
	__u8 flags;
	__u8 pad[3];
	struct sdf_filter sdf; /* oriented as the uplink travels: source = UE */
};

struct steer_ul_set {
	__u32 count;
	struct steer_rule rules[STEER_SET_MAX];
};

struct steer_dl_key {
	__u32 anchor; /* outer source */
	__u32 dst;    /* inner destination: the UE's address at the anchor */
};

struct steer_dl {
	__u32 ue;     /* inner destination becomes the UE's address */
	__u32 origin; /* outer source becomes the original anchor's */
};

/* MEC router role (mec.h, issue 12; ETSI GS MEC 011 TrafficRule). A
 * slice (virtual router) is an (ingress ifindex, VLAN id; 0 = untagged)
 * pair named by mec_slices. Each rule is installed per side: the tunnel
 * side (the inner header of a G-PDU in transit) and the plain side (an
 * IPv4 packet from an application); filterType PACKET on both sides as
 * written, FLOW also reversed on the plain side, so that the answers of a
 * matched flow reach the UE. Matching structure, per (slice, side):
 * - mec_exact: rules with a full 5-tuple (source and destination /32,
 *   protocol, single ports for TCP/UDP, none otherwise) and no DSCP, TEID
 *   or eNB condition, one hash entry each (the 120,000 rules of seed 001);
 * - mec_lpm: every other rule, in the priority-ordered set (at most
 *   MEC_SET_MAX) of the destination prefix of each rule; user space copies
 *   into each prefix's set the rules of the shorter prefixes covering it,
 *   so the longest match alone holds every rule that can match.
 * A packet costs one slice lookup, one exact lookup, one LPM lookup (none
 * when the slice's side has no prefix set: bits MEC_SLICE_LPM of its
 * mec_slices value) and at most MEC_SET_MAX rule checks; the lowest priority value wins (MEC 011:
 * 0 is the highest), user space refuses two overlapping rules of one
 * priority. Values are replaced whole (hash / trie updates, freed after
 * an RCU grace period): a program never sees a torn set. */
#define MEC_MAX_SLICES 256
/* mec_slices value: the slice id (low 16 bits); bit 16 + side set when
 * (slice, side) has prefix sets in mec_lpm. */
#define MEC_SLICE_ID 0xffffu
#define MEC_SLICE_LPM 16
#define MEC_PORT_SLOTS 4096        /* mec_port: ports by ifindex */
#define MEC_PORT_VALID (1u << 31) /* mec_port: the port has an untagged slice */
#define MEC_MAX_EXACT 262144
#define MEC_MAX_PREFIXES 16384
#define MEC_SET_MAX 16
#define MEC_MAX_UES 65536
#define MEC_SIDE_TUNNEL 0
#define MEC_SIDE_PLAIN 1

/* Actions (MEC 011 TrafficRule.action). */
#define MEC_DROP 1
#define MEC_FORWARD_DECAPSULATED 2
#define MEC_FORWARD_ENCAPSULATED 3
#define MEC_PASSTHROUGH 4
#define MEC_DUPLICATE_DECAPSULATED 5
#define MEC_DUPLICATE_ENCAPSULATED 6

#define MEC_F_DSCP (1 << 0) /* match the inner DSCP */
#define MEC_F_TEID (1 << 1) /* match the G-PDU's TEID */
#define MEC_F_ENB (1 << 2)  /* match the outer source (the eNB) */

struct mec_slice_key {
	__u32 ifindex;
	__u16 vlan; /* VLAN id, 0 = untagged */
	__u16 pad;
};

struct mec_rule {
	struct sdf_filter sdf; /* oriented as the packet travels */
	__u8 dmac[6];          /* FORWARD_DECAPSULATED: the application's MAC */
	__u8 smac[6];          /* and ours on its interface */
	__u32 ifindex;         /* FORWARD_DECAPSULATED: the interface */
	__u32 tun_dst;         /* FORWARD_ENCAPSULATED: tunnel end (network order) */
	__u32 tun_teid;        /* FORWARD_ENCAPSULATED: its TEID, 0 = keep the G-PDU's */
	__u32 teid;            /* MEC_F_TEID */
	__u32 enb;             /* MEC_F_ENB (network order) */
	__u16 priority;        /* 0 highest */
	__u8 action;           /* MEC_* */
	__u8 flags;            /* MEC_F_* */
	__u8 dscp;             /* MEC_F_DSCP */
	__u8 pad[3];
};

/* DUPLICATE_* (mec.h mec_duplicate): the metadata in front of a G-PDU
 * broadcast to mec_dup, telling mec_dup_egress which clone to keep where
 * and how to rewrite the copy. 32 octets, the most XDP metadata holds. */
struct mec_dup_meta {
	__u32 orig_ifindex; /* the original's way out */
	__u32 copy_ifindex; /* the copy's */
	__u32 macs[3];      /* the copy's MAC pair (struct eth_macs) */
	__u32 tun_dst;      /* DUPLICATE_ENCAPSULATED: tunnel end (network order); 0: decapsulated */
	__u32 tun_teid;     /* its TEID, 0 = keep the G-PDU's */
	__u32 seq;          /* this CPU's broadcast packet number */
};

struct mec_set {
	__u32 count;
	struct mec_rule rules[MEC_SET_MAX]; /* ascending priority value */
};

struct mec_exact_key {
	__u32 slice_side; /* slice << 1 | side */
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct mec_lpm_key {
	__u32 prefixlen; /* 32 + the destination prefix length */
	__u32 slice_side; /* network order: always matched whole */
	__u32 addr;
};

/* Per-CPU memo of mec_exact (mec.h mec_exact_get): in each slot the
 * last lookup whose key hashed to it, the value found or that none was,
 * valid while gen equals upf_config.memo_gen. A flow's packets then cost
 * an array slot instead of a hash lookup. */
#define MEC_MEMO_BITS 8
#define MEC_MEMO_SLOTS (1u << MEC_MEMO_BITS)
#define MEC_MEMO_NONE 1  /* looked up: no entry */
#define MEC_MEMO_FOUND 2 /* looked up: the value is held */
struct mec_memo {
	struct mec_exact_key key;
	__u32 gen;
	__u32 state; /* 0 empty, MEC_MEMO_* */
	struct mec_rule rule;
};

/* Value of mec_ue (key: the UE's address, network order): its downlink
 * tunnel, as the controller learns it from the S11 messages it relays. */
struct mec_ue {
	__u32 enb;    /* the eNB's S1-U address (network order) */
	__u32 teid;   /* the eNB's downlink TEID (host order) */
	__u32 origin; /* outer source: the anchor's S1-U address (network order) */
};

/* Per-CPU memo of the plain side's whole answer for a flow that goes into
 * a UE's tunnel (mec.h mec_plain): the rule's verdict, the UE's tunnel
 * and the eNB's cached next hop, under the flow's exact key and DSCP,
 * valid while gen equals upf_config.memo_gen (which every change of the
 * MEC tables and of nexthops bumps). A flow's downlink packets then cost
 * one array slot instead of a rule, a tunnel and a next-hop lookup. Only
 * an answer whose next hop came from nexthops is kept (a FIB result can
 * change under it). */
struct mec_dl_memo {
	__u32 key[5]; /* union mec_exact_words */
	__u32 gen;
	__u8 dscp;
	__u8 valid;
	__u16 pad;
	struct mec_ue tunnel;
	__u32 ifindex; /* the next hop towards tunnel.enb */
	__u32 macs[3]; /* its MAC pair (far.h struct eth_macs) */
};

/* BUFF/NOCP slow path over AF_XDP (bpf/far.h `xsks`, crates/upf/src/afxdp):
 * one socket per receive queue of the one interface named in `xsk_ifindex`. */
#define UPF_MAX_XSK_QUEUES 64

/* Baselines: the one fixed tunnel / next hop of the minimal programs. */
struct min_config {
	__u32 teid;     /* host order */
	__u32 src_addr; /* encap: outer source (network order) */
	__u32 dst_addr; /* encap: outer destination (network order) */
	__u32 ifindex;  /* egress (in the min_tx devmap) */
	__u8 dmac[6];
	__u8 smac[6];
};

_Static_assert(CNT_MAX == 40, "xdp/maps.rs Counter::ALL and CounterLine");
_Static_assert(sizeof(struct sdf_filter) == 28, "sdf_filter");
_Static_assert(sizeof(struct pdr_rule) == 48, "pdr_rule");
_Static_assert(sizeof(struct pdr_set) == 8 + 48 * PDR_SET_MAX, "pdr_set");
_Static_assert(sizeof(struct far_entry) == 16, "far_entry");
_Static_assert(sizeof(struct pdr_fast) == 32, "pdr_fast");
_Static_assert(sizeof(struct fast_line) == 64, "fast_line");
_Static_assert(sizeof(struct qer_entry) == 56, "qer_entry");
_Static_assert(sizeof(struct urr_counts) == 32, "urr_counts");
_Static_assert(sizeof(struct nexthop) == 16, "nexthop");
_Static_assert(sizeof(struct upf_config) == 16, "upf_config");
_Static_assert(sizeof(struct nh_memo) == 28, "nh_memo");
_Static_assert(sizeof(struct min_config) == 28, "min_config");
_Static_assert(sizeof(struct urr_list) == 16, "urr_list");
_Static_assert(sizeof(struct steer_rule) == 44, "steer_rule");
_Static_assert(sizeof(struct steer_ul_set) == 4 + 44 * STEER_SET_MAX, "steer_ul_set");
_Static_assert(sizeof(struct steer_dl_key) == 8 && sizeof(struct steer_dl) == 8, "steer_dl");
_Static_assert(sizeof(struct mec_rule) == 68 && sizeof(struct mec_set) == 4 + 68 * MEC_SET_MAX, "mec_rule");
_Static_assert(sizeof(struct mec_exact_key) == 20 && sizeof(struct mec_lpm_key) == 12, "mec keys");
_Static_assert(sizeof(struct mec_memo) == 96 && sizeof(struct mec_dl_memo) == 56, "mec memos");
_Static_assert(sizeof(struct mec_slice_key) == 8 && sizeof(struct mec_ue) == 12, "mec_ue");
_Static_assert(UPF_IDX_NONE & URR_IDX_LIST, "UPF_IDX_NONE is tested first");
_Static_assert(UPF_MAX_URRS <= URR_IDX_LIST && UPF_MAX_URR_LISTS <= URR_IDX_LIST, "slots below the list bit");

#endif
