/* PDR lookup: by TEID (uplink) or UE address (downlink), then the first
 * rule in precedence order whose SDF filter matches (TS 29.244 5.2.1). */
#ifndef UPF_PDR_H
#define UPF_PDR_H

#include "maps.h"
#include "parse.h"

/* PDR sets, both directions (maps.h pdr_set), copy-on-write. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, UPF_MAX_PDR_SETS);
	__type(key, __u32);
	__type(value, struct pdr_set);
} pdr_sets SEC(".maps");

/* Overflow positions of keys whose direct position is taken (maps.h,
 * "Session lookup"): key -> position in fast_*_lines, written once. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FAST_OVF_SIZE);
	__type(key, __u32);
	__type(value, __u32);
} fast_ul SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FAST_OVF_SIZE);
	__type(key, __u32);
	__type(value, __u32);
} fast_dl SEC(".maps");

/* References and entry pools, a line each (maps.h fast_line), written
 * by user space through mmap. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FAST_REF_SIZE);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fast_line);
} fast_ul_lines SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FAST_REF_SIZE);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fast_line);
} fast_dl_lines SEC(".maps");

/* The entry the reference at `pos` names, if it is `key`'s. The reference
 * is read once (one 32-bit load); the entry it names is immutable while
 * any program may still hold it (the pool slot is written only after its
 * grace period), and the entry's address is computed from the reference
 * (an address dependency, also when it names the same line), so no fence
 * is needed. */
static __always_inline struct pdr_fast *by_ref(void *lines, __u32 pos, __u32 key)
{
	struct fast_line *l = bpf_map_lookup_elem(lines, &pos);
	if (!l)
		return 0;
	__u32 slot = *(volatile __u32 *)&l->ref;
	struct fast_line *s = bpf_map_lookup_elem(lines, &slot);
	if (s && (s->e.flags & FAST_F_IDX) && s->e.key == key)
		return &s->e;
	return 0;
}

/* The fast entry of `key`: through its direct position, else through the
 * overflow position the hash names (read once; any value it could hold is
 * checked against the key by by_ref). */
static __always_inline struct pdr_fast *fast_lookup(void *lines, void *ovf_map, __u32 key, __u32 host_key)
{
	struct pdr_fast *e = by_ref(lines, host_key & (FAST_IDX_SIZE - 1), key);
	if (e)
		return e;
	__u32 *p = bpf_map_lookup_elem(ovf_map, &key);
	if (!p)
		return 0;
	return by_ref(lines, *(volatile __u32 *)p, key);
}

/* The PDR set of a fast entry with FAST_F_SET (immutable while referenced). */
static __always_inline struct pdr_set *set_of(const struct pdr_fast *fe)
{
	__u32 idx = fe->set_idx;
	return bpf_map_lookup_elem(&pdr_sets, &idx);
}

static __always_inline int sdf_match(const struct sdf_filter *s, const struct flow *f)
{
	if (s->proto && s->proto != f->proto)
		return 0;
	if ((f->saddr & s->src_mask) != s->src_addr)
		return 0;
	if ((f->daddr & s->dst_mask) != s->dst_addr)
		return 0;
	if (f->sport < s->sport_lo || f->sport > s->sport_hi)
		return 0;
	if (f->dport < s->dport_lo || f->dport > s->dport_hi)
		return 0;
	return 1;
}

static __always_inline const struct pdr_rule *pdr_select(const struct pdr_set *set, const struct flow *f)
{
	__u32 n = set->count;
	/* bounded loop (verifier >= 5.3); not unrolled because of the early exits */
	for (int i = 0; i < PDR_SET_MAX; i++) {
		if (i >= n)
			break;
		const struct pdr_rule *r = &set->rules[i];
		if (!(r->flags & PDR_F_SDF) || sdf_match(&r->sdf, f))
			return r;
	}
	return 0;
}

#endif
