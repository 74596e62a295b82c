// SPDX-License-Identifier: GPL-2.0
/* Sink of `mobicore bench dataplane`: counts (per CPU) and drops the
 * benchmark's frames, UDP to port 9 either plain or inside a GTP-U G-PDU
 * (8-byte header); everything else (ARP, the round-trip probes) passes. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define BENCH_PORT 9
#define GTPU_PORT 2152

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sink_count SEC(".maps");

/* UDP destination port of an IPv4 header (no options) at p, or 0. */
static __always_inline __u16 udp_dport(__u8 *p, void *data_end)
{
	if ((void *)(p + 24) > data_end || p[0] != 0x45 || p[9] != 17)
		return 0;
	return bpf_ntohs(*(__u16 *)(p + 22));
}

SEC("xdp")
int sink_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	__u8 *ip = (__u8 *)(eth + 1);
	__u16 port = udp_dport(ip, data_end);
	if (port == GTPU_PORT)
		port = udp_dport(ip + 36, data_end); /* IPv4 20 + UDP 8 + GTP-U 8 */
	if (port != BENCH_PORT)
		return XDP_PASS;
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&sink_count, &zero);
	if (n)
		*n += 1;
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
