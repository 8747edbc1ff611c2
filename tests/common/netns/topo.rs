// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The end-to-end topology on the namespace framework (tests/common/netns/mod.rs): a gateway
//! running the real `natrix` binary between two subscriber namespaces and a server
//! namespace, as in scripts/netns-lib.sh:
//!
//! ```text
//!   s1 (100.64.0.2) --- lan0 [100.64.0.1]            [198.51.100.1] wan0 --- srv (198.51.100.2)
//!   s2 (100.64.1.2) --- lan1 [100.64.1.1]   gateway                          routes the pool via gw
//! ```
//!
//! Every [`Topo`] has its own namespaces ([`Netns`]), pin directory
//! (`/sys/fs/bpf/natrix-test-<pid>-<n>`) and scratch directory; its `Drop` kills the daemon it
//! started, runs `natrix down` and deletes the namespaces, also when the test panics (and then
//! prints the daemon logs). Traffic is generated from the test process itself: a thread enters
//! a namespace with setns(2) and the sockets it creates stay in that namespace (traffic.rs).
//!
//! Every wait is bounded: commands run with a timeout, polls have deadlines.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use super::*;

pub const NATRIX: &str = env!("CARGO_BIN_EXE_natrix");

pub const SUB1_IP: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 2);
pub const SUB2_IP: Ipv4Addr = Ipv4Addr::new(100, 64, 1, 2);
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
/// The pool of the generated config: 203.0.113.16/29 and 203.0.113.40.
pub const POOL_PREFIX: (Ipv4Addr, u8) = (Ipv4Addr::new(203, 0, 113, 16), 29);
pub const POOL_SINGLE: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 40);
/// How long `natrix run` may take to log `ready`: a bound, not a measurement. A fresh load
/// runs the BPF verifier for a second or two of CPU here, several on a slow or loaded
/// machine (two tests start daemons at once on 2 cores; emulation is slower still).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The last `n` lines of a daemon's log: why it did not become ready.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub fn is_pool(ip: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - POOL_PREFIX.1);
    (u32::from(ip) & mask) == u32::from(POOL_PREFIX.0) || ip == POOL_SINGLE
}

pub fn is_subscriber(ip: Ipv4Addr) -> bool {
    ip.octets()[0] == 100 && (ip.octets()[1] & 0xc0) == 64
}

/// Removes ANSI colour sequences (tracing's formatter may emit them).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\u{1b}' && it.peek() == Some(&'[') {
            it.next();
            for c in it.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// natrix state as the CLI shows it

/// One row of `natrix sessions --json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub proto: String,
    pub inside: String,
    pub outside: String,
    pub remote: String,
    pub state: String,
    pub expires_in: i64,
    pub direction: String,
}

impl Session {
    fn from_json(v: &serde_json::Value) -> Self {
        let s = |k: &str| {
            v.get(k)
                .and_then(|x| x.as_str())
                .unwrap_or_else(|| panic!("session row without string field {k:?}: {v}"))
                .to_owned()
        };
        Session {
            proto: s("proto"),
            inside: s("inside"),
            outside: s("outside"),
            remote: s("remote"),
            state: s("state"),
            expires_in: v
                .get("expires_in")
                .and_then(|x| x.as_i64())
                .unwrap_or_else(|| panic!("session row without expires_in: {v}")),
            direction: s("direction"),
        }
    }

    pub fn inside_addr(&self) -> SocketAddrV4 {
        v4(&self.inside)
    }

    /// Panics when the session has no mapping ("-").
    pub fn outside_addr(&self) -> SocketAddrV4 {
        v4(&self.outside)
    }
}

/// `natrix stats --json`.
#[derive(Debug, Clone)]
pub struct Stats(pub serde_json::Value);

impl Stats {
    pub fn counter(&self, name: &str) -> u64 {
        self.0["counters"][name].as_u64().unwrap_or_else(|| panic!("no counter {name:?} in {}", self.0))
    }
    pub fn drop_count(&self, reason: &str) -> u64 {
        self.0["drops"][reason].as_u64().unwrap_or_else(|| panic!("no drop reason {reason:?} in {}", self.0))
    }
    pub fn get(&self, key: &str) -> u64 {
        self.0[key].as_u64().unwrap_or_else(|| panic!("no {key:?} in {}", self.0))
    }
}

// ---------------------------------------------------------------------------------------
// configs

/// A config file as (section, key) -> raw TOML value, rendered in a fixed section order.
#[derive(Debug, Clone)]
pub struct Conf(BTreeMap<(usize, String), Vec<(String, String)>>);

const SECTIONS: [&str; 6] = ["interfaces", "pool", "nat", "timeouts", "limits", "daemon"];

impl Conf {
    /// examples/demo.toml with the given pin directory.
    pub fn demo(pin: &Path) -> Self {
        let mut c = Conf(BTreeMap::new());
        c.set("interfaces.inside", r#"["lan0", "lan1"]"#)
            .set("interfaces.outside", r#"["wan0"]"#)
            .set("pool.addresses", r#"["203.0.113.16/29", "203.0.113.40"]"#)
            .set("pool.ports", r#""1024-65535""#)
            .set("nat.block_size", "256")
            .set("nat.max_blocks_per_subscriber", "4")
            .set("timeouts.udp", r#""5m""#)
            .set("timeouts.tcp_established", r#""2h4m""#)
            .set("timeouts.tcp_transitory", r#""4m""#)
            .set("timeouts.icmp", r#""60s""#)
            .set("daemon.pin_path", &format!("{:?}", pin.display().to_string()));
        c
    }

    /// Sets `section.key` to a raw TOML value (strings with their quotes).
    pub fn set(&mut self, dotted: &str, value: &str) -> &mut Self {
        let (sec, key) = dotted.split_once('.').expect("section.key");
        let idx = SECTIONS.iter().position(|s| *s == sec).unwrap_or(SECTIONS.len());
        let entries = self.0.entry((idx, sec.to_owned())).or_default();
        match entries.iter_mut().find(|(k, _)| k == key) {
            Some(e) => e.1 = value.to_owned(),
            None => entries.push((key.to_owned(), value.to_owned())),
        }
        self
    }

    /// Removes `section.key`.
    pub fn unset(&mut self, dotted: &str) -> &mut Self {
        let (sec, key) = dotted.split_once('.').expect("section.key");
        for ((_, s), entries) in self.0.iter_mut() {
            if s == sec {
                entries.retain(|(k, _)| k != key);
            }
        }
        self
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for ((_, sec), entries) in &self.0 {
            out += &format!("[{sec}]\n");
            for (k, v) in entries {
                out += &format!("{k} = {v}\n");
            }
            out += "\n";
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// the topology

static COUNTER: AtomicUsize = AtomicUsize::new(0);
static SWEEP_STALE: Once = Once::new();

/// Removes what an earlier, killed run of this suite left behind beside its namespaces
/// (which the framework sweeps): pin and scratch directories named after a test process
/// that no longer exists. Nothing else is touched.
fn sweep_stale() {
    if let Ok(rd) = std::fs::read_dir("/sys/fs/bpf") {
        for e in rd.flatten().take(10_000) {
            if stale(&e.file_name().to_string_lossy(), "natrix-test-") {
                sh_quiet(&[NATRIX, "down", "--pin", &e.path().display().to_string()]);
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
        for e in rd.flatten().take(10_000) {
            if stale(&e.file_name().to_string_lossy(), "natrix-netns-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

struct Daemon {
    child: Child,
}

/// Two subscribers, a gateway and a server, in fresh namespaces; plus the daemon when
/// started. Everything is removed on drop.
pub struct Topo {
    pub tag: String,
    pub gw: String,
    pub s1: String,
    pub s2: String,
    pub srv: String,
    /// daemon.pin_path of the configs this topology writes.
    pub pin: PathBuf,
    /// Scratch directory: configs and daemon logs.
    pub dir: PathBuf,
    /// The namespaces, deleted last (in reverse order) at drop.
    nss: Vec<Netns>,
    daemon: Option<Daemon>,
    logs: Vec<PathBuf>,
    extra_pins: Vec<PathBuf>,
}

impl Topo {
    pub fn new() -> Self {
        SWEEP_STALE.call_once(sweep_stale);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("topo {pid}-{n}");
        let dir = std::env::temp_dir().join(format!("natrix-netns-{pid}-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // should a step fail, the namespaces made so far go with this vector, and the
        // others with the Topo's Drop
        let mut nss = Vec::new();
        for role in ["gw", "s1", "s2", "srv"] {
            nss.push(Netns::new(role));
        }
        let t = Topo {
            gw: nss[0].name().to_owned(),
            s1: nss[1].name().to_owned(),
            s2: nss[2].name().to_owned(),
            srv: nss[3].name().to_owned(),
            pin: PathBuf::from(format!("/sys/fs/bpf/natrix-test-{pid}-{n}")),
            tag,
            dir,
            nss,
            daemon: None,
            logs: Vec::new(),
            extra_pins: Vec::new(),
        };
        let (gw, s1, s2, srv) = (t.gw.as_str(), t.s1.as_str(), t.s2.as_str(), t.srv.as_str());
        for (gw_if, peer) in [("lan0", s1), ("lan1", s2), ("wan0", srv)] {
            veth(end(gw, gw_if), end(peer, "eth0"));
        }
        for (ns, dev, addr) in [
            (gw, "lan0", "100.64.0.1/24"),
            (gw, "lan1", "100.64.1.1/24"),
            (gw, "wan0", "198.51.100.1/24"),
            (s1, "eth0", "100.64.0.2/24"),
            (s2, "eth0", "100.64.1.2/24"),
            (srv, "eth0", "198.51.100.2/24"),
        ] {
            ns_ip(ns, &["addr", "add", addr, "dev", dev]);
            ns_ip(ns, &["link", "set", dev, "up"]);
        }
        ns_ip(s1, &["route", "add", "default", "via", "100.64.0.1"]);
        ns_ip(s2, &["route", "add", "default", "via", "100.64.1.1"]);
        ns_ip(gw, &["route", "add", "default", "via", "198.51.100.2"]);
        ns_ip(srv, &["route", "add", "203.0.113.16/29", "via", "198.51.100.1"]);
        ns_ip(srv, &["route", "add", "203.0.113.40", "via", "198.51.100.1"]);
        // XDP-redirected frames need GRO on the receiving veth; software checksums and
        // MTU-sized frames are what a wire carries (scripts/netns-lib.sh).
        for ns in [s1, s2, srv] {
            ns_sh(ns, &["ethtool", "-K", "eth0", "gro", "on", "tx", "off", "tso", "off", "gso", "off"]);
        }
        t
    }

    /// Another pin directory a test uses; `natrix down` runs on it at drop time.
    pub fn add_cleanup_pin(&mut self, pin: &Path) {
        self.extra_pins.push(pin.to_path_buf());
    }

    /// The demo configuration with this topology's pin directory.
    pub fn conf(&self) -> Conf {
        Conf::demo(&self.pin)
    }

    /// Writes a config file into the scratch directory.
    pub fn write_config(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn natrix_in_gw(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.gw)).arg(NATRIX).env("NO_COLOR", "1");
        // SAFETY: prctl is async-signal-safe. Should the test process be killed, the daemon
        // dies with the thread that started it (the one that owns this Topo) instead of
        // lingering; nsenter keeps the setting across its exec of natrix.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        c
    }

    /// `natrix <args>` inside the gateway namespace, with a timeout.
    pub fn natrix(&self, args: &[&str]) -> Output {
        run_timeout(self.natrix_in_gw().args(args), CMD_TIMEOUT)
    }

    /// Like [`Topo::natrix`], must succeed; returns stdout.
    pub fn natrix_ok(&self, args: &[&str]) -> String {
        stdout_of_success(&(&"natrix", args), &self.natrix(args))
    }

    pub fn pin_str(&self) -> String {
        self.pin.display().to_string()
    }

    pub fn sessions(&self) -> Vec<Session> {
        let text = self.natrix_ok(&["sessions", "--json", "--pin", &self.pin_str()]);
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("sessions --json: {e}: {text}"));
        v.as_array()
            .unwrap_or_else(|| panic!("sessions --json is not an array: {text}"))
            .iter()
            .map(Session::from_json)
            .collect()
    }

    pub fn stats(&self) -> Stats {
        let text = self.natrix_ok(&["stats", "--json", "--pin", &self.pin_str()]);
        Stats(serde_json::from_str(&text).unwrap_or_else(|e| panic!("stats --json: {e}: {text}")))
    }

    /// `natrix run --config <config>` in the gateway, its stderr to `log`.
    fn spawn_run(&self, config: &Path, extra: &[&str], log: File) -> std::process::Child {
        self.natrix_in_gw()
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn natrix run")
    }

    /// Starts `natrix run --config <config>` in the gateway and waits for `ready`.
    /// Returns the log so far.
    pub fn start_daemon(&mut self, config: &Path) -> String {
        self.start_daemon_with(config, &[])
    }

    /// [`Topo::start_daemon`] with more arguments to `natrix run` (`--reload`).
    pub fn start_daemon_with(&mut self, config: &Path, extra: &[&str]) -> String {
        assert!(self.daemon.is_none(), "a daemon is already running");
        let log = self.dir.join(format!("daemon-{}.log", self.logs.len()));
        self.logs.push(log.clone());
        let child = self.spawn_run(config, extra, File::create(&log).unwrap());
        self.daemon = Some(Daemon { child });
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let text = strip_ansi(&std::fs::read_to_string(&log).unwrap_or_default());
            if text.contains("ready") {
                return text;
            }
            let d = self.daemon.as_mut().unwrap();
            if let Ok(Some(st)) = d.child.try_wait() {
                self.daemon = None;
                panic!(
                    "natrix run exited ({st}) before it was ready; its last lines:\n{}",
                    last_lines(&text, 40)
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "natrix run not ready within {READY_TIMEOUT:?} (still running); its last lines:\n{}",
                    last_lines(&text, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The log of the running (or last) daemon.
    pub fn daemon_log(&self) -> String {
        self.logs
            .last()
            .map(|p| strip_ansi(&std::fs::read_to_string(p).unwrap_or_default()))
            .unwrap_or_default()
    }

    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(|d| d.child.id())
    }

    /// Sends `sig` to the daemon and waits (bounded) for it to exit.
    pub fn stop_daemon(&mut self, sig: libc::c_int) -> ExitStatus {
        let mut d = self.daemon.take().expect("no daemon running");
        // SAFETY: signalling our own, not yet reaped, child by its id.
        unsafe { libc::kill(d.child.id() as libc::pid_t, sig) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = d.child.try_wait().unwrap() {
                return st;
            }
            if Instant::now() >= deadline {
                let _ = d.child.kill();
                let _ = d.child.wait();
                panic!("natrix did not exit within 10 s of signal {sig}:\n{}", self.daemon_log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs `natrix run --config <config>` expecting it to fail: returns its exit status and
    /// stderr. Should it become ready instead, it is stopped and the test fails.
    pub fn run_expect_exit(&self, config: &Path) -> (ExitStatus, String) {
        let log = self.dir.join("failing-run.log");
        let mut child = self.spawn_run(config, &[], File::create(&log).unwrap());
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return (st, strip_ansi(&std::fs::read_to_string(&log).unwrap_or_default()));
            }
            let text = strip_ansi(&std::fs::read_to_string(&log).unwrap_or_default());
            if text.contains("ready") || Instant::now() >= deadline {
                // SAFETY: our own child, by id.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                let _ = child.wait();
                panic!("natrix run was expected to fail, but it did not exit:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `ip -d link show <dev>` of the gateway.
    pub fn gw_link(&self, dev: &str) -> String {
        ns_ip(&self.gw, &["-d", "link", "show", dev])
    }

    /// Whether an XDP program is attached to a gateway interface.
    pub fn xdp_attached(&self, dev: &str) -> bool {
        self.gw_link(dev).contains("xdp")
    }

    pub fn ip_of(&self, ns: &str) -> Ipv4Addr {
        if ns == self.s1 {
            SUB1_IP
        } else if ns == self.s2 {
            SUB2_IP
        } else if ns == self.srv {
            SERVER_IP
        } else {
            panic!("no address for {ns}")
        }
    }
}

impl Topo {
    /// Gives the server namespace another address on its link (e.g. "198.51.100.3/24").
    pub fn add_server_addr(&self, cidr: &str) {
        ns_ip(&self.srv, &["addr", "add", cidr, "dev", "eth0"]);
    }

    /// Sets the MTU of a gateway interface.
    pub fn set_gw_mtu(&self, dev: &str, mtu: u32) {
        ns_ip(&self.gw, &["link", "set", dev, "mtu", &mtu.to_string()]);
    }
}

impl Default for Topo {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.child.kill();
            let _ = d.child.wait();
        }
        if std::thread::panicking() {
            for (i, p) in self.logs.iter().enumerate() {
                let text = strip_ansi(&std::fs::read_to_string(p).unwrap_or_default());
                eprintln!("---- {}: natrix run #{i} log ----\n{text}", self.tag);
            }
            if self.pin.exists() {
                if let Ok(out) = std::panic::catch_unwind(|| {
                    let s = run_timeout(
                        Command::new(NATRIX).args(["stats", "--pin", &self.pin_str()]),
                        Duration::from_secs(5),
                    );
                    String::from_utf8_lossy(&s.stdout).into_owned()
                }) {
                    eprintln!("---- {}: natrix stats ----\n{out}", self.tag);
                }
            }
        }
        sh_quiet(&[NATRIX, "down", "--pin", &self.pin_str()]);
        for p in &self.extra_pins {
            sh_quiet(&[NATRIX, "down", "--pin", &p.display().to_string()]);
        }
        while let Some(ns) = self.nss.pop() {
            drop(ns);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
