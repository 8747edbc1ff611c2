// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The packet generator (ClickNP's PktGen, in XDP): run by BPF_PROG_TEST_RUN in live-frame
 * mode (BPF_F_TEST_XDP_LIVE_FRAMES) with the ingress interface set to one end of a veth.
 * Every run writes a complete frame for the next flow (nxb_pkt.h) and returns XDP_TX,
 * which the kernel turns into a transmission out of that interface: the frame arrives at
 * the peer, the gateway under test, as if a NIC had received it. No skb, no socket, no
 * copy: as fast as one CPU can write headers and hand frames to the veth ring.
 */
#include "nxb_pkt.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Anchors that put the shared enums into the skeleton's generated Rust types
 * (bench/src/flow.rs). */
enum nxb_mode nxb_btf_mode SEC(".bss");
enum nxb_dir nxb_btf_dir SEC(".bss");

SEC("xdp")
int nxb_gen(struct xdp_md *ctx)
{
	if (nxb_write(ctx, nxb_seq++) < 0)
		return XDP_ABORTED;
	return XDP_TX;
}
