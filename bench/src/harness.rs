// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The test-run harness (bench/bpf/nxb_harness.bpf.c): writes the next flow's frame, then
//! tail-calls the program under test. Timing a program this way in BPF_PROG_TEST_RUN's
//! repeat mode measures it on fresh packets every run, not on its own output; the
//! harness' own cost is measured with `nxb_nop` behind it and subtracted by the caller.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

use super::flow::{copy_cfg, FlowSpec};
use super::sys;
use crate::skel::harness::{NxbHarnessSkel, NxbHarnessSkelBuilder};

pub struct Harness {
    skel: NxbHarnessSkel<'static>,
    max_inbound: u32,
}

/// One timed test run.
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    pub retval: u32,
    /// Kernel-measured nanoseconds per run, harness included.
    pub ns: f64,
}

impl Harness {
    /// `max_inbound`: how many inbound targets `set_inbound` may load (sizes nxb_flows).
    pub fn new(max_inbound: u32) -> Result<Self> {
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = NxbHarnessSkelBuilder::default().open(storage).context("opening the harness")?;
        open.maps.nxb_flows.set_max_entries(max_inbound.max(1)).context("sizing nxb_flows")?;
        let skel = open.load().context("loading the harness (verifier)")?;
        Ok(Harness { skel, max_inbound: max_inbound.max(1) })
    }

    /// Puts a program behind the harness (slot 0 of its program array).
    pub fn target(&self, prog_fd: RawFd) -> Result<()> {
        self.skel
            .maps
            .nxb_target
            .update(&0u32.to_ne_bytes(), &(prog_fd as u32).to_ne_bytes(), MapFlags::ANY)
            .context("putting the program under test into nxb_target (tail-call compatible?)")
    }

    /// The calibration target.
    pub fn target_nop(&self) -> Result<()> {
        self.target(self.skel.progs.nxb_nop.as_fd().as_raw_fd())
    }

    /// Loads inbound targets (outside address and port, network order) for `Dir::In`.
    pub fn set_inbound(&self, targets: &[(u32, u16)]) -> Result<()> {
        if targets.len() > self.max_inbound as usize {
            bail!("{} inbound targets, room for {}", targets.len(), self.max_inbound);
        }
        let mut keys = Vec::with_capacity(targets.len() * 4);
        let mut vals = Vec::with_capacity(targets.len() * 8);
        for (i, (ip, port)) in targets.iter().enumerate() {
            keys.extend_from_slice(&(i as u32).to_ne_bytes());
            vals.extend_from_slice(&ip.to_ne_bytes());
            vals.extend_from_slice(&port.to_ne_bytes());
            vals.extend_from_slice(&0u16.to_ne_bytes());
        }
        for (k, v) in keys.chunks(4 * 65536).zip(vals.chunks(8 * 65536)) {
            self.skel
                .maps
                .nxb_flows
                .update_batch(k, v, (k.len() / 4) as u32, MapFlags::ANY, MapFlags::ANY)
                .context("filling nxb_flows")?;
        }
        Ok(())
    }

    /// Runs the harness `repeat` times on `spec`'s stream, entering at `ifindex`. The
    /// sequence number restarts at 0, so a spec in `Mode::New` creates flows
    /// flow_base .. flow_base + repeat.
    pub fn run(&mut self, spec: &FlowSpec, ifindex: u32, repeat: u32) -> Result<Timed> {
        spec.validate()?;
        let bss = self.skel.maps.bss_data.as_deref_mut().context("harness .bss not mmapped")?;
        copy_cfg(&spec.cfg(), &mut bss.nxb_cfg);
        bss.nxb_seq = 0;
        let frame = spec.template();
        let fd = self.skel.progs.nxb_harness.as_fd().as_raw_fd();
        let out = sys::xdp_test_run(fd, &frame, ifindex, repeat, 0, 0)?;
        let ran = self.skel.maps.bss_data.as_deref().map(|b| b.nxb_seq).unwrap_or(0);
        if ran != repeat.max(1) as u64 {
            bail!("harness ran {ran} times, asked for {repeat}");
        }
        Ok(Timed { retval: out.retval, ns: out.duration_ns as f64 })
    }
}
