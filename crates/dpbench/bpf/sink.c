// SPDX-License-Identifier: GPL-2.0
/* Sink of `mobicore bench dataplane`: counts (per CPU) and drops the
 * benchmark's frames, UDP to port 9 either plain or inside a GTP-U G-PDU
 * (8-byte header); everything else (ARP, the round-trip probes) passes.
 * A frame whose UDP payload starts with STAMP_MAGIC (bpf/gen.c stamp_at)
 * has its one-way time, now minus the generator's stamp, recorded in
 * sink_lat at the next index of sink_lat_n (user space resets it). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define BENCH_PORT 9
#define GTPU_PORT 2152
#define STAMP_MAGIC 0x4d434c54
#define LAT_MAX 16384

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sink_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} sink_lat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sink_lat_n SEC(".maps");

/* The one-way time of a time-stamped frame whose UDP payload is at p. */
static __always_inline void record(__u8 *p, void *data_end)
{
	if ((void *)(p + 12) > data_end || *(__u32 *)p != bpf_htonl(STAMP_MAGIC))
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 sent = *(__u64 *)(p + 4);
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&sink_lat_n, &zero);
	if (!n)
		return;
	__u32 i = (__u32)__sync_fetch_and_add(n, 1);
	__u64 *slot = bpf_map_lookup_elem(&sink_lat, &i);
	if (slot)
		*slot = now - sent;
}

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
	if (port == GTPU_PORT) {
		ip += 36; /* IPv4 20 + UDP 8 + GTP-U 8 */
		port = udp_dport(ip, data_end);
	}
	if (port != BENCH_PORT)
		return XDP_PASS;
	record(ip + 28, data_end);
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&sink_count, &zero);
	if (n)
		*n += 1;
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
