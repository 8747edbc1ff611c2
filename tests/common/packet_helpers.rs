// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Helpers shared by the BPF_PROG_TEST_RUN packet tests (tests/packet_*.rs): the base
//! configuration, translating a packet out or in and checking the frame, replies, TCP state,
//! home blocks, the allocation invariants, refusals, and a few packet builders.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::thread::sleep;
use std::time::{Duration, Instant};

use natrix::dataplane::ip_from_be;

use super::pkt::*;

pub fn cfg() -> Cfg {
    Cfg::default()
}

/// Short timeouts for the expiry tests (below the RFC minima: warnings only).
pub fn short_timeouts() -> Cfg {
    cfg()
        .set("timeouts", "udp", "\"1s\"")
        .set("timeouts", "icmp", "\"1s\"")
        .set("timeouts", "tcp_transitory", "\"1s\"")
        .set("timeouts", "port_hold_down", "\"1s\"")
}

pub type Ep = (Ipv4Addr, u16);

/// Sends an outbound packet that must be translated and redirected out of out0; checks
/// the whole frame against the rebuilt one and returns the outside endpoint used. With
/// `known`, the outside endpoint must be that one.
pub fn xlate_out(env: &Env, p: &Pkt, known: Option<Ep>, what: &str) -> Ep {
    let out = env.expect_verdict(Side::Inside, &p.build(), XDP_REDIRECT, what);
    let o = (src_ip(&out), sport(&out));
    assert!(
        env.cfg.pool.addresses.contains(&o.0),
        "{what}: expected the source to be rewritten to a pool address, got {}",
        o.0
    );
    if let Some(k) = known {
        assert_eq!(o, k, "{what}: expected the existing mapping's outside endpoint {k:?}, got {o:?}");
    }
    let exp = p.clone().with_src(o.0, o.1).forwarded().build();
    assert_frame_eq(&out, &exp, what);
    assert_csums(&out, what);
    o
}

/// Sends an inbound packet that must be translated to `to` and redirected out of in0.
pub fn xlate_in(env: &Env, p: &Pkt, to: Ep, what: &str) {
    let out = env.expect_verdict(Side::Outside, &p.build(), XDP_REDIRECT, what);
    let exp = p.clone().with_dst(to.0, to.1).forwarded().build();
    assert_frame_eq(&out, &exp, what);
    assert_csums(&out, what);
}

/// The answer of the remote end of outbound packet `p`, sent to outside endpoint `o`.
pub fn reply(p: &Pkt, o: Ep) -> Pkt {
    let mut r = match p.l4 {
        L4::Udp { dport, .. } => Pkt::udp(p.dst, dport, o.0, o.1).payload(b"reply").ttl(57),
        L4::Tcp { dport, flags, .. } => {
            let f = if flags & SYN != 0 { SYN | ACK } else { flags };
            Pkt::tcp(p.dst, dport, o.0, o.1, f)
        }
        L4::Echo { .. } => Pkt::echo_reply(p.dst, o.0, o.1),
        _ => panic!("no reply for {}", p.describe()),
    };
    r.udp_no_csum = p.udp_no_csum;
    r
}

pub fn state(env: &Env, in_ep: Ep, rem: Ep, proto: u8) -> Option<u8> {
    env.session(in_ep.0, in_ep.1, rem.0, rem.1, proto).map(|s| s.state)
}

pub fn assert_state(env: &Env, in_ep: Ep, rem: Ep, want: u8, what: &str) {
    let got = state(env, in_ep, rem, TCP);
    assert_eq!(
        got,
        Some(want),
        "{what}: expected the TCP session {in_ep:?} -> {rem:?} in state {want} ({}), got {got:?}",
        natrix::tables::tcp_state_name(want)
    );
}

pub fn port_state(w: u64) -> u64 {
    natrix::abi::port_state(w)
}

/// The home block of subscriber `ip` (bpf/nx_alloc.h, nx_home_block), worked out here
/// from the configuration: any n_addrs * blocks_per_addr consecutive subscribers have
/// distinct ones, spread over the pool addresses first.
pub fn home_block(env: &Env, ip: Ipv4Addr) -> u32 {
    let (n, bpa) = (env.cfg.pool.addresses.len() as u32, env.cfg.block_count_per_addr());
    let i = u32::from(ip) % (n * bpa);
    (i % n) * bpa + i / n
}

/// The allocation invariants over every live mapping:
/// paired pooling (the outside address is the subscriber's), the outside port inside one of
/// the subscriber's blocks, no outside (address, port, protocol) used twice, every port word
/// USED and naming its inside endpoint, a mapping in the subscriber's home block exactly
/// when it is a home-walk mapping (not in the table), whose word counts its sessions, every
/// block owned by its subscriber with a used count equal to the mappings in it (valid while
/// no port is in hold-down).
pub fn check_allocation(env: &Env, what: &str) {
    let tcfg = env.dp.tables.config().expect("config");
    let maps = env.mappings();
    let mut nsess: HashMap<(u32, u16, u8), u64> = HashMap::new();
    for (k, s) in env.sessions() {
        if s.flags & SF_PERMIT == 0 {
            *nsess.entry((k.in_ip, k.in_port, k.proto)).or_default() += 1;
        }
    }
    let subs: HashMap<u32, natrix::skel::types::nx_sub> = env.subscribers().into_iter().collect();
    let mut seen = HashSet::new();
    let mut per_block: HashMap<u32, u64> = HashMap::new();
    for (k, m) in &maps {
        let (in_ip, in_port) = (ip_from_be(k.in_ip), u16::from_be(k.in_port));
        let (out_ip, out_port) = (ip_from_be(m.out_ip), u16::from_be(m.out_port));
        let s =
            subs.get(&k.in_ip).unwrap_or_else(|| panic!("{what}: expected a subscriber entry for {in_ip}"));
        let addr = env.pool_index(out_ip);
        assert_eq!(
            addr, s.addr_idx,
            "{what}: paired pooling: expected {in_ip}:{in_port} on the subscriber's pool address #{}, got {out_ip} (#{addr})",
            s.addr_idx
        );
        assert!(
            seen.insert((out_ip, out_port, k.proto)),
            "{what}: expected outside {out_ip}:{out_port}/{} to be used by one mapping only",
            k.proto
        );
        assert!(
            out_port <= env.cfg.pool.port_hi && out_port != 0,
            "{what}: expected outside port {out_port} within the pool's port range"
        );
        let w = env.port_word(addr, k.proto, out_port);
        let walked = m.flags & MF_DET != 0;
        let counted =
            if walked { nsess.get(&(k.in_ip, k.in_port, k.proto)).copied().unwrap_or(0) } else { 0 };
        let want = natrix::abi::port_word(k.in_ip, in_port) | counted << natrix::abi::PORT_NSESS_SHIFT;
        assert_eq!(
            w, want,
            "{what}: expected the port word of {out_ip}:{out_port}/{} to be USED for {in_ip}:{in_port} ({want:#x}), got {w:#x}",
            k.proto
        );
        if out_port < env.cfg.pool.port_lo {
            // port class: ports below 1024 are claimed outside the block system
            assert!(
                env.cfg.nat.port_class && in_port < 1024,
                "{what}: expected an outside port below the pool range only for an inside port below 1024"
            );
            continue;
        }
        let gid = env.block_of(addr, out_port);
        let (_, lo, hi) = env.block_range(gid);
        assert_eq!(
            natrix::tables::walk_home(&tcfg, k.in_ip) == Some(gid),
            walked,
            "{what}: expected {in_ip}:{in_port}'s mapping (outside port {out_port}, block {gid}, flags {}) to be a \
             home-walk mapping exactly when it lies in the subscriber's home block {}",
            m.flags,
            home_block(env, in_ip)
        );
        assert!(
            s.blocks.contains(&(gid + 1)),
            "{what}: expected outside port {out_port} of {in_ip}:{in_port} in one of the subscriber's blocks, \
             it is in block {gid} [{lo}, {hi}) which the subscriber does not hold ({:?})",
            s.blocks.iter().filter(|b| **b != 0).map(|b| b - 1).collect::<Vec<_>>()
        );
        *per_block.entry(gid).or_default() += 1;
    }
    for (ip, s) in &subs {
        for &slot in s.blocks.iter().filter(|b| **b != 0) {
            let gid = slot - 1;
            let w = env.block_word(gid);
            assert_eq!(
                w as u32,
                *ip,
                "{what}: expected block {gid} owned by {} (block word {w:#x})",
                ip_from_be(*ip)
            );
            let n = per_block.get(&gid).copied().unwrap_or(0);
            assert_eq!(
                natrix::tables::block_used(w),
                n,
                "{what}: expected block {gid}'s used count to equal its {n} mapped ports, got {}",
                natrix::tables::block_used(w)
            );
        }
    }
}

/// Sleeps until `d` after `t0`.
pub fn sleep_until(t0: Instant, d: Duration) {
    if let Some(rest) = d.checked_sub(t0.elapsed()) {
        sleep(rest);
    }
}

/// A new flow natrix cannot serve (quota, pool, table, rate): the subscriber is told with
/// ICMP destination unreachable 3/13 (administratively prohibited) from in0's address, sent
/// back out of in0 (XDP_REDIRECT); with `icmp_errors_per_sec = 0` the packet is just
/// dropped. Either way exactly `reason` is counted and no mapping is created.
pub fn expect_refused(env: &Env, p: &Pkt, reason: &str, what: &str) {
    let f = p.build();
    let before = env.stats();
    let (v, out) = env.inside(&f);
    if env.cfg.nat.icmp_errors_per_sec == 0 {
        assert_eq!(
            verdict_name(v),
            "XDP_DROP",
            "{what}: expected the refused packet dropped (ICMP errors off)"
        );
        env.assert_counters(&before, &[("rx_inside", 1), (reason, 1), ("icmp_rate_limited", 1)], what);
    } else {
        assert_eq!(
            verdict_name(v),
            "XDP_REDIRECT",
            "{what}: expected an ICMP administratively-prohibited error sent back to the subscriber"
        );
        let exp = icmp_error_about(&f, GW_IN, 3, env.cfg.nat.unreachable_code.code(), 0, ip_ident(&out));
        assert_frame_eq(&out, &exp, &format!("{what}: ICMP 3/13 to the subscriber"));
        assert_csums(&out, what);
        env.assert_counters(&before, &[("rx_inside", 1), (reason, 1), ("icmp_sent", 1)], what);
    }
    assert!(
        env.mapping(p.src, p.sport(), p.proto()).is_none(),
        "{what}: expected no mapping for the refused flow"
    );
}

pub fn no_icmp() -> Cfg {
    cfg().set("nat", "icmp_errors_per_sec", "0")
}

/// Opens a TCP connection to SERVER:80 and returns (inside, remote, outside) endpoints.
pub fn tcp_established(env: &Env, inp: u16) -> (Ep, Ep, Ep) {
    let me = (sub(1), inp);
    let srv = (SERVER, 80);
    let o = xlate_out(env, &Pkt::tcp(me.0, me.1, srv.0, srv.1, SYN), None, "SYN out");
    assert_state(env, me, srv, ST_SYN_OUT, "after SYN out");
    xlate_in(env, &Pkt::tcp(srv.0, srv.1, o.0, o.1, SYN | ACK), me, "SYN-ACK in");
    assert_state(env, me, srv, ST_EST, "after SYN-ACK in");
    (me, srv, o)
}

/// A packet to subscriber 1 as an ICMP error from it would quote it.
pub fn delivered_quote() -> Vec<u8> {
    ip_bytes(&Pkt::udp(SERVER, 53, sub(1), 40000).forwarded().build(), 548)
}

/// A UDP datagram of 100 bytes of payload without DF, and its two fragments (64 + 44 bytes).
pub fn frag_datagram(p: Pkt) -> Pkt {
    let mut p = p.payload(&(0..100u8).collect::<Vec<_>>());
    p.df = false;
    p
}

/// One address, ports 1024-1031, one block of 8, max one block: the whole pool is one
/// subscriber's block.
pub fn one_block_pool(hold_down: &str) -> Cfg {
    cfg()
        .set("pool", "addresses", "[\"203.0.113.16\"]")
        .set("pool", "ports", "\"1024-1031\"")
        .set("nat", "block_size", "8")
        .set("nat", "max_blocks_per_subscriber", "1")
        .set("timeouts", "udp", "\"1s\"")
        .set("timeouts", "port_hold_down", &format!("\"{hold_down}\""))
}
