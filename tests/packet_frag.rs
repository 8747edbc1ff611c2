// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests of IPv4 fragments (RFC 4787 REQ-14): outbound and inbound, in and out
//! of order, and hairpinned.
//!
//! Each test loads its own private data plane in its own network namespace
//! (tests/common/pkt.rs), feeds frames to `nx_xdp_inside` / `nx_xdp_outside` through
//! BPF_PROG_TEST_RUN and compares every output frame byte for byte with one rebuilt from
//! scratch, besides an independent checksum check; helpers shared with the other
//! `packet_*` tests are in tests/common/packet_helpers.rs.
//! Needs root. Run: `cargo test --release --test packet_frag -- --test-threads=2`.

mod common;

use common::packet_helpers::*;
use common::pkt::*;

// =============================================================================================
// Fragments (RFC 4787 REQ-14)
// =============================================================================================

/// Outbound: the first fragment carries the ports and is translated like a whole datagram
/// (its UDP checksum covers the whole datagram); a later fragment only gets the subscriber's
/// pool address as source. Compared with the fragments of the datagram translated whole.
#[test]
fn fragments_outbound_in_order() {
    with_env(&cfg(), |env| {
        let p = frag_datagram(Pkt::udp(sub(1), 40000, SERVER, 53));
        let (f1, f2) = fragment(&p.build(), 64);
        let out1 = env.expect_verdict(Side::Inside, &f1, XDP_REDIRECT, "first fragment out");
        let o = (src_ip(&out1), sport(&out1));
        let (e1, e2) = fragment(&p.clone().with_src(o.0, o.1).forwarded().build(), 64);
        assert_frame_eq(&out1, &e1, "first fragment out");
        assert!(ip_csum_ok(&out1), "first fragment: expected a valid IP header checksum");
        assert!(
            env.mapping(sub(1), 40000, UDP).is_some(),
            "expected the first fragment to create the mapping"
        );
        let before = env.stats();
        let out2 = env.expect_verdict(Side::Inside, &f2, XDP_REDIRECT, "second fragment out");
        assert_frame_eq(&out2, &e2, "second fragment out: pool address as source");
        env.assert_counters(
            &before,
            &[("rx_inside", 1), ("fragments_out", 1), ("redirected", 1)],
            "second fragment",
        );
    });
}

/// A later fragment seen before any mapping of its subscriber still gets the address every
/// mapping of that subscriber will have (paired pooling).
#[test]
fn fragments_outbound_later_fragment_first() {
    with_env(&cfg(), |env| {
        xlate_out(env, &Pkt::udp(sub(2), 40000, SERVER, 53), None, "another subscriber first");
        env.sweep(); // the next new subscriber goes to another pool address
        let p = frag_datagram(Pkt::udp(sub(1), 40000, SERVER, 53));
        let (f1, f2) = fragment(&p.build(), 64);
        let out2 = env.expect_verdict(Side::Inside, &f2, XDP_REDIRECT, "later fragment first");
        let out1 = env.expect_verdict(Side::Inside, &f1, XDP_REDIRECT, "then the first fragment");
        let o = (src_ip(&out1), sport(&out1));
        let (e1, e2) = fragment(&p.clone().with_src(o.0, o.1).forwarded().build(), 64);
        assert_frame_eq(&out2, &e2, "later fragment: the subscriber's pool address");
        assert_frame_eq(&out1, &e1, "first fragment");
    });
}

#[test]
fn fragments_inbound_in_order_and_out_of_order() {
    with_env(&cfg(), |env| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = xlate_out(env, &p, None, "UDP out");
        // in order
        let r = frag_datagram(reply(&p, o));
        let (f1, f2) = fragment(&r.build(), 64);
        let (e1, e2) = fragment(&r.clone().with_dst(sub(1), 40000).forwarded().build(), 64);
        let out1 = env.expect_verdict(Side::Outside, &f1, XDP_REDIRECT, "first fragment in");
        assert_frame_eq(&out1, &e1, "first fragment in");
        let before = env.stats();
        let out2 = env.expect_verdict(Side::Outside, &f2, XDP_REDIRECT, "second fragment in");
        assert_frame_eq(&out2, &e2, "second fragment in: the first one's inside address");
        env.assert_counters(
            &before,
            &[("rx_outside", 1), ("fragments_in", 1), ("redirected", 1)],
            "second fragment in",
        );
        // out of order: the later fragment is held for the daemon until the first is seen
        let mut r2 = r.clone();
        r2.ident = 0x7777;
        let (g1, g2) = fragment(&r2.build(), 64);
        let (h1, h2) = fragment(&r2.clone().with_dst(sub(1), 40000).forwarded().build(), 64);
        let before = env.stats();
        env.expect_verdict(Side::Outside, &g2, XDP_DROP, "later fragment before its first");
        env.assert_counters(&before, &[("rx_outside", 1), ("fragments_held", 1)], "later fragment held");
        let out = env.expect_verdict(Side::Outside, &g1, XDP_REDIRECT, "its first fragment");
        assert_frame_eq(&out, &h1, "first fragment after a held one");
        let out =
            env.expect_verdict(Side::Outside, &g2, XDP_REDIRECT, "the held fragment again (re-injected)");
        assert_frame_eq(&out, &h2, "re-injected later fragment");
    });
}

/// Hairpinned fragments are not supported: dropped as `fragment`, no state for the sender.
#[test]
fn fragments_hairpinned_drop() {
    with_env(&cfg(), |env| {
        let a = xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "A out");
        let p = frag_datagram(Pkt::udp(sub(2), 41000, a.0, a.1));
        for (what, f) in
            [("first fragment", fragment(&p.build(), 64).0), ("later fragment", fragment(&p.build(), 64).1)]
        {
            let before = env.stats();
            env.expect_verdict(Side::Inside, &f, XDP_DROP, what);
            env.assert_counters(&before, &[("rx_inside", 1), ("fragment", 1)], what);
        }
        assert!(env.subscriber(sub(2)).is_none(), "expected no state for the hairpinning sender");
    });
}
