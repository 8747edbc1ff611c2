/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Where a packet leaves the data plane. Every path of every XDP program ends in a verdict:
 * what XDP does with the frame (XDP_PASS / XDP_TX / XDP_REDIRECT / XDP_DROP) and the counter
 * that says why (a pass reason NX_STAT_PASS_*, a drop reason NX_DROP_*, NX_STAT_REDIRECT,
 * NX_STAT_ICMP_SENT, NX_STAT_FRAG_HELD), as one value. Paths build verdicts; only nx_exit,
 * called once by each entry program (natrix.bpf.c), turns one into an XDP action, counting
 * its reason on the way: the one place where capture and logging hook every packet's fate.
 * Helpers below the paths return NX_OK or minus a drop reason (nx_common.h). */
#ifndef NX_EXIT_H
#define NX_EXIT_H

#include "nx_stats.h"

typedef __u32 nx_verdict;

#define NX_VERDICT(act, why) ((nx_verdict)(act) << 16 | (nx_verdict)(why))
#define NX_VERDICT_ACT(v) ((v) >> 16)
#define NX_VERDICT_WHY(v) ((v)&0xffff)

/* Not a verdict (none is XDP_ABORTED): what a step returns when the packet goes on. */
#define NX_GO_ON 0

/* Dropped, for reason (NX_DROP_*; NX_STAT_FRAG_HELD: the frame's copy is the daemon's). */
static __always_inline nx_verdict nx_drop(__u32 reason) { return NX_VERDICT(XDP_DROP, reason); }

/* Left to the kernel, for why (NX_STAT_PASS_*). */
static __always_inline nx_verdict nx_pass(__u32 why) { return NX_VERDICT(XDP_PASS, why); }

/* Redirected by XDP: forwarded (NX_STAT_REDIRECT), or an ICMP error natrix built
 * (NX_STAT_ICMP_SENT). */
static __always_inline nx_verdict nx_redirected(__u32 why) { return NX_VERDICT(XDP_REDIRECT, why); }

/* The one exit: count the verdict's reason, return its action. */
static __always_inline int nx_exit(struct xdp_md *ctx, nx_verdict v)
{
	nx_count(NX_VERDICT_WHY(v));
	return NX_VERDICT_ACT(v);
}

#endif /* NX_EXIT_H */
