/* The steering role (issue 11; seed 000 IV.B, V.B): a switch beside the
 * eNB on S1-U. Every packet passes through, forwarded in XDP by next-hop
 * cache or FIB lookup (XDP_PASS to the kernel's routing when neither
 * resolves it); a G-PDU in transit whose inner header matches a diversion
 * (maps.h "Steering role") is re-encapsulated to the new anchor (uplink)
 * or rewritten back (the anchor's downlink), in the fast path. Included
 * by upf.c after its helpers: a separate program (steer_xdp) on the same
 * maps, so the anchor role's program is unchanged. */
#ifndef UPF_STEER_H
#define UPF_STEER_H

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, STEER_MAX_DIVERSIONS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct steer_ul_set);
} steer_ul SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, STEER_MAX_DIVERSIONS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct steer_dl_key);
	__type(value, struct steer_dl);
} steer_dl SEC(".maps");

/* Forwards the packet as a router would: TTL decremented, to the next hop
 * of its destination; handed to the kernel (TTL restored, the stack
 * decrements it) when XDP cannot resolve it. */
static __always_inline int steer_forward(struct xdp_md *ctx, struct iphdr *ip, const struct upf_config *cfg,
					 const struct eth_macs *rx)
{
	__u32 dst = ip->daddr, src = ip->saddr;
	__u16 tot = bpf_ntohs(ip->tot_len);
	ipv4_dec_ttl(ip);
	int act = forward_ipv4(ctx, dst, src, tot, cfg, rx);
	if (act != XDP_PASS)
		return act;
	void *data = (void *)(long)ctx->data;
	struct iphdr *i = data + sizeof(struct ethhdr);
	if ((void *)(i + 1) <= (void *)(long)ctx->data_end)
		ipv4_inc_ttl(i);
	return XDP_PASS;
}

/* The first diversion of the UE's set matching the inner 5-tuple. */
static __always_inline const struct steer_rule *steer_select(const struct steer_ul_set *set, const struct flow *f)
{
	__u32 n = set->count;
	for (int i = 0; i < STEER_SET_MAX; i++) {
		if (i >= n)
			break;
		const struct steer_rule *r = &set->rules[i];
		if (!(r->flags & STEER_F_SDF) || sdf_match(&r->sdf, f))
			return r;
	}
	return 0;
}

/* The inner address at `addr` (source or destination of `in`) becomes
 * `to`, with the inner IPv4 and TCP/UDP checksums updated (a UDP checksum
 * 0, none, stays 0; a later fragment has no L4 header). */
static __always_inline void inner_set_addr(struct iphdr *in, __u32 *addr, __u32 to, void *data_end)
{
	__u32 from = *addr;
	if (from == to)
		return;
	*addr = to;
	csum_replace4(&in->check, from, to);
	if (in->frag_off & bpf_htons(IP_OFFSET_))
		return;
	if (in->protocol == IPPROTO_UDP_) {
		struct udphdr *u = (void *)(in + 1);
		if ((void *)(u + 1) > data_end || !u->check)
			return;
		csum_replace4(&u->check, from, to);
		if (!u->check)
			u->check = 0xffff; /* RFC 768: a computed 0 is sent as all ones */
	} else if (in->protocol == IPPROTO_TCP_) {
		__u16 *check = (void *)(in + 1) + 16;
		if ((void *)(check + 1) > data_end)
			return;
		csum_replace4(check, from, to);
	}
}

/* Why a frame is not one to route here (0: it is): not a plain IPv4
 * header, TTL expiring, or addressed to this node (PFCP, GTP-U to us: the
 * stack's). Shared by the roles that route (steering, MEC). */
static __always_inline __u32 transit_check(const struct iphdr *ip, const struct upf_config *cfg)
{
	if (!ip)
		return CNT_PASS_TRUNCATED;
	if (ip->version != 4)
		return CNT_PASS_NOT_IPV4;
	if (ip->ihl != 5)
		return CNT_PASS_IP_OPTIONS;
	if (ip->ttl <= 1)
		return CNT_PASS_TTL;
	if (ip->daddr == cfg->s1u_addr)
		return CNT_PASS_NOT_UE;
	return 0;
}

/* A G-PDU in transit: diverted (uplink), rewritten back (downlink), or -1
 * (no diversion: passes through). */
static __always_inline int steer_gtpu(struct xdp_md *ctx, struct pctx *c, struct iphdr *ip, struct udphdr *udp,
				      const struct upf_config *cfg, const struct eth_macs *rx)
{
	struct gtpu_hdr *gh = (void *)(udp + 1);
	struct gtpu_info g;
	if (gtpu_parse(c, &g) != GTPU_OK || (void *)(gh + 1) > c->data_end)
		return -1;
	struct iphdr *in = PULL(c, sizeof(*in));
	if (!in || in->version != 4 || in->ihl != 5)
		return -1;
	__u32 saddr = in->saddr;
	struct steer_ul_set *set = bpf_map_lookup_elem(&steer_ul, &saddr);
	if (set) {
		struct flow f;
		flow_of(in, c->data_end, &f);
		const struct steer_rule *r = steer_select(set, &f);
		if (r) {
			/* To the new anchor, TEID and inner source translated for a
			 * replica (seed 000 V.B); the outer source (the eNB) stays. */
			if (r->flags & STEER_F_XLATE)
				inner_set_addr(in, &in->saddr, r->anchor_ue, c->data_end);
			if (r->flags & STEER_F_TEID)
				gh->teid = bpf_htonl(r->teid);
			__u32 old = ip->daddr;
			ip->daddr = r->anchor;
			csum_replace4(&ip->check, old, r->anchor);
			udp->check = 0;
			count(CNT_STEER_UL);
			return steer_forward(ctx, ip, cfg, rx);
		}
	}
	struct steer_dl_key k = { .anchor = ip->saddr, .dst = in->daddr };
	struct steer_dl *d = bpf_map_lookup_elem(&steer_dl, &k);
	if (!d)
		return -1;
	/* Back to the eNB as if from the original anchor, to the UE's address. */
	inner_set_addr(in, &in->daddr, d->ue, c->data_end);
	__u32 old = ip->saddr;
	ip->saddr = d->origin;
	csum_replace4(&ip->check, old, d->origin);
	udp->check = 0;
	count(CNT_STEER_DL);
	return steer_forward(ctx, ip, cfg, rx);
}

SEC("xdp")
int steer_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct upf_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return XDP_PASS;
	count(CNT_RX);
	struct pctx c;
	pctx_init(&c, ctx);
	struct ethhdr *eth = PULL(&c, sizeof(*eth));
	if (!eth || eth->h_proto != bpf_htons(ETH_P_IP))
		return verdict(CNT_PASS_NOT_IPV4, XDP_PASS);
	struct eth_macs rx;
	macs_load(&rx, eth);
	struct iphdr *ip = PULL(&c, sizeof(*ip));
	__u32 why = transit_check(ip, cfg);
	if (why)
		return verdict(why, XDP_PASS);
	if (ip->protocol == IPPROTO_UDP_ && !ipv4_is_fragment(ip)) {
		struct udphdr *udp = PULL(&c, sizeof(*udp));
		if (udp && udp->dest == bpf_htons(UPF_GTPU_PORT)) {
			int r = steer_gtpu(ctx, &c, ip, udp, cfg, &rx);
			if (r >= 0)
				return r;
		}
	}
	count(CNT_STEER_PASS);
	return steer_forward(ctx, ip, cfg, &rx);
}

#endif
