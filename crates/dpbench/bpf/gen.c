// SPDX-License-Identifier: GPL-2.0
/* Load generator for `mobicore bench dataplane`: run with BPF_PROG_RUN and
 * BPF_F_TEST_XDP_LIVE_FRAMES, it rewrites the template headers of every
 * frame (live frames are recycled, and the device under test rewrites them
 * in place), varies the TEID or UE address across the installed sessions,
 * and sends the frame out of the ingress veth with XDP_TX.
 *
 * Sessions are visited in order (0, 1, ..., n-1, 0, ...: every packet a
 * different session, in address order, which CPUs prefetch) or, with `skew`, drawn from
 * a Zipf-like distribution (s = 1: rank r has weight ~1/r) through the
 * inverse-CDF table gen_zipf, the ranks scattered over the session indices
 * by multiplication with `perm` (coprime with n) modulo n.
 *
 * A plain frame shorter than HDR_LEN (down to PLAIN_LEN) has its first
 * PLAIN_LEN bytes rewritten. With `stamp_at`, the UDP payload at that offset
 * starts with STAMP_MAGIC and the time of sending (bpf_ktime_get_ns), which
 * the sink turns into the frame's one-way time. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define HDR_LEN 78   /* eth + IPv4 + UDP + GTP-U + IPv4 + UDP, or eth + 64 */
#define PLAIN_LEN 42 /* eth + IPv4 + UDP */
#define STAMP_MAGIC 0x4d434c54

enum gen_mode {
	GEN_FIXED = 0,    /* template as is */
	GEN_DOWNLINK = 1, /* IPv4 destination at 30 varies, header at 14 */
	GEN_UPLINK = 2,   /* TEID at 46 and inner source at 62 vary, inner header at 50 */
};

struct gen_cfg {
	__u32 mode;
	__u32 n;         /* sessions to cycle through (>= 1) */
	__u32 teid_base; /* host order */
	__u32 addr_base; /* host order */
	__u8 hdr[80];    /* the first HDR_LEN bytes of every frame */
	__u32 skew;      /* 1 = Zipf-like draw, 0 = sequential */
	__u32 perm;      /* rank -> session multiplier, coprime with n */
	__u32 stamp_at;  /* 0, or the offset of the UDP payload to time-stamp */
};

#define ZIPF_STEPS 1024

/* t[k] = floor((n + 1)^(k / ZIPF_STEPS)) - 1, k = 0..ZIPF_STEPS: a rank
 * uniform between t[k] and t[k+1] for k uniform is a piecewise log-uniform
 * (continuous Zipf, s = 1) rank. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZIPF_STEPS + 1);
	__type(key, __u32);
	__type(value, __u32);
} gen_zipf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_cfg);
} gen_cfg SEC(".maps");

/* 0: next session index, 1: frames sent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} gen_state SEC(".maps");

static __always_inline __u16 csum20(const __u16 *w)
{
	__u32 s = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		s += w[i];
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

SEC("xdp")
int gen_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0, one = 1;
	struct gen_cfg *c = bpf_map_lookup_elem(&gen_cfg, &zero);
	__u64 *next = bpf_map_lookup_elem(&gen_state, &zero);
	__u64 *sent = bpf_map_lookup_elem(&gen_state, &one);
	if (!c || !next || !sent)
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + PLAIN_LEN > data_end)
		return XDP_ABORTED;
	__u64 *d8 = data;
	const __u64 *s8 = (const __u64 *)c->hdr;
	if (data + HDR_LEN <= data_end) {
#pragma unroll
		for (int i = 0; i < 9; i++)
			d8[i] = s8[i];
		*(__u32 *)(data + 72) = *(const __u32 *)(c->hdr + 72);
		*(__u16 *)(data + 76) = *(const __u16 *)(c->hdr + 76);
	} else {
#pragma unroll
		for (int i = 0; i < 5; i++)
			d8[i] = s8[i];
		*(__u16 *)(data + 40) = *(const __u16 *)(c->hdr + 40);
	}

	__u32 i = (__u32)*next;
	*next = (i + 1 >= c->n) ? 0 : i + 1;
	if (c->skew) {
		__u32 r = bpf_get_prandom_u32();
		__u32 k = r >> 22, k1 = k + 1;
		__u32 *lo = bpf_map_lookup_elem(&gen_zipf, &k);
		__u32 *hi = bpf_map_lookup_elem(&gen_zipf, &k1);
		if (!lo || !hi)
			return XDP_ABORTED;
		__u32 w = *hi > *lo ? *hi - *lo : 0;
		__u64 rank = *lo + (w ? (r & 0x3fffff) % w : 0);
		i = (__u32)((rank * c->perm) % c->n);
	}
	*sent += 1;
	if (c->mode == GEN_DOWNLINK) {
		*(__u32 *)(data + 30) = bpf_htonl(c->addr_base + i);
		*(__u16 *)(data + 24) = 0;
		*(__u16 *)(data + 24) = csum20(data + 14);
	} else if (c->mode == GEN_UPLINK) {
		if (data + HDR_LEN > data_end)
			return XDP_ABORTED;
		*(__u32 *)(data + 46) = bpf_htonl(c->teid_base + i);
		*(__u32 *)(data + 62) = bpf_htonl(c->addr_base + i);
		*(__u16 *)(data + 60) = 0;
		*(__u16 *)(data + 60) = csum20(data + 50);
	}
	if (c->stamp_at) {
		__u8 *p = data + (c->stamp_at & 0xff);
		if ((void *)(p + 12) > data_end)
			return XDP_ABORTED;
		*(__u32 *)p = bpf_htonl(STAMP_MAGIC);
		*(__u64 *)(p + 4) = bpf_ktime_get_ns();
	}
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
