// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix run`: validate, load or take over, attach, then sweep until told to stop.
//!
//! Stopping (SIGINT/SIGTERM) leaves everything pinned and attached: the data plane keeps
//! translating with no daemon, and the next `natrix run` takes it over.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use tracing::{info, warn};

use crate::config::Config;
use crate::dataplane::{self, Dataplane, Persistence};
use crate::expiry::{Reaper, Sweeper};
use crate::frag::FragHolder;

pub fn run(cfg: &Config, config_path: &Path) -> Result<()> {
    for w in &cfg.warnings {
        warn!("{w}");
    }
    // Everything that can be checked before touching the kernel is checked first, so that
    // a mistake leaves nothing attached.
    let ifaces = dataplane::resolve_interfaces(cfg)?;
    let metrics_listener = crate::metrics::bind(cfg.metrics.listen)?;
    let pin = cfg.daemon.pin_path.clone();
    dataplane::ensure_bpffs(&pin)?;
    let fresh = !dataplane::is_pinned(&pin);
    let dp = Dataplane::load(cfg, Persistence::Pinned(pin.clone()))?;
    let setup = (|| -> Result<()> {
        dp.configure(cfg, &ifaces)?;
        dataplane::prepare_sysctls(&ifaces)?;
        dp.attach(&ifaces, cfg.interfaces.xdp_mode)?;
        Ok(())
    })();
    if let Err(e) = setup {
        if fresh {
            // nothing of ours was running before: leave nothing behind
            let _ = dataplane::down(&pin);
        }
        return Err(e);
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop))?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))?;

    // The FIB cache's watcher (src/fibwatch.rs). Without it the cache still works, but a
    // route change takes up to fib_cache.max_age to be seen.
    let fibwatch = if cfg.fib_cache.entries > 0 {
        let started = libbpf_rs::MapHandle::try_from(&dp.skel.maps.nx_fibc_gen)
            .map_err(anyhow::Error::from)
            .and_then(|h| Ok(crate::tables::MmapWords::new(&h, "nx_fibc_gen")?))
            .and_then(|g| Ok(crate::fibwatch::spawn(g, Arc::clone(&stop))?));
        match started {
            Ok(t) => Some(t),
            Err(e) => {
                warn!(
                    "FIB cache: cannot watch routing changes ({e:#}); cached answers live up to \
                     fib_cache.max_age after a change"
                );
                None
            }
        }
    } else {
        None
    };

    let mut sweeper = Sweeper::new(&dp.tables)?;
    let reap_buf = libbpf_rs::MapHandle::try_from(&dp.skel.maps.nx_reap_buf)?;
    let reaper = Reaper { prog: &dp.skel.progs.nx_ctl, buf: &reap_buf };
    // NAT event counts: the exporter adds, the metrics endpoint reads
    let log_counters = Arc::new(crate::metrics::LogCounters::default());
    let metrics = metrics_listener
        .map(|l| crate::metrics::Metrics::serve(l, &dp.tables, Arc::clone(&log_counters), Arc::clone(&stop)))
        .transpose()?;
    info!(
        config = %config_path.display(),
        pin = %pin.display(),
        pool = cfg.pool.addresses.len(),
        interfaces = ifaces.len(),
        takeover = dp.took_over,
        "natrix ready: translating"
    );
    let every = cfg.daemon.sweep_interval;
    let mut next = Instant::now();
    let mut forwards_pending = !cfg.forwards.is_empty();

    // Early fragments: the ring buffer's callback queues them, the loop flushes them.
    let holder = std::rc::Rc::new(std::cell::RefCell::new(FragHolder::new(
        cfg.fragments.max_held,
        cfg.fragments.timeout,
    )?));
    let frags = libbpf_rs::MapHandle::try_from(&dp.skel.maps.nx_frags)?;
    let rb = {
        let h = std::rc::Rc::clone(&holder);
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&dp.skel.maps.nx_frag_rb, move |rec: &[u8]| {
            h.borrow_mut().push(rec);
            0
        })?;
        b.build()?
    };

    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next {
            let began = Instant::now();
            let swept = sweeper.sweep(&dp.tables, &reaper);
            if let Some(m) = &metrics {
                m.sweep_done(swept.is_ok().then(|| sweeper.occupancy()), began.elapsed());
            }
            match swept {
                Ok(r) if r.sessions_expired + r.mappings_released + r.blocks_released > 0 => info!(
                    sessions = r.sessions_expired,
                    mappings = r.mappings_released,
                    ports_freed = r.ports_freed,
                    blocks = r.blocks_released,
                    "expired"
                ),
                Ok(_) => {}
                Err(e) => warn!("sweep failed: {e}"),
            }
            if forwards_pending {
                match dp.install_forwards(cfg) {
                    Ok(0) => {
                        forwards_pending = false;
                        info!("all static forwards installed");
                    }
                    Ok(_) => {}
                    Err(e) => warn!("installing static forwards: {e}"),
                }
            }
            next = Instant::now() + every;
        }
        // Waits for early fragments (or the next sweep); while some are held, look for
        // their first fragment's record often: they are a datagram in flight.
        let wait =
            if holder.borrow().is_holding() { Duration::from_millis(2) } else { Duration::from_millis(50) };
        if let Err(e) = rb.poll(wait.min(every)) {
            if e.kind() != libbpf_rs::ErrorKind::Interrupted {
                warn!("fragment ring buffer: {e}");
            }
        }
        let mut h = holder.borrow_mut();
        if h.is_holding() {
            h.flush(&frags);
        }
        // every held fragment's fate is counted (nx_stats, shown by natrix stats)
        for (name, n) in h.take_stats().counters() {
            if n == 0 {
                continue;
            }
            let idx = crate::tables::stat_index(name).expect("a counter of nx_stats");
            if let Err(e) = dp.tables.stat_add(idx, n) {
                warn!("counting {n} {name}: {e}");
            }
        }
    }
    if let Some(t) = fibwatch {
        let _ = t.join();
    }
    if let Some(m) = metrics {
        m.join();
    }
    info!("stopping; the data plane keeps translating (pinned under {})", pin.display());
    Ok(())
}
