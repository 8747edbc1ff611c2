// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The floor natrix is measured against: the least an XDP router does. Parse Ethernet and
 * IPv4, ask the kernel's FIB for the next hop, decrement the TTL, set the MACs, redirect
 * through a devmap (bulk transmission, as natrix does). No checksum verification, no
 * counters, no state. Anything it cannot forward goes to the kernel.
 *
 * And the memory floor of a gateway that keeps per-flow state and handles one packet at a
 * time, as XDP does (nxb_fwd_mem, nxb_fwd_chunk): the same forwarder, plus one read of the
 * 64-byte line a hash of the packet's addresses and ports selects in a table as large as
 * natrix's session table, the value then used in the frame, as a NAT uses its session.
 * With random flows over a table far larger than the caches, that read is a cache miss no
 * table layout avoids. nxb_mem is an mmapable array like natrix's tables (vmalloc, 4 KiB
 * pages: a TLB miss and a page walk as well); nxb_chunks holds the same number of lines in
 * arrays small enough (32 KiB) for the kernel to take them from its linear map (huge
 * pages): the difference is what the page walks cost.
 *
 * And the setup floor (nxb_fwd_claim), run end to end with a new connection in every
 * packet: the forwarder plus a read and a write of the flow's line in a table as large as
 * natrix's session table, the least a gateway that creates an entry per connection does.
 * For experiments it can read and write up to three more lines, each in a table of its
 * own, independent or each needing the one before (a chain of misses), with plain stores
 * or locked adds (`natrix bench attach setup-floor --help`).
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

/* Sizes of the two tables (set before loading). */
const volatile __u32 nxb_mem_lines = 1;
const volatile __u32 nxb_chunk_count = 1;
/* experiment knobs of the setup floor */
const volatile __u32 nxb_x_extra = 0; /* more lines per packet, each in a table of its own */
const volatile __u32 nxb_x_dep = 0;   /* 1: each extra line's address needs the line before */
const volatile __u32 nxb_x_lock = 0;  /* 1: the writes are locked adds */

/* ifindex -> ifindex: the interfaces it may transmit on. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} nxb_tx SEC(".maps");

/* One cache line of a table. */
struct nxb_line {
	__u64 w[8];
};

/* Lines per chunk: struct bpf_array's header (312 bytes on this kernel; 504 lines leave room
 * for up to 512) plus the lines must stay within 32 KiB (PAGE_SIZE <<
 * PAGE_ALLOC_COSTLY_ORDER), the largest map the kernel kmallocs. The header puts the
 * lines 56 bytes past a cache-line boundary: a line spans two, of which w[0] touches one. */
enum nxb_fwd_sizes {
	NXB_CHUNK_LINES = 504,
};
/* Anchor: the enum reaches the skeleton's generated Rust types (bench/src/cost.rs). */
enum nxb_fwd_sizes nxb_btf_fwd_sizes SEC(".bss");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set from user space: natrix's session table, in lines */
	__type(key, __u32);
	__type(value, struct nxb_line);
	__uint(map_flags, BPF_F_MMAPABLE);
} nxb_mem SEC(".maps");

struct nxb_chunk {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NXB_CHUNK_LINES);
	__type(key, __u32);
	__type(value, struct nxb_line);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1); /* set from user space: chunks */
	__type(key, __u32);
	__array(values, struct nxb_chunk);
} nxb_chunks SEC(".maps");

enum { NXB_TAB_NONE, NXB_TAB_FLAT, NXB_TAB_CHUNKED, NXB_TAB_CLAIM };

/* The line for this packet's flow: its addresses and ports mixed (as natrix hashes a
 * session key), mapped onto the table. */
static __always_inline struct nxb_line *nxb_flow_line(struct iphdr *ip, void *end, int tab)
{
	__u32 *ports = (void *)(ip + 1), i, c;
	void *chunk;
	__u64 h;

	if ((void *)(ports + 1) > end)
		return 0;
	h = ((__u64)ip->saddr << 32 | ip->daddr) * 0x9e3779b97f4a7c15ULL;
	h ^= (__u64)*ports * 0xc2b2ae3d27d4eb4fULL;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 32;
	if (tab == NXB_TAB_FLAT || tab == NXB_TAB_CLAIM) {
		i = (__u32)(((h >> 32) * nxb_mem_lines) >> 32);
		return bpf_map_lookup_elem(&nxb_mem, &i);
	}
	c = (__u32)(((h >> 32) * nxb_chunk_count) >> 32);
	i = (__u32)(((h & 0xffffffffULL) * NXB_CHUNK_LINES) >> 32);
	chunk = bpf_map_lookup_elem(&nxb_chunks, &c);
	return chunk ? bpf_map_lookup_elem(chunk, &i) : 0;
}

static __always_inline int nxb_forward(struct xdp_md *ctx, int tab)
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
	if (tab != NXB_TAB_NONE) {
		struct nxb_line *l = nxb_flow_line(ip, end, tab);

		if (!l)
			return XDP_PASS;
		/* the packet depends on the line, as a translation depends on its session
		 * (the table holds zeros: the identification field does not change) */
		__u64 v = l->w[0];
		__u32 *pp = (void *)(ip + 1);

		ip->id ^= (__u16)v;
		/* a new connection also writes its line (the entry it creates): a plain store,
		 * the least any insert does, unless an experiment asks for locked adds */
		if (tab == NXB_TAB_CLAIM && (void *)(pp + 1) <= end) {
			if (nxb_x_lock)
				__sync_fetch_and_add(&l->w[1], 1);
			else
				l->w[1] = l->w[1] + 1;
			for (__u32 k = 1; k <= 3; k++) {
				__u64 g;
				__u32 j;
				struct nxb_line *m;

				if (k > nxb_x_extra)
					break;
				g = ((__u64)ip->saddr << 32 | *pp) *
				    (0x9e3779b97f4a7c15ULL + 2 * k);
				g ^= g >> 31;
				g *= 0xbf58476d1ce4e5b9ULL;
				j = (__u32)(((g >> 32) * nxb_mem_lines) >> 32) + k * nxb_mem_lines;
				if (nxb_x_dep)
					j += (__u32)(v >> 62);
				m = bpf_map_lookup_elem(&nxb_mem, &j);
				if (!m)
					break;
				v = m->w[0];
				ip->id ^= (__u16)v;
				if (nxb_x_lock)
					__sync_fetch_and_add(&m->w[1], 1);
				else
					m->w[1] = m->w[1] + 1;
			}
		}
	}
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

SEC("xdp")
int nxb_fwd(struct xdp_md *ctx) { return nxb_forward(ctx, NXB_TAB_NONE); }

SEC("xdp")
int nxb_fwd_mem(struct xdp_md *ctx) { return nxb_forward(ctx, NXB_TAB_FLAT); }

/* The setup floor: the line of a flow read and written, as the least a gateway creating
 * an entry for a new connection does (end to end, new-flow mode). */
SEC("xdp")
int nxb_fwd_claim(struct xdp_md *ctx) { return nxb_forward(ctx, NXB_TAB_CLAIM); }

SEC("xdp")
int nxb_fwd_chunk(struct xdp_md *ctx) { return nxb_forward(ctx, NXB_TAB_CHUNKED); }
