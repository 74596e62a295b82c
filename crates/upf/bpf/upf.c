// SPDX-License-Identifier: GPL-2.0
/* The UPF fast path: uplink GTP-U decapsulation and downlink encapsulation
 * under PDR/FAR/QER/URR rules (TS 29.244, TS 29.281). Anything needing user
 * space returns XDP_PASS to the kernel stack (the slow path picks it up on
 * its UDP socket on port 2152 or by routing): among others a FAR with DUPL
 * (the slow path forwards and makes the copies), and a downlink packet
 * larger than upf_config.mtu (the egress device's, set by user space)
 * after encapsulation, and a PDR with more URRs than the fast path counts
 * (maps.h URR_IDX_SLOW). Session entries are read through copy-on-write
 * references (pdr.h fast_lookup), never while user space rewrites them. */
#include "maps.h"
#include "parse.h"
#include "csum.h"
#include "gtpu.h"
#include "counters.h"
#include "pdr.h"
#include "far.h"
#include "qer.h"
#include "urr.h"

#define ENCAP_LEN (sizeof(struct iphdr) + sizeof(struct udphdr) + sizeof(struct gtpu_hdr))

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct upf_config);
} config SEC(".maps");

static __always_inline int verdict(__u32 cnt, int action)
{
	count(cnt);
	return action;
}

/* Drops trailing octets after the IPv4 packet (Ethernet padding). */
static __always_inline int trim_tail(struct xdp_md *ctx, void *ip, __u16 tot_len)
{
	void *data_end = (void *)(long)ctx->data_end;
	long extra = (long)(data_end - ip) - tot_len;
	if (extra > 0 && extra < 4096)
		return bpf_xdp_adjust_tail(ctx, (int)-extra);
	return 0;
}

/* FAR action checks shared by both directions; 0 = forward. */
static __always_inline __u32 far_gate(__u8 action)
{
	if (action & FAR_DROP)
		return CNT_DROP_FAR;
	if (!(action & FAR_FORW) || (action & (FAR_BUFF | FAR_NOCP)))
		return CNT_PASS_BUFFER;
	return 0;
}

/* A key with a PDR set: the first matching PDR (TS 29.244 5.2.1) and its
 * FAR, copied into the shape of a fast entry. 0 = found, else the counter
 * of why not (uplink: a PDR without outer header removal is reported
 * before a missing FAR, as the fast path checks it first). */
static __always_inline __u32 from_set(const struct pdr_set *set, const struct flow *f, int uplink, struct pdr_fast *out)
{
	const struct pdr_rule *r = pdr_select(set, f);
	if (!r)
		return CNT_DROP_NO_PDR;
	__u32 far_idx = r->far_idx;
	out->qer_idx = r->qer_idx;
	out->urr_idx = r->urr_idx;
	out->pdr_flags = r->flags;
	if (uplink && !(r->flags & PDR_F_OHR))
		return CNT_PASS_UNSUPPORTED;
	struct far_entry *far = bpf_map_lookup_elem(&fars, &far_idx);
	if (!far)
		return CNT_DROP_NO_FAR;
	out->action = far->action;
	out->far_flags = far->flags;
	out->teid = far->teid;
	out->peer_addr = far->peer_addr;
	out->local_addr = far->local_addr;
	return 0;
}

static __always_inline int set_verdict(__u32 why)
{
	return verdict(why, why == CNT_PASS_UNSUPPORTED ? XDP_PASS : XDP_DROP);
}

/* Puts outer GTP-U/UDP/IPv4 headers (TS 29.281 5.1, TS 29.244 5.2.1 OHC)
 * in front of the IPv4 packet of `tot` octets after the Ethernet header:
 * a G-PDU with `teid` from `local` to `peer` (network order); the
 * Ethernet header is left for forward_ipv4. 0 = done. */
static __always_inline int gtpu_push(struct xdp_md *ctx, __u16 tot, __u32 local, __u32 peer, __u32 teid)
{
	if (bpf_xdp_adjust_head(ctx, -(int)ENCAP_LEN))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *oip = data + sizeof(struct ethhdr);
	if ((void *)oip + ENCAP_LEN > data_end)
		return -1;
	__u32 olen = (__u32)tot + ENCAP_LEN;
	/* Checksum of the outer header in registers: the constant words
	 * (version/IHL/TOS 0x4500, id 0, flags 0, TTL 64/UDP 0x4011), the
	 * length and the two addresses (RFC 1071). */
	__u32 hl = bpf_ntohl(local), hp = bpf_ntohl(peer);
	__u32 s = 0x4500 + 0x4011 + olen + (hl >> 16) + (hl & 0xffff) + (hp >> 16) + (hp & 0xffff);
	__u16 check = csum_fold32(s);
	/* Written as words (big-endian values), see struct eth_macs on the
	 * alignment. */
	__u32 *w = (__u32 *)oip;
	w[0] = bpf_htonl(0x45000000 | olen);             /* version 4, IHL 5, TOS 0, total length */
	w[1] = 0;                                        /* identification 0, no fragmentation */
	w[2] = bpf_htonl((64u << 24) | (IPPROTO_UDP_ << 16) | check);
	w[3] = local;
	w[4] = peer;
	w[5] = bpf_htonl((UPF_GTPU_PORT << 16) | UPF_GTPU_PORT);
	w[6] = bpf_htonl((olen - sizeof(struct iphdr)) << 16); /* UDP length; checksum 0, allowed over IPv4 */
	w[7] = bpf_htonl((GTPU_VERSION_PT << 24) | (GTPU_G_PDU << 16) | tot);
	w[8] = bpf_htonl(teid);
	return 0;
}

/* An uplink G-PDU whose FAR creates an outer header (TS 29.244 5.2.1):
 * its T-PDU re-tunnelled as it is, the outer headers (extension headers
 * included) replaced, no TTL step (it stays in the tunnel layer): an
 * indirect data forwarding tunnel back to the target eNB (TS 23.401
 * 5.5.1.2.2 step 8) or N9 to another UPF. The slow path does the same
 * (dataplane/forward.rs); End Markers stay with it (GTPU_CONTROL), after
 * every G-PDU that came before them. */
static __always_inline int retunnel(struct xdp_md *ctx, struct pctx *c, struct iphdr *ip, __u16 tot,
				    const struct pdr_fast *r, __u32 qer_idx, __u32 urr_idx,
				    const struct upf_config *cfg, const struct eth_macs *rx)
{
	if ((__u32)tot + ENCAP_LEN > cfg->mtu)
		return verdict(CNT_PASS_OVERSIZE, XDP_PASS); /* the slow path fragments */
	__u32 why = qer_check(qer_idx, 1, tot);
	if (why)
		return verdict(why, XDP_DROP);
	urr_count(urr_idx, 1, tot);
	__u32 teid = r->teid, peer = r->peer_addr;
	__u32 local = r->local_addr ? r->local_addr : cfg->s1u_addr;
	int outer = (int)((void *)ip - c->data) - (int)sizeof(struct ethhdr);
	if (trim_tail(ctx, ip, tot) || bpf_xdp_adjust_head(ctx, outer) || gtpu_push(ctx, tot, local, peer, teid))
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	count(CNT_UL_FWD);
	return forward_ipv4(ctx, peer, local, tot + ENCAP_LEN, cfg, rx);
}

static __always_inline int uplink(struct xdp_md *ctx, struct pctx *c, const struct upf_config *cfg,
				  const struct eth_macs *rx)
{
	struct gtpu_info g;
	switch (gtpu_parse(c, &g)) {
	case GTPU_OK:
		break;
	case GTPU_CONTROL:
		return verdict(CNT_PASS_GTP_CONTROL, XDP_PASS);
	case GTPU_TOO_LONG:
		return verdict(CNT_PASS_GTP_LONG_CHAIN, XDP_PASS);
	default:
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	}
	struct pdr_fast *fe = fast_lookup(&fast_ul_lines, &fast_ul, g.teid, g.teid);
	if (!fe)
		return verdict(CNT_PASS_UNKNOWN_TEID, XDP_PASS);

	struct iphdr *ip = c->pos;
	if ((void *)(ip + 1) > c->data_end)
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	if (ip->version != 4)
		return verdict(CNT_PASS_NOT_IPV4, XDP_PASS);
	if (ip->ihl != 5)
		return verdict(CNT_PASS_IP_OPTIONS, XDP_PASS);
	__u16 tot = bpf_ntohs(ip->tot_len);
	if (tot < sizeof(*ip) || (void *)ip + tot > c->data_end)
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	if (fe->ue_addr && ip->saddr != fe->ue_addr)
		return verdict(CNT_DROP_SPOOFED, XDP_DROP);

	struct pdr_fast rule;
	const struct pdr_fast *r = fe;
	if (fe->flags & FAST_F_SET) {
		struct pdr_set *set = set_of(fe);
		if (!set)
			return verdict(CNT_PASS_UNKNOWN_TEID, XDP_PASS);
		struct flow f;
		flow_of(ip, c->data_end, &f);
		__u32 why = from_set(set, &f, 1, &rule);
		if (why)
			return set_verdict(why);
		r = &rule;
	}
	__u32 qer_idx = r->qer_idx, urr_idx = r->urr_idx;
	if (!(r->pdr_flags & PDR_F_OHR))
		return verdict(CNT_PASS_UNSUPPORTED, XDP_PASS);
	__u32 why = far_gate(r->action);
	if (why)
		return verdict(why, why == CNT_DROP_FAR ? XDP_DROP : XDP_PASS);
	/* DUPL (TS 29.244 5.2.1, 8.2.26): the slow path forwards and duplicates. */
	if (r->action & FAR_DUPL)
		return verdict(CNT_PASS_DUPL, XDP_PASS);
	if (urr_idx == URR_IDX_SLOW)
		return verdict(CNT_PASS_MANY_URRS, XDP_PASS);
	if (r->far_flags & FAR_F_OHC)
		return retunnel(ctx, c, ip, tot, r, qer_idx, urr_idx, cfg, rx);
	if (ip->ttl <= 1)
		return verdict(CNT_PASS_TTL, XDP_PASS);
	why = qer_check(qer_idx, 1, tot);
	if (why)
		return verdict(why, XDP_DROP);
	urr_count(urr_idx, 1, tot);

	ipv4_dec_ttl(ip);
	__u32 saddr = ip->saddr, daddr = ip->daddr;
	int outer = (int)((void *)ip - c->data) - (int)sizeof(struct ethhdr);
	if (trim_tail(ctx, ip, tot) || bpf_xdp_adjust_head(ctx, outer))
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	count(CNT_UL_FWD);
	return forward_ipv4(ctx, daddr, saddr, tot, cfg, rx);
}

static __always_inline int downlink(struct xdp_md *ctx, struct iphdr *ip, void *data_end, const struct upf_config *cfg,
				    const struct eth_macs *rx)
{
	struct pdr_fast *fe = fast_lookup(&fast_dl_lines, &fast_dl, ip->daddr, bpf_ntohl(ip->daddr));
	if (!fe)
		return verdict(CNT_PASS_NOT_UE, XDP_PASS);
	__u16 tot = bpf_ntohs(ip->tot_len);
	if (tot < sizeof(*ip) || (void *)ip + tot > data_end)
		return verdict(CNT_PASS_TRUNCATED, XDP_PASS);
	struct pdr_fast rule;
	const struct pdr_fast *r = fe;
	if (fe->flags & FAST_F_SET) {
		struct pdr_set *set = set_of(fe);
		if (!set)
			return verdict(CNT_PASS_NOT_UE, XDP_PASS);
		struct flow f;
		flow_of(ip, data_end, &f);
		__u32 why = from_set(set, &f, 0, &rule);
		if (why)
			return set_verdict(why);
		r = &rule;
	}
	__u32 qer_idx = r->qer_idx, urr_idx = r->urr_idx;
	__u32 why = far_gate(r->action);
	if (why == CNT_PASS_BUFFER)
		return verdict(why, to_buffer(ctx, ip->daddr)); /* AF_XDP slow path, else XDP_PASS */
	if (why)
		return verdict(why, why == CNT_DROP_FAR ? XDP_DROP : XDP_PASS);
	if (behind_slow_path(ip->daddr))
		return verdict(CNT_PASS_IN_ORDER, to_buffer(ctx, ip->daddr));
	/* DUPL (TS 29.244 5.2.1, 8.2.26): the slow path forwards and duplicates. */
	if (r->action & FAR_DUPL)
		return verdict(CNT_PASS_DUPL, XDP_PASS);
	if (urr_idx == URR_IDX_SLOW)
		return verdict(CNT_PASS_MANY_URRS, XDP_PASS);
	int ohc = r->far_flags & FAR_F_OHC;
	if (ohc && (__u32)tot + ENCAP_LEN > cfg->mtu)
		return verdict(CNT_PASS_OVERSIZE, XDP_PASS);
	if (ip->ttl <= 1)
		return verdict(CNT_PASS_TTL, XDP_PASS);
	why = qer_check(qer_idx, 0, tot);
	if (why)
		return verdict(why, XDP_DROP);
	urr_count(urr_idx, 0, tot);
	ipv4_dec_ttl(ip);

	__u32 teid = r->teid, peer = r->peer_addr;
	__u32 local = r->local_addr ? r->local_addr : cfg->s1u_addr;
	__u32 dst = ip->daddr, src = ip->saddr;
	if (trim_tail(ctx, ip, tot))
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	if (!ohc) {
		count(CNT_DL_FWD);
		return forward_ipv4(ctx, dst, src, tot, cfg, rx);
	}
	if (gtpu_push(ctx, tot, local, peer, teid))
		return verdict(CNT_DROP_MALFORMED, XDP_DROP);
	__u32 olen = (__u32)tot + ENCAP_LEN;
	count(CNT_DL_FWD);
	return forward_ipv4(ctx, peer, local, olen, cfg, rx);
}

SEC("xdp")
int upf_xdp(struct xdp_md *ctx)
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
	struct eth_macs rx; /* head adjustments overwrite it */
	macs_load(&rx, eth);
	struct iphdr *ip = PULL(&c, sizeof(*ip));
	if (!ip)
		return verdict(CNT_PASS_TRUNCATED, XDP_PASS);
	if (ip->version != 4)
		return verdict(CNT_PASS_NOT_IPV4, XDP_PASS);
	if (ip->ihl != 5)
		return verdict(CNT_PASS_IP_OPTIONS, XDP_PASS);
	if (ipv4_is_fragment(ip))
		return verdict(CNT_PASS_FRAGMENT, XDP_PASS);
	if (ip->protocol == IPPROTO_UDP_ && ip->daddr == cfg->s1u_addr) {
		struct udphdr *udp = PULL(&c, sizeof(*udp));
		if (!udp)
			return verdict(CNT_PASS_TRUNCATED, XDP_PASS);
		if (udp->dest == bpf_htons(UPF_GTPU_PORT))
			return uplink(ctx, &c, cfg, &rx);
		return verdict(CNT_PASS_NOT_UE, XDP_PASS);
	}
	return downlink(ctx, ip, c.data_end, cfg, &rx);
}

/* The steering role's program (steer_xdp), sharing these maps: the
 * loader loads one of the two, by role. */
#include "steer.h"

/* The MEC router role's program (mec_xdp), sharing them too. */
#include "mec.h"

char _license[] SEC("license") = "GPL";
