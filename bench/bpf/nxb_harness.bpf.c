// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Timing harness for BPF_PROG_TEST_RUN in repeat mode. The kernel runs a program `repeat`
 * times on the SAME buffer, so a program that rewrites the packet (a NAT, a router) would
 * be timed on its own output from the second run on. The harness writes a fresh frame for
 * the next flow first (nxb_pkt.h) and then tail-calls the program under test; the cost of
 * doing so is measured by tail-calling nxb_nop instead, and subtracted.
 *
 * It is also how the benchmark fills natrix's tables: in NXB_MODE_NEW every run is a flow
 * natrix has not seen, translated by the real program, so every table stays consistent.
 */
#include "nxb_pkt.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Slot 0: the program under test (natrix's nx_xdp_inside/outside, the forwarder, nxb_nop). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} nxb_target SEC(".maps");

SEC("xdp")
int nxb_harness(struct xdp_md *ctx)
{
	if (nxb_write(ctx, nxb_seq++) < 0)
		return XDP_ABORTED;
	bpf_tail_call(ctx, &nxb_target, 0);
	return XDP_ABORTED; /* no program in slot 0 */
}

/* The calibration target: what the harness costs without any program behind it. */
SEC("xdp")
int nxb_nop(struct xdp_md *ctx) { return XDP_DROP; }
