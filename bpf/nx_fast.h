/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The fast path: the programs every packet enters (nx_xdp_inside, nx_xdp_outside). They
 * classify and route the packet and translate an established flow, whose session says
 * everything: one lookup, the rewrite, the FIB (cached), the redirect. Whatever needs more
 * (a new mapping or session, an ICMP error, a fragment, an ICMP error natrix owes a sender,
 * hairpinning) goes on by tail call to the slow path (nx_slow.h), with what was learnt here
 * in the per-CPU scratch (struct nx_stage). Each program has its own 512-byte stack and
 * its own verifier budget: the fast path stays small, the slow path need not be. */
#ifndef NX_FAST_H
#define NX_FAST_H

#include "nx_nat.h"

/* The setup predictor (struct nx_scratch's new_hint): a miss weighs eight hits, so the hint
 * climbs while more than one outbound packet in nine opens a connection; early fetching
 * starts at NX_NEW_HINT_ON (four misses in a row from rest) and the hint never goes past
 * NX_NEW_HINT_MAX (a burst's end is noticed within some 170 established packets). */
#define NX_NEW_HINT_MISS 8
#define NX_NEW_HINT_ON 32
#define NX_NEW_HINT_MAX 200

/* On to the slow path: a tail call does not return. If it cannot be made (the program
 * array is empty: nothing pins it), the packet is dropped as internal. */
static __always_inline nx_verdict nx_to_slow(struct xdp_md *ctx, __u32 prog)
{
	bpf_tail_call(ctx, &nx_progs, prog);
	return nx_drop(NX_DROP_INTERNAL);
}

/* What both directions do first: count the packet received (rx), take it only if it is
 * for natrix, parse Ethernet and IPv4 (*rc: NX_PARSE_OK, or NX_PARSE_FRAGMENT for a later
 * fragment). NX_GO_ON, or the verdict. */
static __always_inline nx_verdict nx_fast_begin(struct xdp_md *ctx, struct nx_pkt *p, __u32 rx,
						int *rc)
{
	nx_count(rx);
	if (!nx_for_us(ctx))
		return nx_pass(NX_STAT_PASS_OTHER_HOST);
	*rc = nx_parse_l3(ctx, p);
	if (*rc != NX_PARSE_OK && *rc != NX_PARSE_FRAGMENT)
		return nx_parse_verdict(*rc);
	return NX_GO_ON;
}

/* On to the inside slow path, with what the fast path learnt (written only here: an
 * established packet's path stores nothing it does not need). */
static __always_inline nx_verdict nx_inside_to_slow(struct xdp_md *ctx, struct nx_scratch *scr,
						    __u32 pool_idx, int fib_rc, int too_big,
						    int hairpin, int no_sess)
{
	scr->stage.no_sess = no_sess;
	scr->stage.pool_idx = pool_idx;
	scr->stage.fib_rc = fib_rc;
	scr->stage.too_big = too_big;
	scr->stage.hairpin = hairpin;
	return nx_to_slow(ctx, NX_PROG_INSIDE_SLOW);
}

/* The same outside: the pool index, and whether an established packet needs "fragmentation
 * needed" (mtu; the FIB's answer is in the scratch). */
static __always_inline nx_verdict nx_outside_to_slow(struct xdp_md *ctx, struct nx_scratch *scr,
						     __u32 pool_idx, int mtu)
{
	scr->stage.pool_idx = pool_idx;
	scr->stage.mtu = mtu;
	return nx_to_slow(ctx, NX_PROG_OUTSIDE_SLOW);
}

/* Ingress on an inside interface: routed here; translated here when established, else in
 * nx_slow_inside. */
static __always_inline nx_verdict nx_fast_inside(struct xdp_md *ctx)
{
	struct nx_scratch *scr = nx_scratch_get();
	struct nx_sess_key sk = {};
	struct bpf_fib_lookup *fib;
	struct nx_config *cfg;
	struct nx_pkt p = {};
	struct nx_sess *s;
	__u32 pool_idx = 0;
	int rc, fib_rc = 0, too_big = 0, hairpin, icmp_err, create, early;
	nx_verdict v;
	__u32 dst;

	v = nx_fast_begin(ctx, &p, NX_STAT_RX_INSIDE, &rc);
	if (v != NX_GO_ON)
		return v;
	cfg = nx_config();
	if (!cfg || !scr)
		return nx_drop(NX_DROP_INTERNAL);
	fib = &scr->fib;

	/* The key is copied to the stack: clang 14 mis-spills a packet pointer used as a map
	 * key. */
	dst = p.ip->daddr;
	/* Excluded destinations (RFC 6888 REQ-6) are routed as they are. The flag spares
	 * every packet a trie lookup when there are none. */
	if (cfg->flags & NX_CF_EXCLUSIONS) {
		struct nx_lpm_key ek = {.prefixlen = 32, .addr = dst};

		if (bpf_map_lookup_elem(&nx_excl, &ek)) {
			if (!nx_is_subscriber(p.ip->saddr))
				return nx_drop(NX_DROP_NOT_SUBSCRIBER);
			if (p.ip->ttl <= 1 || nx_fib(ctx, p.ip, fib) != BPF_FIB_LKUP_RET_SUCCESS)
				return nx_pass(NX_STAT_PASS_EXCLUDED);
			nx_count(NX_STAT_PASS_EXCLUDED);
			return nx_redirect(&p, fib);
		}
	}
	/* To a pool address: hairpinning, translated both ways without leaving the box. */
	hairpin = nx_pool_index(cfg, dst, &pool_idx);
	if (!hairpin) {
		fib_rc = nx_fib(ctx, p.ip, fib);
		if (fib_rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
			/* Too big for the next hop. With DF the kernel must answer "fragmentation
			 * needed" to the subscriber: give it the untranslated packet. Without DF we
			 * translate and let the kernel fragment. Look up again without the length
			 * check to learn the egress interface. */
			if (p.ip->frag_off & NX_IP_DF)
				return nx_pass(NX_STAT_PASS_FIB_OTHER);
			fib->tot_len = 0;
			fib->ifindex = ctx->ingress_ifindex;
			if (bpf_fib_lookup(ctx, fib, sizeof(*fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
				return nx_pass(NX_STAT_PASS_FIB_OTHER);
			too_big = 1; /* translated below, then the kernel fragments it */
			fib_rc = BPF_FIB_LKUP_RET_SUCCESS;
		}
		if (fib_rc != BPF_FIB_LKUP_RET_SUCCESS && fib_rc != BPF_FIB_LKUP_RET_NO_NEIGH)
			return nx_pass(fib_rc == BPF_FIB_LKUP_RET_NOT_FWDED
					   ? NX_STAT_PASS_LOCAL
					   : NX_STAT_PASS_FIB_OTHER);
		/* Only traffic leaving through an outside interface is translated. */
		if (nx_iface_role(fib->ifindex) != NX_ROLE_OUTSIDE)
			return nx_pass(NX_STAT_PASS_LOCAL);
	} else if (!(cfg->flags & NX_CF_HAIRPIN)) {
		return nx_drop(NX_DROP_HAIRPIN_DISABLED);
	}
	if (p.ip->ttl <= 1)
		return nx_pass(NX_STAT_PASS_TTL);
	if (p.frag || hairpin)
		return nx_inside_to_slow(ctx, scr, pool_idx, fib_rc, too_big, hairpin, 0);
	v = nx_parse_transport(&p, &icmp_err);
	if (v != NX_GO_ON)
		return v;
	if (icmp_err)
		return nx_inside_to_slow(ctx, scr, 0, fib_rc, too_big, 0, 0);

	/* An established flow: its session holds the outside endpoint, one lookup. */
	sk.in_ip = p.ip->saddr;
	sk.rem_ip = p.ip->daddr;
	sk.in_port = *p.sport;
	sk.rem_port = p.dport ? *p.dport : 0;
	sk.proto = p.proto;
	/* A packet likely to open a connection starts fetching the lines the slow path reads
	 * (nx_home_prefetch) before the session lookup, so that their misses and the session
	 * line's overlap (docs/design/performance-notebook.md, R38, R39): a TCP SYN always (it
	 * opens a connection or repeats one), a UDP datagram or an echo request while new
	 * flows are frequent on this CPU (the setup predictor, scr->new_hint). Otherwise an
	 * established packet would pay for loads it never uses. */
	create = nx_may_create(&p);
	early = create && (p.proto == IPPROTO_TCP ? !(p.tcp_flags & NX_TCPF_ACK)
						  : scr->new_hint >= NX_NEW_HINT_ON);
	if (early)
		nx_home_prefetch(cfg, sk.in_ip, nx_proto_idx(p.proto), bpf_ntohs(sk.in_port));
	s = nx_sess_lookup_fast(cfg, &sk);
	if (!s) {
		/* Any other packet that may open a connection: the fetch starts now, while
		 * the session line's miss may still be in flight, not after the tail call and
		 * the second parse. */
		if (create) {
			if (scr->new_hint < NX_NEW_HINT_MAX)
				scr->new_hint += NX_NEW_HINT_MISS;
			if (!early)
				nx_home_prefetch(cfg, sk.in_ip, nx_proto_idx(p.proto),
						 bpf_ntohs(sk.in_port));
		}
		return nx_inside_to_slow(ctx, scr, 0, fib_rc, too_big, 0, 1);
	}
	if (scr->new_hint)
		scr->new_hint--;
	if ((s->flags & NX_SF_PERMIT) || !s->out_ip)
		return nx_inside_to_slow(ctx, scr, 0, fib_rc, too_big, 0, 0);
	nx_sess_touch(cfg, s, p.proto, p.tcp_flags, NX_DIR_OUT, nx_now_tick(cfg));
	if (cfg->filtering == NX_FILTER_ADF && p.proto != IPPROTO_ICMP)
		nx_permit_address(&sk, s->expire);
	nx_rewrite(&p, NX_DIR_OUT, s->out_ip, s->out_port);
	nx_count(NX_STAT_XLATE_OUT);
	return nx_out_finish(&p, fib, fib_rc, too_big);
}

/* Ingress on an outside interface: translated here when established, else in
 * nx_slow_outside. */
static __always_inline nx_verdict nx_fast_outside(struct xdp_md *ctx)
{
	struct nx_scratch *scr = nx_scratch_get();
	struct nx_sess_key sk = {};
	struct bpf_fib_lookup *fib;
	struct nx_config *cfg;
	struct nx_map_key mk;
	struct nx_pkt p = {};
	struct nx_sess *s;
	__u32 pool_idx, dst, now;
	__be16 out_port, *port;
	int rc, owner, icmp_err;
	nx_verdict v;

	v = nx_fast_begin(ctx, &p, NX_STAT_RX_OUTSIDE, &rc);
	if (v != NX_GO_ON)
		return v;
	cfg = nx_config();
	if (!cfg || !scr)
		return nx_drop(NX_DROP_INTERNAL);
	/* Not for the pool: the gateway's own traffic, or routing that is not NAT. */
	dst = p.ip->daddr;
	if (!nx_pool_index(cfg, dst, &pool_idx))
		return nx_pass(NX_STAT_PASS_LOCAL);
	if (p.ip->ttl <= 1)
		return nx_pass(NX_STAT_PASS_TTL);
	if (p.frag)
		return nx_outside_to_slow(ctx, scr, pool_idx, 0);
	v = nx_parse_transport(&p, &icmp_err);
	if (v != NX_GO_ON)
		return v;
	if (icmp_err)
		return nx_outside_to_slow(ctx, scr, pool_idx, 0);

	/* The outside port's word names the inside endpoint; an established flow's session,
	 * agreeing with it, is enough. */
	port = nx_in_port_ptr(&p);
	if (!port)
		return nx_drop(NX_DROP_INTERNAL);
	out_port = *port;
	owner = nx_port_owner(pool_idx, p.proto, out_port, &mk);
	if (!owner)
		return nx_drop(NX_DROP_NO_MAPPING);
	sk.in_ip = mk.in_ip;
	sk.rem_ip = p.ip->saddr;
	sk.in_port = mk.in_port;
	sk.rem_port = p.proto == IPPROTO_ICMP ? 0 : *p.sport;
	sk.proto = p.proto;
	s = nx_sess_lookup_fast(cfg, &sk);
	if (!s || (s->flags & NX_SF_PERMIT) || s->out_port != out_port || s->out_ip != dst)
		return nx_outside_to_slow(ctx, scr, pool_idx, 0);
	now = nx_now_tick(cfg);
	nx_sess_touch(cfg, s, p.proto, p.tcp_flags, NX_DIR_IN, now);
	/* Route on the inside address before rewriting: a packet too big for the inside link
	 * with DF set must be answered "fragmentation needed" quoting it as the sender sent it
	 * (RFC 4787 REQ-13), from the pool address it was sent to: the slow path's. */
	fib = &scr->fib;
	rc = nx_fib_inside(ctx, p.ip, fib, mk.in_ip);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED && (p.ip->frag_off & NX_IP_DF))
		return nx_outside_to_slow(ctx, scr, pool_idx, 1);
	return nx_in_finish(&p, fib, rc, mk.in_ip, mk.in_port);
}

#endif /* NX_FAST_H */
