// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix lookup` end to end: real flows through the `natrix` binary in namespaces
//! (tests/common/netns/), then the outside endpoints the server saw looked up in the
//! gateway's pinned tables. Dynamic mode: the subscriber, its block, since when (against
//! the wall clock around the first packet), the exact mapping, port-class ports and static
//! forwards, nobody holding a port, bad arguments, `--at` before the allocation.
//! Deterministic mode: the subscriber of a real flow, and of a range whose subscriber never
//! sent anything, computed here from the configuration as the README states it.
//!
//! Needs root (namespaces, XDP, bpffs). Run: `cargo test --release --test lookup`

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::netns::*;
use common::wire::*;

fn started(t: &mut Topo, conf: &Conf, tables: &str) {
    let cfg = t.write_config("natrix.toml", &format!("{}{tables}", conf.render()));
    t.start_daemon(&cfg);
}

/// What one `natrix lookup` run gave.
struct Looked {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Looked {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("lookup --json printed no JSON ({e}): {}{}", self.stdout, self.stderr))
    }
}

/// `natrix lookup <args> --pin <the topology's>` in the gateway namespace.
fn lookup(t: &Topo, args: &[&str]) -> Looked {
    let pin = t.pin_str();
    let mut a = vec!["lookup"];
    a.extend_from_slice(args);
    a.extend(["--pin", pin.as_str()]);
    let out = t.natrix(&a);
    Looked {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A lookup that must find a holder (exit 0); its JSON answer.
fn found(t: &Topo, args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    let r = lookup(t, &a);
    assert_eq!(r.code, 0, "lookup {args:?} found nobody: {}{}", r.stdout, r.stderr);
    r.json()
}

/// A lookup that must find nobody (exit 1, `inside` null, the reason on stderr and in
/// `reason`); its stderr.
fn nobody(t: &Topo, args: &[&str]) -> String {
    let mut a = args.to_vec();
    a.push("--json");
    let r = lookup(t, &a);
    assert_eq!(r.code, 1, "lookup {args:?}: expected exit 1 (nobody): {}{}", r.stdout, r.stderr);
    let v = r.json();
    assert!(v["inside"].is_null(), "lookup {args:?}: {v}");
    let reason = v["reason"].as_str().unwrap_or_else(|| panic!("no reason: {v}"));
    assert!(r.stderr.contains(reason), "the reason is not on stderr: {}", r.stderr);
    r.stderr
}

fn unix_ms(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis()
}

/// Unix milliseconds as RFC 3339 UTC with milliseconds, by date(1): a clock formatter that
/// is not natrix's. Such strings order as their times.
fn rfc3339_by_date(ms: u128) -> String {
    let at = format!("@{}.{:03}", ms / 1000, ms % 1000);
    let out =
        run_timeout(Command::new("date").args(["-u", "-d", &at, "+%Y-%m-%dT%H:%M:%S.%3NZ"]), CMD_TIMEOUT);
    stdout_of_success(&"date", &out).trim().to_owned()
}

/// The mapping entry of `proto` in an answer.
fn mapping<'a>(v: &'a serde_json::Value, proto: &str) -> &'a serde_json::Value {
    v["mappings"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["proto"] == proto))
        .unwrap_or_else(|| panic!("no {proto} mapping: {v}"))
}

/// An RFC 3339 time as Unix milliseconds, by date(1).
fn ms_by_date(s: &str) -> u128 {
    let out = run_timeout(Command::new("date").args(["-u", "-d", s, "+%s%3N"]), CMD_TIMEOUT);
    stdout_of_success(&"date", &out).trim().parse().unwrap_or_else(|e| panic!("date -d {s}: {e}"))
}

fn block_of(v: &serde_json::Value) -> (u16, u16) {
    let b = &v["block"];
    let p = |k: &str| b[k].as_u64().unwrap_or_else(|| panic!("no block.{k}: {v}")) as u16;
    (p("first"), p("last"))
}

/// Dynamic mode: s1 opens a UDP and a TCP flow; their outside endpoints name s1, its block
/// and since when; nobody holds a port of a free block or of a non-pool address; bad
/// arguments exit 2; `--at` before the allocation points to the NAT log. A port-class
/// mapping and a static forward answer with their inside endpoint and no block.
#[test]
fn dynamic_mode_names_the_subscriber_its_block_and_since_when() {
    let mut t = Topo::new();
    let conf = t.conf();
    started(
        &mut t,
        &conf,
        "[[forward]]\nproto = \"tcp\"\noutside = \"203.0.113.40:8080\"\ninside = \"100.64.1.2:80\"\n",
    );
    let server = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(5));

    // s1's first packet: the data plane allocates its block while it passes
    let c = udp_socket(&t.s1, any_port(SUB1_IP), Duration::from_secs(5));
    let before = SystemTime::now();
    c.send_to(b"first", local_of(&server)).unwrap();
    let (_, out_udp) = udp_recv(&server).expect("s1's first datagram did not reach the server");
    let after = SystemTime::now();
    assert_pool(out_udp, "s1's UDP flow");
    let tcp_server = TcpServer::start(&t.srv, SERVER_IP);
    let mut conn = TcpClient::connect(&t.s1, tcp_server.addr);
    let out_tcp = conn.who();
    assert_pool(out_tcp, "s1's TCP flow");

    // the UDP flow's endpoint: s1, its block, since the first packet, the exact mapping
    let ep = out_udp.to_string();
    let v = found(&t, &[&ep]);
    assert_eq!(v["outside"], ep.as_str(), "{v}");
    assert_eq!((v["inside"].as_str(), v["mode"].as_str()), (Some("100.64.0.2"), Some("dynamic")), "{v}");
    assert_eq!(v["kind"], "block", "{v}");
    let (first, last) = block_of(&v);
    assert!((first..=last).contains(&out_udp.port()) && last - first + 1 == 256, "{v}");
    let since = v["since"].as_str().unwrap_or_else(|| panic!("no since: {v}"));
    // (2 ms either way: CLOCK_TAI's offset to UTC is read apart from the time itself)
    let (lo, hi) = (rfc3339_by_date(unix_ms(before) - 2), rfc3339_by_date(unix_ms(after) + 2));
    assert!(lo.as_str() <= since && since <= hi.as_str(), "since {since} is not within {lo} .. {hi}");
    assert!(v["range"].is_null() && v["reason"].is_null(), "{v}");
    let m = mapping(&v, "udp");
    assert_eq!((m["state"].as_str(), m["inside_ip"].as_str()), (Some("used"), Some("100.64.0.2")), "{v}");
    assert_eq!(m["inside_port"].as_u64(), Some(u64::from(local_of(&c).port())), "{v}");

    // --proto udp: that mapping alone, with s1's inside port
    let v = found(&t, &[&ep, "--proto", "udp"]);
    let maps = v["mappings"].as_array().unwrap();
    assert_eq!(maps.len(), 1, "{v}");
    assert_eq!(maps[0]["inside_port"].as_u64(), Some(u64::from(local_of(&c).port())), "{v}");
    assert_eq!(v["proto"], "udp", "{v}");
    // and TCP's endpoint, with the TCP connection's inside port
    let v = found(&t, &[&out_tcp.to_string(), "--proto", "tcp"]);
    assert_eq!(v["inside"], "100.64.0.2", "{v}");
    assert_eq!(mapping(&v, "tcp")["inside_port"].as_u64(), Some(u64::from(conn.local.port())), "{v}");
    let tcp_block = block_of(&v);

    // the text output: one fact a line
    let r = lookup(&t, &[&ep]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for want in [
        format!("outside:  {ep}"),
        "inside:   100.64.0.2".to_owned(),
        format!("block:    ports {first}-{last}"),
        format!("since:    {since}"),
        format!("udp:      100.64.0.2:{}", local_of(&c).port()),
    ] {
        assert!(r.stdout.lines().any(|l| l == want), "no line {want:?} in:\n{}", r.stdout);
    }

    // --at: from the allocation on, the tables answer; before it, the NAT log must
    let now_s = (unix_ms(SystemTime::now()) / 1000).to_string();
    assert_eq!(found(&t, &[&ep, "--at", since])["inside"], "100.64.0.2");
    assert_eq!(found(&t, &[&ep, "--at", &now_s])["inside"], "100.64.0.2");
    let earlier = (unix_ms(before) / 1000 - 60).to_string();
    let r = lookup(&t, &[&ep, "--at", &earlier, "--json"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("cannot answer") && r.stderr.contains("NAT log"), "{}", r.stderr);
    // nothing of the present holder's is given as the answer for that time
    let v = r.json();
    assert!(v["inside"].is_null() && v["mappings"] == serde_json::json!([]), "{v}");
    let hour_before = rfc3339_by_date(unix_ms(before) - 3_600_000);
    let err = nobody(&t, &[&ep, "--at", &hour_before]);
    assert!(err.contains("NAT log"), "{err}");

    // a port of a block nobody holds on the same pool address
    let free_port = if first > 30_000 && tcp_block.0 > 30_000 { 1100u16 } else { 64_000 };
    assert!(!(first..=last).contains(&free_port) && !(tcp_block.0..=tcp_block.1).contains(&free_port));
    let other = SocketAddrV4::new(*out_udp.ip(), free_port).to_string();
    let err = nobody(&t, &[&other]);
    assert!(err.contains("nobody holds") && err.contains("is free"), "{err}");
    assert!(nobody(&t, &[&other, "--proto", "udp"]).contains("nobody holds"));
    // an address outside the pool
    let err = nobody(&t, &["198.51.100.1:1500"]);
    assert!(err.contains("not a pool address"), "{err}");
    // text mode: nothing on stdout, the reason on stderr
    let r = lookup(&t, &[&other]);
    assert_eq!((r.code, r.stdout.as_str()), (1, ""), "{}", r.stderr);

    // usage errors: exit 2
    for bad in [
        vec!["203.0.113.16"],
        vec!["203.0.113.16:99999"],
        vec!["host:80"],
        vec![&ep, "--proto", "sctp"],
        vec![&ep, "--at", "yesterday"],
        vec![&ep, "--at", "2026-02-30T00:00:00Z"],
        vec![],
    ] {
        let r = lookup(&t, &bad);
        assert_eq!(r.code, 2, "lookup {bad:?}: expected exit 2: {}{}", r.stdout, r.stderr);
    }

    // a port-class mapping (inside port below 1024: outside port below 1024, no block)
    let low = udp_socket(&t.s1, SocketAddrV4::new(SUB1_IP, 500), Duration::from_secs(5));
    low.send_to(b"low", local_of(&server)).unwrap();
    let (_, out_low) = udp_recv(&server).expect("s1's port-500 datagram did not reach the server");
    assert!(out_low.port() < 1024, "port class: {out_low}");
    let v = found(&t, &[&out_low.to_string()]);
    assert_eq!((v["inside"].as_str(), v["kind"].as_str()), (Some("100.64.0.2"), Some("port_class")), "{v}");
    assert!(v["block"].is_null() && v["since"].is_null(), "{v}");
    assert_eq!(mapping(&v, "udp")["inside_port"].as_u64(), Some(500), "{v}");
    // no allocation time is kept for it: --at cannot be answered
    assert!(nobody(&t, &[&out_low.to_string(), "--at", &now_s]).contains("NAT log"));

    // the static forward: its inside host, whoever owns the block around it
    let v = found(&t, &["203.0.113.40:8080", "--proto", "tcp"]);
    assert_eq!(
        (v["inside"].as_str(), v["kind"].as_str()),
        (Some("100.64.1.2"), Some("static_forward")),
        "{v}"
    );
    let m = mapping(&v, "tcp");
    assert_eq!((m["state"].as_str(), m["inside_port"].as_u64()), (Some("static"), Some(80)), "{v}");
    assert!(v["block"].is_null() && v["since"].is_null(), "a static forward holds no block: {v}");
    conn.close();
    drop((c, low));
}

/// A released port: its mapping gone, its word on hold-down (timeouts.port_hold_down,
/// 120 s), the block still s1's. The lookup says when it was released and when it is free.
#[test]
fn released_port_shows_its_hold_down() {
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.set("timeouts.udp", r#""2s""#);
    started(&mut t, &conf, "");
    let server = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(5));
    let c = udp_socket(&t.s1, any_port(SUB1_IP), Duration::from_secs(5));
    let before = SystemTime::now();
    c.send_to(b"once", local_of(&server)).unwrap();
    let (_, out) = udp_recv(&server).expect("s1's datagram did not reach the server");
    let ep = out.to_string();
    assert_eq!(found(&t, &[&ep, "--proto", "udp"])["mappings"][0]["state"], "used");
    // the session expires after 2 s, the daemon's sweep (every second) ends the mapping
    let v = wait_for("the port on hold-down", Duration::from_secs(20), Duration::from_millis(250), || {
        let v = found(&t, &[&ep, "--proto", "udp"]);
        (v["mappings"][0]["state"] == "held").then_some(v)
    });
    let after = SystemTime::now();
    assert_eq!((v["inside"].as_str(), v["kind"].as_str()), (Some("100.64.0.2"), Some("block")), "{v}");
    let m = &v["mappings"][0];
    assert!(m["inside_ip"].is_null() && m["inside_port"].is_null(), "{v}");
    let released = ms_by_date(m["released"].as_str().unwrap_or_else(|| panic!("no released: {v}")));
    let until =
        ms_by_date(m["hold_down_until"].as_str().unwrap_or_else(|| panic!("no hold_down_until: {v}")));
    // the word keeps the release's second (CLOCK_MONOTONIC): up to a second early
    assert!(
        unix_ms(before) + 2000 <= released + 1000 && released <= unix_ms(after),
        "released {released} not within {} .. {}",
        unix_ms(before) + 2000,
        unix_ms(after)
    );
    assert_eq!(until - released, 120_000, "{v}");
    let r = lookup(&t, &[&ep]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.lines().any(|l| l.starts_with("udp:      on hold-down: released ")), "{}", r.stdout);
    drop(c);
}

/// Deterministic mode: the outside endpoint of s1's flow names s1; a port of another
/// subscriber's range names that subscriber though it never sent anything, at any time;
/// ports beyond every range or beyond the prefix's subscribers name nobody.
#[test]
fn deterministic_mode_names_the_subscriber_from_the_configuration() {
    let mut t = Topo::new();
    let mut conf = t.conf();
    conf.unset("nat.block_size")
        .unset("nat.max_blocks_per_subscriber")
        .set("nat.mode", r#""deterministic""#)
        .set("nat.deterministic_subscribers", r#""100.64.0.0/23""#);
    started(&mut t, &conf, "");
    // the README's arithmetic, done here: 512 subscribers, 9 pool addresses in the order
    // configured (203.0.113.16/29, then .40), k = ceil(512 / 9) to an address, n = the
    // pool ports / k, even; subscriber i on address i / k, ports 1024 + (i % k) * n ..
    let pool: Vec<Ipv4Addr> =
        (16..24).map(|h| Ipv4Addr::new(203, 0, 113, h)).chain([Ipv4Addr::new(203, 0, 113, 40)]).collect();
    let (subs, ports) = (512u32, 65536 - 1024u32);
    let k = subs.div_ceil(pool.len() as u32);
    let n = ports / k / 2 * 2;
    let range_of = |i: u32| {
        let first = 1024 + (i % k) * n;
        (pool[(i / k) as usize], first as u16, (first + n - 1) as u16)
    };

    // s1 (100.64.0.2, subscriber 2)
    let server = udp_socket(&t.srv, any_port(SERVER_IP), Duration::from_secs(5));
    let c = udp_socket(&t.s1, any_port(SUB1_IP), Duration::from_secs(5));
    c.send_to(b"det", local_of(&server)).unwrap();
    let (_, out) = udp_recv(&server).expect("s1's datagram did not reach the server");
    let (ip, first, last) = range_of(2);
    assert_eq!(*out.ip(), ip, "s1's pool address");
    let v = found(&t, &[&out.to_string()]);
    assert_eq!(
        (v["inside"].as_str(), v["mode"].as_str()),
        (Some("100.64.0.2"), Some("deterministic")),
        "{v}"
    );
    assert_eq!(
        (v["range"]["first"].as_u64(), v["range"]["last"].as_u64()),
        (Some(first.into()), Some(last.into()))
    );
    assert!(v["block"].is_null() && v["since"].is_null(), "{v}");
    assert_eq!(mapping(&v, "udp")["inside_port"].as_u64(), Some(u64::from(local_of(&c).port())), "{v}");

    // subscriber 300 (100.64.1.44) never sent anything: its range is its own all the same,
    // at any time
    let (ip, first, last) = range_of(300);
    let ep = SocketAddrV4::new(ip, first + 7).to_string();
    for at in [None, Some("2001-01-01T00:00:00Z"), Some("1000000000"), Some("2099-12-31T23:59:59+01:00")] {
        let mut args = vec![ep.as_str()];
        if let Some(a) = at {
            args.extend(["--at", a]);
        }
        let v = found(&t, &args);
        assert_eq!(v["inside"], "100.64.1.44", "--at {at:?}: {v}");
        assert_eq!(
            (v["range"]["first"].as_u64(), v["range"]["last"].as_u64()),
            (Some(first.into()), Some(last.into()))
        );
        assert_eq!(v["mappings"].as_array().map(Vec::len), Some(0), "{v}");
    }
    let r = lookup(&t, &[&ep]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("inside:   100.64.1.44") && r.stdout.contains("any time"), "{}", r.stdout);

    // beyond every range of an address, and the range after the last subscriber's
    let beyond = SocketAddrV4::new(pool[0], (1024 + k * n) as u16).to_string();
    assert!(nobody(&t, &[&beyond]).contains("outside every deterministic range"));
    let (ip, first, _) = range_of(subs);
    assert!(nobody(&t, &[&SocketAddrV4::new(ip, first).to_string()]).contains("nobody holds"));
    drop(c);
}
