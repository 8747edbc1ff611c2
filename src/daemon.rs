// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix run`: validate, load or take over, attach, then sweep until told to stop.
//!
//! Stopping (SIGINT/SIGTERM) leaves everything pinned and attached: the data plane keeps
//! translating with no daemon, and the next `natrix run` takes it over.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tracing::{info, warn};

use crate::config::Config;
use crate::dataplane::{self, Dataplane, Persistence};
use crate::expiry::{Reaper, Sweeper};
use crate::frag::FragHolder;
use crate::natlog::export::{Exporter, Options};
use crate::natlog::pump::Pump;
use crate::natlog::source::tai_to_utc_ns;

/// This host's name, for syslog's HOSTNAME field ("-" when it has none, as RFC 5424 says).
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(h) if rc == 0 && !h.is_empty() => h.to_owned(),
        _ => "-".to_owned(),
    }
}

pub fn run(cfg: &Config, config_path: &Path) -> Result<()> {
    run_with(cfg, config_path, &dataplane::LoadOptions::from_env())
}

/// `natrix run` with the data plane loaded as `opts` says (`--reload`, `--verifier-log`).
pub fn run_with(cfg: &Config, config_path: &Path, opts: &dataplane::LoadOptions) -> Result<()> {
    let began = Instant::now();
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
    let mut dp = Dataplane::load_with(cfg, Persistence::Pinned(pin.clone()), opts)?;
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
        let started = dp
            .map("nx_fibc_gen")
            .context("the data plane has no map nx_fibc_gen")
            .and_then(|h| Ok(crate::tables::MmapWords::new(h, "nx_fibc_gen")?))
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
    let reaper: Reaper<'_> = dp.reaper()?;
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
        programs = if dp.programs_reused() { "kept" } else { "loaded" },
        startup_ms = began.elapsed().as_millis() as u64,
        "natrix ready: translating"
    );
    let every = cfg.daemon.sweep_interval;
    let mut next = Instant::now();
    let mut forwards_pending = !cfg.forwards.is_empty();

    // The NAT event log (src/natlog): the data plane's events come through its ring buffer
    // (those made while no daemon ran first, with their true times), the sweep's releases,
    // interim records and the pool threshold through the pump; the exporter sends them on
    // threads of its own and never blocks this loop.
    let exporter = if cfg.log.enabled() {
        let opts = Options { counters: Arc::clone(&log_counters), ..Options::from_config(&cfg.log) };
        Some(Exporter::start_with(&cfg.log, &hostname(), opts).context("log: starting the exporter")?)
    } else {
        None
    };
    let pump = std::rc::Rc::new(std::cell::RefCell::new(Pump::new(&dp.tables, &cfg.log, exporter)?));

    // Early fragments: the ring buffer's callback queues them, the loop flushes them.
    let holder = std::rc::Rc::new(std::cell::RefCell::new(FragHolder::new(
        cfg.fragments.max_held,
        cfg.fragments.timeout,
    )?));
    let map = |name: &str| dp.map(name).with_context(|| format!("the data plane has no map {name}"));
    let frags = map("nx_frags")?;
    let rb = {
        let h = std::rc::Rc::clone(&holder);
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(map("nx_frag_rb")?, move |rec: &[u8]| {
            h.borrow_mut().push(rec);
            0
        })?;
        let p = std::rc::Rc::clone(&pump);
        b.add(map("nx_log_rb")?, move |rec: &[u8]| {
            p.borrow_mut().record(rec, tai_to_utc_ns());
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
            match &swept {
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
            if let Ok(r) = &swept {
                // the ring first: a block's allocation goes out before its release
                let _ = rb.consume();
                match dp.tables.config() {
                    Ok(c) => pump.borrow_mut().swept(&c, r),
                    Err(e) => warn!("log: reading the configuration: {e}"),
                }
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
            // a capture killed before it could take its stages out (SIGKILL)
            match crate::capture::session::remove_orphaned(&pin) {
                Ok(Some(pid)) => {
                    warn!(pid, "a capture ended without cleaning up (killed?): its stages removed")
                }
                Ok(None) => {}
                Err(e) => warn!("looking for a killed capture: {e}"),
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
            h.flush(frags);
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
    // what the ring holds now is read and handed on; what the collectors have not taken in
    // two seconds is counted lost (events still in the ring wait for the next daemon)
    let _ = rb.consume();
    if let Some(x) = pump.borrow().sink() {
        if !x.flush(Duration::from_secs(2)) {
            warn!("log: stopping with events not yet sent (counted lost)");
        }
    }
    info!("stopping; the data plane keeps translating (pinned under {})", pin.display());
    Ok(())
}
