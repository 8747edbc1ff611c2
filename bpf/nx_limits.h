/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Who may make state, and how much: the subscriber prefixes (nat.subscribers) and the
 * per-subscriber session limit (limits.max_sessions_per_subscriber, RFC 6888 REQ-3/4).
 *
 * Only a source inside the subscriber prefixes makes a mapping, a session or a subscriber
 * entry, or is forwarded by natrix at all: anything else is dropped as not_subscriber
 * before the first table is written. The check costs an established packet nothing (its
 * session was found first); a packet that may make state pays a few compares.
 *
 * A subscriber's sessions (all protocols, whoever opened them; address-dependent
 * filtering's permit records are not sessions) are counted where the subscriber already
 * has a place: its nx_sub entry in dynamic mode, its slot of nx_det_nsess (by subscriber
 * index) in deterministic mode. The count goes up by fetch-and-add before a session is
 * inserted (the limit checked on the value it returns, so two CPUs cannot both take the
 * last one; given back when no new session resulted) and down when the reaper deletes
 * the session. At the limit a new session is
 * refused; nothing existing is evicted. A static forward's inside host that holds no
 * block has no entry: its mapping's session count is bounded by the same limit instead.
 */
#ifndef NX_LIMITS_H
#define NX_LIMITS_H

#include "nx_common.h"
#include "nx_maps.h"
#include "nx_subs.h"

/* Whether ip (network order) is a subscriber natrix translates. */
static __always_inline int nx_is_subscriber_(struct nx_config *cfg, __u32 ip)
{
	if (cfg->det_count)
		return bpf_ntohl(ip) - cfg->det_base < cfg->det_count;
	if (cfg->flags & NX_CF_SUBNET_TRIE) {
		struct nx_lpm_key k = {.prefixlen = 32, .addr = ip};

		return bpf_map_lookup_elem(&nx_subnets, &k) != 0;
	}
#pragma unroll
	for (__u32 i = 0; i < NX_SUBNETS; i++) {
		if (i >= cfg->n_subnets)
			break;
		if ((ip & cfg->subnets[i].mask) == cfg->subnets[i].net)
			return 1;
	}
	return 0;
}

/* Global: verified once, off the packet programs' budget (called only by packets that
 * found no session). */
__noinline int nx_is_subscriber(__u32 ip)
{
	struct nx_config *cfg = nx_config();

	return cfg && nx_is_subscriber_(cfg, ip);
}

/* The session count of inside address ip's subscriber, or 0 when it has none (a static
 * forward's host holding no block). */
static __always_inline __u32 *nx_sub_nsess(struct nx_config *cfg, __u32 ip)
{
	struct nx_sub *e;
	__u32 i;

	if (cfg->det_count) {
		i = bpf_ntohl(ip) - cfg->det_base;
		if (i >= cfg->det_count)
			return 0;
		return bpf_map_lookup_elem(&nx_det_nsess, &i);
	}
	/* the probe inline (not the global nx_sub_find): the callers are global functions
	 * called from deep in the packet path, whose combined stack must stay in 512 bytes */
	e = nx_sub_at(nx_sub_find_(ip, 0));
	return e ? &e->nsess : 0;
}

/* A packet with no session from inside address ip, about to look for (create: or make) a
 * mapping: 0 when it may go on, else the drop reason: not_subscriber for a source outside
 * the prefixes, session_quota when it would open a session its subscriber has no room for
 * (checked here, before a mapping is made for nothing; nx_sess_take decides exactly).
 * Global. */
__noinline int nx_may_open(__u32 ip, int create)
{
	struct nx_config *cfg = nx_config();
	__u32 *cnt;

	if (!cfg)
		return NX_DROP_INTERNAL;
	if (!nx_is_subscriber_(cfg, ip))
		return NX_DROP_NOT_SUBSCRIBER;
	if (!create || !cfg->sess_per_sub)
		return 0;
	cnt = nx_sub_nsess(cfg, ip);
	return cnt && *(volatile __u32 *)cnt >= cfg->sess_per_sub ? NX_DROP_SESSION_QUOTA : 0;
}

/* A session about to be inserted for inside address ip counts itself on its subscriber
 * (fetch-and-add: two CPUs cannot both take the last one). map_nsess: its mapping's
 * session count, the bound for a host that has no count of its own. Returns
 * NX_SESS_COUNTED (the caller gives it back with nx_sess_put if no new session results),
 * NX_SESS_UNCOUNTED, or -NX_DROP_SESSION_QUOTA at the limit (nothing changed). Global. */
#define NX_SESS_UNCOUNTED 0
#define NX_SESS_COUNTED 1
__noinline int nx_sess_take(__u32 ip, __u32 map_nsess)
{
	struct nx_config *cfg = nx_config();
	__u32 *cnt, max;

	if (!cfg)
		return NX_SESS_UNCOUNTED;
	max = cfg->sess_per_sub;
	cnt = nx_sub_nsess(cfg, ip);
	if (!cnt)
		return max && map_nsess >= max ? -NX_DROP_SESSION_QUOTA : NX_SESS_UNCOUNTED;
	if (max && *(volatile __u32 *)cnt >= max)
		return -NX_DROP_SESSION_QUOTA; /* a flood at the limit writes nothing */
	if (__sync_fetch_and_add(cnt, 1) >= max && max) {
		__sync_fetch_and_sub(cnt, 1);
		return -NX_DROP_SESSION_QUOTA;
	}
	return NX_SESS_COUNTED;
}

/* One session of inside address ip's subscriber fewer (the reaper deleted it, or its
 * insert was undone). Never below 0: a count lost with an entry is not taken from the
 * next tenant of the slot. Global. */
__noinline int nx_sess_put(__u32 ip)
{
	struct nx_config *cfg = nx_config();
	__u32 *cnt;

	if (!cfg)
		return 0;
	cnt = nx_sub_nsess(cfg, ip);
	if (!cnt)
		return 0;
	for (__u32 i = 0; i < 16; i++) {
		__u32 old = *(volatile __u32 *)cnt;

		if (!old || __sync_val_compare_and_swap(cnt, old, old - 1) == old)
			return 1;
	}
	return 0;
}

#endif /* NX_LIMITS_H */
