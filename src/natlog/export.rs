// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The exporter: NAT events from the daemon's loop to IPFIX collectors (UDP, TCP) and
//! syslog receivers (UDP), on threads of its own.
//!
//! ```text
//! send() ─► queue (bounded: full = lost, counted) ─► dispatcher thread
//!             ├─ syslog: one line per event ─────────► each receiver  (one UDP socket)
//!             ├─ IPFIX/UDP: messages under the MTU ──► each collector (the same socket)
//!             └─ IPFIX/TCP: events ─► backlog (bounded) ─► one thread per collector
//! ```
//!
//! Nothing here waits for a collector on the caller's behalf: `send` takes a lock held only
//! for a push or a swap; UDP sockets never block (a down collector costs nothing: the socket
//! is unconnected, so ICMP errors are not even reported); each TCP collector has its own
//! thread, which connects with a timeout, reconnects with backoff, and resends every
//! message the collector did not acknowledge. docs/design/natlog.md has the reasoning.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde::Serialize;

use super::ipfix::{self, Message};
use super::syslog::Formatter;
use super::NatEvent;
use crate::config::{Collector, Log};
use crate::metrics::LogCounters;

/// How often an idle TCP thread looks at its connection (a collector that went away is
/// noticed within this even when there is nothing to send).
const TCP_TICK: Duration = Duration::from_millis(100);
/// Longest a TCP thread waits for its socket to take more bytes before it looks again.
const TCP_WRITE_WAIT: Duration = Duration::from_millis(50);
/// A connection that lived this long was healthy: the next one starts the backoff over.
const TCP_HEALTHY: Duration = Duration::from_secs(10);
/// Longest the dispatcher waits for the UDP socket to take a datagram when its buffer is
/// full (a burst), before the datagram counts as lost.
const UDP_FULL_WAIT: Duration = Duration::from_millis(5);

/// What the config does not say: sizes and timings, with defaults (`from_config`).
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest IPFIX message, bytes (RFC 7011 section 10.3.3: under the path MTU for UDP).
    pub mtu: usize,
    /// Events the queue between `send` and the dispatcher holds; beyond, `send` counts them
    /// lost.
    pub queue_events: usize,
    /// Events a TCP collector's backlog holds while it is down or slow; beyond, they count
    /// lost for that collector.
    pub tcp_backlog_events: usize,
    /// How long a TCP connect may take.
    pub connect_timeout: Duration,
    /// Wait before the first reconnect; it doubles with each failure up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// On drop: how long TCP threads may go on writing their backlogs.
    pub shutdown_grace: Duration,
    /// The counts the metrics endpoint serves (src/metrics.rs's contract: per destination,
    /// an event handed to its socket once in `sent`, one it did not get once in `lost`);
    /// the exporter adds to them. A fresh one by default (`Exporter::log_counters`).
    pub counters: Arc<LogCounters>,
}

impl Options {
    /// The defaults: the MTU `ipfix::DEFAULT_MTU`, queue and backlogs of `log.buffer_events`
    /// (what the data plane buffers while no daemon reads it, so an outage of one collector
    /// is ridden out as long as one of the daemon), 3 s to connect, backoff 250 ms to 30 s,
    /// 2 s of grace.
    pub fn from_config(cfg: &Log) -> Options {
        let events = (cfg.buffer_events as usize).max(1);
        Options {
            mtu: ipfix::DEFAULT_MTU,
            queue_events: events,
            tcp_backlog_events: events,
            connect_timeout: Duration::from_secs(3),
            backoff_min: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(2),
            counters: Arc::default(),
        }
    }
}

/// Where a destination's records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectorKind {
    IpfixUdp,
    IpfixTcp,
    Syslog,
}

/// One destination's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CollectorStats {
    pub kind: CollectorKind,
    pub addr: SocketAddr,
    /// Events handed to the socket whole (syslog: lines), each once: a record written
    /// again on a new TCP connection is not counted again (`records_resent` counts those).
    pub records: u64,
    /// Messages (datagrams, or TCP messages) handed to the socket whole.
    pub messages: u64,
    pub bytes: u64,
    /// Events this destination will not get: the exporter's queue was full, IPFIX has no
    /// template for it, a send failed, its backlog was full, it was still waiting at
    /// shutdown.
    pub records_lost: u64,
    /// Records written again on a new TCP connection: the collector had not acknowledged
    /// them when the old one broke (they may arrive twice).
    pub records_resent: u64,
    /// Send errors, failed connects and broken connections.
    pub errors: u64,
    /// TCP: connected now.
    pub connected: bool,
    /// TCP: connections made, and of those the ones after the first.
    pub connects: u64,
    pub reconnects: u64,
    /// TCP: events waiting for the connection (not yet written whole).
    pub backlog: u64,
}

/// The exporter's counters (`Exporter::stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExportStats {
    /// Events given to `send`.
    pub events_received: u64,
    /// Of those, the ones the queue took (the rest are `events_lost`, or were not queued
    /// because no destination is configured).
    pub events_queued: u64,
    /// Events in the queue now, or being handed out.
    pub queue_len: u64,
    /// Events refused by a full queue: exported nowhere.
    pub events_lost: u64,
    /// Events IPFIX has no template for (a quota or threshold kind natrix does not know):
    /// sent to syslog receivers only.
    pub events_unencodable: u64,
    /// Events handed whole to the sockets, per kind of destination (summed over them; each
    /// once per destination).
    pub ipfix_udp_records: u64,
    pub ipfix_tcp_records: u64,
    pub syslog_records: u64,
    pub bytes_sent: u64,
    /// Events some destination did not get, once per destination (summed over them; an
    /// event in `events_lost` counts here once for every destination).
    pub records_lost: u64,
    /// TCP connections made after a collector's first.
    pub tcp_reconnects: u64,
    pub collectors: Vec<CollectorStats>,
}

/// One destination's live counters.
struct Dest {
    kind: CollectorKind,
    addr: SocketAddr,
    log: Arc<LogCounters>,
    records: AtomicU64,
    messages: AtomicU64,
    bytes: AtomicU64,
    lost: AtomicU64,
    resent: AtomicU64,
    errors: AtomicU64,
    connected: AtomicBool,
    connects: AtomicU64,
    reconnects: AtomicU64,
    backlog: AtomicU64,
}

impl Dest {
    fn new(kind: CollectorKind, addr: SocketAddr, log: &Arc<LogCounters>) -> Arc<Dest> {
        Arc::new(Dest {
            kind,
            addr,
            log: log.clone(),
            records: AtomicU64::new(0),
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            resent: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            connected: AtomicBool::new(false),
            connects: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            backlog: AtomicU64::new(0),
        })
    }

    /// A message of `records` new records (`again` more sent before) handed over whole.
    fn sent(&self, records: u64, again: u64, bytes: usize) {
        self.records.fetch_add(records, Relaxed);
        self.log.add_sent(records);
        if again > 0 {
            self.resent.fetch_add(again, Relaxed);
        }
        self.messages.fetch_add(1, Relaxed);
        self.bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// `n` events this destination will not get.
    fn lose(&self, n: u64) {
        if n > 0 {
            self.lost.fetch_add(n, Relaxed);
            self.log.add_lost(n);
        }
    }

    fn stats(&self) -> CollectorStats {
        CollectorStats {
            kind: self.kind,
            addr: self.addr,
            records: self.records.load(Relaxed),
            messages: self.messages.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            records_lost: self.lost.load(Relaxed),
            records_resent: self.resent.load(Relaxed),
            errors: self.errors.load(Relaxed),
            connected: self.connected.load(Relaxed),
            connects: self.connects.load(Relaxed),
            reconnects: self.reconnects.load(Relaxed),
            backlog: self.backlog.load(Relaxed),
        }
    }
}

/// A lock that a panicking thread cannot make unusable (the data under it stays
/// consistent: every critical section is a push, a swap or a counter).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_secs() -> u32 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as u32)
}

/// The queue between `send` and the dispatcher.
struct Queue {
    events: VecDeque<NatEvent>,
    /// Events the dispatcher took and is still handing out.
    taken: usize,
    shutdown: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    capacity: usize,
    received: AtomicU64,
    queued: AtomicU64,
    lost: AtomicU64,
    unencodable: AtomicU64,
    /// Every destination, in config order (IPFIX, then syslog).
    dests: Vec<Arc<Dest>>,
    tcp: Vec<Arc<TcpShared>>,
}

/// What the dispatcher and a TCP thread share.
struct TcpShared {
    dest: Arc<Dest>,
    inbox: Mutex<Inbox>,
    wake: Condvar,
    capacity: usize,
}

struct Inbox {
    events: VecDeque<NatEvent>,
    /// Events the thread holds that are not yet written whole.
    busy: usize,
    /// Set at shutdown: write what is left until then.
    deadline: Option<Instant>,
}

impl TcpShared {
    /// Takes what fits in the backlog; the rest counts lost for this collector.
    fn push(&self, events: impl Iterator<Item = NatEvent>) {
        let mut ib = lock(&self.inbox);
        let mut lost = 0;
        for ev in events {
            if ib.events.len() + ib.busy < self.capacity {
                ib.events.push_back(ev);
            } else {
                lost += 1;
            }
        }
        self.dest.backlog.store((ib.events.len() + ib.busy) as u64, Relaxed);
        drop(ib);
        self.dest.lose(lost);
        self.wake.notify_one();
    }
}

/// The NAT event exporter. Dropping it hands what is queued to the sockets (TCP backlogs
/// get `Options::shutdown_grace`) and stops its threads.
pub struct Exporter {
    shared: Arc<Shared>,
    counters: Arc<LogCounters>,
    dispatcher: Option<JoinHandle<()>>,
    tcp_threads: Vec<JoinHandle<()>>,
    grace: Duration,
}

impl Exporter {
    /// Starts exporting to `cfg`'s collectors and receivers, with `hostname` in syslog
    /// messages. With none configured, the exporter exports nothing and runs no thread.
    pub fn start(cfg: &Log, hostname: &str) -> anyhow::Result<Exporter> {
        Self::start_with(cfg, hostname, Options::from_config(cfg))
    }

    /// `start` with explicit options.
    pub fn start_with(cfg: &Log, hostname: &str, opts: Options) -> anyhow::Result<Exporter> {
        anyhow::ensure!(
            (ipfix::min_mtu()..=usize::from(u16::MAX)).contains(&opts.mtu),
            "IPFIX MTU {} out of range: {}..=65535 bytes (the largest template or record must fit)",
            opts.mtu,
            ipfix::min_mtu()
        );
        anyhow::ensure!(
            opts.queue_events > 0 && opts.tcp_backlog_events > 0,
            "event queues must hold an event"
        );
        let mut dests = Vec::new();
        let mut udp = Vec::new();
        let mut tcp = Vec::new();
        for c in &cfg.ipfix {
            match *c {
                Collector::Udp(a) => {
                    let d = Dest::new(CollectorKind::IpfixUdp, a, &opts.counters);
                    udp.push(d.clone());
                    dests.push(d);
                }
                Collector::Tcp(a) => {
                    let d = Dest::new(CollectorKind::IpfixTcp, a, &opts.counters);
                    tcp.push(Arc::new(TcpShared {
                        dest: d.clone(),
                        inbox: Mutex::new(Inbox { events: VecDeque::new(), busy: 0, deadline: None }),
                        wake: Condvar::new(),
                        capacity: opts.tcp_backlog_events,
                    }));
                    dests.push(d);
                }
            }
        }
        let syslog: Vec<Arc<Dest>> =
            cfg.syslog.iter().map(|a| Dest::new(CollectorKind::Syslog, *a, &opts.counters)).collect();
        dests.extend(syslog.iter().cloned());
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { events: VecDeque::new(), taken: 0, shutdown: false }),
            wake: Condvar::new(),
            capacity: opts.queue_events,
            received: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            unencodable: AtomicU64::new(0),
            dests,
            tcp,
        });
        let mut ex = Exporter {
            shared: shared.clone(),
            counters: opts.counters.clone(),
            dispatcher: None,
            tcp_threads: Vec::new(),
            grace: opts.shutdown_grace,
        };
        if shared.dests.is_empty() {
            return Ok(ex);
        }

        // one socket per address family, unconnected and non-blocking
        let socket = |want: bool, any: SocketAddr| -> anyhow::Result<Option<UdpSocket>> {
            if !want {
                return Ok(None);
            }
            let s =
                UdpSocket::bind(any).with_context(|| format!("NAT log: binding a UDP socket to {any}"))?;
            s.set_nonblocking(true).context("NAT log: non-blocking UDP socket")?;
            Ok(Some(s))
        };
        let udp_addrs = || udp.iter().chain(&syslog).map(|d| d.addr);
        let sock4 = socket(udp_addrs().any(|a| a.is_ipv4()), (Ipv4Addr::UNSPECIFIED, 0).into())?;
        let sock6 = socket(udp_addrs().any(|a| a.is_ipv6()), (Ipv6Addr::UNSPECIFIED, 0).into())?;

        for t in &shared.tcp {
            let w = TcpWorker {
                t: t.clone(),
                domain: cfg.observation_domain,
                mtu: opts.mtu,
                connect_timeout: opts.connect_timeout,
                backoff_min: opts.backoff_min,
                backoff_max: opts.backoff_max,
                backoff: opts.backoff_min,
                next_attempt: Instant::now(),
                pending: VecDeque::new(),
                conn: None,
                quiet: false,
                counted: 0,
            };
            let h = std::thread::Builder::new()
                .name("natlog-tcp".into())
                .spawn(move || w.run())
                .context("NAT log: starting a TCP collector's thread")?;
            ex.tcp_threads.push(h);
        }
        let d = Dispatcher {
            s: shared.clone(),
            destinations: cfg.destinations,
            domain: cfg.observation_domain,
            mtu: opts.mtu,
            ipfix: !cfg.ipfix.is_empty(),
            udp,
            syslog,
            sock4,
            sock6,
            seq: 0,
            refresh: cfg.template_refresh,
            next_refresh: Instant::now(),
            fmt: Formatter::new(hostname, std::process::id()),
            spare: VecDeque::new(),
        };
        ex.dispatcher = Some(
            std::thread::Builder::new()
                .name("natlog-export".into())
                .spawn(move || d.run())
                .context("NAT log: starting the exporter's thread")?,
        );
        Ok(ex)
    }

    /// Queues one event for every destination. Never blocks: when the queue is full the
    /// event is counted in `events_lost`.
    pub fn send(&self, ev: NatEvent) {
        let s = &*self.shared;
        s.received.fetch_add(1, Relaxed);
        if s.dests.is_empty() {
            return;
        }
        let mut q = lock(&s.queue);
        if q.events.len() >= s.capacity {
            drop(q);
            s.lost.fetch_add(1, Relaxed);
            for d in &s.dests {
                d.lose(1);
            }
            return;
        }
        // the dispatcher sleeps only on an empty queue: a wake-up (a syscall) only then
        let was_empty = q.events.is_empty();
        q.events.push_back(ev);
        drop(q);
        s.queued.fetch_add(1, Relaxed);
        if was_empty {
            s.wake.notify_one();
        }
    }

    /// The counts the metrics endpoint serves, which this exporter adds to
    /// (`Options::counters`).
    pub fn log_counters(&self) -> Arc<LogCounters> {
        self.counters.clone()
    }

    /// The counters, now.
    pub fn stats(&self) -> ExportStats {
        let s = &*self.shared;
        let queue_len = {
            let q = lock(&s.queue);
            (q.events.len() + q.taken) as u64
        };
        let collectors: Vec<CollectorStats> = s.dests.iter().map(|d| d.stats()).collect();
        let sum = |k: CollectorKind| collectors.iter().filter(|c| c.kind == k).map(|c| c.records).sum();
        ExportStats {
            events_received: s.received.load(Relaxed),
            events_queued: s.queued.load(Relaxed),
            queue_len,
            events_lost: s.lost.load(Relaxed),
            events_unencodable: s.unencodable.load(Relaxed),
            ipfix_udp_records: sum(CollectorKind::IpfixUdp),
            ipfix_tcp_records: sum(CollectorKind::IpfixTcp),
            syslog_records: sum(CollectorKind::Syslog),
            bytes_sent: collectors.iter().map(|c| c.bytes).sum(),
            records_lost: collectors.iter().map(|c| c.records_lost).sum(),
            tcp_reconnects: collectors.iter().map(|c| c.reconnects).sum(),
            collectors,
        }
    }

    /// Waits until every event queued so far has been handed to the sockets (for TCP:
    /// written whole) or given up as lost; false if that took longer than `timeout` (a TCP
    /// collector that is down keeps its backlog).
    pub fn flush(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.idle() {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn idle(&self) -> bool {
        {
            let q = lock(&self.shared.queue);
            if !q.events.is_empty() || q.taken > 0 {
                return false;
            }
        }
        self.shared.tcp.iter().all(|t| {
            let ib = lock(&t.inbox);
            ib.events.is_empty() && ib.busy == 0
        })
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        lock(&self.shared.queue).shutdown = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.dispatcher.take() {
            let _ = h.join();
        }
        // the dispatcher has handed everything to the TCP backlogs: now they get their grace
        let deadline = Instant::now() + self.grace;
        for t in &self.shared.tcp {
            lock(&t.inbox).deadline = Some(deadline);
            t.wake.notify_all();
        }
        for h in self.tcp_threads.drain(..) {
            let _ = h.join();
        }
    }
}

/// The thread that takes events from the queue: syslog lines and IPFIX over UDP sent at
/// once (non-blocking sockets), events for TCP collectors handed to their threads.
struct Dispatcher {
    s: Arc<Shared>,
    destinations: bool,
    domain: u32,
    mtu: usize,
    ipfix: bool,
    udp: Vec<Arc<Dest>>,
    syslog: Vec<Arc<Dest>>,
    sock4: Option<UdpSocket>,
    sock6: Option<UdpSocket>,
    /// Data records sent so far over UDP for the observation domain: the UDP collectors
    /// all get the same messages, so one count is each one's transport session's.
    seq: u32,
    refresh: Duration,
    next_refresh: Instant,
    fmt: Formatter,
    /// The queue's previous buffer, swapped back in (no allocation per batch).
    spare: VecDeque<NatEvent>,
}

impl Dispatcher {
    fn run(mut self) {
        loop {
            let mut batch = std::mem::take(&mut self.spare);
            {
                let mut q = lock(&self.s.queue);
                while q.events.is_empty() && !q.shutdown {
                    // with UDP collectors, wake for the template refresh (RFC 7011 section 8.4)
                    let wait = if self.udp.is_empty() {
                        Duration::from_secs(3600)
                    } else {
                        self.next_refresh.saturating_duration_since(Instant::now())
                    };
                    if wait.is_zero() {
                        break;
                    }
                    q = self.s.wake.wait_timeout(q, wait).unwrap_or_else(PoisonError::into_inner).0;
                }
                if q.shutdown && q.events.is_empty() {
                    break;
                }
                std::mem::swap(&mut q.events, &mut batch);
                q.taken = batch.len();
            }
            if !self.udp.is_empty() && Instant::now() >= self.next_refresh {
                self.send_templates();
                self.next_refresh = Instant::now() + self.refresh;
            }
            if !batch.is_empty() {
                self.export(batch.make_contiguous());
            }
            batch.clear();
            self.spare = batch;
            lock(&self.s.queue).taken = 0;
        }
    }

    fn send_templates(&mut self) {
        for mut m in ipfix::template_messages(self.domain, self.mtu) {
            m.stamp(now_secs(), self.seq);
            for d in &self.udp {
                self.send_udp(d, m.bytes(), 0);
            }
        }
    }

    fn export(&mut self, events: &mut [NatEvent]) {
        if !self.destinations {
            // RFC 6888 REQ-12: the remote end is logged only when asked for
            for ev in events.iter_mut() {
                ev.remote = None;
            }
        }
        if !self.syslog.is_empty() {
            for ev in events.iter() {
                let line = self.fmt.format(ev);
                for d in &self.syslog {
                    self.send_udp(d, line.as_bytes(), 1);
                }
            }
        }
        if !self.ipfix {
            return;
        }
        let unencodable = events.iter().filter(|e| ipfix::template_for(e).is_none()).count();
        if unencodable > 0 {
            self.s.unencodable.fetch_add(unencodable as u64, Relaxed);
            for d in self.udp.iter().chain(self.s.tcp.iter().map(|t| &t.dest)) {
                d.lose(unencodable as u64);
            }
        }
        if !self.udp.is_empty() {
            for mut m in ipfix::data_messages(events, self.domain, self.mtu) {
                m.stamp(now_secs(), self.seq);
                self.seq = self.seq.wrapping_add(m.records());
                for d in &self.udp {
                    self.send_udp(d, m.bytes(), m.records().into());
                }
            }
        }
        for t in &self.s.tcp {
            t.push(events.iter().filter(|e| ipfix::template_for(e).is_some()).cloned());
        }
    }

    /// One datagram to one destination. A full socket buffer gets a few milliseconds; any
    /// failure costs this destination these records, nobody else anything.
    fn send_udp(&self, d: &Dest, bytes: &[u8], records: u64) {
        let sock = if d.addr.is_ipv4() { &self.sock4 } else { &self.sock6 };
        let Some(sock) = sock else { return };
        let mut r = sock.send_to(bytes, d.addr);
        if matches!(&r, Err(e) if e.kind() == ErrorKind::WouldBlock) {
            wait_fd(sock.as_raw_fd(), libc::POLLOUT, UDP_FULL_WAIT);
            r = sock.send_to(bytes, d.addr);
        }
        match r {
            Ok(n) if n == bytes.len() => d.sent(records, 0, n),
            Ok(_) | Err(_) => {
                d.errors.fetch_add(1, Relaxed);
                d.lose(records);
            }
        }
    }
}

/// Waits until `fd` is ready for `events` (or has an error or hang-up), at most `timeout`.
fn wait_fd(fd: RawFd, events: libc::c_short, timeout: Duration) {
    let mut p = libc::pollfd { fd, events, revents: 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is one valid pollfd that outlives the call; poll only writes `revents`.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// Bytes written to a TCP socket that its peer has not acknowledged yet (SIOCOUTQ: the send
/// queue, sent or not). Still answers after the connection broke (the kernel keeps its
/// sequence numbers), which is when it matters.
fn unacked_bytes(s: &TcpStream) -> Option<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (= TIOCOUTQ) on a socket descriptor stores one int through the
    // pointer, which is valid for the call; the descriptor is borrowed from `s`.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    (r == 0 && n >= 0).then_some(n as u64)
}

/// Whether the collector closed or broke the connection. A collector sends nothing over
/// IPFIX/TCP, so anything readable is an end of stream, an error, or bytes to throw away.
fn check_peer(s: &TcpStream) -> io::Result<()> {
    let mut buf = [0u8; 512];
    loop {
        match s.peek(&mut buf[..1]) {
            Ok(0) => {
                return Err(io::Error::new(ErrorKind::UnexpectedEof, "the collector closed the connection"))
            }
            Ok(_) => {
                let _ = (&*s).read(&mut buf)?;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A message on its way to a TCP collector, with the events it carries (to make it again
/// on the next connection should this one break before the collector has it).
struct Out {
    msg: Message,
    events: Vec<NatEvent>,
    off: usize,
    stamped: bool,
}

/// A message written whole, not yet acknowledged: it ends at byte `end` of the stream.
struct Sent {
    end: u64,
    events: Vec<NatEvent>,
}

/// One TCP connection: one transport session (RFC 7011 section 10.4), its own sequence
/// numbers, templates first.
struct Conn {
    stream: TcpStream,
    since: Instant,
    seq: u32,
    written: u64,
    out: VecDeque<Out>,
    inflight: VecDeque<Sent>,
}

impl Conn {
    /// Forgets the messages the collector has acknowledged.
    fn trim(&mut self) {
        let Some(unacked) = unacked_bytes(&self.stream) else { return };
        let acked = self.written.saturating_sub(unacked);
        while self.inflight.front().is_some_and(|s| s.end <= acked) {
            self.inflight.pop_front();
        }
    }
}

/// The thread of one TCP collector.
struct TcpWorker {
    t: Arc<TcpShared>,
    domain: u32,
    mtu: usize,
    connect_timeout: Duration,
    backoff_min: Duration,
    backoff_max: Duration,
    backoff: Duration,
    next_attempt: Instant,
    /// Events not yet in a message of the current connection.
    pending: VecDeque<NatEvent>,
    conn: Option<Conn>,
    /// A failure was logged: further ones until the next connection are quieter.
    quiet: bool,
    /// Events at the front of `pending` that were written whole before, on a connection
    /// that broke before the collector acknowledged them: counted as sent already.
    counted: usize,
}

impl TcpWorker {
    /// Events this thread holds that are not yet written whole.
    fn unwritten(&self) -> usize {
        self.pending.len() + self.conn.as_ref().map_or(0, |c| c.out.iter().map(|o| o.events.len()).sum())
    }

    /// Takes the inbox's events; returns the shutdown deadline, if set.
    fn intake(&mut self) -> Option<Instant> {
        let mut ib = lock(&self.t.inbox);
        self.pending.extend(ib.events.drain(..));
        ib.busy = self.unwritten();
        self.t.dest.backlog.store(ib.busy as u64, Relaxed);
        ib.deadline
    }

    /// Sleeps until events arrive, shutdown, or `timeout`.
    fn wait_inbox(&mut self, timeout: Duration) {
        let mut ib = lock(&self.t.inbox);
        ib.busy = self.unwritten();
        self.t.dest.backlog.store(ib.busy as u64, Relaxed);
        if ib.events.is_empty() && !timeout.is_zero() {
            let _ = self.t.wake.wait_timeout(ib, timeout);
        }
    }

    fn run(mut self) {
        loop {
            let deadline = self.intake();
            if let Some(dl) = deadline {
                if self.unwritten() == 0 || Instant::now() >= dl {
                    break;
                }
            }
            if self.conn.is_none() {
                if Instant::now() >= self.next_attempt {
                    self.connect(deadline);
                }
                if self.conn.is_none() {
                    let mut wait = self.next_attempt.saturating_duration_since(Instant::now());
                    if let Some(dl) = deadline {
                        // nothing more to do before the deadline if the next try is after it
                        if self.next_attempt >= dl {
                            break;
                        }
                        wait = wait.min(dl.saturating_duration_since(Instant::now()));
                    }
                    self.wait_inbox(wait.max(Duration::from_millis(1)));
                    continue;
                }
            }
            match self.pump() {
                Ok(false) => self.wait_inbox(TCP_TICK),
                Ok(true) => {
                    if let Some(c) = &self.conn {
                        wait_fd(c.stream.as_raw_fd(), libc::POLLOUT | libc::POLLIN, TCP_WRITE_WAIT);
                    }
                }
                Err(e) => self.fail(&e),
            }
        }
        // what is left was never written whole (but for those written once before): lost
        // for this collector
        let left = self.unwritten().saturating_sub(self.counted) as u64;
        if left > 0 {
            self.t.dest.lose(left);
            tracing::warn!(collector = %self.t.dest.addr, events = left, "NAT log: IPFIX/TCP backlog not sent at shutdown");
        }
        let mut ib = lock(&self.t.inbox);
        ib.busy = 0;
        self.t.dest.backlog.store(0, Relaxed);
        self.t.dest.connected.store(false, Relaxed);
    }

    fn connect(&mut self, deadline: Option<Instant>) {
        let d = &self.t.dest;
        let mut timeout = self.connect_timeout;
        if let Some(dl) = deadline {
            timeout = timeout.min(dl.saturating_duration_since(Instant::now()));
        }
        if timeout.is_zero() {
            return;
        }
        let r = TcpStream::connect_timeout(&d.addr, timeout).and_then(|s| {
            s.set_nonblocking(true)?;
            s.set_nodelay(true)?;
            Ok(s)
        });
        match r {
            Ok(stream) => {
                if d.connects.fetch_add(1, Relaxed) > 0 {
                    d.reconnects.fetch_add(1, Relaxed);
                }
                d.connected.store(true, Relaxed);
                tracing::info!(collector = %d.addr, "NAT log: connected to IPFIX/TCP collector");
                self.quiet = false;
                // templates first on every connection, sent once (RFC 7011 section 8)
                let out = ipfix::template_messages(self.domain, self.mtu)
                    .into_iter()
                    .map(|msg| Out { msg, events: Vec::new(), off: 0, stamped: false })
                    .collect();
                self.conn = Some(Conn {
                    stream,
                    since: Instant::now(),
                    seq: 0,
                    written: 0,
                    out,
                    inflight: VecDeque::new(),
                });
            }
            Err(e) => {
                d.errors.fetch_add(1, Relaxed);
                if !self.quiet {
                    tracing::warn!(collector = %d.addr, error = %e, "NAT log: cannot connect to IPFIX/TCP collector; retrying with backoff");
                    self.quiet = true;
                }
                self.retry_later();
            }
        }
    }

    fn retry_later(&mut self) {
        self.next_attempt = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(self.backoff_max);
    }

    /// Writes what the socket takes. Ok(true): the socket is full; Ok(false): nothing left
    /// to write.
    fn pump(&mut self) -> io::Result<bool> {
        let Some(c) = self.conn.as_mut() else { return Ok(false) };
        check_peer(&c.stream)?;
        c.trim();
        if c.since.elapsed() >= TCP_HEALTHY {
            self.backoff = self.backoff_min;
        }
        let d = &self.t.dest;
        loop {
            if c.out.is_empty() {
                if self.pending.is_empty() {
                    return Ok(false);
                }
                let (msg, used) = ipfix::data_message(self.pending.make_contiguous(), self.domain, self.mtu);
                let events: Vec<NatEvent> = self.pending.drain(..used).collect();
                if let Some(msg) = msg {
                    c.out.push_back(Out { msg, events, off: 0, stamped: false });
                }
                continue;
            }
            let Some(o) = c.out.front_mut() else { continue };
            if o.off == 0 {
                // before each message: a collector that has gone gets no more of them
                check_peer(&c.stream)?;
            }
            if !o.stamped {
                o.msg.stamp(now_secs(), c.seq);
                c.seq = c.seq.wrapping_add(o.msg.records());
                o.stamped = true;
            }
            match (&c.stream).write(&o.msg.bytes()[o.off..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    o.off += n;
                    c.written += n as u64;
                    if o.off == o.msg.bytes().len() {
                        if let Some(o) = c.out.pop_front() {
                            // the first records of a new connection may be ones sent before
                            let records = o.msg.records() as usize;
                            let again = records.min(self.counted);
                            self.counted -= again;
                            d.sent((records - again) as u64, again as u64, o.msg.bytes().len());
                            if !o.events.is_empty() {
                                c.inflight.push_back(Sent { end: c.written, events: o.events });
                            }
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The connection broke: every event the collector has not acknowledged goes back to
    /// the front of the backlog, in order, for the next connection.
    fn fail(&mut self, e: &io::Error) {
        let Some(mut c) = self.conn.take() else { return };
        c.trim();
        let d = &self.t.dest;
        d.errors.fetch_add(1, Relaxed);
        d.connected.store(false, Relaxed);
        let resent: usize = c.inflight.iter().map(|s| s.events.len()).sum();
        // they go first, before the rest of what was counted already and not yet written again
        self.counted += resent;
        tracing::warn!(collector = %d.addr, error = %e, unacknowledged = resent, "NAT log: IPFIX/TCP connection lost; reconnecting");
        let again: Vec<NatEvent> = c
            .inflight
            .into_iter()
            .flat_map(|s| s.events)
            .chain(c.out.into_iter().flat_map(|o| o.events))
            .collect();
        for ev in again.into_iter().rev() {
            self.pending.push_front(ev);
        }
        // `flush` sees them as not yet handed over again
        lock(&self.t.inbox).busy = self.unwritten();
        if c.since.elapsed() >= TCP_HEALTHY {
            self.backoff = self.backoff_min;
        }
        self.quiet = false;
        self.retry_later();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::natlog::NatEventKind;
    use std::net::{Ipv4Addr, TcpListener};

    fn ev(i: u32) -> NatEvent {
        let mut ev = NatEvent::new(NatEventKind::BlockAlloc, 1_767_225_600_000 + u64::from(i));
        ev.inside = Ipv4Addr::from(0x6440_0000 + i);
        ev.outside = Ipv4Addr::new(203, 0, 113, 5);
        ev.port_start = 1024;
        ev.port_end = 1279;
        ev
    }

    /// (set ids, sequence number, records by the set lengths) of each message; records are
    /// 21 bytes (the block template).
    fn headers(msgs: &[Vec<u8>]) -> Vec<(Vec<u16>, u32, u32)> {
        msgs.iter()
            .map(|b| {
                assert_eq!(u16::from_be_bytes([b[0], b[1]]), 10);
                assert_eq!(usize::from(u16::from_be_bytes([b[2], b[3]])), b.len());
                assert_eq!(u32::from_be_bytes([b[12], b[13], b[14], b[15]]), 9, "observation domain");
                let seq = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
                let (mut at, mut sets, mut records) = (ipfix::HEADER_LEN, Vec::new(), 0);
                while at < b.len() {
                    let id = u16::from_be_bytes([b[at], b[at + 1]]);
                    let len = usize::from(u16::from_be_bytes([b[at + 2], b[at + 3]]));
                    if id == 256 {
                        records += (len - 4) as u32 / 21;
                    }
                    sets.push(id);
                    at += len;
                }
                (sets, seq, records)
            })
            .collect()
    }

    /// Datagrams: the first within `first`, the others until none came for `quiet`.
    fn recv_all(s: &UdpSocket, first: Duration, quiet: Duration) -> Vec<Vec<u8>> {
        s.set_read_timeout(Some(first)).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        let end = Instant::now() + Duration::from_secs(10);
        while let Ok(n) = s.recv(&mut buf) {
            out.push(buf[..n].to_vec());
            s.set_read_timeout(Some(quiet)).unwrap();
            if Instant::now() > end {
                break;
            }
        }
        out
    }

    #[test]
    fn udp_sequence_numbers_count_records_and_templates_are_refreshed() {
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        let cfg = Log {
            ipfix: vec![Collector::Udp(c.local_addr().unwrap())],
            observation_domain: 9,
            template_refresh: Duration::from_secs(1),
            ..Log::default()
        };
        let opts = Options { mtu: 200, ..Options::from_config(&cfg) };
        let ex = Exporter::start_with(&cfg, "h", opts).unwrap();
        for i in 0..50 {
            ex.send(ev(i));
        }
        assert!(ex.flush(Duration::from_secs(5)));
        let first = headers(&recv_all(&c, Duration::from_secs(2), Duration::from_millis(200)));
        // templates (seq 0; at this MTU in two messages), then data messages of
        // (200 - 20) / 21 = 8 records at most
        let k = first.iter().take_while(|h| h.0.iter().all(|s| *s == ipfix::TEMPLATE_SET_ID)).count();
        assert_eq!(k, ipfix::template_messages(9, 200).len());
        assert!(k > 1 && first[..k].iter().all(|h| h.1 == 0));
        let mut before = 0;
        for (sets, seq, records) in &first[k..] {
            assert_eq!(sets, &[256]);
            assert_eq!(*seq, before);
            assert!(*records <= 8);
            before += records;
        }
        assert_eq!(before, 50);
        // a second later the templates again, with the count so far
        let again = headers(&recv_all(&c, Duration::from_millis(1500), Duration::from_millis(200)));
        assert!(!again.is_empty(), "templates re-sent over UDP");
        assert!(again.iter().all(|(sets, seq, _)| sets.iter().all(|s| *s == 2) && *seq == 50));
        ex.send(ev(50));
        assert!(ex.flush(Duration::from_secs(5)));
        let last = headers(&recv_all(&c, Duration::from_secs(2), Duration::from_millis(200)));
        assert_eq!(last.last().map(|h| (h.1, h.2)), Some((50, 1)));
    }

    #[test]
    fn tcp_sequence_numbers_start_over_on_each_connection_with_templates_first() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let cfg = Log {
            ipfix: vec![Collector::Tcp(l.local_addr().unwrap())],
            observation_domain: 9,
            ..Log::default()
        };
        let opts = Options { mtu: 200, backoff_min: Duration::from_millis(10), ..Options::from_config(&cfg) };
        let ex = Exporter::start_with(&cfg, "h", opts).unwrap();
        let read_conn = |n: u32| {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
            let mut b = Vec::new();
            let mut buf = [0u8; 4096];
            let end = Instant::now() + Duration::from_secs(10);
            let mut msgs = Vec::new();
            while Instant::now() < end {
                if let Ok(k) = s.read(&mut buf) {
                    b.extend_from_slice(&buf[..k]);
                }
                while b.len() >= 4 && b.len() >= usize::from(u16::from_be_bytes([b[2], b[3]])) {
                    let len = usize::from(u16::from_be_bytes([b[2], b[3]]));
                    msgs.push(b.drain(..len).collect::<Vec<u8>>());
                }
                if headers(&msgs).iter().map(|h| h.2).sum::<u32>() >= n {
                    break;
                }
            }
            (s, headers(&msgs))
        };
        for i in 0..30 {
            ex.send(ev(i));
        }
        let (s1, h1) = read_conn(30);
        drop(s1);
        for i in 30..60 {
            ex.send(ev(i));
        }
        let (_s2, h2) = read_conn(30);
        for h in [&h1, &h2] {
            let k = ipfix::template_messages(9, 200).len();
            assert!(h[..k].iter().all(|h| h.0.iter().all(|s| *s == 2) && h.1 == 0), "templates first: {h:?}");
            let mut before = 0;
            for (sets, seq, records) in &h[k..] {
                assert_eq!(sets, &[256]);
                assert_eq!(*seq, before);
                before += records;
            }
            assert_eq!(before, 30);
        }
        assert!(ex.flush(Duration::from_secs(5)));
        let st = ex.stats();
        assert_eq!((st.tcp_reconnects, st.ipfix_tcp_records, st.records_lost), (1, 60, 0));
    }

    #[test]
    fn a_full_queue_counts_events_lost() {
        // a collector that never reads, the dispatcher held up by nothing: fill the queue
        // faster than anything drains it by giving it room for 1
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        let cfg = Log { ipfix: vec![Collector::Udp(c.local_addr().unwrap())], ..Log::default() };
        let opts = Options { queue_events: 1, ..Options::from_config(&cfg) };
        let ex = Exporter::start_with(&cfg, "h", opts).unwrap();
        for i in 0..10_000 {
            ex.send(ev(i));
        }
        assert!(ex.flush(Duration::from_secs(5)));
        let st = ex.stats();
        assert_eq!(st.events_queued + st.events_lost, 10_000);
        assert!(st.events_lost > 0, "{st:?}");
        assert_eq!(st.ipfix_udp_records, st.events_queued);
        // lost for the one destination; the metrics endpoint's counts agree
        assert_eq!(st.records_lost, st.events_lost);
        assert_eq!((ex.log_counters().sent(), ex.log_counters().lost()), (st.events_queued, st.events_lost));
    }
}
