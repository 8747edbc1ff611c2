// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Runs the packet test vectors (tests/vectors/*.json, format in tests/vectors/README.md)
//! through the XDP data plane with BPF_PROG_TEST_RUN: every vector in a fresh private data
//! plane (its own network namespace, tests/common/pkt.rs) with the vector's configuration
//! and hash seed; its setup frames, then its packet; for each, the verdict, every counter's
//! delta and the output frame byte for byte, and the output's checksums by the independent
//! routine. Fails when the directory holds no vector file or a file does not parse.
//! The files are written by tests/gen_vectors.rs. Needs root.
//! Run: `cargo test --release --test packet_vectors`; NATRIX_VECTORS_FILTER=substring runs
//! only the vectors whose "file/name" contains it.

mod common;

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
    let (mut ran, mut failed) = (0, Vec::new());
    for (file, f) in &files {
        for v in &f.vectors {
            let id = format!("{file}/{}", v.name);
            if !id.contains(&filter) {
                continue;
            }
            ran += 1;
            if let Err(e) = vectors::run_vector(v) {
                eprintln!("FAILED {id}: {e}");
                failed.push(format!("{id}: {e}"));
            }
        }
    }
    assert!(ran > 0, "expected at least one vector to run (filter {filter:?})");
    assert!(failed.is_empty(), "{} of {ran} vectors failed:\n{}", failed.len(), failed.join("\n"));
    eprintln!("{ran} vectors passed");
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
    let e = vectors::run_vector(&out_changed).expect_err("expected a changed output byte to fail");
    assert!(e.contains("first difference at byte 30"), "expected the difference named, got: {e}");
    let mut reason_changed = v.clone();
    reason_changed.packet.counters.insert("filtered".into(), 1);
    vectors::run_vector(&reason_changed).expect_err("expected another counter to fail");
}
