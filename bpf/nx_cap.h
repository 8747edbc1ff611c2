/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Capture from the fast path (`natrix capture`, src/capture): every packet of natrix's
 * interfaces, as received and as sent, with its verdict, chosen by a tcpdump filter that
 * runs here, in the kernel.
 *
 * The filter is code made at capture time (libpcap's classic BPF, translated to eBPF by
 * src/capture/filter.rs), so it cannot be part of these programs: a program array reaches
 * it. While a capture runs, a packet goes
 *
 *   nx_xdp_inside ──tail call──▶ NX_PROG_CAP_RX_INSIDE   generated: the filter on the
 *                                   │                     received form → rx_snap
 *                                   ▼
 *                                nx_xdp_inside_cap       the fast path, after a copy of
 *                                   │ (slow path)         the received form (nx_cap_rx)
 *                                   ▼ nx_exit_cap
 *                                NX_PROG_CAP_TX          generated: the filter on the sent
 *                                   │                     form → tx_snap
 *                                   ▼
 *                                nx_xdp_cap_emit         both forms and the verdict into
 *                                                         nx_cap_rb; returns the verdict
 *
 * and the same from nx_xdp_outside. A tail call keeps what the packet's redirect set up, so
 * the verdict returned at the end of the chain is the packet's. Idle, the generated slots
 * are empty: the entry's tail call falls through (a load and a branch; the JIT patches a
 * tail call with a constant index into a direct jump), and the fast path runs as before.
 * The chain's state is this CPU's nx_cap_buf: `armed` from nx_cap_rx to the packet's exit,
 * which every path reaches exactly once (nx_exit.h). */
#ifndef NX_CAP_H
#define NX_CAP_H

#include "nx_exit.h"
#include "nx_state.h"

/* cap when it is a length bpf_xdp_load_bytes may copy into a record (1 to
 * NX_CAP_SNAP_MAX), else 0; in a form every verifier of the matrix bounds on both sides:
 * clang folds "cap > 0 && cap <= MAX" into one compare of cap - 1, whose bound 6.12 does
 * not carry back to cap, and 6.1 draws no lower bound from "cap != 0". The mask is asm,
 * so that the compiler cannot drop it. */
static __always_inline __u32 nx_cap_copy_len(__u32 cap)
{
	__u64 c1;

	if (cap == 0 || cap > NX_CAP_SNAP_MAX)
		return 0;
	c1 = cap - 1;
	asm volatile("%0 &= 0x3fff" : "+r"(c1));
	c1 += 1;
	return c1 <= NX_CAP_SNAP_MAX ? (__u32)c1 : 0;
}

static __always_inline struct nx_cap_buf *nx_cap_buf_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&nx_cap_buf, &zero);
}

static __always_inline struct nx_cap_ctl *nx_cap_ctl_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&nx_cap_ctl, &zero);
}

/* The entry programs' first step: into the capture's chain when one runs (slot filled);
 * otherwise the tail call falls through and the packet goes on here. */
static __always_inline void nx_cap_enter(struct xdp_md *ctx, __u32 rx_stage)
{
	bpf_tail_call(ctx, &nx_progs, rx_stage);
}

/* Bytes of a form to keep: the capture's snap length, the frame's, the record's. */
static __always_inline __u32 nx_cap_len(__u32 snap, __u32 len)
{
	if (len > snap)
		len = snap;
	if (len > NX_CAP_SNAP_MAX)
		len = NX_CAP_SNAP_MAX;
	return len;
}

/* The capture body's first step: keep the received form (it is about to be rewritten),
 * stamp it, arm the exit. */
static __always_inline void nx_cap_rx(struct xdp_md *ctx)
{
	struct nx_cap_buf *b = nx_cap_buf_get();
	struct nx_cap_ctl *c = nx_cap_ctl_get();
	__u32 len, cap;

	if (!b || !c)
		return;
	len = bpf_xdp_get_buff_len(ctx);
	cap = nx_cap_len(c->snap, len);
	b->rec.tai_ns = bpf_ktime_get_tai_ns();
	b->rec.id = (__u64)bpf_get_smp_processor_id() << 56 | (++b->seq & ((1ULL << 56) - 1));
	b->rec.rx_ifindex = ctx->ingress_ifindex;
	b->rec.rx_len = len;
	b->rec.rx_cap = 0;
	cap = nx_cap_copy_len(cap);
	if (cap && !bpf_xdp_load_bytes(ctx, 0, b->data, cap))
		b->rec.rx_cap = cap;
	b->armed = 1;
}

/* The exit of the capture body and of the slow path (which both the plain fast path and
 * the capture body reach): nx_exit (the verdict's reason counted); then, if this
 * packet is being captured, on to the filter on its sent form. If that slot is empty (the
 * capture just ended), the packet goes its way. */
static __always_inline int nx_exit_cap(struct xdp_md *ctx, nx_verdict v)
{
	struct nx_cap_buf *b = nx_cap_buf_get();
	int act = nx_exit(ctx, v);

	if (b && b->armed) {
		b->armed = 0;
		b->verdict = v;
		bpf_tail_call(ctx, &nx_progs, NX_PROG_CAP_TX);
		b->stage_fail++;
	}
	return act;
}

static __always_inline int nx_cap_selected(struct nx_cap_ctl *c, __u32 ifindex)
{
	__u32 n = c->nif;

	if (!n)
		return 1;
	for (__u32 i = 0; i < NX_CAP_IFACES; i++) {
		if (i >= n)
			break;
		if (c->ifindex[i] == ifindex)
			return 1;
	}
	return 0;
}

/* The end of the chain: if the filter matched either form (and --drops and -i agree), the
 * record into the ring; the action of the packet's verdict, which nx_exit_cap counted. */
static __always_inline int nx_cap_emit(struct xdp_md *ctx)
{
	struct nx_cap_buf *b = nx_cap_buf_get();
	struct nx_cap_ctl *c = nx_cap_ctl_get();
	struct nx_scratch *scr = nx_scratch_get();
	__u32 act, why, tx_if, len, cap, rx_cap, tx_cap = 0, size;
	nx_verdict v;
	int rx_sel, tx_sel;

	if (!b) /* cannot happen: a one-entry array */
		return nx_exit(ctx, nx_drop(NX_DROP_INTERNAL));
	v = b->verdict;
	act = NX_VERDICT_ACT(v);
	why = NX_VERDICT_WHY(v);
	if (!c || !scr || !(b->rx_snap || b->tx_snap))
		return act;
	if ((c->flags & NX_CAPF_DROPS) && act != XDP_DROP)
		return act;
	/* Values, not a pointer chosen between the context and the map (the verifier refuses
	 * a context pointer that moved). */
	tx_if = ctx->ingress_ifindex;
	if (act == XDP_REDIRECT && why == NX_STAT_REDIRECT) {
		__u32 fib_if = scr->fib.ifindex;

		barrier_var(fib_if);
		tx_if = fib_if;
	}
	rx_sel = nx_cap_selected(c, b->rec.rx_ifindex);
	tx_sel = act != XDP_DROP && nx_cap_selected(c, tx_if);
	if (!rx_sel && !tx_sel)
		return act;

	b->rec.verdict = v;
	b->rec.tx_ifindex = tx_if;
	b->rec.matched = (b->rx_snap ? NX_CAPM_RX : 0) | (b->tx_snap ? NX_CAPM_TX : 0);
	b->rec.tx_len = 0;
	b->rec.tx_cap = 0;
	rx_cap = b->rec.rx_cap;
	if (rx_cap > NX_CAP_SNAP_MAX)
		rx_cap = 0;
	if (act != XDP_DROP) {
		len = bpf_xdp_get_buff_len(ctx);
		cap = nx_cap_len((c->flags & NX_CAPF_NO_PAIR) ? NX_CAP_HDR_ONLY : c->snap, len);
		b->rec.tx_len = len;
		cap = nx_cap_copy_len(cap);
		if (cap && !bpf_xdp_load_bytes(ctx, 0, b->data + rx_cap, cap))
			tx_cap = cap;
	}
	b->rec.tx_cap = tx_cap;
	size = sizeof(b->rec) + rx_cap + tx_cap;
	if (size > sizeof(b->rec) + 2 * NX_CAP_SNAP_MAX)
		return act;
	if (bpf_ringbuf_output(&nx_cap_rb, &b->rec, size, 0))
		b->lost += rx_sel + (tx_sel && !(c->flags & NX_CAPF_NO_PAIR));
	else
		b->records++;
	return act;
}

#endif /* NX_CAP_H */
