/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Dynamic mode's home walk: in its home block, a subscriber's port word is the mapping.
 *
 * Every subscriber has a home block, a function of its address alone (nx_alloc.h). While
 * subscriber S owns its home block (the block word names S), S's mappings in it are the
 * USED port words naming them, found from the endpoint by deterministic mode's walk over
 * the block instead of a range (nx_det.h: a keyed hash picks the first pair, at most
 * home_probe pairs along the endpoint's parity, then as many along the other; a FREE word
 * ends it). Such a word counts its mapping's sessions itself; there is no table entry.
 * A new connection of a subscriber whose mappings fit its home block touches its session's
 * line, the home block's word and its port word's line: neither the mapping table, nor the
 * subscriber's entry, nor a lock other than its endpoint's (docs/design/performance-notebook.md,
 * R29).
 *
 * Which kind a mapping is follows from where its port is: a USED word naming S in S's home
 * block is a walk mapping; every other mapping is in the table (nx_word_is_map). So:
 *   - the table allocator never claims in S's home block for S (nx_alloc.h passes it
 *     over, and hands it to the walk when it takes it), and a table mapping of S's is
 *     never there;
 *   - S's other mappings (when the walk finds no room, port-class ports, static forwards,
 *     mappings made while another subscriber held S's home block) are in the table. A
 *     walk that misses asks the table too when S may have any: the block word's MIXED bit,
 *     set before S makes a table mapping while it owns the block and when S takes the
 *     block while holding others, or a static forward configured. Port-class endpoints
 *     never walk (their mappings are always in the table).
 * Two CPUs opening connections from one endpoint end with one mapping of one kind: a packet
 * that may open one holds its endpoint's lock from the walk until a table mapping, if it
 * makes one, is inserted (nx_dyn_map). Lookups are lock-free.
 *
 * The daemon (src/expiry.rs) frees a HELD word of a block its home subscriber owns only
 * when no live walk passes it (linear probing's deletion rule, as in deterministic mode),
 * and puts a walk mapping that never got a session on hold-down after two sweeps. */
#ifndef NX_HOME_H
#define NX_HOME_H

#include "nx_alloc.h"
#include "nx_det.h"
#include "nx_state.h"
#include "nx_stats.h"
#include "nx_subs.h"
#include "nx_tab.h"

/* What nx_home_map and nx_dyn_map return, when not minus a drop reason:
 *   - a walk mapping: (pool index << 16) | outside port, the mapping seen as a struct
 *     nx_map in the scratch (nx_det_cur);
 *   - NX_HW_TAB | slot: the mapping table's entry in that slot;
 *   - NX_HW_NONE: no mapping, with NX_HW_OWNER when the subscriber owns its home block
 *     (so a walk found no room there).
 * NX_HW_NEW: the call created the mapping. */
#define NX_HW_NEW (1L << 32)
#define NX_HW_TAB (1L << 41)
#define NX_HW_NONE (1L << 42)
#define NX_HW_OWNER 1L

/* The endpoint's hash: where its walk starts, and its lock stripe. */
static __always_inline __u64 nx_home_hash(struct nx_config *cfg, __u32 sip, __u32 pp)
{
	return nx_tab_hash((__u64)sip << 32 | pp, NX_HOME_KEY, cfg->tab_seed);
}

/* Pairs of each parity a walk goes: home_probe, at most the block's pairs (0: no home
 * walk, every mapping in the table). */
static __always_inline __u32 nx_home_probe(struct nx_config *cfg)
{
	__u32 n = cfg->home_probe, half = cfg->block_size / 2;

	return n < half ? n : half;
}

/* Whether the USED port word at outside port port_h (host order) of pool index addr_idx,
 * naming inside address in_ip, is a mapping itself: in deterministic mode always, in
 * dynamic mode when it lies in in_ip's home block. */
static __always_inline int nx_word_is_map(struct nx_config *cfg, __u32 in_ip, __u32 addr_idx,
					  __u32 port_h)
{
	__u32 bs = cfg->block_size, a, j, lo;

	if (cfg->det_count)
		return 1;
	if (bs < 2 || !cfg->home_probe || nx_home_block_at(cfg, in_ip, &a, &j) < 0 || a != addr_idx)
		return 0;
	/* in the home block, whose ports are lo .. lo + bs - 1 */
	lo = cfg->port_lo + j * bs;
	return port_h >= lo && port_h - lo < bs;
}

/* Find (create = 0), or find or claim in the home block (create = 1, the endpoint's lock
 * held: nx_dyn_map; 2: the same, the new-mapping rate checked already), the mapping of inside
 * endpoint sip, pp = NX_PP(protocol index, inside port). Returns as described at NX_HW_NEW. Never
 * makes a table mapping. Global, scalar arguments: verified once. */
__noinline long nx_home_map(__u32 sip, __u32 pp, __u32 create)
{
	struct nx_config *cfg = nx_config();
	__u32 pidx = pp >> 16, gid, a = 0, j = 0, first = 0, slot, n;
	struct nx_map_key mk = {};
	struct nx_dwalk *d = nx_dwalk_get();
	__u64 *bw, b, w = 0;
	int claimed = 0;
	__s64 home;

	if (!cfg || !d || pidx >= NX_NPROTO)
		return -NX_DROP_INTERNAL;
	mk.in_ip = sip;
	mk.in_port = bpf_htons((__u16)pp);
	mk.proto = pidx == NX_P_TCP ? IPPROTO_TCP : pidx == NX_P_UDP ? IPPROTO_UDP : IPPROTO_ICMP;
	home = nx_home_block_at(cfg, sip, &a, &j);
	if (nx_low_class(cfg, pidx, pp & 0xffff) || home < 0 || cfg->block_size < 2 ||
	    !cfg->home_probe)
		goto table;
	gid = (__u32)home;
	bw = nx_block(gid);
	if (!bw)
		goto table;
	b = *(volatile __u64 *)bw;
	if (NX_BLOCK_OWNER(b) != sip)
		goto table;
	first = cfg->port_lo + j * cfg->block_size;
	d->base = nx_port_index(a, pidx, first);
	d->nports = cfg->block_size & ~1u;
	d->start = nx_walk_start(cfg, nx_home_hash(cfg, sip, pp), pp, first, d->nports / 2,
				 NX_DIV_BLOCK_PAIRS);
	d->key = nx_port_word(sip, (__u16)pp);
	d->probe = nx_home_probe(cfg);
	d->found = -1;
	d->avail = -1;
	d->hold = create ? cfg->hold_down_s : ~0u;
	n = 2 * d->probe;
	bpf_loop(n, nx_det_walk_cb, 0, 0);
	if (d->found >= 0)
		goto found;
	if ((b & NX_BLOCK_MIXED) || (cfg->flags & NX_CF_STATICS)) {
		slot = nx_maps_find(nx_map_k0(&mk));
		if (slot != NX_TAB_NONE)
			return NX_HW_TAB | slot;
	}
	if (!create)
		return NX_HW_NONE | NX_HW_OWNER;
	if (d->avail < 0)
		goto full;
	if (create == 1 && cfg->max_new_per_sec) {
		struct nx_sub *sub = nx_sub_lookup(cfg, sip);

		if (sub && !nx_rate_ok(cfg, sub))
			return -NX_DROP_RATE_LIMITED;
	}
	/* counted on the block before the port is claimed, so that the daemon never sees
	 * the block empty with a mapping in it; fails when the block is no longer ours */
	if (nx_block_reserve(gid, sip) < 0)
		goto table;
	claimed = nx_walk_claim(d, n, &w);
	/* a HELD word taken over was counted already */
	if (!claimed || w != 0)
		nx_block_unreserve(gid);
	if (!claimed) {
		if (d->found >= 0)
			goto found;
		goto full;
	}
	nx_count(NX_STAT_MAP_CREATED);
	d->found = d->avail;
found:
	if (nx_det_fill(sip, mk.in_port, pidx, a, first + (__u32)d->found) < 0)
		return -NX_DROP_INTERNAL;
	return (long)claimed << 32 | (long)a << 16 | (first + (__u32)d->found);
full:
	/* no room in the walk: the caller makes a table mapping, which the walks of this
	 * endpoint's later packets must find */
	if (nx_home_mix(bw, sip) < 0)
		return -NX_DROP_TABLE_BUSY;
	return NX_HW_NONE | NX_HW_OWNER;
table:
	slot = nx_maps_find(nx_map_k0(&mk));
	if (slot != NX_TAB_NONE)
		return NX_HW_TAB | slot;
	return NX_HW_NONE;
}

/* The mapping an nx_home_map or nx_dyn_map result names, or 0. */
static __always_inline struct nx_map *nx_home_result(long r)
{
	if (r < 0 || (r & NX_HW_NONE))
		return 0;
	if (r & NX_HW_TAB)
		return nx_map_at((__u32)r);
	return nx_det_cur();
}

/* The mapping of inside endpoint mk, lock-free, in either mode; 0 if none. A walk
 * mapping is valid until the next packet on this CPU (nx_det_fill). */
static __always_inline struct nx_map *nx_map_find(struct nx_config *cfg, struct nx_map_key *mk)
{
	__u32 pp = NX_PP(nx_proto_idx(mk->proto), bpf_ntohs(mk->in_port));
	long r;

	if (cfg->det_count) {
		r = nx_det_map(mk->in_ip, pp, 0);
		return r < 0 ? 0 : nx_det_cur();
	}
	return nx_home_result(nx_home_map(mk->in_ip, pp, 0));
}

/* The key in nx_tab_locks of the lock stripe of the inside endpoint whose home hash
 * (nx_home_hash) is h: dynamic mode makes an endpoint's mapping under it (nx_nat.h). */
static __always_inline __u32 nx_ep_lock_key(__u64 h)
{
	return NX_TAB_LOCKS + ((__u32)h & (NX_EP_LOCKS - 1));
}

/* Called as soon as the session lookup of an outbound packet that may open a connection
 * misses: plain loads, whose values nothing waits for, of the subscriber's home block word,
 * of the port word its walk starts at and of the endpoint's lock stripe. All follow from
 * the packet alone, so the CPU issues the misses now, beside the session line's, and finds
 * them (nearly) in the cache when the slow path needs them (docs/design/
 * performance-notebook.md, R18, R25, R29, R38). No effect on state. */
static __always_inline void nx_home_prefetch(struct nx_config *cfg, __u32 sip, __u32 pidx,
					     __u16 in_port_h)
{
	__u32 idx, first, bs = cfg->block_size, a, j, gid, pp, key, *l, u;
	__s64 home;
	__u64 *w, v, h;

	if (pidx >= NX_NPROTO || bs < 2 || cfg->det_count || !cfg->home_probe)
		return; /* no home walk: deterministic mode, or every mapping in the table */
	home = nx_home_block_at(cfg, sip, &a, &j);
	if (home < 0)
		return;
	gid = (__u32)home;
	w = nx_block(gid);
	if (w) {
		v = *(volatile __u64 *)w;
		asm volatile("" ::"r"(v));
	}
	first = cfg->port_lo + j * bs;
	pp = NX_PP(pidx, in_port_h);
	h = nx_home_hash(cfg, sip, pp);
	idx = nx_port_index(a, pidx, first) +
	      nx_walk_start(cfg, h, pp, first, bs / 2, NX_DIV_BLOCK_PAIRS);
	w = bpf_map_lookup_elem(&nx_ports, &idx);
	if (w) {
		v = *(volatile __u64 *)w;
		asm volatile("" ::"r"(v));
	}
	key = nx_ep_lock_key(h);
	l = bpf_map_lookup_elem(&nx_tab_locks, &key);
	if (l) {
		u = *(volatile __u32 *)l;
		asm volatile("" ::"r"(u));
	}
}

#endif /* NX_HOME_H */
