// SPDX-License-Identifier: GPL-2.0
/* Baseline: GTP-U decapsulation of one fixed tunnel, no rule lookup
 * (the same header walk as upf.c, so the ratio measures rule processing). */
#include "min.h"
#include "gtpu.h"

SEC("xdp")
int decap_min(struct xdp_md *ctx)
{
	struct min_config *m = min_config_get();
	if (!m)
		return XDP_PASS;
	struct pctx c;
	pctx_init(&c, ctx);
	struct ethhdr *eth = PULL(&c, sizeof(*eth));
	if (!eth || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	struct iphdr *ip = PULL(&c, sizeof(*ip));
	if (!ip || ip->ihl != 5 || ip->protocol != IPPROTO_UDP_)
		return XDP_PASS;
	struct udphdr *udp = PULL(&c, sizeof(*udp));
	if (!udp || udp->dest != bpf_htons(UPF_GTPU_PORT))
		return XDP_PASS;
	struct gtpu_info g;
	if (gtpu_parse(&c, &g) != GTPU_OK || g.teid != m->teid)
		return XDP_PASS;
	int outer = (int)(c.pos - c.data) - (int)sizeof(struct ethhdr);
	if (bpf_xdp_adjust_head(ctx, outer))
		return XDP_DROP;
	return min_send(ctx, m);
}

char _license[] SEC("license") = "GPL";
