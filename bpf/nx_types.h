/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Types shared by the data plane and user space. The Rust side gets them from the
 * skeleton's BTF (libbpf-cargo), never from a hand-written copy: change them here only.
 * Every key is explicitly padded: hash maps compare keys bytewise, so a hole the compiler
 * leaves uninitialised would make two equal keys differ.
 *
 * Every constant user space needs too is an enum member, not a macro: BTF keeps enums, and
 * natrix.bpf.c anchors each enum (nx_btf_*) so that the skeleton emits it (src/abi.rs
 * names them for the Rust side). BTF enum values are 32 bits wide (clang 14 emits no
 * ENUM64), so a 64-bit constant is an enum of its bit position, or of its two halves,
 * and a macro here builds it (src/abi.rs builds it the same way).
 */
#ifndef NX_TYPES_H
#define NX_TYPES_H

#include <linux/types.h>
#include <linux/in.h>

/* Compile-time layout checks (BPF and user space agree on these sizes). */
#define nx_static_assert(c, msg) _Static_assert(c, msg)

/* Hard limits of the table layouts; the configurable limits sit below them. */
enum nx_sizes {
	NX_MAX_POOL_ADDRS = 65536,  /* pool addresses (index fits 16 bits) */
	NX_MAX_BLOCKS_PER_SUB = 32, /* slots in a subscriber entry */
	NX_MAX_IFACES = 64,
	NX_PORTS_PER_ADDR = 65536,
	NX_NPROTO = 3,
};

/* Time is a 32-bit tick of 2^24 ns (~16.8 ms) of CLOCK_MONOTONIC: no division per packet,
 * and 2^32 ticks are 2.3 years, far beyond any timeout. The daemon and the reaper read
 * CLOCK_MONOTONIC itself. The packet path reads the kernel's jiffies instead, a single load
 * once the verifier inlines bpf_jiffies64 (bpf_ktime_get_coarse_ns cost 10-15 ns a packet),
 * and converts them with two constants the daemon measures at start (struct nx_clock):
 *   tick = (u32)((jiffies * clk_mult) >> 32) + clk_off
 * with clk_mult = TICK_NSEC << (32 - NX_TICK_SHIFT) (TICK_NSEC: ns per jiffy, 10^9 / HZ),
 * clk_off chosen so that the result is CLOCK_MONOTONIC >> NX_TICK_SHIFT within one tick.
 * The product may wrap past 2^64: its bits 63..32 still are the tick modulo 2^32. */
enum nx_tick {
	NX_TICK_SHIFT = 24,
};

/* What nx_clock (a syscall program) reports: the same moment on both clocks, from which
 * the daemon learns HZ and clk_off. */
struct nx_clock {
	__u64 jiffies;
	__u64 mono_ns;
};

/* The IP protocols natrix translates (their numbers, from the kernel's headers). */
enum nx_ip_proto {
	NX_IPPROTO_ICMP = IPPROTO_ICMP,
	NX_IPPROTO_TCP = IPPROTO_TCP,
	NX_IPPROTO_UDP = IPPROTO_UDP,
};

/* Index of a protocol in per-protocol tables (outside port array, counters). */
enum nx_proto_idx {
	NX_P_TCP = 0,
	NX_P_UDP = 1,
	NX_P_ICMP = 2,
};

/* nx_config.flags */
enum nx_config_flags {
	NX_CF_PORT_PARITY = 1 << 0, /* RFC 4787 REQ-5: even stays even, odd stays odd */
	NX_CF_HAIRPIN = 1 << 1,	    /* RFC 4787 REQ-9 */
	NX_CF_PORT_CLASS = 1 << 2,  /* RFC 4787 REQ-3: inside ports < 1024 get ports < 1024 */
	NX_CF_EXCLUSIONS = 1 << 3,  /* [[exclude]] prefixes exist: look them up */
	NX_CF_STATICS = 1 << 4,	    /* [[forward]]s exist: a home walk's miss asks the table */
	NX_CF_SUBNET_TRIE = 1 << 5, /* more subscriber prefixes than nx_config.subnets holds:
				     * the LPM trie nx_subnets answers */
	/* NAT event logging ([log], nx_log.h): events are made (dynamic mode with a collector),
	 * per session too (log.sessions), with the remote endpoint (log.destinations), and a
	 * block whose event the log cannot take is refused (log.strict) */
	NX_CF_LOG = 1 << 6,
	NX_CF_LOG_SESSIONS = 1 << 7,
	NX_CF_LOG_DEST = 1 << 8,
	NX_CF_LOG_STRICT = 1 << 9,
};

/* ---- NAT event log (nx_log.h; src/natlog) ----
 * What the data plane logs, in its ring buffer nx_log_rb: RFC 8158's natEvent values. */
enum nx_log_kind {
	NX_LOG_ADDRS_EXHAUSTED = 3, /* no pool address had a free block for a new subscriber */
	NX_LOG_SESS_CREATE = 4,
	NX_LOG_SESS_DELETE = 5,
	NX_LOG_PORTS_EXHAUSTED = 12, /* the subscriber's pool address had no free block */
	NX_LOG_QUOTA = 13, /* a limit was hit: detail says which (natQuotaExceededEvent) */
	NX_LOG_BLOCK_ALLOC = 16,
	NX_LOG_BLOCK_FREE = 17,
};

/* natQuotaExceededEvent values (RFC 8158, IANA) of NX_LOG_QUOTA events */
enum nx_log_quota {
	NX_LOGQ_SESSIONS = 1,	 /* the session table is full */
	NX_LOGQ_BIB = 2,	 /* the mapping table is full */
	NX_LOGQ_PER_USER = 3,	 /* the subscriber's blocks (limit: max_blocks) or sessions */
	NX_LOGQ_SUBSCRIBERS = 4, /* the subscriber table is full */
	NX_LOGQ_FRAGMENTS = 5,	 /* fragments pending: no room to hold an early fragment */
};

/* One event. Addresses in network order, ports in host order; times CLOCK_TAI, which the
 * daemon turns into UTC (src/natlog). Block events: in_port and out_port are the block's
 * first and last port. Session events: the inside and outside ports (the ICMP identifier). */
struct nx_log_ev {
	__u64 time;  /* bpf_ktime_get_tai_ns() */
	__u8 kind;   /* enum nx_log_kind */
	__u8 proto;  /* session events: IP protocol */
	__u8 detail; /* NX_LOG_QUOTA: enum nx_log_quota */
	__u8 pad;
	__u32 in_ip;  /* the subscriber */
	__u32 out_ip; /* the pool address */
	__u16 in_port;
	__u16 out_port;
	__u32 rem_ip; /* session events with NX_CF_LOG_DEST */
	__u16 rem_port;
	__u16 pad2;
	__u32 limit; /* NX_LOG_QUOTA: the limit that was hit */
	__u32 pad3;
};
nx_static_assert(sizeof(struct nx_log_ev) == 40, "nx_log_ev layout");

/* Rate limit of the data plane's limit events (nx_log.h): at most one a second per CPU
 * for each of these */
enum nx_log_slots {
	NX_LOGRL_ADDRS = 0, /* NX_LOG_ADDRS_EXHAUSTED */
	NX_LOGRL_PORTS = 1, /* NX_LOG_PORTS_EXHAUSTED */
	NX_LOGRL_QUOTA = 2, /* NX_LOG_QUOTA, + detail - 1 */
	NX_LOGRL_N = 8,
};

/* Lengths of nx_config's arrays. NX_SUBNETS: subscriber prefixes (nat.subscribers) held in
 * nx_config, compared in a few instructions; a longer list goes to the LPM trie nx_subnets.
 * NX_POOL_RUNS: see struct nx_pool_run. */
enum nx_cfg_arrays {
	NX_SUBNETS = 8,
	NX_POOL_RUNS = 8,
};

struct nx_subnet {
	__u32 net;  /* network order, host bits clear */
	__u32 mask; /* network order */
};

/* Division of a 32-bit number by a divisor fixed by the configuration, as a multiplication
 * and two shifts (Granlund and Montgomery, "Division by invariant integers using
 * multiplication", 1994, figure 4.1): x / d = (t + ((x - t) >> s1)) >> s2, where
 * t = (x * m) >> 32, for every x < 2^32. The daemon computes m, s1 and s2 from d
 * (src/tables/layout.rs, UDiv); the packet path divides with nx_udiv (nx_state.h). A
 * divide instruction costs tens of cycles, and a setup made a dozen of them. */
struct nx_udiv {
	__u32 m;
	__u8 s1;
	__u8 s2;
	__u16 pad;
};

/* nx_config.div: the divisors the packet path divides by (each 0 when not configured,
 * then nx_udiv is the identity and nothing divides by it). */
enum nx_div_id {
	NX_DIV_HOME_SPAN = 0, /* n_addrs * blocks_per_addr: which home block */
	NX_DIV_ADDRS,	      /* n_addrs: a home block's pool address */
	NX_DIV_BLOCK_PAIRS,   /* block_size / 2: where a home walk starts */
	NX_DIV_DET_PAIRS,     /* det_ports / 2: where a deterministic walk starts */
	NX_NDIV,
};

/* nx_config.filtering (RFC 4787 section 5) */
enum nx_filtering {
	NX_FILTER_EIF = 0,  /* endpoint-independent */
	NX_FILTER_ADF = 1,  /* address-dependent */
	NX_FILTER_APDF = 2, /* address-and-port-dependent */
};

/* A run of consecutive pool addresses: first (host order) .. first + count - 1 have pool
 * indexes base .. base + count - 1. */
struct nx_pool_run {
	__u32 first;
	__u16 count;
	__u16 base;
};

/* The single entry of map nx_cfg. Written by the daemon (at start and on takeover),
 * read by every packet. Timeouts are in ticks. */
struct nx_config {
	__u32 to_udp;
	__u32 to_tcp_est;
	__u32 to_tcp_trans;
	__u32 to_icmp;
	__u32 flags;	 /* enum nx_config_flags */
	__u32 filtering; /* enum nx_filtering */
	__u16 port_lo;	 /* pool port range, inclusive */
	__u16 port_hi;
	__u16 block_size;      /* ports per block */
	__u16 blocks_per_addr; /* (port_hi - port_lo + 1) / block_size */
	__u16 max_blocks;      /* per subscriber, <= NX_MAX_BLOCKS_PER_SUB */
	__u16 n_addrs;	       /* pool addresses in use, <= NX_MAX_POOL_ADDRS */
	__u32 addr_hint;       /* pool index the daemon picks for the next new subscriber */
	__u32 hold_down_s;     /* port hold-down, seconds (daemon side) */
	__u32 max_new_per_sec; /* per-subscriber new-mapping rate, 0 = unlimited */
	__u32 icmp_per_sec;    /* ICMP errors natrix itself sends, per CPU; 0 = none */
	__u32 frag_timeout;    /* ticks a fragment record lives */
	/* The pool as runs of consecutive addresses, in pool-index order: whether an address is
	 * a pool address, and its index, in a few compares instead of a hash lookup on every
	 * packet. 0 runs: the pool has more than NX_POOL_RUNS, nx_pool_idx answers. */
	__u32 pool_nruns;
	struct nx_pool_run pool_runs[NX_POOL_RUNS];
	/* Geometry of the open-addressed tables (see nx_tab.h), indexed by enum nx_tab_id:
	 * buckets of two slots, and the most entries each may hold (its configured size). */
	__u32 tab_nbkt[2];
	__u32 tab_max[2];
	__u32 tab_seed; /* hash seed, chosen when the tables are created, kept on takeover */
	/* The packet path's clock (see NX_TICK_SHIFT): measured when the tables are created,
	 * kept on takeover (the relation of jiffies to CLOCK_MONOTONIC is fixed until reboot). */
	__u64 clk_mult; /* TICK_NSEC << (32 - NX_TICK_SHIFT) */
	__u32 clk_off;
	__u32 clk_hz; /* the kernel's HZ, for information */
	/* Geometry of the subscriber table (nx_subs.h): home slots (the array has
	 * NX_SUB_PROBE more) and the most subscribers it may hold. */
	__u32 sub_nslots;
	__u32 sub_max;
	/* The FIB cache (nx_fwd.h): slots - 1 (a power of two), and how long an answer may be
	 * reused, in jiffies; 0 = no cache, every packet asks the kernel's FIB. */
	__u32 fibc_mask;
	__u32 fibc_max_age;
	/* Deterministic NAT (RFC 7422; nx_det.h), when det_count != 0: subscriber i of the
	 * prefix starting at det_base (host order) owns det_ports outside ports from
	 * port_lo + (i % det_per_addr) * det_ports on pool address i / det_per_addr, on every
	 * protocol. Its port words are its mappings; a lookup or claim walks at most
	 * det_probe pairs of the endpoint's parity from its hashed candidate, then (when
	 * those held no FREE word) at most det_probe pairs of the other parity. */
	__u32 det_base;
	__u32 det_count;
	__u32 det_per_addr;
	__u16 det_ports;
	__u16 det_probe;
	/* What the pinned tables' contents mean (which walk finds a mapping, what a word's
	 * bits say), written by the daemon that created them and checked on every takeover
	 * (src/dataplane.rs, TABLE_LAYOUT): a natrix that would read them otherwise refuses
	 * to take over, an older one or a newer one alike. The data plane does not read it. */
	__u32 layout;
	/* Dynamic mode (nx_home.h): pairs of each parity a walk of a subscriber's home block
	 * goes at most (nat.home_probe; the data plane caps it at block_size / 2). */
	__u32 home_probe;
	/* Per-subscriber state (RFC 6888 REQ-3/4): sessions a subscriber may hold at once,
	 * all protocols, inbound- and outbound-created (limits.max_sessions_per_subscriber;
	 * 0 = no limit). */
	__u32 sess_per_sub;
	/* The ICMP destination unreachable code natrix sends when no mapping can be made
	 * (nat.unreachable_code): 1 host unreachable (RFC 6888 REQ-8), 13 administratively
	 * prohibited (RFC 5508 REQ-8). */
	__u32 unreach_code;
	/* Dynamic mode: the prefixes whose sources natrix translates (nat.subscribers); a
	 * source outside them makes no state and is dropped (not_subscriber). n_subnets
	 * entries used; more than NX_SUBNETS: NX_CF_SUBNET_TRIE. */
	__u32 n_subnets;
	struct nx_subnet subnets[NX_SUBNETS];
	__u32 pad2;
	/* The divisions above, as multiplications (struct nx_udiv), by enum nx_div_id */
	struct nx_udiv div[NX_NDIV];
};
nx_static_assert(sizeof(struct nx_config) == 312, "nx_config layout");

/* ---- The FIB cache (map nx_fibc: per CPU, direct-mapped; see nx_fwd.h) ---------------
 * An answer of bpf_fib_lookup (egress interface and MACs), kept for the key it depends on
 * and reused while the routing stays as it was. One 64-byte line per slot. */
struct nx_fibc_ent {
	/* the key */
	__u32 dst;    /* destination asked for (network order) */
	__u32 src;    /* source; 0 while the routing answers on the destination alone */
	__u32 iif;    /* ingress ifindex */
	__u8 tos;     /* routes may select on it */
	__u8 proto;   /* policy rules may select on it; 0 like src */
	__u16 ok_len; /* the longest IPv4 total length the kernel passed for this answer */
	__u32 gen;    /* nx_fibc_gen's word when filled */
	__u32 born;   /* jiffies (low 32 bits) when filled */
	/* the answer */
	__u32 oif;
	__u8 dmac[6];
	__u8 smac[6];
	__u32 pad[6];
};
nx_static_assert(sizeof(struct nx_fibc_ent) == 64, "nx_fibc_ent: one cache line");

/* The single entry of map nx_fibc_gen, written by the daemon's watcher (src/fibwatch.rs).
 * word, bits 31..1: change whenever it sees the routing change (routes, policy rules,
 * neighbours, links, addresses), which makes every cached answer stale at once; bit 0
 * (NX_FIBC_BY_DST): the routing answers on the destination alone (no policy rules but the
 * three defaults, no multipath route), so the cache leaves source and protocol out of its
 * key. That bit is only trusted while the watcher is alive: within NX_FIBC_ALIVE ticks of
 * its last sign of life, which it gives every 200 ms. A daemon that crashed cannot say that
 * a policy rule appeared; the age bound alone would not help there, as each refill would
 * serve every source for fib_cache.max_age again. */
struct nx_fibc_gen {
	__u64 word;
	__u64 alive; /* tick (NX_TICK_SHIFT) of the watcher's last sign of life */
};

enum nx_fibc_word {
	NX_FIBC_BY_DST = 1,
	NX_FIBC_GEN_STEP = 2,
	NX_FIBC_ALIVE = 64, /* ticks, ~1.07 s */
	/* The watcher writes its sign of life in CLOCK_MONOTONIC ticks; the packet path's
	 * tick, derived from jiffies (src/clock.rs), trails it by up to a jiffy plus the
	 * calibration's rounding, more when the timer tick is late. A sign of life up to
	 * NX_FIBC_SKEW ticks (~67 ms) "in the future" is fresh, not 4 billion ticks old. */
	NX_FIBC_SKEW = 4,
};

/* ---- Outside port array (map nx_ports, direct-indexed) ------------------------------
 * index = (pool_index * NX_NPROTO + proto_idx) * 65536 + outside_port
 * One u64 word, changed only with compare-and-swap (BPF and the daemon through mmap):
 *   bits 63..62  state
 *   USED:        bits 47..16 = inside address, bits 15..0 = inside port; where the word is
 *                the mapping (deterministic mode, nx_det.h; in dynamic mode a word of its
 *                subscriber's home block, nx_home.h) bits 61..48 count the mapping's
 *                sessions (0 in any other word: the mapping table counts them)
 *   HELD:        bits 31..0 = CLOCK_MONOTONIC second at which the port was released
 */
enum nx_port_state {
	NX_PORT_FREE = 0,
	NX_PORT_USED = 1,
	NX_PORT_HELD = 2,
	NX_PORT_STATIC = 3, /* static forward; dynamic allocation never hands it out */
};

enum nx_port_bits {
	NX_PORT_STATE_SHIFT = 62,
	NX_PORT_NSESS_SHIFT = 48,
	NX_PORT_NSESS_MAX = 0x3fff,
	NX_PORT_IP_SHIFT = 16, /* USED: the inside address above the inside port */
};
/* A state's bits in a word (the states are ints: shift them as 64-bit values). */
#define NX_PORT_TAG(state) ((__u64)(state) << NX_PORT_STATE_SHIFT)
#define NX_PORT_STATE(w) ((w) >> NX_PORT_STATE_SHIFT)
#define NX_PORT_NSESS_MASK ((__u64)NX_PORT_NSESS_MAX << NX_PORT_NSESS_SHIFT)

/* ---- Port blocks (map nx_blocks, direct-indexed) ------------------------------------
 * index = pool_index * blocks_per_addr + block_number; block b covers outside ports
 * [port_lo + b * block_size, port_lo + (b + 1) * block_size) on every protocol.
 * One u64 word, compare-and-swap only:
 *   bits 31..0   owner: the subscriber's inside address (network order), 0 = free
 *   bits 49..32  ports of the block in state USED or HELD, all protocols (at most three
 *                times the block size: < 2^18)
 *   bits 62..50  NSESS (nx_limits.h): in the owner's home block only, sessions of the owner
 *                counted here instead of on its subscriber entry (flag NX_SF_HOMECNT), so
 *                that a new connection reads no line beyond those it reads anyway; a block
 *                whose NSESS is not 0 is never released
 *   bit 63       MIXED (nx_home.h): the block is its owner's home block, and the owner may
 *                also have state outside it: mappings in the mapping table, or sessions
 *                counted on its subscriber entry. Set before the first such mapping or
 *                session while it owns the block, and when it takes the block while it
 *                holds others; cleared only with the block's release
 */
enum nx_block_bits {
	NX_BLOCK_USED_SHIFT = 32,
	NX_BLOCK_USED_MASK = 0x3ffff,
	NX_BLOCK_NSESS_SHIFT = 50,
	NX_BLOCK_NSESS_MASK = 0x1fff,
	NX_BLOCK_MIXED_BIT = 63,
};
#define NX_BLOCK_OWNER(w) ((__u32)(w))
#define NX_BLOCK_MIXED (1ULL << NX_BLOCK_MIXED_BIT)
#define NX_BLOCK_USED(w) ((__u32)((w) >> NX_BLOCK_USED_SHIFT) & NX_BLOCK_USED_MASK)
#define NX_BLOCK_NSESS(w) ((__u32)((w) >> NX_BLOCK_NSESS_SHIFT) & NX_BLOCK_NSESS_MASK)
#define NX_BLOCK_NSESS_ONE (1ULL << NX_BLOCK_NSESS_SHIFT)

/* ---- Subscribers (map nx_subs, open-addressed by inside address, see nx_subs.h) -----
 * One 192-byte entry per slot, three cache lines: the first holds everything a claim for
 * the mapping table reads in the common case (key, pool address, rate state, the block it
 * last claimed from and the port each protocol tries first); the other two hold the block
 * slots, read only when that block is full. A home-walk mapping (nx_home.h) reads none
 * of it (the rate state only when a new-mapping rate limit is configured).
 * key: state (enum nx_sub_state) in bits 33..32, inside address (network order) in 31..0;
 * changed only with compare-and-swap. */
enum nx_sub_state {
	NX_SUB_EMPTY = 0, /* never used: a lookup stops here */
	NX_SUB_BUSY = 1,  /* claimed by an insert, not yet readable */
	NX_SUB_LIVE = 2,
	NX_SUB_TOMB = 3, /* deleted: a lookup goes on past it, an insert may reuse it */
};

enum nx_sub_bits {
	NX_SUB_STATE_SHIFT = 32,
	NX_SUB_STATE_MASK = 3,
	/* Linear probing at half load has runs of occupied slots ~50 long in a table of
	 * 10^4-10^5 (the longest run grows as log(n) / 0.19): a window of 32 left a subscriber
	 * now and then with no free slot in reach. 256 makes that practically impossible; a
	 * present subscriber is still found within a slot or two on average. */
	NX_SUB_PROBE = 256,
};

#define NX_SUB_KEY(state, ip) ((__u64)(state) << NX_SUB_STATE_SHIFT | (__u32)(ip))
#define NX_SUB_STATE(key) ((__u32)((key) >> NX_SUB_STATE_SHIFT) & NX_SUB_STATE_MASK)

/* The keys that keep the hashes of subscribers (nx_subs.h), deterministic walks (nx_det.h)
 * and home walks (nx_home.h) apart from the tables' and from each other: 64-bit, as two
 * halves (see the top of this file). */
enum nx_hash_keys {
	NX_SUB_HASH_K1_HI = 0x53554253, /* "SUBSUBSU" */
	NX_SUB_HASH_K1_LO = 0x55425355,
	NX_DET_KEY_HI = 0x6e78, /* "nxdet!" */
	NX_DET_KEY_LO = 0x64657421,
	NX_HOME_KEY_HI = 0x6e78, /* "nxhome" */
	NX_HOME_KEY_LO = 0x686f6d65,
};
#define NX_HASH_KEY(hi, lo) ((__u64)(hi) << 32 | (__u32)(lo))
#define NX_SUB_HASH_K1 NX_HASH_KEY(NX_SUB_HASH_K1_HI, NX_SUB_HASH_K1_LO)
#define NX_DET_KEY NX_HASH_KEY(NX_DET_KEY_HI, NX_DET_KEY_LO)
#define NX_HOME_KEY NX_HASH_KEY(NX_HOME_KEY_HI, NX_HOME_KEY_LO)

struct nx_sub {
	/* line 0: the hot part */
	__u64 key;
	__u32 addr_idx; /* paired pooling: every block of the subscriber is on this address */
	__u32 flags;
	__u64 rate_ts; /* token bucket for the new-mapping rate limit (ns) */
	__u32 rate_tokens;
	__u32 low_used;	 /* outside ports < 1024 held (port class), outside the blocks */
	__u32 cur_block; /* global block id + 1 of the block the last port came from; a hint */
	/* per protocol: the nx_ports index of the (even offset of the) port pair the next
	 * claim in cur_block tries first, drawn at random when the previous claim succeeded
	 * (RFC 6056: unpredictable); 0 = none. A hint: checked against the block on use. */
	__u32 next_port[NX_NPROTO];
	/* sessions whose inside address is this subscriber's (permit records not counted),
	 * all protocols, that are not counted on its home block's word (NX_BLOCK_NSESS): with
	 * those, what limits.max_sessions_per_subscriber bounds. Up when a session is created,
	 * down when the reaper deletes it; atomic (nx_limits.h). */
	__u32 nsess;
	__u32 pad[3];
	/* lines 1-2: global block id + 1 of each block the subscriber holds; 0 = empty slot */
	__u32 blocks[NX_MAX_BLOCKS_PER_SUB];
};
nx_static_assert(sizeof(struct nx_sub) == 192, "nx_sub: three cache lines");

/* ---- Open-addressed tables (maps nx_maps and nx_sess, see nx_tab.h) -----------------
 * Both are mmapable arrays of 32-byte slots, two slots to a 64-byte bucket. The first
 * 8 bytes of a slot hold its key (all of it for a mapping, the ports and protocol for a
 * session) and, in the top byte, the slot's control: state in bits 1..0, which of the
 * key's two home buckets it counts from in bit 2, a generation counter in bits 7..3 that
 * changes whenever the slot is reused. The last 4 bytes of a
 * bucket's first slot count the entries that live beyond this bucket but started their
 * search before it (a lookup stops at a bucket whose count is 0); those of its second slot
 * count the entries whose first home is this bucket but which live in their second chain
 * (0: a key not found in the first chain is not there). */
enum nx_tab_id {
	NX_TAB_SESS = 0,
	NX_TAB_MAPS = 1,
	NX_TAB_SUBS = 2, /* the subscriber table (nx_subs.h): its entry count only */
};

enum nx_slot_state {
	NX_SLOT_EMPTY = 0,
	NX_SLOT_BUSY = 1, /* claimed by an insert, not yet readable */
	NX_SLOT_LIVE = 2,
};

enum nx_slot_bits {
	NX_SLOT_CTL_SHIFT = 56,
	NX_SLOT_STATE_BITS = 3, /* mask of the state, at NX_SLOT_CTL_SHIFT */
	NX_SLOT_ALT_BIT = 58,	/* counted from the key's second home bucket */
	NX_SLOT_GEN_SHIFT = 59,
	NX_SLOT_GEN_BITS = 0x1f, /* mask of the generation, at NX_SLOT_GEN_SHIFT */
	/* the key bits of a slot's first word, from bit 0; the rest is control (and session
	 * state) */
	NX_SESS_W0_KEY_BITS = 40, /* in_port, rem_port, proto */
	NX_MAPS_W0_KEY_BITS = 56, /* in_ip, in_port, proto */
	/* byte offset of a bucket's counts in each of its slots: overflow in the first, alt
	 * in the second */
	NX_SLOT_OVF_OFF = 28,
	/* Buckets a key may live beyond its home bucket (lookups stop far sooner: nx_tab.h). */
	NX_TAB_PROBE = 32,
};
#define NX_SLOT_STATE(w0) ((__u32)((w0) >> NX_SLOT_CTL_SHIFT) & NX_SLOT_STATE_BITS)

/* ---- Mappings, the BIB (map nx_maps) --------------------------------------------------
 * Endpoint-independent: one entry per inside (address, port|query id, protocol).
 * nx_map_key is how a mapping is searched for; its 8 bytes are the slot's first word. */
struct nx_map_key {
	__u32 in_ip;   /* network order */
	__u16 in_port; /* network order; ICMP: the echo identifier */
	__u8 proto;    /* IPPROTO_* */
	__u8 pad;      /* the slot's control byte; 0 in a search key */
};
nx_static_assert(sizeof(struct nx_map_key) == 8, "nx_map_key layout");

struct nx_map {
	struct nx_map_key key; /* and the slot control in key.pad */
	__u32 out_ip;	       /* network order */
	__u16 out_port;	       /* network order */
	__u16 flags;	       /* enum nx_map_flags */
	__u32 nsess;	       /* sessions referring to this mapping (atomic) */
	__u32 expire;	       /* tick: a mapping that never got a session expires then */
	__u32 pad;
	__u32 ovf; /* bucket overflow count (first slot of a bucket only) */
};
nx_static_assert(sizeof(struct nx_map) == 32, "nx_map layout");

enum nx_map_flags {
	NX_MF_STATIC = 1 << 0,
	/* not in the table: a deterministic mapping's port word seen as a mapping (nx_det.h);
	 * the slot's pad then holds the word's nx_ports index */
	NX_MF_DET = 1 << 1,
};

/* ---- Sessions (map nx_sess) -------------------------------------------------------------
 * One entry per connection, keyed from the inside: (inside ip:port, remote ip:port). */
struct nx_sess_key {
	__u32 in_ip;
	__u32 rem_ip;
	__u16 in_port;
	__u16 rem_port;
	__u8 proto;
	__u8 pad[3];
};
nx_static_assert(sizeof(struct nx_sess_key) == 16, "nx_sess_key layout");

struct nx_sess {
	/* first word: key (ports, protocol), state, flags and the slot control */
	__u16 in_port;
	__u16 rem_port;
	__u8 proto;
	__u8 state; /* enum nx_tcp_state; NX_TCP_NONE for UDP and ICMP */
	__u8 flags; /* enum nx_sess_flags */
	__u8 ctl;
	/* second word: the rest of the key */
	__u32 in_ip;
	__u32 rem_ip;
	/* the mapping's outside endpoint (network order), copied so that an established
	 * packet needs this one lookup, not two */
	__u32 out_ip;
	__u32 expire; /* tick */
	__u16 out_port;
	__u16 pad;
	__u32 ovf; /* bucket overflow count (first slot of a bucket only) */
};
nx_static_assert(sizeof(struct nx_sess) == 32, "nx_sess layout");

/* nx_map.nsess of a mapping the reaper is deleting: no session may refer to it any more
 * (a session copies its mapping's outside endpoint, so it must never outlive the port). */
enum nx_nsess {
	NX_NSESS_DYING = 0xffffffffU,
};

/* TCP connection tracking, after RFC 6146 section 3.5.2 and RFC 7857 section 2.1. */
enum nx_tcp_state {
	NX_TCP_NONE = 0,
	NX_TCP_SYN_OUT = 1, /* SYN seen from inside only */
	NX_TCP_SYN_IN = 2,  /* SYN seen from outside only */
	NX_TCP_EST = 3,
	NX_TCP_FIN_OUT = 4, /* FIN from inside */
	NX_TCP_FIN_IN = 5,  /* FIN from outside */
	NX_TCP_FIN_BOTH = 6,
	NX_TCP_RST = 7, /* RST seen: transitory timeout, not deleted at once (RFC 7857) */
	NX_TCP_NSTATES, /* the count, not a state (user space names each state: src/abi.rs) */
};

enum nx_sess_flags {
	NX_SF_INBOUND = 1 << 0, /* created by an inbound packet */
	/* Not a connection: address-dependent filtering's "this inside endpoint has sent to
	 * this remote address", keyed with remote port 0. Does not hold its mapping. */
	NX_SF_PERMIT = 1 << 1,
	/* Counted on its subscriber's home block word (NX_BLOCK_NSESS), not on the subscriber's
	 * entry: where the reaper gives the count back (nx_limits.h). */
	NX_SF_HOMECNT = 1 << 2,
};

/* ---- Interfaces (map nx_ifaces, hash by ifindex) ------------------------------------- */
enum nx_iface_role {
	NX_ROLE_NONE = 0,
	NX_ROLE_INSIDE = 1,
	NX_ROLE_OUTSIDE = 2,
};

/* The unicast MACs a frame on an interface may be addressed to for natrix to take it: the
 * interface's own and configured virtual ones (VRRP). A frame for another MAC (a switch
 * flooding an unknown destination, promiscuous mode) is the kernel's to ignore. Each MAC is
 * its 6 bytes in memory order in the low bytes of a u64 (nx_mac_word). */
enum nx_iface_macs {
	NX_IF_MACS = 4,
	/* interfaces with a smaller ifindex are also in the array nx_ifrole (nx_state.h) */
	NX_IFROLE_DIRECT = 1024,
};
struct nx_iface {
	__u32 role;  /* enum nx_iface_role */
	__u32 addr;  /* the interface's IPv4 address (network order): source of the ICMP
		      * errors natrix sends to subscribers; 0 if it has none */
	__u32 nmacs; /* entries of macs used; 0: the interface has no MAC (no check) */
	__u32 pad;
	__u64 macs[NX_IF_MACS];
};
nx_static_assert(sizeof(struct nx_iface) == 48, "nx_iface layout");

/* ---- Exclusions (map nx_excl, LPM trie): destinations forwarded untranslated -------- */
struct nx_lpm_key {
	__u32 prefixlen;
	__u32 addr; /* network order */
};

/* ---- Fragments (RFC 4787 REQ-14) -------------------------------------------------------
 * Inbound non-first fragments carry no port: the first fragment, when translated, leaves a
 * record naming the inside address for the rest of its datagram (map nx_frags, LRU:
 * short-lived, bounded, nothing else depends on it). A fragment that arrives before its
 * first is copied to the ring buffer nx_frag_rb; the daemon re-injects it once the record
 * exists, or drops it after fragments.timeout. */
struct nx_frag_key {
	__u32 src;
	__u32 dst;
	__u16 id;
	__u8 proto;
	__u8 pad;
};
nx_static_assert(sizeof(struct nx_frag_key) == 12, "nx_frag_key layout");

struct nx_frag {
	__u32 in_ip;  /* translated destination */
	__u32 expire; /* tick */
};

/* The largest fragment natrix holds: a 9000-byte jumbo MTU with room to spare (a larger
 * one is dropped, fragment_too_big, never cut). Records of fragments up to
 * NX_FRAG_HOLD_SMALL bytes take only NX_FRAG_REC_SMALL bytes of the ring. */
enum nx_frag_sizes {
	NX_FRAG_HOLD_MAX = 9216,
	NX_FRAG_HOLD_SMALL = 1536,
	NX_FRAG_REC_SMALL = 16 + NX_FRAG_HOLD_SMALL,
};

struct nx_frag_hold {
	struct nx_frag_key key;
	__u32 len; /* bytes of data used, from the IP header on */
	__u8 data[NX_FRAG_HOLD_MAX];
};

/* ---- Reaper (the control program nx_ctl, run by the daemon) -------------------------
 * The daemon finds candidates by scanning; the data-plane code deletes them with the same
 * atomics the fast path uses, after checking again that they are still expired. */
enum nx_reap_sizes {
	NX_REAP_BATCH = 64,
};

enum nx_reap_op {
	NX_REAP_SESSIONS = 1,  /* sess[] holds candidate session keys */
	NX_REAP_MAPPINGS = 2,  /* maps[] holds candidate mapping keys (nsess == 0) */
	NX_CTL_STATIC_ADD = 3, /* statics[]: add these static mappings ([[forward]]) */
	NX_CTL_STATIC_DEL = 4, /* maps[]: delete these static mappings */
	NX_REAP_SUBS = 5,      /* subs[]: subscribers that held no port (inside addresses) */
};

/* A static mapping for NX_CTL_STATIC_ADD (the port word is the daemon's to write). */
struct nx_static_map {
	struct nx_map_key key;
	__u32 out_ip;
	__u16 out_port;
	__u16 pad;
};

struct nx_reap_args {
	__u32 op;	    /* enum nx_reap_op */
	__u32 n;	    /* entries used, <= NX_REAP_BATCH */
	__u32 now_s;	    /* CLOCK_MONOTONIC seconds, written into released ports */
	__u32 deleted;	    /* out: entries deleted (NX_CTL_STATIC_ADD: added) */
	__u32 maps_deleted; /* out: mappings deleted as a consequence */
	__u32 pad;
	union {
		struct nx_sess_key sess[NX_REAP_BATCH];
		struct nx_map_key maps[NX_REAP_BATCH];
		struct nx_static_map statics[NX_REAP_BATCH];
		__u32 subs[NX_REAP_BATCH];
	};
};

/* ---- Capture (nx_cap.h; src/capture, `natrix capture`) ---------------------------------
 * While a capture runs, every packet of natrix's interfaces takes a detour through tail
 * calls: the capture's filter on the received form, the fast path as usual (a copy of it
 * that keeps the received form), the filter again on the sent form, and nx_xdp_cap_emit,
 * which hands both forms and the verdict to the ring nx_cap_rb. Idle, the detour costs the
 * entry programs one tail call into an empty slot. */
enum nx_cap_sizes {
	NX_CAP_SNAP_MAX = 9216, /* bytes of one form a record holds at most (NX_FRAG_HOLD_MAX) */
	NX_CAP_RING = 8 << 20,	/* nx_cap_rb's size in bytes */
	NX_CAP_IFACES = 16,	/* interfaces a capture can be limited to (-i) */
	NX_CAP_HDR_ONLY = 128,	/* --no-pair: bytes of the sent form kept (for the mapping) */
};

/* nx_cap_ctl.flags */
enum nx_cap_flags {
	NX_CAPF_DROPS = 1,   /* --drops: only packets natrix drops */
	NX_CAPF_NO_PAIR = 2, /* --no-pair: only the received form is written */
};

/* nx_cap_rec.matched: which form the filter matched */
enum nx_cap_match {
	NX_CAPM_RX = 1,
	NX_CAPM_TX = 2,
};

/* The single entry of map nx_cap_ctl (pinned): the running capture's settings, written by
 * `natrix capture` before it fills the filter slots of nx_progs and cleared after. */
struct nx_cap_ctl {
	__u32 owner; /* pid of the capture; 0: none */
	__u32 flags; /* enum nx_cap_flags */
	__u32 snap;  /* bytes of each form to keep, 1 .. NX_CAP_SNAP_MAX */
	__u32 nif;   /* interfaces in ifindex[]; 0: all of natrix's */
	__u32 ifindex[NX_CAP_IFACES];
};

/* One packet in the ring nx_cap_rb: this header, rx_cap bytes of the received form, then
 * tx_cap bytes of the sent form (none when dropped). */
struct nx_cap_rec {
	__u64 tai_ns;	  /* received, CLOCK_TAI */
	__u64 id;	  /* packet id: CPU << 56 | that CPU's sequence */
	__u32 rx_ifindex; /* received on */
	__u32 tx_ifindex; /* sent on: the redirect's target; the receiving interface for an ICMP
			   * error natrix sends back and for a packet passed to the kernel */
	__u32 verdict;	  /* nx_verdict: XDP action << 16 | reason (enum nx_stat) */
	__u32 rx_len;	  /* the received frame's length */
	__u32 tx_len;	  /* the sent frame's length; 0 when dropped */
	__u16 rx_cap;	  /* bytes of the received form that follow */
	__u16 tx_cap;	  /* bytes of the sent form after those */
	__u8 matched;	  /* enum nx_cap_match */
	__u8 pad[7];
};
nx_static_assert(sizeof(struct nx_cap_rec) == 48, "nx_cap_rec layout");

/* The single entry of per-CPU map nx_cap_buf (pinned): one packet's capture in progress.
 * rx_snap and tx_snap are written by the generated filter stages (src/capture/stage.rs),
 * at their offsets in this struct. */
struct nx_cap_buf {
	__u32 armed;	  /* this CPU's packet is being captured: its exit goes to the tx stage */
	__u32 rx_snap;	  /* the filter's answer on the received form: 0 no match */
	__u32 tx_snap;	  /* ... on the sent form */
	__u32 verdict;	  /* the packet's verdict, for the stages after its exit */
	__u64 seq;	  /* packets this CPU captured: the packet ids */
	__u64 records;	  /* packets handed to the ring */
	__u64 lost;	  /* records (forms) of packets the ring could not take */
	__u64 stage_fail; /* a tail call of the capture's chain that found its slot empty */
	struct nx_cap_rec rec;
	__u8 data[2 * NX_CAP_SNAP_MAX];
};

/* ---- ABI probe (the syscall program nx_abi_probe; tests only) -------------------------
 * The hash, home and walk functions user space mirrors (src/tables.rs), run by the data
 * plane's own code on the inputs given here: a test (tests/abi.rs) compares them with the
 * Rust ones on random inputs. natrix itself never runs it. */
struct nx_abi_probe {
	/* in */
	struct nx_config cfg; /* tab_seed, flags, the pool's and the walks' geometry */
	__u64 k0;	      /* nx_tab_hash's key words */
	__u64 k1;
	__u64 h;	/* a hash, for nx_tab_home and nx_sub_home */
	__u32 nbkt;	/* nx_tab_home's buckets */
	__u32 nslots;	/* nx_sub_home's slots */
	__u32 sip;	/* inside address, network order */
	__u32 pidx;	/* enum nx_proto_idx */
	__u32 port;	/* inside port (host order) for the walks; outside port for the rest */
	__u32 first;	/* first port of the walk's range or block */
	__u32 addr_idx; /* pool index */
	__u32 proto;	/* IP protocol number, for nx_proto_idx */
	struct nx_sess_key sk;
	struct nx_map_key mk;
	/* out */
	__u64 tab_hash;
	__u64 sub_hash;
	__u64 sess_k0;
	__u64 sess_k1;
	__u64 map_k0;
	__s64 home_block; /* nx_home_block(sip) */
	__u32 tab_home[2];
	__u32 sub_home;
	__u32 det_start;  /* nx_det_start of endpoint (sip, pidx, port) in the range at first */
	__u32 home_start; /* the home walk's start, the same in the block at first */
	__u32 proto_idx;
	__u32 port_index;  /* nx_port_index(addr_idx, pidx, port) */
	__u32 word_is_map; /* nx_word_is_map(sip, addr_idx, port) */
};

/* ---- Counters (map nx_stats, per-CPU array indexed by enum nx_stat) -----------------
 * Every XDP_DROP in the data plane increments exactly one NX_DROP_* counter. The names
 * user space prints are these, lower-cased, without the prefix. */
enum nx_stat {
	/* traffic */
	NX_STAT_RX_INSIDE = 0,
	NX_STAT_RX_OUTSIDE,
	NX_STAT_XLATE_OUT,	/* translated inside -> outside */
	NX_STAT_XLATE_IN,	/* translated outside -> inside */
	NX_STAT_REDIRECT,	/* forwarded by XDP itself */
	NX_STAT_PASS_NOT_IP,	/* non-IPv4 (ARP, IPv6...) to the kernel */
	NX_STAT_PASS_LOCAL,	/* for the gateway itself, or not ours to translate */
	NX_STAT_PASS_TTL,	/* TTL <= 1: the kernel answers time exceeded */
	NX_STAT_PASS_NO_NEIGH,	/* translated, neighbour unresolved: kernel forwards */
	NX_STAT_PASS_FIB_OTHER, /* fib said anything else: kernel decides */
	NX_STAT_PASS_TOO_BIG,	/* translated, too big without DF: the kernel fragments it */
	NX_STAT_MAP_CREATED,
	NX_STAT_SESS_CREATED,
	NX_STAT_SUB_CREATED,
	NX_STAT_BLOCK_ALLOC,
	NX_STAT_ALLOC_RETRY,	 /* a compare-and-swap lost to another CPU */
	NX_STAT_PASS_EXCLUDED,	 /* destination in an [[exclude]] prefix: forwarded as is */
	NX_STAT_ICMP_ERR_IN,	 /* ICMP errors translated outside -> inside */
	NX_STAT_ICMP_ERR_OUT,	 /* ICMP errors translated inside -> outside */
	NX_STAT_ICMP_SENT,	 /* ICMP errors natrix generated (3/4, 3/13) */
	NX_STAT_ICMP_SUPPRESSED, /* ... not sent: rate limit */
	NX_STAT_FRAG_OUT,	 /* fragments translated inside -> outside */
	NX_STAT_FRAG_IN,	 /* fragments translated outside -> inside */
	NX_STAT_FRAG_HELD,	 /* arrived before their first fragment: handed to the daemon */
	NX_STAT_FIB_LOOKUP,	 /* asked the kernel's FIB (not answered by the FIB cache) */
	NX_STAT_HOME_BLOCK,	 /* a block taken was the subscriber's home block (nx_alloc.h) */
	NX_STAT_PASS_OTHER_HOST, /* unicast frame for another MAC: the kernel ignores it */
	NX_STAT_FRAG_REINJECTED, /* held early fragments the daemon translated and sent on */
	NX_STAT_LOG_EVENT,	 /* NAT events the data plane logged (nx_log.h) */
	NX_STAT_LOG_LOST,	 /* ... that its ring buffer could not take (full) */
	/* drops: one reason each */
	NX_DROP_FIRST,
	NX_DROP_MALFORMED_ETH = NX_DROP_FIRST, /* frame shorter than its headers */
	NX_DROP_MALFORMED_IP,		       /* bad version, IHL < 5, total length that lies */
	NX_DROP_MALFORMED_L4,  /* truncated TCP/UDP/ICMP header, bad TCP data offset */
	NX_DROP_FRAGMENT,      /* fragment natrix cannot translate (hairpinned, or tiny first) */
	NX_DROP_FRAG_NO_STATE, /* early fragment and no room left to hold it */
	NX_DROP_UNSUPPORTED_PROTO, /* neither TCP, UDP nor ICMP */
	NX_DROP_UNSUPPORTED_ICMP,  /* ICMP type natrix does not translate */
	NX_DROP_NO_MAPPING,	   /* inbound to the pool with no mapping */
	NX_DROP_FILTERED,	   /* inbound refused by the filtering mode */
	NX_DROP_POOL_EXHAUSTED,	   /* no free block on any pool address */
	NX_DROP_QUOTA_EXCEEDED,	   /* subscriber's blocks all used (max_blocks) */
	NX_DROP_RATE_LIMITED,	   /* subscriber's new-mapping rate */
	NX_DROP_TABLE_FULL,	   /* mapping/session/subscriber table at max_entries */
	NX_DROP_HAIRPIN_DISABLED,
	NX_DROP_TCP_NO_SYN, /* first TCP packet of a flow is not a SYN (outbound) */
	NX_DROP_REDIRECT_FAILED,
	NX_DROP_ICMP_BAD_CHECKSUM, /* ICMP error with a bad ICMP or embedded IP checksum */
	NX_DROP_ICMP_MALFORMED,	   /* ICMP error whose embedded packet is truncated or not IPv4 */
	NX_DROP_MTU_EXCEEDED,	   /* too big with DF set (the sender got fragmentation needed) */
	NX_DROP_MAP_DYING,  /* its mapping was being deleted that instant: the next packet makes a
			       new one */
	NX_DROP_TABLE_BUSY, /* another CPU held the table's insert lock too long */
	NX_DROP_NOT_SUBSCRIBER, /* source outside the subscriber prefixes */
	NX_DROP_SESSION_QUOTA,	/* the subscriber holds limits.max_sessions_per_subscriber */
	NX_DROP_FRAG_TOO_BIG,	/* early fragment larger than natrix can hold (NX_FRAG_HOLD_MAX) */
	/* held early fragments the daemon gave up (src/frag.rs): its first fragment never
	 * came within fragments.timeout; pushed out by a newer one at fragments.max_held; the
	 * raw socket refused to send it */
	NX_DROP_FRAG_EXPIRED,
	NX_DROP_FRAG_EVICTED,
	NX_DROP_FRAG_SEND_FAILED,
	NX_DROP_LOG_FULL, /* log.strict: a new block's event found the log full, no block */
	NX_DROP_INTERNAL, /* a lookup that cannot fail did: a bug, never expected */
	NX_STAT_MAX,
};

#endif /* NX_TYPES_H */
