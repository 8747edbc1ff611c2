/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The subscriber table: inside address -> struct nx_sub, open addressing with linear
 * probing over an mmapable array of 192-byte entries (layout in nx_types.h).
 *
 * Why not a BPF hash map: a kernel hash lookup is a chain of dependent loads (bucket,
 * element) behind a jhash. The allocator reads it on the table path (a subscriber's mappings
 * outside its home block, nx_home.h), where one computed address away beats a chain of loads
 * (docs/design/ performance-notebook.md, R18 and R19). Here the home slot is a multiply-shift of a
 * hash of the address: one load reads the key and the hot line.
 *
 * Lookup: from the home slot on, compare key words; LIVE with the address is the entry,
 * EMPTY ends the search, BUSY and TOMB are passed. At most NX_SUB_PROBE slots (the array
 * has that many more than home slots, so no wrap-around). Lock-free.
 *
 * Insert (a new subscriber, rare): under the key's lock stripe (nx_tab_locks), look again,
 * check the count against the configured size (a full table refuses, never evicts), claim
 * the first EMPTY or TOMB slot with compare-and-swap (-> BUSY), fill it, publish it LIVE.
 *
 * Delete (the reaper, for the daemon): under the same lock stripe, check again that the
 * subscriber holds no block and no port-class port, then LIVE -> TOMB. Tombstones are never
 * turned back to EMPTY (a lock-free reader could then stop short of an entry inserted past
 * them); inserts reuse them, so live entries and tombstones together never exceed the
 * slots ever used, and the table is sized at twice max_subscribers: a present subscriber
 * is in its home slot about three times in four (at half load; 2068 of 8333 were not, a
 * few slots on at most), an absent one (a new subscriber) is known absent at the first
 * EMPTY slot, after NX_SUB_PROBE at worst (many tombstones: `natrix stats` counts them).
 */
#ifndef NX_SUBS_H
#define NX_SUBS_H

#include "nx_common.h"
#include "nx_state.h"
#include "nx_stats.h"
#include "nx_tab.h"

/* NX_SUB_PROBE (nx_types.h): slots an entry may live beyond its home slot.
 * NX_SUB_HASH_K1 (nx_types.h), the second hash word for subscriber keys: their lock stripes
 * and homes differ from what a mapping or session key of the same bits would get. */

static __always_inline __u64 nx_sub_hash(struct nx_config *cfg, __u32 sip)
{
	return nx_tab_hash(sip, NX_SUB_HASH_K1, cfg->tab_seed);
}

static __always_inline __u32 nx_sub_home(__u64 h, __u32 nslots)
{
	return (__u32)(((h >> 32) * nslots) >> 32);
}

static __always_inline struct nx_sub *nx_sub_at(__u32 i)
{
	return bpf_map_lookup_elem(&nx_subs, &i);
}

/* The slot holding subscriber sip (LIVE; with busy_too, BUSY also: a delete in progress),
 * or NX_TAB_NONE. */
static __always_inline __u32 nx_sub_find_(__u32 sip, int busy_too)
{
	struct nx_config *cfg = nx_config();
	__u64 want = NX_SUB_KEY(NX_SUB_LIVE, sip);
	__u32 home;

	if (!cfg || !cfg->sub_nslots)
		return NX_TAB_NONE;
	home = nx_sub_home(nx_sub_hash(cfg, sip), cfg->sub_nslots);
	for (__u32 i = 0; i < NX_SUB_PROBE; i++) {
		struct nx_sub *e = nx_sub_at(home + i);
		__u64 k;

		if (!e)
			return NX_TAB_NONE;
		k = *(volatile __u64 *)&e->key;
		if (k == want || (busy_too && k == NX_SUB_KEY(NX_SUB_BUSY, sip)))
			return home + i;
		if (NX_SUB_STATE(k) == NX_SUB_EMPTY)
			return NX_TAB_NONE;
	}
	return NX_TAB_NONE;
}

/* Global: verified once each. */
__noinline __u32 nx_sub_find(__u32 sip) { return nx_sub_find_(sip, 0); }

__noinline __u32 nx_sub_find_busy(__u32 sip) { return nx_sub_find_(sip, 1); }

/* The entry in subscriber sip's home slot, whoever holds it (NULL without a table). */
static __always_inline struct nx_sub *nx_sub_home_entry(struct nx_config *cfg, __u32 sip)
{
	if (!cfg->sub_nslots)
		return 0;
	return nx_sub_at(nx_sub_home(nx_sub_hash(cfg, sip), cfg->sub_nslots));
}

/* The subscriber entry of sip, or NULL: its home slot checked inline (where about three
 * entries in four live), the rest of the probe sequence through nx_sub_find. */
static __always_inline struct nx_sub *nx_sub_lookup(struct nx_config *cfg, __u32 sip)
{
	struct nx_sub *e = nx_sub_home_entry(cfg, sip);
	__u64 k;

	if (!e)
		return 0;
	k = *(volatile __u64 *)&e->key;
	if (k == NX_SUB_KEY(NX_SUB_LIVE, sip)) {
		nx_order_barrier();
		return e;
	}
	if (NX_SUB_STATE(k) == NX_SUB_EMPTY)
		return 0;
	return nx_sub_at(nx_sub_find(sip));
}

/* The same as nx_sub_lookup, as the slot (NX_TAB_NONE when sip has no entry). */
static __always_inline __u32 nx_sub_lookup_slot(struct nx_config *cfg, __u32 sip)
{
	__u32 home;
	struct nx_sub *e;
	__u64 k;

	if (!cfg->sub_nslots)
		return NX_TAB_NONE;
	home = nx_sub_home(nx_sub_hash(cfg, sip), cfg->sub_nslots);
	e = nx_sub_at(home);
	if (!e)
		return NX_TAB_NONE;
	k = *(volatile __u64 *)&e->key;
	if (k == NX_SUB_KEY(NX_SUB_LIVE, sip)) {
		nx_order_barrier();
		return home;
	}
	if (NX_SUB_STATE(k) == NX_SUB_EMPTY)
		return NX_TAB_NONE;
	return nx_sub_find(sip);
}

/* Create subscriber sip on pool address addr_idx holding block gid (global id, already
 * claimed for sip). Returns the slot, with NX_TAB_NEW set when this call created it (an
 * existing entry is returned as it is, and the caller gives its block back), or -reason.
 * Global: verified once. */
__noinline __s64 nx_sub_insert(__u32 sip, __u32 addr_idx, __u32 gid)
{
	struct nx_config *cfg = nx_config();
	__u32 ti = NX_TAB_SUBS, home, s = NX_TAB_NONE;
	__s64 rc = -NX_DROP_TABLE_FULL;
	struct nx_sub *e = 0;
	__u32 *lock, *cnt;
	__u64 h;

	if (!cfg || !cfg->sub_nslots)
		return -NX_DROP_INTERNAL;
	h = nx_sub_hash(cfg, sip);
	rc = nx_tab_enter(h, ti, &lock, &cnt);
	if (rc < 0)
		return rc;
	rc = -NX_DROP_TABLE_FULL;
	s = nx_sub_find(sip);
	if (s != NX_TAB_NONE) {
		rc = s;
		goto out;
	}
	if (__sync_fetch_and_add(cnt, 1) >= cfg->sub_max) {
		__sync_fetch_and_sub(cnt, 1);
		goto out;
	}
	home = nx_sub_home(h, cfg->sub_nslots);
	for (__u32 i = 0; i < NX_SUB_PROBE; i++) {
		__u64 k;

		e = nx_sub_at(home + i);
		if (!e)
			break;
		k = *(volatile __u64 *)&e->key;
		/* a slot another subscriber's insert takes first (other stripes) is passed */
		if ((NX_SUB_STATE(k) == NX_SUB_EMPTY || NX_SUB_STATE(k) == NX_SUB_TOMB) &&
		    __sync_val_compare_and_swap(&e->key, k, NX_SUB_KEY(NX_SUB_BUSY, sip)) == k) {
			s = home + i;
			break;
		}
		e = 0;
	}
	if (!e) {
		__sync_fetch_and_sub(cnt, 1);
		goto out;
	}
	/* a reused slot still holds its last tenant's fields */
	for (__u32 j = 0; j < NX_MAX_BLOCKS_PER_SUB; j++)
		e->blocks[j] = 0;
	e->blocks[0] = gid + 1;
	e->cur_block = gid + 1;
	e->addr_idx = addr_idx;
	e->flags = 0;
	e->low_used = 0;
	e->nsess = 0;
	e->rate_tokens = cfg->max_new_per_sec;
	e->rate_ts = bpf_ktime_get_coarse_ns();
	for (__u32 j = 0; j < NX_NPROTO; j++)
		e->next_port[j] = 0;
	/* publish: from here on lookups see it */
	nx_order_barrier();
	*(volatile __u64 *)&e->key = NX_SUB_KEY(NX_SUB_LIVE, sip);
	rc = (__s64)s | NX_TAB_NEW;
out:
	nx_tab_lock_drop(lock);
	return rc;
}

/* Whether entry e of subscriber sip holds anything: a port-class port, or a block sip owns
 * in one of its slots. */
static __always_inline int nx_sub_holds(struct nx_sub *e, __u32 sip)
{
	/* a subscriber's session count lives here: kept while it has sessions */
	if (*(volatile __u32 *)&e->low_used != 0 || *(volatile __u32 *)&e->nsess != 0)
		return 1;
	for (__u32 j = 0; j < NX_MAX_BLOCKS_PER_SUB; j++) {
		__u32 v = *(volatile __u32 *)&e->blocks[j], gid;
		__u64 *w;

		if (!v)
			continue;
		gid = v - 1;
		w = bpf_map_lookup_elem(&nx_blocks, &gid);
		if (w && NX_BLOCK_OWNER(*(volatile __u64 *)w) == sip)
			return 1;
	}
	return 0;
}

/* Whether e is still subscriber sip's LIVE entry, for a packet that just claimed something
 * through it (nx_alloc). A delete in progress holds it BUSY with the same address for a
 * few instructions, under its lock: wait it out, a few hundred reads (still BUSY then: taken
 * as not ours, the caller undoes its claim and starts over, which is always safe). */
static __always_inline int nx_sub_still(struct nx_sub *e, __u32 sip)
{
	for (__u32 t = 0; t < 256; t++) {
		__u64 k = *(volatile __u64 *)&e->key;

		if (k == NX_SUB_KEY(NX_SUB_LIVE, sip))
			return 1;
		if (k != NX_SUB_KEY(NX_SUB_BUSY, sip))
			return 0;
	}
	return 0;
}

/* Delete subscriber sip if it holds no block (none of its slots names a block sip owns)
 * and no port-class port. The entry is first taken out of lookups' reach (LIVE -> BUSY),
 * then looked at again: a packet that recorded a block or a port meanwhile (its
 * compare-and-swap before our BUSY, or it sees BUSY and waits: nx_sub_still) keeps it
 * LIVE. Returns 1 if this call deleted it. Global: verified once. */
__noinline int nx_sub_delete(__u32 sip)
{
	struct nx_config *cfg = nx_config();
	__u32 ti = NX_TAB_SUBS, s;
	__u32 *lock, *cnt;
	struct nx_sub *e;
	int rc = 0;

	if (!cfg || !cfg->sub_nslots)
		return 0;
	if (nx_tab_enter(nx_sub_hash(cfg, sip), ti, &lock, &cnt) < 0)
		return 0; /* the daemon asks again next sweep */
	s = nx_sub_find(sip);
	e = nx_sub_at(s);
	if (!e || nx_sub_holds(e, sip))
		goto out;
	if (__sync_val_compare_and_swap(&e->key, NX_SUB_KEY(NX_SUB_LIVE, sip),
					NX_SUB_KEY(NX_SUB_BUSY, sip)) !=
	    NX_SUB_KEY(NX_SUB_LIVE, sip))
		goto out;
	if (nx_sub_holds(e, sip)) {
		__sync_val_compare_and_swap(&e->key, NX_SUB_KEY(NX_SUB_BUSY, sip),
					    NX_SUB_KEY(NX_SUB_LIVE, sip));
		goto out;
	}
	__sync_val_compare_and_swap(&e->key, NX_SUB_KEY(NX_SUB_BUSY, sip),
				    NX_SUB_KEY(NX_SUB_TOMB, 0));
	__sync_fetch_and_sub(cnt, 1);
	rc = 1;
out:
	nx_tab_lock_drop(lock);
	return rc;
}

#endif /* NX_SUBS_H */
