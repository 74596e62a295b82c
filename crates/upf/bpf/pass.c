// SPDX-License-Identifier: GPL-2.0
/* XDP_PASS for the peer of a veth that is an XDP_REDIRECT target: without
 * an XDP program there, the redirected frames are dropped. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
