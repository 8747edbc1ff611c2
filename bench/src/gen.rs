// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The packet generator: `nxb_gen` (bench/bpf/nxb_gen.bpf.c) run by BPF_PROG_TEST_RUN in
//! live-frame mode on one end of a veth. Each test run sends `repeat` frames out of that
//! interface; the generator loops over test runs until the count or the time is reached,
//! optionally paced to a rate.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use serde::Serialize;

use super::flow::FlowSpec;
use super::sys::{self, BPF_F_TEST_XDP_LIVE_FRAMES};
use crate::skel::generator::{NxbGenSkel, NxbGenSkelBuilder};

pub struct Generator {
    skel: NxbGenSkel<'static>,
    ifindex: u32,
    frame: Vec<u8>,
    /// the generator's XDP link on its parking interface (see `park`), detached on drop
    _parked: Option<OwnedFd>,
}

/// What one generator run did.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct GenReport {
    pub sent: u64,
    pub secs: f64,
    pub pps: f64,
}

/// Frames per test run when unpaced: large enough that the syscall is noise, small enough
/// that a duration is kept to a few milliseconds.
const CHUNK: u32 = 1 << 16;

impl Generator {
    /// Loads the generator for interface `dev` (in the current network namespace), parked
    /// on `park` when given (see `park`).
    pub fn new(dev: &str, spec: &FlowSpec, park: Option<&str>) -> Result<Self> {
        let ifindex = sys::ifindex(dev)?;
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let open = NxbGenSkelBuilder::default().open(storage).context("opening the generator")?;
        let skel = open.load().context("loading the generator (verifier)")?;
        let mut g = Generator { skel, ifindex, frame: Vec::new(), _parked: None };
        g.set(spec)?;
        if let Some(p) = park {
            g.park(p)?;
        }
        Ok(g)
    }

    /// Attaches the generator (generic mode, a bpf_link that lives as long as `self`) to
    /// `dev`, an interface that carries no traffic, such as a veth that stays down: a frame
    /// received there would be rewritten and sent back. While an XDP program is attached
    /// somewhere the kernel's XDP dispatcher holds it, and a test run of it then only counts
    /// one more user. Unparked, every test run adds the program to the dispatcher and
    /// removes it again, each change waiting for an RCU grace period (`synchronize_rcu` in
    /// `bpf_dispatcher_change_prog`): on a machine with slow grace periods the generator
    /// then sleeps for most of a run, and what the sink counts is that sleep, not the work
    /// of the path (docs/design/performance-notebook.md, R31).
    fn park(&mut self, dev: &str) -> Result<()> {
        let prog = self.skel.progs.nxb_gen.as_fd().as_raw_fd();
        let link = sys::xdp_link(prog, dev, sys::XDP_FLAGS_SKB_MODE)
            .with_context(|| format!("parking the generator on {dev} (generic mode)"))?;
        self._parked = Some(link);
        Ok(())
    }

    /// Switches to another stream; the sequence number starts at 0 again.
    pub fn set(&mut self, spec: &FlowSpec) -> Result<()> {
        spec.validate()?;
        let bss = self.skel.maps.bss_data.as_deref_mut().context("generator .bss not mmapped")?;
        bss.nxb_cfg = spec.cfg();
        bss.nxb_seq = 0;
        self.frame = spec.template();
        Ok(())
    }

    /// Frames written since the last `set`.
    pub fn seq(&self) -> u64 {
        self.skel.maps.bss_data.as_deref().map(|b| b.nxb_seq).unwrap_or(0)
    }

    fn burst(&self, n: u32) -> Result<()> {
        let fd = self.skel.progs.nxb_gen.as_fd().as_raw_fd();
        sys::xdp_test_run(fd, &self.frame, self.ifindex, n, BPF_F_TEST_XDP_LIVE_FRAMES, 0)
            .context("generator test run (live frames)")?;
        Ok(())
    }

    /// Sends until `count` frames are out or `duration` has passed (whichever comes first;
    /// None = no limit of that kind), at most `rate` frames per second when given.
    pub fn run(
        &mut self,
        count: Option<u64>,
        duration: Option<Duration>,
        rate: Option<f64>,
    ) -> Result<GenReport> {
        let start = Instant::now();
        let first = self.seq();
        let chunk = match rate {
            // pacing granularity: ~1 ms worth of frames, at least 64 (one live-frame batch)
            Some(r) => ((r / 1000.0) as u32).clamp(64, CHUNK),
            None => CHUNK,
        };
        loop {
            let sent = self.seq() - first;
            let elapsed = start.elapsed();
            if count.is_some_and(|c| sent >= c) || duration.is_some_and(|d| elapsed >= d) {
                break;
            }
            if let Some(r) = rate {
                let due = Duration::from_secs_f64(sent as f64 / r);
                if due > elapsed {
                    std::thread::sleep(due - elapsed);
                }
            }
            let mut n = chunk as u64;
            if let Some(c) = count {
                n = n.min(c - sent);
            }
            self.burst(n as u32)?;
        }
        let secs = start.elapsed().as_secs_f64();
        let sent = self.seq() - first;
        Ok(GenReport { sent, secs, pps: sent as f64 / secs })
    }
}
