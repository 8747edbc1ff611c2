// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* natrix data plane: entry programs. The logic lives in the nx_*.h headers, one concern
 * each; this file only wires them to the hooks. */
#include "nx_common.h"
#include "nx_maps.h"
#include "nx_nat.h"
#include "nx_reap.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* XDP ingress of every inside interface: inside -> outside, and hairpinning. */
SEC("xdp")
int nx_xdp_inside(struct xdp_md *ctx) { return nx_path_inside(ctx); }

/* XDP ingress of every outside interface: outside -> inside. */
SEC("xdp")
int nx_xdp_outside(struct xdp_md *ctx) { return nx_path_outside(ctx); }

/* Run by the daemon (BPF_PROG_RUN) after it put a batch of candidates in nx_reap_buf. */
SEC("syscall")
int nx_reap(void *ctx)
{
	__u32 zero = 0;
	struct nx_reap_args *args = bpf_map_lookup_elem(&nx_reap_buf, &zero);

	if (!args)
		return -1;
	return nx_reap_batch(args);
}

/* Run by the daemon (BPF_PROG_RUN) to relate the packet path's clock to CLOCK_MONOTONIC:
 * both read at the same moment, into the context it passes (struct nx_clock). */
SEC("syscall")
int nx_clock(struct nx_clock *c)
{
	c->jiffies = bpf_jiffies64();
	c->mono_ns = bpf_ktime_get_ns();
	return 0;
}

/* Anchors that put the shared types into the skeleton's BTF-generated Rust types. */
struct nx_config nx_btf_config SEC(".bss");
struct nx_sub nx_btf_sub SEC(".bss");
struct nx_map_key nx_btf_map_key SEC(".bss");
struct nx_map nx_btf_map SEC(".bss");
struct nx_sess_key nx_btf_sess_key SEC(".bss");
struct nx_sess nx_btf_sess SEC(".bss");
struct nx_reap_args nx_btf_reap SEC(".bss");
struct nx_clock nx_btf_clock SEC(".bss");
struct nx_iface nx_btf_iface SEC(".bss");
struct nx_lpm_key nx_btf_lpm_key SEC(".bss");
enum nx_stat nx_btf_stat SEC(".bss");
enum nx_tcp_state nx_btf_tcp_state SEC(".bss");
