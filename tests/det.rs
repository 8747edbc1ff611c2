// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Deterministic NAT (RFC 7422, bpf/nx_det.h) through BPF_PROG_TEST_RUN: each subscriber's
//! pool address and port range follow from its address; its port words are its mappings.
//! Every expected address, range and first port is computed here from the configuration
//! and the tables' seed (natrix::tables::det_start), independently of the data plane.
//! Needs root. Run: `cargo test --release --test det`.

mod common;

use std::net::Ipv4Addr;
use std::thread::sleep;
use std::time::Duration;

use common::pkt::*;
use natrix::abi::{PORT_NSESS_MAX, PORT_NSESS_SHIFT};
use natrix::dataplane::ip_from_be;
use natrix::tables::det_start;

/// 256 subscribers (100.64.0.0/24) on the 8 pool addresses: 32 to an address, 2016 ports
/// each of 1024-65535.
fn det() -> Cfg {
    Cfg::default().set("nat", "mode", "\"deterministic\"").set(
        "nat",
        "deterministic_subscribers",
        "\"100.64.0.0/24\"",
    )
}

fn short(c: Cfg) -> Cfg {
    c.set("timeouts", "udp", "\"1s\"").set("timeouts", "tcp_transitory", "\"1s\"").set(
        "timeouts",
        "port_hold_down",
        "\"1s\"",
    )
}

type Ep = (Ipv4Addr, u16);

/// The subscriber's pool address and first port, from its address alone.
fn range(env: &Env, ip: Ipv4Addr) -> (u32, u32) {
    let c = env.dp.tables.config().unwrap();
    let i = u32::from(ip) - c.det_base;
    assert!(i < c.det_count, "{ip} is not in the deterministic prefix");
    (i / c.det_per_addr, c.port_lo as u32 + (i % c.det_per_addr) * c.det_ports as u32)
}

/// The outside port an inside endpoint's first mapping gets when nothing of its walk is
/// taken: the start of its walk.
fn first_candidate(env: &Env, ip: Ipv4Addr, pidx: u32, port: u16) -> u32 {
    let c = env.dp.tables.config().unwrap();
    let (_, first) = range(env, ip);
    first + det_start(&c, u32::from_ne_bytes(ip.octets()), pidx, port, first)
}

fn out(env: &Env, p: &Pkt, what: &str) -> Ep {
    let f = env.expect_verdict(Side::Inside, &p.build(), XDP_REDIRECT, what);
    let o = (src_ip(&f), sport(&f));
    assert_frame_eq(&f, &p.clone().with_src(o.0, o.1).forwarded().build(), what);
    assert_csums(&f, what);
    o
}

fn into(env: &Env, p: &Pkt, to: Ep, what: &str) {
    let f = env.expect_verdict(Side::Outside, &p.build(), XDP_REDIRECT, what);
    assert_frame_eq(&f, &p.clone().with_dst(to.0, to.1).forwarded().build(), what);
    assert_csums(&f, what);
}

fn nsess(w: u64) -> u64 {
    (w >> PORT_NSESS_SHIFT) & PORT_NSESS_MAX
}

/// The address and range follow from the subscriber's address; the first port is the
/// keyed hash's candidate (the daemon computes the same one); parity is kept; no entry is
/// made in the mapping table or the subscriber table.
#[test]
fn det_address_and_port_follow_from_the_subscriber() {
    with_env(&det(), |env| {
        for (n, inp) in [(1u8, 40000u16), (2, 40001), (33, 5353), (200, 61000)] {
            let ip = sub(n);
            let (addr, first) = range(env, ip);
            let o = out(env, &Pkt::udp(ip, inp, SERVER, 53), "UDP out");
            assert_eq!(o.0, env.cfg.pool.addresses[addr as usize], "{ip}: pool address by i / 32");
            let p = o.1 as u32;
            assert!((first..first + 2016).contains(&p), "{ip}: port {p} outside its range {first}+2016");
            assert_eq!(p % 2, inp as u32 % 2, "{ip}: parity kept");
            assert_eq!(p, first_candidate(env, ip, P_UDP, inp), "{ip}: the walk's first candidate");
            let w = env.port_word(addr, UDP, o.1);
            assert_eq!(w >> PORT_STATE_SHIFT, PORT_USED, "{ip}: port word USED");
            assert_eq!(nsess(w), 1, "{ip}: one session counted in the word");
        }
        let maps = env.mappings();
        assert_eq!(maps.len(), 4, "the port words are the mappings");
        assert_eq!(
            env.dp.tables.table_counts().unwrap()[natrix::abi::TAB_MAPS],
            0,
            "nothing in the mapping table"
        );
        assert_eq!(env.subscriber_count(), 0, "no subscriber entries");
    });
}

/// Endpoint-independent mapping and filtering on a port word: two remotes share one
/// outside endpoint, a stranger gets in (EIF), each session counted in the word, and the
/// replies are translated back.
#[test]
fn det_eim_eif_and_session_counts() {
    with_env(&det(), |env| {
        let a = Pkt::udp(sub(5), 40000, SERVER, 53);
        let b = Pkt::udp(sub(5), 40000, SERVER2, 123);
        let oa = out(env, &a, "first remote");
        let ob = out(env, &b, "second remote");
        assert_eq!(oa, ob, "one mapping for both remotes");
        let (addr, _) = range(env, sub(5));
        assert_eq!(nsess(env.port_word(addr, UDP, oa.1)), 2, "two sessions");
        into(env, &Pkt::udp(SERVER, 53, oa.0, oa.1), (sub(5), 40000), "reply");
        into(env, &Pkt::udp(Ipv4Addr::new(192, 0, 2, 9), 7, oa.0, oa.1), (sub(5), 40000), "stranger (EIF)");
        assert_eq!(nsess(env.port_word(addr, UDP, oa.1)), 3, "the inbound session counted too");
        let m = env.mapping(sub(5), 40000, UDP).expect("the mapping, read from its word");
        assert_eq!((m.nsess, m.out_port), (3, oa.1.to_be()), "shown as a mapping");
        // a TCP flow of the same inside port is another protocol's word
        let t = out(env, &Pkt::tcp(sub(5), 40000, SERVER, 80, SYN), "TCP SYN");
        assert_eq!(t.0, oa.0, "paired pooling: same address");
        assert_eq!(t.1 as u32, first_candidate(env, sub(5), P_TCP, 40000), "TCP's own candidate");
        // a non-SYN without a mapping opens nothing
        let before = env.stats();
        env.expect_verdict(
            Side::Inside,
            &Pkt::tcp(sub(5), 40002, SERVER, 80, ACK).build(),
            XDP_DROP,
            "bare ACK",
        );
        env.assert_counters(&before, &[("rx_inside", 1), ("tcp_no_syn", 1)], "bare ACK");
    });
}

/// A source outside the deterministic prefix has no range: dropped with its reason.
#[test]
fn det_source_outside_the_prefix_is_dropped() {
    with_env(&det(), |env| {
        let stranger = Ipv4Addr::new(100, 64, 1, 7);
        let before = env.stats();
        env.expect_verdict(Side::Inside, &Pkt::udp(stranger, 4000, SERVER, 53).build(), XDP_DROP, "outside");
        env.assert_counters(&before, &[("rx_inside", 1), ("not_subscriber", 1)], "outside the prefix");
        assert!(env.mappings().is_empty(), "no mapping");
    });
}

/// Inside ports whose walks start at the same pair: the second takes the next pair.
fn colliding_ports(env: &Env, ip: Ipv4Addr, n: usize) -> Vec<u16> {
    let mut seen = std::collections::HashMap::<u32, Vec<u16>>::new();
    for p in (20000u16..30000).step_by(2) {
        let c = first_candidate(env, ip, P_UDP, p);
        let v = seen.entry(c).or_default();
        v.push(p);
        if v.len() == n {
            return v.clone();
        }
    }
    panic!("no {n} inside ports share a candidate");
}

/// Two endpoints whose walks start on the same port: the second walks to the next pair.
/// When the first one's mapping expires, its word stays HELD past the hold-down while the
/// second's walk passes it (freeing it would hide the second mapping), the second keeps
/// its port for new remotes (EIM), and a third endpoint with the same start claims the
/// held word. When the second expires too, both words are freed.
#[test]
fn det_a_held_word_a_live_walk_passes_is_kept_then_reused() {
    with_env(&short(det()), |env| {
        let ip = sub(2);
        let (addr, _) = range(env, ip);
        let ps = colliding_ports(env, ip, 3);
        let c = first_candidate(env, ip, P_UDP, ps[0]) as u16;
        let oa = out(env, &Pkt::udp(ip, ps[0], SERVER, 53), "A");
        let ob = out(env, &Pkt::udp(ip, ps[1], SERVER, 53), "B");
        assert_eq!(oa.1, c, "A on the common candidate");
        assert_eq!(ob.1, c + 2, "B on the next pair of its parity");
        // A expires; B is kept alive by traffic (well inside its 1 s timeout); A's
        // hold-down (1 s, whole seconds) ends
        for _ in 0..20 {
            sleep(Duration::from_millis(300));
            out(env, &Pkt::udp(ip, ps[1], SERVER, 53), "B refreshed");
            env.sweep();
        }
        let wa = env.port_word(addr, UDP, c);
        assert_eq!(wa >> PORT_STATE_SHIFT, PORT_HELD, "A's word on hold-down, then kept: {wa:#x}");
        assert!(env.mapping(ip, ps[0], UDP).is_none(), "A's mapping gone");
        // B is still found through the held word: same port towards a new remote
        let ob2 = out(env, &Pkt::udp(ip, ps[1], SERVER2, 99), "B to a new remote");
        assert_eq!(ob2, ob, "EIM: B's mapping found past the held word");
        // C, starting at the same pair, takes the held word (its hold-down is over)
        let oc = out(env, &Pkt::udp(ip, ps[2], SERVER, 53), "C");
        assert_eq!(oc.1, c, "C claims the held word at its start");
        into(env, &Pkt::udp(SERVER, 53, oc.0, oc.1), (ip, ps[2]), "reply to C");
        into(env, &Pkt::udp(SERVER2, 99, ob.0, ob.1), (ip, ps[1]), "reply to B");
    });
}

/// Hold-down, then free: the last session's expiry puts the word on hold-down, a sweep
/// after the hold-down (and its margin) frees it; the next mapping starts from scratch.
#[test]
fn det_expiry_holds_down_then_frees() {
    with_env(&short(det()), |env| {
        let ip = sub(3);
        let (addr, _) = range(env, ip);
        let o = out(env, &Pkt::udp(ip, 41000, SERVER, 53), "UDP");
        sleep(Duration::from_millis(1300));
        let r = env.sweep();
        assert_eq!((r.sessions_expired, r.mappings_released), (1, 1), "expired: {r:?}");
        assert_eq!(env.port_word(addr, UDP, o.1) >> PORT_STATE_SHIFT, PORT_HELD, "on hold-down");
        let before = env.stats();
        env.expect_verdict(
            Side::Outside,
            &Pkt::udp(SERVER, 53, o.0, o.1).build(),
            XDP_DROP,
            "to a held port",
        );
        env.assert_counters(&before, &[("rx_outside", 1), ("no_mapping", 1)], "held port");
        let mut freed = 0;
        for _ in 0..40 {
            sleep(Duration::from_millis(250));
            freed += env.sweep().ports_freed;
            if freed > 0 {
                break;
            }
        }
        assert_eq!(freed, 1, "freed after hold-down and margin");
        assert_eq!(env.port_word(addr, UDP, o.1), 0, "FREE");
        assert!(env.mappings().is_empty(), "no mapping left");
    });
}

/// The range is the quota, and parity falls back: with 4 ports a subscriber (2 of each
/// parity) and four even inside ports, the first two keep their parity, the next two fall
/// back to the odd ports (found again, answered); a fifth mapping of either parity is
/// refused with ICMP 3/13 and the others are kept.
#[test]
fn det_parity_falls_back_and_a_full_range_refuses_and_keeps_the_rest() {
    let c = det().set("nat", "deterministic_ports", "4");
    with_env(&c, |env| {
        let ip = sub(1);
        let (_, first) = range(env, ip);
        let eps: Vec<(u16, Ep)> = (30000u16..30008)
            .step_by(2)
            .map(|p| (p, out(env, &Pkt::udp(ip, p, SERVER, 53), "even inside port")))
            .collect();
        let mut ports: Vec<u16> = eps.iter().map(|(_, o)| o.1).collect();
        let odd: Vec<u32> = ports.iter().map(|&p| p as u32 & 1).collect();
        assert_eq!(odd, [0, 0, 1, 1], "parity kept while there is room, then the other one");
        ports.sort_unstable();
        assert_eq!(ports, (first..first + 4).map(|p| p as u16).collect::<Vec<_>>(), "the range");
        for (p, o) in &eps {
            assert_eq!(out(env, &Pkt::udp(ip, *p, SERVER2, 9), "EIM"), *o, "found again");
            into(env, &Pkt::udp(SERVER2, 9, o.0, o.1), (ip, *p), "answered");
            // an ICMP error the subscriber sends about that answer: its mapping is found
            // by a lookup that claims nothing (lock-free), past the full first part
            let r = Pkt::udp(SERVER2, 9, o.0, o.1);
            let received = ip_bytes(&r.clone().with_dst(ip, *p).forwarded().build(), 548);
            let err = Pkt::icmp_err(ip, SERVER2, 3, 3, [0; 4], &received);
            let f = env.expect_verdict(Side::Inside, &err.build(), XDP_REDIRECT, "error out");
            let mut exp =
                Pkt::icmp_err(ip, SERVER2, 3, 3, [0; 4], &ip_bytes(&r.forwarded().build(), 548)).forwarded();
            exp.src = o.0;
            assert_frame_eq(&f, &exp.build(), "ICMP error about the answer, translated");
            assert_csums(&f, "error out");
        }
        for p in [30008u16, 30001] {
            let before = env.stats();
            let (v, _) = env.inside(&Pkt::udp(ip, p, SERVER, 53).build());
            assert_eq!(verdict_name(v), "XDP_REDIRECT", "ICMP 3/13 back to the subscriber");
            env.assert_some_counters(&before, &[("quota_exceeded", 1), ("icmp_sent", 1)], "full");
        }
        assert_eq!(env.mappings().len(), 4, "the four mappings kept");
        into(env, &Pkt::udp(SERVER, 53, eps[0].1 .0, eps[0].1 .1), (ip, 30000), "first answered");
    });
}

/// The deletion rule across parities: a word on hold-down that only a fallen-back
/// mapping's walk passes (on the other parity) is kept while that mapping lives, and
/// freed once it is gone. With 4 ports a subscriber: A and B on the two even ports, each
/// at the start of its walk; C (even inside port) falls back to an odd port after walking
/// both even ones. A expires: nothing on its own parity needs its word, C's walk does.
#[test]
fn det_a_held_word_a_fallen_back_walk_passes_is_kept() {
    let c = short(det()).set("nat", "deterministic_ports", "4");
    with_env(&c, |env| {
        let ip = sub(2);
        let (addr, first) = range(env, ip);
        let start = |p: u16| first_candidate(env, ip, P_UDP, p) - first;
        let pa = (20000u16..30000).step_by(2).find(|&p| start(p) == 0).expect("a start at 0");
        let pb = (20000u16..30000).step_by(2).find(|&p| start(p) == 2).expect("a start at 2");
        let pc = (pb + 2..30000).step_by(2).find(|&p| p != pa).expect("a third port");
        let oa = out(env, &Pkt::udp(ip, pa, SERVER, 53), "A");
        let ob = out(env, &Pkt::udp(ip, pb, SERVER, 53), "B");
        let oc = out(env, &Pkt::udp(ip, pc, SERVER, 53), "C");
        assert_eq!((oa.1 as u32, ob.1 as u32), (first, first + 2), "A and B at their starts");
        assert_eq!(oc.1 & 1, 1, "C fell back to an odd port");
        // A expires; B and C are kept alive (well inside their 1 s timeout); A's hold-down
        // and the daemon's margin pass
        for _ in 0..20 {
            sleep(Duration::from_millis(300));
            out(env, &Pkt::udp(ip, pb, SERVER, 53), "B refreshed");
            out(env, &Pkt::udp(ip, pc, SERVER, 53), "C refreshed");
            env.sweep();
        }
        let wa = env.port_word(addr, UDP, oa.1);
        assert_eq!(wa >> PORT_STATE_SHIFT, PORT_HELD, "A's word kept for C's walk: {wa:#x}");
        assert_eq!(out(env, &Pkt::udp(ip, pc, SERVER2, 99), "C to a new remote"), oc, "EIM");
        into(env, &Pkt::udp(SERVER2, 99, oc.0, oc.1), (ip, pc), "reply to C");
        // C expires too: no live walk passes A's word or C's any more
        let mut freed = 0;
        for _ in 0..30 {
            sleep(Duration::from_millis(300));
            out(env, &Pkt::udp(ip, pb, SERVER, 53), "B refreshed");
            freed += env.sweep().ports_freed;
            if freed == 2 {
                break;
            }
        }
        assert_eq!(freed, 2, "A's and C's words freed");
        assert_eq!((env.port_word(addr, UDP, oa.1), env.port_word(addr, UDP, oc.1)), (0, 0));
        assert_eq!(out(env, &Pkt::udp(ip, pb, SERVER2, 9), "B"), ob, "B kept");
    });
}

/// One subscriber to a pool address: a range of the whole 64512 ports. Mappings anywhere in
/// it, offsets beyond 32767 included, are found again and answered.
#[test]
fn det_whole_address_ranges() {
    let c = det().set("nat", "deterministic_subscribers", "\"100.64.0.0/29\"");
    with_env(&c, |env| {
        let ip = sub(3); // 100.64.0.4, subscriber 4: pool address 4, ports 1024-65535
        let (addr, first) = range(env, ip);
        assert_eq!((addr, first), (4, 1024));
        let mut high = 0;
        for inp in (40000u16..40040).step_by(2) {
            let o = out(env, &Pkt::udp(ip, inp, SERVER, 53), "out");
            assert_eq!(o.0, env.cfg.pool.addresses[4], "its own address");
            assert_eq!(o.1 as u32, first_candidate(env, ip, P_UDP, inp), "the walk's candidate");
            high += (o.1 as u32 - first >= 32768) as u32;
            assert_eq!(out(env, &Pkt::udp(ip, inp, SERVER2, 9), "EIM"), o, "found again");
            into(env, &Pkt::udp(SERVER, 53, o.0, o.1), (ip, inp), "reply");
        }
        assert!(high > 0, "no mapping landed in the upper half of the range");
    });
}

/// ICMP errors both ways and hairpinning on deterministic mappings: an inbound error about
/// a datagram natrix sent is translated to the subscriber (the port word names it), an
/// error a subscriber sends about a datagram it received is translated out (its mapping
/// found by the walk), and a subscriber reaches another one through its outside endpoint.
#[test]
fn det_icmp_errors_and_hairpin() {
    with_env(&det(), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"query");
        let o = out(env, &p, "UDP out");
        // inbound error
        let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 548);
        let as_inside = ip_bytes(&p.clone().forwarded().build(), 548);
        let err = Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent);
        let f = env.expect_verdict(Side::Outside, &err.build(), XDP_REDIRECT, "error in");
        let exp = Pkt::icmp_err(SERVER, sub(1), 3, 3, [0; 4], &as_inside).forwarded().build();
        assert_frame_eq(&f, &exp, "ICMP error translated to the subscriber");
        assert_csums(&f, "error in");
        // outbound error about the reply it got
        let r = Pkt::udp(SERVER, 53, o.0, o.1).payload(b"reply");
        into(env, &r, (sub(1), 40000), "reply in");
        let received = ip_bytes(&r.clone().with_dst(sub(1), 40000).forwarded().build(), 548);
        let as_sent = ip_bytes(&r.clone().forwarded().build(), 548);
        let err = Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &received);
        let f = env.expect_verdict(Side::Inside, &err.build(), XDP_REDIRECT, "error out");
        let mut exp = Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &as_sent).forwarded();
        exp.src = o.0;
        assert_frame_eq(&f, &exp.build(), "ICMP error from the subscriber, translated");
        assert_csums(&f, "error out");
        assert_eq!(env.sessions().len(), 1, "one flow, one session; the errors made none");
        // hairpin: sub(2) to sub(1)'s outside endpoint
        let h = Pkt::udp(sub(2), 41000, o.0, o.1).payload(b"hello");
        let f = env.expect_verdict(Side::Inside, &h.build(), XDP_REDIRECT, "hairpin");
        let bm = env.mapping(sub(2), 41000, UDP).expect("sub(2)'s mapping");
        let b_out = (ip_from_be(bm.out_ip), u16::from_be(bm.out_port));
        assert_eq!(b_out.0, env.cfg.pool.addresses[range(env, sub(2)).0 as usize], "its own address");
        assert_frame_eq(
            &f,
            &h.clone().with_src(b_out.0, b_out.1).with_dst(sub(1), 40000).forwarded().build(),
            "hairpinned: sub(2)'s outside source, sub(1)'s inside destination",
        );
        assert_csums(&f, "hairpin");
    });
}

/// Address-dependent filtering keeps a record keyed like a flow to remote port 0: a TCP or
/// UDP packet to port 0 (reserved) is dropped, and counts nothing on the mapping's word.
#[test]
fn det_adf_record_is_not_a_flow() {
    with_env(&det().set("nat", "filtering", "\"address-dependent\""), |env| {
        let o = out(env, &Pkt::udp(sub(4), 40000, SERVER, 53), "UDP out (makes the record)");
        let (addr, _) = range(env, sub(4));
        for _ in 0..3 {
            let before = env.stats();
            env.expect_verdict(
                Side::Inside,
                &Pkt::udp(sub(4), 40000, SERVER, 0).build(),
                XDP_DROP,
                "to port 0",
            );
            env.assert_counters(&before, &[("rx_inside", 1), ("malformed_l4", 1)], "to port 0");
        }
        assert_eq!(nsess(env.port_word(addr, UDP, o.1)), 1, "still one session counted");
        into(
            env,
            &Pkt::udp(SERVER, 99, o.0, o.1),
            (sub(4), 40000),
            "another port of a contacted address (ADF)",
        );
    });
}
