// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The functions user space mirrors from the data plane (src/tables/layout.rs: the tables' key
//! hash and home buckets, the subscriber table's hash and home slot, the starts of the
//! deterministic and home walks, the home block, the protocol index and port index, whether
//! a port word is a walk mapping) against the data plane's own code: the syscall program
//! `nx_abi_probe` runs the C functions on inputs the test draws at random, and each result
//! must equal the Rust one. Needs root (BPF_PROG_RUN).
//! Run: `cargo test --release --test abi -- --test-threads=2`.

mod common;

use common::rng::Rng;
use libbpf_rs::ProgramInput;
use natrix::abi::{NPROTO, PORTS_PER_ADDR, PORT_USED, PROTO_ICMP, PROTO_TCP, PROTO_UDP, SUB_HASH_K1};
use natrix::config::Config;
use natrix::dataplane::{Dataplane, Persistence};
use natrix::skel::types::{nx_abi_probe, nx_config, nx_map_key, nx_sess_key};
use natrix::tables::{
    det_start, home_block, home_start, is_home_word, map_k0, port_index_pidx, proto_idx, sess_k0, sess_k1,
    set_divisors, sub_home, tab_hash, tab_home,
};

/// Random inputs per run of the comparison.
const ROUNDS: usize = 5000;

/// A geometry the daemon could configure: pool addresses, a port range cut into blocks of
/// an even size of at least 2, deterministic ranges of at least one pair.
fn random_config(r: &mut Rng) -> nx_config {
    let port_lo = (r.below(60_000) as u16).max(1);
    let span = u32::from(u16::MAX - port_lo) + 1;
    let block_size = (2 * (1 + r.below(u64::from(span / 2).min(2048)))) as u16;
    let det_ports = (2 * (1 + r.below(u64::from(span / 2).min(4096)))) as u16;
    let mut cfg = nx_config {
        flags: r.next() as u32 & 0x3f,
        tab_seed: r.next() as u32,
        port_lo,
        port_hi: u16::MAX,
        block_size,
        blocks_per_addr: (span / u32::from(block_size)).max(1) as u16,
        n_addrs: 1 + r.below(4096) as u16,
        det_ports,
        det_per_addr: (span / u32::from(det_ports)).max(1),
        det_count: 0,
        home_probe: r.below(64) as u32,
        ..Default::default()
    };
    set_divisors(&mut cfg);
    cfg
}

fn probe(dp: &Dataplane, p: &mut nx_abi_probe) {
    let mut ctx = bytemuck::bytes_of(p).to_vec();
    let out = dp
        .skel
        .progs
        .nx_abi_probe
        .test_run(ProgramInput { context_in: Some(&mut ctx), ..Default::default() })
        .expect("expected nx_abi_probe to run");
    assert_eq!(out.return_value, 0, "nx_abi_probe's return value");
    *p = bytemuck::pod_read_unaligned(&ctx);
}

fn load() -> Dataplane {
    let cfg = Config::from_toml_str(
        "[interfaces]\ninside = [\"lan0\"]\noutside = [\"wan0\"]\n[pool]\naddresses = [\"203.0.113.1\"]\n",
    )
    .expect("expected the test config to parse");
    Dataplane::load(&cfg, Persistence::Private).expect("expected the data plane to load")
}

#[test]
fn mirrored_functions_match_the_data_plane() {
    let dp = load();
    let seed =
        std::env::var("NATRIX_ABI_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x6e78_6162_6921u64);
    let mut r = Rng(seed);
    let mut walk_words = 0;
    for round in 0..ROUNDS {
        let cfg = random_config(&mut r);
        let pidx = r.below(u64::from(NPROTO)) as u32;
        let sip = r.u32_any();
        let (bs, bpa) = (u32::from(cfg.block_size), u32::from(cfg.blocks_per_addr));
        // half the time a port of sip's home block (nx_word_is_map's interesting case)
        let (addr_idx, port) = match home_block(&cfg, sip) {
            Some(g) if r.below(2) == 0 => {
                (g / bpa, u32::from(cfg.port_lo) + g % bpa * bs + r.below(u64::from(bs)) as u32)
            }
            _ => (r.below(u64::from(cfg.n_addrs)) as u32, r.below(u64::from(PORTS_PER_ADDR)) as u32),
        };
        let walk_port = port as u16;
        let first = u32::from(cfg.port_lo) + r.below(u64::from(u16::MAX - cfg.port_lo)) as u32;
        let protos = [PROTO_TCP, PROTO_UDP, PROTO_ICMP, r.next() as u8];
        let proto = protos[r.below(4) as usize];
        let sk = nx_sess_key {
            in_ip: r.u32_any(),
            rem_ip: r.u32_any(),
            in_port: r.next() as u16,
            rem_port: r.next() as u16,
            proto: r.next() as u8,
            ..Default::default()
        };
        let mk = nx_map_key { in_ip: r.u32_any(), in_port: r.next() as u16, proto: r.next() as u8, pad: 0 };
        let mut p = nx_abi_probe {
            cfg,
            k0: r.next(),
            k1: r.next(),
            h: r.next(),
            nbkt: r.u32_any(),
            nslots: r.u32_any(),
            sip,
            pidx,
            port,
            first,
            addr_idx,
            proto: u32::from(proto),
            sk,
            mk,
            ..Default::default()
        };
        let input = p;
        probe(&dp, &mut p);
        let ctx = format!("round {round} (NATRIX_ABI_SEED={seed}), input {input:?}");
        assert_eq!(p.tab_hash, tab_hash(p.k0, p.k1, cfg.tab_seed), "nx_tab_hash, {ctx}");
        assert_eq!(p.tab_home[0], tab_home(p.h, p.nbkt, false), "nx_tab_home, first, {ctx}");
        assert_eq!(p.tab_home[1], tab_home(p.h, p.nbkt, true), "nx_tab_home, second, {ctx}");
        assert_eq!(p.sub_hash, tab_hash(u64::from(sip), SUB_HASH_K1, cfg.tab_seed), "nx_sub_hash, {ctx}");
        assert_eq!(p.sub_home, sub_home(p.h, p.nslots), "nx_sub_home, {ctx}");
        assert_eq!(p.sess_k0, sess_k0(&sk), "nx_sess_k0, {ctx}");
        assert_eq!(p.sess_k1, sess_k1(&sk), "nx_sess_k1, {ctx}");
        assert_eq!(p.map_k0, map_k0(&mk), "nx_map_k0, {ctx}");
        assert_eq!(p.det_start, det_start(&cfg, sip, pidx, walk_port, first), "nx_det_start, {ctx}");
        assert_eq!(p.home_start, home_start(&cfg, sip, pidx, walk_port, first), "home walk start, {ctx}");
        assert_eq!(p.home_block, home_block(&cfg, sip).map_or(-1, i64::from), "nx_home_block, {ctx}");
        assert_eq!(p.proto_idx, proto_idx(proto), "nx_proto_idx, {ctx}");
        let idx = port_index_pidx(addr_idx, pidx, port);
        assert_eq!(p.port_index as usize, idx, "nx_port_index, {ctx}");
        // a USED word naming sip at that index: a walk mapping exactly when the data plane
        // says the word at that port of that address is one for sip
        let word = natrix::abi::port_word(sip, 1);
        assert_eq!(word >> natrix::abi::PORT_STATE_SHIFT, PORT_USED);
        assert_eq!(p.word_is_map != 0, is_home_word(&cfg, idx, word), "nx_word_is_map, {ctx}");
        walk_words += usize::from(p.word_is_map != 0);
    }
    // the inputs reach both answers of nx_word_is_map
    assert!(walk_words > ROUNDS / 10, "only {walk_words} of {ROUNDS} words were walk mappings");
}

/// The protocol index of every protocol number, and the port index of every protocol at
/// the edges of the port range.
#[test]
fn protocol_and_port_indexes_match_the_data_plane() {
    let dp = load();
    for proto in 0..=255u8 {
        let mut p = nx_abi_probe { proto: u32::from(proto), ..Default::default() };
        probe(&dp, &mut p);
        assert_eq!(p.proto_idx, proto_idx(proto), "nx_proto_idx({proto})");
    }
    for pidx in 0..NPROTO {
        for port in [0, 1, PORTS_PER_ADDR - 1] {
            let mut p = nx_abi_probe { addr_idx: 4095, pidx, port, ..Default::default() };
            probe(&dp, &mut p);
            assert_eq!(p.port_index as usize, port_index_pidx(4095, pidx, port), "nx_port_index");
        }
    }
}
