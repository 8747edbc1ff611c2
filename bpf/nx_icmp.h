/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* ICMP errors: translating the ones that cross natrix (RFC 5508 sections 4.2, 7) and
 * sending the ones natrix itself owes a sender ("fragmentation needed", RFC 4787 REQ-13;
 * "administratively prohibited", RFC 5508 REQ-8 / RFC 6888 REQ-11).
 *
 * Errors are rare and their handling is long, so the entry points are global functions:
 * the verifier checks each once on its own, and they re-parse the packet from ctx rather
 * than take pointers from the fast path. An error never creates, refreshes or deletes a
 * mapping or session (RFC 5508 REQ-6, RFC 4787 REQ-12): they are only looked up here.
 */
#ifndef NX_ICMP_H
#define NX_ICMP_H

#include "nx_alloc.h"
#include "nx_csum.h"
#include "nx_fwd.h"
#include "nx_state.h"
#include "nx_parse.h"
#include "nx_session.h"
#include "nx_exit.h"

#define NX_ICMP_QUOTE_MAX 548 /* 576 - IP - ICMP headers (RFC 1812 4.3.2.3) */

static __always_inline int nx_icmp_is_error(__u8 type)
{
	return type == ICMP_DEST_UNREACH || type == ICMP_TIME_EXCEEDED ||
	       type == ICMP_PARAMETERPROB;
}

/* ---- one's complement sum of a packet region, any length, through bpf_loop ---- */
struct nx_sum {
	struct xdp_md *ctx;
	__u32 off;
	__u32 sum;
};

static long nx_sum_cb(__u64 i, void *vctx)
{
	struct nx_sum *s = vctx;
	__u32 w = 0;

	if (bpf_xdp_load_bytes(s->ctx, s->off + (__u32)i * 4, &w, 4))
		return 1;
	s->sum += (w & 0xffff) + (w >> 16);
	return 0;
}

/* Sum (not complemented, not folded) of len bytes at offset off of the frame. */
static __always_inline __u32 nx_sum_region(struct xdp_md *ctx, __u32 off, __u32 len)
{
	struct nx_sum s = {.ctx = ctx, .off = off, .sum = 0};
	__u32 words = len / 4, rest = len & 3;
	__u16 h = 0;
	__u8 b = 0;

	if (len > 9216) /* jumbo frames at most */
		return 0;
	bpf_loop(words, nx_sum_cb, &s, 0);
	off += words * 4;
	if (rest >= 2) {
		if (!bpf_xdp_load_bytes(ctx, off, &h, 2))
			s.sum += h;
		off += 2;
	}
	if (rest & 1) {
		if (!bpf_xdp_load_bytes(ctx, off, &b, 1))
			s.sum += b; /* the odd byte is the high-order byte of a zero-padded word */
	}
	return s.sum;
}

/* ---- the embedded packet of an ICMP error ---- */
struct nx_icmp_err {
	struct iphdr *ip; /* outer */
	struct icmphdr *icmp;
	struct iphdr *eip; /* embedded IP header */
	void *el4;	   /* embedded transport header, at least 8 bytes present */
	__be16 *eport_src; /* embedded source port / echo identifier */
	__be16 *eport_dst; /* embedded destination port / echo identifier */
	__u16 *el4_csum;   /* embedded L4 checksum when inside the frame, else 0 */
	__u8 eproto;
};

/* Parse and validate an ICMP error at ctx: ICMP checksum over the whole message, embedded
 * IPv4 header (options walked, RFC 5508 REQ-3) and its checksum, 8 bytes of transport.
 * Returns NX_OK or minus a drop reason. */
static __always_inline int nx_icmp_err_parse(struct xdp_md *ctx, struct nx_icmp_err *e)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct iphdr *eip;
	__u32 hlen, ehl, icmp_len;
	void *el4, *ip_end;

	if ((void *)(ip + 1) > end)
		return -NX_DROP_MALFORMED_IP;
	hlen = ip->ihl * 4;
	if (hlen < 20 || hlen > 60)
		return -NX_DROP_MALFORMED_IP;
	icmp_len = nx_ntohs_len(ip->tot_len);
	if (icmp_len < hlen + 8 + 20 + 8)
		return -NX_DROP_ICMP_MALFORMED;
	icmp_len -= hlen;
	if (nx_csum_fold(nx_sum_region(ctx, sizeof(struct ethhdr) + hlen, icmp_len)) != 0)
		return -NX_DROP_ICMP_BAD_CHECKSUM;
	e->ip = ip;
	e->icmp = (void *)ip + hlen;
	if ((void *)(e->icmp + 1) > end)
		return -NX_DROP_ICMP_MALFORMED;
	eip = (void *)(e->icmp + 1);
	if ((void *)(eip + 1) > end)
		return -NX_DROP_ICMP_MALFORMED;
	if (eip->version != 4 || eip->ihl < 5)
		return -NX_DROP_ICMP_MALFORMED;
	ehl = eip->ihl * 4;
	el4 = (void *)eip + ehl;
	/* bounded by the frame (for the verifier) and by the IP packet: link-layer padding
	 * after it is not part of the quote */
	ip_end = (void *)ip + nx_ntohs_len(ip->tot_len);
	if (el4 + 8 > end || el4 + 8 > ip_end)
		return -NX_DROP_ICMP_MALFORMED;
	if (!nx_ip_hdr_csum_ok(eip, end))
		return -NX_DROP_ICMP_BAD_CHECKSUM;
	e->eip = eip;
	e->el4 = el4;
	e->eproto = eip->protocol;
	e->el4_csum = 0;
	switch (e->eproto) {
	case IPPROTO_UDP:
		e->eport_src = el4;
		e->eport_dst = el4 + 2;
		e->el4_csum = el4 + 6;
		break;
	case IPPROTO_TCP:
		e->eport_src = el4;
		e->eport_dst = el4 + 2;
		/* the TCP checksum is past the 8 bytes an error must quote: often there */
		if (el4 + 18 <= end && el4 + 18 <= ip_end)
			e->el4_csum = el4 + 16;
		break;
	case IPPROTO_ICMP: {
		__u8 t = *(__u8 *)el4;

		if (t != ICMP_ECHO && t != ICMP_ECHOREPLY)
			return -NX_DROP_UNSUPPORTED_ICMP; /* an error about an error: never */
		e->eport_src = el4 + 4;
		e->eport_dst = el4 + 4;
		e->el4_csum = el4 + 2;
		break;
	}
	default:
		return -NX_DROP_UNSUPPORTED_PROTO;
	}
	return NX_OK;
}

/* Change a 16-bit word inside the ICMP payload, keeping the ICMP checksum right. */
static __always_inline void nx_icmp_set16(struct nx_icmp_err *e, __u16 *w, __u16 v)
{
	nx_csum_replace2(&e->icmp->checksum, *w, v);
	*w = v;
}

static __always_inline void nx_icmp_set32(struct nx_icmp_err *e, __u32 *w, __u32 v)
{
	nx_csum_replace4(&e->icmp->checksum, *w, v);
	*w = v;
}

/* Rewrite the embedded packet's source (dir IN: it is the packet we sent out, its source
 * is our outside endpoint) or destination (dir OUT: the packet we delivered inside, its
 * destination is the subscriber), every checksum following. */
static __always_inline void nx_icmp_rewrite_embedded(struct nx_icmp_err *e, int to_inside, __u32 ip,
						     __u16 port)
{
	__u32 *eaddr = to_inside ? &e->eip->saddr : &e->eip->daddr;
	__be16 *eport = to_inside ? e->eport_src : e->eport_dst;
	__u32 old_ip = *eaddr;
	__u16 old_port = *eport;
	__u16 old_check = e->eip->check;
	__u16 check = old_check;

	/* embedded IP header: address and its header checksum */
	nx_csum_replace4(&check, old_ip, ip);
	nx_icmp_set32(e, eaddr, ip);
	nx_icmp_set16(e, &e->eip->check, check);
	/* embedded transport: port (or echo id) and its checksum */
	nx_icmp_set16(e, eport, port);
	if (e->el4_csum) {
		__u16 c = *e->el4_csum;

		if (e->eproto == IPPROTO_ICMP) {
			nx_csum_replace2(&c, old_port, port);
		} else if (!(e->eproto == IPPROTO_UDP && c == 0)) {
			nx_csum_replace4(&c, old_ip, ip);
			nx_csum_replace2(&c, old_port, port);
			if (e->eproto == IPPROTO_UDP && c == 0)
				c = 0xffff;
		}
		nx_icmp_set16(e, e->el4_csum, c);
	}
}

/* Translate an ICMP error arriving for a pool address (or hairpinned): the embedded packet
 * left through natrix, so its source is one of our outside endpoints. Restores the inside
 * endpoint in the embedded headers and the outer destination. Returns NX_OK when
 * translated, else minus a drop reason. Global: verified once. */
__noinline int nx_icmp_error_in(struct xdp_md *ctx)
{
	struct nx_icmp_err e = {};
	struct nx_map_key mk = {};
	struct nx_config *cfg = nx_config();
	__u32 addr_idx, eaddr, in_ip, old;
	__u16 eport;
	int rc;

	if (!cfg)
		return -NX_DROP_INTERNAL;
	rc = nx_icmp_err_parse(ctx, &e);
	if (rc)
		return rc;
	eaddr = e.eip->saddr;
	eport = *e.eport_src;
	if (!nx_pool_index(cfg, eaddr, &addr_idx))
		return -NX_DROP_NO_MAPPING;
	if (!nx_outside_mapping(addr_idx, e.eproto, eaddr, eport, &mk))
		return -NX_DROP_NO_MAPPING;
	in_ip = mk.in_ip;
	nx_icmp_rewrite_embedded(&e, 1, in_ip, mk.in_port);
	old = e.ip->daddr;
	e.ip->daddr = in_ip;
	nx_csum_replace4(&e.ip->check, old, in_ip);
	nx_count(NX_STAT_ICMP_ERR_IN);
	return NX_OK;
}

/* Translate an ICMP error a subscriber sends about a packet natrix delivered to it: the
 * embedded destination becomes our outside endpoint again, the outer source our outside
 * address. Returns NX_OK when translated, else minus a drop reason. Global: verified once. */
__noinline int nx_icmp_error_out(struct xdp_md *ctx)
{
	struct nx_icmp_err e = {};
	struct nx_map_key mk = {};
	struct nx_config *cfg = nx_config();
	struct nx_map *m;
	__u32 old;
	int rc;

	rc = nx_icmp_err_parse(ctx, &e);
	if (rc)
		return rc;
	/* the subscriber speaks of a packet addressed to itself */
	if (e.eip->daddr != e.ip->saddr)
		return -NX_DROP_NO_MAPPING;
	mk.in_ip = e.eip->daddr;
	mk.in_port = *e.eport_dst;
	mk.proto = e.eproto;
	m = cfg ? nx_map_find(cfg, &mk) : 0;
	if (!m)
		return -NX_DROP_NO_MAPPING;
	nx_icmp_rewrite_embedded(&e, 0, m->out_ip, m->out_port);
	old = e.ip->saddr;
	e.ip->saddr = m->out_ip;
	nx_csum_replace4(&e.ip->check, old, m->out_ip);
	nx_count(NX_STAT_ICMP_ERR_OUT);
	return NX_OK;
}

/* ---- generating errors ---- */

static __always_inline int nx_icmp_rate_ok(__u32 per_sec)
{
	__u32 zero = 0;
	struct nx_icmp_bucket *b = bpf_map_lookup_elem(&nx_icmp_rl, &zero);
	__u64 now, add;

	if (!b || !per_sec)
		return 0;
	now = bpf_ktime_get_ns();
	add = (now - b->ts) * per_sec / 1000000000ULL;
	if (add) {
		b->tokens += add;
		if (b->tokens > per_sec)
			b->tokens = per_sec; /* burst of one second's worth */
		b->ts = now;
	}
	if (!b->tokens)
		return 0;
	b->tokens--;
	return 1;
}

/* Turn the packet at ctx into an ICMP error about it, sent back out of the interface it
 * came in on: quote as much of the original as fits in 576 bytes, source address src.
 * The verdict: redirected (icmp_sent), with reason, why natrix owes the error, counted;
 * dropped for that reason when nothing was built (rate limit, no source address, no room);
 * dropped as redirect_failed when the redirect was refused. Global: verified once. */
__noinline nx_verdict nx_icmp_send(struct xdp_md *ctx, __u32 type_code, __u32 mtu, __u32 src,
				   __u32 reason)
{
	struct nx_config *cfg = nx_config();
	unsigned char smac[ETH_ALEN], dmac[ETH_ALEN];
	void *data, *end;
	struct ethhdr *eth;
	struct iphdr *ip, *oip;
	struct icmphdr *ic;
	__u32 dst, tot, quote, len, sum = 0;
	__u16 *w;

	if (!cfg || !src || !nx_icmp_rate_ok(cfg->icmp_per_sec)) {
		nx_count(NX_STAT_ICMP_SUPPRESSED);
		return nx_drop(reason);
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	oip = data + sizeof(*eth);
	if ((void *)(oip + 1) > end)
		return nx_drop(reason);
	__builtin_memcpy(smac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(dmac, eth->h_dest, ETH_ALEN);
	dst = oip->saddr;
	tot = nx_ntohs_len(oip->tot_len);
	quote = tot < NX_ICMP_QUOTE_MAX ? tot : NX_ICMP_QUOTE_MAX;
	len = end - data;
	if (len > sizeof(*eth) + quote &&
	    bpf_xdp_adjust_tail(ctx, (int)(sizeof(*eth) + quote) - (int)len))
		return nx_drop(reason);
	/* 28 new bytes in front: the original IP header then sits right after our ICMP
	 * header, where the quote belongs */
	if (bpf_xdp_adjust_head(ctx, -(int)(sizeof(struct iphdr) + sizeof(struct icmphdr))))
		return nx_drop(reason);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	ip = data + sizeof(*eth);
	ic = (void *)(ip + 1);
	if ((void *)(ic + 1) > end)
		return nx_drop(reason);
	__builtin_memcpy(eth->h_dest, smac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, dmac, ETH_ALEN);
	eth->h_proto = NX_BE_ETH_P_IP;
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = 0xc0; /* internetwork control, as the kernel marks its ICMP errors */
	ip->tot_len = bpf_htons(sizeof(*ip) + sizeof(*ic) + quote);
	ip->id = (__u16)bpf_get_prandom_u32();
	ip->frag_off = 0;
	ip->ttl = 64;
	ip->protocol = IPPROTO_ICMP;
	ip->check = 0;
	ip->saddr = src;
	ip->daddr = dst;
	w = (__u16 *)ip;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	ip->check = nx_csum_fold(sum);
	ic->type = type_code >> 8;
	ic->code = type_code & 0xff;
	ic->checksum = 0;
	ic->un.frag.__unused = 0;
	ic->un.frag.mtu = bpf_htons((__u16)mtu);
	sum = nx_sum_region(ctx, sizeof(*eth) + sizeof(*ip), sizeof(*ic) + quote);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	ic = data + sizeof(struct ethhdr) + sizeof(struct iphdr);
	if ((void *)(ic + 1) > end)
		return nx_drop(reason);
	ic->checksum = nx_csum_fold(sum);
	/* Out where it came in. A redirect rather than XDP_TX: rare packets, and a veth only
	 * flushes XDP_TX frames to a peer that runs XDP itself. XDP_ABORTED (flags 0) when
	 * the interface is not in nx_tx. */
	nx_count(reason);
	if (bpf_redirect_map(&nx_tx, ctx->ingress_ifindex, 0) != XDP_REDIRECT)
		return nx_drop(NX_DROP_REDIRECT_FAILED);
	return nx_redirected(NX_STAT_ICMP_SENT);
}

#define NX_ICMP_TC(type, code) (((type) << 8) | (code))

#endif /* NX_ICMP_H */
