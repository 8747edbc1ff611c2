// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! docs/ARCHITECTURE.md against the code, so that the document cannot drift silently:
//!
//! * its Numbers table: every size, bound, formula and bit position, each row evaluated and
//!   compared with the generated types (`std::mem::size_of` of the skeleton's structs, the
//!   enums of `bpf/nx_types.h`), the sizing functions, `bpf/*.h` macros and the config's
//!   defaults; and the figures written elsewhere in the text as `N-byte`, `N B`,
//!   `N bytes`, `bits H..L` or `bit N`, which must be values of that table;
//! * its Tables table: every map of the BPF object listed once, no other; each fixed size
//!   the object's; "not pinned" exactly for the maps natrix does not pin;
//! * its backticked names: each counter-like or code name exists (a counter of
//!   `natrix stats`, or a word of the sources);
//! * its source layout: every file under bpf/, src/, bench/{bpf,src,tests}/, tests/ and
//!   scripts/ listed, and every row naming files that exist.
//!
//! Needs no root and no kernel: the skeleton is only opened, never loaded.

use std::collections::{BTreeMap, BTreeSet};
use std::mem::{size_of, size_of_val, MaybeUninit};
use std::path::{Path, PathBuf};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapType;
use natrix::abi;
use natrix::config::{Config, Daemon, FibCache, Timeouts};
use natrix::dataplane::Sizes;
use natrix::skel::types::{
    nx_config, nx_fibc_ent, nx_fibc_word, nx_frag_key, nx_frag_sizes, nx_iface, nx_log_ev, nx_map,
    nx_map_key, nx_reap_sizes, nx_sess, nx_sess_key, nx_sizes, nx_sub,
};
use natrix::tables;

const DOC: &str = "docs/ARCHITECTURE.md";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn doc() -> String {
    std::fs::read_to_string(root().join(DOC)).expect("docs/ARCHITECTURE.md")
}

/// The lines (1-based number, text) of the section whose heading is `heading` exactly, up to
/// the next heading of the same or a higher level.
fn section<'a>(doc: &'a str, heading: &str) -> Vec<(usize, &'a str)> {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut out = Vec::new();
    let mut inside = false;
    for (i, line) in doc.lines().enumerate() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes > 0 && line[hashes..].starts_with(' ') {
            if inside && hashes <= level {
                break;
            }
            if line == heading {
                inside = true;
                continue;
            }
        }
        if inside {
            out.push((i + 1, line));
        }
    }
    assert!(!out.is_empty(), "{DOC}: no section {heading:?}");
    out
}

/// The body rows of the markdown tables in `lines`, split into trimmed cells.
fn table_rows<'a>(lines: &[(usize, &'a str)]) -> Vec<(usize, Vec<&'a str>)> {
    lines
        .iter()
        .filter(|(_, l)| l.starts_with('|') && !l.starts_with("|---"))
        .map(|(n, l)| (*n, l.trim().trim_matches('|').split('|').map(str::trim).collect::<Vec<_>>()))
        // the header rows
        .filter(|(_, c)| !matches!(c.first(), Some(&"quantity" | &"file" | &"map")))
        .collect()
}

/// The backticked parts of a cell.
fn ticked(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

// ---- a small evaluator for the Numbers table's formulas ----------------------------------

struct Expr<'a> {
    s: Vec<char>,
    i: usize,
    vars: &'a BTreeMap<&'static str, f64>,
}

impl Expr<'_> {
    fn eval(s: &str, vars: &BTreeMap<&'static str, f64>) -> Result<f64, String> {
        let mut e = Expr { s: s.chars().filter(|c| !c.is_whitespace()).collect(), i: 0, vars };
        let v = e.sum()?;
        if e.i != e.s.len() {
            return Err(format!("cannot read {s:?} from {:?} on", e.s[e.i..].iter().collect::<String>()));
        }
        Ok(v)
    }
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: char) -> bool {
        let hit = self.peek() == Some(c);
        self.i += usize::from(hit);
        hit
    }
    fn sum(&mut self) -> Result<f64, String> {
        let mut v = self.product()?;
        loop {
            if self.eat('+') {
                v += self.product()?;
            } else if self.eat('-') || self.eat('−') {
                v -= self.product()?;
            } else {
                return Ok(v);
            }
        }
    }
    fn product(&mut self) -> Result<f64, String> {
        let mut v = self.power()?;
        loop {
            if self.eat('×') || self.eat('*') {
                v *= self.power()?;
            } else if self.eat('/') {
                v /= self.power()?;
            } else {
                return Ok(v);
            }
        }
    }
    fn power(&mut self) -> Result<f64, String> {
        let b = self.atom()?;
        Ok(if self.eat('^') { b.powf(self.atom()?) } else { b })
    }
    fn atom(&mut self) -> Result<f64, String> {
        if self.eat('(') {
            let v = self.sum()?;
            return if self.eat(')') { Ok(v) } else { Err("a ( without )".into()) };
        }
        if self.eat('⌈') {
            let v = self.sum()?;
            return if self.eat('⌉') { Ok(v.ceil()) } else { Err("a ⌈ without ⌉".into()) };
        }
        if self.eat('⌊') {
            let v = self.sum()?;
            return if self.eat('⌋') { Ok(v.floor()) } else { Err("a ⌊ without ⌋".into()) };
        }
        let start = self.i;
        if self.peek().is_some_and(|c| c.is_ascii_digit()) {
            while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
                self.i += 1;
            }
            let t: String = self.s[start..self.i].iter().collect();
            return t.parse().map_err(|_| format!("not a number: {t}"));
        }
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            self.i += 1;
        }
        let name: String = self.s[start..self.i].iter().collect();
        if name.is_empty() {
            return Err(format!("expected a number, a name or ( at {}", self.i));
        }
        if self.eat('(') {
            let mut args = vec![self.sum()?];
            while self.eat(',') {
                args.push(self.sum()?);
            }
            if !self.eat(')') {
                return Err(format!("{name}( without )"));
            }
            return match (name.as_str(), args.as_slice()) {
                ("p2", [x]) => Ok((x.ceil() as u64).next_power_of_two() as f64),
                ("max", [a, b]) => Ok(a.max(*b)),
                _ => Err(format!("unknown function {name} of {} arguments", args.len())),
            };
        }
        self.vars.get(name.as_str()).copied().ok_or_else(|| format!("unknown name {name}"))
    }
}

// ---- what the code says ------------------------------------------------------------------

/// What a row of the Numbers table must say.
enum Want {
    /// a number
    N(u64),
    /// a number, within 0.1% (per-entry bytes of large tables)
    About(f64),
    /// a bit range, high and low
    Bits(u32, u32),
    /// a formula of one variable: its name, the code's function, sample values
    F(&'static str, Box<dyn Fn(u64) -> u64>, Vec<u64>),
}

/// The bits a mask occupies once shifted: (highest, lowest).
fn bits_of(mask_at_0: u64, shift: u32) -> Want {
    let w = 64 - mask_at_0.leading_zeros();
    Want::Bits(shift + w - 1, shift)
}

fn mask_bits(m: u64) -> Want {
    Want::Bits(63 - m.leading_zeros(), m.trailing_zeros())
}

/// `#define NAME value` in bpf/*.h or bpf/*.c (macros the skeleton does not see).
fn c_macro(name: &str) -> u64 {
    let dir = root().join("bpf");
    for e in std::fs::read_dir(&dir).expect("bpf/").flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for line in text.lines() {
            let mut w = line.split_whitespace();
            if w.next() == Some("#define") && w.next() == Some(name) {
                let v = w.next().unwrap_or_default();
                return v.parse().unwrap_or_else(|_| panic!("#define {name} {v}: not a plain number"));
            }
        }
    }
    panic!("no #define {name} in bpf/");
}

const MINIMAL: &str =
    "[interfaces]\ninside = [\"lan0\"]\noutside = [\"wan0\"]\n[pool]\naddresses = [\"203.0.113.0/29\"]\n";

fn config(extra: &str) -> Config {
    Config::from_toml_str(&format!("{MINIMAL}{extra}")).unwrap_or_else(|e| panic!("test config: {e}"))
}

fn secs(d: std::time::Duration) -> u64 {
    d.as_secs()
}

/// Every row the Numbers table must have, by its first cell, with what the code says.
fn wanted() -> Vec<(&'static str, Want)> {
    use Want::*;
    let max_blocks = nx_sizes::NX_MAX_BLOCKS_PER_SUB.0 as u64;
    let u64b = size_of::<u64>() as u64;
    let pool_cfg = config("");
    let pool = pool_cfg.pool.addresses.len() as u64;
    let ports = Sizes::from_config(&pool_cfg).ports as u64;
    let pool_max = {
        // the most addresses a pool may have: accepted at that many, refused at one more
        let at = |extra: &str| {
            Config::from_toml_str(&format!(
                "[interfaces]\ninside = [\"lan0\"]\noutside = [\"wan0\"]\n[pool]\naddresses = [\"10.0.0.0/20\"{extra}]\n"
            ))
        };
        let n = at("").expect("a pool of a /20").pool.addresses.len() as u64;
        assert!(at(", \"10.1.0.0\"").is_err(), "a pool of {} addresses is accepted", n + 1);
        n
    };
    let fibc_gen_hi = {
        // SAFETY: nx_fibc_ent is a plain C struct of integers: all zeros is a valid value.
        let e: nx_fibc_ent = unsafe { std::mem::zeroed() };
        (size_of_val(&e.gen) * 8 - 1) as u32
    };
    let ring = |h: u64| Sizes::from_config(&config(&format!("[fragments]\nmax_held = {h}\n"))).frag_rb as u64;
    let log_ring =
        |e: u64| Sizes::from_config(&config(&format!("[log]\nbuffer_events = {e}\n"))).log_rb as u64;
    let t = Timeouts::default();
    let large = 1u32 << 28;
    vec![
        ("`struct nx_sub`, a subscriber entry", N(size_of::<nx_sub>() as u64)),
        ("`struct nx_sub` block slots", N(max_blocks)),
        ("`struct nx_map`, a mapping-table slot", N(size_of::<nx_map>() as u64)),
        ("`struct nx_sess`, a session-table slot", N(size_of::<nx_sess>() as u64)),
        ("a table bucket", N(2 * size_of::<nx_sess>() as u64)),
        ("`struct nx_map_key`", N(size_of::<nx_map_key>() as u64)),
        ("`struct nx_sess_key`", N(size_of::<nx_sess_key>() as u64)),
        ("`struct nx_config`", N(size_of::<nx_config>() as u64)),
        ("`struct nx_iface`", N(size_of::<nx_iface>() as u64)),
        ("`struct nx_fibc_ent`, a FIB cache slot", N(size_of::<nx_fibc_ent>() as u64)),
        ("`struct nx_frag_key`", N(size_of::<nx_frag_key>() as u64)),
        ("a port word, a block word", N(u64b)),
        (
            "`nx_subs` entries",
            F("n", Box::new(|n| tables::sub_slots(n as u32) as u64), vec![1, 1000, 65536, 999_999]),
        ),
        ("subscriber table search bound", N(abi::SUB_PROBE as u64)),
        (
            "`nx_maps`, `nx_sess` home buckets",
            F("n", Box::new(|n| tables::tab_buckets(n as u32) as u64), vec![1, 7, 1000, 1 << 20, 10_000_001]),
        ),
        (
            "`nx_maps`, `nx_sess` slots",
            F("n", Box::new(|n| tables::tab_slots(n as u32) as u64), vec![1, 7, 1000, 1 << 20, 10_000_001]),
        ),
        ("session and mapping table displacement bound", N(abi::TAB_PROBE as u64)),
        (
            "bytes per configured session or mapping (large tables)",
            About(tables::tab_slots(large) as f64 * size_of::<nx_sess>() as f64 / large as f64),
        ),
        (
            "bytes per configured subscriber (large tables)",
            About(tables::sub_slots(large) as f64 * size_of::<nx_sub>() as f64 / large as f64),
        ),
        (
            "`nx_ports` entries",
            F("pool", Box::new(move |p| if p == pool { ports } else { u64::MAX }), vec![pool]),
        ),
        ("`nx_ports` bytes per pool address", N(abi::NPROTO as u64 * abi::PORTS_PER_ADDR as u64 * u64b)),
        ("pool addresses at most", N(pool_max)),
        ("`nx_frag_rb` bytes", F("held", Box::new(ring), vec![1, 2, 256, 5000])),
        ("`nx_log_rb` bytes", F("events", Box::new(log_ring), vec![1024, 1025, 262_144, 1 << 20])),
        ("`struct nx_log_ev`", N(size_of::<nx_log_ev>() as u64)),
        ("largest early fragment held", N(nx_frag_sizes::NX_FRAG_HOLD_MAX.0 as u64)),
        ("early fragment with a small record, at most", N(nx_frag_sizes::NX_FRAG_HOLD_SMALL.0 as u64)),
        ("small fragment record", N(nx_frag_sizes::NX_FRAG_REC_SMALL.0 as u64)),
        ("`nx_ifaces`, `nx_tx` entries", N(nx_sizes::NX_MAX_IFACES.0 as u64)),
        ("`nx_ifrole` entries (ifindex below)", N(abi::IFROLE_DIRECT as u64)),
        ("MACs an interface entry holds", N(abi::IF_MACS as u64)),
        ("`nx_subnets`, `nx_excl` entries", N(map_entries("nx_subnets").min(map_entries("nx_excl")))),
        ("subscriber prefixes in `nx_config`", N(abi::SUBNETS as u64)),
        ("pool runs in `nx_config`", N(abi::POOL_RUNS as u64)),
        ("`nx_tab_locks` table stripes", N(c_macro("NX_TAB_LOCKS"))),
        ("`nx_tab_locks` endpoint stripes", N(c_macro("NX_EP_LOCKS"))),
        ("`nx_tab_locks` entries", N(map_entries("nx_tab_locks"))),
        ("tries for an insert lock", N(c_macro("NX_TAB_LOCK_SPIN"))),
        ("`nx_tab_cnt` entries", N(map_entries("nx_tab_cnt"))),
        ("reaper batch", N(nx_reap_sizes::NX_REAP_BATCH.0 as u64)),
        ("a tick", N(1 << abi::TICK_SHIFT)),
        ("session refresh slack", N(c_macro("NX_REFRESH_SLACK"))),
        ("FIB cache sign-of-life skew allowed", N(nx_fibc_word::NX_FIBC_SKEW.0 as u64)),
        ("FIB cache trusts bit 0 within", N(nx_fibc_word::NX_FIBC_ALIVE.0 as u64)),
        ("ICMP error natrix sends, at most", N(c_macro("NX_ICMP_QUOTE_MAX") + 20 + 8)),
        ("port word: state", Bits(63, abi::PORT_STATE_SHIFT)),
        (
            "port word: sessions of a word that is a mapping",
            bits_of(abi::PORT_NSESS_MAX, abi::PORT_NSESS_SHIFT),
        ),
        ("port word: most sessions counted", N(abi::PORT_NSESS_MAX)),
        ("port word, USED: inside address", Bits(abi::PORT_IP_SHIFT + 31, abi::PORT_IP_SHIFT)),
        ("port word, USED: inside port", Bits(abi::PORT_IP_SHIFT - 1, 0)),
        ("port word, HELD: release second", Bits(31, 0)),
        ("block word: owner", Bits(abi::BLOCK_USED_SHIFT - 1, 0)),
        ("block word: ports counted", bits_of(abi::BLOCK_USED_MASK, abi::BLOCK_USED_SHIFT)),
        ("block word: NSESS", bits_of(abi::BLOCK_NSESS_MASK, abi::BLOCK_NSESS_SHIFT)),
        ("block word: NSESS saturates at", N(abi::BLOCK_NSESS_MASK)),
        ("block word: MIXED", mask_bits(abi::BLOCK_MIXED)),
        ("subscriber key word: state", bits_of(abi::SUB_STATE_MASK, abi::SUB_STATE_SHIFT)),
        ("subscriber key word: address", Bits(abi::SUB_STATE_SHIFT - 1, 0)),
        ("table slot word 0: state", mask_bits(abi::SLOT_STATE_MASK)),
        ("table slot word 0: second home", mask_bits(abi::SLOT_ALT)),
        ("table slot word 0: generation", mask_bits(abi::SLOT_GEN_MASK)),
        ("bucket counts: byte offset in a slot", N(abi::SLOT_OVF_OFF as u64)),
        ("a bucket count", N(size_of::<nx_sess>() as u64 - abi::SLOT_OVF_OFF as u64)),
        ("FIB cache word: destination alone", mask_bits(abi::FIBC_BY_DST)),
        ("FIB cache word: generation", Bits(fibc_gen_hi, abi::FIBC_GEN_STEP.trailing_zeros())),
        ("`TABLE_LAYOUT`", N(tables::TABLE_LAYOUT as u64)),
        ("`timeouts.udp` default", N(secs(t.udp))),
        ("`timeouts.tcp_established` default", N(secs(t.tcp_established))),
        ("`timeouts.tcp_transitory` default", N(secs(t.tcp_transitory))),
        ("`timeouts.icmp` default", N(secs(t.icmp))),
        ("`daemon.sweep_interval` default", N(secs(Daemon::default().sweep_interval))),
        ("`fib_cache.max_age` default", N(FibCache::default().max_age.as_millis() as u64)),
    ]
}

// ---- the BPF object ----------------------------------------------------------------------

/// Every map of the BPF object (the skeleton opened, not loaded): name → (type, entries,
/// flags). Sections of globals (.bss, .rodata) left out.
fn object_maps() -> BTreeMap<String, (MapType, u32, u32)> {
    let mut storage = MaybeUninit::uninit();
    let open = natrix::skel::NatrixSkelBuilder::default().open(&mut storage).expect("opening the BPF object");
    open.open_object()
        .maps()
        .map(|m| (m.name().to_string_lossy().into_owned(), (m.map_type(), m.max_entries(), m.map_flags())))
        .filter(|(n, _)| n.starts_with("nx_"))
        .collect()
}

fn map_entries(name: &str) -> u64 {
    object_maps().get(name).unwrap_or_else(|| panic!("no map {name} in the BPF object")).1 as u64
}

// ---- the tests -----------------------------------------------------------------------------

/// Each row of the Numbers table says what the code says; every quantity the test knows is
/// there, and every row is one the test checks.
#[test]
fn architecture_numbers_are_the_codes() {
    let doc = doc();
    let rows = table_rows(&section(&doc, "## Numbers"));
    let mut want: BTreeMap<&str, Want> = wanted().into_iter().collect();
    let mut bad = Vec::new();
    for (line, cells) in &rows {
        let key = cells[0];
        let Some(w) = want.remove(key) else {
            bad.push(format!("{DOC}:{line}: {key}: no check for this row in tests/docs.rs (or a duplicate)"));
            continue;
        };
        let Some(v) = ticked(cells.get(1).copied().unwrap_or_default()).first().copied() else {
            bad.push(format!("{DOC}:{line}: {key}: no `value` in the second column"));
            continue;
        };
        let no_vars = BTreeMap::new();
        let err = match &w {
            Want::Bits(hi, lo) => match v.split_once("..").map(|(h, l)| (h.parse::<u32>(), l.parse::<u32>()))
            {
                Some((Ok(h), Ok(l))) if (h, l) == (*hi, *lo) => None,
                Some((Ok(_), Ok(_))) => Some(format!("says bits {v}, the code has {hi}..{lo}")),
                _ => Some(format!("`{v}` is not a bit range H..L")),
            },
            Want::N(n) => match Expr::eval(v, &no_vars) {
                Ok(x) if x == *n as f64 => None,
                Ok(x) => Some(format!("says {v} = {x}, the code has {n}")),
                Err(e) => Some(e),
            },
            Want::About(n) => match Expr::eval(v, &no_vars) {
                Ok(x) if (x - n).abs() <= n / 1000.0 => None,
                Ok(x) => Some(format!("says {v} = {x}, the code has {n}")),
                Err(e) => Some(e),
            },
            Want::F(var, f, samples) => samples.iter().find_map(|s| {
                let vars = BTreeMap::from([(*var, *s as f64)]);
                match Expr::eval(v, &vars) {
                    Ok(x) if x == f(*s) as f64 => None,
                    Ok(x) => Some(format!("says {v} = {x} for {var} = {s}, the code has {}", f(*s))),
                    Err(e) => Some(e),
                }
            }),
        };
        if let Some(e) = err {
            bad.push(format!("{DOC}:{line}: {key}: {e}"));
        }
    }
    for key in want.keys() {
        bad.push(format!("{DOC}: Numbers: no row {key:?} (tests/docs.rs checks one)"));
    }
    assert!(bad.is_empty(), "docs/ARCHITECTURE.md's Numbers disagree with the code:\n{}", bad.join("\n"));
}

/// Sizes and bit positions written in the text (outside the Numbers table) are values of
/// that table, which the test above checks.
#[test]
fn architecture_figures_in_the_text_are_in_the_numbers_table() {
    let doc = doc();
    let numbers = section(&doc, "## Numbers");
    let (first, last) = (numbers[0].0, numbers[numbers.len() - 1].0);
    let mut sizes = BTreeSet::new();
    let mut ranges = BTreeSet::new();
    for (_, cells) in table_rows(&numbers) {
        let Some(v) = ticked(cells[1]).first().copied() else { continue };
        if let Some((h, l)) = v.split_once("..") {
            ranges.insert((h.parse::<u64>().unwrap_or(u64::MAX), l.parse::<u64>().unwrap_or(u64::MAX)));
        } else if cells[1].contains("` B") {
            if let Ok(x) = Expr::eval(v, &BTreeMap::new()) {
                sizes.insert(x as u64);
            }
        }
    }
    // the kernel's, not natrix's: the BPF stack
    sizes.insert(512);
    let mut bad = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        let n = i + 1;
        if (first..=last).contains(&n) {
            continue;
        }
        let chars: Vec<char> = line.chars().collect();
        let num_before = |end: usize| -> Option<u64> {
            let mut s = end;
            while s > 0 && chars[s - 1].is_ascii_digit() {
                s -= 1;
            }
            let boundary =
                s == 0 || !(chars[s - 1].is_alphanumeric() || matches!(chars[s - 1], '.' | ',' | '^'));
            (s < end && boundary).then(|| chars[s..end].iter().collect::<String>().parse().unwrap())
        };
        let num_after = |start: usize| -> (Option<u64>, usize) {
            let mut e = start;
            while e < chars.len() && chars[e].is_ascii_digit() {
                e += 1;
            }
            (chars[start..e].iter().collect::<String>().parse().ok(), e)
        };
        let text: String = chars.iter().collect();
        for (at, _) in
            text.match_indices("-byte").chain(text.match_indices(" B")).chain(text.match_indices(" bytes"))
        {
            let at = text[..at].chars().count();
            let after = chars.get(
                at + if chars[at] == '-' {
                    5
                } else if chars[at + 2] == 'y' {
                    6
                } else {
                    2
                },
            );
            if after.is_some_and(|c| c.is_alphanumeric()) {
                continue;
            }
            if let Some(x) = num_before(at) {
                if !sizes.contains(&x) {
                    bad.push(format!("{DOC}:{n}: {x} bytes is no size of the Numbers table"));
                }
            }
        }
        for (at, _) in text.match_indices("bit") {
            let at = text[..at].chars().count();
            let word_start = at == 0 || !chars[at - 1].is_alphanumeric();
            let skip = if chars.get(at + 3) == Some(&'s') { 5 } else { 4 };
            if !word_start || chars.get(at + skip - 1) != Some(&' ') || at + skip >= chars.len() {
                continue;
            }
            let (hi, e) = num_after(at + skip);
            let Some(hi) = hi else { continue };
            let lo = if chars.get(e) == Some(&'.') && chars.get(e + 1) == Some(&'.') {
                num_after(e + 2).0
            } else {
                Some(hi)
            };
            let Some(lo) = lo else { continue };
            if !ranges.contains(&(hi, lo)) {
                bad.push(format!("{DOC}:{n}: bits {hi}..{lo} are no bit range of the Numbers table"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "figures in docs/ARCHITECTURE.md the Numbers table does not have:\n{}",
        bad.join("\n")
    );
}

/// The Tables table lists every map of the BPF object once and no other; its fixed sizes
/// are the object's; "not pinned" is said of exactly the maps natrix does not pin; the
/// type column names the map's type, and "mmapable" the flag.
#[test]
fn architecture_maps_table_is_the_objects() {
    let doc = doc();
    let maps = object_maps();
    let mut seen = BTreeSet::new();
    let mut bad = Vec::new();
    for (line, cells) in table_rows(&section(&doc, "## Tables")) {
        let name = ticked(cells[0]).first().copied().unwrap_or_default();
        if !name.starts_with("nx_") || cells.len() < 7 {
            continue;
        }
        let Some((ty, entries, flags)) = maps.get(name) else {
            bad.push(format!("{DOC}:{line}: {name} is no map of the BPF object"));
            continue;
        };
        if !seen.insert(name) {
            bad.push(format!("{DOC}:{line}: {name} listed twice"));
        }
        if let Ok(n) = cells[3].parse::<u32>() {
            if n != *entries && !matches!(name, "nx_cfg" | "nx_pool" | "nx_pool_idx") {
                bad.push(format!("{DOC}:{line}: {name}: {n} entries, the object has {entries}"));
            }
        }
        let doc_ty = cells[1];
        let ty_ok = match ty {
            MapType::Array => doc_ty.starts_with("array"),
            MapType::PercpuArray => doc_ty.starts_with("per-CPU array"),
            MapType::Hash => doc_ty.starts_with("hash"),
            MapType::LruHash => doc_ty.starts_with("LRU hash"),
            MapType::LpmTrie => doc_ty.starts_with("LPM trie"),
            MapType::DevmapHash => doc_ty.starts_with("devmap hash"),
            MapType::RingBuf => doc_ty.starts_with("ring buffer"),
            MapType::ProgArray => doc_ty.starts_with("program array"),
            _ => false,
        };
        if !ty_ok {
            bad.push(format!("{DOC}:{line}: {name}: type {doc_ty:?}, the object has {ty:?}"));
        }
        let mmapable = flags & libbpf_rs::libbpf_sys::BPF_F_MMAPABLE != 0;
        if mmapable != doc_ty.contains("mmapable") {
            bad.push(format!("{DOC}:{line}: {name}: mmapable is {mmapable} in the object"));
        }
        let pinned = tables::MAP_NAMES.contains(&name);
        if pinned == cells[6].contains("not pinned") {
            bad.push(format!("{DOC}:{line}: {name}: pinned is {pinned} (tables::MAP_NAMES)"));
        }
    }
    for name in maps.keys() {
        if !seen.contains(name.as_str()) {
            bad.push(format!("{DOC}: Tables: the map {name} is not listed"));
        }
    }
    assert!(
        bad.is_empty(),
        "docs/ARCHITECTURE.md's Tables disagree with the BPF object:\n{}",
        bad.join("\n")
    );
}

/// Backticked names: a counter after "drop", "dropped (as)" or "refused" is one of
/// `natrix stats`; any other plain lower-case name is a counter or a word of the sources
/// (bpf/, src/, tests/, bench/, scripts/), so a renamed function, map or counter fails.
#[test]
fn architecture_names_exist() {
    let doc = doc();
    let counters: BTreeSet<&str> = tables::STATS.iter().map(|(_, n)| *n).collect();
    let mut words = BTreeSet::new();
    for f in
        files_under(&root(), &["bpf", "src", "tests", "bench/src", "bench/bpf", "bench/tests", "scripts"])
    {
        let text = std::fs::read_to_string(root().join(&f)).unwrap_or_default();
        for w in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            words.insert(w.to_owned());
        }
    }
    // CLI words and kernel names that are no identifiers of the sources
    let outside = [
        "down",
        "stats",
        "sessions",
        "syscall",
        "bpf_map__reuse_fd",
        "bpf_link_update",
        "bpf_ktime_get_coarse_ns",
    ];
    let mut bad = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        let parts: Vec<&str> = line.split('`').collect();
        for k in (1..parts.len()).step_by(2) {
            let name = parts[k];
            if name.is_empty()
                || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                continue;
            }
            if name.chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            let before = parts[k - 1].trim_end();
            let last = before.rsplit(' ').next().unwrap_or_default();
            let counter_context =
                matches!(last, "drop" | "dropped" | "refused") || before.ends_with("dropped as");
            if counter_context && !counters.contains(name) {
                bad.push(format!("{DOC}:{}: `{name}` is no counter of natrix stats", i + 1));
            } else if !counters.contains(name) && !words.contains(name) && !outside.contains(&name) {
                bad.push(format!("{DOC}:{}: `{name}` is neither a counter nor a name in the sources", i + 1));
            }
        }
    }
    assert!(bad.is_empty(), "names in docs/ARCHITECTURE.md the code does not have:\n{}", bad.join("\n"));
}

/// Files (relative paths) under the given directories of `root`, recursively; hidden
/// files and directories left out.
fn files_under(root: &Path, dirs: &[&str]) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = BTreeSet::new();
    for d in dirs {
        walk(root, &root.join(d), &mut out);
    }
    out
}

/// `pat` against `path`: `*` matches within one component; a pattern ending in `/` matches
/// everything under that directory.
fn layout_matches(pat: &str, path: &str) -> bool {
    if let Some(dir) = pat.strip_suffix('/') {
        return path.starts_with(&format!("{dir}/"));
    }
    let (p, f): (Vec<&str>, Vec<&str>) = (pat.split('/').collect(), path.split('/').collect());
    p.len() == f.len() && p.iter().zip(&f).all(|(p, f)| glob(p.as_bytes(), f.as_bytes()))
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

/// The source-layout table lists every file of the tree's source directories, and every
/// path or pattern it lists names at least one file.
#[test]
fn architecture_source_layout_is_the_tree() {
    let doc = doc();
    let tree =
        files_under(&root(), &["bpf", "src", "bench/src", "bench/bpf", "bench/tests", "tests", "scripts"]);
    let mut listed = Vec::new();
    for (line, cells) in table_rows(&section(&doc, "## Source layout")) {
        for p in ticked(cells[0]) {
            listed.push((line, p));
        }
    }
    assert!(!listed.is_empty(), "{DOC}: no source-layout table");
    let mut bad = Vec::new();
    for (line, pat) in &listed {
        let any = if pat.contains('*') || pat.ends_with('/') {
            files_under(&root(), &[pat.split('*').next().unwrap().rsplit_once('/').map_or(".", |(d, _)| d)])
                .iter()
                .any(|f| layout_matches(pat, f))
        } else {
            root().join(pat).is_file()
        };
        if !any {
            bad.push(format!("{DOC}:{line}: `{pat}` is listed but no such file exists"));
        }
    }
    for f in &tree {
        if !listed.iter().any(|(_, pat)| layout_matches(pat, f)) {
            bad.push(format!("{DOC}: Source layout: {f} is missing from the table"));
        }
    }
    assert!(
        bad.is_empty(),
        "docs/ARCHITECTURE.md's source layout disagrees with the tree:\n{}",
        bad.join("\n")
    );
}
