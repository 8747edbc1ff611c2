// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Fuzzing that checks state: random and mutated frames through both XDP programs
//! (BPF_PROG_TEST_RUN) against a data plane holding live mappings, then the table checker
//! (src/check.rs) must find nothing broken and every mapping made at the start must still
//! be there with the same outside endpoint.
//!
//! Frames are built valid first (tests/common/pkt.rs) and then mutated (bytes flipped,
//! truncated, extended, header fields set at random, the IP checksum sometimes fixed again
//! so the deeper paths are reached): TCP, UDP, ICMP echo, ICMP errors quoting the live
//! mappings, fragments (first and later), and plain random bytes. The PRNG is seeded:
//! NATRIX_FUZZ_SEED=<u64> replays a run, NATRIX_FUZZ_FRAMES=<n> changes its length.
//! Needs root. Run: `cargo test --release --test fuzz_packets -- --nocapture`.

mod common;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Instant;

use common::netns::{end, veth};
use common::pkt::*;
use common::rng::Rng;
use natrix::dataplane::ip_from_be;

#[derive(Clone, Copy, Debug)]
struct Live {
    proto: u8,
    in_ip: Ipv4Addr,
    in_port: u16,
    out_ip: Ipv4Addr,
    out_port: u16,
    remote: Ipv4Addr,
    rport: u16,
}

fn remote(r: &mut Rng) -> Ipv4Addr {
    match r.below(4) {
        0 => SERVER2,
        1 => Ipv4Addr::from(r.next() as u32),
        _ => SERVER,
    }
}

fn subscriber(r: &mut Rng) -> Ipv4Addr {
    match r.below(10) {
        0 => Ipv4Addr::from(r.next() as u32),
        1 => Ipv4Addr::new(100, 64, 0, r.u8()),
        _ => sub(1 + r.below(NSUBS as u64) as u8),
    }
}

fn tcp_flags(r: &mut Rng) -> u8 {
    match r.below(6) {
        0 => SYN,
        1 => SYN | ACK,
        2 => ACK,
        3 => FIN | ACK,
        4 => RST,
        _ => r.u8(),
    }
}

/// A valid frame of some kind, and whether it is for the inside program.
fn base_frame(r: &mut Rng, live: &[Live], pool: &[Ipv4Addr]) -> (Vec<u8>, bool) {
    let l = *r.pick(live);
    let pool_ip = if r.chance(80) { l.out_ip } else { *r.pick(pool) };
    let out_port = if r.chance(70) { l.out_port } else { r.u16() };
    match r.below(12) {
        // outbound: new or existing flows
        0 => (Pkt::udp(subscriber(r), r.u16(), remote(r), r.u16()).build(), true),
        1 => (Pkt::tcp(subscriber(r), r.u16(), remote(r), r.u16(), tcp_flags(r)).build(), true),
        2 => (Pkt::echo_request(subscriber(r), remote(r), r.u16()).build(), true),
        3 => {
            let p = match l.proto {
                TCP => Pkt::tcp(l.in_ip, l.in_port, l.remote, l.rport, tcp_flags(r)),
                UDP => Pkt::udp(l.in_ip, l.in_port, l.remote, l.rport),
                _ => Pkt::echo_request(l.in_ip, l.remote, l.in_port),
            };
            (p.build(), true)
        }
        // inbound to live mappings (or near them)
        4 => (Pkt::udp(remote(r), r.u16(), pool_ip, out_port).build(), false),
        5 => (Pkt::tcp(l.remote, l.rport, pool_ip, out_port, tcp_flags(r)).build(), false),
        6 => (Pkt::echo_reply(remote(r), pool_ip, out_port).build(), false),
        // ICMP errors from outside quoting a live mapping's outbound packet
        7 | 8 => {
            let q = match l.proto {
                TCP => Pkt::tcp(l.out_ip, l.out_port, l.remote, l.rport, ACK),
                UDP => Pkt::udp(l.out_ip, l.out_port, l.remote, l.rport),
                _ => Pkt::echo_request(l.out_ip, l.remote, l.out_port),
            };
            let quote = ip_bytes(&q.build(), if r.chance(50) { 28 } else { 548 });
            let (typ, code) = *r.pick(&[(3u8, 3u8), (3, 4), (3, 1), (11, 0), (12, 0), (3, 13), (5, 1)]);
            let mtu = if r.chance(50) { 1400u16 } else { r.u16() };
            let m = mtu.to_be_bytes();
            (Pkt::icmp_err(l.remote, l.out_ip, typ, code, [0, 0, m[0], m[1]], &quote).build(), false)
        }
        // ICMP errors from inside quoting an inbound packet of a live mapping
        9 => {
            let q = match l.proto {
                TCP => Pkt::tcp(l.remote, l.rport, l.in_ip, l.in_port, ACK),
                UDP => Pkt::udp(l.remote, l.rport, l.in_ip, l.in_port),
                _ => Pkt::echo_reply(l.remote, l.in_ip, l.in_port),
            };
            let quote = ip_bytes(&q.build(), 548);
            (Pkt::icmp_err(l.in_ip, l.remote, 3, 3, [0; 4], &quote).build(), true)
        }
        // fragments, first or later, either direction
        10 => {
            let inside = r.chance(50);
            let big = vec![r.u8(); 64 + r.below(200) as usize];
            let p = if inside {
                Pkt::udp(l.in_ip, l.in_port, l.remote, l.rport).payload(&big)
            } else {
                Pkt::udp(l.remote, l.rport, l.out_ip, l.out_port).payload(&big)
            };
            let mut p = p;
            p.df = false;
            p.ident = r.u16();
            let (a, b) = fragment(&p.build(), 8 * (1 + r.below(6) as usize));
            (if r.chance(50) { a } else { b }, inside)
        }
        // random bytes, usually claiming to be IPv4
        _ => {
            let n = 14 + r.below(120) as usize;
            let mut f: Vec<u8> = (0..n).map(|_| r.u8()).collect();
            if r.chance(80) {
                f[12] = 0x08;
                f[13] = 0x00;
                if n > 14 && r.chance(70) {
                    f[14] = 0x45;
                }
            }
            let inside = r.chance(50);
            (f, inside)
        }
    }
}

fn mutate(r: &mut Rng, f: &mut Vec<u8>) {
    if r.chance(30) {
        return; // valid as built
    }
    for _ in 0..1 + r.below(3) {
        match r.below(9) {
            0 | 1 => {
                // flip a byte, mostly in the headers
                let hi = if r.chance(80) { f.len().min(80) } else { f.len() };
                let i = r.below(hi as u64) as usize;
                f[i] ^= 1 << r.below(8);
            }
            2 => {
                let i = r.below(f.len() as u64) as usize;
                f[i] = r.u8();
            }
            3 => {
                let n = 14 + r.below(f.len() as u64 - 13) as usize;
                f.truncate(n);
            }
            4 => {
                for _ in 0..r.below(64) {
                    f.push(r.u8());
                }
            }
            5 if f.len() > 14 => f[14] = 0x40 | (r.u8() & 0x0f), // IHL
            6 if f.len() > 17 => {
                let v = r.u16().to_be_bytes(); // total length
                f[16] = v[0];
                f[17] = v[1];
            }
            7 if f.len() > 21 => {
                let v = match r.below(3) {
                    0 => 0x2000u16,
                    1 => r.u16() & 0x1fff,
                    _ => r.u16(),
                }; // flags and fragment offset
                f[20..22].copy_from_slice(&v.to_be_bytes());
            }
            _ if f.len() > 23 => {
                let any = r.u8();
                f[23] = *r.pick(&[1u8, 6, 17, 0, 47, any]); // protocol
            }
            _ => {}
        }
    }
    // the IP checksum made right again most of the time: the parser then goes deeper
    if f.len() >= 34 && f[12] == 0x08 && f[13] == 0 && (f[14] & 0x0f) >= 5 && r.chance(75) {
        let h = ((f[14] & 0x0f) as usize * 4).min(f.len() - 14);
        f[24] = 0;
        f[25] = 0;
        let s = csum_fold(csum_add(0, &f[14..14 + h]));
        f[24..26].copy_from_slice(&(!s).to_be_bytes());
    }
}

#[test]
fn mutated_frames_keep_state_consistent() {
    let seed = std::env::var("NATRIX_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| natrix::tables::now_ns() | 1);
    let frames: u64 =
        std::env::var("NATRIX_FUZZ_FRAMES").ok().and_then(|s| s.parse().ok()).unwrap_or(400_000);
    eprintln!("fuzz seed {seed} (NATRIX_FUZZ_SEED={seed} replays it), {frames} frames");
    let cfg = Cfg::default().set("limits", "max_mappings", "16384").set("limits", "max_sessions", "32768");
    with_env(&cfg, |env| {
        let mut r = Rng(seed);
        // 1. live state made by real packets: 5 subscribers x 10 mappings, all protocols
        let mut live = Vec::new();
        for s in 1..=5u8 {
            for i in 0..10u16 {
                let in_ip = sub(s);
                let (proto, in_port, rem, rport) = match i % 3 {
                    0 => (TCP, 40000 + i, SERVER, 443),
                    1 => (UDP, 41000 + i, SERVER2, 53),
                    _ => (ICMP, 42000 + i, SERVER, 0),
                };
                let (out_ip, out_port) = match proto {
                    TCP => {
                        let (oip, op) = env.open(&Pkt::tcp(in_ip, in_port, rem, rport, SYN));
                        let (v, _) = env.outside(&Pkt::tcp(rem, rport, oip, op, SYN | ACK).build());
                        assert_eq!(verdict_name(v), "XDP_REDIRECT");
                        env.inside(&Pkt::tcp(in_ip, in_port, rem, rport, ACK).build());
                        (oip, op)
                    }
                    UDP => {
                        let (oip, op) = env.open(&Pkt::udp(in_ip, in_port, rem, rport));
                        env.outside(&Pkt::udp(rem, rport, oip, op).build());
                        (oip, op)
                    }
                    _ => env.open(&Pkt::echo_request(in_ip, rem, in_port)),
                };
                live.push(Live { proto, in_ip, in_port, out_ip, out_port, remote: rem, rport });
            }
        }
        let before: HashMap<(Ipv4Addr, u16, u8), (Ipv4Addr, u16)> = live
            .iter()
            .map(|l| {
                let m = env.mapping(l.in_ip, l.in_port, l.proto).expect("expected the mapping just made");
                assert_eq!((ip_from_be(m.out_ip), u16::from_be(m.out_port)), (l.out_ip, l.out_port));
                ((l.in_ip, l.in_port, l.proto), (l.out_ip, l.out_port))
            })
            .collect();
        let r0 = natrix::check::check_tables(&env.dp.tables).expect("check");
        assert!(r0.healthy(), "before fuzzing:\n{}", r0.text());
        let pool = env.cfg.pool.addresses.clone();

        // 2. the frames
        let (fd_in, if_in) = env.prog_fd(Side::Inside);
        let (fd_out, if_out) = env.prog_fd(Side::Outside);
        // both programs attached somewhere (generic XDP on a veth pair that carries no
        // traffic): a test run of a program attached nowhere may swap it into the kernel's
        // XDP dispatcher and out again, an RCU wait each (bench/src/gen.rs, park)
        veth(end(&env.ns, "fzp0"), end(&env.ns, "fzp1"));
        let skb = natrix::dataplane::XDP_FLAGS_SKB_MODE;
        let ifi = |n: &str| {
            let c = std::ffi::CString::new(n).expect("a name without NUL");
            // SAFETY: a valid NUL-terminated name; resolved in this thread's network namespace.
            let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
            assert_ne!(i, 0, "expected interface {n}");
            i
        };
        let _park_in =
            natrix::dataplane::xdp_link(fd_in, ifi("fzp0"), skb).expect("expected to park nx_xdp_inside");
        let _park_out =
            natrix::dataplane::xdp_link(fd_out, ifi("fzp1"), skb).expect("expected to park nx_xdp_outside");
        let mut verdicts = [0u64; 5];
        let t0 = Instant::now();
        for _ in 0..frames {
            let (mut f, mut inside) = base_frame(&mut r, &live, &pool);
            mutate(&mut r, &mut f);
            if r.chance(5) {
                inside = !inside;
            }
            if f.len() >= 12 && r.chance(4) {
                for b in &mut f[0..6] {
                    *b = r.u8();
                }
            }
            let (fd, ifx) = if inside { (fd_in, if_in) } else { (fd_out, if_out) };
            let (v, _) = xdp_run_fd(fd, ifx, &f);
            verdicts[(v as usize).min(4)] += 1;
        }
        let el = t0.elapsed();
        eprintln!(
            "fuzz: {frames} frames in {:.2} s ({:.1} us each); verdicts aborted/drop/pass/tx/redirect {verdicts:?}",
            el.as_secs_f64(),
            el.as_secs_f64() * 1e6 / frames as f64
        );
        let st = env.stats();
        assert_eq!(st[stat_idx("internal_error")], 0, "expected no internal_error drop");
        assert_eq!(verdicts[0], 0, "expected no XDP_ABORTED");

        // 3. state: consistent, and the first mappings unchanged
        let rep = natrix::check::check_tables(&env.dp.tables).expect("check");
        eprintln!("after fuzzing: {}", rep.text());
        assert!(rep.healthy(), "seed {seed}: after fuzzing, broken invariants:\n{}", rep.text());
        for ((ip, port, proto), out) in &before {
            let m = env
                .mapping(*ip, *port, *proto)
                .unwrap_or_else(|| panic!("seed {seed}: mapping of {ip}:{port}/{proto} gone after fuzzing"));
            assert_eq!(
                (ip_from_be(m.out_ip), u16::from_be(m.out_port)),
                *out,
                "seed {seed}: mapping of {ip}:{port}/{proto} moved"
            );
        }
    });
}
