// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! natrix-bench: the benchmarks (`make bench`, docs/PERFORMANCE.md), apart from the
//! product: the `natrix` binary holds the daemon and the CLI only.
//!
//! - [`gen`]: the packet generator, XDP in live-frame mode out of a veth.
//! - [`harness`]: per-packet cost of an XDP program in BPF_PROG_TEST_RUN repeat mode.
//! - [`cost`]: natrix's per-packet cost with 1k..10M live sessions, the minimal forwarder
//!   as the floor, and memory per session.
//! - [`logcost`], [`logvolume`]: what NAT event logging costs per packet (on against
//!   off), and what it sends for a realistic load (records and bytes per second).
//! - [`capture`]: `natrix capture` under load: the fast path's rate while capturing, records
//!   written and lost against frame size and burst length ([`capreport`]: its report).
//! - [`e2e`]: one end-to-end measurement through veth namespaces (set up by
//!   scripts/bench.sh).
//! - [`report`]: medians, ratios and targets from all records; the summary in
//!   docs/PERFORMANCE.md.
//!
//! The BPF side lives in bench/bpf/, built into this binary's skeletons (build.rs).

pub mod attach;
pub mod capreport;
pub mod capture;
pub mod cli;
pub mod cost;
pub mod e2e;
pub mod flow;
pub mod gen;
pub mod harness;
pub mod logcost;
pub mod logreport;
pub mod logvolume;
pub mod report;
pub mod sys;

/// Skeletons of the benchmark programs (bench/bpf/), one module per object.
pub mod skel {
    #![allow(
        clippy::all,
        clippy::undocumented_unsafe_blocks,
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        dead_code,
        unused
    )]
    pub mod generator {
        include!(concat!(env!("OUT_DIR"), "/bench_gen.skel.rs"));
    }
    pub mod harness {
        include!(concat!(env!("OUT_DIR"), "/bench_harness.skel.rs"));
    }
    pub mod fwd {
        include!(concat!(env!("OUT_DIR"), "/bench_fwd.skel.rs"));
    }
    pub mod sink {
        include!(concat!(env!("OUT_DIR"), "/bench_sink.skel.rs"));
    }
}

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "natrix-bench",
    version,
    about = "natrix's benchmarks: generator, harness, report (make bench)"
)]
struct Cli {
    #[command(flatten)]
    args: cli::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    cli::run(Cli::parse().args)
}
