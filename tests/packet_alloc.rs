// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests of port allocation: parity, port blocks and home blocks, the home walk,
//! paired and scattered pooling, subscriber slots, quotas, pool exhaustion, full tables,
//! and concurrent allocation for one subscriber.
//!
//! Each test loads its own private data plane in its own network namespace
//! (tests/common/pkt.rs), feeds frames to `nx_xdp_inside` / `nx_xdp_outside` through
//! BPF_PROG_TEST_RUN and compares every output frame byte for byte with one rebuilt from
//! scratch, besides an independent checksum check; helpers shared with the other
//! `packet_*` tests are in tests/common/packet_helpers.rs.
//! Needs root. Run: `cargo test --release --test packet_alloc -- --test-threads=2`.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Barrier;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::packet_helpers::*;
use common::pkt::*;
use natrix::dataplane::{ip_be, ip_from_be};

// ---- helpers -------------------------------------------------------------------------------

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

/// The table checker (src/check.rs) finds no broken invariant.
fn assert_tables_ok(env: &Env, what: &str) {
    let r = natrix::check::check_tables(&env.dp.tables).expect("expected the checker to read the tables");
    assert!(r.healthy(), "{what}: expected no broken invariant, found:\n{}", r.text());
}

// =============================================================================================
// Allocation
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
        // the slow path claims once more when its first claim is undone (nx_dyn_map): the
        // entry stays BUSY here, so both are undone and the packet is dropped
        env.assert_some_counters(&before, &[("table_busy", 1), ("alloc_retries", 2)], "claims undone");
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
// Concurrency
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
