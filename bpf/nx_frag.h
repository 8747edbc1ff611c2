/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Fragments (RFC 4787 REQ-14), in order and out of order, with bounded resources.
 *
 * Outbound needs no state: a later fragment only needs its source rewritten, and every
 * mapping of a subscriber is on one pool address (paired pooling). Inbound, the first
 * fragment names the inside endpoint through its port; its translation leaves a record in
 * nx_frags for the rest of the datagram. A fragment that arrives before its first is copied
 * to nx_frag_rb and dropped here; the daemon re-injects it when the record appears, or
 * forgets it after fragments.timeout (src/frag.rs). nx_frags is an LRU of
 * fragments.max_tracked records, the ring buffer holds fragments.max_held fragments.
 */
#ifndef NX_FRAG_H
#define NX_FRAG_H

#include "nx_alloc.h"
#include "nx_csum.h"
#include "nx_state.h"
#include "nx_parse.h"
#include "nx_session.h"
#include "nx_exit.h"

static __always_inline void nx_frag_key_of(struct nx_pkt *p, struct nx_frag_key *k)
{
	k->src = p->ip->saddr;
	k->dst = p->ip->daddr;
	k->id = p->ip->id;
	k->proto = p->proto;
	k->pad = 0;
}

/* After the first fragment of an inbound datagram was looked up (not yet rewritten). */
static __always_inline void nx_frag_record(struct nx_config *cfg, struct nx_pkt *p, __u32 in_ip,
					   __u32 now)
{
	struct nx_frag_key k;
	struct nx_frag v = {.in_ip = in_ip, .expire = now + cfg->frag_timeout};

	nx_frag_key_of(p, &k);
	bpf_map_update_elem(&nx_frags, &k, &v, BPF_ANY);
}

/* A later fragment going out: source becomes the subscriber's pool address. Returns NX_OK
 * when translated, else minus a drop reason. */
static __always_inline int nx_frag_out(struct nx_pkt *p)
{
	long addr = nx_sub_pool_addr(p->ip->saddr);
	__u32 old;

	if (addr < 0)
		return (int)addr;
	old = p->ip->saddr;
	p->ip->saddr = (__u32)addr;
	nx_csum_replace4(&p->ip->check, old, (__u32)addr);
	nx_count(NX_STAT_FRAG_OUT);
	return NX_OK;
}

/* A later fragment coming in: translated if its first was, else held for the daemon, whole
 * (a jumbo link's fragment too, up to NX_FRAG_HOLD_MAX bytes; never cut). Returns NX_OK when
 * translated, -NX_STAT_FRAG_HELD when held (the frame's copy is the daemon's: dropped here), or
 * minus a drop reason. */
static __always_inline int nx_frag_in(struct xdp_md *ctx, struct nx_pkt *p, __u32 now)
{
	struct nx_frag_key k;
	struct nx_frag *f;
	struct nx_frag_hold *h;
	__u32 len, old;

	nx_frag_key_of(p, &k);
	f = bpf_map_lookup_elem(&nx_frags, &k);
	if (f && (__s32)(f->expire - now) > 0) {
		old = p->ip->daddr;
		p->ip->daddr = f->in_ip;
		nx_csum_replace4(&p->ip->check, old, f->in_ip);
		nx_count(NX_STAT_FRAG_IN);
		return NX_OK;
	}
	len = nx_ntohs_len(p->ip->tot_len);
	if (len > NX_FRAG_HOLD_MAX)
		return -NX_DROP_FRAG_TOO_BIG;
	/* a record of the size it needs: a fragment of a 1500-byte link takes 1.5 KiB of the
	 * ring, a jumbo one up to 9 KiB (the size must be a constant) */
	if (len <= NX_FRAG_HOLD_SMALL)
		h = bpf_ringbuf_reserve(&nx_frag_rb, NX_FRAG_REC_SMALL, 0);
	else
		h = bpf_ringbuf_reserve(&nx_frag_rb, sizeof(*h), 0);
	if (!h)
		return -NX_DROP_FRAG_NO_STATE;
	h->key = k;
	h->len = len;
	if (len < 20 || bpf_xdp_load_bytes(ctx, sizeof(struct ethhdr), h->data, len)) {
		bpf_ringbuf_discard(h, 0);
		return -NX_DROP_FRAG_NO_STATE;
	}
	bpf_ringbuf_submit(h, 0);
	return -NX_STAT_FRAG_HELD;
}

#endif /* NX_FRAG_H */
