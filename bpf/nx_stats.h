/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Counters: per-CPU, one per event and per verdict reason (enum nx_stat). A verdict's reason
 * is counted where the packet leaves (nx_exit.h); events along the way here. */
#ifndef NX_STATS_H
#define NX_STATS_H

#include "nx_state.h"

static __always_inline void nx_count(__u32 stat)
{
	__u64 *c = bpf_map_lookup_elem(&nx_stats, &stat);

	if (c)
		*c += 1; /* per-CPU slot: no atomic needed */
}

#endif /* NX_STATS_H */
