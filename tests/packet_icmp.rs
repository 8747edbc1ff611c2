// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests of ICMP errors crossing the NAT (RFC 5508): validation, embedded options,
//! no state changed, hairpinning, and the MTU towards the inside (RFC 4787 REQ-13). The
//! plain translation cases (errors in about UDP, TCP and echo, errors out about UDP and
//! TCP) are vectors: tests/vectors/icmp.json, run by tests/packet_vectors.rs.
//!
//! Each test loads its own private data plane in its own network namespace
//! (tests/common/pkt.rs), feeds frames to `nx_xdp_inside` / `nx_xdp_outside` through
//! BPF_PROG_TEST_RUN and compares every output frame byte for byte with one rebuilt from
//! scratch, besides an independent checksum check; helpers shared with the other
//! `packet_*` tests are in tests/common/packet_helpers.rs.
//! Needs root. Run: `cargo test --release --test packet_icmp -- --test-threads=2`.

mod common;

use std::net::Ipv4Addr;
use std::thread::sleep;
use std::time::Duration;

use common::packet_helpers::*;
use common::pkt::*;
use natrix::dataplane::ip_from_be;

// =============================================================================================
// MTU towards the inside (RFC 4787 REQ-13)
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
// ICMP errors: validation, options, no state, hairpinning (RFC 5508)
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
