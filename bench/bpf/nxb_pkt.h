/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Writing one benchmark frame for a given sequence number: Ethernet, IPv4, and a UDP, TCP
 * or ICMP echo header, every checksum valid. Shared by the generator (nxb_gen.bpf.c) and
 * the test-run harness (nxb_harness.bpf.c), so that what a gateway sees end to end and what
 * its program is timed on in BPF_PROG_TEST_RUN are the same packets.
 *
 * The whole header is written on every packet, never patched: in live-frame mode the
 * kernel recycles a frame's page after the receiver is done with it, and the receiver (a
 * NAT, a router) has rewritten addresses, ports, TTL, MACs and checksums in it. The payload
 * is the template's (zeros) and nobody writes it, so it adds nothing to the checksums.
 */
#ifndef NXB_PKT_H
#define NXB_PKT_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/icmp.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "nxb_types.h"

/* Written by user space (through the skeleton's mmapped .bss) between runs, read by every
 * packet: a global costs a load, a map lookup a helper call. */
struct nxb_cfg nxb_cfg;
/* Packets written so far. One user-space thread drives one instance at a time (test runs
 * execute on the caller's CPU), so a plain increment is exact. */
__u64 nxb_seq;

/* Inbound targets (NXB_DIR_IN): the outside endpoints natrix gave the flows. Sized by
 * user space before loading. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nxb_flow);
} nxb_flows SEC(".maps");

/* The port of the last inbound target read. In random order the next target's index
 * depends on its low bit (a swap within a pair: still uniform), so the harness' reads of
 * nxb_flows happen one after the other whether a program runs behind the harness or not.
 * Without it, runs of nxb_nop alone overlapped their random reads (nothing waited for
 * them) and cost less than the same read costs ahead of natrix, whose translation waits
 * for it: the subtraction left most of a random read in natrix's inbound figure
 * (docs/PERFORMANCE.md, R31). */
__u32 nxb_chain;

/* murmur3's 64-bit finaliser: consecutive sequence numbers land on unrelated flows, so
 * neither the caches nor the hardware prefetcher see any order in the table accesses. */
static __always_inline __u64 nxb_mix(__u64 k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

static __always_inline __u64 nxb_flow_of(struct nxb_cfg *c, __u64 seq)
{
	__u64 n = c->nflows ? c->nflows : 1;

	switch (c->mode) {
	case NXB_MODE_NEW:
		return c->flow_base + seq;
	case NXB_MODE_RANDOM:
		return nxb_mix(seq + c->flow_base) % n;
	default:
		return (c->flow_base + seq) % n;
	}
}

/* One's complement sum folded to 16 bits, complemented, in network order. */
static __always_inline __u16 nxb_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return bpf_htons((__u16)~sum);
}

/* Writes the frame for sequence number seq. Returns the frame length, or -1 when the
 * frame is too short for its headers. Addresses and ports are summed in host order (one's
 * complement sums do not care about byte order as long as every term is in the same one). */
static __always_inline int nxb_write(struct xdp_md *ctx, __u64 seq)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct nxb_cfg *c = &nxb_cfg;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	void *l4 = ip + 1;
	__u32 len = end - data;
	__u32 saddr, daddr, ip_len, l4_len, sum;
	__u16 sport, dport;
	__u64 k, j;

	if (l4 + sizeof(struct tcphdr) > end) /* the longest L4 header we write */
		return -1;
	k = nxb_flow_of(c, seq);
	if (c->dir == NXB_DIR_IN) {
		__u32 idx = (__u32)k;
		struct nxb_flow *f;

		/* random order only: in turn, every flow must come once a round */
		if (c->mode == NXB_MODE_RANDOM) {
			idx ^= nxb_chain & 1;
			if (idx >= c->nflows)
				idx = (__u32)k;
		}
		f = bpf_map_lookup_elem(&nxb_flows, &idx);
		if (!f)
			return -1;
		saddr = c->dst_ip;
		sport = c->dport;
		daddr = bpf_ntohl(f->ip);
		dport = bpf_ntohs(f->port);
		nxb_chain = dport;
	} else {
		__u32 nsubs = c->nsubs ? c->nsubs : 1;
		__u32 nports = c->nports ? c->nports : 1;

		saddr = c->src_ip + (__u32)(k % nsubs);
		j = k / nsubs;
		sport = c->sport_base + (__u16)(j % nports);
		daddr = c->dst_ip;
		dport = c->dport + (__u16)(j / nports);
	}

	__builtin_memcpy(eth->h_dest, c->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, c->smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);

	ip_len = len - sizeof(*eth);
	l4_len = ip_len - sizeof(*ip);
	*(__u16 *)ip = bpf_htons(0x4500); /* version 4, IHL 5, TOS 0 */
	ip->tot_len = bpf_htons(ip_len);
	ip->id = 0;
	ip->frag_off = bpf_htons(0x4000); /* DF: a NAT gateway may not fragment these */
	ip->ttl = c->ttl;
	ip->protocol = c->proto;
	ip->saddr = bpf_htonl(saddr);
	ip->daddr = bpf_htonl(daddr);
	sum = 0x4500 + ip_len + 0x4000 + ((__u32)c->ttl << 8) + c->proto + (saddr >> 16) +
	      (saddr & 0xffff) + (daddr >> 16) + (daddr & 0xffff);
	ip->check = nxb_fold(sum);

	/* pseudo-header (TCP and UDP) */
	sum =
	    (saddr >> 16) + (saddr & 0xffff) + (daddr >> 16) + (daddr & 0xffff) + c->proto + l4_len;
	switch (c->proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = l4;
		__u32 tseq = (__u32)seq;

		th->source = bpf_htons(sport);
		th->dest = bpf_htons(dport);
		th->seq = bpf_htonl(tseq);
		th->ack_seq = 0;
		/* data offset 5 words, then the flags byte */
		*((__u16 *)th + 6) = bpf_htons((5 << 12) | c->tcp_flags);
		th->window = bpf_htons(65535);
		th->urg_ptr = 0;
		th->check = 0;
		sum += sport + dport + (tseq >> 16) + (tseq & 0xffff) + ((5 << 12) | c->tcp_flags) +
		       65535;
		th->check = nxb_fold(sum);
		break;
	}
	case IPPROTO_ICMP: {
		struct icmphdr *ih = l4;
		/* requests outbound, replies inbound; the identifier plays the port */
		__u16 type = c->dir == NXB_DIR_IN ? ICMP_ECHOREPLY : ICMP_ECHO;
		__u16 id = c->dir == NXB_DIR_IN ? dport : sport;

		ih->type = type;
		ih->code = 0;
		ih->un.echo.id = bpf_htons(id);
		ih->un.echo.sequence = bpf_htons((__u16)seq);
		ih->checksum = nxb_fold((type << 8) + id + (__u16)seq);
		break;
	}
	default: {
		struct udphdr *uh = l4;

		uh->source = bpf_htons(sport);
		uh->dest = bpf_htons(dport);
		uh->len = bpf_htons(l4_len);
		sum += sport + dport + l4_len;
		uh->check = nxb_fold(sum);
		if (!uh->check)
			uh->check = 0xffff; /* 0 would mean "no checksum" */
		break;
	}
	}
	return len;
}

#endif /* NXB_PKT_H */
