// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests of the XDP data plane through BPF_PROG_TEST_RUN.
//!
//! Every test loads its own private data plane inside its own network namespace
//! (tests/common/pkt.rs), feeds packets built with etherparse to `nx_xdp_inside` /
//! `nx_xdp_outside`, and compares each output frame byte for byte with the expected frame
//! rebuilt from scratch (so every checksum the data plane updated incrementally is checked
//! against one computed from nothing), besides an independent one's-complement check.
//! Needs root. Run: `cargo test --release --test packet -- --test-threads=2`.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Barrier;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::pkt::*;
use natrix::dataplane::{ip_be, ip_from_be};

// ---- helpers -------------------------------------------------------------------------------

fn cfg() -> Cfg {
    Cfg::default()
}

/// Short timeouts for the expiry tests (below the RFC minima: warnings only).
fn short_timeouts() -> Cfg {
    cfg()
        .set("timeouts", "udp", "\"1s\"")
        .set("timeouts", "icmp", "\"1s\"")
        .set("timeouts", "tcp_transitory", "\"1s\"")
        .set("timeouts", "port_hold_down", "\"1s\"")
}

type Ep = (Ipv4Addr, u16);

/// Sends an outbound packet that must be translated and redirected out of out0; checks
/// the whole frame against the rebuilt one and returns the outside endpoint used. With
/// `known`, the outside endpoint must be that one.
fn xlate_out(env: &Env, p: &Pkt, known: Option<Ep>, what: &str) -> Ep {
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
fn xlate_in(env: &Env, p: &Pkt, to: Ep, what: &str) {
    let out = env.expect_verdict(Side::Outside, &p.build(), XDP_REDIRECT, what);
    let exp = p.clone().with_dst(to.0, to.1).forwarded().build();
    assert_frame_eq(&out, &exp, what);
    assert_csums(&out, what);
}

/// The answer of the remote end of outbound packet `p`, sent to outside endpoint `o`.
fn reply(p: &Pkt, o: Ep) -> Pkt {
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

fn state(env: &Env, in_ep: Ep, rem: Ep, proto: u8) -> Option<u8> {
    env.session(in_ep.0, in_ep.1, rem.0, rem.1, proto).map(|s| s.state)
}

fn assert_state(env: &Env, in_ep: Ep, rem: Ep, want: u8, what: &str) {
    let got = state(env, in_ep, rem, TCP);
    assert_eq!(
        got,
        Some(want),
        "{what}: expected the TCP session {in_ep:?} -> {rem:?} in state {want} ({}), got {got:?}",
        natrix::tables::tcp_state_name(want)
    );
}

fn port_state(w: u64) -> u64 {
    natrix::abi::port_state(w)
}

/// The home block of subscriber `ip` (bpf/nx_alloc.h, nx_home_block), worked out here
/// from the configuration: any n_addrs * blocks_per_addr consecutive subscribers have
/// distinct ones, spread over the pool addresses first.
fn home_block(env: &Env, ip: Ipv4Addr) -> u32 {
    let (n, bpa) = (env.cfg.pool.addresses.len() as u32, env.cfg.block_count_per_addr());
    let i = u32::from(ip) % (n * bpa);
    (i % n) * bpa + i / n
}

/// Sends a new UDP flow from (ip, inp) and checks it against `want`, the outside port the
/// allocator must try first (on pool address #addr): taken if it was free, passed over if
/// not. Returns whether it was free.
fn expect_candidate(env: &Env, ip: Ipv4Addr, inp: u16, addr: u32, want: u16, what: &str) -> bool {
    let free = env.port_word(addr, UDP, want) == PORT_FREE;
    let o = xlate_out(env, &Pkt::udp(ip, inp, SERVER, 53), None, what);
    if free {
        assert_eq!(o.1, want, "{what}: expected the flow on its candidate {want}, it got {}", o.1);
    } else {
        assert_ne!(o.1, want, "{what}: expected a taken candidate {want} passed over");
    }
    free
}

/// Another subscriber address with the same home block as `ip` (k-th one up).
fn home_twin(env: &Env, ip: Ipv4Addr, k: u32) -> Ipv4Addr {
    let (n, bpa) = (env.cfg.pool.addresses.len() as u32, env.cfg.block_count_per_addr());
    Ipv4Addr::from(u32::from(ip) + k * n * bpa)
}

/// The outside port inside endpoint (ip, port) tries first in its home block: its walk
/// (bpf/nx_home.h) starts at the pair a keyed hash of the endpoint picks (RFC 6056
/// algorithm 3; key: the tables' seed), on the inside port's parity.
fn home_candidate(env: &Env, ip: Ipv4Addr, proto: u8, port: u16) -> u16 {
    let cfg = env.dp.tables.config().expect("config");
    let (lo, bs, bpa) =
        (env.cfg.pool.port_lo as u32, env.cfg.nat.block_size as u32, env.cfg.block_count_per_addr());
    let first = lo + (home_block(env, ip) % bpa) * bs;
    (first + natrix::tables::home_start(&cfg, ip_be(ip), natrix::tables::proto_idx(proto), port, first))
        as u16
}

/// The allocation invariants over every live mapping:
/// paired pooling (the outside address is the subscriber's), the outside port inside one of
/// the subscriber's blocks, no outside (address, port, protocol) used twice, every port word
/// USED and naming its inside endpoint, a mapping in the subscriber's home block exactly
/// when it is a home-walk mapping (not in the table), whose word counts its sessions, every
/// block owned by its subscriber with a used count equal to the mappings in it (valid while
/// no port is in hold-down).
fn check_allocation(env: &Env, what: &str) {
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

/// The table checker (src/check.rs) finds no broken invariant.
fn assert_tables_ok(env: &Env, what: &str) {
    let r = natrix::check::check_tables(&env.dp.tables).expect("expected the checker to read the tables");
    assert!(r.healthy(), "{what}: expected no broken invariant, found:\n{}", r.text());
}

fn mono_secs() -> u64 {
    natrix::tables::now_ns() / 1_000_000_000
}

/// Sleeps until `d` after `t0`.
fn sleep_until(t0: Instant, d: Duration) {
    if let Some(rest) = d.checked_sub(t0.elapsed()) {
        sleep(rest);
    }
}

/// A new flow natrix cannot serve (quota, pool, table, rate): the subscriber is told with
/// ICMP destination unreachable 3/13 (administratively prohibited) from in0's address, sent
/// back out of in0 (XDP_REDIRECT); with `icmp_errors_per_sec = 0` the packet is just
/// dropped. Either way exactly `reason` is counted and no mapping is created.
fn expect_refused(env: &Env, p: &Pkt, reason: &str, what: &str) {
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

fn no_icmp() -> Cfg {
    cfg().set("nat", "icmp_errors_per_sec", "0")
}

// =============================================================================================
// 1. Each protocol and direction
// =============================================================================================

#[test]
fn udp_out_and_reply_in_are_translated() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"a DNS query, more or less");
        let before = env.stats();
        let o = xlate_out(env, &p, None, "UDP out");
        env.assert_counters(
            &before,
            &[
                ("rx_inside", 1),
                ("translated_out", 1),
                ("redirected", 1),
                ("mappings_created", 1),
                ("sessions_created", 1),
                ("subscribers_created", 1),
                ("blocks_allocated", 1),
                ("home_blocks", 1),
            ],
            "first UDP packet out",
        );
        let home = home_block(env, sub(1));
        let addr = home / env.cfg.block_count_per_addr();
        assert_eq!(
            o.0, env.cfg.pool.addresses[addr as usize],
            "expected the first subscriber on its home block's pool address (#{addr})"
        );
        let m = env.mapping(sub(1), 40000, UDP).expect("expected a UDP mapping for 100.64.0.2:40000");
        assert_eq!(
            (ip_from_be(m.out_ip), u16::from_be(m.out_port)),
            o,
            "expected the mapping to hold the endpoint used"
        );
        assert_eq!(m.nsess, 1, "expected one session on the mapping");
        let s = env.session(sub(1), 40000, SERVER, 53, UDP).expect("expected the UDP session");
        assert_eq!(
            (s.state, s.flags),
            (ST_NONE, natrix::abi::SF_HOMECNT),
            "expected a UDP session with no TCP state, created outbound, counted on its subscriber's home block"
        );

        let before = env.stats();
        xlate_in(env, &reply(&p, o), (sub(1), 40000), "UDP reply in");
        env.assert_counters(
            &before,
            &[("rx_outside", 1), ("translated_in", 1), ("redirected", 1)],
            "UDP reply in",
        );

        // more packets of the same flow reuse the mapping, both ways
        let before = env.stats();
        xlate_out(env, &p.clone().payload(b"second"), Some(o), "second UDP packet out");
        xlate_in(env, &reply(&p, o).payload(b"second reply"), (sub(1), 40000), "second UDP reply in");
        env.assert_some_counters(
            &before,
            &[("mappings_created", 0), ("sessions_created", 0)],
            "same flow again",
        );
        assert_eq!(
            (env.mappings().len(), env.sessions().len()),
            (1, 1),
            "expected one mapping and one session"
        );
    });
}

#[test]
fn udp_zero_checksum_stays_zero_both_ways() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(sub(1), 40001, SERVER, 53).no_udp_csum().payload(b"no checksum here");
        assert_eq!(l4_csum(&p.build()), 0, "test setup: expected an input UDP checksum of 0");
        let o = xlate_out(env, &p, None, "UDP without checksum out");
        let r = reply(&p, o);
        assert_eq!(l4_csum(&r.build()), 0, "test setup: expected a reply UDP checksum of 0");
        xlate_in(env, &r, (sub(1), 40001), "UDP without checksum in");
        let (_, out) = env.inside(&p.build());
        assert_eq!(l4_csum(&out), 0, "expected a UDP checksum of 0 to stay 0 (RFC 768: no checksum)");
    });
}

/// A UDP checksum that computes to 0 must be sent as 0xffff (0 means "none"), in both
/// directions. The payload is chosen, once the outside port is known, so that the
/// translated packet sums to exactly that.
#[test]
fn udp_checksum_computing_to_zero_is_sent_as_ffff() {
    with_env(&cfg(), |env| {
        let base = Pkt::udp(sub(1), 40002, SERVER, 53).payload(&[0, 0]);
        let o = xlate_out(env, &base, None, "opening the flow");
        // word w such that the translated packet's sum, w included, is 0xffff
        let pick = |translated: &Pkt| {
            let mut f = translated.clone().payload(&[0, 0]).build();
            let c = l4_off(&f) + 6;
            f[c] = 0;
            f[c + 1] = 0;
            let s = l4_sum(&f);
            (0xffff - s).to_be_bytes()
        };
        let w = pick(&base.clone().with_src(o.0, o.1).forwarded());
        let p = base.clone().payload(&w);
        assert_ne!(l4_csum(&p.build()), 0xffff, "test setup: the input should not already carry 0xffff");
        let (v, out) = env.inside(&p.build());
        assert_eq!(v, XDP_REDIRECT, "expected the packet translated");
        assert_eq!(
            l4_csum(&out),
            0xffff,
            "expected a computed UDP checksum of 0 to be sent as 0xffff (outbound)"
        );
        assert_frame_eq(&out, &p.clone().with_src(o.0, o.1).forwarded().build(), "checksum 0xffff outbound");
        assert_csums(&out, "checksum 0xffff outbound");

        let rb = reply(&base, o).payload(&[0, 0]);
        let w = pick(&rb.clone().with_dst(sub(1), 40002).forwarded());
        let r = rb.payload(&w);
        let (v, out) = env.outside(&r.build());
        assert_eq!(v, XDP_REDIRECT, "expected the reply translated");
        assert_eq!(
            l4_csum(&out),
            0xffff,
            "expected a computed UDP checksum of 0 to be sent as 0xffff (inbound)"
        );
        assert_frame_eq(
            &out,
            &r.clone().with_dst(sub(1), 40002).forwarded().build(),
            "checksum 0xffff inbound",
        );
    });
}

#[test]
fn tcp_handshake_and_data_both_ways() {
    with_env(&cfg(), |env| {
        let me = (sub(1), 40000);
        let srv = (SERVER, 80);
        let syn = Pkt::tcp(me.0, me.1, srv.0, srv.1, SYN);
        let o = xlate_out(env, &syn, None, "SYN out");
        assert_state(env, me, srv, ST_SYN_OUT, "after SYN out");
        xlate_in(env, &Pkt::tcp(srv.0, srv.1, o.0, o.1, SYN | ACK), me, "SYN-ACK in");
        assert_state(env, me, srv, ST_EST, "after SYN-ACK in");
        let ack = Pkt::tcp(me.0, me.1, srv.0, srv.1, ACK).seq_no(1_000_001).payload(&[]);
        xlate_out(env, &ack, Some(o), "ACK out");
        let data = Pkt::tcp(me.0, me.1, srv.0, srv.1, PSH | ACK).payload(b"GET / HTTP/1.0\r\n\r\n");
        xlate_out(env, &data, Some(o), "data out");
        let resp = Pkt::tcp(srv.0, srv.1, o.0, o.1, PSH | ACK).payload(&[0xab; 1200]);
        xlate_in(env, &resp, me, "data in (1200 bytes)");
        assert_state(env, me, srv, ST_EST, "after data both ways");
        let m = env.mapping(me.0, me.1, TCP).expect("expected the TCP mapping");
        assert_eq!(m.nsess, 1, "expected one session on the TCP mapping");
        assert_eq!((env.mappings().len(), env.sessions().len()), (1, 1), "expected one mapping, one session");
    });
}

#[test]
fn icmp_echo_request_out_and_reply_in() {
    with_env(&cfg(), |env| {
        let ping = Pkt::echo_request(sub(1), SERVER, 0x4242).payload(b"0123456789abcdefghijklmnopqrstuvwxyz");
        let o = xlate_out(env, &ping, None, "echo request out");
        let m = env.mapping(sub(1), 0x4242, ICMP).expect("expected an ICMP mapping keyed by the identifier");
        assert_eq!(u16::from_be(m.out_port), o.1, "expected the mapping's outside identifier in the packet");
        assert!(
            env.session(sub(1), 0x4242, SERVER, 0, ICMP).is_some(),
            "expected an ICMP session with remote port 0"
        );
        xlate_in(
            env,
            &reply(&ping, o).payload(b"0123456789abcdefghijklmnopqrstuvwxyz"),
            (sub(1), 0x4242),
            "echo reply in",
        );
        let ping2 = Pkt::echo_request(sub(1), SERVER, 0x4242);
        xlate_out(env, &ping2, Some(o), "second echo request out (same identifier)");
        assert_eq!(env.mappings().len(), 1, "expected one ICMP mapping");
    });
}

/// Inbound to a pool address and port that no mapping holds: dropped, counted, no state.
#[test]
fn inbound_without_mapping_drops() {
    let rows: Vec<(&str, Pkt)> = vec![
        ("UDP to a pool port", Pkt::udp(SERVER, 53, POOL0, 40000)),
        ("TCP SYN to a pool port", Pkt::tcp(SERVER, 80, POOL0, 40000, SYN)),
        ("ICMP echo reply to a pool address", Pkt::echo_reply(SERVER, POOL0, 40000)),
        ("ICMP echo request to a pool address", Pkt::echo_request(SERVER, POOL0, 1234)),
        ("UDP to the last pool address", Pkt::udp(SERVER, 53, Ipv4Addr::new(203, 0, 113, 23), 2000)),
        ("UDP to a port below the pool range", Pkt::udp(SERVER, 53, POOL0, 53)),
    ];
    with_env(&cfg(), |env| {
        for (what, p) in &rows {
            let before = env.stats();
            env.expect_verdict(Side::Outside, &p.build(), XDP_DROP, what);
            env.assert_counters(&before, &[("rx_outside", 1), ("no_mapping", 1)], what);
            env.assert_no_state(what);
        }
    });
}

/// A mapping is per protocol: a UDP mapping does not open the same port for TCP or ICMP.
#[test]
fn inbound_other_protocol_on_a_mapped_port_drops() {
    with_env(&cfg(), |env| {
        let o = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "UDP out");
        for (what, p) in [
            ("TCP to the UDP mapping's port", Pkt::tcp(SERVER, 53, o.0, o.1, SYN)),
            ("ICMP echo reply with the UDP mapping's port as id", Pkt::echo_reply(SERVER, o.0, o.1)),
        ] {
            let before = env.stats();
            env.expect_verdict(Side::Outside, &p.build(), XDP_DROP, what);
            env.assert_counters(&before, &[("rx_outside", 1), ("no_mapping", 1)], what);
        }
        assert_eq!(
            (env.mappings().len(), env.sessions().len()),
            (1, 1),
            "expected the UDP mapping and session only"
        );
    });
}

/// Endpoint-independent mapping (RFC 4787 REQ-1): one inside endpoint, two remotes, one
/// outside endpoint, two sessions on one mapping.
#[test]
fn eim_one_mapping_for_two_remotes() {
    with_env(&cfg(), |env| {
        let a = Pkt::udp(sub(1), 40000, SERVER, 53);
        let b = Pkt::udp(sub(1), 40000, SERVER2, 123);
        let oa = xlate_out(env, &a, None, "to the first remote");
        let ob = xlate_out(env, &b, Some(oa), "to the second remote");
        assert_eq!(oa, ob, "expected the same outside endpoint towards both remotes");
        assert_eq!(env.mappings().len(), 1, "expected one mapping");
        assert_eq!(env.sessions().len(), 2, "expected two sessions");
        let m = env.mapping(sub(1), 40000, UDP).expect("expected the mapping");
        assert_eq!(m.nsess, 2, "expected nsess == 2 on the mapping");
        xlate_in(env, &reply(&a, oa), (sub(1), 40000), "reply from the first remote");
        xlate_in(env, &reply(&b, ob), (sub(1), 40000), "reply from the second remote");
    });
}

/// Endpoint-independent filtering (the default, RFC 4787 REQ-8): a remote the inside
/// endpoint never talked to reaches it through its mapping; that creates an inbound session.
#[test]
fn eif_admits_an_unknown_remote() {
    with_env(&cfg(), |env| {
        let o = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "UDP out");
        let stranger = Pkt::udp(SERVER2, 9999, o.0, o.1);
        xlate_in(env, &stranger, (sub(1), 40000), "from a remote never contacted");
        let s = env.session(sub(1), 40000, SERVER2, 9999, UDP).expect("expected an inbound-created session");
        assert_eq!(s.flags & SF_INBOUND, SF_INBOUND, "expected the session flagged NX_SF_INBOUND");
        assert_eq!(env.mapping(sub(1), 40000, UDP).map(|m| m.nsess), Some(2), "expected nsess == 2");
    });
}

#[test]
fn adf_drops_an_unknown_address() {
    with_env(&cfg().set("nat", "filtering", "\"address-dependent\""), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        xlate_in(env, &reply(&p, o), (sub(1), 40000), "reply from the contacted remote");
        let before = env.stats();
        env.expect_verdict(
            Side::Outside,
            &Pkt::udp(SERVER2, 53, o.0, o.1).build(),
            XDP_DROP,
            "from another address",
        );
        env.assert_counters(&before, &[("rx_outside", 1), ("filtered", 1)], "from another address");
        assert_eq!(env.live_sessions().len(), 1, "expected no session for the refused remote");
    });
}

/// RFC 4787 section 5, address-dependent filtering: once X:x sent to Y:y, packets from Y
/// from ANY port are admitted ("X:x has sent packets to Y:any").
#[test]
fn adf_admits_another_port_of_a_contacted_address() {
    with_env(&cfg().set("nat", "filtering", "\"address-dependent\""), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        xlate_in(
            env,
            &Pkt::udp(SERVER, 5353, o.0, o.1),
            (sub(1), 40000),
            "from the contacted address, another port",
        );
        let s = env.session(sub(1), 40000, SERVER, 5353, UDP).expect("expected a session for the new port");
        assert_eq!(s.flags & SF_INBOUND, SF_INBOUND, "expected it flagged inbound");
        assert_eq!(env.live_sessions().len(), 2, "expected two sessions (the permit record aside)");
    });
}

#[test]
fn apdf_drops_another_port_of_a_contacted_address() {
    with_env(&cfg().set("nat", "filtering", "\"address-and-port-dependent\""), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        xlate_in(env, &reply(&p, o), (sub(1), 40000), "reply from the contacted remote and port");
        let before = env.stats();
        env.expect_verdict(
            Side::Outside,
            &Pkt::udp(SERVER, 5353, o.0, o.1).build(),
            XDP_DROP,
            "another port",
        );
        env.assert_counters(
            &before,
            &[("rx_outside", 1), ("filtered", 1)],
            "another port of the contacted address",
        );
    });
}

#[test]
fn ip_and_tcp_options_are_carried_through() {
    with_env(&cfg(), |env| {
        // router alert (4 bytes): IHL 6, covered by the header checksum the data plane
        // verifies and updates
        let ra = [0x94, 0x04, 0x00, 0x00];
        let p = Pkt::udp(sub(1), 40000, SERVER, 53).ip_options(&ra);
        assert_eq!(ihl(&p.build()), 24, "test setup: expected IHL 6");
        let o = xlate_out(env, &p, None, "UDP with IP options out");
        xlate_in(env, &reply(&p, o).ip_options(&ra), (sub(1), 40000), "UDP with IP options in");
        // TCP with MSS, SACK-permitted, timestamps (data offset 10)
        let opts = [2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0];
        let syn = Pkt::tcp(sub(1), 40001, SERVER, 443, SYN).tcp_options(&opts);
        let o = xlate_out(env, &syn, None, "SYN with 20 bytes of TCP options");
        xlate_in(
            env,
            &Pkt::tcp(SERVER, 443, o.0, o.1, SYN | ACK).tcp_options(&opts),
            (sub(1), 40001),
            "SYN-ACK with options",
        );
    });
}

/// Link-layer padding after the IP total length (minimum-size Ethernet frames) is valid;
/// the data plane translates by the IP/UDP lengths and leaves the padding alone.
#[test]
fn padded_minimum_frames_translate() {
    with_env(&cfg(), |env| {
        let ping = Pkt::echo_request(sub(1), SERVER, 0x0101).payload(&[]).padded(18);
        let f = ping.build();
        assert_eq!(
            (f.len(), ip_tot_len(&f)),
            (60, 28),
            "test setup: a 28-byte ICMP packet in a 60-byte frame"
        );
        let o = xlate_out(env, &ping, None, "padded echo request out");
        xlate_in(env, &reply(&ping, o).payload(&[]).padded(18), (sub(1), 0x0101), "padded echo reply in");

        let u = Pkt::udp(sub(1), 40000, SERVER, 53).payload(&[1, 2]).padded(16);
        assert_eq!(u.build().len(), 60, "test setup: a 60-byte UDP frame");
        let o = xlate_out(env, &u, None, "padded UDP out");
        xlate_in(env, &reply(&u, o).payload(&[3]).padded(17), (sub(1), 40000), "padded UDP in");

        let syn = Pkt::tcp(sub(1), 40001, SERVER, 80, SYN).padded(2);
        assert_eq!(syn.build().len(), 60, "test setup: a 60-byte SYN frame");
        let o = xlate_out(env, &syn, None, "padded SYN out");
        xlate_in(env, &reply(&syn, o).padded(2), (sub(1), 40001), "padded SYN-ACK in");
    });
}

// =============================================================================================
// 2. Allocation
// =============================================================================================

/// RFC 4787 REQ-5 port parity, over 100 UDP and 20 TCP flows, plus every allocation
/// invariant (blocks, port words, uniqueness).
#[test]
fn parity_preserved_and_ports_in_subscriber_blocks() {
    with_env(&cfg(), |env| {
        for i in 0..100u16 {
            let inp = 30000 + i;
            let o = xlate_out(env, &Pkt::udp(sub(1), inp, SERVER, 53), None, "UDP flow");
            assert_eq!(
                o.1 % 2,
                inp % 2,
                "expected outside port {} to have the parity of inside port {inp}",
                o.1
            );
        }
        for i in 0..20u16 {
            let inp = 31001 + i;
            let o = xlate_out(env, &Pkt::tcp(sub(1), inp, SERVER, 443, SYN), None, "TCP flow");
            assert_eq!(
                o.1 % 2,
                inp % 2,
                "expected outside TCP port {} to have the parity of inside port {inp}",
                o.1
            );
        }
        for id in [7u16, 8] {
            xlate_out(env, &Pkt::echo_request(sub(1), SERVER, id), None, "ICMP echo");
        }
        assert_eq!(env.mappings().len(), 122, "expected 122 mappings");
        check_allocation(env, "after 122 flows");
        let s = env.subscriber(sub(1)).expect("expected the subscriber entry");
        assert_eq!(
            s.blocks.iter().filter(|b| **b != 0).count(),
            1,
            "expected 122 ports to fit in one 256-port block"
        );
    });
}

/// Unpredictable ports (RFC 6056, RFC 6888 REQ-13..15): inside a subscriber's block, each
/// new mapping's port is drawn anew, so one port says nothing about the next. 64 flows of
/// one parity in a 256-port block (128 candidates): a sequential allocator would give one
/// step between successive ports and one unbroken run; random draws give many steps and a
/// set with gaps.
#[test]
fn ports_within_a_block_are_not_predictable() {
    with_env(&cfg(), |env| {
        let ports: Vec<u16> = (0..64u16)
            .map(|i| xlate_out(env, &Pkt::udp(sub(1), 30000 + 2 * i, SERVER, 53), None, "UDP flow").1)
            .collect();
        check_allocation(env, "after 64 flows");
        let steps: HashSet<i32> = ports.windows(2).map(|w| w[1] as i32 - w[0] as i32).collect();
        assert!(
            steps.len() >= 16,
            "expected successive outside ports to differ by many different steps, got {} ({ports:?})",
            steps.len()
        );
        let set: HashSet<u16> = ports.iter().copied().collect();
        let adjacent = set.iter().filter(|p| set.contains(&p.wrapping_add(2))).count();
        assert!(
            adjacent < 56,
            "expected the 64 ports not to form one run of consecutive even ports, {adjacent} are followed by the next ({ports:?})"
        );
    });
}

/// EIM across the two kinds of mapping (bpf/nx_home.h): an endpoint whose walk found its
/// home block full got a table mapping in another block, and the home block word says so
/// (MIXED). When the walk has room again (the home mappings expired and their hold-down is
/// over), that endpoint's new connection still uses its table mapping: its walk misses,
/// asks the table because of MIXED, and finds it; no second mapping is made. A new
/// endpoint's mapping takes a word of the home block again.
#[test]
fn a_table_mapping_of_a_walking_subscriber_stays_its_endpoints_mapping() {
    let c = cfg()
        .set("pool", "addresses", "[\"203.0.113.16\"]")
        .set("pool", "ports", "\"1024-1039\"")
        .set("nat", "block_size", "8")
        .set("nat", "max_blocks_per_subscriber", "2")
        .set("timeouts", "tcp_transitory", "\"1s\"")
        .set("timeouts", "port_hold_down", "\"1s\"");
    with_env(&c, |env| {
        let t0 = Instant::now();
        let home = home_block(env, sub(1));
        for i in 0..8u16 {
            let o =
                xlate_out(env, &Pkt::tcp(sub(1), 6000 + i, SERVER, 80, SYN), None, "filling the home walk");
            assert_eq!(env.block_of(0, o.1), home, "expected flow {i} in the home block");
        }
        assert_eq!(env.block_word(home) & natrix::abi::BLOCK_MIXED, 0, "expected no table mapping yet");
        let e = Pkt::tcp(sub(1), 6100, SERVER, 80, SYN);
        let eo = xlate_out(env, &e, None, "the walk is full: a table mapping");
        assert_ne!(env.block_of(0, eo.1), home, "expected the table mapping in the other block");
        let m = env.mapping(sub(1), 6100, TCP).expect("mapping");
        assert_eq!(m.flags & MF_DET, 0, "expected a table mapping, flags {}", m.flags);
        assert_ne!(env.block_word(home) & natrix::abi::BLOCK_MIXED, 0, "expected the home block MIXED");
        xlate_in(env, &reply(&e, eo), (sub(1), 6100), "SYN-ACK: established, kept");
        check_allocation(env, "a full walk and a table mapping");

        sleep_until(t0, Duration::from_millis(1300));
        let r = env.sweep();
        assert_eq!(
            (r.sessions_expired, r.mappings_released),
            (8, 8),
            "expected the 8 half-open flows gone: {r:?}"
        );
        sleep_until(t0, Duration::from_millis(2600)); // hold-down over: the walk has room
        let before = env.stats();
        let again = Pkt::tcp(sub(1), 6100, SERVER2, 443, SYN);
        xlate_out(env, &again, Some(eo), "the same endpoint, a new connection: its table mapping");
        env.assert_some_counters(
            &before,
            &[("mappings_created", 0), ("sessions_created", 1)],
            "no second mapping",
        );
        let f = xlate_out(env, &Pkt::tcp(sub(1), 6200, SERVER, 80, SYN), None, "a new endpoint");
        assert_eq!(env.block_of(0, f.1), home, "expected a new endpoint's mapping back in the home block");
        let fm = env.mapping(sub(1), 6200, TCP).expect("mapping");
        assert_eq!(fm.flags & MF_DET, MF_DET, "expected a home-walk mapping");
    });
}

/// A static forward whose inside endpoint is a subscriber that owns its home block, the
/// forward's outside port inside that block: the endpoint's outbound traffic uses the
/// forward. Its walk misses (a STATIC word is never a walk mapping) and asks the table
/// because forwards are configured; without that, the walk would make it a second mapping.
#[test]
fn a_static_forward_inside_a_home_block_is_its_endpoints_mapping() {
    // the home block of sub(1) under the default pool (8 addresses, 1024-65535, 256-port
    // blocks: 252 an address), worked out as bpf/nx_alloc.h does
    let i = u32::from(sub(1)) % (8 * 252);
    let (addr, fwd) = (i % 8, (1024 + i / 8 * 256 + 100) as u16);
    let out_ip = Ipv4Addr::from(u32::from(POOL0) + addr);
    let c = cfg().raw(&format!(
        "[[forward]]\nproto = \"udp\"\noutside = \"{out_ip}:{fwd}\"\ninside = \"100.64.0.2:5000\""
    ));
    with_env(&c, |env| {
        let home = home_block(env, sub(1));
        assert_eq!(env.block_of(addr, fwd), home, "the forward's port is in the home block");
        let o =
            xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "the subscriber takes its home block");
        assert_eq!(env.block_of(addr, o.1), home);
        assert_eq!(
            port_state(env.port_word(addr, UDP, fwd)),
            PORT_STATIC,
            "expected the forward's word STATIC"
        );
        let before = env.stats();
        xlate_out(env, &Pkt::udp(sub(1), 5000, SERVER, 53), Some((out_ip, fwd)), "the forwarded endpoint");
        env.assert_some_counters(
            &before,
            &[("mappings_created", 0)],
            "no mapping made for a forwarded endpoint",
        );
        xlate_in(env, &Pkt::udp(SERVER2, 7, out_ip, fwd), (sub(1), 5000), "unsolicited, to the forward");
    });
}

/// Linear probing's deletion rule in a home block (src/expiry.rs): A and B start their walk
/// at the same pair, so B's mapping is the next pair. When A expires and its hold-down (and
/// the 2 s margin) is over, the daemon keeps A's word HELD while B lives (freeing it would
/// end B's walk before B's word: a lookup of B would miss); C's word, which no live walk
/// passes, is freed in the same sweep. B keeps its port throughout.
#[test]
fn a_held_home_word_a_live_walk_passes_is_kept() {
    with_env(&one_block_pool("1s"), |env| {
        let t0 = Instant::now();
        let (lo, bs) = (1024u16, 8u16);
        let a = 7000u16;
        let ca = home_candidate(env, sub(1), UDP, a);
        let b = (7001..9000u16)
            .find(|&p| home_candidate(env, sub(1), UDP, p) == ca)
            .expect("an inside port with A's candidate");
        let c = (7001..9000u16)
            .find(|&p| home_candidate(env, sub(1), UDP, p) % 2 != ca % 2)
            .expect("an inside port of the other parity");
        let pa = xlate_out(env, &Pkt::udp(sub(1), a, SERVER, 53), None, "A").1;
        let bp = Pkt::udp(sub(1), b, SERVER, 53);
        let pb = xlate_out(env, &bp, None, "B").1;
        let pc = xlate_out(env, &Pkt::udp(sub(1), c, SERVER, 53), None, "C").1;
        assert_eq!(pa, ca, "expected A on its candidate");
        assert_eq!(pb, lo + (ca - lo + 2) % bs, "expected B on the next pair of its walk");
        // B lives on (refreshed), A and C expire
        let (mut released, mut expired) = (None, 0);
        while t0.elapsed() < Duration::from_millis(6000) {
            sleep(Duration::from_millis(200));
            xlate_out(env, &bp, Some((POOL0, pb)), "B, refreshed");
            expired += env.sweep().sessions_expired;
            if expired == 2 && released.is_none() {
                released = Some(Instant::now());
            }
            if let Some(at) = released {
                if at.elapsed() > Duration::from_millis(3300) {
                    break;
                }
            }
        }
        assert!(released.is_some(), "expected A and C expired, {expired} session(s) did");
        sleep(Duration::from_millis(200));
        let r = env.sweep();
        assert_eq!(port_state(env.port_word(0, UDP, pa)), PORT_HELD, "expected A's word kept HELD ({r:?})");
        assert_eq!(env.port_word(0, UDP, pc), PORT_FREE, "expected C's word freed ({r:?})");
        xlate_out(env, &bp, Some((POOL0, pb)), "B still finds its mapping past A's word");
        let m = env.mapping(sub(1), b, UDP).expect("B's mapping");
        assert_eq!((m.flags, m.nsess, u16::from_be(m.out_port)), (2, 1, pb), "B's mapping, one session");
    });
}

/// In its home block, a subscriber's mapping is the port word its endpoint's walk reaches
/// (bpf/nx_home.h): the walk starts at the pair a keyed hash of the inside endpoint gives,
/// on the inside port's parity, which the packet alone determines (so the packet path
/// fetches that word early), and goes on pair by pair: a new mapping takes the first FREE
/// word, a taken one is passed over. The mapping is the word itself (no table entry).
#[test]
fn home_block_claims_start_at_the_hashed_candidate() {
    with_env(&cfg(), |env| {
        let before = env.stats();
        let bs = env.cfg.nat.block_size;
        for n in 1..=6u8 {
            let o = xlate_out(env, &Pkt::udp(sub(n), 30000, SERVER, 53), None, "a new subscriber");
            let (home, bpa) = (home_block(env, sub(n)), env.cfg.block_count_per_addr());
            let s = env.subscriber(sub(n)).expect("expected the subscriber entry");
            assert_eq!(s.blocks[0], home + 1, "expected subscriber {n} to take its home block {home}");
            assert_eq!(
                env.pool_index(o.0),
                home / bpa,
                "expected subscriber {n} on its home block's address"
            );
            assert_eq!(
                o.1,
                home_candidate(env, sub(n), UDP, 30000),
                "expected the hashed candidate of a fresh block"
            );
        }
        env.assert_some_counters(
            &before,
            &[("home_blocks", 6), ("blocks_allocated", 6)],
            "six new subscribers",
        );
        let addr = home_block(env, sub(1)) / env.cfg.block_count_per_addr();
        let first = env.block_range(home_block(env, sub(1))).1 as u16;
        let mut passed = 0;
        for i in 1..=100u16 {
            let inp = 30000 + i;
            let cand = home_candidate(env, sub(1), UDP, inp);
            // the walk: the candidate, then every second port on, wrapping in the block
            let mut want = cand;
            while env.port_word(addr, UDP, want) != PORT_FREE {
                want = first + (want - first + 2) % bs;
                assert_ne!(want, cand, "flow {i}: expected a FREE word on the walk");
            }
            passed += (want != cand) as u32;
            let o = xlate_out(env, &Pkt::udp(sub(1), inp, SERVER, 53), None, &format!("flow {i}"));
            assert_eq!(o.1, want, "flow {i}: expected the walk's first FREE word from candidate {cand}");
            let m = env.mapping(sub(1), inp, UDP).expect("mapping");
            assert_eq!(
                (m.flags, m.nsess),
                (2, 1),
                "flow {i}: expected a home-walk mapping counting its session"
            );
        }
        // 101 of 128 pairs of a parity taken: many walks pass taken words
        assert!(passed >= 10, "expected walks passing taken candidates, {passed} did");
        assert_eq!(
            env.dp.tables.table_mappings().expect("mappings").len(),
            0,
            "expected no mapping-table entry for home-walk mappings"
        );
        let t = home_candidate(env, sub(1), TCP, 31000);
        assert_eq!(xlate_out(env, &Pkt::tcp(sub(1), 31000, SERVER, 443, SYN), None, "TCP SYN").1, t);
        check_allocation(env, "after 107 flows in home blocks");
        let st = natrix::show::stats(&env.dp.tables).expect("stats");
        let h = st.home_walk.expect("home_walk in dynamic mode");
        assert_eq!((h.blocks, h.mixed, h.mappings, h.held), (6, 0, 107, 0), "home_walk: {h:?}");
        assert_eq!(st.mappings, 107, "expected the home-walk mappings counted as mappings");
    });
}

/// Outside its home block (here: another subscriber holds it), each claim draws at random
/// the port pair the next claim of its protocol tries first, and keeps it in the
/// subscriber's first line (next_port, an nx_ports index, inside the block the last port
/// came from, cur_block). A free candidate is exactly what the next mapping gets, with the
/// inside port's parity; a taken one is passed over.
#[test]
fn next_claim_starts_at_the_drawn_candidate() {
    // 4 addresses of 8 blocks: subscriber 100.64.0.34 has subscriber 1's home block
    let c = cfg().set("pool", "addresses", "[\"203.0.113.16/30\"]").set("pool", "ports", "\"1024-3071\"");
    with_env(&c, |env| {
        xlate_out(env, &Pkt::udp(sub(1), 30000, SERVER, 53), None, "the home block's owner");
        let twin = home_twin(env, sub(1), 1);
        assert_eq!(twin, Ipv4Addr::new(100, 64, 0, 34), "expected 32 home blocks in all");
        let o = xlate_out(env, &Pkt::udp(twin, 30000, SERVER, 53), None, "first flow");
        let addr = env.pool_index(o.0);
        let s = env.subscriber(twin).expect("expected the subscriber entry");
        assert_ne!(s.blocks[0], home_block(env, twin) + 1, "expected another block than the taken home");
        let (lo, bs, bpa) =
            (env.cfg.pool.port_lo as u32, env.cfg.nat.block_size as u32, env.cfg.block_count_per_addr());
        let mut hits = 0;
        for i in 0..40u16 {
            let s = env.subscriber(twin).expect("expected the subscriber entry");
            let idx = s.next_port[P_UDP as usize];
            assert_eq!(
                natrix::tables::port_index_parts(idx as usize),
                (addr, P_UDP, idx as u16),
                "expected the UDP candidate {idx:#x} on the subscriber's address, UDP"
            );
            let cand = u32::from(idx as u16);
            assert_eq!(
                addr * bpa + (cand - lo) / bs + 1,
                s.cur_block,
                "expected the candidate port {cand} inside the current block (gid + 1 = {})",
                s.cur_block
            );
            assert_eq!((cand - lo) % 2, 0, "expected the candidate at an even offset of its block");
            let inp = 30001 + i;
            let want = (cand + ((inp as u32 ^ cand) & 1)) as u16;
            hits += expect_candidate(env, twin, inp, addr, want, &format!("flow {i}, drawn")) as u32;
        }
        assert!(hits >= 10, "expected most of 40 candidates in a 256-port block free, {hits} were");
        check_allocation(env, "after 41 flows");
        // per protocol: a TCP claim draws a TCP candidate and leaves UDP's alone
        let udp = env.subscriber(twin).expect("subscriber").next_port[P_UDP as usize];
        xlate_out(env, &Pkt::tcp(twin, 31000, SERVER, 443, SYN), None, "TCP SYN");
        let s = env.subscriber(twin).expect("subscriber");
        let (a, p, _) = natrix::tables::port_index_parts(s.next_port[P_TCP as usize] as usize);
        assert_eq!((a, p), (addr, P_TCP), "expected a TCP candidate after a TCP claim");
        assert_eq!(s.next_port[P_UDP as usize], udp, "expected the UDP candidate unchanged by a TCP claim");
    });
}

/// A full subscriber table (limits.max_subscribers) refuses a new subscriber with
/// table_full before any block is taken from the pool, and evicts nobody: the subscribers
/// it holds keep their mappings and open new ones.
#[test]
fn subscriber_table_full_refuses_and_evicts_nothing() {
    with_env(&cfg().set("limits", "max_subscribers", "2"), |env| {
        let a = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "subscriber 1");
        let b = xlate_out(env, &Pkt::udp(sub(2), 40000, SERVER, 53), None, "subscriber 2");
        let owned = natrix::expiry::usage(&env.dp.tables).expect("usage").0;
        expect_refused(env, &Pkt::udp(sub(3), 40000, SERVER, 53), "table_full", "third subscriber");
        assert_eq!(env.subscriber_count(), 2, "expected the data plane to count 2 subscribers");
        assert!(env.subscriber(sub(3)).is_none(), "expected no entry for the refused subscriber");
        assert_eq!(
            natrix::expiry::usage(&env.dp.tables).expect("usage").0,
            owned,
            "expected no block taken for the refused subscriber"
        );
        xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), Some(a), "subscriber 1 again");
        let a2 = xlate_out(env, &Pkt::udp(sub(1), 40001, SERVER, 53), None, "subscriber 1, new flow");
        assert_eq!(a2.0, a.0, "expected subscriber 1's new flow on its own address");
        xlate_in(
            env,
            &reply(&Pkt::udp(sub(2), 40000, SERVER, 53), b),
            (sub(2), 40000),
            "reply to subscriber 2",
        );
        check_allocation(env, "after a refused subscriber");
    });
}

/// The subscriber table holds exactly limits.max_subscribers: 8192 subscribers (each
/// created by a later fragment: a block, no port) fill a table of 8192 (16384 home slots,
/// linear probing at half load), every one of them is found by the data plane's own
/// lookup (a first flow from each goes out on its entry's address), and the next one is
/// refused. (The probe bound of 32 that lost a subscriber in the 10M benchmark fails here
/// only for about one seed in 60: this test guards the size, not that bound.)
#[test]
fn subscriber_table_fills_to_its_size() {
    let c = cfg()
        .set("limits", "max_subscribers", "8192")
        .set("limits", "max_mappings", "16384")
        .set("limits", "max_sessions", "16384")
        .set("nat", "block_size", "16");
    with_env(&c, |env| {
        let base = u32::from(Ipv4Addr::new(100, 64, 64, 0));
        for i in 0..8192u32 {
            let ip = Ipv4Addr::from(base + i);
            let (_, f2) = fragment(&frag_datagram(Pkt::udp(ip, 40000, SERVER, 53)).build(), 64);
            let (v, _) = env.inside(&f2);
            assert_eq!(
                verdict_name(v),
                "XDP_REDIRECT",
                "subscriber #{i} ({ip}): expected its fragment forwarded"
            );
        }
        let h = env.dp.tables.sub_health().expect("sub_health");
        assert_eq!((h.live, h.counted), (8192, 8192), "expected a full table: {h:?}");
        let subs: HashMap<u32, natrix::skel::types::nx_sub> = env.subscribers().into_iter().collect();
        let before = env.stats();
        for i in 0..8192u32 {
            let ip = Ipv4Addr::from(base + i);
            let s = subs
                .get(&ip_be(ip))
                .unwrap_or_else(|| panic!("expected subscriber #{i} ({ip}) in the table"));
            let out = env.expect_verdict(
                Side::Inside,
                &Pkt::udp(ip, 40000, SERVER, 53).build(),
                XDP_REDIRECT,
                "a first flow",
            );
            assert_eq!(
                env.pool_index(src_ip(&out)),
                s.addr_idx,
                "subscriber #{i}: expected its entry's address"
            );
        }
        env.assert_some_counters(
            &before,
            &[("subscribers_created", 0), ("mappings_created", 8192)],
            "first flows",
        );
        expect_refused(env, &Pkt::udp(sub(1), 40000, SERVER, 53), "table_full", "subscriber 8193");
    });
}

/// A claim made through a subscriber entry that is no longer the subscriber's LIVE one
/// (the reaper deleting it meanwhile) is undone, never left half-made. Here a delete that
/// never finishes is simulated by holding the entry BUSY through mmap: the next new flow
/// cannot use it, makes a second entry, claims a port through that, then finds the BUSY
/// entry first, waits, gives up: the packet is dropped as table_busy, its port word is
/// FREE again, and no block counts a port it does not hold.
#[test]
fn a_claim_through_a_vanishing_subscriber_is_undone() {
    with_env(&cfg(), |env| {
        // the subscriber's home block goes to another one first: its mappings are then
        // the mapping table's, claimed through its entry (the home walk reads no entry)
        let twin = home_twin(env, sub(1), 1);
        xlate_out(env, &Pkt::udp(twin, 40000, SERVER, 53), None, "the twin's flow");
        let o = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "first flow");
        assert!(
            env.mapping(sub(1), 40000, UDP).is_some_and(|m| m.flags & MF_DET == 0),
            "expected a table mapping"
        );
        let addr = env.pool_index(o.0);
        let m = natrix::tables::MmapWords::new(&env.dp.tables.subs, "nx_subs").expect("mmap nx_subs");
        let words = std::mem::size_of::<natrix::skel::types::nx_sub>() / 8;
        let live = natrix::abi::sub_key(natrix::abi::SUB_LIVE, ip_be(sub(1)));
        let slot = m
            .words()
            .chunks_exact(words)
            .position(|e| e[0].load(std::sync::atomic::Ordering::Acquire) == live)
            .expect("expected the subscriber's LIVE entry");
        let busy = natrix::abi::sub_key(natrix::abi::SUB_BUSY, ip_be(sub(1)));
        m.words()[slot * words].store(busy, std::sync::atomic::Ordering::Release);
        let before = env.stats();
        let (v, _) = env.inside(&Pkt::udp(sub(1), 40002, SERVER, 53).build());
        assert_eq!(verdict_name(v), "XDP_DROP", "expected the flow dropped while its entry is BUSY");
        env.assert_some_counters(&before, &[("table_busy", 1), ("alloc_retries", 1)], "claim undone");
        assert!(env.mapping(sub(1), 40002, UDP).is_none(), "expected no mapping for the dropped flow");
        // no port word of the pool names the dropped flow's inside endpoint
        let word = natrix::abi::port_word(ip_be(sub(1)), 40002);
        let ports = natrix::tables::MmapWords::new(&env.dp.tables.ports, "nx_ports").expect("mmap nx_ports");
        assert!(
            !ports.words().iter().any(|w| w.load(std::sync::atomic::Ordering::Relaxed) == word),
            "expected the undone claim's port word back to FREE"
        );
        // every block counts exactly the USED/HELD ports in its range, all protocols
        let (lo, bs, bpa) = (
            env.cfg.pool.port_lo as usize,
            env.cfg.nat.block_size as usize,
            env.cfg.block_count_per_addr() as usize,
        );
        let blocks =
            natrix::tables::MmapWords::new(&env.dp.tables.blocks, "nx_blocks").expect("mmap nx_blocks");
        let mut counted = vec![0u64; blocks.words().len()];
        for (idx, w) in ports.words().iter().enumerate() {
            let (a, _, port) = natrix::tables::port_index_parts(idx);
            let (a, port) = (a as usize, usize::from(port));
            if port_state(w.load(std::sync::atomic::Ordering::Relaxed)) != PORT_FREE
                && port >= lo
                && (port - lo) / bs < bpa
            {
                counted[a * bpa + (port - lo) / bs] += 1;
            }
        }
        for (gid, b) in blocks.words().iter().enumerate() {
            let v = b.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(
                natrix::tables::block_used(v),
                counted[gid],
                "block {gid} (word {v:#x}): expected its count to match its USED/HELD ports"
            );
        }
        assert_eq!(addr, env.pool_index(o.0));
    });
}

/// Deleted subscribers leave tombstones that later subscribers reuse: 280 subscribers come
/// and go through a table of 4 (8 home slots, 264 in all, so slots must be reused), each
/// created by a later fragment (which takes a block but no port) and removed two sweeps
/// later (the empty block, then the subscriber). Every round all four are found, counted
/// and on their block's address.
#[test]
fn subscriber_slots_are_reused_after_deletion() {
    with_env(&cfg().set("limits", "max_subscribers", "4"), |env| {
        let mut removed = 0;
        for round in 0..70u32 {
            let ips: Vec<Ipv4Addr> = (0..4u32)
                .map(|n| Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 50, 1)) + 4 * round + n))
                .collect();
            for ip in &ips {
                let (_, f2) = fragment(&frag_datagram(Pkt::udp(*ip, 40000, SERVER, 53)).build(), 64);
                let before = env.stats();
                let out =
                    env.expect_verdict(Side::Inside, &f2, XDP_REDIRECT, "later fragment of a new subscriber");
                env.assert_some_counters(&before, &[("subscribers_created", 1)], "a new subscriber");
                let s = env
                    .subscriber(*ip)
                    .unwrap_or_else(|| panic!("round {round}: expected {ip} in the table"));
                assert_eq!(
                    env.pool_index(src_ip(&out)),
                    s.addr_idx,
                    "round {round}: {ip} on its entry's address"
                );
                let gid = s.blocks[0] - 1;
                assert_eq!(
                    env.block_word(gid) as u32,
                    ip_be(*ip),
                    "round {round}: block {gid} owned by {ip}"
                );
            }
            assert_eq!(env.subscriber_count(), 4, "round {round}: expected 4 subscribers counted");
            let mut live: Vec<u32> = env.subscribers().into_iter().map(|(k, _)| k).collect();
            live.sort_unstable();
            let mut want: Vec<u32> = ips.iter().map(|ip| ip_be(*ip)).collect();
            want.sort_unstable();
            assert_eq!(live, want, "round {round}: expected exactly this round's subscribers live");
            let h = env.dp.tables.sub_health().expect("sub_health");
            assert_eq!((h.slots, h.live, h.counted), (264, 4, 4), "round {round}: table shape {h:?}");
            for _ in 0..2 {
                removed += env.sweep().subscribers_removed;
            }
            assert_eq!(removed, 4 * (round + 1), "round {round}: expected its 4 subscribers removed");
            assert_eq!(env.subscriber_count(), 0, "round {round}: expected none counted");
            assert!(env.subscribers().is_empty(), "round {round}: expected none live");
            let h = env.dp.tables.sub_health().expect("sub_health");
            assert!(
                h.tombstones >= 4 && h.tombstones <= 40,
                "round {round}: expected the deleted entries left as tombstones: {h:?}"
            );
        }
    });
}

/// Paired pooling (RFC 4787 REQ-2 / RFC 6888 REQ-2): every block of a subscriber, and so
/// every mapping, is on one pool address, also when it needs several blocks.
#[test]
fn paired_pooling_keeps_each_subscriber_on_one_address() {
    let c = cfg().set("nat", "block_size", "8").set("nat", "max_blocks_per_subscriber", "4");
    with_env(&c, |env| {
        for i in 0..20u16 {
            xlate_out(env, &Pkt::udp(sub(1), 20000 + i, SERVER, 53), None, "subscriber 1 flow");
        }
        let s1 = env.subscriber(sub(1)).expect("expected subscriber 1");
        let nblocks = s1.blocks.iter().filter(|b| **b != 0).count();
        assert_eq!(nblocks, 3, "expected 20 mappings to take 3 blocks of 8 ports, got {nblocks}");
        for n in 2..=4u8 {
            for i in 0..10u16 {
                xlate_out(env, &Pkt::udp(sub(n), 20000 + i, SERVER, 53), None, "other subscribers' flows");
            }
        }
        check_allocation(env, "4 subscribers, several blocks each");
        for n in 1..=4u8 {
            let ips: HashSet<Ipv4Addr> = env
                .mappings()
                .iter()
                .filter(|(k, _)| ip_from_be(k.in_ip) == sub(n))
                .map(|(_, m)| ip_from_be(m.out_ip))
                .collect();
            assert_eq!(
                ips.len(),
                1,
                "expected every mapping of subscriber {n} on one outside address, got {ips:?}"
            );
        }
    });
}

/// Whether a destination is a pool address is answered from runs of consecutive addresses
/// in the configuration (up to 8) or, for a pool more scattered than that, from the
/// nx_pool_idx hash. Either way every address a subscriber lands on translates both ways
/// and reaches its subscriber through hairpinning, and an address in a gap between runs is
/// not taken for a pool address.
#[test]
fn scattered_pools_translate_on_every_address() {
    let ten: Vec<String> = (0..10).map(|i| format!("\"203.0.113.{}\"", 16 + 2 * i)).collect();
    let cases = [
        (
            "3 runs",
            r#"["203.0.113.16/30", "203.0.113.40", "192.0.2.8/31"]"#.to_string(),
            Ipv4Addr::new(203, 0, 113, 20),
        ),
        ("10 runs: the hash", format!("[{}]", ten.join(", ")), Ipv4Addr::new(203, 0, 113, 17)),
    ];
    for (what, addrs, gap) in cases {
        let c = cfg().set("pool", "addresses", &addrs).set("nat", "block_size", "8");
        with_env(&c, |env| {
            let mut used = Vec::new();
            for n in 1..=NSUBS {
                let p = Pkt::udp(sub(n), 40000, SERVER, 53);
                let o = xlate_out(env, &p, None, &format!("{what}: subscriber {n} out"));
                xlate_in(env, &reply(&p, o), (sub(n), 40000), &format!("{what}: reply to subscriber {n}"));
                used.push(env.pool_index(o.0));
                env.sweep(); // the next subscriber goes to the freest address
            }
            used.sort();
            used.dedup();
            assert_eq!(
                used.len(),
                (NSUBS as usize).min(env.cfg.pool.addresses.len()),
                "{what}: addresses used {used:?}"
            );
            // hairpinning: subscriber 2 to the last subscriber's outside endpoint
            let last = env.mapping(sub(NSUBS), 40000, UDP).expect("mapping of the last subscriber");
            let to = (ip_from_be(last.out_ip), u16::from_be(last.out_port));
            let out = env.expect_verdict(
                Side::Inside,
                &Pkt::udp(sub(2), 40001, to.0, to.1).build(),
                XDP_REDIRECT,
                what,
            );
            assert_eq!(dst_ip(&out), sub(NSUBS), "{what}: hairpinned to the subscriber behind {to:?}");
            // the gap: not a pool address, the kernel's business
            let before = env.stats();
            env.expect_verdict(Side::Outside, &Pkt::udp(SERVER, 53, gap, 40000).build(), XDP_PASS, what);
            env.assert_counters(&before, &[("rx_outside", 1), ("pass_local", 1)], &format!("{what}: {gap}"));
        });
    }
}

/// The daemon decides where a new subscriber whose home block another holds goes
/// (addr_hint): after a sweep, it lands on the pool address with the most free blocks
/// (the lowest such index on ties). 4 addresses of 2 blocks: 100.64.0.10, .18 and .26 share
/// subscriber 1's home block.
#[test]
fn sweep_points_new_subscribers_at_the_freest_address() {
    let c = cfg()
        .set("pool", "addresses", "[\"203.0.113.16/30\"]")
        .set("pool", "ports", "\"1024-1039\"")
        .set("nat", "block_size", "8");
    with_env(&c, |env| {
        let bpa = env.cfg.block_count_per_addr();
        let o1 = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "subscriber 1");
        let home = env.pool_index(o1.0);
        assert_eq!(home, home_block(env, sub(1)) / bpa, "expected subscriber 1 at home");
        let mut free = vec![bpa; 4];
        free[home as usize] -= 1;
        for k in 1..=3u32 {
            env.sweep();
            let twin = home_twin(env, sub(1), k);
            assert_eq!(
                home_block(env, twin),
                home_block(env, sub(1)),
                "expected {twin} to share the home block"
            );
            let o =
                xlate_out(env, &Pkt::udp(twin, 40000, SERVER, 53), None, "a subscriber whose home is taken");
            let best = (0..4).max_by_key(|&a| (free[a], std::cmp::Reverse(a))).unwrap();
            assert_eq!(
                env.pool_index(o.0) as usize,
                best,
                "expected {twin} on the freest address #{best} (free blocks {free:?}), got {}",
                o.0
            );
            free[best] -= 1;
        }
        check_allocation(env, "four subscribers, one at home, three where the daemon said");
    });
}

/// When one parity of a block is used up, the other parity is used: a port is required,
/// parity only recommended.
#[test]
fn parity_falls_back_when_one_parity_is_full() {
    let c = cfg().set("nat", "block_size", "4").set("nat", "max_blocks_per_subscriber", "1");
    with_env(&c, |env| {
        let outs: Vec<u16> = (0..4u16)
            .map(|i| xlate_out(env, &Pkt::udp(sub(1), 5000 + 2 * i, SERVER, 53), None, "even inside port").1)
            .collect();
        let even = outs.iter().filter(|p| *p % 2 == 0).count();
        assert_eq!(
            even, 2,
            "expected the block's 2 even ports used first, then its 2 odd ones; got {outs:?}"
        );
        assert!(outs[..2].iter().all(|p| p % 2 == 0), "expected the first two to keep parity, got {outs:?}");
        let s = env.subscriber(sub(1)).expect("subscriber");
        let (_, lo, hi) = env.block_range(s.blocks[0] - 1);
        let mut sorted = outs.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            (lo as u16..hi as u16).collect::<Vec<_>>(),
            "expected the whole block [{lo}, {hi}) in use"
        );
        check_allocation(env, "one full block");
    });
}

/// max_blocks_per_subscriber = 1 with 4-port blocks: four mappings, then quota_exceeded
/// (answered with ICMP 3/13); the existing mappings keep translating both ways.
#[test]
fn quota_exceeded_drops_new_flows_and_keeps_old_ones() {
    let c = cfg().set("nat", "block_size", "4").set("nat", "max_blocks_per_subscriber", "1");
    with_env(&c, |env| {
        let flows: Vec<(Pkt, Ep)> = (0..4u16)
            .map(|i| {
                let p = Pkt::udp(sub(1), 5000 + i, SERVER, 53);
                let o = xlate_out(env, &p, None, "within quota");
                (p, o)
            })
            .collect();
        for inp in [5004u16, 5005] {
            expect_refused(env, &Pkt::udp(sub(1), inp, SERVER, 53), "quota_exceeded", "UDP beyond quota");
        }
        // a block covers its ports on every protocol: TCP has 4 more in the same block
        let s = env.subscriber(sub(1)).expect("subscriber");
        let (_, lo, hi) = env.block_range(s.blocks[0] - 1);
        for i in 0..4u16 {
            let o =
                xlate_out(env, &Pkt::tcp(sub(1), 6000 + i, SERVER, 80, SYN), None, "TCP in the same block");
            assert!(
                (lo..hi).contains(&(o.1 as u32)),
                "expected TCP port {} in the subscriber's block [{lo}, {hi})",
                o.1
            );
        }
        expect_refused(env, &Pkt::tcp(sub(1), 6004, SERVER, 80, SYN), "quota_exceeded", "TCP beyond quota");
        for (p, o) in &flows {
            xlate_out(env, p, Some(*o), "existing flow out after quota drops");
            xlate_in(env, &reply(p, *o), (sub(1), p.sport()), "existing flow in after quota drops");
        }
        assert_eq!(env.mappings().len(), 8, "expected exactly the 4 UDP and 4 TCP mappings within quota");
        check_allocation(env, "quota full");
        // other subscribers are not affected
        xlate_out(env, &Pkt::udp(sub(2), 5004, SERVER, 53), None, "another subscriber");
    });
}

#[test]
fn quota_exceeded_without_icmp_drops() {
    let c = no_icmp().set("nat", "block_size", "4").set("nat", "max_blocks_per_subscriber", "1");
    with_env(&c, |env| {
        for i in 0..4u16 {
            xlate_out(env, &Pkt::udp(sub(1), 5000 + i, SERVER, 53), None, "within quota");
        }
        expect_refused(env, &Pkt::udp(sub(1), 5004, SERVER, 53), "quota_exceeded", "beyond quota, ICMP off");
    });
}

fn tiny_pool() -> Cfg {
    cfg().set("pool", "addresses", "[\"203.0.113.16\"]").set("pool", "ports", "\"1024-1031\"").set(
        "nat",
        "block_size",
        "4",
    )
}

/// One address, ports 1024-1031, blocks of 4: two blocks. A third subscriber finds none.
#[test]
fn pool_exhausted_for_a_third_subscriber() {
    with_env(&tiny_pool(), |env| {
        let a = Pkt::udp(sub(1), 7000, SERVER, 53);
        let b = Pkt::udp(sub(2), 7000, SERVER, 53);
        let oa = xlate_out(env, &a, None, "subscriber 1 takes block 1");
        let ob = xlate_out(env, &b, None, "subscriber 2 takes block 2");
        expect_refused(env, &Pkt::udp(sub(3), 7000, SERVER, 53), "pool_exhausted", "third subscriber");
        assert!(env.subscriber(sub(3)).is_none(), "expected no subscriber entry for the refused subscriber");
        xlate_in(env, &reply(&a, oa), (sub(1), 7000), "subscriber 1 still reachable");
        xlate_in(env, &reply(&b, ob), (sub(2), 7000), "subscriber 2 still reachable");
        check_allocation(env, "pool full");
    });
}

/// A subscriber whose block is full and who may take more (max_blocks 4) finds the pool
/// empty: pool_exhausted, not quota_exceeded.
#[test]
fn pool_exhausted_for_a_second_block() {
    with_env(&tiny_pool().set("nat", "icmp_errors_per_sec", "0"), |env| {
        xlate_out(env, &Pkt::udp(sub(2), 7000, SERVER, 53), None, "subscriber 2 takes one block");
        for i in 0..4u16 {
            xlate_out(env, &Pkt::udp(sub(1), 7000 + i, SERVER, 53), None, "subscriber 1 fills its block");
        }
        expect_refused(env, &Pkt::udp(sub(1), 7004, SERVER, 53), "pool_exhausted", "a block beyond the pool");
        let s = env.subscriber(sub(1)).expect("subscriber 1");
        assert_eq!(
            s.blocks.iter().filter(|b| **b != 0).count(),
            1,
            "expected subscriber 1 still holding one block"
        );
        check_allocation(env, "pool full");
    });
}

/// A full mapping table never evicts: the fifth flow is refused with table_full, its port
/// is given back, the four keep working. (Two subscribers whose home blocks others hold,
/// so that their mappings are the table's; a home-walk mapping, a port word, takes no
/// table entry and is made while the table is full.)
#[test]
fn full_mapping_table_drops_and_never_evicts() {
    with_env(&cfg().set("limits", "max_mappings", "4"), |env| {
        let twins = [home_twin(env, sub(1), 1), home_twin(env, sub(2), 1)];
        for t in twins {
            xlate_out(env, &Pkt::udp(t, 7000, SERVER, 53), None, "a twin takes the home block");
        }
        let flows: Vec<(Pkt, Ep)> = (0..4u16)
            .map(|i| {
                let p = Pkt::udp(sub(1 + (i % 2) as u8), 8000 + i, SERVER, 53);
                let o = xlate_out(env, &p, None, "within the table");
                (p, o)
            })
            .collect();
        expect_refused(env, &Pkt::udp(sub(1), 8100, SERVER, 53), "table_full", "fifth mapping");
        assert_eq!(
            env.dp.tables.table_mappings().expect("mappings").len(),
            4,
            "expected the 4 mappings, none evicted"
        );
        assert_eq!(env.mappings().len(), 6, "expected the 4 table mappings and the twins' 2 home-walk ones");
        xlate_out(
            env,
            &Pkt::udp(twins[0], 7001, SERVER, 53),
            None,
            "a home-walk mapping while the table is full",
        );
        // the port claimed for the refused flow went back: counts and words agree
        check_allocation(env, "after a table_full drop");
        for (p, o) in &flows {
            xlate_out(env, p, Some(*o), "existing flow out");
            xlate_in(env, &reply(p, *o), (p.src, p.sport()), "existing flow in");
        }
    });
}

#[test]
fn full_session_table_drops_and_keeps_sessions() {
    with_env(&cfg().set("limits", "max_sessions", "2"), |env| {
        let a = Pkt::udp(sub(1), 9000, SERVER, 53);
        let b = Pkt::udp(sub(1), 9000, SERVER2, 53);
        let o = xlate_out(env, &a, None, "first session");
        xlate_out(env, &b, Some(o), "second session");
        let third = Pkt::udp(sub(1), 9000, SERVER, 54);
        let before = env.stats();
        let (v, out) = env.inside(&third.build());
        assert_eq!(verdict_name(v), "XDP_REDIRECT", "third session: expected an ICMP 3/13 back");
        assert_frame_eq(
            &out,
            &icmp_error_about(
                &third.build(),
                GW_IN,
                3,
                env.cfg.nat.unreachable_code.code(),
                0,
                ip_ident(&out),
            ),
            "third session",
        );
        env.assert_counters(
            &before,
            &[("rx_inside", 1), ("table_full", 1), ("icmp_sent", 1)],
            "third session",
        );
        let before = env.stats();
        env.expect_verdict(
            Side::Outside,
            &Pkt::udp(SERVER2, 99, o.0, o.1).build(),
            XDP_DROP,
            "inbound 3rd session",
        );
        env.assert_counters(&before, &[("rx_outside", 1), ("table_full", 1)], "inbound third session");
        assert_eq!(env.sessions().len(), 2, "expected the two sessions kept");
        // an inbound packet that cannot get a session is dropped silently (no ICMP)
        xlate_in(env, &reply(&a, o), (sub(1), 9000), "first session still works");
        xlate_in(env, &reply(&b, o), (sub(1), 9000), "second session still works");
    });
}

/// The open-addressed tables filled to their configured size: one more is refused, every
/// entry is found where user space, recomputing the data plane's hash, looks for it, the
/// dumps see each once, the counts and every bucket's overflow count agree with the entries;
/// expiry empties them completely (overflow counts back to 0) and the slots are reused.
#[test]
fn tables_fill_to_their_size_and_empty_completely() {
    use natrix::abi::{TAB_MAPS, TAB_SESS};
    const SUBS: u8 = 25;
    const PER: u16 = 800;
    let n = SUBS as u64 * PER as u64;
    // every mapping in the table (no home walk): both tables fill
    let c = short_timeouts()
        .set("limits", "max_mappings", &n.to_string())
        .set("limits", "max_sessions", &n.to_string())
        .set("nat", "max_blocks_per_subscriber", "8")
        .set("nat", "home_probe", "0");
    with_env(&c, |env| {
        let t = &env.dp.tables;
        for s in 1..=SUBS {
            for i in 0..PER {
                let (v, out) = env.inside(&Pkt::udp(sub(s), 10000 + i, SERVER, 53).build());
                assert_eq!(verdict_name(v), "XDP_REDIRECT", "flow {i} of subscriber {s}");
                assert!(
                    env.cfg.pool.addresses.contains(&src_ip(&out)),
                    "flow {i} of subscriber {s}: not translated"
                );
            }
        }
        expect_refused(
            env,
            &Pkt::udp(sub(1), 20000, SERVER, 53),
            "table_full",
            "one more than the tables hold",
        );
        for (tab, what) in [(TAB_SESS, "sessions"), (TAB_MAPS, "mappings")] {
            let h = t.tab_health(tab).expect("table health");
            assert_eq!((h.live, h.counted), (n, n), "{what}: live slots and the data plane's count: {h:?}");
            assert_eq!(h.overflow_wrong, 0, "{what}: overflow counts disagree with the entries: {h:?}");
            assert_eq!(h.alt_wrong, 0, "{what}: alt counts disagree with the entries: {h:?}");
            assert!(
                h.alt_sum > 0,
                "{what}: at full size some entries must live in their second chain: {h:?}"
            );
            // every entry in its second chain is away from its first home, and so are some
            // displaced within the first; all of these flows are UDP
            assert!(h.away >= h.alt_sum && h.away < h.live, "{what}: entries away from home: {h:?}");
            assert_eq!(h.live_by_proto, [0, n, 0], "{what}: live entries by protocol: {h:?}");
            assert_eq!(h.away_by_proto, [0, h.away, 0], "{what}: away entries by protocol: {h:?}");
        }
        let maps = env.mappings();
        let distinct: HashSet<(u32, u16)> = maps.iter().map(|(k, _)| (k.in_ip, k.in_port)).collect();
        assert_eq!((maps.len(), distinct.len()), (n as usize, n as usize), "each mapping dumped once");
        for s in 1..=SUBS {
            for i in (0..PER).step_by(7) {
                let m = env.mapping(sub(s), 10000 + i, UDP).expect("expected the mapping found by its hash");
                let se = env
                    .session(sub(s), 10000 + i, SERVER, 53, UDP)
                    .expect("expected the session found by its hash");
                assert_eq!((se.out_ip, se.out_port), (m.out_ip, m.out_port), "session carries its mapping");
            }
        }
        // and the data plane finds every one of them again, in either chain: the same
        // outside endpoint, nothing created, nothing refused
        let before = env.stats();
        for s in 1..=SUBS {
            for i in 0..PER {
                let (v, out) = env.inside(&Pkt::udp(sub(s), 10000 + i, SERVER, 53).build());
                let m = env.mapping(sub(s), 10000 + i, UDP).expect("mapping");
                assert_eq!(verdict_name(v), "XDP_REDIRECT", "again: flow {i} of subscriber {s}");
                assert_eq!(
                    (src_ip(&out), sport(&out)),
                    (ip_from_be(m.out_ip), u16::from_be(m.out_port)),
                    "again: flow {i} of subscriber {s}"
                );
            }
        }
        let n_again = SUBS as u64 * PER as u64;
        env.assert_counters(
            &before,
            &[("rx_inside", n_again), ("translated_out", n_again), ("redirected", n_again)],
            "every entry of full tables found again",
        );
        check_allocation(env, "full tables");
        assert_tables_ok(env, "full tables");
        sleep(Duration::from_millis(2200));
        env.sweep();
        for (tab, what) in [(TAB_SESS, "sessions"), (TAB_MAPS, "mappings")] {
            let h = t.tab_health(tab).expect("table health");
            assert_eq!(
                (h.live, h.counted, h.overflow_sum, h.alt_sum, h.away),
                (0, 0, 0, 0, 0),
                "{what}: expected empty after expiry, overflow and alt counts 0: {h:?}"
            );
        }
        for i in 0..200u16 {
            let (v, out) = env.inside(&Pkt::udp(sub(2), 30000 + i, SERVER2, 53).build());
            assert_eq!(verdict_name(v), "XDP_REDIRECT", "refill flow {i}");
            assert!(env.cfg.pool.addresses.contains(&src_ip(&out)), "refill flow {i}: not translated");
        }
        assert_eq!(env.sessions().len(), 200, "slots reused after expiry");
        assert_tables_ok(env, "emptied and refilled tables");
    });
}

// =============================================================================================
// 3. Expiry
// =============================================================================================

#[test]
fn expiry_releases_holds_down_then_frees() {
    with_env(&short_timeouts(), |env| {
        let t0 = Instant::now();
        let u = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "UDP");
        let i = xlate_out(env, &Pkt::echo_request(sub(1), SERVER, 77), None, "ICMP");
        let t = xlate_out(env, &Pkt::tcp(sub(1), 40001, SERVER, 80, SYN), None, "TCP SYN");
        let addr = env.pool_index(u.0);
        let ports = [(UDP, u.1), (ICMP, i.1), (TCP, t.1)];
        let s = env.subscriber(sub(1)).expect("subscriber");
        let gid = s.blocks[0] - 1;
        assert_eq!(
            natrix::tables::block_used(env.block_word(gid)),
            3,
            "expected 3 ports counted in the block"
        );
        assert_eq!(gid, home_block(env, sub(1)), "expected the home block, its ports home-walk mappings");

        let r = env.sweep();
        assert_eq!(r.sessions_expired, 0, "expected nothing expired right away, got {r:?}");

        sleep_until(t0, Duration::from_millis(1300));
        let now_s = mono_secs();
        let r = env.sweep();
        assert_eq!(
            (r.sessions_expired, r.mappings_released),
            (3, 3),
            "expected 3 sessions and mappings expired: {r:?}"
        );
        assert!(env.sessions().is_empty(), "expected no session left");
        assert!(env.mappings().is_empty(), "expected no mapping left");
        for (proto, port) in ports {
            let w = env.port_word(addr, proto, port);
            assert_eq!(
                port_state(w),
                PORT_HELD,
                "expected port {port}/{proto} HELD after expiry, word {w:#x}"
            );
            let at = (w as u32) as u64;
            assert!(at.abs_diff(now_s) <= 1, "expected the hold-down start {at} to be now ({now_s})");
        }
        assert_eq!(
            natrix::tables::block_used(env.block_word(gid)),
            3,
            "expected held ports still counted in the block"
        );
        assert!(env.subscriber(sub(1)).is_some(), "expected the subscriber kept while its block holds ports");

        // a held word of a home block its subscriber owns is freed 2 s after its hold-down
        // (the fast path claims it from the hold-down on: no walk passes it then)
        sleep(Duration::from_millis(1100));
        let r = env.sweep();
        assert_eq!(r.ports_freed, 0, "expected no port freed right after the hold-down: {r:?}");
        sleep(Duration::from_millis(2000));
        let r = env.sweep();
        assert_eq!(r.ports_freed, 3, "expected 3 ports freed after the hold-down: {r:?}");
        assert_eq!(r.blocks_released, 1, "expected the empty block released: {r:?}");
        assert_eq!(r.subscribers_removed, 1, "expected the subscriber removed: {r:?}");
        for (proto, port) in ports {
            assert_eq!(env.port_word(addr, proto, port), PORT_FREE, "expected port {port}/{proto} FREE (0)");
        }
        assert_eq!(env.block_word(gid), 0, "expected block {gid} back in the pool (word 0)");
        assert!(env.subscriber(sub(1)).is_none(), "expected the subscriber entry removed");
        // the subscriber starts over
        xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "after everything expired");
        check_allocation(env, "fresh start");
    });
}

#[test]
fn inbound_to_an_expired_mapping_is_no_mapping() {
    with_env(&short_timeouts(), |env| {
        let t0 = Instant::now();
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        xlate_in(env, &reply(&p, o), (sub(1), 40000), "reply while alive");
        sleep_until(t0, Duration::from_millis(1300));
        env.sweep();
        assert!(env.mappings().is_empty(), "expected the mapping expired");
        let before = env.stats();
        env.expect_verdict(
            Side::Outside,
            &reply(&p, o).build(),
            XDP_DROP,
            "reply to the expired mapping (port held)",
        );
        env.assert_counters(&before, &[("rx_outside", 1), ("no_mapping", 1)], "reply to an expired mapping");
        env.assert_some_counters(&before, &[("sessions_created", 0)], "no session from a stale port");
    });
}

/// The packet path counts time in jiffies, the daemon and the reaper in CLOCK_MONOTONIC
/// (src/clock.rs): a session created now must expire one UDP timeout from now on the
/// daemon's clock, within a tick (16.8 ms), or timeouts would be off by the difference.
#[test]
fn packet_path_clock_agrees_with_the_daemons() {
    with_env(&cfg(), |env| {
        let c = env.dp.tables.config().expect("config");
        assert!(natrix::clock::HZ_CHOICES.contains(&c.clk_hz), "HZ {} measured at start", c.clk_hz);
        for i in 0..8u16 {
            let before = natrix::tables::now_tick();
            xlate_out(env, &Pkt::udp(sub(1), 40000 + i, SERVER, 53), None, "UDP out");
            let after = natrix::tables::now_tick();
            let s = env.session(sub(1), 40000 + i, SERVER, 53, UDP).expect("session");
            let born = s.expire.wrapping_sub(c.to_udp);
            assert!(
                born.wrapping_sub(before) as i32 >= -1 && after.wrapping_sub(born) as i32 >= -1,
                "packet {i}: created at tick {born} on the packet path, between {before} and {after} \
                 on CLOCK_MONOTONIC"
            );
            sleep(Duration::from_millis(37));
        }
    });
}

/// RFC 4787 REQ-6: outbound traffic refreshes the session. A packet at 0.8 s of a 1 s
/// timeout must carry the session past a sweep at 1.3 s.
#[test]
fn outbound_traffic_refreshes_a_session() {
    with_env(&short_timeouts(), |env| {
        let t0 = Instant::now();
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        sleep_until(t0, Duration::from_millis(800));
        xlate_out(env, &p, Some(o), "refreshing packet at 0.8 s");
        sleep_until(t0, Duration::from_millis(1300));
        let r = env.sweep();
        assert_eq!(
            r.sessions_expired, 0,
            "expected the refreshed session to survive the sweep at 1.3 s: {r:?}"
        );
        assert!(env.session(sub(1), 40000, SERVER, 53, UDP).is_some(), "expected the session still there");
        xlate_in(env, &reply(&p, o), (sub(1), 40000), "reply after the sweep");
    });
}

/// The same with a 2 s timeout and a refresh 1.3 s in (past the refresh slack): the
/// refreshed flow survives a sweep at 2.3 s, an idle sibling does not.
#[test]
fn outbound_traffic_refreshes_a_session_beyond_the_slack() {
    with_env(&short_timeouts().set("timeouts", "udp", "\"2s\""), |env| {
        let t0 = Instant::now();
        let busy = Pkt::udp(sub(1), 40000, SERVER, 53);
        let idle = Pkt::udp(sub(1), 40002, SERVER, 53);
        let o = xlate_out(env, &busy, None, "busy flow");
        xlate_out(env, &idle, None, "idle flow");
        sleep_until(t0, Duration::from_millis(1300));
        xlate_out(env, &busy, Some(o), "refreshing packet at 1.3 s");
        sleep_until(t0, Duration::from_millis(2300));
        let r = env.sweep();
        assert_eq!(r.sessions_expired, 1, "expected only the idle session expired at 2.3 s: {r:?}");
        assert!(env.session(sub(1), 40000, SERVER, 53, UDP).is_some(), "expected the refreshed session kept");
        assert!(env.session(sub(1), 40002, SERVER, 53, UDP).is_none(), "expected the idle session gone");
        xlate_in(env, &reply(&busy, o), (sub(1), 40000), "reply to the refreshed flow");
    });
}

/// TCP timers follow the state: an established connection uses tcp_established (2h4m),
/// a half-open one or one after RST the transitory timeout (1 s here).
#[test]
fn tcp_timeout_follows_the_state() {
    with_env(&short_timeouts(), |env| {
        let t0 = Instant::now();
        let est = (sub(1), 41000);
        let half = (sub(1), 41001);
        let reset = (sub(1), 41002);
        let srv = (SERVER, 80);
        let o = xlate_out(env, &Pkt::tcp(est.0, est.1, srv.0, srv.1, SYN), None, "SYN (established)");
        xlate_in(env, &Pkt::tcp(srv.0, srv.1, o.0, o.1, SYN | ACK), est, "SYN-ACK (established)");
        xlate_out(env, &Pkt::tcp(half.0, half.1, srv.0, srv.1, SYN), None, "SYN (half open)");
        let o3 = xlate_out(env, &Pkt::tcp(reset.0, reset.1, srv.0, srv.1, SYN), None, "SYN (reset)");
        xlate_in(env, &Pkt::tcp(srv.0, srv.1, o3.0, o3.1, SYN | ACK), reset, "SYN-ACK (reset)");
        xlate_in(env, &Pkt::tcp(srv.0, srv.1, o3.0, o3.1, RST), reset, "RST in");
        assert_state(env, reset, srv, ST_RST, "after RST");
        sleep_until(t0, Duration::from_millis(1300));
        let r = env.sweep();
        assert_eq!(r.sessions_expired, 2, "expected the half-open and the reset sessions expired: {r:?}");
        assert_state(env, est, srv, ST_EST, "established session after the sweep");
        assert!(state(env, half, srv, TCP).is_none(), "expected the half-open session gone");
        assert!(
            state(env, reset, srv, TCP).is_none(),
            "expected the reset session gone after the transitory timeout"
        );
    });
}

// =============================================================================================
// 4. TCP state
// =============================================================================================

/// Opens a TCP connection to SERVER:80 and returns (inside, remote, outside) endpoints.
fn tcp_established(env: &Env, inp: u16) -> (Ep, Ep, Ep) {
    let me = (sub(1), inp);
    let srv = (SERVER, 80);
    let o = xlate_out(env, &Pkt::tcp(me.0, me.1, srv.0, srv.1, SYN), None, "SYN out");
    assert_state(env, me, srv, ST_SYN_OUT, "after SYN out");
    xlate_in(env, &Pkt::tcp(srv.0, srv.1, o.0, o.1, SYN | ACK), me, "SYN-ACK in");
    assert_state(env, me, srv, ST_EST, "after SYN-ACK in");
    (me, srv, o)
}

#[test]
fn tcp_close_fin_out_first() {
    with_env(&cfg(), |env| {
        let (me, srv, o) = tcp_established(env, 42000);
        xlate_out(env, &Pkt::tcp(me.0, me.1, srv.0, srv.1, FIN | ACK), Some(o), "FIN out");
        assert_state(env, me, srv, ST_FIN_OUT, "after FIN out");
        xlate_in(env, &Pkt::tcp(srv.0, srv.1, o.0, o.1, FIN | ACK), me, "FIN in");
        assert_state(env, me, srv, ST_FIN_BOTH, "after FIN both ways");
        xlate_out(env, &Pkt::tcp(me.0, me.1, srv.0, srv.1, ACK).payload(&[]), Some(o), "last ACK out");
        assert_state(env, me, srv, ST_FIN_BOTH, "after the last ACK");
    });
}

#[test]
fn tcp_close_fin_in_first() {
    with_env(&cfg(), |env| {
        let (me, srv, o) = tcp_established(env, 42001);
        xlate_in(env, &Pkt::tcp(srv.0, srv.1, o.0, o.1, FIN | ACK), me, "FIN in");
        assert_state(env, me, srv, ST_FIN_IN, "after FIN in");
        xlate_out(env, &Pkt::tcp(me.0, me.1, srv.0, srv.1, FIN | ACK), Some(o), "FIN out");
        assert_state(env, me, srv, ST_FIN_BOTH, "after FIN both ways");
    });
}

/// RFC 7857 section 2.1: a RST moves the session to the transitory timeout; it is not
/// deleted at once, and traffic after it (the RST was bogus) revives the connection.
#[test]
fn tcp_rst_keeps_the_session() {
    with_env(&cfg(), |env| {
        let (me, srv, o) = tcp_established(env, 42002);
        xlate_in(env, &Pkt::tcp(srv.0, srv.1, o.0, o.1, RST), me, "RST in");
        assert_state(env, me, srv, ST_RST, "after RST in");
        assert!(env.mapping(me.0, me.1, TCP).is_some(), "expected the mapping kept after RST");
        xlate_out(env, &Pkt::tcp(me.0, me.1, srv.0, srv.1, PSH | ACK), Some(o), "data after RST");
        assert_state(env, me, srv, ST_EST, "after data following a RST");
        xlate_out(env, &Pkt::tcp(me.0, me.1, srv.0, srv.1, RST | ACK), Some(o), "RST out");
        assert_state(env, me, srv, ST_RST, "after RST out");
        assert_eq!(env.sessions().len(), 1, "expected the session kept after RST out");
    });
}

/// Only a SYN creates a TCP mapping (RFC 5382, RFC 7857): other first packets are dropped.
#[test]
fn tcp_first_packet_must_be_a_syn() {
    let rows: [(&str, u8); 6] = [
        ("bare ACK", ACK),
        ("data", PSH | ACK),
        ("FIN", FIN | ACK),
        ("RST", RST),
        ("SYN+RST", SYN | RST),
        ("no flags", 0),
    ];
    with_env(&cfg(), |env| {
        for (what, flags) in rows {
            let p = Pkt::tcp(sub(1), 43000, SERVER, 80, flags);
            let before = env.stats();
            let out = env.expect_verdict(Side::Inside, &p.build(), XDP_DROP, what);
            let _ = out;
            env.assert_counters(&before, &[("rx_inside", 1), ("tcp_no_syn", 1)], what);
            env.assert_no_state(what);
        }
    });
}

/// Simultaneous open: SYN out, then a SYN (without ACK) in: established.
#[test]
fn tcp_simultaneous_open() {
    with_env(&cfg(), |env| {
        let me = (sub(1), 42003);
        let peer = (SERVER, 42003);
        let o = xlate_out(env, &Pkt::tcp(me.0, me.1, peer.0, peer.1, SYN), None, "SYN out");
        assert_state(env, me, peer, ST_SYN_OUT, "after SYN out");
        xlate_in(env, &Pkt::tcp(peer.0, peer.1, o.0, o.1, SYN), me, "SYN in (no ACK)");
        assert_state(env, me, peer, ST_EST, "after crossing SYNs");
    });
}

/// Through an existing mapping (EIF), a SYN from a new remote creates an inbound session in
/// syn_in; the inside's SYN-ACK establishes it.
#[test]
fn tcp_inbound_syn_then_outbound_synack() {
    with_env(&cfg(), |env| {
        let (me, _srv, o) = tcp_established(env, 42004);
        let peer = (SERVER2, 5555);
        xlate_in(env, &Pkt::tcp(peer.0, peer.1, o.0, o.1, SYN), me, "SYN in from a new remote");
        assert_state(env, me, peer, ST_SYN_IN, "after SYN in");
        let s = env.session(me.0, me.1, peer.0, peer.1, TCP).expect("session");
        assert_eq!(s.flags & SF_INBOUND, SF_INBOUND, "expected the session flagged inbound");
        xlate_out(env, &Pkt::tcp(me.0, me.1, peer.0, peer.1, SYN | ACK), Some(o), "SYN-ACK out");
        assert_state(env, me, peer, ST_EST, "after SYN-ACK out");
        assert_eq!(
            env.mapping(me.0, me.1, TCP).map(|m| m.nsess),
            Some(2),
            "expected two sessions on the mapping"
        );
    });
}

// =============================================================================================
// 5. Malformed packets (one test per row)
// =============================================================================================

/// Inside base packets: UDP / TCP / ICMP from subscriber 1 to the server.
fn in_udp() -> Vec<u8> {
    Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"0123456789").build()
}
fn in_tcp() -> Vec<u8> {
    Pkt::tcp(sub(1), 40000, SERVER, 80, SYN).tcp_options(&[]).payload(b"012345").build()
}
fn in_icmp() -> Vec<u8> {
    Pkt::echo_request(sub(1), SERVER, 9).build()
}
/// Outside base packets: to the outside endpoint `o` of an existing UDP mapping (the case
/// opens it first), so that a lax parser would translate them.
fn out_udp(o: Ep) -> Vec<u8> {
    Pkt::udp(SERVER, 53, o.0, o.1).payload(b"0123456789").build()
}
fn out_tcp(o: Ep) -> Vec<u8> {
    Pkt::tcp(SERVER, 53, o.0, o.1, SYN).tcp_options(&[]).payload(b"012345").build()
}
fn out_icmp(o: Ep) -> Vec<u8> {
    Pkt::echo_reply(SERVER, o.0, o.1).build()
}

/// The IP packet natrix sent out for the flow the outside cases open, as an ICMP error
/// from the outside quotes it (source = the outside endpoint `o`).
fn sent_quote(o: Ep) -> Vec<u8> {
    ip_bytes(&Pkt::udp(sub(1), 40000, SERVER, 53).with_src(o.0, o.1).forwarded().build(), 548)
}
/// A packet to subscriber 1 as an ICMP error from it would quote it.
fn delivered_quote() -> Vec<u8> {
    ip_bytes(&Pkt::udp(SERVER, 53, sub(1), 40000).forwarded().build(), 548)
}

fn truncate_l4(mut f: Vec<u8>, l4_bytes: usize) -> Vec<u8> {
    let o = l4_off(&f);
    f.truncate(o + l4_bytes);
    let tot = (f.len() - ETH_LEN) as u16;
    set_tot_len(&mut f, tot);
    f
}
fn set_byte(mut f: Vec<u8>, off: usize, v: u8) -> Vec<u8> {
    f[off] = v;
    f
}
fn ip_byte(f: Vec<u8>, off: usize, v: u8) -> Vec<u8> {
    let mut f = set_byte(f, ETH_LEN + off, v);
    fix_ip_csum(&mut f);
    f
}
fn l4_u16(mut f: Vec<u8>, off: usize, v: u16) -> Vec<u8> {
    let o = l4_off(&f) + off;
    f[o..o + 2].copy_from_slice(&v.to_be_bytes());
    f
}
fn tot_len(mut f: Vec<u8>, delta: i32) -> Vec<u8> {
    let t = (ip_tot_len(&f) as i32 + delta) as u16;
    set_tot_len(&mut f, t);
    f
}
fn arp() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&mac_of(sub(1)));
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac_of(sub(1)));
    f.extend_from_slice(&sub(1).octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&GW_IN.octets());
    f
}
fn ipv6() -> Vec<u8> {
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2(mac_of(sub(1)), IN_MAC)
        .ipv6(
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            64,
        )
        .udp(40000, 53)
        .write(&mut f, b"v6")
        .expect("ipv6");
    f
}

/// Runs one malformed (or not-for-us) packet and checks: the verdict, exactly one reason
/// counter (plus the rx counter), no other counter, a PASSed frame unchanged, and no state
/// created (inside) or no state changed (outside: the case opens one UDP mapping first).
fn malformed_case(name: &str, side: Side, build: fn(Ep) -> Vec<u8>, verdict: u32, counter: &str) {
    let name = name.to_string();
    let counter = counter.to_string();
    with_env(&cfg(), move |env| {
        let o = match side {
            Side::Inside => (POOL0, 40000),
            Side::Outside => xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "opening a mapping"),
        };
        let (nm, ns) = (env.mappings().len(), env.sessions().len());
        let pkt = build(o);
        let before = env.stats();
        let out = env.expect_verdict(side, &pkt, verdict, &name);
        if verdict == XDP_PASS {
            assert_frame_eq(&out, &pkt, &format!("{name}: the frame passed to the kernel, unchanged"));
        }
        let rx = if side == Side::Inside { "rx_inside" } else { "rx_outside" };
        env.assert_counters(&before, &[(rx, 1), (counter.as_str(), 1)], &name);
        match side {
            Side::Inside => env.assert_no_state(&name),
            Side::Outside => assert_eq!(
                (env.mappings().len(), env.sessions().len()),
                (nm, ns),
                "{name}: expected no mapping or session created"
            ),
        }
    });
}

macro_rules! malformed {
    ($($name:ident: $side:ident, $build:expr, $verdict:ident, $counter:literal;)*) => {$(
        #[test]
        fn $name() {
            malformed_case(stringify!($name), Side::$side, $build, $verdict, $counter);
        }
    )*};
}

malformed! {
    // ---- inside ----
    in_arp_passes: Inside, |_| arp(), XDP_PASS, "pass_not_ipv4";
    in_ipv6_passes: Inside, |_| ipv6(), XDP_PASS, "pass_not_ipv4";
    in_ethernet_header_only: Inside, |_| in_udp()[..ETH_LEN].to_vec(), XDP_DROP, "malformed_ip";
    in_truncated_ip_header: Inside, |_| in_udp()[..ETH_LEN + 10].to_vec(), XDP_DROP, "malformed_ip";
    in_ip_version_6: Inside, |_| ip_byte(in_udp(), 0, 0x65), XDP_DROP, "malformed_ip";
    in_ihl_below_5: Inside, |_| ip_byte(in_udp(), 0, 0x44), XDP_DROP, "malformed_ip";
    in_ihl_beyond_data: Inside, |_| ip_byte(in_udp(), 0, 0x4f), XDP_DROP, "malformed_ip";
    in_tot_len_beyond_frame: Inside, |_| tot_len(in_udp(), 1), XDP_DROP, "malformed_ip";
    in_tot_len_below_header: Inside, |_| { let mut f = in_udp(); set_tot_len(&mut f, 19); f }, XDP_DROP, "malformed_ip";
    in_bad_ip_checksum: Inside, |_| { let mut f = in_udp(); f[ETH_LEN + 10] ^= 0x5a; f }, XDP_DROP, "malformed_ip";
    in_truncated_tcp_header: Inside, |_| truncate_l4(in_tcp(), 12), XDP_DROP, "malformed_l4";
    in_tcp_header_cut_by_tot_len: Inside, |_| tot_len(in_tcp(), -14), XDP_DROP, "malformed_l4";
    in_tcp_doff_below_5: Inside, |_| { let mut f = in_tcp(); let o = l4_off(&f); f[o + 12] = 0x40; f }, XDP_DROP, "malformed_l4";
    in_tcp_doff_beyond_packet: Inside, |_| { let mut f = in_tcp(); let o = l4_off(&f); f[o + 12] = 0xf0; f }, XDP_DROP, "malformed_l4";
    in_truncated_udp_header: Inside, |_| truncate_l4(in_udp(), 4), XDP_DROP, "malformed_l4";
    in_udp_len_below_8: Inside, |_| l4_u16(in_udp(), 4, 7), XDP_DROP, "malformed_l4";
    in_udp_len_beyond_ip_payload: Inside, |_| l4_u16(in_udp(), 4, 19), XDP_DROP, "malformed_l4";
    in_truncated_icmp_header: Inside, |_| truncate_l4(in_icmp(), 4), XDP_DROP, "malformed_l4";
    in_icmp_header_cut_by_tot_len: Inside, |_| tot_len(in_icmp(), -(ip_tot_len(&in_icmp()) as i32 - 24)), XDP_DROP, "malformed_l4";
    in_gre_unsupported: Inside, |_| Pkt::other(sub(1), SERVER, 47).build(), XDP_DROP, "unsupported_proto";
    in_sctp_unsupported: Inside, |_| Pkt::other(sub(1), SERVER, 132).build(), XDP_DROP, "unsupported_proto";
    in_icmp_timestamp_unsupported: Inside, |_| Pkt::icmp(sub(1), SERVER, 13, 0).build(), XDP_DROP, "unsupported_icmp";
    in_icmp_redirect_unsupported: Inside, |_| Pkt::icmp(sub(1), SERVER, 5, 1).build(), XDP_DROP, "unsupported_icmp";
    in_icmp_error_truncated_quote: Inside, |_| Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &delivered_quote()[..20]).build(), XDP_DROP, "icmp_malformed";
    in_icmp_error_about_nothing_delivered: Inside, |_| Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &delivered_quote()).build(), XDP_DROP, "no_mapping";
    // ---- outside ----
    out_arp_passes: Outside, |_| arp(), XDP_PASS, "pass_not_ipv4";
    out_truncated_ip_header: Outside, |o| out_udp(o)[..ETH_LEN + 16].to_vec(), XDP_DROP, "malformed_ip";
    out_ip_version_6: Outside, |o| ip_byte(out_udp(o), 0, 0x65), XDP_DROP, "malformed_ip";
    out_ihl_below_5: Outside, |o| ip_byte(out_udp(o), 0, 0x43), XDP_DROP, "malformed_ip";
    out_tot_len_beyond_frame: Outside, |o| tot_len(out_udp(o), 7), XDP_DROP, "malformed_ip";
    out_bad_ip_checksum: Outside, |o| { let mut f = out_udp(o); f[ETH_LEN + 11] ^= 1; f }, XDP_DROP, "malformed_ip";
    out_truncated_tcp_header: Outside, |o| truncate_l4(out_tcp(o), 19), XDP_DROP, "malformed_l4";
    out_tcp_doff_beyond_packet: Outside, |o| { let mut f = out_tcp(o); let x = l4_off(&f); f[x + 12] = 0x70; f }, XDP_DROP, "malformed_l4";
    out_truncated_udp_header: Outside, |o| truncate_l4(out_udp(o), 7), XDP_DROP, "malformed_l4";
    out_udp_len_below_8: Outside, |o| l4_u16(out_udp(o), 4, 0), XDP_DROP, "malformed_l4";
    out_udp_len_beyond_ip_payload: Outside, |o| l4_u16(out_udp(o), 4, 100), XDP_DROP, "malformed_l4";
    out_truncated_icmp_header: Outside, |o| truncate_l4(out_icmp(o), 6), XDP_DROP, "malformed_l4";
    out_fragment_not_for_pool_passes: Outside, |_| ip_byte(Pkt::udp(SERVER, 53, GW_OUT, 53).build(), 6, 0x20), XDP_PASS, "pass_local";
    out_gre_to_pool_unsupported: Outside, |o| Pkt::other(SERVER, o.0, 47).build(), XDP_DROP, "unsupported_proto";
    out_icmp_timestamp_unsupported: Outside, |o| Pkt::icmp(SERVER, o.0, 13, 0).build(), XDP_DROP, "unsupported_icmp";
    out_icmp_error_truncated_quote: Outside, |o| Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent_quote(o)[..24]).build(), XDP_DROP, "icmp_malformed";
    out_icmp_error_quote_not_ipv4: Outside, |o| { let mut q = sent_quote(o); q[0] = 0x65; Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &q).build() }, XDP_DROP, "icmp_malformed";
    out_icmp_error_bad_icmp_checksum: Outside, |o| { let mut f = Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent_quote(o)).build(); let x = l4_off(&f); f[x + 2] ^= 0x10; f }, XDP_DROP, "icmp_bad_checksum";
    out_icmp_error_bad_quoted_ip_checksum: Outside, |o| { let mut q = sent_quote(o); q[10] ^= 0x10; Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &q).build() }, XDP_DROP, "icmp_bad_checksum";
    out_icmp_error_about_an_icmp_error: Outside, |o| Pkt::icmp_err(SERVER, o.0, 11, 0, [0; 4], &ip_bytes(&Pkt::icmp_err(o.0, SERVER, 3, 3, [0; 4], &sent_quote(o)).build(), 548)).build(), XDP_DROP, "unsupported_icmp";
    out_icmp_error_about_gre: Outside, |o| Pkt::icmp_err(SERVER, o.0, 3, 2, [0; 4], &ip_bytes(&Pkt::other(o.0, SERVER, 47).payload(b"12345678").build(), 548)).build(), XDP_DROP, "unsupported_proto";
    out_icmp_error_about_an_unmapped_port: Outside, |o| Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent_quote((o.0, o.1 ^ 0x40))).build(), XDP_DROP, "no_mapping";
}

// =============================================================================================
// 6. Handed to the kernel
// =============================================================================================

/// Outbound packets the kernel must handle untranslated: TTL expiring here (the kernel
/// answers time exceeded), for the gateway itself, inside to inside, no route.
#[test]
fn outbound_passes_untranslated() {
    let rows: Vec<(&str, Pkt, &str)> = vec![
        ("TTL 1", Pkt::udp(sub(1), 40000, SERVER, 53).ttl(1), "pass_ttl"),
        ("TTL 0", Pkt::udp(sub(1), 40000, SERVER, 53).ttl(0), "pass_ttl"),
        ("TCP SYN TTL 1", Pkt::tcp(sub(1), 40000, SERVER, 80, SYN).ttl(1), "pass_ttl"),
        ("to the gateway's inside address", Pkt::udp(sub(1), 40000, GW_IN, 53), "pass_local"),
        ("ping to the gateway's inside address", Pkt::echo_request(sub(1), GW_IN, 1), "pass_local"),
        ("to the gateway's outside address", Pkt::udp(sub(1), 40000, GW_OUT, 53), "pass_local"),
        ("inside to inside", Pkt::udp(sub(1), 40000, sub(2), 53), "pass_local"),
        ("no route", Pkt::udp(sub(1), 40000, Ipv4Addr::new(192, 0, 2, 1), 53), "pass_local"),
        (
            "ICMP error TTL 1",
            Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &delivered_quote()).ttl(1),
            "pass_ttl",
        ),
    ];
    with_env(&cfg(), |env| {
        for (what, p, counter) in &rows {
            let f = p.build();
            let before = env.stats();
            let out = env.expect_verdict(Side::Inside, &f, XDP_PASS, what);
            assert_frame_eq(&out, &f, &format!("{what}: expected the packet unchanged"));
            env.assert_counters(&before, &[("rx_inside", 1), (counter, 1)], what);
            env.assert_no_state(what);
        }
    });
}

#[test]
fn inbound_ttl_1_passes_untranslated() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        let r = reply(&p, o).ttl(1).build();
        let before = env.stats();
        let out = env.expect_verdict(Side::Outside, &r, XDP_PASS, "reply with TTL 1");
        assert_frame_eq(&out, &r, "reply with TTL 1: expected unchanged");
        env.assert_counters(&before, &[("rx_outside", 1), ("pass_ttl", 1)], "reply with TTL 1");
    });
}

#[test]
fn inbound_not_for_the_pool_passes() {
    let rows: Vec<(&str, Pkt)> = vec![
        ("to the gateway's outside address", Pkt::udp(SERVER, 53, GW_OUT, 40000)),
        ("ping to the gateway", Pkt::echo_request(SERVER, GW_OUT, 5)),
        ("to an inside address, routed", Pkt::udp(SERVER, 53, sub(1), 40000)),
        ("to an unrelated address", Pkt::udp(SERVER, 53, Ipv4Addr::new(192, 0, 2, 7), 40000)),
        ("TTL 1 to the gateway", Pkt::udp(SERVER, 53, GW_OUT, 40000).ttl(1)),
    ];
    with_env(&cfg(), |env| {
        for (what, p) in &rows {
            let f = p.build();
            let before = env.stats();
            let out = env.expect_verdict(Side::Outside, &f, XDP_PASS, what);
            assert_frame_eq(&out, &f, &format!("{what}: expected unchanged"));
            env.assert_counters(&before, &[("rx_outside", 1), ("pass_local", 1)], what);
            env.assert_no_state(what);
        }
    });
}

/// Outbound to a remote whose neighbour is unresolved: translated, then handed to the
/// kernel (which resolves the neighbour): no TTL decrement, MACs untouched.
#[test]
fn outbound_without_neighbour_passes_translated() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(sub(1), 40000, NO_NEIGH_REMOTE, 53);
        let before = env.stats();
        let out =
            env.expect_verdict(Side::Inside, &p.build(), XDP_PASS, "to a remote without neighbour entry");
        let o = (src_ip(&out), sport(&out));
        assert!(
            env.cfg.pool.addresses.contains(&o.0),
            "expected the packet already translated, source {}",
            o.0
        );
        assert_frame_eq(&out, &p.clone().with_src(o.0, o.1).build(), "translated, otherwise untouched");
        assert_csums(&out, "pass_no_neigh output");
        env.assert_some_counters(
            &before,
            &[("pass_no_neigh", 1), ("translated_out", 1), ("redirected", 0), ("mappings_created", 1)],
            "no neighbour",
        );
        // once resolved, the same mapping is used
        xlate_out(
            env,
            &Pkt::udp(sub(1), 40000, SERVER, 53),
            Some(o),
            "same inside endpoint to a resolved remote",
        );
    });
}

/// Inbound to a subscriber whose neighbour is unresolved: translated, handed to the kernel.
#[test]
fn inbound_without_neighbour_passes_translated() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(NO_NEIGH_SUB, 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "out from a subscriber without neighbour entry");
        let r = reply(&p, o);
        let before = env.stats();
        let out = env.expect_verdict(Side::Outside, &r.build(), XDP_PASS, "reply to it");
        assert_frame_eq(
            &out,
            &r.clone().with_dst(NO_NEIGH_SUB, 40000).build(),
            "translated, otherwise untouched",
        );
        assert_csums(&out, "inbound pass_no_neigh output");
        env.assert_counters(
            &before,
            &[("rx_outside", 1), ("translated_in", 1), ("pass_no_neigh", 1)],
            "reply",
        );
    });
}

/// Too big for out0 (MTU 1500): with DF the kernel must answer "fragmentation needed" to the
/// subscriber, so the packet goes up untranslated; without DF it is translated and the
/// kernel fragments it.
#[test]
fn oversized_outbound_with_and_without_df() {
    with_env(&cfg(), |env| {
        let big = Pkt::udp(sub(1), 40000, SERVER, 53).payload(&[0x5a; 1600]);
        let f = big.build();
        let before = env.stats();
        let out = env.expect_verdict(Side::Inside, &f, XDP_PASS, "1628-byte packet with DF");
        assert_frame_eq(&out, &f, "oversized with DF: expected untranslated");
        env.assert_counters(&before, &[("rx_inside", 1), ("pass_fib_other", 1)], "oversized with DF");
        env.assert_no_state("oversized with DF");

        let mut nodf = big.clone();
        nodf.df = false;
        let before = env.stats();
        let out = env.expect_verdict(Side::Inside, &nodf.build(), XDP_PASS, "1628-byte packet without DF");
        let o = (src_ip(&out), sport(&out));
        assert!(
            env.cfg.pool.addresses.contains(&o.0),
            "oversized without DF: expected translated, source {}",
            o.0
        );
        assert_frame_eq(
            &out,
            &nodf.clone().with_src(o.0, o.1).build(),
            "oversized without DF: translated only",
        );
        assert_csums(&out, "oversized without DF");
        env.assert_some_counters(
            &before,
            &[("translated_out", 1), ("pass_too_big", 1)],
            "oversized without DF",
        );
    });
}

// =============================================================================================
// 7. Hairpinning
// =============================================================================================

/// B sends to A's outside endpoint from the inside: delivered to A's inside address with
/// B's OUTSIDE endpoint as source, out of in0; and A's answer goes back the same way.
#[test]
fn hairpin_between_two_subscribers() {
    with_env(&cfg(), |env| {
        let a_in = (sub(1), 40000);
        let b_in = (sub(2), 41000);
        let a_out = xlate_out(env, &Pkt::udp(a_in.0, a_in.1, SERVER, 53), None, "A to a server");
        let p = Pkt::udp(b_in.0, b_in.1, a_out.0, a_out.1).payload(b"hello A");
        let before = env.stats();
        let out = env.expect_verdict(Side::Inside, &p.build(), XDP_REDIRECT, "B to A's outside endpoint");
        let bm = env.mapping(b_in.0, b_in.1, UDP).expect("expected a mapping for B");
        let b_out = (ip_from_be(bm.out_ip), u16::from_be(bm.out_port));
        assert_frame_eq(
            &out,
            &p.clone().with_src(b_out.0, b_out.1).with_dst(a_in.0, a_in.1).forwarded().build(),
            "hairpinned to A: B's outside source, A's inside destination, out of in0",
        );
        assert_csums(&out, "hairpin B -> A");
        env.assert_some_counters(
            &before,
            &[("translated_out", 1), ("translated_in", 1), ("redirected", 1), ("sessions_created", 2)],
            "hairpin B -> A",
        );
        let s = env
            .session(a_in.0, a_in.1, b_out.0, b_out.1, UDP)
            .expect("expected A's session with B's outside");
        assert_eq!(s.flags & SF_INBOUND, SF_INBOUND, "expected A's hairpin session flagged inbound");

        let back = Pkt::udp(a_in.0, a_in.1, b_out.0, b_out.1).payload(b"hello B");
        let out =
            env.expect_verdict(Side::Inside, &back.build(), XDP_REDIRECT, "A answers B's outside endpoint");
        assert_frame_eq(
            &out,
            &back.clone().with_src(a_out.0, a_out.1).with_dst(b_in.0, b_in.1).forwarded().build(),
            "hairpinned to B",
        );
        assert_csums(&out, "hairpin A -> B");
    });
}

#[test]
fn hairpin_disabled_drops() {
    with_env(&cfg().set("nat", "hairpinning", "false"), |env| {
        let a_out = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "A to a server");
        let before = env.stats();
        let p = Pkt::udp(sub(2), 41000, a_out.0, a_out.1);
        env.expect_verdict(Side::Inside, &p.build(), XDP_DROP, "B to A's outside endpoint");
        env.assert_counters(&before, &[("rx_inside", 1), ("hairpin_disabled", 1)], "hairpinning off");
        assert!(env.subscriber(sub(2)).is_none(), "expected no state for B");
    });
}

#[test]
fn hairpin_to_an_unmapped_pool_port_drops() {
    with_env(&cfg(), |env| {
        let before = env.stats();
        let p = Pkt::udp(sub(2), 41000, POOL0, 7);
        env.expect_verdict(Side::Inside, &p.build(), XDP_DROP, "B to a pool port nobody holds");
        env.assert_some_counters(&before, &[("no_mapping", 1), ("redirected", 0)], "hairpin to nothing");
    });
}

// =============================================================================================
// 8. Concurrency
// =============================================================================================

/// Two threads open 300 UDP flows each for the same subscriber at once. The lock-free
/// allocator must give 600 distinct ports with consistent port words and block counts.
/// A packet that loses the race for a block slot is dropped by design ("the packet's next
/// copy will see it"): such packets are sent again, as a client would retransmit.
#[test]
fn concurrent_allocation_for_one_subscriber() {
    with_env(&no_icmp(), |env| {
        let (fd, ifx) = env.prog_fd(Side::Inside);
        let ns = env.ns.clone();
        let barrier = Barrier::new(2);
        let results: Vec<Vec<(u16, u32)>> = std::thread::scope(|s| {
            let hs: Vec<_> = [10000u16, 20000]
                .into_iter()
                .map(|base| {
                    let (ns, barrier) = (&ns, &barrier);
                    s.spawn(move || {
                        enter_netns(ns);
                        let pkts: Vec<(u16, Vec<u8>)> = (0..300u16)
                            .map(|i| (base + i, Pkt::udp(sub(1), base + i, SERVER, 53).build()))
                            .collect();
                        barrier.wait();
                        pkts.iter().map(|(port, p)| (*port, xdp_run_fd(fd, ifx, p).0)).collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("sender thread")).collect()
        });
        let mut retried = 0;
        for (port, v) in results.into_iter().flatten() {
            if v != XDP_REDIRECT {
                retried += 1;
                let (v2, _) = env.inside(&Pkt::udp(sub(1), port, SERVER, 53).build());
                assert_eq!(
                    v2,
                    XDP_REDIRECT,
                    "expected flow {port} translated on retry (first try: {})",
                    verdict_name(v)
                );
            }
        }
        let st = env.stats();
        assert!(retried <= 8, "expected at most a few race losses, {retried} flows needed a retry");
        let maps = env.mappings();
        assert_eq!(maps.len(), 600, "expected 600 mappings, got {}", maps.len());
        let ports: HashSet<u16> = maps.iter().map(|(_, m)| u16::from_be(m.out_port)).collect();
        assert_eq!(ports.len(), 600, "expected 600 distinct outside ports");
        check_allocation(env, "after concurrent allocation");
        assert_tables_ok(env, "after concurrent allocation");
        eprintln!(
            "concurrency: {retried} retried, alloc_retries {}, quota_exceeded {}",
            st[stat_idx("alloc_retries")],
            st[stat_idx("quota_exceeded")]
        );
    });
}

// =============================================================================================
// 9. Fragments (RFC 4787 REQ-14)
// =============================================================================================

/// A UDP datagram of 100 bytes of payload without DF, and its two fragments (64 + 44 bytes).
fn frag_datagram(p: Pkt) -> Pkt {
    let mut p = p.payload(&(0..100u8).collect::<Vec<_>>());
    p.df = false;
    p
}

/// Outbound: the first fragment carries the ports and is translated like a whole datagram
/// (its UDP checksum covers the whole datagram); a later fragment only gets the subscriber's
/// pool address as source. Compared with the fragments of the datagram translated whole.
#[test]
fn fragments_outbound_in_order() {
    with_env(&cfg(), |env| {
        let p = frag_datagram(Pkt::udp(sub(1), 40000, SERVER, 53));
        let (f1, f2) = fragment(&p.build(), 64);
        let out1 = env.expect_verdict(Side::Inside, &f1, XDP_REDIRECT, "first fragment out");
        let o = (src_ip(&out1), sport(&out1));
        let (e1, e2) = fragment(&p.clone().with_src(o.0, o.1).forwarded().build(), 64);
        assert_frame_eq(&out1, &e1, "first fragment out");
        assert!(ip_csum_ok(&out1), "first fragment: expected a valid IP header checksum");
        assert!(
            env.mapping(sub(1), 40000, UDP).is_some(),
            "expected the first fragment to create the mapping"
        );
        let before = env.stats();
        let out2 = env.expect_verdict(Side::Inside, &f2, XDP_REDIRECT, "second fragment out");
        assert_frame_eq(&out2, &e2, "second fragment out: pool address as source");
        env.assert_counters(
            &before,
            &[("rx_inside", 1), ("fragments_out", 1), ("redirected", 1)],
            "second fragment",
        );
    });
}

/// A later fragment seen before any mapping of its subscriber still gets the address every
/// mapping of that subscriber will have (paired pooling).
#[test]
fn fragments_outbound_later_fragment_first() {
    with_env(&cfg(), |env| {
        xlate_out(env, &Pkt::udp(sub(2), 40000, SERVER, 53), None, "another subscriber first");
        env.sweep(); // the next new subscriber goes to another pool address
        let p = frag_datagram(Pkt::udp(sub(1), 40000, SERVER, 53));
        let (f1, f2) = fragment(&p.build(), 64);
        let out2 = env.expect_verdict(Side::Inside, &f2, XDP_REDIRECT, "later fragment first");
        let out1 = env.expect_verdict(Side::Inside, &f1, XDP_REDIRECT, "then the first fragment");
        let o = (src_ip(&out1), sport(&out1));
        let (e1, e2) = fragment(&p.clone().with_src(o.0, o.1).forwarded().build(), 64);
        assert_frame_eq(&out2, &e2, "later fragment: the subscriber's pool address");
        assert_frame_eq(&out1, &e1, "first fragment");
    });
}

#[test]
fn fragments_inbound_in_order_and_out_of_order() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        // in order
        let r = frag_datagram(reply(&p, o));
        let (f1, f2) = fragment(&r.build(), 64);
        let (e1, e2) = fragment(&r.clone().with_dst(sub(1), 40000).forwarded().build(), 64);
        let out1 = env.expect_verdict(Side::Outside, &f1, XDP_REDIRECT, "first fragment in");
        assert_frame_eq(&out1, &e1, "first fragment in");
        let before = env.stats();
        let out2 = env.expect_verdict(Side::Outside, &f2, XDP_REDIRECT, "second fragment in");
        assert_frame_eq(&out2, &e2, "second fragment in: the first one's inside address");
        env.assert_counters(
            &before,
            &[("rx_outside", 1), ("fragments_in", 1), ("redirected", 1)],
            "second fragment in",
        );
        // out of order: the later fragment is held for the daemon until the first is seen
        let mut r2 = r.clone();
        r2.ident = 0x7777;
        let (g1, g2) = fragment(&r2.build(), 64);
        let (h1, h2) = fragment(&r2.clone().with_dst(sub(1), 40000).forwarded().build(), 64);
        let before = env.stats();
        env.expect_verdict(Side::Outside, &g2, XDP_DROP, "later fragment before its first");
        env.assert_counters(&before, &[("rx_outside", 1), ("fragments_held", 1)], "later fragment held");
        let out = env.expect_verdict(Side::Outside, &g1, XDP_REDIRECT, "its first fragment");
        assert_frame_eq(&out, &h1, "first fragment after a held one");
        let out =
            env.expect_verdict(Side::Outside, &g2, XDP_REDIRECT, "the held fragment again (re-injected)");
        assert_frame_eq(&out, &h2, "re-injected later fragment");
    });
}

/// Hairpinned fragments are not supported: dropped as `fragment`, no state for the sender.
#[test]
fn fragments_hairpinned_drop() {
    with_env(&cfg(), |env| {
        let a = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "A out");
        let p = frag_datagram(Pkt::udp(sub(2), 41000, a.0, a.1));
        for (what, f) in
            [("first fragment", fragment(&p.build(), 64).0), ("later fragment", fragment(&p.build(), 64).1)]
        {
            let before = env.stats();
            env.expect_verdict(Side::Inside, &f, XDP_DROP, what);
            env.assert_counters(&before, &[("rx_inside", 1), ("fragment", 1)], what);
        }
        assert!(env.subscriber(sub(2)).is_none(), "expected no state for the hairpinning sender");
    });
}

// =============================================================================================
// 10. ICMP errors crossing the NAT (RFC 5508)
// =============================================================================================

/// A remote's port unreachable about our UDP packet: the quoted packet's source becomes the
/// inside endpoint again (with its IP and UDP checksums), the outer destination the
/// subscriber; the ICMP checksum follows. Quote complete.
#[test]
fn icmp_error_in_about_udp() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"query");
        let o = xlate_out(env, &p, None, "UDP out");
        let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 548);
        let as_inside = ip_bytes(&p.clone().forwarded().build(), 548);
        let err = Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent);
        let before = env.stats();
        let out = env.expect_verdict(Side::Outside, &err.build(), XDP_REDIRECT, "port unreachable in");
        let exp = Pkt::icmp_err(SERVER, sub(1), 3, 3, [0; 4], &as_inside).forwarded().build();
        assert_frame_eq(&out, &exp, "ICMP error translated to the subscriber");
        assert_csums(&out, "ICMP error in");
        env.assert_counters(
            &before,
            &[("rx_outside", 1), ("icmp_errors_in", 1), ("redirected", 1)],
            "ICMP error in",
        );
        assert_eq!(env.sessions().len(), 1, "expected an ICMP error to create no session");
    });
}

/// A router's time exceeded about a TCP SYN, quoting only the IP header and 8 bytes (the
/// TCP checksum is not in the quote).
#[test]
fn icmp_error_in_about_tcp_short_quote() {
    with_env(&cfg(), |env| {
        let p = Pkt::tcp(sub(1), 40001, SERVER, 443, SYN);
        let o = xlate_out(env, &p, None, "SYN out");
        let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 28);
        let as_inside = ip_bytes(&p.clone().forwarded().build(), 28);
        let err = Pkt::icmp_err(SERVER2, o.0, 11, 0, [0; 4], &sent);
        let out = env.expect_verdict(Side::Outside, &err.build(), XDP_REDIRECT, "time exceeded in");
        let exp = Pkt::icmp_err(SERVER2, sub(1), 11, 0, [0; 4], &as_inside).forwarded().build();
        assert_frame_eq(&out, &exp, "time exceeded translated");
        assert_csums(&out, "time exceeded in");
    });
}

#[test]
fn icmp_error_in_about_echo() {
    with_env(&cfg(), |env| {
        let p = Pkt::echo_request(sub(1), SERVER, 0x3131);
        let o = xlate_out(env, &p, None, "echo request out");
        let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 548);
        let as_inside = ip_bytes(&p.clone().forwarded().build(), 548);
        let err = Pkt::icmp_err(SERVER2, o.0, 3, 1, [0; 4], &sent);
        let out = env.expect_verdict(Side::Outside, &err.build(), XDP_REDIRECT, "host unreachable in");
        let exp = Pkt::icmp_err(SERVER2, sub(1), 3, 1, [0; 4], &as_inside).forwarded().build();
        assert_frame_eq(&out, &exp, "host unreachable about an echo, translated");
        assert_csums(&out, "host unreachable in");
    });
}

/// A subscriber's port unreachable about a packet natrix delivered to it: the quoted
/// destination becomes the outside endpoint, the outer source the pool address.
#[test]
fn icmp_error_out_from_a_subscriber() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        let r = reply(&p, o);
        xlate_in(env, &r, (sub(1), 40000), "reply in");
        let received = ip_bytes(&r.clone().with_dst(sub(1), 40000).forwarded().build(), 548);
        let as_sent = ip_bytes(&r.clone().forwarded().build(), 548);
        let err = Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &received);
        let before = env.stats();
        let out = env.expect_verdict(Side::Inside, &err.build(), XDP_REDIRECT, "port unreachable out");
        let mut exp = Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &as_sent).forwarded();
        exp.src = o.0;
        assert_frame_eq(&out, &exp.build(), "ICMP error from the subscriber, translated");
        assert_csums(&out, "ICMP error out");
        env.assert_counters(
            &before,
            &[("rx_inside", 1), ("icmp_errors_out", 1), ("redirected", 1)],
            "ICMP error out",
        );
    });
}

// =============================================================================================
// 11. MTU towards the inside (RFC 4787 REQ-13)
// =============================================================================================

/// Too big for in0 (MTU lowered to 1280) with DF: natrix answers the remote itself with
/// "fragmentation needed" from the pool address, quoting the packet as the remote sent it.
/// Without DF the packet is translated and handed to the kernel, which fragments it.
#[test]
fn inbound_too_big_for_the_inside_link() {
    with_env(&cfg(), |env| {
        env.ip(&["link", "set", IN_IF, "mtu", "1280"]);
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        let big = reply(&p, o).payload(&[0x44; 1300]);
        let f = big.build();
        let before = env.stats();
        let out = env.expect_verdict(Side::Outside, &f, XDP_REDIRECT, "1328-byte reply with DF");
        let exp = icmp_error_about(&f, o.0, 3, 4, 1280, ip_ident(&out));
        assert_frame_eq(&out, &exp, "fragmentation needed (MTU 1280) to the remote");
        assert_csums(&out, "fragmentation needed");
        env.assert_counters(
            &before,
            &[("rx_outside", 1), ("mtu_exceeded", 1), ("icmp_sent", 1)],
            "DF too big",
        );

        let mut nodf = big.clone();
        nodf.df = false;
        let before = env.stats();
        let out = env.expect_verdict(Side::Outside, &nodf.build(), XDP_PASS, "1328-byte reply without DF");
        assert_frame_eq(
            &out,
            &nodf.clone().with_dst(sub(1), 40000).build(),
            "translated for the kernel to fragment",
        );
        assert_csums(&out, "too big without DF");
        env.assert_counters(
            &before,
            &[("rx_outside", 1), ("translated_in", 1), ("pass_fib_other", 1)],
            "no DF",
        );
    });
}

// =============================================================================================
// 12. Exclusions, static forwards, port class, rate limit
// =============================================================================================

/// RFC 6888 REQ-6: destinations in [[exclude]] are routed untranslated (by XDP).
#[test]
fn excluded_destination_is_routed_untranslated() {
    with_env(&cfg().raw("[[exclude]]\nprefix = \"198.51.100.3/32\""), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER2, 53);
        let before = env.stats();
        let out = env.expect_verdict(Side::Inside, &p.build(), XDP_REDIRECT, "to an excluded destination");
        assert_frame_eq(&out, &p.clone().forwarded().build(), "routed as is (TTL - 1, new MACs)");
        env.assert_counters(
            &before,
            &[("rx_inside", 1), ("pass_excluded", 1), ("redirected", 1)],
            "excluded",
        );
        env.assert_no_state("excluded destination");
        xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "other destinations still translated");
    });
}

/// A static forward: open to anyone whatever the filtering, used by the inside endpoint's
/// own outbound traffic, never expired.
#[test]
fn static_forward() {
    let c = short_timeouts()
        .set("nat", "filtering", "\"address-and-port-dependent\"")
        .raw("[[forward]]\nproto = \"udp\"\noutside = \"203.0.113.16:5353\"\ninside = \"100.64.0.2:53\"");
    with_env(&c, |env| {
        let t0 = Instant::now();
        let w = env.port_word(0, UDP, 5353);
        assert_eq!(port_state(w), PORT_STATIC, "expected 203.0.113.16:5353/udp STATIC, word {w:#x}");
        let m = env.mapping(sub(1), 53, UDP).expect("expected the static mapping");
        assert_eq!(m.flags & MF_STATIC, MF_STATIC, "expected the mapping flagged static");
        xlate_in(env, &Pkt::udp(SERVER, 1111, POOL0, 5353), (sub(1), 53), "unsolicited, to the forward");
        xlate_out(
            env,
            &Pkt::udp(sub(1), 53, SERVER, 1111),
            Some((POOL0, 5353)),
            "the answer uses the forward",
        );
        assert_eq!(env.mappings().len(), 1, "expected no dynamic mapping");
        sleep_until(t0, Duration::from_millis(1300));
        let r = env.sweep();
        assert_eq!(
            (r.sessions_expired, r.mappings_released),
            (1, 0),
            "expected the session expired, not the forward"
        );
        assert!(env.mapping(sub(1), 53, UDP).is_some(), "expected the static mapping kept");
        assert_eq!(port_state(env.port_word(0, UDP, 5353)), PORT_STATIC, "expected the port still STATIC");
        xlate_in(env, &Pkt::udp(SERVER2, 2222, POOL0, 5353), (sub(1), 53), "another remote, after expiry");
    });
}

/// RFC 4787 REQ-3 (port_class, on by default): an inside port below 1024 gets an outside
/// port below 1024, of the same parity; higher ones stay in the subscriber's blocks.
#[test]
fn port_class_keeps_low_ports_low() {
    with_env(&cfg(), |env| {
        for (inp, tcp) in [(123u16, false), (53, false), (80, true), (443, true), (1023, false)] {
            let p =
                if tcp { Pkt::tcp(sub(1), inp, SERVER, 80, SYN) } else { Pkt::udp(sub(1), inp, SERVER, 123) };
            let o = xlate_out(env, &p, None, "low inside port");
            assert!(
                (1..1024).contains(&o.1),
                "expected outside port {} below 1024 for inside port {inp}",
                o.1
            );
            assert_eq!(o.1 % 2, inp % 2, "expected outside port {} with the parity of {inp}", o.1);
        }
        let o = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "high inside port");
        assert!(o.1 >= 1024, "expected outside port {} from the blocks for inside port 40000", o.1);
        check_allocation(env, "low and high ports");
    });
}

#[test]
fn port_class_off_uses_blocks_for_low_ports() {
    with_env(&cfg().set("nat", "port_class", "false"), |env| {
        let o = xlate_out(env, &Pkt::udp(sub(1), 123, SERVER, 123), None, "low inside port, port_class off");
        assert!(o.1 >= 1024, "expected outside port {} from the blocks with port_class off", o.1);
        check_allocation(env, "port_class off");
    });
}

/// Subscriber 1 holds only a low-port mapping (port class: not counted in any block). Its
/// entry must survive sweeps while that mapping lives, and its next mapping must be on the
/// same pool address (paired pooling, RFC 4787 REQ-2).
#[test]
fn low_port_only_subscriber_keeps_its_address() {
    with_env(&cfg(), |env| {
        xlate_out(env, &Pkt::udp(sub(2), 40000, SERVER, 53), None, "subscriber 2 on address #0");
        let lo = xlate_out(env, &Pkt::udp(sub(1), 123, SERVER, 123), None, "subscriber 1, low port only");
        env.sweep();
        env.sweep();
        assert!(
            env.subscriber(sub(1)).is_some(),
            "expected subscriber 1 kept while its mapping {lo:?} lives (sweeps removed it)"
        );
        let hi = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "subscriber 1, high port");
        assert_eq!(
            hi.0, lo.0,
            "paired pooling: expected every mapping of subscriber 1 on {}, got {}",
            lo.0, hi.0
        );
    });
}

/// RFC 6888 REQ-5: at most max_new_mappings_per_sec new mappings per subscriber; existing
/// mappings are not affected; tokens come back with time.
#[test]
fn new_mapping_rate_limit() {
    with_env(&no_icmp().set("nat", "max_new_mappings_per_sec", "5"), |env| {
        let flows: Vec<(Pkt, Ep)> = (0..5u16)
            .map(|i| {
                let p = Pkt::udp(sub(1), 40000 + i, SERVER, 53);
                let o = xlate_out(env, &p, None, "within the rate");
                (p, o)
            })
            .collect();
        expect_refused(
            env,
            &Pkt::udp(sub(1), 40010, SERVER, 53),
            "rate_limited",
            "sixth new mapping in a second",
        );
        for (p, o) in &flows {
            xlate_out(env, p, Some(*o), "existing mapping while rate limited");
        }
        xlate_out(env, &Pkt::udp(sub(2), 40000, SERVER, 53), None, "another subscriber is not limited");
        sleep(Duration::from_millis(450));
        xlate_out(env, &Pkt::udp(sub(1), 40010, SERVER, 53), None, "after tokens came back");
    });
}

// =============================================================================================
// 13. ICMP errors: validation, options, no state, hairpinning (RFC 5508)
// =============================================================================================

/// An ICMP error from `from` about the outbound packet `p` that natrix sent from outside
/// endpoint `o`, quoting at most `max` bytes of it: expected translated to the subscriber,
/// the quote restored to `p` as the subscriber sent it (TTL - 1, as it left), every checksum
/// right. Returns the output frame.
fn expect_error_in(
    env: &Env,
    from: Ipv4Addr,
    p: &Pkt,
    o: Ep,
    tc: (u8, u8),
    max: usize,
    what: &str,
) -> Vec<u8> {
    let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), max);
    let as_inside = ip_bytes(&p.clone().forwarded().build(), max);
    let err = Pkt::icmp_err(from, o.0, tc.0, tc.1, [0; 4], &sent);
    let out = env.expect_verdict(Side::Outside, &err.build(), XDP_REDIRECT, what);
    let exp = Pkt::icmp_err(from, p.src, tc.0, tc.1, [0; 4], &as_inside).forwarded().build();
    assert_frame_eq(&out, &exp, what);
    assert_csums(&out, what);
    assert_quote_csums(&out, what);
    out
}

/// RFC 5508 REQ-3: an inbound ICMP error whose ICMP checksum is wrong is dropped
/// (`icmp_bad_checksum`) and changes nothing: a wrong checksum field, and a byte of the
/// quote changed after the checksum was computed (the checksum covers the whole message,
/// odd length included). The same for an error from a subscriber.
#[test]
fn icmp_error_bad_icmp_checksum_dropped() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"query");
        let o = xlate_out(env, &p, None, "UDP out");
        let r = reply(&p, o);
        xlate_in(env, &r, (sub(1), 40000), "reply in");
        let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 548);
        let good = Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent).build();
        assert!(l4_csum_ok(&good), "test setup: expected the unmodified error to verify");
        let mut bad_field = good.clone();
        let x = l4_off(&bad_field) + 2;
        bad_field[x] ^= 0x01;
        let mut bad_quote = good.clone();
        let last = ETH_LEN + ip_tot_len(&bad_quote) - 1;
        assert_eq!((last - l4_off(&bad_quote)) % 2, 0, "test setup: expected an odd-length ICMP message");
        bad_quote[last] ^= 0x40;
        let received = ip_bytes(&r.clone().with_dst(sub(1), 40000).forwarded().build(), 548);
        let mut bad_out = Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &received).build();
        let x = l4_off(&bad_out) + 3;
        bad_out[x] ^= 0x80;
        for (what, side, f) in [
            ("inbound error, ICMP checksum field wrong", Side::Outside, bad_field),
            ("inbound error, a quoted byte changed after the checksum", Side::Outside, bad_quote),
            ("error from the subscriber, ICMP checksum field wrong", Side::Inside, bad_out),
        ] {
            assert!(ip_csum_ok(&f), "{what}: test setup: expected a valid outer IP checksum");
            assert!(!l4_csum_ok(&f), "{what}: test setup: expected a wrong ICMP checksum");
            let snap = env.snapshot();
            let before = env.stats();
            env.expect_verdict(side, &f, XDP_DROP, what);
            let rx = if side == Side::Inside { "rx_inside" } else { "rx_outside" };
            env.assert_counters(&before, &[(rx, 1), ("icmp_bad_checksum", 1)], what);
            env.assert_unchanged(&snap, what);
        }
        // the intact error still goes through: the drops were for the checksum alone
        expect_error_in(env, SERVER, &p, o, (3, 3), 548, "the same error, checksum right");
    });
}

/// RFC 5508 REQ-3: the ICMP checksum is right but the embedded IP header's is not
/// (`icmp_bad_checksum`), also when the corrupted byte is in the embedded IP options.
#[test]
fn icmp_error_bad_embedded_ip_checksum_dropped() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        let rr = [0x07, 0x07, 0x04, 0, 0, 0, 0, 0x00]; // record route, one slot; EOL
        let po = Pkt::udp(sub(1), 40002, SERVER, 53).ip_options(&rr);
        let oo = xlate_out(env, &po, None, "UDP out with IP options");
        let mut q1 = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 548);
        q1[10] ^= 0x10; // the checksum field itself
        let mut q2 = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 548);
        q2[8] = 7; // TTL changed, checksum left as it was
        let mut q3 = ip_bytes(&po.clone().with_src(oo.0, oo.1).forwarded().build(), 548);
        assert_eq!(q3[0], 0x47, "test setup: expected an embedded IHL of 7");
        q3[23] = 0x04; // inside the options (covered by the header checksum)
        for (what, dst, q) in [
            ("embedded IP checksum field wrong", o.0, q1),
            ("embedded TTL changed after the checksum", o.0, q2),
            ("embedded IP option byte changed after the checksum", oo.0, q3),
        ] {
            let f = Pkt::icmp_err(SERVER2, dst, 3, 3, [0; 4], &q).build();
            assert!(l4_csum_ok(&f), "{what}: test setup: expected a right ICMP checksum");
            assert!(!ip_csum_ok(&quote_frame(&f)), "{what}: test setup: expected a wrong embedded checksum");
            let snap = env.snapshot();
            let before = env.stats();
            env.expect_verdict(Side::Outside, &f, XDP_DROP, what);
            env.assert_counters(&before, &[("rx_outside", 1), ("icmp_bad_checksum", 1)], what);
            env.assert_unchanged(&snap, what);
        }
    });
}

/// RFC 5508 REQ-3: embedded IP options are walked over: with IHL 6 (NOPs, EOL) and IHL 7
/// (record route), the embedded UDP ports sit after the options, and the embedded source
/// address and port, the embedded IP and UDP checksums, the ICMP checksum and the outer
/// destination are all translated; with the whole packet quoted and with only the IP
/// header and 8 bytes.
#[test]
fn icmp_error_embedded_ip_options_walked() {
    with_env(&cfg(), |env| {
        let rows: [(&str, &[u8], u16); 2] = [
            ("IHL 6, NOP NOP NOP EOL", &[0x01, 0x01, 0x01, 0x00], 40000),
            ("IHL 7, record route", &[0x07, 0x07, 0x04, 0, 0, 0, 0, 0x00], 40002),
        ];
        for (what, opts, port) in rows {
            let p = Pkt::udp(sub(1), port, SERVER, 53).ip_options(opts).payload(b"query with options");
            assert_eq!(ihl(&p.build()), 20 + opts.len(), "{what}: test setup");
            let o = xlate_out(env, &p, None, &format!("{what}: UDP out"));
            for (max, tc) in [(548, (3, 3)), (20 + opts.len() + 8, (11, 0))] {
                let w = format!("{what}: error {}/{} quoting {max} bytes", tc.0, tc.1);
                let before = env.stats();
                let out = expect_error_in(env, SERVER2, &p, o, tc, max, &w);
                let q = quote_frame(&out);
                assert_eq!(ihl(&q), 20 + opts.len(), "{w}: expected the embedded IHL kept");
                assert_eq!(
                    (src_ip(&q), sport(&q), dst_ip(&q), dport(&q)),
                    (sub(1), port, SERVER, 53),
                    "{w}: expected the embedded source restored to the inside endpoint"
                );
                env.assert_counters(
                    &before,
                    &[("rx_outside", 1), ("icmp_errors_in", 1), ("redirected", 1)],
                    &w,
                );
            }
        }
    });
}

/// RFC 5508 REQ-4: an inbound error about an outside endpoint no mapping holds is dropped
/// (`no_mapping`) and creates nothing: with no state at all, and next to a UDP mapping
/// (another port, another protocol on its port, a source that is no pool address).
#[test]
fn icmp_error_without_mapping_dropped() {
    with_env(&cfg(), |env| {
        let quotes: Vec<(&str, Pkt)> = vec![
            ("UDP", Pkt::udp(POOL0, 40000, SERVER, 53)),
            ("TCP SYN", Pkt::tcp(POOL0, 40000, SERVER, 80, SYN)),
            ("echo request", Pkt::echo_request(POOL0, SERVER, 40000)),
        ];
        for (what, q) in &quotes {
            let what = format!("time exceeded about a {what} packet from an unmapped {POOL0}:40000");
            let f =
                Pkt::icmp_err(SERVER2, POOL0, 11, 0, [0; 4], &ip_bytes(&q.clone().forwarded().build(), 548));
            let before = env.stats();
            env.expect_verdict(Side::Outside, &f.build(), XDP_DROP, &what);
            env.assert_counters(&before, &[("rx_outside", 1), ("no_mapping", 1)], &what);
            env.assert_no_state(&what);
        }
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        let other_port = if o.1 == env.cfg.pool.port_hi { o.1 - 1 } else { o.1 + 1 };
        let rows: Vec<(&str, Pkt)> = vec![
            ("another port of the mapped address", p.clone().with_src(o.0, other_port)),
            ("TCP on the UDP mapping's port", Pkt::tcp(sub(1), 40000, SERVER, 53, SYN).with_src(o.0, o.1)),
            ("echo with the UDP mapping's port as id", Pkt::echo_request(o.0, SERVER, o.1)),
            ("a quote whose source is no pool address", p.clone().with_src(SERVER2, o.1)),
        ];
        for (what, q) in &rows {
            let f =
                Pkt::icmp_err(SERVER2, o.0, 11, 0, [0; 4], &ip_bytes(&q.clone().forwarded().build(), 548));
            let snap = env.snapshot();
            let before = env.stats();
            env.expect_verdict(Side::Outside, &f.build(), XDP_DROP, what);
            env.assert_counters(&before, &[("rx_outside", 1), ("no_mapping", 1)], what);
            env.assert_unchanged(&snap, what);
        }
    });
}

/// RFC 5508 REQ-6 (and RFC 5382 REQ-9, RFC 4787 REQ-12): ICMP errors, inbound and from
/// subscribers, never create, refresh or delete state: every session's timer and TCP state
/// (a UDP session, a TCP session in syn_out and one established, an echo session) and every
/// mapping stay as they were. Timeouts of 2 s (refresh slack 0.23 s) and a pause of 0.5 s
/// make a refresh visible, which the outbound packets at the end prove.
#[test]
fn icmp_error_never_changes_state() {
    let c = cfg().set("timeouts", "udp", "\"2s\"").set("timeouts", "icmp", "\"2s\"").set(
        "timeouts",
        "tcp_transitory",
        "\"2s\"",
    );
    with_env(&c, |env| {
        let udp = Pkt::udp(sub(1), 40000, SERVER, 53);
        let syn = Pkt::tcp(sub(1), 40001, SERVER, 443, SYN);
        let ping = Pkt::echo_request(sub(1), SERVER, 0x0777);
        let ou = xlate_out(env, &udp, None, "UDP out");
        let ot = xlate_out(env, &syn, None, "SYN out");
        let oe = xlate_out(env, &ping, None, "echo request out");
        let (me, srv, oest) = tcp_established(env, 40003);
        let data = Pkt::tcp(me.0, me.1, srv.0, srv.1, PSH | ACK).payload(b"GET /");
        xlate_out(env, &data, Some(oest), "data out on the established connection");
        let r = reply(&udp, ou);
        xlate_in(env, &r, (sub(1), 40000), "UDP reply in");
        assert_state(env, (sub(1), 40001), (SERVER, 443), ST_SYN_OUT, "before the errors");
        let snap = env.snapshot();
        let t_udp = env.session(sub(1), 40000, SERVER, 53, UDP).expect("UDP session").expire;
        let t_syn = env.session(sub(1), 40001, SERVER, 443, TCP).expect("TCP session").expire;
        let t_echo = env.session(sub(1), 0x0777, SERVER, 0, ICMP).expect("echo session").expire;
        sleep(Duration::from_millis(500));

        let before = env.stats();
        expect_error_in(env, SERVER, &udp, ou, (3, 3), 548, "port unreachable about UDP");
        expect_error_in(env, SERVER2, &syn, ot, (11, 0), 28, "time exceeded about the SYN");
        expect_error_in(env, SERVER2, &syn, ot, (3, 1), 548, "host unreachable about the SYN");
        expect_error_in(env, SERVER2, &ping, oe, (3, 1), 548, "host unreachable about the echo");
        expect_error_in(env, SERVER2, &data, oest, (3, 4), 548, "frag needed about the data");
        // a subscriber's error about the reply it got
        let received = ip_bytes(&r.clone().with_dst(sub(1), 40000).forwarded().build(), 548);
        let err = Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &received);
        env.expect_verdict(Side::Inside, &err.build(), XDP_REDIRECT, "port unreachable from the subscriber");
        env.assert_counters(
            &before,
            &[
                ("rx_outside", 5),
                ("rx_inside", 1),
                ("icmp_errors_in", 5),
                ("icmp_errors_out", 1),
                ("redirected", 6),
            ],
            "six ICMP errors",
        );
        env.assert_unchanged(&snap, "after six ICMP errors about existing flows");
        assert_state(env, (sub(1), 40001), (SERVER, 443), ST_SYN_OUT, "after the errors");
        assert_state(env, me, srv, ST_EST, "established, after the errors");

        // the control: outbound packets at the same moment do refresh
        xlate_out(env, &udp, Some(ou), "UDP out again");
        xlate_out(env, &syn, Some(ot), "SYN retransmitted");
        xlate_out(env, &ping, Some(oe), "echo request again");
        for (what, key, old) in [
            ("UDP", (40000u16, 53u16, UDP), t_udp),
            ("TCP syn_out", (40001, 443, TCP), t_syn),
            ("echo", (0x0777, 0, ICMP), t_echo),
        ] {
            let new = env.session(sub(1), key.0, SERVER, key.1, key.2).expect("session").expire;
            assert!(
                new.wrapping_sub(old) as i32 > 0,
                "control: expected an outbound packet 0.5 s later to move the {what} session's expiry \
                 ({old} -> {new}); otherwise this test could not see a refresh"
            );
        }
    });
}

/// RFC 5508 REQ-7: subscriber B sends to A's outside endpoint (hairpinned: A sees B's
/// outside endpoint as source); A answers with port unreachable to B's outside address. The
/// error is translated out (A's side) and in (B's side): it reaches B's inside address on in0
/// from A's pool address, quoting B's packet as B sent it (B's inside source, A's outside
/// destination; TTL - 1 from the hairpin), every checksum right.
#[test]
fn icmp_error_hairpinned() {
    with_env(&cfg(), |env| {
        let a_in = (sub(1), 40000);
        let b_in = (sub(2), 41000);
        let a_out = xlate_out(env, &Pkt::udp(a_in.0, a_in.1, SERVER, 53), None, "A to a server");
        let p = Pkt::udp(b_in.0, b_in.1, a_out.0, a_out.1).payload(b"hello A");
        let out = env.expect_verdict(Side::Inside, &p.build(), XDP_REDIRECT, "B to A's outside endpoint");
        let bm = env.mapping(b_in.0, b_in.1, UDP).expect("expected a mapping for B");
        let b_out = (ip_from_be(bm.out_ip), u16::from_be(bm.out_port));
        let at_a = p.clone().with_src(b_out.0, b_out.1).with_dst(a_in.0, a_in.1).forwarded();
        assert_frame_eq(&out, &at_a.build(), "hairpinned to A");

        let snap = env.snapshot();
        let err = Pkt::icmp_err(a_in.0, b_out.0, 3, 3, [0; 4], &ip_bytes(&at_a.build(), 548));
        let before = env.stats();
        let out = env.expect_verdict(Side::Inside, &err.build(), XDP_REDIRECT, "A's port unreachable to B");
        let mut exp =
            Pkt::icmp_err(a_in.0, b_in.0, 3, 3, [0; 4], &ip_bytes(&p.clone().forwarded().build(), 548))
                .forwarded();
        exp.src = a_out.0;
        assert_frame_eq(&out, &exp.build(), "the hairpinned error, delivered to B");
        assert_csums(&out, "hairpinned error");
        assert_quote_csums(&out, "hairpinned error");
        let q = quote_frame(&out);
        assert_eq!(
            ((src_ip(&q), sport(&q)), (dst_ip(&q), dport(&q))),
            (b_in, a_out),
            "expected the quote to be B's packet as B sent it"
        );
        env.assert_counters(
            &before,
            &[("rx_inside", 1), ("icmp_errors_out", 1), ("icmp_errors_in", 1), ("redirected", 1)],
            "hairpinned ICMP error",
        );
        env.assert_unchanged(&snap, "hairpinned ICMP error");
    });
}

/// RFC 5508 REQ-5: a subscriber's error about an inbound TCP segment natrix delivered: the
/// embedded destination becomes the outside endpoint again and the embedded TCP checksum
/// (when quoted) follows, the outer source becomes the pool address. Full quote, the IP
/// header and 18 bytes (the checksum just inside), and the IP header and 8 bytes (no
/// checksum); a parameter problem keeps its pointer.
#[test]
fn icmp_error_out_about_tcp() {
    with_env(&cfg(), |env| {
        let (me, srv, o) = tcp_established(env, 42010);
        let seg = Pkt::tcp(srv.0, srv.1, o.0, o.1, PSH | ACK).payload(b"HTTP/1.0 200 OK\r\n\r\nbody");
        xlate_in(env, &seg, me, "data segment in");
        let received = seg.clone().with_dst(me.0, me.1).forwarded().build();
        let as_sent = seg.clone().forwarded().build();
        for (max, tc, rest) in [(548, (3, 3), [0; 4]), (38, (3, 2), [0; 4]), (28, (12, 0), [20, 0, 0, 0])] {
            let what = format!("error {}/{} from the subscriber quoting {max} bytes of TCP", tc.0, tc.1);
            let err = Pkt::icmp_err(me.0, srv.0, tc.0, tc.1, rest, &ip_bytes(&received, max));
            let before = env.stats();
            let out = env.expect_verdict(Side::Inside, &err.build(), XDP_REDIRECT, &what);
            let mut exp = Pkt::icmp_err(me.0, srv.0, tc.0, tc.1, rest, &ip_bytes(&as_sent, max)).forwarded();
            exp.src = o.0;
            assert_frame_eq(&out, &exp.build(), &what);
            assert_csums(&out, &what);
            assert_quote_csums(&out, &what);
            let q = quote_frame(&out);
            assert_eq!((dst_ip(&q), dport(&q)), o, "{what}: expected the embedded destination {o:?}");
            if max >= 38 {
                let sent_csum = l4_csum(&as_sent);
                assert_eq!(
                    l4_csum(&q),
                    sent_csum,
                    "{what}: expected the embedded TCP checksum to be the one the server sent"
                );
            }
            env.assert_counters(
                &before,
                &[("rx_inside", 1), ("icmp_errors_out", 1), ("redirected", 1)],
                &what,
            );
        }
    });
}

/// An inbound error quoting only the IP header and 8 bytes of a TCP segment, in a frame with
/// link-layer padding after the IP packet: the embedded TCP checksum is not in the message,
/// so natrix must not "update" the padding where it would be, nor fold that change into the
/// ICMP checksum (which does not cover the padding).
#[test]
fn icmp_error_short_tcp_quote_with_link_padding() {
    with_env(&cfg(), |env| {
        let p = Pkt::tcp(sub(1), 40001, SERVER, 443, SYN);
        let o = xlate_out(env, &p, None, "SYN out");
        let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 28);
        let as_inside = ip_bytes(&p.clone().forwarded().build(), 28);
        let err = Pkt::icmp_err(SERVER2, o.0, 11, 0, [0; 4], &sent).padded(16);
        let out = env.expect_verdict(Side::Outside, &err.build(), XDP_REDIRECT, "padded time exceeded");
        let exp = Pkt::icmp_err(SERVER2, sub(1), 11, 0, [0; 4], &as_inside).forwarded().padded(16).build();
        assert_csums(&out, "padded time exceeded");
        assert_frame_eq(&out, &exp, "padded time exceeded: padding untouched");
        // the same from a subscriber, about the SYN-ACK it got
        let sa = Pkt::tcp(SERVER, 443, o.0, o.1, SYN | ACK);
        xlate_in(env, &sa, (sub(1), 40001), "SYN-ACK in");
        let received = ip_bytes(&sa.clone().with_dst(sub(1), 40001).forwarded().build(), 28);
        let as_sent = ip_bytes(&sa.clone().forwarded().build(), 28);
        let err = Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &received).padded(16);
        let out = env.expect_verdict(Side::Inside, &err.build(), XDP_REDIRECT, "padded port unreachable out");
        let mut exp = Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &as_sent).forwarded().padded(16);
        exp.src = o.0;
        assert_csums(&out, "padded port unreachable out");
        assert_frame_eq(&out, &exp.build(), "padded port unreachable out: padding untouched");
    });
}

// =============================================================================================
// 14. Hold-down, ICMP rate limit, unsolicited inbound (RFC 6888, RFC 5508, RFC 5382)
// =============================================================================================

/// One address, ports 1024-1031, one block of 8, max one block: the whole pool is one
/// subscriber's block.
fn one_block_pool(hold_down: &str) -> Cfg {
    cfg()
        .set("pool", "addresses", "[\"203.0.113.16\"]")
        .set("pool", "ports", "\"1024-1031\"")
        .set("nat", "block_size", "8")
        .set("nat", "max_blocks_per_subscriber", "1")
        .set("timeouts", "udp", "\"1s\"")
        .set("timeouts", "port_hold_down", &format!("\"{hold_down}\""))
}

/// Fills all 8 UDP ports of the one block from subscriber 1 and returns them (sorted).
fn fill_one_block(env: &Env, base: u16) -> Vec<u16> {
    let mut ports: Vec<u16> = (0..8u16)
        .map(|i| xlate_out(env, &Pkt::udp(sub(1), base + i, SERVER, 53), None, "filling the block").1)
        .collect();
    ports.sort();
    assert_eq!(ports, (1024..=1031).collect::<Vec<u16>>(), "expected the 8 flows to take ports 1024-1031");
    ports
}

/// RFC 6888 REQ-8: a released port is held for the whole hold-down. With a hold-down of 1 h,
/// 8 expired UDP mappings leave ports 1024-1031 HELD: no new UDP flow of the subscriber (not
/// even the same inside endpoint again) gets one of them, it is refused with quota_exceeded
/// (and ICMP 3/13); another subscriber finds the pool exhausted. With a hold-down of 1 s the
/// same ports are HELD right after expiry, then handed out again after 1.2 s (claimed by
/// the home walk from hold-down: the daemon frees such words 2 s later).
#[test]
fn held_port_not_reused_before_hold_down() {
    with_env(&one_block_pool("1h"), |env| {
        let t0 = Instant::now();
        let ports = fill_one_block(env, 6000);
        sleep_until(t0, Duration::from_millis(1300));
        let r = env.sweep();
        assert_eq!((r.sessions_expired, r.mappings_released), (8, 8), "expected the 8 flows expired: {r:?}");
        for &port in &ports {
            let w = env.port_word(0, UDP, port);
            assert_eq!(port_state(w), PORT_HELD, "expected port {port}/udp HELD, word {w:#x}");
        }
        let r = env.sweep();
        assert_eq!(r.ports_freed, 0, "expected no port freed within a 1 h hold-down: {r:?}");
        for inp in [6000u16, 6001, 6100, 6101] {
            expect_refused(
                env,
                &Pkt::udp(sub(1), inp, SERVER2, 123),
                "quota_exceeded",
                &format!("UDP from {inp} while every port is held"),
            );
        }
        expect_refused(env, &Pkt::udp(sub(2), 6000, SERVER, 53), "pool_exhausted", "another subscriber");
        assert!(env.mappings().is_empty(), "expected no mapping on a held port");
        for &port in &ports {
            assert_eq!(port_state(env.port_word(0, UDP, port)), PORT_HELD, "expected port {port} still HELD");
        }
    });

    with_env(&one_block_pool("1s"), |env| {
        let t0 = Instant::now();
        let ports = fill_one_block(env, 6000);
        sleep_until(t0, Duration::from_millis(1300));
        let r = env.sweep();
        assert_eq!((r.sessions_expired, r.mappings_released), (8, 8), "expected the 8 flows expired: {r:?}");
        let released = Instant::now(); // the hold-down started at this sweep's second, or before
        expect_refused(env, &Pkt::udp(sub(1), 6100, SERVER, 53), "quota_exceeded", "during the hold-down");
        sleep_until(released, Duration::from_millis(1200));
        // the block is the subscriber's home block: the daemon frees its held words only
        // 2 s after their hold-down, but a new mapping takes one as soon as it is over
        let r = env.sweep();
        assert_eq!(r.ports_freed, 0, "expected no port freed yet: {r:?}");
        let again = fill_one_block(env, 6200);
        assert_eq!(again, ports, "expected the same 8 ports handed out again");
        check_allocation(env, "after the hold-down");
    });
}

/// RFC 5508 REQ-8 / RFC 6888 REQ-11: the ICMP 3/13 natrix sends on quota_exceeded is rate
/// limited (per CPU: the test thread is pinned to one). With icmp_errors_per_sec = 2, a burst
/// of 10 refused packets gets 2 (at most 3) errors back, the rest are dropped; every one is
/// counted quota_exceeded, and icmp_sent + icmp_rate_limited = 10. Tokens come back.
#[test]
fn quota_icmp_is_rate_limited() {
    let c = cfg().set("nat", "icmp_errors_per_sec", "2").set("nat", "block_size", "4").set(
        "nat",
        "max_blocks_per_subscriber",
        "1",
    );
    with_env(&c, |env| {
        pin_to_current_cpu();
        for i in 0..4u16 {
            xlate_out(env, &Pkt::udp(sub(1), 5000 + i, SERVER, 53), None, "within quota");
        }
        let before = env.stats();
        let mut verdicts = Vec::new();
        for i in 0..10u16 {
            let f = Pkt::udp(sub(1), 5100 + i, SERVER, 53).build();
            let (v, out) = env.inside(&f);
            match v {
                XDP_REDIRECT => {
                    let exp = icmp_error_about(
                        &f,
                        GW_IN,
                        3,
                        env.cfg.nat.unreachable_code.code(),
                        0,
                        ip_ident(&out),
                    );
                    assert_frame_eq(&out, &exp, &format!("refused packet {i}: ICMP 3/13"));
                    assert_csums(&out, "ICMP 3/13");
                }
                XDP_DROP => {}
                _ => panic!("refused packet {i}: expected XDP_REDIRECT or XDP_DROP, got {}", verdict_name(v)),
            }
            verdicts.push(v);
        }
        let sent = verdicts.iter().filter(|v| **v == XDP_REDIRECT).count() as u64;
        assert!(
            (2..=3).contains(&sent),
            "expected 2 (at most 3) ICMP errors for a burst of 10 at 2/s, got {sent}: {:?}",
            verdicts.iter().map(|v| verdict_name(*v)).collect::<Vec<_>>()
        );
        assert_eq!(
            &verdicts[..2],
            &[XDP_REDIRECT, XDP_REDIRECT],
            "expected the first two answered (full bucket)"
        );
        env.assert_counters(
            &before,
            &[
                ("rx_inside", 10),
                ("quota_exceeded", 10),
                ("icmp_sent", sent),
                ("icmp_rate_limited", 10 - sent),
            ],
            "a burst of 10 refused packets",
        );
        assert_eq!(env.mappings().len(), 4, "expected no mapping for the refused flows");
        // half a second later one token is back
        sleep(Duration::from_millis(600));
        let f = Pkt::udp(sub(1), 5200, SERVER, 53).build();
        let out = env.expect_verdict(Side::Inside, &f, XDP_REDIRECT, "refused 0.6 s later");
        assert_frame_eq(
            &out,
            &icmp_error_about(&f, GW_IN, 3, env.cfg.nat.unreachable_code.code(), 0, ip_ident(&out)),
            "ICMP 3/13 0.6 s later",
        );
    });
}

/// RFC 5382 REQ-4: an unsolicited inbound SYN is dropped silently, never answered (no RST,
/// no ICMP: the verdict is XDP_DROP, not TX or REDIRECT): without a mapping (`no_mapping`),
/// and with a mapping under address-and-port-dependent or address-dependent filtering from
/// a remote it never contacted (`filtered`). Nothing changes.
#[test]
fn unsolicited_inbound_syn_gets_no_reply() {
    with_env(&cfg(), |env| {
        for (what, p) in [
            ("SYN to an unmapped pool port", Pkt::tcp(SERVER, 5555, POOL0, 40000, SYN)),
            ("SYN to a pool port below the range", Pkt::tcp(SERVER, 5555, POOL0, 22, SYN)),
        ] {
            let before = env.stats();
            env.expect_verdict(Side::Outside, &p.build(), XDP_DROP, what);
            env.assert_counters(&before, &[("rx_outside", 1), ("no_mapping", 1)], what);
            env.assert_no_state(what);
        }
        let o = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "a UDP mapping");
        let before = env.stats();
        let p = Pkt::tcp(SERVER2, 5555, o.0, o.1, SYN);
        env.expect_verdict(Side::Outside, &p.build(), XDP_DROP, "SYN to a UDP mapping's port");
        env.assert_counters(&before, &[("rx_outside", 1), ("no_mapping", 1)], "SYN to a UDP mapping's port");
    });
    for mode in ["address-and-port-dependent", "address-dependent"] {
        with_env(&cfg().set("nat", "filtering", &format!("\"{mode}\"")), |env| {
            let (me, srv, o) = tcp_established(env, 42020);
            xlate_out(env, &Pkt::tcp(me.0, me.1, srv.0, srv.1, ACK), Some(o), "ACK out");
            let mut rows = vec![
                ("SYN from a remote never contacted", Pkt::tcp(SERVER2, 5555, o.0, o.1, SYN)),
                ("SYN from a never-contacted remote, same port", Pkt::tcp(SERVER2, srv.1, o.0, o.1, SYN)),
            ];
            if mode == "address-and-port-dependent" {
                rows.push((
                    "SYN from the contacted address, another port",
                    Pkt::tcp(srv.0, 8080, o.0, o.1, SYN),
                ));
            }
            for (what, p) in rows {
                let what = format!("{mode}: {what}");
                let snap = env.snapshot();
                let before = env.stats();
                env.expect_verdict(Side::Outside, &p.build(), XDP_DROP, &what);
                env.assert_counters(&before, &[("rx_outside", 1), ("filtered", 1)], &what);
                env.assert_unchanged(&snap, &what);
            }
            assert_state(env, me, srv, ST_EST, "the real connection, untouched");
        });
    }
}

/// Under endpoint-independent filtering a mapping is open to any remote, but only a SYN
/// opens a session from outside: a bare ACK (and other non-SYN segments) from a remote the
/// subscriber never talked to is dropped (`filtered`) and creates no session.
#[test]
fn unsolicited_inbound_non_syn_opens_nothing() {
    with_env(&cfg(), |env| {
        let (me, srv, o) = tcp_established(env, 42030);
        for (what, flags) in [("bare ACK", ACK), ("data", PSH | ACK), ("FIN", FIN | ACK), ("no flags", 0)] {
            let p = Pkt::tcp(SERVER2, 5555, o.0, o.1, flags);
            let snap = env.snapshot();
            let before = env.stats();
            env.expect_verdict(Side::Outside, &p.build(), XDP_DROP, what);
            env.assert_counters(&before, &[("rx_outside", 1), ("filtered", 1)], what);
            env.assert_unchanged(&snap, what);
            assert!(
                env.session(me.0, me.1, SERVER2, 5555, TCP).is_none(),
                "{what}: expected no session for the unsolicited remote"
            );
        }
        assert_eq!(env.mapping(me.0, me.1, TCP).map(|m| m.nsess), Some(1), "expected one session only");
        assert_state(env, me, srv, ST_EST, "the real connection, untouched");
    });
}

/// The same for an unsolicited RST (and SYN+RST) from a new remote: only a SYN opens a
/// session inbound, a RST must not open one (it would be delivered to the subscriber and
/// hold the mapping for the transitory timeout).
#[test]
fn unsolicited_inbound_rst_opens_nothing() {
    with_env(&cfg(), |env| {
        let (me, _srv, o) = tcp_established(env, 42031);
        for (what, flags) in [("RST", RST), ("RST+ACK", RST | ACK), ("SYN+RST", SYN | RST)] {
            let p = Pkt::tcp(SERVER2, 5556, o.0, o.1, flags);
            let snap = env.snapshot();
            let before = env.stats();
            env.expect_verdict(Side::Outside, &p.build(), XDP_DROP, what);
            env.assert_counters(&before, &[("rx_outside", 1), ("filtered", 1)], what);
            env.assert_unchanged(&snap, what);
            assert!(env.session(me.0, me.1, SERVER2, 5556, TCP).is_none(), "{what}: expected no session");
        }
    });
}

// =============================================================================================
// 15. The FIB cache (bpf/nx_fwd.h, src/fibwatch.rs)
// =============================================================================================

/// A cache whose answers only a routing change ends (not their age, within a test).
fn fib_cache_cfg() -> Cfg {
    cfg().set("fib_cache", "max_age", "\"10s\"")
}

fn fib_lookups(env: &Env, before: &[u64]) -> u64 {
    env.stats()[stat_idx("fib_lookups")] - before[stat_idx("fib_lookups")]
}

/// Repeated packets are answered from the cache, with frames exactly as the kernel's FIB
/// would have them; outbound and inbound are separate keys; with the kernel's default
/// policy the source is not part of the key (a second subscriber to the same server hits),
/// and a policy rule makes it part of the key again.
#[test]
fn fib_cache_answers_repeats_exactly() {
    with_env(&fib_cache_cfg(), |env| {
        let g = env.wait_fib_gen(0, Some(true), "the watcher's first word");
        let p = Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"cached");
        let before = env.stats();
        let o = xlate_out(env, &p, None, "first packet out");
        assert_eq!(fib_lookups(env, &before), 1, "expected the first packet to ask the kernel's FIB");
        let before = env.stats();
        for i in 0..3 {
            xlate_out(env, &p.clone().payload(&[i; 6]), Some(o), "repeat out (same length)");
        }
        assert_eq!(fib_lookups(env, &before), 0, "expected repeats to be answered by the cache");
        let before = env.stats();
        xlate_in(env, &reply(&p, o), (sub(1), 40000), "first reply in");
        xlate_in(env, &reply(&p, o).payload(b"again"), (sub(1), 40000), "second reply in");
        assert_eq!(fib_lookups(env, &before), 1, "expected one lookup for the inbound direction");
        // another subscriber, same server: same answer, the source is not in the key
        let before = env.stats();
        xlate_out(env, &Pkt::udp(sub(2), 40000, SERVER, 53), None, "second subscriber out");
        assert_eq!(fib_lookups(env, &before), 0, "expected the destination-only key to hit");

        // a policy rule on the source: the watcher keys on the source from now on
        env.ip(&["rule", "add", "from", &sub(3).to_string(), "table", "main", "pref", "100"]);
        let g2 = env.wait_fib_gen(g, Some(false), "after `ip rule add`");
        std::thread::sleep(Duration::from_millis(1300)); // past the watcher's recheck
        assert_eq!(env.fib_gen() & 1, 0, "expected the source in the key while a policy rule exists");
        let before = env.stats();
        xlate_out(env, &p.clone().payload(b"after the rule"), Some(o), "out after the rule");
        xlate_out(env, &Pkt::udp(sub(2), 40000, SERVER, 53), None, "second subscriber again");
        assert_eq!(fib_lookups(env, &before), 2, "expected a lookup per source after the rule");
        assert_ne!(g2, g);
    });
}

/// A neighbour's new MAC and a new route are used from the next packet on: the watcher
/// changes the generation word when netlink reports them.
#[test]
fn fib_cache_follows_neighbour_and_route_changes() {
    with_env(&fib_cache_cfg(), |env| {
        let g = env.wait_fib_gen(0, None, "the watcher's first word");
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "out");
        xlate_out(env, &p, Some(o), "out, cached");

        let new_mac = [0x02, 0, 0, 0, 0x33, 0x44];
        env.ip(&[
            "neigh",
            "replace",
            &SERVER.to_string(),
            "lladdr",
            "02:00:00:00:33:44",
            "dev",
            OUT_IF,
            "nud",
            "permanent",
        ]);
        let g = env.wait_fib_gen(g, None, "after the neighbour's MAC changed");
        let before = env.stats();
        let out = env.expect_verdict(Side::Inside, &p.build(), XDP_REDIRECT, "out after the MAC change");
        let mut exp = p.clone().with_src(o.0, o.1).forwarded();
        exp.dmac = new_mac;
        assert_frame_eq(&out, &exp.build(), "out to the neighbour's new MAC");
        assert_eq!(fib_lookups(env, &before), 1, "expected the stale answer to be asked again");

        // the server's address now routed via SERVER2
        env.ip(&["route", "add", &format!("{SERVER}/32"), "via", &SERVER2.to_string(), "dev", OUT_IF]);
        env.wait_fib_gen(g, None, "after the route was added");
        let out = env.expect_verdict(Side::Inside, &p.build(), XDP_REDIRECT, "out after the route change");
        let mut exp = p.clone().with_src(o.0, o.1).forwarded();
        exp.dmac = mac_of(SERVER2);
        assert_frame_eq(&out, &exp.build(), "out via the new next hop");
    });
}

/// The MTU check stays the kernel's: an answer is reused only for packets no longer than
/// the longest the kernel passed with it; a longer one asks again, and a too-big one with
/// DF still goes to the kernel untranslated.
#[test]
fn fib_cache_keeps_the_mtu_check() {
    with_env(&fib_cache_cfg(), |env| {
        env.ip(&["link", "set", OUT_IF, "mtu", "1400"]);
        let p = Pkt::udp(sub(1), 40000, SERVER, 53).payload(&[1; 100]);
        let o = xlate_out(env, &p, None, "small out");
        let before = env.stats();
        xlate_out(env, &p.clone().payload(&[2; 1300]), Some(o), "1328 bytes out");
        assert_eq!(fib_lookups(env, &before), 1, "expected a longer packet to ask the kernel");
        let before = env.stats();
        xlate_out(env, &p.clone().payload(&[3; 1200]), Some(o), "1228 bytes out");
        xlate_out(env, &p.clone().payload(&[4; 1300]), Some(o), "1328 bytes again");
        assert_eq!(fib_lookups(env, &before), 0, "expected lengths already passed to hit");
        let big = p.clone().payload(&[5; 1400]);
        let before = env.stats();
        let out = env.expect_verdict(Side::Inside, &big.build(), XDP_PASS, "1428 bytes with DF");
        assert_frame_eq(&out, &big.build(), "too big with DF: untranslated, for the kernel");
        env.assert_counters(
            &before,
            &[("rx_inside", 1), ("pass_fib_other", 1), ("fib_lookups", 1)],
            "too big with DF",
        );
    });
}

/// Age: with no watcher (no daemon), an answer lives fib_cache.max_age at most.
#[test]
fn fib_cache_answers_age_out_without_a_watcher() {
    with_env(&cfg().set("fib_cache", "max_age", "\"1ms\""), |env| {
        env.stop_fibwatch();
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "out");
        env.ip(&[
            "neigh",
            "replace",
            &SERVER.to_string(),
            "lladdr",
            "02:00:00:00:33:55",
            "dev",
            OUT_IF,
            "nud",
            "permanent",
        ]);
        sleep(Duration::from_millis(30)); // several jiffies at any HZ
        let before = env.stats();
        let out = env.expect_verdict(Side::Inside, &p.build(), XDP_REDIRECT, "out after max_age");
        let mut exp = p.clone().with_src(o.0, o.1).forwarded();
        exp.dmac = [0x02, 0, 0, 0, 0x33, 0x55];
        assert_frame_eq(&out, &exp.build(), "out to the new MAC once the answer aged out");
        assert_eq!(fib_lookups(env, &before), 1, "expected an aged answer to be asked again");
    });
}

/// fib_cache.entries = 0: every packet asks the kernel's FIB.
#[test]
fn fib_cache_off_asks_every_time() {
    with_env(&cfg().set("fib_cache", "entries", "0"), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "out");
        let before = env.stats();
        for _ in 0..3 {
            xlate_out(env, &p, Some(o), "out again");
        }
        xlate_in(env, &reply(&p, o), (sub(1), 40000), "reply in");
        assert_eq!(fib_lookups(env, &before), 4, "expected one lookup per packet with no cache");
    });
}

/// The destination-only key is trusted only while the watcher gives signs of life: a
/// daemon that crashed cannot report a policy rule added after it, so with the last sign
/// more than a second old the source is part of the key again.
#[test]
fn fib_cache_trusts_the_destination_key_only_while_the_watcher_lives() {
    with_env(&fib_cache_cfg(), |env| {
        let g = env.wait_fib_gen(0, Some(true), "the watcher's first word");
        xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "subscriber 1");
        let before = env.stats();
        xlate_out(env, &Pkt::udp(sub(2), 40000, SERVER, 53), None, "subscriber 2");
        assert_eq!(fib_lookups(env, &before), 0, "expected the destination-only key while the watcher lives");

        // as a crashed daemon leaves it: the bit set, the last sign of life 3 s old
        env.stop_fibwatch();
        let w = env.fib_gen_words();
        w.words()[0].store(natrix::fibwatch::next_word(g, true), std::sync::atomic::Ordering::Release);
        let now = natrix::tables::now_tick() as u64;
        w.words()[1].store(now - 180, std::sync::atomic::Ordering::Release);
        let before = env.stats();
        xlate_out(env, &Pkt::udp(sub(1), 40001, SERVER, 53), None, "subscriber 1, no sign of life");
        xlate_out(env, &Pkt::udp(sub(2), 40001, SERVER, 53), None, "subscriber 2, no sign of life");
        assert_eq!(fib_lookups(env, &before), 2, "expected the source in the key without a sign of life");

        w.words()[1].store(natrix::tables::now_tick() as u64, std::sync::atomic::Ordering::Release);
        let before = env.stats();
        xlate_out(env, &Pkt::udp(sub(1), 40002, SERVER, 53), None, "subscriber 1, alive again");
        xlate_out(env, &Pkt::udp(sub(3), 40002, SERVER, 53), None, "subscriber 3, alive again");
        assert_eq!(fib_lookups(env, &before), 1, "expected the destination-only key once alive again");

        // The sign of life is a CLOCK_MONOTONIC tick, the packet path's clock comes from
        // jiffies and may trail it a little: a sign of life from "just ahead" is fresh.
        w.words()[1].store(natrix::tables::now_tick() as u64 + 3, std::sync::atomic::Ordering::Release);
        let before = env.stats();
        xlate_out(env, &Pkt::udp(sub(1), 40003, SERVER, 53), None, "subscriber 1, life sign ahead");
        xlate_out(env, &Pkt::udp(sub(4), 40003, SERVER, 53), None, "subscriber 4, life sign ahead");
        assert_eq!(
            fib_lookups(env, &before),
            0,
            "expected the destination-only key with a sign of life ahead"
        );
    });
}
