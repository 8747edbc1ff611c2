/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Forwarding: the kernel's FIB and neighbour table decide, XDP redirects. Anything the
 * FIB cannot finish (unresolved neighbour, local destination, ...) goes to the kernel.
 *
 * The FIB cache. bpf_fib_lookup (route, next hop, neighbour, MTU) cost 90 of the minimal
 * forwarder's 105 ns per packet on this project's machine, and 90 of the 136 ns natrix
 * spends on an established packet (docs/design/performance-notebook.md, R23). Its answer depends on
 * a few fields of the packet and on the routing state, which changes rarely. So each CPU keeps the
 * answers it got in a direct-mapped table (nx_fibc, fib_cache.entries slots of one cache line),
 * keyed by everything the answer depends on: ingress interface, destination, TOS, and also source
 * and protocol unless the daemon found that the routing answers on the destination alone
 * (NX_FIBC_BY_DST). An answer is reused while
 *   - the generation word is unchanged: the daemon changes it as soon as netlink reports a
 *     change of routes, policy rules, neighbours, links or addresses (src/fibwatch.rs);
 *   - it is younger than fib_cache.max_age: the bound when there is no daemon to tell
 *     (natrix keeps translating while it restarts), and for what netlink does not report
 *     (a path MTU learnt from ICMP);
 *   - the packet is no longer than the longest one the kernel passed for this answer: the
 *     MTU check stays the kernel's.
 * Only successful answers are kept: whatever the kernel must finish goes to it every time.
 * A miss costs the lookup it replaces plus one store; the cache holds no state anything
 * else depends on, so a collision only evicts. Per CPU: no sharing, no atomics, and an XDP
 * program is never interrupted by another on its CPU. */
#ifndef NX_FWD_H
#define NX_FWD_H

#include "nx_common.h"
#include "nx_csum.h"
#include "nx_state.h"
#include "nx_parse.h"
#include "nx_exit.h"

static __always_inline void nx_fib_params(struct xdp_md *ctx, struct iphdr *ip,
					  struct bpf_fib_lookup *fib)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET;
	fib->tos = ip->tos;
	fib->l4_protocol = ip->protocol;
	fib->tot_len = bpf_ntohs(ip->tot_len);
	fib->ipv4_src = ip->saddr;
	fib->ipv4_dst = ip->daddr;
	fib->ifindex = ctx->ingress_ifindex;
}

static __always_inline __u32 nx_fibc_slot(__u32 dst, __u32 src, __u32 iif, __u32 mask)
{
	__u64 h = ((__u64)dst << 32 | (src ^ (iif << 24))) * 0x9e3779b97f4a7c15ULL;

	return (__u32)(h >> 40) & mask;
}

/* bpf_fib_lookup(ctx, fib) through the FIB cache: fib holds the parameters; on
 * BPF_FIB_LKUP_RET_SUCCESS it holds the egress ifindex and both MACs, whether from the
 * cache or from the kernel (whose other outputs only a miss fills in). A subprogram: five
 * callers, one copy. */
static __noinline int nx_fib_lookup(struct xdp_md *ctx, struct bpf_fib_lookup *fib)
{
	struct nx_config *cfg = nx_config();
	__u32 dst = fib->ipv4_dst, src = fib->ipv4_src, iif = fib->ifindex, zero = 0;
	__u32 gen = 0, now = 0, idx;
	__u64 jiffies = 0;
	struct nx_fibc_gen *g;
	__u16 len = fib->tot_len;
	__u8 tos = fib->tos, proto = fib->l4_protocol;
	struct nx_fibc_ent *e = 0;
	int rc, fresh = 0;

	if (cfg && cfg->fibc_max_age) {
		g = bpf_map_lookup_elem(&nx_fibc_gen, &zero);
		if (g) {
			jiffies = bpf_jiffies64(); /* once: the sign of life and the age */
			now = (__u32)jiffies;
			gen = (__u32) * (volatile __u64 *)&g->word;
			/* destination alone only while the watcher lives to say otherwise; its
			 * sign of life is a CLOCK_MONOTONIC tick, which may lie a little ahead of
			 * the packet path's jiffies-derived one (NX_FIBC_SKEW) */
			if ((gen & NX_FIBC_BY_DST) &&
			    nx_tick_of(cfg, jiffies) - (__u32) * (volatile __u64 *)&g->alive +
				    NX_FIBC_SKEW <=
				NX_FIBC_ALIVE + NX_FIBC_SKEW) {
				src = 0;
				proto = 0;
			} else {
				gen &= ~NX_FIBC_BY_DST;
			}
			idx = nx_fibc_slot(dst, src, iif, cfg->fibc_mask);
			e = bpf_map_lookup_elem(&nx_fibc, &idx);
		}
	}
	if (e) {
		fresh = e->dst == dst && e->src == src && e->iif == iif && e->tos == tos &&
			e->proto == proto && e->gen == gen && now - e->born < cfg->fibc_max_age;
		if (fresh && len <= e->ok_len) {
			fib->ifindex = e->oif;
			__builtin_memcpy(fib->dmac, e->dmac, ETH_ALEN);
			__builtin_memcpy(fib->smac, e->smac, ETH_ALEN);
			return BPF_FIB_LKUP_RET_SUCCESS;
		}
	}
	nx_count(NX_STAT_FIB_LOOKUP);
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS || !e)
		return rc;
	/* A fresh entry missed only for a packet longer than its ok_len: if the answer is the
	 * same, that length passes too, and the entry keeps its age. */
	if (!fresh || e->oif != fib->ifindex)
		e->born = now;
	e->dst = dst;
	e->src = src;
	e->iif = iif;
	e->tos = tos;
	e->proto = proto;
	e->gen = gen;
	e->ok_len = len;
	e->oif = fib->ifindex;
	__builtin_memcpy(e->dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(e->smac, fib->smac, ETH_ALEN);
	return rc;
}

static __always_inline int nx_fib(struct xdp_md *ctx, struct iphdr *ip, struct bpf_fib_lookup *fib)
{
	nx_fib_params(ctx, ip, fib);
	return nx_fib_lookup(ctx, fib);
}

static __always_inline __u32 nx_iface_role(__u32 ifindex)
{
	struct nx_iface *i;

	if (ifindex < NX_IFROLE_DIRECT) {
		struct nx_iface *r = bpf_map_lookup_elem(&nx_ifrole, &ifindex);

		return r ? r->role : NX_ROLE_NONE;
	}
	i = bpf_map_lookup_elem(&nx_ifaces, &ifindex);
	return i ? i->role : NX_ROLE_NONE;
}

/* Whether the frame at ctx is for natrix: broadcast, multicast, or unicast to a MAC of the
 * receiving interface (its own or a virtual one, nx_iface.macs). A unicast frame for
 * another host (a switch flooding an unknown destination, promiscuous mode) is not: the
 * kernel ignores it, natrix must neither translate nor forward it. An interface without a
 * MAC (nmacs 0) takes everything; a frame too short for Ethernet is the parser's. A frame for
 * a virtual MAC gets the interface's own as its destination. */
static __always_inline int nx_for_us(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u32 ifindex = ctx->ingress_ifindex;
	struct nx_iface *i;
	__u64 d;
	__u32 n;

	if (data + ETH_HLEN > end || (*(__u8 *)data & 1))
		return 1;
	i = ifindex < NX_IFROLE_DIRECT ? bpf_map_lookup_elem(&nx_ifrole, &ifindex)
				       : bpf_map_lookup_elem(&nx_ifaces, &ifindex);
	if (!i || !i->nmacs)
		return 1;
	d = (__u64) * (__u32 *)data | (__u64) * (__u16 *)(data + 4) << 32;
	if (i->macs[0] == d)
		return 1;
	n = i->nmacs;
	nx_static_assert(NX_IF_MACS == 4, "nx_for_us compares four MACs");
	if ((n > 1 && i->macs[1] == d) || (n > 2 && i->macs[2] == d) ||
	    (n > 3 && i->macs[3] == d)) {
		/* A virtual MAC is the interface's own from here on: a frame natrix passes to
		 * the kernel (an unresolved next hop, ARP) must not be discarded there as
		 * addressed to another host. */
		__builtin_memcpy(data, &i->macs[0], ETH_ALEN);
		return 1;
	}
	return 0;
}

/* Decrement TTL (the caller checked it is > 1), set the MACs the FIB gave, redirect. */
static __always_inline nx_verdict nx_redirect(struct nx_pkt *p, struct bpf_fib_lookup *fib)
{
	struct iphdr *ip = p->ip;
	__u16 old = *(__u16 *)&ip->ttl, new;

	/* TTL is the high byte of its 16-bit word in network order, and it is > 1: the word
	 * minus 0x0100 (no borrow) is the word with TTL - 1. The new word is computed in a
	 * register and stored whole: decrementing the byte in place and then loading the word
	 * around it for the checksum makes that load wait for the byte store (a narrower store
	 * does not forward to a wider load). The profile of one flow put 7.6% of the program's
	 * samples on that load; timed, the difference stayed within the noise (R21). */
	new = old - bpf_htons(0x0100);
	*(__u16 *)&ip->ttl = new;
	nx_csum_replace2(&ip->check, old, new);
	__builtin_memcpy(p->eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, fib->smac, ETH_ALEN);
	/* An egress interface natrix is not attached to is not in nx_tx: the kernel forwards. */
	if (bpf_redirect_map(&nx_tx, fib->ifindex, XDP_PASS) == XDP_PASS)
		return nx_pass(NX_STAT_PASS_FIB_OTHER);
	return nx_redirected(NX_STAT_REDIRECT);
}

/* Finish a packet already translated: forward it ourselves when the FIB can, otherwise let
 * the kernel forward the translated packet (it resolves the neighbour or fragments). */
static __always_inline nx_verdict nx_finish(struct xdp_md *ctx, struct nx_pkt *p,
					    struct bpf_fib_lookup *fib)
{
	int rc = nx_fib(ctx, p->ip, fib);

	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		return nx_redirect(p, fib);
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return nx_pass(NX_STAT_PASS_NO_NEIGH);
	default:
		return nx_pass(NX_STAT_PASS_FIB_OTHER);
	}
}

#endif /* NX_FWD_H */
