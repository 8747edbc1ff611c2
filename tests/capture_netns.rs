// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix capture` on a real gateway (issue 32): the real binary in the gateway namespace
//! of the test topology (tests/common/netns/topo.rs), traffic from the subscriber and
//! server namespaces, and every capture read back by tshark, never by natrix's code:
//! interface names, the two forms of a packet paired by packet id, verdicts, comments; the
//! filter on either form; --drops; -w - into `tshark -r -`; capturing with the daemon
//! stopped; one capture at a time; -s and -i.
//!
//! Needs root (namespaces, BPF) and tshark; fails saying so without them.

mod common;

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::*;
use common::wire::*;

fn need_tools() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    assert!(unsafe { libc::geteuid() } == 0, "these tests need root (network namespaces, BPF)");
    let ok = Command::new("tshark").arg("-v").output().map(|o| o.status.success()).unwrap_or(false);
    assert!(ok, "tshark is needed to read the captures (apt-get install tshark; `make test` installs it)");
}

/// A running `natrix capture` in the gateway namespace.
struct Capture {
    child: Option<Child>,
    err: PathBuf,
    file: PathBuf,
}

impl Capture {
    /// Starts `natrix capture --pin <pin> <args>` writing to `<dir>/<name>.pcapng`, and waits
    /// until it says it is listening.
    fn start(t: &Topo, name: &str, args: &[&str]) -> Capture {
        let file = t.dir.join(format!("{name}.pcapng"));
        let err = t.dir.join(format!("{name}.err"));
        let child = t
            .natrix_in_gw()
            .args(["capture", "--pin", &t.pin_str(), "-w"])
            .arg(&file)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .expect("spawn natrix capture");
        let mut c = Capture { child: Some(child), err, file };
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let text = c.stderr();
            if text.contains("listening on") {
                return c;
            }
            if let Ok(Some(st)) = c.child.as_mut().unwrap().try_wait() {
                c.child = None;
                panic!("natrix capture exited ({st}) before listening:\n{text}");
            }
            assert!(Instant::now() < end, "natrix capture not listening within 20 s:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Waits (bounded) for the capture to end by itself (-c, -G), or stops it with SIGINT
    /// when `interrupt`; its exit status must be success. Returns stderr.
    fn finish(self, interrupt: bool) -> String {
        self.finish_with_file(interrupt).0
    }

    /// [`Capture::finish`], and the capture's file.
    fn finish_with_file(mut self, interrupt: bool) -> (String, PathBuf) {
        let mut child = self.child.take().unwrap();
        if interrupt {
            // SAFETY: signalling our own, not yet reaped, child (nsenter passes it on: it
            // execs natrix).
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        }
        let end = Instant::now() + Duration::from_secs(20);
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() >= end {
                let _ = child.kill();
                let _ = child.wait();
                panic!("natrix capture did not exit within 20 s:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = self.stderr();
        assert!(st.success(), "natrix capture failed ({st}):\n{text}");
        (text, self.file.clone())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One record as tshark reads it.
#[derive(Debug, Clone)]
struct Rec {
    iface: String,
    packet_id: String,
    verdict: String,
    comment: String,
    src: String,
    dst: String,
    sport: String,
    dport: String,
    cap_len: usize,
    len: usize,
}

const FIELDS: [&str; 10] = [
    "frame.interface_name",
    "frame.packet_id",
    "frame.verdict.ebpf_xdp",
    "frame.comment",
    "ip.src",
    "ip.dst",
    "udp.srcport",
    "udp.dstport",
    "frame.cap_len",
    "frame.len",
];

fn tshark_args(args: &mut Command) -> &mut Command {
    args.args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]);
    for f in FIELDS {
        args.args(["-e", f]);
    }
    args
}

fn parse_tshark(out: &str) -> Vec<Rec> {
    out.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            assert_eq!(f.len(), FIELDS.len(), "tshark line {l:?}");
            Rec {
                iface: f[0].into(),
                packet_id: f[1].into(),
                verdict: f[2].into(),
                comment: f[3].into(),
                src: f[4].into(),
                dst: f[5].into(),
                sport: f[6].into(),
                dport: f[7].into(),
                cap_len: f[8].parse().unwrap(),
                len: f[9].parse().unwrap(),
            }
        })
        .collect()
}

/// Every record of a capture file, read by tshark.
fn read(file: &Path) -> Vec<Rec> {
    let out = run_timeout(tshark_args(Command::new("tshark").arg("-r").arg(file)), CMD_TIMEOUT);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "tshark -r {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    parse_tshark(&text)
}

/// A gateway with its daemon running the demo configuration, a server socket, and a
/// subscriber socket (s1) that has a mapping; the mapping's outside endpoint.
fn running() -> (Topo, std::net::UdpSocket, std::net::UdpSocket, SocketAddrV4) {
    need_tools();
    let mut t = Topo::new();
    let cfg = t.write_config("natrix.toml", &t.conf().render());
    t.start_daemon(&cfg);
    let server = udp_socket(&t.srv, SocketAddrV4::new(SERVER_IP, 7000), Duration::from_secs(3));
    let (c, out) = udp_mapping(&t.s1, &server);
    (t, server, c, out)
}

/// One datagram out and its answer back; the answer must arrive.
fn exchange(server: &std::net::UdpSocket, c: &std::net::UdpSocket, out: SocketAddrV4, what: &[u8]) {
    c.send_to(what, local_of(server)).unwrap();
    let (d, from) = udp_recv(server).expect("the server got the datagram");
    assert_eq!((d.as_slice(), from), (what, out));
    server.send_to(b"answer", from).unwrap();
    let (d, _) = udp_recv(c).expect("the answer came back");
    assert_eq!(d, b"answer");
}

/// The issue's main case: a filter on the subscriber's address catches both directions,
/// each packet as received and as sent, paired by packet id, on the right interfaces, with
/// the verdict and the mapping in the comment.
#[test]
fn both_forms_of_each_packet_paired_on_both_sides_of_the_nat() {
    let (t, server, c, out) = running();
    let inside = SocketAddrV4::new(SUB1_IP, local_of(&c).port());
    let cap = Capture::start(&t, "pair", &["-c", "4", "-G", "20", "udp", "and", "host", "100.64.0.2"]);
    exchange(&server, &c, out, b"captured");
    let (err, file) = cap.finish_with_file(false);
    assert!(err.contains("4 records written, 0 records lost"), "{err}");
    let recs = read(&file);
    assert_eq!(recs.len(), 4, "{recs:#?}");
    let (o_rx, o_tx, i_rx, i_tx) = (&recs[0], &recs[1], &recs[2], &recs[3]);
    // outbound: the subscriber's address before, the pool's after
    assert_eq!((o_rx.iface.as_str(), o_tx.iface.as_str()), ("lan0 rx", "wan0 tx"), "{recs:#?}");
    assert_eq!(
        (o_rx.src.as_str(), o_rx.sport.as_str()),
        (SUB1_IP.to_string().as_str(), inside.port().to_string().as_str())
    );
    assert_eq!((o_tx.src.clone(), o_tx.sport.clone()), (out.ip().to_string(), out.port().to_string()));
    assert_eq!(o_rx.dst, SERVER_IP.to_string());
    assert_eq!(o_tx.dst, SERVER_IP.to_string());
    // inbound: the reverse
    assert_eq!((i_rx.iface.as_str(), i_tx.iface.as_str()), ("wan0 rx", "lan0 tx"), "{recs:#?}");
    assert_eq!((i_rx.dst.clone(), i_rx.dport.clone()), (out.ip().to_string(), out.port().to_string()));
    assert_eq!((i_tx.dst.clone(), i_tx.dport.clone()), (SUB1_IP.to_string(), inside.port().to_string()));
    // pairs: one id per packet, two packets
    assert_eq!(o_rx.packet_id, o_tx.packet_id);
    assert_eq!(i_rx.packet_id, i_tx.packet_id);
    assert_ne!(o_rx.packet_id, i_rx.packet_id);
    assert!(!o_rx.packet_id.is_empty());
    for r in &recs {
        assert_eq!(r.verdict, "4", "XDP_REDIRECT: {r:?}");
        assert_eq!(r.cap_len, r.len, "the whole packet by default: {r:?}");
    }
    let m_out = format!("redirect: redirected; mapping udp {inside} -> {out}");
    let m_in = format!("redirect: redirected; mapping udp {inside} <- {out}");
    assert_eq!(o_rx.comment, m_out);
    assert_eq!(o_tx.comment, m_out);
    assert_eq!(i_rx.comment, m_in);
    assert_eq!(i_tx.comment, m_in);
}

/// A filter that matches nothing captures nothing (a valid, empty pcapng); invalid syntax
/// exits 2 with libpcap's message and leaves no capture behind.
#[test]
fn a_filter_matching_nothing_captures_nothing_and_bad_syntax_exits_2() {
    let (t, server, c, out) = running();
    let cap = Capture::start(&t, "none", &["-G", "3", "host", "192.0.2.99"]);
    for _ in 0..5 {
        exchange(&server, &c, out, b"not captured");
    }
    let err = cap.finish(false);
    assert!(err.contains("0 records written, 0 records lost"), "{err}");
    assert!(read(&t.dir.join("none.pcapng")).is_empty());

    let bad = t.natrix(&["capture", "--pin", &t.pin_str(), "-w", "/dev/null", "udp", "and", "and"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let msg = String::from_utf8_lossy(&bad.stderr);
    assert!(msg.contains("syntax error"), "libpcap's message: {msg}");
    // nothing left in place: traffic still flows, a new capture starts
    exchange(&server, &c, out, b"still flows");
    Capture::start(&t, "after", &["-c", "1", "udp"]).finish(true);
}

/// --drops: unsolicited packets to the pool are recorded with their reason, and only drops.
#[test]
fn drops_records_say_no_mapping() {
    let (t, server, c, out) = running();
    let cap = Capture::start(&t, "drops", &["--drops", "-G", "4"]);
    exchange(&server, &c, out, b"allowed, not a drop");
    let stranger = udp_socket(&t.srv, SocketAddrV4::new(SERVER_IP, 7001), Duration::from_millis(300));
    for port in [40001u16, 40002, 40003] {
        stranger.send_to(b"unsolicited", SocketAddrV4::new(out.ip().to_owned(), port)).unwrap();
    }
    let err = cap.finish(false);
    let recs = read(&t.dir.join("drops.pcapng"));
    assert_eq!(recs.len(), 3, "{err}\n{recs:#?}");
    for (r, port) in recs.iter().zip([40001, 40002, 40003]) {
        assert_eq!(r.comment, "drop: no_mapping", "{r:?}");
        assert_eq!(r.verdict, "1", "XDP_DROP: {r:?}");
        assert_eq!(r.iface, "wan0 rx");
        assert_eq!(r.dport, port.to_string());
    }
}

/// `-w -` streams pcapng that `tshark -r -` reads as it comes; -s 128 keeps 128 bytes.
#[test]
fn stdout_piped_into_tshark_and_snaplen() {
    let (t, server, c, out) = running();
    let file = t.dir.join("piped.txt");
    let fields: Vec<String> = FIELDS.iter().flat_map(|f| ["-e".to_owned(), f.to_string()]).collect();
    let script = format!(
        "{} capture --pin {} -c 2 -G 20 -s 128 -w - udp | tshark -r - -T fields -E separator='|' -E occurrence=f {} > {}",
        common::netns::NATRIX,
        t.pin_str(),
        fields.join(" "),
        file.display()
    );
    let err = t.dir.join("piped.err");
    let mut child = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", t.gw))
        .args(["sh", "-c", &script])
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    wait_for("the capture to listen", Duration::from_secs(20), Duration::from_millis(20), || {
        std::fs::read_to_string(&err).unwrap_or_default().contains("listening on").then_some(())
    });
    exchange(&server, &c, out, &[0x5a; 1000]);
    let end = Instant::now() + Duration::from_secs(20);
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < end, "the pipeline did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&err).unwrap();
    assert!(st.success(), "{text}");
    assert!(text.contains("2 records written"), "{text}");
    let recs = parse_tshark(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(recs.len(), 2, "{recs:#?}");
    for r in &recs {
        assert_eq!(r.cap_len, 128, "{r:?}");
        assert_eq!(r.len, 14 + 20 + 8 + 1000, "{r:?}");
    }
}

/// The capture needs no daemon: stopped, the data plane still translates, and the capture
/// sees it. A second capture while one runs gets a clear error; -i chooses the interface.
#[test]
fn captures_with_the_daemon_stopped_one_at_a_time() {
    let (mut t, server, c, out) = running();
    t.stop_daemon(libc::SIGTERM);
    exchange(&server, &c, out, b"no daemon");
    let cap = Capture::start(&t, "nodaemon", &["-i", "wan0", "-G", "20", "-c", "2", "udp"]);
    let second = t.natrix(&["capture", "--pin", &t.pin_str(), "-w", "/dev/null"]);
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    let msg = String::from_utf8_lossy(&second.stderr);
    assert!(msg.contains("another capture is running (pid"), "{msg}");
    exchange(&server, &c, out, b"no daemon, captured");
    let err = cap.finish(false);
    assert!(err.contains("2 records written"), "{err}");
    let recs = read(&t.dir.join("nodaemon.pcapng"));
    let ifaces: Vec<&str> = recs.iter().map(|r| r.iface.as_str()).collect();
    assert_eq!(ifaces, ["wan0 tx", "wan0 rx"], "only wan0's points: {recs:#?}");
    assert_eq!(recs[0].src, out.ip().to_string());
    assert_eq!(recs[1].dst, out.ip().to_string());
    let bad_if = t.natrix(&["capture", "--pin", &t.pin_str(), "-i", "lo", "-w", "/dev/null"]);
    assert_eq!(bad_if.status.code(), Some(2), "{bad_if:?}");
    assert!(String::from_utf8_lossy(&bad_if.stderr).contains("not one of natrix's interfaces"));
}

/// A capture killed before it can take its stages out (SIGKILL) leaves them in the data
/// plane; the daemon's sweep removes them, and traffic never stops meanwhile.
#[test]
fn a_killed_capture_is_cleaned_up_by_the_daemon() {
    let (t, server, c, out) = running();
    let mut cap = Capture::start(&t, "killed", &["udp"]);
    let pid = cap.child.as_ref().unwrap().id();
    exchange(&server, &c, out, b"captured, then killed");
    let mut child = cap.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    exchange(&server, &c, out, b"flows with the stages orphaned");
    let log = wait_for(
        "the daemon to remove the stages",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let log = t.daemon_log();
            log.contains("a capture ended without cleaning up").then_some(log)
        },
    );
    assert!(log.contains(&format!("pid={pid}")), "the dead capture's pid: {log}");
    exchange(&server, &c, out, b"flows after");
    let again = Capture::start(&t, "again", &["-c", "2", "udp"]);
    exchange(&server, &c, out, b"a new capture");
    assert!(again.finish(false).contains("2 records written"));
}

/// The other sent forms the issue names: a hairpinned packet (translated both ways, out of
/// the other inside interface: both mappings in its comment), a packet passed to the
/// kernel (`lan0 kernel`), and an ICMP error natrix generates itself (a new session over
/// `limits.max_sessions_per_subscriber` = 2 refused: the ICMP error is the sent form, back
/// out of `lan0`).
#[test]
fn hairpin_kernel_and_generated_icmp_forms() {
    need_tools();
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("limits.max_sessions_per_subscriber", "2");
    let cfg = t.write_config("natrix.toml", &conf.render());
    t.start_daemon(&cfg);
    let server = udp_socket(&t.srv, SocketAddrV4::new(SERVER_IP, 7000), Duration::from_secs(3));
    let (s2, out2) = udp_mapping(&t.s2, &server);
    let (s1, out1) = udp_mapping(&t.s1, &server);
    let in1 = SocketAddrV4::new(SUB1_IP, local_of(&s1).port());
    let in2 = SocketAddrV4::new(SUB2_IP, local_of(&s2).port());
    let cap = Capture::start(&t, "forms", &["-G", "6", "host", "100.64.0.2"]);
    // hairpin: s1's second session, to s2's outside endpoint
    s1.send_to(b"hairpin", out2).unwrap();
    let (d, from) = udp_recv(&s2).expect("the hairpinned datagram reached s2");
    assert_eq!((d.as_slice(), from), (&b"hairpin"[..], out1));
    // a third session: refused, with natrix's ICMP error
    s1.send_to(b"one too many", SocketAddrV4::new(SERVER_IP, 7001)).unwrap();
    // to the gateway itself: passed to the kernel
    assert!(ping(&t.s1, std::net::Ipv4Addr::new(100, 64, 0, 1), 1) >= 1, "the gateway answers pings");
    let err = cap.finish(false);
    let recs = read(&t.dir.join("forms.pcapng"));
    let by = |iface: &str| recs.iter().filter(|r| r.iface == iface).cloned().collect::<Vec<_>>();
    let pair_of =
        |tx: &Rec| recs.iter().find(|r| r.packet_id == tx.packet_id && r.iface.ends_with(" rx")).cloned();

    let hp = by("lan1 tx");
    assert_eq!(hp.len(), 1, "{err}\n{recs:#?}");
    let rx = pair_of(&hp[0]).expect("the hairpinned packet's received form");
    assert_eq!(rx.iface, "lan0 rx");
    assert_eq!((rx.src.clone(), rx.dst.clone()), (SUB1_IP.to_string(), out2.ip().to_string()));
    assert_eq!((hp[0].src.clone(), hp[0].dst.clone()), (out1.ip().to_string(), SUB2_IP.to_string()));
    let both = format!("redirect: redirected; mapping udp {in1} -> {out1}; mapping udp {in2} <- {out2}");
    assert_eq!((rx.comment.as_str(), hp[0].comment.as_str()), (both.as_str(), both.as_str()));

    let icmp: Vec<Rec> =
        by("lan0 tx").into_iter().filter(|r| r.comment.starts_with("redirect: icmp_sent")).collect();
    assert_eq!(icmp.len(), 1, "{recs:#?}");
    assert_eq!((icmp[0].src.as_str(), icmp[0].dst.as_str()), ("100.64.0.1", SUB1_IP.to_string().as_str()));
    let rx = pair_of(&icmp[0]).expect("the refused packet's received form");
    assert_eq!((rx.iface.as_str(), rx.dport.as_str()), ("lan0 rx", "7001"));

    assert!(
        by("lan0 kernel").iter().any(|r| r.comment == "pass: pass_local" && r.dst == "100.64.0.1"),
        "the ping to the gateway, passed to the kernel: {recs:#?}"
    );
}
