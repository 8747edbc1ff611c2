// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! End to end, with real traffic: the `natrix` binary runs in a gateway namespace between two
//! subscriber namespaces and a server namespace (tests/common/netns/), and every test checks
//! what actually arrived, what the far end saw as the peer address, and the state natrix
//! shows afterwards.
//!
//! Needs root (namespaces, XDP, bpffs). Run: `cargo test --release --test netns -- --test-threads=2`

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::netns::*;

const MB: u64 = 1 << 20;

fn assert_pool(a: SocketAddrV4, what: &str) {
    assert!(is_pool(*a.ip()), "{what}: {a} is not a pool address");
    assert!(!is_subscriber(*a.ip()), "{what}: {a} is a subscriber address (not translated)");
}

/// RFC 4787 REQ-5 as configured (nat.port_parity defaults to true) for TCP and UDP.
fn assert_parity(inside: SocketAddrV4, outside: SocketAddrV4) {
    assert_eq!(
        inside.port() % 2,
        outside.port() % 2,
        "port parity not preserved: inside {inside} -> outside {outside}"
    );
}

fn no_xdp_anywhere(t: &Topo) {
    for dev in ["lan0", "lan1", "wan0"] {
        let l = t.gw_link(dev);
        assert!(!l.contains("xdp"), "{dev} still has an XDP program:\n{l}");
    }
}

fn started(t: &mut Topo, conf: &Conf) -> std::path::PathBuf {
    let cfg = t.write_config("natrix.toml", &conf.render());
    t.start_daemon(&cfg);
    cfg
}

fn started_default(t: &mut Topo) -> std::path::PathBuf {
    let conf = t.conf();
    started(t, &conf)
}

// ---------------------------------------------------------------------------------------
// 1. ICMP

#[test]
fn ping_from_both_subscribers_is_translated() {
    let mut t = Topo::new();
    started_default(&mut t);
    for dev in ["lan0", "lan1", "wan0"] {
        assert!(t.xdp_attached(dev), "no XDP on {dev}:\n{}", t.gw_link(dev));
    }
    let (s1, s2, srv) = (t.s1.clone(), t.s2.clone(), t.srv.clone());
    for ns in [&s1, &s2] {
        assert_eq!(ping(ns, SERVER_IP, 3), 3, "{ns}: ping through natrix lost replies");
    }

    let sess = t.sessions();
    let icmp: Vec<&Session> = sess.iter().filter(|s| s.proto == "icmp").collect();
    assert_eq!(icmp.len(), 2, "expected one icmp session per subscriber: {sess:#?}");
    for sub in [SUB1_IP, SUB2_IP] {
        let s = icmp
            .iter()
            .find(|s| *s.inside_addr().ip() == sub)
            .unwrap_or_else(|| panic!("no icmp session of {sub}: {sess:#?}"));
        assert_pool(s.outside_addr(), "icmp session outside");
        assert_eq!(s.remote.split(':').next(), Some("198.51.100.2"), "{s:?}");
        assert_eq!(s.direction, "out", "{s:?}");
        assert_eq!(s.state, "active", "{s:?}");
        assert!(s.expires_in > 0 && s.expires_in <= 60, "icmp timeout is 60s: {s:?}");
    }
    assert_ne!(icmp[0].outside, icmp[1].outside, "two subscribers share one outside endpoint");
    let st = t.stats();
    assert!(st.counter("translated_out") >= 6, "{:?}", st.0);
    assert!(st.counter("translated_in") >= 6, "{:?}", st.0);
    assert_eq!(st.get("subscribers"), 2, "{:?}", st.0);
    assert_eq!(st.get("mappings"), 2, "{:?}", st.0);

    // the gateway itself stays reachable from both sides, untranslated and without state
    assert_eq!(ping(&s1, Ipv4Addr::new(100, 64, 0, 1), 1), 1, "the gateway's inside address");
    assert_eq!(ping(&srv, Ipv4Addr::new(198, 51, 100, 1), 1), 1, "the gateway's outside address");
    // TTL 1 expires at the gateway (its kernel answers), TTL 2 reaches the server
    let ping_ttl = |ttl: &str| {
        ns_exec(
            &s1,
            &["ping", "-n", "-c", "1", "-W", "1", "-t", ttl, &SERVER_IP.to_string()],
            Duration::from_secs(5),
        )
    };
    let out = ping_ttl("1");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("From 100.64.0.1") && text.contains("Time to live exceeded"), "ping -t 1:\n{text}");
    let out = ping_ttl("2");
    assert!(out.status.success(), "ping -t 2 did not reach the server: {out:?}");
    let sess = t.sessions();
    assert_eq!(sess.len(), 3, "only the pings to the server have state: {sess:#?}");
    assert!(sess.iter().all(|s| s.remote.starts_with("198.51.100.2:")), "{sess:#?}");
}

/// The daemon's watcher keeps the FIB cache honest under real traffic: once the gateway's
/// neighbour entry for the server names a MAC nobody has, pings stop (a cached answer
/// would carry them on for fib_cache.max_age, 10 s here); back to the server's MAC, they
/// pass again.
#[test]
fn fib_cache_follows_a_next_hop_change_under_traffic() {
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("fib_cache.max_age", r#""10s""#);
    started(&mut t, &conf);
    let (s1, gw) = (t.s1.clone(), t.gw.clone());
    assert_eq!(ping(&s1, SERVER_IP, 3), 3, "before the change: ping through natrix lost replies");
    let before = t.stats().counter("fib_lookups");
    let link = ns_ip(&t.srv, &["-br", "link", "show", "eth0"]);
    let mac = link.split_whitespace().nth(2).expect("the server's MAC").to_string();
    let neigh = |lladdr: &str| {
        ns_ip(
            &gw,
            &["neigh", "replace", "198.51.100.2", "lladdr", lladdr, "dev", "wan0", "nud", "permanent"],
        );
        std::thread::sleep(Duration::from_millis(100)); // the watcher's thread; far below 10 s
    };
    neigh("02:00:00:00:de:ad");
    assert_eq!(ping(&s1, SERVER_IP, 3), 0, "expected pings sent to a MAC nobody has to be lost");
    neigh(&mac);
    assert_eq!(ping(&s1, SERVER_IP, 3), 3, "expected pings to pass again with the server's MAC");
    let after = t.stats().counter("fib_lookups");
    assert!(
        after >= before + 2,
        "expected each change to make the data plane ask the FIB again: {before} -> {after}"
    );
}

// ---------------------------------------------------------------------------------------
// 2. TCP

#[test]
fn tcp_request_response_and_bulk_from_both_subscribers() {
    let mut t = Topo::new();
    started_default(&mut t);
    let server = TcpServer::start(&t.srv, SERVER_IP);
    let subs = [(t.s1.clone(), SUB1_IP), (t.s2.clone(), SUB2_IP)];

    // both subscribers at once: request/response, 20 MB down, 5 MB up
    let results: Vec<(TcpClient, SocketAddrV4)> = std::thread::scope(|sc| {
        let hs: Vec<_> = subs
            .iter()
            .map(|(ns, ip)| {
                let to = server.addr;
                sc.spawn(move || {
                    let mut c = TcpClient::connect(ns, to);
                    assert_eq!(*c.local.ip(), *ip);
                    let seen = c.who();
                    let started = Instant::now();
                    c.get(20 * MB);
                    let seen_up = c.put(5 * MB);
                    assert_eq!(seen_up, seen, "the server saw the same connection from two addresses");
                    eprintln!("{ns}: 25 MB in {:?}", started.elapsed());
                    (c, seen)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });

    for (c, seen) in &results {
        assert_pool(*seen, "address the server saw");
        assert_parity(c.local, *seen);
    }
    assert_ne!(results[0].1, results[1].1, "two connections share one outside endpoint");

    let sess = t.sessions();
    for (c, seen) in &results {
        let s = sess
            .iter()
            .find(|s| s.proto == "tcp" && s.inside_addr() == c.local)
            .unwrap_or_else(|| panic!("no tcp session for {}: {sess:#?}", c.local));
        assert_eq!(s.outside_addr(), *seen, "sessions shows another outside endpoint than the server saw");
        assert_eq!(v4(&s.remote), server.addr, "{s:?}");
        assert_eq!(s.state, "established", "{s:?}");
        assert_eq!(s.direction, "out", "{s:?}");
        assert!(s.expires_in > 7000, "an established session gets tcp_established (2h4m): {s:?}");
    }

    // orderly close: FINs both ways are seen by the state machine
    let locals: Vec<SocketAddrV4> = results.iter().map(|(c, _)| c.local).collect();
    for (c, _) in results {
        c.close();
    }
    wait_for("both tcp sessions in fin_both", Duration::from_secs(3), Duration::from_millis(100), || {
        let sess = t.sessions();
        locals
            .iter()
            .all(|l| sess.iter().any(|s| s.proto == "tcp" && s.inside_addr() == *l && s.state == "fin_both"))
            .then_some(())
    });
    let st = t.stats();
    assert_eq!(st.get("subscribers"), 2, "{:?}", st.0);
    assert!(st.counter("translated_out") > 1000 && st.counter("translated_in") > 1000, "{:?}", st.0);
}

// ---------------------------------------------------------------------------------------
// 3. UDP

#[test]
fn udp_both_ways_endpoint_independent_filtering_and_unsolicited_drop() {
    let mut t = Topo::new();
    started_default(&mut t);
    let any = SocketAddrV4::new(SERVER_IP, 0);
    let a = udp_socket(&t.srv, any, Duration::from_secs(2));
    let b = udp_socket(&t.srv, any, Duration::from_secs(2));
    let (a_addr, b_addr) = (v4_of(a.local_addr().unwrap()), v4_of(b.local_addr().unwrap()));

    let mut outside = Vec::new();
    let mut clients = Vec::new();
    for (ns, ip) in [(t.s1.clone(), SUB1_IP), (t.s2.clone(), SUB2_IP)] {
        let c = udp_socket(&ns, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), Duration::from_secs(2));
        let local = SocketAddrV4::new(ip, v4_of(c.local_addr().unwrap()).port());
        let hello = format!("hello from {ns}");
        c.send_to(hello.as_bytes(), a_addr).unwrap();
        let (d, from) = udp_recv(&a).unwrap_or_else(|| panic!("server got nothing from {ns}"));
        assert_eq!(d, hello.as_bytes());
        assert_pool(from, "UDP source the server saw");
        assert_parity(local, from);

        // the answer to the address:port the server saw reaches the subscriber
        a.send_to(b"reply", from).unwrap();
        let (d, src) = udp_recv(&c).unwrap_or_else(|| panic!("{ns}: no reply through {from}"));
        assert_eq!((d.as_slice(), src), (&b"reply"[..], a_addr));

        // endpoint-independent filtering: another server port may use the mapping
        b.send_to(b"from another port", from).unwrap();
        let (d, src) =
            udp_recv(&c).unwrap_or_else(|| panic!("{ns}: datagram from a second server port not delivered"));
        assert_eq!((d.as_slice(), src), (&b"from another port"[..], b_addr));

        // the mapping is stable: a full-MTU datagram (1500 - 28) leaves from the same outside
        // endpoint, intact, and one comes back the same way
        let mut big = vec![0u8; 1472];
        fill_pattern(&mut big, 7);
        c.send_to(&big, a_addr).unwrap();
        let (d, from2) = udp_recv(&a).unwrap_or_else(|| panic!("server got no full-size datagram from {ns}"));
        assert_eq!(from2, from, "{ns}: mapping changed between two datagrams");
        assert!(d == big, "{ns}: full-size datagram corrupted ({} bytes)", d.len());
        a.send_to(&big[..1400], from).unwrap();
        let (d, _) = udp_recv(&c).unwrap_or_else(|| panic!("{ns}: no large reply"));
        assert!(d == big[..1400], "{ns}: large reply corrupted ({} bytes)", d.len());
        outside.push((local, from));
        clients.push(c);
    }
    assert_ne!(outside[0].1, outside[1].1, "two subscribers share one outside endpoint");

    // sessions: per subscriber one outbound (to a) and one inbound (from b)
    let sess = t.sessions();
    for (local, out) in &outside {
        let mine: Vec<&Session> =
            sess.iter().filter(|s| s.proto == "udp" && s.inside_addr() == *local).collect();
        assert_eq!(mine.len(), 2, "{local}: {sess:#?}");
        for s in &mine {
            assert_eq!(s.outside_addr(), *out, "{s:?}");
        }
        let to_a = mine.iter().find(|s| v4(&s.remote) == a_addr).expect("session to server port a");
        assert_eq!(to_a.direction, "out", "{to_a:?}");
        let from_b = mine.iter().find(|s| v4(&s.remote) == b_addr).expect("session from server port b");
        assert_eq!(from_b.direction, "in", "{from_b:?}");
    }

    // unsolicited: a pool address and port without a mapping
    let before = t.stats().drop_count("no_mapping");
    let (_, out1) = outside[0];
    let unmapped = [
        SocketAddrV4::new(*out1.ip(), out1.port() ^ 2),
        SocketAddrV4::new(*out1.ip(), out1.port() ^ 4),
        SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 40), 40_000),
    ];
    assert!(unmapped.iter().all(|u| outside.iter().all(|(_, o)| o != u)), "{unmapped:?} vs {outside:?}");
    for to in unmapped {
        a.send_to(b"unsolicited", to).unwrap();
    }
    for c in &clients {
        let got = udp_drain(c, Duration::from_millis(500));
        assert!(got.is_empty(), "unsolicited datagrams arrived: {got:?}");
    }
    let after =
        wait_for("no_mapping drops counted", Duration::from_secs(2), Duration::from_millis(100), || {
            let n = t.stats().drop_count("no_mapping");
            (n >= before + 3).then_some(n)
        });
    assert!(after >= 3, "drops.no_mapping = {after}");
}

// ---------------------------------------------------------------------------------------
// 4. expiry

#[test]
fn expiry_with_short_timeouts() {
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("timeouts.udp", r#""2s""#)
        .set("timeouts.icmp", r#""2s""#)
        .set("timeouts.tcp_transitory", r#""2s""#)
        .set("timeouts.port_hold_down", r#""1s""#)
        .set("daemon.sweep_interval", r#""200ms""#);
    started(&mut t, &conf);
    let (s1, s2) = (t.s1.clone(), t.s2.clone());

    // short-lived traffic of every kind: ping, one UDP datagram, a closed TCP connection
    assert_eq!(ping(&s1, SERVER_IP, 2), 2);
    let server = TcpServer::start(&t.srv, SERVER_IP);
    let mut c = TcpClient::connect(&s2, server.addr);
    assert_pool(c.who(), "tcp peer");
    c.close();
    let sink = udp_socket(&t.srv, SocketAddrV4::new(SERVER_IP, 0), Duration::from_secs(2));
    let sink_addr = v4_of(sink.local_addr().unwrap());
    let one = udp_socket(&s2, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), Duration::from_secs(1));
    one.send_to(b"one", sink_addr).unwrap();
    assert!(udp_recv(&sink).is_some());
    let protos: Vec<String> = t.sessions().into_iter().map(|s| s.proto).collect();
    for p in ["icmp", "tcp", "udp"] {
        assert!(protos.iter().any(|x| x == p), "no {p} session: {protos:?}");
    }

    // a flow that keeps sending every 0.5 s for 4.5 s outlives the 2 s timeout, always with
    // the same outside endpoint
    let flow = udp_socket(&s1, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), Duration::from_secs(1));
    let flow_local = SocketAddrV4::new(SUB1_IP, v4_of(flow.local_addr().unwrap()).port());
    let mut flow_out = None;
    for i in 0..10 {
        flow.send_to(format!("keepalive {i}").as_bytes(), sink_addr).unwrap();
        let (_, from) = udp_recv(&sink).unwrap_or_else(|| panic!("keepalive {i} lost"));
        assert_pool(from, "keepalive source");
        assert_eq!(*flow_out.get_or_insert(from), from, "the active flow's mapping changed at {i}");
        if i == 9 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let flow_out = flow_out.unwrap();
    // by now everything else idled for > 4 s
    let sess = t.sessions();
    assert_eq!(sess.len(), 1, "only the active flow should be left: {sess:#?}");
    assert_eq!((sess[0].proto.as_str(), sess[0].inside_addr()), ("udp", flow_local), "{sess:#?}");
    assert_eq!(sess[0].outside_addr(), flow_out);
    assert_eq!(t.stats().get("mappings"), 1);

    // the flow stops: its state goes too, then ports (after hold-down), blocks, subscribers
    let stopped = Instant::now();
    wait_for("sessions and mappings to expire", Duration::from_secs(5), Duration::from_millis(100), || {
        let st = t.stats();
        (t.sessions().is_empty() && st.get("mappings") == 0).then_some(())
    });
    let took = stopped.elapsed();
    assert!(took >= Duration::from_millis(800), "the flow expired {took:?} after its last packet (udp = 2s)");
    assert!(
        took <= Duration::from_millis(3500),
        "the flow expired only {took:?} after its last packet (udp = 2s)"
    );
    wait_for(
        "ports, blocks and subscribers released",
        Duration::from_secs(5),
        Duration::from_millis(100),
        || {
            let st = t.stats();
            (st.get("ports_in_use") == 0 && st.get("blocks_in_use") == 0 && st.get("subscribers") == 0)
                .then_some(())
        },
    );
    assert!(t.daemon_log().contains("expired"), "the daemon logged no expiry:\n{}", t.daemon_log());
}

// ---------------------------------------------------------------------------------------
// 5. restart

fn restart_keeps_live_tcp(sig: libc::c_int, deterministic: bool) {
    let mut t = Topo::new();
    let mut conf = t.conf();
    if deterministic {
        // 512 subscribers on the 9 pool addresses: 57 to an address, 1130 ports each
        conf.unset("nat.block_size")
            .unset("nat.max_blocks_per_subscriber")
            .set("nat.mode", r#""deterministic""#)
            .set("nat.deterministic_subscribers", r#""100.64.0.0/23""#);
    }
    let cfg = started(&mut t, &conf);
    let server = TcpServer::start(&t.srv, SERVER_IP);
    let mut c = TcpClient::connect(&t.s1, server.addr);
    let out0 = c.who();
    assert_pool(out0, "peer before the restart");
    if deterministic {
        // s1 is 100.64.0.2, subscriber 2: pool address 0, ports 1024 + 2 * 1130 ..
        assert_eq!(*out0.ip(), std::net::Ipv4Addr::new(203, 0, 113, 16), "s1's pool address");
        assert!((3284..4414).contains(&out0.port()), "s1's port {} outside its range", out0.port());
    }
    assert_eq!(c.get(MB), c.get(MB));
    let session_of = |t: &Topo, local: SocketAddrV4| {
        let sess = t.sessions();
        sess.iter()
            .find(|s| s.proto == "tcp" && s.inside_addr() == local)
            .cloned()
            .unwrap_or_else(|| panic!("no tcp session of {local}: {sess:#?}"))
    };
    let s0 = session_of(&t, c.local);
    assert_eq!((s0.outside_addr(), s0.state.as_str()), (out0, "established"));

    let ids0 = natrix::dataplane::running_program_ids(&t.pin).expect("the running programs' ids");
    let st = t.stop_daemon(sig);
    if sig == libc::SIGKILL {
        assert_eq!(st.signal(), Some(libc::SIGKILL), "{st}");
    } else {
        assert_eq!(st.code(), Some(0), "natrix run must exit 0 on signal {sig}:\n{}", t.daemon_log());
        assert!(t.daemon_log().contains("stopping"), "{}", t.daemon_log());
    }

    // no daemon: still attached, still translating, state still readable
    for dev in ["lan0", "lan1", "wan0"] {
        assert!(t.xdp_attached(dev), "{dev} lost its XDP program when the daemon stopped");
    }
    assert_eq!(c.who(), out0, "without a daemon the connection shows another outside endpoint");
    c.get(2 * MB);
    assert_eq!(c.put(2 * MB), out0);
    assert_eq!(session_of(&t, c.local).outside_addr(), out0);
    // the data plane alone also opens new connections
    let mut c1 = TcpClient::connect(&t.s2, server.addr);
    assert_pool(c1.who(), "peer of a connection opened while no daemon runs");

    // the new daemon takes over the running data plane
    let t0 = Instant::now();
    let log = t.start_daemon(&cfg);
    // how long is the bench's business (the verifier's load time varies with the machine's
    // load); start_daemon's own bound catches a hang
    eprintln!("takeover ready in {:?}", t0.elapsed());
    assert!(log.contains("takeover=true"), "the log does not say it took over:\n{log}");
    // the same build: the running programs are kept, nothing is loaded or verified
    assert_eq!(
        natrix::dataplane::running_program_ids(&t.pin).expect("the running programs' ids"),
        ids0,
        "a restart of the same build changed the running programs:\n{log}"
    );
    assert!(log.contains("nothing loaded or verified"), "{log}");

    assert_eq!(c.who(), out0, "after the restart the connection shows another outside endpoint");
    c.get(2 * MB);
    assert_eq!(c.put(2 * MB), out0);
    let s2 = session_of(&t, c.local);
    assert_eq!((s2.outside_addr(), s2.state.as_str()), (out0, "established"), "{s2:?}");
    assert_eq!(v4(&s2.remote), server.addr);

    // and new connections are still translated
    let mut c2 = TcpClient::connect(&t.s2, server.addr);
    assert_pool(c2.who(), "peer of a new connection after the restart");
    c2.close();
    c1.get(MB);
    c1.close();
    c.close();
    let st = t.stats();
    assert_eq!(st.drop_count("tcp_no_syn"), 0, "{:?}", st.0);
}

#[test]
fn restart_after_sigterm_keeps_a_live_tcp_connection() {
    restart_keeps_live_tcp(libc::SIGTERM, false);
}

#[test]
fn restart_after_crash_keeps_a_live_tcp_connection() {
    restart_keeps_live_tcp(libc::SIGKILL, false);
}

/// Deterministic NAT (RFC 7422) through real sockets: s1's connection leaves from the
/// address and range its own address gives it, and a crash and takeover keep it (its
/// mapping is a port word in the pinned port array).
#[test]
fn deterministic_mode_translates_and_survives_a_crash() {
    restart_keeps_live_tcp(libc::SIGKILL, true);
}

/// Deterministic mode with Linux's own TCP clients, whose connect() picks even local ports:
/// with port parity on (the default), the first half of a subscriber's range keeps their
/// parity and the rest falls back to odd ports, so all 8 ports of an 8-port range serve
/// connections; a ninth connection is refused at once (ICMP 3/13), and the eight live on.
#[test]
fn deterministic_mode_gives_one_parity_clients_the_whole_range() {
    let mut t = Topo::new();
    let mut conf = t.conf();
    // 512 subscribers on the 9 pool addresses, 57 to an address, 8 ports each
    conf.unset("nat.block_size")
        .unset("nat.max_blocks_per_subscriber")
        .set("nat.mode", r#""deterministic""#)
        .set("nat.deterministic_subscribers", r#""100.64.0.0/23""#)
        .set("nat.deterministic_ports", "8");
    started(&mut t, &conf);
    let server = TcpServer::start(&t.srv, SERVER_IP);
    // s1 is 100.64.0.2, subscriber 2: pool address 0, ports 1024 + 2 * 8 ..
    let range = 1040u16..1048;
    let mut conns: Vec<(TcpClient, SocketAddrV4)> = (0..8)
        .map(|_| {
            let mut c = TcpClient::connect(&t.s1, server.addr);
            let o = c.who();
            (c, o)
        })
        .collect();
    // Linux's connect() keeps to even local ports while it finds them; the claims below
    // need only that the eight share one parity
    let first_parity = conns[0].0.local.port() % 2;
    let local_even = conns.iter().all(|(c, _)| c.local.port() % 2 == first_parity);
    let mut outs: Vec<u16> = conns.iter().map(|(_, o)| o.port()).collect();
    for (_, o) in &conns {
        assert_eq!(*o.ip(), Ipv4Addr::new(203, 0, 113, 16), "s1's pool address");
        assert!(range.contains(&o.port()), "port {} outside s1's range {range:?}", o.port());
    }
    outs.sort_unstable();
    outs.dedup();
    assert_eq!(outs.len(), 8, "eight connections, eight outside ports: {outs:?}");
    if local_even {
        // the kernel kept to even ports, as Linux does: half fell back
        let other = conns.iter().filter(|(_, o)| o.port() % 2 != first_parity).count();
        assert_eq!(other, 4, "four connections fell back to the other parity");
    }
    let t0 = Instant::now();
    let ninth =
        in_netns(&t.s1, || std::net::TcpStream::connect_timeout(&server.addr.into(), Duration::from_secs(3)));
    // refused at once: natrix answers the SYN with ICMP 3/13, a hard error for connect()
    let e = ninth.expect_err("a ninth connection got through a full range");
    assert_eq!(e.kind(), std::io::ErrorKind::HostUnreachable, "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2), "refused after {:?}, not at once", t0.elapsed());
    for (c, o) in conns.iter_mut() {
        assert_eq!(c.who(), *o, "a connection changed its outside endpoint");
    }
    // what `natrix stats` tells the operator: the eight mappings (port words, no table
    // entries), s1's full TCP range, and the fallen-back half
    let st = t.stats();
    let d = &st.0["deterministic"];
    assert_eq!((st.get("mappings"), d["mappings"].as_u64()), (8, Some(8)), "{}", st.0);
    assert_eq!((d["subscribers"].as_u64(), d["ports_each"].as_u64()), (Some(512), Some(8)), "{}", st.0);
    assert_eq!(d["full_ranges"].as_u64(), Some(1), "s1's TCP range: {}", st.0);
    if local_even {
        assert_eq!(d["fallen_back"].as_u64(), Some(4), "{}", st.0);
        assert!(
            d["longest_walk"].as_u64() > Some(4),
            "a fallen-back walk is longer than its first part: {}",
            st.0
        );
    }
    let text = t.natrix_ok(&["stats", "--pin", &t.pin_str()]);
    assert!(text.contains("4 on the other parity (fallen back)") || !local_even, "{text}");
}

/// Restarts while a subscriber sends a steady UDP stream: every datagram that reaches the
/// server is translated, always to the same outside endpoint (the takeover swaps programs
/// and rewrites tables under live traffic).
#[test]
fn restart_under_load_never_leaks_untranslated_packets() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let mut t = Topo::new();
    let cfg = started_default(&mut t);
    let sink = udp_socket(&t.srv, SocketAddrV4::new(SERVER_IP, 0), Duration::from_millis(200));
    let to = v4_of(sink.local_addr().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));

    let receiver = {
        let (stop, received) = (Arc::clone(&stop), Arc::clone(&received));
        std::thread::spawn(move || {
            let mut sources: std::collections::BTreeMap<SocketAddrV4, u64> = Default::default();
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut buf = [0u8; 64];
            while Instant::now() < deadline {
                match sink.recv_from(&mut buf) {
                    Ok((_, from)) => {
                        *sources.entry(v4_of(from)).or_default() += 1;
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) if stop.load(Ordering::Relaxed) => break,
                    Err(_) => {}
                }
            }
            sources
        })
    };
    let sender = {
        let stop = Arc::clone(&stop);
        spawn_in_netns(&t.s1, move || {
            let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                // ~50k datagrams/s: dense enough to land inside a takeover's table rewrite
                let _ = s.send_to(&n.to_be_bytes(), to);
                n += 1;
                if n % 8 == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            n
        })
    };
    wait_for("the stream to arrive", Duration::from_secs(5), Duration::from_millis(20), || {
        (received.load(Ordering::Relaxed) >= 200).then_some(())
    });
    for round in 0..8 {
        let sig = if round % 2 == 0 { libc::SIGTERM } else { libc::SIGKILL };
        let st = t.stop_daemon(sig);
        assert!(sig == libc::SIGKILL || st.code() == Some(0), "{st}");
        std::thread::sleep(Duration::from_millis(100));
        let log = t.start_daemon(&cfg);
        assert!(log.contains("takeover=true"), "round {round}: no takeover:\n{log}");
        std::thread::sleep(Duration::from_millis(150));
    }
    let before_stop = received.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().unwrap();
    let sources = receiver.join().unwrap();
    let total: u64 = sources.values().sum();
    eprintln!("sent {sent}, received {total} ({before_stop} before the last 200 ms): {sources:?}");
    let leaked: Vec<_> = sources.iter().filter(|(a, _)| !is_pool(*a.ip())).collect();
    let st = t.stats();
    assert!(
        leaked.is_empty(),
        "datagrams left the gateway untranslated during restarts: {leaked:?} \
         (counters pass_local {}, pass_fib_other {}, pass_no_neigh {})",
        st.counter("pass_local"),
        st.counter("pass_fib_other"),
        st.counter("pass_no_neigh")
    );
    assert_eq!(sources.len(), 1, "the mapping changed during restarts: {sources:?}");
    assert!(total * 10 >= sent * 9, "more than 10% lost across restarts: sent {sent}, received {total}");
}

/// What every link and every slot of the program array runs, checked to be a full set.
fn running_ids(t: &Topo) -> std::collections::BTreeMap<String, u32> {
    let ids = natrix::dataplane::running_program_ids(&t.pin).expect("the running programs' ids");
    for k in ["link_lan0", "link_lan1", "link_wan0", "nx_progs[0]", "nx_progs[1]"] {
        assert!(ids.get(k).is_some_and(|&id| id != 0), "no program id for {k}: {ids:?}");
    }
    ids
}

/// A restart of the same build loads nothing: every link and every slot of the slow path's
/// program array runs the very programs (the same ids) it ran before, the mappings stay,
/// and traffic keeps flowing, old connections and new. A config change that only a new
/// program instance can carry ([[exclude]]) loads one, keeping the mappings.
#[test]
fn restart_of_the_same_build_keeps_the_running_programs() {
    let mut t = Topo::new();
    let cfg = started_default(&mut t);
    let server = TcpServer::start(&t.srv, SERVER_IP);
    let mut c = TcpClient::connect(&t.s1, server.addr);
    let out0 = c.who();
    assert_pool(out0, "peer");
    let ids0 = running_ids(&t);
    for round in 0..2 {
        assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));
        let log = t.start_daemon(&cfg);
        assert!(log.contains("takeover=true") && log.contains("programs=\"kept\""), "round {round}:\n{log}");
        assert_eq!(running_ids(&t), ids0, "round {round}: the running programs changed:\n{log}");
        assert_eq!(c.who(), out0, "round {round}: the connection shows another outside endpoint");
        c.get(MB);
    }
    // the control programs (the sweep) and the clock run from the pins: a new connection's
    // session is made, and the reaper still reaches the tables (static forwards, expiry)
    let mut c2 = TcpClient::connect(&t.s2, server.addr);
    assert_pool(c2.who(), "peer of a new connection after the restarts");
    c2.close();

    // [[exclude]] lives in the instance's own trie, filled before the links switch: a change
    // of it is a new instance
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));
    let conf = format!("{}\n[[exclude]]\nprefix = \"192.0.2.0/24\"\n", t.conf().render());
    let excl = t.write_config("exclude.toml", &conf);
    let log = t.start_daemon(&excl);
    assert!(log.contains("programs=\"loaded\"") && log.contains("[[exclude]] changed"), "{log}");
    let ids1 = running_ids(&t);
    for k in ["link_lan0", "link_wan0", "nx_progs[0]"] {
        assert_ne!(ids1[k], ids0[k], "{k}: a new instance runs new programs:\n{log}");
    }
    assert_eq!(c.who(), out0, "the new instance shows the connection another outside endpoint");
    c.close();
}

/// A restart of another build (here: the pinned identity says so, as an older natrix's
/// would) loads and verifies its programs, switches every link and the program array to
/// them (new ids), and keeps every mapping; the next restart of it reuses them. `--reload`
/// forces the same.
#[test]
fn restart_of_another_build_loads_its_programs_and_keeps_the_mappings() {
    let mut t = Topo::new();
    let cfg = started_default(&mut t);
    let server = TcpServer::start(&t.srv, SERVER_IP);
    let mut c = TcpClient::connect(&t.s1, server.addr);
    let out0 = c.who();
    let ids0 = running_ids(&t);
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));

    let build = t.pin.join(natrix::dataplane::BUILD_PIN);
    let ours = std::fs::read_link(&build).expect("the pinned build identity");
    std::fs::remove_file(&build).unwrap();
    std::os::unix::fs::symlink("natrix-bpf-1:00000000000000000000000000000000", &build).unwrap();
    let log = t.start_daemon(&cfg);
    assert!(log.contains("another build is running") && log.contains("programs=\"loaded\""), "{log}");
    assert!(log.contains("program replaced on the running link"), "{log}");
    let ids1 = running_ids(&t);
    for (k, id) in &ids1 {
        if ids0.get(k).is_some_and(|&old| old != 0) {
            assert_ne!(*id, ids0[k], "{k} runs the old program after an upgrade:\n{log}");
        }
    }
    assert_eq!(std::fs::read_link(&build).unwrap(), ours, "the new instance's identity is pinned");
    assert_eq!(c.who(), out0, "the upgrade changed the connection's outside endpoint");
    c.get(MB);

    // this build's instance is reused at its next restart; --reload loads one anyway
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));
    let log = t.start_daemon(&cfg);
    assert!(log.contains("programs=\"kept\""), "{log}");
    assert_eq!(running_ids(&t), ids1);
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));
    let log = t.start_daemon_with(&cfg, &["--reload"]);
    assert!(log.contains("programs=\"loaded\""), "{log}");
    let ids2 = running_ids(&t);
    assert_ne!(ids2["link_lan0"], ids1["link_lan0"], "--reload kept the old program:\n{log}");
    assert_eq!(c.who(), out0, "--reload changed the connection's outside endpoint");
    c.get(MB);
    c.close();
    assert_eq!(t.sessions().iter().filter(|s| s.outside_addr() == out0).count(), 1);
}

/// A restart whose config cannot take over the running data plane (another pool of the same
/// size, another nat.home_probe) is refused with a clear message, and leaves the running
/// data plane as it was.
#[test]
fn restart_with_an_incompatible_config_is_refused_and_keeps_translating() {
    let mut t = Topo::new();
    let cfg = started_default(&mut t);
    let server = TcpServer::start(&t.srv, SERVER_IP);
    let mut c = TcpClient::connect(&t.s1, server.addr);
    let out0 = c.who();
    assert_pool(out0, "peer");
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));

    let mut conf = t.conf();
    conf.set("pool.addresses", r#"["203.0.113.16/29", "203.0.113.41"]"#);
    let other = t.write_config("other-pool.toml", &conf.render());
    let (st, err) = t.run_expect_exit(&other);
    assert!(!st.success(), "{err}");
    assert!(err.contains("pool.addresses"), "the message does not name what changed:\n{err}");
    assert!(err.contains("natrix down"), "the message does not say how to start afresh:\n{err}");
    // how far home walks go decides where mappings are found: another one is refused too
    let mut conf = t.conf();
    conf.set("nat.home_probe", "8");
    let other = t.write_config("other-probe.toml", &conf.render());
    let (st, err) = t.run_expect_exit(&other);
    assert!(!st.success(), "{err}");
    assert!(err.contains("nat.home_probe"), "the message does not name what changed:\n{err}");

    for dev in ["lan0", "lan1", "wan0"] {
        assert!(t.xdp_attached(dev), "the refused start detached {dev}");
    }
    assert!(t.pin.join("nx_cfg").exists(), "the refused start removed the pins");
    assert_eq!(c.who(), out0, "the refused start changed the running translation");
    assert_eq!(t.sessions().iter().filter(|s| s.outside_addr() == out0).count(), 1);

    let log = t.start_daemon(&cfg);
    assert!(log.contains("takeover=true"), "{log}");
    assert_eq!(c.who(), out0);
    c.close();
}

/// Tables written by a natrix whose table layout differs (what their contents mean) are not
/// taken over, whatever the config: the start is refused with a message that names the
/// layout, the running data plane is left as it was, and a natrix of the right layout
/// takes it over as usual.
#[test]
fn restart_over_tables_of_another_layout_is_refused() {
    use natrix::dataplane::TABLE_LAYOUT;
    use natrix::tables::Tables;

    let mut t = Topo::new();
    let cfg = started_default(&mut t);
    let server = TcpServer::start(&t.srv, SERVER_IP);
    let mut c = TcpClient::connect(&t.s1, server.addr);
    let out0 = c.who();
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));

    let tables = Tables::open_pinned(&t.pin).expect("the pinned tables");
    let set_layout = |layout: u32| {
        let mut nc = tables.config().expect("nx_cfg");
        nc.layout = layout;
        tables.write_config(&nc).expect("writing nx_cfg");
    };
    assert_eq!(tables.config().unwrap().layout, TABLE_LAYOUT, "the running tables' layout");
    set_layout(TABLE_LAYOUT + 1); // as a newer natrix would have written them
    for cmd in ["stats", "sessions"] {
        let o = t.natrix(&[cmd, "--pin", &t.pin_str()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "natrix {cmd} read tables of another layout");
        assert!(err.contains(&format!("table layout {}", TABLE_LAYOUT + 1)), "natrix {cmd}: {err}");
    }
    let (st, err) = t.run_expect_exit(&cfg);
    assert!(!st.success(), "{err}");
    assert!(err.contains(&format!("table layout {}", TABLE_LAYOUT + 1)), "the layout is not named:\n{err}");
    assert!(err.contains("natrix down"), "the message does not say how to start afresh:\n{err}");
    for dev in ["lan0", "lan1", "wan0"] {
        assert!(t.xdp_attached(dev), "the refused start detached {dev}");
    }
    assert_eq!(c.who(), out0, "the refused start changed the running translation");

    set_layout(TABLE_LAYOUT);
    let log = t.start_daemon(&cfg);
    assert!(log.contains("takeover=true"), "{log}");
    assert_eq!(c.who(), out0);
    c.close();
}

/// An interface taken out of the config is no longer natrix's after a restart: detached, and
/// its traffic no longer translated.
#[test]
fn restart_without_an_interface_detaches_it() {
    let mut t = Topo::new();
    started_default(&mut t);
    let (_, seen) = udp_sources_seen(&t, &t.s2, 1);
    assert!(seen.len() == 1 && is_pool(*seen[0].ip()), "{seen:?}");
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));

    let mut conf = t.conf();
    conf.set("interfaces.inside", r#"["lan0"]"#);
    let cfg = t.write_config("lan0-only.toml", &conf.render());
    let log = t.start_daemon(&cfg);
    assert!(log.contains("takeover=true"), "{log}");
    assert!(t.xdp_attached("lan0") && t.xdp_attached("wan0"));
    let (_, seen) = udp_sources_seen(&t, &t.s1, 1);
    assert!(seen.len() == 1 && is_pool(*seen[0].ip()), "lan0 no longer translated: {seen:?}");

    let (local, seen) = udp_sources_seen(&t, &t.s2, 2);
    assert!(
        seen.iter().all(|f| *f == local),
        "traffic of lan1, no longer configured, is still translated: {local} seen as {seen:?}"
    );
    assert!(
        !t.xdp_attached("lan1"),
        "lan1, no longer configured, keeps its XDP program:\n{}",
        t.gw_link("lan1")
    );
}

/// Expiry is the daemon's job: while none runs, idle state stays; the next daemon (which may
/// bring shorter timeouts) reaps it.
#[test]
fn expiry_resumes_after_a_restart() {
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("daemon.sweep_interval", r#""200ms""#);
    started(&mut t, &conf);
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));
    conf.set("timeouts.udp", r#""2s""#).set("timeouts.port_hold_down", r#""1s""#);
    let short = t.write_config("short.toml", &conf.render());
    let log = t.start_daemon(&short);
    assert!(log.contains("takeover=true"), "{log}");

    // the new timeout applies to new state
    let (_, seen) = udp_sources_seen(&t, &t.s1, 1);
    assert!(seen.len() == 1 && is_pool(*seen[0].ip()), "{seen:?}");
    let sess = t.sessions();
    assert_eq!(sess.len(), 1, "{sess:#?}");
    assert!(sess[0].expires_in <= 2, "udp = 2s after the restart, yet: {sess:#?}");

    // no daemon: nothing is reaped, however long past its time
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));
    wait_for("the session's timer to run out", Duration::from_secs(4), Duration::from_millis(100), || {
        (t.sessions().first().map(|s| s.expires_in) == Some(0)).then_some(())
    });
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(t.sessions().len(), 1, "state vanished without a daemon");
    assert_eq!(t.stats().get("mappings"), 1);

    // the next daemon reaps it at its first sweeps
    let log = t.start_daemon(&short);
    assert!(log.contains("takeover=true"), "{log}");
    wait_for("the expired state to be reaped", Duration::from_secs(2), Duration::from_millis(100), || {
        (t.sessions().is_empty() && t.stats().get("mappings") == 0).then_some(())
    });
    wait_for(
        "port, block and subscriber released",
        Duration::from_secs(4),
        Duration::from_millis(100),
        || {
            let st = t.stats();
            (st.get("ports_in_use") == 0 && st.get("subscribers") == 0).then_some(())
        },
    );
}

// ---------------------------------------------------------------------------------------
// 6. configuration errors

#[test]
fn config_errors_leave_nothing_attached() {
    let t = Topo::new();

    // check on a good file
    let good = t.write_config("good.toml", &t.conf().render());
    let out = t.natrix(&["check", "--config", good.to_str().unwrap()]);
    assert!(out.status.success(), "check of a good config: {out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"), "{out:?}");

    // a bad value: status 2, the key named, nothing attached, nothing pinned
    let mut conf = t.conf();
    conf.set("nat.block_size", "3");
    let bad = t.write_config("bad.toml", &conf.render());
    let out = t.natrix(&["check", "--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "check of a bad config: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nat.block_size"), "{out:?}");
    let (st, err) = t.run_expect_exit(&bad);
    assert_eq!(st.code(), Some(2), "natrix run with a bad key: {st}\n{err}");
    assert!(err.contains("nat.block_size"), "the message does not name the key:\n{err}");
    no_xdp_anywhere(&t);
    assert!(!t.pin.exists(), "a bad config left {} behind", t.pin.display());

    // a missing interface
    let mut conf = t.conf();
    conf.set("interfaces.inside", r#"["lan0", "nope0"]"#);
    let missing = t.write_config("missing.toml", &conf.render());
    let (st, err) = t.run_expect_exit(&missing);
    assert!(!st.success(), "natrix run with a missing interface succeeded: {err}");
    assert!(err.contains("nope0"), "the message does not name the interface:\n{err}");
    no_xdp_anywhere(&t);
    assert!(!t.pin.exists(), "a missing interface left {} behind", t.pin.display());
}

#[test]
fn attach_failure_midway_rolls_back() {
    let mut t = Topo::new();
    // another instance (its own pin directory) owns lan1
    let other_pin = std::path::PathBuf::from(format!("{}-other", t.pin.display()));
    t.add_cleanup_pin(&other_pin);
    let mut other = t.conf();
    other
        .set("interfaces.inside", r#"["lan1"]"#)
        .set("daemon.pin_path", &format!("{:?}", other_pin.display().to_string()));
    started(&mut t, &other);
    assert!(t.xdp_attached("lan1") && !t.xdp_attached("lan0"));

    // ours wants lan0 and lan1: lan0 attaches, lan1 is busy
    let ours = t.write_config("ours.toml", &t.conf().render());
    let (st, err) = t.run_expect_exit(&ours);
    assert!(!st.success(), "{err}");
    assert!(err.contains("lan1"), "the message does not name the busy interface:\n{err}");
    assert!(!t.xdp_attached("lan0"), "lan0 stayed attached after the failed start:\n{}", t.gw_link("lan0"));
    assert!(!t.pin.exists(), "the failed start left {} behind", t.pin.display());

    // the other instance is untouched and still translates
    assert!(t.xdp_attached("lan1") && t.xdp_attached("wan0"));
    assert_eq!(ping(&t.s2.clone(), SERVER_IP, 2), 2);
    assert!(other_pin.join("nx_cfg").exists());
}

// ---------------------------------------------------------------------------------------
// 7. natrix down

fn udp_sources_seen(t: &Topo, ns: &str, n: usize) -> (SocketAddrV4, Vec<SocketAddrV4>) {
    let sink = udp_socket(&t.srv, SocketAddrV4::new(SERVER_IP, 0), Duration::from_secs(1));
    let to = v4_of(sink.local_addr().unwrap());
    let c = udp_socket(ns, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), Duration::from_secs(1));
    let local = SocketAddrV4::new(t.ip_of(ns), v4_of(c.local_addr().unwrap()).port());
    for i in 0..n {
        c.send_to(format!("probe {i}").as_bytes(), to).unwrap();
    }
    let got = udp_drain(&sink, Duration::from_millis(700));
    (local, got.into_iter().map(|(_, from)| from).collect())
}

fn assert_down(t: &Topo) {
    let out = t.natrix(&["down", "--pin", &t.pin_str()]);
    assert!(out.status.success(), "natrix down: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("removed 0 "), "natrix down removed nothing: {text}");
    no_xdp_anywhere(t);
    assert!(!t.pin.exists(), "natrix down left {}", t.pin.display());
    // nothing translates any more: what arrives (the kernel still routes) is untranslated
    let (local, seen) = udp_sources_seen(t, &t.s1, 3);
    for from in &seen {
        assert!(!is_pool(*from.ip()), "a datagram was still translated after natrix down: {from}");
        assert_eq!(*from, local, "unexpected source after natrix down");
    }
    let out = t.natrix(&["sessions", "--json", "--pin", &t.pin_str()]);
    assert!(!out.status.success(), "sessions after down should fail: {out:?}");
}

#[test]
fn down_detaches_everything_and_removes_pins() {
    let mut t = Topo::new();
    let cfg = started_default(&mut t);
    let (local, seen) = udp_sources_seen(&t, &t.s1, 3);
    assert_eq!(seen.len(), 3, "UDP through natrix lost datagrams");
    assert!(seen.iter().all(|f| is_pool(*f.ip()) && f.port() % 2 == local.port() % 2), "{seen:?}");

    // the usual way: stop the daemon (the data plane keeps running), then down
    assert_eq!(t.stop_daemon(libc::SIGTERM).code(), Some(0));
    let (_, seen) = udp_sources_seen(&t, &t.s1, 1);
    assert!(seen.len() == 1 && is_pool(*seen[0].ip()), "not translated without a daemon: {seen:?}");
    assert_down(&t);

    // down while a daemon is still running detaches too; a fresh start works afterwards
    let log = t.start_daemon(&cfg);
    assert!(log.contains("takeover=false"), "after down the next start must be fresh:\n{log}");
    let (_, seen) = udp_sources_seen(&t, &t.s2, 1);
    assert!(seen.len() == 1 && is_pool(*seen[0].ip()), "not translated after a fresh start: {seen:?}");
    assert_down(&t);
    assert_eq!(t.stop_daemon(libc::SIGINT).code(), Some(0), "natrix run must exit 0 on SIGINT");
}

// ---------------------------------------------------------------------------------------
// 8. human-readable output

#[test]
fn cli_json_and_human_output() {
    let mut t = Topo::new();
    started_default(&mut t);
    assert_eq!(ping(&t.s1.clone(), SERVER_IP, 1), 1);
    let sink = udp_socket(&t.srv, SocketAddrV4::new(SERVER_IP, 0), Duration::from_secs(2));
    let c = udp_socket(&t.s2, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), Duration::from_secs(2));
    c.send_to(b"x", sink.local_addr().unwrap()).unwrap();
    assert!(udp_recv(&sink).is_some());

    let rows = t.sessions();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let text = t.natrix_ok(&["sessions", "--pin", &t.pin_str()]);
    let lines: Vec<&str> = text.lines().collect();
    let head: Vec<&str> = lines.first().map(|l| l.split_whitespace().collect()).unwrap_or_default();
    assert!(head.len() >= 5, "no header line:\n{text}");
    assert_eq!(&head[..5], ["PROTO", "INSIDE", "OUTSIDE", "REMOTE", "STATE"], "header:\n{text}");
    for r in &rows {
        let n = lines
            .iter()
            .filter(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() >= 5 && w[..5] == [&r.proto, &r.inside, &r.outside, &r.remote, &r.state]
            })
            .count();
        assert_eq!(n, 1, "session {r:?} is not one line of:\n{text}");
    }
    let body = lines[1..].iter().filter(|l| l.starts_with("icmp") || l.starts_with("udp")).count();
    assert_eq!(body, rows.len(), "one line per session:\n{text}");

    let js = t.stats();
    let text = t.natrix_ok(&["stats", "--pin", &t.pin_str()]);
    let counters = text.find("counters:").unwrap_or_else(|| panic!("no counters section:\n{text}"));
    let drops = text.find("drops").unwrap_or_else(|| panic!("no drops section:\n{text}"));
    assert!(counters < drops, "{text}");
    let value_of = |section: &str, name: &str| -> u64 {
        section
            .lines()
            .find_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w.len() == 2 && w[0] == name).then(|| w[1].parse().unwrap())
            })
            .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
    };
    let (csec, dsec) = (&text[counters..drops], &text[drops..]);
    for name in ["translated_out", "translated_in", "mappings_created", "rx_inside"] {
        // counters only grow: the text may be a little newer than the JSON
        assert!(value_of(csec, name) >= js.counter(name), "{name}:\n{text}");
    }
    assert!(value_of(csec, "translated_out") >= 2, "{text}");
    for name in ["no_mapping", "filtered", "table_full", "pool_exhausted"] {
        assert_eq!(value_of(dsec, name), js.drop_count(name), "{name}:\n{text}");
    }
    assert!(text.contains(&format!("sessions {}", js.get("sessions"))), "{text}");
    assert!(text.contains(&format!("mappings {}", js.get("mappings"))), "{text}");
    let tables = text.find("tables:").unwrap_or_else(|| panic!("no tables section:\n{text}"));
    let sess_line = text[tables..].lines().find(|l| l.trim_start().starts_with("sessions")).unwrap_or("");
    assert!(
        sess_line.contains(&format!("sessions  {} of ", js.get("sessions")))
            && sess_line.contains("longest displacement"),
        "session table line: {sess_line:?} in\n{text}"
    );
    // the subscriber table: JSON and text agree, the data plane's count with the entries
    let st = &js.0["subscriber_table"];
    let live = st["live"].as_u64().unwrap_or_else(|| panic!("no subscriber_table.live in {}", js.0));
    assert_eq!(live, js.get("subscribers"), "{}", js.0);
    assert!(live >= 1, "expected the traffic's subscriber in the table: {}", js.0);
    assert_eq!(st["counted"].as_u64(), Some(live), "expected the count to match the entries: {}", js.0);
    let sub_line = text[tables..].lines().find(|l| l.trim_start().starts_with("subscribers")).unwrap_or("");
    assert!(
        sub_line.contains(&format!("subscribers {live} of ")) && sub_line.contains("tombstone"),
        "subscriber table line: {sub_line:?} in\n{text}"
    );
}
