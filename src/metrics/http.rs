// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The metrics endpoint's HTTP server: `GET /metrics` (and `HEAD`), nothing else, on
//! threads of its own, with every resource bounded:
//! - one thread accepts; `workers` threads answer, one connection each at a time, and at
//!   most `queue` accepted connections wait for them: a connection beyond that is answered
//!   503 at once by the accepting thread and closed;
//! - a request's head is at most `max_head` bytes (else 431) and must arrive, and the
//!   answer be written, within `deadline` of the accept (else the connection is closed);
//! - one request per connection (`Connection: close`): a scraper reconnects each time, which
//!   costs it a handshake on the loopback or a LAN, and no idle connection holds a worker.
//!
//! The request head is parsed by `httparse`; the threads and bounds are ours because the
//! small server crates (tiny_http) start a thread per connection without a bound and set no
//! timeout on a slow client (docs/design/metrics.md).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::warn;

/// What `GET /metrics` answers: the body, or an error for a 500.
pub type Handler = Arc<dyn Fn() -> Result<String, String> + Send + Sync>;

/// The server's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub workers: usize,
    pub queue: usize,
    pub deadline: Duration,
    pub max_head: usize,
}

impl Default for Limits {
    /// Two answering threads (a scrape takes well under a millisecond: two scrapers at once
    /// are the most a gateway sees), four waiting connections, 5 s, 8 KiB.
    fn default() -> Self {
        Limits { workers: 2, queue: 4, deadline: Duration::from_secs(5), max_head: 8192 }
    }
}

/// The path served.
pub const PATH: &str = "/metrics";
/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often the accepting thread looks at `stop` while no connection comes.
const STOP_POLL_MS: i32 = 200;

/// Serves `listener` until `stop` is set: returns the accepting thread (it ends within
/// 200 ms of `stop`; answering threads finish the request they are on, then end).
pub fn spawn(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    handler: Handler,
    limits: Limits,
) -> std::io::Result<JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    let (tx, rx) = sync_channel::<TcpStream>(limits.queue);
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..limits.workers.max(1) {
        let (rx, handler) = (Arc::clone(&rx), Arc::clone(&handler));
        std::thread::Builder::new()
            .name(format!("natrix-metrics-{i}"))
            .spawn(move || worker(&rx, &handler, limits))?;
    }
    std::thread::Builder::new().name("natrix-metrics".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let mut pfd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd, its count 1; the listener outlives the call.
            unsafe { libc::poll(&mut pfd, 1, STOP_POLL_MS) };
            let s = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => continue,
                Err(e) => {
                    // out of descriptors, say: wait rather than spin
                    warn!("metrics: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            let _ = s.set_nonblocking(false);
            let _ = s.set_nodelay(true);
            match tx.try_send(s) {
                Ok(()) => {}
                Err(TrySendError::Full(s)) => busy(s),
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    })
}

fn worker(rx: &Mutex<Receiver<TcpStream>>, handler: &Handler, limits: Limits) {
    loop {
        // the lock is held only while waiting for the next connection
        let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
        match next {
            Ok(s) => answer(s, handler, limits),
            Err(_) => return, // the accepting thread ended
        }
    }
}

/// Every worker busy and the queue full: 503 at once. The answer fits in an empty socket
/// buffer, so the write does not wait for the client; a client whose request is still
/// unread may see a reset instead, which tells it the same.
fn busy(mut s: TcpStream) {
    let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = s.write_all(&response(503, &[("Retry-After", "1")], b"busy: too many requests at once\n", false));
    let _ = s.shutdown(Shutdown::Both);
}

/// One request on `s`, answered, then the connection closed.
fn answer(mut s: TcpStream, handler: &Handler, limits: Limits) {
    let deadline = Instant::now() + limits.deadline;
    let left = || deadline.saturating_duration_since(Instant::now());
    let mut buf = vec![0u8; limits.max_head];
    let mut n = 0;
    let reply = loop {
        if n == buf.len() {
            break response(431, &[], b"request head too large\n", false);
        }
        let wait = left();
        if wait.is_zero() || s.set_read_timeout(Some(wait)).is_err() {
            return;
        }
        match s.read(&mut buf[n..]) {
            Ok(0) | Err(_) => return, // closed, or too slow
            Ok(k) => n += k,
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..n]) {
            Ok(httparse::Status::Partial) => continue,
            Ok(httparse::Status::Complete(_)) => {
                break route(req.method.unwrap_or(""), req.path.unwrap_or(""), handler)
            }
            Err(httparse::Error::TooManyHeaders) => break response(431, &[], b"too many headers\n", false),
            Err(_) => break response(400, &[], b"bad request\n", false),
        }
    };
    let wait = left().max(Duration::from_millis(100));
    if s.set_write_timeout(Some(wait)).is_ok() && s.write_all(&reply).is_ok() {
        let _ = s.flush();
    }
    let _ = s.shutdown(Shutdown::Write);
}

/// The answer to `method` `path`.
fn route(method: &str, path: &str, handler: &Handler) -> Vec<u8> {
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return response(405, &[("Allow", "GET, HEAD")], b"only GET and HEAD\n", false),
    };
    if path.split('?').next() != Some(PATH) {
        return response(404, &[], b"not found: the metrics are at /metrics\n", head);
    }
    match handler() {
        Ok(body) => response(200, &[("Content-Type", CONTENT_TYPE)], body.as_bytes(), head),
        Err(e) => {
            warn!("metrics: {e}");
            response(500, &[], format!("{e}\n").as_bytes(), head)
        }
    }
}

/// A whole HTTP/1.1 response; `head_only` leaves the body out (HEAD), not its length.
fn response(code: u16, headers: &[(&str, &str)], body: &[u8], head_only: bool) -> Vec<u8> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    let mut out = format!("HTTP/1.1 {code} {reason}\r\n");
    if !headers.iter().any(|(k, _)| *k == "Content-Type") {
        out += "Content-Type: text/plain; charset=utf-8\r\n";
    }
    for (k, v) in headers {
        out += &format!("{k}: {v}\r\n");
    }
    out += &format!("Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    struct Server {
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    fn server(handler: Handler, limits: Limits) -> Server {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = Some(spawn(l, Arc::clone(&stop), handler, limits).unwrap());
        Server { addr, stop, thread }
    }

    /// Sends `req` raw, returns everything the server sent back before closing.
    fn ask(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn fixed() -> Handler {
        Arc::new(|| Ok("up 1\n".to_owned()))
    }

    #[test]
    fn get_head_and_the_rest() {
        let srv = server(fixed(), Limits::default());
        let r = ask(srv.addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")), "{r}");
        assert!(r.contains("Content-Length: 5\r\n") && r.ends_with("\r\n\r\nup 1\n"), "{r}");
        let r = ask(srv.addr, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        let r = ask(srv.addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n")
                && r.ends_with("Content-Length: 5\r\nConnection: close\r\n\r\n"),
            "{r}"
        );
        let r = ask(srv.addr, b"GET / HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
        let r = ask(srv.addr, b"GET /metricsx HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 404 "), "{r}");
        let r = ask(srv.addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 405 ") && r.contains("Allow: GET, HEAD\r\n"), "{r}");
        let r = ask(srv.addr, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 garbage\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
        // a head in several pieces
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for part in [&b"GET /met"[..], b"rics HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"] {
            s.write_all(part).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    }

    #[test]
    fn errors_and_bounds() {
        let srv = server(
            Arc::new(|| Err("cannot read nx_stats".to_owned())),
            Limits { max_head: 256, deadline: Duration::from_millis(300), ..Limits::default() },
        );
        let r = ask(srv.addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 500 ") && r.ends_with("cannot read nx_stats\n"), "{r}");
        let big = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(400));
        let r = ask(srv.addr, big.as_bytes());
        assert!(r.starts_with("HTTP/1.1 431 "), "{r}");
        // a client that sends half a head and waits is cut off at the deadline
        let t0 = Instant::now();
        let r = ask(srv.addr, b"GET /metrics HTTP/1.1\r\n");
        assert_eq!(r, "");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }

    #[test]
    fn busy_beyond_workers_and_queue() {
        // the handler blocks until released: one worker busy, one connection queued, the
        // third is answered 503 by the accepting thread
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        let g = Arc::clone(&gate);
        let srv = server(
            Arc::new(move || {
                let _g = g.lock().unwrap_or_else(|e| e.into_inner());
                Ok("x 1\n".into())
            }),
            Limits { workers: 1, queue: 1, ..Limits::default() },
        );
        let addr = srv.addr;
        let first = std::thread::spawn(move || ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n"));
        std::thread::sleep(Duration::from_millis(300)); // taken by the worker
        let second = std::thread::spawn(move || ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n"));
        std::thread::sleep(Duration::from_millis(300)); // queued
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let third = String::from_utf8_lossy(&out).into_owned();
        assert!(third.starts_with("HTTP/1.1 503 ") && third.contains("Retry-After: 1\r\n"), "{third}");
        drop(held);
        for h in [first, second] {
            let r = h.join().unwrap();
            assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
        }
    }
}
