// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Per-packet cost of natrix's XDP programs in BPF_PROG_TEST_RUN, with 1k, 1M and 10M live
//! sessions in the tables, the minimal forwarder as the floor; memory per session; and how
//! long one sweep of the daemon takes at that size.
//!
//! Runs in the gateway namespace of scripts/bench.sh (FIB lookups need its routes and
//! permanent neighbours). natrix is loaded with private maps sized for exactly N sessions
//! and filled by its own XDP program: the harness (nxb_harness) feeds it N distinct flows in
//! new-flow mode, so subscribers, blocks, ports, mappings and sessions are all as real
//! traffic leaves them. Half the flows are UDP, half TCP (SYN), so both protocols' outside
//! port arrays carry load; every flow has its own mapping (the common case: clients open
//! each connection from a new ephemeral port).
//!
//! Timing: every number is the median of `reps` test runs of `repeat` packets each, minus
//! the harness' own cost in the same mode (nxb_nop behind it; where the harness' work does
//! not depend on the instance, the median over all instances, see pooled_harness). "hot"
//! sends one flow over and over (everything in L1: BPF_PROG_TEST_RUN's repeat mode, as the
//! issue measures it); "random" picks a uniformly random live flow per packet, so table
//! accesses miss the caches as they do under real load. The instances of all session
//! counts are prepared first and timed in turn, case by case, in every repetition: the
//! sizes are compared within the same minutes, not across this machine's drift.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};
use serde_json::json;
use tracing::info;

use super::flow::{Dir, FlowSpec, Mode, Proto, TcpFlags};
use super::harness::Harness;
use super::sys;
use crate::skel::fwd::{NxbFwdSkel, NxbFwdSkelBuilder};
use natrix::config::Config;
use natrix::dataplane::{self, Dataplane, Persistence};
use natrix::expiry::{Reaper, Sweeper};
use natrix::skel::types::nx_config;
use natrix::tables::{stat_index, STATS};

#[derive(Debug, Clone, clap::Args)]
pub struct CostArgs {
    /// Live sessions to measure with (each a separate natrix instance, sized for exactly
    /// that many).
    #[arg(long, value_delimiter = ',', default_value = "1000,1000000,10000000")]
    pub sessions: Vec<u64>,
    /// Inside interface (in the current network namespace).
    #[arg(long, default_value = "nxbin")]
    pub inside: String,
    /// Outside interface.
    #[arg(long, default_value = "nxbout")]
    pub outside: String,
    /// Timed test runs per measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub reps: u32,
    /// Packets per timed test run.
    #[arg(long, default_value_t = 1_000_000)]
    pub repeat: u32,
    /// Pin to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Then the new-flow cost for one subscriber holding 0 .. this many mappings, in
    /// steps of 256 (0: skip).
    #[arg(long, default_value_t = 8192)]
    pub alloc_max: u64,
    /// Append one JSON record per session count to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Subscribers get ~1200 flows each (600 UDP, 600 TCP): one 1024-port block each, 59% full.
const FLOWS_PER_SUB: u64 = 1200;
const BLOCK_SIZE: u32 = 1024;
/// Subscribers per pool address: 63 blocks fit on one (64512 / 1024), 3 stay free.
const SUBS_PER_ADDR: u64 = 60;
/// The most inbound targets loaded into the harness.
const MAX_INBOUND: u64 = 1 << 20;

/// How N sessions are made up.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Plan {
    sessions: u64,
    subs: u64,
    addrs: u64,
    udp: u64,
    tcp: u64,
    icmp: u64,
    new: u64,
}

impl Plan {
    fn new(n: u64) -> Result<Self> {
        ensure!(n >= 100, "at least 100 sessions");
        let new = (n / 10).min(100_000);
        let icmp = (n / 100).clamp(1, 4096);
        let rest = n - new - icmp;
        let tcp = rest / 2;
        let udp = rest - tcp;
        let subs = n.div_ceil(FLOWS_PER_SUB);
        let addrs = subs.div_ceil(SUBS_PER_ADDR);
        ensure!(addrs <= 512, "{n} sessions need {addrs} pool addresses, the benchmark has 512");
        ensure!(subs <= super::flow::MAX_SUBS as u64, "too many subscribers");
        Ok(Plan { sessions: n, subs, addrs, udp, tcp, icmp, new })
    }

    fn config(&self, inside: &str, outside: &str) -> Result<Config> {
        gateway_config(
            inside,
            outside,
            self.addrs,
            self.subs,
            self.sessions,
            &format!(
                "# one subscriber holds up to ALLOC_MAX sessions in the allocation curve: a per-subscriber
# limit above that (checked and counted, so its cost is measured)
max_sessions_per_subscriber = 100000
[nat]
block_size = {BLOCK_SIZE}
max_blocks_per_subscriber = 32
[daemon]
pin_path = \"/sys/fs/bpf/natrix-bench-cost\"
"
            ),
        )
    }
}

/// The configuration of a benchmark's private natrix instance: its interfaces, `addrs` pool
/// addresses (203.0.113.0/24 first, then 192.0.2.0/24), `subs` subscribers and `entries`
/// mappings and sessions at most, then `rest` (TOML that starts inside `[limits]`).
pub fn gateway_config(
    inside: &str,
    outside: &str,
    addrs: u64,
    subs: u64,
    entries: u64,
    rest: &str,
) -> Result<Config> {
    let pool = (0..addrs)
        .map(|i| if i < 256 { format!("\"203.0.113.{i}\"") } else { format!("\"192.0.2.{}\"", i - 256) })
        .collect::<Vec<_>>()
        .join(", ");
    let toml = format!(
        r#"
[interfaces]
inside = ["{inside}"]
outside = ["{outside}"]
[pool]
addresses = [{pool}]
ports = "1024-65535"
[limits]
max_subscribers = {subs}
max_mappings = {entries}
max_sessions = {entries}
{rest}"#
    );
    Config::from_toml_str(&toml).context("benchmark config")
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

pub(crate) const XDP_REDIRECT: u32 = 4;

pub(crate) fn drops(st: &[u64]) -> BTreeMap<&'static str, u64> {
    STATS
        .iter()
        .filter(|(s, _)| natrix::tables::is_drop(*s))
        .filter_map(|(s, n)| st.get(s.0 as usize).copied().filter(|&c| c > 0).map(|c| (*n, c)))
        .collect()
}

/// One timed case: name, program behind the harness (None: the harness alone), packets,
/// ingress interface.
type Case = (&'static str, Option<i32>, FlowSpec, u32);

/// One natrix instance sized for `plan.sessions`, filled, with its floors loaded and its
/// cases ready to time. All instances of a run are prepared before any is timed, so that
/// the timing can go round all of them (see `run`).
struct Inst {
    plan: Plan,
    dp: Dataplane,
    /// the forwarder and its memory floors, kept loaded for the cases
    fskel: NxbFwdSkel<'static>,
    h: Harness,
    in_if: u32,
    base: FlowSpec,
    cases: Vec<Case>,
    samples: BTreeMap<&'static str, Vec<f64>>,
    lines: u32,
    chunks: u32,
    load_secs: f64,
    fill_secs: f64,
    fill_ns: (f64, f64),
    mem_delta_kib: u64,
    sess_health: natrix::tables::TabHealth,
    /// keeps the FIB cache's generation and sign of life current while the instance lives
    _fibwatch: natrix::fibwatch::Guard,
}

fn prepare(a: &CostArgs, n: u64) -> Result<Inst> {
    let plan = Plan::new(n)?;
    info!(?plan, "cost: loading natrix with private maps");
    let cfg = plan.config(&a.inside, &a.outside)?;
    let in_if = sys::ifindex(&a.inside)?;
    let out_if = sys::ifindex(&a.outside)?;
    let mem0 = sys::mem_used_kib()?;
    let t_load = Instant::now();
    let dp = Dataplane::load(&cfg, Persistence::Private)?;
    let ifaces = dataplane::resolve_interfaces(&cfg)?;
    dp.configure(&cfg, &ifaces)?;
    // the FIB cache's watcher, as the daemon runs it (this process has no daemon)
    let gen = natrix::tables::MmapWords::new(
        &libbpf_rs::MapHandle::try_from(&dp.skel.maps.nx_fibc_gen)?,
        "nx_fibc_gen",
    )?;
    let fibwatch = natrix::fibwatch::Guard::start(gen)?;
    let load_secs = t_load.elapsed().as_secs_f64();
    let t = &dp.tables;
    let inside_fd = dp.skel.progs.nx_xdp_inside.as_fd().as_raw_fd();
    let outside_fd = dp.skel.progs.nx_xdp_outside.as_fd().as_raw_fd();

    let mut h = Harness::new(plan.udp.min(MAX_INBOUND) as u32)?;
    let base = FlowSpec {
        proto: Proto::Udp,
        frame_len: 64,
        subs: plan.subs as u32,
        flows: 1,
        mode: Mode::New,
        dmac: sys::mac_of(&a.inside)?,
        smac: [0x02, 0, 0, 0, 0, 2],
        ..Default::default()
    };

    // ---- fill: subscribers one pool address at a time (the daemon's addr_hint would do
    // this once per sweep), then the rest of the UDP flows, then TCP
    h.target(inside_fd)?;
    let t_fill = Instant::now();
    let mut c = t.config()?;
    for addr in 0..plan.addrs {
        let first = addr * SUBS_PER_ADDR;
        let cnt = SUBS_PER_ADDR.min(plan.subs - first);
        c.addr_hint = addr as u32;
        t.write_config(&c)?;
        h.run(&FlowSpec { flow_base: first, ..base.clone() }, in_if, cnt as u32)?;
    }
    let udp_fill =
        h.run(&FlowSpec { flow_base: plan.subs, ..base.clone() }, in_if, (plan.udp - plan.subs) as u32)?;
    let tcp_fill = h.run(&FlowSpec { proto: Proto::Tcp, ..base.clone() }, in_if, plan.tcp as u32)?;
    let fill_secs = t_fill.elapsed().as_secs_f64();
    // natrix's own growth, before the floors' tables exist
    let mem_delta_kib = sys::mem_used_kib()?.saturating_sub(mem0);
    // the session table's shape: entries a lookup finds only on a second line, by protocol
    let sess_health = t.tab_health(natrix::abi::TAB_SESS)?;
    let st = t.stats()?;
    let d = drops(&st);
    let created = st[stat_index("sessions_created").expect("counter")];
    ensure!(
        d.is_empty() && created == plan.udp + plan.tcp,
        "fill: {created} sessions created, drops {d:?}; tables (sessions, mappings) {:?}, subscribers {:?}",
        t.table_counts()?,
        t.sub_health()?
    );
    info!(sessions = created, secs = fill_secs, "cost: filled");

    let hot = FlowSpec { mode: Mode::Cycle, flows: 1, ..base.clone() };
    let rnd = FlowSpec { mode: Mode::Random, flows: plan.udp, ..base.clone() };

    // the floors: the minimal forwarder, same packets, same FIB; and the same plus one
    // line of a table as large as natrix's session table (nxb_fwd.bpf.c), laid out flat
    // as natrix's tables are, and in 32 KiB chunks from the kernel's linear map
    let lines = (dp.skel.maps.nx_sess.max_entries() / 2).max(1);
    let chunks = lines.div_ceil(CHUNK_LINES);
    // 'static as natrix's own skeleton: the instance lives until the end of the run
    let fstore: &'static mut std::mem::MaybeUninit<libbpf_rs::OpenObject> =
        Box::leak(Box::new(std::mem::MaybeUninit::uninit()));
    let mut fopen = NxbFwdSkelBuilder::default().open(fstore)?;
    fopen.maps.nxb_mem.set_max_entries(lines).context("sizing nxb_mem")?;
    fopen.maps.nxb_chunks.set_max_entries(chunks).context("sizing nxb_chunks")?;
    let ro = fopen.maps.rodata_data.as_deref_mut().context("the forwarder's read-only data")?;
    ro.nxb_mem_lines = lines;
    ro.nxb_chunk_count = chunks;
    let fskel = fopen.load().context("loading the forwarder")?;
    for i in [in_if, out_if] {
        fskel.maps.nxb_tx.update(&i.to_ne_bytes(), &i.to_ne_bytes(), MapFlags::ANY)?;
    }
    fill_chunks(&fskel.maps.nxb_chunks, chunks)?;
    let fwd_fd = fskel.progs.nxb_fwd.as_fd().as_raw_fd();
    let fwd_mem_fd = fskel.progs.nxb_fwd_mem.as_fd().as_raw_fd();
    let fwd_chunk_fd = fskel.progs.nxb_fwd_chunk.as_fd().as_raw_fd();

    // inbound: to the outside endpoints natrix handed out, an evenly strided sample of all
    // UDP mappings (the first N of a dump would all sit in the first buckets: locality
    // real traffic does not have)
    let mut all = Vec::new();
    for (mk, m) in t.mappings()? {
        if mk.proto == natrix::abi::PROTO_UDP {
            all.push((m.out_ip, m.out_port));
        }
    }
    let stride = (all.len() as u64).div_ceil(MAX_INBOUND).max(1) as usize;
    let targets: Vec<(u32, u16)> = all.into_iter().step_by(stride).collect();
    h.set_inbound(&targets)?;
    // inbound frames are addressed to the outside interface (natrix leaves a unicast frame
    // for another MAC to the kernel)
    let out_mac = sys::mac_of(&a.outside)?;
    let in_hot = FlowSpec { dir: Dir::In, dmac: out_mac, ..hot.clone() };
    let in_rnd = FlowSpec { dir: Dir::In, flows: targets.len() as u64, dmac: out_mac, ..rnd.clone() };
    // ICMP echo: the queries' mappings first
    h.target(inside_fd)?;
    h.run(&FlowSpec { proto: Proto::Icmp, ..base.clone() }, in_if, plan.icmp as u32)?;
    let icmp_rnd = FlowSpec { proto: Proto::Icmp, mode: Mode::Random, flows: plan.icmp, ..base.clone() };
    let tcp_rnd = FlowSpec {
        proto: Proto::Tcp,
        tcp_flags: TcpFlags::Ack,
        mode: Mode::Random,
        flows: plan.tcp,
        ..base.clone()
    };

    let cases: Vec<Case> = vec![
        ("nop_hot", None, hot.clone(), in_if),
        ("nop_rnd", None, rnd.clone(), in_if),
        ("nop_tcp_rnd", None, tcp_rnd.clone(), in_if),
        ("nop_in_hot", None, in_hot.clone(), out_if),
        ("nop_in_rnd", None, in_rnd.clone(), out_if),
        ("nop_icmp_rnd", None, icmp_rnd.clone(), in_if),
        ("fwd_hot", Some(fwd_fd), hot.clone(), in_if),
        ("fwd_rnd", Some(fwd_fd), rnd.clone(), in_if),
        ("fwd_mem_hot", Some(fwd_mem_fd), hot.clone(), in_if),
        ("fwd_mem_rnd", Some(fwd_mem_fd), rnd.clone(), in_if),
        ("fwd_chunk_rnd", Some(fwd_chunk_fd), rnd.clone(), in_if),
        ("out_hot", Some(inside_fd), hot.clone(), in_if),
        ("out_rnd", Some(inside_fd), rnd.clone(), in_if),
        // the same with the FIB cache off (nx_config.fibc_max_age = 0 for the case)
        ("out_nofc_hot", Some(inside_fd), hot, in_if),
        ("out_nofc_rnd", Some(inside_fd), rnd, in_if),
        ("tcp_rnd", Some(inside_fd), tcp_rnd, in_if),
        ("in_hot", Some(outside_fd), in_hot, out_if),
        ("in_rnd", Some(outside_fd), in_rnd, out_if),
        ("icmp_rnd", Some(inside_fd), icmp_rnd, in_if),
    ];
    Ok(Inst {
        plan,
        dp,
        fskel,
        h,
        in_if,
        base,
        cases,
        samples: BTreeMap::new(),
        lines,
        chunks,
        load_secs,
        fill_secs,
        fill_ns: (udp_fill.ns, tcp_fill.ns),
        mem_delta_kib,
        sess_health,
        _fibwatch: fibwatch,
    })
}

impl Inst {
    /// Every case once, in turn, each result added to its samples.
    fn time_cases(&mut self, repeat: u32) -> Result<()> {
        let t = &self.dp.tables;
        let cfg = t.config()?;
        for (name, prog, spec, ifindex) in &self.cases {
            match prog {
                Some(fd) => self.h.target(*fd)?,
                None => self.h.target_nop()?,
            }
            let nofc = name.contains("_nofc_");
            if nofc {
                t.write_config(&nx_config { fibc_max_age: 0, ..cfg })?;
            }
            let r = self.h.run(spec, *ifindex, repeat);
            if nofc {
                t.write_config(&cfg)?;
            }
            let r = r?;
            if prog.is_some() && r.retval != XDP_REDIRECT {
                bail!("{name}: the program returned {} instead of XDP_REDIRECT", r.retval);
            }
            self.samples.entry(name).or_default().push(r.ns);
        }
        Ok(())
    }
}

/// Harness cases whose work does not depend on the instance: the harness writes frames it
/// computes from the sequence number alone (one flow, or a hash of the sequence number),
/// or, for `nop_in_hot`, from the one inbound target it reads again and again.
/// `nop_in_rnd` is not among them: it reads a random inbound target from a table whose size
/// follows the instance.
const POOLED_HARNESS: [&str; 5] = ["nop_hot", "nop_in_hot", "nop_rnd", "nop_tcp_rnd", "nop_icmp_rnd"];

/// The harness' own cost in the cases of POOLED_HARNESS, the same for every instance: the
/// median of all instances' runs. Its figure alone still moved by instance (R31 in
/// docs/design/performance-notebook.md: in one instance 24 ns against 13 in the others, hot and random
/// alike, while natrix's runs behind the same harness moved by 3 ns), and subtracting
/// that would credit natrix, or the forwarder, with the harness' slowness.
fn pooled_harness(insts: &[Inst]) -> BTreeMap<&'static str, f64> {
    POOLED_HARNESS
        .iter()
        .map(|&k| {
            let all = insts.iter().flat_map(|i| i.samples.get(k).cloned().unwrap_or_default()).collect();
            (k, median(all))
        })
        .collect()
}

/// The new-flow cost, memory and sweep of a timed instance, and its record; `pooled` is
/// what the cases of POOLED_HARNESS subtract (pooled_harness).
fn finish(a: &CostArgs, inst: Inst, pooled: &BTreeMap<&'static str, f64>) -> Result<serde_json::Value> {
    let Inst {
        plan,
        dp,
        fskel,
        mut h,
        in_if,
        base,
        samples,
        lines,
        chunks,
        load_secs,
        fill_secs,
        fill_ns: (udp_fill_ns, tcp_fill_ns),
        mem_delta_kib,
        sess_health,
        ..
    } = inst;
    let t = &dp.tables;
    let inside_fd = dp.skel.progs.nx_xdp_inside.as_fd().as_raw_fd();
    let med = |k: &str| median(samples.get(k).cloned().unwrap_or_default());
    let nop = |k: &str| pooled.get(k).copied().unwrap_or_else(|| med(k));
    let (nop_hot, nop_rnd, nop_in_hot, nop_in_rnd) =
        (nop("nop_hot"), nop("nop_rnd"), nop("nop_in_hot"), nop("nop_in_rnd"));
    let fwd_hot = med("fwd_hot") - nop_hot;
    let fwd_rnd = med("fwd_rnd") - nop_rnd;
    let fwd_mem_hot = med("fwd_mem_hot") - nop_hot;
    let fwd_mem_rnd = med("fwd_mem_rnd") - nop_rnd;
    let fwd_chunk_rnd = med("fwd_chunk_rnd") - nop_rnd;
    let out_hot = med("out_hot") - nop_hot;
    let out_rnd = med("out_rnd") - nop_rnd;
    let out_nofc_hot = med("out_nofc_hot") - nop_hot;
    let out_nofc_rnd = med("out_nofc_rnd") - nop_rnd;
    let tcp_out_rnd = med("tcp_rnd") - nop("nop_tcp_rnd");
    let in_hot = med("in_hot") - nop_in_hot;
    let in_rnd = med("in_rnd") - nop_in_rnd;
    let icmp_out_rnd = med("icmp_rnd") - nop("nop_icmp_rnd");

    // new flows: mapping, port, session, on top of (nearly) N live sessions; each rep
    // creates new/reps flows, the median rep counts
    let mut v = Vec::new();
    let mut nops = Vec::new();
    let per = (plan.new / a.reps as u64).max(1);
    for r in 0..a.reps as u64 {
        let left = plan.new.saturating_sub(r * per);
        let cnt = if r + 1 == a.reps as u64 { left } else { per.min(left) };
        if cnt == 0 {
            break;
        }
        let spec = FlowSpec { flow_base: plan.udp + r * per, ..base.clone() };
        h.target(inside_fd)?;
        let t1 = h.run(&spec, in_if, cnt as u32)?;
        ensure!(t1.retval == XDP_REDIRECT, "new flow: verdict {}", t1.retval);
        v.push(t1.ns);
        h.target_nop()?;
        nops.push(h.run(&spec, in_if, cnt as u32)?.ns);
    }
    let new_flow = median(v) - median(nops);

    let st = t.stats()?;
    let d = drops(&st);
    ensure!(d.is_empty(), "drops during the measurements: {d:?}");
    let sessions = st[stat_index("sessions_created").expect("counter")];
    let mappings = st[stat_index("mappings_created").expect("counter")];

    // ---- memory: every map of the natrix object, as the kernel accounts it
    let mut per_map = BTreeMap::new();
    let mut total = 0u64;
    {
        use libbpf_rs::skel::Skel;
        for m in dp.skel.object().maps() {
            let name = m.name().to_string_lossy().into_owned();
            let bytes = sys::map_memlock(m.as_fd().as_raw_fd())?;
            total += bytes;
            per_map.insert(name, bytes);
        }
    }

    // ---- the daemon's sweep at this size (nothing expires: timeouts are minutes)
    let mut sweeper = Sweeper::new(t)?;
    let reaper: Reaper<'_> = dp.reaper()?;
    let t_sweep = Instant::now();
    sweeper.sweep(t, &reaper)?;
    let sweep_secs = t_sweep.elapsed().as_secs_f64();
    // what the daemon's batched reads see of the tables (the sweep works from these)
    let seen_sessions = t.sessions()?.len() as u64;
    let seen_mappings = t.mappings()?.len() as u64;

    let rec = json!({
        "kind": "cost",
        "sessions": sessions,
        "mappings": mappings,
        "plan": plan,
        "block_size": BLOCK_SIZE,
        "load_secs": load_secs,
        "fill_secs": fill_secs,
        "fill_ns_per_flow": {"udp": udp_fill_ns, "tcp": tcp_fill_ns},
        "repeat": a.repeat,
        "reps": a.reps,
        // timed runs each case got (every instance gets one per repetition)
        "runs_per_case": samples.values().map(Vec::len).min().unwrap_or(0),
        // all but in_random: the median over every instance (pooled_harness); own: this
        // instance's
        "harness_ns": {"hot": nop_hot, "random": nop_rnd, "in_hot": nop_in_hot, "in_random": nop_in_rnd,
                       "tcp_random": nop("nop_tcp_rnd"), "icmp_random": nop("nop_icmp_rnd"),
                       "own_hot": med("nop_hot"), "own_in_hot": med("nop_in_hot"), "own_random": med("nop_rnd"),
                       "own_tcp_random": med("nop_tcp_rnd"), "own_icmp_random": med("nop_icmp_rnd")},
        "ns": {
            "fwd": {"hot": fwd_hot, "random": fwd_rnd},
            "fwd_mem": {"hot": fwd_mem_hot, "random": fwd_mem_rnd, "lines": lines},
            "fwd_chunk": {"random": fwd_chunk_rnd, "chunks": chunks},
            "est_out": {"hot": out_hot, "random": out_rnd},
            "est_out_nofc": {"hot": out_nofc_hot, "random": out_nofc_rnd},
            "est_out_tcp": {"random": tcp_out_rnd},
            "est_in": {"hot": in_hot, "random": in_rnd},
            "icmp": {"random": icmp_out_rnd},
            "new_flow": {"at_n": new_flow},
        },
        "memory": {
            "bytes_total": total,
            "bytes_per_session": total as f64 / sessions.max(1) as f64,
            "per_map": per_map,
            "mem_used_delta_kib": mem_delta_kib,
        },
        "sess_table": sess_health,
        "sweep_secs": sweep_secs,
        // every timed run of every case (ns per packet, harness included), in order
        "samples": samples,
        "seen_by_daemon": {"sessions": seen_sessions, "mappings": seen_mappings},
    });
    drop(fskel);
    drop(dp);
    Ok(rec)
}

pub fn run(a: &CostArgs) -> Result<()> {
    if let Some(c) = a.cpu {
        sys::pin_to_cpu(c)?;
    }
    let emit = |rec: &serde_json::Value| -> Result<()> {
        if let Some(out) = &a.out {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(out)?;
            writeln!(f, "{rec}")?;
        }
        println!("{rec}");
        Ok(())
    };
    // all instances first, then every repetition goes round all of them (see the top)
    let mut insts = Vec::new();
    for &n in &a.sessions {
        insts.push(prepare(a, n).with_context(|| format!("cost with {n} sessions"))?);
    }
    for _ in 0..a.reps {
        for i in insts.iter_mut() {
            i.time_cases(a.repeat).with_context(|| format!("cost with {} sessions", i.plan.sessions))?;
        }
    }
    let pooled = pooled_harness(&insts);
    for i in insts {
        let n = i.plan.sessions;
        emit(&finish(a, i, &pooled).with_context(|| format!("cost with {n} sessions"))?)?;
    }
    if a.alloc_max > 0 {
        let pts = alloc_curve(&a.inside, &a.outside, ALLOC_STEP, a.alloc_max).context("allocation curve")?;
        emit(&json!({"kind": "alloc", "block_size": BLOCK_SIZE, "step": ALLOC_STEP, "points": pts}))?;
    }
    Ok(())
}

const ALLOC_STEP: u64 = 256;

/// Lines of one nxb_chunks array (NXB_CHUNK_LINES in nxb_fwd.bpf.c): with struct
/// bpf_array's header (312 bytes on this kernel, 512 allowed for) within 32 KiB.
const CHUNK_LINES: u32 = crate::skel::fwd::types::nxb_fwd_sizes::NXB_CHUNK_LINES.0;

/// Gives the forwarder's chunked table its `chunks` arrays, and checks that every slot holds
/// one (a lookup in an empty slot would make the program pass the packet early, cheaper,
/// and only the last run's verdict is checked). Batched: every single update of a
/// map-in-map waits for an RCU grace period (milliseconds), one per batch does not; 256 at
/// a time stays well inside the usual limit of 1024 open files.
fn fill_chunks(outer: &libbpf_rs::Map<'_>, chunks: u32) -> Result<()> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let mut next = 0u32;
    while next < chunks {
        let n = (chunks - next).min(256);
        let mut held = Vec::with_capacity(n as usize);
        let (mut keys, mut vals) = (Vec::new(), Vec::new());
        for k in next..next + n {
            let m = libbpf_rs::MapHandle::create(
                libbpf_rs::MapType::Array,
                Some("nxb_chunk"),
                4,
                64,
                CHUNK_LINES,
                &opts,
            )
            .context("creating a chunk of the forwarder's table")?;
            keys.extend_from_slice(&k.to_ne_bytes());
            vals.extend_from_slice(&(m.as_fd().as_raw_fd() as u32).to_ne_bytes());
            held.push(m);
        }
        outer
            .update_batch(&keys, &vals, n, MapFlags::ANY, MapFlags::ANY)
            .context("putting the chunks into nxb_chunks")?;
        next += n;
    }
    for k in 0..chunks {
        ensure!(
            outer.lookup(&k.to_ne_bytes(), MapFlags::ANY)?.is_some(),
            "nxb_chunks slot {k} of {chunks} is empty"
        );
    }
    Ok(())
}

/// New-flow cost against how many mappings one subscriber already holds: natrix's
/// allocator scans the subscriber's blocks in slot order, a full block end to end.
pub fn alloc_curve(inside: &str, outside: &str, step: u64, max: u64) -> Result<Vec<(u64, f64)>> {
    let plan = Plan { sessions: max + 1000, subs: 1, addrs: 1, udp: 0, tcp: 0, icmp: 0, new: 0 };
    let cfg = plan.config(inside, outside)?;
    let in_if = sys::ifindex(inside)?;
    let dp = Dataplane::load(&cfg, Persistence::Private)?;
    let ifaces = dataplane::resolve_interfaces(&cfg)?;
    dp.configure(&cfg, &ifaces)?;
    let inside_fd = dp.skel.progs.nx_xdp_inside.as_fd().as_raw_fd();
    let mut h = Harness::new(1)?;
    let base = FlowSpec { subs: 1, mode: Mode::New, dmac: sys::mac_of(inside)?, ..Default::default() };
    let mut out = Vec::new();
    let mut k = 0;
    while k < max {
        h.target(inside_fd)?;
        let t = h.run(&FlowSpec { flow_base: k, ..base.clone() }, in_if, step as u32)?;
        ensure!(t.retval == XDP_REDIRECT, "verdict {} at {k}", t.retval);
        h.target_nop()?;
        let n = h.run(&FlowSpec { flow_base: k, ..base.clone() }, in_if, step as u32)?;
        out.push((k, t.ns - n.ns));
        k += step;
    }
    Ok(out)
}
