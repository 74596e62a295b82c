// SPDX-License-Identifier: GPL-2.0
/* Baseline: GTP-U encapsulation into one fixed tunnel, no rule lookup. */
#include "min.h"
#include "csum.h"
#include "gtpu.h"

#define ENCAP_LEN (sizeof(struct iphdr) + sizeof(struct udphdr) + sizeof(struct gtpu_hdr))

SEC("xdp")
int encap_min(struct xdp_md *ctx)
{
	struct min_config *m = min_config_get();
	if (!m)
		return XDP_PASS;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	__u16 tot = bpf_ntohs(ip->tot_len);
	__u32 src = m->src_addr, dst = m->dst_addr, teid = m->teid;
	if (bpf_xdp_adjust_head(ctx, -(int)ENCAP_LEN))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct iphdr *oip = data + sizeof(struct ethhdr);
	struct udphdr *udp = (void *)(oip + 1);
	struct gtpu_hdr *gh = (void *)(udp + 1);
	if ((void *)(gh + 1) > data_end)
		return XDP_DROP;
	__u16 olen = tot + ENCAP_LEN;
	oip->version = 4;
	oip->ihl = 5;
	oip->tos = 0;
	oip->tot_len = bpf_htons(olen);
	oip->id = 0;
	oip->frag_off = 0;
	oip->ttl = 64;
	oip->protocol = IPPROTO_UDP_;
	oip->check = 0;
	oip->saddr = src;
	oip->daddr = dst;
	oip->check = ipv4_csum(oip);
	udp->source = bpf_htons(UPF_GTPU_PORT);
	udp->dest = bpf_htons(UPF_GTPU_PORT);
	udp->len = bpf_htons(olen - sizeof(struct iphdr));
	udp->check = 0;
	gh->flags = GTPU_VERSION_PT;
	gh->type = GTPU_G_PDU;
	gh->length = bpf_htons(tot);
	gh->teid = bpf_htonl(teid);
	return min_send(ctx, m);
}

char _license[] SEC("license") = "GPL";
