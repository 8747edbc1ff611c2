/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The NAT event log: the events of RFC 8158 that happen in the data plane, made where they
 * happen, with the time they happen (CLOCK_TAI, to the nanosecond), into the pinned ring
 * buffer nx_log_rb, which the daemon empties into IPFIX and syslog (src/natlog).
 *
 * - A port block's allocation (natEvent 16) is logged by the claim that takes it
 *   (nx_alloc.h: nx_home_take, nx_block_claim), before any port of it is used; a block
 *   given back at once (a lost race) is logged as released (17). The daemon logs the
 *   releases it makes (src/expiry.rs), after the block's last use.
 * - A session's creation (4) is logged by nx_sess_create when log.sessions is on; its
 *   deletion (5) by the daemon, which deletes it.
 * - A refusal for want of resources (nx_refuse: pool, block quota, session quota, a full
 *   table) is logged as addresses exhausted (3), ports exhausted (12) or quota exceeded
 *   (13), at most once a second per CPU for each kind.
 *
 * Nothing is lost silently: an event the ring cannot take is counted (log_lost), and with
 * log.strict a new block whose event cannot be taken is given back and the packet dropped
 * (log_full): no port block is handed out that the log will not show. Every record is
 * built in the per-CPU scratch, not on the stack: the allocator calls here from the
 * deepest frame of the slow path.
 */
#ifndef NX_LOG_H
#define NX_LOG_H

#include "nx_common.h"
#include "nx_state.h"
#include "nx_stats.h"
#include "nx_subs.h"

/* Hand the event in the scratch to the ring: NX_OK, or -NX_DROP_LOG_FULL (counted lost). */
static __always_inline int nx_log_put(struct nx_log_ev *ev)
{
	if (bpf_ringbuf_output(&nx_log_rb, ev, sizeof(*ev), 0)) {
		nx_count(NX_STAT_LOG_LOST);
		return -NX_DROP_LOG_FULL;
	}
	nx_count(NX_STAT_LOG_EVENT);
	return NX_OK;
}

/* The scratch's event, cleared, with its kind and time, or 0. */
static __always_inline struct nx_log_ev *nx_log_new(__u32 kind, __u64 t)
{
	struct nx_scratch *scr = nx_scratch_get();
	struct nx_log_ev *ev;

	if (!scr)
		return 0;
	ev = &scr->log;
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->time = t;
	ev->kind = kind;
	return ev;
}

/* Block gid allocated to (NX_LOG_BLOCK_ALLOC) or given back by (NX_LOG_BLOCK_FREE)
 * subscriber sip, now: an allocation's time goes to nx_block_time, and the event to the
 * log when logging is on. NX_OK, or -NX_DROP_LOG_FULL when the event could not be logged
 * (already counted). Global: verified once, its frame small. */
__noinline int nx_log_block(__u32 gid, __u32 sip, __u32 kind)
{
	struct nx_config *cfg = nx_config();
	__u64 t = bpf_ktime_get_tai_ns(), *bt;
	__u32 bpa, a, first, *ip;
	struct nx_log_ev *ev;

	if (kind == NX_LOG_BLOCK_ALLOC) {
		bt = bpf_map_lookup_elem(&nx_block_time, &gid);
		if (bt)
			*bt = t;
	}
	if (!cfg || !(cfg->flags & NX_CF_LOG))
		return NX_OK;
	bpa = cfg->blocks_per_addr;
	if (!bpa)
		return NX_OK;
	ev = nx_log_new(kind, t);
	if (!ev)
		return NX_OK;
	a = gid / bpa; /* a block's allocation, not every packet: a divide is fine here */
	first = cfg->port_lo + (gid - a * bpa) * cfg->block_size;
	ip = bpf_map_lookup_elem(&nx_pool, &a);
	ev->in_ip = sip;
	ev->out_ip = ip ? *ip : 0;
	ev->in_port = (__u16)first;
	ev->out_port = (__u16)(first + cfg->block_size - 1);
	return nx_log_put(ev);
}

/* The last argument of nx_log_sess: the inside port, the outside port and the remote port
 * (host order, 16 bits each, from bit 0), the IP protocol (bits 48..55) and the event's
 * kind (bits 56..63). */
#define NX_LOG_SESS_ARG(kind, proto, in_port_h, out_port_h, rem_port_h)                            \
	((__u64)(in_port_h) | (__u64)(out_port_h) << 16 | (__u64)(rem_port_h) << 32 |              \
	 (__u64)(proto) << 48 | (__u64)(kind) << 56)

/* A session created (NX_LOG_SESS_CREATE, nx_sess_create) or deleted (NX_LOG_SESS_DELETE,
 * the reaper) now: inside in_ip, outside out_ip, remote rem_ip, the rest in ports
 * (NX_LOG_SESS_ARG). Logged when log.sessions is on, the remote endpoint only with
 * log.destinations. Global. */
__noinline int nx_log_sess(__u32 in_ip, __u32 out_ip, __u32 rem_ip, __u64 ports)
{
	struct nx_config *cfg = nx_config();
	struct nx_log_ev *ev;

	if (!cfg || !(cfg->flags & NX_CF_LOG_SESSIONS))
		return NX_OK;
	ev = nx_log_new((__u32)(ports >> 56), bpf_ktime_get_tai_ns());
	if (!ev)
		return NX_OK;
	ev->in_ip = in_ip;
	ev->out_ip = out_ip;
	ev->in_port = (__u16)ports;
	ev->out_port = (__u16)(ports >> 16);
	ev->proto = (__u8)(ports >> 48);
	if (ev->kind != NX_LOG_SESS_CREATE && ev->kind != NX_LOG_SESS_DELETE)
		return NX_OK;
	if (cfg->flags & NX_CF_LOG_DEST) {
		ev->rem_ip = rem_ip;
		ev->rem_port = (__u16)(ports >> 32);
	}
	return nx_log_put(ev);
}

/* Whether the limit event of slot may be made now on this CPU (at most one a second), and
 * if so the time it is made at, else 0. */
static __always_inline __u64 nx_log_rate(struct nx_scratch *scr, __u32 slot)
{
	__u64 t = bpf_ktime_get_tai_ns();

	if (slot >= NX_LOGRL_N)
		return 0;
	if (scr->log_last[slot] && t - scr->log_last[slot] < 1000000000ull)
		return 0;
	scr->log_last[slot] = t;
	return t;
}

/* Subscriber sip was refused a mapping or session of IP protocol proto for reason
 * (nx_refuse): log what ran out, rate-limited. Global: called once per refusal, off the
 * translating path. */
__noinline int nx_log_refusal(__u32 sip, __u32 reason, __u32 proto)
{
	struct nx_config *cfg = nx_config();
	struct nx_scratch *scr = nx_scratch_get();
	__u32 kind, detail = 0, limit = 0, slot, out = 0, ti, *cnt, *ip;
	struct nx_log_ev *ev;
	struct nx_sub *sub;
	__u64 t;

	if (!cfg || !scr || !(cfg->flags & NX_CF_LOG))
		return NX_OK;
	switch (reason) {
	case NX_DROP_POOL_EXHAUSTED:
		/* a subscriber with blocks ran out on its own address; a new one on all */
		sub = cfg->det_count ? 0 : nx_sub_lookup(cfg, sip);
		if (sub) {
			kind = NX_LOG_PORTS_EXHAUSTED;
			slot = NX_LOGRL_PORTS;
			ti = sub->addr_idx;
			ip = bpf_map_lookup_elem(&nx_pool, &ti);
			out = ip ? *ip : 0;
		} else {
			kind = NX_LOG_ADDRS_EXHAUSTED;
			slot = NX_LOGRL_ADDRS;
		}
		break;
	case NX_DROP_QUOTA_EXCEEDED:
		kind = NX_LOG_QUOTA;
		detail = NX_LOGQ_PER_USER;
		limit = cfg->max_blocks;
		break;
	case NX_DROP_SESSION_QUOTA:
		kind = NX_LOG_QUOTA;
		detail = NX_LOGQ_PER_USER;
		limit = cfg->sess_per_sub;
		break;
	case NX_DROP_TABLE_FULL:
		/* which table: the first found at its configured size */
		kind = NX_LOG_QUOTA;
		ti = NX_TAB_SESS;
		cnt = bpf_map_lookup_elem(&nx_tab_cnt, &ti);
		if (cnt && *cnt >= cfg->tab_max[NX_TAB_SESS]) {
			detail = NX_LOGQ_SESSIONS;
			limit = cfg->tab_max[NX_TAB_SESS];
			break;
		}
		ti = NX_TAB_MAPS;
		cnt = bpf_map_lookup_elem(&nx_tab_cnt, &ti);
		if (cnt && *cnt >= cfg->tab_max[NX_TAB_MAPS]) {
			detail = NX_LOGQ_BIB;
			limit = cfg->tab_max[NX_TAB_MAPS];
			break;
		}
		detail = NX_LOGQ_SUBSCRIBERS;
		limit = cfg->sub_max;
		break;
	default:
		return NX_OK; /* the rate limit and the log itself have no RFC 8158 event */
	}
	if (kind == NX_LOG_QUOTA)
		slot = NX_LOGRL_QUOTA + detail - 1;
	t = nx_log_rate(scr, slot);
	if (!t)
		return NX_OK;
	ev = nx_log_new(kind, t);
	if (!ev)
		return NX_OK;
	ev->detail = (__u8)detail;
	ev->limit = limit;
	ev->proto = (__u8)proto; /* ports exhausted is per protocol (RFC 8158) */
	ev->out_ip = out;
	/* addresses exhausted names no subscriber (RFC 8158: the pool), the others do */
	if (kind != NX_LOG_ADDRS_EXHAUSTED)
		ev->in_ip = sip;
	return nx_log_put(ev);
}

#endif /* NX_LOG_H */
