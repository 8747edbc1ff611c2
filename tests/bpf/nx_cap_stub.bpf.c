// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* tests/capture_filter.rs: XDP programs built as the data plane's are, that hand a packet
 * to a capture filter the two ways a clang-built program can without knowing the filter
 * when it is compiled:
 *  - nx_cap_stub, nx_cap_stub2: their verdict is what the global function nx_cap_filter
 *    returns, a stub that an extension program (BPF_PROG_TYPE_EXT, a freplace link)
 *    replaces with a translated filter;
 *  - nx_cap_tail: tail-calls whatever program is in nx_cap_progs[0] (a translated filter
 *    loaded as XDP), whose return value becomes the verdict.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* What the stub answers before it is replaced; written by no one, but a global the
 * compiler cannot fold into the callers. */
int nx_cap_stub_ret = 77777;

/* Global and not inlined: a function of its own in each program's BTF, with the
 * signature a filter has, which an extension program can replace. */
__noinline int nx_cap_filter(struct xdp_md *ctx) { return nx_cap_stub_ret; }

SEC("xdp")
int nx_cap_stub(struct xdp_md *ctx) { return nx_cap_filter(ctx); }

/* A second caller: one filter program can replace the function in both. */
SEC("xdp")
int nx_cap_stub2(struct xdp_md *ctx) { return nx_cap_filter(ctx); }

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} nx_cap_progs SEC(".maps");

SEC("xdp")
int nx_cap_tail(struct xdp_md *ctx)
{
	bpf_tail_call(ctx, &nx_cap_progs, 0);
	/* an empty slot: the tail call falls through */
	return 88888;
}
