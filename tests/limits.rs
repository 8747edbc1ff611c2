// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests (BPF_PROG_TEST_RUN) of who may make state and how much (bpf/nx_limits.h,
//! bpf/nx_fwd.h `nx_for_us`): the per-subscriber session limit both ways, the subscriber
//! prefixes, frames for another host's MAC, and the ICMP code of a refusal. Each checks
//! the verdict, the frame on the wire, the counters and the tables afterwards.
//! Needs root. Run: `cargo test --release --test limits -- --test-threads=2`.

mod common;

use std::net::Ipv4Addr;

use common::pkt::*;
use libbpf_rs::MapCore;

type Ep = (Ipv4Addr, u16);

/// An outbound packet that must be translated and redirected; returns its outside endpoint.
fn xlate_out(env: &Env, p: &Pkt, what: &str) -> Ep {
    let out = env.expect_verdict(Side::Inside, &p.build(), XDP_REDIRECT, what);
    let o = (src_ip(&out), sport(&out));
    assert_frame_eq(&out, &p.clone().with_src(o.0, o.1).forwarded().build(), what);
    assert_csums(&out, what);
    o
}

/// Refused outbound: ICMP destination unreachable with the configured code back to the
/// subscriber, counted under `reason`, and nothing in the tables changed.
fn expect_refused(env: &Env, p: &Pkt, reason: &str, code: u8, what: &str) {
    let f = p.build();
    let tables = env.snapshot();
    let before = env.stats();
    let (v, out) = env.inside(&f);
    assert_eq!(verdict_name(v), "XDP_REDIRECT", "{what}: expected an ICMP error back to the subscriber");
    assert_frame_eq(
        &out,
        &icmp_error_about(&f, GW_IN, 3, code, 0, ip_ident(&out)),
        &format!("{what}: ICMP 3/{code}"),
    );
    assert_csums(&out, what);
    env.assert_counters(&before, &[("rx_inside", 1), (reason, 1), ("icmp_sent", 1)], what);
    env.assert_unchanged(&tables, what);
}

/// The subscriber's session count: its entry's plus its home block word's (nx_limits.h).
fn sub_nsess(env: &Env, ip: Ipv4Addr) -> u32 {
    env.dp
        .tables
        .sub_sessions(u32::from(ip).to_be())
        .expect("expected the counts to be readable")
        .unwrap_or_else(|| panic!("expected a subscriber entry for {ip}"))
}

/// RFC 6888 REQ-4: at `limits.max_sessions_per_subscriber` a subscriber's next outbound
/// session is refused (ICMP 3/1 by default, 3/13 with nat.unreachable_code =
/// "admin-prohibited"), its existing sessions keep translating, another subscriber is not
/// affected, and the count follows the sessions down when they expire.
#[test]
fn outbound_sessions_stop_at_the_subscriber_limit() {
    for (code_key, code) in [(None, 1u8), (Some("\"admin-prohibited\""), 13u8)] {
        let mut c = Cfg::default()
            .set("limits", "max_sessions_per_subscriber", "3")
            .set("timeouts", "udp", "\"1s\"")
            .set("timeouts", "port_hold_down", "\"1s\"");
        if let Some(v) = code_key {
            c = c.set("nat", "unreachable_code", v);
        }
        with_env(&c, |env| {
            let first = Pkt::udp(sub(1), 7000, SERVER, 53);
            let o = xlate_out(env, &first, "first session");
            // the same mapping to two more remotes, then a new mapping: three sessions
            xlate_out(env, &Pkt::udp(sub(1), 7000, SERVER, 54), "second session");
            xlate_out(env, &Pkt::udp(sub(1), 7000, SERVER2, 53), "third session");
            assert_eq!(sub_nsess(env, sub(1)), 3, "the subscriber's count after three sessions");
            expect_refused(
                env,
                &Pkt::udp(sub(1), 7000, SERVER2, 54),
                "session_quota",
                code,
                "fourth, same mapping",
            );
            expect_refused(
                env,
                &Pkt::udp(sub(1), 7001, SERVER, 53),
                "session_quota",
                code,
                "fourth, new port",
            );
            assert_eq!(sub_nsess(env, sub(1)), 3, "a refused session is not counted");
            // existing flows go on, both ways
            let o2 = xlate_out(env, &first, "the first flow again");
            assert_eq!(o2, o, "the first flow keeps its outside endpoint");
            let back = Pkt::udp(SERVER, 53, o.0, o.1).payload(b"reply");
            let out =
                env.expect_verdict(Side::Outside, &back.build(), XDP_REDIRECT, "reply to the first flow");
            assert_frame_eq(
                &out,
                &back.clone().with_dst(sub(1), 7000).forwarded().build(),
                "reply to the first flow",
            );
            // another subscriber has its own share
            xlate_out(env, &Pkt::udp(sub(2), 7000, SERVER, 53), "another subscriber");
            assert_eq!(sub_nsess(env, sub(2)), 1);
            // expiry gives the share back
            std::thread::sleep(std::time::Duration::from_millis(2300));
            env.sweep();
            assert!(env.sessions().is_empty(), "expected every session expired");
            if env.subscriber(sub(1)).is_some() {
                assert_eq!(sub_nsess(env, sub(1)), 0, "the reaper counts expired sessions down");
            }
            xlate_out(env, &Pkt::udp(sub(1), 7002, SERVER, 53), "after expiry, a new session");
        });
    }
}

/// The inbound flood of RFC 6888 REQ-3: with endpoint-independent filtering every new
/// remote endpoint sending to a subscriber's mapping makes a session; at the limit more are
/// dropped silently (no ICMP to the outside), counted session_quota, and the subscriber's
/// own flow and another subscriber's new flows are unaffected.
#[test]
fn inbound_sessions_stop_at_the_subscriber_limit() {
    let c = Cfg::default().set("limits", "max_sessions_per_subscriber", "5");
    with_env(&c, |env| {
        let own = Pkt::udp(sub(1), 7000, SERVER, 53);
        let o = xlate_out(env, &own, "the subscriber's flow");
        for i in 0..4u16 {
            let p = Pkt::udp(SERVER2, 20000 + i, o.0, o.1).payload(b"hello");
            let out = env.expect_verdict(Side::Outside, &p.build(), XDP_REDIRECT, "inbound within the limit");
            assert_frame_eq(
                &out,
                &p.clone().with_dst(sub(1), 7000).forwarded().build(),
                "inbound within the limit",
            );
        }
        assert_eq!(sub_nsess(env, sub(1)), 5);
        let tables = env.snapshot();
        let before = env.stats();
        for i in 4..24u16 {
            let p = Pkt::udp(SERVER2, 20000 + i, o.0, o.1).payload(b"flood");
            let (v, _) = env.outside(&p.build());
            assert_eq!(verdict_name(v), "XDP_DROP", "inbound beyond the limit: dropped, nothing sent back");
        }
        env.assert_counters(&before, &[("rx_outside", 20), ("session_quota", 20)], "the flood");
        env.assert_unchanged(&tables, "the flood");
        // the existing inbound sessions and the subscriber's own flow go on
        let p = Pkt::udp(SERVER2, 20000, o.0, o.1);
        env.expect_verdict(
            Side::Outside,
            &p.build(),
            XDP_REDIRECT,
            "an inbound session made before the flood",
        );
        xlate_out(env, &own, "the subscriber's own flow");
        // another subscriber is untouched by the first one's flood
        for i in 0..5u16 {
            xlate_out(env, &Pkt::udp(sub(2), 8000 + i, SERVER, 53), "another subscriber's new flow");
        }
    });
}

/// Where dynamic mode counts (bpf/nx_limits.h): a subscriber with state only in its home
/// block counts its sessions on the block's word (sessions flagged HOMECNT), not on its
/// entry, whatever the mapping's kind (a port-class one too); once its home walk is full
/// and it takes a second block (MIXED set first) sessions count on the entry, the limit
/// on the sum of both; the reaper gives each count back where it was taken, and the checker
/// agrees at every step.
#[test]
fn the_count_lives_on_the_home_block_until_the_subscriber_has_state_elsewhere() {
    let c = Cfg::default()
        .set("nat", "block_size", "8")
        .set("nat", "home_probe", "1")
        .set("limits", "max_sessions_per_subscriber", "14")
        .set("timeouts", "udp", "\"1s\"")
        .set("timeouts", "port_hold_down", "\"1s\"");
    with_env(&c, |env| {
        let ip = u32::from(sub(1)).to_be();
        let cfg = env.dp.tables.config().expect("config");
        let gid = natrix::tables::home_block(&cfg, ip).expect("a home block");
        let word = || env.block_word(gid);
        let home = || natrix::tables::block_nsess(word());
        let mixed = || word() & natrix::abi::BLOCK_MIXED != 0;
        let entry = || env.subscriber(sub(1)).expect("an entry").nsess;
        let flagged = || {
            env.live_sessions()
                .iter()
                .filter(|(k, s)| k.in_ip == ip && s.flags & natrix::abi::SF_HOMECNT != 0)
                .count() as u32
        };
        let healthy = |what: &str| {
            let r = natrix::check::check_tables(&env.dp.tables).expect("check");
            assert!(r.problems.is_empty(), "{what}: the checker found {:?}", r.problems);
        };
        for (i, rem) in [(SERVER, 53), (SERVER, 54), (SERVER2, 53)].iter().enumerate() {
            xlate_out(env, &Pkt::udp(sub(1), 7000, rem.0, rem.1), &format!("walk session {i}"));
        }
        assert_eq!(word() as u32, ip, "the subscriber owns its home block");
        assert_eq!(
            (home(), entry(), flagged(), mixed()),
            (3, 0, 3, false),
            "three counted on the block word"
        );
        healthy("home-counted");
        // a port-class port's mapping is in the table, but the subscriber has no state
        // outside its home block that its walk must know of: counted there too
        xlate_out(env, &Pkt::udp(sub(1), 123, SERVER, 123), "a port-class session");
        assert_eq!((home(), entry(), flagged(), mixed()), (4, 0, 4, false), "the port-class session");
        // new mappings until the walk finds no room and a second block is taken
        let mut port = 7001;
        while !mixed() {
            assert!(port < 7012, "expected a table mapping within the block's 8 ports");
            xlate_out(env, &Pkt::udp(sub(1), port, SERVER, 53), "a new mapping");
            port += 1;
        }
        let h = home();
        assert_eq!(entry(), 1, "the first session after MIXED counts on the entry");
        assert_eq!(h + 1, 4 + (port - 7001) as u32, "every session counted once");
        assert_eq!(flagged(), h);
        // walk sessions count on the entry too now, the limit on the sum
        while sub_nsess(env, sub(1)) < 14 {
            xlate_out(env, &Pkt::udp(sub(1), 7000, SERVER2, 1000 + port), "up to the limit");
            port += 1;
        }
        assert_eq!((home(), flagged()), (h, h), "the block's count is final once MIXED");
        assert_eq!(entry(), 14 - h);
        expect_refused(env, &Pkt::udp(sub(1), 7000, SERVER, 9), "session_quota", 1, "one beyond the limit");
        healthy("counted in both places");
        // expiry: each count back where it was taken
        std::thread::sleep(std::time::Duration::from_millis(2300));
        env.sweep();
        assert!(env.live_sessions().is_empty(), "expected every session expired");
        assert_eq!(natrix::tables::block_nsess(env.block_word(gid)), 0, "the block word counted down");
        if env.subscriber(sub(1)).is_some() {
            assert_eq!(entry(), 0, "the entry counted down");
        }
        healthy("after expiry");
    });
}

/// A home block word that still counts sessions is never released by the daemon, even
/// with no port counted (the owner must keep it: the reaper gives the count back there).
#[test]
fn a_block_counting_sessions_is_not_released() {
    with_env(&Cfg::default(), |env| {
        let ip = u32::from(sub(1)).to_be();
        let cfg = env.dp.tables.config().expect("config");
        let gid = natrix::tables::home_block(&cfg, ip).expect("a home block");
        // owned, no port counted, two sessions counted: written through the map
        let w = ip as u64 | 2 << natrix::abi::BLOCK_NSESS_SHIFT;
        env.dp.tables.blocks.update(&gid.to_ne_bytes(), &w.to_ne_bytes(), libbpf_rs::MapFlags::ANY).unwrap();
        for _ in 0..3 {
            env.sweep();
        }
        assert_eq!(env.block_word(gid), w, "the block kept its owner and counts");
        // without the sessions' count it is released as an empty owned block (two sweeps)
        env.dp
            .tables
            .blocks
            .update(&gid.to_ne_bytes(), &(ip as u64).to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .unwrap();
        for _ in 0..3 {
            env.sweep();
        }
        assert_eq!(env.block_word(gid), 0, "an empty owned block counting nothing is released");
    });
}

/// Deterministic mode keeps the count per subscriber index (nx_det_nsess).
#[test]
fn deterministic_sessions_stop_at_the_subscriber_limit() {
    let c = Cfg::default()
        .set("nat", "mode", "\"deterministic\"")
        .set("nat", "deterministic_subscribers", "\"100.64.0.0/24\"")
        .set("limits", "max_sessions_per_subscriber", "2");
    with_env(&c, |env| {
        xlate_out(env, &Pkt::udp(sub(1), 7000, SERVER, 53), "first");
        xlate_out(env, &Pkt::udp(sub(1), 7001, SERVER, 53), "second");
        expect_refused(env, &Pkt::udp(sub(1), 7002, SERVER, 53), "session_quota", 1, "third");
        xlate_out(env, &Pkt::udp(sub(2), 7000, SERVER, 53), "another subscriber");
        let idx = u32::from(sub(1)) - u32::from(Ipv4Addr::new(100, 64, 0, 0));
        let v =
            env.dp.tables.det_nsess.lookup(&idx.to_ne_bytes(), libbpf_rs::MapFlags::ANY).unwrap().unwrap();
        assert_eq!(u32::from_ne_bytes(v[..4].try_into().unwrap()), 2, "nx_det_nsess of subscriber 1");
    });
}

/// nat.subscribers: a source outside the prefixes makes nothing and goes nowhere, whatever
/// it sends: a new flow, an ICMP error quoting a live mapping, a later fragment.
#[test]
fn sources_outside_the_subscriber_prefixes_make_no_state() {
    let c = Cfg::default().set("nat", "subscribers", "[\"100.64.0.0/29\"]");
    with_env(&c, |env| {
        let outsider = Ipv4Addr::new(100, 64, 0, 77); // on in0's subnet, not a subscriber
        for p in [
            Pkt::udp(outsider, 5000, SERVER, 53),
            Pkt::tcp(outsider, 5000, SERVER, 80, SYN),
            Pkt::echo_request(outsider, SERVER, 9),
        ] {
            let before = env.stats();
            let (v, _) = env.inside(&p.build());
            assert_eq!(verdict_name(v), "XDP_DROP", "{}", p.describe());
            env.assert_counters(&before, &[("rx_inside", 1), ("not_subscriber", 1)], &p.describe());
        }
        env.assert_no_state("after the outsider's packets");
        // a subscriber's live mapping, quoted by an outsider's ICMP error
        let o = xlate_out(env, &Pkt::udp(sub(1), 6000, SERVER, 53), "a subscriber's flow");
        let quoted = Pkt::udp(SERVER, 53, o.0, o.1).forwarded().build();
        let err = Pkt::icmp_err(outsider, SERVER, 3, 3, [0; 4], &quoted[14..]);
        let tables = env.snapshot();
        let before = env.stats();
        env.expect_verdict(Side::Inside, &err.build(), XDP_DROP, "an outsider's ICMP error");
        env.assert_counters(&before, &[("rx_inside", 1), ("not_subscriber", 1)], "an outsider's ICMP error");
        // a later fragment from an outsider
        let big = Pkt::udp(outsider, 6000, SERVER, 53).payload(&[7u8; 600]).build();
        let (_, later) = fragment(&big, 200);
        let before = env.stats();
        env.expect_verdict(Side::Inside, &later, XDP_DROP, "an outsider's later fragment");
        env.assert_counters(
            &before,
            &[("rx_inside", 1), ("not_subscriber", 1)],
            "an outsider's later fragment",
        );
        env.assert_unchanged(&tables, "the outsider's packets");
    });
}

/// More prefixes than nx_config holds (8) go to the LPM trie: the same answers.
#[test]
fn many_subscriber_prefixes_use_the_trie() {
    let list: Vec<String> = (0..12).map(|i| format!("\"100.64.{}.0/24\"", i * 2)).collect();
    let c = Cfg::default().set("nat", "subscribers", &format!("[{}]", list.join(", ")));
    with_env(&c, |env| {
        xlate_out(env, &Pkt::udp(sub(1), 5000, SERVER, 53), "100.64.0.2, in the first prefix");
        xlate_out(
            env,
            &Pkt::udp(Ipv4Addr::new(100, 64, 22, 9), 5000, SERVER, 53),
            "100.64.22.9, the twelfth prefix",
        );
        let before = env.stats();
        let p = Pkt::udp(Ipv4Addr::new(100, 64, 1, 9), 5000, SERVER, 53);
        env.expect_verdict(Side::Inside, &p.build(), XDP_DROP, "100.64.1.9, between the prefixes");
        env.assert_counters(&before, &[("rx_inside", 1), ("not_subscriber", 1)], "between the prefixes");
    });
}

/// A unicast frame for another MAC (a switch flooding, promiscuous mode) goes to the kernel
/// untouched on either side; broadcast and a configured virtual MAC are natrix's.
#[test]
fn frames_for_another_host_are_left_alone() {
    let vmac = [0x00, 0x00, 0x5e, 0x00, 0x01, 0x07];
    let c = Cfg::default().set("interfaces", "virtual_macs", "[\"00:00:5e:00:01:07\"]");
    with_env(&c, |env| {
        let other = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
        let mut p = Pkt::udp(sub(1), 5000, SERVER, 53);
        p.dmac = other;
        let f = p.build();
        let before = env.stats();
        let out = env.expect_verdict(Side::Inside, &f, XDP_PASS, "inside, another host's MAC");
        assert_eq!(out, f, "passed to the kernel byte for byte");
        env.assert_counters(&before, &[("rx_inside", 1), ("pass_other_host", 1)], "inside, another MAC");
        env.assert_no_state("after a frame for another host");
        // the same from the outside, to a live mapping
        let o = xlate_out(env, &Pkt::udp(sub(1), 5000, SERVER, 53), "the subscriber's flow");
        let mut q = Pkt::udp(SERVER, 53, o.0, o.1);
        q.dmac = other;
        let f = q.build();
        let tables = env.snapshot();
        let before = env.stats();
        let out = env.expect_verdict(Side::Outside, &f, XDP_PASS, "outside, another host's MAC");
        assert_eq!(out, f, "passed to the kernel byte for byte");
        env.assert_counters(&before, &[("rx_outside", 1), ("pass_other_host", 1)], "outside, another MAC");
        env.assert_unchanged(&tables, "a frame for another host");
        // a virtual MAC (VRRP) is natrix's
        let mut v = Pkt::udp(sub(2), 5000, SERVER, 53);
        v.dmac = vmac;
        let out = env.expect_verdict(Side::Inside, &v.build(), XDP_REDIRECT, "inside, the virtual MAC");
        assert!(env.cfg.pool.addresses.contains(&src_ip(&out)), "translated");
        // to the virtual MAC with the next hop unresolved: translated and passed to the
        // kernel addressed to in0's own MAC, or the kernel would drop it as another host's
        // (and never resolve the next hop)
        let mut u = Pkt::udp(sub(4), 5000, NO_NEIGH_REMOTE, 53);
        u.dmac = vmac;
        let out = env.expect_verdict(Side::Inside, &u.build(), XDP_PASS, "inside, virtual MAC, no neighbour");
        assert_eq!(out[0..6], IN_MAC, "passed to the kernel with in0's own MAC as its destination");
        assert!(env.cfg.pool.addresses.contains(&src_ip(&out)), "translated before the kernel forwards it");
        // broadcast, as before: translated
        let mut b = Pkt::udp(sub(3), 5000, SERVER, 53);
        b.dmac = [0xff; 6];
        env.expect_verdict(Side::Inside, &b.build(), XDP_REDIRECT, "inside, broadcast");
    });
}
