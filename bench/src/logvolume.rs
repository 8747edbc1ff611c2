// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! How much the NAT event log sends for a realistic load, measured: a simulated minute of
//! `subs` subscribers each opening `conns` new connections (mixed UDP and TCP, a new
//! inside port each, various destinations) goes through natrix's own XDP program
//! (BPF_PROG_TEST_RUN, the harness) into an instance with logging on; the ring
//! (nx_log_rb) is read as the daemon reads it (natlog::pump, natlog::source::from_record),
//! and the events are encoded as the exporter would send them: IPFIX messages
//! (natlog::ipfix::data_messages, at the exporter's MTU) and RFC 5424 syslog lines
//! (natlog::syslog::Formatter), each datagram counted with its IP and UDP headers.
//!
//! Once with block events only, once with `log.sessions`, once with `log.destinations`
//! as well. Then, with `--idle`, every subscriber goes idle: short timeouts (1 s) let the
//! daemon's sweep (natrix::expiry, the reaper) delete the sessions and return the blocks,
//! and what that logs (session deletions from the data plane's reaper, block releases from
//! the sweep, through the pump) is measured the same way: what each connection and each
//! subscriber's block add when they end.
//!
//! The load: connection j of every subscriber is batch j (one harness run of `subs`
//! packets); every subscriber's first connection takes its block, so the minute's block
//! allocations all come first. A batch's protocol, remote address and port come from a
//! table of typical services (TCP 443, QUIC, DNS, ...), its inside port from the
//! ephemeral range; the remote addresses are on the outside link (198.51.100.0/24), which
//! only the sink's has a neighbour for: natrix translates the others and passes them to
//! the kernel (pass_no_neigh), a session made all the same.

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::json;
use tracing::info;

use super::cost::drops;
use super::flow::{FlowSpec, Mode, Proto, TcpFlags};
use super::harness::Harness;
use super::logcost::{kind_name, Kinds};
use super::sys;
use natrix::config::Config;
use natrix::dataplane::{self, Dataplane, Persistence};
use natrix::expiry::{Reaper, Sweeper};
use natrix::natlog::pump::{Pump, Sink};
use natrix::natlog::source::tai_to_utc_ns;
use natrix::natlog::syslog::Formatter;
use natrix::natlog::{ipfix, NatEvent};
use natrix::tables::stat_index;

#[derive(Debug, Clone, clap::Args)]
pub struct LogVolumeArgs {
    /// Subscribers.
    #[arg(long, default_value_t = 10_000)]
    pub subs: u32,
    /// New connections each subscriber opens in the simulated minute.
    #[arg(long, default_value_t = 20)]
    pub conns: u32,
    /// Which `[log]` settings: blocks (a collector), sessions (log.sessions), destinations
    /// (log.sessions and log.destinations).
    #[arg(long, value_delimiter = ',', default_value = "blocks,sessions,destinations")]
    pub variants: Vec<String>,
    /// Then let every subscriber go idle and measure what the ends log.
    #[arg(long)]
    pub idle: bool,
    /// IPFIX message size limit (the exporter's default).
    #[arg(long, default_value_t = ipfix::DEFAULT_MTU)]
    pub mtu: usize,
    /// The host name in syslog lines (their length depends on it).
    #[arg(long, default_value = "cgnat-gw1.example.net")]
    pub hostname: String,
    #[arg(long, default_value = "nxbin")]
    pub inside: String,
    #[arg(long, default_value = "nxbout")]
    pub outside: String,
    /// Append the JSON record to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// IPv4 and UDP headers: what each datagram adds on the wire (no options).
pub const IP_UDP: usize = 28;
/// The simulated span of the load, seconds.
pub const MINUTE: f64 = 60.0;
/// A syslog line's process id (its length is in the line): five digits.
const PROCID: u32 = 24680;
const COLLECTOR: &str = "127.0.0.1:4739";

/// Typical connections: protocol, remote port. TCP 6 in 10, UDP 4 in 10.
const SERVICES: [(Proto, u16); 10] = [
    (Proto::Tcp, 443),
    (Proto::Udp, 443),
    (Proto::Tcp, 443),
    (Proto::Udp, 53),
    (Proto::Tcp, 80),
    (Proto::Tcp, 443),
    (Proto::Udp, 53),
    (Proto::Tcp, 5228),
    (Proto::Udp, 123),
    (Proto::Tcp, 993),
];

/// Collects what the pump hands on, in order.
#[derive(Default)]
struct Collect(RefCell<Vec<NatEvent>>);

impl Sink for Collect {
    fn send(&self, ev: NatEvent) {
        self.0.borrow_mut().push(ev);
    }
}

/// What a list of events is on the wire.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Wire {
    pub events: u64,
    pub by_kind: Kinds,
    /// IPFIX data records, messages, bytes (messages + IP/UDP headers)
    pub ipfix_records: u64,
    pub ipfix_messages: u64,
    pub ipfix_bytes: u64,
    /// syslog datagrams (one per event), bytes (lines + IP/UDP headers)
    pub syslog_messages: u64,
    pub syslog_bytes: u64,
}

/// Encodes `events` as the exporter sends them under load (full messages).
pub fn wire(events: &[NatEvent], mtu: usize, hostname: &str) -> Wire {
    let mut w = Wire { events: events.len() as u64, ..Default::default() };
    for e in events {
        *w.by_kind.entry(kind_name(e.kind)).or_default() += 1;
    }
    for m in ipfix::data_messages(events, 1, mtu) {
        w.ipfix_records += u64::from(m.records());
        w.ipfix_messages += 1;
        w.ipfix_bytes += (m.bytes().len() + IP_UDP) as u64;
    }
    let f = Formatter::new(hostname, PROCID);
    for e in events {
        w.syslog_messages += 1;
        w.syslog_bytes += (f.format(e).len() + IP_UDP) as u64;
    }
    w
}

/// The `[log]` section of a variant.
fn log_toml(variant: &str) -> Result<String> {
    let extra = match variant {
        "blocks" => "",
        "sessions" => "sessions = true\n",
        "destinations" => "sessions = true\ndestinations = true\n",
        v => anyhow::bail!("unknown variant {v:?} (blocks, sessions, destinations)"),
    };
    Ok(format!("[log]\nipfix = [\"{COLLECTOR}\"]\nbuffer_events = {}\n{extra}", 1 << 20))
}

fn config(a: &LogVolumeArgs, variant: &str) -> Result<Config> {
    // natrix's default blocks (256 ports, 252 an address), a third to spare
    let addrs = (u64::from(a.subs) * 4 / 3).div_ceil(252).clamp(1, 512);
    let n = u64::from(a.subs) * u64::from(a.conns) + 1024;
    let rest = format!(
        "# below the RFC minima (a warning): the idle phase lets everything expire within seconds
[timeouts]
udp = \"1s\"
tcp_established = \"1s\"
tcp_transitory = \"1s\"
port_hold_down = \"1s\"
[daemon]
pin_path = \"/sys/fs/bpf/natrix-bench-logvolume\"
{}",
        log_toml(variant)?
    );
    let subs = u64::from(a.subs + 1024).max(65536);
    super::cost::gateway_config(&a.inside, &a.outside, addrs, subs, n, &rest)
}

fn one(a: &LogVolumeArgs, variant: &str) -> Result<serde_json::Value> {
    let cfg = config(a, variant)?;
    let in_if = sys::ifindex(&a.inside)?;
    let dp = Dataplane::load(&cfg, Persistence::Private)?;
    let ifaces = dataplane::resolve_interfaces(&cfg)?;
    dp.configure(&cfg, &ifaces)?;
    let t = &dp.tables;
    // the daemon's reader: ring records through the pump, as natrix run does
    let pump = Rc::new(RefCell::new(Pump::new(t, &cfg.log, Some(Collect::default()))?));
    let rb = {
        let p = Rc::clone(&pump);
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&dp.skel.maps.nx_log_rb, move |rec: &[u8]| {
            p.borrow_mut().record(rec, tai_to_utc_ns());
            0
        })?;
        b.build()?
    };
    let taken = |pump: &Rc<RefCell<Pump<Collect>>>| -> Vec<NatEvent> {
        std::mem::take(&mut *pump.borrow().sink().expect("a sink").0.borrow_mut())
    };

    // ---- the minute: connection j of every subscriber is batch j
    let mut h = Harness::new(1)?;
    h.target(dp.skel.progs.nx_xdp_inside.as_fd().as_raw_fd())?;
    let dmac = sys::mac_of(&a.inside)?;
    let t0 = Instant::now();
    for j in 0..a.conns {
        let (proto, port) = SERVICES[j as usize % SERVICES.len()];
        let spec = FlowSpec {
            proto,
            tcp_flags: TcpFlags::Syn,
            subs: a.subs,
            mode: Mode::New,
            flow_base: u64::from(j) * u64::from(a.subs),
            remote: Ipv4Addr::new(198, 51, 100, (3 + (j * 53) % 250) as u8),
            remote_port: port,
            // the ephemeral range (32768-60999): the harness adds j
            sport_base: (32768 + (j * 7919) % 28000) as u16,
            dmac,
            ..Default::default()
        };
        h.run(&spec, in_if, a.subs)?;
        rb.consume()?;
    }
    let active_secs = t0.elapsed().as_secs_f64();
    let active = taken(&pump);
    let st = t.stats()?;
    let stat = |n: &str| st[stat_index(n).expect("counter")];
    let conns = u64::from(a.subs) * u64::from(a.conns);
    ensure!(
        stat("sessions_created") == conns && drops(&st).is_empty(),
        "{variant}: {} sessions made of {conns}, drops {:?}",
        stat("sessions_created"),
        drops(&st)
    );
    let lost_active = stat("log_lost");

    // ---- everybody idle: the sweep deletes the sessions and returns the blocks
    let mut idle = Vec::new();
    let mut idle_secs = 0.0;
    let mut sweeps = 0;
    if a.idle {
        let blocks = active.iter().filter(|e| e.kind == natrix::natlog::NatEventKind::BlockAlloc).count();
        let mut sweeper = Sweeper::new(t)?;
        let reaper: Reaper<'_> = dp.reaper()?;
        let t1 = Instant::now();
        let mut released = 0;
        while released < blocks && t1.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(500));
            let r = sweeper.sweep(t, &reaper)?;
            sweeps += 1;
            released += r.blocks_released as usize;
            // the ring first (a block's allocation before its release), as the daemon does
            rb.consume()?;
            pump.borrow_mut().swept(&t.config()?, &r);
        }
        idle_secs = t1.elapsed().as_secs_f64();
        idle = taken(&pump);
        info!(variant, blocks, released, sweeps, "log volume: idle phase");
    }
    let st = t.stats()?;
    let lost = st[stat_index("log_lost").expect("counter")];
    let templates: usize = ipfix::template_messages(1, a.mtu).iter().map(|m| m.bytes().len() + IP_UDP).sum();
    let rec = json!({
        "variant": variant,
        "sessions": cfg.log.sessions,
        "destinations": cfg.log.destinations,
        "connections": conns,
        "active": wire(&active, a.mtu, &a.hostname),
        "active_wall_secs": active_secs,
        "idle": a.idle.then(|| wire(&idle, a.mtu, &a.hostname)),
        "idle_wall_secs": idle_secs,
        "idle_sweeps": sweeps,
        "template_bytes": templates,
        "log_events": st[stat_index("log_events").expect("counter")],
        "log_lost_active": lost_active,
        "log_lost": lost,
        "pump": pump.borrow().stats(),
        "block_size": cfg.nat.block_size,
    });
    drop(rb);
    Ok(rec)
}

pub fn run(a: &LogVolumeArgs) -> Result<()> {
    ensure!(a.subs >= 1 && a.conns >= 1, "at least one subscriber and one connection");
    ensure!(a.subs <= super::flow::MAX_SUBS, "at most {} subscribers", super::flow::MAX_SUBS);
    let mut out = Vec::new();
    for v in &a.variants {
        out.push(one(a, v).with_context(|| format!("log volume, {v}"))?);
    }
    let rec = json!({
        "kind": "log_volume",
        "subs": a.subs,
        "conns": a.conns,
        "minute_secs": MINUTE,
        "mtu": a.mtu,
        "ip_udp_bytes": IP_UDP,
        "hostname": a.hostname,
        "variants": out,
    });
    if let Some(p) = &a.out {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(p)?;
        writeln!(f, "{rec}")?;
    }
    println!("{rec}");
    Ok(())
}
