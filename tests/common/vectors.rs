// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet test vectors as data (tests/vectors/*.json, format in tests/vectors/README.md):
//! the file model, reading and writing it, and running one vector through the XDP data
//! plane with BPF_PROG_TEST_RUN ([`run_vector`]). The runner is tests/packet_vectors.rs,
//! the generator that writes the files tests/gen_vectors.rs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytemuck::bytes_of;
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use natrix::tables::MmapWords;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;

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

/// Gives the freshly configured (or freshly reset, [`reset`]) data plane of `env` the
/// vector's hash seed (its tables are empty: nothing sits where another seed put it).
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

// ---- one data plane for many vectors --------------------------------------------------------
//
// Loading a data plane costs the verifier several seconds, so the runner loads one per
// group of vectors with the same `config` and `mtu` (everything the load, configure() and
// the namespace depend on) and, before each vector, puts back the state of a freshly loaded
// one. What a vector can change, map by map (bpf/nx_state.h), and what [`reset`] does:
//
// * nx_ports, nx_blocks, nx_subs (the subscribers' state), nx_maps, nx_sess, nx_det_nsess:
//   written by the packet path; mmapable, zeroed through the mapping.
// * nx_tab_cnt (entries per table, which enforces the sizes): zeroed.
// * nx_frags (LRU hash, inbound fragment records): every key deleted.
// * nx_frag_rb (ring buffer of fragments held for the daemon): drained (nobody reads it
//   in a test; full, it would turn a held fragment into frag_no_state).
// * nx_icmp_rl (per-CPU token bucket): zeroed on every CPU. Zero is its fresh state: with
//   ts 0 the first packet's refill fills the bucket to its burst (nx_icmp_rate_ok).
// * nx_fibc (per-CPU FIB cache): zeroed on every CPU, as when loaded (empty).
// * nx_tab_locks (insert lock stripes): taken and dropped within one packet; zeroed.
// * nx_scratch (per-CPU scratch): written before it is read; zeroed all the same.
// * nx_cfg: the data plane never writes it; written back as configure() left it, with the
//   vector's tab_seed.
// * nx_stats: not reset; vectors compare counters as deltas.
// * Not changed by a packet (configuration, written by configure() only): nx_pool,
//   nx_pool_idx, nx_ifaces, nx_ifrole, nx_subnets, nx_excl, nx_tx. nx_reap_buf and
//   nx_fibc_gen belong to the reaper and the FIB watcher (neither is driven by a vector);
//   the .bss anchors (natrix.bpf.c) are never written.
//
// [`check_reset`] reads every reset map back: all zeros (nx_frags empty, nx_frag_rb
// empty), nx_cfg as configure() left it. The runner checks it on the freshly loaded data
// plane (which shows that all zeros is the fresh state) and after every reset.

fn handle(map: &libbpf_rs::MapMut<'static>, name: &str) -> MapHandle {
    MapHandle::try_from(map).unwrap_or_else(|e| panic!("expected a handle on {name}: {e}"))
}

/// The bytes of an array map's entries, keys 0..max_entries in order (per-CPU: each entry
/// one value per possible CPU, each rounded up to 8 bytes, as the kernel lays them out).
/// BPF_MAP_LOOKUP_BATCH / BPF_MAP_UPDATE_BATCH through the raw syscall: libbpf-rs refuses
/// batches of per-CPU maps, and one element at a time costs a syscall for each of the FIB
/// cache's thousands of slots before every vector.
fn array_batch(h: &MapHandle, update: Option<&[u8]>) -> Result<Vec<u8>, String> {
    #[repr(C)]
    #[derive(Default)]
    struct BatchAttr {
        in_batch: u64,
        out_batch: u64,
        keys: u64,
        values: u64,
        count: u32,
        map_fd: u32,
        elem_flags: u64,
        flags: u64,
    }
    const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
    const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
    let n = h.max_entries();
    let percpu = h.map_type().is_percpu();
    let ncpu = if percpu { libbpf_rs::num_possible_cpus().map_err(|e| e.to_string())? } else { 1 };
    let vsize = if percpu { (h.value_size() as usize).div_ceil(8) * 8 } else { h.value_size() as usize };
    let total = n as usize * vsize * ncpu;
    let mut keys: Vec<u8> = (0..n).flat_map(|i| i.to_ne_bytes()).collect();
    let mut values = match update {
        Some(v) if v.len() == total => v.to_vec(),
        Some(v) => return Err(format!("{} bytes to write, the map holds {total}", v.len())),
        None => vec![0u8; total],
    };
    let mut out_batch = [0u8; 4];
    let mut a = BatchAttr {
        out_batch: out_batch.as_mut_ptr() as u64,
        keys: keys.as_mut_ptr() as u64,
        values: values.as_mut_ptr() as u64,
        count: n,
        map_fd: h.as_fd().as_raw_fd() as u32,
        ..Default::default()
    };
    let cmd = if update.is_some() { BPF_MAP_UPDATE_BATCH } else { BPF_MAP_LOOKUP_BATCH };
    // SAFETY: the bpf syscall with a batch attribute whose buffers hold n keys and n values
    // and live until it returns.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, cmd, &mut a as *mut BatchAttr, std::mem::size_of::<BatchAttr>())
    };
    let err = std::io::Error::last_os_error();
    // a lookup of the whole array ends with ENOENT (no next batch)
    if rc < 0 && !(update.is_none() && err.raw_os_error() == Some(libc::ENOENT)) {
        return Err(err.to_string());
    }
    if a.count != n {
        return Err(format!("{} of {n} entries in one batch", a.count));
    }
    Ok(values)
}

/// The mmapable tables a vector writes, by name.
fn mmap_tables(env: &Env) -> [(&'static str, &MapHandle); 6] {
    let t = &env.dp.tables;
    [
        ("nx_ports", &t.ports),
        ("nx_blocks", &t.blocks),
        ("nx_subs", &t.subs),
        ("nx_maps", &t.maps),
        ("nx_sess", &t.sess),
        ("nx_det_nsess", &t.det_nsess),
    ]
}

/// The per-CPU arrays a vector can write, by name.
fn percpu_arrays(env: &Env) -> [(&'static str, MapHandle); 3] {
    let m = &env.dp.skel.maps;
    [
        ("nx_icmp_rl", handle(&m.nx_icmp_rl, "nx_icmp_rl")),
        ("nx_fibc", handle(&m.nx_fibc, "nx_fibc")),
        ("nx_scratch", handle(&m.nx_scratch, "nx_scratch")),
    ]
}

/// Consumes every record in nx_frag_rb; returns how many there were.
fn drain_frag_rb(env: &Env) -> usize {
    let n = std::rc::Rc::new(std::cell::Cell::new(0usize));
    let rb = {
        let n = std::rc::Rc::clone(&n);
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&env.dp.skel.maps.nx_frag_rb, move |_| {
            n.set(n.get() + 1);
            0
        })
        .expect("expected nx_frag_rb to be a ring buffer");
        b.build().expect("expected a ring buffer manager for nx_frag_rb")
    };
    rb.consume().expect("expected nx_frag_rb to be consumed");
    n.get()
}

/// Puts back the state of the freshly loaded data plane (see the list above), with `cfg`
/// (nx_cfg as configure() wrote it) in nx_cfg.
pub fn reset(env: &Env, cfg: &natrix::skel::types::nx_config) {
    for (name, h) in mmap_tables(env) {
        let m = MmapWords::new(h, name).unwrap_or_else(|e| panic!("expected {name} to mmap: {e}"));
        for w in m.words() {
            if w.load(Ordering::Relaxed) != 0 {
                w.store(0, Ordering::Relaxed);
            }
        }
    }
    std::sync::atomic::fence(Ordering::SeqCst);
    let t = &env.dp.tables;
    for i in 0..t.tab_cnt.max_entries() {
        t.tab_cnt.update(&i.to_ne_bytes(), &0u32.to_ne_bytes(), MapFlags::ANY).expect("zeroing nx_tab_cnt");
    }
    let frags = handle(&env.dp.skel.maps.nx_frags, "nx_frags");
    loop {
        let keys: Vec<Vec<u8>> = frags.keys().collect();
        if keys.is_empty() {
            break;
        }
        for k in keys {
            // an LRU map may have evicted it meanwhile: only the end state matters
            let _ = frags.delete(&k);
        }
    }
    drain_frag_rb(env);
    let locks = handle(&env.dp.skel.maps.nx_tab_locks, "nx_tab_locks");
    for (name, h) in percpu_arrays(env).into_iter().chain([("nx_tab_locks", locks)]) {
        let zeros = array_batch(&h, None).unwrap_or_else(|e| panic!("expected {name} to be readable: {e}"));
        let zeros = vec![0u8; zeros.len()];
        array_batch(&h, Some(&zeros)).unwrap_or_else(|e| panic!("expected {name} to be zeroed: {e}"));
    }
    t.write_config(cfg).expect("expected nx_cfg to be writable");
}

/// Reads back every map [`reset`] resets; Err names each that is not in the fresh state:
/// all zeros, nx_frags and nx_frag_rb empty, nx_cfg equal to `cfg`.
pub fn check_reset(env: &Env, cfg: &natrix::skel::types::nx_config) -> Result<(), String> {
    let mut bad = Vec::new();
    for (name, h) in mmap_tables(env) {
        let m = MmapWords::new(h, name).map_err(|e| format!("{name}: {e}"))?;
        if let Some(i) = m.words().iter().position(|w| w.load(Ordering::Relaxed) != 0) {
            bad.push(format!("{name} (word {i})"));
        }
    }
    let t = &env.dp.tables;
    for i in 0..t.tab_cnt.max_entries() {
        let v = t.tab_cnt.lookup(&i.to_ne_bytes(), MapFlags::ANY).map_err(|e| format!("nx_tab_cnt: {e}"))?;
        if v.is_none_or(|v| v.iter().any(|b| *b != 0)) {
            bad.push(format!("nx_tab_cnt[{i}]"));
        }
    }
    let frags = handle(&env.dp.skel.maps.nx_frags, "nx_frags");
    let n = frags.keys().count();
    if n != 0 {
        bad.push(format!("nx_frags ({n} keys)"));
    }
    let n = drain_frag_rb(env);
    if n != 0 {
        bad.push(format!("nx_frag_rb ({n} records)"));
    }
    let locks = handle(&env.dp.skel.maps.nx_tab_locks, "nx_tab_locks");
    for (name, h) in percpu_arrays(env).into_iter().chain([("nx_tab_locks", locks)]) {
        let v = array_batch(&h, None).map_err(|e| format!("{name}: {e}"))?;
        if let Some(i) = v.iter().position(|b| *b != 0) {
            bad.push(format!("{name} (byte {i})"));
        }
    }
    let now = t.config().map_err(|e| format!("nx_cfg: {e}"))?;
    if bytes_of(&now) != bytes_of(cfg) {
        bad.push("nx_cfg (differs from what configure() wrote)".into());
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("not in the state of a freshly loaded data plane: {}", bad.join(", ")))
    }
}

/// Runs a vector's steps (setup, then the packet) on `env`; Err describes the first
/// difference.
pub fn run_steps(env: &Env, v: &Vector) -> Result<(), String> {
    for (i, s) in v.setup.iter().enumerate() {
        run_step(env, s, &format!("{}: setup step {i}", v.name))?;
    }
    run_step(env, &v.packet, &format!("{}: the packet", v.name))
}

/// Whether [`run_group`] puts the fresh state back between vectors. `Never` is only for
/// the test that shows what the reset is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reset {
    BeforeEach,
    Never,
}

/// Vectors that can share one data plane: the same `config` and `mtu`, in file order.
pub struct Group<'a> {
    pub config: &'a serde_json::Map<String, serde_json::Value>,
    pub mtu: &'a BTreeMap<String, u32>,
    /// "file/name" and the vector.
    pub vectors: Vec<(String, &'a Vector)>,
}

/// The vectors of `files` whose "file/name" contains `filter`, grouped by `config` and
/// `mtu`; groups in the order of their first vector, vectors in file order.
pub fn groups<'a>(files: &'a [(String, VectorFile)], filter: &str) -> Vec<Group<'a>> {
    let mut out: Vec<Group<'a>> = Vec::new();
    for (file, f) in files {
        for v in &f.vectors {
            let id = format!("{file}/{}", v.name);
            if !id.contains(filter) {
                continue;
            }
            match out.iter_mut().find(|g| *g.config == v.config && *g.mtu == v.mtu) {
                Some(g) => g.vectors.push((id, v)),
                None => out.push(Group { config: &v.config, mtu: &v.mtu, vectors: vec![(id, v)] }),
            }
        }
    }
    out
}

/// Runs `vectors` (which must share `config` and `mtu`) in one data plane loaded with
/// them: checks that the freshly loaded data plane is in the state [`check_reset`]
/// expects, then for each vector (`Reset::BeforeEach`) [`reset`], [`check_reset`], its
/// seed, its steps. One result per vector, in order; a vector that panics fails alone.
pub fn run_group(
    config: &serde_json::Map<String, serde_json::Value>,
    mtu: &BTreeMap<String, u32>,
    vectors: &[&Vector],
    reset_mode: Reset,
) -> Vec<Result<(), String>> {
    let cfg = match cfg_of(config) {
        Ok(c) => c,
        Err(e) => return vectors.iter().map(|v| Err(format!("{}: {e}", v.name))).collect(),
    };
    let res = std::sync::Mutex::new(Vec::new());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        with_env(&cfg, |env| {
            set_mtus(env, mtu);
            let fresh = env.dp.tables.config().expect("expected nx_cfg to be readable");
            if let Err(e) = check_reset(env, &fresh) {
                panic!("the freshly loaded data plane: {e}");
            }
            for v in vectors {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    match reset_mode {
                        Reset::BeforeEach => {
                            reset(env, &fresh);
                            check_reset(env, &fresh).map_err(|e| format!("after the reset: {e}"))?;
                            set_seed(env, v.tab_seed);
                        }
                        Reset::Never => {
                            let mut c = fresh;
                            c.tab_seed = v.tab_seed;
                            env.dp.tables.write_config(&c).expect("expected nx_cfg to be writable");
                        }
                    }
                    run_steps(env, v)
                }));
                let r = r.unwrap_or_else(|p| Err(panic_text(&p))).map_err(|e| format!("{}: {e}", v.name));
                res.lock().expect("results").push(r);
            }
        })
    }));
    let mut out = res.into_inner().expect("results");
    if let Err(p) = r {
        let e = panic_text(&p);
        out.extend(vectors[out.len()..].iter().map(|v| Err(format!("{}: {e}", v.name))));
    }
    out
}

/// Runs one vector in a data plane of its own: setup, then the packet.
pub fn run_vector(v: &Vector) -> Result<(), String> {
    run_group(&v.config, &v.mtu, &[v], Reset::BeforeEach).pop().expect("one result")
}

pub fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}
