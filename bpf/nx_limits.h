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
 * has a place that a new connection reads anyway (docs/design/performance-notebook.md, R33):
 *   - deterministic mode: its slot of nx_det_nsess (by subscriber index);
 *   - dynamic mode, while it owns its home block and has no state outside it (the block
 *     word's MIXED bit clear): the NSESS field of that block word, which its home walk
 *     reads in any case (the session is flagged NX_SF_HOMECNT);
 *   - otherwise its nx_sub entry (a subscriber whose mappings are in the table reads it in
 *     any case); MIXED is set first, so that from then on every count reads both places.
 *     The block's field saturating at NX_BLOCK_NSESS_MASK sends the rest there too.
 * The count goes up by compare-and-swap or fetch-and-add before a session is inserted (the
 * limit checked on the value it replaces, so two CPUs cannot both take the last one; given
 * back when no new session resulted) and down when the reaper deletes the session, at the
 * place its flag names. A home block whose NSESS is not 0 is never released, so it keeps
 * its owner while it counts. At the limit a new session is refused; nothing existing is
 * evicted. A static forward's inside host that holds no block has no count: its mapping's
 * session count is bounded by the same limit instead.
 */
#ifndef NX_LIMITS_H
#define NX_LIMITS_H

#include "nx_alloc.h"
#include "nx_common.h"
#include "nx_state.h"
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

/* The session count of inside address ip's subscriber on its entry (deterministic mode:
 * its nx_det_nsess slot), or 0 when it has none (a static forward's host holding no
 * block). */
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
	return NX_FIELD_OR_NULL(e, nsess);
}

/* Dynamic mode: the word of inside address ip's home block (it may be another's, or free),
 * or 0 without home blocks. */
static __always_inline __u64 *nx_home_word(struct nx_config *cfg, __u32 ip)
{
	__s64 home;

	if (cfg->det_count || !cfg->home_probe)
		return 0;
	home = nx_home_block(cfg, ip);
	return home < 0 ? 0 : nx_block((__u32)home);
}

/* Sessions ip's home block word w counts for it: its NSESS while ip owns it. */
static __always_inline __u32 nx_home_nsess(__u64 w, __u32 ip)
{
	return NX_BLOCK_OWNER(w) == ip ? NX_BLOCK_NSESS(w) : 0;
}

/* Whether a session of ip's counts on its home block word w alone: ip owns the block, has
 * no state outside it, and the field has room. */
static __always_inline int nx_home_counts(__u64 w, __u32 ip)
{
	return NX_BLOCK_OWNER(w) == ip && !(w & NX_BLOCK_MIXED) &&
	       NX_BLOCK_NSESS(w) < NX_BLOCK_NSESS_MASK;
}

/* A packet with no session from inside address ip, about to look for (create: or make) a
 * mapping: NX_OK when it may go on, else minus the drop reason: not_subscriber for a source outside
 * the prefixes, session_quota when it would open a session its subscriber has no room for
 * (checked here, before a mapping is made for nothing; nx_sess_take decides exactly).
 * Dynamic mode reads the home block word (its walk reads it next) and, only for a
 * subscriber with state outside its home block, its entry. Global. */
__noinline int nx_may_open(__u32 ip, int create)
{
	struct nx_config *cfg = nx_config();
	__u64 *bw, w = 0;
	__u32 *cnt, n = 0;

	if (!cfg)
		return -NX_DROP_INTERNAL;
	if (!nx_is_subscriber_(cfg, ip))
		return -NX_DROP_NOT_SUBSCRIBER;
	if (!create || !cfg->sess_per_sub)
		return NX_OK;
	bw = nx_home_word(cfg, ip);
	if (bw) {
		w = *(volatile __u64 *)bw;
		n = nx_home_nsess(w, ip);
	}
	if (!bw || !nx_home_counts(w, ip)) {
		cnt = nx_sub_nsess(cfg, ip);
		if (cnt)
			n += *(volatile __u32 *)cnt;
	}
	return n >= cfg->sess_per_sub ? -NX_DROP_SESSION_QUOTA : NX_OK;
}

/* A session about to be inserted for inside address ip counts itself on its subscriber.
 * map_nsess: its mapping's session count, the bound for a host that has no count of its
 * own. Returns where it was counted: NX_SESS_HOME (the home block word; the session gets
 * NX_SF_HOMECNT) or NX_SESS_COUNTED (the entry), which the caller gives back with
 * nx_sess_put if no new session results; NX_SESS_UNCOUNTED; or -NX_DROP_SESSION_QUOTA at
 * the limit (nothing changed). Global. */
#define NX_SESS_UNCOUNTED 0
#define NX_SESS_COUNTED 1
#define NX_SESS_HOME 2
__noinline int nx_sess_take(__u32 ip, __u32 map_nsess)
{
	struct nx_config *cfg = nx_config();
	__u32 *cnt, max, home_n = 0;
	__u64 *bw, w = 0;

	if (!cfg)
		return NX_SESS_UNCOUNTED;
	max = cfg->sess_per_sub;
	bw = nx_home_word(cfg, ip);
	if (bw) {
#pragma unroll
		for (int t = 0; t < 4; t++) {
			w = *(volatile __u64 *)bw;
			if (!nx_home_counts(w, ip))
				break;
			if (max && NX_BLOCK_NSESS(w) >= max)
				return -NX_DROP_SESSION_QUOTA;
			if (__sync_val_compare_and_swap(bw, w, w + NX_BLOCK_NSESS_ONE) == w)
				return NX_SESS_HOME;
			nx_count(NX_STAT_ALLOC_RETRY);
		}
	}
	/* on the entry: the total is its count plus what the home block counts while the
	 * subscriber owns it */
	cnt = nx_sub_nsess(cfg, ip);
	if (!cnt)
		return max && map_nsess >= max ? -NX_DROP_SESSION_QUOTA : NX_SESS_UNCOUNTED;
	if (bw) {
		/* MIXED first: from then on the home path steps aside (it would not see this
		 * count), and the home block's count is final but for the reaper's decrements */
		if (nx_home_mix(bw, ip) < 0)
			return -NX_DROP_TABLE_BUSY;
		home_n = nx_home_nsess(*(volatile __u64 *)bw, ip);
	}
	if (max && *(volatile __u32 *)cnt + home_n >= max)
		return -NX_DROP_SESSION_QUOTA; /* a flood at the limit writes nothing */
	if (__sync_fetch_and_add(cnt, 1) + home_n >= max && max) {
		__sync_fetch_and_sub(cnt, 1);
		return -NX_DROP_SESSION_QUOTA;
	}
	return NX_SESS_COUNTED;
}

/* One session of inside address ip's subscriber fewer (the reaper deleted it, or its
 * insert was undone), at the place home names (NX_SF_HOMECNT: the home block word, which
 * kept its owner while it counted). Never below 0: a count lost with an entry is not taken
 * from the next tenant of the slot. Global. */
__noinline int nx_sess_put(__u32 ip, __u32 home)
{
	struct nx_config *cfg = nx_config();
	__u64 *bw;
	__u32 *cnt;

	if (!cfg)
		return 0;
	if (home) {
		bw = nx_home_word(cfg, ip);
		if (!bw)
			return 0;
		for (__u32 i = 0; i < 16; i++) {
			__u64 old = *(volatile __u64 *)bw;

			if (!NX_BLOCK_NSESS(old) ||
			    __sync_val_compare_and_swap(bw, old, old - NX_BLOCK_NSESS_ONE) == old)
				return 1;
			nx_count(NX_STAT_ALLOC_RETRY);
		}
		/* Lost to busy counting sixteen times: this session's count is on the word (it
		 * was taken there only while ip owned it, and a block counting sessions keeps
		 * its owner), so a plain atomic subtract is safe; giving up would leave the
		 * block counting a session that is gone, never to be released. */
		__sync_fetch_and_sub(bw, NX_BLOCK_NSESS_ONE);
		return 1;
	}
	cnt = nx_sub_nsess(cfg, ip);
	if (!cnt)
		return 0;
	for (__u32 i = 0; i < 16; i++) {
		__u32 old = *(volatile __u32 *)cnt;

		if (!old || __sync_val_compare_and_swap(cnt, old, old - 1) == old)
			return 1;
		nx_count(NX_STAT_ALLOC_RETRY);
	}
	return 0;
}

#endif /* NX_LIMITS_H */
