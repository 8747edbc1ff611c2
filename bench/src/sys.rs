// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Thin wrappers over the kernel interfaces the benchmarks need and libbpf-rs does not
//! expose as such: test runs with every option, program run-time statistics, the kernel's
//! own accounting of a map's memory, interface facts from the current network namespace.

use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::libbpf_sys;

/// `BPF_F_TEST_XDP_LIVE_FRAMES`: XDP_TX and XDP_REDIRECT in a test run really transmit.
pub const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// `struct xdp_md` as the test-run context: only the ingress interface is set. The kernel
/// resolves it in the network namespace of the calling thread, as it does the FIB lookups
/// the program makes.
pub fn xdp_ctx(data_len: usize, ingress_ifindex: u32) -> [u32; 6] {
    [0, data_len as u32, 0, ingress_ifindex, 0, 0]
}

pub use natrix::dataplane::{XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE};

/// An XDP bpf_link of `prog` on interface `dev` (of the current network namespace), in the
/// mode `flags` names; the link lives as long as the descriptor (or a pin of it).
pub fn xdp_link(prog: RawFd, dev: &str, flags: u32) -> Result<OwnedFd> {
    natrix::dataplane::xdp_link(prog, ifindex(dev)?, flags)
        .map_err(|e| anyhow!("attaching XDP to {dev}: {}", std::io::Error::from_raw_os_error(e)))
}

/// What one BPF_PROG_TEST_RUN returned.
#[derive(Debug, Clone, Copy)]
pub struct RunOut {
    pub retval: u32,
    /// Kernel-measured nanoseconds per repetition (0 in live-frame mode).
    pub duration_ns: u32,
}

/// BPF_PROG_TEST_RUN on an XDP program: `repeat` runs over `data`, with the ingress
/// interface set. `flags` may hold BPF_F_TEST_XDP_LIVE_FRAMES; `batch` is the live-frame
/// batch size (0: the kernel's default of 64).
pub fn xdp_test_run(
    prog_fd: RawFd,
    data: &[u8],
    ingress_ifindex: u32,
    repeat: u32,
    flags: u32,
    batch: u32,
) -> Result<RunOut> {
    let ctx = xdp_ctx(data.len(), ingress_ifindex);
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        data_in: data.as_ptr().cast(),
        data_size_in: data.len() as u32,
        ctx_in: ctx.as_ptr().cast(),
        ctx_size_in: std::mem::size_of_val(&ctx) as u32,
        repeat: repeat.min(i32::MAX as u32) as i32,
        flags,
        batch_size: batch,
        ..Default::default()
    };
    // SAFETY: every pointer in opts refers to a live buffer of the stated length.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog_fd, &mut opts) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        bail!("BPF_PROG_TEST_RUN: {err}");
    }
    Ok(RunOut { retval: opts.retval, duration_ns: opts.duration })
}

/// Run time statistics (`kernel.bpf_stats_enabled`) for as long as this lives: the
/// BPF_ENABLE_STATS file descriptor turns them on and its closing turns them off again,
/// so a crashed benchmark never leaves them on. They cost two clock reads per program run,
/// so throughput is never measured with them on.
pub struct BpfStats(OwnedFd);

impl BpfStats {
    pub fn enable() -> Result<Self> {
        // SAFETY: plain syscall wrapper.
        let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
        if fd < 0 {
            bail!("BPF_ENABLE_STATS: {}", std::io::Error::from_raw_os_error(-fd));
        }
        // SAFETY: a fresh fd we own.
        Ok(BpfStats(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// (run_time_ns, run_cnt) of a program.
pub fn prog_run_stats(prog_fd: RawFd) -> Result<(u64, u64)> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info is a properly sized out-buffer.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog_fd, &mut info, &mut len) };
    if rc != 0 {
        bail!("BPF_OBJ_GET_INFO_BY_FD: {}", std::io::Error::last_os_error());
    }
    Ok((info.run_time_ns, info.run_cnt))
}

/// The program behind a pinned bpf_link (an XDP attachment), as an fd of our own.
pub fn prog_of_link_pin(pin: &Path) -> Result<OwnedFd> {
    let c = std::ffi::CString::new(pin.as_os_str().as_encoded_bytes())?;
    // SAFETY: valid NUL-terminated path.
    let lfd = unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) };
    if lfd < 0 {
        bail!("opening {}: {}", pin.display(), std::io::Error::last_os_error());
    }
    // SAFETY: fresh fd we own.
    let link = unsafe { OwnedFd::from_raw_fd(lfd) };
    let mut info = libbpf_sys::bpf_link_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_link_info>() as u32;
    // SAFETY: info is a properly sized out-buffer.
    let rc = unsafe { libbpf_sys::bpf_link_get_info_by_fd(link.as_raw_fd(), &mut info, &mut len) };
    if rc != 0 {
        bail!("link info of {}: {}", pin.display(), std::io::Error::last_os_error());
    }
    // SAFETY: plain syscall wrapper.
    let pfd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(info.prog_id) };
    if pfd < 0 {
        bail!("program {} of {}: {}", info.prog_id, pin.display(), std::io::Error::last_os_error());
    }
    // SAFETY: fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(pfd) })
}

/// The kernel's accounting of a map's memory (`memlock` in its fdinfo): the same figure
/// `bpftool map show` prints, computed by the map type itself (buckets, preallocated
/// elements, per-CPU parts).
pub fn map_memlock(map_fd: RawFd) -> Result<u64> {
    let path = format!("/proc/self/fdinfo/{map_fd}");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("memlock:").map(|v| v.trim().parse::<u64>()))
        .ok_or_else(|| anyhow!("{path}: no memlock line"))?
        .context("memlock value")
}

/// Index of an interface in the current network namespace.
pub fn ifindex(name: &str) -> Result<u32> {
    let c = std::ffi::CString::new(name)?;
    // SAFETY: valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        bail!("no interface {name} in this network namespace");
    }
    Ok(i)
}

/// Hardware address of an interface in the current network namespace (SIOCGIFHWADDR on a
/// socket of this namespace: /sys/class/net may belong to another one under nsenter).
pub fn mac_of(name: &str) -> Result<[u8; 6]> {
    // SAFETY: plain socket call; the fd is closed below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    if s < 0 {
        bail!("socket: {}", std::io::Error::last_os_error());
    }
    // SAFETY: we own s.
    let sock = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: ifreq is plain C data (integers, arrays, a union of them): all zeroes is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        bail!("interface name {name} too long");
    }
    for (d, b) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = b as libc::c_char;
    }
    // SAFETY: req is a valid ifreq for SIOCGIFHWADDR.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) } != 0 {
        bail!("SIOCGIFHWADDR {name}: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the union holds a sockaddr after SIOCGIFHWADDR.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    Ok(mac)
}

pub fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        bail!("bad MAC address {s:?}");
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).with_context(|| format!("bad MAC address {s:?}"))?;
    }
    Ok(mac)
}

/// Pins the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    // SAFETY: cpu_set_t is plain data; sched_setaffinity on the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            bail!("sched_setaffinity({cpu}): {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Kilobytes the kernel reports as not available (MemTotal - MemAvailable): a coarse
/// cross-check of the per-map accounting.
pub fn mem_used_kib() -> Result<u64> {
    let text = fs::read_to_string("/proc/meminfo")?;
    let get = |k: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>()))
            .ok_or_else(|| anyhow!("/proc/meminfo: no {k}"))?
            .map_err(Into::into)
    };
    Ok(get("MemTotal:")? - get("MemAvailable:")?)
}

/// A short description of the machine for the report.
pub fn machine() -> serde_json::Value {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let mhz = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("cpu MHz").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let mem_kib = fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().trim_end_matches("kB").trim().to_string()))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: utsname is arrays of c_char: all zeroes is valid.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::uname(&mut uts) };
    let cstr = |b: &[libc::c_char]| {
        // SAFETY: uname NUL-terminates its fields.
        unsafe { std::ffi::CStr::from_ptr(b.as_ptr()) }.to_string_lossy().into_owned()
    };
    let clocksource = fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .unwrap_or_default()
        .trim()
        .to_string();
    serde_json::json!({
        "cpu": model,
        "cpu_mhz": mhz,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "mem_gib": (mem_kib as f64 / 1048576.0 * 10.0).round() / 10.0,
        "kernel": cstr(&uts.release),
        "clocksource": clocksource,
    })
}
