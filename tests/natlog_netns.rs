// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The NAT event log end to end: real flows through the `natrix` daemon in namespaces
//! (tests/common/netns/), its IPFIX and syslog received by sockets in the server's namespace
//! (the collector sits outside, as at an ISP), the IPFIX decoded by tshark (not natrix's
//! code) and the syslog lines parsed by an independent RFC 5424 parser. Each event is
//! checked against what the wire showed: the subscriber, the outside address the server
//! saw, its port inside the logged block, the time bracketed by the packets. A block
//! allocated while no daemon runs is logged by the next one with its true time; session
//! events only when asked, the destination only when asked.
//!
//! Needs root (namespaces, XDP, bpffs) and tshark. Run:
//! `cargo test --release --test natlog_netns`

mod common;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::ipfix::{event_of, tshark, Pcap};
use common::netns::*;
use common::wire::*;
use natrix::natlog::{NatEvent, NatEventKind};

const IPFIX: SocketAddrV4 = SocketAddrV4::new(SERVER_IP, 4739);
const SYSLOG: SocketAddrV4 = SocketAddrV4::new(SERVER_IP, 5514);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The collectors: an IPFIX and a syslog socket in the server's namespace.
struct Collectors {
    ipfix: UdpSocket,
    syslog: UdpSocket,
    /// IPFIX datagrams and syslog lines received so far, with their source.
    got_ipfix: Vec<(SocketAddrV4, Vec<u8>)>,
    got_syslog: Vec<String>,
}

impl Collectors {
    fn new(t: &Topo) -> Self {
        let ipfix = udp_socket(&t.srv, IPFIX, Duration::from_millis(100));
        let syslog = udp_socket(&t.srv, SYSLOG, Duration::from_millis(100));
        Collectors { ipfix, syslog, got_ipfix: Vec::new(), got_syslog: Vec::new() }
    }

    /// Reads whatever arrived (for up to `window`).
    fn poll(&mut self, window: Duration) {
        for (d, from) in udp_drain(&self.ipfix, window) {
            self.got_ipfix.push((from, d));
        }
        for (d, _) in udp_drain(&self.syslog, Duration::from_millis(50)) {
            self.got_syslog.push(String::from_utf8(d).expect("a syslog line is UTF-8"));
        }
    }

    /// Every event the IPFIX datagrams so far carry, as tshark decodes them.
    fn events(&self, name: &str) -> Vec<NatEvent> {
        let mut pcap = Pcap::new();
        for (from, d) in &self.got_ipfix {
            pcap.datagram(*from, IPFIX, d);
        }
        let file = pcap.write(name);
        tshark(&file, IPFIX.port())
            .into_iter()
            .flat_map(|m| m.records.into_iter().map(|(_, r)| event_of(&r)))
            .collect()
    }

    /// Polls until an event satisfying `f` has arrived (within 10 s); all events so far.
    fn wait_for(&mut self, name: &str, what: &str, f: impl Fn(&NatEvent) -> bool) -> Vec<NatEvent> {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            self.poll(Duration::from_millis(300));
            let ev = self.events(name);
            if ev.iter().any(&f) {
                return ev;
            }
            assert!(Instant::now() < end, "no {what} logged within 10 s; events: {ev:?}");
        }
    }
}

fn log_conf(t: &Topo, extra: &[(&str, &str)]) -> Conf {
    let mut c = t.conf();
    c.set("log.ipfix", &format!("[\"{IPFIX}\"]")).set("log.syslog", &format!("[\"{SYSLOG}\"]"));
    for (k, v) in extra {
        c.set(k, v);
    }
    c
}

fn start(t: &mut Topo, c: &Conf) {
    let cfg = t.write_config("natrix.toml", &c.render());
    t.start_daemon(&cfg);
}

/// One datagram from `ns` (address `src`) to the server; the outside endpoint the server
/// saw, and the wall clock just before and just after.
fn first_datagram(ns: &str, src: Ipv4Addr, server: &UdpSocket) -> (SocketAddrV4, SocketAddrV4, u64, u64) {
    let c = udp_socket(ns, any_port(src), Duration::from_secs(5));
    let t0 = now_ms();
    c.send_to(b"hello", local_of(server)).unwrap();
    let (_, out) = udp_recv(server).expect("the datagram did not reach the server");
    let t1 = now_ms();
    assert_pool(out, "the flow");
    (local_of(&c), out, t0, t1)
}

fn the_block(ev: &[NatEvent], sub: Ipv4Addr) -> NatEvent {
    let b: Vec<&NatEvent> =
        ev.iter().filter(|e| e.kind == NatEventKind::BlockAlloc && e.inside == sub).collect();
    assert_eq!(b.len(), 1, "one block allocation for {sub}: {ev:?}");
    b[0].clone()
}

/// Checks a block allocation against the wire: subscriber, pool address, the port in the
/// block, the time between the packet's send and its arrival.
fn check_block(e: &NatEvent, sub: Ipv4Addr, out: SocketAddrV4, t0: u64, t1: u64, what: &str) {
    assert_eq!((e.inside, e.outside), (sub, *out.ip()), "{what}: {e:?}");
    assert!(
        e.port_start <= out.port() && out.port() <= e.port_end,
        "{what}: port {} not in {e:?}",
        out.port()
    );
    assert_eq!(e.port_end - e.port_start + 1, 256, "{what}: a 256-port block: {e:?}");
    assert!(t0 <= e.time_ms && e.time_ms <= t1, "{what}: allocated at {} not within {t0} .. {t1}", e.time_ms);
}

/// Syslog: every line an RFC 5424 message (parsed by `syslog_rfc5424`), one of them the
/// block allocation with the event's own time and fields.
fn check_syslog(lines: &[String], e: &NatEvent) {
    assert!(!lines.is_empty(), "no syslog line");
    let mut found = false;
    for l in lines {
        let m = syslog_rfc5424::parse_message(l).unwrap_or_else(|err| panic!("not RFC 5424 ({err}): {l}"));
        assert_eq!(m.appname.as_deref(), Some("natrix"), "{l}");
        assert!(m.sd.find_sdid("natrix@32473").is_some(), "no natrix@32473 data: {l}");
        let p = |k: &str| m.sd.find_tuple("natrix@32473", k).map(|v| v.to_string());
        if p("natEvent").as_deref() == Some("16") && p("sourceIPv4Address") == Some(e.inside.to_string()) {
            found = true;
            let ts = m.timestamp.unwrap_or_else(|| panic!("no timestamp: {l}"));
            let ms = ts as u64 * 1000 + u64::from(m.timestamp_nanos.unwrap_or(0)) / 1_000_000;
            assert_eq!(ms, e.time_ms, "syslog's timestamp is the event's time: {l}");
            assert_eq!(p("postNATSourceIPv4Address"), Some(e.outside.to_string()), "{l}");
            assert_eq!(p("portRangeStart"), Some(e.port_start.to_string()), "{l}");
            assert_eq!(p("portRangeEnd"), Some(e.port_end.to_string()), "{l}");
        }
    }
    assert!(found, "no syslog line for {e:?} in {lines:?}");
}

/// Block events: the allocation made by a subscriber's first packet is exported with the
/// data plane's time and the block the server's view confirms, to IPFIX and syslog; no
/// session events by default; a block allocated while the daemon is stopped is exported
/// by the next daemon with its true time, before anything new.
#[test]
fn blocks_are_logged_as_the_wire_shows_even_while_no_daemon_runs() {
    let mut t = Topo::new();
    let mut col = Collectors::new(&t);
    let conf = log_conf(&t, &[]);
    start(&mut t, &conf);
    let server = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(5));

    let (_, out1, t0, t1) = first_datagram(&t.s1, SUB1_IP, &server);
    let ev = col.wait_for("blocks-1", "s1's block", |e| e.kind == NatEventKind::BlockAlloc);
    let b1 = the_block(&ev, SUB1_IP);
    check_block(&b1, SUB1_IP, out1, t0, t1, "s1's block");
    assert!(
        ev.iter().all(|e| !matches!(e.kind, NatEventKind::SessionCreate | NatEventKind::SessionDelete)),
        "no session events unless log.sessions: {ev:?}"
    );
    check_syslog(&col.got_syslog, &b1);

    // no daemon: s2's first packet takes a block all the same; the next daemon logs it
    let st = t.stop_daemon(libc::SIGTERM);
    assert!(st.success(), "the daemon stops cleanly: {st:?}");
    col.poll(Duration::from_millis(300));
    let (_, out2, t2, t3) = first_datagram(&t.s2, SUB2_IP, &server);
    std::thread::sleep(Duration::from_millis(1500));
    let restart = now_ms();
    start(&mut t, &conf);
    let ev =
        col.wait_for("blocks-2", "s2's block", |e| e.kind == NatEventKind::BlockAlloc && e.inside == SUB2_IP);
    let b2 = the_block(&ev, SUB2_IP);
    check_block(&b2, SUB2_IP, out2, t2, t3, "s2's block, made with no daemon");
    assert!(b2.time_ms < restart, "the true time, not the export's: {b2:?} (restart at {restart})");
    assert_eq!(the_block(&ev, SUB1_IP), b1, "s1's block logged once, not again by the new daemon");
}

/// Session events: with log.sessions a flow's creation and (after its timeout) deletion
/// are exported with the inside and outside endpoints; the remote endpoint only with
/// log.destinations.
#[test]
fn session_events_only_when_asked_and_destinations_only_when_asked() {
    for dest in [false, true] {
        let mut t = Topo::new();
        let mut col = Collectors::new(&t);
        let c = log_conf(
            &t,
            &[
                ("log.sessions", "true"),
                ("log.destinations", if dest { "true" } else { "false" }),
                ("timeouts.udp", "\"2s\""),
            ],
        );
        start(&mut t, &c);
        let server = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(5));
        let (inside, out, t0, t1) = first_datagram(&t.s1, SUB1_IP, &server);
        let ev = col.wait_for("sess", "the session's deletion", |e| e.kind == NatEventKind::SessionDelete);
        let of = |k| ev.iter().filter(|e| e.kind == k).cloned().collect::<Vec<_>>();
        let (cr, del) = (of(NatEventKind::SessionCreate), of(NatEventKind::SessionDelete));
        assert_eq!((cr.len(), del.len()), (1, 1), "{ev:?}");
        for e in [&cr[0], &del[0]] {
            assert_eq!((e.inside, e.in_port, e.proto), (SUB1_IP, inside.port(), 17), "{e:?}");
            assert_eq!((e.outside, e.out_port), (*out.ip(), out.port()), "{e:?}");
            let want = dest.then(|| local_of(&server));
            assert_eq!(e.remote, want, "the destination only with log.destinations: {e:?}");
        }
        assert!(t0 <= cr[0].time_ms && cr[0].time_ms <= t1, "created at {} not in {t0}..{t1}", cr[0].time_ms);
        assert!(del[0].time_ms >= t1 + 2000, "deleted after the 2 s timeout: {:?}", del[0]);
    }
}

/// Interim logging re-sends every held block's allocation (log.interim), and the pool's
/// threshold event (natEvent 18) goes out once when the blocks in use reach
/// log.pool_threshold: here 2 of the pool's 4 blocks at 50%.
#[test]
fn interim_records_and_the_pool_threshold() {
    let mut t = Topo::new();
    let mut col = Collectors::new(&t);
    let c = log_conf(
        &t,
        &[
            ("pool.addresses", "[\"203.0.113.16\"]"),
            ("pool.ports", "\"1024-2047\""),
            ("log.interim", "\"1s\""),
            ("log.pool_threshold", "50"),
        ],
    );
    start(&mut t, &c);
    let server = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(5));
    let (_, out1, _, _) = first_datagram(&t.s1, SUB1_IP, &server);
    let ev = col.wait_for("interim", "an interim record", |e| {
        e.kind == NatEventKind::BlockAlloc && e.inside == SUB1_IP && e.time_ms > 0
    });
    let first = the_block_first(&ev, SUB1_IP);
    assert!(ev.iter().all(|e| e.kind != NatEventKind::ThresholdReached), "1 block of 4: below 50%: {ev:?}");
    let ev = col.wait_for("interim-2", "s1's block again", |e| {
        e.kind == NatEventKind::BlockAlloc && e.inside == SUB1_IP && e.time_ms >= first.time_ms + 900
    });
    let again = ev
        .iter()
        .find(|e| {
            e.kind == NatEventKind::BlockAlloc && e.inside == SUB1_IP && e.time_ms >= first.time_ms + 900
        })
        .unwrap();
    assert_eq!(
        (again.outside, again.port_start, again.port_end),
        (first.outside, first.port_start, first.port_end),
        "the interim record names the same block"
    );
    assert!(first.port_start <= out1.port() && out1.port() <= first.port_end);
    first_datagram(&t.s2, SUB2_IP, &server);
    let ev = col.wait_for("threshold", "the threshold event", |e| e.kind == NatEventKind::ThresholdReached);
    let th: Vec<&NatEvent> = ev.iter().filter(|e| e.kind == NatEventKind::ThresholdReached).collect();
    assert_eq!(th.len(), 1, "once: {th:?}");
    assert_eq!((th[0].detail, th[0].limit, th[0].pool_id), (1, 50, 1), "{th:?}");
}

/// The first block allocation logged for `sub`.
fn the_block_first(ev: &[NatEvent], sub: Ipv4Addr) -> NatEvent {
    ev.iter()
        .find(|e| e.kind == NatEventKind::BlockAlloc && e.inside == sub)
        .cloned()
        .unwrap_or_else(|| panic!("no block allocation for {sub}: {ev:?}"))
}
