// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The floor natrix is measured against: the least an XDP router does. Parse Ethernet and
 * IPv4, ask the kernel's FIB for the next hop, decrement the TTL, set the MACs, redirect
 * through a devmap (bulk transmission, as natrix does). No checksum verification, no
 * counters, no state. Anything it cannot forward goes to the kernel.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef AF_INET
#define AF_INET 2
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ifindex -> ifindex: the interfaces it may transmit on. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} nxb_tx SEC(".maps");

SEC("xdp")
int nxb_fwd(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct bpf_fib_lookup fib = {};
	__u32 sum;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	if (ip->ttl <= 1)
		return XDP_PASS; /* the kernel sends "time exceeded" */
	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	/* TTL - 1: the checksum word holding the TTL goes down by 0x0100 (RFC 1624) */
	ip->ttl--;
	sum = (__u16)~ip->check + (__u16)~bpf_htons(0x0100);
	sum = (sum & 0xffff) + (sum >> 16);
	ip->check = ~(__u16)(sum + (sum >> 16));
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	return bpf_redirect_map(&nxb_tx, fib.ifindex, XDP_PASS);
}
