/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Parsing with a cursor: each stage checks bounds before it hands out a pointer, so every
 * later stage works on validated headers. Malformed input is reported, never guessed at. */
#ifndef NX_PARSE_H
#define NX_PARSE_H

#include "nx_common.h"
#include "nx_types.h"

enum nx_parse_rc {
	NX_PARSE_OK = 0,
	NX_PARSE_NOT_IP, /* not IPv4: the kernel's business */
	NX_PARSE_BAD_ETH,
	NX_PARSE_BAD_IP,
	NX_PARSE_BAD_L4,
	NX_PARSE_FRAGMENT,
	NX_PARSE_OTHER_PROTO,
};

/* A parsed packet. Pointers are valid up to data_end; l4 length comes from the IP total
 * length, not from the frame (a frame may carry link-layer padding). */
struct nx_pkt {
	void *data_end;
	struct ethhdr *eth;
	struct iphdr *ip;
	void *l4;
	__u16 l4_len; /* bytes of L4 header and payload according to the IP header */
	__u8 proto;   /* IPPROTO_TCP / UDP / ICMP */
	__u8 tcp_flags;
	__u8 frag;	/* 0: whole datagram, 1: first fragment, 2: a later fragment */
	__be16 *sport;	/* TCP/UDP source port, ICMP echo identifier */
	__be16 *dport;	/* TCP/UDP destination port, NULL for ICMP */
	__u16 *l4_csum; /* L4 checksum field */
};

static __always_inline int nx_parse_eth(struct xdp_md *ctx, struct nx_pkt *p)
{
	void *data = (void *)(long)ctx->data;

	p->data_end = (void *)(long)ctx->data_end;
	p->eth = data;
	/* No test feeds this a shorter frame: BPF_PROG_TEST_RUN refuses XDP frames under 14
	 * bytes, and a packet socket pads them to 14. The verifier proves the check is here:
	 * without it no header field could be read. */
	if ((void *)(p->eth + 1) > p->data_end)
		return NX_PARSE_BAD_ETH;
	if (p->eth->h_proto != NX_BE_ETH_P_IP)
		return NX_PARSE_NOT_IP;
	return NX_PARSE_OK;
}

/* One's complement sum of the IPv4 header: the fixed 20 bytes unrolled, options (rare)
 * in a bounded loop. */
static __always_inline int nx_ip_hdr_csum_ok(struct iphdr *ip, void *data_end)
{
	__u16 *w = (__u16 *)ip;
	__u32 words = ip->ihl * 2;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	for (__u32 i = 10; i < 30; i++) {
		__u16 *q = w + i;

		if (i >= words)
			break;
		/* keep clang from folding this check into one before the loop: the verifier
		 * needs it next to the access */
		asm volatile("" : "+r"(q));
		if ((void *)(q + 1) > data_end)
			return 0;
		sum += *q;
	}
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

/* IPv4 at p->eth + 1, its header checksum verified when verify is set (not when the
 * packet's own program verified it already: the slow path's second parse). */
static __always_inline int nx_parse_ip_(struct nx_pkt *p, int verify)
{
	struct iphdr *ip = (void *)(p->eth + 1);
	__u32 hlen, tot;

	if ((void *)(ip + 1) > p->data_end)
		return NX_PARSE_BAD_IP;
	if (ip->version != 4 || ip->ihl < 5)
		return NX_PARSE_BAD_IP;
	hlen = ip->ihl * 4;
	tot = nx_ntohs_len(ip->tot_len);
	/* The total length may not claim more than the frame holds, nor less than the header. */
	if (tot < hlen || (void *)ip + tot > p->data_end)
		return NX_PARSE_BAD_IP;
	if ((void *)ip + hlen > p->data_end)
		return NX_PARSE_BAD_IP;
	if (verify && !nx_ip_hdr_csum_ok(ip, p->data_end))
		return NX_PARSE_BAD_IP;
	p->ip = ip;
	p->l4 = (void *)ip + hlen;
	p->l4_len = tot - hlen;
	p->proto = ip->protocol;
	p->frag = 0;
	if (ip->frag_off & NX_IP_OFFMASK) {
		p->frag = 2;
		return NX_PARSE_FRAGMENT;
	}
	if (ip->frag_off & NX_IP_MF)
		p->frag = 1; /* has the transport header: parsed and translated as usual */
	return NX_PARSE_OK;
}

static __always_inline int nx_parse_ip(struct nx_pkt *p) { return nx_parse_ip_(p, 1); }

/* Ethernet and IPv4: NX_PARSE_OK, NX_PARSE_FRAGMENT (a later fragment, headers valid), or
 * the reason to pass or drop. */
static __always_inline int nx_parse_l3(struct xdp_md *ctx, struct nx_pkt *p)
{
	int rc = nx_parse_eth(ctx, p);

	if (rc != NX_PARSE_OK)
		return rc;
	return nx_parse_ip(p);
}

/* The same for a frame this packet's fast path parsed already (the slow path: no packet
 * pointer survives a tail call, the frame is unchanged): the bounds again, for the
 * verifier, not the header checksum. */
static __always_inline int nx_parse_l3_again(struct xdp_md *ctx, struct nx_pkt *p)
{
	int rc = nx_parse_eth(ctx, p);

	if (rc != NX_PARSE_OK)
		return rc;
	return nx_parse_ip_(p, 0);
}

/* Where an inbound packet's outside port is: ICMP's identifier, else the destination
 * port. NULL is impossible after nx_parse_transport, and callers check it all the same:
 * Linux 6.1 reads p->proto back from the stack as any byte and does not know that. */
static __always_inline __be16 *nx_in_port_ptr(struct nx_pkt *p)
{
	return p->proto == IPPROTO_ICMP ? p->sport : p->dport;
}

static __always_inline int nx_parse_l4(struct nx_pkt *p)
{
	switch (p->proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = p->l4;
		__u32 doff;

		if ((void *)(th + 1) > p->data_end || p->l4_len < sizeof(*th))
			return NX_PARSE_BAD_L4;
		doff = th->doff * 4;
		if (doff < sizeof(*th) || doff > p->l4_len)
			return NX_PARSE_BAD_L4;
		p->sport = &th->source;
		p->dport = &th->dest;
		p->l4_csum = &th->check;
		p->tcp_flags = ((__u8 *)th)[13];
		return NX_PARSE_OK;
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = p->l4;
		__u16 ulen;

		if ((void *)(uh + 1) > p->data_end || p->l4_len < sizeof(*uh))
			return NX_PARSE_BAD_L4;
		ulen = nx_ntohs_len(uh->len);
		/* a first fragment carries only the start of the datagram the length counts */
		if (ulen < sizeof(*uh) || (ulen > p->l4_len && !p->frag))
			return NX_PARSE_BAD_L4;
		p->sport = &uh->source;
		p->dport = &uh->dest;
		p->l4_csum = &uh->check;
		return NX_PARSE_OK;
	}
	case IPPROTO_ICMP: {
		struct icmphdr *ih = p->l4;

		if ((void *)(ih + 1) > p->data_end || p->l4_len < sizeof(*ih))
			return NX_PARSE_BAD_L4;
		p->sport = &ih->un.echo.id;
		p->dport = 0;
		p->l4_csum = &ih->checksum;
		return NX_PARSE_OK;
	}
	default:
		return NX_PARSE_OTHER_PROTO;
	}
}

static __always_inline __u32 nx_proto_idx(__u8 proto)
{
	return proto == IPPROTO_TCP ? NX_P_TCP : proto == IPPROTO_UDP ? NX_P_UDP : NX_P_ICMP;
}

#endif /* NX_PARSE_H */
