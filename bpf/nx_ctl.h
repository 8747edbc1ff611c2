/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The control program nx_ctl, which the daemon runs (BPF_PROG_RUN) on a batch in nx_reap_buf:
 * expiry (the reaper), and the static forwards' mapping-table writes.
 *
 * Expiry, executed in BPF with the fast path's own atomics; the daemon only chooses the
 * candidates (src/expiry.rs). Each candidate is checked again here, against the kernel's
 * clock, right before it is deleted: a session refreshed since the daemon looked survives.
 * Only the CPU whose delete succeeds goes on to release, so nothing is released twice. */
#ifndef NX_CTL_H
#define NX_CTL_H

#include "nx_alloc.h"
#include "nx_state.h"
#include "nx_session.h"
#include "nx_tab.h"

/* Delete a mapping without sessions (in slot slot), and put its outside port on hold-down. */
static __always_inline int nx_map_release(struct nx_map_key *mk, __u32 slot, struct nx_map *m,
					  __u32 now_s)
{
	__u32 out_ip = m->out_ip;
	__u16 out_port = bpf_ntohs(m->out_port);
	struct nx_config *cfg = nx_config();
	__u32 addr_idx;

	if (m->flags & NX_MF_STATIC)
		return 0;
	/* Marked dying first: a packet creating a session on it from now on backs off
	 * (nx_map_ref), so no session can outlive the port it copied. */
	if (__sync_val_compare_and_swap(&m->nsess, 0, NX_NSESS_DYING) != 0)
		return 0;
	if (!nx_maps_delete(slot, nx_map_k0(mk)))
		return 0;
	if (!cfg || !nx_pool_index(cfg, out_ip, &addr_idx))
		return 1;
	if (nx_port_hold(addr_idx, nx_proto_idx(mk->proto), out_port,
			 nx_port_word(mk->in_ip, bpf_ntohs(mk->in_port)), now_s)) {
		/* a port-class port: the subscriber holds one fewer (see nx_alloc_low_port) */
		if (out_port < cfg->port_lo) {
			struct nx_sub *sub = nx_sub_lookup(cfg, mk->in_ip);

			if (sub)
				__sync_fetch_and_sub(&sub->low_used, 1);
		}
	}
	return 1;
}

/* One fewer session on mapping mk; the last one out releases the mapping. */
static __always_inline int nx_map_unref(struct nx_map_key *mk, __u32 now_s)
{
	__u32 slot = nx_maps_find(nx_map_k0(mk));
	struct nx_map *m = nx_map_at(slot);

	if (!m)
		return 0;
#pragma unroll
	for (int t = 0; t < 8; t++) {
		__u32 old = *(volatile __u32 *)&m->nsess;

		if (old == 0 || old == NX_NSESS_DYING)
			break;
		if (__sync_val_compare_and_swap(&m->nsess, old, old - 1) == old) {
			if (old == 1)
				return nx_map_release(mk, slot, m, now_s);
			return 0;
		}
	}
	return m->nsess == 0 ? nx_map_release(mk, slot, m, now_s) : 0;
}

/* A batch's entries, one bpf_loop callback each per command: the verifier checks each
 * entry's code once, where a loop over the batch's 64 entries was checked once per entry
 * (nx_ctl was 412k instructions on 6.18). */
struct nx_ctl_loop {
	struct nx_reap_args *a;
	struct nx_config *cfg; /* may be NULL */
	__u32 now;	       /* CLOCK_MONOTONIC in ticks */
};

/* NX_REAP_SESSIONS: delete expired sessions, and the mappings that were their last. */
static long nx_ctl_sess_cb(__u64 i, void *vctx)
{
	struct nx_ctl_loop *c = vctx;
	struct nx_reap_args *a = c->a;
	struct nx_config *cfg = c->cfg;
	struct nx_map_key mk = {};
	struct nx_sess_key k;
	__u32 slot, out_ip, addr_idx = 0;
	__u64 k0, k1;
	struct nx_sess *s;
	__u16 out_port;
	__u8 permit, home;

	if (i >= NX_REAP_BATCH)
		return 1;
	k = a->sess[i];
	k0 = nx_sess_k0(&k);
	k1 = nx_sess_k1(&k);
	slot = nx_sess_find(k0, k1);
	s = nx_sess_at(slot);
	if (!s || (__s32)(s->expire - c->now) > 0)
		return 0;
	permit = s->flags & NX_SF_PERMIT;
	home = s->flags & NX_SF_HOMECNT;
	out_ip = s->out_ip;
	out_port = s->out_port;
	if (!nx_sess_delete(slot, k0, k1))
		return 0;
	a->deleted++;
	if (permit)
		return 0; /* a filtering record holds no mapping, counts on nobody */
	nx_sess_put(k.in_ip, home);
	if (cfg && (cfg->flags & NX_CF_LOG_SESSIONS))
		nx_log_sess(k.in_ip, out_ip, k.rem_ip,
			    NX_LOG_SESS_ARG(NX_LOG_SESS_DELETE, k.proto, bpf_ntohs(k.in_port),
					    bpf_ntohs(out_port), bpf_ntohs(k.rem_port)));
	mk.in_ip = k.in_ip;
	mk.in_port = k.in_port;
	mk.proto = k.proto;
	/* a mapping that is its port word (a static forward's word is not) */
	if (cfg && nx_pool_index(cfg, out_ip, &addr_idx) &&
	    nx_word_is_map(cfg, mk.in_ip, addr_idx, bpf_ntohs(out_port)) &&
	    nx_word_state(addr_idx, k.proto, out_port) == NX_PORT_USED)
		a->maps_deleted += nx_port_unref(cfg, &mk, out_ip, out_port, a->now_s);
	else
		a->maps_deleted += nx_map_unref(&mk, a->now_s);
	return 0;
}

/* NX_REAP_MAPPINGS: delete expired mappings that hold no session. */
static long nx_ctl_maps_cb(__u64 i, void *vctx)
{
	struct nx_ctl_loop *c = vctx;
	struct nx_reap_args *a = c->a;
	struct nx_map_key mk;
	struct nx_map *m;
	__u32 slot;

	if (i >= NX_REAP_BATCH)
		return 1;
	mk = a->maps[i];
	slot = nx_maps_find(nx_map_k0(&mk));
	m = nx_map_at(slot);
	if (!m || m->nsess != 0 || (__s32)(m->expire - c->now) > 0)
		return 0;
	if (nx_map_release(&mk, slot, m, a->now_s)) {
		a->deleted++;
		a->maps_deleted++;
	}
	return 0;
}

/* NX_CTL_STATIC_ADD: the static forwards' mappings (deleted counts those added). */
static long nx_ctl_static_add_cb(__u64 i, void *vctx)
{
	struct nx_ctl_loop *c = vctx;
	struct nx_reap_args *a = c->a;
	struct nx_static_map sm;
	__s64 r;

	if (i >= NX_REAP_BATCH)
		return 1;
	sm = a->statics[i];
	r = nx_maps_insert(nx_map_k0(&sm.key),
			   (__u64)sm.out_ip | (__u64)sm.out_port << 32 | (__u64)NX_MF_STATIC << 48,
			   0);
	if (r >= 0 && (r & NX_TAB_NEW))
		a->deleted++; /* here: added */
	return 0;
}

/* NX_CTL_STATIC_DEL: static forwards no longer configured. */
static long nx_ctl_static_del_cb(__u64 i, void *vctx)
{
	struct nx_ctl_loop *c = vctx;
	struct nx_reap_args *a = c->a;
	struct nx_map_key mk;
	struct nx_map *m;
	__u32 slot;

	if (i >= NX_REAP_BATCH)
		return 1;
	mk = a->maps[i];
	slot = nx_maps_find(nx_map_k0(&mk));
	m = nx_map_at(slot);
	if (m && (m->flags & NX_MF_STATIC) && nx_maps_delete(slot, nx_map_k0(&mk)))
		a->deleted++;
	return 0;
}

/* NX_REAP_SUBS: subscriber entries that hold nothing. */
static long nx_ctl_subs_cb(__u64 i, void *vctx)
{
	struct nx_ctl_loop *c = vctx;
	struct nx_reap_args *a = c->a;

	if (i >= NX_REAP_BATCH)
		return 1;
	a->deleted += nx_sub_delete(a->subs[i]);
	return 0;
}

/* The batch in nx_reap_buf, for command op: each control program serves one (nx_ctl_sess,
 * nx_ctl_maps, ...; the daemon runs the one its batch is for), so that none is verified
 * with the others' code. Returns 0, or -1 when the batch is not for this program. */
static __always_inline int nx_ctl_batch(__u32 op)
{
	__u32 zero = 0;
	struct nx_reap_args *a = bpf_map_lookup_elem(&nx_reap_buf, &zero);
	struct nx_ctl_loop c;
	__u32 n;

	if (!a || a->op != op)
		return -1;
	/* syscall programs have no coarse clock; the same CLOCK_MONOTONIC, finer */
	c.now = (__u32)(bpf_ktime_get_ns() >> NX_TICK_SHIFT);
	c.cfg = nx_config();
	c.a = a;
	n = a->n;
	if (n > NX_REAP_BATCH)
		n = NX_REAP_BATCH;
	a->deleted = 0;
	a->maps_deleted = 0;
	switch (op) {
	case NX_REAP_SESSIONS:
		bpf_loop(n, nx_ctl_sess_cb, &c, 0);
		break;
	case NX_REAP_MAPPINGS:
		bpf_loop(n, nx_ctl_maps_cb, &c, 0);
		break;
	case NX_CTL_STATIC_ADD:
		bpf_loop(n, nx_ctl_static_add_cb, &c, 0);
		break;
	case NX_CTL_STATIC_DEL:
		bpf_loop(n, nx_ctl_static_del_cb, &c, 0);
		break;
	case NX_REAP_SUBS:
		bpf_loop(n, nx_ctl_subs_cb, &c, 0);
		break;
	default:
		return -1;
	}
	return 0;
}

#endif /* NX_CTL_H */
