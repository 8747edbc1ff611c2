// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests of policy: exclusions, static forwards, the port class, the new-mapping
//! rate limit, port hold-down, the ICMP rate limit and unsolicited inbound traffic
//! (RFC 6888, RFC 5508, RFC 5382).
//!
//! Each test loads its own private data plane in its own network namespace
//! (tests/common/pkt.rs), feeds frames to `nx_xdp_inside` / `nx_xdp_outside` through
//! BPF_PROG_TEST_RUN and compares every output frame byte for byte with one rebuilt from
//! scratch, besides an independent checksum check; helpers shared with the other
//! `packet_*` tests are in tests/common/packet_helpers.rs.
//! Needs root. Run: `cargo test --release --test packet_policy -- --test-threads=2`.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::packet_helpers::*;
use common::pkt::*;

// =============================================================================================
// Exclusions, static forwards, port class, rate limit
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
// Hold-down, ICMP rate limit, unsolicited inbound (RFC 6888, RFC 5508, RFC 5382)
// =============================================================================================

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
