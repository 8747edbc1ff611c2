// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Benchmarks (`natrix bench`, `make bench`, docs/PERFORMANCE.md).
//!
//! - [`gen`]: the packet generator, XDP in live-frame mode out of a veth.
//! - [`harness`]: per-packet cost of an XDP program in BPF_PROG_TEST_RUN repeat mode.
//! - [`cost`]: natrix's per-packet cost with 1k..10M live sessions, the minimal forwarder
//!   as the floor, and memory per session.
//! - [`e2e`]: one end-to-end measurement through veth namespaces (set up by
//!   scripts/bench.sh).
//! - [`report`]: medians, ratios and targets from all records; the summary in
//!   docs/PERFORMANCE.md.
//!
//! The BPF side lives in bpf/bench/.

pub mod attach;
pub mod cli;
pub mod cost;
pub mod e2e;
pub mod flow;
pub mod gen;
pub mod harness;
pub mod report;
pub mod sys;
