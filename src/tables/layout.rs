// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Where things are in the tables: the data plane's arithmetic, mirrored bit for bit (key
//! hashes, home buckets and slots, the walks of deterministic ranges and home blocks, the
//! blocks; a port word's index is in `ports.rs`). `tests/abi.rs` runs both sides on the
//! same inputs.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::abi::{
    BLOCK_NSESS_MASK, BLOCK_NSESS_SHIFT, BLOCK_USED_MASK, BLOCK_USED_SHIFT, CF_PORT_PARITY, DET_KEY,
    DIV_ADDRS, DIV_BLOCK_PAIRS, DIV_DET_PAIRS, DIV_HOME_SPAN, HOME_KEY, PROTO_TCP, PROTO_UDP, P_ICMP, P_TCP,
    P_UDP, SLOT_OVF_OFF, SUB_PROBE, TAB_PROBE,
};
use crate::skel::types::{nx_config, nx_map_key, nx_sess_key, nx_udiv};

/// Division by `d` as the data plane does it (struct nx_udiv in bpf/nx_types.h: Granlund
/// and Montgomery's multiply and two shifts, exact for every 32-bit dividend); 0 gives the
/// all-zero entry, which no configured path divides by.
pub fn udiv_magic(d: u32) -> nx_udiv {
    if d == 0 {
        return nx_udiv::default();
    }
    // l = ceil(log2 d); m = floor(2^32 * (2^l - d) / d) + 1, which fits in 32 bits
    let l = 32 - (d - 1).leading_zeros();
    let m = ((1u128 << 32) * ((1u128 << l) - u128::from(d)) / u128::from(d) + 1) as u32;
    nx_udiv { m, s1: l.min(1) as u8, s2: l.saturating_sub(1) as u8, pad: 0 }
}

/// `x / d` with `v = udiv_magic(d)`, as nx_udiv computes it.
pub fn udiv(x: u32, v: &nx_udiv) -> u32 {
    let t = ((u64::from(x) * u64::from(v.m)) >> 32) as u32;
    (t + ((x - t) >> (v.s1 & 31))) >> (v.s2 & 31)
}

/// Sets `cfg.div` from the geometry in `cfg` (its pool addresses, blocks per address, block
/// size and deterministic range size): the daemon does this whenever it writes the
/// configuration, so the packet path never divides.
pub fn set_divisors(cfg: &mut nx_config) {
    let (n, bpa) = (u32::from(cfg.n_addrs), u32::from(cfg.blocks_per_addr));
    cfg.div[DIV_HOME_SPAN] = udiv_magic(n * bpa);
    cfg.div[DIV_ADDRS] = udiv_magic(n);
    cfg.div[DIV_BLOCK_PAIRS] = udiv_magic(u32::from(cfg.block_size) / 2);
    cfg.div[DIV_DET_PAIRS] = udiv_magic(u32::from(cfg.det_ports) / 2);
}

/// Home buckets (two slots each) of a table configured for `max` entries: 80% full at
/// `max`. The array has TAB_PROBE buckets more (`tab_slots`): a search never wraps.
pub fn tab_buckets(max: u32) -> u32 {
    ((max as u64 * 5 / 4).div_ceil(2)).clamp(1, (i32::MAX / 2) as u64) as u32
}

/// Slots of the array of a table configured for `max` entries: its home buckets and
/// TAB_PROBE more, two slots each.
pub fn tab_slots(max: u32) -> u32 {
    2 * (tab_buckets(max) + TAB_PROBE)
}

/// The subscriber table (bpf/nx_subs.h): home slots for `max` subscribers (half full at
/// most), and the array's length (NX_SUB_PROBE slots more: a search never wraps).
pub fn sub_home_slots(max: u32) -> u32 {
    (max as u64 * 2).clamp(1, (i32::MAX as u64) - SUB_PROBE as u64) as u32
}

pub fn sub_slots(max: u32) -> u32 {
    sub_home_slots(max) + SUB_PROBE
}

/// A subscriber's home slot (bpf/nx_subs.h, nx_sub_home).
pub fn sub_home(h: u64, nslots: u32) -> u32 {
    (((h >> 32) * nslots as u64) >> 32) as u32
}

/// Where the walk of inside endpoint (`in_ip` as the data plane stores it, protocol index
/// `pidx`, inside port `in_port` in host order) starts in a deterministic range beginning
/// at port `first`: its offset (2 * pair + parity), as nx_det_start computes it.
pub fn det_start(cfg: &nx_config, in_ip: u32, pidx: u32, in_port: u16, first: u32) -> u32 {
    walk_start(cfg, DET_KEY, u32::from(cfg.det_ports / 2), in_ip, pidx, in_port, first)
}

/// The same for a home walk (bpf/nx_home.h) in the home block beginning at port `first`.
pub fn home_start(cfg: &nx_config, in_ip: u32, pidx: u32, in_port: u16, first: u32) -> u32 {
    walk_start(cfg, HOME_KEY, u32::from(cfg.block_size / 2), in_ip, pidx, in_port, first)
}

/// nx_walk_start: a walk over `npairs` pairs, its hash keyed with `key`.
fn walk_start(
    cfg: &nx_config,
    key: u64,
    npairs: u32,
    in_ip: u32,
    pidx: u32,
    in_port: u16,
    first: u32,
) -> u32 {
    let pp = pidx << 16 | u32::from(in_port);
    let h = tab_hash((in_ip as u64) << 32 | pp as u64, key, cfg.tab_seed);
    let par = if cfg.flags & CF_PORT_PARITY != 0 && pidx != P_ICMP {
        (pp ^ first) & 1
    } else {
        (h >> 40) as u32 & 1
    };
    2 * ((h as u32) % npairs.max(1)) + par
}

/// Ports of a block word counted in use (USED or HELD; NX_BLOCK_USED).
pub fn block_used(w: u64) -> u64 {
    (w >> BLOCK_USED_SHIFT) & BLOCK_USED_MASK
}

/// Sessions of its owner a (home) block word counts (NX_BLOCK_NSESS, bpf/nx_limits.h).
pub fn block_nsess(w: u64) -> u32 {
    ((w >> BLOCK_NSESS_SHIFT) & BLOCK_NSESS_MASK) as u32
}

/// Subscriber `ip`'s home block (global block id), as nx_home_block computes it; None
/// when the pool has no blocks.
pub fn home_block(cfg: &nx_config, ip: u32) -> Option<u32> {
    let (n, bpa) = (u32::from(cfg.n_addrs), u32::from(cfg.blocks_per_addr));
    if n == 0 || bpa == 0 {
        return None;
    }
    let i = u32::from_be(ip) % (n * bpa);
    Some((i % n) * bpa + i / n)
}

/// The global block id and first port of the block outside `port` of pool index `addr`
/// falls in; None when it is outside every block.
pub fn block_of(cfg: &nx_config, addr: u32, port: u32) -> Option<(u32, u32)> {
    let (lo, bs, bpa) = (u32::from(cfg.port_lo), u32::from(cfg.block_size), u32::from(cfg.blocks_per_addr));
    if bs == 0 || port < lo || (port - lo) / bs >= bpa {
        return None;
    }
    Some((addr * bpa + (port - lo) / bs, lo + (port - lo) / bs * bs))
}

/// Subscriber `ip`'s home block where the home walk finds its mappings (bpf/nx_home.h);
/// None when the pool has no blocks or `nat.home_probe` is 0 (every mapping in the table).
pub fn walk_home(cfg: &nx_config, ip: u32) -> Option<u32> {
    if cfg.home_probe == 0 {
        return None;
    }
    home_block(cfg, ip)
}

/// Where offset `k` of a deterministic range of `n` ports comes in the walk that starts at
/// offset `start` (bpf/nx_det.h): `probe` pairs of the start's parity, then `probe` pairs
/// of the other parity from the same pair. None when the walk never reaches `k`.
pub fn det_walk_pos(start: u32, k: u32, probe: u32, n: u32) -> Option<u32> {
    let probe = probe.min(n / 2);
    let (from, part) = if (k ^ start) & 1 == 0 { (start, 0) } else { (start ^ 1, probe) };
    let d = (k + n - from) % n / 2;
    (d < probe).then_some(part + d)
}

/// The first port of the deterministic range that outside `port` (host order) falls in,
/// or None when it is outside every range.
pub fn det_first(cfg: &nx_config, port: u32) -> Option<u32> {
    let (lo, n) = (u32::from(cfg.port_lo), u32::from(cfg.det_ports));
    if n == 0 || port < lo || (port - lo) / n >= cfg.det_per_addr {
        return None;
    }
    Some(lo + (port - lo) / n * n)
}

/// The data plane's key hash (bpf/nx_tab.h, nx_tab_hash): the same bits, or lookups from
/// user space would search the wrong bucket.
pub fn tab_hash(k0: u64, k1: u64, seed: u32) -> u64 {
    let s = (seed as u64) << 32 | seed as u64;
    let mut h = (k0 ^ s).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= k1.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 32;
    h
}

/// A key's first (`alt` false) or second home bucket.
pub fn tab_home(h: u64, nbkt: u32, alt: bool) -> u32 {
    let x = if alt { h & 0xffff_ffff } else { h >> 32 };
    ((x * nbkt as u64) >> 32) as u32
}

pub fn sess_k0(k: &nx_sess_key) -> u64 {
    k.in_port as u64 | (k.rem_port as u64) << 16 | (k.proto as u64) << 32
}

pub fn sess_k1(k: &nx_sess_key) -> u64 {
    k.in_ip as u64 | (k.rem_ip as u64) << 32
}

pub fn map_k0(k: &nx_map_key) -> u64 {
    k.in_ip as u64 | (k.in_port as u64) << 32 | (k.proto as u64) << 48
}

/// A protocol's index in per-protocol tables (bpf/nx_parse.h, nx_proto_idx).
pub fn proto_idx(p: u8) -> u32 {
    match p {
        PROTO_TCP => P_TCP,
        PROTO_UDP => P_UDP,
        _ => P_ICMP,
    }
}

/// A bucket's overflow and alt counts (bpf/nx_tab.h: the u32 at NX_SLOT_OVF_OFF of its
/// first and of its second slot), from the table's words.
pub(super) fn bucket_counts(w: &[AtomicU64], b: usize) -> (u64, u64) {
    let (word, shift) = (SLOT_OVF_OFF / 8, (SLOT_OVF_OFF % 8) * 8);
    let count = |slot: usize| (w[(b * 2 + slot) * 4 + word].load(Ordering::Acquire) >> shift) & 0xffff_ffff;
    (count(0), count(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn det_walk_positions() {
        // 16 ports (8 pairs), 3 pairs a part, walk from offset 13 (odd): 13, 15, 1, then
        // the even part from 12: 12, 14, 0; nothing else is reached
        let pos: Vec<Option<u32>> = (0..16).map(|k| det_walk_pos(13, k, 3, 16)).collect();
        let want = |k: u32| match k {
            13 => Some(0),
            15 => Some(1),
            1 => Some(2),
            12 => Some(3),
            14 => Some(4),
            0 => Some(5),
            _ => None,
        };
        assert_eq!(pos, (0..16).map(want).collect::<Vec<_>>());
        // a probe beyond the chain is the whole chain: every offset is reached once
        let mut all: Vec<u32> = (0..16).filter_map(|k| det_walk_pos(4, k, 99, 16)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..16).collect::<Vec<_>>());
    }

    #[test]
    fn udiv_is_division() {
        // every divisor class: 1, powers of two and their neighbours, the largest, and a
        // spread of others; dividends at the edges and around multiples of the divisor
        let mut ds: Vec<u32> = vec![1, 2, 3, 5, 7, 10, 641, 65_535, 65_536, 65_537, u32::MAX, u32::MAX - 1];
        ds.extend((1..32).flat_map(|k| [(1u32 << k) - 1, 1u32 << k, (1u32 << k) + 1]));
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        ds.extend((0..2000).map(|_| (next() as u32) >> (next() % 32)).filter(|&d| d != 0));
        for d in ds {
            let v = udiv_magic(d);
            let mut xs = vec![0, 1, d - 1, d, d.wrapping_add(1), u32::MAX, u32::MAX - 1, u32::MAX / d * d];
            xs.extend((0..200).map(|_| next() as u32));
            xs.extend((0..50).map(|_| ((next() as u32) / d).wrapping_mul(d).wrapping_sub(1)));
            for x in xs {
                assert_eq!(udiv(x, &v), x / d, "{x} / {d} with {v:?}");
            }
        }
    }
}
