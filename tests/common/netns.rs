// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Network-namespace harness for the end-to-end tests: a gateway running the real `natrix`
//! binary between two subscriber namespaces and a server namespace, as in
//! scripts/netns-lib.sh:
//!
//! ```text
//!   s1 (100.64.0.2) --- lan0 [100.64.0.1]            [198.51.100.1] wan0 --- srv (198.51.100.2)
//!   s2 (100.64.1.2) --- lan1 [100.64.1.1]   gateway                          routes the pool via gw
//! ```
//!
//! Every [`Topo`] has its own namespaces (`nxe<pid>-<n>-*`), pin directory
//! (`/sys/fs/bpf/natrix-test-<pid>-<n>`) and scratch directory; its `Drop` kills the daemon it
//! started, runs `natrix down` and deletes the namespaces, also when the test panics (and then
//! prints the daemon logs). Traffic is generated from the test process itself: a thread enters
//! a namespace with setns(2) and the sockets it creates stay in that namespace.
//!
//! Every wait is bounded: commands run with a timeout, polls have deadlines.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const NATRIX: &str = env!("CARGO_BIN_EXE_natrix");

pub const SUB1_IP: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 2);
pub const SUB2_IP: Ipv4Addr = Ipv4Addr::new(100, 64, 1, 2);
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
/// The pool of the generated config: 203.0.113.16/29 and 203.0.113.40.
pub const POOL_PREFIX: (Ipv4Addr, u8) = (Ipv4Addr::new(203, 0, 113, 16), 29);
pub const POOL_SINGLE: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 40);

/// Upper bound for any one-shot command (ip, ethtool, natrix CLI).
const CMD_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `natrix run` may take to log `ready`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Socket read/write timeout: no test blocks forever on a lost packet.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

pub fn is_pool(ip: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - POOL_PREFIX.1);
    (u32::from(ip) & mask) == u32::from(POOL_PREFIX.0) || ip == POOL_SINGLE
}

pub fn is_subscriber(ip: Ipv4Addr) -> bool {
    ip.octets()[0] == 100 && (ip.octets()[1] & 0xc0) == 64
}

/// Parses "a.b.c.d:port".
pub fn v4(s: &str) -> SocketAddrV4 {
    s.parse().unwrap_or_else(|e| panic!("{s:?} is not ip:port: {e}"))
}

pub fn v4_of(a: SocketAddr) -> SocketAddrV4 {
    match a {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(a) => panic!("unexpected IPv6 address {a}"),
    }
}

// ---------------------------------------------------------------------------------------
// processes

/// Runs a command to completion with a timeout (killed when over), output captured.
pub fn run_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let desc = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {desc}: {e}"));
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => {
            let _ = waiter.join();
            out.unwrap_or_else(|e| panic!("waiting for {desc}: {e}"))
        }
        Err(_) => {
            // SAFETY: signalling the child we spawned above, by its id; it has not been
            // reaped yet (the waiter thread is still in wait).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = rx.recv_timeout(Duration::from_secs(5));
            panic!("{desc} did not finish within {timeout:?}");
        }
    }
}

/// The stdout of a command that must have succeeded; panics naming it otherwise.
fn stdout_of_success(what: &dyn std::fmt::Debug, out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{what:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command that must succeed; returns its stdout.
pub fn sh(args: &[&str]) -> String {
    stdout_of_success(&args, &run_timeout(Command::new(args[0]).args(&args[1..]), CMD_TIMEOUT))
}

/// Runs a command whose failure does not matter (cleanup).
fn sh_quiet(args: &[&str]) {
    let _ = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
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
// namespaces from threads

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

/// A UDP socket in `ns`, bound to `bind`, with a read timeout of `timeout`.
pub fn udp_socket(ns: &str, bind: SocketAddrV4, timeout: Duration) -> UdpSocket {
    let s = in_netns(ns, || UdpSocket::bind(bind)).unwrap_or_else(|e| panic!("{ns}: bind udp {bind}: {e}"));
    s.set_read_timeout(Some(timeout)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// Receives one datagram, or None on timeout.
pub fn udp_recv(s: &UdpSocket) -> Option<(Vec<u8>, SocketAddrV4)> {
    let mut buf = [0u8; 2048];
    match s.recv_from(&mut buf) {
        Ok((n, from)) => Some((buf[..n].to_vec(), v4_of(from))),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => None,
        Err(e) => panic!("udp recv on {:?}: {e}", s.local_addr()),
    }
}

/// Every datagram that arrives within `window`.
pub fn udp_drain(s: &UdpSocket, window: Duration) -> Vec<(Vec<u8>, SocketAddrV4)> {
    let deadline = Instant::now() + window;
    let mut got = Vec::new();
    while got.len() < 10_000 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match udp_recv(s) {
            Some(d) => got.push(d),
            None => break,
        }
    }
    got
}

/// `ping -c count` from namespace `ns`; returns the number of replies received.
pub fn ping(ns: &str, dst: Ipv4Addr, count: u32) -> u32 {
    let out = run_timeout(
        Command::new("ip").args(["netns", "exec", ns, "ping", "-n", "-c", &count.to_string()]).args([
            "-i",
            "0.2",
            "-W",
            "1",
            &dst.to_string(),
        ]),
        Duration::from_secs(5 + u64::from(count)),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let i = l.find(" received")?;
            l[..i].rsplit(' ').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("cannot parse ping output: {text}{}", String::from_utf8_lossy(&out.stderr)))
}

// ---------------------------------------------------------------------------------------
// payload checks

/// The byte at `offset` of every bulk transfer: not periodic over any short stretch, so a
/// lost, duplicated or reordered segment shows.
pub fn pattern(offset: u64) -> u8 {
    let x = offset.wrapping_add(0x5851_f42d).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8 ^ (offset >> 24) as u8
}

pub fn fill_pattern(buf: &mut [u8], offset: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(offset + i as u64);
    }
}

/// FNV-1a, 64 bits.
#[derive(Clone, Copy)]
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn update(&mut self, data: &[u8]) {
        for b in data {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

// ---------------------------------------------------------------------------------------
// TCP server and client

/// A TCP server in a namespace, one thread per connection, speaking a line protocol:
/// - `WHO` -> `<peer ip:port>`: the address the server sees (translated or not)
/// - `GET n` -> n bytes of [`pattern`]
/// - `PUT n` + n bytes -> `OK <n> <fnv hex> <peer>`
/// - `QUIT` -> closes
pub struct TcpServer {
    pub addr: SocketAddrV4,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl TcpServer {
    pub fn start(ns: &str, ip: Ipv4Addr) -> Self {
        let listener = in_netns(ns, || TcpListener::bind(SocketAddrV4::new(ip, 0)))
            .unwrap_or_else(|e| panic!("{ns}: listen on {ip}: {e}"));
        let addr = v4_of(listener.local_addr().unwrap());
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let accept = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(300);
            let mut accepted = 0;
            while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline && accepted < 1000 {
                match listener.accept() {
                    Ok((s, peer)) => {
                        accepted += 1;
                        std::thread::spawn(move || serve_conn(s, v4_of(peer)));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
        });
        TcpServer { addr, stop, accept: Some(accept) }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve_conn(s: TcpStream, peer: SocketAddrV4) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    let mut w = match s.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut r = BufReader::new(s);
    for _ in 0..10_000 {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut words = line.split_whitespace();
        let res = match (words.next(), words.next().and_then(|n| n.parse::<u64>().ok())) {
            (Some("WHO"), _) => writeln!(w, "{peer}"),
            (Some("GET"), Some(n)) => {
                let mut buf = vec![0u8; 64 * 1024];
                let mut off = 0u64;
                let mut res = Ok(());
                while off < n && res.is_ok() {
                    let len = (n - off).min(buf.len() as u64) as usize;
                    fill_pattern(&mut buf[..len], off);
                    res = w.write_all(&buf[..len]);
                    off += len as u64;
                }
                res
            }
            (Some("PUT"), Some(n)) => {
                let mut h = Fnv::default();
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = 0u64;
                while got < n {
                    let want = (n - got).min(buf.len() as u64) as usize;
                    match r.read(&mut buf[..want]) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => {
                            h.update(&buf[..k]);
                            got += k as u64;
                        }
                    }
                }
                writeln!(w, "OK {got} {:016x} {peer}", h.0)
            }
            _ => return,
        };
        if res.is_err() {
            return;
        }
    }
}

/// The client side of [`TcpServer`]'s protocol.
pub struct TcpClient {
    r: BufReader<TcpStream>,
    w: TcpStream,
    pub local: SocketAddrV4,
}

impl TcpClient {
    /// Connects from namespace `ns`.
    pub fn connect(ns: &str, to: SocketAddrV4) -> Self {
        let s = in_netns(ns, || TcpStream::connect_timeout(&to.into(), Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("{ns}: connect to {to}: {e}"));
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        let local = v4_of(s.local_addr().unwrap());
        TcpClient { w: s.try_clone().unwrap(), r: BufReader::new(s), local }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        let n = self.r.read_line(&mut l).unwrap_or_else(|e| panic!("{}: reading a reply: {e}", self.local));
        assert!(n > 0, "{}: connection closed by the server", self.local);
        l.trim_end().to_owned()
    }

    /// The address the server sees for this connection.
    pub fn who(&mut self) -> SocketAddrV4 {
        writeln!(self.w, "WHO").unwrap_or_else(|e| panic!("{}: sending WHO: {e}", self.local));
        v4(&self.line())
    }

    /// Downloads n bytes and checks each against [`pattern`]; returns their hash.
    pub fn get(&mut self, n: u64) -> u64 {
        writeln!(self.w, "GET {n}").unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut h = Fnv::default();
        let mut off = 0u64;
        while off < n {
            let want = (n - off).min(buf.len() as u64) as usize;
            let k = self
                .r
                .read(&mut buf[..want])
                .unwrap_or_else(|e| panic!("{}: download stalled at byte {off} of {n}: {e}", self.local));
            assert!(k > 0, "{}: connection closed at byte {off} of {n}", self.local);
            for (i, b) in buf[..k].iter().enumerate() {
                let at = off + i as u64;
                assert_eq!(*b, pattern(at), "{}: download corrupt at byte {at}", self.local);
            }
            h.update(&buf[..k]);
            off += k as u64;
        }
        h.0
    }

    /// Uploads n bytes of [`pattern`]; the server's count and hash must match. Returns the
    /// peer address the server reported.
    pub fn put(&mut self, n: u64) -> SocketAddrV4 {
        writeln!(self.w, "PUT {n}").unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut h = Fnv::default();
        let mut off = 0u64;
        while off < n {
            let len = (n - off).min(buf.len() as u64) as usize;
            fill_pattern(&mut buf[..len], off);
            h.update(&buf[..len]);
            self.w
                .write_all(&buf[..len])
                .unwrap_or_else(|e| panic!("{}: upload stalled at byte {off} of {n}: {e}", self.local));
            off += len as u64;
        }
        let reply = self.line();
        let f: Vec<&str> = reply.split(' ').collect();
        assert_eq!(f.len(), 4, "bad PUT reply {reply:?}");
        assert_eq!(f[0], "OK", "bad PUT reply {reply:?}");
        assert_eq!(f[1].parse::<u64>().unwrap(), n, "server received a different byte count");
        assert_eq!(f[2], format!("{:016x}", h.0), "server received different bytes (hash)");
        v4(f[3])
    }

    /// Half-closes, then waits for the server to close its side (an orderly FIN exchange).
    pub fn close(mut self) {
        let _ = writeln!(self.w, "QUIT");
        let _ = self.w.shutdown(std::net::Shutdown::Write);
        let mut rest = Vec::new();
        let _ = self.r.read_to_end(&mut rest);
    }
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

/// Removes what an earlier, killed run of this suite left behind: namespaces and pin
/// directories named after a test process that no longer exists. Nothing else is touched.
fn sweep_stale() {
    let alive = |name: &str, prefix: &str| -> bool {
        let Some(rest) = name.strip_prefix(prefix) else { return true };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { return true };
        pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
    };
    if let Ok(rd) = std::fs::read_dir("/sys/fs/bpf") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("natrix-test-") && !alive(&name, "natrix-test-") {
                sh_quiet(&[NATRIX, "down", "--pin", &e.path().display().to_string()]);
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("natrix-netns-") && !alive(&name, "natrix-netns-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir("/run/netns") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("nxe") && !alive(&name, "nxe") {
                sh_quiet(&["ip", "netns", "del", &name]);
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
    created: Vec<String>,
    daemon: Option<Daemon>,
    logs: Vec<PathBuf>,
    extra_pins: Vec<PathBuf>,
}

impl Topo {
    pub fn new() -> Self {
        SWEEP_STALE.call_once(sweep_stale);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("nxe{pid}-{n}");
        let dir = std::env::temp_dir().join(format!("natrix-netns-{pid}-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut t = Topo {
            gw: format!("{tag}-gw"),
            s1: format!("{tag}-s1"),
            s2: format!("{tag}-s2"),
            srv: format!("{tag}-srv"),
            pin: PathBuf::from(format!("/sys/fs/bpf/natrix-test-{pid}-{n}")),
            tag,
            dir,
            created: Vec::new(),
            daemon: None,
            logs: Vec::new(),
            extra_pins: Vec::new(),
        };
        // From here on Drop cleans up whatever was created, should a step fail.
        for ns in [t.gw.clone(), t.s1.clone(), t.s2.clone(), t.srv.clone()] {
            sh(&["ip", "netns", "add", &ns]);
            t.created.push(ns.clone());
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        }
        let (gw, s1, s2, srv) = (t.gw.as_str(), t.s1.as_str(), t.s2.as_str(), t.srv.as_str());
        for (gw_if, peer) in [("lan0", s1), ("lan1", s2), ("wan0", srv)] {
            sh(&[
                "ip", "link", "add", gw_if, "netns", gw, "type", "veth", "peer", "name", "eth0", "netns",
                peer,
            ]);
        }
        for (ns, dev, addr) in [
            (gw, "lan0", "100.64.0.1/24"),
            (gw, "lan1", "100.64.1.1/24"),
            (gw, "wan0", "198.51.100.1/24"),
            (s1, "eth0", "100.64.0.2/24"),
            (s2, "eth0", "100.64.1.2/24"),
            (srv, "eth0", "198.51.100.2/24"),
        ] {
            sh(&["ip", "-n", ns, "addr", "add", addr, "dev", dev]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        sh(&["ip", "-n", s1, "route", "add", "default", "via", "100.64.0.1"]);
        sh(&["ip", "-n", s2, "route", "add", "default", "via", "100.64.1.1"]);
        sh(&["ip", "-n", gw, "route", "add", "default", "via", "198.51.100.2"]);
        sh(&["ip", "-n", srv, "route", "add", "203.0.113.16/29", "via", "198.51.100.1"]);
        sh(&["ip", "-n", srv, "route", "add", "203.0.113.40", "via", "198.51.100.1"]);
        // XDP-redirected frames need GRO on the receiving veth; software checksums and
        // MTU-sized frames are what a wire carries (scripts/netns-lib.sh).
        for ns in [s1, s2, srv] {
            sh(&[
                "ip", "netns", "exec", ns, "ethtool", "-K", "eth0", "gro", "on", "tx", "off", "tso", "off",
                "gso", "off",
            ]);
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

    fn natrix_in_gw(&self) -> Command {
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

    /// Starts `natrix run --config <config>` in the gateway and waits for `ready`.
    /// Returns the log so far.
    pub fn start_daemon(&mut self, config: &Path) -> String {
        assert!(self.daemon.is_none(), "a daemon is already running");
        let log = self.dir.join(format!("daemon-{}.log", self.logs.len()));
        self.logs.push(log.clone());
        let err = File::create(&log).unwrap();
        let child = self
            .natrix_in_gw()
            .arg("run")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn natrix run");
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
                panic!("natrix run exited ({st}) before it was ready:\n{text}");
            }
            if Instant::now() >= deadline {
                panic!("natrix run not ready within {READY_TIMEOUT:?}:\n{text}");
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
        let mut child = self
            .natrix_in_gw()
            .arg("run")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("spawn natrix run");
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
        sh(&["ip", "-d", "-n", &self.gw, "link", "show", dev])
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
        sh(&["ip", "-n", &self.srv, "addr", "add", cidr, "dev", "eth0"]);
    }

    /// Sets the MTU of a gateway interface.
    pub fn set_gw_mtu(&self, dev: &str, mtu: u32) {
        sh(&["ip", "-n", &self.gw, "link", "set", dev, "mtu", &mtu.to_string()]);
    }
}

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
        for ns in self.created.drain(..).rev() {
            sh_quiet(&["ip", "netns", "del", &ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
