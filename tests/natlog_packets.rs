// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests (BPF_PROG_TEST_RUN) of the NAT event log's data-plane side (bpf/nx_log.h):
//! what each packet leaves in the ring buffer nx_log_rb, read back as the daemon reads it
//! (natlog::source), against what the packet did on the wire and in the tables: block
//! allocations with their time and range, sessions created and deleted (log.sessions, the
//! destination only with log.destinations), refusals as RFC 8158 events, rate-limited, and
//! log.strict with a full log. Needs root. Run: `cargo test --release --test natlog_packets`.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use common::pkt::*;
use natrix::natlog::source::{from_record, tai_to_utc_ns};
use natrix::natlog::{NatEvent, NatEventKind};

/// A collector address: with one the daemon's config turns the data plane's log on
/// (nothing listens in a packet test; the events stay in the ring for the test to read).
const COLLECTOR: &str = "[\"127.0.0.1:4739\"]";

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> u64 {
    natrix::expiry::unix_ms()
}

/// Every event in the ring, oldest first, consumed.
fn drain(env: &Env) -> Vec<NatEvent> {
    let got = Rc::new(RefCell::new(Vec::new()));
    let g = Rc::clone(&got);
    let off = tai_to_utc_ns();
    let mut b = libbpf_rs::RingBufferBuilder::new();
    b.add(&env.dp.skel.maps.nx_log_rb, move |rec: &[u8]| {
        g.borrow_mut().push(from_record(rec, off).expect("expected every record to decode"));
        0
    })
    .expect("expected the event ring to open");
    let rb = b.build().expect("expected the ring buffer");
    rb.consume().expect("expected the ring to be read");
    drop(rb);
    Rc::try_unwrap(got).expect("one owner").into_inner()
}

fn of_kind(ev: &[NatEvent], k: NatEventKind) -> Vec<NatEvent> {
    ev.iter().filter(|e| e.kind == k).cloned().collect()
}

/// A block's allocation is logged by the packet that took it: the subscriber, the pool
/// address and the block's range, which holds the port the packet left with, and a time
/// between just before and just after the packet. nx_block_time holds the same time.
/// Without a collector nothing is logged, but the time is still kept (`natrix lookup`).
#[test]
fn a_new_block_is_logged_with_its_time_and_range() {
    with_env(&Cfg::default().set("log", "ipfix", COLLECTOR), |env| {
        let t0 = now_ms();
        let (o_ip, o_port) = env.open(&Pkt::udp(sub(1), 7000, SERVER, 53));
        let t1 = now_ms();
        let ev = drain(env);
        let alloc = of_kind(&ev, NatEventKind::BlockAlloc);
        assert_eq!(alloc.len(), 1, "one block, one event: {ev:?}");
        let e = &alloc[0];
        assert_eq!((e.inside, e.outside), (sub(1), o_ip), "{e:?}");
        assert!(e.port_start <= o_port && o_port <= e.port_end, "port {o_port} in the block: {e:?}");
        assert_eq!(u32::from(e.port_end - e.port_start) + 1, env.block_size(), "{e:?}");
        assert!(t0 <= e.time_ms && e.time_ms <= t1, "allocated between {t0} and {t1}: {e:?}");
        assert_eq!(ev.len(), 1, "no session events without log.sessions: {ev:?}");
        let gid = env.block_of(env.pool_index(o_ip), o_port);
        let bt = env.dp.tables.block_time(gid).expect("expected nx_block_time to be read");
        let bt_ms = ((bt as i128 + i128::from(tai_to_utc_ns())) / 1_000_000) as u64;
        assert!(bt_ms.abs_diff(e.time_ms) <= 1, "nx_block_time {bt_ms} vs the event's {}", e.time_ms);
        // the subscriber's next flow uses the same block: nothing logged
        env.open(&Pkt::udp(sub(1), 7001, SERVER, 53));
        assert!(drain(env).is_empty(), "no event for a flow in a block held already");
    });
    with_env(&Cfg::default(), |env| {
        let (o_ip, o_port) = env.open(&Pkt::udp(sub(1), 7000, SERVER, 53));
        assert!(drain(env).is_empty(), "no collector: nothing logged");
        let gid = env.block_of(env.pool_index(o_ip), o_port);
        assert_ne!(env.dp.tables.block_time(gid).expect("expected nx_block_time"), 0, "the time is kept");
        assert_eq!(env.stat("log_events"), 0);
    });
}

/// log.sessions: a session's creation is logged by its first packet, its deletion by the
/// reaper; the remote endpoint only with log.destinations.
#[test]
fn sessions_are_logged_only_when_asked() {
    for dest in [false, true] {
        let c = Cfg::default()
            .set("log", "ipfix", COLLECTOR)
            .set("log", "sessions", "true")
            .set("log", "destinations", if dest { "true" } else { "false" })
            .set("timeouts", "udp", "\"1s\"");
        with_env(&c, |env| {
            let (o_ip, o_port) = env.open(&Pkt::udp(sub(1), 7000, SERVER, 53));
            let ev = drain(env);
            let cr = of_kind(&ev, NatEventKind::SessionCreate);
            assert_eq!(cr.len(), 1, "{ev:?}");
            let e = &cr[0];
            assert_eq!(
                (e.inside, e.in_port, e.outside, e.out_port, e.proto),
                (sub(1), 7000, o_ip, o_port, 17)
            );
            assert_eq!(e.remote, dest.then(|| std::net::SocketAddrV4::new(SERVER, 53)), "{e:?}");
            std::thread::sleep(Duration::from_millis(2300));
            env.sweep();
            let ev = drain(env);
            let del = of_kind(&ev, NatEventKind::SessionDelete);
            assert_eq!(del.len(), 1, "the reaper logs the deletion: {ev:?}");
            assert_eq!(
                (del[0].inside, del[0].in_port, del[0].outside, del[0].out_port),
                (sub(1), 7000, o_ip, o_port)
            );
            assert_eq!(del[0].remote.is_some(), dest);
            assert!(del[0].time_ms >= e.time_ms + 1000, "deleted after its timeout: {del:?}");
        });
    }
}

/// A refusal for want of resources is logged as RFC 8158 says what ran out (here the
/// subscriber's block quota, natQuotaExceededEvent 3, with the limit), at most once a
/// second per CPU, while every refusal is counted.
#[test]
fn a_refusal_is_logged_rate_limited() {
    let c = Cfg::default()
        .set("log", "ipfix", COLLECTOR)
        .set("nat", "block_size", "4")
        .set("nat", "max_blocks_per_subscriber", "1")
        .set("nat", "home_probe", "0");
    with_env(&c, |env| {
        for p in 0..4u16 {
            env.open(&Pkt::udp(sub(1), 7000 + p, SERVER, 53));
        }
        drain(env);
        let before = env.stats();
        for p in 4..8u16 {
            let (v, _) = env.inside(&Pkt::udp(sub(1), 7000 + p, SERVER, 53).build());
            assert_eq!(verdict_name(v), "XDP_REDIRECT", "refused with ICMP");
        }
        env.assert_some_counters(&before, &[("quota_exceeded", 4)], "four refusals");
        let ev = drain(env);
        let q = of_kind(&ev, NatEventKind::QuotaExceeded);
        assert_eq!(q.len(), 1, "one event for four refusals within a second: {ev:?}");
        assert_eq!((q[0].inside, q[0].detail, q[0].limit), (sub(1), 3, 1), "{q:?}");
    });
}

/// log.strict: while the log has no room for a new block's event, no block is handed out
/// (log_full, the subscriber told with ICMP, nothing created); without it the block is
/// handed out and the lost event counted.
#[test]
fn strict_refuses_a_block_the_log_cannot_show() {
    for strict in [true, false] {
        let c = Cfg::default()
            .set("log", "ipfix", COLLECTOR)
            .set("log", "sessions", "true")
            .set("log", "buffer_events", "1024")
            .set("log", "strict", if strict { "true" } else { "false" });
        with_env(&c, |env| {
            // fill the 64 KiB log with session events of one subscriber (one block)
            let mut n = 0u32;
            while env.stat("log_lost") == 0 && n < 4000 {
                env.open(&Pkt::udp(sub(1), 7000, SERVER, 1000 + n as u16));
                n += 1;
            }
            assert!(n < 4000, "expected the log to fill");
            let before = env.stats();
            let p = Pkt::udp(sub(2), 7000, SERVER, 53);
            let (v, _) = env.inside(&p.build());
            assert_eq!(verdict_name(v), "XDP_REDIRECT");
            if strict {
                env.assert_some_counters(&before, &[("log_full", 1), ("icmp_sent", 1)], "strict, log full");
                assert!(env.subscriber(sub(2)).is_none(), "no subscriber made");
            } else {
                env.assert_some_counters(&before, &[("translated_out", 1)], "not strict: translated");
                assert!(env.stat("log_lost") > 1, "the block's event counted lost");
            }
            // once the daemon has read the log, blocks are handed out again
            let ev = drain(env);
            assert!(ev.len() > 1000, "the events kept: {}", ev.len());
            env.open(&Pkt::udp(sub(3), 7000, SERVER, 53));
            assert_eq!(of_kind(&drain(env), NatEventKind::BlockAlloc).len(), 1);
        });
    }
}
