/* The MEC router role (issue 12; seed 001; ETSI GS MEC 011 TrafficRule):
 * virtual routers on the S1-U path, one per slice (ingress ifindex,
 * 802.1Q VLAN id; maps.h "MEC router role"). A frame of no slice is the
 * host's (XDP_PASS). In a slice:
 * - a G-PDU in transit is matched by its inner header (and optionally its
 *   TEID and outer source, the eNB) against the slice's tunnel-side rules:
 *   DROP; FORWARD_DECAPSULATED (outer IPv4/UDP/GTP-U removed, to the
 *   application's MAC through the rule's interface); FORWARD_ENCAPSULATED
 *   (re-tunnelled to the rule's tunnel end, TEID set); PASSTHROUGH and no
 *   match: forwarded untouched as a router would (steer_forward);
 * - a plain IPv4 packet is matched against the slice's plain-side rules (a
 *   FLOW rule's reverse and a PACKET rule as written): FORWARD_* puts it
 *   into the downlink tunnel of its destination UE (mec_ue: the eNB and
 *   TEID, outer source the anchor's S1-U address); DROP drops; anything
 *   else is routed untouched.
 * DUPLICATE_DECAPSULATED / _ENCAPSULATED pass the G-PDU through and send
 * a copy decapsulated to the application or re-tunnelled, made by a
 * broadcast redirect (mec_duplicate). A FLOW rule of these is installed
 * reversed on the tunnel side too, so that the application sees both
 * directions of the flow. Egress frames are untagged: the slice's VLAN
 * tag is removed on entry.
 * Included by upf.c after steer.h: a separate program (mec_xdp) on the
 * same maps; the anchor's and steering's programs are unchanged. */
#ifndef UPF_MEC_H
#define UPF_MEC_H

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MEC_MAX_SLICES);
	__type(key, struct mec_slice_key);
	__type(value, __u32);
} mec_slices SEC(".maps");

/* The untagged slice of each port below MEC_PORT_SLOTS, the same value
 * as mec_slices' with MEC_PORT_VALID set (0: none): an array lookup the
 * verifier inlines, in front of the hash. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MEC_PORT_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} mec_port SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MEC_MAX_EXACT);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct mec_exact_key);
	__type(value, struct mec_rule);
} mec_exact SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MEC_MEMO_SLOTS);
	__type(key, __u32);
	__type(value, struct mec_memo);
} mec_memo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MEC_MEMO_SLOTS);
	__type(key, __u32);
	__type(value, struct mec_dl_memo);
} mec_dl_memo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MEC_MAX_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct mec_lpm_key);
	__type(value, struct mec_set);
} mec_lpm SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MEC_MAX_UES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct mec_ue);
} mec_ue SEC(".maps");

/* DUPLICATE_*: each port twice (key ifindex << 1 | 0, 1), value struct
 * bpf_devmap_val with mec_dup_egress; the per-CPU sequence number of the
 * last broadcast packet, and per port the last one each CPU saw there. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 2 * UPF_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} mec_dup SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} mec_dup_seq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, UPF_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} mec_dup_last SEC(".maps");

struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

/* What a packet is matched on beside its 5-tuple. */
struct mec_pkt {
	__u32 teid; /* tunnel side: the G-PDU's TEID (host order) */
	__u32 enb;  /* tunnel side: the outer source */
	__u8 dscp;
	__u8 tunnel;
};

/* A verdict of a helper (never negative in fact) kept apart, for the
 * verifier, from the -1 by which mec_gtpu / mec_plain hand a packet back
 * to the pass-through path: the packet may have moved by then. */
static __always_inline int mec_done(long act)
{
	if (act < 0 || act > XDP_REDIRECT)
		return XDP_ABORTED;
	return (int)act;
}

static __always_inline int mec_match(const struct mec_rule *r, const struct flow *f, const struct mec_pkt *p)
{
	if (!sdf_match(&r->sdf, f))
		return 0;
	if ((r->flags & MEC_F_DSCP) && r->dscp != p->dscp)
		return 0;
	if ((r->flags & MEC_F_TEID) && (!p->tunnel || r->teid != p->teid))
		return 0;
	if ((r->flags & MEC_F_ENB) && (!p->tunnel || r->enb != p->enb))
		return 0;
	return 1;
}

/* The words of a mec_exact key, built in registers: a key assembled from
 * byte and half-word stores and read back as words (to hash it, compare
 * it, look it up) stalls store-to-load forwarding. */
union mec_exact_words {
	struct mec_exact_key k;
	__u32 w[5];
};

static __always_inline void mec_exact_words_of(union mec_exact_words *u, __u32 slice_side, const struct flow *f)
{
	u->w[0] = slice_side;
	u->w[1] = f->saddr;
	u->w[2] = f->daddr;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	u->w[3] = (__u32)f->sport | ((__u32)f->dport << 16);
	u->w[4] = f->proto;
#else
	u->w[3] = ((__u32)f->sport << 16) | f->dport;
	u->w[4] = (__u32)f->proto << 24;
#endif
}

/* The memo slot of an exact key (mec_memo, mec_dl_memo). */
static __always_inline __u32 mec_memo_slot(const union mec_exact_words *u)
{
	__u32 h = u->w[0] ^ u->w[1] ^ (u->w[2] * 31) ^ (u->w[3] * 17) ^ u->w[4];
	return (h * 0x9e3779b1u) >> (32 - MEC_MEMO_BITS);
}

/* Whether a memo's key words are u's. */
static __always_inline int mec_words_eq(const __u32 *mk, const union mec_exact_words *u)
{
	return mk[0] == u->w[0] && mk[1] == u->w[1] && mk[2] == u->w[2] && mk[3] == u->w[3] && mk[4] == u->w[4];
}

/* The mec_exact entry of a key, through this CPU's memo (maps.h
 * mec_memo): in the memo by its 20 octets and the generation, else looked
 * up and remembered, found or not. */
static __always_inline const struct mec_rule *mec_exact_get(const union mec_exact_words *u, __u32 gen)
{
	__u32 slot = mec_memo_slot(u);
	struct mec_memo *m = bpf_map_lookup_elem(&mec_memo, &slot);
	if (!m)
		return bpf_map_lookup_elem(&mec_exact, &u->k);
	if (m->state && m->gen == gen && mec_words_eq((const void *)&m->key, u))
		return m->state == MEC_MEMO_FOUND ? &m->rule : 0;
	const struct mec_rule *e = bpf_map_lookup_elem(&mec_exact, &u->k);
	m->key = u->k;
	m->gen = gen;
	if (!e) {
		m->state = MEC_MEMO_NONE;
		return 0;
	}
	m->rule = *e;
	m->state = MEC_MEMO_FOUND;
	return &m->rule;
}

/* The highest-priority (lowest value, MEC 011) rule of (slice, side)
 * matching the packet, k its exact key (mec_exact_words_of): the exact
 * 5-tuple entry, if any, against the first match in the priority-ordered
 * set of the longest destination prefix (which holds every rule whose
 * prefix covers it). One memo slot (or hash lookup), one LPM lookup, at
 * most MEC_SET_MAX rule checks. */
static __always_inline const struct mec_rule *mec_select(__u32 slice_v, __u32 side, const union mec_exact_words *k,
							 const struct flow *f, const struct mec_pkt *p, __u32 gen)
{
	__u32 slice = slice_v & MEC_SLICE_ID;
	const struct mec_rule *best = 0;
	/* An exact entry's key is its whole filter (no DSCP, TEID or eNB:
	 * xdp/mec.rs compile). */
	const struct mec_rule *e = mec_exact_get(k, gen);
	if (e)
		best = e;
	if (!(slice_v & (1u << (MEC_SLICE_LPM + side))))
		return best;
	struct mec_lpm_key lk = { .prefixlen = 64, .slice_side = bpf_htonl((slice << 1) | side), .addr = f->daddr };
	const struct mec_set *s = bpf_map_lookup_elem(&mec_lpm, &lk);
	if (!s)
		return best;
	__u32 n = s->count;
	__u32 limit = best ? best->priority : 0x10000;
	for (int i = 0; i < MEC_SET_MAX; i++) {
		if (i >= n)
			break;
		const struct mec_rule *r = &s->rules[i];
		if (r->priority >= limit)
			break;
		if (mec_match(r, f, p))
			return r;
	}
	return best;
}

/* To the application: the outer headers up to the T-PDU removed, the
 * inner TTL decremented, Ethernet to the rule's MACs, out of its
 * interface (MEC 011 FORWARD_DECAPSULATED). */
static __always_inline int mec_decap(struct xdp_md *ctx, struct iphdr *in, __u16 tot, const struct mec_rule *r,
				     struct upf_counters *cnt)
{
	if (in->ttl <= 1)
		return verdict(CNT_PASS_TTL, XDP_PASS);
	ipv4_dec_ttl(in);
	struct eth_macs m;
	macs_load(&m, r->dmac);
	__u32 ifindex = r->ifindex;
	int outer = (int)((void *)in - (void *)(long)ctx->data) - (int)sizeof(struct ethhdr);
	if (trim_tail(ctx, in, tot) || bpf_xdp_adjust_head(ctx, outer))
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	void *data = (void *)(long)ctx->data;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > (void *)(long)ctx->data_end)
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	macs_store(eth, &m);
	eth->h_proto = bpf_htons(ETH_P_IP);
	count_at(cnt, CNT_MEC_DECAP);
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	/* A port (tx_ports) saves the kernel a device lookup per packet. */
	long act = bpf_redirect_map(&tx_ports, ifindex, 0);
	if (act == XDP_REDIRECT)
		return XDP_REDIRECT;
	return mec_done(bpf_redirect(ifindex, 0));
}

/* Passed through, forwarded as a router: the packet as it came, read
 * again from the frame (a helper that may have moved the packet leaves
 * the verifier no pointer into it). */
static __always_inline int mec_pass(struct xdp_md *ctx, const struct upf_config *cfg, const struct eth_macs *rx)
{
	struct iphdr *ip = (void *)(long)ctx->data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > (void *)(long)ctx->data_end)
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	count(CNT_MEC_PASS);
	return steer_forward(ctx, ip, cfg, rx);
}

/* DUPLICATE_* (MEC 011): the G-PDU goes on as a router forwards it
 * (outer TTL decremented, to its next hop) and a copy goes decapsulated to
 * the rule's application or re-tunnelled to its tunnel end. XDP has no
 * clone but a broadcast redirect: every port is in mec_dup twice, and the
 * metadata written here tells the devmap program which clone to keep where
 * (mec_dup_egress). Both ways are resolved first; when either
 * cannot be, or there is no room for metadata, the G-PDU alone goes on
 * (CNT_MEC_NO_COPY). */
static __always_inline int mec_duplicate(struct xdp_md *ctx, struct iphdr *ip, const struct mec_rule *r,
					 const struct upf_config *cfg, const struct eth_macs *rx)
{
	__u32 zero = 0;
	__u32 *seq = bpf_map_lookup_elem(&mec_dup_seq, &zero);
	if (!seq)
		return -1;
	struct mec_dup_meta m = { .seq = ++*seq };
	__u32 src = ip->saddr;
	__u16 tot = bpf_ntohs(ip->tot_len);
	struct eth_macs om, cm;
	m.orig_ifindex = next_hop(ctx, ip->daddr, src, tot, cfg, &om);
	if (r->action == MEC_DUPLICATE_DECAPSULATED) {
		m.copy_ifindex = r->ifindex;
		macs_load(&cm, r->dmac);
	} else {
		m.copy_ifindex = next_hop(ctx, r->tun_dst, src, tot, cfg, &cm);
		m.tun_dst = r->tun_dst;
		m.tun_teid = r->tun_teid;
	}
	macs_store(m.macs, &cm);
	int room = m.orig_ifindex && m.copy_ifindex && !bpf_xdp_adjust_meta(ctx, -(int)sizeof(m));
	void *data = (void *)(long)ctx->data;
	struct iphdr *i = data + sizeof(struct ethhdr);
	if ((void *)(i + 1) > (void *)(long)ctx->data_end)
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	if (!room) {
		count(CNT_MEC_NO_COPY);
		return mec_done(steer_forward(ctx, i, cfg, rx));
	}
	struct mec_dup_meta *meta = (void *)(long)ctx->data_meta;
	if ((void *)(meta + 1) > data)
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	*meta = m;
	ipv4_dec_ttl(i);
	macs_store(data, &om);
	count(CNT_MEC_DUPL);
	return mec_done(bpf_redirect_map(&mec_dup, 0, BPF_F_BROADCAST));
}

/* A G-PDU in transit under the slice's tunnel-side rules. */
static __always_inline int mec_gtpu(struct xdp_md *ctx, struct pctx *c, struct iphdr *ip, struct udphdr *udp,
				    __u32 slice, const struct upf_config *cfg, const struct eth_macs *rx,
				    struct upf_counters *cnt)
{
	struct gtpu_hdr *gh = (void *)(udp + 1);
	struct gtpu_info g;
	if (gtpu_parse(c, &g) != GTPU_OK || (void *)(gh + 1) > c->data_end)
		return -1;
	struct iphdr *in = PULL(c, sizeof(*in));
	if (!in || in->version != 4 || in->ihl != 5)
		return -1;
	__u16 tot = bpf_ntohs(in->tot_len);
	if (tot < sizeof(*in) || (void *)in + tot > c->data_end)
		return -1;
	struct flow f;
	flow_of(in, c->data_end, &f);
	struct mec_pkt p = { .teid = g.teid, .enb = ip->saddr, .dscp = in->tos >> 2, .tunnel = 1 };
	union mec_exact_words k;
	mec_exact_words_of(&k, ((slice & MEC_SLICE_ID) << 1) | MEC_SIDE_TUNNEL, &f);
	const struct mec_rule *r = mec_select(slice, MEC_SIDE_TUNNEL, &k, &f, &p, cfg->memo_gen);
	if (!r)
		return -1;
	switch (r->action) {
	case MEC_DROP:
		return verdict(CNT_MEC_DROP, XDP_DROP);
	case MEC_FORWARD_DECAPSULATED:
		return mec_decap(ctx, in, tot, r, cnt);
	case MEC_FORWARD_ENCAPSULATED: {
		/* To the rule's tunnel end (MEC 011 tunnelInfo), its TEID (0:
		 * the G-PDU's kept, as MEC 011 gives none); the outer source
		 * (the eNB) stays, as in steering. */
		__u32 old = ip->daddr, to = r->tun_dst;
		if (r->tun_teid)
			gh->teid = bpf_htonl(r->tun_teid);
		ip->daddr = to;
		csum_replace4(&ip->check, old, to);
		udp->check = 0;
		count(CNT_MEC_RETUNNEL);
		return mec_done(steer_forward(ctx, ip, cfg, rx));
	}
	case MEC_DUPLICATE_DECAPSULATED:
	case MEC_DUPLICATE_ENCAPSULATED:
		return mec_duplicate(ctx, ip, r, cfg, rx);
	default: /* PASSTHROUGH */
		return -1;
	}
}

/* Into the UE's downlink tunnel t (MEC 011 FORWARD_*): inner TTL
 * decremented, outer IPv4/UDP/GTP-U put in front (the anchor's S1-U
 * address as source), out by the next hop nh when it is known (nh_ifindex
 * non-zero), else by forward_ipv4. */
static __always_inline int mec_encap(struct xdp_md *ctx, struct pctx *c, struct iphdr *ip, const struct mec_ue *t,
				     __u32 nh_ifindex, const struct eth_macs *nh, const struct upf_config *cfg,
				     const struct eth_macs *rx, struct upf_counters *cnt)
{
	__u16 tot = bpf_ntohs(ip->tot_len);
	if (tot < sizeof(*ip) || (void *)ip + tot > c->data_end)
		return verdict(CNT_PASS_TRUNCATED, XDP_PASS);
	if ((__u32)tot + ENCAP_LEN > cfg->mtu)
		return verdict(CNT_PASS_OVERSIZE, XDP_PASS);
	ipv4_dec_ttl(ip);
	__u32 origin = t->origin, enb = t->enb, teid = t->teid;
	if (trim_tail(ctx, ip, tot) || gtpu_push(ctx, tot, origin, enb, teid))
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	count_at(cnt, CNT_MEC_ENCAP);
	if (nh_ifindex)
		return mec_done(send_via(ctx, nh_ifindex, nh));
	return mec_done(forward_ipv4(ctx, enb, origin, tot + ENCAP_LEN, cfg, rx));
}

/* A plain packet to a UE under the slice's plain-side rules: into the UE's
 * downlink tunnel when a FORWARD_* rule matches and the UE is known. A
 * flow's answer is kept in this CPU's mec_dl_memo with the eNB's next
 * hop, so that its next packets skip the rule, tunnel and next-hop
 * lookups. */
static __always_inline int mec_plain(struct xdp_md *ctx, struct pctx *c, struct iphdr *ip, __u32 slice,
				     const struct upf_config *cfg, const struct eth_macs *rx, struct upf_counters *cnt)
{
	struct flow f;
	flow_of(ip, c->data_end, &f);
	__u8 dscp = ip->tos >> 2;
	__u32 gen = cfg->memo_gen;
	union mec_exact_words k;
	mec_exact_words_of(&k, ((slice & MEC_SLICE_ID) << 1) | MEC_SIDE_PLAIN, &f);
	__u32 slot = mec_memo_slot(&k);
	struct mec_dl_memo *m = bpf_map_lookup_elem(&mec_dl_memo, &slot);
	if (m && m->valid && m->gen == gen && m->dscp == dscp && mec_words_eq(m->key, &k)) {
		struct mec_ue t = m->tunnel;
		struct eth_macs nh;
		macs_load(&nh, m->macs);
		return mec_encap(ctx, c, ip, &t, m->ifindex, &nh, cfg, rx, cnt);
	}
	struct mec_pkt p = { .dscp = dscp };
	const struct mec_rule *r = mec_select(slice, MEC_SIDE_PLAIN, &k, &f, &p, gen);
	if (!r)
		return -1;
	if (r->action == MEC_DROP)
		return verdict(CNT_MEC_DROP, XDP_DROP);
	if (r->action != MEC_FORWARD_DECAPSULATED && r->action != MEC_FORWARD_ENCAPSULATED)
		return -1;
	__u32 ue = ip->daddr;
	const struct mec_ue *tp = bpf_map_lookup_elem(&mec_ue, &ue);
	if (!tp)
		return verdict(CNT_MEC_NO_UE, -1);
	struct mec_ue t = *tp;
	const struct nexthop *nh = nexthop_get(t.enb, gen);
	if (nh && m) {
		__builtin_memcpy(m->key, k.w, sizeof(m->key));
		m->gen = gen;
		m->dscp = dscp;
		m->tunnel = t;
		m->ifindex = nh->ifindex;
		macs_load((struct eth_macs *)m->macs, nh->dmac);
		m->valid = 1;
	}
	return mec_encap(ctx, c, ip, &t, 0, 0, cfg, rx, cnt);
}

SEC("xdp")
int mec_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct upf_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return XDP_PASS;
	struct upf_counters *cnt = counters_get();
	count_at(cnt, CNT_RX);
	struct pctx c;
	pctx_init(&c, ctx);
	struct ethhdr *eth = PULL(&c, sizeof(*eth));
	if (!eth)
		return verdict(CNT_PASS_TRUNCATED, XDP_PASS);
	__be16 proto = eth->h_proto;
	struct mec_slice_key sk = { .ifindex = ctx->ingress_ifindex };
	int tagged = proto == bpf_htons(ETH_P_8021Q);
	if (tagged) {
		struct vlan_tag *v = PULL(&c, sizeof(*v));
		if (!v)
			return verdict(CNT_PASS_TRUNCATED, XDP_PASS);
		sk.vlan = bpf_ntohs(v->tci) & 0x0fff;
		proto = v->proto;
	}
	if (proto != bpf_htons(ETH_P_IP))
		return verdict(CNT_PASS_NOT_IPV4, XDP_PASS);
	__u32 slice;
	__u32 *port = tagged ? 0 : bpf_map_lookup_elem(&mec_port, &sk.ifindex);
	if (port) {
		slice = *port;
		if (!(slice & MEC_PORT_VALID))
			return verdict(CNT_MEC_NO_SLICE, XDP_PASS);
	} else {
		__u32 *slice_p = bpf_map_lookup_elem(&mec_slices, &sk);
		if (!slice_p)
			return verdict(CNT_MEC_NO_SLICE, XDP_PASS);
		slice = *slice_p;
	}
	struct eth_macs rx;
	macs_load(&rx, eth);
	if (tagged) {
		/* Untag: the MACs move up over the tag. */
		if (bpf_xdp_adjust_head(ctx, (int)sizeof(struct vlan_tag)))
			return verdict(CNT_DROP_MALFORMED, XDP_DROP);
		pctx_init(&c, ctx);
		eth = PULL(&c, sizeof(*eth));
		if (!eth)
			return verdict(CNT_DROP_MALFORMED, XDP_DROP);
		macs_store(eth, &rx);
		eth->h_proto = bpf_htons(ETH_P_IP);
	}
	struct iphdr *ip = PULL(&c, sizeof(*ip));
	__u32 why = transit_check(ip, cfg);
	if (why)
		return verdict(why, XDP_PASS);
	int r = -1;
	if (ip->protocol == IPPROTO_UDP_ && !ipv4_is_fragment(ip)) {
		struct udphdr *udp = PULL(&c, sizeof(*udp));
		if (udp && udp->dest == bpf_htons(UPF_GTPU_PORT)) {
			r = mec_gtpu(ctx, &c, ip, udp, slice, cfg, &rx, cnt);
			if (r >= 0)
				return r;
			/* A G-PDU no rule takes passes through untouched. */
			return mec_pass(ctx, cfg, &rx);
		}
		c.pos = ip + 1;
	}
	r = mec_plain(ctx, &c, ip, slice, cfg, &rx, cnt);
	if (r >= 0)
		return r;
	count_at(cnt, CNT_MEC_PASS);
	return steer_forward(ctx, ip, cfg, &rx);
}

/* The metadata mec_duplicate put in front of a broadcast clone. */
static __always_inline const struct mec_dup_meta *mec_dup_meta(struct xdp_md *ctx)
{
	const struct mec_dup_meta *m = (void *)(long)ctx->data_meta;
	if ((void *)(m + 1) > (void *)(long)ctx->data)
		return 0;
	return m;
}

/* Every clone of a DUPLICATE_* G-PDU, two per port. One program for all
 * of mec_dup's entries: the kernel runs one devmap program per device's
 * bulk queue, whichever entry queued first. A device's first clone of a
 * packet (its sequence number not yet seen there on this CPU, where the
 * broadcast and its flush both run) is the original if the original
 * leaves there, its second the copy if the copy does; every other clone
 * is dropped. The copy is decapsulated (inner TTL decremented, the
 * application's MACs) or re-tunnelled (outer destination and TEID, the
 * next hop's MACs). */
SEC("xdp/devmap")
int mec_dup_egress(struct xdp_md *ctx)
{
	const struct mec_dup_meta *mp = mec_dup_meta(ctx);
	if (!mp)
		return XDP_DROP;
	struct mec_dup_meta m = *mp;
	__u32 dev = ctx->egress_ifindex;
	__u32 *last = bpf_map_lookup_elem(&mec_dup_last, &dev);
	int first = !last || *last != m.seq;
	if (last)
		*last = m.seq;
	else
		bpf_map_update_elem(&mec_dup_last, &dev, &m.seq, BPF_ANY);
	if (first)
		return dev == m.orig_ifindex ? XDP_PASS : XDP_DROP;
	if (dev != m.copy_ifindex)
		return XDP_DROP;
	struct eth_macs macs;
	macs_load(&macs, m.macs);
	struct pctx c;
	pctx_init(&c, ctx);
	struct ethhdr *eth = PULL(&c, sizeof(*eth));
	struct iphdr *ip = PULL(&c, sizeof(*ip));
	struct udphdr *udp = PULL(&c, sizeof(*udp));
	if (!eth || !ip || !udp)
		return XDP_DROP;
	struct gtpu_hdr *gh = (void *)(udp + 1);
	if ((void *)(gh + 1) > c.data_end)
		return XDP_DROP;
	if (m.tun_dst) {
		__u32 old = ip->daddr;
		if (m.tun_teid)
			gh->teid = bpf_htonl(m.tun_teid);
		ip->daddr = m.tun_dst;
		csum_replace4(&ip->check, old, m.tun_dst);
		udp->check = 0;
		macs_store(eth, &macs);
		count(CNT_MEC_RETUNNEL);
		return XDP_PASS;
	}
	struct gtpu_info g;
	if (gtpu_parse(&c, &g) != GTPU_OK)
		return XDP_DROP;
	struct iphdr *in = PULL(&c, sizeof(*in));
	if (!in)
		return XDP_DROP;
	__u16 tot = bpf_ntohs(in->tot_len);
	if (tot < sizeof(*in) || (void *)in + tot > c.data_end || in->ttl <= 1)
		return XDP_DROP;
	ipv4_dec_ttl(in);
	int outer = (int)((void *)in - (void *)(eth + 1));
	if (trim_tail(ctx, in, tot) || bpf_xdp_adjust_head(ctx, outer))
		return XDP_DROP;
	eth = (void *)(long)ctx->data;
	if ((void *)(eth + 1) > (void *)(long)ctx->data_end)
		return XDP_DROP;
	macs_store(eth, &macs);
	eth->h_proto = bpf_htons(ETH_P_IP);
	count(CNT_MEC_DECAP);
	return XDP_PASS;
}

#endif
