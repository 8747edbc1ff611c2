// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The NAT event log's part of the report: targets and tables from the records of
//! `natrix-bench log-cost` (kind "log_cost") and `natrix-bench log-volume` ("log_volume").

use std::fmt::Write as _;

use serde_json::Value;

use super::report::{human, Target};

/// The established cases, judged against the A/A control.
const ESTABLISHED: [(&str, &str); 4] = [
    ("out_hot", "established outbound, one flow"),
    ("out_rnd", "established outbound, a random live flow per packet"),
    ("in_hot", "established inbound, one flow"),
    ("in_rnd", "established inbound, a random live flow per packet"),
];
const SETUPS: [(&str, &str); 2] = [
    ("new_flow", "new flow of a subscriber (its block has room)"),
    ("new_block", "new block (every packet a new subscriber's first)"),
];

/// The smallest noise band "within noise" allows: the kernel times a run in whole ns per
/// packet, and 2% of ~100 ns is two of them.
const MIN_NOISE: f64 = 0.02;

/// Quantile q of `v` (linear interpolation between order statistics); NaN when empty.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

fn rounds(r: &Value) -> Vec<f64> {
    r["rounds"].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()).unwrap_or_default()
}

/// The verdict on a median ratio `m` (logging on / off) against the noise band `n`: a cost
/// is judged one-sided (logging on may cost at most `n` more than off); a figure more than
/// `n` below 1 passes but is told apart, since logging cannot speed a packet up: it says
/// this run's noise is larger than the A/A control caught.
pub fn verdict(m: f64, n: f64) -> (bool, &'static str) {
    if !(m.is_finite() && n.is_finite()) {
        (false, "not measured")
    } else if m - 1.0 > n {
        (false, "**no**")
    } else if 1.0 - m > n {
        (true, "yes (below off by more than the noise)")
    } else {
        (true, "yes")
    }
}

/// How far two measurements of the same thing (logging off, twice) differ in case `c` in
/// this run: the middle half of the A/A control's round-by-round ratios, as the larger
/// distance of its quartiles from 1 (at least MIN_NOISE).
pub fn noise(lc: &Value, c: &str) -> f64 {
    let r = rounds(&lc["ratios"]["off_control"][c]);
    let (q1, q3) = (quantile(&r, 0.25), quantile(&r, 0.75));
    if !(q1.is_finite() && q3.is_finite()) {
        return f64::NAN;
    }
    (q1 - 1.0).abs().max((q3 - 1.0).abs()).max(MIN_NOISE)
}

fn ratio_cell(r: &Value) -> String {
    match (r["median"].as_f64(), r["min"].as_f64(), r["max"].as_f64()) {
        (Some(m), Some(lo), Some(hi)) => format!("{m:.2}× ({lo:.2}–{hi:.2})"),
        _ => "–".into(),
    }
}

/// The median round-by-round difference to logging off, with its range: "+310 ns (−40 to
/// +900)".
fn delta_cell(lc: &Value, v: &str, c: &str) -> String {
    let d = &lc["ratios"][v][c]["delta_ns"];
    match (d["median"].as_f64(), d["min"].as_f64(), d["max"].as_f64()) {
        (Some(m), Some(lo), Some(hi)) => format!("{m:+.0} ns ({lo:+.0} to {hi:+.0})"),
        _ => "–".into(),
    }
}

fn ns(x: Option<f64>) -> String {
    x.filter(|v| v.is_finite()).map(|v| format!("{v:.0}")).unwrap_or_else(|| "–".into())
}

fn variant_label(v: &str) -> &'static str {
    match v {
        "blocks" => "block events",
        "sessions" => "block and session events",
        "off_control" => "off, A/A control",
        _ => "off",
    }
}

/// Events made in the timed runs of a variant, and the ones lost.
fn made_lost(lc: &Value, v: &str) -> (u64, u64) {
    let x = &lc["variants"][v];
    let made = x["events"]
        .as_object()
        .map(|cases| {
            cases
                .values()
                .filter_map(Value::as_object)
                .flat_map(|k| k.values())
                .filter_map(Value::as_u64)
                .sum()
        })
        .unwrap_or(0);
    (made, lc["log_lost"].as_u64().unwrap_or(0))
}

/// The targets: logging on within noise of off on established packets; the cost per new
/// block stated.
pub fn targets(lc: &Value) -> Vec<Target> {
    let mut t = Vec::new();
    for v in ["blocks", "sessions"] {
        let r = &lc["ratios"][v];
        if !r.is_object() {
            continue;
        }
        let mut all_ok = true;
        let mut meds = Vec::new();
        let mut detail = Vec::new();
        for (c, label) in ESTABLISHED {
            let m = r[c]["median"].as_f64().unwrap_or(f64::NAN);
            let n = noise(lc, c);
            let (ok, word) = verdict(m, n);
            all_ok &= ok;
            meds.push(m);
            detail.push(format!(
                "{label}: {} against the A/A control's ±{:.0}%{}",
                ratio_cell(&r[c]),
                100.0 * n,
                match (ok, word) {
                    (true, "yes") => "",
                    (true, _) => " (below off by more than the noise)",
                    (false, _) => " (**outside**)",
                }
            ));
        }
        let (lo, hi) =
            meds.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        let (made, lost) = made_lost(lc, v);
        t.push(Target {
            name: format!(
                "NAT event logging ({}) vs off, established packets (BPF_PROG_TEST_RUN)",
                variant_label(v)
            ),
            want: "within noise: at most the A/A control's middle half above off".into(),
            got: format!("{lo:.2}× to {hi:.2}× (medians of {} rounds)", lc["reps"]),
            met: all_ok && lost == 0,
            detail: format!(
                "{}; {made} events made in the timed runs, {lost} lost (log_lost)",
                detail.join("; ")
            ),
        });
    }
    let off = lc["variants"]["off"]["ns"]["new_block"].as_f64();
    let d = |v: &str| lc["ratios"][v]["new_block"]["delta_ns"]["median"].as_f64();
    if let (Some(off), Some(on)) = (off, d("blocks")) {
        t.push(Target {
            name: "NAT event logging: cost per new block (BPF_PROG_TEST_RUN)".into(),
            want: "stated".into(),
            got: format!(
                "{on:+.0} ns per block ({off:.0} ns with logging off; two measurements with logging off: {:+.0} ns)",
                d("off_control").unwrap_or(f64::NAN)
            ),
            met: on.is_finite() && off.is_finite(),
            detail: format!(
                "a new subscriber's first packet (subscriber entry, block, mapping, session), the median of {} round-by-round differences to logging off: block events {} ({}); with session events too {} ({}); the A/A control {} ({})",
                lc["reps"],
                delta_cell(lc, "blocks", "new_block"),
                ratio_cell(&lc["ratios"]["blocks"]["new_block"]),
                delta_cell(lc, "sessions", "new_block"),
                ratio_cell(&lc["ratios"]["sessions"]["new_block"]),
                delta_cell(lc, "off_control", "new_block"),
                ratio_cell(&lc["ratios"]["off_control"]["new_block"])
            ),
        });
    }
    t
}

/// Bytes a second as "12,345 B/s (98.8 kbit/s)".
fn rate(bytes_per_min: f64, secs: f64) -> String {
    let b = bytes_per_min / secs;
    let grouped = if b.is_finite() { thousands(b.round() as u64) } else { "–".into() };
    let bits = b * 8.0;
    let unit =
        if bits >= 1e6 { format!("{:.2} Mbit/s", bits / 1e6) } else { format!("{:.1} kbit/s", bits / 1e3) };
    format!("{grouped} B/s ({unit})")
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The volume table (markdown rows and the notes under it), from a "log_volume" record:
/// also what docs/OPERATIONS.md ("Volume") shows.
pub fn volume_table(lv: &Value) -> String {
    let mut m = String::new();
    let secs = lv["minute_secs"].as_f64().unwrap_or(60.0);
    let _ = writeln!(
        m,
        "| log settings | what | events in the minute | records per connection | records/s | IPFIX datagrams/s | IPFIX | IPFIX bytes per record | syslog datagrams/s | syslog | syslog bytes per record |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for v in lv["variants"].as_array().into_iter().flatten() {
        let label = match v["variant"].as_str().unwrap_or("") {
            "blocks" => "blocks only (the default)",
            "sessions" => "`log.sessions = true`",
            "destinations" => "`log.sessions` and `log.destinations`",
            x => x,
        };
        let conns = v["connections"].as_f64().unwrap_or(f64::NAN);
        for (phase, what) in
            [("active", "the minute: allocations, creations"), ("idle", "when they end: releases, deletions")]
        {
            let w = &v[phase];
            if !w.is_object() {
                continue;
            }
            let f = |k: &str| w[k].as_f64().unwrap_or(f64::NAN);
            let kinds = w["by_kind"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, n)| {
                            let what = match k.as_str() {
                                "block_alloc" => "block allocations",
                                "block_free" => "block releases",
                                "session_create" => "session creations",
                                "session_delete" => "session deletions",
                                x => x,
                            };
                            format!("{} {what}", thousands(n.as_u64().unwrap_or(0)))
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            let _ = writeln!(
                m,
                "| {label} | {what} | {kinds} | {:.2} | {} | {:.1} | {} | {:.1} | {} | {} | {:.0} |",
                f("ipfix_records") / conns,
                thousands((f("ipfix_records") / secs).round() as u64),
                f("ipfix_messages") / secs,
                rate(f("ipfix_bytes"), secs),
                f("ipfix_bytes") / f("ipfix_records"),
                thousands((f("syslog_messages") / secs).round() as u64),
                rate(f("syslog_bytes"), secs),
                f("syslog_bytes") / f("syslog_messages"),
            );
        }
    }
    let lost: u64 =
        lv["variants"].as_array().into_iter().flatten().filter_map(|v| v["log_lost"].as_u64()).sum();
    let tb = lv["variants"][0]["template_bytes"].as_u64().unwrap_or(0);
    let _ = writeln!(
        m,
        "\n{} subscribers each opening {} new connections in a simulated minute (per second: the minute's figures / {secs:.0}); 6 in 10 TCP (443, 80, 993, 5228), 4 in 10 UDP (443, 53, 123), a new inside port each, {} remote addresses. Every subscriber's first connection takes its block (natrix's default 256 ports), so the minute holds one allocation per subscriber; \"when they end\" is every subscriber going idle afterwards (sessions deleted by the reaper, blocks released by the sweep). IPFIX: full messages at the exporter's {}-byte MTU; syslog: one RFC 5424 line per datagram, host name `{}`; every datagram with 28 bytes of IPv4 and UDP headers. IPFIX templates add {tb} B per collector every `log.template_refresh` (60 s by default) over UDP. Events lost (`log_lost`): {lost}.",
        thousands(lv["subs"].as_u64().unwrap_or(0)),
        lv["conns"],
        lv["conns"].as_u64().unwrap_or(0).min(250),
        lv["mtu"],
        lv["hostname"].as_str().unwrap_or("?"),
    );
    m
}

/// The generated section's NAT event log part: the cost table and the volume table.
pub fn markdown(lc: Option<&Value>, lv: Option<&Value>) -> String {
    let mut m = String::new();
    if let Some(lc) = lc {
        let plan = &lc["plan"];
        let _ = writeln!(
            m,
            "\n### NAT event logging: cost per packet (ns, BPF_PROG_TEST_RUN, harness subtracted)\n"
        );
        let _ = writeln!(
            m,
            "One natrix instance with {} live sessions ({} subscribers, {}-port blocks), timed with its `[log]` flags in `nx_config` set per test run as the configuration sets them: off; off again (the A/A control: how far two measurements of the same thing differ in this run); a collector named (block events); and `log.sessions = true` (block and session events). A measurement is the fastest of {} test runs; the four settings take their runs one right after the other. Medians of {} rounds; in brackets the range of the round-by-round ratios to \"off\". The ring is drained after every test run, as the daemon drains it.\n",
            human(plan["sessions"].as_u64().unwrap_or(0)),
            plan["subs"],
            lc["block_size"],
            lc["split"],
            lc["reps"]
        );
        let _ = writeln!(
            m,
            "| case | off | A/A control | block events | block and session events | A/A control / off | block events / off | block and session events / off | events per packet (block events / and sessions) | within noise (at most the A/A middle half above off): block events / and sessions |\n|---|---|---|---|---|---|---|---|---|---|"
        );
        let v = |name: &str, c: &str| lc["variants"][name]["ns"][c].as_f64();
        let epp =
            |name: &str, c: &str| lc["variants"][name]["events_per_packet"][c].as_f64().unwrap_or(f64::NAN);
        for (c, label) in ESTABLISHED.iter().chain(SETUPS.iter()) {
            let n = noise(lc, c);
            let judged = ESTABLISHED.iter().any(|(e, _)| e == c);
            let within =
                |var: &str| verdict(lc["ratios"][var][c]["median"].as_f64().unwrap_or(f64::NAN), n).1;
            let _ = writeln!(
                m,
                "| {label} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
                ns(v("off", c)),
                ns(v("off_control", c)),
                ns(v("blocks", c)),
                ns(v("sessions", c)),
                ratio_cell(&lc["ratios"]["off_control"][c]),
                ratio_cell(&lc["ratios"]["blocks"][c]),
                ratio_cell(&lc["ratios"]["sessions"][c]),
                epp("blocks", c),
                epp("sessions", c),
                if judged {
                    format!("±{:.0}%: {} / {}", 100.0 * n, within("blocks"), within("sessions"))
                } else {
                    "–".into()
                }
            );
        }
        let (mb, lb) = made_lost(lc, "blocks");
        let (ms, _) = made_lost(lc, "sessions");
        let _ = writeln!(
            m,
            "\nEvents made in the timed runs: {mb} (block events), {ms} (block and session events); lost (`log_lost`): {lb}. What logging adds, the median of the round-by-round differences to logging off (their range in brackets): per new block {} with block events, {} with session events too (the block's event and the session's), against {} between the two measurements with logging off; per new flow of a subscriber whose block has room (no block event) {} with block events, {} with session events (one).",
            delta_cell(lc, "blocks", "new_block"),
            delta_cell(lc, "sessions", "new_block"),
            delta_cell(lc, "off_control", "new_block"),
            delta_cell(lc, "blocks", "new_flow"),
            delta_cell(lc, "sessions", "new_flow"),
        );
    }
    if let Some(lv) = lv {
        let _ = writeln!(m, "\n### NAT event log volume (a simulated minute, measured)\n");
        m += &volume_table(lv);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantiles_interpolate() {
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.25), 2.0);
        assert_eq!(quantile(&[4.0, 1.0], 0.5), 2.5);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn logging_is_judged_against_the_control() {
        let r = |rounds: &[f64]| {
            let mut v = rounds.to_vec();
            v.sort_by(|a, b| a.total_cmp(b));
            json!({"rounds": rounds, "median": quantile(&v, 0.5), "min": v[0], "max": v[v.len() - 1],
                   "delta_ns": {"median": 300.0, "min": -10.0, "max": 900.0}})
        };
        let mut ratios = json!({"off_control": {}, "blocks": {}, "sessions": {}});
        for (c, _) in ESTABLISHED {
            // the control's middle half: 0.95..1.05 -> ±5%
            ratios["off_control"][c] = r(&[0.9, 0.95, 1.0, 1.05, 1.1]);
            ratios["blocks"][c] = r(&[1.0, 1.01, 1.03, 1.04, 1.2]);
            ratios["sessions"][c] = r(&[1.05, 1.08, 1.1, 1.12, 1.3]);
        }
        for v in ["off_control", "blocks", "sessions"] {
            ratios[v]["new_block"] = r(&[1.1]);
        }
        let lc = json!({"reps": 5, "ratios": ratios, "log_lost": 0, "variants": {
            "off": {"ns": {"new_block": 3000.0}},
            "off_control": {"ns": {"new_block": 3010.0}},
            "blocks": {"ns": {"new_block": 3300.0}, "events": {"new_block": {"block_alloc": 10}}},
            "sessions": {"ns": {"new_block": 3700.0}}}});
        assert!((noise(&lc, "out_hot") - 0.05).abs() < 1e-9);
        let t = targets(&lc);
        assert_eq!(t.len(), 3, "{t:?}");
        assert!(t[0].met, "1.03 within ±5%: {t:?}");
        assert!(t[0].detail.contains("10 events made"), "{}", t[0].detail);
        assert!(!t[1].met, "1.10 outside ±5%: {t:?}");
        assert_eq!(verdict(0.9, 0.05), (true, "yes (below off by more than the noise)"));
        assert_eq!(verdict(1.04, 0.05), (true, "yes"));
        assert!(!verdict(f64::NAN, 0.05).0);
        assert!(t[2].got.starts_with("+300 ns per block (3000 ns"), "{}", t[2].got);
        assert!(t[2].got.ends_with("logging off: +300 ns)"), "{}", t[2].got);
        assert!(t[2].detail.contains("+300 ns (-10 to +900)"), "{}", t[2].detail);
    }

    #[test]
    fn volume_rows_per_second() {
        let lv = json!({"subs": 10000, "conns": 20, "minute_secs": 60.0, "mtu": 1400, "hostname": "h",
            "variants": [{"variant": "blocks", "connections": 200000, "template_bytes": 316, "log_lost": 0,
                "active": {"by_kind": {"block_alloc": 10000}, "ipfix_records": 10000, "ipfix_messages": 154,
                           "ipfix_bytes": 220000, "syslog_messages": 10000, "syslog_bytes": 3000000}}]});
        let t = volume_table(&lv);
        // 10000 records a minute: 167 a second, 0.05 a connection; 220000 B / 60 s
        assert!(t.contains("| 0.05 | 167 | 2.6 | 3,667 B/s (29.3 kbit/s) | 22.0 |"), "{t}");
        assert!(t.contains("50,000 B/s (400.0 kbit/s) | 300 |"), "{t}");
    }
}
