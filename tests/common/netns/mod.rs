// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The namespace test framework: the one place where the Rust tests create, enter, use and
//! remove network namespaces (scripts/netns-lib.sh is the shell counterpart of the demo).
//!
//! * Naming: every namespace is `nxt<pid>-<seq>-<role>`, unique in the machine while the
//!   test process lives. The first creation in a process removes the `nxt*` namespaces of
//!   test processes that no longer exist (killed runs: SIGKILL runs no drop).
//! * [`Netns`]: a namespace with its loopback up, deleted on drop, also when the test
//!   panics; creation and deletion are serialised within the process.
//! * [`veth`]: a veth pair between two namespaces (or inside one), MACs optional.
//! * Entering: [`enter_netns`] moves the calling thread (setns(2)); [`in_netns`] and
//!   [`spawn_in_netns`] run a closure on a thread inside; sockets made there ([`socket_in`])
//!   stay in that namespace whichever thread uses them.
//! * Commands, every one with a time bound: [`run_timeout`], [`sh`], [`ns_exec`] and
//!   [`ns_sh`] (`ip netns exec`, which also gives the command the namespace's /sys),
//!   [`BgProcess`] for a server that runs beside the test; [`wait_for`] for bounded polls.
//!
//! Built on it: [`topo`] (the end-to-end gateway topology running the `natrix` binary),
//! [`traffic`] (sockets, TCP/UDP traffic, packet capture), and the BPF_PROG_TEST_RUN
//! namespace of tests/common/pkt.rs (`pkt_netns`).

pub mod topo;
pub mod traffic;

#[allow(unused_imports)] // each test uses some
pub use topo::*;
#[allow(unused_imports)] // each test uses some
pub use traffic::*;

use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Upper bound for any one-shot command (ip, ethtool, natrix CLI).
pub const CMD_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// processes

/// Runs a command to completion within `timeout`, `input` (if any) on its stdin, output
/// captured. Err names the command and what went wrong: it could not start, or it was
/// killed (SIGKILL) for running over. Never panics (usable in Drop).
pub fn run_bounded(cmd: &mut Command, input: Option<&str>, timeout: Duration) -> Result<Output, String> {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {desc}: {e} (tests need root and iproute2)"))?;
    let pid = child.id() as libc::pid_t;
    let stdin = child.stdin.take();
    let input = input.map(str::to_owned);
    let (tx, rx) = std::sync::mpsc::channel();
    // stdin is written on the waiter thread, so that the time bound covers it too
    let waiter = std::thread::spawn(move || {
        if let (Some(mut w), Some(text)) = (stdin, input) {
            let _ = w.write_all(text.as_bytes());
        }
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => {
            let _ = waiter.join();
            out.map_err(|e| format!("waiting for {desc}: {e}"))
        }
        Err(_) => {
            // SAFETY: signalling the child we spawned above, by its id; it has not been
            // reaped yet (the waiter thread is still in wait).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = rx.recv_timeout(Duration::from_secs(5));
            Err(format!("{desc} did not finish within {timeout:?}"))
        }
    }
}

/// Runs a command to completion with a timeout (killed when over), output captured.
pub fn run_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    run_bounded(cmd, None, timeout).unwrap_or_else(|e| panic!("{e}"))
}

/// The stdout of a command that must have succeeded; panics naming it otherwise.
pub fn stdout_of_success(what: &dyn std::fmt::Debug, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command that must succeed within [`CMD_TIMEOUT`]; returns its stdout.
pub fn sh(args: &[&str]) -> String {
    stdout_of_success(&args, &run_timeout(Command::new(args[0]).args(&args[1..]), CMD_TIMEOUT))
}

/// Runs a command whose failure does not matter (cleanup), within [`CMD_TIMEOUT`].
pub fn sh_quiet(args: &[&str]) {
    let _ = run_bounded(Command::new(args[0]).args(&args[1..]), None, CMD_TIMEOUT);
}

/// `ip netns exec <ns> <args>` to completion within `timeout`: the command runs in `ns`
/// with that namespace's /sys mounted.
pub fn ns_exec(ns: &str, args: &[&str], timeout: Duration) -> Output {
    run_timeout(Command::new("ip").args(["netns", "exec", ns]).args(args), timeout)
}

/// Like [`ns_exec`] within [`CMD_TIMEOUT`]; the command must succeed. Returns its stdout.
pub fn ns_sh(ns: &str, args: &[&str]) -> String {
    stdout_of_success(&(ns, args), &ns_exec(ns, args, CMD_TIMEOUT))
}

/// `ip -n <ns> <args>`, which must succeed within [`CMD_TIMEOUT`]; returns its stdout.
pub fn ns_ip(ns: &str, args: &[&str]) -> String {
    let mut a = vec!["ip", "-n", ns];
    a.extend_from_slice(args);
    sh(&a)
}

// ---------------------------------------------------------------------------------------
// namespaces

/// The prefix of every namespace the tests create.
const PREFIX: &str = "nxt";

static SEQ: AtomicUsize = AtomicUsize::new(0);
/// `ip netns add` sets /run/netns up as a shared mount the first time; two doing that at
/// once could stack mounts. Creation and deletion are serialised within the process.
static LOCK: Mutex<()> = Mutex::new(());
static SWEEP: Once = Once::new();

/// Whether `name` is `<prefix><pid>-...` of a process that no longer exists (not this one).
pub fn stale(name: &str, prefix: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix) else { return false };
    let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { return false };
    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
}

/// Deletes the namespaces earlier, killed test processes left behind. Nothing else.
fn sweep_stale_netns() {
    let Ok(rd) = std::fs::read_dir("/run/netns") else { return };
    for e in rd.flatten().take(10_000) {
        let name = e.file_name().to_string_lossy().into_owned();
        if stale(&name, PREFIX) {
            sh_quiet(&["ip", "netns", "del", &name]);
        }
    }
}

/// A network namespace this process created (`nxt<pid>-<seq>-<role>`), loopback up;
/// deleted on drop, also when the test panics. Threads and sockets still inside keep it
/// alive until they are gone; only its name goes.
pub struct Netns {
    name: String,
}

impl Netns {
    pub fn new(role: &str) -> Netns {
        let name = format!("{PREFIX}{}-{}-{role}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        {
            let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
            SWEEP.call_once(sweep_stale_netns);
            sh(&["ip", "netns", "add", &name]);
        }
        // from here on Drop deletes it, should a step fail
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n <ns> <args>`, which must succeed; returns its stdout.
    pub fn ip(&self, args: &[&str]) -> String {
        ns_ip(&self.name, args)
    }

    /// `ip -n <ns> -batch -` with `batch` (one command a line), which must succeed.
    pub fn ip_batch(&self, batch: &str) {
        let out =
            run_bounded(Command::new("ip").args(["-n", &self.name, "-batch", "-"]), Some(batch), CMD_TIMEOUT)
                .unwrap_or_else(|e| panic!("{e}"));
        stdout_of_success(&format_args!("ip -n {} -batch with\n{batch}", self.name), &out);
    }

    /// Waits (`timeout` at most, polling every 5 ms) until every one of `links` reports
    /// carrier (state UP): linkwatch sends that notification up to a second after
    /// `link set up`, later while other namespaces come and go. Err with `ip link`'s last
    /// answer when the time is up.
    pub fn wait_carrier(&self, links: &[&str], timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let text = self.ip(&["-o", "link", "show"]);
            let up = |l: &str| {
                text.lines().any(|line| line.contains(&format!(" {l}@")) && line.contains("state UP"))
            };
            if links.iter().all(|l| up(l)) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(text);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        sh_quiet(&["ip", "netns", "del", &self.name]);
    }
}

/// One end of a veth pair: its namespace, its name there, and its MAC (else the kernel's).
pub struct End<'a> {
    ns: &'a str,
    dev: &'a str,
    mac: Option<[u8; 6]>,
}

pub fn end<'a>(ns: &'a str, dev: &'a str) -> End<'a> {
    End { ns, dev, mac: None }
}

impl End<'_> {
    pub fn mac(mut self, mac: [u8; 6]) -> Self {
        self.mac = Some(mac);
        self
    }

    fn args(&self) -> Vec<String> {
        let mut a = vec![self.dev.to_owned()];
        if let Some(m) = self.mac {
            a.push("address".into());
            a.push(m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"));
        }
        a.extend(["netns".into(), self.ns.to_owned()]);
        a
    }
}

/// Creates a veth pair from `a` to `b`, each end made directly in its namespace (so two
/// tests may use the same interface names at once). Both ends stay down.
pub fn veth(a: End, b: End) {
    let mut args: Vec<String> = vec!["ip".into(), "link".into(), "add".into()];
    args.extend(a.args());
    args.extend(["type".into(), "veth".into(), "peer".into(), "name".into()]);
    args.extend(b.args());
    sh(&args.iter().map(String::as_str).collect::<Vec<_>>());
}

// ---------------------------------------------------------------------------------------
// inside a namespace

/// Moves the calling thread into network namespace `ns` (a name under /run/netns).
pub fn enter_netns(ns: &str) {
    let path = format!("/run/netns/{ns}");
    let f = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    // SAFETY: a valid namespace fd; CLONE_NEWNET affects only the calling thread.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns({path}): {}", std::io::Error::last_os_error());
}

/// Runs `f` on a thread inside namespace `ns` and returns its result (panics propagate).
/// Sockets created by `f` keep living in `ns` whichever thread uses them afterwards.
pub fn in_netns<T: Send, F: FnOnce() -> T + Send>(ns: &str, f: F) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_netns(ns);
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Like [`in_netns`], without waiting.
pub fn spawn_in_netns<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(ns: &str, f: F) -> JoinHandle<T> {
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        enter_netns(&ns);
        f()
    })
}

/// `socket(domain, ty | SOCK_CLOEXEC, proto)` made in namespace `ns`.
pub fn socket_in(ns: &str, domain: i32, ty: i32, proto: i32) -> OwnedFd {
    in_netns(ns, || {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
        assert!(fd >= 0, "{ns}: socket({domain}, {ty}, {proto}): {}", std::io::Error::last_os_error());
        // SAFETY: a fresh fd we own.
        unsafe { OwnedFd::from_raw_fd(fd) }
    })
}

/// SO_RCVTIMEO: a blocking receive on `fd` gives up after `t`.
pub fn set_rcvtimeo(fd: &OwnedFd, t: Duration) {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: a valid fd and timeval.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        )
    };
    assert_eq!(rc, 0, "SO_RCVTIMEO: {}", std::io::Error::last_os_error());
}

// ---------------------------------------------------------------------------------------
// waiting

/// Polls `f` every `step` until it returns Some, or panics with `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, step: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(step);
    }
}

// ---------------------------------------------------------------------------------------
// programs beside the test

/// A long-running program in a namespace (a server the test talks to), its stdout and
/// stderr in a file. Killed by its id (and reaped) on drop; it also dies with the thread
/// that started it should the test process be killed.
pub struct BgProcess {
    child: Option<Child>,
    pub log: PathBuf,
}

impl BgProcess {
    pub fn start(ns: &str, args: &[&str], log: PathBuf) -> Self {
        use std::os::unix::process::CommandExt;
        let out = File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let err = out.try_clone().unwrap();
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl is async-signal-safe; `ip netns exec` keeps it across its exec.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = c.spawn().unwrap_or_else(|e| panic!("cannot start {args:?} in {ns}: {e}"));
        BgProcess { child: Some(child), log }
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics (with its output) if the program has exited.
    pub fn assert_running(&mut self, what: &str) {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                self.child = None;
                panic!("{what} exited ({st}):\n{}", self.output());
            }
        }
    }
}

impl Drop for BgProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
