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
    // which compiler built the object, for the headroom table (tests/headroom.rs)
    let cc = env::var("NATRIX_CLANG").unwrap_or_else(|_| "clang".into());
    let v = std::process::Command::new(&cc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().skip_while(|w| *w != "version").nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    let major = v.split('.').next().unwrap_or("unknown");
    println!("cargo:rustc-env=NATRIX_BPF_CC=clang-{major}");
    println!("cargo:rerun-if-env-changed=NATRIX_CLANG");
}
