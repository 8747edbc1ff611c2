// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Traffic in the namespaces of the framework (tests/common/netns/mod.rs): UDP sockets,
//! ping, a TCP server and client with checked payloads, and a capture of what a namespace
//! receives. Sockets are made on a thread inside the namespace and stay there.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::*;

/// Socket read/write timeout: no test blocks forever on a lost packet.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

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
    let out = ns_exec(
        ns,
        &["ping", "-n", "-c", &count.to_string(), "-i", "0.2", "-W", "1", &dst.to_string()],
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
// packet capture (AF_PACKET)

/// An IPv4 packet a namespace received (all fields shown on failure).
#[derive(Debug, Clone)]
pub struct Captured {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    /// The IP packet's length as received (up to 64 KiB).
    pub len: usize,
    /// TCP/UDP ports, ICMP type and code.
    pub a: u16,
    pub b: u16,
    pub tcp_flags: u8,
}

/// Every IPv4 packet `ns` RECEIVES (not what it sends), on any interface, from
/// [`Capture::start`] until `window` has passed since [`Capture::finish_after`] (or 60 s, or
/// 100,000 packets in all).
pub struct Capture {
    stop_at: Arc<Mutex<Option<Instant>>>,
    handle: JoinHandle<Vec<Captured>>,
}

impl Capture {
    pub fn start(ns: &str) -> Self {
        let proto = (libc::ETH_P_IP as u16).to_be() as i32;
        let fd = socket_in(ns, libc::AF_PACKET, libc::SOCK_DGRAM, proto);
        set_rcvtimeo(&fd, Duration::from_millis(100));
        let stop_at = Arc::new(Mutex::new(None::<Instant>));
        let stop2 = Arc::clone(&stop_at);
        let handle = std::thread::spawn(move || {
            let hard = Instant::now() + Duration::from_secs(60);
            let mut got = Vec::new();
            let mut buf = vec![0u8; 65536];
            while got.len() < 100_000 {
                let now = Instant::now();
                if now >= hard || stop2.lock().unwrap().is_some_and(|t| now >= t) {
                    break;
                }
                // SAFETY: zeroed sockaddr_ll is valid; buffers sized as passed.
                let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut slen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                // SAFETY: buf, sll and slen are live locals and the lengths passed are theirs.
                let n = unsafe {
                    libc::recvfrom(
                        fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        0,
                        (&mut sll as *mut libc::sockaddr_ll).cast(),
                        &mut slen,
                    )
                };
                if n < 20 || sll.sll_pkttype == libc::PACKET_OUTGOING {
                    continue;
                }
                let p = &buf[..n as usize];
                let ihl = usize::from(p[0] & 0x0f) * 4;
                let l4 = p.get(ihl..).unwrap_or(&[]);
                let word = |i: usize| l4.get(i..i + 2).map(|w| u16::from_be_bytes([w[0], w[1]])).unwrap_or(0);
                let (a, b) = if p[9] == libc::IPPROTO_ICMP as u8 {
                    (u16::from(*l4.first().unwrap_or(&0)), u16::from(*l4.get(1).unwrap_or(&0)))
                } else {
                    (word(0), word(2))
                };
                got.push(Captured {
                    src: Ipv4Addr::new(p[12], p[13], p[14], p[15]),
                    dst: Ipv4Addr::new(p[16], p[17], p[18], p[19]),
                    proto: p[9],
                    len: n as usize,
                    a,
                    b,
                    tcp_flags: if p[9] == libc::IPPROTO_TCP as u8 { *l4.get(13).unwrap_or(&0) } else { 0 },
                });
            }
            got
        });
        Capture { stop_at, handle }
    }

    /// Keeps capturing for `window` more, then returns everything received.
    pub fn finish_after(self, window: Duration) -> Vec<Captured> {
        *self.stop_at.lock().unwrap() = Some(Instant::now() + window);
        self.handle.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
    }
}
