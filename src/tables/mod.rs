// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Typed access to the data plane's tables, from a loaded skeleton or from the pins.
//!
//! The daemon, the CLI and the tests all read state through here: one place knows the
//! layouts, and those layouts are the C structs of `bpf/nx_types.h` as the skeleton
//! generated them. By concern:
//! - `mod.rs`: the map handles ([`Tables`]), opening them, the configuration entry, the
//!   counters, single words by syscall, the clock;
//! - `layout.rs`: where things are, the data plane's arithmetic mirrored (key hashes, home
//!   buckets and slots, walk starts and positions, blocks);
//! - `read.rs`: the entries (sessions, mappings, subscribers), read through mmap;
//! - `health.rs`: load and shape of each table, from one pass over it (`natrix stats`);
//! - `mmap.rs`: a BPF_F_MMAPABLE array map as shared atomic words;
//! - `names.rs`: the names people read (counters, protocols, TCP states);
//! - `ports.rs` ([`ports`]): the port word, its index and encodings, and every change of
//!   state the daemon makes to one (who frees a port, who puts one on hold-down).
//!
//! The modules but `ports` are private and what they make public is re-exported here:
//! callers name `tables::X`.

use std::net::Ipv4Addr;
use std::path::Path;

use bytemuck::Pod;
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use thiserror::Error;

use crate::abi::{MAPS_W0_KEY, SESS_W0_KEY, TAB_SESS, TAB_SUBS, TICK_SHIFT};
use crate::skel::types::{nx_config, nx_stat};

mod health;
mod layout;
mod mmap;
mod names;
pub mod ports;
mod read;

use layout::bucket_counts;

pub use health::{DetHealth, HomeHealth, SubHealth, TabHealth};
pub use layout::{
    block_nsess, block_of, block_used, det_first, det_start, det_walk_pos, home_block, home_start, map_k0,
    proto_idx, sess_k0, sess_k1, set_divisors, sub_home, sub_home_slots, sub_slots, tab_buckets, tab_hash,
    tab_home, tab_slots, udiv, udiv_magic, walk_home,
};
pub use mmap::MmapWords;
pub use names::{is_drop, proto_name, stat_index, tcp_state_name, STATS};
// the port word's index and decoding, at the paths callers have used
pub use ports::{det_word_needed, is_home_word, port_index, port_index_parts, port_index_pidx, port_word_ip};

/// Every pinned map, by the name it has in the BPF object and under the pin directory.
pub const MAP_NAMES: [&str; 21] = [
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
    "nx_log_rb",
    "nx_block_time",
    "nx_cap_ctl",
    "nx_cap_buf",
    "nx_cap_rb",
];

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

/// The counters of `nx_stats` (a handle on it, e.g. `Tables::stats`' own) summed over
/// CPUs, indexed by `enum nx_stat`: one lookup per counter, no walk of any table.
pub fn read_stats(stats: &MapHandle) -> Result<Vec<u64>> {
    let n = nx_stat::NX_STAT_MAX.0;
    (0..n)
        .map(|i| {
            let per_cpu = stats
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                .map_err(map_err("nx_stats"))?
                .unwrap_or_default();
            Ok(per_cpu.iter().map(|v| value::<u64>(v).expect("a u64 counter")).sum())
        })
        .collect()
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
    /// Global block id -> when it was last allocated (CLOCK_TAI ns, 0 not known).
    pub block_time: MapHandle,
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
            block_time: open("nx_block_time")?,
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
            block_time: h(&m.nx_block_time, "nx_block_time")?,
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

    /// When global block `gid` was last allocated: CLOCK_TAI nanoseconds (bpf_ktime_get_tai_ns;
    /// `natlog::source::tai_to_utc_ns` turns it into UTC), 0 when not known.
    pub fn block_time(&self, gid: u32) -> Result<u64> {
        let v = self
            .block_time
            .lookup(&gid.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_block_time"))?
            .unwrap_or_default();
        Ok(v.get(..8).and_then(|s| s.try_into().ok()).map_or(0, u64::from_ne_bytes))
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

    /// Subscribers as the data plane counts them (what enforces limits.max_subscribers).
    pub fn subscriber_count(&self) -> Result<u32> {
        let v = self
            .tab_cnt
            .lookup(&(TAB_SUBS as u32).to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_tab_cnt"))?
            .unwrap_or_default();
        Ok(value::<u32>(&v).unwrap_or(0))
    }

    /// Counters summed over CPUs, indexed by `enum nx_stat`.
    pub fn stats(&self) -> Result<Vec<u64>> {
        read_stats(&self.stats)
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

    pub fn block_word(&self, gid: u32) -> Result<u64> {
        let v = self
            .blocks
            .lookup(&gid.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_blocks"))?
            .unwrap_or_default();
        Ok(value::<u64>(&v).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
