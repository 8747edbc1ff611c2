// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Compiles the benchmark's BPF programs (bench/bpf/: generator, test-run harness, minimal
//! forwarder, sink) and generates their Rust skeletons.
use std::{env, path::PathBuf};

include!("../build_skel.rs");

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    for name in ["gen", "harness", "fwd", "sink"] {
        skeleton(&format!("bpf/nxb_{name}.bpf.c"), "bpf", &out_dir.join(format!("bench_{name}.skel.rs")));
    }
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-changed=../build_skel.rs");
}
