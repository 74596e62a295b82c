/* QER: gate status and MBR (TS 29.244 5.4.3.2) as a GCRA token bucket whose
 * state (theoretical arrival time) is updated with compare-and-swap, so
 * one bucket holds for all CPUs. */
#ifndef UPF_QER_H
#define UPF_QER_H

#include "maps.h"
#include "counters.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, UPF_MAX_QERS);
	__type(key, __u32);
	__type(value, struct qer_entry);
} qers SEC(".maps");

static __always_inline int gcra_admit(__u64 *tat, __u64 ps_per_byte, __u64 burst_ns, __u32 len)
{
	if (!ps_per_byte)
		return 1;
	__u64 now = bpf_ktime_get_ns();
	__u64 cost = ((__u64)len * ps_per_byte) / 1000;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u64 old = *(volatile __u64 *)tat;
		__u64 t = old < now ? now : old;
		if (t - now > burst_ns)
			return 0;
		if (__sync_val_compare_and_swap(tat, old, t + cost) == old)
			return 1;
	}
	return 1; /* heavy contention: admit rather than spin */
}

/* 0 = admitted, else the counter of the drop reason. */
static __always_inline __u32 qer_check(__u32 idx, int uplink, __u32 len)
{
	if (idx == UPF_IDX_NONE)
		return 0;
	struct qer_entry *q = bpf_map_lookup_elem(&qers, &idx);
	if (!q)
		return 0;
	if (uplink) {
		if (!q->gate_ul)
			return CNT_DROP_GATE;
		if (!gcra_admit(&q->ul_tat, q->ul_ps_per_byte, q->ul_burst_ns, len))
			return CNT_DROP_MBR;
	} else {
		if (!q->gate_dl)
			return CNT_DROP_GATE;
		if (!gcra_admit(&q->dl_tat, q->dl_ps_per_byte, q->dl_burst_ns, len))
			return CNT_DROP_MBR;
	}
	return 0;
}

#endif
