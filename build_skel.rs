// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// One BPF object into one Rust skeleton, with the same compiler flags for every object of
// the workspace: included by build.rs (the data plane) and bench/build.rs (the benchmark's
// programs).

/// Compiles `source` (include path `include`) and writes its skeleton to `out`. The compiler
/// is `clang` from PATH, or `$NATRIX_CLANG` (e.g. /usr/bin/clang-19: tests/kernels/matrix.sh
/// builds the object with both).
fn skeleton(source: &str, include: &str, out: &std::path::Path) {
    println!("cargo:rerun-if-env-changed=NATRIX_CLANG");
    let clang = std::env::var_os("NATRIX_CLANG").unwrap_or_else(|| "clang".into());
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = match arch.as_str() {
        "aarch64" => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    };
    libbpf_cargo::SkeletonBuilder::new()
        .source(source)
        .clang(clang)
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
