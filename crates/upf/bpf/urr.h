/* URR volume measurement (TS 29.244 5.2.2.2): per-CPU byte and packet
 * counters; user space sums the CPUs and applies thresholds and quotas. */
#ifndef UPF_URR_H
#define UPF_URR_H

#include "maps.h"
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UPF_MAX_URRS);
	__type(key, __u32);
	__type(value, struct urr_counts);
} urrs SEC(".maps");

/* URR lists (maps.h): immutable while referenced. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, UPF_MAX_URR_LISTS);
	__type(key, __u32);
	__type(value, struct urr_list);
} urr_lists SEC(".maps");

static __always_inline void urr_add(__u32 idx, int uplink, __u32 len)
{
	struct urr_counts *u = bpf_map_lookup_elem(&urrs, &idx);
	if (!u)
		return;
	if (uplink) {
		u->ul_bytes += len;
		u->ul_pkts += 1;
	} else {
		u->dl_bytes += len;
		u->dl_pkts += 1;
	}
}

/* Counts a forwarded packet into every URR of its PDR (urr_idx as in
 * maps.h; URR_IDX_SLOW never gets here: the caller passed the packet). */
static __always_inline void urr_count(__u32 idx, int uplink, __u32 len)
{
	if (idx == UPF_IDX_NONE || idx == URR_IDX_SLOW)
		return;
	if (!(idx & URR_IDX_LIST)) {
		urr_add(idx, uplink, len);
		return;
	}
	__u32 n = idx & ~URR_IDX_LIST;
	struct urr_list *l = bpf_map_lookup_elem(&urr_lists, &n);
	if (!l)
		return;
#pragma unroll
	for (int i = 0; i < URR_LIST_MAX; i++) {
		__u32 u = l->idx[i];
		if (u != UPF_IDX_NONE)
			urr_add(u, uplink, len);
	}
}

#endif
