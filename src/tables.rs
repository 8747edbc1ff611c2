// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Typed access to the data plane's tables, from a loaded skeleton or from the pins.
//!
//! The daemon, the CLI and the tests all read state through here: one place knows the
//! layouts, and those layouts are the C structs of `bpf/nx_types.h` as the skeleton
//! generated them.

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::AtomicU64;

use libbpf_rs::{MapCore, MapFlags, MapHandle};
use thiserror::Error;

use crate::skel::types::{nx_config, nx_map, nx_map_key, nx_sess, nx_sess_key, nx_stat, nx_sub};

/// Every pinned map, by the name it has in the BPF object and under the pin directory.
pub const MAP_NAMES: [&str; 13] = [
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
    "nx_stats",
    "nx_frags",
    "nx_frag_rb",
];

/// Port word states (bits 63..62 of an `nx_ports` entry, see nx_types.h).
pub const PORT_STATE_SHIFT: u32 = 62;
pub const PORT_FREE: u64 = 0;
pub const PORT_USED: u64 = 1;
pub const PORT_HELD: u64 = 2;
pub const PORT_STATIC: u64 = 3;
/// Length of one tick of the data plane's clock, in nanoseconds (2^NX_TICK_SHIFT).
pub const TICK_SHIFT: u32 = 24;
pub const NPROTO: u32 = 3;

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

/// The bytes of a plain C struct, to use as a map key or value.
pub fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is a #[repr(C)] plain-old-data type generated from BTF (Copy, no
    // references); reading its bytes, padding included, is defined because every value we
    // pass was created zeroed (Default) before its fields were set.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// A plain C struct read back from map bytes.
pub fn read_pod<T: Copy + Default>(b: &[u8]) -> T {
    assert!(b.len() >= std::mem::size_of::<T>(), "short map value");
    // SAFETY: length checked; T is plain old data valid for any bit pattern.
    unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) }
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
        6 => "tcp",
        17 => "udp",
        1 => "icmp",
        _ => "other",
    }
}

pub fn proto_idx(p: u8) -> u32 {
    match p {
        6 => 0,
        17 => 1,
        _ => 2,
    }
}

pub fn tcp_state_name(s: u8) -> &'static str {
    match s {
        1 => "syn_out",
        2 => "syn_in",
        3 => "established",
        4 => "fin_out",
        5 => "fin_in",
        6 => "fin_both",
        7 => "rst",
        _ => "open",
    }
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
    pub stats: MapHandle,
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
        Ok(Tables {
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
            stats: open("nx_stats")?,
        })
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
            stats: h(&m.nx_stats, "nx_stats")?,
        })
    }

    pub fn config(&self) -> Result<nx_config> {
        let v = self
            .cfg
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_cfg"))?
            .ok_or(TableError::Layout { map: "nx_cfg", what: "entry 0 missing".into() })?;
        Ok(read_pod(&v))
    }

    pub fn write_config(&self, c: &nx_config) -> Result<()> {
        self.cfg.update(&0u32.to_ne_bytes(), bytes_of(c), MapFlags::ANY).map_err(map_err("nx_cfg"))
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

    fn dump<K: Copy + Default, V: Copy + Default>(
        map: &MapHandle,
        name: &'static str,
    ) -> Result<Vec<(K, V)>> {
        use std::os::fd::AsRawFd;
        // Batched reads, one syscall per 4096 entries rather than two per entry, until the
        // kernel says ENOENT. (libbpf-rs 0.27's iterator stops at the first short batch,
        // and a hash map returns short batches at bucket boundaries: it saw ~25k of 10M.)
        const CAP: usize = 4096;
        let (ks, vs) = (std::mem::size_of::<K>(), std::mem::size_of::<V>());
        let mut keys = vec![0u8; ks * CAP];
        let mut vals = vec![0u8; vs * CAP];
        let (mut token_in, mut token_out) = (0u64, 0u64);
        let mut first = true;
        let mut out = Vec::new();
        let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
            elem_flags: 0,
            flags: 0,
        };
        loop {
            let mut count = CAP as u32;
            // SAFETY: buffers hold CAP keys and values of the map's sizes (K and V are the
            // map's key and value types); the batch tokens are 8 bytes, more than a hash
            // map's 4-byte bucket cursor.
            let rc = unsafe {
                libbpf_rs::libbpf_sys::bpf_map_lookup_batch(
                    map.as_fd().as_raw_fd(),
                    if first { std::ptr::null_mut() } else { (&mut token_in as *mut u64).cast() },
                    (&mut token_out as *mut u64).cast(),
                    keys.as_mut_ptr().cast(),
                    vals.as_mut_ptr().cast(),
                    &mut count,
                    &opts,
                )
            };
            let err = if rc < 0 { std::io::Error::last_os_error().raw_os_error().unwrap_or(-rc) } else { 0 };
            for i in 0..(count as usize).min(CAP) {
                out.push((read_pod::<K>(&keys[i * ks..]), read_pod::<V>(&vals[i * vs..])));
            }
            match err {
                0 => {}
                libc::ENOENT => break,
                e => {
                    return Err(TableError::Map {
                        map: name,
                        source: libbpf_rs::Error::from(std::io::Error::from_raw_os_error(e)),
                    })
                }
            }
            token_in = token_out;
            first = false;
        }
        Ok(out)
    }

    pub fn sessions(&self) -> Result<Vec<(nx_sess_key, nx_sess)>> {
        Self::dump(&self.sess, "nx_sess")
    }

    pub fn mappings(&self) -> Result<Vec<(nx_map_key, nx_map)>> {
        Self::dump(&self.maps, "nx_maps")
    }

    pub fn subscribers(&self) -> Result<Vec<(u32, nx_sub)>> {
        Ok(Self::dump::<[u8; 4], nx_sub>(&self.subs, "nx_subs")?
            .into_iter()
            .map(|(k, v)| (u32::from_ne_bytes(k), v))
            .collect())
    }

    pub fn mapping(&self, k: &nx_map_key) -> Result<Option<nx_map>> {
        Ok(self.maps.lookup(bytes_of(k), MapFlags::ANY).map_err(map_err("nx_maps"))?.map(|v| read_pod(&v)))
    }

    pub fn session(&self, k: &nx_sess_key) -> Result<Option<nx_sess>> {
        Ok(self.sess.lookup(bytes_of(k), MapFlags::ANY).map_err(map_err("nx_sess"))?.map(|v| read_pod(&v)))
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
                Ok(per_cpu.iter().map(|v| read_pod::<u64>(v)).sum())
            })
            .collect()
    }

    /// One outside port word (see nx_types.h), read through the syscall interface.
    pub fn port_word(&self, addr_idx: u32, proto: u8, port: u16) -> Result<u64> {
        let idx = port_index(addr_idx, proto, port);
        let v = self
            .ports
            .lookup(&idx.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_ports"))?
            .unwrap_or_default();
        Ok(if v.len() >= 8 { read_pod::<u64>(&v) } else { 0 })
    }

    pub fn block_word(&self, gid: u32) -> Result<u64> {
        let v = self
            .blocks
            .lookup(&gid.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("nx_blocks"))?
            .unwrap_or_default();
        Ok(if v.len() >= 8 { read_pod::<u64>(&v) } else { 0 })
    }
}

pub fn port_index(addr_idx: u32, proto: u8, port: u16) -> u32 {
    ((addr_idx * NPROTO + proto_idx(proto)) << 16) | port as u32
}

/// A BPF_F_MMAPABLE array map seen as shared u64 words: the daemon uses the same atomic
/// instructions on them as the BPF programs do.
pub struct MmapWords {
    ptr: *mut AtomicU64,
    len: usize,
    bytes: usize,
}

// SAFETY: the mapping is shared memory accessed only through atomics.
unsafe impl Send for MmapWords {}
unsafe impl Sync for MmapWords {}

impl MmapWords {
    pub fn new(map: &MapHandle, name: &'static str) -> Result<Self> {
        use std::os::fd::AsRawFd;
        let info = map.info().map_err(map_err(name))?;
        let (entries, vsize) = (info.info.max_entries as usize, info.info.value_size as usize);
        if vsize != 8 {
            return Err(TableError::Layout { map: name, what: format!("value size {vsize}, want 8") });
        }
        let page = 4096usize;
        let bytes = (entries * 8).div_ceil(page) * page;
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
        Ok(MmapWords { ptr: ptr.cast(), len: entries, bytes })
    }

    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: ptr maps len u64 words for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
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
    fn ticks_round_trip() {
        // a minute ahead reads as a minute (less the tick's rounding), across the
        // wrap-around of the tick counter too; the past reads negative
        let ticks = ((60u64 * 1_000_000_000) >> TICK_SHIFT) as u32;
        assert_eq!(ticks_to_secs(5u32.wrapping_add(ticks), 5), 59);
        assert_eq!(ticks_to_secs(u32::MAX.wrapping_add(ticks), u32::MAX), 59);
        assert_eq!(ticks_to_secs(5, 5u32.wrapping_add(ticks + 1)), -60);
    }
}
