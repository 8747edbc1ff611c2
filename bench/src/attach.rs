// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Attaching the sink and the minimal forwarder so that they outlive the command that
//! attached them, as natrix's own programs do: one pinned bpf_link per interface and the
//! maps pinned beside them under one directory. `natrix down --pin DIR` (or
//! `natrix-bench detach`) removes them again.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::sys;
use crate::skel::{fwd::NxbFwdSkelBuilder, sink::NxbSinkSkelBuilder};
use natrix::dataplane::ensure_bpffs;

/// Name of the sink's counter map under its pin directory.
pub const SINK_MAP: &str = "nxb_rx";

fn link_pin(dir: &Path, dev: &str) -> PathBuf {
    dir.join(format!("link_{dev}"))
}

/// bpf_link_create (native XDP) and pin; the pin keeps the program attached.
fn attach_pinned(prog: BorrowedFd<'_>, dev: &str, dir: &Path) -> Result<()> {
    let link = sys::xdp_link(prog.as_raw_fd(), dev, sys::XDP_FLAGS_DRV_MODE)?;
    let path = link_pin(dir, dev);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: valid fd and path.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_obj_pin(link.as_raw_fd(), c.as_ptr()) };
    if rc != 0 {
        bail!("pinning {}: {}", path.display(), std::io::Error::last_os_error());
    }
    // the pin keeps the link when `link` is closed
    Ok(())
}

fn prepare_dir(dir: &Path) -> Result<()> {
    ensure_bpffs(dir)?;
    if dir.exists() {
        bail!("{} exists: detach first (natrix-bench detach --pin {})", dir.display(), dir.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// Attaches the counting drop sink to `dev`; its counters are pinned as DIR/nxb_rx.
pub fn sink(dev: &str, dir: &Path) -> Result<()> {
    prepare_dir(dir)?;
    let res = (|| {
        let mut storage = MaybeUninit::uninit();
        let open = NxbSinkSkelBuilder::default().open(&mut storage).context("opening the sink")?;
        let mut skel = open.load().context("loading the sink")?;
        skel.maps.nxb_rx.pin(dir.join(SINK_MAP)).context("pinning nxb_rx")?;
        attach_pinned(skel.progs.nxb_sink.as_fd(), dev, dir)
    })();
    if res.is_err() {
        let _ = natrix::dataplane::down(dir);
    }
    res
}

/// The setup floor's table and, for experiments, what it does per packet beyond one line.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    /// 64-byte lines in its table (natrix's session table for as many sessions)
    pub lines: u32,
    /// more lines read and written per packet, each in a table of its own (0-3)
    pub extra: u32,
    /// each extra line's address needs the line before (a chain of misses)
    pub dependent: bool,
    /// the writes are locked adds instead of plain stores
    pub locked: bool,
}

/// Attaches the minimal forwarder to every interface in `devs`, each a redirect target;
/// with `floor`, the setup floor instead (`nxb_fwd_claim`: the forwarder plus a read and a
/// write of the flow's line in a table of that many 64-byte lines).
pub fn fwd(devs: &[String], dir: &Path, floor: Option<Floor>) -> Result<()> {
    prepare_dir(dir)?;
    let res = (|| {
        let mut storage = MaybeUninit::uninit();
        let mut open = NxbFwdSkelBuilder::default().open(&mut storage).context("opening the forwarder")?;
        if let Some(f) = floor {
            anyhow::ensure!(f.lines > 0, "the setup floor needs a table of at least one line");
            anyhow::ensure!(f.extra <= 3, "at most 3 extra lines");
            let total = f.lines.checked_mul(1 + f.extra).context("setup floor table too large")?;
            open.maps.nxb_mem.set_max_entries(total).context("sizing nxb_mem")?;
            let ro = open.maps.rodata_data.as_deref_mut().context("the forwarder's read-only data")?;
            ro.nxb_mem_lines = f.lines;
            ro.nxb_x_extra = f.extra;
            ro.nxb_x_dep = f.dependent as u32;
            ro.nxb_x_lock = f.locked as u32;
        }
        let mut skel = open.load().context("loading the forwarder")?;
        for d in devs {
            let i = sys::ifindex(d)?.to_ne_bytes();
            skel.maps.nxb_tx.update(&i, &i, MapFlags::ANY).with_context(|| format!("nxb_tx += {d}"))?;
        }
        skel.maps.nxb_tx.pin(dir.join("nxb_tx")).context("pinning nxb_tx")?;
        let prog =
            if floor.is_some() { skel.progs.nxb_fwd_claim.as_fd() } else { skel.progs.nxb_fwd.as_fd() };
        for d in devs {
            attach_pinned(prog, d, dir)?;
        }
        Ok(())
    })();
    if res.is_err() {
        let _ = natrix::dataplane::down(dir);
    }
    res
}

/// Packets and bytes the sink pinned under `dir` has counted, all CPUs.
pub fn sink_count(map: &MapHandle) -> Result<(u64, u64)> {
    let per_cpu = map.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
    let (mut p, mut b) = (0u64, 0u64);
    for v in per_cpu {
        if v.len() >= 16 {
            p += u64::from_ne_bytes(v[0..8].try_into().expect("8 bytes"));
            b += u64::from_ne_bytes(v[8..16].try_into().expect("8 bytes"));
        }
    }
    Ok((p, b))
}

pub fn open_sink(dir: &Path) -> Result<MapHandle> {
    let p = dir.join(SINK_MAP);
    MapHandle::from_pinned_path(&p).with_context(|| format!("opening the sink's counters {}", p.display()))
}
