// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The data plane's hardening end to end, with real traffic through the `natrix` binary in
//! namespaces (tests/common/netns/): the per-subscriber session limit under an inbound and
//! an outbound flood (limits.max_sessions_per_subscriber, drops.session_quota), spoofed
//! sources outside nat.subscribers (not_subscriber), the ICMP code of a refusal
//! (nat.unreachable_code), frames addressed to another MAC or to a virtual one
//! (interfaces.virtual_macs, pass_other_host), and early fragments larger than 1536 bytes on
//! a jumbo link (held whole, re-injected by the daemon).
//!
//! Needs root (namespaces, XDP, bpffs, raw and packet sockets).
//! Run: `cargo test --release --test hardening -- --test-threads=2`

mod common;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use common::netns::*;
use common::wire::*;

/// The gateway's address on lan0: the source of the ICMP errors natrix sends to s1.
const GW_LAN0: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 1);

fn started(t: &mut Topo, conf: &Conf) -> std::path::PathBuf {
    let cfg = t.write_config("natrix.toml", &conf.render());
    t.start_daemon(&cfg);
    cfg
}

/// One UDP round trip on an established flow: `c` sends to `server`, which must see `out`
/// as the source, answers, and the answer reaches `c`.
fn round_trip(c: &UdpSocket, server: &UdpSocket, out: SocketAddrV4, what: &str) {
    let msg = format!("{what}: out");
    c.send_to(msg.as_bytes(), local_of(server)).unwrap();
    let (d, from) = udp_recv(server).unwrap_or_else(|| panic!("{what}: nothing reached the server"));
    assert_eq!((d, from), (msg.into_bytes(), out), "{what}: outbound");
    let back = format!("{what}: back");
    server.send_to(back.as_bytes(), out).unwrap();
    let (d, from) = udp_recv(c).unwrap_or_else(|| panic!("{what}: the reply did not come back"));
    assert_eq!((d, from), (back.into_bytes(), local_of(server)), "{what}: inbound");
}

/// Subscriber `ns` opens `n` new UDP flows to `server`; every one must be translated (a
/// pool source), answered by the server and the answer delivered. Returns the sockets.
fn new_flows_work(ns: &str, server: &UdpSocket, n: usize) -> Vec<UdpSocket> {
    let mut socks = Vec::new();
    for i in 0..n {
        let c = udp_socket(ns, any_port(Ipv4Addr::UNSPECIFIED), Duration::from_secs(2));
        let msg = format!("{ns} new flow {i}");
        c.send_to(msg.as_bytes(), local_of(server)).unwrap();
        let (d, from) =
            udp_recv(server).unwrap_or_else(|| panic!("{ns}: new flow {i} did not reach the server"));
        assert_eq!(d, msg.as_bytes(), "{ns}: new flow {i}");
        assert_pool(from, &format!("{ns}: new flow {i}"));
        server.send_to(format!("echo {i}").as_bytes(), from).unwrap();
        let (d, src) = udp_recv(&c).unwrap_or_else(|| panic!("{ns}: new flow {i}: no echo came back"));
        assert_eq!((d, src), (format!("echo {i}").into_bytes(), local_of(server)));
        socks.push(c);
    }
    socks
}

/// The sessions whose inside address is `ip` (any protocol).
/// `natrix check-tables` on the live pinned tables: exit 0, no problem in its JSON.
fn assert_tables_healthy(t: &Topo, what: &str) {
    let out = t.natrix(&["check-tables", "--json", "--pin", &t.pin_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: check-tables exited {}: {text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: check-tables --json: {e}: {text}"));
    assert_eq!(v["problems"].as_array().map(Vec::len), Some(0), "{what}: {text}");
}

fn sessions_of(t: &Topo, ip: Ipv4Addr) -> Vec<Session> {
    let prefix = format!("{ip}:");
    t.sessions().into_iter().filter(|s| s.inside.starts_with(&prefix) || s.inside == ip.to_string()).collect()
}

// ---------------------------------------------------------------------------------------
// raw IPv4

/// A TCP SYN (no options), checksum included.
fn tcp_syn(src: SocketAddrV4, dst: SocketAddrV4, seq: u32) -> Vec<u8> {
    let mut d = vec![0u8; 20];
    d[0..2].copy_from_slice(&src.port().to_be_bytes());
    d[2..4].copy_from_slice(&dst.port().to_be_bytes());
    d[4..8].copy_from_slice(&seq.to_be_bytes());
    d[12] = 5 << 4;
    d[13] = 0x02;
    d[14..16].copy_from_slice(&64240u16.to_be_bytes());
    let c = csum(&d, pseudo_sum(*src.ip(), *dst.ip(), 6, 20));
    d[16..18].copy_from_slice(&c.to_be_bytes());
    d
}

/// An ICMP echo request.
fn icmp_echo(id: u16, seq: u16) -> Vec<u8> {
    let mut d = vec![8, 0, 0, 0];
    d.extend_from_slice(&id.to_be_bytes());
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend_from_slice(b"natrix hardening");
    let c = csum(&d, 0);
    d[2..4].copy_from_slice(&c.to_be_bytes());
    d
}

/// recv(2) into `buf`; None on timeout.
fn recv_fd(fd: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: a valid buffer of the length passed.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    (n >= 0).then_some(n as usize)
}

// ---------------------------------------------------------------------------------------
// ICMP at the subscriber

/// An ICMP error a namespace received: outer source, type, code, and the quoted packet's
/// protocol, source and destination (ports for TCP/UDP).
#[derive(Debug, Clone, PartialEq)]
struct IcmpError {
    from: Ipv4Addr,
    typ: u8,
    code: u8,
    inner_proto: u8,
    inner_src: SocketAddrV4,
    inner_dst: SocketAddrV4,
}

/// `socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)` in `ns`: a copy of every ICMP packet the
/// namespace receives, IP header included.
fn icmp_listener(ns: &str) -> OwnedFd {
    let fd = socket_in(ns, libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP);
    set_rcvtimeo(&fd, Duration::from_millis(100));
    fd
}

/// Every ICMP error (with a quoted IPv4 header and 4 transport bytes) `fd` receives until
/// `window` passes without one, or `max` have come, or 10 s in all.
fn icmp_errors(fd: &OwnedFd, window: Duration, max: usize) -> Vec<IcmpError> {
    let hard = Instant::now() + Duration::from_secs(10);
    let mut quiet_until = Instant::now() + window;
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while Instant::now() < hard && Instant::now() < quiet_until && got.len() < max {
        let Some(n) = recv_fd(fd, &mut buf) else { continue };
        let p = &buf[..n];
        let ihl = usize::from(p[0] & 0x0f) * 4;
        let Some(icmp) = p.get(ihl..) else { continue };
        if icmp.len() < 8 + 20 + 4 || !matches!(icmp[0], 3 | 11 | 12) {
            continue;
        }
        let inner = &icmp[8..];
        let iihl = usize::from(inner[0] & 0x0f) * 4;
        let Some(l4) = inner.get(iihl..iihl + 4) else { continue };
        let ip = |o: usize| Ipv4Addr::new(inner[o], inner[o + 1], inner[o + 2], inner[o + 3]);
        got.push(IcmpError {
            from: Ipv4Addr::new(p[12], p[13], p[14], p[15]),
            typ: icmp[0],
            code: icmp[1],
            inner_proto: inner[9],
            inner_src: SocketAddrV4::new(ip(12), u16::from_be_bytes([l4[0], l4[1]])),
            inner_dst: SocketAddrV4::new(ip(16), u16::from_be_bytes([l4[2], l4[3]])),
        });
        quiet_until = Instant::now() + window;
    }
    got
}

// ---------------------------------------------------------------------------------------
// Ethernet frames

fn parse_mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s.split(':').map(|p| u8::from_str_radix(p, 16).unwrap()).collect();
    v.try_into().unwrap_or_else(|_| panic!("{s:?} is not a MAC"))
}

/// The MAC of `dev` in namespace `ns`.
fn mac_of(ns: &str, dev: &str) -> [u8; 6] {
    let out = ns_ip(ns, &["link", "show", dev]);
    let w = out
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .unwrap_or_else(|| panic!("no link/ether in {out}"));
    parse_mac(w)
}

/// An AF_PACKET raw socket in `ns` that writes whole Ethernet frames out of `dev`; with
/// the interface index.
fn packet_socket(ns: &str, dev: &str) -> (OwnedFd, i32) {
    let ifindex = in_netns(ns, || {
        let cname = std::ffi::CString::new(dev).unwrap();
        // SAFETY: a NUL-terminated name.
        let i = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        i as i32
    });
    assert!(ifindex > 0, "no interface {dev}");
    // protocol 0: send only
    (socket_in(ns, libc::AF_PACKET, libc::SOCK_RAW, 0), ifindex)
}

/// Writes `ip` as an Ethernet frame from `src` to `dst` out of interface `ifindex`.
fn send_frame(fd: &OwnedFd, ifindex: i32, dst: [u8; 6], src: [u8; 6], ip: &[u8]) {
    let mut f = Vec::with_capacity(14 + ip.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    f.extend_from_slice(ip);
    // SAFETY: zeroed sockaddr_ll is valid.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_IP as u16).to_be();
    sll.sll_ifindex = ifindex;
    sll.sll_halen = 6;
    sll.sll_addr[..6].copy_from_slice(&dst);
    // SAFETY: a valid buffer and sockaddr_ll.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            f.as_ptr().cast(),
            f.len(),
            0,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(n, f.len() as isize, "AF_PACKET sendto: {}", std::io::Error::last_os_error());
}

// ---------------------------------------------------------------------------------------
// 1, 2. floods against the per-subscriber session limit

const FLOOD: u16 = 6000;
const PER_SUB: usize = 1000;

fn flood_conf(t: &Topo) -> Conf {
    let mut conf = t.conf();
    conf.set("limits.max_sessions", "4096").set("limits.max_sessions_per_subscriber", &PER_SUB.to_string());
    conf
}

/// Sends `packets` through `fd`, paced (a pause every 64) so that the veth rings in the
/// way do not overflow; a refused send (ENOBUFS) is retried after a pause, a few times.
/// Returns how many went out. Bounded by 15 s.
fn paced_raw_sends(fd: &OwnedFd, packets: &[Vec<u8>]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut sent = 0;
    for (i, p) in packets.iter().enumerate() {
        if Instant::now() >= deadline {
            break;
        }
        for _ in 0..5 {
            if raw_try_send(fd, p).is_ok() {
                sent += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if i % 64 == 63 {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    sent
}

/// 6000 remote endpoints (the server from 6000 source ports) each send one datagram to
/// subscriber A's mapping: with endpoint-independent filtering each would make an inbound
/// session. A keeps at most its 1000, the session table keeps room, B's new flows work.
#[test]
fn flood_inbound_new_remote_endpoints_stops_at_the_subscriber_limit() {
    let t0 = Instant::now();
    let mut t = Topo::new();
    let conf = flood_conf(&t);
    started(&mut t, &conf);
    let (s1, s2) = (t.s1.clone(), t.s2.clone());
    let srv = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(3));
    let (a, a_out) = udp_mapping(&s1, &srv);
    round_trip(&a, &srv, a_out, "A's first flow before the flood");
    let st0 = t.stats();

    // the flood: crafted in the server namespace, source ports 20000..26000
    let raw = raw_ip_socket(&t.srv);
    let packets: Vec<Vec<u8>> = (0..FLOOD)
        .map(|i| {
            let from = SocketAddrV4::new(SERVER_IP, 20_000 + i);
            ip_packet(SERVER_IP, *a_out.ip(), 17, i, 0, false, &udp_datagram(from, a_out, b"flood"))
        })
        .collect();
    let sent = paced_raw_sends(&raw, &packets);
    assert_eq!(sent, usize::from(FLOOD), "the flood did not all leave the server");
    // A's socket got what natrix let through: at most its limit less the first session
    let delivered = udp_drain(&a, Duration::from_millis(500)).len();
    eprintln!("inbound flood: {sent} sent, {delivered} delivered to A ({:?} so far)", t0.elapsed());

    let st1 = wait_for("the flood counted", Duration::from_secs(5), Duration::from_millis(100), || {
        let s = t.stats();
        (s.drop_count("session_quota") > st0.drop_count("session_quota")).then_some(s)
    });
    let quota = st1.drop_count("session_quota") - st0.drop_count("session_quota");
    let a_sess = sessions_of(&t, SUB1_IP);
    let a_in = a_sess.iter().filter(|s| s.direction == "in").count();
    eprintln!(
        "inbound flood: session_quota +{quota}, A holds {} session(s) ({a_in} inbound), table {}",
        a_sess.len(),
        st1.get("sessions")
    );
    assert!(a_sess.len() <= PER_SUB, "A holds {} sessions, over its limit of {PER_SUB}", a_sess.len());
    // the limit was reached (the quota refused something) and nothing expires in this time
    assert_eq!(a_sess.len(), PER_SUB, "A was refused before it reached its limit: {quota} refused");
    assert!(delivered < PER_SUB, "{delivered} flood datagrams delivered, more than the limit allows");
    assert!(
        quota + a_in as u64 >= u64::from(FLOOD) - 10,
        "the flood: {quota} refused + {a_in} admitted, of {FLOOD} sent (lost on the way?)"
    );
    assert!(st1.get("sessions") <= 4096, "{:?}", st1.0);

    // B's 20 new flows all work: the table had room, B's quota is its own
    let b_flows = new_flows_work(&s2, &srv, 20);
    let st2 = t.stats();
    assert_eq!(
        st2.drop_count("table_full"),
        st0.drop_count("table_full"),
        "B's flows hit a full table: {:?}",
        st2.0
    );
    assert_eq!(sessions_of(&t, SUB2_IP).len(), b_flows.len(), "B's sessions");
    // A's first flow still works both ways, on the same outside endpoint
    round_trip(&a, &srv, a_out, "A's first flow after the flood");
    // and A still cannot open anything new: a new remote endpoint is refused
    let before = t.stats().drop_count("session_quota");
    let other = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(1));
    other.send_to(b"one more", a_out).unwrap();
    assert!(udp_drain(&a, Duration::from_millis(300)).is_empty(), "a 1001st session was admitted");
    assert!(t.stats().drop_count("session_quota") > before);
    assert_tables_healthy(&t, "after the inbound flood");
    eprintln!("flood_inbound: {:?}", t0.elapsed());
}

/// Subscriber A sends from ONE source port to 6000 server ports: one mapping, 6000 would-be
/// sessions. A keeps at most 1000, is told with ICMP host unreachable, B's new flows work.
#[test]
fn flood_outbound_from_one_port_stops_at_the_subscriber_limit() {
    let t0 = Instant::now();
    let mut t = Topo::new();
    let conf = flood_conf(&t);
    started(&mut t, &conf);
    let (s1, s2) = (t.s1.clone(), t.s2.clone());
    let srv = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(3));
    assert!(local_of(&srv).port() > FLOOD, "the server's port is among the flooded ones");
    let (a, a_out) = udp_mapping(&s1, &srv);
    round_trip(&a, &srv, a_out, "A's first flow before the flood");
    let icmp = icmp_listener(&s1);
    let st0 = t.stats();

    let flood = udp_socket(&s1, SocketAddrV4::new(SUB1_IP, 40_000), Duration::from_secs(1));
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut sent = 0u32;
    for port in 1..=FLOOD {
        if Instant::now() >= deadline {
            break;
        }
        for _ in 0..5 {
            match flood.send_to(b"flood", SocketAddrV4::new(SERVER_IP, port)) {
                Ok(_) => {
                    sent += 1;
                    break;
                }
                // ECONNREFUSED etc. from an earlier ICMP error, or ENOBUFS: try again
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        if port % 64 == 0 {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    assert_eq!(sent, u32::from(FLOOD), "the flood did not all leave subscriber A");
    let errors = icmp_errors(&icmp, Duration::from_millis(500), 10_000);
    eprintln!("outbound flood: {sent} sent, {} ICMP errors at A ({:?})", errors.len(), t0.elapsed());

    let st1 = wait_for("the flood counted", Duration::from_secs(5), Duration::from_millis(100), || {
        let s = t.stats();
        (s.drop_count("session_quota") > st0.drop_count("session_quota")).then_some(s)
    });
    let quota = st1.drop_count("session_quota") - st0.drop_count("session_quota");
    let a_sess = sessions_of(&t, SUB1_IP);
    let from_40000 = a_sess.iter().filter(|s| s.inside == format!("{SUB1_IP}:40000")).count();
    eprintln!(
        "outbound flood: session_quota +{quota}, A holds {} session(s) ({from_40000} from port 40000), table {}",
        a_sess.len(),
        st1.get("sessions")
    );
    assert!(a_sess.len() <= PER_SUB, "A holds {} sessions, over its limit of {PER_SUB}", a_sess.len());
    assert_eq!(a_sess.len(), PER_SUB, "A was refused before it reached its limit: {quota} refused");
    assert_eq!(from_40000, PER_SUB - 1, "sessions from the flooding port");
    assert!(
        quota + from_40000 as u64 >= u64::from(FLOOD) - 10,
        "the flood: {quota} refused + {from_40000} admitted, of {FLOOD} sent (lost on the way?)"
    );

    // natrix told A: ICMP destination unreachable, host unreachable (the default code),
    // from the gateway, quoting a refused datagram of the flooding port
    let refusals: Vec<&IcmpError> = errors.iter().filter(|e| e.from == GW_LAN0).collect();
    assert!(!refusals.is_empty(), "no ICMP error from natrix reached A: {errors:?}");
    for e in &refusals {
        assert_eq!((e.typ, e.code), (3, 1), "{e:?}");
        assert_eq!(e.inner_proto, natrix::abi::PROTO_UDP, "{e:?}");
        assert_eq!(e.inner_src, SocketAddrV4::new(SUB1_IP, 40_000), "{e:?}");
    }

    // B's 20 new flows all work
    let b_flows = new_flows_work(&s2, &srv, 20);
    let st2 = t.stats();
    assert_eq!(st2.drop_count("table_full"), st0.drop_count("table_full"), "{:?}", st2.0);
    assert_eq!(sessions_of(&t, SUB2_IP).len(), b_flows.len(), "B's sessions");
    // A's first flow still works both ways
    round_trip(&a, &srv, a_out, "A's first flow after the flood");
    assert_tables_healthy(&t, "after the outbound flood");
    eprintln!("flood_outbound: {:?}", t0.elapsed());
}

// ---------------------------------------------------------------------------------------
// 3. spoofed sources

/// With nat.subscribers = ["100.64.0.0/24"], packets from any other source (another
/// shared-space address, s2's own 100.64.1.2, a benchmarking address, RFC 1918) make no
/// state, are never forwarded, and are counted as not_subscriber.
#[test]
fn spoofed_sources_outside_the_subscriber_prefixes_make_no_state() {
    let t0 = Instant::now();
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("nat.subscribers", r#"["100.64.0.0/24"]"#);
    started(&mut t, &conf);
    let (s1, s2) = (t.s1.clone(), t.s2.clone());
    let srv = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(2));
    let srv_addr = local_of(&srv);

    // s1 (100.64.0.2) is a subscriber: translated
    let (a, a_out) = udp_mapping(&s1, &srv);
    round_trip(&a, &srv, a_out, "the subscriber's flow");
    let st0 = t.stats();
    let sess0 = t.sessions();

    let cap = Capture::start(&t.srv);
    // from s1: crafted with foreign sources, UDP, TCP SYN and ICMP echo each
    let spoofed = [
        Ipv4Addr::new(100, 64, 1, 7),
        Ipv4Addr::new(100, 65, 0, 9),
        Ipv4Addr::new(198, 18, 5, 5),
        Ipv4Addr::new(10, 1, 2, 3),
    ];
    let raw = raw_ip_socket(&s1);
    let mut frames = 0u64;
    for (i, src) in spoofed.iter().enumerate() {
        let i = i as u16;
        let from = SocketAddrV4::new(*src, 30_000 + i);
        let udp = udp_datagram(from, srv_addr, b"spoofed");
        raw_send(&raw, &ip_packet(*src, SERVER_IP, 17, 100 + i, 0, false, &udp));
        let syn = tcp_syn(SocketAddrV4::new(*src, 31_000 + i), SocketAddrV4::new(SERVER_IP, 80), 7);
        raw_send(&raw, &ip_packet(*src, SERVER_IP, 6, 200 + i, 0, false, &syn));
        raw_send(&raw, &ip_packet(*src, SERVER_IP, 1, 300 + i, 0, false, &icmp_echo(0x4e00 + i, 1)));
        frames += 3;
    }
    // from s2: its own address, 100.64.1.2, is outside 100.64.0.0/24
    let b = udp_socket(&s2, any_port(Ipv4Addr::UNSPECIFIED), Duration::from_secs(1));
    for i in 0..3 {
        b.send_to(format!("from s2 {i}").as_bytes(), srv_addr).unwrap();
        frames += 1;
    }

    let got = udp_drain(&srv, Duration::from_millis(500));
    assert!(got.is_empty(), "datagrams from non-subscribers reached the server: {got:?}");
    let seen = cap.finish_after(Duration::from_millis(300));
    assert!(seen.is_empty(), "packets reached the server's interface: {seen:?}");

    let st1 = wait_for("not_subscriber counted", Duration::from_secs(3), Duration::from_millis(100), || {
        let s = t.stats();
        (s.drop_count("not_subscriber") >= st0.drop_count("not_subscriber") + frames).then_some(s)
    });
    for k in ["subscribers", "mappings", "sessions"] {
        assert_eq!(st1.get(k), st0.get(k), "{k} changed: {:?}", st1.0);
    }
    // the same sessions (their remaining lifetimes aside)
    let key = |v: &[Session]| -> Vec<(String, String, String, String)> {
        v.iter().map(|s| (s.proto.clone(), s.inside.clone(), s.outside.clone(), s.remote.clone())).collect()
    };
    let sess1 = t.sessions();
    assert_eq!(key(&sess1), key(&sess0), "sessions changed");
    let mut foreign = spoofed.to_vec();
    foreign.push(SUB2_IP);
    for s in &sess1 {
        assert!(
            !foreign.iter().any(|ip| s.inside.starts_with(&format!("{ip}:"))),
            "state for a non-subscriber: {s:?}"
        );
    }
    // the subscriber's own flow is untouched
    round_trip(&a, &srv, a_out, "the subscriber's flow afterwards");
    eprintln!(
        "spoofed: {frames} frames, not_subscriber +{} ({:?})",
        st1.drop_count("not_subscriber") - st0.drop_count("not_subscriber"),
        t0.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// 4. the ICMP code of a refusal

/// A subscriber limited to 2 sessions opens a third flow; the ICMP natrix sends back, as
/// a raw socket at the subscriber sees it.
fn refusal_icmp(code_conf: Option<&str>) -> (IcmpError, Option<i32>) {
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("limits.max_sessions_per_subscriber", "2");
    if let Some(c) = code_conf {
        conf.set("nat.unreachable_code", &format!("{c:?}"));
    }
    started(&mut t, &conf);
    let s1 = t.s1.clone();
    let srv = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(2));
    let srv_addr = local_of(&srv);
    let flows: Vec<UdpSocket> = (0..3)
        .map(|_| {
            let s = udp_socket(&s1, any_port(Ipv4Addr::UNSPECIFIED), Duration::from_secs(2));
            s.connect(srv_addr).unwrap();
            // Linux reports host unreachable (3/1) to a UDP socket only with IP_RECVERR (it is
            // a soft error); administratively prohibited (3/13) either way
            setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_RECVERR, 1);
            s
        })
        .collect();
    for (i, f) in flows[..2].iter().enumerate() {
        f.send(format!("flow {i}").as_bytes()).unwrap();
        let (d, from) = udp_recv(&srv).unwrap_or_else(|| panic!("flow {i} did not get through"));
        assert_eq!(d, format!("flow {i}").as_bytes());
        assert_pool(from, "flow source");
    }
    let icmp = icmp_listener(&s1);
    let st0 = t.stats();
    flows[2].send(b"flow 2").unwrap();
    let errors = icmp_errors(&icmp, Duration::from_millis(1000), 10);
    // the connected socket hears of it too (both codes are EHOSTUNREACH in Linux)
    let mut buf = [0u8; 64];
    let sock_err = match flows[2].recv(&mut buf) {
        Err(e) => e.raw_os_error(),
        Ok(n) => panic!("the third flow got a reply: {:?}", &buf[..n]),
    };
    assert!(udp_drain(&srv, Duration::from_millis(300)).is_empty(), "the third flow got through");
    let st1 = t.stats();
    assert_eq!(st1.drop_count("session_quota"), st0.drop_count("session_quota") + 1, "{:?}", st1.0);
    assert!(st1.counter("icmp_sent") > st0.counter("icmp_sent"), "{:?}", st1.0);
    assert_eq!(errors.len(), 1, "one ICMP error expected at the subscriber: {errors:?}");
    let e = errors[0].clone();
    assert_eq!(e.from, GW_LAN0, "{e:?}");
    assert_eq!(e.inner_proto, natrix::abi::PROTO_UDP, "{e:?}");
    assert_eq!(e.inner_src, SocketAddrV4::new(SUB1_IP, local_of(&flows[2]).port()), "{e:?}");
    assert_eq!(e.inner_dst, srv_addr, "{e:?}");
    (e, sock_err)
}

#[test]
fn refusal_icmp_code_follows_nat_unreachable_code() {
    let t0 = Instant::now();
    let (e, err) = refusal_icmp(None);
    assert_eq!((e.typ, e.code), (3, 1), "default: host unreachable: {e:?}");
    assert_eq!(err, Some(libc::EHOSTUNREACH));
    let (e, err) = refusal_icmp(Some("admin-prohibited"));
    assert_eq!((e.typ, e.code), (3, 13), "admin-prohibited: {e:?}");
    assert_eq!(err, Some(libc::EHOSTUNREACH));
    eprintln!("refusal codes: {:?}", t0.elapsed());
}

// ---------------------------------------------------------------------------------------
// 5. frames for another MAC

const VIRTUAL_MAC: &str = "00:00:5e:00:01:01";
const OTHER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x4e, 0x58, 0x99];

#[test]
fn frames_for_another_mac_are_left_alone_virtual_mac_translated() {
    let t0 = Instant::now();
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("interfaces.virtual_macs", &format!("[{VIRTUAL_MAC:?}]"));
    started(&mut t, &conf);
    let s1 = t.s1.clone();
    let srv = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(2));
    let srv_addr = local_of(&srv);
    let s1_mac = mac_of(&s1, "eth0");
    let lan0_mac = mac_of(&t.gw, "lan0");
    assert_ne!(lan0_mac, OTHER_MAC);
    let (pkt_sock, ifindex) = packet_socket(&s1, "eth0");
    let st0 = t.stats();

    // a unicast frame for another host, carrying a good UDP/IP packet to the server
    let cap = Capture::start(&t.srv);
    let other_src = SocketAddrV4::new(SUB1_IP, 41_000);
    for i in 0..3u16 {
        let udp = udp_datagram(other_src, srv_addr, format!("not for natrix {i}").as_bytes());
        send_frame(
            &pkt_sock,
            ifindex,
            OTHER_MAC,
            s1_mac,
            &ip_packet(SUB1_IP, SERVER_IP, 17, 500 + i, 0, false, &udp),
        );
    }
    let got = udp_drain(&srv, Duration::from_millis(500));
    assert!(got.is_empty(), "a frame for another MAC was forwarded: {got:?}");
    let seen = cap.finish_after(Duration::from_millis(200));
    assert!(seen.is_empty(), "packets reached the server's interface: {seen:?}");
    let st1 = wait_for("pass_other_host counted", Duration::from_secs(3), Duration::from_millis(100), || {
        let s = t.stats();
        (s.counter("pass_other_host") >= st0.counter("pass_other_host") + 3).then_some(s)
    });
    for k in ["subscribers", "mappings", "sessions"] {
        assert_eq!(st1.get(k), st0.get(k), "{k} changed: {:?}", st1.0);
    }
    assert!(t.sessions().is_empty(), "state for a frame not addressed to natrix: {:?}", t.sessions());

    // the same to the configured virtual MAC: translated. The gateway resolves its next hop
    // first (a ping of its own): with no neighbour entry natrix passes the translated frame
    // to the kernel, see virtual_mac_frame_with_unresolved_next_hop_is_forwarded.
    assert_eq!(ping(&t.gw, SERVER_IP, 1), 1, "the gateway cannot reach the server");
    let vsrc = SocketAddrV4::new(SUB1_IP, 41_002);
    let udp = udp_datagram(vsrc, srv_addr, b"to the virtual MAC");
    send_frame(
        &pkt_sock,
        ifindex,
        parse_mac(VIRTUAL_MAC),
        s1_mac,
        &ip_packet(SUB1_IP, SERVER_IP, 17, 600, 0, false, &udp),
    );
    let (d, from) = udp_recv(&srv).expect("a frame to the virtual MAC was not forwarded");
    assert_eq!(d, b"to the virtual MAC");
    assert_pool(from, "frame to the virtual MAC");
    // and to lan0's own MAC, as a control
    let osrc = SocketAddrV4::new(SUB1_IP, 41_004);
    let udp = udp_datagram(osrc, srv_addr, b"to lan0's MAC");
    send_frame(&pkt_sock, ifindex, lan0_mac, s1_mac, &ip_packet(SUB1_IP, SERVER_IP, 17, 601, 0, false, &udp));
    let (d, from2) = udp_recv(&srv).expect("a frame to lan0's MAC was not forwarded");
    assert_eq!(d, b"to lan0's MAC");
    assert_pool(from2, "frame to lan0's MAC");

    let sess = t.sessions();
    let inside: Vec<&str> = sess.iter().map(|s| s.inside.as_str()).collect();
    assert!(inside.contains(&vsrc.to_string().as_str()), "{sess:#?}");
    assert!(inside.contains(&osrc.to_string().as_str()), "{sess:#?}");
    assert!(!inside.contains(&other_src.to_string().as_str()), "{sess:#?}");
    let st2 = t.stats();
    assert_eq!(st2.counter("pass_other_host"), st1.counter("pass_other_host"), "{:?}", st2.0);
    eprintln!("other MAC: {:?}", t0.elapsed());
}

// ---------------------------------------------------------------------------------------
// 6. jumbo fragments

/// On a 9000-byte link, inbound datagrams whose fragments are larger than 1536 bytes,
/// last fragment first: the daemon holds them whole and re-injects them, the subscriber
/// gets every byte.
#[test]
fn jumbo_fragments_out_of_order_arrive_whole() {
    let t0 = Instant::now();
    let mut t = Topo::new();
    for dev in ["lan0", "wan0"] {
        t.set_gw_mtu(dev, 9000);
    }
    for ns in [t.s1.clone(), t.srv.clone()] {
        ns_ip(&ns, &["link", "set", "eth0", "mtu", "9000"]);
    }
    let mut conf = t.conf();
    // Native XDP on veth refuses an MTU above ~3.5 KB for a program without multi-buffer
    // support; generic XDP takes any.
    conf.set("interfaces.xdp_mode", r#""generic""#);
    started(&mut t, &conf);
    let srv = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(3));
    let srv_addr = local_of(&srv);
    let (c, m) = udp_mapping(&t.s1.clone(), &srv);
    let raw = raw_ip_socket(&t.srv);

    // (datagram size, fragment payload size, IP id)
    for (len, chunk, id) in [(4000usize, 2008usize, 0x4a01u16), (12_000, 8000, 0x4a02)] {
        let st0 = t.stats();
        let mut big = vec![0u8; len];
        fill_pattern(&mut big, len as u64);
        let frags = udp_fragments(srv_addr, m, id, &big, chunk);
        assert_eq!(frags.len(), 2);
        assert!(
            frags.iter().all(|f| f.len() > 1536),
            "fragments of {:?} bytes",
            frags.iter().map(Vec::len).collect::<Vec<_>>()
        );
        for f in frags.iter().rev() {
            raw_send(&raw, f);
        }
        let got = recv_big(&c);
        let st1 = t.stats();
        let (d, from) = got.unwrap_or_else(|| {
            panic!(
                "{len}-byte datagram as fragments of {:?} bytes, last first: nothing arrived; stats {:?}",
                frags.iter().map(Vec::len).collect::<Vec<_>>(),
                st1.0
            )
        });
        assert_eq!(from, srv_addr);
        assert_eq!(d.len(), len, "{len}-byte datagram arrived with {} bytes", d.len());
        assert!(d == big, "{len}-byte datagram corrupted");
        assert!(
            st1.counter("fragments_held") > st0.counter("fragments_held"),
            "the early fragment was not held: {:?}",
            st1.0
        );
        assert_eq!(st1.drop_count("fragment_too_big"), 0, "{:?}", st1.0);
    }
    // the mapping still works plainly
    srv.send_to(b"after", m).unwrap();
    let (d, _) = recv_big(&c).expect("plain datagram after the fragments");
    assert_eq!(d, b"after");
    eprintln!("jumbo fragments: {:?}", t0.elapsed());
}

/// A frame to the virtual MAC while the gateway has no neighbour entry for the next hop
/// (a fresh gateway; the next hop expired): natrix translates it, finds no neighbour
/// (pass_no_neigh) and passes it to the kernel, which should forward it and resolve the
/// next hop as it does for a frame to the interface's own MAC. natrix gives such a frame
/// the interface's own MAC as its destination (bpf/nx_fwd.h, nx_for_us) so that the kernel
/// takes it as its own.
///
/// Generic XDP here: a veth in native mode has already run eth_type_trans on the frame
/// before XDP (the skb comes from its peer's xmit) and never resets PACKET_OTHERHOST, so a
/// destination rewritten in XDP does not count there; generic XDP re-classifies a frame
/// whose destination changed, and a NIC driver's native XDP builds the skb after XDP.
#[test]
fn virtual_mac_frame_with_unresolved_next_hop_is_forwarded() {
    let t0 = Instant::now();
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("interfaces.virtual_macs", &format!("[{VIRTUAL_MAC:?}]"));
    conf.set("interfaces.xdp_mode", "\"generic\"");
    started(&mut t, &conf);
    let s1 = t.s1.clone();
    let srv = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_millis(500));
    let srv_addr = local_of(&srv);
    let s1_mac = mac_of(&s1, "eth0");
    let lan0_mac = mac_of(&t.gw, "lan0");
    let (pkt_sock, ifindex) = packet_socket(&s1, "eth0");
    let neigh0 = ns_ip(&t.gw, &["neigh", "show", "dev", "wan0"]);
    let st0 = t.stats();

    // three datagrams of one flow to the virtual MAC, 300 ms apart
    let vsrc = SocketAddrV4::new(SUB1_IP, 42_000);
    let mut arrived = Vec::new();
    for i in 0..3u16 {
        let udp = udp_datagram(vsrc, srv_addr, format!("virtual {i}").as_bytes());
        let vmac = parse_mac(VIRTUAL_MAC);
        send_frame(
            &pkt_sock,
            ifindex,
            vmac,
            s1_mac,
            &ip_packet(SUB1_IP, SERVER_IP, 17, 700 + i, 0, false, &udp),
        );
        if let Some((d, from)) = udp_recv(&srv) {
            arrived.push((String::from_utf8_lossy(&d).into_owned(), from));
        }
    }
    let st1 = t.stats();
    let neigh1 = ns_ip(&t.gw, &["neigh", "show", "dev", "wan0"]);

    // the same flow's next datagram to lan0's own MAC: the kernel forwards it (and ARPs)
    let udp = udp_datagram(vsrc, srv_addr, b"own MAC");
    send_frame(&pkt_sock, ifindex, lan0_mac, s1_mac, &ip_packet(SUB1_IP, SERVER_IP, 17, 710, 0, false, &udp));
    let own = udp_recv(&srv);
    // and now, the next hop resolved, to the virtual MAC again
    let udp = udp_datagram(vsrc, srv_addr, b"virtual again");
    send_frame(
        &pkt_sock,
        ifindex,
        parse_mac(VIRTUAL_MAC),
        s1_mac,
        &ip_packet(SUB1_IP, SERVER_IP, 17, 711, 0, false, &udp),
    );
    let again = udp_recv(&srv);
    let st2 = t.stats();
    let d = |k: &str, a: &Stats, b: &Stats| b.counter(k) - a.counter(k);
    let evidence = format!(
        "3 frames to the virtual MAC with no neighbour for {SERVER_IP} on wan0 (before: {neigh0:?}, after: {neigh1:?}): \
         {} arrived {arrived:?}; translated_out +{}, pass_no_neigh +{}, redirected +{}; \
         then one to lan0's own MAC: arrived {:?}; then to the virtual MAC again: arrived {:?} \
         (translated_out +{}, pass_no_neigh +{}, redirected +{}); sessions {:?}",
        arrived.len(),
        d("translated_out", &st0, &st1),
        d("pass_no_neigh", &st0, &st1),
        d("redirected", &st0, &st1),
        own.as_ref().map(|(p, f)| (String::from_utf8_lossy(p).into_owned(), *f)),
        again.as_ref().map(|(p, f)| (String::from_utf8_lossy(p).into_owned(), *f)),
        d("translated_out", &st1, &st2),
        d("pass_no_neigh", &st1, &st2),
        d("redirected", &st1, &st2),
        t.sessions(),
    );
    eprintln!("virtual MAC, unresolved next hop: {evidence} ({:?})", t0.elapsed());
    assert!(own.is_some(), "{evidence}");
    assert!(again.is_some(), "{evidence}");
    assert_eq!(
        arrived.len(),
        3,
        "frames to the virtual MAC lost while the next hop was unresolved: {evidence}"
    );
}
