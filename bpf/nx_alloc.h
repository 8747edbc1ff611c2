/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Outside port allocation, on the packet path and without locks.
 *
 * A subscriber owns up to max_blocks port blocks, all on ONE pool address (paired pooling,
 * RFC 4787 REQ-2 / RFC 6888 REQ-2). Ports are claimed with a compare-and-swap on their word
 * in nx_ports, blocks with a compare-and-swap on their word in nx_blocks: two CPUs can race
 * for the same port or block and exactly one wins; the loser moves on. The search starts at
 * a random offset with a random odd step (RFC 6056 spirit) and preserves parity (RFC 4787 REQ-5),
 * falling back to the other parity only when no port of the right parity is left.
 *
 * Work per packet is bounded: at most max_blocks blocks of block_size ports, plus one
 * block scan of one pool address for a new block. Release (expiry, hold-down, returning
 * empty blocks) is the daemon's job; see src/expiry.rs.
 *
 * The subscriber's home block is not claimed in here: while the subscriber owns it, its
 * ports there are found and claimed by the home walk (nx_home.h), and this allocator,
 * which serves the mapping table, passes it over; taking it returns NX_ALLOC_HOME.
 */
#ifndef NX_ALLOC_H
#define NX_ALLOC_H

#include "nx_common.h"
#include "nx_log.h"
#include "nx_port.h"
#include "nx_state.h"
#include "nx_stats.h"
#include "nx_subs.h"

#define NX_BLOCK_USED_ONE (1ULL << NX_BLOCK_USED_SHIFT)

/* ---- deterministic mode (nx_det.h) ---- */
/* Deterministic mode: subscriber sip's pool index and first port. Returns 0, or -1 when sip is
 * outside the deterministic prefix. */
static __always_inline int nx_det_range(struct nx_config *cfg, __u32 sip, __u32 *addr_idx,
					__u32 *first)
{
	__u32 i = bpf_ntohl(sip) - cfg->det_base, per = cfg->det_per_addr, a;

	if (i >= cfg->det_count || !per)
		return -1;
	a = i / per;
	*addr_idx = a;
	*first = cfg->port_lo + (i - a * per) * cfg->det_ports;
	return 0;
}

/* ---- the subscriber's home block ----
 * Every subscriber has one block it takes first whenever that block is free, a function
 * of its address alone: consecutive subscriber addresses go to consecutive pool addresses,
 * then to the next block of each, so any n_addrs * blocks_per_addr consecutive subscribers
 * have distinct home blocks. While it owns that block, its mappings there are port words
 * found by a walk from the endpoint (nx_home.h). */

static __always_inline __s64 nx_home_block_at(struct nx_config *cfg, __u32 sip, __u32 *addr_idx,
					      __u32 *blk)
{
	__u32 n = cfg->n_addrs, bpa = cfg->blocks_per_addr, i, q;

	if (!n || !bpa)
		return -1;
	i = nx_umod(cfg, bpf_ntohl(sip), n * bpa, NX_DIV_HOME_SPAN);
	q = nx_udiv(cfg, i, NX_DIV_ADDRS);
	*addr_idx = i - q * n; /* i % n: the pool address */
	*blk = q;	       /* i / n: the block on it */
	return (__s64)*addr_idx * bpa + q;
}

/* The same, the global block id alone */
static __always_inline __s64 nx_home_block(struct nx_config *cfg, __u32 sip)
{
	__u32 a, j;

	return nx_home_block_at(cfg, sip, &a, &j);
}

/* Whether global block gid is the home block of subscriber sip, where its mappings are
 * the home walk's (nx_home.h; none with home_probe 0: every mapping in the table). */
static __always_inline int nx_is_home(struct nx_config *cfg, __u32 sip, __u32 gid)
{
	return cfg->home_probe && nx_home_block(cfg, sip) == (__s64)gid;
}

/* Subscriber sip's home block where the home walk claims, or -1 (none, or home_probe 0).
 * Global: the allocator's paths do not split on the steps inside. */
__noinline long nx_home_gid(__u32 sip)
{
	struct nx_config *cfg = nx_config();

	return cfg && cfg->home_probe ? nx_home_block(cfg, sip) : -1;
}

/* Whether subscriber sip owns its home block (1) or not (0). Global: verified once, and
 * the allocator's paths do not split on the steps inside. */
__noinline int nx_home_owned(__u32 sip)
{
	struct nx_config *cfg = nx_config();
	__s64 home;
	__u32 gid;
	__u64 *w;

	if (!cfg || !cfg->home_probe)
		return 0;
	home = nx_home_block(cfg, sip);
	if (home < 0)
		return 0;
	gid = (__u32)home;
	w = bpf_map_lookup_elem(&nx_blocks, &gid);
	return w && NX_BLOCK_OWNER(*(volatile __u64 *)w) == sip;
}

/* Take subscriber sip's home block, one port reserved, if it is free and (unless addr is
 * NX_ANY_ADDR) on pool address addr; mixed: NX_BLOCK_MIXED when the subscriber may hold
 * mappings in the table already, else 0. Returns its global block id, or -1. Global,
 * scalar arguments: verified once, not once per path through the allocator. */
#define NX_ANY_ADDR 0xffffffffu
__noinline long nx_home_take(__u32 sip, __u32 addr, __u64 mixed)
{
	struct nx_config *cfg = nx_config();
	__u32 gid, a, j;
	__s64 home;
	__u64 *w;

	if (!cfg)
		return -1;
	home = nx_home_block_at(cfg, sip, &a, &j);
	if (home < 0)
		return -1;
	gid = (__u32)home;
	if (addr != NX_ANY_ADDR && a != addr)
		return -1;
	w = bpf_map_lookup_elem(&nx_blocks, &gid);
	mixed &= NX_BLOCK_MIXED;
	if (!w || *(volatile __u64 *)w != 0 ||
	    __sync_val_compare_and_swap(w, 0, mixed | NX_BLOCK_USED_ONE | sip) != 0)
		return -1;
	nx_count(NX_STAT_BLOCK_ALLOC);
	nx_count(NX_STAT_HOME_BLOCK);
	nx_log_block(gid, sip, NX_LOG_BLOCK_ALLOC);
	return gid;
}

/* ---- the allocator's working memory ----
 * The state its bpf_loop callbacks share with their callers (struct nx_pscan, struct
 * nx_slots below) lives in a per-CPU map, not on the stack: the allocator's call chain
 * (slow path -> nx_dyn_map -> nx_alloc -> nx_alloc_port -> the slots' walk -> a block's
 * claim -> its scan) is the data plane's deepest, and 512 bytes of stack are all a chain
 * may use. A callback reaches it by lookup (its context argument is NULL): a pointer to
 * a map value cannot be a callback's context, which must be on the stack. One CPU runs
 * one XDP program at a time, from start to end, and only the packet path allocates (the
 * control program nx_ctl never does), so the slots are never used by two at once. */
/* ---- claiming one port inside one block ---- */
struct nx_pscan {
	__u32 base;   /* nx_ports index of the block's first port */
	__u32 half;   /* candidates of one parity: block_size / 2 */
	__u32 start;  /* first candidate, 0 .. half-1 */
	__u32 stride; /* odd step when half is a power of two (mask != 0), else 1 */
	__u32 mask;   /* half - 1 when half is a power of two, else 0 */
	__u32 par;    /* offset parity to try (0/1) */
	__u64 word;   /* value to store */
	__s32 found;  /* offset in block, or -1 */
	/* nx_claim_in_block's own, kept here across its calls rather than in registers the
	 * calls would make it spill: its frame is in the deepest chain */
	__u32 first; /* the block's first port */
	__u32 pidx;
	__u32 gid;
	__u32 slot;
	__u32 pp;  /* the claim's inputs (nx_claim): NX_PP(protocol index, inside port) */
	__u32 sip; /* and the subscriber */
};

/* Walking the subscriber's block slots; a bpf_loop callback so that the verifier checks
 * the body once, not once per slot. */
struct nx_slots {
	__u32 slot; /* the subscriber's entry */
	__u32 sip;
	__u32 pp;	 /* NX_PP(protocol index, inside port) */
	__u32 skip;	 /* gid + 1 of a block already tried (cur_block), or 0 */
	__u32 nslots;	 /* slots the config uses (max_blocks) */
	__s32 free_slot; /* lowest reusable slot, -1 if none */
	__u32 free_val;	 /* what that slot held (0, or a block released meanwhile) */
	__u32 addr;	 /* the pool address claims are made on (the subscriber's, read once) */
	int port;	 /* result, -1 until found */
};

struct nx_alloc_work {
	struct nx_pscan scan;
	struct nx_slots slots;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_alloc_work);
} nx_alloc_work SEC(".maps");

static __always_inline struct nx_alloc_work *nx_alloc_work_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&nx_alloc_work, &zero);
}

/* Where a scan starts and how it steps. A random odd step visits every candidate of a
 * power-of-two half once, like a linear scan, but claimed ports do not pile up into one
 * run that every later scan must cross (linear probing's clustering): a block k% full
 * costs about 1/(1-k) probes, not a walk over the run. */
static __always_inline void nx_pscan_init(struct nx_pscan *s, __u32 half)
{
	__u32 r = bpf_get_prandom_u32();

	s->half = half;
	s->start = r % half;
	s->mask = (half & (half - 1)) == 0 ? half - 1 : 0;
	/* odd, so never 0; from bits of r the start did not use */
	s->stride = s->mask ? ((r >> 16) | 1) & s->mask : 1;
}

static long nx_pscan_cb(__u64 i, void *unused)
{
	struct nx_alloc_work *aw = nx_alloc_work_get();
	struct nx_pscan *s;
	__u32 k, idx;
	__u64 *w;

	if (!aw)
		return 1;
	s = &aw->scan;

	if (s->mask) {
		k = (s->start + (__u32)i * s->stride) & s->mask;
	} else {
		k = s->start + (__u32)i;
		if (k >= s->half)
			k -= s->half;
	}
	idx = s->base + 2 * k + s->par;
	w = bpf_map_lookup_elem(&nx_ports, &idx);
	if (!w)
		return 1;
	if (*w != 0) /* USED, HELD or STATIC */
		return 0;
	if (nx_port_claim(w, 0, s->word)) {
		s->found = 2 * k + s->par;
		return 1;
	}
	nx_count(NX_STAT_ALLOC_RETRY);
	return 0;
}

/* The protocol index and inside port of a claim, in one argument (a BPF call has five). */
#define NX_PP(pidx, in_port_h) ((__u32)(pidx) << 16 | (__u16)(in_port_h))

/* Claim a free port in block scan.gid (already reserved by the caller) for subscriber
 * scan.sip, whose entry is in scan.slot, for scan.pp = NX_PP(protocol index, inside port)
 * (nx_claim sets them). Returns the outside port in host order, or -1 when the block has no
 * free port. Global: called from three places in the allocator (the current block, the
 * block slots' walk, a new block), it is verified once instead of once per caller's state,
 * and so is its scan's callback. No arguments: its inputs come from the work struct, so
 * that it keeps none of them in a frame, the deepest chain's last but one. */
__noinline int nx_claim_in_block(void)
{
	struct nx_alloc_work *aw = nx_alloc_work_get();
	struct nx_config *cfg = nx_config();
	__u32 addr_idx, first, hint, in, bpa, bs, pidx, in_port_h, gid, slot;
	struct nx_pscan *s;
	struct nx_sub *sub;

	if (!cfg || !aw)
		return -1;
	s = &aw->scan;
	slot = s->slot;
	gid = s->gid;
	pidx = s->pp >> 16;
	/* tested as itself, below: clang would otherwise test scan.pp against 3 << 16 and
	 * index next_port[] with the shifted copy, which the verifier sees unbounded */
	asm volatile("" : "+r"(pidx));
	in_port_h = s->pp & 0xffff;
	sub = nx_sub_at(slot);
	if (!sub)
		return -1;
	bpa = cfg->blocks_per_addr;
	bs = cfg->block_size;
	if (!bpa || bs < 2 || pidx >= NX_NPROTO)
		return -1;
	addr_idx = gid / bpa;
	first = cfg->port_lo + (gid - addr_idx * bpa) * bs;
	s->base = nx_port_index(addr_idx, pidx, first);
	nx_pscan_init(s, bs / 2);
	/* Start at the pair the previous claim drew at random for this one, if it is in this
	 * block, with this claim's own random step. Kept as arithmetic (in = 0 or 1), not a
	 * branch: a branch here doubles every path the verifier walks after each of the
	 * allocator's claims. */
	hint = (sub->next_port[pidx] - s->base) / 2;
	in = (__u32)(((__u64)hint - s->half) >> 63);
	s->start = (s->start & (in - 1)) | (hint & -in);
	s->word = nx_port_word(s->sip, (__u16)in_port_h);
	s->found = -1;
	/* parity of the offset that gives an outside port of the inside port's parity */
	s->par = ((in_port_h ^ first) & 1);
	if (!(cfg->flags & NX_CF_PORT_PARITY) || pidx == NX_P_ICMP)
		s->par = bpf_get_prandom_u32() & 1;
	s->first = first;
	s->pidx = pidx;
	bpf_loop(s->half, nx_pscan_cb, 0, 0);
	if (s->found < 0) {
		s->par ^= 1; /* none of that parity left: parity is RECOMMENDED, a port is not */
		bpf_loop(s->half, nx_pscan_cb, 0, 0);
	}
	if (s->found < 0)
		return -1;
	sub = nx_sub_at(s->slot);
	pidx = s->pidx;
	if (!sub || pidx >= NX_NPROTO || !s->half)
		return -1;
	/* the next claim's first candidate, unpredictable like any other (RFC 6056) */
	sub->next_port[pidx] = s->base + 2 * (bpf_get_prandom_u32() % s->half);
	if (sub->cur_block != s->gid + 1)
		sub->cur_block = s->gid + 1;
	return s->first + s->found;
}

/* Claim a free port in block gid (already reserved) for subscriber sip, whose entry is in
 * slot; pp: NX_PP(protocol index, inside port). The outside port, or -1. */
static __always_inline int nx_claim(__u32 slot, __u32 gid, __u32 pp, __u32 sip)
{
	struct nx_alloc_work *aw = nx_alloc_work_get();

	if (!aw)
		return -1;
	aw->scan.slot = slot;
	aw->scan.gid = gid;
	aw->scan.pp = pp;
	aw->scan.sip = sip;
	return nx_claim_in_block();
}

/* ---- blocks ---- */
static __always_inline __u64 *nx_block(__u32 gid) { return bpf_map_lookup_elem(&nx_blocks, &gid); }

/* Set the MIXED bit of home block word *bw while sip owns it. 0, or -1 when it could not
 * (the word kept changing): the caller must then make no table mapping (nx_home.h) nor
 * count a session on its subscriber entry (nx_limits.h). */
static __always_inline int nx_home_mix(__u64 *bw, __u32 sip)
{
#pragma unroll
	for (int t = 0; t < 8; t++) {
		__u64 old = *(volatile __u64 *)bw;

		if (NX_BLOCK_OWNER(old) != sip || (old & NX_BLOCK_MIXED))
			return 0;
		if (__sync_val_compare_and_swap(bw, old, old | NX_BLOCK_MIXED) == old)
			return 0;
		nx_count(NX_STAT_ALLOC_RETRY);
	}
	return -1;
}

/* Count one more port against block gid if sip still owns it. */
static __always_inline int nx_block_reserve(__u32 gid, __u32 sip)
{
	__u64 *w = nx_block(gid);

	if (!w)
		return -1;
#pragma unroll
	for (int t = 0; t < 4; t++) {
		__u64 old = *(volatile __u64 *)w;

		if (NX_BLOCK_OWNER(old) != sip)
			return -1;
		if (__sync_val_compare_and_swap(w, old, old + NX_BLOCK_USED_ONE) == old)
			return 0;
		nx_count(NX_STAT_ALLOC_RETRY);
	}
	return -1;
}

static __always_inline void nx_block_unreserve(__u32 gid)
{
	__u64 *w = nx_block(gid);

	if (w)
		__sync_fetch_and_sub(w, NX_BLOCK_USED_ONE);
}

struct nx_bscan {
	__u32 base; /* gid of block 0 of the address */
	__u32 bpa;
	__u32 start;
	__u32 sip;
	__s64 found;
};

static long nx_bscan_cb(__u64 i, void *vctx)
{
	struct nx_bscan *s = vctx;
	__u32 b = s->start + (__u32)i;
	__u32 gid;
	__u64 *w;

	if (b >= s->bpa)
		b -= s->bpa;
	gid = s->base + b;
	w = nx_block(gid);
	if (!w)
		return 1;
	if (*w != 0)
		return 0;
	/* Claimed with one port reserved, so the daemon never sees it owned and empty. */
	if (__sync_val_compare_and_swap(w, 0, NX_BLOCK_USED_ONE | s->sip) == 0) {
		s->found = gid;
		return 1;
	}
	nx_count(NX_STAT_ALLOC_RETRY);
	return 0;
}

/* Claim a free block on pool address addr_idx for subscriber sip, one port reserved.
 * Returns the global block id or -1. */
static __always_inline __s64 nx_block_claim(struct nx_config *cfg, __u32 addr_idx, __u32 sip)
{
	struct nx_bscan s;

	s.bpa = cfg->blocks_per_addr;
	if (!s.bpa)
		return -1;
	s.base = addr_idx * s.bpa;
	s.start = bpf_get_prandom_u32() % s.bpa;
	s.sip = sip;
	s.found = -1;
	bpf_loop(s.bpa, nx_bscan_cb, &s, 0);
	if (s.found >= 0) {
		nx_count(NX_STAT_BLOCK_ALLOC);
		nx_log_block((__u32)s.found, sip, NX_LOG_BLOCK_ALLOC);
	}
	return s.found;
}

/* log.strict (nx_log.h): whether the log has room for a new block's event, and for one
 * event each of 128 CPUs may make meanwhile; a block is never taken without it. */
#define NX_LOG_STRICT_ROOM (128 * 48)
static __always_inline int nx_log_room(struct nx_config *cfg)
{
	__u64 size, used;

	if ((cfg->flags & (NX_CF_LOG | NX_CF_LOG_STRICT)) != (NX_CF_LOG | NX_CF_LOG_STRICT))
		return 1;
	size = bpf_ringbuf_query(&nx_log_rb, BPF_RB_RING_SIZE);
	used = bpf_ringbuf_query(&nx_log_rb, BPF_RB_AVAIL_DATA);
	return used < size && size - used >= NX_LOG_STRICT_ROOM;
}

/* Give back a block claimed by nx_block_claim or nx_home_take that could not be recorded
 * anywhere. */
static __always_inline void nx_block_unclaim(__u32 gid, __u32 sip)
{
	__u64 *w = nx_block(gid);

	if (!w)
		return;
	if (__sync_val_compare_and_swap(w, NX_BLOCK_USED_ONE | sip, 0) ==
		(NX_BLOCK_USED_ONE | sip) ||
	    __sync_val_compare_and_swap(w, NX_BLOCK_MIXED | NX_BLOCK_USED_ONE | sip, 0) ==
		(NX_BLOCK_MIXED | NX_BLOCK_USED_ONE | sip))
		nx_log_block(gid, sip, NX_LOG_BLOCK_FREE); /* its allocation was logged */
}

/* Release a port claimed on this path that never became visible (lost an insert race):
 * no hold-down needed, nobody ever used it. */
static __always_inline void nx_port_unclaim(struct nx_config *cfg, __u32 addr_idx, __u32 pidx,
					    __u16 out_port_h, __u64 word)
{
	__u32 idx = nx_port_index(addr_idx, pidx, out_port_h);
	__u64 *w = bpf_map_lookup_elem(&nx_ports, &idx);
	__u32 bpa = cfg->blocks_per_addr, bs = cfg->block_size;

	if (!w || !bs)
		return;
	if (!nx_port_unclaim_word(w, word))
		return;
	if (out_port_h >= cfg->port_lo) {
		nx_block_unreserve(addr_idx * bpa + (out_port_h - cfg->port_lo) / bs);
	} else {
		struct nx_sub *sub = nx_sub_lookup(cfg, (__u32)(word >> 16));

		if (sub)
			__sync_fetch_and_sub(&sub->low_used, 1);
	}
}

/* Outcome of nx_alloc_port: a port (>= 0) or a drop reason (negative). */
#define NX_ALLOC_ERR(reason) (-(int)(reason))
#define NX_ALLOC_AGAIN (-(int)NX_STAT_MAX) /* lost a race for a block slot: scan again */

static long nx_slots_cb(__u64 i, void *unused)
{
	struct nx_alloc_work *aw = nx_alloc_work_get();
	struct nx_config *cfg = nx_config();
	struct nx_slots *c;
	struct nx_sub *sub;
	/* Newest block first: slots fill from 0 up, so the older blocks are the full ones, and
	 * a subscriber holding many would otherwise scan them all for every new flow. */
	__u32 v, gid, slot;
	int port;

	if (!aw || !cfg)
		return 1;
	c = &aw->slots;
	sub = nx_sub_at(c->slot);
	if (!sub)
		return 1;
	slot = (c->nslots - 1 - (__u32)i) & (NX_MAX_BLOCKS_PER_SUB - 1);
	v = *(volatile __u32 *)&sub->blocks[slot];
	if (v == 0) {
		c->free_slot = slot; /* the scan runs downwards: it ends on the lowest */
		c->free_val = 0;
		return 0;
	}
	gid = v - 1;
	if (v == c->skip || gid - c->addr * cfg->blocks_per_addr >= cfg->blocks_per_addr ||
	    nx_is_home(cfg, c->sip, gid))
		return 0; /* tried first and full, on another address, or the home block */
	if (nx_block_reserve(gid, c->sip) < 0) {
		/* released by the daemon (or never ours): the slot is reusable */
		c->free_slot = slot;
		c->free_val = v;
		return 0;
	}
	port = nx_claim(c->slot, gid, c->pp, c->sip);
	if (port >= 0) {
		c->port = port;
		return 1;
	}
	nx_block_unreserve(gid);
	return 0;
}

/* How many of the subscriber's first max block slots are in use: slots fill from 0 up, so
 * this is one past the newest block (0: none). Global: a loop in the caller would leave
 * the verifier one state per exit, each with its own exact count, and that count indexes
 * the slots further on, so the states never merge and everything after the loop is
 * verified once per count (over 1M instructions on some 6.18 builds). Here the caller sees
 * one unknown scalar. */
__noinline __u32 nx_blocks_top(struct nx_sub *sub, __u32 max)
{
	__u32 top = max;

	if (!sub)
		return 0;
	for (__u32 i = 0; i < NX_MAX_BLOCKS_PER_SUB; i++) {
		if (top == 0 ||
		    *(volatile __u32 *)&sub->blocks[(top - 1) & (NX_MAX_BLOCKS_PER_SUB - 1)])
			break;
		top--;
	}
	return top;
}

/* nx_alloc_port took the subscriber's home block: its port is the home walk's to claim */
#define NX_ALLOC_HOME (-(int)NX_STAT_MAX - 1)

/* nx_alloc_port's last step, when every block the subscriber holds on its address is
 * full and a block slot is free (nx_slots: the walk's result): a new block on that
 * address, and a port in it. Global: its frame and the block scan's are not in the slots'
 * walk's chain, and the callers' values come from nx_slots, not from registers it would
 * keep across its calls. */
__noinline int nx_alloc_new_block(void)
{
	struct nx_alloc_work *aw = nx_alloc_work_get();
	struct nx_config *cfg = nx_config();
	struct nx_slots *c;
	struct nx_sub *sub;
	__u32 addr, sip;
	__s64 gid;
	int port;

	if (!aw || !cfg)
		return NX_ALLOC_ERR(NX_DROP_INTERNAL);
	c = &aw->slots;
	if (!nx_log_room(cfg))
		return NX_ALLOC_ERR(NX_DROP_LOG_FULL);
	addr = c->addr;
	sip = c->sip;
	/* the home block if it is on this address and free (the subscriber holds other
	 * blocks: mixed from the start), else any free one there */
	gid = nx_home_take(sip, addr, NX_BLOCK_MIXED);
	if (gid < 0)
		gid = nx_block_claim(cfg, addr, sip);
	if (gid < 0)
		return NX_ALLOC_ERR(NX_DROP_POOL_EXHAUSTED);
	aw = nx_alloc_work_get();
	sub = aw ? nx_sub_at(aw->slots.slot) : 0;
	if (!aw || !sub) {
		nx_block_unclaim(gid, sip);
		return NX_ALLOC_ERR(NX_DROP_INTERNAL);
	}
	c = &aw->slots;
	if (__sync_val_compare_and_swap(&sub->blocks[c->free_slot & (NX_MAX_BLOCKS_PER_SUB - 1)],
					c->free_val, (__u32)gid + 1) != c->free_val) {
		/* another CPU filled that slot first: give ours back, look again (once) */
		nx_block_unclaim(gid, sip);
		nx_count(NX_STAT_ALLOC_RETRY);
		return NX_ALLOC_AGAIN;
	}
	if (gid == nx_home_gid(sip)) {
		/* recorded; its reservation dropped (as a new subscriber's first block is): the
		 * walk reserves its own (the daemon releases a block only when seen empty twice) */
		nx_block_unreserve(gid);
		return NX_ALLOC_HOME;
	}
	port = nx_claim(c->slot, gid, c->pp, sip);
	if (port < 0) {
		nx_block_unreserve(gid);
		return NX_ALLOC_ERR(NX_DROP_INTERNAL);
	}
	return port;
}

/* Allocate an outside port for (sip, inside port) on pool address addr in the subscriber's
 * blocks other than its home block, taking a new block there when its blocks are full and
 * the quota allows: its home block if free (then NX_ALLOC_HOME), else any. slot: the
 * subscriber's entry; pp: NX_PP(protocol index, inside port). Global, scalar arguments:
 * verified once. The new block, when one is needed, is taken by its caller
 * (nx_alloc_port_new): this function's frame is then not under that path's. */
#define NX_ALLOC_NEW_BLOCK (-(int)NX_STAT_MAX - 2)
__noinline int nx_alloc_port(__u32 slot, __u32 addr, __u32 sip, __u32 pp)
{
	struct nx_config *cfg = nx_config();
	struct nx_sub *sub = nx_sub_at(slot);
	struct nx_alloc_work *aw = nx_alloc_work_get();
	__u32 max, top, cur;
	struct nx_slots *c;
	int port;

	if (!cfg || !sub || !aw)
		return NX_ALLOC_ERR(NX_DROP_INTERNAL);
	c = &aw->slots;
	c->skip = 0;
	max = cfg->max_blocks;

	if (max > NX_MAX_BLOCKS_PER_SUB)
		max = NX_MAX_BLOCKS_PER_SUB;
	c->addr = addr;
	c->slot = slot;
	c->sip = sip;
	c->pp = pp;
	c->free_slot = -1;
	c->port = -1;
	/* The block the last port came from first: the block slots (two more lines) are not
	 * read at all while it has room. (Never the home block: the walk claims there.) */
	cur = *(volatile __u32 *)&sub->cur_block;
	if (cur && cur - 1 - addr * cfg->blocks_per_addr < cfg->blocks_per_addr &&
	    (__s64)(cur - 1) != nx_home_gid(sip) && nx_block_reserve(cur - 1, sip) == 0) {
		port = nx_claim(slot, cur - 1, pp, sip);
		if (port >= 0)
			return port;
		nx_block_unreserve(cur - 1);
		c->skip = cur;
	}
	/* Slots fill from 0 up: skip the empty ones above the newest block with a plain loop
	 * (a few loads) rather than one callback each; the lowest of them is the slot a new
	 * block would take if every held block is full. */
	top = nx_blocks_top(sub, max);
	if (top > max)
		top = max;
	if (top < max)
		c->free_slot = top;
	c->nslots = top;
	bpf_loop(top, nx_slots_cb, 0, 0);
	if (c->port >= 0)
		return c->port;
	if (c->free_slot < 0)
		return NX_ALLOC_ERR(NX_DROP_QUOTA_EXCEEDED);
	return NX_ALLOC_NEW_BLOCK; /* nx_alloc_port_new takes one */
}

/* nx_alloc_port, and the new block it asks for (nx_alloc_new_block, with the walk's result
 * in nx_slots). */
static __always_inline int nx_alloc_port_new(__u32 slot, __u32 addr, __u32 sip, __u32 pp)
{
	int port = nx_alloc_port(slot, addr, sip, pp);

	return port == NX_ALLOC_NEW_BLOCK ? nx_alloc_new_block() : port;
}
/* Find or create the subscriber entry. A new subscriber gets a block on the pool address
 * the daemon designated (addr_hint), or on one of three addresses picked by a hash of its
 * own if that one is full. Returns the entry's slot, or minus a drop reason. */
static __always_inline long nx_subscriber(struct nx_config *cfg, __u32 sip)
{
	__u32 slot = nx_sub_lookup_slot(cfg, sip);
	__u32 n = cfg->n_addrs, a = 0, ti = NX_TAB_SUBS, *cnt;
	__s64 gid = -1, r;

	if (slot != NX_TAB_NONE)
		return slot;
	/* a full table refuses before a block is taken from the pool (nx_sub_insert checks
	 * again, exactly) */
	cnt = bpf_map_lookup_elem(&nx_tab_cnt, &ti);
	if (!cnt || *(volatile __u32 *)cnt >= cfg->sub_max)
		return -NX_DROP_TABLE_FULL;
	if (!n)
		return -NX_DROP_POOL_EXHAUSTED;
	if (!nx_log_room(cfg))
		return -NX_DROP_LOG_FULL;
	/* its home block when free (a new subscriber has no mapping anywhere: not mixed); a
	 * subscriber whose home another holds goes where the daemon designated */
	gid = nx_home_take(sip, NX_ANY_ADDR, 0);
	if (gid >= 0) {
		a = (__u32)gid / cfg->blocks_per_addr;
		goto claimed;
	}
#pragma unroll
	for (__u32 t = 0; t < 4; t++) {
		/* First the address the daemon designated; if a burst of new subscribers filled
		 * it before the next sweep, addresses spread by a hash of the subscriber's, so a
		 * burst does not pile onto the hint's neighbours. */
		a = t == 0 ? cfg->addr_hint % n : (sip * 2654435761u + t * 40503u) % n;
		gid = nx_block_claim(cfg, a, sip);
		if (gid >= 0)
			break;
	}
	if (gid < 0)
		return -NX_DROP_POOL_EXHAUSTED;
claimed:
	/* The block is recorded with its reservation dropped: the first port is claimed
	 * through the normal path, which reserves again. */
	nx_block_unreserve(gid);
	r = nx_sub_insert(sip, a, (__u32)gid);
	if (r < 0 || !(r & NX_TAB_NEW)) {
		/* lost the race to another CPU (or the table is full): give the block back */
		__u64 *w = nx_block(gid);

		if (w && __sync_val_compare_and_swap(w, (__u64)sip, 0) == (__u64)sip)
			nx_log_block(gid, sip, NX_LOG_BLOCK_FREE); /* its allocation was logged */
		if (r < 0)
			return r;
	} else {
		nx_count(NX_STAT_SUB_CREATED);
	}
	return (__u32)r;
}

/* nx_subscriber as a global function: the slot of subscriber sip's entry, created when
 * new, or minus a drop reason. Global, so that its frame (the new subscriber's block
 * claim) is not part of the allocator's, whose call chain is the data plane's deepest, and
 * verified once. */
__noinline long nx_sub_get(__u32 sip)
{
	struct nx_config *cfg = nx_config();

	if (!cfg)
		return -NX_DROP_INTERNAL;
	return nx_subscriber(cfg, sip);
}

/* Whether inside port in_port_h of protocol pidx is of the low class (RFC 4787 REQ-3, when
 * configured): its mapping is a port below 1024, always in the mapping table. */
static __always_inline int nx_low_class(struct nx_config *cfg, __u32 pidx, __u32 in_port_h)
{
	return (cfg->flags & NX_CF_PORT_CLASS) && in_port_h > 0 && in_port_h < 1024 &&
	       pidx != NX_P_ICMP;
}

/* Port class (RFC 4787 REQ-3): an inside port below 1024 gets an outside port below 1024.
 * Ports 1-1023 of every pool address are kept out of the block system for this (the
 * config refuses a pool.ports range reaching below 1024 while port_class is on); claimed
 * straight from the subscriber's address, with the same compare-and-swap. pp: NX_PP(protocol
 * index, inside port); slot: the subscriber's entry. Global: its scan's frame stays out of
 * the allocator's (the deepest call chain), and it is verified once. */
__noinline int nx_alloc_low_port(__u32 slot, __u32 addr, __u32 sip, __u32 pp)
{
	struct nx_config *cfg = nx_config();
	struct nx_sub *sub = nx_sub_at(slot);
	__u32 pidx = pp >> 16, in_port_h = pp & 0xffff;
	struct nx_alloc_work *aw = nx_alloc_work_get();
	struct nx_pscan *s;

	if (!cfg || !sub || !aw)
		return NX_ALLOC_ERR(NX_DROP_INTERNAL);
	s = &aw->scan;

	s->base = nx_port_index(addr, pidx, 1); /* offset k is port 1 + k */
	nx_pscan_init(s, 511);			/* ports 1..1022 in pairs; 1023 is left unused */
	s->word = nx_port_word(sip, in_port_h);
	s->found = -1;
	/* offset parity p gives ports of parity !p */
	s->par = (cfg->flags & NX_CF_PORT_PARITY) && pidx != NX_P_ICMP ? !(in_port_h & 1)
								       : bpf_get_prandom_u32() & 1;
	bpf_loop(s->half, nx_pscan_cb, 0, 0);
	if (s->found < 0) {
		s->par ^= 1;
		bpf_loop(s->half, nx_pscan_cb, 0, 0);
	}
	if (s->found < 0)
		return NX_ALLOC_ERR(NX_DROP_QUOTA_EXCEEDED);
	/* counted in the subscriber, which the daemon keeps while any is held: its pool
	 * address stays its own even with no block */
	__sync_fetch_and_add(&sub->low_used, 1);
	return 1 + s->found;
}

/* Per-subscriber limit on the rate of new mappings (RFC 6888 REQ-5): a token bucket of
 * max_new_per_sec tokens refilled continuously. Plain stores: two CPUs racing may both
 * take the last token, a bounded overshoot that keeps the fast path lock-free. */
static __always_inline int nx_rate_ok(struct nx_config *cfg, struct nx_sub *sub)
{
	__u32 rate = cfg->max_new_per_sec;
	__u64 now, add;

	if (!rate)
		return 1;
	now = bpf_ktime_get_coarse_ns();
	add = (now - sub->rate_ts) * rate / 1000000000ULL;
	if (add) {
		__u64 t = sub->rate_tokens + add;

		sub->rate_tokens = t > rate ? rate : (__u32)t;
		sub->rate_ts = now;
	}
	if (!sub->rate_tokens)
		return 0;
	sub->rate_tokens--;
	return 1;
}

/* The allocator's answer when the subscriber entry it worked on went away while it claimed
 * (a race with the reaper, which the claim lost and undid): counted as contention; the
 * caller claims once more (nx_dyn_map), and drops the packet as table_busy if that fails
 * too. */
#define NX_ALLOC_STALE (-(long)NX_DROP_TABLE_BUSY)

/* After a claim through a subscriber entry used without its lock (nx_alloc): the
 * reaper may have deleted the entry meanwhile (it held nothing when the daemon looked),
 * and a new entry, even of the same subscriber on another address, may have taken a slot.
 * The claim (always on the address nx_alloc read first) stands if subscriber sip has a
 * LIVE entry on that address; a delete in progress holds the entry BUSY for a few
 * instructions: wait it out. The claim's compare-and-swap orders it before this look, and
 * the reaper deletes only after setting BUSY and looking at the blocks and ports again, so
 * one of the two always sees the other. Otherwise the port word goes back to FREE (nobody
 * saw it) and its block's count down.
 * pp: NX_PP(protocol index, outside port); li: low << 16 | inside port. Returns
 * (pool index << 16) | port, or NX_ALLOC_STALE. Global, scalar arguments: its frame stays
 * out of the allocator's call chain (512-byte stack). */
__noinline long nx_alloc_confirm(__u32 sip, __u32 addr, __u32 pp, __u32 li)
{
	struct nx_config *cfg = nx_config();
	__u32 pidx = pp >> 16, port = pp & 0xffff, idx;
	__u64 word = nx_port_word(sip, (__u16)li);
	struct nx_sub *e = nx_sub_at(nx_sub_find_busy(sip));
	__u64 *w;

	if (!cfg)
		return NX_ALLOC_STALE;
	if (e && nx_sub_still(e, sip) && *(volatile __u32 *)&e->addr_idx == addr)
		return ((long)addr << 16) | port;
	idx = nx_port_index(addr, pidx, port);
	w = bpf_map_lookup_elem(&nx_ports, &idx);
	if (w && nx_port_unclaim_word(w, word) && !(li >> 16) && cfg->block_size &&
	    port >= cfg->port_lo)
		nx_block_unreserve(addr * cfg->blocks_per_addr +
				   (port - cfg->port_lo) / cfg->block_size);
	nx_count(NX_STAT_ALLOC_RETRY);
	return NX_ALLOC_STALE;
}

/* The allocator's entry point, for a mapping in the table: a port-class port, or a port
 * outside the subscriber's home block (home_full: the subscriber owns its home block and
 * the home walk found no room there). A global function: the verifier checks it once, on
 * its own, instead of once per path through the caller, and its scalar-only interface
 * keeps it honest. Returns (pool index << 16) | outside port, minus a drop reason,
 * NX_ALLOC_STALE (the subscriber entry went away meanwhile, the claim is undone: look the
 * subscriber up again and call again; see nx_alloc_confirm), or NX_ALLOC_HOME: the subscriber owns
 * its home block now (it is new, or took it here), where the home walk claims (nx_home.h). */
__noinline long nx_alloc(__u32 sip, __u32 pp, __u32 home_full, __u32 slot)
{
	/* one value kept across the subscriber lookup, not two: the allocator's calls nest to
	 * the 512-byte stack's limit */
	__u32 hp = (home_full ? 1u << 16 : 0) | (pp & 0xffff), pidx = pp >> 16;
	struct nx_config *cfg = nx_config();
	struct nx_sub *sub;
	int port, low;
	__u32 addr;

	if (!cfg)
		return -NX_DROP_INTERNAL;
	sub = nx_sub_at(slot);
	if (!sub)
		return -NX_DROP_INTERNAL;
	if (!nx_rate_ok(cfg, sub))
		return -NX_DROP_RATE_LIMITED;
	addr = *(volatile __u32 *)&sub->addr_idx;
	low = nx_low_class(cfg, pidx, hp & 0xffff);
	/* a new subscriber took its home block, or this one owns it since the walk looked:
	 * the walk claims there */
	if (!low && !(hp >> 16) && nx_home_owned(sip))
		return NX_ALLOC_HOME;
	if (low)
		port = nx_alloc_low_port((__u32)slot, addr, sip, NX_PP(pidx, hp));
	else
		port = nx_alloc_port_new((__u32)slot, addr, sip, NX_PP(pidx, hp));
	if (port == NX_ALLOC_AGAIN) /* the winner's block is in the slot now */
		port = nx_alloc_port_new((__u32)slot, addr, sip, NX_PP(pidx, hp));
	if (port == NX_ALLOC_AGAIN)
		port = NX_ALLOC_ERR(NX_DROP_QUOTA_EXCEEDED);
	if (port == NX_ALLOC_HOME)
		return !(hp >> 16) ? NX_ALLOC_HOME : NX_ALLOC_ERR(NX_DROP_INTERNAL);
	if (port < 0)
		return port;
	/* a port-class port counted in an entry that went away stays counted there, on
	 * purpose: that entry is dead (a new one starts from 0), or, rarer, the slot is
	 * another subscriber's now, whose count must never lose one it holds (its entry
	 * would go while it holds a port). One too many keeps that entry until natrix is
	 * restarted afresh: a leak of one entry, for a race that needs the reaper to free
	 * the entry and another subscriber to take its slot within these few instructions */
	return nx_alloc_confirm(sip, addr, NX_PP(pidx, port), (__u32)low << 16 | (__u16)hp);
}

/* The pool address of subscriber sip, creating the subscriber (and its first block) when
 * new: all a later fragment needs outbound, since every mapping of a subscriber is on
 * that one address. Returns the address (network order, as a non-negative long) or minus
 * a drop reason. Global: verified once. */
__noinline long nx_sub_pool_addr(__u32 sip)
{
	struct nx_config *cfg = nx_config();
	struct nx_sub *sub;
	__u32 idx, *addr;
	long slot;

	if (!cfg)
		return -NX_DROP_INTERNAL;
	if (cfg->det_count) {
		__u32 first;

		if (nx_det_range(cfg, sip, &idx, &first) < 0)
			return -NX_DROP_NOT_SUBSCRIBER;
	} else {
		slot = nx_sub_get(sip);
		if (slot < 0)
			return slot;
		sub = nx_sub_at((__u32)slot);
		if (!sub)
			return -NX_DROP_INTERNAL;
		idx = sub->addr_idx;
	}
	addr = bpf_map_lookup_elem(&nx_pool, &idx);
	if (!addr)
		return -NX_DROP_INTERNAL;
	return (long)*addr;
}

#endif /* NX_ALLOC_H */
