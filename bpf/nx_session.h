/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Mappings (the BIB), sessions and TCP state.
 *
 * Who writes what: the fast path creates mappings and sessions (nx_tab.h inserts, so two
 * CPUs creating the same entry end with one entry), refreshes sessions and moves TCP
 * state. Only the reaper (the control program nx_ctl, run by the daemon) deletes. A mapping lives
 * while it has sessions (nsess, atomic); a mapping that never got one expires on its own timer.
 */
#ifndef NX_SESSION_H
#define NX_SESSION_H

#include "nx_alloc.h"
#include "nx_common.h"
#include "nx_det.h"
#include "nx_home.h"
#include "nx_limits.h"
#include "nx_state.h"
#include "nx_parse.h"
#include "nx_stats.h"
#include "nx_tab.h"

/* Refresh a session's timer only when it moves by more than this (ticks, ~1 s): a busy
 * flow writes its session about once a second, not once a packet, and the cache line stays
 * shared. Never more than an eighth of the timeout, so short timeouts stay accurate. */
#define NX_REFRESH_SLACK 64

static __always_inline __u32 nx_refresh_slack(__u32 timeout)
{
	__u32 s = timeout >> 3;

	return s < NX_REFRESH_SLACK ? s : NX_REFRESH_SLACK;
}

enum nx_dir {
	NX_DIR_OUT = 0,
	NX_DIR_IN = 1,
};

/* TCP state machine (RFC 6146 3.5.2, RFC 7857 2.1): SYNs from both sides establish,
 * whatever their order (simultaneous open included); FINs from both sides close; RST
 * moves to the transitory timeout instead of deleting. */
static __always_inline __u8 nx_tcp_next(__u8 st, __u8 flags, int dir)
{
	if (flags & NX_TCPF_RST)
		return NX_TCP_RST;
	if (flags & NX_TCPF_SYN) {
		if ((dir == NX_DIR_OUT && st == NX_TCP_SYN_IN) ||
		    (dir == NX_DIR_IN && st == NX_TCP_SYN_OUT))
			return NX_TCP_EST;
		if (st == NX_TCP_EST)
			return st; /* retransmitted SYN-ACK */
		if (st == NX_TCP_NONE || st == NX_TCP_RST || st >= NX_TCP_FIN_OUT)
			return dir == NX_DIR_OUT ? NX_TCP_SYN_OUT : NX_TCP_SYN_IN;
		return st;
	}
	if (flags & NX_TCPF_FIN) {
		if (st == NX_TCP_EST)
			return dir == NX_DIR_OUT ? NX_TCP_FIN_OUT : NX_TCP_FIN_IN;
		if ((dir == NX_DIR_OUT && st == NX_TCP_FIN_IN) ||
		    (dir == NX_DIR_IN && st == NX_TCP_FIN_OUT))
			return NX_TCP_FIN_BOTH;
		return st;
	}
	if (st == NX_TCP_RST)
		return NX_TCP_EST; /* traffic after a RST: the connection lives on */
	return st;
}

static __always_inline __u32 nx_timeout(struct nx_config *cfg, __u8 proto, __u8 st)
{
	if (proto == IPPROTO_TCP)
		return st == NX_TCP_EST ? cfg->to_tcp_est : cfg->to_tcp_trans;
	if (proto == IPPROTO_UDP)
		return cfg->to_udp;
	return cfg->to_icmp;
}

/* Update state and timer of an existing session. Outbound packets always refresh
 * (RFC 4787 REQ-6); inbound packets refresh TCP only (its idle timer counts both ways). */
static __always_inline void nx_sess_touch(struct nx_config *cfg, struct nx_sess *s, __u8 proto,
					  __u8 tcp_flags, int dir, __u32 now)
{
	__u8 st = s->state;
	__u8 nst = st;
	__u32 exp, to;

	if (proto == IPPROTO_TCP)
		nst = nx_tcp_next(st, tcp_flags, dir);
	if (dir == NX_DIR_IN && proto != IPPROTO_TCP)
		return;
	to = nx_timeout(cfg, proto, nst);
	exp = now + to;
	if (nst != st)
		s->state = nst;
	if (nst != st || (__s32)(exp - s->expire) > nx_refresh_slack(to))
		s->expire = exp;
}

/* Count one more session on mapping m, unless the reaper is deleting it (-1); -2: it
 * counts as many sessions as it can (a deterministic mapping's word). */
static __always_inline int nx_map_ref(struct nx_map *m)
{
	if (m->flags & NX_MF_DET)
		return nx_port_ref(m->pad, nx_det_key(m));
#pragma unroll
	for (int t = 0; t < 4; t++) {
		__u32 old = *(volatile __u32 *)&m->nsess;

		if (old == NX_NSESS_DYING)
			return -1;
		if (__sync_val_compare_and_swap(&m->nsess, old, old + 1) == old)
			return 0;
	}
	return -1;
}

/* Create a session for a mapping that exists. Returns the session, or 0 with *reason set
 * (table full, mapping dying, or an inbound TCP segment that may open nothing). A session
 * that appeared meanwhile on another CPU is returned as is: the insert that lost does not
 * count against nsess. */
static __always_inline struct nx_sess *nx_sess_create(struct nx_config *cfg, struct nx_sess_key *k,
						      struct nx_map *m, __u8 tcp_flags, int dir,
						      __u32 now, int *reason)
{
	__u8 state = NX_TCP_NONE, flags;
	__u64 k0 = nx_sess_k0(k), k1 = nx_sess_k1(k);
	int counted;
	__s64 r;

	*reason = NX_DROP_FILTERED;
	if (k->proto == IPPROTO_TCP) {
		/* inbound, only a clean SYN opens anything (not a RST, not SYN+RST) */
		if (dir == NX_DIR_IN && (tcp_flags & (NX_TCPF_SYN | NX_TCPF_RST)) != NX_TCPF_SYN)
			return 0;
		state = nx_tcp_next(NX_TCP_NONE, tcp_flags, dir);
		if (state == NX_TCP_NONE) {
			/* outbound, with its mapping there: a connection whose session was reaped
			 * a moment ago, picked up */
			if (dir == NX_DIR_IN)
				return 0;
			state = NX_TCP_EST;
		}
	}
	flags = dir == NX_DIR_IN ? NX_SF_INBOUND : 0;
	/* the subscriber's share of the table (nx_limits.h), taken before the insert and
	 * given back unless it made a new session */
	counted = nx_sess_take(k->in_ip, m->nsess);
	if (counted < 0) {
		*reason = -counted;
		return 0;
	}
	if (counted == NX_SESS_HOME)
		flags |= NX_SF_HOMECNT;
	r = nx_sess_insert(k0 | (__u64)state << 40 | (__u64)flags << 48, k1,
			   (__u64)m->out_ip | (__u64)(now + nx_timeout(cfg, k->proto, state)) << 32,
			   m->out_port);
	if (r < 0 || !(r & NX_TAB_NEW)) {
		if (counted != NX_SESS_UNCOUNTED)
			nx_sess_put(k->in_ip, counted == NX_SESS_HOME);
	}
	if (r < 0) {
		*reason = (int)-r;
		return 0;
	}
	if (r & NX_TAB_NEW) {
		int ref = nx_map_ref(m);

		if (ref < 0) {
			/* the reaper is deleting the mapping: this session must not outlive it */
			nx_sess_delete((__u32)r, k0, k1);
			if (counted != NX_SESS_UNCOUNTED)
				nx_sess_put(k->in_ip, counted == NX_SESS_HOME);
			*reason = ref == -2 ? NX_DROP_QUOTA_EXCEEDED : NX_DROP_MAP_DYING;
			return 0;
		}
		nx_count(NX_STAT_SESS_CREATED);
		if (cfg->flags & NX_CF_LOG_SESSIONS)
			nx_log_sess(k->in_ip, m->out_ip, k->rem_ip,
				    NX_LOG_SESS_ARG(NX_LOG_SESS_CREATE, k->proto, bpf_ntohs(k->in_port),
						    bpf_ntohs(m->out_port), bpf_ntohs(k->rem_port)));
	}
	*reason = NX_DROP_INTERNAL;
	return nx_sess_at((__u32)r);
}

/* The mapping whose port word, in state st (nx_port_owner), names inside endpoint mk at
 * outside port out_port (network order) of pool index addr_idx: the word itself where it
 * is the mapping (nx_word_is_map), else the table's entry. Not yet checked against the
 * outside endpoint. */
static __always_inline struct nx_map *nx_word_mapping(struct nx_config *cfg, int st,
						      struct nx_map_key *mk, __u32 addr_idx,
						      __be16 out_port)
{
	if (st == NX_PORT_USED && nx_word_is_map(cfg, mk->in_ip, addr_idx, bpf_ntohs(out_port)))
		return nx_det_view(mk, addr_idx, out_port);
	return nx_map_lookup(mk);
}

/* The mapping behind an outside endpoint (pool index, protocol, outside address and port
 * in network order): the port word names the inside endpoint, the mapping must exist and
 * agree, so a stale word never translates. Fills *mk; returns the mapping or 0. */
static __always_inline struct nx_map *nx_outside_mapping(__u32 addr_idx, __u8 proto, __u32 out_ip,
							 __be16 out_port, struct nx_map_key *mk)
{
	struct nx_config *cfg = nx_config();
	struct nx_map *m;
	int st;

	if (!cfg)
		return 0;
	st = nx_port_owner(addr_idx, proto, out_port, mk);
	if (!st)
		return 0;
	m = nx_word_mapping(cfg, st, mk, addr_idx, out_port);
	if (!m || m->out_port != out_port || m->out_ip != out_ip)
		return 0;
	return m;
}

#endif /* NX_SESSION_H */
