// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! NAT event export end to end, on loopback, decoded by tools natrix does not share code
//! with: an `Exporter` sends to UDP and TCP sockets this test holds; what arrives is written
//! to a pcap and decoded by tshark's IPFIX dissector (cflow), and syslog lines are parsed
//! with the `syslog_rfc5424` crate. Every event must come back as sent.
//!
//! Needs tshark (scripts/deps.sh installs it): without it the tests fail, saying so. No
//! root, no kernel features; every wait is bounded.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use natrix::config::{Collector, Log};
use natrix::natlog::export::{CollectorKind, Exporter, Options};
use natrix::natlog::{quota, threshold, NatEvent, NatEventKind};

mod common;
use common::ipfix::*;

/// 2026-01-01T00:00:00Z, in ms.
const T0: u64 = 1_767_225_600_000;
const HOST: &str = "gw-test.example";

// ---- events -------------------------------------------------------------------------------

/// Event number `i`: every shape natrix exports in turn (14 of them), each field derived
/// from `i`, the time unique (`T0 + 3i` ms); fields a shape does not carry stay empty so
/// that a decoded event compares equal to the one sent.
fn event(i: usize) -> NatEvent {
    let time = T0 + 3 * i as u64;
    let sub = Ipv4Addr::from(0x6440_0000 + i as u32);
    let pool = Ipv4Addr::new(203, 0, 113, (i % 250) as u8 + 1);
    let port = 1024 + (i % 60000) as u16;
    let session = |kind, remote: bool| {
        let mut ev = NatEvent::new(kind, time);
        ev.proto = [6, 17, 1][i % 3];
        ev.inside = sub;
        ev.in_port = 40000 + (i % 20000) as u16;
        ev.outside = pool;
        ev.out_port = port;
        if remote {
            ev.remote = Some(SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, (i % 250) as u8), 443 + i as u16));
        }
        ev
    };
    match i % 14 {
        0 | 1 => {
            let kind = if i % 14 == 0 { NatEventKind::BlockAlloc } else { NatEventKind::BlockFree };
            let mut ev = NatEvent::new(kind, time);
            ev.inside = sub;
            ev.outside = pool;
            ev.port_start = port;
            ev.port_end = port + 255;
            ev
        }
        2 => session(NatEventKind::SessionCreate, false),
        3 => session(NatEventKind::SessionDelete, false),
        4 => session(NatEventKind::SessionCreate, true),
        5 => session(NatEventKind::SessionDelete, true),
        6 => {
            let mut ev = NatEvent::new(NatEventKind::AddressesExhausted, time);
            ev.pool_id = 1;
            ev
        }
        7 => {
            let mut ev = NatEvent::new(NatEventKind::PortsExhausted, time);
            ev.outside = pool;
            ev.proto = [6, 17][i % 2];
            ev
        }
        8..=12 => {
            let detail = [
                quota::MAX_SESSIONS,
                quota::MAX_BIB,
                quota::MAX_PER_USER,
                quota::MAX_SUBSCRIBERS,
                quota::MAX_FRAGMENTS,
            ][i % 14 - 8];
            let mut ev = NatEvent::new(NatEventKind::QuotaExceeded, time);
            ev.detail = detail;
            ev.limit = 1000 + i as u32;
            if matches!(detail, quota::MAX_PER_USER | quota::MAX_FRAGMENTS) {
                ev.inside = sub;
            }
            ev
        }
        _ => {
            let mut ev = NatEvent::new(NatEventKind::ThresholdReached, time);
            ev.detail = threshold::POOL_HIGH;
            ev.pool_id = 1;
            ev.limit = 80 + (i % 20) as u32;
            ev
        }
    }
}

fn events(range: std::ops::Range<usize>) -> Vec<NatEvent> {
    range.map(event).collect()
}

// ---- sockets ------------------------------------------------------------------------------

fn udp_socket() -> (UdpSocket, SocketAddrV4) {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind a UDP socket on loopback");
    // room for a burst (syslog sends a datagram per event): 8 MiB where allowed (root may
    // go past net.core.rmem_max), else as much as rmem_max allows
    let size: libc::c_int = 8 << 20;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt reads one c_int from a valid pointer for the call.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            break;
        }
    }
    let SocketAddr::V4(a) = s.local_addr().unwrap() else { unreachable!() };
    (s, a)
}

/// Reads `s` on a thread of its own from now on (so that its buffer never overflows while
/// the test does something else), until `done` is set and `drain` would stop.
fn drain_in_background(
    s: UdpSocket,
    done: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(SocketAddrV4, Vec<u8>)>> {
    let done = done.clone();
    std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(20);
        let mut out = Vec::new();
        while !done.load(Ordering::Relaxed) && Instant::now() < end {
            out.extend(drain(&s, Duration::from_millis(50), Duration::from_millis(200)));
        }
        out.extend(drain(&s, Duration::from_millis(300), Duration::from_secs(10)));
        out
    })
}

/// Datagrams arriving on `s` (with their source) until none came for `quiet`, or `max`
/// passed.
fn drain(s: &UdpSocket, quiet: Duration, max: Duration) -> Vec<(SocketAddrV4, Vec<u8>)> {
    let end = Instant::now() + max;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut last = Instant::now();
    while Instant::now() < end {
        match s.recv_from(&mut buf) {
            Ok((n, SocketAddr::V4(from))) => {
                out.push((from, buf[..n].to_vec()));
                last = Instant::now();
            }
            Ok(_) => panic!("an IPv6 datagram on an IPv4 socket"),
            Err(_) if last.elapsed() >= quiet => break,
            Err(_) => {}
        }
    }
    out
}

fn base_config() -> Log {
    Log { sessions: true, destinations: true, observation_domain: 7, ..Log::default() }
}

fn fast_options(cfg: &Log) -> Options {
    Options {
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        connect_timeout: Duration::from_millis(500),
        shutdown_grace: Duration::from_millis(500),
        ..Options::from_config(cfg)
    }
}

/// RFC 8158's field lists (IANA element ids and sizes), as tshark must read them.
fn expected_templates() -> BTreeMap<u16, Vec<(u16, u16)>> {
    let te = [(323, 8), (230, 1)];
    let with = |rest: &[(u16, u16)]| te.iter().chain(rest).copied().collect::<Vec<_>>();
    let session = [(4, 1), (8, 4), (7, 2), (225, 4), (227, 2)];
    BTreeMap::from([
        (256, with(&[(8, 4), (225, 4), (361, 2), (362, 2)])),
        (257, with(&session)),
        (258, with(&[session.as_slice(), &[(12, 4), (11, 2)]].concat())),
        (259, with(&[(283, 4)])),
        (260, with(&[(225, 4), (4, 1)])),
        (261, with(&[(466, 4), (471, 4)])),
        (262, with(&[(466, 4), (472, 4)])),
        (263, with(&[(466, 4), (473, 4), (8, 4)])),
        (264, with(&[(466, 4), (474, 4)])),
        (265, with(&[(466, 4), (475, 4), (8, 4)])),
        (266, with(&[(467, 4), (283, 4), (476, 4)])),
    ])
}

/// Checks one transport session's decoded messages: templates first (all of them, as
/// RFC 8158 lists them), the observation domain, and sequence numbers counting the data
/// records before each message. Returns the events, in order.
fn check_session(msgs: &[Decoded], domain: u32) -> Vec<NatEvent> {
    assert!(!msgs.is_empty(), "no message");
    assert!(
        msgs[0].records.is_empty() && !msgs[0].templates.is_empty(),
        "templates come first: {:?}",
        msgs[0]
    );
    let mut templates = BTreeMap::new();
    let mut before = 0u32;
    let mut evs = Vec::new();
    for m in msgs {
        assert_eq!(m.domain, domain);
        assert_eq!(m.sequence, before, "sequence number = data records sent before");
        templates.extend(m.templates.clone());
        for (set, r) in &m.records {
            let ev = event_of(r);
            // the destination template exactly when there is a destination
            if matches!(ev.kind, NatEventKind::SessionCreate | NatEventKind::SessionDelete) {
                assert_eq!(*set, if ev.remote.is_some() { 258 } else { 257 }, "{ev:?}");
            }
            evs.push(ev);
        }
        before = before.wrapping_add(m.records.len() as u32);
    }
    assert_eq!(templates, expected_templates());
    evs
}

// ---- IPFIX and syslog over UDP ------------------------------------------------------------

#[test]
fn udp_ipfix_and_syslog_arrive_as_sent() {
    tshark_present();
    let (c1, a1) = udp_socket();
    let (c2, a2) = udp_socket();
    let (sl, asl) = udp_socket();
    let cfg = Log {
        ipfix: vec![Collector::Udp(a1.into()), Collector::Udp(a2.into())],
        syslog: vec![asl.into()],
        ..base_config()
    };
    let done = Arc::new(AtomicBool::new(false));
    let (r1, r2, rs) =
        (drain_in_background(c1, &done), drain_in_background(c2, &done), drain_in_background(sl, &done));
    let ex = Exporter::start(&cfg, HOST).expect("start");
    let sent = events(0..700);
    for (i, ev) in sent.iter().enumerate() {
        ex.send(ev.clone());
        // events come in bursts of tens, not of hundreds (the receivers' buffers are
        // theirs to size, not the exporter's)
        if i % 20 == 19 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert!(ex.flush(Duration::from_secs(10)), "flush");
    done.store(true, Ordering::Relaxed);
    let (got1, got2, lines) = (r1.join().unwrap(), r2.join().unwrap(), rs.join().unwrap());

    // both collectors get the same messages, each under the MTU
    let d1: Vec<&Vec<u8>> = got1.iter().map(|(_, b)| b).collect();
    let d2: Vec<&Vec<u8>> = got2.iter().map(|(_, b)| b).collect();
    assert_eq!(d1, d2);
    assert!(d1.iter().all(|b| b.len() <= 1400));
    assert!(d1.len() > 10, "700 events take many messages: {}", d1.len());

    let mut pcap = Pcap::new();
    for (src, b) in &got1 {
        pcap.datagram(*src, a1, b);
    }
    let file = pcap.write("udp");
    let decoded = tshark(&file, a1.port());
    assert_events(&check_session(&decoded, 7), &sent, "every event decoded as sent, in order");
    let _ = std::fs::remove_file(file);

    // syslog: one line per event, read by an independent RFC 5424 parser
    assert_eq!(lines.len(), sent.len());
    for ((_, line), ev) in lines.iter().zip(&sent) {
        let line = std::str::from_utf8(line).unwrap();
        let m = syslog_rfc5424::parse_message(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        let ts = m.timestamp.expect("a timestamp") as u64 * 1000
            + u64::from(m.timestamp_nanos.unwrap_or(0)) / 1_000_000;
        assert_eq!(ts, ev.time_ms, "the event's own time: {line}");
        assert_eq!(m.hostname.as_deref(), Some(HOST));
        assert_eq!(m.appname.as_deref(), Some("natrix"));
        assert_eq!(m.procid, Some(syslog_rfc5424::message::ProcId::PID(std::process::id() as i32)));
        assert_eq!(m.facility, syslog_rfc5424::SyslogFacility::LOG_LOCAL0);
        let warn = matches!(
            ev.kind,
            NatEventKind::AddressesExhausted
                | NatEventKind::PortsExhausted
                | NatEventKind::QuotaExceeded
                | NatEventKind::ThresholdReached
        );
        let sev = if warn {
            syslog_rfc5424::SyslogSeverity::SEV_WARNING
        } else {
            syslog_rfc5424::SyslogSeverity::SEV_INFO
        };
        assert_eq!(m.severity, sev, "{line}");
        assert!(m.msgid.is_some() && !m.msg.is_empty(), "{line}");
        let sd = |k: &str| m.sd.find_tuple("natrix@32473", k).map(|v| v.to_string());
        assert_eq!(sd("natEvent"), Some((ev.kind as u8).to_string()), "{line}");
        let want = |k: &str, v: String| assert_eq!(sd(k), Some(v), "{k} in {line}");
        match ev.kind {
            NatEventKind::BlockAlloc | NatEventKind::BlockFree => {
                want("sourceIPv4Address", ev.inside.to_string());
                want("postNATSourceIPv4Address", ev.outside.to_string());
                want("portRangeStart", ev.port_start.to_string());
                want("portRangeEnd", ev.port_end.to_string());
            }
            NatEventKind::SessionCreate | NatEventKind::SessionDelete => {
                want("protocolIdentifier", ev.proto.to_string());
                want("sourceIPv4Address", ev.inside.to_string());
                want("sourceTransportPort", ev.in_port.to_string());
                want("postNATSourceIPv4Address", ev.outside.to_string());
                want("postNAPTSourceTransportPort", ev.out_port.to_string());
                assert_eq!(sd("destinationIPv4Address"), ev.remote.map(|r| r.ip().to_string()), "{line}");
                assert_eq!(sd("destinationTransportPort"), ev.remote.map(|r| r.port().to_string()), "{line}");
            }
            NatEventKind::AddressesExhausted => want("natPoolId", ev.pool_id.to_string()),
            NatEventKind::PortsExhausted => {
                want("postNATSourceIPv4Address", ev.outside.to_string());
                want("protocolIdentifier", ev.proto.to_string());
            }
            NatEventKind::QuotaExceeded => {
                want("natQuotaExceededEvent", ev.detail.to_string());
                let k = [
                    "maxSessionEntries",
                    "maxBIBEntries",
                    "maxEntriesPerUser",
                    "maxSubscribers",
                    "maxFragmentsPendingReassembly",
                ][ev.detail as usize - 1];
                want(k, ev.limit.to_string());
                if ev.inside != Ipv4Addr::UNSPECIFIED {
                    want("sourceIPv4Address", ev.inside.to_string());
                }
            }
            NatEventKind::ThresholdReached => {
                want("natThresholdEvent", ev.detail.to_string());
                want("natPoolId", ev.pool_id.to_string());
                want("addressPoolHighThreshold", ev.limit.to_string());
            }
        }
    }

    let st = ex.stats();
    assert_eq!(st.events_received, 700);
    assert_eq!(st.events_queued, 700);
    assert_eq!((st.events_lost, st.records_lost, st.events_unencodable), (0, 0, 0));
    assert_eq!(st.ipfix_udp_records, 2 * 700);
    assert_eq!(st.syslog_records, 700);
    let udp_bytes: usize = got1.iter().chain(&got2).map(|(_, b)| b.len()).sum();
    let syslog_bytes: usize = lines.iter().map(|(_, b)| b.len()).sum();
    assert_eq!(st.bytes_sent, (udp_bytes + syslog_bytes) as u64);
    assert_eq!(st.queue_len, 0);
    let json = serde_json::to_value(&st).unwrap();
    assert_eq!(json["collectors"][0]["kind"], "ipfix_udp");
    assert_eq!(json["collectors"][2]["kind"], "syslog");
}

#[test]
fn destinations_are_not_exported_unless_configured() {
    tshark_present();
    let (c, a) = udp_socket();
    let cfg = Log { ipfix: vec![Collector::Udp(a.into())], destinations: false, ..base_config() };
    let ex = Exporter::start(&cfg, HOST).unwrap();
    let sent = events(0..28);
    for ev in &sent {
        ex.send(ev.clone());
    }
    assert!(ex.flush(Duration::from_secs(5)));
    let got = drain(&c, Duration::from_millis(300), Duration::from_secs(5));
    let mut pcap = Pcap::new();
    for (src, b) in &got {
        pcap.datagram(*src, a, b);
    }
    let file = pcap.write("nodest");
    let decoded = tshark(&file, a.port());
    let _ = std::fs::remove_file(file);
    let evs = check_session(&decoded, 7);
    let want: Vec<NatEvent> = sent
        .into_iter()
        .map(|mut e| {
            e.remote = None;
            e
        })
        .collect();
    assert_events(&evs, &want, "no destinations");
    assert!(decoded.iter().flat_map(|m| &m.records).all(|(set, _)| *set != 258));
}

// ---- IPFIX over TCP -----------------------------------------------------------------------

/// Complete IPFIX messages at the front of a TCP stream (a partial one at the end is what a
/// collector throws away when the connection ends).
fn split_stream(b: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= b.len() {
        assert_eq!(&b[at..at + 2], &[0, 10], "an IPFIX message header at byte {at}");
        let len = usize::from(u16::from_be_bytes([b[at + 2], b[at + 3]]));
        assert!(len >= 16);
        if at + len > b.len() {
            break;
        }
        out.push(&b[at..at + len]);
        at += len;
    }
    out
}

/// Decodes each connection's stream (its complete messages) with tshark, each connection a
/// transport session of its own; returns each one's events.
fn decode_tcp(streams: &[Vec<u8>], collector: SocketAddrV4, name: &str) -> Vec<Vec<NatEvent>> {
    let mut pcap = Pcap::new();
    let mut counts = Vec::new();
    for (i, s) in streams.iter().enumerate() {
        let msgs = split_stream(s);
        counts.push(msgs.len());
        let src = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 20000 + i as u16);
        for m in msgs {
            pcap.datagram(src, collector, m);
        }
    }
    let file = pcap.write(name);
    let decoded = tshark(&file, collector.port());
    let _ = std::fs::remove_file(file);
    let mut out = Vec::new();
    let mut rest = &decoded[..];
    for n in counts {
        let (this, more) = rest.split_at(n);
        out.push(check_session(this, 7));
        rest = more;
    }
    out
}

fn set_int_opt(fd: std::os::fd::RawFd, opt: libc::c_int, v: libc::c_int) {
    // SAFETY: setsockopt reads one c_int from a valid pointer for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt {opt}");
}

/// Reads `s` until nothing came for `quiet`, end of stream, or `max`.
fn read_quiet(s: &mut TcpStream, out: &mut Vec<u8>, quiet: Duration, max: Duration) {
    let end = Instant::now() + max;
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut buf = [0u8; 4096];
    let mut last = Instant::now();
    while Instant::now() < end && last.elapsed() < quiet {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                last = Instant::now();
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

fn set_linger_zero(s: &TcpStream) {
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt reads `size_of::<linger>()` bytes from a valid linger for the call.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
}

/// Reads `s` until end of stream, an error, or `max`.
fn read_to_end_within(s: &mut TcpStream, out: &mut Vec<u8>, max: Duration) {
    let end = Instant::now() + max;
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// Reads `s` until its complete messages hold `records` data records (by their sets'
/// lengths), or `max`.
fn read_records(s: &mut TcpStream, out: &mut Vec<u8>, records: usize, max: Duration) {
    let end = Instant::now() + max;
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 4096];
    while Instant::now() < end && count_records(out) < records {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("collector read: {e}"),
        }
    }
}

/// Data records in the complete messages of a stream, from set lengths and the record
/// sizes of RFC 8158's templates (`expected_templates`).
fn count_records(b: &[u8]) -> usize {
    let sizes: BTreeMap<u16, usize> = expected_templates()
        .into_iter()
        .map(|(id, f)| (id, f.iter().map(|(_, l)| usize::from(*l)).sum()))
        .collect();
    let mut n = 0;
    for m in split_stream(b) {
        let mut at = 16;
        while at + 4 <= m.len() {
            let id = u16::from_be_bytes([m[at], m[at + 1]]);
            let len = usize::from(u16::from_be_bytes([m[at + 2], m[at + 3]]));
            if let Some(size) = sizes.get(&id) {
                n += (len - 4) / size;
            }
            at += len;
        }
    }
    n
}

#[test]
fn tcp_collector_closing_mid_stream_loses_nothing() {
    tshark_present();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    // a small receive window (inherited by the accepted connection): the exporter's writes
    // back up, so that when the collector goes, bytes are still unacknowledged
    set_int_opt(l.as_raw_fd(), libc::SO_RCVBUF, 4096);
    let SocketAddr::V4(addr) = l.local_addr().unwrap() else { unreachable!() };
    let cfg = Log { ipfix: vec![Collector::Tcp(addr.into())], ..base_config() };
    const N: usize = 3000;
    let (closed_tx, closed_rx) = mpsc::channel();
    let (flushed_tx, flushed_rx) = mpsc::channel::<()>();
    let collector = std::thread::spawn(move || {
        let mut streams = Vec::new();
        // first connection: read a part, slowly, stopping inside a message; then close the
        // connection (FIN) with the exporter's writes backed up behind the small window
        let (mut c1, _) = l.accept().unwrap();
        let mut b1 = Vec::new();
        let mut chunk = [0u8; 97];
        c1.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        while b1.len() < 4000 {
            let n = c1.read(&mut chunk).expect("read the first part");
            assert!(n > 0, "the exporter closed first");
            b1.extend_from_slice(&chunk[..n]);
            std::thread::sleep(Duration::from_millis(1));
        }
        c1.shutdown(std::net::Shutdown::Write).unwrap();
        closed_tx.send(()).unwrap();
        // the exporter notices and connects again; only then is the rest of the first
        // connection read (what was on its way arrives, twice perhaps, never lost)
        l.set_nonblocking(true).unwrap();
        let end = Instant::now() + Duration::from_secs(20);
        let mut c2 = loop {
            match l.accept() {
                Ok((c, _)) => break c,
                Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("no second connection: {e}"),
            }
        };
        read_to_end_within(&mut c1, &mut b1, Duration::from_secs(10));
        streams.push(b1);
        // the second connection: everything else, until the exporter has flushed and
        // nothing more comes
        c2.set_nonblocking(false).unwrap();
        let mut b2 = Vec::new();
        while flushed_rx.try_recv().is_err() && Instant::now() < end {
            read_records(&mut c2, &mut b2, usize::MAX, Duration::from_millis(50));
        }
        read_quiet(&mut c2, &mut b2, Duration::from_millis(300), Duration::from_secs(10));
        streams.push(b2);
        streams
    });

    let ex = Exporter::start_with(&cfg, HOST, fast_options(&cfg)).unwrap();
    let sent = events(0..N);
    for ev in &sent {
        ex.send(ev.clone());
    }
    closed_rx.recv_timeout(Duration::from_secs(20)).expect("the collector closed its first connection");
    assert!(ex.flush(Duration::from_secs(20)), "flush: {:?}", ex.stats());
    flushed_tx.send(()).unwrap();
    let streams = collector.join().expect("the collector");

    let per_conn = decode_tcp(&streams, addr, "tcp-fin");
    assert_eq!(per_conn.len(), 2);
    assert!(!per_conn[0].is_empty() && !per_conn[1].is_empty());
    let by_time: BTreeMap<u64, &NatEvent> = per_conn.iter().flatten().map(|e| (e.time_ms, e)).collect();
    let missing: Vec<u64> = sent.iter().map(|e| e.time_ms).filter(|t| !by_time.contains_key(t)).collect();
    assert!(
        missing.is_empty(),
        "{} events never arrived, the first {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    for ev in &sent {
        assert_eq!(by_time[&ev.time_ms], ev);
    }
    // each connection in order: the second starts where the collector stopped acknowledging
    for conn in &per_conn {
        assert!(conn.windows(2).all(|w| w[0].time_ms < w[1].time_ms), "events out of order");
    }
    let st = ex.stats();
    let tcp = &st.collectors[0];
    assert_eq!(tcp.kind, CollectorKind::IpfixTcp);
    assert_eq!((st.tcp_reconnects, tcp.connects, st.records_lost), (1, 2, 0), "{st:?}");
    assert!(tcp.records_resent > 0, "unacknowledged records at the drop were sent again: {tcp:?}");
    // what arrived twice is at most what was sent again
    // each event counted sent once; what arrived twice is at most what was sent again
    assert_eq!(tcp.records, N as u64, "{tcp:?}");
    let delivered: usize = per_conn.iter().map(Vec::len).sum();
    assert!(delivered - N <= tcp.records_resent as usize, "{delivered} delivered, {tcp:?}");
    assert_eq!((ex.log_counters().sent(), ex.log_counters().lost()), (N as u64, 0));
}

#[test]
fn tcp_collector_resetting_the_connection_loses_nothing() {
    tshark_present();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let SocketAddr::V4(addr) = l.local_addr().unwrap() else { unreachable!() };
    let cfg = Log { ipfix: vec![Collector::Tcp(addr.into())], ..base_config() };
    let ex = Exporter::start_with(&cfg, HOST, fast_options(&cfg)).unwrap();
    let (a, b) = (events(0..300), events(300..600));

    l.set_nonblocking(false).unwrap();
    let (mut c1, _) = l.accept().unwrap();
    for ev in &a {
        ex.send(ev.clone());
    }
    let mut b1 = Vec::new();
    read_records(&mut c1, &mut b1, a.len(), Duration::from_secs(10));
    assert_eq!(count_records(&b1), a.len());
    // the collector drops the connection hard (RST), then more events come
    set_linger_zero(&c1);
    drop(c1);
    for ev in &b {
        ex.send(ev.clone());
    }
    l.set_nonblocking(true).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let mut c2 = loop {
        match l.accept() {
            Ok((c, _)) => break c,
            Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("no second connection: {e}"),
        }
    };
    c2.set_nonblocking(false).unwrap();
    let mut b2 = Vec::new();
    read_records(&mut c2, &mut b2, b.len(), Duration::from_secs(10));
    assert!(ex.flush(Duration::from_secs(5)));

    let per_conn = decode_tcp(&[b1, b2], addr, "tcp-rst");
    assert_events(&per_conn[0], &a, "first connection");
    // the second connection: b, after anything written into the dead one again
    let tail = &per_conn[1][per_conn[1].len() - b.len()..];
    assert_events(tail, &b, "second connection");
    assert!(per_conn[1][..per_conn[1].len() - b.len()].iter().all(|e| b.contains(e)));
    let st = ex.stats();
    assert_eq!((st.tcp_reconnects, st.records_lost), (1, 0), "{st:?}");
}

// ---- collectors that are not there ----------------------------------------------------------

#[test]
fn collectors_that_are_down_never_block_send() {
    // ports nobody listens on: UDP answers ICMP port unreachable, TCP refuses
    let dead_udp = udp_socket().1;
    let dead_syslog = udp_socket().1;
    let dead_tcp = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(a) = l.local_addr().unwrap() else { unreachable!() };
        a
    };
    let (live, alive) = udp_socket();
    let cfg = Log {
        ipfix: vec![
            Collector::Udp(dead_udp.into()),
            Collector::Tcp(dead_tcp.into()),
            Collector::Udp(alive.into()),
        ],
        syslog: vec![dead_syslog.into()],
        ..base_config()
    };
    let opts = Options { queue_events: 2000, tcp_backlog_events: 500, ..fast_options(&cfg) };
    let ex = Exporter::start_with(&cfg, HOST, opts).unwrap();
    let n = 20_000;
    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..n {
        let t = Instant::now();
        ex.send(event(i));
        slowest = slowest.max(t.elapsed());
    }
    let total = start.elapsed();
    // a push under a lock the exporter's threads hold only for a swap: microseconds; the
    // bounds leave room for a loaded machine, not for waiting on any collector
    assert!(slowest < Duration::from_millis(100), "one send() took {slowest:?}");
    assert!(total < Duration::from_secs(2), "{n} sends took {total:?}");
    assert!(!ex.flush(Duration::from_millis(500)), "the TCP collector is down: its backlog stays");
    let st = ex.stats();
    assert_eq!(st.events_received, n as u64);
    assert_eq!(st.events_queued + st.events_lost, n as u64, "every event queued or counted lost");
    let tcp = &st.collectors[1];
    assert_eq!(tcp.kind, CollectorKind::IpfixTcp);
    assert!(!tcp.connected && tcp.errors > 0, "{tcp:?}");
    assert_eq!(tcp.records, 0);
    assert!(tcp.records_lost > 0, "a backlog of 500 cannot hold {n} events: {tcp:?}");
    // the live UDP collector got everything queued, the dead ones did not hold it up
    let end = Instant::now() + Duration::from_secs(10);
    while ex.stats().queue_len > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    let got = drain(&live, Duration::from_millis(300), Duration::from_secs(10));
    assert!(!got.is_empty());
    let st = ex.stats();
    let alive_stats = &st.collectors[2];
    // every event either handed to it or counted lost for it (the full queue's too)
    assert_eq!(alive_stats.records + alive_stats.records_lost, n as u64);
    assert!(st.collectors.iter().all(|c| c.records_lost >= st.events_lost), "{st:?}");
    // and the metrics endpoint's counts are the same sums
    let log = ex.log_counters();
    let sent: u64 = st.collectors.iter().map(|c| c.records).sum();
    assert_eq!((log.sent(), log.lost()), (sent, st.records_lost));
    // dropping gives the TCP thread its grace, no more
    let t = Instant::now();
    drop(ex);
    assert!(t.elapsed() < Duration::from_secs(5), "drop took {:?}", t.elapsed());
}

#[test]
fn a_tcp_collector_that_comes_up_late_gets_the_backlog() {
    tshark_present();
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(a) = l.local_addr().unwrap() else { unreachable!() };
        a
    };
    let cfg = Log { ipfix: vec![Collector::Tcp(addr.into())], ..base_config() };
    let ex = Exporter::start_with(&cfg, HOST, fast_options(&cfg)).unwrap();
    let sent = events(0..200);
    for ev in &sent {
        ex.send(ev.clone());
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(ex.stats().collectors[0].errors > 0, "connects were refused");
    assert_eq!(ex.stats().collectors[0].backlog, 200);
    let l = TcpListener::bind(addr).expect("the collector's port again");
    l.set_nonblocking(true).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let mut c = loop {
        match l.accept() {
            Ok((c, _)) => break c,
            Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("the exporter never connected: {e}"),
        }
    };
    c.set_nonblocking(false).unwrap();
    let mut b = Vec::new();
    read_records(&mut c, &mut b, sent.len(), Duration::from_secs(10));
    assert!(ex.flush(Duration::from_secs(5)));
    let conns = decode_tcp(&[b], addr, "tcp-late");
    assert_events(&conns[0], &sent, "the backlog");
    let st = ex.stats();
    assert_eq!((st.tcp_reconnects, st.records_lost, st.collectors[0].connects), (0, 0, 1));
}

#[test]
fn an_empty_config_exports_nothing() {
    let ex = Exporter::start(&Log::default(), HOST).unwrap();
    ex.send(event(0));
    assert!(ex.flush(Duration::from_millis(10)));
    let st = ex.stats();
    assert_eq!((st.events_received, st.events_queued, st.events_lost), (1, 0, 0));
    assert!(st.collectors.is_empty());
}
