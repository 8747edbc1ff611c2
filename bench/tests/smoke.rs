// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `make bench` in miniature (BENCH_SMOKE=1): namespaces, the generator, natrix, the
//! forwarder, the kernel, per-packet cost with 1k sessions, the report and the plots, a few
//! seconds each. Checks that everything ran and wrote sane results, never how fast: timing
//! belongs to `make bench`, not to the tests.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn is_root() -> bool {
    // SAFETY: plain getter.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn bench_smoke_runs_and_reports() {
    // no silent pass: without root this test cannot run, and says so by failing
    assert!(is_root(), "bench_smoke needs root (namespaces, XDP): run make test as root");
    let out = std::env::temp_dir().join(format!("natrix-bench-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    // the repository's root (this crate is bench/), and the product's binary beside this
    // crate's: `cargo test --workspace` (make test) builds both
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository");
    let bench_bin = Path::new(env!("CARGO_BIN_EXE_natrix-bench"));
    let natrix_bin = bench_bin.with_file_name("natrix");
    assert!(natrix_bin.exists(), "{} missing: run the workspace's tests (make test)", natrix_bin.display());
    let st = Command::new(root.join("scripts/bench.sh"))
        .env("BENCH_SMOKE", "1")
        .env("BENCH_OUT", &out)
        .env("NATRIX", &natrix_bin)
        .env("NATRIX_BENCH", bench_bin)
        .current_dir(root)
        .status()
        .expect("running scripts/bench.sh");
    assert!(st.success(), "scripts/bench.sh (BENCH_SMOKE=1) failed: see {}/bench.log", out.display());

    let res: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).expect("results.json"))
            .expect("JSON");
    let e2e = res["e2e"].as_array().expect("e2e records");
    for gw in ["direct", "natrix", "xdpfwd", "kernel"] {
        let r = e2e
            .iter()
            .find(|r| r["gateway"] == gw && r["case"] == "size" && r["size"] == 64)
            .unwrap_or_else(|| panic!("no 64-byte record for {gw}"));
        let pps = r["pps"].as_f64().unwrap();
        assert!(pps.is_finite() && pps > 0.0, "{gw}: nothing reached the sink: {r}");
        assert!(r["loss"].as_f64().unwrap() < 0.5, "{gw}: most packets lost: {r}");
    }
    for case in ["flows", "scale", "newflow"] {
        assert!(
            e2e.iter().any(|r| r["gateway"] == "natrix"
                && r["case"] == case
                && r["pps"].as_f64().unwrap_or(0.0) > 0.0),
            "natrix {case}: no traffic"
        );
    }
    // new flows of both kinds were set up (the new-flow table has room for both runs), by
    // natrix in both allocation modes and by the setup floor beside them
    for gw in ["natrix", "natrixdet", "setupfloor"] {
        for proto in ["udp", "tcp"] {
            assert!(
                e2e.iter().any(|r| r["gateway"] == gw
                    && r["case"] == "newflow"
                    && r["proto"] == proto
                    && r["pps"].as_f64().unwrap_or(0.0) > 0.0),
                "{gw} newflow {proto}: no connection set up"
            );
        }
    }
    assert!(
        e2e.iter().all(|r| r["gateway"] != "setupfloor" || r["case"] == "newflow"),
        "the setup floor is measured on new flows only"
    );
    // case by case: every gateway's one-flow figure of a round was taken before any
    // gateway moved on to the next case, so that they are seconds apart, not minutes
    let raw: Vec<Value> = std::fs::read_to_string(out.join("raw.jsonl"))
        .expect("raw.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .filter(|r: &Value| r["kind"] == "e2e")
        .collect();
    let last_size = raw.iter().rposition(|r| r["case"] == "size").expect("size records");
    let first_other = raw.iter().position(|r| r["case"] != "size").expect("other cases");
    assert!(last_size < first_other, "the gateways' size records are not taken side by side");
    let sized: std::collections::BTreeSet<_> =
        raw[..=last_size].iter().map(|r| r["gateway"].as_str().unwrap_or("")).collect();
    assert_eq!(sized.len(), 4, "all four gateways measured in the size case: {sized:?}");
    // the 64-byte case is measured in two passes (smoke), each gateway once a pass, the
    // second in reverse order
    for gw in ["direct", "natrix", "xdpfwd", "kernel"] {
        let passes: Vec<u64> = raw[..=last_size]
            .iter()
            .filter(|r| r["gateway"] == gw && r["size"] == 64)
            .map(|r| r["pass"].as_u64().unwrap_or(0))
            .collect();
        assert_eq!(passes, vec![1, 2], "{gw}: 64-byte passes");
    }
    let order = |pass: u64| -> Vec<&str> {
        raw[..=last_size]
            .iter()
            .filter(|r| r["pass"] == pass)
            .map(|r| r["gateway"].as_str().unwrap_or(""))
            .collect()
    };
    let mut back = order(2);
    back.reverse();
    assert_eq!(order(1), back, "the second pass runs the gateways in reverse order");
    // natrix translated: the profile of its program saw the packets
    // every end-to-end run's generator was parked (no RCU wait per test run)
    let raw = std::fs::read_to_string(out.join("raw.jsonl")).expect("raw.jsonl");
    let runs: Vec<Value> = raw
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("raw JSON"))
        .filter(|r| r["kind"] == "e2e")
        .collect();
    assert!(!runs.is_empty(), "no end-to-end run in raw.jsonl");
    assert!(runs.iter().all(|r| r["parked"] == true), "an end-to-end run with an unparked generator");
    let nat = e2e.iter().find(|r| r["gateway"] == "natrix" && r["case"] == "size").unwrap();
    assert!(nat["prog_ns"].as_f64().unwrap_or(0.0) > 0.0, "no bpf_stats profile: {nat}");

    let cost = res["cost"].as_array().expect("cost records");
    assert_eq!(cost.len(), 2, "one cost record per session count");
    // both instances were timed (they are prepared first, then timed in turn): every case
    // of each got one run per repetition
    for (c, n) in cost.iter().zip([1000, 2000]) {
        assert_eq!(c["sessions"], n, "cost: sessions filled");
        assert_eq!(c["runs_per_case"], c["reps"], "cost at {n}: timed runs per case");
    }
    // target 3 is judged in repeat mode, both directions, on cost and on flatness
    let names: Vec<&str> =
        res["targets"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for dir in ["outbound", "inbound"] {
        for what in ["cost vs forwarder", "cost flat"] {
            assert!(
                names.iter().any(|n| n.contains(dir) && n.contains(what) && n.contains("repeat mode")),
                "target 3 ({dir}, {what}) not evaluated: {names:?}"
            );
        }
    }
    // every timed run is kept beside the medians
    for (c, n) in cost.iter().zip([1000, 2000]) {
        let runs = c["samples"]["out_hot"].as_array().map(Vec::len).unwrap_or(0) as u64;
        assert_eq!(Some(runs), c["reps"].as_u64(), "cost at {n}: samples of out_hot");
    }
    let c = &cost[0];
    for k in ["fwd", "est_out", "est_in"] {
        let v = c["ns"][k]["hot"].as_f64().unwrap();
        assert!(v.is_finite() && v > 0.0, "cost {k}: {v}");
    }
    // the memory floors ran, over a table as large as natrix's session table (1.25 slots
    // per session, two to a line) and the same in 504-line chunks
    let lines = c["ns"]["fwd_mem"]["lines"].as_u64().unwrap();
    assert!(lines >= 1000 * 5 / 8, "floor table of {lines} lines for 1000 sessions");
    assert_eq!(c["ns"]["fwd_chunk"]["chunks"].as_u64().unwrap(), lines.div_ceil(504));
    for k in ["fwd_mem", "fwd_chunk"] {
        let v = c["ns"][k]["random"].as_f64().unwrap();
        assert!(v.is_finite() && v > 0.0, "cost {k}: {v}");
    }
    assert!(c["memory"]["bytes_per_session"].as_f64().unwrap() > 0.0);
    assert!(c["memory"]["per_map"]["nx_sess"].as_u64().unwrap() > 0);
    assert!(res["alloc"]["points"].as_array().is_some_and(|p| !p.is_empty()), "allocation curve");
    assert!(!res["targets"].as_array().unwrap().is_empty(), "targets evaluated");
    // NAT event logging: four settings timed side by side, the events each case made
    // drained and counted, none lost; the volume of a (tiny) minute and of its end
    let lc = &res["log_cost"];
    assert_eq!(lc["log_lost"], 0, "log cost: events lost");
    for v in ["off", "off_control", "blocks", "sessions"] {
        let x = &lc["variants"][v];
        for case in ["out_hot", "out_rnd", "in_hot", "in_rnd", "new_flow", "new_block"] {
            let runs = x["runs"][case].as_array().map(Vec::len).unwrap_or(0) as u64;
            assert_eq!(Some(runs), lc["reps"].as_u64(), "log cost {v} {case}: runs");
        }
    }
    let epp = |v: &str, c: &str| lc["variants"][v]["events_per_packet"][c].as_f64().unwrap_or(-1.0);
    for c in ["out_hot", "out_rnd", "in_hot", "in_rnd"] {
        assert_eq!((epp("off", c), epp("blocks", c), epp("sessions", c)), (0.0, 0.0, 0.0), "{c}: events");
    }
    assert_eq!(
        (epp("off", "new_flow"), epp("blocks", "new_flow"), epp("sessions", "new_flow")),
        (0.0, 0.0, 1.0)
    );
    assert_eq!(
        (epp("off", "new_block"), epp("blocks", "new_block"), epp("sessions", "new_block")),
        (0.0, 1.0, 2.0)
    );
    for v in ["blocks", "sessions", "off_control"] {
        assert!(lc["ratios"][v]["out_hot"]["median"].as_f64().is_some_and(|r| r > 0.0), "log cost ratio {v}");
    }
    assert!(
        names.iter().any(|n| n.contains("NAT event logging") && n.contains("new block")),
        "the cost per new block is stated: {names:?}"
    );
    let lv = &res["log_volume"]["variants"][0];
    let conns = lv["connections"].as_u64().unwrap();
    assert_eq!(lv["active"]["by_kind"]["session_create"].as_u64(), Some(conns), "{lv}");
    assert_eq!(lv["idle"]["by_kind"]["session_delete"].as_u64(), Some(conns), "{lv}");
    let blocks = lv["active"]["by_kind"]["block_alloc"].as_u64().unwrap_or(0);
    assert!(blocks > 0 && lv["idle"]["by_kind"]["block_free"].as_u64() == Some(blocks), "{lv}");
    assert_eq!(lv["active"]["ipfix_records"].as_u64(), Some(conns + blocks), "{lv}");
    assert_eq!(lv["log_lost"], 0, "{lv}");
    // natrix capture under load: every variant ran with a capture that started and stopped
    // and printed its summary; the empty filter wrote records, the one that matches nothing
    // none; every packet of a burst accounted for (written or lost, both forms)
    let cap = &res["capture"];
    let variants: Vec<&str> = cap["throughput"]
        .as_array()
        .expect("capture throughput")
        .iter()
        .filter_map(|t| t["variant"].as_str())
        .collect();
    assert_eq!(variants, ["none", "narrow", "one_flow", "all"], "{cap}");
    for t in cap["throughput"].as_array().unwrap() {
        assert!(t["pps"].as_f64().unwrap_or(0.0) > 0.0, "capture {}: no traffic: {t}", t["variant"]);
    }
    assert_eq!(
        cap["throughput"][1]["written"].as_f64(),
        Some(0.0),
        "a filter matching nothing wrote records"
    );
    assert!(cap["throughput"][2]["written"].as_f64().unwrap_or(0.0) > 0.0, "one flow: nothing written");
    assert!(cap["throughput"][3]["written"].as_f64().unwrap_or(0.0) > 0.0, "everything: nothing written");
    assert!(cap["size"].as_array().is_some_and(|s| s.len() == 3), "capture by size: {cap}");
    for b in cap["burst"].as_array().expect("capture bursts") {
        let (w, l, e) =
            (b["written"].as_f64().unwrap(), b["lost"].as_f64().unwrap(), b["expected"].as_f64().unwrap());
        assert!(w + l >= e, "burst of {}: {w} written + {l} lost < {e}", b["burst"]);
    }
    let md = std::fs::read_to_string(out.join("results.md")).expect("results.md");
    assert!(md.contains("NAT event log volume"), "the volume table in results.md");
    assert!(md.contains("### Bursts: records written and lost"), "the capture's tables in results.md");
    for png in [
        "throughput_vs_size",
        "throughput_vs_connections",
        "setup_rate",
        "cost_vs_sessions",
        "alloc_curve",
        "capture",
    ] {
        let p = out.join(format!("{png}.png"));
        let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "{} missing or empty", p.display());
    }
    let _ = std::fs::remove_dir_all(&out);
}
