/* IPv4 header checksums: full (RFC 791) and incremental (RFC 1624 eqn. 3),
 * also for TCP/UDP checksums over a changed address. */
#ifndef UPF_CSUM_H
#define UPF_CSUM_H

#include <linux/types.h>
#include <linux/ip.h>
#include <bpf/bpf_endian.h>

static __always_inline __u16 csum_fold32(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* Checksum of a 20-octet IPv4 header whose check field is zero. */
static __always_inline __u16 ipv4_csum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 s = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		s += w[i];
	return csum_fold32(s);
}

/* HC' = ~(~HC + ~m + m') for one 16-bit word changing from old to new. */
static __always_inline void csum_replace2(__u16 *check, __u16 old, __u16 new)
{
	__u32 s = (__u16)~*check;
	s += (__u16)~old;
	s += new;
	*check = csum_fold32(s);
}

/* csum_replace2 for a 32-bit field (an IPv4 address), word by word: also
 * the TCP/UDP checksum over the pseudo-header (RFC 1624). */
static __always_inline void csum_replace4(__u16 *check, __u32 old, __u32 new)
{
	csum_replace2(check, (__u16)(old >> 16), (__u16)(new >> 16));
	csum_replace2(check, (__u16)old, (__u16)new);
}

/* TTL and protocol share one 16-bit word; the TTL octet comes first, so
 * a TTL step of 1 is a step of bpf_htons(0x0100) in that word read in host
 * order. The word is written whole: a byte store followed by a word load
 * of the same octets stalls store-to-load forwarding. */
static __always_inline void ipv4_ttl_step(struct iphdr *ip, __u16 step)
{
	__u16 *w = (__u16 *)&ip->ttl;
	__u16 old = *w, new = old + step;
	*w = new;
	csum_replace2(&ip->check, old, new);
}

/* Increment the TTL (undoing ipv4_dec_ttl) with the checksum; TTL < 255. */
static __always_inline void ipv4_inc_ttl(struct iphdr *ip)
{
	ipv4_ttl_step(ip, bpf_htons(0x0100));
}

/* Decrement the TTL and update the checksum incrementally; TTL > 0. */
static __always_inline void ipv4_dec_ttl(struct iphdr *ip)
{
	ipv4_ttl_step(ip, (__u16)-bpf_htons(0x0100));
}

#endif
