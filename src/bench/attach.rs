// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Attaching the sink and the minimal forwarder so that they outlive the command that
//! attached them, as natrix's own programs do: one pinned bpf_link per interface and the
//! maps pinned beside them under one directory. `natrix down --pin DIR` (or
//! `natrix bench detach`) removes them again.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::sys;
use crate::bench_skel::{fwd::NxbFwdSkelBuilder, sink::NxbSinkSkelBuilder};
use crate::dataplane::ensure_bpffs;

/// Name of the sink's counter map under its pin directory.
pub const SINK_MAP: &str = "nxb_rx";

const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

fn link_pin(dir: &Path, dev: &str) -> PathBuf {
    dir.join(format!("link_{dev}"))
}

/// bpf_link_create (native XDP) and pin; the pin keeps the program attached.
fn attach_pinned(prog: BorrowedFd<'_>, dev: &str, dir: &Path) -> Result<()> {
    let ifindex = sys::ifindex(dev)?;
    let opts = libbpf_rs::libbpf_sys::bpf_link_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_link_create_opts>() as _,
        flags: XDP_FLAGS_DRV_MODE,
        ..Default::default()
    };
    // SAFETY: valid program fd and options struct.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_link_create(
            prog.as_raw_fd(),
            ifindex as i32,
            libbpf_rs::libbpf_sys::BPF_XDP,
            &opts,
        )
    };
    if fd < 0 {
        bail!("attaching XDP to {dev}: {}", std::io::Error::from_raw_os_error(-fd));
    }
    let path = link_pin(dir, dev);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: valid fd and path.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_obj_pin(fd, c.as_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: we own fd; the pin keeps the link.
    unsafe { libc::close(fd) };
    if rc != 0 {
        bail!("pinning {}: {err}", path.display());
    }
    Ok(())
}

fn prepare_dir(dir: &Path) -> Result<()> {
    ensure_bpffs(dir)?;
    if dir.exists() {
        bail!("{} exists: detach first (natrix bench detach --pin {})", dir.display(), dir.display());
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
        let _ = crate::dataplane::down(dir);
    }
    res
}

/// Attaches the minimal forwarder to every interface in `devs`, each a redirect target.
pub fn fwd(devs: &[String], dir: &Path) -> Result<()> {
    prepare_dir(dir)?;
    let res = (|| {
        let mut storage = MaybeUninit::uninit();
        let open = NxbFwdSkelBuilder::default().open(&mut storage).context("opening the forwarder")?;
        let mut skel = open.load().context("loading the forwarder")?;
        for d in devs {
            let i = sys::ifindex(d)?.to_ne_bytes();
            skel.maps.nxb_tx.update(&i, &i, MapFlags::ANY).with_context(|| format!("nxb_tx += {d}"))?;
        }
        skel.maps.nxb_tx.pin(dir.join("nxb_tx")).context("pinning nxb_tx")?;
        for d in devs {
            attach_pinned(skel.progs.nxb_fwd.as_fd(), d, dir)?;
        }
        Ok(())
    })();
    if res.is_err() {
        let _ = crate::dataplane::down(dir);
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
