// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The Prometheus endpoint (`[metrics] listen`, src/metrics.rs) end to end: the `natrix`
//! binary in the namespace topology (tests/common/netns/) with real traffic, scraped with
//! curl inside the gateway's namespace; the body checked by `promtool check metrics` and
//! against `natrix stats --json`. Besides (no root): the example alert rules through
//! `promtool check rules` and `promtool test rules`, the Grafana dashboard and the metric
//! list of docs/design/metrics.md against the metrics natrix serves.
//!
//! The namespace tests need root. Run: `cargo test --release --test metrics -- --test-threads=2`

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::netns::*;

const LISTEN: &str = "127.0.0.1:9099";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One sample of a scrape: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of a text exposition (natrix writes no escaped quote or brace in a label).
fn parse(body: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad sample line {line:?}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => {
                (n, rest.strip_suffix('}').unwrap_or_else(|| panic!("bad labels in {line:?}")))
            }
            None => (series, ""),
        };
        let labels = labels
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("bad label {kv:?} in {line:?}"));
                (k.to_owned(), v.trim_matches('"').to_owned())
            })
            .collect();
        let value = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|e| panic!("bad value in {line:?}: {e}")),
        };
        out.push(Sample { name: name.to_owned(), labels, value });
    }
    out
}

struct Scrape(Vec<Sample>);

impl Scrape {
    /// The one sample of `name` with exactly `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: BTreeMap<String, String> =
            labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let hits: Vec<&Sample> = self.0.iter().filter(|s| s.name == name && s.labels == want).collect();
        assert_eq!(hits.len(), 1, "{name}{labels:?}: {} samples", hits.len());
        hits[0].value
    }

    fn all(&self, name: &str) -> Vec<&Sample> {
        self.0.iter().filter(|s| s.name == name).collect()
    }
}

/// `curl` inside the gateway's namespace: (HTTP status, body or headers).
fn curl(t: &Topo, args: &[&str], path: &str) -> (u16, String) {
    let url = format!("http://{LISTEN}{path}");
    let mut a = vec!["curl", "-sS", "--max-time", "10", "-w", "\n%{http_code}"];
    a.extend_from_slice(args);
    a.push(&url);
    let out = ns_exec(&t.gw, &a, Duration::from_secs(20));
    let text = stdout_of_success(&a, &out);
    let (body, code) = text.rsplit_once('\n').unwrap_or_else(|| panic!("no status from curl: {text:?}"));
    (code.trim().parse().unwrap_or_else(|_| panic!("status {code:?}")), body.to_owned())
}

fn scrape(t: &Topo) -> (String, Scrape) {
    let (code, body) = curl(t, &[], "/metrics");
    assert_eq!(code, 200, "GET /metrics: {body}");
    let s = Scrape(parse(&body));
    (body, s)
}

fn promtool(args: &[&str], input: Option<&str>) -> (bool, String) {
    let out = run_bounded(Command::new("promtool").args(args), input, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e} (promtool comes with Debian's prometheus package: scripts/deps.sh)"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn json_u64(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[p];
    }
    x.as_u64().unwrap_or_else(|| panic!("no {path:?} in natrix stats --json"))
}

fn config_with_metrics(t: &Topo) -> PathBuf {
    let mut conf = t.conf();
    conf.set("metrics.listen", &format!("{LISTEN:?}")).set("daemon.sweep_interval", "\"200ms\"");
    t.write_config("natrix.toml", &conf.render())
}

#[test]
fn scrape_passes_promtool_and_agrees_with_stats() {
    let mut t = Topo::new();
    let cfg = config_with_metrics(&t);
    let log = t.start_daemon(&cfg);
    assert!(log.contains(&format!("metrics: serving http://{LISTEN}/metrics")), "{log}");

    // sessions of three protocols: TCP and ICMP from s1, UDP from s2
    let srv = TcpServer::start(&t.srv, SERVER_IP);
    let mut tcp = TcpClient::connect(&t.s1, srv.addr);
    assert!(is_pool(*tcp.who().ip()));
    let server = udp_socket(&t.srv, SocketAddrV4::new(SERVER_IP, 0), Duration::from_secs(2));
    let to = v4_of(server.local_addr().unwrap());
    let client = udp_socket(&t.s2, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), Duration::from_secs(2));
    client.send_to(b"hello", to).unwrap();
    let (_, from) = udp_recv(&server).expect("the server got the subscriber's datagram");
    assert!(is_pool(*from.ip()), "{from}");
    assert_eq!(ping(&t.s1, SERVER_IP, 2), 2, "ping through natrix");

    // unsolicited datagrams to pool endpoints without a mapping: no_mapping, 3 of them
    let used: BTreeSet<String> = t.sessions().into_iter().map(|s| s.outside).collect();
    let unmapped: Vec<SocketAddrV4> = (0..20u16)
        .map(|i| SocketAddrV4::new(POOL_SINGLE, 40_000 + 2 * i))
        .filter(|a| !used.contains(&a.to_string()))
        .take(3)
        .collect();
    let before = t.stats().drop_count("no_mapping");
    for a in &unmapped {
        server.send_to(b"unsolicited", a).unwrap();
    }
    wait_for("3 no_mapping drops", Duration::from_secs(5), Duration::from_millis(50), || {
        (t.stats().drop_count("no_mapping") >= before + 3).then_some(())
    });

    // traffic stopped: two sweeps later the snapshot is the tables as they are
    let (_, s) = scrape(&t);
    let swept = s.get("natrix_sweep_duration_seconds_count", &[]);
    wait_for("two sweeps after the traffic", Duration::from_secs(20), Duration::from_millis(100), || {
        (scrape(&t).1.get("natrix_sweep_duration_seconds_count", &[]) >= swept + 2.0).then_some(())
    });
    let (body, s) = scrape(&t);
    let stats = t.stats().0;

    let (ok, out) = promtool(&["check", "metrics"], Some(&body));
    assert!(ok && out.trim().is_empty(), "promtool check metrics:\n{out}\n---- body ----\n{body}");

    // drops: every reason, zeros included, each as natrix stats counts it
    let reasons = stats["drops"].as_object().expect("drops in natrix stats --json");
    assert_eq!(s.all("natrix_drops_total").len(), reasons.len(), "one series per drop reason");
    for (reason, n) in reasons {
        let want = n.as_u64().unwrap() as f64;
        assert_eq!(s.get("natrix_drops_total", &[("reason", reason)]), want, "drops {reason}");
    }
    assert!(s.get("natrix_drops_total", &[("reason", "no_mapping")]) >= 3.0);
    for (dir, name) in [("out", "translated_out"), ("in", "translated_in")] {
        let want = json_u64(&stats, &["counters", name]) as f64;
        assert_eq!(s.get("natrix_translated_packets_total", &[("direction", dir)]), want, "{name}");
    }

    // sessions by protocol, as natrix stats counts them
    let by_proto = &stats["session_table"]["live_by_proto"];
    let mut total = 0.0;
    for (i, proto) in ["tcp", "udp", "icmp"].iter().enumerate() {
        let n = s.get("natrix_sessions", &[("proto", proto)]);
        assert_eq!(n, by_proto[i].as_u64().unwrap() as f64, "{proto} sessions");
        assert!(n >= 1.0, "no {proto} session counted");
        total += n;
    }
    assert_eq!(total, json_u64(&stats, &["sessions"]) as f64, "sessions");

    // the rest of the sweep's counts
    for (metric, key) in [
        ("natrix_mappings", "mappings"),
        ("natrix_subscribers", "subscribers"),
        ("natrix_port_blocks_in_use", "blocks_in_use"),
        ("natrix_port_blocks_capacity", "blocks_total"),
        ("natrix_ports_in_use", "ports_in_use"),
    ] {
        assert_eq!(s.get(metric, &[]), json_u64(&stats, &[key]) as f64, "{metric} vs {key}");
    }
    assert_eq!(s.get("natrix_subscribers", &[]), 2.0);
    for (table, key) in
        [("sessions", "session_table"), ("mappings", "mapping_table"), ("subscribers", "subscriber_table")]
    {
        let entries = s.get("natrix_table_entries", &[("table", table)]);
        assert_eq!(entries, json_u64(&stats, &[key, "counted"]) as f64, "{table} entries");
        let cap = s.get("natrix_table_capacity", &[("table", table)]);
        assert_eq!(cap, json_u64(&stats, &[key, "max_entries"]) as f64, "{table} capacity");
    }

    // blocks by pool address: every address of the pool, no other
    let pool: BTreeSet<String> = (16..24u8)
        .map(|i| Ipv4Addr::new(203, 0, 113, i))
        .chain([POOL_SINGLE])
        .map(|a| a.to_string())
        .collect();
    let per = s.all("natrix_port_blocks");
    let named: BTreeSet<String> = per.iter().map(|x| x.labels["address"].clone()).collect();
    assert_eq!(named, pool, "natrix_port_blocks' addresses");
    let sum: f64 = per.iter().map(|x| x.value).sum();
    assert_eq!(sum, s.get("natrix_port_blocks_in_use", &[]));
    assert!(sum >= 2.0, "two subscribers, {sum} blocks");
    let each = s.get("natrix_port_blocks_per_address", &[]);
    assert_eq!(each * pool.len() as f64, s.get("natrix_port_blocks_capacity", &[]));

    // the event counts (nothing exports yet) and the sweep's freshness
    assert_eq!(s.get("natrix_log_events_sent_total", &[]), 0.0);
    assert_eq!(s.get("natrix_log_events_lost_total", &[("stage", "export")]), 0.0);
    let lost = json_u64(&stats, &["counters", "log_lost"]) as f64;
    assert_eq!(s.get("natrix_log_events_lost_total", &[("stage", "buffer")]), lost);
    let buffered = json_u64(&stats, &["counters", "log_events"]) as f64;
    assert_eq!(s.get("natrix_log_events_buffered_total", &[]), buffered);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let at = s.get("natrix_last_sweep_timestamp_seconds", &[]);
    assert!((now - at).abs() < 10.0, "last sweep at {at}, now {now}");
    assert!(s.get("natrix_last_sweep_duration_seconds", &[]) < 5.0);
    assert_eq!(s.get("natrix_sweep_errors_total", &[]), 0.0);

    // HTTP: other paths, HEAD, other methods
    let (code, _) = curl(&t, &[], "/");
    assert_eq!(code, 404, "GET /");
    let (code, _) = curl(&t, &[], "/metrics/x");
    assert_eq!(code, 404, "GET /metrics/x");
    let (code, head) = curl(&t, &["-I"], "/metrics");
    assert_eq!(code, 200, "HEAD /metrics: {head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let (code, _) = curl(&t, &["-X", "POST"], "/metrics");
    assert_eq!(code, 405, "POST /metrics");
    tcp.close();

    // the server ends with the daemon: SIGTERM exits 0 at once, the port is free again
    let st = t.stop_daemon(libc::SIGTERM);
    assert!(st.success(), "natrix run with metrics after SIGTERM: {st}\n{}", t.daemon_log());
    in_netns(&t.gw, || TcpListener::bind(LISTEN)).expect("the metrics port is free after the daemon exits");
}

#[test]
fn listen_address_in_use_fails_startup_naming_the_key() {
    let t = Topo::new();
    let _taken = in_netns(&t.gw, || TcpListener::bind(LISTEN)).expect("bind the metrics port first");
    let cfg = config_with_metrics(&t);
    let (st, err) = t.run_expect_exit(&cfg);
    assert!(!st.success(), "natrix run succeeded with its metrics address taken:\n{err}");
    assert!(
        err.contains("metrics.listen") && err.contains(LISTEN),
        "the message does not name the key:\n{err}"
    );
    for dev in ["lan0", "lan1", "wan0"] {
        assert!(!t.xdp_attached(dev), "{dev} has XDP after a failed start:\n{}", t.gw_link(dev));
    }
    assert!(!t.pin.exists(), "a failed start left {} behind", t.pin.display());
}

// ---------------------------------------------------------------------------------------
// the sweep's counts against natrix stats, through BPF_PROG_TEST_RUN (root)

/// What the sweep counted equals what `natrix stats` computes by walking, right after each
/// sweep: sessions of three protocols live, expiring in that sweep, ports on hold-down and
/// freed, blocks and subscribers released; in dynamic mode with home walks, with every
/// mapping in the table (nat.home_probe 0), and in deterministic mode.
#[test]
fn sweep_counts_as_natrix_stats_does() {
    use common::pkt::{sub, with_env, Cfg, Env, Pkt, SERVER};
    const SYN: u8 = 0x02;

    fn check(env: &Env, what: &str) {
        let o = env.occupancy();
        let st = natrix::show::stats(&env.dp.tables).expect("natrix stats");
        let (sess, maps, subs) = (&st.session_table, &st.mapping_table, &st.subscriber_table);
        assert_eq!(o.sessions, sess.health.live_by_proto, "{what}: sessions by protocol");
        assert_eq!(o.sessions.iter().sum::<u64>(), st.sessions, "{what}: sessions");
        assert_eq!(o.mappings, st.mappings, "{what}: mappings");
        assert_eq!(o.ports_in_use, st.ports_in_use, "{what}: ports in use");
        assert_eq!(
            o.table_entries,
            [sess.health.counted, maps.health.counted, subs.health.counted],
            "{what}: table entries"
        );
        let cap = [sess.max_entries, maps.max_entries, subs.max_entries].map(u64::from);
        assert_eq!(o.table_capacity, cap, "{what}: table sizes");
        assert_eq!(o.deterministic, st.deterministic.is_some(), "{what}: mode");
        if o.deterministic {
            return;
        }
        assert_eq!(o.subscribers, st.subscribers, "{what}: subscribers");
        assert_eq!(o.blocks.iter().sum::<u64>(), st.blocks_in_use, "{what}: blocks in use");
        let n_addrs = env.cfg.pool.addresses.len() as u64;
        assert_eq!(o.blocks_per_addr * n_addrs, st.blocks_total, "{what}: blocks");
        let bpa = env.blocks_per_addr();
        let per: Vec<u64> = (0..n_addrs as u32)
            .map(|a| (a * bpa..(a + 1) * bpa).filter(|&g| env.block_word(g) as u32 != 0).count() as u64)
            .collect();
        assert_eq!(o.blocks, per, "{what}: blocks by pool address");
    }

    fn open_flows(env: &Env, subs: std::ops::RangeInclusive<u8>, port: u16) {
        for s in subs {
            let mut flows = vec![Pkt::echo_request(sub(s), SERVER, port)];
            for i in 0..3 {
                flows.push(Pkt::udp(sub(s), port + 2 * i, SERVER, 53));
            }
            for i in 0..2 {
                flows.push(Pkt::tcp(sub(s), port + 2 * i, SERVER, 80, SYN));
            }
            for p in flows {
                env.open(&p);
            }
        }
    }

    let short = Cfg::default()
        .set("timeouts", "udp", "\"1s\"")
        .set("timeouts", "icmp", "\"1s\"")
        .set("timeouts", "tcp_transitory", "\"1s\"")
        .set("timeouts", "port_hold_down", "\"1s\"");
    let modes = [
        ("home walks", short.clone()),
        ("table mappings", short.clone().set("nat", "home_probe", "0")),
        (
            "deterministic",
            short.set("nat", "mode", "\"deterministic\"").set(
                "nat",
                "deterministic_subscribers",
                "\"100.64.0.0/24\"",
            ),
        ),
    ];
    for (mode, cfg) in modes {
        with_env(&cfg, |env| {
            let pause = |ms| std::thread::sleep(Duration::from_millis(ms));
            open_flows(env, 1..=4, 10_000);
            env.sweep();
            check(env, &format!("{mode}: all live"));
            let st = natrix::show::stats(&env.dp.tables).unwrap();
            assert!(st.session_table.health.live_by_proto.iter().all(|&n| n > 0), "{mode}: {st:?}");
            pause(1300);
            open_flows(env, 3..=6, 20_000);
            let r = env.sweep();
            assert!(r.sessions_expired >= 24, "{mode}: the first flows expire in this sweep: {r:?}");
            check(env, &format!("{mode}: the first flows expired"));
            pause(1300);
            env.sweep();
            check(env, &format!("{mode}: all expired, ports held"));
            // hold-down (1 s) and the margin of port words that are mappings (2 s) over
            pause(3500);
            env.sweep();
            env.sweep();
            check(env, &format!("{mode}: ports freed"));
            let o = env.occupancy();
            assert_eq!((o.sessions, o.mappings, o.ports_in_use), ([0; 3], 0, 0), "{mode}: {o:?}");
        });
    }
}

// ---------------------------------------------------------------------------------------
// the examples and the documentation, against the metrics natrix serves (no root)

/// The metric names a PromQL expression uses (`natrix_…`; a histogram's series by family).
fn natrix_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("natrix_") {
        let start = i + at;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        let name = &expr[start..end];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| natrix::metrics::family_names().contains(f)))
            .unwrap_or(name);
        out.insert(family.to_owned());
        i = end;
    }
    out
}

#[test]
fn alert_rules_pass_promtool_and_fire_when_they_should() {
    let rules = root().join("examples/prometheus/alerts.yml");
    let (ok, out) = promtool(&["check", "rules", rules.to_str().unwrap()], None);
    assert!(ok, "promtool check rules:\n{out}");
    let tests = root().join("examples/prometheus/alerts_test.yml");
    let (ok, out) = promtool(&["test", "rules", tests.to_str().unwrap()], None);
    assert!(ok, "promtool test rules:\n{out}");
    let text = std::fs::read_to_string(&rules).unwrap();
    let known = natrix::metrics::family_names();
    for name in natrix_names(&text) {
        assert!(known.contains(&name.as_str()), "alerts.yml uses {name}, which natrix does not serve");
    }
}

#[test]
fn grafana_dashboard_is_json_and_uses_served_metrics() {
    let path = root().join("examples/grafana/natrix-dashboard.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let panels = v["panels"].as_array().expect("panels");
    let mut used = BTreeSet::new();
    let mut exprs = Vec::new();
    for p in panels {
        for target in p["targets"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let expr = target["expr"].as_str().unwrap_or_default();
            used.extend(natrix_names(expr));
            exprs.push(expr.replace("$__rate_interval", "5m").replace("$instance", ".*"));
        }
    }
    // every query parses: as recording rules, through promtool
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        rules += &format!("      - record: dashboard:query_{i}\n        expr: {}\n", serde_json::json!(e));
    }
    let file = std::env::temp_dir().join(format!("natrix-dashboard-{}.yml", std::process::id()));
    std::fs::write(&file, &rules).unwrap();
    let (ok, out) = promtool(&["check", "rules", file.to_str().unwrap()], None);
    let _ = std::fs::remove_file(&file);
    assert!(ok, "the dashboard's queries do not parse:\n{out}\n{rules}");
    let known = natrix::metrics::family_names();
    for name in &used {
        assert!(known.contains(&name.as_str()), "the dashboard uses {name}, which natrix does not serve");
    }
    for must in [
        "natrix_translated_packets_total",
        "natrix_drops_total",
        "natrix_sessions",
        "natrix_mappings",
        "natrix_subscribers",
        "natrix_port_blocks_in_use",
        "natrix_port_blocks",
        "natrix_table_entries",
        "natrix_log_events_sent_total",
        "natrix_log_events_lost_total",
        "natrix_sweep_duration_seconds",
    ] {
        assert!(used.contains(must), "the dashboard has no panel for {must}");
    }
}

/// docs/design/metrics.md's table lists every metric natrix serves, and no other.
#[test]
fn design_doc_lists_every_metric() {
    let doc = std::fs::read_to_string(root().join("docs/design/metrics.md")).unwrap();
    let listed: BTreeSet<String> = doc
        .lines()
        .filter(|l| l.starts_with("| `natrix_"))
        .filter_map(|l| l.split('`').nth(1))
        .map(str::to_owned)
        .collect();
    let served: BTreeSet<String> = natrix::metrics::family_names().into_iter().map(str::to_owned).collect();
    let missing: Vec<_> = served.difference(&listed).collect();
    let extra: Vec<_> = listed.difference(&served).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/design/metrics.md: missing {missing:?}, not served {extra:?}"
    );
}
