// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix-bench ...`: the subcommands scripts/bench.sh drives.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::flow::{Dir, FlowSpec, Mode, Proto, TcpFlags};
use super::{attach, capture, cost, e2e, gen::Generator, logcost, logvolume, report, sys};

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub cmd: BenchCmd,
}

#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// Send packets out of a veth (XDP live frames, XDP_TX), as fast as possible or paced.
    Gen(GenArgs),
    /// Attach the counting drop sink or the minimal XDP forwarder (pinned links).
    Attach {
        #[arg(value_enum)]
        what: AttachWhat,
        /// Interfaces (the forwarder may take several; each is also a redirect target).
        #[arg(long, required = true, value_delimiter = ',')]
        dev: Vec<String>,
        #[arg(long)]
        pin: PathBuf,
        /// setup-floor: its table is as large as natrix's session table for this many
        /// sessions (limits.max_sessions)
        #[arg(long, default_value_t = 4_000_000)]
        sessions: u32,
        /// setup-floor experiments: more lines per packet, each in a table of its own (0-3)
        #[arg(long, default_value_t = 0)]
        extra_lines: u32,
        /// setup-floor experiments: each extra line's address needs the line before
        #[arg(long)]
        dependent: bool,
        /// setup-floor experiments: locked adds instead of plain stores
        #[arg(long)]
        locked: bool,
    },
    /// Detach and remove what `attach` pinned under DIR.
    Detach {
        #[arg(long)]
        pin: PathBuf,
    },
    /// One end-to-end measurement: generator -> gateway -> sink; prints a JSON record.
    E2e(e2e::E2eArgs),
    /// One round of the capture benchmark: the fast path while `natrix capture` runs,
    /// records written and lost against frame size and burst length (end to end).
    Capture(capture::CaptureArgs),
    /// Per-packet cost (BPF_PROG_TEST_RUN) and memory per session, 1k..10M sessions.
    Cost(cost::CostArgs),
    /// NAT event logging's per-packet cost: logging off, on (block events), with session
    /// events, and an A/A control, side by side (BPF_PROG_TEST_RUN).
    LogCost(logcost::LogCostArgs),
    /// NAT event logging's volume for a simulated minute of traffic: events, IPFIX and
    /// syslog records and bytes, block events only and with session events.
    LogVolume(logvolume::LogVolumeArgs),
    /// Medians, ratios and targets from a results directory; plots' data; docs summary.
    Report(report::ReportArgs),
    /// New-flow cost against the mappings one subscriber holds (natrix's allocator).
    Alloc {
        #[arg(long, default_value = "nxbin")]
        inside: String,
        #[arg(long, default_value = "nxbout")]
        outside: String,
        #[arg(long, default_value_t = 256)]
        step: u64,
        #[arg(long, default_value_t = 8192)]
        max: u64,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum AttachWhat {
    Sink,
    Fwd,
    /// The forwarder plus a read and a write of one table line per packet, chosen by the
    /// flow: the least a gateway that creates state for a new connection does.
    SetupFloor,
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// Interface to send from (its peer receives).
    #[arg(long)]
    pub dev: String,
    /// An interface that carries no traffic (a veth that stays down) to keep the generator attached
    /// to in generic mode, so that test runs do not wait for RCU grace periods (see
    /// Generator::park). scripts/bench.sh makes one, nxbpark.
    #[arg(long)]
    pub park_dev: Option<String>,
    /// Destination MAC (the receiving interface's).
    #[arg(long)]
    pub dst_mac: String,
    #[arg(long, value_enum, default_value = "udp")]
    pub proto: Proto,
    #[arg(long, value_enum, default_value = "syn")]
    pub tcp_flags: TcpFlags,
    /// Frame length in bytes, Ethernet header included, FCS excluded.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    #[arg(long, default_value_t = 1)]
    pub flows: u64,
    /// Subscribers (source addresses from 100.64.16.0 on).
    #[arg(long, default_value_t = 1)]
    pub subs: u32,
    /// Every packet opens a new connection.
    #[arg(long)]
    pub new_flows: bool,
    /// Pick flows uniformly at random instead of in turn.
    #[arg(long, conflicts_with = "new_flows")]
    pub random: bool,
    #[arg(long, default_value_t = 0)]
    pub flow_base: u64,
    /// Frames to send.
    #[arg(long)]
    pub count: Option<u64>,
    /// Seconds to send (default 1 when no count is given).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Frames per second at most.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Pin the generator to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
}

pub fn run(a: BenchArgs) -> Result<()> {
    match a.cmd {
        BenchCmd::Gen(g) => {
            if let Some(c) = g.cpu {
                sys::pin_to_cpu(c)?;
            }
            let spec = FlowSpec {
                proto: g.proto,
                tcp_flags: g.tcp_flags,
                frame_len: g.size,
                subs: g.subs,
                flows: g.flows,
                flow_base: g.flow_base,
                mode: if g.new_flows {
                    Mode::New
                } else if g.random {
                    Mode::Random
                } else {
                    Mode::Cycle
                },
                dir: Dir::Out,
                dmac: sys::parse_mac(&g.dst_mac)?,
                smac: sys::mac_of(&g.dev)?,
                ..Default::default()
            };
            let mut gen = Generator::new(&g.dev, &spec, g.park_dev.as_deref())?;
            let duration = match (g.count, g.duration) {
                (None, None) => Some(1.0),
                (_, d) => d,
            };
            let r = gen.run(g.count, duration.map(Duration::from_secs_f64), g.rate)?;
            println!("{}", serde_json::json!({"kind": "gen", "spec": spec, "report": r}));
            Ok(())
        }
        BenchCmd::Attach { what, dev, pin, sessions, extra_lines, dependent, locked } => match what {
            AttachWhat::Sink | AttachWhat::Fwd if extra_lines != 0 || dependent || locked => {
                anyhow::bail!("--extra-lines, --dependent and --locked are for the setup floor only")
            }
            AttachWhat::Sink => {
                anyhow::ensure!(dev.len() == 1, "the sink takes one interface");
                attach::sink(&dev[0], &pin)
            }
            AttachWhat::Fwd => attach::fwd(&dev, &pin, None),
            AttachWhat::SetupFloor => {
                attach::fwd(
                    &dev,
                    &pin,
                    Some(attach::Floor {
                        // two 32-byte slots to a line, as nx_sess holds them
                        lines: natrix::tables::tab_slots(sessions) / 2,
                        extra: extra_lines,
                        dependent,
                        locked,
                    }),
                )
            }
        },
        BenchCmd::Detach { pin } => {
            natrix::dataplane::down(&pin)?;
            Ok(())
        }
        BenchCmd::E2e(e) => {
            let rec = e2e::run(&e)?;
            println!("{rec}");
            Ok(())
        }
        BenchCmd::Capture(c) => capture::run(&c),
        BenchCmd::Cost(c) => cost::run(&c),
        BenchCmd::LogCost(c) => logcost::run(&c),
        BenchCmd::LogVolume(v) => logvolume::run(&v),
        BenchCmd::Report(r) => report::run(&r),
        BenchCmd::Alloc { inside, outside, step, max } => {
            for (k, ns) in cost::alloc_curve(&inside, &outside, step, max)? {
                println!("{k} {ns:.0}");
            }
            Ok(())
        }
    }
}
