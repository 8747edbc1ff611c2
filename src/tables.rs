// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Typed access to the data plane's tables, from a loaded skeleton or from the pins.
//!
//! The daemon, the CLI and the tests all read state through here: one place knows the
//! layouts, and those layouts are the C structs of `bpf/nx_types.h` as the skeleton
//! generated them.

use std::mem::offset_of;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Pod;
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use thiserror::Error;

use crate::abi::{
    sub_state, BLOCK_NSESS_MASK, BLOCK_NSESS_SHIFT, BLOCK_USED_MASK, BLOCK_USED_SHIFT, CF_PORT_PARITY,
    DET_KEY, HOME_KEY, MAPS_W0_KEY, MF_DET, PORT_INDEX_SHIFT, PORT_IP_SHIFT, PROTO_ICMP, PROTO_OF_IDX,
    PROTO_TCP, PROTO_UDP, P_ICMP, P_TCP, P_UDP, SESS_W0_KEY, SLOT_ALT, SLOT_CTL_SHIFT, SLOT_GEN_MASK,
    SLOT_LIVE, SLOT_OVF_OFF, SLOT_STATE_MASK, SUB_HASH_K1, TAB_PROBE, TAB_SUBS, TCP_STATE_NAMES,
};
use crate::abi::{
    BLOCK_MIXED, NPROTO, PORT_FREE, PORT_HELD, PORT_NSESS_MAX, PORT_NSESS_SHIFT, PORT_STATE_SHIFT, PORT_USED,
    SUB_LIVE, SUB_PROBE, SUB_TOMB, TAB_MAPS, TAB_SESS, TICK_SHIFT,
};
use crate::skel::types::{nx_config, nx_map, nx_map_key, nx_sess, nx_sess_key, nx_stat, nx_sub};

/// Every pinned map, by the name it has in the BPF object and under the pin directory.
pub const MAP_NAMES: [&str; 16] = [
    "nx_cfg",
    "nx_pool",
    "nx_pool_idx",
    "nx_ifaces",
    "nx_tx",
    "nx_ports",
    "nx_blocks",
    "nx_subs",
    "nx_maps",
    "nx_sess",
    "nx_tab_cnt",
    "nx_tab_locks",
    "nx_stats",
    "nx_frags",
    "nx_frag_rb",
    "nx_det_nsess",
];

/// Home buckets (two slots each) of a table configured for `max` entries: 80% full at
/// `max`. The array has TAB_PROBE buckets more (`tab_slots`): a search never wraps.
pub fn tab_buckets(max: u32) -> u32 {
    ((max as u64 * 5 / 4).div_ceil(2)).clamp(1, (i32::MAX / 2) as u64) as u32
}

/// The data plane's key hash (bpf/nx_tab.h, nx_tab_hash): the same bits, or lookups from
/// user space would search the wrong bucket.
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

/// Whether USED port word `v` at nx_ports index `idx` is a mapping itself, in dynamic mode:
/// it lies in the home block of the subscriber it names (bpf/nx_home.h, nx_word_is_map).
pub fn is_home_word(cfg: &nx_config, idx: usize, v: u64) -> bool {
    let (addr, _, port) = port_index_parts(idx);
    v >> PORT_STATE_SHIFT == PORT_USED
        && block_of(cfg, addr, u32::from(port))
            .is_some_and(|(gid, _)| walk_home(cfg, port_word_ip(v)) == Some(gid))
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
        rv >> PORT_STATE_SHIFT == PORT_USED && {
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

/// The first port of the deterministic range that outside `port` (host order) falls in,
/// or None when it is outside every range.
pub fn det_first(cfg: &nx_config, port: u32) -> Option<u32> {
    let (lo, n) = (u32::from(cfg.port_lo), u32::from(cfg.det_ports));
    if n == 0 || port < lo || (port - lo) / n >= cfg.det_per_addr {
        return None;
    }
    Some(lo + (port - lo) / n * n)
}

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

#[derive(Debug, Error)]
pub enum TableError {
    #[error("cannot open pinned map {path}: {source} (is natrix running? `natrix run` creates it)")]
    OpenPinned { path: String, source: libbpf_rs::Error },
    #[error("map {map}: {source}")]
    Map { map: &'static str, source: libbpf_rs::Error },
    #[error("map {map}: {what}")]
    Layout { map: &'static str, what: String },
}

type Result<T> = std::result::Result<T, TableError>;

/// What the contents of the tables this natrix writes mean (`nx_config.layout`). Raise it
/// with every change to how a mapping is found or what a table entry or port word holds:
/// a takeover across a change is then refused, in both directions, instead of reading
/// the tables wrongly, and the CLI refuses to read them. 1: deterministic walks of two
/// parts (the parity fallback). 2: dynamic mode's home-walk mappings (bpf/nx_home.h).
/// 3: per-subscriber session counts (`nx_sub.nsess`, `nx_det_nsess`), interface MACs.
/// 4: a home block's word counts its owner's sessions (NSESS, sessions flagged HOMECNT).
/// 5: the daemon's fragment counters in nx_stats.
pub const TABLE_LAYOUT: u32 = 5;

/// A map value's leading `T` (a u32 or u64 counter, a struct), None when the value is
/// shorter.
pub fn value<T: Pod>(v: &[u8]) -> Option<T> {
    v.get(..std::mem::size_of::<T>()).map(bytemuck::pod_read_unaligned)
}

/// Current time on the data plane's clock: CLOCK_MONOTONIC, as bpf_ktime_get_coarse_ns.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn now_tick() -> u32 {
    (now_ns() >> TICK_SHIFT) as u32
}

/// Seconds left until `expire` (a tick), negative when past.
pub fn ticks_to_secs(expire: u32, now: u32) -> i64 {
    let d = expire.wrapping_sub(now) as i32 as i64;
    (d << TICK_SHIFT) / 1_000_000_000
}

pub fn proto_name(p: u8) -> &'static str {
    match p {
        PROTO_TCP => "tcp",
        PROTO_UDP => "udp",
        PROTO_ICMP => "icmp",
        _ => "other",
    }
}

/// A protocol's index in per-protocol tables (bpf/nx_parse.h, nx_proto_idx).
pub fn proto_idx(p: u8) -> u32 {
    match p {
        PROTO_TCP => P_TCP,
        PROTO_UDP => P_UDP,
        _ => P_ICMP,
    }
}

/// A session's TCP state by name (TCP_STATE_NAMES); "open" for one it does not know.
pub fn tcp_state_name(s: u8) -> &'static str {
    TCP_STATE_NAMES.iter().find(|(st, _)| st.0 == u32::from(s)).map_or("open", |(_, n)| n)
}

/// The inside address a port word names (NX_PORT_WORD_IP).
pub fn port_word_ip(w: u64) -> u32 {
    (w >> PORT_IP_SHIFT) as u32
}

/// Pool index, protocol index and outside port of an `nx_ports` index (nx_port_index).
pub fn port_index_parts(idx: usize) -> (u32, u32, u16) {
    let hi = (idx >> PORT_INDEX_SHIFT) as u32;
    (hi / NPROTO, hi % NPROTO, idx as u16)
}

/// A bucket's overflow and alt counts (bpf/nx_tab.h: the u32 at NX_SLOT_OVF_OFF of its
/// first and of its second slot), from the table's words.
fn bucket_counts(w: &[AtomicU64], b: usize) -> (u64, u64) {
    let (word, shift) = (SLOT_OVF_OFF / 8, (SLOT_OVF_OFF % 8) * 8);
    let count = |slot: usize| (w[(b * 2 + slot) * 4 + word].load(Ordering::Acquire) >> shift) & 0xffff_ffff;
    (count(0), count(1))
}

/// Counter names, in the order of `enum nx_stat`: the names `natrix stats` prints.
/// Tied to the generated constants, and a test checks the list covers the enum exactly.
pub const STATS: &[(nx_stat, &str)] = &[
    (nx_stat::NX_STAT_RX_INSIDE, "rx_inside"),
    (nx_stat::NX_STAT_RX_OUTSIDE, "rx_outside"),
    (nx_stat::NX_STAT_XLATE_OUT, "translated_out"),
    (nx_stat::NX_STAT_XLATE_IN, "translated_in"),
    (nx_stat::NX_STAT_REDIRECT, "redirected"),
    (nx_stat::NX_STAT_PASS_NOT_IP, "pass_not_ipv4"),
    (nx_stat::NX_STAT_PASS_LOCAL, "pass_local"),
    (nx_stat::NX_STAT_PASS_TTL, "pass_ttl"),
    (nx_stat::NX_STAT_PASS_NO_NEIGH, "pass_no_neigh"),
    (nx_stat::NX_STAT_PASS_FIB_OTHER, "pass_fib_other"),
    (nx_stat::NX_STAT_PASS_TOO_BIG, "pass_too_big"),
    (nx_stat::NX_STAT_MAP_CREATED, "mappings_created"),
    (nx_stat::NX_STAT_SESS_CREATED, "sessions_created"),
    (nx_stat::NX_STAT_SUB_CREATED, "subscribers_created"),
    (nx_stat::NX_STAT_BLOCK_ALLOC, "blocks_allocated"),
    (nx_stat::NX_STAT_ALLOC_RETRY, "alloc_retries"),
    (nx_stat::NX_STAT_PASS_EXCLUDED, "pass_excluded"),
    (nx_stat::NX_STAT_ICMP_ERR_IN, "icmp_errors_in"),
    (nx_stat::NX_STAT_ICMP_ERR_OUT, "icmp_errors_out"),
    (nx_stat::NX_STAT_ICMP_SENT, "icmp_sent"),
    (nx_stat::NX_STAT_ICMP_SUPPRESSED, "icmp_rate_limited"),
    (nx_stat::NX_STAT_FRAG_OUT, "fragments_out"),
    (nx_stat::NX_STAT_FRAG_IN, "fragments_in"),
    (nx_stat::NX_STAT_FRAG_HELD, "fragments_held"),
    (nx_stat::NX_STAT_FRAG_REINJECTED, "fragments_reinjected"),
    (nx_stat::NX_STAT_FIB_LOOKUP, "fib_lookups"),
    (nx_stat::NX_STAT_HOME_BLOCK, "home_blocks"),
    (nx_stat::NX_STAT_PASS_OTHER_HOST, "pass_other_host"),
    (nx_stat::NX_DROP_MALFORMED_ETH, "malformed_eth"),
    (nx_stat::NX_DROP_MALFORMED_IP, "malformed_ip"),
    (nx_stat::NX_DROP_MALFORMED_L4, "malformed_l4"),
    (nx_stat::NX_DROP_FRAGMENT, "fragment"),
    (nx_stat::NX_DROP_FRAG_NO_STATE, "fragment_no_room"),
    (nx_stat::NX_DROP_UNSUPPORTED_PROTO, "unsupported_proto"),
    (nx_stat::NX_DROP_UNSUPPORTED_ICMP, "unsupported_icmp"),
    (nx_stat::NX_DROP_NO_MAPPING, "no_mapping"),
    (nx_stat::NX_DROP_FILTERED, "filtered"),
    (nx_stat::NX_DROP_POOL_EXHAUSTED, "pool_exhausted"),
    (nx_stat::NX_DROP_QUOTA_EXCEEDED, "quota_exceeded"),
    (nx_stat::NX_DROP_RATE_LIMITED, "rate_limited"),
    (nx_stat::NX_DROP_TABLE_FULL, "table_full"),
    (nx_stat::NX_DROP_HAIRPIN_DISABLED, "hairpin_disabled"),
    (nx_stat::NX_DROP_TCP_NO_SYN, "tcp_no_syn"),
    (nx_stat::NX_DROP_REDIRECT_FAILED, "redirect_failed"),
    (nx_stat::NX_DROP_ICMP_BAD_CHECKSUM, "icmp_bad_checksum"),
    (nx_stat::NX_DROP_ICMP_MALFORMED, "icmp_malformed"),
    (nx_stat::NX_DROP_MTU_EXCEEDED, "mtu_exceeded"),
    (nx_stat::NX_DROP_MAP_DYING, "mapping_expiring"),
    (nx_stat::NX_DROP_TABLE_BUSY, "table_busy"),
    (nx_stat::NX_DROP_NOT_SUBSCRIBER, "not_subscriber"),
    (nx_stat::NX_DROP_SESSION_QUOTA, "session_quota"),
    (nx_stat::NX_DROP_FRAG_TOO_BIG, "fragment_too_big"),
    (nx_stat::NX_DROP_FRAG_EXPIRED, "fragment_expired"),
    (nx_stat::NX_DROP_FRAG_EVICTED, "fragment_evicted"),
    (nx_stat::NX_DROP_FRAG_SEND_FAILED, "fragment_send_failed"),
    (nx_stat::NX_DROP_INTERNAL, "internal_error"),
];

pub fn is_drop(s: nx_stat) -> bool {
    s.0 >= nx_stat::NX_DROP_FIRST.0 && s.0 < nx_stat::NX_STAT_MAX.0
}

/// Index of a counter by its printed name (for tests and tools).
pub fn stat_index(name: &str) -> Option<usize> {
    STATS.iter().find(|(_, n)| *n == name).map(|(s, _)| s.0 as usize)
}

/// Handles on every map of one data plane instance.
pub struct Tables {
    pub cfg: MapHandle,
    pub pool: MapHandle,
    pub pool_idx: MapHandle,
    pub ifaces: MapHandle,
    pub tx: MapHandle,
    pub ports: MapHandle,
    pub blocks: MapHandle,
    pub subs: MapHandle,
    pub maps: MapHandle,
    pub sess: MapHandle,
    pub tab_cnt: MapHandle,
    pub stats: MapHandle,
    /// Deterministic mode: sessions per subscriber index (dynamic mode: `nx_sub.nsess`).
    pub det_nsess: MapHandle,
}

fn map_err(map: &'static str) -> impl FnOnce(libbpf_rs::Error) -> TableError {
    move |source| TableError::Map { map, source }
}

impl Tables {
    /// Opens the maps pinned under `dir` (what `natrix run` leaves behind).
    pub fn open_pinned(dir: &Path) -> Result<Self> {
        let open = |name: &str| {
            let path = dir.join(name);
            MapHandle::from_pinned_path(&path)
                .map_err(|source| TableError::OpenPinned { path: path.display().to_string(), source })
        };
        let t = Tables {
            cfg: open("nx_cfg")?,
            pool: open("nx_pool")?,
            pool_idx: open("nx_pool_idx")?,
            ifaces: open("nx_ifaces")?,
            tx: open("nx_tx")?,
            ports: open("nx_ports")?,
            blocks: open("nx_blocks")?,
            subs: open("nx_subs")?,
            maps: open("nx_maps")?,
            sess: open("nx_sess")?,
            tab_cnt: open("nx_tab_cnt")?,
            stats: open("nx_stats")?,
            det_nsess: open("nx_det_nsess")?,
        };
        // tables another natrix version wrote are not read as if this one had
        let layout = t.config()?.layout;
        if layout != TABLE_LAYOUT {
            return Err(TableError::Layout {
                map: "nx_cfg",
                what: format!(
                    "table layout {layout}, this natrix reads layout {TABLE_LAYOUT}: the tables under {} were written by another natrix version",
                    dir.display()
                ),
            });
        }
        Ok(t)
    }

    /// Handles on the maps of a loaded skeleton (duplicated file descriptors).
    pub fn from_skel(s: &crate::skel::NatrixSkel<'_>) -> Result<Self> {
        let m = &s.maps;
        let h =
            |map: &libbpf_rs::MapMut<'_>, name: &'static str| MapHandle::try_from(map).map_err(map_err(name));
        Ok(Tables {
            cfg: h(&m.nx_cfg, "nx_cfg")?,
            pool: h(&m.nx_pool, "nx_pool")?,
            pool_idx: h(&m.nx_pool_idx, "nx_pool_idx")?,
            ifaces: h(&m.nx_ifaces, "nx_ifaces")?,
            tx: h(&m.nx_tx, "nx_tx")?,
            ports: h(&m.nx_ports, "nx_ports")?,
            blocks: h(&m.nx_blocks, "nx_blocks")?,
            subs: h(&m.nx_subs, "nx_subs")?,
            maps: h(&m.nx_maps, "nx_maps")?,
            sess: h(&m.nx_sess, "nx_sess")?,
            tab_cnt: h(&m.nx_tab_cnt, "nx_tab_cnt")?,
            stats: h(&m.nx_stats, "nx_stats")?,
            det_nsess: h(&m.nx_det_nsess, "nx_det_nsess")?,
        })
    }

    pub fn config(&self) -> Result<nx_config> {
        let v = self
            .cfg
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_cfg"))?
            .ok_or(TableError::Layout { map: "nx_cfg", what: "entry 0 missing".into() })?;
        if v.len() != std::mem::size_of::<nx_config>() {
            return Err(TableError::Layout {
                map: "nx_cfg",
                what: format!(
                    "{} bytes, this natrix reads {}: tables of another natrix version",
                    v.len(),
                    std::mem::size_of::<nx_config>()
                ),
            });
        }
        Ok(bytemuck::pod_read_unaligned(&v))
    }

    pub fn write_config(&self, c: &nx_config) -> Result<()> {
        self.cfg.update(&0u32.to_ne_bytes(), bytemuck::bytes_of(c), MapFlags::ANY).map_err(map_err("nx_cfg"))
    }

    /// The pool, in pool-index order.
    pub fn pool(&self) -> Result<Vec<Ipv4Addr>> {
        let n = self.config()?.n_addrs as u32;
        (0..n)
            .map(|i| {
                let v = self
                    .pool
                    .lookup(&i.to_ne_bytes(), MapFlags::ANY)
                    .map_err(map_err("nx_pool"))?
                    .unwrap_or_default();
                let b: [u8; 4] = v.get(..4).and_then(|s| s.try_into().ok()).unwrap_or([0; 4]);
                Ok(Ipv4Addr::from(b))
            })
            .collect()
    }

    /// An open-addressed table's map, name and key bits of its first word.
    fn tab(&self, tab: usize) -> (&MapHandle, &'static str, u64) {
        match tab {
            TAB_SESS => (&self.sess, "nx_sess", SESS_W0_KEY),
            _ => (&self.maps, "nx_maps", MAPS_W0_KEY),
        }
    }

    /// Every live slot of an open-addressed table, read through mmap (no syscall per
    /// entry): each slot is read twice-checked, so a slot reused meanwhile is skipped.
    fn slots<V: Pod>(map: &MapHandle, name: &'static str) -> Result<Vec<V>> {
        let m = MmapWords::new(map, name)?;
        let w = m.words();
        let mut out = Vec::new();
        for e in w.chunks_exact(4) {
            let w0 = e[0].load(Ordering::Acquire);
            if (w0 & SLOT_STATE_MASK) >> SLOT_CTL_SHIFT != SLOT_LIVE {
                continue;
            }
            let words = [
                w0,
                e[1].load(Ordering::Acquire),
                e[2].load(Ordering::Acquire),
                e[3].load(Ordering::Acquire),
            ];
            if (e[0].load(Ordering::Acquire) ^ w0) & (SLOT_STATE_MASK | SLOT_GEN_MASK) != 0 {
                continue;
            }
            out.push(slot_value::<V>(words));
        }
        Ok(out)
    }

    /// Calls `f` on every live session, streamed from the mmap (nothing collected: the
    /// table may hold millions); returns the LIVE slots seen, including those skipped
    /// because they changed while read.
    pub fn for_each_session(&self, mut f: impl FnMut(&nx_sess)) -> Result<u64> {
        let m = MmapWords::new(&self.sess, "nx_sess")?;
        let mut live = 0;
        for e in m.words().chunks_exact(4) {
            let w0 = e[0].load(Ordering::Acquire);
            if (w0 & SLOT_STATE_MASK) >> SLOT_CTL_SHIFT != SLOT_LIVE {
                continue;
            }
            live += 1;
            let words = [
                w0,
                e[1].load(Ordering::Acquire),
                e[2].load(Ordering::Acquire),
                e[3].load(Ordering::Acquire),
            ];
            if (e[0].load(Ordering::Acquire) ^ w0) & (SLOT_STATE_MASK | SLOT_GEN_MASK) != 0 {
                continue;
            }
            f(&slot_value::<nx_sess>(words));
        }
        Ok(live)
    }

    pub fn sessions(&self) -> Result<Vec<(nx_sess_key, nx_sess)>> {
        Ok(Self::slots::<nx_sess>(&self.sess, "nx_sess")?
            .into_iter()
            .map(|s| {
                let k = nx_sess_key {
                    in_ip: s.in_ip,
                    rem_ip: s.rem_ip,
                    in_port: s.in_port,
                    rem_port: s.rem_port,
                    proto: s.proto,
                    ..Default::default()
                };
                (k, s)
            })
            .collect())
    }

    /// Every mapping: in deterministic mode the port words, in dynamic mode the mapping
    /// table's entries and the home-walk mappings (port words, flag 2 as in deterministic
    /// mode).
    pub fn mappings(&self) -> Result<Vec<(nx_map_key, nx_map)>> {
        let cfg = self.config()?;
        if cfg.det_count != 0 {
            return self.det_mappings();
        }
        let mut v = self.table_mappings()?;
        v.extend(self.home_mappings(&cfg, None)?);
        Ok(v)
    }

    /// The mapping table's entries alone.
    pub fn table_mappings(&self) -> Result<Vec<(nx_map_key, nx_map)>> {
        Ok(Self::slots::<nx_map>(&self.maps, "nx_maps")?
            .into_iter()
            .map(|mut m| {
                m.key.pad = 0; // the slot's control byte
                (m.key, m)
            })
            .collect())
    }

    /// Deterministic mode: every USED port word is a mapping (bpf/nx_det.h), shown as the
    /// mapping table shows one, `nsess` its session count, flag 2 (NX_MF_DET).
    fn det_mappings(&self) -> Result<Vec<(nx_map_key, nx_map)>> {
        let pool = self.pool()?;
        let ports = MmapWords::new(&self.ports, "nx_ports")?;
        let mut out = Vec::new();
        for (idx, w) in ports.words().iter().enumerate() {
            if let Some(m) = word_mapping(&pool, idx, w.load(Ordering::Relaxed)) {
                out.push((m.key, m));
            }
        }
        Ok(out)
    }

    /// Dynamic mode: the home-walk mappings (bpf/nx_home.h), the USED words naming the
    /// subscriber whose home block they lie in, read block by block over the blocks their
    /// home subscribers own; only subscriber `only`'s when given.
    fn home_mappings(&self, cfg: &nx_config, only: Option<u32>) -> Result<Vec<(nx_map_key, nx_map)>> {
        let pool = self.pool()?;
        let ports = MmapWords::new(&self.ports, "nx_ports")?;
        let blocks = MmapWords::new(&self.blocks, "nx_blocks")?;
        let (words, bs) = (ports.words(), usize::from(cfg.block_size));
        let mut out = Vec::new();
        for (gid, b) in blocks.words().iter().enumerate() {
            let owner = b.load(Ordering::Relaxed) as u32;
            if owner == 0 || only.is_some_and(|o| o != owner) || walk_home(cfg, owner) != Some(gid as u32) {
                continue;
            }
            let bpa = usize::from(cfg.blocks_per_addr);
            let (addr, first) = (gid / bpa, usize::from(cfg.port_lo) + gid % bpa * bs);
            for pidx in 0..NPROTO {
                let base = port_index_pidx(addr as u32, pidx, first as u32);
                let Some(range) = words.get(base..base + bs) else { continue };
                for (idx, w) in (base..).zip(range) {
                    let v = w.load(Ordering::Relaxed);
                    if port_word_ip(v) == owner {
                        if let Some(m) = word_mapping(&pool, idx, v) {
                            out.push((m.key, m));
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Entries in the session and mapping tables, as the data plane counts them.
    pub fn table_counts(&self) -> Result<[u32; 2]> {
        let mut out = [0u32; 2];
        for (i, o) in out.iter_mut().enumerate() {
            let v = self
                .tab_cnt
                .lookup(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .map_err(map_err("nx_tab_cnt"))?
                .unwrap_or_default();
            *o = value::<u32>(&v).unwrap_or(0);
        }
        Ok(out)
    }

    /// Load and shape of table `tab` (TAB_SESS or TAB_MAPS), from one pass over its slots:
    /// what `natrix stats` shows, and what the tests check the structure with.
    pub fn tab_health(&self, tab: usize) -> Result<TabHealth> {
        let (map, name, keym) = self.tab(tab);
        let cfg = self.config()?;
        let nbkt = cfg.tab_nbkt[tab];
        let m = MmapWords::new(map, name)?;
        let w = m.words();
        let mut h = TabHealth {
            slots: (w.len() / 4) as u64,
            counted: self.table_counts()?[tab] as u64,
            ..Default::default()
        };
        let mut expected = vec![0u64; w.len() / 8];
        let mut alt_expected = vec![0u64; w.len() / 8];
        for (i, e) in w.chunks_exact(4).enumerate() {
            let w0 = e[0].load(Ordering::Acquire);
            if (w0 & SLOT_STATE_MASK) >> SLOT_CTL_SHIFT != SLOT_LIVE || nbkt == 0 {
                continue;
            }
            h.live += 1;
            let k1 = if tab == TAB_SESS { e[1].load(Ordering::Acquire) } else { 0 };
            let hash = tab_hash(w0 & keym, k1, cfg.tab_seed);
            let home = tab_home(hash, nbkt, w0 & SLOT_ALT != 0);
            if w0 & SLOT_ALT != 0 {
                alt_expected[tab_home(hash, nbkt, false) as usize] += 1;
            }
            let at = (i / 2) as u32;
            let d = at.saturating_sub(home);
            // the protocol's byte in the slot's first word
            let byte =
                if tab == TAB_SESS { offset_of!(nx_sess, proto) } else { offset_of!(nx_map_key, proto) };
            let p = proto_idx((w0 >> (8 * byte)) as u8) as usize;
            h.live_by_proto[p] += 1;
            if w0 & SLOT_ALT != 0 || d > 0 {
                h.away += 1;
                h.away_by_proto[p] += 1;
            }
            h.max_displacement = h.max_displacement.max(d);
            for b in home..home + d {
                expected[b as usize] += 1;
            }
        }
        for (b, (want, alt_want)) in expected.iter().zip(&alt_expected).enumerate() {
            let (got, alt) = bucket_counts(w, b);
            h.overflow_sum += got;
            if got != *want {
                h.overflow_wrong += 1;
            }
            h.alt_sum += alt;
            if alt != *alt_want {
                h.alt_wrong += 1;
            }
        }
        Ok(h)
    }

    /// The slot holding key (k0, k1) in table `tab`, searched as the data plane does.
    fn find<V: Pod>(&self, tab: usize, k0: u64, k1: u64) -> Result<Option<V>> {
        let (map, name, keym) = self.tab(tab);
        let cfg = self.config()?;
        let nbkt = cfg.tab_nbkt[tab];
        if nbkt == 0 {
            return Ok(None);
        }
        let m = MmapWords::new(map, name)?;
        let w = m.words();
        let want = k0 | SLOT_LIVE << SLOT_CTL_SHIFT;
        let h = tab_hash(k0, k1, cfg.tab_seed);
        for alt in [false, true] {
            let mut b = tab_home(h, nbkt, alt);
            for _ in 0..TAB_PROBE {
                for j in 0..2usize {
                    let e = &w[(b as usize * 2 + j) * 4..][..4];
                    let w0 = e[0].load(Ordering::Acquire);
                    if w0 & (keym | SLOT_STATE_MASK) != want
                        || (tab == TAB_SESS && e[1].load(Ordering::Acquire) != k1)
                    {
                        continue;
                    }
                    return Ok(Some(slot_value::<V>(std::array::from_fn(|i| e[i].load(Ordering::Acquire)))));
                }
                if bucket_counts(w, b as usize).0 == 0 {
                    break;
                }
                b += 1;
            }
        }
        Ok(None)
    }

    /// Every live subscriber (inside address in network order, entry), read through mmap;
    /// an entry changing while read (key word different after) is skipped.
    pub fn subscribers(&self) -> Result<Vec<(u32, nx_sub)>> {
        const WORDS: usize = std::mem::size_of::<nx_sub>() / 8;
        let m = MmapWords::new(&self.subs, "nx_subs")?;
        let mut out = Vec::new();
        for e in m.words().chunks_exact(WORDS) {
            let k = e[0].load(Ordering::Acquire);
            if sub_state(k) != SUB_LIVE {
                continue;
            }
            let mut b = [0u8; WORDS * 8];
            for (i, w) in e.iter().enumerate() {
                b[i * 8..i * 8 + 8].copy_from_slice(&w.load(Ordering::Acquire).to_ne_bytes());
            }
            if e[0].load(Ordering::Acquire) != k {
                continue;
            }
            out.push((k as u32, bytemuck::pod_read_unaligned::<nx_sub>(&b)));
        }
        Ok(out)
    }

    /// Sessions subscriber `ip` (network order) holds by its counts (bpf/nx_limits.h): its
    /// entry's plus its home block word's while it owns that block; deterministic mode:
    /// its nx_det_nsess slot. None when it has neither an entry nor a slot.
    pub fn sub_sessions(&self, ip: u32) -> Result<Option<u32>> {
        let cfg = self.config()?;
        if cfg.det_count != 0 {
            let i = u32::from_be(ip).wrapping_sub(cfg.det_base);
            if i >= cfg.det_count {
                return Ok(None);
            }
            let v =
                self.det_nsess.lookup(&i.to_ne_bytes(), MapFlags::ANY).map_err(map_err("nx_det_nsess"))?;
            return Ok(v.map(|v| u32::from_ne_bytes(v[..4].try_into().expect("u32 value"))));
        }
        let entry = self.subscribers()?.into_iter().find(|(k, _)| *k == ip).map(|(_, e)| e.nsess);
        let home = match home_block(&cfg, ip) {
            Some(gid) if cfg.home_probe != 0 => {
                let w = self.block_word(gid)?;
                if w as u32 == ip {
                    block_nsess(w)
                } else {
                    0
                }
            }
            _ => 0,
        };
        Ok(entry.map(|n| n + home))
    }

    /// Load and shape of the subscriber table, from one pass over its entries.
    pub fn sub_health(&self) -> Result<SubHealth> {
        const WORDS: usize = std::mem::size_of::<nx_sub>() / 8;
        let cfg = self.config()?;
        let m = MmapWords::new(&self.subs, "nx_subs")?;
        let mut h = SubHealth { counted: self.subscriber_count()? as u64, ..Default::default() };
        for (i, e) in m.words().chunks_exact(WORDS).enumerate() {
            h.slots += 1;
            let k = e[0].load(Ordering::Acquire);
            match sub_state(k) {
                SUB_LIVE => {
                    h.live += 1;
                    let home = sub_home(tab_hash(k as u32 as u64, SUB_HASH_K1, cfg.tab_seed), cfg.sub_nslots);
                    let d = (i as u32).wrapping_sub(home);
                    if d != 0 {
                        h.away += 1;
                    }
                    h.max_displacement = h.max_displacement.max(d);
                }
                SUB_TOMB => h.tombstones += 1,
                _ => {}
            }
        }
        Ok(h)
    }

    /// Deterministic mode: how full its ranges are and how far walks go, from one pass
    /// over every range's port words (bpf/nx_det.h). None in dynamic mode.
    pub fn det_health(&self) -> Result<Option<DetHealth>> {
        let cfg = self.config()?;
        if cfg.det_count == 0 {
            return Ok(None);
        }
        let ports = MmapWords::new(&self.ports, "nx_ports")?;
        let words = ports.words();
        let (n, per) = (u32::from(cfg.det_ports), cfg.det_per_addr.max(1));
        let probe = u32::from(cfg.det_probe).min(n / 2);
        let mut h = DetHealth { subscribers: cfg.det_count, ports_each: cfg.det_ports, ..Default::default() };
        for i in 0..cfg.det_count {
            let (a, first) = (i / per, u32::from(cfg.port_lo) + (i % per) * n);
            for pidx in 0..NPROTO {
                let base = port_index_pidx(a, pidx, first);
                let Some(range) = words.get(base..base + n as usize) else { continue };
                let mut free = 0;
                for (k, w) in range.iter().enumerate() {
                    let v = w.load(Ordering::Relaxed);
                    match v >> PORT_STATE_SHIFT {
                        PORT_FREE => free += 1,
                        PORT_HELD => h.held += 1,
                        PORT_USED => {
                            h.mappings += 1;
                            let c = det_start(&cfg, port_word_ip(v), pidx, v as u16, first);
                            if let Some(pos) = det_walk_pos(c, k as u32, probe, n) {
                                h.fallen_back += u64::from(pos >= probe);
                                h.longest_walk = h.longest_walk.max(pos + 1);
                            }
                        }
                        _ => {}
                    }
                }
                h.full_ranges += u64::from(free == 0);
            }
        }
        Ok(Some(h))
    }

    /// Dynamic mode: the home blocks their subscribers own, and the walks in them
    /// (bpf/nx_home.h). None in deterministic mode, or with nat.home_probe 0.
    pub fn home_health(&self) -> Result<Option<HomeHealth>> {
        let cfg = self.config()?;
        if cfg.det_count != 0 || cfg.home_probe == 0 {
            return Ok(None);
        }
        let ports = MmapWords::new(&self.ports, "nx_ports")?;
        let blocks = MmapWords::new(&self.blocks, "nx_blocks")?;
        let (words, bs, bpa) = (ports.words(), u32::from(cfg.block_size), u32::from(cfg.blocks_per_addr));
        let probe = cfg.home_probe.min(bs / 2);
        let mut h = HomeHealth::default();
        for (gid, b) in blocks.words().iter().enumerate() {
            let bw = b.load(Ordering::Relaxed);
            let owner = bw as u32;
            if owner == 0 || walk_home(&cfg, owner) != Some(gid as u32) {
                continue;
            }
            h.blocks += 1;
            h.mixed += u64::from(bw & BLOCK_MIXED != 0);
            let (addr, first) = (gid as u32 / bpa, u32::from(cfg.port_lo) + gid as u32 % bpa * bs);
            for pidx in 0..NPROTO {
                let base = port_index_pidx(addr, pidx, first);
                let Some(range) = words.get(base..base + bs as usize) else { continue };
                for (k, w) in range.iter().enumerate() {
                    let v = w.load(Ordering::Relaxed);
                    match v >> PORT_STATE_SHIFT {
                        PORT_HELD => h.held += 1,
                        PORT_USED if port_word_ip(v) == owner => {
                            h.mappings += 1;
                            let c = home_start(&cfg, owner, pidx, v as u16, first);
                            if let Some(pos) = det_walk_pos(c, k as u32, probe, bs) {
                                h.fallen_back += u64::from(pos >= probe);
                                h.longest_walk = h.longest_walk.max(pos + 1);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(Some(h))
    }

    /// Subscribers as the data plane counts them (what enforces limits.max_subscribers).
    pub fn subscriber_count(&self) -> Result<u32> {
        let v = self
            .tab_cnt
            .lookup(&(TAB_SUBS as u32).to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_tab_cnt"))?
            .unwrap_or_default();
        Ok(value::<u32>(&v).unwrap_or(0))
    }

    pub fn mapping(&self, k: &nx_map_key) -> Result<Option<nx_map>> {
        let cfg = self.config()?;
        let want = (k.in_ip, k.in_port, k.proto);
        let hit = |v: Vec<(nx_map_key, nx_map)>| {
            v.into_iter().find(|(mk, _)| (mk.in_ip, mk.in_port, mk.proto) == want).map(|(_, m)| m)
        };
        if cfg.det_count != 0 {
            return Ok(hit(self.det_mappings()?));
        }
        if let Some(m) = hit(self.home_mappings(&cfg, Some(k.in_ip))?) {
            return Ok(Some(m));
        }
        self.find(TAB_MAPS, map_k0(k), 0)
    }

    pub fn session(&self, k: &nx_sess_key) -> Result<Option<nx_sess>> {
        self.find(TAB_SESS, sess_k0(k), sess_k1(k))
    }

    /// Counters summed over CPUs, indexed by `enum nx_stat`.
    pub fn stats(&self) -> Result<Vec<u64>> {
        let n = nx_stat::NX_STAT_MAX.0;
        (0..n)
            .map(|i| {
                let per_cpu = self
                    .stats
                    .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                    .map_err(map_err("nx_stats"))?
                    .unwrap_or_default();
                Ok(per_cpu.iter().map(|v| value::<u64>(v).expect("a u64 counter")).sum())
            })
            .collect()
    }

    /// Adds n to counter `idx` (`enum nx_stat`), on CPU 0's slot. For the counters only the
    /// daemon writes (the held fragments' fates): the data plane never touches them, so
    /// this read-modify-write of every CPU's slot loses nothing.
    pub fn stat_add(&self, idx: usize, n: u64) -> Result<()> {
        let key = (idx as u32).to_ne_bytes();
        let mut per_cpu =
            self.stats.lookup_percpu(&key, MapFlags::ANY).map_err(map_err("nx_stats"))?.unwrap_or_default();
        let Some(first) = per_cpu.first_mut() else { return Ok(()) };
        let v = value::<u64>(first).expect("a u64 counter").wrapping_add(n);
        first[..8].copy_from_slice(&v.to_ne_bytes());
        self.stats.update_percpu(&key, &per_cpu, MapFlags::ANY).map_err(map_err("nx_stats"))
    }

    /// One outside port word (see nx_types.h), read through the syscall interface.
    pub fn port_word(&self, addr_idx: u32, proto: u8, port: u16) -> Result<u64> {
        let idx = port_index(addr_idx, proto, port);
        let v = self
            .ports
            .lookup(&idx.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_ports"))?
            .unwrap_or_default();
        Ok(value::<u64>(&v).unwrap_or(0))
    }

    pub fn block_word(&self, gid: u32) -> Result<u64> {
        let v = self
            .blocks
            .lookup(&gid.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_blocks"))?
            .unwrap_or_default();
        Ok(value::<u64>(&v).unwrap_or(0))
    }
}

/// A 32-byte slot's four words as the C struct of its table.
fn slot_value<V: Pod>(words: [u64; 4]) -> V {
    bytemuck::pod_read_unaligned(&bytemuck::bytes_of(&words)[..std::mem::size_of::<V>()])
}

/// One pass over deterministic mode's ranges (`Tables::det_health`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DetHealth {
    /// subscribers in nat.deterministic_subscribers, and ports in each one's range
    pub subscribers: u32,
    pub ports_each: u16,
    /// USED words: the mappings
    pub mappings: u64,
    /// ports on hold-down
    pub held: u64,
    /// mappings in their walk's second part (on the other parity than its first part's)
    pub fallen_back: u64,
    /// the longest walk to a live mapping, in words read
    pub longest_walk: u32,
    /// (subscriber, protocol) ranges without a FREE port
    pub full_ranges: u64,
}

/// One pass over the home blocks their subscribers own (`Tables::home_health`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HomeHealth {
    /// blocks owned by the subscriber whose home block they are
    pub blocks: u64,
    /// of those, with the MIXED bit: their subscriber may hold table mappings too
    pub mixed: u64,
    /// USED words naming the owner: the home-walk mappings
    pub mappings: u64,
    /// ports on hold-down in those blocks
    pub held: u64,
    /// mappings in their walk's second part (the other parity)
    pub fallen_back: u64,
    /// the longest walk to a live mapping, in words read
    pub longest_walk: u32,
}

/// One pass over the subscriber table (`Tables::sub_health`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SubHealth {
    pub slots: u64,
    /// LIVE entries found
    pub live: u64,
    /// the data plane's own count (nx_tab_cnt), which enforces limits.max_subscribers
    pub counted: u64,
    /// deleted entries that inserts may reuse (never turned back to EMPTY)
    pub tombstones: u64,
    /// live entries not in their home slot: found with a second line or more
    pub away: u64,
    /// slots between an entry's home and where it lives, at most
    pub max_displacement: u32,
}

/// One pass over an open-addressed table (`Tables::tab_health`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TabHealth {
    pub slots: u64,
    /// LIVE slots found
    pub live: u64,
    /// the data plane's own count (nx_tab_cnt), which enforces the configured size
    pub counted: u64,
    /// buckets between an entry's home and where it lives, at most
    pub max_displacement: u32,
    /// live entries not in their first home bucket: a lookup of one of them reads a
    /// second cache line (the per-packet check reads only the first)
    pub away: u64,
    /// live entries by protocol (TCP, UDP, ICMP)
    pub live_by_proto: [u64; 3],
    /// `away` by protocol (TCP, UDP, ICMP)
    pub away_by_proto: [u64; 3],
    /// sum of the buckets' overflow counts
    pub overflow_sum: u64,
    /// buckets whose overflow count differs from what the live entries imply (0 unless
    /// read while entries are being inserted or deleted)
    pub overflow_wrong: u64,
    /// sum of the buckets' alt counts: entries living in their second chain
    pub alt_sum: u64,
    /// buckets whose alt count differs from what the live entries imply (0 unless read
    /// while entries are being inserted or deleted)
    pub alt_wrong: u64,
}

/// A USED port word that is a mapping itself, shown as the mapping table shows one: `nsess`
/// its session count, flag 2 (NX_MF_DET). None for any other word.
fn word_mapping(pool: &[Ipv4Addr], idx: usize, v: u64) -> Option<nx_map> {
    if v >> PORT_STATE_SHIFT != PORT_USED {
        return None;
    }
    let (addr, pidx, port) = port_index_parts(idx);
    let out_ip = pool.get(addr as usize)?;
    let key = nx_map_key {
        in_ip: port_word_ip(v),
        in_port: (v as u16).to_be(),
        proto: PROTO_OF_IDX[pidx as usize],
        pad: 0,
    };
    Some(nx_map {
        key,
        out_ip: u32::from_ne_bytes(out_ip.octets()),
        out_port: port.to_be(),
        flags: MF_DET,
        nsess: ((v >> PORT_NSESS_SHIFT) & PORT_NSESS_MAX) as u32,
        ..Default::default()
    })
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

/// A BPF_F_MMAPABLE array map seen as shared u64 words: the daemon uses the same atomic
/// instructions on them as the BPF programs do.
pub struct MmapWords {
    ptr: *mut AtomicU64,
    len: usize,
    len32: usize,
    bytes: usize,
}

// SAFETY: the mapping is shared memory accessed only through atomics.
unsafe impl Send for MmapWords {}
// SAFETY: as for Send: every access to the shared words is atomic, and the mapping is
// unmapped only by Drop, when no reference is left.
unsafe impl Sync for MmapWords {}

impl MmapWords {
    pub fn new(map: &MapHandle, name: &'static str) -> Result<Self> {
        use std::os::fd::AsRawFd;
        let info = map.info().map_err(map_err(name))?;
        let (entries, vsize) = (info.info.max_entries as usize, info.info.value_size as usize);
        if vsize == 0 || vsize % 4 != 0 {
            return Err(TableError::Layout {
                map: name,
                what: format!("value size {vsize}, want a multiple of 4"),
            });
        }
        let page = 4096usize;
        let bytes = (entries * vsize).div_ceil(page) * page;
        // SAFETY: mapping a BPF array map fd created with BPF_F_MMAPABLE, shared, for its
        // whole (page-rounded) size; unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(TableError::Layout {
                map: name,
                what: format!("mmap failed: {}", std::io::Error::last_os_error()),
            });
        }
        Ok(MmapWords { ptr: ptr.cast(), len: entries * vsize / 8, len32: entries * vsize / 4, bytes })
    }

    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: ptr maps len u64 words for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The same memory as u32 words (a map of u32 values, such as nx_det_nsess).
    pub fn words32(&self) -> &[std::sync::atomic::AtomicU32] {
        // SAFETY: ptr maps len32 u32 words (page-aligned) for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr.cast(), self.len32) }
    }
}

impl Drop for MmapWords {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}

use std::os::fd::AsFd;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_names_cover_the_enum_once() {
        let mut seen = vec![false; nx_stat::NX_STAT_MAX.0 as usize];
        for (s, name) in STATS {
            let i = s.0 as usize;
            assert!(!seen[i], "{name}: index {i} listed twice");
            seen[i] = true;
        }
        assert!(seen.iter().all(|s| *s), "a counter of enum nx_stat has no name");
    }

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

    #[test]
    fn ticks_round_trip() {
        // a minute ahead reads as a minute (less the tick's rounding), across the
        // wrap-around of the tick counter too; the past reads negative
        let ticks = ((60u64 * 1_000_000_000) >> TICK_SHIFT) as u32;
        assert_eq!(ticks_to_secs(5u32.wrapping_add(ticks), 5), 59);
        assert_eq!(ticks_to_secs(u32::MAX.wrapping_add(ticks), u32::MAX), 59);
        assert_eq!(ticks_to_secs(5, 5u32.wrapping_add(ticks + 1)), -60);
    }
}
