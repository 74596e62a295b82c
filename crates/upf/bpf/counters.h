/* Per-CPU counters, one per drop/pass reason (enum upf_counter in maps.h),
 * in one line per CPU: a program that counts more than once per packet
 * looks the line up once (counters_get) and counts into it (count_at). */
#ifndef UPF_COUNTERS_H
#define UPF_COUNTERS_H

#include "maps.h"
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct upf_counters {
	__u64 c[CNT_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct upf_counters);
} counters SEC(".maps");

static __always_inline struct upf_counters *counters_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&counters, &zero);
}

static __always_inline void count_at(struct upf_counters *line, __u32 idx)
{
	if (line && idx < CNT_MAX)
		line->c[idx] += 1;
}

static __always_inline void count(__u32 idx)
{
	count_at(counters_get(), idx);
}

#endif
