// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests of translation and the table state it leaves: UDP, TCP and ICMP echo both
//! ways, mapping behaviour (EIM), filtering (EIF, ADF) and hairpinning. The cases that are
//! frames and counters only (checksums, options, padding, inbound without a mapping,
//! filtered, hairpinning off) are vectors: tests/vectors/translate.json and hairpin.json,
//! run by tests/packet_vectors.rs.
//!
//! Each test loads its own private data plane in its own network namespace
//! (tests/common/pkt.rs), feeds frames to `nx_xdp_inside` / `nx_xdp_outside` through
//! BPF_PROG_TEST_RUN and compares every output frame byte for byte with one rebuilt from
//! scratch, besides an independent checksum check; helpers shared with the other
//! `packet_*` tests are in tests/common/packet_helpers.rs.
//! Needs root. Run: `cargo test --release --test packet_translate -- --test-threads=2`.

mod common;

use common::packet_helpers::*;
use common::pkt::*;
use libbpf_rs::{MapCore, MapFlags};
use natrix::dataplane::ip_from_be;
use natrix::skel::types::nx_scratch;

// =============================================================================================
// Each protocol and direction
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

// =============================================================================================
// Hairpinning
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

// =============================================================================================
// The setup predictor
// =============================================================================================

/// The setup predictor (bpf/nx_fast.h, `new_hint` in the per-CPU `nx_scratch`) decides only
/// when a UDP datagram fetches the setup's lines: before its session lookup while new flows
/// are frequent, after a miss otherwise. It climbs by 8 on each outbound packet that opens a
/// flow, falls by 1 on each that finds its session, stops at 200; every frame is translated
/// byte for byte alike, early fetch or not.
#[test]
fn setup_predictor_follows_new_flows_and_leaves_translation_alone() {
    with_env(&cfg(), |env| {
        // this thread is pinned (with_env): the other CPUs' hints stay 0, so the largest is ours
        let hint = || -> u32 {
            let v = env.dp.skel.maps.nx_scratch.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY);
            let off = std::mem::offset_of!(nx_scratch, new_hint);
            v.expect("expected nx_scratch to be readable")
                .expect("expected nx_scratch[0]")
                .iter()
                .map(|b| u32::from_ne_bytes(b[off..off + 4].try_into().unwrap()))
                .max()
                .unwrap_or(0)
        };
        assert_eq!(hint(), 0, "expected the predictor at rest before any packet");
        let mut flows = Vec::new();
        for i in 0..30u16 {
            let p = Pkt::udp(sub(1 + (i % 5) as u8), 41000 + i, SERVER, 53).payload(b"query");
            let before = env.stats();
            let o = xlate_out(env, &p, None, &format!("new UDP flow {i}"));
            env.assert_some_counters(&before, &[("sessions_created", 1)], &format!("new UDP flow {i}"));
            assert_eq!(hint(), (8 * (i as u32 + 1)).min(200), "expected the hint after {} new flows", i + 1);
            flows.push((p, o));
        }
        assert_eq!(hint(), 200, "expected the hint capped at 200 after 30 new flows");
        // established packets, translated as before, bring it down by one each
        for (n, (p, o)) in flows.iter().enumerate() {
            xlate_out(env, &p.clone().payload(b"again"), Some(*o), &format!("established flow {n}"));
        }
        assert_eq!(hint(), 170, "expected 30 established packets to take 30 off");
        // with the hint high, a new flow fetches early and is translated like any other
        let p = Pkt::udp(sub(9), 42000, SERVER, 53).payload(b"early");
        let o = xlate_out(env, &p, None, "new UDP flow, hint high");
        assert_eq!(hint(), 178, "expected a miss to add 8");
        for k in 0..200 {
            xlate_out(env, &p.clone().payload(b"x"), Some(o), &format!("established packet {k}"));
        }
        assert_eq!(hint(), 0, "expected the hint back at rest after 200 established packets");
        // at rest, a new flow fetches after its miss: translated alike
        let q = Pkt::udp(sub(9), 42001, SERVER, 53).payload(b"late");
        let before = env.stats();
        xlate_out(env, &q, None, "new UDP flow, hint at rest");
        env.assert_some_counters(&before, &[("sessions_created", 1)], "new UDP flow, hint at rest");
        assert_eq!(hint(), 8, "expected one miss from rest to give 8");
    });
}
