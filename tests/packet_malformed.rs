// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests of malformed and not-for-us frames, one table-driven test per row:
//! the verdict, exactly one reason counter, and no state made or changed.
//!
//! Each test loads its own private data plane in its own network namespace
//! (tests/common/pkt.rs), feeds frames to `nx_xdp_inside` / `nx_xdp_outside` through
//! BPF_PROG_TEST_RUN and compares every output frame byte for byte with one rebuilt from
//! scratch, besides an independent checksum check; helpers shared with the other
//! `packet_*` tests are in tests/common/packet_helpers.rs.
//! Needs root. Run: `cargo test --release --test packet_malformed -- --test-threads=2`.

mod common;

use common::packet_helpers::*;
use common::pkt::*;

// =============================================================================================
// Malformed packets (one test per row)
// =============================================================================================

/// Inside base packets: UDP / TCP / ICMP from subscriber 1 to the server.
fn in_udp() -> Vec<u8> {
    Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"0123456789").build()
}
fn in_tcp() -> Vec<u8> {
    Pkt::tcp(sub(1), 40000, SERVER, 80, SYN).tcp_options(&[]).payload(b"012345").build()
}
fn in_icmp() -> Vec<u8> {
    Pkt::echo_request(sub(1), SERVER, 9).build()
}
/// Outside base packets: to the outside endpoint `o` of an existing UDP mapping (the case
/// opens it first), so that a lax parser would translate them.
fn out_udp(o: Ep) -> Vec<u8> {
    Pkt::udp(SERVER, 53, o.0, o.1).payload(b"0123456789").build()
}
fn out_tcp(o: Ep) -> Vec<u8> {
    Pkt::tcp(SERVER, 53, o.0, o.1, SYN).tcp_options(&[]).payload(b"012345").build()
}
fn out_icmp(o: Ep) -> Vec<u8> {
    Pkt::echo_reply(SERVER, o.0, o.1).build()
}

/// The IP packet natrix sent out for the flow the outside cases open, as an ICMP error
/// from the outside quotes it (source = the outside endpoint `o`).
fn sent_quote(o: Ep) -> Vec<u8> {
    ip_bytes(&Pkt::udp(sub(1), 40000, SERVER, 53).with_src(o.0, o.1).forwarded().build(), 548)
}

fn truncate_l4(mut f: Vec<u8>, l4_bytes: usize) -> Vec<u8> {
    let o = l4_off(&f);
    f.truncate(o + l4_bytes);
    let tot = (f.len() - ETH_LEN) as u16;
    set_tot_len(&mut f, tot);
    f
}
fn set_byte(mut f: Vec<u8>, off: usize, v: u8) -> Vec<u8> {
    f[off] = v;
    f
}
fn ip_byte(f: Vec<u8>, off: usize, v: u8) -> Vec<u8> {
    let mut f = set_byte(f, ETH_LEN + off, v);
    fix_ip_csum(&mut f);
    f
}
fn l4_u16(mut f: Vec<u8>, off: usize, v: u16) -> Vec<u8> {
    let o = l4_off(&f) + off;
    f[o..o + 2].copy_from_slice(&v.to_be_bytes());
    f
}
fn tot_len(mut f: Vec<u8>, delta: i32) -> Vec<u8> {
    let t = (ip_tot_len(&f) as i32 + delta) as u16;
    set_tot_len(&mut f, t);
    f
}
fn arp() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&mac_of(sub(1)));
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac_of(sub(1)));
    f.extend_from_slice(&sub(1).octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&GW_IN.octets());
    f
}
fn ipv6() -> Vec<u8> {
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2(mac_of(sub(1)), IN_MAC)
        .ipv6(
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            64,
        )
        .udp(40000, 53)
        .write(&mut f, b"v6")
        .expect("ipv6");
    f
}

/// Runs one malformed (or not-for-us) packet and checks: the verdict, exactly one reason
/// counter (plus the rx counter), no other counter, a PASSed frame unchanged, and no state
/// created (inside) or no state changed (outside: the case opens one UDP mapping first).
fn malformed_case(name: &str, side: Side, build: fn(Ep) -> Vec<u8>, verdict: u32, counter: &str) {
    let name = name.to_string();
    let counter = counter.to_string();
    with_env(&cfg(), move |env| {
        let o = match side {
            Side::Inside => (POOL0, 40000),
            Side::Outside => xlate_out(env, &Pkt::udp(sub(1), 40000, SERVER, 53), None, "opening a mapping"),
        };
        let (nm, ns) = (env.mappings().len(), env.sessions().len());
        let pkt = build(o);
        let before = env.stats();
        let out = env.expect_verdict(side, &pkt, verdict, &name);
        if verdict == XDP_PASS {
            assert_frame_eq(&out, &pkt, &format!("{name}: the frame passed to the kernel, unchanged"));
        }
        let rx = if side == Side::Inside { "rx_inside" } else { "rx_outside" };
        env.assert_counters(&before, &[(rx, 1), (counter.as_str(), 1)], &name);
        match side {
            Side::Inside => env.assert_no_state(&name),
            Side::Outside => assert_eq!(
                (env.mappings().len(), env.sessions().len()),
                (nm, ns),
                "{name}: expected no mapping or session created"
            ),
        }
    });
}

macro_rules! malformed {
    ($($name:ident: $side:ident, $build:expr, $verdict:ident, $counter:literal;)*) => {$(
        #[test]
        fn $name() {
            malformed_case(stringify!($name), Side::$side, $build, $verdict, $counter);
        }
    )*};
}

malformed! {
    // ---- inside ----
    in_arp_passes: Inside, |_| arp(), XDP_PASS, "pass_not_ipv4";
    in_ipv6_passes: Inside, |_| ipv6(), XDP_PASS, "pass_not_ipv4";
    in_ethernet_header_only: Inside, |_| in_udp()[..ETH_LEN].to_vec(), XDP_DROP, "malformed_ip";
    in_truncated_ip_header: Inside, |_| in_udp()[..ETH_LEN + 10].to_vec(), XDP_DROP, "malformed_ip";
    in_ip_version_6: Inside, |_| ip_byte(in_udp(), 0, 0x65), XDP_DROP, "malformed_ip";
    in_ihl_below_5: Inside, |_| ip_byte(in_udp(), 0, 0x44), XDP_DROP, "malformed_ip";
    in_ihl_beyond_data: Inside, |_| ip_byte(in_udp(), 0, 0x4f), XDP_DROP, "malformed_ip";
    in_tot_len_beyond_frame: Inside, |_| tot_len(in_udp(), 1), XDP_DROP, "malformed_ip";
    in_tot_len_below_header: Inside, |_| { let mut f = in_udp(); set_tot_len(&mut f, 19); f }, XDP_DROP, "malformed_ip";
    in_bad_ip_checksum: Inside, |_| { let mut f = in_udp(); f[ETH_LEN + 10] ^= 0x5a; f }, XDP_DROP, "malformed_ip";
    in_truncated_tcp_header: Inside, |_| truncate_l4(in_tcp(), 12), XDP_DROP, "malformed_l4";
    in_tcp_header_cut_by_tot_len: Inside, |_| tot_len(in_tcp(), -14), XDP_DROP, "malformed_l4";
    in_tcp_doff_below_5: Inside, |_| { let mut f = in_tcp(); let o = l4_off(&f); f[o + 12] = 0x40; f }, XDP_DROP, "malformed_l4";
    in_tcp_doff_beyond_packet: Inside, |_| { let mut f = in_tcp(); let o = l4_off(&f); f[o + 12] = 0xf0; f }, XDP_DROP, "malformed_l4";
    in_truncated_udp_header: Inside, |_| truncate_l4(in_udp(), 4), XDP_DROP, "malformed_l4";
    in_udp_len_below_8: Inside, |_| l4_u16(in_udp(), 4, 7), XDP_DROP, "malformed_l4";
    in_udp_len_beyond_ip_payload: Inside, |_| l4_u16(in_udp(), 4, 19), XDP_DROP, "malformed_l4";
    in_truncated_icmp_header: Inside, |_| truncate_l4(in_icmp(), 4), XDP_DROP, "malformed_l4";
    in_icmp_header_cut_by_tot_len: Inside, |_| tot_len(in_icmp(), -(ip_tot_len(&in_icmp()) as i32 - 24)), XDP_DROP, "malformed_l4";
    in_gre_unsupported: Inside, |_| Pkt::other(sub(1), SERVER, 47).build(), XDP_DROP, "unsupported_proto";
    in_sctp_unsupported: Inside, |_| Pkt::other(sub(1), SERVER, 132).build(), XDP_DROP, "unsupported_proto";
    in_icmp_timestamp_unsupported: Inside, |_| Pkt::icmp(sub(1), SERVER, 13, 0).build(), XDP_DROP, "unsupported_icmp";
    in_icmp_redirect_unsupported: Inside, |_| Pkt::icmp(sub(1), SERVER, 5, 1).build(), XDP_DROP, "unsupported_icmp";
    in_icmp_error_truncated_quote: Inside, |_| Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &delivered_quote()[..20]).build(), XDP_DROP, "icmp_malformed";
    in_icmp_error_about_nothing_delivered: Inside, |_| Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &delivered_quote()).build(), XDP_DROP, "no_mapping";
    // ---- outside ----
    out_arp_passes: Outside, |_| arp(), XDP_PASS, "pass_not_ipv4";
    out_truncated_ip_header: Outside, |o| out_udp(o)[..ETH_LEN + 16].to_vec(), XDP_DROP, "malformed_ip";
    out_ip_version_6: Outside, |o| ip_byte(out_udp(o), 0, 0x65), XDP_DROP, "malformed_ip";
    out_ihl_below_5: Outside, |o| ip_byte(out_udp(o), 0, 0x43), XDP_DROP, "malformed_ip";
    out_tot_len_beyond_frame: Outside, |o| tot_len(out_udp(o), 7), XDP_DROP, "malformed_ip";
    out_bad_ip_checksum: Outside, |o| { let mut f = out_udp(o); f[ETH_LEN + 11] ^= 1; f }, XDP_DROP, "malformed_ip";
    out_truncated_tcp_header: Outside, |o| truncate_l4(out_tcp(o), 19), XDP_DROP, "malformed_l4";
    out_tcp_doff_beyond_packet: Outside, |o| { let mut f = out_tcp(o); let x = l4_off(&f); f[x + 12] = 0x70; f }, XDP_DROP, "malformed_l4";
    out_truncated_udp_header: Outside, |o| truncate_l4(out_udp(o), 7), XDP_DROP, "malformed_l4";
    out_udp_len_below_8: Outside, |o| l4_u16(out_udp(o), 4, 0), XDP_DROP, "malformed_l4";
    out_udp_len_beyond_ip_payload: Outside, |o| l4_u16(out_udp(o), 4, 100), XDP_DROP, "malformed_l4";
    out_truncated_icmp_header: Outside, |o| truncate_l4(out_icmp(o), 6), XDP_DROP, "malformed_l4";
    out_fragment_not_for_pool_passes: Outside, |_| ip_byte(Pkt::udp(SERVER, 53, GW_OUT, 53).build(), 6, 0x20), XDP_PASS, "pass_local";
    out_gre_to_pool_unsupported: Outside, |o| Pkt::other(SERVER, o.0, 47).build(), XDP_DROP, "unsupported_proto";
    out_icmp_timestamp_unsupported: Outside, |o| Pkt::icmp(SERVER, o.0, 13, 0).build(), XDP_DROP, "unsupported_icmp";
    out_icmp_error_truncated_quote: Outside, |o| Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent_quote(o)[..24]).build(), XDP_DROP, "icmp_malformed";
    out_icmp_error_quote_not_ipv4: Outside, |o| { let mut q = sent_quote(o); q[0] = 0x65; Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &q).build() }, XDP_DROP, "icmp_malformed";
    out_icmp_error_bad_icmp_checksum: Outside, |o| { let mut f = Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent_quote(o)).build(); let x = l4_off(&f); f[x + 2] ^= 0x10; f }, XDP_DROP, "icmp_bad_checksum";
    out_icmp_error_bad_quoted_ip_checksum: Outside, |o| { let mut q = sent_quote(o); q[10] ^= 0x10; Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &q).build() }, XDP_DROP, "icmp_bad_checksum";
    out_icmp_error_about_an_icmp_error: Outside, |o| Pkt::icmp_err(SERVER, o.0, 11, 0, [0; 4], &ip_bytes(&Pkt::icmp_err(o.0, SERVER, 3, 3, [0; 4], &sent_quote(o)).build(), 548)).build(), XDP_DROP, "unsupported_icmp";
    out_icmp_error_about_gre: Outside, |o| Pkt::icmp_err(SERVER, o.0, 3, 2, [0; 4], &ip_bytes(&Pkt::other(o.0, SERVER, 47).payload(b"12345678").build(), 548)).build(), XDP_DROP, "unsupported_proto";
    out_icmp_error_about_an_unmapped_port: Outside, |o| Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent_quote((o.0, o.1 ^ 0x40))).build(), XDP_DROP, "no_mapping";
}
