/* GTP-U header (TS 29.281 5.1) with the optional fields and the chain of
 * extension headers (5.2), including the PDU Session Container (TS 38.415). */
#ifndef UPF_GTPU_H
#define UPF_GTPU_H

#include "parse.h"

#define GTPU_FLAG_E 0x04
#define GTPU_FLAG_S 0x02
#define GTPU_FLAG_PN 0x01
#define GTPU_VERSION_PT 0x30 /* version 1, protocol type GTP */
#define GTPU_G_PDU 255
#define GTPU_EXT_PDU_SESSION 0x85
/* Longest chain and longest single extension we walk in XDP; a longer one
 * goes to the slow path. */
#define GTPU_MAX_EXT 4
#define GTPU_MAX_EXT_UNITS 16

struct gtpu_hdr {
	__u8 flags;
	__u8 type;
	__u16 length; /* octets after the mandatory 8 */
	__u32 teid;
} __attribute__((packed));

struct gtpu_opt {
	__u16 seq;
	__u8 npdu;
	__u8 next_ext;
} __attribute__((packed));

struct gtpu_info {
	__u32 teid; /* host order */
	__u16 length;
	__u8 type;
	__u8 qfi; /* from a PDU session container, else 0 */
};

enum gtpu_parse_result {
	GTPU_OK = 0,        /* G-PDU, c->pos at the T-PDU */
	GTPU_CONTROL = 1,   /* another message type: slow path */
	GTPU_MALFORMED = 2, /* bad version, truncated, bad extension length */
	GTPU_TOO_LONG = 3,  /* extension chain beyond what we walk: slow path */
};

static __always_inline int gtpu_parse(struct pctx *c, struct gtpu_info *g)
{
	struct gtpu_hdr *h = PULL(c, sizeof(*h));
	if (!h)
		return GTPU_MALFORMED;
	if ((h->flags & 0xf0) != GTPU_VERSION_PT)
		return GTPU_MALFORMED;
	g->teid = bpf_ntohl(h->teid);
	g->length = bpf_ntohs(h->length);
	g->type = h->type;
	g->qfi = 0;
	if (h->type != GTPU_G_PDU)
		return GTPU_CONTROL;
	if (!(h->flags & (GTPU_FLAG_E | GTPU_FLAG_S | GTPU_FLAG_PN)))
		return GTPU_OK;
	/* Any of E, S, PN: sequence number, N-PDU number and next extension
	 * header type are all present (5.1). */
	struct gtpu_opt *o = PULL(c, sizeof(*o));
	if (!o)
		return GTPU_MALFORMED;
	__u8 next = (h->flags & GTPU_FLAG_E) ? o->next_ext : 0;
#pragma unroll
	for (int i = 0; i < GTPU_MAX_EXT; i++) {
		if (next == 0)
			return GTPU_OK;
		__u8 *e = c->pos;
		/* Every extension is at least one unit: length, 2 octets, next type. */
		if ((void *)(e + 4) > c->data_end)
			return GTPU_MALFORMED;
		__u64 units = e[0];
		if (units == 0)
			return GTPU_MALFORMED;
		if (units > GTPU_MAX_EXT_UNITS)
			return GTPU_TOO_LONG;
		if (next == GTPU_EXT_PDU_SESSION)
			g->qfi = e[2] & 0x3f; /* octet 2: QFI in both PDU types */
		__u8 *last = e + units * 4 - 1;
		/* keep the checked pointer in one register for the verifier */
		asm volatile("" : "+r"(last));
		if ((void *)(last + 1) > c->data_end)
			return GTPU_MALFORMED;
		next = *last;
		c->pos = last + 1;
	}
	return next == 0 ? GTPU_OK : GTPU_TOO_LONG;
}

#endif
