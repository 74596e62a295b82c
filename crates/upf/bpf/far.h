/* FAR table, next-hop cache with bpf_fib_lookup fallback, and the egress
 * DEVMAP (TS 29.244 5.2.1: forwarding per the FAR). */
#ifndef UPF_FAR_H
#define UPF_FAR_H

#include "maps.h"
#include "counters.h"
#include "parse.h"

#ifndef AF_INET
#define AF_INET 2
#endif

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, UPF_MAX_FARS);
	__type(key, __u32);
	__type(value, struct far_entry);
} fars SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, UPF_MAX_NEXTHOPS);
	__type(key, __u32);
	__type(value, struct nexthop);
} nexthops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NH_MEMO_SLOTS);
	__type(key, __u32);
	__type(value, struct nh_memo);
} nh_memo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, UPF_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

/* BUFF / NOCP (TS 29.244 5.2.1): the slow path's AF_XDP sockets, by
 * receive queue, and the interface they are bound to (entry 0; 0 = none).
 * A socket only takes frames of its own (interface, queue): anything else
 * would be dropped by the redirect, so other interfaces keep XDP_PASS. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, UPF_MAX_XSK_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} xsk_ifindex SEC(".maps");

/* Downlink packets handed to the AF_XDP slow path and not yet sent by it,
 * per bucket of UE addresses (the address's low bits, host order). While
 * a bucket's count is above zero, its packets that the fast path would
 * forward go to the slow path too, behind those still there, so that none
 * overtakes a buffered packet (TS 29.244 5.2.1: buffered packets are
 * forwarded in order when the FAR turns to FORW). The slow path takes one
 * off after it has sent what it took from its socket
 * (crates/upf/src/xdp/order.rs). */
#define SLOW_ORDER_BUCKETS 65536

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOW_ORDER_BUCKETS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u32);
} slow_order SEC(".maps");

static __always_inline __u32 *order_bucket(__u32 daddr)
{
	__u32 k = bpf_ntohl(daddr) & (SLOW_ORDER_BUCKETS - 1);
	return bpf_map_lookup_elem(&slow_order, &k);
}

/* Whether packets to `daddr` are still in the slow path. */
static __always_inline int behind_slow_path(__u32 daddr)
{
	__u32 *n = order_bucket(daddr);
	return n && *(volatile __u32 *)n > 0;
}

/* A downlink packet of a buffering session (or behind one): to the AF_XDP
 * socket of its receive queue when one is registered, counted in its
 * bucket, else up the stack (XDP_PASS, the UE pool route into the slow
 * path's TUN device). */
static __always_inline int to_buffer(struct xdp_md *ctx, __u32 daddr)
{
	__u32 zero = 0, q = ctx->rx_queue_index;
	__u32 *ifx = bpf_map_lookup_elem(&xsk_ifindex, &zero);
	if (!ifx || *ifx == 0 || *ifx != ctx->ingress_ifindex || !bpf_map_lookup_elem(&xsks, &q))
		return XDP_PASS;
	__u32 *n = order_bucket(daddr);
	if (n)
		__sync_fetch_and_add(n, 1);
	return bpf_redirect_map(&xsks, q, XDP_PASS);
}

static __always_inline void mac_copy(__u8 *dst, const __u8 *src)
{
	__builtin_memcpy(dst, src, ETH_ALEN);
}

/* The destination and source MAC of an Ethernet header (its first 12
 * octets) as three words, so that they move in three loads and stores
 * rather than twelve byte moves (unaligned word access to packet data is
 * allowed where the kernel has efficient unaligned access, as on x86-64
 * and arm64). */
struct eth_macs {
	__u32 w[3];
};

static __always_inline void macs_load(struct eth_macs *m, const void *src)
{
	const __u32 *s = src;
	m->w[0] = s[0];
	m->w[1] = s[1];
	m->w[2] = s[2];
}

static __always_inline void macs_store(void *dst, const struct eth_macs *m)
{
	__u32 *d = dst;
	d[0] = m->w[0];
	d[1] = m->w[1];
	d[2] = m->w[2];
}

/* The nexthops entry of dst (network order), through this CPU's memo. */
static __always_inline const struct nexthop *nexthop_get(__u32 dst, __u32 gen)
{
	__u32 slot = bpf_ntohl(dst) & (NH_MEMO_SLOTS - 1);
	struct nh_memo *m = bpf_map_lookup_elem(&nh_memo, &slot);
	if (m && m->valid && m->dst == dst && m->gen == gen)
		return &m->nh;
	struct nexthop *nh = bpf_map_lookup_elem(&nexthops, &dst);
	if (nh && m) {
		m->dst = dst;
		m->gen = gen;
		m->nh = *nh;
		m->valid = 1;
	}
	return nh;
}

/* The next hop of dst: its interface (0 when XDP cannot resolve it:
 * CNT_PASS_NO_ROUTE) and the MAC pair to write, from the cached next hop
 * or the kernel FIB. */
static __always_inline __u32 next_hop(struct xdp_md *ctx, __u32 dst, __u32 src, __u16 tot_len,
				      const struct upf_config *cfg, struct eth_macs *m)
{
	const struct nexthop *nh = nexthop_get(dst, cfg->memo_gen);
	if (nh) {
		/* dmac and smac are the 12 octets after ifindex, word aligned */
		macs_load(m, nh->dmac);
		count(CNT_NH_CACHE_HIT);
		return nh->ifindex;
	}
	if (cfg->flags & CFG_F_NO_FIB) {
		count(CNT_PASS_NO_ROUTE);
		return 0;
	}
	struct bpf_fib_lookup f = {};
	f.family = AF_INET;
	f.ipv4_src = src;
	f.ipv4_dst = dst;
	f.tot_len = tot_len;
	f.ifindex = ctx->ingress_ifindex;
	long rc = bpf_fib_lookup(ctx, &f, sizeof(f), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		count(CNT_PASS_NO_ROUTE);
		return 0;
	}
	mac_copy((__u8 *)m->w, f.dmac);
	mac_copy((__u8 *)m->w + ETH_ALEN, f.smac);
	count(CNT_NH_FIB_HIT);
	return f.ifindex;
}

/* Sends the frame at data out of ifindex with the MAC pair m (an IPv4
 * packet behind its Ethernet header). */
static __always_inline int send_via(struct xdp_md *ctx, __u32 ifindex, const struct eth_macs *m)
{
	struct ethhdr *eth = (void *)(long)ctx->data;
	if ((void *)(eth + 1) > (void *)(long)ctx->data_end)
		return XDP_DROP;
	macs_store(eth, m);
	eth->h_proto = bpf_htons(ETH_P_IP);
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect_map(&tx_ports, ifindex, XDP_PASS);
}

/* Sends the IPv4 packet at data (Ethernet header in front) towards dst:
 * cached next hop, else the kernel FIB, else the slow path. `rx` is the
 * MAC pair the packet arrived with: a packet handed to the kernel after
 * decapsulation or encapsulation gets it back, so that the stack sees a
 * frame addressed to this host and forwards it (resolving the neighbour
 * the FIB lookup was missing). */
static __always_inline int forward_ipv4(struct xdp_md *ctx, __u32 dst, __u32 src, __u16 tot_len,
					const struct upf_config *cfg, const struct eth_macs *rx)
{
	struct eth_macs m;
	__u32 ifindex = next_hop(ctx, dst, src, tot_len, cfg, &m);
	if (ifindex)
		return send_via(ctx, ifindex, &m);
	struct ethhdr *eth = (void *)(long)ctx->data;
	if ((void *)(eth + 1) > (void *)(long)ctx->data_end)
		return XDP_DROP;
	macs_store(eth, rx);
	eth->h_proto = bpf_htons(ETH_P_IP);
	return XDP_PASS;
}

#endif
