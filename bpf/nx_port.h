/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The port word: one u64 per outside endpoint (pool address, protocol, port) in nx_ports,
 * its encoding, and every change of state the data plane makes to it. What a port is, and
 * who moves it where:
 *
 *   FREE (0)     -> USED    claimed for a table mapping: nx_port_claim (the allocator,
 *                           nx_alloc.h); claimed by a walk, where the word is the mapping
 *                           (a home block its subscriber owns, nx_home.h; deterministic
 *                           ranges, nx_det.h): nx_walk_claim, nx_port_claimable
 *   USED         -> FREE    a claim nobody ever saw (lost its insert race, or its
 *                           subscriber entry went away): nx_port_unclaim_word
 *   USED         -> USED    a walk word's session count, up and down: nx_port_ref,
 *                           nx_port_unref
 *   USED         -> HELD    hold-down starts, stamped with the second: the reaper deleting
 *                           a table mapping (nx_port_hold, run from nx_ctl.h); the last
 *                           session of a walk word going (nx_port_unref)
 *   HELD         -> USED    a walk reclaims a word whose hold-down is over
 *                           (nx_port_claimable)
 *   HELD         -> FREE    the daemon, after the hold-down (src/: the port word's module)
 *   FREE <-> STATIC         the daemon, for a static forward (the word through mmap, its
 *                           mapping through nx_ctl)
 *
 * Bits (nx_types.h, enum nx_port_bits): state in the top bits; USED: inside address and
 * port, and on a walk word its session count; HELD: the second the hold-down started. */
#ifndef NX_PORT_H
#define NX_PORT_H

#include "nx_common.h"
#include "nx_parse.h"
#include "nx_state.h"
#include "nx_stats.h"

/* One session on a walk word's count. */
#define NX_PORT_NSESS_ONE (1ULL << NX_PORT_NSESS_SHIFT)

/* nx_ports' index of an outside endpoint: pool index, protocol index, port (host order). */
static __always_inline __u32 nx_port_index(__u32 addr_idx, __u32 pidx, __u32 port)
{
	return ((addr_idx * NX_NPROTO + pidx) << 16) | port;
}

/* The word a claimed port holds: state USED, inside address and port (host order). */
static __always_inline __u64 nx_port_word(__u32 in_ip, __u16 in_port_h)
{
	return NX_PORT_TAG(NX_PORT_USED) | ((__u64)in_ip << NX_PORT_IP_SHIFT) | in_port_h;
}

#define NX_PORT_WORD_IP(w) ((__u32)((w) >> NX_PORT_IP_SHIFT))
#define NX_PORT_WORD_PORT(w) ((__u16)(w))

/* FREE -> USED (or, for a walk, the FREE or HELD word seen -> USED): a compare-and-swap
 * from the word seen, old, to the claim's word. Returns whether this claim won. */
static __always_inline int nx_port_claim(__u64 *w, __u64 old, __u64 word)
{
	return __sync_val_compare_and_swap(w, old, word) == old;
}

/* USED -> FREE for a claim that never became visible (nobody used it: no hold-down).
 * Returns whether the word was still that claim's. */
static __always_inline int nx_port_unclaim_word(__u64 *w, __u64 word)
{
	return __sync_val_compare_and_swap(w, word, 0) == word;
}

/* USED -> HELD: the reaper deleted the table mapping of inside endpoint word at outside
 * port out_port_h of pool index addr_idx, protocol index pidx; the hold-down starts at
 * second now_s. Returns whether the word was that mapping's (and is HELD now). */
static __always_inline int nx_port_hold(__u32 addr_idx, __u32 pidx, __u16 out_port_h, __u64 word,
					__u32 now_s)
{
	__u32 idx = nx_port_index(addr_idx, pidx, out_port_h);
	__u64 *pw = bpf_map_lookup_elem(&nx_ports, &idx);

	return pw &&
	       __sync_val_compare_and_swap(pw, word, NX_PORT_TAG(NX_PORT_HELD) | now_s) == word;
}

/* Whether word w may be claimed by a walk at second now_s: FREE, or HELD with its
 * hold-down of hold seconds over. */
static __always_inline int nx_port_claimable(__u64 w, __u32 now_s, __u32 hold)
{
	if (w == 0)
		return 1;
	return now_s && NX_PORT_STATE(w) == NX_PORT_HELD && (__s32)(now_s - (__u32)w) >= 0 &&
	       now_s - (__u32)w >= hold;
}

/* One more session on the deterministic mapping whose word is nx_ports[idx] and whose
 * endpoint's word (session count 0) is key: 0, or -1 when the word is no longer the
 * endpoint's (released meanwhile), -2 when it counts NX_PORT_NSESS_MAX sessions already.
 * Global, scalar arguments: the packet path's frame stays as it was. */
__noinline int nx_port_ref(__u32 idx, __u64 key)
{
	__u64 *pw = bpf_map_lookup_elem(&nx_ports, &idx), old;

	if (!pw)
		return -1;
	for (int t = 0; t < 4; t++) {
		old = *(volatile __u64 *)pw;
		if ((old & ~NX_PORT_NSESS_MASK) != key)
			return -1;
		if ((old & NX_PORT_NSESS_MASK) == NX_PORT_NSESS_MASK)
			return -2;
		if (__sync_val_compare_and_swap(pw, old, old + NX_PORT_NSESS_ONE) == old)
			return 0;
		nx_count(NX_STAT_ALLOC_RETRY);
	}
	return -1;
}

/* The reaper: one session fewer on the mapping of inside endpoint mk, outside endpoint
 * out_ip:out_port. The last one out puts the port on hold-down (released at now_s).
 * Returns 1 when it released the mapping. */
static __always_inline int nx_port_unref(struct nx_config *cfg, struct nx_map_key *mk, __u32 out_ip,
					 __be16 out_port, __u32 now_s)
{
	__u64 key = nx_port_word(mk->in_ip, bpf_ntohs(mk->in_port)), old, nw, *pw;
	__u32 a, idx;

	if (!nx_pool_index(cfg, out_ip, &a))
		return 0;
	idx = nx_port_index(a, nx_proto_idx(mk->proto), bpf_ntohs(out_port));
	pw = bpf_map_lookup_elem(&nx_ports, &idx);
	if (!pw)
		return 0;
#pragma unroll
	for (int t = 0; t < 8; t++) {
		old = *(volatile __u64 *)pw;
		if ((old & ~NX_PORT_NSESS_MASK) != key || !(old & NX_PORT_NSESS_MASK))
			return 0;
		nw = (old & NX_PORT_NSESS_MASK) == NX_PORT_NSESS_ONE
			 ? NX_PORT_TAG(NX_PORT_HELD) | now_s
			 : old - NX_PORT_NSESS_ONE;
		if (__sync_val_compare_and_swap(pw, old, nw) == old)
			return NX_PORT_STATE(nw) == NX_PORT_HELD;
	}
	/* Lost to busy session counting eight times: this session's count is still on the
	 * word, so the word stays the endpoint's and a plain atomic subtract is safe. Had it
	 * been the last one, the word goes on hold-down here, or, if a new session counted
	 * itself meanwhile, stays; a word left with no session is the daemon's (two sweeps). */
	old = __sync_fetch_and_sub(pw, NX_PORT_NSESS_ONE);
	if ((old & NX_PORT_NSESS_MASK) == NX_PORT_NSESS_ONE &&
	    __sync_val_compare_and_swap(pw, key, NX_PORT_TAG(NX_PORT_HELD) | now_s) == key)
		return 1;
	return 0;
}

/* ---- reading ---- */

/* The inside endpoint an outside endpoint's port word names: its state (NX_PORT_USED or
 * NX_PORT_STATIC), or 0 when it names none. */
static __always_inline int nx_port_owner(__u32 addr_idx, __u8 proto, __be16 out_port,
					 struct nx_map_key *mk)
{
	__u32 idx = nx_port_index(addr_idx, nx_proto_idx(proto), bpf_ntohs(out_port));
	__u64 *pw, w;

	pw = bpf_map_lookup_elem(&nx_ports, &idx);
	if (!pw)
		return 0;
	w = *pw;
	if (NX_PORT_STATE(w) != NX_PORT_USED && NX_PORT_STATE(w) != NX_PORT_STATIC)
		return 0;
	mk->in_ip = NX_PORT_WORD_IP(w);
	mk->in_port = bpf_htons(NX_PORT_WORD_PORT(w));
	mk->proto = proto;
	mk->pad = 0;
	return (int)NX_PORT_STATE(w);
}

/* The state of an outside endpoint's port word. */
static __always_inline __u64 nx_word_state(__u32 addr_idx, __u8 proto, __be16 out_port)
{
	__u32 idx = nx_port_index(addr_idx, nx_proto_idx(proto), bpf_ntohs(out_port));
	__u64 *pw = bpf_map_lookup_elem(&nx_ports, &idx);

	return pw ? NX_PORT_STATE(*(volatile __u64 *)pw) : 0;
}

#endif /* NX_PORT_H */
