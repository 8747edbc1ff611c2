// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix check-tables`: walks the live tables read-only and reports every broken
//! invariant between them (port words, mappings, sessions, subscribers, blocks, counts).
//!
//! What is checked (each problem has a stable `kind`):
//! - `mapping_outside_not_in_pool`: a table mapping whose outside address is no pool address;
//! - `mapping_port_word_mismatch`: a table mapping whose outside port word does not name it
//!   (USED with its inside endpoint; STATIC for a static mapping);
//! - `outside_endpoint_shared`: two mappings with the same outside endpoint and protocol;
//! - `endpoint_mapped_twice`: one inside endpoint with two mappings (a table entry and a
//!   walk word, or two walk words);
//! - `port_word_without_mapping`: a USED word that is not a mapping itself (deterministic
//!   mode, home-walk word) and that no table mapping with that outside endpoint matches, or a
//!   STATIC word without its static mapping;
//! - `port_outside_owner_block`: a USED word in a block its inside address does not own;
//! - `session_without_mapping`, `session_outside_mismatch`: a session (not an address-
//!   dependent filtering record) whose mapping is gone, or whose copied outside endpoint
//!   differs from its mapping's;
//! - `mapping_nsess_mismatch`: a mapping's session count (`nx_map.nsess`, or bits 61..48 of
//!   a walk word) differing from the sessions referring to it;
//! - `subscriber_nsess_mismatch`: `nx_sub.nsess` (dynamic mode) or `nx_det_nsess`
//!   (deterministic mode) differing from the subscriber's sessions (a static forward's
//!   inside host is exempt: sessions made while it had no entry are not counted); in
//!   dynamic mode the sessions flagged HOMECNT count on the home block word's NSESS
//!   instead, which must match them, and which only an owner's home block may hold;
//! - `session_without_subscriber`: sessions of an inside address with no subscriber entry
//!   (or outside the deterministic prefix) that is not a static forward's inside host;
//! - `block_owner_unknown`, `block_on_other_address`, `block_not_in_owner_slots`: an owned
//!   block whose owner has no subscriber entry, whose entry is paired with another pool
//!   address, or whose entry's slots do not name it (slots naming blocks the subscriber no
//!   longer owns are legal: the daemon releases empty blocks without touching the slots);
//! - `block_count_mismatch`: a block word's USED+HELD count differing from its ports' words;
//! - `held_past_hold_down`: a HELD word released longer ago than the hold-down plus the
//!   daemon's margin, 2 sweep intervals and 5 s, which no live walk needs (walk ranges keep
//!   such words HELD legitimately, see `tables::ports::walk_needs`);
//! - `table_count_mismatch`: `nx_tab_cnt` against the live entries of nx_sess, nx_maps,
//!   nx_subs.
//!
//! The tables change under traffic while they are read (a port claimed before its mapping
//! is inserted, a session counted before it is published, the reaper between two steps): a
//! single pass can see such a state. [`check_tables`] therefore reads everything twice,
//! [`Options::recheck`] apart (200 ms by default), and reports only the problems found in
//! both passes on the same entries. One pass is [`check_once`] (tests on a quiet data
//! plane). Memory stays bounded by the mappings and subscribers (hash maps keyed by
//! compact integers); sessions and port words are streamed from their mmaps.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;

use crate::abi::{
    MF_DET, MF_STATIC, NSESS_DYING, PORT_FREE, PORT_HELD, PORT_STATIC, PORT_USED, PROTO_OF_IDX, SF_HOMECNT,
    SF_PERMIT,
};
use crate::dataplane::ip_from_be;
use crate::tables::ports::{
    self, held_since, is_home_word, port_index, port_index_parts, port_state, port_word_ip, word_nsess,
    word_port,
};
use crate::tables::{
    block_nsess, block_of, block_used, home_block, now_ns, proto_name, MmapWords, TableError, Tables,
};

/// One broken invariant: `kind` a stable snake_case name, `detail` the entries involved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub kind: &'static str,
    pub detail: String,
    /// The entries involved, without values that change with traffic: how two passes are
    /// matched.
    #[serde(skip)]
    pub key: String,
}

/// What one pass walked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Checked {
    pub sessions: u64,
    pub permit_records: u64,
    pub table_mappings: u64,
    pub walk_mappings: u64,
    pub port_words_used: u64,
    pub port_words_held: u64,
    pub port_words_static: u64,
    pub subscribers: u64,
    pub blocks_owned: u64,
    /// passes over the tables (1, or 2 when the first found something to confirm)
    pub passes: u32,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub problems: Vec<Problem>,
    pub checked: Checked,
}

impl Report {
    pub fn healthy(&self) -> bool {
        self.problems.is_empty()
    }

    /// The human output of `natrix check-tables`.
    pub fn text(&self) -> String {
        let c = &self.checked;
        let what = format!(
            "{} session(s), {} filtering record(s), {} table mapping(s), {} walk mapping(s), {} USED / {} HELD / {} STATIC port word(s), {} subscriber(s), {} owned block(s)",
            c.sessions,
            c.permit_records,
            c.table_mappings,
            c.walk_mappings,
            c.port_words_used,
            c.port_words_held,
            c.port_words_static,
            c.subscribers,
            c.blocks_owned
        );
        if self.problems.is_empty() {
            return format!("no broken invariants: checked {what}\n");
        }
        let mut out = String::new();
        for p in &self.problems {
            out += &format!("{}: {}\n", p.kind, p.detail);
        }
        out += &format!(
            "{} problem(s), each seen in two passes {} ms apart; checked {what}\n",
            self.problems.len(),
            Options::default().recheck.as_millis()
        );
        out
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Pause between the two passes.
    pub recheck: Duration,
    /// The daemon's sweep interval (daemon.sweep_interval): how late a hold-down may end.
    pub sweep_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options { recheck: Duration::from_millis(200), sweep_interval: Duration::from_secs(1) }
    }
}

/// Seconds past the hold-down a HELD word may still be HELD: the daemon's margin for walk
/// ranges (ports::FREE_MARGIN_S), two sweeps, and slack.
fn held_margin_s(o: &Options) -> u32 {
    ports::FREE_MARGIN_S + 2 * o.sweep_interval.as_secs().max(1) as u32 + 5
}

/// Checks the tables twice and reports the problems present in both passes.
pub fn check_tables(t: &Tables) -> Result<Report, TableError> {
    check_tables_with(t, &Options::default())
}

pub fn check_tables_with(t: &Tables, o: &Options) -> Result<Report, TableError> {
    let first = check_once(t, o)?;
    if first.problems.is_empty() {
        return Ok(first);
    }
    std::thread::sleep(o.recheck);
    let mut second = check_once(t, o)?;
    let seen: HashSet<(&'static str, &str)> =
        first.problems.iter().map(|p| (p.kind, p.key.as_str())).collect();
    second.problems.retain(|p| seen.contains(&(p.kind, p.key.as_str())));
    second.checked.passes = 2;
    Ok(second)
}

/// A mapping as the check sees it, keyed by its inside endpoint.
#[derive(Debug, Clone, Copy)]
struct Map {
    out_ip: u32,
    /// network order
    out_port: u16,
    flags: u16,
    nsess: u32,
    /// a port word (deterministic or home walk), not a table entry
    walk: bool,
    /// sessions found referring to it
    seen: u32,
}

/// Inside endpoint as one integer: address (as stored), port (network order), protocol.
fn ek(in_ip: u32, in_port_be: u16, proto: u8) -> u64 {
    (in_ip as u64) << 24 | (in_port_be as u64) << 8 | proto as u64
}

fn ek_str(k: u64) -> String {
    ep_str((k >> 24) as u32, (k >> 8) as u16, k as u8)
}

/// "a.b.c.d:port/proto" of an address and a port, both as stored (network order).
fn ep_str(ip: u32, port_be: u16, proto: u8) -> String {
    format!("{}:{}/{}", ip_from_be(ip), u16::from_be(port_be), proto_name(proto))
}

struct Problems(Vec<Problem>);

impl Problems {
    fn push(&mut self, kind: &'static str, key: String, detail: String) {
        self.0.push(Problem { kind, detail, key });
    }
}

/// One pass over every table: the problems it sees, some of which may be changes in flight
/// on a live system (see the module doc).
pub fn check_once(t: &Tables, o: &Options) -> Result<Report, TableError> {
    let cfg = t.config()?;
    let det = cfg.det_count != 0;
    let pool = t.pool()?;
    let pool_ip = |a: u32| pool.get(a as usize).map_or(0, |ip| u32::from_ne_bytes(ip.octets()));
    let pool_idx: HashMap<u32, u32> =
        pool.iter().enumerate().map(|(i, a)| (u32::from_ne_bytes(a.octets()), i as u32)).collect();
    let ports = MmapWords::new(&t.ports, "nx_ports")?;
    let words = ports.words();
    let blocks_m = MmapWords::new(&t.blocks, "nx_blocks")?;
    let blocks = blocks_m.words();
    let mut p = Problems(Vec::new());
    let mut ck = Checked { passes: 1, ..Default::default() };
    let now_s = (now_ns() / 1_000_000_000) as u32;
    let word_at = |a: u32, proto: u8, port_be: u16| -> u64 {
        words
            .get(port_index(a, proto, u16::from_be(port_be)) as usize)
            .map_or(0, |w| w.load(Ordering::Acquire))
    };

    // 1. the mapping table
    let mut maps: HashMap<u64, Map> = HashMap::new();
    let mut statics: HashSet<u32> = HashSet::new();
    let mut mismatched: Vec<(u64, u64)> = Vec::new(); // (endpoint, the word it found)
    for (k, m) in t.table_mappings()? {
        ck.table_mappings += 1;
        let key = ek(k.in_ip, k.in_port, k.proto);
        let stat = m.flags & MF_STATIC != 0;
        if stat {
            statics.insert(k.in_ip);
        }
        let out = ep_str(m.out_ip, m.out_port, k.proto);
        if maps
            .insert(
                key,
                Map {
                    out_ip: m.out_ip,
                    out_port: m.out_port,
                    flags: m.flags,
                    nsess: m.nsess,
                    walk: false,
                    seen: 0,
                },
            )
            .is_some()
        {
            p.push(
                "endpoint_mapped_twice",
                ek_str(key),
                format!("{} has two mapping table entries", ek_str(key)),
            );
        }
        let Some(&a) = pool_idx.get(&m.out_ip) else {
            p.push(
                "mapping_outside_not_in_pool",
                ek_str(key),
                format!("mapping {} -> {out}: {} is no pool address", ek_str(key), ip_from_be(m.out_ip)),
            );
            continue;
        };
        let v = word_at(a, k.proto, m.out_port);
        let want = if stat { PORT_STATIC } else { PORT_USED };
        if port_state(v) != want || port_word_ip(v) != k.in_ip || word_port(v) != u16::from_be(k.in_port) {
            p.push(
                "mapping_port_word_mismatch",
                format!("{} {out}", ek_str(key)),
                format!(
                    "{}mapping {} -> {out}: its port word is {} ({v:#x}), want {} naming it",
                    if stat { "static " } else { "" },
                    ek_str(key),
                    word_str(v, k.proto),
                    if stat { "STATIC" } else { "USED" }
                ),
            );
            mismatched.push((key, v));
        }
    }
    // two mappings on one outside endpoint: its word names at most one of them
    for (key, v) in mismatched {
        let st = port_state(v);
        if st != PORT_USED && st != PORT_STATIC {
            continue;
        }
        let proto = key as u8;
        let other = ek(port_word_ip(v), word_port(v).to_be(), proto);
        let (Some(a), Some(b)) = (maps.get(&key), maps.get(&other)) else { continue };
        if other != key && (a.out_ip, a.out_port) == (b.out_ip, b.out_port) {
            let out = ep_str(a.out_ip, a.out_port, proto);
            p.push(
                "outside_endpoint_shared",
                format!("{out} {}", ek_str(key)),
                format!("outside {out} is the mapping of {} and of {}", ek_str(key), ek_str(other)),
            );
        }
    }

    // 2. port words: walk mappings, words without mappings, HELD words, block counts
    let (bs, bpa) = (u32::from(cfg.block_size), u32::from(cfg.blocks_per_addr));
    let nblocks = if det { 0 } else { blocks.len() };
    let mut per_block = vec![0u64; nblocks];
    let hold_limit = cfg.hold_down_s.saturating_add(held_margin_s(o));
    for (idx, w) in words.iter().enumerate() {
        let v = w.load(Ordering::Acquire);
        let st = port_state(v);
        if v == 0 || (st != PORT_USED && st != PORT_HELD && st != PORT_STATIC) {
            continue;
        }
        let (a, pidx, port) = port_index_parts(idx);
        let port = u32::from(port);
        if a >= u32::from(cfg.n_addrs) {
            continue;
        }
        let proto = PROTO_OF_IDX[pidx as usize];
        let out_ip = pool_ip(a);
        let out = ep_str(out_ip, (port as u16).to_be(), proto);
        let block = if det { None } else { block_of(&cfg, a, port) };
        if st != PORT_STATIC {
            if let Some((gid, _)) = block {
                if let Some(c) = per_block.get_mut(gid as usize) {
                    *c += 1;
                }
            }
        }
        let (in_ip, in_port_be) = (port_word_ip(v), word_port(v).to_be());
        let key = ek(in_ip, in_port_be, proto);
        match st {
            PORT_USED => {
                ck.port_words_used += 1;
                if det || is_home_word(&cfg, idx, v) {
                    ck.walk_mappings += 1;
                    let nsess = word_nsess(v);
                    let m = Map {
                        out_ip,
                        out_port: (port as u16).to_be(),
                        flags: MF_DET,
                        nsess,
                        walk: true,
                        seen: 0,
                    };
                    if let Some(prev) = maps.insert(key, m) {
                        p.push(
                            "endpoint_mapped_twice",
                            ek_str(key),
                            format!(
                                "{} has two mappings: {out} (walk word) and {} ({})",
                                ek_str(key),
                                ep_str(prev.out_ip, prev.out_port, proto),
                                if prev.walk { "walk word" } else { "mapping table" }
                            ),
                        );
                    }
                } else {
                    match maps.get(&key) {
                        Some(m)
                            if !m.walk
                                && m.flags & MF_STATIC == 0
                                && (m.out_ip, m.out_port) == (out_ip, (port as u16).to_be()) => {}
                        _ => p.push(
                            "port_word_without_mapping",
                            out.clone(),
                            format!(
                                "port word {out} is USED for {} ({v:#x}), which has no mapping on it",
                                ek_str(key)
                            ),
                        ),
                    }
                }
                if let Some((gid, _)) = block {
                    let owner = blocks.get(gid as usize).map_or(0, |b| b.load(Ordering::Acquire) as u32);
                    if owner != in_ip {
                        p.push(
                            "port_outside_owner_block",
                            out.clone(),
                            format!(
                                "port word {out} is USED for {} but its block {gid} is {}",
                                ek_str(key),
                                if owner == 0 {
                                    "free".to_string()
                                } else {
                                    format!("owned by {}", ip_from_be(owner))
                                }
                            ),
                        );
                    }
                }
            }
            PORT_STATIC => {
                ck.port_words_static += 1;
                match maps.get(&key) {
                    Some(m)
                        if m.flags & MF_STATIC != 0
                            && (m.out_ip, m.out_port) == (out_ip, (port as u16).to_be()) => {}
                    _ => p.push(
                        "port_word_without_mapping",
                        out.clone(),
                        format!(
                            "port word {out} is STATIC for {} ({v:#x}), which has no static mapping on it",
                            ek_str(key)
                        ),
                    ),
                }
            }
            _ => {
                ck.port_words_held += 1;
                let released = held_since(v);
                let age = now_s.wrapping_sub(released) as i32;
                if age <= 0 || age as u32 <= hold_limit {
                    continue;
                }
                // a walk range keeps a HELD word a live walk passes
                let needed = ports::walk_needs(&cfg, words, blocks, idx);
                if !needed {
                    p.push(
                        "held_past_hold_down",
                        format!("{out} {released}"),
                        format!(
                            "port word {out} is HELD since monotonic second {released}, {age} s ago, hold-down {} s (+{} s margin), and no walk needs it",
                            cfg.hold_down_s,
                            held_margin_s(o)
                        ),
                    );
                }
            }
        }
    }

    // 3. sessions, streamed
    let mut per_sub: HashMap<u32, u32> = HashMap::new();
    // of those, the sessions counted on their subscriber's home block word (SF_HOMECNT)
    let mut per_sub_home: HashMap<u32, u32> = HashMap::new();
    let mut sess_problems: Vec<Problem> = Vec::new();
    let live_sess = t.for_each_session(|s| {
        if s.flags & SF_PERMIT != 0 {
            ck.permit_records += 1;
            return;
        }
        ck.sessions += 1;
        *per_sub.entry(s.in_ip).or_default() += 1;
        if s.flags & SF_HOMECNT != 0 {
            *per_sub_home.entry(s.in_ip).or_default() += 1;
        }
        let key = ek(s.in_ip, s.in_port, s.proto);
        let sk = format!("{} {}", ek_str(key), ep_str(s.rem_ip, s.rem_port, s.proto));
        let sout = ep_str(s.out_ip, s.out_port, s.proto);
        match maps.get_mut(&key) {
            None => sess_problems.push(Problem {
                kind: "session_without_mapping",
                detail: format!("session {sk} (outside {sout}): no mapping of {}", ek_str(key)),
                key: sk,
            }),
            Some(m) => {
                m.seen += 1;
                if (m.out_ip, m.out_port) != (s.out_ip, s.out_port) {
                    sess_problems.push(Problem {
                        kind: "session_outside_mismatch",
                        detail: format!(
                            "session {sk} copied outside {sout}, its mapping's is {}",
                            ep_str(m.out_ip, m.out_port, s.proto)
                        ),
                        key: sk,
                    });
                }
            }
        }
    })?;
    p.0.extend(sess_problems);

    // 4. session counts of the mappings
    let mut nsess_bad: Vec<(u64, Map)> = maps
        .iter()
        .filter(|(_, m)| m.nsess != m.seen && !(m.nsess == NSESS_DYING && m.seen == 0))
        .map(|(k, m)| (*k, *m))
        .collect();
    nsess_bad.sort_unstable_by_key(|(k, _)| *k);
    for (key, m) in nsess_bad {
        p.push(
            "mapping_nsess_mismatch",
            ek_str(key),
            format!(
                "{} {} -> {}: counts {} session(s), {} refer to it",
                if m.walk { "walk mapping" } else { "mapping" },
                ek_str(key),
                ep_str(m.out_ip, m.out_port, key as u8),
                m.nsess,
                m.seen
            ),
        );
    }

    // 5. subscribers
    let mut sub_live = 0u64;
    let mut subs: HashMap<u32, (u32, Vec<u32>)> = HashMap::new();
    if det {
        let counts = MmapWords::new(&t.det_nsess, "nx_det_nsess")?;
        let c32 = counts.words32();
        for i in 0..cfg.det_count {
            let ip = cfg.det_base.wrapping_add(i).to_be();
            let have = c32.get(i as usize).map_or(0, |c| c.load(Ordering::Acquire));
            let want = per_sub.get(&ip).copied().unwrap_or(0);
            if have != want && !statics.contains(&ip) {
                p.push(
                    "subscriber_nsess_mismatch",
                    ip_from_be(ip).to_string(),
                    format!(
                        "subscriber {} (index {i}): nx_det_nsess counts {have} session(s), {want} found",
                        ip_from_be(ip)
                    ),
                );
            }
        }
        let mut orphans: Vec<(u32, u32)> = per_sub
            .iter()
            .filter(|(ip, _)| {
                u32::from_be(**ip).wrapping_sub(cfg.det_base) >= cfg.det_count && !statics.contains(ip)
            })
            .map(|(ip, n)| (*ip, *n))
            .collect();
        orphans.sort_unstable();
        for (ip, n) in orphans {
            p.push(
                "session_without_subscriber",
                ip_from_be(ip).to_string(),
                format!(
                    "{n} session(s) of {}, outside the deterministic prefix and no static forward's host",
                    ip_from_be(ip)
                ),
            );
        }
    } else {
        for (ip, s) in t.subscribers()? {
            ck.subscribers += 1;
            let want = per_sub.get(&ip).copied().unwrap_or(0) - per_sub_home.get(&ip).copied().unwrap_or(0);
            if s.nsess != want && !statics.contains(&ip) {
                p.push(
                    "subscriber_nsess_mismatch",
                    ip_from_be(ip).to_string(),
                    format!(
                        "subscriber {}: nx_sub.nsess counts {} session(s), {want} found (not counted on its home block)",
                        ip_from_be(ip),
                        s.nsess
                    ),
                );
            }
            subs.insert(ip, (s.addr_idx, s.blocks.iter().copied().filter(|b| *b != 0).collect()));
        }
        let mut orphans: Vec<(u32, u32)> = per_sub
            .iter()
            .filter(|(ip, _)| !subs.contains_key(ip) && !statics.contains(ip))
            .map(|(ip, n)| (*ip, *n))
            .collect();
        orphans.sort_unstable();
        for (ip, n) in orphans {
            p.push(
                "session_without_subscriber",
                ip_from_be(ip).to_string(),
                format!(
                    "{n} session(s) of {}, which has no subscriber entry and is no static forward's host",
                    ip_from_be(ip)
                ),
            );
        }
        sub_live = ck.subscribers;
    }

    // 6. blocks (dynamic mode)
    let mut home_counted: HashMap<u32, u32> = HashMap::new(); // owner -> its home block's NSESS
    for (gid, b) in blocks.iter().enumerate().take(nblocks) {
        let w = b.load(Ordering::Acquire);
        let owner = w as u32;
        let counted = block_used(w);
        let found = per_block[gid];
        let (a, first) = (gid as u32 / bpa.max(1), u32::from(cfg.port_lo) + gid as u32 % bpa.max(1) * bs);
        let what =
            format!("block {gid} ({} ports {}-{})", ip_from_be(pool_ip(a)), first, first + bs.max(1) - 1);
        // sessions counted on the word: only its owner's, and only in its home block
        let ns = block_nsess(w);
        if ns != 0 {
            if owner != 0 && home_block(&cfg, owner) == Some(gid as u32) {
                home_counted.insert(owner, ns);
            } else {
                p.push(
                    "subscriber_nsess_mismatch",
                    what.clone(),
                    format!(
                        "{what} counts {ns} session(s) but is {}",
                        if owner == 0 {
                            "free".to_string()
                        } else {
                            format!("not the home block of its owner {}", ip_from_be(owner))
                        }
                    ),
                );
            }
        }
        if counted != found {
            p.push(
                "block_count_mismatch",
                what.clone(),
                format!(
                    "{what}, {}: its word counts {counted} USED+HELD port(s), its port words hold {found}",
                    if owner == 0 { "free".to_string() } else { format!("owned by {}", ip_from_be(owner)) }
                ),
            );
        }
        if owner == 0 {
            continue;
        }
        ck.blocks_owned += 1;
        match subs.get(&owner) {
            None => p.push(
                "block_owner_unknown",
                what.clone(),
                format!("{what} is owned by {}, which has no subscriber entry", ip_from_be(owner)),
            ),
            Some((addr_idx, slots)) => {
                if *addr_idx != a {
                    p.push(
                        "block_on_other_address",
                        what.clone(),
                        format!(
                            "{what} is owned by {}, whose entry is paired with pool address #{addr_idx}",
                            ip_from_be(owner)
                        ),
                    );
                }
                if !slots.contains(&(gid as u32 + 1)) {
                    p.push(
                        "block_not_in_owner_slots",
                        what.clone(),
                        format!(
                            "{what} is owned by {}, whose entry's block slots do not name it",
                            ip_from_be(owner)
                        ),
                    );
                }
            }
        }
    }
    // every subscriber's home-counted sessions against its home block's NSESS
    let mut owners: Vec<u32> = per_sub_home.keys().chain(home_counted.keys()).copied().collect();
    owners.sort_unstable();
    owners.dedup();
    for ip in owners {
        let (want, have) =
            (per_sub_home.get(&ip).copied().unwrap_or(0), home_counted.get(&ip).copied().unwrap_or(0));
        if want != have {
            p.push(
                "subscriber_nsess_mismatch",
                ip_from_be(ip).to_string(),
                format!(
                    "subscriber {}: its home block's word counts {have} session(s), {want} found counted there",
                    ip_from_be(ip)
                ),
            );
        }
    }

    // 7. the data plane's entry counts
    let [c_sess, c_maps] = t.table_counts()?;
    let live_maps = ck.table_mappings;
    let mut counts = vec![("nx_sess", c_sess as u64, live_sess), ("nx_maps", c_maps as u64, live_maps)];
    if !det {
        counts.push(("nx_subs", t.subscriber_count()? as u64, sub_live));
    }
    for (name, counted, live) in counts {
        if counted != live {
            p.push(
                "table_count_mismatch",
                name.to_string(),
                format!("{name}: nx_tab_cnt counts {counted} entries, {live} live"),
            );
        }
    }
    Ok(Report { problems: p.0, checked: ck })
}

fn word_str(v: u64, proto: u8) -> String {
    match port_state(v) {
        PORT_FREE => "FREE".into(),
        PORT_USED => format!("USED for {}", ep_str(port_word_ip(v), word_port(v).to_be(), proto)),
        PORT_HELD => format!("HELD since second {}", v as u32),
        _ => format!("STATIC for {}", ep_str(port_word_ip(v), word_port(v).to_be(), proto)),
    }
}
