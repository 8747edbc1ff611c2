// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests of sessions: expiry (hold-down, refresh, the packet path's clock, TCP
//! timeouts by state) and the TCP state machine (close, RST, simultaneous open).
//!
//! Each test loads its own private data plane in its own network namespace
//! (tests/common/pkt.rs), feeds frames to `nx_xdp_inside` / `nx_xdp_outside` through
//! BPF_PROG_TEST_RUN and compares every output frame byte for byte with one rebuilt from
//! scratch, besides an independent checksum check; helpers shared with the other
//! `packet_*` tests are in tests/common/packet_helpers.rs.
//! Needs root. Run: `cargo test --release --test packet_session -- --test-threads=2`.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::packet_helpers::*;
use common::pkt::*;

// ---- helpers -------------------------------------------------------------------------------

fn mono_secs() -> u64 {
    natrix::tables::now_ns() / 1_000_000_000
}

// =============================================================================================
// Expiry
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
// TCP state
// =============================================================================================

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
