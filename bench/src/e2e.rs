// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! One end-to-end measurement: generator -> gateway under test -> counting sink.
//!
//! Runs in the generator's network namespace (the sink's counters are read through their
//! pin, bpffs is not per namespace). What the gateway is (natrix, nftables, the kernel,
//! the minimal XDP forwarder) is set up by scripts/bench.sh; this only sends, counts and
//! reports. The rate is what the sink received, over the time the generator sent.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::json;

use super::attach::{open_sink, sink_count};
use super::flow::{FlowSpec, Mode, TcpFlags};
use super::gen::Generator;
use super::sys;
use libbpf_rs::MapHandle;
use natrix::tables::{stat_index, Tables};

/// The path a measurement sends through: the generator's interface, the gateway's MAC, the
/// sink behind the gateway (`e2e` and `capture` alike).
#[derive(Debug, Clone, clap::Args)]
pub struct PathArgs {
    /// Generator's interface (in the current network namespace).
    #[arg(long)]
    pub dev: String,
    /// An interface that carries no traffic (a veth that stays down) to keep the generator attached
    /// to in generic mode, so that test runs do not wait for RCU grace periods (see
    /// Generator::park). scripts/bench.sh makes one, nxbpark.
    #[arg(long)]
    pub park_dev: Option<String>,
    /// MAC address of the gateway's interface the frames are addressed to.
    #[arg(long)]
    pub dst_mac: String,
    /// Pin directory of the sink (natrix-bench attach sink).
    #[arg(long)]
    pub sink_pin: PathBuf,
}

impl PathArgs {
    /// spec addressed along this path (its MACs filled in) and validated, the sink's
    /// counters, and a generator on the path's interface.
    pub fn open(&self, spec: FlowSpec) -> Result<(FlowSpec, MapHandle, Generator)> {
        let spec = FlowSpec { dmac: sys::parse_mac(&self.dst_mac)?, smac: sys::mac_of(&self.dev)?, ..spec };
        spec.validate()?;
        let sink = open_sink(&self.sink_pin)?;
        let g = Generator::new(&self.dev, &spec, self.park_dev.as_deref())?;
        Ok((spec, sink, g))
    }
}

/// Everything that describes one measurement.
#[derive(Debug, Clone, clap::Args)]
pub struct E2eArgs {
    #[command(flatten)]
    pub path: PathArgs,
    /// What is being measured, for the report (natrix, nft, kernel, xdpfwd).
    #[arg(long)]
    pub gateway: String,
    /// Which part of the benchmark this belongs to (size, flows, newflow, scale).
    #[arg(long, default_value = "adhoc")]
    pub case: String,
    #[arg(long, default_value_t = 0)]
    pub round: u32,
    /// Which pass within the round, for a case measured more than once per round (the
    /// report pairs gateways by round and pass).
    #[arg(long, default_value_t = 0)]
    pub pass: u32,
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    #[arg(long, value_enum, default_value = "udp")]
    pub proto: super::flow::Proto,
    #[arg(long, value_enum, default_value = "syn")]
    pub tcp_flags: TcpFlags,
    #[arg(long, default_value_t = 1)]
    pub flows: u64,
    #[arg(long, default_value_t = 1)]
    pub subs: u32,
    #[arg(long, value_enum, default_value = "cycle")]
    pub mode: Mode,
    /// First flow number (new-flow mode: flows from here on were never sent before).
    #[arg(long, default_value_t = 0)]
    pub flow_base: u64,
    /// Seconds of measurement.
    #[arg(long, default_value_t = 2.0)]
    pub duration: f64,
    /// Before measuring, send every flow until one pass goes through without loss, so that
    /// the gateway holds state for all of them (cycle and random modes).
    #[arg(long)]
    pub establish: bool,
    /// natrix's pin directory: steer new subscribers across the pool while provisioning
    /// them (see docs/design/performance-notebook.md, "Subscribers arriving together").
    #[arg(long)]
    pub natrix_pin: Option<PathBuf>,
    /// Pinned XDP links of the gateway whose programs get a run-time profile (bpf_stats)
    /// in a separate window after the measurement.
    #[arg(long)]
    pub profile: Vec<PathBuf>,
    /// Append the JSON record to this file (one record per line).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Default, Serialize)]
pub struct Fill {
    pub passes: u32,
    pub secs: f64,
    pub complete: bool,
}

pub fn sink_wait(sink: &libbpf_rs::MapHandle, want: u64, timeout: Duration) -> Result<u64> {
    let t = Instant::now();
    loop {
        let (p, _) = sink_count(sink)?;
        if p >= want || t.elapsed() > timeout {
            return Ok(p);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Gives every subscriber its first mapping, one pool address at a time, pointing
/// natrix's `addr_hint` at that address first. natrix's daemon moves the hint once per
/// sweep; subscribers arriving all at once would otherwise crowd onto the 4 addresses
/// after the hint (paired pooling keeps them there).
pub fn provision_natrix(
    g: &mut Generator,
    base: &FlowSpec,
    pin: &std::path::Path,
    sink: &libbpf_rs::MapHandle,
) -> Result<()> {
    let t = Tables::open_pinned(pin)?;
    let created = t.stats()?[stat_index("subscribers_created").expect("counter")];
    if created >= base.subs as u64 {
        return Ok(());
    }
    let mut cfg = t.config()?;
    let n = cfg.n_addrs.max(1) as u64;
    let per = (base.subs as u64).div_ceil(n);
    let mut spec = base.clone();
    spec.mode = Mode::New;
    spec.tcp_flags = TcpFlags::Syn;
    for a in 0..n {
        let first = a * per;
        if first >= base.subs as u64 {
            break;
        }
        let cnt = per.min(base.subs as u64 - first);
        cfg.addr_hint = a as u32;
        t.write_config(&cfg)?;
        spec.flow_base = first;
        g.set(&spec)?;
        let (before, _) = sink_count(sink)?;
        g.run(Some(cnt), None, None)?;
        sink_wait(sink, before + cnt, Duration::from_millis(200))?;
    }
    Ok(())
}

/// Sends every flow once per pass until a pass loses (next to) nothing; each pass after a
/// lossy one is paced at 80% of the rate that got through.
pub fn establish(g: &mut Generator, spec: &FlowSpec, sink: &libbpf_rs::MapHandle) -> Result<Fill> {
    let t = Instant::now();
    let mut fill = Fill::default();
    let mut s = spec.clone();
    s.mode = Mode::Cycle;
    s.flow_base = 0;
    s.tcp_flags = TcpFlags::Syn;
    let mut rate: Option<f64> = None;
    while fill.passes < 6 {
        g.set(&s)?;
        let (before, _) = sink_count(sink)?;
        let r = g.run(Some(spec.flows), None, rate)?;
        let got = sink_wait(sink, before + spec.flows, Duration::from_millis(300))? - before;
        fill.passes += 1;
        // a handful of flows may be refused for reasons of the gateway's own (a NAT
        // clash, say): another full pass of millions is not worth them
        if got >= spec.flows - spec.flows / 10_000 {
            fill.complete = true;
            break;
        }
        let through = got as f64 / r.secs.max(1e-6);
        rate = Some((through * 0.8).max(1000.0));
    }
    fill.secs = t.elapsed().as_secs_f64();
    Ok(fill)
}

pub fn run(a: &E2eArgs) -> Result<serde_json::Value> {
    let spec = FlowSpec {
        proto: a.proto,
        tcp_flags: a.tcp_flags,
        frame_len: a.size,
        subs: a.subs,
        flows: a.flows,
        flow_base: a.flow_base,
        mode: a.mode,
        dir: super::flow::Dir::Out,
        ..Default::default()
    };
    let (spec, sink, mut g) = a.path.open(spec)?;
    if let Some(pin) = &a.natrix_pin {
        provision_natrix(&mut g, &spec, pin, &sink).context("provisioning subscribers")?;
    }
    let fill = if a.establish && a.mode != Mode::New { Some(establish(&mut g, &spec, &sink)?) } else { None };

    // the measurement
    g.set(&spec)?;
    std::thread::sleep(Duration::from_millis(50));
    let (p0, b0) = sink_count(&sink)?;
    let r = g.run(None, Some(Duration::from_secs_f64(a.duration)), None)?;
    std::thread::sleep(Duration::from_millis(50));
    let (p1, b1) = sink_count(&sink)?;
    let (rx, bytes) = (p1 - p0, b1 - b0);
    let pps = rx as f64 / r.secs;

    // the profile, in its own window: bpf_stats cost two clock reads per program run
    let mut profile = serde_json::Map::new();
    if !a.profile.is_empty() {
        let progs: Vec<_> = a
            .profile
            .iter()
            .map(|p| sys::prog_of_link_pin(p).map(|fd| (p.clone(), fd)))
            .collect::<Result<_>>()?;
        let stats = sys::BpfStats::enable()?;
        let before: Vec<_> = progs
            .iter()
            .map(|(_, fd)| sys::prog_run_stats(std::os::fd::AsRawFd::as_raw_fd(fd)))
            .collect::<Result<_>>()?;
        let mut s = spec.clone();
        if s.mode == Mode::New {
            s.flow_base += r.sent + 1;
        }
        g.set(&s)?;
        let (q0, _) = sink_count(&sink)?;
        let pr = g.run(None, Some(Duration::from_secs_f64((a.duration / 2.0).clamp(0.5, 1.0))), None)?;
        std::thread::sleep(Duration::from_millis(50));
        let (q1, _) = sink_count(&sink)?;
        for ((path, fd), (t0, c0)) in progs.iter().zip(before) {
            let (t1, c1) = sys::prog_run_stats(std::os::fd::AsRawFd::as_raw_fd(fd))?;
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let runs = c1 - c0;
            profile.insert(
                name,
                json!({"runs": runs, "ns_per_run": if runs > 0 { (t1 - t0) as f64 / runs as f64 } else { 0.0 }}),
            );
        }
        profile.insert("pps_with_stats".into(), json!((q1 - q0) as f64 / pr.secs));
        drop(stats);
    }

    let rec = json!({
        "kind": "e2e",
        // the generator was parked (Generator::park): no RCU wait per test run
        "parked": a.path.park_dev.is_some(),
        "gateway": a.gateway,
        "case": a.case,
        "round": a.round,
        "pass": a.pass,
        "proto": a.proto,
        "size": a.size,
        "flows": a.flows,
        "subs": a.subs,
        "mode": a.mode,
        "secs": r.secs,
        "sent": r.sent,
        "received": rx,
        "offered_pps": r.pps,
        "pps": pps,
        "gbps": bytes as f64 * 8.0 / r.secs / 1e9,
        "loss": if r.sent > 0 { 1.0 - rx as f64 / r.sent as f64 } else { 0.0 },
        "fill": fill,
        "profile": profile,
    });
    if let Some(out) = &a.out {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .with_context(|| format!("opening {}", out.display()))?;
        writeln!(f, "{rec}")?;
    }
    Ok(rec)
}
