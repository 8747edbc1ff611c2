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

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::Ipv4Net;
use toml::{Table, Value};

/// Linux IFNAMSIZ is 16 including the terminating NUL.
const MAX_IFNAME_LEN: usize = 15;
/// Two full lists exactly fill the data plane's interface table
/// (NX_MAX_IFACES = 64 in bpf/nx_types.h).
const MAX_INTERFACES: usize = 32;
/// The outside-port table is direct-indexed: 3 protocols x 65536 ports x 8 bytes
/// = 1.5 MiB of kernel memory per pool address, allocated up front (see
/// docs/ARCHITECTURE.md). 4096 addresses (6 GiB) is the most one gateway is
/// sized for; prefixes shorter than /20 could never fit, so they are rejected by
/// length before any counting.
const MAX_POOL_ADDRESSES: u64 = 1 << 12;
const MIN_POOL_PREFIX_LEN: u8 = 20;
/// A longer idle timeout is almost certainly a unit mistake, and would keep
/// mappings, and the ports they hold, allocated effectively forever.
const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 86_400);
/// Upper bound for the `limits.*` keys; each sizes a BPF map, and beyond this
/// the kernel memory cost stops being plausible for a single gateway.
const MAX_LIMIT: i64 = 100_000_000;
/// Sweeping more often than this burns CPU walking the maps for nothing;
/// less often than this makes expiry visibly late relative to the timeouts.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(100);
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// Each `[[exclude]]` prefix is an entry in a data-plane LPM trie that is
/// looked up for every outbound packet; `[[forward]]` entries are static
/// mappings preinstalled in the mapping tables.
const MAX_EXCLUDES: usize = 1024;
const MAX_FORWARDS: usize = 4096;
/// Ports 1-1023 stay in their own class when `nat.port_class` is on (RFC 4787
/// REQ-3), so the dynamic range must begin at or above this.
const FIRST_NON_PRIVILEGED_PORT: u16 = 1024;
const MAX_ICMP_ERRORS_PER_SEC: i64 = 100_000;
/// RFC 4787 REQ-14: fragment state is a bounded resource. Shorter than this
/// and fragments of one datagram that merely arrive spread out are dropped;
/// longer and a burst of lone first fragments pins the table.
const MIN_FRAGMENT_TIMEOUT: Duration = Duration::from_millis(100);
const MAX_FRAGMENT_TIMEOUT: Duration = Duration::from_secs(60);
/// The FIB cache (`[fib_cache]`): slots per CPU, a power of two in this range (or 0, no
/// cache). Below the minimum it would thrash on a handful of destinations; above the
/// maximum (64 MiB a CPU) its own lines stop fitting any cache.
const MIN_FIB_CACHE_ENTRIES: i64 = 64;
const MAX_FIB_CACHE_ENTRIES: i64 = 1 << 20;
/// How long a cached FIB answer may be reused without the daemon saying the routing is
/// unchanged; longer would let a route change go unnoticed for that long while no
/// daemon runs.
const MIN_FIB_CACHE_AGE: Duration = Duration::from_millis(1);
const MAX_FIB_CACHE_AGE: Duration = Duration::from_secs(10);
const MIN_FRAGMENTS_TRACKED: i64 = 16;
const MAX_FRAGMENTS_TRACKED: i64 = 10_000_000;
const MAX_FRAGMENTS_HELD: i64 = 65_536;

// IP protocol numbers as carried in [`Forward::proto`].
use crate::abi::{PROTO_TCP, PROTO_UDP};

/// Top-level tables, in the order they are validated.
const SECTIONS: &[&str] =
    &["interfaces", "pool", "nat", "fragments", "timeouts", "limits", "fib_cache", "daemon"];
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
    /// Accepted but questionable settings (e.g. timeouts below an RFC
    /// minimum). Returned rather than logged so that parsing stays pure.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Interfaces {
    pub inside: Vec<String>,
    pub outside: Vec<String>,
    pub xdp_mode: XdpMode,
    /// Unicast MACs besides each interface's own that frames for natrix may be addressed
    /// to (a VRRP virtual MAC): `interfaces.virtual_macs`. A unicast frame for any other
    /// MAC is left to the kernel, untouched.
    pub virtual_macs: Vec<[u8; 6]>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpMode {
    #[default]
    Native,
    Generic,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// Every usable public address, in configured order, prefixes expanded in
    /// ascending order. Network and broadcast addresses of a prefix are
    /// included because the pool is routed to the gateway, not on-link.
    pub addresses: Vec<Ipv4Addr>,
    pub port_lo: u16,
    pub port_hi: u16,
}

/// A static port forward: `outside` on a pool address is permanently mapped to
/// `inside`, in both directions, as an endpoint-independent mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    /// IP protocol number: 6 (TCP) or 17 (UDP).
    pub proto: u8,
    /// Always one of `pool.addresses`. The port may lie inside or outside
    /// `pool.ports`; dynamic allocation never hands out a forwarded port.
    pub outside: SocketAddrV4,
    pub inside: SocketAddrV4,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Nat {
    pub block_size: u16,
    pub max_blocks_per_subscriber: u16,
    pub port_parity: bool,
    pub hairpinning: bool,
    pub filtering: Filtering,
    /// 0 means unlimited.
    pub max_new_mappings_per_sec: u32,
    /// RFC 4787 REQ-3: inside source ports 1-1023 are mapped to outside ports
    /// 1-1023, and no others are. `pool.ports` then starts at 1024 or above.
    pub port_class: bool,
    /// Rate limit for the ICMP errors natrix generates itself ("fragmentation
    /// needed", "administratively prohibited"); 0 disables them.
    pub icmp_errors_per_sec: u32,
    /// `nat.mode = "deterministic"` (RFC 7422): each subscriber's pool address
    /// and port range follow from its address. `None`: dynamic port blocks.
    pub deterministic: Option<Deterministic>,
    /// Dynamic mode: pairs of each parity a walk of a subscriber's home block goes at
    /// most, looking for an endpoint's mapping or a port for a new one (bpf/nx_home.h);
    /// capped at half the block. Beyond it a new mapping goes to another block. 0: no
    /// home walk, every mapping in the mapping table.
    pub home_probe: u16,
    /// Dynamic mode: the prefixes whose sources are translated (`nat.subscribers`); a
    /// packet from any other source makes no state and is dropped (`not_subscriber`).
    pub subscribers: Vec<Ipv4Net>,
    /// The ICMP destination unreachable code sent when no mapping can be made
    /// (`nat.unreachable_code`).
    pub unreachable_code: UnreachableCode,
}

/// RFC 6888 REQ-8 asks a CGN for host unreachable (code 1) when it cannot make a mapping;
/// RFC 5508 REQ-8 for administratively prohibited (code 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnreachableCode {
    #[default]
    HostUnreachable,
    AdminProhibited,
}

impl UnreachableCode {
    /// The ICMP code (type 3).
    pub fn code(self) -> u8 {
        match self {
            UnreachableCode::HostUnreachable => 1,
            UnreachableCode::AdminProhibited => 13,
        }
    }
}

/// Default of `nat.subscribers`: shared address space (RFC 6598) and private space
/// (RFC 1918), where an ISP numbers the subscribers behind a CGN.
pub const DEFAULT_SUBSCRIBERS: [&str; 4] = ["100.64.0.0/10", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];

/// Deterministic NAT (RFC 7422, bpf/nx_det.h): subscriber `i` of `subscribers`
/// (the i-th address of the prefix) owns `ports` outside ports starting at
/// `pool.ports`' first + (i % `per_addr`) * `ports` on pool address i / `per_addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deterministic {
    pub subscribers: Ipv4Net,
    /// Outside ports per subscriber and protocol; even.
    pub ports: u16,
    /// Subscribers sharing one pool address.
    pub per_addr: u32,
    /// Pairs a lookup or a new mapping's search walks at most (nx_det.h).
    pub probe: u16,
}

impl Deterministic {
    pub fn count(&self) -> u32 {
        1u32.checked_shl(32 - u32::from(self.subscribers.prefix_len())).unwrap_or(0).max(1)
    }
}

impl Default for Nat {
    fn default() -> Self {
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
            home_probe: DEFAULT_HOME_PROBE as u16,
            subscribers: DEFAULT_SUBSCRIBERS.iter().map(|p| p.parse().expect("default prefix")).collect(),
            unreachable_code: UnreachableCode::default(),
        }
    }
}

/// RFC 4787 section 5 filtering behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Filtering {
    /// RFC 4787 REQ-8 recommends this when application transparency matters.
    #[default]
    EndpointIndependent,
    AddressDependent,
    AddressAndPortDependent,
}

/// Bounds on fragment tracking (RFC 4787 REQ-14). Only the first fragment
/// carries the ports, so later ones are translated by remembering it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fragments {
    /// How long a datagram's fragment state lives after its last fragment.
    pub timeout: Duration,
    /// Datagrams whose first fragment was seen, tracked at once.
    pub max_tracked: u32,
    /// Out-of-order fragments held while waiting for their first fragment.
    pub max_held: u32,
}

impl Default for Fragments {
    fn default() -> Self {
        Fragments { timeout: Duration::from_secs(2), max_tracked: 16_384, max_held: 256 }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timeouts {
    pub udp: Duration,
    pub tcp_established: Duration,
    pub tcp_transitory: Duration,
    pub icmp: Duration,
    pub port_hold_down: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            udp: Duration::from_secs(5 * 60),
            tcp_established: Duration::from_secs(2 * 3600 + 4 * 60),
            tcp_transitory: Duration::from_secs(4 * 60),
            icmp: Duration::from_secs(60),
            port_hold_down: Duration::from_secs(120),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub max_subscribers: u32,
    pub max_mappings: u32,
    pub max_sessions: u32,
    /// Sessions (all protocols, inbound- and outbound-created) one subscriber may hold at
    /// once (RFC 6888 REQ-3/4); 0 = no limit. See [`DEFAULT_SESSIONS_PER_SUBSCRIBER`].
    pub max_sessions_per_subscriber: u32,
}

/// Default of `limits.max_sessions_per_subscriber`. A household's concurrent connections
/// are counted in tens to a few hundred, a few thousand for heavy peer-to-peer use; 4096
/// leaves that room while it takes 256 subscribers at their limit to fill the default
/// session table (1M), and an attacker flooding one subscriber's mapping with new remote
/// endpoints fills only that subscriber's share.
pub const DEFAULT_SESSIONS_PER_SUBSCRIBER: u32 = 4096;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_subscribers: 65_536,
            max_mappings: 1_048_576,
            max_sessions: 1_048_576,
            max_sessions_per_subscriber: DEFAULT_SESSIONS_PER_SUBSCRIBER,
        }
    }
}

/// The data plane's cache of the kernel's FIB answers (bpf/nx_fwd.h): per CPU, reused
/// until netlink reports a routing change or `max_age` passes.
#[derive(Debug, Clone, PartialEq)]
pub struct FibCache {
    /// Slots per CPU (0: no cache, every packet asks the kernel).
    pub entries: u32,
    /// The longest an answer is reused; the bound on a stale route while no daemon runs.
    pub max_age: Duration,
}

impl Default for FibCache {
    fn default() -> Self {
        FibCache { entries: 4096, max_age: Duration::from_millis(50) }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Daemon {
    pub pin_path: PathBuf,
    pub sweep_interval: Duration,
}

impl Default for Daemon {
    fn default() -> Self {
        Daemon { pin_path: PathBuf::from("/sys/fs/bpf/natrix"), sweep_interval: Duration::from_secs(1) }
    }
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

/// Units accepted by [`parse_duration`], largest first, in milliseconds.
const DURATION_UNITS: [(&str, u64); 5] =
    [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Parses a duration such as `"5m"`, `"2h4m"`, `"1h30m15s"`, `"500ms"` or
/// `"1d"`; a bare integer means seconds.
///
/// Each unit may appear at most once and units must be in descending order:
/// `"5m5m"` or `"30s1m"` are far more likely typos than intent. Zero is
/// accepted here because whether it makes sense depends on the key.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let too_large = || format!("duration {s:?} is too large");
    if s.is_empty() {
        return Err("duration must not be empty".to_owned());
    }
    if s.starts_with('-') {
        return Err(format!("duration {s:?} must not be negative"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = s.parse().map_err(|_| too_large())?;
        let ms = secs.checked_mul(1_000).ok_or_else(too_large)?;
        return Ok(Duration::from_millis(ms));
    }

    let mut rest = s;
    let mut total: u64 = 0;
    let mut prev_unit: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("invalid duration {s:?}: expected a number at {rest:?}"));
        }
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, tail) = tail.split_at(unit_len);
        if unit.is_empty() {
            return Err(match tail.chars().next() {
                None => {
                    format!("invalid duration {s:?}: missing unit after {number:?} (use d, h, m, s or ms)")
                }
                Some(c) => format!("invalid duration {s:?}: unexpected character {c:?}"),
            });
        }
        let idx = DURATION_UNITS
            .iter()
            .position(|(u, _)| *u == unit)
            .ok_or_else(|| format!("invalid duration {s:?}: unknown unit {unit:?} (use d, h, m, s or ms)"))?;
        if prev_unit.is_some_and(|p| idx <= p) {
            return Err(format!(
                "invalid duration {s:?}: each unit may appear once, largest first (e.g. \"1h30m\")"
            ));
        }
        prev_unit = Some(idx);
        let n: u64 = number.parse().map_err(|_| too_large())?;
        total = n
            .checked_mul(DURATION_UNITS[idx].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(too_large)?;
        rest = tail;
    }
    Ok(Duration::from_millis(total))
}

/// Inverse of [`parse_duration`], so that messages echo values in the same
/// notation the operator writes.
fn fmt_duration(d: Duration) -> String {
    let mut ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in DURATION_UNITS {
        let size = u128::from(size);
        if ms >= size {
            let _ = write!(out, "{}{unit}", ms / size);
            ms %= size;
        }
    }
    out
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

fn allowed_keys(section: &str) -> &'static [&'static str] {
    match section {
        "interfaces" => &["inside", "outside", "xdp_mode", "virtual_macs"],
        "pool" => &["addresses", "ports"],
        "exclude" => &["prefix"],
        "forward" => &["proto", "outside", "inside"],
        "nat" => &[
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
        "fragments" => &["timeout", "max_tracked", "max_held"],
        "timeouts" => &["udp", "tcp_established", "tcp_transitory", "icmp", "port_hold_down"],
        "limits" => &["max_subscribers", "max_mappings", "max_sessions", "max_sessions_per_subscriber"],
        "fib_cache" => &["entries", "max_age"],
        "daemon" => &["pin_path", "sweep_interval"],
        _ => &[],
    }
}

fn parse_interfaces(sec: &Section) -> Result<Interfaces, ConfigError> {
    let inside = interface_list(sec, "inside", &[])?;
    let outside = interface_list(sec, "outside", &inside)?;
    let xdp_mode = sec.choice(
        "xdp_mode",
        XdpMode::default(),
        &[("native", XdpMode::Native), ("generic", XdpMode::Generic)],
    )?;
    let mut virtual_macs: Vec<[u8; 6]> = Vec::new();
    // absent or [] (none, as documented); otherwise every entry a unicast MAC
    let empty = matches!(sec.get("virtual_macs"), Some(Value::Array(a)) if a.is_empty());
    if sec.get("virtual_macs").is_some() && !empty {
        let entries = sec.str_array("virtual_macs")?;
        if entries.len() > MAX_VIRTUAL_MACS {
            return Err(key_err(
                sec.key("virtual_macs"),
                format!("at most {MAX_VIRTUAL_MACS} virtual MACs are supported, found {}", entries.len()),
            ));
        }
        for (key, text) in entries {
            let mac = parse_mac(text).map_err(|m| key_err(&key, m))?;
            if virtual_macs.contains(&mac) {
                return Err(key_err(key, format!("{text:?} is listed twice")));
            }
            virtual_macs.push(mac);
        }
    }
    Ok(Interfaces { inside, outside, xdp_mode, virtual_macs })
}

/// An interface's own MAC takes one of the data plane's NX_IF_MACS (4) slots per
/// interface; the rest are for virtual MACs.
const MAX_VIRTUAL_MACS: usize = 3;

/// `"00:00:5e:00:01:01"`: a unicast MAC (a multicast or all-zero one would never be the
/// destination natrix checks).
fn parse_mac(text: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = text.split(':').collect();
    let bad = || format!("{text:?} is not a MAC address such as \"00:00:5e:00:01:01\"");
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(&parts) {
        if p.len() != 2 {
            return Err(bad());
        }
        *m = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if mac[0] & 1 != 0 || mac == [0; 6] {
        return Err(format!("{text:?} is a multicast or all-zero MAC; a virtual MAC is unicast"));
    }
    Ok(mac)
}

/// `other` is the list parsed before this one: an interface on both sides
/// would make the NAT direction of its traffic ambiguous.
fn interface_list(sec: &Section, k: &str, other: &[String]) -> Result<Vec<String>, ConfigError> {
    let entries = sec.str_array(k)?;
    if entries.len() > MAX_INTERFACES {
        return Err(key_err(
            sec.key(k),
            format!("at most {MAX_INTERFACES} interfaces are supported, found {}", entries.len()),
        ));
    }
    let mut names: Vec<String> = Vec::with_capacity(entries.len());
    for (key, name) in entries {
        check_ifname(name).map_err(|m| key_err(&key, m))?;
        if let Some(i) = names.iter().position(|n| n == name) {
            return Err(key_err(key, format!("{name:?} is already listed as {}[{i}]", sec.key(k))));
        }
        if let Some(i) = other.iter().position(|n| n == name) {
            return Err(key_err(
                key,
                format!("{name:?} is also listed as interfaces.inside[{i}]; an interface cannot be both inside and outside"),
            ));
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

/// Mirrors the kernel's dev_valid_name(), so that a name the kernel would
/// refuse fails here with a clear message instead of as an ifindex lookup
/// error at attach time.
fn check_ifname(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("interface name must not be empty".to_owned());
    }
    if name.len() > MAX_IFNAME_LEN {
        return Err(format!(
            "interface name {name:?} is {} bytes long; Linux allows at most {MAX_IFNAME_LEN}",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is not a valid interface name"));
    }
    // ':' is the kernel's alias separator and NUL would silently truncate the
    // name, so both are rejected alongside '/' and whitespace.
    if let Some(c) = name.chars().find(|&c| c == '/' || c == ':' || c == '\0' || c.is_whitespace()) {
        return Err(format!("interface name {name:?} contains {c:?}, which Linux does not allow"));
    }
    Ok(())
}

struct PoolEntry<'a> {
    key: String,
    text: &'a str,
    first: u32,
    last: u32,
}

/// Ranges that can never be a NAT source address. 255.255.255.255 is listed
/// before 240.0.0.0/4 so that it gets the more specific explanation.
const RESERVED_RANGES: &[(u32, u32, &str)] = &[
    (0x0000_0000, 0x00ff_ffff, "0.0.0.0/8 (\"this network\")"),
    (0x7f00_0000, 0x7fff_ffff, "127.0.0.0/8 (loopback)"),
    (0xe000_0000, 0xefff_ffff, "224.0.0.0/4 (multicast)"),
    (0xffff_ffff, 0xffff_ffff, "255.255.255.255 (limited broadcast)"),
    (0xf000_0000, 0xffff_ffff, "240.0.0.0/4 (reserved)"),
];

/// Besides the pool, returns its entries as written, so that later sections
/// can name the entry an address came from.
fn parse_pool<'a>(sec: &Section<'a>) -> Result<(Pool, Vec<PoolEntry<'a>>), ConfigError> {
    let mut entries = Vec::new();
    for (key, text) in sec.str_array("addresses")? {
        let (first, last) = parse_pool_entry(text).map_err(|m| key_err(&key, m))?;
        entries.push(PoolEntry { key, text, first, last });
    }
    check_pool_overlap(&entries)?;

    let total: u64 = entries.iter().map(|e| u64::from(e.last - e.first) + 1).sum();
    if total > MAX_POOL_ADDRESSES {
        return Err(key_err(
            sec.key("addresses"),
            format!("the pool has {total} addresses; at most {MAX_POOL_ADDRESSES} are supported"),
        ));
    }
    let addresses = entries.iter().flat_map(|e| (e.first..=e.last).map(Ipv4Addr::from)).collect();

    let (port_lo, port_hi) = match sec.str("ports")? {
        None => (1024, 65535),
        Some(s) => parse_port_range(s).map_err(|m| key_err(sec.key("ports"), m))?,
    };
    Ok((Pool { addresses, port_lo, port_hi }, entries))
}

/// Returns the inclusive address range of `"a.b.c.d"` or `"a.b.c.d/len"`.
fn parse_pool_entry(text: &str) -> Result<(u32, u32), String> {
    let (addr, len) = parse_prefix(text, MIN_POOL_PREFIX_LEN)?;
    let first = u32::from(addr);
    let last = first | u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
    if let Some((_, _, what)) = RESERVED_RANGES.iter().find(|(lo, hi, _)| first <= *hi && *lo <= last) {
        return Err(format!("{text:?} lies in {what}, which cannot be used as a NAT pool address"));
    }
    Ok((first, last))
}

/// Parses `"a.b.c.d"` (a /32) or `"a.b.c.d/len"` with `min_len <= len <= 32`
/// into its network address and length; host bits must be clear.
fn parse_prefix(text: &str, min_len: u8) -> Result<(Ipv4Addr, u8), String> {
    let (addr_text, len) = match text.split_once('/') {
        None => (text, 32),
        Some((a, l)) => {
            // u8::from_str would also accept "+24".
            if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{text:?}: prefix length {l:?} is not a number"));
            }
            let len = l.parse::<u8>().ok().filter(|n| (min_len..=32).contains(n)).ok_or_else(|| {
                format!("{text:?}: prefix length /{l} is out of range; it must be between /{min_len} and /32")
            })?;
            (a, len)
        }
    };
    // std's parser rejects leading zeros, which avoids the octal ambiguity
    // of inet_aton ("010.0.0.1").
    let addr: Ipv4Addr =
        addr_text.parse().map_err(|_| format!("{addr_text:?} is not an IPv4 address in dotted-quad form"))?;
    let host_mask = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
    let first = u32::from(addr);
    if first & host_mask != 0 {
        let network = Ipv4Addr::from(first & !host_mask);
        return Err(format!(
            "{text:?} has host bits set; did you mean \"{network}/{len}\" (or \"{addr}\" for the single address)?"
        ));
    }
    Ok((addr, len))
}

/// Overlaps would hand out the same public address/port twice. Sorting keeps
/// this O(n log n), which matters since the pool may list thousands of /32s.
fn check_pool_overlap(entries: &[PoolEntry]) -> Result<(), ConfigError> {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| (entries[i].first, i));
    // After sorting by start, an entry overlaps some earlier one iff it
    // overlaps the one reaching furthest so far.
    let mut widest: Option<usize> = None;
    for i in order {
        if let Some(w) = widest {
            let (a, b) = (&entries[w], &entries[i]);
            if b.first <= a.last {
                // Blame the entry that comes later in the file.
                let (earlier, later) = if w < i { (a, b) } else { (b, a) };
                let verb = if a.first == b.first && a.last == b.last { "duplicates" } else { "overlaps" };
                return Err(key_err(
                    &later.key,
                    format!("{:?} {verb} {} ({:?})", later.text, earlier.key, earlier.text),
                ));
            }
            if b.last > a.last {
                widest = Some(i);
            }
        } else {
            widest = Some(i);
        }
    }
    Ok(())
}

fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let Some((lo, hi)) = s.split_once('-') else {
        return Err(format!("expected an inclusive range \"lo-hi\" such as \"1024-65535\", found {s:?}"));
    };
    let lo = parse_port(lo)?;
    let hi = parse_port(hi)?;
    if lo == 0 {
        return Err("port 0 is not a valid source port; the range must start at 1 or above".to_owned());
    }
    if lo > hi {
        return Err(format!("range {s:?} is empty: {lo} is above {hi}"));
    }
    Ok((lo, hi))
}

fn parse_port(p: &str) -> Result<u16, String> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{p:?} is not a port number"));
    }
    p.parse::<u16>().map_err(|_| format!("port {p} is above 65535"))
}

fn parse_exclude(secs: &[Section], pool: &[PoolEntry]) -> Result<Vec<Ipv4Net>, ConfigError> {
    let mut seen: HashMap<Ipv4Net, (String, &str)> = HashMap::with_capacity(secs.len());
    let mut nets = Vec::with_capacity(secs.len());
    for sec in secs {
        let key = sec.key("prefix");
        let text = sec.required_str("prefix")?;
        let (addr, len) = parse_prefix(text, 0).map_err(|m| key_err(&key, m))?;
        let net = Ipv4Net::new(addr, len).expect("parse_prefix bounds the length to /32");
        if let Some((k, t)) = seen.get(&net) {
            return Err(key_err(key, format!("{text:?} duplicates {k} ({t:?})")));
        }
        // Replies to translated traffic are addressed to the pool; exempting
        // them from translation would break every mapping on that address.
        let (first, last) = (u32::from(net.network()), u32::from(net.broadcast()));
        if let Some(p) = pool.iter().find(|p| p.first <= last && first <= p.last) {
            return Err(key_err(
                key,
                format!(
                    "{text:?} contains the pool address {} from {} ({:?}); return traffic to the pool is NAT traffic and cannot be excluded from translation",
                    Ipv4Addr::from(first.max(p.first)),
                    p.key,
                    p.text
                ),
            ));
        }
        seen.insert(net, (key, text));
        nets.push(net);
    }
    Ok(nets)
}

fn proto_name(proto: u8) -> &'static str {
    if proto == PROTO_TCP {
        "tcp"
    } else {
        "udp"
    }
}

fn parse_forwards(secs: &[Section], pool: &Pool) -> Result<Vec<Forward>, ConfigError> {
    let pool_addrs: HashSet<Ipv4Addr> = pool.addresses.iter().copied().collect();
    // (proto, endpoint) -> index of the forward that has it.
    let mut outsides: HashMap<(u8, SocketAddrV4), usize> = HashMap::with_capacity(secs.len());
    let mut insides: HashMap<(u8, SocketAddrV4), usize> = HashMap::with_capacity(secs.len());
    let mut forwards: Vec<Forward> = Vec::with_capacity(secs.len());
    for (i, sec) in secs.iter().enumerate() {
        let proto = sec.required_choice("proto", &[("tcp", PROTO_TCP), ("udp", PROTO_UDP)])?;
        let name = proto_name(proto);

        let outside_key = sec.key("outside");
        let outside = parse_endpoint(sec.required_str("outside")?).map_err(|m| key_err(&outside_key, m))?;
        if !pool_addrs.contains(outside.ip()) {
            return Err(key_err(
                outside_key,
                format!(
                    "{} is not a pool address; the outside address must be in pool.addresses",
                    outside.ip()
                ),
            ));
        }

        let inside_key = sec.key("inside");
        let inside = parse_endpoint(sec.required_str("inside")?).map_err(|m| key_err(&inside_key, m))?;
        if let Some(what) = unreachable_host(*inside.ip()) {
            return Err(key_err(
                inside_key,
                format!("{} is {what}, which cannot be the target of a forward", inside.ip()),
            ));
        }

        if let Some(&j) = outsides.get(&(proto, outside)) {
            return Err(key_err(
                outside_key,
                format!("{name} {outside} is already forwarded by forward[{j}] (to {})", forwards[j].inside),
            ));
        }
        if let Some(&j) = insides.get(&(proto, inside)) {
            return Err(key_err(
                inside_key,
                format!(
                    "{name} {inside} is already the target of forward[{j}] (from {}); mappings are endpoint-independent, so one inside endpoint has exactly one outside endpoint",
                    forwards[j].outside
                ),
            ));
        }
        outsides.insert((proto, outside), i);
        insides.insert((proto, inside), i);
        forwards.push(Forward { proto, outside, inside });
    }
    Ok(forwards)
}

/// Parses `"a.b.c.d:port"` with a port in 1-65535.
fn parse_endpoint(s: &str) -> Result<SocketAddrV4, String> {
    let Some((addr, port)) = s.rsplit_once(':') else {
        return Err(format!("expected an IPv4 address and port such as \"203.0.113.40:8080\", found {s:?}"));
    };
    let ip: Ipv4Addr =
        addr.parse().map_err(|_| format!("{addr:?} is not an IPv4 address in dotted-quad form"))?;
    let port = parse_port(port)?;
    if port == 0 {
        return Err(format!("{s:?}: port 0 is not valid; ports are 1-65535"));
    }
    Ok(SocketAddrV4::new(ip, port))
}

/// Why a unicast packet can never be delivered to `ip`, if it cannot.
fn unreachable_host(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        Some("the unspecified address")
    } else if ip.is_broadcast() {
        Some("the limited broadcast address")
    } else if ip.is_multicast() {
        Some("a multicast address")
    } else if ip.is_loopback() {
        Some("a loopback address")
    } else {
        None
    }
}

fn parse_nat(sec: &Section, pool: &Pool) -> Result<Nat, ConfigError> {
    let d = Nat::default();
    let ports = u32::from(pool.port_hi) - u32::from(pool.port_lo) + 1;

    let block_size = sec.int("block_size", d.block_size.into(), 2, u16::MAX.into())? as u16;
    if block_size % 2 != 0 {
        return Err(key_err(
            sec.key("block_size"),
            format!("must be even so that each block holds as many even as odd ports (port parity), found {block_size}"),
        ));
    }
    if u32::from(block_size) > ports {
        let which = if sec.get("block_size").is_some() { "" } else { "the default " };
        return Err(key_err(
            sec.key("block_size"),
            format!(
                "{which}{block_size} is larger than the {ports} ports of pool.ports ({}-{})",
                pool.port_lo, pool.port_hi
            ),
        ));
    }

    let max_blocks_per_subscriber =
        sec.int("max_blocks_per_subscriber", d.max_blocks_per_subscriber.into(), 1, 32)? as u16;
    let port_parity = sec.bool("port_parity", d.port_parity)?;
    let hairpinning = sec.bool("hairpinning", d.hairpinning)?;
    let filtering = sec.choice(
        "filtering",
        d.filtering,
        &[
            ("endpoint-independent", Filtering::EndpointIndependent),
            ("address-dependent", Filtering::AddressDependent),
            ("address-and-port-dependent", Filtering::AddressAndPortDependent),
        ],
    )?;
    let max_new_mappings_per_sec =
        sec.int("max_new_mappings_per_sec", d.max_new_mappings_per_sec.into(), 0, u32::MAX.into())? as u32;

    let home_probe = sec.int("home_probe", DEFAULT_HOME_PROBE, 0, 4096)? as u16;

    let deterministic = parse_deterministic(sec, pool)?;
    if deterministic.is_some() {
        for k in ["block_size", "max_blocks_per_subscriber", "home_probe"] {
            if sec.get(k).is_some() {
                return Err(key_err(
                    sec.key(k),
                    "has no effect with nat.mode = \"deterministic\": each subscriber's ports are nat.deterministic_ports (or as many as the pool gives each); remove it",
                ));
            }
        }
        if max_new_mappings_per_sec != 0 {
            return Err(key_err(
                sec.key("max_new_mappings_per_sec"),
                "is not supported with nat.mode = \"deterministic\", which keeps no per-subscriber state on the packet path; set it to 0 or remove it",
            ));
        }
        if sec.bool("port_class", false)? {
            return Err(key_err(
                sec.key("port_class"),
                "is not supported with nat.mode = \"deterministic\": every mapping comes from the subscriber's range; set it to false or remove it",
            ));
        }
    }
    let port_class = deterministic.is_none() && sec.bool("port_class", d.port_class)?;
    if port_class && pool.port_lo < FIRST_NON_PRIVILEGED_PORT {
        let which = if sec.get("port_class").is_some() { "" } else { " (the default)" };
        return Err(key_err(
            "pool.ports",
            format!(
                "range {}-{} starts below {FIRST_NON_PRIVILEGED_PORT}, but with nat.port_class = true{which} ports 1-1023 are reserved for port-class preservation (RFC 4787 REQ-3); start the range at {FIRST_NON_PRIVILEGED_PORT} or above, or set nat.port_class = false",
                pool.port_lo, pool.port_hi
            ),
        ));
    }
    let icmp_errors_per_sec =
        sec.int("icmp_errors_per_sec", d.icmp_errors_per_sec.into(), 0, MAX_ICMP_ERRORS_PER_SEC)? as u32;
    let unreachable_code = sec.choice(
        "unreachable_code",
        d.unreachable_code,
        &[
            ("host-unreachable", UnreachableCode::HostUnreachable),
            ("admin-prohibited", UnreachableCode::AdminProhibited),
        ],
    )?;
    let subscribers = if sec.get("subscribers").is_none() {
        d.subscribers
    } else {
        if deterministic.is_some() {
            return Err(key_err(
                sec.key("subscribers"),
                "has no effect with nat.mode = \"deterministic\", whose subscribers are nat.deterministic_subscribers; remove it",
            ));
        }
        parse_subscribers(sec)?
    };

    Ok(Nat {
        block_size,
        max_blocks_per_subscriber,
        port_parity,
        hairpinning,
        filtering,
        max_new_mappings_per_sec,
        port_class,
        icmp_errors_per_sec,
        deterministic,
        home_probe,
        subscribers,
        unreachable_code,
    })
}

/// Most entries of `nat.subscribers` (the data plane's LPM trie nx_subnets holds 1024).
const MAX_SUBSCRIBER_PREFIXES: usize = 1024;

fn parse_subscribers(sec: &Section) -> Result<Vec<Ipv4Net>, ConfigError> {
    let entries = sec.str_array("subscribers")?;
    if entries.len() > MAX_SUBSCRIBER_PREFIXES {
        return Err(key_err(
            sec.key("subscribers"),
            format!("at most {MAX_SUBSCRIBER_PREFIXES} prefixes are supported, found {}", entries.len()),
        ));
    }
    let mut out: Vec<(String, Ipv4Net)> = Vec::with_capacity(entries.len());
    for (key, text) in entries {
        let (addr, len) = parse_prefix(text, 0).map_err(|m| key_err(&key, m))?;
        let net = Ipv4Net::new(addr, len).expect("length checked");
        if let Some((other, _)) = out.iter().find(|(_, n)| n.contains(&net) || net.contains(n)) {
            return Err(key_err(key, format!("{text:?} overlaps {other}")));
        }
        out.push((key, net));
    }
    Ok(out.into_iter().map(|(_, n)| n).collect())
}

/// Pairs of each parity a home walk goes at most, by default (bpf/nx_home.h).
const DEFAULT_HOME_PROBE: i64 = 64;

/// Most subscribers one deterministic prefix may hold (a /8).
const MAX_DET_PREFIX_LEN_MIN: u8 = 8;
const DEFAULT_DET_PROBE: i64 = 64;

fn parse_deterministic(sec: &Section, pool: &Pool) -> Result<Option<Deterministic>, ConfigError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        Dynamic,
        Deterministic,
    }
    let mode = sec.choice(
        "mode",
        Mode::Dynamic,
        &[("dynamic", Mode::Dynamic), ("deterministic", Mode::Deterministic)],
    )?;
    let det_keys = ["deterministic_subscribers", "deterministic_ports", "deterministic_probe"];
    if mode == Mode::Dynamic {
        if let Some(k) = det_keys.iter().find(|k| sec.get(k).is_some()) {
            return Err(key_err(sec.key(k), "only applies with nat.mode = \"deterministic\""));
        }
        return Ok(None);
    }
    let text = sec.required_str("deterministic_subscribers")?;
    let (addr, len) = parse_prefix(text, MAX_DET_PREFIX_LEN_MIN)
        .map_err(|m| key_err(sec.key("deterministic_subscribers"), m))?;
    let subscribers = Ipv4Net::new(addr, len).expect("parse_prefix bounds the length to /32");
    let count: u64 = 1u64 << (32 - u32::from(len));
    let n_addrs = pool.addresses.len() as u64;
    let range = u64::from(pool.port_hi) - u64::from(pool.port_lo) + 1;
    let per_addr = count.div_ceil(n_addrs);
    let ports = match sec.get("deterministic_ports") {
        Some(_) => {
            let p = sec.int("deterministic_ports", 0, 2, range.min(65534) as i64)? as u64;
            if p % 2 != 0 {
                return Err(key_err(
                    sec.key("deterministic_ports"),
                    format!("must be even so that each subscriber holds as many even as odd ports (port parity), found {p}"),
                ));
            }
            if p * per_addr > range {
                return Err(key_err(
                    sec.key("deterministic_ports"),
                    format!(
                        "{count} subscribers ({text}) on {n_addrs} pool address(es) put {per_addr} on each; {per_addr} x {p} ports exceed the {range} ports of pool.ports ({}-{}): at most {} ports each",
                        pool.port_lo,
                        pool.port_hi,
                        (range / per_addr) & !1
                    ),
                ));
            }
            p
        }
        None => (range / per_addr) & !1,
    };
    if ports < 2 {
        return Err(key_err(
            sec.key("deterministic_subscribers"),
            format!(
                "{count} subscribers ({text}) on {n_addrs} pool address(es) leave fewer than 2 ports of pool.ports ({}-{}) to each; use a smaller prefix or more pool addresses",
                pool.port_lo, pool.port_hi
            ),
        ));
    }
    let probe = sec.int("deterministic_probe", DEFAULT_DET_PROBE, 1, 4096)? as u16;
    Ok(Some(Deterministic { subscribers, ports: ports as u16, per_addr: per_addr as u32, probe }))
}

fn parse_fragments(sec: &Section) -> Result<Fragments, ConfigError> {
    let d = Fragments::default();
    Ok(Fragments {
        timeout: sec.duration_in("timeout", d.timeout, MIN_FRAGMENT_TIMEOUT, MAX_FRAGMENT_TIMEOUT)?,
        max_tracked: sec.int(
            "max_tracked",
            d.max_tracked.into(),
            MIN_FRAGMENTS_TRACKED,
            MAX_FRAGMENTS_TRACKED,
        )? as u32,
        max_held: sec.int("max_held", d.max_held.into(), 0, MAX_FRAGMENTS_HELD)? as u32,
    })
}

fn parse_timeouts(sec: &Section, warnings: &mut Vec<String>) -> Result<Timeouts, ConfigError> {
    let d = Timeouts::default();
    // Below these minima applications misbehave (keepalives outrun the NAT),
    // but operators sometimes trade that for state-table capacity, so they
    // only warrant a warning.
    let mut get = |k: &str, default: Duration, min: Duration, rfc: &str| -> Result<Duration, ConfigError> {
        let Some(v) = sec.duration(k)? else { return Ok(default) };
        if v.is_zero() {
            return Err(key_err(sec.key(k), "timeout must not be zero"));
        }
        if v > MAX_TIMEOUT {
            return Err(key_err(
                sec.key(k),
                format!("{} exceeds the maximum of {}", fmt_duration(v), fmt_duration(MAX_TIMEOUT)),
            ));
        }
        if v < min {
            warnings.push(format!(
                "{} = {} is below the {rfc} minimum of {}",
                sec.key(k),
                fmt_duration(v),
                fmt_duration(min)
            ));
        }
        Ok(v)
    };
    Ok(Timeouts {
        udp: get("udp", d.udp, Duration::from_secs(120), "RFC 4787 REQ-5")?,
        tcp_established: get(
            "tcp_established",
            d.tcp_established,
            Duration::from_secs(7440),
            "RFC 5382 REQ-5",
        )?,
        tcp_transitory: get("tcp_transitory", d.tcp_transitory, Duration::from_secs(240), "RFC 5382 REQ-5")?,
        icmp: get("icmp", d.icmp, Duration::from_secs(60), "RFC 5508 REQ-2")?,
        port_hold_down: get("port_hold_down", d.port_hold_down, Duration::from_secs(120), "RFC 6888 REQ-8")?,
    })
}

fn parse_limits(sec: &Section) -> Result<Limits, ConfigError> {
    let d = Limits::default();
    let get = |k: &str, default: u32| sec.int(k, default.into(), 1, MAX_LIMIT).map(|n| n as u32);
    Ok(Limits {
        max_subscribers: get("max_subscribers", d.max_subscribers)?,
        max_mappings: get("max_mappings", d.max_mappings)?,
        max_sessions: get("max_sessions", d.max_sessions)?,
        max_sessions_per_subscriber: sec.int(
            "max_sessions_per_subscriber",
            d.max_sessions_per_subscriber.into(),
            0,
            MAX_LIMIT,
        )? as u32,
    })
}

fn parse_fib_cache(sec: &Section) -> Result<FibCache, ConfigError> {
    let d = FibCache::default();
    let entries = sec.int("entries", d.entries.into(), 0, MAX_FIB_CACHE_ENTRIES)?;
    if entries != 0 && (entries < MIN_FIB_CACHE_ENTRIES || entries & (entries - 1) != 0) {
        return Err(key_err(
            sec.key("entries"),
            format!(
                "must be 0 (no cache) or a power of two between {MIN_FIB_CACHE_ENTRIES} and \
                 {MAX_FIB_CACHE_ENTRIES}, found {entries}"
            ),
        ));
    }
    let max_age = sec.duration_in("max_age", d.max_age, MIN_FIB_CACHE_AGE, MAX_FIB_CACHE_AGE)?;
    Ok(FibCache { entries: entries as u32, max_age })
}

fn parse_daemon(sec: &Section) -> Result<Daemon, ConfigError> {
    let d = Daemon::default();
    let pin_path = match sec.str("pin_path")? {
        None => d.pin_path,
        // A relative path would resolve against whatever directory the
        // daemon happened to be started from, and bpffs pins must outlive it.
        Some(p) if Path::new(p).is_absolute() => PathBuf::from(p),
        Some(p) => {
            return Err(key_err(sec.key("pin_path"), format!("must be an absolute path, found {p:?}")))
        }
    };
    let sweep_interval =
        sec.duration_in("sweep_interval", d.sweep_interval, MIN_SWEEP_INTERVAL, MAX_SWEEP_INTERVAL)?;
    Ok(Daemon { pin_path, sweep_interval })
}

#[cfg(test)]
mod tests {
    use super::*;

    const IFACES: &str = "[interfaces]\ninside = [\"lan0\"]\noutside = [\"wan0\"]\n";
    const POOL: &str = "[pool]\naddresses = [\"203.0.113.1\"]\n";

    /// Minimal valid document plus `extra` (which must not repeat
    /// `[interfaces]` or `[pool]`).
    fn with(extra: &str) -> String {
        format!("{IFACES}{POOL}{extra}")
    }

    fn with_interfaces(body: &str) -> String {
        format!("[interfaces]\n{body}\n{POOL}")
    }

    fn with_pool(body: &str) -> String {
        format!("{IFACES}[pool]\n{body}\n")
    }

    fn ok(doc: &str) -> Config {
        Config::from_toml_str(doc).unwrap_or_else(|e| panic!("unexpected error: {e}\n--- config:\n{doc}"))
    }

    /// Asserts a `Key` error for `key` and returns its message.
    fn key_error(doc: &str, key: &str) -> String {
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
    fn assert_key_errors(key: &str, doc: impl Fn(&str) -> String, cases: &[(&str, &str)]) {
        for &(v, why) in cases {
            let m = key_error(&doc(v), key);
            assert!(m.contains(why), "{key} = {v:?}: {m:?} lacks {why:?}");
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
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
    fn address_dependent_filtering() {
        let c = ok(&with("[nat]\nfiltering = \"address-dependent\"\n"));
        assert_eq!(c.nat.filtering, Filtering::AddressDependent);
    }

    #[test]
    fn block_count_ignores_leftover_ports() {
        let c =
            ok(&with_pool(
            "addresses = [\"203.0.113.1\"]\nports = \"1000-1999\"\n[nat]\nblock_size = 300\nport_class = false",
        ));
        assert_eq!(c.block_count_per_addr(), 3);
    }

    // ---- durations ----

    #[test]
    fn durations_parse() {
        for (s, ms) in [
            ("2h4m", 7_440_000),
            ("60s", 60_000),
            ("3s", 3_000),
            ("5m", 300_000),
            ("500ms", 500),
            ("1d", 86_400_000),
            ("1h30m15s", 5_415_000),
            ("1d2h3m4s5ms", 93_784_005),
            ("1m500ms", 60_500),
            ("90", 90_000),
            ("0", 0),
            ("0s", 0),
            ("90m", 5_400_000),
        ] {
            assert_eq!(parse_duration(s), Ok(Duration::from_millis(ms)), "{s}");
        }
    }

    #[test]
    fn durations_reject_garbage() {
        for (s, why) in [
            ("", "empty"),
            ("-5s", "negative"),
            ("-5", "negative"),
            ("5x", "unknown unit \"x\""),
            ("5M", "unknown unit \"M\""),
            ("5 m", "unexpected character ' '"),
            ("1h 30m", "expected a number"),
            ("1.5h", "unexpected character '.'"),
            ("1h30", "missing unit"),
            ("h", "expected a number"),
            ("+5s", "expected a number"),
            ("5m5m", "largest first"),
            ("30s1m", "largest first"),
            ("99999999999999999999", "too large"),
            ("99999999999999999999s", "too large"),
            ("18446744073709551615", "too large"),
            ("213503982335d", "too large"),
        ] {
            let err = parse_duration(s).expect_err(s);
            assert!(err.contains(why), "{s:?}: {err:?} lacks {why:?}");
        }
    }

    #[test]
    fn fmt_duration_round_trips() {
        for s in ["2h4m", "1d", "500ms", "1h30m15s", "2m", "0s", "1d2h3m4s5ms"] {
            assert_eq!(fmt_duration(parse_duration(s).unwrap()), s);
        }
        assert_eq!(fmt_duration(secs(120)), "2m");
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

    // ---- errors: interfaces ----

    #[test]
    fn interfaces_required() {
        key_error(POOL, "interfaces.inside");
        key_error(&with_interfaces("outside = [\"wan0\"]"), "interfaces.inside");
        let m = key_error(&with_interfaces("inside = [\"lan0\"]"), "interfaces.outside");
        assert!(m.contains("required"), "{m}");
    }

    #[test]
    fn interfaces_must_be_non_empty_string_arrays() {
        let m = key_error(&with_interfaces("inside = []\noutside = [\"wan0\"]"), "interfaces.inside");
        assert!(m.contains("at least one"), "{m}");
        key_error(&with_interfaces("inside = [\"lan0\"]\noutside = []"), "interfaces.outside");
        let m = key_error(&with_interfaces("inside = \"lan0\"\noutside = [\"wan0\"]"), "interfaces.inside");
        assert!(m.contains("[\"lan0\"]"), "{m}");
        key_error(&with_interfaces("inside = 3\noutside = [\"wan0\"]"), "interfaces.inside");
        let m = key_error(
            &with_interfaces("inside = [\"lan0\", 7]\noutside = [\"wan0\"]"),
            "interfaces.inside[1]",
        );
        assert!(m.contains("expected a string, found integer 7"), "{m}");
        key_error(&with_interfaces("inside = [\"lan0\"]\noutside = [[\"wan0\"]]"), "interfaces.outside[0]");
    }

    #[test]
    fn interface_names_are_validated() {
        for (name, why) in [
            ("", "empty"),
            ("abcdefghijklmnop", "at most 15"),
            ("a/b", "'/'"),
            ("lan 0", "' '"),
            ("lan\\t0", "'\\t'"),
            (".", "not a valid"),
            ("..", "not a valid"),
            ("eth0:1", "':'"),
        ] {
            let doc = with_interfaces(&format!("inside = [\"lan0\", \"{name}\"]\noutside = [\"wan0\"]"));
            let m = key_error(&doc, "interfaces.inside[1]");
            assert!(m.contains(why), "{name:?}: {m}");
            let doc = with_interfaces(&format!("inside = [\"lan0\"]\noutside = [\"{name}\"]"));
            key_error(&doc, "interfaces.outside[0]");
        }
        // Exactly 15 bytes is fine.
        ok(&with_interfaces("inside = [\"abcdefghijklmno\"]\noutside = [\"wan0\"]"));
    }

    #[test]
    fn interface_duplicates_within_a_list() {
        let m = key_error(
            &with_interfaces("inside = [\"lan0\", \"lan1\", \"lan0\"]\noutside = [\"wan0\"]"),
            "interfaces.inside[2]",
        );
        assert!(m.contains("interfaces.inside[0]"), "{m}");
        key_error(
            &with_interfaces("inside = [\"lan0\"]\noutside = [\"wan0\", \"wan0\"]"),
            "interfaces.outside[1]",
        );
    }

    #[test]
    fn interface_in_both_lists() {
        let m = key_error(
            &with_interfaces("inside = [\"lan0\", \"x0\"]\noutside = [\"wan0\", \"x0\"]"),
            "interfaces.outside[1]",
        );
        assert!(m.contains("interfaces.inside[1]") && m.contains("both"), "{m}");
    }

    #[test]
    fn interface_list_limit() {
        let list = |n: usize| (0..n).map(|i| format!("\"l{i}\"")).collect::<Vec<_>>().join(", ");
        ok(&with_interfaces(&format!("inside = [{}]\noutside = [\"wan0\"]", list(32))));
        let m = key_error(
            &with_interfaces(&format!("inside = [{}]\noutside = [\"wan0\"]", list(33))),
            "interfaces.inside",
        );
        assert!(m.contains("at most 32"), "{m}");
        key_error(
            &with_interfaces(&format!("inside = [\"lan0\"]\noutside = [{}]", list(33))),
            "interfaces.outside",
        );
    }

    #[test]
    fn xdp_mode_values() {
        let base = "inside = [\"lan0\"]\noutside = [\"wan0\"]\n";
        let m = key_error(&with_interfaces(&format!("{base}xdp_mode = \"skb\"")), "interfaces.xdp_mode");
        assert!(m.contains("\"native\", \"generic\"") && m.contains("\"skb\""), "{m}");
        let m = key_error(&with_interfaces(&format!("{base}xdp_mode = 1")), "interfaces.xdp_mode");
        assert!(m.contains("expected a string"), "{m}");
        // Case matters: the config is not a place for guessing.
        key_error(&with_interfaces(&format!("{base}xdp_mode = \"Native\"")), "interfaces.xdp_mode");
    }

    // ---- errors: pool ----

    #[test]
    fn pool_addresses_required() {
        key_error(IFACES, "pool.addresses");
        key_error(&with_pool("ports = \"1024-65535\""), "pool.addresses");
        key_error(&with_pool("addresses = []"), "pool.addresses");
        key_error(&with_pool("addresses = \"203.0.113.1\""), "pool.addresses");
        key_error(&with_pool("addresses = [\"203.0.113.1\", 5]"), "pool.addresses[1]");
    }

    #[test]
    fn pool_address_syntax() {
        assert_key_errors(
            "pool.addresses[1]",
            |entry| with_pool(&format!("addresses = [\"203.0.114.1\", \"{entry}\"]")),
            &[
                ("203.0.113", "not an IPv4 address"),
                ("203.0.113.256", "not an IPv4 address"),
                ("203.0.113.01", "not an IPv4 address"),
                ("2001:db8::1", "not an IPv4 address"),
                (" 203.0.113.1", "not an IPv4 address"),
                ("203.0.113.0/", "not a number"),
                ("203.0.113.0/+24", "not a number"),
                ("203.0.113.0/x", "not a number"),
                ("203.0.0.0/19", "between /20 and /32"),
                ("203.0.113.0/33", "between /20 and /32"),
                ("203.0.113.0/999", "between /20 and /32"),
            ],
        );
    }

    #[test]
    fn pool_prefix_with_host_bits() {
        let m = key_error(&with_pool("addresses = [\"203.0.113.17/29\"]"), "pool.addresses[0]");
        assert!(m.contains("host bits") && m.contains("\"203.0.113.16/29\""), "{m}");
    }

    #[test]
    fn pool_prefix_includes_network_and_broadcast() {
        let c = ok(&with_pool("addresses = [\"203.0.113.0/30\"]"));
        assert_eq!(c.pool.addresses, (0..4).map(|h| Ipv4Addr::new(203, 0, 113, h)).collect::<Vec<_>>());
        let c = ok(&with_pool("addresses = [\"10.0.0.0/20\"]"));
        assert_eq!(c.pool.addresses.len(), 4096);
        assert_eq!(c.pool.addresses[0], Ipv4Addr::new(10, 0, 0, 0));
        assert_eq!(c.pool.addresses[4095], Ipv4Addr::new(10, 0, 15, 255));
    }

    #[test]
    fn pool_keeps_configured_order() {
        let c = ok(&with_pool("addresses = [\"203.0.113.40\", \"198.51.100.2/31\", \"203.0.113.1\"]"));
        assert_eq!(
            c.pool.addresses,
            [
                Ipv4Addr::new(203, 0, 113, 40),
                Ipv4Addr::new(198, 51, 100, 2),
                Ipv4Addr::new(198, 51, 100, 3),
                Ipv4Addr::new(203, 0, 113, 1),
            ]
        );
    }

    #[test]
    fn pool_reserved_ranges() {
        assert_key_errors(
            "pool.addresses[0]",
            |entry| with_pool(&format!("addresses = [\"{entry}\"]")),
            &[
                ("0.0.0.0", "0.0.0.0/8"),
                ("0.1.0.0/20", "0.0.0.0/8"),
                ("127.0.0.1", "loopback"),
                ("224.0.0.1", "multicast"),
                ("239.255.0.0/20", "multicast"),
                ("240.0.0.1", "240.0.0.0/4"),
                ("255.255.255.255", "limited broadcast"),
            ],
        );
        // Neighbours of the reserved ranges are fine.
        ok(&with_pool("addresses = [\"1.0.0.0\", \"126.255.255.255\", \"128.0.0.0\", \"223.255.255.255\"]"));
    }

    #[test]
    fn pool_duplicates_and_overlaps_name_both() {
        let m = key_error(
            &with_pool("addresses = [\"203.0.113.40\", \"203.0.113.1\", \"203.0.113.40\"]"),
            "pool.addresses[2]",
        );
        assert!(m.contains("duplicates pool.addresses[0]"), "{m}");
        // The later entry is blamed even when it sorts first.
        let m =
            key_error(&with_pool("addresses = [\"203.0.113.20\", \"203.0.113.16/29\"]"), "pool.addresses[1]");
        assert!(m.contains("overlaps pool.addresses[0]") && m.contains("\"203.0.113.20\""), "{m}");
        let m = key_error(
            &with_pool("addresses = [\"203.0.113.0/24\", \"198.51.100.1\", \"203.0.113.200\"]"),
            "pool.addresses[2]",
        );
        assert!(m.contains("pool.addresses[0]"), "{m}");
        // Overlap hidden behind a wide earlier prefix is still found.
        let m = key_error(
            &with_pool("addresses = [\"10.0.0.0/20\", \"10.0.1.0/24\", \"10.0.200.1\"]"),
            "pool.addresses[1]",
        );
        assert!(m.contains("pool.addresses[0]"), "{m}");
        // Adjacent is not overlapping.
        ok(&with_pool("addresses = [\"203.0.113.16/29\", \"203.0.113.24/29\", \"203.0.113.15\"]"));
    }

    #[test]
    fn pool_size_limit() {
        let m = key_error(&with_pool("addresses = [\"10.0.0.0/20\", \"10.1.0.0\"]"), "pool.addresses");
        assert!(m.contains("4097") && m.contains("4096"), "{m}");
    }

    #[test]
    fn pool_ports() {
        let base = "addresses = [\"203.0.113.1\"]\n";
        let c = ok(&with_pool(&format!("{base}ports = \"1-256\"\n[nat]\nport_class = false")));
        assert_eq!((c.pool.port_lo, c.pool.port_hi), (1, 256));
        let c = ok(&with_pool(&format!("{base}ports = \"5000-5001\"\n[nat]\nblock_size = 2")));
        assert_eq!((c.pool.port_lo, c.pool.port_hi), (5000, 5001));
        assert_key_errors(
            "pool.ports",
            |ports| with_pool(&format!("{base}ports = {ports}")),
            &[
                ("\"2000\"", "\"lo-hi\""),
                ("\"\"", "\"lo-hi\""),
                ("\"0-65535\"", "port 0"),
                ("\"3000-2000\"", "3000 is above 2000"),
                ("\"1024-65536\"", "above 65535"),
                ("\"1024-99999999999\"", "above 65535"),
                ("\"a-b\"", "not a port number"),
                ("\"1024-\"", "not a port number"),
                ("\"1024 - 2048\"", "not a port number"),
                ("\"1024-2048-4096\"", "not a port number"),
                ("\"-1-5\"", "not a port number"),
                ("1024", "expected a string"),
            ],
        );
    }

    // ---- errors: nat ----

    #[test]
    fn nat_block_size() {
        assert_key_errors(
            "nat.block_size",
            |v| with(&format!("[nat]\nblock_size = {v}\n")),
            &[
                ("255", "even"),
                ("0", "between 2 and 65535"),
                ("-2", "between 2 and 65535"),
                ("65536", "between 2 and 65535"),
                ("\"256\"", "expected an integer, found string \"256\""),
                ("256.0", "expected an integer, found float"),
                ("65534", "larger than the 64512 ports"),
            ],
        );
        // The block may span the whole range, but not more.
        let pool =
            "addresses = [\"203.0.113.1\"]\nports = \"1000-1099\"\n[nat]\nport_class = false\nblock_size";
        ok(&with_pool(&format!("{pool} = 100")));
        key_error(&with_pool(&format!("{pool} = 102")), "nat.block_size");
    }

    #[test]
    fn nat_default_block_size_too_large_for_ports() {
        let m =
            key_error(&with_pool("addresses = [\"203.0.113.1\"]\nports = \"1000-1099\""), "nat.block_size");
        assert!(m.contains("the default 256") && m.contains("100 ports"), "{m}");
    }

    #[test]
    fn nat_max_blocks_per_subscriber() {
        ok(&with("[nat]\nmax_blocks_per_subscriber = 1\n"));
        for v in ["0", "33", "-1", "true"] {
            key_error(
                &with(&format!("[nat]\nmax_blocks_per_subscriber = {v}\n")),
                "nat.max_blocks_per_subscriber",
            );
        }
    }

    #[test]
    fn nat_booleans_must_be_booleans() {
        for k in ["port_parity", "hairpinning"] {
            for v in ["\"yes\"", "1", "\"true\""] {
                let m = key_error(&with(&format!("[nat]\n{k} = {v}\n")), &format!("nat.{k}"));
                assert!(m.contains("expected a boolean"), "{m}");
            }
        }
    }

    #[test]
    fn nat_filtering() {
        let m = key_error(&with("[nat]\nfiltering = \"full-cone\"\n"), "nat.filtering");
        assert!(m.contains("\"endpoint-independent\"") && m.contains("\"full-cone\""), "{m}");
        key_error(&with("[nat]\nfiltering = \"endpoint_independent\"\n"), "nat.filtering");
        key_error(&with("[nat]\nfiltering = 1\n"), "nat.filtering");
    }

    #[test]
    fn nat_max_new_mappings_per_sec() {
        let c = ok(&with("[nat]\nmax_new_mappings_per_sec = 4294967295\n"));
        assert_eq!(c.nat.max_new_mappings_per_sec, u32::MAX);
        for v in ["-1", "4294967296", "\"100\"", "1.5"] {
            key_error(
                &with(&format!("[nat]\nmax_new_mappings_per_sec = {v}\n")),
                "nat.max_new_mappings_per_sec",
            );
        }
    }

    // ---- timeouts ----

    const TIMEOUT_KEYS: [&str; 5] = ["udp", "tcp_established", "tcp_transitory", "icmp", "port_hold_down"];

    #[test]
    fn timeouts_accept_strings_and_integer_seconds() {
        let c = ok(&with("[timeouts]\nudp = 300\nicmp = \"1m\"\ntcp_established = \"3h\"\n"));
        assert_eq!(c.timeouts.udp, secs(300));
        assert_eq!(c.timeouts.icmp, secs(60));
        assert_eq!(c.timeouts.tcp_established, secs(3 * 3600));
        assert!(c.warnings.is_empty());
        // 30 days is the inclusive maximum.
        assert_eq!(ok(&with("[timeouts]\nudp = \"30d\"\n")).timeouts.udp, secs(30 * 86400));
    }

    #[test]
    fn timeouts_errors() {
        for k in TIMEOUT_KEYS {
            let key = format!("timeouts.{k}");
            assert_key_errors(
                &key,
                |v| with(&format!("[timeouts]\n{k} = {v}\n")),
                &[
                    ("\"0s\"", "zero"),
                    ("0", "zero"),
                    ("\"31d\"", "exceeds the maximum of 30d"),
                    ("2592001", "exceeds the maximum"),
                    ("\"5x\"", "unknown unit"),
                    ("\"\"", "empty"),
                    ("\"-5m\"", "negative"),
                    ("-5", "negative"),
                    ("true", "expected a duration"),
                    ("1.5", "expected a duration"),
                ],
            );
        }
    }

    #[test]
    fn timeouts_below_rfc_minimum_warn() {
        let c = ok(&with(
            "[timeouts]\nudp = \"1m\"\ntcp_established = \"2h\"\ntcp_transitory = \"3m59s\"\nicmp = \"30s\"\nport_hold_down = 10\n",
        ));
        assert_eq!(c.timeouts.udp, secs(60));
        assert_eq!(c.timeouts.port_hold_down, secs(10));
        assert_eq!(
            c.warnings,
            [
                "timeouts.udp = 1m is below the RFC 4787 REQ-5 minimum of 2m",
                "timeouts.tcp_established = 2h is below the RFC 5382 REQ-5 minimum of 2h4m",
                "timeouts.tcp_transitory = 3m59s is below the RFC 5382 REQ-5 minimum of 4m",
                "timeouts.icmp = 30s is below the RFC 5508 REQ-2 minimum of 1m",
                "timeouts.port_hold_down = 10s is below the RFC 6888 REQ-8 minimum of 2m",
            ]
        );
    }

    #[test]
    fn timeouts_at_rfc_minimum_do_not_warn() {
        let c = ok(&with(
            "[timeouts]\nudp = \"2m\"\ntcp_established = \"2h4m\"\ntcp_transitory = \"4m\"\nicmp = \"60s\"\nport_hold_down = \"120s\"\n",
        ));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    // ---- limits ----

    #[test]
    fn limits_errors() {
        for k in ["max_subscribers", "max_mappings", "max_sessions"] {
            let key = format!("limits.{k}");
            assert!(ok(&with(&format!("[limits]\n{k} = 100000000\n"))).warnings.is_empty());
            assert_key_errors(
                &key,
                |v| with(&format!("[limits]\n{k} = {v}\n")),
                &[
                    ("0", "between 1 and 100000000"),
                    ("100000001", "between 1 and 100000000"),
                    ("-1", "between 1"),
                    ("\"1000\"", "expected an integer"),
                    ("1e6", "expected an integer"),
                ],
            );
        }
    }

    // ---- fib_cache ----

    #[test]
    fn fib_cache_values_and_errors() {
        assert_eq!(ok(&with("")).fib_cache, FibCache { entries: 4096, max_age: Duration::from_millis(50) });
        let c = ok(&with("[fib_cache]\nentries = 0\nmax_age = \"1ms\"\n"));
        assert_eq!(c.fib_cache, FibCache { entries: 0, max_age: Duration::from_millis(1) });
        let c = ok(&with("[fib_cache]\nentries = 1048576\nmax_age = 10\n"));
        assert_eq!(c.fib_cache, FibCache { entries: 1 << 20, max_age: Duration::from_secs(10) });
        assert_key_errors(
            "fib_cache.entries",
            |v| with(&format!("[fib_cache]\nentries = {v}\n")),
            &[
                ("100", "power of two"),
                ("32", "power of two between 64 and 1048576"),
                ("2097152", "between 0 and 1048576"),
                ("-1", "between 0"),
                ("\"4k\"", "expected an integer"),
            ],
        );
        assert_key_errors(
            "fib_cache.max_age",
            |v| with(&format!("[fib_cache]\nmax_age = {v}\n")),
            &[
                ("\"0s\"", "between 1ms and 10s"),
                ("11", "between 1ms and 10s"),
                ("true", "expected a duration"),
            ],
        );
        key_error(&with("[fib_cache]\nsize = 64\n"), "fib_cache.size");
    }

    // ---- daemon ----

    #[test]
    fn daemon_pin_path() {
        let m = key_error(&with("[daemon]\npin_path = \"bpf/natrix\"\n"), "daemon.pin_path");
        assert!(m.contains("absolute"), "{m}");
        key_error(&with("[daemon]\npin_path = \"\"\n"), "daemon.pin_path");
        let m = key_error(&with("[daemon]\npin_path = 1\n"), "daemon.pin_path");
        assert!(m.contains("expected a string"), "{m}");
    }

    #[test]
    fn daemon_sweep_interval() {
        assert_eq!(
            ok(&with("[daemon]\nsweep_interval = \"100ms\"\n")).daemon.sweep_interval,
            Duration::from_millis(100)
        );
        assert_eq!(ok(&with("[daemon]\nsweep_interval = 60\n")).daemon.sweep_interval, secs(60));
        assert_key_errors(
            "daemon.sweep_interval",
            |v| with(&format!("[daemon]\nsweep_interval = {v}\n")),
            &[
                ("\"99ms\"", "between 100ms and 1m, found 99ms"),
                ("\"0s\"", "found 0s"),
                ("\"60s1ms\"", "found 1m1ms"),
                ("61", "found 1m1s"),
                ("\"1 s\"", "unexpected character"),
                ("-1", "negative"),
                ("false", "expected a duration"),
            ],
        );
    }

    // ---- nat.home_probe ----

    #[test]
    fn nat_home_probe() {
        assert_eq!(ok(&with("")).nat.home_probe, 64);
        assert_eq!(ok(&with("[nat]\nhome_probe = 8")).nat.home_probe, 8);
        assert_eq!(ok(&with("[nat]\nhome_probe = 0")).nat.home_probe, 0, "0: every mapping in the table");
        let m = key_error(&with("[nat]\nhome_probe = 4097"), "nat.home_probe");
        assert!(m.contains("4096"), "{m}");
        key_error(&with("[nat]\nhome_probe = -1"), "nat.home_probe");
        key_error(&with("[nat]\nhome_probe = \"64\""), "nat.home_probe");
    }

    // ---- nat.mode = "deterministic" (RFC 7422) ----

    #[test]
    fn nat_deterministic() {
        let det = |extra: &str| {
            with_pool(&format!(
                "addresses = [\"203.0.113.0/29\"]\n[nat]\nmode = \"deterministic\"\ndeterministic_subscribers = \"100.64.0.0/24\"\n{extra}"
            ))
        };
        // 256 subscribers on 8 addresses: 32 each, 64512 / 32 = 2016 ports
        let d = ok(&det("")).nat.deterministic.expect("deterministic");
        assert_eq!((d.count(), d.per_addr, d.ports, d.probe), (256, 32, 2016, 64));
        assert!(!ok(&det("")).nat.port_class, "port class is off in this mode");
        assert!(ok(&det("")).warnings.is_empty(), "parity falls back: nothing to warn of");
        let d = ok(&det("deterministic_ports = 1000\ndeterministic_probe = 8")).nat.deterministic.unwrap();
        assert_eq!((d.ports, d.probe), (1000, 8));
        assert_eq!(ok(&with("")).nat.deterministic, None, "dynamic by default");

        key_error(&det("deterministic_ports = 1001"), "nat.deterministic_ports");
        let m = key_error(&det("deterministic_ports = 2018"), "nat.deterministic_ports");
        assert!(m.contains("at most 2016"), "{m}");
        key_error(&det("block_size = 128"), "nat.block_size");
        key_error(&det("home_probe = 8"), "nat.home_probe");
        key_error(&det("max_new_mappings_per_sec = 10"), "nat.max_new_mappings_per_sec");
        key_error(&det("port_class = true"), "nat.port_class");
        key_error(
            &with("[nat]\ndeterministic_subscribers = \"100.64.0.0/24\""),
            "nat.deterministic_subscribers",
        );
        key_error(&with("[nat]\nmode = \"deterministic\""), "nat.deterministic_subscribers");
        key_error(&with("[nat]\nmode = \"fixed\""), "nat.mode");
        let m = key_error(
            &with_pool("addresses = [\"203.0.113.1\"]\n[nat]\nmode = \"deterministic\"\ndeterministic_subscribers = \"100.0.0.0/8\""),
            "nat.deterministic_subscribers",
        );
        assert!(m.contains("fewer than 2 ports"), "{m}");
        let fwd = "[[forward]]\nproto = \"tcp\"\noutside = \"203.0.113.1:80\"\ninside = \"100.64.0.2:80\"\n";
        key_error(&format!("{}{fwd}", det("")), "forward[0]");
    }

    // ---- nat.port_class and nat.icmp_errors_per_sec ----

    #[test]
    fn nat_port_class() {
        assert!(ok(&with("")).nat.port_class);
        assert!(ok(&with("[nat]\nport_class = true\n")).nat.port_class);
        // Starting exactly at 1024 is fine.
        let c =
            ok(&with_pool("addresses = [\"203.0.113.1\"]\nports = \"1024-2047\"\n[nat]\nport_class = true"));
        assert_eq!(c.pool.port_lo, 1024);
        // Without port-class preservation any range is fine.
        let c =
            ok(&with_pool("addresses = [\"203.0.113.1\"]\nports = \"1-1023\"\n[nat]\nport_class = false"));
        assert!(!c.nat.port_class);
        assert_eq!((c.pool.port_lo, c.pool.port_hi), (1, 1023));
        // The conflict is reported on pool.ports, whether port_class is
        // the default or explicit.
        for nat in ["", "[nat]\nport_class = true"] {
            let m = key_error(
                &with_pool(&format!("addresses = [\"203.0.113.1\"]\nports = \"1023-65535\"\n{nat}")),
                "pool.ports",
            );
            assert!(
                m.contains("1023-65535")
                    && m.contains("ports 1-1023 are reserved for port-class preservation")
                    && m.contains("nat.port_class = false"),
                "{m}"
            );
            assert_eq!(m.contains("(the default)"), nat.is_empty(), "{m}");
        }
        for v in ["\"yes\"", "1", "\"false\""] {
            let m = key_error(&with(&format!("[nat]\nport_class = {v}\n")), "nat.port_class");
            assert!(m.contains("expected a boolean"), "{m}");
        }
        let m = key_error(&with("[nat]\nport-class = false\n"), "nat.port-class");
        assert!(m.contains("did you mean `port_class`"), "{m}");
    }

    #[test]
    fn nat_icmp_errors_per_sec() {
        assert_eq!(ok(&with("")).nat.icmp_errors_per_sec, 100);
        assert_eq!(ok(&with("[nat]\nicmp_errors_per_sec = 0\n")).nat.icmp_errors_per_sec, 0);
        assert_eq!(ok(&with("[nat]\nicmp_errors_per_sec = 100000\n")).nat.icmp_errors_per_sec, 100_000);
        assert_key_errors(
            "nat.icmp_errors_per_sec",
            |v| with(&format!("[nat]\nicmp_errors_per_sec = {v}\n")),
            &[
                ("100001", "between 0 and 100000, found 100001"),
                ("-1", "between 0 and 100000"),
                ("\"100\"", "expected an integer, found string \"100\""),
                ("1.5", "expected an integer"),
            ],
        );
        let m = key_error(&with("[nat]\nicmp_error_per_sec = 5\n"), "nat.icmp_error_per_sec");
        assert!(m.contains("did you mean `icmp_errors_per_sec`"), "{m}");
    }

    // ---- exclude ----

    /// Minimal valid document plus `[[exclude]]` entries, one per prefix.
    fn with_excludes(prefixes: &[&str]) -> String {
        let entries: String = prefixes.iter().map(|p| format!("[[exclude]]\nprefix = \"{p}\"\n")).collect();
        with(&entries)
    }

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn exclude_defaults_to_none() {
        assert!(ok(&with("")).exclude.is_empty());
        assert!(ok(&format!("exclude = []\n{}", with(""))).exclude.is_empty());
    }

    #[test]
    fn exclude_prefixes_and_addresses() {
        let c =
            ok(&with_excludes(&["192.0.2.128/25", "198.51.100.7", "10.0.0.0/8", "0.0.0.0/1", "8.8.8.8/32"]));
        assert_eq!(
            c.exclude,
            [
                net("192.0.2.128/25"),
                net("198.51.100.7/32"),
                net("10.0.0.0/8"),
                net("0.0.0.0/1"),
                net("8.8.8.8/32")
            ]
        );
        // Nested prefixes are not duplicates.
        let c = ok(&with_excludes(&["10.0.0.0/8", "10.1.0.0/16"]));
        assert_eq!(c.exclude.len(), 2);
        // Inline tables are arrays of tables too.
        let c = ok(&format!("exclude = [{{ prefix = \"192.0.2.0/24\" }}]\n{}", with("")));
        assert_eq!(c.exclude, [net("192.0.2.0/24")]);
    }

    #[test]
    fn exclude_prefix_syntax() {
        assert_key_errors(
            "exclude[1].prefix",
            |prefix| with_excludes(&["10.0.0.0/8", prefix]),
            &[
                ("192.0.2", "not an IPv4 address"),
                ("192.0.2.0/", "not a number"),
                ("192.0.2.0/+24", "not a number"),
                ("192.0.2.0/33", "between /0 and /32"),
                ("2001:db8::/32", "not an IPv4 address"),
                ("", "not an IPv4 address"),
                ("192.0.2.129/25", "host bits set; did you mean \"192.0.2.128/25\""),
                ("1.0.0.0/0", "host bits set; did you mean \"0.0.0.0/0\""),
            ],
        );
    }

    #[test]
    fn exclude_entry_shape() {
        let m = key_error(&with("[[exclude]]\n"), "exclude[0].prefix");
        assert!(m.contains("required"), "{m}");
        let m = key_error(&with("[[exclude]]\nprefix = 5\n"), "exclude[0].prefix");
        assert!(m.contains("expected a string, found integer 5"), "{m}");
        let m = key_error(&with("[[exclude]]\nprefix = [\"10.0.0.0/8\"]\n"), "exclude[0].prefix");
        assert!(m.contains("expected a string, found an array"), "{m}");
        let m = key_error(
            &with("[[exclude]]\nprefix = \"10.0.0.0/8\"\nprefixes = \"x\"\n"),
            "exclude[0].prefixes",
        );
        assert!(m.contains("did you mean `prefix`"), "{m}");
        let m = key_error(
            &with("[[exclude]]\nprefix = \"10.0.0.0/8\"\n[[exclude]]\nnetwork = \"x\"\n"),
            "exclude[1].network",
        );
        assert!(m.contains("unknown key; expected one of: prefix"), "{m}");
    }

    #[test]
    fn exclude_must_be_an_array_of_tables() {
        let m = key_error(&format!("exclude = \"192.0.2.0/24\"\n{}", with("")), "exclude");
        assert!(m.contains("expected an array of tables") && m.contains("[[exclude]]"), "{m}");
        assert!(m.contains("found string \"192.0.2.0/24\""), "{m}");
        let m = key_error(&with("[exclude]\nprefix = \"192.0.2.0/24\"\n"), "exclude");
        assert!(m.contains("single table") && m.contains("[[exclude]]"), "{m}");
        let m = key_error(&format!("exclude = [\"192.0.2.0/24\"]\n{}", with("")), "exclude[0]");
        assert!(m.contains("expected a table") && m.contains("found string \"192.0.2.0/24\""), "{m}");
        let m =
            key_error(&format!("exclude = [{{ prefix = \"192.0.2.0/24\" }}, 7]\n{}", with("")), "exclude[1]");
        assert!(m.contains("found integer 7"), "{m}");
    }

    #[test]
    fn exclude_duplicates_name_both() {
        let m =
            key_error(&with_excludes(&["192.0.2.0/24", "10.0.0.0/8", "192.0.2.0/24"]), "exclude[2].prefix");
        assert!(m.contains("duplicates exclude[0].prefix (\"192.0.2.0/24\")"), "{m}");
        // An address and its /32 are the same prefix.
        let m = key_error(&with_excludes(&["198.51.100.7", "198.51.100.7/32"]), "exclude[1].prefix");
        assert!(m.contains("\"198.51.100.7/32\" duplicates exclude[0].prefix (\"198.51.100.7\")"), "{m}");
    }

    #[test]
    fn exclude_must_not_contain_pool_addresses() {
        let pool = "[pool]\naddresses = [\"203.0.113.16/29\", \"203.0.113.40\"]\n";
        let doc = |p: &str| {
            format!("{IFACES}{pool}[[exclude]]\nprefix = \"10.0.0.0/8\"\n[[exclude]]\nprefix = \"{p}\"\n")
        };
        for (prefix, addr, entry) in [
            ("203.0.113.40", "203.0.113.40", "pool.addresses[1] (\"203.0.113.40\")"),
            ("203.0.113.0/24", "203.0.113.16", "pool.addresses[0] (\"203.0.113.16/29\")"),
            ("203.0.113.20/30", "203.0.113.20", "pool.addresses[0] (\"203.0.113.16/29\")"),
            ("203.0.113.32/28", "203.0.113.40", "pool.addresses[1] (\"203.0.113.40\")"),
            ("0.0.0.0/0", "203.0.113.16", "pool.addresses[0]"),
            ("128.0.0.0/1", "203.0.113.16", "pool.addresses[0]"),
        ] {
            let m = key_error(&doc(prefix), "exclude[1].prefix");
            assert!(
                m.contains(&format!("contains the pool address {addr} from {entry}"))
                    && m.contains("NAT traffic"),
                "{prefix}: {m}"
            );
        }
        // Neighbours of the pool are fine.
        let c = ok(&format!(
            "{IFACES}{pool}[[exclude]]\nprefix = \"203.0.113.8/29\"\n[[exclude]]\nprefix = \"203.0.113.24/29\"\n[[exclude]]\nprefix = \"203.0.113.41\"\n"
        ));
        assert_eq!(c.exclude.len(), 3);
    }

    #[test]
    fn exclude_limit() {
        let list = |n: usize| -> Vec<String> {
            (0..n).map(|i| format!("10.{}.{}.0/24", i / 256, i % 256)).collect()
        };
        let refs =
            |v: &[String]| -> String { with_excludes(&v.iter().map(String::as_str).collect::<Vec<_>>()) };
        assert_eq!(ok(&refs(&list(1024))).exclude.len(), 1024);
        let m = key_error(&refs(&list(1025)), "exclude");
        assert!(m.contains("at most 1024 entries") && m.contains("found 1025"), "{m}");
    }

    // ---- forward ----

    fn forward(proto: &str, outside: &str, inside: &str) -> String {
        format!("[[forward]]\nproto = \"{proto}\"\noutside = \"{outside}\"\ninside = \"{inside}\"\n")
    }

    /// Pool 203.0.113.1 with ports 1024-65535 and the given `[[forward]]`s.
    fn with_forwards(forwards: &[(&str, &str, &str)]) -> String {
        with(&forwards.iter().map(|(p, o, i)| forward(p, o, i)).collect::<String>())
    }

    fn sa(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    #[test]
    fn forwards_default_to_none() {
        assert!(ok(&with("")).forwards.is_empty());
        assert!(ok(&format!("forward = []\n{}", with(""))).forwards.is_empty());
    }

    #[test]
    fn forwards_parse() {
        let c = ok(&with_forwards(&[
            ("tcp", "203.0.113.1:8080", "100.64.0.3:80"),
            // Same endpoints on the other protocol are a separate mapping.
            ("udp", "203.0.113.1:8080", "100.64.0.3:80"),
            // Outside ports below, inside and at the ends of pool.ports.
            ("tcp", "203.0.113.1:1", "100.64.0.4:22"),
            ("tcp", "203.0.113.1:1024", "100.64.0.4:1024"),
            ("udp", "203.0.113.1:65535", "100.64.0.5:65535"),
            // One inside host may have many forwarded ports.
            ("tcp", "203.0.113.1:443", "100.64.0.3:443"),
        ]));
        assert_eq!(
            c.forwards,
            [
                Forward { proto: PROTO_TCP, outside: sa("203.0.113.1:8080"), inside: sa("100.64.0.3:80") },
                Forward { proto: PROTO_UDP, outside: sa("203.0.113.1:8080"), inside: sa("100.64.0.3:80") },
                Forward { proto: PROTO_TCP, outside: sa("203.0.113.1:1"), inside: sa("100.64.0.4:22") },
                Forward { proto: PROTO_TCP, outside: sa("203.0.113.1:1024"), inside: sa("100.64.0.4:1024") },
                Forward {
                    proto: PROTO_UDP,
                    outside: sa("203.0.113.1:65535"),
                    inside: sa("100.64.0.5:65535")
                },
                Forward { proto: PROTO_TCP, outside: sa("203.0.113.1:443"), inside: sa("100.64.0.3:443") },
            ]
        );
        // Inline tables work as well.
        let c = ok(&format!(
            "forward = [{{ proto = \"udp\", outside = \"203.0.113.1:53\", inside = \"100.64.0.9:53\" }}]\n{}",
            with("")
        ));
        assert_eq!(
            c.forwards,
            [Forward { proto: PROTO_UDP, outside: sa("203.0.113.1:53"), inside: sa("100.64.0.9:53") }]
        );
    }

    #[test]
    fn forward_required_and_unknown_keys() {
        let o = "outside = \"203.0.113.1:80\"\n";
        let i = "inside = \"100.64.0.3:80\"\n";
        let p = "proto = \"tcp\"\n";
        for (body, key) in [
            (format!("{o}{i}"), "forward[0].proto"),
            (format!("{p}{i}"), "forward[0].outside"),
            (format!("{p}{o}"), "forward[0].inside"),
            (String::new(), "forward[0].proto"),
        ] {
            let m = key_error(&with(&format!("[[forward]]\n{body}")), key);
            assert!(m.contains("required key is missing"), "{key}: {m}");
        }
        let m =
            key_error(&with(&format!("[[forward]]\n{p}{o}{i}protocol = \"tcp\"\n")), "forward[0].protocol");
        assert!(m.contains("expected one of: proto, outside, inside"), "{m}");
        let m = key_error(
            &with(&format!("[[forward]]\n{p}{o}{i}[[forward]]\n{p}{o}{i}insid = \"x\"\n")),
            "forward[1].insid",
        );
        assert!(m.contains("did you mean `inside`"), "{m}");
    }

    #[test]
    fn forward_proto() {
        assert_key_errors(
            "forward[1].proto",
            |v| {
                with(&format!(
                    "{}[[forward]]\nproto = {v}\noutside = \"203.0.113.1:81\"\ninside = \"100.64.0.3:81\"\n",
                    forward("tcp", "203.0.113.1:80", "100.64.0.3:80")
                ))
            },
            &[
                ("\"icmp\"", "expected one of \"tcp\", \"udp\", found \"icmp\""),
                ("\"TCP\"", "found \"TCP\""),
                ("\"\"", "found \"\""),
                ("6", "expected a string, found integer 6"),
            ],
        );
    }

    #[test]
    fn forward_endpoint_syntax() {
        let cases = [
            ("203.0.113.1", "expected an IPv4 address and port such as \"203.0.113.40:8080\""),
            ("", "expected an IPv4 address and port"),
            ("203.0.113.1:", "\"\" is not a port number"),
            ("203.0.113.1:http", "\"http\" is not a port number"),
            ("203.0.113.1:+80", "not a port number"),
            ("203.0.113.1:65536", "port 65536 is above 65535"),
            ("203.0.113.1:0", "port 0 is not valid"),
            ("203.0.113.1:80:90", "\"203.0.113.1:80\" is not an IPv4 address"),
            ("203.0.113:80", "\"203.0.113\" is not an IPv4 address"),
            ("[::1]:80", "not an IPv4 address"),
            (" 203.0.113.1:80", "not an IPv4 address"),
        ];
        assert_key_errors("forward[0].outside", |e| with_forwards(&[("tcp", e, "100.64.0.3:80")]), &cases);
        assert_key_errors("forward[0].inside", |e| with_forwards(&[("tcp", "203.0.113.1:80", e)]), &cases);
        for k in ["outside", "inside"] {
            let doc = with(&format!(
                "[[forward]]\nproto = \"tcp\"\n{}\n",
                if k == "outside" {
                    "outside = 80\ninside = \"100.64.0.3:80\""
                } else {
                    "outside = \"203.0.113.1:80\"\ninside = 80"
                }
            ));
            let m = key_error(&doc, &format!("forward[0].{k}"));
            assert!(m.contains("expected a string, found integer 80"), "{m}");
        }
    }

    #[test]
    fn forward_outside_must_be_a_pool_address() {
        let pool = "[pool]\naddresses = [\"203.0.113.16/29\", \"203.0.113.40\"]\n";
        for outside in ["203.0.113.15:80", "203.0.113.24:80", "198.51.100.1:80", "100.64.0.3:80"] {
            let doc = format!("{IFACES}{pool}{}", forward("udp", outside, "100.64.0.3:80"));
            let m = key_error(&doc, "forward[0].outside");
            let ip = outside.split(':').next().unwrap();
            assert!(
                m.contains(&format!("{ip} is not a pool address"))
                    && m.contains("the outside address must be in pool.addresses"),
                "{outside}: {m}"
            );
        }
        // Network and broadcast addresses of a pool prefix are pool addresses.
        for outside in ["203.0.113.16:80", "203.0.113.23:80", "203.0.113.40:80"] {
            ok(&format!("{IFACES}{pool}{}", forward("udp", outside, "100.64.0.3:80")));
        }
    }

    #[test]
    fn forward_inside_must_be_a_unicast_host() {
        for (inside, why) in [
            ("0.0.0.0:80", "0.0.0.0 is the unspecified address"),
            ("255.255.255.255:80", "255.255.255.255 is the limited broadcast address"),
            ("224.0.0.1:80", "224.0.0.1 is a multicast address"),
            ("239.255.255.250:1900", "239.255.255.250 is a multicast address"),
            ("127.0.0.1:80", "127.0.0.1 is a loopback address"),
        ] {
            let m = key_error(&with_forwards(&[("tcp", "203.0.113.1:80", inside)]), "forward[0].inside");
            assert!(m.contains(why) && m.contains("cannot be the target of a forward"), "{inside}: {m}");
        }
        // Any other unicast address, private or not, is a possible target.
        for inside in ["100.64.0.0:80", "10.0.0.1:80", "192.168.1.255:80", "223.255.255.255:80"] {
            ok(&with_forwards(&[("tcp", "203.0.113.1:80", inside)]));
        }
    }

    #[test]
    fn forward_duplicate_outside() {
        let m = key_error(
            &with_forwards(&[
                ("tcp", "203.0.113.1:8080", "100.64.0.3:80"),
                ("udp", "203.0.113.1:8080", "100.64.0.4:80"),
                ("tcp", "203.0.113.1:8080", "100.64.0.5:80"),
            ]),
            "forward[2].outside",
        );
        assert!(
            m.contains("tcp 203.0.113.1:8080 is already forwarded by forward[0] (to 100.64.0.3:80)"),
            "{m}"
        );
    }

    #[test]
    fn forward_duplicate_inside() {
        let m = key_error(
            &with_forwards(&[
                ("udp", "203.0.113.1:5060", "100.64.0.3:5060"),
                ("tcp", "203.0.113.1:5060", "100.64.0.3:5060"),
                ("udp", "203.0.113.1:5061", "100.64.0.3:5060"),
            ]),
            "forward[2].inside",
        );
        assert!(
            m.contains("udp 100.64.0.3:5060 is already the target of forward[0] (from 203.0.113.1:5060)")
                && m.contains("endpoint-independent"),
            "{m}"
        );
    }

    #[test]
    fn forward_must_be_an_array_of_tables() {
        let m = key_error(&format!("forward = \"203.0.113.1:80\"\n{}", with("")), "forward");
        assert!(m.contains("expected an array of tables") && m.contains("[[forward]]"), "{m}");
        let m = key_error(&with("[forward]\nproto = \"tcp\"\n"), "forward");
        assert!(m.contains("single table") && m.contains("[[forward]]"), "{m}");
        let m = key_error(
            &format!("forward = [\"tcp 203.0.113.1:80 100.64.0.3:80\"]\n{}", with("")),
            "forward[0]",
        );
        assert!(m.contains("expected a table"), "{m}");
    }

    #[test]
    fn forward_limit() {
        let list = |n: usize| -> String {
            (0..n)
                .map(|i| {
                    forward(
                        "udp",
                        &format!("203.0.113.1:{}", 1000 + i),
                        &format!("100.64.{}.{}:53", i / 256, i % 256),
                    )
                })
                .collect()
        };
        assert_eq!(ok(&with(&list(4096))).forwards.len(), 4096);
        let m = key_error(&with(&list(4097)), "forward");
        assert!(m.contains("at most 4096 entries") && m.contains("found 4097"), "{m}");
    }

    // ---- fragments ----

    #[test]
    fn fragments_defaults_and_values() {
        let d = Fragments { timeout: secs(2), max_tracked: 16384, max_held: 256 };
        assert_eq!(ok(&with("")).fragments, d);
        assert_eq!(ok(&with("[fragments]\n")).fragments, d);
        assert_eq!(Fragments::default(), d);
        let c = ok(&with("[fragments]\ntimeout = \"100ms\"\nmax_tracked = 16\nmax_held = 0\n"));
        assert_eq!(
            c.fragments,
            Fragments { timeout: Duration::from_millis(100), max_tracked: 16, max_held: 0 }
        );
        let c = ok(&with("[fragments]\ntimeout = 60\nmax_tracked = 10000000\nmax_held = 65536\n"));
        assert_eq!(c.fragments, Fragments { timeout: secs(60), max_tracked: 10_000_000, max_held: 65536 });
        assert_eq!(
            ok(&with("[fragments]\ntimeout = \"1s500ms\"\n")).fragments.timeout,
            Duration::from_millis(1500)
        );
    }

    #[test]
    fn fragments_errors() {
        assert_key_errors(
            "fragments.timeout",
            |v| with(&format!("[fragments]\ntimeout = {v}\n")),
            &[
                ("\"99ms\"", "between 100ms and 1m, found 99ms"),
                ("\"1m1ms\"", "found 1m1ms"),
                ("61", "found 1m1s"),
                ("0", "found 0s"),
                ("\"2x\"", "unknown unit"),
                ("-1", "negative"),
                ("true", "expected a duration"),
            ],
        );
        assert_key_errors(
            "fragments.max_tracked",
            |v| with(&format!("[fragments]\nmax_tracked = {v}\n")),
            &[
                ("15", "between 16 and 10000000, found 15"),
                ("10000001", "between 16 and 10000000"),
                ("\"16384\"", "expected an integer"),
            ],
        );
        assert_key_errors(
            "fragments.max_held",
            |v| with(&format!("[fragments]\nmax_held = {v}\n")),
            &[
                ("-1", "between 0 and 65536, found -1"),
                ("65537", "between 0 and 65536"),
                ("2.5", "expected an integer"),
            ],
        );
        let m = key_error(&with("[fragments]\nmax_hold = 5\n"), "fragments.max_hold");
        assert!(m.contains("did you mean `max_held`"), "{m}");
        let m = key_error(&with("[fragments]\ntimeouts = \"2s\"\n"), "fragments.timeouts");
        assert!(m.contains("did you mean `timeout`"), "{m}");
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

    #[test]
    fn subscriber_prefixes_default_parse_and_errors() {
        let d = ok(&with(""));
        let want: Vec<Ipv4Net> = DEFAULT_SUBSCRIBERS.iter().map(|p| p.parse().unwrap()).collect();
        assert_eq!(d.nat.subscribers, want, "default: RFC 6598 and RFC 1918 space");
        let c = ok(&with("[nat]\nsubscribers = [\"100.64.0.0/24\", \"192.0.2.7\"]\n"));
        assert_eq!(
            c.nat.subscribers,
            vec!["100.64.0.0/24".parse::<Ipv4Net>().unwrap(), "192.0.2.7/32".parse().unwrap()]
        );
        assert_key_errors(
            "nat.subscribers[1]",
            |v| with(&format!("[nat]\nsubscribers = [\"100.64.0.0/10\", {v}]\n")),
            &[
                ("\"100.64.1.0/24\"", "overlaps nat.subscribers[0]"),
                ("\"10.0.0.1/8\"", "host bits set"),
                ("\"10.0.0.0/33\"", "out of range"),
                ("\"ten\"", "not an IPv4 address"),
                ("5", "expected a string"),
            ],
        );
        key_error(&with("[nat]\nsubscribers = []\n"), "nat.subscribers");
        let det = "[nat]\nmode = \"deterministic\"\ndeterministic_subscribers = \"100.64.0.0/24\"\nsubscribers = [\"100.64.0.0/24\"]\n";
        let m = key_error(&with(det), "nat.subscribers");
        assert!(m.contains("deterministic_subscribers"), "{m}");
    }

    #[test]
    fn unreachable_code_choices() {
        assert_eq!(ok(&with("")).nat.unreachable_code.code(), 1, "RFC 6888 REQ-8 by default");
        let c = ok(&with("[nat]\nunreachable_code = \"admin-prohibited\"\n"));
        assert_eq!(c.nat.unreachable_code.code(), 13);
        let c = ok(&with("[nat]\nunreachable_code = \"host-unreachable\"\n"));
        assert_eq!(c.nat.unreachable_code.code(), 1);
        assert_key_errors(
            "nat.unreachable_code",
            |v| with(&format!("[nat]\nunreachable_code = {v}\n")),
            &[("\"prohibited\"", "host-unreachable"), ("13", "expected a string")],
        );
    }

    #[test]
    fn sessions_per_subscriber_limit() {
        assert_eq!(ok(&with("")).limits.max_sessions_per_subscriber, DEFAULT_SESSIONS_PER_SUBSCRIBER);
        assert_eq!(
            ok(&with("[limits]\nmax_sessions_per_subscriber = 0\n")).limits.max_sessions_per_subscriber,
            0
        );
        assert_eq!(
            ok(&with("[limits]\nmax_sessions_per_subscriber = 1000\n")).limits.max_sessions_per_subscriber,
            1000
        );
        assert_key_errors(
            "limits.max_sessions_per_subscriber",
            |v| with(&format!("[limits]\nmax_sessions_per_subscriber = {v}\n")),
            &[("-1", "between"), ("\"many\"", "expected an integer")],
        );
    }

    #[test]
    fn virtual_macs_parse_and_errors() {
        assert!(ok(&with("")).interfaces.virtual_macs.is_empty());
        assert!(ok(&format!(
            "[interfaces]\ninside = [\"lan0\"]\noutside = [\"wan0\"]\nvirtual_macs = []\n{POOL}"
        ))
        .interfaces
        .virtual_macs
        .is_empty());
        let doc = |v: &str| {
            format!("[interfaces]\ninside = [\"lan0\"]\noutside = [\"wan0\"]\nvirtual_macs = {v}\n{POOL}")
        };
        assert_eq!(ok(&doc("[\"00:00:5e:00:01:01\"]")).interfaces.virtual_macs, vec![[0, 0, 0x5e, 0, 1, 1]]);
        assert_key_errors(
            "interfaces.virtual_macs[0]",
            doc,
            &[
                ("[\"00:00:5e:00:01\"]", "not a MAC address"),
                ("[\"00:00:5e:00:01:zz\"]", "not a MAC address"),
                ("[\"01:00:5e:00:00:01\"]", "multicast"),
                ("[\"00:00:00:00:00:00\"]", "all-zero"),
            ],
        );
        key_error(&doc("[\"00:00:5e:00:01:01\", \"00:00:5e:00:01:01\"]"), "interfaces.virtual_macs[1]");
        key_error(&doc("[\"02:00:00:00:00:01\", \"02:00:00:00:00:02\", \"02:00:00:00:00:03\", \"02:00:00:00:00:04\"]"), "interfaces.virtual_macs");
    }
}
