// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The receiving end of the end-to-end benchmark: counts and drops every frame in XDP, so
 * the sink costs next to nothing and never answers (no ARP, no ICMP). Attached, it is also
 * what lets its veth accept frames the gateway redirects to it (a veth takes redirected
 * frames only when the receiving side runs XDP).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "nxb_types.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Per CPU: no atomics on the receive path; user space sums the CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nxb_count);
} nxb_rx SEC(".maps");

SEC("xdp")
int nxb_sink(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct nxb_count *c = bpf_map_lookup_elem(&nxb_rx, &zero);

	if (c) {
		c->packets++;
		c->bytes += ctx->data_end - ctx->data;
	}
	return XDP_DROP;
}
