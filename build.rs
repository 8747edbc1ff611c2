// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Compiles the XDP data plane and generates the Rust skeleton from its BTF, so Rust sees the
//! C structs (`bpf/nx_types.h`) instead of a second hand-written copy.
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("natrix.skel.rs");
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = match arch.as_str() {
        "aarch64" => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    };
    SkeletonBuilder::new()
        .source("bpf/natrix.bpf.c")
        .clang_args([
            "-O2".to_string(),
            "-g".to_string(),
            "-Wall".to_string(),
            "-Werror".to_string(),
            "-mcpu=v3".to_string(),
            format!("-I/usr/include/{multiarch}"),
            "-Ibpf".to_string(),
        ])
        .build_and_generate(&out)
        .expect("building the BPF data plane (bpf/natrix.bpf.c) failed");
    // Benchmark programs (bpf/bench/): generator, test-run harness, minimal forwarder, sink.
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    for name in ["gen", "harness", "fwd", "sink"] {
        SkeletonBuilder::new()
            .source(format!("bpf/bench/nxb_{name}.bpf.c"))
            .clang_args([
                "-O2".to_string(),
                "-g".to_string(),
                "-Wall".to_string(),
                "-Werror".to_string(),
                "-mcpu=v3".to_string(),
                format!("-I/usr/include/{multiarch}"),
                "-Ibpf/bench".to_string(),
            ])
            .build_and_generate(out_dir.join(format!("bench_{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building bpf/bench/nxb_{name}.bpf.c failed: {e:#}"));
    }
    println!("cargo:rerun-if-changed=bpf");
}
