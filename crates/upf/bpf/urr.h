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

static __always_inline void urr_count(__u32 idx, int uplink, __u32 len)
{
	if (idx == UPF_IDX_NONE)
		return;
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

#endif
