// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! One `natrix capture`: the filter compiled and loaded as the capture's stages, put in
//! natrix's program array (the data plane then sends every packet through them), the ring
//! nx_cap_rb read into pcapng until -c, -G or a signal says stop, everything taken out
//! again. It needs only the pinned maps and program array: the daemon may run or not.
//!
//! One capture at a time: the data plane has one chain. A capture holds an exclusive
//! flock(2) on a file in /run/natrix named after the pin directory while its stages are in
//! place; a second one gets [`CaptureError::Busy`] with the first one's pid. A capture
//! killed without cleaning up (SIGKILL) leaves its stages in place and its lock free: the
//! next capture takes over, and the daemon removes them at its next sweep
//! ([`remove_orphaned`]).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libbpf_rs::{MapCore, MapFlags, MapHandle};
use thiserror::Error;

use super::filter::{compile, translate, FilterError, MAX_SNAPLEN};
use super::load::LoadError;
use super::pcapng::{Record, WriteOptions, Writer};
use super::stage::{load_stage, Stage};
use crate::dataplane::PROGS_PIN;
use crate::natlog::source::tai_to_utc_ns;
use crate::skel::types::{nx_cap_buf, nx_cap_ctl, nx_cap_flags, nx_cap_sizes};

/// Bytes of each form the data plane keeps at most (NX_CAP_SNAP_MAX).
pub const SNAP_MAX: u32 = nx_cap_sizes::NX_CAP_SNAP_MAX.0;
/// Interfaces one capture can name (NX_CAP_IFACES).
pub const IFACES_MAX: usize = nx_cap_sizes::NX_CAP_IFACES.0 as usize;
/// Where the capture locks live.
const LOCK_DIR: &str = "/run/natrix";

/// What to capture and until when.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// natrix's pin directory (daemon.pin_path)
    pub pin: PathBuf,
    /// -i: interface names; empty: all of natrix's
    pub ifaces: Vec<String>,
    /// -c: stop after this many records
    pub count: Option<u64>,
    /// -G: stop after this long
    pub duration: Option<Duration>,
    /// -s: bytes of each form (0: the whole packet)
    pub snaplen: u32,
    /// --drops: only packets natrix drops
    pub drops: bool,
    /// --no-pair: only the received form
    pub no_pair: bool,
    /// the tcpdump filter ("" matches everything)
    pub filter: String,
}

#[derive(Debug, Error)]
pub enum CaptureError {
    /// The filter does not compile: libpcap's message (exit 2).
    #[error("{0}")]
    Filter(#[from] FilterError),
    /// A flag's value is wrong (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Another capture holds the data plane's capture chain.
    #[error("another capture is running (pid {pid}): natrix captures one at a time, stop that one first")]
    Busy { pid: u32 },
    /// The pinned maps are not there, or are not this version's.
    #[error("cannot open {what} under {pin}: {source} (is natrix loaded? `natrix run` pins it; --pin names daemon.pin_path)")]
    NotLoaded { what: String, pin: String, source: libbpf_rs::Error },
    #[error("{what}: {source}")]
    Bpf { what: String, source: libbpf_rs::Error },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error(transparent)]
    Load(#[from] LoadError),
}

impl CaptureError {
    /// The exit status: 2 for what the command line got wrong, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CaptureError::Filter(_) | CaptureError::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// What a capture did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// pcapng records (enhanced packet blocks) written
    pub written: u64,
    /// records the ring could not take (the data plane's count)
    pub lost: u64,
    /// a stage's tail call found its next slot empty (0 unless natrix was reloaded
    /// mid-packet)
    pub stage_fail: u64,
}

fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> CaptureError {
    let what = what.into();
    move |source| CaptureError::Bpf { what, source }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CaptureError {
    let what = what.into();
    move |source| CaptureError::Io { what, source }
}

/// The pinned objects a capture uses.
struct Pins {
    progs: MapHandle,
    progs_id: u32,
    ctl: MapHandle,
    buf: MapHandle,
    rb: MapHandle,
    ifaces: MapHandle,
}

fn open_pin(pin: &Path, name: &str) -> Result<MapHandle, CaptureError> {
    MapHandle::from_pinned_path(pin.join(name)).map_err(|source| CaptureError::NotLoaded {
        what: name.to_owned(),
        pin: pin.display().to_string(),
        source,
    })
}

/// The capture's settings word (nx_cap_ctl's one entry); all zero when unset.
fn read_ctl(ctl: &MapHandle) -> Result<nx_cap_ctl, CaptureError> {
    let v = ctl.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).map_err(bpf("reading nx_cap_ctl"))?;
    Ok(v.map(|b| bytemuck::pod_read_unaligned(&b)).unwrap_or_default())
}

fn map_id(m: &MapHandle) -> u32 {
    m.info().map(|i| i.info.id).unwrap_or(0)
}

impl Pins {
    fn open(pin: &Path) -> Result<Pins, CaptureError> {
        let progs = open_pin(pin, PROGS_PIN)?;
        Ok(Pins {
            progs_id: map_id(&progs),
            progs,
            ctl: open_pin(pin, "nx_cap_ctl")?,
            buf: open_pin(pin, "nx_cap_buf")?,
            rb: open_pin(pin, "nx_cap_rb")?,
            ifaces: open_pin(pin, "nx_ifaces")?,
        })
    }

    fn read_ctl(&self) -> Result<nx_cap_ctl, CaptureError> {
        read_ctl(&self.ctl)
    }

    fn write_ctl(&self, c: &nx_cap_ctl) -> Result<(), CaptureError> {
        self.ctl
            .update(&0u32.to_ne_bytes(), bytemuck::bytes_of(c), MapFlags::ANY)
            .map_err(bpf("writing nx_cap_ctl"))
    }

    /// natrix's interfaces (ifindex), from nx_ifaces.
    fn natrix_ifaces(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .ifaces
            .keys()
            .filter_map(|k| k.get(..4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])))
            .collect();
        v.sort_unstable();
        v
    }

    /// Every CPU's nx_cap_buf zeroed: counters from 0, nobody armed.
    fn reset_buf(&self) -> Result<(), CaptureError> {
        let key = 0u32.to_ne_bytes();
        let cpus = self
            .buf
            .lookup_percpu(&key, MapFlags::ANY)
            .map_err(bpf("reading nx_cap_buf"))?
            .unwrap_or_default();
        let zero = vec![vec![0u8; std::mem::size_of::<nx_cap_buf>()]; cpus.len()];
        self.buf.update_percpu(&key, &zero, MapFlags::ANY).map_err(bpf("resetting nx_cap_buf"))
    }

    /// (records lost, stage failures), summed over the CPUs.
    fn counters(&self) -> (u64, u64) {
        let key = 0u32.to_ne_bytes();
        let at = |b: &[u8], off: usize| {
            b.get(off..off + 8).map_or(0, |s| u64::from_ne_bytes(s.try_into().expect("8 bytes")))
        };
        let cpus = self.buf.lookup_percpu(&key, MapFlags::ANY).ok().flatten().unwrap_or_default();
        cpus.iter().fold((0, 0), |(l, f), b| {
            (
                l + at(b, std::mem::offset_of!(nx_cap_buf, lost)),
                f + at(b, std::mem::offset_of!(nx_cap_buf, stage_fail)),
            )
        })
    }
}

/// The name of interface `ifindex` in this network namespace ("if<N>" if it has none).
pub fn ifname(ifindex: u32) -> String {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: a buffer of IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr()) };
    if p.is_null() {
        return format!("if{ifindex}");
    }
    // SAFETY: if_indextoname wrote a NUL-terminated name into buf.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

fn ifindex_of(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else { return 0 };
    // SAFETY: a NUL-terminated string.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// The lock that makes a capture the only one on this pin directory.
struct Lock {
    _file: File,
}

fn lock_path(pin: &Path) -> PathBuf {
    let tag: String =
        pin.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    Path::new(LOCK_DIR).join(format!("capture{tag}.lock"))
}

/// The capture lock of `pin`: Some once taken, None when another process holds it.
fn try_lock(pin: &Path) -> Result<Option<Lock>, CaptureError> {
    std::fs::create_dir_all(LOCK_DIR).map_err(io(format!("creating {LOCK_DIR}")))?;
    let path = lock_path(pin);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(format!("opening {}", path.display())))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Ok(None);
        }
        return Err(io(format!("locking {}", path.display()))(e));
    }
    Ok(Some(Lock { _file: file }))
}

/// The capture's stages, loaded and put in place in one program array.
struct Installed {
    progs_id: u32,
    _stages: Vec<OwnedFd>,
}

fn install(pins: &Pins, filter: &[super::filter::EbpfInsn]) -> Result<Installed, CaptureError> {
    let mut fds = Vec::new();
    // downstream first: the entry slots are filled last, when everything after them is there
    for stage in [Stage::Tx, Stage::RxInside, Stage::RxOutside] {
        let fd = load_stage(stage, filter, pins.buf.as_fd(), pins.progs.as_fd())?;
        pins.progs
            .update(&stage.slot().to_ne_bytes(), &fd.as_raw_fd().to_ne_bytes(), MapFlags::ANY)
            .map_err(bpf(format!("putting the capture stage in slot {} of nx_progs", stage.slot())))?;
        fds.push(fd);
    }
    Ok(Installed { progs_id: pins.progs_id, _stages: fds })
}

/// The capture's stages out of `progs`: entry slots first, so no packet starts the chain
/// once they are gone. Absent slots are not an error.
fn uninstall(progs: &MapHandle) {
    for stage in [Stage::RxInside, Stage::RxOutside, Stage::Tx] {
        let _ = progs.delete(&stage.slot().to_ne_bytes());
    }
}

/// Removes the stages of a capture that ended without doing so (killed): when nobody holds
/// the capture lock of `pin` but nx_cap_ctl names an owner. Called by the daemon at each
/// sweep. Returns the dead capture's pid when it removed something.
pub fn remove_orphaned(pin: &Path) -> Result<Option<u32>, CaptureError> {
    if read_ctl(&open_pin(pin, "nx_cap_ctl")?)?.owner == 0 {
        return Ok(None);
    }
    let Some(_lock) = try_lock(pin)? else { return Ok(None) };
    // under the lock: no capture runs, whatever the word says
    let pins = Pins::open(pin)?;
    let owner = pins.read_ctl()?.owner;
    if owner == 0 {
        return Ok(None);
    }
    uninstall(&pins.progs);
    pins.write_ctl(&nx_cap_ctl::default())?;
    Ok(Some(owner))
}

/// Runs one capture into `out`; `ready` is called with the interfaces' names once packets
/// are being captured. Stops at -c, -G, or when `stop` is set (a signal), then removes
/// what it put in place.
pub fn run<W: Write>(
    opts: &Options,
    out: W,
    stop: &AtomicBool,
    ready: impl FnOnce(&[String]),
) -> Result<Summary, CaptureError> {
    let snaplen = match opts.snaplen {
        0 => MAX_SNAPLEN,
        s if s > MAX_SNAPLEN => {
            return Err(CaptureError::Usage(format!("-s {s}: the snap length is at most {MAX_SNAPLEN}")))
        }
        s => s,
    };
    let prog = compile(&opts.filter, snaplen)?;
    let filter = translate(&prog)?;

    let pins = Pins::open(&opts.pin)?;
    let all = pins.natrix_ifaces();
    let mut chosen = Vec::new();
    for name in &opts.ifaces {
        let idx = ifindex_of(name);
        if idx == 0 || !all.contains(&idx) {
            let names: Vec<String> = all.iter().map(|i| ifname(*i)).collect();
            return Err(CaptureError::Usage(format!(
                "-i {name}: not one of natrix's interfaces ({})",
                names.join(", ")
            )));
        }
        if !chosen.contains(&idx) {
            chosen.push(idx);
        }
    }
    if chosen.len() > IFACES_MAX {
        return Err(CaptureError::Usage(format!("-i: at most {IFACES_MAX} interfaces")));
    }

    // the daemon's sweep holds the lock for a moment when it looks for a killed capture
    let mut lock = None;
    for _ in 0..10 {
        lock = try_lock(&opts.pin)?;
        if lock.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let Some(lock) = lock else {
        return Err(CaptureError::Busy { pid: pins.read_ctl()?.owner });
    };
    let previous = pins.read_ctl()?.owner;
    if previous != 0 {
        tracing::warn!(pid = previous, "a capture ended without cleaning up: taking its place");
    }

    let kernel_snap = snaplen.min(SNAP_MAX);
    let mut ctl = nx_cap_ctl {
        owner: std::process::id(),
        flags: if opts.drops { nx_cap_flags::NX_CAPF_DROPS.0 } else { 0 }
            | if opts.no_pair { nx_cap_flags::NX_CAPF_NO_PAIR.0 } else { 0 },
        snap: kernel_snap,
        nif: chosen.len() as u32,
        ..Default::default()
    };
    ctl.ifindex[..chosen.len()].copy_from_slice(&chosen);

    let mut writer = Writer::new(
        out,
        WriteOptions { no_pair: opts.no_pair, ifaces: chosen.clone(), snaplen: kernel_snap },
        Box::new(ifname),
    )
    .map_err(io("writing the pcapng header"))?;

    // Leftovers of an earlier capture first (one that was killed), then ours.
    let discard = std::cell::Cell::new(true);
    let state = std::cell::RefCell::new((&mut writer, None::<std::io::Error>, 0u64));
    let limit = opts.count.unwrap_or(u64::MAX);
    let mut builder = libbpf_rs::RingBufferBuilder::new();
    builder
        .add(&pins.rb, |rec: &[u8]| {
            if discard.get() {
                return 0;
            }
            let mut st = state.borrow_mut();
            let (w, err, malformed) = &mut *st;
            if err.is_some() {
                return 0;
            }
            let Some(r) = Record::parse(rec) else {
                *malformed += 1;
                return 0;
            };
            let left = limit.saturating_sub(w.written);
            if let Err(e) = w.write(&r, tai_to_utc_ns(), left) {
                *err = Some(e);
            }
            0
        })
        .map_err(bpf("reading nx_cap_rb"))?;
    let rb = builder.build().map_err(bpf("reading nx_cap_rb"))?;
    rb.consume().map_err(bpf("emptying nx_cap_rb"))?;
    discard.set(false);

    pins.reset_buf()?;
    pins.write_ctl(&ctl)?;
    let mut installed = match install(&pins, &filter) {
        Ok(i) => i,
        Err(e) => {
            uninstall(&pins.progs);
            let _ = pins.write_ctl(&nx_cap_ctl::default());
            return Err(e);
        }
    };
    let names: Vec<String> =
        if chosen.is_empty() { all.iter() } else { chosen.iter() }.map(|i| ifname(*i)).collect();
    ready(&names);

    let began = Instant::now();
    let mut checked = began;
    let mut result = Ok(());
    let mut reinstalled: Option<(MapHandle, Installed)> = None;
    loop {
        if let Err(e) = rb.poll(Duration::from_millis(100)) {
            if !stop.load(Ordering::Relaxed) {
                result = Err(bpf("reading nx_cap_rb")(e));
            }
            break;
        }
        {
            let mut st = state.borrow_mut();
            if let Some(e) = st.1.take() {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    result = Err(io("writing the capture")(e));
                }
                break;
            }
            if let Err(e) = st.0.flush() {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    result = Err(io("writing the capture")(e));
                }
                break;
            }
            if st.0.written >= limit {
                break;
            }
        }
        if stop.load(Ordering::Relaxed) || opts.duration.is_some_and(|d| began.elapsed() >= d) {
            break;
        }
        // A new load of natrix (a daemon's restart) has its own program array: follow it.
        if checked.elapsed() >= Duration::from_secs(1) {
            checked = Instant::now();
            if let Ok(p) = open_pin(&opts.pin, PROGS_PIN) {
                let id = map_id(&p);
                let current = reinstalled.as_ref().map_or(installed.progs_id, |(_, i)| i.progs_id);
                if id != 0 && id != current {
                    let now = Pins { progs_id: id, progs: p, ..Pins::open(&opts.pin)? };
                    match install(&now, &filter) {
                        Ok(i) => {
                            tracing::info!("natrix was reloaded: the capture follows its new programs");
                            if let Some((old, oi)) = reinstalled.take() {
                                uninstall(&old);
                                drop(oi);
                            } else {
                                uninstall(&pins.progs);
                            }
                            reinstalled = Some((now.progs, i));
                        }
                        Err(e) => tracing::warn!(error = %e, "natrix was reloaded: cannot follow it"),
                    }
                }
            }
        }
    }

    // Out of the data plane, then what is still in the ring.
    if let Some((p, i)) = reinstalled.take() {
        uninstall(&p);
        drop(i);
    }
    uninstall(&pins.progs);
    installed._stages.clear();
    let _ = pins.write_ctl(&nx_cap_ctl::default());
    if result.is_ok() && state.borrow().1.is_none() {
        let _ = rb.consume();
        let mut st = state.borrow_mut();
        if let Some(e) = st.1.take().or_else(|| st.0.flush().err()) {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                result = Err(io("writing the capture")(e));
            }
        }
    }
    let malformed = state.borrow().2;
    if malformed > 0 {
        tracing::warn!(records = malformed, "records shorter than their header says: skipped");
    }
    drop(lock);
    result?;
    let (lost, stage_fail) = pins.counters();
    let written = state.borrow().0.written;
    Ok(Summary { written, lost, stage_fail })
}
