/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Types shared by the benchmark programs (bench/bpf/) and bench/src/. As with the data
 * plane, Rust sees them through the libbpf-cargo skeletons' BTF, never a second copy.
 */
#ifndef NXB_TYPES_H
#define NXB_TYPES_H

#include <linux/types.h>

/* How the flow number of a packet is chosen from its sequence number. */
enum nxb_mode {
	NXB_MODE_CYCLE = 0,  /* flow_base + seq, modulo nflows: every flow in turn */
	NXB_MODE_NEW = 1,    /* flow_base + seq: every packet a flow never seen before */
	NXB_MODE_RANDOM = 2, /* hash(seq) modulo nflows: uniform over the flows, no locality */
};

/* Which side the packet comes from. */
enum nxb_dir {
	NXB_DIR_OUT = 0, /* subscriber -> remote: source varies with the flow */
	NXB_DIR_IN = 1,	 /* remote -> the flow's outside endpoint, taken from nxb_flows */
};

/* What the generator and the harness write into every frame. All addresses and ports in
 * host order; the programs convert. Flow k is
 *   subscriber  src_ip + k % nsubs
 *   inside port sport_base + (k / nsubs) % nports
 *   remote      dst_ip : dport + (k / nsubs) / nports
 * so any number of distinct flows exists, spread over nsubs source addresses. */
struct nxb_cfg {
	__u8 dmac[6];
	__u8 smac[6];
	__u16 frame_len; /* bytes written from the Ethernet header on, = the frame's length */
	__u8 proto;	 /* IPPROTO_UDP, IPPROTO_TCP or IPPROTO_ICMP */
	__u8 tcp_flags;
	__u32 src_ip;
	__u32 dst_ip;
	__u32 nsubs;
	__u32 nports;
	__u16 sport_base;
	__u16 dport;
	__u8 mode; /* enum nxb_mode */
	__u8 dir;  /* enum nxb_dir */
	__u8 ttl;
	__u8 pad;
	__u64 nflows; /* CYCLE and RANDOM; DIR_IN: entries of nxb_flows in use */
	__u64 flow_base;
};
_Static_assert(sizeof(struct nxb_cfg) == 56, "nxb_cfg layout");

/* An inbound target: the outside endpoint natrix gave a flow (network order). */
struct nxb_flow {
	__u32 ip;
	__u16 port;
	__u16 pad;
};
_Static_assert(sizeof(struct nxb_flow) == 8, "nxb_flow layout");

/* Packets and bytes, per CPU (sink) or per generator instance. */
struct nxb_count {
	__u64 packets;
	__u64 bytes;
};

#endif /* NXB_TYPES_H */
