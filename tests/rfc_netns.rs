// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! RFC behaviour end to end, with real traffic through the `natrix` binary in namespaces
//! (tests/common/netns/): what a STUN client (coturn's RFC 5780 discovery) concludes about
//! the NAT, fragments in and out of order, path MTU discovery both ways, silence towards
//! unsolicited SYNs, hairpinning between subscribers, static forwards and exclusions, and
//! the ICMP a subscriber gets when its port quota is spent. docs/RFC-COMPLIANCE.md names
//! these tests.
//!
//! Needs root (namespaces, XDP, bpffs, raw sockets) and coturn (`turnserver`,
//! `turnutils_natdiscovery`). Run: `cargo test --release --test rfc_netns -- --test-threads=2`

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use common::netns::*;
use common::wire::*;
use natrix::abi::{PROTO_ICMP, PROTO_TCP};

fn started(t: &mut Topo, conf: &Conf) -> std::path::PathBuf {
    started_with(t, conf, "")
}

/// Starts the daemon with `conf` plus raw TOML appended (`[[forward]]`, `[[exclude]]`
/// tables, which `Conf` does not model; TOML allows them after the other tables).
fn started_with(t: &mut Topo, conf: &Conf, tables: &str) -> std::path::PathBuf {
    let cfg = t.write_config("natrix.toml", &format!("{}{tables}", conf.render()));
    t.start_daemon(&cfg);
    cfg
}

fn ip_route_get(ns: &str, dst: Ipv4Addr) -> String {
    ns_ip(ns, &["route", "get", &dst.to_string()])
}

// ---------------------------------------------------------------------------------------
// TCP sockets sharing a port (SO_REUSEPORT), in the calling thread's namespace

fn tcp_reuseport_socket() -> OwnedFd {
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "tcp socket: {}", std::io::Error::last_os_error());
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1);
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1);
    // SAFETY: a fresh fd we own.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
        sin_zero: [0; 8],
    }
}

fn bind_fd(fd: &OwnedFd, a: SocketAddrV4) {
    let sa = sockaddr(a);
    // SAFETY: valid fd and sockaddr_in.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of_val(&sa) as u32,
        )
    };
    assert_eq!(rc, 0, "bind {a}: {}", std::io::Error::last_os_error());
}

/// A listener on any port with SO_REUSEPORT, and that port.
fn reuseport_listener() -> (TcpListener, u16) {
    let fd = tcp_reuseport_socket();
    bind_fd(&fd, any_port(Ipv4Addr::UNSPECIFIED));
    // SAFETY: valid fd.
    assert_eq!(unsafe { libc::listen(fd.as_raw_fd(), 16) }, 0);
    let l = TcpListener::from(fd);
    let port = l.local_addr().unwrap().port();
    (l, port)
}

/// A connection from local `port` (shared with a listener through SO_REUSEPORT) to `to`.
fn reuseport_connect(port: u16, to: SocketAddrV4) -> TcpStream {
    let fd = tcp_reuseport_socket();
    bind_fd(&fd, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
    let sa = sockaddr(to);
    // SAFETY: valid fd and sockaddr_in; a blocking connect to a reachable server.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of_val(&sa) as u32,
        )
    };
    assert_eq!(rc, 0, "connect from port {port} to {to}: {}", std::io::Error::last_os_error());
    let s = TcpStream::from(fd);
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// Accepts one connection within `timeout` (the listener is made non-blocking).
fn accept_within(l: &TcpListener, timeout: Duration) -> Option<(TcpStream, SocketAddrV4)> {
    l.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + timeout;
    loop {
        match l.accept() {
            Ok((s, peer)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
                return Some((s, v4_of(peer)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

fn read_line(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while out.len() < 1024 {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) => out.push(b[0]),
            Err(e) => panic!("read: {e}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------------------
// 1, 2. coturn's RFC 5780 discovery through natrix

/// A STUN server with two addresses (RFC 5780 needs an alternate address and port) in the
/// server namespace, and `turnutils_natdiscovery -m -f` run from subscriber 1. Returns its
/// output.
fn natdiscovery(filtering: Option<&str>) -> String {
    let mut t = Topo::new();
    let mut conf = t.conf();
    if let Some(f) = filtering {
        conf.set("nat.filtering", &format!("{f:?}"));
    }
    started(&mut t, &conf);
    t.add_server_addr("198.51.100.3/24");
    let pidfile = t.dir.join("turnserver.pid").display().to_string();
    let db = t.dir.join("turndb").display().to_string();
    let mut turn = BgProcess::start(
        &t.srv,
        &[
            "turnserver",
            "-n",
            "--stun-only",
            "-L",
            "198.51.100.2",
            "-L",
            "198.51.100.3",
            "--no-tls",
            "--no-dtls",
            "--no-cli",
            "--log-file",
            "stdout",
            "--pidfile",
            &pidfile,
            "--userdb",
            &db,
        ],
        t.dir.join("turnserver.log"),
    );
    let wanted = ["198.51.100.2:3478", "198.51.100.2:3479", "198.51.100.3:3478", "198.51.100.3:3479"];
    wait_for(
        "turnserver listening on both addresses",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            turn.assert_running("turnserver");
            let ss = ns_sh(&t.srv, &["ss", "-Hunl"]);
            wanted.iter().all(|w| ss.contains(w)).then_some(())
        },
    );
    let out = ns_exec(
        &t.s1,
        &["timeout", "45", "turnutils_natdiscovery", "-m", "-f", "198.51.100.2"],
        Duration::from_secs(60),
    );
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("---- natdiscovery (filtering {filtering:?}) ----\n{text}");
    // the discovery really went through natrix: its mappings are pool addresses
    let sess = t.sessions();
    assert!(
        sess.iter()
            .any(|s| s.proto == "udp" && *s.inside_addr().ip() == SUB1_IP && is_pool(*s.outside_addr().ip())),
        "no translated UDP session of subscriber 1: {sess:#?}\n{text}"
    );
    turn.assert_running("turnserver");
    text
}

#[test]
fn coturn_reports_eim_and_eif_by_default() {
    let text = natdiscovery(None);
    assert!(text.contains("NAT with Endpoint Independent Mapping!"), "{text}");
    assert!(text.contains("NAT with Endpoint Independent Filtering!"), "{text}");
}

#[test]
fn coturn_reports_dependent_filtering_when_configured() {
    // a fresh topology and daemon per mode, both at once
    let (apdf, adf) = std::thread::scope(|s| {
        let a = s.spawn(|| natdiscovery(Some("address-and-port-dependent")));
        let b = s.spawn(|| natdiscovery(Some("address-dependent")));
        (
            a.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
            b.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
        )
    });
    assert!(apdf.contains("NAT with Endpoint Independent Mapping!"), "{apdf}");
    assert!(apdf.contains("Address and Port Dependent Filtering"), "{apdf}");
    assert!(!apdf.contains("Endpoint Independent Filtering"), "{apdf}");
    assert!(adf.contains("NAT with Endpoint Independent Mapping!"), "{adf}");
    assert!(adf.contains("Address Dependent Filtering"), "{adf}");
    assert!(!adf.contains("Address and Port Dependent Filtering"), "{adf}");
    assert!(!adf.contains("Endpoint Independent Filtering"), "{adf}");
}

// ---------------------------------------------------------------------------------------
// 3. fragments

#[test]
fn fragments_out_of_order_inbound() {
    const LEN: usize = 4000;
    let mut t = Topo::new();
    let conf = t.conf();
    started(&mut t, &conf);
    let srv = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(3));
    let srv_addr = local_of(&srv);
    let (c, m) = udp_mapping(&t.s1.clone(), &srv);
    let c_local = SocketAddrV4::new(SUB1_IP, local_of(&c).port());
    let st0 = t.stats();

    // in order, both ways: the hosts' own stacks fragment a 4000-byte datagram
    let mut big = vec![0u8; LEN];
    fill_pattern(&mut big, 1);
    srv.send_to(&big, m).unwrap();
    let (d, from) = recv_big(&c).expect("in-order inbound fragments: nothing arrived");
    assert_eq!(from, srv_addr);
    assert!(d == big, "in-order inbound datagram corrupted ({} bytes)", d.len());
    fill_pattern(&mut big, 2);
    c.send_to(&big, srv_addr).unwrap();
    let (d, from) = recv_big(&srv).expect("in-order outbound fragments: nothing arrived");
    assert_eq!(from, m, "in-order outbound fragments: another source than the mapping");
    assert!(d == big, "in-order outbound datagram corrupted ({} bytes)", d.len());
    let st1 = t.stats();
    assert!(
        st1.counter("fragments_in") >= st0.counter("fragments_in") + 2,
        "in order: 3 fragments in, 2 of them later ones: {:?}",
        st1.0
    );
    assert!(st1.counter("fragments_out") >= st0.counter("fragments_out") + 2, "{:?}", st1.0);

    // inbound in REVERSE order, crafted in the server namespace: the last fragment first,
    // the first (with the UDP header) last; the daemon holds the early ones
    let raw_srv = raw_ip_socket(&t.srv);
    fill_pattern(&mut big, 3);
    let frags = udp_fragments(srv_addr, m, 0x4e58, &big, 1480);
    assert_eq!(frags.len(), 3);
    for f in frags.iter().rev() {
        raw_send(&raw_srv, f);
    }
    let (d, from) = recv_big(&c).expect("reverse-order inbound fragments: nothing arrived");
    assert_eq!(from, srv_addr);
    assert!(d == big, "reverse-order inbound datagram corrupted ({} bytes)", d.len());
    let mut st2 = t.stats();
    assert!(
        st2.counter("fragments_held") >= st1.counter("fragments_held") + 2,
        "the two early fragments were not held: {:?}",
        st2.0
    );
    // and counted as sent on by the daemon (it counts right after sending: a moment later)
    for _ in 0..100 {
        if st2.counter("fragments_reinjected") >= st1.counter("fragments_reinjected") + 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        st2 = t.stats();
    }
    assert!(
        st2.counter("fragments_reinjected") >= st1.counter("fragments_reinjected") + 2,
        "the two held fragments were not counted as reinjected: {:?}",
        st2.0
    );
    assert_eq!(st2.drop_count("fragment_expired") + st2.drop_count("fragment_evicted"), 0, "{:?}", st2.0);

    // outbound in reverse order, crafted in subscriber 1 from the mapped socket's port
    let raw_s1 = raw_ip_socket(&t.s1);
    fill_pattern(&mut big, 4);
    let frags = udp_fragments(c_local, srv_addr, 0x4e59, &big, 1480);
    for f in frags.iter().rev() {
        raw_send(&raw_s1, f);
    }
    let (d, from) = recv_big(&srv).expect("reverse-order outbound fragments: nothing arrived");
    assert_eq!(from, m, "reverse-order outbound: another source than the mapping");
    assert!(d == big, "reverse-order outbound datagram corrupted ({} bytes)", d.len());
    let st3 = t.stats();
    assert!(st3.counter("fragments_out") >= st2.counter("fragments_out") + 2, "{:?}", st3.0);
    assert_eq!(st3.drop_count("fragment"), 0, "{:?}", st3.0);
    assert_eq!(st3.drop_count("fragment_no_room"), 0, "{:?}", st3.0);

    // and the mapping still works plainly
    srv.send_to(b"after", m).unwrap();
    let (d, _) = recv_big(&c).expect("plain datagram after the fragments");
    assert_eq!(d, b"after");
}

// ---------------------------------------------------------------------------------------
// 4. path MTU

/// Polls until `ns` learned a path MTU of `mtu` towards `dst` (`ip route get` shows it) or a
/// DF send of `len` bytes on `s` fails with EMSGSIZE. Returns which it saw.
fn wait_pmtu_learned(ns: &str, s: &UdpSocket, dst: SocketAddrV4, len: usize, mtu: u32) -> String {
    let payload = vec![0x5au8; len];
    wait_for(
        &format!("{ns} to learn mtu {mtu} towards {dst}"),
        Duration::from_secs(5),
        Duration::from_millis(100),
        || {
            let route = ip_route_get(ns, *dst.ip());
            if route.contains(&format!("mtu {mtu}")) {
                return Some(format!("route: {}", route.trim()));
            }
            match s.send_to(&payload, dst) {
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => Some("EMSGSIZE".to_owned()),
                _ => None,
            }
        },
    )
}

#[test]
fn pmtu_both_directions() {
    let mut t = Topo::new();
    let conf = t.conf();
    started(&mut t, &conf);
    let (s1, srvns) = (t.s1.clone(), t.srv.clone());
    let srv = udp_socket(&srvns, any_port(SERVER_IP), Duration::from_secs(2));
    let srv_addr = local_of(&srv);
    let (c, m) = udp_mapping(&s1, &srv);

    // inbound: the inside link is smaller than the datagram, DF set
    t.set_gw_mtu("lan0", 1280);
    let df = udp_socket(&srvns, any_port(SERVER_IP), Duration::from_secs(2));
    setsockopt_int(df.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO);
    let st0 = t.stats();
    df.send_to(&[0x11; 1400], m).expect("first DF send (the route still says 1500)");
    let how = wait_pmtu_learned(&srvns, &df, m, 1400, 1280);
    eprintln!("server learned the path MTU to {m}: {how}");
    let st1 = t.stats();
    assert!(st1.drop_count("mtu_exceeded") > st0.drop_count("mtu_exceeded"), "{:?}", st1.0);
    assert!(st1.counter("icmp_sent") > st0.counter("icmp_sent"), "no ICMP generated: {:?}", st1.0);
    let got = udp_drain(&c, Duration::from_millis(300));
    assert!(got.iter().all(|(d, _)| d.len() != 1400), "a 1400-byte DF datagram crossed a 1280 link");
    // what fits still passes
    df.send_to(&[0x22; 1200], m).unwrap();
    let (d, from) = recv_big(&c).expect("a 1200-byte DF datagram did not arrive");
    assert_eq!((d.len(), from), (1200, local_of(&df)));
    t.set_gw_mtu("lan0", 1500);

    // outbound: the outside link is smaller
    t.set_gw_mtu("wan0", 1280);
    // without DF (first, before the subscriber learns anything): natrix translates, the
    // gateway's kernel fragments the translated packet
    let nodf = udp_socket(&s1, any_port(Ipv4Addr::UNSPECIFIED), Duration::from_secs(2));
    setsockopt_int(nodf.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DONT);
    let mut big = vec![0u8; 1400];
    fill_pattern(&mut big, 9);
    let st2 = t.stats();
    nodf.send_to(&big, srv_addr).unwrap();
    let (d, from) = recv_big(&srv).expect("a 1400-byte datagram without DF did not arrive");
    assert_pool(from, "source of the datagram the gateway fragmented");
    assert!(d == big, "the datagram fragmented by the gateway is corrupted ({} bytes)", d.len());
    let st3 = t.stats();
    assert!(st3.counter("pass_too_big") > st2.counter("pass_too_big"), "{:?}", st3.0);

    // with DF: the subscriber is told (by the gateway's kernel) and learns 1280
    let dfo = udp_socket(&s1, any_port(Ipv4Addr::UNSPECIFIED), Duration::from_secs(2));
    setsockopt_int(dfo.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO);
    dfo.send_to(&[0x33; 1400], srv_addr).expect("first DF send from the subscriber");
    let how = wait_pmtu_learned(&s1, &dfo, srv_addr, 1400, 1280);
    eprintln!("subscriber learned the path MTU to {srv_addr}: {how}");
    let got = udp_drain(&srv, Duration::from_millis(300));
    assert!(
        got.iter().all(|(d, _)| d.len() != 1400),
        "a 1400-byte DF datagram crossed a 1280 link: {:?}",
        got.len()
    );
    // and the small ones still go, translated
    dfo.send_to(&[0x44; 1200], srv_addr).unwrap();
    let (d, from) = recv_big(&srv).expect("a 1200-byte DF datagram did not arrive");
    assert_eq!(d.len(), 1200);
    assert_pool(from, "source of the 1200-byte datagram");
}

// ---------------------------------------------------------------------------------------
// 5. unsolicited SYN

/// A SYN from the server namespace (its kernel: the first SYN and a retransmission) to
/// `to`; the connect must not succeed nor be refused.
fn probe_syn(srvns: &str, to: SocketAddrV4) {
    let r = in_netns(srvns, || TcpStream::connect_timeout(&to.into(), Duration::from_millis(1500)));
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut || e.raw_os_error() == Some(libc::EINPROGRESS) => {
        }
        Err(e) => panic!("an unsolicited SYN to {to} got an answer: {e}"),
        Ok(s) => panic!("an unsolicited SYN to {to} connected: {s:?}"),
    }
}

#[test]
fn unsolicited_syn_gets_nothing_back() {
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("nat.filtering", r#""address-and-port-dependent""#);
    started(&mut t, &conf);
    let srvns = t.srv.clone();
    let server = TcpServer::start(&srvns, SERVER_IP);
    let mut c = TcpClient::connect(&t.s1, server.addr);
    let m = c.who();
    assert_pool(m, "the connection's outside endpoint");
    let no_map = SocketAddrV4::new(*m.ip(), m.port() ^ 2);
    assert!(t.sessions().iter().all(|s| s.outside != no_map.to_string()), "{no_map} is mapped");
    let st0 = t.stats();

    let cap = Capture::start(&srvns);
    // a pool address and port without a mapping
    probe_syn(&srvns, no_map);
    // the connection's mapping, from another port of the same server (its session is
    // with server.addr only): address-and-port-dependent filtering refuses it
    probe_syn(&srvns, m);
    // a positive control: the capture does see what comes in (the idle connection's
    // answer to a request, from its outside endpoint to the server's port)
    assert_eq!(c.who(), m);
    let got = cap.finish_after(Duration::from_millis(6500));
    assert!(
        got.iter().any(|p| p.proto == PROTO_TCP
            && p.src == *m.ip()
            && p.a == m.port()
            && p.b == server.addr.port()),
        "the capture missed the connection's own traffic: {got:#?}"
    );

    let answers: Vec<&Captured> = got
        .iter()
        // any ICMP, any TCP but to the server's listening port (the idle connection)
        .filter(|p| p.proto == PROTO_ICMP || (p.proto == PROTO_TCP && p.b != server.addr.port()))
        .collect();
    assert!(answers.is_empty(), "unsolicited SYNs were answered: {answers:#?}");
    let st1 = t.stats();
    assert!(st1.drop_count("no_mapping") > st0.drop_count("no_mapping"), "{:?}", st1.0);
    assert!(st1.drop_count("filtered") > st0.drop_count("filtered"), "{:?}", st1.0);
    // nothing reached the subscriber: its only session is still the one connection
    let sess: Vec<Session> = t.sessions().into_iter().filter(|s| s.proto == "tcp").collect();
    assert_eq!(sess.len(), 1, "{sess:#?}");
    assert_eq!(v4(&sess[0].remote), server.addr, "{sess:#?}");
    // the connection is untouched
    assert_eq!(c.who(), m);
    c.close();
}

// ---------------------------------------------------------------------------------------
// 6. hairpinning

#[test]
fn hairpin_between_subscribers() {
    let mut t = Topo::new();
    let conf = t.conf();
    started(&mut t, &conf);
    let (s1, s2, srvns) = (t.s1.clone(), t.s2.clone(), t.srv.clone());
    let srv = udp_socket(&srvns, any_port(SERVER_IP), Duration::from_secs(2));

    // UDP: both subscribers have a mapping, learnt from what the server saw
    let (u1, m1) = udp_mapping(&s1, &srv);
    let (u2, m2) = udp_mapping(&s2, &srv);
    assert_ne!(m1, m2);
    u2.send_to(b"hairpin from s2", m1).unwrap();
    let (d, from) = udp_recv(&u1).expect("s1 got nothing through the hairpin");
    assert_eq!(d, b"hairpin from s2");
    assert!(!is_subscriber(*from.ip()), "s1 sees s2's inside address {from}");
    assert_eq!(from, m2, "s1 does not see s2's outside endpoint");
    u1.send_to(b"hairpin reply", from).unwrap();
    let (d, from) = udp_recv(&u2).expect("the reply did not come back through the hairpin");
    assert_eq!((d.as_slice(), from), (&b"hairpin reply"[..], m1));

    // TCP, dynamically (no [[forward]]): s1 listens on port P and, from a socket sharing P
    // (SO_REUSEPORT), connects to the server: that creates s1's TCP mapping for P. s2 then
    // connects to that mapping's outside endpoint.
    let server = TcpServer::start(&srvns, SERVER_IP);
    let srv_tcp = server.addr;
    let (listener, p, mut to_server) = in_netns(&s1, || {
        let (l, p) = reuseport_listener();
        let s = reuseport_connect(p, srv_tcp);
        (l, p, s)
    });
    writeln!(to_server, "WHO").unwrap();
    let m1t = v4(&read_line(&mut to_server));
    assert_pool(m1t, "s1's TCP outside endpoint");
    let mut from_s2 = in_netns(&s2, || TcpStream::connect_timeout(&m1t.into(), Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("s2 cannot connect to s1's outside endpoint {m1t}: {e}"));
    from_s2.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let s2_local = SocketAddrV4::new(SUB2_IP, from_s2.local_addr().unwrap().port());
    let (mut at_s1, peer) = accept_within(&listener, Duration::from_secs(5)).expect("s1 accepted nothing");
    assert_eq!(at_s1.local_addr().unwrap().port(), p);
    assert_pool(peer, "the TCP peer s1 sees");
    writeln!(at_s1, "you are {peer}").unwrap();
    assert_eq!(read_line(&mut from_s2), format!("you are {peer}"));
    writeln!(from_s2, "thanks").unwrap();
    assert_eq!(read_line(&mut at_s1), "thanks");
    let sess = t.sessions();
    let s2_sess = sess
        .iter()
        .find(|s| s.proto == "tcp" && s.inside_addr() == s2_local)
        .unwrap_or_else(|| panic!("no TCP session of {s2_local}: {sess:#?}"));
    assert_eq!(s2_sess.outside_addr(), peer, "s1 saw another endpoint than s2's mapping");
    assert_eq!(v4(&s2_sess.remote), m1t, "{s2_sess:?}");
    assert!(
        sess.iter().all(|s| !is_subscriber(*v4(&s.remote).ip())),
        "a session has a subscriber's inside address as remote: {sess:#?}"
    );

    // hairpinning off (a restart taking over the same mappings): the datagram is dropped
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));
    let mut off = conf.clone();
    off.set("nat.hairpinning", "false");
    let cfg = t.write_config("no-hairpin.toml", &off.render());
    assert!(t.start_daemon(&cfg).contains("takeover=true"));
    let before = t.stats().drop_count("hairpin_disabled");
    u2.send_to(b"hairpin while disabled", m1).unwrap();
    let got = udp_drain(&u1, Duration::from_millis(700));
    assert!(got.is_empty(), "a hairpinned datagram arrived with hairpinning = false: {got:?}");
    let after = t.stats().drop_count("hairpin_disabled");
    assert!(after > before, "drops.hairpin_disabled {before} -> {after}");
    // the mappings themselves still work with the server
    srv.send_to(b"still mapped", m1).unwrap();
    assert_eq!(udp_recv(&u1).map(|(d, _)| d), Some(b"still mapped".to_vec()));
    drop((at_s1, from_s2, to_server));
}

// ---------------------------------------------------------------------------------------
// 7. [[forward]] and [[exclude]]

#[test]
fn static_forward_and_exclusion() {
    let mut t = Topo::new();
    let conf = t.conf();
    started_with(
        &mut t,
        &conf,
        "[[forward]]\nproto = \"tcp\"\noutside = \"203.0.113.40:8080\"\ninside = \"100.64.1.2:80\"\n\n\
         [[exclude]]\nprefix = \"198.51.100.128/25\"\n",
    );
    let (s1, s2, srvns) = (t.s1.clone(), t.s2.clone(), t.srv.clone());
    t.add_server_addr("198.51.100.200/24");
    // the server answers excluded (untranslated) traffic through the gateway
    ns_ip(&srvns, &["route", "add", "100.64.0.0/10", "via", "198.51.100.1"]);

    // the forward: the server reaches s2's port 80 at 203.0.113.40:8080
    let listener =
        in_netns(&s2, || TcpListener::bind(SocketAddrV4::new(SUB2_IP, 80))).expect("s2: listen on :80");
    let fwd = SocketAddrV4::new(POOL_SINGLE, 8080);
    let mut conn = in_netns(&srvns, || TcpStream::connect_timeout(&fwd.into(), Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("the server cannot connect to the forward {fwd}: {e}"));
    conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let srv_local = v4_of(conn.local_addr().unwrap());
    let (mut at_s2, peer) =
        accept_within(&listener, Duration::from_secs(5)).expect("s2 accepted nothing on :80");
    assert_eq!(peer, srv_local, "s2 does not see the server's real address");
    writeln!(at_s2, "hello {peer}").unwrap();
    assert_eq!(read_line(&mut conn), format!("hello {peer}"));
    assert_eq!(v4_of(conn.peer_addr().unwrap()), fwd);
    let sess = t.sessions();
    let s = sess
        .iter()
        .find(|s| s.proto == "tcp" && s.inside == "100.64.1.2:80")
        .unwrap_or_else(|| panic!("no session of the forward: {sess:#?}"));
    assert_eq!(
        (s.outside.as_str(), v4(&s.remote), s.direction.as_str()),
        ("203.0.113.40:8080", srv_local, "in")
    );

    // the exclusion: to 198.51.100.200 untranslated (both ways), to .2 translated
    let excluded =
        udp_socket(&srvns, SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 200), 0), Duration::from_secs(2));
    let plain = udp_socket(&srvns, any_port(SERVER_IP), Duration::from_secs(2));
    let c = udp_socket(&s1, any_port(Ipv4Addr::UNSPECIFIED), Duration::from_secs(2));
    let c_local = SocketAddrV4::new(SUB1_IP, local_of(&c).port());
    let before = t.stats().counter("pass_excluded");
    c.send_to(b"to the excluded prefix", local_of(&excluded)).unwrap();
    let (d, from) = udp_recv(&excluded).expect("nothing arrived at the excluded address");
    assert_eq!(d, b"to the excluded prefix");
    assert_eq!(from, c_local, "traffic to an excluded prefix was translated");
    excluded.send_to(b"back", from).unwrap();
    assert_eq!(udp_recv(&c), Some((b"back".to_vec(), local_of(&excluded))), "the untranslated reply");
    assert!(t.stats().counter("pass_excluded") > before);
    c.send_to(b"to the server", local_of(&plain)).unwrap();
    let (_, from) = udp_recv(&plain).expect("nothing arrived at the server");
    assert_pool(from, "traffic outside the excluded prefix");
    let sess = t.sessions();
    assert!(
        sess.iter().all(|s| !s.remote.starts_with("198.51.100.200:")),
        "state for excluded traffic: {sess:#?}"
    );
}

// ---------------------------------------------------------------------------------------
// 8. quota: ICMP 3/13

#[test]
fn quota_icmp_reaches_subscriber() {
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("nat.block_size", "4").set("nat.max_blocks_per_subscriber", "1").set("nat.port_class", "false");
    started(&mut t, &conf);
    let s1 = t.s1.clone();
    let srv = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(2));
    let srv_addr = local_of(&srv);
    let flows: Vec<UdpSocket> = (0..5)
        .map(|_| {
            let s = udp_socket(&s1, any_port(Ipv4Addr::UNSPECIFIED), Duration::from_secs(2));
            s.connect(srv_addr).unwrap();
            s
        })
        .collect();

    // four flows: the block's four ports
    let mut outside = Vec::new();
    for (i, f) in flows[..4].iter().enumerate() {
        f.send(format!("flow {i}").as_bytes()).unwrap();
        let (d, from) = udp_recv(&srv).unwrap_or_else(|| panic!("flow {i} did not get through"));
        assert_eq!(d, format!("flow {i}").as_bytes());
        assert_pool(from, "flow source");
        outside.push(from);
    }
    let mut ports: Vec<u16> = outside.iter().map(|a| a.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 4, "four flows, four outside ports: {outside:?}");
    let st0 = t.stats();

    // the fifth: no port left, ICMP destination unreachable comes back (code 1, host
    // unreachable, by default: nat.unreachable_code). Linux counts 3/1 as a soft error: a
    // connected UDP socket reports it (EHOSTUNREACH) only with IP_RECVERR (3/13 always)
    {
        use std::os::fd::AsRawFd;
        let one: libc::c_int = 1;
        // SAFETY: setsockopt on a socket we own, with a pointer to a c_int and its size.
        let rc = unsafe {
            libc::setsockopt(
                flows[4].as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_RECVERR,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "IP_RECVERR: {}", std::io::Error::last_os_error());
    }
    flows[4].send(b"flow 4").unwrap();
    let mut buf = [0u8; 64];
    let err = match flows[4].recv(&mut buf) {
        Err(e) => e,
        Ok(n) => panic!("the fifth flow got a reply: {:?}", &buf[..n]),
    };
    assert_eq!(err.raw_os_error(), Some(libc::EHOSTUNREACH), "expected EHOSTUNREACH (ICMP 3/1), got {err}");
    assert!(udp_drain(&srv, Duration::from_millis(300)).is_empty(), "the fifth flow got through");
    let st1 = t.stats();
    assert!(st1.drop_count("quota_exceeded") > st0.drop_count("quota_exceeded"), "{:?}", st1.0);
    assert!(st1.counter("icmp_sent") > st0.counter("icmp_sent"), "{:?}", st1.0);

    // the first four still work both ways, on the same outside endpoints
    for (i, f) in flows[..4].iter().enumerate() {
        srv.send_to(format!("back {i}").as_bytes(), outside[i]).unwrap();
        let n =
            f.recv(&mut buf).unwrap_or_else(|e| panic!("flow {i}: no reply after the quota was hit: {e}"));
        assert_eq!(&buf[..n], format!("back {i}").as_bytes());
        f.send(format!("again {i}").as_bytes()).unwrap();
        let (d, from) = udp_recv(&srv).unwrap_or_else(|| panic!("flow {i}: nothing after the quota was hit"));
        assert_eq!((d, from), (format!("again {i}").into_bytes(), outside[i]));
    }
}
