// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix capture` (issue 32) under load: one round of the capture benchmark, end to end
//! (generator -> natrix -> sink, as in [`super::e2e`]), with the capture CLI itself
//! running beside the daemon on the other CPU, writing its pcapng to /dev/null.
//!
//! Three parts, each measured side by side within the round:
//! - **throughput**: the fast path's rate on established outbound flows with no capture,
//!   and while capturing with a filter that matches nothing, with one that matches a
//!   single flow of the many, and with the empty filter (everything);
//! - **size**: capturing everything (whole packets, and `-s 128`) against no capture, at
//!   each frame size: packets through the gateway, records written and lost;
//! - **burst**: bursts of N packets sent as fast as the generator goes, each into a capture
//!   of its own: records written and lost per burst, where the 8 MiB ring stops
//!   absorbing a burst.
//!
//! Each capture is a `natrix capture` process started for the measurement (in natrix's
//! network namespace, pinned to a CPU, as an operator would run it); the benchmark waits
//! for its `listening on` line before sending, stops it with SIGINT after the traffic, and
//! reads its summary line (`N records written, M records lost`). A record is one form of a
//! packet (received or sent): a packet captured whole gives two.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use super::attach::sink_count;
use super::e2e::{establish, provision_natrix, sink_wait, PathArgs};
use super::flow::{FlowSpec, Mode, Proto, SPORT_BASE, SUB_BASE};
use super::gen::{GenReport, Generator};
use super::sys;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    Throughput,
    Size,
    Burst,
}

#[derive(Debug, Clone, clap::Args)]
pub struct CaptureArgs {
    #[command(flatten)]
    pub path: PathArgs,
    /// natrix's pin directory (daemon.pin_path): the capture's --pin.
    #[arg(long)]
    pub natrix_pin: PathBuf,
    /// The natrix binary whose `capture` is measured.
    #[arg(long)]
    pub natrix: PathBuf,
    /// natrix's network namespace (a name under /run/netns): the capture runs there.
    #[arg(long)]
    pub netns: Option<String>,
    /// The CPU the capture runs on (taskset), away from the generator's and natrix's.
    #[arg(long, default_value_t = 1)]
    pub capture_cpu: usize,
    #[arg(long, default_value_t = 0)]
    pub round: u32,
    /// Subscribers (source addresses from 100.64.16.0 on).
    #[arg(long, default_value_t = 1024)]
    pub subs: u32,
    /// Established UDP flows sent in turn (every part).
    #[arg(long, default_value_t = 4096)]
    pub flows: u64,
    /// Seconds of each throughput and size measurement.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    #[arg(long, value_enum, value_delimiter = ',', default_value = "throughput,size,burst")]
    pub parts: Vec<Part>,
    /// Frame sizes of the size part.
    #[arg(long, value_delimiter = ',', default_value = "64,128,256,512,1024,1500")]
    pub sizes: Vec<usize>,
    /// Burst lengths (packets) of the burst part.
    #[arg(long, value_delimiter = ',', default_value = "64,256,1024,4096,16384,65536,262144")]
    pub bursts: Vec<u64>,
    /// Frame sizes of the burst part (each captured whole; the largest also with -s 128).
    #[arg(long, value_delimiter = ',', default_value = "64,1500")]
    pub burst_sizes: Vec<usize>,
    /// Append the JSON records to this file (one per line).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The filter that matches nothing here: an address on no path of the benchmark (198.18.0.0/15
/// is set aside for benchmarks; the pool's 192.0.2.0/24 would match translated packets).
pub const NARROW: &str = "host 198.18.0.99";
/// The header-only snap length compared with whole packets.
pub const SNAP_HDR: u32 = 128;

/// What runs beside the traffic.
#[derive(Debug, Clone, PartialEq)]
enum Variant {
    /// No capture.
    None,
    /// A capture with a filter that matches no packet.
    Narrow,
    /// A capture whose filter matches one flow of the many.
    OneFlow(String),
    /// The empty filter: every packet, `snap` bytes of each form (0: whole).
    All { snap: u32 },
}

impl Variant {
    fn name(&self) -> &'static str {
        match self {
            Variant::None => "none",
            Variant::Narrow => "narrow",
            Variant::OneFlow(_) => "one_flow",
            Variant::All { .. } => "all",
        }
    }

    fn filter(&self) -> Option<&str> {
        match self {
            Variant::None => None,
            Variant::Narrow => Some(NARROW),
            Variant::OneFlow(f) => Some(f),
            Variant::All { .. } => Some(""),
        }
    }

    fn snap(&self) -> u32 {
        match self {
            Variant::All { snap } => *snap,
            _ => 0,
        }
    }
}

/// What a capture process reported.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    pub written: u64,
    pub lost: u64,
    /// Seconds from the start of the process to its `listening on` line.
    pub ready_secs: f64,
    /// CPU seconds the process used while the traffic ran (user + system, 10 ms ticks),
    /// over how many seconds of wall time.
    pub cpu_secs: f64,
    pub cpu_wall_secs: f64,
    /// Seconds from SIGINT to its exit (the ring's rest drained, the stages removed).
    pub stop_secs: f64,
}

/// A running `natrix capture`.
struct Capture {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
    ready_secs: f64,
    cpu0: f64,
    since: Instant,
    stopped: bool,
}

/// A capture left running by an error is killed (its stages go with it).
impl Drop for Capture {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// user + system CPU seconds of process `pid` (/proc/PID/stat).
fn cpu_secs(pid: u32) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // after the command name in parentheses: state is field 3, utime 14, stime 15
    let rest = s.rsplit_once(')').map(|(_, r)| r).context("/proc/PID/stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0);
    // SAFETY: plain getter.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    Ok(ticks as f64 / hz as f64)
}

/// The summary line's figures: `natrix capture: W records written, L records lost`.
pub fn parse_summary(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("natrix capture: ")?;
    let (w, rest) = rest.split_once(" records written, ")?;
    let l = rest.strip_suffix(" records lost")?;
    Some((w.trim().parse().ok()?, l.trim().parse().ok()?))
}

impl Capture {
    fn start(a: &CaptureArgs, snap: u32, filter: &str) -> Result<Capture> {
        let mut cmd = match &a.netns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}")).arg("taskset");
                c
            }
            None => Command::new("taskset"),
        };
        // nsenter (network namespace only) and taskset exec what follows: the child's pid
        // is natrix's, and SIGINT reaches it
        cmd.arg("-c").arg(a.capture_cpu.to_string()).arg(&a.natrix).arg("capture");
        cmd.arg("--pin").arg(&a.natrix_pin).arg("-w").arg("/dev/null");
        if snap != 0 {
            cmd.arg("-s").arg(snap.to_string());
        }
        if !filter.is_empty() {
            cmd.args(filter.split_whitespace());
        }
        let t = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} capture", a.natrix.display()))?;
        let err = child.stderr.take().context("the capture's stderr")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(std::result::Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut cap = Capture {
            child,
            lines: rx,
            log: Vec::new(),
            ready_secs: 0.0,
            cpu0: 0.0,
            since: t,
            stopped: false,
        };
        let deadline = t + Duration::from_secs(30);
        loop {
            match cap.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(l) => {
                    let ready = l.starts_with("natrix capture: listening on");
                    cap.log.push(l);
                    if ready {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(st) = cap.child.try_wait()? {
                        bail!("natrix capture exited ({st}) before listening: {}", cap.log.join(" | "));
                    }
                    if Instant::now() > deadline {
                        bail!("natrix capture not listening after 30 s: {}", cap.log.join(" | "));
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    cap.stopped = true;
                    let st = cap.child.wait()?;
                    bail!("natrix capture exited ({st}) before listening: {}", cap.log.join(" | "));
                }
            }
        }
        cap.ready_secs = t.elapsed().as_secs_f64();
        cap.cpu0 = cpu_secs(cap.child.id()).unwrap_or(0.0);
        cap.since = Instant::now();
        Ok(cap)
    }

    /// SIGINT, its exit, its summary.
    fn stop(mut self) -> Result<Summary> {
        let r = self.stop_inner();
        self.stopped = true;
        r
    }

    fn stop_inner(&mut self) -> Result<Summary> {
        let pid = self.child.id();
        let cpu = cpu_secs(pid).unwrap_or(0.0) - self.cpu0;
        let cpu_wall_secs = self.since.elapsed().as_secs_f64();
        let t = Instant::now();
        // SAFETY: a signal to our own child, which has not been waited for.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
        let st = loop {
            if let Some(st) = self.child.try_wait()? {
                break st;
            }
            if t.elapsed() > Duration::from_secs(30) {
                bail!("natrix capture did not stop within 30 s of SIGINT: {}", self.log.join(" | "));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let stop_secs = t.elapsed().as_secs_f64();
        // the reader thread ends with the pipe
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.log.push(l);
        }
        let Some((written, lost)) = self.log.iter().rev().find_map(|l| parse_summary(l)) else {
            bail!("natrix capture ({st}) printed no summary: {}", self.log.join(" | "));
        };
        if !st.success() {
            bail!("natrix capture exited {st}: {}", self.log.join(" | "));
        }
        Ok(Summary { written, lost, ready_secs: self.ready_secs, cpu_secs: cpu, cpu_wall_secs, stop_secs })
    }
}

/// Interrupts by CPU from /proc/interrupts: IRQ work (IWI: what a BPF ring buffer's
/// wakeup of its reader raises on the producing CPU), rescheduling (RES) and function call
/// (CAL) interrupts.
fn interrupts() -> BTreeMap<String, Vec<u64>> {
    let text = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    let cpus = text.lines().next().map(|l| l.split_whitespace().count()).unwrap_or(0);
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.trim_start().split_once(':')?;
            if !["IWI", "RES", "CAL"].contains(&name) {
                return None;
            }
            let v: Vec<u64> = rest.split_whitespace().take(cpus).filter_map(|x| x.parse().ok()).collect();
            Some((name.to_lowercase(), v))
        })
        .collect()
}

/// The CPU this thread runs on (scripts/bench.sh pins it).
fn this_cpu() -> Option<usize> {
    // SAFETY: plain getter.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// Per-CPU time from /proc/stat, in clock ticks: user, nice, system, idle, iowait, irq,
/// softirq, steal.
fn cpu_times() -> Vec<Vec<u64>> {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| l.split_whitespace().skip(1).take(8).filter_map(|x| x.parse().ok()).collect())
        .collect()
}

/// What each CPU did between two `cpu_times`, by kind, in seconds.
fn cpu_delta(a: &[Vec<u64>], b: &[Vec<u64>]) -> serde_json::Value {
    // SAFETY: plain getter.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"];
    b.iter()
        .enumerate()
        .map(|(i, v1)| {
            let v0 = a.get(i).cloned().unwrap_or_default();
            let m: serde_json::Map<String, serde_json::Value> = names
                .iter()
                .enumerate()
                .map(|(k, n)| {
                    let d = v1.get(k).unwrap_or(&0).saturating_sub(*v0.get(k).unwrap_or(&0));
                    ((*n).to_string(), json!(d as f64 / hz))
                })
                .collect();
            serde_json::Value::Object(m)
        })
        .collect()
}

fn irq_delta(a: &BTreeMap<String, Vec<u64>>, b: &BTreeMap<String, Vec<u64>>) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (k, v1) in b {
        let v0 = a.get(k).cloned().unwrap_or_default();
        let d: Vec<u64> =
            v1.iter().enumerate().map(|(i, x)| x.saturating_sub(*v0.get(i).unwrap_or(&0))).collect();
        m.insert(k.clone(), json!(d));
    }
    m.into()
}

/// The packets of one measurement: sent, reached the sink, over how long.
struct Window {
    gen: GenReport,
    received: u64,
    bytes: u64,
}

struct Bench<'a> {
    a: &'a CaptureArgs,
    g: Generator,
    sink: libbpf_rs::MapHandle,
}

impl Bench<'_> {
    /// Sends `spec` for `duration` (or `count` packets as fast as the generator goes) with
    /// `v` running beside it; one record.
    fn measure(
        &mut self,
        part: &str,
        v: &Variant,
        spec: &FlowSpec,
        count: Option<u64>,
        duration: Option<f64>,
    ) -> Result<serde_json::Value> {
        let mut rec = self.window(part, v, spec, count, duration)?;
        if part == "throughput" {
            let (ns, pps) = self.profile(v, spec).with_context(|| format!("profile, {}", v.name()))?;
            rec["prog_ns"] = json!(ns);
            rec["pps_with_stats"] = json!(pps);
        }
        println!("{}", line(&rec));
        if let Some(p) = &self.a.out {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("opening {}", p.display()))?;
            writeln!(f, "{rec}")?;
        }
        Ok(rec)
    }

    /// natrix's inside program, ns per packet (bpf_stats: from the entry to the end of
    /// the capture's chain, tail calls included), with `v` running: a window of its own
    /// after the measurement, with a capture of its own, since the stats' two clock reads
    /// per run slow the path. Returns it and the rate meanwhile.
    fn profile(&mut self, v: &Variant, spec: &FlowSpec) -> Result<(f64, f64)> {
        let prog = sys::prog_of_link_pin(&self.a.natrix_pin.join("link_nxbin"))?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&prog);
        let cap = match v.filter() {
            Some(f) => Some(Capture::start(self.a, v.snap(), f)?),
            None => None,
        };
        self.g.set(spec)?;
        let stats = sys::BpfStats::enable()?;
        std::thread::sleep(Duration::from_millis(20));
        let (t0, c0) = sys::prog_run_stats(fd)?;
        let (q0, _) = sink_count(&self.sink)?;
        let r =
            self.g.run(None, Some(Duration::from_secs_f64((self.a.duration / 2.0).clamp(0.2, 0.5))), None)?;
        std::thread::sleep(Duration::from_millis(20));
        let (t1, c1) = sys::prog_run_stats(fd)?;
        let (q1, _) = sink_count(&self.sink)?;
        drop(stats);
        if let Some(c) = cap {
            c.stop()?;
        }
        let runs = c1.saturating_sub(c0);
        let ns = if runs > 0 { t1.saturating_sub(t0) as f64 / runs as f64 } else { f64::NAN };
        Ok((ns, (q1 - q0) as f64 / r.secs.max(1e-9)))
    }

    /// One measurement's record.
    fn window(
        &mut self,
        part: &str,
        v: &Variant,
        spec: &FlowSpec,
        count: Option<u64>,
        duration: Option<f64>,
    ) -> Result<serde_json::Value> {
        let cap = match v.filter() {
            Some(f) => {
                Some(Capture::start(self.a, v.snap(), f).with_context(|| format!("{part} {}", v.name()))?)
            }
            None => None,
        };
        self.g.set(spec)?;
        std::thread::sleep(Duration::from_millis(50));
        let (p0, b0) = sink_count(&self.sink)?;
        let irq0 = interrupts();
        let cpu0 = cpu_times();
        let gen = self.g.run(count, duration.map(Duration::from_secs_f64), None)?;
        match count {
            // a burst: until the sink has it all (or 300 ms)
            Some(n) => {
                sink_wait(&self.sink, p0 + n, Duration::from_millis(300))?;
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
        let irq = irq_delta(&irq0, &interrupts());
        let cpus = cpu_delta(&cpu0, &cpu_times());
        let (p1, b1) = sink_count(&self.sink)?;
        let w = Window { gen, received: p1 - p0, bytes: b1 - b0 };
        let sum = match cap {
            Some(c) => Some(c.stop().with_context(|| format!("{part} {}", v.name()))?),
            None => None,
        };
        let secs = w.gen.secs.max(1e-9);
        let rec = json!({
            "kind": "capture",
            "part": part,
            "variant": v.name(),
            "filter": v.filter(),
            "snap": v.snap(),
            "round": self.a.round,
            "size": spec.frame_len,
            "flows": spec.flows,
            "subs": spec.subs,
            "burst": count,
            "secs": w.gen.secs,
            "sent": w.gen.sent,
            "received": w.received,
            "offered_pps": w.gen.pps,
            "pps": w.received as f64 / secs,
            "gbps": w.bytes as f64 * 8.0 / secs / 1e9,
            "loss": if w.gen.sent > 0 { 1.0 - w.received as f64 / w.gen.sent as f64 } else { 0.0 },
            "capture": sum,
            // what a paired capture of every packet natrix handled would write
            "expected_records": if v.name() == "all" { Some(2 * w.received) } else { None },
            "written_per_sec": sum.as_ref().map(|s| s.written as f64 / secs),
            // interrupts by CPU over the traffic (and the wait for the sink after it)
            "irq": irq,
            // each CPU's time by kind over the same span (steal: the hypervisor's)
            "cpus": cpus,
            // the CPU the generator runs on, and natrix and the sink with it (inline)
            "path_cpu": this_cpu(),
            "duration": duration,
        });
        Ok(rec)
    }
}

/// One line for the log: what was measured and what it gave.
fn line(r: &serde_json::Value) -> String {
    let mut s = format!(
        "  capture {:<10} {:<8} {:>4} B{} {}{:>8.3} Mpps",
        r["part"].as_str().unwrap_or(""),
        r["variant"].as_str().unwrap_or(""),
        r["size"],
        match r["snap"].as_u64() {
            Some(0) | None => "       ".to_string(),
            Some(s) => format!(" -s {s:<3}"),
        },
        match r["burst"].as_u64() {
            Some(b) => format!("burst {b:>7} "),
            None => String::new(),
        },
        r["pps"].as_f64().unwrap_or(0.0) / 1e6,
    );
    if let Some(c) = r["capture"].as_object() {
        let w = c["written"].as_u64().unwrap_or(0);
        let l = c["lost"].as_u64().unwrap_or(0);
        s += &format!(
            ", {w} records written ({:.3} M/s), {l} lost ({:.1}%), capture CPU {:.2} s",
            r["written_per_sec"].as_f64().unwrap_or(0.0) / 1e6,
            if w + l > 0 { 100.0 * l as f64 / (w + l) as f64 } else { 0.0 },
            c["cpu_secs"].as_f64().unwrap_or(0.0)
        );
    }
    let c0 = &r["cpus"][r["path_cpu"].as_u64().unwrap_or(0) as usize];
    let busy = ["system", "irq", "softirq"].iter().map(|k| c0[*k].as_f64().unwrap_or(0.0)).sum::<f64>();
    s += &format!(
        "; path CPU {:.0} ns/packet (others took {:.2} s of it)",
        busy * 1e9 / r["received"].as_f64().unwrap_or(1.0).max(1.0),
        c0["user"].as_f64().unwrap_or(0.0) + c0["nice"].as_f64().unwrap_or(0.0)
    );
    if let Some(ns) = r["prog_ns"].as_f64() {
        s += &format!("; natrix's program {ns:.0} ns/packet");
    }
    let cpu0 = |k: &str| r["irq"][k][0].as_u64().unwrap_or(0);
    s += &format!("; CPU 0: {} IWI, {} RES, {} CAL", cpu0("iwi"), cpu0("res"), cpu0("cal"));
    s
}

/// The filter that matches flow `k` of `spec` (its received form: the subscriber's address
/// and inside port; the record then holds both forms).
pub fn one_flow_filter(spec: &FlowSpec, k: u64) -> String {
    let subs = u64::from(spec.subs.max(1));
    let addr = std::net::Ipv4Addr::from(u32::from(SUB_BASE) + (k % subs) as u32);
    let port = u64::from(SPORT_BASE) + (k / subs) % u64::from(super::flow::NPORTS);
    format!("udp and src host {addr} and src port {port}")
}

pub fn run(a: &CaptureArgs) -> Result<()> {
    anyhow::ensure!(a.flows >= 2, "at least two flows: one is singled out by a filter");
    let base = FlowSpec {
        proto: Proto::Udp,
        frame_len: 64,
        subs: a.subs,
        flows: a.flows,
        mode: Mode::Cycle,
        ..Default::default()
    };
    let (base, sink, mut g) = a.path.open(base)?;
    provision_natrix(&mut g, &base, &a.natrix_pin, &sink).context("provisioning subscribers")?;
    let fill = establish(&mut g, &base, &sink)?;
    anyhow::ensure!(fill.complete, "natrix did not take every flow: {fill:?}");
    let spec = |size: usize| FlowSpec { frame_len: size, ..base.clone() };
    let one = Variant::OneFlow(one_flow_filter(&base, a.flows - 1));
    let mut b = Bench { a, g, sink };
    // the order of the variants rotates from round to round
    let rot = |n: usize| a.round as usize % n.max(1);

    if a.parts.contains(&Part::Throughput) {
        let mut vs = [Variant::None, Variant::Narrow, one.clone(), Variant::All { snap: 0 }];
        let n = vs.len();
        vs.rotate_left(rot(n));
        for v in &vs {
            b.measure("throughput", v, &spec(64), None, Some(a.duration))?;
        }
    }
    if a.parts.contains(&Part::Size) {
        for &size in &a.sizes {
            let mut vs = [Variant::None, Variant::All { snap: 0 }, Variant::All { snap: SNAP_HDR }];
            let n = vs.len();
            vs.rotate_left(rot(n));
            for v in &vs {
                b.measure("size", v, &spec(size), None, Some(a.duration))?;
            }
        }
    }
    if a.parts.contains(&Part::Burst) {
        let largest = a.burst_sizes.iter().copied().max().unwrap_or(64);
        let mut series: Vec<(usize, u32)> = a.burst_sizes.iter().map(|&s| (s, 0)).collect();
        if largest > SNAP_HDR as usize {
            series.push((largest, SNAP_HDR));
        }
        for &n in &a.bursts {
            for &(size, snap) in &series {
                b.measure("burst", &Variant::All { snap }, &spec(size), Some(n), None)?;
            }
        }
    }
    Ok(())
}
