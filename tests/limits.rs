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

fn sub_nsess(env: &Env, ip: Ipv4Addr) -> u32 {
    env.subscriber(ip).unwrap_or_else(|| panic!("expected a subscriber entry for {ip}")).nsess
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
            if let Some(s) = env.subscriber(sub(1)) {
                assert_eq!(s.nsess, 0, "the reaper counts expired sessions down");
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
