// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests of what is handed to the kernel (TTL, not for the pool, no neighbour,
//! oversized) and of the FIB cache (bpf/nx_fwd.h, src/fibwatch.rs).
//!
//! Each test loads its own private data plane in its own network namespace
//! (tests/common/pkt.rs), feeds frames to `nx_xdp_inside` / `nx_xdp_outside` through
//! BPF_PROG_TEST_RUN and compares every output frame byte for byte with one rebuilt from
//! scratch, besides an independent checksum check; helpers shared with the other
//! `packet_*` tests are in tests/common/packet_helpers.rs.
//! Needs root. Run: `cargo test --release --test packet_kernel -- --test-threads=2`.

mod common;

use std::net::Ipv4Addr;
use std::thread::sleep;
use std::time::Duration;

use common::packet_helpers::*;
use common::pkt::*;

// =============================================================================================
// Handed to the kernel
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
// The FIB cache (bpf/nx_fwd.h, src/fibwatch.rs)
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
