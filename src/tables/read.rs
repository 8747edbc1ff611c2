// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The entries: sessions, mappings (the table's, and the port words that are mappings
//! themselves), subscribers; read through mmap, each entry checked unchanged while read.

use std::sync::atomic::Ordering;

use bytemuck::Pod;
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::ports::word_mapping;
use super::{
    block_nsess, bucket_counts, home_block, map_err, map_k0, port_index_pidx, port_word_ip, sess_k0, sess_k1,
    tab_hash, tab_home, walk_home, MmapWords, Result, Tables,
};
use crate::abi::{
    sub_state, NPROTO, SLOT_CTL_SHIFT, SLOT_GEN_MASK, SLOT_LIVE, SLOT_STATE_MASK, SUB_LIVE, TAB_MAPS,
    TAB_PROBE, TAB_SESS,
};
use crate::skel::types::{nx_config, nx_map, nx_map_key, nx_sess, nx_sess_key, nx_sub};

impl Tables {
    /// Every live slot of an open-addressed table, read through mmap (no syscall per
    /// entry): each slot is read twice-checked, so a slot reused meanwhile is skipped.
    fn slots<V: Pod>(map: &MapHandle, name: &'static str) -> Result<Vec<V>> {
        let m = MmapWords::new(map, name)?;
        let w = m.words();
        let mut out = Vec::new();
        for e in w.chunks_exact(4) {
            if let Slot::Live(words) = read_slot(e) {
                out.push(slot_value::<V>(words));
            }
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
            let words = match read_slot(e) {
                Slot::NotLive => continue,
                Slot::Changed => {
                    live += 1;
                    continue;
                }
                Slot::Live(words) => words,
            };
            live += 1;
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
}

/// A 32-byte slot's four words as the C struct of its table.
/// One slot of an open-addressed table as read through mmap.
enum Slot {
    NotLive,
    /// LIVE when first read, reused or deleted before its four words were read
    Changed,
    Live([u64; 4]),
}

/// Reads slot `e` (four words) twice-checked: its words, if it was LIVE and the same entry
/// throughout.
fn read_slot(e: &[std::sync::atomic::AtomicU64]) -> Slot {
    let w0 = e[0].load(Ordering::Acquire);
    if (w0 & SLOT_STATE_MASK) >> SLOT_CTL_SHIFT != SLOT_LIVE {
        return Slot::NotLive;
    }
    let words =
        [w0, e[1].load(Ordering::Acquire), e[2].load(Ordering::Acquire), e[3].load(Ordering::Acquire)];
    if (e[0].load(Ordering::Acquire) ^ w0) & (SLOT_STATE_MASK | SLOT_GEN_MASK) != 0 {
        return Slot::Changed;
    }
    Slot::Live(words)
}

fn slot_value<V: Pod>(words: [u64; 4]) -> V {
    bytemuck::pod_read_unaligned(&bytemuck::bytes_of(&words)[..std::mem::size_of::<V>()])
}
