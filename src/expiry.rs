// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Expiry and release: the CPU side of the state's life cycle.
//!
//! The fast path only creates and refreshes. Each sweep the daemon
//! 1. reads the session table and hands expired sessions to the BPF reaper (the control program `nx_ctl`),
//!    which checks them again against the kernel clock, deletes them, and releases a mapping
//!    when its last session goes (its outside port goes on hold-down);
//! 2. hands mappings that never got a session and whose own timer ran out to the reaper;
//! 3. frees held ports whose hold-down is over, and returns empty blocks to the pool, with
//!    compare-and-swap on the mmapped port and block arrays, as the fast path claims them
//!    (the port word's transitions and when they may happen: `tables::ports`);
//! 4. forgets subscribers that hold no block any more;
//! 5. points `addr_hint` at the pool address with the most free blocks, which is where the
//!    next new subscriber goes when its home block (bpf/nx_alloc.h) is taken (the "which
//!    block" decision for those stays on the CPU side).
//!
//! Along the way it counts what it walks ([`Occupancy`]: sessions by protocol, mappings,
//! subscribers, blocks per pool address), so that the metrics endpoint (src/metrics.rs)
//! serves the state of the tables without a walk of its own.

use std::mem::offset_of;
use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;

use bytemuck::Pod;

use libbpf_rs::MapCore;
use tracing::debug;

use crate::abi::{
    CTL_STATIC_ADD, CTL_STATIC_DEL, MF_STATIC, NPROTO, PORT_HELD, PORT_USED, REAP_BATCH as BATCH,
    REAP_MAPPINGS, REAP_SESSIONS, REAP_SUBS, TAB_MAPS, TAB_SESS,
};
use crate::skel::types::{nx_config, nx_map_key, nx_reap_args, nx_sess_key, nx_static_map};
use crate::tables::ports::{self, is_home_word, port_index_parts, port_state, word_nsess, Freed};
use crate::tables::{
    block_nsess, block_of, block_used, now_ns, now_tick, port_word_ip, proto_idx, walk_home, MmapWords,
    TableError, Tables,
};

/// What one sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    pub sessions_expired: u32,
    pub mappings_released: u32,
    pub ports_freed: u32,
    pub blocks_released: u32,
    pub subscribers_removed: u32,
    /// The blocks released, each with the subscriber that held it, in the order released:
    /// the NAT log's de-allocation events (src/natlog).
    pub released: Vec<BlockRelease>,
}

/// A port block the sweep returned to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRelease {
    /// Global block id (pool index × blocks per address + block).
    pub gid: u32,
    /// The subscriber that held it (inside address as the data plane stores it).
    pub owner: u32,
    /// When (CLOCK_REALTIME, milliseconds since the Unix epoch): after its last use.
    pub time_ms: u64,
}

/// Now, in milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// One batch for the control program `nx_ctl` (struct nx_reap_args), held as its bytes.
/// The struct's entries are a union of arrays of different sizes, which is no plain old
/// data (the bytes beyond the member written are not known to be initialized), so the
/// batch is written and read at the generated struct's field offsets instead: each entry
/// array is the union member its operation names, and nothing here is unsafe.
pub struct CtlBatch {
    b: Vec<u8>,
}

impl CtlBatch {
    fn new<T: Pod>(op: u32, now_s: u32, entries: &[T]) -> Self {
        assert!(entries.len() <= BATCH, "{} entries, a batch holds {BATCH}", entries.len());
        let mut c = CtlBatch { b: vec![0u8; std::mem::size_of::<nx_reap_args>()] };
        c.put(offset_of!(nx_reap_args, op), op);
        c.put(offset_of!(nx_reap_args, n), entries.len() as u32);
        c.put(offset_of!(nx_reap_args, now_s), now_s);
        let e: &[u8] = bytemuck::cast_slice(entries);
        let at = offset_of!(nx_reap_args, __anon_nx_reap_args_1);
        c.b[at..at + e.len()].copy_from_slice(e);
        c
    }

    /// Expired sessions to delete (NX_REAP_SESSIONS), checked again against the clock.
    pub fn sessions(now_s: u32, keys: &[nx_sess_key]) -> Self {
        Self::new(REAP_SESSIONS, now_s, keys)
    }

    /// Table mappings without sessions whose timer ran out (NX_REAP_MAPPINGS).
    pub fn mappings(now_s: u32, keys: &[nx_map_key]) -> Self {
        Self::new(REAP_MAPPINGS, now_s, keys)
    }

    /// Subscribers (inside addresses as the data plane stores them) holding no block any
    /// more (NX_REAP_SUBS).
    pub fn subscribers(now_s: u32, ips: &[u32]) -> Self {
        Self::new(REAP_SUBS, now_s, ips)
    }

    /// One static forward's mapping to insert (NX_CTL_STATIC_ADD).
    pub fn static_add(m: &nx_static_map) -> Self {
        Self::new(CTL_STATIC_ADD, 0, std::slice::from_ref(m))
    }

    /// One static forward's mapping to delete (NX_CTL_STATIC_DEL).
    pub fn static_del(k: &nx_map_key) -> Self {
        Self::new(CTL_STATIC_DEL, 0, std::slice::from_ref(k))
    }

    /// Entries the control program deleted (or inserted: NX_CTL_STATIC_ADD).
    pub fn deleted(&self) -> u32 {
        self.get(offset_of!(nx_reap_args, deleted))
    }

    /// Mappings deleted with their last session.
    pub fn maps_deleted(&self) -> u32 {
        self.get(offset_of!(nx_reap_args, maps_deleted))
    }

    fn put(&mut self, at: usize, v: u32) {
        self.b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    fn get(&self, at: usize) -> u32 {
        bytemuck::pod_read_unaligned(&self.b[at..at + 4])
    }
}

/// The reaper: the control programs and their batch buffer. Each batch runs the program
/// that serves its operation (`struct nx_reap_args.op`): `nx_ctl_<op>` when the object has
/// one, else the one control program `nx_ctl` that serves them all.
pub struct Reaper<'a> {
    /// Indexed by the operation (enum nx_reap_op).
    progs: [Option<BorrowedFd<'a>>; OPS],
    buf: &'a libbpf_rs::MapHandle,
}

/// One more than the largest operation (enum nx_reap_op).
const OPS: usize = 6;

/// The control program's name for each operation of enum nx_reap_op.
fn ctl_prog_name(op: u32) -> Option<&'static str> {
    Some(match op {
        REAP_SESSIONS => "nx_ctl_sess",
        REAP_MAPPINGS => "nx_ctl_maps",
        REAP_SUBS => "nx_ctl_subs",
        CTL_STATIC_ADD => "nx_ctl_static_add",
        CTL_STATIC_DEL => "nx_ctl_static_del",
        _ => return None,
    })
}

impl<'a> Reaper<'a> {
    /// The reaper of a data plane whose programs `prog` finds by name (Dataplane::prog),
    /// with its batch buffer (the map nx_reap_buf). Usually `Dataplane::reaper()`.
    pub fn new(prog: impl Fn(&str) -> Option<BorrowedFd<'a>>, buf: &'a libbpf_rs::MapHandle) -> Self {
        let all = prog("nx_ctl");
        let mut progs = [None; OPS];
        for (op, slot) in progs.iter_mut().enumerate() {
            if let Some(name) = ctl_prog_name(op as u32) {
                *slot = prog(name).or(all);
            }
        }
        Reaper { progs, buf }
    }

    /// Runs one batch: writes it to nx_reap_buf, runs its operation's control program
    /// (BPF_PROG_RUN), reads the counts back into `batch`.
    pub fn reap(&self, batch: &mut CtlBatch) -> Result<(), libbpf_rs::Error> {
        let op = batch.get(offset_of!(nx_reap_args, op));
        let Some(prog) = self.progs.get(op as usize).copied().flatten() else {
            return Err(libbpf_rs::Error::from(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no control program for operation {op}"),
            )));
        };
        let zero = 0u32.to_ne_bytes();
        self.buf.update(&zero, &batch.b, libbpf_rs::MapFlags::ANY)?;
        let mut ctx = [0u8; 8];
        crate::dataplane::run_syscall_prog(prog, &mut ctx)?;
        if let Some(v) = self.buf.lookup(&zero, libbpf_rs::MapFlags::ANY)? {
            let n = batch.b.len();
            batch.b.copy_from_slice(&v[..n]);
        }
        Ok(())
    }
}

/// What the tables held at the end of a sweep, counted on the sweep's own walks (nothing is
/// walked for it alone): the numbers `natrix stats` computes by walking, for the metrics
/// endpoint. Counts are as `natrix stats` counts them: sessions are every live entry of the
/// session table (address-dependent filtering's records included), mappings the mapping
/// table's entries and the port words that are mappings (home walks; deterministic mode:
/// every USED word).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Occupancy {
    /// nat.mode = "deterministic": no subscriber entries and no blocks
    pub deterministic: bool,
    /// live sessions by protocol index (abi::P_TCP, P_UDP, P_ICMP)
    pub sessions: [u64; NPROTO as usize],
    pub mappings: u64,
    /// live subscriber entries (dynamic mode)
    pub subscribers: u64,
    /// owned port blocks by pool index (dynamic mode)
    pub blocks: Vec<u64>,
    /// blocks each pool address has
    pub blocks_per_addr: u64,
    /// outside ports in use: counted by the blocks (dynamic), USED and HELD words
    /// (deterministic)
    pub ports_in_use: u64,
    /// the data plane's own counts (nx_tab_cnt: what enforces the limits) and the
    /// configured sizes, of the session, mapping and subscriber tables in that order
    pub table_entries: [u64; 3],
    pub table_capacity: [u64; 3],
}

pub struct Sweeper {
    ports: MmapWords,
    blocks: MmapWords,
    empty_last: std::collections::HashSet<(usize, u64)>,
    /// Port words that are mappings (deterministic mode, home-walk mappings in dynamic
    /// mode) seen USED with no session at the last sweep.
    idle_last: std::collections::HashSet<(usize, u64)>,
    /// What the last sweep that completed counted.
    occupancy: Occupancy,
}

fn mono_secs() -> u32 {
    (now_ns() / 1_000_000_000) as u32
}

impl Sweeper {
    pub fn new(t: &Tables) -> Result<Self, TableError> {
        Ok(Sweeper {
            ports: MmapWords::new(&t.ports, "nx_ports")?,
            blocks: MmapWords::new(&t.blocks, "nx_blocks")?,
            empty_last: Default::default(),
            idle_last: Default::default(),
            occupancy: Occupancy::default(),
        })
    }

    /// What the tables held at the end of the last sweep that completed.
    pub fn occupancy(&self) -> &Occupancy {
        &self.occupancy
    }

    pub fn sweep(&mut self, t: &Tables, reaper: &Reaper<'_>) -> Result<SweepReport, TableError> {
        let mut r = SweepReport::default();
        let now = now_tick();
        let now_s = mono_secs();
        let expired = |e: u32| (e.wrapping_sub(now) as i32) <= 0;

        // 1. sessions; candidates in batches of one protocol, so that what the reaper
        // deleted is known by protocol
        let mut occ = Occupancy::default();
        let mut cands: [Vec<nx_sess_key>; NPROTO as usize] = Default::default();
        for (k, s) in t.sessions()? {
            let p = proto_idx(k.proto) as usize;
            occ.sessions[p] += 1;
            if expired(s.expire) {
                cands[p].push(k);
            }
        }
        for (p, cands) in cands.iter().enumerate() {
            for chunk in cands.chunks(BATCH) {
                let mut a = CtlBatch::sessions(now_s, chunk);
                self.run(reaper, &mut a)?;
                r.sessions_expired += a.deleted();
                r.mappings_released += a.maps_deleted();
                occ.sessions[p] = occ.sessions[p].saturating_sub(a.deleted().into());
            }
        }

        let cfg = t.config()?;
        if cfg.det_count != 0 {
            // deterministic: no mapping table, blocks or subscriber entries; the port
            // words are the mappings
            self.det_ports(&cfg, now_s, &mut r, &mut occ);
            self.finish(t, &cfg, occ)?;
            if r != SweepReport::default() {
                debug!(?r, "sweep");
            }
            return Ok(r);
        }

        // 2. mappings without sessions (the table's; home-walk mappings are port words: 3.)
        let maps = t.table_mappings()?;
        occ.mappings = maps.len() as u64;
        let cands: Vec<nx_map_key> = maps
            .into_iter()
            .filter(|(_, m)| m.nsess == 0 && m.flags & MF_STATIC == 0 && expired(m.expire))
            .map(|(k, _)| k)
            .collect();
        for chunk in cands.chunks(BATCH) {
            let mut a = CtlBatch::mappings(now_s, chunk);
            self.run(reaper, &mut a)?;
            r.mappings_released += a.maps_deleted();
            occ.mappings = occ.mappings.saturating_sub(a.maps_deleted().into());
        }

        // 3. hold-down over: free the port, then the block if it became empty. In a block
        // its home subscriber owns, the port words are mappings found by walks (bpf/
        // nx_home.h): a HELD word there is freed only by a margin after its hold-down and
        // when no live walk passes it, and a mapping that never got a session goes on
        // hold-down after two sweeps, as in deterministic mode.
        let bpa = cfg.blocks_per_addr as u32;
        let blocks = self.blocks.words();
        let words = self.ports.words();
        let mut idle_now = std::collections::HashSet::new();
        // the home-walk mappings, counted as `natrix stats` does (Tables::home_health): USED
        // words naming the owner of the block, which is its home block
        let home_owner: Vec<u32> = blocks
            .iter()
            .enumerate()
            .map(|(gid, b)| {
                let owner = b.load(Ordering::Relaxed) as u32;
                if owner != 0 && walk_home(&cfg, owner) == Some(gid as u32) {
                    owner
                } else {
                    0
                }
            })
            .collect();
        let home_map = |idx: usize, v: u64| {
            let (addr_idx, _, port) = port_index_parts(idx);
            let ip = port_word_ip(v);
            ip != 0
                && block_of(&cfg, addr_idx, u32::from(port))
                    .is_some_and(|(gid, _)| home_owner.get(gid as usize) == Some(&ip))
        };
        for (idx, w) in words.iter().enumerate() {
            let v = w.load(Ordering::Relaxed);
            let state = port_state(v);
            if state == PORT_USED && word_nsess(v) == 0 && is_home_word(&cfg, idx, v) {
                let held = idle_word(&self.idle_last, &mut idle_now, idx, w, v, now_s);
                r.mappings_released += u32::from(held);
                occ.mappings += u64::from(!held && home_map(idx, v));
                continue;
            }
            occ.mappings += u64::from(state == PORT_USED && home_map(idx, v));
            if state != PORT_HELD || !ports::may_free(&cfg, words, blocks, idx, v, now_s) {
                continue;
            }
            let (addr_idx, _, port) = port_index_parts(idx);
            let gid = block_of(&cfg, addr_idx, u32::from(port)).map(|(gid, _)| gid);
            match ports::free_held(w, v, gid.and_then(|g| blocks.get(g as usize))) {
                Freed::No => {}
                Freed::Port => r.ports_freed += 1,
                Freed::PortAndBlock(owner) => {
                    r.ports_freed += 1;
                    r.blocks_released += 1;
                    r.released.push(BlockRelease { gid: gid.unwrap_or(0), owner, time_ms: unix_ms() });
                }
            }
        }
        self.idle_last = idle_now;
        // Owned blocks with no port counted: a new subscriber whose first port never got
        // claimed, or a block emptied by a lost race. Released when seen so on two sweeps
        // in a row, so that a CPU between claiming and recording one is never robbed.
        let mut empty_now = std::collections::HashSet::new();
        occ.blocks = vec![0; usize::from(cfg.n_addrs)];
        for (gid, b) in blocks.iter().enumerate() {
            let v = b.load(Ordering::Relaxed);
            if v != 0 && block_used(v) == 0 && block_nsess(v) == 0 {
                if self.empty_last.contains(&(gid, v))
                    && b.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
                {
                    r.blocks_released += 1;
                    r.released.push(BlockRelease { gid: gid as u32, owner: v as u32, time_ms: unix_ms() });
                    continue;
                } else {
                    empty_now.insert((gid, v));
                }
            }
            // owned, counted as `natrix stats` counts them (usage)
            if v as u32 != 0 {
                if let Some(n) = occ.blocks.get_mut(gid / usize::from(cfg.blocks_per_addr).max(1)) {
                    *n += 1;
                }
                occ.ports_in_use += block_used(v);
            }
        }
        self.empty_last = empty_now;

        // 4. subscribers with no block left; the reaper checks again under the entry's
        // lock before it deletes
        let subs = t.subscribers()?;
        occ.subscribers = subs.len() as u64;
        let gone: Vec<u32> = subs
            .into_iter()
            .filter(|(ip, sub)| {
                let owns = sub.blocks.iter().any(|&s| {
                    s != 0
                        && blocks
                            .get((s - 1) as usize)
                            .is_some_and(|b| b.load(Ordering::Relaxed) as u32 == *ip)
                });
                // a subscriber holding port-class ports keeps its entry (and so its address)
                !owns && sub.low_used == 0
            })
            .map(|(ip, _)| ip)
            .collect();
        for chunk in gone.chunks(BATCH) {
            let mut a = CtlBatch::subscribers(now_s, chunk);
            self.run(reaper, &mut a)?;
            r.subscribers_removed += a.deleted();
            occ.subscribers = occ.subscribers.saturating_sub(a.deleted().into());
        }

        // 5. where the next subscriber whose home block is taken goes
        if bpa > 0 && cfg.n_addrs > 0 {
            let best = (0..cfg.n_addrs as u32)
                .max_by_key(|&a| {
                    let free = blocks[(a * bpa) as usize..((a + 1) * bpa) as usize]
                        .iter()
                        .filter(|b| b.load(Ordering::Relaxed) == 0)
                        .count();
                    // most free blocks first, lowest index on ties: new subscribers spread
                    // over the pool (one blocklisted address hurts fewer of them)
                    (free, std::cmp::Reverse(a))
                })
                .unwrap_or(0);
            if best != cfg.addr_hint {
                let mut c = cfg;
                c.addr_hint = best;
                t.write_config(&c)?;
            }
        }
        self.finish(t, &cfg, occ)?;
        if r != SweepReport::default() {
            debug!(?r, "sweep");
        }
        Ok(r)
    }

    /// The sweep completed: adds the tables' own counts and sizes to what it counted, and
    /// keeps that as the last occupancy.
    fn finish(&mut self, t: &Tables, cfg: &nx_config, mut occ: Occupancy) -> Result<(), TableError> {
        let [sess, maps] = t.table_counts()?;
        occ.deterministic = cfg.det_count != 0;
        occ.blocks_per_addr = cfg.blocks_per_addr.into();
        occ.table_entries = [sess.into(), maps.into(), t.subscriber_count()?.into()];
        occ.table_capacity = [cfg.tab_max[TAB_SESS].into(), cfg.tab_max[TAB_MAPS].into(), cfg.sub_max.into()];
        self.occupancy = occ;
        Ok(())
    }

    /// Deterministic mode (bpf/nx_det.h), each sweep:
    /// - a HELD word whose hold-down is over (by ports::FREE_MARGIN_S) becomes FREE, unless a
    ///   live mapping's walk passes it: the walk stops at the first FREE word, so freeing
    ///   such a word would hide that mapping (linear probing's deletion rule). It stays
    ///   HELD, claimable by the next new mapping whose walk reaches it;
    /// - a USED word counting no session on two sweeps in a row (a mapping whose first
    ///   session could not be made) goes on hold-down.
    ///
    /// Counts the mappings (USED words) and the ports in use (USED and HELD words) into
    /// `occ` as it goes.
    fn det_ports(&mut self, cfg: &nx_config, now_s: u32, r: &mut SweepReport, occ: &mut Occupancy) {
        let words = self.ports.words();
        let mut idle_now = std::collections::HashSet::new();
        for (idx, w) in words.iter().enumerate() {
            let v = w.load(Ordering::Relaxed);
            let state = port_state(v);
            if state == PORT_USED && word_nsess(v) == 0 {
                let held = idle_word(&self.idle_last, &mut idle_now, idx, w, v, now_s);
                r.mappings_released += u32::from(held);
                occ.mappings += u64::from(!held);
                occ.ports_in_use += 1;
                continue;
            }
            if state == PORT_HELD
                && ports::may_free(cfg, words, &[], idx, v, now_s)
                && ports::free_held(w, v, None) != Freed::No
            {
                r.ports_freed += 1;
                continue;
            }
            occ.mappings += u64::from(state == PORT_USED);
            occ.ports_in_use += u64::from(state == PORT_USED || state == PORT_HELD);
        }
        self.idle_last = idle_now;
    }

    fn run(&self, reaper: &Reaper<'_>, a: &mut CtlBatch) -> Result<(), TableError> {
        reaper.reap(a).map_err(|source| TableError::Map { map: "nx_ctl", source })
    }
}

/// A port word that is a mapping, USED with no session (`v`, at index `idx`): put on
/// hold-down when it was so at the last sweep too (its first session could not be made),
/// else remembered in `idle_now`. Returns whether it went on hold-down.
fn idle_word(
    idle_last: &std::collections::HashSet<(usize, u64)>,
    idle_now: &mut std::collections::HashSet<(usize, u64)>,
    idx: usize,
    w: &std::sync::atomic::AtomicU64,
    v: u64,
    now_s: u32,
) -> bool {
    if idle_last.contains(&(idx, v)) && ports::hold_idle(w, v, now_s) {
        return true;
    }
    idle_now.insert((idx, v));
    false
}

/// Free blocks per pool address, and ports in use, for `natrix stats`.
pub fn usage(t: &Tables) -> Result<(u64, u64, u64), TableError> {
    let blocks = MmapWords::new(&t.blocks, "nx_blocks")?;
    let mut owned = 0u64;
    let mut ports = 0u64;
    for b in blocks.words() {
        let v = b.load(Ordering::Relaxed);
        if v as u32 != 0 {
            owned += 1;
            ports += block_used(v);
        }
    }
    Ok((owned, blocks.words().len() as u64, ports))
}
