// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The data plane's one exit (bpf/nx_exit.h), checked on its source: every XDP program
//! returns `nx_exit(ctx, ...)` and nothing else, no path returns a bare XDP action, and no
//! drop reason is counted outside a verdict. A new exit that bypasses nx_exit would be
//! invisible to the counters' accounting and to whatever hooks nx_exit (capture, logging).

use std::path::Path;

fn sources() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf");
    let mut v: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("expected bpf/ to be readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "h" || e == "c"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("expected a readable source file"))
        })
        .collect();
    v.sort();
    assert!(v.len() > 10, "expected the data plane's sources under {}, found {}", dir.display(), v.len());
    v
}

/// Source without comments, so that prose naming XDP_DROP does not count.
fn code_of(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    out.push_str(rest);
    out.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

#[test]
fn every_xdp_program_leaves_through_nx_exit() {
    let mut programs = 0;
    for (name, src) in sources() {
        let code = code_of(&src);
        let mut rest = code.as_str();
        while let Some(i) = rest.find("SEC(\"xdp\")") {
            rest = &rest[i + 10..];
            let open = rest.find('{').expect("expected a program body");
            let close = rest[open..].find('}').expect("expected the body's end") + open;
            let head = rest[..open].trim();
            let body = rest[open + 1..close].trim();
            // the capture's entry step (nx_cap.h) may come first; the capture bodies and
            // the slow path leave through nx_exit_cap (nx_exit's count, then the capture's
            // stage); the capture's last stage returns the verdict nx_exit_cap counted
            let body = body
                .strip_prefix("nx_cap_enter(ctx, NX_PROG_CAP_RX_INSIDE);")
                .or_else(|| body.strip_prefix("nx_cap_enter(ctx, NX_PROG_CAP_RX_OUTSIDE);"))
                .or_else(|| body.strip_prefix("nx_cap_rx(ctx);"))
                .unwrap_or(body)
                .trim();
            assert!(
                (body.starts_with("return nx_exit(ctx, ")
                    || body.starts_with("return nx_exit_cap(ctx, ")
                    || body == "return nx_cap_emit(ctx);")
                    && body.matches("return").count() == 1,
                "{name}: XDP program `{head}` must be one `return nx_exit(ctx, ...)` (or nx_exit_cap, nx_cap_emit), is `{body}`"
            );
            programs += 1;
            rest = &rest[close..];
        }
    }
    assert_eq!(
        programs, 10,
        "expected 10 XDP programs (inside, outside, their slow paths and capture bodies, the capture's emit, \
         the inside slow path's deterministic-mode, ICMP-error and hairpin programs)"
    );
}

#[test]
fn no_path_returns_a_bare_action_or_counts_a_drop_itself() {
    for (name, src) in sources() {
        if name == "nx_exit.h" {
            continue;
        }
        let code = code_of(&src);
        for (n, line) in code.lines().enumerate() {
            for act in ["XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT", "XDP_ABORTED"] {
                assert!(
                    !(line.contains("return") && line.contains(act)),
                    "{name}:{}: returns {act} itself; paths return a verdict (nx_exit.h)",
                    n + 1
                );
            }
            assert!(
                !line.contains("nx_count(NX_DROP_"),
                "{name}:{}: counts a drop reason outside a verdict: `{}`",
                n + 1,
                line.trim()
            );
        }
    }
}
