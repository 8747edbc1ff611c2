// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Compiles the XDP data plane and generates the Rust skeleton from its BTF, so Rust sees the
//! C structs (`bpf/nx_types.h`) instead of a second hand-written copy. (The benchmark's
//! programs are the bench crate's: bench/build.rs.)
use std::{env, path::PathBuf};

include!("build_skel.rs");

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    skeleton("bpf/natrix.bpf.c", "bpf", &out_dir.join("natrix.skel.rs"));
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-changed=build_skel.rs");
}
