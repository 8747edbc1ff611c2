// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* natrix data plane: entry programs. The logic lives in the nx_*.h headers, one concern
 * each; this file only wires them to the hooks. Every XDP program leaves through nx_exit
 * (nx_exit.h). */
#include "nx_common.h"
#include "nx_state.h"
#include "nx_fast.h"
#include "nx_slow.h"
#include "nx_det.h"
#include "nx_home.h"
#include "nx_parse.h"
#include "nx_ctl.h"
#include "nx_cap.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* XDP ingress of every inside interface: inside -> outside, and hairpinning. The fast path
 * (nx_fast.h); the rest by tail call in nx_xdp_inside_slow. While a capture runs, the
 * packet goes its way through the capture's chain instead (nx_cap.h). */
SEC("xdp")
int nx_xdp_inside(struct xdp_md *ctx)
{
	nx_cap_enter(ctx, NX_PROG_CAP_RX_INSIDE);
	return nx_exit(ctx, nx_fast_inside(ctx));
}

/* XDP ingress of every outside interface: outside -> inside. */
SEC("xdp")
int nx_xdp_outside(struct xdp_md *ctx)
{
	nx_cap_enter(ctx, NX_PROG_CAP_RX_OUTSIDE);
	return nx_exit(ctx, nx_fast_outside(ctx));
}

/* The slow path (nx_slow.h), reached by tail call only (nx_progs). Its exit goes on to the
 * capture when the packet is being captured. */
SEC("xdp")
int nx_xdp_inside_slow(struct xdp_md *ctx) { return nx_exit_cap(ctx, nx_slow_inside_dyn(ctx)); }

/* An ICMP error from a subscriber, from the slow path (either mode's). */
SEC("xdp")
int nx_xdp_inside_icmp_err(struct xdp_md *ctx)
{
	return nx_exit_cap(ctx, nx_slow_inside_icmp_err(ctx));
}

/* A hairpinned packet's inbound half, from the slow path (either mode's). */
SEC("xdp")
int nx_xdp_inside_hairpin(struct xdp_md *ctx) { return nx_exit_cap(ctx, nx_slow_hairpin(ctx)); }

/* The slow path in deterministic mode (RFC 7422, nx_det.h), from nx_xdp_inside_slow. */
SEC("xdp")
int nx_xdp_inside_slow_det(struct xdp_md *ctx) { return nx_exit_cap(ctx, nx_slow_inside(ctx, 1)); }

SEC("xdp")
int nx_xdp_outside_slow(struct xdp_md *ctx) { return nx_exit_cap(ctx, nx_slow_outside(ctx)); }

/* The fast path of a packet being captured (nx_cap.h), reached from the capture's filter
 * stage: the received form kept first, the capture's exit last. */
SEC("xdp")
int nx_xdp_inside_cap(struct xdp_md *ctx)
{
	nx_cap_rx(ctx);
	return nx_exit_cap(ctx, nx_fast_inside(ctx));
}

SEC("xdp")
int nx_xdp_outside_cap(struct xdp_md *ctx)
{
	nx_cap_rx(ctx);
	return nx_exit_cap(ctx, nx_fast_outside(ctx));
}

/* The capture's last stage: the record into nx_cap_rb, the packet's verdict returned. */
SEC("xdp")
int nx_xdp_cap_emit(struct xdp_md *ctx) { return nx_cap_emit(ctx); }

/* The control programs (nx_ctl.h), one per command: run by the daemon (BPF_PROG_RUN) on
 * the batch it put in nx_reap_buf: expired sessions, mappings or subscribers to delete,
 * static forwards to add or remove. */
SEC("syscall")
int nx_ctl_sess(void *ctx) { return nx_ctl_batch(NX_REAP_SESSIONS); }

SEC("syscall")
int nx_ctl_maps(void *ctx) { return nx_ctl_batch(NX_REAP_MAPPINGS); }

SEC("syscall")
int nx_ctl_subs(void *ctx) { return nx_ctl_batch(NX_REAP_SUBS); }

SEC("syscall")
int nx_ctl_static_add(void *ctx) { return nx_ctl_batch(NX_CTL_STATIC_ADD); }

SEC("syscall")
int nx_ctl_static_del(void *ctx) { return nx_ctl_batch(NX_CTL_STATIC_DEL); }

/* Run by the daemon (BPF_PROG_RUN) to relate the packet path's clock to CLOCK_MONOTONIC:
 * both read at the same moment, into the context it passes (struct nx_clock). */
SEC("syscall")
int nx_clock(struct nx_clock *c)
{
	c->jiffies = bpf_jiffies64();
	c->mono_ns = bpf_ktime_get_ns();
	return 0;
}

/* Tests only (tests/abi.rs; natrix never runs it): the functions user space mirrors, run
 * on the inputs in the context (struct nx_abi_probe), their results written back. The
 * inputs are copied to the stack first: the helpers take pointers, and the verifier lets
 * no pointer into the context but the context's own be dereferenced. */
SEC("syscall")
int nx_abi_probe(struct nx_abi_probe *p)
{
	struct nx_config cfg;
	struct nx_sess_key sk;
	struct nx_map_key mk;
	__u32 pp, pidx = p->pidx, port = p->port, first = p->first, sip = p->sip;

	__builtin_memcpy(&cfg, &p->cfg, sizeof(cfg));
	__builtin_memcpy(&sk, &p->sk, sizeof(sk));
	__builtin_memcpy(&mk, &p->mk, sizeof(mk));
	pp = NX_PP(pidx, port);
	p->tab_hash = nx_tab_hash(p->k0, p->k1, cfg.tab_seed);
	p->tab_home[0] = nx_tab_home(p->h, p->nbkt, 0);
	p->tab_home[1] = nx_tab_home(p->h, p->nbkt, 1);
	p->sub_hash = nx_sub_hash(&cfg, sip);
	p->sub_home = nx_sub_home(p->h, p->nslots);
	p->sess_k0 = nx_sess_k0(&sk);
	p->sess_k1 = nx_sess_k1(&sk);
	p->map_k0 = nx_map_k0(&mk);
	p->det_start = nx_det_start(&cfg, nx_det_hash(&cfg, sip, pp), pp, first);
	p->home_start = nx_walk_start(&cfg, nx_home_hash(&cfg, sip, pp), pp, first,
				      cfg.block_size / 2, NX_DIV_BLOCK_PAIRS);
	p->home_block = nx_home_block(&cfg, sip);
	p->proto_idx = nx_proto_idx(p->proto);
	p->port_index = nx_port_index(p->addr_idx, pidx, port);
	p->word_is_map = nx_word_is_map(&cfg, sip, p->addr_idx, port);
	return 0;
}

/* Anchors that put the shared types and constants into the skeleton's BTF-generated Rust
 * types (src/abi.rs): a type no code or variable refers to is left out of the BTF. */
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
struct nx_abi_probe nx_btf_abi_probe SEC(".bss");
enum nx_sizes nx_btf_sizes SEC(".bss");
enum nx_tick nx_btf_tick SEC(".bss");
enum nx_ip_proto nx_btf_ip_proto SEC(".bss");
enum nx_proto_idx nx_btf_proto_idx SEC(".bss");
enum nx_config_flags nx_btf_config_flags SEC(".bss");
enum nx_cfg_arrays nx_btf_cfg_arrays SEC(".bss");
enum nx_div_id nx_btf_div_id SEC(".bss");
struct nx_log_ev nx_btf_log_ev SEC(".bss");
enum nx_log_kind nx_btf_log_kind SEC(".bss");
enum nx_log_quota nx_btf_log_quota SEC(".bss");
enum nx_filtering nx_btf_filtering SEC(".bss");
enum nx_fibc_word nx_btf_fibc_word SEC(".bss");
enum nx_port_state nx_btf_port_state SEC(".bss");
enum nx_port_bits nx_btf_port_bits SEC(".bss");
enum nx_block_bits nx_btf_block_bits SEC(".bss");
enum nx_sub_state nx_btf_sub_state SEC(".bss");
enum nx_sub_bits nx_btf_sub_bits SEC(".bss");
enum nx_hash_keys nx_btf_hash_keys SEC(".bss");
enum nx_tab_id nx_btf_tab_id SEC(".bss");
enum nx_slot_state nx_btf_slot_state SEC(".bss");
enum nx_slot_bits nx_btf_slot_bits SEC(".bss");
enum nx_map_flags nx_btf_map_flags SEC(".bss");
enum nx_nsess nx_btf_nsess SEC(".bss");
enum nx_sess_flags nx_btf_sess_flags SEC(".bss");
enum nx_iface_role nx_btf_iface_role SEC(".bss");
enum nx_iface_macs nx_btf_iface_macs SEC(".bss");
enum nx_frag_sizes nx_btf_frag_sizes SEC(".bss");
enum nx_reap_op nx_btf_reap_op SEC(".bss");
enum nx_reap_sizes nx_btf_reap_sizes SEC(".bss");
struct nx_cap_ctl nx_btf_cap_ctl SEC(".bss");
struct nx_cap_buf nx_btf_cap_buf SEC(".bss");
struct nx_cap_rec nx_btf_cap_rec SEC(".bss");
enum nx_cap_sizes nx_btf_cap_sizes SEC(".bss");
enum nx_cap_flags nx_btf_cap_flags SEC(".bss");
enum nx_cap_match nx_btf_cap_match SEC(".bss");
enum nx_prog nx_btf_prog SEC(".bss");
