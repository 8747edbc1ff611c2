// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The daemon's side of the NAT event log: every event, from wherever it comes, goes to
//! the sink (the exporter) in the order it was learnt.
//!
//! - the data plane's records: read from nx_log_rb by the daemon's loop (the ring buffer's
//!   callback calls [`Pump::record`]); the ring is pinned, so what was made while no daemon
//!   ran is read by the next one, with its true time;
//! - the sweep's block releases ([`Pump::swept`]), made after the block's last use;
//! - interim records: every log.interim, the allocation of every block held now, again;
//! - the pool threshold (natEvent 18), from the blocks in use after each sweep.

use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::Log;
use crate::expiry::{unix_ms, SweepReport};
use crate::skel::types::nx_config;
use crate::tables::{MmapWords, Tables};

use super::source::{self, Threshold};
use super::{NatEvent, NatEventKind};

/// Where events go: the exporter, or a test's list. Never blocks.
pub trait Sink {
    fn send(&self, ev: NatEvent);
}

impl Sink for super::export::Exporter {
    fn send(&self, ev: NatEvent) {
        super::export::Exporter::send(self, ev)
    }
}

/// What the pump has done, for `natrix stats`-like reporting and the metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PumpStats {
    /// Events read from the data plane's ring.
    pub from_dataplane: u64,
    /// Records in the ring that were not events this natrix knows (counted, skipped).
    pub undecodable: u64,
    /// Events the daemon made (block releases, interim records, thresholds).
    pub from_daemon: u64,
    /// Events read while no collector is configured: dropped, as log.ipfix/syslog say.
    pub discarded: u64,
}

pub struct Pump<S: Sink> {
    sink: Option<S>,
    cfg: Log,
    dynamic: bool,
    pool: Vec<Ipv4Addr>,
    blocks: MmapWords,
    threshold: Threshold,
    next_interim: Option<Instant>,
    stats: PumpStats,
}

impl<S: Sink> Pump<S> {
    /// `sink` None: logging is off ([log] has no collector); records still in the ring (a
    /// previous daemon's) are read and discarded, counted.
    pub fn new(t: &Tables, cfg: &Log, sink: Option<S>) -> anyhow::Result<Self> {
        let c = t.config()?;
        Ok(Pump {
            sink,
            cfg: cfg.clone(),
            dynamic: c.det_count == 0,
            pool: t.pool()?,
            blocks: MmapWords::new(&t.blocks, "nx_blocks")?,
            threshold: Threshold::default(),
            next_interim: cfg.interim.map(|d| Instant::now() + d),
            stats: PumpStats::default(),
        })
    }

    pub fn stats(&self) -> PumpStats {
        self.stats
    }

    pub fn sink(&self) -> Option<&S> {
        self.sink.as_ref()
    }

    fn emit(&mut self, ev: NatEvent) {
        match &self.sink {
            Some(s) => s.send(ev),
            None => self.stats.discarded += 1,
        }
    }

    /// One record of the data plane's ring; `offset_ns` is `source::tai_to_utc_ns()`, read
    /// once per batch.
    pub fn record(&mut self, rec: &[u8], offset_ns: i64) {
        match source::from_record(rec, offset_ns) {
            Some(ev) => {
                self.stats.from_dataplane += 1;
                self.emit(ev);
            }
            None => self.stats.undecodable += 1,
        }
    }

    /// After a sweep: its block releases, the pool threshold, and interim records when due.
    pub fn swept(&mut self, cfg: &nx_config, report: &SweepReport) {
        if !self.dynamic {
            return; // deterministic mode: no block events (RFC 7422)
        }
        for r in &report.released {
            let ev = source::block_free(cfg, &self.pool, r);
            self.stats.from_daemon += 1;
            self.emit(ev);
        }
        let words = self.blocks.words();
        let used = words.iter().filter(|w| w.load(Ordering::Relaxed) as u32 != 0).count() as u64;
        if let Some(ev) = self.threshold.observe(used, words.len() as u64, self.cfg.pool_threshold, unix_ms())
        {
            self.stats.from_daemon += 1;
            self.emit(ev);
        }
        if let (Some(at), Some(every)) = (self.next_interim, self.cfg.interim) {
            if Instant::now() >= at {
                self.interim(cfg);
                self.next_interim = Some(Instant::now() + every);
            }
        }
    }

    /// Interim logging: the allocation of every block held now, again (marked interim).
    fn interim(&mut self, cfg: &nx_config) {
        let now = unix_ms();
        let held: Vec<(u32, u32)> = self
            .blocks
            .words()
            .iter()
            .enumerate()
            .filter_map(|(gid, w)| {
                let owner = w.load(Ordering::Relaxed) as u32;
                (owner != 0).then_some((gid as u32, owner))
            })
            .collect();
        for (gid, owner) in held {
            let mut ev = source::block_event(cfg, &self.pool, NatEventKind::BlockAlloc, gid, owner, now);
            ev.interim = true;
            self.stats.from_daemon += 1;
            self.emit(ev);
        }
    }

    /// How long until the next interim run is due (the loop needs no finer timer: interim
    /// records go out with the first sweep after they are due).
    pub fn interim_in(&self) -> Option<Duration> {
        self.next_interim.map(|at| at.saturating_duration_since(Instant::now()))
    }
}
