// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Runs the packet test vectors (tests/vectors/*.json, format in tests/vectors/README.md)
//! through the XDP data plane with BPF_PROG_TEST_RUN, in private data planes (each in its
//! own network namespace, tests/common/pkt.rs): one per group of vectors with the same
//! configuration and MTUs, put back in the state of a freshly loaded one before each vector
//! (`vectors::reset`; what it resets and why that is all a vector can change:
//! tests/common/vectors.rs, tests/vectors/README.md), then the vector's hash seed, its
//! setup frames, then its packet; for each, the verdict, every counter's delta and the
//! output frame byte for byte, and the output's checksums by the independent routine.
//! Fails when the directory holds no vector file or a file does not parse.
//! The files are written by tests/gen_vectors.rs. Needs root.
//! Run: `cargo test --release --test packet_vectors`; NATRIX_VECTORS_FILTER=substring runs
//! only the vectors whose "file/name" contains it.

mod common;

use common::pkt::with_env;
use common::vectors;

#[test]
fn every_vector_file_parses_and_is_not_empty() {
    let files = vectors::load_all(&vectors::dir());
    let n: usize = files.iter().map(|(_, f)| f.vectors.len()).sum();
    assert!(n > 0, "expected vectors");
    eprintln!("{} vector files, {n} vectors", files.len());
}

#[test]
fn vectors_match_the_data_plane() {
    let filter = std::env::var("NATRIX_VECTORS_FILTER").unwrap_or_default();
    let files = vectors::load_all(&vectors::dir());
    let groups = vectors::groups(&files, &filter);
    let (mut ran, mut failed) = (0, Vec::new());
    let t0 = std::time::Instant::now();
    for g in &groups {
        let vs: Vec<&vectors::Vector> = g.vectors.iter().map(|(_, v)| *v).collect();
        let results = vectors::run_group(g.config, g.mtu, &vs, vectors::Reset::BeforeEach);
        assert_eq!(results.len(), vs.len(), "expected one result per vector");
        for ((id, _), r) in g.vectors.iter().zip(results) {
            ran += 1;
            if let Err(e) = r {
                eprintln!("FAILED {id}: {e}");
                failed.push(format!("{id}: {e}"));
            }
        }
    }
    assert!(ran > 0, "expected at least one vector to run (filter {filter:?})");
    assert!(failed.is_empty(), "{} of {ran} vectors failed:\n{}", failed.len(), failed.join("\n"));
    eprintln!("{ran} vectors passed, {} data planes, {:.1} s", groups.len(), t0.elapsed().as_secs_f64());
}

/// The reset is complete: the largest group of vectors run in one data plane forward,
/// then in reverse order (every vector after other ones than the first time), gives every
/// vector the same result, a pass; and without the reset, a vector run twice fails the
/// second time (what it left behind shows); the check after a reset names what a vector
/// left behind, and after the reset finds nothing, and the vector passes again.
#[test]
fn the_order_of_vectors_does_not_matter() {
    let files = vectors::load_all(&vectors::dir());
    let groups = vectors::groups(&files, "");
    let g = groups.iter().max_by_key(|g| g.vectors.len()).expect("a group");
    assert!(g.vectors.len() > 1, "expected a group of several vectors");
    let mut vs: Vec<&vectors::Vector> = g.vectors.iter().map(|(_, v)| *v).collect();
    let n = vs.len();
    vs.extend(g.vectors.iter().rev().map(|(_, v)| *v));
    let results = vectors::run_group(g.config, g.mtu, &vs, vectors::Reset::BeforeEach);
    let (fwd, rev) = results.split_at(n);
    let mut rev: Vec<_> = rev.to_vec();
    rev.reverse();
    for (((id, _), a), b) in g.vectors.iter().zip(fwd).zip(&rev) {
        assert_eq!(a, b, "{id}: expected the same result in both orders");
        assert!(a.is_ok(), "{id}: expected a pass, got {a:?}");
    }
    eprintln!("{n} vectors, forward then reversed, in one data plane: the same results");

    let udp =
        files.iter().flat_map(|(_, f)| &f.vectors).find(|v| v.name == "udp_out").expect("the vector udp_out");
    let twice = [udp, udp];
    let without = vectors::run_group(&udp.config, &udp.mtu, &twice, vectors::Reset::Never);
    assert!(without[0].is_ok(), "expected the first run to pass: {:?}", without[0]);
    let e = without[1].as_ref().expect_err("expected udp_out run again without a reset to fail");
    assert!(e.contains("counters"), "expected the counters to differ, got: {e}");
    // the check sees what a vector leaves behind, and the reset removes it
    let cfg = vectors::cfg_of(&udp.config).expect("udp_out's configuration");
    with_env(&cfg, |env| {
        let fresh = env.dp.tables.config().expect("nx_cfg");
        vectors::check_reset(env, &fresh).expect("expected a fresh data plane to pass the check");
        vectors::set_seed(env, udp.tab_seed);
        vectors::run_steps(env, udp).expect("expected udp_out to pass");
        let e = vectors::check_reset(env, &fresh).expect_err("expected what udp_out left to be seen");
        eprintln!("after udp_out: {e}");
        for m in ["nx_blocks", "nx_subs", "nx_sess", "nx_tab_cnt", "nx_fibc", "nx_cfg"] {
            assert!(e.contains(m), "expected {m} named as changed, got: {e}");
        }
        vectors::reset(env, &fresh);
        vectors::check_reset(env, &fresh).expect("expected the reset to pass the check");
        vectors::set_seed(env, udp.tab_seed);
        vectors::run_steps(env, udp).expect("expected udp_out to pass again after the reset");
    });
}

/// The reader refuses what is not a vector file, rather than running nothing.
#[test]
fn malformed_vector_files_are_refused() {
    let good = std::fs::read_to_string(vectors::dir().join("translate.json")).expect("translate.json");
    vectors::parse(&good).expect("translate.json parses");
    let cases: Vec<(&str, String)> = vec![
        ("not JSON", "{".into()),
        ("another format", good.replacen(vectors::FORMAT, "natrix-packet-vectors/0", 1)),
        (
            "no vectors",
            format!("{{\"format\": \"{}\", \"description\": \"\", \"vectors\": []}}", vectors::FORMAT),
        ),
        ("an unknown field", good.replacen("\"tab_seed\"", "\"tab_sed\"", 1)),
        ("an unknown verdict", good.replacen("\"XDP_REDIRECT\"", "\"XDP_FORWARD\"", 1)),
        ("an unknown counter", good.replacen("\"rx_inside\"", "\"rx_insde\"", 1)),
        ("an unknown program", good.replacen("\"program\": \"inside\"", "\"program\": \"in0\"", 1)),
    ];
    for (what, text) in cases {
        assert!(vectors::parse(&text).is_err(), "{what}: expected the file refused");
    }
}

/// The runner sees a difference: a vector whose expected output has one byte changed, or
/// whose counters say another reason, fails.
#[test]
fn a_vector_that_differs_fails() {
    let text = std::fs::read_to_string(vectors::dir().join("translate.json")).expect("translate.json");
    let f = vectors::parse(&text).expect("translate.json parses");
    let v = f.vectors.iter().find(|v| v.name == "udp_out").expect("the vector udp_out");
    let mut out_changed = v.clone();
    let o = out_changed.packet.output.as_mut().expect("an output");
    let flipped = if &o[60..61] == "0" { "1" } else { "0" };
    o.replace_range(60..61, flipped);
    let mut reason_changed = v.clone();
    reason_changed.packet.counters.insert("filtered".into(), 1);
    // in one data plane: a vector that fails leaves nothing the next one sees
    let r = vectors::run_group(
        &v.config,
        &v.mtu,
        &[&out_changed, &reason_changed, v],
        vectors::Reset::BeforeEach,
    );
    let e = r[0].as_ref().expect_err("expected a changed output byte to fail");
    assert!(e.contains("first difference at byte 30"), "expected the difference named, got: {e}");
    r[1].as_ref().expect_err("expected another counter to fail");
    assert!(r[2].is_ok(), "expected the vector itself to pass after two that failed: {:?}", r[2]);
}
