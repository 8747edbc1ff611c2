// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Compiles the benchmark's BPF programs (bench/bpf/: generator, test-run harness, minimal
//! forwarder, sink) and generates their Rust skeletons.
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = match arch.as_str() {
        "aarch64" => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    };
    for name in ["gen", "harness", "fwd", "sink"] {
        let src = format!("bpf/nxb_{name}.bpf.c");
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([
                "-O2".to_string(),
                "-g".to_string(),
                "-Wall".to_string(),
                "-Werror".to_string(),
                "-mcpu=v3".to_string(),
                format!("-I/usr/include/{multiarch}"),
                "-Ibpf".to_string(),
            ])
            .build_and_generate(out_dir.join(format!("bench_{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building the BPF object {src} failed: {e:#}"));
    }
    println!("cargo:rerun-if-changed=bpf");
}
