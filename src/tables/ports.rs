// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The port word: one u64 of `nx_ports` per outside port (bpf/nx_types.h), its encodings,
//! and every change of state the daemon makes to one. Nothing else on the daemon side
//! writes a port word or takes one apart.
//!
//! Its life, and who moves it (the daemon's moves are the functions of this file):
//! - FREE → USED: the data plane claims a port (bpf/nx_alloc.h; a walk's, bpf/nx_det.h,
//!   bpf/nx_home.h), and HELD → USED when a walk takes a word on hold-down;
//! - USED → HELD: the data plane (the control program, bpf/nx_ctl.h) when a mapping's last
//!   session goes; [`hold_idle`] when a walk mapping never got a session (`expiry`);
//! - HELD → FREE: [`free_held`], once [`may_free`] says the hold-down is over and no live
//!   walk passes the word (`expiry`); the block word counts the port down with it;
//! - → STATIC: [`set_static`], a configured static forward (`dataplane::install_forwards`);
//! - STATIC → HELD: [`hold_static`], a static forward no longer configured.
//!
//! Each move is a compare-and-swap on the mmapped array, as the fast path's claims are (but
//! [`set_static`], a write the caller checked first).

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};

use libbpf_rs::{MapCore, MapFlags};

use super::{
    block_nsess, block_of, block_used, det_first, det_start, det_walk_pos, home_start, map_err, proto_idx,
    walk_home, MmapWords, Result, Tables,
};
use crate::abi::{
    BLOCK_USED_ONE, MF_DET, NPROTO, PORT_HELD, PORT_INDEX_SHIFT, PORT_IP_SHIFT, PORT_NSESS_MAX,
    PORT_NSESS_SHIFT, PORT_STATE_SHIFT, PORT_STATIC, PORT_USED, PROTO_OF_IDX,
};
use crate::skel::types::{nx_config, nx_map, nx_map_key};

// ---- encodings ---------------------------------------------------------------------------

/// A state's bits in a port word (NX_PORT_TAG).
pub const fn port_tag(state: u64) -> u64 {
    state << PORT_STATE_SHIFT
}

/// A port word's state (NX_PORT_STATE): PORT_FREE, PORT_USED, PORT_HELD or PORT_STATIC.
pub const fn port_state(w: u64) -> u64 {
    w >> PORT_STATE_SHIFT
}

/// The word a claimed port holds (nx_port_word): USED, inside address as the data plane
/// stores it, inside port in host order.
pub const fn port_word(in_ip: u32, in_port_h: u16) -> u64 {
    port_tag(PORT_USED) | (in_ip as u64) << PORT_IP_SHIFT | in_port_h as u64
}

/// The word of a static forward's port: STATIC, inside address as the data plane stores
/// it, inside port in host order.
pub const fn static_word(in_ip: u32, in_port_h: u16) -> u64 {
    port_tag(PORT_STATIC) | (in_ip as u64) << PORT_IP_SHIFT | in_port_h as u64
}

/// The word of a port on hold-down since monotonic second `now_s`.
pub const fn held_word(now_s: u32) -> u64 {
    port_tag(PORT_HELD) | now_s as u64
}

/// The inside address a port word names (NX_PORT_WORD_IP).
pub fn port_word_ip(w: u64) -> u32 {
    (w >> PORT_IP_SHIFT) as u32
}

/// The inside port (host order) a USED or STATIC word names.
pub const fn word_port(w: u64) -> u16 {
    w as u16
}

/// The sessions a USED word that is a mapping itself counts (bits 61..48).
pub const fn word_nsess(w: u64) -> u32 {
    ((w >> PORT_NSESS_SHIFT) & PORT_NSESS_MAX) as u32
}

/// The monotonic second a HELD word went on hold-down.
pub const fn held_since(w: u64) -> u32 {
    w as u32
}

// ---- where a word is ----------------------------------------------------------------------

/// Pool index, protocol index and outside port of an `nx_ports` index (nx_port_index).
pub fn port_index_parts(idx: usize) -> (u32, u32, u16) {
    let hi = (idx >> PORT_INDEX_SHIFT) as u32;
    (hi / NPROTO, hi % NPROTO, idx as u16)
}

/// The `nx_ports` index of outside `port` of pool index `addr_idx`, protocol index `pidx`
/// (bpf/nx_alloc.h, nx_port_index).
pub fn port_index_pidx(addr_idx: u32, pidx: u32, port: u32) -> usize {
    (((addr_idx * NPROTO + pidx) << PORT_INDEX_SHIFT) | port) as usize
}

/// The same for a protocol number.
pub fn port_index(addr_idx: u32, proto: u8, port: u16) -> u32 {
    port_index_pidx(addr_idx, proto_idx(proto), u32::from(port)) as u32
}

impl Tables {
    /// One outside port word, read through the syscall interface.
    pub fn port_word(&self, addr_idx: u32, proto: u8, port: u16) -> Result<u64> {
        let idx = port_index(addr_idx, proto, port);
        let v = self
            .ports
            .lookup(&idx.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_ports"))?
            .unwrap_or_default();
        Ok(super::value::<u64>(&v).unwrap_or(0))
    }
}

// ---- words that are mappings ----------------------------------------------------------------

/// Whether USED port word `v` at nx_ports index `idx` is a mapping itself, in dynamic mode:
/// it lies in the home block of the subscriber it names (bpf/nx_home.h, nx_word_is_map).
pub fn is_home_word(cfg: &nx_config, idx: usize, v: u64) -> bool {
    let (addr, _, port) = port_index_parts(idx);
    port_state(v) == PORT_USED
        && block_of(cfg, addr, u32::from(port))
            .is_some_and(|(gid, _)| walk_home(cfg, port_word_ip(v)) == Some(gid))
}

/// A USED port word that is a mapping itself, shown as the mapping table shows one: `nsess`
/// its session count, flag 2 (NX_MF_DET). None for any other word.
pub(super) fn word_mapping(pool: &[Ipv4Addr], idx: usize, v: u64) -> Option<nx_map> {
    if port_state(v) != PORT_USED {
        return None;
    }
    let (addr, pidx, port) = port_index_parts(idx);
    let out_ip = pool.get(addr as usize)?;
    let key = nx_map_key {
        in_ip: port_word_ip(v),
        in_port: word_port(v).to_be(),
        proto: PROTO_OF_IDX[pidx as usize],
        pad: 0,
    };
    Some(nx_map {
        key,
        out_ip: u32::from_ne_bytes(out_ip.octets()),
        out_port: port.to_be(),
        flags: MF_DET,
        nsess: word_nsess(v),
        ..Default::default()
    })
}

// ---- when a HELD word may be freed ----------------------------------------------------------

/// Seconds a HELD word in a walk range (a deterministic range, a home block its owner owns)
/// must be past its hold-down before the daemon frees it: the fast path claims such a word
/// from `hold` seconds on, so by then no walk passes it without taking it (bpf/nx_det.h).
pub const FREE_MARGIN_S: u32 = 2;

/// Whether freeing offset `k` of a deterministic range of `n` ports would hide a live
/// mapping: whether the walk of some USED word passes `k` on its way to that word
/// (bpf/nx_det.h; linear probing's deletion rule). `word(o)` reads the word at offset o,
/// `start(w)` is the walk start of the endpoint a USED word names. The words that can need
/// `k`: those further on its parity up to the first FREE word (a walk reaching one beyond
/// that FREE word would have stopped there), and those of the other parity whose walk fell
/// back after passing `k`, within `probe` - 1 pairs either side (such a walk met no FREE
/// word on `k`'s parity, so no FREE word on that side ends the search; this may keep a
/// word that only an unreachable mapping passes, never the other way round).
pub fn det_word_needed(
    k: u32,
    n: u32,
    probe: u32,
    word: impl Fn(u32) -> u64,
    start: impl Fn(u64) -> u32,
) -> bool {
    let probe = probe.min(n / 2);
    if probe == 0 {
        return false;
    }
    let passes = |rk: u32| {
        let rv = word(rk);
        port_state(rv) == PORT_USED && {
            let c = start(rv);
            matches!((det_walk_pos(c, k, probe, n), det_walk_pos(c, rk, probe, n)),
                (Some(pk), Some(pr)) if pk < pr)
        }
    };
    for j in 1..probe {
        let rk = (k + 2 * j) % n;
        if word(rk) == 0 {
            break;
        }
        if passes(rk) {
            return true;
        }
    }
    let (span, back) = (2 * probe - 1, 2 * (probe - 1));
    let span = span.min(n / 2);
    (0..span).any(|j| passes(((k ^ 1) + n + 2 * j - back) % n))
}

/// Whether the HELD word at nx_ports index `idx`, in a range of `n` ports from port
/// `first` whose words are mappings found by walks (a deterministic range, a home block),
/// must stay HELD: some live mapping's walk passes it (`det_word_needed`). `start(ip,
/// pidx, port)` is where an endpoint's walk starts in the range.
pub fn range_word_needed(
    words: &[AtomicU64],
    idx: usize,
    first: u32,
    n: u32,
    probe: u32,
    start: impl Fn(u32, u32, u16) -> u32,
) -> bool {
    let (_, pidx, port) = port_index_parts(idx);
    let k = u32::from(port) - first;
    let base = idx - k as usize;
    det_word_needed(
        k,
        n,
        probe,
        |o| words[base + o as usize].load(Ordering::Relaxed),
        |rv| start(port_word_ip(rv), pidx, word_port(rv)),
    )
}

/// Dynamic mode: the first port of the block port word `idx` lies in when that block is
/// owned by the subscriber whose home block it is (its words are home-walk mappings,
/// bpf/nx_home.h); `blocks` the block words.
fn owned_home_block(cfg: &nx_config, blocks: &[AtomicU64], idx: usize) -> Option<u32> {
    let (addr_idx, _, port) = port_index_parts(idx);
    let (gid, first) = block_of(cfg, addr_idx, u32::from(port))?;
    let owner = blocks.get(gid as usize).map_or(0, |b| b.load(Ordering::Acquire) as u32);
    (owner != 0 && walk_home(cfg, owner) == Some(gid)).then_some(first)
}

/// Whether a live mapping's walk passes the HELD word at `idx`, in a deterministic range or
/// in a home block its owner owns: freeing the word would hide that mapping (the walk stops
/// at the first FREE word, linear probing's deletion rule), so it stays HELD, claimable by
/// the next new mapping whose walk reaches it. `words` the port words, `blocks` the block
/// words (unused in deterministic mode).
pub fn walk_needs(cfg: &nx_config, words: &[AtomicU64], blocks: &[AtomicU64], idx: usize) -> bool {
    if cfg.det_count != 0 {
        let n = u32::from(cfg.det_ports);
        return det_first(cfg, u32::from(port_index_parts(idx).2)).is_some_and(|first| {
            range_word_needed(words, idx, first, n, u32::from(cfg.det_probe).min(n / 2), |ip, pidx, p| {
                det_start(cfg, ip, pidx, p, first)
            })
        });
    }
    owned_home_block(cfg, blocks, idx).is_some_and(|first| home_word_needed(cfg, words, idx, first))
}

/// `range_word_needed` in the home block from port `first` (home walks, bpf/nx_home.h).
fn home_word_needed(cfg: &nx_config, words: &[AtomicU64], idx: usize, first: u32) -> bool {
    let bs = u32::from(cfg.block_size);
    range_word_needed(words, idx, first, bs, cfg.home_probe.min(bs / 2), |ip, pidx, p| {
        home_start(cfg, ip, pidx, p, first)
    })
}

/// Whether the daemon may free HELD word `v` at `idx` at monotonic second `now_s`: its
/// hold-down (`hold_down_s`) is over, and in a walk range (deterministic mode, or a home
/// block its owner owns) by FREE_MARGIN_S more and no live walk passes it (`walk_needs`).
/// A word outside every deterministic range (never claimed in that mode) has nothing
/// walking past it.
pub fn may_free(
    cfg: &nx_config,
    words: &[AtomicU64],
    blocks: &[AtomicU64],
    idx: usize,
    v: u64,
    now_s: u32,
) -> bool {
    let since = now_s.wrapping_sub(held_since(v));
    let past_margin = || since >= cfg.hold_down_s.saturating_add(FREE_MARGIN_S) && since as i32 >= 0;
    if cfg.det_count != 0 {
        return past_margin() && !walk_needs(cfg, words, blocks, idx);
    }
    if since < cfg.hold_down_s {
        return false;
    }
    match owned_home_block(cfg, blocks, idx) {
        None => true,
        Some(first) => past_margin() && !home_word_needed(cfg, words, idx, first),
    }
}

// ---- the daemon's transitions ----------------------------------------------------------------

/// USED → HELD: a port word that is a mapping (a walk word) with no session, read as `v`,
/// goes on hold-down since `now_s`, unless it changed meanwhile. Returns whether it did.
pub fn hold_idle(w: &AtomicU64, v: u64, now_s: u32) -> bool {
    w.compare_exchange(v, held_word(now_s), Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

/// What [`free_held`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freed {
    /// Nothing: the word changed since it was read (the fast path claimed it).
    No,
    /// The port is FREE.
    Port,
    /// The port is FREE, and its block, left owned but empty, went back to the pool; the
    /// subscriber that held it.
    PortAndBlock(u32),
}

/// HELD → FREE: frees port word `w`, read as `v` (HELD, and `may_free`), unless it changed
/// meanwhile. `block`: the word of the block the port lies in (dynamic mode), which counts
/// every HELD word: it counts this one no more, and an owned block left with no port and no
/// session of its owner counted goes back to the pool, unless the fast path reserved it
/// again meanwhile (then the exchange fails and the owner keeps it).
pub fn free_held(w: &AtomicU64, v: u64, block: Option<&AtomicU64>) -> Freed {
    if w.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return Freed::No;
    }
    let Some(b) = block else { return Freed::Port };
    let after = b.fetch_sub(BLOCK_USED_ONE, Ordering::AcqRel) - BLOCK_USED_ONE;
    // (a home block that still counts sessions of its owner stays its owner's)
    if block_used(after) == 0
        && after as u32 != 0
        && block_nsess(after) == 0
        && b.compare_exchange(after, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    {
        return Freed::PortAndBlock(after as u32);
    }
    Freed::Port
}

/// → STATIC: writes static forward word `word` (`static_word`) at nx_ports index `idx`,
/// through the syscall interface. The caller checked that the port was FREE or already
/// this forward's.
pub fn set_static(t: &Tables, idx: u32, word: u64) -> std::result::Result<(), libbpf_rs::Error> {
    t.ports.update(&idx.to_ne_bytes(), &word.to_ne_bytes(), MapFlags::ANY)
}

/// STATIC → HELD: a removed static forward's port at nx_ports index `idx` goes on hold-down
/// since `now_s` like any released port, and counted in its block (every HELD word is: the
/// sweep counts the block down when it frees the word, and a STATIC word was never
/// counted), so the block is neither handed out meanwhile nor counted below zero
/// afterwards. Nothing when the word is not STATIC.
pub fn hold_static(t: &Tables, idx: u32, now_s: u32) -> Result<()> {
    let cfg = t.config()?;
    let ports = MmapWords::new(&t.ports, "nx_ports")?;
    let blocks = MmapWords::new(&t.blocks, "nx_blocks")?;
    let Some(w) = ports.words().get(idx as usize) else { return Ok(()) };
    let v = w.load(Ordering::Acquire);
    if port_state(v) != PORT_STATIC {
        return Ok(());
    }
    let held = held_word(now_s);
    let (addr_idx, _, port) = port_index_parts(idx as usize);
    if let Some((gid, _)) = block_of(&cfg, addr_idx, u32::from(port)) {
        if let Some(b) = blocks.words().get(gid as usize) {
            // counted first: a sweep that frees the word right after finds it counted
            b.fetch_add(BLOCK_USED_ONE, Ordering::AcqRel);
            if w.compare_exchange(v, held, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                b.fetch_sub(BLOCK_USED_ONE, Ordering::AcqRel);
            }
            return Ok(());
        }
    }
    let _ = w.compare_exchange(v, held, Ordering::AcqRel, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// det_word_needed against a brute force over random ranges: it keeps every word a
    /// reachable mapping's walk passes, and only words some USED word's walk passes.
    #[test]
    fn det_word_needed_matches_the_walks() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |m: u32| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % u64::from(m)) as u32
        };
        let held = PORT_HELD << PORT_STATE_SHIFT;
        for _ in 0..20_000 {
            let n = 2 * (1 + rnd(12));
            let probe = 1 + rnd(n / 2 + 2);
            let p = probe.min(n / 2);
            // USED words name their walk's start in bits 31..16; each sits on its own walk
            let mut w = vec![0u64; n as usize];
            for _ in 0..rnd(n + 1) {
                let (s, pos) = (rnd(n), rnd(2 * p));
                let r = if pos < p { (s + 2 * pos) % n } else { ((s ^ 1) + 2 * (pos - p)) % n };
                w[r as usize] = PORT_USED << PORT_STATE_SHIFT | u64::from(s) << 16 | 1;
            }
            for _ in 0..rnd(n) {
                w[rnd(n) as usize] = held;
            }
            let start = |v: u64| (v >> 16) as u32 & 0xffff;
            let seq = |s: u32| -> Vec<u32> {
                (0..2 * p)
                    .map(|i| if i < p { (s + 2 * i) % n } else { ((s ^ 1) + 2 * (i - p)) % n })
                    .collect()
            };
            for k in 0..n {
                let (mut reach, mut any) = (false, false);
                for r in 0..n {
                    let v = w[r as usize];
                    if v >> PORT_STATE_SHIFT != PORT_USED {
                        continue;
                    }
                    let sq = seq(start(v));
                    let Some(pr) = sq.iter().position(|&o| o == r) else { continue };
                    if let Some(pk) = sq[..pr].iter().position(|&o| o == k) {
                        any = true;
                        reach |= !sq[..pr].iter().any(|&o| w[o as usize] == 0) && pk < pr;
                    }
                }
                let got = det_word_needed(k, n, probe, |o| w[o as usize], start);
                assert!(!reach || got, "n {n} probe {probe} k {k}: a reachable walk passes it: {w:x?}");
                assert!(!got || any, "n {n} probe {probe} k {k}: no walk passes it: {w:x?}");
            }
        }
    }
}
