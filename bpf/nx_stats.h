/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Counters and drop reasons: every verdict that is not a translation is counted here. */
#ifndef NX_STATS_H
#define NX_STATS_H

#include "nx_state.h"

static __always_inline void nx_count(__u32 stat)
{
	__u64 *c = bpf_map_lookup_elem(&nx_stats, &stat);

	if (c)
		*c += 1; /* per-CPU slot: no atomic needed */
}

/* Drop with a reason. Always use this, never a bare XDP_DROP. */
static __always_inline int nx_drop(__u32 reason)
{
	nx_count(reason);
	return XDP_DROP;
}

static __always_inline int nx_pass(__u32 why)
{
	nx_count(why);
	return XDP_PASS;
}

#endif /* NX_STATS_H */
