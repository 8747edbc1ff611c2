// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Compiles the XDP data plane and generates the Rust skeleton from its BTF, so Rust sees the
//! C structs (`bpf/nx_types.h`) instead of a second hand-written copy.
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

/// One BPF object into one skeleton: the same compiler flags for every object.
fn skeleton(source: &str, include: &str, out: &std::path::Path, multiarch: &str) {
    SkeletonBuilder::new()
        .source(source)
        .clang_args([
            "-O2".to_string(),
            "-g".to_string(),
            "-Wall".to_string(),
            "-Werror".to_string(),
            "-mcpu=v3".to_string(),
            format!("-I/usr/include/{multiarch}"),
            format!("-I{include}"),
        ])
        .build_and_generate(out)
        .unwrap_or_else(|e| panic!("building the BPF object {source} failed: {e:#}"));
}

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = match arch.as_str() {
        "aarch64" => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    };
    // The data plane.
    skeleton("bpf/natrix.bpf.c", "bpf", &out_dir.join("natrix.skel.rs"), multiarch);
    // (the benchmark programs are the bench crate's: bench/build.rs)
    println!("cargo:rerun-if-changed=bpf");
}
