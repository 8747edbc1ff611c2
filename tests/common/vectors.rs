// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet test vectors as data (tests/vectors/*.json, format in tests/vectors/README.md):
//! the file model, reading and writing it, and running one vector through the XDP data
//! plane with BPF_PROG_TEST_RUN ([`run_vector`]). The runner is tests/packet_vectors.rs,
//! the generator that writes the files tests/gen_vectors.rs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::pkt::*;

/// The `format` every vector file declares; a reader refuses any other.
pub const FORMAT: &str = "natrix-packet-vectors/1";

/// The directory of the checked-in vector files.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

/// One vector file: a group of vectors.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VectorFile {
    pub format: String,
    pub description: String,
    pub vectors: Vec<Vector>,
}

/// One vector: a fresh data plane loaded with `config` and `tab_seed`, the `setup` frames
/// (each checked like the packet itself), then `packet`, the case the vector is about.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Vector {
    pub name: String,
    pub doc: String,
    /// The whole natrix configuration, as the TOML file's tables in JSON.
    pub config: serde_json::Map<String, serde_json::Value>,
    /// The tables' hash seed (nx_config.tab_seed), which places walk mappings.
    pub tab_seed: u32,
    /// Interface MTUs other than 1500 (the topology's), by interface name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mtu: BTreeMap<String, u32>,
    pub setup: Vec<Step>,
    pub packet: Step,
}

/// One frame through one program, and what must come of it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// "inside" (nx_xdp_inside, ingress in0) or "outside" (nx_xdp_outside, ingress out0).
    pub program: String,
    /// The whole Ethernet frame, hex.
    pub input: String,
    /// XDP_DROP, XDP_PASS, XDP_TX or XDP_REDIRECT.
    pub verdict: String,
    /// The counter that says what became of the frame; one of `counters`.
    pub reason: String,
    /// Every counter that moves and by how much (all others stay, fib_lookups excepted).
    pub counters: BTreeMap<String, u64>,
    /// The frame as the program left it, hex (absent for XDP_DROP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// [offset, length] ranges of `output` whose value is the implementation's choice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_dont_care: Vec<[usize; 2]>,
}

pub fn to_hex(f: &[u8]) -> String {
    f.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn from_hex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err(format!("odd number of hex digits ({})", s.len()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("hex at {i}: {e}")))
        .collect()
}

pub fn side_of(program: &str) -> Result<Side, String> {
    match program {
        "inside" => Ok(Side::Inside),
        "outside" => Ok(Side::Outside),
        p => Err(format!("program {p:?}: expected \"inside\" or \"outside\"")),
    }
}

pub fn side_name(s: Side) -> &'static str {
    match s {
        Side::Inside => "inside",
        Side::Outside => "outside",
    }
}

pub fn verdict_of(name: &str) -> Result<u32, String> {
    [XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT]
        .into_iter()
        .find(|v| verdict_name(*v) == name)
        .ok_or_else(|| format!("verdict {name:?}: expected XDP_DROP, XDP_PASS, XDP_TX or XDP_REDIRECT"))
}

/// The natrix TOML text of a vector's `config`.
pub fn config_toml(config: &serde_json::Map<String, serde_json::Value>) -> Result<String, String> {
    toml::to_string(config).map_err(|e| format!("config cannot be written as TOML: {e}"))
}

/// The test configuration (tests/common/pkt.rs's [`Cfg`]) that writes exactly a vector's
/// `config`: the base configuration with every value of `config` set over it, arrays of
/// tables ([[exclude]]) appended; Err when the result is not `config` (a key of the base
/// the vector does not have).
pub fn cfg_of(config: &serde_json::Map<String, serde_json::Value>) -> Result<Cfg, String> {
    let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
    let mut c = Cfg::default();
    for (sec, v) in config {
        match v {
            serde_json::Value::Object(kv) => {
                for (k, val) in kv {
                    let t = toml::Value::try_from(val).map_err(|e| format!("config {sec}.{k}: {e}"))?;
                    c = c.set(leak(sec), leak(k), &t.to_string());
                }
            }
            serde_json::Value::Array(_) => {
                let mut one = serde_json::Map::new();
                one.insert(sec.clone(), v.clone());
                c = c.raw(&config_toml(&one)?);
            }
            _ => return Err(format!("config {sec}: expected a table or an array of tables")),
        }
    }
    let got = config_json(&c.toml());
    if &got != config {
        return Err(format!("config: the base test configuration has more than the vector's: {got:?}"));
    }
    Ok(c)
}

/// The `config` of a vector, from a TOML text.
pub fn config_json(toml_text: &str) -> serde_json::Map<String, serde_json::Value> {
    let v: toml::Value = toml::from_str(toml_text).expect("expected the test config to parse as TOML");
    match serde_json::to_value(v).expect("expected TOML to convert to JSON") {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("a TOML document is a table"),
    }
}

/// Parses one vector file and checks what can be checked without running it: the format,
/// names unique and present, programs, verdicts, hex, the reason among the counters, the
/// counters known to this data plane, an output exactly when the verdict is not XDP_DROP.
pub fn parse(text: &str) -> Result<VectorFile, String> {
    let f: VectorFile = serde_json::from_str(text).map_err(|e| format!("not a vector file: {e}"))?;
    if f.format != FORMAT {
        return Err(format!("format {:?}, expected {FORMAT:?}", f.format));
    }
    if f.vectors.is_empty() {
        return Err("no vectors".into());
    }
    let mut names = std::collections::HashSet::new();
    for v in &f.vectors {
        if v.name.is_empty() || !names.insert(v.name.clone()) {
            return Err(format!("vector name {:?} empty or used twice", v.name));
        }
        config_toml(&v.config).map_err(|e| format!("{}: {e}", v.name))?;
        if let Some(i) = v.mtu.keys().find(|i| *i != IN_IF && *i != OUT_IF) {
            return Err(format!("{}: mtu of {i:?}: the topology has {IN_IF} and {OUT_IF}", v.name));
        }
        if v.config.contains_key("forward") {
            // installed by configure() under the random seed, before the vector's seed is set
            return Err(format!("{}: static forwards are not supported in vectors", v.name));
        }
        for (i, s) in v.setup.iter().chain([&v.packet]).enumerate() {
            check_step(s).map_err(|e| format!("{} step {i}: {e}", v.name))?;
        }
    }
    Ok(f)
}

fn check_step(s: &Step) -> Result<(), String> {
    side_of(&s.program)?;
    let verdict = verdict_of(&s.verdict)?;
    let input = from_hex(&s.input).map_err(|e| format!("input: {e}"))?;
    if input.len() < ETH_LEN {
        return Err("input shorter than an Ethernet header".into());
    }
    for n in s.counters.keys() {
        if natrix::tables::stat_index(n).is_none() {
            return Err(format!("no counter named {n:?}"));
        }
    }
    if s.counters.get(&s.reason).copied().unwrap_or(0) == 0 {
        return Err(format!("reason {:?} is not among the counters that move", s.reason));
    }
    match (&s.output, verdict) {
        (Some(_), XDP_DROP) => return Err("an output with XDP_DROP".into()),
        (None, v) if v != XDP_DROP => return Err(format!("no output with {}", s.verdict)),
        _ => {}
    }
    if let Some(o) = &s.output {
        let o = from_hex(o).map_err(|e| format!("output: {e}"))?;
        for [off, len] in &s.output_dont_care {
            if off + len > o.len() {
                return Err(format!("output_dont_care [{off}, {len}] beyond the output"));
            }
        }
    }
    Ok(())
}

/// Every vector file in `dir`, sorted by name, parsed. Panics (naming the file) when the
/// directory holds none, or a file does not parse.
pub fn load_all(dir: &Path) -> Vec<(String, VectorFile)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("expected the vector directory {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "expected vector files (*.json) in {}, found none", dir.display());
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            let f = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().expect("name").to_string_lossy().into_owned(), f)
        })
        .collect()
}

/// Gives the freshly configured data plane of `env` the vector's hash seed (its tables are
/// empty: nothing sits where the random seed put it).
pub fn set_seed(env: &Env, seed: u32) {
    let t = &env.dp.tables;
    assert!(
        t.mappings().expect("nx_maps").is_empty() && t.sessions().expect("nx_sess").is_empty(),
        "expected empty tables before the vector's seed is set"
    );
    let mut c = t.config().expect("expected nx_cfg to be readable");
    c.tab_seed = seed;
    t.write_config(&c).expect("expected nx_cfg to be writable");
}

/// Sets the interface MTUs a vector asks for.
pub fn set_mtus(env: &Env, mtu: &BTreeMap<String, u32>) {
    for (ifname, m) in mtu {
        env.ip(&["link", "set", ifname, "mtu", &m.to_string()]);
    }
}

/// The counters that moved between `before` and `after` (fib_lookups aside: how often the
/// FIB cache misses depends on what ran before).
pub fn moved(before: &[u64], after: &[u64]) -> BTreeMap<String, u64> {
    natrix::tables::STATS
        .iter()
        .filter(|(_, n)| *n != "fib_lookups")
        .filter_map(|(s, n)| {
            let d = after[s.0 as usize].wrapping_sub(before[s.0 as usize]);
            (d != 0).then(|| (n.to_string(), d))
        })
        .collect()
}

/// `f` with the ranges set to zero.
pub fn masked(f: &[u8], ranges: &[[usize; 2]]) -> Vec<u8> {
    let mut f = f.to_vec();
    for [off, len] in ranges {
        for b in f.iter_mut().skip(*off).take(*len) {
            *b = 0;
        }
    }
    f
}

/// Whether a frame is IPv4 with at least a whole IP header.
fn is_ipv4(f: &[u8]) -> bool {
    f.len() >= ETH_LEN + 20 && f[12..14] == [0x08, 0x00] && f[ETH_LEN] >> 4 == 4 && f.len() >= l4_off(f)
}

/// Checks an output frame's checksums with the independent routine of tests/common/pkt.rs:
/// the IPv4 header, the transport (where the frame holds the whole packet), and for an ICMP
/// error the embedded packet's.
pub fn check_output_csums(f: &[u8], what: &str) {
    if !is_ipv4(f) || f.len() < ETH_LEN + ip_tot_len(f) {
        return;
    }
    assert!(ip_csum_ok(f), "{what}: expected a valid IPv4 header checksum in the output");
    let frag = u16::from_be_bytes([f[ETH_LEN + 6], f[ETH_LEN + 7]]) & 0x3fff != 0;
    if frag {
        return; // a fragment's transport checksum covers the whole datagram
    }
    assert_csums(f, what);
    let o = l4_off(f);
    if ip_proto(f) == ICMP && matches!(f[o], 3 | 4 | 5 | 11 | 12) && ip_tot_len(f) >= ihl(f) + 8 + 20 {
        assert_quote_csums(f, what);
    }
}

/// Runs one step on `env` and compares: verdict, every counter's delta, the output frame
/// byte for byte (`output_dont_care` aside) and its checksums. Err describes the first
/// difference.
pub fn run_step(env: &Env, s: &Step, what: &str) -> Result<(), String> {
    let side = side_of(&s.program)?;
    let want_v = verdict_of(&s.verdict)?;
    let input = from_hex(&s.input)?;
    let before = env.stats();
    let (v, out) = env.run(side, &input);
    let got = moved(&before, &env.stats());
    let mut want = s.counters.clone();
    want.remove("fib_lookups");
    if v != want_v || got != want {
        return Err(format!(
            "{what}: expected {} with counters {want:?}, got {} with counters {got:?}",
            s.verdict,
            verdict_name(v),
        ));
    }
    if let Some(exp) = &s.output {
        let exp = from_hex(exp)?;
        let (a, e) = (masked(&out, &s.output_dont_care), masked(&exp, &s.output_dont_care));
        std::panic::catch_unwind(|| {
            assert_frame_eq(&a, &e, what);
            if v != XDP_PASS || out != input {
                check_output_csums(&out, what);
            }
        })
        .map_err(|p| panic_text(&p))?;
    }
    Ok(())
}

/// Runs a whole vector in a fresh data plane: setup, then the packet.
pub fn run_vector(v: &Vector) -> Result<(), String> {
    let cfg = cfg_of(&v.config)?;
    let res = std::sync::Mutex::new(Ok(()));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        with_env(&cfg, |env| {
            set_seed(env, v.tab_seed);
            set_mtus(env, &v.mtu);
            let mut r = Ok(());
            for (i, s) in v.setup.iter().enumerate() {
                r = run_step(env, s, &format!("{}: setup step {i}", v.name));
                if r.is_err() {
                    break;
                }
            }
            if r.is_ok() {
                r = run_step(env, &v.packet, &format!("{}: the packet", v.name));
            }
            *res.lock().expect("result") = r;
        })
    }));
    r.map_err(|p| format!("{}: {}", v.name, panic_text(&p)))?;
    res.into_inner().expect("result")
}

pub fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}
