/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The slow path: the programs the fast path (nx_fast.h) hands a packet to by tail call
 * (nx_xdp_inside_slow, nx_xdp_outside_slow) when an established flow's session is not
 * enough: new mappings and sessions (and the ICMP error that refuses one), ICMP errors to
 * translate, fragments, hairpinning, the "fragmentation needed" natrix owes a sender. The
 * fast path routed the packet already (struct nx_stage, the FIB's answer in the scratch);
 * the frame is parsed again, as the fast path left it. */
#ifndef NX_SLOW_H
#define NX_SLOW_H

#include "nx_nat.h"

/* Forward whatever is at ctx now (after an ICMP error was translated in place). */
static __always_inline nx_verdict nx_forward_ctx(struct xdp_md *ctx, struct nx_scratch *scr)
{
	struct nx_pkt p = {};

	if (nx_parse_eth(ctx, &p) != NX_PARSE_OK || nx_parse_ip(&p) != NX_PARSE_OK)
		return nx_drop(NX_DROP_INTERNAL);
	return nx_finish(ctx, &p, &scr->fib);
}

/* An ICMP error from a subscriber: translated outbound; if it is addressed to a pool
 * address (an error about a hairpinned packet, RFC 5508 REQ-7), translated inbound too. */
static __always_inline nx_verdict nx_error_out(struct xdp_md *ctx, struct nx_scratch *scr,
					       int hairpin)
{
	int rc = nx_icmp_error_out(ctx);

	if (rc < 0)
		return nx_drop(-rc);
	if (hairpin) {
		rc = nx_icmp_error_in(ctx);
		if (rc < 0)
			return nx_drop(-rc);
	}
	return nx_forward_ctx(ctx, scr);
}

/* An ICMP error from a subscriber (nx_slow_inside checked that it is one): the program
 * nx_xdp_inside_icmp_err. */
static __always_inline nx_verdict nx_slow_inside_icmp_err(struct xdp_md *ctx)
{
	struct nx_scratch *scr = nx_scratch_get();

	if (!scr)
		return nx_drop(NX_DROP_INTERNAL);
	return nx_error_out(ctx, scr, scr->stage.hairpin);
}

/* Inside, what the fast path did not finish. det: deterministic mode (nat.mode), a
 * constant: each mode's mappings are made by a program of its own (nx_xdp_inside_slow,
 * nx_xdp_inside_slow_det), so that neither is verified with the other's allocator. */
static __always_inline nx_verdict nx_slow_inside(struct xdp_md *ctx, const int det)
{
	struct nx_scratch *scr = nx_scratch_get();
	struct nx_config *cfg = nx_config();
	struct nx_stage *st;
	struct nx_pkt p = {};
	int rc, icmp_err;
	nx_verdict v;
	__u32 now;

	if (!cfg || !scr)
		return nx_drop(NX_DROP_INTERNAL);
	st = &scr->stage;
	rc = nx_parse_l3_again(ctx, &p);
	if (rc != NX_PARSE_OK && rc != NX_PARSE_FRAGMENT)
		return nx_drop(NX_DROP_INTERNAL); /* the fast path parsed this frame */
	if (p.frag && st->hairpin)
		return nx_drop(NX_DROP_FRAGMENT); /* hairpinned fragments: not supported */
	if (p.frag == 2) {
		/* a later fragment: no transport header, only the source to rewrite */
		if (!nx_is_subscriber(p.ip->saddr))
			return nx_drop(NX_DROP_NOT_SUBSCRIBER);
		rc = nx_frag_out(&p);
		if (rc < 0)
			return nx_drop(-rc);
		return nx_out_finish(&p, &scr->fib, st->fib_rc, st->too_big);
	}
	v = nx_parse_transport(&p, &icmp_err);
	if (v != NX_GO_ON)
		return v;
	if (icmp_err) {
		if (!nx_is_subscriber(p.ip->saddr))
			return nx_drop(NX_DROP_NOT_SUBSCRIBER);
		/* an ICMP error: its own program, so that neither this one nor that one is
		 * verified with the other's code (the error's translation looks mappings up in
		 * either mode) */
		bpf_tail_call(ctx, &nx_progs, NX_PROG_INSIDE_ICMP_ERR);
		return nx_drop(NX_DROP_INTERNAL);
	}

	now = nx_now_tick(cfg);
	rc = nx_xlate_out(cfg, &p, now, st->no_sess, det);
	if (rc < 0)
		return nx_refuse(ctx, -rc);
	if (st->hairpin) {
		/* translated outbound; inbound, to the subscriber the pool address names, in a
		 * program of its own (nx_xdp_inside_hairpin) */
		bpf_tail_call(ctx, &nx_progs, NX_PROG_INSIDE_HAIRPIN);
		return nx_drop(NX_DROP_INTERNAL);
	}
	return nx_out_finish(&p, &scr->fib, st->fib_rc, st->too_big);
}

/* A hairpinned packet (RFC 4787 REQ-9), translated outbound by nx_slow_inside: now
 * inbound, to the subscriber behind the pool address it was sent to. The program
 * nx_xdp_inside_hairpin. */
static __always_inline nx_verdict nx_slow_hairpin(struct xdp_md *ctx)
{
	struct nx_scratch *scr = nx_scratch_get();
	struct nx_config *cfg = nx_config();
	struct nx_pkt p = {};
	int rc, icmp_err;
	nx_verdict v;

	if (!cfg || !scr)
		return nx_drop(NX_DROP_INTERNAL);
	if (nx_parse_l3_again(ctx, &p) != NX_PARSE_OK)
		return nx_drop(NX_DROP_INTERNAL); /* parsed twice already */
	v = nx_parse_transport(&p, &icmp_err);
	if (v != NX_GO_ON || icmp_err)
		return nx_drop(NX_DROP_INTERNAL);
	rc = nx_xlate_in(cfg, &p, scr->stage.pool_idx, nx_now_tick(cfg));
	if (rc < 0)
		return nx_drop(-rc);
	return nx_finish(ctx, &p, &scr->fib);
}

/* The slow path's entry (nx_xdp_inside_slow): dynamic mode here; deterministic mode's
 * mappings are another program's (nx_xdp_inside_slow_det), the rest the same. */
static __always_inline nx_verdict nx_slow_inside_dyn(struct xdp_md *ctx)
{
	struct nx_config *cfg = nx_config();

	if (cfg && cfg->det_count) {
		bpf_tail_call(ctx, &nx_progs, NX_PROG_INSIDE_SLOW_DET);
		return nx_drop(NX_DROP_INTERNAL);
	}
	return nx_slow_inside(ctx, 0);
}

/* Outside, what the fast path did not finish. */
static __always_inline nx_verdict nx_slow_outside(struct xdp_md *ctx)
{
	struct nx_scratch *scr = nx_scratch_get();
	struct nx_config *cfg = nx_config();
	struct bpf_fib_lookup *fib;
	__u32 in_ip, now, pool_idx;
	__u16 in_port;
	struct nx_pkt p = {};
	int rc, icmp_err;
	nx_verdict v;

	if (!cfg || !scr)
		return nx_drop(NX_DROP_INTERNAL);
	fib = &scr->fib;
	pool_idx = scr->stage.pool_idx;
	rc = nx_parse_l3_again(ctx, &p);
	if (rc != NX_PARSE_OK && rc != NX_PARSE_FRAGMENT)
		return nx_drop(NX_DROP_INTERNAL); /* the fast path parsed this frame */
	/* An established flow's packet too big for the inside link with DF (the fast path
	 * routed it): "fragmentation needed", from the pool address it was sent to. */
	if (scr->stage.mtu)
		return nx_icmp_send(ctx, NX_ICMP_TC(ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED),
				    fib->mtu_result, p.ip->daddr, NX_DROP_MTU_EXCEEDED);
	if (rc == NX_PARSE_FRAGMENT) {
		rc = nx_frag_in(ctx, &p, nx_now_tick(cfg));
		if (rc < 0)
			return nx_drop(
			    -rc); /* a reason, or fragments_held: its copy is the daemon's */
		return nx_finish(ctx, &p, fib);
	}
	v = nx_parse_transport(&p, &icmp_err);
	if (v != NX_GO_ON)
		return v;
	if (icmp_err) {
		rc = nx_icmp_error_in(ctx);
		if (rc < 0)
			return nx_drop(-rc);
		return nx_forward_ctx(ctx, scr);
	}

	now = nx_now_tick(cfg);
	rc = nx_xlate_in_lookup(cfg, &p, pool_idx, now, &in_ip, &in_port);
	if (rc < 0)
		return nx_drop(-rc);
	if (p.frag)
		nx_frag_record(cfg, &p, in_ip, now);
	/* Route on the inside address before rewriting: a packet too big for the inside link
	 * with DF set must be answered "fragmentation needed" quoting it as the sender sent it
	 * (RFC 4787 REQ-13), from the pool address it was sent to. */
	rc = nx_fib_inside(ctx, p.ip, fib, in_ip);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED && (p.ip->frag_off & NX_IP_DF))
		return nx_icmp_send(ctx, NX_ICMP_TC(ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED),
				    fib->mtu_result, p.ip->daddr, NX_DROP_MTU_EXCEEDED);
	return nx_in_finish(&p, fib, rc, in_ip, in_port);
}

#endif /* NX_SLOW_H */
