/* Packet context carrying the parse position, and bounded header pulls. */
#ifndef UPF_PARSE_H
#define UPF_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct pctx {
	void *data;
	void *data_end;
	void *pos; /* next unparsed byte */
};

static __always_inline void pctx_init(struct pctx *c, struct xdp_md *ctx)
{
	c->data = (void *)(long)ctx->data;
	c->data_end = (void *)(long)ctx->data_end;
	c->pos = c->data;
}

/* Returns the current position and advances by len, or NULL if the packet
 * is shorter. len must be a constant or a bounded value. */
#define PULL(c, len)                                                      \
	({                                                                    \
		void *__p = (c)->pos;                                         \
		void *__r = (void *)0;                                        \
		if (__p + (len) <= (c)->data_end) {                           \
			(c)->pos = __p + (len);                               \
			__r = __p;                                            \
		}                                                             \
		__r;                                                          \
	})

/* 5-tuple of an IPv4 packet, for SDF filters. Addresses network order,
 * ports host order (0 when not TCP/UDP or not the first fragment). */
struct flow {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
};

#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17
#define IP_MF_ 0x2000
#define IP_OFFSET_ 0x1fff

static __always_inline int ipv4_is_fragment(const struct iphdr *ip)
{
	return (ip->frag_off & bpf_htons(IP_MF_ | IP_OFFSET_)) != 0;
}

/* ip must have ihl == 5 and be bounds-checked for its 20 octets. */
static __always_inline void flow_of(const struct iphdr *ip, void *data_end, struct flow *f)
{
	f->saddr = ip->saddr;
	f->daddr = ip->daddr;
	f->proto = ip->protocol;
	f->sport = 0;
	f->dport = 0;
	if ((ip->protocol == IPPROTO_TCP_ || ip->protocol == IPPROTO_UDP_) && !(ip->frag_off & bpf_htons(IP_OFFSET_))) {
		__u16 *ports = (void *)(ip + 1);
		if ((void *)(ports + 2) <= data_end) {
			f->sport = bpf_ntohs(ports[0]);
			f->dport = bpf_ntohs(ports[1]);
		}
	}
}

#endif
