/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Translation in both directions: header rewriting, finding or making mappings and
 * sessions, filtering; and the verdicts both paths (nx_fast.h, nx_slow.h) give. */
#ifndef NX_NAT_H
#define NX_NAT_H

#include "nx_alloc.h"
#include "nx_csum.h"
#include "nx_frag.h"
#include "nx_fwd.h"
#include "nx_icmp.h"
#include "nx_limits.h"
#include "nx_parse.h"
#include "nx_session.h"
#include "nx_stats.h"

/* ---- header rewriting ---- */

/* Replace the source (dir OUT) or destination (dir IN) address and port/identifier, with
 * every checksum updated incrementally. TCP and UDP checksums cover the pseudo-header,
 * ICMP's does not. */
static __always_inline void nx_rewrite(struct nx_pkt *p, int dir, __u32 new_ip, __u16 new_port)
{
	struct iphdr *ip = p->ip;
	__u32 *addr = dir == NX_DIR_OUT ? &ip->saddr : &ip->daddr;
	__be16 *port = dir == NX_DIR_OUT ? p->sport : p->dport;
	__u32 old_ip = *addr, d_ip;
	__u16 old_port;

	if (p->proto == IPPROTO_ICMP)
		port = p->sport; /* the echo identifier, both ways */
	old_port = *port;
	*addr = new_ip;
	*port = new_port;
	d_ip = nx_csum_diff4(old_ip, new_ip);
	nx_csum_apply(&ip->check, d_ip);
	switch (p->proto) {
	case IPPROTO_TCP:
		nx_csum_apply(p->l4_csum, d_ip + nx_csum_diff2(old_port, new_port));
		break;
	case IPPROTO_UDP:
		nx_udp_csum_apply(p->l4_csum, d_ip + nx_csum_diff2(old_port, new_port));
		break;
	default:
		nx_csum_apply(p->l4_csum, nx_csum_diff2(old_port, new_port));
		break;
	}
}

/* ---- mappings ---- */

/* Whether this packet may create a mapping: TCP only with a SYN, ICMP only with an echo
 * request. Anything else finds an existing mapping or nothing. */
static __always_inline int nx_may_create(struct nx_pkt *p)
{
	if (p->proto == IPPROTO_TCP)
		return (p->tcp_flags & (NX_TCPF_SYN | NX_TCPF_RST)) == NX_TCPF_SYN;
	if (p->proto == IPPROTO_ICMP)
		return ((struct icmphdr *)p->l4)->type == ICMP_ECHO;
	return 1;
}

/* Dynamic mode, a packet that may open a connection from inside endpoint sip, pp =
 * NX_PP(protocol index, inside port): its endpoint's lock stripe. */
static __always_inline __u32 *nx_ep_lock(struct nx_config *cfg, __u32 sip, __u32 pp)
{
	__u32 key = nx_ep_lock_key(nx_home_hash(cfg, sip, pp));

	return bpf_map_lookup_elem(&nx_tab_locks, &key);
}

/* With a, what nx_alloc answered for inside endpoint sip (pp = NX_PP(protocol index, inside
 * port)) other than NX_ALLOC_HOME, the endpoint's lock held: the port a becomes a table mapping
 * (its own timer, transitory for TCP, runs until it has a session). Returns as nx_home_map does, or
 * minus a drop reason. Global: its frame is not on the stack while the allocator's is (nx_dyn_map).
 */
__noinline long nx_dyn_table(__u32 sip, __u32 pp, long a)
{
	struct nx_config *cfg = nx_config();
	__u32 pidx = pp >> 16, key, *out_ip;
	__u8 proto;
	__s64 ins;

	if (!cfg)
		return -NX_DROP_INTERNAL;
	if (a < 0 || pidx >= NX_NPROTO)
		return a;
	key = (__u32)(a >> 16);
	out_ip = bpf_map_lookup_elem(&nx_pool, &key);
	if (!out_ip) {
		nx_port_unclaim(cfg, key, pidx, (__u16)a, nx_port_word(sip, (__u16)pp));
		return -NX_DROP_INTERNAL;
	}
	proto = pidx == NX_P_TCP ? IPPROTO_TCP : pidx == NX_P_UDP ? IPPROTO_UDP : IPPROTO_ICMP;
	ins = nx_maps_insert((__u64)sip | (__u64)bpf_htons((__u16)pp) << 32 | (__u64)proto << 48,
			     (__u64)*out_ip | (__u64)bpf_htons((__u16)a) << 32,
			     (__u64)(nx_now_tick(cfg) + nx_timeout(cfg, proto, NX_TCP_SYN_OUT))
				 << 32);
	if (ins < 0 || !(ins & NX_TAB_NEW)) {
		/* full (or, which the lock excludes, created meanwhile): this port goes back */
		nx_port_unclaim(cfg, (__u32)(a >> 16), pidx, (__u16)a,
				nx_port_word(sip, (__u16)pp));
		return ins < 0 ? ins : NX_HW_TAB | (__u32)ins;
	}
	nx_count(NX_STAT_MAP_CREATED);
	return NX_HW_TAB | NX_HW_NEW | (__u32)ins;
}

/* Dynamic mode, a packet that may open a connection from inside endpoint sip: under its
 * endpoint's lock stripe, its mapping is found or claimed in its home block
 * (nx_home_map), or else a port is allocated (nx_alloc, once more if the subscriber entry
 * it worked on went away meanwhile) and made a table mapping (nx_dyn_table). The lock is
 * taken and dropped here. Returns as nx_home_map does, or minus a drop reason. Global,
 * scalar arguments: verified once. Its frame sits between the slow path's and the
 * allocator's on the 512-byte stack: it keeps little across its calls. */
__noinline long nx_dyn_map(__u32 sip, __u32 pp)
{
	struct nx_config *cfg = nx_config();
	__u32 *lock = cfg ? nx_ep_lock(cfg, sip, pp) : 0;
	__u32 home_full;
	long r;

	if (!lock)
		return -NX_DROP_INTERNAL;
	if (nx_tab_lock_take(lock) < 0)
		return -NX_DROP_TABLE_BUSY;
	r = nx_home_map(sip, pp, 1);
	if (r >= 0 && (r & NX_HW_NONE)) {
		home_full = (__u32)(r & NX_HW_OWNER);
		/* the subscriber's entry first, made if new (not from inside nx_alloc: its
		 * frames would add to the allocator's, the deepest chain) */
		r = nx_sub_get(sip);
		if (r >= 0)
			r = nx_alloc(sip, pp, home_full, (__u32)r);
		if (r == NX_ALLOC_STALE) {
			r = nx_sub_get(sip);
			if (r >= 0)
				r = nx_alloc(sip, pp, home_full, (__u32)r);
		}
		if (r == NX_ALLOC_HOME) {
			/* the subscriber owns its home block now: the walk claims there (nx_alloc
			 * counted the new mapping against the rate limit). Here, not in
			 * nx_dyn_table: the walk's frame is not then on top of that one's */
			r = nx_home_map(sip, pp, 2);
			if (r >= 0 && (r & NX_HW_NONE))
				r = -NX_DROP_QUOTA_EXCEEDED;
		} else {
			r = nx_dyn_table(sip, pp, r);
		}
	}
	nx_tab_lock_drop(lock);
	return r;
}

/* The mapping of inside endpoint mk for a packet that may open a connection (create), or
 * that may only use one. Deterministic mode: found, or claimed when create is set
 * (nx_det.h). Dynamic mode: found lock-free, or found or created under the endpoint's lock
 * when create is set (nx_dyn_map). *created: whether a session of this packet's must count
 * itself on it when the session exists already (deterministic mode: always). Returns the
 * mapping, or 0 with *reason set. */
static __always_inline struct nx_map *nx_map_get(struct nx_config *cfg, struct nx_map_key *mk,
						 int create, __u32 now, int *created, int *reason,
						 const int det)
{
	__u32 pp = NX_PP(nx_proto_idx(mk->proto), bpf_ntohs(mk->in_port));
	struct nx_map *m;
	long r;

	if (det) {
		r = nx_det_map(mk->in_ip, pp, create);
		*created = 1;
	} else if (create) {
		r = nx_dyn_map(mk->in_ip, pp);
		*created = r >= 0 && (r & NX_HW_NEW);
	} else {
		r = nx_home_map(mk->in_ip, pp, 0);
		*created = 0;
	}
	if (r >= 0 && (r & NX_HW_NONE))
		r = -NX_DROP_NO_MAPPING;
	if (r < 0) {
		*reason = r == -NX_DROP_NO_MAPPING && mk->proto == IPPROTO_TCP ? NX_DROP_TCP_NO_SYN
									       : (int)-r;
		return 0;
	}
	m = det ? nx_det_cur() : nx_home_result(r);
	if (!m)
		*reason = NX_DROP_INTERNAL;
	return m;
}

/* ---- one direction each ---- */

/* Whether an inbound packet may open a session: for TCP only a clean SYN (RFC 5382: an
 * unsolicited RST, SYN+RST or bare segment opens nothing). */
static __always_inline int nx_tcp_opens(struct nx_pkt *p)
{
	return p->proto != IPPROTO_TCP ||
	       (p->tcp_flags & (NX_TCPF_SYN | NX_TCPF_RST)) == NX_TCPF_SYN;
}

/* Address-dependent filtering (RFC 4787 REQ-8): remember that this inside endpoint sent to
 * this remote address, whatever the port, for as long as its longest session to it lives.
 * The record is a session entry with remote port 0 and NX_SF_PERMIT: no port 0 session can
 * exist for TCP or UDP, and it does not hold the mapping. */
static __always_inline void nx_permit_address(struct nx_sess_key *sk, __u32 expire)
{
	struct nx_sess_key pk = *sk;
	struct nx_sess *ps;

	pk.rem_port = 0;
	ps = nx_sess_lookup(&pk);
	if (ps) {
		if ((__s32)(expire - ps->expire) > 0)
			ps->expire = expire;
		return;
	}
	nx_sess_insert(nx_sess_k0(&pk) | (__u64)NX_SF_PERMIT << 48, nx_sess_k1(&pk),
		       (__u64)expire << 32, 0);
}

/* Whether filtering lets an inbound packet without a session of its own in. */
static __always_inline int nx_filter_allows(struct nx_config *cfg, struct nx_map *m,
					    struct nx_sess_key *sk)
{
	struct nx_sess_key pk;

	if (cfg->filtering == NX_FILTER_EIF || (m->flags & NX_MF_STATIC))
		return 1; /* a static forward is open to anyone, whatever the mode */
	if (cfg->filtering != NX_FILTER_ADF || sk->proto == IPPROTO_ICMP)
		return 0;
	pk = *sk;
	pk.rem_port = 0;
	return nx_sess_lookup(&pk) != 0;
}

/* Inside -> outside: find or create the mapping and session, rewrite the source. no_sess:
 * the fast path looked the session up a moment ago and found none (not again here: a
 * session another CPU made meanwhile is found by the insert, nx_sess_create). Returns
 * NX_OK, or minus a drop reason. */
static __always_inline int nx_xlate_out(struct nx_config *cfg, struct nx_pkt *p, __u32 now,
					int no_sess, const int det)
{
	struct nx_scratch *scr = nx_scratch_get();
	struct nx_map_key *mk;
	struct nx_sess_key *sk;
	struct nx_map *m = 0;
	struct nx_sess *s;
	int created = 0;
	int reason = NX_DROP_NO_MAPPING;

	if (!scr)
		return -NX_DROP_INTERNAL;
	mk = &scr->xmk;
	sk = &scr->xsk;
	__builtin_memset(mk, 0, sizeof(*mk));
	__builtin_memset(sk, 0, sizeof(*sk));

	sk->in_ip = p->ip->saddr;
	sk->rem_ip = p->ip->daddr;
	sk->in_port = *p->sport;
	sk->rem_port = p->dport ? *p->dport : 0;
	sk->proto = p->proto;
	/* An established flow: its session holds the outside endpoint, one lookup. */
	s = no_sess ? 0 : nx_sess_lookup_fast(cfg, sk);
	if (s && !(s->flags & NX_SF_PERMIT) && s->out_ip) {
		nx_sess_touch(cfg, s, p->proto, p->tcp_flags, NX_DIR_OUT, now);
		goto translate;
	}
	/* TCP or UDP to port 0 (reserved, RFC 6335) has the key of an address-dependent
	 * filtering record: it must neither pass as that record's flow nor count on a
	 * mapping through it */
	if (s && (s->flags & NX_SF_PERMIT))
		return -NX_DROP_MALFORMED_L4;
	/* a connection may be opening: start fetching what the walk will read (the limit's
	 * check below reads the first of those lines too), unless the fast path did when its
	 * lookup missed */
	if (!no_sess && nx_may_create(p))
		nx_home_prefetch(cfg, sk->in_ip, nx_proto_idx(p->proto), bpf_ntohs(sk->in_port));
	/* no session: only a subscriber's packet goes on to make state, and only within its
	 * share (nx_limits.h) */
	if (!s) {
		int r = nx_may_open(sk->in_ip, nx_may_create(p));

		if (r < 0)
			return r;
	}
	mk->in_ip = sk->in_ip;
	mk->in_port = sk->in_port;
	mk->proto = p->proto;
	m = nx_map_get(cfg, mk, nx_may_create(p), now, &created, &reason, det);
	if (!m)
		return -reason;
	if (s) {
		/* a session outliving its reaped mapping now belongs to the new one */
		if (created && nx_map_ref(m) < 0)
			return -NX_DROP_MAP_DYING;
		s->out_ip = m->out_ip;
		s->out_port = m->out_port;
		nx_sess_touch(cfg, s, p->proto, p->tcp_flags, NX_DIR_OUT, now);
	} else {
		s = nx_sess_create(cfg, sk, m, p->tcp_flags, NX_DIR_OUT, now, &reason);
		/* A deterministic word claimed for a session that could not be made keeps a
		 * session count of 0: the daemon puts it on hold-down (src/expiry.rs). */
		if (!s)
			return -reason;
	}
translate:
	if (cfg->filtering == NX_FILTER_ADF && p->proto != IPPROTO_ICMP)
		nx_permit_address(sk, s->expire);
	nx_rewrite(p, NX_DIR_OUT, s->out_ip, s->out_port);
	nx_count(NX_STAT_XLATE_OUT);
	return NX_OK;
}

/* Outside -> inside, for a destination that is a pool address (pool index addr_idx):
 * the outside port array names the inside endpoint, the mapping confirms it, the filter
 * decides, the session is found or created. The packet is not rewritten yet: *in_ip and
 * *in_port say what to rewrite to. Returns NX_OK, or minus a drop reason. */
static __always_inline int nx_xlate_in_lookup(struct nx_config *cfg, struct nx_pkt *p,
					      __u32 addr_idx, __u32 now, __u32 *in_ip,
					      __u16 *in_port)
{
	__be16 *port = nx_in_port_ptr(p);
	struct nx_map_key mk;
	struct nx_sess_key sk = {};
	__be16 out_port;
	struct nx_map *m;
	struct nx_sess *s;
	int reason, st;

	if (!port)
		return -NX_DROP_INTERNAL;
	out_port = *port;
	st = nx_port_owner(addr_idx, p->proto, out_port, &mk);
	if (!st)
		return -NX_DROP_NO_MAPPING;
	sk.in_ip = mk.in_ip;
	sk.rem_ip = p->ip->saddr;
	sk.in_port = mk.in_port;
	sk.rem_port = p->proto == IPPROTO_ICMP ? 0 : *p->sport;
	sk.proto = p->proto;
	s = nx_sess_lookup_fast(cfg, &sk);
	/* An established flow: the session, agreeing with the port word, is enough. */
	if (s && !(s->flags & NX_SF_PERMIT) && s->out_port == out_port &&
	    s->out_ip == p->ip->daddr) {
		nx_sess_touch(cfg, s, p->proto, p->tcp_flags, NX_DIR_IN, now);
	} else {
		/* the port word and the mapping must agree; a stale word never translates */
		m = nx_word_mapping(cfg, st, &mk, addr_idx, out_port);
		if (!m || m->out_port != out_port || m->out_ip != p->ip->daddr)
			return -NX_DROP_NO_MAPPING;
		/* Unsolicited: endpoint-independent filtering (or a static forward) opens a
		 * session; otherwise dropped without a word back (RFC 5382 REQ-4: never a RST,
		 * and nothing at all for an unsolicited SYN). */
		if (!nx_filter_allows(cfg, m, &sk))
			return -NX_DROP_FILTERED;
		s = nx_sess_create(cfg, &sk, m, p->tcp_flags, NX_DIR_IN, now, &reason);
		if (!s)
			return -reason;
	}
	*in_ip = mk.in_ip;
	*in_port = mk.in_port;
	return NX_OK;
}

/* Outside -> inside, lookup and rewrite (nx_xlate_in_lookup). NX_OK or minus a drop reason. */
static __always_inline int nx_xlate_in(struct nx_config *cfg, struct nx_pkt *p, __u32 addr_idx,
				       __u32 now)
{
	__u32 in_ip = 0;
	__u16 in_port = 0;
	int rc = nx_xlate_in_lookup(cfg, p, addr_idx, now, &in_ip, &in_port);

	if (rc < 0)
		return rc;
	nx_rewrite(p, NX_DIR_IN, in_ip, in_port);
	nx_count(NX_STAT_XLATE_IN);
	return NX_OK;
}

/* The ICMP messages translated as queries: echo request and reply. */
static __always_inline int nx_icmp_is_query(struct nx_pkt *p)
{
	__u8 type = ((struct icmphdr *)p->l4)->type;

	return type == ICMP_ECHO || type == ICMP_ECHOREPLY;
}

/* ---- verdicts both paths give ---- */

/* The drop reasons that mean "no mapping or session could be made for you": the
 * subscriber is told with ICMP destination unreachable (RFC 6888 REQ-8: host unreachable,
 * or RFC 5508 REQ-8: administratively prohibited, per nat.unreachable_code; RFC 6888
 * REQ-11), rate-limited; nothing existing is touched. The packet is counted under its
 * reason either way; the error it became, as sent (icmp_sent) or not (redirect_failed).
 * Global: verified once. */
__noinline nx_verdict nx_refuse(struct xdp_md *ctx, __u32 reason)
{
	struct nx_config *cfg = nx_config();
	struct nx_iface *ifc;
	__u32 ifindex;

	if (!ctx || !cfg)
		return nx_drop(NX_DROP_INTERNAL);
	ifindex = ctx->ingress_ifindex;
	if (reason != NX_DROP_QUOTA_EXCEEDED && reason != NX_DROP_POOL_EXHAUSTED &&
	    reason != NX_DROP_RATE_LIMITED && reason != NX_DROP_TABLE_FULL &&
	    reason != NX_DROP_SESSION_QUOTA && reason != NX_DROP_LOG_FULL)
		return nx_drop(reason);
	if (cfg->flags & NX_CF_LOG) {
		/* what ran out, for the NAT log: the subscriber is the packet's source */
		void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
		struct iphdr *ip = data + sizeof(struct ethhdr);

		if ((void *)(ip + 1) <= end)
			nx_log_refusal(ip->saddr, reason, ip->protocol);
	}
	ifc = bpf_map_lookup_elem(&nx_ifaces, &ifindex);
	if (!ifc)
		return nx_drop(reason);
	return nx_icmp_send(ctx, NX_ICMP_TC(ICMP_DEST_UNREACH, cfg->unreach_code & 0xff), 0,
			    ifc->addr, reason);
}

/* A parser's answer other than NX_PARSE_OK. */
static __always_inline nx_verdict nx_parse_verdict(int rc)
{
	switch (rc) {
	case NX_PARSE_BAD_ETH:
		return nx_drop(NX_DROP_MALFORMED_ETH);
	case NX_PARSE_BAD_IP:
		return nx_drop(NX_DROP_MALFORMED_IP);
	case NX_PARSE_BAD_L4:
		return nx_drop(NX_DROP_MALFORMED_L4);
	case NX_PARSE_FRAGMENT:
		return nx_drop(NX_DROP_FRAGMENT);
	case NX_PARSE_OTHER_PROTO:
		return nx_drop(NX_DROP_UNSUPPORTED_PROTO);
	default:
		return nx_pass(NX_STAT_PASS_NOT_IP);
	}
}

/* After an outbound translation: out through the FIB's interface, or to the kernel when it
 * must fragment the packet or resolve the neighbour. */
static __always_inline nx_verdict nx_out_finish(struct nx_pkt *p, struct bpf_fib_lookup *fib,
						int fib_rc, int too_big)
{
	if (too_big)
		return nx_pass(NX_STAT_PASS_TOO_BIG);
	if (fib_rc == BPF_FIB_LKUP_RET_SUCCESS)
		return nx_redirect(p, fib);
	return nx_pass(NX_STAT_PASS_NO_NEIGH);
}

/* Inbound, the inside endpoint found: route on its address before rewriting (a packet too
 * big for the inside link with DF must be answered quoting it as the sender sent it, RFC
 * 4787 REQ-13). The FIB's answer; fib holds its results. */
static __always_inline int nx_fib_inside(struct xdp_md *ctx, struct iphdr *ip,
					 struct bpf_fib_lookup *fib, __u32 in_ip)
{
	nx_fib_params(ctx, ip, fib);
	fib->ipv4_dst = in_ip;
	return nx_fib_lookup(ctx, fib);
}

/* Then: the destination becomes the inside endpoint, and the packet is forwarded (rc, the
 * FIB's answer, says how) or handed to the kernel translated. */
static __always_inline nx_verdict nx_in_finish(struct nx_pkt *p, struct bpf_fib_lookup *fib, int rc,
					       __u32 in_ip, __u16 in_port)
{
	nx_rewrite(p, NX_DIR_IN, in_ip, in_port);
	nx_count(NX_STAT_XLATE_IN);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		return nx_redirect(p, fib);
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return nx_pass(NX_STAT_PASS_NO_NEIGH);
	default:
		/* translated already: the kernel fragments (DF clear), or answers for the route */
		return nx_pass(NX_STAT_PASS_FIB_OTHER);
	}
}

/* The transport header, parsed (both paths: the slow path's pointers do not survive the
 * tail call). NX_GO_ON with *icmp_err set for an ICMP error (translated as one, not as a
 * query), or the verdict: malformed, or an ICMP type natrix neither translates nor
 * forwards. */
static __always_inline nx_verdict nx_parse_transport(struct nx_pkt *p, int *icmp_err)
{
	int rc = nx_parse_l4(p);

	*icmp_err = 0;
	if (rc != NX_PARSE_OK)
		return nx_parse_verdict(rc);
	if (p->proto != IPPROTO_ICMP || nx_icmp_is_query(p))
		return NX_GO_ON;
	if (!nx_icmp_is_error(((struct icmphdr *)p->l4)->type))
		return nx_drop(NX_DROP_UNSUPPORTED_ICMP);
	*icmp_err = 1;
	return NX_GO_ON;
}

#endif /* NX_NAT_H */
