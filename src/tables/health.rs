// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Load and shape of each table, from one pass over it: what `natrix stats` shows, and what
//! the tests check the structures with.

use std::mem::offset_of;
use std::sync::atomic::Ordering;

use super::ports::{port_state, word_port};
use super::{
    bucket_counts, det_start, det_walk_pos, home_start, port_index_pidx, port_word_ip, proto_idx, sub_home,
    tab_hash, tab_home, walk_home, MmapWords, Result, Tables,
};
use crate::abi::{
    sub_state, BLOCK_MIXED, NPROTO, PORT_FREE, PORT_HELD, PORT_USED, SLOT_ALT, SLOT_CTL_SHIFT, SLOT_LIVE,
    SLOT_STATE_MASK, SUB_HASH_K1, SUB_LIVE, SUB_TOMB, TAB_SESS,
};
use crate::skel::types::{nx_map_key, nx_sess, nx_sub};

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

impl Tables {
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
                    match port_state(v) {
                        PORT_FREE => free += 1,
                        PORT_HELD => h.held += 1,
                        PORT_USED => {
                            h.mappings += 1;
                            let c = det_start(&cfg, port_word_ip(v), pidx, word_port(v), first);
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
                    match port_state(v) {
                        PORT_HELD => h.held += 1,
                        PORT_USED if port_word_ip(v) == owner => {
                            h.mappings += 1;
                            let c = home_start(&cfg, owner, pidx, word_port(v), first);
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
}
