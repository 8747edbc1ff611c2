// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Verifier headroom: loads the whole data plane and, for every program, reads how many
//! instructions the verifier processed (bpf_prog_info.verified_insns) and the stack of its
//! deepest call chain (src/headroom.rs). Fails when a program is over 25% of the 1M limit
//! or a chain over 448 of 512 bytes: the margin that lets the same object load on kernels
//! whose verifier explores more (docs/PERFORMANCE.md, "Verifier headroom"). Prints the table
//! (to the standard error, uncaptured) and, where the tree is writable, writes it to
//! target/headroom/KERNEL-COMPILER.md. Part of the kernel matrix (tests/kernels/): run on
//! every kernel natrix claims; `scripts/headroom-doc.py` regenerates docs/PERFORMANCE.md's
//! table from the matrix's logs. Needs root.

use natrix::config::Config;
use natrix::dataplane::{Dataplane, Persistence};
use natrix::headroom::{self, Headroom, INSN_BUDGET, STACK_BUDGET};

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

#[test]
fn every_program_is_far_below_the_verifiers_limits() {
    let cfg = Config::from_toml_str(
        "[interfaces]\ninside = [\"in0\"]\noutside = [\"out0\"]\n[pool]\naddresses = [\"203.0.113.16/29\"]\n\
         [limits]\nmax_subscribers = 256\nmax_mappings = 4096\nmax_sessions = 8192\n",
    )
    .expect("expected the test config to parse");
    let dp = Dataplane::load(&cfg, Persistence::Private)
        .unwrap_or_else(|e| panic!("expected the data plane to load on {}: {e:#}", kernel()));
    let mut rows: Vec<Headroom> = Vec::new();
    // the verifier's own figures, from its statistics at this load
    let report = dp.verifier_report();
    use libbpf_rs::skel::Skel;
    for p in dp.skel.object().progs() {
        let name = p.name().to_string_lossy().into_owned();
        if !p.autoload() {
            continue;
        }
        let v = report.iter().find(|r| r.name == name);
        let depths = v.map(|r| r.stack_depths.as_slice()).filter(|d| !d.is_empty());
        assert!(depths.is_some(), "expected the verifier's stack depths of {name} (its statistics line)");
        use std::os::fd::AsFd;
        let h = headroom::measure(&name, p.as_fd(), depths)
            .unwrap_or_else(|e| panic!("expected bpf_prog_info of {name}: {e}"));
        if let Some(v) = v {
            assert_eq!(
                h.verified_insns, v.verified_insns,
                "{name}: bpf_prog_info and the verifier's report disagree"
            );
        }
        rows.push(h);
    }
    assert!(rows.len() >= 8, "expected the data plane's programs, got {}", rows.len());
    rows.sort_by_key(|r| std::cmp::Reverse(r.verified_insns));
    let (k, cc) = (kernel(), env!("NATRIX_BPF_CC").to_string());
    let table = headroom::table(&k, &cc, &rows);
    // straight to the standard error, past libtest's capture: the kernel matrix's logs keep
    // every kernel's table (scripts/headroom-doc.py makes docs/PERFORMANCE.md's from them)
    {
        use std::io::Write;
        let _ = std::io::stderr().write_all(format!("\n{table}\n").as_bytes());
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/headroom");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join(format!("{k}-{cc}.md")), &table);
    }
    assert!(rows.iter().all(|r| r.verified_insns > 0), "expected verified_insns from the kernel (>= 5.16)");
    let over: Vec<String> = rows
        .iter()
        .filter(|r| r.verified_insns > INSN_BUDGET || r.chain_stack > STACK_BUDGET)
        .map(|r| {
            format!(
                "{}: {} instructions ({:.1}% of 1M, budget 25%), deepest chain {} B (budget {STACK_BUDGET}): {}",
                r.name,
                r.verified_insns,
                r.insn_percent(),
                r.chain_stack,
                r.chain.join(" -> ")
            )
        })
        .collect();
    assert!(over.is_empty(), "over the headroom budget on {k} ({cc}):\n{}", over.join("\n"));
}
