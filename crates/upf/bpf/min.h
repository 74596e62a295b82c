/* Shared bits of the baseline programs: one fixed tunnel / next hop in a
 * one-entry array, the egress in a DEVMAP_HASH. No rule lookup. */
#ifndef UPF_MIN_H
#define UPF_MIN_H

#include "maps.h"
#include "parse.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct min_config);
} min_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, UPF_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} min_tx SEC(".maps");

static __always_inline int min_send(struct xdp_md *ctx, const struct min_config *m)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(eth->h_dest, m->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, m->smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	if (m->ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect_map(&min_tx, m->ifindex, XDP_PASS);
}

static __always_inline struct min_config *min_config_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&min_cfg, &zero);
}

#endif
