/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Every map of the data plane: the state natrix keeps (the map nx_maps is one of them, the
 * mapping table). Sizes here are placeholders: the daemon sets max_entries from the config
 * before loading (src/dataplane.rs), and all of them are pinned under the pin directory so
 * that a restarted daemon takes them over unchanged. */
#ifndef NX_STATE_H
#define NX_STATE_H

#include "nx_types.h"

/* The running configuration: one entry, written by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_config);
} nx_cfg SEC(".maps");

/* Pool index -> pool address (network order). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} nx_pool SEC(".maps");

/* Pool address (network order) -> pool index: is this destination ours to translate. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} nx_pool_idx SEC(".maps");

/* ifindex -> role and address, for every interface natrix is attached to. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NX_MAX_IFACES);
	__type(key, __u32);
	__type(value, struct nx_iface);
} nx_ifaces SEC(".maps");

/* ifindex -> role and MACs for ifindex < NX_IFROLE_DIRECT (nx_types.h): the per-packet
 * checks without hashing (nx_ifaces stays the reference, for any ifindex). Filled by the
 * daemon before the links switch to this program instance; not pinned. */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NX_IFROLE_DIRECT);
	__type(key, __u32);
	__type(value, struct nx_iface);
} nx_ifrole SEC(".maps");

/* Subscriber prefixes (nat.subscribers) when there are more than nx_config.subnets holds
 * (NX_CF_SUBNET_TRIE). Filled by the daemon before the links switch; not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__type(key, struct nx_lpm_key);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} nx_subnets SEC(".maps");

/* Deterministic mode: subscriber index (its address minus det_base) -> sessions it holds
 * (limits.max_sessions_per_subscriber); dynamic mode keeps that count in its nx_sub entry.
 * Sized det_count (1 in dynamic mode); changed atomically, by the packet path (up) and
 * the reaper (down). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(map_flags, BPF_F_MMAPABLE);
} nx_det_nsess SEC(".maps");

/* Destination prefixes forwarded without translation (RFC 6888 REQ-6). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__type(key, struct nx_lpm_key);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} nx_excl SEC(".maps");

/* Per-CPU token bucket for the ICMP errors natrix generates. */
struct nx_icmp_bucket {
	__u64 ts; /* ns of the last refill */
	__u64 tokens;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_icmp_bucket);
} nx_icmp_rl SEC(".maps");

/* ifindex -> ifindex: redirect targets (bpf_redirect_map bulk-flushes per NAPI poll). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, NX_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u32);
} nx_tx SEC(".maps");

/* Outside ports, direct-indexed (see nx_types.h). mmapable: the daemon releases held
 * ports with the same compare-and-swap the fast path uses to claim them. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, BPF_F_MMAPABLE);
} nx_ports SEC(".maps");

/* Port blocks, direct-indexed (see nx_types.h). mmapable like nx_ports. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, BPF_F_MMAPABLE);
} nx_blocks SEC(".maps");

/* Inside address -> subscriber (paired pool address, block slots, hints for the next
 * claim): open-addressed, one 192-byte entry a slot (nx_subs.h); mmapable: the daemon
 * and the CLI read it directly. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_sub);
	__uint(map_flags, BPF_F_MMAPABLE);
} nx_subs SEC(".maps");

/* The BIB: inside endpoint -> outside endpoint (endpoint-independent mapping). An
 * open-addressed table of slots (nx_tab.h); mmapable: the daemon reads it directly. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct nx_map);
	__uint(map_flags, BPF_F_MMAPABLE);
} nx_maps SEC(".maps");

/* Sessions: one per connection, keyed from the inside. Open-addressed like nx_maps. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct nx_sess);
	__uint(map_flags, BPF_F_MMAPABLE);
} nx_sess SEC(".maps");

/* Entries in each table (enum nx_tab_id: sessions, mappings, subscribers), kept exact by
 * inserts and deletes: it is what enforces the configured sizes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u32);
} nx_tab_cnt SEC(".maps");

/* Insert locks, striped by key hash: finding and inserting a key is atomic for that key.
 * The first NX_TAB_LOCKS are the tables' (nx_tab.h), the NX_EP_LOCKS after them inside
 * endpoints' (nx_home.h): a packet that may open a connection in dynamic mode holds its
 * endpoint's from finding its mapping to inserting one, table inserts included, so the two
 * kinds must never share a stripe. */
#define NX_TAB_LOCKS 4096
#define NX_EP_LOCKS 4096

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NX_TAB_LOCKS + NX_EP_LOCKS);
	__type(key, __u32);
	__type(value, __u32);
} nx_tab_locks SEC(".maps");

/* Inbound fragment records: (remote, pool address, IP id, protocol) -> inside address.
 * LRU: a record lives a few seconds at most, and losing an old one costs one datagram. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct nx_frag_key);
	__type(value, struct nx_frag);
} nx_frags SEC(".maps");

/* Fragments that arrived before their first, for the daemon (sized from fragments.max_held). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} nx_frag_rb SEC(".maps");

/* Per-CPU counters, indexed by enum nx_stat. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NX_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} nx_stats SEC(".maps");

/* The reaper's batch: written by the daemon, processed by nx_ctl, results read back.
 * (A syscall program's context cannot be indexed with a variable offset.) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_reap_args);
} nx_reap_buf SEC(".maps");

/* The FIB cache (nx_fwd.h): per CPU, direct-mapped, fib_cache.entries slots. Not pinned:
 * a new program instance starts with an empty cache (and its own nx_fibc_gen). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_fibc_ent);
} nx_fibc SEC(".maps");

/* Its generation word and the watcher's sign of life (struct nx_fibc_gen): the daemon
 * writes both through mmap (src/fibwatch.rs). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_fibc_gen);
	__uint(map_flags, BPF_F_MMAPABLE);
} nx_fibc_gen SEC(".maps");

/* What the fast path (nx_fast.h) learnt of a packet it hands to the slow path (nx_slow.h),
 * which goes on from there: the slow path parses the frame again (the verifier knows no
 * packet pointer across a tail call), but never routes it again. */
struct nx_stage {
	__u32 pool_idx; /* the destination's pool index: inside, hairpinning; outside, always */
	__s32 fib_rc;	/* inside: the FIB's answer for the packet as it is (fib holds it) */
	__u8 too_big;	/* inside: too big for the next hop without DF: the kernel fragments */
	__u8 hairpin;	/* inside: the destination is a pool address */
	__u8 mtu;	/* outside: translated, too big for the inside link with DF: answer it */
	__u8 no_sess;	/* inside: the fast path looked the packet's session up and found none */
};

/* Per-CPU scratch space for structures too large for the 512-byte BPF stack, and what one
 * program of a packet's passes to the next by tail call (an XDP program runs to its end
 * on one CPU, tail calls included). */
struct nx_scratch {
	struct bpf_fib_lookup fib;
	struct nx_stage stage;
	/* the setup predictor (nx_fast.h): up by NX_NEW_HINT_MISS on each outbound packet that
	 * may open a connection and finds no session, down by one on each that finds one; at
	 * NX_NEW_HINT_ON or more, new flows are frequent on this CPU (more than one outbound
	 * packet in nine of late) and a UDP datagram or an echo request starts fetching the
	 * setup's lines before its session lookup. Only a hint: it decides when loads are
	 * issued, nothing else. */
	__u32 new_hint;
	/* a mapping that is a port word (deterministic mode, a home walk's in dynamic mode)
	 * seen as a mapping (nx_det_fill) */
	struct nx_map dmap;
	/* a NAT event being made (nx_log.h): here, not on the allocator's stack */
	struct nx_log_ev log;
	/* when each kind of limit event was last made on this CPU (enum nx_log_slots) */
	__u64 log_last[NX_LOGRL_N];
	/* the outbound translation's keys (nx_xlate_out): here, not in the slow path's frame,
	 * which is the top of its deepest call chain (the allocator's) */
	struct nx_sess_key xsk;
	struct nx_map_key xmk;
};

/* The NAT event log (nx_log.h): events the daemon exports (src/natlog). Pinned, so that
 * events made while no daemon runs wait for the next one; sized by log.buffer_events. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} nx_log_rb SEC(".maps");

/* Global block id -> when it was last allocated (CLOCK_TAI ns; 0: not known): what
 * `natrix lookup` answers "since when" with. Pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, BPF_F_MMAPABLE);
} nx_block_time SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_scratch);
} nx_scratch SEC(".maps");

/* The capture (nx_cap.h), all pinned: a running capture's settings, this CPU's packet in
 * progress, and the ring the records go to. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_cap_ctl);
} nx_cap_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nx_cap_buf);
} nx_cap_buf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, NX_CAP_RING);
} nx_cap_rb SEC(".maps");

/* The programs reached by tail call: the slow path's, from the fast path (nx_fast.h), and
 * the capture's (nx_cap.h). Not pinned by the loader: each load of natrix has its own,
 * pinned by the daemon beside the links as nx_progs (a program array loses its entries
 * when no file or descriptor holds it any more). The capture's filter stages
 * (NX_PROG_CAP_RX_*, NX_PROG_CAP_TX) are generated and put in place by `natrix capture`;
 * empty, they make the capture's entry a tail call that falls through. */
enum nx_prog {
	NX_PROG_INSIDE_SLOW = 0,
	NX_PROG_OUTSIDE_SLOW,
	NX_PROG_INSIDE_CAP, /* the fast path of a packet being captured */
	NX_PROG_OUTSIDE_CAP,
	NX_PROG_CAP_EMIT,      /* the record into nx_cap_rb */
	NX_PROG_CAP_RX_INSIDE, /* generated: the filter on the received form, then *_CAP */
	NX_PROG_CAP_RX_OUTSIDE,
	NX_PROG_CAP_TX,		 /* generated: the filter on the sent form, then CAP_EMIT */
	NX_PROG_INSIDE_SLOW_DET, /* the slow path in deterministic mode, from INSIDE_SLOW */
	NX_PROG_INSIDE_ICMP_ERR, /* an ICMP error from a subscriber, from either of those */
	NX_PROG_INSIDE_HAIRPIN,	 /* a hairpinned packet's inbound half, from either */
	NX_PROG_COUNT,
};

int nx_xdp_inside_slow(struct xdp_md *ctx);
int nx_xdp_outside_slow(struct xdp_md *ctx);
int nx_xdp_inside_cap(struct xdp_md *ctx);
int nx_xdp_outside_cap(struct xdp_md *ctx);
int nx_xdp_cap_emit(struct xdp_md *ctx);
int nx_xdp_inside_slow_det(struct xdp_md *ctx);
int nx_xdp_inside_icmp_err(struct xdp_md *ctx);
int nx_xdp_inside_hairpin(struct xdp_md *ctx);

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, NX_PROG_COUNT);
	__uint(key_size, sizeof(__u32));
	__array(values, int(struct xdp_md *));
} nx_progs SEC(".maps") = {
    .values =
	{
	    [NX_PROG_INSIDE_SLOW] = (void *)&nx_xdp_inside_slow,
	    [NX_PROG_OUTSIDE_SLOW] = (void *)&nx_xdp_outside_slow,
	    [NX_PROG_INSIDE_CAP] = (void *)&nx_xdp_inside_cap,
	    [NX_PROG_OUTSIDE_CAP] = (void *)&nx_xdp_outside_cap,
	    [NX_PROG_CAP_EMIT] = (void *)&nx_xdp_cap_emit,
	    [NX_PROG_INSIDE_SLOW_DET] = (void *)&nx_xdp_inside_slow_det,
	    [NX_PROG_INSIDE_ICMP_ERR] = (void *)&nx_xdp_inside_icmp_err,
	    [NX_PROG_INSIDE_HAIRPIN] = (void *)&nx_xdp_inside_hairpin,
	},
};

static __always_inline struct nx_config *nx_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&nx_cfg, &zero);
}

/* x / d, d the divisor cfg->div[id] stands for (struct nx_udiv): a multiply and shifts. */
static __always_inline __u32 nx_udiv(struct nx_config *cfg, __u32 x, enum nx_div_id id)
{
	struct nx_udiv *v = &cfg->div[id];
	__u32 t = (__u32)(((__u64)x * v->m) >> 32);

	return (t + ((x - t) >> (v->s1 & 31))) >> (v->s2 & 31);
}

/* x % d, the same d */
static __always_inline __u32 nx_umod(struct nx_config *cfg, __u32 x, __u32 d, enum nx_div_id id)
{
	return x - nx_udiv(cfg, x, id) * d;
}

/* jiffies in ticks (see NX_TICK_SHIFT): a multiply and an add. */
static __always_inline __u32 nx_tick_of(struct nx_config *cfg, __u64 jiffies)
{
	return (__u32)((jiffies * cfg->clk_mult) >> 32) + cfg->clk_off;
}

/* Now, in ticks: one load of jiffies, a multiply and an add. */
static __always_inline __u32 nx_now_tick(struct nx_config *cfg)
{
	return nx_tick_of(cfg, bpf_jiffies64());
}

/* Whether addr (network order) is a pool address; its pool index in *idx if so. */
static __always_inline int nx_pool_index(struct nx_config *cfg, __u32 addr, __u32 *idx)
{
	__u32 a = bpf_ntohl(addr), n = cfg->pool_nruns;
	__u32 *p;

	if (!n) {
		p = bpf_map_lookup_elem(&nx_pool_idx, &addr);
		if (!p)
			return 0;
		*idx = *p;
		return 1;
	}
	for (__u32 i = 0; i < NX_POOL_RUNS; i++) {
		struct nx_pool_run *r = &cfg->pool_runs[i];

		if (i >= n)
			break;
		if (a - r->first < r->count) {
			*idx = r->base + (a - r->first);
			return 1;
		}
	}
	return 0;
}

static __always_inline struct nx_scratch *nx_scratch_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&nx_scratch, &zero);
}

#endif /* NX_STATE_H */
