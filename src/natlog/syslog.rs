// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! NAT events as RFC 5424 syslog messages, one per event:
//! `<PRI>1 TIMESTAMP HOSTNAME natrix PROCID MSGID [natrix@32473 ...] MSG`.
//!
//! TIMESTAMP is the event's own time (it may be exported long after, e.g. after a daemon
//! restart), UTC with milliseconds. The structured data carries the event's fields under
//! the IPFIX element names (`ipfix::Element::name`), so that both exports read alike.
//! Hand-written rather than with the `syslog` crate, which stamps the current time
//! (docs/design/natlog.md).

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use chrono::{DateTime, SecondsFormat};

use super::ipfix::Element;
use super::{quota, threshold, NatEvent, NatEventKind};

/// Facility local0 (RFC 5424 section 6.2.1): the local-use facility operators route
/// application logs by; natrix uses no other.
pub const FACILITY: u8 = 16;
/// Severity of routine events (allocations, sessions): informational.
pub const SEVERITY_INFO: u8 = 6;
/// Severity of a resource running out (exhaustion, quota, threshold): warning, the level an
/// operator alerts on, and what refused subscribers' traffic deserves.
pub const SEVERITY_WARNING: u8 = 4;
/// APP-NAME.
pub const APP_NAME: &str = "natrix";
/// The SD-ID of natrix's structured data: a name@PEN form (RFC 5424 section 6.3.2) with the
/// documentation Private Enterprise Number of RFC 5612.
pub const SD_ID: &str = "natrix@32473";
/// The latest time RFC 5424's four-digit year can carry: 9999-12-31T23:59:59.999Z.
const MAX_TIME_MS: u64 = 253_402_300_799_999;

/// The severity an event is logged with.
pub fn severity(kind: NatEventKind) -> u8 {
    match kind {
        NatEventKind::BlockAlloc
        | NatEventKind::BlockFree
        | NatEventKind::SessionCreate
        | NatEventKind::SessionDelete => SEVERITY_INFO,
        NatEventKind::AddressesExhausted
        | NatEventKind::PortsExhausted
        | NatEventKind::QuotaExceeded
        | NatEventKind::ThresholdReached => SEVERITY_WARNING,
    }
}

/// MSGID (RFC 5424 section 6.2.7): what kind of event, for filtering at the receiver.
pub fn msgid(kind: NatEventKind) -> &'static str {
    match kind {
        NatEventKind::AddressesExhausted => "ADDRESSES_EXHAUSTED",
        NatEventKind::SessionCreate => "SESSION_CREATE",
        NatEventKind::SessionDelete => "SESSION_DELETE",
        NatEventKind::PortsExhausted => "PORTS_EXHAUSTED",
        NatEventKind::QuotaExceeded => "QUOTA_EXCEEDED",
        NatEventKind::BlockAlloc => "BLOCK_ALLOC",
        NatEventKind::BlockFree => "BLOCK_FREE",
        NatEventKind::ThresholdReached => "THRESHOLD_REACHED",
    }
}

/// The RFC 3339 timestamp of `time_ms` (UTC, milliseconds), or None beyond year 9999.
pub fn timestamp(time_ms: u64) -> Option<String> {
    if time_ms > MAX_TIME_MS {
        return None;
    }
    let t = DateTime::from_timestamp_millis(i64::try_from(time_ms).ok()?)?;
    Some(t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// A HOSTNAME field: printable US-ASCII without spaces, at most 255 characters (RFC 5424
/// section 6.2.4); anything else becomes `_`; empty is NILVALUE.
fn header_field(s: &str, max: usize) -> String {
    let out: String = s.chars().take(max).map(|c| if c.is_ascii_graphic() { c } else { '_' }).collect();
    if out.is_empty() {
        "-".into()
    } else {
        out
    }
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        p => format!("proto {p}"),
    }
}

/// Formats events for one sender: its hostname and process id.
#[derive(Debug, Clone)]
pub struct Formatter {
    hostname: String,
    procid: String,
}

impl Formatter {
    pub fn new(hostname: &str, pid: u32) -> Formatter {
        Formatter { hostname: header_field(hostname, 255), procid: pid.to_string() }
    }

    /// The hostname as it appears in messages.
    pub fn hostname(&self) -> &str {
        &self.hostname
    }

    /// The whole message for one event (no trailing newline: over UDP a datagram is a
    /// message, RFC 5426 section 3.1).
    pub fn format(&self, ev: &NatEvent) -> String {
        let pri = u16::from(FACILITY) * 8 + u16::from(severity(ev.kind));
        let ts = timestamp(ev.time_ms).unwrap_or_else(|| "-".into());
        let mut s =
            format!("<{pri}>1 {ts} {} {APP_NAME} {} {} [{SD_ID}", self.hostname, self.procid, msgid(ev.kind));
        let (params, msg) = describe(ev);
        for (name, value) in params {
            // values are numbers and addresses; escaped all the same (section 6.3.3)
            let _ = write!(s, " {name}=\"{}\"", escape(&value));
        }
        s.push_str("] ");
        s.push_str(&msg);
        s
    }
}

/// PARAM-VALUE escaping: `"`, `\` and `]` get a backslash.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '"' | '\\' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The structured-data parameters (IPFIX element names and values) and the human message.
fn describe(ev: &NatEvent) -> (Vec<(&'static str, String)>, String) {
    let mut p: Vec<(&'static str, String)> = vec![(Element::NatEvent.name(), (ev.kind as u8).to_string())];
    let mut add = |e: Element, v: String| p.push((e.name(), v));
    let ip = |a: Ipv4Addr| a.to_string();
    let msg = match ev.kind {
        NatEventKind::BlockAlloc | NatEventKind::BlockFree => {
            add(Element::SourceIpv4Address, ip(ev.inside));
            add(Element::PostNatSourceIpv4Address, ip(ev.outside));
            add(Element::PortRangeStart, ev.port_start.to_string());
            add(Element::PortRangeEnd, ev.port_end.to_string());
            let what = match (ev.kind, ev.interim) {
                (NatEventKind::BlockFree, _) => "released",
                (_, true) => "holds (interim)",
                _ => "allocated",
            };
            if ev.interim {
                p.push(("interim", "1".into()));
            }
            format!("{} {what} ports {}-{} of {}", ev.inside, ev.port_start, ev.port_end, ev.outside)
        }
        NatEventKind::SessionCreate | NatEventKind::SessionDelete => {
            add(Element::ProtocolIdentifier, ev.proto.to_string());
            add(Element::SourceIpv4Address, ip(ev.inside));
            add(Element::SourceTransportPort, ev.in_port.to_string());
            add(Element::PostNatSourceIpv4Address, ip(ev.outside));
            add(Element::PostNaptSourceTransportPort, ev.out_port.to_string());
            if let Some(r) = ev.remote {
                add(Element::DestinationIpv4Address, ip(*r.ip()));
                add(Element::DestinationTransportPort, r.port().to_string());
            }
            let what = if ev.kind == NatEventKind::SessionCreate { "created" } else { "deleted" };
            let to = ev.remote.map(|r| format!(" to {r}")).unwrap_or_default();
            format!(
                "{} session {}:{} as {}:{}{to} {what}",
                proto_name(ev.proto),
                ev.inside,
                ev.in_port,
                ev.outside,
                ev.out_port
            )
        }
        NatEventKind::AddressesExhausted => {
            add(Element::NatPoolId, ev.pool_id.to_string());
            format!("pool {}: no address has a free port block", ev.pool_id)
        }
        NatEventKind::PortsExhausted => {
            add(Element::PostNatSourceIpv4Address, ip(ev.outside));
            add(Element::ProtocolIdentifier, ev.proto.to_string());
            format!("{}: no free port ({})", ev.outside, proto_name(ev.proto))
        }
        NatEventKind::QuotaExceeded => {
            add(Element::NatQuotaExceededEvent, ev.detail.to_string());
            let (limit, per_user, what) = match ev.detail {
                quota::MAX_SESSIONS => (Some(Element::MaxSessionEntries), false, "session entries"),
                quota::MAX_BIB => (Some(Element::MaxBibEntries), false, "BIB entries"),
                quota::MAX_PER_USER => (Some(Element::MaxEntriesPerUser), true, "entries per user"),
                quota::MAX_SUBSCRIBERS => (Some(Element::MaxSubscribers), false, "subscribers"),
                quota::MAX_FRAGMENTS => {
                    (Some(Element::MaxFragmentsPendingReassembly), true, "fragments pending reassembly")
                }
                _ => (None, ev.inside != Ipv4Addr::UNSPECIFIED, "entries"),
            };
            match limit {
                Some(e) => add(e, ev.limit.to_string()),
                None => p.push(("limit", ev.limit.to_string())),
            }
            let mut m = format!("quota exceeded: {} {what} at most", ev.limit);
            if per_user {
                // after `add`'s last use: `p` is pushed to directly here
                p.push((Element::SourceIpv4Address.name(), ip(ev.inside)));
                let _ = write!(m, " ({})", ev.inside);
            }
            m
        }
        NatEventKind::ThresholdReached => {
            add(Element::NatThresholdEvent, ev.detail.to_string());
            add(Element::NatPoolId, ev.pool_id.to_string());
            if ev.detail == threshold::POOL_HIGH {
                add(Element::AddressPoolHighThreshold, ev.limit.to_string());
                format!("pool {}: {}% of its port blocks in use", ev.pool_id, ev.limit)
            } else {
                p.push(("threshold", ev.limit.to_string()));
                format!("pool {}: threshold {} reached ({})", ev.pool_id, ev.detail, ev.limit)
            }
        }
    };
    (p, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddrV4;

    const T: u64 = 1_767_225_600_123; // 2026-01-01T00:00:00.123Z

    fn f() -> Formatter {
        Formatter::new("gw1", 4242)
    }

    #[test]
    fn timestamps_are_utc_with_milliseconds() {
        assert_eq!(timestamp(T).unwrap(), "2026-01-01T00:00:00.123Z");
        assert_eq!(timestamp(0).unwrap(), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(MAX_TIME_MS).unwrap(), "9999-12-31T23:59:59.999Z");
        assert_eq!(timestamp(MAX_TIME_MS + 1), None);
    }

    #[test]
    fn block_allocation_line_exact() {
        let mut ev = NatEvent::new(NatEventKind::BlockAlloc, T);
        ev.inside = Ipv4Addr::new(100, 64, 0, 1);
        ev.outside = Ipv4Addr::new(203, 0, 113, 5);
        ev.port_start = 1024;
        ev.port_end = 1279;
        assert_eq!(
            f().format(&ev),
            "<134>1 2026-01-01T00:00:00.123Z gw1 natrix 4242 BLOCK_ALLOC [natrix@32473 natEvent=\"16\" \
             sourceIPv4Address=\"100.64.0.1\" postNATSourceIPv4Address=\"203.0.113.5\" \
             portRangeStart=\"1024\" portRangeEnd=\"1279\"] 100.64.0.1 allocated ports 1024-1279 of 203.0.113.5"
        );
        ev.interim = true;
        assert!(f().format(&ev).contains(" interim=\"1\"] 100.64.0.1 holds (interim) ports"));
    }

    #[test]
    fn session_lines_exact() {
        let mut ev = NatEvent::new(NatEventKind::SessionDelete, T);
        ev.proto = 17;
        ev.inside = Ipv4Addr::new(100, 64, 0, 1);
        ev.in_port = 5353;
        ev.outside = Ipv4Addr::new(203, 0, 113, 5);
        ev.out_port = 1029;
        assert_eq!(
            f().format(&ev),
            "<134>1 2026-01-01T00:00:00.123Z gw1 natrix 4242 SESSION_DELETE [natrix@32473 natEvent=\"5\" \
             protocolIdentifier=\"17\" sourceIPv4Address=\"100.64.0.1\" sourceTransportPort=\"5353\" \
             postNATSourceIPv4Address=\"203.0.113.5\" postNAPTSourceTransportPort=\"1029\"] \
             udp session 100.64.0.1:5353 as 203.0.113.5:1029 deleted"
        );
        ev.kind = NatEventKind::SessionCreate;
        ev.remote = Some(SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 53));
        let line = f().format(&ev);
        assert!(line.starts_with("<134>1 2026-01-01T00:00:00.123Z gw1 natrix 4242 SESSION_CREATE "));
        assert!(line.ends_with(
            " destinationIPv4Address=\"198.51.100.7\" destinationTransportPort=\"53\"] \
             udp session 100.64.0.1:5353 as 203.0.113.5:1029 to 198.51.100.7:53 created"
        ));
    }

    #[test]
    fn resource_events_are_warnings_with_their_limits() {
        let mut ev = NatEvent::new(NatEventKind::QuotaExceeded, T);
        ev.detail = quota::MAX_PER_USER;
        ev.limit = 4;
        ev.inside = Ipv4Addr::new(100, 64, 0, 9);
        assert_eq!(
            f().format(&ev),
            "<132>1 2026-01-01T00:00:00.123Z gw1 natrix 4242 QUOTA_EXCEEDED [natrix@32473 natEvent=\"13\" \
             natQuotaExceededEvent=\"3\" maxEntriesPerUser=\"4\" sourceIPv4Address=\"100.64.0.9\"] \
             quota exceeded: 4 entries per user at most (100.64.0.9)"
        );
        ev.detail = quota::MAX_SESSIONS;
        ev.limit = 1 << 20;
        assert!(f().format(&ev).contains("natQuotaExceededEvent=\"1\" maxSessionEntries=\"1048576\"]"));

        let mut ev = NatEvent::new(NatEventKind::ThresholdReached, T);
        ev.detail = threshold::POOL_HIGH;
        ev.pool_id = 1;
        ev.limit = 90;
        assert_eq!(
            f().format(&ev),
            "<132>1 2026-01-01T00:00:00.123Z gw1 natrix 4242 THRESHOLD_REACHED [natrix@32473 natEvent=\"18\" \
             natThresholdEvent=\"1\" natPoolId=\"1\" addressPoolHighThreshold=\"90\"] \
             pool 1: 90% of its port blocks in use"
        );

        let mut ev = NatEvent::new(NatEventKind::PortsExhausted, T);
        ev.outside = Ipv4Addr::new(203, 0, 113, 5);
        ev.proto = 6;
        assert!(f().format(&ev).ends_with(
            "PORTS_EXHAUSTED [natrix@32473 natEvent=\"12\" postNATSourceIPv4Address=\"203.0.113.5\" \
             protocolIdentifier=\"6\"] 203.0.113.5: no free port (tcp)"
        ));
        let mut ev = NatEvent::new(NatEventKind::AddressesExhausted, T);
        ev.pool_id = 1;
        assert!(f().format(&ev).starts_with("<132>1 "));
        assert!(f()
            .format(&ev)
            .contains("ADDRESSES_EXHAUSTED [natrix@32473 natEvent=\"3\" natPoolId=\"1\"]"));
    }

    #[test]
    fn header_fields_stay_within_the_grammar() {
        assert_eq!(Formatter::new("gw 1\u{e9}", 1).hostname(), "gw_1_");
        assert_eq!(Formatter::new("", 1).hostname(), "-");
        assert_eq!(Formatter::new(&"h".repeat(300), 1).hostname().len(), 255);
        let ev = NatEvent::new(NatEventKind::AddressesExhausted, u64::MAX);
        assert!(Formatter::new("gw1", 1).format(&ev).starts_with("<132>1 - gw1 natrix 1 "));
        assert_eq!(escape("a\"b\\c]d"), "a\\\"b\\\\c\\]d");
    }
}
