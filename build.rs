// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Compiles the XDP data plane and generates the Rust skeleton from its BTF, so Rust sees the
//! C structs (`bpf/nx_types.h`) instead of a second hand-written copy. (The benchmark's
//! programs are the bench crate's: bench/build.rs.) Also the small XDP object
//! tests/capture_filter.rs replaces a function of (tests/bpf/), built the same way.
use std::{env, path::PathBuf};

include!("build_skel.rs");

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    skeleton("bpf/natrix.bpf.c", "bpf", &out_dir.join("natrix.skel.rs"));
    skeleton("tests/bpf/nx_cap_stub.bpf.c", "tests/bpf", &out_dir.join("cap_stub.skel.rs"));
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-changed=tests/bpf");
    println!("cargo:rerun-if-changed=build_skel.rs");
}
