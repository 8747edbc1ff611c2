// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The Prometheus endpoint (`[metrics] listen`): `GET /metrics` in the text exposition
//! format 0.0.4. Every metric, its type, labels and meaning: docs/design/metrics.md.
//!
//! A scrape never walks a table. What it serves comes from three places:
//! - the data plane's counters (`nx_stats`: packets, drops by reason, creations), read at
//!   scrape time: one lookup per counter, the same numbers `natrix stats` prints;
//! - what the daemon's last sweep counted on its own walks ([`Occupancy`]: sessions by
//!   protocol, mappings, subscribers, port blocks per pool address, the tables' fill),
//!   handed over after each sweep ([`Metrics::sweep_done`]) with the sweep's duration and
//!   time, so that a stale snapshot shows (`natrix_last_sweep_timestamp_seconds`);
//! - the NAT event exporter's counts ([`LogCounters`]).
//!
//! The server runs on threads of its own (src/metrics/http.rs); the daemon's loop only
//! swaps in the new snapshot under a lock no scrape holds for longer than a copy.

mod expo;
pub mod http;

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libbpf_rs::MapHandle;
use thiserror::Error;
use tracing::info;

use crate::abi::{P_ICMP, P_TCP, P_UDP};
pub use crate::expiry::Occupancy;
use crate::skel::types::nx_stat;
use crate::tables::{is_drop, read_stats, TableError, Tables, STATS};
use expo::{Exposition, Kind};

/// Counts of the NAT events (src/natlog) the daemon exports, kept by the exporter and read
/// by the metrics endpoint. One is shared (`Arc`) between them; the exporter only adds.
///
/// The contract, per destination (an IPFIX collector, a syslog receiver): an event handed
/// to a destination's socket counts once in `sent`; an event a destination did not get —
/// its send failed, its queue was full, it was down longer than its backlog holds — counts
/// once in `lost`. An event exported to two destinations thus counts twice. Events lost
/// before any destination saw them (the data plane's buffer was full) are the data plane's
/// count (`nx_stats`' `log_lost`), not here: served as `natrix_log_events_lost_total`
/// `{stage="buffer"}`, this one's `lost` as `{stage="export"}`.
#[derive(Debug, Default)]
pub struct LogCounters {
    sent: AtomicU64,
    lost: AtomicU64,
}

impl LogCounters {
    /// `n` events handed to a destination.
    pub fn add_sent(&self, n: u64) {
        self.sent.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` events a destination did not get.
    pub fn add_lost(&self, n: u64) {
        self.lost.fetch_add(n, Ordering::Relaxed);
    }

    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Error)]
pub enum MetricsError {
    #[error("metrics.listen = \"{addr}\": cannot listen there: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("metrics: {0}")]
    Tables(#[from] TableError),
    #[error("metrics: cannot start the server's threads: {0}")]
    Spawn(std::io::Error),
}

/// Binds `[metrics] listen`, when set. Done before anything is loaded or attached, so that
/// an address in use stops `natrix run` with nothing attached.
pub fn bind(listen: Option<SocketAddr>) -> Result<Option<TcpListener>, MetricsError> {
    listen
        .map(|addr| TcpListener::bind(addr).map_err(|source| MetricsError::Listen { addr, source }))
        .transpose()
}

/// How long a sweep took: the histogram's upper bounds, in seconds.
pub const SWEEP_BUCKETS: [f64; 13] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// What the sweeps told so far.
#[derive(Debug, Clone, Default)]
struct Sweeps {
    /// the last sweep that completed: what it counted, when it ended (Unix seconds), how
    /// long it took
    last: Option<Arc<(Occupancy, f64, f64)>>,
    /// every sweep's duration (completed or not): per bucket of SWEEP_BUCKETS, sum, count
    buckets: [u64; SWEEP_BUCKETS.len()],
    sum: f64,
    count: u64,
    failed: u64,
}

impl Sweeps {
    fn record(&mut self, occ: Option<&Occupancy>, took: Duration) {
        let s = took.as_secs_f64();
        for (b, le) in self.buckets.iter_mut().zip(SWEEP_BUCKETS) {
            *b += u64::from(s <= le);
        }
        self.sum += s;
        self.count += 1;
        match occ {
            Some(o) => {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
                self.last = Some(Arc::new((o.clone(), now, s)));
            }
            None => self.failed += 1,
        }
    }
}

/// What does not change while the daemon runs.
#[derive(Debug, Clone)]
struct Fixed {
    /// pool addresses, in pool-index order (`Occupancy::blocks` is indexed alike)
    pool: Vec<Ipv4Addr>,
}

struct Shared {
    fixed: Fixed,
    stats: MapHandle,
    log: Arc<LogCounters>,
    sweeps: Mutex<Sweeps>,
}

impl Shared {
    fn scrape(&self) -> Result<String, String> {
        let stats = read_stats(&self.stats).map_err(|e| e.to_string())?;
        let sweeps = self.sweeps.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Ok(render(&self.fixed, &sweeps, &stats, &self.log))
    }
}

/// The running endpoint.
pub struct Metrics {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Metrics {
    /// Serves `listener` (from [`bind`]) until `stop` is set: the counters of `t`, the
    /// sweeps handed to [`Metrics::sweep_done`], and `log`.
    pub fn serve(
        listener: TcpListener,
        t: &Tables,
        log: Arc<LogCounters>,
        stop: Arc<AtomicBool>,
    ) -> Result<Metrics, MetricsError> {
        let stats = MapHandle::try_from(&t.stats)
            .map_err(|source| MetricsError::Tables(TableError::Map { map: "nx_stats", source }))?;
        let shared =
            Arc::new(Shared { fixed: Fixed { pool: t.pool()? }, stats, log, sweeps: Mutex::default() });
        let addr = listener.local_addr().map_err(MetricsError::Spawn)?;
        let s = Arc::clone(&shared);
        let handler: http::Handler = Arc::new(move || s.scrape());
        let thread =
            http::spawn(listener, stop, handler, http::Limits::default()).map_err(MetricsError::Spawn)?;
        info!("metrics: serving http://{addr}{}", http::PATH);
        Ok(Metrics { shared, thread: Some(thread) })
    }

    /// A sweep ended: `occ` is what it counted (None: it failed, and the last snapshot
    /// stays, growing older), `took` how long it ran.
    pub fn sweep_done(&self, occ: Option<&Occupancy>, took: Duration) {
        self.shared.sweeps.lock().unwrap_or_else(|e| e.into_inner()).record(occ, took);
    }

    /// Waits for the server to end (after `stop` is set: within 200 ms).
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A label's name and value.
type Label = (&'static str, &'static str);

/// How each counter of `nx_stats` but the drops is exposed: its family, and the label that
/// tells it from the family's other counters. Drops are `natrix_drops_total{reason}`, one
/// series per reason, named as `natrix stats` names them. A counter added to the data plane
/// must be added here (a test checks the table covers the enum).
const COUNTERS: &[(nx_stat, &str, &str, Option<Label>)] = &[
    (nx_stat::NX_STAT_RX_INSIDE, RX, RX_HELP, Some(("side", "inside"))),
    (nx_stat::NX_STAT_RX_OUTSIDE, RX, RX_HELP, Some(("side", "outside"))),
    (nx_stat::NX_STAT_XLATE_OUT, XLATE, XLATE_HELP, Some(("direction", "out"))),
    (nx_stat::NX_STAT_XLATE_IN, XLATE, XLATE_HELP, Some(("direction", "in"))),
    (
        nx_stat::NX_STAT_REDIRECT,
        "natrix_redirected_packets_total",
        "Packets the data plane sent out of an interface itself (XDP redirect).",
        None,
    ),
    (nx_stat::NX_STAT_PASS_NOT_IP, PASS, PASS_HELP, Some(("reason", "not_ipv4"))),
    (nx_stat::NX_STAT_PASS_LOCAL, PASS, PASS_HELP, Some(("reason", "local"))),
    (nx_stat::NX_STAT_PASS_TTL, PASS, PASS_HELP, Some(("reason", "ttl"))),
    (nx_stat::NX_STAT_PASS_NO_NEIGH, PASS, PASS_HELP, Some(("reason", "no_neigh"))),
    (nx_stat::NX_STAT_PASS_FIB_OTHER, PASS, PASS_HELP, Some(("reason", "fib_other"))),
    (nx_stat::NX_STAT_PASS_TOO_BIG, PASS, PASS_HELP, Some(("reason", "too_big"))),
    (nx_stat::NX_STAT_PASS_EXCLUDED, PASS, PASS_HELP, Some(("reason", "excluded"))),
    (nx_stat::NX_STAT_PASS_OTHER_HOST, PASS, PASS_HELP, Some(("reason", "other_host"))),
    (nx_stat::NX_STAT_MAP_CREATED, "natrix_mappings_created_total", "Mappings (BIB entries) made.", None),
    (nx_stat::NX_STAT_SESS_CREATED, "natrix_sessions_created_total", "Sessions made.", None),
    (nx_stat::NX_STAT_SUB_CREATED, "natrix_subscribers_created_total", "Subscriber entries made.", None),
    (
        nx_stat::NX_STAT_BLOCK_ALLOC,
        "natrix_port_blocks_allocated_total",
        "Port blocks allocated to subscribers.",
        None,
    ),
    (
        nx_stat::NX_STAT_HOME_BLOCK,
        "natrix_home_blocks_allocated_total",
        "Port blocks allocated that were their subscriber's home block.",
        None,
    ),
    (
        nx_stat::NX_STAT_ALLOC_RETRY,
        "natrix_alloc_retries_total",
        "Compare-and-swaps lost to another CPU while allocating ports, blocks or counting sessions.",
        None,
    ),
    (nx_stat::NX_STAT_ICMP_ERR_IN, ICMP_XLATE, ICMP_XLATE_HELP, Some(("direction", "in"))),
    (nx_stat::NX_STAT_ICMP_ERR_OUT, ICMP_XLATE, ICMP_XLATE_HELP, Some(("direction", "out"))),
    (
        nx_stat::NX_STAT_ICMP_SENT,
        "natrix_icmp_errors_sent_total",
        "ICMP errors natrix built and sent itself (destination unreachable, fragmentation needed).",
        None,
    ),
    (
        nx_stat::NX_STAT_ICMP_SUPPRESSED,
        "natrix_icmp_errors_rate_limited_total",
        "ICMP errors natrix owed but did not send: nat.icmp_errors_per_sec.",
        None,
    ),
    (nx_stat::NX_STAT_FRAG_OUT, FRAG, FRAG_HELP, Some(("direction", "out"))),
    (nx_stat::NX_STAT_FRAG_IN, FRAG, FRAG_HELP, Some(("direction", "in"))),
    (
        nx_stat::NX_STAT_FRAG_HELD,
        "natrix_fragments_held_total",
        "Fragments that came before their first fragment, handed to the daemon to hold.",
        None,
    ),
    (
        nx_stat::NX_STAT_FRAG_REINJECTED,
        "natrix_fragments_reinjected_total",
        "Held fragments the daemon translated and sent on.",
        None,
    ),
    (
        nx_stat::NX_STAT_LOG_EVENT,
        "natrix_log_events_buffered_total",
        "NAT events the data plane put into its event buffer for the daemon to export.",
        None,
    ),
    (nx_stat::NX_STAT_LOG_LOST, LOG_LOST, LOG_LOST_HELP, Some(("stage", "buffer"))),
    (
        nx_stat::NX_STAT_FIB_LOOKUP,
        "natrix_fib_lookups_total",
        "Routing lookups the FIB cache did not answer (asked of the kernel).",
        None,
    ),
];

const RX: &str = "natrix_received_packets_total";
const RX_HELP: &str = "Packets the data plane received, by the gateway's side they came in on.";
const XLATE: &str = "natrix_translated_packets_total";
const XLATE_HELP: &str = "Packets translated: out, inside to outside; in, outside to inside.";
const PASS: &str = "natrix_passed_packets_total";
const PASS_HELP: &str =
    "Packets handed to the kernel, by why (natrix stats' pass_* counters without the prefix).";
const ICMP_XLATE: &str = "natrix_icmp_errors_translated_total";
const ICMP_XLATE_HELP: &str = "ICMP errors translated: out, inside to outside; in, outside to inside.";
const FRAG: &str = "natrix_fragments_translated_total";
const FRAG_HELP: &str = "IP fragments translated: out, inside to outside; in, outside to inside.";
const LOG_LOST: &str = "natrix_log_events_lost_total";
const LOG_LOST_HELP: &str = "NAT events lost: buffer, the data plane's event buffer was full (nothing exported them); \
     export, a log destination did not get them (send failed, queue full, destination down), once per destination.";

/// The protocols of `natrix_sessions`, by protocol index.
const PROTOS: [(u32, &str); 3] = [(P_TCP, "tcp"), (P_UDP, "udp"), (P_ICMP, "icmp")];
/// The tables of `natrix_table_entries`, in `Occupancy::table_entries` order.
const TABLES: [&str; 3] = ["sessions", "mappings", "subscribers"];

/// The text served: `stats` (indexed by `enum nx_stat`), the sweeps, the event counts.
fn render(fixed: &Fixed, sweeps: &Sweeps, stats: &[u64], log: &LogCounters) -> String {
    exposition(fixed, sweeps, stats, log).render()
}

fn exposition(fixed: &Fixed, sweeps: &Sweeps, stats: &[u64], log: &LogCounters) -> Exposition {
    let mut e = Exposition::default();
    e.family("natrix_build_info", Kind::Gauge, "Always 1: the natrix version serving.")
        .add(&[("version", env!("CARGO_PKG_VERSION"))], 1u64);
    let stat = |s: nx_stat| stats.get(s.0 as usize).copied().unwrap_or(0);

    // the data plane's counters, read now
    for (s, name, help, label) in COUNTERS {
        let f = e.family(name, Kind::Counter, help);
        match label {
            Some(l) => f.add(&[*l], stat(*s)),
            None => f.add(&[], stat(*s)),
        };
    }
    let drops = e.family(
        "natrix_drops_total",
        Kind::Counter,
        "Packets the data plane dropped, by reason (natrix stats' drop reasons, every one).",
    );
    for (s, name) in STATS.iter().filter(|(s, _)| is_drop(*s)) {
        drops.add(&[("reason", name)], stat(*s));
    }
    e.family(
        "natrix_log_events_sent_total",
        Kind::Counter,
        "NAT events handed to a log destination (IPFIX collector, syslog receiver), once per destination.",
    )
    .add(&[], log.sent());
    e.family(LOG_LOST, Kind::Counter, LOG_LOST_HELP).add(&[("stage", "export")], log.lost());

    // the sweeps
    e.family(
        "natrix_sweep_duration_seconds",
        Kind::Histogram,
        "How long the daemon's sweeps (expiry, hold-down, block release, counting) took.",
    )
    .histogram(
        &SWEEP_BUCKETS.iter().copied().zip(sweeps.buckets).collect::<Vec<_>>(),
        sweeps.sum,
        sweeps.count,
    );
    e.family("natrix_sweep_errors_total", Kind::Counter, "Sweeps that failed (the daemon's log says why).")
        .add(&[], sweeps.failed);
    let Some(last) = &sweeps.last else { return e };
    let (o, at, took) = &**last;
    e.family(
        "natrix_last_sweep_timestamp_seconds",
        Kind::Gauge,
        "When the last sweep that completed ended (Unix time): the gauges below are as of then.",
    )
    .add(&[], *at);
    e.family(
        "natrix_last_sweep_duration_seconds",
        Kind::Gauge,
        "How long the last sweep that completed took.",
    )
    .add(&[], *took);

    // what the last sweep counted
    let sessions = e.family(
        "natrix_sessions",
        Kind::Gauge,
        "Sessions by protocol (address-dependent filtering's records included, as natrix stats counts).",
    );
    for (p, name) in PROTOS {
        sessions.add(&[("proto", name)], o.sessions[p as usize]);
    }
    e.family(
        "natrix_mappings",
        Kind::Gauge,
        "Mappings (BIB entries): the mapping table's and the port words that are mappings.",
    )
    .add(&[], o.mappings);
    e.family("natrix_ports_in_use", Kind::Gauge, "Outside ports in use (held ones included).")
        .add(&[], o.ports_in_use);
    if !o.deterministic {
        e.family(
            "natrix_subscribers",
            Kind::Gauge,
            "Subscribers with state (an entry in the subscriber table).",
        )
        .add(&[], o.subscribers);
        e.family(
            "natrix_port_blocks_in_use",
            Kind::Gauge,
            "Port blocks owned by subscribers, the whole pool.",
        )
        .add(&[], o.blocks.iter().sum::<u64>());
        e.family("natrix_port_blocks_capacity", Kind::Gauge, "Port blocks of the whole pool.")
            .add(&[], o.blocks_per_addr * fixed.pool.len() as u64);
        e.family("natrix_port_blocks_per_address", Kind::Gauge, "Port blocks each pool address has.")
            .add(&[], o.blocks_per_addr);
        let per =
            e.family("natrix_port_blocks", Kind::Gauge, "Port blocks owned by subscribers, by pool address.");
        for (ip, n) in fixed.pool.iter().zip(&o.blocks) {
            per.add(&[("address", &ip.to_string())], *n);
        }
    }
    let entries = e.family(
        "natrix_table_entries",
        Kind::Gauge,
        "Entries of each table as the data plane counts them (what enforces its limit).",
    );
    for (name, n) in TABLES.iter().zip(o.table_entries) {
        entries.add(&[("table", name)], n);
    }
    let cap = e.family(
        "natrix_table_capacity",
        Kind::Gauge,
        "Entries each table may hold (limits.max_sessions, max_mappings, max_subscribers).",
    );
    for (name, n) in TABLES.iter().zip(o.table_capacity) {
        cap.add(&[("table", name)], n);
    }
    e
}

/// Every metric family's name, in the order served (what docs/design/metrics.md lists):
/// those of a scrape after a sweep in dynamic mode, which has them all.
pub fn family_names() -> Vec<&'static str> {
    let fixed = Fixed { pool: vec![Ipv4Addr::new(192, 0, 2, 1)] };
    let mut sweeps = Sweeps::default();
    sweeps.record(Some(&Occupancy { blocks: vec![0], ..Default::default() }), Duration::ZERO);
    exposition(&fixed, &sweeps, &[], &LogCounters::default()).names()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_one_metric() {
        let mut seen = vec![0; nx_stat::NX_STAT_MAX.0 as usize];
        for (s, ..) in COUNTERS {
            assert!(!is_drop(*s), "{s:?}: drops are natrix_drops_total{{reason}}");
            seen[s.0 as usize] += 1;
        }
        for (s, name) in STATS {
            let want = if is_drop(*s) { 0 } else { 1 };
            assert_eq!(seen[s.0 as usize], want, "counter {name} has no metric (COUNTERS) or two");
        }
    }

    fn occupancy() -> Occupancy {
        Occupancy {
            deterministic: false,
            sessions: [3, 2, 1],
            mappings: 4,
            subscribers: 2,
            blocks: vec![1, 0, 2],
            blocks_per_addr: 252,
            ports_in_use: 5,
            table_entries: [6, 1, 2],
            table_capacity: [1 << 20, 1 << 20, 65536],
        }
    }

    fn fixed() -> Fixed {
        Fixed {
            pool: vec![
                Ipv4Addr::new(203, 0, 113, 16),
                Ipv4Addr::new(203, 0, 113, 17),
                Ipv4Addr::new(203, 0, 113, 40),
            ],
        }
    }

    #[test]
    fn what_a_scrape_shows() {
        let mut stats = vec![0u64; nx_stat::NX_STAT_MAX.0 as usize];
        stats[nx_stat::NX_STAT_XLATE_OUT.0 as usize] = 7;
        stats[nx_stat::NX_DROP_NO_MAPPING.0 as usize] = 3;
        let log = LogCounters::default();
        log.add_sent(5);
        log.add_lost(1);
        // before the first sweep: counters only
        let mut sweeps = Sweeps::default();
        let t = render(&fixed(), &sweeps, &stats, &log);
        assert!(t.contains("natrix_translated_packets_total{direction=\"out\"} 7\n"), "{t}");
        assert!(t.contains("natrix_drops_total{reason=\"no_mapping\"} 3\n"), "{t}");
        assert!(t.contains("natrix_drops_total{reason=\"internal_error\"} 0\n"), "{t}");
        let drops = t.lines().filter(|l| l.starts_with("natrix_drops_total{")).count();
        assert_eq!(drops, STATS.iter().filter(|(s, _)| is_drop(*s)).count());
        assert!(t.contains("\nnatrix_log_events_sent_total 5\n"), "{t}");
        assert!(t.contains("\nnatrix_log_events_lost_total{stage=\"export\"} 1\n"), "{t}");
        assert!(t.contains("\nnatrix_log_events_lost_total{stage=\"buffer\"} 0\n"), "{t}");
        assert!(t.contains("natrix_sweep_duration_seconds_count 0\n"), "{t}");
        assert!(!t.contains("natrix_sessions{") && !t.contains("natrix_last_sweep"), "{t}");
        // a failed sweep, then one that completed
        sweeps.record(None, Duration::from_millis(3));
        sweeps.record(Some(&occupancy()), Duration::from_millis(20));
        let t = render(&fixed(), &sweeps, &stats, &log);
        for want in [
            "natrix_sessions{proto=\"tcp\"} 3\n",
            "natrix_sessions{proto=\"udp\"} 2\n",
            "natrix_sessions{proto=\"icmp\"} 1\n",
            "natrix_mappings 4\n",
            "natrix_subscribers 2\n",
            "natrix_port_blocks_in_use 3\n",
            "natrix_port_blocks_capacity 756\n",
            "natrix_port_blocks_per_address 252\n",
            "natrix_port_blocks{address=\"203.0.113.16\"} 1\n",
            "natrix_port_blocks{address=\"203.0.113.17\"} 0\n",
            "natrix_port_blocks{address=\"203.0.113.40\"} 2\n",
            "natrix_ports_in_use 5\n",
            "natrix_table_entries{table=\"sessions\"} 6\n",
            "natrix_table_capacity{table=\"subscribers\"} 65536\n",
            "natrix_last_sweep_duration_seconds 0.02\n",
            "natrix_sweep_errors_total 1\n",
            "natrix_sweep_duration_seconds_bucket{le=\"0.0025\"} 0\n",
            "natrix_sweep_duration_seconds_bucket{le=\"0.005\"} 1\n",
            "natrix_sweep_duration_seconds_bucket{le=\"0.025\"} 2\n",
            "natrix_sweep_duration_seconds_bucket{le=\"+Inf\"} 2\n",
            "natrix_sweep_duration_seconds_count 2\n",
        ] {
            assert!(t.contains(want), "no {want:?} in\n{t}");
        }
        let at: f64 = t
            .lines()
            .find_map(|l| l.strip_prefix("natrix_last_sweep_timestamp_seconds "))
            .and_then(|v| v.parse().ok())
            .expect("a timestamp");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        assert!((now - at).abs() < 60.0, "{at} vs {now}");
        // deterministic mode: no subscriber entries, no blocks
        let det = Occupancy { deterministic: true, blocks: Vec::new(), ..occupancy() };
        sweeps.record(Some(&det), Duration::from_millis(1));
        let t = render(&fixed(), &sweeps, &stats, &log);
        assert!(
            t.contains("natrix_mappings 4\n")
                && !t.contains("natrix_port_blocks{")
                && !t.contains("natrix_port_blocks_in_use")
                && !t.contains("natrix_subscribers "),
            "{t}"
        );
    }

    #[test]
    fn family_names_are_unique_and_complete() {
        let names = family_names();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "{names:?}");
        for n in
            ["natrix_drops_total", "natrix_port_blocks", "natrix_sessions", "natrix_log_events_lost_total"]
        {
            assert!(names.contains(&n), "{n} missing from {names:?}");
        }
    }
}
