// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix lookup IP:PORT`: who holds an outside endpoint ("who is this"), for an abuse
//! desk or a lawful request. Read-only, from the pinned tables, a handful of single-word
//! reads (no table walk):
//! - dynamic mode: the port's block (`tables::block_of`) and its block word, whose owner is
//!   the subscriber; since when, from `nx_block_time` (CLOCK_TAI, shown in UTC); the port
//!   words of the endpoint (`nx_ports`) for the exact mapping, or the hold-down a released
//!   port is in. Port-class ports (1-1023) and static forwards have no block: their word
//!   names the inside endpoint.
//! - deterministic mode (RFC 7422): the subscriber is arithmetic on the configuration in
//!   `nx_config` (`tables::det_first`), so the answer holds for any time while that
//!   configuration is unchanged.
//!
//! `--at TIME`: dynamic mode answers only when the live tables cover TIME (the block is
//! held now and was allocated at or before TIME); for anything older the NAT log holds the
//! history. Output format and exit codes: docs/design/lookup.md.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};

use serde::Serialize;

use crate::abi::{CF_PORT_CLASS, PORT_HELD, PORT_STATIC, PORT_USED, PROTO_ICMP, PROTO_TCP, PROTO_UDP};
use crate::dataplane::ip_from_be;
use crate::skel::types::nx_config;
use crate::tables::ports::{held_since, port_state, port_word_ip, word_port};
use crate::tables::{block_of, det_first, proto_name, TableError, Tables};

type Result<T> = std::result::Result<T, TableError>;

/// Where the NAT log's history is, named in every refusal for a time the tables cannot
/// answer.
pub const LOG_HINT: &str = "the NAT log (IPFIX/syslog, docs/OPERATIONS.md) holds the history";

// ---- the question ----------------------------------------------------------------------------

/// What `natrix lookup` is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    pub outside: SocketAddrV4,
    /// Only this protocol's mapping (IP protocol number); None: every protocol's.
    pub proto: Option<u8>,
    /// The time the answer is for; None: now.
    pub at: Option<Time>,
}

/// An instant as given on the command line, and how precisely: "14:02:11" means the whole
/// second from 14:02:11.000, "14:02:11.5" the tenth of a second from 14:02:11.500.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Time {
    /// UTC (CLOCK_REALTIME) nanoseconds since the Unix epoch.
    pub utc_ns: i128,
    /// The span the notation stands for, in nanoseconds (1 s without a fraction).
    pub span_ns: i128,
}

const NS: i128 = 1_000_000_000;

/// Parses `IP:PORT` (an IPv4 address and a port, "203.0.113.16:1500").
pub fn parse_endpoint(s: &str) -> std::result::Result<SocketAddrV4, String> {
    s.parse()
        .map_err(|_| format!("{s:?} is not IP:PORT (an IPv4 address and a port, e.g. 203.0.113.16:1500)"))
}

/// Parses a protocol name: tcp, udp or icmp.
pub fn parse_proto(s: &str) -> std::result::Result<u8, String> {
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Ok(PROTO_TCP),
        "udp" => Ok(PROTO_UDP),
        "icmp" => Ok(PROTO_ICMP),
        _ => Err(format!("{s:?} is not a protocol natrix translates: tcp, udp or icmp")),
    }
}

/// Parses a time: RFC 3339 (`2026-11-26T14:02:11Z`, a fraction and a `+hh:mm` offset
/// allowed) or Unix seconds (`1795615331`, a fraction allowed).
pub fn parse_time(s: &str) -> std::result::Result<Time, String> {
    let bad = |why: &str| {
        format!("{s:?} is not a time: {why} (RFC 3339 such as 2026-11-26T14:02:11Z, or Unix seconds)")
    };
    if s.bytes().next().is_some_and(|c| c.is_ascii_digit()) && !s.contains(['-', ':']) {
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        if s.ends_with('.') {
            return Err(bad("digits must follow the decimal point"));
        }
        if int.is_empty() || !int.bytes().all(|c| c.is_ascii_digit()) || int.len() > 12 {
            return Err(bad("Unix seconds are digits"));
        }
        let (f_ns, span) = fraction(frac).ok_or_else(|| bad("a bad fraction of a second"))?;
        let secs: i128 = int.parse().map_err(|_| bad("Unix seconds are digits"))?;
        return Ok(Time { utc_ns: secs * NS + f_ns, span_ns: span });
    }
    rfc3339(s).ok_or_else(|| bad("not RFC 3339"))
}

/// Digits after a decimal point as nanoseconds, and the span their last digit stands for
/// (no digits: 0 and a whole second). None when they are not digits.
fn fraction(frac: &str) -> Option<(i128, i128)> {
    if frac.is_empty() {
        return Some((0, NS));
    }
    if !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    // beyond nanoseconds the digits say nothing the clocks could
    let d = &frac[..frac.len().min(9)];
    let scale = 10i128.pow(9 - d.len() as u32);
    Some((d.parse::<i128>().ok()? * scale, scale))
}

/// RFC 3339 section 5.6 date-time: `YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm)`, `T` and
/// `Z` in either case or a space for `T` (as the RFC allows).
fn rfc3339(s: &str) -> Option<Time> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let p = b.get(r)?;
        p.iter().all(u8::is_ascii_digit).then(|| p.iter().fold(0i64, |n, c| n * 10 + i64::from(c - b'0')))
    };
    let sep = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (y, mo, d, h, mi, sec) =
        (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac = "";
    if sep(i, b".") {
        let n = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        frac = &s[i + 1..i + 1 + n];
        i += 1 + n;
    }
    let (f_ns, span) = fraction(frac)?;
    let offset_s = match b.get(i..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), ..] if b.len() == i + 6 && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            (oh * 3600 + om * 60) * if *sign == b'-' { -1 } else { 1 }
        }
        _ => return None,
    };
    // a leap second (:60) is the instant after :59, as POSIX time counts it
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    Some(Time { utc_ns: i128::from(secs) * NS + f_ns, span_ns: span })
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (H. Hinnant's civil_from_days).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// UTC nanoseconds since the epoch as RFC 3339 with milliseconds: `2026-11-26T14:02:11.123Z`.
pub fn rfc3339_ms(utc_ns: i128) -> String {
    let ms = utc_ns.div_euclid(1_000_000) as i64;
    let (secs, ms) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, mo, d) = civil_from_days(days);
    format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", sod / 3600, sod / 60 % 60, sod % 60)
}

// ---- what is read ----------------------------------------------------------------------------

/// What a lookup reads: single words of the live tables (`Tables`), or a test's.
pub trait Source {
    fn config(&self) -> Result<nx_config>;
    /// The pool, in pool-index order.
    fn pool(&self) -> Result<Vec<Ipv4Addr>>;
    fn block_word(&self, gid: u32) -> Result<u64>;
    /// CLOCK_TAI nanoseconds of block `gid`'s last allocation, 0 when not known.
    fn block_time(&self, gid: u32) -> Result<u64>;
    fn port_word(&self, addr_idx: u32, proto: u8, port: u16) -> Result<u64>;
}

impl Source for Tables {
    fn config(&self) -> Result<nx_config> {
        Tables::config(self)
    }
    fn pool(&self) -> Result<Vec<Ipv4Addr>> {
        Tables::pool(self)
    }
    fn block_word(&self, gid: u32) -> Result<u64> {
        Tables::block_word(self, gid)
    }
    fn block_time(&self, gid: u32) -> Result<u64> {
        Tables::block_time(self, gid)
    }
    fn port_word(&self, addr_idx: u32, proto: u8, port: u16) -> Result<u64> {
        Tables::port_word(self, addr_idx, proto, port)
    }
}

/// The clocks at the time of the lookup: what turns the tables' times into UTC.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// CLOCK_REALTIME, ns.
    pub realtime_ns: i128,
    /// CLOCK_MONOTONIC, ns (a HELD word's release second is on this clock).
    pub monotonic_ns: i128,
    /// CLOCK_REALTIME − CLOCK_TAI, ns (nx_block_time is on CLOCK_TAI).
    pub tai_to_utc_ns: i64,
}

impl Clock {
    pub fn now() -> Self {
        let read = |c: libc::clockid_t| {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime writes the timespec it is given and nothing else.
            unsafe { libc::clock_gettime(c, &mut ts) };
            i128::from(ts.tv_sec) * NS + i128::from(ts.tv_nsec)
        };
        Clock {
            realtime_ns: read(libc::CLOCK_REALTIME),
            monotonic_ns: read(libc::CLOCK_MONOTONIC),
            tai_to_utc_ns: crate::natlog::source::tai_to_utc_ns(),
        }
    }

    /// A CLOCK_MONOTONIC second as UTC ns.
    fn mono_s_to_utc(&self, s: u32) -> i128 {
        self.realtime_ns - (self.monotonic_ns - i128::from(s) * NS)
    }
}

// ---- the answer ------------------------------------------------------------------------------

/// The answer (`natrix lookup --json`; the field names are the contract,
/// docs/design/lookup.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    /// The endpoint asked about, "IP:PORT".
    pub outside: String,
    /// The protocol asked about; null: every protocol.
    pub proto: Option<&'static str>,
    /// The time asked about (RFC 3339 UTC); null: now.
    pub at: Option<String>,
    /// "dynamic" or "deterministic".
    pub mode: Mode,
    /// The subscriber (inside address) holding the endpoint; null: nobody (exit 1).
    pub inside: Option<String>,
    /// How the holder holds it; null with `inside`.
    pub kind: Option<Kind>,
    /// Dynamic mode: the port's block, when the port lies in one.
    pub block: Option<Ports>,
    /// Deterministic mode: the range the port lies in, when it lies in one.
    pub range: Option<Ports>,
    /// Since when the holder holds the block (RFC 3339 UTC, milliseconds); null: not known
    /// (no block, the time was not recorded, or deterministic mode, where it is the
    /// configuration's).
    pub since: Option<String>,
    /// The port's words now, per protocol, that are in use or on hold-down.
    pub mappings: Vec<Mapping>,
    /// Why nobody is named (exit 1); null otherwise.
    pub reason: Option<String>,
    /// Anything else the reader must know (deterministic mode's validity, several holders).
    pub notes: Vec<String>,
}

/// How the tables decide who holds an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Dynamic,
    Deterministic,
}

/// How the holder holds the endpoint (`kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// It owns the port's block (dynamic mode).
    Block,
    /// A port below 1024 its mapping holds, outside every block (`nat.port_class`).
    PortClass,
    /// A configured `[[forward]]`.
    StaticForward,
    /// A mapping outside every block and not of the port class (not made by natrix today;
    /// or tables that disagree with themselves, which `natrix check-tables` names).
    Mapping,
    /// The port lies in its range (deterministic mode).
    Deterministic,
}

impl Kind {
    fn words(self) -> &'static str {
        match self {
            Kind::Block => "block",
            Kind::PortClass => "port class",
            Kind::StaticForward => "static forward",
            Kind::Mapping => "mapping",
            Kind::Deterministic => "deterministic range",
        }
    }
}

/// A port word's state as shown (FREE words are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WordState {
    /// A mapping.
    Used,
    /// Released, in hold-down.
    Held,
    /// A static forward.
    Static,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Ports {
    pub first: u16,
    pub last: u16,
}

/// One protocol's port word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mapping {
    pub proto: &'static str,
    pub state: WordState,
    /// The inside endpoint ("used", "static"); null for "held".
    pub inside_ip: Option<String>,
    pub inside_port: Option<u16>,
    /// "held": when the port was released (RFC 3339 UTC, to the second) and when its
    /// hold-down ends.
    pub released: Option<String>,
    pub hold_down_until: Option<String>,
}

impl Answer {
    fn new(q: &Query, mode: Mode) -> Self {
        Answer {
            outside: q.outside.to_string(),
            proto: q.proto.map(proto_name),
            at: q.at.map(|t| rfc3339_ms(t.utc_ns)),
            mode,
            inside: None,
            kind: None,
            block: None,
            range: None,
            since: None,
            mappings: Vec::new(),
            reason: None,
            notes: Vec::new(),
        }
    }

    /// Nobody is named, for `why`.
    fn nobody(mut self, why: String) -> Self {
        self.inside = None;
        self.kind = None;
        self.reason = Some(why);
        self
    }

    /// Whether someone holds the endpoint (exit 0).
    pub fn found(&self) -> bool {
        self.inside.is_some()
    }

    /// The text output: one fact a line.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let mut line = |k: &str, v: &str| {
            let _ = writeln!(o, "{:<9} {v}", format!("{k}:"));
        };
        line("outside", &self.outside);
        line("inside", self.inside.as_deref().unwrap_or("nobody"));
        if let Some(a) = &self.at {
            line("at", a);
        }
        line("mode", if self.mode == Mode::Dynamic { "dynamic" } else { "deterministic" });
        if let Some(k) = self.kind {
            line("kind", k.words());
        }
        if let Some(b) = self.block {
            line("block", &format!("ports {}-{}", b.first, b.last));
        }
        if let Some(r) = self.range {
            line("range", &format!("ports {}-{}", r.first, r.last));
        }
        if self.kind == Some(Kind::Block) {
            line("since", self.since.as_deref().unwrap_or("not known (no allocation time recorded)"));
        }
        for m in &self.mappings {
            let v = match (m.state, &m.inside_ip, m.inside_port) {
                (WordState::Held, ..) => format!(
                    "on hold-down: released {}, free again from {}",
                    m.released.as_deref().unwrap_or("?"),
                    m.hold_down_until.as_deref().unwrap_or("?")
                ),
                (st, Some(ip), Some(p)) => {
                    format!("{ip}:{p}{}", if st == WordState::Static { " (static forward)" } else { "" })
                }
                _ => "?".to_owned(),
            };
            line(m.proto, &v);
        }
        for n in &self.notes {
            line("note", n);
        }
        o
    }
}

/// A port word in use or on hold-down, as the answer shows it; None for a FREE word.
fn mapping(proto: u8, w: u64, hold_down_s: u32, clock: &Clock) -> Option<Mapping> {
    let st = port_state(w);
    let named = |state| Mapping {
        proto: proto_name(proto),
        state,
        inside_ip: Some(ip_from_be(port_word_ip(w)).to_string()),
        inside_port: Some(word_port(w)),
        released: None,
        hold_down_until: None,
    };
    match st {
        PORT_USED => Some(named(WordState::Used)),
        PORT_STATIC => Some(named(WordState::Static)),
        PORT_HELD => {
            let rel = clock.mono_s_to_utc(held_since(w));
            Some(Mapping {
                proto: proto_name(proto),
                state: WordState::Held,
                inside_ip: None,
                inside_port: None,
                released: Some(rfc3339_ms(rel)),
                hold_down_until: Some(rfc3339_ms(rel + i128::from(hold_down_s) * NS)),
            })
        }
        _ => None,
    }
}

/// Answers `q` from `src` at `clock`.
pub fn lookup(src: &impl Source, q: &Query, clock: &Clock) -> Result<Answer> {
    let cfg = src.config()?;
    let det = cfg.det_count != 0;
    let mut a = Answer::new(q, if det { Mode::Deterministic } else { Mode::Dynamic });
    let pool = src.pool()?;
    let (ip, port) = (*q.outside.ip(), q.outside.port());
    let Some(addr_idx) = pool.iter().position(|p| *p == ip) else {
        return Ok(a.nobody(format!("{ip} is not a pool address")));
    };
    let addr_idx = addr_idx as u32;
    let protos = q.proto.map_or_else(|| vec![PROTO_TCP, PROTO_UDP, PROTO_ICMP], |p| vec![p]);
    let mut words = Vec::new();
    for p in protos {
        let w = src.port_word(addr_idx, p, port)?;
        if let Some(m) = mapping(p, w, cfg.hold_down_s, clock) {
            words.push((p, w));
            a.mappings.push(m);
        }
    }
    if det {
        deterministic(&cfg, a, addr_idx, port, q)
    } else {
        dynamic(src, &cfg, a, addr_idx, &words, q, clock)
    }
}

/// Deterministic mode: subscriber i of the prefix holds ports port_lo + (i % per_addr) × n
/// .. + n − 1 of pool address i / per_addr (struct nx_config; `tables::det_first`).
fn deterministic(cfg: &nx_config, mut a: Answer, addr_idx: u32, port: u16, q: &Query) -> Result<Answer> {
    let n = u32::from(cfg.det_ports);
    let Some(first) = det_first(cfg, u32::from(port)) else {
        let lo = u32::from(cfg.port_lo);
        let hi = lo + cfg.det_per_addr * n;
        return Ok(a.nobody(format!(
            "port {port} is outside every deterministic range (ports {lo}-{} of each pool address)",
            hi.saturating_sub(1)
        )));
    };
    let range = Ports { first: first as u16, last: (first + n - 1) as u16 };
    a.range = Some(range);
    let i =
        u64::from(addr_idx) * u64::from(cfg.det_per_addr) + u64::from((first - u32::from(cfg.port_lo)) / n);
    if i >= u64::from(cfg.det_count) {
        return Ok(a.nobody(format!(
            "nobody holds {}: range {}-{} would be subscriber {i}'s, and nat.deterministic_subscribers has {}",
            q.outside, range.first, range.last, cfg.det_count
        )));
    }
    let sub = Ipv4Addr::from(cfg.det_base.wrapping_add(i as u32));
    a.inside = Some(sub.to_string());
    a.kind = Some(Kind::Deterministic);
    a.notes.push(
        "computed from the configuration: valid for any time while the pool, pool.ports, \
         nat.deterministic_subscribers and nat.deterministic_ports are unchanged"
            .into(),
    );
    Ok(a)
}

/// The block a port lies in, its owner and since when, read so that owner and time belong
/// to one allocation: the block word before and after the time is the same.
fn block_state(src: &impl Source, gid: u32) -> Result<(u32, u64)> {
    let mut w = src.block_word(gid)?;
    for _ in 0..8 {
        let t = src.block_time(gid)?;
        let again = src.block_word(gid)?;
        if again as u32 == w as u32 {
            return Ok((w as u32, t));
        }
        w = again;
    }
    // a block reallocated eight times within a few syscalls: no time, the owner stands
    Ok((w as u32, 0))
}

fn dynamic(
    src: &impl Source,
    cfg: &nx_config,
    mut a: Answer,
    addr_idx: u32,
    words: &[(u8, u64)],
    q: &Query,
    clock: &Clock,
) -> Result<Answer> {
    let port = q.outside.port();
    let block = block_of(cfg, addr_idx, u32::from(port));
    let (mut owner, mut since_ns) = (0u32, None);
    if let Some((gid, first)) = block {
        a.block = Some(Ports { first: first as u16, last: (first + u32::from(cfg.block_size) - 1) as u16 });
        let (o, t) = block_state(src, gid)?;
        owner = o;
        if o != 0 && t != 0 {
            since_ns = Some(i128::from(t) + i128::from(clock.tai_to_utc_ns));
        }
    }
    // the words that name someone: a mapping or a static forward
    let named: Vec<(u8, u64)> =
        words.iter().copied().filter(|(_, w)| matches!(port_state(*w), PORT_USED | PORT_STATIC)).collect();
    let name = |w: u64| ip_from_be(port_word_ip(w)).to_string();
    let owner_s = (owner != 0).then(|| ip_from_be(owner).to_string());
    let outside_block = || {
        if u32::from(port) < u32::from(cfg.port_lo) && cfg.flags & CF_PORT_CLASS != 0 {
            Kind::PortClass
        } else {
            Kind::Mapping
        }
    };
    // who: with --proto the word of that protocol decides (a static forward is its inside
    // host's, whoever owns the block); the block's owner otherwise
    let exact = q.proto.and_then(|_| named.first().copied());
    match (exact, &owner_s) {
        (Some((_, w)), _) if port_state(w) == PORT_STATIC => {
            a.inside = Some(name(w));
            a.kind = Some(Kind::StaticForward);
        }
        (Some((_, w)), Some(o)) => {
            a.inside = Some(name(w));
            a.kind = Some(Kind::Block);
            if name(w) != *o {
                // a broken invariant (check-tables: port_outside_owner_block): the word is
                // what translates the packets
                a.kind = Some(Kind::Mapping);
                a.notes.push(format!("the block's owner is {o}: the tables disagree (natrix check-tables)"));
            }
        }
        (_, Some(o)) => {
            a.inside = Some(o.clone());
            a.kind = Some(Kind::Block);
            for (p, w) in &named {
                if name(*w) != *o {
                    a.notes.push(format!(
                        "{}: {} to {}, not the block's owner",
                        proto_name(*p),
                        if port_state(*w) == PORT_STATIC { "a static forward" } else { "a mapping" },
                        name(*w)
                    ));
                }
            }
        }
        (_, None) => {
            let Some(&(_, w)) = named.first() else {
                let why = match a.block {
                    Some(b) => format!(
                        "nobody holds {}: its block (ports {}-{}) is free{}",
                        q.outside,
                        b.first,
                        b.last,
                        held_note(&a)
                    ),
                    None => format!("nobody holds {}: no mapping holds the port{}", q.outside, held_note(&a)),
                };
                return Ok(a.nobody(why));
            };
            a.inside = Some(name(w));
            a.kind = Some(if port_state(w) == PORT_STATIC { Kind::StaticForward } else { outside_block() });
            if named.iter().any(|(_, x)| name(*x) != name(w)) {
                a.notes.push(
                    "a different subscriber for each protocol (see the mappings): ask with --proto".into(),
                );
            }
        }
    }
    match a.kind {
        Some(Kind::Block) => a.since = since_ns.map(rfc3339_ms),
        // a static forward holds its port whatever the block around it: not by a block
        Some(Kind::StaticForward) => {
            if let (Some(b), Some(o)) = (a.block.take(), &owner_s) {
                a.notes.push(format!("the block around it (ports {}-{}) is {o}'s", b.first, b.last));
            }
        }
        _ => {}
    }
    let Some(at) = q.at else { return Ok(a) };
    a.notes.push("the mappings are the tables' state now, not at that time".into());
    // the live tables know the present holder of a block since its allocation, nothing
    // before that and nothing of a holder without a block
    let refuse = |mut a: Answer, detail: String| {
        let why =
            format!("the live tables cannot answer for {}: {detail}; {LOG_HINT}", rfc3339_ms(at.utc_ns));
        // nothing of the present holder's that could be read as the answer for that time
        a.mappings.clear();
        a.notes.clear();
        Ok(a.nobody(why))
    };
    if at.utc_ns > clock.realtime_ns {
        return refuse(a, "that time is in the future".into());
    }
    match (a.kind, since_ns) {
        (Some(Kind::Block), Some(since)) if since < at.utc_ns + at.span_ns => Ok(a),
        (Some(Kind::Block), Some(since)) => {
            let detail = format!(
                "the block of {} was allocated to its present holder at {}, after that time",
                q.outside,
                rfc3339_ms(since)
            );
            refuse(a, detail)
        }
        (Some(Kind::Block), None) => refuse(a, "the block's allocation time was not recorded".into()),
        (Some(k), _) => {
            let what = match k {
                Kind::PortClass => "a port-class port (below 1024) has no block",
                Kind::StaticForward => "a static forward has no block",
                _ => "a mapping outside every block has no block",
            };
            refuse(a, format!("{what}, and they do not record since when it is held"))
        }
        (None, _) => Ok(a),
    }
}

/// "; udp port on hold-down since ..." for a refusal that has HELD words to show.
fn held_note(a: &Answer) -> String {
    a.mappings
        .iter()
        .filter(|m| m.state == WordState::Held)
        .map(|m| format!("; {} port on hold-down since {}", m.proto, m.released.as_deref().unwrap_or("?")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::ports::{held_word, port_word, static_word};
    use std::collections::HashMap;

    #[test]
    fn times_parse() {
        let t = |s: &str| parse_time(s).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t("1970-01-01T00:00:00Z"), Time { utc_ns: 0, span_ns: NS });
        assert_eq!(t("2023-11-14T22:13:20Z").utc_ns, 1_700_000_000 * NS);
        assert_eq!(t("2023-11-14t22:13:20z").utc_ns, 1_700_000_000 * NS);
        assert_eq!(t("2023-11-14 22:13:20Z").utc_ns, 1_700_000_000 * NS);
        assert_eq!(t("2023-11-15T00:13:20+02:00").utc_ns, 1_700_000_000 * NS);
        assert_eq!(t("2023-11-14T21:43:20-00:30").utc_ns, 1_700_000_000 * NS);
        assert_eq!(
            t("2023-11-14T22:13:20.25Z"),
            Time { utc_ns: 1_700_000_000 * NS + NS / 4, span_ns: NS / 100 }
        );
        assert_eq!(t("2023-11-14T22:13:20.1234567891Z").utc_ns, 1_700_000_000 * NS + 123_456_789);
        assert_eq!(t("2024-02-29T00:00:00Z").utc_ns, 1_709_164_800 * NS);
        assert_eq!(t("2000-03-01T00:00:00Z").utc_ns, 951_868_800 * NS);
        assert_eq!(t("1700000000"), Time { utc_ns: 1_700_000_000 * NS, span_ns: NS });
        assert_eq!(t("1700000000.5"), Time { utc_ns: 1_700_000_000 * NS + NS / 2, span_ns: NS / 10 });
        for bad in [
            "",
            "yesterday",
            "2023-11-14T22:13:20",
            "2023-11-14",
            "2023-02-29T00:00:00Z",
            "2023-13-01T00:00:00Z",
            "2023-11-14T24:00:00Z",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20+2:00",
            "2023-11-14T22:13:20+02:00x",
            "1700000000.",
            "17000x",
            "-5",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn times_format() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_700_000_000 * NS + 123_999_999), "2023-11-14T22:13:20.123Z");
        assert_eq!(rfc3339_ms(1_709_164_800 * NS - 1), "2024-02-28T23:59:59.999Z");
        assert_eq!(rfc3339_ms(-NS), "1969-12-31T23:59:59.000Z");
        // every day of 400 years (a whole Gregorian cycle) round-trips
        for day in -200 * 366..200 * 366 {
            let s = rfc3339_ms(i128::from(day) * 86_400 * NS + 3_723_004_000_000);
            let back = parse_time(&s.replace(".004Z", "Z")).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back.utc_ns, i128::from(day) * 86_400 * NS + 3_723 * NS, "{s}");
        }
    }

    #[test]
    fn json_names() {
        let j = |v: serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        assert_eq!(j(serde_json::json!(Kind::PortClass)), "port_class");
        assert_eq!(j(serde_json::json!(Kind::StaticForward)), "static_forward");
        assert_eq!(j(serde_json::json!(Mode::Deterministic)), "deterministic");
        assert_eq!(j(serde_json::json!(WordState::Held)), "held");
    }

    #[test]
    fn endpoints_and_protocols_parse() {
        assert_eq!(parse_endpoint("203.0.113.16:1500"), Ok("203.0.113.16:1500".parse().unwrap()));
        for bad in ["203.0.113.16", "203.0.113.16:70000", "host:80", "[::1]:80", ""] {
            assert!(parse_endpoint(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_proto("UDP"), Ok(PROTO_UDP));
        assert!(parse_proto("sctp").is_err());
    }

    /// Tables as a few words.
    #[derive(Default)]
    struct Fake {
        cfg: nx_config,
        pool: Vec<Ipv4Addr>,
        blocks: HashMap<u32, (u64, u64)>,
        ports: HashMap<(u32, u8, u16), u64>,
    }

    impl Source for Fake {
        fn config(&self) -> Result<nx_config> {
            Ok(self.cfg)
        }
        fn pool(&self) -> Result<Vec<Ipv4Addr>> {
            Ok(self.pool.clone())
        }
        fn block_word(&self, gid: u32) -> Result<u64> {
            Ok(self.blocks.get(&gid).map_or(0, |b| b.0))
        }
        fn block_time(&self, gid: u32) -> Result<u64> {
            Ok(self.blocks.get(&gid).map_or(0, |b| b.1))
        }
        fn port_word(&self, a: u32, p: u8, port: u16) -> Result<u64> {
            Ok(self.ports.get(&(a, p, port)).copied().unwrap_or(0))
        }
    }

    const POOL0: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 16);
    const POOL1: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 17);
    const SUB: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 2);
    const OTHER: Ipv4Addr = Ipv4Addr::new(100, 64, 1, 2);
    /// CLOCK_TAI 37 s ahead; realtime 2023-11-14T22:13:20Z; monotonic 1000 s.
    const CLOCK: Clock =
        Clock { realtime_ns: 1_700_000_000 * NS, monotonic_ns: 1000 * NS, tai_to_utc_ns: -37_000_000_000 };

    fn be(ip: Ipv4Addr) -> u32 {
        u32::from_ne_bytes(ip.octets())
    }

    /// Two pool addresses, ports 1024-65535 in blocks of 256 (252 per address), port class.
    fn dynamic_fake() -> Fake {
        let mut f = Fake { pool: vec![POOL0, POOL1], ..Default::default() };
        f.cfg.port_lo = 1024;
        f.cfg.port_hi = 65535;
        f.cfg.block_size = 256;
        f.cfg.blocks_per_addr = 252;
        f.cfg.n_addrs = 2;
        f.cfg.hold_down_s = 120;
        f.cfg.flags = CF_PORT_CLASS;
        f
    }

    fn q(s: &str, proto: Option<u8>, at: Option<&str>) -> Query {
        Query { outside: s.parse().unwrap(), proto, at: at.map(|t| parse_time(t).unwrap()) }
    }

    #[test]
    fn dynamic_block_owner_and_mappings() {
        let mut f = dynamic_fake();
        // POOL1 block 1 (ports 1280-1535) is SUB's since 60 s before now (TAI clock)
        let tai = (1_700_000_000 - 60 + 37) * 1_000_000_000u64 + 5_000_000;
        f.blocks.insert(252 + 1, (u64::from(be(SUB)) | 3 << 32, tai));
        f.ports.insert((1, PROTO_UDP, 1300), port_word(be(SUB), 40000));
        f.ports.insert((1, PROTO_TCP, 1300), held_word(900));
        let a = lookup(&f, &q("203.0.113.17:1300", None, None), &CLOCK).unwrap();
        assert_eq!(a.inside.as_deref(), Some("100.64.0.2"));
        assert_eq!((a.kind, a.mode), (Some(Kind::Block), Mode::Dynamic));
        assert_eq!(a.block, Some(Ports { first: 1280, last: 1535 }));
        assert_eq!(a.since.as_deref(), Some("2023-11-14T22:12:20.005Z"));
        assert_eq!(a.mappings.len(), 2);
        assert_eq!((a.mappings[0].proto, a.mappings[0].state), ("tcp", WordState::Held));
        // released at monotonic 900 s, 100 s before now; hold-down 120 s
        assert_eq!(a.mappings[0].released.as_deref(), Some("2023-11-14T22:11:40.000Z"));
        assert_eq!(a.mappings[0].hold_down_until.as_deref(), Some("2023-11-14T22:13:40.000Z"));
        assert_eq!(
            (a.mappings[1].proto, a.mappings[1].inside_ip.as_deref(), a.mappings[1].inside_port),
            ("udp", Some("100.64.0.2"), Some(40000))
        );
        assert!(a.found() && a.reason.is_none());
        // --proto udp: the exact mapping only
        let u = lookup(&f, &q("203.0.113.17:1300", Some(PROTO_UDP), None), &CLOCK).unwrap();
        assert_eq!((u.inside.as_deref(), u.mappings.len()), (Some("100.64.0.2"), 1));
        // --proto icmp: no mapping, but the block is SUB's
        let i = lookup(&f, &q("203.0.113.17:1300", Some(PROTO_ICMP), None), &CLOCK).unwrap();
        assert_eq!((i.inside.as_deref(), i.mappings.len()), (Some("100.64.0.2"), 0));
        // --at: from the allocation (its second counts whole) to now
        for (at, ok) in [
            ("2023-11-14T22:12:20Z", true),
            ("2023-11-14T22:12:20.004Z", false),
            ("2023-11-14T22:12:19Z", false),
            ("2023-11-14T22:13:20Z", true),
            ("1700000000", true),
            ("2023-11-14T22:13:21Z", false),
        ] {
            let r = lookup(&f, &q("203.0.113.17:1300", None, Some(at)), &CLOCK).unwrap();
            assert_eq!(r.found(), ok, "--at {at}: {r:?}");
            if !ok {
                assert!(r.reason.as_deref().unwrap().contains(LOG_HINT), "{r:?}");
            }
        }
        // the same block without a recorded time: no since, no --at
        f.blocks.insert(253, (u64::from(be(SUB)), 0));
        let n = lookup(&f, &q("203.0.113.17:1300", None, None), &CLOCK).unwrap();
        assert_eq!((n.since.as_deref(), n.found()), (None, true));
        assert!(!lookup(&f, &q("203.0.113.17:1300", None, Some("1700000000")), &CLOCK).unwrap().found());
    }

    #[test]
    fn dynamic_nobody() {
        let mut f = dynamic_fake();
        let a = lookup(&f, &q("198.51.100.1:1300", None, None), &CLOCK).unwrap();
        assert_eq!((a.found(), a.reason.as_deref()), (false, Some("198.51.100.1 is not a pool address")));
        let a = lookup(&f, &q("203.0.113.16:2000", None, None), &CLOCK).unwrap();
        assert!(!a.found());
        assert_eq!(a.block, Some(Ports { first: 1792, last: 2047 }));
        assert!(a.reason.as_deref().unwrap().contains("its block (ports 1792-2047) is free"), "{a:?}");
        // a port-class port released: on hold-down, nobody holds it
        f.ports.insert((0, PROTO_TCP, 80), held_word(990));
        let a = lookup(&f, &q("203.0.113.16:80", None, None), &CLOCK).unwrap();
        assert!(!a.found());
        assert!(a.reason.as_deref().unwrap().contains("tcp port on hold-down since"), "{a:?}");
    }

    #[test]
    fn dynamic_port_class_and_static_forwards() {
        let mut f = dynamic_fake();
        f.ports.insert((0, PROTO_TCP, 80), port_word(be(SUB), 22));
        let a = lookup(&f, &q("203.0.113.16:80", None, None), &CLOCK).unwrap();
        assert_eq!(
            (a.inside.as_deref(), a.kind, a.block, a.since.as_deref()),
            (Some("100.64.0.2"), Some(Kind::PortClass), None, None)
        );
        assert_eq!(a.mappings[0].inside_port, Some(22));
        // no time is known for it
        let r = lookup(&f, &q("203.0.113.16:80", None, Some("1700000000")), &CLOCK).unwrap();
        assert!(!r.found() && r.reason.as_deref().unwrap().contains("port-class"), "{r:?}");
        // two protocols, two subscribers: a note
        f.ports.insert((0, PROTO_UDP, 80), port_word(be(OTHER), 53));
        let a = lookup(&f, &q("203.0.113.16:80", None, None), &CLOCK).unwrap();
        assert_eq!(a.inside.as_deref(), Some("100.64.0.2"));
        assert_eq!(a.notes.len(), 1, "{a:?}");
        let u = lookup(&f, &q("203.0.113.16:80", Some(PROTO_UDP), None), &CLOCK).unwrap();
        assert_eq!(u.inside.as_deref(), Some("100.64.1.2"));
        // a static forward in a block SUB owns: the forward's host for TCP, SUB otherwise
        f.blocks.insert(27, (u64::from(be(SUB)), 5));
        f.ports.insert((0, PROTO_TCP, 8080), static_word(be(OTHER), 80));
        let t = lookup(&f, &q("203.0.113.16:8080", Some(PROTO_TCP), None), &CLOCK).unwrap();
        assert_eq!(
            (t.inside.as_deref(), t.kind, t.since.as_deref()),
            (Some("100.64.1.2"), Some(Kind::StaticForward), None)
        );
        assert_eq!(t.block, None);
        assert!(t.notes[0].contains("(ports 7936-8191) is 100.64.0.2's"), "{t:?}");
        let all = lookup(&f, &q("203.0.113.16:8080", None, None), &CLOCK).unwrap();
        assert_eq!((all.inside.as_deref(), all.kind), (Some("100.64.0.2"), Some(Kind::Block)));
        assert!(all.notes[0].contains("a static forward to 100.64.1.2"), "{all:?}");
        assert!(all.text().contains("tcp:      100.64.1.2:80 (static forward)"), "{}", all.text());
    }

    #[test]
    fn deterministic_arithmetic() {
        // 512 subscribers from 100.64.0.0 on 9 addresses: 57 to an address, 1130 ports each
        let mut f =
            Fake { pool: (0..9).map(|i| Ipv4Addr::new(203, 0, 113, 16 + i)).collect(), ..Default::default() };
        f.cfg.port_lo = 1024;
        f.cfg.port_hi = 65535;
        f.cfg.det_base = u32::from(Ipv4Addr::new(100, 64, 0, 0));
        f.cfg.det_count = 512;
        f.cfg.det_per_addr = 57;
        f.cfg.det_ports = 1130;
        f.ports.insert((5, PROTO_UDP, 17980), port_word(be(Ipv4Addr::new(100, 64, 1, 44)), 5353));
        // subscriber 300 = 100.64.1.44: address 300 / 57 = 5, ports 1024 + 15 × 1130
        let a = lookup(&f, &q("203.0.113.21:17980", None, Some("2001-01-01T00:00:00Z")), &CLOCK).unwrap();
        assert_eq!(
            (a.inside.as_deref(), a.kind, a.mode),
            (Some("100.64.1.44"), Some(Kind::Deterministic), Mode::Deterministic)
        );
        assert_eq!(a.range, Some(Ports { first: 17974, last: 19103 }));
        assert_eq!((a.block, a.since.as_deref(), a.mappings.len()), (None, None, 1));
        assert!(a.notes[0].contains("any time"));
        // past the last range of an address (57 × 1130 ports from 1024), past subscriber 511
        let a = lookup(&f, &q("203.0.113.21:65500", None, None), &CLOCK).unwrap();
        assert!(!a.found() && a.reason.as_deref().unwrap().contains("outside every deterministic range"));
        let a = lookup(&f, &q("203.0.113.24:1024", None, None), &CLOCK).unwrap();
        assert_eq!(a.inside.as_deref(), Some("100.64.1.200")); // 456 = 8 × 57
                                                               // the last subscriber, 511 = 8 × 57 + 55, and the range after it, nobody's
        let a = lookup(&f, &q("203.0.113.24:64000", None, None), &CLOCK).unwrap();
        assert_eq!(a.inside.as_deref(), Some("100.64.1.255"));
        assert_eq!(a.range, Some(Ports { first: 63174, last: 64303 }));
        let a = lookup(&f, &q("203.0.113.24:64400", None, None), &CLOCK).unwrap();
        assert!(!a.found() && a.reason.as_deref().unwrap().contains("subscriber 512's"), "{a:?}");
        assert_eq!(a.range, Some(Ports { first: 64304, last: 65433 }));
    }
}
