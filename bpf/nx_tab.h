/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The mapping and session tables: open addressing over 64-byte buckets of two 32-byte
 * slots, in mmapable arrays (layout in nx_types.h). Built for what a BPF hash map cannot
 * give: no 48-byte element header and no separate bucket array (32 bytes a slot, about
 * 40 per entry at the default load), and a lookup that reads one cache line, rarely the
 * next one, instead of a bucket and an element in two different pages.
 *
 * Lookup: hash the key to its two home buckets (one of the first nbkt each; the array has
 * NX_TAB_PROBE more, so a search never wraps around) and search the chain from the first,
 * comparing the slots' key words; a bucket whose overflow count is 0 ends a chain (no
 * entry that started before it lives beyond it). The chain from the second home is
 * searched only if the first home's alt count says some key of that home lives there, so
 * an absent key (every new connection) usually costs one chain. Lock-free: a slot is
 * matched only LIVE, and a session's second key word is confirmed by reading the control
 * byte again (the generation changes on every reuse).
 *
 * Insert: one lock per key stripe (nx_tab_locks, taken with compare-and-swap and a bounded
 * spin) makes "look for the key, then claim a slot" atomic for that key, so two CPUs
 * creating the same entry end with one. The entry goes to its first home bucket if that has
 * a free slot, else to whichever of its two chains has a free slot nearer its home
 * (two-way linear probing: at 80% load the longest displacement stays near 20 buckets
 * where one-way probing passes 60). The slot is claimed with compare-and-swap (EMPTY ->
 * BUSY), the overflow counts of the buckets passed are raised (and the first home's alt
 * count, for an entry in its second chain), the slot is filled and published LIVE. The per-table
 * count (nx_tab_cnt) enforces the configured size exactly: a full table refuses new entries and
 * never evicts.
 *
 * Delete (the reaper, a failed session create, a removed static forward): LIVE -> EMPTY
 * with compare-and-swap, then the overflow counts on the way (and the alt count) are
 * lowered. No tombstones.
 *
 * As with a preallocated BPF hash map, a packet holding a pointer to an entry that the
 * reaper deletes that instant may write its timer into the slot's next tenant; the reaper
 * deletes only entries idle past their timeout, so that needs a packet of a flow idle for
 * its whole timeout racing its own expiry.
 */
#ifndef NX_TAB_H
#define NX_TAB_H

#include "nx_common.h"
#include "nx_state.h"

#define NX_TAB_NONE 0xffffffffU
#define NX_TAB_NEW (1LL << 32) /* nx_*_insert: the entry was created by this call */
#define NX_TAB_LOCK_SPIN 2048

/* The slot layout's bits (nx_types.h, enum nx_slot_bits) as 64-bit masks. */
#define NX_SESS_W0_KEY ((1ULL << NX_SESS_W0_KEY_BITS) - 1)
#define NX_MAPS_W0_KEY ((1ULL << NX_MAPS_W0_KEY_BITS) - 1)
#define NX_SLOT_STATE_MASK ((__u64)NX_SLOT_STATE_BITS << NX_SLOT_CTL_SHIFT)
#define NX_SLOT_GEN_MASK ((__u64)NX_SLOT_GEN_BITS << NX_SLOT_GEN_SHIFT)
#define NX_SLOT_ALT (1ULL << NX_SLOT_ALT_BIT)

static __always_inline __u64 nx_sess_k0(const struct nx_sess_key *k)
{
	return (__u64)k->in_port | (__u64)k->rem_port << 16 | (__u64)k->proto << 32;
}

static __always_inline __u64 nx_sess_k1(const struct nx_sess_key *k)
{
	return (__u64)k->in_ip | (__u64)k->rem_ip << 32;
}

static __always_inline __u64 nx_map_k0(const struct nx_map_key *k)
{
	return (__u64)k->in_ip | (__u64)k->in_port << 32 | (__u64)k->proto << 48;
}

/* 64-bit mix of the key words and the table's seed (user space computes the same:
 * src/tables.rs, tab_hash). High half: home bucket; low bits: lock stripe. */
static __always_inline __u64 nx_tab_hash(__u64 k0, __u64 k1, __u32 seed)
{
	__u64 h = (k0 ^ ((__u64)seed << 32 | seed)) * 0x9e3779b97f4a7c15ULL;

	h ^= k1 * 0xc2b2ae3d27d4eb4fULL;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 32;
	return h;
}

/* A key's two home buckets (two-way linear probing: an insert takes the free slot nearer
 * to its home of the two, which keeps displacements short even with the table 80% full;
 * the slot's NX_SLOT_ALT bit says which home it counted from). */
static __always_inline __u32 nx_tab_home(__u64 h, __u32 nbkt, int alt)
{
	__u64 x = alt ? (h & 0xffffffffULL) : (h >> 32);

	return (__u32)((x * nbkt) >> 32);
}

static __always_inline __u64 *nx_tab_slot(const __u32 tab, __u32 i)
{
	if (tab == NX_TAB_SESS)
		return bpf_map_lookup_elem(&nx_sess, &i);
	return bpf_map_lookup_elem(&nx_maps, &i);
}

static __always_inline __u32 *nx_tab_ovf(__u64 *first_slot)
{
	return (__u32 *)((__u8 *)first_slot + NX_SLOT_OVF_OFF);
}

/* A bucket's alt count (the same field of its second slot): the live entries whose first
 * home is this bucket but which live in their second chain. While it is 0 (nearly always
 * below ~60% load) a key absent from the first chain is absent: a miss reads one home. */
static __always_inline __u32 *nx_tab_altcnt(const __u32 tab, __u32 b)
{
	__u64 *e = nx_tab_slot(tab, b * 2 + 1);

	return e ? (__u32 *)((__u8 *)e + NX_SLOT_OVF_OFF) : 0;
}

static __always_inline int nx_tab_match(const __u32 tab, __u64 *e, __u64 want, __u64 k1)
{
	__u64 mask = (tab == NX_TAB_SESS ? NX_SESS_W0_KEY : NX_MAPS_W0_KEY) | NX_SLOT_STATE_MASK;
	__u64 w0 = *(volatile __u64 *)e;

	if ((w0 & mask) != want)
		return 0;
	if (tab == NX_TAB_MAPS) {
		nx_order_barrier();
		return 1; /* the whole key is in the first word, read at once */
	}
	if (*(volatile __u64 *)(e + 1) != k1)
		return 0;
	/* the same tenant all along: neither state nor generation moved meanwhile */
	if ((*(volatile __u64 *)e ^ w0) & (NX_SLOT_STATE_MASK | NX_SLOT_GEN_MASK))
		return 0;
	nx_order_barrier();
	return 1;
}

/* Search one chain, from bucket b on, until a bucket nothing overflowed past. */
static __always_inline __u32 nx_tab_chain_find(const __u32 tab, __u32 b, __u64 want, __u64 k1)
{
	for (__u32 i = 0; i < NX_TAB_PROBE; i++) {
		__u32 s = (b + i) * 2;
		__u64 *e0 = nx_tab_slot(tab, s);
		__u64 *e1 = nx_tab_slot(tab, s + 1);

		if (!e0 || !e1)
			return NX_TAB_NONE;
		if (nx_tab_match(tab, e0, want, k1))
			return s;
		if (nx_tab_match(tab, e1, want, k1))
			return s + 1;
		if (*(volatile __u32 *)nx_tab_ovf(e0) == 0)
			return NX_TAB_NONE;
	}
	return NX_TAB_NONE;
}

/* Buckets from b to the first one with an EMPTY slot (NX_TAB_PROBE: none). */
static __always_inline __u32 nx_tab_chain_free(const __u32 tab, __u32 b)
{
	for (__u32 i = 0; i < NX_TAB_PROBE; i++) {
		__u64 *e0 = nx_tab_slot(tab, (b + i) * 2);
		__u64 *e1 = nx_tab_slot(tab, (b + i) * 2 + 1);

		if (!e0 || !e1)
			break;
		if (NX_SLOT_STATE(*(volatile __u64 *)e0) == NX_SLOT_EMPTY ||
		    NX_SLOT_STATE(*(volatile __u64 *)e1) == NX_SLOT_EMPTY)
			return i;
	}
	return NX_TAB_PROBE;
}

/* Change the overflow counts of the d buckets from b on (an entry d buckets from home). */
static __always_inline void nx_tab_ovf_add(const __u32 tab, __u32 b, __u32 d, int delta)
{
	for (__u32 i = 0; i < NX_TAB_PROBE; i++) {
		__u64 *f;

		if (i >= d)
			break;
		f = nx_tab_slot(tab, (b + i) * 2);
		if (f)
			__sync_fetch_and_add(nx_tab_ovf(f), delta);
	}
}

/* The loops above as functions of their own, one per table: the verifier checks each once
 * instead of once per path into it (inlined, the paths through two chain searches and the
 * free-slot scans multiply past its limit). */
__noinline __u32 nx_sess_chain_find(__u32 b, __u64 want, __u64 k1)
{
	return nx_tab_chain_find(NX_TAB_SESS, b, want, k1);
}

__noinline __u32 nx_maps_chain_find(__u32 b, __u64 want)
{
	return nx_tab_chain_find(NX_TAB_MAPS, b, want, 0);
}

__noinline __u32 nx_sess_chain_free(__u32 b) { return nx_tab_chain_free(NX_TAB_SESS, b); }

__noinline __u32 nx_maps_chain_free(__u32 b) { return nx_tab_chain_free(NX_TAB_MAPS, b); }

__noinline int nx_sess_ovf_add(__u32 b, __u32 d, int delta)
{
	nx_tab_ovf_add(NX_TAB_SESS, b, d, delta);
	return 0;
}

__noinline int nx_maps_ovf_add(__u32 b, __u32 d, int delta)
{
	nx_tab_ovf_add(NX_TAB_MAPS, b, d, delta);
	return 0;
}

static __always_inline __u32 nx_tab_chain_find1(const __u32 tab, __u32 b, __u64 want, __u64 k1)
{
	return tab == NX_TAB_SESS ? nx_sess_chain_find(b, want, k1) : nx_maps_chain_find(b, want);
}

static __always_inline __u32 nx_tab_chain_free1(const __u32 tab, __u32 b)
{
	return tab == NX_TAB_SESS ? nx_sess_chain_free(b) : nx_maps_chain_free(b);
}

static __always_inline void nx_tab_ovf_add1(const __u32 tab, __u32 b, __u32 d, int delta)
{
	if (tab == NX_TAB_SESS)
		nx_sess_ovf_add(b, d, delta);
	else
		nx_maps_ovf_add(b, d, delta);
}

static __always_inline __u32 nx_tab_find_(const __u32 tab, struct nx_config *cfg, __u64 k0,
					  __u64 k1)
{
	__u32 nbkt = cfg->tab_nbkt[tab & 1];
	__u64 want = k0 | ((__u64)NX_SLOT_LIVE << NX_SLOT_CTL_SHIFT);
	__u32 s, home0, *alt;
	__u64 h;

	if (!nbkt)
		return NX_TAB_NONE;
	h = nx_tab_hash(k0, k1, cfg->tab_seed);
	home0 = nx_tab_home(h, nbkt, 0);
	s = nx_tab_chain_find1(tab, home0, want, k1);
	if (s != NX_TAB_NONE)
		return s;
	alt = nx_tab_altcnt(tab, home0);
	if (!alt || *(volatile __u32 *)alt == 0)
		return NX_TAB_NONE;
	return nx_tab_chain_find1(tab, nx_tab_home(h, nbkt, 1), want, k1);
}

static __always_inline __u32 *nx_tab_lock(__u64 h)
{
	__u32 i = (__u32)h & (NX_TAB_LOCKS - 1);

	return bpf_map_lookup_elem(&nx_tab_locks, &i);
}

static __always_inline int nx_tab_lock_take(__u32 *l)
{
	for (__u32 t = 0; t < NX_TAB_LOCK_SPIN; t++)
		if (__sync_val_compare_and_swap(l, 0, 1) == 0)
			return 0;
	return -1;
}

static __always_inline void nx_tab_lock_drop(__u32 *l) { __sync_fetch_and_and(l, 0); }

/* Before an insert: take the lock stripe of key hash h and find table ti's entry count.
 * Returns 0 with *lock taken, or -reason with nothing taken. */
static __always_inline int nx_tab_enter(__u64 h, __u32 ti, __u32 **lock, __u32 **cnt)
{
	*lock = nx_tab_lock(h);
	*cnt = bpf_map_lookup_elem(&nx_tab_cnt, &ti);
	if (!*lock || !*cnt)
		return -NX_DROP_INTERNAL;
	if (nx_tab_lock_take(*lock) < 0)
		return -NX_DROP_TABLE_BUSY;
	return 0;
}

/* Claim an EMPTY slot of bucket b for key k0 (state BUSY, next generation, alt bit).
 * Returns the slot or NX_TAB_NONE; *gen_alt gets the control bits to publish with. */
static __always_inline __u32 nx_tab_claim(const __u32 tab, __u32 b, __u64 k0, __u64 alt,
					  __u64 *gen_alt)
{
	for (__u32 j = 0; j < 2; j++) {
		__u64 *e = nx_tab_slot(tab, b * 2 + j);
		__u64 w, ga;

		if (!e)
			return NX_TAB_NONE;
		w = *(volatile __u64 *)e;
		if (NX_SLOT_STATE(w) != NX_SLOT_EMPTY)
			continue;
		ga = ((((w & NX_SLOT_GEN_MASK) >> NX_SLOT_GEN_SHIFT) + 1) << NX_SLOT_GEN_SHIFT) &
		     NX_SLOT_GEN_MASK;
		ga |= alt;
		if (__sync_val_compare_and_swap(
			e, w, k0 | ga | ((__u64)NX_SLOT_BUSY << NX_SLOT_CTL_SHIFT)) == w) {
			*gen_alt = ga;
			return b * 2 + j;
		}
	}
	return NX_TAB_NONE;
}

/* Insert the entry whose first word is init0 (key and, for a session, state and flags;
 * control clear), second word w1 (a session's addresses, a mapping's outside endpoint),
 * third word w2, and low half of the fourth w3lo. Returns the slot, with NX_TAB_NEW set
 * when this call created it; or -reason (table full, lock busy). */
static __always_inline __s64 nx_tab_insert_(const __u32 tab, __u64 init0, __u64 w1, __u64 w2,
					    __u32 w3lo)
{
	__u64 keym = tab == NX_TAB_SESS ? NX_SESS_W0_KEY : NX_MAPS_W0_KEY;
	__u64 k0 = init0 & keym, k1 = tab == NX_TAB_SESS ? w1 : 0;
	struct nx_config *cfg = nx_config();
	__u32 ti = tab, home[2], nbkt, s = NX_TAB_NONE, d = 0;
	__u32 *lock, *cnt;
	__u64 h, *e, ga = 0;
	__s64 rc = -NX_DROP_TABLE_FULL;
	int alt = 0;

	if (!cfg || !cfg->tab_nbkt[tab & 1])
		return -NX_DROP_INTERNAL;
	nbkt = cfg->tab_nbkt[tab & 1];
	h = nx_tab_hash(k0, k1, cfg->tab_seed);
	rc = nx_tab_enter(h, ti, &lock, &cnt);
	if (rc < 0)
		return rc;
	rc = -NX_DROP_TABLE_FULL;
	s = nx_tab_find_(tab, cfg, k0, k1);
	if (s != NX_TAB_NONE) {
		rc = s;
		goto out;
	}
	if (__sync_fetch_and_add(cnt, 1) >= cfg->tab_max[tab & 1]) {
		__sync_fetch_and_sub(cnt, 1);
		goto out;
	}
	home[0] = nx_tab_home(h, nbkt, 0);
	home[1] = nx_tab_home(h, nbkt, 1);
	/* a slot lost to another CPU's insert (other keys take other locks) is looked for
	 * again, a few times. Unrolled: as a loop, clang enters it by a jump to its test and
	 * the body falls into it, a back-edge Linux 6.1 refuses (scripts/bpf-cfg61.py). */
#pragma unroll
	for (__u32 t = 0; t < 4; t++) {
		__u32 d0 = nx_tab_chain_free1(tab, home[0]);
		/* the second home only when the first bucket is full: lookups of absent keys
		 * then stop after the first chain (alt count 0) */
		__u32 d1 = d0 ? nx_tab_chain_free1(tab, home[1]) : NX_TAB_PROBE;

		alt = d1 < d0;
		d = alt ? d1 : d0;
		if (d >= NX_TAB_PROBE)
			break;
		s = nx_tab_claim(tab, home[alt & 1] + d, k0, alt ? NX_SLOT_ALT : 0, &ga);
		if (s != NX_TAB_NONE)
			break;
	}
	e = nx_tab_slot(tab, s);
	if (!e || d >= NX_TAB_PROBE) {
		__sync_fetch_and_sub(cnt, 1);
		goto out;
	}
	/* every bucket passed now has one more entry living beyond it; one living in its
	 * second chain is counted at its first home, before lookups can see it */
	nx_tab_ovf_add1(tab, home[alt & 1], d, 1);
	if (alt) {
		__u32 *ac = nx_tab_altcnt(tab, home[0]);

		if (ac)
			__sync_fetch_and_add(ac, 1);
	}
	e[1] = w1;
	e[2] = w2;
	*(__u32 *)(e + 3) = w3lo;
	/* publish: from here on lookups see it */
	nx_order_barrier();
	*(volatile __u64 *)e = init0 | ga | ((__u64)NX_SLOT_LIVE << NX_SLOT_CTL_SHIFT);
	rc = (__s64)s | NX_TAB_NEW;
out:
	nx_tab_lock_drop(lock);
	return rc;
}

/* Delete the entry at slot s if it still holds key (k0, k1). Returns 1 if this call
 * deleted it. */
static __always_inline int nx_tab_delete_(const __u32 tab, __u32 s, __u64 k0, __u64 k1)
{
	__u64 keym = tab == NX_TAB_SESS ? NX_SESS_W0_KEY : NX_MAPS_W0_KEY;
	struct nx_config *cfg = nx_config();
	__u64 *e = nx_tab_slot(tab, s);
	__u32 ti = tab, nbkt, home;
	__u32 *cnt;
	__u64 w, h;

	if (!cfg || !e)
		return 0;
	nbkt = cfg->tab_nbkt[tab & 1];
	w = *(volatile __u64 *)e;
	if (NX_SLOT_STATE(w) != NX_SLOT_LIVE || (w & keym) != k0 ||
	    (tab == NX_TAB_SESS && e[1] != k1))
		return 0;
	/* back to EMPTY, keeping the generation; a concurrent change of a session's state
	 * makes this fail, and the reaper tries again next sweep */
	if (__sync_val_compare_and_swap(e, w, w & NX_SLOT_GEN_MASK) != w)
		return 0;
	cnt = bpf_map_lookup_elem(&nx_tab_cnt, &ti);
	if (cnt)
		__sync_fetch_and_sub(cnt, 1);
	if (!nbkt)
		return 1;
	h = nx_tab_hash(k0, k1, cfg->tab_seed);
	home = nx_tab_home(h, nbkt, !!(w & NX_SLOT_ALT));
	if (s / 2 > home)
		nx_tab_ovf_add1(tab, home, s / 2 - home, -1);
	if (w & NX_SLOT_ALT) {
		__u32 *ac = nx_tab_altcnt(tab, nx_tab_home(h, nbkt, 0));

		if (ac)
			__sync_fetch_and_sub(ac, 1);
	}
	return 1;
}

/* ---- the two tables' entry points (global: verified once each) ---- */

__noinline __u32 nx_sess_find(__u64 k0, __u64 k1)
{
	struct nx_config *cfg = nx_config();

	return cfg ? nx_tab_find_(NX_TAB_SESS, cfg, k0, k1) : NX_TAB_NONE;
}

__noinline __u32 nx_maps_find(__u64 k0)
{
	struct nx_config *cfg = nx_config();

	return cfg ? nx_tab_find_(NX_TAB_MAPS, cfg, k0, 0) : NX_TAB_NONE;
}

__noinline __s64 nx_sess_insert(__u64 init0, __u64 w1, __u64 w2, __u32 w3lo)
{
	return nx_tab_insert_(NX_TAB_SESS, init0, w1, w2, w3lo);
}

__noinline __s64 nx_maps_insert(__u64 k0, __u64 w1, __u64 w2)
{
	return nx_tab_insert_(NX_TAB_MAPS, k0, w1, w2, 0);
}

__noinline int nx_sess_delete(__u32 s, __u64 k0, __u64 k1)
{
	return nx_tab_delete_(NX_TAB_SESS, s, k0, k1);
}

__noinline int nx_maps_delete(__u32 s, __u64 k0) { return nx_tab_delete_(NX_TAB_MAPS, s, k0, 0); }

/* ---- typed access for the rest of the data plane ---- */

static __always_inline struct nx_sess *nx_sess_at(__u32 s)
{
	return bpf_map_lookup_elem(&nx_sess, &s);
}

static __always_inline struct nx_map *nx_map_at(__u32 s)
{
	return bpf_map_lookup_elem(&nx_maps, &s);
}

static __always_inline struct nx_sess *nx_sess_lookup(const struct nx_sess_key *k)
{
	return nx_sess_at(nx_sess_find(nx_sess_k0(k), nx_sess_k1(k)));
}

/* The same, for the per-packet lookups: the first bucket of the key's first home is
 * checked here, inline, which is where most entries live (the placement prefers it); only
 * a key elsewhere, or absent, pays for the calls into the full search. */
static __always_inline struct nx_sess *nx_sess_lookup_fast(struct nx_config *cfg,
							   const struct nx_sess_key *k)
{
	__u64 k0 = nx_sess_k0(k), k1 = nx_sess_k1(k);
	__u64 want = k0 | ((__u64)NX_SLOT_LIVE << NX_SLOT_CTL_SHIFT);
	__u32 nbkt = cfg->tab_nbkt[NX_TAB_SESS], s;
	__u64 *e0, *e1;

	if (!nbkt)
		return 0;
	s = nx_tab_home(nx_tab_hash(k0, k1, cfg->tab_seed), nbkt, 0) * 2;
	e0 = nx_tab_slot(NX_TAB_SESS, s);
	e1 = nx_tab_slot(NX_TAB_SESS, s + 1);
	if (!e0 || !e1)
		return 0;
	if (nx_tab_match(NX_TAB_SESS, e0, want, k1))
		return (struct nx_sess *)e0;
	if (nx_tab_match(NX_TAB_SESS, e1, want, k1))
		return (struct nx_sess *)e1;
	/* nothing overflowed past this bucket and nothing of this home lives in its second
	 * chain: absent, decided on the line already read (a new connection, mostly) */
	if (*(volatile __u32 *)nx_tab_ovf(e0) == 0 &&
	    *(volatile __u32 *)((__u8 *)e1 + NX_SLOT_OVF_OFF) == 0)
		return 0;
	return nx_sess_at(nx_sess_find(k0, k1));
}

static __always_inline struct nx_map *nx_map_lookup(const struct nx_map_key *k)
{
	return nx_map_at(nx_maps_find(nx_map_k0(k)));
}

#endif /* NX_TAB_H */
