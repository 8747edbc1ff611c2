/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Deterministic NAT (RFC 7422), where the port word is the mapping.
 *
 * Subscriber i of the prefix [det_base, det_base + det_count) owns det_ports outside ports
 * starting at port_lo + (i % det_per_addr) * det_ports on pool address i / det_per_addr,
 * on every protocol: its pool address and port range follow from its address and the
 * configuration alone, so they need no log and no per-subscriber state.
 *
 * Inside the range, an inside endpoint's mapping is the USED port word naming it (address,
 * port, and a count of its sessions in bits 61..48). There is no mapping table: a new
 * connection touches its session's line and its port word's line, nothing else
 * (docs/design/performance-notebook.md, R26). The word is found from the endpoint by a walk: it
 * starts at the pair a keyed hash of the endpoint picks (RFC 6056 algorithm 3, without the remote
 * endpoint, as endpoint-independent mapping requires; the key is the tables' secret seed)
 * and goes on pair by pair along the endpoint's parity, at most det_probe pairs; then,
 * only if that part met no FREE word, along the other parity from the same pair, at most
 * det_probe pairs more (the parity fallback: endpoints that all use one parity, as TCP
 * connect() on Linux does, are not confined to half the range). On the way:
 *   - the endpoint's word: that is its mapping;
 *   - a FREE word ends the walk: the endpoint has no mapping;
 *   - anything else (another endpoint's word, a port on hold-down) is walked past.
 * A new mapping takes the first claimable word of the walk: FREE, or HELD with its
 * hold-down over. It never lands beyond a claimable word, so a word the daemon may turn
 * FREE (HELD, hold-down over by a margin, src/expiry.rs) gains no new dependents, and the
 * daemon frees it only when no live word's walk passes it (linear probing's deletion
 * rule). So no walk ever crosses a FREE word on its way to its endpoint's mapping.
 *
 * A packet that may open a connection walks under the endpoint's lock stripe (two CPUs
 * opening connections from one endpoint end with one mapping); lookups are lock-free,
 * session counts compare-and-swap. The last session's expiry (the reaper) puts the port on
 * hold-down, as in dynamic mode. */
#ifndef NX_DET_H
#define NX_DET_H

#include "nx_alloc.h"
#include "nx_common.h"
#include "nx_state.h"
#include "nx_parse.h"
#include "nx_port.h"
#include "nx_stats.h"
#include "nx_tab.h"

/* The endpoint's hash: which pair its walk starts at, and its lock stripe. */
static __always_inline __u64 nx_det_hash(struct nx_config *cfg, __u32 sip, __u32 pp)
{
	return nx_tab_hash((__u64)sip << 32 | pp, NX_DET_KEY, cfg->tab_seed);
}

/* The first candidate's offset in the range: 2 * pair + parity. The parity is the inside
 * port's when port parity is on (RFC 4787 section 4.2.2), else a bit of the hash, so
 * that every lookup of the endpoint walks the same chains in the same order. */
static __always_inline __u32 nx_walk_start(struct nx_config *cfg, __u64 h, __u32 pp, __u32 first,
					   __u32 npairs, enum nx_div_id npairs_div)
{
	__u32 par;

	if ((cfg->flags & NX_CF_PORT_PARITY) && (pp >> 16) != NX_P_ICMP)
		par = (pp ^ first) & 1;
	else
		par = (__u32)(h >> 40) & 1;
	return 2 * nx_umod(cfg, (__u32)h, npairs, npairs_div) + par;
}

static __always_inline __u32 nx_det_start(struct nx_config *cfg, __u64 h, __u32 pp, __u32 first)
{
	return nx_walk_start(cfg, h, pp, first, cfg->det_ports / 2, NX_DIV_DET_PAIRS);
}

/* A deterministic mapping seen as a struct nx_map, in the per-CPU scratch, for the code
 * that handles both modes: inside endpoint in_ip:in_port (network order), protocol index
 * pidx, pool index addr_idx, outside port port_h (host order). Valid until the next packet
 * on this CPU. Returns 0, or -1. */
static __always_inline int nx_det_fill(__u32 in_ip, __u16 in_port, __u32 pidx, __u32 addr_idx,
				       __u16 port_h)
{
	struct nx_scratch *scr = nx_scratch_get();
	__u32 *out_ip;

	if (!scr || pidx >= NX_NPROTO)
		return -1;
	out_ip = bpf_map_lookup_elem(&nx_pool, &addr_idx);
	if (!out_ip)
		return -1;
	scr->dmap.key.in_ip = in_ip;
	scr->dmap.key.in_port = in_port;
	scr->dmap.key.proto = pidx == NX_P_TCP	 ? IPPROTO_TCP
			      : pidx == NX_P_UDP ? IPPROTO_UDP
						 : IPPROTO_ICMP;
	scr->dmap.key.pad = 0;
	scr->dmap.out_ip = *out_ip;
	scr->dmap.out_port = bpf_htons(port_h);
	scr->dmap.flags = NX_MF_DET;
	scr->dmap.nsess = 0;
	scr->dmap.expire = 0;
	scr->dmap.pad = nx_port_index(addr_idx, pidx, port_h);
	return 0;
}

/* ---- the walk ---- */
struct nx_dwalk {
	__u64 key;    /* the endpoint's USED word with a session count of 0 */
	__u32 base;   /* nx_ports index of the range's first port */
	__u16 nports; /* det_ports */
	__u16 start;  /* first candidate's offset */
	__u32 probe;  /* pairs walked on each parity */
	__u32 now_s;  /* CLOCK_MONOTONIC second, read at the first HELD word a claim meets */
	__u32 hold;   /* HELD is claimable when now_s - released >= hold; ~0: claims nothing */
	__s32 found;  /* offset of the endpoint's word, or -1 */
	__s32 avail;  /* offset of the first claimable word, or -1 */
};

/* The walk's state, per CPU (the same reasoning as struct nx_alloc_work, nx_alloc.h): the
 * walks are in the packet path's deepest call chains, and one CPU runs one walk at a time
 * (nx_det_map and nx_home_map never call each other). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_dwalk);
} nx_dwalk_work SEC(".maps");

/* The walk's state, zeroed. */
static __always_inline struct nx_dwalk *nx_dwalk_get(void)
{
	__u32 zero = 0;
	struct nx_dwalk *d = bpf_map_lookup_elem(&nx_dwalk_work, &zero);

	if (d)
		__builtin_memset(d, 0, sizeof(*d));
	return d;
}

static long nx_det_walk_cb(__u64 i, void *unused)
{
	__u32 zero = 0;
	struct nx_dwalk *d = bpf_map_lookup_elem(&nx_dwalk_work, &zero);
	__u32 k, idx;
	__u64 *pw, w;

	if (!d)
		return 1;

	/* the endpoint's parity first, then the other one from the same pair */
	if ((__u32)i < d->probe)
		k = d->start + 2 * (__u32)i;
	else
		k = (d->start ^ 1) + 2 * ((__u32)i - d->probe);
	if (k >= d->nports)
		k -= d->nports;
	idx = d->base + k;
	pw = bpf_map_lookup_elem(&nx_ports, &idx);
	if (!pw)
		return 1;
	w = *(volatile __u64 *)pw;
	if (w == 0) {
		if (d->avail < 0)
			d->avail = (__s32)k;
		return 1;
	}
	if ((w & ~NX_PORT_NSESS_MASK) == d->key) {
		d->found = (__s32)k;
		return 1;
	}
	if (d->avail < 0 && d->hold != ~0u && NX_PORT_STATE(w) == NX_PORT_HELD) {
		/* the clock only when it matters: most claims meet no HELD word */
		if (!d->now_s)
			d->now_s = (__u32)(bpf_ktime_get_ns() / 1000000000ULL);
		if (nx_port_claimable(w, d->now_s, d->hold))
			d->avail = (__s32)k;
	}
	return 0;
}

/* With d walked once (n steps) and d->avail >= 0 the word to claim: claim it with a
 * compare-and-swap to d->key. When another endpoint's claim took it first, walk again and
 * try the word that walk offers, three tries at most. Returns 1 with *old the word the claim
 * replaced (0 FREE, or a HELD word), or 0: no claim, and d->found >= 0 if the endpoint's
 * own word appeared meanwhile. Deterministic ranges and home blocks (nx_home.h) alike. */
static __always_inline int nx_walk_claim(struct nx_dwalk *d, __u32 n, __u64 *old)
{
	__u64 *pw, w;
	__u32 idx;

	/* unrolled: as a loop, 6.18's precision backtracking reaches a helper call here with
	 * registers still to mark and refuses the program ("verifier bug: backtracking call
	 * unexpected regs") */
#pragma unroll
	for (int t = 0; t < 3; t++) {
		idx = d->base + (__u32)d->avail;
		pw = bpf_map_lookup_elem(&nx_ports, &idx);
		if (!pw)
			return 0;
		w = *(volatile __u64 *)pw;
		if (nx_port_claimable(w, d->now_s, d->hold) && nx_port_claim(pw, w, d->key)) {
			*old = w;
			return 1;
		}
		nx_count(NX_STAT_ALLOC_RETRY);
		if (t == 2)
			break;
		d->found = -1;
		d->avail = -1;
		bpf_loop(n, nx_det_walk_cb, 0, 0);
		if (d->found >= 0 || d->avail < 0)
			break;
	}
	return 0;
}

/* Find (create = 0), or find or claim (create = 1), the mapping of inside endpoint sip,
 * pp = NX_PP(protocol index, inside port): its word in sip's range, left as a struct
 * nx_map in the scratch (nx_det_cur). Returns (pool index << 16) | outside port (host
 * order), with bit 32 set when this call claimed the word (its session count is then 0:
 * nx_map_ref counts the first session), or minus a drop reason. Global, scalar arguments:
 * verified once. */
__noinline long nx_det_map(__u32 sip, __u32 pp, __u32 create)
{
	struct nx_config *cfg = nx_config();
	struct nx_dwalk *d = nx_dwalk_get();
	__u32 a, first, n, *lock;
	int claimed = 0;
	__u64 h, w;

	if (!cfg || !d || (pp >> 16) >= NX_NPROTO || cfg->det_ports < 2)
		return -NX_DROP_INTERNAL;
	if (nx_det_range(cfg, sip, &a, &first) < 0)
		return -NX_DROP_NOT_SUBSCRIBER;
	h = nx_det_hash(cfg, sip, pp);
	d->base = nx_port_index(a, pp >> 16, first);
	d->nports = cfg->det_ports & ~1u;
	d->start = nx_det_start(cfg, h, pp, first);
	d->key = nx_port_word(sip, (__u16)pp);
	d->found = -1;
	d->avail = -1;
	n = cfg->det_probe;
	if (n > d->nports / 2)
		n = d->nports / 2;
	d->probe = n;
	n *= 2; /* both parities' parts: a FREE word ends the walk before the second */
	if (!create) {
		/* a lookup: lock-free, claims nothing */
		d->hold = ~0u;
		bpf_loop(n, nx_det_walk_cb, 0, 0);
		if (d->found >= 0)
			goto found;
		return -NX_DROP_NO_MAPPING;
	}
	/* a packet that may open a connection: one walk under the endpoint's lock finds its
	 * mapping or the word to claim (no lock-free walk first: a new connection's endpoint
	 * usually has no mapping yet) */
	lock = nx_tab_lock(h);
	if (!lock)
		return -NX_DROP_INTERNAL;
	if (nx_tab_lock_take(lock) < 0)
		return -NX_DROP_TABLE_BUSY;
	d->hold = cfg->hold_down_s;
	bpf_loop(n, nx_det_walk_cb, 0, 0);
	if (d->found < 0 && d->avail >= 0)
		claimed = nx_walk_claim(d, n, &w);
	nx_tab_lock_drop(lock);
	if (d->found < 0) {
		if (!claimed)
			return -NX_DROP_QUOTA_EXCEEDED;
		nx_count(NX_STAT_MAP_CREATED);
		d->found = d->avail;
	}
found:
	if (nx_det_fill(sip, bpf_htons((__u16)pp), pp >> 16, a, first + (__u32)d->found) < 0)
		return -NX_DROP_INTERNAL;
	return (long)claimed << 32 | (long)a << 16 | (first + (__u32)d->found);
}

/* The mapping the last nx_det_fill on this CPU left. */
static __always_inline struct nx_map *nx_det_cur(void)
{
	struct nx_scratch *scr = nx_scratch_get();

	return NX_FIELD_OR_NULL(scr, dmap);
}

/* The deterministic mapping whose port word (USED) names inside endpoint mk, on pool
 * index addr_idx, outside port out_port (network order), as a struct nx_map (nx_det_fill).
 * Global, scalar arguments: verified once, and the packet path's frame stays as it was. */
__noinline int nx_det_view_at(__u32 in_ip, __u32 in_port_proto, __u32 addr_idx, __u32 out_port)
{
	__u8 proto = (__u8)(in_port_proto >> 16);

	return nx_det_fill(in_ip, (__u16)in_port_proto, nx_proto_idx(proto), addr_idx,
			   bpf_ntohs((__u16)out_port));
}

static __always_inline struct nx_map *nx_det_view(struct nx_map_key *mk, __u32 addr_idx,
						  __be16 out_port)
{
	if (nx_det_view_at(mk->in_ip, (__u32)mk->proto << 16 | mk->in_port, addr_idx, out_port) < 0)
		return 0;
	return nx_det_cur();
}

static __always_inline __u64 nx_det_key(struct nx_map *m)
{
	return nx_port_word(m->key.in_ip, bpf_ntohs(m->key.in_port));
}

#endif /* NX_DET_H */
