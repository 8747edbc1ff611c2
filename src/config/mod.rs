// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Configuration file parsing and validation.
//!
//! The TOML document is walked by hand instead of being deserialized with
//! serde derive: that way every error names the exact dotted key the operator
//! wrote (`interfaces.inside[1]`, `timeouts.udp`) together with a reason in
//! their terms, rather than a serde type path.
//!
//! Parsing is a pure function from text to [`Config`]. The daemon either gets
//! a fully validated configuration or an error, never a half-applied one.
//!
//! One file per concern, each with its unit tests: `interfaces`, `pool` (and the
//! address-prefix and port syntax other sections share), `exclusions` (`[[exclude]]`),
//! `forwards` (`[[forward]]`), `nat`, `fragments`, `timeouts`, `limits`, `fib_cache`,
//! `daemon`, and `duration` (the duration notation). This file holds [`Config`], the
//! top-level parse and load, the section and key-error machinery, the table of allowed
//! keys, and the tests that span sections.

mod daemon;
mod duration;
mod exclusions;
mod fib_cache;
mod forwards;
mod fragments;
mod interfaces;
mod limits;
mod log;
mod metrics;
mod nat;
mod pool;
mod timeouts;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::Ipv4Net;
use toml::{Table, Value};

pub use daemon::Daemon;
pub use duration::parse_duration;
pub use fib_cache::FibCache;
pub use forwards::Forward;
pub use fragments::Fragments;
pub use interfaces::{Interfaces, XdpMode};
pub use limits::{Limits, DEFAULT_SESSIONS_PER_SUBSCRIBER};
pub use log::{Collector, Log, RING_BYTES_PER_EVENT};
pub use metrics::Metrics;
pub use nat::{Deterministic, Filtering, Nat, UnreachableCode, DEFAULT_SUBSCRIBERS};
pub use pool::Pool;
pub use timeouts::Timeouts;

use daemon::parse_daemon;
use duration::fmt_duration;
use exclusions::{parse_exclude, MAX_EXCLUDES};
use fib_cache::parse_fib_cache;
use forwards::{parse_forwards, MAX_FORWARDS};
use fragments::parse_fragments;
use interfaces::parse_interfaces;
use limits::parse_limits;
use log::parse_log;
use metrics::parse_metrics;
use nat::parse_nat;
use pool::parse_pool;
use timeouts::parse_timeouts;

/// Top-level tables, in the order they are validated.
const SECTIONS: &[&str] = &[
    "interfaces",
    "pool",
    "nat",
    "fragments",
    "timeouts",
    "limits",
    "fib_cache",
    "daemon",
    "log",
    "metrics",
];
/// Top-level arrays of tables (`[[exclude]]`), each element a table of its
/// own. They are validated right after `pool`, whose addresses they refer to.
const TABLE_ARRAYS: &[&str] = &["exclude", "forward"];

/// A fully validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub interfaces: Interfaces,
    pub pool: Pool,
    /// Destinations forwarded without translation (RFC 6888 REQ-6), in
    /// configured order. None of them contains a pool address.
    pub exclude: Vec<Ipv4Net>,
    /// Static inbound port forwards, in configured order.
    pub forwards: Vec<Forward>,
    pub nat: Nat,
    pub fragments: Fragments,
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub fib_cache: FibCache,
    pub daemon: Daemon,
    /// NAT event logging (IPFIX, syslog).
    pub log: Log,
    /// The Prometheus endpoint.
    pub metrics: Metrics,
    /// Accepted but questionable settings (e.g. timeouts below an RFC
    /// minimum). Returned rather than logged so that parsing stays pure.
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// `message` is toml's own rendering, which carries line and column.
    #[error("config syntax error: {message}")]
    Syntax { message: String },
    #[error("config key `{key}`: {message}")]
    Key { key: String, message: String },
}

impl Config {
    /// Parses and validates a complete configuration document.
    pub fn from_toml_str(s: &str) -> Result<Config, ConfigError> {
        let root: Table = toml::from_str(s)
            .map_err(|e| ConfigError::Syntax { message: e.to_string().trim_end().to_owned() })?;

        // Reject unknown sections before looking inside known ones, so that a
        // misspelt `[timeout]` is reported as such rather than as whatever
        // default-dependent error it would otherwise cause further down.
        let known: Vec<&str> = SECTIONS.iter().chain(TABLE_ARRAYS).copied().collect();
        for (name, value) in &root {
            if !known.contains(&name.as_str()) {
                let what = match value {
                    Value::Table(_) => "table",
                    Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_table) => "array of tables",
                    _ => "key",
                };
                return Err(unknown_key(name.clone(), name, &known, what));
            }
        }

        let empty = Table::new();
        let mut warnings = Vec::new();
        let interfaces = parse_interfaces(&Section::open(&root, "interfaces", &empty)?)?;
        let (pool, pool_entries) = parse_pool(&Section::open(&root, "pool", &empty)?)?;
        let exclude = parse_exclude(&table_array(&root, "exclude", MAX_EXCLUDES)?, &pool_entries)?;
        let forwards = parse_forwards(&table_array(&root, "forward", MAX_FORWARDS)?, &pool)?;
        let nat = parse_nat(&Section::open(&root, "nat", &empty)?, &pool)?;
        if nat.deterministic.is_some() && !forwards.is_empty() {
            return Err(key_err(
                "forward[0]",
                "static forwards are not supported with nat.mode = \"deterministic\" (every port of the pool range belongs to a subscriber's range)",
            ));
        }
        let fragments = parse_fragments(&Section::open(&root, "fragments", &empty)?)?;
        let timeouts = parse_timeouts(&Section::open(&root, "timeouts", &empty)?, &mut warnings)?;
        let limits = parse_limits(&Section::open(&root, "limits", &empty)?)?;
        let fib_cache = parse_fib_cache(&Section::open(&root, "fib_cache", &empty)?)?;
        let daemon = parse_daemon(&Section::open(&root, "daemon", &empty)?)?;
        let log = parse_log(&Section::open(&root, "log", &empty)?)?;
        let metrics = parse_metrics(&Section::open(&root, "metrics", &empty)?)?;

        Ok(Config {
            interfaces,
            pool,
            exclude,
            forwards,
            nat,
            fragments,
            timeouts,
            limits,
            fib_cache,
            daemon,
            log,
            metrics,
            warnings,
        })
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
        Self::from_toml_str(&text)
    }

    /// Port blocks available on each pool address. Ports left over when the
    /// range is not a multiple of the block size are never handed out.
    pub fn block_count_per_addr(&self) -> u32 {
        let ports = u32::from(self.pool.port_hi) - u32::from(self.pool.port_lo) + 1;
        ports / u32::from(self.nat.block_size)
    }
}

fn key_err(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Key { key: key.into(), message: message.into() }
}

fn unknown_key(path: String, name: &str, allowed: &[&str], what: &str) -> ConfigError {
    let message = match suggest(name, allowed) {
        Some(s) => format!("unknown {what}; did you mean `{s}`?"),
        None => format!("unknown {what}; expected one of: {}", allowed.join(", ")),
    };
    key_err(path, message)
}

/// Closest allowed name, if the given one looks like a typo of it.
fn suggest<'a>(name: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace(['_', '-'], "");
    allowed
        .iter()
        .map(|a| (if norm(a) == norm(name) { 0 } else { edit_distance(a, name) }, *a))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// How a value is shown in type errors: scalars with their value, so that
/// e.g. `"256"` (a string) versus 256 (an integer) is obvious.
fn describe(v: &Value) -> String {
    match v {
        Value::Table(_) => "a table".to_owned(),
        Value::Array(_) => "an array".to_owned(),
        _ => format!("{} {v}", v.type_str()),
    }
}

/// One top-level table, or one element of a top-level array of tables, with
/// its allowed keys already checked. `name` is the path keys are reported
/// under: `nat`, or `forward[2]` for an array element.
struct Section<'a> {
    name: String,
    table: &'a Table,
}

impl<'a> Section<'a> {
    /// A missing table behaves like an empty one, so that required keys are
    /// reported by their full path (`interfaces.inside`).
    fn open(root: &'a Table, name: &'static str, empty: &'a Table) -> Result<Self, ConfigError> {
        let table = match root.get(name) {
            None => empty,
            Some(Value::Table(t)) => t,
            Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_table) => {
                return Err(key_err(
                    name,
                    format!("expected a table, found an array of tables; write [{name}], not [[{name}]]"),
                ))
            }
            Some(v) => return Err(key_err(name, format!("expected a table, found {}", describe(v)))),
        };
        Self::checked(name.to_owned(), table, allowed_keys(name))
    }

    fn checked(name: String, table: &'a Table, allowed: &[&str]) -> Result<Self, ConfigError> {
        for k in table.keys() {
            if !allowed.contains(&k.as_str()) {
                return Err(unknown_key(format!("{name}.{k}"), k, allowed, "key"));
            }
        }
        Ok(Section { name, table })
    }

    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.name)
    }

    fn get(&self, k: &str) -> Option<&'a Value> {
        self.table.get(k)
    }

    fn require(&self, k: &str) -> Result<&'a Value, ConfigError> {
        self.get(k).ok_or_else(|| key_err(self.key(k), "required key is missing"))
    }

    fn required_str(&self, k: &str) -> Result<&'a str, ConfigError> {
        match self.require(k)? {
            Value::String(s) => Ok(s),
            v => Err(key_err(self.key(k), format!("expected a string, found {}", describe(v)))),
        }
    }

    fn bool(&self, k: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(k) {
            None => Ok(default),
            Some(Value::Boolean(b)) => Ok(*b),
            Some(v) => Err(key_err(
                self.key(k),
                format!("expected a boolean (true or false), found {}", describe(v)),
            )),
        }
    }

    fn int(&self, k: &str, default: i64, lo: i64, hi: i64) -> Result<i64, ConfigError> {
        match self.get(k) {
            None => Ok(default),
            Some(Value::Integer(n)) if (lo..=hi).contains(n) => Ok(*n),
            Some(Value::Integer(n)) => {
                Err(key_err(self.key(k), format!("must be between {lo} and {hi}, found {n}")))
            }
            Some(v) => Err(key_err(self.key(k), format!("expected an integer, found {}", describe(v)))),
        }
    }

    fn str(&self, k: &str) -> Result<Option<&'a str>, ConfigError> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(key_err(self.key(k), format!("expected a string, found {}", describe(v)))),
        }
    }

    fn choice<T: Copy>(&self, k: &str, default: T, choices: &[(&str, T)]) -> Result<T, ConfigError> {
        match self.str(k)? {
            None => Ok(default),
            Some(s) => self.pick(k, s, choices),
        }
    }

    fn required_choice<T: Copy>(&self, k: &str, choices: &[(&str, T)]) -> Result<T, ConfigError> {
        let s = self.required_str(k)?;
        self.pick(k, s, choices)
    }

    fn pick<T: Copy>(&self, k: &str, s: &str, choices: &[(&str, T)]) -> Result<T, ConfigError> {
        choices.iter().find(|(name, _)| *name == s).map(|(_, v)| *v).ok_or_else(|| {
            let names: Vec<String> = choices.iter().map(|(n, _)| format!("{n:?}")).collect();
            key_err(self.key(k), format!("expected one of {}, found {s:?}", names.join(", ")))
        })
    }

    /// Duration as a string (`"5m"`) or integer seconds; range checks are the
    /// caller's because what is sensible differs per key.
    fn duration(&self, k: &str) -> Result<Option<Duration>, ConfigError> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => parse_duration(s).map(Some).map_err(|m| key_err(self.key(k), m)),
            Some(Value::Integer(n)) => u64::try_from(*n)
                .map(|secs| Some(Duration::from_secs(secs)))
                .map_err(|_| key_err(self.key(k), format!("duration must not be negative, found {n}"))),
            Some(v) => Err(key_err(
                self.key(k),
                format!(
                    "expected a duration such as \"5m\" or an integer number of seconds, found {}",
                    describe(v)
                ),
            )),
        }
    }

    /// Duration within `lo..=hi` (inclusive), or `default` when absent.
    fn duration_in(
        &self,
        k: &str,
        default: Duration,
        lo: Duration,
        hi: Duration,
    ) -> Result<Duration, ConfigError> {
        match self.duration(k)? {
            None => Ok(default),
            Some(v) if (lo..=hi).contains(&v) => Ok(v),
            Some(v) => Err(key_err(
                self.key(k),
                format!(
                    "must be between {} and {}, found {}",
                    fmt_duration(lo),
                    fmt_duration(hi),
                    fmt_duration(v)
                ),
            )),
        }
    }

    /// Optional array of strings (absent or empty: none), each paired with its own key path.
    fn opt_str_array(&self, k: &str) -> Result<Vec<(String, &'a str)>, ConfigError> {
        match self.get(k) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) if a.is_empty() => Ok(Vec::new()),
            Some(_) => self.str_array(k),
        }
    }

    /// Required, non-empty array of strings, each paired with its own key path.
    fn str_array(&self, k: &str) -> Result<Vec<(String, &'a str)>, ConfigError> {
        let key = self.key(k);
        let arr = match self.require(k)? {
            Value::Array(a) => a,
            Value::String(s) => {
                return Err(key_err(
                    key,
                    format!("expected an array of strings such as [{s:?}], found a single string"),
                ))
            }
            v => return Err(key_err(key, format!("expected an array of strings, found {}", describe(v)))),
        };
        if arr.is_empty() {
            return Err(key_err(key, "must list at least one entry"));
        }
        arr.iter()
            .enumerate()
            .map(|(i, v)| {
                let elem = format!("{key}[{i}]");
                match v {
                    Value::String(s) => Ok((elem, s.as_str())),
                    v => Err(key_err(elem, format!("expected a string, found {}", describe(v)))),
                }
            })
            .collect()
    }
}

/// The elements of the top-level array of tables `name` (`[[exclude]]`), each
/// opened as a section named by its index (`exclude[0]`). Absent means none.
fn table_array<'a>(root: &'a Table, name: &'static str, max: usize) -> Result<Vec<Section<'a>>, ConfigError> {
    let arr = match root.get(name) {
        None => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(Value::Table(_)) => {
            return Err(key_err(
                name,
                format!("expected an array of tables, found a single table; write each entry as [[{name}]], not [{name}]"),
            ))
        }
        Some(v) => {
            return Err(key_err(
                name,
                format!("expected an array of tables, one [[{name}]] header per entry, found {}", describe(v)),
            ))
        }
    };
    if arr.len() > max {
        return Err(key_err(name, format!("at most {max} entries are supported, found {}", arr.len())));
    }
    arr.iter()
        .enumerate()
        .map(|(i, v)| {
            let elem = format!("{name}[{i}]");
            match v {
                Value::Table(t) => Section::checked(elem, t, allowed_keys(name)),
                v => Err(key_err(
                    elem,
                    format!("expected a table (one [[{name}]] header per entry), found {}", describe(v)),
                )),
            }
        })
        .collect()
}

/// Every key of every section: what the parser accepts (a key not listed is an error that
/// names it). The config fuzzer (tests/config_fuzz.rs) draws its keys from here.
pub const SECTION_KEYS: &[(&str, &[&str])] = &[
    ("interfaces", &["inside", "outside", "xdp_mode", "virtual_macs"]),
    ("pool", &["addresses", "ports"]),
    ("exclude", &["prefix"]),
    ("forward", &["proto", "outside", "inside"]),
    (
        "nat",
        &[
            "block_size",
            "max_blocks_per_subscriber",
            "port_parity",
            "hairpinning",
            "filtering",
            "max_new_mappings_per_sec",
            "port_class",
            "icmp_errors_per_sec",
            "mode",
            "deterministic_subscribers",
            "deterministic_ports",
            "deterministic_probe",
            "home_probe",
            "subscribers",
            "unreachable_code",
        ],
    ),
    ("fragments", &["timeout", "max_tracked", "max_held"]),
    ("timeouts", &["udp", "tcp_established", "tcp_transitory", "icmp", "port_hold_down"]),
    ("limits", &["max_subscribers", "max_mappings", "max_sessions", "max_sessions_per_subscriber"]),
    ("fib_cache", &["entries", "max_age"]),
    ("daemon", &["pin_path", "sweep_interval"]),
    (
        "log",
        &[
            "ipfix",
            "syslog",
            "sessions",
            "destinations",
            "interim",
            "strict",
            "observation_domain",
            "template_refresh",
            "buffer_events",
            "pool_threshold",
        ],
    ),
    ("metrics", &["listen"]),
];

fn allowed_keys(section: &str) -> &'static [&'static str] {
    SECTION_KEYS.iter().find(|(s, _)| *s == section).map_or(&[], |(_, k)| *k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{PROTO_TCP, PROTO_UDP};
    use std::net::{Ipv4Addr, SocketAddrV4};

    pub(super) const IFACES: &str = "[interfaces]\ninside = [\"lan0\"]\noutside = [\"wan0\"]\n";
    pub(super) const POOL: &str = "[pool]\naddresses = [\"203.0.113.1\"]\n";

    /// Minimal valid document plus `extra` (which must not repeat
    /// `[interfaces]` or `[pool]`).
    pub(super) fn with(extra: &str) -> String {
        format!("{IFACES}{POOL}{extra}")
    }

    pub(super) fn with_interfaces(body: &str) -> String {
        format!("[interfaces]\n{body}\n{POOL}")
    }

    pub(super) fn with_pool(body: &str) -> String {
        format!("{IFACES}[pool]\n{body}\n")
    }

    pub(super) fn ok(doc: &str) -> Config {
        Config::from_toml_str(doc).unwrap_or_else(|e| panic!("unexpected error: {e}\n--- config:\n{doc}"))
    }

    /// Asserts a `Key` error for `key` and returns its message.
    pub(super) fn key_error(doc: &str, key: &str) -> String {
        match Config::from_toml_str(doc) {
            Err(ConfigError::Key { key: k, message }) => {
                assert_eq!(k, key, "wrong key; message was: {message}\n--- config:\n{doc}");
                message
            }
            other => panic!("expected key error for `{key}`, got {other:?}\n--- config:\n{doc}"),
        }
    }

    /// For each `(value, fragment)` case, asserts a `Key` error for `key`
    /// on `doc(value)` whose message contains `fragment`.
    pub(super) fn assert_key_errors(key: &str, doc: impl Fn(&str) -> String, cases: &[(&str, &str)]) {
        for &(v, why) in cases {
            let m = key_error(&doc(v), key);
            assert!(m.contains(why), "{key} = {v:?}: {m:?} lacks {why:?}");
        }
    }

    pub(super) fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    pub(super) fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    pub(super) fn forward(proto: &str, outside: &str, inside: &str) -> String {
        format!("[[forward]]\nproto = \"{proto}\"\noutside = \"{outside}\"\ninside = \"{inside}\"\n")
    }

    pub(super) fn sa(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    // ---- defaults and the documented example ----

    #[test]
    fn minimal_config_uses_defaults() {
        let c = ok(&with(""));
        assert_eq!(c.interfaces.inside, ["lan0"]);
        assert_eq!(c.interfaces.outside, ["wan0"]);
        assert_eq!(c.interfaces.xdp_mode, XdpMode::Native);
        assert_eq!(c.pool.addresses, [Ipv4Addr::new(203, 0, 113, 1)]);
        assert_eq!((c.pool.port_lo, c.pool.port_hi), (1024, 65535));
        assert_eq!(
            c.nat,
            Nat {
                block_size: 256,
                max_blocks_per_subscriber: 4,
                port_parity: true,
                hairpinning: true,
                filtering: Filtering::EndpointIndependent,
                max_new_mappings_per_sec: 0,
                port_class: true,
                icmp_errors_per_sec: 100,
                deterministic: None,
                home_probe: 64,
                subscribers: DEFAULT_SUBSCRIBERS.iter().map(|p| p.parse().unwrap()).collect(),
                unreachable_code: UnreachableCode::HostUnreachable,
            }
        );
        assert_eq!(
            c.timeouts,
            Timeouts {
                udp: secs(300),
                tcp_established: secs(7440),
                tcp_transitory: secs(240),
                icmp: secs(60),
                port_hold_down: secs(120),
            }
        );
        assert_eq!(
            c.limits,
            Limits {
                max_subscribers: 65536,
                max_mappings: 1_048_576,
                max_sessions: 1_048_576,
                max_sessions_per_subscriber: 4096
            }
        );
        assert_eq!(c.daemon, Daemon { pin_path: "/sys/fs/bpf/natrix".into(), sweep_interval: secs(1) });
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(c.block_count_per_addr(), 252);
    }

    #[test]
    fn empty_tables_use_defaults() {
        let c = ok(&with("[nat]\n[timeouts]\n[limits]\n[daemon]\n"));
        assert_eq!(c, ok(&with("")));
    }

    const EXAMPLE: &str = r#"
[interfaces]
inside = ["lan0"]                 # one or more, required
outside = ["wan0"]                # one or more, required
xdp_mode = "native"               # or "generic"
[pool]
addresses = ["203.0.113.16/29", "203.0.113.40"]   # required; addresses and prefixes, possibly non-contiguous
ports = "1024-65535"              # default; "lo-hi" inclusive
[nat]
block_size = 256                  # default 256
max_blocks_per_subscriber = 4     # default 4
port_parity = true                # default true
hairpinning = true                # default true
filtering = "endpoint-independent"   # | "address-dependent" | "address-and-port-dependent"
max_new_mappings_per_sec = 0      # default 0 = unlimited
[timeouts]
udp = "5m"                        # RFC 4787 REQ-5 minimum 2m
tcp_established = "2h4m"          # RFC 5382 REQ-5 minimum 2h4m
tcp_transitory = "4m"             # RFC 5382 minimum 4m
icmp = "60s"                      # RFC 5508 REQ-2 minimum 60s
port_hold_down = "120s"           # RFC 6888 REQ-8 minimum 120s
[limits]
max_subscribers = 65536           # defaults; each 1 ..= 100_000_000
max_mappings = 1048576
max_sessions = 1048576
[daemon]
pin_path = "/sys/fs/bpf/natrix"   # default; must be absolute
sweep_interval = "1s"             # default; 100ms ..= 60s
"#;

    #[test]
    fn documented_example_parses_exactly() {
        let c = ok(EXAMPLE);
        let mut addrs: Vec<Ipv4Addr> = (16..=23).map(|h| Ipv4Addr::new(203, 0, 113, h)).collect();
        addrs.push(Ipv4Addr::new(203, 0, 113, 40));
        let expected = Config {
            interfaces: Interfaces {
                inside: vec!["lan0".into()],
                outside: vec!["wan0".into()],
                xdp_mode: XdpMode::Native,
                virtual_macs: vec![],
            },
            pool: Pool { addresses: addrs, port_lo: 1024, port_hi: 65535 },
            exclude: vec![],
            forwards: vec![],
            nat: Nat::default(),
            fragments: Fragments::default(),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            fib_cache: FibCache::default(),
            daemon: Daemon::default(),
            log: Log::default(),
            metrics: Metrics::default(),
            warnings: vec![],
        };
        assert_eq!(c, expected);
        // Every value in the example is the default.
        assert_eq!(c, Config { pool: c.pool.clone(), ..ok(&with("")) });
    }

    #[test]
    fn non_default_values_are_applied() {
        let c = ok(r#"
[interfaces]
inside = ["lan0", "lan1"]
outside = ["wan0"]
xdp_mode = "generic"
[pool]
addresses = ["198.51.100.0/31"]
ports = "2000-2999"
[nat]
block_size = 100
max_blocks_per_subscriber = 32
port_parity = false
hairpinning = false
filtering = "address-and-port-dependent"
max_new_mappings_per_sec = 1000
[timeouts]
udp = 600
tcp_established = "1d"
tcp_transitory = "5m"
icmp = "90s"
port_hold_down = "3m"
[limits]
max_subscribers = 1
max_mappings = 100000000
max_sessions = 2
[daemon]
pin_path = "/run/natrix"
sweep_interval = "250ms"
"#);
        assert_eq!(c.interfaces.inside, ["lan0", "lan1"]);
        assert_eq!(c.interfaces.xdp_mode, XdpMode::Generic);
        assert_eq!(c.pool.addresses, [Ipv4Addr::new(198, 51, 100, 0), Ipv4Addr::new(198, 51, 100, 1)]);
        assert_eq!((c.pool.port_lo, c.pool.port_hi), (2000, 2999));
        assert_eq!(
            c.nat,
            Nat {
                block_size: 100,
                max_blocks_per_subscriber: 32,
                port_parity: false,
                hairpinning: false,
                filtering: Filtering::AddressAndPortDependent,
                max_new_mappings_per_sec: 1000,
                port_class: true,
                icmp_errors_per_sec: 100,
                deterministic: None,
                home_probe: 64,
                subscribers: DEFAULT_SUBSCRIBERS.iter().map(|p| p.parse().unwrap()).collect(),
                unreachable_code: UnreachableCode::HostUnreachable,
            }
        );
        assert_eq!(c.timeouts.udp, secs(600));
        assert_eq!(c.timeouts.tcp_established, secs(86400));
        assert_eq!(c.timeouts.icmp, secs(90));
        assert_eq!(c.timeouts.port_hold_down, secs(180));
        assert_eq!(
            c.limits,
            Limits {
                max_subscribers: 1,
                max_mappings: 100_000_000,
                max_sessions: 2,
                max_sessions_per_subscriber: 4096
            }
        );
        assert_eq!(c.daemon.pin_path, PathBuf::from("/run/natrix"));
        assert_eq!(c.daemon.sweep_interval, Duration::from_millis(250));
        assert_eq!(c.block_count_per_addr(), 10);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn block_count_ignores_leftover_ports() {
        let c =
            ok(&with_pool(
            "addresses = [\"203.0.113.1\"]\nports = \"1000-1999\"\n[nat]\nblock_size = 300\nport_class = false",
        ));
        assert_eq!(c.block_count_per_addr(), 3);
    }

    // ---- errors: document level ----

    #[test]
    fn syntax_error_has_position() {
        match Config::from_toml_str("[interfaces\ninside = 1") {
            Err(e @ ConfigError::Syntax { .. }) => {
                let s = e.to_string();
                assert!(s.contains("line 1"), "{s}");
                assert!(s.contains("column"), "{s}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Config::from_toml_str(&with("[nat]\nblock_size = ")),
            Err(ConfigError::Syntax { .. })
        ));
    }

    #[test]
    fn key_error_display() {
        let e =
            Config::from_toml_str(&with_pool("addresses = [\"203.0.113.1\"]\nports = \"x\"")).unwrap_err();
        assert!(e.to_string().starts_with("config key `pool.ports`: "), "{e}");
    }

    #[test]
    fn unknown_top_level_table() {
        let m = key_error(&with("[timeout]\nudp = \"5m\"\n"), "timeout");
        assert!(m.contains("unknown table") && m.contains("`timeouts`"), "{m}");
        let m = key_error(&with("[bogus]\n"), "bogus");
        assert!(m.contains("expected one of: interfaces, pool"), "{m}");
    }

    #[test]
    fn unknown_top_level_key() {
        let m = key_error(&format!("verbose = true\n{}", with("")), "verbose");
        assert!(m.contains("unknown key"), "{m}");
    }

    #[test]
    fn unknown_key_in_every_section() {
        let m = key_error(&with("[nat]\nblocksize = 256\n"), "nat.blocksize");
        assert!(m.contains("did you mean `block_size`"), "{m}");
        let m = key_error(&with("[nat]\nmax-blocks-per-subscriber = 4\n"), "nat.max-blocks-per-subscriber");
        assert!(m.contains("did you mean `max_blocks_per_subscriber`"), "{m}");
        key_error(
            &with_interfaces("inside = [\"a\"]\noutside = [\"b\"]\nmode = \"native\""),
            "interfaces.mode",
        );
        key_error(&with_pool("addresses = [\"203.0.113.1\"]\nport = \"1-2\""), "pool.port");
        let m = key_error(&with("[timeouts]\ntcp = \"1h\"\n"), "timeouts.tcp");
        assert!(m.contains("udp"), "{m}");
        key_error(&with("[limits]\nmax_subscriber = 1\n"), "limits.max_subscriber");
        key_error(&with("[daemon]\npinpath = \"/x\"\n"), "daemon.pinpath");
        // A nested table is just another unknown key.
        key_error(&with("[nat.extra]\nx = 1\n"), "nat.extra");
    }

    #[test]
    fn section_must_be_a_table() {
        for s in SECTIONS {
            // Top-level keys must precede the first table header.
            let doc = match *s {
                "interfaces" => format!("{s} = 5\n{POOL}"),
                "pool" => format!("{s} = 5\n{IFACES}"),
                _ => format!("{s} = 5\n{}", with("")),
            };
            let m = key_error(&doc, s);
            assert!(m.contains("expected a table"), "{m}");
        }
    }

    // ---- new top-level names ----

    #[test]
    fn new_top_level_names_are_suggested() {
        let m = key_error(&with("[fragment]\ntimeout = \"2s\"\n"), "fragment");
        assert!(m.contains("unknown table; did you mean `fragments`?"), "{m}");
        let m = key_error(&with("[[excludes]]\nprefix = \"192.0.2.0/24\"\n"), "excludes");
        assert!(m.contains("unknown array of tables; did you mean `exclude`?"), "{m}");
        let m = key_error(&with("[[forwards]]\nproto = \"tcp\"\n"), "forwards");
        assert!(m.contains("did you mean `forward`?"), "{m}");
        let m = key_error(&with("[bogus]\n"), "bogus");
        assert!(m.contains("fragments") && m.contains("exclude") && m.contains("forward"), "{m}");
        // A table written with double brackets.
        let m = key_error(&with("[[fragments]]\ntimeout = \"2s\"\n"), "fragments");
        assert!(
            m.contains("expected a table, found an array of tables; write [fragments], not [[fragments]]"),
            "{m}"
        );
    }

    const FULL_EXAMPLE: &str = r#"
[interfaces]
inside = ["lan0"]
outside = ["wan0"]
[pool]
addresses = ["203.0.113.16/29", "203.0.113.40"]
ports = "1024-65535"

[[exclude]]                       # forwarded untranslated (RFC 6888 REQ-6)
prefix = "192.0.2.128/25"         # address or prefix; must not contain a pool address
[[exclude]]
prefix = "198.51.100.53"

[[forward]]                       # static inbound port forward
proto = "tcp"                     # or "udp"
outside = "203.0.113.40:8080"     # a pool address; the port may be outside pool.ports
inside = "100.64.0.3:80"
[[forward]]
proto = "udp"
outside = "203.0.113.16:53"
inside = "100.64.0.7:53"

[nat]
port_class = true                 # default; RFC 4787 REQ-3, needs pool.ports to start at 1024+
icmp_errors_per_sec = 100         # default; 0 disables generated ICMP errors
[fragments]
timeout = "2s"                    # default; 100ms ..= 60s
max_tracked = 16384               # default; 16 ..= 10_000_000
max_held = 256                    # default; 0 ..= 65536
[fib_cache]
entries = 4096                    # default; slots per CPU, 0 (no cache) or a power of two 64 ..= 1048576
max_age = "50ms"                  # default; 1ms ..= 10s
"#;

    #[test]
    fn full_example_parses_exactly() {
        let c = ok(FULL_EXAMPLE);
        assert_eq!(c.exclude, [net("192.0.2.128/25"), net("198.51.100.53/32")]);
        assert_eq!(
            c.forwards,
            [
                Forward { proto: PROTO_TCP, outside: sa("203.0.113.40:8080"), inside: sa("100.64.0.3:80") },
                Forward { proto: PROTO_UDP, outside: sa("203.0.113.16:53"), inside: sa("100.64.0.7:53") },
            ]
        );
        assert_eq!(c.nat, Nat::default());
        assert!(c.nat.port_class);
        assert_eq!(c.nat.icmp_errors_per_sec, 100);
        assert_eq!(c.fragments, Fragments::default());
        assert_eq!(c.fib_cache, FibCache::default());
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        // Everything else is exactly the documented example.
        assert_eq!(c, Config { exclude: c.exclude.clone(), forwards: c.forwards.clone(), ..ok(EXAMPLE) });
    }

    #[test]
    fn exclude_and_forward_errors_come_after_pool_errors() {
        // Both refer to pool addresses, so a broken pool is reported first.
        let doc = format!(
            "{IFACES}[pool]\naddresses = [\"203.0.113.1/33\"]\n{}[[exclude]]\nprefix = \"x\"\n",
            forward("tcp", "x", "y")
        );
        key_error(&doc, "pool.addresses[0]");
        let doc = with(&format!(
            "{}[[exclude]]\nprefix = \"x\"\n[nat]\nblock_size = 3\n",
            forward("tcp", "x", "y")
        ));
        key_error(&doc, "exclude[0].prefix");
    }

    // ---- load ----

    #[test]
    fn load_reads_file_and_reports_io_errors() {
        let dir = std::env::temp_dir().join(format!("natrix-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("natrix.toml");
        std::fs::write(&path, EXAMPLE).unwrap();
        let loaded = Config::load(&path);
        let missing = Config::load(&dir.join("missing.toml"));
        std::fs::remove_dir_all(&dir).unwrap();

        assert_eq!(loaded.unwrap(), ok(EXAMPLE));
        match missing {
            Err(e @ ConfigError::Io { .. }) => assert!(e.to_string().contains("missing.toml"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn first_error_wins_and_nothing_is_partial() {
        // Errors in several sections: the earliest section is reported, and
        // the result carries no partially built config by construction.
        let doc = with("[nat]\nblock_size = 3\n[timeouts]\nudp = 0\n");
        key_error(&doc, "nat.block_size");
    }
}
