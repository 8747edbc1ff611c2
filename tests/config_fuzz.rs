// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! A bounded, seeded, mutation-based fuzzer over the config parser
//! (`natrix::config::Config::from_toml_str`), run by `cargo test`: the stable-toolchain
//! equivalent of the cargo-fuzz target in fuzz/ (which needs nightly).
//!
//! Seeds: examples/*.toml, the README's full example, the demo config the namespace tests
//! use, and configs that set every section and key (the hardening keys included), plus the
//! deterministic mode. Mutations: at the TOML level (drop a key, copy one into another
//! section, swap two values, change a value's type, huge / negative / zero numbers, random
//! and unicode strings, deep nesting, arrays of tables) and at the byte level (bit flips,
//! inserted, deleted and duplicated runs, splices of two inputs, truncation).
//!
//! For every input: no panic; either Ok, or an error that is a TOML syntax error or names a
//! dotted config key (`config key `nat.block_size`: ...`) whose first part is a section
//! (or the unknown top-level name the input has); for an Ok config, parsing again gives the
//! same config and its derived figures do not panic.
//!
//! NATRIX_FUZZ_SECS (default 3) bounds the time, NATRIX_FUZZ_SEED (default fixed) picks
//! the sequence; a failure prints the seed, iteration and input.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use natrix::config::{Config, ConfigError};

/// At most this many inputs, whatever the time budget.
const MAX_INPUTS: u64 = 500_000;
/// Longer inputs are skipped (they only slow the run: validation is linear or worse in
/// the number of entries).
const MAX_INPUT_LEN: usize = 64 * 1024;

/// splitmix64: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

// ---------------------------------------------------------------------------------------
// seeds

const TABLE_ARRAYS: [&str; 2] = ["exclude", "forward"];
/// The top-level tables: every section of the parser's key table that is no array of tables.
static SECTIONS: std::sync::LazyLock<Vec<&'static str>> =
    std::sync::LazyLock::new(|| KEYS.iter().map(|(s, _)| *s).filter(|s| !TABLE_ARRAYS.contains(s)).collect());

/// Every key of every section, as the parser has them.
const KEYS: &[(&str, &[&str])] = natrix::config::SECTION_KEYS;

/// What tests/common/netns/topo.rs's `Conf::demo` renders.
const DEMO: &str = r#"[interfaces]
inside = ["lan0", "lan1"]
outside = ["wan0"]

[pool]
addresses = ["203.0.113.16/29", "203.0.113.40"]
ports = "1024-65535"

[nat]
block_size = 256
max_blocks_per_subscriber = 4

[timeouts]
udp = "5m"
tcp_established = "2h4m"
tcp_transitory = "4m"
icmp = "60s"

[daemon]
pin_path = "/sys/fs/bpf/natrix-test"
"#;

/// Every section and key, the hardening keys included.
const FULL: &str = r#"[interfaces]
inside = ["lan0", "lan1"]
outside = ["wan0"]
xdp_mode = "generic"
virtual_macs = ["00:00:5e:00:01:01", "00:00:5e:00:01:02"]

[pool]
addresses = ["203.0.113.16/29", "203.0.113.40"]
ports = "1024-65535"

[nat]
block_size = 128
max_blocks_per_subscriber = 8
port_parity = false
hairpinning = true
filtering = "address-and-port-dependent"
max_new_mappings_per_sec = 1000
port_class = false
icmp_errors_per_sec = 50
home_probe = 16
subscribers = ["100.64.0.0/10", "10.0.0.0/8", "192.168.0.0/16"]
unreachable_code = "admin-prohibited"

[fragments]
timeout = "2s"
max_tracked = 16384
max_held = 256

[timeouts]
udp = "5m"
tcp_established = "2h4m"
tcp_transitory = "4m"
icmp = "60s"
port_hold_down = "120s"

[limits]
max_subscribers = 65536
max_mappings = 1048576
max_sessions = 1048576
max_sessions_per_subscriber = 4096

[fib_cache]
entries = 4096
max_age = "50ms"

[daemon]
pin_path = "/sys/fs/bpf/natrix"
sweep_interval = "1s"

[[exclude]]
prefix = "192.0.2.128/25"

[[exclude]]
prefix = "198.18.0.0/15"

[[forward]]
proto = "tcp"
outside = "203.0.113.40:8080"
inside = "100.64.0.3:80"

[[forward]]
proto = "udp"
outside = "203.0.113.40:5060"
inside = "100.64.0.4:5060"
"#;

const DETERMINISTIC: &str = r#"[interfaces]
inside = ["lan0"]
outside = ["wan0"]

[pool]
addresses = ["203.0.113.16/29"]
ports = "1024-65535"

[nat]
mode = "deterministic"
deterministic_subscribers = "100.64.0.0/22"
deterministic_ports = 504
deterministic_probe = 64
unreachable_code = "host-unreachable"

[limits]
max_sessions_per_subscriber = 0
"#;

const MINIMAL: &str =
    "[interfaces]\ninside = [\"lan0\"]\noutside = [\"wan0\"]\n[pool]\naddresses = [\"203.0.113.1\"]\n";

/// The seed corpus: every one must parse.
fn seeds() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![
        ("demo config (tests)".into(), DEMO.into()),
        ("every key".into(), FULL.into()),
        ("deterministic".into(), DETERMINISTIC.into()),
        ("minimal".into(), MINIMAL.into()),
    ];
    let root = env!("CARGO_MANIFEST_DIR");
    let mut examples: Vec<_> = std::fs::read_dir(format!("{root}/examples"))
        .expect("examples/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    examples.sort();
    assert!(!examples.is_empty(), "no examples/*.toml");
    for p in examples {
        out.push((p.display().to_string(), std::fs::read_to_string(&p).unwrap()));
    }
    // the README's full example: the ```toml block with [interfaces]
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let mut rest = readme.as_str();
    while let Some(i) = rest.find("```toml") {
        let body = &rest[i + 7..];
        let end = body.find("```").unwrap_or(body.len());
        if body[..end].contains("[interfaces]") && body[..end].contains("[pool]") {
            out.push(("README example".into(), body[..end].to_owned()));
        }
        rest = &body[end.min(body.len())..];
    }
    out
}

// ---------------------------------------------------------------------------------------
// the oracle

/// Checks one input; Err describes what is wrong.
fn check(input: &str) -> Result<bool, String> {
    let first = catch_unwind(AssertUnwindSafe(|| Config::from_toml_str(input)))
        .map_err(|e| format!("the parser panicked: {}", panic_text(&e)))?;
    match first {
        Ok(c) => {
            let again = catch_unwind(AssertUnwindSafe(|| Config::from_toml_str(input)))
                .map_err(|e| format!("the second parse panicked: {}", panic_text(&e)))?;
            match again {
                Ok(c2) if c2 == c => {}
                Ok(c2) => return Err(format!("parsing again gave another config:\n{c:?}\nvs\n{c2:?}")),
                Err(e) => return Err(format!("parsed once, then failed: {e}")),
            }
            catch_unwind(AssertUnwindSafe(|| {
                let _ = c.block_count_per_addr();
                let _ = format!("{c:?}");
            }))
            .map_err(|e| format!("a parsed config's figures panicked: {}", panic_text(&e)))?;
            Ok(true)
        }
        Err(e) => {
            let shown = e.to_string();
            match &e {
                ConfigError::Syntax { message } => {
                    if message.is_empty() || !shown.starts_with("config syntax error: ") {
                        return Err(format!("a syntax error without a message: {shown:?}"));
                    }
                }
                ConfigError::Key { key, message } => {
                    if message.is_empty() {
                        return Err(format!("an error for {key} without a message"));
                    }
                    if !shown.starts_with(&format!("config key `{key}`: ")) {
                        return Err(format!("the message does not name the key: {shown:?}"));
                    }
                    check_key(key, message, input)?;
                }
                ConfigError::Io { .. } => return Err(format!("an I/O error from a string: {shown}")),
            }
            Ok(false)
        }
    }
}

/// A key an error names: `section`, `section.key`, `section.key[i]`, `array[i]`,
/// `array[i].key`, or an unknown top-level name that the input has.
fn check_key(key: &str, message: &str, input: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("error key {key:?} ({message:?}): {why}"));
    let strip_index = |s: &str| -> Option<String> {
        match s.find('[') {
            None => Some(s.to_owned()),
            Some(i) => {
                let idx = s[i + 1..].strip_suffix(']')?;
                idx.parse::<usize>().ok()?;
                Some(s[..i].to_owned())
            }
        }
    };
    if message.contains("unknown") {
        // an unknown name is reported as written (it may hold dots itself): `name`, or
        // `section.name` / `array[i].name` for one inside a known table
        let root: toml::Table =
            toml::from_str(input).map_err(|e| format!("key error for a document toml rejects: {e}"))?;
        if root.contains_key(key) {
            return Ok(());
        }
        let Some((top, rest)) = key.split_once('.') else { return bad("names nothing the input has") };
        let Some(sec) = strip_index(top) else { return bad("malformed index") };
        let table = match (root.get(&sec), top.find('[')) {
            (Some(toml::Value::Table(t)), None) => Some(t),
            (Some(toml::Value::Array(a)), Some(i)) => top[i + 1..top.len() - 1]
                .parse::<usize>()
                .ok()
                .and_then(|i| a.get(i))
                .and_then(|v| v.as_table()),
            _ => None,
        };
        return match table {
            Some(t) if t.contains_key(rest) => Ok(()),
            _ => bad("names nothing the input has"),
        };
    }
    let parts: Vec<&str> = key.split('.').collect();
    let Some(top) = strip_index(parts[0]) else { return bad("malformed index") };
    let known = SECTIONS.contains(&top.as_str()) || TABLE_ARRAYS.contains(&top.as_str());
    if !known {
        return bad("names no section");
    }
    if parts.len() == 1 {
        return Ok(());
    }
    if parts.len() > 2 {
        return bad("more than section.key");
    }
    let Some(k) = strip_index(parts[1]) else { return bad("malformed index") };
    let allowed = KEYS.iter().find(|(s, _)| *s == top).map(|(_, k)| *k).unwrap_or(&[]);
    if allowed.contains(&k.as_str()) {
        Ok(())
    } else {
        bad("a key its section does not have")
    }
}

fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| e.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(non-string panic)".into())
}

// ---------------------------------------------------------------------------------------
// mutations

const INTERESTING_INTS: &[i64] = &[
    0,
    1,
    -1,
    2,
    3,
    7,
    8,
    64,
    255,
    256,
    1023,
    1024,
    4095,
    4096,
    65534,
    65535,
    65536,
    1 << 20,
    100_000_000,
    100_000_001,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    i64::MAX,
    i64::MIN,
    i64::MIN + 1,
];

const INTERESTING_STRS: &[&str] = &[
    "",
    " ",
    "0",
    "-1",
    "5m",
    "0s",
    "1d",
    "999999999999999999999d",
    "1h30m15s",
    "500ms",
    "30s1m",
    "5m5m",
    "1024-65535",
    "65535-1024",
    "0-0",
    "1-65535",
    "lan0",
    "wan0",
    "lo",
    "a-very-long-interface-name-beyond-ifnamsiz",
    "203.0.113.1",
    "203.0.113.0/24",
    "203.0.113.0/33",
    "0.0.0.0/0",
    "255.255.255.255",
    "100.64.0.0/10",
    "100.64.0.0/22",
    "100.64.0.3:80",
    "203.0.113.40:8080",
    "203.0.113.40:0",
    "203.0.113.40:65536",
    "00:00:5e:00:01:01",
    "01:00:5e:00:00:01",
    "00:00:00:00:00:00",
    "ff:ff:ff:ff:ff:ff",
    "zz:00:5e:00:01:01",
    "host-unreachable",
    "admin-prohibited",
    "endpoint-independent",
    "address-dependent",
    "address-and-port-dependent",
    "deterministic",
    "dynamic",
    "generic",
    "native",
    "tcp",
    "udp",
    "/sys/fs/bpf/natrix",
    "relative/path",
    "\u{0}",
    "ünïcödé",
    "🦀🦀🦀",
    "\u{202e}evil",
    "\u{feff}",
    "1\u{0661}2",
];

fn random_string(r: &mut Rng) -> String {
    let len = r.below(40);
    (0..len)
        .map(|_| match r.below(6) {
            0 => char::from_u32(r.below(0x80) as u32).unwrap_or('x'),
            1 => char::from_u32(0x80 + r.below(0x780) as u32).unwrap_or('é'),
            2 => char::from_u32(0x1f300 + r.below(0x300) as u32).unwrap_or('🦀'),
            _ => *r.pick(&['0', '1', '9', '.', '/', ':', '-', 'a', 'm', 's', 'h', 'd', ' ']),
        })
        .collect()
}

fn random_value(r: &mut Rng, depth: usize) -> toml::Value {
    use toml::Value;
    match r.below(if depth > 4 { 6 } else { 9 }) {
        0 => Value::Integer(*r.pick(INTERESTING_INTS)),
        1 => Value::Integer(r.next() as i64),
        2 => Value::String((*r.pick(INTERESTING_STRS)).to_owned()),
        3 => Value::String(random_string(r)),
        4 => Value::Boolean(r.chance(2)),
        5 => Value::Float(*r.pick(&[0.0, -0.0, 1.5, 1e300, f64::NAN, f64::INFINITY, 256.0])),
        6 => Value::Array((0..r.below(4)).map(|_| random_value(r, depth + 1)).collect()),
        7 => {
            let mut t = toml::Table::new();
            for _ in 0..r.below(3) {
                t.insert(random_key(r), random_value(r, depth + 1));
            }
            Value::Table(t)
        }
        _ => Value::Datetime("1979-05-27T07:32:00Z".parse().unwrap()),
    }
}

fn random_key(r: &mut Rng) -> String {
    let (sec, keys) = *r.pick(KEYS);
    match r.below(5) {
        0 => sec.to_owned(),
        1 => random_string(r),
        2 => format!("{}x", r.pick(keys)),
        _ => (*r.pick(keys)).to_owned(),
    }
}

/// A value nested `depth` levels (arrays, or inline tables).
fn nested(depth: usize, tables: bool) -> toml::Value {
    let mut v = toml::Value::Integer(1);
    for _ in 0..depth {
        v = if tables {
            let mut t = toml::Table::new();
            t.insert("x".into(), v);
            toml::Value::Table(t)
        } else {
            toml::Value::Array(vec![v])
        };
    }
    v
}

/// (section or array-of-tables element, key) paths of a document's scalar-ish values.
fn paths(root: &toml::Table) -> Vec<(String, Option<usize>, String)> {
    let mut out = Vec::new();
    for (s, v) in root {
        match v {
            toml::Value::Table(t) => out.extend(t.keys().map(|k| (s.clone(), None, k.clone()))),
            toml::Value::Array(a) => {
                for (i, e) in a.iter().enumerate() {
                    if let toml::Value::Table(t) = e {
                        out.extend(t.keys().map(|k| (s.clone(), Some(i), k.clone())));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn table_at<'a>(root: &'a mut toml::Table, sec: &str, idx: Option<usize>) -> Option<&'a mut toml::Table> {
    match (root.get_mut(sec)?, idx) {
        (toml::Value::Table(t), None) => Some(t),
        (toml::Value::Array(a), Some(i)) => a.get_mut(i)?.as_table_mut(),
        _ => None,
    }
}

/// One TOML-level mutation of `doc`; None when the document is not TOML or the result
/// cannot be serialized.
fn mutate_toml(r: &mut Rng, doc: &str) -> Option<String> {
    let mut root: toml::Table = toml::from_str(doc).ok()?;
    let ps = paths(&root);
    for _ in 0..1 + r.below(3) {
        match r.below(11) {
            // drop a key, or a whole section
            0 if !ps.is_empty() => {
                let (s, i, k) = r.pick(&ps).clone();
                if let Some(t) = table_at(&mut root, &s, i) {
                    t.remove(&k);
                }
            }
            1 => {
                let s = r.pick(&SECTIONS.iter().chain(&TABLE_ARRAYS).collect::<Vec<_>>()).to_string();
                root.remove(&s);
            }
            // copy a key into another section
            2 if !ps.is_empty() => {
                let (s, i, k) = r.pick(&ps).clone();
                let v = table_at(&mut root, &s, i).and_then(|t| t.get(&k).cloned())?;
                let (s2, i2, _) = r.pick(&ps).clone();
                if let Some(t) = table_at(&mut root, &s2, i2) {
                    t.insert(k, v);
                }
            }
            // swap the values of two keys
            3 if ps.len() > 1 => {
                let (s, i, k) = r.pick(&ps).clone();
                let (s2, i2, k2) = r.pick(&ps).clone();
                let a = table_at(&mut root, &s, i).and_then(|t| t.get(&k).cloned())?;
                let b = table_at(&mut root, &s2, i2).and_then(|t| t.get(&k2).cloned())?;
                table_at(&mut root, &s, i)?.insert(k, b);
                table_at(&mut root, &s2, i2)?.insert(k2, a);
            }
            // a value of another type, or a random / interesting one
            4 | 5 if !ps.is_empty() => {
                let (s, i, k) = r.pick(&ps).clone();
                let v = random_value(r, 0);
                table_at(&mut root, &s, i)?.insert(k, v);
            }
            // change a number or a string in place
            6 if !ps.is_empty() => {
                let (s, i, k) = r.pick(&ps).clone();
                let t = table_at(&mut root, &s, i)?;
                let v = match t.get(&k)? {
                    toml::Value::Integer(n) => toml::Value::Integer(match r.below(4) {
                        0 => n.wrapping_neg(),
                        1 => n.wrapping_mul(1 << r.below(40)),
                        2 => n.wrapping_add(r.below(3) as i64 - 1),
                        _ => *r.pick(INTERESTING_INTS),
                    }),
                    toml::Value::String(st) => {
                        let mut st = st.clone();
                        match r.below(3) {
                            0 if !st.is_empty() => {
                                let at =
                                    st.char_indices().nth(r.below(st.chars().count())).map_or(0, |c| c.0);
                                st.insert_str(at, &random_string(r));
                            }
                            1 => st = st.repeat(1 + r.below(200)),
                            _ => {
                                let add: &&str = r.pick(INTERESTING_STRS);
                                st.push_str(add)
                            }
                        }
                        toml::Value::String(st)
                    }
                    toml::Value::Array(a) => {
                        let mut a = a.clone();
                        match r.below(3) {
                            0 => a.clear(),
                            1 if !a.is_empty() => {
                                let e = a[r.below(a.len())].clone();
                                for _ in 0..1 + r.below(300) {
                                    a.push(e.clone());
                                }
                            }
                            _ => a.push(random_value(r, 1)),
                        }
                        toml::Value::Array(a)
                    }
                    other => other.clone(),
                };
                t.insert(k, v);
            }
            // an unknown or misspelt key, an unknown section
            7 => {
                let (s, i, _) =
                    if ps.is_empty() { ("nat".into(), None, String::new()) } else { r.pick(&ps).clone() };
                let k = random_key(r);
                let v = random_value(r, 0);
                match table_at(&mut root, &s, i) {
                    Some(t) => {
                        t.insert(k, v);
                    }
                    None => {
                        root.insert(k, v);
                    }
                }
            }
            // deep nesting
            8 if !ps.is_empty() => {
                let (s, i, k) = r.pick(&ps).clone();
                let v = nested(1 + r.below(60), r.chance(2));
                table_at(&mut root, &s, i)?.insert(k, v);
            }
            // a section as an array of tables, or an array of tables as a section / scalar
            9 => {
                let s = r.pick(&SECTIONS.iter().chain(&TABLE_ARRAYS).collect::<Vec<_>>()).to_string();
                let v = root.remove(&s).unwrap_or(toml::Value::Table(toml::Table::new()));
                let v = match (v, r.below(3)) {
                    (toml::Value::Table(t), 0) => toml::Value::Array(vec![toml::Value::Table(t)]),
                    (toml::Value::Array(mut a), 0) if !a.is_empty() => a.swap_remove(0),
                    (_, 1) => random_value(r, 0),
                    (v, _) => {
                        let n = 1 + r.below(300);
                        toml::Value::Array(vec![v; n.min(3000)])
                    }
                };
                root.insert(s, v);
            }
            _ => {
                // many [[exclude]] / [[forward]] entries
                let s = *r.pick(&TABLE_ARRAYS);
                let mut t = toml::Table::new();
                if s == "exclude" {
                    t.insert("prefix".into(), format!("198.18.{}.0/24", r.below(256)).into());
                } else {
                    t.insert("proto".into(), (*r.pick(&["tcp", "udp"])).into());
                    t.insert("outside".into(), format!("203.0.113.40:{}", 1 + r.below(65535)).into());
                    t.insert("inside".into(), format!("100.64.0.{}:{}", r.below(256), r.below(65536)).into());
                }
                let n = 1 + r.below(50);
                let entry = root.entry(s).or_insert_with(|| toml::Value::Array(Vec::new()));
                if let toml::Value::Array(a) = entry {
                    a.extend(std::iter::repeat_n(toml::Value::Table(t), n));
                }
            }
        }
    }
    toml::to_string(&root).ok()
}

/// One byte-level mutation.
fn mutate_bytes(r: &mut Rng, doc: &str, other: &str) -> String {
    let mut b = doc.as_bytes().to_vec();
    for _ in 0..1 + r.below(4) {
        let n = b.len();
        match r.below(9) {
            0 if n > 0 => {
                let i = r.below(n);
                b[i] ^= 1 << r.below(8);
            }
            1 if n > 0 => {
                let i = r.below(n);
                b[i] = *r.pick(b"[]{}=\"'.,#\n\\-+_:0123456789aeinstx \t\r\x00\xff\xc3");
            }
            2 => {
                let i = r.below(n + 1);
                let ins: Vec<u8> = (0..1 + r.below(8)).map(|_| r.next() as u8).collect();
                b.splice(i..i, ins);
            }
            3 if n > 0 => {
                let i = r.below(n);
                let len = r.below((n - i).min(64) + 1);
                b.drain(i..i + len);
            }
            4 if n > 0 => {
                // duplicate a line (a duplicate key, or a repeated header)
                let text = String::from_utf8_lossy(&b).into_owned();
                let lines: Vec<&str> = text.lines().collect();
                let l = r.below(lines.len());
                let mut out = lines[..=l].join("\n");
                out.push('\n');
                out += &lines[l..].join("\n");
                b = out.into_bytes();
            }
            5 => {
                // splice with another input
                let o = other.as_bytes();
                let i = r.below(n + 1);
                let j = r.below(o.len() + 1);
                b.truncate(i);
                b.extend_from_slice(&o[j..]);
            }
            6 if n > 0 => b.truncate(r.below(n)),
            7 => {
                // deep nesting in the text itself (toml's own recursion limit)
                let depth = 1 + r.below(5000);
                let (open, close) = if r.chance(2) { ("[", "]") } else { ("{a=", "}") };
                let s = format!("\nx = {}1{}\n", open.repeat(depth), close.repeat(depth));
                let i = r.below(n + 1);
                b.splice(i..i, s.into_bytes());
            }
            _ => {
                let i = r.below(n + 1);
                let s = format!(" {} ", r.pick(INTERESTING_STRS));
                b.splice(i..i, s.into_bytes());
            }
        }
    }
    // the parser takes a &str: a config file that is not UTF-8 never reaches it
    String::from_utf8_lossy(&b).into_owned()
}

// ---------------------------------------------------------------------------------------

#[test]
fn config_parser_survives_mutated_inputs() {
    let secs: u64 = std::env::var("NATRIX_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let seed: u64 =
        std::env::var("NATRIX_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x6e61_7472_6978);
    let budget = Duration::from_secs(secs);

    let seeds = seeds();
    for (name, text) in &seeds {
        match Config::from_toml_str(text) {
            Ok(_) => {}
            Err(e) => panic!("seed {name} does not parse: {e}\n{text}"),
        }
        check(text).unwrap_or_else(|m| panic!("seed {name}: {m}"));
    }
    // a corpus that grows with the inputs that parsed (they lead deeper into validation)
    let mut corpus: Vec<String> = seeds.into_iter().map(|(_, t)| t).collect();
    let mut r = Rng(seed);
    let start = Instant::now();
    let (mut n, mut ok, mut syntax, mut key) = (0u64, 0u64, 0u64, 0u64);
    while n < MAX_INPUTS && start.elapsed() < budget {
        let base = corpus[r.below(corpus.len())].clone();
        let input = match r.below(3) {
            0 | 1 => match mutate_toml(&mut r, &base) {
                Some(s) => s,
                None => continue,
            },
            _ => {
                let other = corpus[r.below(corpus.len())].clone();
                mutate_bytes(&mut r, &base, &other)
            }
        };
        // one input must not eat the budget: a config is a few KiB, 64 KiB is generous
        if input.len() > MAX_INPUT_LEN {
            continue;
        }
        n += 1;
        match check(&input) {
            Ok(true) => {
                ok += 1;
                if corpus.len() < 2000 && input.len() < 64 * 1024 {
                    corpus.push(input);
                }
            }
            Ok(false) => match Config::from_toml_str(&input) {
                Err(ConfigError::Syntax { .. }) => syntax += 1,
                _ => key += 1,
            },
            Err(m) => panic!(
                "config fuzzer: seed {seed}, input #{n}: {m}\n--- input ({} bytes):\n{}\n---",
                input.len(),
                input.chars().take(8000).collect::<String>()
            ),
        }
    }
    let took = start.elapsed();
    eprintln!(
        "config fuzzer: {n} inputs in {took:.2?} (seed {seed}): {ok} parsed, {key} key errors, {syntax} syntax errors; corpus {}",
        corpus.len()
    );
    assert!(n >= 1000, "only {n} inputs in {took:?}");
    assert!(
        ok > 0 && key > 0 && syntax > 0,
        "a kind of outcome never happened: {ok} ok, {key} key, {syntax} syntax"
    );
}
