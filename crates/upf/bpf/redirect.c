// SPDX-License-Identifier: GPL-2.0
/* Baseline: bare XDP redirect, MAC rewrite only (the ceiling of the host). */
#include "min.h"

SEC("xdp")
int redirect_min(struct xdp_md *ctx)
{
	struct min_config *m = min_config_get();
	if (!m)
		return XDP_PASS;
	return min_send(ctx, m);
}

char _license[] SEC("license") = "GPL";
